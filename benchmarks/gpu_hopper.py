"""Check and benchmark the Hopper (wgmma) forward, `forward(..., kernel="hopper")`.

    python3 benchmarks/gpu_hopper.py --check --variants --bench [--record]
    compute-sanitizer --tool memcheck --report-api-errors no \\
        python3 benchmarks/gpu_hopper.py --sanitize-small
    compute-sanitizer --tool racecheck python3 benchmarks/gpu_hopper.py --sanitize-small

--check     the kernel against float64 on the inputs rounded to 16 bits, outputs poisoned
            with NaN first: ragged Tq, Tk (not multiples of the tiles), Tq != Tk, causal
            (bottom-right; rows that see no key), d in {16, 40, 64, 80, 128}, a negative
            scale, every --variants tile, version 2 with its tail split forced (2-3 pieces,
            causal too), without the skip and in head-major order; then at N = 4096 (two
            heads of B x H = 32) and on ragged causal Tq != Tk shapes the relative error of
            o beside PyTorch flash's on the same rounded inputs (the bar: within 2x of it,
            + 1e-4).
--ab        version 2's changes, one at a time, through the public call in one run,
            interleaved (3 rounds of medians): none (skip_masked=False, splits=1,
            order="head-major", lazy_rescale=False), the per-warpgroup skip of masked key
            blocks, causal units longest first over all heads (order="lpt"), the tail split
            (`tail_split`), and the lazy rescale: the default; beside PyTorch flash.
            --check also runs the lazy rescale against every block's rescale on inputs
            whose maxima climb along the keys and on 3x-scaled scores (HARD).
--variants  registers, local bytes, shared memory and the bare kernel's time at N = 4096,
            B x H = 32, non-causal, for GRID's (warpgroups, block_k) per d.
--bench     B x H = 32, N in {4096, 8192, 16384}, d in {64, 128}, causal off/on, through
            the public call with device arrays: hopper fp16 and bf16 (bf16 bit arrays),
            the course's mma.sync kernel (tensor_core fp16), PyTorch SDPA flash (FA2) and
            cuDNN, fp16 and bf16, all on the same tensors; TFLOP/s = 4 N^2 d per head
            (half when causal); the bare hopper kernel beside its public call. Each time
            is the median of BENCH_ROUNDS rounds, each round a median of 10 timings of
            every kernel in turn (so that a slow stretch of the GPU hits all of them).
--record    on a GPU: benchmarks/results/h200_hopper.json (+ _log.txt) once the checks
            passed. Refuses to run without a GPU of compute capability 9.0.
"""
from __future__ import annotations

import json
import sys
import time
from functools import partial

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse import env, reference, results
from flashcourse.cuda import forward
from flashcourse.cuda.hopper import host as hopper
from flashcourse.cuda.ptx import mma
from flashcourse.timing import rel_err
from gpu_bars import LOG, as_bits, as_numba, log, med, sdpa_bottom_right  # shared helpers

BH = 32
#: --bench: rounds of medians per point, every kernel once per round (the median is kept)
BENCH_ROUNDS = 3
NS, DS = (4096, 8192, 16384), (64, 128)
#: (warpgroups, block_k, pipeline) per d for --variants (and checked by --check)
GRID = {64: [(wg, bk, p) for p in ("serial", "overlap") for wg, bk in
             ((1, 64), (1, 128), (2, 64), (2, 128), (3, 64), (3, 128), (4, 64), (4, 80))],
        128: [(wg, bk, p) for p in ("serial", "overlap") for wg, bk in
              ((1, 64), (1, 128), (2, 64), (2, 128), (3, 64), (3, 80))]}
ROUND = {"fp16": mma.round_fp16, "bf16": mma.round_bf16}


def device_inputs(host, precision):
    """float32 host arrays -> device arrays of the kernel's input type (no conversion in
    the call): float16 for fp16, uint16 bf16 bit patterns for bf16."""
    if precision == "fp16":
        return [cuda.to_device(a.astype(np.float16)) for a in host]
    return [cuda.to_device((mma.round_bf16(a).view(np.uint32) >> 16).astype(np.uint16))
            for a in host]


