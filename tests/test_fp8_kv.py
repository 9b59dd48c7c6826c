"""FP8 (e4m3) KV caches: the numpy model (flashcourse.fp8.kv), the device conversions
(flashcourse.cuda.ptx.fp8), and decoding from FP8 caches on the simulator
(flashcourse.cuda.decode / paged_decode with k_scale, v_scale; decoding/fp8_kv.py).

Tolerances. Against float64 attention on the DEQUANTISED cache (decode(code) x scale, exact
in float64): the kernels compute in float32 and their only error is float32 rounding, so o
within 1e-5 relative (max |diff| / max |o|) and lse within 1e-5 absolute per unit of |lse|,
the float32 bounds of tests/test_decode.py. Against the EXACT cache (before quantising):
what FP8 storage adds is measured and printed beside the fp16 cache's, and only held under
a loose named bound (FP8_LOOSE_BOUND) that a broken scale (off by 2x) would pass through but
a wrong decode would not.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from flashcourse import decode as np_decode
from flashcourse import paged_cache as pc
from flashcourse.cuda import decode, paged_decode
from flashcourse.cuda.decoding import fp8_kv
from flashcourse.cuda.ptx import fp8 as dev
from flashcourse.fp8 import attention as fa
from flashcourse.fp8 import codes
from flashcourse.fp8 import kv as fkv

ROOT = Path(__file__).resolve().parents[1]
#: o's largest error against the exact cache, relative to max |o|, that FP8 storage may add
#: in these tests (measured: about 2-6e-2 on outlier inputs, 1-3e-2 on normal ones)
FP8_LOOSE_BOUND = 0.25
F32_TOL = 1e-5


def rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


# ---------------------------------------------------------------------------------------
# Device conversions, bit for bit
# ---------------------------------------------------------------------------------------

@cuda.jit
def _decode_all(c, out, out_words):
    i = cuda.grid(1)
    if i < c.size:
        out[i] = dev.decode_e4m3(c[i])
    if i < c.size // 4:
        w = (np.uint32(c[4 * i]) | (np.uint32(c[4 * i + 1]) << 8)
             | (np.uint32(c[4 * i + 2]) << 16) | (np.uint32(c[4 * i + 3]) << 24))
        a, b, x, y = dev.decode_word_sw(w)
        out_words[4 * i] = a
        out_words[4 * i + 1] = b
        out_words[4 * i + 2] = x
        out_words[4 * i + 3] = y


@cuda.jit
def _encode_all(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = dev.encode_e4m3(x[i])


def same_bits(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    nan = np.isnan(want)
    return np.array_equal(np.isnan(got), nan) and np.array_equal(
        got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_device_decode_every_code_bit_for_bit():
    c = np.arange(256, dtype=np.uint8)
    one, words = np.zeros(256, np.float32), np.zeros(256, np.float32)
    _decode_all[8, 32](c, one, words)
    want = codes.decode(c, "e4m3").astype(np.float32)       # exact: e4m3 fits float32
    assert same_bits(one, want)                               # -0.0 for 0x80 included
    assert same_bits(words, want)                             # byte i = code i of a word
    assert np.isnan(one[[0x7F, 0xFF]]).all() and np.signbit(one[0x80])


def test_device_encode_every_tie_and_boundary():
    table = codes.value_table("e4m3")
    fin = np.unique(np.abs(table[np.isfinite(table)]))
    rng = np.random.default_rng(3)
    x = np.concatenate([fin, (fin[1:] + fin[:-1]) / 2, [448.0, 460.0, 464.0, 464.01, 1e9,
                                                        np.inf, 2.0 ** -10, 2.0 ** -11, 0.0],
                        rng.standard_normal(600) * np.exp2(rng.uniform(-14, 10, 600))])
    x = np.concatenate([x, -x, [np.nan]]).astype(np.float32)
    out = np.zeros(x.size, np.int32)
    _encode_all[(x.size + 63) // 64, 64](x, out)
    assert np.array_equal(out.astype(np.uint8), codes.encode(x, "e4m3", saturate=True))


def test_hardware_decode_is_refused_on_the_simulator():
    assert dev.hardware_decode() is False
    with pytest.raises(ValueError, match="simulator"):
        dev.decode_ops(True)


def test_forced_conversion_instruction_is_refused_below_sm89(monkeypatch):
    """hw_cvt=True on a GPU of compute capability 8.0 reached ptxas, which refuses the kernel
    ("Feature 'cvt with .e4m3x2/.e5m2x2' requires .target sm_89": tools/compile_ptx.py);
    now a ValueError naming hw_cvt. A stand-in device answers the capability."""
    class Device:
        compute_capability = (8, 0)
    monkeypatch.setattr(dev, "using_simulator", lambda: False)
    monkeypatch.setattr(dev.cuda, "get_current_device", lambda: Device(), raising=False)
    with pytest.raises(ValueError, match=r"hw_cvt=True.*8\.9 or newer.*has 8\.0"):
        dev.resolve_hw_cvt(True)
    assert dev.resolve_hw_cvt(None) is False and dev.resolve_hw_cvt(False) is False
    Device.compute_capability = (9, 0)
    assert dev.resolve_hw_cvt(True) is True and dev.resolve_hw_cvt(None) is True


@pytest.mark.parametrize("d", [64, 72, 128, 256])
def test_gpu_default_split_config_fits_48_kib_for_every_group(monkeypatch, d):
    """The GPU's default variant (8 warps) of the FP8 split kernel: the merge of the warps'
    states took 49,920 B at d = 128 from 3 query rows per KV head (a LaunchError on a GPU,
    found by tools/compile_ptx.py); split_config now halves the default warps until it fits,
    and an explicit warps= is still the caller's (refused when it does not fit)."""
    from flashcourse.cuda.decoding import decode_kernels as dk
    gpu_default = dk.default_launch
    monkeypatch.setattr(dk, "default_launch",
                        lambda item, rows: gpu_default(item, rows, simulator=False))
    for rows in range(1, 17):
        for item in (1, 2, 4):
            cfg, _ = dk.split_config("cuda_cores", d, item, rows, True)
            assert cfg.shared_bytes <= 48 * 1024, (item, rows, cfg)
            assert cfg.warps in (8, 4), cfg
            if item == 1 and rows >= 3:          # (65 KiB with 8 warps at 4 rows)
                assert cfg.warps == 4, cfg
    with pytest.raises(ValueError, match="shared memory"):
        dk.split_config("cuda_cores", 128, 1, 8, True, warps=8, row_groups=2)


