"""Checkers for lab 03 (follows notebook 03): the whole tiled forward of one head.

The learner writes, in float64, with the paper's names (q (Tq, d), k and v (Tk, d)):

    flash_forward(q, k, v, causal, scale, block_q, block_k) -> (o (Tq, d), lse (Tq,))
        the FlashAttention-2 order: outer loop over query blocks of Br = block_q rows,
        inner loop over key blocks of Bc = block_k rows; the causal mask is
        bottom-right aligned (query i sees key j iff j <= i + Tk - Tq), key tiles the
        mask hides in full are never loaded, and a row with no visible key gives
        o = 0 and lse = -inf.

    fa1_forward(q, k, v, causal, scale, block_q, block_k, counter) -> (o, lse)
        FlashAttention's Algorithm 1 order (outer loop over key blocks), with O, l, m
        in outer memory, re-read and re-written for every visible tile, and every
        load and store reported to `counter` (a TrafficCounter); its totals must
        equal the FA1 model `flashcourse.traffic.tiled_traffic(..., loop_order="fa1")`.

    merge_partials(o_a, lse_a, o_b, lse_b) -> (o, lse)   (going further)
        combine the attention of the same queries over two disjoint key ranges
        into the attention over their union (the Flash-Decoding combine).

The derivations are in notebook 03 (the update rule, the causal tile test, the
finalisation) and notebook 04 (the FA1 traffic). Each checker replays typical
mistakes on the same inputs and names the one the learner's output matches.
"""

from __future__ import annotations

import math

import numpy as np

from .. import reference
from ..geometry import causal_block_sums, ceil_div
from ..counter import TrafficCounter
from ..traffic import tiled_traffic
from ._algorithm import (held_budget, held_memory_case, hidden_blocks, hidden_tiles_case,
                         rows_loaded_case)
from ._tiled_common import (_ATOL, _RTOL, SCALE, _close, _empty_lse_only, _has_nan, _inputs,
                            _safe, _with_empty_rows)
from ._harness import (HINT_INPUTS_CHANGED, SKIPPING_SHAPES, Case, Result,  # noqa: F401
                       inputs_kept_case, mistake_diagnoses, parts_close, plain, random_qkv,
                       result_tuple, run_checks, shapes_mix, tiled_cases)

# -- hints: (level 1 diagnoses, level 2 more explicit); tests assert on these strings -----
HINT_RESCALE = (
    "Missing rescale: when a row's running max grows, the running sum and the accumulator "
    "were measured against the OLD max and must be brought to the new one before this "
    "tile is added (notebook 03, 'Steps 2–4 for one query block'). If your code multiplies "
    "by alpha, alpha is 1: exp(m - m_use) taken after m = m_new is exp(0). Take alpha while "
    "m still holds the old max.",
    "Both l and acc get multiplied by the factor exp(old max - new max), which is <= 1, "
    "and only then receive this tile's row sums and P V_j; take alpha before m = m_new.")
HINT_RESCALE_L = (
    "Half a rescale: your accumulator is brought to the new max but the running sum l is "
    "not. l and acc are sums against the same max; when it grows, both must be multiplied "
    "by the same factor before this tile is added (notebook 03, 'Steps 2–4 for one query "
    "block').",
    "l = alpha * l + (this tile's row sums), with the same alpha = exp(old max - new max) "
    "that multiplies acc.")
HINT_RESCALE_ACC = (
    "Half a rescale: your running sum l is brought to the new max but the accumulator acc "
    "is not. Both are sums against the same max; when it grows, both must be multiplied by "
    "the same factor before this tile is added (notebook 03, 'Steps 2–4 for one query block').",
    "acc = alpha[:, None] * acc + P V_j, with the alpha that multiplies l, broadcast over "
    "the d columns of each row.")
HINT_RAGGED_DROP = (
    "The ragged last key block is missing: when Tk is not a multiple of Bc the last key "
    "block is shorter, and your loop (or block count) leaves it out, so those keys never "
    "reach the softmax.",
    "Count key blocks with a ceiling, ceil(Tk / Bc), or loop k0 over range(0, end, Bc) and "
    "clip the block's end to Tk.")
HINT_RAGGED_OFF_BY_ONE = (
    "Off by one at the end of the keys: the last key never enters the softmax. Python "
    "slices and ranges exclude their end, so a block's end is clipped to Tk, not Tk - 1.",
    "The block [k0, k1) ends at k1 = min(k0 + Bc, Tk); k[k0:k1] then includes key Tk - 1.")
HINT_RAGGED_Q = (
    "The ragged last query block is missing: when Tq is not a multiple of Br the last query "
    "block is shorter, and your loop leaves it out, so its rows keep o = 0 and lse = -inf.",
    "Loop q0 over range(0, Tq, Br) and clip the block's end to Tq.")
HINT_LSE_BASE2 = (
    "Your lse is in base 2: it equals the natural-log lse divided by ln 2. If you compute "
    "with exp2 (scores times log2(e)), convert the final statistic back to natural log.",
    "lse = ln(l) + m in natural-log units; a base-2 log-sum-exp must be multiplied by ln 2.")
HINT_HELD = (
    "Your forward holds more than a tile at once: a block of scores as wide as all the keys "
    "(Br x Tk, or the whole Tq x Tk matrix). That is what FlashAttention exists to avoid: "
    "the online softmax folds each Br x Bc tile into m, l and acc and then throws it away. "
    "(Calling flashcourse.reference.attention, the dense algorithm, also holds it.)",
    "Per query block keep only m (Br,), l (Br,), acc (Br, d); per key tile compute S "
    "(Br, Bc), update the state, and drop S before the next tile. No list of tiles, no "
    "concatenation, no softmax over the whole row.")
HINT_MAX = (
    "Wrong running max: the new max must combine the running max with this tile's row "
    "max; the tile's max alone forgets the earlier tiles.",
    "Take the elementwise maximum of the state m and the row maxima of the masked score "
    "tile.")
HINT_TOP_LEFT = (
    "Mask alignment: your causal mask is top-left (key j visible iff j <= i). The course "
    "aligns it bottom-right, as FlashAttention 2.1+: the LAST query sees every key.",
    "Shift the diagonal by the offset Tk - Tq, both in the per-pair test and in the end of "
    "the key range each query block visits.")
