"""Tuning sweeps: time launch configurations, pick the tuned default.

`sweep` times configurations of the flash kernel (`flashcourse.configs`) at several
sequence lengths (warm-up, CUDA events, median of repeats: `flashcourse.timing`), one
result row each; `best_by_head_dim` picks the tuned default per head dimension (never
slower than the untuned one in the same run). The H200 results are recorded in
`benchmarks/results/h200_tuning_sweep.json` (`flashcourse.results.load_sweep`);
`heatmap_grid` arranges them by tile for `flashcourse.plots.tuning`, which draws them.
Without a GPU, `cpu_sweep` tunes `flashcourse.cpu.forward` for real on this CPU.
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import replace
from functools import lru_cache

import numpy as np

from ._checks import check_bool
from .configs import LaunchConfig, make_config
from .gpu import driver_has_gpu, using_simulator
from .limits import current_limits, occupancy
from .timing import rel_err, tflops, time_cuda, time_host
from .traffic import attention_flops


class Progress:
    """A progress bar: an ipywidgets bar in Jupyter, a text line elsewhere."""

    def __init__(self, total: int, label: str = "", show: bool = True):
        self.total, self.n, self.label, self.show = max(total, 1), 0, label, show
        self.bar = None
        if show and "ipykernel" in sys.modules:     # in Jupyter: ipywidgets is installed
            import ipywidgets as w
            from IPython.display import display
            self.bar = w.IntProgress(value=0, max=self.total, description=label)
            self.text = w.Label()
            display(w.HBox([self.bar, self.text]))

    def update(self, message: str = "") -> None:
        self.n += 1
        if not self.show:
            return
        if self.bar is not None:
            self.bar.value = self.n
            self.text.value = message
        else:
            width = 30
            done = int(width * self.n / self.total)
            print(f"[{'#' * done}{'.' * (width - done)}] {self.n}/{self.total} {message}",
                  flush=True)


def config_row(cfg: LaunchConfig, seq_len: int) -> dict:
    """An empty result row for `cfg` at `seq_len` (the sweep schema's row keys)."""
    return {"head_dim": cfg.head_dim, "seq_len": int(seq_len), "block_q": cfg.block_q,
            "block_k": cfg.block_k, "threads": cfg.threads, "tm": cfg.tm, "unroll": cfg.unroll,
            "micro_q": cfg.micro_q, "micro_k": cfg.micro_k, "micro_d": cfg.micro_d,
            "shared_bytes": cfg.shared_bytes, "regs_per_thread": cfg.regs_per_thread,
            "local_bytes": None, "blocks_per_sm": None, "limiter": None, "median_ms": None,
            "spread_ms": None, "tflops": None, "rel_err": None, "status": "ok", "error": ""}


def time_config(cfg: LaunchConfig, seq_len: int, *, runner, batch_heads: int = 32,
                warmup: int = 1, repeats: int = 5, timer=None, limits=None) -> dict:
    """Time one configuration at one sequence length; return its row (never raises).

    runner(cfg, seq_len, batch_heads) -> (fn, check): fn() launches one forward;
    check() returns the relative error against the float64 reference (or None);
    fn.config, if present, is the compiled LaunchConfig (with registers), and
    fn.local_bytes the spilled bytes per thread. A configuration that fails (does not
    compile, cannot launch, wrong result) gets status "error" and the message.
    """
    timer = time_cuda if timer is None else timer
    row = config_row(cfg, seq_len)
    try:
        fn, check = runner(cfg, int(seq_len), batch_heads)
        compiled = getattr(fn, "config", None)
        if compiled is not None:
            row["regs_per_thread"] = compiled.regs_per_thread
            row["unroll"] = compiled.unroll
        row["local_bytes"] = getattr(fn, "local_bytes", None)
        if limits is not None:
            occ = occupancy(cfg.threads, cfg.shared_bytes, limits,
                            regs_per_thread=row["regs_per_thread"])
            row.update(blocks_per_sm=occ.blocks_per_sm, limiter=occ.limiter)
        if check is not None:            # validate first: a wrong kernel is never timed
            fn()
            row["rel_err"] = check()
            if not row["rel_err"] < 1e-4:                              # fp32: ~1e-6 expected
                row.update(status="error", error=f"wrong result: rel_err={row['rel_err']:.2e}")
                return row
        times = timer(fn, warmup=warmup, repeats=repeats)
        ms = statistics.median(times)
        flops = attention_flops(seq_len, seq_len, cfg.head_dim) * batch_heads
        row.update(median_ms=ms, tflops=tflops(flops, ms), spread_ms=[min(times), max(times)])
    except Exception as exc:  # broad on purpose: a config that fails is data, not a crash
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500])
    return row


