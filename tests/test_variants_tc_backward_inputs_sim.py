"""flashcourse.cuda.variants_backward's calls (simulator or GPU): device arrays (float16
and bf16 bit patterns, results left on the device), float16 and bfloat16 numpy input,
per-batch and per-head block masks, caching, and bad input named in the error.
Accuracy as in test_variants_tc_backward_sim.py (the same helpers and bound).
"""

import numpy as np
import pytest
from numba import cuda

from flashcourse import cuda as fc_cuda
from flashcourse.cuda.gradients import tc_variants_backward as tvb
from flashcourse.cuda.tensor_core import variants as tcv
from flashcourse.variants import library as lib
from flashcourse.variants.block_mask import create_block_mask
from test_variants_tc_backward_sim import assert_grads_within_rounding, forward_of, inputs



def bf16_bits(a):
    """float32 values already rounded to bf16 -> their uint16 bit patterns."""
    return (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bits(b):
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_device_arrays_stay_on_the_device(precision):
    """float16 (fp16) or uint16 bf16 bits in, the gradients in the same dtype on the
    device, dsinks a float32 device array; sinks and GQA 2:1, Tq != Tk, a ragged d."""
    tq, tk, d = 19, 26, 24
    mask = lib.sliding_window(6, tq, tk)
    sinks = np.array([0.3, -0.8])
    q, k, v, do = inputs(np.random.default_rng(3), tq, tk, d, 2, 1, precision=precision)
    o, lse = forward_of(q, k, v, precision, mask_mod=mask, sinks=sinks)
    to = (lambda a: a.astype(np.float16)) if precision == "fp16" else bf16_bits
    dev = [cuda.to_device(to(a)) for a in (q, k, v, o)] + [cuda.to_device(lse),
                                                           cuda.to_device(to(do))]
    bm = create_block_mask(mask, None, None, tq, tk, 16, 16)
    dq, dk, dv, dsinks = fc_cuda.variants_backward(*dev, block_mask=bm, sinks=sinks)
    for g, like in ((dq, q), (dk, k), (dv, v)):
        assert not isinstance(g, np.ndarray) and g.shape == like.shape
        assert np.dtype(g.dtype) == np.dtype(dev[0].dtype)
    back = (lambda a: a.copy_to_host().astype(np.float32)) if precision == "fp16" else \
        (lambda a: from_bits(a.copy_to_host()))
    got = (*(back(g) for g in (dq, dk, dv)), dsinks.copy_to_host().astype(np.float64))
    # the device path returns 16-bit gradients: one more rounding (u |g|) than the
    # numpy path's float32 ones, well inside the bar at these sizes
    assert_grads_within_rounding(got, q, k, v, o, lse, do, precision, mask_mod=mask,
                                 sinks=sinks)


def test_float16_and_bfloat16_numpy_inputs_come_back_in_their_dtype():
    tq, tk, d = 17, 21, 16
    mask = lib.causal(tq, tk)
    q, k, v, do = inputs(np.random.default_rng(8), tq, tk, d)
    o, lse = forward_of(q, k, v, "fp16", mask_mod=mask)
    bm = create_block_mask(mask, None, None, tq, tk, 16, 16)
    got = fc_cuda.variants_backward(*(a.astype(np.float16) for a in (q, k, v, o)), lse,
                                    do.astype(np.float16), block_mask=bm)
    assert [g.dtype for g in got[:3]] == [np.float16] * 3 and got[3] is None
    ml_dtypes = pytest.importorskip("ml_dtypes")
    qb, kb, vb, dob = inputs(np.random.default_rng(8), tq, tk, d, precision="bf16")
    ob, lseb = forward_of(qb, kb, vb, "bf16", mask_mod=mask)
    bf = ml_dtypes.bfloat16
    gb = fc_cuda.variants_backward(*(a.astype(bf) for a in (qb, kb, vb, ob)), lseb,
                                   dob.astype(bf), block_mask=bm)
    assert [g.dtype for g in gb[:3]] == [np.dtype(bf)] * 3
    assert_grads_within_rounding(tuple(g.astype(np.float32) for g in gb[:3]) + (None,),
                                 qb, kb, vb, ob, lseb, dob, "bf16", mask_mod=mask)


def test_batch_and_per_head_masks():
    """B = 2 and a mask that differs per head (H' = 2): each query head of the GQA group
    reads its own transposed lists."""
    tq, tk, d = 18, 23, 16

    def per_head(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (h == 1)
    q, k, v, do = inputs(np.random.default_rng(2), tq, tk, d, batch=2)
    o, lse = forward_of(q, k, v, "fp16", mask_mod=per_head)
    bm = create_block_mask(per_head, None, 2, tq, tk, 16, 16)
    got = fc_cuda.variants_backward(q, k, v, o, lse, do, block_mask=bm)
    assert_grads_within_rounding(got, q, k, v, o, lse, do, "fp16", mask_mod=per_head)


def test_kernels_and_device_lists_are_cached():
    tq = tk = 16
    q, k, v, do = inputs(np.random.default_rng(0), tq, tk, 16, 1, 1)
    mask = lib.causal(tq, tk)
    o, lse = forward_of(q, k, v, "fp16", mask_mod=mask)
    bm = create_block_mask(mask, None, None, tq, tk, 16, 16)
    before = len(tvb._KERNELS)
    for _ in range(2):
        fc_cuda.variants_backward(q, k, v, o, lse, do, block_mask=bm)
    assert len(tvb._KERNELS) == before + 1
    assert tcv.device_block_mask(bm, "q") is tcv.device_block_mask(bm, "q")
    assert tcv.device_block_mask(bm, "kv") is not tcv.device_block_mask(bm, "q")


def test_tiles_are_chosen_to_divide_the_block_mask():
    cfg = tvb.config("fp16", 64, (128, 128), simulator=False)
    assert 128 % cfg.block_k == 0 and 128 % cfg.block_q == 0
    cfg = tvb.config("fp16", 64, (48, 80), simulator=False)       # Bc' = 80: 1 warp
    assert cfg.block_k == 16 and 48 % cfg.block_q == 0
    assert tvb.config("bf16", 40, (32, 32), simulator=True).head_dim == 48


@pytest.mark.parametrize("call,match", [
    (lambda a: dict(a, kernel="wgmma"), "kernel"),
    (lambda a: dict(a, precision="tf32"), "precision"),
    (lambda a: dict(a, warps=3), "warps"),
    (lambda a: dict(a, block_mask=create_block_mask(lib.causal(8, 8), None, None, 8, 8,
                                                    8, 8)), r"\(Tq, Tk\) = \(8, 8\)"),
    (lambda a: dict(a, block_q=24, block_k=16, block_mask=None), "multiples of 16"),
    (lambda a: dict(a, lse=a["lse"][..., :-1]), "lse"),
    (lambda a: dict(a, do=a["do"][..., :8]), "do"),
    (lambda a: dict(a, k=a["k"][:, :, :, :8], v=a["v"][:, :, :, :8]), "head dim"),
    (lambda a: dict(a, sinks=np.zeros(3)), "sinks"),
    (lambda a: dict(a, score_mod=lib.softcap(2.0), score_mod_grad=np.tanh), "score_mod_grad"),
    (lambda a: dict(a, q=a["q"] * 7e4), "65504"),
])
def test_bad_input_is_named(call, match):
    tq, tk = 17, 16
    q, k, v, do = inputs(np.random.default_rng(1), tq, tk, 16)
    o, lse = forward_of(q, k, v, "fp16")
    args = dict(q=q, k=k, v=v, o=o, lse=lse, do=do,
                block_mask=create_block_mask(lib.causal(tq, tk), None, None, tq, tk, 16, 16))
    with pytest.raises((ValueError, TypeError), match=match):
        fc_cuda.variants_backward(**call(args))


def test_device_arrays_bad_input_is_named():
    tq = tk = 16
    q = cuda.to_device(np.zeros((1, 2, tq, 16), np.float16))
    k = cuda.to_device(np.zeros((1, 1, tk, 16), np.float16))
    lse = cuda.to_device(np.zeros((1, 2, tq), np.float32))
    with pytest.raises(TypeError, match="do must be a device array"):
        fc_cuda.variants_backward(q, k, k, q, lse, np.zeros((1, 2, tq, 16), np.float16))
    with pytest.raises(TypeError, match="float16 or uint16"):
        fc_cuda.variants_backward(q, k, k, q, lse, cuda.to_device(
            np.zeros((1, 2, tq, 16), np.float32)))
    with pytest.raises(ValueError, match="precision='fp16'"):
        fc_cuda.variants_backward(q, k, k, q, lse, q, precision="bf16")
    with pytest.raises(ValueError, match="lse must have shape"):
        fc_cuda.variants_backward(q, k, k, q, cuda.to_device(np.zeros((1, 2, 15),
                                                                      np.float32)), q)
    k3 = cuda.to_device(np.zeros((1, 3, tk, 16), np.float16))
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        fc_cuda.variants_backward(q, k3, k3, q, lse, q)


def test_the_gpu_benchmark_smoke_run_checks_the_backward(tmp_path):
    """benchmarks/gpu_variants.py --simulator-smoke: the forward and the backward checks on
    one tiny case per precision, written to a record that matches its schema
    (flashcourse/schemas/attention_variants.json)."""
    import importlib.util

    from flashcourse import results
    path = results.ROOT / "benchmarks" / "gpu_variants.py"
    spec = importlib.util.spec_from_file_location("bench_gpu_variants", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--simulator-smoke", "--out", str(tmp_path)]) == 0
    doc = results.load_json(tmp_path / "gpu_attention_variants.json")
    results.validate(doc, "attention_variants", "gpu_attention_variants.json")
    rows = doc["check_backward"]
    assert len(rows) == 2 and all(r["ok"] for r in rows)
    assert {r["precision"] for r in rows} == {"fp16", "bf16"}
    assert all(r["errors"]["dsinks"] is not None for r in rows)     # the sink's gradient too
