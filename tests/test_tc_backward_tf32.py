"""The 3xTF32 tensor-core backward (flashcourse.cuda.gradients.tc_backward_kernels_tf32) on Numba's
simulator: float32 q, k, v, o, dO; every product on m16n8k8 TF32 mma in three passes
(small*big + big*small + big*big), so the gradients match the float64 reference
(`reference.attention_backward` on the same float32 inputs) to fp32 accuracy, 1e-5
relative. One pass (big*big only) would be off by ~1e-3, a wrong fragment, mask or scale
by O(1). Shapes: ragged tiles, Tq != Tk both ways, causal rows that see no key, odd d,
large logits. Each simulated mma costs a barrier: the shapes are tiny (1 or 2 warps).
On the simulator the D pre-pass runs one thread per row (`tc_backward_passes.prepass_layout`);
tests that take the gpu_prepass fixture run the GPU's layout (tests/conftest.py says why).
"""

import numpy as np
import pytest
from numba import cuda

from flashcourse import reference
from flashcourse.cuda import backward
from flashcourse.cuda.gradients import tc_backward as tcb
from flashcourse.cuda.registry import BACKWARD
from flashcourse.gpu import using_simulator
from helpers import build_flags, rel_err

pytestmark = pytest.mark.skipif(not using_simulator(), reason="simulator tests (CPU machine)")

#: vs the float64 gradients of the same float32 inputs
TOL = 1e-5


def problem(tq, tk, d, causal, seed=0, lead=(1,), big=1.0):
    """float32 q, k, v, do; o and lse from the float64 forward (stored in float32)."""
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((*lead, t, d)).astype(np.float32)
                   for t in (tq, tk, tk, tq))
    q = q * np.float32(big)
    o, lse = reference.attention(*(a.astype(np.float64) for a in (q, k, v)), causal=causal)
    return q, k, v, o.astype(np.float32), lse.astype(np.float32), do


def ref_grads(args, causal):
    q, k, v, _, _, do = args
    return reference.attention_backward(*(a.astype(np.float64) for a in (q, k, v, do)),
                                        causal=causal)


def assert_fp32_accurate(got, ref, what=""):
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert g.dtype == np.float32 and g.shape == r.shape, name
        assert np.isfinite(g).all(), name
        err = rel_err(g, r)
        assert err <= TOL, f"{what} {name}: {err:.2e}"


CASES = [  # (Tq, Tk, d, causal)
    (20, 24, 16, False),     # ragged query and key blocks, Tq < Tk
    (19, 6, 5, True),        # Tq > Tk: rows 0..12 see no key; d padded 5 -> 16
    (7, 37, 33, True),       # Tk > Tq (three key blocks), odd d padded to 48
    (21, 9, 64, True),       # d = 64, Tq > Tk: rows with no key, a causal diagonal
    (33, 17, 64, False),     # three query blocks: both cp.async buffers, reused
]


@pytest.mark.slow
@pytest.mark.parametrize("tq,tk,d,causal", CASES)
def test_matches_the_float64_reference_at_fp32_accuracy(tq, tk, d, causal, request):
    """At fp32 accuracy; the case with three key blocks runs the D pre-pass a GPU runs
    (one warp per row: the gpu_prepass fixture; the others the simulator's default)."""
    if (tq, tk, d) == (7, 37, 33):
        request.getfixturevalue("gpu_prepass")
        from flashcourse.cuda.gradients.tc_backward_passes import prepass_layout
        assert prepass_layout() == "warp_shfl"
    args = problem(tq, tk, d, causal, seed=tq + tk)
    got = backward(*args, kernel="tensor_core", causal=causal)      # float32: 3xtf32
    assert_fp32_accurate(got, ref_grads(args, causal), f"{(tq, tk, d, causal)}")
    if tq > tk and causal:                     # rows that see no key: dq = 0 exactly
        empty = np.isneginf(args[4][0])
        assert empty.any() and np.all(got[0][0, empty] == 0)


@pytest.mark.slow
@pytest.mark.parametrize("tq,tk,d,causal", [
    (19, 6, 5, True),        # Tq > Tk: rows that see no key (dq = 0), d padded 5 -> 16
    (7, 37, 33, True),       # three key blocks: both K/V buffers, reused; odd d
    (20, 24, 16, False),     # two query blocks (grid rows), ragged keys
])
def test_deterministic_dq_pass_at_fp32_accuracy(tq, tk, d, causal):
    """deterministic=True: kernel 1 without dQ, then the query-major 3xTF32 pass (kernel 2:
    S and dP again, dQ_i in registers, no atomics). Its dq meets the same 1e-5 as the
    atomics' (dropping the small terms of dS K_j alone gives 2.4e-4 at the first shape)."""
    args = problem(tq, tk, d, causal, seed=tq + tk)
    got = backward(*args, kernel="tensor_core", causal=causal, deterministic=True)
    assert_fp32_accurate(got, ref_grads(args, causal), f"deterministic {(tq, tk, d)}")
    if tq > tk and causal:
        empty = np.isneginf(args[4][0])
        assert empty.any() and np.all(got[0][0, empty] == 0)


