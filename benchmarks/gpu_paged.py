"""Check and benchmark paged KV-cache decoding (flashcourse.cuda.paged_decode) on a GPU.

    python benchmarks/gpu_paged.py --check --bench            # -> benchmarks/out/gpu_paged.json
    python benchmarks/gpu_paged.py --check --bench --record   # -> results/<gpu>_gpu_paged.json
    python benchmarks/gpu_paged.py --simulator-smoke          # no GPU needed

--check   paged_decode against the float64 reference (`paged_cache.paged_reference`) on
          ragged shapes: pages 16/64/256, lengths not multiples of a page, length 1,
          GQA groups 1/4/8, Tq 1 and 4 with causal, shuffled block tables, a shared
          prefix, fp32 (relative error <= 1e-5) and fp16 (error of o at most 2x PyTorch
          SDPA's on the same fp16 inputs, or 2x the float32 numpy decode's without torch);
          paged equal bit for bit to cuda.decode on the gathered cache where both cut the
          same splits; the append kernel equal to the numpy append; and the CUDA graph:
          `run(plan, ...)` captured once, replayed over 4 sets of lengths, equal bit for
          bit to the uncaptured call.
--bench   fp16, d = 128:
          table   the decode table's shapes (B x Hkv in {1, 8, 32}, Tk in {16k, 64k, 128k},
                  Tq in {1, 4}: benchmarks/gpu_host_path.py's DECODE_PROBLEMS) at GQA groups
                  1, 4, 8 and pages 16, 64, 256, paged (`run` on its plan, pages in a
                  shuffled order) against the contiguous decode (the kernels cuda.decode
                  launches) in the same run: ratio = contiguous time / paged time.
          ragged  32 requests, lengths spread evenly over 1k .. 128k (shuffled), Hkv = 8, G
                  1/4/8, pages 16/64/256: GB/s on the K/V bytes actually read (sum of the
                  lengths x 2 Hkv d x 2 B) against a device copy's rate (read + write of
                  1 GiB), PyTorch SDPA flash on the batch padded to a contiguous
                  (B, Hkv, 128k, d) cache (it reads every padded key, the cost of padding;
                  its results for the shorter requests are not the requests' attention),
                  and the paged decode at fixed targets beside the heuristic's.
          graph   one captured `run` replayed: its time beside the uncaptured call's.
Timing (as gpu_decode.py): CUDA events around each call, the L2 cache flushed (256 MiB
write) before each, warm-up first, the median of the repeats.

CUDA graphs with numba-cuda 0.30: the launches of `run` go to a Numba stream whose
capture is started and ended with cuda-bindings' driver API (cuStreamBeginCapture /
cuStreamEndCapture / cuGraphInstantiate / cuGraphLaunch), the route
flashcourse/cuda/common/host_plans.py already uses for `cuda.capture`; the kernels are
compiled and loaded by an uncaptured call first (loading a module is not allowed while a
stream captures). If that fails, torch.cuda.graph with the launches on
numba.cuda.external_stream(torch.cuda.current_stream().cuda_stream) is tried; the JSON
says which route ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse import decode as np_decode
from flashcourse import paged_cache as pc
from flashcourse import results
from flashcourse.cuda import decode as cuda_decode
from flashcourse.cuda import paged_decode
from flashcourse.cuda.decoding import decode_kernels as dk
from flashcourse.cuda.decoding import paged
from flashcourse.timing import rel_err

D = 128
GROUPS = (1, 4, 8)
PAGES = (16, 64, 256)
RAGGED = 32
LOG_TO = None


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    if LOG_TO is not None:
        results.append_output(*LOG_TO, line + "\n")


def decode_table():
    """(B x Hkv, Tk, Tq) of the decode table (gpu_host_path.DECODE_PROBLEMS), G apart."""
    return sorted({(bhkv, tk, tq) for bhkv, tk, _, tq in _sibling("gpu_host_path").DECODE_PROBLEMS})


def scatter(rng, k, page_size):
    """A contiguous (B, Hkv, L, d) cache (numpy) into a pool of shuffled pages: (k_pages,
    block_table)."""
    b, hkv, n, d = k.shape
    per = pc.pages_for(n, page_size)
    order = rng.permutation(b * per).astype(np.int32)
    table = order.reshape(b, per)
    pad = np.zeros((b, hkv, per * page_size, d), k.dtype)
    pad[:, :, :n] = k
    pages = np.zeros((b * per, hkv, page_size, d), k.dtype)
    pages[table.reshape(-1)] = pad.reshape(b, hkv, per, page_size, d).transpose(
        0, 2, 1, 3, 4).reshape(b * per, hkv, page_size, d)
    return pages, table


# ----------------------------------------------------------------------------- check
CHECK_SHAPES = [
    # B, Hq, Hkv, Tq, d, page_size, lengths, causal
    (3, 2, 2, 1, 128, 16, (37, 1, 16), False),
    (2, 8, 2, 4, 128, 64, (300, 3), True),            # G = 4, Tq = 4 > one length
    (2, 8, 1, 1, 128, 256, (1000, 257), True),        # G = 8
    (4, 4, 4, 1, 64, 16, (5000, 1, 64, 333), False),
    (2, 16, 2, 4, 128, 64, (4097, 70), True),         # G = 8, Tq = 4: 32 rows
]


def fp16_bound(q, kp, vp, bt, lens, causal, o_ref):
    """What the fp16 o may differ from float64 by: 2x PyTorch SDPA's error on the same
    fp16 inputs (per sequence, K/V gathered), or 2x the float32 numpy decode's."""
    errs = []
    try:
        import torch
        import torch.nn.functional as F
        if not torch.cuda.is_available():
            raise ImportError("no CUDA in torch")
        for b, n in enumerate(lens.tolist()):
            g = q.shape[1] // kp.shape[1]
            k = torch.from_numpy(pc.gather(kp, bt, b, n)).cuda().repeat_interleave(g, 0)
            v = torch.from_numpy(pc.gather(vp, bt, b, n)).cuda().repeat_interleave(g, 0)
            qt = torch.from_numpy(q[b]).cuda()
            tq = q.shape[2]
            mask = None
            if causal:
                mask = (torch.arange(n, device="cuda")[None, :]
                        <= torch.arange(tq, device="cuda")[:, None] + n - tq)
            o = F.scaled_dot_product_attention(qt, k, v, attn_mask=mask).float().cpu().numpy()
            fin = np.isfinite(o)
            errs.append(np.abs(o[fin] - o_ref[b][fin]).max() if fin.any() else 0.0)
        return 2 * max(errs) + 1e-6, "torch_sdpa"
    except ImportError:
        pass
    o32 = np.zeros(q.shape)
    for b, n in enumerate(lens.tolist()):
        k = pc.gather(kp, bt, b, n)[None].astype(np.float32)
        v = pc.gather(vp, bt, b, n)[None].astype(np.float32)
        o32[b] = np_decode.split_kv_forward(q[b:b + 1].astype(np.float32), k, v,
                                            causal=causal)[0][0].astype(np.float16)
    return 2 * np.abs(o32 - o_ref).max() + 1e-6, "float32_numpy"


