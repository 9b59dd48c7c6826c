"""wgmma: Hopper's warpgroup tensor-core instructions from Numba (inline PTX, GPU only).

`wgmma.mma_async` (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate";
sm_90a, compute capability 9.0) is issued by a *warpgroup*: four consecutive warps, 128
threads, together. One instruction computes D (64 x N, fp32) = A (64 x 16) B (16 x N) + D
for N up to 256 in steps of 8. B always comes from shared memory through a 64-bit matrix
descriptor (`wgmma_layouts.descriptor` is its numpy model); A comes from shared memory
too ("SS") or from registers ("RS": each warp holds 16 rows of A in the m16n8k16 A
fragment layout of `mma.py`). The accumulator is spread like mma.sync's: warp w of the
warpgroup holds rows 16 w .. 16 w + 15, and per 8 columns the m16n8 C layout, so thread
(g, t) of warp w holds d[4 j + i] = D[16 w + g + 8 (i // 2), 8 j + 2 t + i % 2].

The instruction is asynchronous: it returns before the product is done. The rules (PTX
ISA, "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group"):

    wgmma.fence.sync.aligned       before the first wgmma that reads registers (the
                                   accumulator or an A fragment) written by other
                                   instructions since the last fence
    wgmma.commit_group.sync.aligned  closes a group of issued wgmma
    wgmma.wait_group.sync.aligned N  waits until at most N groups are in flight: only
                                   then may the accumulator registers be read
    fence.proxy.async.shared::cta  after threads write shared memory that wgmma (the
                                   "async proxy") will read

LLVM knows none of this: to it an inline-asm output is ready when the asm returns. So
every intrinsic here takes a thread's accumulator as a LOCAL ARRAY and passes all of it
through the asm statement as tied in/out operands (`tie`), as CUTLASS's
`warpgroup_fence_operand` does: the fence and the wait then carry a data dependence on
each accumulator register, and the compiler cannot move an accumulator read above the
wait, or a write below the fence. Local arrays indexed with constants (after unrolling)
live in registers.

    mma_ss(n, kind)(acc, desc_a, desc_b, scale_d)     acc[0 : n / 2] (+)= A B, both from
                                                      shared memory, both K-major
                                                      (kind "e4m3": A 64 x 32, B 32 x n,
                                                      m64nNk32, FP8 codes, fp32 sums)
    mma_rs(n, kind, tnsp_b)(acc, a0, a1, a2, a3, desc_b, scale_d)
                                                      A from registers (4 words of two
                                                      16-bit values); tnsp_b = 1: B is
                                                      stored MN-major (N contiguous);
                                                      kind "e4m3": 4 words of four FP8
                                                      codes (64 x 32), tnsp_b must be 0
    tie(n, ptx)(acc)                                  `ptx` with acc[0 : n] tied through
                                                      it ("" pins the values: no code)
    fence(), commit(), wait0()                        wgmma.fence / commit / wait_group 0
                                                      with no operands
    proxy_fence()                                     fence.proxy.async.shared::cta
(the 32-bit shared address a descriptor starts from: `smem_ops.intrinsics()["shared_address"]`)

scale_d = 0 ignores the accumulator's old value (D = A B): the first product of a tile
needs no zeroing. kind: "f16" or "bf16" inputs (k16), or "e4m3" (FP8, k32), fp32
accumulation. Checked on an H200
through the Hopper kernel (benchmarks/gpu_hopper.py --check: results/h200_hopper.json).

On Numba's CUDA simulator every name here returns a twin with the same call (end of this
module): the products are computed at once, each thread its own accumulator values, from
the shared memory that the descriptors point to (`wgmma_layouts.operand_address`'s rule,
the bytes found through `smem_ops.sim_shared_bytes`) and, for RS, from the A fragments
that the four lanes of its row group hold (`sim_scheduler.warp_exchange`); fences, commits,
waits and `setmaxnreg` do nothing (a twin's product is complete when it returns); the
mbarriers and named barriers wait as the hardware's do. So the Hopper kernels run on the
simulator at small sizes, slowly, with the same results up to the order of the fp32 sums.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...gpu import using_simulator
from .smem_ops import bare_ptx

KINDS = ("f16", "bf16", "e4m3")
#: K of one instruction per input kind: 16 for the 16-bit kinds, 32 for FP8 (m64nNk32)
K_OF = {"f16": 16, "bf16": 16, "e4m3": 32}


def _tail(kind: str, trans: str) -> str:
    """The immediates after scale-d: imm-scale-a, imm-scale-b and, for 16-bit inputs only,
    the transpose flags (PTX ISA: FP8 operands in shared memory must be K-major, so the
    .e4m3 form has no imm-trans-a / imm-trans-b)."""
    return "1, 1" + ("" if kind == "e4m3" else ", " + trans)


def _tools():
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic
    return ir, types, cgutils, intrinsic


def _elements(context, builder, aryty, ary, n):
    """Pointers to elements 0..n-1 of a local array (constant offsets: registers)."""
    ir, _, cgutils, _ = _tools()
    arr = context.make_array(aryty)(context, builder, ary)
    return [cgutils.gep_inbounds(builder, arr.data, i) for i in range(n)]


def _tied_asm(builder, ptrs, ptx, cons_in, args_in, elty):
    """asm with the values behind `ptrs` as outputs $0..$n-1, inputs `args_in` next, then
    the old values tied to the outputs; stores the outputs back."""
    ir = _tools()[0]
    n = len(ptrs)
    vals = [builder.load(p) for p in ptrs]
    cons = ",".join(["=" + elty[1]] * n + cons_in + [str(i) for i in range(n)] + ["~{memory}"])
    fnty = ir.FunctionType(ir.LiteralStructType([elty[0]] * n) if n > 1 else elty[0],
                           [a.type for a in args_in] + [elty[0]] * n)
    r = builder.asm(fnty, ptx, cons, list(args_in) + vals, side_effect=True)
    for i, p in enumerate(ptrs):
        builder.store(builder.extract_value(r, i) if n > 1 else r, p)


def _regs(first: int, n: int) -> str:
    return ", ".join(f"${i}" for i in range(first, first + n))


def _check(n: int, kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not (8 <= n <= 256 and n % 8 == 0):
        raise ValueError(f"wgmma N must be a multiple of 8 in 8..256, got {n}")


@lru_cache(maxsize=None)
def mma_ss(n: int, kind: str = "f16", tnsp_b: int = 0):
    """acc (n / 2 fp32 per thread) (+)= A (64 x 16, shared, K-major) B (16 x n, shared):
    K-major, or MN-major (n contiguous) with tnsp_b = 1 (16-bit kinds only)."""
    _check(n, kind)
    if kind == "e4m3" and tnsp_b:
        raise ValueError("FP8 wgmma reads B K-major only: tnsp_b must be 0 with kind='e4m3'")
    if using_simulator():
        return _sim_mma(n, kind, int(tnsp_b), False)
    ir, types, _, intrinsic = _tools()
    na = n // 2
    ptx = ("{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
           "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {%s}, $%d, $%d, p, %s;\n}"
           % (na + 2, n, K_OF[kind], kind, kind, _regs(0, na), na, na + 1,
              _tail(kind, "0, %d" % int(tnsp_b))))

    @intrinsic
    def mma(typingctx, acc, desc_a, desc_b, scale_d):
        sig = types.void(acc, desc_a, desc_b, scale_d)

        def codegen(context, builder, signature, args):
            aty, dat, dbt, sdt = signature.args
            ptrs = _elements(context, builder, aty, args[0], na)
            da = context.cast(builder, args[1], dat, types.uint64)
            db = context.cast(builder, args[2], dbt, types.uint64)
            sd = context.cast(builder, args[3], sdt, types.int32)
            _tied_asm(builder, ptrs, ptx, ["l", "l", "r"], [da, db, sd],
                      (ir.FloatType(), "f"))
            return context.get_dummy_value()
        return sig, codegen
    return mma


@lru_cache(maxsize=None)
def mma_rs(n: int, kind: str = "f16", tnsp_b: int = 1):
    """acc (+)= A (64 x 16, registers: a0..a3 per thread) B (16 x n, shared); tnsp_b = 1
    when B is stored MN-major (n contiguous), 0 when K-major."""
    _check(n, kind)
    if kind == "e4m3" and tnsp_b:
        raise ValueError("FP8 wgmma reads B K-major only: tnsp_b must be 0 with kind='e4m3'")
    if using_simulator():
        return _sim_mma(n, kind, int(tnsp_b), True)
    ir, types, _, intrinsic = _tools()
    na = n // 2
    ptx = ("{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
           "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {%s}, {%s}, $%d, p, %s;\n}"
           % (na + 5, n, K_OF[kind], kind, kind, _regs(0, na), _regs(na, 4), na + 4,
              _tail(kind, str(int(tnsp_b)))))

    @intrinsic
    def mma(typingctx, acc, a0, a1, a2, a3, desc_b, scale_d):
        sig = types.void(acc, a0, a1, a2, a3, desc_b, scale_d)

        def codegen(context, builder, signature, args):
            sg = signature.args
            ptrs = _elements(context, builder, sg[0], args[0], na)
            a = [context.cast(builder, args[i], sg[i], types.uint32) for i in range(1, 5)]
            db = context.cast(builder, args[5], sg[5], types.uint64)
            sd = context.cast(builder, args[6], sg[6], types.int32)
            _tied_asm(builder, ptrs, ptx, ["r"] * 4 + ["l", "r"], a + [db, sd],
                      (ir.FloatType(), "f"))
            return context.get_dummy_value()
        return sig, codegen
    return mma


@lru_cache(maxsize=None)
def tie(n: int, ptx: str = "", word: bool = False):
    """`ptx` (e.g. the wait) with elements 0..n-1 of a local array tied through it:
    float32 elements, or uint32 with word=True."""
    if using_simulator():
        return _sim_nothing
    ir, types, _, intrinsic = _tools()
    elty = (ir.IntType(32), "r") if word else (ir.FloatType(), "f")

    @intrinsic
    def tied(typingctx, acc):
        sig = types.void(acc)

        def codegen(context, builder, signature, args):
            ptrs = _elements(context, builder, signature.args[0], args[0], n)
            _tied_asm(builder, ptrs, ptx, [], [], elty)
            return context.get_dummy_value()
        return sig, codegen
    return tied


FENCE = "wgmma.fence.sync.aligned;"
COMMIT = "wgmma.commit_group.sync.aligned;"
WAIT0 = "wgmma.wait_group.sync.aligned 0;"
WAIT1 = "wgmma.wait_group.sync.aligned 1;"
PROXY_FENCE = "fence.proxy.async.shared::cta;"


def bare(ptx: str):
    """An intrinsic that emits `ptx` alone (fence, commit, wait with no operands,
    setmaxnreg); on the simulator a twin that does nothing."""
    return _sim_nothing if using_simulator() else bare_ptx(ptx)


# --------------------------------------------------------------------------------------
# mbarriers and named barriers (warp specialisation: producers and consumers meet here)
# --------------------------------------------------------------------------------------
#
#   mbar_init(addr, count)      mbarrier.init: a barrier object (8 bytes of shared memory at
#                               32-bit shared address addr) whose phase completes after
#                               `count` arrivals
#   mbar_arrive(addr)           one arrival (mbarrier.arrive)
#   mbar_arrive_copies(addr)    one arrival, made when all of this thread's earlier cp.async
#                               copies have landed (cp.async.mbarrier.arrive.noinc)
#   mbar_try_wait(addr, parity) 1 once the phase of that parity has completed, else 0
#                               (mbarrier.try_wait.parity: loop on it)
#   named_barrier(id, threads)  bar.sync id, threads: only `threads` threads wait (id 1..15;
#                               id 0 is __syncthreads)
#   named_arrive(id, threads)   bar.arrive id, threads: counts toward the barrier's threads
#                               without waiting (the other side of a ping-pong hand-over)

@lru_cache(maxsize=None)
def mbarrier_ops():
    if using_simulator():
        return _sim_mbarrier_ops()
    ir, types, _, intrinsic = _tools()
    li = ir.IntType(32)

    def _vals(context, builder, a, tys):
        return [builder.trunc(context.cast(builder, v, t, types.uint64), li)
                for v, t in zip(a, tys)]

    def asm1(ptx, cons):
        @intrinsic
        def op(typingctx, a0):
            sig = types.void(a0)

            def codegen(context, builder, signature, a):
                builder.asm(ir.FunctionType(ir.VoidType(), [li]), ptx, cons,
                            _vals(context, builder, a, signature.args), side_effect=True)
                return context.get_dummy_value()
            return sig, codegen
        return op

    def asm2(ptx, cons):
        @intrinsic
        def op(typingctx, a0, a1):
            sig = types.void(a0, a1)

            def codegen(context, builder, signature, a):
                builder.asm(ir.FunctionType(ir.VoidType(), [li, li]), ptx, cons,
                            _vals(context, builder, a, signature.args), side_effect=True)
                return context.get_dummy_value()
            return sig, codegen
        return op

    @intrinsic
    def try_wait(typingctx, addr, parity):
        sig = types.uint32(addr, parity)

        def codegen(context, builder, signature, a):
            vals = _vals(context, builder, a, signature.args)
            return builder.asm(
                ir.FunctionType(li, [li, li]),
                "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n"
                "selp.u32 $0, 1, 0, p;\n}", "=r,r,r,~{memory}", vals, side_effect=True)
        return sig, codegen

    return {
        "init": asm2("mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}"),
        "arrive": asm1("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [$0];\n}",
                       "r,~{memory}"),
        "arrive_copies": asm1("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];",
                              "r,~{memory}"),
        "try_wait": try_wait,
        "named_barrier": asm2("bar.sync $0, $1;", "r,r,~{memory}"),
        "named_arrive": asm2("bar.arrive $0, $1;", "r,r,~{memory}"),
    }


# --------------------------------------------------------------------------------------
# simulator twins (module docstring)
# --------------------------------------------------------------------------------------

def _sim_nothing(*args):
    """fence, commit, wait, tie, setmaxnreg on the simulator: nothing to do."""
    return None


#: bytes per element of each kind
ELEM_BYTES = {"f16": 2, "bf16": 2, "e4m3": 1}


def _sim_values(raw: np.ndarray, kind: str) -> np.ndarray:
    """float64 values of elements given as their bytes' integer codes (uint16 or uint8)."""
    if kind == "f16":
        return raw.astype(np.uint16).view(np.float16).astype(np.float64)
    if kind == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    from ...fp8.codes import decode
    return decode(raw.astype(np.uint8), "e4m3").astype(np.float64)


