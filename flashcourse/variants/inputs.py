"""Validation shared by every variants path: (B, H, T, d) arrays, GQA heads, sinks, mods.

Layout (FlexAttention's): q (B, Hq, Tq, d); k, v (B, Hkv, Tk, d) with Hq a multiple of
Hkv (grouped-query attention: query head h reads key/value head h // (Hq / Hkv); Hkv = 1
is multi-query attention, Hkv = Hq plain multi-head). sinks: None or (Hq,) float, one
logit per query head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import accumulator_dtype, check_array, check_scale
from .mods import check_fits, check_mod


def _axis(name: str, axis: int) -> property:
    """A read-only int property: the length of axis `axis` of the array field `name`."""
    return property(lambda self: getattr(self, name).shape[axis],
                    doc=f"{name}.shape[{axis}]")


@dataclass(frozen=True)
class Problem:
    """Validated inputs of one variants call."""

    q: np.ndarray                # (B, Hq, Tq, d)
    k: np.ndarray                # (B, Hkv, Tk, d)
    v: np.ndarray                # (B, Hkv, Tk, d)
    sinks: np.ndarray | None     # (Hq,) float64, or None
    scale: float
    mask_mod: object
    score_mod: object

    batch = _axis("q", 0)
    heads = _axis("q", 1)
    kv_heads = _axis("k", 1)
    tq = _axis("q", 2)
    tk = _axis("k", 2)
    d = _axis("q", 3)

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    @property
    def acc_dtype(self) -> np.dtype:
        return accumulator_dtype(self.q.dtype)


def check_layout(q_shape, k_shape, v_shape) -> None:
    """The shape rules of q (B, Hq, Tq, d), k and v (B, Hkv, Tk, d), Hq a multiple of Hkv:
    ValueError naming the argument that breaks one. Shapes only, so that device arrays
    (`flashcourse.cuda.variants_backward`) are checked without reading them."""
    for shp, name, heads in ((q_shape, "q", "Hq"), (k_shape, "k", "Hkv"), (v_shape, "v", "Hkv")):
        if len(shp) != 4:
            raise ValueError(f"{name} must have 4 dimensions (B, {heads}, T, d), got shape "
                             f"{tuple(shp)}")
        if 0 in tuple(shp):
            raise ValueError(f"{name} must have no empty axis, got shape {tuple(shp)}")
    if tuple(k_shape) != tuple(v_shape):
        raise ValueError(f"v must have k's shape (B, Hkv, Tk, d), got k {tuple(k_shape)} and "
                         f"v {tuple(v_shape)}")
    if q_shape[0] != k_shape[0] or q_shape[3] != k_shape[3]:
        raise ValueError(f"q and k must have the same batch B and head dim d, got q "
                         f"{tuple(q_shape)} and k {tuple(k_shape)}")
    if q_shape[1] % k_shape[1]:
        raise ValueError(f"the query heads Hq = {q_shape[1]} must be a multiple of the "
                         f"key/value heads Hkv = {k_shape[1]} (grouped-query attention)")


def check_sinks(sinks, heads: int):
    """sinks as a (Hq,) float64 array (None passes): ValueError unless a finite float
    array of one logit per query head."""
    if sinks is None:
        return None
    s = np.asarray(sinks)
    if s.shape != (heads,) or s.dtype.kind != "f" or not np.isfinite(s).all():
        raise ValueError(f"sinks must be a finite float array of shape (Hq,) = ({heads},), "
                         f"one logit per query head, got dtype {s.dtype} and shape "
                         f"{s.shape}")
    return s.astype(np.float64)


def check_inputs(q, k, v, *, mask_mod=None, score_mod=None, sinks=None,
                 scale=None) -> Problem:
    """A `Problem` from the arguments, or one clear error naming the one that is wrong."""
    q, k, v = (check_array(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    check_layout(q.shape, k.shape, v.shape)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, "
                        f"v {v.dtype}")
    check_mod(mask_mod, "mask_mod", 4)
    check_mod(score_mod, "score_mod", 5)
    tq, tk, hq = q.shape[2], k.shape[2], q.shape[1]
    check_fits(mask_mod, "mask_mod", tq, tk, hq, q.shape[0])
    check_fits(score_mod, "score_mod", tq, tk, hq, q.shape[0])
    sinks = check_sinks(sinks, hq)
    return Problem(q, k, v, sinks, check_scale(scale, q.shape[3]), mask_mod, score_mod)


def check_grad_inputs(p: Problem, o, lse, do):
    """o, do as q (B, Hq, Tq, d) in q's dtype, lse (B, Hq, Tq) float (-inf allowed)."""
    o = check_array(o, "o")
    do = check_array(do, "do")
    for x, name in ((o, "o"), (do, "do")):
        if x.shape != p.q.shape or x.dtype != p.q.dtype:
            raise ValueError(f"{name} must have q's shape {p.q.shape} and dtype {p.q.dtype}, "
                             f"got {x.shape} {x.dtype}")
    lse = np.asarray(lse)
    if lse.shape != p.q.shape[:3] or lse.dtype.kind != "f" or np.isnan(lse).any() \
            or np.isposinf(lse).any():
        raise ValueError(f"lse must be the forward's (B, Hq, Tq) = {p.q.shape[:3]} float "
                         f"logsumexp (-inf only for a row with nothing visible), got "
                         f"{lse.shape} {lse.dtype}")
    return o, lse, do


def check_result(o, lse):
    """ValueError naming the first row whose o or lse is NaN/inf (lse = -inf allowed)."""
    bad = ~np.isfinite(o).all(axis=-1) | np.isnan(lse) | np.isposinf(lse)
    if bad.any():
        b, h, i = (int(x[0]) for x in np.nonzero(bad))
        raise ValueError(f"the result of row {i} (batch {b}, head {h}) is not finite: "
                         f"score_mod returned NaN or +inf for a visible pair, or the "
                         f"scores overflow {o.dtype} (lower scale or pass float64)")
