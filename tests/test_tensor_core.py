"""Tensor-core building blocks and the tensor-core FlashAttention kernel.

Runs without a GPU: the fragment maps and the numpy models of mma, the rounding and
the 3xTF32 split are checked against plain numpy; the kernel runs on Numba's CUDA
simulator on tiny shapes (each mma becomes a fragment exchange through shared memory).
On a GPU, the intrinsics themselves are checked by benchmarks/gpu_tensor_core.py --check
(and by the last test here, which is skipped without one).
"""

import numpy as np
import pytest
from numba import cuda

from flashcourse.cuda.ptx import mma
from flashcourse.cuda.tensor_core import host as tc
from flashcourse.reference import attention

from flashcourse.timing import rel_err


# ---------------------------------------------------------------- fragment maps
@pytest.mark.parametrize("name", sorted(mma.FRAGMENTS))
def test_fragment_map_is_a_bijection(name):
    """Every element of the tile is held by exactly one (lane, i)."""
    _, shape, n = mma.FRAGMENTS[name]
    idx = mma.index_table(name).reshape(-1, 2)                    # (32 n, 2)
    assert len(idx) == shape[0] * shape[1]
    assert len({tuple(x) for x in idx}) == len(idx)
    assert idx[:, 0].min() == 0 and idx[:, 0].max() == shape[0] - 1
    assert idx[:, 1].min() == 0 and idx[:, 1].max() == shape[1] - 1
    own = mma.owner_table(name)
    assert (own >= 0).all()


