"""Checks on results: no silent wrong answer from an overflow or a mismatched lse.

Argument checks live in `flashcourse._checks`; these run after a kernel, on what it
returned, so that every path (numpy, Numba CPU, CUDA) shares one rule:

`forward_result` (every forward)
    A row that sees at least one key and whose inputs (its q row and the k, v rows
    it sees) are all finite must get a finite o row and a finite lse. If not, the
    scores scale * q.k (or the weighted sum of v) overflowed the compute type, and
    the kernel's o = 0, lse = -inf or NaN would look like a masked row or a bug:
    raise ValueError saying so and what to do. Exact (no bound is guessed): a finite
    result is never rejected. Cost: one pass over o and lse, O(Tq d) per head.
    A row that sees a NaN or inf input (allowed by allow_nonfinite=True) gets
    o = NaN and lse = NaN: never the empty-row result o = 0, lse = -inf. Other rows
    keep their values, except where a kernel that multiplies whole tiles (dense,
    the CUDA kernels) spread a masked NaN/inf into them (0 * NaN = NaN in P V):
    those rows are NaN too.

`lse_rowsums` (every backward)
    P_ij = exp(S_ij - lse_i) sums to 1 over j exactly when lse_i belongs to the
    inputs (q, k, causal, scale); the backward kernels sum each recomputed row of P
    and this check compares the sums with 1 (tolerance in `lse_tolerance`).

`o_rowsums` (every backward: `tiled.backward`, `cuda.backward`)
    dS_ij = P_ij (dP_ij - D_i) with dP_ij = dO_i . v_j and D_i = dO_i . o_i sums over j
    to dO_i . (P V)_i - D_i sum_j P_ij = dO_i . (P V - o)_i: 0 exactly when o is the
    forward's output P V (in the direction dO_i, the one the gradients depend on). The
    kernels sum each recomputed row of dS beside the row of P; this check compares the
    sums with 0 (tolerance in `o_tolerance`).

`gradients_finite` (every backward)
    From finite inputs, a non-finite dq, dk or dv means the gradients overflowed the
    compute type (float32; float64 for float64 numpy input) or did not fit the output
    dtype: raise ValueError saying so and what to do.
"""

from __future__ import annotations

import math

import numpy as np

from .geometry import causal_offset


def rows_that_see_keys(t_query: int, t_key: int, causal: bool) -> np.ndarray:
    """(Tq,) bool: query i sees at least one key (causal: i + Tk - Tq >= 0)."""
    if not causal:
        return np.ones(t_query, dtype=bool)
    return np.arange(t_query) + causal_offset(t_query, t_key) >= 0


def _clean_rows(qf, kf, vf, causal, kv_group=1):
    """(BH, Tq) bool: the row's q and every k, v row it sees are finite. k and v may
    have BH / kv_group heads (grouped-query attention: one per kv_group query heads)."""
    tq, tk = qf.shape[1], kf.shape[1]
    q_ok = np.isfinite(qf).all(axis=-1)                                  # (BH, Tq)
    kv_bad = ~(np.isfinite(kf).all(axis=-1) & np.isfinite(vf).all(axis=-1))  # (BHkv, Tk)
    kv_bad = np.repeat(kv_bad, kv_group, axis=0)                         # (BH, Tk)
    if not causal:
        return q_ok & ~kv_bad.any(axis=-1)[:, None]
    first_bad = np.where(kv_bad.any(axis=-1), kv_bad.argmax(axis=-1), tk)  # (BH,)
    last_seen = np.arange(tq) + causal_offset(tq, tk)                    # (Tq,) key index
    return q_ok & (first_bad[:, None] > last_seen[None, :])


def _log10_norm_max(x) -> float:
    """log10 of the largest row norm of x, without overflow (float64 1e200 inputs)."""
    a = np.abs(x.astype(np.float64))
    top = a.max()
    if not np.isfinite(top) or top == 0:
        return -math.inf if top == 0 else math.inf
    return math.log10(top) + math.log10(np.sqrt(((a / top) ** 2).sum(axis=-1)).max())


