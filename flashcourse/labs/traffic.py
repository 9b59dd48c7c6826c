"""Checkers for lab 04: derive the outer-memory traffic of the tiled forward (fa2 order).

The learner writes, for one head, non-causal:

    my_fa2_traffic(Tq, Tk, d, Br, Bc, e) -> (read_bytes, write_bytes)

the bytes that `flashcourse.tiled.forward(..., loop_order="fa2")` moves between outer
memory and the chip, with e bytes per Q/K/V/O element and 4 bytes per lse entry;
and, as a bonus, the causal version (bottom-right aligned, fully hidden tiles skipped).

The expected value is not a formula: it is what a `TrafficCounter` counts while the
real tiled forward runs, so the learner checks a derivation against a measurement.
Comparisons are exact (integers, no tolerance).
"""

from __future__ import annotations

import numpy as np

from .. import tiled
from ..counter import TrafficCounter
from ._harness import TODO_LINE, Case, Result, run_checks, with_level2
from ..geometry import ceil_div

# -- hints (tests assert on these exact strings) ------------------------------
HINT_RAGGED = ("Ragged last block: when Tq is not a multiple of Br (or Tk of Bc), the last "
               "block has fewer rows. Count real rows (Tq, Tk), not blocks x block size; only "
               "the NUMBER of query blocks is rounded up, Tr = ceil(Tq / Br).")
HINT_V = ("You count K but not V: every visible (query block, key block) pair loads both "
          "K_j and V_j, 2 x rows(K_j) x d x e bytes.")
HINT_ONCE = ("K and V are read once per query block, not once in all: the fa2 inner loop "
             "re-loads every K_j, V_j for each of the Tr = ceil(Tq / Br) query blocks, so "
             "K and V cost 2 x Tr x Tk x d x e bytes.")
HINT_SWAPPED = ("Your reads are those of the other loop order: K and V read once and Q re-read "
                "for every key block (Algorithm 1, outer loop over keys). In the fa2 order the "
                "OUTER loop is over query blocks: Q_i is read once, and K and V are re-read for "
                "each of the Tr = ceil(Tq / Br) query blocks.")
HINT_LSE = ("Writes are missing lse: besides O (Tq x d x e bytes) each query row stores its "
            "log-sum-exp, one fp32 number = 4 bytes per row, for the backward pass.")
HINT_LSE_SIZE = "lse is stored in fp32 whatever the input dtype: 4 bytes per row, not e."
HINT_FLOOR = ("Number of query blocks: Tr = ceil(Tq / Br), rounded UP; floor division drops the "
              "ragged last block.")
HINT_PLUS_ONE = ("Number of blocks: rounding up is not floor plus one. When the block size "
                 "divides the length exactly, Tq // Br + 1 (or Tk // Bc + 1) counts a block "
                 "that holds no row; a ceiling leaves exact quotients alone (math.ceil, or "
                 "(Tq + Br - 1) // Br).")
HINT_FRACTION = ("Number of query blocks: Tq / Br is a fraction when the last block is ragged, "
                 "but the loop runs over whole blocks: Tr is a whole number, the quotient "
                 "rounded UP.")
HINT_TR_SIZES = ("Number of query blocks: Tr = ceil(Tq / Br), the QUERY length over the QUERY "
                 "block size. Yours divides Tk, or divides by Bc: those cut K and V into tiles, "
                 "and do not set how many times K and V are read.")
HINT_LSE_ONE = ("The fa2 order writes one statistic per query row, lse = m + log l (4 bytes), "
                "once at the end; m and l stay on chip and are not written (FlashAttention-1's "
                "order writes both back every tile).")
HINT_PER_ROW = ("K and V are re-read once per query BLOCK, not once per query row: the Br rows "
                "of Q_i share each load of K_j and V_j, which is the point of tiling, so K and "
                "V cost 2 x Tr x Tk x d x e bytes with Tr = ceil(Tq / Br), not "
                "2 x Tq x Tk x d x e.")