def test_fragment_maps_match_the_ptx_tables():
    """Spot values from the PTX ISA figures (lane 0, lane 5, lane 31)."""
    assert [mma.a_m16n8k16(0, i) for i in range(8)] == [
        (0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
    assert mma.a_m16n8k16(5, 0) == (1, 2) and mma.a_m16n8k16(31, 7) == (15, 15)
    assert [mma.b_m16n8k16(5, i) for i in range(4)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert [mma.c_m16n8(31, i) for i in range(4)] == [(7, 6), (7, 7), (15, 6), (15, 7)]
    assert [mma.a_m16n8k8(6, i) for i in range(4)] == [(1, 2), (9, 2), (1, 6), (9, 6)]
    assert [mma.b_m16n8k8(6, i) for i in range(2)] == [(2, 1), (6, 1)]


@pytest.mark.parametrize("name", sorted(mma.FRAGMENTS))
def test_scatter_gather_round_trip(name, rng):
    _, shape, _ = mma.FRAGMENTS[name]
    tile = rng.standard_normal(shape).astype(np.float32)
    frags = mma.to_fragments(tile, name)
    assert frags.shape == (32, mma.FRAGMENTS[name][2])
    np.testing.assert_array_equal(mma.from_fragments(frags, name), tile)


def test_fragment_errors_name_the_problem():
    with pytest.raises(ValueError, match="fragment name"):
        mma.index_table("a_m16n8k32")
    with pytest.raises(ValueError, match=r"shape \(16, 16\)"):
        mma.to_fragments(np.zeros((16, 8)), "a_m16n8k16")


def test_two_accumulator_tiles_are_one_a_operand():
    """C layout of S tiles 2j, 2j+1 == A layout of the m16n8k16 P tile (lane by lane)."""
    table = mma.p_as_a_operand()                                  # (32, 8, 2)
    # a0,a1 <- tile 0 c0,c1; a2,a3 <- tile 0 c2,c3; a4..a7 <- tile 1 c0..c3
    want = np.array([(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)])
    for lane in range(32):
        np.testing.assert_array_equal(table[lane], want)


def test_tf32_k_permutation_reuses_the_accumulator(rng):
    """The tf32 P V trick: A col t <-> key 2t, col t+4 <-> key 2t+1 (same for V's rows)
    turns each lane's C fragment of an 8-key S tile into its A fragment, and the
    product is unchanged because the same permutation is applied to V."""
    P = rng.standard_normal((16, 8)).astype(np.float32)           # one S tile (16 x 8 keys)
    V = rng.standard_normal((8, 8)).astype(np.float32)            # (8 keys, 8 dims)
    perm = np.array([0, 2, 4, 6, 1, 3, 5, 7])                     # A col c -> key perm[c]
    c = mma.to_fragments(P, "c_m16n8")                            # (32, 4)
    a = c[:, [0, 2, 1, 3]]                                        # what the kernel passes
    assert np.array_equal(mma.from_fragments(a, "a_m16n8k8"), P[:, perm])
    b = mma.to_fragments(V[perm], "b_m16n8k8")
    d = mma.mma_model(a, b, np.zeros((32, 4), np.float32), "tf32")
    want = mma.matmul_model(P, V, "tf32")
    np.testing.assert_allclose(mma.from_fragments(d, "c_m16n8"), want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- models
@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_mma_model_matches_numpy(precision, rng):
    k = 8 if precision == "tf32" else 16
    an, bn = ("a_m16n8k8", "b_m16n8k8") if k == 8 else ("a_m16n8k16", "b_m16n8k16")
    A = rng.standard_normal((16, k)).astype(np.float32)
    B = rng.standard_normal((k, 8)).astype(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    d = mma.mma_model(mma.to_fragments(A, an), mma.to_fragments(B, bn),
                      mma.to_fragments(C, "c_m16n8"), precision)
    r = mma.ROUNDERS[precision]
    want = r(A).astype(np.float64) @ r(B).astype(np.float64) + C
    # tolerance: float32 rounding of a sum of 16 products of size ~1 (~1e-6 relative)
    assert rel_err(mma.from_fragments(d, "c_m16n8"), want) < 1e-6
    # and the rounding matters: against unrounded inputs the error is that of the type
    exact = A.astype(np.float64) @ B.astype(np.float64) + C
    assert rel_err(mma.from_fragments(d, "c_m16n8"), exact) > 1e-5


def test_rounding_models_agree_with_numpy_and_bit_rules(rng):
    x = (rng.standard_normal(10000) * 10.0 ** rng.integers(-4, 4, 10000)).astype(np.float32)
    np.testing.assert_array_equal(mma.round_fp16(x), x.astype(np.float16).astype(np.float32))
    b = mma.round_bf16(x)
    assert (b.view(np.uint32) & 0xFFFF == 0).all()                # 7 mantissa bits kept
    assert (np.abs(b - x) <= np.abs(x) * 2.0 ** -8 * 1.0001).all()  # half an ulp of 2^-7
    t = mma.round_tf32(x)
    assert (t.view(np.uint32) & 0x1FFF == 0).all()                # 10 mantissa bits kept
    assert (np.abs(t - x) <= np.abs(x) * 2.0 ** -11 * 1.0001).all()
    # ties: bf16 to even, tf32 away from zero
    one_and_half_ulp = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8], np.float32)
    np.testing.assert_array_equal(mma.round_bf16(one_and_half_ulp),
                                  np.array([1.0, 1 + 2 * 2.0 ** -7], np.float32))
    tie = np.array([1 + 2.0 ** -11, -(1 + 2.0 ** -11)], np.float32)
    np.testing.assert_array_equal(mma.round_tf32(tie),
                                  np.array([1 + 2.0 ** -10, -(1 + 2.0 ** -10)], np.float32))
    assert mma.round_tf32(np.float32(3.0)).shape == ()            # scalars stay scalars


def test_pack_pair_round_trip(rng):
    x = rng.standard_normal((2, 500)).astype(np.float32)
    for prec, r in (("fp16", mma.round_fp16), ("bf16", mma.round_bf16)):
        w = mma.pack_pair_model(x[0], x[1], prec)
        lo, hi = mma.unpack_pair_model(w, prec)
        np.testing.assert_array_equal(lo, r(x[0]))
        np.testing.assert_array_equal(hi, r(x[1]))
    w = mma.pack_pair_model(np.float32(1.0), np.float32(2.0), "fp16")
    assert int(w) == 0x4000_3C00                                  # 2.0 high, 1.0 low


def test_3xtf32_split_error_bounds(rng):
    """x - big - small is below 2^-21 |x|; the 3xTF32 product error sits near fp32's and
    three orders of magnitude below 1xTF32's."""
    x = rng.standard_normal(100000).astype(np.float32)
    big, small = mma.split_tf32(x)
    assert (np.abs(x.astype(np.float64) - big - small) < 2.0 ** -21 * np.abs(x)).all()
    np.testing.assert_array_equal(big, mma.round_tf32(x))       # big as cvt.rna.tf32
    A = rng.standard_normal((64, 256)).astype(np.float32)
    B = rng.standard_normal((256, 64)).astype(np.float32)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    size = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)   # sum of |terms|

    def err(p):
        return float(np.max(np.abs(mma.matmul_model(A, B, p) - exact) / size))
    e1, e3 = err("tf32"), err("3xtf32")
    assert e1 > 1e-4                      # tf32 keeps 10 mantissa bits: ~2^-11 per operand
    assert e3 < 2e-6                      # dropped small*small term: ~2^-22
    assert e1 / e3 > 100


# ---------------------------------------------------------------- the kernel (simulator)
SIM_CASES = [  # (precision, Tq, Tk, d, causal)
    ("fp16", 20, 24, 16, False),
    ("fp16", 37, 21, 24, True),        # Tq > Tk: rows with no visible key
    ("bf16", 20, 40, 16, True),
    ("3xtf32", 37, 21, 13, True),      # odd d, padded to 16
    ("3xtf32", 18, 33, 16, False),
    ("tf32", 20, 24, 16, True),
]


@pytest.mark.parametrize("precision,tq,tk,d,causal", SIM_CASES)
def test_kernel_matches_reference_on_the_simulator(precision, tq, tk, d, causal, rng):
    q = rng.standard_normal((1, tq, d)).astype(np.float32)
    k = rng.standard_normal((1, tk, d)).astype(np.float32)
    v = rng.standard_normal((1, tk, d)).astype(np.float32)
    r = {"fp16": mma.round_fp16, "bf16": mma.round_bf16}.get(precision, lambda x: x)
    o_ref, lse_ref = attention(r(q), r(k), r(v), causal=causal)
    o, lse = tc.forward(q, k, v, causal=causal, precision=precision)
    assert o.dtype == np.float32 and lse.dtype == np.float32
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isneginf(lse), ~fin)
    assert np.all(o[~fin] == 0)
    # tolerances (rel. to float64 on the inputs the kernel sees): 3xTF32 1e-5; one-pass
    # TF32 5e-3; fp16/bf16 2e-2 (P is rounded to 16 bits inside the kernel)
    tol = {"3xtf32": 1e-5, "tf32": 5e-3, "fp16": 2e-2, "bf16": 2e-2}[precision]
    assert rel_err(o, o_ref) < tol
    assert rel_err(lse[fin], lse_ref[fin]) < (1e-5 if precision != "tf32" else 5e-3)


# Version 2 (pipeline="async": cp.async + ldmatrix) does version 1's arithmetic in the
# same order: equal bit for bit (ragged and causal key blocks, two m-tiles, a negative
# scale, rows that see no key). 3xTF32/TF32's version 2 splits each fragment into big and
# small where it reads it, version 1 once into planes: the same values, the same products.
@pytest.mark.slow
@pytest.mark.parametrize("precision,tq,tk,d,causal,m_tiles,scale,warps", [
    ("fp16", 21, 37, 24, True, 1, None, None),
    ("bf16", 19, 6, 16, True, 1, -0.3, None),
    ("fp16", 33, 40, 16, False, 2, None, None),
    ("3xtf32", 19, 6, 16, True, 1, -0.3, None),
    ("3xtf32", 20, 37, 24, False, 1, None, None),
    ("3xtf32", 33, 21, 16, True, 1, None, 2),
    ("tf32", 17, 33, 32, True, 1, None, None),
])
def test_async_version_equals_version_1(precision, tq, tk, d, causal, m_tiles, scale, warps,
                                        rng):
    # two heads (the per-head offsets) in the cheapest case of each kernel family, the
    # 16-bit one (bf16) and the TF32 one (tf32); one elsewhere, where a second head
    # doubled the simulator's time and what is compared lies inside a block
    heads = 2 if precision in ("bf16", "tf32") else 1
    q, k, v = (rng.standard_normal((heads, t, d)).astype(np.float32) for t in (tq, tk, tk))
    if precision == "fp16":
        q, k, v = (a.astype(np.float16) for a in (q, k, v))
    tiles = {} if warps is None else {"warps": warps, "block_k": 16}
    if precision in ("fp16", "bf16"):
        tiles["lazy_rescale"] = False  # version 1 rescales at every raised max
    runs = [tc.forward(q, k, v, causal=causal, scale=scale, precision=precision,
                       m_tiles=m_tiles, pipeline=p, **tiles) for p in ("plain", "async")]
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])


