"""tc_backward_passes: the small kernels around the tensor-core backward's key-major one.

`tc_backward.run` launches them: the D pre-pass before the key-major kernel (one pass over
o and dO: D = rowsum(dO o O), lse in log2 units, the padded rows that mask P, and dQ zeroed
for the atomics), and, for fp16/bf16 arrays, the casts of the float32 gradients to the
16-bit output type after it. Each layout that was measured is kept behind its flag for the
A/B (`PREPASS`, `CAST_PAIRS`; results in benchmarks/NOTES_tc_backward.md).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ...constants import LOG2E_F, NEG_INF, POS_INF
from ...geometry import ceil_div
from ...gpu import using_simulator
from ..common._launch import launch
from .tc_backward_kernels import LD_ROWS
from ..tensor_core.host import bf16_bits_device

#: threads per block of the small pre/post-pass kernels
PASS_THREADS = 128
#: the D pre-pass's layout (`delta_kernel`): "warp_shfl" (one warp per row, coalesced, its
#: sums added by shuffles), "warp_rows" (the same rows, the sums added by lane 0 from shared
#: memory after a barrier) or "thread_rows" (one thread per row, the first version); None,
#: the default: `prepass_layout()` chooses. Read when the kernels are built
#: (`pass_kernels.cache_clear()` to switch)
PREPASS = None


def prepass_layout() -> str:
    """The D pre-pass's layout: `PREPASS` if set; else "warp_shfl" on a GPU (the fastest
    measured: benchmarks/NOTES_tc_backward.md) and "thread_rows" on Numba's simulator,
    which runs every thread in Python: "warp_shfl" launches 32 blocks of 128 threads for
    each 128 rows whatever Tq is, "thread_rows" one block, and a small backward there ran
    2.3-6x faster with it (Tq = 20, 2026-12-07). Both give the same L bit for bit and D
    to float32 rounding (tests/test_tc_backward.py::test_prepass_layouts_agree), and the
    tests run the backward end to end with each."""
    if PREPASS is not None:
        return PREPASS
    return "thread_rows" if using_simulator() else "warp_shfl"
#: the gradient casts: two values per thread, one 32-bit store by cvt.rn.{f16,bf16}x2, when
#: the element count is even (False: one value per thread); read at each call
CAST_PAIRS = True
#: rows per block of the "warp_shfl" and "warp_rows" pre-passes
DROWS = PASS_THREADS // 32


def delta_kernel(value):
    """The pre-pass kernel, reading each element of o and dO through `value` (a device
    function: the float32 it stands for). PREPASS "warp_shfl": one warp per row (DROWS rows
    per block of PASS_THREADS), its lanes reading consecutive columns (coalesced), their
    partial sums added by five shuffles; "warp_rows": the same rows, the partial sums added
    by lane 0 from shared memory after a barrier (32 dependent adds per row); "thread_rows":
    one thread per row walking its d columns (each warp-wide load then touches 32 rows'
    cache lines)."""
    from numba import float32

    from .tc_backward_kernels import _warp_sum
    SIM = using_simulator()
    layout = prepass_layout()
    warp_sum = _warp_sum(SIM)

    @cuda.jit(device=True)
    def put_row(ld, lv, psum, dsum, sums, tq, h, i, acc):
        # ld[0, h, i] = lse log2(e) (lv = lse[h, i]; +inf for lse = -inf and padded rows
        # i >= Tq: P = 0), ld[1, h, i] = D = rowsum(dO o O) = acc (0 in padded rows);
        # i < ld.shape[2]
        if i < tq:
            ld[1, h, i] = acc
            ld[0, h, i] = lv * LOG2E_F if lv != NEG_INF else POS_INF
            if sums != 0:
                psum[h, i] = float32(0.0)
                dsum[h, i] = float32(0.0)
        elif i < ld.shape[2]:
            ld[1, h, i] = float32(0.0)
            ld[0, h, i] = POS_INF

    if layout == "thread_rows":
        @cuda.jit
        def tc_delta(o, do, lse, ld, dq, zero_dq, tq, d, psum, dsum, sums):
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            h = cuda.blockIdx.y
            acc = float32(0.0)
            lv = float32(0.0)
            if i < tq:
                lv = lse[h, i]
                for c in range(d):
                    acc += value(do[h, i, c]) * value(o[h, i, c])
                    if zero_dq != 0:
                        dq[h, i, c] = float32(0.0)
            put_row(ld, lv, psum, dsum, sums, tq, h, i, acc)
        return tc_delta

    if layout == "warp_shfl":
        @cuda.jit
        def tc_delta_shfl(o, do, lse, ld, dq, zero_dq, tq, d, psum, dsum, sums):
            # warp r of the block owns row i = DROWS x block + r; lane l takes columns
            # l, l + 32, ... (two at a time, in two sums), the warp adds the 32 sums by
            # shuffles; lse is read first, so its latency hides behind the row's
            part = cuda.shared.array(PASS_THREADS if SIM else 1, float32)  # the simulator's
            tid = cuda.threadIdx.x
            lane = tid % 32
            i = cuda.blockIdx.x * DROWS + tid // 32
            h = cuda.blockIdx.y
            acc = float32(0.0)
            acc2 = float32(0.0)
            lv = float32(0.0)
            if i < tq:                     # the same i for the whole warp
                if lane == 0:
                    lv = lse[h, i]
                c = lane
                while c + 32 < d:
                    acc += value(do[h, i, c]) * value(o[h, i, c])
                    acc2 += value(do[h, i, c + 32]) * value(o[h, i, c + 32])
                    if zero_dq != 0:
                        dq[h, i, c] = float32(0.0)
                        dq[h, i, c + 32] = float32(0.0)
                    c += 64
                if c < d:
                    acc += value(do[h, i, c]) * value(o[h, i, c])
                    if zero_dq != 0:
                        dq[h, i, c] = float32(0.0)
            acc = warp_sum(acc + acc2, part, tid)      # every thread of the block
            if lane == 0:
                put_row(ld, lv, psum, dsum, sums, tq, h, i, acc)
        return tc_delta_shfl

    @cuda.jit
    def tc_delta_rows(o, do, lse, ld, dq, zero_dq, tq, d, psum, dsum, sums):
        # warp r of the block owns row i = DROWS x block + r
        part = cuda.shared.array(PASS_THREADS, float32)
        tid = cuda.threadIdx.x
        lane = tid % 32
        i = cuda.blockIdx.x * DROWS + tid // 32
        h = cuda.blockIdx.y
        acc = float32(0.0)
        if i < tq:
            for c in range(lane, d, 32):
                acc += value(do[h, i, c]) * value(o[h, i, c])
                if zero_dq != 0:
                    dq[h, i, c] = float32(0.0)
        part[tid] = acc
        cuda.syncthreads()
        if lane == 0:
            acc = float32(0.0)
            lv = float32(0.0)
            if i < tq:
                lv = lse[h, i]
                for j in range(32):
                    acc += part[tid + j]
            put_row(ld, lv, psum, dsum, sums, tq, h, i, acc)
    return tc_delta_rows


@lru_cache(maxsize=None)
def pass_kernels():
    """(delta, delta_bf16, (cast, cast_bits), delta_bits, rows per block of the delta
    kernels).

    delta: D = rowsum(dO o O) in fp32, also zeroing dQ for the atomics and the row sums.
    delta_bf16 takes float32 o, dO viewed as uint32 and rounds them to bf16 first, so that
    D uses the dO the tensor cores see (with one key, dP = dO . v and D = dO . o cancel
    exactly, as they must); delta_bits takes o, dO as bf16 bit patterns. cast: an
    element-wise cast of the fp32 gradients to float16; cast_bits to bf16 bits, rounded as
    `tensor_core`'s bf16 conversion rounds (`bf16_bits_device`); the pairs casts (fp16, bf16)
    write two values per 32-bit word (`CAST_PAIRS`; a NaN becomes cvt's canonical NaN).
    """
    from numba import float32, uint32

    from ..ptx.mma import device_ops
    as_f32 = device_ops(using_simulator())["as_f32"]

    @cuda.jit(device=True)
    def as_float(x):                   # float16 or float32
        return float32(x)

    @cuda.jit(device=True)
    def bf16_value(u):
        # the float32 (given as its bits u) rounded to bfloat16, half to even, as float32
        return as_f32((u + uint32(0x7FFF) + ((u >> uint32(16)) & uint32(1)))
                      & uint32(0xFFFF0000))

    @cuda.jit(device=True)
    def bf16_bits_value(b):
        # a bf16 bit pattern (uint16) as the float32 it stands for
        return as_f32(uint32(b) << uint32(16))

    @cuda.jit
    def tc_cast(src, dst, n):
        i = cuda.grid(1)
        if i < n:
            dst[i] = src[i]

    bf16_bits = bf16_bits_device()

    @cuda.jit
    def tc_cast_bits(src, dst, n):
        # src uint32 = float32 bits, dst uint16 bf16 bits (flat: no row/column division)
        i = cuda.grid(1)
        if i < n:
            dst[i] = bf16_bits(src[i])

    def pairs(pack):
        @cuda.jit
        def tc_cast_pairs(src, dst, n2):
            # src float32 (2 n2), dst uint32 (n2): two 16-bit values per word (cvt.rn)
            i = cuda.grid(1)
            if i < n2:
                dst[i] = pack(src[2 * i], src[2 * i + 1])
        return tc_cast_pairs

    ops = device_ops(using_simulator())
    rows = PASS_THREADS if prepass_layout() == "thread_rows" else DROWS     # rows per block
    return (delta_kernel(as_float), delta_kernel(bf16_value),
            (tc_cast, tc_cast_bits, pairs(ops["pack_fp16"]), pairs(ops["pack_bf16"])),
            delta_kernel(bf16_bits_value), rows)


def delta_grid(tq: int, bh: int) -> tuple:
    """The pre-pass's grid: every row of its (2, BH, Tq rounded up to LD_ROWS) output, at
    the rows per block of the kernels `pass_kernels` built."""
    return (ceil_div(ceil_div(tq, LD_ROWS) * LD_ROWS, pass_kernels()[4]), bh)


def cast(src, dst, bits: bool = False) -> None:
    """fp32 device array -> dst (same shape, float16; or bf16 bits, uint16) on the device."""
    n = int(src.size)
    tc_cast, tc_cast_bits, pairs_fp16, pairs_bf16 = pass_kernels()[2]
    if CAST_PAIRS and n % 2 == 0:      # two values per thread, one 32-bit store
        n2 = n // 2
        launch(pairs_bf16 if bits else pairs_fp16, None, max(1, ceil_div(n2, 256)), 256, 0,
               (src.reshape(n), dst.reshape(n).view(np.uint32), np.int32(n2)))
        return
    if bits:                           # the forward's float32 -> bf16 rounding
        tc_cast, src = tc_cast_bits, src.view(np.uint32)
    launch(tc_cast, None, max(1, ceil_div(n, 256)), 256, 0,
           (src.reshape(n), dst.reshape(n), np.int32(n)))
