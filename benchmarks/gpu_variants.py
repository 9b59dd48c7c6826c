"""Check and benchmark the tensor-core attention variants, forward and backward, on a GPU,
beside FlexAttention.

    python benchmarks/gpu_variants.py --check --bench [--out DIR | --record]
    python benchmarks/gpu_variants.py --simulator-smoke   # no GPU: a tiny check, fwd + bwd

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
          Backward (flashcourse.cuda.variants_backward, gradients/tc_variants_backward*.py):
--check   also runs it on every check case (o, lse from the course's forward) against
          variants.reference_backward in float64 on the same rounded inputs: per
          gradient max |g - g_ref| / max |g_ref| within 2x that of the same computation in
          numpy float32 (variants.reference.float32_backward: P and dS rounded to 16 bits
          where the kernel rounds them) + 1e-5; with torch, at N = 1024 (d 64 and 128, every
          bench mask, B = 1, H = 2) the same error against FlexAttention's backward's on
          the same rounded inputs: the course's within 2x FlexAttention's + 1e-5 (issue
          47's bar).
--bench   also times the backward in the same run: the course's as bare launches on
          prepared device arrays (pre-pass + key-major kernel) and through the public call
          with device arrays (host work included), FlexAttention's (torch.autograd.grad of
          the compiled flex_attention's output, its backward only), and for causal the
          course's built-in causal tensor-core backward (`tc_backward.run`). TFLOP/s =
          10 d x (visible pairs) x B H / time (five products of 2 d FLOPs per pair).
          FlexAttention's dq of two heads is compared with the course's before timing.
--window-scaling  the sliding window alone, timed as --bench times it: window 1024 at N =
          4096 to 65536, then windows 256 to 4096 at N = 16384 (d and precision: the first
          of --ds and --precisions); each row's time per query (us_per_query) should stay
          flat in N and grow with the window.
--masks, --ns, --ds, --precisions  subsets of the bench grid.
Writes gpu_attention_variants.json under benchmarks/out/ (or --out DIR) as it goes; --record (on a
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
from flashcourse.cuda import variants_backward, variants_forward
from flashcourse.cuda.gradients import tc_backward, tc_variants_backward as tvb
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


def torch_mods(name: str, n: int, cu=None, window=WINDOW, prefix=PREFIX):
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
        def sliding(b, h, q_idx, kv_idx):     # not named `window`: that is the width
            return (kv_idx <= q_idx) & (q_idx - kv_idx <= window)
        return sliding, None
    if name == "document":
        ids = torch.as_tensor(np.repeat(np.arange(cu.size - 1), np.diff(cu)), device="cuda")

        def document(b, h, q_idx, kv_idx):
            return (ids[q_idx] == ids[kv_idx]) & (kv_idx <= q_idx)
        return document, None
    if name == "prefix_lm":
        def prefix_lm(b, h, q_idx, kv_idx):
            return (kv_idx < prefix) | (kv_idx <= q_idx)
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


# ----------------------------------------------------------------------------- backward check
def grad_errors(got, want) -> list:
    """max |g - g_ref| / max |g_ref| of each gradient (dq, dk, dv, dsinks; None skipped)."""
    out = []
    for g, w in zip(got, want):
        if w is None:
            out.append(None)
            continue
        g = np.asarray(g, np.float64)
        out.append(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30))
                   if np.isfinite(g).all() else float("inf"))
    return out


def rounded_inputs(rng, precision, shape_q, shape_kv, spread=1.0):
    """q, k, v, dO as float32 arrays of 16-bit values (what the kernels see)."""
    r = ROUND[precision]
    q = r(rng.standard_normal(shape_q) * spread).astype(np.float32)
    k = r(rng.standard_normal(shape_kv) * spread).astype(np.float32)
    v = r(rng.standard_normal(shape_kv)).astype(np.float32)
    do = r(rng.standard_normal(shape_q)).astype(np.float32)
    return q, k, v, do


def check_backward_one(rng, precision, tq, tk, d, hq, hkv, tiles, mask, score_mod=None,
                       sinks=None, m_tiles=None) -> dict:
    """The public backward (numpy in) on o, lse from the course's forward, against float64,
    within 2x the float32 yardstick's error + 1e-5 (module doc)."""
    q, k, v, do = rounded_inputs(rng, precision, (1, hq, tq, d), (1, hkv, tk, d))
    bm = create_block_mask(mask, None, None, tq, tk, *tiles)
    o, lse = tcv.forward(q, k, v, block_mask=bm, score_mod=score_mod, sinks=sinks,
                         precision=precision, m_tiles=m_tiles)
    got = variants_backward(q, k, v, o, lse, do, block_mask=bm, score_mod=score_mod,
                            sinks=sinks, precision=precision)
    kw = dict(mask_mod=mask, score_mod=score_mod, sinks=sinks)
    want = ref.reference_backward(*(a.astype(np.float64) for a in (q, k, v, do)), **kw)
    yard = ref.float32_backward(q, k, v, o.astype(np.float32), lse, do,
                                rounding=ROUND[precision], **kw)
    errs, bars = grad_errors(got, want), grad_errors(yard, want)
    ok = all(e is None or e <= 2 * b + 1e-5 for e, b in zip(errs, bars))
    return {"precision": precision, "tq": tq, "tk": tk, "d": d, "hq": hq, "hkv": hkv,
            "tiles": list(tiles), "mask": mask.__name__,
            "score_mod": getattr(score_mod, "__name__", None), "sinks": sinks is not None,
            "errors": dict(zip(("dq", "dk", "dv", "dsinks"), errs)),
            "float32_errors": dict(zip(("dq", "dk", "dv", "dsinks"), bars)), "ok": bool(ok)}


