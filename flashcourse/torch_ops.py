"""The course's attention as PyTorch custom operators, so that a PyTorch model (and
`torch.compile(fullgraph=True)`) can train on it. Optional: needs PyTorch
(`requirements-train.txt`); nothing else in the course imports this module.

    flashcourse::attention_forward(q, k, v, causal, scale) -> (o, lse)
    flashcourse::attention_backward(q, k, v, o, lse, do, causal, scale) -> (dq, dk, dv)

q, k, v: (B, H, T, d) tensors of one dtype (made contiguous where they are not); o like q;
lse (B, H, Tq) float32 (float64 for float64 input on the CPU), natural log.
`attention(q, k, v)` is the differentiable call: its backward (`register_autograd`) saves
q, k, v, o and lse, never P, and calls the backward operator, which recomputes each tile of
P from lse (notebook 09).

On CUDA tensors the operators run the course's tensor-core kernels on the tensors' memory:
the forward `flashcourse.cuda.forward(..., kernel="hopper")` (wgmma) on a GPU of compute
capability 9.0 (H100, H200) when d fits it, else `kernel="tensor_core"` (mma.sync); the
backward `flashcourse.cuda.backward(..., kernel="tensor_core")`. Both write lse as float32
natural-log logsumexp, so either forward's lse feeds the backward. They run through the CUDA
array interface (`numba.cuda.as_cuda_array`) the first time a shape is seen, and from then
on by replaying that call's kernels on the tensors' addresses (`_planned`, below): float16
runs as fp16, bfloat16 as bf16 (the tensor is viewed as 16-bit integers, the kernels' bf16
bit patterns, `cuda.tensor_core.BF16_BITS`), float32 as 3xTF32. On the first call the
kernels allocate their outputs through Numba and PyTorch takes them over without a copy
(`torch.as_tensor` keeps the Numba array alive); replays write into tensors PyTorch
allocates. Numba launches on its default stream, which PyTorch's default stream orders with.
On CPU tensors they run the numpy `flashcourse.tiled.forward/backward` (float32 and float64;
bfloat16/float16 are computed in float32 and rounded back), so that the registration can be
tested, with `torch.library.opcheck`, on a machine without a GPU.

`register_fake` gives `torch.compile` each output's shape and dtype without running a
kernel, so the operators trace into a graph with no break.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import tiled

#: the kernels used on CUDA tensors, with their measured defaults
CUDA_KERNEL = "tensor_core"          # the backward, and the forward below compute capability 9.0
HOPPER_KERNEL = "hopper"             # the forward on compute capability 9.0
#: options of the backward kernel (`flashcourse.cuda.backward(..., kernel=CUDA_KERNEL)`):
#: {} for its defaults (mma.sync); {"pipeline": "wgmma"} runs Hopper's wgmma backward
#: (compute capability 9.0), not timed as the default yet (benchmarks/gpu_train.py
#: --backward-pipeline wgmma times it)
BACKWARD_OPTIONS: dict = {}


def forward_kernel(q) -> str:
    """The forward kernel for CUDA tensor q: "hopper" on compute capability 9.0 when the
    head dim fits it, else "tensor_core"."""
    from .cuda.hopper import host as hopper_host
    major_minor = torch.cuda.get_device_capability(q.device)
    if tuple(major_minor) == hopper_host.CAPABILITY and q.shape[-1] <= hopper_host.MAX_HEAD_DIM:
        return HOPPER_KERNEL
    return CUDA_KERNEL


def _check(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, H, T, d), got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q (B, H, Tq, d), k and v (B, H, Tk, d) do not match: "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, "
                         f"{v.device}")


# -- CUDA: the course's tensor-core kernels on the tensors' own memory -----------------------

def _to_numba(t):
    """A contiguous CUDA tensor as a Numba device array (no copy); bfloat16 as uint16 bits.
    Detached first: inside an operator the values are read, never differentiated, and
    PyTorch refuses the array interface of a tensor that requires grad (opcheck passes some)."""
    from numba import cuda
    t = t.detach().contiguous()
    # Numba by default waits on the host for the stream the tensor was made on (the array
    # interface's "stream"): every operator call would stall the CPU until the GPU caught
    # up. When PyTorch queues on the legacy default stream, where the course's kernels also
    # run, the GPU already orders the two, so the wait is left out; on any other stream it
    # is kept.
    sync = torch.cuda.current_stream(t.device).cuda_stream != 0
    if t.dtype == torch.bfloat16:
        return cuda.as_cuda_array(t.view(torch.int16), sync=sync).view(np.uint16)
    return cuda.as_cuda_array(t, sync=sync)


def _from_numba(a, dtype):
    """A Numba device array as a CUDA tensor of `dtype` (no copy); uint16 bits -> bfloat16."""
    if dtype == torch.bfloat16:
        return torch.as_tensor(a.view(np.int16), device="cuda").view(torch.bfloat16)
    return torch.as_tensor(a, device="cuda")


def _cuda_forward(q, k, v, causal, scale):
    from . import cuda as fc_cuda
    kernel = forward_kernel(q)
    ts = tuple(t.detach().contiguous() for t in (q, k, v))
    return _planned(("forward", kernel, causal, scale), ts, (q.dtype, torch.float32),
                    lambda a: fc_cuda._forward(*a, kernel, causal, scale, False, False, {}))


def _cuda_backward(q, k, v, o, lse, do, causal, scale):
    from . import cuda as fc_cuda
    ts = tuple(t.detach().contiguous() for t in (q, k, v, o, lse, do))
    options = dict(BACKWARD_OPTIONS)
    return _planned(("backward", CUDA_KERNEL, causal, scale, tuple(sorted(options.items()))),
                    ts, (q.dtype,) * 3,
                    lambda a: fc_cuda._backward(*a, CUDA_KERNEL, causal, scale, False, options))


# -- the fast path: a call's kernels replayed on the tensors' own memory -----------------------
#
# A call through the checked path costs hundreds of microseconds of Python before its
# kernels are queued: a Numba array made from each tensor (`_to_numba`, the CUDA array
# interface read and checked), the checks, Numba's launch, and a PyTorch tensor made from
# each output (`_from_numba`). At the training capstone's size (B H = 96, T = 1024, d = 64)
# that is more than the kernels' own time (benchmarks/gpu_train.py). The library's
# device-array calls already replay a recorded plan (`cuda.common.host_plans`); here the
# plan is keyed on the tensors themselves and replayed on their addresses, into outputs
# PyTorch allocates (its caching allocator, on the default stream where the kernels run).
# The first call of a key runs the checked path, which records the plan.

#: plans kept (least recently built dropped first); keys that cannot be planned
MAX_PLANS = 32
_PLANS: dict = {}
_UNPLANNED: set = set()


def _plan_key(entry, ts):
    """The key of a call: each tensor's shape, dtype, strides, device and 16-byte
    alignment, which tensors share an address, and the call's own settings (`entry`)."""
    ptrs = [t.data_ptr() for t in ts]
    parts = tuple((tuple(t.shape), t.dtype, t.stride(), t.device.index, p % 16)
                  for t, p in zip(ts, ptrs))
    return (entry, parts, tuple(ptrs.index(p) for p in ptrs)), ptrs


