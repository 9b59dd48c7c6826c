"""The FlashAttention-2 forward on tensor cores (mma.sync): fp16/bf16, or fp32 via 3xTF32.

    host.py                            the host side: tiles, checks, `run_heads`, `forward`
    tensor_core_kernels.py             version 1 kernels (fp16/bf16 and 3xTF32) and the
                                       fragment row operations the other versions reuse
    tensor_core_kernels_async.py       version 2 of fp16/bf16: cp.async and ldmatrix
    tensor_core_kernels_tf32_async.py  version 2 of 3xTF32 (and TF32)
    tensor_core_kernels_tf32_planes.py version 3 of 3xTF32 (and TF32): split planes
    variants.py                        the attention-variants forward (mask_mod, score_mod,
                                       block mask, sinks, GQA) on version 2's pieces

The gradients, decoding and hopper families build on this one (a layer above it).
"""
