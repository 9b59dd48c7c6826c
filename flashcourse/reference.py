"""Dense attention and the softmax steps the course builds on: the ground truth.

Symbols (as in the FlashAttention papers):
    Tq, Tk  query / key positions            (positions)
    d       head dimension                   (elements per position)
    S       scores  = scale * Q K^T          (Tq, Tk)
    P       probabilities = softmax(S) rows  (Tq, Tk)
    O       output  = P V                    (Tq, d)
    m, l    row max and row sum of exp(S - m) (the softmax "statistics")
    lse     log-sum-exp of each row = m + log(l)   (natural log)

`attention` materialises the whole score matrix and works in float64: it is what
every faster implementation in the course is checked against.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

from ._checks import check_causal, check_grad_output, check_not_subclass, check_qkv, check_scale
from ._guards import check_dense_size
from .geometry import visible_mask


# ---------------------------------------------------------------------------
# Dense attention
# ---------------------------------------------------------------------------

#: Peak memory of `attention`, in (Tq, Tk) float64 matrices at once (S, exp(S - m), P V
#: temporaries; ~3.2 measured): used by its size guard (`_guards.check_dense_size`).
PEAK_COPIES = 4
#: The same for `attention_backward` (P, dP, dS and temporaries).
PEAK_COPIES_BACKWARD = 6

def attention(q, k, v, *, causal: bool = False, scale: float | None = None,
              allow_nonfinite: bool = False):
    """Dense (standard) attention in float64.

    Args:
        q: (..., Tq, d) float16/32/64 queries.
        k: (..., Tk, d) keys; leading dims must equal q's.
        v: (..., Tk, d) values.
        causal: bottom-right aligned mask, query i sees key j iff j <= i + Tk - Tq.
        scale: multiplies the scores; default 1/sqrt(d).
        allow_nonfinite: accept NaN/inf inputs (they then propagate).

    Returns:
        o:   (..., Tq, d) float64 output.
        lse: (..., Tq) float64 natural-log logsumexp of each row's scaled, masked
             scores. A row with no visible key has o = 0 and lse = -inf.

    Raises:
        MemoryError (before allocating) when the (..., Tq, Tk) float64 matrices would
        need more than `flashcourse._guards.dense_memory_limit()` bytes: check long
        sequences a few rows or heads at a time, or use `flashcourse.tiled.forward`.
    """
    q, k, v = check_qkv(q, k, v, allow_nonfinite=allow_nonfinite)
    causal = check_causal(causal)
    d = q.shape[-1]
    scale = check_scale(scale, d)
    tq, tk = q.shape[-2], k.shape[-2]
    check_dense_size(q.shape[:-2], tq, tk, "reference.attention", copies=PEAK_COPIES)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))

    return _masked_attention(q64, k64, v64, visible_mask(tq, tk, causal), scale)


def _masked_attention(q64, k64, v64, mask, scale):
    """Dense float64 attention with a boolean (Tq, Tk) mask of visible pairs."""
    s = scale * (q64 @ np.swapaxes(k64, -1, -2))            # (..., Tq, Tk) scores
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)                        # (..., Tq, 1)
    m_safe = np.where(np.isfinite(m), m, 0.0)                # fully masked rows: m = -inf
    p = np.exp(s - m_safe)                                   # (..., Tq, Tk), 0 where masked
    l = p.sum(axis=-1, keepdims=True)                        # (..., Tq, 1)
    empty = l == 0.0
    o = (p @ v64) / np.where(empty, 1.0, l)                  # (..., Tq, d)
    o = np.where(empty, 0.0, o)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m_safe + np.log(np.where(empty, 1.0, l)))[..., 0]
    return o, lse


def attention_with_mask(q, k, v, mask, *, scale: float | None = None):
    """Dense float64 attention where `mask` (a boolean (Tq, Tk) array) says which pairs
    are visible: for example `geometry.causal_mask(Tq, Tk, align="top-left")`. Returns (o, lse)
    like `attention`; a row with no visible key has o = 0 and lse = -inf."""
    q, k, v = check_qkv(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    tq, tk = q.shape[-2], k.shape[-2]
    mask = np.asarray(check_not_subclass(mask, "mask"))
    if mask.dtype != np.bool_ or mask.shape != (tq, tk):
        raise ValueError(f"mask must be a boolean array of shape (Tq, Tk) = ({tq}, {tk}), "
                         f"got dtype {mask.dtype} and shape {mask.shape}")
    check_dense_size(q.shape[:-2], tq, tk, "reference.attention_with_mask", copies=PEAK_COPIES)
    return _masked_attention(*(x.astype(np.float64) for x in (q, k, v)), mask, scale)


def scores(q, k, *, causal: bool = False, scale: float | None = None) -> np.ndarray:
    """The (..., Tq, Tk) float64 score matrix S = scale * Q K^T, -inf where masked."""
    dummy_v = k
    q, k, _ = check_qkv(q, k, dummy_v)
    causal = check_causal(causal)
    scale = check_scale(scale, q.shape[-1])
    check_dense_size(q.shape[:-2], q.shape[-2], k.shape[-2], "reference.scores", copies=3)
    s = scale * (q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2))
    return np.where(visible_mask(q.shape[-2], k.shape[-2], causal), s, -np.inf)


# ---------------------------------------------------------------------------
# The softmax steps of notebook 02
# ---------------------------------------------------------------------------

def _check_vector(x, name="x") -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    check_not_subclass(x, name)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} must have a float dtype, got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last axis, got shape {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"{name} must not contain NaN or +inf (-inf means 'masked')")
    return x


def softmax_naive(x: np.ndarray) -> np.ndarray:
    """exp(x) / sum(exp(x)) along the last axis, in x's dtype.

    Deliberately unsafe: exp overflows to inf for x > ~88.7 in float32 and
    x > ~11.1 in float16, and the result becomes inf/inf = NaN. Notebook 02
    shows that failure; never use this for real work.
    """
    x = _check_vector(x)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


def softmax_safe(x: np.ndarray) -> np.ndarray:
    """Max-subtracted ("safe") softmax: exp(x - max) / sum(exp(x - max)).

    Mathematically identical to the naive one (the factor exp(-max) cancels)
    but every exponent is <= 0, so nothing overflows. Two passes over x for
    the statistics (max, then sum) and one more to normalise.
    A row that is all -inf (fully masked) returns zeros.
    """
    x = _check_vector(x)
    m = x.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0).astype(x.dtype)
    e = np.exp(x - m)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


class SoftmaxState(NamedTuple):
    """Running softmax statistics of the part of a row seen so far.

    m: the running maximum (-inf before any element).
    l: sum of exp(x_i - m) over the elements seen (0 before any element).
    """

    m: float
    l: float


EMPTY_STATE = SoftmaxState(-np.inf, 0.0)


def _check_real(x, name: str, *, least: float = -math.inf) -> float:
    """`x` as a float: a real number (not a bool), not NaN, not +inf, >= least."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {x!r} ({type(x).__name__})")
    x = float(x)
    if math.isnan(x) or x == math.inf or x < least:
        also = f", >= {least:g}" if least > -math.inf else " (-inf means 'masked')"
        raise ValueError(f"{name} must not be NaN or +inf{also}, got {x}")
    return x


