"""Benchmark flashcourse.cpu.forward against dense numpy attention (BLAS), on the CPU.

    python benchmarks/cpu_forward.py            # N in 1024 2048 4096 8192, d = 64
    python benchmarks/cpu_forward.py --quick    # N in 1024 4096, fewer repeats
    python benchmarks/cpu_forward.py --sweep    # also try tile sizes (Br, Bc) at N = 4096
    python benchmarks/cpu_forward.py --big      # only N = 65536: time and peak memory

Method: one head, float32, d = 64, random normal inputs. Every variant is validated
against the float64 reference (its last 256 rows) before it is timed. Each
variant is called once to compile and warm up; then the variants run interleaved,
`--repeats` times (dense, fast, fast causal, rows, loops, dense, ...), so that load
from other processes on a shared machine hits them alike; we report the median time,
the minimum, the median of the per-round ratios variant / dense (the number the
course's speed bar is about: fast at most 1.5x at N = 4096; stretch 1.0x) and the
ratio of the minima (the least disturbed runs), plus the load average. Before every
timed call the script pauses 0.2 s, so that the worker threads of the previous
call (OpenBLAS and OpenMP spin for a while after returning) are asleep again.
GFLOP/s counts the forward's matrix products, 4 Tq Tk d floating-point operations
(half of that when causal), as the papers do.

Dense numpy attention (`flashcourse.cpu.dense_numpy`) is: S = (Q K^T) * scale,
P = exp(S - rowmax(S)), O = (P V) / rowsum(P), in place where possible, with two
BLAS matrix products (OpenBLAS threads) and numpy's vectorised exp. It is not
masked, so the causal rows compare a causal kernel (half the work) with the
non-causal dense baseline: read them as "what skipping hidden tiles buys".

OpenBLAS: on some processors this workplace sets OPENBLAS_CORETYPE (and
OPENBLAS_L2_SIZE) to pin OpenBLAS to an older, slower kernel. That would make dense
numpy look slower than it is, so for a fair comparison run the benchmark with both
unset (`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/cpu_forward.py`).
The script records both variables and the kernel OpenBLAS actually chose in the JSON.

Output: one file per run, written when the run is done, never merged with an earlier
file: benchmarks/out/cpu_forward_<machine>.json, where <machine> names the machine it
ran on (`machine_name`: the CPU as Numba names it and the cores this process may use,
e.g. "znver3_2core", plus "_<n>thread" with --threads n); --big writes
cpu_forward_<machine>_big.json. --tag NAME replaces <machine> (a name, not a path: no
'/', '\\' or '..'), --out DIR writes elsewhere (never inside benchmarks/results/).
--record replaces that machine's file in benchmarks/results/ whole, and only from the
full run: the default sizes and at least the default repeats (no --quick, --n, --tag,
--no-save; --big at N = 65536).
The older recorded files cpu_forward_2core.json and cpu_forward_2core_1thread.json
(which notebook 05 reads) were named by core count alone; no run writes them again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone

import numpy as np

import flashcourse  # noqa: F401  (sets NUMBA_CACHE_DIR before numba loads)
import numba
from threadpoolctl import threadpool_limits

from flashcourse import cpu, env, reference, results
from flashcourse.memory import format_bytes
from flashcourse.timing import rel_err

D = 64
#: The full run (the one --record needs): sequence lengths, repeats, and N of --big.
NS = (1024, 2048, 4096, 8192)
REPEATS = 9
QUICK_NS, QUICK_REPEATS = (1024, 4096), 3
BIG_N = 65536


# ---------------------------------------------------------------------------
# the environment
# ---------------------------------------------------------------------------

_blas_limit = []


def set_threads(n: int) -> None:
    """Use n threads in both Numba's prange and the BLAS numpy links (threadpoolctl)."""
    numba.set_num_threads(n)
    _blas_limit.append(threadpool_limits(limits=n, user_api="blas"))   # kept until exit


