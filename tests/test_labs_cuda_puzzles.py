"""Lab 05 (CUDA puzzles): every solution passes, every stub says "not implemented", each
typical mistake (an edit of the solution) gets its own hint, valid variants pass, and the
access trace counts what it claims. Runs on Numba's CUDA simulator (tiny launches).

The hidden-mutant discipline: every mistake a checker was fooled by, or named wrongly, stays
here as a mutant of the solution (`MISTAKES`) with the hint meant for it, and every unusual
correct solution found stays in `VARIANTS`, which must pass."""

import numpy as np
import pytest
from numba import cuda

from flashcourse.labs import cuda_puzzles as L
from flashcourse.labs._harness import HINT_COMPILE, HINT_NOT_KERNEL
from flashcourse.labs.cuda_puzzle_rules import HINT_LOCAL_UNSET
from labtools import (assert_hint, assert_stubs_not_implemented, edited, edits_mistakes_test,
                      functions_of, hint_leaks_test, lab_fixture, lab_path, mistakes_test,
                      mutate, variants_test)

LAB = lab_path("lab05_cuda_puzzles")
NAMES = list(L.PUZZLES)

lab = lab_fixture(LAB)


def check(name):
    return L.puzzle(name).check


#: (checker, puzzle) pairs, as labtools' builders take them
CHECKS = [(check(n), n) for n in NAMES]


def test_the_ladder_has_at_least_ten_puzzles():
    assert len(NAMES) >= 10 and [p.number for p in L.PUZZLES.values()] == list(
        range(1, len(NAMES) + 1))


@pytest.mark.parametrize("name", NAMES)
def test_solution_passes(lab, name):
    assert check(name)(lab[name], verbose=False).passed


def test_stubs_report_not_implemented(capsys):
    student = functions_of(LAB, student=True)
    results = [check(n)(student[n]) for n in NAMES]
    assert_stubs_not_implemented(results, capsys.readouterr().out)
    L.puzzle("map_guard").show(student["map_guard"])
    assert "Not implemented yet" in capsys.readouterr().out


