"""The issues' bars in one run: the course's tensor-core forward and backward through the
PUBLIC calls (device arrays, as a user calls them) beside PyTorch SDPA on the same GPU.

    python3 benchmarks/gpu_bars.py --out DIR [--record]

forward   B x H = 32, N in {4096, 8192, 16384}, d in {64, 128}, causal off/on:
          `flashcourse.cuda.forward(q, k, v, kernel="tensor_core")` on float16 device arrays
          (fp16), on float32 device arrays with precision="bf16" (converted on the device),
          and on bf16 bit arrays (the torch bf16 tensors viewed as uint16: bf16 with no
          conversion); PyTorch flash fp16 and bf16. TFLOP/s = 4 N^2 d per head (half when
          causal).
backward  B x H = 32, N in {4096, 8192}, d in {64, 128}, causal off/on:
          `flashcourse.cuda.backward(..., kernel="tensor_core")` on float16 device arrays
          and on bf16 bit arrays; PyTorch flash fp16 and bf16 (autograd.grad of SDPA).
          TFLOP/s = 10 N^2 d per head.
tf32      B x H = 32, N in {4096, 8192, 16384}, d in {64, 128}, causal off/on: the
          3xTF32 forward on float32 device arrays (the default, and each --tf32-configs
          variant) beside PyTorch's memory-efficient backend on the same fp32 tensors;
          then max |o - o64| / max |o64| against float64 (two heads) at Tq = 512,
          Tk = 16,384, d = 128 and on ragged, causal, Tq != Tk shapes, ours beside it.
tf32_backward  B x H = 32, N in {4096, 8192}, d in {64, 128}, causal off/on: the 3xTF32
          backward (`flashcourse.cuda.backward(..., kernel="tensor_core")` on float32 device
          arrays, o and lse from the course's 3xTF32 forward) beside PyTorch's memory-
          efficient fp32 backward (autograd.grad of SDPA); then rel. norm errors of dq, dk,
          dv against float64 on ragged, causal, Tq != Tk shapes (TF32_BWD_ERROR_SHAPES).
          --tf32-bwd-configs PIPELINE:WARPS:BLOCK_Q also times those variants (same run).
errors    at N = 4096 (two heads), relative norm error of o (forward) and of dq, dk, dv
          (backward) against float64 on the same rounded inputs, ours beside PyTorch flash.
Medians of CUDA-event timings (`flashcourse.timing.time_cuda`) after warm-up. Writes
h200_bars.json (and _log.txt) into DIR; --record moves them into benchmarks/results/ once the run
has finished (on a GPU only).
"""
from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from functools import partial

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse import env, reference, results
from flashcourse.cuda import backward, forward
from flashcourse.timing import rel_err, time_cuda

BH = 32
FWD_NS, BWD_NS, DS = (4096, 8192, 16384), (4096, 8192), (64, 128)
LOG = []


def log(*a):
    line = " ".join(str(x) for x in a)
    LOG.append(line)
    print(line, flush=True)


def med(fn, backend="numba", reps=10):
    return float(statistics.median(time_cuda(fn, warmup=3, repeats=reps, backend=backend)))


def torch_inputs(n, d, dtype, grad=False, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn((1, BH, n, d), device="cuda", dtype=dtype, generator=g,
                        requires_grad=grad) for _ in range(4)]


def as_numba(t):
    """A (1, BH, n, d) torch tensor as a (BH, n, d) Numba device array (no copy)."""
    return cuda.as_cuda_array(t.detach().view(t.shape[1:]))


def as_bits(t):
    """A (1, BH, n, d) torch bfloat16 tensor as a (BH, n, d) uint16 Numba device array of
    its bf16 bit patterns (no copy): the tensor-core kernels' bf16 input."""
    import torch
    return as_numba(t.detach().view(torch.int16)).view(np.uint16)


def points(ns):
    """(d, causal, n) of every timed point: each d of DS, causal off then on, each n of `ns`."""
    return itertools.product(DS, (False, True), ns)


