"""FlashAttention-2's changes, counted (flashcourse.fa2_work), and the causal alignments."""

import numpy as np
import pytest

from flashcourse import fa2_work as w
from flashcourse import geometry, reference
from flashcourse.gpus import GPUS


def test_nonmatmul_counts_by_hand():
    # Br = 2, Bc = 3, d = 5 counted on paper from each Algorithm 1
    fa1 = w.nonmatmul_per_tile(2, 3, 5, "fa1")
    fa2 = w.nonmatmul_per_tile(2, 3, 5, "fa2")
    both = 4 * 2 * 3
    assert fa1.flops == both + 2 + 5 * 2 + 2 + 4 * 2 * 5
    assert fa1.sfu_ops == 2 * 3 + 3 * 2 and fa1.end_flops == fa1.end_sfu_ops == 0
    assert fa2.flops == both + 2 + 3 * 2 + 2 * 5
    assert (fa2.sfu_ops, fa2.end_flops, fa2.end_sfu_ops) == (2 * 3 + 2, 2 * 5 + 2, 4)


@pytest.mark.parametrize("br, bc, d", [(64, 64, 64), (128, 64, 128), (16, 24, 13)])
def test_fa2_does_less_nonmatmul_work_per_tile(br, bc, d):
    fa1 = w.nonmatmul_per_tile(br, bc, d, "fa1")
    fa2 = w.nonmatmul_per_tile(br, bc, d, "fa2")
    assert fa2.flops < fa1.flops and fa2.sfu_ops < fa1.sfu_ops
    # FA1 renormalises (Br, d) every tile: the saving grows with d, by 3 Br d per tile
    assert fa1.flops - fa2.flops == 3 * br * d + 3 * br


def test_rates_and_time_shares():
    a100 = GPUS["A100 80GB"]
    assert a100.matmul_to_nonmatmul == pytest.approx(16.0)          # 312 / 19.5
    t = w.tile_time_s(64, 64, 64, "fa2", "A100 80GB")
    assert t["matmul"] == pytest.approx(4 * 64 ** 3 / 312e12)
    # FA3 paper: exp can take 50% of the matmul time, H100 SXM, d = 128
    assert w.exp_share_of_matmul(128, "H100 SXM") == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="version"):
        w.tile_time_s(64, 64, 64, "fa3")


def test_grid_and_sm_fill():
    assert w.grid_blocks(2, 3, 100, 32, "fa1") == 6
    assert w.grid_blocks(2, 3, 100, 32, "fa2") == 6 * 4                # ragged last block
    f = w.sm_fill(16, 132)
    assert (f.waves, f.busy_first_wave) == (1, pytest.approx(16 / 132))
    g = w.sm_fill(265, 132)                                            # 2 full waves + 1
    assert g.waves == 3 and g.busy_average == pytest.approx(265 / 396)
    with pytest.raises(ValueError, match="blocks"):
        w.sm_fill(0)


def test_warp_exchange_and_recompute():
    assert w.warp_exchange_bytes(64, 64, 4, "split-Q") == 0
    assert w.warp_exchange_bytes(64, 64, 4, "split-K") == 2 * 4 * (64 * 64 + 128) * 4
    with pytest.raises(ValueError, match="scheme"):
        w.warp_exchange_bytes(64, 64, 4, "split-V")
    r = w.recompute_vs_read_s(4096, 4096, 64, "H200")
    assert r["read P"] == pytest.approx(4096 ** 2 * 2 / 4.8e12)
    assert r["exp"] == pytest.approx(4096 ** 2 / 3.9e12)
    # with the exponentials counted, recomputing costs about what reading costs
    recompute = r["S = Q K^T"] + r["S - lse"] + r["exp"]
    assert 0.5 < recompute / r["read P"] < 1.5
    causal = w.recompute_vs_read_s(64, 64, 8, "H200", causal=True)
    assert causal["exp"] == pytest.approx(64 * 65 / 2 / 3.9e12)


