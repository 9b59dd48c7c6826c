"""paged: the host side of paged decoding: a plan, its run, and `paged_decode`.

    from flashcourse.cuda import paged_decode
    o, lse = paged_decode(q, k_pages, v_pages, block_table, seq_lens, causal=True)

    plan = paged_decode_plan(B, Hq, Hkv, d, page_size, max_pages_per_seq, tq=1)
    run(plan, q, k_pages, v_pages, block_table, seq_lens, (o, lse))   # device arrays

Layout and the numpy model: `flashcourse.paged_cache`; the kernels: `paged_kernels.py`.

Plan and run (one CUDA graph across steps whose lengths change)
    `paged_decode_plan` fixes everything but the lengths: shapes, the split kernel and
    its variant, the grid (Hkv, row blocks, capacity), the work-list parameters (target,
    min_pages) and the workspaces of the partial states (capacity x Hq Tq x (d + 1) x 4
    bytes). `run` launches the split and combine kernels on that grid and passes the
    lengths only as the device array seq_lens: each block derives its work item from
    them (`paged_kernels.work_item`), blocks past the items exit, so the same launches,
    recorded once in a CUDA graph, stay right when the lengths change between replays
    (FlashInfer reaches the same end by recomputing its plan on the host each step and
    copying it into fixed device buffers; here nothing runs on the host between steps).
    Lengths may grow up to the block table's reach, max_pages_per_seq x page_size.

The heuristic (`choose_target`): target items, chosen at plan time
    Candidates: B x S, where S is the number of splits FlashAttention-2's heuristic gives
    B x Hkv heads of the longest length (`flashcourse.decode.choose_num_splits`, in key
    blocks of one page: with page_size = 64 = the contiguous decode's block_k, a batch
    of equal lengths then gets the contiguous decode's key ranges); and k waves of the
    GPU's resident blocks, k = 1 .. 8 (items x Hkv x row blocks = k x SMs x blocks per
    SM), those up to B x 128 (FlashAttention-2's cap of 128 splits). For each candidate
    the device's schedule is replayed on the host for the plan's lengths (given, or all
    at the table's reach) and its blocks dealt, in launch order, to the first free of the
    resident slots, each costing its keys plus BLOCK_OVERHEAD_KEYS (a guess of a block's
    fixed cost, to be measured); the earliest finish wins, ties to fewer items. Equal
    lengths keep about the contiguous split; a ragged batch (32 requests of 1k .. 128k
    on 132 SMs) gets several waves of smaller items, the longest first, so the short
    pieces fill the tail (the model: 95-97% of the ideal finish, against 64-68% for one
    wave).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
from numba import cuda

from ... import paged_cache as pc
from ...constants import LOG2E
from ...geometry import ceil_div
from ...gpu import using_simulator
from ..._guards import forward_result
from ..common._launch import (is_device_array, set_max_dynamic_shared_bytes, simulator_lock,
                              simulator_note)
from ..common.packed_launch import LaunchCache
from .decode_kernels import (BLOCKS_PER_SM, DEFAULT_BLOCK_K, _aligned, combine_threads,
                             split_config, sm_count)
from .decode_tc_kernels import DecodeTCConfig
from .paged_kernels import (make_append_kernel, make_paged_combine_kernel,
                            make_paged_split_kernel, schedule, seq_pages)

#: A block's fixed cost in the heuristic's model, in keys (start, q, the warps' merge).
BLOCK_OVERHEAD_KEYS = 64
#: The waves of resident blocks the heuristic tries.
MAX_WAVES = 8
#: Threads of an append block.
APPEND_THREADS = 128


@dataclass
class PagedDecodePlan:
    """Everything a paged decode launch needs but the lengths (see the module docstring).
    o_part, lse_part: the partial states' workspaces, (capacity, Hq*Tq, d) and
    (capacity, Hq*Tq) float32 device arrays."""

    batch: int
    heads_q: int
    heads_kv: int
    tq: int
    head_dim: int
    page_size: int
    max_pages_per_seq: int
    itemsize: int
    causal: bool
    scale: float
    kernel: str                 # "cuda_cores" or "tensor_core"
    cfg: object                 # DecodeConfig or DecodeTCConfig
    target: int
    min_pages: int
    o_part: object = field(repr=False)
    lse_part: object = field(repr=False)
    _sigs: dict = field(default_factory=dict, repr=False)
    _launches: LaunchCache = field(default_factory=LaunchCache, repr=False)

    @property
    def rows_kv(self) -> int:               # R = G x Tq query rows per KV head
        return self.heads_q // self.heads_kv * self.tq

    @property
    def row_blocks(self) -> int:
        return ceil_div(self.rows_kv, self.cfg.rows)

    @property
    def capacity(self) -> int:              # items the grid holds: target + B
        return self.target + self.batch

    @property
    def grid(self) -> tuple:
        return (self.heads_kv, self.row_blocks, self.capacity)

    def work_list(self, seq_lens) -> list:
        """The items the kernels take for these lengths, in launch order:
        [(sequence, first key, end key, slot), ...] (`items`)."""
        return items(seq_lens, self.page_size, self.max_pages_per_seq, self.target,
                     self.min_pages)


def items(seq_lens, page_size, width, target, min_pages) -> list:
    """The device's work list (`paged_kernels.work_item` for every block x until it says
    -1), enumerated at once on the host: [(b, first key, end key, slot), ...] in launch
    order. A test checks it against work_item block by block."""
    lens = np.asarray(seq_lens, np.int64)
    c, _ = schedule(lens, page_size, width, target, min_pages)
    full, part, slot = [], [], 0
    for b in range(lens.size):
        pages, n = seq_pages(lens, b, page_size, width)
        nf = pages // c
        full += [(b, s * c * page_size, (s + 1) * c * page_size, slot + s) for s in range(nf)]
        if pages > nf * c:
            part.append((b, nf * c * page_size, n, slot + nf))
        slot += nf + (pages > nf * c)
    return [(b, k0, min(k1, int(min(max(lens[b], 0), width * page_size))), sl)
            for b, k0, k1, sl in full] + part


def deal_blocks(work, heads_blocks, slots) -> list:
    """The GPU's dealing as the heuristic models it: the blocks of `work` [(sequence, first
    key, end key, slot), ...] in launch order, each item's heads_blocks = Hkv x row blocks
    blocks together, each to the first free of `slots` resident slots (the lowest-numbered
    among equals), costing its keys + BLOCK_OVERHEAD_KEYS. Returns [(slot, start, end,
    sequence), ...] in launch order, times in keys (notebook 11b draws it)."""
    free = [(0, s) for s in range(slots)]          # (time the slot is free, slot): a heap
    out = []
    for b, k0, k1, _ in work:
        for _ in range(heads_blocks):
            t, s = heapq.heappop(free)
            end = t + (k1 - k0) + BLOCK_OVERHEAD_KEYS
            out.append((s, t, end, b))
            heapq.heappush(free, (end, s))
    return out


def simulated_schedule(seq_lens, page_size, width, target, min_pages, heads_blocks,
                       slots) -> list:
    """The heuristic's model of `target`'s work list (`items`), block by block
    (`deal_blocks`)."""
    return deal_blocks(items(seq_lens, page_size, width, target, min_pages), heads_blocks,
                       slots)


def simulated_finish(seq_lens, page_size, width, target, min_pages, heads_blocks, slots):
    """The finish time (keys) of `simulated_schedule`: when its last block ends (0 for no
    blocks)."""
    return max((end for _, _, end, _ in simulated_schedule(
        seq_lens, page_size, width, target, min_pages, heads_blocks, slots)), default=0)


def choose_target(seq_lens, page_size, width, heads_kv, row_blocks, *, sms=None,
                  blocks_per_sm=BLOCKS_PER_SM) -> int:
    """Target items for these lengths (the module docstring's heuristic)."""
    from ... import decode as np_decode
    lens = np.asarray(seq_lens, np.int64)
    batch = lens.size
    sms = sm_count() if sms is None else sms
    slots = sms * blocks_per_sm
    longest = int(max(1, lens.max()))
    split = np_decode.choose_num_splits(batch * heads_kv, longest, page_size,
                                        row_blocks=row_blocks, sms=sms,
                                        blocks_per_sm=blocks_per_sm)
    per_item = heads_kv * row_blocks
    cands = sorted({batch * split} | {t for t in (max(1, k * slots // per_item)
                                                 for k in range(1, MAX_WAVES + 1))
                                      if t <= batch * np_decode.MAX_SPLITS})
    min_pages = ceil_div(DEFAULT_BLOCK_K, page_size)
    best = None
    for t in cands:
        f = simulated_finish(lens, page_size, width, t, min_pages, per_item, slots)
        if best is None or f < best[0]:
            best = (f, t)
    return best[1]


def paged_decode_plan(batch, heads_q, heads_kv, head_dim, page_size, max_pages_per_seq, *,
                      tq=1, dtype=np.float16, causal=False, scale=None, seq_lens=None,
                      kernel=None, target_items=None, sms=None, aligned=True, **options):
    """A `PagedDecodePlan` for batches of `batch` sequences (q (B, Hq, Tq, d), pools of
    `page_size`-token pages of `dtype` (float16, float32, or uint8 for FP8 e4m3 codes, with
    options scale_block (0: one scale per (B, Hkv), else per block of tokens within a page)
    and hw_cvt: `decoding.fp8_kv`), block tables of `max_pages_per_seq` columns).

    seq_lens: lengths the heuristic plans for (host values; default: every sequence at
    the table's reach, max_pages_per_seq x page_size); any lengths up to that reach run
    on the plan. target_items: set the target instead (e.g. B x num_splits of a
    contiguous decode, to compare the two bit for bit). kernel, options: the split kernel
    and its variant, as `decode` takes them (`decode_kernels.split_config`).
    """
    from ..._checks import check_block, check_bool, check_scale
    b, hq, hkv = (check_block(x, n) for x, n in ((batch, "batch"), (heads_q, "heads_q"),
                                                 (heads_kv, "heads_kv")))
    d, tq, width = (check_block(x, n) for x, n in ((head_dim, "head_dim"), (tq, "tq"),
                                                   (max_pages_per_seq, "max_pages_per_seq")))
    ps = pc.check_page_size(page_size)
    if hq % hkv:
        raise ValueError(f"heads_q = {hq} must be a multiple of heads_kv = {hkv} (GQA)")
    itemsize = np.dtype(dtype).itemsize
    if np.dtype(dtype) not in (np.float16, np.float32, np.uint8):
        raise TypeError(f"dtype: the pools must be float16, float32 or uint8 (FP8 codes), got "
                        f"{np.dtype(dtype)}")
    causal = check_bool(causal, "causal")
    cfg, bps = split_config(kernel, d, itemsize, hq // hkv * tq, aligned, **options)
    tc = isinstance(cfg, DecodeTCConfig)
    if tc and ps % cfg.block_k:
        raise ValueError(f"tc_block_k = {cfg.block_k} must divide page_size = {ps} (a tile "
                         f"of keys never crosses a page)")
    lens = (np.full(b, width * ps) if seq_lens is None
            else np.asarray(seq_lens, np.int64).reshape(-1))
    if lens.size != b:
        raise ValueError(f"seq_lens must hold batch = {b} lengths, got {lens.size}")
    row_blocks = ceil_div(hq // hkv * tq, cfg.rows)
    if target_items is None:
        target = choose_target(lens, ps, width, hkv, row_blocks, sms=sms,
                               blocks_per_sm=bps or BLOCKS_PER_SM)
    else:
        target = check_block(target_items, "target_items")
    capacity = target + b
    if capacity > 65535:
        raise ValueError(f"target_items + batch = {capacity:,} work items exceed the grid's "
                         f"z limit of 65,535")
    rows = hq * tq
    return PagedDecodePlan(b, hq, hkv, tq, d, ps, width, itemsize, causal,
                           check_scale(scale, d), "tensor_core" if tc else "cuda_cores", cfg,
                           target, ceil_div(DEFAULT_BLOCK_K, ps),
                           cuda.device_array((capacity, rows, d), np.float32),
                           cuda.device_array((capacity, rows), np.float32))


def _launch(plan, kern, grid, threads, shared, args, stream):
    """One launch on `stream` (0: the default stream), with the shared-memory opt-in the
    first time (the signature is typed once per plan and kernel). On a GPU, later launches
    of the same argument layout replay packed arguments (`packed_launch.LaunchCache`):
    Numba's own launch types and packs the ~20 arguments of each of run's two launches
    again on every call: on an H100 a small step took 292 us that way, and 33 us as a
    replayed CUDA graph of the same two launches (benchmarks/gpu_paged.py)."""
    if using_simulator():
        with simulator_lock():
            kern[grid, threads, 0, shared](*args)
        return

    def slow():
        if shared > 48 * 1024:
            sig = plan._sigs.get(id(kern))
            if sig is None:
                sig = plan._sigs[id(kern)] = tuple(kern.typeof_pyval(a) for a in args)
            set_max_dynamic_shared_bytes(kern, sig, shared)
        kern[grid, threads, stream, shared](*args)
    plan._launches.launch(kern, grid, threads, shared, args, stream, slow)


def _shape(x) -> tuple:
    return tuple(int(n) for n in x.shape)


def run(plan: PagedDecodePlan, q, k_pages, v_pages, block_table, seq_lens, out, stream=0,
        scales=None):
    """Launch the plan on device arrays: q (B, Hq, Tq, d) and the pools (num_pages, Hkv,
    page_size, d) of the plan's dtype, block_table (B, W) and seq_lens (B,) int32 (read on
    the device only), out = (o (B, Hq, Tq, d), lse (B, Hq, Tq)) float32, written. Checks
    shapes against the plan (nothing that needs the values); stream: a Numba stream (0:
    the default stream); scales: an FP8 pool's (k_scale, v_scale) as the 2-D float32 device
    arrays the kernel reads (`fp8_kv.paged_scales`). Returns out."""
    o, lse = out
    b, hq, tq, d = plan.batch, plan.heads_q, plan.tq, plan.head_dim
    ks = _shape(k_pages)
    want = {"q": (b, hq, tq, d), "block_table": (b, plan.max_pages_per_seq),
            "seq_lens": (b,), "o": (b, hq, tq, d), "lse": (b, hq, tq)}
    for name, x in (("q", q), ("block_table", block_table), ("seq_lens", seq_lens),
                    ("o", o), ("lse", lse)):
        if _shape(x) != want[name]:
            raise ValueError(f"{name} must have shape {want[name]} for this plan, got "
                             f"{_shape(x)}")
    if len(ks) != 4 or ks[1:] != (plan.heads_kv, plan.page_size, d) or _shape(v_pages) != ks:
        raise ValueError(f"k_pages and v_pages must have shape (num_pages, "
                         f"{plan.heads_kv}, {plan.page_size}, {d}) for this plan, got "
                         f"{ks} and {_shape(v_pages)}")
    rows = b * hq * tq
    kv_rows = ks[0] * plan.heads_kv
    qscale = np.float32(plan.scale * LOG2E)
    tail = (block_table, seq_lens, np.int32(plan.heads_kv), np.int32(plan.rows_kv),
            np.int32(tq), np.int32(d), qscale, np.int32(plan.causal), np.int32(plan.target),
            np.int32(plan.min_pages))
    kern = make_paged_split_kernel(plan.cfg, plan.page_size)
    if plan.kernel == "tensor_core":              # fp16 pairs as words; the pool flat
        qf = q.reshape(rows, d).view(np.uint32)
        kf = k_pages.reshape(kv_rows * plan.page_size * d).view(np.uint32)
        vf = v_pages.reshape(kv_rows * plan.page_size * d).view(np.uint32)
    else:
        qf = q.reshape(rows, d)
        kf = k_pages.reshape(kv_rows, plan.page_size, d)
        vf = v_pages.reshape(kv_rows, plan.page_size, d)
    kv = (qf, kf, vf)
    if getattr(plan.cfg, "fp8", False):
        if scales is None:
            raise ValueError("an FP8 plan needs scales=(k_scale, v_scale)")
        kv += tuple(scales)
    _launch(plan, kern, plan.grid, plan.cfg.threads, plan.cfg.shared_bytes,
            kv + (plan.o_part, plan.lse_part) + tail, stream)
    nt = combine_threads(d)
    _launch(plan, make_paged_combine_kernel(nt, plan.page_size), (rows,), nt, 0,
            (plan.o_part, plan.lse_part, o.reshape(rows, d), lse.reshape(rows), seq_lens,
             np.int32(plan.max_pages_per_seq), np.int32(hq * tq), np.int32(d),
             np.int32(plan.target), np.int32(plan.min_pages)), stream)
    return out


def append(k_pages, v_pages, block_table, seq_lens, k_new, v_new, stream=0):
    """The append kernel on device arrays (`paged_kernels.make_append_kernel`): new token i
    of sequence b (k_new, v_new (B, Hkv, n, d), the pool's dtype) written at position
    seq_lens[b] + i through the block table; seq_lens (the lengths before) unchanged."""
    ks, ns = _shape(k_pages), _shape(k_new)
    if len(ns) != 4 or ns[1] != ks[1] or ns[3] != ks[3] or _shape(v_new) != ns \
            or ns[0] != _shape(block_table)[0]:
        raise ValueError(f"k_new, v_new must have shape (B, Hkv, n, d) = ({_shape(block_table)[0]}"
                         f", {ks[1]}, n, {ks[3]}), got {ns} and {_shape(v_new)}")
    if np.dtype(k_new.dtype) != np.dtype(k_pages.dtype):
        raise TypeError(f"k_new must have the pool's dtype {k_pages.dtype}, got {k_new.dtype}")
    kern = make_append_kernel(ks[2])
    threads = min(APPEND_THREADS, 32 * ceil_div(ks[3], 32))
    with simulator_lock():
        kern[(ns[2], ns[1], ns[0]), threads, stream, 0](k_pages, v_pages, block_table,
                                                         seq_lens, k_new, v_new)


# ---------------------------------------------------------------------------------------
# The public call
# ---------------------------------------------------------------------------------------

_PLANS: dict = {}
#: Plans kept for device-array calls (the oldest dropped first).
MAX_PLANS = 16
ADVICE = ("use flashcourse.paged_cache.paged_reference with float64 inputs (the CUDA "
          "kernels compute in float32)")


def _device_inputs(q, k_pages, v_pages, block_table, seq_lens, check):
    """Device-array inputs checked (shapes, dtypes, layout; the table's values only with
    check=True) -> (q, k_pages, v_pages, block_table, seq_lens) as device arrays."""
    from ..common._launch import as_device_array
    q, k_pages, v_pages = (as_device_array(n, x, (np.float16, np.float32)) for n, x in
                           (("q", q), ("k_pages", k_pages), ("v_pages", v_pages)))
    pc.check_pool_shapes(_shape(k_pages), _shape(v_pages), k_pages.dtype, v_pages.dtype)
    qs, ks = _shape(q), _shape(k_pages)
    if len(qs) != 4 or 0 in qs:
        raise ValueError(f"q must have shape (B, Hq, Tq, d), got {qs}")
    if np.dtype(q.dtype) != np.dtype(k_pages.dtype):
        raise TypeError(f"q and the pools must share one dtype, got q {q.dtype} and k_pages "
                        f"{k_pages.dtype}")
    if qs[3] != ks[3] or qs[1] % ks[1]:
        raise ValueError(f"q (B, Hq, Tq, d) = {qs} and k_pages (num_pages, Hkv, page_size, "
                         f"d) = {ks}: d must match and Hq be a multiple of Hkv")
    tables = []
    for name, x, nd, what in (("block_table", block_table, 2, "(B, max_pages_per_seq)"),
                              ("seq_lens", seq_lens, 1, "(B,)")):
        pc.check_table_meta(name, x.shape, x.dtype, nd, what, qs[0])
        tables.append(x if is_device_array(x) else None)
    if check or tables[0] is None or tables[1] is None:     # values known on the host
        host = [x.copy_to_host() if is_device_array(x) else x
                for x in (block_table, seq_lens)]
        pc.check_table_values(host[0], host[1], ks[0], ks[2])
        block_table, seq_lens = (x if is_device_array(x) else cuda.to_device(
            np.ascontiguousarray(x)) for x in (block_table, seq_lens))
    return q, k_pages, v_pages, block_table, seq_lens


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, *, causal=False, scale=None,
                 allow_nonfinite=False, check=False, kernel=None, target_items=None,
                 **options):
    """Flash-Decoding over a paged KV cache (GPU or simulator), fp32 arithmetic.

    Args:
        q: (B, Hq, Tq, d) the newest tokens' queries (Tq small; causal bottom-right
            against each sequence's own length). k_pages, v_pages: (num_pages, Hkv,
            page_size, d) pools, page_size in `paged_cache.PAGE_SIZES`, Hq a multiple
            of Hkv (GQA: K and V are never copied per query head). block_table
            (B, max_pages_per_seq) and seq_lens (B,): int32 (`flashcourse.paged_cache`
            has the layout). numpy arrays (float16 pools stay float16 on the device,
            float32/64 run as float32; o comes back in q's dtype; every value checked)
            or C-contiguous float16/float32 device arrays (results stay on the device,
            float32; block_table and seq_lens may then be numpy (checked, copied) or
            device arrays, whose values are checked only with check=True).
        causal, scale, allow_nonfinite: as `decode`. check: device inputs: check the
            table's values and the results on the host (copies and a sync).
        kernel, options: the split kernel and its variant, as `decode`; target_items:
            the work list's target (`paged_decode_plan`).

    Returns:
        o (B, Hq, Tq, d), lse (B, Hq, Tq) (natural log); a row with no visible key gives
        o = 0, lse = -inf.

    Raises:
        TypeError/ValueError naming the argument (`paged_cache.check_paged`'s rules);
        ValueError when a row that sees keys and has finite inputs gets a non-finite
        result (float32 overflow), always for numpy inputs, with check=True for device
        arrays.
    """
    from ..._checks import check_bool
    simulator_note()
    check, allow_nonfinite = (check_bool(x, n) for x, n in ((check, "check"),
                                                            (allow_nonfinite, "allow_nonfinite")))
    on_device = any(is_device_array(x) for x in (q, k_pages, v_pages))
    if on_device:
        q, kp, vp, bt, lens = _device_inputs(q, k_pages, v_pages, block_table, seq_lens,
                                             check)
        b, hq, tq, d = _shape(q)
        key = (_shape(q), _shape(kp), _shape(bt), str(q.dtype), causal, scale, kernel,
               target_items, tuple(sorted(options.items())),
               all(_aligned(x) for x in (q, kp, vp)))
        plan = _PLANS.get(key)
        if plan is None:
            plan = paged_decode_plan(b, hq, _shape(kp)[1], d, _shape(kp)[2], _shape(bt)[1],
                                     tq=tq, dtype=q.dtype, causal=causal, scale=scale,
                                     kernel=kernel, target_items=target_items,
                                     aligned=key[-1], **options)
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = plan
        out = (cuda.device_array((b, hq, tq, d), np.float32),
               cuda.device_array((b, hq, tq), np.float32))
        run(plan, q, kp, vp, bt, lens, out)
        if check:
            _guard([x.copy_to_host() for x in (q, kp, vp, bt, lens)],
                   [x.copy_to_host() for x in out], plan, allow_nonfinite)
        return out
    q, kp, vp, bt, lens, _, ps = pc.check_paged(q, k_pages, v_pages, block_table, seq_lens,
                                                allow_nonfinite=allow_nonfinite)
    b, hq, tq, d = q.shape
    work = np.float16 if q.dtype == np.float16 else np.float32
    plan = paged_decode_plan(b, hq, kp.shape[1], d, ps, bt.shape[1], tq=tq, dtype=work,
                             causal=causal, scale=scale, seq_lens=lens, kernel=kernel,
                             target_items=target_items, **options)
    dev = [cuda.to_device(np.ascontiguousarray(x, t)) for x, t in
           ((q, work), (kp, work), (vp, work), (bt, np.int32), (lens, np.int32))]
    out = (cuda.device_array((b, hq, tq, d), np.float32),
           cuda.device_array((b, hq, tq), np.float32))
    run(plan, *dev, out)
    o = out[0].copy_to_host().astype(q.dtype, copy=False)
    lse = out[1].copy_to_host().astype(np.float64 if q.dtype == np.float64 else np.float32,
                                       copy=False)
    return _guard((q, kp, vp, bt, lens), (o, lse), plan, allow_nonfinite)


def _guard(inputs, results, plan, allow_nonfinite):
    """`_guards.forward_result` per sequence, on its gathered cache (host arrays)."""
    q, kp, vp, bt, lens = inputs
    o, lse = results
    g = plan.heads_q // plan.heads_kv
    o_out, lse_out = o.copy(), lse.copy()
    for i, n in enumerate(np.asarray(lens).tolist()):
        k = pc.gather(kp, bt, i, n)[None]                       # (1, Hkv, L, d)
        v = pc.gather(vp, bt, i, n)[None]
        o_out[i:i + 1], lse_out[i:i + 1] = forward_result(
            q[i:i + 1], k, v, o[i:i + 1], lse[i:i + 1], plan.causal, compute="float32",
            allow_nonfinite=allow_nonfinite, scale=plan.scale, advice=ADVICE, kv_group=g)
    return o_out, lse_out
