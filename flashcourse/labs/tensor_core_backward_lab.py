"""Checkers for lab 10b (follows notebook 09 and notebook 10, section 6): FlashAttention-2's
backward for one key block on m16n8k16 fragments.

The lab kernel is a one-warp miniature of kernel 1 of `flashcourse.cuda.gradients.
tc_backward_kernels` (key-major, fp16 operands, fp32 accumulation, dQ left out): a block of
32 lanes owns BC = 16 keys and loops over the query tiles of BR = 16 rows that see them; the
head dimension is padded to D = 16. Like the course's kernel it computes the TRANSPOSED tiles
S^T = K_j Q_i^T and dP^T = V_j dO_i^T (16 keys x 16 queries), so that P^T and dS^T come out
in the accumulator layout with rows = keys, which IS the A layout of dV += P^T dO and
dK += dS^T Q (`mma.p_as_a_operand`): no transpose through shared memory. The transpose moves
to the B operands instead: the skeleton stages Q_i and dO_i twice in shared memory (float32),
row-major (qs, dos: B of S^T and dP^T) and transposed (qt, dot: B of dV and dK, whose sums
run over queries). The learner writes, as Numba device functions:

    row_delta(o, do, row, d)            D of one query row: sum over d of dO o O (the pre-pass)
    transposed_scores(ka, va, qs, dos, s, dp, b, scr, w)
                                        S^T and dP^T into the accumulators s and dp
    ds_tile(s, dp, lt, dl, scale, lane) P^T = exp(scale S^T - lse) over s, dS^T = P^T o
                                        (dP^T - D) over dp (lse, D of each query column)
    grad_tile(x, ys, yt, acc, pa, b, scr, w)
                                        acc += X^T Y, X^T in x's accumulators as the A operand
                                        (called for dV += P^T dO and for dK += dS^T Q)
    store_grads(dka, dva, dk, dv, k0, tk, d, scale, lane)
                                        dK = scale dS^T Q and dV by the C map, ragged rows kept

`mma`, `pack` (`tensor_core_lab`) and `load_a`, `load_b` (lab 10's parts, given here) are
the building blocks. Here: the kernel, `lab_backward(parts, ...)` that runs it with the D
pre-pass, the tile configurations (`Tiles`: the lab's TILES and the checks' WIDE) and
`at_tiles` (`tile_sizes`), which rebuilds a part or the skeleton at another one, the kernel's inputs
(`kernel_inputs`, `KERNEL_CASES`) and, GPU only,
`time_against_course(parts)`, which times it beside the course's tensor-core backward.
`tensor_core_backward_parts` checks each part alone on known fragments against a numpy
model of the same fragment arithmetic, with its typical mistakes replayed, and the whole
kernel against the float64 backward (`check_kernel`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int32, uint32

from .. import reference
from .._checks import check_backward_shapes
from ..constants import F0, NEG_INF, POS_INF
from ..cuda.common._launch import simulator_lock
from ..cuda.ptx import mma as M
from ..geometry import ceil_div
from ..gpu import using_simulator
from .cuda_lab_kernel import _device
from .kernel_source import kernel_guard
from .tensor_core_lab import check_lab_shapes, pack
from .tile_sizes import at_tiles, tiles_text

BR = 16                     # query rows per query tile (the n of S^T: two n8 tiles)
BC = 16                     # keys per block (one m16 tile, one warp)
D = 16                      # padded head dimension
NT = 32                     # one warp
KT = D // 16                # k16 steps of S^T, dP^T (over the head dimension)
NS = BR // 8                # n8 tiles of S^T, dP^T (over queries)
NO = D // 8                 # n8 tiles of dK, dV (over the head dimension)
KQ = BR // 16               # k16 steps of dV, dK (over queries)
# Array sizes are names fixed before a kernel is compiled (4 * KT inside a kernel fails to
# compile on a GPU, though the simulator accepts it).
KA_WORDS = 4 * KT           # K's (and V's) A fragments: 4 words per k16 step
S_ACC = 4 * NS              # S^T / P^T (and dP^T / dS^T) accumulators: 4 per n8 tile
O_ACC = 4 * NO              # dK, dV accumulators: 4 per n8 tile



class Tiles(NamedTuple):
    """A tile configuration: the head dimension D (padded) and the query tile BR, both
    multiples of 16 (BC = 16 keys, one warp, always). The lab runs at TILES (D = BR = 16);
    the checks also run your parts at WIDE, where each k16 step and n8 tile count is
    larger than one or two, so that a loop over the wrong named size or an offset right only
    at step 0 changes the result."""
    D: int = 16
    BR: int = 16

    @property
    def sizes(self) -> dict:
        """The module's size names at this configuration (what your parts read)."""
        kt, ns, no, kq = self.D // 16, self.BR // 8, self.D // 8, self.BR // 16
        return dict(BC=BC, BR=self.BR, D=self.D, KT=kt, NS=ns, NO=no, KQ=kq,
                    KA_WORDS=4 * kt, S_ACC=4 * ns, O_ACC=4 * no)

    def __str__(self) -> str:
        return tiles_text(self, ("KT", "KQ", "NS", "NO"))