def forward_result(q, k, v, o, lse, causal: bool, *, compute: str,
                   allow_nonfinite: bool = False, scale: float = 1.0, advice: str = "",
                   kv_group: int = 1):
    """Return (o, lse) after the rule of the module docstring; raise on overflow.

    q (..., Tq, d), k, v (..., Tk, d): the validated inputs; o (..., Tq, d) and
    lse (..., Tq): the kernel's results (numpy). compute: the compute type's name
    for the message; advice: what to try, appended to the message. kv_group: query
    heads per k/v head (grouped-query attention, `flashcourse.decode`), else 1.
    """
    tq, tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    sees = rows_that_see_keys(tq, tk, causal)                            # (Tq,)
    of = o.reshape(-1, tq, d)                                            # (BH, Tq, d)
    lf = lse.reshape(-1, tq)                                             # (BH, Tq)
    finite = np.isfinite(lf) & np.isfinite(of).all(axis=-1)              # (BH, Tq)
    if not allow_nonfinite and finite[:, sees].all():
        return o, lse
    qf, kf, vf = (x.reshape(-1, x.shape[-2], d) for x in (q, k, v))
    if allow_nonfinite:
        clean = _clean_rows(qf, kf, vf, causal, kv_group)                # (BH, Tq)
        kv_ok = np.isfinite(kf).all(axis=(1, 2)) & np.isfinite(vf).all(axis=(1, 2))
        head_ok = np.repeat(kv_ok, kv_group)                             # (BH,)
        strict = clean & head_ok[:, None]       # nothing non-finite anywhere in the head
    else:
        clean = strict = np.ones(finite.shape, dtype=bool)
    bad = sees[None, :] & strict & ~finite
    if bad.any():
        h, i = (int(x[0]) for x in np.nonzero(bad))
        with np.errstate(all="ignore"):
            bound = (math.log10(abs(scale)) if scale else -math.inf) \
                + _log10_norm_max(qf) + _log10_norm_max(kf)
        raise ValueError(
            f"the attention scores overflow {compute}: query row {i} (of flattened head "
            f"{h}) sees keys and has finite inputs, but its result is not finite "
            f"(lse = {lf[h, i]}; o = 0, lse = -inf is kept for rows that see no key, and "
            f"a huge v can overflow the weighted sum too). |scale * q.k| can reach "
            f"|scale| max|q_i| max|k_j| ~ 1e{bound:.1f}, and {compute} holds at most "
            f"{float(np.finfo(compute).max):.3g} (exp needs score differences below that "
            f"too). Lower scale, normalise q and k (divide by their largest row norm), "
            f"or {advice or 'pass float64 inputs'}.")
    # Rows that see a NaN/inf, and rows a kernel spoiled through a masked one
    # (0 * NaN = NaN in a tile's P V: the dense and CUDA kernels): NaN, never "masked".
    dirty = sees[None, :] & (~clean | (~strict & ~finite))
    if np.any(dirty):
        of = of.copy()
        lf = lf.copy()
        of[dirty] = np.nan
        lf[dirty] = np.nan
        return of.reshape(o.shape), lf.reshape(lse.shape)
    return o, lse


# ---------------------------------------------------------------------------
# backward: does lse belong to the inputs?
# ---------------------------------------------------------------------------

class _Info:
    """eps and max of a compute type (np.finfo's two fields the checks use)."""

    def __init__(self, eps: float, big: float):
        self.eps, self.max = eps, big


def compute_info(compute) -> _Info:
    """eps and largest value of the compute type `compute`: a numpy float dtype (or its
    name), or "bfloat16" (8 exponent bits, 7 stored mantissa bits: eps 2^-7), which numpy
    does not know without the ml_dtypes package."""
    if str(compute) == "bfloat16":
        return _Info(2.0 ** -7, float(np.finfo(np.float32).max))
    fi = np.finfo(compute)
    return _Info(float(fi.eps), float(fi.max))


def lse_tolerance(q, k, lse, scale: float, compute) -> np.ndarray:
    """(..., Tq) allowed |sum_j P_ij - 1| for each row, in float64.

    Summing exp(S_ij - lse_i) in the compute type errs by about
        eps_c * (|lse_i| + d |scale| |q_i| max_j |k_j|)   (the rounding of S - lse)
      + eps_lse * |lse_i|                                  (lse's own storage)
      + eps_c * Tk                                         (the sum itself)
    times small constants; we allow 8x that plus 1e-3 (float32 compute) or 1e-9
    (float64). A wrong lse_i off by delta gives a sum of exp(-delta): any delta above
    the tolerance is caught.
    """
    eps_c = compute_info(compute).eps
    eps_l = float(np.finfo(lse.dtype).eps)
    d, tk = q.shape[-1], k.shape[-2]
    with np.errstate(all="ignore"):
        q64 = q.astype(np.float64)
        k64 = k.astype(np.float64)
        qn = np.sqrt((q64 * q64).sum(axis=-1))                          # (..., Tq)
        kn = np.sqrt((k64 * k64).sum(axis=-1)).max(axis=-1)             # (...,)
        cond = d * abs(scale) * qn * kn[..., None]                      # (..., Tq)
        lse_abs = np.abs(np.where(np.isfinite(lse), lse, 0).astype(np.float64))
        base = 1e-3 if eps_c > 1e-10 else 1e-9
        return base + 8 * (eps_c * (lse_abs + cond + tk) + eps_l * lse_abs)