#: name -> [(solution text, the mistake that replaces it, the hint it must get), ...]
MISTAKES = {
    "map_guard": [
        ("@cuda.jit\ndef map_guard", "def map_guard", (HINT_NOT_KERNEL,)),
        ("    if i < n:\n        out[i]", "    if True:\n        out[i]", L.HINT_EDGE),
        ("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x", "i = cuda.threadIdx.x",
         L.HINT_BLOCK_INDEX),
        ("if i < n:", "if i < n - 1:", L.HINT_GUARD_SHORT),
        ("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x",
         "i = min(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, n - 1)", L.HINT_TWICE),
    ],
    "broadcast_2d": [
        ("out[r, c] = a[r, c] * b[c]", "out[r, c] = a[r, c] * b[r]", L.HINT_BROADCAST),
        ("if r < rows and c < cols:", "if r < rows:", L.HINT_EDGE),
        ("    c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x\n"
         "    r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y",
         "    r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x\n"
         "    c = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y", L.HINT_SWAPPED_XY),
        # review round 12: a read with its axes swapped, every access guarded
        ("out[r, c] = a[r, c] * b[c]", "out[r, c] = a[c, r] * b[c]", L.HINT_EDGE),
    ],
    "halo_sum": [
        ("cuda.shared.array(SH3, float32)", "cuda.shared.array(TPB3 + 1, float32)",
         (HINT_COMPILE,)),
        ("    cuda.syncthreads()\n    if i < n:\n        out[i] = sh[t] + sh[t + 1]",
         "    if i < n:\n        out[i] = sh[t] + sh[t + 1]", L.HINT_SYNC),
        ("        sh[TPB3] = a[i + 1] if i + 1 < n else F0", "        pass", L.HINT_HALO),
        ("out[i] = sh[t] + sh[t + 1]", "out[i] = sh[t] + (a[i + 1] if i + 1 < n else F0)",
         L.HINT_HALO_GLOBAL),
        ("sh[t] = a[i] if i < n else F0", "sh[t] = a[i]", L.HINT_EDGE),
        # a barrier inside the guard: the ragged block's idle threads never reach it
        ("    cuda.syncthreads()\n    if i < n:\n        out[i] = sh[t] + sh[t + 1]",
         "    if i < n:\n        cuda.syncthreads()\n        out[i] = sh[t] + sh[t + 1]",
         L.HINT_DIVERGENT_BARRIER),
        # the halo never loaded and no barrier either: the unloaded element is named first
        ("        sh[TPB3] = a[i + 1] if i + 1 < n else F0\n    cuda.syncthreads()",
         "        pass", L.HINT_HALO),
        ("sh[t] = a[i] if i < n else F0", "sh[t] = a[i] if i < n else 0.0", L.HINT_FLOAT64),
        # review round 12: a negative shared index was named "the ragged edge"
        ("out[i] = sh[t] + sh[t + 1]", "out[i] = sh[t] + sh[t - 1]", L.HINT_INDEX),
    ],
    "block_reduce": [
        ("        cuda.syncthreads()\n        stride //= 2", "        stride //= 2", L.HINT_SYNC),
        ("        s_max[t] = NEG_INF", "        s_max[t] = F0", L.HINT_PAD_MAX),
        ("stride = TPB4 // 2", "stride = TPB4 // 4", L.HINT_TREE),
        ("    if t == 0:\n        out_sum", "    if t < 2:\n        out_sum", L.HINT_ONE_WRITER),
        ("    if i < n:\n        s_sum[t] = a[i]", "    if True:\n        s_sum[t] = a[i]",
         L.HINT_EDGE),
        ("            s_max[t] = max(s_max[t], s_max[t + stride])\n        cuda.syncthreads()",
         "            s_max[t] = max(s_max[t], s_max[t + stride])\n            cuda.syncthreads()",
         L.HINT_DIVERGENT_BARRIER),
        # thread 0 sums the block alone (right values, no tree)
        ("    stride = TPB4 // 2\n", "    stride = 0\n    if t == 0:\n"
         "        for j in range(1, TPB4):\n            s_sum[0] += s_sum[j]\n"
         "            s_max[0] = max(s_max[0], s_max[j])\n", L.HINT_SERIAL),
        # review round 12: a shared index past the block's array (t <= stride)
        ("        if t < stride:", "        if t <= stride:", L.HINT_INDEX),
    ],
    "butterfly": [
        ("        offset //= 2\n    out_sum", "        offset = 0\n    out_sum", L.HINT_FLY_STEPS),
        ("offset = GROUP5 // 2", "offset = GROUP5", L.HINT_FLY_CROSS),
        ("        s += shfl_xor(s, offset, scratch, lane)\n"
         "        m = max(m, shfl_xor(m, offset, scratch, lane))",
         "        s = max(s, shfl_xor(s, offset, scratch, lane))\n"
         "        m += shfl_xor(m, offset, scratch, lane)", L.HINT_FLY_OP),
        ("    s = x[i]\n    m = s", "    s = x[i]\n    m = x[i]\n    s = x[i]",
         L.HINT_FLY_GLOBAL),
        ("offset = GROUP5 // 2", "offset = 16", L.HINT_FLY_CROSS),
        ("        offset //= 2\n    out_sum", "        offset //= 4\n    out_sum",
         L.HINT_FLY_STEPS),
        ("        offset //= 2\n    out_sum", "        offset -= 1\n    out_sum",
         L.HINT_FLY_HALVE),
        # the partner's x read from global memory at each step (the issue's "right values,
        # but lanes read other lanes' x" under a line saying the values differ)
        ("        s += shfl_xor(s, offset, scratch, lane)\n"
         "        m = max(m, shfl_xor(m, offset, scratch, lane))",
         "        s += x[i ^ offset]\n        m = max(m, x[i ^ offset])", L.HINT_FLY_PARTNER),
        ("        s += shfl_xor(s, offset, scratch, lane)\n"
         "        m = max(m, shfl_xor(m, offset, scratch, lane))",
         "        if lane % GROUP5 < GROUP5 // 2:\n"
         "            s += shfl_xor(s, offset, scratch, lane)\n"
         "            m = max(m, shfl_xor(m, offset, scratch, lane))", L.HINT_SHFL_DIVERGENT),
    ],
    "matmul_tiled": [
        ("            acc += As[ty, kk] * Bs[kk, tx]\n        cuda.syncthreads()",
         "            acc += As[ty, kk] * Bs[kk, tx]", L.HINT_SYNC),
        ("for kt in range((k + T6 - 1) // T6):", "for kt in range(k // T6):", L.HINT_K_TILES),
        ("As[ty, tx] = a[row, ka] if (row < m and ka < k) else F0", "As[ty, tx] = a[row, ka]",
         L.HINT_TILE_EDGE),
        ("acc += As[ty, kk] * Bs[kk, tx]",
         "acc += (a[row, kt * T6 + kk] if (row < m and kt * T6 + kk < k) else F0) * Bs[kk, tx]",
         L.HINT_MATMUL_GLOBAL),
        # round 18 (mutants): the store left unguarded got the tile-load hint
        ("    if row < m and col < n:\n        c[row, col] = acc", "    c[row, col] = acc",
         L.HINT_TILE_STORE),
    ],
    "matmul_micro": [
        # a size computed inside the kernel: the GPU compiler refuses it, the simulator not
        ("cuda.local.array(ACC7, float32)", "cuda.local.array(TM7 * TN7, float32)",
         (HINT_COMPILE,)),
        ("                acc[i * TN7 + j] += ra[i] * rb[j]",
         "                acc[i * TN7 + j] += As[ty + B7 * i, kk] * Bs[kk, tx + B7 * j]",
         L.HINT_MICRO_REUSE),
        # review round 12: a copy loop stepping by 4 threads, not 16 (overlapping stores of
        # the same values) was "a missing barrier"
        ("for e in range(tid, B7 * TM7 * K7, B7 * B7):", "for e in range(tid, B7 * TM7 * K7, B7):",
         L.HINT_OVERLAP),
        ("    cuda.syncthreads()\n    for x in range(TM7 * TN7):",
         "    for x in range(TM7 * TN7):", L.HINT_SYNC),
        ("            if row < m and col < n:\n                c[row, col]",
         "            if True:\n                c[row, col]", L.HINT_MICRO_EDGE),
    ],
    "row_sums": [
        ("    for e in range(t, rows * cols, 32):\n        r = e // cols\n        c = e % cols\n"
         "        sh[r, c] = a[r, c]",
         "    for c in range(cols):\n        if t < rows:\n            sh[t, c] = a[t, c]",
         L.HINT_STRIDED),
        ("    cuda.syncthreads()\n    if t < rows:", "    if t < rows:", L.HINT_SYNC),
        ("    if t < rows:\n        s = F0", "    if True:\n        s = F0", L.HINT_EDGE),
    ],
    "transpose": [
        ("(32, 33)", "(32, 32)", L.HINT_BANKS),
        ("            out[c, lane] = tile[lane, c]", "            out[c, lane] = a[lane, c]",
         L.HINT_TRANSPOSE_STRIDED),
        ("    cuda.syncthreads()\n    if lane < rows:", "    if lane < rows:", L.HINT_SYNC),
        ("out[c, lane] = tile[lane, c]", "out[lane, c] = tile[lane, c]", L.HINT_NOT_TRANSPOSED),
    ],
    "softmax_rows": [
        ("        l = l * math.exp(m - m_use) + math.exp(v - m_use)",
         "        l = l + math.exp(v - m_use)", L.HINT_SM_RESCALE),
        ("        l = l * math.exp(m - m_use) + l_o * math.exp(m_o - m_use)",
         "        l = l + l_o", L.HINT_SM_MERGE),
        # review round 16 a (m): half the merge (one of the two sums rescaled) got HINT_SOFTMAX
        ("        l = l * math.exp(m - m_use) + l_o * math.exp(m_o - m_use)",
         "        l = l * math.exp(m - m_use) + l_o", L.HINT_SM_MERGE),
        ("        l = l * math.exp(m - m_use) + l_o * math.exp(m_o - m_use)",
         "        l = l + l_o * math.exp(m_o - m_use)", L.HINT_SM_MERGE),
        ("        m_use = m_new if m_new != NEG_INF else F0\n        l = l * math.exp(m - m_use) "
         "+ math.exp(v - m_use)", "        m_use = m_new\n        l = l * math.exp(m - m_use) "
         "+ math.exp(v - m_use)", L.HINT_SM_NAN),
        ("out[r, c] = math.exp(x[r, c] - m) / l", "out[r, c] = math.exp(x[r, c]) / l",
         L.HINT_SM_SHIFT),
        # every lane assumed to hold an element: the rows of 10 have lanes with none
        ("    m = NEG_INF\n    l = F0\n    for c in range(lane, cols, 32):",
         "    m = x[r, lane]\n    l = F0\n    for c in range(lane, cols, 32):", L.HINT_EDGE),
        # no butterfly: each lane's own statistics (NaN in the masked row, not a stand-in slip)
        ("    offset = 16\n    while offset > 0:", "    offset = 0\n    while offset > 0:",
         L.HINT_SM_LANES),
        # round 18 (mutants): a lane's max started at 0 passed (no row far below 0); only
        # out[r, lane] written (NaN past column 32) got the overflow hint
        ("    m = NEG_INF\n    l = F0\n    for c in range(lane, cols, 32):",
         "    m = F0\n    l = F0\n    for c in range(lane, cols, 32):", L.HINT_SM_INIT),
        ("    for c in range(lane, cols, 32):\n        out[r, c] = math.exp(x[r, c] - m) / l",
         "    if lane < cols:\n        out[r, lane] = math.exp(x[r, lane] - m) / l",
         L.HINT_SM_UNWRITTEN),
    ],
    "flash_block": [
        ("            if k0 + c < tk:\n", "            if True:\n", L.HINT_FLASH_MASK),
        # review round 16 a (m): o = acc, never divided by l, got the generic HINT_FLASH
        ("            o[r, x] = acc[x] / l", "            o[r, x] = acc[x]", L.HINT_FLASH_DIVIDE),
        ("                alpha = math.exp(m - m_new)", "                alpha = float32(1)",
         L.HINT_FLASH_RESCALE),
        ("acc[x] = acc[x] * alpha + p * vs[c, x]", "acc[x] = acc[x] + p * vs[c, x]",
         L.HINT_FLASH_RESCALE_ACC),
        ("                l = l * alpha + p\n", "                l = l + p\n",
         L.HINT_FLASH_RESCALE_L),
        ("qr[x] = q[r, x] * scale if", "qr[x] = q[r, x] if", L.HINT_FLASH_SCALE),
        ("    for k0 in range(0, tk, BC11):\n        cuda.syncthreads()\n",
         "    for k0 in range(0, tk, BC11):\n", L.HINT_SYNC),
        ("s += qr[x] * ks[c, x]", "s += qr[x] * (k[k0 + c, x] if x < d else F0)",
         L.HINT_FLASH_GLOBAL),
        ("alpha = math.exp(m - m_new)", "alpha = math.exp(m - m_new) * 1.0", L.HINT_FLOAT64),
        # review round 6 ac, M5: overflowing exponentials made NaN, named as an unset local
        ("p = math.exp(s - m_new)", "p = math.exp(s - m)", L.HINT_FLASH_OVERFLOW),
        ("alpha = math.exp(m - m_new)", "alpha = math.exp(m_new - m)", L.HINT_FLASH_OVERFLOW),
        # review round 17 a (M): a shift by the latest score, not the running max, passed
        ("m_new = max(m, s)", "m_new = s", L.HINT_FLASH_OVERFLOW),
        ("        qr[x] = q[r, x] * scale if (r < tq and x < d) else F0\n        acc[x] = F0\n",
         "        qr[x] = q[r, x] * scale if (r < tq and x < d) else F0\n", HINT_LOCAL_UNSET),
        # round 18 (mutants): the row max started at 0 passed (no row far below 0); the copy
        # loop stepped by 32 (half of each tile never loaded) and the barrier after the copy
        # left out got the overflow hint
        ("    m = NEG_INF\n    l = F0\n    for k0", "    m = F0\n    l = F0\n    for k0",
         L.HINT_FLASH_INIT),
        ("for e in range(r, BC11 * D11, BR11):", "for e in range(r, BC11 * D11, 32):",
         L.HINT_FLASH_UNLOADED),
        ("            vs[c, x] = v[k0 + c, x] if ok else F0\n        cuda.syncthreads()\n",
         "            vs[c, x] = v[k0 + c, x] if ok else F0\n", L.HINT_SYNC),
        # round 18 (mutants): both got the generic HINT_FLASH
        ("                m = m_new\n", "", L.HINT_FLASH_STALE_MAX),
        ("for k0 in range(0, tk, BC11):", "for k0 in range(0, tk - BC11 + 1, BC11):",
         L.HINT_FLASH_RAGGED),
    ],
    "histogram": [
        # plain read-modify-writes: of the global histogram, of the shared one
        ("        cuda.atomic.add(hist, t, sh[t])", "        hist[t] += sh[t]",
         L.HINT_ATOMIC_GLOBAL),
        ("        cuda.atomic.add(sh, int(x[i]), ONE)", "        sh[int(x[i])] += ONE",
         L.HINT_ATOMIC_SHARED),
        ("    if t < NB12:\n        sh[t] = F0\n", "", L.HINT_HIST_ZERO),
        # review round 12: shared indices past the bins, or negative, were "the ragged edge";
        # zeroing by overlapping threads was "a missing barrier"
        ("    if t < NB12:\n        sh[t] = F0", "    if t <= NB12:\n        sh[t] = F0",
         L.HINT_INDEX),
        ("cuda.atomic.add(sh, int(x[i]), ONE)", "cuda.atomic.add(sh, int(x[i]) - 1, ONE)",
         L.HINT_INDEX),
        ("    if t < NB12:\n        sh[t] = F0", "    sh[t % NB12] = F0", L.HINT_OVERLAP),
        ("        sh[t] = F0\n    cuda.syncthreads()", "        sh[t] = F0", L.HINT_SYNC),
        ("        cuda.atomic.add(sh, int(x[i]), ONE)\n    cuda.syncthreads()",
         "        cuda.atomic.add(sh, int(x[i]), ONE)", L.HINT_SYNC),
        ("    if t < NB12:\n        cuda.atomic.add(hist, t, sh[t])",
         "    for j in range(NB12):\n        cuda.atomic.add(hist, j, sh[j])",
         L.HINT_FLUSH_ONCE),
        # no privatisation: one global atomic per element (right values)
        ("        cuda.atomic.add(sh, int(x[i]), ONE)\n    cuda.syncthreads()\n"
         "    if t < NB12:\n        cuda.atomic.add(hist, t, sh[t])",
         "        cuda.atomic.add(hist, int(x[i]), ONE)\n    cuda.syncthreads()",
         L.HINT_PRIVATE),
        ("    if i < n:\n        cuda.atomic.add(sh", "    if True:\n        cuda.atomic.add(sh",
         L.HINT_EDGE),
        ("cuda.atomic.add(sh, int(x[i]), ONE)", "cuda.atomic.add(sh, int(x[i]), 1.0)",
         L.HINT_FLOAT64),
    ],
    "stage_reverse": [
        ("    wait_all()\n", "", L.HINT_CP_WAIT),
        ("    commit_group()\n", "", L.HINT_CP_COMMIT),
        ("    wait_all()\n    cuda.syncthreads()\n", "    wait_all()\n", L.HINT_CP_BARRIER),
        # the wait after the reads
        ("    wait_all()\n    cuda.syncthreads()\n", "    cuda.syncthreads()\n",
         L.HINT_CP_WAIT),
        # indices in 16-byte units instead of floats
        ("cp_async16(sm, FLOATS_PER_COPY * t, x, TILE13 * b + FLOATS_PER_COPY * t, nbytes)",
         "cp_async16(sm, t, x, TILE13 * b + t, nbytes)", L.HINT_CP_UNITS),
        ("    nbytes = 16 if row < rows else 0\n", "    nbytes = 16\n", L.HINT_CP_EDGE),
        # review round 12: both were "a copy read past the end of x"
        ("sm[COLS13 * i + COLS13 - 1 - t]", "sm[COLS13 * i + COLS13 - t]", L.HINT_INDEX),
        ("        if r < rows:\n            out", "        if True:\n            out",
         L.HINT_CP_OUT_EDGE),
        # the tile staged through registers: right values, no cp.async
        ("    cp_async16(sm, FLOATS_PER_COPY * t, x, TILE13 * b + FLOATS_PER_COPY * t, nbytes)\n",
         "    for e in range(FLOATS_PER_COPY):\n"
         "        j = FLOATS_PER_COPY * t + e\n"
         "        sm[j] = x[TILE13 * b + j] if row < rows else F0\n", L.HINT_CP_REGISTERS),
    ],
}

