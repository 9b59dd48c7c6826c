"""flashcourse.cuda.tensor_core.variants on the simulator (or a GPU): the tensor-core
variants forward against the float64 reference on the same 16-bit inputs, tiny ragged
shapes (one or two query blocks, d 16 or 32, Tq != Tk, GQA 2:1).

Tolerance, element by element (`assert_within_rounding`): the kernel rounds P to 16 bits
before P V and o to 16 bits at the end; everything else is fp32. With u the unit roundoff
of the type (fp16 2^-11, bf16 2^-8) an output element can be off by u (P |V|)_ij + u |o_ij|:
the test allows twice that, plus 1e-5 (fp32 and ex2.approx). One hidden pair counted as
visible (or the reverse) moves its row by about p |v|, far outside. lse is fp32 only:
|lse - lse_ref| <= 1e-5 (1 + |lse_ref|) per row.
"""

import dataclasses

import numpy as np
import pytest

from flashcourse import cuda as fc_cuda
from flashcourse.cuda.ptx.mma import round_bf16, round_fp16
from flashcourse.cuda.tensor_core import variants as tcv
from flashcourse.variants import library as lib, reference as ref
from flashcourse.variants.block_mask import create_block_mask
from helpers import assert_kernels_cached_by_contents

UNIT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
ROUND = {"fp16": round_fp16, "bf16": round_bf16}


def assert_within_rounding(o, lse, q, k, v, precision, **kw):
    """o, lse against `variants.reference` on the rounded inputs (module docstring)."""
    r = ROUND[precision]
    q64, k64, v64 = (r(a).astype(np.float64) for a in (q, k, v))
    o_ref, lse_ref = ref.reference(q64, k64, v64, **kw)
    pv_abs, _ = ref.reference(q64, k64, np.abs(v64), **kw)        # (P |V|), same shape
    empty = np.isneginf(lse_ref)
    assert np.array_equal(np.isneginf(lse), empty), "rows with nothing visible: lse = -inf"
    assert np.all(o[empty] == 0), "rows with nothing visible: o = 0"
    u = UNIT[precision]
    bound = 2 * u * (pv_abs + np.abs(o_ref)) + 1e-5
    err = np.abs(o.astype(np.float64) - o_ref)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), (f"o error {err[worst]:.3g} > {bound[worst]:.3g} at "
                                  f"{tuple(int(i) for i in worst)}")
    fin = ~empty
    lerr = np.abs(lse[fin].astype(np.float64) - lse_ref[fin]) / (1 + np.abs(lse_ref[fin]))
    assert lerr.size == 0 or lerr.max() <= 1e-5, f"lse error {lerr.max():.3g}"
    return o_ref


def inputs(rng, tq, tk, d, hq=2, hkv=1, batch=1):
    q = rng.standard_normal((batch, hq, tq, d)).astype(np.float32)
    k = rng.standard_normal((batch, hkv, tk, d)).astype(np.float32)
    v = rng.standard_normal((batch, hkv, tk, d)).astype(np.float32)
    return q, k, v


