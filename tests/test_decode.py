"""Flash-Decoding: numpy split-KV forward, the CUDA split + combine kernels (simulator),
the decode IO model, the KV-cache readout and the combine exercise's checker.

Tolerances (relative to the float64 reference, as everywhere in the course): float64
1e-12, float32 1e-5, float16 inputs 2e-2 against the reference computed from the rounded
inputs (the GPU benchmark's fp16 bar; fp16 outputs carry ~3 decimal digits).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flashcourse import decode, decode_io, kv_cache, reference
from flashcourse.gpu import using_simulator
from flashcourse.reference import SoftmaxState, merge_states
from helpers import rel_err

ROOT = Path(__file__).resolve().parents[1]
TOL = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 2e-2}


def inputs(rng, b, hq, hkv, tq, tk, d, dtype):
    q = rng.standard_normal((b, hq, tq, d)).astype(dtype)
    k = (rng.standard_normal((b, hkv, tk, d)) * 1.5).astype(dtype)
    v = rng.standard_normal((b, hkv, tk, d)).astype(dtype)
    return q, k, v


def expected(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    return reference.attention(q, decode.expand_kv(k, g), decode.expand_kv(v, g),
                               causal=causal)


def assert_matches(o, lse, o_ref, lse_ref, dtype):
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isneginf(lse), ~fin), "rows with no visible key: lse = -inf"
    assert np.all(o[~fin] == 0), "rows with no visible key: o = 0"
    assert rel_err(o, o_ref) <= TOL[dtype]
    if fin.any():
        assert rel_err(lse[fin], lse_ref[fin]) <= TOL[dtype]


# (B, Hq, Hkv, Tq, Tk, d, num_splits, block_k, causal)
SHAPES = [
    (1, 1, 1, 1, 1, 8, 1, 64, False),            # one key
    (2, 4, 4, 1, 300, 37, 3, 64, False),         # Tk not a multiple of the split, odd d
    (1, 8, 1, 1, 130, 16, 5, 16, False),         # MQA
    (2, 8, 2, 1, 777, 24, None, 64, False),      # GQA G = 4, heuristic
    (1, 6, 2, 5, 129, 12, 4, 16, True),          # causal, Tq > 1
    (1, 2, 1, 7, 4, 8, 3, 1, True),              # causal, Tk < Tq: rows with no key
    (1, 3, 3, 2, 40, 5, 4, 8, True),             # 4 splits of 5 key blocks: one empty
    (1, 2, 1, 1, 40, 8, 1, 128, False),          # one split larger than the keys
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_split_kv_forward_matches_reference(rng, shape, dtype):
    b, hq, hkv, tq, tk, d, ns, bk, causal = shape
    q, k, v = inputs(rng, b, hq, hkv, tq, tk, d, dtype)
    o, lse = decode.split_kv_forward(q, k, v, num_splits=ns, block_k=bk, causal=causal)
    assert o.dtype == dtype and o.shape == q.shape and lse.shape == q.shape[:-1]
    assert_matches(o, lse, *expected(q, k, v, causal), dtype)


def test_parts_are_the_splits(rng):
    q, k, v = inputs(rng, 1, 4, 2, 1, 300, 16, np.float64)
    o, lse, (o_parts, lse_parts, bounds) = decode.split_kv_forward(
        q, k, v, num_splits=3, block_k=64, return_parts=True)
    assert bounds == [(0, 128), (128, 256), (256, 300)]
    for s, (k0, k1) in enumerate(bounds):              # each part is attention on its keys
        o_s, lse_s = expected(q, k[:, :, k0:k1], v[:, :, k0:k1], False)
        assert rel_err(o_parts[s], o_s) <= 1e-12 and rel_err(lse_parts[s], lse_s) <= 1e-12


@pytest.mark.parametrize("bad, match", [
    (((1, 6, 1, 8), (1, 4, 10, 8)), r"Hq = q.shape\[1\] = 6 .* Hkv = k.shape\[1\] = 4"),
    (((2, 4, 1, 8), (1, 4, 10, 8)), "batch size B"),
    (((4, 1, 8), (4, 10, 8)), "4 dimensions"),
    (((1, 4, 1, 8), (1, 4, 10, 6)), "head dim d"),
])
def test_bad_shapes_are_named(bad, match):
    qs, ks = bad
    with pytest.raises(ValueError, match=match):
        decode.split_kv_forward(np.ones(qs), np.ones(ks), np.ones(ks))


def test_bad_arguments():
    q, k = np.ones((1, 2, 1, 4)), np.ones((1, 1, 5, 4))
    with pytest.raises(ValueError, match="num_splits"):
        decode.split_kv_forward(q, k, k, num_splits=0)
    with pytest.raises(TypeError, match="block_k"):
        decode.split_kv_forward(q, k, k, block_k=2.5)
    with pytest.raises(TypeError, match="share one dtype"):
        decode.split_kv_forward(q, k.astype(np.float32), k)
    # issue 50: boolean options accept booleans only ("no" was taken as True)
    for flag in ("return_parts", "allow_nonfinite", "causal"):
        with pytest.raises(TypeError, match=f"^{flag} must be True or False"):
            decode.split_kv_forward(q, k, k, **{flag: "no"})
    with pytest.raises(TypeError, match="^causal must be True or False"):
        decode.split_partial(q, k, k, 0, 5, causal="no")


@pytest.mark.parametrize("o_parts, lse_parts, exc, match", [
    ([], [], ValueError, r"^o_parts must have shape \(S, ..., d\) with at least one"),
    (np.zeros((0, 3, 4)), np.zeros((0, 3)), ValueError, r"at least one partial state"),
    (np.zeros((2, 3, 4)), np.zeros((2, 4)), ValueError, r"^lse_parts must have shape"),
    (np.zeros((2, 3, 4)), np.zeros(2), ValueError, r"^lse_parts must have shape"),
    (np.zeros((2, 3, 4), complex), np.zeros((2, 3)), TypeError, "^o_parts must hold real"),
    (np.zeros((2, 3, 4)), np.array([["a"] * 3] * 2), TypeError, "^lse_parts must hold real"),
])
def test_combine_names_what_is_wrong(o_parts, lse_parts, exc, match):
    """issue 50: decode.combine([], []) raised numpy's "zero-size array to reduction
    operation maximum which has no identity"."""
    with pytest.raises(exc, match=match):
        decode.combine(o_parts, lse_parts)


