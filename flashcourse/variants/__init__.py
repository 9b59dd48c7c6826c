"""Attention variants from Python functions: masks and score changes, FlexAttention style.

A variant is a small function, not a flag (PyTorch's FlexAttention, FlashAttention-4):

    mask_mod(b, h, q_idx, kv_idx) -> bool            may query q_idx see key kv_idx?
    score_mod(score, b, h, q_idx, kv_idx) -> score   change a scaled score

The same plain Python function runs in numpy (called on whole tiles of indices) and is
compiled by Numba for the CPU kernel (`mods`: the design, closures over arrays, and the
derivative `score_mod_grad` the backward needs). Modules:

    mods        evaluating and compiling the functions; and_masks, or_masks, check_grad
    library     the built-ins: causal (both alignments), sliding_window, document,
                prefix_lm, random_block_sparse, alibi, softcap
    block_mask  BlockMask (full / partial / empty tiles, FlexAttention's layout), its
                builder, cache, bytes and build time
    cost        what a block mask saves: visible pairs, tiles touched, K/V bytes,
                a time model (touched tiles / all tiles)
    inputs      argument checks: (B, H, T, d) arrays, GQA, sinks
    reference   dense float64 forward and backward: the ground truth
    tiled       tiled numpy forward and backward driven by a block mask
    cpu         the Numba CPU forward and backward: one compiled kernel for every mask

Conventions: q (B, Hq, Tq, d); k, v (B, Hkv, Tk, d), Hq a multiple of Hkv (GQA; K/V
are never copied per query head). sinks (Hq,): one logit per query head in every row's
softmax sum, no value. A row with nothing visible: o = 0, lse = -inf (lse = sink with a
sink), in every path.
"""

__all__ = ["block_mask", "cost", "cpu", "inputs", "library", "mods", "reference", "tiled"]
