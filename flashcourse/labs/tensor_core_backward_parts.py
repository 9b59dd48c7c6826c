"""Checkers for lab 10b's parts, one by one, and for the whole key-block kernel.

row_delta runs in the pre-pass; transposed_scores, ds_tile, grad_tile and store_grads each
run alone in a one-warp kernel on known fragments: K's and V's A fragments packed by the
PTX map, Q, dO and Y in 32 x 32 tiles whose top-left 16 x 16 is the lab's tile (a wrong
fragment offset then reads known values instead of crashing), accumulators of an earlier
query tile. Each is compared with a numpy model of the same fragment arithmetic, lane by
lane on (32, n) arrays [lane, accumulator], through the maps of `flashcourse.cuda.ptx.mma`
(and lab 10's models of one mma and of a product with accumulators as the A operand, from
`tensor_core_parts`, with its one-warp launcher and diagnoses). Every model takes a `mistake`
that replays one typical wrong implementation; a result that matches one gets its hint.

At the lab's tiles (D = BR = 16) KT = KQ = 1 and NS = NO = 2, so a loop over the wrong size
of a pair, or an offset of k16 step 1, gives the right result there. Each part check (but
row_delta's) and `check_kernel` therefore run the parts also at WIDE (D = 48, BR = 32: KT = 3,
KQ = 2, NS = 4, NO = 6), rebuilt with those sizes (`tile_sizes.at_tiles`); the
slips that show only there are replayed (SCORES_WIDE_MISTAKES, GRAD_WIDE_MISTAKES, store's
'ns'), and a part that reads none of a loop's size names gets HINT_LITERAL.

`check_kernel` runs the pre-pass and the kernel on ragged and causal shapes (one at WIDE)
against the float64 backward (`reference.attention_backward`) on the same fp16 values; when
they disagree it runs the part checks and names the first that fails, or says that all of
them pass and what remains.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, uint32

from .. import reference
from ..constants import LOG2E
from ..cuda.ptx import mma as M
from ..cuda.common._launch import simulator_lock
from ..geometry import ceil_div
from ._harness import Case, Result, run_checks
from .cuda_lab_kernel import _device
from .kernel_source import kernel_guard
from .tensor_core_backward_lab import (_KERNEL_TOL, BC, KA_WORDS, KERNEL_CASES, NT, O_ACC,
                                       S_ACC, TILES, WIDE, Tiles, _parts, at_tiles,
                                       kernel_inputs, lab_backward, make_delta_kernel)
from .tensor_core_lab import source_cases
from .tensor_core_parts import (HINT_CI, _diagnoses, _from_a, _is_overflow, _launch, _mma,
                                _mma_b_model, _near, _overflowed, _part_diagnoses, _table,
                                _tile)
from .tensor_core_wide import _scratch
from .tile_sizes import literal_diagnosis, wide_diagnoses

_RTOL, _ATOL = 1e-5, 1e-5        # one part on exact fragments: fp32 sums of fp16 products

# -- hints ----------------------------------------------------------------------------------

_PART_CHECKS = ("check_row_delta, check_transposed_scores, check_ds_tile, check_grad_tile, "
                "check_store_grads")

HINT_DELTA = ("Your D is wrong: D_i = sum over the head dimension c < d of dO[i, c] O[i, c], "
              "one number per query row (notebook 09: the row sum of dO o O).",
              "A loop over c < d adding the products of row `row` of o and of do.")
HINT_DELTA_AXIS = ("Your D is summed over the wrong axis: it adds a COLUMN of dO o O (over "
                   "query rows) where D_i is the sum along row i, over the head dimension.",
                   "Index o and do by [row, c] with c running over the head dimension.")
HINT_DELTA_PRODUCT = ("Your D multiplies two sums, (sum of O's row) (sum of dO's row); D_i is "
                      "the sum of the products, element by element (dO o O, then the row sum).",
                      "Add o[row, c] * do[row, c] for each c.")
HINT_SCORES = ("Your S^T or dP^T accumulators are wrong: all 4 NS of s and of dp are reset "
               "to F0 first, then n8 tile n of S^T is the queries 8 n .. 8 n + 7, so its B "
               "fragment is load_b on qs with n0 = 8 n (Q's rows) and k0 "
               "= 16 kk (the head dimension), one mma with K's A fragment ka (words from 4 kk) "
               "into s[4 n .. 4 n + 3]; dP^T the same with va and dos, into dp.",
               "For each n8 tile n and k16 step kk: S^T from ka and qs, dP^T from va and dos.")
HINT_S_RESET = ("The accumulators are not reset: s and dp still hold the previous query tile's "
                "P^T and dS^T when the mma adds K Q^T to them (an mma computes C + A B).",
                "Set the 4 NS entries of s and of dp to F0 before the first mma.")
HINT_S_RESET_ONE = ("One of the two accumulator sets is not reset to zero: s or dp (the one named "
                    "above) still holds the previous query tile's P^T or dS^T when the mma adds "
                    "to it (an mma computes C + A B).",
                    "Set all 4 NS entries of s AND of dp to F0 before the first mma.")
HINT_S_OFFSETS = ("Your B fragment has its offsets swapped: load_b(tile, n0, k0, ...) reads "
                  "tile[n0 + n, k0 + kk], so n0 is the QUERY row (8 n for n8 tile n) and k0 the "
                  "head dimension (16 kk).", "n0 = 8 n, k0 = 16 kk.")
HINT_S_PAIRS = ("Your operands are paired the wrong way: S^T = K Q^T takes K's fragments (ka) "
                "with Q (qs); dP^T = V dO^T takes V's (va) with dO (dos).",
                "s from ka and qs; dp from va and dos.")
HINT_DS = ("Your P^T or dS^T is wrong: accumulator i of n8 tile n is key g + 8 (i // 2) and "
           "QUERY 8 n + 2 t + (i % 2) (the C map of the transposed tile), so its lse and D are "
           "lt and dl of that query; P = exp(scale S - lse) goes over s, dS = P (dP - D) over dp.",
           "col = 8 n + 2 t + (i % 2); p from s, scale and lt[col]; dp from p and dl[col].")
HINT_DS_BASE2 = ("Your P is off by a factor (e / 2)^lse: lse is a NATURAL logarithm (the "
                 "forward's m + log l). exp2 needs the whole exponent in base 2: exp2((scale S "
                 "- lse) log2 e), not exp2(scale S log2 e - lse).",
                 "Use math.exp(scale s - lse), or multiply lse by log2 e too.")
HINT_DS_BASE2_RAW = ("Your P mixes bases: exp2 of a natural-log exponent. scale S and lse are "
                     "both in natural-log units (lse is the forward's m + log l), so "
                     "P = exp(scale S - lse); exp2 needs the whole exponent multiplied by "
                     "log2 e.", "Use math.exp(scale s - lse).")
HINT_DS_SCALE = ("Your P leaves out the softmax scale: the forward's scores are scale Q K^T "
                 "(scale = 1 / sqrt(d)), and its lse was taken of those.",
                 "P = exp(s scale - lse).")
HINT_DS_LSE_SCALED = ("Your P multiplies lse by the scale too: lse was taken of the scaled "
                      "scores (the forward's m + log l over scale Q K^T), so it is subtracted "
                      "after the scale: exp(scale S - lse), not exp(scale (S - lse)).",
                      "Multiply s by scale, then subtract lt[col].")
HINT_DS_ROW = ("Your lse and D come from the key: in the transposed tile the ROWS are keys and "
               "the columns queries, and lse and D belong to a query (accumulator i of n8 tile "
               "n: query 8 n + 2 t + (i % 2)).", "Index lt and dl by the column, not by g.")
HINT_DS_NO_P = ("Your dS leaves out P: the softmax's Jacobian gives dS = P o (dP - D), "
                "element by element (notebook 09).", "Multiply (dP - D) by the new P.")
HINT_DS_SIGN = ("Your dS has the wrong sign: dS = P o (dP - D), dP first (notebook 09).",
                "p (dp - D), not p (D - dp).")
HINT_DS_OVERFLOW = ("Your exponentials overflow: in the large-score case every query sees keys "
                    "(all lse finite) and scale S and lse are both near 800, so e to either "
                    "alone is past float32's range (e^88.7; the simulator computes in float64 "
                    "and stops at e^709 with 'math range error'), and inf / inf is NaN. Take the "
                    "difference first, then one exponential of it: lse is at least each of its "
                    "row's scaled scores, so scale S - lse is <= 0 and never overflows.",
                    "P is exp of (scale s minus lse): one exponential of the difference, never "
                    "a quotient or product of two exponentials.")
HINT_DS_STORE = ("P^T must replace S^T in s: grad_tile reads P^T from s (its accumulators are "
                 "the A operand of dV += P^T dO). Your s still holds the scores.",
                 "Write each P back to the entry of s it came from, after using it for dS.")
HINT_DS_SCALED = ("Your dS is multiplied by the scale: dS = P o (dP - D) as it is; the scale "
                  "enters dK (and dQ) once, where store_grads writes them.",
                  "Leave the scale out of dp.")
HINT_GRAD = ("Your acc += X^T Y is wrong: for each k16 step kp (16 queries), pa packs X^T's "
             "accumulators of n8 tiles 2 kp and 2 kp + 1 as the A operand (mma.p_as_a_operand); "
             "then for each n8 tile n of the result, the B fragment of Y from yt and one mma "
             "into acc from 4 n.", "pa word q packs x[8 kp + 2 q] and the next one.")
HINT_GRAD_T = ("You forgot the transpose: the B operand of X^T Y is Y itself, B[kk, n] = "
               "Y[query kk, dim n], and load_b(tile, ...) reads tile[n0 + n, k0 + kk]: so it "
               "must read yt (Y transposed: yt[dim, query]), not ys. With ys you compute "
               "X^T Y^T.", "load_b on yt, n0 = 8 n (the dimension), k0 = 16 kp (the query).")
HINT_GRAD_ORDER = ("X^T is fed in the wrong fragment order: the A operand takes n8 tile 2 kp "
                   "(queries 0-7) as its words 0 (row g) and 1 (row g + 8), n8 tile 2 kp + 1 "
                   "(queries 8-15) as words 2 and 3, each word the pair of neighbouring "
                   "accumulators, the lower index in the low half (mma.p_as_a_operand).",
                   "pa[q] packs x[j0 + 2 q] (low) and x[j0 + 2 q + 1] (high), j0 = 8 kp.")
HINT_GRAD_OFFSETS = ("Your B fragment of Y has its offsets swapped: load_b(yt, n0, k0, ...) "
                     "reads yt[n0 + n, k0 + kk], and yt is Y transposed, so n0 is the head "
                     "dimension (8 n) and k0 the query (16 kp).", "n0 = 8 n, k0 = 16 kp.")
HINT_GRAD_ADD = ("grad_tile must ADD to acc: dK and dV are sums over every query tile that "
                 "sees this key block (acc carries the earlier tiles'). Do not reset it.",
                 "The mma adds to acc: nothing written to acc before it.")
HINT_STORE = ("Your dK or dV is wrong (where it lands, or its scale): accumulator i of n8 "
              "tile n is key k0 + g + 8 (i // 2), dimension 8 n + 2 t + (i % 2) (the C map); "
              "write it only when the key is < tk and the dimension < d; dK times scale, dV "
              "as it is.",
              "key = k0 + g + 8 (i // 2), col = 8 n + 2 t + (i % 2).")
HINT_STORE_SCALE = ("You forgot the scale for dK: S = scale Q K^T, so the chain rule gives dK = "
                    "scale dS^T Q (and dQ = scale dS K); dV = P^T dO has no scale.",
                    "dk = dka times scale.")
HINT_STORE_SCALE_DV = ("Your dV is multiplied by the scale: dV = P^T dO takes none (the scale "
                       "sits inside S, which dV only sees through P).", "dv = dva as it is.")
HINT_STORE_SCALE_MOVED = ("Your scale is on the wrong gradient: dK = scale dS^T Q takes it "
                          "(S = scale Q K^T), dV = P^T dO takes none. You store dK unscaled "
                          "and dV times scale.", "dk = dka times scale; dv = dva as it is.")
HINT_STORE_SWAP = ("dK and dV are swapped: you store the dV accumulators (times scale) as dk and "
                   "the dK accumulators as dv.",
                   "dk from dka times scale, dv from dva as it is.")
HINT_STORE_ROWS = ("Accumulators 2 and 3 are key g + 8, not key g: your rows ignore i // 2.",
                   "key = k0 + g + 8 (i // 2).")
HINT_STORE_TILE = ("Your column ignores the n8 tile: the accumulators of tile n sit 8 n "
                   "dimensions further right.", "col = 8 n + 2 t + (i % 2).")
HINT_KERNEL = (f"Every part check passes ({_PART_CHECKS}), yet the kernel disagrees with the "
               "float64 backward. What remains is where your parts meet the skeleton: the mask "
               "(masked scores reach ds_tile as -inf; a query that sees no key has lse = "
               "+inf in lt), the state carried across query tiles (dka and dva live across "
               "them; s and dp are rewritten) and D from the pre-pass.",
               "Run Tq = Tk = 16 (one tile pair), then Tq = 32, causal and not, and compare "
               "lab_backward with reference.attention_backward.")
HINT_KERNEL_ERROR = ("Your kernel stopped with an error (the line above). On the simulator the "
                     "usual one is an index past the end of an array: a fragment offset, an "
                     "accumulator index, or a write of dK, dV past tk or d. The part checks "
                     f"({_PART_CHECKS}) run each part alone and name the mistake.",
                     "Run the part checks in order; the first that fails names the part.")

# -- hints of the wider tiles (WIDE), where a size or offset right only at D = BR = 16 shows

_SIZES = ("KT (the k16 steps of the head dimension), KQ (of the queries), NS (the n8 tiles "
          "of S^T, over queries) and NO (of dK and dV, over the head dimension)")
def _wide(part_rule: str, hint2: str) -> tuple[str, str]:
    """A part's hint at WIDE: right at the lab's tiles, wrong at the wider ones, and what that
    part's loops and offsets must be (each part its own: a general list of the rules misled
    grad_tile, whose pa is one k16 step's A fragment, read from word 0)."""
    return ("Your part is right at the lab's tiles (D = BR = 16: KT = KQ = 1, NS = NO = 2) "
            f"but not at the wider ones the check also runs, {WIDE}: a loop count or an "
            "offset that is right only at D = BR = 16 (a loop over the wrong one of two sizes "
            "equal there runs too few steps, or past an array's end). The sizes: "
            f"{_SIZES}. {part_rule}", hint2)