def test_merge_is_the_course_merge_of_states(rng):
    """merge on (o, lse) carries reference.merge_states with (m, l) = (lse, 1)."""
    for _ in range(20):
        la, lb = rng.normal(0, 5, 2)
        oa, ob = rng.standard_normal(3), rng.standard_normal(3)
        o, lse = decode.merge(oa, np.float64(la), ob, np.float64(lb))
        st = merge_states(SoftmaxState(la, 1.0), SoftmaxState(lb, 1.0))
        assert lse == pytest.approx(st.m + np.log(st.l), rel=1e-14)
        w = np.exp(np.array([la, lb]) - st.m)
        assert np.allclose(o, (w[0] * oa + w[1] * ob) / st.l, rtol=1e-14)
    o, lse = decode.merge(np.ones(2), np.float64(-np.inf), np.ones(2), np.float64(-np.inf))
    assert lse == -np.inf and np.all(o == 0)


def test_merge_tree_equals_combine(rng):
    q, k, v = inputs(rng, 1, 2, 1, 3, 500, 8, np.float64)
    _, _, (o_parts, lse_parts, _) = decode.split_kv_forward(q, k, v, num_splits=7,
                                                            block_k=32, return_parts=True)
    o1, l1 = decode.combine(o_parts, lse_parts)
    o2, l2, levels = decode.merge_tree(o_parts, lse_parts)
    assert [len(lv) for lv in levels] == [7, 4, 2, 1]
    assert rel_err(o1, o2) <= 1e-14 and rel_err(l1, l2) <= 1e-14


