"""flashcourse.distributed (issue 55): context parallelism.

The numpy parts (shards, the merge, the time model) are tested here without PyTorch; the
multi-process tests (ring, all-gather, Ulysses on gloo) skip without it.
"""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import decode, reference
from flashcourse.distributed import model, shards
from flashcourse.distributed.merge import merge_sigmoid


# ---------------------------------------------------------------------------
# shards (numpy only)
# ---------------------------------------------------------------------------

LAYOUT_NAMES = st.sampled_from(["zigzag", "contiguous"])


@given(world=st.integers(1, 8), extra=st.integers(0, 60), layout=LAYOUT_NAMES)
def test_every_position_is_on_exactly_one_rank(world, extra, layout):
    n = shards.LAYOUTS[layout] * world + extra
    layout_ranges = shards.layout_shards(n, world, layout)
    assert len(layout_ranges) == world
    idx = np.concatenate([shards.rank_indices(r) for r in layout_ranges])
    assert np.array_equal(np.sort(idx), np.arange(n))
    sizes = [b - a for r in layout_ranges for a, b in r]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


@given(world=st.integers(1, 6), extra=st.integers(0, 40))
def test_shard_then_unshard_is_the_identity(world, extra):
    n = 2 * world + extra
    x = np.arange(3 * n * 2, dtype=np.float64).reshape(3, n, 2)
    layout = shards.zigzag_shards(n, world)
    parts = [shards.shard(x, r) for r in layout]
    assert [p.shape[1] for p in parts] == [len(shards.rank_indices(r)) for r in layout]
    assert np.array_equal(parts[0], x[:, shards.rank_indices(layout[0])])
    assert np.array_equal(shards.unshard(parts, layout), x)


def test_zigzag_holds_chunk_r_and_its_mirror():
    assert shards.zigzag_shards(37, 2) == [[(0, 10), (28, 37)], [(10, 19), (19, 28)]]
    assert shards.contiguous_shards(37, 2) == [[(0, 19)], [(19, 37)]]


def _brute_pairs(n, world, layout):
    ranks = [shards.rank_indices(r) for r in shards.layout_shards(n, world, layout)]
    out = np.zeros((world, world), dtype=np.int64)
    for r in range(world):
        for s in range(world):
            kv = ranks[shards.ring_source(r, s, world)]
            out[r, s] = int((kv[None, :] <= ranks[r][:, None]).sum())
    return out


@given(world=st.integers(1, 6), extra=st.integers(0, 50), layout=LAYOUT_NAMES)
def test_causal_pairs_counts_the_visible_pairs(world, extra, layout):
    n = 2 * world + extra
    pairs = shards.causal_pairs(n, world, layout)
    assert np.array_equal(pairs, _brute_pairs(n, world, layout))
    assert pairs.sum() == n * (n + 1) // 2                         # the whole causal triangle
    assert shards.causal_pairs(n, world, layout, causal=False).sum() == n * n


