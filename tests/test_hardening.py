"""No silent wrong results (issue 14, items 1, 2 and 10).

1. Scores that overflow the compute type must never look like masking (o = 0,
   lse = -inf is the result of a row with no visible key, and only of such a row):
   every forward raises a ValueError that says so. NaN/inf inputs under
   allow_nonfinite=True make exactly the rows that see them NaN.
2. A backward given an lse that does not belong to (q, k, causal, scale) raises.
10. The dense reference refuses sizes it cannot hold; TrafficCounter byte sizes and
    exp2_poly's input are checked.

CUDA kernels run on Numba's simulator here (tiny shapes: a few seconds in all).
"""

import functools

import numpy as np
import pytest

import flashcourse.cuda as fcuda
from flashcourse import cpu, reference, tiled
from flashcourse.counter import TrafficCounter
from flashcourse.cuda.registry import BACKWARD as CUDA_BACKWARD_KERNELS
from helpers import cpu_forwards

# Overflow and NaN are what these tests feed in: numpy's and the simulator's warnings
# about them are expected.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FORWARDS = {
    **cpu_forwards(2, 3, sep="_"),
    "cuda_flash": lambda q, k, v, **kw: fcuda.forward(q, k, v, kernel="flash", **kw),
    "cuda_textbook": lambda q, k, v, **kw: fcuda.forward(q, k, v, kernel="textbook", **kw),
    "cuda_dense": lambda q, k, v, **kw: fcuda.forward(q, k, v, kernel="dense", **kw),
    "cuda_decode": lambda q, k, v, **kw: fcuda.forward(q, k, v, kernel="decode", **kw),
}
TILE_KERNELS = ("dense", "cuda_flash", "cuda_textbook", "cuda_dense",   # P V of whole tiles
                "cuda_decode")
NUMPY_FLOAT64 = ("tiled_fa2", "tiled_fa1", "dense", "cpu_loops", "cpu_rows", "cpu_cols")


def inputs(dtype, size, seed=0, lead=(2,), tq=5, tk=7, d=4):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((*lead, tq, d)) * size).astype(dtype)
    k = (rng.standard_normal((*lead, tk, d)) * size).astype(dtype)
    v = rng.standard_normal((*lead, tk, d)).astype(dtype)
    return q, k, v


# --- 1. overflow ------------------------------------------------------------------

OVERFLOWS = [  # (dtype, input size, scale): |S| far beyond the compute type's range
    (np.float32, 1e20, None),
    (np.float32, 1.0, 1e38),
    (np.float64, 1e200, None),
]


@pytest.mark.parametrize("name", FORWARDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype,size,scale", OVERFLOWS)
def test_overflowing_scores_raise_instead_of_looking_masked(name, causal, dtype, size, scale):
    q, k, v = inputs(dtype, size)
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="overflow"):
        FORWARDS[name](q, k, v, causal=causal, scale=scale)


@pytest.mark.parametrize("name", FORWARDS)
@pytest.mark.parametrize("causal", [False, True])
def test_scores_at_the_edge_are_right_or_raise(name, causal):
    """q, k ~ 1e19, d = 4: |S| reaches 1.9e38, just inside float32, but q.k before the
    scale (3.7e38) does not. A path may compute it (the reference's answer: o within
    1e-6 absolute, lse within 1e-5 relative) or raise; never return a masked row."""
    q, k, v = inputs(np.float32, 1e19)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
    try:
        with np.errstate(all="ignore"):
            o, lse = FORWARDS[name](q, k, v, causal=causal)
    except ValueError as exc:
        assert "overflow" in str(exc)
        return
    assert np.allclose(o, o_ref, rtol=0, atol=1e-6)
    assert np.allclose(lse, lse_ref, rtol=1e-5, atol=0)


def _assert_causal_matches_reference(name, dtype, size, o_atol, lse_rtol):
    """FORWARDS[name] on `inputs(dtype, size)`, causal: o within o_atol (absolute) and lse
    within lse_rtol (relative) of the reference."""
    q, k, v = inputs(dtype, size)
    o, lse = FORWARDS[name](q, k, v, causal=True)
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    assert np.allclose(o, o_ref, rtol=0, atol=o_atol)
    assert np.allclose(lse, lse_ref, rtol=lse_rtol, atol=0)