# Version 3 (pipeline="planes", 3xTF32/TF32): K, V split once per block into planes
# instead of per warp at each read; the same values, the same products: equal bit for bit
# to version 2 (several key blocks through the single staging buffer, ragged and causal
# blocks, rows with no key, a negative scale, two and four warps).
@pytest.mark.slow
@pytest.mark.parametrize("precision,tq,tk,d,causal,scale,warps,block_k", [
    ("3xtf32", 19, 6, 16, True, -0.3, 1, 16),
    ("3xtf32", 20, 37, 24, False, None, 1, 16),
    # two warps: one ragged query block of Br = 32 (both warps at work, the second on 5
    # rows) past two key blocks; four warps: four key blocks through the staging buffer
    # (Tq = 37 and Tk = 81 only added blocks that repeat these)
    ("3xtf32", 21, 45, 40, True, None, 2, 32),
    ("3xtf32", 33, 49, 16, True, None, 4, 16),
    ("tf32", 17, 33, 32, True, None, 1, 16),
])
def test_planes_version_equals_version_2(precision, tq, tk, d, causal, scale, warps, block_k,
                                         rng):
    # two heads in the cheapest case (tf32: one pass, the same planes kernel), one in the
    # others, as above
    heads = 2 if precision == "tf32" else 1
    q, k, v = (rng.standard_normal((heads, t, d)).astype(np.float32) for t in (tq, tk, tk))
    runs = [tc.forward(q, k, v, causal=causal, scale=scale, precision=precision, pipeline=p,
                       warps=warps, block_k=block_k) for p in ("async", "planes")]
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])
    o_ref, _ = attention(*(a.astype(np.float64) for a in (q, k, v)), causal=causal,
                         scale=scale)
    if precision == "3xtf32":
        assert rel_err(runs[1][0], o_ref) < 1e-5


