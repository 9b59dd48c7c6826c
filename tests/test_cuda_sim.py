"""flashcourse.cuda: every kernel on tiny random shapes against the float64 reference.

Without a GPU these run on Numba's CUDA simulator (conftest imports flashcourse
first, which selects it), so shapes stay tiny: a few blocks of 8 x 8 tiles.
Tolerance: float32 computation -> relative error <= 1e-5 (TOL[np.float32]).
"""

import numpy as np
import pytest

from flashcourse import reference
from flashcourse.cuda import KERNELS, forward
from flashcourse.gpu import using_simulator
from flashcourse.cuda import _launch, flash
from helpers import TOL, assert_close_to_reference, make_qkv, rel_err

# (lead dims, Tq, Tk, d, causal): ragged tiles, Tq != Tk both ways, odd d, batch dims,
# and causal with Tq > Tk so the first rows see no key at all (o = 0, lse = -inf).
SHAPES = [
    ((2,), 13, 11, 5, False),
    ((1,), 9, 14, 7, True),
    ((2, 1), 14, 9, 4, True),       # rows 0..4 see no key (Tk - Tq = -5)
    ((1,), 1, 1, 3, False),
]
SMALL = dict(block_q=8, block_k=8, threads=16, tm=2)   # RT = 4 row groups x CT = 4 column groups


def _small(kernel):
    if kernel == "flash":
        return SMALL if using_simulator() else {}
    if kernel == "textbook":
        return {"block_q": 8} if using_simulator() else {}
    return {}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("lead,tq,tk,d,causal", SHAPES)
def test_kernel_matches_reference(kernel, lead, tq, tk, d, causal):
    """fp32 relative error <= 1e-5 on o and lse; empty rows give o = 0, lse = -inf."""
    rng = np.random.default_rng(hash((kernel, tq, tk, d, causal)) % 2**32)
    q, k, v = make_qkv(rng, lead, tq, tk, d, dtype=np.float32)
    o, lse = forward(q, k, v, kernel=kernel, causal=causal, **_small(kernel))
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
    assert o.dtype == np.float32 and lse.dtype == np.float32
    assert o.shape == q.shape and lse.shape == q.shape[:-1]
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)
    if causal and tq > tk:
        assert np.isneginf(lse[..., : tq - tk]).all()


def test_flash_other_tiling_and_extreme_scores():
    """Another micro-tile layout (tm=1, 32 threads) and large scores (exp overflow without max)."""
    rng = np.random.default_rng(3)
    q, k, v = make_qkv(rng, (1,), 10, 12, 6, dtype=np.float32, spread=6.0)
    cfg = dict(block_q=4, block_k=8, threads=32, tm=1) if using_simulator() else {}
    o, lse = forward(q, k, v, kernel="flash", causal=True, **cfg)
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


def test_dtypes_and_scale():
    """float64 in -> float64 o (computed in fp32); float16 in -> float16 out; custom scale."""
    rng = np.random.default_rng(4)
    q, k, v = make_qkv(rng, (1,), 6, 7, 4, dtype=np.float64)
    o, lse = forward(q, k, v, scale=0.3, **_small("flash"))
    o_ref, lse_ref = reference.attention(q, k, v, scale=0.3)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    assert rel_err(o, o_ref) <= TOL[np.float32]            # fp32 compute
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    o16, _ = forward(q16, k16, v16, scale=0.3, **_small("flash"))
    assert o16.dtype == np.float16
    assert rel_err(o16, o_ref) <= TOL[np.float16]


def test_device_arrays_in_and_out():
    """Device arrays in -> device arrays out, same numbers as numpy in."""
    from numba import cuda
    rng = np.random.default_rng(5)
    q, k, v = make_qkv(rng, (2,), 5, 6, 3, dtype=np.float32)
    o_d, lse_d = forward(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v),
                         **_small("flash"))
    assert not isinstance(o_d, np.ndarray)
    o_ref, lse_ref = reference.attention(q, k, v)
    assert_close_to_reference(o_d.copy_to_host(), lse_d.copy_to_host(), o_ref, lse_ref,
                              np.float32)


def test_simulator_message_printed_once(capsys):
    if not using_simulator():
        pytest.skip("a GPU is present")
    _launch._said = False
    rng = np.random.default_rng(6)
    q, k, v = make_qkv(rng, (1,), 2, 2, 2, dtype=np.float32)
    forward(q, k, v, **_small("flash"))
    forward(q, k, v, **_small("flash"))
    assert capsys.readouterr().out.count(_launch.SIMULATOR_MESSAGE) == 1


# ------------------------------------------------------------- launch limits and bad input
def test_too_many_threads_names_the_limit():
    with pytest.raises(ValueError,
                       match=r"threads per block exceeded, asked 2,048 threads, available 1,024"):
        flash.plan(64, block_q=256, block_k=64, threads=2048, tm=2, shuffle=True)


def test_too_much_shared_memory_names_the_amounts():
    with pytest.raises(ValueError, match=r"shared memory per block \(opt-in\) exceeded, asked"):
        flash.plan(128, block_q=256, block_k=256, threads=512, tm=8, shuffle=True)
    with pytest.raises(ValueError, match=r"textbook kernel: cannot launch: shared memory"):
        rng = np.random.default_rng(1)
        q, k, v = make_qkv(rng, (1,), 4, 4, 4000, dtype=np.float32)
        forward(q, k, v, kernel="textbook", block_q=32)


@pytest.mark.parametrize("kw,match", [
    (dict(block_q=8, block_k=8, threads=16, tm=3), "tm=3"),
    (dict(block_q=8, block_k=8, threads=24, tm=2), "power of two"),
    (dict(block_q=8, block_k=6, threads=16, tm=2), "block_k=6"),
    (dict(block_q=0, block_k=8, threads=16, tm=2), "block_q"),
])
def test_bad_flash_configuration(kw, match):
    rng = np.random.default_rng(2)
    q, k, v = make_qkv(rng, (1,), 4, 4, 4, dtype=np.float32)
    with pytest.raises(ValueError, match=match):
        forward(q, k, v, kernel="flash", **kw)


def test_shuffle_kernel_needs_whole_warps():
    with pytest.raises(ValueError, match="multiple of 32"):
        flash.plan(8, block_q=8, block_k=8, threads=16, tm=2, shuffle=True)


def test_bad_input():
    rng = np.random.default_rng(8)
    q, k, v = make_qkv(rng, (1,), 4, 5, 3, dtype=np.float32)
    with pytest.raises(ValueError, match="kernel"):
        forward(q, k, v, kernel="fastest")
    with pytest.raises(ValueError, match="v must have the same shape"):
        forward(q, k, v[..., :4, :])
    with pytest.raises(TypeError, match="q must be a numpy array"):
        forward(q.tolist(), k, v)
    with pytest.raises(TypeError, match="causal"):
        forward(q, k, v, causal="yes")
    bad = q.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        forward(bad, k, v)
    with pytest.raises(ValueError, match="block_k must equal block_q"):
        forward(q, k, v, kernel="textbook", block_q=8, block_k=4)
