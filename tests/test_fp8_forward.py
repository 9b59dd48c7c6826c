"""The FP8 Hopper forward's pieces that run without a Hopper GPU: the P/V layout trick
(`cuda.hopper.fp8_layouts`), V's transpose kernel on the simulator, the host's checks, and
the causal numpy twin the GPU kernel is compared with (benchmarks/gpu_fp8_forward.py)."""

import numpy as np
import pytest

from flashcourse import reference
from flashcourse.cuda.hopper import fp8, fp8_layouts as L
from flashcourse.cuda.ptx import wgmma
from flashcourse.fp8 import attention as fa


def test_key_order_is_the_permutation_the_two_layouts_imply():
    order = L.key_order()
    assert sorted(order.tolist()) == list(range(32))
    # the kernel's arithmetic (fp8_kernels.make_transpose's key_of)
    for k in range(32):
        c = k % 16
        assert order[k] == 16 * (k // 16) + 2 * (c // 4) + (c % 4) % 2 + 8 * ((c % 4) // 2)
    assert order.tolist() != list(range(32))      # the trick is needed: not the identity


def test_a_wrong_packing_is_caught(monkeypatch):
    monkeypatch.setattr(L, "P_SOURCES", ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11),
                                         (12, 13, 14, 15)))
    with pytest.raises(ValueError, match="row"):
        L.key_order()


@pytest.mark.parametrize("n", [8, 64, 128])
def test_p_through_the_fragments_times_transposed_v_is_p_v(n):
    rng = np.random.default_rng(n)
    p, v = rng.standard_normal((16, 32)), rng.standard_normal((32, n))
    np.testing.assert_allclose(L.pv_through_fragments(p, L.transpose_v(v)), p @ v,
                               rtol=1e-12, atol=1e-12)
    # without the key order the same fragments give a different (wrong) product
    wrong = np.swapaxes(v, 0, 1)
    assert not np.allclose(L.pv_through_fragments(p, wrong), p @ v)


def test_transpose_model_pads_with_zeros():
    v = (np.arange(70 * 4) % 255 + 1).astype(np.uint8).reshape(70, 4)     # no zero code
    vt = L.transpose_v(v)
    assert vt.shape == (4, 96)
    src = L.KEY_ORDER
    np.testing.assert_array_equal(vt[:, :32], v[src].T)
    np.testing.assert_array_equal(vt[:, 32:64], v[32 + src].T)
    padded = np.zeros((96, 4), np.uint8)
    padded[:70] = v
    np.testing.assert_array_equal(vt[:, 64:], padded[64 + src].T)
    assert (vt[:, 64:] == 0).sum() == 4 * 26          # keys 70..95: zeros
    with pytest.raises(ValueError, match="keys"):
        L.transpose_v(v, keys=50)


@pytest.mark.parametrize("bh,tk,D", [(2, 70, 32), (1, 128, 64), (3, 33, 96), (1, 300, 128)])
def test_transpose_kernel_matches_its_model_on_the_simulator(bh, tk, D):
    from numba import cuda
    rng = np.random.default_rng(tk)
    v = rng.integers(0, 256, (bh, tk, D), dtype=np.uint8)
    kp = -(-tk // 128) * 128
    vt = cuda.device_array(bh * D * kp // 4, np.uint32)
    fp8.transpose(cuda.to_device(v.reshape(-1).view(np.uint32)), vt, D, bh, tk, kp)
    got = vt.copy_to_host().view(np.uint8).reshape(bh, D, kp)
    np.testing.assert_array_equal(got, L.transpose_v(v, kp))


def test_fp8_wgmma_forms():
    assert wgmma.K_OF["e4m3"] == 32 and wgmma._tail("e4m3", "1") == "1, 1"
    assert wgmma._tail("f16", "1") == "1, 1, 1"
    with pytest.raises(ValueError, match="tnsp_b"):
        wgmma.mma_rs(128, "e4m3", 1)


def test_plan_and_block_checks_name_the_argument():
    assert fp8.plan(80).head_dim == 96 and fp8.plan(128).shared_bytes == 4 * (
        192 * 128 // 4 + 4 * 128 * 128 // 4)
    with pytest.raises(ValueError, match="warpgroups"):
        fp8.plan(64, warpgroups=4)
    with pytest.raises(ValueError, match="block_k"):
        fp8.plan(64, block_k=96)
    with pytest.raises(ValueError, match="head dim"):
        fp8.plan(160)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 256, 64)).astype(np.float32) for _ in range(3))
    q8, k8, v8 = fp8.quantize(q, k, v, scheme="block", block=96)
    with pytest.raises(ValueError, match="q8's scale blocks"):
        fp8.check_blocks(q8, k8, v8, 128)
    q8, k8, v8 = fp8.quantize(q, k, v, scheme="block", block=64)
    with pytest.raises(ValueError, match="k8's and v8's scale blocks"):
        fp8.check_blocks(q8, k8, v8, 128)
    q8, k8, v8 = fp8.quantize(q, k, v, scheme="block", block=128)
    assert fp8.check_blocks(q8, k8, v8, 128) == (128, 128)
    assert fp8.check_blocks(*fp8.quantize(q, k, v, scheme="head"), 128) == (1 << 30, 1 << 30)


