"""Check and benchmark the tensor-core attention-variants forward on a GPU, beside FlexAttention.

    python benchmarks/gpu_variants.py --check --bench [--out DIR | --record]
    python benchmarks/gpu_variants.py --simulator-smoke         # no GPU: a tiny check

--check   flashcourse.cuda.tensor_core.variants (fp16 and bf16) against the float64
          reference (flashcourse.variants.reference) on ragged shapes (Tq != Tk, lengths
          that are not multiples of the tiles, d in {40, 64, 128}; 40 is padded to 48),
          each mask of --bench plus ALiBi, sinks and GQA 2:1, with the tiles --bench
          uses and smaller ones. Output and lse poisoned (NaN) before each run. The bound
          is the simulator tests': per element |o - o_ref| <= 2u (P|V| + |o_ref|) + 1e-5
          (u = 2^-11 fp16, 2^-8 bf16: P and o are rounded to 16 bits), per row
          |lse - lse_ref| <= 1e-5 (1 + |lse_ref|).
--bench   ms (median of CUDA-event timings after a warm-up) and TFLOP/s = 4 d x (visible
          pairs) x B H / time, at N in {4096, 16384}, d in {64, 128}, B x H = 32 (B = 2,
          H = 16), fp16 and bf16, masks: causal, sliding window 1024, document (16
          documents of random lengths, causal inside each), prefix-LM (prefix 1024),
          causal + softcap 30. Contenders, all in one run: the course's tensor-core
          variants kernel (a bare launch on prepared device arrays, its block mask built
          once outside the timing), PyTorch's flex_attention compiled with torch.compile
          (its BlockMask built once, 128 x 128 tiles), and for the causal mask the course's
          built-in causal tensor_core kernel (`tensor_core.host.run`, default tiles).
          FlexAttention's output is compared with the course's before it is timed;
          without torch it is skipped with a line.
--masks, --ns, --ds, --precisions  subsets of the bench grid.
Writes gpu_variants.json under benchmarks/out/ (or --out DIR) as it goes; --record (on a
GPU) moves it into benchmarks/results/ once the run has passed its checks.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
from flashcourse import env, results
from flashcourse.cuda.ptx.mma import round_bf16, round_fp16
from flashcourse.cuda.tensor_core import host as tc
from flashcourse.cuda.tensor_core import variants as tcv
from flashcourse.timing import time_cuda
from flashcourse.variants import library as lib, mods, reference as ref
from flashcourse.variants.block_mask import create_block_mask
from numba import cuda

NS = (4096, 16384)
DS = (64, 128)
B, H = 2, 16                      # B x H = 32
PRECISIONS = ("fp16", "bf16")
MASKS = ("causal", "sliding_window", "document", "prefix_lm", "causal_softcap")
WINDOW, PREFIX, DOCS, CAP = 1024, 1024, 16, 30.0
#: d -> the block mask's (Br, Bc): the kernel's tiles (8 warps of 16 query rows; Bc as
#: the built-in kernel's defaults on an H200, 64 up to d = 64, 128 above)
TILES = {64: (128, 64), 128: (128, 128)}


def tiles_of(d: int) -> tuple:
    return TILES.get(d, (128, 64 if d <= 64 else 128))


UNIT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
ROUND = {"fp16": round_fp16, "bf16": round_bf16}
POISON = np.uint32(0xFFFFFFFF)    # NaN in both 16-bit halves (fp16 and bf16)


def log(*a):
    print(*a, flush=True)


# ----------------------------------------------------------------------------- masks
def doc_bounds(n: int, rng, docs: int = DOCS) -> np.ndarray:
    """cu_seqlens [0, ..., n] of `docs` documents of random lengths (each >= 1)."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=docs - 1, replace=False))
    return np.concatenate([[0], cuts, [n]]).astype(np.int64)


def document_causal(cu):
    """Causal attention inside each document of cu_seqlens (Tq = Tk, at most 127
    documents), the ids held as int8. Numba places the arrays a mask_mod closes over in
    the GPU's constant memory (numba-cuda's `make_constant_array`), 64 KiB per kernel:
    `library.document`'s int64 ids take 8 N bytes per array (two arrays), past that
    above N = 4096 (not yet tried on a GPU); int8 ids take N bytes."""
    ids = np.repeat(np.arange(cu.size - 1), np.diff(cu)).astype(np.int8)

    def document_causal_mask(b, h, q_idx, kv_idx):
        return (ids[q_idx] == ids[kv_idx]) & (kv_idx <= q_idx)
    document_causal_mask.seq_lengths = (ids.size, ids.size)
    return document_causal_mask


