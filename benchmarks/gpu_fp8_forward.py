"""Check and time the FP8 (e4m3) Hopper forward, `flashcourse.cuda.hopper.fp8` (issue 53).

    python benchmarks/gpu_fp8_forward.py --check --bench [--out DIR | --record]
    python benchmarks/gpu_fp8_forward.py --check --variants      # wg 2/3, block_k 64/128

--check     the kernel against its numpy twin `fp8.attention.fp8_attention` (same codes,
            scales, key_block 128, P~ = 2^8 exp(S - m) rounded to e4m3) and against float64,
            on FlashAttention-3's outlier inputs (N(0,1) + N(0,100) Bernoulli(0.001)):
            irregular shapes (Tq != Tk, lengths off the tiles, Tq = 1, d = 64, 80, 96, 128),
            causal (bottom-right) off and on, scales per tensor, per head and per 128-token
            block, with and without the Hadamard rotation. Passes when, per case, the
            kernel's RMSE against float64 is within 5% of the numpy model's, the largest
            |kernel - model| is at most 5% of max |o| (a P~ that rounds the other way moves o by
            one e4m3 step of its weight), and lse is within its bound of the float64 lse of
            the dequantized Q and K: scale 2^-11 max_j sum_c |q_c k_jc| + 1e-3 per row
            (Hopper's FP8 tensor cores keep about 13-14 bits while summing: the first H100
            run, results/h100_fp8_forward_run1_log.txt, failed a flat 0.02 with errors of
            up to 0.032); the rows with no visible key: -inf in both.
            The device quantization (`fp8.forward_device_float` on float16 device arrays,
            block scales, with and without Hadamard) against the host's on the same values.
            Then the outlier test at 4 heads x 4096 x 128: RMSE of each scheme on the GPU and
            in numpy, and issue 53's bar (block + Hadamard <= 0.5 x per tensor, <= 1.1e-2).
--bench     B x H = 32, N in {4096, 8192, 16384}, d = 128 (and 64), causal off and on: the
            FP8 public call with device arrays (`fp8.forward_device`: V's transpose and the
            kernel), the same from float16 device arrays (`fp8.forward_device_float`: Q, K
            and V quantized on the device, one scale per head, first), the kernel alone in
            each version (V already transposed), the course's fp16 `hopper`
            forward (public call), PyTorch SDPA flash and cuDNN in fp16, all in the same
            run; medians of CUDA-event timings, every kernel in turn per round; TFLOP/s =
            4 N^2 d per head (half when causal); the ratios FP8 / hopper fp16 and FP8 /
            cuDNN fp16 against issue 53's bars (>= 1.6x and >= 1.0x).
--record    on a GPU: benchmarks/results/<gpu>_fp8_forward.json (+ _log.txt).
"""
from __future__ import annotations

import sys
from functools import partial

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse import env, reference, results
from flashcourse.cuda import forward as public_forward
from flashcourse.cuda.hopper import fp8
from flashcourse.fp8 import attention as fa

LOG: list = []


def log(*a):
    line = " ".join(str(x) for x in a)
    LOG.append(line)
    print(line, flush=True)

BH, BENCH_ROUNDS = 32, 3
NS, DS = (4096, 8192, 16384), (128, 64)
#: (heads, Tq, Tk, d, causal, scheme, hadamard)
CASES = [(2, 200, 300, 128, False, "block", False), (2, 300, 200, 128, True, "block", False),
         (3, 1000, 1000, 64, True, "head", False), (2, 129, 257, 80, False, "tensor", False),
         (2, 513, 1024, 128, True, "block", True), (1, 1, 700, 128, False, "head", False),
         (2, 640, 640, 96, True, "block", True), (2, 384, 384, 128, False, "block", False),
         (1, 1100, 1100, 128, True, "tensor", True), (2, 700, 130, 64, True, "block", False)]