def machine_info() -> dict:
    """The environment record (flashcourse.env.record) plus what this benchmark varies."""
    rec = env.record()
    return {
        "cpu": rec["cpu"]["name"], "cpu_features": rec["cpu"]["features"],
        "logical_cpus": rec["cpu"]["count"], "cpus_allowed": rec["cpu"]["allowed"],
        "python": rec["python"], "numpy": rec["numpy"], "numba": rec["numba"],
        "numba_threads": numba.get_num_threads(),
        "numba_threading_layer": _threading_layer(),
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                               "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                               "NUMBA_NUM_THREADS")},
        "blas": rec["blas"],
        "load_average_at_start": os.getloadavg(),
    }


def machine_name(info: dict, threads: int | None = None) -> str:
    """The name of the machine a run was made on, for its file name: the CPU as Numba
    names it (e.g. "znver3", "skylake-avx512") and the CPUs this process may use, from
    `machine_info`, plus "_<n>thread" when the run was limited to n threads."""
    cpu = re.sub(r"[^a-z0-9]+", "-", str(info.get("cpu") or "").lower()).strip("-")
    cores = info.get("cpus_allowed") or info.get("logical_cpus")
    name = f"{cpu or 'unknown-cpu'}_{cores}core"
    return name + (f"_{threads}thread" if threads else "")


def record_conflicts(args) -> dict:
    """{option: reason} for each option set that makes this run other than the full
    one --record needs (flashcourse.results.check_outputs refuses them)."""
    out = {}
    if args.quick:
        out["--quick"] = "a recorded run times every default N with every repeat"
    if args.n is not None and tuple(args.n) != NS:
        out["--n"] = f"a recorded run times N in {' '.join(map(str, NS))}"
    if args.repeats is not None and args.repeats < REPEATS:
        out["--repeats"] = f"a recorded run repeats at least {REPEATS} times"
    if args.big and args.big_n != BIG_N:
        out["--big-n"] = f"a recorded --big run is at N = {BIG_N}"
    if args.tag is not None:
        out["--tag"] = "a recorded file is named by the machine it ran on"
    if args.no_save:
        out["--no-save"] = "nothing would be recorded"
    return out


def _threading_layer():
    try:
        return numba.threading_layer()
    except ValueError:                       # no parallel function has run yet
        return None


# ---------------------------------------------------------------------------
# the contenders
# ---------------------------------------------------------------------------

def flops(n, causal):
    f = 4.0 * n * n * D
    return f / 2 if causal else f


def inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, D), dtype=np.float32) for _ in range(3)]


def validate(name, fn, q, k, v, causal):
    """Relative error of the last <= 256 rows against the float64 reference.

    Causal masks are bottom-right aligned, so the last rows of q against all of k
    give exactly the same mask as in the full problem (and see the most keys).
    """
    rows = min(256, q.shape[0])
    o = fn()
    o_ref, _ = reference.attention(q[-rows:], k, v, causal=causal)
    err = rel_err(o[-rows:], o_ref)
    if not err <= 1e-5:
        raise SystemExit(f"{name}: relative error {err:.3g} > 1e-5; not timing a wrong kernel")
    return err


#: Pause before every timed call, seconds. After a call returns, OpenBLAS's and
#: OpenMP's worker threads keep spinning for a while, waiting for more work; on a
#: 2-core machine they steal the cores from whatever runs next (measured: the kernel
#: timed right after dense numpy was ~1.8x slower than the same kernel timed later).
COOL_DOWN_S = 0.2


