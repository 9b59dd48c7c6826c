"""The forward kernels on the CUDA cores (fp32), from the teaching version to a fast one.

    textbook.py   one thread per query row, square tiles (flash-attention-minimal style)
    flash.py      the fast fused forward: FlashAttention-2 order, register tiles, exp2,
                  causal skipping
    dense.py      the unfused baseline: S to global memory, softmax, then P V
    variants.py   the attention-variants forward: a learner's mask_mod/score_mod compiled
                  as device functions, a block mask driving the key-block loop
"""