TOL_RMSE, TOL_MAX, TOL_LSE = 0.05, 0.05, 2e-2   # TOL_LSE: device vs host quantization
#: (pipeline, warpgroups) of the kernels timed alone (block_k 128)
VARIANTS = (("serial", 3), ("serial", 2), ("overlap", 2), ("overlap", 3))


def check_case(rng, heads, tq, tk, d, causal, scheme, had, **tiles):
    q, k, v = fa.outlier_qkv(rng, (heads, tq, d), (heads, tk, d))
    q8, k8, v8 = fp8.quantize(q, k, v, scheme=scheme, block=128, hadamard=had)
    o, lse = fp8.forward(q8, k8, v8, causal=causal, **tiles)
    model = fa.fp8_attention(q, k, v, scheme=scheme, block=128, hadamard=had, key_block=128,
                             causal=causal)
    ref, ref_lse = reference.attention(q.astype(np.float64), k.astype(np.float64),
                                       v.astype(np.float64), causal=causal)
    # lse of the dequantized Q, K in float64: what the kernel's lse must equal (P's
    # rounding does not enter it; only the tensor cores' sums and fp32 do)
    kdq = k8.dequantize().astype(np.float64)           # (its columns padded with Hadamard)
    qdq = q8.dequantize().astype(np.float64)
    _, dq_lse = reference.attention(qdq, kdq, kdq, causal=causal, scale=d ** -0.5)
    # Hopper's FP8 tensor cores keep about 13-14 bits while they sum (notebook 15): a score
    # may be off by 2^-11 sum_c |q_c k_c| (a margin of 4x), and lse by at most the largest
    # such error in its row
    lse_bound = d ** -0.5 * 2.0 ** -11 * (np.abs(qdq) @ np.swapaxes(np.abs(kdq), -1, -2)
                                          ).max(axis=-1) + 1e-3
    o = o.astype(np.float64)
    vis = np.isfinite(ref_lse)
    r_k, r_m = fa.rmse(o, ref), fa.rmse(model, ref)
    dmax = float(np.abs(o - model).max() / max(np.abs(model).max(), 1e-30))
    lse_err = float(np.abs(lse[vis] - dq_lse[vis]).max()) if vis.any() else 0.0
    lse_ratio = float((np.abs(lse[vis] - dq_lse[vis]) / lse_bound[vis]).max()) \
        if vis.any() else 0.0
    ok = (np.isfinite(o).all() and abs(r_k - r_m) <= TOL_RMSE * r_m and dmax <= TOL_MAX
          and np.array_equal(np.isfinite(lse), vis) and lse_ratio <= 1.0)
    row = {"heads": heads, "tq": tq, "tk": tk, "d": d, "causal": causal, "scheme": scheme,
           "hadamard": had, **tiles, "rmse_kernel": r_k, "rmse_model": r_m,
           "max_diff_vs_model": dmax, "lse_max_err": lse_err,
           "lse_err_over_bound": lse_ratio, "ok": bool(ok)}
    log(f"check {'ok  ' if ok else 'FAIL'} H={heads} Tq={tq} Tk={tk} d={d} causal={causal} "
        f"{scheme}{' +H' if had else ''} {tiles or ''}: rmse kernel {r_k:.3e} model {r_m:.3e}, "
        f"max|kernel-model|/max|o| {dmax:.2e}, lse err {lse_err:.2e} "
        f"({lse_ratio:.2f} of its bound)")
    return row