# ---------------------------------------------------------------------------------------
# The numpy model
# ---------------------------------------------------------------------------------------

def test_quantize_cache_shapes_and_exact_dequantisation(rng):
    k = rng.standard_normal((2, 3, 37, 5)) * 10
    for sb, shape in ((None, (2, 3)), (8, (2, 3, 5)), (1, (2, 3, 37))):
        c, s = fkv.quantize_cache(k, sb)
        assert c.dtype == np.uint8 and c.shape == k.shape and s.shape == shape
        assert s.dtype == np.float32
        back = fkv.dequantize_cache(c, s, sb)
        assert back.dtype == np.float64
        # each value within e4m3's relative step of its scale's amax
        assert np.abs(back - k).max() <= 2.0 ** -4 * np.abs(k).max() * 1.0001
        # exact: the float64 product equals the float32 scale times the decoded value
        assert np.array_equal(back, codes.decode(c) * fkv.per_token(s, 37, sb))


def test_bytes_per_token():
    assert fkv.bytes_per_token(128, 8, itemsize=2) == 2 * 8 * 128 * 2          # fp16: 4 KiB
    assert fkv.bytes_per_token(128, 8, 16) == 2 * 8 * 128 + 2 * 8 * 4 / 16
    assert fkv.bytes_per_token(128, 8, 1) == 2 * 8 * (128 + 4)                 # FlashMLA-like
    assert fkv.bytes_per_token(128, 8, None, tokens=1000) == 2 * 8 * 128 + 2 * 8 * 4 / 1000


