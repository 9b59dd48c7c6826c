"""The per-step attention "kernel" of the distributed designs, and their input checks.

Every design (ring, all-gather, Ulysses) moves tensors with torch.distributed and calls a
kernel for the attention of one (query block, key block) pair:

    kernel.forward(q, k, v, causal=, scale=)            -> (o, lse)
    kernel.backward(q, k, v, o, lse, do, causal=, scale=) -> (dq, dk, dv)

q (B, H, Tq, d), k, v (B, H, Tk, d) torch tensors; lse (B, H, Tq) natural log, -inf
for a row with no visible key; causal is bottom-right aligned. The backward gets the
forward's o and lse over *all* the row's keys (the global ones in a ring) and returns
this block's share of the gradients. Here the kernels run on CPU tensors: "numpy" (the
numpy tiled forward and backward, `flashcourse.tiled`) and "numba" (the Numba CPU
forward `flashcourse.cpu.forward`, the numpy tiled backward). A CUDA kernel for NCCL
(`flashcourse.torch_ops`' operators) is an object with the same two methods.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TORCH_MISSING", "require_torch", "NumpyKernel", "NumbaKernel", "KERNELS",
           "get_kernel", "check_qkv_shards", "check_like", "check_saved"]

TORCH_MISSING = ("flashcourse.distributed's {what} needs PyTorch: "
                 "pip install -r requirements-train.txt")


def require_torch(what: str = "ring, all-gather and Ulysses attention"):
    """torch, or an ImportError that says how to install it."""
    try:
        import torch
    except ImportError as exc:                      # a laptop learner without torch
        raise ImportError(TORCH_MISSING.format(what=what)) from exc
    return torch


def _arrays(*tensors):
    """numpy views of CPU tensors (ValueError for a tensor on another device)."""
    for x in tensors:
        if x.device.type != "cpu":
            raise ValueError(f"the numpy and numba kernels run on CPU tensors, got one on "
                             f"{x.device}: pass a CUDA kernel object as kernel=")
    return [x.detach().numpy() for x in tensors]


class NumpyKernel:
    """The numpy tiled forward and backward (`flashcourse.tiled`) on CPU tensors."""

    name = "numpy"

    def __init__(self, block_q: int = 64, block_k: int = 64):
        self.block_q, self.block_k = block_q, block_k

    def _forward_numpy(self, q, k, v, causal, scale):
        from .. import tiled
        return tiled.forward(q, k, v, block_q=self.block_q, block_k=self.block_k,
                             causal=causal, scale=scale)

    def forward(self, q, k, v, *, causal: bool, scale: float):
        torch = require_torch()
        o, lse = self._forward_numpy(*_arrays(q, k, v), causal, scale)
        return torch.from_numpy(np.ascontiguousarray(o)), torch.from_numpy(lse)

    def backward(self, q, k, v, o, lse, do, *, causal: bool, scale: float):
        from .. import tiled
        torch = require_torch()
        grads = tiled.backward(*_arrays(q, k, v, o, lse, do), block_q=self.block_q,
                               block_k=self.block_k, causal=causal, scale=scale,
                               partial_keys=True)
        return tuple(torch.from_numpy(np.ascontiguousarray(g)) for g in grads)


class NumbaKernel(NumpyKernel):
    """The Numba CPU forward (`flashcourse.cpu.forward`); the numpy tiled backward."""

    name = "numba"

    def _forward_numpy(self, q, k, v, causal, scale):
        from .. import cpu
        return cpu.forward(q, k, v, causal=causal, scale=scale)


KERNELS = {"numpy": NumpyKernel(), "numba": NumbaKernel()}


def get_kernel(kernel):
    """A kernel by name ("numpy", "numba") or any object with forward and backward."""
    if isinstance(kernel, str):
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {sorted(KERNELS)} or an object with "
                             f"forward and backward methods, got {kernel!r}")
        return KERNELS[kernel]
    if not (callable(getattr(kernel, "forward", None))
            and callable(getattr(kernel, "backward", None))):
        raise ValueError(f"kernel must be one of {sorted(KERNELS)} or an object with "
                         f"forward and backward methods, got {type(kernel).__name__}")
    return kernel


def check_like(x, name: str, ref, ref_name: str, shape=None):
    """x is a contiguous tensor of ref's dtype and device, shaped `shape` (default
    ref's): ValueError/TypeError naming `name` otherwise."""
    torch = require_torch()
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    want = tuple(ref.shape) if shape is None else tuple(shape)
    if tuple(x.shape) != want:
        raise ValueError(f"{name} must have shape {want} (from {ref_name}), got "
                         f"{tuple(x.shape)}")
    if x.dtype != ref.dtype:
        raise ValueError(f"{name} must have {ref_name}'s dtype {ref.dtype}, got {x.dtype}")
    if x.device != ref.device:
        raise ValueError(f"{name} must be on {ref_name}'s device {ref.device}, got {x.device}")
    if not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous() first)")
    return x


def check_qkv_shards(q, k, v):
    """q, k, v: contiguous (B, H, T_local, d) float tensors of one dtype and device, k
    and v shaped like q (self-attention shards). Returns them; errors name the argument."""
    torch = require_torch()
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
    if q.dim() != 4:
        raise ValueError(f"q must be (B, H, T_local, d) (4 dims), got shape {tuple(q.shape)}")
    if q.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"q must be float32 or float64 (the CPU kernels), got {q.dtype}")
    if not q.is_contiguous():
        raise ValueError("q must be contiguous (call .contiguous() first)")
    if min(q.shape) < 1:
        raise ValueError(f"q must have no empty dimension, got shape {tuple(q.shape)}")
    check_like(k, "k", q, "q")
    check_like(v, "v", q, "q")
    return q, k, v


def check_saved(q, o, lse, do):
    """The backward's o (B, H, T_local, d), lse (B, H, T_local) and do (like q) as
    contiguous tensors of q's dtype (o, lse are cast: the forward returns them in its
    accumulator dtype). Errors name the argument."""
    torch = require_torch()
    for name, x in (("o", o), ("lse", lse), ("do", do)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    o = check_like(o.to(q.dtype), "o", q, "q")
    lse = check_like(lse.to(q.dtype), "lse", q, "q", shape=q.shape[:-1])
    do = check_like(do, "do", q, "q")
    return o, lse, do
