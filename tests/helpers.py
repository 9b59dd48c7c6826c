"""Helpers shared by the test modules (random attention inputs, error measures)."""

import numpy as np

from conftest import rel_err  # noqa: F401  (re-exported)

#: Relative-error tolerance of an implementation against the float64 reference,
#: by input dtype: float64 rounding ~1e-16 per op, a few thousand ops -> 1e-12;
#: float32 accumulation -> 1e-5; float16 inputs/outputs (3 decimal digits) -> 1e-2.
TOL = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 1e-2}


def make_qkv(rng, lead, tq, tk, d, dtype=np.float64, spread=1.0):
    """Random q (lead, Tq, d), k, v (lead, Tk, d), normal with std `spread`."""
    q = (rng.standard_normal((*lead, tq, d)) * spread).astype(dtype)
    k = (rng.standard_normal((*lead, tk, d)) * spread).astype(dtype)
    v = rng.standard_normal((*lead, tk, d)).astype(dtype)
    return q, k, v


def assert_close_to_reference(o, lse, o_ref, lse_ref, dtype):
    """o and lse match the float64 reference within TOL[dtype]; -inf rows agree exactly."""
    tol = TOL[np.dtype(dtype).type]
    assert o.shape == o_ref.shape
    assert lse.shape == lse_ref.shape
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    empty = np.isneginf(lse_ref)
    assert np.array_equal(np.isneginf(lse), empty), "masked rows must have lse = -inf"
    assert np.all(o[empty] == 0), "rows with no visible key must output 0"
    assert rel_err(o, o_ref) <= tol, f"o rel err {rel_err(o, o_ref):.3g} > {tol}"
    if (~empty).any():
        err = rel_err(lse[~empty], lse_ref[~empty])
        assert err <= tol, f"lse rel err {err:.3g} > {tol}"