def check_device_path(rng, bh, tq, tk, d, causal, scheme, had):
    """fp8.forward_device_float (quantize_device, transpose, kernel) on float16 device arrays
    against fp8.forward on the host's quantization of the same float16 values."""
    q, k, v = (x.astype(np.float16) for x in fa.outlier_qkv(rng, (bh, tq, d), (bh, tk, d)))
    o_dev, lse_dev = fp8.forward_device_float(*(cuda.to_device(x) for x in (q, k, v)),
                                              causal=causal, scheme=scheme, block=128,
                                              hadamard=had)
    o_dev = o_dev.copy_to_host()[..., :d].astype(np.float64)
    o_host, lse_host = fp8.forward(*fp8.quantize(q, k, v, scheme=scheme, block=128,
                                                 hadamard=had), causal=causal)
    ref, ref_lse = reference.attention(q.astype(np.float64), k.astype(np.float64),
                                       v.astype(np.float64), causal=causal)
    r_dev, r_host = fa.rmse(o_dev, ref), fa.rmse(o_host, ref)
    dmax = float(np.abs(o_dev - o_host).max() / max(np.abs(o_host).max(), 1e-30))
    vis = np.isfinite(ref_lse)
    lse_dev = lse_dev.copy_to_host()
    lse_err = float(np.abs(lse_dev[vis] - lse_host[vis]).max()) if vis.any() else 0.0
    ok = (np.isfinite(o_dev).all() and abs(r_dev - r_host) <= TOL_RMSE * r_host
          and dmax <= TOL_MAX and lse_err <= TOL_LSE)
    log(f"check {'ok  ' if ok else 'FAIL'} device quantization H={bh} Tq={tq} Tk={tk} d={d} "
        f"causal={causal} {scheme}{' +H' if had else ''}: rmse device {r_dev:.3e} host "
        f"{r_host:.3e}, max|dev-host|/max|o| {dmax:.2e}, lse {lse_err:.2e}")
    return {"path": "device quantization", "heads": bh, "tq": tq, "tk": tk, "d": d,
            "causal": causal, "scheme": scheme, "hadamard": had, "rmse_device": r_dev,
            "rmse_host": r_host, "max_diff_vs_host": dmax, "lse_max_diff": lse_err,
            "ok": bool(ok)}


def check(doc, variants: bool) -> bool:
    rng = np.random.default_rng(0)
    rows = []
    for case in CASES:
        try:
            rows.append(check_case(rng, *case))
        except Exception as exc:                       # noqa: BLE001 (recorded, fails)
            log(f"check FAIL {case}: {type(exc).__name__}: {str(exc)[:400]}")
            rows.append({"case": list(case), "ok": False, "error": str(exc)[:400]})
    # quantized on the device from float16 device arrays, against the host's quantization
    for bh, tq, tk, d, causal, scheme, had in ((2, 300, 500, 128, True, "block", True),
                                                (2, 257, 129, 64, False, "head", False),
                                                (1, 200, 400, 96, True, "block", True)):
        rows.append(check_device_path(rng, bh, tq, tk, d, causal, scheme, had))
    if variants:
        for p in fp8.PIPELINES:
            for wg in (1, 2, 3):
                for bk in (64, 128):
                    rows.append(check_case(rng, 2, 300, 500, 128, True, "head", False,
                                           warpgroups=wg, block_k=bk, pipeline=p))
            rows.append(check_case(rng, 2, 513, 1024, 96, True, "block", True,
                                   warpgroups=2, pipeline=p))
    doc["check"] = rows
    ok = all(r["ok"] for r in rows)
    # the outlier test at a larger size, every scheme on the GPU and in numpy
    q, k, v = fa.outlier_qkv(np.random.default_rng(1), (4, 4096, 128), (4, 4096, 128))
    ref = fa.reference(q, k, v)
    table = {}
    for label, kw in fa.ERROR_ROWS:
        if kw is None:
            continue
        kw = dict(kw)
        had = kw.pop("hadamard", False)
        o, _ = fp8.forward(*fp8.quantize(q, k, v, scheme=kw["scheme"], block=128,
                                         hadamard=had))
        model = fa.fp8_attention(q, k, v, scheme=kw["scheme"], block=128, hadamard=had,
                                 key_block=128)
        table[label] = {"gpu": fa.rmse(o, ref), "numpy": fa.rmse(model, ref)}
        log(f"outlier test 4x4096x128 {label:28s}: GPU {table[label]['gpu']:.3e}, numpy "
            f"{table[label]['numpy']:.3e}")
    bh = table["FP8 per block + Hadamard"]["gpu"]
    pt = table["FP8 per tensor"]["gpu"]
    doc["outlier_test"] = {"shape": [4, 4096, 128], "block": 128, "rmse": table,
                           "ratio_block_hadamard_vs_tensor": bh / pt,
                           "bar_ratio_0.5": bh / pt <= 0.5, "bar_abs_1.1e-2": bh <= 1.1e-2,
                           "gpu_numpy_agree_5pct": all(
                               abs(r["gpu"] - r["numpy"]) <= 0.05 * r["numpy"]
                               for r in table.values())}
    log(f"outlier test: block + Hadamard / per tensor = {bh / pt:.3f} (bar <= 0.5), "
        f"block + Hadamard {bh:.3e} (bar <= 1.1e-2)")
    return ok