def backward_inputs(n, d, dtype, causal):
    """The inputs of a backward timing: torch (q, k, v, do) of `dtype` (`torch_inputs`, with
    gradients), the same as Numba device arrays, and our tensor-core forward's (o, lse)."""
    ts = torch_inputs(n, d, dtype, grad=True)
    q, k, v, do = (as_numba(t) for t in ts)
    return ts, (q, k, v, do), forward(q, k, v, kernel="tensor_core", causal=causal)


def add_tflops(row, flops):
    """row[X_tflops] beside each row[X_ms]: `flops` floating-point operations in X ms."""
    for key in [k_ for k_ in row if k_.endswith("_ms")]:
        row[key[:-3] + "_tflops"] = flops / row[key] / 1e9


def sdpa(ins, causal, backend):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(getattr(SDPBackend, backend)):
        return F.scaled_dot_product_attention(*ins, is_causal=causal)


def torch_backward_ms(ins, do, causal, backend, reps):
    """Median ms of PyTorch SDPA's backward (`backend`): autograd.grad of one forward on the
    torch tensors `ins` = (q, k, v), with output gradient `do`, repeated `reps` times."""
    import torch
    out = sdpa(ins, causal, backend)
    return med(partial(torch.autograd.grad, out, tuple(ins), do, retain_graph=True), "torch",
               reps=reps)