def test_heuristic_follows_flash_attention():
    assert decode.num_splits_heuristic(8, 264, 512) == 29
    assert decode.num_splits_heuristic(300, 264, 512) == 1       # fills 80% of the SMs
    assert decode.num_splits_heuristic(1, 264, 3) <= 3           # never more than blocks
    assert 100 < decode.num_splits_heuristic(1, 264, 1000) <= 128  # the cap
    # wave efficiency of the choice is >= 85% of the best
    s = decode.num_splits_heuristic(48, 108, 1000)
    assert s == 2                                                # FA2's own comment
    assert decode.choose_num_splits(8, 65536, 128) == 29


def test_split_bounds_cover_the_keys():
    for tk, bk, ns in ((1, 64, 1), (300, 64, 3), (300, 64, 4), (1000, 7, 13)):
        bounds = decode.split_bounds(tk, bk, ns)
        assert len(bounds) == ns and bounds[0][0] == 0 and bounds[-1][1] == tk
        assert all(b[1] == c[0] for b, c in zip(bounds, bounds[1:]))
        assert all((b[1] - b[0]) % bk == 0 for b in bounds[:-1] if b[1] < tk)


# ---------------------------------------------------------------------------- CUDA (sim)
SIM_SHAPES = [
    (1, 2, 1, 1, 20, 8, 3, 4, False),            # GQA G = 2, ragged split
    (1, 4, 2, 3, 9, 5, 2, 4, True),              # causal Tq > 1, odd d
    (1, 2, 2, 3, 2, 16, 2, 1, True),             # Tk < Tq: a row with no key; empty split
    (2, 3, 1, 1, 7, 4, None, None, False),       # MQA, heuristic splits
]