def course_mods(name: str, tq: int, tk: int, cu=None, window=WINDOW, prefix=PREFIX,
                library_document: bool = False):
    """(mask_mod, score_mod) of the course's library for mask `name` (the document mask:
    `document_causal`, or `library.document` and causal when library_document)."""
    causal = lib.causal(tq, tk)
    if name == "causal":
        return causal, None
    if name == "sliding_window":
        return lib.sliding_window(window, tq, tk), None
    if name == "document":
        if library_document:
            return mods.and_masks(lib.document(cu), causal), None
        return document_causal(cu), None
    if name == "prefix_lm":
        return lib.prefix_lm(prefix, tq, tk), None
    if name == "causal_softcap":
        return causal, lib.softcap(CAP)
    raise ValueError(f"mask must be one of {MASKS}, got {name!r}")


def torch_mods(name: str, n: int, cu=None):
    """The same (mask_mod, score_mod) written for FlexAttention (torch tensors, Tq = Tk)."""
    import torch

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx
    if name in ("causal", "causal_softcap"):
        if name == "causal":
            return causal, None

        def softcap(score, b, h, q_idx, kv_idx):
            return CAP * torch.tanh(score / CAP)
        return causal, softcap
    if name == "sliding_window":
        def window(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (q_idx - kv_idx <= WINDOW)
        return window, None
    if name == "document":
        ids = torch.as_tensor(np.repeat(np.arange(cu.size - 1), np.diff(cu)), device="cuda")

        def document(b, h, q_idx, kv_idx):
            return (ids[q_idx] == ids[kv_idx]) & (kv_idx <= q_idx)
        return document, None
    if name == "prefix_lm":
        def prefix_lm(b, h, q_idx, kv_idx):
            return (kv_idx < PREFIX) | (kv_idx <= q_idx)
        return prefix_lm, None
    raise ValueError(f"mask must be one of {MASKS}, got {name!r}")


# ----------------------------------------------------------------------------- check
def check_one(rng, precision, tq, tk, d, hq, hkv, tiles, mask, score_mod=None, sinks=None,
              m_tiles=None) -> dict:
    """One kernel run on poisoned outputs against the float64 reference (module doc)."""
    q = rng.standard_normal((1, hq, tq, d)).astype(np.float32)
    k = rng.standard_normal((1, hkv, tk, d)).astype(np.float32)
    v = rng.standard_normal((1, hkv, tk, d)).astype(np.float32)
    bm = create_block_mask(mask, None, None, tq, tk, *tiles)
    cfg = tcv.config(precision, d, *tiles, m_tiles)
    D = cfg.head_dim
    qw, kw, vw = (cuda.to_device(tc._to_words(a.reshape(-1, a.shape[2], d), precision, D))
                  for a in (q, k, v))
    ow = cuda.to_device(np.full(qw.shape, POISON, np.uint32))
    lse = cuda.to_device(np.full(qw.shape[:2], np.nan, np.float32))
    sk = None if sinks is None else cuda.to_device(np.asarray(sinks, np.float32))
    tcv.run(qw, kw, vw, ow, lse, tcv.device_block_mask(bm), tq=tq, tk=tk, heads=hq,
            group=hq // hkv, scale=1 / np.sqrt(d), cfg=cfg, mask_mod=mask,
            score_mod=score_mod, sinks=sk)
    o = tc._from_words(ow.copy_to_host(), precision, d).reshape(q.shape)
    lse_h = lse.copy_to_host().reshape(q.shape[:3])
    r = ROUND[precision]
    q64, k64, v64 = (r(a).astype(np.float64) for a in (q, k, v))
    kw_ref = dict(mask_mod=mask, score_mod=score_mod, sinks=sinks)
    o_ref, lse_ref = ref.reference(q64, k64, v64, **kw_ref)
    pv_abs, _ = ref.reference(q64, k64, np.abs(v64), **kw_ref)
    empty = np.isneginf(lse_ref)
    bound = 2 * UNIT[precision] * (pv_abs + np.abs(o_ref)) + 1e-5
    err = np.abs(o - o_ref)
    ratio = float(np.max(np.where(np.isfinite(err), err / bound, np.inf)))
    fin = ~empty
    lerr = np.abs(lse_h[fin] - lse_ref[fin]) / (1 + np.abs(lse_ref[fin]))
    lse_worst = float(lerr.max()) if lerr.size else 0.0
    ok = (ratio <= 1 and lse_worst <= 1e-5 and not np.isnan(lse_h).any()
          and np.array_equal(np.isneginf(lse_h), empty) and bool(np.all(o[empty] == 0)))
    return {"precision": precision, "tq": tq, "tk": tk, "d": d, "hq": hq, "hkv": hkv,
            "tiles": list(tiles), "m_tiles": cfg.m_tiles, "mask": mask.__name__,
            "score_mod": getattr(score_mod, "__name__", None), "sinks": sinks is not None,
            "o_err_over_bound": ratio, "lse_err": lse_worst, "ok": bool(ok)}


def check_cases(smoke: bool):
    """(precision, tq, tk, d, hq, hkv, tiles, mask, score_mod, sinks, m_tiles) tuples."""
    if smoke:
        tq, tk = 21, 37
        return [(p, tq, tk, 16, 2, 1, (16, 16), lib.causal(tq, tk), lib.softcap(2.0),
                 np.array([0.3, -1.0]), None) for p in PRECISIONS]
    rng = np.random.default_rng(11)
    out = []
    for p in PRECISIONS:
        for (tq, tk, d) in ((300, 257, 64), (129, 1000, 128), (1000, 777, 64),
                            (517, 517, 128), (77, 130, 40)):
            others = ((64, 32), 2), ((32, 16), None)
            small = p == "fp16" and (tq, tk) in ((300, 257), (77, 130))
            for tiles, m_tiles in ((tiles_of(d), None),) + (others if small else ()):
                cu = doc_bounds(min(tq, tk), rng, docs=min(DOCS, min(tq, tk) // 4))
                cases = [
                    ("causal", None, None, 2, 1),
                    ("sliding_window", None, None, 2, 2),
                    ("document", None, None, 4, 2),
                    ("prefix_lm", lib.alibi(lib.alibi_slopes(2)), None, 2, 1),
                    ("causal_softcap", None, np.array([0.5, -2.0]), 2, 2),
                ]
                for name, extra_score, sinks, hq, hkv in cases:
                    if name == "document" and tq != tk:
                        continue          # course_mods' document mask: Tq = Tk here
                    mask, score = course_mods(name, tq, tk, cu, window=min(WINDOW, tk // 3),
                                              prefix=min(PREFIX, tk // 3),
                                              library_document=d == 64)
                    out.append((p, tq, tk, d, hq, hkv, tiles, mask, score or extra_score,
                                sinks, m_tiles))
    return out


def check(doc, smoke=False) -> bool:
    rng = np.random.default_rng(2026)
    rows, ok = [], True
    for case in check_cases(smoke):
        row = check_one(rng, *case)
        rows.append(row)
        ok = ok and row["ok"]
        log(f"check {row['precision']} Tq={row['tq']:5d} Tk={row['tk']:5d} d={row['d']:3d} "
            f"Hq/Hkv={row['hq']}/{row['hkv']} tiles={tuple(row['tiles'])} m{row['m_tiles']} "
            f"{row['mask']:22s} {str(row['score_mod']):14s} sinks={row['sinks']!s:5s} "
            f"o err/bound {row['o_err_over_bound']:.3f} lse {row['lse_err']:.2e} "
            f"{'ok' if row['ok'] else 'FAILED'}")
    doc["check"] = rows
    log(f"check: {sum(r['ok'] for r in rows)}/{len(rows)} passed")
    return ok


# ----------------------------------------------------------------------------- bench
def median_ms(fn, backend="numba"):
    times = time_cuda(fn, warmup=2, repeats=20, budget_s=1.0, backend=backend)
    return float(statistics.median(times)), len(times)


def bench(doc, masks, ns, ds, precisions, out) -> bool:
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask as flex_block_mask
        from torch.nn.attention.flex_attention import flex_attention
        torch._dynamo.config.cache_size_limit = 256
        flex = torch.compile(flex_attention, dynamic=False)
    except ImportError as e:
        torch = None
        log(f"FlexAttention skipped: torch does not import ({e})")
    rng = np.random.default_rng(7)
    rows = doc.setdefault("bench", [])
    ok = True
    for n in ns:
        cu = doc_bounds(n, rng)
        for d in ds:
            br, bc = tiles_of(d)
            for precision in precisions:
                tdt = None if torch is None else {"fp16": torch.float16,
                                                  "bf16": torch.bfloat16}[precision]
                host = [rng.standard_normal((B * H, n, d), dtype=np.float32) for _ in range(3)]
                D = d
                words = [cuda.to_device(tc._to_words(x, precision, D)) for x in host]
                ow = cuda.device_array_like(words[0])
                ow_builtin = cuda.device_array_like(words[0])
                lse = cuda.device_array((B * H, n), np.float32)
                lse_builtin = cuda.device_array((B * H, n), np.float32)
                for name in masks:
                    mask, score = course_mods(name, n, n, cu)
                    t0 = time.perf_counter()
                    bm = create_block_mask(mask, None, None, n, n, br, bc)
                    build_s = time.perf_counter() - t0
                    flops = 4.0 * d * bm.visible_pairs * B * H
                    cfg = tcv.config(precision, d, br, bc)
                    go = tcv.launcher(*words, ow, lse, tcv.device_block_mask(bm), tq=n, tk=n,
                                      heads=H, group=1, scale=1 / np.sqrt(d), cfg=cfg,
                                      mask_mod=mask, score_mod=score)
                    row = {"n": n, "d": d, "precision": precision, "mask": name,
                           "tiles": [br, bc], "visible_pairs": int(bm.visible_pairs),
                           "tiles_state": bm.tiles(), "block_mask_build_s": build_s}
                    ms, reps = median_ms(go)
                    row["course_ms"], row["course_tflops"] = ms, flops / ms / 1e9
                    if name == "causal":
                        def builtin(w=words, o=ow_builtin, lse=lse_builtin, n=n, d=d,
                                    precision=precision):
                            tc.run(*w, o, lse, n, n, d, 1 / np.sqrt(d), True, precision)
                        ms_b, _ = median_ms(builtin)
                        row["builtin_causal_ms"] = ms_b
                        row["builtin_causal_tflops"] = flops / ms_b / 1e9
                    if torch is not None:
                        ok = flex_row(row, torch, flex, flex_block_mask, tdt, host, words,
                                      ow, name, n, d, cu, precision, flops) and ok
                    rows.append(row)
                    log(json.dumps(row))
                    save(doc, out)
                del words, ow, lse, ow_builtin, lse_builtin
                if torch is not None:
                    torch.cuda.empty_cache()
    return ok


def flex_row(row, torch, flex, flex_block_mask, tdt, host, words, ow, name, n, d, cu,
             precision, flops) -> bool:
    """FlexAttention on the same 16-bit inputs: compared with the course's output (two
    heads), then timed; its BlockMask is built once, outside the timing."""
    q, k, v = (torch.as_tensor(x, device="cuda").view(B, H, n, d).to(tdt) for x in host)
    mask_t, score_t = torch_mods(name, n, cu)
    t0 = time.perf_counter()
    fbm = flex_block_mask(mask_t, None, None, n, n, device="cuda")
    row["flex_block_mask_build_s"] = time.perf_counter() - t0

    def run_flex():
        return flex(q, k, v, score_mod=score_t, block_mask=fbm)
    o_f = run_flex()
    torch.cuda.synchronize()
    ours = tc._from_words(ow[:2].copy_to_host(), precision, d)          # heads 0, 1
    theirs = o_f.reshape(B * H, n, d)[:2].float().cpu().numpy()
    diff = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))
    row["flex_max_rel_diff"] = diff
    good = diff < 2 * UNIT[precision] * 8          # both round P and o to 16 bits
    row["flex_agrees"] = bool(good)
    ms, _ = median_ms(run_flex, backend="torch")
    row["flex_ms"], row["flex_tflops"] = ms, flops / ms / 1e9
    return good


def save(doc, out):
    results.write_json(out, "gpu_variants.json", doc)


# ----------------------------------------------------------------------------- main
def main(argv=None):
    ap = results.benchmark_parser(__doc__, "check", "bench")
    ap.add_argument("--masks", default=",".join(MASKS), help="comma-separated subset")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="comma-separated N")
    ap.add_argument("--ds", default=",".join(map(str, DS)), help="comma-separated d")
    ap.add_argument("--precisions", default=",".join(PRECISIONS), help="fp16,bf16")
    results.add_output_arguments(ap)
    args = ap.parse_args(argv)
    results.check_outputs(args, __file__)
    results.require_gpu("benchmarks/gpu_variants.py", args.simulator_smoke)
    if args.simulator_smoke and args.bench:
        raise SystemExit("--simulator-smoke runs a tiny --check only; timings need a GPU")
    masks = [m for m in args.masks.split(",") if m]
    bad = sorted(set(masks) - set(MASKS))
    if bad:
        raise SystemExit(f"--masks: unknown {bad}; choose from {MASKS}")
    out = results.output_dir(args)
    doc = {"env": env.record(), "b": B, "h": H}
    log(json.dumps(doc["env"]))
    ok = True
    if args.check or args.simulator_smoke:
        ok = check(doc, smoke=args.simulator_smoke)
        save(doc, out)
    if args.bench:
        ok = bench(doc, masks, [int(x) for x in args.ns.split(",")],
                   [int(x) for x in args.ds.split(",")], args.precisions.split(","),
                   out) and ok
        save(doc, out)
    log(f"results written under {out}")
    results.finish(args, out, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
