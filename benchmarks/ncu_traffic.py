"""Measure the bytes attention really moves, with Nsight Compute, and set them beside the model.

    python benchmarks/ncu_traffic.py --record      # GPU + ncu: replaces the recorded study
    python benchmarks/ncu_traffic.py --configs flash-N4096-q64k64 --out /tmp/x

For each cache mode it runs, once,

    ncu --clock-control none [--cache-control none] --print-units base --csv
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,
                  gpu__time_duration.sum
        python benchmarks/ncu_target.py --configs A,B,C,...

    dram__bytes_read/write.sum   bytes between the GPU's DRAM (HBM) and its L2 cache
    lts__t_bytes.sum             bytes through the L2 cache (requests from the SMs and more)
    gpu__time_duration.sum       kernel time (ns)

--cache-control all (ncu's default) flushes the caches before every profiled kernel
(each kernel starts cold); none leaves them as the previous kernel left them (a
later kernel can find S, P or K, V still in L2). --clock-control none leaves the
GPU's clocks alone. The target brackets each configuration with marker kernels;
the kernels in a bracket are summed (a dense path is several kernels).

Each configuration is joined with the two-level IO model (`flashcourse.traffic`,
fp32: dense_traffic with 4-byte scores, tiled_traffic with the kernel's Br, Bc; the
model counts bytes between "outer memory" and the chip) and with the three-level
estimate `flashcourse.measured_traffic.l2_aware_dram_bytes`. Ratios measured/model and a
reason for every ratio outside [0.8, 1.25] go into the results.

Writes to benchmarks/out/ (or --out DIR, never inside benchmarks/results/; --record, on a
GPU, replaces the recorded results once something was measured): h200_ncu_traffic.json
(schema flashcourse/schemas/ncu_traffic.json), h200_ncu_traffic.csv (one row per
configuration and cache mode), and the raw ncu CSV of each mode (ncu_raw_flush.csv,
ncu_raw_nocache.csv).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import flashcourse  # noqa: F401  (selects the GPU or the simulator before numba loads)
from flashcourse import env, results
from flashcourse import measured_traffic as mt
from flashcourse.limits import current_limits

HERE = Path(__file__).resolve().parent

MODES = {"all": "flush", "none": "nocache"}   # --cache-control value -> file tag


def find_ncu() -> str | None:
    """The ncu executable: on PATH, else in the usual install folders."""
    import glob
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
                    "/usr/local/cuda-*/bin/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


NCU = None


def _ncu_has(flag: str) -> bool:
    """Whether this ncu's --help lists `flag` (older versions lack some)."""
    try:
        return flag in subprocess.run([NCU, "--help"], capture_output=True, text=True,
                                      timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):  # ncu did not answer: use the plain flags
        return False


def run_ncu(names, cache_control, workdir, tuned_json=None, timeout=400, part=0):
    """Run ncu once over the target; return (csv text, manifest list, seconds).
    A run that outlasts `timeout` is killed and returns what it wrote (often nothing)."""
    tag = MODES[cache_control]
    log = Path(workdir) / f"ncu_raw_{tag}_{part}.csv"
    manifest = Path(workdir) / f"manifest_{tag}_{part}.json"
    units = ["--print-units", "base"] if _ncu_has("--print-units") else []
    cmd = [NCU, "--clock-control", "none", "--cache-control", cache_control,
           "--metrics", ",".join(mt.NCU_METRICS), "--csv", *units,
           "--log-file", str(log), sys.executable, str(HERE / "ncu_target.py"),
           "--configs", ",".join(names), "--manifest", str(manifest)]
    if tuned_json:
        cmd += ["--tuned-json", str(tuned_json)]
    print(" ".join(cmd), flush=True)
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1),
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
        sys.stderr.write(proc.stderr[-3000:])
        if proc.returncode != 0:
            print(f"ncu exited with {proc.returncode}", flush=True)
        stdout = proc.stdout
    except subprocess.TimeoutExpired as exc:
        print(f"ncu run killed after {timeout:.0f} s (time budget)", flush=True)
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    secs = time.time() - t0
    text = log.read_text() if log.exists() else stdout
    man = json.loads(manifest.read_text()) if manifest.exists() else []
    return text, man, secs


