"""A paged KV cache in numpy: one pool of pages, block tables, appends, paged decoding.

Why pages
    A server decodes many requests at once, each with its own, growing context. Giving
    every request one contiguous (Hkv, T_max, d) buffer wastes the memory of every token
    it never reaches, and a request that outgrows its buffer must be copied. Instead the
    cache is cut into pages of `page_size` tokens held in one pool; each request owns a
    list of pages, its row of the *block table*, and takes a new page from a free list
    only when its last page is full (vLLM's PagedAttention, Kwon et al., 2023). Two
    requests with a common prefix can point at the same pages.

Layout (the one the GPU kernels read: `flashcourse.cuda.paged_decode`)
    k_pages, v_pages  (num_pages, Hkv, page_size, d)   the pool of one layer. "HND": each
                      (page, KV head) is one contiguous page_size x d block, so a page of
                      one head reads like page_size rows of a contiguous cache
    block_table       (B, max_pages_per_seq) int32     block_table[b, i] is the pool page
                      holding tokens i*page_size .. (i+1)*page_size - 1 of sequence b
    seq_lens          (B,) int32                       tokens in each sequence's cache,
                      1 .. max_pages_per_seq * page_size
    q                 (B, Hq, Tq, d)                   the Tq newest tokens' queries (Tq
                      small: 1 .. 8); causal bottom-right against the sequence's own
                      length: query i sees key j iff j <= i + seq_lens[b] - Tq

The address of token t of sequence b (`token_address`, the one formula every path uses):
    page = block_table[b, t // page_size],   slot = t % page_size
    its key of KV head h is k_pages[page, h, slot]   (d values)

A table entry past a sequence's pages is never read (`NO_PAGE` in `PagedKVCache`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import reference
from ._checks import check_array, check_count, check_scale, check_whole
from ._guards import dense_memory_limit
from .decode import check_gqa, expand_kv

#: Tokens per page the course's kernels are built for.
PAGE_SIZES = (16, 32, 64, 128, 256)
#: A block-table entry that holds no page (`PagedKVCache` fills unused entries with it).
NO_PAGE = -1


def token_address(block_table, b, t, page_size):
    """(page, slot) of token t of sequence b: page = block_table[b, t // page_size],
    slot = t % page_size. t may be an int or an int array (numpy); the GPU kernels
    compile this same function (`flashcourse.cuda.decoding.paged_kernels`)."""
    return block_table[b, t // page_size], t % page_size


def pages_for(seq_len, page_size):
    """Pages a sequence of seq_len tokens occupies: ceil(seq_len / page_size). page_size:
    a whole number >= 1; seq_len: a whole number >= 0 or an integer array (an error
    naming either otherwise)."""
    page_size = check_whole(page_size, "page_size", least=1)
    if isinstance(seq_len, np.ndarray):
        if seq_len.dtype.kind not in "iu":
            raise TypeError(f"seq_len must hold integers, got dtype {seq_len.dtype}")
    else:
        seq_len = check_whole(seq_len, "seq_len")
    return (seq_len + page_size - 1) // page_size


# ---------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------

def check_page_size(page_size) -> int:
    """page_size as an int, one of PAGE_SIZES; else a ValueError naming it."""
    if isinstance(page_size, (bool, np.bool_)) or not isinstance(page_size, (int, np.integer)) \
            or int(page_size) not in PAGE_SIZES:
        raise ValueError(f"page_size must be one of {PAGE_SIZES} tokens, got {page_size!r}")
    return int(page_size)


def check_pool(k_pages, v_pages, *, allow_nonfinite: bool = False):
    """k_pages, v_pages as validated (num_pages, Hkv, page_size, d) arrays of one shape and
    dtype, page_size in PAGE_SIZES."""
    k_pages = check_array(k_pages, "k_pages", allow_nonfinite=allow_nonfinite)
    v_pages = check_array(v_pages, "v_pages", allow_nonfinite=allow_nonfinite)
    check_pool_shapes(k_pages.shape, v_pages.shape, k_pages.dtype, v_pages.dtype)
    return k_pages, v_pages


def check_pool_shapes(ks: tuple, vs: tuple, kdt, vdt) -> int:
    """Shape and dtype rules of the pool (numpy or device arrays); returns page_size."""
    if len(ks) != 4:
        raise ValueError(f"k_pages must have 4 dimensions (num_pages, Hkv, page_size, d), got "
                         f"shape {tuple(ks)}")
    if tuple(vs) != tuple(ks):
        raise ValueError(f"v_pages must have the shape of k_pages (num_pages, Hkv, page_size, "
                         f"d), got k_pages {tuple(ks)} and v_pages {tuple(vs)}")
    if np.dtype(kdt) != np.dtype(vdt):
        raise TypeError(f"k_pages and v_pages must share one dtype, got {kdt} and {vdt}")
    try:
        return check_page_size(int(ks[2]))
    except ValueError:
        raise ValueError(f"page_size = k_pages.shape[2] = {ks[2]} must be one of "
                         f"{PAGE_SIZES} tokens") from None


def check_table_arrays(block_table, seq_lens, batch: int):
    """block_table (B, W) and seq_lens (B,) as int32 numpy arrays; TypeError/ValueError
    naming the argument for another type, dtype or shape (nothing is converted: an int64
    table is refused, as the kernels read int32)."""
    for name, x, nd, what in (("block_table", block_table, 2, "(B, max_pages_per_seq)"),
                              ("seq_lens", seq_lens, 1, "(B,)")):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a numpy int32 array {what}, got "
                            f"{type(x).__name__}")
        check_table_meta(name, x.shape, x.dtype, nd, what, batch)
    return block_table, seq_lens


def check_table_meta(name: str, shape, dtype, nd: int, what: str, batch: int) -> None:
    """dtype int32, nd dimensions, first dimension B (numpy or device arrays)."""
    if np.dtype(dtype) != np.int32:
        raise TypeError(f"{name} must have dtype int32, got {dtype}")
    shape = tuple(int(n) for n in shape)
    if len(shape) != nd or shape[0] != batch or 0 in shape:
        raise ValueError(f"{name} must have shape {what} with B = q.shape[0] = {batch}, got "
                         f"{shape}")


def check_table_values(block_table, seq_lens, num_pages: int, page_size: int) -> None:
    """Every length in 1 .. W * page_size (W = block_table.shape[1]) and every page a
    sequence uses in 0 .. num_pages - 1; else a ValueError naming the first bad entry."""
    width = block_table.shape[1]
    for b, n in enumerate(seq_lens.tolist()):
        if n < 1:
            raise ValueError(f"seq_lens[{b}] = {n}: every sequence needs at least one token "
                             f"in its cache (lengths 1 .. {width * page_size})")
        need = pages_for(n, page_size)
        if need > width:
            raise ValueError(
                f"seq_lens[{b}] = {n} needs ceil({n} / page_size {page_size}) = {need} pages, "
                f"but block_table has only {width} columns: the table is too short for "
                f"this length")
        row = block_table[b, :need]
        bad = np.flatnonzero((row < 0) | (row >= num_pages))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"block_table[{b}, {i}] = {int(row[i])} is not a page of the pool (0 .. "
                f"{num_pages - 1}); sequence {b} uses its first {need} entries")


def check_paged(q, k_pages, v_pages, block_table, seq_lens, *, allow_nonfinite=False):
    """Validate the inputs of a paged decode (numpy arrays). Returns (q, k_pages, v_pages,
    block_table, seq_lens, group G, page_size). Errors name the argument: shapes that
    disagree, dtypes, page_size not in PAGE_SIZES, a non-int32 table or length array,
    lengths below 1, a table too short for a length, a page index out of the pool."""
    k_pages, v_pages = check_pool(k_pages, v_pages, allow_nonfinite=allow_nonfinite)
    num_pages, hkv, page_size, d = k_pages.shape
    q = check_array(q, "q", allow_nonfinite=allow_nonfinite)
    if q.ndim != 4:
        raise ValueError(f"q must have 4 dimensions (B, Hq, Tq, d), got shape {q.shape}")
    # the GQA rules of the contiguous decode, on q and one page of each head
    _, _, _, group = check_gqa(q[:1], k_pages[:1], v_pages[:1],
                               allow_nonfinite=allow_nonfinite)
    check_table_arrays(block_table, seq_lens, q.shape[0])
    check_table_values(block_table, seq_lens, num_pages, page_size)
    return q, k_pages, v_pages, block_table, seq_lens, group, page_size


# ---------------------------------------------------------------------------------------
# Reading and writing through the block table
# ---------------------------------------------------------------------------------------

def _check_map(block_table, seq_lens, page_size, num_pages):
    """The arguments of `page_map` and `slot_usage`: block_table a 2-D integer array (B, W),
    seq_lens B whole numbers >= 0 each within W pages, page_size and num_pages whole
    numbers >= 1, every used entry a page 0 .. num_pages - 1; else an error naming it."""
    if not isinstance(block_table, np.ndarray) or block_table.dtype.kind not in "iu" \
            or block_table.ndim != 2:
        raise TypeError(f"block_table must be a 2-D integer numpy array (B, max_pages_per_"
                        f"seq), got {getattr(block_table, 'shape', type(block_table).__name__)}"
                        f" {getattr(block_table, 'dtype', '')}")
    lens = np.asarray(seq_lens)
    if lens.dtype.kind not in "iu" or lens.shape != block_table.shape[:1]:
        raise ValueError(f"seq_lens must be {block_table.shape[0]} whole numbers (one per row "
                         f"of block_table), got {seq_lens!r}")
    page_size = check_whole(page_size, "page_size", least=1)
    num_pages = check_count(num_pages, "num_pages", MAX_MAP_PAGES)
    for b, n in enumerate(lens.tolist()):
        need = pages_for(check_whole(n, f"seq_lens[{b}]"), page_size)
        if need > block_table.shape[1]:
            raise ValueError(f"seq_lens[{b}] = {n} needs {need} pages, more than block_table's "
                             f"{block_table.shape[1]} columns")
        row = block_table[b, :need]
        if ((row < 0) | (row >= num_pages)).any():
            raise ValueError(f"block_table row {b} uses {row.tolist()}: pages must be 0 .. "
                             f"num_pages - 1 = {num_pages - 1}")
    return page_size, num_pages


#: The most pages `page_map` draws a map of.
MAX_MAP_PAGES = 1 << 24


def gather(pages, block_table, b: int, seq_len: int):
    """The first seq_len tokens of sequence b as a contiguous (Hkv, seq_len, d) array
    (a copy): token t is pages[page, :, slot] with (page, slot) = token_address.

    pages (P, Hkv, page_size, d) a numpy array, block_table (B, W) integers, 0 <= b < B,
    0 <= seq_len <= W * page_size, the pages used within 0 .. P - 1; else an error
    naming the argument."""
    if not isinstance(pages, np.ndarray) or pages.ndim != 4 or 0 in pages.shape:
        raise ValueError(f"pages must be a numpy array (num_pages, Hkv, page_size, d) with no "
                         f"empty axis, got {getattr(pages, 'shape', type(pages).__name__)}")
    ps = pages.shape[2]
    rows = np.zeros(0, np.int64) if not isinstance(block_table, np.ndarray) else \
        np.zeros(block_table.shape[0] if block_table.ndim else 0, np.int64)
    _check_map(block_table, rows, ps, pages.shape[0])
    b = check_whole(b, "b")
    if b >= block_table.shape[0]:
        raise ValueError(f"b must be a row of block_table, 0 .. {block_table.shape[0] - 1}, "
                         f"got {b}")
    seq_len = check_whole(seq_len, "seq_len")
    if seq_len > block_table.shape[1] * ps:
        raise ValueError(f"seq_len must be at most block_table's {block_table.shape[1]} pages "
                         f"x page_size {ps} = {block_table.shape[1] * ps}, got {seq_len}")
    lens = np.zeros(block_table.shape[0], np.int64)
    lens[b] = seq_len
    _check_map(block_table, lens, ps, pages.shape[0])
    t = np.arange(seq_len)
    page, slot = token_address(block_table, b, t, ps)
    return pages[page, :, slot].transpose(1, 0, 2)           # (L, Hkv, d) -> (Hkv, L, d)


def write_tokens(k_pages, v_pages, block_table, seq_lens, k_new, v_new):
    """The append in place, through the block table (what the GPU's append kernel does):
    new token i of sequence b goes to position seq_lens[b] + i. k_new, v_new
    (B, Hkv, n, d); seq_lens are the lengths before the append and are not changed;
    the pages must already be in the table. Returns the new lengths seq_lens + n."""
    n = k_new.shape[2]
    page_size = k_pages.shape[2]
    for b in range(k_new.shape[0]):
        t = seq_lens[b] + np.arange(n)
        page, slot = token_address(block_table, b, t, page_size)
        k_pages[page, :, slot] = k_new[b].transpose(1, 0, 2)   # (n, Hkv, d)
        v_pages[page, :, slot] = v_new[b].transpose(1, 0, 2)
    return (seq_lens + n).astype(np.int32)


# ---------------------------------------------------------------------------------------
# What a pool holds: pages, owners, wasted slots (notebook 11b and its explorer)
# ---------------------------------------------------------------------------------------

#: `page_map`'s owner of a page that two or more sequences use (a shared prefix page).
SHARED = -2
#: `page_map`'s owner of a page no sequence uses (on the free list).
FREE = -1


def page_map(block_table, seq_lens, page_size, num_pages):
    """(owner, fill): two (num_pages,) int arrays. owner[p] is the one sequence whose
    table holds page p, SHARED when several do, FREE when none; fill[p] the tokens page p
    holds, the most any of its sequences keeps there (a shared page holds one copy).
    The arguments as `_check_map` takes them (an error naming the argument otherwise)."""
    page_size, num_pages = _check_map(block_table, seq_lens, page_size, num_pages)
    owner = np.full(num_pages, FREE, np.int64)
    fill = np.zeros(num_pages, np.int64)
    for b, n in enumerate(np.asarray(seq_lens).tolist()):
        for i in range(pages_for(n, page_size)):
            p = int(block_table[b, i])
            owner[p] = b if owner[p] in (FREE, b) else SHARED
            fill[p] = max(fill[p], min(page_size, n - i * page_size))
    return owner, fill


@dataclass(frozen=True)
class SlotUsage:
    """Token slots of one batch under two ways of allocating its cache.

    contiguous: each request reserves max_len slots of its own (a prefix common to
                several requests is stored once per request)
    paged:      the pages in use, page_size slots each; a shared page counts once
    tokens:     the sum of the lengths (what the requests hold, each counted in full);
    stored:     the token slots actually written (a shared prefix page counted once)
    """

    requests: int
    tokens: int
    stored: int
    max_len: int
    page_size: int
    pages: int
    shared_pages: int

    @property
    def contiguous_slots(self) -> int:          # B x max_len
        return self.requests * self.max_len

    @property
    def contiguous_wasted(self) -> int:         # reserved, never written
        return self.contiguous_slots - self.tokens

    @property
    def paged_slots(self) -> int:               # pages x page_size
        return self.pages * self.page_size

    @property
    def paged_wasted(self) -> int:              # the unfilled ends of last pages
        return self.paged_slots - self.stored

    @property
    def shared_saving(self) -> int:             # slots a shared prefix did not repeat
        return self.tokens - self.stored


def slot_usage(block_table, seq_lens, page_size, num_pages, max_len) -> SlotUsage:
    """`SlotUsage` of a paged cache's state against a contiguous allocation of max_len
    slots per request (`page_map` counts the pages and what they hold); max_len a whole
    number >= 0."""
    max_len = check_whole(max_len, "max_len")
    owner, fill = page_map(block_table, seq_lens, page_size, num_pages)
    lens = np.asarray(seq_lens, np.int64)
    return SlotUsage(int(lens.size), int(lens.sum()), int(fill.sum()), int(max_len),
                     int(page_size), int((owner != FREE).sum()), int((owner == SHARED).sum()))


class PagedKVCache:
    """One layer's paged KV cache for up to max_seqs sequences.

        cache = PagedKVCache(num_pages=64, heads_kv=2, page_size=16, head_dim=8,
                             max_seqs=4, max_pages_per_seq=8)
        cache.append(0, k_new, v_new)         # (Hkv, n, d): takes pages as they fill
        k, v = cache.gather(0)                # (Hkv, seq_lens[0], d), contiguous copies

    k_pages, v_pages, block_table, seq_lens are the arrays `paged_decode` reads. Pages are
    reference-counted: `fork` lets a second sequence share a prefix's pages; a write into
    a shared page copies it first (copy-on-write), and `release` returns pages no sequence
    uses to the free list.
    """

    def __init__(self, num_pages, heads_kv, page_size, head_dim, max_seqs,
                 max_pages_per_seq, dtype=np.float64):
        num_pages = check_count(num_pages, "num_pages")
        self.page_size = check_page_size(page_size)
        shape = (num_pages, check_count(heads_kv, "heads_kv"), self.page_size,
                 check_count(head_dim, "head_dim"))
        if not isinstance(dtype, (type, np.dtype, str)) or np.dtype(dtype) not in (
                np.float16, np.float32, np.float64):
            raise TypeError(f"dtype must be float16, float32 or float64, got {dtype!r}")
        rows = check_count(max_seqs, "max_seqs") * check_count(max_pages_per_seq,
                                                                "max_pages_per_seq")
        need = 2 * math.prod(shape) * np.dtype(dtype).itemsize + 4 * rows
        if need > dense_memory_limit():
            raise ValueError(
                f"num_pages x heads_kv x page_size x head_dim (K and V) and max_seqs x "
                f"max_pages_per_seq (the block table) need {need:,} bytes, more than the "
                f"{dense_memory_limit():,} allowed (half the memory; "
                f"FLASHCOURSE_DENSE_MAX_BYTES changes it): choose smaller sizes")
        self.k_pages = np.zeros(shape, dtype)                       # (P, Hkv, page, d)
        self.v_pages = np.zeros(shape, dtype)
        self.block_table = np.full((check_count(max_seqs, "max_seqs"),
                                    check_count(max_pages_per_seq, "max_pages_per_seq")),
                                   NO_PAGE, np.int32)               # (B, W)
        self.seq_lens = np.zeros(max_seqs, np.int32)                # (B,)
        self.refs = np.zeros(num_pages, np.int32)     # sequences using each page
        self.free = list(range(num_pages - 1, -1, -1))  # pop() hands out page 0 first

    def _take_page(self) -> int:
        if not self.free:
            raise MemoryError(f"the pool's {self.refs.size} pages are all in use: release a "
                              f"sequence or build a larger pool")
        page = self.free.pop()
        self.refs[page] = 1
        return page

    def _check_seq(self, seq) -> int:
        seq = check_whole(seq, "seq", meaning="a sequence of the cache")
        if seq >= self.seq_lens.size:
            raise ValueError(f"seq must be below max_seqs = {self.seq_lens.size}, got {seq}")
        return seq

    def append(self, seq, k_new, v_new):
        """Write k_new, v_new (Hkv, n, d) after the last token of sequence seq, taking a
        page from the free list whenever a token starts a page (t % page_size == 0)."""
        seq = self._check_seq(seq)
        hkv, d = self.k_pages.shape[1], self.k_pages.shape[3]
        for name, x in (("k_new", k_new), ("v_new", v_new)):
            if np.shape(x)[:1] + np.shape(x)[2:] != (hkv, d) or np.ndim(x) != 3:
                raise ValueError(f"{name} must have shape (Hkv, n, d) = ({hkv}, n, {d}), got "
                                 f"{np.shape(x)}")
        if np.shape(v_new) != np.shape(k_new):       # one value per key: the same n tokens
            raise ValueError(f"v_new must have the shape of k_new, {np.shape(k_new)}, got "
                             f"{np.shape(v_new)}")
        n, start = np.shape(k_new)[1], int(self.seq_lens[seq])
        width = self.block_table.shape[1]
        if pages_for(start + n, self.page_size) > width:
            raise ValueError(f"sequence {seq} would hold {start + n} tokens, more than its "
                             f"{width} pages of {self.page_size}")
        for t in range(start, start + n):
            i = t // self.page_size
            if t % self.page_size == 0:                          # a new page
                self.block_table[seq, i] = self._take_page()
            elif self.refs[self.block_table[seq, i]] > 1:        # shared: copy on write
                old = self.block_table[seq, i]
                self.refs[old] -= 1
                new = self.block_table[seq, i] = self._take_page()
                self.k_pages[new], self.v_pages[new] = self.k_pages[old], self.v_pages[old]
        self.seq_lens[seq] = write_tokens(
            self.k_pages, self.v_pages, self.block_table[seq:seq + 1],
            self.seq_lens[seq:seq + 1], np.asarray(k_new)[None], np.asarray(v_new)[None])[0]

    def gather(self, seq):
        """(k, v) of sequence seq, each (Hkv, seq_lens[seq], d), contiguous copies."""
        seq = self._check_seq(seq)
        n = int(self.seq_lens[seq])
        return (gather(self.k_pages, self.block_table, seq, n),
                gather(self.v_pages, self.block_table, seq, n))

    def fork(self, src, dst):
        """Sequence dst (empty) starts as a copy of src that shares src's pages."""
        src, dst = self._check_seq(src), self._check_seq(dst)
        if self.seq_lens[dst]:
            raise ValueError(f"sequence {dst} is not empty: release it before forking into it")
        used = pages_for(int(self.seq_lens[src]), self.page_size)
        self.block_table[dst, :used] = self.block_table[src, :used]
        self.refs[self.block_table[src, :used]] += 1
        self.seq_lens[dst] = self.seq_lens[src]

    def release(self, seq):
        """Sequence seq ends: its pages that no other sequence uses go back to the pool."""
        seq = self._check_seq(seq)
        for page in self.block_table[seq, :pages_for(int(self.seq_lens[seq]),
                                                    self.page_size)].tolist():
            self.refs[page] -= 1
            if self.refs[page] == 0:
                self.free.append(page)
        self.block_table[seq] = NO_PAGE
        self.seq_lens[seq] = 0


# ---------------------------------------------------------------------------------------
# The float64 reference of a paged decode
# ---------------------------------------------------------------------------------------

def paged_reference(q, k_pages, v_pages, block_table, seq_lens, *, causal=False, scale=None,
                    allow_nonfinite=False):
    """Paged decoding in float64: each sequence's cache gathered to a contiguous
    (Hkv, seq_lens[b], d) copy and handed to `reference.attention` (K/V repeated per
    query head). q (B, Hq, Tq, d); returns o (B, Hq, Tq, d) and lse (B, Hq, Tq) float64
    (a row with no visible key: o = 0, lse = -inf)."""
    q, k_pages, v_pages, block_table, seq_lens, g, _ = check_paged(
        q, k_pages, v_pages, block_table, seq_lens, allow_nonfinite=allow_nonfinite)
    scale = check_scale(scale, q.shape[-1])
    b, hq, tq, d = q.shape
    o = np.zeros((b, hq, tq, d))
    lse = np.zeros((b, hq, tq))
    for i, n in enumerate(seq_lens.tolist()):
        k = expand_kv(gather(k_pages, block_table, i, n)[None], g)[0]   # (Hq, L, d)
        v = expand_kv(gather(v_pages, block_table, i, n)[None], g)[0]
        o[i], lse[i] = reference.attention(q[i].astype(np.float64), k.astype(np.float64),
                                           v.astype(np.float64), causal=causal, scale=scale,
                                           allow_nonfinite=allow_nonfinite)
    return o, lse