def test_append_model_opens_blocks_and_saturates_later_tokens():
    kp = np.zeros((2, 1, 8, 2), np.uint8)
    vp = kp.copy()
    ks = np.ones((2, 1, 2), np.float32)
    vs = ks.copy()
    table = np.array([[1, 0]], np.int32)
    k1 = np.array([[[[1.0, -2.0], [0.5, 0.25]]]])                # tokens 0, 1: block 0 opens
    fkv.append_tokens(kp, vp, ks, vs, table, np.array([0], np.int32), k1, k1, 4)
    assert ks[1, 0, 0] == np.float32(2.0 / 448)
    assert codes.decode(kp[1, 0, 1]).tolist() == [448.0 * 0.25, 448.0 * 0.125]
    k2 = np.array([[[[8.0, 0.0]]]])                               # token 2: same block, 4x amax
    fkv.append_tokens(kp, vp, ks, vs, table, np.array([2], np.int32), k2, k2, 4)
    assert ks[1, 0, 0] == np.float32(2.0 / 448)                  # the block keeps its scale
    assert codes.decode(kp[1, 0, 2, 0]) == 448.0                 # 8 saturates to 2
    k3 = np.full((1, 1, 3, 2), 3.0)                               # tokens 3..5: block 1 opens
    fkv.append_tokens(kp, vp, ks, vs, table, np.array([3], np.int32), k3, k3, 4)
    assert ks[1, 0, 1] == np.float32(3.0 / 448)
    assert codes.decode(kp[1, 0, 4:6]).max() == 448.0


def test_storage_errors_fp8_above_fp16(rng):
    q, k, v = fa.outlier_qkv(rng, (1, 4, 1, 64), (1, 2, 300, 64))
    errs = fkv.storage_errors(q, k, v, (None, 16))
    print({n: f"{e[0]:.2e} max, {e[1]:.2e} RMS" for n, e in errs.items()})
    assert errs["fp16"][0] < errs["fp8 per (B, Hkv)"][0] / 4
    assert errs["fp8 per 16 tokens"][1] <= errs["fp8 per (B, Hkv)"][1] * 1.5


# ---------------------------------------------------------------------------------------
# The contiguous decode
# ---------------------------------------------------------------------------------------

CASES = [
    # B, Hq, Hkv, Tq, Tk, d, causal, scale_block
    (2, 4, 2, 1, 77, 32, False, None),       # GQA 2, Tk not a multiple of anything
    (1, 4, 4, 1, 50, 19, False, 8),          # odd d, blocks of 8 (the last one short)
    (1, 8, 2, 4, 45, 16, True, 1),           # GQA 4, Tq 4 causal, a scale per token
    (2, 2, 1, 1, 33, 24, False, 16),
]


@pytest.mark.parametrize("b,hq,hkv,tq,tk,d,causal,sb", CASES)
@pytest.mark.parametrize("qdtype", [np.float32, np.float16])
def test_decode_matches_float64_on_the_dequantised_cache(rng, b, hq, hkv, tq, tk, d, causal,
                                                         sb, qdtype):
    q = rng.standard_normal((b, hq, tq, d)).astype(qdtype)
    k, v = rng.standard_normal((2, b, hkv, tk, d)) * np.array([4.0, 1.0])[:, None, None,
                                                                          None, None]
    k8, ks = fkv.quantize_cache(k, sb)
    v8, vs = fkv.quantize_cache(v, sb)
    o, lse = decode(q, k8, v8, k_scale=ks, v_scale=vs, scale_block=sb, causal=causal,
                    num_splits=2, block_k=16)
    kd, vd = fkv.dequantize_cache(k8, ks, sb), fkv.dequantize_cache(v8, vs, sb)
    o_ref, lse_ref = np_decode.split_kv_forward(q.astype(np.float64), kd, vd, causal=causal)
    assert o.dtype == qdtype
    if qdtype == np.float32:
        assert rel(o, o_ref) <= F32_TOL
    else:   # fp16 output: one rounding of o (2^-11 relative) on top of float32
        assert rel(o, o_ref) <= 2.0 ** -10
    assert np.abs(lse - lse_ref).max() <= F32_TOL * max(1.0, np.abs(lse_ref).max())


