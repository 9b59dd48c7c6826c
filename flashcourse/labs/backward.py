"""Checkers for lab 09 (follows the backward notebook): the tiled backward of one head.

The learner writes, in float64 (q, o, do (Tq, d); k, v (Tk, d); lse (Tq,)):

    flash_backward(q, k, v, o, lse, do, causal, scale, block_q, block_k) -> (dq, dk, dv)
        FlashAttention-2's key-major backward: outer loop over key blocks (K_j, V_j and
        their gradients dK_j, dV_j stay on chip), inner loop over the query blocks that
        can see them. Per tile: recompute S and P = exp(S - lse) from the saved lse,
        dV_j += P^T dO_i, dP = dO_i V_j^T, dS = P (dP - D_i) with D = rowsum(dO * O),
        dQ_i += scale dS K_j (accumulated across key blocks), dK_j += scale dS^T Q_i.
        Query blocks that the causal mask hides from the key block are never loaded
        (load Q_i as q[q0:q1]); rows with lse = -inf (no visible key) contribute 0.

    flash_backward_dq(q, k, v, o, lse, do, causal, scale, block_q, block_k) -> dq
        (going further) the query-major second pass that computes dQ without
        accumulating across key blocks (no atomic adds on a GPU).

The derivation (the softmax Jacobian, why D = rowsum(dO * O) replaces the row sum,
the five products) is in the backward notebook. Expected values come from
`flashcourse.reference.attention_backward`, which materialises P and the Jacobian and
does not use D: an independent formula.
"""

from __future__ import annotations

import numpy as np

from .. import reference
from ..geometry import causal_block_sums
from ._algorithm import (held_budget, held_memory_case, hidden_blocks, hidden_tiles_case,
                         rows_loaded_case)
from ._harness import (HINT_INPUTS_CHANGED, SKIPPING_SHAPES, Result,  # noqa: F401
                       broadcast_shapes, inputs_kept_case, parts_close, plain, random_qkv,
                       run_checks, shapes_mix, tiled_cases)
from . import tiled_forward as _forward

HINT_FORGOT_D = (
    "dS is missing the row term of the softmax Jacobian: each row's dS must subtract that "
    "row's sum of P * dP before multiplying by P (the backward notebook, section 2, 'One "
    "number per row replaces a row of the Jacobian').",
    "That row sum equals D_i = dO_i . O_i, computed once before the loops; subtract it from "
    "dP, row by row, then multiply by P elementwise.")
HINT_DELTA_DODO = (
    "D is computed from the wrong arrays: D_i = rowsum(dO_i * O_i) multiplies the output "
    "gradient by the OUTPUT O, not by dO again (it is the row sum of P * dP, and dP = dO "
    "V^T while O = P V).",
    "D has shape (Tq,): for each row, the dot product of that row of dO with the same row "
    "of O, computed once before the loops.")
HINT_DELTA_O_O = (
    "D is computed from the wrong arrays: D_i = rowsum(dO_i * O_i) multiplies the output "
    "GRADIENT dO by the output O; yours multiplies O by itself (it is the row sum of P * "
    "dP, and dP = dO V^T while O = P V).",
    "D has shape (Tq,): for each row, the dot product of that row of dO with the same row "
    "of O, computed once before the loops.")
HINT_DELTA_TILE = (
    "D is summed over this tile only: D_i, the row sum of P * dP, runs over ALL the keys "
    "of row i, not over one key block, so it cannot be taken from the tile's own P and dP. "
    "The identity D_i = dO_i . O_i gives the whole row's sum from two (Tq, d) arrays.",
    "Compute D = rowsum(dO * O), shape (Tq,), once before the loops; each tile subtracts "
    "its rows of D from dP.")
HINT_RAGGED_DROP = (
    "The ragged last key block is missing: when Tk is not a multiple of Bc the last key "
    "block is shorter, and your loop leaves it out, so its keys get no dK, dV and add "
    "nothing to dQ.",
    "Loop k0 over range(0, Tk, Bc) and clip the block's end to Tk (a ceiling count of "
    "blocks, not a floor).")
