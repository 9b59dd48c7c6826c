"""The widgets' pure readout functions (exact numbers), and the widgets in Python.

The readouts are checked against numbers derived by hand from the formulas in
flashcourse.memory / flashcourse.traffic (exact integers: no tolerance), and the
tile-schedule replay against an independent count of tiles and the IO model.
The widgets are built and driven by setting `.value` on their controls (no browser;
tests/test_browser.py drives them in JupyterLab).
"""

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from flashcourse import widgets as W
from flashcourse.geometry import tile_visibility
from flashcourse.gpus import GPUS
from flashcourse.memory import BYTES_PER_SCORE
from flashcourse.traffic import paper_block_sizes, tiled_traffic

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------
# Score memory
# ---------------------------------------------------------------------------

def test_lesson_example_32_mib():
    r = W.score_memory_readout(4096, 4096, "fp16")
    assert r.per_head_bytes == 33_554_432
    assert r.headline == "M_score per head: 33,554,432 B = 32 MiB"
    assert r.total_bytes == 33_554_432


def test_batch_heads_causal_and_gpu_verdicts():
    r = W.score_memory_readout(4096, 4096, "fp16", 2, 8, True, "H100 SXM")
    assert r.total_bytes == 16 * 33_554_432 == 536_870_912
    assert "536,870,912 B = 512 MiB" in r.lines[1]
    # causal square: 4096 * 4097 / 2 visible pairs, 2 bytes each
    assert r.causal_bytes == 4096 * 4097 // 2 * 2 == 16_781_312
    assert "8,390,656 of the 16,777,216 pairs" in r.lines[2]
    # H100: 228 KiB per SM (too small), 50 MiB L2 (fits), 80 GiB device (fits)
    assert (r.fits_on_chip, r.fits_l2, r.fits_device) == (False, True, True)
    assert "233,472 B = 228 KiB" in r.lines[3] and "does NOT fit (144x too large)" in r.lines[3]
    assert r.lines[4].endswith("one head's matrix fits")
    assert "the batch's matrices fit (0.62% of it)" in r.lines[5]


def test_million_token_fp32_overflows_device_memory():
    r = W.score_memory_readout(2**20, 2**20, "fp32", gpu="H200")
    assert r.per_head_bytes == 2**40 * 4
    assert r.headline == "M_score per head: 4,398,046,511,104 B = 4 TiB"
    assert not r.fits_device
    assert "do NOT fit (29x too large)" in r.lines[-1]        # 4 TiB / 141 GiB = 29.05


@pytest.mark.parametrize("dtype", list(BYTES_PER_SCORE))
def test_every_dtype(dtype):
    r = W.score_memory_readout(1000, 3, dtype)
    assert r.per_head_bytes == 3000 * BYTES_PER_SCORE[dtype]


@pytest.mark.parametrize("kwargs,word", [
    (dict(t_query=0, t_key=4), "Tq"),
    (dict(t_query=4, t_key=-3), "Tk"),
    (dict(t_query=4.5, t_key=4), "Tq"),
    (dict(t_query=4, t_key=4, dtype="int8"), "dtype"),
    (dict(t_query=4, t_key=4, batch=0), "batch"),
    (dict(t_query=4, t_key=4, heads=0), "heads"),
    (dict(t_query=4, t_key=4, causal="yes"), "causal"),
    (dict(t_query=4, t_key=4, gpu="V100"), "gpu"),
])
def test_score_readout_rejects_bad_settings(kwargs, word):
    with pytest.raises(ValueError, match=word):
        W.score_memory_readout(**kwargs)


@given(st.sampled_from(list(GPUS)), st.sampled_from(list(BYTES_PER_SCORE)),
       st.integers(1, 64), st.booleans(), st.integers(1, 5000))
def test_curve_limits_are_the_largest_fitting_lengths(gpu, dtype, bh, tied, tq):
    c = W.score_memory_curve(tq, 4096, dtype, bh, 1, tied, gpu)
    s = BYTES_PER_SCORE[dtype]
    for _label, cap, n, which in c.limits:
        per_unit = s * (bh if which == "batch" else 1) * (1 if tied else tq)
        power = 2 if tied else 1
        if n is None:
            assert per_unit > cap
        else:
            assert per_unit * n ** power <= cap < per_unit * (n + 1) ** power


def test_curve_passes_through_the_current_point():
    c = W.score_memory_curve(3000, 3000, "bf16", 4, 2, True, "T4")
    assert c.current_x == 3000 and c.current_per_head == 3000 * 3000 * 2
    assert c.current_batch == 8 * c.current_per_head
    assert c.x[-1] >= 2**20 and (c.per_head == c.x * c.x * 2).all()
    u = W.score_memory_curve(3000, 5000, "fp32", 1, 1, False, "T4")
    assert u.current_x == 5000 and (u.per_head == 3000 * u.x * 4).all()