@pytest.mark.parametrize("name", FORWARDS)
def test_large_finite_scores_are_computed(name):
    """|S| up to ~1e36 fits float32: no error, and the answer is the reference's.

    Such a softmax is one-hot: o equals one row of v (tolerance 1e-6 absolute, as
    float32 rounding of v) and lse the largest score (relative 1e-5).
    """
    _assert_causal_matches_reference(name, np.float32, 1e17, o_atol=1e-6, lse_rtol=1e-5)


@pytest.mark.parametrize("name", NUMPY_FLOAT64)
def test_float64_inputs_where_float32_would_overflow(name):
    """Around 1e19 float64 inputs work on the numpy and CPU paths (relative 1e-12)."""
    _assert_causal_matches_reference(name, np.float64, 1e19, o_atol=1e-12, lse_rtol=1e-12)


@pytest.mark.parametrize("name", FORWARDS)
@pytest.mark.parametrize("causal", [False, True])
def test_nan_key_makes_only_the_rows_that_see_it_nan(name, causal):
    """Tq = 5, Tk = 7: causal row i sees keys 0..i+2, so a NaN in key 3 reaches rows 1..4."""
    q, k, v = inputs(np.float32, 1.0)
    k[0, 3, 1] = np.nan
    o, lse = FORWARDS[name](q, k, v, causal=causal, allow_nonfinite=True)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal, allow_nonfinite=True)
    hit = np.zeros((2, 5), bool)
    hit[0, 1 if causal else 0:] = True
    assert np.isnan(lse[hit]).all() and np.isnan(o[hit]).all()
    assert not np.isneginf(lse).any(), "a row that sees a key never looks masked"
    assert np.allclose(o[~hit], o_ref[~hit], rtol=0, atol=1e-5)
    assert np.allclose(lse[~hit], lse_ref[~hit], rtol=1e-5, atol=0)


@pytest.mark.parametrize("name", FORWARDS)
@pytest.mark.parametrize("where", ["q", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_first_query_or_value_stays_local(name, where, bad):
    """A NaN/inf in q[0, 0, 0] spoils row 0 of head 0 only (forward_rows once spread it
    to every row of every head through `zero = q[0, 0, 0] * 0`); in v[1, 6] (the last
    key of head 1, seen by causal rows 4 only) it spoils that row only."""
    q, k, v = inputs(np.float32, 1.0)
    hit = np.zeros((2, 5), bool)
    if where == "q":
        q[0, 0, 0] = bad
        hit[0, 0] = True
    else:
        v[1, 6, 2] = bad
        hit[1, 4] = True
    o, lse = FORWARDS[name](q, k, v, causal=True, allow_nonfinite=True)
    # The other rows do not depend on the bad entry: compare them with the reference
    # of inputs where it is 0 (the reference itself spreads a NaN in v to masked rows,
    # through 0 * NaN in P V).
    clean = [np.nan_to_num(x, nan=0.0, posinf=0.0) for x in (q, k, v)]
    o_ref, lse_ref = reference.attention(*clean, causal=True)
    assert np.isnan(lse[hit]).all() and np.isnan(o[hit]).all()
    # Kernels that multiply whole tiles spread a masked NaN/inf of v through P V
    # (0 * NaN): such rows must be NaN in o and lse alike, never a finite wrong value.
    spoiled = np.isnan(lse) & ~hit
    assert np.array_equal(np.isnan(o).any(axis=-1), hit | spoiled)
    if name not in TILE_KERNELS or where == "q":
        assert not spoiled.any()
    good = ~hit & ~spoiled
    assert np.allclose(o[good], o_ref[good], rtol=0, atol=1e-5)
    assert np.allclose(lse[good], lse_ref[good], rtol=1e-5, atol=0)


def test_masked_rows_stay_masked_next_to_nonfinite_inputs():
    """Tq > Tk causal: rows 0..2 see no key and keep o = 0, lse = -inf."""
    q, k, v = inputs(np.float32, 1.0, tq=7, tk=4)
    k[:, 0, 0] = np.nan
    for name in ("tiled_fa2", "cpu_cols", "cuda_flash"):
        o, lse = FORWARDS[name](q, k, v, causal=True, allow_nonfinite=True)
        assert np.isneginf(lse[:, :3]).all() and (o[:, :3] == 0).all()
        assert np.isnan(lse[:, 3:]).all()


def test_flash_decoding_overflow_and_nan_with_grouped_heads():
    """flashcourse.decode (GQA: Hq = 4 query heads share Hkv = 2 k/v heads)."""
    from flashcourse import decode
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 4, 5, 4)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, 7, 4)).astype(np.float32) for _ in range(2))
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="overflow"):
        decode.split_kv_forward(q * 1e20, k * 1e20, v, num_splits=2, block_k=2)
    k[0, 1, 3, 0] = np.nan                    # kv head 1 serves query heads 2 and 3
    o, lse = decode.split_kv_forward(q, k, v, num_splits=2, block_k=2, causal=True,
                                     allow_nonfinite=True)
    hit = np.zeros((1, 4, 5), bool)
    hit[0, 2:, 1:] = True                     # causal row i sees keys 0..i+2
    assert np.isnan(lse[hit]).all() and np.isnan(o[hit]).all()
    clean_k = np.nan_to_num(k)
    o_ref, lse_ref = reference.attention(q, decode.expand_kv(clean_k, 2),
                                         decode.expand_kv(v, 2), causal=True)
    assert np.allclose(o[~hit], o_ref[~hit], rtol=0, atol=1e-5)
    assert np.allclose(lse[~hit], lse_ref[~hit], rtol=1e-5, atol=0)


