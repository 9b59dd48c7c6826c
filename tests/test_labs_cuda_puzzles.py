"""Lab 05 (CUDA puzzles): every solution passes, every stub says "not implemented", each
typical mistake (an edit of the solution) gets its own hint, valid variants pass, and the
access trace counts what it claims. Runs on Numba's CUDA simulator (tiny launches)."""

import pytest

from flashcourse.labs import cuda_puzzles as L
from flashcourse.labs._harness import HINT_COMPILE, HINT_NOT_KERNEL
from labtools import (assert_hint, assert_stubs_not_implemented, functions_of,
                      hint_leaks_test, lab_fixture, lab_path, mutate)

LAB = lab_path("lab05_cuda_puzzles")
NAMES = list(L.PUZZLES)

lab = lab_fixture(LAB)


def check(name):
    return L.puzzle(name).check


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
    ],
    "block_reduce": [
        ("        cuda.syncthreads()\n        stride //= 2", "        stride //= 2", L.HINT_SYNC),
        ("        s_max[t] = NEG_INF", "        s_max[t] = F0", L.HINT_PAD_MAX),
        ("stride = TPB4 // 2", "stride = TPB4 // 4", L.HINT_TREE),
        ("    if t == 0:\n        out_sum", "    if t < 2:\n        out_sum", L.HINT_ONE_WRITER),
        ("    if i < n:\n        s_sum[t] = a[i]", "    if True:\n        s_sum[t] = a[i]",
         L.HINT_EDGE),
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
    ],
    "matmul_micro": [
        # a size computed inside the kernel: the GPU compiler refuses it, the simulator not
        ("cuda.local.array(ACC7, float32)", "cuda.local.array(TM7 * TN7, float32)",
         (HINT_COMPILE,)),
        ("                acc[i * TN7 + j] += ra[i] * rb[j]",
         "                acc[i * TN7 + j] += As[ty + B7 * i, kk] * Bs[kk, tx + B7 * j]",
         L.HINT_MICRO_REUSE),
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
    ],
    "softmax_rows": [
        ("        l = l * math.exp(m - m_use) + math.exp(v - m_use)",
         "        l = l + math.exp(v - m_use)", L.HINT_SM_RESCALE),
        ("        l = l * math.exp(m - m_use) + l_o * math.exp(m_o - m_use)",
         "        l = l + l_o", L.HINT_SM_MERGE),
        ("        m_use = m_new if m_new != NEG_INF else F0\n        l = l * math.exp(m - m_use) "
         "+ math.exp(v - m_use)", "        m_use = m_new\n        l = l * math.exp(m - m_use) "
         "+ math.exp(v - m_use)", L.HINT_SM_NAN),
        ("out[r, c] = math.exp(x[r, c] - m) / l", "out[r, c] = math.exp(x[r, c]) / l",
         L.HINT_SM_SHIFT),
    ],
    "flash_block": [
        ("            if k0 + c < tk:\n", "            if True:\n", L.HINT_FLASH_MASK),
        ("                alpha = math.exp(m - m_new)", "                alpha = float32(1)",
         L.HINT_FLASH_RESCALE),
        ("    for k0 in range(0, tk, BC11):\n        cuda.syncthreads()\n",
         "    for k0 in range(0, tk, BC11):\n", L.HINT_SYNC),
        ("s += qr[x] * ks[c, x]", "s += qr[x] * (k[k0 + c, x] if x < d else F0)",
         L.HINT_FLASH_GLOBAL),
    ],
}

ROWS = [(name, old, new, hint) for name, edits in MISTAKES.items() for old, new, hint in edits]


def test_every_puzzle_replays_at_least_three_mistakes():
    assert set(MISTAKES) == set(NAMES)
    assert all(len(edits) >= 3 for edits in MISTAKES.values())


@pytest.mark.parametrize("name,old,new,hint", ROWS,
                         ids=[f"{r[0]}-{n}" for n, r in enumerate(ROWS)])
def test_mistake_gets_its_hint(name, old, new, hint):
    assert_hint(check(name), mutate(LAB, name, old, new), hint[0])


#: valid variants, each a list of edits: other index arithmetic, conversions, other orders
VARIANTS = {
    "grid(1)": ("map_guard", [("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x",
                               "i = cuda.grid(1)")]),
    "early return": ("map_guard", [
        ("    if i < n:\n        out[i] = float32(2) * a[i] + float32(1)",
         "    if i >= n:\n        return\n    out[i] = a[i] + a[i] + 1.0")]),
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
}


@pytest.mark.parametrize("key", list(VARIANTS))
def test_valid_variant_passes(key):
    name, edits = VARIANTS[key]
    fn = functions_of(LAB, replace=edits)[name]
    assert check(name)(fn, verbose=False).passed, key


def test_trace_counts_conflicts_and_sectors(lab):
    """The padded tile has no conflicts, the unpadded one 31 extra passes per column read."""
    P = L.puzzle("transpose")
    case = P.cases[1]                                    # rows = 32
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


test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)
