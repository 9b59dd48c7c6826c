"""The IO model of flashcourse.traffic: hand-computed values, closed form vs a block loop,
validation, and the lesson's 32 MiB example. Every comparison here is exact (integers)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import geometry
from flashcourse import traffic as tr
from flashcourse.geometry import tile_visibility
from flashcourse.counter import TrafficCounter
from flashcourse.gpus import GPUS, get_gpu
from flashcourse.limits import PRESETS, check_launch
from flashcourse.sweep import cpu_sweep
from flashcourse.memory import format_bytes, score_matrix_bytes


def brute_force(tq, tk, d, br, bc, causal, order, e):
    """The model by walking every block pair with tile_visibility (slow, obviously right)."""
    reads = writes = 0
    if order == "fa1":
        writes += tq * d * e + 8 * tq
        reads += 2 * tk * d * e
    for q0 in range(0, tq, br):
        q1 = min(q0 + br, tq)
        if order == "fa2":
            reads += (q1 - q0) * d * e
            writes += (q1 - q0) * d * e + 4 * (q1 - q0)
        for k0 in range(0, tk, bc):
            k1 = min(k0 + bc, tk)
            if tile_visibility(q0, q1, k0, k1, tq, tk, causal) == "hidden":
                continue
            if order == "fa2":
                reads += 2 * (k1 - k0) * d * e
            else:
                reads += (q1 - q0) * (2 * d * e + 8)
                writes += (q1 - q0) * (d * e + 8)
    return reads, writes


def test_dense_by_hand():
    # Tq=3, Tk=5, d=2, e=2, s=4: reads (3+10)*2*2 + 2*15*4 = 52 + 120; writes 120 + 12
    t = tr.dense_traffic(3, 5, 2, bytes_per_element=2, bytes_per_score=4)
    assert (t.read_bytes, t.write_bytes, t.total_bytes) == (172, 132, 304)


def test_fa2_by_hand_ragged():
    # Tq=5, Tk=7, d=3, Br=2, Bc=4, e=2: Tr=3 query blocks, each reads all 7 K and V rows
    # reads = 5*3*2 + 3 * 2*7*3*2 = 30 + 252; writes = 5*3*2 + 4*5 = 50
    t = tr.tiled_traffic(5, 7, 3, 2, 4)
    assert (t.read_bytes, t.write_bytes) == (282, 50)


def test_fa1_by_hand_ragged():
    # Tq=5, Tk=7, d=3, Br=2, Bc=4, e=2: Tc=2 key blocks, each pairs with all 5 query rows
    # reads = 2*7*3*2 + 2 * 5*(2*3*2 + 8) = 84 + 200
    # writes = 5*3*2 + 8*5 + 2 * 5*(3*2 + 8) = 30 + 40 + 140
    t = tr.tiled_traffic(5, 7, 3, 2, 4, loop_order="fa1")
    assert (t.read_bytes, t.write_bytes) == (284, 210)


def test_causal_by_hand():
    # Tq=Tk=4, Br=Bc=2, d=1, e=1: tile (0, 1) is hidden, 3 of 4 tiles visible.
    # fa2 reads = 4 + 2*(2 + 2 + 2) = 16; writes = 4 + 16 = 20
    t = tr.tiled_traffic(4, 4, 1, 2, 2, causal=True, bytes_per_element=1)
    assert (t.read_bytes, t.write_bytes) == (16, 20)
    assert geometry.visible_tile_count(4, 4, 2, 2, causal=True) == 3
    # bottom-right alignment, Tq=2 < Tk=4: both rows see keys 0..2 or 0..3, nothing hidden
    assert geometry.visible_tile_count(2, 4, 1, 1, causal=True) == 7
    assert geometry.visible_tile_count(2, 4, 2, 2, causal=True) == 2


def test_causal_more_queries_than_keys_skips_empty_rows():
    # Tq=10, Tk=3: rows 0..6 see no key; query blocks of 4: blocks 0 ([0,4)) sees nothing
    t = tr.tiled_traffic(10, 3, 2, 4, 1, causal=True, bytes_per_element=1)
    assert (t.read_bytes, t.write_bytes) == brute_force(10, 3, 2, 4, 1, True, "fa2", 1)
    assert geometry.visible_tile_count(10, 3, 4, 1, causal=True) == 1 + 3


@given(tq=st.integers(1, 70), tk=st.integers(1, 70), d=st.integers(1, 9),
       br=st.integers(1, 20), bc=st.integers(1, 20), causal=st.booleans(),
       order=st.sampled_from(["fa1", "fa2"]), e=st.sampled_from([1, 2, 4, 8]))
def test_closed_form_equals_block_loop(tq, tk, d, br, bc, causal, order, e):
    t = tr.tiled_traffic(tq, tk, d, br, bc, causal=causal, loop_order=order,
                         bytes_per_element=e)
    assert (t.read_bytes, t.write_bytes) == brute_force(tq, tk, d, br, bc, causal, order, e)
    tiles = sum(tile_visibility(q0, min(q0 + br, tq), k0, min(k0 + bc, tk), tq, tk, causal)
                != "hidden" for q0 in range(0, tq, br) for k0 in range(0, tk, bc))
    assert geometry.visible_tile_count(tq, tk, br, bc, causal=causal) == tiles


def test_non_causal_closed_form():
    tq, tk, d, br, bc, e = 1000, 777, 64, 64, 48, 2
    tr_blocks, tc_blocks = math.ceil(tq / br), math.ceil(tk / bc)
    fa2 = tr.tiled_traffic(tq, tk, d, br, bc, bytes_per_element=e)
    assert fa2.read_bytes == tq * d * e + 2 * tr_blocks * tk * d * e
    fa1 = tr.tiled_traffic(tq, tk, d, br, bc, loop_order="fa1", bytes_per_element=e)
    assert fa1.read_bytes == 2 * tk * d * e + tc_blocks * tq * (2 * d * e + 8)


def test_one_million_positions_is_fast_and_causal_halves_kv_reads():
    import time
    n = 2 ** 20
    t0 = time.perf_counter()
    full = tr.tiled_traffic(n, n, 64, 1, 1)
    causal = tr.tiled_traffic(n, n, 64, 1, 1, causal=True)
    assert time.perf_counter() - t0 < 2.0
    # Br=Bc=1: every visible pair reads one K and one V row: N(N+1)/2 pairs when causal
    assert causal.read_bytes == n * 64 * 2 + 2 * (n * (n + 1) // 2) * 64 * 2
    assert full.read_bytes == n * 64 * 2 + 2 * n * n * 64 * 2


def test_the_32_mib_example():
    assert score_matrix_bytes(4096, 4096, 2) == 33_554_432
    assert format_bytes(score_matrix_bytes(4096, 4096, 2)) == "33,554,432 B = 32 MiB"
    t = tr.dense_traffic(4096, 4096, 64)
    # S written and read, P written and read: 4 x 32 MiB of the 130 MiB dense total
    assert 4 * 33_554_432 == t.total_bytes - 4 * 4096 * 64 * 2
    tiled = tr.tiled_traffic(4096, 4096, 64, 128, 64)
    assert tiled.total_bytes < t.total_bytes / 3


def test_tiled_fa2_beats_dense_once_blocks_are_large():
    # K/V re-read Tq/Br times costs 4 Tq Tk d e / Br bytes; dense pays 4 Tq Tk s
    dense = tr.dense_traffic(8192, 8192, 64)
    assert tr.tiled_traffic(8192, 8192, 64, 16, 64).total_bytes > dense.total_bytes
    assert tr.tiled_traffic(8192, 8192, 64, 128, 64).total_bytes < dense.total_bytes / 2


def test_theorem_2_scaling():
    # with the paper's block sizes, tiled traffic ~ N^2 d^2 / M: doubling M halves it
    n, d, e = 16384, 64, 2
    t = [tr.tiled_traffic(n, n, d, *tr.paper_block_sizes(m_bytes, d, e)).total_bytes
         for m_bytes in (16 * 1024, 32 * 1024)]
    assert 1.8 < t[0] / t[1] < 2.05
    # dense grows 4x when N doubles; so does tiled at fixed tile sizes
    assert tr.dense_traffic(2 * n, 2 * n, d).total_bytes / tr.dense_traffic(n, n, d).total_bytes \
        == pytest.approx(4, rel=1e-2)   # the linear N d term


def test_footprint_by_hand():
    # Q 64*64*2 + K,V 2*32*64*2 + S 64*32*4 + acc 64*64*4 + m,l 2*64*4
    assert tr.tile_footprint_bytes(64, 32, 64) == 8192 + 8192 + 8192 + 16384 + 512
    assert tr.tile_footprint_bytes(1, 1, 1, bytes_per_element=1, bytes_per_score=1) \
        == 1 + 2 + 1 + 4 + 8


def test_paper_block_sizes():
    # H200: 227 KiB per block, d=64, fp16: M = 116,224 elements, M/4d = 454
    assert tr.paper_block_sizes(227 * 1024, 64, 2) == (64, 454)
    assert tr.paper_block_sizes(1000, 128, 4) == (1, 1)     # M=250 < 4d: Bc = 1
    assert tr.paper_block_sizes(4 * 4 * 10 * 2 + 1, 10, 2) == (4, 4)   # ceil: M=160 -> 4


def test_flops():
    assert tr.attention_flops(3, 5, 7) == 4 * 3 * 5 * 7
    assert tr.attention_flops(4, 4, 2, causal=True) == 4 * 10 * 2
    assert tr.attention_flops(2, 4, 1, causal=True) == 4 * 7


def test_intensity_and_roofline():
    t = tr.Traffic(600, 400)
    assert tr.arithmetic_intensity(5000, t) == 5.0
    assert tr.arithmetic_intensity(5000, 1000) == 5.0
    assert tr.roofline_time_s(1e12, 1e9, 1e12, 1e12) == 1.0       # compute bound
    assert tr.roofline_time_s(1e9, 2e12, 1e12, 1e12) == 2.0       # memory bound
    assert tr.roofline_time_s(0, t, 1.0, 1000.0) == 1.0
    assert (t + t).total_bytes == 2000 and (3 * t).read_bytes == 1800


@pytest.mark.parametrize("call, name", [
    (lambda: tr.dense_traffic(0, 4, 4), "t_query"),
    (lambda: tr.dense_traffic(4, 4.0, 4), "t_key"),
    (lambda: tr.dense_traffic(4, 4, True), "head_dim"),
    (lambda: tr.dense_traffic(4, 4, 4, bytes_per_score=0), "bytes_per_score"),
    (lambda: tr.tiled_traffic(4, 4, 4, 0, 4), "block_q"),
    (lambda: tr.tiled_traffic(4, 4, 4, 4, -1), "block_k"),
    (lambda: tr.tiled_traffic(4, 4, 4, 4, 4, causal=1), "causal"),
    (lambda: tr.tiled_traffic(4, 4, 4, 4, 4, loop_order="fa3"), "loop_order"),
    (lambda: tr.tiled_traffic(4, 4, 4, 4, 4, bytes_per_element=0), "bytes_per_element"),
    (lambda: tr.tile_footprint_bytes(4, 4, 0), "head_dim"),
    (lambda: tr.paper_block_sizes(1, 64, 2), "sram_bytes"),
    (lambda: tr.paper_block_sizes(0, 64, 2), "sram_bytes"),
    (lambda: tr.attention_flops(4, 4, 0), "head_dim"),
    (lambda: tr.arithmetic_intensity(1.0, 0), "traffic"),
    (lambda: tr.arithmetic_intensity("1", 10), "flops"),
    (lambda: tr.roofline_time_s(1, 1, 0, 1), "peak_flops_per_s"),
    (lambda: tr.roofline_time_s(1, 1, 1, float("inf")), "bandwidth_bytes_per_s"),
    (lambda: tr.roofline_time_s(-1, 1, 1, 1), "flops"),
    (lambda: get_gpu("B200"), "gpu"),
    # issue 50: boolean options accept booleans only ("no" was taken as True)
    (lambda: tr.backward_flops(4, 4, 4, recompute="no"), "^recompute must be True or False"),
    (lambda: TrafficCounter(record_events="no"), "^record_events must be True or False"),
    (lambda: check_launch(32, 0, PRESETS["H200"], optin="no"), "^optin must be True or False"),
    (lambda: cpu_sweep((16,), seq_len=8, head_dim=4, progress="no"),
     "^progress must be True or False"),
])
def test_validation_names_the_argument(call, name):
    with pytest.raises((TypeError, ValueError), match=name):
        call()


def test_gpu_presets_are_consistent():
    assert set(GPUS) == {"T4", "A10G", "L4", "RTX 3090", "RTX 4090", "A100 40GB",
                         "A100 80GB", "H100 SXM", "H200"}
    for g in GPUS.values():
        assert g.smem_per_block_optin_bytes <= g.smem_per_sm_bytes < g.l2_bytes < g.memory_bytes
        assert g.fp32_flops_per_s < g.fp16_tensor_flops_per_s
        assert g.source
    h200 = GPUS["H200"]
    assert (h200.sms, h200.smem_per_sm_bytes, h200.smem_per_block_optin_bytes) \
        == (132, 233_472, 232_448)
    assert np.isclose(h200.bandwidth_bytes_per_s, 4.8e12)


def test_tile_footprint_is_the_one_formula():
    """tile_footprint's parts add up; 03's fp32 formula and 04's bytes are special cases."""
    from flashcourse.traffic import tile_footprint, tile_footprint_bytes
    br, bc, d = 16, 24, 13                       # irregular on purpose
    f = tile_footprint(br, bc, d, bytes_per_element=4, bytes_per_score=4)
    assert f.total_bytes == (2 * br * d + 2 * bc * d + br * bc + 2 * br) * 4
    assert sum(f.parts().values()) == f.total_bytes
    assert tile_footprint_bytes(br, bc, d) == tile_footprint(br, bc, d).total_bytes
    assert f.paper_bytes == (2 * br + 2 * bc) * d * 4
    # the paper's rule fills M elements with Q, K, V, O only: the full footprint is larger
    from flashcourse.traffic import paper_block_sizes
    budget = 100 * 1024
    pbr, pbc = paper_block_sizes(budget, 64, 2)
    g = tile_footprint(pbr, pbc, 64)
    assert g.paper_bytes <= budget + 4 * 64 * 2 < g.total_bytes
    with pytest.raises(ValueError, match="bytes_per_accumulator"):
        tile_footprint(8, 8, 8, bytes_per_accumulator=0)