def test_decode_fp8_error_against_the_exact_cache_is_stated(rng):
    """The error FP8 storage adds, on random and outlier inputs, beside the fp16 cache's
    (the fp16 decode on the same kernel family: cuda.decode on float16 K, V)."""
    rows = {}
    for name, (q, k, v) in {
            "normal": tuple(rng.standard_normal(s).astype(np.float32)
                            for s in ((1, 4, 1, 32), (1, 2, 160, 32), (1, 2, 160, 32))),
            "outliers": fa.outlier_qkv(rng, (1, 4, 1, 32), (1, 2, 160, 32))}.items():
        o_ref, _ = np_decode.split_kv_forward(*(x.astype(np.float64) for x in (q, k, v)))
        o16, _ = decode(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
                        num_splits=2)
        row = {"fp16": rel(o16, o_ref)}
        for sb in (None, 16):
            k8, ks = fkv.quantize_cache(k, sb)
            v8, vs = fkv.quantize_cache(v, sb)
            o8, _ = decode(q, k8, v8, k_scale=ks, v_scale=vs, scale_block=sb, num_splits=2)
            row[f"fp8 {sb or 'head'}"] = rel(o8, o_ref)
        rows[name] = row
        assert row["fp16"] < 5e-3
        assert max(row["fp8 head"], row["fp8 16"]) <= FP8_LOOSE_BOUND
        assert row["fp8 head"] > row["fp16"]               # FP8 is not free
    print("max |o - o_exact| / max |o|:", rows)


def test_decode_device_inputs_and_check(rng):
    q = rng.standard_normal((1, 2, 1, 16)).astype(np.float32)
    k8, ks = fkv.quantize_cache(rng.standard_normal((1, 1, 40, 16)), 8)
    v8, vs = fkv.quantize_cache(rng.standard_normal((1, 1, 40, 16)), 8)
    want, _ = decode(q, k8, v8, k_scale=ks, v_scale=vs, scale_block=8)
    dq, dk, dv, dks, dvs = (cuda.to_device(x) for x in (q, k8, v8, ks, vs))
    o, lse = decode(dq, dk, dv, k_scale=dks, v_scale=dvs, scale_block=8, check=True)
    assert np.array_equal(o.copy_to_host(), want)
    bad = k8.copy()
    bad[0, 0, 3, 2] = 0xFF
    with pytest.raises(ValueError, match=r"k\[0, 0, 3, 2\] = 0xFF"):
        decode(dq, cuda.to_device(bad), dv, k_scale=dks, v_scale=dvs, scale_block=8,
               check=True)


