"""flashcourse.cuda: what is particular to the CUDA kernels (the shared contract, irregular
shapes and bad input, is tests/test_contract.py).

Without a GPU these run on Numba's CUDA simulator (conftest imports flashcourse
first, which selects it), so shapes stay tiny: a few blocks of 8 x 8 tiles.
Tolerance: float32 computation -> relative error <= 1e-5 (TOL[np.float32]).
"""

import numpy as np
import pytest

from flashcourse import reference
from flashcourse.cuda import backward, forward
from flashcourse.cuda.common import _launch
from flashcourse.cuda.cuda_core import flash
from flashcourse.cuda.registry import FORWARD, Kernel, register
from flashcourse.gpu import using_simulator
from helpers import TOL, assert_close_to_reference, make_qkv, rel_err

SMALL = dict(block_q=8, block_k=8, threads=16, tm=2)   # RT = 4 row groups x CT = 4 column groups


def _small(kernel):
    if kernel == "flash":
        return SMALL if using_simulator() else {}
    if kernel == "textbook":
        return {"block_q": 8} if using_simulator() else {}
    return {}


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
    with pytest.raises(ValueError, match="kernel must be one of"):
        forward(q, k, v, kernel="fastest")
    with pytest.raises(ValueError, match="block_k must equal block_q"):
        forward(q, k, v, kernel="textbook", block_q=8, block_k=4)


# ------------------------- issue 50 item 7: one clear line for a kernel, option or flag

@pytest.mark.parametrize("bad", [["flash"], ("flash",), np.array(["flash", "dense"]), 3])
def test_a_kernel_that_is_not_a_name_is_named(bad):
    """kernel=["flash"] gave "unhashable type: 'list'": every entry with a kernel= now
    says kernel must be one of the registered names (a string), before any work."""
    from flashcourse import cuda as fcuda
    from flashcourse.cuda import registry
    from flashcourse.cuda.decoding import decode_tc_kernels
    from flashcourse.cuda.gradients import backward_kernels
    q, k, v = make_qkv(np.random.default_rng(9), (1,), 4, 4, 3, dtype=np.float32)
    calls = {
        "forward": lambda: forward(q, k, v, kernel=bad),
        "backward": lambda: backward(q, k, v, q, q[..., 0], q, kernel=bad),
        "decode": lambda: fcuda.decode(q[None], k[None], v[None], kernel=bad),
        "capture": lambda: fcuda.capture("forward", q, k, v, kernel=bad),
        "extra_device_bytes": lambda: fcuda.extra_device_bytes(bad, 1, 4, 4, 3),
        "registry": lambda: registry.get("backward", bad),
        "split kernel": lambda: decode_tc_kernels.choose_kernel(bad, 16, 2, 4, True),
        "backward_kernels": lambda: backward_kernels.launches(16, 4, 4, 1, None, kernel=bad),
    }
    for where, call in calls.items():
        with pytest.raises(TypeError, match=r"^kernel must be one of \(.*'\w+'.*\) "
                                            r"(or None )?\(a string\), got"):
            call()
        assert where


def test_boolean_options_accept_booleans_only():
    """check="no", allow_nonfinite="no" and deterministic="no" were taken as True; 0/1 are
    refused too (numpy booleans are booleans)."""
    from flashcourse import cuda as fcuda
    q, k, v = make_qkv(np.random.default_rng(9), (1,), 4, 4, 3, dtype=np.float32)
    o, lse = forward(q, k, v, **_small("flash"), check=np.False_)
    calls = {
        "check": [lambda b: forward(q, k, v, check=b),
                  lambda b: backward(q, k, v, o, lse, q, check=b),
                  lambda b: fcuda.decode(q[None], k[None], v[None], check=b)],
        "allow_nonfinite": [lambda b: forward(q, k, v, allow_nonfinite=b),
                            lambda b: fcuda.decode(q[None], k[None], v[None],
                                                   allow_nonfinite=b)],
        "causal": [lambda b: fcuda.decode(q[None], k[None], v[None], causal=b)],
        "deterministic": [lambda b: backward(q, k, v, o, lse, q, kernel="tensor_core",
                                             deterministic=b)],
    }
    for name, fns in calls.items():
        for fn in fns:          # (a kernel option's None means its default: deterministic)
            for bad in ("no", "False", 1) + ((None,) if name != "deterministic" else ()):
                with pytest.raises(TypeError, match=f"^{name} must be True or False"):
                    fn(bad)


