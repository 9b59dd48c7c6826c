"""flashcourse.variants.block_mask: full tiles really full, empty really empty, the index
layout of FlexAttention's BlockMask, the cache, skipping (tiles visited and mask
evaluations counted), and one clear error for each bad input."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from flashcourse.variants import block_mask as bmm, cpu, library as lib, mods, tiled
from flashcourse.variants import reference as ref
from flashcourse.variants.block_mask import EMPTY, FULL, PARTIAL, create_block_mask


def dense_states(mask, br, bc):
    """(Tr, Tc) states of a dense (Tq, Tk) mask, tile by tile (the brute force)."""
    tq, tk = mask.shape
    out = np.empty((-(-tq // br), -(-tk // bc)), np.int8)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            t = mask[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            out[i, j] = FULL if t.all() else PARTIAL if t.any() else EMPTY
    return out


@given(tq=st.integers(1, 40), tk=st.integers(1, 40), br=st.integers(1, 12),
       bc=st.integers(1, 12), density=st.floats(0, 1), seed=st.integers(0, 2**16))
def test_random_mask_tiles_match_the_brute_force(tq, tk, br, bc, density, seed):
    pattern = np.random.default_rng(seed).random((tq, tk)) < density       # (Tq, Tk)

    def random_mask(b, h, q_idx, kv_idx):
        return pattern[q_idx, kv_idx]
    bm = create_block_mask(random_mask, None, None, tq, tk, br, bc, cache=False)
    states = bm.states()[0, 0]
    assert np.array_equal(states, dense_states(pattern, br, bc))
    assert bm.visible_pairs == int(pattern.sum())
    # the index lists: counts, the listed blocks first and ascending, the transpose
    for i in range(states.shape[0]):
        partial, full = bm.key_blocks(0, 0, i)
        assert list(partial) == list(np.flatnonzero(states[i] == PARTIAL))
        assert list(full) == list(np.flatnonzero(states[i] == FULL))
    for j in range(states.shape[1]):
        partial, full = bm.query_blocks(0, 0, j)
        assert list(partial) == list(np.flatnonzero(states[:, j] == PARTIAL))
        assert list(full) == list(np.flatnonzero(states[:, j] == FULL))
    for idx in (bm.kv_indices, bm.full_kv_indices, bm.q_indices, bm.full_q_indices):
        assert idx.dtype == np.int32
        assert np.array_equal(np.sort(idx, axis=-1), np.broadcast_to(
            np.arange(idx.shape[-1]), idx.shape))        # every row a permutation: in range


def test_per_head_and_per_batch_masks():
    def head_mask(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + 4 * h - 3 * b
    bm = create_block_mask(head_mask, 2, 3, 20, 30, 4, 8, cache=False)
    assert bm.shape == (2, 3, 20, 30)
    for b in range(2):
        for h in range(3):
            dense = np.arange(30)[None, :] <= np.arange(20)[:, None] + 4 * h - 3 * b
            assert np.array_equal(bm.states()[b, h], dense_states(dense, 4, 8))


def test_describe_bytes_and_build_time():
    bm = create_block_mask(lib.causal(100, 130), None, None, 100, 130, 16, 32, cache=False)
    t = bm.tiles()
    assert t["full"] + t["partial"] + t["empty"] == t["total"] == 7 * 5
    assert bm.nbytes == 4 * (2 * 7 + 2 * 7 * 5 + 2 * 5 + 2 * 5 * 7)       # int32 arrays
    assert bm.build_seconds > 0 and bm.mask_evaluations == 100 * 130
    assert "35" in bm.describe() and f"{bm.nbytes:,} bytes" in bm.describe()
    assert bm.to_string().splitlines()[-1] == "###++"      # rows 96..99 see keys <= 126..129


def test_cache_hits_and_content_keys():
    bmm.clear_cache()
    doc = np.array([0, 0, 1, 1, 1, 2])

    def same_doc(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]
    a = create_block_mask(same_doc, None, None, 6, 6, 2, 2)
    assert create_block_mask(same_doc, None, None, 6, 6, 2, 2) is a
    # two closures with equal contents share the entry; other sizes do not
    assert create_block_mask(lib.document([0, 3, 6]), None, None, 6, 6, 2, 2) is \
        create_block_mask(lib.document([0, 3, 6]), None, None, 6, 6, 2, 2)
    assert create_block_mask(same_doc, None, None, 6, 6, 3, 2) is not a
    doc[:] = 0                                       # changed in place: rebuilt, not stale
    b = create_block_mask(same_doc, None, None, 6, 6, 2, 2)
    assert b is not a and b.tiles()["full"] == 9
    info = bmm.cache_info()
    assert info["hits"] == 2 and info["misses"] == 4 and info["nbytes"] > 0


def test_kernels_skip_empty_tiles_and_do_not_evaluate_full_ones(rng):
    """Tiles formed = non-empty tiles; mask_mod called exactly on the partial tiles'
    pairs: counted by the kernels, and by the mask itself in the numpy path."""
    tq, tk, br, bc = 50, 70, 8, 16
    base = lib.sliding_window(10, tq, tk)
    bm = create_block_mask(base, None, None, tq, tk, br, bc, cache=False)
    states = bm.states()[0, 0]
    widths = np.minimum(bc, tk - np.arange(states.shape[1]) * bc)
    heights = np.minimum(br, tq - np.arange(states.shape[0]) * br)
    partial_pairs = int((np.outer(heights, widths) * (states == PARTIAL)).sum())
    heads = 2 * 2
    q = rng.standard_normal((2, 2, tq, 4))
    k = rng.standard_normal((2, 1, tk, 4))
    for fwd in (tiled.forward, cpu.forward):
        stats = {}
        fwd(q, k, k, block_mask=bm, stats=stats)
        assert stats["tiles"] == heads * int((states != EMPTY).sum())
        assert stats["mask_evaluations"] == heads * partial_pairs
    o, lse = tiled.forward(q, k, k, block_mask=bm)
    for bwd, passes in ((tiled.backward, 1), (cpu.backward, 2)):   # cpu: dK/dV, then dQ
        stats = {}
        bwd(q, k, k, o, lse, q.copy(), block_mask=bm, stats=stats)
        assert stats["tiles"] == passes * heads * int((states != EMPTY).sum())
        assert stats["mask_evaluations"] == passes * heads * partial_pairs
    calls = []

    def counted(b, h, q_idx, kv_idx):
        calls.append(np.broadcast(q_idx, kv_idx).size)
        return base(b, h, q_idx, kv_idx)
    counted.seq_lengths = base.seq_lengths
    probe = mods.PROBE_PAIRS            # the bounds probe of every call (mods.check_fits)
    bm2 = create_block_mask(counted, None, None, tq, tk, br, bc, cache=False)
    assert sum(calls) == tq * tk + probe
    calls.clear()
    tiled.forward(q, k, k, block_mask=bm2)
    assert sum(calls) == heads * partial_pairs + probe
    calls.clear()
    o, lse = tiled.forward(q, k, k, block_mask=bm2)
    tiled.backward(q, k, k, o, lse, q.copy(), block_mask=bm2)
    assert sum(calls) == 2 * heads * partial_pairs + 2 * probe


def test_block_mask_tiles_are_the_kernel_tiles(rng):
    q = rng.standard_normal((1, 1, 9, 3))
    bm = create_block_mask(lib.causal(align="top-left"), None, None, 9, 9, 4, 4)
    with pytest.raises(ValueError, match="block_q = 2 differs"):
        tiled.forward(q, q, q, block_mask=bm, block_q=2)
    with pytest.raises(ValueError, match=r"built for \(Tq, Tk\) = \(9, 9\)"):
        tiled.forward(q[:, :, :8], q, q, block_mask=bm)


# ---------------------------------------------------------------------------
# bad input: one clear error each
# ---------------------------------------------------------------------------

def one_line(excinfo):
    assert "\n" not in str(excinfo.value), str(excinfo.value)
    return str(excinfo.value)


def test_bad_masks_and_mods():
    with pytest.raises(TypeError, match="must return a bool") as e:
        create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx - q_idx, None, None, 5, 5, 2, 2)
    one_line(e)
    with pytest.raises(TypeError, match="must return a bool") as e:
        create_block_mask(lambda b, h, q_idx, kv_idx: 1 if q_idx > kv_idx else 0,
                          None, None, 5, 5, 2, 2)
    with pytest.raises(TypeError, match="exactly 4 arguments"):
        create_block_mask(lambda q_idx, kv_idx: q_idx >= kv_idx, None, None, 5, 5, 2, 2)
    with pytest.raises(TypeError, match="plain Python function"):
        create_block_mask(np.ones((5, 5), bool), None, None, 5, 5, 2, 2)
    with pytest.raises(ValueError, match="one value per pair") as e:
        create_block_mask(lambda b, h, q_idx, kv_idx: np.ones(3, bool), None, None, 5, 5, 2, 2)
    one_line(e)
    with pytest.raises(TypeError, match="float score"):
        mods.score_tile(lambda s, b, h, q, kv: s > 0, np.zeros((2, 2)), 0, 0, [0, 1], [0, 1])
    table = {0: 1}

    def uses_a_dict(b, h, q_idx, kv_idx):
        return table[0] > 0
    with pytest.raises(TypeError, match="cannot be compiled by Numba") as e:
        mods.compiled_mask(uses_a_dict)
    one_line(e)


@pytest.mark.parametrize("call,match", [
    (lambda: lib.document([0, 3, 3, 6]), "strictly increasing"),
    (lambda: lib.document([1, 3, 6]), "start at 0"),
    (lambda: lib.document([[0, 6]]), "1-D integer array"),
    (lambda: lib.check_cu_seqlens([0, 2, 5], total=6), "end at the sequence length T = 6"),
    (lambda: lib.sliding_window(-1), "window must be an integer >= 0"),
    (lambda: lib.sliding_window(3), "needs t_query and t_key"),
    (lambda: lib.causal(4, 4, align="top-right"), "align must be one of"),
    (lambda: lib.softcap(0.0), "cap must be a finite number > 0"),
    (lambda: lib.alibi(np.ones((2, 2))), "slopes must be a 1-D"),
    (lambda: lib.random_block_sparse(8, 8, 2, 2, density=1.5), "density"),
    (lambda: mods.and_masks(lib.causal(4, 4), lib.causal(5, 5)), "different seq_lengths"),
])
def test_bad_builtin_arguments(call, match):
    with pytest.raises((ValueError, TypeError), match=match) as e:
        call()
    one_line(e)


def test_bad_attention_inputs(rng):
    q = rng.standard_normal((1, 3, 6, 4))
    k = rng.standard_normal((1, 2, 6, 4))
    good_k = rng.standard_normal((1, 1, 6, 4))
    cases = [
        (lambda: ref.reference(q, k, k), "multiple of the key/value heads"),
        (lambda: ref.reference(q[0], good_k[0], good_k[0]), "4 dimensions"),
        (lambda: ref.reference(q, good_k, good_k[..., :3]), "v must have k's shape"),
        (lambda: ref.reference(q, good_k, good_k, sinks=np.ones(2)), "sinks must be"),
        (lambda: ref.reference(q, good_k, good_k, mask_mod=lib.causal(5, 6)),
         r"made for \(Tq, Tk\) = \(5, 6\)"),
        (lambda: ref.reference(q, good_k, good_k, score_mod=lib.alibi(np.ones(4))),
         "made for 4 query heads"),
        (lambda: tiled.forward(q, good_k, good_k, block_mask="causal"),
         "block_mask must be"),
        (lambda: tiled.forward(q, good_k, good_k, stats=[]), "stats must be a dict"),
        (lambda: lib.document([0, 6])(0, 0, np.arange(6)[:, None], np.arange(6)) is None
         or create_block_mask(lib.document([0, 6]), None, None, 7, 6, 2, 2),
         r"made for \(Tq, Tk\) = \(6, 6\)"),
    ]
    pos = np.arange(5.0)                               # one too short for Tk = 6

    def short_bias(score, b, h, q_idx, kv_idx):
        return score + pos[kv_idx]

    def short_mask(b, h, q_idx, kv_idx):
        return pos[q_idx] >= 0
    cases += [
        (lambda: cpu.forward(q, good_k, good_k, score_mod=short_bias),
         "short_bias reads past the end of an array"),
        (lambda: create_block_mask(short_mask, None, None, 6, 6, 2, 2),
         "short_mask reads past the end"),
    ]
    for call, match in cases:
        with pytest.raises((ValueError, TypeError, IndexError), match=match) as e:
            call()
        one_line(e)
