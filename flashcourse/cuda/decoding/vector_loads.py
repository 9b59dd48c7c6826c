"""vector_loads: how the CUDA-core split kernel reads a lane's slice of a K or V row.

`vector_loaders()` returns (load_f16x8, load_f32x4, load_u32x4): Numba intrinsics that read
16 bytes at a flat element index of a C-contiguous array as one LLVM `<4 x i32>`
(`<4 x float>`) load, aligned 16 (one `ld.global.v4` instruction), and return the values as
a tuple of float32 (the fp16 halves converted) or, for FP8 codes, of 4 uint32 words of 4
codes each. Numba has no public API for a vector load; on the simulator, and on a GPU when d
is not a multiple of the vector or the arrays are not 16-byte aligned, plain element loads
take their place.

`row_loader(cfg)` builds the device function the split body calls for every key: this
lane's cfg.epl values of one row, as float32 in registers. For an FP8 cache (itemsize 1)
the 16 bytes are 16 e4m3 codes, turned into float32 right after the load
(`flashcourse.cuda.ptx.fp8`: the conversion instruction on sm_89+, integer arithmetic
elsewhere); the scales are applied by the split body, not here.
"""

from __future__ import annotations

from numba import cuda, float32
from numba import uint64 as U

from ...constants import F0
from ..ptx.fp8 import decode_ops


def _vector_loaders():
    """(load_f16x8, load_f32x4, load_u32x4): device intrinsics that read 16 bytes at a flat
    element index of a C-contiguous array."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def make(elem_bits, n):
        @intrinsic
        def load(typingctx, arr, idx):
            out = types.uint32 if elem_bits == 8 else types.float32
            sig = types.UniTuple(out, n)(arr, idx)

            def codegen(context, builder, sig, args):
                ary = context.make_array(sig.args[0])(context, builder, args[0])
                ptr = builder.gep(ary.data, [args[1]])
                i32 = ir.IntType(32)
                if elem_bits == 16:      # 4 x i32, each word = 2 halves -> fpext
                    vec = builder.load(builder.bitcast(ptr, ir.VectorType(i32, 4)
                                                       .as_pointer()), align=16)
                    vals = []
                    for w in range(4):
                        word = builder.extract_element(vec, ir.Constant(i32, w))
                        h2 = builder.bitcast(word, ir.VectorType(ir.HalfType(), 2))
                        f2 = builder.fpext(h2, ir.VectorType(ir.FloatType(), 2))
                        vals += [builder.extract_element(f2, ir.Constant(i32, i))
                                 for i in range(2)]
                elif elem_bits == 8:     # 4 x i32 of 4 codes each, returned as words
                    vec = builder.load(builder.bitcast(ptr, ir.VectorType(i32, 4)
                                                       .as_pointer()), align=16)
                    vals = [builder.extract_element(vec, ir.Constant(i32, i))
                            for i in range(4)]
                else:                    # 4 x float
                    vec = builder.load(builder.bitcast(ptr, ir.VectorType(ir.FloatType(), 4)
                                                       .as_pointer()), align=16)
                    vals = [builder.extract_element(vec, ir.Constant(i32, i))
                            for i in range(4)]
                return context.make_tuple(builder, sig.return_type, vals)

            return sig, codegen
        return load

    return make(16, 8), make(32, 4), make(8, 4)


_LOADERS = None


def vector_loaders():
    global _LOADERS
    if _LOADERS is None:
        _LOADERS = _vector_loaders()
    return _LOADERS


def row_loader(cfg):
    """load_row(arr, h, key, kl, tk, d, out, base): this lane's cfg.epl values of row `key`
    of head h of arr (heads, tk, d) into out[base:base + epl] as float32 (zeros past the head
    dim or past Tk). FP8 codes (cfg.itemsize 1) are decoded to float32, unscaled."""
    VEC, LPK, NV, EPL, D = cfg.vec, cfg.lpk, cfg.nv, cfg.epl, cfg.head_dim
    VECTOR, FP8 = cfg.vector, cfg.itemsize == 1
    if FP8:
        dec_word, dec_one = decode_ops(cfg.hw_cvt)
    vload = None
    if VECTOR:
        load16, load32, load8 = vector_loaders()
        vload = {2: load16, 4: load32, 1: load8}[cfg.itemsize]

    @cuda.jit(device=True)
    def load_row(arr, h, key, kl, tk, d, out, base):
        if VECTOR:
            if key < tk:
                row0 = (U(h) * U(tk) + U(key)) * U(D)
                for vv in range(NV):
                    t = vload(arr, row0 + U((vv * LPK + kl) * VEC))
                    if FP8:                    # 16 codes: 4 words of 4
                        for w in range(4):
                            x0, x1, x2, x3 = dec_word(t[w])
                            o = base + vv * VEC + 4 * w
                            out[o] = x0
                            out[o + 1] = x1
                            out[o + 2] = x2
                            out[o + 3] = x3
                    else:
                        for e in range(VEC):
                            out[base + vv * VEC + e] = t[e]
            else:
                for e in range(EPL):
                    out[base + e] = F0
        else:
            for vv in range(NV):
                for e in range(VEC):
                    c = (vv * LPK + kl) * VEC + e
                    x = F0
                    if key < tk and c < d:
                        if FP8:
                            x = dec_one(arr[U(h), U(key), U(c)])
                        else:
                            x = float32(arr[U(h), U(key), U(c)])
                    out[base + vv * VEC + e] = x

    return load_row