def tile_from_names(names):
    """(Br, Bc) from a kernel name such as 'fmha_cutlassF_f32_aligned_64x64_rf_sm80', or None."""
    import re
    for name in names:
        hit = re.search(r"_(\d+)x(\d+)_", name)
        if hit and "fmha" in name:
            return int(hit.group(1)), int(hit.group(2))
    return None


def join(kernels, manifest, cache_control, l2_bytes, limits):
    """One result row per configuration: measured sums + model + ratios + reasons."""
    groups = mt.split_by_marker(kernels)
    bracketed = [m for m in manifest if m.get("bracketed")]
    runs = []
    for i, m in enumerate(bracketed):
        ks = groups[i] if i < len(groups) else []
        meas = mt.sum_metrics(ks)
        if m["impl"] == "torch-efficient":
            tile = tile_from_names([k["kernel"] for k in ks])
            if tile:                      # PyTorch names its tile: ..._64x64_...
                m = {**m, "block_q": tile[0], "block_k": tile[1]}
        model = mt.model_bytes(m["impl"], m["seq_len"], m["head_dim"], m["heads"],
                              block_q=m.get("block_q"), block_k=m.get("block_k"))
        run = {"name": m["name"], "impl": m["impl"], "seq_len": m["seq_len"],
               "head_dim": m["head_dim"], "heads": m["heads"],
               "block_q": m.get("block_q"), "block_k": m.get("block_k"),
               "threads": m.get("threads"), "tm": m.get("tm"), "unroll": m.get("unroll"),
               "cache_control": cache_control, "status": m.get("status"),
               "error": m.get("error", ""),
               "kernels": [k["kernel"][:120] for k in ks], "n_kernels": len(ks),
               "dram_read": meas["dram_read"], "dram_write": meas["dram_write"],
               "dram_bytes": meas["dram_bytes"], "l2_bytes": meas["l2_bytes"],
               "time_ms": meas["time_ms"], "model_bytes": model,
               "kv_bytes": mt.kv_bytes(m["seq_len"], m["head_dim"], m["heads"]),
               "l2_capacity": l2_bytes}
        run["dram_ratio"] = run["dram_bytes"] / model if model and ks else None
        run["l2_ratio"] = run["l2_bytes"] / model if model and ks else None
        run["l2_aware_dram_bytes"] = None
        if m["impl"] == "flash":
            try:
                regs = m.get("regs_per_thread")       # recorded by the target when compiled
                est = mt.l2_aware_dram_bytes(
                    m["seq_len"], m["head_dim"], m["heads"], m["block_q"], m["block_k"],
                    m["threads"], m["tm"], limits, regs_per_thread=regs)
                run.update(l2_aware_dram_bytes=est["bytes"], regs_per_thread=regs,
                           resident_blocks=est["resident_blocks"],
                           waves_per_head=est["waves_per_head"], kv_fits=est["kv_fits"])
                run["l2_aware_ratio"] = (run["dram_bytes"] / est["bytes"]) if ks else None
            except ValueError as exc:     # e.g. a LaunchError: recorded, the run is kept
                run["error"] += f" l2-aware model: {type(exc).__name__}: {exc}"
        run["dram_reason"] = mt.explain_ratio(run, l2_bytes, level="dram")
        run["l2_reason"] = mt.explain_ratio(run, l2_bytes, level="l2")
        runs.append(run)
    if len(groups) != len(bracketed):
        print(f"warning: {len(groups)} bracketed kernel groups, {len(bracketed)} configurations",
              flush=True)
    return runs


CSV_COLUMNS = ["name", "impl", "seq_len", "head_dim", "heads", "block_q", "block_k",
               "threads", "tm", "cache_control", "n_kernels", "dram_bytes", "l2_bytes",
               "time_ms", "model_bytes", "l2_aware_dram_bytes", "dram_ratio", "l2_ratio",
               "l2_aware_ratio", "kv_bytes", "resident_blocks", "waves_per_head",
               "status", "dram_reason", "l2_reason"]


