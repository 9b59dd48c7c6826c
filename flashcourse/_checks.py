"""Input validation shared by every attention implementation in the course.

Every public function checks its arguments here, so that bad input fails with a
message that names the argument and says what was expected, instead of a NaN,
a silent broadcast, or a traceback from deep inside numpy or Numba.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
LOOP_ORDERS = ("fa1", "fa2")


def check_not_subclass(x, name: str):
    """Return ``x`` unless it is a masked array or an np.matrix (TypeError naming `name`).

    A masked array's mask would be ignored by the kernels (they read the raw data,
    masked entries included), and np.matrix is always 2-D with its own `*`, so
    reshaping to (..., T, d) fails deep in numpy or Numba. Other ndarray subclasses
    (np.memmap, ...) behave as arrays and are taken as they are.
    """
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array (numpy.ma): masked arrays are not supported, "
            f"their mask would be ignored; fill or drop the masked entries first "
            f"(e.g. {name}.filled(0.0), or select the rows you want)")
    if isinstance(x, np.matrix):
        raise TypeError(
            f"{name} is a numpy.matrix (always 2-D): pass a plain array, "
            f"np.asarray({name}), of shape (..., T, d)")
    return x


#: What a NaN/inf input error suggests: a forward takes allow_nonfinite, a backward not.
NONFINITE_HINT = "pass allow_nonfinite=True if that is intended"
BACKWARD_NONFINITE_HINT = ("a backward needs finite inputs (o, lse and do as the forward "
                           "returned them for finite q, k, v)")


def check_array(x, name: str, *, allow_nonfinite: bool = False,
                hint: str = NONFINITE_HINT) -> np.ndarray:
    """Return ``x`` if it is a float16/32/64 numpy array of shape ``(..., T, d)``.

    Raises TypeError for non-arrays, masked arrays, np.matrix (`check_not_subclass`)
    and non-float dtypes, ValueError for a wrong number of dimensions, an empty
    axis, or NaN/inf entries (unless ``allow_nonfinite``; the message ends with ``hint``).
    """
    allow_nonfinite = check_bool(allow_nonfinite, "allow_nonfinite")
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{name} must be a numpy array of shape (..., T, d), got {type(x).__name__}"
        )
    check_not_subclass(x, name)
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
        raise ValueError(f"{name} contains NaN or inf; {hint}")
    return x


def check_qkv(q, k, v, *, allow_nonfinite: bool = False, hint: str = NONFINITE_HINT):
    """Validate q (..., Tq, d), k (..., Tk, d), v (..., Tk, d); return them.

    Leading (batch/head) dimensions must match exactly: nothing is broadcast.
    All three must share one dtype.
    """
    q, k, v = (check_array(x, name, allow_nonfinite=allow_nonfinite, hint=hint)
               for x, name in ((q, "q"), (k, "k"), (v, "v")))
    check_qkv_shapes(q.shape, k.shape, v.shape)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}"
        )
    return q, k, v


def check_qkv_shapes(qs: tuple, ks: tuple, vs: tuple) -> None:
    """Raise ValueError unless q (..., Tq, d), k and v (..., Tk, d) fit together
    (numpy or device arrays alike: only the shapes are read)."""
    if not (len(qs) == len(ks) == len(vs)):
        raise ValueError(
            f"q, k and v must have the same number of dimensions, got shapes "
            f"q {qs}, k {ks}, v {vs}"
        )
    if qs[:-2] != ks[:-2] or ks[:-2] != vs[:-2]:
        raise ValueError(
            f"leading (batch/head) dimensions of q, k, v must match exactly "
            f"(no broadcasting), got q {qs[:-2]}, k {ks[:-2]}, v {vs[:-2]}"
        )
    if qs[-1] != ks[-1]:
        raise ValueError(
            f"head dim d of q and k must match, got q d={qs[-1]} and k d={ks[-1]}"
        )
    if ks != vs:
        raise ValueError(
            f"v must have the same shape as k (..., Tk, d), got k {ks} and v {vs}"
        )


def check_backward_shapes(qs: tuple, os_: tuple, lses: tuple, dos: tuple) -> None:
    """Raise ValueError unless o and do have q's shape and lse is (..., Tq)."""
    if os_ != qs:
        raise ValueError(f"o must have q's shape (..., Tq, d) = {qs}, got {os_}")
    if dos != qs:
        raise ValueError(
            f"do must have the shape of the output o, which is q's shape (..., Tq, d) = "
            f"{qs}, got {dos}")
    if lses != qs[:-1]:
        raise ValueError(
            f"lse must have shape (..., Tq) = {qs[:-1]} (one logsumexp per query row), "
            f"got {lses}")