def _fits(plan, dtypes) -> bool:
    """The plan's outputs are C-contiguous arrays of these dtypes' sizes (so that PyTorch's
    own tensors can stand in for them)."""
    if len(plan.outputs) != len(dtypes):
        return False
    for (shape, strides, dtype, _), want in zip(plan.outputs, dtypes):
        if dtype.itemsize != torch.empty((), dtype=want).element_size() or \
                tuple(strides) != np.empty(shape, dtype).strides:
            return False
    return True


def _planned(entry, ts, dtypes, checked):
    """The outputs (tensors of `dtypes`) of the library call `checked(arrays)` on `ts`:
    replayed from a plan when one exists for this key, else through the checked path (on
    Numba views of `ts`; it records the plan, when the fast path is on: a GPU, the default
    stream, FLASHCOURSE_PACKED_LAUNCH not 0)."""
    from .cuda.common import host_plans
    fast = host_plans.enabled() and torch.cuda.current_stream(ts[0].device).cuda_stream == 0
    key, ptrs = _plan_key(entry, ts) if fast else (None, None)
    plan = _PLANS.get(key) if fast else None
    if plan is not None:
        outs = tuple(torch.empty(shape, dtype=dt, device=ts[0].device)
                     for (shape, *_), dt in zip(plan.outputs, dtypes))
        plan.replay(ptrs, 0, outs)
        return outs
    arrays = tuple(_to_numba(t) for t in ts)
    if not fast or key in _UNPLANNED:
        result = checked(arrays)
    else:
        result, plan = host_plans.build_plan(ptrs, lambda: checked(arrays))
        if plan is None or not _fits(plan, dtypes):
            _UNPLANNED.add(key)
        else:
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = plan
    return tuple(_from_numba(r, dt) for r, dt in zip(result, dtypes))


# -- CPU: the numpy tiled forward and backward ------------------------------------------------

def _np(t):
    """A CPU tensor as numpy: float64 stays, anything else computes in float32."""
    t = t.detach()
    return t.numpy() if t.dtype == torch.float64 else t.float().numpy()


def _cpu_forward(q, k, v, causal, scale):
    o, lse = tiled.forward(_np(q), _np(k), _np(v), causal=causal, scale=scale)
    return torch.from_numpy(o).to(q.dtype), torch.from_numpy(lse).to(_lse_dtype(q))


def _cpu_backward(q, k, v, o, lse, do, causal, scale):
    grads = tiled.backward(_np(q), _np(k), _np(v), _np(o), _np(lse), _np(do), causal=causal,
                           scale=scale)
    return tuple(torch.from_numpy(g).to(q.dtype) for g in grads)


def _lse_dtype(q):
    """lse is float32, as the kernels keep it; float64 for float64 input (the CPU path)."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32


# -- the operators ---------------------------------------------------------------------------

@torch.library.custom_op("flashcourse::attention_forward", mutates_args=())
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                      scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """o (B, H, Tq, d) in q's dtype and lse (B, H, Tq) float32 (float64 for float64 q)."""
    _check(q, k, v)
    run = _cuda_forward if q.is_cuda else _cpu_forward
    return run(q, k, v, causal, scale)


@attention_forward.register_fake
def _(q, k, v, causal, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:-1], dtype=_lse_dtype(q))


@torch.library.custom_op("flashcourse::attention_backward", mutates_args=())
def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, do: torch.Tensor, causal: bool,
                       scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) shaped like q, k, v, P recomputed from lse."""
    _check(q, k, v)
    run = _cuda_backward if q.is_cuda else _cpu_backward
    return run(q, k, v, o, lse, do.contiguous(), causal, scale)


@attention_backward.register_fake
def _(q, k, v, o, lse, do, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)          # O and lse: T numbers per head, not P
    ctx.causal, ctx.scale = causal, scale


def _backward(ctx, do, dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None                   # lse is a statistic: its gradient is unused


attention_forward.register_autograd(_backward, setup_context=_setup_context)


def attention(q, k, v, *, causal: bool = True, scale: float | None = None):
    """Differentiable attention on (B, H, T, d) tensors with the course's kernels; o."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return attention_forward(q, k, v, causal, scale)[0]
