"""Every CUDA kernel at awkward head dims (1, 3, 65, 129, 256), forward and backward,
against the float64 reference, on Numba's simulator (or the GPU when there is one).

Shapes are tiny and ragged (Tq = 5, Tk = 7 or the reverse, causal both ways, so some
rows see no key) so each case takes well under a few seconds in the simulator; d = 1
and d = 3 are below one thread column, 65 and 129 one past a power of two, 256 the
largest head dim FlashAttention supports. Which configuration a GPU would choose at
these d is tests/test_gpu_presets.py's job (pure); here the kernels compute, with the
simulator's tiny tiles, and then with the tiles and thread layouts the GPU presets get
at d = 256 (run at d = 3 to stay fast: the arrangement of threads does not depend on d).

The tensor-core kernel supports d <= 128 (its MAX_HEAD_DIM): beyond, the test checks
that it refuses, naming the limit.

Tolerances: forward o and lse within 1e-5 relative (float32 compute, helpers.TOL; the
tensor-core kernel runs float32 input as 3xTF32, within it too);
backward dq, dk, dv within 1e-4 relative per gradient (float32; a sum over Tq or Tk
products of d-long dot products; measured ~3e-7 here).
"""

import numpy as np
import pytest

from flashcourse import reference
from flashcourse.cuda import backward, forward
from flashcourse.cuda.registry import BACKWARD, FORWARD
from helpers import assert_close_to_reference, make_qkv, rel_err

HEAD_DIMS = (1, 3, 65, 129, 256)
BACKWARD_TOL = 1e-4
CASES = [(5, 7, False), (7, 5, True)]       # (Tq, Tk, causal); Tq > Tk: rows with no key


@pytest.mark.parametrize("kernel", tuple(n for n, k in FORWARD.items() if k.simulator))
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_forward_at_awkward_head_dims(kernel, d):
    rng = np.random.default_rng(d)
    if kernel in ("tensor_core", "hopper"):
        from flashcourse.cuda.tensor_core.host import MAX_HEAD_DIM
        if d > MAX_HEAD_DIM:             # its documented limit: refused, naming it
            q, k, v = make_qkv(rng, (1,), 5, 7, d, dtype=np.float32)
            with pytest.raises(ValueError, match=f"at most {MAX_HEAD_DIM}"):
                forward(q, k, v, kernel=kernel)
            return
    # dense loops over d in tiles with two barriers each, tensor_core emulates each mma
    # (both slow in the simulator): one case each
    slow = kernel in ("dense", "tensor_core")
    for tq, tk, causal in CASES[-1:] if slow else CASES:
        q, k, v = make_qkv(rng, (1,), tq, tk, d, dtype=np.float32)
        o, lse = forward(q, k, v, kernel=kernel, causal=causal)
        o_ref, lse_ref = reference.attention(q.astype(np.float64), k.astype(np.float64),
                                             v.astype(np.float64), causal=causal)
        # the Hopper kernel computes in 16 bits (bf16 for float32 inputs): 16-bit tolerance
        tol_dtype = np.float16 if kernel == "hopper" else np.float32
        assert_close_to_reference(o, lse, o_ref, lse_ref, tol_dtype)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", tuple(BACKWARD))
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_backward_at_awkward_head_dims(kernel, d):
    rng = np.random.default_rng(100 + d)
    if kernel in ("tensor_core", "hopper"):
        _tensor_core_backward_at(d, rng, kernel)
        return
    for tq, tk, causal in CASES:
        q, k, v = (x.astype(np.float64) for x in make_qkv(rng, (1,), tq, tk, d))
        do = rng.standard_normal((1, tq, d))
        o, lse = reference.attention(q, k, v, causal=causal)
        ref = reference.attention_backward(q, k, v, do, causal=causal)
        f32 = [x.astype(np.float32) for x in (q, k, v, o, lse, do)]
        got = backward(*f32, kernel=kernel, causal=causal)
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            assert np.isfinite(g).all(), name
            assert rel_err(g, r) <= BACKWARD_TOL, (kernel, d, tq, tk, causal, name)