def sdpa_bottom_right(ins, causal, backend):
    """SDPA with the course's causal mask (bottom-right aligned: query i sees key j iff
    j <= i + Tk - Tq); PyTorch's is_causal aligns it top-left when Tq != Tk."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    if not causal or ins[0].shape[-2] == ins[1].shape[-2]:
        return sdpa(ins, causal, backend)
    mask = causal_lower_right(ins[0].shape[-2], ins[1].shape[-2])
    with sdpa_kernel(getattr(SDPBackend, backend)):
        return F.scaled_dot_product_attention(*ins, attn_mask=mask)


def bench_forward(rows, every_block=False):
    """every_block: also time fp16 and bf16 bits with lazy_rescale=False (the A/B of the
    lazy rescale, same run)."""
    import torch
    for d, causal, n in points(FWD_NS):
        fl = 4 * BH * n * n * d / (2 if causal else 1)
        t16 = torch_inputs(n, d, torch.float16)[:3]
        q, k, v = (as_numba(t) for t in t16)
        t32 = [t.float() for t in t16]
        q32, k32, v32 = (as_numba(t) for t in t32)
        tb = [t.bfloat16() for t in t32]
        qb, kb, vb = (as_bits(t) for t in tb)
        row = {"n": n, "d": d, "causal": causal}
        row["ours_fp16_ms"] = med(partial(forward, q, k, v, kernel="tensor_core",
                                          causal=causal))
        row["ours_bf16_f32_ms"] = med(partial(forward, q32, k32, v32,
                                              kernel="tensor_core", causal=causal,
                                              precision="bf16"))
        row["ours_bf16_bits_ms"] = med(partial(forward, qb, kb, vb,
                                               kernel="tensor_core", causal=causal))
        if every_block:
            row["ours_fp16_every_block_ms"] = med(partial(
                forward, q, k, v, kernel="tensor_core", causal=causal,
                lazy_rescale=False))
            row["ours_bf16_bits_every_block_ms"] = med(partial(
                forward, qb, kb, vb, kernel="tensor_core", causal=causal,
                lazy_rescale=False))
        row["torch_flash_fp16_ms"] = med(partial(sdpa, t16, causal, "FLASH_ATTENTION"),
                                         "torch")
        row["torch_flash_bf16_ms"] = med(partial(sdpa, tb, causal, "FLASH_ATTENTION"),
                                         "torch")
        add_tflops(row, fl)
        row["fp16_ratio"] = row["torch_flash_fp16_ms"] / row["ours_fp16_ms"]
        row["bf16_f32_ratio_vs_flash_bf16"] = (row["torch_flash_bf16_ms"]
                                               / row["ours_bf16_f32_ms"])
        row["bf16_ratio"] = row["torch_flash_bf16_ms"] / row["ours_bf16_bits_ms"]
        rows.append(row)
        log(f"fwd d={d} causal={causal!s:5} N={n:5d}: ours fp16 "
            f"{row['ours_fp16_tflops']:6.1f} bf16(f32) {row['ours_bf16_f32_tflops']:6.1f}"
            f" | torch flash fp16 {row['torch_flash_fp16_tflops']:6.1f} bf16 "
            f"{row['torch_flash_bf16_tflops']:6.1f} TFLOP/s | ratio fp16 "
            f"{row['fp16_ratio']:.2f} bf16(f32) {row['bf16_f32_ratio_vs_flash_bf16']:.2f}"
            f" bf16 {row['bf16_ratio']:.2f}"
            + (f" | every block: fp16 {row['ours_fp16_every_block_tflops']:6.1f}"
               f" bf16 {row['ours_bf16_bits_every_block_tflops']:6.1f}"
               if every_block else ""))
        torch.cuda.empty_cache()


def bench_backward(rows, block_qs=()):
    """block_qs: also time the public call with these Br (tile variants, same run)."""
    import torch
    for d, causal, n in points(BWD_NS):
        fl = 10 * BH * n * n * d / (2 if causal else 1)
        (tq, tk, tv, tdo), (q, k, v, do), (o, lse) = backward_inputs(n, d, torch.float16, causal)
        row = {"n": n, "d": d, "causal": causal}
        row["ours_fp16_ms"] = med(partial(backward, q, k, v, o, lse, do,
                                          kernel="tensor_core", causal=causal), reps=7)
        for bq in block_qs:
            try:
                row[f"ours_fp16_bq{bq}_ms"] = med(partial(
                    backward, q, k, v, o, lse, do, kernel="tensor_core",
                    causal=causal, block_q=bq), reps=7)
            except ValueError as exc:        # a tile that does not fit this d
                log(f"Br={bq} at d={d}: {exc}")
        row["torch_flash_fp16_ms"] = torch_backward_ms((tq, tk, tv), tdo, causal,
                                                       "FLASH_ATTENTION", reps=7)
        # bf16: ours on bf16 bit arrays (no conversion) beside PyTorch flash bf16
        tb = [t.detach().bfloat16().requires_grad_(t.requires_grad)
              for t in (tq, tk, tv, tdo)]
        qb, kb, vb, dob = (as_bits(t) for t in tb)
        ob, lseb = forward(qb, kb, vb, kernel="tensor_core", causal=causal)
        row["ours_bf16_bits_ms"] = med(partial(backward, qb, kb, vb, ob, lseb, dob,
                                               kernel="tensor_core", causal=causal),
                                       reps=7)
        row["torch_flash_bf16_ms"] = torch_backward_ms(tb[:3], tb[3], causal,
                                                       "FLASH_ATTENTION", reps=7)
        add_tflops(row, fl)
        row["fp16_ratio"] = row["torch_flash_fp16_ms"] / row["ours_fp16_ms"]
        row["bf16_ratio"] = row["torch_flash_bf16_ms"] / row["ours_bf16_bits_ms"]
        rows.append(row)
        extra = "".join(f" Br={bq}: {row[f'ours_fp16_bq{bq}_tflops']:6.1f}"
                        for bq in block_qs if f"ours_fp16_bq{bq}_tflops" in row)
        log(f"bwd d={d} causal={causal!s:5} N={n:5d}: ours fp16 "
            f"{row['ours_fp16_tflops']:6.1f}{extra} | torch flash fp16 "
            f"{row['torch_flash_fp16_tflops']:6.1f} TFLOP/s | ratio "
            f"{row['fp16_ratio']:.2f} | bf16 ours {row['ours_bf16_bits_tflops']:6.1f}"
            f" torch {row['torch_flash_bf16_tflops']:6.1f} ratio "
            f"{row['bf16_ratio']:.2f}")
        torch.cuda.empty_cache()


def max_rel(x, ref) -> float:
    """max |x - ref| / max |ref| (the issue's "max relative error of o")."""
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(x - ref).max() / np.abs(ref).max())


