"""Checkers for lab 10 (follows notebook 10): the FA2 forward's inner loop on m16n8k16 fragments.

The lab kernel is a one-warp miniature of `flashcourse.cuda.tensor_core.tensor_core_kernels` (fp16
inputs, fp32 accumulation): a block of 32 lanes computes BR = 16 query rows against key
tiles of BC = 16 keys, head dimension padded to D = 16. The skeleton stages Q (pre-scaled),
K and V transposed (vt[dim, key]) in shared memory as float32 and masks the scores; the
learner writes, as Numba device functions:

    load_a(tile, r0, c0, lane, a, ai)   a[ai..ai+3]: the A fragment of tile[r0:r0+16, c0:c0+16]
                                        (4 words of two fp16 each, by the PTX fragment map)
    load_b(tile, n0, k0, lane, b)       b[0..1]: the B fragment of B[kk, n] = tile[n0 + n, k0 + kk]
    quad_max / quad_sum(x, red, lane)   max / sum over the 4 lanes of a row group (shuffles)
    scores_tile(qa, ks, s, b, scr, w)   S = Q K_j^T: 4 NS accumulators, one mma per n8 tile, k16
    softmax_tile(s, acc, m, lp, red, lane)
                                        row max across the quad, rescale, P over S, partial sums
    pv_tile(s, vt, acc, pa, b, scr, w)  P (the accumulators, packed) as the A operand; O += P V_j

`mma(a, ai, b, c, ci, scr, w)` and `pack(lo, hi)` are given: the mma.sync intrinsic and the
cvt to f16x2 on a GPU, their simulator twins (`flashcourse.cuda.ptx.mma.device_ops`) without one.
`w` = [lane, parity] (the simulator's fragment exchange alternates two scratch buffers).
`lab_forward(parts, q, k, v)` runs the kernel. Here: `check_fragments`, `check_quad` (and
`load_b_fails`, `quad_max_fails`, which the part checkers ask first) and the
going-further `check_mask`, and `replay`, the kernel's arithmetic in numpy (fp16 rounding of
Q, K, V and P); `tensor_core_parts` checks scores_tile, softmax_tile and pv_tile each alone
and the whole kernel (`check_kernel`). Every checker also reads the source: float64
constants (as lab 06) and, on the simulator, a numba.cuda warp shuffle called directly.
`time_against_course(parts)` (GPU only) times the lab kernel beside the course's
tensor-core kernel.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, uint32

from .._checks import check_qkv_shapes
from ..constants import F0, NEG_INF
from ..cuda.ptx import mma as M
from ..cuda.common._launch import simulator_lock
from ..geometry import ceil_div
from ..gpu import using_simulator
from ._harness import Case, Result, run_checks
from .kernel_source import float64_literals, kernel_guard, py_func
from .tile_sizes import tiles_text
from .cuda_kernel import HINT_FLOAT64, run_reductions, xor_steps
from .cuda_lab_kernel import _device

BR = 16                     # query rows per block (one m16 tile, one warp)
BC = 16                     # keys per tile
D = 16                      # padded head dimension
NT = 32                     # one warp
KT = D // 16                # k16 steps of S = Q K^T
NS = BC // 8                # n8 tiles of S
NO = D // 8                 # n8 tiles of O
KP = BC // 16               # k16 steps of O += P V
# Array sizes are names fixed before a kernel is compiled (4 * KT inside a kernel fails to
# compile on a GPU, though the simulator accepts it).
QA_WORDS = 4 * KT           # Q's A fragments: 4 words per k16 step
S_ACC = 4 * NS              # S / P accumulators: 4 per n8 tile
O_ACC = 4 * NO              # O accumulators: 4 per n8 tile


class Tiles(NamedTuple):
    """A tile configuration of lab 10: the head dimension D (padded) and the key tile BC,
    both multiples of 16 (BR = 16 query rows, one warp, always). The lab runs at TILES
    (D = BC = 16); the part checks also run scores_tile, softmax_tile and pv_tile at WIDE,
    where each k16 step and n8 tile count is larger than one or two (`tile_sizes.at_tiles`)."""
    D: int = 16
    BC: int = 16

    @property
    def sizes(self) -> dict:
        """The module's size names at this configuration (what your parts read)."""
        kt, ns, no, kp = self.D // 16, self.BC // 8, self.D // 8, self.BC // 16
        return dict(BC=self.BC, D=self.D, KT=kt, NS=ns, NO=no, KP=kp, QA_WORDS=4 * kt,
                    S_ACC=4 * ns, O_ACC=4 * no)

    def __str__(self) -> str:
        return tiles_text(self, ("KT", "KP", "NS", "NO"))


TILES = Tiles()             # the lab's: KT = KP = 1, NS = NO = 2
# KT = 3 != KP = 2 and NS = 4 != NO = 6; KT, KP >= 2: offsets of step 1 and 2
WIDE = Tiles(D=48, BC=32)

_OPS = M.device_ops(using_simulator())
pack = _OPS["pack_fp16"]
_MMA = _OPS["mma_fp16"]


