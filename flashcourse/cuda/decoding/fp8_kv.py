"""fp8_kv: the host side of decoding from an FP8 KV cache (e4m3 codes + fp32 scales).

    from flashcourse.cuda import decode, paged_decode
    o, lse = decode(q, k8, v8, k_scale=ks, v_scale=vs)                  # one scale per (B, Hkv)
    o, lse = decode(q, k8, v8, k_scale=ks, v_scale=vs, scale_block=16)  # per 16 tokens
    o, lse = paged_decode(q, k8_pages, v8_pages, table, lens, k_scale=ks, v_scale=vs,
                          scale_block=16)

The layout, the scales and the numpy model: `flashcourse.fp8.kv`. The kernels are the
CUDA-core split kernels of the fp16/fp32 caches (`decode_kernels.split_body`), built for
1-byte elements: each lane loads 16 codes with one 16-byte load and turns them into float32
in registers (`vector_loads.row_loader`; `cvt.rn.f16x2.e4m3x2` on sm_89+, integer arithmetic
elsewhere), and the scales are applied where they cost least (`split_body`'s docstring: per
(B, Hkv) folded into q's scale and the output; per block of tokens one multiply per key for
each of K and V). The tensor-core split kernel takes fp16 only, so an FP8 cache always runs
on CUDA cores (kernel="tensor_core" is refused).

Bytes per key and KV head: 2 d (codes of K and V) + 8 / scale_block (their scales) against
4 d for fp16: at d = 128, 256 + 8 / Bs against 512 B, so a memory-bound decode can approach
2x, less the scales and the conversions (benchmarks/gpu_fp8.py measures it; not yet run on a
GPU).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ... import paged_cache as pc
from ...fp8 import kv as fkv
from ..._checks import check_array, check_bool, check_scale
from ..._guards import forward_result
from ..common._launch import as_device_array, is_device_array, simulator_lock, simulator_note
from ..common.result_check import check_result
from . import paged
from .decode_kernels import _aligned, gqa_shapes, plan_splits, run, split_config, split_outputs
from .paged_kernels import APPEND_FP8_THREADS, make_append_fp8_kernel

ADVICE = ("use flashcourse.fp8.kv.dequantize_cache and flashcourse.decode.split_kv_forward "
          "in float64 (the CUDA kernels compute in float32)")


def _shape(x) -> tuple:
    return tuple(int(n) for n in x.shape)


def _refuse_tensor_core(kernel) -> None:
    if kernel not in (None, "cuda_cores"):
        raise ValueError(f"kernel={kernel!r}: an FP8 cache runs on the CUDA-core split kernel "
                         f"only (kernel=None or 'cuda_cores'); the tensor-core one takes "
                         f"float16 K and V")


def _device_codes(name, x):
    """A device array of e4m3 codes viewed as a Numba uint8 array (TypeError naming `name`
    and saying how to pass a PyTorch float8 tensor otherwise)."""
    try:
        return as_device_array(name, x, (np.uint8,))
    except (TypeError, ValueError, NotImplementedError) as exc:
        raise TypeError(f"{name} must be a C-contiguous uint8 device array of e4m3 codes "
                        f"({fkv.TORCH_HINT}): {exc}") from None


def _scales(name, x, shape, what, on_device):
    """A scale array (numpy, checked and copied; or a float32 device array of `shape`)."""
    if is_device_array(x):
        x = as_device_array(name, x, (np.float32,))
        if _shape(x) != tuple(shape):
            raise ValueError(f"{name} must have shape {tuple(shape)} {what}, got {_shape(x)}")
        return x, None
    host = fkv.check_scales(x, name, shape, what)
    return cuda.to_device(np.ascontiguousarray(host)), host


def _host_checked(k, v, dks, dvs, names, want, what, allow_nonfinite) -> tuple:
    """(hk, hv, hks, hvs): host copies of the device codes k, v (no NaN code unless
    allow_nonfinite; `names` for the messages) and of their scales dks, dvs (of shape
    `want`, checked as `fkv.check_scales` does)."""
    hk, hv = k.copy_to_host(), v.copy_to_host()
    if not allow_nonfinite:
        fkv.check_no_nan_codes(hk, names[0])
        fkv.check_no_nan_codes(hv, names[1])
    return (hk, hv, fkv.check_scales(dks.copy_to_host(), "k_scale", want, what),
            fkv.check_scales(dvs.copy_to_host(), "v_scale", want, what))


def _checked_inputs(q, k, v, names, allow_nonfinite):
    """(q, k, v, on_device): q as a float device array or a checked numpy array, k and v
    (named `names`) as uint8 e4m3 codes on the device or checked numpy codes."""
    on_device = any(is_device_array(x) for x in (q, k, v))
    if on_device:
        return (as_device_array("q", q, (np.float16, np.float32)), _device_codes(names[0], k),
                _device_codes(names[1], v), True)
    return (check_array(q, "q", allow_nonfinite=allow_nonfinite),
            fkv.check_codes(k, names[0], allow_nonfinite=allow_nonfinite),
            fkv.check_codes(v, names[1], allow_nonfinite=allow_nonfinite), False)


def decode_fp8(q, k, v, k_scale, v_scale, *, scale_block=None, num_splits=None, block_k=None,
               causal=False, scale=None, allow_nonfinite=False, check=False, kernel=None,
               hw_cvt=None, unroll=None, warps=None, row_groups=None, blocks_per_sm=None):
    """Flash-Decoding from an FP8 cache: q (B, Hq, Tq, d) float (numpy float16/32/64 or a
    float16/float32 device array), k, v (B, Hkv, Tk, d) uint8 e4m3 codes, k_scale, v_scale
    float32 (B, Hkv) (scale_block None) or (B, Hkv, ceil(Tk / scale_block)). Options and
    results as `decode_kernels.decode`; hw_cvt: decode codes with the conversion instruction
    (None: where the GPU has it; False: integer arithmetic). NaN codes (0x7F, 0xFF) and
    scales that are not finite and > 0 are refused for numpy inputs (device inputs: with
    check=True, which copies them to the host)."""
    simulator_note()
    causal, allow_nonfinite, check = (check_bool(x, n) for x, n in (
        (causal, "causal"), (allow_nonfinite, "allow_nonfinite"), (check, "check")))
    _refuse_tensor_core(kernel)
    sb = fkv.check_scale_block(scale_block)
    q, k, v, on_device = _checked_inputs(q, k, v, ("k", "v"), allow_nonfinite)
    b, hq, tq, d, hkv, tk = gqa_shapes(_shape(q), _shape(k), _shape(v), nonempty=False)
    want = fkv.scale_shape((b, hkv), tk, sb)
    what = fkv.scale_what(sb, paged=False)
    (dks, hks), (dvs, hvs) = (_scales(n, x, want, what, on_device)
                              for n, x in (("k_scale", k_scale), ("v_scale", v_scale)))
    if check and on_device:                      # the values, on the host
        hk, hv, hks, hvs = _host_checked(k, v, dks, dvs, ("k", "v"), want, what,
                                         allow_nonfinite)
    if on_device:
        qf, kf, vf = q.reshape(b * hq * tq, d), k.reshape(b * hkv, tk, d), v.reshape(
            b * hkv, tk, d)
        aligned = all(_aligned(x) for x in (q, k, v))
    else:
        work = np.float16 if q.dtype == np.float16 else np.float32
        qf = cuda.to_device(np.ascontiguousarray(q.reshape(b * hq * tq, d), work))
        kf = cuda.to_device(np.ascontiguousarray(k.reshape(b * hkv, tk, d)))
        vf = cuda.to_device(np.ascontiguousarray(v.reshape(b * hkv, tk, d)))
        aligned = True
    groups = 1 if sb is None else want[-1]
    scales = (dks.reshape(b * hkv, groups), dvs.reshape(b * hkv, groups))
    group = hq // hkv
    scale = check_scale(scale, d)
    cfg, bps = split_config("cuda_cores", d, 1, group * tq, aligned, unroll=unroll,
                            warps=warps, row_groups=row_groups, scale_block=sb or 0,
                            hw_cvt=hw_cvt)
    ns, per = plan_splits(b * hkv, group * tq, tk, cfg, num_splits=num_splits,
                          block_k=block_k,
                          blocks_per_sm=bps if blocks_per_sm is None else blocks_per_sm)
    o, lse, o_part, lse_part = split_outputs(b * hq * tq, d, ns)
    run(qf, kf, vf, o, lse, o_part, lse_part, tq=tq, group=group, d=d, scale=scale,
        causal=causal, num_splits=ns, keys_per_split=per, cfg=cfg, scales=scales)
    if on_device:
        o, lse = o.reshape(b, hq, tq, d), lse.reshape(b, hq, tq)
        if check:
            nf = allow_nonfinite
            kd = fkv.dequantize_cache(hk, hks, sb, allow_nonfinite=nf).astype(np.float32)
            vd = fkv.dequantize_cache(hv, hvs, sb, allow_nonfinite=nf).astype(np.float32)
            check_result(q, kd, vd, o, lse, causal=causal, scale=scale,
                         allow_nonfinite=allow_nonfinite, kv_group=group, advice=ADVICE)
        return o, lse
    o_h = o.copy_to_host().astype(q.dtype, copy=False).reshape(b, hq, tq, d)
    lse_h = lse.copy_to_host().astype(np.float64 if q.dtype == np.float64 else np.float32,
                                      copy=False).reshape(b, hq, tq)
    nf = allow_nonfinite                                          # what the kernel read:
    kd = fkv.dequantize_cache(k, hks, sb, allow_nonfinite=nf).astype(np.float32)
    vd = fkv.dequantize_cache(v, hvs, sb, allow_nonfinite=nf).astype(np.float32)
    return forward_result(q, kd, vd, o_h, lse_h, causal, compute="float32",
                          allow_nonfinite=allow_nonfinite, scale=scale, advice=ADVICE,
                          kv_group=group)


def paged_scales(k_scale, v_scale, plan, num_pages: int) -> tuple:
    """The plan's FP8 scales as the 2-D views its split kernel reads: per (B, Hkv) ->
    (B*Hkv, 1); per block -> (num_pages*Hkv, page_size / scale_block)."""
    sb = plan.cfg.scale_block
    if sb == 0:
        shape = (plan.batch * plan.heads_kv, 1)
    else:
        shape = (num_pages * plan.heads_kv, plan.page_size // sb)
    return k_scale.reshape(*shape), v_scale.reshape(*shape)


def _pool_scale_shape(sb, b, hkv, num_pages, page_size) -> tuple:
    if sb is None:
        return (b, hkv)
    if page_size % sb:
        raise ValueError(f"scale_block = {sb} must divide page_size = {page_size} (a block "
                         f"of tokens never crosses a page)")
    return (num_pages, hkv, page_size // sb)


def paged_decode_fp8(q, k_pages, v_pages, block_table, seq_lens, k_scale, v_scale, *,
                     scale_block=None, causal=False, scale=None, allow_nonfinite=False,
                     check=False, kernel=None, target_items=None, hw_cvt=None, **options):
    """Paged decoding from an FP8 pool: k_pages, v_pages (num_pages, Hkv, page_size, d) uint8
    codes with k_scale, v_scale float32 (B, Hkv) (scale_block None) or (num_pages, Hkv,
    page_size / scale_block) (one per block of tokens within a page). Everything else as
    `paged.paged_decode`; checks as `decode_fp8`."""
    simulator_note()
    check, allow_nonfinite = (check_bool(x, n) for x, n in ((check, "check"),
                                                            (allow_nonfinite, "allow_nonfinite")))
    _refuse_tensor_core(kernel)
    sb = fkv.check_scale_block(scale_block)
    q, kp, vp, on_device = _checked_inputs(q, k_pages, v_pages, ("k_pages", "v_pages"),
                                           allow_nonfinite)
    ps = pc.check_pool_shapes(_shape(kp), _shape(vp), kp.dtype, vp.dtype)
    qs, ks = _shape(q), _shape(kp)
    if len(qs) != 4 or qs[3] != ks[3] or qs[1] % ks[1]:
        raise ValueError(f"q (B, Hq, Tq, d) = {qs} and k_pages (num_pages, Hkv, page_size, d) "
                         f"= {ks}: d must match and Hq be a multiple of Hkv")
    b, hq, tq, d = qs
    num_pages, hkv = ks[0], ks[1]
    for name, x, nd, what in (("block_table", block_table, 2, "(B, max_pages_per_seq)"),
                              ("seq_lens", seq_lens, 1, "(B,)")):
        if not is_device_array(x) and not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be an int32 array {what}, got {type(x).__name__}")
        pc.check_table_meta(name, x.shape, x.dtype, nd, what, b)
    tables = None                       # host copies, when the values are needed
    if not on_device or check or not all(is_device_array(x) for x in (block_table, seq_lens)):
        tables = [x.copy_to_host() if is_device_array(x) else x
                  for x in (block_table, seq_lens)]
        pc.check_table_values(tables[0], tables[1], num_pages, ps)
    want = _pool_scale_shape(sb, b, hkv, num_pages, ps)
    what = fkv.scale_what(sb, paged=True)
    (dks, hks), (dvs, hvs) = (_scales(n, x, want, what, on_device)
                              for n, x in (("k_scale", k_scale), ("v_scale", v_scale)))
    if on_device and check:
        hk, hv, hks, hvs = _host_checked(kp, vp, dks, dvs, ("k_pages", "v_pages"), want, what,
                                         allow_nonfinite)
    elif not on_device:
        hk, hv = kp, vp
    bt, lens = (x if is_device_array(x) else cuda.to_device(np.ascontiguousarray(x))
                for x in (block_table, seq_lens))
    plan = paged.paged_decode_plan(
        b, hq, hkv, d, ps, _shape(block_table)[1], tq=tq, dtype=np.uint8, causal=causal,
        scale=scale, seq_lens=None if on_device else tables[1], kernel="cuda_cores",
        target_items=target_items, aligned=not on_device or all(
            _aligned(x) for x in (q, kp, vp)), scale_block=sb or 0, hw_cvt=hw_cvt, **options)
    if not on_device:
        work = np.float16 if q.dtype == np.float16 else np.float32
        dq = cuda.to_device(np.ascontiguousarray(q, work))
        dkp, dvp = cuda.to_device(np.ascontiguousarray(kp)), cuda.to_device(
            np.ascontiguousarray(vp))
    else:
        dq, dkp, dvp = q, kp, vp
    out = (cuda.device_array((b, hq, tq, d), np.float32),
           cuda.device_array((b, hq, tq), np.float32))
    paged.run(plan, dq, dkp, dvp, bt, lens, out,
              scales=paged_scales(dks, dvs, plan, num_pages))
    if on_device and not check:
        return out
    nf = allow_nonfinite
    kd = fkv.pool_values(hk, hks, *tables[:2], sb, allow_nonfinite=nf).astype(np.float32)
    vd = fkv.pool_values(hv, hvs, *tables[:2], sb, allow_nonfinite=nf).astype(np.float32)
    hq_ = q.copy_to_host() if on_device else q
    o = out[0].copy_to_host()
    lse = out[1].copy_to_host()
    if not on_device:
        o = o.astype(q.dtype, copy=False)
        lse = lse.astype(np.float64 if q.dtype == np.float64 else np.float32, copy=False)
    o_c, lse_c = paged._guard((hq_, kd, vd, tables[0], tables[1]), (o, lse), plan,
                              allow_nonfinite)
    return out if on_device else (o_c, lse_c)


def append_fp8(k_pages, v_pages, k_scale, v_scale, block_table, seq_lens, k_new, v_new, *,
               scale_block=None, stream=0):
    """The FP8 append kernel on device arrays (`paged_kernels.make_append_fp8_kernel`; its
    numpy model `flashcourse.fp8.kv.append_tokens`): new token i of sequence b (k_new, v_new
    (B, Hkv, n, d) float16/float32) written as e4m3 codes at position seq_lens[b] + i;
    per-block scales (num_pages, Hkv, page_size / scale_block) set for the blocks this
    append opens, or the given per-(B, Hkv) scales (B, Hkv) used. seq_lens unchanged."""
    sb = fkv.check_scale_block(scale_block)
    kp, vp = _device_codes("k_pages", k_pages), _device_codes("v_pages", v_pages)
    ks, ns = _shape(kp), _shape(k_new)
    b = _shape(block_table)[0]
    if len(ns) != 4 or ns[0] != b or ns[1] != ks[1] or ns[3] != ks[3] or _shape(v_new) != ns:
        raise ValueError(f"k_new, v_new must have shape (B, Hkv, n, d) = ({b}, {ks[1]}, n, "
                         f"{ks[3]}), got {ns} and {_shape(v_new)}")
    want = _pool_scale_shape(sb, b, ks[1], ks[0], ks[2])
    for name, x in (("k_scale", k_scale), ("v_scale", v_scale)):
        if _shape(x) != want or np.dtype(x.dtype) != np.float32:
            raise ValueError(f"{name} must be a float32 device array of shape {want} "
                             f"{fkv.scale_what(sb, paged=True)}, got {x.dtype} {_shape(x)}")
    if np.dtype(k_new.dtype) not in (np.float16, np.float32) or k_new.dtype != v_new.dtype:
        raise TypeError(f"k_new, v_new must be float16 or float32 (one dtype), got "
                        f"{k_new.dtype} and {v_new.dtype}")
    kern = make_append_fp8_kernel(ks[2], sb or 0)
    with simulator_lock():
        kern[(ns[2], ns[1], ns[0]), APPEND_FP8_THREADS, stream, 0](
            kp, vp, k_scale, v_scale, block_table, seq_lens, k_new, v_new)