def write_outputs(out, raw: dict, doc: dict) -> None:
    """ncu's raw CSV of each mode in `raw`, the study `doc` (JSON, validated) and its runs
    as CSV, into the folder `out`, each through flashcourse.results.write_output."""
    for mode, text in raw.items():
        results.write_output(out, f"ncu_raw_{MODES[mode]}.csv", text)
    results.write_json(out, "h200_ncu_traffic.json", doc, "ncu_traffic")
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in doc["runs"]:
        w.writerow(r)
    results.write_output(out, "h200_ncu_traffic.csv", table.getvalue())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="", help="comma-separated names; default: all")
    ap.add_argument("--modes", nargs="+", default=["all", "none"], choices=list(MODES))
    ap.add_argument("--tuned-json", default=None)
    ap.add_argument("--timeout", type=int, default=400, help="seconds per ncu process")
    ap.add_argument("--deadline-s", type=float, default=1e9,
                    help="total seconds for all ncu processes (later ones get what is left)")
    args = results.parse_gpu_arguments(ap, argv, __file__)
    out = results.output_dir(args)
    global NCU
    NCU = find_ncu()
    if NCU is None:
        raise SystemExit("ncu (Nsight Compute) not found: nothing measured")
    import importlib.util
    spec = importlib.util.spec_from_file_location("ncu_target", HERE / "ncu_target.py")
    ncu_target = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ncu_target)
    configs = ncu_target.add_tuned(dict(ncu_target.CONFIGS), None)
    names = [n for n in args.configs.split(",") if n] or list(configs)
    if args.tuned_json and not args.configs and ncu_target.tuned_best(args.tuned_json):
        names.append("flash-N4096-tuned")
    try:
        import torch  # noqa: F401
    except ImportError:
        names = [n for n in names if not n.startswith("torch")]
        print("torch not importable: PyTorch SDPA paths left out", flush=True)
    environment = env.record()
    environment["ncu"] = subprocess.run([NCU, "--version"], capture_output=True, text=True,
                                        timeout=60).stdout.strip().splitlines()[-1]
    limits = current_limits()
    # two parts, so that the long single-head runs cannot cost the rest if time runs out
    long_names = [n for n in names if "-h1-" in n]
    parts = [p for p in ([n for n in names if n not in long_names], long_names) if p]
    runs, failed, raw_seconds, raw = [], [], {}, {m: "" for m in args.modes}
    end = time.time() + args.deadline_s
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:                 # the flushed mode first, all of it
            for i, part in enumerate(parts):
                left = end - time.time()
                if left < 20:
                    print(f"skipped part {i} ({mode}): time budget spent", flush=True)
                    continue
                text, man, secs = run_ncu(part, mode, tmp, args.tuned_json,
                                          min(args.timeout, left), part=i)
                raw_seconds[f"{mode}_{i}"] = round(secs, 1)
                raw[mode] += text + "\n"
                kernels = mt.parse_ncu_csv(text)
                print(f"cache-control {mode}, part {i}: {len(kernels)} kernels profiled in "
                      f"{secs:.0f} s", flush=True)
                runs += join(kernels, man, mode, limits.l2_bytes, limits)
                failed += [{**m, "cache_control": mode} for m in man if not m.get("bracketed")]
                if len(man) < len(part):
                    done = {m["name"] for m in man}
                    failed += [{"name": n, "cache_control": mode, "status": "not run",
                                "error": "the target did not finish (killed or crashed)"}
                               for n in part if n not in done]
    doc = {"schema": results.TRAFFIC_SCHEMA, "environment": environment, "limits": limits.to_dict(),
           "metrics": list(mt.NCU_METRICS),
           "ncu_flags": "--clock-control none --print-units base --csv; "
                        "--cache-control all (flush) and none",
           "dtype": "float32", "ncu_seconds": raw_seconds, "runs": runs, "failed": failed}
    write_outputs(out, raw, doc)
    for f_ in failed:
        print(f"not measured: {f_['name']} ({f_['cache_control']}): {f_.get('error', '')}")
    results.finish(args, out, ok=bool(runs))    # --record: only when something was measured
    print(f"\n{'name':28s} {'cache':5s} {'DRAM MiB':>10s} {'L2 MiB':>10s} {'model MiB':>10s} "
          f"{'DRAM/mod':>8s} {'L2/mod':>7s} {'ms':>8s}")
    for r in runs:
        f = lambda x: f"{x / 2**20:10.1f}" if x is not None else f"{'-':>10s}"
        g = lambda x: f"{x:8.3f}" if x is not None else f"{'-':>8s}"
        print(f"{r['name']:28s} {r['cache_control']:5s} {f(r['dram_bytes'])} "
              f"{f(r['l2_bytes'])} {f(r['model_bytes'])} {g(r['dram_ratio'])} "
              f"{g(r['l2_ratio'])} {r['time_ms']:8.3f}")


if __name__ == "__main__":
    main()