@cuda.jit(device=True)
def mma(a, ai, b, c, ci, scr, w):
    """c[ci..ci+3] += A B on one m16n8k16 tile: A = a[ai..ai+3] (4 words), B = b[0..1]."""
    x0, x1, x2, x3 = _MMA(scr, 0, w[0], w[1], a[ai], a[ai + 1], a[ai + 2], a[ai + 3],
                          b[0], b[1], c[ci], c[ci + 1], c[ci + 2], c[ci + 3])
    w[1] = 1 - w[1]
    c[ci] = x0
    c[ci + 1] = x1
    c[ci + 2] = x2
    c[ci + 3] = x3


PARTS = ("load_a", "load_b", "quad_max", "quad_sum", "scores_tile", "softmax_tile", "pv_tile")

# -- hints ----------------------------------------------------------------------------------

HINT_A = ("Your A fragment is wrong: lane = 4 g + t holds, in word w, the two neighbouring "
          "elements (row, col), (row, col + 1) of the 16 x 16 tile, with row from g and col "
          "from t (notebook 10's fragment map, mma.a_m16n8k16).",
          "Word w: row = r0 + g + 8 (w % 2), col = c0 + 2 t + 8 (w // 2); pack(lo = col, "
          "hi = col + 1).")
HINT_A_AI = ("Your load_a leaves words ai .. ai + 3 of a empty: it writes the fragment from "
             "word 0 whatever ai is. The kernel keeps every k16 step kk of Q in one array, step "
             "kk at words 4 kk .. 4 kk + 3 (load_a(..., qa, 4 kk)), so word w of the fragment "
             "goes to a[ai + w].", "a[ai + w] = pack(...).")
HINT_A_T = ("Your A fragment is the tile transposed: the row of the A map comes from the "
            "group g = lane // 4 and indexes the tile's FIRST axis.",
            "tile[row, col], with row from g and col from t.")
HINT_A_WORDS = ("Words 1 and 2 of your A fragment are swapped: word 1 holds rows g + 8 (same "
                "columns as word 0), word 2 the columns 8 further right (same rows).",
                "Word w adds 8 to the row when w is odd and 8 to the column when w >= 2.")
HINT_A_PLUS8 = ("Your A fragment never reaches the lower 8 rows (or the right 8 columns) of "
                "the tile: words 1 and 3 are rows g + 8, words 2 and 3 columns 2t + 8.",
                "row = r0 + g + 8 (w % 2), col = c0 + 2 t + 8 (w // 2).")
HINT_PAIR = ("The two halves of each word are swapped: pack(lo, hi) puts lo in the low 16 "
             "bits, which the mma reads as the element with the SMALLER column (k) index.",
             "pack(tile[.., col], tile[.., col + 1]).")
HINT_B = ("Your B fragment is wrong: lane = 4 g + t holds B[k, n] for n = g and k = 2 t, "
          "2 t + 1 (word 0) and 2 t + 8, 2 t + 9 (word 1), where B[kk, n] = tile[n0 + n, "
          "k0 + kk].",
          "Word w: pack(tile[n0 + g, k0 + 2 t + 8 w], tile[n0 + g, k0 + 2 t + 8 w + 1]).")
HINT_B_T = ("Your B fragment reads the tile the other way round: B = K^T, so B[kk, n] is "
            "tile[n0 + n, k0 + kk] (K's row n, its dimension kk): the tile's first index "
            "comes from g.",
            "tile[n0 + g, k0 + 2 t + ...].")
HINT_B_GT = ("Your B fragment swaps the lane's roles: n (the tile's row) comes from the group "
             "g = lane // 4, k from t = lane % 4.",
             "n = g, k = 2 t (+ 1, + 8, + 9).")
HINT_B_PLUS8 = ("Word 1 of your B fragment repeats word 0: it holds k = 2 t + 8, 2 t + 9.",
                "Add 8 to k for word 1.")
HINT_QUAD = ("Every lane must end with the max (sum) over the 4 lanes of its row group "
             "(lanes 4 g .. 4 g + 3): two shfl_xor exchanges, offsets 1 and 2.",
             "x = combine(x, shfl_xor(x, 1, red, lane)); then the same with offset 2.")
HINT_QUAD_STEP = ("Your reduction covers only 2 of the 4 lanes of a row group: a quad needs "
                  "two exchanges, offsets 1 AND 2.",
                  "Add the exchange with offset 2.")
HINT_QUAD_CROSS = ("Your reduction mixes row groups: an offset of 4 or more exchanges with "
                   "a lane of ANOTHER group g (another row of the tile).",
                   "Offsets 1 and 2 keep lane ^ offset inside the quad.")
HINT_QUAD_OP = ("quad_max must take the max of the two values and quad_sum add them.",
                "max(x, other); x + other.")
HINT_SHFL_SYNC = ("Your code calls a warp shuffle of numba.cuda directly (shfl_xor_sync or "
                  "another *_sync shuffle). It works on a GPU, but Numba's simulator has no "
                  "warp shuffles, so the lab cannot run there. Use the given shfl_xor(x, "
                  "offset, red, lane): a warp shuffle on a GPU, an exchange through the "
                  "shared array red on the simulator.",
                  "Replace each cuda.shfl_xor_sync(mask, x, offset) by shfl_xor(x, offset, "
                  "red, lane).")

