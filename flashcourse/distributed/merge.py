"""Merging two partial attention states, in the form ring attention uses.

Two partial results (o_a, lse_a) and (o_b, lse_b) of the same query rows over disjoint
key sets (notebook 02's merge; `flashcourse.decode.merge` writes it with the max) combine
into the state of the union. Ring attention (PyTorch's context parallel,
ring-flash-attention) writes it with a sigmoid, which needs no max and no division:

    o   = o_a - sigmoid(lse_b - lse_a) (o_a - o_b)
    lse = lse_a - logsigmoid(lse_a - lse_b)

(sigmoid(lse_b - lse_a) = e^lse_b / (e^lse_a + e^lse_b), the weight of b). A row that saw
no key yet has lse = -inf (and o = 0): there the formulas would give NaN (-inf - -inf),
so such a row simply takes the other state. Both empty: o = 0, lse = -inf.

`merge_sigmoid` works on numpy arrays (float64 stays float64) and on torch tensors;
16-bit tensors (float16, bfloat16) are merged in float32 and the result stays float32,
the accumulator a ring keeps between steps.
"""

from __future__ import annotations

import numpy as np

__all__ = ["merge_sigmoid"]


def _check(o_a, lse_a, o_b, lse_b):
    for name, o, lse in (("o_a", o_a, lse_a), ("o_b", o_b, lse_b)):
        if tuple(o.shape[:-1]) != tuple(lse.shape):
            raise ValueError(f"lse_{name[-1]} must have the shape {name}.shape[:-1] = "
                             f"{tuple(o.shape[:-1])} (one lse per row of {name} (..., d)), "
                             f"got {tuple(lse.shape)}")
    if tuple(o_a.shape) != tuple(o_b.shape):
        raise ValueError(f"o_a and o_b must have one shape, got {tuple(o_a.shape)} and "
                         f"{tuple(o_b.shape)}")


def merge_sigmoid(o_a, lse_a, o_b, lse_b):
    """(o, lse) of the union of two partial states (see the module docstring).

    o_a, o_b: (..., d); lse_a, lse_b: (...), natural log, -inf for a row with no key.
    numpy arrays or torch tensors (all four of one kind). Returns new arrays/tensors.
    numpy: real arrays, o finite, lse without NaN or +inf (-inf is a row with no key);
    anything else is a TypeError or ValueError naming the argument.
    """
    names = ("o_a", "lse_a", "o_b", "lse_b")
    if isinstance(o_a, np.ndarray):
        for name, x in zip(names, (o_a, lse_a, o_b, lse_b)):
            if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
                raise TypeError(f"{name} must be a real numpy array like o_a, got "
                                f"{type(x).__name__} {getattr(x, 'dtype', '')}")
            bad = (np.isnan(x) | (x == np.inf)) if name.startswith("lse") else ~np.isfinite(x)
            if bad.any():
                raise ValueError(f"{name} contains NaN or inf"
                                 + (" (only -inf, a row with no key, is allowed)"
                                    if name.startswith("lse") else ""))
        _check(o_a, lse_a, o_b, lse_b)
        return _merge_numpy(o_a, lse_a, o_b, lse_b)
    for name, x in zip(names, (o_a, lse_a, o_b, lse_b)):
        if type(x).__module__.split(".")[0] != "torch":
            raise TypeError(f"{name} must be a numpy array or a torch tensor (all four of "
                            f"one kind), got {type(x).__name__}")
    _check(o_a, lse_a, o_b, lse_b)
    return _merge_torch(o_a, lse_a, o_b, lse_b)


def _merge_numpy(o_a, lse_a, o_b, lse_b):
    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)
    either = a_empty | b_empty
    diff = np.where(either, 0.0, lse_b) - np.where(either, 0.0, lse_a)   # no -inf - -inf
    w_b = np.exp(-np.logaddexp(0.0, -diff))                          # sigmoid(diff)
    w_b = np.where(b_empty, 0.0, np.where(a_empty, 1.0, w_b))
    o = np.where(b_empty[..., None], o_a, o_a - w_b[..., None] * (o_a - o_b))
    lse = lse_a + np.logaddexp(0.0, diff)                            # - logsigmoid(-diff)
    lse = np.where(a_empty, lse_b, np.where(b_empty, lse_a, lse))
    return o, lse


def _merge_torch(o_a, lse_a, o_b, lse_b):
    import torch
    import torch.nn.functional as F

    acc = torch.float64 if o_a.dtype == torch.float64 else torch.float32
    o_a, lse_a, o_b, lse_b = (x.to(acc) for x in (o_a, lse_a, o_b, lse_b))
    a_empty, b_empty = torch.isneginf(lse_a), torch.isneginf(lse_b)
    diff = torch.where(a_empty | b_empty, torch.zeros_like(lse_a), lse_b - lse_a)
    w_b = torch.sigmoid(diff)
    w_b = torch.where(b_empty, 0.0, torch.where(a_empty, 1.0, w_b)).to(acc)
    o = torch.where(b_empty[..., None], o_a, o_a - w_b[..., None] * (o_a - o_b))
    lse = lse_a - F.logsigmoid(-diff)
    lse = torch.where(a_empty, lse_b, torch.where(b_empty, lse_a, lse))
    return o, lse