def test_numeric_options_are_named():
    """min_blocks="x" gave "invalid literal for int()"; an unhashable tile option of the
    tensor-core backward gave "unhashable type" from its plan cache."""
    from flashcourse.cuda.gradients import tc_backward
    from flashcourse.cuda.tensor_core import host as tc
    with pytest.raises(TypeError, match=r"^min_blocks must be an integer >= 0 \(blocks per SM"):
        tc.plan("fp16", 64, 4, 64, simulator=True, min_blocks="x")
    with pytest.raises(ValueError, match="^min_blocks must be an integer >= 0"):
        tc.plan("fp16", 64, 4, 64, simulator=True, min_blocks=-1)
    with pytest.raises(TypeError, match="^min_blocks must be an integer"):
        tc_backward.plan("fp16", 64, 4, 64, simulator=True, min_blocks=2.5)
    with pytest.raises(TypeError, match="^prefetch must be True or False"):
        tc.plan("fp16", 64, 4, 64, simulator=True, prefetch="no")
    assert tc.plan("fp16", 64, 4, 64, simulator=True, prefetch=1).prefetch is True  # grids
    h = np.zeros((1, 4, 16), np.float16)
    for flag in ("prefetch", "lazy_rescale"):           # a caller's option: booleans only
        with pytest.raises(TypeError, match=f"^{flag} must be True or False"):
            forward(h, h, h, kernel="tensor_core", **{flag: 1})
    with pytest.raises(TypeError, match="^min_blocks must be an integer >= 0"):
        forward(h, h, h, kernel="tensor_core", pipeline="plain", min_blocks="x")
    assert tc.plan("fp16", 64, 4, 64, simulator=True, min_blocks=2).min_blocks == 2
    for name, value, exc in (("warps", [8], TypeError), ("min_blocks", "x", TypeError),
                             ("kv_regs", "no", TypeError), ("q_block_k", [64], TypeError)):
        args = dict(warps=4, block_q=64, kv_regs=True, q_block_k=64, min_blocks=0)
        args[name] = value
        with pytest.raises(exc, match=f"^{name} must be"):
            tc_backward._plan("fp16", 64, args["warps"], args["block_q"], True, True, False,
                              args["kv_regs"], args["q_block_k"], args["min_blocks"],
                              "async", False)
    with pytest.raises(TypeError, match="^unroll must be a positive integer"):
        flash.run(None, None, None, None, None, 4, 4, 3, 1.0, False, unroll="x")
    with pytest.raises(TypeError, match="^shuffle must be True or False"):
        flash.layout(8, 8, 8, 16, 2, shuffle="no")


# ------------------------------------------------------------- the registry's options
@pytest.mark.parametrize("kernel,options,word", [
    ("dense", dict(block_q=-1), "block_q"),
    ("dense", dict(threads=0), "threads"),
    ("textbook", dict(tm=2), "tm"),
    ("flash", dict(ty=4), "ty"),
])
def test_kernels_reject_options_they_do_not_use(kernel, options, word):
    q, k, v = make_qkv(np.random.default_rng(9), (1,), 4, 4, 3, dtype=np.float32)
    with pytest.raises(ValueError, match=f"kernel {kernel!r} does not use {word}"):
        forward(q, k, v, kernel=kernel, **options)


def test_backward_kernels_reject_options_they_do_not_use():
    q, k, v = make_qkv(np.random.default_rng(9), (1,), 4, 4, 3, dtype=np.float32)
    o, lse = forward(q, k, v, **_small("flash"))
    with pytest.raises(ValueError, match="'simple' does not use block_q"):
        backward(q, k, v, o, lse, q, kernel="simple", block_q=8)


def test_registry_names_are_unique_and_described():
    assert set(FORWARD) >= {"dense", "textbook", "flash"}
    assert all(spec.description and spec.direction == "forward" for spec in FORWARD.values())
    with pytest.raises(ValueError, match="is registered"):
        register(Kernel("flash", "forward", FORWARD["flash"].run))


# ------------------------------------------------------------- device arrays
def test_backward_takes_device_arrays():
    """Device arrays in -> device gradients out, equal to the numpy path's."""
    from numba import cuda
    rng = np.random.default_rng(11)
    q, k, v = make_qkv(rng, (2,), 6, 5, 3, dtype=np.float32)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = forward(q, k, v, causal=True, **_small("flash"))
    host = backward(q, k, v, o, lse, do, causal=True)
    dev = backward(*(cuda.to_device(x) for x in (q, k, v, o, lse, do)), causal=True)
    assert not isinstance(dev[0], np.ndarray)
    for h, g in zip(host, dev):
        assert np.array_equal(h, g.copy_to_host())


def test_device_arrays_must_be_c_contiguous():
    from numba import cuda
    q, k, v = make_qkv(np.random.default_rng(12), (1,), 6, 6, 4, dtype=np.float32)
    qd, kd, vd = (cuda.to_device(x) for x in (q, k, v))
    with pytest.raises(ValueError, match="q on the device must be C-contiguous"):
        forward(qd[:, :, :2], kd[:, :, :2], vd[:, :, :2])


def test_batch_heads_beyond_the_grid_limit_is_refused():
    """B x H > 65535 cannot be the grid's y dimension: a clear error before any launch."""
    q = np.zeros((65536, 1, 1), np.float32)          # (BH, T, d), 256 KiB
    with pytest.raises(ValueError, match="65,536 exceeds the CUDA grid's y limit of 65,535"):
        forward(q, q, q)
