"""mma: tensor-core building blocks for Numba, with a numpy model of each one.

A tensor core multiplies small matrix tiles in one warp-wide instruction,
`mma.sync` (PTX): D = A B + C for a 16 x 16 A, 16 x 8 B and 16 x 8 C/D (the
"m16n8k16" shape; fp16 or bf16 inputs, fp32 accumulation), or a 16 x 8 A and 8 x 8
B ("m16n8k8"; tf32 inputs, fp32 accumulation). No thread holds a whole tile: each of
the 32 lanes of the warp holds a few elements, its *fragment*, in registers. Which
lane holds which element is fixed by the PTX ISA ("Matrix Fragments for mma.m16n8k16
/ mma.m16n8k8"); with groupID = lane >> 2 and t = lane % 4 ("threadID_in_group"):

    m16n8k16 A (16 x 16, 8 halves per lane, 2 per 32-bit register):
        a_i: row = g (i in 0,1,4,5) or g + 8; col = 2t + (i & 1) (+ 8 when i >= 4)
    m16n8k16 B (16 x 8, 4 halves per lane):  b_i: k = 2t + (i & 1) (+ 8 when i >= 2); n = g
    m16n8 C/D (16 x 8, 4 fp32 per lane):     c_i: row = g (i < 2) or g + 8; col = 2t + (i & 1)
    m16n8k8 tf32 A (16 x 8, 4 per lane):     a_i: row = g (i = 0, 2) or g + 8;
                                             col = t (+ 4 when i >= 2)
    m16n8k8 tf32 B (8 x 8, 2 per lane):      b_i: k = t (+ 4 when i = 1); n = g

This module holds, in this order:

1. the fragment maps as small pure functions `(lane, i) -> (row, col)` and helpers
   that scatter a matrix into the 32 lanes' fragments and gather it back;
2. numpy models of the rounding the hardware does (`round_fp16`, `round_bf16`,
   `round_tf32`, the 3xTF32 `split_tf32`) and of each mma acting on fragments
   (`mma_model`), which the CPU tests compare against plain numpy products;
3. the device functions for a GPU (`numba.cuda.extending.intrinsic` emitting inline
   PTX through llvmlite: mma.sync, cvt to tf32, packing two floats into f16x2 /
   bf16x2) and their simulator twins (the 32 lanes exchange fragments through
   shared memory), chosen by `device_ops()`.

The tensor-core FlashAttention kernel that uses them is in `tensor_core/`.
"""

from __future__ import annotations

import numpy as np
from numba import cuda   # module global: the simulator swaps it for its fake module

# --------------------------------------------------------------------------------------
# 1. fragment maps (PTX ISA), lane in 0..31
# --------------------------------------------------------------------------------------

WARP = 32


def group_of(lane: int) -> int:
    """groupID: which of the 8 quads (groups of 4 lanes) the lane belongs to."""
    return lane >> 2


def thread_in_group(lane: int) -> int:
    """threadID_in_group: the lane's position 0..3 inside its quad."""
    return lane % 4


def a_m16n8k16(lane: int, i: int) -> tuple[int, int]:
    """(row, col) in the 16 x 16 A tile of element a_i (i in 0..7) held by `lane`."""
    g, t = group_of(lane), thread_in_group(lane)
    row = g if i in (0, 1, 4, 5) else g + 8
    col = 2 * t + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def b_m16n8k16(lane: int, i: int) -> tuple[int, int]:
    """(k, n) in the 16 x 8 B tile of element b_i (i in 0..3) held by `lane`."""
    g, t = group_of(lane), thread_in_group(lane)
    return 2 * t + (i & 1) + (8 if i >= 2 else 0), g


def c_m16n8(lane: int, i: int) -> tuple[int, int]:
    """(row, col) in the 16 x 8 C/D tile of accumulator c_i (i in 0..3) held by `lane`."""
    g, t = group_of(lane), thread_in_group(lane)
    return (g if i < 2 else g + 8), 2 * t + (i & 1)


def a_m16n8k8(lane: int, i: int) -> tuple[int, int]:
    """(row, col) in the 16 x 8 tf32 A tile of element a_i (i in 0..3) held by `lane`."""
    g, t = group_of(lane), thread_in_group(lane)
    return (g if i in (0, 2) else g + 8), (t if i < 2 else t + 4)


