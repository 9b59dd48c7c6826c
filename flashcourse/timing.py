"""One timing harness for benchmarks, tests and notebooks: CUDA events, host clocks, units.

    time_cuda(fn)    ms per call of GPU work, one CUDA-event pair per call, after warm-up;
                     optionally flushing L2 before each call (cold-cache numbers), with
                     Numba's events or PyTorch's (for library baselines)
    time_host(fn)    ms per call of CPU work (perf_counter), after warm-up
    tflops(f, ms)    TFLOP/s of f floating-point operations done in ms milliseconds
    spread(times)    (min, median, max) of repeated timings
    unresolved(...)  where the repeats' spread does not resolve an order (versions at one
                     size, or one version between neighbouring sizes): noise, not speed;
                     `describe_unresolved` says it in one short line per size
    rel_err(x, ref)  ||x - ref|| / ||ref|| in float64 (the course's accuracy number)

Take the median of the returned list (`statistics.median`): one slow call (a page
fault, a clock change) then does not move the result.
"""

from __future__ import annotations

import time

import numpy as np


def _numba_events():
    from numba import cuda
    return cuda.event(), cuda.event(), cuda.synchronize


def _torch_events():
    import torch
    return (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True),
            torch.cuda.synchronize)


_flush_buffers: dict = {}


def flush_l2(l2_bytes: int, backend: str = "numba") -> None:
    """Evict the L2 cache by writing 2 x `l2_bytes` of zeros on the device."""
    n = 2 * int(l2_bytes) // 4
    key = (backend, n)
    if backend == "torch":
        import torch
        if key not in _flush_buffers:
            _flush_buffers[key] = torch.empty(n, dtype=torch.float32, device="cuda")
        _flush_buffers[key].zero_()
        return
    from numba import cuda
    if key not in _flush_buffers:
        @cuda.jit
        def fill_zero(buf):
            i = cuda.grid(1)
            if i < buf.size:
                buf[i] = 0
        _flush_buffers[key] = (cuda.device_array(n, np.float32), fill_zero)
    buf, kernel = _flush_buffers[key]
    kernel[(n + 255) // 256, 256](buf)


def time_cuda(fn, *, warmup: int = 2, repeats: int = 10, budget_s: float | None = None,
              l2_bytes: int | None = None, backend: str = "numba") -> list:
    """Milliseconds per call of `fn` (which launches GPU work), one CUDA-event pair each.

    warmup: untimed calls first (compilation, module load, caches). repeats: timed
    calls; with `budget_s`, stop early once that many seconds were timed (at least 3
    calls, or 1 when one call takes over half a second). l2_bytes: flush an L2 of this
    size before every timed call (outside the events), for cold-cache times.
    backend: "numba" (CUDA events of numba.cuda) or "torch" (torch.cuda.Event).
    Returns the list of times (ms): take the median.

    The GPU is idle when each timed call starts (the synchronisation before it), so the
    events also bracket the host work `fn` does before its launches: a function that spends
    0.2 ms of Python before launching a 0.5 ms kernel measures ~0.7 ms. That is what a user
    of `fn` gets; to time a kernel alone, time a call that only launches it (on an H200 the
    tensor-core forward measured 0.79 ms through `tensor_core.run` and 0.54 ms as a bare
    launch: benchmarks/NOTES_tensor_core.md).
    """
    events = _torch_events if backend == "torch" else _numba_events
    for _ in range(warmup):
        fn()
    times, spent = [], 0.0
    for _ in range(repeats):
        start, end, synchronize = events()
        if l2_bytes:
            flush_l2(l2_bytes, backend)
        synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        ms = float(start.elapsed_time(end))
        times.append(ms)
        spent += ms * 1e-3
        least = 1 if times[0] > 500 else 3
        if budget_s is not None and spent > budget_s and len(times) >= least:
            break
    return times


def time_host(fn, *, warmup: int = 1, repeats: int = 5, budget_s: float | None = None) -> list:
    """Milliseconds per call of a CPU function (perf_counter), after `warmup` calls.
    Stops early once `budget_s` seconds of timed calls have passed (at least one)."""
    for _ in range(warmup):
        fn()
    times, spent = [], 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt * 1e3)
        spent += dt
        if budget_s is not None and spent > budget_s:
            break
    return times


