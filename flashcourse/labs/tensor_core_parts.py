"""Checkers for lab 10's tile loop, part by part, and for the whole kernel.

scores_tile, softmax_tile and pv_tile each run alone in a one-warp kernel on known
fragments: Q's A fragment packed by the PTX map, K and V^T in 32 x 32 tiles whose top-left
16 x 16 is the lab's tile (a wrong fragment offset then reads known values instead of
crashing), the state m, lp, acc of an earlier key tile. Each is compared with a numpy model
of the same fragment arithmetic, which works lane by lane as the kernel does, on (32, n)
arrays [lane, accumulator], through the fragment maps of `flashcourse.cuda.ptx.mma`. Every
model takes a `mistake` that replays one typical wrong implementation; a result that
matches one gets its hint. The part uses the learner's own helpers, found by name where it
is defined (scores_tile and pv_tile call load_b, softmax_tile quad_max): check_fragments and
check_quad come first, and a part check that fails asks first whether its helper does
(`load_b_fails`, `quad_max_fails`): a wrong helper can give exactly the output of one of
the part's own mistakes.

At the lab's tiles (D = BC = 16) KT = KP = 1 and NS = NO = 2, so a loop over the wrong size of
a pair, or an offset of k16 step 1, gives the right result there: each of the three part checks
also runs its part at `tensor_core_lab.WIDE` (D = 48, BC = 32), rebuilt with those sizes
(`tile_sizes.at_tiles`, in the one-warp kernels of `tensor_core_wide`), and names the slips that
show only there (`tensor_core_wide`'s hints).

`kernel_model` composes the three models with the skeleton's mask and epilogue into the
whole lab kernel, so `check_kernel` names a part's mistake from the kernel's output too,
once check_fragments and check_quad pass. When no mistake matches, it runs the part checks
and says which one fails, or that all of them pass and what remains: where the parts meet
the mask, the state kept between key tiles, and the epilogue.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda

from ..cuda.ptx import mma as M
from ..cuda.common._launch import simulator_lock
from ._harness import Case, Result, run_checks
from .cuda_lab_kernel import _device
from .kernel_source import kernel_guard, py_func
from . import tensor_core_wide as W
from .tensor_core_lab import (BC, BR, D, KERNEL_CASES, NO, NT, O_ACC, S_ACC,
                              TILES, WIDE, _close, _inputs, _parts, check_fragments,
                              check_quad, lab_forward, load_b_fails, mask_model,
                              quad_max_fails, replay, source_cases)
from .tensor_core_wide import _pv_kernel, _scores_kernel, _softmax_kernel
from .tile_sizes import at_tiles, wide_diagnoses

_RTOL, _ATOL = 1e-5, 1e-5        # one part on exact fragments: fp32 sums of fp16 products
_PART_CHECKS = "check_fragments, check_quad, check_scores_tile, check_softmax_tile, check_pv_tile"

# -- hints ----------------------------------------------------------------------------------

HINT_SCORES = ("Your S accumulators are wrong: all 4 NS of them are reset to F0 first, then "
               "n8 tile n of S is the keys 8 n .. 8 n + 7, so its B fragment is load_b on ks "
               "with n0 = 8 n (K's rows) and k0 = 16 kk (the head dimension), and its mma adds "
               "into s[4 n .. 4 n + 3]. scores_tile calls your load_b: check_fragments must "
               "pass first.",
               "For each n8 tile n and k16 step kk: B from K's rows 8 n .., dimensions 16 kk "
               "..; one mma of qa (words from 4 kk) and B into the accumulators from 4 n.")
HINT_RESET = ("The scores are not reset: s still holds the previous tile's P when the mma "
              "adds Q K_j^T to it (an mma computes C + A B).",
              "Set the 4 NS accumulators of s to F0 before the first mma of each tile.")
HINT_S_OFFSETS = ("Your B fragment of K^T has its offsets swapped: load_b(tile, n0, k0, ...) "
                  "reads tile[n0 + n, k0 + kk], so n0 is the KEY row (8 n for n8 tile n) and "
                  "k0 the head dimension (16 kk).", "n0 = 8 n, k0 = 16 kk.")
HINT_KT_SHORT = ("Your S accumulators hold zeros: they were reset, but no mma added Q K_j^T to "
                 "them. The loop over the head dimension runs kk over range(KT), KT = D / 16 "
                 "steps (one here), with a load_b and an mma per n8 tile and step; a range one "
                 "short (KT - 1) runs none.",
                 "Loop kk over range(KT): load_b(..., 8 n, 16 kk, ...) and one mma each.")
HINT_SOFTMAX_EXP2 = ("Your P is taken with exp2, but the scores and the running max are in "
                     "natural-log units, as the epilogue's lse = m + ln(l) is. Use math.exp, "
                     "for P and for the rescale factor alike (exp2 would need every exponent "
                     "and lse in base 2, times log2(e)).",
                     "p = math.exp(s - m_use), and alpha by math.exp too.")
HINT_CI = ("Your mma writes to the wrong accumulators: each n8 tile owns four consecutive "
           "ones, tile n the entries 4 n .. 4 n + 3, and the mma's ci is where they start (an "
           "index of n makes the tiles overlap).", "ci = 4 n for n8 tile n.")
HINT_SOFTMAX = ("Your online softmax is wrong: for each of the lane's rows hf (row g + 8 hf: "
                "accumulators 4 n + 2 hf and 4 n + 2 hf + 1 of every n8 tile n), the row's "
                "max over its quad, the new running max m_new (m_use: the stand-in 0 while "
                "it is -inf), the rescale factor exp(m_old - m_use), P = exp(S - m_use) "
                "written over S, the lane's partial sum lp and the row's acc entries "
                "rescaled. softmax_tile calls your quad_max: check_quad "
                "must pass first.",
                "Lab 06's online update, on the fragments: the lane's max, the quad's max, "
                "m, alpha, P over S and its sum, then lp and acc times alpha.")
HINT_RESCALE = ("Missing rescale, the heart of the online softmax: when a row's max grows, "
                "its partial sum lp and its acc accumulators were measured against the old "
                "max: multiply them by exp(m_old - m_new). If your code multiplies by alpha, "
                "alpha is 1: exp(m[hf] - m_use) read after m[hf] was set to the new max is "
                "exp(0). Take alpha while m[hf] still holds the old max.",
                "alpha = exp(m[hf] - m_use) before m[hf] = m_new; lp[hf] = lp[hf] alpha + "
                "this tile's sum; the acc entries 4 n + 2 hf, 4 n + 2 hf + 1 of every n8 "
                "tile n times alpha.")
HINT_RESCALE_ACC = ("Missing rescale of acc, the heart of the online softmax: when a row's max "
                    "grows, its acc entries still hold sums weighted by exp(s - m_old). "
                    "Multiply them by exp(m_old - m_new) before P V adds this tile's (your lp "
                    "is rescaled; acc is not).",
                    "The entries 4 n + 2 hf and 4 n + 2 hf + 1 of every n8 tile n of O, times "
                    "alpha.")
HINT_RESCALE_LP = ("Missing rescale of lp, the heart of the online softmax: when a row's max "
                   "grows, the partial sum lp was measured against the old max. Multiply it "
                   "by exp(m_old - m_new) before adding this tile's sum (your acc is "
                   "rescaled; lp is not).", "lp[hf] times alpha, plus this tile's sum.")
HINT_NO_QUAD_MAX = ("Your row max comes from one lane only: a row's 16 scores are spread over "
                    "the 4 lanes of its quad (2 columns per n8 tile each), so the lanes "
                    "disagree on m and on P. Take the lane's own max, then the quad's max, "
                    "before the new running max.",
                    "The lane's max over its 4 scores of the row, then through quad_max.")
HINT_TILE_MAX = ("Wrong max: the new row max must combine the running max m[hf] with this "
                 "tile's max.",
                 "m_new = the larger of m[hf] and the quad's max.")
HINT_ACC_INDEX = ("Wrong accumulator index: the lane's row hf (row g + 8 hf) is accumulators 2 "
                  "and 3 of each n8 tile when hf = 1 (the C map: i // 2 picks the row), so "
                  "its two entries are 4 n + 2 hf and 4 n + 2 hf + 1, in s and in acc alike.",
                  "4 n + 2 hf + c for c = 0, 1; 4 n + hf + c mixes rows g and g + 8.")
HINT_STANDIN = ("NaN from a row with no visible key yet: while a row's max is still -inf, "
                "exp(m_old - m_new) and exp(s - m_new) of a masked score are exp(-inf + inf) "
                "= NaN. Use a finite stand-in (0) for the max while it is -inf, as in lab "
                "06, in both exponentials: alpha and P.",
                "m_use = the new max, or F0 while it is NEG_INF; alpha = exp(m[hf] - m_use) "
                "and P = exp(s - m_use), never minus m_new itself.")
HINT_P_OVERFLOW = ("Your exponentials overflow: in the large-score case every row sees keys (no "
                   "stand-in is involved) and the scores are near 800, so e to a score or to "
                   "the max alone is past float32's range (e^88.7; the simulator computes in "
                   "float64 and stops at e^709 with 'math range error'), and inf / inf is NaN. "
                   "Take the difference first, then one exponential of it: it is <= 0, so it "
                   "never overflows (notebook 02).",
                   "P is exp of (score minus m_use) and alpha is exp of (m[hf] minus m_use): one "
                   "exponential of a difference each, never a quotient or product of two "
                   "exponentials.")
HINT_P_STORE = ("P must replace S in s: pv_tile reads P from s (the accumulators of S become "
                "the A operand of P V). Your s still holds the scores.",
                "Write each exponential back to the entry of s it came from.")
HINT_LP_PARTIAL = ("lp is the lane's own partial sum: the epilogue adds the quad's four "
                   "partial sums (quad_sum) once, at the end. Summing over the quad in "
                   "softmax_tile as well counts every row's sum 4 times.",
                   "lp[hf] adds this lane's own exponentials only.")
HINT_PV = ("Your O += P V is wrong: for each k16 step kp, pa packs P's accumulators of S "
           "tiles 2 kp and 2 kp + 1 as the A operand (mma.p_as_a_operand); then for each n8 "
           "tile n of O, the B fragment of V from vt and one mma into acc from 4 n. pv_tile "
           "calls your load_b: check_fragments must pass first.",
           "pa word w packs s[8 kp + 2 w] and the next one; B by load_b on vt.")
HINT_P_ORDER = ("P is fed in the wrong fragment order: the A operand of P V takes S tile 2 kp "
                "(columns 0-7) as its words 0 (row g) and 1 (row g + 8) and S tile 2 kp + 1 "
                "(columns 8-15) as words 2 and 3 (mma.p_as_a_operand).",
                "pa[0] from s[j0], s[j0 + 1]; pa[1] from s[j0 + 2], s[j0 + 3]; pa[2] from "
                "s[j0 + 4], s[j0 + 5]; pa[3] from s[j0 + 6], s[j0 + 7], with j0 = 8 kp.")
HINT_PV_B = ("V is read with K's layout: in S = Q K^T the B operand is K^T, read from "
             "ks[key, dim]; in P V it is V itself, B[kk, n] = V[key kk, dim n], which the "
             "skeleton keeps transposed in vt[dim, key]. Read it through vt as load_b reads "
             "any tile, vt[n0 + n, k0 + kk].",
             "load_b(vt, 8 n, 16 kp, lane, b) for each n8 tile n of O.")
HINT_PV_OFFSETS = ("Your B fragment of V has its offsets swapped: load_b(vt, n0, k0, ...) reads "
                   "vt[n0 + n, k0 + kk], and vt is V transposed, so n0 is the head dimension "
                   "(8 n for n8 tile n of O) and k0 the key (16 kp).", "n0 = 8 n, k0 = 16 kp.")
HINT_PV_ADD = ("pv_tile must ADD P V to acc (O += P V): acc carries the earlier key tiles' "
               "sum, already rescaled by softmax_tile. Do not reset it.",
               "The mma adds to acc: nothing written to acc before it.")
HINT_KERNEL = (f"Every part check passes ({_PART_CHECKS}), yet the kernel disagrees with the "
               "numpy replay. What remains is where your parts meet the skeleton: the mask "
               "(scores of -inf reach softmax_tile, whole rows of them in a causal tile), the "
               "state carried from one key tile to the next (m, lp and acc live across "
               "calls; s is rewritten), and the epilogue (o = acc over the quad's sum of lp, "
               "lse = m + log of that sum).",
               "Run Tq = Tk = 16 (one S tile, one P V step), then Tk = 32 (two key tiles), "
               "causal and not, and compare lab_forward with tensor_core_lab.replay.")
HINT_KERNEL_ERROR = ("Your kernel stopped with an error (the line above). On the simulator the "
                     "usual one is an index past the end of an array: a fragment offset (n0, "
                     "k0) or an accumulator index (ci) out of range. The part checks "
                     f"({_PART_CHECKS}) run each part alone, on tiles large enough that a "
                     "wrong offset reads known values, and name the mistake.",
                     "Run the part checks in order; the first that fails names the part.")


def _part_failing(check: str, what: str) -> tuple[str, str]:
    return (f"The kernel disagrees with the numpy replay, and {check} fails on your {what}: "
            f"run it for its diagnosis and make it pass first (the part checks, in order: "
            f"{_PART_CHECKS}).",
            "Each part check runs one part alone in a one-warp kernel, so its hint names the "
            "mistake.")


HINT_KERNEL_FRAGMENTS = _part_failing("check_fragments", "load_a or load_b")
HINT_KERNEL_QUAD = _part_failing("check_quad", "quad_max or quad_sum")
HINT_KERNEL_SCORES = _part_failing("check_scores_tile", "scores_tile")
HINT_KERNEL_SOFTMAX = _part_failing("check_softmax_tile", "softmax_tile")
HINT_KERNEL_PV = _part_failing("check_pv_tile", "pv_tile")


def _helper_failing(part: str, helper: str, check: str, looks_like: str) -> tuple[str, str]:
    return (f"{part} calls your {helper}, and your {helper} fails {check}, which names its "
            f"mistake. Make {check} pass first: a wrong {helper} can make a right {part} look "
            f"like one of its own typical mistakes ({looks_like}).",
            f"Run {check}, then this check again.")


HINT_SCORES_LOAD_B = _helper_failing(
    "scores_tile", "load_b", "check_fragments",
    "its B fragment of K^T is read through load_b")
HINT_PV_LOAD_B = _helper_failing(
    "pv_tile", "load_b", "check_fragments",
    "a load_b that swaps the two halves of its words gives the P V of a pv_tile that swaps "
    "P's, and one that reads the tile transposed, that of a pv_tile that reads V like K")
HINT_SOFTMAX_QUAD = _helper_failing(
    "softmax_tile", "quad_max", "check_quad",
    "a quad_max that leaves x as it is gives the P of a softmax_tile that never takes the "
    "quad's max")


# -- numpy models of the fragment arithmetic, lane by lane -----------------------------------

@lru_cache(maxsize=None)
def _table(name: str) -> np.ndarray:
    return M.index_table(name)                               # (32, n, 2): [lane, i] -> (r, c)


def _to_c(tile):
    """(16, 8) -> (32, 4): each lane's accumulators of an m16n8 tile (the C map)."""
    idx = _table("c_m16n8")
    return tile[idx[..., 0], idx[..., 1]]


