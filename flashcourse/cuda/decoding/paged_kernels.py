"""paged_kernels: Flash-Decoding over a paged KV cache, and the append into pages.

Kernels (the host side is `paged.py`; the layout and the numpy model are in
`flashcourse.paged_cache`):

    paged_append        one block per (new token, KV head, sequence): writes the token's
                        K and V rows into its page through the block table
    paged_split         the CUDA-core split kernel (`decode_kernels.split_body`) reading
                        keys through the block table; one block per (work item, row
                        block, KV head)
    paged_split_tc      the tensor-core split kernel (`decode_tc_kernels.split_tc_body`),
                        its 16-key tiles fetched from the pages
    paged_combine       one block per query row: merges its sequence's items
                        (`decode_kernels.combine_row`)

What differs from the contiguous kernels is only where a key is: token t of sequence b
is row t % page_size of page block_table[b, t // page_size] (`paged_cache.token_address`,
compiled here as it is). The pool (num_pages, Hkv, page_size, d) is read as a
(num_pages * Hkv, page_size, d) array: "head" page * Hkv + h, so a page of one head is
page_size contiguous rows, as in the contiguous cache. The loads, the online softmax,
the merge of the warps' states and the combine are the contiguous kernels' own device
functions (one copy of each).

The work list (ragged batches, one CUDA graph across steps)
    A work item is (sequence b, first key, end key): one block per item and KV head (and
    row block), so the KV heads of a sequence share its items. The items are computed
    by every block from the lengths on the device (`work_item`), never by the host, so a
    launch's grid is fixed (`capacity` items) while the lengths change:

        pages P_b = ceil(L_b / page_size), P = sum_b P_b
        chunk c   = max(min_pages, ceil(P / target)) pages per item
        items     sequence b gets floor(P_b / c) full items of c pages and, if P_b is not
                  a multiple of c, one last partial item
        order     block x takes the x-th item with all full items first (sequence by
                  sequence), then the partial ones: the longest work starts first and
                  the short pieces fill the tail (the longest-processing-time-first rule)
        slots     item s of sequence b writes its partial state to slot
                  sum_{b' < b} n_b' + s, so a sequence's slots are adjacent for the combine

    The count is at most P / c + B <= target + B = `capacity`; blocks past the count
    exit at once. `target` (items that fill the GPU) and `min_pages` (the least pages
    worth a block) come from the plan (`paged.paged_decode_plan`); each block spends
    3 B steps of integer arithmetic on it (B = batch size).
"""

from __future__ import annotations

import types
from functools import lru_cache

from numba import cuda, float32, float64
from numba import uint32 as U32

from ...constants import F0, F1
from ...paged_cache import token_address
from ..common._device import inlined
from ..ptx.fp8 import encode_e4m3
from .decode_kernels import combine_row, split_body, split_name
from .decode_tc_kernels import DecodeTCConfig, split_tc_body, split_tc_name

#: the block-table formula, compiled for the device (the numpy model's own function)
address = inlined(token_address)


# ---------------------------------------------------------------------------------------
# The work list (plain Python: compiled into the kernels, and run on the host by tests)
# ---------------------------------------------------------------------------------------

def seq_pages(seq_lens, i, page_size, width):
    """Pages sequence i occupies now: its length clamped to 0 .. width * page_size (the
    block table's reach: a bad length never reads outside the table), in pages."""
    n = min(max(seq_lens[i], 0), width * page_size)
    return (n + page_size - 1) // page_size, n