def b_m16n8k8(lane: int, i: int) -> tuple[int, int]:
    """(k, n) in the 8 x 8 tf32 B tile of element b_i (i in 0..1) held by `lane`."""
    g, t = group_of(lane), thread_in_group(lane)
    return (t if i == 0 else t + 4), g


#: name -> (map, tile shape (rows, cols), elements per lane)
FRAGMENTS = {
    "a_m16n8k16": (a_m16n8k16, (16, 16), 8),
    "b_m16n8k16": (b_m16n8k16, (16, 8), 4),
    "c_m16n8": (c_m16n8, (16, 8), 4),
    "a_m16n8k8": (a_m16n8k8, (16, 8), 4),
    "b_m16n8k8": (b_m16n8k8, (8, 8), 2),
}


def index_table(name: str) -> np.ndarray:
    """(32, n, 2) int array: [lane, i] -> (row, col) for fragment map `name`."""
    fmap, _, n = _fragment(name)
    return np.array([[fmap(lane, i) for i in range(n)] for lane in range(WARP)], dtype=np.int64)


def owner_table(name: str) -> np.ndarray:
    """(rows, cols) int array: which lane holds each element of the tile (for pictures)."""
    fmap, shape, n = _fragment(name)
    own = np.full(shape, -1, dtype=np.int64)
    for lane in range(WARP):
        for i in range(n):
            own[fmap(lane, i)] = lane
    return own


def to_fragments(tile: np.ndarray, name: str) -> np.ndarray:
    """Scatter a tile into the lanes: (rows, cols) -> (32, n), [lane, i] = tile[map(lane, i)]."""
    _, shape, _ = _fragment(name)
    tile = np.asarray(tile)
    if tile.shape != shape:
        raise ValueError(f"tile for {name} must have shape {shape}, got {tile.shape}")
    idx = index_table(name)                                  # (32, n, 2)
    return tile[idx[..., 0], idx[..., 1]]                    # (32, n)


def from_fragments(frags: np.ndarray, name: str) -> np.ndarray:
    """Gather the lanes' fragments back into a tile: (32, n) -> (rows, cols)."""
    _, shape, n = _fragment(name)
    frags = np.asarray(frags)
    if frags.shape != (WARP, n):
        raise ValueError(f"fragments for {name} must have shape {(WARP, n)}, got {frags.shape}")
    idx = index_table(name)
    tile = np.zeros(shape, dtype=frags.dtype)
    tile[idx[..., 0], idx[..., 1]] = frags
    return tile


def _fragment(name: str):
    if name not in FRAGMENTS:
        raise ValueError(f"fragment name must be one of {sorted(FRAGMENTS)}, got {name!r}")
    return FRAGMENTS[name]


# --------------------------------------------------------------------------------------
# 2. numpy models: rounding and the mma itself
# --------------------------------------------------------------------------------------

def round_fp16(x) -> np.ndarray:
    """Round to the nearest float16 (ties to even), returned as float32 (cvt.rn.f16.f32)."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def round_bf16(x) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even), returned as float32 (cvt.rn.bf16.f32).

    bfloat16 keeps float32's 8 exponent bits and 7 of its 23 mantissa bits, so
    rounding is done on the float32 bit pattern (finite inputs)."""
    a = np.asarray(x, np.float32)
    bits = a.reshape(-1).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16  # round half to even
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).reshape(a.shape)


def round_tf32(x) -> np.ndarray:
    """Round to tf32 (10 mantissa bits), ties away from zero (cvt.rna.tf32.f32), as float32."""
    a = np.asarray(x, np.float32)
    bits = a.reshape(-1).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x1000) & 0xFFFFE000                         # 13 low bits dropped
    return (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).reshape(a.shape)


def truncate_tf32(x) -> np.ndarray:
    """Truncate to tf32 (the 13 low mantissa bits cleared: rounding toward zero), as float32."""
    a = np.asarray(x, np.float32)
    bits = a.reshape(-1).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).reshape(a.shape)


