"""Checker for lab 04: the online-softmax update inside a CUDA kernel tile.

The learner writes one Numba CUDA *device function* (run by one thread, for one
query row, once per key tile of BC = 4 keys):

    @cuda.jit(device=True)
    def tile_update(s, acc, row, k0, tk, off, causal, m, l):
        s:      (BC,) float32 local array, the raw scores scale * q_row . k_j of keys
                j = k0 .. k0 + BC - 1; entries past the last key (j >= Tk) hold garbage
        acc:    (DMAX,) float32 local array, this row's unnormalised output sum_j p_j v_j
        row:    the query position i;  k0: the first key position of the tile
        tk:     Tk;  off = Tk - Tq (causal alignment);  causal: 0 or 1
        m, l:   running max and running sum of exp(s - m) of this row (float32)
      It must
        1. mask: s_j = -inf where j >= Tk, or (causal and j > i + off),
        2. m_new = max(m, max_j s_j),
        3. m_safe = m_new, or 0 while m_new is still -inf (nothing visible yet),
        4. alpha = exp(m - m_safe); acc *= alpha,
        5. s_j = p_j = exp(s_j - m_safe); l_new = alpha l + sum_j p_j,
      and return (m_new, l_new).

`lab_forward` runs it inside a small kernel (`make_lab_kernel`): a block of BQ = 4
threads, one per query row; the kernel computes the scores, calls `tile_update`,
adds P V into `acc`, and at the end writes O = acc / l and lse = m + log(l). The
kernel reads K and V straight from global memory (no shared memory, no barriers)
so that it runs in seconds on Numba's CUDA simulator; the course's real kernel
(`flashcourse.cuda.flash`) stages them in shared memory.

`check_tile_update(fn)` runs it on tiny random shapes (ragged tiles, causal with
Tq < Tk and Tq > Tk, large scores) against the float64 reference, recognises the
usual mistakes by replaying them in numpy, and checks that every float constant
is float32 (a Python float literal makes Numba compute in float64 on the GPU).
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from .. import reference
from ..constants import F0, NEG_INF
from ..geometry import ceil_div
from ._harness import Case, Result, run_checks

BQ = 4                      # query rows (threads) per block
BC = 4                      # keys per tile
DMAX = 8                    # largest head dimension the lab kernel takes
GARBAGE = np.float32(30.0)  # what s holds past the last key: large, so a missing mask shows

# -- hints (tests assert on these exact strings) ------------------------------
HINT_RESCALE = ("Missing rescale: when the max grows from m to m_new, the running sum l and "
                "every entry of acc were measured relative to m; multiply both by "
                "alpha = exp(m - m_safe) before adding this tile's terms.")
HINT_MAX = ("Wrong max: m_new must be the larger of the running max m and this tile's "
            "largest score, m_new = max(m, max_j s_j), not the tile's max alone.")
HINT_MASK_ALIGN = ("Causal mask alignment: the mask is bottom-right aligned. Query i sees key "
                   "j iff j <= i + off with off = Tk - Tq; hide col > row + off, not col > row.")
HINT_MASK_RAGGED = ("Ragged last tile: entries of s past the last key (k0 + j >= tk) hold "
                    "garbage; set them to -inf before taking the max.")
HINT_NEG_INF = ("-inf handling: while a row has seen no visible key, m_new is -inf and "
                "exp(m - m_new) = exp(-inf + inf) = NaN. Use m_safe = 0 in that case "
                "(alpha and every p_j are then 0, and the row stays empty).")
HINT_SHIFT = ("Subtract the max: p_j = exp(s_j - m_safe), not exp(s_j); without the shift "
              "exp overflows for large scores.")
HINT_FLOAT64 = ("float64 promotion: a Python float literal (0.0, 1.0, math.inf, ...) makes "
                "Numba compute in float64 on a GPU (slow, and not what the kernel stores). "
                "Write float32(0.0), or use the lab's F0 and NEG_INF constants.")
HINT_RETURN = "Return a tuple (m_new, l_new) of two float32 numbers."
HINT_GENERIC = ("Compare with the five steps of the spec; print s, m, l for one row of the "
                "first case to see where they differ.")

_RTOL, _ATOL = 1e-4, 1e-5      # float32 kernel against the float64 reference


def _py_func(fn):
    """The plain Python function behind a Numba device function (GPU or simulator)."""
    for attr in ("py_func", "fn"):
        inner = getattr(fn, attr, None)
        if callable(inner):
            return inner
    return fn


def _device_function(fn):
    """`fn` as a CUDA device function (wrap a plain Python function if needed)."""
    if hasattr(fn, "py_func") or type(fn).__name__ == "FakeCUDAKernel":
        return fn
    return cuda.jit(device=True)(fn)


@lru_cache(maxsize=None)
def make_lab_kernel(update):
    """A one-thread-per-row attention kernel that calls `update` once per key tile."""

    def lab_kernel(q, k, v, o, lse, tq, tk, d, scale, causal, off):
        h = cuda.blockIdx.y
        row = cuda.blockIdx.x * BQ + cuda.threadIdx.x
        if row < tq:
            s = cuda.local.array(BC, float32)         # (BC,) scores -> probabilities
            acc = cuda.local.array(DMAX, float32)     # (DMAX,) unnormalised output row
            for x in range(DMAX):
                acc[x] = F0
            m = NEG_INF
            l = F0
            for k0 in range(0, tk, BC):
                for j in range(BC):                   # raw scores of this tile
                    col = k0 + j
                    if col < tk:
                        dot = F0
                        for x in range(d):
                            dot += q[h, row, x] * k[h, col, x]
                        s[j] = dot * scale
                    else:
                        s[j] = GARBAGE
                m, l = update(s, acc, row, k0, tk, off, causal, m, l)
                for j in range(BC):                   # acc += P V_tile
                    col = k0 + j
                    if col < tk:
                        for x in range(d):
                            acc[x] += s[j] * v[h, col, x]
            if l > F0:
                for x in range(d):
                    o[h, row, x] = acc[x] / l
                lse[h, row] = m + math.log(l)
            else:
                for x in range(d):
                    o[h, row, x] = F0
                lse[h, row] = NEG_INF

    return cuda.jit(lab_kernel)


def lab_forward(update, q, k, v, *, causal=False, scale=None):
    """Attention of q (..., Tq, d), k, v (..., Tk, d) with the lab kernel; returns (o, lse).

    Raises NotImplementedError for a stub `update` (before compiling anything).
    """
    _stub_guard(update)
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    lead, tq, d = q.shape[:-2], q.shape[-2], q.shape[-1]
    tk = k.shape[-2]
    if d > DMAX:
        raise ValueError(f"the lab kernel takes d <= {DMAX}, got d={d}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    bh = int(np.prod(lead)) if lead else 1
    qf, kf, vf = (cuda.to_device(np.ascontiguousarray(x.reshape(bh, -1, d))) for x in (q, k, v))
    o = cuda.to_device(np.full((bh, tq, d), np.nan, np.float32))    # poisoned
    lse = cuda.to_device(np.full((bh, tq), np.nan, np.float32))
    kern = make_lab_kernel(_device_function(update))
    kern[(ceil_div(tq, BQ), bh), BQ](qf, kf, vf, o, lse, np.int32(tq), np.int32(tk), np.int32(d),
                                  np.float32(scale), np.int32(1 if causal else 0),
                                  np.int32(tk - tq))
    return o.copy_to_host().reshape(*lead, tq, d), lse.copy_to_host().reshape(*lead, tq)


# -- the same tile loop in numpy, with the usual mistakes (for the hints) -----

def emulate(q, k, v, *, causal=False, mistake=None):
    """float64 replay of the lab kernel, optionally with one typical mistake.

    mistake: None, "no_rescale", "tile_max", "top_left", "no_ragged", "no_shift".
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    lead, tq, d = q.shape[:-2], q.shape[-2], q.shape[-1]
    tk = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    qf, kf, vf = (x.reshape(-1, x.shape[-2], d) for x in (q, k, v))
    o = np.zeros(qf.shape)
    lse = np.full(qf.shape[:2], -np.inf)
    off = tk - tq
    with np.errstate(all="ignore"):
        for h in range(qf.shape[0]):
            for i in range(tq):
                m, l, acc = -np.inf, 0.0, np.zeros(d)
                for k0 in range(0, tk, BC):
                    cols = np.arange(k0, k0 + BC)
                    s = np.full(BC, float(GARBAGE))
                    inside = cols < tk
                    s[inside] = scale * (kf[h, cols[inside]] @ qf[h, i])
                    hide = ~inside if mistake != "no_ragged" else np.zeros(BC, bool)
                    if causal:
                        edge = i if mistake == "top_left" else i + off
                        hide = hide | (cols > edge)
                    s = np.where(hide, -np.inf, s)
                    m_new = s.max() if mistake == "tile_max" else max(m, s.max())
                    m_safe = 0.0 if m_new == -np.inf else m_new
                    alpha = 1.0 if mistake == "no_rescale" else np.exp(m - m_safe)
                    p = np.exp(s) if mistake == "no_shift" else np.exp(s - m_safe)
                    acc = alpha * acc + p[inside] @ vf[h, cols[inside]]
                    l = alpha * l + p.sum()
                    m = m_new
                if l > 0:
                    o[h, i] = acc / l
                    lse[h, i] = m + np.log(l)
    return o.reshape(*lead, tq, d), lse.reshape(*lead, tq)


