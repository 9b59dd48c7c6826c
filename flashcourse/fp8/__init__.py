"""FP8 attention on the CPU: the numbers Hopper's FP8 tensor cores see, bit for bit, and the
error an FP8 forward makes (notebook 15, lab 15).

    codes.py      the e4m3 and e5m2 formats: round to nearest even with and without
                  saturation (PTX's cvt.rn.satfinite), uint8 codes, decoding, bit fields
    scaling.py    amax scales per tensor, per head or per block of tokens; quantize,
                  dequantize
    hadamard.py   the normalised Sylvester-Hadamard matrix and the rotation of Q and K
    attention.py  the FP8 forward simulated step by step (P lifted by 2^8 and rounded to
                  e4m3, as FlashAttention-3), the fp16 baseline, FlashAttention-3's outlier
                  inputs, RMSE against float64 and the error table of the schemes
    kv.py         FP8 KV caches: a cache or a pool of pages as e4m3 codes plus scales per
                  (B, Hkv) or per block of tokens, their bytes, the input checks of the
                  decode kernels, the append into an FP8 pool (the GPU kernel's model)

Everything here is numpy; the GPU kernels of issue 53 are checked against it.
"""

__all__ = ["attention", "codes", "hadamard", "kv", "scaling"]
