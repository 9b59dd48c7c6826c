"""Checkers for lab 11b (after notebook 11b): a paged KV cache written by the learner and
checked against the course's model (`flashcourse.paged_cache`). The learner writes

    my_token_address(block_table, b, t, page_size) -> (page, slot)
        page = block_table[b, t // page_size], slot = t % page_size
    my_gather(pages, block_table, b, seq_len) -> (Hkv, seq_len, d)
        the first seq_len tokens of sequence b, through the block table
    my_append(cache, b, k_new, v_new)            (in place; k_new, v_new (Hkv, n, d))
        the n new tokens after the last of sequence b: a token that starts a page
        (t % page_size == 0) takes a page from cache.free (`cache.free.pop()`, refs 1);
        a token written into a page that other sequences share (cache.refs > 1) first
        copies it (copy-on-write); cache.seq_lens[b] grows by n
    my_paged_attention(q, k_pages, v_pages, block_table, seq_lens, scale) -> o
        (going further) q (B, H, d): the online softmax over each sequence's pages

What is checked is behaviour: addresses against the model's at every position of shuffled
tables; an append by what the cache then holds (each sequence read back through the
learner's table, lengths, no page both used and free, reference counts matching the
tables). Each typical mistake gets its own hint (the page boundary off by one, a stale
length, the free list forgotten, a shared page written without copy-on-write).
"""

from __future__ import annotations

import numpy as np

from .. import paged_cache as pc
from ._harness import (HINT_PRECISION, HINT_PRECISION_2, Case, Result, ResultKindError,
                       run_checks)

# -- part 1: the address -----------------------------------------------------------------

HINT_ADDRESS = (
    "Token t of sequence b lies in table column t // page_size (whole pages before it) "
    "and, inside that page, at slot t % page_size. The table maps the column to the pool "
    "page: page = block_table[b, column].",
    "Two lines: the column by integer division, the page by looking the column up in row "
    "b of the table, the slot as the remainder.")
HINT_PAGE_OFF_BY_ONE = (
    "Page boundary off by one: the tokens that start a page (t = page_size, 2 page_size, "
    "...) got the page before theirs. Token t lies in column t // page_size: token "
    "page_size is the first of column 1, not the last of column 0.",
    "Divide t itself, not t - 1, by page_size.")
HINT_PAGE_ROUNDED_UP = (
    "Your column is rounded up: a token in the middle of a page got the next page. "
    "Integer division rounds down: tokens 0 .. page_size - 1 are column 0.",
    "Use t // page_size (floor), not a ceiling.")
HINT_ONE_BASED = (
    "Your columns count from 1: column 0 of the table holds the sequence's first page "
    "(tokens 0 .. page_size - 1).",
    "Drop the + 1 from the column.")
HINT_SWAPPED = (
    "The slot and the page are swapped: the page comes from the table (a pool page "
    "number), the slot is the position inside that page, 0 .. page_size - 1.",
    "Return (page, slot) in that order, and look the table up with the column t // "
    "page_size, not with t % page_size.")
HINT_NO_TABLE = (
    "You returned the table column as the page: the sequence's pages lie anywhere in the "
    "pool, and the block table says where. Look the column up in row b.",
    "page = the table's entry at row b, column t // page_size.")
HINT_SLOT_FROM_PAGE = (
    "Your slot is measured from the pool page's number: the slot is the token's place in "
    "its own page, t % page_size (or t minus the column's first token), whatever page "
    "number the table gave.",
    "The slot depends on t and page_size only.")
HINT_TABLE_ROWS = (
    "Your table lookup has its two indices swapped: row b is sequence b, column i its i-th "
    "page (block_table[b, i]).",
    "Index the table [b, column], in that order.")
HINT_INTS = ("Return two whole numbers (page, slot), e.g. a tuple of ints.",
             "return page, slot")