HINT_WIDE_SCORES = _wide(
    "In transposed_scores: the reset covers all 4 NS entries of s and of dp; n runs over NS "
    "(queries), kk over KT (the head dimension); step kk reads words 4 kk .. 4 kk + 3 of ka "
    "and va, and columns 16 kk .. 16 kk + 15 of qs and dos (load_b's k0), n8 tile n their "
    "rows from 8 n.",
    "Which of your loops runs over the head dimension, which over the queries?")
HINT_WIDE_DS = _wide(
    "In ds_tile: n runs over NS, the n8 tiles of S^T (over queries), and accumulator i of "
    "tile n is query 8 n + 2 t + (i % 2).",
    "The n loop of ds_tile runs over the n8 tiles of the queries.")
HINT_WIDE_GRAD = _wide(
    "In grad_tile: kp runs over KQ (the queries), n over NO (the head dimension); pa holds "
    "ONE k16 step's A fragment, packed anew for each kp from x's entries 8 kp .. 8 kp + 7, so "
    "the mma reads it from word 0 (words 4 kp would be past pa's 4 words); the B fragment "
    "of step kp is load_b on yt with n0 = 8 n and k0 = 16 kp.",
    "Which of your loops runs over the queries, which over the head dimension? Where does "
    "the mma read pa from?")