#: mistakes that need more than one edit: name -> (puzzle, [(old, new), ...], hint)
_FLASH_ONLINE = ("                m_new = max(m, s)\n"
                 "                alpha = math.exp(m - m_new)\n"
                 "                p = math.exp(s - m_new)\n"
                 "                l = l * alpha + p\n"
                 "                for x in range(D11):\n"
                 "                    acc[x] = acc[x] * alpha + p * vs[c, x]\n"
                 "                m = m_new")
_FLASH_LOOP = "    m = NEG_INF\n    l = F0\n    for k0 in range(0, tk, BC11):\n"


def _two_pass(store, alloc):
    """The plain softmax in the flash kernel: a first sweep over the key tiles keeps every
    score of the row (in `store`, allocated by `alloc`) and the row's max; the second sweep
    (the solution's loop) adds exp(score - max) without any rescale."""
    first = ("    m = NEG_INF\n    l = F0\n" + alloc +
             "    for k0 in range(0, tk, BC11):\n        cuda.syncthreads()\n"
             "        for e in range(r, BC11 * D11, BR11):\n"
             "            c = e // D11\n            x = e % D11\n"
             "            ks[c, x] = k[k0 + c, x] if (k0 + c < tk and x < d) else F0\n"
             "        cuda.syncthreads()\n        for c in range(BC11):\n"
             "            if k0 + c < tk:\n                s = F0\n"
             "                for x in range(D11):\n                    s += qr[x] * ks[c, x]\n"
             f"                {store} = s\n                m = max(m, s)\n"
             "    for k0 in range(0, tk, BC11):\n")
    second = (f"                p = math.exp({store} - m)\n                l = l + p\n"
              "                for x in range(D11):\n"
              "                    acc[x] = acc[x] + p * vs[c, x]")
    return [(_FLASH_LOOP, first), (_FLASH_ONLINE, second)]


