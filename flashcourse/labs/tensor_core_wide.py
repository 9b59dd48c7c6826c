"""Lab 10's one-warp kernels that run one part (`tensor_core_parts` checks each on known
fragments), at the lab's tiles or at the wider ones (`tensor_core_lab.WIDE`: D = 48, BC = 32,
so KT = 3, KP = 2, NS = 4, NO = 6), and the hints of the slips that show only there.

At the lab's tiles (D = BC = 16) KT = KP = 1 and NS = NO = 2, so a loop over the wrong size
of a pair, or an offset right only at k16 step 0 (qa's words from 2 kk, load_b's k0 = 8 kk,
pa packed from entry 4 kp), gives the right result. `tensor_core_parts` runs scores_tile,
softmax_tile and pv_tile also at WIDE, rebuilt with those sizes (`tile_sizes.at_tiles`),
replays the slips below and names a part that reads none of a loop's size names
(HINT_LITERAL); anything else there gets that part's wide hint, which states its loops and
offsets.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32, int32, uint32

from ..cuda.ptx import mma as M
from ..gpu import using_simulator
from .tensor_core_lab import NT, O_ACC, QA_WORDS, S_ACC, TILES, WIDE
from .tile_sizes import at_tiles

_SIZES = ("KT (the k16 steps of the head dimension), KP (of the keys), NS (the n8 tiles of "
          "S, over keys) and NO (of O, over the head dimension)")


def _wide(part_rule: str, hint2: str) -> tuple[str, str]:
    return ("Your part is right at the lab's tiles (D = BC = 16: KT = KP = 1, NS = NO = 2) "
            f"but not at the wider ones the check also runs, {WIDE}: a loop count or an "
            "offset that is right only at D = BC = 16 (a loop over the wrong one of two sizes "
            "equal there runs too few steps, or past an array's end). The sizes: "
            f"{_SIZES}. {part_rule}", hint2)


HINT_WIDE_SCORES = _wide(
    "In scores_tile: the reset covers all 4 NS entries of s; n runs over NS (keys), kk over "
    "KT (the head dimension); step kk reads words 4 kk .. 4 kk + 3 of qa and columns 16 kk .. "
    "16 kk + 15 of ks (load_b's k0), n8 tile n its rows from 8 n.",
    "Which of your loops runs over the head dimension, which over the keys?")
HINT_WIDE_SOFTMAX = _wide(
    "In softmax_tile: the row max, P and lp run over the NS n8 tiles of s (keys); the rescale "
    "of acc runs over the NO n8 tiles of O (the head dimension).",
    "Which of your loops runs over s, which over acc?")
HINT_WIDE_PV = _wide(
    "In pv_tile: kp runs over KP (the keys), n over NO (the head dimension); pa holds ONE k16 "
    "step's A fragment, packed anew for each kp from s's entries 8 kp .. 8 kp + 7, so the mma "
    "reads it from word 0 (word 4 kp would be past pa's 4 words); the B fragment of step kp "
    "is load_b on vt with n0 = 8 n and k0 = 16 kp.",
    "Which of your loops runs over the keys, which over the head dimension? Where does the "
    "mma read pa from?")
HINT_LITERAL = ("Use the named sizes KT, KP, NS, NO: your code is right only at D = BC = 16. "
                f"The check also runs your part at {WIDE}, and your part does not read the "
                "size one of its loops needs (KT or KP for the k16 steps, NS or NO for the n8 "
                "tiles): a fixed count such as range(1) or range(2) runs the same number of "
                f"times at both. The sizes: {_SIZES}.",
                "Replace each fixed loop count by the name of what it counts.")
HINT_S_KP = (f"At {WIDE} your S leaves out the last k16 step of the head dimension: your kk "
             "loop runs over KP, the k16 steps of the KEYS (the sum of P V). S = Q K^T sums "
             "over the head dimension: KT steps (equal to KP only at D = BC = 16).",
             "The kk loop of scores_tile runs over KT.")
HINT_S_QA_WORDS = (f"At {WIDE} your S reads the wrong words of Q's A fragments from step kk = 1 "
                   "on: each k16 step has 4 words, so step kk starts at word 4 kk (2 kk reads "
                   "half of step 0 and half of step 1 at kk = 1, step 1 again at kk = 2).",
                   "The A fragment of step kk: qa from word 4 kk.")
HINT_S_K0 = (f"At {WIDE} your B fragment of K for kk = 1 reads the wrong dimensions: k16 step "
             "kk is dimensions 16 kk .. 16 kk + 15, so load_b's k0 is 16 kk (8 kk reads "
             "dimensions 8 .. 23 at kk = 1, half of them step 0's again).",
             "load_b(ks, 8 n, 16 kk, ...).")
HINT_ACC_NS = (f"At {WIDE} your acc leaves its last n8 tiles unrescaled: your acc loop runs "
               "over NS (the n8 tiles of S, over keys) where acc's n8 tiles are over the head "
               "dimension, NO of them (equal to NS only at D = BC = 16).",
               "The rescale loop of acc runs over NO.")
HINT_PV_J0 = (f"At {WIDE} your P packs the wrong accumulators for kp = 1: k16 step kp is n8 "
              "tiles 2 kp and 2 kp + 1 of S, 4 entries each, so it starts at entry 8 kp (entry "
              "4 kp is n8 tile kp, not 2 kp).", "j0 is 8 kp.")
HINT_PV_KP8 = (f"At {WIDE} your B fragment of V for kp = 1 reads the wrong keys: k16 step kp "
               "is keys 16 kp .. 16 kp + 15, so load_b's k0 is 16 kp (8 kp reads keys 8 .. 23 "
               "at kp = 1, half of them step 0's again).", "load_b(vt, 8 n, 16 kp, ...).")
HINT_PV_NS = (f"At {WIDE} your acc leaves its last n8 tiles as they were: your n loop runs over "
              "NS (the n8 tiles of S, over keys) where O's n8 tiles are over the head "
              "dimension, NO of them (equal to NS only at D = BC = 16).",
              "The n loop of pv_tile runs over NO.")


# -- the one-warp kernels that run one part -------------------------------------------------

def _scratch() -> int:
    return M.SIM_SCRATCH_PER_WARP if using_simulator() else 1


@lru_cache(maxsize=None)
def _scores_kernel(scores_tile, tiles=TILES):
    SCR = _scratch()

    def kern(qa_words, ks, s_in, s_out):
        scr = cuda.shared.array(SCR, float32)
        lane = cuda.threadIdx.x
        w = cuda.local.array(2, int32)
        w[0] = lane
        w[1] = 0
        qa = cuda.local.array(QA_WORDS, uint32)
        s = cuda.local.array(S_ACC, float32)
        b = cuda.local.array(2, uint32)
        for x in range(QA_WORDS):
            qa[x] = qa_words[lane, x]
        for x in range(S_ACC):
            s[x] = s_in[lane, x]
        scores_tile(qa, ks, s, b, scr, w)
        for x in range(S_ACC):
            s_out[lane, x] = s[x]
    return cuda.jit(at_tiles(kern, tiles))


@lru_cache(maxsize=None)
def _softmax_kernel(softmax_tile, tiles=TILES):
    def kern(s_in, acc_in, m_in, lp_in, s_out, acc_out, m_out, lp_out):
        red = cuda.shared.array(NT, float32)
        lane = cuda.threadIdx.x
        s = cuda.local.array(S_ACC, float32)
        acc = cuda.local.array(O_ACC, float32)
        m = cuda.local.array(2, float32)
        lp = cuda.local.array(2, float32)
        for x in range(S_ACC):
            s[x] = s_in[lane, x]
        for x in range(O_ACC):
            acc[x] = acc_in[lane, x]
        for x in range(2):
            m[x] = m_in[lane, x]
            lp[x] = lp_in[lane, x]
        softmax_tile(s, acc, m, lp, red, lane)
        for x in range(S_ACC):
            s_out[lane, x] = s[x]
        for x in range(O_ACC):
            acc_out[lane, x] = acc[x]
        for x in range(2):
            m_out[lane, x] = m[x]
            lp_out[lane, x] = lp[x]
    return cuda.jit(at_tiles(kern, tiles))


@lru_cache(maxsize=None)
def _pv_kernel(pv_tile, tiles=TILES):
    SCR = _scratch()

    def kern(s_in, vt, acc_in, acc_out):
        scr = cuda.shared.array(SCR, float32)
        lane = cuda.threadIdx.x
        w = cuda.local.array(2, int32)
        w[0] = lane
        w[1] = 0
        s = cuda.local.array(S_ACC, float32)
        acc = cuda.local.array(O_ACC, float32)
        pa = cuda.local.array(4, uint32)
        b = cuda.local.array(2, uint32)
        for x in range(S_ACC):
            s[x] = s_in[lane, x]
        for x in range(O_ACC):
            acc[x] = acc_in[lane, x]
        pv_tile(s, vt, acc, pa, b, scr, w)
        for x in range(O_ACC):
            acc_out[lane, x] = acc[x]
    return cuda.jit(at_tiles(kern, tiles))
