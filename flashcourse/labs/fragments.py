"""Checker for notebook 10's exercise: the accumulator fragment map of mma.m16n8k16.

The learner writes `c_map(lane, i) -> (row, col)`: which element of the 16 x 8 C/D
tile accumulator number i (0..3) of `lane` (0..31) holds. The checker compares every
(lane, i) with the PTX ISA's map (`flashcourse.cuda.ptx.mma.c_m16n8`), then uses the
learner's map to gather the results of a numpy model of the mma back into a tile
and compares that tile with the plain product A @ B.
"""

from __future__ import annotations

import numpy as np

from ..cuda.ptx import mma
from ._harness import Case, Result, ResultKindError, run_checks

HINT_GENERIC = ("Start from the two lane coordinates: g = lane // 4 (the groupID, 0..7) "
                "and t = lane % 4 (the thread in the group, 0..3). Rows come from g, "
                "columns from t.")
HINT_SWAPPED = ("Rows and columns are swapped: the row comes from the groupID g = lane // 4 "
                "and the column from t = lane % 4.")
HINT_PLUS8 = ("Accumulators c2 and c3 sit 8 rows below c0 and c1: row = g for i < 2, "
              "g + 8 for i >= 2.")
HINT_COL = ("Each lane holds two neighbouring columns: col = 2 t + (i % 2), so "
            "lanes t = 0..3 cover columns 0..7.")
HINT_RANGE = "Return a (row, col) pair with 0 <= row < 16 and 0 <= col < 8."
HINT_WHOLE = ("A row and a column are whole numbers: lane / 4 is a fraction (0.25 for lane "
              "1); the groupID is the floor division lane // 4.")
HINT_COL_I = ("Your columns reach 2 t + 3: i runs over 0..3, but c0, c1 are two neighbouring "
              "columns and c2, c3 the same two columns 8 rows below, so the column takes "
              "only i % 2: col = 2 t + (i % 2).")
HINT_I_ROLES = ("The two halves of i have swapped roles: c0, c1 are neighbours in one row "
                "(columns 2 t and 2 t + 1) and c2, c3 the same columns 8 rows below, so "
                "the column takes i % 2 and the row i // 2: row = g + 8 (i // 2).")
HINT_A_MAP = ("That is the A fragment's map (words of pairs: + 8 rows for odd words, + 8 "
              "columns for words 2 and 3): C is 16 x 8, and its four accumulators are single "
              "values, c0, c1 two neighbours in row g (col = 2 t + (i % 2)), c2, c3 the same "
              "columns in row g + 8.")
HINT_G_T = ("g and t have swapped roles: the row comes from the groupID g = lane // 4 "
            "(0..7, plus 8 for c2, c3) and the column from t = lane % 4 (2 t + (i % 2), "
            "0..7); yours reaches column 15.")


def _table(fn) -> np.ndarray:
    """(32, 4, 2): the learner's (row, col) for every (lane, i)."""
    out = np.zeros((mma.WARP, 4, 2), np.int64)
    for lane in range(mma.WARP):
        for i in range(4):
            rc = fn(lane, i)
            if rc is None:
                raise NotImplementedError("c_map returns None")
            row, col = rc
            if any(float(x) != int(x) for x in (row, col)):
                raise ResultKindError(f"c_map({lane}, {i}) returned ({row!r}, {col!r}): not "
                                      "whole numbers", HINT_WHOLE)
            out[lane, i] = (int(row), int(col))
    return out


def _expected() -> np.ndarray:
    return mma.index_table("c_m16n8")