def check_backward(doc, smoke=False) -> bool:
    rows, ok = [], True
    rng = np.random.default_rng(2027)
    for case in check_cases(smoke):
        row = check_backward_one(rng, *case)
        rows.append(row)
        ok = ok and row["ok"]
        e, b = row["errors"], row["float32_errors"]
        log(f"check bwd {row['precision']} Tq={row['tq']:5d} Tk={row['tk']:5d} d={row['d']:3d} "
            f"Hq/Hkv={row['hq']}/{row['hkv']} tiles={tuple(row['tiles'])} {row['mask']:22s} "
            f"{str(row['score_mod']):14s} sinks={row['sinks']!s:5s} "
            + " ".join(f"{n} {e[n]:.2e}/{b[n]:.2e}" for n in e if e[n] is not None)
            + f" {'ok' if row['ok'] else 'FAILED'}")
    doc["check_backward"] = rows
    log(f"check backward: {sum(r['ok'] for r in rows)}/{len(rows)} passed")
    return ok


def check_backward_flex(doc, n=1024, window=256, prefix=256) -> bool:
    """The course's backward error against FlexAttention's, both against float64 on the
    same rounded inputs (module doc); skipped with a line without torch."""
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask as flex_block_mask
        from torch.nn.attention.flex_attention import flex_attention
        torch._dynamo.config.cache_size_limit = 256
        flex = torch.compile(flex_attention, dynamic=False)
    except ImportError as e:
        log(f"backward against FlexAttention skipped: torch does not import ({e})")
        return True
    rng = np.random.default_rng(31)
    cu = doc_bounds(n, rng)
    rows, ok = [], True
    for d in DS:
        for precision in PRECISIONS:
            tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
            for name in MASKS:
                mask, score = course_mods(name, n, n, cu, window=window, prefix=prefix)
                mask_t, score_t = torch_mods(name, n, cu, window=window, prefix=prefix)
                q, k, v, do = rounded_inputs(rng, precision, (1, 2, n, d), (1, 2, n, d))
                bm = create_block_mask(mask, None, None, n, n, *tiles_of(d))
                o, lse = tcv.forward(q, k, v, block_mask=bm, score_mod=score,
                                     precision=precision)
                ours = variants_backward(q, k, v, o, lse, do, block_mask=bm,
                                         score_mod=score, precision=precision)
                t = [torch.as_tensor(a, device="cuda").to(tdt).requires_grad_(i < 3)
                     for i, a in enumerate((q, k, v, do))]
                fbm = flex_block_mask(mask_t, None, None, n, n, device="cuda")
                o_f = flex(t[0], t[1], t[2], score_mod=score_t, block_mask=fbm)
                theirs = [g.float().cpu().numpy() for g in
                          torch.autograd.grad(o_f, t[:3], t[3])] + [None]
                want = ref.reference_backward(*(a.astype(np.float64) for a in (q, k, v, do)),
                                              mask_mod=mask, score_mod=score)
                e_ours, e_flex = grad_errors(ours, want), grad_errors(theirs, want)
                good = all(a is None or a <= 2 * b + 1e-5 for a, b in zip(e_ours, e_flex))
                ok = ok and good
                row = {"n": n, "d": d, "precision": precision, "mask": name,
                       "errors": dict(zip(("dq", "dk", "dv"), e_ours)),
                       "flex_errors": dict(zip(("dq", "dk", "dv"), e_flex)), "ok": good}
                rows.append(row)
                log("check bwd vs flex " + json.dumps(row))
    doc["check_backward_flex"] = rows
    log(f"check backward against FlexAttention: {sum(r['ok'] for r in rows)}/{len(rows)} "
        f"passed")
    return ok