def to_float(o, precision):
    h = o.copy_to_host()
    if precision == "fp16":
        return h.astype(np.float64)
    return (h.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def make_inputs(rng, bh, tq, tk, d, kind="normal"):
    """float32 q, k, v: standard normal, or "rising": key j scaled by 1 + 4 j / Tk, so
    each row's scores grow along the keys and its running max climbs block after block
    (the lazy rescale then keeps a stale max and P grows towards its bound, 2^8)."""
    host = [rng.standard_normal((bh, n, d)).astype(np.float32) for n in (tq, tk, tk)]
    if kind == "rising":
        host[1] *= (1 + 4 * np.arange(tk, dtype=np.float32) / tk)[None, :, None]
    elif kind != "normal":
        raise ValueError(f"kind must be 'normal' or 'rising', got {kind!r}")
    return host


def check_one(rng, bh, tq, tk, d, causal, precision, scale=None, tiles=None, v_swap=False,
              kind="normal"):
    host = make_inputs(rng, bh, tq, tk, d, kind)
    rounded = [ROUND[precision](a).astype(np.float64) for a in host]
    o64, lse64 = reference.attention(*rounded, causal=causal, scale=scale)
    q, k, v = device_inputs(host, precision)
    odt = np.float16 if precision == "fp16" else np.uint16
    o = cuda.to_device(np.full((bh, tq, d), np.nan if precision == "fp16" else 0xFFFF,
                               dtype=odt))
    lse = cuda.to_device(np.full((bh, tq), np.nan, np.float32))
    from flashcourse._checks import Heads  # noqa: F401  (documented entry below)
    from flashcourse.cuda.tensor_core.host import run_heads
    x = _heads(q, k, v, causal, scale)
    run_heads(x, (o, lse), precision,
              _run=partial(_run_swapped, v_swap=v_swap), **(tiles or {}))
    of, lh = to_float(o, precision), lse.copy_to_host().astype(np.float64)
    fin = np.isfinite(lse64)
    err_o = rel_err(of, o64) if np.isfinite(of).all() else float("inf")
    err_l = (float(np.max(np.abs(lh[fin] - lse64[fin]) / np.maximum(1, np.abs(lse64[fin]))))
             if fin.any() else 0.0)
    masked_ok = bool(np.all(np.isneginf(lh[~fin])) and np.all(of[~fin] == 0))
    return err_o, err_l, masked_ok


def _run_swapped(*args, v_swap=False, **kw):
    return hopper.run(*args, v_swap=v_swap, **kw)


def _heads(q, k, v, causal, scale):
    from flashcourse.cuda.common._launch import prepare
    x, *_ = prepare(q, k, v, causal, scale, False, dtypes=(np.float16, np.uint16),
                    convert_to=None)
    return x


SHAPES = [  # bh, tq, tk, d, causal, scale
    (2, 64, 64, 64, False, None), (2, 100, 77, 64, False, None), (2, 129, 300, 128, True, None),
    (1, 200, 130, 40, True, None), (1, 1, 500, 64, False, None), (1, 333, 1000, 128, True, None),
    (1, 300, 100, 64, True, None), (2, 150, 260, 80, False, -0.2), (1, 70, 90, 16, True, 0.5),
    (3, 257, 513, 128, False, None), (1, 512, 2048, 64, True, None)]


#: inputs that work the lazy rescale (bh, tq, tk, d, causal, scale, kind): maxima that climb
#: along the keys ("rising"), and scores 3x larger than 1/sqrt(d) gives (the max jumps by far
#: more than the threshold, rows are nearly one-hot)
HARD = [(2, 300, 1000, 64, False, None, "rising"), (1, 333, 1000, 128, True, None, "rising"),
        (2, 257, 513, 128, False, 3.0, "normal"), (1, 200, 700, 64, True, 3.0, "rising")]


def check(rng, doc, configs=()) -> bool:
    ok_all = True
    # which stride is which for the MN-major V descriptor: the one that matches float64
    for v_swap in (False, True):
        e, el, mo = check_one(rng, 1, 64, 128, 64, False, "fp16", v_swap=v_swap)
        log(f"v layout probe v_swap={v_swap}: err_o {e:.2e} err_lse {el:.2e}")
    for precision in ("fp16", "bf16"):
        for bh, tq, tk, d, causal, scale in SHAPES:
            e, el, mo = check_one(rng, bh, tq, tk, d, causal, precision, scale)
            ok = e <= 2e-2 and el <= 1e-4 and mo
            ok_all &= ok
            doc["checks"].append({"precision": precision, "bh": bh, "tq": tq, "tk": tk, "d": d,
                                  "causal": causal, "scale": scale, "err_o": e, "err_lse": el,
                                  "masked_rows_ok": mo, "ok": ok})
            log(f"check {precision} bh={bh} tq={tq} tk={tk} d={d} causal={causal} "
                f"scale={scale}: err_o {e:.2e} err_lse {el:.2e} masked {mo} "
                f"{'ok' if ok else 'FAIL'}")
    for d, grid in GRID.items():
        for wg, bk, pipe in grid:
            e, el, mo = check_one(rng, 2, 333, 517, d, True, "fp16",
                                  tiles={"warpgroups": wg, "block_k": bk, "pipeline": pipe})
            ok = e <= 2e-2 and el <= 1e-4 and mo
            ok_all &= ok
            log(f"check tiles wg={wg} bk={bk} {pipe} d={d}: err_o {e:.2e} "
                f"{'ok' if ok else 'FAIL'}")
    for extra in ({"splits": 3}, {"splits": 2}, {"skip_masked": False},
                  {"order": "head-major"}, {"lazy_rescale": False}):
        for bh, tq, tk, d, causal, scale in SHAPES:   # version 2's split and skip
            tiles = dict(extra)
            if "splits" in tiles:
                tiles["splits"] = min(tiles["splits"], -(-tk // 64))
                if tiles["splits"] == 1:
                    continue
            e, el, mo = check_one(rng, bh, tq, tk, d, causal, "fp16", scale, tiles=tiles)
            ok = e <= 2e-2 and el <= 1e-4 and mo
            ok_all &= ok
            doc["checks"].append({"precision": "fp16", "bh": bh, "tq": tq, "tk": tk, "d": d,
                                  "causal": causal, "scale": scale, "err_o": e, "err_lse": el,
                                  "masked_rows_ok": mo, "ok": ok, **tiles})
            log(f"check overlap {tiles} bh={bh} tq={tq} tk={tk} d={d} causal={causal} "
                f"scale={scale}: err_o {e:.2e} err_lse {el:.2e} masked {mo} "
                f"{'ok' if ok else 'FAIL'}")
    for bh, tq, tk, d, causal, scale, kind in HARD:   # the lazy rescale against every block
        got = {}
        for lazy in (True, False):
            for precision in ("fp16", "bf16"):
                got[lazy, precision] = check_one(np.random.default_rng(7), bh, tq, tk, d,
                                                 causal, precision, scale, kind=kind,
                                                 tiles={"lazy_rescale": lazy})
        for precision in ("fp16", "bf16"):
            (e, el, mo), (e0, *_) = got[True, precision], got[False, precision]
            ok = e <= 2e-2 and el <= 1e-4 and mo and e <= 2 * e0 + 1e-4
            ok_all &= ok
            doc["checks"].append({"precision": precision, "bh": bh, "tq": tq, "tk": tk, "d": d,
                                  "causal": causal, "scale": scale, "err_o": e, "err_lse": el,
                                  "masked_rows_ok": mo, "ok": ok, "inputs": kind,
                                  "err_o_every_block": e0})
            log(f"check lazy {precision} {kind} bh={bh} tq={tq} tk={tk} d={d} causal={causal} "
                f"scale={scale}: err_o {e:.2e} (every block {e0:.2e}) err_lse {el:.2e} "
                f"masked {mo} {'ok' if ok else 'FAIL'}")
    for wg, bk, pipe in configs:       # --configs tiles: on every shape
        for bh, tq, tk, d, causal, scale in SHAPES:
            e, el, mo = check_one(rng, bh, tq, tk, d, causal, "fp16", scale,
                                  tiles={"warpgroups": wg, "block_k": bk, "pipeline": pipe})
            ok = e <= 2e-2 and el <= 1e-4 and mo
            ok_all &= ok
            doc["checks"].append({"precision": "fp16", "bh": bh, "tq": tq, "tk": tk, "d": d,
                                  "causal": causal, "scale": scale, "err_o": e, "err_lse": el,
                                  "masked_rows_ok": mo, "ok": ok, "warpgroups": wg,
                                  "block_k": bk, "pipeline": pipe})
            log(f"check {pipe} wg={wg} bk={bk} bh={bh} tq={tq} tk={tk} d={d} "
                f"causal={causal} scale={scale}: err_o {e:.2e} err_lse {el:.2e} masked {mo} "
                f"{'ok' if ok else 'FAIL'}")
    return ok_all


def torch_inputs(n, d, dtype, bh=BH, tq=None, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    tq = n if tq is None else tq
    return [torch.randn((1, bh, t, d), device="cuda", dtype=dtype, generator=g)
            for t in (tq, n, n)]


def sdpa(ins, causal, backend):
    """PyTorch SDPA with the course's (bottom-right) causal mask."""
    return sdpa_bottom_right(ins, causal, backend)


def errors(doc) -> bool:
    """o's relative error against float64 beside PyTorch flash's, same rounded inputs."""
    import torch
    ok_all = True
    cases = [(4096, 4096, d, c, 2) for d in DS for c in (False, True)]
    cases += [(1000, 333, 128, True, 2), (777, 1500, 64, True, 2), (1000, 333, 64, False, 2)]
    for tk, tq, d, causal, heads in cases:
        for precision, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            ts = torch_inputs(tk, d, dt, bh=heads, tq=tq, seed=1)
            host = [t[0].float().cpu().numpy().astype(np.float64) for t in ts]
            o64, _ = reference.attention(*host, causal=causal)
            ins = [as_numba(t) if precision == "fp16" else as_bits(t) for t in ts]
            o, lse = forward(*ins, kernel="hopper", causal=causal)
            ours = rel_err(to_float(o, precision), o64)
            if precision == "bf16":    # float32 arrays, converted to bf16 on the device
                o32, _ = forward(*(as_numba(t.float()) for t in ts), kernel="hopper",
                                 causal=causal)
                ours = max(ours, rel_err(o32.copy_to_host().astype(np.float64), o64))
            theirs = rel_err(sdpa(ts, causal, "FLASH_ATTENTION")[0].float().cpu().numpy(), o64)
            ok = ours <= 2 * theirs + 1e-4
            ok_all &= ok
            doc["errors"].append({"precision": precision, "tq": tq, "tk": tk, "d": d,
                                  "causal": causal, "heads": heads, "ours_o": ours,
                                  "torch_flash_o": theirs, "ok": ok})
            log(f"err {precision} tq={tq} tk={tk} d={d} causal={causal}: ours {ours:.3e} "
                f"torch flash {theirs:.3e} {'ok' if ok else 'FAIL'}")
    return ok_all


def variants(doc, configs=None, ds=DS):
    import torch
    for d in ds:
        grid = configs or GRID[d]
        n = 4096
        fl = 4 * BH * n * n * d
        ts = torch_inputs(n, d, torch.float16)
        q, k, v = (as_numba(t) for t in ts)
        o = cuda.device_array((BH, n, d), np.float16)
        lse = cuda.device_array((BH, n), np.float32)
        for wg, bk, pipe in grid:
            res = hopper.resources("fp16", d, wg, bk, pipe)
            ms = med(bare(q, k, v, o, lse, n, d, False, "fp16", warpgroups=wg, block_k=bk,
                          pipeline=pipe))
            row = {"d": d, "warpgroups": wg, "block_k": bk, "pipeline": pipe, "ms": ms,
                   "tflops": fl / ms / 1e9, **res}
            doc["variants"].append(row)
            log(f"variant d={d} wg={wg} bk={bk} {pipe:7}: {row['tflops']:6.1f} TFLOP/s "
                f"{ms:.3f} ms regs {res['regs']} local {res['local_bytes']} "
                f"smem {res['shared_bytes']}")


def bare(q, k, v, o, lse, n, d, causal, precision, **tiles):
    """A function that only launches the kernel (compiled, checked and its arguments built
    once, before timing): the kernel's own time, without the public call's host work."""
    from flashcourse.cuda.common._launch import launch
    steps, _ = hopper.prepared(
        q.view(np.uint32), k.view(np.uint32), v.view(np.uint32), o.view(np.uint32), lse, n,
        n, d, d ** -0.5, causal, precision, **tiles)

    def go():
        for step in steps:             # the kernel, and the combine when the tail is split
            launch(*step)
    return go


def bench(doc, ns=NS, ds=DS):
    import torch
    for d in ds:
        for causal in (False, True):
            for n in ns:
                fl = 4 * BH * n * n * d / (2 if causal else 1)
                t16 = torch_inputs(n, d, torch.float16)
                tb = [t.bfloat16() for t in t16]
                q, k, v = (as_numba(t) for t in t16)
                qb, kb, vb = (as_bits(t) for t in tb)
                o = cuda.device_array((BH, n, d), np.float16)
                lse = cuda.device_array((BH, n), np.float32)
                row = {"n": n, "d": d, "causal": causal}
                fns = {"hopper_fp16": (partial(forward, q, k, v, kernel="hopper",
                                               causal=causal), "numba"),
                       "hopper_bf16": (partial(forward, qb, kb, vb, kernel="hopper",
                                               causal=causal), "numba"),
                       "hopper_fp16_raw": (bare(q, k, v, o, lse, n, d, causal, "fp16"),
                                           "numba"),
                       "tensor_core_fp16": (partial(forward, q, k, v, kernel="tensor_core",
                                                    causal=causal), "numba")}
                for name, ins in (("fp16", t16), ("bf16", tb)):
                    fns[f"torch_flash_{name}"] = (partial(sdpa, ins, causal,
                                                          "FLASH_ATTENTION"), "torch")
                    fns[f"cudnn_{name}"] = (partial(sdpa, ins, causal, "CUDNN_ATTENTION"),
                                            "torch")
                rounds = {name: [] for name in fns}
                for _ in range(BENCH_ROUNDS):  # interleaved: drift hits every kernel alike
                    for name, (fn, backend) in fns.items():
                        rounds[name].append(med(fn, backend))
                for name, ts_ in rounds.items():
                    row[f"{name}_ms"] = float(np.median(ts_))
                    row[f"{name}_rounds_ms"] = ts_
                for key in [k_ for k_ in row if k_.endswith("_ms") and "rounds" not in k_]:
                    row[key[:-3] + "_tflops"] = fl / row[key] / 1e9
                row["fp16_ratio"] = row["torch_flash_fp16_ms"] / row["hopper_fp16_ms"]
                row["bf16_ratio"] = row["torch_flash_bf16_ms"] / row["hopper_bf16_ms"]
                row["fp16_vs_cudnn"] = row["cudnn_fp16_ms"] / row["hopper_fp16_ms"]
                doc["bench"].append(row)
                log(f"bench d={d} causal={causal!s:5} N={n:5d}: hopper fp16 "
                    f"{row['hopper_fp16_tflops']:6.1f} (raw {row['hopper_fp16_raw_tflops']:6.1f})"
                    f" bf16 {row['hopper_bf16_tflops']:6.1f} | mma.sync "
                    f"{row['tensor_core_fp16_tflops']:6.1f} | flash fp16 "
                    f"{row['torch_flash_fp16_tflops']:6.1f} bf16 "
                    f"{row['torch_flash_bf16_tflops']:6.1f}"
                    f" | cudnn fp16 {row['cudnn_fp16_tflops']:6.1f} | ratio fp16 "
                    f"{row['fp16_ratio']:.2f} bf16 {row['bf16_ratio']:.2f} vs cudnn "
                    f"{row['fp16_vs_cudnn']:.2f}")
                del t16, tb
                torch.cuda.empty_cache()


AB_POINTS = [(4096, 64, False), (4096, 64, True), (4096, 128, False), (4096, 128, True),
             (8192, 128, False), (8192, 64, True)]
#: each adds one change: the skip, longest-first causal order over all heads (causal only:
#: non-causal, "skip+lpt" is "skip" again, a measure of the noise), the tail split, and the
#: lazy rescale (the default)
AB_VARIANTS = {"neither": {"skip_masked": False, "splits": 1, "order": "head-major",
                           "lazy_rescale": False},
               "skip": {"splits": 1, "order": "head-major", "lazy_rescale": False},
               "skip+lpt": {"splits": 1, "lazy_rescale": False},
               "skip+lpt+split": {"lazy_rescale": False}, "default": {}}


def ab(doc, rounds=3):
    """Version 2's scheduling changes through the public call, interleaved, same run."""
    import torch
    doc["ab"] = []
    for n, d, causal in AB_POINTS:
        fl = 4 * BH * n * n * d / (2 if causal else 1)
        t16 = torch_inputs(n, d, torch.float16)
        q, k, v = (as_numba(t) for t in t16)
        fns = {name: partial(forward, q, k, v, kernel="hopper", causal=causal, **kw)
               for name, kw in AB_VARIANTS.items()}
        times = {name: [] for name in [*fns, "torch_flash"]}
        for _ in range(rounds):
            for name, fn in fns.items():
                times[name].append(med(fn))
            times["torch_flash"].append(med(partial(sdpa, t16, causal, "FLASH_ATTENTION"),
                                            "torch"))
        row = {"n": n, "d": d, "causal": causal}
        for name, ts_ in times.items():
            row[f"{name}_ms"] = float(np.median(ts_))
            row[f"{name}_tflops"] = fl / row[f"{name}_ms"] / 1e9
            row[f"{name}_rounds_ms"] = ts_
        doc["ab"].append(row)
        log(f"ab d={d} causal={causal!s:5} N={n:5d}: " + " | ".join(
            f"{name} {row[name + '_tflops']:6.1f}" for name in times)
            + f" | default / flash {row['torch_flash_ms'] / row['default_ms']:.3f}")
        del t16
        torch.cuda.empty_cache()


def sanitize_small():
    rng = np.random.default_rng(3)
    for precision in ("fp16", "bf16"):
        for pipe, wg in (("serial", None), ("overlap", None), ("specialised", 2),
                         ("producer", 2), ("pingpong", 2)):
            for bh, tq, tk, d, causal, scale in SHAPES[1:4] + SHAPES[7:8]:
                e, *_ = check_one(rng, bh, tq, tk, d, causal, precision, scale,
                                  tiles={"pipeline": pipe, "warpgroups": wg})
                print(f"sanitize {precision} {pipe} {tq}x{tk} d={d}: err {e:.2e}")
        for bh, tq, tk, d, causal, scale in SHAPES[1:4] + SHAPES[7:8]:   # the split tail
            e, *_ = check_one(rng, bh, tq, tk, d, causal, precision, scale,
                              tiles={"splits": min(2, -(-tk // 64))})
            print(f"sanitize {precision} overlap split {tq}x{tk} d={d}: err {e:.2e}")


def smoke() -> int:
    """No GPU: each version once on a tiny ragged shape on the simulator (wgmma's twins,
    `ptx/wgmma.py`) against float64 on the rounded inputs; the numbers mean nothing."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, t, 32)).astype(np.float32) for t in (70, 90, 90))
    o_ref, _ = reference.attention(*(mma.round_fp16(x).astype(np.float64) for x in (q, k, v)),
                                   causal=True)
    ok = True
    from flashcourse.cuda.hopper.hopper_kernels import PIPELINES
    for pipeline in PIPELINES:
        o, _ = forward(q, k, v, kernel="hopper", precision="fp16", causal=True,
                       pipeline=pipeline, warpgroups=2 if pipeline == "pingpong" else 1,
                       block_k=32)
        err = rel_err(o, o_ref)
        ok = ok and err < 2e-3
        print(f"simulator smoke: {pipeline:11s} 70x90 d=32 causal: rel err {err:.2e}")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = results.benchmark_parser(__doc__, "check", "ab", "variants", "bench",
                                  "sanitize-small")
    ap.add_argument("--ns", type=int, nargs="*", default=list(NS))
    ap.add_argument("--ds", type=int, nargs="*", default=list(DS))
    ap.add_argument("--configs", nargs="*", default=[],
                    help="--variants: only these, WARPGROUPS:BLOCK_K:PIPELINE (and --check "
                         "checks each of them on every shape)")
    args = results.parse_gpu_arguments(ap, argv, __file__)
    if args.simulator_smoke:
        return smoke()
    hopper.check_capability()
    if args.sanitize_small:
        sanitize_small()
        return 0
    out = results.output_dir(args)
    doc = {"env": env.record(), "bh": BH, "what": __doc__.splitlines()[0], "checks": [],
           "errors": [], "variants": [], "bench": []}
    log(json.dumps(doc["env"]))
    t0 = time.time()
    ok = True
    rng = np.random.default_rng(0)
    configs = [(int(c.split(":")[0]), int(c.split(":")[1]), c.split(":")[2])
               for c in args.configs]
    if args.check:
        ok &= check(rng, doc, configs)
        ok &= errors(doc)
        log(f"checks {'all ok' if ok else 'FAILED'} at {time.time() - t0:.0f} s")
    if args.ab:
        ab(doc)
        log(f"ab done at {time.time() - t0:.0f} s")
    if args.variants:
        variants(doc, configs or None, tuple(args.ds))
        log(f"variants done at {time.time() - t0:.0f} s")
    if args.bench:
        bench(doc, ns=tuple(args.ns), ds=tuple(args.ds))
        log(f"bench done at {time.time() - t0:.0f} s")
    results.write_json(out, "h200_hopper.json", doc)
    results.write_output(out, "h200_hopper_log.txt", "\n".join(LOG) + "\n")
    results.finish(args, out, ok=ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