_RTOL, _ATOL = 2e-3, 2e-3        # fp16 operands, fp32 accumulation, against a replay that rounds


# -- the lab kernel -------------------------------------------------------------------------

@cuda.jit(device=True)
def mask_scores(s, k0, q0, tk, causal, off, lane):
    """The skeleton's mask: -inf for keys past tk and (causal) above the diagonal; the row and
    column of accumulator i of n8 tile n come from the C fragment map (mma.c_m16n8)."""
    g = lane // 4
    t = lane % 4
    for n in range(NS):
        for i in range(4):
            col = k0 + 8 * n + 2 * t + (i % 2)
            row = q0 + g + 8 * (i // 2)
            if col >= tk or (causal != 0 and col > row + off):
                s[4 * n + i] = NEG_INF


@lru_cache(maxsize=None)
def make_lab_kernel(load_a, scores_tile, softmax_tile, pv_tile, quad_sum):
    """The lab kernel with the learner's parts plugged in."""
    SCR = M.SIM_SCRATCH_PER_WARP if using_simulator() else 1

    def lab_kernel(q, k, v, o, lse, tq, tk, d, scale, causal):
        qs = cuda.shared.array((BR, D), float32)          # Q_i, pre-scaled
        ks = cuda.shared.array((BC, D), float32)          # K_j
        vt = cuda.shared.array((D, BC), float32)          # V_j transposed: vt[dim, key]
        scr = cuda.shared.array(SCR, float32)             # simulator: fragment exchange
        red = cuda.shared.array(NT, float32)              # simulator: shuffles
        lane = cuda.threadIdx.x
        q0 = cuda.blockIdx.x * BR
        off = tk - tq
        w = cuda.local.array(2, int32)                    # [lane, simulator parity]
        w[0] = lane
        w[1] = 0
        for e in range(lane, BR * D, NT):                 # global reads: Q_i once
            r = e // D
            c = e % D
            qs[r, c] = q[q0 + r, c] * scale if (q0 + r < tq and c < d) else F0
        cuda.syncthreads()
        qa = cuda.local.array(QA_WORDS, uint32)           # Q's A fragments, kept in registers
        for kk in range(KT):
            load_a(qs, 0, 16 * kk, lane, qa, 4 * kk)      # YOUR A fragment
        s = cuda.local.array(S_ACC, float32)              # S / P accumulators (16 x BC)
        acc = cuda.local.array(O_ACC, float32)            # O accumulators (16 x D)
        m = cuda.local.array(2, float32)                  # rows g and g + 8
        lp = cuda.local.array(2, float32)
        b = cuda.local.array(2, uint32)
        pa = cuda.local.array(4, uint32)
        for x in range(4 * NS):
            s[x] = F0
        for x in range(4 * NO):
            acc[x] = F0
        for hf in range(2):
            m[hf] = NEG_INF
            lp[hf] = F0
        for k0 in range(0, tk, BC):
            cuda.syncthreads()                            # done with the previous K, V
            for e in range(lane, BC * D, NT):             # global reads: K_j, V_j
                r = e // D
                c = e % D
                ok = k0 + r < tk and c < d
                ks[r, c] = k[k0 + r, c] if ok else F0
                vt[c, r] = v[k0 + r, c] if ok else F0
            cuda.syncthreads()
            scores_tile(qa, ks, s, b, scr, w)             # YOUR S = Q K_j^T
            mask_scores(s, k0, q0, tk, causal, off, lane)
            softmax_tile(s, acc, m, lp, red, lane)        # YOUR online softmax
            pv_tile(s, vt, acc, pa, b, scr, w)            # YOUR O += P V_j
        g = lane // 4
        t = lane % 4
        for hf in range(2):                               # epilogue
            lt = quad_sum(lp[hf], red, lane)              # YOUR quad sum
            row = q0 + g + 8 * hf
            if row < tq:
                for n in range(NO):
                    for c in range(2):
                        col = 8 * n + 2 * t + c
                        if col < d:
                            o[row, col] = acc[4 * n + 2 * hf + c] / lt if lt > F0 else F0
                if t == 0:
                    lse[row] = m[hf] + math.log(lt) if lt > F0 else NEG_INF

    return cuda.jit(lab_kernel)


def lab_forward(parts, q, k, v, *, causal=False):
    """(o, lse) of q (Tq, d), k, v (Tk, d), d <= 16, with the lab kernel and your parts
    (a dict or tuple in the order of PARTS)."""
    fns = _parts(parts)
    for name in PARTS:
        kernel_guard(fns[name], name)
    q, k, v = (np.ascontiguousarray(x, np.float32) for x in (q, k, v))
    check_lab_shapes(q, k, v)
    tq, d = q.shape
    tk = k.shape[0]
    if d > D:
        raise ValueError(f"the lab kernel takes d <= {D}, got d={d}")
    kern = _lab_kernel(fns)
    qd, kd, vd = (cuda.to_device(x) for x in (q, k, v))
    o = cuda.to_device(np.full((tq, d), np.nan, np.float32))
    lse = cuda.to_device(np.full(tq, np.nan, np.float32))
    with simulator_lock():
        kern[ceil_div(tq, BR), NT](qd, kd, vd, o, lse, np.int32(tq), np.int32(tk),
                                   np.int32(d), np.float32(1 / math.sqrt(d)),
                                   np.int32(1 if causal else 0))
    return o.copy_to_host(), lse.copy_to_host()


def check_lab_shapes(q, k, v):
    """q (Tq, d), k and v (Tk, d): a ValueError naming the array otherwise (the kernel would
    read past a shorter k or v on a GPU, or raise deep inside the simulator)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D (T, d): one head, got shape {x.shape}")
    check_qkv_shapes(q.shape, k.shape, v.shape)


def _parts(parts) -> dict:
    if isinstance(parts, dict):
        return {n: parts[n] for n in PARTS}
    return dict(zip(PARTS, parts))


def _lab_kernel(fns):
    """`make_lab_kernel` with the parts of `fns` (a `_parts` dict) that the kernel calls."""
    return make_lab_kernel(*(_device(fns[n]) for n in ("load_a", "scores_tile", "softmax_tile",
                                                       "pv_tile", "quad_sum")))


# -- what the source shows: float64 constants, shuffles the simulator lacks -----------------

#: numba.cuda's warp shuffles: a GPU has them, Numba's simulator does not
SYNC_SHUFFLES = ("shfl_sync", "shfl_xor_sync", "shfl_up_sync", "shfl_down_sync")


def direct_shuffles(fn, *, follow: bool = True) -> list[str]:
    """The numba.cuda warp shuffles (SYNC_SHUFFLES) that `fn`'s source calls; with `follow`,
    also those of the learner's device functions it calls by a global name (softmax_tile
    calls quad_max). No source to read (e.g. built with exec): no verdict."""
    try:
        src = textwrap.dedent(inspect.getsource(py_func(fn)))
    except (OSError, TypeError):      # no source to read: nothing to report
        return []
    names = getattr(py_func(fn), "__globals__", {})
    found = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.Call):
            continue
        called = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        if called in SYNC_SHUFFLES:
            found.append(called)
        elif follow and isinstance(node.func, ast.Name):
            callee = names.get(node.func.id)          # a device function wraps a Python one
            inner = py_func(callee) if callee is not None else None
            module = getattr(inner, "__module__", None) or ""
            if inner is not callee and callee is not fn and not module.startswith("flashcourse"):
                found += direct_shuffles(callee, follow=False)
    return found


def _guarded(fns):
    for fn in fns:
        kernel_guard(fn, getattr(py_func(fn), "__name__", "function"))


def source_cases(fns, *, shuffles: bool = True) -> tuple[list, list]:
    """(first, last): the cases that read the source of `fns` before and after the value
    cases. First, on the simulator only (a GPU runs them): no numba.cuda warp shuffle
    called directly. Last: float32 constants only (as lab 06)."""
    def shuffle_run(_):
        _guarded(fns)
        return [name for fn in fns for name in direct_shuffles(fn)], []

    def float_run(_):
        _guarded(fns)
        return [lit for fn in fns for lit in float64_literals(fn)], []

    first = []
    if shuffles and using_simulator():
        first.append(Case("shuffles through the given shfl_xor (runs on the simulator too)",
                          shuffle_run, HINT_SHFL_SYNC[0], hint2=HINT_SHFL_SYNC[1],
                          compare=lambda y, e: (not y, f"your code calls cuda.{y[0]}"
                                                if y else "")))
    last = [Case("float32 constants only", float_run, HINT_FLOAT64[0], hint2=HINT_FLOAT64[1],
                 compare=lambda y, e: (not y, "float64 constants in your code: "
                                       + ", ".join(y)))]
    return first, last


# -- checker 1: the fragment loads ------------------------------------------------------------

@lru_cache(maxsize=None)
def _load_kernel(load_a, load_b):
    def kern(tile, words_a, words_b, r0, c0, ai):
        lane = cuda.threadIdx.x
        a = cuda.local.array(8, uint32)
        b = cuda.local.array(2, uint32)
        for x in range(8):
            a[x] = 0
        load_a(tile, r0, c0, lane, a, ai)
        load_b(tile, r0, c0, lane, b)
        for x in range(4):
            words_a[lane, x] = a[ai + x]
        for x in range(2):
            words_b[lane, x] = b[x]
    return cuda.jit(kern)


def fragment_values(load_a, load_b, tile, r0, c0, ai=0):
    """(32, 8) and (32, 4): the values your load_a and load_b put in each lane's fragment
    (load_a's from word ai of an 8-word array of zeros)."""
    kernel_guard(load_a, "load_a")
    kernel_guard(load_b, "load_b")
    kern = _load_kernel(_device(load_a), _device(load_b))
    wa = cuda.to_device(np.zeros((NT, 4), np.uint32))
    wb = cuda.to_device(np.zeros((NT, 2), np.uint32))
    with simulator_lock():
        kern[1, NT](cuda.to_device(np.asarray(tile, np.float32)), wa, wb, np.int32(r0),
                    np.int32(c0), np.int32(ai))

    def unpack(words):
        lo, hi = M.unpack_pair_model(words, "fp16")
        return np.stack([lo, hi], axis=-1).reshape(NT, -1).astype(np.float64)
    return unpack(wa.copy_to_host()), unpack(wb.copy_to_host())


def _by_map(tile, fmap, n, r0, c0):
    """(32, n): tile[r0 + r, c0 + c] for (r, c) = fmap(lane, i) (a mistake's map may reach
    past the 16 x 16 sub-tile: the checker's tile is 32 x 32)."""
    out = np.full((NT, n), np.nan)
    for lane in range(NT):
        for i in range(n):
            r, c = fmap(lane, i)
            if r0 + r < tile.shape[0] and c0 + c < tile.shape[1]:
                out[lane, i] = tile[r0 + r, c0 + c]
    return out


def _a_mistakes():
    g = M.group_of
    t = M.thread_in_group
    return [
        (lambda L, i: M.a_m16n8k16(L, i)[::-1], HINT_A_T),
        (lambda L, i: M.a_m16n8k16(L, {2: 4, 3: 5, 4: 2, 5: 3}.get(i, i)), HINT_A_WORDS),
        (lambda L, i: (g(L), 2 * t(L) + (i & 1)), HINT_A_PLUS8),
        (lambda L, i: M.a_m16n8k16(L, i ^ 1), HINT_PAIR),
    ]


def _b_mistakes():
    g = M.group_of
    t = M.thread_in_group
    return [
        (lambda L, i: M.b_m16n8k16(L, i), HINT_B_T),      # tile[k, n] instead of tile[n, k]
        (lambda L, i: (t(L), 2 * g(L) + (i & 1) + (8 if i >= 2 else 0)), HINT_B_GT),
        (lambda L, i: (g(L), 2 * t(L) + (i & 1)), HINT_B_PLUS8),
        (lambda L, i: (g(L), M.b_m16n8k16(L, i ^ 1)[0]), HINT_PAIR),
    ]


def _equal_to(wrong):
    return lambda yours, _expected: np.array_equal(yours, wrong)


def check_fragments(load_a, load_b, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your load_a and load_b on a 32 x 32 tile, at offsets (0, 0) and (16, 8) (load_a at
    ai = 0, then 4: the kernel loads k16 step kk at word 4 kk), against the PTX maps; a
    mismatch is named by the typical mistakes."""
    rng = np.random.default_rng(10)
    tile = M.round_fp16(rng.standard_normal((32, 32))).astype(np.float64)   # (32, 32)
    cases = []
    for r0, c0, ai in ((0, 0, 0), (16, 8, 4)):
        want_a = _by_map(tile, M.a_m16n8k16, 8, r0, c0)
        want_b = _by_map(tile, lambda L, i: M.b_m16n8k16(L, i)[::-1], 4, r0, c0)  # tile[n, k]
        diag_a = [(_equal_to(_by_map(tile, f, 8, r0, c0)), *h) for f, h in _a_mistakes()]
        if ai:                          # words ai .. ai + 3 left at 0: written from word 0
            diag_a.insert(0, (_equal_to(np.zeros_like(want_a)), *HINT_A_AI))
        diag_b = [(_equal_to(_by_map(tile, f, 4, r0, c0)), *h) for f, h in _b_mistakes()]

        def run_a(fns, r0=r0, c0=c0, ai=ai, want=want_a):
            return fragment_values(*fns, tile, r0, c0, ai)[0], want

        def run_b(fns, r0=r0, c0=c0, want=want_b):
            return fragment_values(*fns, tile, r0, c0)[1], want

        cases.append(Case(f"load_a: A fragment of tile[{r0}:{r0 + 16}, {c0}:{c0 + 16}] into "
                          f"words {ai} .. {ai + 3}", run_a,
                          HINT_A[0], diag_a, rtol=0, atol=0, hint2=HINT_A[1]))
        cases.append(Case(f"load_b: B fragment, n0 = {r0}, k0 = {c0}", run_b, HINT_B[0],
                          diag_b, rtol=0, atol=0, hint2=HINT_B[1]))
    cases += source_cases((load_a, load_b), shuffles=False)[1]
    return run_checks("load_a and load_b (m16n8k16 fragments)", (load_a, load_b), cases,
                      verbose=verbose, hint_level=hint_level)


@lru_cache(maxsize=None)
def _load_b_kernel(load_b):
    def kern(tile, words_b, n0, k0):
        lane = cuda.threadIdx.x
        b = cuda.local.array(2, uint32)
        load_b(tile, n0, k0, lane, b)
        for x in range(2):
            words_b[lane, x] = b[x]
    return cuda.jit(kern)


def load_b_fails(load_b) -> bool:
    """Whether your load_b puts a wrong element in some lane's B fragment at check_fragments'
    two offsets, or raises there (scores_tile and pv_tile call it: their checkers ask this
    before they name a mistake of their own)."""
    tile = M.round_fp16(np.random.default_rng(10).standard_normal((32, 32)))   # (32, 32)
    try:
        kernel_guard(load_b, "load_b")
        kern = _load_b_kernel(_device(load_b))
        for n0, k0 in ((0, 0), (16, 8)):
            words = cuda.to_device(np.zeros((NT, 2), np.uint32))
            with simulator_lock():
                kern[1, NT](cuda.to_device(tile.astype(np.float32)), words, np.int32(n0),
                            np.int32(k0))
            lo, hi = M.unpack_pair_model(words.copy_to_host(), "fp16")
            got = np.stack([lo, hi], axis=-1).reshape(NT, -1).astype(np.float64)
            want = _by_map(tile, lambda L, i: M.b_m16n8k16(L, i)[::-1], 4, n0, k0)
            if not np.array_equal(got, want):
                return True
    except Exception:       # noqa: BLE001  (a load_b that raises is a load_b that fails)
        return True
    return False


# -- checker 2: the quad reductions ------------------------------------------------------------

def check_quad(quad_max, quad_sum, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Every lane must end with the max and the sum over its quad (lanes 4 g .. 4 g + 3)."""
    x = np.random.default_rng(11).standard_normal(NT).astype(np.float32)

    def run(fns, idx):
        kernel_guard(fns[0], "quad_max")
        kernel_guard(fns[1], "quad_sum")
        return run_reductions(fns[0], fns[1], x)[idx]

    first, last = source_cases((quad_max, quad_sum))
    cases = list(first)
    for idx, (what, op, other) in enumerate((("max", np.maximum, np.add),
                                             ("sum", np.add, np.maximum))):
        want = xor_steps(x, op, (1, 2))
        wrongs = [(xor_steps(x, op, (1,)), HINT_QUAD_STEP),
                  (xor_steps(x, op, (2,)), HINT_QUAD_STEP),
                  (xor_steps(x, op, (1, 2, 4)), HINT_QUAD_CROSS),
                  (xor_steps(x, op, (4, 8)), HINT_QUAD_CROSS),
                  (xor_steps(x, other, (1, 2)), HINT_QUAD_OP)]
        diagnoses = [((lambda y, e, w=w: np.allclose(y, w, rtol=1e-6, atol=1e-6)), *h)
                     for w, h in wrongs]
        cases.append(Case(f"quad_{what} on all 32 lanes", lambda f, i=idx, w=want: (run(f, i), w),
                          HINT_QUAD[0], diagnoses, rtol=1e-6, atol=1e-6, hint2=HINT_QUAD[1]))
    cases += last
    return run_checks("quad_max and quad_sum", (quad_max, quad_sum), cases, verbose=verbose,
                      hint_level=hint_level)


def quad_max_fails(quad_max) -> bool:
    """Whether your quad_max leaves some lane without the max over its quad, or raises
    (softmax_tile calls it: its checker asks this before it names a mistake of its own)."""
    x = np.random.default_rng(11).standard_normal(NT).astype(np.float32)
    try:
        kernel_guard(quad_max, "quad_max")
        got = run_reductions(quad_max, quad_max, x)[0]
    except Exception:       # noqa: BLE001  (a quad_max that raises is a quad_max that fails)
        return True
    return not np.allclose(got, xor_steps(x, np.maximum, (1, 2)), rtol=1e-6, atol=1e-6)


# -- the replay: the lab kernel's arithmetic in numpy (check_kernel's reference) ---------------

def replay(q, k, v, *, causal=False):
    """(o, lse) of the lab kernel's arithmetic, row by row in float64, with fp16 rounding of
    Q (scaled), K, V and P (`tensor_core_parts.kernel_model` replays it lane by lane, with
    the typical mistakes)."""
    r16 = M.round_fp16
    tq, d = q.shape
    tk = k.shape[0]
    scale = np.float32(1 / math.sqrt(d))
    o = np.zeros((tq, d))
    lse = np.full(tq, -np.inf)
    off = tk - tq
    for q0 in range(0, tq, BR):
        qb = np.zeros((BR, D))
        rows = min(BR, tq - q0)
        qb[:rows, :d] = r16(np.float32(q[q0:q0 + rows]) * scale)
        m = np.full(BR, -np.inf)
        lp = np.zeros(BR)
        acc = np.zeros((BR, D))
        for k0 in range(0, tk, BC):
            kb = np.zeros((BC, D))
            vb = np.zeros((BC, D))
            n = min(BC, tk - k0)
            kb[:n, :d] = r16(k[k0:k0 + n])
            vb[:n, :d] = r16(v[k0:k0 + n])
            s = qb @ kb.T
            cols = k0 + np.arange(BC)[None, :]
            rws = q0 + np.arange(BR)[:, None]
            masked = (cols >= tk) | ((cols > rws + off) if causal else False)
            s = np.where(masked, -np.inf, s)
            with np.errstate(all="ignore"):
                x = s.max(axis=1)
                m_new = np.maximum(m, x)
                m_use = np.where(np.isneginf(m_new), 0.0, m_new)
                alpha = np.exp(m - m_use)
                p = np.exp(s - m_use[:, None])
            lp = lp * alpha + p.sum(axis=1)
            acc = acc * alpha[:, None]
            acc = acc + r16(p).astype(np.float64) @ vb
            m = m_new
        for r in range(rows):
            if lp[r] > 0:
                o[q0 + r] = acc[r, :d] / lp[r]
                lse[q0 + r] = m[r] + math.log(lp[r])
    return o, lse


def _inputs(seed, tq, tk, d, spread=1.0, grow=False):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((tq, d)) * spread).astype(np.float32)
    k = (rng.standard_normal((tk, d)) * spread).astype(np.float32)
    v = rng.standard_normal((tk, d)).astype(np.float32)
    if grow:     # later keys line up with the queries: the max grows tile by tile
        ramp = np.linspace(0.0, 2.5, tk, dtype=np.float32)
        k = (k * 0.3 + q.mean(axis=0) * ramp[:, None]).astype(np.float32)
    return q, k, v


#: (name, seed, Tq, Tk, d, causal, spread, grow): one warp per 16 query rows
KERNEL_CASES = [
    ("one tile: Tq = Tk = d = 16", 1, 16, 16, 16, False, 1.0, False),
    ("ragged: Tq = 13, Tk = 37 (3 key tiles), d = 11, growing max", 2, 13, 37, 11, False,
     1.0, True),
    ("two query blocks, causal: Tq = 20, Tk = 24, d = 8", 3, 20, 24, 8, True, 1.5, False),
]


def _close(a, b, rtol=_RTOL, atol=_ATOL) -> bool:
    return all(np.asarray(x).shape == np.asarray(y).shape
               and np.allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol,
                               atol=atol, equal_nan=True) for x, y in zip(a, b))