def _check_state(state, name: str) -> SoftmaxState:
    """`state` as a SoftmaxState: a pair (m, l), m a real number or -inf, l >= 0 finite."""
    if not isinstance(state, tuple) or len(state) != 2:
        raise TypeError(f"{name} must be a SoftmaxState(m, l) (or a pair (m, l)), got "
                        f"{state!r} ({type(state).__name__})")
    m = _check_real(state[0], f"{name}.m")
    l = _check_real(state[1], f"{name}.l", least=0.0)
    return SoftmaxState(m, l)


def online_update(state: SoftmaxState, x: float) -> SoftmaxState:
    """Fold one more element x into the running (m, l) -- Milakov & Gimelshein 2018.

        m' = max(m, x)
        l' = l * exp(m - m') + exp(x - m')

    The factor exp(m - m') rescales the old sum to the new maximum. state: a
    SoftmaxState (or a pair (m, l)); x: a real number, -inf for a masked element. NaN or
    +inf in either, a negative l or a value that is not a number: an error naming it.
    """
    return _online_update(_check_state(state, "state"), _check_real(x, "x"))


def _online_update(state: SoftmaxState, x: float) -> SoftmaxState:
    m, l = state
    m_new = max(m, x)
    if m_new == -np.inf:  # nothing visible yet
        return EMPTY_STATE
    return SoftmaxState(m_new, l * np.exp(m - m_new) + np.exp(x - m_new))


def merge_states(a: SoftmaxState, b: SoftmaxState) -> SoftmaxState:
    """Combine the statistics of two disjoint parts of one row.

        m = max(m_a, m_b)
        l = l_a * exp(m_a - m) + l_b * exp(m_b - m)

    Associative and commutative, so blocks can be combined in any order: the
    rule that lets FlashAttention process keys tile by tile. a, b: SoftmaxStates (or
    pairs (m, l)); a NaN or +inf, a negative l or a value that is not a number is an
    error naming it (a.m, b.l, ...).
    """
    a, b = _check_state(a, "a"), _check_state(b, "b")
    m = max(a.m, b.m)
    if m == -np.inf:
        return EMPTY_STATE
    return SoftmaxState(m, a.l * np.exp(a.m - m) + b.l * np.exp(b.m - m))