HINT_RAGGED_OFF_BY_ONE = (
    "Off by one at the end of the keys: the last key gets no gradient. Python slices and "
    "ranges exclude their end, so a block's end is clipped to Tk, not Tk - 1.",
    "The block [k0, k1) ends at k1 = min(k0 + Bc, Tk); k[k0:k1] then includes key Tk - 1.")
HINT_RAGGED_Q = (
    "The ragged last query block is missing: when Tq is not a multiple of Br the last query "
    "block is shorter, and your query loop leaves it out, so those rows get no dQ and add "
    "nothing to dK, dV.",
    "Loop q0 from the first visible block to Tq in steps of Br and clip the block's end to "
    "Tq.")
HINT_HELD = (
    "Your backward holds more than a tile at once: a block as wide as all the keys (Br x Tk, "
    "or the whole Tq x Tk matrix of P or dS). Recomputing P tile by tile from lse is the "
    "point of the FlashAttention backward: nothing of size Tq x Tk is ever stored. (Calling "
    "flashcourse.reference.attention_backward, the dense algorithm, also holds it.)",
    "Per key block keep dK_j, dV_j (Bc, d); per query block recompute S, P, dP, dS "
    "(Br, Bc) from lse and D, add their products, and drop them before the next tile.")
HINT_DP_FROM_O = (
    "dP must come from the output GRADIENT: the gradient of O = P V with respect to P uses "
    "dO, not O.",
    "dP is dO_i times V_j transposed, shape (Br, Bc).")
HINT_SCALE_CHAIN = (
    "The chain rule through S = scale * Q K^T: dQ and dK carry the factor `scale` (the "
    "checker passes 0.37).",
    "Multiply dS K_j and dS^T Q_i by `scale` before adding them to dQ_i and dK_j.")
HINT_TILE_SOFTMAX = (
    "P is recomputed with a softmax inside the tile: that normalises over this key block "
    "only. The true P normalises over the whole row, which is what the saved lse holds.",
    "P = exp(S - lse_i) row by row, with no max and no division: lse is the log of the "
    "row's full normaliser.")
HINT_DV = (
    "dV: the gradient of O = P V with respect to V multiplies the probabilities by the "
    "output GRADIENT dO, not by the output O.",
    "dV_j accumulates P transposed times dO_i over the query blocks.")
HINT_DQ_OVERWRITE = (
    "dQ_i receives a contribution from EVERY key block: yours keeps only the last one.",
    "Add each key block's scale * dS K_j into dQ_i; start dQ at zero before the loops.")
HINT_DS_ORDER = (
    "dS subtracts D outside the product: dS = P * (dP - D_i), the row term inside the "
    "parentheses, so that it is multiplied by P too (the softmax Jacobian's row is "
    "P_ij (dP_ij - sum_k P_ik dP_ik)). P * dP - D_i gives every masked or tiny-P entry -D_i.",
    "Subtract each row's D_i from that row of dP first, then multiply by P elementwise.")
HINT_DS_SIGN = (
    "dQ and dK come out with the wrong sign (dV is right): dS = P * (dP - D_i), the row's D_i "
    "subtracted from dP; D_i - dP flips the sign of every dS, and so of dQ and dK.",
    "dS = P * (dP - D_i): dP first, minus D_i.")
HINT_DV_FROM_DS = (
    "dV_j is built from dS: O = P V is linear in V, so its gradient multiplies the "
    "PROBABILITIES (transposed) by dO_i; dS is the gradient of the scores, for dQ and dK.",
    "dV_j accumulates P transposed times dO_i over the query blocks.")
HINT_DK_FROM_DO = (
    "dK_j multiplies dS transposed by dO_i: S = scale * Q K^T, so the gradient of K takes "
    "the QUERIES, dK = scale * dS^T Q (as dQ = scale * dS K takes the keys).",
    "dK_j accumulates scale * dS transposed times Q_i over the query blocks.")