def schedule(seq_lens, page_size, width, target, min_pages):
    """(chunk c in pages, full items F) for the current lengths."""
    total = 0
    for i in range(seq_lens.shape[0]):
        p, _ = seq_pages(seq_lens, i, page_size, width)
        total += p
    c = max(min_pages, (total + target - 1) // target)
    full = 0
    for i in range(seq_lens.shape[0]):
        p, _ = seq_pages(seq_lens, i, page_size, width)
        full += U32(p) // U32(c)          # 32-bit division: cheaper on the GPU
    return c, full


def work_item(seq_lens, x, page_size, width, target, min_pages):
    """Block x's item: (b, first key, end key, slot); b = -1 when x is past the items."""
    c, full = schedule(seq_lens, page_size, width, target, min_pages)
    nf_before = 0           # full items of the sequences before b
    np_before = 0           # partial items of the sequences before b
    slots = 0               # items (slots) of the sequences before b
    b = -1
    k0 = 0
    k1 = 0
    slot = 0
    for i in range(seq_lens.shape[0]):
        p, n = seq_pages(seq_lens, i, page_size, width)
        nf = U32(p) // U32(c)
        part = 1 if p - nf * c > 0 else 0
        if b < 0:
            if x < full and x < nf_before + nf:             # a full item of sequence i
                s = x - nf_before
                b, k0, k1, slot = i, s * c * page_size, min((s + 1) * c * page_size, n), \
                    slots + s
            elif x >= full and part == 1 and x - full == np_before:   # its partial item
                b, k0, k1, slot = i, nf * c * page_size, n, slots + nf
        nf_before += nf
        np_before += part
        slots += nf + part
    return b, k0, k1, slot


def seq_items(seq_lens, b, page_size, width, target, min_pages):
    """(first slot, number of items) of sequence b: where the combine finds its states."""
    c, _ = schedule(seq_lens, page_size, width, target, min_pages)
    first = 0
    for i in range(b):
        p, _ = seq_pages(seq_lens, i, page_size, width)
        first += U32(p + c - 1) // U32(c)
    p, _ = seq_pages(seq_lens, b, page_size, width)
    return first, U32(p + c - 1) // U32(c)


def device_twin(fn, **helpers):
    """`fn`'s own code compiled as an inlined device function, with the plain helpers it
    calls by name replaced by their device twins (`helpers`): one source for the host's
    replay of the schedule and for the kernels."""
    glob = dict(fn.__globals__, **helpers)
    return inlined(types.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__,
                                      fn.__closure__))


_SEQ_PAGES = device_twin(seq_pages)
_SCHEDULE = device_twin(schedule, seq_pages=_SEQ_PAGES)
WORK_ITEM = device_twin(work_item, schedule=_SCHEDULE, seq_pages=_SEQ_PAGES)
SEQ_ITEMS = device_twin(seq_items, schedule=_SCHEDULE, seq_pages=_SEQ_PAGES)


# ---------------------------------------------------------------------------------------
# Where a key is
# ---------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def paged_locate(page_size: int):
    """`split_body`'s locate for pages: the page of key `key` (kv: the sequence's row of
    the block table as a (1, W) view), read one step before the key's loads; 0 for a key
    past the item (never read)."""
    PS = page_size

    @inlined
    def locate(kv, key, valid):
        page = 0
        if valid:
            page, _ = address(kv, 0, key, PS)
        return page
    return locate


@lru_cache(maxsize=None)
def paged_key_row(page_size: int):
    """`split_body`'s key_row for pages: key -> (page * Hkv + h, slot, page_size) of the
    (num_pages * Hkv, page_size, d) view, from the page `paged_locate` read; nkv = Hkv,
    heads = num_pages * Hkv (a bad page index is clamped into the pool: wrong numbers,
    never a read outside it)."""
    PS = page_size

    @inlined
    def key_row(kv, h, nkv, key, valid, heads, page):
        hh = h
        kk = PS                                     # past the item: zeros, never read
        if valid:
            kk = key % PS
            hh = min(max(page * nkv + h, 0), heads - 1)
        return hh, kk, PS
    return key_row