def _from_c(frags):
    idx = _table("c_m16n8")
    tile = np.zeros((16, 8))
    tile[idx[..., 0], idx[..., 1]] = frags
    return tile


def _from_a(values):
    """(32, 8) values a_i of each lane -> the (16, 16) A tile they form (the A map)."""
    idx = _table("a_m16n8k16")
    tile = np.zeros((16, 16))
    tile[idx[..., 0], idx[..., 1]] = values
    return tile


def _mma(a, b, c):
    """One m16n8k16 mma of the warp: A (16, 16) and B (16, 8) rounded to fp16, C and the
    result as each lane's 4 accumulators (32, 4), float32."""
    return _to_c(M.matmul_model(a, b, "fp16") + _from_c(c)).astype(np.float32)


def _quad_np(x, op):
    lanes = np.arange(NT)
    for off in (1, 2):
        x = op(x, x[lanes ^ off])
    return x


def q_fragment(qtile) -> np.ndarray:
    """(32, 4 KT) uint32: Q's A fragments (k16 step kk in words 4 kk ..), by the PTX map."""
    idx = _table("a_m16n8k16")
    kt = np.shape(qtile)[1] // 16
    words = np.zeros((NT, 4 * kt), np.uint32)
    for kk in range(kt):
        vals = np.asarray(qtile, np.float32)[:, 16 * kk:16 * kk + 16][idx[..., 0], idx[..., 1]]
        words[:, 4 * kk:4 * kk + 4] = M.pack_pair_model(vals[:, 0::2], vals[:, 1::2])
    return words