def _swapped(yours, expected):
    """The column was taken from the group g (or the row from t = lane % 4)."""
    y = np.asarray(yours)
    lanes = np.arange(mma.WARP)[:, None] * np.ones((1, 4), np.int64)   # (32, 4)
    return bool(np.array_equal(y[..., 1], lanes // 4)
                or np.array_equal(y[..., 0] % 4, lanes % 4) and (y[..., 0] < 4).all())


def _missing_plus8(yours, expected):
    """Columns right and rows right for c0, c1; c2, c3 not 8 rows below (0, 4, ...)."""
    y, e = np.asarray(yours), np.asarray(expected)
    return (np.array_equal(y[..., 1], e[..., 1]) and np.array_equal(y[:, :2, 0], e[:, :2, 0])
            and np.array_equal(y[:, 2, 0], y[:, 3, 0]))


def _a_map(yours, expected):
    """The A fragment's word map used for C: row = g + 8 (i % 2), col = 2 t + 8 (i // 2)
    (or that plus i % 2)."""
    y = np.asarray(yours)
    lane, i = np.meshgrid(np.arange(mma.WARP), np.arange(4), indexing="ij")
    g, t = lane // 4, lane % 4
    return np.array_equal(y[..., 0], g + 8 * (i % 2)) and any(
        np.array_equal(y[..., 1], c) for c in (2 * t + 8 * (i // 2), 2 * t + 8 * (i // 2) + 1))


def _wrong_col(yours, expected):
    y, e = np.asarray(yours), np.asarray(expected)
    return np.array_equal(y[..., 0], e[..., 0]) and not np.array_equal(y[..., 1], e[..., 1])


def _col_plus_i(yours, expected):
    """Rows right, col = 2 t + i (i, not i % 2): columns up to 9."""
    y, e = np.asarray(yours), np.asarray(expected)
    lane, i = np.meshgrid(np.arange(mma.WARP), np.arange(4), indexing="ij")
    return np.array_equal(y[..., 0], e[..., 0]) and np.array_equal(y[..., 1], 2 * (lane % 4) + i)


def _i_roles(yours, expected):
    """row = g + 8 (i % 2), col = 2 t + (i // 2): the halves of i exchanged."""
    y = np.asarray(yours)
    lane, i = np.meshgrid(np.arange(mma.WARP), np.arange(4), indexing="ij")
    return np.array_equal(y[..., 0], lane // 4 + 8 * (i % 2)) and np.array_equal(
        y[..., 1], 2 * (lane % 4) + i // 2)


def _g_t(yours, expected):
    """The row from t and the column from g: row = t (+ 8), col = 2 g + (i % 2)."""
    y = np.asarray(yours)
    lane = np.arange(mma.WARP)[:, None] * np.ones((1, 4), np.int64)
    return bool(np.array_equal(y[..., 0] % 8, lane % 4)
                and np.array_equal(y[..., 1] // 2, lane // 4))


def _out_of_range(yours, expected):
    y = np.asarray(yours)
    return bool((y[..., 0] < 0).any() or (y[..., 0] > 15).any() or (y[..., 1] < 0).any()
                or (y[..., 1] > 7).any())


def _product_case(fn):
    """Gather a numpy model's D fragments with the learner's map: must give A @ B + C."""
    rng = np.random.default_rng(10)
    A = mma.round_fp16(rng.standard_normal((16, 16)))
    B = mma.round_fp16(rng.standard_normal((16, 8)))
    C = rng.standard_normal((16, 8)).astype(np.float32)
    d = mma.mma_model(mma.to_fragments(A, "a_m16n8k16"), mma.to_fragments(B, "b_m16n8k16"),
                      mma.to_fragments(C, "c_m16n8"), "fp16")            # (32, 4)
    table = _table(fn)
    if _out_of_range(table, None):
        return np.full((16, 8), np.nan), A.astype(np.float64) @ B + C
    tile = np.full((16, 8), np.nan)
    tile[table[..., 0], table[..., 1]] = d
    return tile, A.astype(np.float64) @ B + C


def check_c_map(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check the learner's `c_map(lane, i) -> (row, col)`; print yours vs expected + a hint."""
    cases = [
        Case("every (lane, i) against the PTX ISA map", lambda f: (_table(f), _expected()),
             HINT_GENERIC,
             [(_g_t, HINT_G_T), (_a_map, HINT_A_MAP), (_col_plus_i, HINT_COL_I),
              (lambda y, e: _out_of_range(y, e), HINT_RANGE),
              (_i_roles, HINT_I_ROLES),
              (_missing_plus8, HINT_PLUS8), (_wrong_col, HINT_COL), (_swapped, HINT_SWAPPED)],
             rtol=0, atol=0),
        Case("gathering an mma's results with your map gives A @ B + C", _product_case,
             HINT_GENERIC, rtol=1e-5, atol=1e-5),
    ]
    return run_checks("c_map (m16n8 accumulator fragment)", fn, cases, verbose=verbose,
                      hint_level=hint_level)


def c_map_solution(lane: int, i: int) -> tuple[int, int]:
    """The reference answer (the same formula as flashcourse.cuda.ptx.mma.c_m16n8)."""
    g, t = lane // 4, lane % 4
    return (g if i < 2 else g + 8), 2 * t + (i % 2)