HINT_WIDE_STORE = _wide(
    "In store_grads: n runs over NO, the n8 tiles of dK and dV (over the head dimension), and "
    "accumulator i of tile n is dimension 8 n + 2 t + (i % 2).",
    "The n loop of store_grads runs over the n8 tiles of the head dimension.")

HINT_LITERAL = ("Use the named sizes KT, KQ, NS, NO: your code is right only at D = BR = 16. "
                f"The check also runs your part at {WIDE}, and your part does not read the "
                "size one of its loops needs (KT or KQ for the k16 steps, NS or NO for the n8 "
                "tiles): a fixed count such as range(1) or range(2) runs the same number of "
                f"times at both. The sizes: {_SIZES}.",
                "Replace each fixed loop count by the name of what it counts.")
HINT_S_KQ = (f"At {WIDE} your S^T and dP^T leave out the last k16 step of the head "
             "dimension: your kk loop runs over KQ, the k16 steps of the QUERIES (the sums of "
             "dV and dK). S^T = K Q^T sums over the head dimension: KT steps (equal to KQ "
             "only at D = BR = 16).", "The kk loop of S^T runs over KT.")
HINT_S_A_WORDS = (f"At {WIDE} your S^T and dP^T read "
                  "the wrong words of K's and V's A fragments from step kk = 1 on: each k16 "
                  "step has 4 words, so step kk starts at word 4 kk (2 kk reads earlier "
                  "words: half of step 0 and half of step 1 at kk = 1, step 1 again at kk = 2).",
                  "The A fragment of step kk: ka from word 4 kk.")
HINT_GRAD_J0 = (f"At {WIDE} your X^T "
                "packs the wrong accumulators for kp = 1: k16 step kp is n8 tiles 2 kp and "
                "2 kp + 1, 4 entries each, so it starts at entry 8 kp (entry 4 kp is n8 "
                "tile kp, not 2 kp).", "j0 is 8 kp.")
HINT_GRAD_KP = (f"At {WIDE} your B fragment of Y for kp = 1 reads the wrong queries: k16 "
                "step kp is queries 16 kp .. 16 kp + 15, so load_b's k0 is 16 kp (8 kp reads "
                "queries 8 .. 23 at kp = 1, half of them step 0's again).",
                "n0 = 8 n, k0 = 16 kp.")
HINT_GRAD_NO = (f"At {WIDE} your acc leaves its last n8 tiles as they were: your n loop runs "
                "over NS (the n8 tiles of S^T, over queries) where acc's n8 tiles are over the "
                "head dimension, NO of them (equal to NS only at D = BR = 16).",
                "The n loop of grad_tile runs over NO.")
HINT_DS_ONE_TILE = ("Your P^T and dS^T stop after the first n8 tile: the entries of tile 1 and up "
                    "are as they came in. The n loop runs over NS = BR // 8, the n8 tiles of "
                    "S^T over the queries (2 here; KT and KQ, the k16 steps, are 1).",
                    "The n loop of ds_tile runs over NS.")