def lse_rowsums(rowsum, q, k, lse, causal: bool, scale: float, compute) -> None:
    """Raise ValueError unless lse belongs to (q, k, causal, scale).

    rowsum (..., Tq): sum_j P_ij of the recomputed P (0 where lse = -inf). Rows with
    finite lse must sum to 1 within `lse_tolerance`; lse = -inf is allowed only
    for a row that sees no key (the forward's empty row).
    """
    tq, tk = q.shape[-2], k.shape[-2]
    sees = rows_that_see_keys(tq, tk, causal)                           # (Tq,)
    empty_lse = np.isneginf(lse)
    if (empty_lse & sees).any() or (~empty_lse & ~sees).any():
        i = int(np.nonzero(((empty_lse & sees) | (~empty_lse & ~sees)).reshape(-1, tq))[1][0])
        raise ValueError(
            f"lse does not match the inputs: row {i} " +
            ("sees keys but has lse = -inf" if sees[i] else "sees no key but has a finite lse")
            + f" (causal={causal}, Tq={tq}, Tk={tk}); pass the lse that the forward "
              f"returned for these q, k, causal and scale")
    tol = lse_tolerance(q, k, lse, scale, compute)
    err = np.where(empty_lse, 0.0, np.abs(rowsum.astype(np.float64) - 1.0))
    err = np.where(np.isnan(err), np.inf, err)
    if (err > tol).any():
        flat = (err - tol).reshape(-1)
        worst = int(np.argmax(flat))
        i = worst % tq
        raise ValueError(
            f"lse does not match the inputs: the recomputed probabilities "
            f"P = exp(scale q.k - lse) of query row {i} sum to "
            f"{float(rowsum.reshape(-1)[worst]):.6g}, not 1 (allowed error "
            f"{float(tol.reshape(-1)[worst]):.2g}). Pass the lse that the forward returned "
            f"for these q, k, causal and scale (causal={causal}, scale={scale:.6g}).")


def o_tolerance(q, k, v, o, lse, do, scale: float, compute) -> np.ndarray:
    """(..., Tq) allowed |sum_j dS_ij| for each row, in float64.

    The sum is dO_i . (P V - o)_i plus rounding: the error of P (as in `lse_tolerance`)
    times |dP_ij - D_i| <= |dO_i| (max_j |v_j| + |o_i|), and the d-term dot products
    dP and D in the compute type. We allow (lse_tolerance + 8 (d eps_c + eps_o))
    |dO_i| (max_j |v_j| + |o_i|), eps_o the rounding of o's dtype (an o stored in
    float16 passes). A wrong o is caught once |dO_i . (P V - o)_i| passes ~1e-3 of that
    scale; an error below it changes the gradients by less than ~1e-3 of theirs.
    """
    eps_c = compute_info(compute).eps
    eps_o = float(np.finfo(o.dtype).eps)
    d = q.shape[-1]
    with np.errstate(all="ignore"):
        def norm(x):                                                     # (..., T)
            x = x.astype(np.float64)
            return np.sqrt((x * x).sum(axis=-1))
        size = norm(do) * (norm(v).max(axis=-1)[..., None] + norm(o))     # (..., Tq)
        rel = lse_tolerance(q, k, lse, scale, compute) + 8 * (d * eps_c + eps_o)
        return rel * size


#: What to do when the float32 gradients overflow (`o_rowsums`, `gradients_finite`).
GRADIENT_ADVICE = ("The gradients are linear in do: divide do by a power of two and "
                   "multiply dq, dk, dv by it afterwards, or use flashcourse.tiled.backward "
                   "with float64 inputs.")


