"""Quiz of notebook 02 (the online softmax)."""

from ..quiz import Question

QUESTIONS = [
    Question("In float16, what does the naive softmax return for the row x = [2, 4, 12]?",
             ["The correct probabilities", "NaN entries", "All zeros", "[0, 0, 1] exactly"],
             answer=1,
             why=("exp(12) is about 162,755, above float16's largest value 65,504, so it "
                  "becomes inf; inf / inf = NaN, and the finite entries become x / inf = 0."),
             feedback=("Compute exp(12) first and compare it with float16's largest value, "
                       "65,504.", "",
                       "The two small entries do become 0, but the large one is inf / inf.",
                       "That is what the SAFE softmax (max subtracted) nearly gives; the naive "
                       "one overflows first.")),
    Question("The running max rises from m = 3 to m' = 5 when a new score x = 5 arrives. "
             "What happens to the running sum l?",
             ["It is multiplied by exp(3 - 5), about 0.135, then exp(0) = 1 is added",
              "It is multiplied by exp(5 - 3), then 1 is added",
              "Nothing: only new terms change", "It is reset to 1"],
             answer=0,
             why=("Every term in l was exp(x_i - 3); relative to the new max they must be "
                  "exp(x_i - 5) = exp(x_i - 3) * exp(3 - 5). The factor is <= 1."),
             feedback=("",
                       "The factor must shrink the old terms (the max grew): exp(m - m') <= 1, "
                       "not its inverse.",
                       "The old terms were measured against the old max; forgetting to rescale "
                       "them is the classic bug.",
                       "Resetting forgets every earlier score: the softmax needs them all.")),
    Question("Why does it matter that merging two (m, l) states is associative and commutative?",
             ["It makes each merge cheaper",
              "Key tiles can be processed in any grouping or order, even in parallel, and "
              "combined into the same result up to rounding",
              "It removes the need to subtract the max"],
             answer=1,
             why=("The merged state depends only on which scores were seen. So a kernel may "
                  "walk the key tiles in any order, or split them across workers, and combine."),
             feedback=("The cost of one merge is the same; what changes is the freedom to "
                       "order and split the work.", "",
                       "The max is still subtracted: it is part of the state (m).")),
]
