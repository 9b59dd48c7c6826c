"""vector_loads: 16-byte loads of K/V rows for the decode split kernels (GPU only).

`vector_loaders()` returns (load_f16x8, load_f32x4): Numba intrinsics that read 16 bytes
at a flat element index of a C-contiguous array as one LLVM `<4 x i32>` (`<4 x float>`)
load, aligned 16 (one `ld.global.v4` instruction), and return the values as a tuple of
float32 (the fp16 halves converted). Numba has no public API for a vector load; on the
simulator, and on a GPU when d is not a multiple of the vector or the arrays are not
16-byte aligned, the kernels use plain element loads instead.
"""

from __future__ import annotations

def _vector_loaders():
    """(load_f16x8, load_f32x4): device intrinsics that read 16 bytes at a flat element
    index of a C-contiguous array and return the values as a tuple of float32."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def make(elem_bits, n):
        @intrinsic
        def load(typingctx, arr, idx):
            sig = types.UniTuple(types.float32, n)(arr, idx)

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
                else:                    # 4 x float
                    vec = builder.load(builder.bitcast(ptr, ir.VectorType(ir.FloatType(), 4)
                                                       .as_pointer()), align=16)
                    vals = [builder.extract_element(vec, ir.Constant(i32, i))
                            for i in range(4)]
                return context.make_tuple(builder, sig.return_type, vals)

            return sig, codegen
        return load

    return make(16, 8), make(32, 4)


_LOADERS = None


def vector_loaders():
    global _LOADERS
    if _LOADERS is None:
        _LOADERS = _vector_loaders()
    return _LOADERS
