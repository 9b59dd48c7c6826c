"""flashcourse.cuda.variants_backward (tensor cores) on the simulator (or a GPU): every
built-in against the float64 reference gradients, on tiny ragged shapes (Tq != Tk,
lengths that are not multiples of the tiles, d = 40 padded to 48, GQA).

How the error is judged (`assert_grads_within_rounding`). The kernel works on 16-bit q,
k, v, dO, accumulates in fp32, and rounds P and dS to 16 bits before the products that
take them (FlashAttention-2's practice; FlexAttention's Triton backward does the same,
`ppT.to(MATMUL_PRECISION)` and `dsT.to(MATMUL_PRECISION)` in PyTorch's
torch/_inductor/kernel/flex_attention.py). Its error is measured against
`variants.reference_backward` in float64 on the SAME rounded inputs, as
max |g - g_ref| / max |g_ref| per gradient (dq, dk, dv). The yardstick is the same
computation done in numpy float32 (`variants.reference.float32_backward`: the kernel's
order of operations, fp32 products of the rounded values, P and dS rounded to 16 bits
where the kernel rounds them, D from the same o): the kernel must stay within twice its
error, plus 1e-5. dsinks (fp32 throughout) is held to the same rule. o and lse come from
the float64 forward on the rounded inputs, o rounded to 16 bits as the tensor-core
forward returns it (the simulated forward would add a second or two per case and change
nothing here).
"""

import numpy as np
import pytest

from flashcourse import cuda as fc_cuda
from flashcourse.cuda.ptx.mma import round_bf16, round_fp16
from flashcourse.variants import library as lib, mods, reference as ref
from flashcourse.variants.block_mask import create_block_mask

ROUND = {"fp16": round_fp16, "bf16": round_bf16}
RATIOS = []   # (gradient, error, bar) of every check, for a reader who wants them


def inputs(rng, tq, tk, d, hq=2, hkv=1, batch=1, precision="fp16", spread=1.0):
    """Rounded float32 q, k, v, dO (B, H, T, d): the 16-bit values the kernel sees."""
    r = ROUND[precision]
    q = r(rng.standard_normal((batch, hq, tq, d)) * spread).astype(np.float32)
    k = r(rng.standard_normal((batch, hkv, tk, d)) * spread).astype(np.float32)
    v = r(rng.standard_normal((batch, hkv, tk, d))).astype(np.float32)
    do = r(rng.standard_normal((batch, hq, tq, d))).astype(np.float32)
    return q, k, v, do


def forward_of(q, k, v, precision, **kw):
    """(o rounded to 16 bits, lse float32) of the float64 forward (module docstring)."""
    o, lse = ref.reference(*(a.astype(np.float64) for a in (q, k, v)), **kw)
    return ROUND[precision](o).astype(np.float32), lse.astype(np.float32)


def rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def assert_grads_within_rounding(got, q, k, v, o, lse, do, precision, **kw):
    """got = (dq, dk, dv, dsinks) against float64, within 2x float32_grads' error + 1e-5."""
    want = ref.reference_backward(*(a.astype(np.float64) for a in (q, k, v, do)), **kw)
    yard = ref.float32_backward(q, k, v, o, lse, do, rounding=ROUND[precision], **kw)
    for name, g, w, y in zip(("dq", "dk", "dv", "dsinks"), got, want, yard):
        if w is None:
            assert g is None, f"{name}: None expected without sinks"
            continue
        assert np.isfinite(g).all(), f"{name} is not finite"
        err, bar = rel(g, w), 2 * rel(y, w) + 1e-5
        RATIOS.append((name, err, bar))
        assert err <= bar, f"{name}: error {err:.3g} > 2 x float32's {bar - 1e-5:.3g} + 1e-5"
    return want


def run(precision, tq, tk, d, tiles, mask_mod=None, score_mod=None, sinks=None, hq=2,
        hkv=1, batch=1, seed=7, spread=1.0, **options):
    q, k, v, do = inputs(np.random.default_rng(seed), tq, tk, d, hq, hkv, batch, precision,
                         spread)
    kw = dict(mask_mod=mask_mod, score_mod=score_mod, sinks=sinks)
    o, lse = forward_of(q, k, v, precision, **kw)
    bm = None if mask_mod is None else create_block_mask(mask_mod, None, None, tq, tk,
                                                         *tiles)
    got = fc_cuda.variants_backward(q, k, v, o, lse, do, block_mask=bm, score_mod=score_mod,
                                    sinks=sinks, precision=precision, **options)
    assert [g.dtype for g in got[:3]] == [np.float32] * 3
    return assert_grads_within_rounding(got, q, k, v, o, lse, do, precision, **kw), got