# The lazy rescale (fp16/bf16 version 2, an option): a row keeps its max until a score
# passes it by 8 (log2 units). Scores that climb block by block, some steps under the
# threshold (kept: P up to 2^8 in 16 bits) and some over it (rescaled), ragged and causal.
@pytest.mark.slow
@pytest.mark.parametrize("precision,tq,tk,causal,m_tiles", [
    ("fp16", 20, 90, False, 1),
    ("bf16", 37, 90, True, 1),
    ("fp16", 33, 75, True, 2),
])
def test_lazy_rescale_matches_float64_on_climbing_scores(precision, tq, tk, causal, m_tiles,
                                                         rng):
    d = 16
    steps = np.array([0.0, 2.0, 9.0, 10.0, 11.5, 10.5])      # natural-log units per block
    lift = np.repeat(steps, 16)[:tk] + 0.3 * rng.standard_normal(tk)
    q = 0.1 * rng.standard_normal((1, tq, d))
    q[..., 0] = 1.0 + 0.1 * rng.uniform(size=tq)
    k = 0.1 * rng.standard_normal((1, tk, d))
    k[0, :, 0] = lift
    v = rng.standard_normal((1, tk, d))
    q, k, v = (a.astype(np.float32) for a in (q, k, v))       # o comes back float32
    r = {"fp16": mma.round_fp16, "bf16": mma.round_bf16}[precision]
    o_ref, lse_ref = attention(r(q), r(k), r(v), causal=causal, scale=1.0)
    runs = {lazy: tc.forward(q, k, v, causal=causal, scale=1.0, precision=precision,
                             m_tiles=m_tiles, pipeline="async", lazy_rescale=lazy)
            for lazy in (True, False)}
    fin = np.isfinite(lse_ref)
    for o, lse in runs.values():
        assert np.all(np.isfinite(o)) and np.array_equal(np.isneginf(lse), ~fin)
        assert rel_err(o, o_ref) < 2e-2
        assert rel_err(lse[fin], lse_ref[fin]) < 1e-5
    assert not np.array_equal(runs[True][0], runs[False][0])  # another reference max


def test_lazy_rescale_option():
    assert tc.plan("fp16", 64, 8, 64, simulator=False, pipeline="async",
                   lazy_rescale=True).lazy_rescale
    assert not tc.resolve_tiles("bf16", 128, False).lazy_rescale   # the default: off
    assert tc.resolve_tiles("fp16", 64, False, lazy_rescale=True).lazy_rescale
    with pytest.raises(ValueError, match="lazy_rescale=True is implemented"):
        tc.plan("3xtf32", 64, 4, 32, simulator=False, pipeline="async", lazy_rescale=True)
    with pytest.raises(TypeError, match="lazy_rescale must be True or False"):
        tc.plan("fp16", 64, 8, 64, simulator=False, pipeline="async", lazy_rescale=2)


def test_variant_resolution_on_a_gpu():
    """What a call runs on a GPU (no kernel launched): the H200 defaults, and a register
    prefetch asked for without a pipeline runs version 1 (the 3xTF32 default is version 2,
    which has no register prefetch)."""
    cfg = tc.resolve_tiles("3xtf32", 128, False)
    assert (cfg.pipeline, cfg.warps, cfg.block_k, cfg.prefetch) == ("planes", 8, 32, False)
    cfg = tc.resolve_tiles("3xtf32", 64, False)
    assert (cfg.pipeline, cfg.warps, cfg.block_k, cfg.prefetch) == ("planes", 8, 64, False)
    cfg = tc.resolve_tiles("3xtf32", 128, False, warps=2, block_k=32, prefetch=True)
    assert (cfg.pipeline, cfg.prefetch) == ("plain", True)
    cfg = tc.resolve_tiles("3xtf32", 128, False, warps=2, block_k=32, pipeline="plain")
    assert cfg.prefetch is True        # version 1 asked for by name: its default prefetch
    cfg = tc.resolve_tiles("tf32", 128, False)
    assert cfg.pipeline == "plain"
    cfg = tc.resolve_tiles("fp16", 128, False, prefetch=True)
    assert cfg.pipeline == "plain"