def online_softmax_stats(x: np.ndarray) -> SoftmaxState:
    """One pass over a 1-D array: its (m, l) with l = sum(exp(x - max(x)))."""
    x = _check_vector(x)
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D for online_softmax_stats, got shape {x.shape}")
    state = EMPTY_STATE
    for xi in x.astype(np.float64):
        state = _online_update(state, float(xi))
    return state


def online_softmax(x: np.ndarray) -> np.ndarray:
    """Softmax of a 1-D array from one statistics pass plus one normalising pass."""
    m, l = online_softmax_stats(x)
    if l == 0.0:
        return np.zeros_like(x)
    return (np.exp(x.astype(np.float64) - m) / l).astype(x.dtype)


def logsumexp(x: np.ndarray) -> np.ndarray:
    """Natural-log logsumexp along the last axis in float64 (-inf for all -inf rows)."""
    x = _check_vector(x).astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return (m_safe + np.log(np.exp(x - m_safe).sum(axis=-1, keepdims=True)))[..., 0]


# ---------------------------------------------------------------------------
# The backward pass (notebook 09)
# ---------------------------------------------------------------------------

def attention_backward(q, k, v, do, *, causal: bool = False, scale: float | None = None):
    """Gradients of dense attention, in float64, from the softmax Jacobian written out.

    With S = scale * Q K^T (Tq, Tk), P = softmax(S) row by row, O = P V and a loss L
    whose gradient with respect to O is dO = dL/dO (Tq, d):

        dV = P^T dO                                  (Tk, d)
        dP = dO V^T                                  (Tq, Tk)
        dS_ij = sum_k J_i[j, k] dP_ik, with the softmax Jacobian of row i
                J_i[j, k] = dP_ik/dS_ij = P_ij (delta_jk - P_ik), so
        dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)      (Tq, Tk)
        dQ = scale * dS K                            (Tq, d)
        dK = scale * dS^T Q                          (Tk, d)

    This is the ground truth for the backward: it materialises P, dP and dS and
    does not use the shortcut D_i = dO_i . O_i of FlashAttention (notebook 09
    shows the two are equal), so the tiled backward is checked against an
    independent formula.

    Args:
        q: (..., Tq, d), k, v: (..., Tk, d), float16/32/64, one dtype.
        do: (..., Tq, d) float gradient of the loss with respect to the output o.
        causal, scale: as in `attention`.

    Returns:
        (dq, dk, dv): float64 arrays shaped like q, k, v. A row with no visible key
        (fully masked) contributes nothing: its dq row is 0 and it adds 0 to dk, dv.
    """
    q, k, v = check_qkv(q, k, v)
    do = check_grad_output(do, q)
    causal = check_causal(causal)
    scale = check_scale(scale, q.shape[-1])
    tq, tk = q.shape[-2], k.shape[-2]
    check_dense_size(q.shape[:-2], tq, tk, "reference.attention_backward",
                     copies=PEAK_COPIES_BACKWARD)
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))

    s = scale * (q64 @ np.swapaxes(k64, -1, -2))            # (..., Tq, Tk)
    mask = visible_mask(tq, tk, causal)                      # (Tq, Tk)
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m_safe)                                   # 0 where masked
    total = e.sum(axis=-1, keepdims=True)
    p = e / np.where(total == 0.0, 1.0, total)               # (..., Tq, Tk); 0-rows stay 0

    dv = np.swapaxes(p, -1, -2) @ do64                       # (..., Tk, d)
    dp = do64 @ np.swapaxes(v64, -1, -2)                     # (..., Tq, Tk)
    row_dot = (p * dp).sum(axis=-1, keepdims=True)           # (..., Tq, 1) sum_k P_ik dP_ik
    ds = p * (dp - row_dot)                                  # (..., Tq, Tk)
    dq = scale * (ds @ k64)                                  # (..., Tq, d)
    dk = scale * (np.swapaxes(ds, -1, -2) @ q64)             # (..., Tk, d)
    return dq, dk, dv


def softmax_jacobian(p_row: np.ndarray) -> np.ndarray:
    """The (Tk, Tk) Jacobian J[j, k] = d softmax_k / d s_j = p_j (delta_jk - p_k) of one row.

    Notebook 09 uses it to show that J dP = P * (dP - sum_k P_k dP_k): the full
    matrix never has to be built. p_row: a non-empty 1-D array of finite real numbers
    (TypeError/ValueError naming p_row otherwise); the result is float64.
    """
    p = np.asarray(check_not_subclass(p_row, "p_row"))
    if p.dtype.kind not in "fiu":
        raise TypeError(f"p_row must hold real numbers (a float array), got dtype {p.dtype}")
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"p_row must be 1-D and non-empty (one row of probabilities), got "
                         f"shape {p.shape}")
    p = p.astype(np.float64)
    if not np.isfinite(p).all():
        raise ValueError("p_row contains NaN or inf: pass a row of probabilities")
    return np.diag(p) - np.outer(p, p)