#: name -> (precision, Tq, Tk, d, (Br, Bc) of the block mask, mask_mod, score_mod, sinks,
#: Hq, Hkv)
CASES = {
    "causal-bottom-right-gqa": ("fp16", 21, 37, 16, (16, 16), lib.causal(21, 37), None,
                                None, 2, 1),
    "causal-top-left": ("bf16", 30, 19, 16, (16, 16), lib.causal(align="top-left"), None,
                        None, 2, 2),
    "window-left": ("fp16", 29, 24, 16, (16, 16), lib.sliding_window(5, 29, 24), None,
                    None, 2, 2),
    "window-symmetric-d40": ("fp16", 19, 33, 40, (16, 16),
                             lib.sliding_window(4, 19, 33, symmetric=True), None, None,
                             2, 1),
    "document-causal": ("bf16", 20, 35, 16, (16, 16),
                        mods.and_masks(lib.document([0, 6, 13, 20], [0, 10, 18, 35]),
                                       lib.causal(20, 35)), None, None, 2, 2),
    "prefix-lm-alibi": ("fp16", 26, 37, 16, (16, 16), lib.prefix_lm(9, 26, 37),
                        lib.alibi(lib.alibi_slopes(4)), None, 4, 2),
    "softcap-sinks-empty-rows": ("fp16", 33, 14, 16, (16, 16), lib.causal(33, 14),
                                 lib.softcap(1.5), np.array([0.4, -1.0]), 2, 1),
    "block-sparse-sub-tiles": ("bf16", 40, 45, 16, (32, 32),
                               lib.random_block_sparse(40, 45, 32, 32, density=0.6, seed=4),
                               None, None, 2, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_variants_backward_matches_the_reference(case):
    precision, tq, tk, d, tiles, mask_mod, score_mod, sinks, hq, hkv = CASES[case]
    run(precision, tq, tk, d, tiles, mask_mod, score_mod, sinks, hq, hkv)


def test_the_cases_reach_what_they_name():
    """The empty-rows case has rows that see nothing (their gradients must be 0, no NaN);
    the sub-tiles case has a block mask of 32 x 32 tiles, larger than the simulator's
    kernel tiles (16 keys x 16 rows), with empty, full and skipped tiles."""
    assert (~lib.causal(33, 14)(0, 0, np.arange(33)[:, None], np.arange(14)[None])).all(
        axis=1).any()
    bm = create_block_mask(CASES["block-sparse-sub-tiles"][5], None, None, 40, 45, 32, 32)
    t = bm.tiles()
    assert t["empty"] > 0 and t["full"] > 0


def test_fully_masked_rows_get_zero_gradients(gpu_prepass):
    """Rows 0..18 of Tq = 33 against Tk = 14 (bottom-right causal) see no key: lse = -inf
    (sink-free), dq = 0 exactly there, nothing NaN anywhere. With the D pre-pass a GPU
    runs (one warp per row: lse = -inf and padded rows get L = +inf there too)."""
    tq, tk = 33, 14
    want, (dq, dk, dv, _) = run("fp16", tq, tk, 16, (16, 16), lib.causal(tq, tk))
    assert np.all(dq[:, :, : tq - tk] == 0) and np.all(want[0][:, :, : tq - tk] == 0)
    assert all(np.isfinite(g).all() for g in (dq, dk, dv))


def test_extreme_values_large_scores():
    """q and k 6x larger: scores of +-100s, P one-hot in most rows; lse near 200 (fp32
    lse log2(e) is still exact to 2^-16 relative). Still within 2x the float32 error."""
    run("fp16", 24, 29, 16, (16, 16), lib.sliding_window(9, 24, 29), seed=3, spread=6.0)


def test_full_tiles_never_call_mask_mod():
    """The backward must believe the block mask's full tiles: the mask_mod handed to it
    hides every pair off the diagonal tiles, which the block mask lists as full."""
    import dataclasses
    tq = tk = 40
    causal = lib.causal(tq, tk)
    q, k, v, do = inputs(np.random.default_rng(4), tq, tk, 16)
    o, lse = forward_of(q, k, v, "fp16", mask_mod=causal)
    bm = create_block_mask(causal, None, None, tq, tk, 16, 16)
    assert bm.tiles()["full"] > 0 and bm.tiles()["partial"] > 0

    def diagonal_only(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx // 16 == q_idx // 16)
    lying = dataclasses.replace(bm, mask_mod=diagonal_only)
    got = fc_cuda.variants_backward(q, k, v, o, lse, do, block_mask=lying)
    assert_grads_within_rounding(got, q, k, v, o, lse, do, "fp16", mask_mod=causal)


def test_a_user_score_mod_with_its_derivative():
    """A score_mod of the user's own with the derivative they give (checked against finite
    differences first), per-head (h) and per-position terms, GQA 4:1."""
    def square_bias(score, b, h, q_idx, kv_idx):
        return score - 0.05 * score * score + 0.01 * (h + 1) * (q_idx - kv_idx)

    def square_bias_grad(score, b, h, q_idx, kv_idx):
        return 1.0 - 0.1 * score
    assert mods.check_grad(square_bias, square_bias_grad) < 1e-7
    q, k, v, do = inputs(np.random.default_rng(5), 18, 23, 16, hq=4, hkv=1)
    kw = dict(mask_mod=lib.causal(18, 23), score_mod=square_bias)
    o, lse = forward_of(q, k, v, "fp16", **kw)
    bm = create_block_mask(kw["mask_mod"], None, None, 18, 23, 16, 16)
    got = fc_cuda.variants_backward(q, k, v, o, lse, do, block_mask=bm,
                                    score_mod=square_bias, score_mod_grad=square_bias_grad)
    assert_grads_within_rounding(got, q, k, v, o, lse, do, "fp16", **kw,
                                 score_mod_grad=square_bias_grad)
    with pytest.raises(ValueError, match="score_mod_grad is needed"):
        fc_cuda.variants_backward(q, k, v, o, lse, do, block_mask=bm, score_mod=square_bias)