# --- 2. backward with an lse that is not the inputs' ------------------------------

def backward_problem(dtype=np.float32, causal=True, tq=6, tk=9, d=5, spread=1.0, seed=1):
    q, k, v = inputs(dtype, spread, seed=seed, tq=tq, tk=tk, d=d)
    o, lse = tiled.forward(q, k, v, causal=causal)
    do = np.random.default_rng(seed + 1).standard_normal(o.shape).astype(dtype)
    return q, k, v, o, lse, do


def wrong_lses(q, k, v, lse, causal):
    """lse of other inputs, of the other mask, shifted by 0.05, and -inf for a seen row."""
    yield "other q", tiled.forward(q[:, ::-1].copy(), k, v, causal=causal)[1]
    yield "other mask", tiled.forward(q, k, v, causal=not causal)[1]
    yield "shifted", lse + np.asarray(0.05, lse.dtype)
    empty = lse.copy()
    empty[0, 2] = -np.inf
    yield "-inf", empty


def _cuda_backward(kernel):
    return lambda *a, **kw: fcuda.backward(*a, kernel=kernel, **kw)


BACKWARDS = {"tiled": lambda *a, **kw: tiled.backward(*a, block_q=2, block_k=4, **kw)}
# the float32 kernels; the tensor-core and Hopper backwards (16-bit inputs) have these
# checks in tests/test_tc_backward.py and tests/test_hopper_backward.py, on float16 problems
BACKWARDS.update({f"cuda_{name}": _cuda_backward(name) for name in CUDA_BACKWARD_KERNELS
                  if name not in ("tensor_core", "hopper")})


@pytest.mark.parametrize("name", BACKWARDS)
@pytest.mark.parametrize("causal", [False, True])
def test_backward_rejects_an_lse_of_other_inputs(name, causal):
    q, k, v, o, lse, do = backward_problem(causal=causal)
    BACKWARDS[name](q, k, v, o, lse, do, causal=causal)           # the right lse: fine
    for why, bad in wrong_lses(q, k, v, lse, causal):
        with pytest.raises(ValueError, match="lse does not match the inputs"):
            BACKWARDS[name](q, k, v, o, bad, do, causal=causal)
        assert why