def fp8_inputs(torch, n, d, seed=0):
    """Device e4m3 codes (BH, n, d) uint8 and per-head scales, from torch randn."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(3):
        x = torch.randn((BH, n, d), device="cuda", generator=g)
        s = x.abs().amax(dim=(1, 2), keepdim=True) / 448.0
        codes = (x / s).to(torch.float8_e4m3fn).view(torch.uint8).contiguous()
        out += [codes, s.reshape(BH, 1).float().contiguous()]
    return out


def bench(doc, ns, ds):
    import torch
    # the GPU scripts' shared helpers (benchmarks/, on the path when run as a script)
    from gpu_bars import as_numba, med, sdpa_bottom_right
    doc["bench"] = []
    for d in ds:
        for causal in (False, True):
            for n in ns:
                fl = 4 * BH * n * n * d / (2 if causal else 1)
                qc, qs, kc, ks, vc, vs = (as_numba_plain(t) for t in fp8_inputs(torch, n, d))
                t16 = [torch.randn((1, BH, n, d), device="cuda", dtype=torch.float16)
                       for _ in range(3)]
                q16, k16, v16 = (as_numba(t) for t in t16)
                t16_3 = [as_numba_plain(t[0]) for t in t16]          # (BH, n, d)
                cfg = fp8.plan(d)
                kp = -(-n // cfg.block_k) * cfg.block_k
                vt = cuda.device_array(BH * d * kp // 4, np.uint32)
                o = cuda.device_array((BH, n, d // 2), np.uint32)
                lse = cuda.device_array((BH, n), np.float32)
                words = [x.reshape(x.size).view(np.uint32) for x in (qc, kc, vc)]
                fp8.transpose(words[2], vt, d, BH, n, kp)
                common = dict(cfg=cfg, bh=BH, tq=n, tk=n, kp=kp, scale=d ** -0.5,
                              causal=causal, qblk=1 << 30, kblk=1 << 30, out=(o, lse))
                fns = {
                    "fp8_public": (partial(fp8.forward_device, qc, kc, vc, qs, ks, vs,
                                           scale=d ** -0.5, causal=causal), "numba"),
                    "fp8_from_fp16": (partial(fp8.forward_device_float, *t16_3,
                                              causal=causal, scheme="head"), "numba"),
                    "fp8_transpose_and_kernel": (partial(fp8.run, *words, vt, qs, ks, vs,
                                                         **common), "numba"),
                    **{f"fp8_kernel_{p}_wg{wg}": (partial(
                        fp8.attention, words[0], words[1], vt, qs, ks, vs,
                        **{**common, "cfg": fp8.plan(d, wg, 128, p)}), "numba")
                       for p, wg in VARIANTS},
                    "hopper_fp16": (partial(public_forward, q16, k16, v16, kernel="hopper",
                                            causal=causal), "numba"),
                    "torch_flash_fp16": (partial(sdpa_bottom_right, t16, causal,
                                                 "FLASH_ATTENTION"), "torch"),
                    "cudnn_fp16": (partial(sdpa_bottom_right, t16, causal,
                                           "CUDNN_ATTENTION"), "torch")}
                rounds = {name: [] for name in fns}
                for _ in range(BENCH_ROUNDS):
                    for name, (fn, backend) in fns.items():
                        rounds[name].append(med(fn, backend))
                row = {"n": n, "d": d, "causal": causal}
                for name, ts in rounds.items():
                    row[f"{name}_ms"] = float(np.median(ts))
                    row[f"{name}_tflops"] = fl / row[f"{name}_ms"] / 1e9
                row["fp8_vs_hopper_fp16"] = row["hopper_fp16_ms"] / row["fp8_public_ms"]
                row["fp8_vs_cudnn_fp16"] = row["cudnn_fp16_ms"] / row["fp8_public_ms"]
                row["fp8_from_fp16_vs_hopper_fp16"] = (row["hopper_fp16_ms"]
                                                       / row["fp8_from_fp16_ms"])
                doc["bench"].append(row)
                log(f"bench d={d} causal={causal!s:5} N={n:5d}: fp8 public "
                    f"{row['fp8_public_tflops']:6.1f} kernels " + " ".join(
                        f"{p[0]}{wg} {row[f'fp8_kernel_{p}_wg{wg}_tflops']:6.1f}"
                        for p, wg in VARIANTS) + " | "
                    f"hopper fp16 {row['hopper_fp16_tflops']:6.1f} cudnn "
                    f"{row['cudnn_fp16_tflops']:6.1f} flash {row['torch_flash_fp16_tflops']:6.1f}"
                    f" | fp8/hopper16 {row['fp8_vs_hopper_fp16']:.2f} fp8/cudnn "
                    f"{row['fp8_vs_cudnn_fp16']:.2f}")


def as_numba_plain(t):
    return cuda.as_cuda_array(t.detach())


def smoke() -> int:
    """No GPU: V's transpose kernel on the simulator against its numpy model, then --check's
    comparison on two tiny cases (the attention kernel through wgmma's twins, `ptx/wgmma.py`;
    tests/test_hopper_simulator.py checks more)."""
    from flashcourse.cuda.hopper import fp8_layouts
    rng = np.random.default_rng(0)
    bh, tk, d = 2, 100, 64
    v = rng.integers(0, 256, (bh, tk, d), dtype=np.uint8)
    vt = cuda.device_array(bh * d * 128 // 4, np.uint32)
    fp8.transpose(cuda.to_device(v.reshape(-1).view(np.uint32)), vt, d, bh, tk, 128)
    ok = np.array_equal(vt.copy_to_host().view(np.uint8).reshape(bh, d, 128),
                        fp8_layouts.transpose_v(v, 128))
    log(f"simulator smoke: V's transpose {'matches' if ok else 'DOES NOT match'} its model")
    for case in ((1, 40, 70, 64, True, "block", False), (1, 1, 50, 32, False, "head", True)):
        ok = check_case(rng, *case, warpgroups=1, block_k=64)["ok"] and ok
    return 0 if ok else 1


def main(argv=None):
    ap = results.benchmark_parser(__doc__, "check", "bench", "variants")
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--ds", default=",".join(map(str, DS)))
    args = results.parse_gpu_arguments(ap, argv, __file__)
    if args.simulator_smoke:
        return smoke()
    fp8.check_capability()
    doc = {"environment": env.record(), "timing": "CUDA events, median of 10 after 3 warm-up, "
           f"median of {BENCH_ROUNDS} interleaved rounds"}
    out = results.output_dir(args)
    ok = True
    try:
        if args.check or args.variants:
            ok = check(doc, args.variants)
        if args.bench:
            bench(doc, [int(x) for x in args.ns.split(",")], [int(x) for x in args.ds.split(",")])
    finally:
        doc["log"] = LOG
        stem = "gpu_fp8_forward"
        if args.record:
            gpu = (doc["environment"].get("gpu") or "gpu").lower()
            stem = ("h100" if "h100" in gpu else "h200" if "h200" in gpu else "gpu") + \
                "_fp8_forward"
        results.write_json(out, f"{stem}.json", doc, "fp8_forward")
        results.write_output(out, f"{stem}_log.txt", "\n".join(LOG) + "\n")
    results.finish(args, out, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