def time_interleaved(variants: dict, repeats: int) -> dict:
    """Run each callable once (warm-up), then all of them in turn, `repeats` rounds,
    each timed call after a COOL_DOWN_S pause."""
    for fn in variants.values():
        fn()
    times = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            time.sleep(COOL_DOWN_S)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def bench_n(n, repeats, loops_max_n, block_q, block_k):
    q, k, v = inputs(n)
    variants = {
        "dense_numpy": lambda: cpu.dense_numpy(q, k, v),
        "cpu_fast": lambda: cpu.forward(q, k, v, block_q=block_q, block_k=block_k)[0],
        "cpu_fast_causal": lambda: cpu.forward(q, k, v, block_q=block_q, block_k=block_k,
                                               causal=True)[0],
    }
    variants["cpu_rows"] = lambda: cpu.forward_rows(q, k, v)[0]
    if n <= loops_max_n:
        variants["cpu_loops"] = lambda: cpu.forward_loops(q, k, v)[0]
    errors = {name: validate(name, fn, q, k, v, name.endswith("causal"))
              for name, fn in variants.items()}
    times = time_interleaved(variants, repeats)
    dense_t = np.array(times["dense_numpy"])
    row = {"N": n, "d": D, "heads": 1, "dtype": "float32", "repeats": repeats,
           "dense_score_matrix_bytes": n * n * 4, "results": {}}
    for name, ts in times.items():
        ts = np.array(ts)
        causal = name.endswith("causal")
        row["results"][name] = {
            "median_ms": float(np.median(ts) * 1e3), "min_ms": float(ts.min() * 1e3),
            "all_ms": [round(t * 1e3, 3) for t in ts],
            "gflops": float(flops(n, causal) / np.median(ts) / 1e9),
            "ratio_to_dense_median": float(np.median(ts / dense_t)),
            "ratio_to_dense_of_minima": float(ts.min() / dense_t.min()),
            "rel_err_vs_reference": errors[name],
        }
    return row


def print_row(row):
    n = row["N"]
    for name, r in row["results"].items():
        print(f"N={n:6d}  {name:16s} {r['median_ms']:9.1f} ms (min {r['min_ms']:8.1f})"
              f"  {r['gflops']:6.1f} GFLOP/s  x{r['ratio_to_dense_median']:.2f} of dense"
              f" (minima: x{r['ratio_to_dense_of_minima']:.2f})"
              f"  err {r['rel_err_vs_reference']:.1e}", flush=True)


def sweep(repeats):
    """Time tile shapes (Br, Bc) at N = 4096 against dense, interleaved."""
    n = 4096
    q, k, v = inputs(n)
    shapes = [(64, 128), (64, 256), (128, 64), (128, 128), (128, 256), (256, 64),
              (256, 128), (256, 256), (512, 64), (512, 128)]
    variants = {"dense_numpy": lambda: cpu.dense_numpy(q, k, v)}
    for bq, bk in shapes:
        variants[f"{bq}x{bk}"] = (lambda bq=bq, bk=bk:
                                  cpu.forward(q, k, v, block_q=bq, block_k=bk))
    times = time_interleaved(variants, repeats)
    dense_t = np.array(times["dense_numpy"])
    out = {}
    for name, ts in times.items():
        ts = np.array(ts)
        out[name] = {"median_ms": float(np.median(ts) * 1e3),
                     "ratio_to_dense_median": float(np.median(ts / dense_t))}
        print(f"sweep N=4096 {name:12s} {out[name]['median_ms']:8.1f} ms  "
              f"x{out[name]['ratio_to_dense_median']:.2f} of dense", flush=True)
    return out


# ---------------------------------------------------------------------------
# N = 65536: time and peak memory, in a fresh process
# ---------------------------------------------------------------------------

def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def big_child(n):
    """Runs in a subprocess: prints one JSON line with time and memory of one call."""
    import tracemalloc
    q, k, v = inputs(256)
    cpu.forward(q, k, v)                                   # compile / load from cache
    q, k, v = inputs(n)
    rss_before = _rss_bytes()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    t0 = time.perf_counter()
    o, lse = cpu.forward(q, k, v)
    seconds = time.perf_counter() - t0
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # spot check: 64 rows against the float64 reference
    o_ref, lse_ref = reference.attention(q[-64:], k, v)
    err = rel_err(o[-64:], o_ref)
    print(json.dumps({
        "N": n, "d": D, "heads": 1, "dtype": "float32", "causal": False,
        "seconds": seconds, "gflops": flops(n, False) / seconds / 1e9,
        "rel_err_last_64_rows": err,
        "input_bytes": 3 * q.nbytes, "output_bytes": o.nbytes + lse.nbytes,
        "rss_before_call_bytes": rss_before, "peak_rss_before_call_bytes": peak_before,
        "peak_rss_bytes": peak,
        "numpy_allocations_peak_during_call_bytes": traced_peak,
        "dense_score_matrix_bytes": n * n * 4,
    }))