HINT_DKDV_OVERWRITE = (
    "dK_j and dV_j sum over all query blocks that see key block j: yours keep only one.",
    "Accumulate into dK_j and dV_j inside the query loop; store them after it.")
HINT_TOP_LEFT = (
    "Mask alignment: your causal mask is top-left (j <= i). The course aligns it "
    "bottom-right: query i sees key j iff j <= i + Tk - Tq.",
    "Use the offset Tk - Tq both in the per-pair test and in the first query block each key "
    "block visits.")
HINT_NEG_INF = (
    "NaN or inf: rows that saw no key (lse = -inf) make exp(S - lse) blow up.",
    "For such rows P must be 0: replace their lse by +inf (or mask them) before the "
    "exponential.")
HINT_P_OVERFLOW = (
    "inf or NaN in a case where every row sees a key (its lse is finite): an exponential "
    "overflowed. exp of a large score (here |S| ~ 1e3), or of lse, alone passes float64's "
    "range (above about 709); P = exp(S - lse) stays at most 1 only when the difference is "
    "taken first.",
    "One exponential of the difference per entry, np.exp(s - lse_i[:, None]); never "
    "exp(S) / exp(lse).")
HINT_OFFSET_SIGN = (
    "The causal offset has the wrong sign: query i sees key j iff j <= i + (Tk - Tq), keys "
    "minus queries, so that the last query sees every key. Yours uses Tq - Tk (in the mask, "
    "or in the loop bounds too): where Tq != Tk each query sees the wrong keys.",
    "offset = Tk - Tq, the same in the per-pair test and in the loop bounds (q_start, or "
    "the dq pass's k_end).")
HINT_NO_SKIP = (
    "Causal tile skipping: your key-block loop loads query blocks that cannot see that key "
    "block. The gradients are right, but those loads and five products are wasted.",
    "For key block [k0, k1) the first query row that sees key k0 is k0 - (Tk - Tq); start "
    "the query loop at the block containing it, and load Q_i as q[q0:q1].")
HINT_SKIP_TOO_MUCH = (
    "Your query loop skips query blocks that do see this key block.",
    "A query block is hidden from key block j only if even its LAST row cannot see key k0.")
HINT_P_BASE2 = (
    "P mixes bases: the saved lse is a natural log (the ln of each row's normaliser), so "
    "P = exp(S - lse). exp2 works only if the whole exponent is in base 2: scores AND lse "
    "multiplied by log2(e); converting one of them, or neither, gives a wrong P.",
    "exp2(x * log2(e)) equals exp(x): use np.exp(S - lse), or np.exp2((S - lse) * log2(e)) "
    "with log2(e) = 1 / ln 2 applied to the difference.")
HINT_DIAGONAL = (
    "Your causal mask hides the diagonal: query i sees key j when j <= i + (Tk - Tq), "
    "equality included (a query sees its own position). A strict < hides one visible key in "
    "every row, so P, and every gradient through it, misses it.",
    "Keep a score where its key position is at most the query position plus Tk - Tq; set "
    "-inf only where it is greater.")
HINT_SWAP_DKDV = (
    "dK and dV are swapped: what you store as dk is the gradient of V (P^T dO) and what you "
    "store as dv is the gradient of K (scale dS^T Q).",
    "dV_j accumulates P^T dO_i; dK_j accumulates scale dS^T Q_i.")
HINT_NO_STORE = (
    "Your dk and dv come back all zeros while dq is right: dK_j and dV_j, summed over the "
    "query blocks in the inner loop, must be stored into their rows of dk and dv after that "
    "loop (step 5), or nothing of them leaves the key block.",
    "After the inner loop, write dK_j and dV_j into rows k0:k1 of dk and dv.")
HINT_P_NO_SCALE = (
    "P is recomputed from unscaled scores: the saved lse is the log-sum-exp of the SCALED "
    "scores, so S = scale * Q_i K_j^T before exp(S - lse) (the checker passes 0.37).",
    "Multiply q_i k_j^T by `scale` when you recompute S; dQ and dK then carry `scale` once "
    "more from the chain rule.")
