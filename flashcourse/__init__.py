"""flashcourse: the library behind the FlashAttention course.

Modules (each small, named by what it holds):
    reference  dense float64 attention (the ground truth), its backward, the softmax steps
    tiled      the tiled, IO-aware forward and backward in numpy
    dense      standard attention as the paper's Algorithm 0 (S and P stored), countable
    memory     score-matrix bytes, bytes kept for the backward, byte formatting
    counter    a byte counter for outer-memory traffic of the numpy paths
    traffic    the IO model: bytes and FLOPs of dense and tiled attention
    gpus       published sizes and rates of a few GPUs
    readouts   the numbers behind the widgets (pure functions)
    widgets    the interactive explorers (score memory, traffic, tile schedule)
    figures    the figures of figures/ (python -m flashcourse.figures DIR)
    cpu        the Numba CPU forward
    cuda       Numba CUDA kernels (dense, textbook, flash; backward), simulator without a GPU
    tuning     launchable configurations, occupancy, sweeps, the tuning widget
    quiz       multiple-choice "check your understanding" widgets
    labs       the lab checkers
    env        the environment report of notebook 00
    gpu        GPU-or-simulator selection (runs on import, before Numba loads)
"""

from . import gpu as _gpu

_gpu.select_cuda_target()
_gpu.select_cache_dir()

__version__ = "0.1.0"