@pytest.mark.parametrize("tq, tk", [(3, 7), (7, 3), (5, 5), (1, 9)])
def test_causal_alignments(tq, tk):
    br = geometry.causal_mask(tq, tk)
    tl = geometry.causal_mask(tq, tk, align="top-left")
    i, j = np.indices((tq, tk))
    assert np.array_equal(br, j <= i + tk - tq)
    assert np.array_equal(tl, j <= i)
    assert np.array_equal(br, tl) == (tq == tk)
    rng = np.random.default_rng(tq * 10 + tk)
    q, k, v = (rng.standard_normal((t, 6)) for t in (tq, tk, tk))
    o_br, lse_br = reference.attention_with_mask(q, k, v, br)
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    np.testing.assert_allclose(o_br, o_ref, rtol=0, atol=1e-15)   # same code path: exact
    np.testing.assert_array_equal(lse_br, lse_ref)
    o_tl, _ = reference.attention_with_mask(q, k, v, tl)
    # top-left: row i is ordinary softmax attention over keys 0..i
    for row in range(tq):
        n = min(row + 1, tk)
        s = q[row] @ k[:n].T / np.sqrt(6)
        p = np.exp(s - s.max())
        np.testing.assert_allclose(o_tl[row], p @ v[:n] / p.sum(), rtol=1e-12, atol=1e-14)


def test_mask_errors():
    with pytest.raises(ValueError, match="align"):
        geometry.causal_mask(3, 4, align="diagonal")
    q = np.zeros((3, 2))
    with pytest.raises(ValueError, match="mask must be a boolean"):
        reference.attention_with_mask(q, q, q, np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match="mask must be a boolean"):
        reference.attention_with_mask(q, q, q, np.ones((3, 3)))


def test_round_to_formats():
    from flashcourse.formats import UNIT_ROUNDOFF, round_to
    rng = np.random.default_rng(3)
    x = rng.standard_normal(10_000).astype(np.float32) * 100
    for fmt in ("fp16", "bf16", "fp32"):
        r = round_to(x, fmt)
        rel = np.abs(r - x) / np.abs(x)
        assert rel.max() <= UNIT_ROUNDOFF[fmt] * (1 + 1e-6), fmt
        assert np.array_equal(round_to(r, fmt), r)                   # idempotent
    b = round_to(x, "bf16").view(np.uint32)
    assert not (b & 0xFFFF).any()                                    # top 16 bits only
    assert np.isinf(round_to(np.float32(np.inf), "bf16"))
    with pytest.raises(ValueError, match="fmt must be one of"):
        round_to(x, "fp8")


@pytest.mark.parametrize("order", ["fa2", "fa1"])
def test_p_rounded_before_pv_is_the_largest_error(order):
    """float32 inputs: rounding P to fp16 / bf16 costs ~u of that format (tolerances
    below are 4 u, against the float64 reference); None keeps float32 accuracy."""
    from flashcourse import tiled
    from flashcourse.formats import UNIT_ROUNDOFF
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((t, 19)).astype(np.float32) for t in (45, 71, 71))
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    rel = lambda o: np.linalg.norm(o - o_ref) / np.linalg.norm(o_ref)
    base, _ = tiled.forward(q, k, v, block_q=16, block_k=24, causal=True, loop_order=order)
    assert rel(base) < 1e-6
    for fmt in ("fp16", "bf16"):
        o, lse = tiled.forward(q, k, v, block_q=16, block_k=24, causal=True,
                               loop_order=order, p_format=fmt)
        err = rel(o)
        assert UNIT_ROUNDOFF[fmt] / 50 < err < 4 * UNIT_ROUNDOFF[fmt], (fmt, err)
        np.testing.assert_allclose(lse, lse_ref, rtol=1e-6)          # l from unrounded P
    with pytest.raises(ValueError, match="p_format"):
        tiled.forward(q, k, v, p_format="int8")