# ----------------------------------------------------------------------------- bench
def median_ms(fn, backend="numba"):
    times = time_cuda(fn, warmup=2, repeats=20, budget_s=1.0, backend=backend)
    return float(statistics.median(times)), len(times)


def bench(doc, masks, ns, ds, precisions, out, window=WINDOW, key="bench") -> bool:
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
    rows = doc.setdefault(key, [])
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
                do_host = rng.standard_normal((B * H, n, d), dtype=np.float32)
                dow = cuda.to_device(tc._to_words(do_host, precision, D))
                grads = [cuda.device_array((B * H, n, d), np.float32) for _ in range(3)]
                ow = cuda.device_array_like(words[0])
                ow_builtin = cuda.device_array_like(words[0])
                lse = cuda.device_array((B * H, n), np.float32)
                lse_builtin = cuda.device_array((B * H, n), np.float32)
                for name in masks:
                    mask, score = course_mods(name, n, n, cu, window=window)
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
                    if name == "sliding_window":
                        row["window"] = window
                    ms, reps = median_ms(go)
                    row["course_ms"], row["course_tflops"] = ms, flops / ms / 1e9
                    # the public call on device arrays of the same 16-bit inputs (views
                    # of the words, no copy): checks, block-mask lists, output arrays
                    dt16 = np.float16 if precision == "fp16" else np.uint16
                    qd, kd, vd = (w.view(dt16).reshape(B, H, n, d) for w in words)

                    def public(qd=qd, kd=kd, vd=vd, bm=bm, score=score, p=precision):
                        return variants_forward(qd, kd, vd, kernel="tensor_core",
                                                block_mask=bm, score_mod=score, precision=p)
                    ms_p, _ = median_ms(public)
                    row["course_public_ms"] = ms_p
                    row["course_public_tflops"] = flops / ms_p / 1e9
                    if name == "causal":
                        def builtin(w=words, o=ow_builtin, lse=lse_builtin, n=n, d=d,
                                    precision=precision):
                            tc.run(*w, o, lse, n, n, d, 1 / np.sqrt(d), True, precision)
                        ms_b, _ = median_ms(builtin)
                        row["builtin_causal_ms"] = ms_b
                        row["builtin_causal_tflops"] = flops / ms_b / 1e9
                    fbm = None
                    if torch is not None:
                        good, fbm = flex_row(row, torch, flex, flex_block_mask, tdt, host,
                                             words, ow, name, n, d, cu, precision, flops,
                                             window)
                        ok = good and ok
                    ours_dq = bench_backward(row, words, dow, ow, lse, grads, bm, mask, score,
                                             n, d, precision, flops)
                    if torch is not None:
                        ok = flex_backward_row(row, torch, flex, fbm, tdt, host, do_host, name,
                                               n, d, cu, precision, flops, ours_dq,
                                               window) and ok
                    rows.append(row)
                    log(json.dumps(row))
                    save(doc, out)
                del words, ow, lse, ow_builtin, lse_builtin, dow, grads
                if torch is not None:
                    torch.cuda.empty_cache()
    return ok


