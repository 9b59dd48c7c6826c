"""Predict-then-check exercises of the notebooks (one home: notebooks call these by name).

A notebook states a question, the learner writes a prediction into a cell, and

    from flashcourse import exercises
    exercises.check("03-second-tile", m=..., l=..., alpha=...)

says which parts are right, names the likely mistake for each wrong part, and
offers a "Show answer" button; `exercises.reveal(name)` prints the answer with
its working. The answers are computed here by code (from the course's own
functions), never typed in; a prediction left as None is "not answered yet", so
a notebook still runs top to bottom.

Adding an exercise: write a function returning an `Exercise` (question, the
computed answer, a tolerance, and diagnoses that recognise typical wrong values),
and register it in EXERCISES under "NN-short-name".
"""

from __future__ import annotations

import html
import math

import numpy as np

from ._exercise import Exercise, _same_number, equal_to, unit_slips
from .exercises_hopper import (RESCALE_12, SETMAXNREG_12, V_LAYOUT_12,  # noqa: F401
                               WAVES_12, WGMMA_12, descriptors_12, rescale_12, setmaxnreg_12,
                               v_layout_12, waves_12)
from .exercises_model import GPT_13, saved_activations_13  # noqa: F401
from .exercises_paged import (FRAGMENTATION_11B, PAGE_COSTS_11B,  # noqa: F401
                              fragmentation_11b, page_costs_11b)
from .geometry import tile_visibility
from .printing import say


# Exercise (one predict-then-check exercise) and the number comparison live in _exercise


# -- notebook 03: the second key tile of one row ------------------------------------------

TILE_1 = (1.0, 2.5, 0.5)                  # scores of one query row against key tile 1
TILE_2 = (3.0, -1.0, 2.0)                 # ... and against key tile 2 (already scaled)


def second_tile() -> Exercise:
    s1, s2 = np.array(TILE_1), np.array(TILE_2)
    m1 = float(s1.max())
    l1 = float(np.exp(s1 - m1).sum())
    m2 = max(m1, float(s2.max()))
    alpha = math.exp(m1 - m2)
    l2 = alpha * l1 + float(np.exp(s2 - m2).sum())
    no_rescale = l1 + float(np.exp(s2 - m2).sum())
    inverted = math.exp(m2 - m1)
    tile_only = float(np.exp(s2 - m2).sum())
    working = (f"tile 1: m = max{TILE_1} = {m1:g}, l = sum exp(s - {m1:g}) = {l1:.4f}\n"
               f"tile 2: m' = max({m1:g}, max{TILE_2}) = {m2:g}; alpha = exp({m1:g} - {m2:g}) "
               f"= {alpha:.4f}\n"
               f"        l' = alpha * {l1:.4f} + sum exp(s - {m2:g}) = {l2:.4f}")
    return Exercise(
        "After the second key tile: the row's running max m, running sum l, and the rescale "
        "factor alpha applied to the old l at that tile",
        {"m": m2, "l": l2, "alpha": alpha}, working,
        diagnoses={
            "m": [(lambda y: _same_number(y, float(s2.max()), 1e-9) and m2 != s2.max(),
                   "that is tile 2's max alone; the running max keeps the larger of both"),
                  (lambda y: _same_number(y, m1, 1e-9) and m2 != m1,
                   "that is tile 1's max: tile 2 has a larger score, so the running max "
                   "grows to it")],
            "l": [(lambda y: _same_number(y, no_rescale, 5e-3),
                   "you added tile 2's terms to the old l without rescaling it first"),
                  (lambda y: _same_number(y, tile_only, 5e-3),
                   "that is tile 2's sum alone; the old l (rescaled) must be added"),
                  (lambda y: _same_number(y, inverted * l1 + tile_only, 5e-3),
                   "the old l was multiplied by exp(m' - m) > 1; the factor is exp(m - m') <= 1")],
            "alpha": [(lambda y: _same_number(y, inverted, 5e-3),
                       "the factor points the wrong way: exp(old max - new max), at most 1"),
                      (lambda y: _same_number(y, 1.0, 1e-9),
                       "alpha is 1 only when the max does not grow; here it grows"),
                      (lambda y: _same_number(y, m1 - m2, 1e-9), "that is the exponent m - m'; "
                       "alpha is its exponential, exp(m - m')")],
        })


# -- notebook 03: which tiles does the causal mask skip when Tq != Tk ----------------------

SKIP_SHAPE = (6, 10, 2, 2)                # Tq, Tk, Br, Bc


def _tiles(tq, tk, br, bc, status, offset=None):
    out = set()
    for i, q0 in enumerate(range(0, tq, br)):
        for j, k0 in enumerate(range(0, tk, bc)):
            q1, k1 = min(q0 + br, tq), min(k0 + bc, tk)
            if offset is None:
                st = tile_visibility(q0, q1, k0, k1, tq, tk, True)
            else:                                     # a wrong alignment, for diagnoses
                st = "hidden" if k0 > q1 - 1 + offset else \
                    ("full" if k1 - 1 <= q0 + offset else "partial")
            if st in status:
                out.add((i, j))
    return out


