"""Check and time the tensor-core backward on a GPU, against PyTorch SDPA's backward.

    python3 benchmarks/gpu_tc_backward.py --check --variants --bench --out DIR
        --check     gradients of every variant (fp16 on float16 arrays, bf16 and 3xtf32
                    on float32 arrays; dQ by atomics and deterministic) vs
                    the float64 reference (flashcourse.reference.attention_backward) on
                    the same rounded inputs, o and lse from the course's tensor-core
                    forward; ragged T, causal on/off, Tq != Tk both ways, odd d. Beside
                    each: PyTorch flash's own error on the same rounded inputs (where it
                    runs: d % 8 == 0; 3xtf32: PyTorch's memory-efficient fp32 backward).
                    Pass: error <= 2 x PyTorch's + 1e-4 (else <= BOUND[precision]);
                    3xtf32: error <= BOUND["3xtf32"], except a gradient whose float64
                    value is exactly zero (one key: dS cancels), where rel_err is the
                    norm of ours: <= 2 x PyTorch's there.
        --variants  raw time of tile variants at N = 4096, B x H = 32 (registers, spills).
        --bench     B x H = 32, N in {4096, 8192}, d in {64, 128}, causal off/on: ours
                    through the public call (device arrays) and raw (preallocated),
                    PyTorch flash fp16/bf16 backward, cuDNN fp16 backward, memory-efficient
                    fp32 backward. TFLOP/s = 2.5 x forward FLOPs = 10 N^2 d per head
                    (half when causal), medians of CUDA-event timings after warm-up;
                    PRECISIONS: fp16, bf16 and 3xtf32 of ours (and each one's
                    deterministic dQ, raw).
        --wgmma     (compute capability 9.0) fp16 and bf16 also through pipeline="wgmma"
                    (the Hopper backward, `cuda/hopper/backward_kernels.py`): checked by
                    the same rule and timed (public and raw) beside the mma.sync kernel
    python3 benchmarks/gpu_tc_backward.py --sanitize-small    (for compute-sanitizer)
    python3 benchmarks/gpu_tc_backward.py --simulator-smoke   (no GPU: one tiny check)

Writes gpu_tc_backward.json into benchmarks/out/ (or --out DIR, never inside
benchmarks/results/); --record, on a GPU, writes h200_tc_backward.json there once the
checks have passed. The recorded file was assembled from three such runs (its "runs").
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse import env, reference, results
from flashcourse.cuda import backward, forward
from flashcourse.cuda.gradients import tc_backward as tcb
from flashcourse.cuda.ptx.mma import ROUNDERS
from flashcourse.geometry import visible_pairs
from flashcourse.timing import rel_err, time_cuda

BH = 32
#: fallback bound where PyTorch flash cannot run the shape (d not a multiple of 8)
BOUND = {"fp16": 3e-3, "bf16": 2.4e-2, "3xtf32": 1e-5}
#: the precisions checked and timed (3xtf32: float32 arrays)
PRECISIONS = ("fp16", "bf16", "3xtf32")
#: the dQ designs of every precision: atomics (deterministic=False), a query-major pass
DQ_DESIGNS = (False, True)
#: --wgmma: the precisions the Hopper backward (pipeline "wgmma") also runs
WGMMA_PRECISIONS = ("fp16", "bf16")
#: torch's contender for each precision's error and time: (backend, dtype)
TORCH_OF = {"fp16": ("flash", "float16"), "bf16": ("flash", "bfloat16"),
            "3xtf32": ("efficient", "float32")}
#: (warps, block_q, kv_regs, q_block_k, pipeline) variants timed at N = 4096 per d
VARIANTS = {64: [(8, 64, True, 64, "plain"), (8, 64, True, 64, "async"),
                 (4, 64, True, 64, "async"), (8, 32, True, 32, "async"),
                 (4, 32, True, 64, "async"), (8, 128, True, 64, "async"),
                 (8, 64, False, 64, "async")],
            128: [(8, 64, False, 32, "plain"), (8, 64, False, 32, "async"),
                  (8, 32, False, 32, "async"), (4, 32, False, 32, "async"),
                  (4, 64, False, 32, "async"), (8, 32, True, 32, "async")]}


def log(*a):
    print(*a, flush=True)


def rounded(x, precision):
    if precision == "3xtf32":          # float32 inputs as they are
        return np.asarray(x, np.float32).astype(np.float64)
    return ROUNDERS[precision](x).astype(np.float64)


def inputs(rng, bh, tq, tk, d, precision):
    """q, k, v, do on the host in the kernel's input dtype, and their rounded float64."""
    host = [rng.standard_normal((bh, t, d)).astype(np.float32) for t in (tq, tk, tk, tq)]
    if precision == "fp16":
        host = [h.astype(np.float16) for h in host]
    return host, [rounded(h.astype(np.float32), precision) for h in host]


