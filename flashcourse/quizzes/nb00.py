"""Quiz of notebook 00 (start here)."""

from ..quiz import Question

QUESTIONS = [
    Question("Your machine has no NVIDIA GPU. What happens in the CUDA notebook?",
             ["It cannot be run",
              "Kernels run in Numba's CUDA simulator on the CPU, on tiny sizes, and larger "
              "results come from recorded H200 measurements",
              "Numba compiles the kernels for the CPU at full speed"],
             answer=1,
             why=("import flashcourse switches Numba to its CUDA simulator when no GPU is found. "
                  "It runs kernels as Python threads: right answers, slowly."),
             feedback=("Every notebook runs without a GPU; the environment check above said "
                       "which path this machine takes.", "",
                       "The simulator runs each GPU thread as a Python thread: correct, but "
                       "thousands of times slower, hence the tiny sizes.")),
    Question("A checker prints 'FAILED' and a hint. What is the best next step?",
             ["Open the solution straight away",
              "Read the hint and the failing case, compare your value with the expected one, "
              "and fix that step",
              "Run the cell again until it passes"],
             answer=1,
             why=("The checker's inputs are fixed, so running again changes nothing. The hint "
                  "names the usual mistake for that case; the solution is a last resort."),
             feedback=("The solution is a last resort: the hint names the mistake, and "
                       "check(..., hint_level=2) gives a more explicit second hint first.", "",
                       "The checker's inputs are fixed (seeded): the same code fails the same "
                       "way every time.")),
]
