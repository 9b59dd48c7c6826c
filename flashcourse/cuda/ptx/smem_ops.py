"""smem_ops: asynchronous copies into shared memory and `ldmatrix` fragment loads, from Numba
(and two small helpers the same kernels need: `red.global.add.f32` and `ex2.approx.ftz`).

Two PTX instruction families that FlashAttention-2's kernels are built on and that
numba-cuda has no API for (written as `numba.cuda.extending.intrinsic` inline PTX, as
`mma.py` writes mma.sync; checked on an H200):

    cp.async.cg.shared.global [smem], [gmem], 16, src_size
        copies 16 bytes from global to shared memory WITHOUT passing through registers,
        asynchronously: the thread goes on while the copy is in flight. src_size = 0
        writes 16 zero bytes instead (rows past the end of a tensor). `commit_group`
        closes a group of copies; `wait_group 0` waits until all of this thread's groups
        have landed (a barrier is still needed before OTHER threads read them).
    ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 {r0, r1, r2, r3}, [addr]
        the warp loads four 8 x 8 tiles of 16-bit values: lane l gives the address of
        row l % 8 of tile l // 8, and receives, of each tile, row l // 4, columns
        2 (l % 4) and 2 (l % 4) + 1 in one 32-bit register; with .trans, rows 2 (l % 4)
        and 2 (l % 4) + 1 of column l // 4: the tile transposed on the way. One
        instruction replaces four 32-bit shared loads, and .trans serves a B operand
        stored with k along the rows (P V's V, P^T dO's dO) with no transposed copy.

Each is wrapped in a device function with ONE signature on both targets, so a kernel
calls the same names on a GPU and under Numba's simulator (`ops(simulator)`):

    ld_a(sm, base, stride, lane)    the A fragment (a0, a1, a2, a3) of an m16n8k16 product
                                    from a 16 x 16 tile stored row-major (row = m, two k
                                    per word): tiles at rows {0..7, 8..15}, then words
                                    {0, 4}
    ld_b(sm, base, stride, lane)    four tiles at word offsets base + {0, 4} (columns)
                                    and rows {0..7, 8..15} x stride: the B fragments
                                    (b0, b1) of two n8 tiles of an m16n8k16 product
                                    whose B is stored n-major (row = n, two k per word)
    ld_bt(sm, base, stride, lane)   the same with .trans, tiles at rows {0..7, 8..15}
                                    and words {0, 4}: B stored k-major (row = k)
    ld_at(sm, base, stride, lane)   the A fragment (a0, a1, a2, a3) of a 16 x 16 A stored
                                    k-major (row = k, two m per word; the backward's dS^T
                                    for dQ += dS K): .trans, tiles at words {0, 4}, then
                                    rows {0..7, 8..15}, so the registers arrive in the
                                    order the mma takes them (ld_bt's order a0, a2, a1,
                                    a3 cost ptxas four register moves per use)
    cp16(sm, sidx, g, gidx, nbytes)  16 bytes g[gidx:gidx+4] -> sm[sidx:sidx+4] (uint32
                                    words of a 1-D array, one unsigned index: a 3-D
                                    index cost ~30 instructions of stride arithmetic per
                                    copy; nbytes 0: zeros), asynchronous
    commit(), wait_all()            cp.async.commit_group / wait_group 0
    cp_async16_raw(saddr, gaddr, n) (intrinsics() only) the same copy from a 32-bit shared
                                    and a 64-bit global byte address computed by the
                                    caller; global_address(g, i): the byte address of g[i];
                                    shared_address(sm, i): the 32-bit shared address of
                                    sm[i] (the Hopper kernel forms its addresses once per tile)
    red_add(g, gidx, x)             red.global.add.f32: g[gidx] += x, atomically, for a
                                    1-D float32 array and an unsigned index (Numba's
                                    cuda.atomic.add casts every index to a signed one and
                                    wraps negative ones: ~25 instructions per add on a
                                    3-D array, 3 here)
    red_add2(g, gidx, x, y)         red.global.add.v2.f32 (sm_90): g[gidx] += x and
                                    g[gidx + 1] += y in ONE 8-byte reduction (gidx even),
                                    half the instructions and L2 requests of two red_add
    ex2(x)                          ex2.approx.ftz.f32: 2^x in one MUFU instruction
                                    (math.exp2 adds a rescale for results below 2^-126,
                                    which a probability rounded to 16 bits never needs)

The simulator twins compute what each lane would receive directly from the layout (no
exchange between lanes is needed: every lane knows the tile's address), and copy
synchronously. `ld_b_model` / `ld_bt_model` are the numpy models the tests compare with
the m16n8k16 B fragment maps of `mma.py`.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda

from ...constants import LN2_F
from ...gpu import using_simulator

from .mma import a_m16n8k16, b_m16n8k16

LO16 = np.uint32(0xFFFF)


# --------------------------------------------------------------------------------------
# numpy models (what lane `lane` receives), used by the simulator twins and the tests
# --------------------------------------------------------------------------------------

def _half(word, which):
    return (int(word) >> (16 * which)) & 0xFFFF


def ld_b_model(words: np.ndarray, base: int, stride: int, lane: int) -> tuple:
    """ldmatrix.x4 (no .trans) of tiles (rows 0..7 | 8..15) x (words 0..3 | 4..7)."""
    g, t = lane // 4, lane % 4
    out = []
    for j in range(4):
        row, w0 = (j // 2) * 8 + g, (j % 2) * 4
        out.append(np.uint32(words[base + row * stride + w0 + t]))
    return tuple(out)


def ld_bt_model(words: np.ndarray, base: int, stride: int, lane: int) -> tuple:
    """ldmatrix.x4.trans of tiles (rows 0..7 | 8..15) x (words 0..3 | 4..7)."""
    g, t = lane // 4, lane % 4
    out = []
    for j in range(4):
        row0, w0 = (j % 2) * 8, (j // 2) * 4
        lo = _half(words[base + (row0 + 2 * t) * stride + w0 + g // 2], g % 2)
        hi = _half(words[base + (row0 + 2 * t + 1) * stride + w0 + g // 2], g % 2)
        out.append(np.uint32(lo | (hi << 16)))
    return tuple(out)


def ld_at_model(words: np.ndarray, base: int, stride: int, lane: int) -> tuple:
    """ldmatrix.x4.trans of tiles (words 0..3 | 4..7) x (rows 0..7 | 8..15): ld_bt's
    tiles 1 and 2 swapped."""
    a0, a2, a1, a3 = ld_bt_model(words, base, stride, lane)
    return a0, a1, a2, a3


def a_fragment_of(tile_mk: np.ndarray, lane: int) -> tuple:
    """The four A registers (a0..a3) of an m16n8k16 product for a 16 x 16 (m, k) tile of
    uint16 values, packed as the mma reads them (the fragment map of `mma.py`)."""
    vals = [int(tile_mk[a_m16n8k16(lane, i)]) for i in range(8)]
    return tuple(np.uint32(vals[2 * j] | (vals[2 * j + 1] << 16)) for j in range(4))


def b_fragment_of(tile_kn: np.ndarray, lane: int) -> tuple:
    """The two B registers (b0, b1) of an m16n8k16 product for a 16 x 8 (k, n) tile of
    uint16 values, packed as the mma reads them (the fragment map of `mma.py`)."""
    vals = [int(tile_kn[b_m16n8k16(lane, i)]) for i in range(4)]
    return (np.uint32(vals[0] | (vals[1] << 16)), np.uint32(vals[2] | (vals[3] << 16)))


# --------------------------------------------------------------------------------------
# GPU intrinsics
# --------------------------------------------------------------------------------------

def _make_intrinsics(linear: bool = False):
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic

    li, l64 = ir.IntType(32), ir.IntType(64)
    u32 = types.uint32

    def item_address(context, builder, aryty, ary, inds, indtys):
        arr = context.make_array(aryty)(context, builder, ary)
        idx = [context.cast(builder, v, t, types.intp) for v, t in zip(inds, indtys)]
        ptr = cgutils.get_item_pointer(context, builder, aryty, arr, idx, wraparound=False)
        return builder.ptrtoint(ptr, l64)

    def shared_address(context, builder, aryty, ary, idx, idxty):
        if linear and aryty.ndim == 1:
            # the array's start converted once (the same asm, merged by the compiler),
            # then a 32-bit offset: a constant part of idx becomes the load's immediate
            arr = context.make_array(aryty)(context, builder, ary)
            s64 = builder.asm(ir.FunctionType(l64, [l64]), "cvta.to.shared.u64 $0, $1;",
                              "=l,l", [builder.ptrtoint(arr.data, l64)], side_effect=False)
            size = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
            i32 = builder.trunc(context.cast(builder, idx, idxty, types.uint64), li)
            return builder.add(builder.trunc(s64, li), builder.mul(i32, ir.Constant(li, size)))
        p64 = item_address(context, builder, aryty, ary, [idx], [idxty])
        s64 = builder.asm(ir.FunctionType(l64, [l64]), "cvta.to.shared.u64 $0, $1;", "=l,l",
                          [p64], side_effect=False)
        return builder.trunc(s64, li)

    def ldmatrix(trans):
        ptx = ("ldmatrix.sync.aligned.m8n8.x4" + (".trans" if trans else "")
               + ".shared.b16 {$0,$1,$2,$3}, [$4];")

        @intrinsic
        def ld(typingctx, ary, idx):
            sig = types.UniTuple(u32, 4)(ary, idx)

            def codegen(context, builder, signature, args):
                aryty, idxty = signature.args
                a = shared_address(context, builder, aryty, args[0], args[1], idxty)
                fnty = ir.FunctionType(ir.LiteralStructType([li] * 4), [li])
                r = builder.asm(fnty, ptx, "=r,=r,=r,=r,r,~{memory}", [a], side_effect=True)
                return context.make_tuple(builder, signature.return_type,
                                          [builder.extract_value(r, i) for i in range(4)])
            return sig, codegen
        return ld

    def cp16_asm(builder, sa, ga, n64):
        """cp.async of 16 bytes, shared address sa (i32), global ga (i64), n64 source bytes."""
        builder.asm(ir.FunctionType(ir.VoidType(), [li, l64, li]),
                    "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}",
                    [sa, ga, builder.trunc(n64, li)], side_effect=True)

    @intrinsic
    def cp_async16(typingctx, sary, sidx, gary, gidx, nbytes):
        sig = types.void(sary, sidx, gary, gidx, nbytes)

        def codegen(context, builder, signature, args):
            st, sit, gt, git, nt = signature.args
            sa = shared_address(context, builder, st, args[0], args[1], sit)
            ga = item_address(context, builder, gt, args[2], [args[3]], [git])
            cp16_asm(builder, sa, ga, context.cast(builder, args[4], nt, types.int64))
            return context.get_dummy_value()
        return sig, codegen

    @intrinsic
    def cp_async16_raw(typingctx, saddr, gaddr, nbytes):
        # addresses already computed: saddr a 32-bit shared address, gaddr a 64-bit global
        sig = types.void(saddr, gaddr, nbytes)

        def codegen(context, builder, signature, args):
            st, gt, nt = signature.args
            sa = builder.trunc(context.cast(builder, args[0], st, types.uint64), li)
            ga = context.cast(builder, args[1], gt, types.uint64)
            cp16_asm(builder, sa, ga, context.cast(builder, args[2], nt, types.int64))
            return context.get_dummy_value()
        return sig, codegen

    def address_of(shared):
        # (ary, idx) -> the address of ary[idx]: 32-bit shared (shared: wgmma descriptors
        # are built on it) or 64-bit global
        @intrinsic
        def address(typingctx, ary, idx):
            sig = (types.uint32 if shared else types.uint64)(ary, idx)

            def codegen(context, builder, signature, args):
                at, it = signature.args
                if shared:
                    return shared_address(context, builder, at, args[0], args[1], it)
                return item_address(context, builder, at, args[0], [args[1]], [it])
            return sig, codegen
        return address

    def red_codegen(ptx, n):
        """g[gidx] += the n float32 values that follow (g[gidx + 1] += the second): one
        `ptx` reduction at the element's 64-bit global address."""
        def codegen(context, builder, signature, args):
            gt, git = signature.args[:2]
            ga = item_address(context, builder, gt, args[0], [args[1]], [git])
            xs = [context.cast(builder, a, t, types.float32)
                  for a, t in zip(args[2:], signature.args[2:])]
            builder.asm(ir.FunctionType(ir.VoidType(), [l64] + [ir.FloatType()] * n), ptx,
                        "l" + ",f" * n + ",~{memory}", [ga] + xs, side_effect=True)
            return context.get_dummy_value()
        return codegen

    @intrinsic
    def red_add_f32(typingctx, gary, gidx, x):
        return types.void(gary, gidx, x), red_codegen("red.global.add.f32 [$0], $1;", 1)

    @intrinsic
    def red_add2_f32(typingctx, gary, gidx, x, y):
        # g[gidx] += x, g[gidx + 1] += y: one 8-byte vector reduction (sm_90; gidx even)
        return types.void(gary, gidx, x, y), red_codegen(
            "red.global.add.v2.f32 [$0], {$1, $2};", 2)

    @intrinsic
    def ex2_ftz(typingctx, x):
        sig = types.float32(types.float32)

        def codegen(context, builder, signature, args):
            f = ir.FloatType()
            return builder.asm(ir.FunctionType(f, [f]), "ex2.approx.ftz.f32 $0, $1;", "=f,f",
                               [args[0]], side_effect=False)
        return sig, codegen

    bare = bare_ptx

    return {"ldmatrix_x4": ldmatrix(False), "ldmatrix_x4_trans": ldmatrix(True),
            "cp_async16": cp_async16, "cp_async16_raw": cp_async16_raw,
            "global_address": address_of(False), "shared_address": address_of(True),
            "red_add_f32": red_add_f32, "red_add2_f32": red_add2_f32, "ex2_ftz": ex2_ftz,
            "commit": bare("cp.async.commit_group;"),
            "wait_all": bare("cp.async.wait_group 0;")}


