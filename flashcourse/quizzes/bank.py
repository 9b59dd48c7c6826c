"""Questions shared by more than one notebook, and the lesson's own question (one home)."""

from ..quiz import Question

#: The lesson's own "check your understanding" question (from the course seed). Asked once,
#: in notebook 03, where the learner has seen the whole tiled forward.
AVOIDED_OBJECT = Question(
    "What is the main avoided object in tiled IO-aware attention?",
    ["The full attention score/probability matrix in outer memory",
     "All model weights",
     "The causal relationship between tokens"],
    answer=0,
    why=("Tiles and running normalization allow the result to be accumulated without "
         "retaining every pairwise score in HBM. The weights are still needed, and a "
         "causal mask is still applied: only the Tq x Tk intermediate disappears."),
    feedback=("",
              "Weights are not what attention's memory problem is about: Q, K, V come from "
              "them, and they are still read in full.",
              "The causal mask is still applied, tile by tile; FlashAttention computes the same "
              "function, so no relationship between tokens is dropped."),
)
