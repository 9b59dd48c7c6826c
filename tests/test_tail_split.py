"""The tail split of the hopper forward (`flashcourse.cuda.hopper.tail_split`), on the CPU.

The plan and the block -> (unit, key range) mapping are pure Python; the combine kernel
runs on Numba's CUDA simulator here and is checked against float64 attention. The hopper
kernel's pieces (which need wgmma) are checked on the H200 by benchmarks/gpu_hopper.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashcourse import reference
from flashcourse.cuda.hopper import tail_split as ts
from flashcourse.cuda.ptx.mma import round_bf16, round_fp16


def test_the_h200_example_of_the_docstring():
    # d = 128, Br = 192, N = 4096, B x H = 32: 22 query blocks a head, 64 key blocks of 64
    sp = ts.plan(22 * 32, 64, 132)
    assert (sp.units, sp.main, sp.splits, sp.tail, sp.blocks) == (704, 660, 3, 44, 792)
    assert ts.block_times(ts.plan(704, 64, 132, splits=1), 132, 64) == 6.0
    assert ts.block_times(sp, 132, 64) == pytest.approx(5 + 22 / 64)
    assert ts.grid_use(ts.plan(704, 64, 132, splits=1), 132, 64) == pytest.approx(704 / 792)


def test_no_split_when_the_last_wave_is_full_causal_or_the_keys_are_few():
    assert ts.plan(2 * 132, 64, 132).splits == 1            # whole waves
    assert ts.plan(704, 64, 132, causal=True).splits == 1   # unequal units
    assert ts.plan(704, 7, 132).splits == 1                 # < 2 x MIN_KEY_BLOCKS keys
    assert ts.plan(704, 64, 132, causal=True, splits=2).splits == 2   # asked for


@settings(max_examples=200, deadline=None)
@given(units=st.integers(1, 3000), key_blocks=st.integers(1, 300),
       slots=st.integers(1, 300), causal=st.booleans(),
       forced=st.one_of(st.none(), st.integers(1, 16)))
def test_every_key_block_of_every_unit_runs_exactly_once(units, key_blocks, slots, causal,
                                                         forced):
    if forced is not None and forced > key_blocks:
        with pytest.raises(ValueError, match="splits must be at most"):
            ts.plan(units, key_blocks, slots, causal, forced)
        return
    sp = ts.plan(units, key_blocks, slots, causal, forced)
    assert sp.main % slots == 0 or sp.splits == 1
    if forced is None and sp.splits > 1:
        assert sp.tail * sp.splits <= slots and not causal    # the pieces fit in one wave
        assert key_blocks // sp.splits >= ts.MIN_KEY_BLOCKS
    seen = np.zeros((units, key_blocks), np.int64)
    blocks = 0
    for unit, kb0, kb1 in ts.block_work(sp, key_blocks):
        assert 0 <= kb0 < kb1 <= key_blocks                     # never an empty piece
        seen[unit, kb0:kb1] += 1
        blocks += 1
    assert blocks == sp.blocks
    assert (seen == 1).all()
    if sp.splits > 1 and forced is None:      # the choice never lengthens the launch
        assert ts.block_times(sp, slots, key_blocks) <= ts.block_times(
            ts.plan(units, key_blocks, slots, splits=1), slots, key_blocks)


@pytest.mark.parametrize("causal", [False, True])
def test_units_cover_every_query_block_of_every_head_once(causal):
    nqb, bh = 7, 5
    seen = [ts.unit(u, nqb, bh, causal) for u in range(nqb * bh)]
    assert sorted(seen) == [(h, qb) for h in range(bh) for qb in range(nqb)]
    if causal:                                  # longest (last query block) first
        assert [qb for _, qb in seen] == sorted((qb for _, qb in seen), reverse=True)
        old = [ts.unit(u, nqb, bh, causal, "head-major") for u in range(nqb * bh)]
        assert old[:nqb] == [(0, qb) for qb in reversed(range(nqb))]


def test_longest_first_over_all_heads_beats_head_after_head_on_causal_launches():
    # d = 128 (Br 192, Bc 64), N = 4096, B x H = 32, 132 SMs: query block qb sees
    # 3 (qb + 1) key blocks; head-major leaves SMs idle while the last heads' long
    # blocks finish
    nqb, bh = 22, 32
    cost = lambda qb: 3 * (qb + 1)              # noqa: E731
    head = ts.causal_block_times(nqb, bh, cost, 132, "head-major")
    lpt = ts.causal_block_times(nqb, bh, cost, 132, "lpt")
    bound = bh * sum(cost(qb) for qb in range(nqb)) / 132
    assert bound <= lpt < head
    assert lpt / bound < 1.03 and head / bound > 1.15
    with pytest.raises(ValueError, match="order must be one of"):
        ts.causal_block_times(nqb, bh, cost, 132, "random")


@pytest.mark.parametrize("kw, match", [
    ({"units": 0, "key_blocks": 4, "slots": 132}, "units must be a positive integer"),
    ({"units": 4, "key_blocks": 4.0, "slots": 132}, "key_blocks must be a positive integer"),
    ({"units": 4, "key_blocks": 4, "slots": True}, "slots must be a positive integer"),
    ({"units": 4, "key_blocks": 4, "slots": 132, "splits": 0}, "splits must be a positive"),
    ({"units": 4, "key_blocks": 40, "slots": 132, "splits": 17}, "splits must be at most"),
])
def test_bad_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        ts.plan(**kw)


def _pieces(q, k, v, causal, sp, br, bc, tq, tk, splits, nqb, d_pad, order):
    """What the kernel's pieces write: o normalised by the piece's own l, float32, and its
    lse, for the tail units (float64 reference attention on each key range)."""
    nkb = -(-tk // bc)
    part_o = np.full((sp.pieces(), br, d_pad), np.nan, np.float32)
    part_lse = np.full((sp.pieces(), br), np.nan, np.float32)
    for p in range(sp.pieces()):
        h, qb = ts.unit(sp.main + p // splits, nqb, q.shape[0], causal, order)
        kb0, kb1 = ts.key_range(p, splits, nkb)
        r0, r1 = qb * br, min(qb * br + br, tq)
        k0, k1 = kb0 * bc, min(kb1 * bc, tk)
        # keys k0..k1 of a Tk-long row: the causal mask of the full problem, cut
        rows = np.arange(r0, r1)[:, None]
        cols = np.arange(k0, k1)[None, :]
        s = q[h, r0:r1] @ k[h, k0:k1].T / np.sqrt(q.shape[-1])
        if causal:
            s = np.where(cols <= rows + tk - tq, s, -np.inf)
        mx = s.max(axis=1, keepdims=True)
        mu = np.where(np.isfinite(mx), mx, 0)
        e = np.exp(s - mu)
        ll = e.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            o = np.where(ll > 0, (e @ v[h, k0:k1]) / ll, 0)
            lse = np.where(ll[:, 0] > 0, mu[:, 0] + np.log(ll[:, 0]), -np.inf)
        part_o[p, :r1 - r0, :q.shape[-1]] = o
        part_o[p, :r1 - r0, q.shape[-1]:] = 0
        part_lse[p, :r1 - r0] = lse
    return part_o, part_lse


@pytest.mark.parametrize("precision, order", [("fp16", "lpt"), ("bf16", "lpt"),
                                              ("fp16", "head-major")])
@pytest.mark.parametrize("bh, tq, tk, d, causal, splits", [
    (3, 150, 700, 40, False, 3),      # a partial last query block; d padded to 48
    (2, 130, 300, 64, True, 4),       # causal: pieces that some rows see nothing of
    (1, 150, 120, 16, True, 2),       # Tq > Tk: rows 0-29 see no key at all
])
def test_the_combine_kernel_merges_pieces_into_the_full_attention(precision, order, bh, tq, tk,
                                                                  d, causal, splits):
    from numba import cuda
    br, bc = 64, 64
    d_pad = -(-d // 16) * 16
    nqb = -(-tq // br)
    rng = np.random.default_rng(7)
    rnd = round_fp16 if precision == "fp16" else round_bf16
    q, k, v = (rnd(rng.standard_normal((bh, n, d)).astype(np.float32)).astype(np.float64)
               for n in (tq, tk, tk))
    units = nqb * bh
    sp = ts.plan(units, -(-tk // bc), slots=max(1, units - 2),
                 causal=causal, splits=splits)
    assert sp.tail >= 1
    part_o, part_lse = _pieces(q, k, v, causal, sp, br, bc, tq, tk, splits, nqb, d_pad, order)
    o = cuda.to_device(np.zeros((bh, tq, d_pad // 2), np.uint32))
    lse = cuda.to_device(np.full((bh, tq), 7.0, np.float32))
    kern = ts.make_combine_kernel(precision, d_pad, br)
    kern[sp.tail * br, ts.combine_threads(d_pad)](
        cuda.to_device(part_o.reshape(-1)), cuda.to_device(part_lse.reshape(-1)), o, lse,
        np.int32(tq), np.int32(nqb), np.int32(bh), np.int32(order == "lpt"), np.int32(sp.main),
        np.int32(splits),
        np.int32(1 if causal else 0))
    words = o.copy_to_host()
    halves = words.view(np.uint16).reshape(bh, tq, d_pad)
    got = (halves.view(np.float16).astype(np.float64) if precision == "fp16" else
           (halves.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    o64, lse64 = reference.attention(q, k, v, causal=causal)
    lse_got = lse.copy_to_host()
    tol = 2e-3 if precision == "fp16" else 1e-2
    for u in range(sp.main, units):          # the tail units: combined; the rest untouched
        h, qb = ts.unit(u, nqb, bh, causal, order)
        r0, r1 = qb * br, min(qb * br + br, tq)
        np.testing.assert_allclose(got[h, r0:r1, :d], o64[h, r0:r1], atol=tol, rtol=tol)
        assert (got[h, r0:r1, d:] == 0).all()
        fin = np.isfinite(lse64[h, r0:r1])
        np.testing.assert_allclose(lse_got[h, r0:r1][fin], lse64[h, r0:r1][fin], rtol=1e-5,
                                   atol=1e-5)
        assert np.isneginf(lse_got[h, r0:r1][~fin]).all()
        assert (got[h, r0:r1][~fin] == 0).all()
    touched = np.zeros((bh, tq), bool)
    for u in range(sp.main, units):
        h, qb = ts.unit(u, nqb, bh, causal, order)
        touched[h, qb * br:min(qb * br + br, tq)] = True
    assert (lse_got[~touched] == 7.0).all()    # rows of whole units: not the combine's
