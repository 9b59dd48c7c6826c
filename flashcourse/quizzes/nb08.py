"""Quiz of notebook 08 (traffic measured on an H200 against the model)."""

from ..quiz import Question

QUESTIONS = [
    Question(
        "The flash kernel's measured DRAM traffic is tens of times below the two-level "
        "model at N = 4096 with 16 heads. Why?",
        ["Blocks running together re-read the same K and V tiles, and the L2 cache serves "
         "the repeats",
         "The kernel skips most key blocks",
         "Nsight Compute does not count reads"],
        answer=0,
        why="The model charges K and V once per query block from outer memory; on the GPU "
            "most of those re-reads are L2 hits, so DRAM sees K and V about once. L2 traffic "
            "is much closer to the model but still below it (about 0.4-0.7 of it in several "
            "recorded configurations): the two-level model ignores the L1 and the caches.",
        feedback=("", "Without a mask every key block is visited; the re-reads happen, but "
                  "in L2.", "It counts reads (dram__bytes_read.sum); they are just L2 hits.")),
    Question(
        "In the single-head runs, one head's K and V grew past the L2 cache. What did the "
        "measured DRAM traffic of K and V do?",
        ["It rose from about one read to many reads, yet stayed far below the model's "
         "one read per query block",
         "It jumped to exactly the model's prediction",
         "It stayed at one read: L2 size does not matter"],
        answer=0,
        why="Once K and V no longer fit, later blocks must fetch them from DRAM again; but "
            "the blocks resident together still share each fetch through L2.",
        feedback=("", "Blocks resident together still share fetches, so DRAM stays below the "
                  "model.", "Once K and V exceed L2 they are evicted between uses.")),
]
