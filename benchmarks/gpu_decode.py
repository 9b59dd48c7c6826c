"""Check and benchmark Flash-Decoding (flashcourse.cuda.decode) on a GPU.

    python benchmarks/gpu_decode.py --check --variants --bench            # -> --out DIR
    python benchmarks/gpu_decode.py --check --bench --record              # -> results/
    python benchmarks/gpu_decode.py --simulator-smoke                     # no GPU needed
    compute-sanitizer --tool memcheck --report-api-errors no \\
        python3 benchmarks/gpu_decode.py --sanitize-small

--check      the decode kernels against the float64 reference on ragged shapes (Tk not
             a multiple of the split, more splits than key blocks, GQA groups, MQA,
             causal with Tq > 1, odd d, fp32 and fp16 K/V, numpy and device inputs),
             outputs poisoned with NaN first; fp32 relative error <= 1e-5, fp16 <= 2e-2
             against the reference computed from the rounded (fp16) inputs.
--variants   split-kernel variants (unroll, warps, splits) timed on the bar problem.
--bench      Tq = 1, d = 128, Tk in {4096, 16384, 65536, 131072}, B x Hkv in {1, 8, 32},
             group G in {1, 8}: ours (fp16 and fp32 K/V), PyTorch SDPA flash fp16 and
             efficient fp32, the course's FA2-order flash kernel (fp32), and a device-to-
             device copy of the same K/V bytes. Every problem is checked before it is
             timed (a float64 reference computed in torch on the GPU). Timing: warm-up,
             then CUDA events around each launch with the L2 cache flushed before it
             (a 256 MiB write), median of the repeats.
--record     on a GPU: write benchmarks/results/h200_decode.json, h200_decode.png and
             h200_decode_log.txt once the run has passed its checks (as it goes, they
             are written into a staging folder benchmarks/out/record-*/); without it
             everything goes to --out (default benchmarks/out/, untracked; never inside
             benchmarks/results/). Refused without a GPU and with --simulator-smoke
             (flashcourse.results.check_outputs).
--simulator-smoke  run --check on tiny shapes under Numba's simulator (no timing).

Timing note: `Timer` below leaves the L2 flush running on the GPU while the next launch
is queued (no synchronize in between), so a launch prepared while the flush runs (~65 us
for 256 MiB) costs nothing; `flashcourse.timing.time_cuda` synchronizes after its flush
and counts the host's launch time. The recorded h200_decode.json was measured with Timer.
"""

from __future__ import annotations

import json
import sys

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse import decode as np_decode
from flashcourse import reference, results
from flashcourse.cuda.decoding import decode_kernels as dk
from flashcourse.timing import rel_err

TKS = (4096, 16384, 65536, 131072)
BHKV = (1, 8, 32)
GROUPS = (1, 8)
D = 128
TOL = {np.float32: 1e-5, np.float16: 2e-2}
BAR = {"tk": 65536, "bhkv": 8, "group": 1}
FLUSH_BYTES = 256 * 1024 * 1024
LOG_LINES: list = []
#: (folder, file name) of the log as the run writes it (results.append_output), or None
LOG_TO = None


def log(*a):
    line = " ".join(str(x) for x in a)
    LOG_LINES.append(line)
    print(line, flush=True)
    if LOG_TO is not None:
        results.append_output(*LOG_TO, line + "\n")


def environment() -> dict:
    """The environment record of every results file (flashcourse.env.record)."""
    from flashcourse.env import record
    return record()


def write(out, name, doc):
    """Validate against schemas/gpu_decode.json, then write out/name (results.write_json)."""
    results.write_json(out, name, doc, "gpu_decode")


