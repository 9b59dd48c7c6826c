"""Quiz of notebook 07 (tile sizes, occupancy and measured traffic).

Notebook 07 is being split (tile sizes & occupancy -> 07, measured traffic -> 08); when it
is, move the measured-traffic questions to nb08.py and shift today's nb08 to nb09.
"""

from ..quiz import Question

QUESTIONS = [
    Question(
        "N = 4,096, d = 64, fp32, Br = 64, no mask. How many times does the two-level model "
        "charge reading all of K and V from outer memory, for one head?",
        ["Once", "32 times", "64 times", "4,096 times"],
        answer=2,
        why="Tr = ceil(4,096 / 64) = 64 query blocks, and each one's inner loop loads every "
            "K_j and V_j.",
        feedback=("Once is what an ideal cache would give (and roughly what DRAM sees on the "
                  "H200); the model charges one read per query block.",
                  "Count query blocks with Br = 64, not 128.", "",
                  "That is one read per query ROW, the one-thread-per-row kernel's count.")),
    Question(
        "A tile shape needs 120 KiB of shared memory per block on an H200 (228 KiB per SM, "
        "1 KiB reserved per block). What happens?",
        ["It launches only after the kernel opts in beyond 48 KiB, and then 1 block fits per SM",
         "It cannot launch: blocks are limited to 48 KiB",
         "It launches without opt-in and 2 blocks fit per SM"],
        answer=0,
        why="Hopper allows up to 227 KiB per block after the opt-in call; "
            "233,472 // ceil(122,880 + 1,024, 128) = 1 block per SM.",
        feedback=("", "48 KiB is the default, not the limit: an opt-in raises it to 227 KiB.",
                  "Without opt-in the launch fails; and 2 x 121 KiB exceeds 228 KiB.")),
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
        "Doubling Br (block_q) at fixed d, N and Bc does what?",
        ["Halves the model's K/V re-reads, but takes more shared memory and registers, "
         "so fewer blocks may stay resident",
         "Halves the FLOPs",
         "Changes nothing: only Bc matters for traffic"],
        answer=0,
        why="T_r = ceil(N / Br) query blocks each read all of K and V; FLOPs stay "
            "4 N^2 d. The bigger Q tile and micro-tile cost on-chip resources.",
        feedback=("", "FLOPs are 4 N^2 d for any tile shape.",
                  "K and V are re-read once per QUERY block, whose count depends on Br.")),
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
