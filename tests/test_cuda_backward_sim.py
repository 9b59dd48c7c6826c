"""CUDA backward kernels on tiny shapes (Numba's simulator without a GPU) vs the reference.

Tolerance: relative error <= 1e-4 per gradient in float32 (the kernels compute in
float32; measured ~2e-7 here). Shapes are ragged (T not a multiple of the 8 x 8
tiles, d not a multiple of the 4 thread columns), causal with Tq != Tk both ways,
and with rows that see no key. The whole file takes a few seconds in the simulator.
"""

import numpy as np
import pytest

from flashcourse import reference, tiled
import flashcourse.cuda
from flashcourse.cuda import backward
from flashcourse.cuda.gradients.backward_kernels import plan
from flashcourse.cuda.registry import BACKWARD
from flashcourse.gpu import using_simulator
from helpers import rel_err

TOL = 1e-4
CASES = [  # (Tq, Tk, d, causal)
    (13, 11, 5, False),
    (13, 11, 5, True),
    (7, 17, 6, True),     # Tk > Tq: every row sees keys
    (19, 6, 3, True),     # Tq > Tk: rows 0..12 see no key
]


def problem(tq, tk, d, causal, seed=0, lead=(2,), scale=None):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((*lead, t, d)).astype(np.float32) for t in (tq, tk, tk))
    do = rng.standard_normal((*lead, tq, d)).astype(np.float32)
    o, lse = tiled.forward(q, k, v, block_q=4, block_k=4, causal=causal, scale=scale)
    return q, k, v, o, lse, do


#: the fp32 kernels (the tensor-core and Hopper backwards round to 16 bits:
#: tests/test_tc_backward.py, tests/test_hopper_backward.py)
FP32_KERNELS = tuple(n for n in BACKWARD if n not in ("tensor_core", "hopper"))


@pytest.mark.parametrize("kernel", FP32_KERNELS)
@pytest.mark.parametrize("tq,tk,d,causal", CASES)
def test_kernel_matches_reference(kernel, tq, tk, d, causal):
    q, k, v, o, lse, do = problem(tq, tk, d, causal)
    got = backward(q, k, v, o, lse, do, kernel=kernel, causal=causal)
    ref = reference.attention_backward(q, k, v, do, causal=causal)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert g.shape == r.shape and g.dtype == np.float32
        assert np.isfinite(g).all(), f"{kernel} {name} has NaN/inf"
        assert rel_err(g, r) <= TOL, f"{kernel} {name}: {rel_err(g, r):.3g}"
    if tq > tk and causal:                         # rows with no visible key
        empty = np.isneginf(lse[0])
        assert empty.any() and np.all(got[0][:, empty] == 0)


#: explicit (Br, Bc) that fit the fast kernel's thread layout: 4 x 4 simulator threads,
#: 8 rows x 16 columns of threads on a GPU (Br, Bc multiples of those)
SMALL_BLOCKS = (4, 8) if using_simulator() else (8, 16)
TALL_BLOCKS = (32, 8) if using_simulator() else (32, 16)


def test_explicit_blocks_and_float64_io():
    q, k, v, o, lse, do = problem(10, 9, 4, True, seed=3, lead=(), scale=0.3)
    q, k, v, o, do = (x.astype(np.float64) for x in (q, k, v, o, do))
    block_q, block_k = SMALL_BLOCKS
    got = backward(q, k, v, o, lse.astype(np.float64), do, kernel="fast", block_q=block_q,
                      block_k=block_k, causal=True, scale=0.3)
    ref = reference.attention_backward(q, k, v, do, causal=True, scale=0.3)
    assert all(g.dtype == np.float64 for g in got)
    assert all(rel_err(g, r) <= TOL for g, r in zip(got, ref))


@pytest.mark.parametrize("kwargs,exc,word", [
    (dict(kernel="fastest"), ValueError, "kernel"),
    (dict(block_q=6), ValueError, "block_q=6 must be a multiple"),
    (dict(block_k=2), ValueError, "block_k=2 must be a multiple"),
    (dict(causal=2), TypeError, "causal"),
])
def test_bad_arguments(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        backward(*problem(5, 5, 4, False), **kwargs)


def test_package_exports_the_function():
    assert flashcourse.cuda.backward is backward


def test_config_shared_memory_and_layout():
    cfg = plan(64, 64, 64, 16, 16)
    # Q, dO, K, V: 64 x 65 floats each; P, dS: 64 x 65; L, D: 64 each
    assert cfg.shared_bytes == 4 * (4 * 64 * 65 + 2 * 64 * 65 + 2 * 64)
    assert plan(5, 8, 8, 4, 4).head_dim == 8      # d padded to the thread columns
    with pytest.raises(ValueError, match="shared memory"):
        plan(128, 256, 256, 16, 16)


def test_block_larger_than_thread_count():
    # 16 simulator threads, Br = 32 rows: every row's L and D must still be loaded
    q, k, v, o, lse, do = problem(37, 21, 3, True, seed=5, lead=())
    ref = reference.attention_backward(q, k, v, do, causal=True)
    block_q, block_k = TALL_BLOCKS
    for kern in ("fast", "fast_two_pass"):
        got = backward(q, k, v, o, lse, do, kernel=kern, block_q=block_q, block_k=block_k,
                       causal=True)
        assert all(rel_err(g, r) <= TOL for g, r in zip(got, ref)), kern