@pytest.mark.parametrize("name", BACKWARDS)
def test_backward_accepts_right_lse_from_other_paths(name):
    """No false alarm: scores up to ~50 (spread 3, d = 16), lse from the CPU forward
    in float32, and a float16 copy of lse (stored to 3 decimal digits)."""
    q, k, v, o, lse, do = backward_problem(spread=3.0, d=16, tq=11, tk=13)
    _, lse_cpu = cpu.forward(q, k, v, causal=True)
    BACKWARDS[name](q, k, v, o, lse_cpu, do, causal=True)
    BACKWARDS[name](q, k, v, o, lse.astype(np.float16), do, causal=True)


def test_tiled_backward_float64_tolerance_is_tight():
    """float64: an lse off by 1e-6 is caught (tolerance ~1e-9), the right one passes."""
    q, k, v, o, lse, do = backward_problem(dtype=np.float64)
    tiled.backward(q, k, v, o, lse, do, causal=True)
    with pytest.raises(ValueError, match="lse does not match"):
        tiled.backward(q, k, v, o, lse + 1e-6, do, causal=True)


# --- issue 23: the CUDA backward checks o, and float32 gradients that overflow -----

CUDA_BACKWARDS = {name: f for name, f in BACKWARDS.items() if name.startswith("cuda_")}


def wrong_os(q, k, v, o, causal):
    """o of other values v, of no row at all (zeros), and 10% off."""
    yield "other v", tiled.forward(q, k, v[:, ::-1].copy(), causal=causal)[0]
    yield "zeros", np.zeros_like(o)
    yield "10% off", o * np.asarray(1.1, o.dtype)


@pytest.mark.parametrize("name", CUDA_BACKWARDS)
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_backward_rejects_an_o_of_other_inputs(name, causal):
    """The kernels sum each row of dS = P (dP - D) beside P: do_i . (P V - o)_i, which is
    0 only for the forward's o (lse is right here, so only the o check can object)."""
    q, k, v, o, lse, do = backward_problem(causal=causal)
    for why, bad in wrong_os(q, k, v, o, causal):
        with pytest.raises(ValueError, match="o does not match the inputs"):
            CUDA_BACKWARDS[name](q, k, v, bad, lse, do, causal=causal)
        assert why


@functools.lru_cache(maxsize=None)
def _cuda_forward_o(kernel):
    q, k, v, *_ = backward_problem(spread=3.0, d=16, tq=11, tk=13)
    return fcuda.forward(q, k, v, causal=True, kernel=kernel)[0]


@pytest.mark.parametrize("name", CUDA_BACKWARDS)
def test_cuda_backward_accepts_o_from_other_forwards(name):
    """No false alarm (scores up to ~50): o from the CUDA flash and tensor-core forwards,
    o rounded to float16 and back, and float16 inputs end to end."""
    q, k, v, o, lse, do = backward_problem(spread=3.0, d=16, tq=11, tk=13)
    for kernel in ("flash", "tensor_core"):
        CUDA_BACKWARDS[name](q, k, v, _cuda_forward_o(kernel), lse, do, causal=True)
    CUDA_BACKWARDS[name](q, k, v, o.astype(np.float16).astype(np.float32), lse, do,
                         causal=True)
    h = [x.astype(np.float16) for x in (q, k, v, do)]
    o16, lse16 = tiled.forward(*h[:3], causal=True)
    CUDA_BACKWARDS[name](*h[:3], o16, lse16, h[3], causal=True)