MULTI = {
    "two-pass, row in a local array": ("flash_block", _two_pass(
        "row[k0 + c]", "    row = cuda.local.array(512, float32)\n"), L.HINT_FLASH_ROW),
    "two-pass, rows in shared memory": ("flash_block", _two_pass(
        "rows[r, k0 + c]", "    rows = cuda.shared.array((BR11, 512), float32)\n"),
        L.HINT_FLASH_ROW),
}


def test_every_puzzle_replays_at_least_three_mistakes():
    assert set(MISTAKES) == set(NAMES)
    assert all(len(edits) >= 3 for edits in MISTAKES.values())


test_mistake_gets_its_hint = mistakes_test(
    LAB, CHECKS, MISTAKES, ids=[f"{name}-{n}" for n, name in enumerate(
        name for name, edits in MISTAKES.items() for _ in edits)])
test_multi_edit_mistake_gets_its_hint = edits_mistakes_test(LAB, CHECKS, MULTI)


class _NumpyAnswer:
    """Launchable-looking (kernel[grid, block](...)) but no kernel: numpy writes the answer
    into the output array in one go."""

    def __getitem__(self, launch):
        def run(q, k, v, o, tq, tk, d, scale):
            q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
            s = q @ k.T * scale
            p = np.exp(s - s.max(axis=1, keepdims=True))
            o[:] = p @ v / p.sum(axis=1, keepdims=True)
        return run


