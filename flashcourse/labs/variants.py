"""Checkers for lab 14 (attention variants): three variant functions and the block-mask
builder, written by the learner and checked against `flashcourse.variants` on hidden shapes.

The learner writes (conventions of `flashcourse.variants`: mask_mod(b, h, q_idx, kv_idx)
-> bool, score_mod(score, b, h, q_idx, kv_idx) -> score):

    sliding_window(window, t_query, t_key) -> mask_mod
        query i sees key j iff 0 <= (i + Tk - Tq) - j <= window: itself and the `window`
        keys before it, bottom-right aligned (library.sliding_window; FlashAttention's
        window_size=(window, 0)): window + 1 keys for a row far from the start.
    document(cu_seqlens) -> mask_mod
        packed sequences, cu_seqlens = [0, end_1, ..., T]: query i sees key j iff both
        lie in the same document (library.document).
    softcap(cap) -> (score_mod, score_mod_grad)
        cap tanh(score / cap) and its derivative 1 - tanh(score / cap)^2.
    build_block_mask(mask_mod, t_query, t_key, block_q, block_k)
        -> (kv_num_blocks (Tr,), kv_indices (Tr, Tc), full_kv_num_blocks (Tr,),
            full_kv_indices (Tr, Tc))
        FlexAttention's layout for one (batch, head): per query block, how many and which
        key blocks are partial, and which are full. Within a row's first `count` entries
        any order is accepted (the forward's result does not depend on the order in which
        it visits tiles, rounding aside); entries past the count are not read.
    flex_forward(q, k, v, block_mask, mask_mod, score_mod, scale, block_q, block_k)
        -> (o, lse)  (going further) the tiled forward driven by such a block mask:
        its checker is in `flashcourse.labs.variants_forward`.

What is checked is behaviour, never source: the masks are evaluated on tiles of hidden
shapes through `mods.mask_tile` (so a vectorised function and a per-element one are both
accepted, as the course's paths accept both) and compared pair by pair with the library's;
the builder gets a watched mask_mod that counts, for every pair, how often it was
evaluated. A learner who returns the library's own masks or softcap passes: the checkers
cannot tell them from a correct function of their own, and the lab asks them not to. (A
builder that calls create_block_mask fails, but only because the library probes two corner
pairs a second time: not a check of provenance.)
"""

from __future__ import annotations

import numpy as np

from ..geometry import ceil_div
from ..variants import library
from ..variants.block_mask import EMPTY, FULL, PARTIAL, create_block_mask
from ..variants.mods import mask_tile, score_tile
from ._harness import HINT_NONE as _MISSING_RETURN
from ._harness import Case, Result, ResultKindError, run_checks

# -- part 1: masks ----------------------------------------------------------------------

HINT_WINDOW = (
    "Your mask differs from the sliding window (the line above names a pair). Query i sees "
    "key j when the distance (i + Tk - Tq) - j is at least 0 and at most window.",
    "Compute the distance once from the aligned query position, and combine the two "
    "comparisons with & (both must hold).")
HINT_WINDOW_WIDE = (
    "One key too many per row: a window of w shows a query itself and the w keys before "
    "it, w + 1 keys in all, so the farthest visible key is at distance w, not w + 1.",
    "Distance <= window, not < window + 2 or <= window + 1.")
HINT_WINDOW_NARROW = (
    "One key too few per row: a window of w shows the query's own position (distance 0) "
    "AND the w keys before it (distances 1 .. w), w + 1 keys in all.",
    "Distance <= window (a distance of exactly window is visible).")
HINT_WINDOW_ALIGN = (
    "Your window is aligned top-left (query i measured from key i). The course aligns "
    "masks bottom-right, like its causal mask: the last query sits at the last key, so "
    "query i stands at key position i + Tk - Tq.",
    "Add the offset Tk - Tq to the query index before taking the distance.")
HINT_WINDOW_REVERSED = (
    "Your offset is reversed: query i stands at key position i + (Tk - Tq), not "
    "i + (Tq - Tk). The last query sits at the last key, Tq - 1 + (Tk - Tq) = Tk - 1.",
    "The offset is t_key - t_query.")
HINT_WINDOW_FUTURE = (
    "Your window lets queries see keys AFTER their own position (a negative distance): a "
    "left window is causal as well.",
    "Keep the lower bound: the distance must be >= 0.")
HINT_DOCUMENT = (
    "Your mask differs from the document mask (the line above names a pair). Query i "
    "sees key j exactly when both positions belong to the same document.",
    "Give every position its document number first (an array of length T), then compare "
    "the numbers of q_idx and kv_idx.")
