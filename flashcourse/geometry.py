"""Tile and causal geometry: which (query, key) pairs and tiles a mask leaves visible.

Causal masks are bottom-right aligned: query i sees key j iff j <= i + (Tk - Tq), so a
query row with i + Tk - Tq < 0 sees no key (o = 0, lse = -inf). Tiles are Br query rows
(block_q) by Bc key rows (block_k): Tr = ceil(Tq / Br) query blocks, Tc = ceil(Tk / Bc)
key blocks, the last of each possibly ragged.

Every count here is exact and in closed form with Python integers (no arrays sized by
T), so it works for T = 1e12 or 2**62 as well as for T = 5:

    visible_pairs       pairs a row-by-row causal mask leaves (sum of an arithmetic series)
    causal_block_sums   tiles formed, and the K and Q rows they load (a floor sum)
    visible_tile_count  tiles a tiled kernel forms (not skipped)

`visible_mask` and `tile_visibility` are the per-tile rules the numpy paths apply;
`causal_mask` also builds the top-left aligned mask (PyTorch's is_causal=True).
"""

from __future__ import annotations

import numbers

import numpy as np

from ._checks import check_block, check_causal, check_whole


def _integer(x, name: str) -> int:
    """`x` as an int (any sign; bools refused), else a TypeError naming `name`."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {x!r} ({type(x).__name__})")
    return int(x)


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for integers, exact for any size (b > 0); a TypeError or ValueError
    naming a or b otherwise."""
    return -(-_integer(a, "a") // check_block(b, "b"))


def causal_offset(t_query: int, t_key: int) -> int:
    """Bottom-right alignment: query i may see key j iff j <= i + (Tk - Tq); t_query and
    t_key whole numbers >= 0 (an error naming them otherwise)."""
    return check_whole(t_key, "t_key") - check_whole(t_query, "t_query")


def visible_mask(t_query: int, t_key: int, causal: bool,
                 q0: int = 0, q1: int | None = None,
                 k0: int = 0, k1: int | None = None) -> np.ndarray:
    """Boolean (q1-q0, k1-k0) mask of visible pairs for rows [q0, q1), cols [k0, k1).

    Whole numbers with 0 <= q0 <= q1 and 0 <= k0 <= k1 (q1, k1 default to t_query,
    t_key); a TypeError or ValueError naming the argument otherwise."""
    t_query, t_key = check_whole(t_query, "t_query"), check_whole(t_key, "t_key")
    causal = check_causal(causal)
    q0, k0 = check_whole(q0, "q0"), check_whole(k0, "k0")
    q1 = t_query if q1 is None else check_whole(q1, "q1", least=q0)
    k1 = t_key if k1 is None else check_whole(k1, "k1", least=k0)
    if q1 < q0 or k1 < k0:
        raise ValueError(f"need q0 <= q1 and k0 <= k1, got q0={q0}, q1={q1}, k0={k0}, k1={k1}")
    if not causal:
        return np.ones((q1 - q0, k1 - k0), dtype=bool)
    i = np.arange(q0, q1)[:, None]
    j = np.arange(k0, k1)[None, :]
    return j <= i + causal_offset(t_query, t_key)


#: Where a causal mask's diagonal starts when Tq != Tk.
CAUSAL_ALIGNMENTS = ("bottom-right", "top-left")


def causal_mask(t_query: int, t_key: int, *, align: str = "bottom-right") -> np.ndarray:
    """Boolean (Tq, Tk) mask of the pairs a causal mask lets through.

    align="bottom-right" (this course, FlashAttention 2.1 and later): query i sees key j
        iff j <= i + Tk - Tq; the last query sees every key.
    align="top-left" (PyTorch's scaled_dot_product_attention with is_causal=True, and
        FlashAttention before 2.1): j <= i; the first query sees the first key.
    The two agree when Tq == Tk.
    """
    tq = check_block(t_query, "t_query")
    tk = check_block(t_key, "t_key")
    if align not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"align must be 'bottom-right' or 'top-left', got {align!r}")
    if align == "bottom-right":
        return visible_mask(tq, tk, True)
    return np.arange(tk)[None, :] <= np.arange(tq)[:, None]          # (Tq, Tk)


def tile_visibility(q0: int, q1: int, k0: int, k1: int,
                    t_query: int, t_key: int, causal: bool) -> str:
    """Classify the tile rows [q0, q1) x cols [k0, k1): 'full', 'partial' or 'hidden'.

    Whole numbers (>= 0) and a bool causal; a TypeError or ValueError naming the argument
    otherwise."""
    q0, q1, k0, k1, t_query, t_key = (check_whole(x, n) for x, n in (
        (q0, "q0"), (q1, "q1"), (k0, "k0"), (k1, "k1"), (t_query, "t_query"), (t_key, "t_key")))
    if not check_causal(causal):
        return "full"
    off = causal_offset(t_query, t_key)
    if k0 > (q1 - 1) + off:  # even the last row cannot see the first column
        return "hidden"
    if (k1 - 1) <= q0 + off:  # even the first row sees the last column
        return "full"
    return "partial"


