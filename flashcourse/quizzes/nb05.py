"""Quiz of notebook 05 (the Numba CPU kernel)."""

from ..quiz import Question

QUESTIONS = [
    Question("Why does flashcourse.cpu pass an explicit set of fast-math flags instead of "
             "fastmath=True?",
             ["fastmath=True includes nnan and ninf, which let the compiler drop the guards for "
              "a running max of -inf",
              "fastmath=True is slower than no fast-math at all",
              "fastmath=True changes the result of every addition by a large amount"],
             answer=0,
             why="With ninf the compiler may assume no value is infinite, so a test such as "
                 "m > -inf is folded to true and a fully masked row yields NaN. reassoc and "
                 "contract are kept: they allow vector sums and FMAs.",
             feedback=("", "Fast-math is usually faster; the problem is correctness with -inf.",
                       "Reassociation changes sums only at rounding level; the danger is the "
                       "infinity assumptions.")),
    Question("What does prange parallelise in cpu.forward?",
             ["The (head, query block) work items, each owning its own rows of O, m and l",
              "The key blocks of one query block, each thread adding into the same acc",
              "The d elements of one dot product"],
             answer=0,
             why="Query blocks are independent in the FA2 loop order: no two threads write the "
                 "same output row, so no locks are needed. Splitting key blocks would need a "
                 "merge of (m, l, acc) states.",
             feedback=("", "Threads adding into one acc would race; splitting key blocks needs a "
                       "merge of (m, l, acc) states.",
                       "d = 64 multiply-adds are far too little work per thread.")),
    Question("Causal, Tq = Tk = 4,096, Br = Bc = 64: how many (query block, key block) tiles "
             "does the tiled forward compute?",
             ["2,016", "2,048", "2,080", "4,096"],
             answer=2,
             why="Query block i (0-based) sees key blocks 0..i: 1 + 2 + ... + 64 = 64 x 65 / 2 "
                 "= 2,080 tiles, of which 64 are partial diagonal tiles. 4,096 - 2,080 = 2,016 "
                 "are skipped.",
             feedback=("2,016 is the number SKIPPED (strictly above the diagonal).",
                       "Exactly half forgets that the 64 diagonal tiles are computed.", "",
                       "Tiles hidden in full are skipped, before any arithmetic.")),
    Question("At N = 65536, d = 64, float32, one head, roughly how much memory does the tiled "
             "CPU kernel need?",
             ["Tens of MiB: inputs and outputs of size N x d, plus fixed-size tiles",
              "16 GiB, like the dense score matrix",
              "4 GiB: a quarter of the score matrix, thanks to the tiles"],
             answer=0,
             why="65536 x 64 x 4 bytes = 16 MiB per array, plus a few hundred KiB of tiles per "
                 "thread; nothing of size N x N is ever allocated.",
             feedback=("", "That is the dense score matrix, which the tiled kernel never "
                       "allocates.",
                       "Tiles are a fixed size (Br x Bc), independent of N; no fraction of the "
                       "N x N matrix is kept.")),
    Question("Why is version 3 (tiles stored with the query rows last) faster than version 2?",
             ["Its inner loops run along Br query rows, long enough to vectorise well, and the "
              "row max and sum become elementwise vector operations",
              "It does fewer floating-point operations",
              "It skips more tiles"],
             answer=0,
             why="Both do the same FLOPs and skip the same causal tiles. Version 2's P V loop "
                 "runs along d = 64 and its row max is a horizontal reduction; the transposed "
                 "layout turns both into long, vertical loops.",
             feedback=("", "Both versions do the same arithmetic; only the memory layout "
                       "differs.", "Both skip the same causal tiles.")),
    Question("Why is exp computed as exp2 with log2(e) folded into the scale?",
             ["2^x splits into an integer power 2^n, written into the float's exponent bits, "
              "times a short polynomial: only multiplies and adds, which vectorise",
              "exp2 is more accurate than exp for negative arguments",
              "It halves the number of scores to compute"],
             answer=0,
             why="e^s = 2^(s log2 e). Folding log2 e into the scale costs nothing, and a "
                 "polynomial exp2 replaces a scalar library call inside the hottest loop.",
             feedback=("", "The accuracy is about the same; the gain is vectorisation.",
                       "The number of scores is Tq x Tk either way.")),
]