HINT_GRAD_ONE_TILE = ("Your acc += X^T Y stops after the first n8 tile of the result: its tiles 1 "
                      "and up keep the earlier query tiles' sum. The n loop runs over NO = D // 8, "
                      "the n8 tiles of dK and dV over the head dimension (2 here; KT and KQ, "
                      "the k16 steps, are 1).", "The n loop of grad_tile runs over NO.")
HINT_STORE_ONE_TILE = ("Your dK and dV stop after the first n8 tile: dimensions 8 and up are "
                       "never written. The n loop runs over NO = D // 8, the n8 tiles of dK and "
                       "dV over the head dimension (2 here; KT and KQ, the k16 steps, are 1).",
                       "The n loop of store_grads runs over NO.")
HINT_STORE_NO = (f"At {WIDE} your dK and dV leave out dimensions {8 * WIDE.sizes['NS']} and "
                 "up: your n loop runs over NS (the n8 tiles of S^T, over queries) where dK's "
                 "and dV's n8 tiles are over the head dimension, NO of them (equal to NS only "
                 "at D = BR = 16).", "The n loop of store_grads runs over NO.")


def _part_failing(check: str, what: str) -> tuple[str, str]:
    return (f"The kernel disagrees with the float64 backward, and {check} fails on your "
            f"{what}: run it for its diagnosis and make it pass first (the part checks, in "
            f"order: {_PART_CHECKS}).",
            "Each part check runs one part alone, so its hint names the mistake.")


HINT_KERNEL_DELTA = _part_failing("check_row_delta", "row_delta")
HINT_KERNEL_SCORES = _part_failing("check_transposed_scores", "transposed_scores")
HINT_KERNEL_DS = _part_failing("check_ds_tile", "ds_tile")
HINT_KERNEL_GRAD = _part_failing("check_grad_tile", "grad_tile")
HINT_KERNEL_STORE = _part_failing("check_store_grads", "store_grads")


# -- the one-warp kernels that run one part -------------------------------------------------

@lru_cache(maxsize=None)
def _scores_kernel(transposed_scores, tiles=TILES):
    SCR = _scratch()

    def kern(ka_words, va_words, qs, dos, s_in, dp_in, s_out, dp_out):
        scr = cuda.shared.array(SCR, float32)
        lane = cuda.threadIdx.x
        w = cuda.local.array(2, int32)
        w[0] = lane
        w[1] = 0
        ka = cuda.local.array(KA_WORDS, uint32)
        va = cuda.local.array(KA_WORDS, uint32)
        s = cuda.local.array(S_ACC, float32)
        dp = cuda.local.array(S_ACC, float32)
        b = cuda.local.array(2, uint32)
        for x in range(KA_WORDS):
            ka[x] = ka_words[lane, x]
            va[x] = va_words[lane, x]
        for x in range(S_ACC):
            s[x] = s_in[lane, x]
            dp[x] = dp_in[lane, x]
        transposed_scores(ka, va, qs, dos, s, dp, b, scr, w)
        for x in range(S_ACC):
            s_out[lane, x] = s[x]
            dp_out[lane, x] = dp[x]
    return cuda.jit(at_tiles(kern, tiles))


@lru_cache(maxsize=None)
def _ds_kernel(ds_tile, tiles=TILES):
    def kern(s_in, dp_in, lt, dl, scale, s_out, dp_out):
        lane = cuda.threadIdx.x
        s = cuda.local.array(S_ACC, float32)
        dp = cuda.local.array(S_ACC, float32)
        for x in range(S_ACC):
            s[x] = s_in[lane, x]
            dp[x] = dp_in[lane, x]
        ds_tile(s, dp, lt, dl, scale[0], lane)
        for x in range(S_ACC):
            s_out[lane, x] = s[x]
            dp_out[lane, x] = dp[x]
    return cuda.jit(at_tiles(kern, tiles))


@lru_cache(maxsize=None)
def _grad_kernel(grad_tile, tiles=TILES):
    SCR = _scratch()

    def kern(x_in, ys, yt, acc_in, acc_out):
        scr = cuda.shared.array(SCR, float32)
        lane = cuda.threadIdx.x
        w = cuda.local.array(2, int32)
        w[0] = lane
        w[1] = 0
        x = cuda.local.array(S_ACC, float32)
        acc = cuda.local.array(O_ACC, float32)
        pa = cuda.local.array(4, uint32)
        b = cuda.local.array(2, uint32)
        for j in range(S_ACC):
            x[j] = x_in[lane, j]
        for j in range(O_ACC):
            acc[j] = acc_in[lane, j]
        grad_tile(x, ys, yt, acc, pa, b, scr, w)
        for j in range(O_ACC):
            acc_out[lane, j] = acc[j]
    return cuda.jit(at_tiles(kern, tiles))


@lru_cache(maxsize=None)
def _store_kernel(store_grads, tiles=TILES):
    def kern(dka_in, dva_in, args, scale, dk, dv):
        lane = cuda.threadIdx.x
        dka = cuda.local.array(O_ACC, float32)
        dva = cuda.local.array(O_ACC, float32)
        for j in range(O_ACC):
            dka[j] = dka_in[lane, j]
            dva[j] = dva_in[lane, j]
        store_grads(dka, dva, dk, dv, args[0], args[1], args[2], scale[0], lane)
    return cuda.jit(at_tiles(kern, tiles))


# -- numpy models of the fragment arithmetic, lane by lane, with the typical mistakes -------

_G = np.arange(NT) // 4
_T = np.arange(NT) % 4


def delta_model(o, do, mistake=None) -> np.ndarray:
    """(Tq,) D = rowsum(dO o O); mistakes: 'axis' (column sums, o square), 'product'
    (rowsum(O) rowsum(dO))."""
    o, do = (np.asarray(x, np.float64) for x in (o, do))
    if mistake == "axis":
        return (o * do).sum(axis=0)
    if mistake == "product":
        return o.sum(axis=1) * do.sum(axis=1)
    return (o * do).sum(axis=1)


def a_words(tile) -> np.ndarray:
    """(32, 4 KT) uint32: the A fragments of a (16, 16 KT) tile, k16 step kk in words 4 kk ..
    4 kk + 3, by the PTX map (what load_a gives)."""
    vals = _a_values(tile)
    return M.pack_pair_model(vals[:, 0::2], vals[:, 1::2])