def causal_skips() -> Exercise:
    tq, tk, br, bc = SKIP_SHAPE
    skipped = _tiles(tq, tk, br, bc, {"hidden"})
    partial = _tiles(tq, tk, br, bc, {"partial"})
    top_left = _tiles(tq, tk, br, bc, {"hidden"}, offset=0)
    rows = []
    for i, q0 in enumerate(range(0, tq, br)):
        rows.append(f"query block {i} (rows {q0}-{min(q0 + br, tq) - 1}): skips key blocks "
                    f"{sorted(j for (a, j) in skipped if a == i)}")
    working = (f"Tq = {tq}, Tk = {tk}: query i sees key j iff j <= i + {tk - tq}. A tile is "
               "skipped iff even its last row cannot see its first key.\n" + "\n".join(rows)
               + f"\npartly visible (computed, masked inside): {sorted(partial)}")

    def as_set(y):
        try:
            return {(int(a), int(b)) for a, b in y}
        except (TypeError, ValueError):
            return None

    def same(part, yours, answer):
        return as_set(yours) == answer

    return Exercise(
        f"Tq = {tq}, Tk = {tk}, Br = {br}, Bc = {bc}, causal: the (query block, key block) "
        "tiles that are skipped (0-based)",
        {"skipped": skipped}, working, same=same,
        diagnoses={"skipped": [
            (lambda y: as_set(y) == top_left,
             "that is the top-left mask (j <= i); the course aligns it bottom-right, "
             f"j <= i + Tk - Tq = i + {tk - tq}"),
            (lambda y: as_set(y) is not None and skipped < as_set(y) <= skipped | partial,
             "you also skipped partly visible tiles: they are computed and masked inside"),
            (lambda y: as_set(y) == {(j, i) for i, j in skipped},
             "your pairs are (key block, query block); give (query block, key block)"),
            (lambda y: as_set(y) == {(i + 1, j + 1) for i, j in skipped},
             "number the blocks from 0: query blocks 0..2, key blocks 0..4"),
            (lambda y: as_set(y) is not None and as_set(y) < skipped,
             "some tiles that no query of the block can see are missing"),
            (lambda y: as_set(y) is None,
             "give a list of (query block, key block) pairs of whole numbers, like [(i, j), ...]"),
        ]})


# -- notebook 06: key tiles visited with and without the causal mask --------------------------

