"""flashcourse.fp8: e4m3/e5m2 bit for bit (every code, the ties, the boundaries, a brute-force
nearest-value oracle, and ml_dtypes where it is installed), scales, the Hadamard rotation,
and the FP8 forward simulation against float64."""

import numpy as np
import pytest

from flashcourse.fp8 import attention as A
from flashcourse.fp8 import codes as C
from flashcourse.fp8 import hadamard as HD
from flashcourse.fp8 import scaling as SC

FMTS = ("e4m3", "e5m2")


def oracle(x, fmt, saturate):
    """Brute force, independent of codes.round_to_fp8: the finite value of the table
    nearest to x, ties to the even code; overflow as the module docstring states."""
    f = C.fp8_format(fmt)
    table = C.value_table(fmt)
    codes = np.arange(256)
    ok = np.isfinite(table) & (codes < 128)                       # non-negative codes
    vals, cods = table[ok], codes[ok]
    out = np.empty(len(x))
    for i, xi in enumerate(np.asarray(x, np.float64)):
        if np.isnan(xi):
            out[i] = np.nan
            continue
        a = abs(xi)
        # past the largest finite value by more than half its gap: overflow
        gap = f.max_finite - np.sort(vals)[-2]
        if a > f.max_finite + gap / 2 or (a == f.max_finite + gap / 2
                                           and (cods[vals == f.max_finite][0] & 1)):
            r = f.max_finite if saturate else (np.inf if f.has_inf else np.nan)
        else:
            dist = np.abs(vals - a)
            best = np.flatnonzero(dist == dist.min())
            pick = best[0] if len(best) == 1 else next(b for b in best if cods[b] % 2 == 0)
            r = vals[pick]
        out[i] = np.copysign(r, xi)
    return out


def same(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.array_equal(np.isnan(a), np.isnan(b)) and \
        np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]) and \
        np.array_equal(np.signbit(a[~np.isnan(a)]), np.signbit(b[~np.isnan(b)]))


# -- the codes ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FMTS)
def test_every_code_decodes_and_encodes_back(fmt):
    table = C.value_table(fmt)
    codes = np.arange(256, dtype=np.uint8)
    assert same(C.decode(codes, fmt), table)
    real = ~np.isnan(table)
    assert np.array_equal(C.encode(table[real], fmt, saturate=False), codes[real])
    finite = np.isfinite(table)
    assert np.array_equal(C.encode(table[finite], fmt, saturate=True), codes[finite])
    # NaN and infinity codes: e4m3 has two NaNs and no inf; e5m2 six NaNs and two infs
    nan_codes = sorted(int(c) for c in codes[np.isnan(table)])
    inf_codes = sorted(int(c) for c in codes[np.isinf(table)])
    if fmt == "e4m3":
        assert nan_codes == [0x7F, 0xFF] and inf_codes == []
    else:
        assert nan_codes == [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF] and inf_codes == [0x7C, 0xFC]
    positive = table[(codes < 128) & finite]
    assert np.all(np.diff(positive) > 0)                         # codes sort as values


@pytest.mark.parametrize("fmt,largest,normal,sub", [("e4m3", 448.0, 2.0 ** -6, 2.0 ** -9),
                                                     ("e5m2", 57344.0, 2.0 ** -14, 2.0 ** -16)])
def test_range_constants(fmt, largest, normal, sub):
    f = C.fp8_format(fmt)
    table = C.value_table(fmt)
    fin = table[np.isfinite(table)]
    assert fin.max() == largest == f.max_finite
    assert np.min(fin[fin > 0]) == sub == f.min_subnormal
    assert f.min_normal == normal
    assert C.bit_fields(int(C.encode(largest, fmt)), fmt) == (
        ("0", "1111", "110") if fmt == "e4m3" else ("0", "11110", "11"))