HINT_SKIP_NO_OFFSET = (
    "Your query loop starts at the block holding query k0, ignoring the bottom-right offset: "
    "query i sees key j when j <= i + (Tk - Tq), so the first query that sees key k0 is "
    "k0 - (Tk - Tq). For Tq < Tk you skip query blocks that see this key block.",
    "Start the query loop at the block containing row max(0, k0 - (Tk - Tq)).")
#: the dQ pass's causal key loop ends where the forward's does (lab 03): the same hint
HINT_DQ_K_END_SHORT = _forward.HINT_K_END_SHORT
HINT_DQ_K_END_NO_OFFSET = _forward.HINT_K_END_NO_OFFSET
HINT_DQ_SKIP_TOO_MUCH = (
    "Your key loop skips key blocks that some query of this block can see.",
    "A key block is hidden from query block i only if its FIRST key is after what the "
    "block's LAST row can see, q1 - 1 + (Tk - Tq).")
#: the dQ pass loading key tiles the mask hides from the whole query block: lab 03's hint
HINT_DQ_NO_SKIP = _forward.HINT_NO_SKIP
#: a crash of the ragged last key block not clipped (k1 = k0 + Bc): lab 03's hint fits
HINT_RAGGED_UNCLIPPED = _forward.HINT_RAGGED_UNCLIPPED
HINT_RAGGED_Q_UNCLIPPED = (
    "The ragged last query block: q[q0:q0 + Br] stops at Tq by itself (a slice clips), so the "
    "last query block has fewer than Br rows, but something else of that block (the query "
    "positions of the mask, shapes above) still has Br.",
    "Clip the block's end, q1 = min(q0 + Br, Tq), and use q1 for everything of that block.")
HINT_D_AXIS = (
    "D has the wrong shape: D_i = dO_i . O_i is one number per query ROW, the sum of dO * O "
    "over the d columns of that row, so D has Tq entries. Yours has fewer rows than the "
    "block it is subtracted from (shapes above): summed down the columns (over the rows), "
    "it holds one number per column instead.",
    "Sum dO * O along the head dimension, the last axis, keeping one value per query row; "
    "then take the block's rows of it.")
HINT_BACKWARD = (
    "Your gradients disagree with the dense backward. Compare dV first (it needs only P), "
    "then dP and dS on a 2 x 3 example.",
    "flashcourse.reference.attention_backward gives the expected (dq, dk, dv) for small "
    "inputs; check one tile (block sizes larger than T) before several.")

HINT_BACKWARD_DQ = (
    "Your dq disagrees with the dense backward. Compare, on a 2 x 3 example, P from lse, then "
    "dP = dO V^T, then dS = P * (dP - D), then dQ = scale dS K.",
    "flashcourse.reference.attention_backward(...)[0] is the expected dq for small inputs; "
    "check one tile (block sizes larger than T) before several.")

_RTOL, _ATOL = 1e-9, 1e-11
SCALE = 0.37


#: P recomputed with the base-2 slip (lab 03's HINT_LSE_BASE2 in the forward): exp2 of the
#: natural-log difference, exp2 of base-2 scores minus the natural lse, exp of a base-2 lse
BASE2_P = {
    "p_exp2": lambda s, lse: np.exp2(s - lse),
    "p_exp2_scores": lambda s, lse: np.exp2(s * np.log2(np.e) - lse),
    "p_lse_base2": lambda s, lse: np.exp(s - lse / np.log(2.0)),
}