HINT_OFFSET_SIGN = (
    "The causal offset has the wrong sign: query i sees key j iff j <= i + (Tk - Tq), keys "
    "minus queries, so that the last query sees every key. Yours uses Tq - Tk (in the mask, "
    "or in the end of the key range too): where Tq != Tk each query sees the wrong keys.",
    "offset = Tk - Tq, the same in the per-pair test and in k_end.")
HINT_K_END_NO_OFFSET = (
    "Your key loop ends at the block's own last position, ignoring the bottom-right offset: "
    "the block's last query q1 - 1 sees keys up to q1 - 1 + (Tk - Tq). For Tq < Tk your "
    "loop stops before key tiles that the block sees.",
    "k_end = q1 + Tk - Tq, clipped to 0 .. Tk.")
HINT_NO_MASK = (
    "The causal mask is not applied inside partly visible tiles: a query sees keys after its "
    "own position.",
    "In a diagonal tile compare global positions (query q0 + r, key k0 + c) and set hidden "
    "scores to -inf before the row max.")
HINT_NEG_INF = (
    "-inf handling: NaN appears in rows that have seen no visible key yet. Their max is "
    "still -inf, and -inf minus -inf is NaN.",
    "Subtract a finite stand-in (0 works) wherever the new max is still -inf; the "
    "probabilities and the factor are then exp(-inf) = 0 and the row stays empty. At the "
    "end, rows with l = 0 get o = 0 and lse = -inf.")
HINT_FINALISE_EMPTY = (
    "NaN in the output of rows that see no key at all, and only there: their l stays 0 and "
    "their acc 0 to the end, so dividing acc by l gives 0 / 0 = NaN. The finalisation must "
    "leave those rows as they started, o = 0 and lse = -inf.",
    "Finalise only the rows with l > 0 (a boolean mask of the block's rows): o = acc / l "
    "and lse = m + log l on those rows; the other rows keep their initial values.")
HINT_BLOCK_MAX = (
    "Your running max is one number for the whole query block (the largest score of the "
    "tile, over all its rows), not one per row. A row whose scores sit far below the "
    "block's largest (here by more than about 745) gets exp(score - max) = 0 for every key "
    "and comes out empty. Each row subtracts its own max, as in the safe softmax.",
    "Take the maximum along the key axis of the score tile (one value per query row, shape "
    "(Br,)), not over the whole tile, and combine it elementwise with the state m.")
HINT_MASK_ZERO = (
    "Hidden scores are set to 0, not -inf: a score of 0 is an ordinary score, and it still "
    "gets the weight exp(0 - m) in P, in l and in acc. The causal mask must remove the pair: "
    "-inf, whose exponential is exactly 0.",
    "Where the key position is past what the query sees, put -inf into S before the row "
    "max.")
HINT_MASK_FINITE = (
    "Hidden scores are set to a large negative number, not -inf: a row that sees keys does "
    "not notice, but a row that sees NO key (causal, Tq > Tk) then has a finite max, each of "
    "its hidden scores gets exp(0) = 1, and it comes out as a plain average of the values "
    "instead of o = 0, lse = -inf. Hidden scores are -inf, whose exponential is exactly 0.",
    "np.where(visible, s, -np.inf); the finite stand-in for a -inf max keeps exp defined.")
HINT_EMPTY_LSE = (
    "Rows that see no key (causal, Tq > Tk) come out with o = 0, as they should, but their "
    "lse is not -inf: the log-sum-exp of a row with nothing visible is log 0 = -inf. An lse "
    "started at 0 (np.zeros), or set to a number for those rows, gives this.",
    "Start lse at -inf (np.full(Tq, -np.inf)) and write m + log(l) only for rows with l > 0.")
HINT_EMPTY_O = (
    "Rows that see no key (causal, Tq > Tk) must come out with o = 0: yours hold other "
    "numbers there, while every other row is right. An output made with np.empty keeps "
    "whatever the memory held in the rows you never write.",
    "Start o with np.zeros((Tq, d)), or write 0 into the rows with l = 0.")
HINT_MASK_P = (
    "The mask is applied to P after the exponential, so the hidden scores still count in the "
    "row max: a hidden score far above the visible ones (here by more than about 745) makes "
    "exp(score - max) = 0 for every visible key, and the row comes out empty. Put -inf into "
    "S before the row max, so that the max is taken over visible scores only.",
    "Mask S (np.where(visible, s, -np.inf)) before s.max(axis=1), not P.")
HINT_INIT_MAX = (
    "Your running max starts at 0, not -inf: a row whose scores all lie far below 0 (here "
    "about -1,500 and lower) keeps m = 0, every exp(score - 0) underflows to 0, and the row "
    "comes out empty (o = 0, lse = -inf). The empty state is m = -inf, l = 0: the first "
    "visible score then becomes the max.",
    "Start m with np.full(rows, -np.inf) and keep the finite stand-in for the subtraction.")
HINT_M_STALE = (
    "Your running max is never updated (m = m_new is missing): m stays -inf, so the factor "
    "alpha = exp(m - m_new) is 0 at every key tile, l and acc keep only the last tile's "
    "terms, and lse = m + log(l) comes out -inf.",
    "After the update of l and acc, store the new max: m = m_new.")
HINT_STANDIN_OLD = (
    "Your stand-in for a -inf max is tested on the old max m: on the first key tile m is "
    "-inf for every row, so every row subtracts 0 there instead of its new max, and l and "
    "acc start out measured against 0 while m says otherwise. The stand-in is 0 only where "
    "the NEW max is -inf.",
    "Build the stand-in from m_new alone: 0 where m_new is -inf, m_new elsewhere.")
HINT_RESCALE_AFTER = (
    "The rescale is applied after this tile is added: alpha = exp(old max - new max) brings "
    "the OLD l and acc to the new max; this tile's P is already measured against the new max "
    "and must not be multiplied by alpha.",
    "Multiply l and acc by alpha first, then add the tile's row sums and P V_j.")
HINT_ALPHA_INVERTED = (
    "The rescale factor points the wrong way: when the max grows from m to m_new, the old l "
    "and acc must shrink, by exp(m - m_new) <= 1; the inverse grows them instead.",
    "The exponent is the old max minus the new max (stand-in), not the other way round.")
