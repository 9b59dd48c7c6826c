"""Quiz of notebook 07 (tile sizes and occupancy)."""

from ..quiz import Question

QUESTIONS = [
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
]