def test_an_object_that_is_not_a_numba_kernel_is_refused(capsys):
    assert_hint(check("flash_block"), _NumpyAnswer(), L.HINT_NOT_NUMBA[0])
    L.puzzle("flash_block").show(_NumpyAnswer())
    assert "@cuda.jit" in capsys.readouterr().out


def test_a_kernel_that_reads_no_input_fails_the_read_check():
    """A real kernel that copies the answer from an array outside its arguments: an empty
    trace is within every read budget, so the checker asks for the reads themselves.
    (`cuda` is a module-level name: the simulator swaps it in the kernel's globals.)"""
    P = L.puzzle("butterfly")
    want = P.spec({"x": np.asarray(P.cases[0].arrays["x"], np.float64)}, {})
    answer_sum = np.float32(want["out_sum"])
    answer_max = np.float32(want["out_max"])

    @cuda.jit
    def butterfly(x, out_sum, out_max):
        i = cuda.blockIdx.x * 32 + cuda.threadIdx.x
        out_sum[i] = answer_sum[i]
        out_max[i] = answer_max[i]

    assert_hint(P.check, butterfly, L.HINT_EMPTY_TRACE[0])


def test_right_values_hints_fire_only_on_right_values():
    """A "Right values, but" hint is a rule's (checked only when the values are right),
    never a replayed mistake's or a first diagnosis's, which name wrong values."""
    right = [h for h in L.ALL_HINTS if h[0].startswith("Right values")]
    assert len(right) >= 8
    for P in L.PUZZLES.values():
        assert all(not h[0].startswith("Right values") for _, h in P.mistakes + P.first)
        assert all(r.needs_right_values == r.hint[0].startswith("Right values")
                   for r in P.rules)