def _a_values(tile) -> np.ndarray:
    """(32, 8 KT): each lane's A values, word w's halves at 2 w and 2 w + 1."""
    idx = _table("a_m16n8k16")
    tile = np.asarray(tile, np.float32)
    return np.concatenate([tile[:, 16 * kk:16 * kk + 16][idx[..., 0], idx[..., 1]]
                           for kk in range(tile.shape[1] // 16)], axis=1)


def scores_model(ktile, vtile, qs, dos, s, dp, mistake=None, tiles=TILES):
    """(s, dp) (32, S_ACC) after transposed_scores at `tiles`: S^T = K Q^T, dP^T = V dO^T
    with K, V (16, D) the A tiles and Q = qs[:BR, :D], dO = dos[:BR, :D] (qs, dos may be
    larger: a wrong offset reads them); mistakes: 'no_reset', 'no_reset_s' / 'no_reset_dp'
    (of one only), 'offsets', 'ci', 'pairs' (V with Q, K with dO), and at wider tiles 'kq'
    (kk over KQ, not KT), 'a_words' (A words from 2 kk)."""
    z = tiles.sizes
    outs = []
    pairs = ((vtile, qs), (ktile, dos)) if mistake == "pairs" else ((ktile, qs), (vtile, dos))
    for (a, tile), prev, name in zip(pairs, (s, dp), ("s", "dp")):
        kept = mistake in ("no_reset", f"no_reset_{name}")
        out = np.array(prev, np.float32) if kept else np.zeros((NT, z["S_ACC"]), np.float32)
        vals = _a_values(a)
        for n in range(z["NS"]):
            for kk in range(z["KQ"] if mistake == "kq" else z["KT"]):
                w0 = 2 * kk if mistake == "a_words" else 4 * kk
                _mma_b_model(out, _from_a(vals[:, 2 * w0:2 * w0 + 8]), tile, n, kk, mistake)
        outs.append(out)
    return tuple(outs)


def ds_model(s, dp, lt, dl, scale, mistake=None, tiles=TILES):
    """(s, dp) after ds_tile: P^T over s, dS^T over dp, float64; mistakes: 'base2' (exp2 of
    scale S log2 e - lse), 'base2_raw' (exp2 of scale S - lse), 'no_scale', 'lse_scaled'
    (exp of scale (S - lse)), 'one_tile' (n8 tile 0 only), 'row' (lse, D of
    the key row), 'no_p' (dS = dP - D), 'sign', 'not_stored' (s keeps S^T), 'scaled' (dS
    times scale)."""
    s, dp = (np.asarray(x, np.float64) for x in (s, dp))
    lt, dl = (np.asarray(x, np.float64) for x in (lt, dl))
    p_out, ds_out = s.copy(), dp.copy()
    for n in range(1 if mistake == "one_tile" else tiles.sizes["NS"]):
        for i in range(4):
            j = 4 * n + i
            col = _G + 8 * (i // 2) if mistake == "row" else 8 * n + 2 * _T + (i % 2)
            with np.errstate(invalid="ignore", over="ignore"):
                if mistake == "base2":
                    p = np.exp2(s[:, j] * scale * LOG2E - lt[col])
                elif mistake == "base2_raw":
                    p = np.exp2(s[:, j] * scale - lt[col])
                elif mistake == "no_scale":
                    p = np.exp(s[:, j] - lt[col])
                elif mistake == "lse_scaled":
                    p = np.exp((s[:, j] - lt[col]) * scale)
                else:
                    p = np.exp(s[:, j] * scale - lt[col])
            diff = dl[col] - dp[:, j] if mistake == "sign" else dp[:, j] - dl[col]
            ds_out[:, j] = diff if mistake == "no_p" else p * diff
            if mistake == "scaled":
                ds_out[:, j] *= scale
            if mistake != "not_stored":
                p_out[:, j] = p
    return p_out, ds_out


#: the x entry (from 8 kp) each half of pa's words takes: right, and two wrong orders
X_WORDS = {None: ((0, 1), (2, 3), (4, 5), (6, 7)), "order": ((0, 1), (4, 5), (2, 3), (6, 7)),
           "pairs": ((1, 0), (3, 2), (5, 4), (7, 6))}


def grad_model(x, ys, yt, acc, mistake=None, tiles=TILES) -> np.ndarray:
    """(32, O_ACC): acc after grad_tile at `tiles`, acc += X^T Y with X^T = x (each lane's
    accumulators) and Y transposed in yt (Y row-major in ys); mistakes: 'transpose' (B read
    from ys), 'order', 'pairs' (pa's words or halves swapped), 'offsets', 'ci', 'overwrite',
    'one_tile' (n8 tile 0 of the result only),
    and at wider tiles 'j0' (pa from entry 4 kp), 'kp8' (load_b's k0 = 8 kp), 'ns' (n over
    NS, not NO)."""
    z = tiles.sizes
    tile = ys if mistake == "transpose" else yt
    words = X_WORDS.get(mistake, X_WORDS[None])
    out = np.zeros_like(acc, np.float32) if mistake == "overwrite" else np.array(acc, np.float32)
    x = np.asarray(x, np.float32)
    for kp in range(z["KQ"]):
        j0 = 4 * kp if mistake == "j0" else 8 * kp
        a = _from_a(np.stack([x[:, j0 + words[i // 2][i % 2]] for i in range(8)], axis=1))
        for n in range({"ns": z["NS"], "one_tile": 1}.get(mistake, z["NO"])):
            n0, k0 = (16 * kp, 8 * n) if mistake == "offsets" else (8 * n, 16 * kp)
            k0 = 8 * kp if mistake == "kp8" else k0
            ci = n if mistake == "ci" else 4 * n
            b = tile[n0:n0 + 8, k0:k0 + 16].T       # B[kk, n] = tile[n0 + n, k0 + kk]
            out[:, ci:ci + 4] = _mma(a, b, out[:, ci:ci + 4])
    return out


def store_model(dka, dva, k0, tk, d, scale, mistake=None, tiles=TILES):
    """(dk, dv) (tk, d), NaN where never written, after store_grads; mistakes: 'no_scale'
    (dK unscaled), 'scale_dv', 'scale_moved' (dK unscaled and dV scaled), 'rows' (key g for
    all four), 'tile' (no 8 n), 'swap' (dK from dva times scale, dV from dka), 'one_tile'
    (n8 tile 0 only), and at wider
    tiles 'ns' (n over NS, not NO)."""
    dk = np.full((tk, d), np.nan)
    dv = np.full((tk, d), np.nan)
    z = tiles.sizes
    for lane in range(NT):
        for n in range({"ns": z["NS"], "one_tile": 1}.get(mistake, z["NO"])):
            for i in range(4):
                key = k0 + _G[lane] + (0 if mistake == "rows" else 8 * (i // 2))
                col = (0 if mistake == "tile" else 8 * n) + 2 * _T[lane] + (i % 2)
                if key < tk and col < d:
                    ks = 1.0 if mistake in ("no_scale", "scale_moved") else scale
                    vs = scale if mistake in ("scale_dv", "scale_moved") else 1.0
                    a_k, a_v = (dva, dka) if mistake == "swap" else (dka, dva)
                    dk[key, col] = np.float32(a_k[lane, 4 * n + i] * np.float32(ks))
                    dv[key, col] = np.float32(a_v[lane, 4 * n + i] * np.float32(vs))
    return dk, dv


# -- the wider tiles: a fixed loop count, then the slips that show only there --------------

def _literal_diagnosis(fn, needs) -> tuple:
    return literal_diagnosis(fn, needs, HINT_LITERAL)


def _wide_diagnoses(fn, want, slips, needs) -> list:
    return wide_diagnoses(fn, want, slips, needs, HINT_LITERAL, _near, WIDE)


# -- checker: row_delta ----------------------------------------------------------------------

DELTA_MISTAKES = [("axis", HINT_DELTA_AXIS), ("product", HINT_DELTA_PRODUCT)]


def check_row_delta(row_delta, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your row_delta inside the pre-pass (one thread per row): a square 16 x 16 O and a
    ragged Tq = 37, d = 11 (two blocks of 32 threads)."""
    rng = np.random.default_rng(50)
    cases = []
    for name, tq, d in (("Tq = d = 16", 16, 16), ("ragged: Tq = 37, d = 11", 37, 11)):
        o = rng.standard_normal((tq, d)).astype(np.float32)
        do = rng.standard_normal((tq, d)).astype(np.float32)
        want = delta_model(o, do)
        wrongs = [(delta_model(o, do, m), h) for m, h in DELTA_MISTAKES
                  if m != "axis" or tq == d]

        def run(fn, o=o, do=do, want=want):
            kernel_guard(fn, "row_delta")
            delta = cuda.to_device(np.full(len(o), np.nan, np.float32))
            with simulator_lock():
                make_delta_kernel(_device(fn))[ceil_div(len(o), NT), NT](
                    cuda.to_device(o), cuda.to_device(do), delta, np.int32(len(o)),
                    np.int32(o.shape[1]))
            return delta.copy_to_host().astype(np.float64), want

        cases.append(Case(name, run, HINT_DELTA[0], _diagnoses(want, wrongs), rtol=_RTOL,
                          atol=_ATOL, hint2=HINT_DELTA[1], names=("D",)))
    cases += source_cases((row_delta,), shuffles=False)[1]
    return run_checks("row_delta (D = rowsum(dO o O))", row_delta, cases, verbose=verbose,
                      hint_level=hint_level)


# -- checker: transposed_scores --------------------------------------------------------------

SCORES_MISTAKES = [("no_reset", HINT_S_RESET), ("offsets", HINT_S_OFFSETS), ("ci", HINT_CI),
                   ("pairs", HINT_S_PAIRS), ("no_reset_s", HINT_S_RESET_ONE),
                   ("no_reset_dp", HINT_S_RESET_ONE)]


#: the slips that give the right result at D = BR = 16 (kk = kp = 0, NS = NO), shown at WIDE
#: (mistake, hint, the name the slip reads: None for an offset)
SCORES_WIDE_MISTAKES = [("kq", HINT_S_KQ, "KQ"), ("a_words", HINT_S_A_WORDS, None)]


def _tiles_name(tiles: Tiles) -> str:
    return "" if tiles == TILES else f", wider tiles: {tiles}"


def check_transposed_scores(transposed_scores, *, verbose: bool = True,
                            hint_level: int = 1) -> Result:
    """Your transposed_scores alone: S^T = K_j Q_i^T and dP^T = V_j dO_i^T on the fragments,
    s and dp holding the previous query tile's P^T and dS^T; at the lab's tiles, then at
    WIDE (D = 48, BR = 32)."""
    cases = []
    for tiles in (TILES, WIDE):
        z = tiles.sizes
        rng = np.random.default_rng(60 if tiles == TILES else 61)
        ktile, vtile = _tile(rng, (BC, z["D"])), _tile(rng, (BC, z["D"]))   # K_j, V_j
        big = 2 * max(z["BR"], z["D"])                # Q_i = qs[:BR, :D]; wrong offsets read
        qs, dos = _tile(rng, (big, big)), _tile(rng, (big, big))    # the rest
        s_prev = rng.random((NT, z["S_ACC"])).astype(np.float32)
        dp_prev = rng.standard_normal((NT, z["S_ACC"])).astype(np.float32)
        ins = (ktile, vtile, qs, dos, s_prev, dp_prev)
        want = scores_model(*ins, tiles=tiles)
        wrongs = [(scores_model(*ins, mistake=m, tiles=tiles), h) for m, h in SCORES_MISTAKES]
        first = [] if tiles == TILES else _wide_diagnoses(
            transposed_scores, want,
            [(scores_model(*ins, mistake=m, tiles=tiles), h, n)
             for m, h, n in SCORES_WIDE_MISTAKES],
            (("KT", "D", "KA_WORDS"), ("NS", "BR", "S_ACC")))

        def run(fn, tiles=tiles, ins=ins, want=want):
            kernel_guard(fn, "transposed_scores")
            ktile, vtile, qs, dos, s_prev, dp_prev = ins
            return _launch(_scores_kernel(at_tiles(_device(fn), tiles), tiles),
                           (a_words(ktile), a_words(vtile), qs, dos, s_prev, dp_prev),
                           (s_prev, dp_prev)), want

        hint = HINT_SCORES if tiles == TILES else HINT_WIDE_SCORES
        cases.append(Case("S^T = K Q^T and dP^T = V dO^T on one tile pair" + _tiles_name(tiles),
                          run, hint[0], first + _diagnoses(want, wrongs), rtol=_RTOL,
                          atol=_ATOL, hint2=hint[1], names=("s (S^T)", "dp (dP^T)")))
    cases += source_cases((transposed_scores,), shuffles=False)[1]
    return run_checks("transposed_scores (S^T and dP^T on the fragments)", transposed_scores,
                      cases, verbose=verbose, hint_level=hint_level)


# -- checker: ds_tile ------------------------------------------------------------------------

DS_MISTAKES = [("base2", HINT_DS_BASE2), ("base2_raw", HINT_DS_BASE2_RAW),
               ("no_scale", HINT_DS_SCALE), ("lse_scaled", HINT_DS_LSE_SCALED),
               ("row", HINT_DS_ROW), ("one_tile", HINT_DS_ONE_TILE),
               ("no_p", HINT_DS_NO_P), ("sign", HINT_DS_SIGN), ("not_stored", HINT_DS_STORE),
               ("scaled", HINT_DS_SCALED)]


def _ds_inputs(tiles=TILES):
    """(s, dp, lt, dl, scale): S^T with masked entries (-inf: keys past the end), lse of each
    query near its true size, query 13 sees no key (lse = +inf), d = 11."""
    z = tiles.sizes
    rng = np.random.default_rng(70 if tiles == TILES else 72)
    scale = np.float32(1 / math.sqrt(11))
    s = (rng.standard_normal((NT, z["S_ACC"])) * 3).astype(np.float32)     # S^T, unscaled
    s[(_G >= 5)[:, None] & (np.arange(z["S_ACC"]) % 4 >= 2)[None, :]] = -np.inf  # keys 13..
    lt = rng.uniform(0.5, 2.5, z["BR"]).astype(np.float32)
    lt[13] = np.inf
    dl = rng.standard_normal(z["BR"]).astype(np.float32)
    dp = rng.standard_normal((NT, z["S_ACC"])).astype(np.float32)
    return s, dp, lt, dl, scale


def _large_ds_inputs():
    """(s, dp, lt, dl, scale): scale S^T near 800 and every query's lse near it (every query
    sees a key), scale = 1/4 (d = 16) so that scale S and scale S - lse are exact in float32;
    e^800 overflows float32, and float64 too (the simulator's math.exp raises past e^709)."""
    rng = np.random.default_rng(71)
    scale = np.float32(0.25)
    s = (rng.standard_normal((NT, S_ACC)) * 3 + 3200).astype(np.float32)
    s[(_G >= 5)[:, None] & (np.arange(S_ACC) % 4 >= 2)[None, :]] = -np.inf  # keys 13.. masked
    lt = (rng.uniform(0.5, 2.5, TILES.BR) + 800).astype(np.float32)
    dl = rng.standard_normal(TILES.BR).astype(np.float32)
    dp = rng.standard_normal((NT, S_ACC)).astype(np.float32)
    return s, dp, lt, dl, scale


def check_ds_tile(ds_tile, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your ds_tile alone: P^T recomputed from lse and dS^T = P^T o (dP^T - D), on a tile
    with masked keys and a query with no key, then on one with scores near 800 (exp of a score
    alone overflows), then the first at WIDE (BR = 32: NS = 4)."""
    cases = []
    masked = "P^T from lse, dS^T = P^T (dP^T - D): masked keys, a query with no key"
    wide_first = [_literal_diagnosis(ds_tile, (("NS", "BR", "S_ACC"),))]
    for ins, name, large, tiles in (
            (_ds_inputs(), masked, False, TILES),
            (_large_ds_inputs(), "large scores: scale S^T and every lse near 800 (e^800 "
             "overflows)", True, TILES),
            (_ds_inputs(WIDE), masked + _tiles_name(WIDE), False, WIDE)):
        s, dp, lt, dl, scale = ins
        want = ds_model(s, dp, lt, dl, scale, tiles=tiles)
        wrongs = [(ds_model(s, dp, lt, dl, scale, m, tiles), h) for m, h in DS_MISTAKES]

        def run(fn, s=s, dp=dp, lt=lt, dl=dl, scale=scale, want=want, tiles=tiles):
            kernel_guard(fn, "ds_tile")
            return _launch(_ds_kernel(at_tiles(_device(fn), tiles), tiles),
                           (s, dp, lt, dl, np.array([scale])), (s, dp)), want

        # at 800 a float32 exponent carries 6e-5 of rounding: a right ds_tile that folds
        # log2 e in before the difference is that far off, so this case is looser
        tol = 1e-3 if large else _RTOL
        hint = HINT_DS if tiles == TILES else HINT_WIDE_DS
        cases.append(Case(name, run, hint[0],
                          (wide_first if tiles != TILES else []) + _diagnoses(want, wrongs)
                          + ([(_overflowed, *HINT_DS_OVERFLOW)] if large else []),
                          rtol=tol, atol=tol, hint2=hint[1], names=("s (P^T)", "dp (dS^T)"),
                          error_diagnoses=[(_is_overflow, *HINT_DS_OVERFLOW)] if large else []))
    cases += source_cases((ds_tile,), shuffles=False)[1]
    return run_checks("ds_tile (P^T and dS^T on the accumulators)", ds_tile, cases,
                      verbose=verbose, hint_level=hint_level)


# -- checker: grad_tile ----------------------------------------------------------------------

GRAD_MISTAKES = [("transpose", HINT_GRAD_T), ("order", HINT_GRAD_ORDER),
                 ("pairs", HINT_GRAD_ORDER), ("offsets", HINT_GRAD_OFFSETS), ("ci", HINT_CI),
                 ("overwrite", HINT_GRAD_ADD), ("one_tile", HINT_GRAD_ONE_TILE)]


GRAD_WIDE_MISTAKES = [("j0", HINT_GRAD_J0, None), ("kp8", HINT_GRAD_KP, None),
                      ("ns", HINT_GRAD_NO, "NS")]


def check_grad_tile(grad_tile, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your grad_tile alone: acc += X^T Y, X^T in the accumulators (as P^T, dS^T are), Y in
    ys (row-major) and yt (transposed), acc holding the earlier query tiles' sum; at the
    lab's tiles, then at WIDE (D = 48, BR = 32)."""
    cases = []
    for tiles in (TILES, WIDE):
        z = tiles.sizes
        rng = np.random.default_rng(80 if tiles == TILES else 81)
        x = rng.standard_normal((NT, z["S_ACC"])).astype(np.float32)   # X^T (16 keys x BR)
        big = 2 * max(z["BR"], z["D"])
        ys = _tile(rng, (big, big))                                     # Y = ys[:BR, :D]
        yt = np.ascontiguousarray(ys.T)                                 # yt[dim, query]
        acc = rng.standard_normal((NT, z["O_ACC"])).astype(np.float32)
        want = grad_model(x, ys, yt, acc, tiles=tiles)
        wrongs = [(grad_model(x, ys, yt, acc, m, tiles), h) for m, h in GRAD_MISTAKES]
        first = [] if tiles == TILES else _wide_diagnoses(
            grad_tile, want,
            [(grad_model(x, ys, yt, acc, m, tiles), h, n) for m, h, n in GRAD_WIDE_MISTAKES],
            (("KQ", "BR", "S_ACC"), ("NO", "D", "O_ACC")))

        def run(fn, ins=(x, ys, yt, acc), want=want, tiles=tiles):
            kernel_guard(fn, "grad_tile")
            return _launch(_grad_kernel(at_tiles(_device(fn), tiles), tiles), ins,
                           (ins[-1],))[0], want

        hint = HINT_GRAD if tiles == TILES else HINT_WIDE_GRAD
        cases.append(Case("acc += X^T Y, X^T from the accumulators (as dV += P^T dO)"
                          + _tiles_name(tiles), run, hint[0], first + _diagnoses(want, wrongs),
                          rtol=_RTOL, atol=_ATOL, hint2=hint[1], names=("acc",)))
    cases += source_cases((grad_tile,), shuffles=False)[1]
    return run_checks("grad_tile (X^T as the A operand)", grad_tile, cases, verbose=verbose,
                      hint_level=hint_level)


# -- checker: store_grads --------------------------------------------------------------------

STORE_MISTAKES = [("no_scale", HINT_STORE_SCALE), ("scale_dv", HINT_STORE_SCALE_DV),
                  ("scale_moved", HINT_STORE_SCALE_MOVED), ("rows", HINT_STORE_ROWS),
                  ("tile", HINT_STORE_TILE), ("swap", HINT_STORE_SWAP),
                  ("one_tile", HINT_STORE_ONE_TILE)]


def check_store_grads(store_grads, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your store_grads: a whole key block (k0 = 0, Tk = 40, d = 16) and the ragged last one
    (k0 = 32, Tk = 40, d = 11), scale = 1 / sqrt(d); then at WIDE (D = 48: NO = 6) a middle
    block, k0 = 16, Tk = 40, d = 40."""
    rng = np.random.default_rng(90)
    dka = rng.standard_normal((NT, O_ACC)).astype(np.float32)
    dva = rng.standard_normal((NT, O_ACC)).astype(np.float32)
    wide = rng.standard_normal((2, NT, WIDE.sizes["O_ACC"])).astype(np.float32)
    cases = []
    for k0, tk, d, tiles in ((0, 40, 16, TILES), (32, 40, 11, TILES), (16, 40, 40, WIDE)):
        dk_acc, dv_acc = (dka, dva) if tiles == TILES else wide
        scale = np.float32(1 / math.sqrt(d))
        want = store_model(dk_acc, dv_acc, k0, tk, d, scale, tiles=tiles)
        wrongs = [(store_model(dk_acc, dv_acc, k0, tk, d, scale, m, tiles), h)
                  for m, h in STORE_MISTAKES]
        first = [] if tiles == TILES else _wide_diagnoses(
            store_grads, want,
            [(store_model(dk_acc, dv_acc, k0, tk, d, scale, "ns", tiles), HINT_STORE_NO, "NS")],
            (("NO", "D", "O_ACC"),))

        def run(fn, k0=k0, tk=tk, d=d, scale=scale, want=want, tiles=tiles,
                accs=(dk_acc, dv_acc)):
            kernel_guard(fn, "store_grads")
            args = np.array([k0, tk, d], np.int32)
            return _launch(_store_kernel(at_tiles(_device(fn), tiles), tiles),
                           (*accs, args, np.array([scale])), want), want

        hint = HINT_STORE if tiles == TILES else HINT_WIDE_STORE
        cases.append(Case(f"k0 = {k0}, Tk = {tk}, d = {d}" + _tiles_name(tiles), run, hint[0],
                          first + _diagnoses(want, wrongs), rtol=_RTOL, atol=_ATOL,
                          hint2=hint[1], names=("dk", "dv")))
    cases += source_cases((store_grads,), shuffles=False)[1]
    return run_checks("store_grads (dK, dV by the C map)", store_grads, cases, verbose=verbose,
                      hint_level=hint_level)


# -- checker: the whole kernel ----------------------------------------------------------------

#: (check, the part it takes, the hint when it fails and the kernel does too), in order
PART_CHECKS = [(check_row_delta, ("row_delta",), HINT_KERNEL_DELTA),
               (check_transposed_scores, ("transposed_scores",), HINT_KERNEL_SCORES),
               (check_ds_tile, ("ds_tile",), HINT_KERNEL_DS),
               (check_grad_tile, ("grad_tile",), HINT_KERNEL_GRAD),
               (check_store_grads, ("store_grads",), HINT_KERNEL_STORE)]


def check_kernel(parts, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your parts inside the pre-pass and the key-block kernel against the float64 backward
    (`reference.attention_backward`, on the same fp16 values; tolerance 3e-3: P and dS are
    rounded to fp16 before their products). A failure is named by the first part check that
    fails, else it says that all of them pass and what remains."""
    fns = _parts(parts)
    part_diagnoses = _part_diagnoses(PART_CHECKS, fns, HINT_KERNEL)
    cases = []
    for name, seed, tq, tk, d, causal, tiles in KERNEL_CASES:
        q, k, v, o, lse, do = kernel_inputs(seed, tq, tk, d, causal)
        _, dk_ref, dv_ref = reference.attention_backward(q, k, v, do, causal=causal)
        diagnoses = list(part_diagnoses)

        def run(f, ins=(q, k, v, o, lse, do), causal=causal, want=(dk_ref, dv_ref),
                tiles=tiles):
            dk, dv = lab_backward(f, *ins, causal=causal, tiles=tiles)
            return (dk.astype(np.float64), dv.astype(np.float64)), want

        # the case's own hint is shown only when the kernel raises (a diagnosis always fires)
        cases.append(Case(name, run, HINT_KERNEL_ERROR[0], diagnoses, rtol=_KERNEL_TOL,
                          atol=_KERNEL_TOL, hint2=HINT_KERNEL_ERROR[1], time_limit_s=120,
                          names=("dk", "dv")))
    return run_checks("the key-block backward kernel with your parts", fns, cases,
                      verbose=verbose, hint_level=hint_level)


ALL_HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_")]