def _tensor_core_backward_at(d, rng, kernel="tensor_core"):
    """The tensor-core (mma.sync) or Hopper (wgmma) backward: float16 inputs (exact for
    their fp16 products), d padded to a multiple of 16, rows with no key; d > 128 refused
    naming the limit. Against float64 on the same inputs: P and dS are rounded to float16
    inside (as FlashAttention-2 does)."""
    from flashcourse.cuda.gradients.tc_backward import MAX_HEAD_DIM
    tq, tk, causal = CASES[-1]
    q, k, v = (x.astype(np.float16) for x in make_qkv(rng, (1,), tq, tk, d))
    do = rng.standard_normal((1, tq, d)).astype(np.float16)
    h64 = [x.astype(np.float64) for x in (q, k, v, do)]
    o, lse = reference.attention(*h64[:3], causal=causal)
    args = (q, k, v, o.astype(np.float16), lse.astype(np.float32), do)
    if d > MAX_HEAD_DIM:
        with pytest.raises(ValueError, match=f"at most {MAX_HEAD_DIM}"):
            backward(*args, kernel=kernel, causal=causal)
        return
    got = backward(*args, kernel=kernel, causal=causal)
    ref = reference.attention_backward(*h64, causal=causal)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert np.isfinite(g).all() and rel_err(g, r) <= 3e-3, (d, name, rel_err(g, r))


def _preset_choices(choose):
    """The distinct configurations the GPU presets get at d = 256, smallest GPU first."""
    from flashcourse.limits import PRESETS
    seen = []
    for lim in PRESETS.values():
        c = choose(256, lim)
        if c not in seen:
            seen.append(c)
    return seen


def _flash_choices():
    from flashcourse.cuda.cuda_core import flash
    return _preset_choices(flash.default_config)


def _backward_choices():
    from flashcourse.cuda.gradients import backward_kernels
    return _preset_choices(backward_kernels.default_tiles)


@pytest.mark.parametrize("config", _flash_choices(), ids=str)
def test_flash_with_the_tiles_the_presets_get(config):
    """The thread arrangements the presets get at d = 256 (e.g. a T4's 16 x 16 tiles over
    256 threads, one query row per thread), run here at d = 3 (the simulator is slow;
    the arrangement of threads over the tile does not depend on d) with Tq, Tk ragged."""
    br, bc, threads, tm = config
    rng = np.random.default_rng(br + bc)
    q, k, v = make_qkv(rng, (1,), 9, 40, 3, dtype=np.float32)
    o, lse = forward(q, k, v, kernel="flash", causal=True, block_q=br, block_k=bc,
                     threads=threads, tm=tm)
    o_ref, lse_ref = reference.attention(q.astype(np.float64), k.astype(np.float64),
                                         v.astype(np.float64), causal=True)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


@pytest.mark.parametrize("tiles", _backward_choices(), ids=str)
def test_backward_with_the_tiles_the_presets_get(tiles):
    """The backward's tiles and thread layouts the presets get at d = 256 (8 x 32 tiles
    over 8 x 32 threads on CC 8.6/8.9, 8 x 16 on a T4, ...), run at d = 3, both fast
    kernels."""
    from numba import cuda

    from flashcourse.cuda.gradients import backward_kernels
    br, bc, ty, tx = tiles
    rng = np.random.default_rng(br * bc)
    d, tq, tk = 3, 9, 40
    q, k, v = (x.astype(np.float64) for x in make_qkv(rng, (1,), tq, tk, d))
    do = rng.standard_normal((1, tq, d))
    o, lse = reference.attention(q, k, v, causal=True)
    ref = reference.attention_backward(q, k, v, do, causal=True)
    dev = [cuda.to_device(np.ascontiguousarray(x, np.float32)) for x in (q, k, v, o, lse, do)]
    for kernel in ("fast", "fast_two_pass"):
        out = [cuda.device_array(x.shape, np.float32) for x in (q, k, v)]
        backward_kernels.run(*dev, *out, tq, tk, d, 1 / np.sqrt(d), True, kernel=kernel,
                             block_q=br, block_k=bc, ty=ty, tx=tx)
        for name, g, r in zip(("dq", "dk", "dv"), out, ref):
            assert rel_err(g.copy_to_host(), r) <= BACKWARD_TOL, (kernel, tiles, name)