def _address_mistake(table, b, t, ps, mistake):
    """The address with one typical mistake (None: the model's)."""
    col, slot = t // ps, t % ps
    if mistake == "prev":
        col = (t - 1) // ps                   # t = 0: column -1, the last (numpy)
    elif mistake == "ceil":
        col = -(-t // ps)
    elif mistake == "one-based":
        col = col + 1
    elif mistake == "table by slot":
        return int(table[b, slot]), col
    elif mistake == "swapped":
        return slot, int(table[b, col])
    elif mistake == "no table":
        return col, slot
    elif mistake == "transposed":
        return int(table[col, b]), slot
    if col >= table.shape[1]:
        return -1, slot
    page = int(table[b, col])
    if mistake == "slot from page":
        slot = t - page * ps
    return page, slot


ADDRESS_MISTAKES = [("prev", HINT_PAGE_OFF_BY_ONE), ("ceil", HINT_PAGE_ROUNDED_UP),
                    ("one-based", HINT_ONE_BASED), ("swapped", HINT_SWAPPED),
                    ("table by slot", HINT_SWAPPED), ("no table", HINT_NO_TABLE),
                    ("slot from page", HINT_SLOT_FROM_PAGE), ("transposed", HINT_TABLE_ROWS)]

#: (name, block table, page_size, sequence, positions)
ADDRESS_CASES = [
    ("page 16, every position of sequence 1 (64 tokens, 4 pages)",
     [[7, 2, 9, 4], [5, 0, 11, 3], [1, 6, 8, 10], [12, 13, 14, 15]], 16, 1, range(64)),
    ("page 32, around each page boundary of sequence 0",
     [[12, 3, 40, 7, 21], [0, 1, 2, 5, 6]], 32, 0,
     [p + e for p in range(0, 160, 32) for e in (-1, 0, 1) if 0 <= p + e < 160]),
    ("page 256, sequence 2 of 3, far positions", [[9, 8], [7, 6], [3, 14]], 256, 2,
     [0, 1, 255, 256, 257, 300, 511]),
]
#: columns of every table: the used ones, then unused entries (NO_PAGE) as a real table has
ADDRESS_WIDTH = 16


def _as_address(y, t):
    if isinstance(y, (list, np.ndarray)):
        y = tuple(y)
    if not isinstance(y, tuple) or len(y) != 2 or any(
            isinstance(x, (bool, np.bool_, float, np.floating)) or not isinstance(
                x, (int, np.integer)) for x in y):
        raise ResultKindError(f"my_token_address(..., t = {t}, ...) returned {y!r}, not two "
                              f"ints (page, slot)", HINT_INTS)
    return int(y[0]), int(y[1])


def _address_case(name, table, ps, b, positions):
    rows = np.array(table, np.int32)
    table = np.full((max(rows.shape[0], 4), ADDRESS_WIDTH), pc.NO_PAGE, np.int32)
    table[:rows.shape[0], :rows.shape[1]] = rows
    ts = list(positions)

    def replay(mistake):
        return np.array([_address_mistake(table, b, t, ps, mistake) for t in ts])

    want = replay(None)

    def run(fn):
        return np.array([_as_address(fn(table.copy(), b, t, ps), t) for t in ts]), want

    def compare(yours, expected):
        bad = np.flatnonzero((yours != expected).any(axis=1))
        if not bad.size:
            return True, ""
        i = int(bad[0])
        return False, (f"{bad.size} of {len(ts)} positions differ, first t = {ts[i]}: yours "
                       f"(page {yours[i, 0]}, slot {yours[i, 1]}), expected (page "
                       f"{expected[i, 0]}, slot {expected[i, 1]})")

    diagnoses = []
    for mistake, hint in ADDRESS_MISTAKES:
        try:
            wrong = replay(mistake)
        except IndexError:
            continue
        if not np.array_equal(wrong, want):
            diagnoses.append(((lambda y, e, w=wrong: np.array_equal(y, w)), *hint))
    return Case(name, run, HINT_ADDRESS[0], diagnoses, hint2=HINT_ADDRESS[1], compare=compare)


def check_token_address(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """my_token_address(block_table, b, t, page_size) against the model at every position
    of three shuffled tables (pages 16, 32, 256)."""
    return run_checks("my_token_address", fn, [_address_case(*c) for c in ADDRESS_CASES],
                      verbose=verbose, hint_level=hint_level)


# -- part 2: the gather -------------------------------------------------------------------

HINT_GATHER = (
    "Token t of the result is pages[page, :, slot] with (page, slot) = my_token_address("
    "block_table, b, t, page_size), for t = 0 .. seq_len - 1; the result is (Hkv, seq_len, "
    "d): heads first.",
    "Loop over t (or use an array of positions), collect the (Hkv, d) rows, stack them "
    "along axis 1.")
HINT_PAST_LENGTH = (
    "You read past the sequence's length: its last page has only seq_len - (pages - 1) "
    "x page_size tokens; the slots after them hold nothing of this sequence (stale data "
    "or another request's old tokens).",
    "Stop at seq_len tokens, not at the end of the last page.")
HINT_LENGTH_ONE_OFF = (
    "One token too many or too few: positions run 0 .. seq_len - 1, seq_len of them.",
    "range(seq_len).")
HINT_HEADS_FIRST = ("The result must be (Hkv, seq_len, d), heads first; yours is "
                    "(seq_len, Hkv, d).", "Transpose the first two axes.")
HINT_TOKENS_LAST = ("The result must be (Hkv, seq_len, d), tokens on axis 1; yours is "
                    "(Hkv, d, seq_len).", "Stack the (Hkv, d) rows along axis 1, not -1.")
HINT_POOL_ORDER = (
    "Your pages come in the pool's order: a sequence's pages are read in the order of its "
    "table row (column 0, 1, 2, ...), whatever their numbers in the pool.",
    "Follow block_table[b, 0], block_table[b, 1], ... (my_token_address does it for you).")
HINT_OTHER_ROW = ("You read another sequence's pages: use row b of the block table.",
                  "Pass b through to my_token_address.")


def _pool_values(num_pages, hkv, ps, d, seed):
    """A pool whose every (page, head, slot, component) holds a distinct value."""
    rng = np.random.default_rng(seed)
    return rng.permutation(num_pages * hkv * ps * d).reshape(num_pages, hkv, ps, d) + 0.5


#: (name, page_size, Hkv, d, lengths, sequence read)
GATHER_CASES = [
    ("page 16, 3 sequences (37, 16, 1 tokens): sequence 0, a ragged last page",
     16, 1, 4, [37, 16, 1], 0),
    ("the same pool: sequence 1, exactly one full page", 16, 1, 4, [37, 16, 1], 1),
    ("the same pool: sequence 2, one token", 16, 1, 4, [37, 16, 1], 2),
    ("page 32, Hkv = 2, d = 3, a shuffled table: sequence 1 (70 tokens)",
     32, 2, 3, [33, 70], 1),
]


def _gather_case(name, ps, hkv, d, lens, b):
    widths = [pc.pages_for(n, ps) for n in lens]
    num_pages = sum(widths) + 3
    pages = _pool_values(num_pages, hkv, ps, d, sum(lens))
    order = np.random.default_rng(ps + b).permutation(num_pages)
    table = np.full((len(lens), max(widths) + 1), pc.NO_PAGE, np.int32)
    at = 0
    for s, w in enumerate(widths):
        table[s, :w] = order[at:at + w]
        at += w
    n = lens[b]
    want = pc.gather(pages, table, b, n)

    def run(fn):
        out = fn(pages.copy(), table.copy(), b, n)
        return np.asarray(out, dtype=np.float64) if out is not None else None, want

    def compare(yours, expected):
        if yours is None:
            return False, "your function returned None"
        if yours.shape != expected.shape:
            return False, f"shape {yours.shape}, expected {expected.shape}"
        if np.array_equal(yours, expected):
            return True, ""
        t = int(np.flatnonzero((yours != expected).any(axis=(0, 2)))[0])
        return False, f"token {t} differs (of {n})"

    w = widths[b]
    full = pages[table[b, :w]].transpose(1, 0, 2, 3).reshape(hkv, w * ps, d)   # whole pages
    sorted_pages = pages[np.sort(table[b, :w])].transpose(1, 0, 2, 3).reshape(
        hkv, w * ps, d)[:, :n]
    others = []                        # n tokens read through another row, past its length too
    for ob in sorted({(b + 1) % len(lens), (b - 1) % len(lens)} - {b}):
        t = np.arange(n)
        if (t // ps).max() < table.shape[1]:
            others.append(pages[table[ob, t // ps], :, t % ps].transpose(1, 0, 2))
        others.append(pc.gather(pages, table, ob, min(n, lens[ob])))

    def shape_is(*shapes):
        return lambda y, e: y is not None and y.shape in shapes

    diagnoses = [(shape_is(full.shape), *HINT_PAST_LENGTH) if w * ps != n else None,
                 (shape_is((hkv, n + 1, d), (hkv, n - 1, d)), *HINT_LENGTH_ONE_OFF),
                 (shape_is((n, hkv, d)), *HINT_HEADS_FIRST) if n != hkv else None,
                 (shape_is((hkv, d, n)), *HINT_TOKENS_LAST) if n != d else None,
                 ((lambda y, e: y is not None and np.array_equal(y, sorted_pages)),
                  *HINT_POOL_ORDER) if not np.array_equal(sorted_pages, want) else None,
                 *(((lambda y, e, w=w: y is not None and np.array_equal(y, w)), *HINT_OTHER_ROW)
                   for w in others)]
    return Case(name, run, HINT_GATHER[0], [x for x in diagnoses if x], hint2=HINT_GATHER[1],
                compare=compare)


def check_gather(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """my_gather(pages, block_table, b, seq_len) against `paged_cache.gather` on four
    sequences (a ragged last page, a full page, one token, two heads)."""
    return run_checks("my_gather", fn, [_gather_case(*c) for c in GATHER_CASES],
                      verbose=verbose, hint_level=hint_level)


# -- part 3: the append -------------------------------------------------------------------

HINT_APPEND = (
    "For each new token i its position is t = seq_lens[b] + i. A token with t % page_size "
    "== 0 starts a page: take one off the free list (refs 1) and enter it in the table at "
    "column t // page_size. Otherwise, if its page is shared (refs above 1), copy the page "
    "first. Write the token's K and V at (page, slot); at the end the length grows by n.",
    "The line above names the first thing that differs. Read a sequence back with "
    "paged_cache.gather(cache.k_pages, cache.block_table, b, n) to see where its tokens "
    "went.")
HINT_STALE_LENGTH = (
    "Stale length: cache.seq_lens[b] still holds the length from before the append, so the "
    "next append writes over these tokens and every reader stops short of them. Add the "
    "number of new tokens to the sequence's length once they are written.",
    "n = k_new.shape[1]; the length grows by n.")
HINT_LENGTH_UPDATE = (
    "cache.seq_lens[b] must grow by exactly n = k_new.shape[1], the number of new tokens, "
    "once per call (not once per token on top of that, not by 1).",
    "Update it once, after the loop, by n.")
HINT_PAGE_LATE = (
    "A new page was taken one token too late (or never): a token that starts a page (t % "
    "page_size == 0) found -1 in the block table, and numpy read index -1 as the pool's "
    "last page, so the token landed in a page that is not the sequence's.",
    "Take the page for the first token of the page, the one with slot 0, before writing "
    "it; with a page count, round the new length up: ceil(length / page_size) pages.")
HINT_PAGE_EARLY = (
    "A new page was taken one token too early: the sequence holds a page past its last "
    "token. When the new length ends exactly on a page boundary no new page is needed "
    "yet; the next token (slot 0) will take it.",
    "Take a page only for a token with t % page_size == 0; a count of pages is "
    "ceil(length / page_size), not length // page_size + 1.")
HINT_APPEND_BOUNDARY = (
    "Page boundary off by one: the tokens that start a page were written into the page "
    "before theirs (or its neighbour). Token t belongs to table column t // page_size and "
    "slot t % page_size.",
    "Compute the column from t itself (my_token_address), not from t - 1.")
HINT_APPEND_START = (
    "The new tokens went to the wrong positions: token i of this call is at position t = "
    "seq_lens[b] + i, right after the seq_lens[b] tokens the sequence already holds "
    "(positions 0 .. seq_lens[b] - 1). Starting earlier writes over the sequence's own "
    "tokens.",
    "Read the length once, before the loop: token i then goes to position seq_lens[b] + i.")
HINT_APPEND_OTHER_ROW = (
    "A token went into another sequence's page: the page of column t // page_size is in "
    "row b of the block table, this sequence's own row.",
    "Index the table with the b you were given, [b, column], when you look a page up.")
HINT_FREE_LIST = (
    "Forgetting the free list: a page that is in use was handed out again (or is still on "
    "the free list). Take pages only off cache.free and remove each one you take (pop), "
    "never pick a page number yourself.",
    "cache.free.pop() both returns a free page and removes it from the list.")
HINT_REFS = (
    "cache.refs does not match the tables: a page you take starts with refs 1 (one "
    "sequence uses it), a shared page has one reference per sequence whose table holds it.",
    "Set refs of every page you take to 1; copy-on-write moves one reference from the "
    "shared page to the new one.")
HINT_COW = (
    "You wrote into a page another sequence shares (cache.refs[page] > 1), so that "
    "sequence's tokens changed too. Copy on write: take a new page, copy the shared page's "
    "K and V into it, move one reference (the old page's refs down by 1, the new page's 1) "
    "and point this sequence's table entry at the new page, then write.",
    "Check refs of the page before writing any token that does not start a page.")
HINT_COW_COPY = (
    "Copy-on-write without the copy (of K, of V or of both): the new page must first hold "
    "the shared page's tokens (the prefix's last ones), keys and values, or this sequence "
    "loses them.",
    "Copy k_pages and v_pages of the old page into the new one before writing.")
HINT_COW_TABLE = (
    "Copy-on-write without moving the table entry: you copied the shared page into a new "
    "one, but row b of the block table still points at the shared page. The token went "
    "into a page no table holds, and this sequence's later tokens into the shared page. "
    "Point block_table[b, column] at the new page before writing.",
    "After the copy, the table entry of this column is the new page; write through it.")
HINT_COW_WRITE_OLD = (
    "Copy-on-write that writes into the old page: you copied the shared page and pointed the "
    "table at the copy, but the token still went into the shared page, so this sequence "
    "reads the copy without it. After the copy, write into the new page.",
    "The page you write through is the table's entry after the copy.")
HINT_COW_DECREF = (
    "After copy-on-write the shared page has one sequence fewer: lower its refs by 1, or "
    "it never goes back to the pool.",
    "The old page's refs down by one, the new page's set to 1.")
HINT_COW_REFS_ONE = (
    "After copy-on-write you set the shared page's refs to 1: lower it by 1 instead. A page "
    "can be shared by more than two sequences (a prompt forked twice): one copy leaves it "
    "shared by the others, and the next of them to write must copy it too.",
    "cache.refs[old_page] -= 1, not = 1; the new page's refs is 1.")
HINT_SWAPPED_WRITE = (
    "The slot and the page are swapped in the write: the pool is (num_pages, Hkv, "
    "page_size, d), page first, slot third.",
    "k_pages[page, :, slot] takes the token's (Hkv, d) values.")
HINT_LOST_PAGE = (
    "A page left the free list but is in no table: every page you take must be entered in "
    "block_table, or it is lost to the pool.",
    "Put the page you take at column t // page_size of row b.")


class LabCache(pc.PagedKVCache):
    """The course's PagedKVCache with its own append switched off: my_append writes the
    tokens itself (fork and gather stay the course's)."""

    def append(self, seq, k_new, v_new):
        raise RuntimeError("my_append must write the tokens itself: cache.append is the "
                           "course's own append, which this lab asks you to write")


def _take(cache, mistake=None):
    page = cache.free[-1] if mistake == "no pop" else cache.free.pop()
    if mistake != "no refs":
        cache.refs[page] = 1
    return page


def _append(cache, b, k_new, v_new, mistake=None):
    """The append with one typical mistake (None: the model's, `PagedKVCache.append`)."""
    ps, n = cache.page_size, k_new.shape[1]
    start = int(cache.seq_lens[b])
    if mistake == "start one short":                    # over the sequence's last token
        start = max(0, start - 1)
    first = 0 if mistake == "from zero" else start      # positions from 0 in every call
    counted = mistake in ("count early", "count late")
    if counted:                                            # pages taken by a count
        need = (start + n) // ps + (mistake == "count early")
        for col in range(pc.pages_for(start, ps), need):
            cache.block_table[b, col] = _take(cache)
    for i in range(n):
        t = first + i
        col, slot = ((t - 1) // ps if mistake == "prev" else t // ps), t % ps
        row = 1 - b if mistake == "other row" else b    # the table row read for a page
        if not counted and slot == (1 if mistake == "late" else 0):
            cache.block_table[b, col] = _take(cache, mistake)
            row = b
        elif not (counted and slot == 0):
            page = cache.block_table[row, col]
            if mistake != "no cow" and cache.refs[page] > 1:
                new = _take(cache)
                if mistake not in ("cow no copy", "cow no k copy"):
                    cache.k_pages[new] = cache.k_pages[page]
                if mistake not in ("cow no copy", "cow no v copy"):
                    cache.v_pages[new] = cache.v_pages[page]
                if mistake == "cow refs one":               # = 1, right for two sharers
                    cache.refs[page] = 1
                elif mistake != "cow no decref":
                    cache.refs[page] -= 1
                if mistake == "cow no table":           # the copy written, never entered
                    _write(cache, new, slot, k_new[:, i], v_new[:, i])
                    continue
                cache.block_table[b, col] = new
                row = b
                if mistake == "cow write old":          # the table moved, the write did not
                    _write(cache, page, slot, k_new[:, i], v_new[:, i])
                    continue
        page = cache.block_table[row, col]
        if mistake == "swapped":
            cache.k_pages[slot, :, page] = k_new[:, i]
            cache.v_pages[slot, :, page] = v_new[:, i]
        else:
            _write(cache, page, slot, k_new[:, i], v_new[:, i])
    if mistake != "stale":
        cache.seq_lens[b] = start + n


def _write(cache, page, slot, k, v):
    cache.k_pages[page, :, slot] = k
    cache.v_pages[page, :, slot] = v


APPEND_MISTAKES = [
    ("stale", HINT_STALE_LENGTH), ("late", HINT_PAGE_LATE), ("count late", HINT_PAGE_LATE),
    ("count early", HINT_PAGE_EARLY), ("prev", HINT_APPEND_BOUNDARY),
    ("no pop", HINT_FREE_LIST), ("no refs", HINT_REFS), ("no cow", HINT_COW),
    ("cow no copy", HINT_COW_COPY), ("cow no k copy", HINT_COW_COPY),
    ("cow no v copy", HINT_COW_COPY), ("cow no decref", HINT_COW_DECREF),
    ("cow refs one", HINT_COW_REFS_ONE), ("cow write old", HINT_COW_WRITE_OLD),
    ("cow no table", HINT_COW_TABLE), ("from zero", HINT_APPEND_START),
    ("start one short", HINT_APPEND_START), ("other row", HINT_APPEND_OTHER_ROW),
    ("swapped", HINT_SWAPPED_WRITE)]

#: (name, page_size, num_pages, Hkv, d, ops): ops ("append", b, n) or ("fork", src, dst)
APPEND_CASES = [
    ("page 16: 5 tokens into an empty sequence, then 11 (the page is full), then 1 (a "
     "new page)", 16, 10, 1, 2, [("append", 0, 5), ("append", 0, 11), ("append", 0, 1)]),
    ("page 16: 40 tokens at once (three pages), then 8 (exactly to the end of the third)",
     16, 10, 1, 2, [("append", 0, 40), ("append", 0, 8)]),
    ("page 16: two sequences growing one token at a time, 36 tokens each (their pages "
     "interleave)", 16, 10, 1, 2, [("append", s, 1) for _ in range(36) for s in (0, 1)]),
    ("page 16: a prompt of 20 tokens forked into sequence 1 (a full page and one holding 4 "
     "tokens shared), then sequence 1 appends 5, then sequence 0 appends 3", 16, 10, 1, 2,
     [("append", 0, 20), ("fork", 0, 1), ("append", 1, 5), ("append", 0, 3)]),
    ("page 32, Hkv = 2, d = 3: 30 tokens, a fork, the fork appends 70 at once (copy-on-"
     "write, then two new pages), the first appends 2", 32, 12, 2, 3,
     [("append", 0, 30), ("fork", 0, 1), ("append", 1, 70), ("append", 0, 2)]),
    ("page 16: a prompt of 20 tokens forked twice (sequences 1 and 2 share its pages with "
     "sequence 0: refs 3), then sequence 1 appends 5, sequence 2 appends 2, sequence 0 "
     "appends 3", 16, 10, 1, 2,
     [("append", 0, 20), ("fork", 0, 1), ("fork", 0, 2), ("append", 1, 5), ("append", 2, 2),
      ("append", 0, 3)]),
]


def _tokens(op, hkv, n, d):
    """New K and V (Hkv, n, d), every value distinct across the case (op numbers them)."""
    k = (1000.0 * (op + 1) + np.arange(n)[None, :, None] + 0.25 * np.arange(hkv)[:, None, None]
         + 0.001 * np.arange(d)[None, None, :])
    return k, -k


def _play(ops, ps, num_pages, hkv, d, append):
    """The state after `ops` on a fresh LabCache, `append(cache, b, k, v)` for appends;
    an exception becomes the record's error (NotImplementedError, a stub, goes through)."""
    seqs = max([2] + [max(a, x) + 1 if what == "fork" else a + 1 for what, a, x in ops])
    cache = LabCache(num_pages, hkv, ps, d, seqs, 8)
    error = None
    try:
        for n_op, (what, a, x) in enumerate(ops):
            if what == "fork":
                cache.fork(a, x)
            else:
                append(cache, a, *_tokens(n_op, hkv, x, d))
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's code (or a replay) failed
        error = f"{type(exc).__name__}: {exc}"
    return {"error": error, "seq_lens": [int(x) for x in cache.seq_lens],
            "table": cache.block_table.copy(), "free": list(cache.free),
            "refs": cache.refs.copy(), "k": cache.k_pages.copy(), "v": cache.v_pages.copy()}


def _same_record(a, b) -> bool:
    return (a["error"] == b["error"] and a["seq_lens"] == b["seq_lens"]
            and a["free"] == b["free"] and all(np.array_equal(a[x], b[x])
                                               for x in ("table", "refs", "k", "v")))


def _problem(y, e):
    """(kind, text) of the first way the learner's state `y` differs from the model's
    `e` in behaviour; (None, '') when it holds the same tokens correctly."""
    if y["error"]:
        return "error", f"your function raised {y['error']}"
    if y["seq_lens"] != e["seq_lens"]:
        return "lengths", f"cache.seq_lens is {y['seq_lens']}, expected {e['seq_lens']}"
    ps, pages = y["k"].shape[2], y["k"].shape[0]
    table, uses = y["table"], {}
    for s, n in enumerate(e["seq_lens"]):
        need = pc.pages_for(n, ps)
        for i, p in enumerate(table[s, :need].tolist()):
            if not 0 <= p < pages:
                return "missing page", (f"block_table[{s}, {i}] = {p}: sequence {s} holds {n} "
                                        f"tokens, so column {i} needs a page of the pool")
            uses.setdefault(p, []).append((s, i))
        extra = np.flatnonzero(table[s, need:] != pc.NO_PAGE)
        if extra.size:
            i = need + int(extra[0])
            return "extra page", (f"block_table[{s}, {i}] = {int(table[s, i])}: sequence {s} "
                                  f"holds {n} tokens ({need} pages), yet has a page in "
                                  f"column {i}")
    for p, where in uses.items():
        if len({s for s, _ in where}) < len(where):
            (s, i), (_, j) = where[:2]
            return "free list", (f"page {p} holds two parts of sequence {s} (block_table[{s}, "
                                 f"{i}] and [{s}, {j}])")
        if p in y["free"]:
            s, i = where[0]
            return "free list", (f"page {p} is in use (block_table[{s}, {i}]) and still on "
                                 f"the free list")
    for s, n in enumerate(e["seq_lens"]):
        for name in ("k", "v"):
            got = pc.gather(y[name], table, s, n)
            want = pc.gather(e[name], e["table"], s, n)
            bad = np.flatnonzero((got != want).any(axis=(0, 2)))
            if bad.size:
                t = int(bad[0])
                page = int(table[s, t // ps])
                shared = [u for u in uses.get(page, []) if u[0] != s]
                return ("content shared" if shared else "content"), (
                    f"sequence {s}, token {t} (page {page}, slot {t % ps}): {name.upper()} "
                    f"{got[0, t, 0]:g}, expected {want[0, t, 0]:g}")
    free = y["free"]
    if len(set(free)) != len(free):
        return "free list", "a page is on the free list twice"
    for p in range(pages):
        count = len(uses.get(p, []))
        if p not in uses and p not in free:
            return "lost", f"page {p} is neither in a table nor on the free list"
        if int(y["refs"][p]) != count:
            return "refs", (f"cache.refs[{p}] = {int(y['refs'][p])}, but {count} "
                            f"table{'s' if count != 1 else ''} hold page {p}")
    return None, ""


SYMPTOMS = [("lengths", None), ("missing page", HINT_PAGE_LATE), ("extra page", HINT_PAGE_EARLY),
            ("content shared", HINT_COW), ("free list", HINT_FREE_LIST),
            ("lost", HINT_LOST_PAGE), ("refs", HINT_REFS)]


def _append_case(name, ps, num_pages, hkv, d, ops):
    want = _play(ops, ps, num_pages, hkv, d, _append)
    stale = _play(ops, ps, num_pages, hkv, d,
                  lambda c, b, k, v: _append(c, b, k, v, "stale"))["seq_lens"]

    def run(fn):
        return _play(ops, ps, num_pages, hkv, d, fn), want

    def compare(yours, expected):
        kind, text = _problem(yours, expected)
        return kind is None, text

    diagnoses = []
    for mistake, hint in APPEND_MISTAKES:
        wrong = _play(ops, ps, num_pages, hkv, d,
                      lambda c, b, k, v, m=mistake: _append(c, b, k, v, m))
        if _problem(wrong, want)[0] is not None:
            diagnoses.append(((lambda y, e, w=wrong: _same_record(y, w)), *hint))
    diagnoses.append(((lambda y, e: _problem(y, e)[0] == "lengths" and y["seq_lens"] == stale),
                      *HINT_STALE_LENGTH))
    for kind, hint in SYMPTOMS:
        diagnoses.append(((lambda y, e, k=kind: _problem(y, e)[0] == k),
                          *(hint or HINT_LENGTH_UPDATE)))
    return Case(name, run, HINT_APPEND[0], diagnoses, hint2=HINT_APPEND[1], compare=compare)


def check_append(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """my_append(cache, b, k_new, v_new) on six scenarios (within a page, exactly to a
    page's end, two sequences interleaved, a fork with copy-on-write, pages of 32 with two
    heads, a prompt forked twice), judged on what the cache then holds."""
    return run_checks("my_append", fn, [_append_case(*c) for c in APPEND_CASES],
                      verbose=verbose, hint_level=hint_level)


# -- going further: decoding through the pages ---------------------------------------------

HINT_ATTENTION = (
    "For each sequence b and head h: walk its pages in table order; page i holds keys "
    "i x page_size .. up to seq_len - 1 (the last page only in part). Scores s = scale "
    "(q . k) of the page's keys; the online softmax keeps m (the largest score so far), l "
    "(the sum of exp(s - m)) and acc (the sum of exp(s - m) v), rescaling l and acc by "
    "exp(m_old - m_new) when m grows; o = acc / l.",
    "Notebook 02's update, one page at a time; the key count of page i is min(page_size, "
    "seq_len - i x page_size).")
HINT_ATT_PAST_LENGTH = (
    "You read the whole last page: its slots past seq_len hold no key of this sequence "
    "(here, large stale values that swing the result). Count the keys of page i as "
    "min(page_size, seq_len - i x page_size).",
    "Slice the last page to its filled slots.")
HINT_ATT_RESCALE = (
    "No rescale: when a page raises the running max m, the sum l and the accumulator "
    "computed with the old m must be multiplied by exp(m_old - m_new). If your code "
    "multiplies by alpha, alpha is 1: exp(m - m_new) taken after m = m_new is exp(0). Take "
    "alpha while m still holds the old max.",
    "alpha = exp(m_old - m_new), before m = m_new, applied to l and acc before adding the "
    "page's terms.")
HINT_ATT_RESCALE_ACC = (
    "Half a rescale: your sum l is brought to the new max but the accumulator acc is not. "
    "When a page raises the running max m, both were measured against the old m and both "
    "must be multiplied by exp(m_old - m_new).",
    "acc = alpha acc + (this page's P V), with the alpha that multiplies l.")
HINT_ATT_RESCALE_L = (
    "Half a rescale: your accumulator acc is brought to the new max but the sum l is not. "
    "When a page raises the running max m, both were measured against the old m and both "
    "must be multiplied by exp(m_old - m_new).",
    "l = alpha l + (this page's sum of P), with the alpha that multiplies acc.")
HINT_ATT_FLOOR = (
    "Your page count rounds down: a sequence of n keys fills ceil(n / page_size) pages, the "
    "last page only in part; n // page_size leaves the last page out (and a sequence "
    "shorter than one page gets no page at all, so 0 / 0).",
    "Walk i over range(ceil(n / page_size)); the key count of page i is min(page_size, n - "
    "i x page_size).")
HINT_ATT_POOL_ORDER = (
    "Your pages are taken in pool order (page i of the pool) instead of through the table: "
    "page i of sequence b is block_table[b, i], wherever the pool put it.",
    "Index k_pages and v_pages with block_table[b, i], not with i.")
HINT_ATT_OTHER_ROW = (
    "A sequence's keys came from another sequence's pages: page i of sequence b is "
    "block_table[b, i], in row b of the table.",
    "Index the table with the sequence you are decoding, [b, i].")
HINT_ATT_LAST_KEY = (
    "The sequence's last key is missing: the last page holds seq_len - i x page_size keys "
    "(its slots 0 .. that count - 1), not one fewer.",
    "The key count of page i is min(page_size, seq_len - i x page_size).")
HINT_ATT_EMPTY_PAGE = (
    "Your code took the max of a page with no key (the zero-size array in the error): "
    "either one page too many (a sequence that ends on a page boundary has ceil(seq_len / "
    "page_size) pages, no extra one) or a key count one short (the last page holds "
    "seq_len - i x page_size keys; a sequence of one token has one).",
    "Walk i over range(ceil(seq_len / page_size)); the key count of page i is "
    "min(page_size, seq_len - i x page_size), at least 1.")
HINT_ATT_SCALE = ("The scores are not scaled by the argument scale (it is left out, or 1 / "
                  "sqrt(d) stands in its place): s = scale x (q . k).",
                  "Multiply the dot products by the scale you are given before the softmax: "
                  "a model may pass another one than 1 / sqrt(d), and this check does.")
HINT_ATT_M_ZERO = (
    "Your running max starts at 0 instead of -inf. That is exact while some score is near "
    "0, but here every score of a row is far below 0 (-3200 or less): exp(s - 0) underflows "
    "to 0 for every key, l stays 0 and o = 0 / 0. Start m at -inf, so that the first "
    "page's largest score becomes m and every row's largest P is 1.",
    "m = np.full(H, -np.inf) before the first page.")
HINT_ATT_OVERFLOW = (
    "Your result holds inf or NaN: some exponent was positive, so exp overflowed. Every "
    "exponent must be at most 0: P = exp(s - m_new), with the NEW running max (the largest "
    "score so far, this page's included), and the rescale factor exp(m_old - m_new), old "
    "minus new. At the first page m_old is -inf: exp(s - m_old) or exp(m_new - m_old) is "
    "e^(+inf) there.",
    "m_new = max(m, the page's largest score); alpha = exp(m - m_new); p = exp(s - m_new).")


def _attention_mistake(q, kp, vp, table, lens, scale, mistake):
    """One query per sequence and head through the pages, with one typical mistake."""
    ps = kp.shape[2]
    b_, h_, d = q.shape
    o = np.zeros((b_, h_, d))
    for b in range(b_):
        n = int(lens[b])
        m, l, acc = np.full(h_, -np.inf), np.zeros(h_), np.zeros((h_, d))
        if mistake == "m from 0":
            m = np.zeros(h_)
        for i in range(n // ps if mistake == "floor" else pc.pages_for(n, ps)):
            cnt = ps if mistake == "past length" else min(ps, n - i * ps)
            if mistake == "last key dropped":
                cnt = min(ps, n - i * ps - 1)
                if cnt <= 0:                    # a page left with no key: skipped
                    continue
            row = {"row 0": 0, "next row": (b + 1) % b_}.get(mistake, b)
            page = i if mistake == "pool order" else table[row, i]
            k, v = kp[page, :, :cnt], vp[page, :, :cnt]                 # (H, cnt, d)
            s = {"no scale": 1.0, "sqrt d": d ** -0.5}.get(mistake, scale) * np.einsum(
                "hd,hkd->hk", q[b], k)
            m_new = np.maximum(m, s.max(axis=1))
            alpha = np.ones(h_) if mistake == "no rescale" else np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = (1.0 if mistake == "no rescale l" else alpha) * l + p.sum(axis=1)
            a_acc = 1.0 if mistake == "no rescale acc" else alpha[:, None]
            acc = a_acc * acc + np.einsum("hk,hkd->hd", p, v)
            m = m_new
        o[b] = acc / l[:, None]
    return o


#: (name, page_size, H, d, lengths, spread of q and k; a negative spread: q . k < 0 for
#: every key, |s| >= spread^2 d scale: exp(s) underflows unless the max is subtracted)
ATTENTION_CASES = [
    ("page 16, H = 2, d = 8, lengths 37, 16, 1, 50, scale 0.7 / sqrt(d)", 16, 2, 8,
     [37, 16, 1, 50], 1.0, 0.7),
    ("page 32, H = 1, d = 5, lengths 70, 33 (odd d, ragged pages), scale 0.7 / sqrt(d)", 32, 1,
     5, [70, 33], 1.0, 0.7),
    ("large scores (|s| ~ 1e3), page 16, lengths 40, 9", 16, 2, 4, [40, 9], 20.0),
    ("every score far below 0 (-3200 or less), page 16, lengths 21, 5", 16, 2, 4,
     [21, 5], -40.0),
]


def _attention_case(name, ps, h, d, lens, spread, factor=1.0):
    rng = np.random.default_rng(ps + d)
    widths = [pc.pages_for(n, ps) for n in lens]
    num_pages = sum(widths) + 2
    kp = rng.standard_normal((num_pages, h, ps, d)) * spread
    vp = rng.standard_normal((num_pages, h, ps, d))
    order = rng.permutation(num_pages)
    table = np.full((len(lens), max(widths)), pc.NO_PAGE, np.int32)
    at = 0
    for s, (n, w) in enumerate(zip(lens, widths)):
        table[s, :w] = order[at:at + w]
        at += w
        tail = n - (w - 1) * ps                            # stale keys past the length
        kp[table[s, w - 1], :, tail:] = 4.0 * np.abs(kp[table[s, w - 1], :, tail:]) + 3.0
        vp[table[s, w - 1], :, tail:] += 50.0
    q = rng.standard_normal((len(lens), h, d)) * spread
    if spread < 0:                                         # q against every key
        kp = -spread * (1.0 + np.abs(kp / spread))
        q = spread * (1.0 + np.abs(q / spread))
    lens = np.array(lens, np.int32)
    scale = factor / np.sqrt(d)
    want = pc.paged_reference(q[:, :, None], kp, vp, table, lens, scale=scale)[0][:, :, 0]

    def run(fn):
        out = fn(q.copy(), kp.copy(), vp.copy(), table.copy(), lens.copy(), scale)
        return (None if out is None else np.asarray(out, dtype=np.float64)), want

    def same(a, b):            # a mistake's output, NaN where it divides 0 by 0
        return a is not None and a.shape == b.shape and np.allclose(
            a, b, rtol=1e-9, atol=1e-11, equal_nan=True)

    def compare(yours, expected):
        if yours is None:
            return False, "your function returned None"
        if yours.shape != expected.shape:
            return False, f"shape {yours.shape}, expected {expected.shape}"
        if not np.isfinite(yours).all():
            return False, "your result holds inf or NaN"
        if same(yours, expected):          # finite here: NaN is not equal to anything
            return True, ""
        return False, f"largest difference {np.abs(yours - expected).max():.3g}"

    # the replayed mistakes first: a page count rounded down gives NaN (0 / 0), not overflow
    diagnoses = []
    with np.errstate(all="ignore"):
        for mistake, hint in (("past length", HINT_ATT_PAST_LENGTH),
                              ("no rescale", HINT_ATT_RESCALE),
                              ("no rescale acc", HINT_ATT_RESCALE_ACC),
                              ("no rescale l", HINT_ATT_RESCALE_L),
                              ("no scale", HINT_ATT_SCALE), ("sqrt d", HINT_ATT_SCALE),
                              ("floor", HINT_ATT_FLOOR), ("pool order", HINT_ATT_POOL_ORDER),
                              ("row 0", HINT_ATT_OTHER_ROW), ("next row", HINT_ATT_OTHER_ROW),
                              ("last key dropped", HINT_ATT_LAST_KEY),
                              ("m from 0", HINT_ATT_M_ZERO)):
            wrong = _attention_mistake(q, kp, vp, table, lens, scale, mistake)
            if not same(wrong, want):
                diagnoses.append(((lambda y, e, w=wrong: same(y, w)), *hint))
    diagnoses += [((lambda y, e: y is not None and not np.isfinite(y).all()), *HINT_ATT_OVERFLOW),
                  ((lambda y, e: y is not None and y.shape == e.shape and np.allclose(  # float32
                      y, e, rtol=1e-5, atol=1e-6)), HINT_PRECISION, HINT_PRECISION_2)]
    return Case(name, run, HINT_ATTENTION[0], diagnoses, hint2=HINT_ATTENTION[1],
                compare=compare, error_diagnoses=[(lambda exc: isinstance(exc, ValueError) and
                    "zero-size array to reduction" in str(exc), *HINT_ATT_EMPTY_PAGE)])


def check_paged_attention(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """my_paged_attention(q, k_pages, v_pages, block_table, seq_lens, scale) against
    `paged_cache.paged_reference` (stale keys past every length, large scores, scores all
    far below 0)."""
    with np.errstate(all="ignore"):
        return run_checks("my_paged_attention", fn,
                          [_attention_case(*c) for c in ATTENTION_CASES], verbose=verbose,
                          hint_level=hint_level)


HINTS = [v for name, v in dict(globals()).items() if name.startswith("HINT_")]
