"""`attention(q, k, v, design=...)`: a design's forward and backward as one differentiable
call (a torch.autograd.Function), for training code that calls loss.backward().

The forward saves q, k, v, o and lse (never P); the backward calls the design's backward
with them. design: "ring", "gather" or "ulysses"; the other arguments as
`ring.ring_forward`'s. Returns o in q's dtype (lse is not returned).
"""

from __future__ import annotations

from .kernels import require_torch

__all__ = ["DESIGNS", "attention"]

#: design name -> (module, forward name, backward name)
DESIGNS = {"ring": ("ring", "ring_forward", "ring_backward"),
           "gather": ("gather", "gather_forward", "gather_backward"),
           "ulysses": ("ulysses", "ulysses_forward", "ulysses_backward")}


def _design(design):
    import importlib
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {sorted(DESIGNS)}, got {design!r}")
    mod, fwd, bwd = DESIGNS[design]
    module = importlib.import_module(f"{__package__}.{mod}")
    return getattr(module, fwd), getattr(module, bwd)


def attention(q, k, v, *, design: str = "ring", causal: bool = False,
              scale: float | None = None, layout: str = "zigzag", kernel="numpy", group=None):
    """This rank's o (B, H, T_local, d), differentiable with respect to q, k, v."""
    torch = require_torch()
    forward, backward = _design(design)
    opts = dict(causal=causal, scale=scale, layout=layout, kernel=kernel, group=group)

    class _Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            o, lse = forward(q.detach(), k.detach(), v.detach(), **opts)
            o = o.to(q.dtype)
            ctx.save_for_backward(q, k, v, o, lse)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            return backward(q, k, v, o, lse, do.contiguous(), **opts)

    return _Attention.apply(q, k, v)