def test_tiles_follow_the_gpus_shared_memory():
    """On an H200 the defaults; where a block may have less shared memory (99 KB on an
    RTX 4090, 163 KB on an A100 40GB) the first smaller variant that fits: the 3xTF32
    version 3 at d = 128 (165 KB) falls back to version 2, fp16's 8 x 128 (136 KB) to Bc 64."""
    from flashcourse.limits import PRESETS
    h200, a100, rtx = PRESETS["H200"], PRESETS["A100 40GB"], PRESETS["RTX 4090"]
    for p in tc.PRECISIONS:
        for d in (16, 64, 100, 128):
            assert tc.choose_tiles(p, d, h200) == tc.default_tiles(p, d, False)
    assert tc.choose_tiles("3xtf32", 128, a100)[5] == "async"
    assert tc.choose_tiles("3xtf32", 64, a100)[5] == "planes"
    assert tc.choose_tiles("3xtf32", 128, rtx)[:2] == (4, 32)
    assert tc.choose_tiles("fp16", 128, rtx)[:2] == (8, 64)
    cfg = tc.resolve_tiles("fp16", 128, False, limits=rtx)
    assert cfg.shared_bytes <= rtx.smem_per_block_optin
    cfg = tc.resolve_tiles("fp16", 128, False, warps=8, block_k=128, limits=rtx)
    assert cfg.block_k == 128          # a caller's own tiles are kept (and checked at launch)


def test_async_version_options():
    with pytest.raises(ValueError, match="prefetch=True is version 1's"):
        tc.plan("3xtf32", 64, 8, 32, prefetch=True, pipeline="async")
    with pytest.raises(ValueError, match="pipeline must be one of"):
        tc.plan("fp16", 64, 8, 32, pipeline="tma")
    cfg = tc.plan("3xtf32", 128, 4, 32, simulator=False, pipeline="async")
    rows = 128 + 4                     # words per row of Q, K and V (padded)
    assert cfg.shared_bytes == 4 * rows * (cfg.block_q + 4 * 32)
    cfg = tc.plan("3xtf32", 128, 8, 32, simulator=False, pipeline="planes")
    assert cfg.shared_bytes == 4 * rows * (cfg.block_q + 6 * 32)    # Q, staging, 4 planes
    with pytest.raises(ValueError, match="built for 3xtf32 and tf32 only"):
        tc.plan("fp16", 64, 8, 32, pipeline="planes")
    with pytest.raises(ValueError, match="prefetch=True is version 1's"):
        tc.plan("3xtf32", 64, 8, 32, prefetch=True, pipeline="planes")


# Any finite scale (issue 23): the kernel once masked with -inf before the scale
# multiplied (-inf x 0 = NaN, -inf x -1 = +inf) and took the row max before scaling (a
# negative scale turned it into the min). Each case has a masked or padded key (Tk not a
# multiple of 16, or causal) except the last, whose spread of scores (+-60, d = 16)
# overflowed exp2 when a negative scale made the "max" the smallest score.
SCALE_CASES = [  # (precision, Tq, Tk, d, causal, scale, input size)
    ("3xtf32", 3, 5, 8, False, 0.0, 1.0),       # the repro: Tk = 5
    ("3xtf32", 5, 3, 8, True, -0.7, 1.0),       # causal, Tq > Tk: rows with no key too
    ("fp16", 9, 21, 16, True, 0.0, 1.0),        # two key blocks, the diagonal one masked
    ("bf16", 3, 5, 8, False, -1e-39, 1.0),      # subnormal float32 scale x log2(e)
    ("tf32", 4, 7, 8, True, 1e-30, 1.0),
    ("3xtf32", 16, 16, 16, False, -1.0, 2.0),   # no mask: the max must be of scaled scores
]


@pytest.mark.parametrize("precision,tq,tk,d,causal,scale,size", SCALE_CASES)
def test_kernel_is_right_for_any_finite_scale(precision, tq, tk, d, causal, scale, size,
                                              rng):
    """The reference's answer (tolerances as in the test above) for scale 0, negative and
    tiny scales; never the overflow error, never -inf or NaN for a row that sees keys."""
    q = (rng.standard_normal((1, tq, d)) * size).astype(np.float32)
    k = (rng.standard_normal((1, tk, d)) * size).astype(np.float32)
    v = rng.standard_normal((1, tk, d)).astype(np.float32)
    r = {"fp16": mma.round_fp16, "bf16": mma.round_bf16}.get(precision, lambda x: x)
    o_ref, lse_ref = attention(r(q), r(k), r(v), causal=causal, scale=scale)
    o, lse = tc.forward(q, k, v, causal=causal, precision=precision, scale=scale)
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isneginf(lse), ~fin) and np.isfinite(lse[fin]).all()
    assert np.all(o[~fin] == 0)
    tol = {"3xtf32": 1e-5, "tf32": 5e-3, "fp16": 2e-2, "bf16": 2e-2}[precision]
    assert rel_err(o, o_ref) < tol
    assert rel_err(lse[fin], lse_ref[fin]) < (1e-5 if precision != "tf32" else 5e-3)