def tf32_config(text, tile="block_k"):
    """'async:8:32' -> {"pipeline": "async", "warps": 8, "block_k": 32} (a --tf32-configs
    variant of the 3xTF32 forward; tile="block_q": a --tf32-bwd-configs variant of the
    backward)."""
    pipe, warps, size = text.split(":")
    return {"pipeline": pipe, "warps": int(warps), tile: int(size)}


#: (Tq, Tk, d, causal) of the 3xTF32 accuracy rows: the issue's long rows, then ragged,
#: causal and Tq != Tk shapes
TF32_ERROR_SHAPES = [(512, 16384, 128, False), (70, 5000, 128, False), (333, 517, 64, True),
                     (1000, 777, 128, True), (129, 2049, 64, False), (4096, 4096, 128, True)]


def bench_tf32(rows, configs=()):
    """3xTF32 beside PyTorch's efficient fp32: speed at every point, then accuracy rows."""
    import torch
    variants = [("default", {})] + [(text, tf32_config(text)) for text in configs]
    for d, causal, n in points(FWD_NS):
        fl = 4 * BH * n * n * d / (2 if causal else 1)
        t32 = torch_inputs(n, d, torch.float32)[:3]
        q, k, v = (as_numba(t) for t in t32)
        row = {"kind": "speed", "n": n, "d": d, "causal": causal}
        for label, knobs in variants:
            row[f"ours_3xtf32_{label}_ms"] = med(partial(
                forward, q, k, v, kernel="tensor_core", causal=causal, **knobs),
                reps=5)
        row["torch_efficient_fp32_ms"] = med(
            partial(sdpa, t32, causal, "EFFICIENT_ATTENTION"), "torch", reps=5)
        add_tflops(row, fl)
        for label, _ in variants:
            row[f"ratio_{label}"] = (row["torch_efficient_fp32_ms"]
                                     / row[f"ours_3xtf32_{label}_ms"])
        rows.append(row)
        log(f"tf32 d={d} causal={causal!s:5} N={n:5d}: "
            + " ".join(f"{label} {row[f'ours_3xtf32_{label}_tflops']:5.1f}"
                       f" ({row[f'ratio_{label}']:.2f}x)" for label, _ in variants)
            + f" | torch efficient {row['torch_efficient_fp32_tflops']:5.1f} TFLOP/s")
        torch.cuda.empty_cache()
    for tq_, tk_, d, causal in TF32_ERROR_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(3)
        ts = [torch.randn((1, 2, n_, d), device="cuda", generator=g)
              for n_ in (tq_, tk_, tk_)]
        host = [t[0].cpu().numpy().astype(np.float64) for t in ts]
        o64, _ = reference.attention(*host, causal=causal)
        q, k, v = (as_numba(t) for t in ts)
        theirs = sdpa_bottom_right(ts, causal, "EFFICIENT_ATTENTION")[0].cpu().numpy()
        # rows that see no key (causal, Tq > Tk): ours and the reference give o = 0 there,
        # PyTorch does not; its error is taken over the rows that see a key
        seen = slice(max(tq_ - tk_, 0), None) if causal else slice(None)
        row = {"kind": "error", "tq": tq_, "tk": tk_, "d": d, "causal": causal,
               "torch_efficient": max_rel(theirs[:, seen], o64[:, seen]),
               "torch_rows_with_keys": True}
        outs = []
        for label, knobs in variants:
            o, _ = forward(q, k, v, kernel="tensor_core", causal=causal, **knobs)
            outs.append(o.copy_to_host())
            row[f"ours_{label}"] = max_rel(outs[-1], o64)
        row["variants_bit_equal"] = all(np.array_equal(outs[0], x) for x in outs[1:])
        rows.append(row)
        log(f"tf32 error Tq={tq_} Tk={tk_} d={d} causal={causal}: "
            + " ".join(f"{label} {row[f'ours_{label}']:.2e}" for label, _ in variants)
            + f" | torch efficient {row['torch_efficient']:.2e} | variants bit-equal "
            f"{row['variants_bit_equal']}")