HINT_DOCUMENT_EDGE = (
    "A document boundary is off by one: cu_seqlens[k] is the FIRST position of document "
    "k (and the end, exclusive, of document k - 1), so the position cu_seqlens[k] "
    "belongs to document k.",
    "With np.searchsorted, position t lies in document searchsorted(cu_seqlens, t, "
    "side='right') - 1; or repeat each document number np.diff(cu_seqlens) times.")
HINT_DOCUMENT_CAUSAL = (
    "Your document mask is also causal: the part asks only for 'same document'. Causal "
    "attention inside each document is the document mask combined with the causal one "
    "(mods.and_masks), done later.",
    "Drop the comparison of q_idx with kv_idx.")
HINT_MASK_BOOL = (
    "Your mask function returns numbers (the line above names their type), not True or "
    "False. A mask only says whether a pair is visible; it is not a weight (a score_mod "
    "changes scores). Return the comparisons themselves, combined with & and |.",
    "Leave out astype(int), int(...), * 1 or a multiplication of two conditions: "
    "(a >= 0) & (a <= w) is already an array of booleans.")
HINT_NOT_FUNCTION = (
    "Return the mask function itself (a def or lambda taking b, h, q_idx, kv_idx), not "
    "its value or a tuple.",
    "Define mask_mod inside and return mask_mod, without calling it.")


def _mask_compare(yours, expected):
    if yours.shape != expected.shape:
        return False, f"mask of shape {yours.shape}, expected {expected.shape}"
    bad = np.argwhere(yours != expected)
    if not bad.size:
        return True, ""
    i, j = (int(x) for x in bad[0])
    return False, (f"{len(bad)} of {yours.size} pairs differ, first query {i}, key {j}: "
                   f"yours {'visible' if yours[i, j] else 'hidden'}, expected "
                   f"{'visible' if expected[i, j] else 'hidden'}")


def _full_mask(mask_mod, tq, tk):
    """(Tq, Tk) bool: mask_mod on every pair, through the course's tile evaluation."""
    if mask_mod is None:                                       # a missing return
        raise ResultKindError("your function returned None", _MISSING_RETURN)
    if not callable(mask_mod) or isinstance(mask_mod, type):
        raise ResultKindError(f"expected a mask function, got {type(mask_mod).__name__}",
                              HINT_NOT_FUNCTION)
    return np.array(mask_tile(mask_mod, 0, 0, np.arange(tq), np.arange(tk)))


def _mask_case(name, make, args, tq, tk, right, mistakes, hint):
    want = _full_mask(right, tq, tk)

    def run(fn):
        return _full_mask(make(fn), tq, tk), want

    diagnoses = [(lambda y, e, w=w: np.array_equal(y, w), *h) for w, h in
                 ((_full_mask(m, tq, tk), h) for m, h in mistakes)
                 if not np.array_equal(w, want)]
    numbers = [((lambda exc: isinstance(exc, TypeError)
                 and "mask_mod must return a bool" in str(exc)), *HINT_MASK_BOOL)]
    return Case(f"{name}: {args}", run, hint[0], diagnoses, hint2=hint[1],
                compare=_mask_compare, error_diagnoses=numbers)


def _window_by_distance(window, tq, tk, low, high, off=None):
    o = tk - tq if off is None else off

    def wrong(b, h, q_idx, kv_idx):
        d = q_idx + o - kv_idx
        return (d >= low) & (d <= high)
    return wrong


#: hidden shapes of the window: (window, Tq, Tk); Tq = Tk, Tq < Tk, Tq > Tk (rows with no
#: key), a window of 0 (each query sees itself only), a window longer than the sequence
WINDOW_CASES = [(5, 30, 30), (7, 19, 43), (4, 37, 22), (0, 11, 11), (50, 17, 23)]