def test_decode_bad_input_names_the_argument(rng):
    q = rng.standard_normal((1, 2, 1, 16)).astype(np.float32)
    k = rng.standard_normal((1, 1, 20, 16))
    k8, ks = fkv.quantize_cache(k, None)
    kb8, kbs = fkv.quantize_cache(k, 8)
    ok = {"k_scale": ks, "v_scale": ks}
    with pytest.raises(ValueError, match=r"k_scale must have shape \(1, 1\)"):
        decode(q, k8, k8, k_scale=kbs, v_scale=ks)
    with pytest.raises(ValueError, match=r"v_scale must have shape \(1, 1, 3\)"):
        decode(q, kb8, kb8, k_scale=kbs, v_scale=ks, scale_block=8)
    with pytest.raises(ValueError, match="k_scale= and v_scale="):
        decode(q, k8, k8)
    with pytest.raises(TypeError, match="for FP8 caches"):
        decode(q, k.astype(np.float32), k.astype(np.float32), **ok)
    with pytest.raises(TypeError, match=r"k must hold e4m3 codes as uint8.*view\(torch.uint8"):
        fp8_kv.decode_fp8(q, k8.astype(np.int8), k8, ks, ks)
    for nan in (0x7F, 0xFF):
        bad = k8.copy()
        bad[0, 0, 5, 1] = nan
        with pytest.raises(ValueError, match=f"v\\[0, 0, 5, 1\\] = 0x{nan:02X} is an e4m3 NaN"):
            decode(q, k8, bad, **ok)
        o, lse = decode(q, k8, bad, allow_nonfinite=True, **ok)       # NaN where it is seen
        assert np.isnan(o).all() and np.isnan(lse).all()
    for s in (np.zeros_like(ks), np.full_like(ks, np.nan), -ks):
        with pytest.raises(ValueError, match="k_scale must hold finite scales > 0"):
            decode(q, k8, k8, k_scale=s, v_scale=ks)
    with pytest.raises(ValueError, match="CUDA-core split kernel only"):
        decode(q, k8, k8, kernel="tensor_core", **ok)
    with pytest.raises(ValueError, match="scale_block"):
        decode(q, kb8, kb8, k_scale=kbs, v_scale=kbs, scale_block=0)


# ---------------------------------------------------------------------------------------
# The paged decode and the append
# ---------------------------------------------------------------------------------------

def paged_case(rng, lens, ps, hkv, d, extra=2):
    num_pages = sum(pc.pages_for(n, ps) for n in lens) + extra
    width = max(pc.pages_for(n, ps) for n in lens) + 1
    table = np.full((len(lens), width), -1, np.int32)
    order, at = rng.permutation(num_pages), 0
    for b, n in enumerate(lens):
        need = pc.pages_for(n, ps)
        table[b, :need] = order[at:at + need]
        at += need
    kp = rng.standard_normal((num_pages, hkv, ps, d)) * 3
    vp = rng.standard_normal((num_pages, hkv, ps, d))
    return kp, vp, table, np.array(lens, np.int32)


@pytest.mark.parametrize("ps,sb,tq,hq,causal", [(16, 8, 1, 4, False), (32, 32, 4, 8, True),
                                               (16, 1, 1, 2, False)])
def test_paged_decode_with_block_scales(rng, ps, sb, tq, hq, causal):
    kp, vp, table, lens = paged_case(rng, [37, 5, 64], ps, 2, 16)
    k8, ks = fkv.quantize_cache(kp, sb)                 # per block within each page
    v8, vs = fkv.quantize_cache(vp, sb)
    q = rng.standard_normal((3, hq, tq, 16)).astype(np.float32)
    o, lse = paged_decode(q, k8, v8, table, lens, k_scale=ks, v_scale=vs, scale_block=sb,
                          causal=causal)
    kd = fkv.pool_values(k8, ks, table, lens, sb)
    vd = fkv.pool_values(v8, vs, table, lens, sb)
    o_ref, lse_ref = pc.paged_reference(q.astype(np.float64), kd, vd, table, lens,
                                        causal=causal)
    fin = np.isfinite(lse_ref)
    assert rel(o, o_ref) <= F32_TOL
    assert np.abs(lse[fin] - lse_ref[fin]).max() <= F32_TOL * np.abs(lse_ref[fin]).max()