def split_tf32(x) -> tuple[np.ndarray, np.ndarray]:
    """3xTF32 split: x ~= big + small, both tf32. big = x rounded to tf32 (to nearest, ties
    away from zero, as cvt.rna.tf32), small = x - big (exact in fp32) truncated to tf32.

    Why this way: cvt.rna.tf32 is three SASS instructions (a finiteness test, an add, a
    mask); the kernels round big on the bits (add 2^12, mask: two, the same result for
    every finite x) and truncate small (one mask). A NaN input still reaches the output:
    big may lose it, but small = NaN - big is NaN and truncation keeps a NaN a NaN. On an
    H200 this split ran the d = 128 forward 1.2x faster than cvt.rna twice with the same
    error; CUTLASS's choice (big truncated, small rounded) was slower here and 1.3-2x less
    accurate (benchmarks/NOTES_tensor_core.md). Bounds: |x - big| <= 2^-11 |x|,
    |x - big - small| < 2^-21 |x| (float32 keeps 2^-24)."""
    x = np.asarray(x, np.float32)
    big = round_tf32(x)
    small = truncate_tf32(x - big)
    return big, small


ROUNDERS = {"fp16": round_fp16, "bf16": round_bf16, "tf32": round_tf32}


def matmul_model(a: np.ndarray, b: np.ndarray, precision: str) -> np.ndarray:
    """What the tensor core computes for a (M, K) @ (K, N) product, as float64.

    "fp16"/"bf16"/"tf32": inputs rounded to that type, products exact and summed in
    (at least) fp32; "3xtf32": big*big + big*small + small*big; "fp32": no rounding."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    if precision == "3xtf32":
        ab, as_ = split_tf32(a)
        bb, bs = split_tf32(b)
        f = np.float64
        return as_.astype(f) @ bb.astype(f) + ab.astype(f) @ bs.astype(f) \
            + ab.astype(f) @ bb.astype(f)
    if precision == "fp32":
        return a.astype(np.float64) @ b.astype(np.float64)
    if precision not in ROUNDERS:
        raise ValueError(f"precision must be one of fp16, bf16, tf32, 3xtf32, fp32, "
                         f"got {precision!r}")
    r = ROUNDERS[precision]
    return r(a).astype(np.float64) @ r(b).astype(np.float64)


def mma_model(a_frags, b_frags, c_frags, precision: str = "fp16") -> np.ndarray:
    """The mma.sync of one warp, on fragments: (32, 8|4), (32, 4|2), (32, 4) -> D (32, 4).

    m16n8k16 for "fp16"/"bf16" (A fragments (32, 8), B (32, 4)), m16n8k8 for "tf32"
    (A (32, 4), B (32, 2)). Returns each lane's four fp32 results, computed by
    gathering the tiles with the fragment maps and multiplying them in float64."""
    if precision in ("fp16", "bf16"):
        an, bn = "a_m16n8k16", "b_m16n8k16"
    elif precision == "tf32":
        an, bn = "a_m16n8k8", "b_m16n8k8"
    else:
        raise ValueError(f"precision must be 'fp16', 'bf16' or 'tf32', got {precision!r}")
    a = from_fragments(np.asarray(a_frags, np.float32), an)      # (16, K)
    b = from_fragments(np.asarray(b_frags, np.float32), bn)      # (K, 8)
    c = from_fragments(np.asarray(c_frags, np.float32), "c_m16n8")   # (16, 8)
    d = matmul_model(a, b, precision) + c                         # (16, 8)
    return to_fragments(d.astype(np.float32), "c_m16n8")          # (32, 4)


def pack_pair_model(lo, hi, precision: str = "fp16") -> np.ndarray:
    """Two floats -> one 32-bit word as the mma reads it: `lo` in bits 0-15, `hi` in 16-31."""
    if precision == "fp16":
        bl = np.asarray(lo, np.float32).astype(np.float16).view(np.uint16)
        bh = np.asarray(hi, np.float32).astype(np.float16).view(np.uint16)
    elif precision == "bf16":
        bl = (round_bf16(lo).view(np.uint32) >> 16).astype(np.uint16)
        bh = (round_bf16(hi).view(np.uint32) >> 16).astype(np.uint16)
    else:
        raise ValueError(f"precision must be 'fp16' or 'bf16', got {precision!r}")
    return bl.astype(np.uint32) | (bh.astype(np.uint32) << 16)


def unpack_pair_model(word, precision: str = "fp16") -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `pack_pair_model`: one 32-bit word -> (lo, hi) as float32."""
    w = np.asarray(word, np.uint32)
    lo, hi = (w & 0xFFFF).astype(np.uint16), (w >> 16).astype(np.uint16)
    if precision == "fp16":
        return lo.view(np.float16).astype(np.float32), hi.view(np.float16).astype(np.float32)
    if precision == "bf16":
        return ((lo.astype(np.uint32) << 16).view(np.float32),
                (hi.astype(np.uint32) << 16).view(np.float32))
    raise ValueError(f"precision must be 'fp16' or 'bf16', got {precision!r}")


