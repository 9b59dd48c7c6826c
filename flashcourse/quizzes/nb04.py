"""Quiz of notebook 04 (the IO traffic model)."""

from ..quiz import Question

QUESTIONS = [
    Question(
        "Tq = Tk = 4,096, d = 64, fp16, Br = Bc = 64, no mask. How many bytes of K and V does "
        "the tiled forward (FA2 order) read from outer memory?",
        ["1 MiB", "32 MiB", "64 MiB", "128 MiB"],
        answer=2,
        why="Each of the Tr = 4,096 / 64 = 64 query blocks reads all of K and V: "
            "2 x 64 x 4,096 x 64 x 2 B = 67,108,864 B = 64 MiB (tiled_traffic counts the same).",
        feedback=("That reads K and V once in all; the FA2 inner loop re-reads them for every "
                  "query block.",
                  "That counts K only: V is loaded alongside every K tile.", "",
                  "That is twice the count: is e = 4 (fp32) used instead of 2?")),
    Question(
        "Going from dense attention to tiled attention with Br = Bc = 64, the number of "
        "floating-point operations of the two matrix products...",
        ["stays the same: 4 Tq Tk d",
         "drops by a factor Br",
         "drops to 4 (Tq + Tk) d, since no score matrix is stored"],
        answer=0,
        why="Every query still meets every visible key; tiling changes where the scores live "
            "(on chip, briefly), not how many there are. attention_flops gives the same number.",
        feedback=("", "Tiling moves data, not arithmetic: every pair's dot product is still "
                  "computed.",
                  "Not storing S does not remove the work of computing it; the pair count is "
                  "still Tq x Tk.")),
    Question(
        "Removing the 32 MiB score matrix of one 4,096 x 4,096 fp16 head: how much faster "
        "will attention run?",
        ["About 2x, since half the bytes are gone",
         "The storage calculation cannot say: it counts bytes not stored; speed depends on "
         "the traffic, the arithmetic, the GPU and the implementation, and must be measured",
         "Exactly 32 MiB / HBM bandwidth faster"],
        answer=1,
        why="M_score is a storage calculation, not a promised speed-up. Time depends on bytes "
            "moved AND on FLOPs, on-chip limits and the kernel's quality; the notebooks measure "
            "speed separately and sometimes find the model and the GPU disagree.",
        feedback=("No ratio of times follows from a count of stored bytes.", "",
                  "Saving the write and re-read of S is one term of the time; the arithmetic "
                  "and the rest of the traffic remain, and overlap changes the sum.")),
    Question(
        "Doubling the sequence length N (Tq = Tk = N) multiplies the dense score matrix's "
        "memory M_score by...",
        ["2", "4", "8"],
        answer=1,
        why="M_score = Tq Tk s = N^2 s: twice the length means four times the bytes.",
        feedback=("Both Tq and Tk double.", "", "Only two lengths multiply, not three.")),
    Question(
        "Why not simply make the tiles as large as possible?",
        ["Large tiles change the result of attention",
         "The tile must fit the on-chip scratchpad, and big tiles leave room for fewer "
         "resident blocks per SM",
         "Large tiles increase the number of FLOPs"],
        answer=1,
        why="Bigger tiles do cut re-reads, but a footprint above the per-block limit cannot run "
            "at all, and one resident block per SM leaves nothing to hide memory latency.",
        feedback=("Tile size changes the order of additions only: the result is the same "
                  "up to rounding.", "",
                  "FLOPs are 4 Tq Tk d whatever the tile size.")),
]