def test_forward_runs_on_the_simulator():
    """wgmma's twins run the kernel here (tests/test_hopper_simulator.py checks it against
    its numpy twin): finite output of the input's shape, lse finite on every row."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 64, 64)).astype(np.float32) for _ in range(3))
    o, lse = fp8.forward(*fp8.quantize(q, k, v), warpgroups=1, block_k=64)
    assert o.shape == q.shape and np.isfinite(o).all() and np.isfinite(lse).all()


def test_quantize_with_hadamard_keeps_q_k_products():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 50, 48)).astype(np.float32) for _ in range(3))
    q8, k8, v8 = fp8.quantize(q, k, v, scheme="tensor", hadamard=True)
    assert q8.codes.shape[-1] == 64 and v8.codes.shape[-1] == 48
    s = q8.dequantize() @ np.swapaxes(k8.dequantize(), -1, -2)
    s_ref = q @ np.swapaxes(k, -1, -2)
    assert np.abs(s - s_ref).max() < 0.2 * np.abs(s_ref).max()


@pytest.mark.parametrize("tq,tk", [(40, 100), (100, 40), (64, 64)])
def test_causal_numpy_twin_against_float64(tq, tk):
    rng = np.random.default_rng(tq)
    q, k, v = (rng.standard_normal((2, t, 32)).astype(np.float32) for t in (tq, tk, tk))
    # scale 1 in every scheme and P kept in fp32: only the inputs' e4m3 rounding remains
    o = fa.fp8_attention(q, k, v, scheme="head", key_block=16, causal=True,
                         quantize_p_to_fp8=False)
    ref, lse = reference.attention(q.astype(np.float64), k.astype(np.float64),
                                   v.astype(np.float64), causal=True)
    empty = ~np.isfinite(lse)
    assert (o[empty] == 0).all()
    assert np.abs(o - ref)[~empty].max() < 0.15
    non_causal = fa.fp8_attention(q, k, v, scheme="head", key_block=16)
    assert not np.allclose(o, non_causal)
    with pytest.raises(TypeError, match="causal"):
        fa.fp8_attention(q, k, v, causal="yes")


def test_public_forward_routes_fp8_and_names_bad_options():
    from flashcourse import cuda as fc
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 64, 64)).astype(np.float32) for _ in range(3))
    with pytest.raises(ValueError, match="takes the options"):
        fc.forward(q, k, v, kernel="hopper", precision="fp8", warps=4)
    with pytest.raises(ValueError, match="scheme"):
        fc.forward(q, k, v, kernel="hopper", precision="fp8", scheme="rows")
    o, _ = fc.forward(q, k, v, kernel="hopper", precision="fp8", hadamard=True,
                      warpgroups=1, block_k=64)             # routed: runs on the simulator
    assert o.shape == q.shape and np.isfinite(o).all()


@pytest.mark.parametrize("scheme,block,had,d,dtype,t", [
    ("block", 64, False, 80, np.float32, 70), ("head", None, True, 64, np.float16, 20),
    ("block", 8, True, 100, np.float32, 20), ("block", 128, True, 32, np.float32, 30)])
def test_device_quantizer_matches_the_numpy_scales_and_codes(scheme, block, had, d, dtype, t):
    """fp8.quantize_device on the simulator against fp8.scaling (after hadamard.rotate on
    the zero-padded rows): the same scales up to float32 rounding, the same codes except
    where the rotation's float32 sums put a value on the other side of a rounding
    boundary (then one code apart)."""
    from numba import cuda
    from flashcourse.fp8 import codes as fcodes, hadamard as fh, scaling
    rng = np.random.default_rng(d)
    bh = 2
    x = (rng.standard_normal((bh, t, d)) * 3).astype(dtype)
    x[0, 5, 3] = 40.0                                       # an outlier
    signs = np.where(rng.random(1 << (d - 1).bit_length() if had else 1) < 0.5, -1.0, 1.0)
    dq = fp8.quantize_device(cuda.to_device(x), scheme=scheme, block=block or 128,
                             hadamard=had, signs=signs if had else None)
    ref_in = fh.rotate(fh.pad_to_power_of_two(x.astype(np.float32)), signs) if had else x
    ref = scaling.quantize(ref_in, scheme, block=block or 128)
    got_scale = dq.scale.copy_to_host()
    np.testing.assert_allclose(got_scale, ref.scale, rtol=1e-6)
    got_all = dq.codes.copy_to_host()
    got = got_all[..., :ref.codes.shape[-1]]
    assert dq.tokens == ref.tokens and dq.d == d
    vals = fcodes.decode(got), fcodes.decode(ref.codes)
    diff = got != ref.codes
    assert diff.mean() < 1e-3
    step = np.abs(vals[1][diff]) / 8 + 2.0 ** -9             # one e4m3 step, at most
    assert (np.abs(vals[0][diff] - vals[1][diff]) <= step + 1e-12).all()
    if not had:
        assert got_all.shape[-1] == 96 and (got_all[..., d:] == 0).all()


def test_device_quantizer_head_scale_from_several_blocks(monkeypatch):
    """scheme "head" takes its amax from several blocks of rows (an atomic max) and encodes
    every block with the head's one scale."""
    from numba import cuda
    from flashcourse.fp8 import scaling
    monkeypatch.setattr(fp8, "HEAD_ROWS", 8)
    x = (np.random.default_rng(3).standard_normal((2, 30, 32)) * 2).astype(np.float32)
    x[1, 29, 0] = 50.0                                      # the largest, in the last block
    dq = fp8.quantize_device(cuda.to_device(x), scheme="head")
    ref = scaling.quantize(x, "head")
    np.testing.assert_allclose(dq.scale.copy_to_host(), ref.scale, rtol=1e-6)
    assert (dq.codes.copy_to_host() == ref.codes).mean() > 0.999