def _close_pair(a, b) -> bool:
    """(o, lse) pairs agree (loosely: this only names a mistake), -inf entries alike."""
    o_a, l_a = (np.asarray(x, np.float64) for x in a)
    o_b, l_b = (np.asarray(x, np.float64) for x in b)
    if o_a.shape != o_b.shape or l_a.shape != l_b.shape:
        return False
    if not (np.isfinite(o_b).all() and np.array_equal(np.isneginf(l_a), np.isneginf(l_b))):
        return False
    fin = np.isfinite(l_b)
    return bool(np.allclose(o_a, o_b, rtol=1e-3, atol=1e-4)
                and np.allclose(l_a[fin], l_b[fin], rtol=1e-3, atol=1e-4))


def _matches(yours, replay) -> bool:
    """Do the learner's (o, lse) agree with a replayed mistake?"""
    try:
        return _close_pair(yours, replay)
    except (ValueError, TypeError):  # a result of another shape or type: not this mistake
        return False


# -- float32 constants only ----------------------------------------------------

def float64_literals(fn) -> list[str]:
    """Float constants in `fn`'s source that are not wrapped in float32(...)."""
    try:
        src = textwrap.dedent(inspect.getsource(_py_func(fn)))
    except (OSError, TypeError):      # no source to read (e.g. built with exec)
        return []
    tree = ast.parse(src)
    wrapped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name == "float32":
                for a in ast.walk(node):
                    wrapped.add(id(a))
    found = []
    for node in ast.walk(tree):
        if id(node) in wrapped:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            found.append(repr(node.value))
        elif isinstance(node, ast.Attribute) and node.attr in ("inf", "nan", "pi", "e") and \
                getattr(node.value, "id", "") in ("math", "np", "numpy"):
            found.append(f"{node.value.id}.{node.attr}")
    return found