@given(world=st.integers(2, 8), extra=st.integers(0, 200))
def test_zigzag_balances_causal_work_within_one_chunk(world, extra):
    n = 2 * world + extra
    chunk = -(-n // (2 * world))                                   # the longest chunk
    work = shards.causal_pairs(n, world, "zigzag").sum(axis=1)
    # one chunk's worth: the pairs of one chunk row against the sequence
    assert work.max() - work.min() <= chunk * chunk + 2 * chunk * world, work
    contiguous = shards.causal_pairs(n, world, "contiguous").sum(axis=1)
    assert work.max() <= contiguous.max()


def test_zigzag_is_far_better_balanced_than_contiguous():
    zz = shards.causal_pairs(4096, 4, "zigzag").sum(axis=1)
    cont = shards.causal_pairs(4096, 4, "contiguous").sum(axis=1)
    assert zz.max() / zz.min() < 1.01
    assert cont.max() / cont.min() > 6


@pytest.mark.parametrize("call, match", [
    (lambda: shards.zigzag_shards(7, 4), "n .*at least"),
    (lambda: shards.contiguous_shards(10, 0), "world must be >= 1"),
    (lambda: shards.layout_shards(10, 2, "ring"), "layout must be one of"),
    (lambda: shards.chunk_bounds(2.5, 2), "n must be an int"),
])
def test_shards_reject_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# ---------------------------------------------------------------------------
# merge (numpy; torch below)
# ---------------------------------------------------------------------------

def _split_states(rng, tq, tk, d, split, causal):
    q, k, v = (rng.standard_normal((2, t, d)) for t in (tq, tk, tk))
    o, lse = reference.attention(q, k, v, causal=causal)
    mask = np.zeros((tq, tk), dtype=bool)
    mask[:, :split] = True
    if causal:
        mask &= np.arange(tk)[None, :] <= np.arange(tq)[:, None] + tk - tq
    parts = []
    for m in (mask, ~mask & (np.arange(tk)[None, :] <= np.arange(tq)[:, None] + tk - tq
                             if causal else ~mask)):
        o_p, lse_p = reference.attention_with_mask(q, k, v, m, scale=1 / np.sqrt(d))
        parts.append((o_p, lse_p))
    return (o, lse), parts


@given(tk=st.integers(2, 30), tq=st.integers(1, 30), d=st.integers(1, 7),
       frac=st.floats(0, 1), causal=st.booleans(), seed=st.integers(0, 2**31))
def test_merge_sigmoid_equals_attention_over_the_union(tk, tq, d, frac, causal, seed):
    rng = np.random.default_rng(seed)
    split = int(round(frac * tk))
    (o, lse), ((o_a, lse_a), (o_b, lse_b)) = _split_states(rng, tq, tk, d, split, causal)
    for got_o, got_lse in (merge_sigmoid(o_a, lse_a, o_b, lse_b),
                           merge_sigmoid(o_b, lse_b, o_a, lse_a)):
        assert np.all(np.isfinite(got_o))
        np.testing.assert_allclose(got_o, o, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(got_lse, lse, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(merge_sigmoid(o_a, lse_a, o_b, lse_b)[0],
                               decode.merge(o_a, lse_a, o_b, lse_b)[0], rtol=1e-12, atol=1e-13)


def test_merge_sigmoid_empty_rows_take_the_other_state():
    ninf = -np.inf
    o_a = np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [1.0, 1.0]])
    lse_a = np.array([ninf, 0.5, ninf, 0.0])
    o_b = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, 0.0], [3.0, 3.0]])
    lse_b = np.array([1.5, ninf, ninf, 0.0])
    with np.errstate(all="raise"):
        o, lse = merge_sigmoid(o_a, lse_a, o_b, lse_b)
    assert np.array_equal(o, [[3, 4], [1, 2], [0, 0], [2, 2]])
    assert np.array_equal(lse, [1.5, 0.5, ninf, np.log(2.0)])


def test_merge_sigmoid_names_the_mismatched_argument():
    with pytest.raises(ValueError, match="o_b"):
        merge_sigmoid(np.zeros((3, 2)), np.zeros(3), np.zeros((4, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="o_a and o_b"):
        merge_sigmoid(np.zeros((3, 2)), np.zeros(3), np.zeros((3, 1)), np.zeros(3))


# ---------------------------------------------------------------------------
# the time model
# ---------------------------------------------------------------------------

def test_ring_model_units_and_hiding():
    # non-causal, B H = 1, d = 64, 2-byte elements, 1e12 FLOP/s, 1e9 B/s, 4 ranks of 1000
    r = model.ring_step_times(4000, 64, 4, element_bytes=2, flops_per_s=1e12,
                              link_bytes_per_s=1e9, causal=False, layout="contiguous")
    np.testing.assert_allclose(r["compute_s"], 4 * 1000 * 1000 * 64 / 1e12)   # 256 us
    np.testing.assert_allclose(r["link_s"], [2 * 1000 * 64 * 2 / 1e9] * 3 + [0])  # 256 us
    assert r["hidden"].all()
    assert model.min_hidden_shard(element_bytes=2, flops_per_s=1e12, link_bytes_per_s=1e9) == 1000
    slow = model.ring_step_times(4000, 64, 4, flops_per_s=1e12, link_bytes_per_s=0.5e9,
                                 causal=False)
    assert not slow["hidden"][:3].any() and slow["hidden"][3]
    assert slow["total_s"] < slow["serial_s"]
    np.testing.assert_allclose(slow["total_s"], slow["link_s"].sum() + slow["compute_s"][-1])


def test_ring_model_rejects_bad_units():
    with pytest.raises(ValueError, match="link_bytes_per_s"):
        model.ring_step_times(64, 8, 2, link_bytes_per_s=0)
    with pytest.raises(ValueError, match="d must be"):
        model.ring_step_times(64, 0, 2)


def test_numpy_parts_import_without_torch():
    code = ("import sys; import flashcourse, flashcourse.distributed; "
            "from flashcourse.distributed import shards, model, merge; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