def sweep(configs, seq_lens, *, runner=None, batch_heads: int = 32, warmup: int = 1,
          repeats: int = 5, progress: bool = True, timer=None, limits=None) -> list:
    """Time every configuration at every sequence length; return one row (dict) each.

    runner defaults to `make_gpu_runner` (the CUDA flash kernel), timer to `time_cuda`
    (CUDA events, median of `repeats` after `warmup` calls). See `time_config`.
    """
    runner = make_gpu_runner if runner is None else runner
    rows = []
    bar = Progress(len(configs) * len(seq_lens), "sweep", show=check_bool(progress, "progress"))
    for n in seq_lens:
        for cfg in configs:
            row = time_config(cfg, n, runner=runner, batch_heads=batch_heads, warmup=warmup,
                              repeats=repeats, timer=timer, limits=limits)
            bar.update(f"d={cfg.head_dim} N={n} {cfg.label}: "
                       + (f"{row['tflops']:.2f} TFLOP/s" if row["tflops"] else row["error"][:60]))
            rows.append(row)
    return rows


@lru_cache(maxsize=2)
def host_inputs(batch_heads: int, seq_len: int, head_dim: int, seed: int = 0):
    """q, k, v (B*H, N, d) float32 standard normal on the host (cached: the sweep reuses
    them for every configuration of one shape, and makes them before taking the GPU)."""
    rng = np.random.default_rng(seed)
    shape = (batch_heads, seq_len, head_dim)
    return tuple(rng.standard_normal(shape, dtype=np.float32) for _ in range(3))


def make_gpu_runner(cfg: LaunchConfig, seq_len: int, batch_heads: int, *, seed: int = 0,
                    check_rows: int = 256):
    """(fn, check) for one flash configuration on the GPU (see `time_config`).

    Inputs q, k, v (B*H, N, d) float32 standard normal are placed on the GPU once;
    fn() launches one forward (flashcourse.cuda.cuda_core.flash.run); check() compares the
    first `check_rows` rows of head 0 with the float64 reference, and a small
    irregular causal problem (Tq = 333, Tk = 517, 2 heads) run with the same tiles,
    returning the larger relative error.
    """
    from numba import cuda

    from .cuda.cuda_core import flash
    from .reference import attention
    d = cfg.head_dim
    rng = np.random.default_rng(seed + 1)
    q, k, v = host_inputs(batch_heads, seq_len, d, seed)            # (BH, N, d) each
    dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
    o = cuda.device_array((batch_heads, seq_len, d), np.float32)   # (BH, N, d)
    lse = cuda.device_array((batch_heads, seq_len), np.float32)    # (BH, N)
    scale = 1.0 / math.sqrt(d)
    args = (cfg.block_q, cfg.block_k, cfg.threads, cfg.tm)
    sim = using_simulator()                # tiny smoke tests only: no registers there
    kern, kw = kernel_for(cfg, shuffle=not sim)
    ck = None if sim else kern.compile(flash.signature())

    def fn():
        flash.run(dq, dk, dv, o, lse, seq_len, seq_len, d, scale, False, *args, **kw)

    def check():
        o_h = o[0, :check_rows].copy_to_host()[None]                # (1, rows, d)
        ref, _ = attention(q[:1, :check_rows].astype(np.float64), k[:1].astype(np.float64),
                           v[:1].astype(np.float64), scale=scale)
        err = rel_err(o_h, ref)
        sq, sk, sv = (rng.standard_normal((2, t, d)).astype(np.float32)
                      for t in (333, 517, 517))
        so = cuda.device_array((2, 333, d), np.float32)
        sl = cuda.device_array((2, 333), np.float32)
        flash.run(cuda.to_device(sq), cuda.to_device(sk), cuda.to_device(sv), so, sl,
                  333, 517, d, scale, True, *args, **kw)
        sref, _ = attention(sq.astype(np.float64), sk.astype(np.float64),
                            sv.astype(np.float64), causal=True, scale=scale)
        so_h = so.copy_to_host()
        return max(err, rel_err(so_h, sref))

    fn.config = replace(cfg, unroll=kw.get("unroll", cfg.unroll))
    if ck is not None:
        fn.config = replace(fn.config, regs_per_thread=int(ck.regs_per_thread))
        fn.local_bytes = int(ck.local_mem_per_thread)
    return fn, check