def p_as_a_operand() -> np.ndarray:
    """(32, 8) lane/element table showing that two m16n8 C tiles ARE an m16n8k16 A tile.

    Entry [lane, i] = (j, c): A element a_i of that lane is accumulator c_c of C tile j
    (columns 8j..8j+7) held by the same lane. FlashAttention uses this to feed the
    probabilities P (an accumulator of S = Q K^T) straight into P V without moving them."""
    out = np.zeros((WARP, 8, 2), np.int64)
    for lane in range(WARP):
        for i in range(8):
            row, col = a_m16n8k16(lane, i)
            j, cc = col // 8, col % 8
            found = [c for c in range(4) if c_m16n8(lane, c) == (row, cc)]
            if len(found) != 1:
                raise AssertionError(f"lane {lane}: a_{i} at {(row, col)} not held in C")
            out[lane, i] = (j, found[0])
    return out


# --------------------------------------------------------------------------------------
# 3. device functions: PTX intrinsics (GPU) and their simulator twins
# --------------------------------------------------------------------------------------

_INTRINSICS = None


def _make_intrinsics():
    """Build the numba intrinsics (needs numba-cuda with a real GPU target)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    f32, u32 = types.float32, types.uint32
    lf, li = ir.FloatType(), ir.IntType(32)

    def asm4(builder, context, signature, ptx, cons, args, n_a, n_b):
        fnty = ir.FunctionType(ir.LiteralStructType([lf] * 4), [li] * (n_a + n_b) + [lf] * 4)
        r = builder.asm(fnty, ptx, cons, list(args), side_effect=False)
        vals = [builder.extract_value(r, i) for i in range(4)]
        return context.make_tuple(builder, signature.return_type, vals)

    def mma_k16(kind):
        ptx = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
               "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
        cons = "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f"

        @intrinsic
        def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            sig = types.UniTuple(f32, 4)(u32, u32, u32, u32, u32, u32, f32, f32, f32, f32)

            def codegen(context, builder, signature, args):
                return asm4(builder, context, signature, ptx, cons, args, 4, 2)
            return sig, codegen
        return mma

    @intrinsic
    def mma_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        sig = types.UniTuple(f32, 4)(u32, u32, u32, u32, u32, u32, f32, f32, f32, f32)
        ptx = ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")

        def codegen(context, builder, signature, args):
            return asm4(builder, context, signature, ptx, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
                        args, 4, 2)
        return sig, codegen

    def bits_op(round_up):
        @intrinsic
        def op(typingctx, x):
            """fp32 -> tf32 bits: truncated (round_up False: one mask) or rounded to nearest,
            ties away from zero (True: add 2^12, mask), with no finiteness test (a NaN may
            become another value: the 3xTF32 split keeps it in small, `split_tf32`)."""
            sig = u32(f32)

            def codegen(context, builder, signature, args):
                w = builder.bitcast(args[0], li)
                if round_up:
                    w = builder.add(w, ir.Constant(li, 0x1000))
                return builder.and_(w, ir.Constant(li, 0xFFFFE000))
            return sig, codegen
        return op

    def cvt_to_word(ptx, n_args):
        """The code generator of a conversion of n_args float32 values into one 32-bit word
        by one PTX instruction ($0 the word, $1.. the floats)."""
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(li, [lf] * n_args)
            return builder.asm(fnty, ptx, "=r" + ",f" * n_args, list(args),
                               side_effect=False)
        return codegen

    @intrinsic
    def to_tf32(typingctx, x):
        """fp32 -> tf32 bits (round to nearest, ties away from zero)."""
        return u32(f32), cvt_to_word("cvt.rna.tf32.f32 $0, $1;", 1)

    def pack2(kind):
        # cvt.rn.f16x2.f32 d, a, b puts a in the UPPER half and b in the lower half
        ptx = f"cvt.rn.{kind}x2.f32 $0, $2, $1;"

        @intrinsic
        def pack(typingctx, lo, hi):
            return u32(f32, f32), cvt_to_word(ptx, 2)
        return pack

    @intrinsic
    def as_f32(typingctx, x):
        """Reinterpret the 32 bits of a uint32 as a float32 (no conversion)."""
        sig = f32(u32)

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], lf)
        return sig, codegen

    return {"mma_fp16": mma_k16("f16"), "mma_bf16": mma_k16("bf16"), "mma_tf32": mma_tf32,
            "to_tf32": to_tf32, "pack_fp16": pack2("f16"), "pack_bf16": pack2("bf16"),
            "as_f32": as_f32, "tf32_trunc": bits_op(False), "tf32_round": bits_op(True)}


def intrinsics() -> dict:
    """The GPU intrinsics by name (built once; not usable under the simulator)."""
    global _INTRINSICS
    if _INTRINSICS is None:
        _INTRINSICS = _make_intrinsics()
    return _INTRINSICS


# Simulator twins. Under Numba's CUDA simulator a device function is plain Python run by
# one Python thread per CUDA thread, so these use numpy on scalars. The mma twins make
# the 32 lanes exchange their fragments through a shared-memory scratch area exactly as
# the fragment maps say, then each lane computes its own four results.

#: float32 words of scratch per warp for one simulated mma (A 16x16, B 16x8) x 2 buffers
SIM_SCRATCH_PER_WARP = 2 * (16 * 16 + 16 * 8)


def _sim_scalar_bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def sim_to_tf32(x):
    return np.uint32(_sim_scalar_bits(round_tf32(np.float32(x))))


def sim_tf32_trunc(x):
    return np.uint32(_sim_scalar_bits(truncate_tf32(np.float32(x))))


#: the twin of tf32_round: round_tf32's bit rule, as for cvt.rna (neither tests finiteness)
sim_tf32_round = sim_to_tf32


def sim_as_f32(w):
    return np.float32(np.uint32(w).view(np.float32))


def sim_pack_fp16(lo, hi):
    return np.uint32(pack_pair_model(np.float32(lo), np.float32(hi), "fp16"))


def sim_pack_bf16(lo, hi):
    return np.uint32(pack_pair_model(np.float32(lo), np.float32(hi), "bf16"))


def _sim_mma(scr, wbase, lane, parity, a_vals, b_vals, c, amap, bmap, k):
    """One simulated warp mma: scatter a_vals/b_vals by the maps, barrier, gather, sum."""
    base = wbase + parity * (16 * 16 + 16 * 8)
    for i, val in enumerate(a_vals):
        r, cc = amap(lane, i)
        scr[base + r * 16 + cc] = val
    for i, val in enumerate(b_vals):
        kk, n = bmap(lane, i)
        scr[base + 256 + kk * 8 + n] = val
    cuda.syncthreads()
    out = []
    for i in range(4):
        r, cc = c_m16n8(lane, i)
        s = np.float64(c[i])
        for kk in range(k):
            s += np.float64(scr[base + r * 16 + kk]) * np.float64(scr[base + 256 + kk * 8 + cc])
        out.append(np.float32(s))
    return tuple(out)


def _sim_mma_k16(precision):
    def mma(scr, wbase, lane, parity, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        avals = []
        for w in (a0, a1, a2, a3):
            lo, hi = unpack_pair_model(np.uint32(w), precision)
            avals += [np.float32(lo), np.float32(hi)]
        bvals = []
        for w in (b0, b1):
            lo, hi = unpack_pair_model(np.uint32(w), precision)
            bvals += [np.float32(lo), np.float32(hi)]
        return _sim_mma(scr, wbase, lane, parity, avals, bvals, (c0, c1, c2, c3),
                        a_m16n8k16, b_m16n8k16, 16)
    return mma


def sim_mma_tf32(scr, wbase, lane, parity, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    avals = [sim_as_f32(w) for w in (a0, a1, a2, a3)]
    bvals = [sim_as_f32(w) for w in (b0, b1)]
    return _sim_mma(scr, wbase, lane, parity, avals, bvals, (c0, c1, c2, c3),
                    a_m16n8k8, b_m16n8k8, 8)


def device_ops(simulator: bool) -> dict:
    """Device functions the kernel calls, by name, each with one signature on both targets.

    mma_fp16/mma_bf16/mma_tf32(scr, wbase, lane, parity, a0..a3, b0, b1, c0..c3) -> 4 floats
    (scr, wbase, lane, parity are used by the simulator only), to_tf32(x) -> bits
    (cvt.rna.tf32: one-pass TF32), tf32_trunc(x) / tf32_round(x) -> bits (the 3xTF32
    split's big and small, `split_tf32`), as_f32(bits) -> float, pack_fp16/pack_bf16(lo,
    hi) -> 32-bit word."""
    if simulator:
        py = {"mma_fp16": _sim_mma_k16("fp16"), "mma_bf16": _sim_mma_k16("bf16"),
              "mma_tf32": sim_mma_tf32, "to_tf32": sim_to_tf32, "as_f32": sim_as_f32,
              "pack_fp16": sim_pack_fp16, "pack_bf16": sim_pack_bf16,
              "tf32_trunc": sim_tf32_trunc, "tf32_round": sim_tf32_round}
        return {name: cuda.jit(device=True)(f) for name, f in py.items()}
    ins = intrinsics()
    ops = {}
    for name in ("mma_fp16", "mma_bf16", "mma_tf32"):
        ops[name] = _wrap_mma(ins[name])
    for name in ("to_tf32", "as_f32", "pack_fp16", "pack_bf16", "tf32_trunc", "tf32_round"):
        ops[name] = ins[name]
    return ops


def _wrap_mma(mma):
    @cuda.jit(device=True, forceinline=True)
    def wrapped(scr, wbase, lane, parity, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        return mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
    return wrapped


def tf32x3_ops(simulator: bool) -> dict:
    """The 3xTF32 product as device functions, written once for every kernel that uses it.

    split(x) -> (big, small): the bits of `split_tf32`'s two tf32 parts of a float32 x
    (big = tf32_round(x), small = tf32_trunc(x - big)).
    small2(scr, wbase, lane, parity, a0..a3, sa0..sa3, b0, b1, sb0, sb1, c0..c3)
    -> (c0..c3, parity): the small terms, c += A_small B_big, then A_big B_small.
    mma3(...same arguments) -> (c0..c3, parity): small2, then c += A_big B_big: one
    m16n8k8 tf32 product each (small terms first, so they add up before the big one);
    parity comes back flipped once per product (the simulator's scratch halves).

    Inlined on a GPU (forceinline: compiled as if written in the kernel); on the
    simulator plain device functions. The kernel keeps what makes it a version: where
    its operands come from and which accumulators they go to."""
    ops = device_ops(simulator)
    MMA, AS_F32 = ops["mma_tf32"], ops["as_f32"]
    BIG, SMALL = ops["tf32_round"], ops["tf32_trunc"]
    jit = cuda.jit(device=True) if simulator else cuda.jit(device=True, forceinline=True)

    @jit
    def split(x):
        big = BIG(x)
        return big, SMALL(x - AS_F32(big))

    @jit
    def small2(scr, wbase, lane, par, a0, a1, a2, a3, sa0, sa1, sa2, sa3, b0, b1, sb0, sb1,
               c0, c1, c2, c3):
        c0, c1, c2, c3 = MMA(scr, wbase, lane, par, sa0, sa1, sa2, sa3, b0, b1,
                             c0, c1, c2, c3)
        par = 1 - par
        c0, c1, c2, c3 = MMA(scr, wbase, lane, par, a0, a1, a2, a3, sb0, sb1,
                             c0, c1, c2, c3)
        return c0, c1, c2, c3, 1 - par

    @jit
    def mma3(scr, wbase, lane, par, a0, a1, a2, a3, sa0, sa1, sa2, sa3, b0, b1, sb0, sb1,
             c0, c1, c2, c3):
        c0, c1, c2, c3, par = small2(scr, wbase, lane, par, a0, a1, a2, a3, sa0, sa1, sa2,
                                     sa3, b0, b1, sb0, sb1, c0, c1, c2, c3)
        c0, c1, c2, c3 = MMA(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1,
                             c0, c1, c2, c3)
        return c0, c1, c2, c3, 1 - par

    return {"split": split, "small2": small2, "mma3": mma3}
