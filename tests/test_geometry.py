"""flashcourse.geometry: causal counts in closed form equal brute-force counts, at any size.

The closed forms (an arithmetic series for pairs, a floor sum for tiles) are checked
against walking every tile with `tile_visibility` on all small shapes, then used at
T = 1e12 and 2**62, where an array of T / Br entries would not fit in memory and int64
would overflow: the answers must be exact positive Python integers.
"""

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from flashcourse import geometry, traffic


def brute_block_sums(tq, tk, br, bc, causal):
    tiles = key_rows = query_rows = 0
    for q0 in range(0, tq, br):
        q1 = min(q0 + br, tq)
        for k0 in range(0, tk, bc):
            k1 = min(k0 + bc, tk)
            if geometry.tile_visibility(q0, q1, k0, k1, tq, tk, causal) == "hidden":
                continue
            tiles, key_rows, query_rows = tiles + 1, key_rows + k1 - k0, query_rows + q1 - q0
    return tiles, key_rows, query_rows


@pytest.mark.parametrize("causal", [False, True])
def test_block_sums_match_brute_force(causal):
    for tq, tk, br, bc in itertools.product(range(1, 12), range(1, 12), range(1, 5),
                                            range(1, 5)):
        assert geometry.causal_block_sums(tq, tk, br, bc, causal) == \
            brute_block_sums(tq, tk, br, bc, causal), (tq, tk, br, bc)


def mask_block_sums(tq, tk, br, bc, causal):
    """(tiles, key_rows, query_rows) over the tiles in which the element mask
    `visible_mask` shows at least one pair: independent of `tile_visibility`."""
    mask = geometry.visible_mask(tq, tk, causal)                 # (Tq, Tk)
    tiles = key_rows = query_rows = 0
    for q0 in range(0, tq, br):
        for k0 in range(0, tk, bc):
            tile = mask[q0:q0 + br, k0:k0 + bc]                   # (rows(Q_i), rows(K_j))
            if tile.any():
                tiles += 1
                query_rows += tile.shape[0]
                key_rows += tile.shape[1]
    return tiles, key_rows, query_rows


@given(tq=st.integers(1, 40), tk=st.integers(1, 40), br=st.integers(1, 48),
       bc=st.integers(1, 48), causal=st.booleans())
@example(tq=30, tk=7, br=4, bc=3, causal=True)       # Tq > Tk: rows with no visible key
@example(tq=7, tk=30, br=3, bc=4, causal=True)       # Tq < Tk
@example(tq=9, tk=9, br=1, bc=1, causal=True)        # 1 x 1 tiles
@example(tq=13, tk=11, br=64, bc=64, causal=True)    # blocks larger than T
def test_block_sums_match_the_element_mask(tq, tk, br, bc, causal):
    """The rows the labs' skipping checks expect (key rows and query rows loaded over the
    visible tiles, exact integers) equal a count over the element mask."""
    assert geometry.causal_block_sums(tq, tk, br, bc, causal) == \
        mask_block_sums(tq, tk, br, bc, causal)


def test_visible_pairs_match_the_mask():
    for tq, tk in itertools.product(range(1, 15), range(1, 15)):
        for causal in (False, True):
            assert geometry.visible_pairs(tq, tk, causal=causal) == \
                int(geometry.visible_mask(tq, tk, causal).sum())


def test_floor_sum_by_brute_force():
    for n, m, a, b in itertools.product(range(0, 7), range(1, 6), range(-7, 8), range(-9, 9)):
        assert geometry.floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


@pytest.mark.parametrize("t", [10**12, 2**62])
def test_huge_lengths_exact_and_positive(t):
    br = bc = 128
    tr = -(-t // br)
    # causal, Tq = Tk: query block i sees blocks 0..i, so sum = Tr (Tr + 1) / 2
    tiles = geometry.visible_tile_count(t, t, br, bc, causal=True)
    assert tiles == tr * (tr + 1) // 2
    assert geometry.visible_pairs(t, t, causal=True) == t * (t + 1) // 2
    for causal in (False, True):
        fwd = traffic.tiled_traffic(t, t, 64, br, bc, causal=causal)
        bwd = traffic.backward_traffic(t, t, 64, block_q=br, block_k=bc, causal=causal)
        assert fwd.read_bytes > 0 and bwd.read_bytes > 0 and bwd.write_bytes > 0
        assert isinstance(fwd.read_bytes, int)
    # fa2 reads Q once and K, V once per visible pair: key rows = sum min(n_i Bc, T)
    _, key_rows, _ = geometry.causal_block_sums(t, t, br, bc, True)
    assert traffic.tiled_traffic(t, t, 64, br, bc, causal=True).read_bytes == \
        t * 64 * 2 + 2 * key_rows * 64 * 2