def test_scale_zero_on_device_arrays(rng):
    """Device arrays skip the host's result check: at scale 0 the kernel itself must give
    the mean of the visible v rows and lse = log(number of visible keys)."""
    from numba import cuda

    from flashcourse.cuda import forward
    q, k, v = (rng.standard_normal((1, n, 16)).astype(np.float32) for n in (6, 5, 5))
    o, lse = forward(*(cuda.to_device(a) for a in (q, k, v)), kernel="tensor_core",
                     causal=True, scale=0.0)
    o, lse = o.copy_to_host(), lse.copy_to_host()
    seen = np.arange(6)              # causal, Tk = Tq - 1: row i sees keys 0..i-1 (i keys)
    assert np.isneginf(lse[0, 0]) and (o[0, 0] == 0).all()
    np.testing.assert_allclose(lse[0, 1:], np.log(seen[1:]), rtol=1e-6)
    want = np.cumsum(v[0], axis=0)[: 5] / np.arange(1, 6)[:, None]   # (5, d) running means
    np.testing.assert_allclose(o[0, 1:], want, rtol=0, atol=1e-5)


def test_float16_in_float16_out(rng):
    q, k, v = (rng.standard_normal((2, n, 16)).astype(np.float16) for n in (17, 30, 30))
    o, lse = tc.forward(q, k, v, causal=True)
    assert o.dtype == np.float16 and o.shape == (2, 17, 16) and lse.dtype == np.float32
    o_ref, _ = attention(q, k, v, causal=True)
    assert rel_err(o, o_ref) < 2e-2


def test_registered_and_dispatched_from_cuda_forward(rng):
    from flashcourse.cuda import KERNELS, forward
    from flashcourse.cuda.registry import FORWARD
    assert "tensor_core" in KERNELS and FORWARD["tensor_core"].convert_to is None
    q, k, v = (rng.standard_normal((1, n, 16)).astype(np.float64) for n in (16, 16, 16))
    o, lse = forward(q, k, v, kernel="tensor_core")
    assert o.dtype == np.float64 and lse.dtype == np.float64   # float64 in, float64 out
    o_ref, _ = attention(q, k, v)
    assert rel_err(o, o_ref) < 1e-5                            # 3xTF32 on float32 copies
    with pytest.raises(ValueError, match="does not use"):
        forward(q, k, v, kernel="tensor_core", tm=4)


def test_device_arrays_stay_on_the_device(rng):
    """float16 device arrays with d a multiple of 16 run without a host copy."""
    from numba import cuda

    from flashcourse.cuda import forward
    q, k, v = (rng.standard_normal((1, n, 16)).astype(np.float16) for n in (20, 24, 24))
    o, lse = forward(*(cuda.to_device(a) for a in (q, k, v)), kernel="tensor_core",
                     causal=True)
    assert tc.is_device_array(o) and np.dtype(o.dtype) == np.float16
    o_ref, _ = attention(q, k, v, causal=True)
    assert rel_err(o.copy_to_host(), o_ref) < 2e-2


def test_bad_input_is_named(rng):
    q = rng.standard_normal((1, 8, 16)).astype(np.float32)
    with pytest.raises(ValueError, match="precision"):
        tc.forward(q, q, q, precision="fp8")
    with pytest.raises(ValueError, match="block_k"):
        tc.forward(q, q, q, block_k=24)
    with pytest.raises(ValueError, match="head dim"):
        big = np.zeros((1, 4, 144), np.float32)
        tc.forward(big, big, big)
    with pytest.raises(TypeError, match="dtype"):
        tc.forward(q, q.astype(np.float64), q)
    with pytest.raises(ValueError, match="m_tiles"):
        tc.forward(q, q, q, m_tiles=3)
    with pytest.raises(ValueError, match="float16"):
        tc.forward(q * 1e5, q, q, precision="fp16")
    with pytest.raises(ValueError, match="NaN"):
        bad = q.copy()
        bad[0, 0, 0] = np.nan
        tc.forward(bad, q, q)


@pytest.mark.parametrize("order", ["launch", "head_reversed", "heaviest_first"])
@pytest.mark.parametrize("causal", [0, 1])
def test_query_block_orders_cover_the_grid(order, causal):
    """Each order maps the (query blocks, heads) grid onto itself one to one; with a causal
    mask heaviest_first launches every head's heavier blocks before any lighter one."""
    from flashcourse.cuda.common._device import query_block_order
    block_of = query_block_order(order)

    @cuda.jit
    def where(out, causal):
        qb, h = block_of(causal)
        if cuda.threadIdx.x == 0:
            lin = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y
            out[lin, 0] = qb
            out[lin, 1] = h

    nq, nh = 5, 3
    out = np.full((nq * nh, 2), -1, np.int64)
    where[(nq, nh), 1](out, causal)
    assert sorted(map(tuple, out)) == [(q, h) for q in range(nq) for h in range(nh)]
    if causal and order == "heaviest_first":
        assert list(out[:, 0]) == sorted(out[:, 0], reverse=True)
    if causal and order == "head_reversed":
        assert list(out[:nq, 0]) == list(range(nq))[::-1]
    if not causal or order == "launch":
        assert list(out[:, 0]) == [i % nq for i in range(nq * nh)]
    with pytest.raises(ValueError, match="order must be one of"):
        query_block_order("random")