def check(rng, doc, shapes=CHECK_SHAPES, dtypes=(np.float32, np.float16), graph=True,
          small=False):
    """small: the extra checks at simulator sizes (d = 16, few work items)."""
    rows = []
    for (b, hq, hkv, tq, d, ps, lens, causal) in shapes:
        lens = np.array(lens, np.int32)
        width = pc.pages_for(int(lens.max()), ps) + 1
        num_pages = sum(pc.pages_for(n, ps) for n in lens.tolist()) + 3
        table = np.full((b, width), -1, np.int32)
        order, at = rng.permutation(num_pages), 0
        for i, n in enumerate(lens.tolist()):
            table[i, :pc.pages_for(n, ps)] = order[at:at + pc.pages_for(n, ps)]
            at += pc.pages_for(n, ps)
        if b > 1 and pc.pages_for(int(lens[1]), ps) > 1:       # a shared first page
            table[1, 0] = table[0, 0]
        for dt in dtypes:
            q = rng.standard_normal((b, hq, tq, d)).astype(dt)
            kp = rng.standard_normal((num_pages, hkv, ps, d)).astype(dt)
            vp = rng.standard_normal((num_pages, hkv, ps, d)).astype(dt)
            o_ref, lse_ref = pc.paged_reference(q, kp, vp, table, lens, causal=causal)
            o, lse = paged_decode(q, kp, vp, table, lens, causal=causal)
            fin = np.isfinite(lse_ref)
            empty_ok = bool(np.array_equal(np.isneginf(lse), ~fin) and np.all(o[~fin] == 0))
            e_l = rel_err(lse[fin], lse_ref[fin]) if fin.any() else 0.0
            if dt == np.float32:
                e_o, bound, how = rel_err(o, o_ref), 1e-5, "relative"
            else:
                e_o = float(np.abs(o.astype(np.float64) - o_ref).max())
                bound, how = fp16_bound(q, kp, vp, table, lens, causal, o_ref)
            ok = empty_ok and e_o <= bound and e_l <= 1e-5
            rows.append({"shape": [b, hq, hkv, tq, d], "page_size": ps, "lens": lens.tolist(),
                         "causal": causal, "dtype": np.dtype(dt).name, "err_o": e_o,
                         "bound_o": bound, "bound_from": how, "rel_err_lse": e_l,
                         "empty_rows_ok": empty_ok, "ok": bool(ok)})
            log(f"check {np.dtype(dt).name} {(b, hq, hkv, tq, d)} page {ps} lens "
                f"{lens.tolist()} causal={causal}: o {e_o:.2e} (<= {bound:.2e}, {how}) lse "
                f"{e_l:.2e}" + ("" if ok else "  CHECK FAILED"))
    d = 16 if small else D
    rows += [same_as_contiguous(rng, n=150 if small else 1000, d=d,
                                splits=2 if small else 5),
             append_check(rng, d), plan_over_lengths(rng, d, 4 if small else None)]
    if graph:
        rows.append(graph_check(rng))
    n_ok = sum(bool(r["ok"]) for r in rows)
    log(f"check: {n_ok}/{len(rows)} passed")
    doc["check"] = {"runs": len(rows), "passed": n_ok, "rows": rows}
    return n_ok == len(rows)