#: (Tq, Tk, d, causal) of the 3xTF32 backward's accuracy rows
TF32_BWD_ERROR_SHAPES = [(333, 517, 64, True), (1000, 777, 128, True), (129, 2049, 64, False),
                         (517, 333, 100, False), (2048, 2048, 128, True), (70, 1500, 128, False)]


def bench_tf32_backward(rows, configs=()):
    """3xTF32 backward beside PyTorch's efficient fp32 backward: speed (the default, and
    each of `configs`), then accuracy (the default)."""
    import torch
    for d, causal, n in points(BWD_NS):
        fl = 10 * BH * n * n * d / (2 if causal else 1)
        (tq, tk, tv, tdo), (q, k, v, do), (o, lse) = backward_inputs(n, d, torch.float32, causal)
        row = {"kind": "speed", "n": n, "d": d, "causal": causal}
        row["ours_3xtf32_ms"] = med(partial(backward, q, k, v, o, lse, do,
                                            kernel="tensor_core", causal=causal),
                                    reps=5)
        for c in configs:
            try:
                row[f"ours_3xtf32_{c}_ms"] = med(partial(
                    backward, q, k, v, o, lse, do, kernel="tensor_core",
                    causal=causal, **tf32_config(c, "block_q")), reps=5)
            except ValueError as exc:        # a variant that does not fit this d
                log(f"3xTF32 backward {c} at d={d}: {exc}")
        row["torch_efficient_fp32_ms"] = torch_backward_ms((tq, tk, tv), tdo, causal,
                                                           "EFFICIENT_ATTENTION", reps=5)
        add_tflops(row, fl)
        row["ratio"] = row["torch_efficient_fp32_ms"] / row["ours_3xtf32_ms"]
        rows.append(row)
        extra = "".join(f" {c} {row[f'ours_3xtf32_{c}_tflops']:5.1f}" for c in configs
                        if f"ours_3xtf32_{c}_tflops" in row)
        log(f"bwd tf32 d={d} causal={causal!s:5} N={n:5d}: ours 3xTF32 "
            f"{row['ours_3xtf32_tflops']:5.1f}{extra} | torch efficient fp32 "
            f"{row['torch_efficient_fp32_tflops']:5.1f} TFLOP/s | ratio "
            f"{row['ratio']:.2f}")
        del tq, tk, tv, tdo, q, k, v, do, o, lse
        torch.cuda.empty_cache()
    for tq_, tk_, d, causal in TF32_BWD_ERROR_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(5)
        ts = [torch.randn((1, 2, n_, d), device="cuda", generator=g, requires_grad=True)
              for n_ in (tq_, tk_, tk_)]
        tdo = torch.randn((1, 2, tq_, d), device="cuda", generator=g)
        host = [t[0].detach().cpu().numpy().astype(np.float64) for t in ts + [tdo]]
        g64 = reference.attention_backward(*host, causal=causal)
        q, k, v, do = (as_numba(t) for t in ts + [tdo])
        o, lse = forward(q, k, v, kernel="tensor_core", causal=causal)
        ours = [x.copy_to_host() for x in backward(q, k, v, o, lse, do, kernel="tensor_core",
                                                     causal=causal)]
        to = sdpa_bottom_right(ts, causal, "EFFICIENT_ATTENTION")
        theirs = [x[0].cpu().numpy() for x in torch.autograd.grad(to, ts, tdo)]
        row = {"kind": "error", "tq": tq_, "tk": tk_, "d": d, "causal": causal}
        for name, a, b, r in zip(("dq", "dk", "dv"), ours, theirs, g64):
            row[f"ours_{name}"] = rel_err(a, r)
            row[f"torch_{name}"] = rel_err(b, r)
        row["ok"] = max(row[f"ours_{x}"] for x in ("dq", "dk", "dv")) <= 1e-5
        rows.append(row)
        log(f"bwd tf32 error Tq={tq_} Tk={tk_} d={d} causal={causal}: ours "
            + " ".join(f"{x} {row['ours_' + x]:.2e}" for x in ("dq", "dk", "dv"))
            + " | torch efficient " + " ".join(f"{x} {row['torch_' + x]:.2e}"
                                               for x in ("dq", "dk", "dv")))