class SlowSkip:
    """A benchmark's guard against configurations too slow to time: the seconds of one run
    estimated from the last one timed under the same key (kernel, d, causal, ...) at n
    positions, scaled as (n / n_last)^2 (attention's work grows as n^2); above `limit_s`
    the configuration is skipped."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.last = {}                               # key -> (n, ms) of the last timed run

    def estimate_s(self, key, n: int) -> float:
        """Estimated seconds of one run at `n` (0.0 when nothing under `key` was timed)."""
        prev = self.last.get(key)
        return prev[1] * (n / prev[0]) ** 2 / 1000 if prev else 0.0

    def reason(self, key, n: int) -> str | None:
        """Why the run at `n` is skipped (the row's "skipped" text), or None: time it."""
        est = self.estimate_s(key, n)
        if est > self.limit_s:
            return f"estimated {est:.1f} s per run (> {self.limit_s} s): skipped"
        return None

    def row(self, kernel: str, n: int, d: int, causal: bool, bh: int) -> dict:
        """The `bench_row` of a configuration (key (kernel, d, causal)), with "skipped" set
        where it is estimated too slow to time."""
        row = bench_row(kernel, n, d, causal, bh)
        skipped = self.reason((kernel, d, causal), n)
        if skipped:
            row["skipped"] = skipped
        return row

    def record(self, key, n: int, ms: float) -> None:
        self.last[key] = (n, ms)


def benchmark_flops(tq: int, tk: int, d: int, causal: bool, bh: int = 1) -> float:
    """Forward FLOPs by the benchmark convention: 4 B H Tq Tk d, halved when causal (the
    papers' and PyTorch's benchmarks). The exact count of the visible pairs is
    `flashcourse.traffic.attention_flops` (4 d x visible pairs, one head)."""
    f = 4.0 * bh * tq * tk * d
    return f / 2 if causal else f


def bench_row(kernel: str, n: int, d: int, causal: bool, bh: int) -> dict:
    """A forward benchmark's result row before timing (Tq = Tk = n; FLOPs as above)."""
    return {"kernel": kernel, "n": n, "d": d, "causal": causal, "bh": bh,
            "flops": benchmark_flops(n, n, d, causal, bh)}


def measure_variant(row: dict, resources, timer, flops: float) -> dict:
    """Fill a benchmark's variant `row`: the kernel's `resources()` (registers, local and
    shared bytes), the (ms, reps) of `timer()` and the TFLOP/s of `flops`. A variant that
    fails gets its error recorded in the row instead (the others go on)."""
    try:
        row.update(resources())
        ms, reps = timer()
        row.update(ms=ms, tflops=flops / ms / 1e9, reps=reps)
    except Exception as exc:
        row["error"] = repr(exc)[:300]
    return row


def variant_summary(row: dict, tflops_width: int = 0) -> str:
    """A variant row (see `measure_variant`) as the end of one log line."""
    if "ms" not in row:
        return row.get("error", "")
    return (f"{row['ms']:.3f} ms {row['tflops']:{tflops_width}.2f} TFLOP/s regs {row['regs']} "
            f"local {row['local_bytes']} smem {row['shared_bytes']}")


def row_summary(row: dict) -> str:
    """A benchmark row as one log line: its time and TFLOP/s, or why it has none."""
    if "ms" in row:
        return f"{row['ms']:9.3f} ms {row['tflops']:7.2f} TFLOP/s"
    return row.get("skipped", row.get("error", ""))


def spread(times) -> tuple[float, float, float]:
    """(min, median, max) of repeated timings, in their unit. The median is the number to
    report; min..max is every repeat's range, the honest picture of the noise."""
    t = np.asarray(times, np.float64)
    if t.size == 0:
        raise ValueError("spread of no timings")
    return float(t.min()), float(np.median(t)), float(t.max())


def _overlap(a, b) -> bool:
    """Whether the ranges min..max of two lists of timings overlap."""
    return min(a) <= max(b) and min(b) <= max(a)


def unresolved(sizes, runs: dict) -> list[dict]:
    """Where repeated timings do not resolve an order, so a plot's order is noise.

    runs: {version: [timings at sizes[0], timings at sizes[1], ...]} (lists of repeats,
    any one unit). Returns one dict per finding, {"n", "names", "kind", "why"}:
      kind "versions": two versions whose min..max ranges overlap at size n (which one
          is faster is not measured at that size);
      kind "growth": one version whose range at n overlaps its range at the next size,
          or whose median at n is above it, although the work grows with the size (the
          rise from n to the next size is not measured: call overhead and noise).
    """
    sizes = list(sizes)
    for name, per_size in runs.items():
        if len(per_size) != len(sizes):
            raise ValueError(f"{name}: {len(per_size)} lists of timings for {len(sizes)} sizes")
    found = []
    names = list(runs)
    for i, n in enumerate(sizes):
        for a_i, a in enumerate(names):
            for b in names[a_i + 1:]:
                ra, rb = runs[a][i], runs[b][i]
                if _overlap(ra, rb):
                    found.append({"n": n, "names": (a, b), "kind": "versions",
                                  "why": f"the ranges of {a} ({min(ra):.3g}..{max(ra):.3g}) and "
                                         f"{b} ({min(rb):.3g}..{max(rb):.3g}) overlap: which is "
                                         "faster is not measured here"})
        if i + 1 < len(sizes):
            for a in names:
                here, nxt = runs[a][i], runs[a][i + 1]
                if _overlap(here, nxt) or np.median(here) >= np.median(nxt):
                    found.append({"n": n, "names": (a,), "kind": "growth",
                                  "why": f"{a}'s range at {n} ({min(here):.3g}..{max(here):.3g}) "
                                         f"reaches its range at {sizes[i + 1]} "
                                         f"({min(nxt):.3g}..{max(nxt):.3g}), though the work "
                                         "grows: overhead and noise, not speed"})
    return found


def describe_unresolved(sizes, runs: dict, width: int = 96) -> list[str]:
    """`unresolved` as lines of at most `width` characters, one paragraph per size: the
    groups of versions whose ranges overlap (chained: a overlaps b, b overlaps c), then the
    versions whose rise to the next size is not resolved, e.g.
    "N = 512: order not resolved among a, b; rise to N = 1,024 not resolved: b"."""
    import textwrap
    sizes = list(sizes)
    names = list(runs)
    found = unresolved(sizes, runs)
    lines = []
    for i, n in enumerate(sizes):
        group = {name: {name} for name in names}              # chained overlaps, merged
        for f in found:
            if f["n"] == n and f["kind"] == "versions":
                a, b = f["names"]
                merged = group[a] | group[b]
                for name in merged:
                    group[name] = merged
        groups, seen = [], set()
        for name in names:
            if len(group[name]) > 1 and name not in seen:
                seen |= group[name]
                groups.append([x for x in names if x in group[name]])
        grow = [f["names"][0] for f in found if f["n"] == n and f["kind"] == "growth"]
        parts = []
        if groups == [names]:
            parts.append(f"order not resolved among all {len(names)} versions")
        elif groups:
            parts.append("order not resolved among " + "; among ".join(", ".join(g)
                                                                        for g in groups))
        if grow:
            parts.append(f"rise to N = {sizes[i + 1]:,} not resolved: " + ", ".join(grow))
        if parts:
            lines += textwrap.wrap(f"N = {n:,}: " + "; ".join(parts), width=width,
                                   subsequent_indent="    ")
    return lines


def tflops(flops: float, ms: float) -> float:
    """TFLOP/s of `flops` floating-point operations done in `ms` milliseconds."""
    return flops / (ms * 1e-3) / 1e12


def rel_err(x, ref) -> float:
    """||x - ref|| / ||ref|| (Frobenius, in float64); ||x|| when ref is all zeros."""
    x = np.asarray(x, np.float64)
    ref = np.asarray(ref, np.float64)
    n = np.linalg.norm(ref)
    return float(np.linalg.norm(x - ref) / n) if n > 0 else float(np.linalg.norm(x))
