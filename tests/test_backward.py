"""The backward pass: reference.attention_backward and tiled.backward.

Gradient errors are measured against the size of the terms each gradient sums, not
against the gradient itself: dQ_i = scale * sum_j P_ij (dP_ij - D_i) K_j adds terms of
mixed sign, and when a gradient is small against its terms (nearly one-hot rows, tiny
Tk) its own norm says nothing about rounding. `grad_scales` gives, in float64, the same
sums over absolute values, |P|(|dP| + |D|)|K| etc.; the error is
||g - g_ref|| / ||that||, which equals the plain relative error when nothing cancels.
(Hypothesis found the cases: Tq = 1, Tk = 2, d = 1 in float32 gave a plain relative
error of 1e-2 on a dq of 8e-7; both are kept below as explicit examples.)
Tolerances: float64 1e-12, float32 1e-5, float16 inputs 1e-2. Gradients come back in
the input dtype, and small float16 ones fall into its subnormal range (below 6.1e-5,
spacing 2**-24 = 6e-8): differences under that spacing are not counted (hypothesis
found 2.7e-2 from them alone at Tq = 1, Tk = 20, d = 1).
Finite differences of the reference: central differences with h = 1e-6 in float64,
relative tolerance 1e-6 (truncation ~h^2, rounding ~1e-16/h = 1e-10).
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from flashcourse import reference, tiled
from flashcourse.counter import TrafficCounter
from helpers import make_qkv, rel_err

GRAD_TOL = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 1e-2}
dtypes = st.sampled_from([np.float64, np.float32, np.float16])


def make_problem(rng, lead, tq, tk, d, dtype, causal=False, scale=None):
    """q, k, v, do and the forward's o, lse (from the float64 reference, cast to dtype)."""
    q, k, v = make_qkv(rng, lead, tq, tk, d, dtype)
    do = rng.standard_normal((*lead, tq, d)).astype(dtype)
    o, lse = reference.attention(q, k, v, causal=causal, scale=scale)
    lse_t = np.float64 if dtype == np.float64 else np.float32
    return q, k, v, o.astype(dtype), lse.astype(lse_t), do


def grad_scales(q, k, v, do, causal=False, scale=None):
    """Float64 sums of the absolute values of the terms of (dq, dk, dv)."""
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = reference.scores(q, k, causal=causal, scale=scale)             # (..., Tq, Tk)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0))
    p /= np.where(p.sum(-1, keepdims=True) > 0, p.sum(-1, keepdims=True), 1)
    dp = np.abs(do64 @ np.swapaxes(v64, -1, -2))                       # |dO V^T|
    d_row = (p * dp).sum(-1, keepdims=True)                            # >= |D|
    ds = p * (dp + d_row)                                              # >= |dS|
    t = lambda x: np.swapaxes(x, -1, -2)
    return (abs(scale) * ds @ np.abs(k64), abs(scale) * t(ds) @ np.abs(q64),
            t(p) @ np.abs(do64))


def assert_grads_close(got, ref, dtype, problem):
    """Each gradient within GRAD_TOL of the reference, relative to its terms' size."""
    tol = GRAD_TOL[np.dtype(dtype).type]
    for name, g, r, size in zip(("dq", "dk", "dv"), got, ref, grad_scales(*problem)):
        assert g.shape == r.shape, name
        assert g.dtype == dtype, name
        assert np.isfinite(g).all(), f"{name} has NaN/inf"
        # differences below the output dtype's smallest spacing (float16 subnormals:
        # 2**-24 = 6e-8) are representation, not arithmetic: they are not counted
        floor = float(np.finfo(dtype).smallest_subnormal)
        diff = np.maximum(np.abs(g.astype(np.float64) - r) - floor, 0)
        denom = np.linalg.norm(size) or np.linalg.norm(r) or 1.0
        err = float(np.linalg.norm(diff) / denom)
        assert err <= tol, f"{name} error {err:.3g} > {tol} (relative to its terms)"