def test_config_layout_is_conflict_free():
    """The padded strides make a warp's fragment reads hit 32 different banks."""
    for prec in ("fp16", "3xtf32"):
        cfg = tc.plan(prec, 64, 4, 64, simulator=True)
        lanes = np.arange(32)
        g, t = lanes // 4, lanes % 4
        if cfg.half:
            k_words = g * cfg.k_stride + t            # B of S: Ks[n*8 + g][kk*8 + t]
            v_words = g * cfg.v_stride + t            # B of PV: Vt[n*8 + g][kp*8 + t]
        else:
            k_words = g * cfg.k_stride + t            # B of S: K[n*8 + g][kk*8 + t]
            v_words = 2 * t * cfg.v_stride + g        # B of PV: V[j*8 + 2t][n*8 + g]
        for words in (k_words, v_words):
            assert len(set(words % 32)) == 32


@pytest.mark.skipif(tc.using_simulator(), reason="needs a CUDA GPU (intrinsics)")
def test_intrinsics_on_gpu():  # pragma: no cover - GPU only
    import importlib.util

    from flashcourse import results
    path = results.ROOT / "benchmarks" / "gpu_tensor_core.py"
    spec = importlib.util.spec_from_file_location("bench_gpu_tensor_core", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.check_intrinsics(np.random.default_rng(0), {})


def test_old_gpus_are_refused_with_their_compute_capability(monkeypatch):
    """mma.sync m16n8k16 (fp16/bf16) and m16n8k8 tf32 need compute capability 8.0+."""
    from types import SimpleNamespace
    dev = SimpleNamespace(compute_capability=(7, 5), name="Tesla T4")
    monkeypatch.setattr(tc, "using_simulator", lambda: False)
    monkeypatch.setattr(tc, "cuda", SimpleNamespace(get_current_device=lambda: dev))
    for precision in ("fp16", "bf16", "3xtf32"):
        with pytest.raises(RuntimeError, match=r"compute capability 7\.5"):
            tc.check_capability(precision)
    dev.compute_capability = (9, 0)
    tc.check_capability("bf16")                                 # no error on sm_90


def test_bfloat16_arrays_of_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q, k, v = (rng.standard_normal((1, n, 16)).astype(ml_dtypes.bfloat16) for n in (9, 12, 12))
    o, _ = tc.forward(q, k, v, causal=True)
    assert o.dtype == ml_dtypes.bfloat16
    o_ref, _ = attention(*(a.astype(np.float32) for a in (q, k, v)), causal=True)
    assert rel_err(o.astype(np.float32), o_ref) < 2e-2


@pytest.mark.parametrize("precision, dtype, d", [("bf16", np.float32, 40), ("bf16", np.float32, 64),
                                                 ("fp16", np.float16, 40),
                                                 ("3xtf32", np.float32, 24)])
def test_device_conversion_matches_the_host_words_bit_for_bit(precision, dtype, d, rng):
    """float32 -> bf16 words (round half to even) and zero padding of d happen on the device
    (no host round trip); the words and the unpacked output equal the host models'."""
    from numba import cuda
    D = -(-d // 16) * 16
    x = (rng.standard_normal((2, 7, d)) * 3).astype(dtype)
    x.reshape(-1)[:3] = [0.0, -0.0, 1.0 + 2.0 ** -8]          # a tie, rounded to even
    assert tc.device_convertible(dtype, precision)
    words = tc.device_words(cuda.to_device(x), precision, D).copy_to_host()
    np.testing.assert_array_equal(words, tc._to_words(x.astype(np.float32), precision, D))
    o = cuda.device_array((2, 7, d), np.float16 if precision == "fp16" else np.float32)
    tc.device_unwords(cuda.to_device(words), o, precision, d)
    np.testing.assert_array_equal(o.copy_to_host(),
                                  tc._from_words(words, precision, d).astype(o.dtype))


def test_float32_to_fp16_keeps_the_host_range_check(rng):
    assert not tc.device_convertible(np.float32, "fp16")
    assert not tc.device_convertible(np.float64, "bf16")


def test_bf16_on_float32_device_arrays_is_right(rng):
    from numba import cuda

    from flashcourse.cuda import forward
    q, k, v = (rng.standard_normal((2, 19, 40)).astype(np.float32) for _ in range(3))
    o, lse = forward(*(cuda.to_device(a) for a in (q, k, v)), kernel="tensor_core",
                     precision="bf16", causal=True)
    r = [tc.round_bf16(a) for a in (q, k, v)]
    ref_o, ref_lse = attention(*r, causal=True)
    assert rel_err(o.copy_to_host(), ref_o) < 2e-2
    np.testing.assert_allclose(lse.copy_to_host(), ref_lse, rtol=1e-2, atol=1e-2)


def _bf16_bits(a):
    """float32 -> bf16 bit patterns (uint16), rounded as the kernels round."""
    return (tc.round_bf16(a).view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.slow
@pytest.mark.parametrize("d", [32, 40])                 # native, and padded on the device
def test_bf16_bit_arrays_run_natively_and_match_the_float32_path(rng, d):
    """uint16 device arrays are bf16 bit patterns (no numpy bfloat16 type: e.g. a torch
    bfloat16 tensor viewed as int16): they run as "bf16" without a conversion and give o
    as bf16 bits, bit-equal to the float32 arrays' precision="bf16" path on the same
    (rounded) values, and within bf16 accuracy of the float64 reference."""
    from numba import cuda

    from flashcourse.cuda import forward
    q, k, v = (rng.standard_normal((2, 19, d)).astype(np.float32) for _ in range(3))
    bits = [cuda.to_device(_bf16_bits(a)) for a in (q, k, v)]
    o, lse = forward(*bits, kernel="tensor_core", causal=True)
    assert np.dtype(o.dtype) == np.uint16 and o.shape == (2, 19, d)
    o32 = (o.copy_to_host().astype(np.uint32) << 16).view(np.float32)
    o_f, lse_f = forward(*(cuda.to_device(a) for a in (q, k, v)), kernel="tensor_core",
                         precision="bf16", causal=True)
    np.testing.assert_array_equal(o32, o_f.copy_to_host())
    np.testing.assert_array_equal(lse.copy_to_host(), lse_f.copy_to_host())
    ref_o, _ = attention(*(tc.round_bf16(a) for a in (q, k, v)), causal=True)
    assert rel_err(o32, ref_o) < 2e-2


def test_bf16_bit_arrays_refuse_other_precisions_and_check(rng):
    from numba import cuda

    from flashcourse.cuda import forward
    bits = [cuda.to_device(_bf16_bits(rng.standard_normal((1, 8, 16)).astype(np.float32)))
            for _ in range(3)]
    with pytest.raises(ValueError, match="uint16 arrays hold bf16 bit patterns"):
        forward(*bits, kernel="tensor_core", precision="fp16")
    with pytest.raises(ValueError, match="check=True checks floating-point arrays"):
        forward(*bits, kernel="tensor_core", check=True)
    with pytest.raises(TypeError, match="dtype"):
        forward(*bits, kernel="flash")                      # only the tensor-core kernel


@pytest.mark.parametrize("pipeline", ["plain", "async"])
@pytest.mark.parametrize("where", ["k", "v"])
def test_3xtf32_keeps_a_nan_input_nan(where, pipeline, rng):
    """The split rounds big on the bits, which turns the NaN 0x7FFFFFFF (what GPU
    arithmetic makes) into -0; small = NaN - big must carry it to the output (both
    versions: version 1 splits into planes, version 2 where it reads). Device arrays:
    for numpy input the host marks such rows NaN itself, whatever the kernel did."""
    from numba import cuda
    q, k, v = (rng.standard_normal((1, t, 16)).astype(np.float32) for t in (5, 7, 7))
    bad = np.array([0x7FFFFFFF], np.uint32).view(np.float32)[0]
    (k if where == "k" else v)[0, 3, 1] = bad
    o, lse = tc.forward(*(cuda.to_device(a) for a in (q, k, v)), precision="3xtf32",
                        pipeline=pipeline)
    o, lse = o.copy_to_host(), lse.copy_to_host()
    assert np.isnan(o).any(axis=-1).all()          # every row sees key 3
    if where == "k":
        assert np.isnan(lse).all()
    big, small = mma.split_tf32(np.array([bad]))
    assert not np.isnan(big[0]) and np.isnan(small[0])


def test_split_model_is_the_kernels_split(rng):
    """mma.split_tf32 (the numpy model the notebook and the error bounds use) is, bit for
    bit, what the kernels do: big = tf32_round(x), small = tf32_trunc(x - big)."""
    ops = mma.device_ops(True)                   # the simulator's device functions
    x = np.concatenate([rng.standard_normal(200), [1 / 3, -2.5e-39, 3.0e38, -0.0]])
    x = x.astype(np.float32)
    big, small = mma.split_tf32(x)
    for xi, b, sm in zip(x, big, small):
        bw = ops["tf32_round"].py_func(xi)
        sw = ops["tf32_trunc"].py_func(xi - mma.sim_as_f32(bw))
        assert int(bw) == int(np.float32(b).view(np.uint32))
        assert int(sw) == int(np.float32(sm).view(np.uint32))