def same_as_contiguous(rng, b=2, hq=4, hkv=2, n=1000, d=64, splits=5):
    """Page 64 = block_k, target = B x splits: the contiguous decode's splits, same bits."""
    k = rng.standard_normal((b, hkv, n, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, n, d)).astype(np.float32)
    q = rng.standard_normal((b, hq, 1, d)).astype(np.float32)
    kp, table = scatter(np.random.default_rng(1), k, 64)
    vp, _ = scatter(np.random.default_rng(1), v, 64)          # the same page order
    lens = np.full(b, n, np.int32)
    o, lse = paged_decode(q, kp, vp, table, lens, target_items=b * splits)
    o_c, lse_c = cuda_decode(q, k, v, num_splits=splits, block_k=64)
    ok = bool(np.array_equal(o, o_c) and np.array_equal(lse, lse_c))
    log(f"check paged == contiguous ({splits} splits, page 64): bit for bit {ok}")
    return {"name": "paged_equals_contiguous", "ok": ok,
            "max_abs_diff": float(np.abs(o - o_c).max())}


def append_check(rng, d=D):
    kp = rng.standard_normal((9, 2, 16, d)).astype(np.float16)
    vp = rng.standard_normal((9, 2, 16, d)).astype(np.float16)
    table = np.array([[3, 0, 4, 8], [1, 2, 5, 6]], np.int32)
    lens = np.array([14, 31], np.int32)
    k_new = rng.standard_normal((2, 2, 7, d)).astype(np.float16)
    v_new = rng.standard_normal((2, 2, 7, d)).astype(np.float16)
    want_k, want_v = kp.copy(), vp.copy()
    pc.write_tokens(want_k, want_v, table, lens, k_new, v_new)
    dkp, dvp = cuda.to_device(kp), cuda.to_device(vp)
    paged.append(dkp, dvp, cuda.to_device(table), cuda.to_device(lens),
                 cuda.to_device(k_new), cuda.to_device(v_new))
    ok = bool(np.array_equal(dkp.copy_to_host(), want_k)
              and np.array_equal(dvp.copy_to_host(), want_v))
    log(f"check append kernel == numpy append (7 tokens across pages): {ok}")
    return {"name": "append", "ok": ok}