#: name -> (precision, Tq, Tk, d, (Br, Bc), mask_mod, score_mod, sinks, m_tiles)
CASES = {
    "causal-gqa": ("fp16", 21, 37, 16, (16, 16), lib.causal(21, 37), None, None, None),
    "sliding-window": ("bf16", 29, 24, 32, (16, 16), lib.sliding_window(5, 29, 24), None,
                       None, None),
    "document": ("fp16", 20, 35, 16, (16, 16), lib.document([0, 6, 13, 20], [0, 10, 18, 35]),
                 None, None, None),
    "prefix-lm-two-m-tiles": ("bf16", 30, 37, 16, (32, 16), lib.prefix_lm(9, 30, 37), None,
                              None, 2),
    "alibi-causal": ("fp16", 19, 21, 16, (16, 16), lib.causal(19, 21),
                     lib.alibi(lib.alibi_slopes(2)), None, None),
    "softcap-sinks-empty-rows": ("fp16", 33, 14, 16, (16, 16), lib.causal(33, 14),
                                 lib.softcap(1.5), np.array([0.4, -1.0]), None),
    "block-sparse": ("bf16", 32, 40, 16, (16, 16),
                     lib.random_block_sparse(32, 40, 16, 16, density=0.5, seed=4), None,
                     None, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tensor_core_variants_forward_matches_the_reference(case):
    precision, tq, tk, d, (br, bc), mask_mod, score_mod, sinks, m_tiles = CASES[case]
    q, k, v = inputs(np.random.default_rng(7), tq, tk, d)
    bm = create_block_mask(mask_mod, None, None, tq, tk, br, bc)
    o, lse = tcv.forward(q, k, v, block_mask=bm, score_mod=score_mod, sinks=sinks,
                         precision=precision, m_tiles=m_tiles)
    assert o.dtype == np.float32 and lse.dtype == np.float32 and lse.shape == (1, 2, tq)
    assert_within_rounding(o, lse, q, k, v, precision, mask_mod=mask_mod,
                           score_mod=score_mod, sinks=sinks)


@pytest.mark.parametrize("scale", [0.7, -0.45])
@pytest.mark.parametrize("score", ["none", "alibi"])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_scales_full_blocks_and_the_ragged_edge(scale, score, mask):
    """A given scale, negative too. Without a score_mod the kernel folds the scale into
    the exponent (the row max on raw scores: a negative scale flips Q's signs first) and
    skips the per-score pass on full blocks away from the key edge; with one it scales
    each score before score_mod. Tk = 37 leaves a ragged last key block, Tq = 34 a ragged
    last query block; no mask: every block is full."""
    tq, tk, d = 34, 37, 16
    q, k, v = inputs(np.random.default_rng(11), tq, tk, d)
    mm = None if mask == "none" else lib.causal(tq, tk)
    sm = None if score == "none" else lib.alibi(lib.alibi_slopes(2))
    bm = create_block_mask(mm, None, None, tq, tk, 16, 16) if mm is not None else None
    o, lse = tcv.forward(q, k, v, block_mask=bm, score_mod=sm, scale=scale,
                         block_q=None if bm else 16, block_k=None if bm else 16)
    o_ref = assert_within_rounding(o, lse, q, k, v, "fp16", mask_mod=mm, score_mod=sm,
                                   scale=scale)
    # the sign matters: the other sign's answer is far away
    o_neg, _ = ref.reference(*(round_fp16(a) for a in (q, k, v)), mask_mod=mm,
                             score_mod=sm, scale=-scale)
    assert np.abs(o_ref - o_neg).max() > 0.1


@pytest.mark.parametrize("case", ["causal-gqa", "document", "softcap-sinks-empty-rows",
                                  "block-sparse"])
def test_key_blocks_visited_in_steps(case, monkeypatch):
    """At large head dims the kernel visits each of the block mask's key blocks in steps of
    64 keys (`step_k`). Here the rule is moved down to d = 16 and steps of 16 keys, so a
    block mask of 16 x 32 tiles is visited in two steps a block, on the simulator: the
    steps of a partial block call mask_mod, those past Tk are masked, and the answer is
    the reference's."""
    monkeypatch.setattr(tcv, "LARGE_D", 8)
    monkeypatch.setattr(tcv, "STEP_K_LARGE_D", 16)
    precision, tq, tk, d, _, mask_mod, score_mod, sinks, _ = CASES[case]
    assert tcv.step_k(d, 32) == 16
    cfg = tcv.config(precision, d, 16, 32)
    assert (cfg.block_k, cfg.mask_block_k) == (16, 32)
    q, k, v = inputs(np.random.default_rng(8), tq, tk, d)
    bm = create_block_mask(mask_mod, None, None, tq, tk, 16, 32)
    o, lse = tcv.forward(q, k, v, block_mask=bm, score_mod=score_mod, sinks=sinks,
                         precision=precision)
    assert_within_rounding(o, lse, q, k, v, precision, mask_mod=mask_mod,
                           score_mod=score_mod, sinks=sinks)


def test_the_block_sparse_case_has_a_query_block_that_sees_nothing():
    """So that the test above checks o = 0, lse = -inf from a block with no visit."""
    bm = create_block_mask(CASES["block-sparse"][5], None, None, 32, 40, 16, 16)
    assert (bm.kv_num_blocks + bm.full_kv_num_blocks == 0).any()
    assert bm.tiles()["partial"] == 0 and bm.tiles()["full"] > 0


def test_batch_and_per_head_masks_with_float16_input():
    """B = 2, a mask that differs per head (H' = 2), float16 in -> float16 out, no mask
    tiles shared across heads: the thread block reads its own head's lists."""
    tq, tk, d = 18, 23, 16
    q, k, v = (a.astype(np.float16) for a in inputs(np.random.default_rng(2), tq, tk, d,
                                                     batch=2))

    def per_head(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (h == 1)
    bm = create_block_mask(per_head, None, 2, tq, tk, 16, 16)
    o, lse = tcv.forward(q, k, v, block_mask=bm)
    assert o.dtype == np.float16
    assert_within_rounding(o, lse, q, k, v, "fp16", mask_mod=per_head)


def test_full_blocks_never_call_mask_mod():
    """The block mask says which tiles are full; the kernel must believe it. Here the
    mask_mod handed to the kernel hides every pair of a full tile (it only agrees with
    causal on the diagonal's partial tiles): calling it on a full tile would hide keys
    that the reference sees."""
    tq = tk = 40
    q, k, v = inputs(np.random.default_rng(4), tq, tk, 16)
    causal = lib.causal(tq, tk)
    bm = create_block_mask(causal, None, None, tq, tk, 16, 16)
    assert bm.tiles()["full"] > 0 and bm.tiles()["partial"] > 0

    def diagonal_only(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx // 16 == q_idx // 16)
    lying = dataclasses.replace(bm, mask_mod=diagonal_only)
    o, lse = tcv.forward(q, k, v, block_mask=lying)
    assert_within_rounding(o, lse, q, k, v, "fp16", mask_mod=causal)
    # the same mask evaluated on every tile (an all-partial block mask) gives another answer
    o_diag, _ = ref.reference(*(round_fp16(a) for a in (q, k, v)), mask_mod=diagonal_only)
    assert np.abs(o - o_diag).max() > 0.1


def test_dispatcher_selects_the_kernel_by_name():
    tq, tk = 17, 20
    q, k, v = inputs(np.random.default_rng(1), tq, tk, 16)
    bm = create_block_mask(lib.causal(tq, tk), None, None, tq, tk, 16, 16)
    o_tc, lse_tc = fc_cuda.variants_forward(q, k, v, block_mask=bm, kernel="tensor_core")
    o_cc, lse_cc = fc_cuda.variants_forward(q, k, v, block_mask=bm)       # cuda_core
    o_ref, lse_ref = ref.reference(q, k, v, mask_mod=lib.causal(tq, tk))
    assert np.abs(o_cc - o_ref).max() < 1e-5              # fp32 on the CUDA cores
    assert 1e-5 < np.abs(o_tc - o_ref).max() < 2e-2       # fp16 inputs on the tensor cores
    with pytest.raises(ValueError, match="kernel"):
        fc_cuda.variants_forward(q, k, v, kernel="wgmma")


def test_kernels_are_cached_by_contents():
    """Keyed (config, mask fingerprint, score fingerprint)."""
    assert_kernels_cached_by_contents(tcv.forward, tcv._KERNELS, 1, d=16, block=16)


@pytest.mark.parametrize("kwargs,match", [
    (dict(block_q=24, block_k=16), "block_q"),
    (dict(block_q=16, block_k=24), "block_k"),
    (dict(block_q=16 * 9, block_k=16), "block_q"),
    (dict(block_q=16, block_k=16, precision="tf32"), "precision"),
    (dict(block_q=16, block_k=16, m_tiles=3), "m_tiles"),
])
def test_bad_tiles_and_precision_are_named(kwargs, match):
    q = np.zeros((1, 1, 4, 16), np.float32)
    with pytest.raises(ValueError, match=match):
        tcv.forward(q, q, q, **kwargs)


def test_refuses_a_large_head_dim_and_fp16_overflow():
    q = np.zeros((1, 1, 2, 144), np.float32)
    with pytest.raises(ValueError, match="head dim d must be at most 128"):
        tcv.forward(q, q, q, block_q=16, block_k=16)
    big = np.full((1, 1, 2, 16), 7e4, np.float32)
    with pytest.raises(ValueError, match="65504"):
        tcv.forward(big, big, big, block_q=16, block_k=16)


@pytest.mark.parametrize("precision,d", [("fp16", 32), ("fp16", 24), ("bf16", 16)])
def test_device_arrays_give_the_numpy_call_s_results_on_the_device(rng, precision, d):
    """Device arrays in (float16, or bf16 bit patterns in uint16): o in q's dtype and lse
    stay on the device, equal to the numpy call on the same 16-bit inputs (d = 32 runs on
    views of the arrays, d = 24 pads on the device); causal GQA 2:1 with sinks."""
    from numba import cuda
    tq, tk = 21, 30
    q, k, v = inputs(rng, tq, tk, d, hq=4, hkv=2, batch=2)
    q, k, v = (ROUND[precision](a) for a in (q, k, v))          # exact in 16 bits
    sinks = np.array([0.5, -1.0, 2.0, 0.0])
    bm = create_block_mask(lib.causal(tq, tk), None, None, tq, tk, 16, 16)
    kw = dict(block_mask=bm, score_mod=lib.softcap(4.0), sinks=sinks, precision=precision)
    o_np, lse_np = tcv.forward(q, k, v, **kw)
    if precision == "fp16":
        dev = [cuda.to_device(a.astype(np.float16)) for a in (q, k, v)]
    else:
        dev = [cuda.to_device((a.view(np.uint32) >> 16).astype(np.uint16)) for a in (q, k, v)]
    o_d, lse_d = fc_cuda.variants_forward(*dev, kernel="tensor_core", **kw)
    assert not isinstance(o_d, np.ndarray) and not isinstance(lse_d, np.ndarray)
    assert o_d.dtype == dev[0].dtype and tuple(o_d.shape) == q.shape
    o_h = o_d.copy_to_host()
    if precision == "bf16":
        o_h = (o_h.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(o_h.astype(np.float32), o_np.astype(np.float32))
    np.testing.assert_array_equal(lse_d.copy_to_host(), lse_np)


def test_device_arrays_must_all_be_device_arrays_of_one_16_bit_dtype(rng):
    from numba import cuda
    q, k, v = inputs(rng, 16, 16, 16)
    dq, dk, dv = (cuda.to_device(a.astype(np.float16)) for a in (q, k, v))
    with pytest.raises(TypeError, match="k must be a device array like the others"):
        tcv.forward(dq, k, dv)
    with pytest.raises(TypeError, match="v must have q's dtype float16"):
        tcv.forward(dq, dk, cuda.to_device(v.astype(np.float16).view(np.uint16)))
    with pytest.raises(TypeError, match="q on the device must have dtype float16 or uint16"):
        tcv.forward(cuda.to_device(q), dk, dv)
    with pytest.raises(ValueError, match="precision='fp16'"):
        tcv.forward(dq, dk, dv, precision="bf16")
    with pytest.raises(ValueError, match="v must have k's shape"):
        tcv.forward(dq, dk, cuda.to_device(v[:, :, :8].astype(np.float16)))