@lru_cache(maxsize=None)
def paged_tile_base(page_size: int):
    """`split_tc_body`'s tile_base for pages: the Bc keys of a tile from k0 lie in one page
    (Bc divides page_size, k0 a multiple of Bc), the page `paged_locate` read; rows kbase
    + key of the flat (num_pages * Hkv * page_size) rows; a tile wholly past k_end reads
    page 0 (zero bytes)."""
    PS = page_size

    @inlined
    def tile_base(kv, h, nkv, k0, k_end, krows, page):
        kb = h * PS
        kz = 0
        if k0 < k_end:
            hh = min(max(page * nkv + h, 0), krows // PS - 1)
            kz = k0 - k0 % PS                       # first key of the page
            kb = hh * PS - kz
        return kb, kz
    return tile_base


# ---------------------------------------------------------------------------------------
# The kernels
# ---------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def make_paged_split_kernel(cfg, page_size: int):
    """The split kernel for a paged cache: `cfg` a `DecodeConfig` (CUDA cores) or a
    `DecodeTCConfig` (tensor cores). Launch with grid (Hkv, row blocks, capacity) and the
    config's threads and shared bytes. Arguments:
        q (B*Hq*Tq, d) (tensor cores: d/2 fp16-pair words), k, v the pool as
        (num_pages*Hkv, page_size, d) (tensor cores: its flat words), o_part
        (capacity, Hq*Tq, d), lse_part (capacity, Hq*Tq) float32, block_table (B, W),
        seq_lens (B,) int32, Hkv, R = G*Tq rows per KV head, Tq, d (unused by the tensor-core
        kernel, whose d is its config's), qscale =
        scale*log2(e), causal (0/1), target, min_pages (`work_item`). An FP8 pool
        (cfg.fp8, CUDA cores) takes k_scale, v_scale after v: per (B, Hkv) as (B*Hkv, 1), or
        per block of tokens as (num_pages*Hkv, page_size / scale_block) (`split_body`).
    """
    PS = page_size
    tc = isinstance(cfg, DecodeTCConfig)
    body = (split_tc_body(cfg, paged_tile_base(PS), paged_locate(PS)) if tc
            else split_body(cfg, paged_key_row(PS), paged_locate(PS)))
    RB = cfg.rows

    @inlined
    def item(seq_lens, width, target, min_pages):
        """This block's work item (b, first key, end key, slot; b = -1 past the items) and
        its sequence's length n clipped to the table's width pages (0 past the items)."""
        b, k0, k1, slot = WORK_ITEM(seq_lens, cuda.blockIdx.z, PS, width, target, min_pages)
        n = 0
        if b >= 0:
            n = min(max(seq_lens[b], 0), width * PS)
        return b, k0, k1, slot, n

    def paged_split(q, k, v, o_part, lse_part, block_table, seq_lens, hkv, rows_kv, tq, d,
                    qscale, causal, target, min_pages):
        b, k0, k1, slot, n = item(seq_lens, block_table.shape[1], target, min_pages)
        if b < 0:                                   # past the items: the whole block
            return
        hk = cuda.blockIdx.x                        # KV head
        body(q, k, v, lse_part, lse_part, 0, o_part, lse_part, slot, block_table[b:b + 1],
             hk, hkv, (b * hkv + hk) * rows_kv, hk * rows_kv, cuda.blockIdx.y * RB, rows_kv,
             tq, d, k0, k1, qscale, causal, n - tq)

    def paged_split_fp8(q, k, v, k_scale, v_scale, o_part, lse_part, block_table, seq_lens,
                        hkv, rows_kv, tq, d, qscale, causal, target, min_pages):
        b, k0, k1, slot, n = item(seq_lens, block_table.shape[1], target, min_pages)
        if b < 0:
            return
        hk = cuda.blockIdx.x
        body(q, k, v, k_scale, v_scale, b * hkv + hk, o_part, lse_part, slot,
             block_table[b:b + 1], hk, hkv, (b * hkv + hk) * rows_kv, hk * rows_kv,
             cuda.blockIdx.y * RB, rows_kv, tq, d, k0, k1, qscale, causal, n - tq)

    def paged_split_tc(q, k, v, o_part, lse_part, block_table, seq_lens, hkv, rows_kv, tq,
                       d, qscale, causal, target, min_pages):
        b, k0, k1, slot, n = item(seq_lens, block_table.shape[1], target, min_pages)
        if b < 0:
            return
        hk = cuda.blockIdx.x
        body(q, k, v, o_part, lse_part, slot, block_table[b:b + 1], hk, hkv,
             (b * hkv + hk) * rows_kv, hk * rows_kv, cuda.blockIdx.y * RB, rows_kv, tq,
             k0, k1, qscale, causal, n - tq)

    if tc:
        paged_split = paged_split_tc
    elif cfg.fp8:
        paged_split = paged_split_fp8
    paged_split.__name__ = (split_tc_name(cfg, f"paged_split_tc_p{PS}") if tc
                            else split_name(cfg, f"paged_split_p{PS}"))
    return cuda.jit(paged_split)


@lru_cache(maxsize=None)
def make_paged_combine_kernel(threads: int, page_size: int):
    """One block per query row (B*Hq*Tq blocks): merges the states of the row's sequence's
    items. Arguments: o_part (capacity, Hq*Tq, d), lse_part (capacity, Hq*Tq), o
    (B*Hq*Tq, d), lse (B*Hq*Tq) float32, seq_lens (B,) int32, W = block_table.shape[1],
    Hq*Tq, d, target, min_pages."""
    NT, PS = threads, page_size

    def paged_combine(o_part, lse_part, o, lse, seq_lens, width, rows_seq, d, target,
                      min_pages):
        row = cuda.blockIdx.x
        b = row // rows_seq
        s0, n = SEQ_ITEMS(seq_lens, b, PS, width, target, min_pages)
        combine_row(o_part, lse_part, o, lse, s0, n, row - b * rows_seq, row, d,
                    cuda.threadIdx.x, NT)

    paged_combine.__name__ = f"paged_combine_t{NT}_p{PS}"
    return cuda.jit(paged_combine)


@lru_cache(maxsize=None)
def make_append_kernel(page_size: int):
    """Launch with grid (n new tokens, Hkv, B) and up to 128 threads. Arguments: k_pages,
    v_pages (num_pages, Hkv, page_size, d), block_table (B, W), seq_lens (B,) int32 (the
    lengths before the append), k_new, v_new (B, Hkv, n, d) of the pool's dtype. New
    token i of sequence b goes to position seq_lens[b] + i; a position past the table or
    a page outside the pool is skipped (the host checks them first)."""
    PS = page_size

    def paged_append(k_pages, v_pages, block_table, seq_lens, k_new, v_new):
        i = cuda.blockIdx.x
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        t = seq_lens[b] + i
        if t < 0 or t >= block_table.shape[1] * PS:
            return
        page, slot = address(block_table, b, t, PS)
        if page < 0 or page >= k_pages.shape[0]:
            return
        for c in range(cuda.threadIdx.x, k_new.shape[3], cuda.blockDim.x):
            k_pages[page, h, slot, c] = k_new[b, h, i, c]
            v_pages[page, h, slot, c] = v_new[b, h, i, c]

    paged_append.__name__ = f"paged_append_p{PS}"
    return cuda.jit(paged_append)


#: Threads of a block of the FP8 append (a power of two: the amax is a tree reduction)
APPEND_FP8_THREADS = 64
#: its shared memory: the K and V amax of every thread (a module constant: a shape the
#: compiler fixes)
APPEND_FP8_RED = 2 * APPEND_FP8_THREADS


@lru_cache(maxsize=None)
def make_append_fp8_kernel(page_size: int, scale_block: int):
    """The append into an FP8 pool (`flashcourse.fp8.kv.append_tokens` is its numpy model,
    bit for bit). Launch with grid (n new tokens, Hkv, B) and APPEND_FP8_THREADS threads.
    Arguments: k_pages, v_pages (num_pages, Hkv, page_size, d) uint8 codes, k_scale, v_scale
    (num_pages, Hkv, page_size / scale_block) float32 (scale_block > 0, read and written) or
    (B, Hkv) (scale_block 0, read), block_table (B, W), seq_lens (B,) int32 (before the
    append), k_new, v_new (B, Hkv, n, d) float16 or float32.

    The block of token i (sequence b, KV head h) finds its page, slot and scale block; if
    that block's first token is among the new ones ("opened" by this append), every
    thread block writing into it computes the same amax of the new tokens there (a tree
    reduction in shared memory) and the one holding the block's first token stores
    amax / 448 (in float64, then float32, as numpy); otherwise the stored scale is read.
    Each value is divided by its scale in float32 and rounded to e4m3 with saturation
    (`ptx.fp8.encode_e4m3`)."""
    PS, SB, NT = page_size, scale_block, APPEND_FP8_THREADS

    def paged_append_fp8(k_pages, v_pages, k_scale, v_scale, block_table, seq_lens, k_new,
                         v_new):
        i = cuda.blockIdx.x
        h = cuda.blockIdx.y
        b = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        start = seq_lens[b]
        t = start + i
        if t < 0 or t >= block_table.shape[1] * PS:
            return
        page, slot = address(block_table, b, t, PS)
        if page < 0 or page >= k_pages.shape[0]:
            return
        d = k_new.shape[3]
        red = cuda.shared.array(APPEND_FP8_RED, float32)
        if SB > 0:
            g = slot // SB
            first = t - slot % SB                   # the block's first token
            if first >= start:                      # opened by this append: set its scales
                j1 = min(first + SB, start + k_new.shape[2]) - start
                ak = F0
                av = F0
                for j in range(first - start, j1):
                    for c in range(tid, d, NT):
                        ak = max(ak, abs(float32(k_new[b, h, j, c])))
                        av = max(av, abs(float32(v_new[b, h, j, c])))
                red[tid] = ak
                red[NT + tid] = av
                cuda.syncthreads()
                step = NT // 2
                while step > 0:
                    if tid < step:
                        red[tid] = max(red[tid], red[tid + step])
                        red[NT + tid] = max(red[NT + tid], red[NT + tid + step])
                    cuda.syncthreads()
                    step //= 2
                ks = float32(float64(red[0]) / 448.0) if red[0] > F0 else F1
                vs = float32(float64(red[NT]) / 448.0) if red[NT] > F0 else F1
                if tid == 0 and slot % SB == 0:
                    k_scale[page, h, g] = ks
                    v_scale[page, h, g] = vs
            else:
                ks = k_scale[page, h, g]
                vs = v_scale[page, h, g]
        else:
            ks = k_scale[b, h]
            vs = v_scale[b, h]
        for c in range(tid, d, NT):
            k_pages[page, h, slot, c] = encode_e4m3(float32(k_new[b, h, i, c]) / ks)
            v_pages[page, h, slot, c] = encode_e4m3(float32(v_new[b, h, i, c]) / vs)

    paged_append_fp8.__name__ = f"paged_append_fp8_p{PS}_s{SB}"
    return cuda.jit(paged_append_fp8)