def _mma_b_model(out, a, tile, n, k16, mistake=None) -> None:
    """One mma of a part, in place: out's n8 tile n (accumulators 4 n .. 4 n + 3) plus A
    (16, 16) times the B fragment that load_b reads from `tile` for n8 tile n and k16 step
    k16 (n0 = 8 n, k0 = 16 k16: B[kk, n] = tile[n0 + n, k0 + kk]); mistakes: 'offsets' (n0
    and k0 swapped), 'ci' (tile n at entry n), 'k0_8' (k0 = 8 k16)."""
    n0, k0 = (16 * k16, 8 * n) if mistake == "offsets" else (8 * n, 16 * k16)
    k0 = 8 * k16 if mistake == "k0_8" else k0
    b = tile[n0:n0 + 8, k0:k0 + 16].T                         # B[kk, n] = tile[n0 + n, k0 + kk]
    ci = n if mistake == "ci" else 4 * n
    out[:, ci:ci + 4] = _mma(a, b, out[:, ci:ci + 4])


def _acc_a_model(x, tile, acc, k_steps, words, mistake=None) -> np.ndarray:
    """(32, n): acc after acc += X Y, X the A operand packed from each lane's accumulators x
    (k16 step kp: n8 tiles 2 kp and 2 kp + 1, each word the pair of entries `words` names,
    mma.p_as_a_operand), Y by load_b from `tile` (`_mma_b_model`): pv_tile's O += P V and lab
    10b's grad_tile. mistakes: those of `_mma_b_model`, 'overwrite' (acc reset first), and at
    wider tiles 'j0' (x from entry 4 kp), 'ns' (n over x's n8 tiles, not acc's)."""
    out = np.array(acc, np.float32)
    if mistake == "overwrite":
        out[:] = 0.0
    x = np.asarray(x, np.float32)
    for kp in range(k_steps):
        j0 = 4 * kp if mistake == "j0" else 8 * kp
        a = _from_a(np.stack([x[:, j0 + words[i // 2][i % 2]] for i in range(8)], axis=1))
        for n in range((x if mistake == "ns" else out).shape[1] // 4):
            _mma_b_model(out, a, tile, n, kp, mistake)
    return out


def scores_model(qtile, ks, s, mistake=None) -> np.ndarray:
    """(32, 4 NS): scores_tile's accumulators of S = Q K^T for Q (16, 16 KT), K = ks[:BC]
    (ks may be larger: a wrong offset reads it), s (32, 4 NS) the accumulators before;
    mistakes: 'no_reset' (S added to s), 'offsets' (n0 and k0 swapped), 'ci' (tile n at entry
    n), 'kt_short' (the last k16 step of the head dimension missing), and at wider tiles 'kp'
    (kk over KP = NS / 2), 'qa_words' (A from word 2 kk), 'k0_8' (load_b's k0 = 8 kk)."""
    ns, kt = np.shape(s)[1] // 4, np.shape(qtile)[1] // 16
    out = np.array(s, np.float32) if mistake == "no_reset" else np.zeros_like(s, np.float32)
    idx = _table("a_m16n8k16")
    for n in range(ns):
        for kk in range({"kt_short": kt - 1, "kp": ns // 2}.get(mistake, kt)):
            c0 = 8 * kk if mistake == "qa_words" else 16 * kk      # words 2 kk: columns 8 kk
            a = _from_a(np.asarray(qtile, np.float32)[:, c0:c0 + 16][idx[..., 0], idx[..., 1]])
            _mma_b_model(out, a, ks, n, kk, mistake)
    return out


def softmax_model(s, acc, m, lp, mistake=None):
    """(s, acc, m, lp) after softmax_tile, all float32 (32, n); mistakes: 'no_rescale' (of
    lp and acc), 'no_rescale_acc', 'no_rescale_lp', 'no_quad_max' (the lane's own max),
    'tile_max' (m_new = the tile's max), 'index' (4 n + hf + c for 4 n + 2 hf + c),
    'index_s' / 'index_acc' (only there), 'no_standin' (in both exponentials;
    'no_standin_alpha', 'no_standin_p': in one of them), 'p_not_stored', 'lp_quad' (lp
    summed over the quad), 'exp2' (P by exp2, alpha by exp), and at wider tiles 'acc_ns' (acc
    rescaled over NS n8 tiles, not NO)."""
    s, acc, m, lp = (np.array(x, np.float32) for x in (s, acc, m, lp))
    ns, no = s.shape[1] // 4, acc.shape[1] // 4

    def at(where, n, hf, c):
        wrong = mistake in ("index", f"index_{where}")
        return 4 * n + (hf if wrong else 2 * hf) + c

    for hf in range(2):
        x = np.full(NT, -np.inf)
        for n in range(ns):
            for c in range(2):
                x = np.maximum(x, s[:, at("s", n, hf, c)])
        if mistake != "no_quad_max":
            x = _quad_np(x, np.maximum)
        m_old = m[:, hf].astype(np.float64)
        m_new = x if mistake == "tile_max" else np.maximum(m_old, x)
        m_use = np.where(np.isneginf(m_new), 0.0, m_new)
        m_alpha = m_new if mistake in ("no_standin", "no_standin_alpha") else m_use
        m_p = m_new if mistake in ("no_standin", "no_standin_p") else m_use
        # -inf - -inf without a stand-in; e^801 when m_new is the tile's max (a mistake model)
        with np.errstate(invalid="ignore", over="ignore"):
            alpha = np.exp(m_old - m_alpha)
        m[:, hf] = m_new
        ps = np.zeros(NT)
        for n in range(ns):
            for c in range(2):
                j = at("s", n, hf, c)
                with np.errstate(invalid="ignore", over="ignore"):
                    p = (np.exp2 if mistake == "exp2" else np.exp)(
                        s[:, j].astype(np.float64) - m_p)
                if mistake != "p_not_stored":
                    s[:, j] = p
                ps = ps + p
        if mistake == "lp_quad":
            ps = _quad_np(ps, np.add)
        lp[:, hf] = lp[:, hf] * (1.0 if mistake in ("no_rescale", "no_rescale_lp") else alpha) + ps
        if mistake not in ("no_rescale", "no_rescale_acc"):
            for n in range(ns if mistake == "acc_ns" else no):
                for c in range(2):
                    j = at("acc", n, hf, c)
                    acc[:, j] = acc[:, j] * alpha
    return s, acc, m, lp


#: the s entry (from 8 kp) each half of pa's words takes: right, and two wrong orders
P_WORDS = {None: ((0, 1), (2, 3), (4, 5), (6, 7)), "p_order": ((0, 1), (4, 5), (2, 3), (6, 7)),
           "p_pairs": ((1, 0), (3, 2), (5, 4), (7, 6))}


def pv_model(s, vt, acc, mistake=None) -> np.ndarray:
    """(32, 4 NO): acc after pv_tile, O += P V with P = s (each lane's accumulators of S) and
    V^T = vt[:D, :BC] (vt may be larger); mistakes: 'p_order', 'p_pairs' (pa's words or
    halves swapped), 'v_as_k' (B[kk, n] = vt[kk, n]: V read like K), 'offsets' (n0 and k0
    swapped), 'ci' (tile n at entry n), 'overwrite' (acc reset first), and at wider tiles
    'j0', 'k0_8', 'ns' (`_acc_a_model`, `_mma_b_model`)."""
    tile = vt.T if mistake == "v_as_k" else vt               # V read like K: B = vt[kk, n]
    return _acc_a_model(s, tile, acc, np.shape(s)[1] // 8, P_WORDS.get(mistake, P_WORDS[None]),
                        mistake)


def kernel_model(q, k, v, *, causal=False, mistakes=None):
    """(o, lse) of the lab kernel replayed lane by lane with the three models, the skeleton's
    mask (`mask_model`) and its epilogue; `mistakes` = {part name: mistake} plays one or more
    parts wrong (offsets excepted: they read past the kernel's 16 x 16 tiles)."""
    mis = mistakes or {}
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    tq, d = q.shape
    tk = k.shape[0]
    scale = np.float32(1 / math.sqrt(d))
    o = np.zeros((tq, d), np.float32)
    lse = np.full(tq, -np.inf, np.float32)
    g, t = np.arange(NT) // 4, np.arange(NT) % 4
    for q0 in range(0, tq, BR):
        rows = min(BR, tq - q0)
        qs = np.zeros((BR, D), np.float32)
        qs[:rows, :d] = q[q0:q0 + rows] * scale
        s = np.zeros((NT, S_ACC), np.float32)
        acc = np.zeros((NT, O_ACC), np.float32)
        m = np.full((NT, 2), -np.inf, np.float32)
        lp = np.zeros((NT, 2), np.float32)
        for k0 in range(0, tk, BC):
            keys = min(BC, tk - k0)
            ks = np.zeros((BC, D), np.float32)
            ks[:keys, :d] = k[k0:k0 + keys]
            vt = np.zeros((D, BC), np.float32)
            vt[:d, :keys] = v[k0:k0 + keys].T
            s = scores_model(qs, ks, s, mis.get("scores_tile"))
            s[mask_model(k0, q0, tk, int(causal), tk - tq)] = -np.inf
            s, acc, m, lp = softmax_model(s, acc, m, lp, mis.get("softmax_tile"))
            acc = pv_model(s, vt, acc, mis.get("pv_tile"))
        for hf in range(2):
            lt = _quad_np(lp[:, hf].astype(np.float64), np.add)
            for lane in range(NT):
                row = q0 + g[lane] + 8 * hf
                if row >= tq:
                    continue
                for n in range(NO):
                    for c in range(2):
                        col = 8 * n + 2 * t[lane] + c
                        if col < d:
                            o[row, col] = acc[lane, 4 * n + 2 * hf + c] / lt[lane] \
                                if lt[lane] > 0 else 0.0
                if t[lane] == 0:
                    lse[row] = m[lane, hf] + math.log(lt[lane]) if lt[lane] > 0 else -np.inf
    return o, lse


def _launch(kernel, ins, outs, threads=NT):
    """Run a one-block kernel (one warp unless `threads` says otherwise) on copies of `ins`
    (numpy) and outputs shaped like `outs`; returns the outputs (NaN-poisoned before, so an
    entry never written shows) as float64, so that the harness does not read float32 as a
    precision slip."""
    dev_in = [cuda.to_device(np.ascontiguousarray(x)) for x in ins]
    dev_out = [cuda.to_device(np.full(np.shape(x), np.nan, np.float32)) for x in outs]
    with simulator_lock():
        kernel[1, threads](*dev_in, *dev_out)
    return tuple(x.copy_to_host().astype(np.float64) for x in dev_out)


def _near(a, b) -> bool:
    return _close(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,),
                  rtol=_RTOL, atol=_ATOL)


def _diagnoses(want, wrongs):
    """A diagnosis for each (wrong result, hint) that differs from `want`."""
    return [((lambda y, e, w=wrong: _near(y, w)), *hint) for wrong, hint in wrongs
            if not _near(wrong, want)]


def _tile(rng, shape):
    return M.round_fp16(rng.standard_normal(shape)).astype(np.float32)


def _helper_diagnosis(fn, helper: str, fails, hint) -> tuple:
    """The first diagnosis of a part check: the helper the part calls (found by name where
    the part is defined, as Numba finds it) fails its own check. A part's typical mistakes
    are replayed with a right helper, and a wrong one can give exactly the output of one of
    them, so it is asked first (once, and only when the case fails). A part that does not
    call the helper by that name (its loads or shuffles written out inline) is not blamed
    on it."""
    cache = {}

    def fired(_yours, _expected):
        if "fails" not in cache:
            inner = py_func(fn)
            calls = helper in getattr(getattr(inner, "__code__", None), "co_names", ())
            found = getattr(inner, "__globals__", {}).get(helper) if calls else None
            cache["fails"] = found is not None and fails(found)
        return cache["fails"]
    return (fired, *hint)


def _wide_case(part, fn, kernel_of, ins, outs, model, mistakes, slips, needs, helper, what,
               hint, names) -> Case:
    """The case of a part check at WIDE: `fn` rebuilt at those sizes (`at_tiles`) in the
    part's one-warp kernel (`kernel_of(part, tiles)`) on `ins`, against `model()`; the
    slips that show only there first (`slips`: (mistake, hint, the name it reads)), then a
    fixed loop count (`needs`), the helper and the part's own mistakes (`mistakes`)."""
    want = model()
    first = wide_diagnoses(fn, want, [(model(m), h, n) for m, h, n in slips], needs,
                           W.HINT_LITERAL, _near, WIDE)

    def run(f):
        kernel_guard(f, part)
        out = _launch(kernel_of(at_tiles(_device(f), WIDE), WIDE), ins, outs)
        return (out if len(outs) > 1 else out[0]), want

    return Case(f"{what}, wider tiles: {WIDE}", run, hint[0],
                first + [helper] + _diagnoses(want, [(model(m), h) for m, h in mistakes]),
                rtol=_RTOL, atol=_ATOL, hint2=hint[1], names=names)


# -- checker: scores_tile --------------------------------------------------------------------

SCORES_MISTAKES = [("no_reset", HINT_RESET), ("offsets", HINT_S_OFFSETS), ("ci", HINT_CI),
                   ("kt_short", HINT_KT_SHORT)]


def check_scores_tile(scores_tile, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your scores_tile alone: S = Q K_j^T on the fragments, s holding the previous tile's P."""
    rng = np.random.default_rng(20)
    qtile = _tile(rng, (BR, D))                               # Q_i (16, D), pre-scaled
    ks = _tile(rng, (32, 32))                                 # K_j = ks[:16, :16]
    s_prev = rng.random((NT, S_ACC)).astype(np.float32)       # the previous tile's P
    want = scores_model(qtile, ks, s_prev)
    wrongs = [(scores_model(qtile, ks, s_prev, mis), hint) for mis, hint in SCORES_MISTAKES]

    def run(fn):
        kernel_guard(fn, "scores_tile")
        return _launch(_scores_kernel(_device(fn)), (q_fragment(qtile), ks, s_prev),
                       (s_prev,))[0], want

    helper = _helper_diagnosis(scores_tile, "load_b", load_b_fails, HINT_SCORES_LOAD_B)
    diagnoses = [helper] + _diagnoses(want, wrongs)
    first, last = source_cases((scores_tile,), shuffles=False)
    # at WIDE: Q (16, 48), K = ks[:32, :48] of a 96 x 96 tile, s of 16 entries
    qw, ksw = _tile(rng, (BR, WIDE.D)), _tile(rng, (96, 96))
    sw = rng.random((NT, WIDE.sizes["S_ACC"])).astype(np.float32)
    wide = _wide_case("scores_tile", scores_tile, _scores_kernel, (q_fragment(qw), ksw, sw),
                      (sw,),
                      lambda m=None: scores_model(qw, ksw, sw, m),
                      [(m, h) for m, h in SCORES_MISTAKES if m != "kt_short"],
                      [("kp", W.HINT_S_KP, "KP"), ("qa_words", W.HINT_S_QA_WORDS, None),
                       ("k0_8", W.HINT_S_K0, None)],
                      (("KT", "D", "QA_WORDS"), ("NS", "BC", "S_ACC")), helper,
                      "S = Q K_j^T", W.HINT_WIDE_SCORES, ("s",))
    cases = first + [Case("S = Q K_j^T on one key tile (s holds the last tile's P)", run,
                          HINT_SCORES[0], diagnoses, rtol=_RTOL, atol=_ATOL,
                          hint2=HINT_SCORES[1], names=("s",)), wide] + last
    return run_checks("scores_tile (S = Q K^T on the fragments)", scores_tile, cases,
                      verbose=verbose, hint_level=hint_level)


# -- checker: softmax_tile -------------------------------------------------------------------

SOFTMAX_MISTAKES = [
    ("no_standin", HINT_STANDIN), ("no_standin_alpha", HINT_STANDIN),
    ("no_standin_p", HINT_STANDIN), ("no_rescale", HINT_RESCALE),
    ("no_rescale_acc", HINT_RESCALE_ACC), ("no_rescale_lp", HINT_RESCALE_LP),
    ("no_quad_max", HINT_NO_QUAD_MAX), ("tile_max", HINT_TILE_MAX), ("index", HINT_ACC_INDEX),
    ("index_s", HINT_ACC_INDEX), ("index_acc", HINT_ACC_INDEX), ("p_not_stored", HINT_P_STORE),
    ("lp_quad", HINT_LP_PARTIAL), ("exp2", HINT_SOFTMAX_EXP2)]


def _row_of(values_by_row):
    """(32, 2): [lane, hf] = values_by_row[g + 8 hf] (a row's m, the same in its quad)."""
    g = np.arange(NT) // 4
    return np.stack([values_by_row[g], values_by_row[g + 8]], axis=1).astype(np.float32)


def _softmax_inputs(first: bool, tiles=TILES):
    """(s, acc, m, lp): the first key tile (m = -inf, lp = acc = 0; keys past 13 masked and
    row 5 wholly), or a later one (the max grows in some rows, not in others; row 11 wholly
    masked in this tile), the later one also at WIDE."""
    rng = np.random.default_rng((30 if first else 31) + (tiles != TILES))
    S_ACC, O_ACC, NS = (tiles.sizes[n] for n in ("S_ACC", "O_ACC", "NS"))   # noqa: N806
    s = (rng.standard_normal((NT, S_ACC)) * 2).astype(np.float32)
    lanes = np.arange(NT)
    if first:
        s[mask_model(0, 0, 13, 0, 0)] = -np.inf
        s[(lanes // 4 == 5)[:, None] & (np.arange(S_ACC) % 4 < 2)[None, :]] = -np.inf
        return (s, np.zeros((NT, O_ACC), np.float32), np.full((NT, 2), -np.inf, np.float32),
                np.zeros((NT, 2), np.float32))
    s[(lanes // 4 == 3)[:, None] & (np.arange(S_ACC) % 4 >= 2)[None, :]] = -np.inf
    row_max = np.full(BR, -np.inf)
    for n in range(NS):
        for i in range(4):
            row = lanes // 4 + 8 * (i // 2)
            np.maximum.at(row_max, row, s[:, 4 * n + i])
    row_max[11] = 1.0                                         # masked here, finite before
    m = _row_of(row_max + rng.uniform(-2.0, 1.5, BR))         # < 0: this tile raises the max
    lp = rng.uniform(0.5, 3.0, (NT, 2)).astype(np.float32)
    acc = rng.standard_normal((NT, O_ACC)).astype(np.float32)
    return s, acc, m, lp


def _large_softmax_inputs():
    """The later key tile's inputs with every score and every running max raised by 800 (the
    same differences, so the same P, alpha, lp and acc; m + 800): e^800 overflows float32,
    and float64 too (the simulator's math.exp raises OverflowError past e^709)."""
    s, acc, m, lp = _softmax_inputs(False)
    return s + np.float32(800), acc, m + np.float32(800), lp


def _overflowed(yours, _expected) -> bool:
    """Some result is inf or NaN (the large-score case's expected results are all finite)."""
    return not all(np.isfinite(np.asarray(y, np.float64)).all() for y in yours)


def _is_overflow(exc) -> bool:
    return isinstance(exc, OverflowError) or "math range error" in str(exc)


def check_softmax_tile(softmax_tile, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your softmax_tile alone on the fragments: the first key tile, a later one, and the
    later one with scores near 800 (exp of a score alone overflows)."""
    cases = []
    helper = _helper_diagnosis(softmax_tile, "quad_max", quad_max_fails, HINT_SOFTMAX_QUAD)
    for ins, name, large in (
            (_softmax_inputs(True), "first key tile: m = -inf, keys past 13 masked, row 5 wholly",
             False),
            (_softmax_inputs(False), "a later key tile: the max grows in some rows, not in others",
             False),
            (_large_softmax_inputs(), "large scores: the later key tile with every score and m "
             "raised by 800 (e^800 overflows)", True)):
        want = softmax_model(*ins)
        wrongs = [(softmax_model(*ins, mistake=mis), hint) for mis, hint in SOFTMAX_MISTAKES]

        def run(fn, ins=ins, want=want):
            kernel_guard(fn, "softmax_tile")
            return _launch(_softmax_kernel(_device(fn)), ins, ins), want

        # at 800 a float32 score carries 6e-5 of rounding: a right softmax_tile that folds
        # log2 e into the scores before one exp2 is that far off, so this case is looser
        tol = 1e-3 if large else _RTOL
        extra = [(_overflowed, *HINT_P_OVERFLOW)] if large else []
        cases.append(Case(name, run, HINT_SOFTMAX[0],
                          [helper] + _diagnoses(want, wrongs) + extra,
                          rtol=tol, atol=tol, hint2=HINT_SOFTMAX[1],
                          names=("s (P)", "acc", "m", "lp"),
                          error_diagnoses=[(_is_overflow, *HINT_P_OVERFLOW)] if large else []))
    ins = _softmax_inputs(False, WIDE)
    cases.append(_wide_case(
        "softmax_tile", softmax_tile, _softmax_kernel, ins, ins,
        lambda m=None: softmax_model(*ins, mistake=m), SOFTMAX_MISTAKES,
        [("acc_ns", W.HINT_ACC_NS, "NS")], (("NS", "BC", "S_ACC"), ("NO", "D", "O_ACC")),
        helper, "a later key tile", W.HINT_WIDE_SOFTMAX, ("s (P)", "acc", "m", "lp")))
    first, last = source_cases((softmax_tile,))
    return run_checks("softmax_tile (the online softmax on the fragments)", softmax_tile,
                      first + cases + last, verbose=verbose, hint_level=hint_level)


# -- checker: pv_tile ------------------------------------------------------------------------

PV_MISTAKES = [("p_order", HINT_P_ORDER), ("p_pairs", HINT_P_ORDER), ("v_as_k", HINT_PV_B),
               ("offsets", HINT_PV_OFFSETS), ("ci", HINT_CI), ("overwrite", HINT_PV_ADD)]


def check_pv_tile(pv_tile, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your pv_tile alone: O += P V_j with P in the accumulators of S, V_j^T in vt."""
    rng = np.random.default_rng(40)
    p = rng.random((NT, S_ACC)).astype(np.float32)            # P of this tile, in s
    vt = _tile(rng, (32, 32))                                 # V_j^T = vt[:16, :16]
    acc = rng.standard_normal((NT, O_ACC)).astype(np.float32)  # the earlier tiles' O
    want = pv_model(p, vt, acc)
    wrongs = [(pv_model(p, vt, acc, mis), hint) for mis, hint in PV_MISTAKES]

    def run(fn):
        kernel_guard(fn, "pv_tile")
        return _launch(_pv_kernel(_device(fn)), (p, vt, acc), (acc,))[0], want

    first, last = source_cases((pv_tile,), shuffles=False)
    helper = _helper_diagnosis(pv_tile, "load_b", load_b_fails, HINT_PV_LOAD_B)
    diagnoses = [helper] + _diagnoses(want, wrongs)
    # at WIDE: P (16 entries: 4 n8 tiles of keys), V^T = vt[:48, :32] of 96 x 96, acc of 24
    pw, vtw = rng.random((NT, WIDE.sizes["S_ACC"])).astype(np.float32), _tile(rng, (96, 96))
    accw = rng.standard_normal((NT, WIDE.sizes["O_ACC"])).astype(np.float32)
    wide = _wide_case("pv_tile", pv_tile, _pv_kernel, (pw, vtw, accw), (accw,),
                      lambda m=None: pv_model(pw, vtw, accw, m), PV_MISTAKES,
                      [("j0", W.HINT_PV_J0, None), ("k0_8", W.HINT_PV_KP8, None),
                       ("ns", W.HINT_PV_NS, "NS")],
                      (("KP", "BC", "S_ACC"), ("NO", "D", "O_ACC")), helper, "O += P V_j",
                      W.HINT_WIDE_PV, ("acc",))
    cases = first + [Case("O += P V_j on one key tile (acc holds the earlier tiles' O)", run,
                          HINT_PV[0], diagnoses, rtol=_RTOL, atol=_ATOL,
                          hint2=HINT_PV[1], names=("acc",)), wide] + last
    return run_checks("pv_tile (O += P V with P as the A operand)", pv_tile, cases,
                      verbose=verbose, hint_level=hint_level)


# -- checker: the whole kernel ----------------------------------------------------------------

#: (check, the parts it takes, the hint when it fails and the kernel does too), in order
PART_CHECKS = [(check_fragments, ("load_a", "load_b"), HINT_KERNEL_FRAGMENTS),
               (check_quad, ("quad_max", "quad_sum"), HINT_KERNEL_QUAD),
               (check_scores_tile, ("scores_tile",), HINT_KERNEL_SCORES),
               (check_softmax_tile, ("softmax_tile",), HINT_KERNEL_SOFTMAX),
               (check_pv_tile, ("pv_tile",), HINT_KERNEL_PV)]

#: (part, mistake, hint): the part mistakes the kernel's output can show (not the offsets,
#: which read past the kernel's 16 x 16 tiles)
KERNEL_MISTAKES = ([("scores_tile", m, h) for m, h in SCORES_MISTAKES if m != "offsets"]
                   + [("softmax_tile", m, h) for m, h in SOFTMAX_MISTAKES]
                   + [("pv_tile", m, h) for m, h in PV_MISTAKES if m != "offsets"])


def _mistake_matches(q, k, v, causal, part, mistake):
    """A diagnosis predicate: the kernel's output is `kernel_model` with that mistake (and
    that differs from the right one); the model runs only when a case fails."""
    cache = {}

    def fired(yours, expected):
        if "wrong" not in cache:
            with np.errstate(all="ignore"):
                cache["wrong"] = kernel_model(q, k, v, causal=causal, mistakes={part: mistake})
        wrong = cache["wrong"]
        return not _close(wrong, expected) and _close(yours, wrong)
    return fired


def _part_diagnoses(part_checks, fns, hint_kernel) -> list:
    """The diagnoses of a kernel case that fails: each part check of `part_checks` ((check,
    the names of the parts it takes, hint), in order) gives its hint when it fails on the
    parts `fns`, and `hint_kernel` says what remains when all of them pass. A check runs
    only when a case fails, and once for all the cases that share these diagnoses."""
    results = {}

    def part_fails(n):
        def fired(_yours, _expected):
            if n not in results:
                check, names, _ = part_checks[n]
                results[n] = check(*(fns[x] for x in names), verbose=False)
            return not results[n].passed
        return fired

    def all_parts_pass(yours, expected):
        return all(not part_fails(n)(yours, expected) for n in range(len(part_checks)))

    return ([(part_fails(n), *hint) for n, (_, _, hint) in enumerate(part_checks)]
            + [(all_parts_pass, *hint_kernel)])


def check_kernel(parts, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your parts inside the lab kernel against the numpy replay (and so the reference). A
    failure is named by the helpers' checks (check_fragments, check_quad) when one fails,
    else by a part's typical mistake, else by the first part check that fails, else it says
    that all of them pass and what remains."""
    fns = _parts(parts)
    part_diagnoses = _part_diagnoses(PART_CHECKS, fns, HINT_KERNEL)
    # the helpers' checks first: the mistakes are replayed with right fragment loads and quad
    # reductions, and a wrong helper can give exactly a part mistake's output (load_a and
    # load_b that both swap the halves of their words: the P V of a pv_tile that swaps P's)
    helpers, rest = part_diagnoses[:2], part_diagnoses[2:]
    first, last = source_cases(tuple(fns.values()))
    cases = list(first)
    for name, seed, tq, tk, d, causal, spread, grow in KERNEL_CASES:
        q, k, v = _inputs(seed, tq, tk, d, spread, grow)
        want = replay(q, k, v, causal=causal)
        diagnoses = helpers + [(_mistake_matches(q, k, v, causal, part, mistake), *hint)
                               for part, mistake, hint in KERNEL_MISTAKES] + rest

        def run(f, q=q, k=k, v=v, causal=causal, want=want):
            o, lse = lab_forward(f, q, k, v, causal=causal)
            return (o.astype(np.float64), lse.astype(np.float64)), want

        # the case's own hint is shown only when the kernel raises (a diagnosis always fires)
        cases.append(Case(name, run, HINT_KERNEL_ERROR[0], diagnoses, rtol=2e-3, atol=2e-3,
                          hint2=HINT_KERNEL_ERROR[1], time_limit_s=120, names=("o", "lse")))
    return run_checks("the lab kernel with your parts", fns, cases + last, verbose=verbose,
                      hint_level=hint_level)


ALL_HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_")]
