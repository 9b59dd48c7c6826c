"""Quiz of notebook 06 (the Numba CUDA kernel)."""

from ..quiz import Question

QUESTIONS = [
    Question("A thread of the fast kernel computes a TM x TN = 4 x 8 micro-tile of S = Q K^T "
             "over d = 64. How many shared-memory loads and multiply-adds does it do?",
             ["64 x (4 + 8) = 768 loads for 64 x 32 = 2,048 multiply-adds",
              "2,048 loads for 2,048 multiply-adds",
              "4,096 loads for 2,048 multiply-adds"],
             answer=0,
             why="For each of the d steps the thread loads TM values of Q and TN values of K "
                 "(12 loads) and does TM x TN = 32 multiply-adds with them: loads grow with "
                 "TM + TN, work with TM x TN. That is why micro-tiles beat one score per thread.",
             feedback=("", "One load per multiply-add is the one-score-per-thread kernel; the "
                       "micro-tile reuses each loaded value.",
                       "Two loads per multiply-add is a single score per thread (a q and a k "
                       "value each step).")),
    Question("A kernel writes `acc[i] = acc[i] * 0.5` with acc a float32 local array. What "
             "happens in Numba?",
             ["The multiply is done in float64, then rounded back to float32",
              "Nothing: 0.5 is exact in float32",
              "A compile error"],
             answer=0,
             why="A Python float literal is float64 and promotes the arithmetic; write "
                 "float32(0.5). On many GPUs float64 is 2x to 64x slower.",
             feedback=("", "The value is exact, but its TYPE is float64, and the type decides "
                       "the arithmetic.", "Numba compiles it silently, in float64.")),
    Question("Why does causal masking make the fast kernel almost 2x faster but not the dense "
             "baseline?",
             ["The fast kernel never visits tiles that the mask hides; the dense one still "
              "computes and stores every score",
              "The dense kernel does not support causal masks",
              "Masked scores are slower to exponentiate"],
             answer=0,
             why="Skipping a hidden tile skips its loads and its arithmetic; the dense path "
                 "computes the full Tq x Tk matrix and only then writes -inf into half of it.",
             feedback=("", "It does support them: it masks after computing every score.",
                       "exp(-inf) is as fast as any exp; the saving is in never computing "
                       "hidden tiles.")),
    Question("A colleague swaps their model's attention for a kernel named 'flash_attention' "
             "at N = 256, d = 64, and expects the speed-up quoted in a paper. What should they "
             "expect?",
             ["The paper's speed-up: the algorithm is the same",
              "It depends on the GPU's memory hierarchy, the tile sizes, the sequence length "
              "and the implementation; at N = 256 the score matrix is small, so the gain may "
              "be none. Measure it",
              "A slowdown in every case, since FlashAttention recomputes"],
             answer=1,
             why="The benefit comes from moving fewer bytes through a particular memory "
                 "hierarchy; it grows with N and depends on how well the kernel is written, "
                 "not on its name. This notebook's own kernels differ by large factors at the "
                 "same N.",
             feedback=("A name does not carry a speed-up: the paper's numbers are for its GPU, "
                       "its sizes and its implementation.", "",
                       "The forward does not recompute; and short sequences are not always "
                       "slower either. Measure.")),
]