def big(n):
    out = subprocess.run([sys.executable, __file__, "--_big-child", str(n)],
                         capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"N={n}: {res['seconds']:.1f} s, {res['gflops']:.1f} GFLOP/s, "
          f"rel err {res['rel_err_last_64_rows']:.1e}\n"
          f"  peak RSS of the process {format_bytes(res['peak_rss_bytes'])}"
          f" (before the call: {format_bytes(res['peak_rss_before_call_bytes'])}, of which"
          f" Python + numpy + Numba + LLVM are most)\n"
          f"  inputs {format_bytes(res['input_bytes'])}, numpy allocations during the call"
          f" {format_bytes(res['numpy_allocations_peak_during_call_bytes'])}\n"
          f"  one dense fp32 score matrix would be {format_bytes(res['dense_score_matrix_bytes'])}")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"N in {' '.join(map(str, QUICK_NS))}, {QUICK_REPEATS} repeats")
    ap.add_argument("--sweep", action="store_true", help="also sweep tile sizes at N=4096")
    ap.add_argument("--big", action="store_true", help="only N = 65536 (time, peak RSS)")
    ap.add_argument("--big-n", type=int, default=BIG_N, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, nargs="+", help="sequence lengths to time")
    ap.add_argument("--repeats", type=int, default=None,
                    help=f"timed rounds (default {REPEATS}; --quick: {QUICK_REPEATS})")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both Numba and OpenBLAS (default: all cores)")
    ap.add_argument("--tag", default=None,
                    help="results file suffix instead of the machine's name (a name: no '/', "
                         "'\\' or '..'; not with --record)")
    ap.add_argument("--no-save", action="store_true")
    results.add_output_arguments(ap, gpu=False)
    ap.add_argument("--_big-child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._big_child:
        big_child(args._big_child)
        return
    results.check_outputs(args, __file__, gpu=False, conflicts=record_conflicts(args),
                          names={"--tag": args.tag})
    if os.environ.get("OPENBLAS_CORETYPE"):
        print("note: OPENBLAS_CORETYPE is set; dense numpy may run an older kernel. For a fair"
              " comparison: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python "
              "benchmarks/cpu_forward.py", file=sys.stderr)
    if args.threads:
        set_threads(args.threads)
    info = machine_info()
    name = args.tag or machine_name(info, args.threads)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if args.big:                            # a run of its own: a file of its own
        name += "_big"
        record = {"big": {"date": stamp, "machine": info, **big(args.big_n)}}
    else:
        ns = args.n or (QUICK_NS if args.quick else NS)
        repeats = args.repeats or (QUICK_REPEATS if args.quick else REPEATS)
        rows = []
        for n in ns:
            row = bench_n(n, repeats, loops_max_n=4096, block_q=cpu.DEFAULT_BLOCK_Q,
                          block_k=cpu.DEFAULT_BLOCK_K)
            print_row(row)
            rows.append(row)
        info["numba_threading_layer"] = _threading_layer()
        record = dict(date=stamp, machine=info, method=__doc__.split("\n\n")[2],
                      cool_down_s=COOL_DOWN_S,
                      block_q=cpu.DEFAULT_BLOCK_Q, block_k=cpu.DEFAULT_BLOCK_K, rows=rows)
        record["load_average_at_end"] = os.getloadavg()
        if args.sweep:
            record["sweep_N4096"] = sweep(repeats)
    if args.no_save:
        return
    text = json.dumps(results.validate(record, "cpu_forward"), indent=1) + "\n"
    out = results.output_dir(args)              # --record: a staging folder
    path = results.write_output(out, f"cpu_forward_{name}.json", text)
    print(f"wrote {path}")
    results.finish(args, out)                   # --record: into benchmarks/results/


if __name__ == "__main__":
    main()
