"""exercises_paged: the predict-then-check exercises of notebook 11b (paged KV caches),
registered in `exercises.EXERCISES`. Answers are computed from `flashcourse.paged_cache`
(the same counts the notebook and its explorer use), never typed in.

    11b-fragmentation   a batch's wasted slots: one contiguous buffer of max_len per request
                        against pages of page_size (and the pages it takes)
    11b-page-costs      what one page costs a decode: the pages of one sequence, the bytes
                        one block reads in one piece, the block table against the cache
"""

from __future__ import annotations

from ._exercise import Exercise, _same_number
from .paged_cache import pages_for

#: exercise 1: four requests (not the notebook's worked example), OPT's longest sequence
#: (the vLLM paper's example of a maximum length) and vLLM's default page of 16 tokens
FRAGMENTATION_11B = {"lengths": (300, 1000, 70, 520), "max_len": 2048, "page_size": 16}

#: exercise 2: one sequence of 32,768 tokens, one layer of a Llama-3-8B-like model
#: (Hkv = 8, d = 128, fp16), pages of 16 tokens; table entries are int32
PAGE_COSTS_11B = {"t_key": 32768, "heads_kv": 8, "head_dim": 128, "bytes_per_element": 2,
                  "page_size": 16, "entry_bytes": 4}


def fragmentation_11b() -> Exercise:
    e = FRAGMENTATION_11B
    lens, ml, ps = e["lengths"], e["max_len"], e["page_size"]
    tokens = sum(lens)
    contiguous = len(lens) * ml - tokens
    pages = sum(pages_for(n, ps) for n in lens)
    paged = pages * ps - tokens
    working = (f"tokens: {' + '.join(map(str, lens))} = {tokens:,}\n"
               f"contiguous: {len(lens)} x {ml} = {len(lens) * ml:,} slots reserved; "
               f"{len(lens) * ml:,} - {tokens:,} = {contiguous:,} never written\n"
               f"pages: " + " + ".join(f"ceil({n}/{ps}) = {pages_for(n, ps)}" for n in lens)
               + f" -> {pages} pages = {pages * ps:,} slots\n"
               f"paged: {pages * ps:,} - {tokens:,} = {paged} empty slots, all in last pages")
    floor_pages = sum(n // ps for n in lens)
    return Exercise(
        f"Requests of {', '.join(map(str, lens))} tokens; max_len = {ml}, pages of {ps}: "
        f"slots a contiguous allocation never writes, the pages the requests take, and "
        f"the empty slots in those pages",
        {"contiguous_wasted": contiguous, "pages": pages, "paged_wasted": paged},
        working, rtol=1e-9,
        diagnoses={
            "contiguous_wasted": [(lambda y: _same_number(y, len(lens) * ml, 1e-9),
                                   "that is every reserved slot; subtract the tokens the "
                                   "requests hold")],
            "pages": [(lambda y: _same_number(y, floor_pages, 1e-9),
                       "a partly filled page is still a page: round each request up"),
                      (lambda y: _same_number(y, -(-tokens // ps), 1e-9),
                       "each request rounds up on its own (a page belongs to one request)")],
            "paged_wasted": [(lambda y: _same_number(y, len(lens) * (ps - 1), 1e-9),
                              f"{ps - 1} per request is the most a last page can waste; "
                              f"count what each one actually leaves empty"),
                             (lambda y: _same_number(y, pages * ps, 1e-9),
                              "subtract the tokens from the pages' slots")],
        })


def page_costs_11b() -> Exercise:
    e = PAGE_COSTS_11B
    tk, hkv, d, el, ps = (e[k] for k in ("t_key", "heads_kv", "head_dim",
                                        "bytes_per_element", "page_size"))
    pages = pages_for(tk, ps)
    piece = ps * d * el
    table = pages * e["entry_bytes"]
    cache = 2 * hkv * tk * d * el
    working = (f"pages: ceil({tk:,} / {ps}) = {pages:,}\n"
               f"one piece: a block reads one KV head of one page, page_size x d x e = "
               f"{ps} x {d} x {el} = {piece:,} bytes of K (as many of V), contiguous\n"
               f"table: {pages:,} entries x {e['entry_bytes']} B = {table:,} B against the "
               f"cache's 2 x Hkv x Tk x d x e = {cache:,} B: a fraction {table / cache:.2e}")
    return Exercise(
        f"One sequence of {tk:,} tokens, Hkv = {hkv}, d = {d}, fp16, pages of {ps}: the "
        f"pages it takes, the bytes of K one block reads in one piece (one KV head of one "
        f"page), and its block-table bytes as a fraction of the layer's K and V bytes",
        {"pages": pages, "piece_bytes": piece, "table_fraction": table / cache}, working,
        rtol=1e-3,
        diagnoses={
            "pages": [(lambda y: _same_number(y, tk, 1e-9),
                       "that is the tokens; a page holds page_size of them")],
            "piece_bytes": [(lambda y: _same_number(y, piece * hkv, 1e-9),
                             "that is the whole page, every KV head: a block reads one KV "
                             "head, whose part of the page is contiguous on its own"),
                            (lambda y: _same_number(y, ps * d, 1e-9),
                             "that counts elements; each is 2 bytes in fp16"),
                            (lambda y: _same_number(y, 2 * piece, 1e-9),
                             "K and V are two separate pieces (two pools)"),
                            (lambda y: _same_number(y, piece / 1024, 1e-9),
                             "that is the piece in KiB: give it in bytes")],
            "table_fraction": [(lambda y: _same_number(y, table / (cache / 2), 1e-3),
                                "the cache holds K and V: twice the bytes of K"),
                               (lambda y: _same_number(y, table / (cache / hkv), 1e-3),
                                "every KV head's K and V count: the table is shared by all "
                                "the heads of the layer"),
                               (lambda y: _same_number(y, 100 * table / cache, 1e-3),
                                "that is the fraction in percent: give the fraction itself "
                                "(your number divided by 100)")],
        })