# -- the checker -----------------------------------------------------------------

def _inputs(seed, lead, tq, tk, d, spread=1.0, grow=0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((*lead, tq, d)) * spread).astype(np.float32)
    k = (rng.standard_normal((*lead, tk, d)) * spread).astype(np.float32)
    v = rng.standard_normal((*lead, tk, d)).astype(np.float32)
    if grow:   # later keys line up with q more and more (grow=1: the running max keeps
        # growing, so a missing rescale shows) or less and less (grow=-1: a tile's max falls
        # below the running max, so forgetting the running max shows)
        ramp = np.linspace(0.2, 3.0, tk, dtype=np.float32)[::grow]
        k = (k * 0.2 + q.mean(axis=-2, keepdims=True) * ramp[:, None]).astype(np.float32)
    return q, k, v


def _stub_guard(fn):
    """A stub (raise NotImplementedError) is reported before any kernel is compiled."""
    code = getattr(_py_func(fn), "__code__", None)
    if code is not None and "NotImplementedError" in code.co_names:
        raise NotImplementedError("tile_update still raises NotImplementedError")


def _numeric_case(name, seed, lead, tq, tk, d, causal, spread=1.0, grow=0):
    q, k, v = _inputs(seed, lead, tq, tk, d, spread, grow)

    def run(fn):
        _stub_guard(fn)
        out = lab_forward(fn, q, k, v, causal=causal)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError("lab_forward returned something other than (o, lse)")
        return out, tuple(np.asarray(x, np.float64) for x in
                          reference.attention(q, k, v, causal=causal))

    def nan_rows(yours, expected):
        return bool(np.isnan(np.asarray(yours[0], np.float64)).any())

    diagnoses = [(nan_rows, HINT_NEG_INF)]
    right = emulate(q, k, v, causal=causal)
    for mistake, hint in (("no_ragged", HINT_MASK_RAGGED), ("top_left", HINT_MASK_ALIGN),
                          ("no_rescale", HINT_RESCALE), ("tile_max", HINT_MAX),
                          ("no_shift", HINT_SHIFT)):
        replay = emulate(q, k, v, causal=causal, mistake=mistake)
        if _close_pair(replay, right):      # this case cannot see that mistake
            continue
        diagnoses.append(((lambda y, e, r=replay: _matches(y, r)), hint))
    return Case(name, run, HINT_GENERIC, diagnoses, rtol=_RTOL, atol=_ATOL)


def _float32_case():
    def run(fn):
        _stub_guard(fn)
        return len(float64_literals(fn)), 0
    return Case("float32 constants only", run, HINT_FLOAT64, rtol=0, atol=0)


def cases():
    return [
        _numeric_case("one full tile (Tq=3, Tk=4, d=3)", 1, (1,), 3, 4, 3, False),
        _numeric_case("ragged tiles, growing max (Tq=5, Tk=11, d=5)", 2, (2,), 5, 11, 5, False,
                      grow=1),
        _numeric_case("falling tile maxima (Tq=4, Tk=9, d=4)", 5, (1,), 4, 9, 4, False,
                      spread=2.0, grow=-1),
        _numeric_case("causal, Tq < Tk (Tq=6, Tk=10, d=4)", 3, (1,), 6, 10, 4, True, grow=1),
        _numeric_case("causal, Tq > Tk: empty rows, large scores (Tq=9, Tk=5, d=4)", 4, (1,),
                      9, 5, 4, True, spread=6.0),
        _float32_case(),
    ]


def check_tile_update(fn, *, verbose: bool = True) -> Result:
    """Run `fn` (the learner's tile_update) in the lab kernel; print the verdict."""
    return run_checks("tile_update inside the lab kernel", fn, cases(), verbose=verbose)