HINT_O_PER_BLOCK = (
    "Your count moves a (Tq, d) array once per key block: Q_i re-read, or O_i read back and "
    "written, for every key block (FlashAttention-1's order does the latter). In the fa2 "
    "order a query block's Q_i is loaded once and its output stays on chip (acc) through the "
    "whole inner loop: Q is read once, O is never read and is written once, at the end. "
    "(Where Bc = d this excess also equals Tq x Tk x e bytes: no score entry leaves the chip "
    "either.)")
HINT_SCORES = ("No score leaves the chip in tiled attention: S and P tiles are formed and "
               "discarded on chip, so Tq x Tk never appears in the byte count.")
HINT_GENERIC = ("Count per loop: for each query block i read Q_i once; for each key block j "
                "read K_j and V_j; after the inner loop write O_i and lse_i. Sum over blocks.")
HINT_RETURN = "Return a tuple (read_bytes, write_bytes) of two integers."
HINT_PAIR_SWAPPED = ("Your two numbers are right but swapped: the contract returns (read_bytes, "
                     "write_bytes), the bytes read first.")


def _swapped(y, x) -> bool:
    """The right pair in the wrong order (review round 17 a: it got the generic hint)."""
    try:
        return x[0] != x[1] and (int(y[0]), int(y[1])) == (x[1], x[0])
    except (TypeError, ValueError, IndexError):
        return False


HINT_CAUSAL_NONE = ("Causal: tiles that the mask hides entirely are skipped, so their K_j, V_j "
                    "are never loaded. Your count equals the non-causal one.")
HINT_CAUSAL_PARTIAL = ("Causal: a partly visible tile (the diagonal ones) is still loaded whole; "
                       "only tiles hidden in full are skipped.")
HINT_CAUSAL_ALIGN = ("Causal with Tq != Tk: the mask is bottom-right aligned, query i sees key j "
                     "iff j <= i + Tk - Tq (not j <= i).")
HINT_CAUSAL_GENERIC = ("Causal: query block [q0, q1) loads key block [k0, k1) unless "
                       "k0 > q1 - 1 + Tk - Tq (hidden in full); count the real rows of each "
                       "loaded key block. Q, O, lse are still read/written for every row.")

_DTYPES = {2: np.float16, 4: np.float32, 8: np.float64}


def counter_traffic(t_query, t_key, d, block_q, block_k, e, *, causal=False,
                    loop_order="fa2") -> tuple[int, int]:
    """(read_bytes, write_bytes) that a TrafficCounter counts for one head of the real
    `flashcourse.tiled.forward` on random data with e bytes per element."""
    rng = np.random.default_rng(t_query * 1009 + t_key)
    dtype = _DTYPES.get(e, np.float32)
    q = rng.standard_normal((t_query, d)).astype(dtype)
    k = rng.standard_normal((t_key, d)).astype(dtype)
    c = TrafficCounter(bytes_per_element=e)
    tiled.forward(q, k, k, block_q=block_q, block_k=block_k, causal=causal,
                  loop_order=loop_order, counter=c)
    return c.read_bytes, c.write_bytes


def compare_with_counter(fn, t_query, t_key, d, block_q, block_k, e, *, causal=False) -> None:
    """Print your (read, write) bytes next to the counter's, for one configuration."""
    measured = counter_traffic(t_query, t_key, d, block_q, block_k, e, causal=causal)
    try:
        yours = fn(t_query, t_key, d, block_q, block_k, e)
    except NotImplementedError:
        print(f"{TODO_LINE}: fill in the function first; the counter says "
              f"read {measured[0]:,} B, write {measured[1]:,} B.")
        return
    print(f"Tq={t_query}, Tk={t_key}, d={d}, Br={block_q}, Bc={block_k}, e={e}"
          f"{', causal' if causal else ''}")
    print(f"  yours:   {yours}")
    print(f"  counter: read {measured[0]:,} B, write {measured[1]:,} B")
    print("  match" if _as_pair(yours) == measured else "  DIFFERENT")