def test_device_quantizer_names_bad_input():
    from numba import cuda
    x = cuda.to_device(np.zeros((1, 8, 64), np.float32))
    with pytest.raises(TypeError, match="device array"):
        fp8.quantize_device(np.zeros((1, 8, 64), np.float32))
    with pytest.raises(ValueError, match="per tensor"):
        fp8.quantize_device(x, scheme="tensor")
    with pytest.raises(ValueError, match="signs"):
        fp8.quantize_device(x, hadamard=True, signs=np.ones(3))
    with pytest.raises(ValueError, match="head dim"):
        fp8.quantize_device(cuda.to_device(np.zeros((1, 8, 160), np.float32)))
    dq = fp8.quantize_device(x)
    assert (dq.scale.copy_to_host() == 1).all() and (dq.codes.copy_to_host() == 0).all()


def test_forward_device_names_bad_scales_and_scale(monkeypatch):
    """forward_device's checks, on the simulator (the capability check stubbed: they come
    before any launch)."""
    from numba import cuda
    monkeypatch.setattr(fp8, "check_capability", lambda: None)
    codes = [cuda.to_device(np.zeros((2, 100, 64), np.uint8)) for _ in range(3)]
    one = cuda.to_device(np.ones((2, 1), np.float32))
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        fp8.forward_device(*codes, one, one, one, scale=-0.1)
    ones64 = cuda.to_device(np.ones((2, 1), np.float64))
    with pytest.raises(ValueError, match="k_scale must be a float32 device array of shape"):
        fp8.forward_device(*codes, one, ones64, one, scale=0.1)
    with pytest.raises(ValueError, match="q_scale must be a float32 device array of shape"):
        fp8.forward_device(*codes, one, one, one, q_block=64, scale=0.1)
    with pytest.raises(ValueError, match="kv_block must be None or a multiple"):
        fp8.forward_device(*codes, one, one, one, kv_block=64, scale=0.1)
    with pytest.raises(TypeError, match="uint8 device array"):
        fp8.forward_device(cuda.to_device(np.zeros((2, 100, 64), np.float16)), *codes[1:],
                           one, one, one, scale=0.1)
