"""Check and benchmark the tensor-core FlashAttention forward (flashcourse.cuda.tensor_core.host).

    python benchmarks/gpu_tensor_core.py --check --variants --bench [--record]
    compute-sanitizer --tool memcheck --report-api-errors no \\
        python3 benchmarks/gpu_tensor_core.py --sanitize-small
    compute-sanitizer --tool racecheck python3 benchmarks/gpu_tensor_core.py --sanitize-small
    python benchmarks/gpu_tensor_core.py --simulator-smoke        # no GPU needed

--check      the mma intrinsics against their numpy models (flashcourse.cuda.ptx.mma), then
             the kernels against the float64 reference on random ragged shapes (Tq != Tk,
             causal, d in {5, 32, 48, 64, 80, 128}), output poisoned with NaN first.
             Tolerances: 3xTF32 rel err of o and lse <= 1e-5 against float64 on the fp32
             inputs; fp16/bf16 rel err of o <= 2e-2 and of lse <= 1e-4 against float64 on
             the inputs rounded to 16 bits (P is rounded to 16 bits inside the kernel).
--variants   GRID's (warps, block_k, m_tiles, prefetch, min_blocks) per precision and d:
             registers, shared memory, time at N = 4096, B x H = 32, non-causal; the
             fastest per (precision, d) is used by --bench and checked by --check.
--async-variants  the same for ASYNC_GRID (version 2, pipeline="async"); with --check
             the winners are checked too.
--pipelines  version 2 of the fp16/bf16 kernel (pipeline="async": cp.async double
             buffering + ldmatrix) checked like --check, then timed beside version 1 at
             PIPELINE_GRID's variants (N = 4096, B x H = 32, non-causal).
--bench      ms and TFLOP/s (4 B H Tq Tk d FLOPs, half when causal) for N in {1024, 4096,
             8192, 16384}, d in {64, 128}, causal off/on, B x H = 32: the tensor-core kernel
             (fp16, bf16, 3xTF32), the course's FFMA flash kernel (fp32) and PyTorch SDPA
             (flash fp16/bf16, cuDNN fp16/bf16, efficient fp32, math fp32 with TF32 off).
             Warm-up, CUDA events, medians of repeats; one shared input per point.
--record     on a GPU: write benchmarks/results/h200_tensor_core.json (+ .png, + _log.txt)
             once the run has passed its checks (it writes into a staging folder
             benchmarks/out/record-*/ as it goes); without it results go to --out
             (default: benchmarks/out/, untracked; never inside benchmarks/results/).
Refuses to run without a GPU (except --simulator-smoke, which records nothing), so
recorded results are never overwritten from a CPU-only machine.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse import env, reference, results
from flashcourse.cuda.cuda_core import flash
from flashcourse.cuda.ptx import mma
from flashcourse.cuda.tensor_core import host as tc
from flashcourse.timing import (SlowSkip, benchmark_flops, measure_variant, rel_err,
                                row_summary, time_cuda, variant_summary)

NS = (1024, 4096, 8192, 16384)
DS = (64, 128)
BH = 32
MAX_EST_S = 1.5
TOL = {"3xtf32": (1e-5, 1e-5), "fp16": (2e-2, 1e-4), "bf16": (2e-2, 1e-4)}
ROUND = {"fp16": mma.round_fp16, "bf16": mma.round_bf16}

_log_lines: list[str] = []


def log(*a):
    line = " ".join(str(x) for x in a)
    _log_lines.append(line)
    print(line, flush=True)


def flops(tq, tk, d, causal, bh=BH):
    return benchmark_flops(tq, tk, d, causal, bh)


# ----------------------------------------------------------------------------- intrinsics
def check_intrinsics(rng, results) -> bool:
    """Each intrinsic on one warp vs the numpy model (bit-exact where the model is exact)."""
    ins = mma.intrinsics()
    rows = []
    ok_all = True

    def make16(f):
        @cuda.jit
        def k16(a, b, c, d):
            ln = cuda.threadIdx.x
            x = f(a[ln, 0], a[ln, 1], a[ln, 2], a[ln, 3], b[ln, 0], b[ln, 1],
                  c[ln, 0], c[ln, 1], c[ln, 2], c[ln, 3])
            for i in range(4):
                d[ln, i] = x[i]
        return k16

    def make_pack(pack):
        @cuda.jit
        def kpack(x, w):
            i = cuda.grid(1)
            if i < w.shape[0]:
                w[i] = pack(x[i, 0], x[i, 1])
        return kpack

    for prec in ("fp16", "bf16"):
        k16 = make16(ins[f"mma_{prec}"])
        kpack = make_pack(ins[f"pack_{prec}"])
        A = rng.standard_normal((16, 16)).astype(np.float32)
        B = rng.standard_normal((16, 8)).astype(np.float32)
        C = rng.standard_normal((16, 8)).astype(np.float32)
        af = mma.to_fragments(ROUND[prec](A), "a_m16n8k16")             # (32, 8)
        bf = mma.to_fragments(ROUND[prec](B), "b_m16n8k16")             # (32, 4)
        aw = mma.pack_pair_model(af[:, 0::2], af[:, 1::2], prec)         # (32, 4) words
        bw = mma.pack_pair_model(bf[:, 0::2], bf[:, 1::2], prec)         # (32, 2)
        cf = mma.to_fragments(C, "c_m16n8")
        d = cuda.device_array((32, 4), np.float32)
        k16[1, 32](cuda.to_device(aw), cuda.to_device(bw), cuda.to_device(cf), d)
        got = mma.from_fragments(d.copy_to_host(), "c_m16n8")
        want = mma.matmul_model(A, B, prec) + C
        e = rel_err(got, want)
        rows.append({"what": f"mma m16n8k16 {prec}", "rel_err": e, "ok": e < 1e-6})
        x = rng.standard_normal((1000, 2)).astype(np.float32) * 100
        w = cuda.device_array(1000, np.uint32)
        kpack[8, 128](cuda.to_device(x), w)
        same = bool(np.array_equal(w.copy_to_host(), mma.pack_pair_model(x[:, 0], x[:, 1], prec)))
        rows.append({"what": f"pack {prec}x2 (lo in bits 0-15)", "bit_exact": same, "ok": same})

    t32, mtf, asf = ins["to_tf32"], ins["mma_tf32"], ins["as_f32"]

    @cuda.jit
    def ktf(a, b, c, d):
        ln = cuda.threadIdx.x
        x = mtf(t32(a[ln, 0]), t32(a[ln, 1]), t32(a[ln, 2]), t32(a[ln, 3]),
                t32(b[ln, 0]), t32(b[ln, 1]), c[ln, 0], c[ln, 1], c[ln, 2], c[ln, 3])
        for i in range(4):
            d[ln, i] = x[i]

    rnd, trn = ins["tf32_round"], ins["tf32_trunc"]

    @cuda.jit
    def kcvt(x, w, w2, r):
        # big by cvt.rna.tf32 (w) and by the kernels' bit rounding (w2); small truncated
        i = cuda.grid(1)
        if i < x.shape[0]:
            w[i] = t32(x[i])
            big = rnd(x[i])
            w2[i] = big
            r[i] = asf(trn(x[i] - asf(big)))

    A = rng.standard_normal((16, 8)).astype(np.float32)
    B = rng.standard_normal((8, 8)).astype(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    d = cuda.device_array((32, 4), np.float32)
    ktf[1, 32](cuda.to_device(mma.to_fragments(A, "a_m16n8k8")),
               cuda.to_device(mma.to_fragments(B, "b_m16n8k8")),
               cuda.to_device(mma.to_fragments(C, "c_m16n8")), d)
    e = rel_err(mma.from_fragments(d.copy_to_host(), "c_m16n8"), mma.matmul_model(A, B, "tf32") + C)
    rows.append({"what": "mma m16n8k8 tf32", "rel_err": e, "ok": e < 1e-6})
    x = (rng.standard_normal(4096) * 10.0 ** rng.integers(-20, 20, 4096)).astype(np.float32)
    w = cuda.device_array(4096, np.uint32)
    w2 = cuda.device_array(4096, np.uint32)
    r = cuda.device_array(4096, np.float32)
    kcvt[32, 128](cuda.to_device(x), w, w2, r)
    big, small = mma.split_tf32(x)
    same = bool(np.array_equal(w.copy_to_host(), big.view(np.uint32))
                and np.array_equal(w2.copy_to_host(), big.view(np.uint32)))
    same2 = bool(np.array_equal(r.copy_to_host(), small))
    rows.append({"what": "cvt.rna.tf32 == tf32_round == split_tf32 big; small",
                 "bit_exact": same and same2, "ok": same and same2})
    for row in rows:
        ok_all &= row["ok"]
        log(f"intrinsic {row['what']:45s} " + ("ok" if row["ok"] else "FAILED") + "  "
            + ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("what", "ok")))
    results["intrinsics"] = rows
    return ok_all


# ----------------------------------------------------------------------------- kernel check
def run_poisoned(q, k, v, causal, precision, knobs=None):
    """Run the kernel on (BH, T, d) float32 inputs with NaN-poisoned outputs."""
    bh, tq, d = q.shape
    tk = k.shape[1]
    D = -(-d // 16) * 16
    qw, kw, vw = (cuda.to_device(tc._to_words(x, precision, D)) for x in (q, k, v))
    poison = np.full(qw.shape, 0xFFFFFFFF, np.uint32) if precision in ROUND else \
        np.full(qw.shape, np.nan, np.float32)
    ow = cuda.to_device(poison)
    lse = cuda.to_device(np.full((bh, tq), np.nan, np.float32))
    cfg = tc.run(qw, kw, vw, ow, lse, tq, tk, d, 1.0 / np.sqrt(d), causal, precision,
                 **(knobs or {}))
    cuda.synchronize()
    return tc._from_words(ow.copy_to_host(), precision, d), lse.copy_to_host(), cfg


def check_kernels(rng, results, configs) -> bool:
    shapes = [(1, 1, 1, 64), (2, 37, 53, 64), (2, 100, 100, 64), (2, 129, 65, 64),
              (1, 257, 300, 64), (1, 64, 1000, 64), (2, 500, 129, 64), (2, 37, 53, 128),
              (1, 257, 300, 128), (2, 129, 65, 128), (1, 1000, 777, 128), (3, 77, 91, 5),
              (1, 190, 190, 48), (2, 300, 17, 80), (1, 33, 70, 32), (1, 1024, 1024, 64),
              (1, 1024, 1024, 128)]
    rows = []
    worst = {}
    for i, (bh, tq, tk, d) in enumerate(shapes):
        for causal in (False, True):
            q = rng.standard_normal((bh, tq, d)).astype(np.float32)
            k = rng.standard_normal((bh, tk, d)).astype(np.float32)
            v = rng.standard_normal((bh, tk, d)).astype(np.float32)
            if i == 3:                                 # extreme values: large scores
                q *= 8.0
            refs = {}
            for precision, knobs in configs:
                if knobs and d not in (64, 128):
                    continue
                key = ROUND.get(precision)
                if precision not in refs:
                    ins = [key(x) for x in (q, k, v)] if key else [q, k, v]
                    refs[precision] = reference.attention(*ins, causal=causal)
                o_ref, lse_ref = refs[precision]
                try:
                    o, lse, cfg = run_poisoned(q, k, v, causal, precision, knobs)
                except ValueError as exc:
                    rows.append({"precision": precision, "knobs": knobs,
                                 "shape": [bh, tq, tk, d], "causal": causal,
                                 "skipped": str(exc)})
                    continue
                fin = np.isfinite(lse_ref)
                ok_empty = bool(np.array_equal(np.isneginf(lse), ~fin)
                                and np.all(o[~fin] == 0))
                e_o = rel_err(o, o_ref) if np.isfinite(o).all() else float("inf")
                e_l = rel_err(lse[fin], lse_ref[fin]) if fin.any() else 0.0
                if np.isnan(lse).any():
                    e_l = float("inf")
                tol_o, tol_l = TOL.get(precision, (1e-2, 1e-2))
                ok = ok_empty and e_o <= tol_o and e_l <= tol_l
                w = worst.setdefault(precision, [0.0, 0.0])
                w[0], w[1] = max(w[0], e_o), max(w[1], e_l)
                rows.append({"precision": precision, "config": knob_dict(cfg),
                             "shape": [bh, tq, tk, d],
                             "causal": causal, "rel_err_o": e_o, "rel_err_lse": e_l,
                             "empty_rows_ok": ok_empty, "ok": ok})
                if not ok:
                    log(f"  CHECK FAILED {precision} {knob_dict(cfg)} "
                        f"{(bh, tq, tk, d)} causal={causal}: o {e_o:.3g} lse {e_l:.3g} "
                        f"empty_ok={ok_empty}")
    runs = [r for r in rows if "ok" in r and r["precision"] in TOL]
    n_ok = sum(r["ok"] for r in runs)
    log(f"kernel check: {n_ok}/{len(runs)} gated runs within tolerance; worst rel err "
        + ", ".join(f"{p}: o {w[0]:.3g} lse {w[1]:.3g}" for p, w in worst.items()))
    results["check"] = {"tolerances": {p: {"o": t[0], "lse": t[1]} for p, t in TOL.items()},
                        "runs": len(runs), "passed": n_ok, "worst": worst, "rows": rows}
    return n_ok == len(runs)


# ----------------------------------------------------------------------------- timing
def time_fn(fn, budget_s=0.3):
    """Median ms of fn() (CUDA events, warm-up first) and the number of timed calls."""
    times = time_cuda(fn, warmup=1, repeats=30, budget_s=budget_s)
    return float(statistics.median(times)), len(times)


def time_torch(fn, budget_s=0.3):
    times = time_cuda(fn, warmup=1, repeats=30, budget_s=budget_s, backend="torch")
    return float(statistics.median(times)), len(times)


class Inputs:
    """One point's inputs on the device, in every form the contenders need."""

    def __init__(self, rng, n, d):
        self.n, self.d = n, d
        self.host = [rng.standard_normal((BH, n, d), dtype=np.float32) for _ in range(3)]
        self.dev = {}

    def words(self, precision):
        if precision not in self.dev:
            D = -(-self.d // 16) * 16
            xs = [cuda.to_device(tc._to_words(x, precision, D)) for x in self.host]
            xs.append(cuda.device_array_like(xs[0]))                    # o
            xs.append(cuda.device_array((BH, self.n), np.float32))      # lse
            self.dev[precision] = xs
        return self.dev[precision]


def knob_dict(cfg) -> dict:
    return {"warps": cfg.warps, "block_k": cfg.block_k, "m_tiles": cfg.m_tiles,
            "prefetch": cfg.prefetch, "min_blocks": cfg.min_blocks}


def knobs_of(t) -> dict:
    """(warps, block_k, m_tiles, prefetch, min_blocks[, pipeline]) -> keywords of tc.run
    (GRID's five-tuples are version 1, "plain"; fp16/bf16 default to version 2)."""
    t = tuple(t) + ("plain",) * (6 - len(t))
    return dict(zip(("warps", "block_k", "m_tiles", "prefetch", "min_blocks", "pipeline"), t))


def tc_runner(inp, precision, causal, knobs=None):
    qw, kw, vw, ow, lse = inp.words(precision)
    n, d = inp.n, inp.d
    return partial(tc.run, qw, kw, vw, ow, lse, n, n, d, 1.0 / np.sqrt(d), causal,
                   precision, **(knobs or {}))


#: (precision, d) -> variants (warps, block_k, m_tiles, prefetch, min_blocks) to time
GRID = {
    ("fp16", 64): [(4, 64, 1, 0, 0), (8, 64, 1, 0, 0), (8, 64, 1, 1, 0), (8, 32, 1, 1, 0),
                   (8, 32, 1, 0, 0), (4, 64, 2, 0, 0), (4, 32, 2, 0, 0), (8, 32, 2, 0, 0),
                   (4, 32, 2, 1, 0), (8, 64, 1, 0, 2), (4, 64, 1, 1, 3), (8, 32, 1, 1, 2)],
    ("fp16", 128): [(8, 64, 1, 0, 0), (8, 128, 1, 0, 0), (4, 64, 1, 0, 0), (8, 32, 1, 1, 0),
                    (8, 64, 1, 1, 0), (4, 32, 2, 0, 0), (8, 32, 1, 0, 0)],
    ("3xtf32", 64): [(8, 32, 1, 0, 0), (8, 32, 1, 1, 0), (8, 16, 1, 1, 0), (4, 32, 1, 1, 0),
                     (8, 32, 1, 0, 2), (8, 64, 1, 0, 0), (16, 16, 1, 1, 0)],
    ("3xtf32", 128): [(8, 32, 1, 0, 0), (8, 16, 1, 0, 0), (8, 16, 1, 1, 0), (8, 32, 1, 1, 0)],
}


def time_tc(inp, precision, causal, knobs):
    """(median ms, timed calls) of the tensor-core kernel with `knobs` on `inp`."""
    return time_fn(tc_runner(inp, precision, causal, knobs))


def time_variant(inp, precision, knobs, **meta):
    """One variant's row: resources (registers, local, shared bytes) and time on `inp`
    (non-causal), beside the keys of `meta` (which may replace "config")."""
    d = inp.d
    return measure_variant(
        {"precision": precision, "config": knobs, "d": d, "n": inp.n, "causal": False, **meta},
        partial(tc.resources, precision, d, **knobs),
        partial(time_tc, inp, precision, False, knobs), flops(inp.n, inp.n, d, False))


def variants(rng, results, grid=None):
    grid = GRID if grid is None else grid
    rows = []
    for d in DS:
        inp = Inputs(rng, 4096, d)
        for (precision, dd), tuples in grid.items():
            if dd != d:
                continue
            for t in tuples:
                row = time_variant(inp, precision, knobs_of(t))
                rows.append(row)
                log(f"variant {precision:7s} d={d} {t}: {variant_summary(row, 7)}")
        del inp
    results.setdefault("variants", []).extend(rows)
    best = {}
    for r in rows:
        if "ms" in r:
            key = f"{r['precision']}_d{r['d']}"
            if key not in best or r["ms"] < best[key]["ms"]:
                best[key] = dict(r["config"], ms=r["ms"])
    results["best_variant"] = best
    log(f"best variants: {best}")
    return best


#: (precision, d) -> variants timed in both pipelines (v1 "plain", v2 "async": cp.async +
#: ldmatrix); the first of each is version 1's default
PIPELINE_GRID = {("fp16", 64): [(8, 32, 1, 1, 2), (8, 64, 1, 0, 0)],
                 ("fp16", 128): [(8, 32, 1, 1, 0), (8, 64, 1, 0, 0)]}


#: version 2's (pipeline="async") tile variants: FA2's own choices (4 warps of 32 rows,
#: Bc = 128 at d = 64, 64 at d = 128) beside the 8-warp ones
ASYNC_GRID = {
    ("fp16", 64): [(8, 32, 1, 0, 2, "async"), (8, 64, 1, 0, 0, "async"),
                   (8, 64, 1, 0, 2, "async"), (8, 128, 1, 0, 0, "async"),
                   (4, 64, 2, 0, 0, "async"), (4, 128, 2, 0, 0, "async"),
                   (8, 64, 2, 0, 0, "async"), (4, 32, 2, 0, 2, "async"),
                   (4, 64, 1, 0, 2, "async"), (8, 32, 2, 0, 0, "async")],
    ("fp16", 128): [(8, 32, 1, 0, 0, "async"), (8, 64, 1, 0, 0, "async"),
                    (8, 128, 1, 0, 0, "async"), (4, 64, 2, 0, 0, "async"),
                    (4, 32, 2, 0, 0, "async"), (8, 64, 2, 0, 0, "async"),
                    (4, 64, 1, 0, 0, "async"), (8, 32, 2, 0, 0, "async"),
                    (4, 128, 1, 0, 0, "async")],
    # 3xTF32 version 2 (tensor_core_kernels_tf32_async: Q, K, V raw fp32 in shared
    # memory, split where read), beside version 1's default (8, 32 | 16, prefetch)
    ("3xtf32", 64): [(8, 32, 1, 1, 0), (8, 32, 1, 0, 0, "async"), (8, 64, 1, 0, 0, "async"),
                     (4, 64, 1, 0, 0, "async"), (4, 32, 1, 0, 0, "async"),
                     (8, 16, 1, 0, 0, "async"), (8, 32, 1, 0, 2, "async")],
    ("3xtf32", 128): [(8, 16, 1, 1, 0), (8, 32, 1, 0, 0, "async"), (4, 32, 1, 0, 0, "async"),
                      (8, 16, 1, 0, 0, "async"), (4, 16, 1, 0, 0, "async"),
                      (4, 64, 1, 0, 0, "async"), (8, 16, 1, 0, 2, "async")],
}


def pipelines(rng, results) -> bool:
    """Version 2 of the fp16/bf16 kernel against version 1: checked on the check shapes
    (into results["pipelines_check"]), then timed at N = 4096 (results["pipelines"])."""
    first = {d: ts[0] for (_, d), ts in PIPELINE_GRID.items()}
    cfgs = [("fp16", dict(knobs_of(first[64]), pipeline="async")),
            ("bf16", dict(knobs_of(first[64]), pipeline="async")),
            ("fp16", dict(knobs_of(first[128]), pipeline="async")),
            ("fp16", None), ("bf16", None)]            # the defaults (version 2 too)
    check = {}
    ok = check_kernels(rng, check, cfgs)
    results["pipelines_check"] = check["check"]
    rows = []
    for (precision, d), tuples in PIPELINE_GRID.items():
        inp = Inputs(rng, 4096, d)
        for t in tuples:
            for pipe in ("plain", "async"):
                row = time_variant(inp, precision, dict(knobs_of(t), pipeline=pipe),
                                   pipeline=pipe)
                rows.append(row)
                log(f"pipeline {pipe:5s} {precision} d={d} {t}: {variant_summary(row, 7)}")
        del inp
    results["pipelines"] = rows
    return ok


CONTENDERS = ("tc_fp16", "tc_bf16", "tc_3xtf32", "flash_fp32", "torch_flash_fp16",
              "torch_flash_bf16", "torch_cudnn_fp16", "torch_cudnn_bf16",
              "torch_efficient_fp32", "torch_math_fp32")


def bench(rng, results, best, ns=NS, ds=DS, out=None):
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        has_torch = True
    except Exception as exc:
        log(f"torch unavailable: {exc!r}")
        has_torch = False
    names = [c for c in CONTENDERS if has_torch or not c.startswith("torch")]
    rows = []
    slow = SlowSkip(MAX_EST_S)                     # keyed by (name, d, causal)
    t0 = time.time()
    for d in ds:
        for causal in (False, True):
            for n in ns:
                inp = Inputs(rng, n, d)
                tt = None
                for name in names:
                    row = slow.row(name, n, d, causal, BH)
                    if "skipped" not in row:
                        try:
                            if name.startswith("tc_"):
                                prec = name[3:]
                                b = {k: v for k, v in best.get(f"{prec}_d{d}", {}).items()
                                     if k != "ms"}
                                row["config"] = b
                                ms, reps = time_fn(tc_runner(inp, prec, causal, b))
                            elif name == "flash_fp32":
                                qf, kf, vf = (cuda.to_device(x) for x in inp.host)
                                o = cuda.device_array_like(qf)
                                lse = cuda.device_array((BH, n), np.float32)
                                ms, reps = time_fn(partial(flash.run, qf, kf, vf, o, lse, n, n,
                                                           d, 1.0 / np.sqrt(d), causal))
                                del qf, kf, vf, o, lse
                            else:
                                if tt is None:
                                    t32 = [torch.as_tensor(x, device="cuda").view(1, BH, n, d)
                                           for x in inp.host]
                                    tt = {"fp32": t32, "fp16": [x.half() for x in t32],
                                          "bf16": [x.bfloat16() for x in t32]}
                                _, kind, dt = name.split("_")
                                backend = {"flash": SDPBackend.FLASH_ATTENTION,
                                           "cudnn": SDPBackend.CUDNN_ATTENTION,
                                           "efficient": SDPBackend.EFFICIENT_ATTENTION,
                                           "math": SDPBackend.MATH}[kind]
                                ins = tt[dt]

                                def run_t(backend=backend, ins=ins, causal=causal, d=d):
                                    with sdpa_kernel(backend):
                                        return F.scaled_dot_product_attention(
                                            *ins, is_causal=causal, scale=1.0 / np.sqrt(d))
                                ms, reps = time_torch(run_t)
                            row.update(ms=ms, tflops=row["flops"] / ms / 1e9, reps=reps)
                            slow.record((name, d, causal), n, ms)
                        except Exception as exc:
                            row["error"] = repr(exc)[:300]
                            if has_torch:
                                torch.cuda.empty_cache()
                    rows.append(row)
                    log(f"{time.time() - t0:6.1f}s d={d} causal={int(causal)} n={n:5d} "
                        f"{name:22s} {row_summary(row)}")
                del inp, tt
                if has_torch:
                    torch.cuda.empty_cache()
                if out is not None:
                    results["bench"] = rows
                    save(results, out)
    results["bench"] = rows
    return rows


def summarize(results):
    rows = results.get("bench", [])

    def get(name, n, d, causal):
        for r in rows:
            if (r["kernel"], r["n"], r["d"], r["causal"]) == (name, n, d, causal) and "tflops" in r:
                return r
        return None

    bars = {}
    f16 = get("tc_fp16", 4096, 64, False)
    eff = get("torch_efficient_fp32", 4096, 64, False)
    x3 = get("tc_3xtf32", 4096, 64, False)
    tfl = get("torch_flash_fp16", 4096, 64, False)
    if f16:
        bars["fp16_n4096_d64_tflops>=100"] = [f16["tflops"], f16["tflops"] >= 100]
    if x3 and eff:
        bars["3xtf32_vs_efficient_fp32"] = [x3["tflops"], eff["tflops"],
                                            x3["tflops"] >= max(eff["tflops"], 35)]
    for d in DS:
        nc, ca = get("tc_fp16", 8192, d, False), get("tc_fp16", 8192, d, True)
        if nc and ca:
            bars[f"causal_speedup_n8192_d{d}>=1.7"] = [nc["ms"] / ca["ms"],
                                                       nc["ms"] / ca["ms"] >= 1.7]
    if f16 and tfl:
        bars["stretch_fp16_vs_torch_flash>=0.6"] = [f16["tflops"] / tfl["tflops"],
                                                   f16["tflops"] / tfl["tflops"] >= 0.6]
    if x3:
        bars["stretch_3xtf32>=50"] = [x3["tflops"], x3["tflops"] >= 50]
    results["bars"] = bars
    log("\nbars: " + json.dumps(bars))
    for n, d in ((4096, 64), (8192, 64), (4096, 128)):
        log(f"\nN={n}, d={d}, B x H = {BH}: TFLOP/s (ms)   non-causal | causal")
        for name in CONTENDERS:
            a, b = get(name, n, d, False), get(name, n, d, True)
            if a or b:
                fa = f"{a['tflops']:7.1f} ({a['ms']:8.3f})" if a else " " * 18
                fb = f"{b['tflops']:7.1f} ({b['ms']:8.3f})" if b else ""
                log(f"  {name:22s} {fa} | {fb}")


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    from flashcourse.plots.bench import tflops_grid

    def fmt(name):                          # solid: this course's kernels; dotted: PyTorch
        return "o" + ("-" if name.startswith(("tc_", "flash_")) else ":")
    fig, _ = tflops_grid(rows, CONTENDERS, DS, fmt, ncol=2, ms=4)
    fig.suptitle(f"Attention forward on tensor cores, B x H = {BH}\n(solid: this course, "
                 "dotted: PyTorch SDPA)")
    results.save_figure(out, "h200_tensor_core.png", fig, dpi=100)


def save(doc, out: Path):
    """The run's document and log so far into the folder `out` (results.write_output)."""
    results.write_json(out, "h200_tensor_core.json", doc)
    results.write_output(out, "h200_tensor_core_log.txt", "\n".join(_log_lines) + "\n")


# ----------------------------------------------------------------------------- small runs
def sanitize_small(quick: bool = False, precisions=None):
    """Every precision and code path on small ragged shapes (run under compute-sanitizer).
    quick: one shape (d = 64, causal, Tq > Tk), plus float16 device arrays through
    flashcourse.cuda.forward (the registry's no-copy path): fewer compilations.
    precisions: only these precisions' variants (with quick: also d = 128)."""
    rng = np.random.default_rng(7)
    worst = {}
    shapes = [((2,), 37, 53, 64, False), ((1,), 70, 45, 64, True), ((2,), 65, 130, 128, True),
              ((1,), 20, 9, 5, True)]
    if quick:
        from flashcourse.cuda import forward
        q, k, v = (rng.standard_normal((2, n, 64)).astype(np.float16) for n in (70, 45, 45))
        o, _ = forward(*(cuda.to_device(a) for a in (q, k, v)), kernel="tensor_core",
                       causal=True)
        o_ref, _ = reference.attention(q, k, v, causal=True)
        worst["fp16 device arrays"] = rel_err(o.copy_to_host(), o_ref)
        shapes = shapes[1:3] if precisions is not None else shapes[1:2]
    for (lead, tq, tk, d, causal) in shapes:
        q, k, v = (rng.standard_normal((*lead, n, d)).astype(np.float32)
                   for n in (tq, tk, tk))
        for precision, knobs in (("fp16", {}), ("bf16", {}), ("3xtf32", {}), ("tf32", {}),
                                 ("fp16", dict(warps=4, block_k=32, m_tiles=2, prefetch=True)),
                                 ("fp16", dict(warps=2, block_k=64, m_tiles=1, prefetch=False)),
                                 ("fp16", dict(warps=2, block_k=64, m_tiles=1, prefetch=True)),
                                 ("3xtf32", dict(warps=2, block_k=32, prefetch=False)),
                                 ("3xtf32", dict(warps=2, block_k=32, prefetch=True)),
                                 ("3xtf32", dict(warps=2, block_k=32, pipeline="async")),
                                 ("tf32", dict(warps=4, block_k=16, pipeline="async"))):
            if precisions is not None and precision not in precisions:
                continue
            r = ROUND.get(precision, lambda x: x)
            o_ref, _ = reference.attention(r(q), r(k), r(v), causal=causal)
            o, _ = tc.forward(q, k, v, causal=causal, precision=precision, **knobs)
            key = precision + str(sorted(knobs.items()))
            worst[key] = max(worst.get(key, 0.0), rel_err(o, o_ref))
    print("sanitize-small: all variants ran; worst rel err "
          + "; ".join(f"{p} {e:.3g}" for p, e in worst.items()))


def simulator_smoke():
    rng = np.random.default_rng(3)
    for precision in ("fp16", "bf16", "3xtf32", "tf32"):
        q, k, v = (rng.standard_normal((1, n, 16)).astype(np.float32) for n in (20, 24, 24))
        r = ROUND.get(precision, lambda x: x)
        o_ref, _ = reference.attention(r(q), r(k), r(v), causal=True)
        o, _ = tc.forward(q, k, v, causal=True, precision=precision)
        print(f"simulator smoke {precision:7s}: rel err {rel_err(o, o_ref):.3g}")


def main(argv=None):
    ap = results.benchmark_parser(__doc__, "check", "variants", "async-variants", "bench",
                                  "pipelines")
    ap.add_argument("--quick", action="store_true",
                    help="bench only N in {1024, 4096}; --sanitize-small on one shape")
    ap.add_argument("--sanitize-small", action="store_true")
    ap.add_argument("--precisions", nargs="+", default=None,
                    help="--variants/--async-variants/--check: only these precisions")
    args = results.parse_gpu_arguments(ap, argv, __file__)
    if args.simulator_smoke:
        simulator_smoke()
        return 0
    if args.sanitize_small:
        sanitize_small(quick=args.quick, precisions=args.precisions)
        if not (args.check or args.variants or args.bench):
            return 0
    out = results.output_dir(args)
    rng = np.random.default_rng(2026)
    doc = {"env": env.record(), "bh": BH}
    log(json.dumps(doc["env"]))
    status = run_all(args, rng, doc, out)
    results.finish(args, out, ok=status == 0)    # --record: into benchmarks/results/ if ok
    return status


def run_all(args, rng, results, out: Path) -> int:
    ok = True
    best = {}
    if args.check:
        ok = check_intrinsics(rng, results)
        save(results, out)
    if args.pipelines:
        ok = pipelines(rng, results) and ok
        save(results, out)
    if args.variants or args.async_variants:
        grid = {key: (GRID.get(key, []) if args.variants else [])
                + (ASYNC_GRID.get(key, []) if args.async_variants else [])
                for key in {**GRID, **ASYNC_GRID}}
        best = variants(rng, results, {key: ts for key, ts in grid.items() if ts and (
            args.precisions is None or key[0] in args.precisions)})
        for key in list(best):                 # bf16 runs the same code: the fp16 winner
            if key.startswith("fp16"):
                best.setdefault("bf16" + key[4:], best[key])
        save(results, out)
    if args.check:
        cfgs = [(p, None) for p in ("fp16", "bf16", "3xtf32", "tf32")]
        seen = set()
        for (p, _), tuples in GRID.items():     # every timed variant is checked too
            for t in tuples:
                if (p, t) not in seen:
                    seen.add((p, t))
                    cfgs.append((p, knobs_of(t)))
        for key, row in best.items():           # and the winners of --async-variants
            if row.get("pipeline") == "async":
                cfgs.append((key.split("_d")[0], {n: x for n, x in row.items() if n != "ms"}))
        if args.precisions is not None:         # the precisions asked for only
            cfgs = [c for c in cfgs if c[0] in args.precisions]
        ok = check_kernels(rng, results, cfgs) and ok
        save(results, out)
    if args.bench:
        ns = (1024, 4096) if args.quick else NS
        rows = bench(rng, results, best, ns=ns, out=out)
        summarize(results)
        save(results, out)
        plot(rows, out)
    log(f"results written under {out}")
    save(results, out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