TILES = Tiles()             # the lab's: KT = KQ = 1, NS = NO = 2
# KT = 3 != KQ = 2 and NS = 4 != NO = 6: a loop over the wrong one of each pair runs too few
# steps (KQ for KT, NS for NO) or past an array's end (KT for KQ, NO for NS: an IndexError on
# the simulator); KT, KQ >= 2: offsets of step 1 and 2 (4 kk, 8 kp, 16 kp)
WIDE = Tiles(D=48, BR=32)

PARTS = ("row_delta", "transposed_scores", "ds_tile", "grad_tile", "store_grads")

_KERNEL_TOL = 3e-3               # the kernel against float64 (measured: <= 4e-4): fp16 P, dS


# -- given: lab 10's fragment loads ---------------------------------------------------------

@cuda.jit(device=True)
def load_a(tile, r0, c0, lane, a, ai):
    """a[ai..ai+3]: the A fragment (m16n8k16) of tile[r0:r0+16, c0:c0+16] (lab 10)."""
    g = lane // 4
    t = lane % 4
    for wd in range(4):
        row = r0 + g + 8 * (wd % 2)
        col = c0 + 2 * t + 8 * (wd // 2)
        a[ai + wd] = pack(tile[row, col], tile[row, col + 1])


@cuda.jit(device=True)
def load_b(tile, n0, k0, lane, b):
    """b[0..1]: the B fragment of the 16 x 8 tile B[kk, n] = tile[n0 + n, k0 + kk] (lab 10)."""
    g = lane // 4
    t = lane % 4
    for wd in range(2):
        kk = k0 + 2 * t + 8 * wd
        b[wd] = pack(tile[n0 + g, kk], tile[n0 + g, kk + 1])


# -- the lab kernel -------------------------------------------------------------------------

@cuda.jit(device=True)
def mask_transposed(s, k0, q0, tk, causal, off, lane):
    """The skeleton's mask on S^T: -inf for keys past tk and (causal) keys after query + off;
    accumulator i of n8 tile n is key k0 + g + 8 (i // 2), query q0 + 8 n + 2 t + (i % 2)."""
    g = lane // 4
    t = lane % 4
    for n in range(NS):
        for i in range(4):
            key = k0 + g + 8 * (i // 2)
            query = q0 + 8 * n + 2 * t + (i % 2)
            if key >= tk or (causal != 0 and key > query + off):
                s[4 * n + i] = NEG_INF


@lru_cache(maxsize=None)
def make_delta_kernel(row_delta):
    """The pre-pass: one thread per query row, D[row] by your row_delta."""
    def delta_kernel(o, do, delta, tq, d):
        row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if row < tq:
            delta[row] = row_delta(o, do, row, d)           # YOUR D
    return cuda.jit(delta_kernel)


@lru_cache(maxsize=None)
def make_lab_kernel(transposed_scores, ds_tile, grad_tile, store_grads, tiles=TILES):
    """The key-block kernel with the learner's parts plugged in (the parts already at
    `tiles`: `at_tiles`), its sizes at `tiles`."""
    SCR = M.SIM_SCRATCH_PER_WARP if using_simulator() else 1

    def lab_kernel(q, k, v, do, lse, delta, dk, dv, tq, tk, d, scale, causal):
        ks = cuda.shared.array((BC, D), float32)          # K_j
        vs = cuda.shared.array((BC, D), float32)          # V_j
        qs = cuda.shared.array((BR, D), float32)          # Q_i, row-major: B of S^T
        qt = cuda.shared.array((D, BR), float32)          # Q_i transposed: B of dK
        dos = cuda.shared.array((BR, D), float32)         # dO_i, row-major: B of dP^T
        dot = cuda.shared.array((D, BR), float32)         # dO_i transposed: B of dV
        lt = cuda.shared.array(BR, float32)               # lse of the tile's queries
        dl = cuda.shared.array(BR, float32)               # D of the tile's queries
        scr = cuda.shared.array(SCR, float32)             # simulator: fragment exchange
        lane = cuda.threadIdx.x
        k0 = cuda.blockIdx.x * BC
        off = tk - tq
        w = cuda.local.array(2, int32)                    # [lane, simulator parity]
        w[0] = lane
        w[1] = 0
        for e in range(lane, BC * D, NT):                 # global reads: K_j, V_j once
            r = e // D
            c = e % D
            ok = k0 + r < tk and c < d
            ks[r, c] = k[k0 + r, c] if ok else F0
            vs[r, c] = v[k0 + r, c] if ok else F0
        cuda.syncthreads()
        ka = cuda.local.array(KA_WORDS, uint32)           # K_j's A fragments, in registers
        va = cuda.local.array(KA_WORDS, uint32)           # V_j's
        for kk in range(KT):
            load_a(ks, 0, 16 * kk, lane, ka, 4 * kk)
            load_a(vs, 0, 16 * kk, lane, va, 4 * kk)
        s = cuda.local.array(S_ACC, float32)              # S^T -> P^T (16 keys x BR)
        dp = cuda.local.array(S_ACC, float32)             # dP^T -> dS^T
        dka = cuda.local.array(O_ACC, float32)            # dK_j (16 keys x D), unscaled
        dva = cuda.local.array(O_ACC, float32)            # dV_j
        b = cuda.local.array(2, uint32)
        pa = cuda.local.array(4, uint32)
        for x in range(S_ACC):
            s[x] = F0
            dp[x] = F0
        for x in range(O_ACC):
            dka[x] = F0
            dva[x] = F0
        first = max(k0 - off, 0) if causal != 0 else 0    # the first query that sees key k0
        for q0 in range((first // BR) * BR, tq, BR):
            cuda.syncthreads()                            # done with the previous Q_i, dO_i
            for e in range(lane, BR * D, NT):             # global reads: Q_i, dO_i
                r = e // D
                c = e % D
                ok = q0 + r < tq and c < d
                qs[r, c] = q[q0 + r, c] if ok else F0
                qt[c, r] = qs[r, c]
                dos[r, c] = do[q0 + r, c] if ok else F0
                dot[c, r] = dos[r, c]
            if lane < BR:                                 # a query that sees no key: P = 0
                row = q0 + lane
                lv = lse[row] if row < tq else NEG_INF
                lt[lane] = lv if lv > NEG_INF else POS_INF
                dl[lane] = delta[row] if row < tq else F0
            cuda.syncthreads()
            transposed_scores(ka, va, qs, dos, s, dp, b, scr, w)   # YOUR S^T, dP^T
            mask_transposed(s, k0, q0, tk, causal, off, lane)
            ds_tile(s, dp, lt, dl, scale, lane)                    # YOUR P^T, dS^T
            grad_tile(s, dos, dot, dva, pa, b, scr, w)             # YOUR dV += P^T dO
            grad_tile(dp, qs, qt, dka, pa, b, scr, w)              # YOUR dK += dS^T Q
        store_grads(dka, dva, dk, dv, k0, tk, d, scale, lane)      # YOUR epilogue

    return cuda.jit(at_tiles(lab_kernel, tiles))


def _parts(parts) -> dict:
    if isinstance(parts, dict):
        return {n: parts[n] for n in PARTS}
    return dict(zip(PARTS, parts))


def _kernels(fns, tiles=TILES):
    for name in PARTS:
        kernel_guard(fns[name], name)
    return (make_delta_kernel(_device(fns["row_delta"])),
            make_lab_kernel(*(at_tiles(_device(fns[n]), tiles) for n in PARTS[1:]), tiles))


def lab_backward(parts, q, k, v, o, lse, do, *, causal=False, tiles=TILES):
    """(dk, dv) of q, o, do (Tq, d), k, v (Tk, d), lse (Tq,) (d <= D, 16 at the lab's tiles)
    with the lab kernel and your parts (a dict, or a tuple in the order of PARTS); the
    pre-pass computes D. `tiles`: the tile configuration (`Tiles`) the kernel and your parts
    run at."""
    fns = _parts(parts)
    delta_k, kern = _kernels(fns, tiles)
    q, k, v, o, do = (np.ascontiguousarray(x, np.float32) for x in (q, k, v, o, do))
    check_lab_shapes(q, k, v)
    check_backward_shapes(q.shape, o.shape, np.shape(lse), do.shape)
    tq, d = q.shape
    tk = k.shape[0]
    if d > tiles.D:
        raise ValueError(f"the lab kernel takes d <= {tiles.D}, got d={d}")
    qd, kd, vd, od, dod = (cuda.to_device(x) for x in (q, k, v, o, do))
    lsed = cuda.to_device(np.ascontiguousarray(lse, np.float32))
    delta = cuda.to_device(np.full(tq, np.nan, np.float32))
    dk = cuda.to_device(np.full((tk, d), np.nan, np.float32))
    dv = cuda.to_device(np.full((tk, d), np.nan, np.float32))
    with simulator_lock():
        delta_k[ceil_div(tq, NT), NT](od, dod, delta, np.int32(tq), np.int32(d))
        kern[ceil_div(tk, BC), NT](qd, kd, vd, dod, lsed, delta, dk, dv, np.int32(tq),
                                   np.int32(tk), np.int32(d), np.float32(1 / math.sqrt(d)),
                                   np.int32(1 if causal else 0))
    return dk.copy_to_host(), dv.copy_to_host()


#: (name, seed, Tq, Tk, d, causal, tiles): one warp per 16 keys, query tiles of BR
KERNEL_CASES = [
    ("one tile pair: Tq = Tk = d = 16", 1, 16, 16, 16, False, TILES),
    ("ragged: Tq = 21, Tk = 37 (3 key blocks), d = 11", 2, 21, 37, 11, False, TILES),
    ("causal, Tq = 24 > Tk = 20 (4 queries see no key), d = 8", 3, 24, 20, 8, True, TILES),
    (f"wider tiles, {WIDE}: causal, Tq = 24 > Tk = 16 (8 queries see no key), d = 40", 4, 24,
     16, 40, True, WIDE),
]


def kernel_inputs(seed, tq, tk, d, causal=False):
    """(q, k, v, o, lse, do), float32 holding fp16 values (q, k, v, do), o and lse from the
    float64 forward on them: what a forward in fp16 would hand the backward."""
    rng = np.random.default_rng(seed)
    q, k, v, do = (M.round_fp16(rng.standard_normal(shape)).astype(np.float32)
                   for shape in ((tq, d), (tk, d), (tk, d), (tq, d)))
    o, lse = reference.attention(q, k, v, causal=causal)
    return q, k, v, o.astype(np.float32), lse.astype(np.float32), do


# -- on a GPU: the real instructions, timed beside the course's kernel ---------------------

def time_against_course(parts, *, tq: int = 4096, tk: int = 4096, d: int = 16):
    """GPU only (None on the simulator): median ms of the lab's backward (pre-pass and
    key-block kernel: dK, dV) and of the course's tensor-core backward
    (`flashcourse.cuda.backward(kernel="tensor_core")`, fp16, which computes dQ too) on the
    same fp16-valued inputs, each after a warm-up, by CUDA events."""
    if using_simulator() or not cuda.is_available():
        return None
    from ..cuda import backward
    from .tensor_core_lab import _one_head, _time_lab_and_course
    q, k, v, o, lse, do = kernel_inputs(0, tq, tk, d)
    delta_k, kern = _kernels(_parts(parts))
    qd, kd, vd, od, lsed, dod = (cuda.to_device(x) for x in (q, k, v, o, lse, do))
    delta = cuda.device_array(tq, np.float32)
    dk = cuda.device_array((tk, d), np.float32)
    dv = cuda.device_array((tk, d), np.float32)
    args = (qd, kd, vd, dod, lsed, delta, dk, dv, np.int32(tq), np.int32(tk), np.int32(d),
            np.float32(1 / math.sqrt(d)), np.int32(0))

    def lab():
        delta_k[ceil_div(tq, NT), NT](od, dod, delta, np.int32(tq), np.int32(d))
        kern[ceil_div(tk, BC), NT](*args)

    q16, k16, v16, o16, do16 = (cuda.to_device(_one_head(x)) for x in (q, k, v, o, do))
    lse1 = cuda.to_device(np.ascontiguousarray(lse[None], np.float32))

    def course():
        backward(q16, k16, v16, o16, lse1, do16, kernel="tensor_core")

    return _time_lab_and_course(lab, course, (tq, tk, d))


