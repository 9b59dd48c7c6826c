"""flashcourse: the library behind the FlashAttention course.

Modules (each small, named by what it holds):
    reference  dense float64 attention (the ground truth) and the softmax steps
    tiled      the tiled, IO-aware forward (and backward) in numpy
    memory     score-matrix bytes and byte formatting
    counter    a byte counter for outer-memory traffic of the numpy paths
    quiz       multiple-choice "check your understanding" widgets
    gpu        GPU-or-simulator selection (runs on import, before Numba loads)
"""

from . import gpu as _gpu

_gpu.select_cuda_target()
_gpu.select_cache_dir()

__version__ = "0.1.0"