# -- going further: the mask on the accumulator fragments ---------------------------------------

HINT_MASK = ("Your mask hides the wrong scores: accumulator i of n8 tile n of lane 4 g + t is "
             "S[g + 8 (i // 2), 8 n + 2 t + (i % 2)] of the 16 x 16 tile (the C map of "
             "notebook 10); hide it when its key is past tk or (causal) after row + off.",
             "row = q0 + g + 8 (i // 2), col = k0 + 8 n + 2 t + (i % 2).")
HINT_MASK_ROWS = ("Accumulators 2 and 3 are row g + 8, not row g: your causal mask uses row g "
                  "for all four.", "row = q0 + g + 8 (i // 2).")
HINT_MASK_TOPLEFT = ("Your causal mask is top-left (key j visible iff j <= i): the course "
                     "aligns it bottom-right, key j visible iff j <= i + off, off = Tk - Tq.",
                     "Compare col with row + off.")
HINT_MASK_OFF_SIGN = ("Your causal offset has the wrong sign: key j is visible iff j <= i + off "
                      "with off = Tk - Tq (bottom-right: the last query sees every key); "
                      "comparing with row - off shifts the diagonal the other way.",
                      "Compare col with row + off.")
HINT_MASK_EDGE = ("Your ragged-edge test is off by one: key index tk is the first one PAST "
                  "the end.", "Hide col >= tk.")