# --- the reference against finite differences --------------------------------------

def _loss(q, k, v, do, causal, scale):
    o, _ = reference.attention(q, k, v, causal=causal, scale=scale)
    return float((o * do).sum())     # L = <O, dO>, so dL/dO = dO


@pytest.mark.parametrize("causal,tq,tk", [(False, 5, 4), (True, 5, 4), (True, 3, 6),
                                           (False, 1, 7)])
def test_reference_matches_finite_differences(causal, tq, tk):
    rng = np.random.default_rng(3)
    d, scale, h = 3, 0.7, 1e-6
    q, k, v = make_qkv(rng, (), tq, tk, d)
    do = rng.standard_normal((tq, d))
    grads = reference.attention_backward(q, k, v, do, causal=causal, scale=scale)
    for which, (x, g) in enumerate(zip((q, k, v), grads)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[idx] += h
            minus[idx] -= h
            args_p = [q, k, v]
            args_m = [q, k, v]
            args_p[which], args_m[which] = plus, minus
            num[idx] = (_loss(*args_p, do, causal, scale) - _loss(*args_m, do, causal, scale)) \
                / (2 * h)
        assert rel_err(g, num) < 1e-6, f"gradient {which}: {rel_err(g, num):.3g}"


def test_reference_jacobian_is_the_written_out_formula():
    rng = np.random.default_rng(1)
    p = reference.softmax_safe(rng.standard_normal(6))
    dp = rng.standard_normal(6)
    jac = reference.softmax_jacobian(p)
    assert np.allclose(jac, jac.T)
    assert np.allclose(jac @ dp, p * (dp - (p * dp).sum()), rtol=1e-14, atol=1e-15)
    with pytest.raises(ValueError, match="p_row"):
        reference.softmax_jacobian(np.ones((2, 2)))


def test_reference_delta_identity(rng):
    # sum_j P_ij dP_ij == dO_i . O_i: the shortcut the tiled backward relies on
    q, k, v = make_qkv(rng, (), 7, 9, 4)
    do = rng.standard_normal((7, 4))
    o, _ = reference.attention(q, k, v)
    p = np.exp(reference.scores(q, k) - reference.attention(q, k, v)[1][:, None])
    assert np.allclose((p * (do @ v.T)).sum(1), (do * o).sum(1), rtol=1e-13)


# --- tiled against the reference --------------------------------------------------

@given(tq=st.integers(1, 30), tk=st.integers(1, 30), d=st.integers(1, 8),
       bq=st.integers(1, 13), bk=st.integers(1, 13), causal=st.booleans(), dtype=dtypes,
       scale=st.one_of(st.none(), st.floats(0.05, 3.0)), seed=st.integers(0, 2**32 - 1))
@example(tq=1, tk=9, d=1, bq=1, bk=1, causal=False, dtype=np.float64, scale=1.75, seed=3)
@example(tq=1, tk=2, d=1, bq=1, bk=1, causal=False, dtype=np.float32, scale=2.0, seed=3)
@example(tq=1, tk=20, d=1, bq=1, bk=1, causal=False, dtype=np.float16, scale=0.25, seed=7)
@example(tq=1, tk=20, d=1, bq=1, bk=1, causal=False, dtype=np.float16, scale=0.125, seed=7)
def test_tiled_backward_matches_reference(tq, tk, d, bq, bk, causal, dtype, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v, o, lse, do = make_problem(rng, (), tq, tk, d, dtype, causal, scale)
    got = tiled.backward(q, k, v, o, lse, do, block_q=bq, block_k=bk, causal=causal,
                         scale=scale)
    ref = reference.attention_backward(q, k, v, do, causal=causal, scale=scale)
    assert_grads_close(got, ref, dtype, (q, k, v, do, causal, scale))


@pytest.mark.parametrize("causal", [False, True])
def test_batched_irregular(rng, causal):
    q, k, v, o, lse, do = make_problem(rng, (2, 3), 37, 53, 7, np.float32, causal)
    got = tiled.backward(q, k, v, o, lse, do, block_q=16, block_k=10, causal=causal)
    assert [g.shape for g in got] == [(2, 3, 37, 7), (2, 3, 53, 7), (2, 3, 53, 7)]
    assert_grads_close(got, reference.attention_backward(q, k, v, do, causal=causal),
                       np.float32, (q, k, v, do, causal))


def test_with_the_tiled_forward(rng):
    # the full round trip: tiled forward's own o and lse feed the tiled backward
    q, k, v = make_qkv(rng, (), 45, 31, 6, np.float32)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = tiled.forward(q, k, v, block_q=8, block_k=6, causal=True)
    got = tiled.backward(q, k, v, o, lse, do, block_q=5, block_k=7, causal=True)
    assert_grads_close(got, reference.attention_backward(q, k, v, do, causal=True),
                       np.float32, (q, k, v, do, True))


def test_blocks_do_not_change_float64_result(rng):
    q, k, v, o, lse, do = make_problem(rng, (), 23, 19, 5, np.float64, True)
    a = tiled.backward(q, k, v, o, lse, do, block_q=1, block_k=1, causal=True)
    b = tiled.backward(q, k, v, o, lse, do, block_q=64, block_k=64, causal=True)
    for x, y in zip(a, b):
        assert rel_err(x, y) < 1e-13


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extreme_logits(dtype):
    rng = np.random.default_rng(7)
    q, k, v = make_qkv(rng, (), 19, 23, 4, dtype)
    q = (q / np.linalg.norm(q, axis=-1, keepdims=True) * 30).astype(dtype)
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True) * 30).astype(dtype)
    do = rng.standard_normal(q.shape).astype(dtype)
    o, lse = tiled.forward(q, k, v, block_q=5, block_k=4, scale=1.0)
    assert np.abs(lse).max() > 300          # exp(S) alone would overflow float32
    got = tiled.backward(q, k, v, o, lse, do, block_q=5, block_k=4, scale=1.0)
    ref = reference.attention_backward(q, k, v, do, scale=1.0)
    # nearly one-hot rows: gradients are tiny against their terms; measured as such
    assert_grads_close(got, ref, dtype, (q, k, v, do, False, 1.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fully_masked_rows_give_zero_gradients(rng, dtype):
    q, k, v, o, lse, do = make_problem(rng, (), 20, 6, 3, dtype, causal=True)
    assert np.isneginf(lse[:14]).all()                     # rows 0..13 see no key
    got = tiled.backward(q, k, v, o, lse, do, block_q=4, block_k=4, causal=True)
    ref = reference.attention_backward(q, k, v, do, causal=True)
    for g in got + ref:
        assert not np.isnan(g).any()
    assert np.all(got[0][:14] == 0) and np.all(ref[0][:14] == 0)
    assert_grads_close(got, ref, dtype, (q, k, v, do, True))


def test_one_score_tile_at_a_time_and_hidden_tiles_skipped(rng):
    q, k, v, o, lse, do = make_problem(rng, (), 32, 32, 4, np.float32, True)
    c = TrafficCounter()
    tiled.backward(q, k, v, o, lse, do, block_q=8, block_k=8, causal=True, counter=c)
    computed = [e.tile for e in c.events if e.op == "compute"]
    skipped = [e.tile for e in c.events if e.op == "skip"]
    assert len(computed) == 10 and len(skipped) == 6
    assert all(j <= i for i, j in computed) and all(j > i for i, j in skipped)
    assert not {"S", "P", "dP", "dS"} & set(c.by_tensor)    # no score-sized tensor stored
    # key blocks are the outer loop: K and V are read once each
    assert c.by_tensor["K"] == (32 * 4 * 4, 0) and c.by_tensor["V"] == (32 * 4 * 4, 0)
    assert c.by_tensor["dK"] == (0, 32 * 4 * 4)


def test_counter_does_not_change_result(rng):
    args = make_problem(rng, (2,), 29, 17, 5, np.float32, True)
    a = tiled.backward(*args, block_q=6, block_k=7, causal=True)
    b = tiled.backward(*args, block_q=6, block_k=7, causal=True, counter=TrafficCounter())
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


# --- issue 50 item 4: the checks of cuda.backward (o belongs to its inputs; overflow) ---

#: irregular shapes (Tq != Tk, odd d, causal with rows that see no key), float64 1e-12,
#: float32 1e-5, float16 1e-2 (GRAD_TOL) against the float64 reference
CHECKED_CASES = [(7, 5, 3, True), (4, 11, 5, False), (9, 9, 1, True), (13, 6, 7, True)]


@pytest.mark.parametrize("tq,tk,d,causal", CHECKED_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_checked_backward_accepts_the_forwards_o(tq, tk, d, causal, dtype):
    """The o and overflow checks raise no false alarm: o from the tiled forward (both
    loop orders), and for float32 rounded through float16."""
    rng = np.random.default_rng(tq * 100 + tk * 10 + d)
    q, k, v = make_qkv(rng, (2,), tq, tk, d, dtype)
    do = rng.standard_normal(q.shape).astype(dtype)
    ref = reference.attention_backward(q, k, v, do, causal=causal)
    problem = (q, k, v, do, causal)
    for order in ("fa2", "fa1"):
        o, lse = tiled.forward(q, k, v, block_q=3, block_k=4, causal=causal, loop_order=order)
        got = tiled.backward(q, k, v, o, lse, do, block_q=4, block_k=3, causal=causal)
        assert_grads_close(got, ref, dtype, problem)
    if dtype == np.float32:      # o stored in float16 on the way (float64: caught, 1e-9)
        o16 = o.astype(np.float16).astype(dtype)
        tiled.backward(q, k, v, o16, lse, do, block_q=2, block_k=5, causal=causal)


def _wrong_os(q, k, v, o, causal):
    """o of other values v, of no row at all (zeros), and 10% off (as for the CUDA path)."""
    yield "other v", tiled.forward(q, k, v[..., ::-1, :].copy(), causal=causal)[0]
    yield "zeros", np.zeros_like(o)
    yield "10% off", o * np.asarray(1.1, o.dtype)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_checked_backward_rejects_an_o_of_other_inputs(dtype, causal):
    """issue 50: tiled.backward(q, k, v, np.zeros_like(o), lse, do) returned wrong dq, dk
    silently; now the row sums of dS = do . (P V - o) must be 0, as in cuda.backward."""
    rng = np.random.default_rng(5)
    q, k, v = make_qkv(rng, (2,), 7, 9, 5, dtype)
    do = rng.standard_normal(q.shape).astype(dtype)
    o, lse = tiled.forward(q, k, v, causal=causal)
    for why, bad in _wrong_os(q, k, v, o, causal):
        with pytest.raises(ValueError, match="o does not match the inputs"):
            tiled.backward(q, k, v, bad, lse, do, block_q=3, block_k=4, causal=causal)
        assert why


def test_checked_backward_gradient_overflow_raises():
    """issue 50: do of 1e38 gave inf gradients silently. float32 gradients that overflow
    name float32 and the way out; float16 inputs whose float32 gradients pass 65504 name
    float16; float64 computes the same do without overflow (and checks it)."""
    rng = np.random.default_rng(2)
    q, k, v = make_qkv(rng, (), 6, 9, 5, np.float32)
    o, lse = tiled.forward(q, k, v, causal=True)
    do = rng.standard_normal(q.shape).astype(np.float32)
    for big in (np.full_like(do, 1e38), np.clip(do, -1, 1) * np.float32(3e38)):
        with pytest.raises(ValueError, match="gradients overflow float32.*divide do"):
            tiled.backward(q, k, v, o, lse, big, causal=True)
    h = [x.astype(np.float16) for x in (q, k, v)]
    o16, lse16 = tiled.forward(*h, causal=True)
    with pytest.raises(ValueError, match="do not fit float16.*float32 inputs"):
        tiled.backward(*h, o16, lse16, np.full(o16.shape, 6e4, np.float16), causal=True)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    o64, lse64 = tiled.forward(q64, k64, v64, causal=True)
    do64 = np.full(q64.shape, 1e38)
    got = tiled.backward(q64, k64, v64, o64, lse64, do64, causal=True)
    ref = reference.attention_backward(q64, k64, v64, do64, causal=True)
    assert_grads_close(got, ref, np.float64, (q64, k64, v64, do64, True))


# --- bad input ----------------------------------------------------------------------

def good():
    return make_problem(np.random.default_rng(0), (), 6, 5, 4, np.float32)


@pytest.mark.parametrize("mutate,exc,word", [
    (lambda q, k, v, g: (q, k, v, g[:4]), ValueError, "do must have the shape"),
    (lambda q, k, v, g: (q, k, v, g.astype(np.int32)), TypeError, "do must have dtype"),
    (lambda q, k, v, g: (q, k, v, g.tolist()), TypeError, "do must be a numpy"),
    (lambda q, k, v, g: (q, k.astype(np.float64), v, g), TypeError, "share one dtype"),
])
def test_reference_bad_inputs(mutate, exc, word):
    q, k, v, _, _, do = good()
    with pytest.raises(exc, match=word):
        reference.attention_backward(*mutate(q, k, v, do))


# --- memory kept, FLOPs and traffic of the backward (flashcourse.memory / .traffic) -------

def test_saved_for_backward_bytes():
    from flashcourse.memory import saved_for_backward, saved_for_backward_bytes
    # standard: Q, K, V, O (4 x 4096 x 64 x 2 B) + P 4096 x 4096 x 2 B
    assert saved_for_backward_bytes(4096, 4096, 64) == 4 * 4096 * 64 * 2 + 4096 * 4096 * 2
    assert saved_for_backward_bytes(4096, 4096, 64, method="tiled") == \
        4 * 4096 * 64 * 2 + 4096 * 4
    parts = saved_for_backward(10, 6, 3, method="standard", bytes_per_element=4,
                               bytes_per_score=1, causal=True)
    assert parts == {"Q": 120, "K": 72, "V": 72, "O": 120, "P": 21}  # rows 4..9 see 1..6 keys
    assert set(saved_for_backward(10, 6, 3, method="tiled")) == {"Q", "K", "V", "O", "L"}
    with pytest.raises(ValueError, match="method"):
        saved_for_backward_bytes(4, 4, 4, method="flash")
    with pytest.raises(ValueError, match="t_query"):
        saved_for_backward_bytes(0, 4, 4)


def _cost():
    from flashcourse import traffic
    return traffic


def test_backward_flops_conventions():
    t = _cost()
    from flashcourse.traffic import attention_flops
    assert t.backward_flops(4096, 4096, 64) == 10 * 4096 * 4096 * 64
    assert t.backward_flops(4096, 4096, 64) == 2.5 * attention_flops(4096, 4096, 64)
    assert t.backward_flops(100, 80, 8, recompute=False) == 8 * 100 * 80 * 8
    assert t.backward_flops(100, 80, 8, dq_mode="two_pass") == 14 * 100 * 80 * 8
    from flashcourse.geometry import visible_pairs
    assert t.backward_flops(50, 70, 4, causal=True) == 10 * visible_pairs(50, 70, causal=True) * 4
    with pytest.raises(ValueError, match="dq_mode"):
        t.backward_flops(4, 4, 4, dq_mode="atomic")
    with pytest.raises(TypeError, match="recompute"):
        t.backward_flops(4, 4, 4, recompute=1)


@pytest.mark.parametrize("tq,tk,d,bq,bk,causal", [(29, 17, 5, 6, 7, False),
                                                   (29, 17, 5, 6, 7, True),
                                                   (12, 40, 3, 5, 8, True),
                                                   (64, 64, 4, 16, 16, True)])
def test_tiled_backward_traffic_model_matches_counter(tq, tk, d, bq, bk, causal):
    t = _cost()
    rng = np.random.default_rng(0)
    q, k, v, o, lse, do = make_problem(rng, (), tq, tk, d, np.float32, causal)
    c = TrafficCounter()
    tiled.backward(q, k, v, o, lse, do, block_q=bq, block_k=bk, causal=causal, counter=c)
    model = t.backward_traffic(tq, tk, d, method="tiled", block_q=bq, block_k=bk,
                               causal=causal, bytes_per_element=4)
    assert (c.read_bytes, c.write_bytes) == (model.read_bytes, model.write_bytes)


def test_backward_traffic_standard_and_variants():
    t = _cost()
    tq, tk, d = 300, 200, 16
    std = t.backward_traffic(tq, tk, d, method="standard", bytes_per_element=2,
                             bytes_per_score=4)
    assert std.read_bytes == 5 * tq * tk * 4 + (3 * tq + 2 * tk) * d * 2
    assert std.write_bytes == 2 * tq * tk * 4 + (tq + 2 * tk) * d * 2
    # fp16 elements with an fp32 dQ accumulator add a final conversion pass
    a4 = t.backward_traffic(tq, tk, d, bytes_per_element=2, bytes_per_accumulator=4)
    a2 = t.backward_traffic(tq, tk, d, bytes_per_element=2, bytes_per_accumulator=2)
    assert a4.total_bytes > a2.total_bytes
    two = t.backward_traffic(tq, tk, d, dq_mode="two_pass")
    assert two.total_bytes > 0
    # causal skipping never adds bytes; bigger tiles never add bytes
    assert t.backward_traffic(tq, tq, d, causal=True).total_bytes < \
        t.backward_traffic(tq, tq, d).total_bytes
    assert t.backward_traffic(4096, 4096, 64, block_q=128, block_k=128).total_bytes < \
        t.backward_traffic(4096, 4096, 64).total_bytes
    with pytest.raises(ValueError, match="method"):
        t.backward_traffic(4, 4, 4, method="flash")
    with pytest.raises(ValueError, match="block_k"):
        t.backward_traffic(4, 4, 4, block_k=0)


def test_backward_plot_numbers():
    from flashcourse.plots import backward as bp
    c = bp.backward_costs(4096, 64)
    assert c["standard"]["kept"] / c["tiled"]["kept"] > 16
    assert c["tiled"]["flops"] / c["standard"]["flops"] == 1.25
    curves = bp.backward_curves([256, 1024, 4096], 64)
    kept = curves["standard"]["kept"]
    assert kept[2] / kept[1] > 10 and curves["tiled"]["kept"][2] / curves["tiled"]["kept"][1] < 5
    lines = bp.summary_lines(1024, 32)
    assert len(lines) == 4 and "25% more" in lines[3]
    assert bp.backward_rows(None) == []
    res = {"bench": [{"impl": "a", "n": 4096, "d": 64, "causal": False, "ms": 2.0,
                      "tflops": 5.0},
                     {"impl": "b", "n": 4096, "d": 64, "causal": False, "ms": 1.0,
                      "tflops": 10.0},
                     {"impl": "c", "n": 4096, "d": 64, "causal": False, "error": "x"}]}
    assert bp.backward_rows(res) == [("b", 1.0, 10.0), ("a", 2.0, 5.0)]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.close(bp.plot_backward_costs(2048, 64, n_max=8192))
    plt.close(bp.plot_backward_recorded(res))