@pytest.mark.parametrize("name", CUDA_BACKWARDS)
def test_cuda_backward_gradient_overflow_raises(name):
    """Finite inputs, gradients beyond the range: float32 (|do| up to 3e38: the exact dv
    reaches 5.5e38) raises naming float32; float16 inputs whose float32 gradients pass
    65504 (exact dv: 1.3e5) name float16; a float64 input beyond float32's range is named
    before any kernel runs."""
    q, k, v, o, lse, do = backward_problem()
    big = np.clip(do, -1, 1) * np.float32(3e38)
    with pytest.raises(ValueError, match="gradients overflow float32.*divide do"):
        CUDA_BACKWARDS[name](q, k, v, o, lse, big, causal=True)
    h = [x.astype(np.float16) for x in (q, k, v)]
    o16, lse16 = tiled.forward(*h, causal=True)
    big_do = np.full(o16.shape, 6e4, np.float16)       # dv_j = sum_i P_ij do_i > 65504
    with pytest.raises(ValueError, match="do not fit float16.*float32 inputs"):
        CUDA_BACKWARDS[name](*h, o16, lse16, big_do, causal=True)
    q64, k64, v64, o64, do64 = (x.astype(np.float64) for x in (q, k, v, o, do))
    with pytest.raises(ValueError, match="do has values beyond float32's range"):
        CUDA_BACKWARDS[name](q64, k64, v64, o64, lse, do64 * 1e39, causal=True)


def test_cuda_backward_device_arrays_checked_with_check_true():
    """Device inputs are not checked by default (no host sync); check=True runs the
    numpy path's checks on host copies: a NaN in o is named, a wrong o is caught."""
    from numba import cuda
    q, k, v, o, lse, do = backward_problem()
    dev = [cuda.to_device(x) for x in (q, k, v, o, lse, do)]
    dq, _, _ = fcuda.backward(*dev, causal=True, check=True)
    ref = reference.attention_backward(q, k, v, do, causal=True)[0]
    assert np.allclose(dq.copy_to_host(), ref, rtol=0, atol=1e-4)
    nan_o = o.copy()
    nan_o[1, 2, 3] = np.nan
    dev[3] = cuda.to_device(nan_o)
    fcuda.backward(*dev, causal=True)                   # unchecked: no error, no sync
    with pytest.raises(ValueError, match=r"o \(a device array\) contains NaN"):
        fcuda.backward(*dev, causal=True, check=True)
    dev[3] = cuda.to_device(np.zeros_like(o))
    with pytest.raises(ValueError, match="o does not match the inputs"):
        fcuda.backward(*dev, causal=True, check=True)


# --- issue 23: cuda.decode's guard; results of device arrays, checked on request ---

def gqa_inputs(seed=3, tq=2, tk=7, d=4, size=1.0):
    """q (1, 4, Tq, d) and k, v (1, 2, Tk, d): two query heads per k/v head."""
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((1, 4, tq, d)) * size).astype(np.float32)
    k = (rng.standard_normal((1, 2, tk, d)) * size).astype(np.float32)
    v = rng.standard_normal((1, 2, tk, d)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("size,scale", [(3.0, 1e38), (1e20, None)])
def test_cuda_decode_overflow_raises_instead_of_looking_masked(num_splits, size, scale):
    """cuda.decode once skipped forward_result: scale = 1e38 gave o = 0, lse = -inf."""
    q, k, v = gqa_inputs(size=size)
    with pytest.raises(ValueError, match="overflow float32"):
        fcuda.decode(q, k, v, scale=scale, num_splits=num_splits, block_k=2)


def _gqa_reference(q, k, v, causal):
    return reference.attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1),
                               causal=causal)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_cuda_decode_nan_row_is_nan_numpy_and_device(num_splits):
    """A NaN in q's row 1 of query head 3: that row is NaN (not o = 0, lse = -inf, as the
    kernels once wrote for a NaN sum), in numpy results and in device results alike
    (no check needed); the other rows are the reference's (float32 1e-5)."""
    from numba import cuda
    q, k, v = gqa_inputs()
    q[0, 3, 1, 2] = np.nan
    hit = np.zeros((1, 4, 2), bool)
    hit[0, 3, 1] = True
    o_ref, lse_ref = _gqa_reference(np.nan_to_num(q), k, v, causal=False)
    o, lse = fcuda.decode(q, k, v, allow_nonfinite=True, num_splits=num_splits, block_k=2)
    od, lsed = fcuda.decode(*(cuda.to_device(x) for x in (q, k, v)), num_splits=num_splits,
                            block_k=2)
    for o_, lse_ in ((o, lse), (od.copy_to_host(), lsed.copy_to_host())):
        assert np.isnan(lse_[hit]).all() and np.isnan(o_[hit]).all()
        assert np.allclose(o_[~hit], o_ref[~hit], rtol=0, atol=1e-5)
        assert np.allclose(lse_[~hit], lse_ref[~hit], rtol=1e-5, atol=0)