# ---------------------------------------------------------------------------
# Traffic
# ---------------------------------------------------------------------------

def test_traffic_worked_example_by_hand():
    # N = 4096, d = 64, fp16 (e = s = 2), Br = Bc = 64, fa2, non-causal.
    n, d, e = 4096, 64, 2
    r = W.traffic_readout(n, d, 64, 64, 100 * 1024, "fp16", "fa2", False, "A100 80GB")
    dense_reads = 3 * n * d * e + 2 * n * n * e                 # Q, K, V; S, P
    dense_writes = 2 * n * n * e + n * d * e                    # S, P; O
    assert (r.dense.read_bytes, r.dense.write_bytes) == (dense_reads, dense_writes)
    assert r.dense.total_bytes == 136_314_880
    tr = n // 64
    assert r.tiled.read_bytes == n * d * e + 2 * tr * n * d * e == 67_633_152
    assert r.tiled.write_bytes == n * d * e + 4 * n == 540_672
    assert r.ratio == pytest.approx(136_314_880 / 68_173_824, rel=1e-15)
    assert r.flops == 4 * n * n * d                             # identical for both
    assert r.intensity_dense == pytest.approx(r.flops / 136_314_880, rel=1e-15)
    # A100 80GB: 2,039 GB/s and 312 TFLOP/s fp16: memory-bound, bytes / bandwidth
    assert r.time_dense_s == pytest.approx(136_314_880 / 2039e9, rel=1e-12)
    assert r.time_tiled_s == pytest.approx(68_173_824 / 2039e9, rel=1e-12)
    # footprint 64*64*2 + 2*64*64*2 + 64*64*4 + 64*64*4 + 2*64*4 = 57,856 B; 164 KiB / it = 2
    assert r.footprint_bytes == 57_856 and r.fits_budget and r.blocks_per_sm == 2
    assert r.warnings == ()
    assert r.lines[2] == "Dense / tiled traffic: 2.00x"
    assert r.lines[3] == "FLOPs (the same for dense and tiled): 4,294,967,296 FLOP (4.29 GFLOP)"


def test_fp32_uses_the_fp32_peak():
    r = W.traffic_readout(64, 64, 64, 64, 200 * 1024, "fp32", gpu="H100 SXM")
    assert r.peak_flops_per_s == GPUS["H100 SXM"].fp32_flops_per_s
    assert W.traffic_readout(64, 64, 64, 64, 200 * 1024, "bf16",
                             gpu="H100 SXM").peak_flops_per_s == 989e12


def test_oversized_tile_warns_and_cuts_residency():
    r = W.traffic_readout(4096, 128, 128, 256, 100 * 1024, "fp16", "fa2", False, "A100 80GB")
    foot = 128 * 128 * 2 + 2 * 256 * 128 * 2 + 128 * 256 * 4 + 128 * 128 * 4 + 2 * 128 * 4
    assert r.footprint_bytes == foot == 361_472
    assert not r.fits_budget and r.blocks_per_sm == 0
    assert any("no longer fits the scratchpad" in x for x in r.warnings)
    assert any("cut residency" in x for x in r.warnings)
    # fits the budget but only one block per SM: still warned about residency
    r = W.traffic_readout(4096, 64, 128, 128, 160 * 1024, gpu="A100 80GB")
    assert r.fits_budget and r.blocks_per_sm == 1
    assert [("cut residency" in x) for x in r.warnings] == [True]


def test_budget_above_the_per_block_limit_warns():
    r = W.traffic_readout(1024, 64, 16, 16, 100 * 1024, gpu="T4")
    assert any("more than one thread block may use on T4" in x for x in r.warnings)