#: valid variants, each a list of edits: other index arithmetic, conversions, other orders
VARIANTS = {
    "grid(1)": ("map_guard", [("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x",
                               "i = cuda.grid(1)")]),
    "early return": ("map_guard", [
        ("    if i < n:\n        out[i] = float32(2) * a[i] + float32(1)",
         "    if i >= n:\n        return\n    out[i] = a[i] + a[i] + float32(1.0)")]),
    "np.float32 constants, guard n > i": ("map_guard", [
        ("if i < n:", "if n > i:"),
        ("float32(2) * a[i] + float32(1)", "np.float32(2.0) * a[i] + np.float32(1.0)")]),
    "row views": ("broadcast_2d", [("out[r, c] = a[r, c] * b[c]",
                                    "row = a[r]\n        out[r][c] = row[c] * b[c]")]),
    "halo loaded by thread 0": ("halo_sum", [
        ("    if t == TPB3 - 1:\n        sh[TPB3] = a[i + 1] if i + 1 < n else F0",
         "    if t == 0:\n        sh[TPB3] = a[i + TPB3] if i + TPB3 < n else F0")]),
    "halo loaded after the barrier by the thread that reads it": ("halo_sum", [
        ("    if t == TPB3 - 1:\n        sh[TPB3] = a[i + 1] if i + 1 < n else F0\n"
         "    cuda.syncthreads()\n",
         "    cuda.syncthreads()\n    if t == TPB3 - 1:\n"
         "        sh[TPB3] = a[i + 1] if i + 1 < n else F0\n")]),
    "for over a tuple of strides, max by a comparison": ("block_reduce", [
        ("    stride = TPB4 // 2\n    while stride > 0:",
         "    for stride in (32, 16, 8, 4, 2, 1):"),
        ("        stride //= 2\n", ""),
        ("            s_max[t] = max(s_max[t], s_max[t + stride])",
         "            if s_max[t + stride] > s_max[t]:\n"
         "                s_max[t] = s_max[t + stride]")]),
    "for over a tuple of offsets": ("butterfly", [
        ("    offset = GROUP5 // 2\n    while offset > 0:", "    for offset in (4, 2, 1):"),
        ("        offset //= 2\n", "")]),
    "while over k tiles, kk downwards": ("matmul_tiled", [
        ("    for kt in range((k + T6 - 1) // T6):", "    kt = 0\n    while kt * T6 < k:"),
        ("        cuda.syncthreads()\n    if row < m and col < n:",
         "        cuda.syncthreads()\n        kt += 1\n    if row < m and col < n:"),
        ("for kk in range(T6):", "for kk in range(T6 - 1, -1, -1):")]),
    "micro-tile j before i": ("matmul_micro", [
        ("        for i in range(TM7):\n            for j in range(TN7):\n"
         "                acc[i * TN7 + j] += ra[i] * rb[j]",
         "        for j in range(TN7):\n            for i in range(TM7):\n"
         "                prod = ra[i] * rb[j]\n                acc[i * TN7 + j] += prod")]),
    "offsets upwards, np.float32 start": ("softmax_rows", [
        ("    m = NEG_INF\n    l = F0\n", "    m = np.float32(-np.inf)\n    l = np.float32(0)\n"),
        ("    offset = 16\n    while offset > 0:", "    offset = 1\n    while offset < 32:"),
        ("        offset //= 2\n", "        offset *= 2\n")]),
    "one rescale per tile (the tile's scores in a local array)": ("flash_block", [
        ("    m = NEG_INF\n", "    m = NEG_INF\n    sc = cuda.local.array(BC11, float32)\n"),
        ("        for c in range(BC11):\n            if k0 + c < tk:\n"
         "                s = F0\n                for x in range(D11):\n"
         "                    s += qr[x] * ks[c, x]\n                m_new = max(m, s)\n"
         "                alpha = math.exp(m - m_new)\n                p = math.exp(s - m_new)\n"
         "                l = l * alpha + p\n                for x in range(D11):\n"
         "                    acc[x] = acc[x] * alpha + p * vs[c, x]\n                m = m_new",
         "        m_new = m\n        for c in range(BC11):\n            sc[c] = NEG_INF\n"
         "            if k0 + c < tk:\n                s = F0\n"
         "                for x in range(D11):\n                    s += qr[x] * ks[c, x]\n"
         "                sc[c] = s\n                m_new = max(m_new, s)\n"
         "        alpha = math.exp(m - m_new)\n        l = l * alpha\n"
         "        for x in range(D11):\n            acc[x] = acc[x] * alpha\n"
         "        for c in range(BC11):\n            if k0 + c < tk:\n"
         "                p = math.exp(sc[c] - m_new)\n                l = l + p\n"
         "                for x in range(D11):\n"
         "                    acc[x] = acc[x] + p * vs[c, x]\n        m = m_new")]),
    "grid(2)": ("broadcast_2d", [
        ("    c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x\n"
         "    r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y",
         "    c, r = cuda.grid(2)")]),
    "blockDim": ("block_reduce", [("stride = TPB4 // 2", "stride = cuda.blockDim.x // 2")]),
    "offsets 1, 2, 4": ("butterfly", [("    offset = GROUP5 // 2\n    while offset > 0:",
                                       "    offset = 1\n    while offset < GROUP5:"),
                                      ("        offset //= 2\n    out_sum",
                                       "        offset *= 2\n    out_sum")]),
    "swizzle": ("transpose", [("(32, 33)", "(32, 32)"),
                              ("tile[r, lane] = a[r, lane]", "tile[r, lane ^ r] = a[r, lane]"),
                              ("out[c, lane] = tile[lane, c]",
                               "out[c, lane] = tile[lane, c ^ lane]")]),
    "contiguous micro-tile": ("matmul_micro", [("ty + B7 * i", "ty * TM7 + i"),
                                               ("tx + B7 * j", "tx * TN7 + j")]),
    # thread 0 zeroes and flushes alone, skipping empty bins; the bin by math.floor
    "histogram by thread 0, empty bins skipped": ("histogram", [
        ("    if t < NB12:\n        sh[t] = F0\n",
         "    if t == 0:\n        for j in range(NB12):\n            sh[j] = F0\n"),
        ("cuda.atomic.add(sh, int(x[i]), ONE)",
         "cuda.atomic.add(sh, int(math.floor(x[i])), float32(1))"),
        ("    if t < NB12:\n        cuda.atomic.add(hist, t, sh[t])",
         "    if t == 0:\n        for j in range(NB12):\n            c = sh[j]\n"
         "            if c != F0:\n                cuda.atomic.add(hist, j, c)")]),
    # thread t copies the chunk of thread 31 - t, an empty group committed too, the rows
    # written in the other order
    "copies in another order, two groups": ("stage_reverse", [
        ("    cp_async16(sm, FLOATS_PER_COPY * t, x, TILE13 * b + FLOATS_PER_COPY * t, nbytes)\n"
         "    commit_group()\n",
         "    s = FLOATS_PER_COPY * (31 - t)\n"
         "    row = ROWS13 * b + s // COLS13\n"
         "    cp_async16(sm, s, x, TILE13 * b + s, 16 if row < rows else 0)\n"
         "    commit_group()\n    commit_group()\n"),
        ("    for i in range(ROWS13):\n        r = ROWS13 * b + i",
         "    for i in range(ROWS13 - 1, -1, -1):\n        r = ROWS13 * b + i")]),
}