def flex_row(row, torch, flex, flex_block_mask, tdt, host, words, ow, name, n, d, cu,
             precision, flops, window=WINDOW) -> bool:
    """FlexAttention on the same 16-bit inputs: compared with the course's output (two
    heads), then timed; its BlockMask is built once, outside the timing."""
    q, k, v = (torch.as_tensor(x, device="cuda").view(B, H, n, d).to(tdt) for x in host)
    mask_t, score_t = torch_mods(name, n, cu, window=window)
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
    return good, fbm


def bench_backward(row, words, dow, ow, lse, grads, bm, mask, score, n, d, precision,
                   flops):
    """The course's backward on this mask, from the forward's o (ow) and lse just
    computed: bare launches (`tc_variants_backward.run` on prepared arrays), the public
    call with device arrays, and for causal the built-in causal backward. Returns dq of
    heads 0 and 1 (float32, host) from the bare launches, for FlexAttention's comparison."""
    bf16 = precision == "bf16"
    half = np.uint16 if bf16 else np.float16
    o16, do16 = ow.view(half), dow.view(half)                            # (B H, N, d)
    scale = 1 / np.sqrt(d)
    ld = cuda.device_array((2, B * H, -(-n // 128) * 128), np.float32)
    cfg = tvb.config(precision, d, bm.block_size)
    grad = mods.resolve_grad(score, None)
    lists = tcv.device_block_mask(bm, "q")
    bwd_flops = 2.5 * flops                # 10 d per visible pair against the forward's 4 d

    def bare():
        tvb.run(*words, dow, o16, do16, lse, *grads, lists, tq=n, tk=n, d=d, heads=H,
                group=1, scale=scale, cfg=cfg, mask_block=bm.block_size, mask_mod=mask,
                score_mod=score, score_grad=grad, delta_kind="bits" if bf16 else "float",
                ld=ld)
    ms, _ = median_ms(bare)
    row["course_bwd_ms"], row["course_bwd_tflops"] = ms, bwd_flops / ms / 1e9
    row["bwd_tiles"] = {"warps": cfg.warps, "step_q": cfg.block_q, "kv_regs": cfg.kv_regs}
    ours_dq = grads[0][:2].copy_to_host()
    dev4 = [a.view(half).reshape(B, H, n, d) for a in (*words, ow)]

    def call():
        variants_backward(*dev4, lse.reshape(B, H, n), do16.reshape(B, H, n, d),
                          block_mask=bm, score_mod=score)
    ms_c, _ = median_ms(call)
    row["course_bwd_call_ms"] = ms_c
    if row["mask"] == "causal":
        def builtin():
            tc_backward.run(*words, dow, o16, do16, lse, *grads, n, n, d, scale, True,
                            precision, ld=ld)
        ms_b, _ = median_ms(builtin)
        row["builtin_causal_bwd_ms"] = ms_b
        row["builtin_causal_bwd_tflops"] = bwd_flops / ms_b / 1e9
    return ours_dq


def flex_backward_row(row, torch, flex, fbm, tdt, host, do_host, name, n, d, cu, precision,
                      flops, ours_dq, window=WINDOW) -> bool:
    """FlexAttention's backward (torch.autograd.grad of its compiled forward's output, the
    backward alone timed) on the same 16-bit inputs; its dq of heads 0, 1 compared with the
    course's first (a sanity check: both round P and dS to 16 bits; the accuracy bar is
    --check's)."""
    q, k, v = (torch.as_tensor(x, device="cuda").view(B, H, n, d).to(tdt).requires_grad_()
               for x in host)
    do_t = torch.as_tensor(do_host, device="cuda").view(B, H, n, d).to(tdt)
    _, score_t = torch_mods(name, n, cu, window=window)
    o_f = flex(q, k, v, score_mod=score_t, block_mask=fbm)

    def run_bwd():
        return torch.autograd.grad(o_f, (q, k, v), do_t, retain_graph=True)
    dq_f = run_bwd()[0].reshape(B * H, n, d)[:2].float().cpu().numpy()
    diff = float(np.abs(ours_dq - dq_f).max() / max(np.abs(dq_f).max(), 1e-30))
    good = diff < 2 * UNIT[precision] * 16
    row["flex_bwd_max_rel_diff"], row["flex_bwd_agrees"] = diff, bool(good)
    ms, _ = median_ms(run_bwd, backend="torch")
    row["flex_bwd_ms"], row["flex_bwd_tflops"] = ms, 2.5 * flops / ms / 1e9
    return good


#: --window-scaling: N at window 1024, then the windows at N = 16384
SCALING_NS = (4096, 8192, 16384, 32768, 65536)
SCALING_WINDOWS = (256, 512, 2048, 4096)


def window_scaling(doc, d, precision, out) -> bool:
    """Issue 47's 'sliding-window time grows with the window, not with N': the sliding
    window timed as --bench times it (forward and backward, the course's and
    FlexAttention's) at window 1024 for N = 4k to 64k, and at N = 16k for other windows.
    Each row gets us_per_query = time / (B H N): flat in N, growing with the window, if the
    kernels visit only the tiles the window touches."""
    ok = True
    for n, window in [(n, WINDOW) for n in SCALING_NS] + [(16384, w) for w in SCALING_WINDOWS]:
        ok = bench(doc, ["sliding_window"], [n], [d], [precision], out, window=window,
                   key="window_scaling") and ok
        row = doc["window_scaling"][-1]
        for who in ("course", "course_bwd", "flex", "flex_bwd"):
            if row.get(f"{who}_ms"):
                row[f"{who}_us_per_query"] = 1e3 * row[f"{who}_ms"] / (B * H * n)
        log(f"window {window:5d} N {n:6d}: " + ", ".join(
            f"{who} {row[f'{who}_us_per_query'] * 1e3:.2f} ns/query"
            for who in ("course", "course_bwd", "flex", "flex_bwd")
            if f"{who}_us_per_query" in row))
        save(doc, out)
    return ok


def save(doc, out):
    results.write_json(out, "gpu_attention_variants.json", doc, "attention_variants")


# ----------------------------------------------------------------------------- main
def main(argv=None):
    ap = results.benchmark_parser(__doc__, "check", "bench")
    ap.add_argument("--masks", default=",".join(MASKS), help="comma-separated subset")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="comma-separated N")
    ap.add_argument("--ds", default=",".join(map(str, DS)), help="comma-separated d")
    ap.add_argument("--precisions", default=",".join(PRECISIONS), help="fp16,bf16")
    ap.add_argument("--window-scaling", action="store_true",
                    help="the sliding window alone, as --bench times it: window 1024 at N = "
                         "4k to 64k, then windows 256 to 4096 at N = 16k (d and precision: "
                         "the first of --ds and --precisions); rows under window_scaling")
    ap.add_argument("--check-parts", default="forward,backward,flex",
                    help="the parts of --check to run: forward, backward (against float64), "
                         "flex (the backward's error against FlexAttention's)")
    args = results.parse_gpu_arguments(ap, argv, __file__)
    if args.simulator_smoke and (args.bench or args.window_scaling):
        raise SystemExit("--simulator-smoke runs a tiny --check only (forward and "
                         "backward); timings need a GPU")
    masks = [m for m in args.masks.split(",") if m]
    bad = sorted(set(masks) - set(MASKS))
    if bad:
        raise SystemExit(f"--masks: unknown {bad}; choose from {MASKS}")
    out = results.output_dir(args)
    doc = {"environment": env.record(), "b": B, "h": H}
    log(json.dumps(doc["environment"]))
    ok = True
    parts = set(args.check_parts.split(","))
    if parts - {"forward", "backward", "flex"}:
        raise SystemExit(f"--check-parts: unknown {sorted(parts - {'forward', 'backward', 'flex'})}"
                         "; choose from forward, backward, flex")
    if args.check or args.simulator_smoke:
        if "forward" in parts:
            ok = check(doc, smoke=args.simulator_smoke)
            save(doc, out)
        if "backward" in parts:
            ok = check_backward(doc, smoke=args.simulator_smoke) and ok
            save(doc, out)
        if not args.simulator_smoke and "flex" in parts:
            ok = check_backward_flex(doc) and ok
            save(doc, out)
    if args.bench:
        ok = bench(doc, masks, [int(x) for x in args.ns.split(",")],
                   [int(x) for x in args.ds.split(",")], args.precisions.split(","),
                   out) and ok
        save(doc, out)
    if args.window_scaling:
        ok = window_scaling(doc, int(args.ds.split(",")[0]), args.precisions.split(",")[0],
                            out) and ok
    log(f"results written under {out}")
    results.finish(args, out, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