def _sim_operand(desc, mn, k, kind: str, mn_major: bool) -> np.ndarray:
    """Values of elements (mn, k) (numpy index arrays of one shape) of an operand tile in
    shared memory with no swizzle: core matrices of 8 rows of 16 bytes, LBO between them
    along K and SBO along M or N (`wgmma_layouts.operand_address`, for 1 or 2 bytes per
    element)."""
    from .smem_ops import sim_shared_bytes
    d = int(desc)
    if d >> 62 & 3:
        raise ValueError("the simulator's wgmma reads no-swizzle descriptors only")
    start, lbo, sbo = (d & 0x3FFF) << 4, (d >> 16 & 0x3FFF) << 4, (d >> 32 & 0x3FFF) << 4
    eb = ELEM_BYTES[kind]
    per_row = 16 // eb                     # elements in one 16-byte core-matrix row
    if mn_major:                           # 16-bit only: 8 consecutive mn of one k
        addr = (start + (mn // 8) * sbo + (k // 8) * lbo + (k % 8) * 16 + (mn % 8) * 2)
    else:
        addr = (start + (mn // 8) * sbo + (k // per_row) * lbo + (mn % 8) * 16
                + (k % per_row) * eb)
    u8, off = sim_shared_bytes(int(addr.min()), int(addr.max() - addr.min()) + eb)
    rel = addr - addr.min() + off
    raw = u8[rel] if eb == 1 else u8[rel].astype(np.uint16) | (u8[rel + 1].astype(np.uint16) << 8)
    return _sim_values(raw, kind)


@lru_cache(maxsize=None)
def _sim_indices(n: int, kind: str, lane_in_wg: int):
    """For the thread at `lane_in_wg` (0..127) of its warpgroup: its two rows of the
    64-row tile, the k of one instruction, its accumulator columns (n / 4 of them, in
    accumulator order: 8 j + 2 t + c)."""
    w, lane = divmod(lane_in_wg, 32)
    g, t = lane // 4, lane % 4
    rows = np.array([16 * w + g, 16 * w + g + 8])
    ks = np.arange(K_OF[kind])
    cols = np.array([8 * j + 2 * t + c for j in range(n // 8) for c in (0, 1)])
    return rows, ks, cols


def a_fragment_e4m3(lane: int, r: int, b: int) -> tuple[int, int]:
    """(row, k) of byte b of register r of `lane` in one warp's 16 x 32 A tile of an FP8
    wgmma from registers (PTX ISA, "Register fragment layout for matrix A" of
    m64nNk32 .e4m3: the layout of mma.m16n8k32 per warp); `hopper/fp8_layouts` shows why
    the FP8 forward needs it."""
    g, t = lane // 4, lane % 4
    return g + 8 * (r % 2), 4 * t + b + 16 * (r // 2)


def _sim_a_from_lanes(words: dict, g: int, kind: str) -> np.ndarray:
    """(2, K) A values of rows g and g + 8 of one warp's 16-row tile, from the A fragment
    registers {lane: (a0, a1, a2, a3)} of the four lanes of row group g."""
    from .mma import a_m16n8k16
    K = K_OF[kind]
    raw = np.zeros((2, K), np.uint32)
    for lane in range(4 * g, 4 * g + 4):
        regs = words[lane]
        if kind == "e4m3":
            for r in range(4):
                for b in range(4):
                    row, k = a_fragment_e4m3(lane, r, b)
                    raw[row // 8, k] = (int(regs[r]) >> (8 * b)) & 0xFF
        else:
            for i in range(8):
                row, k = a_m16n8k16(lane, i)
                raw[row // 8, k] = (int(regs[i // 2]) >> (16 * (i % 2))) & 0xFFFF
    return _sim_values(raw, kind)


def _sim_mma(n: int, kind: str, tnsp_b: int, rs: bool):
    """The twin of mma_rs(n, kind, tnsp_b) (rs) or mma_ss(n, kind, tnsp_b)."""
    from ...sim_scheduler import current_thread, warp_exchange

    def product(acc, a, desc_b, scale_d):
        lane_in_wg = current_thread().thread_id % 128
        rows, ks, cols = _sim_indices(n, kind, lane_in_wg)
        b = _sim_operand(desc_b, cols[None, :], ks[:, None], kind, bool(tnsp_b))  # (K, n/4)
        d = a @ b                                                  # (2, n / 4)
        # accumulator order 4 j + 2 r + c: rows r, columns 8 j + 2 t + c
        vals = d.reshape(2, n // 8, 2).transpose(1, 0, 2).reshape(-1)
        old = np.asarray(acc[:n // 2], np.float64) if int(scale_d) else 0.0
        acc[:n // 2] = (old + vals).astype(np.float32)

    if not rs:
        def mma(acc, desc_a, desc_b, scale_d):
            rows, ks, _ = _sim_indices(n, kind, current_thread().thread_id % 128)
            a = _sim_operand(desc_a, rows[:, None], ks[None, :], kind, False)   # (2, K)
            product(acc, a, desc_b, scale_d)
        return mma

    def mma_rs_twin(acc, a0, a1, a2, a3, desc_b, scale_d):
        lane = current_thread().thread_id % 32
        words = warp_exchange((a0, a1, a2, a3))
        product(acc, _sim_a_from_lanes(words, lane // 4, kind), desc_b, scale_d)
    return mma_rs_twin


def _sim_mbarrier_ops() -> dict:
    """mbarriers as [arrivals expected, arrivals still missing, phases completed] per
    shared address of the block; named barriers through `sim_scheduler.named_barrier`."""
    import time

    from ...sim_scheduler import block_state, named_barrier

    def barrier(addr):
        bars, lock = block_state("mbarriers", dict)
        return bars, lock, int(addr)

    def init(addr, count):
        bars, lock, a = barrier(addr)
        with lock:
            bars[a] = [int(count), int(count), 0]

    def arrive(addr):
        bars, lock, a = barrier(addr)
        with lock:
            if a not in bars:
                raise RuntimeError(f"mbarrier at shared address {a:#x} arrived on before "
                                   f"mbarrier.init")
            bar = bars[a]
            bar[1] -= 1
            if bar[1] == 0:
                bar[1] = bar[0]
                bar[2] += 1

    def try_wait(addr, parity):
        # 1 once the phase of this parity has completed: the current phase's parity differs
        bars, lock, a = barrier(addr)
        with lock:
            if a not in bars:            # it would never complete: say so, do not spin
                raise RuntimeError(f"mbarrier at shared address {a:#x} waited on before "
                                   f"mbarrier.init")
            done = (bars[a][2] & 1) != (int(parity) & 1)
        if not done:
            time.sleep(1e-4)               # let the other threads run
        return np.uint32(1 if done else 0)

    return {"init": init, "arrive": arrive, "arrive_copies": arrive, "try_wait": try_wait,
            "named_barrier": lambda i, n: named_barrier(i, n, True),
            "named_arrive": lambda i, n: named_barrier(i, n, False)}
