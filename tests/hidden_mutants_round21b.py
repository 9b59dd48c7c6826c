# ruff: noqa: E501  (the edits quote the solution notebooks line for line)
"""Hidden mutants of the CUDA labs 05, 06 and 10 found in review round 21 b
(REVIEW_2026-12-08_round21_b.md): see hidden_mutants.py. Kept apart from hidden_mutants_cuda.py,
which other rounds edit."""

from __future__ import annotations

from hidden_mutants import right, wrong
from hidden_mutants_cuda import L05, L06, L10

_F64, _F64_PUZZLE = "float64 promotion", "is a float64"
_SOFT_X = "        x = NEG_INF\n        for n in range(NS):"
CASES = [
    # M2: float('-inf') is a float64 constant to Numba (numba-cuda lowers float of a string
    # literal to one); -math.inf was flagged, this spelling passed every check
    wrong(L10, "softmax_tile", "row max started at float('-inf')", [
        (_SOFT_X, _SOFT_X.replace("NEG_INF", "float('-inf')"))], _F64),
    wrong(L05, "block_reduce", "padding max written as float('-inf')", [
        ("        s_max[t] = NEG_INF\n", "        s_max[t] = float('-inf')\n")], _F64_PUZZLE),
    wrong(L05, "softmax_rows", "running max started at float('-inf')", [
        ("    m = NEG_INF\n    l = F0\n    for c in range(lane, cols, 32):",
         "    m = float('-inf')\n    l = F0\n    for c in range(lane, cols, 32):")], _F64_PUZZLE),
    wrong(L06, "online_update", "row sum started at float(0)", [
        ("    psum = F0\n", "    psum = float(0)\n")], _F64),
    # unusual but right: other shuffle offsets that still reduce the quad, and other orders
    right(L10, "quad", "quad max by xor 1 then xor 3, sum by xor 2 then 1", [
        ("    x = max(x, shfl_xor(x, 2, red, lane))\n    return x",
         "    x = max(x, shfl_xor(x, 3, red, lane))\n    return x"),
        ("    x += shfl_xor(x, 1, red, lane)\n    x += shfl_xor(x, 2, red, lane)",
         "    x += shfl_xor(x, 2, red, lane)\n    x += shfl_xor(x, 1, red, lane)")]),
    right(L10, "softmax_tile", "lp rescaled first, then each p added to it", [
        ("        ps = F0\n", "        lp[hf] *= alpha\n"),
        ("                ps += p\n", "                lp[hf] += p\n"),
        ("        lp[hf] = lp[hf] * alpha + ps\n", "")]),
    right(L10, "pv_tile", "n8 tiles of O outside the k16 steps", [
        ("    for kp in range(KP):\n        j0 = 8 * kp\n",
         "    for n in range(NO):\n      for kp in range(KP):\n        j0 = 8 * kp\n"),
        ("        for n in range(NO):\n            load_b(vt, 8 * n, 16 * kp, w[0], b)\n"
         "            mma(pa, 0, b, acc, 4 * n, scr, w)\n",
         "        load_b(vt, 8 * n, 16 * kp, w[0], b)\n        mma(pa, 0, b, acc, 4 * n, scr, w)\n")]),
]
