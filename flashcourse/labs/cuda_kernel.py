"""Checkers for lab 06 (follows notebook 06): the parts of the fast CUDA kernel.

The lab kernel is a miniature of `flashcourse.cuda.cuda_core.flash`: a block of NT = 8 threads
computes BR = 4 query rows against key tiles of BC = 8 keys. Thread `tid` is column
group tx = tid % CT and row group ty = tid // CT (CT = 4, RT = 2); it owns a
TM x TN = 2 x 2 micro-tile of scores (rows ty + RT*i, key columns tx + CT*j) and a
TM x TD = 2 x 2 micro-tile of the output (columns tx + CT*j of the D = 8 padded head
dimension). The learner writes four device functions (float32 throughout):

    micro_tile_scores(qs, ks, s, qa, kb, ty, tx)
        the register micro-tile product s[i*TN + j] = sum_kk qs[kk, ty + RT*i] *
        ks[tx + CT*j, kk], loading each shared value once per kk into the registers
        qa (TM,) and kb (TN,) and reusing it for TN (resp. TM) multiply-adds.
    row_max(x, scratch, tid), row_sum(x, scratch, tid)
        the max / sum of x over the CT threads that share a row, by a butterfly of
        `shfl_xor(x, offset, scratch, tid)` steps (a warp shuffle on a GPU; the same
        exchange through shared memory on the simulator, which has no shuffles).
    online_update(s, acc, m, lp, i, mx)
        the online-softmax update of micro-tile row i, given the row's tile max mx:
        new max, finite stand-in while it is -inf, rescale factor, P in place of S,
        this thread's partial row sum lp[i], and acc rescaled.

`lab_forward(parts, q, k, v, ...)` runs them inside the lab kernel (the skeleton is in
`flashcourse.labs.cuda_lab_kernel`). `check_*` run each part on its own and then the whole kernel on
tiny shapes (ragged, causal with Tq != Tk, left-padded keys whose first key tile
is all padding, large scores) against the float64 reference; `show()` tallies
each thread's memory accesses next to the expected counts, GPU-Puzzles style
(`flashcourse.labs.cuda_show`). Going further: `key_blocks`, the
number of key tiles a query block must visit (causal tile skipping in the kernel).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from .. import reference
from ..constants import NEG_INF
from ..cuda.common._launch import simulator_lock
from ..geometry import ceil_div
from ._harness import Case, Result, mistake_diagnoses, run_checks
from .kernel_source import float64_literals, kernel_guard, py_func
from .cuda_lab_kernel import (BC, BR, CT, NT, RT, TD, TM, TN, D, _device, lab_forward)
from .cuda_show import EXPECTED_COUNTS, _as_python, tally_scores

HINT_SCORES = (
    "Your micro-tile of scores is wrong: thread (ty, tx) owns rows ty + RT*i and key columns "
    "tx + CT*j, and each score sums over all D entries of the head dimension.",
    "qs is Q transposed (qs[kk, row]) and ks is K (ks[col, kk]); start every score at 0 and "
    "add one product per kk.")
HINT_SCORES_LAYOUT = (
    "Micro-tile layout: your rows or columns are contiguous (ty*TM + i, tx*TN + j). The lab "
    "kernel strides them (ty + RT*i, tx + CT*j), as notebook 06's kernel does, so that the "
    "threads of a warp read different shared-memory banks.",
    "Use row ty + RT*i and column tx + CT*j, and store into s[i*TN + j].")
HINT_SCORES_KS_T = (
    "Your K tile is read transposed: ks holds K row by row, key first (ks[key, kk]), so the "
    "value of key column c at step kk is ks[c, kk], not ks[kk, c].",
    "Load kb[j] from the row of key tx + CT*j, column kk.")
HINT_SCORES_ZERO = (
    "The scores are not reset: s still holds the previous tile's values when you add to it.",
    "Set every entry of s to a float32 zero before the kk loop.")
HINT_REUSE = (
    "No register reuse: your product reads shared memory once per multiply-add. Load the TM "
    "values of Q and the TN values of K for one kk into qa and kb, then do TM x TN "
    "multiply-adds from those registers (notebook 06, section 3, step 3: the score "
    "micro-tile).",
    "Per thread and per kk: TM reads of qs, TN reads of ks, TM*TN multiply-adds. Use show() "
    "to see your counts next to the expected ones.")
HINT_REDUCE_STEPS = (
    "The reduction does not reach all CT threads of the row: a butterfly needs log2(CT) "
    "exchange steps, with offsets CT/2, CT/4, ..., 1.",
    "Loop while the offset is > 0, halving it each step, and combine x with shfl_xor(x, offset, "
    "scratch, tid) every time.")
HINT_REDUCE_CROSS = (
    "The reduction mixes rows: an offset of CT or more exchanges values with the threads of "
    "ANOTHER row. Start at CT/2.",
    "Offsets CT/2, ..., 1 keep tid ^ offset inside the CT threads of the same row.")
HINT_REDUCE_OP = (
    "Wrong combine: row_max must take the max of the two values and row_sum their sum.",
    "max(x, other) for the max, x + other for the sum.")
HINT_REDUCE = (
    "Your reduction gives a wrong value for some thread: every thread of a row must end with "
    "the row's full max (or sum).",
    "A butterfly: for offset in CT/2, CT/4, ..., 1: x = combine(x, shfl_xor(x, offset, ...)).")
HINT_EXP2 = (
    "Wrong base: your P uses exp2, but this kernel works in base e throughout: the scores "
    "and maxima are natural, alpha = exp(m_old - m_new), and the kernel's lse = m + log(l). "
    "Use math.exp for P, and for alpha too if you wrote exp2 there.",
    "p = math.exp(s - m_use): exp2 would need the scores and maxima in base 2, times "
    "log2(e).")
HINT_RESCALE = (
    "Missing rescale: when the max grows, this thread's partial sum lp[i] and its acc row were "
    "measured against the old max and must be multiplied by the factor exp(old - new) first. "
    "If your code multiplies by alpha, alpha is 1: exp(m[i] - m_use) taken after m[i] was set "
    "to the new max is exp(0). Take alpha while m[i] still holds the old max.",
    "alpha = exp(m[i] - m_use), before m[i] is set to m_new; lp[i] = lp[i] * alpha + this "
    "tile's sum; every acc entry of row i times alpha.")
HINT_RESCALE_HALF = (
    "Half a rescale: only one of this thread's partial sum lp[i] and its acc row is brought "
    "to the new max (the other array named above is off). Both are sums against the same "
    "max; when it grows, both are multiplied by the same factor alpha before the tile's "
    "probabilities are added to lp[i].",
    "Multiply lp[i] by alpha and add the row's probabilities; multiply each of the TD "
    "entries of the acc row by the same alpha.")
HINT_ALPHA_INVERTED = (
    "The rescale factor points the wrong way: alpha = exp(old max - new max) is at most 1 "
    "and shrinks the old lp[i] and acc when the max grows; yours is its inverse.",
    "Inside the exponential, subtract the new max (its stand-in while -inf) from the old "
    "max m[i].")
HINT_M_NOT_STORED = (
    "m[i] keeps its old value: the new running max must be written back, or the next tile "
    "rescales against a stale max.",
    "Store the new max into m[i], after alpha has been taken from the old one.")
HINT_P_FROM_MX = (
    "The probabilities are measured against this tile's max mx, not against the new running "
    "max: where the running max is larger than mx, exp(s - mx) is too large by "
    "exp(running max - mx), out of step with lp[i] and acc, which use the running max.",
    "Subtract the new running max (its stand-in while it is -inf) from every score of the "
    "row.")
HINT_RESCALE_AFTER = (
    "The rescale is applied after this tile is added: alpha brings the OLD lp[i] to the new "
    "max; the tile's probabilities already use the new max and must not be multiplied by "
    "alpha.",
    "Multiply lp[i] by alpha first, then add the row's probabilities.")
HINT_MAX = (
    "Wrong max: the new max must combine the running max m[i] with the tile's row max mx.",
    "m_new is the larger of m[i] and mx; store it back into m[i].")
HINT_NEG_INF = (
    "-inf handling: a row whose keys so far are all masked (here: left padding fills the first "
    "key tile) has max -inf, and exp(-inf - (-inf)) is NaN, which poisons the row.",
    "Use a finite stand-in (F0) for the subtraction while the new max is still NEG_INF; then "
    "alpha and every p are exactly 0.")
HINT_NEG_INF_ONE = (
    "-inf handling in one exponential: a row whose keys so far are all masked has max -inf, "
    "and you subtract the stand-in in one exponential but the raw new max in the other "
    "(alpha = exp(m[i] - m_new), or p = exp(s - m_new)); exp(-inf - (-inf)) is NaN there.",
    "Both exponentials subtract m_use, the finite stand-in: alpha = exp(m[i] - m_use) and "
    "p = exp(s - m_use).")
HINT_STANDIN_WHICH = (
    "Your stand-in for a -inf max is tested on the wrong value: it must replace the max only "
    "where the NEW running max m_new is -inf. Tested on the tile's max mx, a tile that is "
    "fully masked for a row that has already seen keys (mx = -inf, m[i] finite) subtracts 0: "
    "alpha = exp(m[i] - 0) then rescales lp and acc for nothing. Tested on the old max m[i], "
    "a row's first tile subtracts 0 from its scores instead of their max.",
    "m_use = m_new where m_new is not -inf, else F0; decide it from m_new alone.")
HINT_OVERFLOW = (
    "Your output holds NaN in a case where every row sees a key in its first tile (nothing "
    "is masked to -inf there): an exponential overflowed. On a row's first tile m[i] is "
    "still -inf, so exp(s - m[i]) or an alpha written exp(m_use - m[i]) is exp(+inf) = "
    "inf, and inf / inf or inf * 0 is NaN. Every exponent must be <= 0: P against the NEW "
    "max, alpha = exp(old max - new max).",
    "p = exp(s - m_use), with m_use the new max (or its finite stand-in); alpha = exp(m[i] - "
    "m_use), taken while m[i] still holds the old max.")
HINT_SHIFT = (
    "Subtract the max: p = exp(s - m_use), not exp(s); large scores overflow otherwise. If "
    "your code subtracts m_use, m_use is 0 here: the finite stand-in must replace the NEW max "
    "only while it is still -inf. A row's first tile has m[i] = -inf but a finite new max, so "
    "test m_new, not m[i].",
    "Shift every score of the row by the stand-in max before the exponential; the stand-in "
    "is F0 only when m_new is NEG_INF.")
HINT_P_NOT_STORED = (
    "The probabilities must replace the scores in s: the kernel copies s to shared memory and "
    "multiplies it by V.",
    "Write each p back into s[i*TN + j].")
HINT_FLOAT64 = (
    "float64 promotion: a Python float literal (0.0, 1.0, math.inf, float('-inf'), ...) makes "
    "Numba compute in float64 on a GPU (slow, and not what the kernel stores).",
    "Write float32(0.0), or use the lab's F0 and NEG_INF constants.")
HINT_SKIP = (
    "key_blocks: your count of key tiles is wrong for this query block.",
    "With causal masking the block's last row q0 + BR - 1 (or Tq - 1) sees keys up to "
    "row + Tk - Tq: count the tiles up to that key, never more than ceil(Tk / BC), never "
    "negative.")
HINT_SKIP_NONE = (
    "key_blocks: your count does not skip anything: with causal = 1 a query block only needs "
    "the key tiles up to the last key its LAST row can see; the later tiles are all masked.",
    "Return the full count only when causal is 0; otherwise count the tiles up to the key "
    "row + off of the block's last row.")
HINT_SKIP_OFF_BY_ONE = (
    "key_blocks: off by one. The last visible key `last` lies in tile number last // BC "
    "(counting from 0), so the block visits that many tiles PLUS ONE; yours is one tile off.",
    "A count of tiles 0 .. t is t + 1; check your answer for a block whose last key is the "
    "first key of a tile.")
HINT_SKIP_SHORT = (
    "key_blocks: your count is a tile short for some query blocks. The block must visit the "
    "tiles up to the one holding the last key its LAST row sees, min(q0 + BR, Tq) - 1 + off "
    "(its first row sees fewer keys), and tile index t means t + 1 tiles: a ceiling, "
    "ceil(last / BC), is one short whenever last is a multiple of BC.",
    "Take the block's last row, add off, divide by BC (floor) and add 1.")
HINT_SKIP_ONE_MORE = (
    "key_blocks: your count is a tile too many for some query blocks: the last key the "
    "block's last row sees is min(q0 + BR, Tq) - 1 + off (positions count from 0). Counted "
    "from one past it, a block whose visible keys end exactly at a tile's end also visits "
    "the next tile, which it cannot see.",
    "Subtract 1 from the end of the block's rows before adding off.")
HINT_SKIP_NOT_CAUSAL = (
    "key_blocks: with causal = 0 every query block visits all ceil(Tk / BC) key tiles; your "
    "count skips tiles even though no mask hides them.",
    "Return the full tile count first when causal is 0.")
HINT_SKIP_TOP_LEFT = (
    "key_blocks: your count uses a top-left causal mask (key j visible iff j <= i). The lab "
    "kernel aligns it bottom-right: the last key a row i sees is i + off, with off = Tk - Tq.",
    "Add `off` to the block's last row before dividing by BC.")
HINT_SKIP_FLOOR = (
    "key_blocks: the number of key tiles is a ceiling, ceil(Tk / BC): when Tk is not a "
    "multiple of BC the last, shorter tile still has to be visited. Yours rounds down.",
    "Integer ceiling division: (Tk + BC - 1) // BC.")
HINT_SKIP_NEGATIVE = (
    "key_blocks: a query block whose rows see no key at all (causal, Tq > Tk) must visit 0 "
    "tiles: your count is negative, or counts a tile for it.",
    "When the block's last row sees no key (last < 0), return 0.")
HINT_UPDATE = (
    "Your online update leaves a wrong value in s, acc, m or lp (named above). Compare with "
    "notebook 06's update rule, one step at a time: new max, finite stand-in, rescale "
    "factor, P written over S, partial sum, acc rescaled.",
    "The four arrays are changed in place: s (row i only), acc (row i), m[i] and lp[i]; "
    "nothing else.")
HINT_ROW_MIX = (
    "Your row max mixes two rows: an offset of CT or more in row_max combines the max of "
    "ANOTHER row, and here one row's scores are far larger than the next row's, so "
    "exp(s - that max) underflows to 0 and the smaller row comes out empty. (The shift is "
    "only harmless when the rows are alike, which is why the part check alone can miss it.)",
    "row_max's butterfly offsets are CT/2, ..., 1, so tid ^ offset stays inside the row.")
HINT_RESCALE_SIGN = (
    "Missing rescale in this case, where every score is negative and the running max of some "
    "rows rises after the first key tile: lp[i] and the acc row must be multiplied by "
    "alpha = exp(old max - new max) whenever the max moves, whatever its sign. The cases "
    "before passed, so look for a test against 0 (F0) that skips the rescale for a max of "
    "0 or below.",
    "alpha = exp(m[i] - m_use) on every tile, taken before m[i] is set to m_new; the only "
    "special value is NEG_INF (a row that has seen no key yet).")
HINT_NEGATIVE = (
    "Your parts pass the cases before, whose scores are positive, but not this one: every "
    "score is negative, and the running max of some rows rises after the first key tile. "
    "Look for a test against 0 (F0) in your online update: the finite stand-in replaces the "
    "new max only while it is -inf, and alpha must rescale lp[i] and every acc entry of the "
    "row whenever the max moves, whatever its sign.",
    "The only special value in online_update is NEG_INF (a row that has seen no key yet); a "
    "max of 0 or below is an ordinary max.")
HINT_ROW_MIX_UPDATE = (
    "Your online update mixes the two rows of a thread's micro-tile: row 2 (the second row "
    "of the thread that holds row 0) came out empty, its scores near -60 measured against "
    "row 0's max near +60, where exp underflows to 0. Everything of row i is indexed by i: "
    "m[i], lp[i], s[i * TN + j], acc[i * TD + j], never a fixed 0.",
    "m_new is the larger of m[i] and mx, for the row i the update was called with.")
HINT_KERNEL = (
    "The kernel with your parts disagrees with the reference. Make the part checks pass first "
    "(check_micro_tile_scores, check_row_reductions, check_online_update).",
    "Then compare one row: print o and lse for a 4 x 8 input with one key tile.")

_RTOL, _ATOL = 2e-4, 2e-5      # float32 kernel against the float64 reference


# -- a float64 replay of the kernel's arithmetic, with the typical mistakes -----------------

def replay(q, k, v, *, causal=False, kv_start=0, mistake=None):
    """(o, lse) of the lab kernel in float64, per thread, optionally with one mistake.

    mistake: None, 'no_guard', 'no_rescale', 'tile_max', 'no_shift', 'max_one_step',
    'sum_one_step', 'no_sum'.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    tq, d = q.shape
    tk = k.shape[0]
    off = tk - tq
    scale = 1.0 / math.sqrt(d)
    o = np.zeros((tq, d))
    lse = np.full(tq, -np.inf)
    owner = np.arange(BC) % CT                                 # tile column -> thread tx

    def reduce(x, op, one_step):
        out = x.copy()
        offs = [CT // 2] if one_step else [CT // 2 ** s for s in range(1, CT.bit_length())]
        for offset in offs:
            out = op(out, out[np.arange(CT) ^ offset])
        return out

    with np.errstate(all="ignore"):
        for r in range(tq):
            m = np.full(CT, -np.inf)
            lp = np.zeros(CT)
            acc = np.zeros(D)
            for k0 in range(0, tk, BC):
                cols = np.arange(k0, k0 + BC)
                s = np.full(BC, -np.inf)
                inside = cols < tk
                s[inside] = scale * (k[cols[inside]] @ q[r])
                s[cols < kv_start] = -np.inf
                if causal:
                    s[cols > r + off] = -np.inf
                local = np.array([s[owner == t].max() for t in range(CT)])
                mx = reduce(local, np.maximum, mistake == "max_one_step")
                m_new = mx if mistake == "tile_max" else np.maximum(m, mx)
                m_use = m_new if mistake == "no_guard" else np.where(np.isneginf(m_new), 0.0,
                                                                      m_new)
                alpha = np.ones(CT) if mistake == "no_rescale" else np.exp(m - m_use)
                p = np.exp(s) if mistake == "no_shift" else np.exp(s - m_use[owner])
                lp = lp * alpha + np.array([p[owner == t].sum() for t in range(CT)])
                acc = acc * alpha[np.arange(D) % CT]
                acc = acc + p[inside] @ np.pad(v[cols[inside]], ((0, 0), (0, D - d)))
                m = m_new
            if mistake == "no_sum":
                lt = lp
            else:
                lt = reduce(lp, np.add, mistake == "sum_one_step")
            for c in range(d):
                t = c % CT
                o[r, c] = acc[c] / lt[t] if lt[t] > 0 else 0.0
            lse[r] = m[0] + np.log(lt[0]) if lt[0] > 0 else -np.inf
    return o, lse


def _close_pair(a, b) -> bool:
    o_a, l_a = (np.asarray(x, np.float64) for x in a[:2])
    o_b, l_b = (np.asarray(x, np.float64) for x in b[:2])
    if o_a.shape != o_b.shape or l_a.shape != l_b.shape:
        return False
    if np.isnan(o_b).any() or np.isnan(l_b).any():
        return bool(np.array_equal(np.isnan(o_a), np.isnan(o_b)))
    if not np.array_equal(np.isneginf(l_a), np.isneginf(l_b)):
        return False
    fin = np.isfinite(l_b)
    return bool(np.allclose(o_a, o_b, rtol=1e-3, atol=1e-4)
                and np.allclose(l_a[fin], l_b[fin], rtol=1e-3, atol=1e-4))


# -- float32 constants only ---------------------------------------------------------------

def _float32_case(fns):
    def run(_):
        for fn in fns:
            kernel_guard(fn, getattr(py_func(fn), "__name__", "function"))
        return sum(len(float64_literals(fn)) for fn in fns), 0
    return Case("float32 constants only", run, HINT_FLOAT64[0], rtol=0, atol=0,
                hint2=HINT_FLOAT64[1])


# -- checker 1: the micro-tile product (plain Python, no kernel) ------------------------------

def check_micro_tile_scores(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Values of every thread's micro-tile, then its shared-memory reads (register reuse)."""
    def values(f):
        kernel_guard(f, "micro_tile_scores")
        _, yours, expected = tally_scores(f, seed=1)
        keys = sorted(expected)
        return (np.stack([yours[t] for t in keys]), np.stack([expected[t] for t in keys]))

    def same_tiles(y, tile):
        """y is every thread's micro-tile as tile(qs, ks, tx, ty) computes it, on the
        inputs of `values` (seed 1): the tiles a known slip makes."""
        rng = np.random.default_rng(1)
        qs = rng.standard_normal((D, BR)).astype(np.float64)
        ks = rng.standard_normal((BC, D)).astype(np.float64)
        alt = [tile(qs, ks, tid % CT, tid // CT).reshape(-1) for tid in range(NT)]
        return np.allclose(y, np.stack(alt), rtol=1e-4, atol=1e-4)

    def layout_contiguous(y, e):        # thread (ty, tx): rows ty * TM.., columns tx * TN..
        return same_tiles(y, lambda qs, ks, tx, ty:
                          qs[:, ty * TM + np.arange(TM)].T @ ks[tx * TN + np.arange(TN)].T)

    def ks_transposed(y, e):            # ks read as ks[kk, col]: BC = D
        return same_tiles(y, lambda qs, ks, tx, ty:
                          qs[:, ty + RT * np.arange(TM)].T @ ks[:, tx + CT * np.arange(TN)])

    def not_reset(y, e):
        return np.allclose(y, e + 7.0, rtol=1e-4, atol=1e-4)

    def reads(f):
        kernel_guard(f, "micro_tile_scores")
        counts, _, _ = tally_scores(f)
        worst = max(counts.values(), key=lambda c: c[0] + c[1])
        return np.array(worst[:2]), np.array(EXPECTED_COUNTS)

    cases = [
        Case("values of each thread's 2 x 2 micro-tile, D = 8", values, HINT_SCORES[0],
             [(not_reset, *HINT_SCORES_ZERO), (layout_contiguous, *HINT_SCORES_LAYOUT)]
             + ([(ks_transposed, *HINT_SCORES_KS_T)] if BC == D else []),
             rtol=1e-5, atol=1e-5, hint2=HINT_SCORES[1]),
        Case("shared-memory reads per thread (qs, ks): one per value and kk", reads,
             HINT_REUSE[0], rtol=0, atol=0, hint2=HINT_REUSE[1]),
        _float32_case([fn]),
    ]
    return run_checks("micro_tile_scores(qs, ks, s, qa, kb, ty, tx)", fn, cases,
                      verbose=verbose, hint_level=hint_level)


# -- checker 2: the row reductions (a tiny kernel on the simulator or the GPU) ---------------

@lru_cache(maxsize=None)
def _reduce_kernel(rmax, rsum, threads):
    def kern(x, out_max, out_sum):
        scratch = cuda.shared.array(threads, float32)
        tid = cuda.threadIdx.x
        out_max[tid] = rmax(x[tid], scratch, tid)
        out_sum[tid] = rsum(x[tid], scratch, tid)
    return cuda.jit(kern)


def run_reductions(rmax, rsum, x):
    """(each thread's rmax, each thread's rsum) when one block of len(x) threads runs the
    learner's device functions f(x[t], scratch, t) (scratch: len(x) float32 in shared
    memory) on x: this lab's row reductions, lab 09's quad reductions."""
    xd = cuda.to_device(np.asarray(x, np.float32))
    mx = cuda.to_device(np.zeros(len(x), np.float32))
    sm = cuda.to_device(np.zeros(len(x), np.float32))
    kern = _reduce_kernel(_device(rmax), _device(rsum), len(x))
    with simulator_lock():         # one simulated kernel at a time (cuda/common/_launch.py)
        kern[1, len(x)](xd, mx, sm)
    return mx.copy_to_host(), sm.copy_to_host()


def reduce_values(row_max, row_sum, x):
    kernel_guard(row_max, "row_max")
    kernel_guard(row_sum, "row_sum")
    return run_reductions(row_max, row_sum, x)


def xor_steps(x, op, offsets):
    """x (one value per thread) combined by op with the value of thread t ^ offset, for each
    offset in turn, in float64: what a butterfly over those offsets gives each thread."""
    out = np.asarray(x, np.float64).copy()
    for offset in offsets:
        out = op(out, out[np.arange(len(out)) ^ offset])
    return out


def check_row_reductions(row_max, row_sum, *, verbose: bool = True,
                         hint_level: int = 1) -> Result:
    """Every thread must end with its row's max and sum (rows = groups of CT threads)."""
    x = np.array([3.0, -1.0, 7.0, 0.5, -2.0, -4.0, -3.0, -9.0], np.float32)   # (NT,)
    full = [CT // 2 ** s for s in range(1, CT.bit_length())]
    rows = np.arange(NT) // CT
    exp_max = np.array([x[rows == r].max() for r in rows], np.float64)
    exp_sum = np.array([x[rows == r].sum() for r in rows], np.float64)
    wrong = {
        "steps": (xor_steps(x, np.maximum, full[:1]), xor_steps(x, np.add, full[:1])),
        "cross": (xor_steps(x, np.maximum, [CT] + full), xor_steps(x, np.add, [CT] + full)),
        "op": (xor_steps(x, np.add, full), xor_steps(x, np.maximum, full)),
    }

    def case(which, expected, idx):
        def run(fns):
            return reduce_values(*fns, x)[idx], expected
        diagnoses = [((lambda y, e, w=w[idx]: np.allclose(y, w)), *hint)
                     for w, hint in ((wrong["steps"], HINT_REDUCE_STEPS),
                                     (wrong["cross"], HINT_REDUCE_CROSS),
                                     (wrong["op"], HINT_REDUCE_OP))
                     if not np.allclose(w[idx], expected)]
        return Case(f"{which} over the {CT} threads of each row, for all {NT} threads", run,
                    HINT_REDUCE[0], diagnoses, rtol=1e-6, atol=1e-6, hint2=HINT_REDUCE[1])

    cases = [case("row max", exp_max, 0), case("row sum", exp_sum, 1),
             _float32_case([row_max, row_sum])]
    return run_checks("row_max and row_sum", (row_max, row_sum), cases, verbose=verbose,
                      hint_level=hint_level)


# -- checker 3: the online update (plain Python, no kernel) ----------------------------------

def _update_inputs(seed, *, empty=False, masked=False, negative=False):
    rng = np.random.default_rng(seed)
    s = (rng.standard_normal(TM * TN) * 3).astype(np.float32)
    acc = rng.standard_normal(TM * TD).astype(np.float32)
    m = rng.normal(0.0, 1.0, TM).astype(np.float32)
    if negative:        # every score and running max below 0 (a rescale gated on a sign)
        s = (s - 15).astype(np.float32)
        m = (m - 6).astype(np.float32)
    lp = rng.uniform(1.0, 3.0, TM).astype(np.float32)
    if empty:
        m[:], lp[:], acc[:] = NEG_INF, 0, 0
    if masked:
        s[:] = NEG_INF
    return s, acc, m, lp


def update_reference(s, acc, m, lp, i, mx, mistake=None):
    s, acc, m, lp = (np.array(x, np.float64) for x in (s, acc, m, lp))
    with np.errstate(all="ignore"):
        m_new = mx if mistake == "tile_max" else max(m[i], mx)
        m_use = m_new if (mistake == "no_guard" or m_new != -np.inf) else 0.0
        if mistake in ("standin_mx", "standin_old"):   # the stand-in tested on mx or m[i]
            m_use = m_new if (mx if mistake == "standin_mx" else m[i]) != -np.inf else 0.0
        m_alpha = m_new if mistake == "no_guard_alpha" else m_use     # the stand-in in one
        m_p = m_new if mistake == "no_guard_p" else m_use             # exponential only
        alpha = 1.0 if mistake == "no_rescale" else math.exp(m[i] - m_alpha) \
            if not (math.isnan(m[i] - m_alpha)) else math.nan
        if mistake == "alpha_inverted":
            alpha = 1.0 / alpha if alpha else math.inf
        if mistake != "m_not_stored":
            m[i] = m_new
        row = slice(i * TN, (i + 1) * TN)
        exp = np.exp2 if mistake == "exp2" else np.exp
        if mistake == "p_from_mx":
            m_p = mx if mx != -np.inf else 0.0
        p = exp(s[row]) if mistake == "no_shift" else exp(s[row] - m_p)
        if mistake != "p_not_stored":
            s[row] = p
        lp[i] = ((lp[i] + p.sum()) * alpha if mistake == "rescale_after"
                 else lp[i] + p.sum() if mistake == "no_rescale_lp"
                 else lp[i] * alpha + p.sum())
        if mistake != "no_rescale_acc":
            acc[i * TD:(i + 1) * TD] *= alpha
    return s, acc, m, lp


UPDATE_MISTAKES = [("no_guard", HINT_NEG_INF), ("no_guard_alpha", HINT_NEG_INF_ONE),
                   ("no_guard_p", HINT_NEG_INF_ONE), ("no_rescale", HINT_RESCALE),
                   ("tile_max", HINT_MAX), ("no_shift", HINT_SHIFT),
                   ("p_not_stored", HINT_P_NOT_STORED), ("exp2", HINT_EXP2),
                   ("standin_mx", HINT_STANDIN_WHICH), ("standin_old", HINT_STANDIN_WHICH),
                   # review round 17 a (m): each got the generic HINT_UPDATE
                   ("no_rescale_lp", HINT_RESCALE_HALF), ("no_rescale_acc", HINT_RESCALE_HALF),
                   ("alpha_inverted", HINT_ALPHA_INVERTED), ("m_not_stored", HINT_M_NOT_STORED),
                   ("p_from_mx", HINT_P_FROM_MX), ("rescale_after", HINT_RESCALE_AFTER)]


def _all_close(a, b, rtol, atol) -> bool:
    return all(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True) for x, y in zip(a, b))


def check_online_update(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Run `online_update(s, acc, m, lp, i, mx)` on arrays and compare (s, acc, m, lp)."""
    specs = [
        ("first tile: empty state, row 0", dict(seed=1, empty=True), 0, None),
        ("later tile whose max is larger, row 1", dict(seed=2), 1, 4.0),
        ("later tile whose max is smaller, row 0", dict(seed=3), 0, -5.0),
        ("later tile whose max is larger, every score and max below 0, row 1",
         dict(seed=6, negative=True), 1, -3.0),
        ("later tile whose max is smaller, row 1 (row 0's max is another)", dict(seed=7), 1,
         -5.0),
        ("a fully masked tile while the row is still empty, row 1",
         dict(seed=4, empty=True, masked=True), 1, float(NEG_INF)),
        # review round 16 a: a stand-in tested on mx passed every part case
        ("a fully masked tile after the row has seen keys, row 0",
         dict(seed=8, masked=True), 0, float(NEG_INF)),
        ("large scores (|s| ~ 80), row 0", dict(seed=5), 0, None),
    ]
    cases = []
    for name, spec, i, mx in specs:
        s, acc, m, lp = _update_inputs(**spec)
        if name.startswith("large"):
            s = (s * 27).astype(np.float32)
        if mx is None:
            mx = float(s[i * TN:(i + 1) * TN].max())
        mx = np.float32(mx)
        expected = update_reference(s, acc, m, lp, i, mx)
        diagnoses = mistake_diagnoses(
            lambda mistake, args=(s, acc, m, lp, i, mx): update_reference(*args, mistake),
            UPDATE_MISTAKES, lambda y, w: _all_close(y, w, 1e-4, 1e-5), right=expected,
            seen=lambda w, e: not _all_close(w, e, 1e-5, 1e-6))

        def run(f, args=(s, acc, m, lp, i, mx), expected=expected):
            kernel_guard(f, "online_update")
            s_, acc_, m_, lp_ = (np.array(a, np.float32) for a in args[:4])
            with np.errstate(all="ignore"):
                _as_python(f)(s_, acc_, m_, lp_, args[4], args[5])
            return tuple(np.asarray(a, np.float64) for a in (s_, acc_, m_, lp_)), expected

        cases.append(Case(name, run, HINT_UPDATE[0], diagnoses, rtol=1e-5, atol=1e-6,
                          hint2=HINT_UPDATE[1], names=("s", "acc", "m", "lp")))
    cases.append(_float32_case([fn]))
    return run_checks("online_update(s, acc, m, lp, i, mx)", fn, cases, verbose=verbose,
                      hint_level=hint_level)


# -- checker 4: everything in the kernel ---------------------------------------------------

def _inputs(seed, tq, tk, d, spread=1.0, grow=0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((tq, d)) * spread).astype(np.float32)
    k = (rng.standard_normal((tk, d)) * spread).astype(np.float32)
    v = rng.standard_normal((tk, d)).astype(np.float32)
    if grow:      # later keys line up with q more (grow=1) or less (grow=-1)
        ramp = np.linspace(0.2, 3.0, tk, dtype=np.float32)[::grow]
        k = (k * 0.2 + q.mean(axis=0) * ramp[:, None]).astype(np.float32)
    return q, k, v


#: (name, seed, Tq, Tk, d, causal, kv_start, spread, grow): tiny, for the simulator.
KERNEL_CASES = [
    ("one block, one key tile (Tq = 4, Tk = 8, d = 3)", 1, 4, 8, 3, False, 0, 1.0, 0),
    ("ragged, growing max (Tq = 5, Tk = 19, d = 5)", 2, 5, 19, 5, False, 0, 1.0, 1),
    ("left padding: the first key tile is all padding (Tq = 3, Tk = 20, keys 0-9 padded)",
     3, 3, 20, 4, False, 10, 1.0, 0),
    ("causal, Tq = 6 < Tk = 13, falling maxima", 4, 6, 13, 4, True, 0, 2.0, -1),
    ("causal, Tq = 9 > Tk = 5: rows with no key, large scores", 5, 9, 5, 4, True, 0, 6.0, 0),
]


KERNEL_MISTAKES = [("no_guard", HINT_NEG_INF), ("no_rescale", HINT_RESCALE), ("tile_max", HINT_MAX),
                   ("no_shift", HINT_SHIFT), ("max_one_step", HINT_REDUCE_STEPS),
                   ("sum_one_step", HINT_REDUCE_STEPS), ("no_sum", HINT_REDUCE_STEPS)]


def _expected(q, k, v, causal, kv_start):
    if kv_start == 0:
        return reference.attention(q, k, v, causal=causal)
    o, lse = reference.attention(q, k[kv_start:], v[kv_start:], causal=False,
                                 scale=1.0 / math.sqrt(q.shape[1]))
    return o, lse


def _negative_inputs():
    """Tq = 6, Tk = 21, d = 4, every score negative (column 0 of q is 3 and of k -3: each
    score is shifted by -4.5). The running max of rows 0, 1, 3 and 4 rises by about 1 at each
    of the three key tiles, those of rows 2 and 5 stay or fall: an online update that skips
    the rescale (or the stand-in) for a max of 0 or below is wrong here and right on the
    positive cases."""
    q, k, v = _inputs(6, 6, 21, 4, 1.0, 1)
    q[:, 0] = 3.0
    k[:, 0] = -3.0
    return q, k, v


def _negative_case() -> Case:
    q, k, v = _negative_inputs()
    expected = tuple(np.asarray(x, np.float64) for x in reference.attention(q, k, v))
    mistakes = [(m, HINT_RESCALE_SIGN if m == "no_rescale" else h) for m, h in KERNEL_MISTAKES]
    diagnoses = [((lambda y, e: bool(np.isnan(np.asarray(y[0], np.float64)).any())),
                  *HINT_OVERFLOW)] + mistake_diagnoses(
        lambda mistake: replay(q, k, v, mistake=mistake), mistakes, _close_pair)

    def run(ps):
        o, lse, _ = lab_forward(ps, q, k, v)
        return (o, lse), expected

    return Case("negative scores, the max of some rows rising after the first key tile "
                "(Tq = 6, Tk = 21, d = 4)", run, HINT_NEGATIVE[0], diagnoses, rtol=_RTOL,
                atol=_ATOL, hint2=HINT_NEGATIVE[1], time_limit_s=120, names=("o", "lse"))


#: the sign of each row's scores in the row-mix case: rows r and r ^ 1 (threads tid and
#: tid ^ CT) differ, and so do rows r and r + RT (the two rows of one thread's micro-tile)
ROW_MIX_SIGNS = (1.0, -1.0, -1.0, 1.0)


def _row_mix_inputs():
    """Tq = 4, Tk = 8, d = 4: rows 0 and 3 score about +60 against every key, rows 1 and 2
    about -60. In float32, exp(-120) underflows to 0: a row max that mixes row r with row
    r ^ 1 (the partner of thread tid ^ CT) leaves rows 1 and 2 empty; an online update that
    takes row 1's max from m[0] (a thread's rows are r and r + RT) leaves row 2 empty."""
    rng = np.random.default_rng(9)
    u = np.zeros(4, np.float32)
    u[0] = 1.0
    sign = np.asarray(ROW_MIX_SIGNS)[:, None]
    q = (12.0 * sign * u + 0.1 * rng.standard_normal((4, 4))).astype(np.float32)
    k = (10.0 * u + 0.1 * rng.standard_normal((8, 4))).astype(np.float32)
    v = rng.standard_normal((8, 4)).astype(np.float32)
    return q, k, v


def _row_mix_case() -> Case:
    q, k, v = _row_mix_inputs()
    expected = tuple(np.asarray(x, np.float64) for x in reference.attention(q, k, v))

    low = np.asarray(ROW_MIX_SIGNS) < 0

    def emptied_low_rows(y, e):
        lse = np.asarray(y[1], np.float64)
        return bool((~np.isfinite(lse[low])).all() and np.isfinite(lse[~low]).all())

    def emptied_second_row_of_a_thread(y, e):        # row 2 = row 0 + RT: only it is empty
        lse = np.asarray(y[1], np.float64)
        return bool(~np.isfinite(lse[2]) and np.isfinite(np.delete(lse, 2)).all())

    def run(ps):
        o, lse, _ = lab_forward(ps, q, k, v)
        return (o, lse), expected

    return Case("rows of very different scores: rows 0, 3 near +60, rows 1, 2 near -60",
                run, HINT_KERNEL[0], [(emptied_low_rows, *HINT_ROW_MIX),
                                      (emptied_second_row_of_a_thread, *HINT_ROW_MIX_UPDATE)],
                rtol=_RTOL,
                atol=_ATOL, hint2=HINT_KERNEL[1], time_limit_s=120, names=("o", "lse"))


def check_kernel(micro_tile_scores, row_max, row_sum, online_update, *, verbose: bool = True,
                 hint_level: int = 1) -> Result:
    """Your four parts inside the lab kernel against the float64 reference (tiny shapes)."""
    parts = (micro_tile_scores, row_max, row_sum, online_update)
    cases = []
    for name, seed, tq, tk, d, causal, kv_start, spread, grow in KERNEL_CASES:
        q, k, v = _inputs(seed, tq, tk, d, spread, grow)
        expected = tuple(np.asarray(x, np.float64) for x in _expected(q, k, v, causal, kv_start))
        # NaN: from -inf - (-inf) only where some row has no visible key in a tile while its
        # max is still -inf (left padding, causal Tq > Tk); elsewhere from an overflowing exp
        empty_rows = kv_start > 0 or (causal and tq > tk)
        diagnoses = [((lambda y, e: bool(np.isnan(np.asarray(y[0], np.float64)).any())),
                      *(HINT_NEG_INF if empty_rows else HINT_OVERFLOW))] + mistake_diagnoses(
            lambda mistake, q=q, k=k, v=v, causal=causal, kv_start=kv_start:
                replay(q, k, v, causal=causal, kv_start=kv_start, mistake=mistake),
            KERNEL_MISTAKES, _close_pair)

        def run(ps, q=q, k=k, v=v, causal=causal, kv_start=kv_start, expected=expected):
            o, lse, _ = lab_forward(ps, q, k, v, causal=causal, kv_start=kv_start)
            return (o, lse), expected

        cases.append(Case(name, run, HINT_KERNEL[0], diagnoses, rtol=_RTOL, atol=_ATOL,
                          hint2=HINT_KERNEL[1], time_limit_s=120, names=("o", "lse")))
    cases.append(_negative_case())
    cases.append(_row_mix_case())
    cases.append(_float32_case(parts))
    return run_checks("the lab kernel with your four parts", parts, cases, verbose=verbose,
                      hint_level=hint_level)


# -- going further: causal tile skipping in the kernel ------------------------------------------

def key_blocks_expected(q0, tq, tk, causal, off, mistake=None):
    """Key tiles the query block at q0 visits, optionally with one typical mistake:
    'no_skip', 'off_by_one' (last // BC), 'top_left' (off = 0), 'floor' (Tk // BC tiles),
    'negative' (no clamp at 0 for blocks that see nothing), 'first_row' (the block's first
    row's last key), 'ceil' (ceil(last / BC) tiles: one short where last starts a tile),
    'one_more' (last = q1 + off, one past), 'always_causal' (causal = 0 ignored)."""
    n = tk // BC if mistake == "floor" else ceil_div(tk, BC)
    if not causal and mistake == "always_causal":
        return key_blocks_expected(q0, tq, tk, True, off)
    if not causal or mistake == "no_skip":
        return n
    if mistake == "top_left":
        off = 0
    last = min(q0 + BR, tq) - (0 if mistake == "one_more" else 1) + off   # last key seen
    if mistake == "first_row":
        last = q0 + off
    count = last // BC + (0 if mistake == "off_by_one" else 1)
    if mistake == "ceil":
        count = -(-last // BC)
    if mistake == "negative":
        return min(n, count)
    return max(0, min(n, count)) if last >= 0 else 0


KEY_BLOCK_MISTAKES = [("no_skip", HINT_SKIP_NONE), ("top_left", HINT_SKIP_TOP_LEFT),
                      ("floor", HINT_SKIP_FLOOR), ("off_by_one", HINT_SKIP_OFF_BY_ONE),
                      ("negative", HINT_SKIP_NEGATIVE),
                      # review round 16 a (m): both got the generic HINT_SKIP
                      ("first_row", HINT_SKIP_SHORT), ("ceil", HINT_SKIP_SHORT),
                      # round 18 (mutants): both got the generic HINT_SKIP
                      ("one_more", HINT_SKIP_ONE_MORE), ("always_causal", HINT_SKIP_NOT_CAUSAL)]


def check_key_blocks(key_blocks, parts, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Your key_blocks(q0, tq, tk, causal, off) in the kernel: the tiles each query block
    visits, then the result (causal, Tq != Tk both ways)."""
    cases = []
    # a block whose last key is the first of a tile (Tk = 29: key 24) and one whose last key
    # ends a tile (Tq = 20, Tk = 12: key 7) tell last // BC + 1 from a ceiling or last + 1
    for name, tq, tk, causal in (("causal, Tq = 12 < Tk = 29", 12, 29, True),
                                 ("causal, Tq = 22 > Tk = 5: early blocks see nothing",
                                  22, 5, True),
                                 ("causal, Tq = 20 > Tk = 12: a block's last key ends a tile",
                                  20, 12, True),
                                 ("not causal, Tq = 5, Tk = 17: every tile", 5, 17, False)):
        q, k, v = _inputs(tq + tk, tq, tk, 3)
        def counts(mistake=None, tq=tq, tk=tk, causal=causal):
            return np.array([key_blocks_expected(q0, tq, tk, causal, tk - tq, mistake)
                             for q0 in range(0, tq, BR)], np.int64)
        want = counts()
        diagnoses = mistake_diagnoses(counts, KEY_BLOCK_MISTAKES,
                                      lambda y, w: np.array_equal(np.asarray(y), w))
        expected = tuple(np.asarray(x, np.float64) for x in reference.attention(
            q, k, v, causal=causal))

        def visits(f, q=q, k=k, v=v, causal=causal, want=want):
            kernel_guard(f, "key_blocks")
            py = _as_python(f)
            got = [py(q0, q.shape[0], k.shape[0], 1 if causal else 0, k.shape[0] - q.shape[0])
                   for q0 in range(0, q.shape[0], BR)]
            return np.array(got, np.int64), want

        def result(f, q=q, k=k, v=v, causal=causal, expected=expected):
            o, lse, _ = lab_forward(parts, q, k, v, causal=causal, key_blocks=f)
            return (o, lse), expected

        cases.append(Case(f"{name}: key tiles visited per query block", visits, HINT_SKIP[0],
                          diagnoses, rtol=0, atol=0, hint2=HINT_SKIP[1]))
        cases.append(Case(f"{name}: result in the kernel", result, HINT_SKIP[0], rtol=_RTOL,
                          atol=_ATOL, hint2=HINT_SKIP[1], time_limit_s=120, names=("o", "lse")))
    return run_checks("key_blocks(q0, tq, tk, causal, off)", key_blocks, cases,
                      verbose=verbose, hint_level=hint_level)


ALL_HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_")]