def test_paged_decode_per_head_scales_equals_contiguous(rng):
    """Per-(B, Hkv) scales on a pool: the contiguous cache quantised, then paged; the
    result equals the contiguous FP8 decode's to float32 rounding."""
    b, hkv, n, d, ps = 2, 2, 48, 16, 16
    k = rng.standard_normal((b, hkv, n, d)) * 2
    v = rng.standard_normal((b, hkv, n, d))
    k8, ks = fkv.quantize_cache(k, None)
    v8, vs = fkv.quantize_cache(v, None)
    table = rng.permutation(b * n // ps).astype(np.int32).reshape(b, n // ps)
    kp = np.zeros((b * n // ps, hkv, ps, d), np.uint8)
    vp = kp.copy()
    for i in range(b):
        for j in range(n // ps):
            kp[table[i, j]] = k8[i, :, j * ps:(j + 1) * ps]
            vp[table[i, j]] = v8[i, :, j * ps:(j + 1) * ps]
    q = rng.standard_normal((b, 4, 1, d)).astype(np.float32)
    lens = np.full(b, n, np.int32)
    o, _ = paged_decode(q, kp, vp, table, lens, k_scale=ks, v_scale=vs)
    o_c, _ = decode(q, k8, v8, k_scale=ks, v_scale=vs)
    assert rel(o, o_c) <= F32_TOL
    with pytest.raises(ValueError, match=r"k_scale must have shape \(2, 2\)"):
        paged_decode(q, kp, vp, table, lens, k_scale=ks[:1], v_scale=vs)
    with pytest.raises(ValueError, match="scale_block = 5 must divide page_size = 16"):
        paged_decode(q, kp, vp, table, lens, k_scale=ks, v_scale=vs, scale_block=5)


@pytest.mark.parametrize("sb,dt", [(None, np.float32), (4, np.float16)])
def test_append_kernel_equals_the_numpy_model(rng, sb, dt):
    ps, hkv, d = 16, 2, 20
    table = np.array([[3, 0, 4], [1, 2, 5]], np.int32)
    lens = np.array([14, 2], np.int32)            # sequence 0 crosses a page
    shape = (2, hkv) if sb is None else (6, hkv, ps // sb)
    kp = np.zeros((6, hkv, ps, d), np.uint8)
    ks = np.full(shape, 0.01, np.float32)
    k_new = (rng.standard_normal((2, hkv, 7, d)) * 3).astype(dt)
    v_new = rng.standard_normal((2, hkv, 7, d)).astype(dt)
    want = [kp.copy(), kp.copy(), ks.copy(), ks.copy() * 2]
    fkv.append_tokens(*want, table, lens, k_new, v_new, sb)
    got = [cuda.to_device(x) for x in (kp, kp, ks, ks * 2)]
    fp8_kv.append_fp8(*got, cuda.to_device(table), cuda.to_device(lens),
                      cuda.to_device(k_new), cuda.to_device(v_new), scale_block=sb)
    for g, w in zip(got, want):
        assert np.array_equal(g.copy_to_host(), w)
    assert (want[0] != 0).sum() > 0
    with pytest.raises(ValueError, match="k_scale must be a float32 device array of shape"):
        fp8_kv.append_fp8(got[0], got[1], cuda.to_device(ks[:1]), got[3],
                          cuda.to_device(table), cuda.to_device(lens),
                          cuda.to_device(k_new), cuda.to_device(v_new), scale_block=sb)


def test_gpu_fp8_kv_simulator_smoke(tmp_path):
    """benchmarks/gpu_fp8.py --simulator-smoke --parts kv: its FP8 KV checks at tiny sizes on
    the simulator (the integer decode only), and a record that matches the fp8 schema."""
    from flashcourse import results
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_fp8.py"),
                        "--simulator-smoke", "--parts", "kv", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = results.load_json(tmp_path / "gpu_fp8.json")
    results.validate(doc, "fp8", "gpu_fp8.json")
    assert len(doc["kv_checks"]) >= 10 and all(c["ok"] for c in doc["kv_checks"])
