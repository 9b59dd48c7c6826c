"""Quiz of notebook 01 (dense attention and its memory)."""

from ..quiz import Question

QUESTIONS = [
    Question("Tq = Tk = 8,192 and fp16 scores. How large is one head's dense score matrix?",
             ["32 MiB", "64 MiB", "128 MiB", "256 MiB"],
             answer=2,
             why=("8,192 x 8,192 x 2 B = 134,217,728 B = 128 MiB: doubling both lengths from "
                  "4,096 multiplies the 32 MiB example by 2 x 2 = 4."),
             feedback=("32 MiB is the 4,096 x 4,096 example: the size grows with BOTH lengths.",
                       "Doubling both lengths multiplies the entries by 4, not 2: "
                       "M_score = Tq x Tk x s.", "",
                       "That would be 4-byte (fp32) scores; fp16 stores 2 bytes per score.")),
    Question("A batch of B = 2 requests, H = 8 heads, each request padded to Tq = Tk = 4,096, "
             "fp16 scores. How much memory do the dense score matrices of one layer take?",
             ["32 MiB", "256 MiB", "512 MiB", "16 MiB"],
             answer=2,
             why=("M_score = Tq Tk s = 32 MiB is for ONE head of ONE request with no padding. "
                  "B x H = 16 such matrices: 16 x 32 MiB = 512 MiB. Padded positions are "
                  "stored too, so padding counts in Tq and Tk."),
             feedback=("32 MiB is M_score itself, which assumes one head and one request: "
                       "multiply by B x H.",
                       "That counts only the heads (8 x 32 MiB) and forgets the 2 requests.", "",
                       "Halving is what a stored-triangle causal layout might save; nothing "
                       "here halves the storage.")),
    Question("With a causal mask, about half of the pairs are hidden. How much score memory "
             "does each implementation actually allocate for one head (Tq = Tk = N)?",
             ["Dense, masking after computing S: N x N scores; a fused tiled kernel: only "
              "on-chip tiles, no N x N buffer",
              "Both allocate N x N / 2 scores, since the mask hides half",
              "Both allocate N x N scores; the mask changes nothing"],
             answer=0,
             why=("M_score is the formula's payload, not what a program allocates. A dense "
                  "implementation computes the full S and then writes -inf into the hidden "
                  "half: it still allocates N x N. Kernel fusion (scores, softmax and P V in one "
                  "kernel) removes the buffer altogether: only Br x Bc tiles exist, on chip."),
             feedback=("",
                       "A mask hides values; it does not shrink an array. Only a layout that "
                       "stores the triangle, or fusion, changes the allocation.",
                       "Fusion changes the allocation: a fused kernel never allocates the "
                       "N x N buffer at all.")),
    Question("How does FlashAttention differ from keeping only the top-k scores of each row?",
             ["Both approximate attention; FlashAttention is just faster",
              "FlashAttention computes the same function, up to rounding; top-k changes it",
              "FlashAttention drops the causal mask to save memory"],
             answer=1,
             why=("FlashAttention reorganises the computation into tiles with running softmax "
                  "statistics; every query-key pair still contributes. Top-k drops pairs, "
                  "which changes the result far beyond rounding."),
             feedback=("FlashAttention is exact: every pair still contributes, and the result "
                       "agrees with dense attention to rounding.", "",
                       "The mask is kept; FlashAttention computes the same masked attention.")),
]
