"""Check and benchmark the CUDA forward kernels of flashcourse.cuda on a GPU.

    python benchmarks/gpu_forward.py --check --variants --bench [--out DIR | --record]
    python benchmarks/gpu_forward.py --check --simulator-smoke          # no GPU: tiny check
        (on the simulator, kernels it cannot run, hopper's wgmma, are skipped with a line)
    compute-sanitizer --tool memcheck python3 benchmarks/gpu_forward.py --sanitize-small
    compute-sanitizer --tool racecheck python3 benchmarks/gpu_forward.py --sanitize-small

--check      every kernel vs the float64 reference on >= 20 random shapes (ragged,
             causal, Tq != Tk, d in {32, 64, 128}, odd d), output poisoned with NaN
             before each run; fp32 relative error must be <= 1e-5.
--variants   flash configurations (block_q, block_k, threads, tm): registers, local
             memory, shared memory and time at N = 4096, B x H = 32.
--bench      ms and TFLOP/s (4 B H Tq Tk d FLOPs, half when causal) for N in
             {1024, ..., 16384}, d in {64, 128}, causal off/on: textbook, flash, dense
             and, when torch imports, PyTorch SDPA math fp32 (TF32 off), efficient
             fp32 and flash fp16. Warm-up, CUDA events, median of repeats; too-slow
             runs (estimated from the previous N) are skipped and marked.
--unroll-sweep     the default flash configuration of each d with unroll 1, 2, 4, 8.
--kernels    a subset of textbook,flash,dense,torch for --check and --bench.
--sanitize-small   one run of every kernel on small ragged shapes (for compute-sanitizer).
Writes gpu_forward.json and gpu_forward.png under benchmarks/out/ (or --out DIR, never
inside benchmarks/results/) as it goes; --record (on a GPU) writes them into a staging
folder benchmarks/out/record-*/ and moves them into benchmarks/results/ once the run
has passed its checks.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from functools import partial

import numpy as np

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
from flashcourse import env, reference, results
from flashcourse._checks import Heads
from flashcourse.cuda import extra_device_bytes
from flashcourse.cuda.cuda_core import flash
from flashcourse.cuda.registry import FORWARD
from flashcourse.gpu import using_simulator
from flashcourse.timing import (SlowSkip, benchmark_flops, measure_variant, rel_err,
                                row_summary, time_cuda, variant_summary)
from numba import cuda

warnings.filterwarnings("ignore", message=".*under-utilization.*")

#: the registered forwards that compute float32 inputs in fp32 (the 1e-5 check); the
#: Hopper kernel computes in 16 bits: benchmarks/gpu_hopper.py checks and times it
KERNELS = tuple(name for name in FORWARD if name != "hopper")
NS = (1024, 2048, 4096, 8192, 16384)
DS = (64, 128)
BH = 32
MAX_EST_S = 1.0          # skip a configuration whose one run is estimated above this


def log(*a):
    print(*a, flush=True)


def flops(tq, tk, d, causal, bh=BH):
    return benchmark_flops(tq, tk, d, causal, bh)


def launch(name, qf, kf, vf, o, lse, tq, tk, d, scale, causal, cfg=None):
    """Run one registered kernel on flattened device arrays, writing into o and lse."""
    x = Heads(qf, kf, vf, (qf.shape[0],), tq, tk, d, scale, causal, np.dtype(np.float32))
    FORWARD[name].run(x, out=(o, lse), **(cfg or {}))


# ----------------------------------------------------------------------------- check
def check(rng, results, flash_cfgs, kernels=KERNELS, smoke=False):
    """Every kernel (and every flash variant given) vs float64 on >= 20 random shapes
    (smoke: two tiny ones, for the simulator)."""
    shapes = []
    for d in (32, 64, 128):
        for (tq, tk) in ((1, 1), (37, 53), (100, 100), (129, 65), (257, 300), (64, 1000),
                         (500, 129)):
            shapes.append((2, tq, tk, d))
    shapes += [(3, 77, 91, 5), (1, 190, 190, 48), (2, 300, 17, 100), (1, 1024, 1024, 64)]
    if smoke:
        shapes = [(1, 5, 7, 8), (2, 9, 4, 3)]
    rows = []
    worst = 0.0
    for i, (bh, tq, tk, d) in enumerate(shapes):
        causal = bool(i % 2)
        q = rng.standard_normal((bh, tq, d)).astype(np.float32)
        k = rng.standard_normal((bh, tk, d)).astype(np.float32)
        v = rng.standard_normal((bh, tk, d)).astype(np.float32)
        o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
        scale = 1.0 / np.sqrt(d)
        qf, kf, vf = (cuda.to_device(x) for x in (q, k, v))
        variants = [(name, None) for name in kernels]
        variants += [("flash", c) for c in flash_cfgs]
        for name, cfg in variants:
            o = cuda.to_device(np.full((bh, tq, d), np.nan, np.float32))      # poisoned
            lse = cuda.to_device(np.full((bh, tq), np.nan, np.float32))
            try:
                launch(name, qf, kf, vf, o, lse, tq, tk, d, scale, causal, cfg)
                cuda.synchronize()
            except ValueError as exc:            # a variant that cannot take this d
                rows.append({"kernel": name, "cfg": cfg, "shape": [bh, tq, tk, d],
                             "causal": causal, "skipped": str(exc)})
                continue
            oh, lh = o.copy_to_host(), lse.copy_to_host()
            fin = np.isfinite(lse_ref)
            ok_empty = bool(np.array_equal(np.isneginf(lh), ~fin) and np.all(oh[~fin] == 0))
            e_o = rel_err(oh, o_ref) if not np.isnan(oh).any() else float("inf")
            e_l = rel_err(lh[fin], lse_ref[fin]) if fin.any() else 0.0
            if np.isnan(lh).any():
                e_l = float("inf")
            ok = ok_empty and e_o <= 1e-5 and e_l <= 1e-5
            worst = max(worst, e_o, e_l)
            rows.append({"kernel": name, "cfg": cfg, "shape": [bh, tq, tk, d], "causal": causal,
                         "rel_err_o": e_o, "rel_err_lse": e_l, "empty_rows_ok": ok_empty,
                         "ok": ok})
            if not ok:
                log(f"  CHECK FAILED {name} {cfg} shape {(bh, tq, tk, d)} causal={causal}: "
                    f"o {e_o:.3g} lse {e_l:.3g} empty_ok={ok_empty}")
    n_ok = sum(1 for r in rows if r.get("ok"))
    n_run = sum(1 for r in rows if "ok" in r)
    log(f"check: {n_ok}/{n_run} runs within 1e-5 on {len(shapes)} shapes; worst rel err "
        f"{worst:.3g}")
    results["check"] = {"shapes": len(shapes), "runs": n_run, "passed": n_ok,
                        "worst_rel_err": worst, "tolerance": 1e-5, "rows": rows}
    return n_ok == n_run


# ----------------------------------------------------------------------------- timing
def time_numba(fn, reps_hint=None, budget_s=0.3, backend="numba"):
    """(median ms, timed calls) of fn(): one warm-up, then CUDA events around each call
    until `budget_s` is spent (3 to 20 calls; flashcourse.timing.time_cuda)."""
    times = time_cuda(fn, warmup=1, repeats=reps_hint or 20,
                      budget_s=None if reps_hint else budget_s, backend=backend)
    return float(np.median(times)), len(times)


def time_torch(fn, budget_s=0.3):
    return time_numba(fn, budget_s=budget_s, backend="torch")


def make_inputs(rng, n, d):
    q = rng.standard_normal((BH, n, d), dtype=np.float32)
    k = rng.standard_normal((BH, n, d), dtype=np.float32)
    v = rng.standard_normal((BH, n, d), dtype=np.float32)
    return q, k, v


def variants(rng, results, cfgs, points):
    rows = []
    for (n, d, causal) in points:
        q, k, v = make_inputs(rng, n, d)
        qf, kf, vf = (cuda.to_device(x) for x in (q, k, v))
        o = cuda.device_array((BH, n, d), np.float32)
        lse = cuda.device_array((BH, n), np.float32)
        scale = 1.0 / np.sqrt(d)
        for cfg in cfgs:
            row = measure_variant(
                {"cfg": cfg, "n": n, "d": d, "causal": causal},
                partial(flash.resources, cfg["block_q"], cfg["block_k"], cfg["threads"],
                        cfg["tm"], d),
                partial(time_numba, partial(launch, "flash", qf, kf, vf, o, lse, n, n, d, scale,
                                            causal, cfg)),
                flops(n, n, d, causal))
            rows.append(row)
            log(f"variant {cfg} n={n} d={d} causal={causal}: {variant_summary(row)}")
        del qf, kf, vf, o, lse
    results.setdefault("variants", []).extend(rows)
    return rows


def bench(rng, results, flash_cfg_by_d, ns=NS, ds=DS, out=None, kernels=KERNELS,
          with_torch=True):
    try:
        if not with_torch:
            raise ImportError("torch baselines not asked for (--kernels)")
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        has_torch = True
    except (ImportError, AttributeError, RuntimeError) as exc:  # no torch, or no CUDA torch
        log(f"torch unavailable: {exc!r}")
        has_torch = False
    names = list(kernels) + (["torch_math_fp32", "torch_efficient_fp32", "torch_flash_fp16"]
                             if has_torch else [])
    rows = []
    slow = SlowSkip(MAX_EST_S)                     # keyed by (name, d, causal)
    total = len(ns) * len(ds) * 2 * len(names)
    done = 0
    t_start = time.time()
    for d in ds:
        for causal in (False, True):
            for n in ns:
                q, k, v = make_inputs(rng, n, d)
                scale = 1.0 / np.sqrt(d)
                qf, kf, vf = (cuda.to_device(x) for x in (q, k, v))
                o = cuda.device_array((BH, n, d), np.float32)
                lse = cuda.device_array((BH, n), np.float32)
                tq_t = None
                for name in names:
                    done += 1
                    row = slow.row(name, n, d, causal, BH)
                    if "skipped" not in row:
                        try:
                            if name in KERNELS:
                                cfg = flash_cfg_by_d.get(d) if name == "flash" else None
                                ms, reps = time_numba(partial(launch, name, qf, kf, vf, o, lse,
                                                              n, n, d, scale, causal, cfg))
                                row["extra_bytes"] = extra_device_bytes(name, BH, n, n)
                                row["extra_bytes_how"] = "analytic"
                                if name == "flash":
                                    row["cfg"] = cfg
                            else:
                                if tq_t is None:
                                    tq_t = [torch.as_tensor(x, device="cuda").view(1, BH, n, d)
                                            for x in (q, k, v)]
                                    th = [x.half() for x in tq_t]
                                backend, ins = {
                                    "torch_math_fp32": (SDPBackend.MATH, tq_t),
                                    "torch_efficient_fp32": (SDPBackend.EFFICIENT_ATTENTION, tq_t),
                                    "torch_flash_fp16": (SDPBackend.FLASH_ATTENTION, th)}[name]

                                def run_t(backend=backend, ins=ins, causal=causal, scale=scale):
                                    with sdpa_kernel(backend):
                                        return F.scaled_dot_product_attention(
                                            *ins, is_causal=causal, scale=float(scale))
                                torch.cuda.synchronize()
                                base = torch.cuda.memory_allocated()
                                torch.cuda.reset_peak_memory_stats()
                                res = run_t()
                                torch.cuda.synchronize()
                                row["extra_bytes"] = int(torch.cuda.max_memory_allocated() - base
                                                         - res.numel() * res.element_size())
                                row["extra_bytes_how"] = "torch.cuda.max_memory_allocated delta"
                                del res
                                ms, reps = time_torch(run_t)
                            row.update(ms=ms, tflops=row["flops"] / ms / 1e9, reps=reps)
                            slow.record((name, d, causal), n, ms)
                        except Exception as exc:  # recorded (e.g. out of memory); go on
                            row["error"] = repr(exc)[:300]
                            if has_torch:
                                torch.cuda.empty_cache()
                    rows.append(row)
                    el = time.time() - t_start
                    log(f"[{done:3d}/{total}] {el:6.1f}s d={d} causal={int(causal)} n={n:5d} "
                        f"{name:22s} {row_summary(row)}")
                del qf, kf, vf, o, lse, tq_t
                if out is not None:
                    results["bench"] = rows
                    save(out, results)
                if has_torch:
                    torch.cuda.empty_cache()
    results["bench"] = rows
    return rows


def table(rows, n=4096, d=64):
    log(f"\nTarget point: N={n}, d={d}, B x H = {BH}, fp32 (torch flash: fp16)")
    log(f"{'kernel':22s} {'causal':>6s} {'ms':>9s} {'TFLOP/s':>8s} {'extra MiB':>10s}")
    for r in rows:
        if r["n"] == n and r["d"] == d and "ms" in r:
            log(f"{r['kernel']:22s} {int(r['causal']):6d} {r['ms']:9.3f} {r['tflops']:8.2f} "
                f"{r.get('extra_bytes', 0) / 2**20:10.1f}")


def save(out, doc):
    """gpu_forward.json (validated) into the folder `out` (results.write_json)."""
    results.write_json(out, "gpu_forward.json", doc, "gpu_forward")


def plot(rows, out):
    """gpu_forward.png of the timed `rows` into the folder `out` (results.save_figure)."""
    import matplotlib
    matplotlib.use("Agg")
    from flashcourse.plots.bench import tflops_grid
    fig, _ = tflops_grid(rows, sorted({r["kernel"] for r in rows}), DS,
                         lambda name: "o--" if "fp16" in name else "o-")
    fig.suptitle(f"Attention forward, B x H = {BH}, fp32 (dashed: fp16 tensor cores)")
    results.save_figure(out, "gpu_forward.png", fig, dpi=110)


def unroll_sweep(rng, results, unrolls=(1, 2, 4, 8), n=4096, ds=DS,
                 shapes=((2, 129, 65, True), (1, 300, 257, False), (2, 1000, 1000, True))):
    """The default flash configuration of each d with each `unroll`: check, then time."""
    rows = []
    for d in ds:
        bq, bk, nt, tm = flash.default_config(d)
        base = dict(block_q=bq, block_k=bk, threads=nt, tm=tm)
        for un in unrolls:
            cfg = dict(base, unroll=un)
            worst = 0.0
            for (bh, tq, tk, causal) in shapes:
                q = rng.standard_normal((bh, tq, d)).astype(np.float32)
                k = rng.standard_normal((bh, tk, d)).astype(np.float32)
                v = rng.standard_normal((bh, tk, d)).astype(np.float32)
                o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
                o = cuda.to_device(np.full((bh, tq, d), np.nan, np.float32))
                lse = cuda.to_device(np.full((bh, tq), np.nan, np.float32))
                flash.run(*(cuda.to_device(x) for x in (q, k, v)), o, lse, tq, tk, d,
                          1.0 / np.sqrt(d), causal, **cfg)
                oh = o.copy_to_host()
                worst = max(worst, rel_err(oh, o_ref) if not np.isnan(oh).any() else np.inf)
            q, k, v = make_inputs(rng, n, d)
            qf, kf, vf = (cuda.to_device(x) for x in (q, k, v))
            o = cuda.device_array((BH, n, d), np.float32)
            lse = cuda.device_array((BH, n), np.float32)
            res = flash.resources(bq, bk, nt, tm, d, unroll=un)
            ms, reps = time_numba(partial(flash.run, qf, kf, vf, o, lse, n, n, d,
                                          1.0 / np.sqrt(d), False, **cfg), budget_s=0.5)
            row = dict(cfg=cfg, d=d, n=n, worst_rel_err=worst, ms=ms,
                       tflops=flops(n, n, d, False) / ms / 1e9, reps=reps, **res)
            rows.append(row)
            log(f"unroll-sweep d={d} {cfg}: rel err {worst:.2g}, {ms:.3f} ms "
                f"{row['tflops']:.2f} TFLOP/s, regs {res['regs']}, local {res['local_bytes']}")
    results["unroll_sweep"] = rows
    return rows


def runnable(kernels) -> list:
    """The kernels of `kernels` that run here: on Numba's CUDA simulator, those the
    registry marks as simulator-capable (`Kernel.simulator`: all of them today), each
    other one skipped with one printed line saying why."""
    if not using_simulator():
        return list(kernels)
    for name in kernels:
        if not FORWARD[name].simulator:
            log(f"skipped {name}: Numba's CUDA simulator cannot run this kernel; check it "
                "on a GPU")
    return [name for name in kernels if FORWARD[name].simulator]


def sanitize_small():
    """One run of every kernel on small ragged shapes (run under compute-sanitizer)."""
    rng = np.random.default_rng(7)
    from flashcourse.cuda import forward
    worst = 0.0
    kernels = runnable(KERNELS)
    for (lead, tq, tk, d, causal) in [((2,), 37, 53, 64, False), ((1,), 70, 45, 32, True),
                                      ((2,), 65, 130, 128, True), ((1,), 20, 9, 5, True)]:
        q = rng.standard_normal((*lead, tq, d)).astype(np.float32)
        k = rng.standard_normal((*lead, tk, d)).astype(np.float32)
        v = rng.standard_normal((*lead, tk, d)).astype(np.float32)
        o_ref, _ = reference.attention(q, k, v, causal=causal)
        for name in kernels:
            o, lse = forward(q, k, v, kernel=name, causal=causal)
            worst = max(worst, rel_err(o, o_ref))
    print(f"sanitize-small: all kernels ran; worst rel err {worst:.3g}")


def main(argv=None):
    ap = results.benchmark_parser(__doc__, "check", "variants", "bench", "sanitize-small")
    ap.add_argument("--quick", action="store_true", help="bench only N <= 4096")
    ap.add_argument("--unroll-sweep", action="store_true",
                    help="default flash configs with unroll 1, 2, 4, 8: check and time")
    ap.add_argument("--kernels", default=",".join(KERNELS) + ",torch",
                    help="comma-separated subset of textbook,flash,dense,torch")
    args = results.parse_gpu_arguments(ap, argv, __file__)
    smoke = args.simulator_smoke
    if smoke and (args.variants or args.bench or args.unroll_sweep):
        raise SystemExit("--simulator-smoke runs --check and --sanitize-small only (tiny "
                         "shapes); timings need a GPU")
    if args.sanitize_small:
        sanitize_small()
        if not (args.check or args.variants or args.bench or args.unroll_sweep):
            return 0
    chosen = runnable([k for k in args.kernels.split(",") if k in KERNELS])
    with_torch = "torch" in args.kernels.split(",")
    out = results.output_dir(args)
    rng = np.random.default_rng(2026)
    record = {"env": env.record()}
    log(json.dumps(record["env"]))

    def save_record():
        save(out, record)
    cfgs = [dict(block_q=64, block_k=64, threads=256, tm=4),
            dict(block_q=128, block_k=64, threads=256, tm=8),
            dict(block_q=64, block_k=32, threads=128, tm=4),
            dict(block_q=128, block_k=32, threads=256, tm=8),
            dict(block_q=64, block_k=64, threads=128, tm=8),
            dict(block_q=128, block_k=64, threads=128, tm=8),
            dict(block_q=64, block_k=32, threads=256, tm=4),
            dict(block_q=128, block_k=64, threads=512, tm=4),
            dict(block_q=128, block_k=128, threads=256, tm=8),
            dict(block_q=128, block_k=32, threads=512, tm=4)]
    ok = True
    if args.check:
        flash_cfgs = [cfgs[0], cfgs[6], cfgs[7]] if "flash" in chosen and not smoke else []
        ok = check(rng, record, flash_cfgs, chosen, smoke=smoke)
        save_record()
    if args.unroll_sweep:
        unroll_sweep(rng, record)
        save_record()
    best = {}
    if args.variants:
        rows = variants(rng, record, cfgs, [(4096, 64, False), (4096, 128, False)])
        for d in DS:
            good = [r for r in rows if r["d"] == d and "ms" in r]
            if good:
                best[d] = min(good, key=lambda r: r["ms"])["cfg"]
        record["best_cfg"] = {str(k): v for k, v in best.items()}
        log(f"best flash configs: {best}")
        save_record()
    if args.bench:
        ns = tuple(n for n in NS if n <= 4096) if args.quick else NS
        rows = bench(rng, record, best, ns=ns, out=out, kernels=chosen, with_torch=with_torch)
        save_record()
        plot(rows, out)
        table(rows)
        table(rows, n=8192)
    results.finish(args, out, ok)            # --record: into benchmarks/results/ if ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