HINT_DIVIDE = (
    "The output is not normalised: acc holds the UNnormalised sum, so each row must be "
    "divided by its l at the end.",
    "o = acc / l row by row, only for rows with l > 0.")
HINT_LSE = (
    "lse is the log-sum-exp of the row's scores, which includes the max that was subtracted.",
    "lse = m + log(l), not log(l) alone.")
HINT_SCALE = (
    "Use the `scale` argument for the scores (the checker passes 0.37, not 1/sqrt(d)).",
    "Multiply q_i k_j^T by `scale` before masking and before the max.")
HINT_NO_SKIP = (
    "Causal tile skipping: your loop loads key tiles that the causal mask hides in full. "
    "The result is right, but those loads and that arithmetic are wasted (about half of the "
    "tiles for Tq = Tk).",
    "For query rows [q0, q1), the last visible key is q1 - 1 + (Tk - Tq): stop the key loop "
    "there (or skip any tile whose first key is beyond it), and load K_j as k[k0:k1].")
HINT_SKIP_TOO_MUCH = (
    "Your loop skips key tiles that some query of the block can see.",
    "A tile is hidden only if even the block's LAST query cannot see its FIRST key.")
HINT_NO_SCALE = (
    "The scores are missing `scale`: S = scale * Q_i K_j^T (the checker passes 0.37), and the "
    "max, the probabilities and lse are all taken of the scaled scores.",
    "Multiply q_i k_j^T by `scale` before masking and before the max.")
HINT_DIAGONAL = (
    "Your causal mask hides the diagonal: query i sees key j when j <= i + (Tk - Tq), "
    "equality included (a query sees its own position). A strict < hides one visible key in "
    "every row.",
    "Keep a score where its key position is at most the query position plus Tk - Tq; set "
    "-inf only where it is greater.")
HINT_K_END_SHORT = (
    "Your key loop ends one key too early (k_end): the block's last query, q1 - 1, sees keys "
    "up to q1 - 1 + (Tk - Tq), so the range's end (exclusive) is q1 + (Tk - Tq), clipped to "
    "0 .. Tk. One short, a key block whose first key is that last visible key is never "
    "visited.",
    "k_end = q1 + Tk - Tq, clipped to 0 .. Tk; the key loop runs k0 over range(0, k_end, "
    "Bc).")
HINT_LSE_LOG2 = (
    "Your lse mixes bases: m is in natural-log units (it is a score), but the log of l was "
    "taken in base 2. lse = m + ln(l), both natural.",
    "Use np.log (natural) for l, as m is not converted.")
HINT_P_BASE2 = (
    "P and the rescale factor use different bases: exp2 for one and exp for the other, so "
    "a tile's probabilities and the older tiles' sums are measured against different "
    "exponentials. Use exp for both (or exp2 for both, with the scores and maxima multiplied "
    "by log2(e)).",
    "p = exp(s - m_new) and alpha = exp(m_old - m_new): the same base.")
HINT_AXIS = (
    "A row statistic has Bc entries where the query block has Br rows (the shapes above): the "
    "max or sum of the (Br, Bc) score tile is taken over the wrong axis (the keys of a row "
    "are axis 1), or m, l are sized by block_k.",
    "s.max(axis=1) and p.sum(axis=1) give one value per query row, shape (Br,), like m and "
    "l.")
HINT_RAGGED_UNCLIPPED = (
    "The ragged last key block: k[k0:k0 + Bc] stops at Tk by itself (a slice clips), so the "
    "last key tile has fewer than Bc columns, but something else of that tile (the key "
    "positions of the mask, shapes above) still has Bc.",
    "Clip the block's end, k1 = min(k0 + Bc, Tk), and use k1 for everything of that tile.")
HINT_RAGGED_Q_UNCLIPPED = (
    "The ragged last query block: q[q0:q0 + Br] stops at Tq by itself (a slice clips), so the "
    "last query block has fewer than Br rows, but something else of that block (its m, l or "
    "acc, or the query positions of the mask; shapes above) still has Br.",
    "Clip the block's end, q1 = min(q0 + Br, Tq), and use q1 for everything of that block.")
HINT_OVERFLOW = (
    "With large scores (|S| ~ 1e3) rows that see keys came out empty (o = 0, lse = -inf) "
    "or not finite, though every smaller case passed: an exponential overflowed (exp of "
    "a score or of a max alone passes float64's range above about 709), so l became inf "
    "or NaN.",
    "Every exponent is a difference with the new running max: p = exp(S - m_new) and the "
    "factor exp(m_old - m_new), each one exponential of a difference, never exp(S) / "
    "exp(m).")
HINT_FORWARD = (
    "Your forward disagrees with dense attention. Run it on a 2 x 3 example with one tile "
    "and compare with flashcourse.reference.attention.",
    "Check one step at a time: the score tile, the max, the probabilities, the rescale, the "
    "final division.")
HINT_FA1_MATH = (
    "The FA1 result disagrees with dense attention. In Algorithm 1, O_i in outer memory is "
    "kept NORMALISED after every tile, so merging needs the old l and both max shifts.",
    "New O_i = (exp(m_i - m_new) l_i O_i + exp(m~ - m_new) P~ V_j) / l_new, with "
    "l_new = exp(m_i - m_new) l_i + exp(m~ - m_new) l~ (FlashAttention paper, Algorithm 1).")
HINT_FA1_KV_PER_TILE = (
    "Your counter reads K and V once per visible TILE. In the FA1 order they are loaded once "
    "per key block, in the outer loop, and stay on chip for the whole inner loop.",
    "Move the K and V loads (and their counter.read calls) out of the inner loop.")
HINT_FA1_NO_STATE = (
    "Your counter misses the outer-memory state: in FA1, each visible tile re-reads O_i, l_i, "
    "m_i and writes them back. That re-read is exactly FA1's extra traffic.",
    "Per visible tile: read Q_i, O_i (elements), l_i, m_i (kind='stat'); write O_i, l_i, m_i.")
HINT_FA1_INIT = (
    "Your counter misses the initialisation: FA1 first writes O = 0, l = 0, m = -inf to outer "
    "memory.",
    "Before the loops: write O (Tq x d elements), l and m (Tq statistics each).")
HINT_FA1_STAT_KIND = (
    "Statistics are counted as elements: l and m take 4 bytes each (kind='stat'), not e "
    "(at least one of your counter calls for l or m lacks kind='stat').",
    "Pass kind='stat' to counter.read / counter.write for l and m.")