@pytest.mark.parametrize("kernel", fcuda.SIM_KERNELS)
def test_device_nan_row_is_nan_without_a_check(kernel):
    """Device results are unchecked by default, so the kernels themselves must not make a
    NaN row look masked: every registered forward writes o = NaN, lse = NaN for a NaN in
    q's row 2 (they once wrote o = 0, lse = -inf for a sum of P that is NaN)."""
    from numba import cuda
    q, k, v = inputs(np.float32, 1.0, d=16)
    q[1, 2, 5] = np.nan
    o, lse = fcuda.forward(*(cuda.to_device(x) for x in (q, k, v)), kernel=kernel,
                           causal=True)
    o, lse = o.copy_to_host(), lse.copy_to_host()
    assert np.isnan(lse[1, 2]) and np.isnan(o[1, 2]).all()
    assert np.isfinite(lse[0]).all() and np.isfinite(o[0]).all()


def test_device_scan_flags_only_rows_that_see_keys():
    """result_check.rows_finite: Tq = 4, Tk = 2, causal, so rows 0 and 1 see no key and
    are skipped (whatever they hold); -inf or NaN in a row that sees keys is flagged, in
    lse or in o (float16 o too: the tensor-core kernel's fp16 output)."""
    from numba import cuda

    from flashcourse.cuda.common.result_check import rows_finite
    for o_dtype in (np.float32, np.float16):
        o = np.ones((2, 4, 3), o_dtype)
        lse = np.zeros((2, 4), np.float32)
        o[:, :2], lse[:, :2] = np.nan, -np.inf               # rows that see no key
        assert rows_finite(cuda.to_device(o), cuda.to_device(lse), 4, 2, True)
        assert not rows_finite(cuda.to_device(o), cuda.to_device(lse), 4, 2, False)
        for where in ("lse", "o"):
            bad_o, bad_lse = o.copy(), lse.copy()
            if where == "lse":
                bad_lse[1, 2] = -np.inf                      # looks masked, sees a key
            else:
                bad_o[1, 3, 2] = np.nan
            assert not rows_finite(cuda.to_device(bad_o), cuda.to_device(bad_lse), 4, 2,
                                   True)


DEVICE_FORWARDS = {
    "flash": lambda *a, **kw: fcuda.forward(*a, kernel="flash", **kw),
    "tensor_core": lambda *a, **kw: fcuda.forward(*a, kernel="tensor_core", **kw),
    "decode": lambda *a, **kw: fcuda.decode(*a, num_splits=2, block_k=1, **kw),
}


@pytest.mark.parametrize("name", DEVICE_FORWARDS)
def test_device_results_are_checked_with_check_true(name):
    """check=True on device arrays: a right result passes untouched (causal, Tq > Tk:
    a row with no key keeps o = 0, lse = -inf); scores beyond float32 raise the overflow
    error; a NaN input is named, or with allow_nonfinite=True its row becomes NaN."""
    from numba import cuda
    q, k, v = gqa_inputs(tq=3, tk=2, d=16)
    if name != "decode":                             # one k/v head per query head
        q = q[:, :2].copy()
    g = q.shape[1] // k.shape[1]

    def run(q, k, v, **kw):
        o, lse = DEVICE_FORWARDS[name](*(cuda.to_device(x) for x in (q, k, v)),
                                       causal=True, **kw)
        return o.copy_to_host(), lse.copy_to_host()
    o_ref, lse_ref = reference.attention(q, np.repeat(k, g, axis=1), np.repeat(v, g, axis=1),
                                         causal=True)
    o, lse = run(q, k, v, check=True)
    assert np.isneginf(lse[..., 0]).all() and np.isfinite(lse[..., 1:]).all()
    assert np.allclose(o, o_ref, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="overflow float32"):
        run(q * 3, k * 3, v, scale=1e38, check=True)
    bad = q.copy()
    bad[0, 1, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"q \(a device array\) contains NaN"):
        run(bad, k, v, check=True)
    o, lse = run(bad, k, v, check=True, allow_nonfinite=True)
    hit = np.zeros(lse.shape, bool)
    hit[0, 1, 2] = True
    assert np.isnan(lse[hit]).all() and np.isnan(o[hit]).all()
    assert np.allclose(lse[~hit], lse_ref[~hit], rtol=1e-5, atol=0)


