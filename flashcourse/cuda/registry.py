"""The CUDA kernels of the course, registered once: `FORWARD` and `BACKWARD` by name.

`flashcourse.cuda.forward` / `backward`, the benchmarks and the tests read these two
dicts; nothing else lists the kernels. One entry says everything a caller needs:

    name         what `kernel=` selects
    direction    "forward" or "backward"
    run          run(x, out=None, **options) -> device results. x is a `_checks.Heads`
                 whose arrays are C-contiguous device arrays flattened to (BH, T, d):
                 x.q, x.k, x.v (and x.o, x.lse, x.do for a backward), with x.tq, x.tk,
                 x.d, x.scale, x.causal and x.dtype (the dtype on the device). A forward
                 returns (o (BH, Tq, d), lse (BH, Tq)); a backward (dq, dk, dv). `out`,
                 when given, holds those arrays already allocated (benchmarks time the
                 kernel alone, and poison the outputs to check every element is written).
                 A backward also takes psum=None and dsum=None: (BH, Tq) float32 device
                 arrays that receive sum_j P_ij and sum_j dS_ij of each recomputed row (the
                 lse and o checks of `backward`).
    options      the keyword options it accepts; any other one given is an error
    extra_bytes  device memory it allocates beyond inputs and outputs, (bh, tq, tk, d) -> B
    description  one line
    dtypes       dtypes it accepts on the device; numpy input is copied to the device
    convert_to   as this dtype (None: kept in its own dtype, for a kernel that computes
                 in the input precision)
    compute      compute(options, dtype) -> the name of the type whose rounding the
                 backward's checks allow for ("float32"; the tensor-core backward:
                 "float16" or "bfloat16")
    launches     launches(d, tq, tk, bh, limits) -> the `flashcourse.limits.Launch`es that
                 `run` makes with its default configuration on a GPU with `limits` (a
                 `DeviceLimits`, e.g. one of `limits.PRESETS`): the configuration is chosen
                 from the limits by a pure function beside the kernel (flash.choose_config,
                 backward_kernels.choose_tiles, textbook.choose_block; dense.GPU_TILES and
                 decode_kernels.default_launch are fixed shapes that fit every preset).
                 Raises LaunchError naming the limit where no configuration fits,
                 RuntimeError naming the compute capability a kernel needs (tensor_core
                 below 8.0) or ValueError for a head dim it does not support.
                 tests/test_gpu_presets.py checks every kernel on every preset.
    simulator    False for a kernel built from instructions Numba's CUDA simulator cannot
                 run (none today: hopper's wgmma runs through the twins of ptx/wgmma.py);
                 its `run` would refuse there with a RuntimeError, and the tests that run
                 every kernel on the simulator would leave it out

To add a kernel: write its module in its family's folder (header comment: the idea, the
bytes it moves, the expected cost), then one `register(Kernel(...))` line below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._checks import check_block, check_choice

DIRECTIONS = ("forward", "backward")


def _no_extra(bh: int, tq: int, tk: int, d: int) -> int:
    return 0


def _float32_compute(options: dict, dtype) -> str:
    return "float32"


def _no_launches(d: int, tq: int, tk: int, bh: int, limits):
    raise NotImplementedError("this kernel registered no `launches` function")


@dataclass(frozen=True)
class Kernel:
    """One registered CUDA kernel (see the module docstring for each field)."""

    name: str
    direction: str
    run: Callable
    options: tuple = ()
    extra_bytes: Callable = _no_extra
    description: str = ""
    dtypes: tuple = (np.float32,)
    convert_to: object = np.float32
    launches: Callable = _no_launches
    compute: Callable = _float32_compute
    simulator: bool = True

    def check_options(self, options: dict) -> dict:
        """The options that were given (not None); ValueError for one it does not take."""
        given = {k: v for k, v in options.items() if v is not None}
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            takes = ", ".join(self.options) if self.options else "no options"
            raise ValueError(f"the {self.direction} kernel {self.name!r} does not use "
                             f"{', '.join(unknown)} (it takes {takes}); leave "
                             f"{'it' if len(unknown) == 1 else 'them'} unset")
        return given


FORWARD: dict = {}
BACKWARD: dict = {}


def register(kernel: Kernel) -> Kernel:
    """Add `kernel` to FORWARD or BACKWARD; a name may be registered once."""
    if kernel.direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {kernel.direction!r}")
    table = FORWARD if kernel.direction == "forward" else BACKWARD
    if kernel.name in table:
        raise ValueError(f"a {kernel.direction} kernel named {kernel.name!r} is registered")
    table[kernel.name] = kernel
    return kernel


def get(direction: str, name) -> Kernel:
    """The registered kernel `name`, or an error naming `kernel` and listing the ones there
    are (ValueError; TypeError for a name that is not a string, such as ["flash"])."""
    table = FORWARD if direction == "forward" else BACKWARD
    return table[check_choice(name, "kernel", table)]


# ---------------------------------------------------------------------------
# The kernels (modules in their family's folder under flashcourse/cuda/)
# ---------------------------------------------------------------------------

def _forward_outputs(x, out):
    if out is not None:
        return out
    from numba import cuda
    return (cuda.device_array((x.bh, x.tq, x.d), np.float32),     # o (BH, Tq, d)
            cuda.device_array((x.bh, x.tq), np.float32))          # lse (BH, Tq)


def _run_dense(x, out=None):
    from .cuda_core import dense
    o, lse = _forward_outputs(x, out)
    dense.run(x.q, x.k, x.v, o, lse, x.tq, x.tk, x.d, x.scale, x.causal)
    return o, lse


def _dense_extra(bh: int, tq: int, tk: int, d: int) -> int:
    from .cuda_core import dense
    return dense.extra_bytes(bh, tq, tk)


def _run_textbook(x, out=None, block_q=None, block_k=None):
    from .cuda_core import textbook
    if block_k is not None and check_block(block_k, "block_k") != block_q:
        raise ValueError(f"block_k must equal block_q for the textbook kernel "
                         f"(square tiles), got block_q={block_q}, block_k={block_k}")
    o, lse = _forward_outputs(x, out)
    textbook.run(x.q, x.k, x.v, o, lse, x.tq, x.tk, x.d, x.scale, x.causal, block=block_q)
    return o, lse


def _run_flash(x, out=None, **options):
    from .cuda_core import flash
    o, lse = _forward_outputs(x, out)
    flash.run(x.q, x.k, x.v, o, lse, x.tq, x.tk, x.d, x.scale, x.causal, **options)
    return o, lse


def _run_decode(x, out=None, num_splits=None, block_k=None):
    from .decoding import decode_kernels
    return decode_kernels.run_registered(x, out, num_splits=num_splits, block_k=block_k)


def _decode_extra(bh: int, tq: int, tk: int, d: int) -> int:
    from .decoding import decode_kernels
    return decode_kernels.registered_extra_bytes(bh, tq, tk, d)


def _run_tensor_core(x, out=None, **options):
    from .tensor_core import host as tensor_core
    return tensor_core.run_heads(x, out, **options)


def _run_hopper(x, out=None, **options):
    from .hopper import host as hopper
    return hopper.run_heads(x, out, **options)


def _backward_runner(version: str):
    def run(x, out=None, block_q=None, block_k=None, psum=None, dsum=None):
        from numba import cuda

        from .gradients import backward_kernels
        if out is None:
            out = (cuda.device_array((x.bh, x.tq, x.d), np.float32),   # dq (BH, Tq, d)
                   cuda.device_array((x.bh, x.tk, x.d), np.float32),   # dk (BH, Tk, d)
                   cuda.device_array((x.bh, x.tk, x.d), np.float32))   # dv (BH, Tk, d)
        dq, dk, dv = out
        backward_kernels.run(x.q, x.k, x.v, x.o, x.lse, x.do, dq, dk, dv, x.tq, x.tk, x.d,
                             x.scale, x.causal, kernel=version, block_q=block_q,
                             block_k=block_k, psum=psum, dsum=dsum)
        return dq, dk, dv
    run.__name__ = f"run_{version}"
    return run


def _run_tc_backward(x, out=None, psum=None, dsum=None, **options):
    from .gradients import tc_backward
    return tc_backward.run_heads(x, out, psum=psum, dsum=dsum, **options)


def _run_hopper_backward(x, out=None, psum=None, dsum=None, precision=None,
                         warpgroups=None):
    # the tensor-core backward's host path (words, pre-pass, casts) with Hopper's kernel
    from .gradients import tc_backward
    from .hopper import backward as hopper_backward
    return tc_backward.run_heads(x, out, psum=psum, dsum=dsum, pipeline="wgmma",
                                 precision=hopper_backward.resolve_precision(x.dtype,
                                                                             precision),
                                 warpgroups=warpgroups)


def _hopper_backward_compute(options: dict, dtype) -> str:
    from .hopper import backward as hopper_backward
    return hopper_backward.compute_type(options, dtype)


def _tc_backward_compute(options: dict, dtype) -> str:
    from .gradients import tc_backward
    return tc_backward.compute_type(options, dtype)


def _tc_backward_extra(bh: int, tq: int, tk: int, d: int) -> int:
    # D (BH, Tq) fp32; float16 input adds fp32 dq, dk, dv beside the float16 ones
    return 4 * bh * tq + 4 * bh * (tq + 2 * tk) * d


def _delta_bytes(bh: int, tq: int, tk: int, d: int) -> int:
    return 4 * bh * tq                                        # D = rowsum(dO * O), fp32


def _launches(module: str, **kw):
    """The `launches` function of a kernel module (imported when called)."""
    def launches(d, tq, tk, bh, limits):
        from importlib import import_module
        return import_module(f"{__package__}.{module}").launches(d, tq, tk, bh, limits, **kw)
    launches.__name__ = f"launches_{module.replace('.', '_')}"
    return launches


#: The inputs of the tensor-core kernels: fp16, fp32 (rounded as their precision says)
#: and bf16 as its uint16 bits, each kept in its own dtype on the device.
_TENSOR_CORE_INPUTS = {"dtypes": (np.float16, np.float32, np.uint16), "convert_to": None}


register(Kernel("textbook", "forward", _run_textbook, ("block_q", "block_k"),
                description="one thread per query row, square tiles "
                            "(flash-attention-minimal style)",
                launches=_launches("cuda_core.textbook")))
register(Kernel("flash", "forward", _run_flash, ("block_q", "block_k", "threads", "tm",
                                                  "unroll"),
                description="register-tiled FlashAttention-2 order, exp2, causal skipping",
                launches=_launches("cuda_core.flash")))
register(Kernel("dense", "forward", _run_dense, (), _dense_extra,
                description="unfused baseline: S to global memory, softmax, then P V",
                launches=_launches("cuda_core.dense")))
register(Kernel("decode", "forward", _run_decode, ("num_splits", "block_k"), _decode_extra,
                description="Flash-Decoding: keys split over many blocks, then a combine "
                            "kernel (one KV head per query head here; GQA: cuda.decode)",
                dtypes=(np.float32, np.float16), launches=_launches("decoding.decode_kernels")))


register(Kernel("tensor_core", "forward", _run_tensor_core,
                ("precision", "warps", "block_k", "m_tiles", "prefetch", "min_blocks",
                 "pipeline", "lazy_rescale"),
                description="FlashAttention-2 on tensor cores (mma.sync): fp16/bf16, or "
                            "fp32 through 3xTF32",
                **_TENSOR_CORE_INPUTS,
                launches=_launches("tensor_core.host")))
register(Kernel("hopper", "forward", _run_hopper,
                ("precision", "warpgroups", "block_k", "pipeline", "splits", "skip_masked",
                 "order", "lazy_rescale"),
                description="FlashAttention on Hopper's warpgroup tensor cores (wgmma, "
                            "compute capability 9.0 only): fp16/bf16",
                **_TENSOR_CORE_INPUTS,
                launches=_launches("hopper.host")))
register(Kernel("simple", "backward", _backward_runner("simple"), (), _delta_bytes,
                description="one thread per row, two launches, no shared memory (d <= 256)",
                launches=_launches("gradients.backward_kernels", kernel="simple")))
register(Kernel("fast", "backward", _backward_runner("fast"), ("block_q", "block_k"),
                _delta_bytes,
                description="FlashAttention-2 backward, key-major tiles, dQ by atomic adds",
                launches=_launches("gradients.backward_kernels", kernel="fast")))
register(Kernel("fast_two_pass", "backward", _backward_runner("fast_two_pass"),
                ("block_q", "block_k"), _delta_bytes,
                description="key-major dK, dV, then a query-major pass for dQ "
                            "(deterministic)",
                launches=_launches("gradients.backward_kernels", kernel="fast_two_pass")))
register(Kernel("tensor_core", "backward", _run_tc_backward,
                ("precision", "deterministic", "pipeline", "warps", "block_q", "kv_regs",
                 "q_block_k", "min_blocks", "warpgroups"), _tc_backward_extra,
                description="FlashAttention-2 backward on tensor cores (mma.sync): fp16 "
                            "for float16, 3xTF32 (or bf16) for float32; dQ by atomics or "
                            "a second pass; pipeline='wgmma': Hopper's wgmma (fp16/bf16)",
                **_TENSOR_CORE_INPUTS,
                launches=_launches("gradients.tc_backward"), compute=_tc_backward_compute))
register(Kernel("hopper", "backward", _run_hopper_backward, ("precision", "warpgroups"),
                _tc_backward_extra,
                description="the key-major backward on Hopper's warpgroup tensor cores "
                            "(wgmma, compute capability 9.0 only): fp16/bf16, dQ by atomics",
                **_TENSOR_CORE_INPUTS,
                launches=_launches("hopper.backward"), compute=_hopper_backward_compute))


# ---------------------------------------------------------------------------
# The attention-variants forwards (mask_mod, score_mod, block mask: flashcourse.variants)
# ---------------------------------------------------------------------------
# They take the variants' own arguments (numpy (B, H, T, d) arrays, block_mask, score_mod,
# sinks), not a `Heads`, so they have a table of their own: name -> the module whose
# `forward` runs it, for `flashcourse.cuda.variants_forward(..., kernel=name)`.

VARIANT_FORWARDS = {
    "cuda_core": "cuda_core.variants",      # one thread per query row, fp32 (CUDA cores)
    "tensor_core": "tensor_core.variants",  # FlashAttention-2 on mma.sync, fp16/bf16 inputs
}


#: their backwards: name -> the module whose `backward` runs it, for
#: `flashcourse.cuda.variants_backward(..., kernel=name)`
VARIANT_BACKWARDS = {
    "tensor_core": "gradients.tc_variants_backward",   # key-major on mma.sync, fp16/bf16
}


def variant_forward(name):
    """The `forward` function of the variants kernel `name` (ValueError naming `kernel`)."""
    from importlib import import_module
    module = VARIANT_FORWARDS[check_choice(name, "kernel", VARIANT_FORWARDS)]
    return import_module(f"{__package__}.{module}").forward


def variant_backward(name):
    """The `backward` function of the variants backward kernel `name` (ValueError naming
    `kernel`)."""
    from importlib import import_module
    module = VARIANT_BACKWARDS[check_choice(name, "kernel", VARIANT_BACKWARDS)]
    return import_module(f"{__package__}.{module}").backward