HINT_FA1_SKIP_EDGE = (
    "Causal: your FA1 loop does not skip the tile whose first key k0 is just past the "
    "block's last visible key, which the mask hides in full: its Q_i, O_i, l_i, m_i are "
    "re-read and re-written for nothing.",
    "The block's last query q1 - 1 sees keys up to q1 - 1 + (Tk - Tq): skip the tile when "
    "k0 is greater than that.")
HINT_FA1_NO_SKIP = (
    "Causal: your FA1 loop visits tiles that the mask hides in full; their Q_i, O_i, l_i, m_i "
    "are re-read and re-written for nothing.",
    "Skip a tile (before any load) when even its last query cannot see its first key.")
HINT_FA1_DIVIDE_EMPTY = (   # both causes: their outputs are the same (review round 21 a)
    "NaN in the output of rows that see no key at all, and only there: such a row shares a "
    "visited tile with rows of its block that do see keys, and there both its maxima and "
    "m_new are still -inf. Either a merge weight was taken without the finite stand-in, "
    "exp(m_i - m_new) or exp(m~ - m_new) = exp(-inf - (-inf)) = NaN, or its l_new is still 0 "
    "and the division of line 12 by l_new is 0 / 0 = NaN (the NaN then stays in O_i).",
    "Take both weights against the stand-in (0 where m_new is -inf), and divide by l_new "
    "only where it is positive (by 1 elsewhere: the numerator is 0 there), so those rows "
    "keep O = 0.")
HINT_FA1_SKIP_VISIBLE = (
    "Causal: your FA1 loop skips tiles that some query of the block can see, so keys are "
    "missing from those rows' softmax. A tile is hidden in full only when even the block's "
    "LAST query, which sees the most keys, cannot see the tile's first key.",
    "The block's last query q1 - 1 sees keys up to q1 - 1 + (Tk - Tq): skip the tile only "
    "when k0 is greater than that.")
HINT_FA1_TRAFFIC = (
    "Your counted bytes differ from the FA1 model. Count per loop: K and V once per key "
    "block; per visible tile read Q_i, O_i, l_i, m_i and write O_i, l_i, m_i; the "
    "initial writes of O, l, m.",
    "Compare counter.read_bytes and counter.write_bytes with tiled_traffic(..., "
    "loop_order='fa1', bytes_per_element=8) on a small case and find the term that differs.")

# -- the spec, with typical mistakes, replayed on the same inputs ---------------------------