def check_grad_output(do, q) -> np.ndarray:
    """Validate the output gradient dO: a float array with q's shape (..., Tq, d)."""
    do = check_array(do, "do", hint=BACKWARD_NONFINITE_HINT)
    if do.shape != q.shape:
        raise ValueError(
            f"do must have the shape of the output o, which is q's shape (..., Tq, d) = "
            f"{q.shape}, got {do.shape}")
    return do


def check_backward_inputs(q, k, v, o, lse, do):
    """Validate the inputs of a backward pass; return (q, k, v, o, lse, do).

    q (..., Tq, d), k, v (..., Tk, d) as for the forward; o and do must have q's
    shape and dtype; lse must be a float array of shape (..., Tq) holding the
    forward's natural-log logsumexp: finite, or -inf for a row with no visible key
    (NaN and +inf are rejected).
    """
    q, k, v = check_qkv(q, k, v, hint=BACKWARD_NONFINITE_HINT)
    o = check_array(o, "o", hint=BACKWARD_NONFINITE_HINT)
    if o.shape != q.shape:
        raise ValueError(f"o must have q's shape (..., Tq, d) = {q.shape}, got {o.shape}")
    if o.dtype != q.dtype:
        raise TypeError(f"o must have the dtype of q, k, v ({q.dtype}), got {o.dtype}")
    do = check_grad_output(do, q)
    if do.dtype != o.dtype:
        raise TypeError(f"do must have the dtype of o ({o.dtype}), got {do.dtype}")
    if not isinstance(lse, np.ndarray):
        raise TypeError(f"lse must be a numpy array of shape (..., Tq), got {type(lse).__name__}")
    check_not_subclass(lse, "lse")
    if lse.dtype not in FLOAT_DTYPES:
        raise TypeError(f"lse must have dtype float16, float32 or float64, got {lse.dtype}")
    check_backward_shapes(q.shape, o.shape, lse.shape, do.shape)
    if np.isnan(lse).any() or np.isposinf(lse).any():
        raise ValueError("lse contains NaN or +inf; only -inf (a row with no visible key) "
                         "is allowed")
    return q, k, v, o, lse, do