E4M3_CASES = [  # x, saturating result, non-saturating result
    (448.0, 448.0, 448.0), (464.0, 448.0, 448.0),             # 464: tie 448 / 480, even 448
    (464.0001, 448.0, np.nan), (1e9, 448.0, np.nan), (np.inf, 448.0, np.nan),
    (-np.inf, -448.0, np.nan), (-500.0, -448.0, np.nan),
    (2.0 ** -9, 2.0 ** -9, 2.0 ** -9), (2.0 ** -10, 0.0, 0.0),  # tie 0 / 2^-9: even 0
    (2.0 ** -10 * 1.000001, 2.0 ** -9, 2.0 ** -9), (1.5 * 2.0 ** -9, 2.0 ** -8, 2.0 ** -8),
    (2.5 * 2.0 ** -9, 2.0 ** -8, 2.0 ** -8), (-0.0, -0.0, -0.0),
    (1.0625, 1.0, 1.0), (1.1875, 1.25, 1.25),                 # ties: 1.000 and 1.010 even
    (2.0 ** -6 - 2.0 ** -10, 2.0 ** -6, 2.0 ** -6),           # tie 7/8 -> 1.0 x 2^-6
    (np.nan, np.nan, np.nan)]
E5M2_CASES = [
    (57344.0, 57344.0, 57344.0), (61439.99, 57344.0, 57344.0), (61440.0, 57344.0, np.inf),
    (np.inf, 57344.0, np.inf), (-np.inf, -57344.0, -np.inf), (-1e30, -57344.0, -np.inf),
    (2.0 ** -17, 0.0, 0.0), (3 * 2.0 ** -17, 2.0 ** -15, 2.0 ** -15), (1.125, 1.0, 1.0),
    (1.375, 1.5, 1.5), (np.nan, np.nan, np.nan)]


@pytest.mark.parametrize("fmt,cases", [("e4m3", E4M3_CASES), ("e5m2", E5M2_CASES)])
def test_boundaries_and_ties(fmt, cases):
    x = np.array([c[0] for c in cases])
    assert same(C.round_to_fp8(x, fmt, saturate=True), [c[1] for c in cases])
    assert same(C.round_to_fp8(x, fmt, saturate=False), [c[2] for c in cases])
    assert same(oracle(x, fmt, True), [c[1] for c in cases])       # the oracle agrees
    assert same(oracle(x, fmt, False), [c[2] for c in cases])


@pytest.mark.parametrize("fmt", FMTS)
def test_every_halfway_point_rounds_to_the_even_code(fmt):
    table = C.value_table(fmt)
    codes = np.arange(256)
    keep = np.isfinite(table) & (codes < 128)
    vals, cods = table[keep], codes[keep]
    order = np.argsort(vals)
    vals, cods = vals[order], cods[order]
    mids = (vals[1:] + vals[:-1]) / 2                          # exact in float64
    want = np.where(cods[:-1] % 2 == 0, vals[:-1], vals[1:])
    for sign in (1.0, -1.0):
        got = C.round_to_fp8(sign * mids, fmt)
        assert same(got, sign * want)
        # a hair either side goes to the nearer neighbour
        assert same(C.round_to_fp8(sign * np.nextafter(mids, 0), fmt), sign * vals[:-1])
        assert same(C.round_to_fp8(sign * np.nextafter(mids, np.inf), fmt), sign * vals[1:])


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("saturate", [True, False])
def test_random_values_against_the_brute_force_oracle(fmt, saturate):
    rng = np.random.default_rng(53)
    f = C.fp8_format(fmt)
    top = np.log2(f.max_finite) + 1
    x = (rng.standard_normal(3000) * np.exp2(rng.uniform(np.log2(f.min_subnormal) - 3, top,
                                                          3000))).astype(np.float32)
    assert same(C.round_to_fp8(x, fmt, saturate=saturate), oracle(x, fmt, saturate))
    assert same(C.decode(C.encode(x, fmt, saturate=saturate), fmt),
                C.round_to_fp8(x, fmt, saturate=saturate))