# --- 10. small ones ---------------------------------------------------------------

def test_reference_refuses_what_it_cannot_hold(monkeypatch):
    """~3.2 float64 (Tq, Tk) matrices at peak: refused before allocating anything."""
    q = np.zeros((1, 30000, 1))
    # the limit is half the machine's memory: pin it to a 24 GiB laptop's, so the test
    # means the same on a bigger machine (the H200 host has 128 GiB and would not refuse)
    monkeypatch.setenv("FLASHCOURSE_DENSE_MAX_BYTES", str(12 * 2**30))
    with pytest.raises(MemoryError, match="tiled.forward"):
        reference.attention(q, q, q)
    monkeypatch.setenv("FLASHCOURSE_DENSE_MAX_BYTES", "1e6")
    small = np.zeros((1, 200, 2))
    with pytest.raises(MemoryError, match="FLASHCOURSE_DENSE_MAX_BYTES"):
        reference.attention_backward(small, small, small, small)
    with pytest.raises(MemoryError, match="reference.scores"):
        reference.scores(np.zeros((1, 400, 2)), small)          # 3 x 8 x 400 x 200 B
    reference.attention(small[:, :100], small[:, :100], small[:, :100])   # 320 KB: fine


@pytest.mark.parametrize("value", ["lots", "-5", "0", "1.5", "nan", "inf", "8 GB"])
def test_a_bad_dense_memory_limit_is_named(monkeypatch, value):
    """issue 50: FLASHCOURSE_DENSE_MAX_BYTES=lots gave Python's "could not convert string
    to float", and -5 a MemoryError about -0.0 GiB allowed."""
    q = np.zeros((1, 3, 2))
    monkeypatch.setenv("FLASHCOURSE_DENSE_MAX_BYTES", value)
    with pytest.raises(ValueError, match=r"^FLASHCOURSE_DENSE_MAX_BYTES must be a positive "
                                         r"whole number of bytes \(e.g. 8000000000 or 8e9\)"):
        reference.attention(q, q, q)
    monkeypatch.setenv("FLASHCOURSE_DENSE_MAX_BYTES", "8e9")
    reference.attention(q, q, q)


@pytest.mark.parametrize("field", ["bytes_per_element", "bytes_per_score",
                                   "bytes_per_stat"])
@pytest.mark.parametrize("bad,exc", [(-2, ValueError), (0, ValueError), (2.5, TypeError),
                                     (True, TypeError), ("4", TypeError)])
def test_traffic_counter_rejects_bad_byte_sizes(field, bad, exc):
    with pytest.raises(exc, match=field):
        TrafficCounter(**{field: bad})


def test_traffic_counter_accepts_good_byte_sizes():
    c = TrafficCounter(bytes_per_element=np.int64(2), bytes_per_score=1)
    assert (c.bytes_per_element, c.bytes_per_score, c.bytes_per_stat) == (2, 1, 4)
    assert type(c.bytes_per_element) is int


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2.4e-7), (np.float64, 1e-15)])
def test_exp2_poly_any_shape(dtype, tol):
    """Within a few units in the last place of 2**x (relative 2.4e-7 / 1e-15)."""
    x = -np.linspace(0, 60, 24, dtype=dtype).reshape(2, 3, 4)
    got = cpu.exp2_poly(x)
    assert got.shape == x.shape and got.dtype == dtype
    assert np.allclose(got, np.exp2(x.astype(np.float64)), rtol=tol, atol=0)
    with pytest.raises(TypeError, match="x must be a float32 or float64"):
        cpu.exp2_poly(np.zeros(3, np.int64))