def test_causal_fa1_matches_the_model():
    r = W.traffic_readout(1000, 24, 48, 80, 64 * 1024, "fp32", "fa1", True, "H200")
    assert r.tiled == tiled_traffic(1000, 1000, 24, 48, 80, causal=True, loop_order="fa1",
                                    bytes_per_element=4)
    assert r.flops == 4 * 24 * (1000 * 1001 // 2)
    assert r.lines[3].startswith("FLOPs of the visible pairs")


@pytest.mark.parametrize("args,word", [
    ((0, 64, 64, 64, 1024), "T"),
    ((128, 0, 64, 64, 1024), "d"),
    ((128, 64, 256, 64, 1024), "block_q"),
    ((128, 64, 64, 129, 1024), "block_k"),
    ((128, 64, 64, 64, 0), "budget"),
    ((128, 64, 64, 64, 1024, "fp4"), "dtype"),
    ((128, 64, 64, 64, 1024, "fp16", "fa3"), "loop order"),
    ((128, 64, 64, 64, 1024, "fp16", "fa2", False, "B200"), "gpu"),
])
def test_traffic_readout_rejects_bad_settings(args, word):
    with pytest.raises(ValueError, match=word):
        W.traffic_readout(*args)


# ---------------------------------------------------------------------------
# Tile schedule
# ---------------------------------------------------------------------------

@given(st.integers(1, 90), st.integers(1, 90), st.integers(1, 9), st.integers(1, 40),
       st.integers(1, 40), st.booleans(), st.sampled_from(["fa1", "fa2"]))
def test_schedule_replays_every_tile_and_matches_the_model(tq, tk, d, br, bc, causal, order):
    br, bc = min(br, tq), min(bc, tk)
    tr, tc = math.ceil(tq / br), math.ceil(tk / bc)
    assume(tr * tc <= W.MAX_SCHEDULE_TILES)
    steps = W.schedule_steps(tq, tk, d, br, bc, causal, order)
    tiles = [s for s in steps if s.kind in ("tile", "skip")]
    # every tile exactly once, in the loop order
    expected = ([(i, j) for i in range(tr) for j in range(tc)] if order == "fa2"
                else [(i, j) for j in range(tc) for i in range(tr)])
    assert [s.tile for s in tiles] == expected
    for s in tiles:
        i, j = s.tile
        hidden = tile_visibility(i * br, min((i + 1) * br, tq), j * bc,
                                 min((j + 1) * bc, tk), tq, tk, causal) == "hidden"
        assert (s.kind == "skip") == hidden
        if s.kind == "skip":  # nothing stored; only the loop's own block loads issued
            allowed = ("Q",) if order == "fa2" else ("K", "V")
            assert all(t in allowed for t, *_ in s.reads) and not s.writes
    stores = [s for s in steps if s.kind == "store"]
    assert len(stores) == (tr if order == "fa2" else 0)
    assert [s.kind for s in steps].count("init") == (1 if order == "fa1" else 0)
    # cumulative bytes: monotone, and the last step equals the IO model to the byte
    totals = [s.total_bytes for s in steps]
    assert totals == sorted(totals) and [s.index for s in steps] == list(range(len(steps)))
    model = tiled_traffic(tq, tk, d, br, bc, causal=causal, loop_order=order)
    assert (steps[-1].read_bytes, steps[-1].write_bytes) == (model.read_bytes,
                                                             model.write_bytes)


def test_schedule_fa2_first_steps_by_hand():
    # Tq = 96, Tk = 80, d = 16, Br = Bc = 32, causal: Q_0 sees only K_0.
    steps = W.schedule_steps(96, 80, 16, 32, 32, True, "fa2")
    e = 2
    assert steps[0].kind == "tile" and steps[0].tile == (0, 0)
    assert steps[0].reads == (("Q", 0, 32, 32 * 16 * e), ("K", 0, 32, 32 * 16 * e),
                              ("V", 0, 32, 32 * 16 * e))
    assert [s.kind for s in steps[1:4]] == ["skip", "skip", "store"]
    assert steps[3].writes == (("O", 0, 32, 32 * 16 * e), ("lse", 0, 32, 32 * 4))
    assert steps[3].total_bytes == 3 * 1024 + 1024 + 128
    assert W.describe_step(steps[1], len(steps)) == (
        "Step 2 of 12: tile (0,1) skipped: the causal mask hides all of it.")


@pytest.mark.parametrize("args,word", [
    ((257, 16, 8, 8, 8), "Tq"),
    ((16, 0, 8, 8, 8), "Tk"),
    ((16, 16, 8, 17, 8), "block_q"),
    ((256, 256, 8, 4, 4), "too many"),
    ((16, 16, 8, 8, 8, False, "fa3"), "loop order"),
])
def test_schedule_rejects_bad_settings(args, word):
    with pytest.raises(ValueError, match=word):
        W.schedule_steps(*args)


def test_format_helpers():
    assert W.format_seconds(1.5e-5) == "15 us"
    assert W.format_seconds(2.0) == "2 s"
    assert W.format_flops(4_294_967_296) == "4,294,967,296 FLOP (4.29 GFLOP)"
    assert W.format_flops(12) == "12 FLOP"


# ---------------------------------------------------------------------------
# The widgets, driven from Python
# ---------------------------------------------------------------------------

def test_score_explorer_reacts_and_shows_messages():
    ex = W.score_memory_explorer()
    assert "fc-score-memory" in ex._dom_classes
    assert ex.headline.value == "M_score per head: 33,554,432 B = 32 MiB"
    assert bytes(ex.image.value).startswith(PNG_MAGIC)
    first_png = ex.image.value
    ex.controls["t_query_slider"].value = 8192                  # one step right
    assert ex.controls["t_query"].value == 8192 and ex.controls["t_key"].value == 8192
    assert ex.headline.value == "M_score per head: 134,217,728 B = 128 MiB"
    assert ex.image.value != first_png
    ex.controls["t_query"].value = 3000                         # free entry, not a power of 2
    assert ex.controls["t_query_slider"].value == 2048
    assert ex.headline.value == f"M_score per head: {3000 * 3000 * 2:,} B = 17.17 MiB"
    ex.controls["tied"].value = False
    ex.controls["t_key"].value = 1000
    assert ex.readout.per_head_bytes == 3000 * 1000 * 2
    ex.controls["t_query"].value = 0                            # invalid: message, no raise
    assert "Tq (query positions) must be at least 1" in ex.message.value
    assert ex.headline.value == "M_score per head: (invalid setting)"
    assert ex.image.layout.display == "none"                    # no stale plot
    ex.controls["t_query"].value = 4096
    assert ex.message.value == "" and ex.image.layout.display is None
    ex.controls["dtype"].value = "fp8"
    ex.controls["batch"].value = 4
    ex.controls["heads"].value = 32
    assert ex.readout.total_bytes == 4096 * 1000 * 128
    ex.controls["batch"].value = 0
    assert "batch must be at least 1" in ex.message.value
    ex.controls["batch"].value = 1
    ex.controls["causal"].value = True
    assert "Causal" in ex.details.value
    ex.controls["gpu"].value = "T4"
    assert "T4 device memory" in ex.details.value


def test_traffic_explorer_reacts_and_shows_messages():
    ex = W.traffic_explorer()
    assert "fc-traffic" in ex._dom_classes
    assert "Dense / tiled traffic: 2.00x" in ex.details.value and ex.warning.value == ""
    ex.controls["block_q"].value = 5000
    assert "block_q (Br) = 5,000 is larger than the sequence" in ex.message.value
    assert ex.image.layout.display == "none"
    ex.controls["block_q"].value = 256
    ex.controls["block_k"].value = 256
    assert ex.message.value == ""
    assert "no longer fits the scratchpad" in ex.warning.value
    ex.controls["budget_kib"].value = 64
    ex.paper.click()
    br, bc = paper_block_sizes(64 * 1024, 64, 2)
    assert (ex.controls["block_q"].value, ex.controls["block_k"].value) == (br, bc)
    assert ex.readout.tiled == tiled_traffic(4096, 4096, 64, br, bc)
    ex.controls["t"].value = 100                                # paper's Bc = 128 > T
    ex.paper.click()
    assert (ex.controls["block_q"].value, ex.controls["block_k"].value) == (64, 100)
    assert ex.message.value == ""
    ex.controls["t"].value = 4096
    ex.paper.click()
    for name, value in (("loop_order", "fa1"), ("causal", True), ("dtype", "fp32"),
                        ("gpu", "H200"), ("t", 1000), ("head_dim", 80)):
        ex.controls[name].value = value
        assert ex.message.value == "", name
    assert ex.readout.tiled == tiled_traffic(1000, 1000, 80, br, bc, causal=True,
                                             loop_order="fa1", bytes_per_element=4)
    ex.controls["t"].value = 0
    assert "T (sequence length) must be at least 1" in ex.message.value
    ex.controls["t"].value = 4096
    ex.controls["head_dim"].value = -1
    assert "d (head dimension)" in ex.message.value
    ex.controls["head_dim"].value = 64
    assert ex.message.value == "" and bytes(ex.image.value).startswith(PNG_MAGIC)


def test_tile_schedule_steps_and_messages():
    ex = W.tile_schedule()
    assert "fc-schedule" in ex._dom_classes
    n = len(ex.steps)
    assert ex.controls["step"].max == n - 1 == ex.controls["play"].max
    first = ex.image.value
    ex.controls["step"].value = 5
    assert ex.status.value.count("Step 6 of 12") == 1
    assert "total 9,344 B = 9.12 KiB" in ex.status.value
    assert ex.image.value != first
    ex.controls["loop_order"].value = "fa1"
    assert len(ex.steps) == 10 and ex.controls["step"].max == 9
    ex.controls["step"].value = 9
    assert ex.steps[-1].total_bytes == tiled_traffic(96, 80, 16, 32, 32, causal=True,
                                                     loop_order="fa1").total_bytes
    ex.controls["block_q"].value = 1
    ex.controls["block_k"].value = 1                            # 96 x 80 tiles: too many
    assert "too many" in ex.message.value
    assert ex.image.layout.display == "none" and ex.status.value == ""
    ex.controls["step"].value = 3                               # no crash while invalid
    ex.controls["block_q"].value = 200                          # larger than Tq
    assert "larger than Tq" in ex.message.value
    ex.controls["block_q"].value = 16
    ex.controls["block_k"].value = 16
    assert ex.message.value == "" and len(ex.steps) > 10
    assert ex.image.layout.display is None and "Step" in ex.status.value
