"""fp8: e4m3 codes <-> float32 on the device, by the GPU's conversion instruction or by integer
arithmetic, both bit for bit with the numpy model `flashcourse.fp8.codes`.

An FP8 KV cache (`flashcourse.fp8.kv`) stores one byte per value; the decode kernels read 16
bytes at a time and turn each byte into a float32 in registers. Two ways, one result:

    decode_word_hw(w)   (GPU, compute capability 8.9 or newer) the 4 codes of a 32-bit word
                        (byte i = code i) as 4 float32, with two
                            cvt.rn.f16x2.e4m3x2 d, a;
                        (PTX ISA, "cvt": a is .b16, two e4m3 codes; d is .b32, two fp16, the
                        upper byte of a to the upper half of d) and a widening of each half
                        to fp32. Every e4m3 value is exact in fp16 (fp16's smallest normal,
                        2^-14, is below e4m3's smallest subnormal, 2^-9; its largest, 65,504,
                        above 448), so nothing rounds.
    decode_word_sw(w)   the same 4 floats by integer arithmetic (`decode_e4m3` per byte):
                        what runs on the simulator and on GPUs before sm_89.
    decode_e4m3(c)      one code c (0 .. 255) -> float32: with E = (c >> 3) & 15 and
                        M = c & 7, |value| = (M + 8 [E > 0]) * 2^max(E, 1) * 2^-10, i.e.
                        (1 + M/8) 2^(E - 7) for normal codes and M 2^-9 for subnormal ones:
                        an integer of at most 15 x 2^15 < 2^24 converted to float32 (exact)
                        times a power of two (exact); NaN for 0x7F and 0xFF; the sign from
                        bit 7 (0x80 gives -0.0, as numpy's table).
    encode_e4m3(x)      float32 -> code (an int), rounded to nearest, ties to even, past 448
                        saturated to +-448: the rule of PTX's `cvt.rn.satfinite.e4m3x2.f32`
                        and of `codes.encode(saturate=True)`; NaN -> 0x7F. Used by the append
                        into an FP8 paged cache (a few values per new token; no GPU
                        instruction needed there).

`decode_ops(hw)` returns (decode_word, decode_one) for a kernel build: hw = True (a GPU of
compute capability 8.9+) uses the instruction for whole words; the simulator and older GPUs
get the arithmetic; `resolve_hw_cvt(hw_cvt)` makes the choice (None: the instruction where the
GPU has it; True on an older GPU is refused by name, as ptxas would refuse the kernel).
tests/test_fp8_kv.py checks every one of the 256 codes, and every tie of
the encoder, against `flashcourse.fp8.codes` on the simulator; benchmarks/gpu_fp8.py checks
the instruction against the arithmetic on a GPU (not yet to the end: its first try, on an
H100, stopped at a typing error in the check's own kernel, fixed since;
results/h100_partial_gpu_fp8_log.txt).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64, int32, uint32

from ...gpu import using_simulator

#: float32 NaN, 2^-10 and 2^-5 as kernel constants
NAN_F = np.float32(np.nan)
TWO_M10 = np.float32(2.0 ** -10)
TWO_M5 = np.float32(2.0 ** -5)
#: the e4m3 code of 448 (0.1111.110) and of NaN (0.1111.111)
MAX_CODE = 0x7E
NAN_CODE = 0x7F
#: compute capability from which `cvt.rn.f16x2.e4m3x2` exists (PTX ISA: sm_89)
HW_CVT_CC = (8, 9)


@cuda.jit(device=True)
def decode_e4m3(c):
    """float32 value of e4m3 code c (an integer 0 .. 255), by integer arithmetic."""
    c = int32(c)
    e = (c >> 3) & 15
    m = (c & 7) + (8 if e > 0 else 0)                 # the implicit 1 of normal codes
    mag = float32(m << max(e, 1)) * TWO_M10           # exact: < 2^24, times 2^-10
    if (c & 0x7F) == 0x7F:
        return NAN_F
    return -mag if (c & 0x80) != 0 else mag


@cuda.jit(device=True)
def decode_word_sw(w):
    """The 4 e4m3 codes of a 32-bit word (byte i = code i) as 4 float32, by arithmetic."""
    w = uint32(w)
    return (decode_e4m3(w & 0xFF), decode_e4m3((w >> 8) & 0xFF),
            decode_e4m3((w >> 16) & 0xFF), decode_e4m3((w >> 24) & 0xFF))


@cuda.jit(device=True)
def encode_e4m3(x):
    """The e4m3 code (int) of float32 x: nearest, ties to even, saturating at +-448, NaN ->
    0x7F; the sign of -0.0 kept (0x80)."""
    if x != x:
        return NAN_CODE
    sign = 0x80 if math.copysign(float32(1.0), x) < float32(0.0) else 0
    a = abs(float32(x))
    if a >= float32(448.0):                           # inf too: satfinite
        return sign | MAX_CODE
    e1 = -6                                           # floor(log2 a), at least -6
    bound = TWO_M5
    while a >= bound:
        e1 += 1
        bound = bound * float32(2.0)
    t = float64(a * (float32(1 << (8 - e1)) * TWO_M5))   # a / 2^(e1 - 3): exact, < 16
    r = math.floor(t + 0.5)                           # exact in float64
    if r - t == 0.5 and (int32(r) & 1) == 1:          # a tie: to the even neighbour
        r -= 1.0
    return sign | min((e1 + 6) * 8 + int32(r), MAX_CODE)


@cuda.jit(device=True)
def encode_word_sw(x0, x1, x2, x3):
    """`encode_word_hw`'s word by `encode_e4m3`: byte i = the e4m3 code of x_i (the
    simulator's twin of the conversion instruction; same rule, same bits)."""
    return uint32(encode_e4m3(x0) | (encode_e4m3(x1) << 8) | (encode_e4m3(x2) << 16)
                  | (encode_e4m3(x3) << 24))