HINT_MASK_DIAGONAL = ("Your causal mask hides the diagonal: key j is visible when j <= i + off, "
                      "equality included (a query sees its own position); hide only col > row "
                      "+ off.", "Compare with >, not >=.")
HINT_MASK_NO_TK = ("Your mask leaves the keys past the end visible: in the last key tile the "
                   "columns col >= tk hold no key and must be hidden, causal or not.",
                   "Hide col >= tk as well as (causal) col > row + off.")
HINT_MASK_TILE = ("Your column ignores the n8 tile: accumulators of tile n sit 8 n columns "
                  "further right.", "col = k0 + 8 n + 2 t + (i % 2).")
HINT_MASK_K0 = ("Your columns start from 0 in every key tile: the tile's first key is k0, so "
                "accumulator i of n8 tile n holds key k0 + 8 n + 2 t + (i % 2) (without k0 a "
                "later tile's keys look like the first tile's: none past tk, none after the "
                "diagonal).", "col = k0 + 8 n + 2 t + (i % 2).")
HINT_MASK_Q0 = ("Your rows start from 0 in every query block: the block's first row is q0, so "
                "the lane's rows are q0 + g and q0 + g + 8, and the causal test compares the "
                "key with that row + off.", "row = q0 + g + 8 (i // 2).")

