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
through the Hopper kernel (benchmarks/gpu_hopper.py --check: results/h200_hopper.json); the
simulator cannot run any of this (no warpgroups, no descriptors): the Hopper kernel refuses
to run there (`hopper.check_capability`).
"""

from __future__ import annotations

from functools import lru_cache

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
def mma_ss(n: int, kind: str = "f16"):
    """acc (n / 2 fp32 per thread) (+)= A (64 x 16, shared) B (16 x n, shared), K-major."""
    _check(n, kind)
    ir, types, _, intrinsic = _tools()
    na = n // 2
    ptx = ("{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
           "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {%s}, $%d, $%d, p, %s;\n}"
           % (na + 2, n, K_OF[kind], kind, kind, _regs(0, na), na, na + 1,
              _tail(kind, "0, 0")))

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
    ir, types, _, intrinsic = _tools()
    na = n // 2
    ptx = ("{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
           "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {%s}, {%s}, $%d, p, %s;\n}"
           % (na + 5, n, K_OF[kind], kind, kind, _regs(0, na), _regs(na, 4), na + 4,
              _tail(kind, str(int(tnsp_b)))))
    if kind == "e4m3" and tnsp_b:
        raise ValueError("FP8 wgmma reads B K-major only: tnsp_b must be 0 with kind='e4m3'")

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


#: bare(ptx): an intrinsic that emits `ptx` alone (fence, commit, wait with no operands)
bare = bare_ptx


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