def o_rowsums(dsum, q, k, v, o, lse, do, causal: bool, scale: float, compute) -> None:
    """Raise ValueError unless o belongs to (q, k, v, lse) in the direction of do.

    dsum (..., Tq): sum_j dS_ij of the recomputed dS (0 for a row with no visible key).
    It must be 0 within `o_tolerance`; a sum that is not finite is an overflow.
    """
    tq = q.shape[-2]
    ds = dsum.astype(np.float64).reshape(-1, tq)                         # (BH, Tq)
    if not np.isfinite(ds).all():
        h, i = (int(x[0]) for x in np.nonzero(~np.isfinite(ds)))
        raise ValueError(
            f"the backward overflows {compute}: the recomputed row {i} (of flattened head "
            f"{h}) of dS = P (dP - D), D = rowsum(do * o), sums to {ds[h, i]}, although "
            f"the inputs are finite. {GRADIENT_ADVICE}")
    tol = o_tolerance(q, k, v, o, lse, do, scale, compute).reshape(-1, tq)
    err = np.abs(ds)
    if (err > tol).any():
        h, i = np.unravel_index(int(np.argmax(err - tol)), err.shape)
        raise ValueError(
            f"o does not match the inputs: for query row {i} (of flattened head {h}), "
            f"sum_j dS_ij = do_i . (P V - o)_i = {ds[h, i]:.6g}, not 0 (allowed error "
            f"{tol[h, i]:.2g}), so o is not the output P V of these q, k, v (P from lse). "
            f"Pass the o that the forward returned for these q, k, v, causal and scale "
            f"(causal={causal}, scale={scale:.6g}).")


def gradients_finite(grads, compute: str, names=("dq", "dk", "dv")) -> None:
    """Raise ValueError if a gradient is not finite; call it once the inputs are known
    finite. grads: (computed, returned) pairs, in the compute type and in the dtype the
    caller gets (they differ for float16 inputs: float32 gradients up to 3.4e38, float16
    ones up to 65504)."""
    for name, (g, out) in zip(names, grads):
        bad_g = ~np.isfinite(g)
        if not bad_g.any() and np.isfinite(out).all():
            continue
        if bad_g.any():
            idx = tuple(int(n) for n in np.argwhere(bad_g)[0])
            raise ValueError(
                f"the gradients overflow {compute}: {name}{list(idx)} = {float(g[idx])} "
                f"although q, k, v, o, lse and do are finite ({compute} is the compute "
                f"type of the kernels and holds at most {compute_info(compute).max:.3g}). "
                f"{GRADIENT_ADVICE}")
        idx = tuple(int(n) for n in np.argwhere(~np.isfinite(out))[0])
        raise ValueError(
            f"the gradients do not fit {out.dtype}: {name}{list(idx)} = {float(g[idx]):.4g} "
            f"(computed in {compute}), beyond {out.dtype}'s largest "
            f"{float(np.finfo(out.dtype).max):.6g}; the gradients come back in the input "
            f"dtype: pass float32 inputs, or divide do by a power of two and multiply the "
            f"gradients by it afterwards.")


# ---------------------------------------------------------------------------
# dense float64 reference: refuse what cannot fit, before allocating
# ---------------------------------------------------------------------------

def dense_memory_limit() -> int:
    """Bytes the dense float64 reference may use: half the physical memory (4 GiB
    if unknown), or FLASHCOURSE_DENSE_MAX_BYTES from the environment: a positive number
    of bytes, whole or in e-notation (8000000000, 8e9); anything else is a ValueError
    naming the variable (never a silent default, nor numpy's message)."""
    import os
    env = os.environ.get("FLASHCOURSE_DENSE_MAX_BYTES")
    if env is not None and env.strip():
        return _env_bytes("FLASHCOURSE_DENSE_MAX_BYTES", env)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def _env_bytes(name: str, text: str) -> int:
    """The environment variable `name`'s value `text` as a positive whole number of bytes."""
    try:
        value = float(text)
    except ValueError:                 # not a number: said below with the variable's name
        value = math.nan
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"{name} must be a positive whole number of bytes (e.g. 8000000000 "
                         f"or 8e9), got {text!r}; unset it for half the physical memory")
    return int(value)


def check_dense_size(lead, t_query: int, t_key: int, what: str, *, copies: int) -> None:
    """Raise MemoryError if `copies` float64 (..., Tq, Tk) matrices exceed the limit."""
    bh = math.prod(int(n) for n in lead)
    need = copies * 8 * bh * t_query * t_key
    limit = dense_memory_limit()
    if need > limit:
        raise MemoryError(
            f"{what} materialises float64 (Tq, Tk) matrices: B*H = {bh}, Tq = {t_query}, "
            f"Tk = {t_key} need about {need / 2**30:.1f} GiB at peak, more than the "
            f"{limit / 2**30:.1f} GiB allowed (half the memory; set "
            f"FLASHCOURSE_DENSE_MAX_BYTES to change it). Check a few heads or query rows "
            f"at a time, or use flashcourse.tiled.forward, which needs no (Tq, Tk) matrix.")