def _ok(rows):
    return [r for r in rows if r.get("status") == "ok" and (r.get("tflops") or 0) > 0]


def best_by_head_dim(rows, defaults: dict) -> dict:
    """Pick the tuned default per head dimension.

    Among the configurations timed at every sequence length of that head dimension
    and at least as fast as the untuned default (`defaults[str(d)]`) at each of them,
    take the one with the highest geometric-mean TFLOP/s. The untuned default itself
    qualifies, so the tuned default is never slower than it in the same run.
    Returns {"64": {block_q, block_k, threads, tm, unroll, tflops {N: x}, default_tflops {N: x},
    geomean_tflops, speedup}} (speedup = geomean over the default's geomean).
    """
    out = {}
    for d in sorted({r["head_dim"] for r in _ok(rows)}):
        table = {}
        for r in _ok(rows):
            if r["head_dim"] == d:
                table.setdefault((r["block_q"], r["block_k"], r["threads"], r["tm"],
                                  r.get("unroll")), {})[
                    r["seq_len"]] = r["tflops"]
        seqs = sorted({n for v in table.values() for n in v})
        dflt = defaults.get(str(d)) or defaults.get(d)
        dkey = ((dflt["block_q"], dflt["block_k"], dflt["threads"], dflt["tm"],
                 dflt.get("unroll")) if dflt else None)
        base = table.get(dkey, {})
        cands = []
        for key, by_n in table.items():
            if len(by_n) != len(seqs):
                continue
            if base and any(by_n[n] < base.get(n, 0.0) for n in seqs):
                continue
            g = math.exp(sum(math.log(by_n[n]) for n in seqs) / len(seqs))
            cands.append((g, key, by_n))
        if not cands:
            continue
        g, key, by_n = max(cands)
        gb = (math.exp(sum(math.log(base[n]) for n in seqs) / len(seqs))
              if base and len(base) == len(seqs) else None)
        out[str(d)] = {"block_q": key[0], "block_k": key[1], "threads": key[2], "tm": key[3],
                       "unroll": key[4],
                       "tflops": {str(n): by_n[n] for n in seqs},
                       "default_tflops": {str(n): base.get(n) for n in seqs} if base else {},
                       "geomean_tflops": g,
                       "speedup": (g / gb) if gb else None}
    return out


def kernel_for(cfg: LaunchConfig, shuffle: bool):
    """The compiled-variant dispatcher of flash for `cfg`, made with exactly the arguments
    `flash.run` uses (so its cache serves the timed launches too); and run's kwargs."""
    from .cuda.cuda_core import flash
    plan = flash.plan(cfg.head_dim, cfg.block_q, cfg.block_k, cfg.threads, cfg.tm,
                      shuffle=shuffle)
    base = (cfg.block_q, cfg.block_k, cfg.threads, cfg.tm, plan.head_dim, plan.shuffle)
    u = flash.UNTUNED_UNROLL if cfg.unroll is None else cfg.unroll
    kern, _ = flash.make_flash_kernel(*base, u)
    return kern, {"unroll": u}