@pytest.mark.parametrize("shape", SIM_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cuda_decode_matches_reference(rng, shape, dtype):
    from flashcourse.cuda import decode as cuda_decode
    b, hq, hkv, tq, tk, d, ns, bk, causal = shape
    q, k, v = inputs(rng, b, hq, hkv, tq, tk, d, dtype)
    o, lse = cuda_decode(q, k, v, num_splits=ns, block_k=bk, causal=causal)
    assert o.dtype == dtype and lse.dtype == np.float32
    assert_matches(o, lse, *expected(q, k, v, causal), dtype)


@pytest.mark.parametrize("warps, row_groups, unroll", [(4, 4, 2), (2, 2, 1), (8, 2, 1)])
def test_cuda_decode_row_groups(rng, warps, row_groups, unroll):
    """Warps split between the query rows of a GQA group (the GPU default for G > 4)."""
    from flashcourse.cuda import decode as cuda_decode
    q, k, v = inputs(rng, 1, 7, 1, 1, 21, 8, np.float32)       # G = 7: a ragged row group
    o, lse = cuda_decode(q, k, v, num_splits=3, block_k=4, warps=warps,
                         row_groups=row_groups, unroll=unroll)
    assert_matches(o, lse, *expected(q, k, v, False), np.float32)
    q, k, v = inputs(rng, 1, 4, 2, 3, 9, 5, np.float16)         # causal, Tq = 3, G = 2
    o, lse = cuda_decode(q, k, v, num_splits=2, block_k=4, causal=True, warps=warps,
                         row_groups=row_groups, unroll=unroll)
    assert_matches(o, lse, *expected(q, k, v, True), np.float16)


# the tensor-core split kernel (fp16; d a multiple of 16): b, hq, hkv, tq, tk, d, splits,
# block_k, causal, tc_block_k, m_tiles, tc_warps
TC_SHAPES = [
    (1, 4, 1, 1, 50, 16, 3, 16, False, 16, 1, 1),   # G = 4, ragged last split and block
    (2, 4, 2, 3, 37, 32, 2, 16, True, 16, 1, 1),    # causal, Tq = 3: limits r mod Tq
    (1, 2, 2, 3, 2, 16, 1, 16, True, 16, 1, 2),     # Tk < Tq: a row that sees no key
    (1, 6, 1, 3, 40, 16, 2, 16, True, 32, 2, 1),    # 18 rows: two 16-row tiles, Bc = 32
    (1, 17, 1, 1, 33, 16, 2, 16, False, 16, 1, 1),  # 17 rows: two row blocks of one tile
    (1, 4, 1, 2, 90, 16, 2, 48, True, 16, 1, 2),    # 2 warps share a split's 3 blocks
    (1, 6, 1, 3, 70, 16, 1, 16, False, 16, 2, 3),   # 3 warps merged, two tiles each
]


@pytest.mark.parametrize("shape", TC_SHAPES)
def test_cuda_decode_tensor_core(rng, shape):
    """kernel="tensor_core": the rows of a KV head as the M of m16n8k16 products."""
    from flashcourse.cuda import decode as cuda_decode
    b, hq, hkv, tq, tk, d, ns, bk, causal, tbk, mt, nw = shape
    q, k, v = inputs(rng, b, hq, hkv, tq, tk, d, np.float16)
    o, lse = cuda_decode(q, k, v, num_splits=ns, block_k=bk, causal=causal,
                         kernel="tensor_core", tc_block_k=tbk, m_tiles=mt, tc_warps=nw)
    assert o.dtype == np.float16
    assert_matches(o, lse, *expected(q, k, v, causal), np.float16)
    # and agrees with the CUDA-core kernel on the same rounded inputs to fp16 rounding
    o2, lse2 = cuda_decode(q, k, v, num_splits=ns, block_k=bk, causal=causal,
                           kernel="cuda_cores")
    fin = np.isfinite(lse2)
    assert np.array_equal(np.isfinite(lse), fin)
    assert np.abs(lse[fin] - lse2[fin]).max() <= 1e-3
    assert np.abs(o.astype(np.float32) - o2.astype(np.float32)).max() <= 4e-3


def test_cuda_decode_tensor_core_device_arrays(rng):
    """Device arrays in, float32 device arrays out, as the CUDA-core kernel."""
    from numba import cuda

    from flashcourse.cuda import decode as cuda_decode
    q, k, v = inputs(rng, 1, 4, 1, 2, 30, 32, np.float16)
    o, lse = cuda_decode(*(cuda.to_device(x) for x in (q, k, v)), num_splits=2,
                         block_k=16, causal=True, kernel="tensor_core")
    assert o.dtype == np.float32 and o.shape == q.shape
    assert_matches(o.copy_to_host(), lse.copy_to_host(), *expected(q, k, v, True),
                   np.float16)


def test_decode_kernel_choice():
    from flashcourse.cuda import decode as cuda_decode
    from flashcourse.cuda.decoding import decode_kernels as dk
    assert dk.choose_kernel("tensor_core", 64, 2, 1, True) == "tensor_core"
    assert dk.choose_kernel(None, 64, 4, 8, True) == "cuda_cores"          # fp32 K/V
    assert dk.choose_kernel(None, 40, 2, 8, True) == "cuda_cores"          # d % 16 != 0
    expect = "cuda_cores" if using_simulator() else "tensor_core"
    assert dk.choose_kernel(None, 128, 2, 4, True) == expect
    assert dk.choose_kernel(None, 128, 2, 1, True) == "cuda_cores"         # one row
    assert dk.choose_kernel(None, 64, 2, 4, False) == "cuda_cores"         # unaligned
    with pytest.raises(ValueError, match="kernel must be one of"):
        dk.choose_kernel("tc", 64, 2, 1, True)
    q = np.zeros((1, 2, 1, 8), np.float16)
    with pytest.raises(ValueError, match="multiple of 16"):
        cuda_decode(q, q, q, kernel="tensor_core")
    with pytest.raises(ValueError, match="tc_warps: not an option of the cuda_cores"):
        cuda_decode(q, q, q, tc_warps=2)
    q16 = np.zeros((1, 2, 1, 16), np.float16)
    with pytest.raises(ValueError, match="unroll, warps: not an option of the tensor_core"):
        cuda_decode(q16, q16, q16, kernel="tensor_core", warps=2, unroll=1)
    with pytest.raises(ValueError, match="tc_block_k must be a multiple of 16"):
        dk.tc_plan(64, 4, block_k=24)
    with pytest.raises(ValueError, match="m_tiles must be 1 or 2"):
        dk.tc_plan(64, 4, m_tiles=3)
    cfg = dk.tc_plan(128, 4, block_k=32, warps=1, simulator=False)
    assert (cfg.rows, cfg.threads, cfg.shared_bytes) == (16, 32, 4 * 4 * 32 * 68)
    assert dk.tc_blocks_per_sm(cfg) == 233472 // (cfg.shared_bytes + 1024)
    cfg = dk.tc_plan(128, 20, simulator=False)
    assert (cfg.m_tiles, cfg.warps, cfg.block_k) == (2, 8, 16)
    assert dk.tc_plan(256, 4, simulator=False).warps == 4       # 8 warps' buffers: 270 KB
    with pytest.raises(ValueError, match="shared memory"):
        dk.tc_plan(256, 4, warps=8, simulator=False)
    # two buffers of K_j and V_j per warp (16 x 68 words each), or the merge if larger
    assert cfg.shared_bytes == 4 * max(8 * 4 * 16 * 68, 2 * 8 * 32 + 8 * 32 * 128)


def test_cuda_decode_device_arrays(rng):
    """Device input stays on the device (float32 results); mixed input is refused."""
    from numba import cuda

    from flashcourse.cuda import decode as cuda_decode
    q, k, v = inputs(rng, 1, 4, 2, 1, 11, 8, np.float32)
    o, lse = cuda_decode(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v),
                         num_splits=2, block_k=4)
    assert o.shape == q.shape and lse.shape == q.shape[:-1]
    assert_matches(o.copy_to_host(), lse.copy_to_host(), *expected(q, k, v, False),
                   np.float32)
    with pytest.raises(TypeError, match="k must be a device array"):
        cuda_decode(cuda.to_device(q), k, v)


