"""flashcourse: the library behind the FlashAttention course.

Modules, in layers (a module imports from its own layer or below; CONTRIBUTING.md):

 0  gpu         GPU-or-simulator selection (runs on import, before Numba loads); Numba's
                small-grid warning turned off
    sim_scheduler  a waiting barrier for the CUDA simulator's threads (installed on import)
    _checks     validation of every argument; `flatten_heads`, the one validate-and-flatten
    gpus        published sizes and rates of common GPUs; limits per compute capability
    constants   float32 constants of the compiled kernels
    timing      the timing harness: CUDA events, host clocks, TFLOP/s, relative error
    formats     rounding to fp16 / bf16 (emulated) and unit roundoffs
 1  geometry    ceil_div, causal masks, visible pairs and tiles in closed form
    memory      score-matrix bytes, bytes kept for the backward, byte formatting
    traffic     the IO model: bytes and FLOPs of dense and tiled attention, forward and backward
    limits      what fits on a GPU: DeviceLimits, check_launch, occupancy
    counter     a byte counter for the numpy paths (and the do-nothing default)
    reference   dense float64 attention (the ground truth), its backward, the softmax steps
    results     recorded results: JSON Schemas (schemas/), loading, tuned_config, writing rules
    _guards     the result guards: a non-finite row that sees keys is an error; lse and o
                must belong to a backward's inputs; gradients must be finite
    env         the environment report of notebook 00 and the record stored with results
    fa2_work    FlashAttention-2's three changes counted; exp-aware recompute cost
 2  tiled       the tiled, IO-aware forward and backward in numpy
    dense       standard attention as the paper's Algorithm 0 (S and P stored), countable
    cpu         the Numba CPU forward (three versions)
    cuda        Numba CUDA kernels, one folder per family, listed once in cuda.registry
    decode      Flash-Decoding in numpy: split-KV forward, FA2's split heuristic, combine
    decode_io   the decode IO model (K/V read once) and its recorded measurements
    variants    attention variants from Python functions (mask_mod, score_mod), block
                masks, sinks, GQA: reference, tiled numpy and Numba CPU paths
    fp8         FP8 numerics: e4m3/e5m2 rounding bit for bit, scales, the Hadamard
                rotation, the FP8 forward simulated in numpy and its error
    paged_cache the paged KV cache in numpy: pool, free list, block tables, append, fork
                with copy-on-write, token_address, the float64 reference; page_map and
                slot_usage (notebook 11b)
 3  configs     launch configurations of the flash kernel, which ones can launch
    sweep       timing configurations, the tuned default, heatmap grids; the CPU sweep
    measured_traffic  Nsight Compute's bytes beside the model, and why they differ
    distributed context parallelism on torch.distributed (optional, needs PyTorch): ring,
                all-gather and Ulysses attention on gloo processes; its shards (zigzag
                layout, causal work per ring step), model and merge are numpy only
 4  plots       every picture, one module per topic, one style (plots.style): memory,
                softmax, tiles, traffic, roofline, kernels, measured, backward,
                tensor_cores, decode, bench; tables (HTML); readme (make figures)
    kv_cache    KV-cache size of published model shapes against a GPU (the readout)
    quiz        multiple-choice "check your understanding" widgets (Question, the widget,
                reading a quiz file)
    quizzes     each notebook's questions, one TOML file per notebook: quizzes.show("03")
    exercises   the notebooks' predict-then-check exercises and their checkers (with
                exercises_hopper, exercises_paged and exercises_model, the ones of
                notebooks 12, 11b and 13)
    labs        the lab checkers
 5  widgets     the interactive explorers, one module each on one base (widgets._base):
                score memory, traffic, tile schedule, tuning, backward, KV cache, block
                masks, the paged pool; the
                numbers behind them (widgets.readouts, pure functions); they draw plots,
                plots never import them
"""

from . import gpu as _gpu

_gpu.select_cuda_target()
_gpu.select_cache_dir()
_gpu.quiet_small_grids()
if _gpu.using_simulator():
    from . import sim_scheduler as _sim_scheduler
    _sim_scheduler.install()

__version__ = "0.1.0"


def _audit_figures() -> None:
    """Under the notebook tests: measure every figure a cell draws (plots.style)."""
    import os
    path = os.environ.get("FLASHCOURSE_FIGURE_AUDIT")
    if path:
        from .plots.style import install_audit
        install_audit(path)


_audit_figures()