def length_sets(b, width, ps):
    top = width * ps
    return [np.array(x, np.int32) for x in (
        [top] * b, [1 + (7 * i) % top for i in range(b)],
        [max(1, top // (i + 1)) for i in range(b)], [top - 3 * i for i in range(b)])]


def plan_inputs(rng, b=3, hq=8, hkv=2, tq=2, ps=16, width=8, dt=np.float16, d=D,
                target_items=None):
    q = rng.standard_normal((b, hq, tq, d)).astype(dt)
    kp = rng.standard_normal((b * width + 1, hkv, ps, d)).astype(dt)
    vp = rng.standard_normal((b * width + 1, hkv, ps, d)).astype(dt)
    table = rng.permutation(b * width + 1)[:b * width].reshape(b, width).astype(np.int32)
    plan = paged.paged_decode_plan(b, hq, hkv, d, ps, width, tq=tq, dtype=dt, causal=True,
                                   target_items=target_items)
    dev = [cuda.to_device(x) for x in (q, kp, vp, table)]
    return plan, (q, kp, vp, table), dev


def plan_over_lengths(rng, d=D, target_items=None):
    """One plan, lengths changed on the device only, each run against float64."""
    plan, host, dev = plan_inputs(rng, d=d, target_items=target_items)
    dlens = cuda.to_device(np.ones(plan.batch, np.int32))
    out = (cuda.device_array((plan.batch, plan.heads_q, plan.tq, d), np.float32),
           cuda.device_array((plan.batch, plan.heads_q, plan.tq), np.float32))
    worst = 0.0
    for lens in length_sets(plan.batch, plan.max_pages_per_seq, plan.page_size):
        dlens.copy_to_device(lens)
        paged.run(plan, *dev, dlens, out)
        o_ref, _ = pc.paged_reference(*host[:4], lens, causal=True)
        worst = max(worst, float(np.abs(out[0].copy_to_host() - o_ref).max()))
    ok = worst <= 5e-3
    log(f"check one plan over 4 sets of lengths: max |o - ref| {worst:.2e} ok={ok}")
    return {"name": "plan_over_lengths", "ok": ok, "max_abs_err": worst}


def capture(fn):
    """Record fn(stream) into a CUDA graph: (replay(), route). See the module docstring."""
    errors = []
    try:
        from cuda.bindings import driver as drv
        s = cuda.stream()
        h = s.handle
        sh = int(getattr(h, "value", h) or 0)
        cuda.synchronize()
        err, = drv.cuStreamBeginCapture(
            sh, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        assert int(err) == 0, err
        try:
            fn(s)
        finally:
            err, graph = drv.cuStreamEndCapture(sh)
        assert int(err) == 0, err
        err, exe = drv.cuGraphInstantiate(graph, 0)
        assert int(err) == 0, err

        def replay():
            err, = drv.cuGraphLaunch(exe, sh)
            assert int(err) == 0, err
        replay.keep = (s, graph, exe)
        return replay, "cuda-bindings stream capture of a Numba stream", errors
    except Exception as exc:                      # noqa: BLE001 (try the other route)
        errors.append(f"cuda-bindings: {exc!r}"[:300])
    import torch
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        with torch.cuda.graph(g):
            fn(cuda.external_stream(torch.cuda.current_stream().cuda_stream))
    return g.replay, "torch.cuda.graph with numba.cuda.external_stream", errors


def graph_check(rng, timer=None):
    """Capture run(plan, ...) once, replay over 4 sets of lengths written into the same
    device array, compare bit for bit with the uncaptured run."""
    plan, host, dev = plan_inputs(rng, b=4, hq=32, hkv=8, tq=1, ps=64, width=32)
    lens_d = cuda.to_device(np.full(plan.batch, 100, np.int32))
    shape = (plan.batch, plan.heads_q, plan.tq, D)
    out_g = (cuda.device_array(shape, np.float32), cuda.device_array(shape[:3], np.float32))
    out_u = (cuda.device_array(shape, np.float32), cuda.device_array(shape[:3], np.float32))
    paged.run(plan, *dev, lens_d, out_g)                      # compile and load first
    cuda.synchronize()
    replay, route, errors = capture(lambda s: paged.run(plan, *dev, lens_d, out_g, stream=s))
    same = []
    for lens in length_sets(plan.batch, plan.max_pages_per_seq, plan.page_size):
        lens_d.copy_to_device(lens)
        cuda.synchronize()
        replay()
        cuda.synchronize()
        paged.run(plan, *dev, lens_d, out_u)
        cuda.synchronize()
        same.append(bool(np.array_equal(out_g[0].copy_to_host(), out_u[0].copy_to_host())
                         and np.array_equal(out_g[1].copy_to_host(),
                                            out_u[1].copy_to_host())))
    row = {"name": "cuda_graph", "route": route, "route_errors": errors,
           "length_sets": len(same), "bit_equal": same, "ok": all(same)}
    if timer is not None:
        lens_d.copy_to_device(length_sets(plan.batch, plan.max_pages_per_seq, 64)[0])
        row["graph_ms"] = timer(replay)[0]
        row["uncaptured_ms"] = timer(lambda: paged.run(plan, *dev, lens_d, out_u))[0]
    log(f"check CUDA graph ({route}): replays over {len(same)} length sets bit-equal "
        f"{same}" + ("" if errors == [] else f" (first route failed: {errors})")
        + (f"; replay {row['graph_ms'] * 1e3:.1f} us, the call itself "
           f"{row['uncaptured_ms'] * 1e3:.1f} us" if "graph_ms" in row else ""))
    return row


# ----------------------------------------------------------------------------- timing
def _sibling(name):
    """Another script of benchmarks/ as a module."""
    import importlib.util
    path = Path(__file__).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def Timer():  # noqa: N802  (gpu_decode's class, the same timing as the contiguous decode's)
    """CUDA events around one call, L2 flushed before each; median of the repeats."""
    return _sibling("gpu_decode").Timer()


def copy_rate(timer, nbytes=1 << 30):
    import torch
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms, _ = timer(lambda: dst.copy_(src))
    return 2 * nbytes / ms / 1e6


class Paged:
    """A paged problem on the device (torch tensors viewed by Numba; nothing allocated in
    timed code): pool, table, lengths, q, outputs, and its plan."""

    def __init__(self, torch, gen, lens, hkv, group, tq, ps, target_items=None,
                 causal=False):
        b = len(lens)
        self.lens = np.asarray(lens, np.int32)
        width = pc.pages_for(int(self.lens.max()), ps)
        pages = int(sum(pc.pages_for(int(n), ps) for n in self.lens))
        self.hq = hkv * group
        self.q = torch.randn(b, self.hq, tq, D, device="cuda", dtype=torch.float16,
                             generator=gen)
        self.kp = torch.randn(pages, hkv, ps, D, device="cuda", dtype=torch.float16,
                              generator=gen)
        self.vp = torch.randn(pages, hkv, ps, D, device="cuda", dtype=torch.float16,
                              generator=gen)
        order = torch.randperm(pages, device="cpu", generator=torch.Generator().manual_seed(0))
        table = np.full((b, width), 0, np.int32)
        at = 0
        for i, n in enumerate(self.lens.tolist()):
            need = pc.pages_for(n, ps)
            table[i, :need] = order[at:at + need].numpy()
            at += need
        self.table = table
        self.plan = paged.paged_decode_plan(b, self.hq, hkv, D, ps, width, tq=tq,
                                            dtype=np.float16, seq_lens=self.lens,
                                            causal=causal, target_items=target_items)
        self.dev = [cuda.as_cuda_array(x) for x in (self.q, self.kp, self.vp)]
        self.dev += [cuda.to_device(table), cuda.to_device(self.lens)]
        self.o = torch.empty(b, self.hq, tq, D, device="cuda")
        self.lse = torch.empty(b, self.hq, tq, device="cuda")
        self.out = (cuda.as_cuda_array(self.o), cuda.as_cuda_array(self.lse))
        self.kv_bytes = int(self.lens.sum()) * hkv * D * 2 * 2

    def __call__(self):
        paged.run(self.plan, *self.dev, self.out)

    def gathered(self, torch, i):
        """Sequence i's K and V as contiguous (Hkv, L, d) torch tensors."""
        n = int(self.lens[i])
        idx = torch.from_numpy(self.table[i, :pc.pages_for(n, self.plan.page_size)]).cuda()
        k = self.kp[idx].transpose(0, 1).reshape(self.kp.shape[1], -1, D)[:, :n]
        v = self.vp[idx].transpose(0, 1).reshape(self.vp.shape[1], -1, D)[:, :n]
        return k, v


def contiguous(torch, p):
    """The contiguous decode's kernels (cuda.decode's choice of split kernel and splits)
    on p's cache gathered once to (B, Hkv, L, d): (fn, o)."""
    b, tq = p.q.shape[0], p.q.shape[2]
    hkv = p.kp.shape[1]
    k = torch.stack([p.gathered(torch, i)[0] for i in range(b)])
    v = torch.stack([p.gathered(torch, i)[1] for i in range(b)])
    n = k.shape[2]
    g = p.hq // hkv
    cfg, bps = dk.split_config(None, D, 2, g * tq, True)
    ns, per = dk.plan_splits(b * hkv, g * tq, n, cfg, blocks_per_sm=bps)
    rows = b * p.hq * tq
    o = torch.empty(rows, D, device="cuda")
    lse = torch.empty(rows, device="cuda")
    op = cuda.as_cuda_array(torch.empty(ns, rows, D, device="cuda")) if ns > 1 else None
    lp = cuda.as_cuda_array(torch.empty(ns, rows, device="cuda")) if ns > 1 else None
    qf = cuda.as_cuda_array(p.q.reshape(rows, D))
    kf, vf = (cuda.as_cuda_array(x.reshape(b * hkv, n, D)) for x in (k, v))
    of, lf = cuda.as_cuda_array(o), cuda.as_cuda_array(lse)

    def fn():
        dk.run(qf, kf, vf, of, lf, op, lp, tq=tq, group=g, d=D, scale=1 / np.sqrt(D),
               causal=tq > 1, num_splits=ns, keys_per_split=per, cfg=cfg)
    fn.keep = (k, v, o, lse, op, lp)
    return fn, o, ns


def kernel_ms(timer, p, k, v):
    """GPU time alone (host time left out): (paged, contiguous) ms, each the median of
    replays of one CUDA graph: paged.run captured on a Numba stream (`capture`), and the
    public cuda.decode on the gathered cache (k, v: (B, Hkv, L, d)) through cuda.capture.
    Either is None with the error, if its capture failed."""
    from flashcourse import cuda as fc
    out, errors = [None, None], []
    try:
        replay, _, _ = capture(lambda s: paged.run(p.plan, *p.dev, p.out, stream=s))
        out[0] = timer(replay)[0]
    except Exception as exc:                      # noqa: BLE001 (recorded, not fatal)
        errors.append(f"paged: {exc!r}"[:300])
    try:
        qd, kd, vd = (cuda.as_cuda_array(x) for x in (p.q, k, v))
        g = fc.capture("decode", qd, kd, vd, causal=p.q.shape[2] > 1)
        out[1] = timer(g.replay)[0]
    except Exception as exc:                      # noqa: BLE001
        errors.append(f"contiguous: {exc!r}"[:300])
    return out[0], out[1], errors


def bench_table(doc, timer, torch, problems, groups=GROUPS, pages=PAGES):
    rows = []
    for bhkv, tk, tq in problems:
        b, hkv = (1, bhkv) if bhkv <= 8 else (bhkv // 8, 8)
        for group in groups:
            base = None
            for ps in pages:
                gen = torch.Generator(device="cuda").manual_seed(tk + bhkv + group + ps)
                p = Paged(torch, gen, [tk] * b, hkv, group, tq, ps, causal=tq > 1)
                if base is None:
                    fn_c, o_c, ns = contiguous(torch, p)
                    ms_c, _ = timer(fn_c)
                    base = (ms_c, ns, p.kv_bytes)
                else:                                   # the same cache, a new page order
                    fn_c, o_c, ns = contiguous(torch, p)
                p()
                fn_c()
                torch.cuda.synchronize()
                diff = float((p.o.reshape(-1, D) - o_c).abs().max())
                ok = diff <= 1e-3
                ms, reps = timer(p) if ok else (float("nan"), 0)
                kp_ms, kc_ms, kerr = kernel_ms(timer, p, *fn_c.keep[:2]) if ok \
                    else (None, None, [])
                row = {"bhkv": bhkv, "b": b, "hkv": hkv, "tk": tk, "tq": tq, "group": group,
                       "page_size": ps, "kernel": p.plan.kernel, "target": p.plan.target,
                       "contiguous_splits": base[1], "ms": ms, "contiguous_ms": base[0],
                       "ratio": base[0] / ms, "kv_bytes": p.kv_bytes,
                       "gbs": p.kv_bytes / ms / 1e6, "max_abs_diff_vs_contiguous": diff,
                       "kernel_ms": kp_ms, "contiguous_kernel_ms": kc_ms,
                       "kernel_ratio": (kc_ms / kp_ms) if kp_ms and kc_ms else None,
                       "kernel_errors": kerr, "ok": ok}
                rows.append(row)
                kr = row["kernel_ratio"]
                log(f"table BxHkv={bhkv} Tk={tk} Tq={tq} G={group} page {ps}: paged "
                    f"{ms * 1e3:8.1f} us, contiguous {base[0] * 1e3:8.1f} us -> "
                    f"{row['ratio']:.3f}x ({p.plan.kernel}, target {p.plan.target}, "
                    f"splits {base[1]}) diff {diff:.1e}; graphs (GPU time): paged "
                    + (f"{kp_ms * 1e3:.1f}" if kp_ms else "-") + " us, public decode "
                    + (f"{kc_ms * 1e3:.1f}" if kc_ms else "-") + " us -> "
                    + (f"{kr:.3f}x" if kr else "-") + (f" {kerr}" if kerr else "")
                    + ("" if ok else "  CHECK FAILED"))
                del p, fn_c, o_c
                torch.cuda.empty_cache()
    doc["table"] = rows
    return rows


def bench_ragged(doc, timer, torch, copy_gbs, groups=GROUPS, pages=PAGES):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rng = np.random.default_rng(0)
    lens = rng.permutation(np.linspace(1024, 131072, RAGGED).astype(np.int32))
    rows = []
    for group in groups:
        for ps in pages:
            gen = torch.Generator(device="cuda").manual_seed(group + ps)
            p = Paged(torch, gen, lens, 8, group, 1, ps)
            p()
            torch.cuda.synchronize()
            errs = []
            for i in (0, int(np.argmax(lens)), int(np.argmin(lens))):   # against float64
                k, v = p.gathered(torch, i)
                s = torch.einsum("hgd,hkd->hgk", p.q[i, :, 0].double().view(8, group, D),
                                 k.double()) / np.sqrt(D)
                ref = torch.einsum("hgk,hkd->hgd", torch.softmax(s, -1), v.double())
                errs.append(float((p.o[i, :, 0].double() - ref.reshape(-1, D)).abs().max()))
            ok = max(errs) <= 5e-3
            ms, _ = timer(p) if ok else (float("nan"), 0)
            row = {"group": group, "page_size": ps, "target": p.plan.target,
                   "items": len(p.plan.work_list(lens)), "ms": ms, "kv_bytes": p.kv_bytes,
                   "gbs": p.kv_bytes / ms / 1e6, "copy_gbs": copy_gbs,
                   "fraction_of_copy": p.kv_bytes / ms / 1e6 / copy_gbs,
                   "max_abs_err": max(errs), "ok": ok, "targets": {}}
            for t in (66, 132, 264, 528, 1056):          # the heuristic's neighbours
                if t != p.plan.target:
                    alt = paged.paged_decode_plan(RAGGED, p.hq, 8, D, ps, p.table.shape[1],
                                                  dtype=np.float16, target_items=t)
                    row["targets"][str(t)] = timer(
                        lambda alt=alt, p=p: paged.run(alt, *p.dev, p.out))[0]
                    del alt
            if ps == pages[0]:                           # PyTorch flash, padded
                kpad = torch.zeros(RAGGED, 8, int(lens.max()), D, device="cuda",
                                   dtype=torch.float16)
                vpad = torch.zeros_like(kpad)
                for i in range(RAGGED):
                    k, v = p.gathered(torch, i)
                    kpad[i, :, :k.shape[1]] = k
                    vpad[i, :, :v.shape[1]] = v

                def flash(q=p.q, kpad=kpad, vpad=vpad, gqa=group > 1):
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        F.scaled_dot_product_attention(q, kpad, vpad, enable_gqa=gqa)
                try:
                    row["torch_flash_padded_ms"] = timer(flash)[0]
                except Exception as exc:            # noqa: BLE001
                    row["torch_flash_padded_error"] = repr(exc)[:300]
                del kpad, vpad, flash
            if "torch_flash_padded_ms" in row:
                row["speed_vs_torch_flash_padded"] = row["torch_flash_padded_ms"] / ms
            rows.append(row)
            log(f"ragged G={group} page {ps}: {ms * 1e3:8.1f} us {row['gbs']:7.0f} GB/s = "
                f"{row['fraction_of_copy']:.1%} of copy ({copy_gbs:.0f}); target "
                f"{p.plan.target} ({row['items']} items); other targets {row['targets']}"
                + (f"; torch flash padded {row['torch_flash_padded_ms'] * 1e3:.1f} us"
                   if "torch_flash_padded_ms" in row else "")
                + ("" if ok else "  CHECK FAILED"))
            del p
            torch.cuda.empty_cache()
    doc["ragged"] = {"lengths": lens.tolist(), "rows": rows}
    return rows


def bars(doc) -> dict:
    table = [r for r in doc.get("table", []) if r["ok"]]
    out = {}
    for ps in PAGES:
        rs = [r["ratio"] for r in table if r["page_size"] == ps]
        if rs:
            out[f"min_ratio_page_{ps}"] = min(rs)
        ks = [r["kernel_ratio"] for r in table if r["page_size"] == ps and r.get("kernel_ratio")]
        if ks:
            out[f"min_kernel_ratio_page_{ps}"] = min(ks)
    if "min_kernel_ratio_page_64" in out:
        out["bar_kernel_page_ge_64_0.95x"] = min(out["min_kernel_ratio_page_64"], out.get(
            "min_kernel_ratio_page_256", 1e9)) >= 0.95
    if "min_kernel_ratio_page_16" in out:
        out["bar_kernel_page_16_0.9x"] = out["min_kernel_ratio_page_16"] >= 0.9
    if "min_ratio_page_64" in out:
        out["bar_page_ge_64_0.95x"] = min(out.get("min_ratio_page_64", 0),
                                          out.get("min_ratio_page_256", 1e9)) >= 0.95
    if "min_ratio_page_16" in out:
        out["bar_page_16_0.9x"] = out["min_ratio_page_16"] >= 0.9
    rag = doc.get("ragged", {}).get("rows", [])
    if rag:
        out["ragged_min_fraction_of_copy"] = min(r["fraction_of_copy"] for r in rag)
        out["bar_ragged_85pct_copy"] = out["ragged_min_fraction_of_copy"] >= 0.85
        sp = [r["speed_vs_torch_flash_padded"] for r in rag if "speed_vs_torch_flash_padded" in r]
        if sp:
            out["ragged_min_speed_vs_torch_flash_padded"] = min(sp)
            out["bar_ragged_1.5x_torch_flash"] = min(sp) >= 1.5
    graph = [r for r in doc.get("check", {}).get("rows", []) if r.get("name") == "cuda_graph"]
    if graph:
        out["bar_graph_bit_equal"] = bool(graph[0]["ok"])
    return out


def main(argv=None):
    ap = results.benchmark_parser(__doc__, "check", "bench")
    ap.add_argument("--tables", default="all", help="'all' or 'none': the decode table part")
    ap.add_argument("--groups", default=",".join(map(str, GROUPS)))
    ap.add_argument("--pages", default=",".join(map(str, PAGES)))
    args = results.parse_gpu_arguments(ap, argv, __file__)
    if args.simulator_smoke:
        if args.bench:
            raise SystemExit("--simulator-smoke only checks: nothing is timed")
        shapes = [(2, 4, 2, 1, 8, 16, (20, 1), False), (2, 8, 1, 4, 8, 32, (40, 3), True)]
        ok = check(np.random.default_rng(0), {}, shapes=shapes, graph=False, small=True)
        return 0 if ok else 1

    global LOG_TO
    from flashcourse.env import record
    env = record()
    out = results.output_dir(args)
    stem = "gpu_paged"
    if args.record:
        gpu = (env.get("gpu") or "gpu").lower()
        stem = ("h100" if "h100" in gpu else "h200" if "h200" in gpu else "gpu") + "_gpu_paged"
    results.write_output(out, f"{stem}_log.txt", "")
    LOG_TO = (out, f"{stem}_log.txt")
    doc = {"environment": env, "d": D,
           "timing": "CUDA events around each call, L2 flushed (256 MiB write) before each, "
                     "median of repeats after a warm-up",
           "bytes": "kv_bytes = K/V bytes actually read (sum of lengths x 2 Hkv d x 2 B); "
                    "copy_gbs = (read + write) / time of a 1 GiB device copy"}
    ok = True
    rng = np.random.default_rng(0)
    timer = None
    if args.check:
        ok = check(rng, doc)
        results.write_json(out, f"{stem}.json", doc, "gpu_paged")
    if args.bench:
        import torch
        timer = Timer()
        groups = tuple(int(x) for x in args.groups.split(","))
        pages = tuple(int(x) for x in args.pages.split(","))
        copy_gbs = copy_rate(timer)
        doc["copy_gbs"] = copy_gbs
        log(f"device copy: {copy_gbs:.0f} GB/s (read + write)")
        doc["graph"] = graph_check(rng, timer)
        if args.tables != "none":
            bench_table(doc, timer, torch, decode_table(), groups, pages)
            results.write_json(out, f"{stem}.json", doc, "gpu_paged")
        bench_ragged(doc, timer, torch, copy_gbs, groups, pages)
        doc["bars"] = bars(doc)
        log("bars: " + json.dumps(doc["bars"]))
        results.write_json(out, f"{stem}.json", doc, "gpu_paged")
    results.finish(args, out, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
