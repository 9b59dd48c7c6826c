"""The wgmma backward (`cuda/hopper/backward_kernels.py`, `backward(..., pipeline="wgmma")`)
on Numba's CUDA simulator, through wgmma's twins: dQ, dK, dV against the float64 backward on
the rounded inputs (ragged lengths, Tq != Tk both ways, d padded to 16, causal rows that see
no key, extreme scores), the checked call's column sums, device arrays, and every option it
refuses named."""

import numpy as np
import pytest

import flashcourse  # noqa: F401  (simulator before numba)
from numba import cuda
from flashcourse import reference
from flashcourse.cuda import backward
from flashcourse.cuda.ptx import mma
from flashcourse.gpu import using_simulator
from helpers import rel_err

pytestmark = pytest.mark.skipif(not using_simulator(), reason="the simulator's twins")


def _problem(rng, tq, tk, d, causal, dtype=np.float16, scale=None, size=1.0):
    q, k, v, do = (rng.standard_normal((1, 2, t, d)) * s
                   for t, s in ((tq, size), (tk, size), (tk, 1.0), (tq, 1.0)))
    q, k, v, do = (x.astype(dtype) for x in (q, k, v, do))
    r = (lambda x: x.astype(np.float64)) if dtype == np.float16 else \
        (lambda x: mma.round_bf16(x).astype(np.float64))
    q64, k64, v64, do64 = (r(x) for x in (q, k, v, do))
    o, lse = reference.attention(q64, k64, v64, causal=causal, scale=scale)
    want = reference.attention_backward(q64, k64, v64, do64, causal=causal, scale=scale)[:3]
    return (q, k, v, o.astype(dtype), lse.astype(np.float32), do), want


CASES = [  # (precision, warpgroups, Tq, Tk, d, causal)
    ("fp16", 1, 100, 77, 64, True),      # Tq > Tk: rows with no key
    ("fp16", 2, 40, 140, 48, True),      # keys in two blocks of 128, the last ragged
    ("bf16", 2, 66, 90, 40, False),      # d 40 padded to 48; query blocks 64, 2
    ("fp16", 2, 1, 100, 16, False),      # one query
    ("bf16", 1, 33, 20, 21, True),       # odd d (padded to 32)
]


@pytest.mark.slow
@pytest.mark.parametrize("precision,wg,tq,tk,d,causal", CASES)
def test_gradients_match_float64(precision, wg, tq, tk, d, causal, rng):
    dtype = np.float16 if precision == "fp16" else np.float32
    args, want = _problem(rng, tq, tk, d, causal, dtype)
    got = backward(*args, kernel="tensor_core", causal=causal, precision=precision,
                   pipeline="wgmma", warpgroups=wg)      # numpy in: a checked call (sums)
    # P and dS are rounded to 16 bits before their products, as on mma.sync
    tol = 2e-3 if precision == "fp16" else 1.5e-2
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert rel_err(g.astype(np.float64), w) < tol, name


@pytest.mark.slow
def test_extreme_scores_and_device_arrays(rng):
    """Scores of +-1e4 (scale 1, |q| = |k| = 100): P from lse, never overflowing; then the
    same problem from device arrays (the kernel without the checked call's sums)."""
    args, want = _problem(rng, 40, 50, 32, False, np.float32, scale=1.0, size=1.0)
    q, k = args[0], args[1]
    q = (q / np.linalg.norm(q, axis=-1, keepdims=True) * 100).astype(np.float32)
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True) * 100).astype(np.float32)
    q64, k64, v64, do64 = (mma.round_bf16(x).astype(np.float64) for x in (q, k, args[2],
                                                                          args[5]))
    o, lse = reference.attention(q64, k64, v64, scale=1.0)
    assert np.abs(lse).max() > 5e3
    want = reference.attention_backward(q64, k64, v64, do64, scale=1.0)[:3]
    got = backward(q, k, args[2], o.astype(np.float32), lse.astype(np.float32), args[5],
                   kernel="tensor_core", scale=1.0, precision="bf16", pipeline="wgmma")
    for g, w in zip(got, want):
        assert np.isfinite(g).all() and rel_err(g, w) < 3e-2
    args16, want16 = _problem(rng, 30, 70, 32, True)
    dev = [cuda.to_device(x) for x in args16]
    got = backward(*dev, kernel="tensor_core", causal=True, pipeline="wgmma")
    for g, w in zip(got, want16):
        assert rel_err(g.copy_to_host().astype(np.float64), w) < 2e-3


@pytest.mark.parametrize("options,match", [
    (dict(deterministic=True), "deterministic"),
    (dict(warps=4), "warps"),
    (dict(block_q=64), "block_q"),
    (dict(warpgroups=3), "warpgroups must be 1 or 2"),
    (dict(precision="3xtf32"), "3xtf32.*pipeline='async' or 'planes'"),
])
def test_options_it_does_not_take_are_named(options, match, rng):
    args, _ = _problem(rng, 8, 8, 16, False, np.float32)
    options = {"precision": "bf16", **options}
    with pytest.raises(ValueError, match=match):
        backward(*args, kernel="tensor_core", pipeline="wgmma", **options)


def test_warpgroups_belongs_to_the_wgmma_pipeline(rng):
    args, _ = _problem(rng, 8, 8, 16, False)
    with pytest.raises(ValueError, match="warpgroups applies to pipeline='wgmma'"):
        backward(*args, kernel="tensor_core", warpgroups=2)


@pytest.mark.slow
def test_kernel_hopper_checks_lse_and_o_with_16_bit_tolerances(rng):
    """backward(kernel="hopper") is the same kernel; fp16 inputs are exact, so the checked
    call's sums of P and dS (added by atomics in this kernel) refuse an lse off by 0.05
    and the o of other inputs (the fp32 kernels' tests/test_hardening.py checks)."""
    (q, k, v, o, lse, do), want = _problem(rng, 11, 13, 16, True)
    got = backward(q, k, v, o, lse, do, kernel="hopper", causal=True)    # right: fine
    for g, w in zip(got, want):
        assert rel_err(g.astype(np.float64), w) < 2e-3
    with pytest.raises(ValueError, match="lse does not match"):
        backward(q, k, v, o, lse + np.float32(0.05), do, kernel="hopper", causal=True)
    with pytest.raises(ValueError, match="o does not match"):
        backward(q, k, v, o[:, :, ::-1].copy(), lse, do, kernel="hopper", causal=True)


def test_kernel_hopper_names_what_it_does_not_take(rng):
    args, _ = _problem(rng, 8, 8, 16, False, np.float32)
    with pytest.raises(ValueError, match="3xtf32 runs on kernel='tensor_core'"):
        backward(*args, kernel="hopper", precision="3xtf32")
    with pytest.raises(ValueError, match="does not use deterministic"):
        backward(*args, kernel="hopper", deterministic=True)