@pytest.mark.parametrize("fmt", FMTS)
def test_against_ml_dtypes(fmt):
    """ml_dtypes' float8 casts are non-saturating (overflow: NaN for e4m3fn, inf for e5m2);
    clipping first gives the saturating conversion. A test-only cross-check
    (requirements-dev.txt pins ml-dtypes)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dt = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt]
    f = C.fp8_format(fmt)
    rng = np.random.default_rng(8)
    n = 400_000
    x = (rng.standard_normal(n) * np.exp2(rng.uniform(-22, 18, n))).astype(np.float32)
    table = C.value_table(fmt)
    fin = np.unique(np.abs(table[np.isfinite(table)]))
    mids = ((fin[1:] + fin[:-1]) / 2).astype(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e38, -1e38], np.float32)
    x = np.concatenate([x, mids, -mids, specials])
    theirs = x.astype(dt).view(np.uint8)
    ours = C.encode(x, fmt, saturate=False)
    their_nan = np.isnan(C.decode(theirs, fmt))
    assert np.array_equal(np.isnan(C.decode(ours, fmt)), their_nan)
    assert np.array_equal(ours[~their_nan], theirs[~their_nan])
    clipped = np.clip(x, -f.max_finite, f.max_finite).astype(dt).view(np.uint8)
    real = ~np.isnan(x)
    assert np.array_equal(C.encode(x, fmt, saturate=True)[real], clipped[real])


def test_nan_code_and_shapes():
    assert C.encode(np.nan, "e4m3") == 0x7F and C.encode(-np.nan, "e5m2") == 0x7F
    x = np.ones((2, 3, 4), np.float32)
    assert C.encode(x).shape == (2, 3, 4) and C.encode(x).dtype == np.uint8
    assert np.ndim(C.round_to_fp8(1.3)) == 0


@pytest.mark.parametrize("call,match", [
    (lambda: C.round_to_fp8([1.0], "e3m4"), "fmt must be one of"),
    (lambda: C.round_to_fp8([1.0], saturate="yes"), "saturate must be True or False"),
    (lambda: C.round_to_fp8(np.array(["a"])), "x must hold real numbers"),
    (lambda: C.decode(np.array([1, 2]), "e4m3"), "codes must be a uint8 array"),
    (lambda: C.bit_fields(256), "code must be an integer in 0 ... 255"),
])
def test_bad_arguments_name_themselves(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# -- scales -----------------------------------------------------------------------------

def test_block_scales_cover_ragged_blocks_and_put_amax_on_448(rng):
    x = rng.standard_normal((2, 3, 70, 5)) * np.exp(rng.uniform(-3, 3, (2, 3, 70, 1)))
    s, tokens = SC.scales(x, "block", block=16)
    assert s.shape == (2, 3, 5) and tokens == 16 and s.dtype == np.float32
    amax = np.abs(x[1, 2, 64:70]).max()                          # the short last block
    assert s[1, 2, 4] == np.float32(amax / 448)
    q = SC.quantize(x, "block", block=16)
    vals = C.decode(q.codes, "e4m3")
    assert np.abs(vals).max() == 448.0                           # each block's amax -> 448
    back = q.dequantize()
    assert back.shape == x.shape and back.dtype == np.float32
    # relative error of a normal e4m3 number: at most 2^-4 (plus float32 steps)
    big = np.abs(vals) >= 2.0 ** -6
    err = np.abs(back - x)[big] / np.abs(x)[big]
    assert err.max() <= 2.0 ** -4 * (1 + 1e-5)


def test_scheme_shapes_and_values(rng):
    x = rng.standard_normal((2, 4, 9, 3))
    x[1, 2, 3, 1] = 50.0
    st, tt = SC.scales(x, "tensor")
    sh, th = SC.scales(x, "head")
    assert st.shape == sh.shape == (2, 4, 1) and tt == th == 9
    assert np.all(st == np.float32(50.0 / 448))
    assert sh[1, 2, 0] == st[0, 0, 0] and sh[0, 0, 0] < st[0, 0, 0]


def test_zeros_and_extreme_magnitudes_survive(rng):
    z = np.zeros((1, 1, 5, 4))
    q = SC.quantize(z, "block", block=2)
    assert np.all(q.scale == 1.0) and np.all(q.dequantize() == 0.0)
    for mag in (1e-30, 1e30):                                    # far outside e4m3's range
        x = rng.standard_normal((1, 2, 7, 4)) * mag
        back = SC.fake_quantize(x, "head").astype(np.float64)
        assert np.all(np.isfinite(back))
        assert np.abs(back - x).max() <= 2.0 ** -4 * np.abs(x).max() * 1.01


@pytest.mark.parametrize("call,match", [
    (lambda: SC.scales(np.ones((2, 3)), "row"), "scheme must be one of"),
    (lambda: SC.scales(np.ones((2, 3)), "block", block=0), "block must be a positive"),
    (lambda: SC.quantize(np.array([[np.nan, 1.0]])), "x contains NaN or inf"),
    (lambda: SC.quantize([[1.0]]), "x must be a numpy array"),
    (lambda: SC.amax_scale(-1.0), "amax must be finite and >= 0"),
])
def test_bad_scaling_arguments(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# -- the Hadamard rotation --------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 4, 8, 16, 64, 128, 256])
def test_hadamard_is_orthogonal_and_keeps_scores(d, rng):
    h = HD.hadamard(d)
    assert np.allclose(h @ h.T, np.eye(d), atol=1e-14) and np.allclose(h, h.T)
    assert np.all(np.abs(np.abs(h) - 1 / np.sqrt(d)) < 1e-15)
    q, k = rng.standard_normal((1, 2, 7, d)), rng.standard_normal((1, 2, 5, d))
    signs = rng.choice([-1.0, 1.0], d)
    for sg in (None, signs):
        qr, kr = HD.rotate(q, sg), HD.rotate(k, sg)
        assert np.allclose(qr @ np.swapaxes(kr, -1, -2), q @ np.swapaxes(k, -1, -2),
                           rtol=1e-12, atol=1e-12)


def test_rotation_spreads_an_outlier():
    d = 128
    x = np.zeros((1, d))
    x[0, 37] = 40.0
    r = HD.rotate(x)
    assert np.allclose(np.abs(r), 40.0 / np.sqrt(d))             # every coordinate +-c/sqrt(d)
    assert np.isclose(np.linalg.norm(r), 40.0)


def test_odd_d_is_padded_and_scores_unchanged(rng):
    q, k = rng.standard_normal((3, 7, 5)), rng.standard_normal((3, 6, 5))
    qp, kp = HD.pad_to_power_of_two(q), HD.pad_to_power_of_two(k)
    assert qp.shape == (3, 7, 8)
    s = HD.rotate(qp) @ np.swapaxes(HD.rotate(kp), -1, -2)
    assert np.allclose(s, q @ np.swapaxes(k, -1, -2), atol=1e-12)


@pytest.mark.parametrize("call,match", [
    (lambda: HD.hadamard(12), "d must be a power of two"),
    (lambda: HD.hadamard(0), "d must be a positive integer"),
    (lambda: HD.rotate(np.ones((2, 6))), "d must be a power of two"),
    (lambda: HD.rotate(np.ones((2, 4)), signs=[1, 2, 1, 1]), "signs must be None or"),
])
def test_bad_hadamard_arguments(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# -- the FP8 forward ---------------------------------------------------------------------

def independent_fp8_forward(q, k, v, scheme, block, offset=8):
    """Dense, float64, written from the module docstring without its helpers: the same
    quantized inputs (codes.round_to_fp8 of x / s), final-max softmax (key_block >= Tk)."""
    def fq(x):
        t = x.shape[-2]
        if scheme == "tensor":
            s = np.full(x.shape[:-2] + (t, 1), np.abs(x).max() / 448.0)
        else:
            nb = -(-t // block)
            s = np.empty(x.shape[:-2] + (t, 1))
            for i in range(nb):
                sl = slice(i * block, (i + 1) * block)
                s[..., sl, :] = np.abs(x[..., sl, :]).max(axis=(-2, -1))[..., None, None] / 448
        s = s.astype(np.float32).astype(np.float64)
        return C.round_to_fp8((x / s).astype(np.float32)) * s
    q, k, v = (fq(x.astype(np.float64)) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True)) * 2.0 ** offset
    return (C.round_to_fp8(p) @ v) / p.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("tq,tk,d,block", [(13, 29, 7, 5), (20, 11, 16, 8), (1, 40, 3, 64)])
@pytest.mark.parametrize("scheme", ["tensor", "block"])
def test_simulation_matches_an_independent_dense_version(tq, tk, d, block, scheme, rng):
    q, k, v = (rng.standard_normal((2, t, d)).astype(np.float32) for t in (tq, tk, tk))
    o = A.fp8_attention(q, k, v, scheme=scheme, block=block, key_block=tk)
    want = independent_fp8_forward(q, k, v, scheme, block)
    # float32 against float64 on the same FP8 numbers: P~ may round the other way at a
    # tie (one e4m3 step, 2^-4 relative), which moves o by at most |v| 2^-4 p
    assert np.abs(o - want).max() <= 2e-3 * np.abs(v).max()
    assert np.sqrt(np.mean((o - want) ** 2)) <= 2e-4 * np.abs(v).max()


def test_online_softmax_blocks_agree_with_dense_up_to_fp8_steps(rng):
    q, k, v = A.outlier_qkv(rng, (1, 2, 33, 16), (1, 2, 57, 16))
    dense = A.fp8_attention(q, k, v, key_block=57)
    ref = A.reference(q, k, v)
    for kb in (1, 8, 20):
        o = A.fp8_attention(q, k, v, key_block=kb)
        # the running max quantizes early blocks on other grids: same error level
        assert A.rmse(o, ref) <= 1.5 * A.rmse(dense, ref) + 1e-4


def test_fp16_baseline_within_its_rounding_bound(rng):
    q, k, v = (rng.standard_normal((2, t, 24)).astype(np.float32) for t in (19, 31, 31))
    o = A.fp16_attention(q, k, v, key_block=8)
    r = [x.astype(np.float16).astype(np.float64) for x in (q, k, v)]
    o_ref = A.reference(*r)
    s = r[0] @ np.swapaxes(r[1], -1, -2) / np.sqrt(24)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    u = 2.0 ** -11
    bound = 2 * u * (p @ np.abs(r[2]) + np.abs(o_ref)) + 1e-6   # P rounded to fp16, fp32 sums
    assert np.all(np.abs(o - o_ref) <= bound)


def test_fp8_error_is_bounded_per_element_without_outliers(rng):
    """Without outliers every step is a relative e4m3 rounding: |o - o_ref| stays within a
    few units 2^-4 of (P|V|), element by element."""
    q, k, v = (rng.standard_normal((3, t, 32)).astype(np.float32) for t in (40, 45, 45))
    o = A.fp8_attention(q, k, v, scheme="block", block=16, hadamard=True)
    o_ref = A.reference(q, k, v)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64) / np.sqrt(32)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    scale = p @ np.abs(v.astype(np.float64))
    assert np.all(np.abs(o - o_ref) <= 8 * 2.0 ** -4 * (scale + np.abs(o_ref)))


def test_extreme_scores_stay_finite(rng):
    """Tiny and huge scores: finite, each output row a weighted mean of V's rows (within
    their column range, up to V's own FP8 rounding); tiny scores give V's column mean."""
    q, k, v = (rng.standard_normal((1, 1, t, 8)).astype(np.float32) for t in (9, 12, 12))
    for mag in (1e-20, 1e3):
        o = A.fp8_attention(q * mag, k * mag, v, scheme="head")
        assert np.all(np.isfinite(o))
        slack = 2.0 ** -4 * np.abs(v).max()
        assert np.all(o <= v.max(axis=-2, keepdims=True) + slack)
        assert np.all(o >= v.min(axis=-2, keepdims=True) - slack)
    o = A.fp8_attention(q * 1e-20, k * 1e-20, v, scheme="head")
    assert np.abs(o - v.mean(axis=-2, keepdims=True)).max() <= 0.07 * np.abs(v).max()


def test_p_offset_and_underflow():
    p = np.array([1.0, 2.0 ** -9, 2.0 ** -10, 2.0 ** -11, 2.0 ** -17])
    assert A.quantize_p(p).tolist() == [1.0, 2.0 ** -9, 0.0, 0.0, 0.0]
    lifted = A.quantize_p(p * 256) / 256
    assert lifted.tolist() == [1.0, 2.0 ** -9, 2.0 ** -10, 2.0 ** -11, 2.0 ** -17]
    with pytest.raises(ValueError, match="exceeds e4m3's 448"):
        A.quantize_p([512.0])


def test_outlier_inputs_follow_the_paper(rng):
    q, k, v = A.outlier_qkv(rng, (4, 64, 64), (4, 64, 64))
    x = np.concatenate([a.ravel() for a in (q, k, v)]).astype(np.float64)
    assert q.dtype == np.float32 and x.size == 3 * 16384
    big = np.abs(x) > 6                      # |N(0,1)| > 6: 2e-9; outliers: most of 0.1%
    assert 0.0002 < big.mean() < 0.002
    assert abs(np.std(x) - np.sqrt(1 + 0.001 * 100)) < 0.05


def test_the_error_table_orders_the_schemes():
    """The lesson's claim at a fixed seed, notebook-sized: FP8 loses about two orders of
    magnitude against fp16; rotating Q and K halves per-tensor FP8's error; block + Hadamard
    meets the issue's absolute bar at d = 128."""
    rng = np.random.default_rng(15)
    q, k, v = A.outlier_qkv(rng, (1, 2, 512, 128), (1, 2, 512, 128))
    t = A.error_table(q, k, v)
    assert t["fp16 baseline"] < 1e-3 * 2
    assert t["FP8 per block + Hadamard"] <= 0.7 * t["FP8 per tensor"]
    assert t["FP8 per tensor + Hadamard"] <= 0.7 * t["FP8 per tensor"]
    assert t["FP8 per block + Hadamard"] <= 1.1e-2
    assert t["fp16 baseline"] * 20 < t["FP8 per block + Hadamard"]