def test_cuda_decode_rejects_bad_heads():
    from flashcourse.cuda import decode as cuda_decode
    with pytest.raises(ValueError, match="multiple"):
        cuda_decode(np.ones((1, 3, 1, 4), np.float32), np.ones((1, 2, 5, 4), np.float32),
                    np.ones((1, 2, 5, 4), np.float32))


def test_cuda_plan_layout():
    from flashcourse.cuda.decoding import decode_kernels as dk
    cfg = dk.plan(128, 2, 1, unroll=2, warps=8, shuffle=True, vector=False)
    assert (cfg.vec, cfg.lpk, cfg.kpw, cfg.head_dim) == (8, 16, 2, 128)
    cfg = dk.plan(128, 4, 8, unroll=2, warps=4, shuffle=True, vector=False)
    assert (cfg.vec, cfg.lpk, cfg.kpw, cfg.rows) == (4, 32, 1, 8)
    assert dk.plan(37, 4, 20).rows == dk.MAX_ROWS
    with pytest.raises(ValueError, match="float16 or float32"):
        dk.plan(64, 8, 1)
    with pytest.raises(ValueError, match="multiple of row_groups"):
        dk.plan(64, 2, 8, warps=4, row_groups=3)
    cfg = dk.plan(128, 2, 5, warps=8, row_groups=4, shuffle=True, vector=False)
    assert (cfg.rows, cfg.rows_per_warp, cfg.key_warps, cfg.slots) == (8, 2, 2, 4)