test_valid_variant_passes = variants_test(LAB, CHECKS, VARIANTS)


def test_trace_counts_conflicts_and_sectors(lab):
    """The padded tile has no conflicts, the unpadded one 31 extra passes per column read."""
    P = L.puzzle("transpose")
    case = next(c for c in P.cases if c.scalars["rows"] == 32)
    good = L.launch(lab["transpose"], case).trace
    bad = L.launch(mutate(LAB, "transpose", "(32, 33)", "(32, 32)"), case).trace
    assert good.bank_conflicts() == (0, 1)
    assert bad.bank_conflicts() == (32 * 31, 32)
    touched, ideal = good.sectors()
    assert touched == ideal == 2 * 32 * 4               # 32 rows read + 32 written, 4 each


def test_show_prints_counts_and_expected_totals(lab, capsys):
    L.puzzle("halo_sum").show(lab["halo_sum"])
    out = capsys.readouterr().out
    assert "expected:" in out and "all as expected" in out and "thread 31" in out
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.parametrize("name", ["block_reduce", "matmul_tiled"])
def test_show_agrees_with_the_solution(lab, capsys, name):
    """The expected totals count the reads a guarded load really makes (puzzle 6's ragged
    tiles skip what lies outside the matrices)."""
    L.puzzle(name).show(lab[name])
    out = capsys.readouterr().out
    assert "all as expected" in out and "differs" not in out, out