def check_block(b, name: str) -> int:
    """Return ``b`` as an int if it is a positive integer (bools rejected)."""
    if isinstance(b, (bool, np.bool_)) or not isinstance(b, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {b!r}")
    if b < 1:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {b}")
    return int(b)


def check_count(value, what: str, most: int | None = None, *,
                whole_floats: bool = False) -> int:
    """`value` as an int in [1, most], else ValueError naming `what` (a setting a learner
    sees, in a readout or a widget); `whole_floats` also takes a float with a whole value
    (3e9)."""
    if whole_floats and isinstance(value, (float, np.floating)) and math.isfinite(value):
        value = int(value) if value == int(value) else value
    whole = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if not whole:
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be at least 1, got {value:,}")
    if most is not None and value > most:
        raise ValueError(f"{what} must be at most {most:,}, got {value:,}")
    return int(value)


def check_sizes(**sizes) -> tuple:
    """`check_block` on each keyword (its name is the argument's): the ints, in order."""
    return tuple(check_block(value, name) for name, value in sizes.items())


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


def check_bool(value, name: str, *, none_ok: bool = False) -> bool | None:
    """`value` as a bool if it is True or False (a numpy bool too), else TypeError naming
    `name`. Boolean options accept booleans only: a string such as "no" or "False" is
    truthy, and 0/1 hide a mistaken argument order. none_ok: None is returned as it is
    (an option whose None means "the default")."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value is None and none_ok:
        return None
    raise TypeError(f"{name} must be True or False{' (or None)' if none_ok else ''}, "
                    f"got {value!r} ({type(value).__name__})")


def check_causal(causal) -> bool:
    return check_bool(causal, "causal")


def check_named(value, name: str, kind: type, lookup, expected: str):
    """lookup(value) for a string (a name: lookup raises for an unknown one), `value` itself
    when it is a `kind`, else a TypeError: "<name> must be <expected>, got ..."."""
    if isinstance(value, str):
        return lookup(value)
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {expected}, got {value!r} ({type(value).__name__})")
    return value


def check_choice(value, name: str, choices, *, none_ok: bool = False):
    """`value` if it is one of the strings `choices` (None too with none_ok), else an error
    naming `name` and the choices: TypeError for a value that is not a string (a list,
    an array: `["flash"]` would otherwise fail as "unhashable type" or be compared
    element by element), ValueError for a string that is not one of them."""
    if value is None and none_ok:
        return None
    choices = tuple(choices)
    also = " or None" if none_ok else ""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {choices}{also} (a string), got "
                        f"{value!r} ({type(value).__name__})")
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}{also}, got {value!r}")
    return value


def check_whole(value, name: str, *, least: int = 0, meaning: str = "") -> int:
    """`value` as an int >= least (bools rejected): TypeError for a non-integer, ValueError
    below least, both naming `name`; `meaning` says what the number is (in the message)."""
    what = f"an integer >= {least}" + (f" ({meaning})" if meaning else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    if value < least:
        raise ValueError(f"{name} must be {what}, got {value}")
    return int(value)


def check_loop_order(loop_order) -> str:
    if not isinstance(loop_order, str) or loop_order not in LOOP_ORDERS:
        raise ValueError(f"loop_order must be 'fa1' or 'fa2', got {loop_order!r}")
    return loop_order


def accumulator_dtype(dtype) -> np.dtype:
    """float64 inputs accumulate in float64; float16/float32 in float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


@dataclass(frozen=True)
class Heads:
    """Validated attention inputs, batch and head dimensions flattened into one, BH.

    q (BH, Tq, d); k, v (BH, Tk, d); for a backward also o, do (BH, Tq, d) and
    lse (BH, Tq). `lead` is the original leading shape (...), `dtype` the input
    dtype, `acc_dtype` the dtype sums are kept in. `unflatten` undoes the flattening.
    """

    q: object
    k: object
    v: object
    lead: tuple
    tq: int
    tk: int
    d: int
    scale: float
    causal: bool
    dtype: np.dtype
    o: object = None
    lse: object = None
    do: object = None

    @property
    def bh(self) -> int:
        return int(self.q.shape[0])

    @property
    def acc_dtype(self) -> np.dtype:
        return accumulator_dtype(self.dtype)

    def unflatten(self, x):
        """(BH, T, ...) -> (..., T, ...): give a result the caller's leading shape back."""
        return x.reshape(*self.lead, *x.shape[1:])


def flatten_heads(q, k, v, *, causal=False, scale=None, allow_nonfinite: bool = False,
                  o=None, lse=None, do=None) -> Heads:
    """Validate numpy inputs of a forward (q, k, v) or, given o, lse and do, of a backward;
    return them flattened to (BH, T, d) as a `Heads` (views: nothing is copied).

    Every forward and backward of the course (numpy, CPU, CUDA) starts here, so bad
    input gives the same error everywhere.
    """
    backward = o is not None or lse is not None or do is not None
    if backward:
        q, k, v, o, lse, do = check_backward_inputs(q, k, v, o, lse, do)
    else:
        q, k, v = check_qkv(q, k, v, allow_nonfinite=allow_nonfinite)
    causal = check_causal(causal)
    lead = q.shape[:-2]
    tq, tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = check_scale(scale, d)
    heads = Heads(q.reshape(-1, tq, d), k.reshape(-1, tk, d), v.reshape(-1, tk, d),  # (BH, T, d)
                  lead, tq, tk, d, scale, causal, q.dtype)
    if not backward:
        return heads
    return Heads(heads.q, heads.k, heads.v, lead, tq, tk, d, scale, causal, q.dtype,
                 o=o.reshape(-1, tq, d), lse=lse.reshape(-1, tq), do=do.reshape(-1, tq, d))