def torch_grads(r64, causal, precision, backend=None):
    """PyTorch's gradients of the rounded inputs (float64 numpy), or None if it cannot
    (backend None: TORCH_OF[precision], flash for fp16/bf16, memory-efficient fp32 for
    3xtf32)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = backend or TORCH_OF[precision][0]
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    dt = getattr(torch, TORCH_OF[precision][1])
    q, k, v, do = (torch.tensor(a, device="cuda").to(dt)[None] for a in r64)
    for t in (q, k, v):
        t.requires_grad_(True)
    try:
        with sdpa_kernel([be]):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            g = torch.autograd.grad(o, (q, k, v), do)
    except RuntimeError:
        return None
    return [x[0].double().cpu().numpy() for x in g]


def ours(host, causal, precision, deterministic, tiles=None):
    dev = [cuda.to_device(h) for h in host]
    q, k, v, do = dev
    o, lse = forward(q, k, v, kernel="tensor_core", causal=causal, precision=precision)
    g = backward(q, k, v, o, lse, do, kernel="tensor_core", causal=causal,
                 precision=precision, deterministic=deterministic, **(tiles or {}))
    return [x.copy_to_host().astype(np.float64) for x in g]


def check_shapes():
    shapes = [(2, 128, 128, 64, False), (2, 128, 128, 64, True), (1, 300, 77, 128, True),
              (1, 77, 300, 32, True), (2, 100, 100, 5, True), (1, 65, 130, 33, False),
              (1, 257, 257, 128, True), (1, 200, 31, 96, True), (3, 1, 90, 64, True),
              (1, 90, 1, 64, False), (1, 513, 1000, 80, True), (2, 1000, 513, 16, False),
              (1, 64, 64, 100, False), (1, 1024, 1024, 128, True), (1, 1024, 1024, 64, False)]
    return shapes


#: the shapes of a --quick check (the first six, and one key: dP and D must cancel)
QUICK = 6


def passes(errs, t_err, zeros, precision) -> bool:
    """The check's rule for one row: fp16/bf16 within 2x PyTorch's error + 1e-4 where
    PyTorch runs the shape, else BOUND; 3xtf32 within BOUND, except a gradient whose
    float64 value is exactly zero (one key: dS = P (dP - D) cancels), where rel_err is the
    norm of ours and there is no relative error: within 2x PyTorch's there."""
    if t_err and precision != "3xtf32":
        return all(e <= 2 * te + 1e-4 for e, te in zip(errs, t_err))
    return all(e <= BOUND[precision] or (zero and t_err is not None and e <= 2 * te)
               for e, te, zero in zip(errs, t_err or [None] * 3, zeros))