def heatmap_grid(rows, head_dim: int, seq_len: int):
    """(block_qs, block_ks, grid, threads_grid): best TFLOP/s over threads per (Br, Bc);
    NaN where nothing launched."""
    sel = [r for r in _ok(rows) if r["head_dim"] == head_dim and r["seq_len"] == seq_len]
    allr = [r for r in rows if r["head_dim"] == head_dim]
    bqs = sorted({r["block_q"] for r in allr})
    bks = sorted({r["block_k"] for r in allr})
    grid = np.full((len(bqs), len(bks)), np.nan)                # (n_Br, n_Bc) TFLOP/s
    thr = np.zeros((len(bqs), len(bks)), dtype=int)
    for r in sel:
        i, j = bqs.index(r["block_q"]), bks.index(r["block_k"])
        if not (grid[i, j] >= r["tflops"]):
            grid[i, j], thr[i, j] = r["tflops"], r["threads"]
    return bqs, bks, grid, thr


def cpu_time(block_q: int, block_k: int, seq_len: int, head_dim: int, *, batch_heads: int = 2,
             repeats: int = 3, seed: int = 0) -> dict:
    """Time flashcourse.cpu.forward (Numba, CPU) for real at one tile shape.

    Returns {median_ms, gflops, rel_err}; rel_err of the output against
    flashcourse.reference (float64). Keep seq_len small (<= 512): a call then takes
    well under a second (the first call also compiles, ~1 s, and is not timed).
    """
    from . import cpu
    from .reference import attention
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch_heads, seq_len, head_dim)).astype(np.float32)
               for _ in range(3))                                   # (BH, N, d)
    fn = lambda: cpu.forward(q, k, v, block_q=block_q, block_k=block_k)
    times = time_host(fn, warmup=1, repeats=repeats, budget_s=1.0)
    ms = statistics.median(times)
    o, _ = fn()
    ref, _ = attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    err = rel_err(o, ref)
    flops = attention_flops(seq_len, seq_len, head_dim) * batch_heads
    return {"median_ms": ms, "gflops": flops / (ms * 1e-3) / 1e9, "rel_err": err}


def cpu_sweep(block_sizes=(16, 32, 64, 128), *, seq_len: int = 256, head_dim: int = 64,
              progress: bool = True) -> list:
    """Tune flashcourse.cpu.forward for real: one row per (block_q, block_k) with its
    median time (ms), GFLOP/s and relative error. Small seq_len keeps each timing < 1 s."""
    rows = []
    bar = Progress(len(block_sizes) ** 2, "CPU sweep", show=check_bool(progress, "progress"))
    for bq in block_sizes:
        for bk in block_sizes:
            t = cpu_time(bq, bk, seq_len, head_dim)
            rows.append({"block_q": bq, "block_k": bk, "seq_len": seq_len,
                         "head_dim": head_dim, **t})
            bar.update(f"Br={bq} Bc={bk}: {t['gflops']:.1f} GFLOP/s")
    return rows


def gpu_available() -> bool:
    """True when Numba's CUDA target is a real GPU (not the simulator)."""
    if using_simulator() or not driver_has_gpu():
        return False
    from numba import cuda
    return bool(cuda.is_available())


def gpu_time(block_q: int, block_k: int, threads: int, tm: int, seq_len: int, head_dim: int,
             *, batch_heads: int = 32, repeats: int = 10) -> dict:
    """Time one launch configuration of the CUDA flash kernel on this GPU (a row dict)."""
    cfg = make_config(block_q, block_k, threads, tm, head_dim)
    limits = current_limits()
    return time_config(cfg, seq_len, runner=make_gpu_runner, batch_heads=batch_heads,
                       warmup=2, repeats=repeats, limits=limits)