@lru_cache(maxsize=None)
def bare_ptx(ptx: str):
    """An intrinsic that emits `ptx` alone, with no operands (side effect, memory clobber):
    cp.async.commit_group, wgmma.fence, fence.proxy.async, ..."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def op(typingctx):
        sig = types.void()

        def codegen(context, builder, signature, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), ptx, "~{memory}", [],
                        side_effect=True)
            return context.get_dummy_value()
        return sig, codegen
    return op


@lru_cache(maxsize=None)
def intrinsics(linear: bool = False) -> dict:
    """The GPU intrinsics by name (built once); on the simulator only the three that the
    Hopper kernels form their copies with, as twins (`sim_intrinsics`). linear:
    shared addresses of 1-D arrays as (the array's start, converted once) + a 32-bit
    offset, which ptxas folds into the instruction's immediate where the index has a
    constant part (the generic form adds a 64-bit product and converts at every access:
    3 instructions per ldmatrix in the backward's SASS)."""
    if using_simulator():
        return sim_intrinsics()
    return _make_intrinsics(linear)


# --------------------------------------------------------------------------------------
# the simulator's addresses: twins of global_address, shared_address and cp_async16_raw
# --------------------------------------------------------------------------------------
#
# On a GPU these are byte addresses. On the simulator, a global address is the host
# address of the numpy array behind the kernel's argument (`array.ctypes.data` + offset),
# and a shared address an offset from 0 into the block's shared arrays, each placed on a
# 1024-byte boundary after the one before (what a wgmma descriptor's 14-bit start field
# can hold). Each block keeps the arrays it has formed addresses of (`sim_scheduler.
# block_state`), so a copy or a wgmma twin finds the bytes behind an address.

#: where the simulator places a block's shared arrays: offsets that are multiples of this
SIM_SHARED_ALIGN = 1024


def _sim_array(x) -> np.ndarray:
    """The numpy array behind a simulator kernel's array argument (or a shared array)."""
    x = getattr(x, "_item", x)
    return np.asarray(getattr(x, "_ary", x))


def _sim_bytes(x) -> np.ndarray:
    """The bytes of a simulator kernel's array argument or shared array (C order)."""
    x = _sim_array(x)
    if not x.flags.c_contiguous:
        raise ValueError("an address is formed only of a C-contiguous array on the simulator")
    return x.reshape(-1).view(np.uint8)


def _sim_regions(name):
    from ...sim_scheduler import block_state
    return block_state(name, list)


def sim_global_address(g, i):
    """The byte address of g[i] (a 1-D array): its host address on the simulator."""
    u8 = _sim_bytes(g)
    start = int(u8.ctypes.data)
    regions, lock = _sim_regions("global_arrays")
    with lock:
        if not any(r[0] == start and r[1] == u8.size for r in regions):
            regions.append((start, u8.size, u8))
    return np.uint64(start + int(i) * _sim_array(g).itemsize)


def sim_shared_address(sm, i):
    """The 32-bit shared address of sm[i]: the array's offset in the block, plus i's."""
    u8 = _sim_bytes(sm)
    ptr = int(u8.ctypes.data)
    regions, lock = _sim_regions("shared_arrays")
    with lock:
        known = [r[0] for r in regions if r[3] == ptr]
        if known:
            base = known[0]
        else:
            end = regions[-1][0] + regions[-1][1] if regions else 0
            base = -(-end // SIM_SHARED_ALIGN) * SIM_SHARED_ALIGN
            regions.append((base, u8.size, u8, ptr))
    return np.uint32(base + int(i) * sm.itemsize)


def _find(name, addr, nbytes):
    regions, lock = _sim_regions(name)
    addr = int(addr)
    with lock:
        for r in regions:
            if r[0] <= addr and addr + nbytes <= r[0] + r[1]:
                return r[2], addr - r[0]
    raise RuntimeError(f"no {name.replace('_', ' ')[:-1]} holds bytes {addr:#x} .. "
                       f"{addr + nbytes - 1:#x} on the simulator (an address past the end "
                       f"of its array, or not formed by global_address / shared_address)")


def sim_shared_bytes(addr, nbytes):
    """(bytes of the shared array holding [addr, addr + nbytes), offset of addr in them)."""
    return _find("shared_arrays", addr, nbytes)


def sim_cp_async16_raw(saddr, gaddr, nbytes):
    """cp.async of 16 bytes, done at once: the first nbytes (0..16) from gaddr, zeros after."""
    n = int(nbytes)
    if not 0 <= n <= 16:
        raise ValueError(f"cp.async of 16 bytes copies 0..16 of them, got {n}")
    if int(saddr) % 16:                  # the GPU faults on a misaligned cp.async.cg
        raise RuntimeError(f"cp.async of 16 bytes to shared address {int(saddr):#x}, "
                           f"not a multiple of 16")
    dst, so = sim_shared_bytes(saddr, 16)
    if n > 0:
        src, go = _find("global_arrays", gaddr, n)
        if go % 16:
            raise RuntimeError(f"cp.async of 16 bytes from byte {go} of a global array, "
                               f"not a multiple of 16")
    if n < 16:
        dst[so:so + 16] = 0
    if n > 0:
        dst[so:so + n] = src[go:go + n]


def sim_intrinsics() -> dict:
    """The simulator twins of the intrinsics the Hopper kernels form addresses with."""
    return {"global_address": sim_global_address, "shared_address": sim_shared_address,
            "cp_async16_raw": sim_cp_async16_raw}


# --------------------------------------------------------------------------------------
# device functions for kernels: the same names and signatures on both targets
# --------------------------------------------------------------------------------------

def _sim_ops():
    def ld_a(sm, base, stride, lane):
        g = lane // 4
        t = lane % 4
        return (sm[base + g * stride + t], sm[base + (8 + g) * stride + t],
                sm[base + g * stride + 4 + t], sm[base + (8 + g) * stride + 4 + t])

    def ld_b(sm, base, stride, lane):
        g = lane // 4
        t = lane % 4
        return (sm[base + g * stride + t], sm[base + g * stride + 4 + t],
                sm[base + (8 + g) * stride + t], sm[base + (8 + g) * stride + 4 + t])

    def ld_bt(sm, base, stride, lane):
        g = lane // 4
        t = lane % 4
        sh = np.uint32(16 * (g % 2))
        out = []
        for j in range(4):
            row0, w0 = (j % 2) * 8, (j // 2) * 4
            lo = (np.uint32(sm[base + (row0 + 2 * t) * stride + w0 + g // 2]) >> sh) & LO16
            hi = (np.uint32(sm[base + (row0 + 2 * t + 1) * stride + w0 + g // 2]) >> sh) & LO16
            out.append(np.uint32(lo | (hi << np.uint32(16))))
        return out[0], out[1], out[2], out[3]

    def ld_at(sm, base, stride, lane):
        a0, a2, a1, a3 = ld_bt(sm, base, stride, lane)
        return a0, a1, a2, a3

    def cp16(sm, sidx, g, gidx, nbytes):
        for i in range(4):
            sm[sidx + i] = g[gidx + i] if nbytes != 0 else np.uint32(0)

    def red_add(g, gidx, x):
        cuda.atomic.add(g, gidx, x)

    def red_add2(g, gidx, x, y):
        cuda.atomic.add(g, gidx, x)
        cuda.atomic.add(g, gidx + 1, y)

    def ex2(x):
        return math.exp(x * LN2_F)

    def commit():
        return None

    def wait_all():
        return None

    return {name: cuda.jit(device=True)(f) for name, f in
            (("ld_a", ld_a), ("ld_b", ld_b), ("ld_bt", ld_bt), ("ld_at", ld_at),
             ("cp16", cp16),
             ("red_add", red_add), ("red_add2", red_add2), ("ex2", ex2), ("commit", commit),
             ("wait_all", wait_all))}


def _gpu_ops(linear=False):
    ins = intrinsics(linear)
    LDSM, LDSMT = ins["ldmatrix_x4"], ins["ldmatrix_x4_trans"]

    # lane l gives the row address of one of the four 8 x 8 tiles, tile j = l // 8 (row
    # l % 8 of it): "rows first" takes the tiles as (rows 0-7, words 0-3), (rows 8-15,
    # words 0-3), (rows 0-7, words 4-7), (rows 8-15, words 4-7); "words first" swaps the
    # middle two
    @cuda.jit(device=True, forceinline=True)
    def rows_first(base, stride, lane):
        j = lane // 8
        return base + ((j % 2) * 8 + lane % 8) * stride + (j // 2) * 4

    @cuda.jit(device=True, forceinline=True)
    def words_first(base, stride, lane):
        j = lane // 8
        return base + ((j // 2) * 8 + lane % 8) * stride + (j % 2) * 4

    def load(ldsm, order):
        @cuda.jit(device=True, forceinline=True)
        def ld(sm, base, stride, lane):
            return ldsm(sm, order(base, stride, lane))
        return ld

    return {"ld_a": load(LDSM, rows_first), "ld_b": load(LDSM, words_first),
            "ld_bt": load(LDSMT, rows_first), "ld_at": load(LDSMT, words_first),
            "cp16": ins["cp_async16"],
            "red_add": ins["red_add_f32"], "red_add2": ins["red_add2_f32"],
            "ex2": ins["ex2_ftz"], "commit": ins["commit"], "wait_all": ins["wait_all"]}


def ops(simulator: bool, linear: bool = False) -> dict:
    """ld_a, ld_b, ld_bt, ld_at, cp16, red_add, red_add2, ex2, commit, wait_all for a GPU
    (inline PTX) or the simulator (linear: `intrinsics(linear)`'s shared addresses; no
    effect there)."""
    return _sim_ops() if simulator else _gpu_ops(linear)