@pytest.mark.parametrize("call,match", [
    (lambda: A.fp8_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)),
                             scheme="rows"), "scheme must be one of"),
    (lambda: A.fp8_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)),
                             p_log2_offset=9), "p_log2_offset must be at most 8"),
    (lambda: A.fp8_attention(np.ones((2, 3)), np.ones((2, 4)), np.ones((2, 4))),
     "head dim d of q and k must match"),
    (lambda: A.fp8_attention(np.full((2, 3), np.nan), np.ones((2, 3)), np.ones((2, 3))),
     "q contains NaN or inf"),
    (lambda: A.outlier_qkv(3, (1, 2), (1, 2)), "rng must be a numpy Generator"),
    (lambda: A.rmse(np.ones(3), np.ones(4)), "o and o_ref must have the same shape"),
])
def test_bad_attention_arguments(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_the_gpu_benchmark_smoke_run_writes_a_valid_record(tmp_path):
    """benchmarks/gpu_fp8.py --simulator-smoke: its numpy parts on the CPU, tiny, and a
    gpu_fp8.json that matches its schema (flashcourse/schemas/fp8.json)."""
    import importlib.util

    from flashcourse import results
    path = results.ROOT / "benchmarks" / "gpu_fp8.py"
    spec = importlib.util.spec_from_file_location("bench_gpu_fp8", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--simulator-smoke", "--parts", "numerics", "--out", str(tmp_path)]) == 0
    doc = results.load_json(tmp_path / "gpu_fp8.json")
    results.validate(doc, "fp8", "gpu_fp8.json")
    assert results.kind_of("h100_gpu_fp8.json") == "fp8"
    assert doc["checks"][0]["ok"] and len(doc["bench"]) == len(mod.SEEDS)
    assert {r["head_dim"] for r in doc["bench"]} == {32}
    with pytest.raises(SystemExit, match="--sizes"):
        mod.parse_sizes("2x4096")
    assert mod.parse_sizes("2x4096x128,1x16384x128") == [(2, 4096, 128), (1, 16384, 128)]