@pytest.mark.slow
def test_large_logits_and_two_heads():
    """Peaked softmax rows (scores up to ~+-40 after scaling) stay fp32-accurate; two
    heads (the per-head offsets of q, dO, lse/D and dQ in the flat arrays)."""
    args = problem(18, 18, 16, True, seed=5, lead=(2,), big=8.0)
    s = np.abs(args[0] @ np.swapaxes(args[1], -1, -2)).max() / 4.0
    assert s > 20
    got = backward(*args, kernel="tensor_core", causal=True, precision="3xtf32")
    assert_fp32_accurate(got, ref_grads(args, True), "large logits")


@pytest.mark.slow
@pytest.mark.parametrize("warps,block_q,d", [(2, 16, 32), (2, 32, 16)])
def test_multi_warp_tiles(warps, block_q, d):
    """Several warps per block: dQ's column tiles split over two warps (Br = 16) or its
    two 16-row tiles (Br = 32), each warp reading the other's dS through shared memory;
    Tk not a multiple of Bc = 32, a full query block (the unchecked atomics) and a ragged
    one."""
    args = problem(21, 45, d, False, seed=11)
    got = backward(*args, kernel="tensor_core", warps=warps, block_q=block_q)
    assert_fp32_accurate(got, ref_grads(args, False), f"warps={warps} Br={block_q}")


@pytest.mark.slow
@pytest.mark.parametrize("warps,block_q,tq,tk,d,causal", [
    (1, 16, 21, 13, 24, True),       # ragged, Tq > Tk (rows with no key), d padded to 32
    (2, 32, 45, 21, 16, False),      # two warps, two 16-row tiles, several query blocks
])
def test_planes_pipeline_equals_async(warps, block_q, tq, tk, d, causal):
    """pipeline="planes" (Q_i, dO_i split once per query block into big/small planes)
    does the same arithmetic as "async" (split where each warp reads): equal bit for bit,
    two heads (in the one-warp case; one in the two-warp case, where a second head only
    doubled the simulator's time: the per-head offsets are the same code), and
    fp32-accurate."""
    args = problem(tq, tk, d, causal, seed=13, lead=(2,) if warps == 1 else (1,))
    kw = dict(kernel="tensor_core", causal=causal, warps=warps, block_q=block_q)
    a = backward(*args, pipeline="async", **kw)
    p = backward(*args, pipeline="planes", **kw)
    for x, y in zip(a, p):
        assert np.array_equal(x, y)
    assert_fp32_accurate(p, ref_grads(args, causal), "planes")


@pytest.mark.slow
def test_small_terms_in_one_chain_or_apart():
    """tc_backward_kernels_tf32.SMALL_TERMS: a block's small terms of dV, dK and dQ in the
    big terms' accumulator ("one_chain", the default) or in their own ("apart"): both
    fp32-accurate, and different bits (the switch reaches the kernel)."""
    from flashcourse.cuda.gradients import tc_backward_kernels_tf32 as t32
    args = problem(21, 29, 24, True, seed=17)
    kw = dict(kernel="tensor_core", causal=True, warps=2, block_q=16)
    got = {}
    for how in ("one_chain", "apart"):
        with build_flags(t32, tcb.kernels.cache_clear, SMALL_TERMS=how):
            got[how] = backward(*args, **kw)
            assert_fp32_accurate(got[how], ref_grads(args, True), how)
    assert any(not np.array_equal(a, b) for a, b in zip(got["one_chain"], got["apart"]))


@pytest.mark.slow
def test_device_arrays_in_and_out():
    args = problem(17, 23, 24, True, seed=9)
    dev = [cuda.to_device(a) for a in args]
    got = backward(*dev, kernel="tensor_core", causal=True)
    assert all(not isinstance(g, np.ndarray) and hasattr(g, "copy_to_host") for g in got)
    assert_fp32_accurate([g.copy_to_host() for g in got], ref_grads(args, True), "device")