def replay(q, k, v, o, lse, do, causal, scale, br, bc, mistake=None):
    """float64 key-major backward, optionally with one typical mistake; (dq, dk, dv)."""
    tq, d = q.shape
    tk = k.shape[0]
    off = {"top_left": 0, "offset_sign": tq - tk}.get(mistake, tk - tq)
    mask_off = tq - tk if mistake == "mask_offset_sign" else off
    delta = ((o if mistake == "delta_o_o" else do)
             * (do if mistake == "delta_do_do" else o)).sum(axis=1)
    dq, dk, dv = np.zeros((tq, d)), np.zeros((tk, d)), np.zeros((tk, d))
    lse_use = np.where(np.isneginf(lse), np.inf, lse)
    with np.errstate(all="ignore"):
        for k0 in range(0, tk, bc):
            k1 = min(k0 + bc, tk - 1 if mistake == "k_off_by_one" else tk)
            if k1 <= k0 or (mistake == "k_ragged_drop" and k0 + bc > tk):
                continue
            dk_j, dv_j = np.zeros((k1 - k0, d)), np.zeros((k1 - k0, d))
            q_start = 0
            if causal and mistake == "skip_too_much":
                q_start = max(0, k0 - off + br) // br * br
            elif causal and mistake == "skip_no_offset":
                q_start = k0 // br * br
            for q0 in range(q_start, tq // br * br if mistake == "q_ragged_drop" else tq, br):
                q1 = min(q0 + br, tq)
                if causal and mistake == "k_end_short" and k0 >= q1 + off - 1:
                    continue            # the query-major loop's end one key short
                if causal and mistake == "k_end_no_offset" and k0 >= q1:
                    continue            # the query-major loop's end without the offset
                s = (1.0 if mistake == "p_no_scale" else scale) * (q[q0:q1] @ k[k0:k1].T)
                if causal:
                    cols, rows = np.arange(k0, k1)[None, :], np.arange(q0, q1)[:, None]
                    vis = (cols < rows + off if mistake == "strict_mask"
                           else cols <= rows + mask_off)
                    s = np.where(vis, s, -np.inf)
                if mistake == "tile_softmax":
                    mx = np.max(s, axis=1, keepdims=True)
                    e = np.exp(s - np.where(np.isneginf(mx), 0.0, mx))
                    tot = e.sum(axis=1, keepdims=True)
                    p = e / np.where(tot > 0, tot, 1.0)
                elif mistake in BASE2_P:
                    p = BASE2_P[mistake](s, lse_use[q0:q1, None])
                else:
                    p = np.exp(s - lse_use[q0:q1, None])
                do_i = do[q0:q1]
                dp = (o[q0:q1] if mistake == "dp_from_o" else do_i) @ v[k0:k1].T
                if mistake == "no_delta":
                    ds = p * dp
                elif mistake == "ds_order":        # P * dP - D: D outside the product
                    ds = p * dp - delta[q0:q1, None]
                elif mistake == "delta_tile":      # D summed over this key block only
                    ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
                elif mistake == "ds_sign":         # D - dP (review round 21 a)
                    ds = p * (delta[q0:q1, None] - dp)
                else:
                    ds = p * (dp - delta[q0:q1, None])
                cq = 1.0 if mistake in ("no_scale", "no_scale_dq") else scale
                ck = 1.0 if mistake in ("no_scale", "no_scale_dk") else scale
                upd_v = (ds if mistake == "dv_from_ds" else p).T @ (
                    o[q0:q1] if mistake == "dv_from_o" else do_i)
                upd_k = ck * (ds.T @ (do_i if mistake == "dk_from_do" else q[q0:q1]))
                # overwritten instead of accumulated: both, or one of them (round 16 a)
                dv_j = upd_v if mistake in ("dkdv_overwrite", "dv_overwrite") else dv_j + upd_v
                dk_j = upd_k if mistake in ("dkdv_overwrite", "dk_overwrite") else dk_j + upd_k
                if mistake == "dq_overwrite":
                    dq[q0:q1] = cq * (ds @ k[k0:k1])
                else:
                    dq[q0:q1] += cq * (ds @ k[k0:k1])
            if mistake == "swap_dkdv":
                dk_j, dv_j = dv_j, dk_j
            if mistake != "no_store":
                dk[k0:k1], dv[k0:k1] = dk_j, dv_j
    return dq, dk, dv


MISTAKES = [("no_delta", HINT_FORGOT_D), ("delta_do_do", HINT_DELTA_DODO),
            ("delta_o_o", HINT_DELTA_O_O), ("delta_tile", HINT_DELTA_TILE),
            ("offset_sign", HINT_OFFSET_SIGN), ("mask_offset_sign", HINT_OFFSET_SIGN),
            ("dp_from_o", HINT_DP_FROM_O),
            ("no_scale", HINT_SCALE_CHAIN), ("no_scale_dq", HINT_SCALE_CHAIN),
            ("no_scale_dk", HINT_SCALE_CHAIN), ("skip_too_much", HINT_SKIP_TOO_MUCH),
            ("tile_softmax", HINT_TILE_SOFTMAX),
            ("dv_from_o", HINT_DV), ("dq_overwrite", HINT_DQ_OVERWRITE),
            ("dkdv_overwrite", HINT_DKDV_OVERWRITE), ("dk_overwrite", HINT_DKDV_OVERWRITE),
            ("dv_overwrite", HINT_DKDV_OVERWRITE), ("ds_order", HINT_DS_ORDER),
            ("top_left", HINT_TOP_LEFT),
            ("k_ragged_drop", HINT_RAGGED_DROP), ("k_off_by_one", HINT_RAGGED_OFF_BY_ONE),
            ("q_ragged_drop", HINT_RAGGED_Q), ("strict_mask", HINT_DIAGONAL),
            ("swap_dkdv", HINT_SWAP_DKDV), ("p_no_scale", HINT_P_NO_SCALE),
            ("skip_no_offset", HINT_SKIP_NO_OFFSET),
            ("no_store", HINT_NO_STORE), ("ds_sign", HINT_DS_SIGN),
            ("dv_from_ds", HINT_DV_FROM_DS), ("dk_from_do", HINT_DK_FROM_DO),
            ] + [(m, HINT_P_BASE2) for m in BASE2_P]
#: the mistakes the query-major dq pass can show (dv_from_o, dkdv_overwrite and swap_dkdv
#: change only dk, dv; skip_no_offset is the key-major loop's), with its key loop's own
#: k_end one short first, and skipping too much said of its key loop
DQ_MISTAKES = [("k_end_short", HINT_DQ_K_END_SHORT),
               ("k_end_no_offset", HINT_DQ_K_END_NO_OFFSET)] + [
    (m, HINT_DQ_SKIP_TOO_MUCH if m == "skip_too_much" else h) for m, h in MISTAKES
    if m not in ("dv_from_o", "dkdv_overwrite", "dk_overwrite", "dv_overwrite", "swap_dkdv",
                 "skip_no_offset", "no_store", "dv_from_ds", "dk_from_do")]


def _errors(tq, tk, br, bc) -> list:
    """Crashes that a block end left unclipped explains (review round 16 a: they got
    HINT_BACKWARD, "your gradients disagree"): a (., Bc) tile beside the ragged last key
    block's (., Tk % Bc), or Br rows beside the ragged last query block's Tq % Br."""
    def rows_mix(a, b):                # 2-D shapes of a and of b rows: (Bc, d) beside (r, d)
        return lambda exc: {a, b} <= {s[0] for s in broadcast_shapes(exc) if len(s) == 2}

    def column_beside_tile(exc):       # a (rows, cols) tile minus a (x, 1) column, x < rows
        shapes = [s for s in broadcast_shapes(exc) if len(s) == 2]
        return any(c > 1 and any(x < r and one == 1 for x, one in shapes)
                   for r, c in shapes)

    # D summed over axis 0 (d entries): a (Br, Bc) tile beside a (d, 1) column (review round
    # 17 a: where d = Tq % Br it got HINT_RAGGED_Q_UNCLIPPED)
    found = [(column_beside_tile, *HINT_D_AXIS)]
    if tk % bc and tk > bc:
        found.append(((lambda exc: shapes_mix(exc, bc, tk % bc, ndim=2)
                       or rows_mix(bc, tk % bc)(exc)), *HINT_RAGGED_UNCLIPPED))
    if tq % br and tq > br:
        found.append((rows_mix(br, tq % br), *HINT_RAGGED_Q_UNCLIPPED))
    return found


def _inputs(seed, tq, tk, d, causal, spread=1.0):
    rng = np.random.default_rng(seed)
    q, k, v = random_qkv(rng, tq, tk, d, spread)
    do = rng.standard_normal((tq, d))                           # (Tq, d)
    o, lse = reference.attention(q, k, v, causal=causal, scale=SCALE)
    return q, k, v, o, lse, do


def _gradients(args, causal):
    """The dense float64 backward (dq, dk, dv) of _inputs' (q, k, v, o, lse, do)."""
    q, k, v, _, _, do = args
    return reference.attention_backward(q, k, v, do, causal=causal, scale=SCALE)


def _close(a, b) -> bool:
    return parts_close(a, b, rtol=1e-7, atol=1e-9)


def _nonfinite(yours, _expected):
    return any(not np.isfinite(np.asarray(p, np.float64)).all() for p in plain(yours))


def _nonfinite_first(wrap=lambda y: y):
    """The `first` diagnoses of a case (Tq, Tk, causal, spread): a non-finite result is
    HINT_NEG_INF where some row sees no key (causal, Tq > Tk), else HINT_P_OVERFLOW."""
    def first(tq, tk, causal, _spread):
        hint = HINT_NEG_INF if causal and tq > tk else HINT_P_OVERFLOW
        return [(lambda y, e: _nonfinite(wrap(y), e), *hint)]
    return first


#: the case on what is held at once: (Tq, Tk, d, Br, Bc), Tk >> Bc, not causal
HELD_SHAPE = (128, 4096, 3, 64, 16)


def _held_case():
    tq, tk, d, br, bc = HELD_SHAPE
    budget = held_budget((3 * tq + 2 * tk) * d + tq, (tq + 2 * tk) * d + tq,
                         br * bc + (br + bc) * d + 2 * br)
    return held_memory_case(
        f"largest temporary held at once, Tq = {tq}, Tk = {tk}, d = {d}, Br = {br}, "
        f"Bc = {bc}", _inputs(150, tq, tk, d, False), (False, SCALE, br, bc), budget,
        HINT_HELD, lambda peak: (f"for scale: one Br x Tk = {br} x {tk} block of float64 is "
                                 f"{br * tk * 8:,} B, a Tq x Tk matrix {tq * tk * 8:,} B"))


def _hidden_tiles_case(n, name, tq, tk, br, bc):
    """For each query block: Q_i, O_i and dO_i set to NaN; the dK, dV rows of the key blocks
    that the causal mask hides it from must stay finite."""
    args = _inputs(130 + n, tq, tk, 3, True)
    poisons = [([(0, queries), (3, queries), (5, queries)],
                lambda out, rows=rows: _nan_key_rows(out, rows))
               for queries, rows in hidden_blocks(tq, tk, br, bc, "query")]
    return hidden_tiles_case(f"query blocks skipped, {name}: hidden query tiles filled with "
                             "NaN never reach dk, dv", args, (True, SCALE, br, bc), poisons,
                             HINT_NO_SKIP)


def _dq_hidden_tiles_case(n, name, tq, tk, br, bc):
    """For each key block: K_j and V_j set to NaN; the dq rows of the query blocks that the
    causal mask hides it from must stay finite (review round 17 a: the dQ pass's skipping,
    which its contract asks for, was not checked, and a loop over every key block passed)."""
    args = _inputs(140 + n, tq, tk, 3, True)
    poisons = [([(1, keys), (2, keys)], lambda out, rows=rows: _nan_query_rows(out, rows))
               for keys, rows in hidden_blocks(tq, tk, br, bc, "key")]
    return hidden_tiles_case(f"key blocks skipped, {name}: hidden key tiles filled with NaN "
                             "never reach dq", args, (True, SCALE, br, bc), poisons,
                             HINT_DQ_NO_SKIP)


def _nan_query_rows(out, rows) -> int:
    """NaN entries of dq in query `rows` (a result that is not one (Tq, d) array counts as
    all)."""
    dq = np.asarray(plain(out), np.float64) if not isinstance(out, tuple) else None
    if dq is None or dq.ndim != 2 or dq.shape[0] != rows.shape[0]:
        return int(rows.sum())
    return int(np.isnan(dq[rows]).sum())


def _nan_key_rows(out, rows) -> int:
    """NaN entries of dk and dv in key `rows` (a result that is not a triple counts as all)."""
    if not (isinstance(out, tuple) and len(out) == 3):
        return int(rows.sum())
    dk, dv = (np.asarray(x, np.float64) for x in out[1:])
    return int(np.isnan(dk[rows]).sum() + np.isnan(dv[rows]).sum())


def _fewest_query_rows(tq, tk, bc) -> int:
    """The query rows loaded by a causal loop that starts each key block's query loop at its
    first row that sees key k0, q_start = max(0, k0 - (Tk - Tq)), not floored to a block
    (review round 14): per key block the rows from there to Tq."""
    return sum(max(0, tq - max(0, k0 - (tk - tq))) for k0 in range(0, tk, bc))


def _inputs_kept_case():
    """round 18 (mutants): an argument changed in place passed (lse's -inf overwritten by the
    stand-in +inf, q *= scale); Tq > Tk, Br = 5: the first block mixes rows with and without
    keys, so it is visited."""
    return inputs_kept_case("inputs q, k, v, o, lse, dO left unchanged",
                            _inputs(160, 17, 13, 3, True), (True, SCALE, 5, 6),
                            ("q", "k", "v", "o", "lse", "do"))


def check_flash_backward(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `flash_backward(q, k, v, o, lse, do, causal, scale, block_q, block_k)` against
    the dense float64 backward on seven inputs; then the algorithm: the largest temporary it
    holds (no Br x Tk block) and its causal skipping of query blocks (rows sliced from q,
    and NaN tiles)."""
    cases = tiled_cases(lambda n, *shape: _inputs(100 + n, *shape), _gradients, replay,
                        MISTAKES, _close, HINT_BACKWARD, scale=SCALE, rtol=_RTOL, atol=_ATOL,
                        parts=3, first=_nonfinite_first(),
                        names=("dq", "dk", "dv"), errors=_errors)
    cases.append(_held_case())
    for n, (name, tq, tk, br, bc) in enumerate(SKIPPING_SHAPES):
        _, _, query_rows = causal_block_sums(tq, tk, br, bc, True)   # over visible tiles
        cases.append(rows_loaded_case(f"query blocks skipped, {name}: query rows loaded through "
                                      "q[q0:q1]", _inputs(120 + n, tq, tk, 3, True),
                                      (True, SCALE, br, bc), 0, query_rows, HINT_NO_SKIP,
                                      HINT_SKIP_TOO_MUCH, fewest=_fewest_query_rows(tq, tk, bc)))
        cases.append(_hidden_tiles_case(n, name, tq, tk, br, bc))
    cases.append(_inputs_kept_case())
    return run_checks("flash_backward(q, k, v, o, lse, do, causal, scale, block_q, block_k)",
                      fn, cases, verbose=verbose, hint_level=hint_level)


def check_flash_backward_dq(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Going further: check the query-major `flash_backward_dq(...) -> dq` on the same inputs."""
    cases = tiled_cases(lambda n, *shape: _inputs(100 + n, *shape),
                        lambda args, causal: _gradients(args, causal)[0],
                        lambda *args: replay(*args)[0], DQ_MISTAKES,
                        lambda a, b: _close((a,), (b,)), HINT_BACKWARD_DQ, scale=SCALE,
                        rtol=_RTOL,
                        atol=_ATOL, first=_nonfinite_first(lambda y: (y,)),
                        names=("dq",), errors=_errors)
    for n, (name, tq, tk, br, bc) in enumerate(SKIPPING_SHAPES):
        cases.append(_dq_hidden_tiles_case(n, name, tq, tk, br, bc))
    cases.append(_inputs_kept_case())
    return run_checks("flash_backward_dq(q, k, v, o, lse, do, causal, scale, block_q, block_k)",
                      fn, cases, verbose=verbose, hint_level=hint_level)


ALL_HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_")]