def test_benchmark_refuses_without_gpu_and_smoke_runs():
    script = ROOT / "benchmarks" / "gpu_decode.py"
    if not using_simulator():
        # with a GPU the script would really benchmark: a test never times or records
        pytest.skip("a GPU is present: the refusal without one cannot be shown here")
    r = subprocess.run([sys.executable, str(script), "--bench", "--record"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "no NVIDIA CUDA GPU found" in r.stderr
    r = subprocess.run([sys.executable, str(script), "--simulator-smoke"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6/6 runs within tolerance" in r.stdout


# ---------------------------------------------------------------------------- IO model
def test_decode_traffic():
    t = decode_io.decode_traffic(1, 8, 8, 65536, 128)
    assert t.kv_bytes == 2 * 8 * 65536 * 128 * 2
    assert t.partial_bytes == 0 and t.flops == 4 * 8 * 65536 * 128
    assert t.intensity == pytest.approx(t.flops / t.total_bytes)
    t8 = decode_io.decode_traffic(1, 64, 8, 65536, 128, num_splits=4)
    assert t8.kv_bytes == t.kv_bytes                       # GQA: K/V read once per group
    assert t8.partial_bytes == 2 * 4 * 64 * 129 * 4
    assert decode_io.gqa_saving(64, 8) == 8
    assert decode_io.fa2_grid_blocks(1, 8) == 8
    assert decode_io.busy_sm_fraction(8, 132) == pytest.approx(8 / 132)
    assert decode_io.time_floor_s(t, 4e12) == pytest.approx(t.total_bytes / 4e12)
    with pytest.raises(ValueError, match="multiple"):
        decode_io.decode_traffic(1, 6, 4, 10, 8)


def test_recorded_results_plot():
    import matplotlib
    matplotlib.use("Agg")
    if not decode_io.RESULTS.exists():
        pytest.skip("no recorded H200 decode results yet")
    res = decode_io.load_results()
    assert "bench" in res and "environment" in res
    from flashcourse.plots.decode import plot_bandwidth
    fig = plot_bandwidth(res["bench"])
    assert len(fig.axes) >= 1
    assert 1e12 < decode_io.copy_bandwidth(res) < 10e12           # bytes/s, an H200 copy
    assert res["bars"]["bar_0.8x_torch_flash"] and res["bars"]["bar_50x_fa2_order"]


def test_registry_interface(rng):
    """decode as a registered forward kernel: flattened (BH, T, d) device arrays, G = 1."""
    from types import SimpleNamespace

    from numba import cuda

    from flashcourse.cuda.decoding import decode_kernels as dk
    for dtype in (np.float32, np.float16):
        q = rng.standard_normal((3, 2, 8)).astype(dtype)
        k = rng.standard_normal((3, 13, 8)).astype(dtype)
        v = rng.standard_normal((3, 13, 8)).astype(dtype)
        x = SimpleNamespace(q=cuda.to_device(q), k=cuda.to_device(k), v=cuda.to_device(v),
                            tq=2, tk=13, d=8, scale=8 ** -0.5, causal=True)
        o, lse = dk.run_registered(x, num_splits=3, block_k=4)
        o_ref, lse_ref = reference.attention(q, k, v, causal=True)
        assert rel_err(o.copy_to_host(), o_ref) <= 1e-5
        assert rel_err(lse.copy_to_host(), lse_ref) <= 1e-5
    assert dk.registered_extra_bytes(8, 1, 65536, 128) > 0


# ---------------------------------------------------------------------------- KV cache
def test_kv_cache_readout():
    assert kv_cache.kv_cache_bytes(1, 32, 8192, 8, 128) == 2 ** 30
    r = kv_cache.kv_cache_readout("Llama-3-8B", 1, 131072, "fp16", "H200")
    assert r.cache_bytes == 32 * 2 * 131072 * 8 * 128 * 2
    assert r.mha_cache_bytes == 4 * r.cache_bytes
    assert r.per_token_bytes == 131072
    assert r.fits and r.max_t_key > 131072
    r70 = kv_cache.kv_cache_readout("Llama-3-70B", 8, 131072, "fp16", "H200")
    assert not r70.fits
    assert any("NOT fit" in line for line in r70.lines)
    for kw, match in (({"model": "GPT-9"}, "model must be"), ({"batch": 0}, "batch"),
                      ({"dtype": "int3"}, "dtype"), ({"gpu": "X1"}, "gpu")):
        with pytest.raises(ValueError, match=match):
            kv_cache.kv_cache_readout(**kw)


# ---------------------------------------------------------------------------- the exercise
def test_combine_checker():
    from flashcourse.labs import decode as lab
    assert lab.check_combine(lab.reference_combine, verbose=False)

    def stub(o, lse):
        raise NotImplementedError

    assert lab.check_combine(stub, verbose=False).todo

    def mean(o, lse):
        return o.mean(0), lse.max(0)

    def unnormalised(o, lse):
        m = lse.max(0)
        w = np.exp(lse - m)
        return (w[..., None] * o).sum(0), m + np.log(w.sum(0))

    def no_max(o, lse):
        w = np.exp(lse)
        return (w[..., None] * o).sum(0) / w.sum(0)[..., None], np.log(w.sum(0))

    def no_guard(o, lse):
        m = lse.max(0)
        w = np.exp(lse - m)
        return (w[..., None] * o).sum(0) / w.sum(0)[..., None], m + np.log(w.sum(0))

    def lse_column(o, lse):     # lse kept as (R, 1): HINT_LSE said its values were wrong
        out_o, out_lse = lab.reference_combine(o, lse)
        return out_o, out_lse[:, None]

    for fn, hint in ((mean, lab.HINT_MEAN), (unnormalised, lab.HINT_NORMALISE),
                     (no_max, lab.HINT_OVERFLOW), (no_guard, lab.HINT_EMPTY),
                     (lse_column, lab.HINT_SHAPE)):
        with np.errstate(all="ignore"):
            res = lab.check_combine(fn, verbose=False)
        assert not res and res.hint == hint, fn.__name__


def test_combine_names_o_and_lse():
    """The failing result is named as the docstring names it (review round 18 b: "result
    [1]")."""
    from flashcourse.labs import decode as lab

    def lse_plus_log_s(o, lse):
        o_c, lse_c = lab.reference_combine(o, lse)
        return o_c, lse_c + np.log(lse.shape[0])
    res = lab.check_combine(lse_plus_log_s, verbose=False)
    assert not res and res.detail.startswith("lse: ")


# ---------------------------------------------------------------------------- hard inputs
def test_tensor_core_split_nan_row_large_scores_and_overflow(rng):
    """The tensor-core split kernel on hard inputs: a NaN in one query row makes only that
    row NaN (numpy and device results alike); large fp16 scores (|s| ~ 3e3) stay exact
    (the scores accumulate in fp32, the max is subtracted); scale = 1e38 overflows fp32
    and raises instead of looking like a masked row."""
    from numba import cuda

    from flashcourse.cuda import decode as cuda_decode
    opts = {"num_splits": 2, "block_k": 16, "kernel": "tensor_core"}
    q, k, v = inputs(rng, 1, 4, 1, 2, 40, 16, np.float16)
    q[0, 2, 1, 5] = np.nan
    hit = np.zeros((1, 4, 2), bool)
    hit[0, 2, 1] = True
    o_ref, lse_ref = expected(np.nan_to_num(q), k, v, False)
    o, lse = cuda_decode(q, k, v, allow_nonfinite=True, **opts)
    od, lsed = cuda_decode(*(cuda.to_device(x) for x in (q, k, v)), **opts)
    for o_, lse_ in ((o.astype(np.float32), lse), (od.copy_to_host(), lsed.copy_to_host())):
        assert np.isnan(lse_[hit]).all() and np.isnan(o_[hit]).all()
        assert rel_err(o_[~hit], o_ref[~hit]) <= 2e-2
        assert np.allclose(lse_[~hit], lse_ref[~hit], rtol=1e-3, atol=1e-3)
    big = (rng.standard_normal((1, 4, 2, 16)) * 30).astype(np.float16)
    kb = (rng.standard_normal((1, 1, 40, 16)) * 30).astype(np.float16)
    o, lse = cuda_decode(big, kb, v, **opts)
    o_ref, lse_ref = expected(big, kb, v, False)
    assert np.abs(lse_ref).max() > 1e3
    assert rel_err(o, o_ref) <= 2e-2 and rel_err(lse, lse_ref) <= 1e-4
    with pytest.raises(ValueError, match="overflow float32"):
        cuda_decode(np.ones_like(q), k, v, scale=1e38, **opts)
