"""flashcourse.plots.tc_backward: the product table matches the kernel's code, the B loads
follow from the ldmatrix models, the rounding model is the reference when nothing is rounded
and is the fp16 kernel when everything is, and the recorded tables read the results file."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from flashcourse import reference, results
from flashcourse.cuda.ptx import smem_ops
from flashcourse.plots import tc_backward as TB
from flashcourse.timing import rel_err

ROOT = Path(__file__).resolve().parents[1]


def test_pack_rows_puts_two_neighbours_in_a_word_and_pads():
    tile = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.uint16)
    words, stride = TB.pack_rows(tile, pad_words=1)
    assert stride == 3
    assert words.tolist() == [1 | 2 << 16, 3 | 4 << 16, 0, 5 | 6 << 16, 7 | 8 << 16, 0]
    with pytest.raises(ValueError, match="even number of columns"):
        TB.pack_rows(np.zeros((2, 3)))


def test_b_load_follows_the_models():
    """A copy whose rows run over n needs plain ldmatrix, over k the .trans form; the
    other load is right for no lane."""
    assert TB.lanes_matching("ld_b", "n") == TB.lanes_matching("ld_bt", "k") == 32
    assert TB.lanes_matching("ld_b", "k") == TB.lanes_matching("ld_bt", "n") == 0
    assert TB.b_load("n") == "ld_b" and TB.b_load("k") == "ld_bt"
    with pytest.raises(ValueError, match="load must be"):
        TB.lanes_matching("ldsm", "k")
    with pytest.raises(ValueError, match="rows_are"):
        TB.b_tiles(np.zeros((16, 16)), "m")


def test_b_tiles_are_what_the_mma_reads():
    """B[k][n] of each n8 tile: stored[k, n] (rows over k) or stored[n, k] (rows over n)."""
    stored = np.arange(256, dtype=np.uint16).reshape(16, 16)
    t0, t1 = TB.b_tiles(stored, "k")
    assert t0[3, 5] == stored[3, 5] and t1[3, 5] == stored[3, 13]
    t0, t1 = TB.b_tiles(stored, "n")
    assert t0[3, 5] == stored[5, 3] and t1[3, 5] == stored[13, 3]
    # lane 0's first register: k = 0, 1 at n = 0, two neighbours along a stored row
    assert smem_ops.b_fragment_of(t0, 0)[0] == int(stored[0, 0]) | int(stored[0, 1]) << 16


def test_products_match_the_kernel_source():
    """Version 2 of kernel 1 loads each product's B operand as PRODUCTS says: plain
    ldmatrix (LDB) of Q_i, dO_i for S^T, dP^T; .trans (LDBT) of dO_i, Q_i, K_j for dV, dK,
    dQ (read in the order the kernel issues them: the key-major steps and the dQ step it
    shares with the variants backward, in tc_backward_blocks.py)."""
    src = (ROOT / "flashcourse" / "cuda" / "gradients" / "tc_backward_blocks.py").read_text()
    # dV and dK go through one device function, pa_bt(sm, base, ...), whose B loads are .trans
    assert re.search(r"def pa_bt\(.*\n(?:.*\n){0,6}.*\bLDBT\(sm, U\(at", src)
    calls = [(m.group(1) or "LDBT", m.group(2) or m.group(3)) for m in re.finditer(
        r"\b(?:(LDBT?)\(sm, U\((?:bo \+ )?(QN|DON|KNO)|pa_bt\(sm, bo \+ (QN|DON))", src)]
    assert calls == [("LDB", "QN"), ("LDB", "DON"), ("LDBT", "DON"), ("LDBT", "QN"),
                     ("LDBT", "KNO")]
    loads = {"LDB": "ld_b", "LDBT": "ld_bt"}
    assert [TB.b_load(p["b_rows"]) for p in TB.PRODUCTS] == [loads[c] for c, _ in calls]
    assert [p["key"] for p in TB.PRODUCTS] == ["s", "dp", "dv", "dk", "dq"]
    flops = [2 * np.prod([{"Br": 64, "Bc": 128, "d": 96}[x] for x in p["mnk"]])
             for p in TB.PRODUCTS]
    assert len(set(flops)) == 1 and sum(flops) == 10 * 64 * 128 * 96


@pytest.mark.parametrize("tq,tk,causal", [(9, 7, True), (7, 12, True), (10, 10, False)])
def test_rounding_model_without_roundings_is_the_reference(tq, tk, causal):
    """Tq > Tk causal: the first rows see no key and get zero gradients, as in the
    reference (float64, 1e-12)."""
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal((2, n, 5)) for n in (tq, tk, tk, tq))
    got = TB.rounding_model(q, k, v, do, np.zeros((2, tq, 5)), causal=causal, roundings=())
    for g, r in zip(got, reference.attention_backward(q, k, v, do, causal=causal)):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="roundings must be among"):
        TB.rounding_model(q, k, v, do, q, roundings=("P to fp8",))


@pytest.mark.slow
def test_rounding_model_is_the_fp16_kernel():
    """The three roundings reproduce the tensor-core backward's own error (simulator or
    GPU), each gradient's relative error within 5% of the model's: nothing else the kernel
    does (fp32 sums, exp2) is visible at this size."""
    from flashcourse.cuda import backward, forward
    rng = np.random.default_rng(10)
    q, k, v, do = (rng.standard_normal((1, n, 16)).astype(np.float16) for n in (20, 24, 24, 20))
    o, lse = forward(q, k, v, kernel="tensor_core", causal=True)
    ref = reference.attention_backward(q, k, v, do, causal=True)
    got = backward(q, k, v, o, lse, do, kernel="tensor_core", causal=True)
    model = TB.rounding_model(q, k, v, do, o.astype(np.float64), causal=True)
    for g, m, r in zip(got, model, ref):
        assert rel_err(g, r) == pytest.approx(rel_err(m, r), rel=0.05)
    assert "dQ" in TB.error_text(got, ref) and "dV" in TB.error_text(got, ref)


def _doc():
    doc = results.load_tc_backward()
    if doc is None:
        pytest.skip("no recorded tensor-core backward in benchmarks/results/")
    return doc


def test_recorded_tables_read_the_file():
    doc = _doc()
    timed = [r for r in doc["variants"] if "tflops" in r]
    rows = TB.variant_table(doc)
    assert len(rows) == len(timed) and all(len(r) == len(TB.VARIANT_HEADER) for r in rows)
    assert sum(r[-1] == "yes" for r in rows) <= 2                     # one default per d
    for v1, v2 in TB.version_pairs(doc):
        assert v1["tiles"]["pipeline"] == "plain" and v2["tiles"]["pipeline"] == "async"
        assert v1["d"] == v2["d"] and v1["tiles"]["warps"] == v2["tiles"]["warps"]
    bench = TB.bench_table(doc)
    assert len(bench) == len(doc["bench"])
    assert all(len(r) == len(TB.BENCH_HEADER) for r in bench)
    for row, r in zip(bench, sorted(doc["bench"], key=lambda r: (r["d"], r["causal"], r["n"]))):
        assert row[-2] == round(r["tflops"]["ours_fp16_raw"] / r["tflops"]["torch_flash_fp16"], 2)
    lines = TB.check_lines(doc) + TB.gap_lines(doc, exp_per_s=3.9e12)
    assert lines and all(len(line) <= 100 for line in TB.gap_lines(doc, exp_per_s=3.9e12))


def test_tables_survive_missing_contenders():
    """A point where PyTorch did not run shows '-', and no checks gives one line."""
    doc = json.loads(json.dumps(_doc()))
    for r in doc["bench"]:
        r["tflops"].pop("torch_flash_fp16", None)
    doc.pop("checks", None)
    assert all(row[-1] == row[-2] == "-" for row in TB.bench_table(doc))
    assert TB.check_lines(doc) == ["no gradient checks recorded"]
    assert not any("PyTorch flash" in line for line in TB.gap_lines(doc, exp_per_s=3.9e12))


def test_bars_tables_keep_their_columns():
    """The public-call tables of notebooks 10 and 12 (h200_bars.json): each ratio column is
    our TFLOP/s over PyTorch's in its row, and the A/B step's gain is after / before."""
    from flashcourse import results
    from flashcourse.plots import tensor_cores as TP
    bars, ab = results.load_bars(), results.load_tensor_core_ab()
    if bars is None or ab is None:
        pytest.skip("no recorded bars")
    fw, bw = TP.bars_forward_rows(bars), TP.bars_backward_rows(bars)
    assert len(fw) == len(bars["forward"]) and len(bw) == len(bars["backward"])
    for r in fw:
        assert abs(r[5] - r[3] / r[4]) < 0.011 and abs(r[8] - r[6] / r[7]) < 0.011
        assert r[9] == "-" or abs(r[10] - r[9] / r[7]) < 0.011
    for r in bw:
        assert abs(r[5] - r[3] / r[4]) < 0.011
        assert r[6] == "-" or abs(r[8] - r[6] / r[7]) < 0.011
    tf = TP.bars_tf32_rows(bars)
    assert len(tf) == sum(r.get("kind") == "speed" for r in bars.get("tf32", []))
    for r in tf:
        assert abs(r[5] - r[3] / r[4]) < 0.011
    assert all(len(r) == 6 for r in TP.bars_tf32_error_rows(bars))
    for r in TP.ab_step_rows(ab):
        assert abs(float(r[6][:-1]) - r[5] / r[4]) < 0.006
    assert TP.ratio_span([[0.5], [0.9], [0.7]], 0) == "0.50-0.90"
    errs = TP.bars_error_rows(bars)
    assert len(errs) == len(bars["errors"]) and all(len(r) == 6 for r in errs)


def test_bar_lines_count_the_points_below_the_bar():
    """bar_lines: four-decimal spans per d and the points under the bar, unrounded (a
    0.5995 is below 0.6 even where a table shows 0.60)."""
    rows = [{"d": 128, "fp16_ratio": x, "bf16_ratio": y}
            for x, y in ((0.6014, 0.582), (0.5995, 0.61), (0.68, 0.63))]
    rows.append({"d": 64, "fp16_ratio": 0.7, "bf16_ratio": 0.65})
    lines = TB.bar_lines({"backward": rows}, 0.6)
    assert lines[0] == ("d = 64: fp16 0.7000-0.7000x (0 of 1 below 0.6x); "
                        "bf16 0.6500-0.6500x (0 of 1 below 0.6x)")
    assert lines[1] == ("d = 128: fp16 0.5995-0.6800x (1 of 3 below 0.6x); "
                        "bf16 0.5820-0.6300x (1 of 3 below 0.6x)")


def test_profile_metrics_read_the_recorded_profile():
    """profile_metrics: every metric notebook 10 prints is found in the recorded Nsight
    Compute log (and a made-up table row is parsed with and without a unit)."""
    from flashcourse import results
    text = "    Issue Slots Busy               %        20.41\n" \
           "    Registers Per Thread             register/thread             255\n" \
           "    Local Memory Spilling Requests                        7,446,528\n"
    got = TB.profile_metrics(text)
    assert got == {"Issue Slots Busy": 20.41, "Registers Per Thread": 255.0,
                   "Local Memory Spilling Requests": 7446528.0}
    if not results.TC_BACKWARD_NCU_FILE.exists():
        pytest.skip("no recorded profile")
    for f in (results.TC_BACKWARD_NCU_FILE, results.TC_BACKWARD_NCU_AFTER_FILE):
        got = TB.profile_metrics(f.read_text())
        assert set(got) == {name for _, name in TB.PROFILE_METRICS}, f.name
        assert 0 < got["Issue Slots Busy"] <= 100 and got["Registers Per Thread"] <= 255
        assert 0 < got["Duration"] < 10          # ms: the d = 128 kernel at N = 4096


def test_kernel_breakdown_reads_the_ab_log():
    """kernel_breakdown: per variant and precision, the longest kernel and the sum of the
    others, from a made-up block and from the recorded A/B 7 log (where the pair adds made
    the main kernel faster and the passes around it shorter)."""
    from flashcourse import results
    text = ("kernels base fp16 N=4096 d=128 causal off, per call (us):\n"
            "   Array<float, 2, C, mutable, aligned>)    3869.1  x1\n"
            "   Array<half, 1, C, mutable, aligned>, int)      53.0  x1\n"
            "   aligned>, int)     101.2  x1\n"
            "kernels new fp16 N=4096 d=128 causal off, per call (us):\n"
            "   x)    3290.7  x1\n"
            "   y)      64.8  x1\n"
            "  at 131 s\n")
    got = TB.kernel_breakdown(text)
    assert got[("base", "fp16")] == pytest.approx((3869.1, 154.2))
    assert got[("new", "fp16")] == pytest.approx((3290.7, 64.8))
    log = results.RESULTS_DIR / "h200_bwd_ab7_log.txt"
    if not log.exists():
        pytest.skip("no recorded A/B 7 log")
    got = TB.kernel_breakdown(log.read_text())
    assert set(got) == {(v, p) for v in ("base", "new") for p in ("fp16", "bf16")}
    for p in ("fp16", "bf16"):
        assert got[("new", p)][0] < got[("base", p)][0]
        assert got[("new", p)][1] < got[("base", p)][1]
