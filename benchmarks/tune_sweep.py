"""Tile-size sweep of the CUDA flash kernel on a GPU; writes the recorded tuning results.

    python benchmarks/tune_sweep.py                     # on a GPU: writes benchmarks/out/
    python benchmarks/tune_sweep.py --record            # on a GPU: replaces the recorded sweep
    python benchmarks/tune_sweep.py --simulator-smoke --head-dims 16 --seq-lens 16 ...

What it does (fp32, non-causal, B x H = 32 heads, Tq = Tk = N):
  phase A  every launchable (block_q, block_k, threads) from {32, 64, 128}^2 x
           {128, 256, 512}, with the per-thread micro-tile (tm rows) closest to square
           and unroll 2 (inner-product steps per loop iteration), plus the kernel's
           untuned default (its own tiles and unroll), timed at the first N (4096);
  phase B  unroll 1, 2, 4, 8 and the other valid tm values of the 2 fastest tile
           shapes per d, at that N;
  phase C  the `--top` fastest per d and the default, timed at every other N (16384);
  recheck  the default and the tuned pick timed again (a second sample of each: how
           large is run-to-run noise?).
Each timing: the kernel is compiled first (workers compile in parallel, one process
each, outside a GPU lock), then under the lock: inputs placed on the GPU, `--warmup`
untimed launches, `--repeats` launches each between two CUDA events, the median kept;
the output is checked against the float64 reference (first rows of head 0, and a small
irregular causal problem with the same tiles). The tuned default per d is the fastest
geometric mean over N among configurations at least as fast as the default at every N.

Outputs in benchmarks/out/ (or --out DIR, never inside benchmarks/results/; --record, on
a GPU, replaces the recorded files once the sweep is done): h200_tuning_sweep.json
(schema flashcourse/schemas/sweep.json) and h200_tuning_heatmap.png (TFLOP/s over
(block_q, block_k), best thread count per cell).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import flashcourse  # noqa: F401  (GPU or simulator, before Numba loads)
from flashcourse import configs, env, limits, results, sweep
from flashcourse.cuda.cuda_core import flash
from flashcourse.gpu import using_simulator

LOCK = None


def _init(lock):
    """Worker start: keep the lock, and create the CUDA context now (not while another
    worker is timing)."""
    global LOCK
    LOCK = lock
    with lock:
        import flashcourse  # noqa: F401
        from numba import cuda
        cuda.current_context()


def _work(task):
    """Compile one configuration (no lock), then time it under the GPU lock; a row."""
    d, key, n, bh, warmup, repeats, limits_dict, deadline = task
    cfg = configs.make_config(*key[:4], d, unroll=key[4])
    row = sweep.config_row(cfg, n)
    if time.time() > deadline:
        row.update(status="skipped", error="time budget spent")
        return row
    t0 = time.time()
    try:
        sim = using_simulator()      # a smoke test without a GPU
        kern, _ = sweep.kernel_for(cfg, shuffle=not sim)
        if not sim:
            kern.compile(flash.signature())
    except Exception as exc:  # broad on purpose: a configuration that fails is data
        row.update(status="error", error=f"compile: {type(exc).__name__}: {exc}"[:500])
        return row
    compile_s = time.time() - t0
    device = limits.DeviceLimits.from_dict(limits_dict)
    sweep.host_inputs(bh, n, d)              # make the inputs before taking the GPU
    with LOCK:
        row = sweep.time_config(cfg, n, runner=sweep.make_gpu_runner, batch_heads=bh,
                                warmup=warmup, repeats=repeats, limits=device)
    row["compile_s"] = round(compile_s, 2)
    return row


def run_phase(pool, tasks, label):
    rows = []
    t0 = time.time()
    for i, row in enumerate(pool.imap_unordered(_work, tasks), 1):
        msg = (f"{row['tflops']:6.2f} TFLOP/s  {row['median_ms']:8.3f} ms  regs "
               f"{row['regs_per_thread']} local {row['local_bytes']} err {row['rel_err']:.1e}"
               if row["status"] == "ok" else f"{row['status']}: {row['error'][:90]}")
        print(f"[{label} {i:3d}/{len(tasks)} {time.time() - t0:5.0f}s] d={row['head_dim']} "
              f"N={row['seq_len']} Br={row['block_q']} Bc={row['block_k']} t={row['threads']} "
              f"tm={row['tm']} u={row.get('unroll')}: {msg}", flush=True)
        rows.append(row)
    return rows


def top_keys(rows, d, n, k):
    ok = [r for r in rows if r["status"] == "ok" and r["head_dim"] == d and r["seq_len"] == n]
    ok.sort(key=lambda r: -r["tflops"])
    out = []
    for r in ok:
        key = (r["block_q"], r["block_k"], r["threads"], r["tm"], r.get("unroll"))
        if key not in out:
            out.append(key)
    return out[:k]


def save(out, doc, heatmap=False):
    """Write the sweep document (after every phase: a killed run keeps what it measured)."""
    from flashcourse.plots.tuning import plot_sweep_heatmaps
    results.write_json(out, "h200_tuning_sweep.json", doc, "sweep")
    if heatmap:
        results.save_figure(out, "h200_tuning_heatmap.png", plot_sweep_heatmaps(doc), dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--batch-heads", type=int, default=32)
    ap.add_argument("--block-qs", type=int, nargs="+", default=[32, 64, 128])
    ap.add_argument("--block-ks", type=int, nargs="+", default=[32, 64, 128])
    ap.add_argument("--threads", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--unroll", type=int, default=2,
                    help="unroll of phase A (phase B tries 1, 2, 4, 8 on the best shapes)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--long-repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=240.0)
    args = results.parse_gpu_arguments(ap, argv, __file__)
    out = results.output_dir(args)
    deadline = time.time() + args.budget_s

    device = limits.current_limits()
    environment = env.record()
    print(f"GPU {environment['gpu']}, driver {environment['driver']}, CUDA "
          f"{environment['cuda']}; limits {device}",
          flush=True)
    n0, rest = args.seq_lens[0], args.seq_lens[1:]
    du = flash.UNTUNED_UNROLL
    defaults = {str(d): {**dict(zip(("block_q", "block_k", "threads", "tm"),
                                    flash.untuned_config(d), strict=True)), "unroll": du}
                for d in args.head_dims}
    dkey = lambda d: tuple(defaults[str(d)][x] for x in ("block_q", "block_k", "threads",
                                                           "tm", "unroll"))
    ua = args.unroll if du is not None else None
    rejected = {}
    phase_a = []
    for d in args.head_dims:
        ok, rej = configs.enumerate_configs(d, device, block_qs=args.block_qs,
                                      block_ks=args.block_ks, threads=args.threads, unroll=ua)
        rejected[str(d)] = [{"config": list(k), "reason": r} for k, r in rej]
        keys = [c.key() for c in ok]
        dk = dkey(d)
        if dk not in keys:
            keys.append(dk)
        phase_a += [(d, k) for k in keys]
    doc = {"schema": results.SWEEP_SCHEMA, "environment": environment,
           "limits": device.to_dict(),
           "problem": {"batch_heads": args.batch_heads, "dtype": "float32", "causal": False,
                       "seq_lens": args.seq_lens, "warmup": args.warmup,
                       "repeats": args.repeats, "long_repeats": args.long_repeats,
                       "timing": "CUDA events around each launch, median of repeats",
                       "check": "rel. error vs float64 reference < 1e-4"},
           "default": defaults, "rows": [], "rechecks": [], "best": {},
           "rejected": rejected}
    ctx = mp.get_context("spawn")
    lock = ctx.Lock()
    ld = device.to_dict()
    rows = []
    with ctx.Pool(args.workers, initializer=_init, initargs=(lock,)) as pool:
        rows += run_phase(pool, [(d, k, n0, args.batch_heads, args.warmup, args.repeats, ld,
                                  deadline) for d, k in phase_a], "A")
        save(out, {**doc, "rows": rows})
        tried = {(r["head_dim"], r["block_q"], r["block_k"], r["threads"], r["tm"],
                  r.get("unroll")) for r in rows}
        phase_b = []
        for d in args.head_dims:
            for (bq, bk, t, tm0, u0) in top_keys(rows, d, n0, 2):
                variants = [(tm0, u) for u in (1, 2, 4, 8)] if du is not None else []
                variants += [(tm, u0) for tm in configs.valid_tms(bq, bk, t, d)]
                for tm, u in variants:
                    if (d, bq, bk, t, tm, u) not in tried:
                        phase_b.append((d, (bq, bk, t, tm, u)))
                        tried.add((d, bq, bk, t, tm, u))
        rows += run_phase(pool, [(d, k, n0, args.batch_heads, args.warmup, args.repeats, ld,
                                  deadline) for d, k in phase_b], "B")
        phase_c = []
        for d in args.head_dims:
            keys = top_keys(rows, d, n0, args.top)
            dk = dkey(d)
            if dk not in keys:
                keys.append(dk)
            phase_c += [(d, k) for k in keys]
        for n in rest:
            rows += run_phase(pool, [(d, k, n, args.batch_heads, 1, args.long_repeats, ld,
                                      deadline + 40) for d, k in phase_c], f"C N={n}")
        best = sweep.best_by_head_dim(rows, defaults)
        save(out, {**doc, "rows": rows, "best": best})
        recheck_tasks = []
        for d in args.head_dims:
            dk = dkey(d)
            recheck_tasks.append((d, dk))
            b = best.get(str(d))
            if b:
                bk = (b["block_q"], b["block_k"], b["threads"], b["tm"], b["unroll"])
                if bk != dk:
                    recheck_tasks.append((d, bk))
        rechecks = run_phase(pool, [(d, k, n0, args.batch_heads, args.warmup, args.repeats, ld,
                                     deadline + 55) for d, k in recheck_tasks], "recheck")
    doc.update(rows=rows, rechecks=rechecks, best=best)
    save(out, doc, heatmap=True)
    results.finish(args, out)                # --record: now into benchmarks/results/
    print("\nbest per head dimension (geometric mean over N; never slower than the default):")
    for d, b in best.items():
        print(f"  d={d}: Br={b['block_q']} Bc={b['block_k']} threads={b['threads']} "
              f"tm={b['tm']} unroll={b['unroll']}: {b['tflops']} TFLOP/s; default "
              f"{b['default_tflops']}; "
              f"speed-up {b['speedup']}")
    for r in rechecks:
        print(f"  recheck d={r['head_dim']} {r['block_q']}/{r['block_k']}/{r['threads']}/"
              f"{r['tm']}/u{r.get('unroll')}: {r['tflops']}")


if __name__ == "__main__":
    main()