def replay(q, k, v, causal, scale, br, bc, mistake=None):
    """float64 FA2 forward of one head, optionally with one typical mistake.

    mistake: None, 'no_rescale', 'no_rescale_l', 'no_rescale_acc', 'tile_max',
    'top_left', 'no_mask', 'no_divide', 'lse_no_m', 'lse_base2', 'sqrt_scale',
    'early_stop' (key loop ends at the block's first row), 'k_ragged_drop' (only full
    key blocks), 'k_off_by_one' (blocks end at Tk - 1), 'q_ragged_drop' (only full
    query blocks), 'no_scale' (scale 1), 'strict_mask' (j < i + off), 'k_end_short' (the
    key loop's end one short), 'lse_log2_l' (m + log2 l), 'p_exp2' (P by exp2, alpha by
    exp), 'offset_sign' (Tq - Tk for the offset), 'mask_offset_sign' (Tq - Tk in the
    mask only), 'k_end_no_offset' (k_end = q1), 'mask_zero' (hidden scores 0, not -inf),
    'standin_old' (the stand-in tested on the old max), 'rescale_after', '_l', '_acc' (alpha
    applied after the tile is added), 'block_max' (one max for the whole block, s.max()),
    'k_end_first_row' (only the tiles the block's first row sees), 'mask_finite' (hidden
    scores -1e9), 'mask_p' (the mask applied to P, the max over all scores), 'm_zero' (the
    running max starts at 0), 'm_stale' (m = m_new left out: m stays -inf).
    Returns (o, lse).
    """
    tq, d = q.shape
    tk = k.shape[0]
    off = {"top_left": 0, "offset_sign": tq - tk}.get(mistake, tk - tq)
    mask_off = tq - tk if mistake == "mask_offset_sign" else off
    if mistake == "sqrt_scale":
        scale = 1.0 / math.sqrt(d)
    elif mistake == "no_scale":
        scale = 1.0
    o, lse = np.zeros((tq, d)), np.full(tq, -np.inf)
    with np.errstate(all="ignore"):
        for q0 in range(0, tq // br * br if mistake == "q_ragged_drop" else tq, br):
            q1 = min(q0 + br, tq)
            m, l, acc = np.full(q1 - q0, -np.inf), np.zeros(q1 - q0), np.zeros((q1 - q0, d))
            m = np.zeros_like(m) if mistake == "m_zero" else m
            k_end = max(0, min(tk, q1 + off)) if causal else tk
            if causal and mistake == "early_stop":
                k_end = max(0, min(tk, q0 + off))
            elif causal and mistake == "k_end_first_row":       # tiles seen by the first row
                k_end = max(0, min(tk, q0 + off + 1))
            elif causal and mistake == "k_end_no_offset":
                k_end = max(0, min(tk, q1))
            elif causal and mistake == "k_end_short":
                k_end = max(0, min(tk, q1 + off - 1))
            for k0 in range(0, k_end, bc):
                k1 = min(k0 + bc, tk - 1 if mistake == "k_off_by_one" else tk)
                if k1 <= k0 or (mistake == "k_ragged_drop" and k0 + bc > tk):
                    continue
                s, vis = scale * (q[q0:q1] @ k[k0:k1].T), None
                if causal and mistake != "no_mask":
                    cols, rows = np.arange(k0, k1)[None, :], np.arange(q0, q1)[:, None]
                    vis = (cols < rows + off if mistake == "strict_mask"
                           else cols <= rows + mask_off)
                    fill = {"mask_zero": 0.0, "mask_finite": -1e9}.get(mistake, -np.inf)
                    s = s if mistake == "mask_p" else np.where(vis, s, fill)
                m_new = (s.max(axis=1) if mistake == "tile_max" else
                         np.maximum(m, s.max()) if mistake == "block_max" else
                         np.maximum(m, s.max(axis=1)))
                m_use = (np.where(np.isneginf(m), 0.0, m_new) if mistake == "standin_old"
                         else _safe(m_new))
                p = (np.exp2 if mistake == "p_exp2" else np.exp)(s - m_use[:, None])
                p = np.where(vis, p, 0.0) if mistake == "mask_p" and vis is not None else p
                alpha = (np.ones_like(m) if mistake == "no_rescale" else
                         np.exp(m_use - m) if mistake == "alpha_inverted" else np.exp(m - m_use))
                a_l = 1.0 if mistake == "no_rescale_l" else alpha
                a_acc = 1.0 if mistake == "no_rescale_acc" else alpha[:, None]
                # alpha applied to (old + tile): to both, to l only or to acc only (round 16 a)
                after_l = mistake in ("rescale_after", "rescale_after_l")
                after_acc = mistake in ("rescale_after", "rescale_after_acc")
                l = alpha * (l + p.sum(axis=1)) if after_l else a_l * l + p.sum(axis=1)
                acc = (alpha[:, None] * (acc + p @ v[k0:k1]) if after_acc
                       else a_acc * acc + p @ v[k0:k1])
                m = m if mistake == "m_stale" else m_new
            seen = l > 0
            o[q0:q1][seen] = acc[seen] if mistake == "no_divide" else acc[seen] / l[seen, None]
            log_l = np.log2(l[seen]) if mistake == "lse_log2_l" else np.log(l[seen])
            lse[q0:q1][seen] = log_l if mistake == "lse_no_m" else m[seen] + log_l
    if mistake == "lse_base2":
        lse = lse / np.log(2.0)
    return o, lse


MISTAKES = [("no_rescale", HINT_RESCALE), ("no_rescale_l", HINT_RESCALE_L),
            ("no_rescale_acc", HINT_RESCALE_ACC), ("tile_max", HINT_MAX),
            ("top_left", HINT_TOP_LEFT), ("offset_sign", HINT_OFFSET_SIGN),
            ("mask_offset_sign", HINT_OFFSET_SIGN),
            ("no_mask", HINT_NO_MASK), ("no_divide", HINT_DIVIDE),
            ("lse_no_m", HINT_LSE), ("lse_base2", HINT_LSE_BASE2), ("sqrt_scale", HINT_SCALE),
            ("no_scale", HINT_NO_SCALE), ("strict_mask", HINT_DIAGONAL),
            ("lse_log2_l", HINT_LSE_LOG2), ("p_exp2", HINT_P_BASE2),
            ("k_end_short", HINT_K_END_SHORT), ("k_end_no_offset", HINT_K_END_NO_OFFSET),
            ("early_stop", HINT_SKIP_TOO_MUCH), ("k_ragged_drop", HINT_RAGGED_DROP),
            ("k_off_by_one", HINT_RAGGED_OFF_BY_ONE), ("q_ragged_drop", HINT_RAGGED_Q),
            # review round 16 a (m): each got HINT_FORWARD
            ("mask_zero", HINT_MASK_ZERO), ("standin_old", HINT_STANDIN_OLD),
            ("rescale_after", HINT_RESCALE_AFTER), ("rescale_after_l", HINT_RESCALE_AFTER),
            ("rescale_after_acc", HINT_RESCALE_AFTER),
            # round 18 (mutants): -1e9 for hidden scores got HINT_FORWARD (named by
            # _empty_rows_filled, as its lse depends on the number chosen)
            ("mask_finite", HINT_MASK_FINITE), ("alpha_inverted", HINT_ALPHA_INVERTED),
            ("m_stale", HINT_M_STALE)]         # review round 21 a: it got HINT_FORWARD
#: the mistakes that only _far_case's scores expose (round 18: both passed)
FAR_MISTAKES = [("mask_p", HINT_MASK_P), ("m_zero", HINT_INIT_MAX)]


def _block_sizes(t, b) -> set[int]:
    """The lengths of the blocks of b rows that cover t rows (the last one ragged)."""
    return {min(b, t), t % b} - {0}


def _lost_rows(yours, expected) -> bool:
    """Rows that see keys (finite expected lse) came out empty (lse = -inf) or not finite."""
    if not (isinstance(yours, tuple) and len(yours) == 2):
        return False
    o, lse = (np.asarray(y, np.float64) for y in yours)
    want = np.isfinite(np.asarray(expected[1], np.float64))
    return bool((want & ~np.isfinite(lse)).any() or ~np.isfinite(o[want]).all())


def _nan_only_in_empty_rows(yours, expected) -> bool:
    """NaN in o exactly where a row sees no key (expected lse = -inf), everything else
    finite: the final acc / l taken for rows with l = 0 (review round 17 a: it got the
    stand-in's hint, but with the loop starting at key 0 a missing stand-in leaves no NaN)."""
    if not (isinstance(yours, tuple) and len(yours) == 2):
        return False
    o, lse = (np.asarray(y, np.float64) for y in plain(yours))
    empty = np.isneginf(np.asarray(expected[1], np.float64))
    if o.ndim != 2 or o.shape[0] != empty.shape[0] or lse.shape != empty.shape:
        return False
    nan_rows = np.isnan(o).any(axis=1)
    return bool(nan_rows.any() and not (nan_rows & ~empty).any()
                and not np.isnan(lse[~empty]).any())


def _empty_rows_filled(yours, expected) -> bool:
    """Rows that see no key came out with a finite lse, every other row right: hidden
    scores set to a finite number (-1e9, -1e30...) instead of -inf (round 18)."""
    rows = _with_empty_rows(yours, expected)
    if rows is None:
        return False
    o, lse, want_o, want_lse, empty = rows
    return bool(np.isfinite(lse[empty]).any()
                and _close((o[~empty], lse[~empty]), (want_o[~empty], want_lse[~empty])))


def _empty_o_only(yours, expected) -> bool:
    """Only o of the rows that see no key is wrong, lse right: o from np.empty (review round
    21 a: it got HINT_FORWARD)."""
    rows = _with_empty_rows(yours, expected)
    if rows is None:
        return False
    o, lse, want_o, want_lse, empty = rows
    return bool(np.any(o[empty] != 0) and _close((o[~empty], lse), (want_o[~empty], want_lse)))


def _first(tq, tk, causal, spread) -> list:
    """NaN confined to the rows that see no key names the finalisation, other NaN the -inf
    guard; in the large-score case (every smaller case passed, the ragged blocks included)
    a row lost to overflow names the overflow, before any replay."""
    found = [(_nan_only_in_empty_rows, *HINT_FINALISE_EMPTY), (_has_nan, *HINT_NEG_INF),
             (_empty_lse_only, *HINT_EMPTY_LSE), (_empty_o_only, *HINT_EMPTY_O),
             (_empty_rows_filled, *HINT_MASK_FINITE)]
    if spread > 1.0:
        found.insert(0, (_lost_rows, *HINT_OVERFLOW))
    return found


def _errors(tq, tk, br, bc) -> list:
    """Crashes that a typical mistake explains on a case of these shapes: a state of Br rows
    next to the ragged last query block (q1 not clipped), a (Br,) row statistic broadcast
    with a (Bc,) one, a full-width key tile next to the clipped slice."""
    rows, cols = _block_sizes(tq, br), _block_sizes(tk, bc)
    pairs = [(r, c) for r in rows for c in cols if r != c]
    found = []
    # a state sized Br beside the ragged last query block of tq % br rows: an axis slip
    # crashes at the first tile already, (min(Br, Tq),) with (min(Bc, Tk),), so this pair
    # names the unclipped q1 unless the two look alike
    if tq % br and tq > br and tq % br != min(bc, tk):
        found.append(((lambda exc: shapes_mix(exc, br, tq % br, ndim=1)),
                      *HINT_RAGGED_Q_UNCLIPPED))
    found.append(((lambda exc: any(shapes_mix(exc, r, c, ndim=1) for r, c in pairs)),
                  *HINT_AXIS))
    if tk % bc and tk > bc:
        found.append(((lambda exc: shapes_mix(exc, bc, tk % bc, ndim=2)),
                      *HINT_RAGGED_UNCLIPPED))
    return found


# -- checker 1: the whole FA2 forward -----------------------------------------------------

#: the case on what is held at once: (Tq, Tk, d, Br, Bc), Tk >> Bc, not causal
HELD_SHAPE = (128, 4096, 3, 64, 16)


def _describe_held(tq, tk, br, e=8) -> str:
    return (f"for scale: one Br x Tk = {br} x {tk} block of float64 scores is "
            f"{br * tk * e:,} B, the whole {tq} x {tk} score matrix {tq * tk * e:,} B")


#: the case on the row max: (Tq, Tk, d, Br, Bc), not causal; query row r of each block has
#: its scores scaled by ROW_SCALES[r % 3], so rows of one block differ by thousands
ROW_SCALE_SHAPE = (6, 10, 3, 3, 4)
ROW_SCALES = (3000.0, 1.0, 0.01)


def _row_scale_case():
    """Rows of one query block whose scores differ by far more than exp's range: a single
    max for the whole block empties the small rows (review round 17 a: it passed)."""
    tq, tk, d, br, bc = ROW_SCALE_SHAPE
    q, k, v = _inputs(57, tq, tk, d)
    q = q * np.array([ROW_SCALES[r % 3] for r in range(tq)])[:, None]
    rest = (False, SCALE, br, bc)
    want = reference.attention(q, k, v, causal=False, scale=SCALE)
    diagnoses = mistake_diagnoses(lambda mistake: replay(q, k, v, *rest, mistake),
                                  [("block_max", HINT_BLOCK_MAX), *MISTAKES], _close)

    def run(fn):
        return result_tuple(fn(q.copy(), k.copy(), v.copy(), *rest), 2), want

    return Case(f"rows of very different scales in one block (scores up to about 1e4, 1 and 0.01), "
                f"Tq = {tq}, Tk = {tk}, d = {d}, Br = {br}, Bc = {bc}", run, HINT_FORWARD[0],
                diagnoses, rtol=_RTOL, atol=_ATOL, hint2=HINT_FORWARD[1], names=("o", "lse"))


#: the case on the visible scores: (Tq, Tk, d, Br, Bc), causal; the score of key j is about
#: 1000 (j - 7.5) for every query, so every visible score lies below -1,500 and the hidden
#: keys of a row score at least 1,000 above its visible ones
FAR_SHAPE = (5, 7, 3, 2, 3)


def _far_inputs():
    tq, tk, d, _, _ = FAR_SHAPE
    q, k, v = _inputs(58, tq, tk, d)
    q[:, -1], k[:, -1] = 1.0, 1000.0 / SCALE * (np.arange(tk) - 7.5)
    return q, k, v


def _far_case():
    """Scores far below 0, and hidden scores far above the visible ones (round 18: a
    running max started at 0, and the mask applied to P after the exponential, passed)."""
    tq, tk, d, br, bc = FAR_SHAPE
    q, k, v = _far_inputs()
    rest = (True, SCALE, br, bc)
    want = reference.attention(q, k, v, causal=True, scale=SCALE)
    diagnoses = mistake_diagnoses(lambda mistake: replay(q, k, v, *rest, mistake),
                                  FAR_MISTAKES + MISTAKES, _close)

    def run(fn):
        return result_tuple(fn(q.copy(), k.copy(), v.copy(), *rest), 2), want

    return Case(f"causal, every visible score below -1,500, hidden ones far above: Tq = {tq}, "
                f"Tk = {tk}, Br = {br}, Bc = {bc}", run, HINT_FORWARD[0], diagnoses,
                rtol=_RTOL, atol=_ATOL, hint2=HINT_FORWARD[1], names=("o", "lse"))


def _held_case():
    tq, tk, d, br, bc = HELD_SHAPE
    return held_memory_case(
        f"largest temporary held at once, Tq = {tq}, Tk = {tk}, d = {d}, Br = {br}, "
        f"Bc = {bc}", _inputs(55, tq, tk, d), (False, SCALE, br, bc),
        held_budget((tq + 2 * tk) * d, tq * (d + 1), br * bc + br * d + bc * d + 2 * br),
        HINT_HELD,
        lambda peak: _describe_held(tq, tk, br))


def _hidden_tiles_case(n, name, tq, tk, br, bc):
    """For each key block: K_j and V_j set to NaN; the rows of the query blocks that the
    causal mask hides it from must stay finite (NaN reaches them only if the tile is
    processed)."""
    q, k, v = _inputs(65 + n, tq, tk, 3)
    poisons = [([(1, keys), (2, keys)], lambda out, rows=rows: _nan_rows(out, rows))
               for keys, rows in hidden_blocks(tq, tk, br, bc, "key")]
    return hidden_tiles_case(f"causal skipping, {name}: hidden key tiles filled with NaN "
                             "never reach the output", (q, k, v), (True, SCALE, br, bc),
                             poisons, HINT_NO_SKIP)


def _nan_rows(out, rows) -> int:
    """NaN entries of (o, lse) in `rows` (anything else that is not a pair counts as all)."""
    if not (isinstance(out, tuple) and len(out) == 2):
        return int(rows.sum())
    o, lse = (np.asarray(x, np.float64) for x in out)
    return int(np.isnan(o[rows]).sum() + np.isnan(lse[rows]).sum())


def _fewest_key_rows(tq, tk, br) -> int:
    """The key rows loaded by a causal loop whose last tile ends at the block's last visible
    key, k1 = min(k0 + Bc, k_end) (review round 14): min(Tk, q1 + Tk - Tq) per query block."""
    return sum(max(0, min(tk, min(q0 + br, tq) + tk - tq)) for q0 in range(0, tq, br))


def check_flash_forward(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `flash_forward(q, k, v, causal, scale, block_q, block_k)` on seven cases, one
    whose rows differ in scale by thousands within a block and one whose visible scores lie
    far below 0 and far below the hidden ones; then the algorithm: the largest
    temporary it holds (no Br x Tk block), and that tiles the causal mask hides in full are
    never loaded (rows sliced from k, and NaN tiles)."""
    cases = tiled_cases(lambda n, tq, tk, d, causal, spread: _inputs(40 + n, tq, tk, d, spread),
                        lambda qkv, causal: reference.attention(*qkv, causal=causal, scale=SCALE),
                        replay, MISTAKES, _close, HINT_FORWARD, scale=SCALE, rtol=_RTOL,
                        atol=_ATOL, parts=2, first=_first,
                        names=("o", "lse"), errors=_errors)
    cases += [_row_scale_case(), _far_case(), _held_case()]
    for n, (name, tq, tk, br, bc) in enumerate(SKIPPING_SHAPES):
        _, key_rows, _ = causal_block_sums(tq, tk, br, bc, True)   # over visible tiles
        cases.append(rows_loaded_case(f"causal skipping, {name}: key rows loaded through k[k0:k1]",
                                      _inputs(60 + n, tq, tk, 3), (True, SCALE, br, bc), 1,
                                      key_rows, HINT_NO_SKIP, HINT_SKIP_TOO_MUCH,
                                      fewest=_fewest_key_rows(tq, tk, br)))
        cases.append(_hidden_tiles_case(n, name, tq, tk, br, bc))
    # round 18 (mutants): q scaled in place passed (every case passes copies)
    cases.append(inputs_kept_case("inputs q, k, v left unchanged", _inputs(59, 13, 17, 3),
                                  (True, SCALE, 4, 6), ("q", "k", "v")))
    return run_checks("flash_forward(q, k, v, causal, scale, block_q, block_k)", fn, cases,
                      verbose=verbose, hint_level=hint_level)


# -- checker 2: the FA1 order with its byte counter -------------------------------------------

def fa1_model(tq, tk, d, br, bc, causal, e=8) -> tuple[int, int]:
    t = tiled_traffic(tq, tk, d, br, bc, causal=causal, loop_order="fa1", bytes_per_element=e)
    return t.read_bytes, t.write_bytes


def fa1_count(tq, tk, d, br, bc, causal, e=8, st=4, sees=None) -> tuple[int, int]:
    """(read, write) bytes of the FA1 loops, tile by tile; `sees(q1, k0, off)` decides which
    tiles are visited when causal (default: the block's last query sees the tile's first
    key, k0 <= q1 - 1 + off), so that a wrong test can be replayed."""
    sees = sees or (lambda q1, k0, off: k0 <= q1 - 1 + off)
    reads, writes = 0, tq * d * e + 2 * tq * st               # O, l, m initialised
    for k0 in range(0, tk, bc):
        reads += 2 * (min(k0 + bc, tk) - k0) * d * e           # K_j, V_j
        for q0 in range(0, tq, br):
            q1 = min(q0 + br, tq)
            if causal and not sees(q1, k0, tk - tq):
                continue
            reads += (q1 - q0) * (2 * d * e + 2 * st)          # Q_i, O_i, l_i, m_i
            writes += (q1 - q0) * (d * e + 2 * st)             # O_i, l_i, m_i
    return reads, writes


def _stat_as_element(got, want, tq, q_rows, e=8, st=4) -> bool:
    """Whether (read, write) bytes `got` differ from `want` by l and/or m counted as e bytes
    instead of 4 in some of the counter calls: per visible tile (reads, writes) or at the
    initialisation (writes)."""
    dr, dw = got[0] - want[0], got[1] - want[1]
    unit = e - st
    return (dr, dw) != (0, 0) and any(
        (dr, dw) == (a * q_rows * unit, b * q_rows * unit + c * tq * unit)
        for a in range(3) for b in range(3) for c in range(3))


def _fa1_variants(tq, tk, d, br, bc, causal, e=8):
    """(reads, writes) of typical counting mistakes, from the model's own terms."""
    st = 4
    # k_rows, q_rows: sums over the visible tiles of rows(K_j) and rows(Q_i)
    _, k_rows, q_rows = causal_block_sums(tq, tk, br, bc, causal)
    all_q_rows = ceil_div(tk, bc) * tq
    reads, writes = fa1_model(tq, tk, d, br, bc, causal, e)
    return {
        "kv_per_tile": (reads - 2 * tk * d * e + 2 * k_rows * d * e, writes),
        "no_state": (reads - q_rows * (d * e + 2 * st), writes - q_rows * (d * e + 2 * st)),
        "no_init": (reads, writes - tq * d * e - 2 * tq * st),
        "stat_as_element": (reads + q_rows * 2 * (e - st),
                            writes + (tq + q_rows) * 2 * (e - st)),
        "no_skip": (2 * tk * d * e + all_q_rows * (2 * d * e + 2 * st),
                    tq * d * e + 2 * tq * st + all_q_rows * (d * e + 2 * st)),
        "skip_edge": fa1_count(tq, tk, d, br, bc, causal, e, st,
                               sees=lambda q1, k0, off: k0 <= q1 + off),
    }


FA1_CASES = [
    ("FA1, ragged, Tq = 19, Tk = 14, d = 3, Br = 5, Bc = 4", 19, 14, 3, 5, 4, False),
    ("FA1, causal, Tq = 12 < Tk = 20, d = 2, Br = 4, Bc = 6", 12, 20, 2, 4, 6, True),
    # Br = 5: the block of rows 10-14 holds two rows with no key (review round 17 a: with
    # Br = 4 no block mixed them, and a division by l_new = 0 passed); Bc = 2: tiles whose
    # first key is the last one a block's last row sees (k0 = 2 and 8)
    ("FA1, causal, Tq = 21 > Tk = 9 (rows with no key), Br = 5, Bc = 2", 21, 9, 3, 5, 2, True),
]


#: the FA2 replays whose slip an FA1 loop can make in the same way (review round 14)
FA1_REPLAYED = [(m, h) for m, h in MISTAKES if m in (
    "top_left", "offset_sign", "mask_offset_sign", "no_mask", "strict_mask", "lse_no_m",
    "lse_base2", "lse_log2_l", "sqrt_scale", "no_scale", "mask_finite")]
#: skip tests that drop tiles a row of the block sees (the FA2 replay skips the same tiles;
#: review round 17 a: each got HINT_FA1_MATH, which speaks of the normalisation)
FA1_SKIP_REPLAYED = [(m, HINT_FA1_SKIP_VISIBLE)
                     for m in ("early_stop", "k_end_first_row", "k_end_short")]


def check_fa1_forward(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `fa1_forward(q, k, v, causal, scale, block_q, block_k, counter)`: its result
    against dense attention, then its counted bytes against the FA1 model."""
    cases = []
    far = ("FA1, causal, every visible score below -1,500, hidden ones far above",
           *FAR_SHAPE[:3], *FAR_SHAPE[3:], True)
    for n, (name, tq, tk, d, br, bc, causal) in enumerate(FA1_CASES + [far]):
        q, k, v = _far_inputs() if n == len(FA1_CASES) else _inputs(70 + n, tq, tk, d)
        expected = reference.attention(q, k, v, causal=causal, scale=SCALE)

        def run(f, q=q, k=k, v=v, causal=causal, br=br, bc=bc, expected=expected):
            out = f(q.copy(), k.copy(), v.copy(), causal, SCALE, br, bc,
                    TrafficCounter(bytes_per_element=8, record_events=False))
            return result_tuple(out, 2), expected

        # the mask, scale and lse slips give the FA2 order's wrong output (to rounding)
        replayed = mistake_diagnoses(
            lambda mistake, q=q, k=k, v=v, causal=causal, br=br, bc=bc:
            replay(q, k, v, causal, SCALE, br, bc, mistake),
            FAR_MISTAKES + FA1_REPLAYED + (FA1_SKIP_REPLAYED if causal else []), _close)
        first = [(_nan_only_in_empty_rows, *HINT_FA1_DIVIDE_EMPTY), (_has_nan, *HINT_NEG_INF),
                 (_empty_lse_only, *HINT_EMPTY_LSE), (_empty_o_only, *HINT_EMPTY_O),
                 (_empty_rows_filled, *HINT_MASK_FINITE)]
        cases.append(Case(f"{name}: result", run, HINT_FA1_MATH[0],
                          first + replayed, rtol=_RTOL, atol=_ATOL,
                          hint2=HINT_FA1_MATH[1], names=("o", "lse")))
    for name, tq, tk, d, br, bc, causal in FA1_CASES:
        q, k, v = _inputs(80, tq, tk, d)
        want = fa1_model(tq, tk, d, br, bc, causal)
        variants = _fa1_variants(tq, tk, d, br, bc, causal)
        diagnoses = []
        for key, hint in (("kv_per_tile", HINT_FA1_KV_PER_TILE), ("no_state", HINT_FA1_NO_STATE),
                          ("no_init", HINT_FA1_INIT), ("stat_as_element", HINT_FA1_STAT_KIND),
                          ("no_skip", HINT_FA1_NO_SKIP), ("skip_edge", HINT_FA1_SKIP_EDGE)):
            if variants[key] != want:
                diagnoses.append(((lambda y, e, w=variants[key]: tuple(y) == w), *hint))
        _, _, q_rows = causal_block_sums(tq, tk, br, bc, causal)
        if not any(_stat_as_element(w, want, tq, q_rows)
                   for key, w in variants.items() if key != "stat_as_element"):
            diagnoses.append(((lambda y, e, q_rows=q_rows, tq=tq, want=want:
                               _stat_as_element(tuple(y), want, tq, q_rows)),
                              *HINT_FA1_STAT_KIND))

        def run(f, q=q, k=k, v=v, causal=causal, br=br, bc=bc, want=want):
            counter = TrafficCounter(bytes_per_element=8, record_events=False)
            f(q.copy(), k.copy(), v.copy(), causal, SCALE, br, bc, counter)
            return (counter.read_bytes, counter.write_bytes), want

        cases.append(Case(f"{name}: (read, write) bytes counted vs the FA1 model", run,
                          HINT_FA1_TRAFFIC[0], diagnoses, rtol=0, atol=0,
                          hint2=HINT_FA1_TRAFFIC[1]))
    cases.append(inputs_kept_case(
        "inputs q, k, v left unchanged", _inputs(59, 13, 17, 3), (), ("q", "k", "v"),
        make_rest=lambda: (True, SCALE, 4, 6, TrafficCounter(bytes_per_element=8,
                                                             record_events=False))))
    return run_checks("fa1_forward(q, k, v, causal, scale, block_q, block_k, counter)", fn,
                      cases, verbose=verbose, hint_level=hint_level)


# -- checker 3 (going further), in its own module: merge two partial results
from .tiled_merge import (HINT_MERGE, HINT_MERGE_AVERAGE, HINT_MERGE_BASE2,  # noqa: E402,F401
                          HINT_MERGE_EMPTY, HINT_MERGE_LSE, HINT_MERGE_OVERFLOW,
                          HINT_MERGE_STANDIN, check_merge_partials)


ALL_HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_")]
