"""Bounded work and clear types for every option (issue 23, part: bounds and types).

1. `num_splits` is a whole number from 1 to min(Tc, 128), Tc = ceil(Tk / block_k) the
   key blocks, in every decode entry (numpy, CUDA, the registered "decode" kernel);
   anything else is refused at once, naming num_splits and Tc.
2. Array subclasses: np.matrix is refused, masked arrays are refused (their mask
   would be ignored), naming the argument.
3. Quiz files: read as UTF-8 bytes; binary, non-UTF-8, directory and FIFO paths give
   an error naming the file (a FIFO never blocks); the cache follows the content.
4. Concurrency: simulated CUDA calls from two threads are serialised.

CUDA kernels run on Numba's simulator here (tiny shapes).
"""

import time

import numpy as np
import pytest

import flashcourse.cuda as fcuda
from flashcourse import decode
from flashcourse.cuda import decode_kernels

# --- 1. num_splits -----------------------------------------------------------------

def _decode_problem(tk=100, d=8, dtype=np.float32):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 1, d)).astype(dtype)        # Hq = 2, Tq = 1
    k = rng.standard_normal((1, 1, tk, d)).astype(dtype)       # Hkv = 1
    v = rng.standard_normal((1, 1, tk, d)).astype(dtype)
    return q, k, v


DECODES = {
    "numpy": lambda q, k, v, **kw: decode.split_kv_forward(q, k, v, **kw),
    "cuda": lambda q, k, v, **kw: fcuda.decode(q, k, v, **kw),
    "cuda_registered": lambda q, k, v, **kw: fcuda.forward(
        q[:, :1], k, v, kernel="decode", **kw),
}


@pytest.mark.parametrize("name", DECODES)
@pytest.mark.parametrize("num_splits", [10 ** 7, 500])
def test_huge_num_splits_is_refused_fast(name, num_splits):
    """10**7 ran 48 s in numpy and failed there; 500 hung cuda.decode on the simulator."""
    q, k, v = _decode_problem()
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"num_splits = .* key blocks: Tc = ceil\(Tk / "
                                         r"block_k\) = ceil\(100 / 4\) = 25"):
        DECODES[name](q, k, v, num_splits=num_splits, block_k=4)
    assert time.perf_counter() - t0 < 5


def test_num_splits_beyond_the_key_blocks_or_the_cap():
    q, k, v = _decode_problem(tk=20)
    with pytest.raises(ValueError, match=r"ceil\(20 / 4\) = 5"):
        decode.split_kv_forward(q, k, v, num_splits=6, block_k=4)
    o, lse = decode.split_kv_forward(q, k, v, num_splits=5, block_k=4)   # Tc itself: fine
    assert np.isfinite(lse).all()
    with pytest.raises(ValueError, match="MAX_SPLITS = 128"):
        decode.check_num_splits(129, 10_000, 1)
    assert decode.check_num_splits(128, 10_000, 1) == 128
    with pytest.raises(ValueError, match="num_splits"):
        decode.split_bounds(300, 64, 6)                          # Tc = 5
    with pytest.raises(TypeError, match="num_splits"):
        decode.split_kv_forward(q, k, v, num_splits=2.0, block_k=4)
    with pytest.raises(ValueError, match="num_splits"):
        decode_kernels.plan_splits(1, 1, 20, decode_kernels.plan(8, 4, 1, unroll=1, warps=1),
                                   num_splits=6, block_k=4)