def split_shape(bhkv: int):
    """B x Hkv as (B, Hkv): 1 -> (1, 1), 8 -> (1, 8), 32 -> (4, 8)."""
    return (1, 1) if bhkv == 1 else (bhkv // 8, 8)


# ----------------------------------------------------------------------------- check
CHECK_SHAPES = [
    # B, Hq, Hkv, Tq, Tk, d, num_splits, block_k, causal
    (1, 1, 1, 1, 1, 128, 1, 64, False),
    (2, 4, 4, 1, 300, 128, 3, 64, False),        # Tk not a multiple of the split
    (1, 8, 1, 1, 1000, 128, 7, 64, False),       # MQA
    (2, 16, 2, 1, 777, 128, None, 64, False),    # GQA G = 8, heuristic splits
    (1, 4, 2, 5, 129, 64, 4, 32, True),          # causal, Tq > 1, G = 2
    (1, 2, 1, 6, 4, 128, 3, 1, True),            # causal, Tk < Tq: empty rows, empty split
    (1, 3, 1, 2, 50, 37, 5, 8, True),            # odd d, 5 splits of 7 blocks: one empty
    (3, 6, 3, 1, 5000, 128, 40, 64, False),
    (1, 8, 8, 1, 2049, 64, 16, 64, False),
    (1, 24, 3, 3, 333, 96, 5, 64, True),         # G = 8, Tq = 3: 24 rows, 3 row blocks
]


def check(rng, doc, shapes=CHECK_SHAPES, dtypes=(np.float32, np.float16)):
    rows, worst = [], {}
    for (b, hq, hkv, tq, tk, d, ns, bk, causal) in shapes:
        for dt in dtypes:
            q = rng.standard_normal((b, hq, tq, d)).astype(dt)
            k = rng.standard_normal((b, hkv, tk, d)).astype(dt)
            v = rng.standard_normal((b, hkv, tk, d)).astype(dt)
            g = hq // hkv
            o_ref, lse_ref = reference.attention(q, np_decode.expand_kv(k, g),
                                                 np_decode.expand_kv(v, g), causal=causal)
            o, lse = dk.decode(q, k, v, num_splits=ns, block_k=bk, causal=causal)
            fin = np.isfinite(lse_ref)
            empty_ok = bool(np.array_equal(np.isneginf(lse), ~fin) and np.all(o[~fin] == 0))
            e_o = rel_err(o, o_ref) if np.isfinite(o).all() else float("inf")
            e_l = rel_err(lse[fin], lse_ref[fin]) if fin.any() else 0.0
            tol = TOL[dt]
            ok = empty_ok and e_o <= tol and e_l <= tol
            name = np.dtype(dt).name
            worst[name] = max(worst.get(name, 0.0), e_o, e_l)
            rows.append({"shape": [b, hq, hkv, tq, tk, d], "num_splits": ns, "block_k": bk,
                         "causal": causal, "dtype": name, "rel_err_o": e_o,
                         "rel_err_lse": e_l, "empty_rows_ok": empty_ok, "tol": tol, "ok": ok})
            if not ok:
                log(f"  CHECK FAILED {name} {(b, hq, hkv, tq, tk, d)} splits={ns} "
                    f"causal={causal}: o {e_o:.3g} lse {e_l:.3g} empty_ok={empty_ok}")
    n_ok = sum(r["ok"] for r in rows)
    log(f"check: {n_ok}/{len(rows)} runs within tolerance; worst "
        + ", ".join(f"{k} {v:.3g}" for k, v in worst.items()))
    doc["check"] = {"runs": len(rows), "passed": n_ok, "worst": worst, "rows": rows}
    return n_ok == len(rows)


# ----------------------------------------------------------------------------- timing
class Timer:
    """CUDA events around one launch, L2 flushed before each; median of the repeats."""

    def __init__(self):
        import torch
        self.torch = torch
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")

    def __call__(self, fn, reps=20, budget_ms=400.0):
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for i in range(reps):
            self.flush.fill_(float(i))
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
            if sum(times) > budget_ms and len(times) >= 3:
                break
        return float(np.median(times)), len(times)


class Problem:
    """One decode problem on the device: torch tensors plus Numba views, outputs and
    workspaces allocated once (nothing is allocated inside timed code)."""

    def __init__(self, torch, b, hkv, group, tk, d, dtype, seed=0):
        self.b, self.hkv, self.g, self.tk, self.d = b, hkv, group, tk, d
        self.hq = hkv * group
        self.dtype = dtype
        tdt = torch.float16 if dtype == np.float16 else torch.float32
        gen = torch.Generator(device="cuda").manual_seed(seed)
        self.q = torch.randn(b, self.hq, 1, d, device="cuda", dtype=tdt, generator=gen)
        self.k = torch.randn(b, hkv, tk, d, device="cuda", dtype=tdt, generator=gen)
        self.v = torch.randn(b, hkv, tk, d, device="cuda", dtype=tdt, generator=gen)
        self.scale = 1.0 / np.sqrt(d)
        self.rows = b * self.hq
        self.o = torch.empty(self.rows, d, device="cuda", dtype=torch.float32)
        self.lse = torch.empty(self.rows, device="cuda", dtype=torch.float32)
        self.qf = cuda.as_cuda_array(self.q.view(self.rows, d))
        self.kf = cuda.as_cuda_array(self.k.view(b * hkv, tk, d))
        self.vf = cuda.as_cuda_array(self.v.view(b * hkv, tk, d))
        self.of = cuda.as_cuda_array(self.o)
        self.lf = cuda.as_cuda_array(self.lse)
        self.kv_bytes = 2 * b * hkv * tk * d * self.k.element_size()
        self.qo_bytes = self.rows * d * (self.q.element_size() + 4)

    def config(self, unroll=None, warps=None, num_splits=None, blocks_per_sm=None,
               row_groups=None):
        item = np.dtype(self.dtype).itemsize
        dflt = dk.default_launch(item, self.g)
        cfg = dk.plan(self.d, item, self.g, unroll=unroll or dflt["unroll"],
                      warps=warps or dflt["warps"],
                      row_groups=row_groups or dflt["row_groups"])
        ns, per = dk.plan_splits(self.b * self.hkv, self.g, self.tk, cfg,
                                 num_splits=num_splits, blocks_per_sm=blocks_per_sm)
        return cfg, ns, per

    def runner(self, cfg, ns, per):
        torch = sys.modules["torch"]
        if ns > 1:
            op = cuda.as_cuda_array(torch.empty(ns, self.rows, self.d, device="cuda"))
            lp = cuda.as_cuda_array(torch.empty(ns, self.rows, device="cuda"))
        else:
            op = lp = None

        def fn():
            dk.run(self.qf, self.kf, self.vf, self.of, self.lf, op, lp, tq=1, group=self.g,
                   d=self.d, scale=self.scale, causal=False, num_splits=ns,
                   keys_per_split=per, cfg=cfg)
        return fn

    def reference(self):
        """float64 o (rows, d) and lse (rows,) computed in torch on the GPU (grouped)."""
        torch = sys.modules["torch"]
        q = self.q.double().view(self.b, self.hkv, self.g, self.d)
        k = self.k.double()
        v = self.v.double()
        s = torch.einsum("bhgd,bhkd->bhgk", q, k) * self.scale        # (B, Hkv, G, Tk)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None])
        o = torch.einsum("bhgk,bhkd->bhgd", p, v)
        return o.reshape(self.rows, self.d).cpu().numpy(), lse.reshape(-1).cpu().numpy()

    def errors(self, o_ref, lse_ref, o=None, lse=None):
        o = self.o if o is None else o
        o_h = o.float().reshape(self.rows, self.d).cpu().numpy()
        e_o = rel_err(o_h, o_ref) if np.isfinite(o_h).all() else float("inf")
        if lse is None:
            return e_o, 0.0
        lse_h = lse.float().reshape(-1).cpu().numpy()
        e_l = rel_err(lse_h, lse_ref) if np.isfinite(lse_h).all() else float("inf")
        return e_o, e_l


def registers(cfg) -> int | None:
    try:
        kern = dk.make_split_kernel(cfg)
        return int(next(iter(kern.overloads.values())).regs_per_thread)
    except Exception:
        return None


# ----------------------------------------------------------------------------- variants
#: (B x Hkv, G, dtype, [(unroll, warps, row_groups, num_splits), ...]) at Tk = 65536;
#: None = the default. The first run's sweep (unroll x warps x splits for fp16 and fp32,
#: group 1 and 8) is in benchmarks/results/h200_decode_run1.json.
VARIANTS = [
    (8, 8, np.float16, [(2, 8, rg, None) for rg in (1, 2, 4, 8)]
     + [(1, 8, 4, None), (4, 8, 4, None), (2, 4, 4, None), (4, 8, 8, None)]),
    (8, 1, np.float16, [(None, None, None, ns) for ns in (48, 56, 57, 60, 63, 64, 66, 72)]),
    (32, 1, np.float16, [(u, w, None, None) for u in (2, 4) for w in (4, 8)]),
]


def variants(doc, timer, plan=VARIANTS):
    import torch
    rows = []
    for (bhkv, group, dt, combos) in plan:
        b, hkv = split_shape(bhkv)
        p = Problem(torch, b, hkv, group, 65536, D, dt)
        o_ref, lse_ref = p.reference()
        for (u, w, rg, ns) in combos:
            row = {"bhkv": bhkv, "group": group, "dtype": np.dtype(dt).name, "tk": 65536,
                   "unroll": u, "warps": w, "row_groups": rg, "num_splits": ns}
            try:
                cfg, nsp, per = p.config(u, w, ns, row_groups=rg)
                fn = p.runner(cfg, nsp, per)
                p.o.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                e_o, e_l = p.errors(o_ref, lse_ref, lse=p.lse)
                ms, reps = timer(fn)
                row.update(unroll=cfg.unroll, warps=cfg.warps, row_groups=cfg.row_groups,
                           num_splits=nsp, keys_per_split=per, regs=registers(cfg), ms=ms,
                           gbs=p.kv_bytes / ms / 1e6, rel_err_o=e_o, rel_err_lse=e_l,
                           ok=e_o <= TOL[dt] and e_l <= TOL[dt])
                log(f"variant {row['dtype']} BxHkv={bhkv} G={group} u={cfg.unroll} "
                    f"w={cfg.warps} rg={cfg.row_groups} splits={nsp}: {ms * 1e3:8.1f} us "
                    f"{row['gbs']:7.0f} GB/s regs {row['regs']} err {e_o:.1e}"
                    + ("" if row["ok"] else "  CHECK FAILED"))
            except Exception as exc:
                row["error"] = repr(exc)[:300]
                log(f"variant {row}: ERROR")
            rows.append(row)
        del p
        torch.cuda.empty_cache()
    doc["variants"] = rows
    return rows


# ----------------------------------------------------------------------------- bench
def copy_rate(timer, nbytes):
    """Median ms of a device-to-device copy of nbytes, and its read+write rate (GB/s)."""
    import torch
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda")
    src.normal_()
    dst = torch.empty_like(src)

    def fn():
        dst.copy_(src)
    ms, _ = timer(fn)
    return ms, 2 * nbytes / ms / 1e6


def torch_sdpa(p, backend):
    """A closure running PyTorch SDPA with one backend on p (GQA natively when it can)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    k, v, how = p.k, p.v, "native"
    out = {}

    def run_gqa():
        with sdpa_kernel(be[backend]):
            out["o"] = F.scaled_dot_product_attention(p.q, k, v, scale=p.scale,
                                                      enable_gqa=p.g > 1)
    try:
        run_gqa()
        torch.cuda.synchronize()
    except Exception:
        k = p.k.repeat_interleave(p.g, dim=1)
        v = p.v.repeat_interleave(p.g, dim=1)
        how = "K/V expanded per query head"

        def run_gqa():  # noqa: F811
            with sdpa_kernel(be[backend]):
                out["o"] = F.scaled_dot_product_attention(p.q, k, v, scale=p.scale)
        run_gqa()
        torch.cuda.synchronize()
    return run_gqa, out, how


def fa2_order(p):
    """The course's FA2-order flash kernel on p in fp32 (K/V expanded per query head)."""
    import torch

    from flashcourse._checks import Heads
    from flashcourse.cuda.registry import FORWARD
    q = p.q.float().view(p.rows, 1, p.d)
    k = p.k.float().repeat_interleave(p.g, dim=1).view(p.rows, p.tk, p.d)
    v = p.v.float().repeat_interleave(p.g, dim=1).view(p.rows, p.tk, p.d)
    o = torch.empty(p.rows, 1, p.d, device="cuda")
    lse = torch.empty(p.rows, 1, device="cuda")
    qf, kf, vf, of, lf = (cuda.as_cuda_array(x) for x in (q, k, v, o, lse))

    x = Heads(qf, kf, vf, (p.rows,), 1, p.tk, p.d, p.scale, False, np.dtype(np.float32))

    def fn():
        FORWARD["flash"].run(x, out=(of, lf))
    keep = (q, k, v)
    return fn, o, keep


def bench(doc, timer, tks=TKS, bhkvs=BHKV, groups=GROUPS, fa2=True, out=None):
    import torch
    rows = []
    copies = {}
    for group in groups:
        for bhkv in bhkvs:
            for tk in tks:
                b, hkv = split_shape(bhkv)
                base = {"tq": 1, "tk": tk, "d": D, "bhkv": bhkv, "b": b, "hkv": hkv,
                        "group": group, "hq": hkv * group}
                for dt in (np.float16, np.float32):
                    p = Problem(torch, b, hkv, group, tk, D, dt, seed=tk + bhkv + group)
                    o_ref, lse_ref = p.reference()
                    name = np.dtype(dt).name
                    nb = p.kv_bytes
                    if nb not in copies:
                        copies[nb] = copy_rate(timer, nb)
                    copy_ms, copy_gbs = copies[nb]
                    common = dict(base, kv_dtype=name, kv_bytes=nb, copy_ms=copy_ms,
                                  copy_gbs=copy_gbs, floor_ms=nb / (copy_gbs * 1e6))
                    # ours
                    cfg, ns, per = p.config()
                    fn = p.runner(cfg, ns, per)
                    p.o.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    e_o, e_l = p.errors(o_ref, lse_ref, lse=p.lse)
                    tol = TOL[dt]
                    ok = e_o <= tol and e_l <= tol
                    ms, reps = timer(fn) if ok else (float("nan"), 0)
                    rows.append(dict(common, impl="ours", num_splits=ns, unroll=cfg.unroll,
                                     warps=cfg.warps, ms=ms, reps=reps,
                                     gbs=nb / ms / 1e6, rel_err_o=e_o, rel_err_lse=e_l,
                                     ok=ok))
                    log(f"ours {name} G={group} BxHkv={bhkv} Tk={tk}: {ms * 1e3:8.1f} us "
                        f"{nb / ms / 1e6:7.0f} GB/s (copy {copy_gbs:5.0f}) splits={ns} "
                        f"err {e_o:.1e}/{e_l:.1e}" + ("" if ok else "  CHECK FAILED"))
                    # PyTorch SDPA: flash for fp16, efficient for fp32
                    backend = "flash" if dt == np.float16 else "efficient"
                    try:
                        fn_t, out_t, how = torch_sdpa(p, backend)
                        e_t, _ = p.errors(o_ref, lse_ref, o=out_t["o"])
                        ms_t, reps_t = timer(fn_t)
                        rows.append(dict(common, impl=f"torch_{backend}", ms=ms_t, reps=reps_t,
                                         gbs=nb / ms_t / 1e6, rel_err_o=e_t, gqa=how))
                        log(f"torch {backend} {name}: {ms_t * 1e3:8.1f} us "
                            f"{nb / ms_t / 1e6:7.0f} GB/s ({how}) err {e_t:.1e}")
                        del fn_t, out_t
                    except Exception as exc:
                        rows.append(dict(common, impl=f"torch_{backend}", error=repr(exc)[:300]))
                        log(f"torch {backend} {name}: ERROR {exc!r}"[:200])
                    # the course's FA2-order kernel (fp32 only; K/V expanded for GQA)
                    if fa2 and dt == np.float32 and nb * group <= 40e9:
                        try:
                            fn_f, o_f, keep = fa2_order(p)
                            fn_f()
                            torch.cuda.synchronize()
                            e_f, _ = p.errors(o_ref, lse_ref, o=o_f)
                            ms_f, reps_f = timer(fn_f, reps=3, budget_ms=1.0)
                            rows.append(dict(common, impl="fa2_order_fp32", ms=ms_f,
                                             reps=reps_f, gbs=nb / ms_f / 1e6, rel_err_o=e_f))
                            log(f"FA2-order fp32: {ms_f:8.2f} ms {nb / ms_f / 1e6:7.1f} GB/s "
                                f"err {e_f:.1e}")
                            del keep, o_f
                        except Exception as exc:
                            rows.append(dict(common, impl="fa2_order_fp32",
                                             error=repr(exc)[:300]))
                            log(f"FA2-order: ERROR {exc!r}"[:200])
                    del p
                    torch.cuda.empty_cache()
                if out is not None:                      # progress, in case of a time-out
                    doc["bench"] = rows
                    results.write_json(out, "decode_partial.json", doc)
    doc["bench"] = rows
    return rows


def bars(rows) -> dict:
    """The issue's bars on the bar problem (Tk = 65536, B x Hkv = 8, G = 1)."""
    def pick(impl, dtype):
        for r in rows:
            if (r["impl"] == impl and r["kv_dtype"] == dtype and r["tk"] == BAR["tk"]
                    and r["bhkv"] == BAR["bhkv"] and r["group"] == BAR["group"]
                    and "ms" in r):
                return r
        return None
    ours16, ours32 = pick("ours", "float16"), pick("ours", "float32")
    tflash, fa2 = pick("torch_flash", "float16"), pick("fa2_order_fp32", "float32")
    out = {}
    if ours16 and tflash:
        out["speed_vs_torch_flash_fp16"] = tflash["ms"] / ours16["ms"]
        out["bar_0.8x_torch_flash"] = out["speed_vs_torch_flash_fp16"] >= 0.8
        out["stretch_>=_torch_flash"] = out["speed_vs_torch_flash_fp16"] >= 1.0
    if ours32 and fa2:
        out["speedup_vs_fa2_order_fp32"] = fa2["ms"] / ours32["ms"]
        out["bar_50x_fa2_order"] = out["speedup_vs_fa2_order_fp32"] >= 50
    if ours16:
        out["ours_fp16_gbs"] = ours16["gbs"]
        out["copy_gbs"] = ours16["copy_gbs"]
    big = [r for r in rows if r["impl"] == "ours" and r["bhkv"] == 32 and r["group"] == 1
           and r["kv_dtype"] == "float16" and r["tk"] == BAR["tk"] and "ms" in r]
    if big:
        out["ours_fp16_bhkv32_fraction_of_copy"] = big[0]["gbs"] / big[0]["copy_gbs"]
        out["stretch_80pct_copy_bhkv32"] = out["ours_fp16_bhkv32_fraction_of_copy"] >= 0.8
    return out


def plot(rows, out, name):
    import matplotlib
    matplotlib.use("Agg")
    from flashcourse.plots.decode import plot_bandwidth
    results.save_figure(out, name, plot_bandwidth(rows), dpi=110)


def sanitize_small():
    """One small ragged run of each path (split + combine, GQA, causal, fp16/fp32; the
    fp16 GQA runs take the tensor-core split kernel, which also runs at 24 rows per KV
    head (two 16-row tiles), d = 256 and one row)."""
    rng = np.random.default_rng(7)
    runs = [(dt, shape, {}) for dt in (np.float32, np.float16)
            for shape in ((1, 4, 2, 3, 203, 128, 3, True), (2, 8, 1, 1, 517, 64, 5, False))]
    runs += [(np.float16, (1, 12, 1, 2, 333, 128, 4, True), {"kernel": "tensor_core"}),
             (np.float16, (1, 2, 1, 1, 100, 256, 2, False), {"kernel": "tensor_core"}),
             (np.float16, (1, 3, 3, 1, 150, 64, 2, False), {"kernel": "tensor_core"})]
    for dt, (b, hq, hkv, tq, tk, d, ns, causal), opts in runs:
        q = rng.standard_normal((b, hq, tq, d)).astype(dt)
        k = rng.standard_normal((b, hkv, tk, d)).astype(dt)
        v = rng.standard_normal((b, hkv, tk, d)).astype(dt)
        o, lse = dk.decode(q, k, v, num_splits=ns, causal=causal, **opts)
        g = hq // hkv
        o_ref, _ = reference.attention(q, np_decode.expand_kv(k, g),
                                       np_decode.expand_kv(v, g), causal=causal)
        print("sanitize-small", np.dtype(dt).name, (b, hq, hkv, tq, tk, d), "rel err",
              f"{rel_err(o, o_ref):.2e}")
    cuda.synchronize()


def main(argv=None):
    ap = results.benchmark_parser(__doc__, "check", "variants", "bench")
    ap.add_argument("--no-fa2", action="store_true", help="skip the FA2-order kernel")
    ap.add_argument("--tks", default=",".join(map(str, TKS)), help="Tk values for --bench")
    ap.add_argument("--bhkv", default=",".join(map(str, BHKV)), help="B x Hkv values")
    ap.add_argument("--groups", default=",".join(map(str, GROUPS)), help="GQA group sizes")
    ap.add_argument("--sanitize-small", action="store_true",
                    help="one small run of each path, for compute-sanitizer")
    results.add_output_arguments(ap)
    args = ap.parse_args(argv)
    results.check_outputs(args, __file__)
    results.require_gpu("benchmarks/gpu_decode.py", args.simulator_smoke or args.sanitize_small)

    if args.sanitize_small:
        sanitize_small()
        return 0
    if args.simulator_smoke:
        if args.bench or args.variants:
            raise SystemExit("--simulator-smoke only checks: nothing is timed")
        shapes = [(1, 2, 1, 1, 20, 8, 3, 4, False), (1, 4, 2, 3, 9, 5, 2, 4, True),
                  (1, 2, 2, 2, 1, 16, 1, 8, True)]
        ok = check(np.random.default_rng(0), {}, shapes=shapes)
        return 0 if ok else 1

    global LOG_TO
    out = results.output_dir(args)
    stem = "h200_decode" if args.record else "gpu_decode"
    results.write_output(out, f"{stem}_log.txt", "")
    LOG_TO = (out, f"{stem}_log.txt")
    doc = {"environment": environment(), "d": D,
           "timing": "CUDA events around each launch, L2 flushed (256 MiB write) before "
                     "each, median of repeats after a warm-up",
           "bytes": "kv_bytes = 2 B Hkv Tk d e read once; gbs = kv_bytes / time; "
                    "copy_gbs = (read + write) / time of a device copy of kv_bytes"}
    ok = True
    rng = np.random.default_rng(0)
    if args.check:
        ok = check(rng, doc)
        write(out, f"{stem}.json", doc)
    timer = Timer() if (args.variants or args.bench) else None
    if args.variants:
        variants(doc, timer)
        write(out, f"{stem}.json", doc)
    if args.bench:
        ints = [tuple(int(x) for x in a.split(",")) for a in (args.tks, args.bhkv, args.groups)]
        rows = bench(doc, timer, tks=ints[0], bhkvs=ints[1], groups=ints[2],
                     fa2=not args.no_fa2, out=out)
        doc["bars"] = bars(rows)
        log("bars: " + json.dumps(doc["bars"]))
        write(out, f"{stem}.json", doc)
        (out / "decode_partial.json").unlink(missing_ok=True)
        try:
            plot(rows, out, f"{stem}.png")
        except Exception as exc:
            log(f"plot failed: {exc!r}")
    results.finish(args, out, ok)            # --record: into benchmarks/results/ if ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