@pytest.mark.slow
def test_float32_defaults_to_3xtf32_and_bf16_stays_available():
    assert tcb.default_precision(np.float32) == "3xtf32"
    assert tcb.default_precision(np.float16) == "fp16"
    spec = BACKWARD["tensor_core"]
    assert spec.compute({}, np.float32) == "float32"
    assert spec.compute({"precision": "3xtf32"}, np.float32) == "float32"
    assert spec.compute({"precision": "bf16"}, np.float32) == "bfloat16"
    args = problem(9, 11, 16, False, seed=1)
    ref = ref_grads(args, False)
    bf = backward(*args, kernel="tensor_core", precision="bf16")
    assert all(1e-4 < rel_err(g, r) < 3e-2 for g, r in zip(bf, ref))     # bf16 rounding


@pytest.mark.slow
def test_one_key_cancels():
    """One key: P = 1, so dS = dO.v - dO.o with o = v; dP (3xTF32) and D (fp32 in the
    pre-pass) cancel to ~1e-7 of |dO||v|, and dv = sum of do."""
    args = problem(5, 1, 16, False, seed=2)
    dq, dk, dv = backward(*args, kernel="tensor_core")
    scale = np.abs(args[5]).max() * np.abs(args[2]).max() * 16
    assert np.abs(dq).max() <= 1e-6 * scale and np.abs(dk).max() <= 1e-6 * scale
    assert rel_err(dv, args[5].astype(np.float64).sum(-2, keepdims=True)) <= TOL


@pytest.mark.slow
def test_wrong_lse_and_o_are_caught_at_float32_tolerances():
    q, k, v, o, lse, do = problem(11, 13, 16, True, seed=2)
    with pytest.raises(ValueError, match="lse does not match"):
        backward(q, k, v, o, lse + np.float32(0.05), do, kernel="tensor_core", causal=True)
    with pytest.raises(ValueError, match="o does not match"):
        backward(q, k, v, o[:, ::-1].copy(), lse, do, kernel="tensor_core", causal=True)


@pytest.mark.parametrize("kwargs,word", [
    (dict(pipeline="plain"), "pipeline='async' or 'planes'"),
    (dict(kv_regs=True), "kv_regs must be False"),
    (dict(block_q=48), "block_q must be 16, 32, 64 or 128"),
    (dict(warps=1, block_q=32), "does not fit warps"),
    (dict(precision="tf32"), "precision must be one of"),
])
def test_bad_options_are_named(kwargs, word):
    args = problem(6, 5, 16, False)
    with pytest.raises(ValueError, match=word):
        backward(*args, kernel="tensor_core", **kwargs)


def test_3xtf32_takes_float32_arrays_only():
    args = [a.astype(np.float16) if a.ndim == 3 else a for a in problem(6, 5, 16, False)]
    with pytest.raises(ValueError, match="takes float32 arrays"):
        backward(*args, kernel="tensor_core", precision="3xtf32")


def test_gpu_tiles_fit_every_head_dim_on_the_h200():
    """The default tiles plan for every d (dQ's column tiles split over the warps) and fit
    the H200's shared memory with two blocks per SM, or one of 8 warps (d = 113..128);
    launches() reports them."""
    from flashcourse.limits import PRESETS
    h200 = PRESETS["H200"]
    for d in range(1, 129):
        t = tcb.choose_tiles(d, h200, precision="3xtf32")
        cfg = tcb.plan("3xtf32", d, t["warps"], t["block_q"], False, True, False,
                       t["kv_regs"], t["q_block_k"], 0, t["pipeline"])
        assert cfg.shared_bytes <= h200.smem_per_block_optin
        blocks = h200.smem_per_sm // (cfg.shared_bytes + 1024)
        assert blocks >= 2 or t["warps"] == 8, (d, cfg.shared_bytes, t)
    pre, key_major = tcb.launches(128, 4096, 4096, 32, h200, precision="3xtf32")
    assert key_major.grid == (4096 // 128, 32) and key_major.threads == 256
    pre, key_major = tcb.launches(64, 4096, 4096, 32, h200, precision="3xtf32")
    assert key_major.grid == (4096 // 64, 32) and key_major.threads == 128
    for d in (64, 128):                # deterministic: kernel 2 after kernel 1 (no dQ)
        launches = tcb.launches(d, 4096, 4096, 32, h200, deterministic=True,
                                precision="3xtf32")
        assert len(launches) == 3 and launches[2].shared_bytes <= h200.smem_per_block_optin
        rows = 16 * launches[2].threads // 32
        assert launches[2].grid == (4096 // rows, 32)