def run_checks(res, configs, quick=False, wgmma=False):
    rng = np.random.default_rng(7)
    rows = []
    shapes = check_shapes()
    for bh, tq, tk, d, causal in (shapes[:QUICK] + [shapes[9]]) if quick else shapes:
        for precision in PRECISIONS:
            host, r64 = inputs(rng, bh, tq, tk, d, precision)
            ref = reference.attention_backward(*r64[:3], r64[3], causal=causal)
            theirs = None
            if d % 8 == 0 and (tq == tk or not causal):   # torch's causal mask is top-left
                theirs = torch_grads(r64, causal, precision)
            t_err = [rel_err(g, r) for g, r in zip(theirs, ref)] if theirs else None
            zeros = [not np.any(r) for r in ref]
            runs = [(det, tiles) for det in DQ_DESIGNS for tiles in configs.get(d, [None])]
            if wgmma and precision in WGMMA_PRECISIONS:
                runs.append((False, {"pipeline": "wgmma"}))
            for det, tiles in runs:
                try:
                    got = ours(host, causal, precision, det, tiles)
                    errs = [rel_err(g, r) for g, r in zip(got, ref)]
                except Exception as exc:  # noqa: BLE001  (recorded, checking goes on)
                    log("check raised", repr(exc)[:300])
                    errs = [float("nan")] * 3
                ok = passes(errs, t_err, zeros, precision)
                rows.append({"bh": bh, "tq": tq, "tk": tk, "d": d, "causal": causal,
                             "precision": precision, "deterministic": det,
                             "tiles": tiles, "err": errs, "torch_err": t_err, "ok": ok})
                log(f"check {precision} det={det!s:5} bh={bh} Tq={tq:4d} Tk={tk:4d} d={d:3d}"
                    f" causal={causal!s:5} tiles={tiles} err "
                    + " ".join(f"{e:.2e}" for e in errs) + " torch "
                    + (" ".join(f"{e:.2e}" for e in t_err) if t_err else "-")
                    + (" ok" if ok else " FAIL"))
    res["checks"] = {"all_ok": all(r["ok"] for r in rows), "rows": rows,
                     "rule": "err <= 2 x torch flash err + 1e-4, else <= BOUND; "
                             "3xtf32: err <= BOUND, or <= 2 x torch efficient fp32's err "
                             "where the float64 gradient is exactly zero (rel_err is then "
                             "the norm of ours)",
                     "bound": BOUND}
    log("checks all ok:", res["checks"]["all_ok"], f"({len(rows)} rows)")


def med(times):
    return float(statistics.median(times))


def flops(n, d, causal, bh=BH):
    return bh * 10 * visible_pairs(n, n, causal=causal) * d