def test_views_keep_their_offsets_and_barriers_are_recorded(lab):
    """An element read through a row view (out[r][c]) is recorded at its offset in the whole
    array; every thread's barriers are listed, in order."""
    P = L.puzzle("broadcast_2d")
    rows = functions_of(LAB, replace=[("out[r, c] = a[r, c] * b[c]",
                                       "out[r][c] = a[r][c] * b[c]")])["broadcast_2d"]
    case = P.cases[0]
    assert L.launch(rows, case).trace.written_by("out") == \
        L.launch(lab["broadcast_2d"], case).trace.written_by("out")
    trace = L.launch(lab["block_reduce"], L.puzzle("block_reduce").cases[1]).trace
    assert trace.divergent_barriers() == ("", "")
    assert {len(b) for b in trace.barriers.values()} == {7}          # one load + 6 steps


test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)


def test_rescale_and_shift_hints_name_the_slip_behind_them():
    """Review round 6 ac, M4 and M6: alpha taken after the max was overwritten (exp(0) = 1)
    and a stand-in keyed on the old max (m_use = 0 at the first element) reproduce the
    replayed 'no rescale' and 'no shift'; the hints must name that slip too."""
    late = [("                m_new = max(m, s)\n",
             "                m_new = max(m, s)\n                m = m_new\n")]
    result = assert_hint(check("flash_block"), edited(LAB, "flash_block", late),
                         L.HINT_FLASH_RESCALE[0])
    assert "exp(0)" in result.hint
    sm = ("        m_use = m_new if m_new != NEG_INF else F0\n"
          "        l = l * math.exp(m - m_use) + math.exp(v - m_use)\n        m = m_new\n")
    late = [(sm, "        m_use = m_new if m_new != NEG_INF else F0\n        m = m_new\n"
                 "        l = l * math.exp(m - m_use) + math.exp(v - m_use)\n")]
    result = assert_hint(check("softmax_rows"), edited(LAB, "softmax_rows", late),
                         L.HINT_SM_RESCALE[0])
    assert "exp(0)" in result.hint
    guard = [(sm, sm.replace("if m_new != NEG_INF", "if m != NEG_INF"))]
    result = assert_hint(check("softmax_rows"), edited(LAB, "softmax_rows", guard),
                         L.HINT_SM_SHIFT[0])
    assert "test m_new, not the old m" in result.hint


def test_the_edge_hint_also_names_an_index_with_its_axes_swapped():
    """Review round 12: a[c, r] for a[r, c] behind a right guard stops at a[10, 0]; the
    edge hint told only of extra threads past the ragged edge."""
    fn = mutate(LAB, "broadcast_2d", "out[r, c] = a[r, c] * b[c]", "out[r, c] = a[c, r] * b[c]")
    result = assert_hint(check("broadcast_2d"), fn, L.HINT_EDGE[0])
    assert "order of its axes" in result.hint


def test_overlapping_stores_are_not_called_a_race_of_a_missing_barrier(lab):
    """Review round 12: stores of several threads to one shared element with no read between
    the barriers are overlapping shares of the work; a read among them is a race."""
    P = L.puzzle("matmul_micro")
    fn = mutate(LAB, "matmul_micro", "for e in range(tid, B7 * TM7 * K7, B7 * B7):",
                "for e in range(tid, B7 * TM7 * K7, B7):")
    trace = L.launch(fn, P.cases[0]).trace
    assert trace.overlapping_writes() and not L.no_races(trace, P.cases[0])
    assert not L.launch(lab["matmul_micro"], P.cases[0]).trace.overlapping_writes()
    racy = mutate(LAB, "matmul_micro", "    cuda.syncthreads()\n    for x in range(TM7 * TN7):",
                  "    for x in range(TM7 * TN7):")
    trace = L.launch(racy, P.cases[0]).trace
    assert L.no_races(trace, P.cases[0]) and not trace.overlapping_writes()