def causal_tiles_06() -> Exercise:
    br, bc, n = 128, 64, 8192
    full = (n // br) * (n // bc)
    causal = sum(min(n // bc, (q0 + br + bc - 1) // bc) for q0 in range(0, n, br))
    hidden_only = sum(1 for q0 in range(0, n, br) for k0 in range(0, n, bc)
                      if k0 + bc - 1 <= q0)           # only tiles fully visible
    working = (f"without the mask: ({n} / {br}) x ({n} / {bc}) = {full} tiles per head\n"
               f"causal: query block q0 visits key tiles up to its last row q0 + {br - 1}: "
               f"sum over q0 of ceil((q0 + {br}) / {bc}) = {causal}\n"
               f"ratio {full / causal:.3f}: the {n // br * (br // bc)} diagonal tiles are "
               "computed in full and masked element by element, so causal is a little more than "
               "half the work.")
    return Exercise(
        "Br = 128, Bc = 64, N = 8192: key tiles visited per head without and with the mask",
        {"tiles_full": full, "tiles_causal": causal}, working, rtol=0.0,
        diagnoses={"tiles_causal": [
            (lambda y: _same_number(y, full / 2, 0), "exactly half is too few: with Br = "
             f"{br} and Bc = {bc} the diagonal of each query block crosses {br // bc} key "
             "tiles, all partly hidden and all computed (one per query block is the count "
             "for square tiles)"),
            (lambda y: _same_number(y, hidden_only, 0), "that counts only tiles visible in full; "
             "partly visible tiles on the diagonal are visited too"),
            (lambda y: _same_number(y, (n // br) * (n // br + 1) // 2, 0), wide := "that "
             f"takes key tiles {br} wide; they are Bc = {bc}: {n // bc} per query block, N / Bc"),
            (lambda y: _same_number(y, causal / (n // br), 1e-3),
             f"that is the average per query block; the question asks for the sum over the "
             f"{n // br} query blocks of the head"),
        ], "tiles_full": [(lambda y: _same_number(y, (n // br) ** 2, 0), wide),
            (lambda y: _same_number(y, (n // bc) ** 2, 0), f"there are {n // br} query blocks "
             f"of {br} rows, not {n // bc}"),
            (lambda y: _same_number(y, n // bc, 0),
             f"that is one query block's count; the question asks for all the key tiles the "
             f"head's {n // br} query blocks visit together"),
        ]})


# -- notebook 09: what the backward keeps, and what recomputation costs -------------------------

def saved_bytes_09() -> Exercise:
    from .memory import saved_for_backward
    from .traffic import backward_flops
    b, h, n, d = 4, 16, 8192, 128
    p_bytes = b * h * saved_for_backward(n, n, d, method="standard")["P"]
    l_bytes = b * h * saved_for_backward(n, n, d, method="tiled")["L"]
    factor = backward_flops(n, n, d) / backward_flops(n, n, d, recompute=False)

    def close(y, value):
        return _same_number(y, value, 1e-3)
    working = (f"(a) P: B H N^2 s = {b} x {h} x {n}^2 x 2 B = {p_bytes:,} B\n"
               f"(b) L: B H N x 4 B (fp32 statistics) = {l_bytes:,} B\n"
               f"(c) backward FLOPs with recomputation / without = {factor:.2f} "
               "(five tile products instead of four)")
    return Exercise(
        "B = 4, H = 16, d = 128, N = 8192, bf16: (a) bytes of P kept by standard attention "
        "for one layer, (b) bytes of L kept by FlashAttention, (c) the backward's FLOP factor",
        {"p_bytes": p_bytes, "l_bytes": l_bytes, "flops_factor": factor}, working, rtol=1e-3,
        diagnoses={
            "p_bytes": [*unit_slips(p_bytes, "bytes", {"GiB": 2 ** -30, "GB": 1e-9, "MiB": 2 ** -20,
                                                        "MB": 1e-6}, close),
                        (lambda y: _same_number(y, p_bytes / (b * h), 1e-3),
                         "that is one head of one request; multiply by B x H"),
                        (lambda y: _same_number(y, 2 * p_bytes, 1e-3),
                         "that is twice: bf16 stores 2 bytes per probability, not 4; and only P "
                         "is kept (S is not needed: dS comes from P and dP)")],
            "l_bytes": [*unit_slips(l_bytes, "bytes", {"MiB": 2 ** -20, "MB": 1e-6, "KiB": 2 ** -10,
                                                        "kB": 1e-3}, close),
                        (lambda y: _same_number(y, l_bytes / 2, 1e-3),
                         "L is stored in fp32 (4 bytes per row), whatever the input type"),
                        (lambda y: _same_number(y, l_bytes * d, 1e-3),
                         "L is one number per query row, not a row of d numbers"),
                        (lambda y: _same_number(y, 2 * l_bytes, 1e-3),
                         "that is 8 bytes per row: two numbers (m and l, as FlashAttention-1 "
                         "kept them) or one in fp64; FlashAttention-2 keeps one, "
                         "L = m + log l, in fp32 (4 bytes)")],
            "flops_factor": [(lambda y: _same_number(y, 2.5, 1e-3) and factor != 2.5,
                              "2.5 is the backward against the FORWARD; the question compares "
                              "the backward with and without recomputation"),
                             (lambda y: _same_number(y, 1.0, 1e-9),
                              "recomputing S costs one more tile product: not free"),
                             (lambda y: _same_number(y, 1 / factor, 1e-3),
                              "that is without / with; the question asks the backward's FLOPs "
                              "with recomputation over those without (more than 1)")],
        })


# -- notebook 03: non-matmul FLOPs of one tile, FA1 against FA2 ------------------------------

NONMATMUL_TILE = (32, 48, 40)             # Br, Bc, d: not the notebook's 64 x 64 x 64 example


def nonmatmul_flops_03() -> Exercise:
    from .fa2_work import matmul_flops_per_tile, nonmatmul_per_tile
    br, bc, d = NONMATMUL_TILE
    fa1 = nonmatmul_per_tile(br, bc, d, "fa1").flops
    fa2_n = nonmatmul_per_tile(br, bc, d, "fa2")
    fa2 = fa2_n.flops
    shared = 4 * br * bc
    mm = matmul_flops_per_tile(br, bc, d)
    working = (f"Br = {br}, Bc = {bc}, d = {d}; one FLOP per add, multiply, subtract or max; "
               "exp, log and 1/x are SFU operations, not counted here\n"
               f"both: scale S, row max, S - m, row sum: 4 Br Bc = {shared}\n"
               f"FA1 (Alg. 1, lines 10-12): m_new = max: Br = {br}; l_new = e^(m - m_new) l + "
               f"e^(m~ - m_new) l~: 2 Br sub + 2 Br mul + Br add = {5 * br};\n"
               f"     O <- diag(l_new)^-1 (diag(l) e^(m - m_new) O + e^(m~ - m_new) P~ V): "
               f"Br mul (l e^..) + 3 Br d mul + Br d add = {br + 4 * br * d}\n"
               f"     FA1 = {shared} + {br} + {5 * br} + {br + 4 * br * d} = {fa1}\n"
               f"FA2 (Alg. 1, lines 9-10): m_new: Br = {br}; l = e^(m - m_new) l + rowsum: "
               f"Br sub + Br mul + Br add = {3 * br};\n"
               f"     O = diag(e^(m - m_new)) O + P~ V: Br d mul = {br * d} (the + is the "
               "matrix product's own accumulate)\n"
               f"     FA2 = {shared} + {br} + {3 * br} + {br * d} = {fa2}\n"
               f"ratio {fa1 / fa2:.2f}; against {mm:,} matmul FLOPs. FA2's O / l and lse "
               f"({fa2_n.end_flops} FLOPs) come once per query block, after its last tile.")
    share = ("you left out the work both versions share: scaling S, the row max, S - m and "
             "the row sum, Br Bc each")
    no_scale = ("one Br Bc short: S is scaled by 1/sqrt(d) before the row max (Br Bc "
                "multiplies), in both versions")
    exps = ("you counted the exponentials (Br Bc of them for P~, plus the rescale factors) "
            "as FLOPs: they run on the special-function units and are not counted here")
    no_max = ("Br short: m_new = max(m, m~) is one more max per row, on top of the row max "
              "over S")
    big = nonmatmul_per_tile(64, 64, 64, "fa1").flops, nonmatmul_per_tile(64, 64, 64, "fa2").flops
    example = (f"that is the notebook's 64 x 64 x 64 example; this tile is Br = {br}, "
               f"Bc = {bc}, d = {d}")
    fa1_sfu, fa2_sfu = (nonmatmul_per_tile(br, bc, d, v).sfu_ops for v in ("fa1", "fa2"))

    def slips(count, sfu, example_count):
        """The diagnoses both versions' counts share: the scale or the second max left out,
        the exponentials (`sfu`) counted, the notebook's example (`example_count`) given."""
        return [equal_to(count - br * bc, no_scale), equal_to(count - br, no_max),
                equal_to(count + sfu, exps), equal_to(example_count, example)]

    return Exercise(
        f"Non-matmul FLOPs of one tile step, Br = {br}, Bc = {bc}, d = {d}: FA1 and FA2",
        {"fa1_flops": fa1, "fa2_flops": fa2}, working, rtol=0.0,
        diagnoses={
            "fa1_flops": [
                equal_to(fa1 - shared, share),
                equal_to(fa1 - 2 * br * d,
                         "line 12 touches the (Br, d) output block more than once: the old O "
                         "is scaled by l e^(m - m_new), the new P~ V by e^(m~ - m_new), the "
                         "two are added, and the sum is multiplied by 1 / l_new"),
                equal_to(mm, "that is the tile's matmul FLOPs (4 Br Bc d); the question is "
                             "everything else"),
                *slips(fa1, fa1_sfu, big[0]),
                equal_to(fa2, "that is FA2's count: FA1 rescales l~ and renormalises O on "
                              "every tile"),
                equal_to(fa1 - br * d,
                         "one Br d short: line 12 ends by multiplying the (Br, d) block by "
                         "diag(l_new)^-1, Br d multiplies (the reciprocals themselves are SFU "
                         "work)"),
            ],
            "fa2_flops": [
                equal_to(fa2 - shared, share),
                equal_to(fa2 + fa2_n.end_flops,
                         "FA2 divides by l and forms lse once per query block, after the last "
                         "tile: not part of one tile step"),
                equal_to(fa2 + br * d,
                         "the + of O = diag(.) O + P~ V is the matrix product's own accumulate "
                         "(the mma adds into O), not Br d separate additions"),
                equal_to(fa1, "that is FA1's count: FA2 neither rescales l~ nor renormalises O "
                              "every tile"),
                equal_to(fa2 - br * d,
                         "one Br d short: the old O is still rescaled on every tile, "
                         "diag(e^(m - m_new)) O, Br d multiplies; only the division by l waits"),
                *slips(fa2, fa2_sfu, big[1]),
            ]})


# -- notebook 07: FlashAttention-2's grid over query blocks and its split-Q warps ------------

#: batch, heads, Tq (not a multiple of Br), Br of the grid; Br, d, warps of the split-K count
GRID_07 = (2, 8, 20_000, 128)
WARPS_07 = (64, 96, 4)


def _grid_same_07(part, yours, right) -> bool:
    """Counts exactly; the share of busy SMs to two decimals (0.12 for 16 / 132)."""
    if part == "fa1_busy":
        try:
            return abs(float(yours) - right) <= 0.005
        except (TypeError, ValueError):
            return False
    return _same_number(yours, right, 0)


def fa2_grid_07() -> Exercise:
    from .fa2_work import grid_blocks, sm_fill, warp_exchange_bytes
    from .gpus import GPUS
    b, h, tq, br = GRID_07
    wbr, d, w = WARPS_07
    sms = GPUS["H200"].sms
    fa1 = grid_blocks(b, h, tq, br, "fa1")
    fa2 = grid_blocks(b, h, tq, br, "fa2")
    fill1, fill2 = sm_fill(fa1, sms), sm_fill(fa2, sms)
    split_k = warp_exchange_bytes(wbr, d, w, "split-K")
    per_warp = 2 * (wbr * d + 2 * wbr) * 4
    working = (
        f"B = {b}, H = {h}, Tq = {tq:,}, Br = {br}; an H200 has {sms} SMs, one resident "
        "block per SM as in section 3\n"
        f"FA1: one thread block per (batch, head): B H = {fa1}; they fill {fa1} of {sms} "
        f"SMs: {fill1.busy_first_wave:.3f} (the rest idle for the whole launch)\n"
        f"FA2: B H ceil(Tq / Br) = {b * h} x ceil({tq:,} / {br}) = {b * h} x {-(-tq // br)} "
        f"= {fa2:,} blocks (the last query block of each head is ragged, and still a block)\n"
        f"     waves = ceil({fa2:,} / {sms}) = {fill2.waves}; the last wave holds "
        f"{fa2 - (fill2.waves - 1) * sms} blocks, so the block slots are used "
        f"{fa2:,} / ({fill2.waves} x {sms}) = {fill2.busy_average:.3f} of the time\n"
        f"split-K, Br = {wbr}, d = {d}, {w} warps: each warp writes its partial (Br, d) "
        f"output and its Br row maxes and Br row sums (fp32) to shared memory, and they are "
        f"read back: 2 x {w} x ({wbr} x {d} + 2 x {wbr}) x 4 B = {split_k:,} B per key tile\n"
        "split-Q: each warp owns whole rows (its m, l and acc): nothing to exchange, 0 B "
        "(and no barrier between the warps inside a tile).")
    ceil_slip = b * h * (tq // br)
    return Exercise(
        f"FlashAttention-2's changes 2 and 3 on an H200 ({sms} SMs): B = {b}, H = {h}, "
        f"Tq = {tq:,}, Br = {br}: thread blocks of FA1 and FA2, FA1's share of busy SMs, "
        f"FA2's waves; bytes exchanged through shared memory per key tile by {w} warps, "
        f"Br = {wbr}, d = {d}, split-K and split-Q",
        {"fa1_blocks": fa1, "fa1_busy": fill1.busy_first_wave, "fa2_blocks": fa2,
         "fa2_waves": fill2.waves, "split_k_bytes": split_k, "split_q_bytes": 0},
        working, same=_grid_same_07,
        diagnoses={
            "fa1_blocks": [(lambda y: _same_number(y, b, 0) or _same_number(y, h, 0),
                            "FA1 gives every (batch, head) pair its own block: B times H")],
            "fa1_busy": [(lambda y: abs(float(y) - 100 * fill1.busy_first_wave) <= 0.5,
                          "give it as a share between 0 and 1, not in percent"),
                         (lambda y: _same_number(y, 1.0, 0),
                          f"FA1 has only {fa1} blocks for {sms} SMs: one block runs on one SM")],
            "fa2_blocks": [(lambda y: _same_number(y, ceil_slip, 0)
                            or _same_number(y, b * h * tq / br, 1e-3),
                            f"{tq:,} / {br} is not whole: the ragged last query block needs "
                            "its own thread block too (round up)"),
                           (lambda y: _same_number(y, -(-tq // br), 0),
                            "that is one head of one sequence: the grid runs over every "
                            "(batch, head) pair as well"),
                           (lambda y: _same_number(y, h * -(-tq // br), 0),
                            "the batch multiplies the grid too: B H ceil(Tq / Br)")],
            "fa2_waves": [(lambda y: _same_number(y, fa2 // sms, 0),
                           "the last, partial wave is a wave too: round up"),
                          (lambda y: _same_number(y, fa2 / sms, 5e-3),
                           "waves are whole rounds of blocks: round the quotient up")],
            "split_k_bytes": [
                (lambda y: _same_number(y, split_k // 2, 0),
                 "that is half: count both the write to shared memory and the read back, "
                 "4 bytes (fp32) per value"),
                (lambda y: _same_number(y, 2 * w * wbr * d * 4, 0),
                 "the warps also exchange each row's max and sum (2 Br values), which the "
                 "merge of the partial softmaxes needs"),
                (lambda y: _same_number(y, per_warp, 0),
                 "that is one warp's share: every warp writes and reads its partial result")],
            "split_q_bytes": [(lambda y: _same_number(y, split_k, 5e-3),
                               "split-Q warps own whole query rows, so their softmax state "
                               "and output never need merging")],
        })


# -- notebook 05: smaller tiles in the fast CPU kernel -----------------------------------------

BLOCKS_05 = (2048, 32, 16)                # N, the Br tried, the Bc tried (the defaults: cpu.py)


def _direction(y):
    """A learner's "faster" / "slower" as that word, or None for anything else."""
    if not isinstance(y, str):
        return None
    word = y.strip().strip(".!'\"").strip().lower()
    return word if word in ("faster", "slower") else None


def block_sizes_05() -> Exercise:
    from . import cpu
    n, br_small, bc_small = BLOCKS_05
    br, bc = cpu.DEFAULT_BLOCK_Q, cpu.DEFAULT_BLOCK_K
    kv_reads = -(-n // br_small)              # K and V: once per query block, Tq / Br
    kv_default = -(-n // br)
    tiles = -(-n // bc_small)                 # key tiles one query block folds in, Tk / Bc
    tiles_default = -(-n // bc)
    lanes = 16                                # float32 per AVX-512 vector (8 with AVX2)
    # The direction is the cost model's: the FLOPs do not change, the fixed costs do.
    # Smaller Br: K and V streamed Tq / Br times, and every inner loop (along Br) is a
    # couple of vectors long, so its set-up is paid for little work. Smaller Bc: the
    # per-tile costs that do not shrink with Bc (a max, alpha = exp2 and the rescale of
    # d accumulators per row) are paid Tk / Bc times.
    answer = {"br32": "slower", "kv_reads_br32": kv_reads,
              "bc16": "slower", "key_tiles_bc16": tiles}
    recorded = ""
    from .results import RESULTS_DIR, ResultsError, load
    try:
        doc = load(RESULTS_DIR / "cpu_forward_2core.json", "cpu_forward")
    except ResultsError:        # a broken record: the answer goes without the measurement
        doc = None
    sweep = (doc or {}).get("sweep_N4096") or {}
    small, big = sweep.get(f"64x{bc}"), sweep.get(f"{br}x{bc}")
    if small and big:
        recorded = (f"\nrecorded on the course's 2-core machine, N = 4096: Br = 64 takes "
                    f"{small['median_ms'] / big['median_ms']:.2f}x the time of Br = {br} "
                    f"(Bc = {bc}; benchmarks/results/cpu_forward_2core.json)")
    working = (
        f"defaults Br = {br}, Bc = {bc}; N = {n}, d = 64; the FLOPs (4 N^2 d) are the same "
        "for every tile shape: only the fixed costs move\n"
        f"Br = {br_small}: K and V are read once per query block, Tq / Br = {n} / {br_small} "
        f"= {kv_reads} times (default: {kv_default}); every inner loop runs along the "
        f"{br_small} query rows, {br_small // lanes} AVX-512 vectors ({br_small // 8} with "
        "AVX2), so each loop's set-up is paid for very little work: slower. More query "
        f"blocks do not help 2 cores: the default already makes {kv_default}.\n"
        f"Bc = {bc_small}: one query block folds in Tk / Bc = {n} / {bc_small} = {tiles} key "
        f"tiles (default: {tiles_default}); each costs every row a max, a rescale factor "
        "alpha (one exp2) and a rescale of its d = 64 accumulators, none of which shrink "
        "with Bc: slower, by less (those costs are about 1 / (2 Bc) of a tile's "
        f"multiply-adds, {1 / (2 * bc_small):.0%} at Bc = {bc_small}: a timing on a busy "
        "machine may not resolve it)." + recorded)
    return Exercise(
        f"N = {n}, d = 64, the fast kernel (v3) with Br = {br_small} and with Bc = {bc_small} "
        "instead of the defaults: faster or slower, and the counts behind it",
        answer, working, rtol=0.0,
        same=lambda part, yours, right: (_direction(yours) == right if isinstance(right, str)
                                         else _same_number(yours, right, 0.0)),
        diagnoses={
            "br32": [
                (lambda y: _direction(y) is None, 'answer with the word "faster" or "slower"'),
                (lambda y: _direction(y) == "faster",
                 "more, smaller query blocks do not give 2 cores more to do (the default "
                 f"already makes {kv_default} blocks); each inner loop now runs over "
                 f"{br_small} rows, {br_small // lanes}-{br_small // 8} vector instructions, "
                 "so the loop set-up is paid for little work, and K and V are read "
                 f"{kv_reads // kv_default} times as often")],
            "kv_reads_br32": [
                (lambda y: _same_number(y, kv_default, 0.0),
                 f"that is the default's count (Br = {br}); with Br = {br_small} there are "
                 "more query blocks"),
                (lambda y: _same_number(y, 2 * kv_reads, 0.0),
                 "you counted K and V together; the question is how many times each is read"),
                (lambda y: _same_number(y, -(-n // bc), 0.0),
                 "that divides by Bc: K and V are read once per QUERY block, Tq / Br"),
                (lambda y: _same_number(y, 1, 0.0),
                 "once would need all of K and V held on chip beside every query block; the "
                 "tiled kernel streams them once per query block")],
            "bc16": [
                (lambda y: _direction(y) is None, 'answer with the word "faster" or "slower"'),
                (lambda y: _direction(y) == "faster",
                 f"the default ({bc}, {br}) float32 score tile ({bc * br * 4 // 1024} KiB) "
                 "already stays in the core's L2 cache, so a smaller one saves no memory "
                 f"traffic; instead a query block folds in {tiles // tiles_default} times as "
                 "many key tiles, and each costs every row a max, an alpha and a rescale of "
                 "d accumulators")],
            "key_tiles_bc16": [
                (lambda y: _same_number(y, tiles_default, 0.0),
                 f"that is the default's count (Bc = {bc})"),
                (lambda y: _same_number(y, tiles * kv_default, 0.0),
                 "that counts the key tiles of all query blocks together; the question "
                 "asks for one query block"),
                (lambda y: _same_number(y, -(-n // br), 0.0) or _same_number(y, kv_reads, 0.0),
                 "that divides by Br: the key tiles are Tk / Bc"),
            ]})


# -- notebook 08: the DRAM bytes of one flash configuration, predicted before it is shown -------

DRAM_RUN_08 = "flash-N4096-q64k64"        # 16 heads, d = 64, fp32, Br = Bc = 64
DRAM_CACHE_08 = "all"                     # ncu empties the caches before the kernel
DRAM_BAND_08 = (2 / 3, 3 / 2)             # yours / measured counted as right: a factor 1.5
#: (a)'s tolerance: 0.5 %, under the 0.77 % that leaving out Q's read or O's write (16 MiB of
#: 2,080) moves it (review round 16 a: at 1 % both slips counted as right)
MODEL_RTOL_08 = 0.005
MIB = 2 ** 20


def dram_flash_08() -> Exercise:
    from . import measured_traffic as mt
    from .results import load_traffic
    doc = load_traffic()
    run = None if doc is None else next(
        (r for r in doc["runs"] if r["name"] == DRAM_RUN_08
         and r["cache_control"] == DRAM_CACHE_08 and r.get("dram_bytes") is not None), None)
    if run is None:
        raise ValueError(f"exercise 08-dram-flash needs the recorded ncu study with "
                         f"{DRAM_RUN_08} (benchmarks/results/h200_ncu_traffic.json)")
    n, d, h, br, bc = (run["seq_len"], run["head_dim"], run["heads"], run["block_q"],
                       run["block_k"])
    e = 4                                                     # fp32 bytes per element
    model = mt.model_bytes("flash", n, d, h, block_q=br, block_k=bc) / MIB
    dram = run["dram_bytes"] / MIB
    tr = -(-n // br)
    one = n * d * e * h / MIB                                 # one of Q, K, V, O: 16 MiB
    kv_head = 2 * n * d * e / MIB
    l2 = doc["limits"]["l2_bytes"] / MIB
    lse = 4 * n * h / MIB
    kv_once = mt.kv_reads_from_dram(run)
    working = (
        f"{DRAM_RUN_08}: N = {n}, d = {d}, {h} heads, fp32, Br = {br}, Bc = {bc}, caches "
        "flushed before the kernel\n"
        f"(a) model (fa2 order): Q read once {one:g} MiB + K and V once per query block, "
        f"Tr = {n} / {br} = {tr} times: 2 x {one:g} x {tr} = {2 * one * tr:g} MiB + O "
        f"written once {one:g} MiB + lse {lse:g} MiB = {model:.2f} MiB\n"
        f"(b) measured DRAM: {dram:.1f} MiB = {dram / model:.3f} of the model; Q, K, V, O "
        f"once would be {4 * one + lse:.1f} MiB\n"
        f"why: one head's K and V are {kv_head:g} MiB ({h} heads: {kv_head * h:g} MiB), small "
        f"next to the {l2:g} MiB L2. The hundreds of blocks resident at once read the same "
        "K_j, V_j tiles at nearly the same time: the first read comes from DRAM, the other "
        f"{tr - 1} are L2 hits. K and V crossed DRAM {kv_once:.2f} times, not {tr}: below 1 "
        "because part of O was still in the write-back L2 when the kernel ended. The model "
        "counts the bytes the SMs ask of memory outside the chip: here they land in L2.")
    lo, hi = DRAM_BAND_08

    def same(part, yours, right):
        if part == "dram_mib":
            try:
                ratio = float(yours) / right
            except (TypeError, ValueError, ZeroDivisionError):
                return False
            return lo <= ratio <= hi
        return _same_number(yours, right, MODEL_RTOL_08)

    def near(y, value, rtol=0.02):
        return _same_number(y, value, rtol)

    return Exercise(
        f"{DRAM_RUN_08} (N = {n}, d = {d}, {h} heads, fp32, Br = Bc = {br}, caches flushed): "
        "(a) the two-level model's MiB, (b) the MiB DRAM really moved (within a factor 1.5)",
        {"model_mib": model, "dram_mib": dram}, working, same=same,
        diagnoses={
            "model_mib": [
                *unit_slips(model, "MiB (2^20 bytes)", {"bytes": MIB, "KiB": 1024, "GiB": 1 / 1024},
                            lambda y, v: near(y, v, MODEL_RTOL_08)),
                (lambda y: near(y, model * MIB / 1e6, 0.005),
                 "that is in MB (10^6 bytes); the question asks MiB (2^20 bytes)"),
                (lambda y: near(y, 4 * one + lse),
                 f"that charges K and V once; the model charges them once per query block, "
                 f"Tr = N / Br = {tr} times"),
                (lambda y: near(y, model / h),
                 f"that is one head; the run has {h}"),
                (lambda y: near(y, model / 2),
                 "fp32: 4 bytes per element, not 2"),
                (lambda y: near(y, 2 * one * tr, 0.005),
                 f"you left out the one read of Q and the one write of O ({one:g} MiB each)"),
                (lambda y: near(y, model - one, 0.002),
                 f"{one:g} MiB short: the model counts both the one read of Q and the one "
                 f"write of O ({one:g} MiB each); one of them is missing"),
                (lambda y: near(y, 2 * model, 0.002),             # review round 20 a
                 "that is twice the model: fp32 takes 4 bytes per element, not 8 (Algorithm "
                 "0's count, S and P through memory, comes to about the same here; the flash "
                 "kernel reads Q once, K and V once per query block, and writes O once)"),
                (lambda y: near(y, mt.model_bytes("dense", n, d, h) / MIB),
                 "that is Algorithm 0's count (S and P through memory); the flash kernel is "
                 "tiled: Q once, K and V once per query block, O once"),
            ],
            "dram_mib": [
                *unit_slips(dram, "MiB (2^20 bytes)", {"bytes": MIB, "KiB": 1024, "GiB": 1 / 1024},
                            lambda y, v: lo <= float(y) / v <= hi),
                (lambda y: near(y, model, 0.1),
                 f"that is the model: DRAM would see K and V {tr} times. But each head's K "
                 f"and V ({kv_head:g} MiB) fit in the {l2:g} MiB L2, and the blocks running "
                 "together read the same tiles at nearly the same moment: L2 hits serve all "
                 "but the first read"),
                (lambda y: float(y) > model,
                 "more than the model: the flash kernel never asks for more bytes than the "
                 "model counts; caches can only take some away"),
                (lambda y: float(y) > hi * dram,
                 f"too many: with {kv_head * h:g} MiB of K and V in a {l2:g} MiB L2, the "
                 f"{tr} re-reads of each tile are L2 hits, so DRAM sees each tensor about "
                 "once"),
                (lambda y: near(y, 2 * one, 0.1),
                 f"you counted K and V only; Q ({one:g} MiB) must come from DRAM too (the "
                 "caches were flushed), and O goes out"),
                (lambda y: float(y) < lo * dram,
                 f"too few: the caches were flushed, so Q, K and V ({3 * one:g} MiB) must "
                 "cross DRAM at least once"),
            ]})


# -- notebook 10: the tensor-core backward's B loads and its deterministic FLOPs ---------------

TC_BWD_10 = (2048, 96, True)              # N = Tq = Tk, d, causal: the FLOP part's problem
_LOAD_WORDS = {"ld_b": "ld_b", "ldmatrix": "ld_b", "ld_bt": "ld_bt",
               "ldmatrix.trans": "ld_bt", "trans": "ld_bt"}


def _load_name(y):
    """A learner's "ld_b" / "ld_bt" (or "ldmatrix" / "ldmatrix.trans"), or None."""
    return _LOAD_WORDS.get(y.strip().lower()) if isinstance(y, str) else None


def tc_backward_10() -> Exercise:
    from .plots.tc_backward import PRODUCTS, b_load
    from .traffic import backward_flops
    n, d, causal = TC_BWD_10
    loads = {f"{p['key']}_load": b_load(p["b_rows"]) for p in PRODUCTS}
    det = backward_flops(n, n, d, causal=causal, dq_mode="two_pass")
    atomic = backward_flops(n, n, d, causal=causal)
    dense = backward_flops(n, n, d, dq_mode="two_pass")
    unit = det // 14                                          # d x visible pairs
    k_of = {"s": "d", "dp": "d", "dv": "queries", "dk": "queries", "dq": "keys"}
    working = "\n".join(
        f"{p['kernel']}: B = {p['B']}; the copy's rows run over {p['b_rows']} -> "
        f"{loads[p['key'] + '_load']}" for p in PRODUCTS)
    working += ("\nrule: b0, b1 of a lane are two neighbouring k of one n. Rows over n (k "
                "along a row, two k per word): plain ldmatrix. Rows over k: ldmatrix.trans "
                "(or, as version 1 did, a second, transposed copy)."
                f"\nN = {n}, d = {d}, causal: visible pairs N (N + 1) / 2 = {unit // d:,}; "
                f"kernel 1 without dQ runs S, dP, dV, dK (4 products), kernel 2 S, dP, dQ "
                f"(3): 7 x 2 x pairs x d = 14 x {unit // d:,} x {d} = {det:,} FLOPs "
                f"(the atomic version: 10 x ... = {atomic:,})")

    def diagnose_load(key):
        k = k_of[key]
        if k == "d":
            wrong = ("its B operand's k runs over d, along a stored row: two neighbouring k "
                     "are already one 32-bit word, so plain ldmatrix hands each lane its "
                     "register; .trans would give it two rows instead")
        else:
            wrong = (f"its B operand's k runs over {k}, down the rows of the row-major copy: "
                     f"b0, b1 are two consecutive {k} of one column, a row apart, so the load "
                     "must transpose on the way (.trans)")
        return [(lambda y: _load_name(y) is None,
                 'answer "ld_b" (ldmatrix) or "ld_bt" (ldmatrix.trans)'),
                (lambda y: _load_name(y) != loads[f"{key}_load"], wrong)]

    def same(part, yours, right):
        if part.endswith("_load"):
            return _load_name(yours) == right
        return _same_number(yours, right, 1e-3)

    diagnoses = {f"{key}_load": diagnose_load(key) for key in k_of}
    diagnoses["det_flops"] = [
        (lambda y: _same_number(y, atomic, 1e-3),
         "that is the atomic version's 10 x pairs x d; kernel 2 recomputes S and dP for dQ"),
        (lambda y: _same_number(y, 12 * unit, 1e-3),
         "kernel 2 recomputes dP = dO V^T as well as S: dS needs both"),
        (lambda y: _same_number(y, dense, 1e-3),
         "causal: only the visible pairs are computed, about half of N^2"),
        (lambda y: _same_number(y, det / 2, 1e-3),
         "FLOPs count a multiply and an add: 2 per multiply-add"),
        (lambda y: _same_number(y, 8 * unit, 1e-3),
         "8 x pairs x d is the backward that reads a stored P (4 products)"),
        (lambda y: _same_number(y, det / 1e9, 1e-3),
         "that is the count in GFLOP: give the number of FLOPs itself"),
        (lambda y: _same_number(y, det / 1e6, 1e-3),
         "that is the count in MFLOP: give the number of FLOPs itself"),
    ]
    return Exercise(
        "Kernel 1 (v2): the B load of S^T, dP^T, dV, dK, dQ; and the deterministic "
        f"backward's FLOPs for one head at N = {n}, d = {d}, causal",
        {**loads, "det_flops": det}, working, same=same, diagnoses=diagnoses)


EXERCISES = {
    "03-second-tile": second_tile,
    "03-causal-skips": causal_skips,
    "03-nonmatmul-flops": nonmatmul_flops_03,
    "05-block-sizes": block_sizes_05,
    "06-causal-tiles": causal_tiles_06,
    "07-fa2-grid": fa2_grid_07,
    "08-dram-flash": dram_flash_08,
    "09-saved-bytes": saved_bytes_09,
    "10-tc-backward": tc_backward_10,
    "11b-fragmentation": fragmentation_11b,
    "11b-page-costs": page_costs_11b,
    "12-descriptors": descriptors_12,
    "12-v-layout": v_layout_12,
    "12-setmaxnreg": setmaxnreg_12,
    "12-waves": waves_12,
    "12-rescale": rescale_12,
    "13-saved-activations": saved_activations_13,
}


def get(name: str) -> Exercise:
    if name not in EXERCISES:
        raise ValueError(f"unknown exercise {name!r}; known: {', '.join(EXERCISES)}")
    return EXERCISES[name]()


def grade(name: str, **answers) -> tuple[bool, list[str]]:
    """(all right?, one line per part) for a learner's predictions; None = not answered."""
    ex = get(name)
    unknown = set(answers) - set(ex.answer)
    if unknown:
        raise ValueError(f"exercise {name!r} has the parts {', '.join(ex.answer)}; "
                         f"got {', '.join(sorted(unknown))}")
    lines, all_right = [], True
    for part, right in ex.answer.items():
        yours = answers.get(part)
        if yours is None:
            lines.append(f"{part}: not answered yet (replace None with your prediction)")
            all_right = False
            continue
        ok = ex.same(part, yours, right) if ex.same else _same_number(yours, right, ex.rtol)
        if ok:
            lines.append(f"{part}: right")
            continue
        all_right = False
        why = "not what the rule gives; recompute this part step by step"
        for predicate, text in ex.diagnoses.get(part, []):
            try:
                if predicate(yours):
                    why = text
                    break
            except Exception:
                continue
        else:
            why = _close_miss(ex, yours, right) or why
        lines.append(f"{part}: not quite: {why}")
    return all_right, lines


def _close_miss(ex: Exercise, yours, right) -> str | None:
    """For a number just outside the tolerance (within 4 times it) that no diagnosis names: a
    right value rounded too far (0.61 for exp(-0.5) = 0.6065 against 0.5%), not a wrong rule."""
    if ex.same is not None or not ex.rtol or not _same_number(yours, right, 4 * ex.rtol):
        return None
    off = abs(float(yours) - float(right)) / abs(float(right))
    return (f"close: {off:.2%} off, and the check allows {ex.rtol:.2%}; if you rounded, keep "
            "one more digit")


def reveal(name: str) -> None:
    """Print the answer and its working."""
    ex = get(name)
    say(f"{ex.title}\n{ex.working}")


def check(name: str, **answers) -> bool:
    """Print the verdict for each part and, in Jupyter, a "Show answer" button."""
    ok, lines = grade(name, **answers)
    say(("All right. " if ok else "") + get(name).title + ":")
    for line in lines:
        say("  " + line)
    if not ok:
        _reveal_button(name)
    return ok


def _reveal_button(name: str) -> None:
    try:
        import ipywidgets as w
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:                                        # plain Python: no button
        return
    if get_ipython() is None:
        return
    button = w.Button(description="Show answer")
    out = w.HTML("")

    def on_click(_):
        ex = get(name)
        out.value = f"<pre>{html.escape(ex.working)}</pre>"

    button.on_click(on_click)
    display(w.VBox([button, out]))