_HW = None


def _make_hw():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    li, i16, lf = ir.IntType(32), ir.IntType(16), ir.FloatType()

    @intrinsic
    def decode_word_hw(typingctx, w):
        """4 x float32 from the 4 e4m3 codes of a uint32: two cvt.rn.f16x2.e4m3x2."""
        sig = types.UniTuple(types.float32, 4)(types.uint32)

        def codegen(context, builder, signature, args):
            word = args[0]
            halves = (builder.trunc(word, i16),
                      builder.trunc(builder.lshr(word, ir.Constant(li, 16)), i16))
            fnty = ir.FunctionType(li, [i16])
            vals = []
            for h in halves:
                r = builder.asm(fnty, "cvt.rn.f16x2.e4m3x2 $0, $1;", "=r,h", [h],
                                side_effect=False)
                f2 = builder.fpext(builder.bitcast(r, ir.VectorType(ir.HalfType(), 2)),
                                   ir.VectorType(lf, 2))
                vals += [builder.extract_element(f2, ir.Constant(li, i)) for i in range(2)]
            return context.make_tuple(builder, signature.return_type, vals)
        return sig, codegen

    return decode_word_hw


def hardware_decode() -> bool:
    """True on a GPU whose compute capability has `cvt.rn.f16x2.e4m3x2` (8.9 or newer)."""
    if using_simulator():
        return False
    return tuple(cuda.get_current_device().compute_capability) >= HW_CVT_CC


def resolve_hw_cvt(hw_cvt) -> bool:
    """hw_cvt as a kernel build takes it: None -> `hardware_decode()` (the instruction where
    this GPU has it); True on a GPU older than compute capability 8.9 -> ValueError naming
    hw_cvt (ptxas would refuse the kernel there with "Feature 'cvt with .e4m3x2/.e5m2x2'
    requires .target sm_89 or higher"); on the simulator True is refused by `decode_ops`."""
    if hw_cvt is None:
        return hardware_decode()
    hw_cvt = bool(hw_cvt)
    if hw_cvt and not using_simulator() and not hardware_decode():
        cc = tuple(cuda.get_current_device().compute_capability)
        raise ValueError(f"hw_cvt=True: the conversion instruction cvt.rn.f16x2.e4m3x2 needs "
                         f"a GPU of compute capability {HW_CVT_CC[0]}.{HW_CVT_CC[1]} or newer, "
                         f"this one has {cc[0]}.{cc[1]}; pass hw_cvt=None or False (the "
                         f"integer arithmetic, same results)")
    return hw_cvt


def decode_ops(hw: bool):
    """(decode_word, decode_one) for a kernel build: the instruction for whole words when hw
    (GPU, sm_89+), the integer arithmetic otherwise; decode_one is always `decode_e4m3`."""
    global _HW
    if hw:
        if using_simulator():
            raise ValueError("the e4m3 conversion instruction does not run on the simulator")
        if _HW is None:
            _HW = _make_hw()
        return _HW, decode_e4m3
    return decode_word_sw, decode_e4m3


_PACK = None


def encode_word_hw():
    """An intrinsic pack(x0, x1, x2, x3) -> uint32: four float32 rounded to e4m3 (nearest,
    ties to even, saturating at +-448: `encode_e4m3`'s rule) with two
        cvt.rn.satfinite.e4m3x2.f32 h, a, b;
    (PTX ISA, "cvt": h is .b16, a's code in its upper byte, b's in its lower), byte i of the
    word = code of x_i: the order in which FP8 wgmma reads an A fragment register (its
    element 0 in the low byte). GPU only (compute capability 8.9 or newer)."""
    global _PACK
    if _PACK is not None:
        return _PACK
    if using_simulator():
        raise ValueError("the e4m3 conversion instruction does not run on the simulator")
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    li, lf = ir.IntType(32), ir.FloatType()
    ptx = ("{\n.reg .b16 lo, hi;\n"
           "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
           "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
           "mov.b32 $0, {lo, hi};\n}")

    @intrinsic
    def pack(typingctx, x0, x1, x2, x3):
        sig = types.uint32(types.float32, types.float32, types.float32, types.float32)

        def codegen(context, builder, signature, args):
            vals = [context.cast(builder, a, t, types.float32)
                    for a, t in zip(args, signature.args)]
            return builder.asm(ir.FunctionType(li, [lf] * 4), ptx, "=r,f,f,f,f", vals,
                               side_effect=False)
        return sig, codegen

    _PACK = pack
    return pack
