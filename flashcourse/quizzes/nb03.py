"""Quiz of notebook 03 (the tiled forward)."""

from ..quiz import AVOIDED_OBJECT, Question

QUESTIONS = [
    AVOIDED_OBJECT,
    Question("Tq = Tk = 4,096 with causal masking and Br = Bc = 64. About which share of the "
             "64 x 64 = 4,096 tiles is skipped?",
             ["None: masking happens inside each tile", "A little under half (2,016 tiles)",
              "Exactly half", "Three quarters"],
             answer=1,
             why=("Every tile strictly above the diagonal tile is hidden: 64 x 63 / 2 = 2,016 of "
                  "4,096 = 49.2%. The 64 diagonal tiles are partial and must be computed."),
             feedback=("Tiles hidden in full are skipped before any arithmetic; only the "
                       "partial (diagonal) tiles are masked inside.", "",
                       "The 64 diagonal tiles are only partly hidden and are computed, so fewer "
                       "than half are skipped.",
                       "Count the tiles above the diagonal: 64 x 63 / 2.")),
    Question("In fp16, the tiled output differs from the float64 reference by about 1e-4 "
             "relative, in float64 by about 1e-16. Why?",
             ["FlashAttention approximates attention more coarsely in fp16",
              "The error is set by the number format's rounding; the algorithm is the same",
              "The tiles are too small in fp16"],
             answer=1,
             why=("Tiling changes only the order of additions. The size of each rounding step "
                  "is the format's unit roundoff, which is about 1e-16 in float64 and about 5e-4 "
                  "in float16; a dense computation in the same precision shows the same level."),
             feedback=("The algorithm is exact in every precision; a dense fp16 computation "
                       "shows the same error level.", "",
                       "Tile size changes the order of additions, not the size of each "
                       "rounding step.")),
]