# -- typical mistakes, as formulas (used by the diagnoses and by the tests) ----

def wrong_no_ragged(tq, tk, d, br, bc, e):
    """Counts every block as full: padded rows for Q, K, V, O and lse."""
    tr, tc = ceil_div(tq, br), ceil_div(tk, bc)
    return tr * br * d * e + 2 * tr * tc * bc * d * e, tr * br * d * e + 4 * tr * br


def wrong_k_only(tq, tk, d, br, bc, e):
    return tq * d * e + ceil_div(tq, br) * tk * d * e, tq * d * e + 4 * tq


def wrong_kv_once(tq, tk, d, br, bc, e):
    return tq * d * e + 2 * tk * d * e, tq * d * e + 4 * tq


def wrong_no_lse(tq, tk, d, br, bc, e):
    return tq * d * e + 2 * ceil_div(tq, br) * tk * d * e, tq * d * e


def _reads_fa2(tq, tk, d, br, e):
    return tq * d * e + 2 * ceil_div(tq, br) * tk * d * e


def _diagnoses(cfg):
    tq, tk, d, br, bc, e = cfg
    right_reads = _reads_fa2(tq, tk, d, br, e)

    right_writes = tq * d * e + 4 * tq

    def reads_are(value):          # a mistake that shows in the reads only
        return lambda y, x: value != right_reads and int(y[0]) == value

    def writes_are(value):
        return lambda y, x: value != right_writes and int(y[1]) == value

    ragged = wrong_no_ragged(*cfg)
    is_ragged = bool(tq % br or tk % bc)
    tr, tc = ceil_div(tq, br), ceil_div(tk, bc)          # query and key blocks
    o_rounds = {tc * tq * d * e, (tc - 1) * tq * d * e}  # O once per key block (or after the 1st)
    return [
        (lambda y, x: not (isinstance(y, tuple) and len(y) == 2), HINT_RETURN),
        (_swapped, HINT_PAIR_SWAPPED),
        (lambda y, x: is_ragged and int(y[0]) in (ragged[0], tr * br * d * e
                                                  + 2 * tr * tc * bc * d * e,
                                                  tq * d * e + 2 * tr * tc * bc * d * e,
                                                  tr * br * d * e + 2 * tr * tk * d * e)
         or is_ragged and int(y[1]) in (ragged[1], tr * br * d * e + 4 * tq,
                                        tq * d * e + 4 * tr * br), HINT_RAGGED),
        (reads_are(wrong_k_only(*cfg)[0]), HINT_V),
        (reads_are(wrong_kv_once(*cfg)[0]), HINT_ONCE),
        (reads_are(tq * d * e + 2 * (tq // br) * tk * d * e), HINT_FLOOR),
        # round 18 (mutants): both got HINT_GENERIC
        (reads_are(tq * d * e + 2 * (tq // br + 1) * tk * d * e), HINT_PLUS_ONE),
        (reads_are(int(tq * d * e + 2 * (tq / br) * tk * d * e)), HINT_FRACTION),
        # Tr from the wrong length or block size (review round 16 a)
        (lambda y, x: int(y[0]) != right_reads and int(y[0]) in {
            tq * d * e + 2 * n * tk * d * e for n in (ceil_div(tq, bc), ceil_div(tk, br),
                                                      ceil_div(tk, bc)) if n != tr},
         HINT_TR_SIZES),
        (reads_are(2 * tk * d * e + tc * tq * d * e), HINT_SWAPPED),
        (reads_are(tq * d * e + 2 * tq * tk * d * e), HINT_PER_ROW),
        # Q or O read (O written) once per key block, FA1's order (review round 21 a: it got
        # HINT_SCORES, as Tc Tq d e equals Tq Tk e when Bc = d)
        (lambda y, x: int(y[0]) - right_reads in o_rounds or int(y[1]) - right_writes in o_rounds,
         HINT_O_PER_BLOCK),
        # S and/or P of e or 4 bytes an entry, read and/or written: 1 to 4 times Tq Tk entries
        (lambda y, x: int(y[0]) - right_reads in {n * b * tq * tk for n in range(1, 5)
                                                  for b in (e, 4)}, HINT_SCORES),
        (writes_are(tq * d * e), HINT_LSE),
        (writes_are(tq * d * e + e * tq), HINT_LSE_SIZE),
        (writes_are(tq * d * e + 8 * tq), HINT_LSE_ONE),
    ]


def _as_pair(out):
    if isinstance(out, list):
        out = tuple(out)
    if isinstance(out, tuple) and len(out) == 2:
        try:
            return tuple(int(v) for v in out)
        except (TypeError, ValueError):
            return out
    return out


#: the second, more explicit level of every hint of a function (`check_...(fn, hint_level=2)`):
#: the count in words, never a line of the solution
FA2_STEPS = ("Step by step: (1) the number of query blocks Tr is Tq / Br rounded up (in integers, "
             "minus the floor division of minus Tq by Br); (2) reads: every row of Q once, d "
             "values of e bytes each, plus, for each of the Tr query blocks, all Tk rows of K "
             "and all Tk rows of V; (3) writes: every row of O once (d values of e bytes) and "
             "its lse (4 bytes); (4) return (reads, writes) as two integers.")
CAUSAL_STEPS = ("Step by step: (1) start from Q read once and O and lse written once, as without "
                "the mask; (2) walk the query blocks [q0, q1) and, inside, the key blocks "
                "[k0, k1), each last block possibly shorter; (3) with the bottom-right mask "
                "query i sees key j when j <= i + Tk - Tq, so a pair is loaded unless even its "
                "last query row, q1 - 1, sees none of its keys, that is unless k0 is past "
                "q1 - 1 + Tk - Tq; (4) for each loaded pair add the real rows of K_j and of "
                "V_j, d values of e bytes each; (5) return (reads, writes).")
BWD_STEPS = ("Step by step: (1) the number of key blocks Tc is Tk / Bc rounded up; (2) before "
             "the loops: O and dO are read once (for D = rowsum(dO * O)), D is written (4 bytes "
             "a row) and dQ is zeroed (written once); (3) per key block: K_j and V_j read and "
             "dK_j, dV_j written, once each, so all of K, V, dK and dV once in total; (4) per "
             "tile: Q_i, dO_i and dQ_i read, lse_i and D_i read (4 bytes a row each), dQ_i "
             "written; summed over one key block's tiles that is all Tq rows of each; (5) "
             "return (reads, writes).")


def _case(name, cfg, *, causal=False, diagnoses=None, hint=HINT_GENERIC, steps=FA2_STEPS):
    def run(fn):
        yours = _as_pair(fn(*cfg))
        return yours, counter_traffic(*cfg, causal=causal)
    return Case(name, run, hint,
                with_level2(diagnoses if diagnoses is not None else _diagnoses(cfg), steps),
                rtol=0.0, atol=0.0, hint2=steps)


# (Tq, Tk, d, Br, Bc, e): divisible first, then each irregularity on its own
FA2_CASES = [
    ("blocks divide the lengths: Tq = Tk = 64, d = 16, Br = Bc = 16, e = 2",
     (64, 64, 16, 16, 16, 2)),
    ("Tq != Tk: Tq = 48, Tk = 80, d = 8, Br = 16, Bc = 16, e = 4", (48, 80, 8, 16, 16, 4)),
    ("ragged last blocks: Tq = 50, Tk = 37, d = 7, Br = 16, Bc = 10, e = 2",
     (50, 37, 7, 16, 10, 2)),
    ("Br != Bc, Tq < Br: Tq = 5, Tk = 91, d = 3, Br = 8, Bc = 32, e = 8", (5, 91, 3, 8, 32, 8)),
    ("one-row tiles: Tq = 7, Tk = 13, d = 5, Br = 1, Bc = 4, e = 2", (7, 13, 5, 1, 4, 2)),
]

CAUSAL_CASES = [
    ("causal, square: Tq = Tk = 64, d = 8, Br = Bc = 16, e = 2", (64, 64, 8, 16, 16, 2)),
    ("causal, ragged: Tq = Tk = 45, d = 5, Br = 8, Bc = 6, e = 4", (45, 45, 5, 8, 6, 4)),
    ("causal, Tq < Tk (bottom-right): Tq = 20, Tk = 52, d = 4, Br = 8, Bc = 8, e = 2",
     (20, 52, 4, 8, 8, 2)),
    ("causal, Tq > Tk (rows that see nothing): Tq = 40, Tk = 12, d = 3, Br = 8, Bc = 4, e = 2",
     (40, 12, 3, 8, 4, 2)),
    # k0 == q1 - 1 + Tk - Tq for several tiles: a key block whose only visible key is its first
    ("causal, tiles that see only their first key: Tq = Tk = 13, d = 3, Br = 4, Bc = 3, e = 2",
     (13, 13, 3, 4, 3, 2)),
]


def check_fa2_traffic(fn, *, verbose: bool = True,
        hint_level: int = 1) -> Result:
    """Check my_fa2_traffic(Tq, Tk, d, Br, Bc, e) -> (read_bytes, write_bytes), non-causal."""
    cases = [_case(name, cfg) for name, cfg in FA2_CASES]
    return run_checks("my_fa2_traffic against the byte counter", fn, cases,
                      verbose=verbose, hint_level=hint_level)


# -- the causal bonus ---------------------------------------------------------

def causal_reads_top_left(tq, tk, d, br, bc, e):
    """fa2 reads if the mask were top-left aligned (j <= i): a typical mistake."""
    total = tq * d * e
    for q0 in range(0, tq, br):
        q1 = min(q0 + br, tq)
        for k0 in range(0, tk, bc):
            if k0 <= q1 - 1:
                total += 2 * (min(k0 + bc, tk) - k0) * d * e
    return total


def causal_reads_full_tiles_only(tq, tk, d, br, bc, e):
    """fa2 reads if partly visible tiles were skipped too: a typical mistake."""
    total, off = tq * d * e, tk - tq
    for q0 in range(0, tq, br):
        for k0 in range(0, tk, bc):
            k1 = min(k0 + bc, tk)
            if k1 - 1 <= q0 + off:
                total += 2 * (k1 - k0) * d * e
    return total


def _causal_diagnoses(cfg):
    tq, tk, d, br, bc, e = cfg
    return [
        (lambda y, x: not (isinstance(y, tuple) and len(y) == 2), HINT_RETURN),
        (_swapped, HINT_PAIR_SWAPPED),
        (lambda y, x: y[0] != x[0] and int(y[0]) == _reads_fa2(tq, tk, d, br, e),
         HINT_CAUSAL_NONE),
        (lambda y, x: y[0] != x[0] and int(y[0]) == causal_reads_full_tiles_only(*cfg),
         HINT_CAUSAL_PARTIAL),
        (lambda y, x: y[0] != x[0] and tq != tk and int(y[0]) == causal_reads_top_left(*cfg),
         HINT_CAUSAL_ALIGN),
        (lambda y, x: y[0] != x[0] and x[0] - int(y[0]) == (x[0] - tq * d * e) // 2, HINT_V),
        (lambda y, x: int(y[1]) == tq * d * e, HINT_LSE),
        (lambda y, x: e != 4 and int(y[1]) == tq * d * e + e * tq, HINT_LSE_SIZE),
    ]


def check_fa2_traffic_causal(fn, *, verbose: bool = True,
        hint_level: int = 1) -> Result:
    """Bonus: check my_fa2_traffic_causal(Tq, Tk, d, Br, Bc, e), causal, bottom-right."""
    cases = [_case(name, cfg, causal=True, diagnoses=_causal_diagnoses(cfg),
                   hint=HINT_CAUSAL_GENERIC, steps=CAUSAL_STEPS) for name, cfg in CAUSAL_CASES]
    return run_checks("my_fa2_traffic_causal against the byte counter", fn, cases,
                      verbose=verbose, hint_level=hint_level)


# -- part 4: the backward's bytes ----------------------------------------------------------

HINT_BWD_DQ = ("dQ is missing its round trips: in the key-major backward every visible tile "
               "reads dQ_i, adds its contribution and writes it back (atomic adds on a GPU), so "
               "dQ costs rows(Q_i) x d x e read AND written per tile.")
HINT_BWD_ONCE = ("Q_i and dO_i are re-read for every key block: the key-major loop keeps K_j, "
                 "V_j on chip and walks all query blocks again for each key block.")
HINT_BWD_STAT = ("lse and D are statistics: 4 bytes per row, whatever the element size e.")
HINT_BWD_D = ("D = rowsum(dO * O) is computed before the loops: it reads O and dO once and "
              "writes D (4 bytes per row); and each tile then reads D_i back.")
HINT_BWD_STAT_TILE = ("Each tile reads both statistics of its query rows, lse_i and D_i, 4 bytes "
                      "per row each: 8 x rows(Q_i) bytes per tile. Your reads are one of them "
                      "short per tile.")
HINT_BWD_DKDV = ("dK_j and dV_j are written once per key block, after the inner loop: "
                 "2 x rows(K_j) x d x e bytes.")
HINT_BWD_TC_SIZES = ("Number of key blocks: Tc = ceil(Tk / Bc), the KEY length over the KEY "
                     "block size; yours divides Tq, or divides by Br (the query block's size). "
                     "The backward's outer loop runs over key blocks.")
HINT_BWD_FLOOR = ("Number of key blocks: Tc = ceil(Tk / Bc), rounded UP; floor division drops "
                  "the ragged last key block, whose tiles still read Q_i, dO_i, dQ_i, lse_i, D_i "
                  "and write dQ_i.")
HINT_BWD_GENERIC = ("Count per loop of tiled.backward: before the loops (O, dO read; D written; "
                    "dQ zeroed); per key block (K_j, V_j read; dK_j, dV_j written); per tile "
                    "(Q_i, dO_i, dQ_i, lse_i, D_i read; dQ_i written).")


def backward_counter_traffic(t_query, t_key, d, block_q, block_k, e) -> tuple[int, int]:
    """(read_bytes, write_bytes) a TrafficCounter counts for `tiled.backward`, one head."""
    rng = np.random.default_rng(t_query * 7 + t_key)
    dtype = _DTYPES.get(e, np.float32)
    q, do = (rng.standard_normal((t_query, d)).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal((t_key, d)).astype(dtype) for _ in range(2))
    o, lse = tiled.forward(q, k, v, block_q=block_q, block_k=block_k)
    c = TrafficCounter(bytes_per_element=e, record_events=False)
    tiled.backward(q, k, v, o, lse, do, block_q=block_q, block_k=block_k, counter=c)
    return c.read_bytes, c.write_bytes


def _bwd_variants(tq, tk, d, br, bc, e):
    tc = ceil_div(tk, bc)
    reads = 2 * tq * d * e + 2 * tk * d * e + tc * (3 * tq * d * e + 8 * tq)
    writes = 4 * tq + tq * d * e + tc * tq * d * e + 2 * tk * d * e
    floor = tk // bc          # key blocks rounded down: per-block terms one block short

    def with_tc(n):           # the per-key-block terms counted n times instead of tc
        return (reads + (n - tc) * (3 * tq * d * e + 8 * tq), writes + (n - tc) * tq * d * e)
    return {
        **{f"tc_{i}": with_tc(n) for i, n in enumerate(
            (ceil_div(tk, br), ceil_div(tq, bc), ceil_div(tq, br))) if n not in (tc, floor)},
        "floor": (reads - (tc - floor) * (3 * tq * d * e + 8 * tq),
                  writes - (tc - floor) * tq * d * e),
        "plus_one": with_tc(floor + 1),                        # floor + 1 for the ceiling
        "no_dq": (reads - tc * tq * d * e, writes - tc * tq * d * e),
        "once": (reads - tc * 2 * tq * d * e + 2 * tq * d * e, writes),
        "stat_e": (reads + tc * 2 * tq * (e - 4), writes + tq * (e - 4)),
        "no_d": (reads - 2 * tq * d * e - tc * 4 * tq, writes - 4 * tq),
        "no_dkdv": (reads, writes - 2 * tk * d * e),
        "no_o": (reads - tq * d * e, writes),                  # D from dO alone
        "one_stat": (reads - tc * 4 * tq, writes),             # lse_i or D_i not read per tile
    }


#: the first case has e = 8: at e = 2, statistics counted at e bytes read exactly what one
#: statistic missing per tile reads (2 x 2 = 4), and at d = 8 O left out of D as well
BACKWARD_CASES = [
    ("backward, Tq = Tk = 32, d = 8, Br = Bc = 8, e = 8", (32, 32, 8, 8, 8, 8)),
    # Br = 8: ceil(Tk / Br) = 5 is neither Tc = 4 nor floor(Tk / Bc) = 3 (review round 16 a)
    ("backward, ragged, Tq = 50, Tk = 37, d = 7, Br = 8, Bc = 10, e = 2",
     (50, 37, 7, 8, 10, 2)),
    ("backward, Tq = 9 < Tk = 40, d = 3, Br = 4, Bc = 6, e = 8", (9, 40, 3, 4, 6, 8)),
]


def check_backward_traffic(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check my_backward_traffic(Tq, Tk, d, Br, Bc, e) -> (read_bytes, write_bytes) of
    `tiled.backward` (non-causal, dQ accumulated per tile) against the byte counter."""
    cases = []
    for name, cfg in BACKWARD_CASES:
        variants = _bwd_variants(*cfg)
        diagnoses = [(lambda y, x: not (isinstance(y, tuple) and len(y) == 2), HINT_RETURN),
                     (_swapped, HINT_PAIR_SWAPPED)]
        for key, hint in (("no_dq", HINT_BWD_DQ), ("once", HINT_BWD_ONCE),
                          ("stat_e", HINT_BWD_STAT), ("no_d", HINT_BWD_D),
                          ("no_dkdv", HINT_BWD_DKDV), ("no_o", HINT_BWD_D),
                          ("one_stat", HINT_BWD_STAT_TILE)):
            diagnoses.append(((lambda y, x, w=variants[key]: tuple(y) == w), hint))
        # statistics at e bytes, or key blocks rounded down, in the reads or the writes only
        for key, hint in (("stat_e", HINT_BWD_STAT), ("floor", HINT_BWD_FLOOR),
                          ("plus_one", HINT_PLUS_ONE)):
            diagnoses.append(((lambda y, x, w=variants[key]: (y[0] == w[0] and y[0] != x[0])
                               or (y[1] == w[1] and y[1] != x[1])), hint))
        # Tc from the wrong length or block size (review round 16 a: Br for Bc got the floor
        # hint where ceil(Tk / Br) equals floor(Tk / Bc))
        for key in (k for k in variants if k.startswith("tc_")):
            diagnoses.append(((lambda y, x, w=variants[key]: (y[0] == w[0] and y[0] != x[0])
                               or (y[1] == w[1] and y[1] != x[1])), HINT_BWD_TC_SIZES))

        def run(f, cfg=cfg):
            return _as_pair(f(*cfg)), backward_counter_traffic(*cfg)

        cases.append(Case(name, run, HINT_BWD_GENERIC, with_level2(diagnoses, BWD_STEPS), rtol=0.0,
                          atol=0.0, hint2=BWD_STEPS))
    return run_checks("my_backward_traffic against the byte counter", fn, cases,
                      verbose=verbose, hint_level=hint_level)


ALL_HINTS = [v for k, v in dict(globals()).items()
             if k.startswith("HINT_") or k.endswith("_STEPS")]