class Problem:
    """Device inputs for one benchmark point, in every form the contenders need."""

    def __init__(self, n, d, causal, precision):
        rng = np.random.default_rng(0)
        host = [rng.standard_normal((BH, n, d)).astype(np.float32) for _ in range(4)]
        if precision == "fp16":
            host = [h.astype(np.float16) for h in host]
        self.n, self.d, self.causal, self.precision = n, d, causal, precision
        self.q, self.k, self.v, self.do = (cuda.to_device(h) for h in host)
        self.o, self.lse = forward(self.q, self.k, self.v, kernel="tensor_core",
                                   causal=causal, precision=precision)
        D = -(-d // 16) * 16
        self.words = [tcb._words(a, precision, D) for a in (self.q, self.k, self.v, self.do)]
        self.g32 = [cuda.device_array((BH, n, d), np.float32) for _ in range(3)]
        self.ld = cuda.device_array((2, BH, -(-n // tcb.LD_ROWS) * tcb.LD_ROWS), np.float32)

    def public(self, det=False, **tiles):
        return lambda: backward(self.q, self.k, self.v, self.o, self.lse, self.do,
                                kernel="tensor_core", causal=self.causal,
                                precision=self.precision, deterministic=det, **tiles)

    def raw(self, det=False, **tiles):
        n, d = self.n, self.d
        return lambda: tcb.run(*self.words, self.o, self.do, self.lse, *self.g32, n, n, d,
                               1.0 / np.sqrt(d), self.causal, self.precision,
                               deterministic=det, ld=self.ld, **tiles)


def time_ours(fn, reps=7):
    return med(time_cuda(fn, warmup=2, repeats=reps))


def time_torch_bwd(n, d, causal, dtype_name, backend, reps=7):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    dt = getattr(torch, dtype_name)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((1, BH, n, d), device="cuda", dtype=dt, generator=g,
                           requires_grad=True) for _ in range(3))
    do = torch.randn((1, BH, n, d), device="cuda", dtype=dt, generator=g)
    with sdpa_kernel([be]):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def go():
            torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        ms = med(time_cuda(go, warmup=2, repeats=reps, backend="torch"))
    return ms


def tiles_of(t):
    return dict(zip(("warps", "block_q", "kv_regs", "q_block_k", "pipeline"), t))


def resources_of(tiles, d, det=False):
    cfg = tcb.plan("fp16", d, tiles["warps"], tiles["block_q"], False, not det, False,
                   tiles["kv_regs"], tiles["q_block_k"], 0, tiles.get("pipeline", "async"))
    km, qm = tcb.kernels(cfg)
    sig_kv, sig_q = tcb.signatures(cfg.pipeline)
    ck = km.compile(sig_kv)
    out = {"regs": int(ck.regs_per_thread), "local_bytes": int(ck.local_mem_per_thread),
           "shared_bytes": cfg.shared_bytes}
    if qm is not None:
        cq = qm.compile(sig_q)
        out.update(q_regs=int(cq.regs_per_thread), q_local_bytes=int(cq.local_mem_per_thread))
    return out


def run_variants(res, n=4096):
    rows = []
    for d, grid in VARIANTS.items():
        p = Problem(n, d, False, "fp16")
        for t in grid:
            tiles = tiles_of(t)
            row = {"d": d, "n": n, "tiles": tiles}
            try:
                t0 = time.time()
                row.update(resources_of(tiles, d))
                row["compile_s"] = time.time() - t0
                ms = time_ours(p.raw(**tiles))
                row.update(ms=ms, tflops=flops(n, d, False) / ms / 1e9)
            except Exception as exc:  # noqa: BLE001
                row["error"] = repr(exc)[:300]
            rows.append(row)
            log("variant", json.dumps(row))
        del p
    res["variants"] = rows


def run_bench(res, ns=(4096, 8192), ds=(64, 128), tiles_by_d=None, wgmma=False):
    rows = []
    for d in ds:
        tiles = (tiles_by_d or {}).get(d, {})
        for causal in (False, True):
            for n in ns:
                f = flops(n, d, causal)
                point = {"n": n, "d": d, "causal": causal, "bh": BH, "flops": f}
                for precision in PRECISIONS:
                    p = Problem(n, d, causal, precision)
                    fns = [(f"ours_{precision}_public", p.public(**tiles)),
                           (f"ours_{precision}_raw", p.raw(**tiles))]
                    fns.append((f"ours_{precision}_det_raw", p.raw(det=True, **tiles)))
                    if wgmma and precision in WGMMA_PRECISIONS:
                        fns += [(f"ours_{precision}_wgmma_public", p.public(pipeline="wgmma")),
                                (f"ours_{precision}_wgmma_raw", p.raw(pipeline="wgmma"))]
                    for name, fn in fns:
                        try:
                            point[name] = time_ours(fn)
                        except Exception as exc:  # noqa: BLE001
                            point[name + "_error"] = repr(exc)[:300]
                    del p
                for name, dtn, be in (("torch_flash_fp16", "float16", "flash"),
                                      ("torch_flash_bf16", "bfloat16", "flash"),
                                      ("torch_cudnn_fp16", "float16", "cudnn"),
                                      ("torch_efficient_fp32", "float32", "efficient")):
                    try:
                        point[name] = time_torch_bwd(n, d, causal, dtn, be)
                        import torch
                        torch.cuda.empty_cache()
                    except Exception as exc:  # noqa: BLE001
                        point[name + "_error"] = repr(exc)[:300]
                tf = {k: f / v / 1e9 for k, v in point.items()
                      if isinstance(v, float) and k not in ("flops",)}
                point["tflops"] = tf
                if "ours_fp16_public" in point and "torch_flash_fp16" in point:
                    point["ratio_fp16_public_vs_flash"] = (point["torch_flash_fp16"]
                                                           / point["ours_fp16_public"])
                if "ours_bf16_public" in point and "torch_flash_bf16" in point:
                    point["ratio_bf16_public_vs_flash"] = (point["torch_flash_bf16"]
                                                           / point["ours_bf16_public"])
                if "ours_3xtf32_public" in point and "torch_efficient_fp32" in point:
                    point["ratio_3xtf32_public_vs_efficient_fp32"] = (
                        point["torch_efficient_fp32"] / point["ours_3xtf32_public"])
                rows.append(point)
                log("bench", json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                         for k, v in point.items() if k != "tflops"}),
                    "TFLOP/s", json.dumps({k: round(v, 1) for k, v in tf.items()}))
    res["bench"] = rows


def sanitize_small() -> int:
    rng = np.random.default_rng(1)
    bad = 0
    for causal, (tq, tk, d) in ((False, (37, 29, 40)), (True, (37, 29, 40)),
                                (True, (21, 45, 64)), (True, (70, 50, 128))):
        for precision in PRECISIONS:
            host, r64 = inputs(rng, 2, tq, tk, d, precision)
            ref = reference.attention_backward(*r64[:3], r64[3], causal=causal)
            for det in DQ_DESIGNS:
                err = max(rel_err(g, r) for g, r in zip(ours(host, causal, precision, det),
                                                         ref))
                log(f"sanitize {precision} det={det} causal={causal} Tq={tq} Tk={tk} d={d}:"
                    f" rel err {err:.2e}")
                bad += not err <= BOUND[precision]
    return 1 if bad else 0


def simulator_smoke() -> int:
    """Without a GPU: one tiny problem per precision through both dQ designs (no PyTorch,
    no timing; the numbers mean nothing beyond 'it runs and is right')."""
    rng = np.random.default_rng(3)
    bad = 0
    for precision in PRECISIONS:
        host, r64 = inputs(rng, 1, 9, 13, 16, precision)
        ref = reference.attention_backward(*r64[:3], r64[3], causal=True)
        for det in DQ_DESIGNS:
            err = max(rel_err(g, r) for g, r in zip(ours(host, True, precision, det), ref))
            log(f"smoke {precision} det={det}: rel err {err:.2e}")
            bad += not err <= BOUND[precision]
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = results.benchmark_parser(__doc__, "check", "variants", "bench", "quick",
                                  "sanitize-small")
    ap.add_argument("--ns", type=int, nargs="+", help="the bench's N values")
    ap.add_argument("--wgmma", action="store_true",
                    help="fp16/bf16 also through pipeline='wgmma' (compute capability 9.0)")
    args = results.parse_gpu_arguments(ap, argv, __file__)
    if args.simulator_smoke:
        return simulator_smoke()
    if args.sanitize_small:
        return sanitize_small()
    out = results.output_dir(args)
    stem = "h200_tc_backward" if args.record else "gpu_tc_backward"
    res = {"environment": env.record(), "bh": BH}
    try:
        if args.check:
            run_checks(res, {}, quick=args.quick, wgmma=args.wgmma)
        if args.variants:
            run_variants(res)
        if args.bench:
            run_bench(res, ns=args.ns or ((4096,) if args.quick else (4096, 8192)),
                      wgmma=args.wgmma)
    finally:                    # whatever was measured, even when a step raised
        log("wrote", results.write_json(out, f"{stem}.json", res))
    ok = res.get("checks", {}).get("all_ok", True)
    results.validate(json.loads(json.dumps(res)), "tc_backward", stem)
    results.finish(args, out, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
