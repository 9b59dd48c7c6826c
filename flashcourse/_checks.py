"""Input validation shared by every attention implementation in the course.

Every public function checks its arguments here, so that bad input fails with a
message that names the argument and says what was expected, instead of a NaN,
a silent broadcast, or a traceback from deep inside numpy or Numba.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
LOOP_ORDERS = ("fa1", "fa2")


def check_array(x, name: str, *, allow_nonfinite: bool = False) -> np.ndarray:
    """Return ``x`` if it is a float16/32/64 numpy array of shape ``(..., T, d)``.

    Raises TypeError for non-arrays and non-float dtypes, ValueError for a
    wrong number of dimensions, an empty axis, or NaN/inf entries (unless
    ``allow_nonfinite``).
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{name} must be a numpy array of shape (..., T, d), got {type(x).__name__}"
        )
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must have dtype float16, float32 or float64, got {x.dtype}"
        )
    if x.ndim < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions (..., T, d), got shape {x.shape}"
        )
    if 0 in x.shape:
        raise ValueError(
            f"{name} must not have an empty axis (T >= 1, d >= 1), got shape {x.shape}"
        )
    if not allow_nonfinite and not np.isfinite(x).all():
        raise ValueError(
            f"{name} contains NaN or inf; pass allow_nonfinite=True if that is intended"
        )
    return x


def check_qkv(q, k, v, *, allow_nonfinite: bool = False):
    """Validate q (..., Tq, d), k (..., Tk, d), v (..., Tk, d); return them.

    Leading (batch/head) dimensions must match exactly: nothing is broadcast.
    All three must share one dtype.
    """
    q = check_array(q, "q", allow_nonfinite=allow_nonfinite)
    k = check_array(k, "k", allow_nonfinite=allow_nonfinite)
    v = check_array(v, "v", allow_nonfinite=allow_nonfinite)
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(
            f"q, k and v must have the same number of dimensions, got shapes "
            f"q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"leading (batch/head) dimensions of q, k, v must match exactly "
            f"(no broadcasting), got q {q.shape[:-2]}, k {k.shape[:-2]}, v {v.shape[:-2]}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"head dim d of q and k must match, got q d={q.shape[-1]} and k d={k.shape[-1]}"
        )
    if k.shape != v.shape:
        raise ValueError(
            f"v must have the same shape as k (..., Tk, d), got k {k.shape} and v {v.shape}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    return q, k, v


def check_block(b, name: str) -> int:
    """Return ``b`` as an int if it is a positive integer (bools rejected)."""
    if isinstance(b, (bool, np.bool_)) or not isinstance(b, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {b!r}")
    if b < 1:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {b}")
    return int(b)


def check_length(t, name: str) -> int:
    """Return a positive integer length (positions, elements, ...)."""
    return check_block(t, name)


def check_scale(scale, d: int) -> float:
    """Return the softmax scale: ``1/sqrt(d)`` when None, else a finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {scale!r}")
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return scale


def check_causal(causal) -> bool:
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    return bool(causal)


def check_loop_order(loop_order) -> str:
    if loop_order not in LOOP_ORDERS:
        raise ValueError(f"loop_order must be 'fa1' or 'fa2', got {loop_order!r}")
    return loop_order


def accumulator_dtype(dtype) -> np.dtype:
    """float64 inputs accumulate in float64; float16/float32 in float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def causal_offset(t_query: int, t_key: int) -> int:
    """Bottom-right alignment: query i may see key j iff j <= i + (Tk - Tq)."""
    return t_key - t_query


def visible_mask(t_query: int, t_key: int, causal: bool,
                 q0: int = 0, q1: int | None = None,
                 k0: int = 0, k1: int | None = None) -> np.ndarray:
    """Boolean (q1-q0, k1-k0) mask of visible pairs for rows [q0, q1), cols [k0, k1)."""
    q1 = t_query if q1 is None else q1
    k1 = t_key if k1 is None else k1
    if not causal:
        return np.ones((q1 - q0, k1 - k0), dtype=bool)
    i = np.arange(q0, q1)[:, None]
    j = np.arange(k0, k1)[None, :]
    return j <= i + causal_offset(t_query, t_key)


def tile_visibility(q0: int, q1: int, k0: int, k1: int,
                    t_query: int, t_key: int, causal: bool) -> str:
    """Classify the tile rows [q0, q1) x cols [k0, k1): 'full', 'partial' or 'hidden'."""
    if not causal:
        return "full"
    off = causal_offset(t_query, t_key)
    if k0 > (q1 - 1) + off:  # even the last row cannot see the first column
        return "hidden"
    if (k1 - 1) <= q0 + off:  # even the first row sees the last column
        return "full"
    return "partial"
