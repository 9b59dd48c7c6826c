"""Check and time the CUDA backward kernels on a GPU, against PyTorch SDPA's backward.

Modes (combine them; each writes into benchmarks/out/, or --out DIR, never inside
benchmarks/results/; --record, on a GPU, replaces the recorded
benchmarks/results/h200_backward.json once the run has passed its checks;
--simulator-smoke runs tiny sizes without a GPU):

    python3 benchmarks/gpu_backward.py --check --bench
        --check  gradients of every kernel vs the float64 reference
                 (flashcourse.reference.attention_backward) on >= 20 random shapes:
                 ragged T, causal on/off, Tq != Tk both ways, d in {32, 64, 128};
                 relative error ||g - g_ref|| / ||g_ref|| <= 1e-4 per gradient (fp32).
        --bench  median time (CUDA events, after warm-up) of each kernel and of
                 PyTorch SDPA's backward (math backend fp32 with TF32 off; memory-
                 efficient backend fp32) for N in {1024, 2048, 4096, 8192},
                 d in {64, 128}, B x H = 32, causal on/off. TFLOP/s use the course's
                 convention: backward FLOPs = 2.5 x forward FLOPs = 10 N^2 d per head
                 (non-causal), half the pairs when causal
                 (flashcourse.traffic.backward_flops).
    python3 benchmarks/gpu_backward.py --sanitize-small
        one small ragged causal and non-causal problem through every kernel (for
        `compute-sanitizer --tool memcheck|racecheck`); exits 1 on a wrong gradient.
    python3 benchmarks/gpu_backward.py --plot benchmarks/results/h200_backward.json
        draws h200_backward.png from that JSON (any machine; needs matplotlib) into
        benchmarks/out/ (or --out DIR); with --record, on a GPU, into
        benchmarks/results/, beside the recorded JSON.

Writes h200_backward.json (environment, checks, timings) as it goes (with --record: into
a staging folder benchmarks/out/record-*/, moved into benchmarks/results/ at the end).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

import flashcourse  # noqa: F401  (selects GPU or simulator before numba)
from flashcourse import env, reference, results
from flashcourse.cuda import backward
from flashcourse.cuda.registry import BACKWARD
from flashcourse.timing import rel_err, time_cuda

TOL = 1e-4
#: Tile variants (block_q, block_k, ty, tx) timed besides the default at N = 4096.
#: First H200 run (2026-11-30): at N = 4096 the d = 64 variants measured (64,64,16,16) 8.1,
#: (32,64,16,16) 6.4, (64,32,16,16) 5.6, (64,64,8,16) 10.1, (64,128,16,16) 10.0 TFLOP/s and
#: d = 128 (32,64,16,16) 7.75, (64,64,16,16) 9.0, (32,32,8,16) 7.4: the defaults became
#: (64,64,8,16) and (64,64,16,16). The old defaults stay in the sweep for comparison.
EXTRA_CONFIGS = {64: [(64, 64, 16, 16)], 128: [(32, 64, 16, 16)]}
#: the registered backwards but the Hopper one (16-bit: gpu_tc_backward.py --wgmma checks it)
KERNELS = tuple(name for name in BACKWARD if name != "hopper")


def problem(rng, bh, tq, tk, d, causal):
    """fp32 q, k, v, do and the float64 reference o, lse (cast as the forward returns)."""
    q, k, v = (rng.standard_normal((bh, t, d)).astype(np.float32) for t in (tq, tk, tk))
    do = rng.standard_normal((bh, tq, d)).astype(np.float32)
    o, lse = reference.attention(q, k, v, causal=causal)
    return q, k, v, o.astype(np.float32), lse.astype(np.float32), do


def check_shapes(seed=2026, n=20, smoke=False):
    """n random shapes: ragged, causal half the time, Tq != Tk both ways, d in {32,64,128}
    (smoke: two tiny ones, for the simulator)."""
    if smoke:
        return [(1, 5, 7, 8, True), (1, 7, 5, 8, False)]
    rng = np.random.default_rng(seed)
    shapes = [(2, 64, 64, 64, False), (2, 64, 64, 64, True), (1, 300, 77, 128, True),
              (1, 77, 300, 32, True)]                    # fixed corner cases first
    while len(shapes) < n:
        d = int(rng.choice([32, 64, 128]))
        tq = int(rng.integers(1, 400))
        tk = int(rng.integers(1, 400)) if rng.random() < 0.7 else tq
        shapes.append((int(rng.integers(1, 4)), tq, tk, d, bool(rng.random() < 0.5)))
    return shapes


def run_checks(results, save, smoke=False):
    rng = np.random.default_rng(7)
    rows, worst = [], 0.0
    for bh, tq, tk, d, causal in check_shapes(smoke=smoke):
        q, k, v, o, lse, do = problem(rng, bh, tq, tk, d, causal)
        ref = reference.attention_backward(q, k, v, do, causal=causal)
        for kern in KERNELS:
            try:
                got = backward(q, k, v, o, lse, do, kernel=kern, causal=causal)
            except Exception as exc:  # noqa: BLE001  (record it, keep checking the others)
                print(f"check {kern} raised {exc!r}"[:400], flush=True)
                got = [np.full(r.shape, np.nan) for r in ref]
            errs = [rel_err(g, r) for g, r in zip(got, ref)]
            finite = all(np.isfinite(g).all() for g in got)
            ok = finite and max(errs) <= TOL           # NaN errors compare False: not ok
            worst = max(worst, max(errs))
            rows.append({"kernel": kern, "bh": bh, "tq": tq, "tk": tk, "d": d,
                         "causal": causal, "rel_err_dq": errs[0], "rel_err_dk": errs[1],
                         "rel_err_dv": errs[2], "finite": finite, "ok": ok})
            print(f"check {kern:14s} bh={bh} Tq={tq:4d} Tk={tk:4d} d={d:3d} "
                  f"causal={causal!s:5s} max rel err {max(errs):.2e} {'ok' if ok else 'FAIL'}",
                  flush=True)
    results["checks"] = {"tolerance": TOL, "n_shapes": len(check_shapes(smoke=smoke)),
                         "all_ok": all(r["ok"] for r in rows), "worst_rel_err": worst,
                         "rows": rows}
    save()


def sanitize_small() -> int:
    rng = np.random.default_rng(1)
    bad = 0
    for causal, (tq, tk, d) in ((False, (37, 29, 40)), (True, (37, 29, 40)),
                                (True, (21, 45, 64))):
        q, k, v, o, lse, do = problem(rng, 2, tq, tk, d, causal)
        ref = reference.attention_backward(q, k, v, do, causal=causal)
        for kern in KERNELS:
            got = backward(q, k, v, o, lse, do, kernel=kern, causal=causal)
            err = max(rel_err(g, r) for g, r in zip(got, ref))
            print(f"sanitize {kern} causal={causal} Tq={tq} Tk={tk} d={d}: rel err {err:.2e}")
            bad += err > TOL
    return 1 if bad else 0


def time_it(fn, warmup=2, reps=7, backend="numba"):
    """Median milliseconds of fn() and all the times (flashcourse.timing.time_cuda)."""
    times = time_cuda(fn, warmup=warmup, repeats=reps, backend=backend)
    return float(np.median(times)), times


def bench_ours(bh, n, d, causal, kernel, cfg=None, reps=7):
    from numba import cuda

    from flashcourse.cuda.gradients.backward_kernels import run as bwd_run
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((bh, n, d)).astype(np.float32) for _ in range(4)]
    qf, kf, vf, dof = (cuda.to_device(x) for x in host)
    of = cuda.device_array((bh, n, d), np.float32)
    lse = cuda.device_array((bh, n), np.float32)
    scale = 1.0 / np.sqrt(d)
    try:                                                       # o, lse from the forward
        from flashcourse.cuda.cuda_core.flash import run as fwd_run
        fwd_run(qf, kf, vf, of, lse, n, n, d, scale, causal)
    except Exception as exc:  # noqa: BLE001  (timing does not depend on the values)
        print(f"forward kernel unavailable ({exc!r}); timing with random o, lse", flush=True)
        of = cuda.to_device(rng.standard_normal((bh, n, d)).astype(np.float32))
        lse = cuda.to_device(np.full((bh, n), np.log(n), np.float32))
    dq, dk, dv = (cuda.device_array((bh, n, d), np.float32) for _ in range(3))
    delta = cuda.device_array((bh, n), np.float32)
    kw = {} if cfg is None else dict(block_q=cfg[0], block_k=cfg[1], ty=cfg[2], tx=cfg[3])

    def go():
        bwd_run(qf, kf, vf, of, lse, dof, dq, dk, dv, n, n, d, scale, causal, kernel=kernel,
                delta=delta, **kw)
    t0 = time.time()
    go()
    cuda.synchronize()
    first_s = time.time() - t0
    ms, all_ms = time_it(go, warmup=1, reps=reps)
    return ms, all_ms, first_s


def bench_torch(bh, n, d, causal, backend, reps=7):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    be = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((1, bh, n, d), device="cuda", dtype=torch.float32, generator=g,
                           requires_grad=True) for _ in range(3))
    do = torch.randn((1, bh, n, d), device="cuda", dtype=torch.float32, generator=g)
    with sdpa_kernel([be]):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def go():
            torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        ms, all_ms = time_it(go, warmup=2, reps=reps, backend="torch")
    return ms, all_ms


def run_bench(results, save, sizes, dims, bh=32, simple=True, with_torch=True):
    from flashcourse.geometry import visible_pairs
    rows = results.setdefault("bench", [])
    for d in dims:
        for causal in (False, True):
            for n in sizes:
                # = bh * flashcourse.traffic.backward_flops(n, n, d, causal=causal)
                flops = bh * 10 * visible_pairs(n, n, causal=causal) * d
                variants = [("fast", None), ("fast_two_pass", None)]
                variants += [("fast", cfg) for cfg in EXTRA_CONFIGS.get(d, [])
                             if n == 4096]
                if n <= 2048 and simple:
                    variants.append(("simple", None))
                for kern, cfg in variants:
                    try:
                        reps = 3 if kern == "simple" else (5 if n >= 8192 else 7)
                        ms, all_ms, first = bench_ours(bh, n, d, causal, kern, cfg, reps=reps)
                        row = {"impl": kern if cfg is None else f"{kern}{list(cfg)}",
                               "kernel": kern, "config": cfg, "n": n, "d": d,
                               "causal": causal, "bh": bh, "ms": ms, "all_ms": all_ms,
                               "first_call_s": first, "tflops": flops / ms / 1e9}
                    except Exception as exc:  # noqa: BLE001
                        row = {"impl": kern, "config": cfg, "n": n, "d": d, "causal": causal,
                               "error": repr(exc)[:300]}
                    rows.append(row)
                    print("bench", json.dumps({k: v for k, v in row.items() if k != "all_ms"}),
                          flush=True)
                    save()
                for backend in ("math", "efficient") if with_torch else ():
                    try:
                        ms, all_ms = bench_torch(bh, n, d, causal, backend)
                        import torch
                        torch.cuda.empty_cache()
                        row = {"impl": f"torch_{backend}_fp32", "n": n, "d": d,
                               "causal": causal, "bh": bh, "ms": ms, "all_ms": all_ms,
                               "tflops": flops / ms / 1e9}
                    except Exception as exc:  # noqa: BLE001
                        row = {"impl": f"torch_{backend}_fp32", "n": n, "d": d,
                               "causal": causal, "error": repr(exc)[:300]}
                    rows.append(row)
                    print("bench", json.dumps({k: v for k, v in row.items() if k != "all_ms"}),
                          flush=True)
                    save()


def resources(results, dims):
    """Registers / local memory / shared memory of the default fast kernels."""
    from flashcourse.cuda.gradients.backward_kernels import (_sig, default_tiles,
                                                             make_fast_kernels, plan)
    out = []
    for d in dims:
        for cfg in [default_tiles(d)] + EXTRA_CONFIGS.get(d, []):
            p = plan(d, *cfg)
            kv_atomic, kv, qk, _ = make_fast_kernels(p.block_q, p.block_k, p.ty, p.tx,
                                                     p.head_dim)
            for name, kern, sig in (("kv_atomic", kv_atomic, "fast_kv"),
                                    ("q_pass", qk, "fast_q")):
                t0 = time.time()
                try:
                    ck = kern.compile(_sig(sig))
                    out.append({"d": d, "config": list(cfg), "kernel": name,
                                "regs": int(ck.regs_per_thread),
                                "local_bytes": int(ck.local_mem_per_thread),
                                "shared_bytes": p.shared_bytes,
                                "compile_s": round(time.time() - t0, 2)})
                except Exception as exc:  # noqa: BLE001
                    out.append({"d": d, "config": list(cfg), "kernel": name,
                                "error": repr(exc)[:300]})
                print("resources", out[-1], flush=True)
    results["resources"] = out


def summary(results):
    print("\n  impl                      N     d  causal     ms   TFLOP/s")
    for r in results.get("bench", []):
        if "ms" in r:
            print(f"  {r['impl']:24s} {r['n']:5d} {r['d']:4d}  {r['causal']!s:5s} "
                  f"{r['ms']:8.2f}  {r['tflops']:7.2f}")
        else:
            print(f"  {r['impl']:24s} {r['n']:5d} {r['d']:4d}  {r['causal']!s:5s}  "
                  f"ERROR {r['error'][:60]}")
    c = results.get("checks")
    if c:
        print(f"checks: {c['n_shapes']} shapes x {len(KERNELS)} kernels, all ok: {c['all_ok']}, "
              f"worst rel err {c['worst_rel_err']:.2e}")


def plot_rows(path: Path) -> tuple[dict, list]:
    """(the backward results at `path`, its timed rows of the default configurations);
    one line (SystemExit) naming --plot and the file when it is missing, not a backward
    results file (flashcourse.results.load with the gpu_backward schema) or has no timed
    rows."""
    try:
        res = results.load(path, "gpu_backward")
    except results.ResultsError as exc:
        raise SystemExit(f"benchmarks/gpu_backward.py: --plot: {exc}") from None
    if res is None:
        raise SystemExit(f"benchmarks/gpu_backward.py: --plot {path}: no such file "
                         "(expected a backward results JSON, e.g. "
                         "benchmarks/results/h200_backward.json)")
    rows = [r for r in res.get("bench", []) if "ms" in r and r.get("config") is None]
    if not rows:
        raise SystemExit(f"benchmarks/gpu_backward.py: --plot {path}: no timed rows "
                         "('bench' rows with 'ms') to draw: a run with --bench writes them")
    return res, rows


def plot(path: Path, out_dir: Path, res: dict, rows: list) -> Path:
    """Draw the backward results `res` (its timed `rows`), read from `path`, into
    out_dir/<its name>.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dims = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(len(dims), 2, figsize=(11, 3.6 * len(dims)), squeeze=False)
    for a, d in enumerate(dims):
        for b, causal in enumerate((False, True)):
            ax = axes[a][b]
            for impl in sorted({r["impl"] for r in rows}):
                pts = sorted((r["n"], r["tflops"]) for r in rows
                             if r["impl"] == impl and r["d"] == d and r["causal"] == causal)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set_title(f"backward, d = {d}, B x H = 32, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("N = Tq = Tk (positions)")
            ax.set_ylabel("TFLOP/s (10 N^2 d per head)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    gpu = res.get("env", {}).get("gpu", "GPU")
    fig.suptitle(f"Attention backward, fp32, {gpu}, {res.get('env', {}).get('date_utc', '')}")
    fig.tight_layout()
    out = results.save_figure(out_dir, Path(path).stem + ".png", fig, dpi=110)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    ap = results.benchmark_parser(__doc__, "check", "bench", "resources", "sanitize-small")
    ap.add_argument("--skip-simple", action="store_true", help="do not time the simple kernel")
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--plot", type=Path, metavar="JSON",
                    help="draw this backward JSON as <name>.png into the output folder")
    results.add_output_arguments(ap)
    args = ap.parse_args(argv)
    results.check_outputs(args, __file__)
    if args.plot:
        res, rows = plot_rows(args.plot)
        out = results.output_dir(args)
        print(plot(args.plot, out, res, rows))
        results.finish(args, out)                # --record (a GPU): beside the recorded JSON
        return 0
    results.require_gpu("benchmarks/gpu_backward.py", args.simulator_smoke)
    if args.sanitize_small:
        return sanitize_small()
    out = results.output_dir(args)
    smoke = args.simulator_smoke
    if smoke:                             # tiny sizes: the simulator runs ~7k threads/s
        args.sizes, args.dims, args.skip_simple = "16", "8", True
    record = {"env": env.record(), "flop_convention":
               "backward FLOPs = 2.5 x forward = 10 Tq Tk d per head (visible pairs if causal)"}
    def save():
        return results.write_json(out, "h200_backward.json", record, "gpu_backward")
    path = save()
    print(record["env"], flush=True)
    dims = [int(x) for x in args.dims.split(",")]
    if args.resources and not smoke:      # registers: only a GPU compiles to machine code
        resources(record, dims)
        save()
    if args.check:
        run_checks(record, save, smoke=smoke)
    if args.bench:
        run_bench(record, save, [int(x) for x in args.sizes.split(",")], dims,
                  bh=2 if smoke else 32, simple=not args.skip_simple, with_torch=not smoke)
    save()
    summary(record)
    print("wrote", path)
    ok = record.get("checks", {}).get("all_ok", True)
    results.finish(args, out, ok)                # --record: into benchmarks/results/ if ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