def visible_pairs(t_query: int, t_key: int, *, causal: bool = False) -> int:
    """Number of (query, key) pairs attention scores (pairs).

    Non-causal: Tq * Tk. Causal (bottom-right aligned, query i sees key j iff
    j <= i + Tk - Tq): sum over rows of the visible keys, clipped to [0, Tk].
    """
    tq = check_block(t_query, "t_query")
    tk = check_block(t_key, "t_key")
    if not check_causal(causal):
        return tq * tk
    off = causal_offset(tq, tk)
    # row i sees min(max(i + off + 1, 0), Tk) keys; rows with 0 < i + off + 1 < Tk
    # form an arithmetic series, the rows after it see all Tk keys
    total = 0
    lo = max(0, -off)                 # first row that sees at least one key
    hi = min(tq, tk - off - 1)        # first row that sees all Tk keys
    if hi > lo:
        first, last = lo + off + 1, hi - 1 + off + 1
        total += (first + last) * (hi - lo) // 2
    total += max(0, tq - max(hi, lo)) * tk
    return total


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum_{i=0}^{n-1} floor((a i + b) / m) for integers n >= 0, m >= 1, any a, b,
    in O(log) steps (the Euclid-like recursion; exact with Python integers). A TypeError
    or ValueError naming the argument for anything else."""
    n, m = check_whole(n, "n"), check_block(m, "m")
    a, b = _integer(a, "a"), _integer(b, "b")
    total = 0
    while True:                  # Python's // and % floor, so negative a, b work too
        if not 0 <= a < m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if not 0 <= b < m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return total
        n, b, m, a = y_max // m, y_max % m, a, m


def causal_block_sums(t_query: int, t_key: int, block_q: int, block_k: int,
                      causal: bool) -> tuple[int, int, int]:
    """(tiles, key_rows, query_rows) summed over the visible (query block, key block) pairs.

    A pair (i, j) is visible unless the causal mask hides all of it (k0 > q1 - 1 + Tk - Tq,
    the rule of `tile_visibility`). Query block i sees key blocks j < n_i with
    n_i = clip(floor((q1_i - 1 + Tk - Tq) / Bc) + 1, 0, Tc): tiles = sum n_i,
    key_rows = sum min(n_i Bc, Tk) (rows of K, and of V, loaded), query_rows =
    sum rows(Q_i) n_i. The last query block ends at row Tq - 1 and sees every key
    block; the others have Br rows, and the sum of their n_i is a floor sum. Positive
    whole numbers, causal a bool: an error naming the argument otherwise.
    """
    tq, tk = check_block(t_query, "t_query"), check_block(t_key, "t_key")
    br, bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    causal = check_causal(causal)
    tr, tc = ceil_div(tq, br), ceil_div(tk, bc)
    if not causal:
        return tr * tc, tr * tk, tc * tq
    full = tr - 1                                # query blocks of br rows: i = 0 .. full-1
    a = br - 1 + (tk - tq)                       # n_i = floor((a + i br) / bc) + 1, clipped
    i_lo = min(full, max(0, ceil_div(-a, br)))                # first i with n_i >= 1
    i_hi = min(full, max(i_lo, ceil_div((tc - 1) * bc - a, br)))   # first i with n_i >= tc
    mid = i_hi - i_lo                            # blocks with 1 <= n_i < tc
    sum_mid = floor_sum(mid, bc, br, a + br * i_lo) + mid
    n_all = full - i_hi                          # blocks that see all tc key blocks
    tiles = sum_mid + (n_all + 1) * tc           # + the last query block
    key_rows = bc * sum_mid + (n_all + 1) * tk   # n_i Bc < Tk below Tc; Tk rows at Tc
    query_rows = br * sum_mid + br * n_all * tc + (tq - full * br) * tc
    return tiles, key_rows, query_rows


def visible_tile_count(t_query: int, t_key: int, block_q: int, block_k: int, *,
                       causal: bool = False) -> int:
    """Number of (query block, key block) tiles a tiled kernel forms (not skipped)."""
    tq = check_block(t_query, "t_query")
    tk = check_block(t_key, "t_key")
    br = check_block(block_q, "block_q")
    bc = check_block(block_k, "block_k")
    return causal_block_sums(tq, tk, br, bc, check_causal(causal))[0]