#: (k0, q0, tk, causal, off): key tile start, query block start, Tk, causal, Tk - Tq. The
#: first tells every mistake of check_mask from the right mask and from each other (a later
#: causal tile cut by Tk: without k0 or q0 it looks like another tile); in the second, the
#: ragged tile ends 5 keys in: a column without 8 n then still reaches past tk
MASK_CASES = [(16, 16, 28, 1, 4), (16, 0, 21, 0, 0), (0, 0, 16, 1, 0), (16, 16, 40, 1, 8),
              (0, 16, 20, 1, -12)]


def mask_model(k0, q0, tk, causal, off, mistake=None):
    """(32, 4 NS) bool: which accumulators the mask hides, optionally with one mistake:
    'rows' (row g for all four), 'top_left' (off = 0), 'off_sign' (row - off), 'edge'
    (col > tk), 'tile' (no 8 n), 'diagonal' (col >= row + off hidden), 'no_tk' (no test
    against tk), 'no_k0' (columns without k0), 'no_q0' (rows without q0)."""
    out = np.zeros((NT, 4 * NS), bool)
    for lane in range(NT):
        g, t = lane // 4, lane % 4
        for n in range(NS):
            for i in range(4):
                c0 = 0 if mistake == "no_k0" else k0
                r0 = 0 if mistake == "no_q0" else q0
                col = c0 + (0 if mistake == "tile" else 8 * n) + 2 * t + (i % 2)
                row = r0 + g + (0 if mistake == "rows" else 8 * (i // 2))
                o = {"top_left": 0, "off_sign": -off}.get(mistake, off)
                past = col > tk if mistake == "edge" else col >= tk
                after = col >= row + o if mistake == "diagonal" else col > row + o
                out[lane, 4 * n + i] = (past and mistake != "no_tk") or (causal != 0 and after)
    return out


@lru_cache(maxsize=None)
def _mask_kernel(mask):
    def kern(hidden, k0, q0, tk, causal, off):
        lane = cuda.threadIdx.x
        s = cuda.local.array(S_ACC, float32)
        for x in range(4 * NS):
            s[x] = F0
        mask(s, k0, q0, tk, causal, off, lane)
        for x in range(4 * NS):
            hidden[lane, x] = 1 if s[x] == NEG_INF else 0
    return cuda.jit(kern)


def check_mask(mask_tile, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your mask_tile(s, k0, q0, tk, causal, off, lane) on the fragments: ragged and causal."""
    cases = []
    mistakes = [("rows", HINT_MASK_ROWS), ("top_left", HINT_MASK_TOPLEFT),
                ("off_sign", HINT_MASK_OFF_SIGN),
                ("edge", HINT_MASK_EDGE), ("tile", HINT_MASK_TILE),
                ("diagonal", HINT_MASK_DIAGONAL), ("no_tk", HINT_MASK_NO_TK),
                ("no_k0", HINT_MASK_K0), ("no_q0", HINT_MASK_Q0)]
    for k0, q0, tk, causal, off in MASK_CASES:
        want = mask_model(k0, q0, tk, causal, off).astype(np.int64)
        wrongs = [(mask_model(k0, q0, tk, causal, off, m).astype(np.int64), h)
                  for m, h in mistakes]
        # a mistake this case cannot tell from the right mask or from another one names nothing
        diagnoses = [((lambda y, e, w=w: np.array_equal(y, w)), *hint) for w, hint in wrongs
                     if not np.array_equal(w, want)
                     and not any(np.array_equal(w, x) and h != hint for x, h in wrongs)]

        def run(f, args=(k0, q0, tk, causal, off), want=want):
            kernel_guard(f, "mask_tile")
            hidden = cuda.to_device(np.zeros((NT, 4 * NS), np.int32))
            with simulator_lock():
                _mask_kernel(_device(f))[1, NT](hidden, *(np.int32(a) for a in args))
            return hidden.copy_to_host().astype(np.int64), want

        what = "causal" if causal else "ragged"
        cases.append(Case(f"{what}: k0 = {k0}, q0 = {q0}, Tk = {tk}, off = {off}", run,
                          HINT_MASK[0], diagnoses, rtol=0, atol=0, hint2=HINT_MASK[1]))
    cases += source_cases((mask_tile,), shuffles=False)[1]
    return run_checks("mask_tile (scores hidden on the fragments)", mask_tile, cases,
                      verbose=verbose, hint_level=hint_level)


# -- on a GPU: the real instructions, timed beside the course's kernel ---------------------

def _one_head(x):
    """x (T, d) as a fresh fp16 (1, T, d) array: `x[None]` would give the new axis a
    stride of 0, which a device array then reports as not C-contiguous."""
    out = np.empty((1,) + x.shape, np.float16)
    out[0] = x
    return out


def _time_lab_and_course(lab, course, shape) -> dict:
    """{"lab_ms", "course_ms", "shape"}: the median milliseconds of `lab()` and of
    `course()` (`timing.time_cuda`: CUDA events, after a warm-up), lab first."""
    from ..timing import time_cuda
    lab_ms = float(np.median(time_cuda(lab)))              # time_cuda gives milliseconds
    course_ms = float(np.median(time_cuda(course)))
    return {"lab_ms": lab_ms, "course_ms": course_ms, "shape": shape}


def time_against_course(parts, *, tq: int = 4096, tk: int = 4096, d: int = 16):
    """GPU only (None on the simulator): median ms of the lab kernel (one warp per 16 rows)
    and of the course's tensor-core kernel (`flashcourse.cuda.forward(kernel="tensor_core")`,
    fp16) on the same fp16-valued inputs, each after a warm-up, by CUDA events."""
    if using_simulator() or not cuda.is_available():
        return None
    from ..cuda import forward
    q, k, v = _inputs(0, tq, tk, d)
    kern = _lab_kernel(_parts(parts))
    qd, kd, vd = (cuda.to_device(x) for x in (q, k, v))
    o = cuda.device_array((tq, d), np.float32)
    lse = cuda.device_array(tq, np.float32)
    args = (qd, kd, vd, o, lse, np.int32(tq), np.int32(tk), np.int32(d),
            np.float32(1 / math.sqrt(d)), np.int32(0))

    def lab():
        kern[ceil_div(tq, BR), NT](*args)

    q16, k16, v16 = (cuda.to_device(_one_head(x)) for x in (q, k, v))

    def course():
        forward(q16, k16, v16, kernel="tensor_core")

    return _time_lab_and_course(lab, course, (tq, tk, d))


ALL_HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_")]
