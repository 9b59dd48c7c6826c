"""Quiz of notebook 10 (tensor cores)."""

from ..quiz import Question

QUESTIONS = [
    Question("One warp issues mma.sync m16n8k16 with fp16 inputs. How many FLOPs is that, and "
             "what is rounded?",
             ["4,096 FLOPs; only A and B are 16-bit, products are exact and sums are fp32",
              "2,048 FLOPs; everything, sums included, is fp16",
              "4,096 FLOPs; A, B and the sums are all fp16",
              "256 FLOPs per thread, all in fp32"],
             answer=0,
             why=("2 x 16 x 8 x 16 = 4,096 (a multiply and an add per product). The accumulator "
                  "C/D is fp32; only the inputs (Q, K, then P, V) are 16-bit."),
             feedback=("",
                       "16 x 8 x 16 = 2,048 multiply-adds is 4,096 FLOPs; and the sums are kept "
                       "in fp32, not fp16.",
                       "The count is right, but the f32 in .f32.f16.f16.f32 is the accumulator: "
                       "sums stay fp32.",
                       "The warp shares one tile product: 4,096 FLOPs for the warp, and the "
                       "inputs are rounded to fp16.")),
    Question("Why does P never go through shared memory between S = Q K^T and O = P V?",
             ["P is recomputed from lse in the PV step",
              "The tensor core keeps P internally between two instructions",
              "The C layout of two 16 x 8 accumulator tiles equals the A layout of one "
              "16 x 16 tile"],
             answer=2,
             why=("Each lane already holds exactly the elements of P that it must feed as A; "
                  "the kernel only rounds them to 16 bits and packs two per register."),
             feedback=("Recomputing P from lse is the backward pass's trick; the forward has P "
                       "in registers already.",
                       "An mma.sync keeps nothing between instructions: its results come back "
                       "to the lanes' registers.",
                       "")),
    Question("fp32 inputs, 3xTF32: which term is dropped, and how large is it next to |a b|?",
             ["big_a x big_b, the largest term",
              "small_a x small_b, about 2^-22 of |a b|",
              "Nothing: 3xTF32 is exact",
              "small_a x big_b, about 2^-11 of |a b|"],
             answer=1,
             why=("x = big + small + r with |small| <= 2^-11 |x|, so the product of the two small "
                  "parts is ~2^-22 |a b|, below fp32's own rounding after a few additions."),
             feedback=("big x big is the main term: dropping it would lose everything.",
                       "",
                       "r (the part of x that neither tf32 number holds) and the dropped "
                       "small x small term remain, both ~2^-22.",
                       "small x big is one of the three products computed; dropping it would "
                       "leave the ~2^-11 error of one-pass TF32.")),
    Question("Prefetching the next K, V block into registers made the fp16 kernel about twice "
             "as fast. What did it change?",
             ["It halved the bytes read from global memory",
              "The warps no longer wait together for each block's loads: the loads are in "
              "flight while the tensor cores work",
              "It let the kernel skip the masked causal blocks",
              "It made the tensor cores run at a higher clock"],
             answer=1,
             why=("The bytes are the same. Latency, not bandwidth, was the limit: with the loads "
                  "after the barrier and nothing else to do, the SM sat idle during each load."),
             feedback=("Every K, V element is still read once per query block; only when the "
                       "read is issued changed.",
                       "",
                       "Causal skipping was there before, and the sweep timed non-causal runs.",
                       "Clocks do not depend on the code; the SM's idle time did.")),
]