def errors(rows, n=4096, heads=2):
    """Relative errors against float64 on the same rounded inputs (first `heads` heads)."""
    import torch
    for d in DS:
        for causal in (False, True):
            tq, tk, tv, tdo = torch_inputs(n, d, torch.float16, grad=True, seed=1)
            host = [t.detach()[0, :heads].float().cpu().numpy().astype(np.float64)
                    for t in (tq, tk, tv, tdo)]
            o64, _ = reference.attention(*host[:3], causal=causal)
            g64 = reference.attention_backward(*host, causal=causal)
            q, k, v, do = (as_numba(t) for t in (tq, tk, tv, tdo))
            o, lse = forward(q, k, v, kernel="tensor_core", causal=causal)
            grads = backward(q, k, v, o, lse, do, kernel="tensor_core", causal=causal)
            to = sdpa((tq, tk, tv), causal, "FLASH_ATTENTION")
            tg = torch.autograd.grad(to, (tq, tk, tv), tdo)
            row = {"n": n, "d": d, "causal": causal, "heads": heads,
                   "ours_o": rel_err(o.copy_to_host()[:heads], o64),
                   "torch_o": rel_err(to.detach()[0, :heads].float().cpu().numpy(), o64)}
            for name, g, t, r in zip(("dq", "dk", "dv"), grads, tg, g64):
                row[f"ours_{name}"] = rel_err(g.copy_to_host()[:heads], r)
                row[f"torch_{name}"] = rel_err(t[0, :heads].float().cpu().numpy(), r)
            row["ok"] = all(row[f"ours_{x}"] <= 2 * row[f"torch_{x}"] + 1e-4
                            for x in ("o", "dq", "dk", "dv"))
            rows.append(row)
            log("err " + json.dumps({k_: (round(x, 8) if isinstance(x, float) else x)
                                     for k_, x in row.items()}))


def main(argv=None) -> int:
    ap = results.benchmark_parser(__doc__)
    ap.add_argument("--parts", nargs="+",
                    default=["errors", "forward", "backward", "tf32", "tf32_backward"],
                    choices=["errors", "forward", "backward", "tf32", "tf32_backward"],
                    help="what to run")
    ap.add_argument("--tf32-configs", nargs="*", default=[],
                    help="tf32: also time these 3xTF32 variants, PIPELINE:WARPS:BLOCK_K")
    ap.add_argument("--fwd-every-block", action="store_true",
                    help="forward: also time lazy_rescale=False (the lazy rescale's A/B)")
    ap.add_argument("--tf32-bwd-configs", nargs="*", default=[],
                    help="tf32_backward: also time these variants, PIPELINE:WARPS:BLOCK_Q")
    ap.add_argument("--bwd-block-q", type=int, nargs="*", default=[],
                    help="also time the backward with these Br (block_q)")
    args = results.parse_gpu_arguments(ap, argv, __file__)
    if args.simulator_smoke:
        print("gpu_bars: needs PyTorch on a GPU; nothing to smoke-test")
        return 0
    out = results.output_dir(args)
    doc = {"env": env.record(), "bh": BH, "what": __doc__.splitlines()[0]}
    log(json.dumps(doc["env"]))
    t0 = time.time()
    for name, fn in (("errors", errors),
                     ("forward", partial(bench_forward, every_block=args.fwd_every_block)),
                     ("backward", partial(bench_backward, block_qs=args.bwd_block_q)),
                     ("tf32", partial(bench_tf32, configs=args.tf32_configs)),
                     ("tf32_backward", partial(bench_tf32_backward,
                                               configs=args.tf32_bwd_configs))):
        doc[name] = []
        if name in args.parts:
            fn(doc[name])
        log(f"{name} done at {time.time() - t0:.0f} s")
        results.write_json(out, "h200_bars.json", doc)
        results.write_output(out, "h200_bars_log.txt", "\n".join(LOG) + "\n")
    results.finish(args, out, ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