def check_sliding_window(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """`sliding_window(window, t_query, t_key)` -> mask_mod against library.sliding_window
    on every pair of five hidden shapes."""
    cases = []
    for w, tq, tk in WINDOW_CASES:
        mistakes = [(_window_by_distance(w, tq, tk, 0, w + 1), HINT_WINDOW_WIDE),
                    (_window_by_distance(w, tq, tk, 0, w - 1), HINT_WINDOW_NARROW),
                    (_window_by_distance(w, tq, tk, 1, w), HINT_WINDOW_NARROW),
                    (_window_by_distance(w, tq, tk, -1, w), HINT_WINDOW_WIDE),
                    (_window_by_distance(w, tq, tk, 0, w, off=0), HINT_WINDOW_ALIGN),
                    (_window_by_distance(w, tq, tk, 0, w - 1, off=0), HINT_WINDOW_ALIGN),
                    (_window_by_distance(w, tq, tk, 0, w, off=tq - tk), HINT_WINDOW_REVERSED),
                    (_window_by_distance(w, tq, tk, -w, w), HINT_WINDOW_FUTURE),
                    (_window_by_distance(w, tq, tk, -10**9, w), HINT_WINDOW_FUTURE)]
        cases.append(_mask_case("sliding_window(window, t_query, t_key)",
                                lambda fn, a=(w, tq, tk): fn(*a), (w, tq, tk), tq, tk,
                                library.sliding_window(w, tq, tk), mistakes, HINT_WINDOW))
    return run_checks("sliding_window(window, t_query, t_key)", fn, cases, verbose=verbose,
                      hint_level=hint_level)


def _doc_from_ids(ids, causal=False):
    def wrong(b, h, q_idx, kv_idx):
        same = ids[q_idx] == ids[kv_idx]
        return (same & (kv_idx <= q_idx)) if causal else same
    return wrong


#: hidden packings: documents of one position, one document, a boundary in every tile
DOCUMENT_CASES = [[0, 5, 17, 18, 40], [0, 1, 2, 9, 10, 23], [0, 31], [0, 12, 13, 29, 30]]


def check_document(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """`document(cu_seqlens)` -> mask_mod against library.document on four packings."""
    cases = []
    for cu in DOCUMENT_CASES:
        cu_arr = np.array(cu)
        t = cu[-1]
        pos = np.arange(t)
        left = np.searchsorted(cu_arr, pos, side="left") - 1      # first position early
        late = np.searchsorted(cu_arr, pos + 1, side="right") - 1  # last position late
        right_ids = np.searchsorted(cu_arr, pos, side="right") - 1
        mistakes = [(_doc_from_ids(left), HINT_DOCUMENT_EDGE),
                    (_doc_from_ids(late), HINT_DOCUMENT_EDGE),
                    (_doc_from_ids(right_ids, causal=True), HINT_DOCUMENT_CAUSAL)]
        cases.append(_mask_case("document(cu_seqlens)",
                                lambda fn, cu=cu: fn(np.array(cu)), f"cu_seqlens = {cu}", t, t,
                                library.document(cu_arr), mistakes, HINT_DOCUMENT))
    return run_checks("document(cu_seqlens)", fn, cases, verbose=verbose, hint_level=hint_level)


# -- part 2: softcap ----------------------------------------------------------------------

HINT_SOFTCAP = (
    "Your score_mod differs from cap * tanh(score / cap) (the line above says where). It "
    "acts on each score alone: the same score must give the same result wherever it "
    "stands in the tile.",
    "Divide the score by cap, take np.tanh, multiply by cap.")
HINT_SOFTCAP_OUTER = (
    "Your scores lie in (-1, 1): the outer factor cap is missing. cap * tanh(score / cap) "
    "stays close to the score when |score| is much smaller than cap, and never passes cap.",
    "Multiply np.tanh(score / cap) by cap.")
HINT_SOFTCAP_INNER = (
    "The score inside tanh must be divided by cap: cap * tanh(score) saturates at |score| "
    "~ 2 instead of at ~ 2 cap, and its slope at 0 is cap, not 1.",
    "np.tanh(score / cap), then times cap.")
HINT_SOFTCAP_CLIP = (
    "A hard clip to [-cap, cap] is not the soft cap: tanh bends the scores smoothly (and "
    "has a derivative everywhere, which the backward needs).",
    "Use np.tanh on score / cap.")
HINT_SOFTCAP_MAX = (
    "Your score_mod subtracts a maximum before the cap: it must act on each score alone, "
    "before any softmax step. The forward subtracts the running max AFTER score_mod; tanh is "
    "not shift-invariant, so capping score - max gives other probabilities.",
    "No .max() inside score_mod: cap * tanh(score / cap) of the score it is given.")
HINT_SOFTCAP_PROBS = (
    "Your score_mod exponentiates: it returns a probability-like value. A score_mod "
    "changes the score (a logit, natural-log units); the forward exponentiates afterwards.",
    "Return cap * tanh(score / cap), no np.exp.")
HINT_GRAD = (
    "Your derivative differs from d/dscore [cap tanh(score / cap)] = 1 - tanh(score / cap)^2 "
    "(the line above says where).",
    "The chain rule: cap * (1 - tanh^2) * (1 / cap); the two factors of cap cancel.")
HINT_GRAD_SQUARE = (
    "The derivative of tanh(x) is 1 - tanh(x)^2, not 1 - tanh(x): yours exceeds 1 (up to "
    "2) for negative scores, while the true slope is at most 1 and the same for a score "
    "and its negative.",
    "Square the tanh: one minus tanh(score / cap) squared.")
HINT_GRAD_CAP = (
    "A factor of cap is left over: the outer cap and the inner 1 / cap cancel, so the "
    "derivative is 1 - tanh(score / cap)^2, which is 1 at score 0.",
    "Neither multiply nor divide by cap.")
HINT_GRAD_OF_WHAT = (
    "Your score_mod_grad returns the capped score itself, not its derivative.",
    "The derivative of cap tanh(x / cap) is 1 - tanh(x / cap)^2.")
HINT_GRAD_INNER = (
    "The derivative is taken at score / cap: 1 - tanh(score / cap)^2, not 1 - tanh(score)^2.",
    "Divide the score by cap inside tanh, as in the score_mod.")
HINT_PAIR_ORDER = (
    "Your pair is in the wrong order: the first function is the score_mod, cap tanh(score "
    "/ cap), the second its derivative, 1 - tanh(score / cap)^2.",
    "End with `return score_mod, score_mod_grad`.")
HINT_PAIR = (
    "softcap(cap) returns two functions: (score_mod, score_mod_grad), each taking "
    "(score, b, h, q_idx, kv_idx).",
    "End with `return score_mod, score_mod_grad`.")

#: (cap, rows, cols, spread): scores normal with std `spread`, in a tile of query rows
#: 3.. and key columns 5..; caps from Gemma 2's 50 to small ones where tanh saturates
SOFTCAP_CASES = [(50.0, 6, 9, 80.0), (30.0, 5, 7, 5.0), (2.5, 7, 4, 6.0), (0.3, 3, 11, 2.0)]


def _softcap_inputs(n, cap, rows, cols, spread):
    rng = np.random.default_rng(1400 + n)
    s = rng.standard_normal((rows, cols)) * spread                      # (rows, cols)
    s[0, 0] = 0.0                                                       # slope 1 at zero
    return s, np.arange(3, 3 + rows), np.arange(5, 5 + cols)


def _pair_of(out):
    if out is None:                                            # a missing return
        raise ResultKindError("your function returned None", _MISSING_RETURN)
    if isinstance(out, list):
        out = tuple(out)
    if not (isinstance(out, tuple) and len(out) == 2 and all(callable(f) for f in out)):
        raise ResultKindError(f"softcap(cap) returned {type(out).__name__}, not a pair of "
                              "functions", HINT_PAIR)
    return out


def _values_compare(yours, expected, rtol=1e-9):
    y, e = np.asarray(yours, np.float64), np.asarray(expected, np.float64)
    if y.shape != e.shape:
        return False, f"shape {y.shape}, expected {e.shape}"
    bad = ~np.isclose(y, e, rtol=rtol, atol=1e-12)
    if not bad.any():
        return True, ""
    i, j = (int(x) for x in np.argwhere(bad)[0])
    return False, (f"{int(bad.sum())} of {y.size} values differ, first at tile ({i}, {j}): "
                   f"yours {y[i, j]:.6g}, expected {e[i, j]:.6g}")


def _near(w, rtol=1e-9):
    return lambda y, e: y.shape == w.shape and bool(np.allclose(y, w, rtol=rtol, atol=1e-12))


def check_softcap(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """`softcap(cap)` -> (score_mod, score_mod_grad): the score_mod on four tiles of scores,
    then the derivative, both against cap tanh(s / cap) and 1 - tanh^2(s / cap) in float64
    (within rtol 1e-6: the cap may be a Python float or a np.float32)."""
    cases, rtol = [], 1e-6      # a float32 cap is off by 2^-24 relative; every mistake far more
    for part, n_part in (("score_mod", 0), ("score_mod_grad", 1)):
        for n, (cap, rows, cols, spread) in enumerate(SOFTCAP_CASES):
            s, qi, ki = _softcap_inputs(n, cap, rows, cols, spread)
            t = np.tanh(s / cap)
            want = cap * t if n_part == 0 else 1.0 - t * t
            if n_part == 0:
                m_row = s.max(axis=1, keepdims=True)
                wrong = [(np.tanh(s / cap), HINT_SOFTCAP_OUTER),
                         (cap * np.tanh(s), HINT_SOFTCAP_INNER),
                         (cap * np.tanh(s * cap), HINT_SOFTCAP_INNER),
                         (np.clip(s, -cap, cap), HINT_SOFTCAP_CLIP),
                         (cap * np.tanh((s - m_row) / cap), HINT_SOFTCAP_MAX),
                         (cap * np.tanh((s - s.max()) / cap), HINT_SOFTCAP_MAX),
                         (cap * np.tanh(np.exp(s - m_row) / cap), HINT_SOFTCAP_PROBS),
                         (np.exp(cap * np.tanh(s / cap)), HINT_SOFTCAP_PROBS),
                         (1.0 - t * t, HINT_PAIR_ORDER)]
            else:
                wrong = [(1.0 - t, HINT_GRAD_SQUARE), (1.0 - np.abs(t), HINT_GRAD_SQUARE),
                         (cap * (1.0 - t * t), HINT_GRAD_CAP),
                         ((1.0 - t * t) / cap, HINT_GRAD_CAP),
                         (cap * t, HINT_GRAD_OF_WHAT),
                         (1.0 - np.tanh(s) ** 2, HINT_GRAD_INNER)]
            diagnoses = [(_near(w, rtol), *h) for w, h in wrong
                         if not _near(w, rtol)(want, None)]

            def run(fn, cap=cap, s=s, qi=qi, ki=ki, want=want, n_part=n_part):
                mod = _pair_of(fn(cap))[n_part]
                name = "score_mod_grad" if n_part else "score_mod"
                return np.array(score_tile(mod, s.copy(), 0, 0, qi, ki, name)), want

            hint = HINT_SOFTCAP if n_part == 0 else HINT_GRAD
            cases.append(Case(f"{part} of softcap({cap:g}), scores of std {spread:g} in a "
                              f"{rows} x {cols} tile", run, hint[0], diagnoses, hint2=hint[1],
                              compare=lambda y, e: _values_compare(y, e, rtol)))
    return run_checks("softcap(cap)", fn, cases, verbose=verbose, hint_level=hint_level)


# -- part 3: the block-mask builder ---------------------------------------------------------

HINT_BUILD = (
    "Your block mask differs from the expected one (the line above names a tile). A tile "
    "is full when every one of its pairs is visible, empty when none is, partial "
    "otherwise; partial ones go to kv_indices, full ones to full_kv_indices, empty ones "
    "nowhere.",
    "For each query block i and key block j: evaluate the mask on the tile's pairs, then "
    "tile.all() -> full list, else tile.any() -> partial list.")
HINT_SWAPPED = (
    "Full and partial are swapped: kv_num_blocks / kv_indices hold the PARTIAL key blocks "
    "(the kernel must call mask_mod there), full_kv_num_blocks / full_kv_indices the FULL "
    "ones (no mask_mod call). FlexAttention's names, kept here.",
    "Exchange the two lists you append to.")
HINT_EMPTY_LISTED = (
    "An empty tile is listed: a tile where the mask hides every pair must appear in "
    "neither list, so that the kernel never reads its K and V.",
    "List a tile as partial only if some pair is visible (tile.any()).")
HINT_PARTIAL_AS_FULL = (
    "A tile with hidden pairs is listed as full (the line above names it; for documents it "
    "is a tile with a boundary inside it). A kernel computes a full tile without the mask, "
    "so those hidden pairs would be attended. Full means EVERY pair of the tile is visible: "
    "only evaluating the mask on all of them tells, not its corners or its diagonal.",
    "Use tile.all() on the whole evaluated tile for full, tile.any() for partial.")
HINT_RAGGED_PARTIAL = (
    "A ragged last tile (Tq or Tk not a multiple of the block) is called partial although "
    "every pair in it that exists is visible: the positions past the end of the sequence "
    "are not pairs at all. This course counts such a tile full (the kernels bound their "
    "loops by Tq and Tk; FlexAttention, which pads, would say partial).",
    "Clip each block's end: q1 = min(q0 + block_q, t_query), k1 = min(k0 + block_k, "
    "t_key), and evaluate only q0..q1-1, k0..k1-1.")
HINT_RAGGED_DROP = (
    "The last, ragged block is missing: when Tk (or Tq) is not a multiple of the block "
    "size the last block is shorter, and it still needs its tiles listed.",
    "There are ceil(T / block) blocks; loop over all of them and clip the last one's end.")
HINT_TWICE = (
    "Your builder evaluates the mask more than once on the same pair (the line above "
    "counts them). Each pair is needed once: evaluate a tile once and read both 'all' and "
    "'any' from that one result.",
    "Keep the evaluated tile in a variable; call the mask once per tile.")
HINT_SAMPLED = (
    "Your builder decides some tiles without evaluating every pair (the line above counts "
    "the pairs never evaluated, or names a tile so decided). The mask is any function: a "
    "hole anywhere in a tile makes it partial, so corners or a diagonal cannot tell full "
    "from partial.",
    "Evaluate the mask on the whole tile: rows q0..q1-1 by columns k0..k1-1.")
HINT_PAST_END = (
    "Your builder evaluates the mask at positions past the end of the sequence (q_idx >= "
    "Tq or kv_idx >= Tk): those pairs do not exist, and a mask that reads an array (the "
    "document ids) would read past its end.",
    "Clip each block's end to t_query and t_key before building the index ranges.")
HINT_TILE_ARGS = (
    "Your builder calls the mask with the tile's key positions as q_idx and its query "
    "positions as kv_idx: mask_tile(mask_mod, b, h, q_idx, kv_idx) takes the query rows "
    "(q0 .. q1) first, then the key columns (k0 .. k1).",
    "The query block's positions go to q_idx, the key block's to kv_idx.")
HINT_LAYOUT = (
    "The result must be four arrays (kv_num_blocks, kv_indices, full_kv_num_blocks, "
    "full_kv_indices) of shapes (Tr,), (Tr, Tc), (Tr,), (Tr, Tc), Tr = ceil(Tq / block_q), "
    "Tc = ceil(Tk / block_k), holding whole numbers; the line above says what differs.",
    "Keep the four arrays the skeleton allocates and return them in that order.")
HINT_BOTH_LISTS = (
    "A key block is listed in both lists of one row (the line above names it): each tile "
    "is either full, partial or empty. If your code decides each tile once, look at where "
    "it writes the index: the n-th block of a row's list goes to position n - 1, "
    "kv_indices[i, kv_num_blocks[i]] before the count is raised; a slot among the first "
    "count entries that was never written still holds 0 (key block 0).",
    "Decide each tile once, with if / elif; write the index at the current count, then add "
    "1 to the count.")
HINT_INDEX_SLOT = (
    "A key block is listed twice in ONE list of one row (the line above names it): an "
    "index was written somewhere other than the row's next free position, at column j "
    "(kv_indices[i, j]) or after the count was raised, so a slot among the first count "
    "entries was never written and still holds 0 (key block 0). The n-th block of a row's "
    "list goes to position n - 1.",
    "Store j at column kv_num_blocks[i] of row i first, then raise the count by one; the "
    "same for the full list.")

#: (name, mask factory (Tq, Tk, Br, Bc) -> mask_mod, Tq, Tk, Br, Bc)
BUILD_CASES = [
    ("causal, ragged tiles, Tq = 37 > Tk = 29 (rows with no key)",
     lambda tq, tk, br, bc: library.causal(tq, tk), 37, 29, 8, 6),
    ("sliding window 20, Tq = Tk = 50, Br = 7, Bc = 5",
     lambda tq, tk, br, bc: library.sliding_window(20, tq, tk), 50, 50, 7, 5),
    ("documents [0, 5, 17, 18, 40]: boundaries inside tiles, Br = Bc = 8",
     lambda tq, tk, br, bc: library.document([0, 5, 17, 18, 40]), 40, 40, 8, 8),
    ("prefix-LM, prefix 12, Tq = 23 < Tk = 40, Br = 7, Bc = 9",
     lambda tq, tk, br, bc: library.prefix_lm(12, tq, tk), 23, 40, 7, 9),
    ("a hole in every tile's middle (key j % 5 == 2 hidden), Br = 4, Bc = 5",
     lambda tq, tk, br, bc: _stripes, 18, 33, 4, 5),
    ("nothing visible, Tq = 10, Tk = 12, Br = 3, Bc = 4",
     lambda tq, tk, br, bc: _nothing, 10, 12, 3, 4),
    ("everything visible, blocks larger than T: Tq = 13, Tk = 11, Br = Bc = 64",
     lambda tq, tk, br, bc: _everything, 13, 11, 64, 64),
    ("causal 1 x 1 tiles, Tq = Tk = 9",
     lambda tq, tk, br, bc: library.causal(tq, tk), 9, 9, 1, 1),
]


def _stripes(b, h, q_idx, kv_idx):
    return (kv_idx % 5 != 2) | (q_idx < 0)


def _nothing(b, h, q_idx, kv_idx):
    return (kv_idx < 0) & (q_idx >= 0)


def _everything(b, h, q_idx, kv_idx):
    return (kv_idx >= 0) | (q_idx < 0)


def watched(mask_mod, t_query: int, t_key: int):
    """(watched mask_mod, record): the watched function calls mask_mod and adds 1 to
    record["grid"][i, j] (Tq, Tk) for every pair (i, j) it is evaluated on; pairs outside
    the grid (past the end) are counted in record["outside"] and read as hidden."""
    seen = np.zeros((t_query, t_key), np.int64)
    record = {"grid": seen, "outside": 0}

    def watched_mask(b, h, q_idx, kv_idx):
        qi, ki = np.broadcast_arrays(np.asarray(q_idx, np.int64), np.asarray(kv_idx, np.int64))
        inside = (qi >= 0) & (qi < t_query) & (ki >= 0) & (ki < t_key)
        np.add.at(seen, (qi[inside], ki[inside]), 1)
        record["outside"] += int((~inside).sum())
        got = mask_mod(b, h, np.clip(qi, 0, t_query - 1), np.clip(ki, 0, t_key - 1))
        out = np.asarray(got, bool) & inside
        return out if out.ndim else bool(out)
    watched_mask.__name__ = getattr(mask_mod, "__name__", "mask_mod")
    return watched_mask, record


def _ints(x, what, shape):
    try:
        a = np.asarray(x)
    except Exception:
        raise ResultKindError(f"{what} is not an array", HINT_LAYOUT) from None
    if a.shape != shape:
        raise ResultKindError(f"{what} has shape {a.shape}, expected {shape}", HINT_LAYOUT)
    if a.dtype.kind == "f" and np.all(a == np.round(a)):
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise ResultKindError(f"{what} has dtype {a.dtype}, expected whole numbers",
                              HINT_LAYOUT)
    return a.astype(np.int64)


def block_states(out, t_query, t_key, block_q, block_k) -> np.ndarray:
    """(Tr, Tc) int8 grid of EMPTY / PARTIAL / FULL read from a learner's four arrays, or
    ResultKindError naming what is malformed (shapes, counts, indices, a block listed
    twice)."""
    tr, tc = ceil_div(t_query, block_q), ceil_div(t_key, block_k)
    if out is None:                                            # a missing return
        raise ResultKindError("your function returned None", _MISSING_RETURN)
    if isinstance(out, list):
        out = tuple(out)
    if not (isinstance(out, tuple) and len(out) == 4):
        raise ResultKindError(f"expected four arrays, got {type(out).__name__}"
                              + (f" of {len(out)}" if isinstance(out, tuple) else ""),
                              HINT_LAYOUT)
    names = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")
    shapes = ((tr,), (tr, tc), (tr,), (tr, tc))
    num_p, idx_p, num_f, idx_f = (_ints(x, n, s) for x, n, s in zip(out, names, shapes))
    states = np.zeros((tr, tc), np.int8)
    for num, idx, state, name in ((num_p, idx_p, PARTIAL, "kv"), (num_f, idx_f, FULL, "full_kv")):
        for i in range(tr):
            n = int(num[i])
            if not 0 <= n <= tc:
                raise ResultKindError(f"{name}_num_blocks[{i}] = {n}, not in 0 .. {tc}",
                                      HINT_LAYOUT)
            for j in idx[i, :n]:
                if not 0 <= j < tc:
                    raise ResultKindError(f"{name}_indices[{i}] lists key block {int(j)}, "
                                          f"not in 0 .. {tc - 1}", HINT_LAYOUT)
                if states[i, j] == state:
                    raise ResultKindError(f"query block {i} lists key block {int(j)} twice "
                                          f"in {name}_indices[{i}, :{n}]", HINT_INDEX_SLOT)
                if states[i, j] != EMPTY:
                    raise ResultKindError(f"query block {i} lists key block {int(j)} in both "
                                          "lists", HINT_BOTH_LISTS)
                states[i, j] = state
    return states


_WORD = {EMPTY: "empty", PARTIAL: "partial", FULL: "full"}


def _states_compare(yours, expected):
    ys, es = yours["states"], expected["states"]
    bad = np.argwhere(ys != es)
    if bad.size:
        i, j = (int(x) for x in bad[0])
        return False, (f"{len(bad)} of {es.size} tiles differ, first query block {i}, key "
                       f"block {j}: yours {_WORD[int(ys[i, j])]}, expected "
                       f"{_WORD[int(es[i, j])]}")
    grid, outside = yours["grid"], yours["outside"]
    if outside:
        return False, f"the mask was evaluated on {outside} pairs past the end of the sequence"
    if (grid > 1).any():
        i, j = (int(x) for x in np.argwhere(grid > 1)[0])
        return False, (f"the mask was evaluated {int(grid.sum()):,} times for {grid.size:,} "
                       f"pairs; pair ({i}, {j}) {int(grid[i, j])} times")
    if (grid == 0).any():
        return False, (f"the mask was never evaluated on {int((grid == 0).sum())} of "
                       f"{grid.size} pairs")
    return True, ""


def _exchanged_states(mask_mod, tq, tk, br, bc):
    """The tile kinds of a builder that passes a tile's key positions as q_idx and its query
    positions as kv_idx (mask_tile's arguments exchanged), pairs past the end hidden as the
    watched mask reads them."""
    mask, _ = watched(mask_mod, tq, tk)
    tr, tc = ceil_div(tq, br), ceil_div(tk, bc)
    states = np.full((tr, tc), EMPTY, np.int8)
    for i in range(tr):
        for j in range(tc):
            tile = mask_tile(mask, 0, 0, np.arange(j * bc, min((j + 1) * bc, tk)),
                             np.arange(i * br, min((i + 1) * br, tq)))
            states[i, j] = FULL if tile.all() else PARTIAL if tile.any() else EMPTY
    return states


def _build_diagnoses(want, tq, tk, br, bc, exchanged=None):
    """The builder's typical mistakes, read from its tile grid and the watched counts;
    `exchanged`, the tile kinds with mask_tile's position arguments exchanged."""
    es = want["states"]
    last = np.zeros_like(es, bool)                      # the tiles of a ragged last block
    last[-1, :] |= tq % br != 0
    last[:, -1] |= tk % bc != 0
    swapped = np.where(es == FULL, PARTIAL, np.where(es == PARTIAL, FULL, es))

    def states_differ(y):
        return not np.array_equal(y["states"], es)

    def diff(y, was, now):
        return (y["states"] != es) & (es == was) & (y["states"] == now)

    def only(y, where):
        d = y["states"] != es
        return d.any() and not (d & ~where).any()

    return [
        # before the past-the-end hint: exchanged positions reach past Tk when Tq > Tk
        (lambda y, e: (exchanged is not None and states_differ(y)
                       and np.array_equal(y["states"], exchanged)), *HINT_TILE_ARGS),
        (lambda y, e: y["outside"] > 0, *HINT_PAST_END),
        (lambda y, e: states_differ(y) and np.array_equal(y["states"], swapped), *HINT_SWAPPED),
        (lambda y, e: only(y, diff(y, EMPTY, PARTIAL) | diff(y, EMPTY, FULL)),
         *HINT_EMPTY_LISTED),
        (lambda y, e: only(y, last & (es != EMPTY) & (y["states"] == EMPTY)), *HINT_RAGGED_DROP),
        (lambda y, e: only(y, last & diff(y, FULL, PARTIAL)), *HINT_RAGGED_PARTIAL),
        # a tile called full from part of its pairs (one row or column short): unevaluated
        (lambda y, e: only(y, diff(y, PARTIAL, FULL)) and bool((y["grid"] == 0).any()),
         *HINT_SAMPLED),
        (lambda y, e: only(y, diff(y, PARTIAL, FULL)), *HINT_PARTIAL_AS_FULL),
        (lambda y, e: not states_differ(y) and bool((y["grid"] > 1).any()), *HINT_TWICE),
        (lambda y, e: not states_differ(y) and bool((y["grid"] == 0).any()), *HINT_SAMPLED),
    ]


def _build_case(name, make, tq, tk, br, bc):
    lib_mask = make(tq, tk, br, bc)
    want = {"states": create_block_mask(lib_mask, None, None, tq, tk, br, bc,
                                        cache=False).states()[0, 0]}

    def run(fn):
        mask, record = watched(lib_mask, tq, tk)
        out = fn(mask, tq, tk, br, bc)
        return {"states": block_states(out, tq, tk, br, bc), **record}, want

    exchanged = _exchanged_states(lib_mask, tq, tk, br, bc)
    return Case(f"{name}", run, HINT_BUILD[0],
                _build_diagnoses(want, tq, tk, br, bc, exchanged),
                hint2=HINT_BUILD[1], compare=_states_compare)


def check_build_block_mask(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """`build_block_mask(mask_mod, t_query, t_key, block_q, block_k)` against
    `create_block_mask` on eight hidden masks and shapes: the tiles' kinds, then how often
    the watched mask was evaluated on each pair (once)."""
    cases = [_build_case(*c) for c in BUILD_CASES]
    return run_checks("build_block_mask(mask_mod, t_query, t_key, block_q, block_k)", fn,
                      cases, verbose=verbose, hint_level=hint_level)


def show_block_mask(fn, mask_mod, t_query: int, t_key: int, block_q: int, block_k: int):
    """Your block mask's tiles as text ('#' full, '+' partial, '.' empty), beside the
    library's."""
    try:
        out = fn(mask_mod, t_query, t_key, block_q, block_k)
        yours = block_states(out, t_query, t_key, block_q, block_k)
    except NotImplementedError:
        print("Not implemented yet: fill in build_block_mask first.")
        return
    except ResultKindError as e:
        print(f"Your result cannot be read as a block mask: {e.what}")
        return
    want = create_block_mask(mask_mod, None, None, t_query, t_key, block_q, block_k,
                             cache=False).states()[0, 0]
    rows = zip(("".join(".+#"[s] for s in r) for r in yours),
               ("".join(".+#"[s] for s in r) for r in want))
    width = yours.shape[1]
    print(f"{'yours':<{width}}   expected")
    for a, b in rows:
        print(f"{a}   {b}{'' if a == b else '   <- differs'}")


HINTS = [v for name, v in dict(globals()).items() if name.startswith("HINT_")]
