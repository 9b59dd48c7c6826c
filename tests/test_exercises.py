"""The notebooks' predict-then-check exercises: right predictions pass, typical wrong ones get
their own feedback, unanswered parts do not fail the notebook, and no answer is in a notebook."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from flashcourse import exercises as E

ROOT = Path(__file__).resolve().parents[1]


def test_second_tile_right_and_wrong():
    s1, s2 = np.array(E.TILE_1), np.array(E.TILE_2)
    m = max(s1.max(), s2.max())
    alpha = math.exp(s1.max() - m)
    l = alpha * np.exp(s1 - s1.max()).sum() + np.exp(s2 - m).sum()
    ok, lines = E.grade("03-second-tile", m=m, l=round(l, 3), alpha=round(alpha, 3))
    assert ok, lines
    ok, lines = E.grade("03-second-tile", m=m, l=np.exp(s1 - s1.max()).sum()
                        + np.exp(s2 - m).sum(), alpha=1 / alpha)
    assert not ok
    assert "without rescaling" in lines[1] and "wrong way" in lines[2]


def test_causal_skips_right_and_wrong():
    ok, _ = E.grade("03-causal-skips", skipped=[(0, 3), (0, 4), (1, 4)])
    assert ok
    ok, lines = E.grade("03-causal-skips", skipped=[(0, 2), (0, 3), (0, 4), (1, 3), (1, 4),
                                                   (2, 4)])
    assert not ok and "partly visible" in lines[0]
    top_left = [(i, j) for i in range(3) for j in range(5) if 2 * j > 2 * i + 1]
    ok, lines = E.grade("03-causal-skips", skipped=top_left)
    assert not ok and "top-left" in lines[0]
    ok, lines = E.grade("03-causal-skips", skipped="0, 4")
    assert not ok and "list of" in lines[0]


def test_causal_tiles_06():
    full = (8192 // 128) * (8192 // 64)
    causal = sum(min(128, 2 * i + 2) for i in range(64))
    assert E.grade("06-causal-tiles", tiles_full=full, tiles_causal=causal)[0]
    ok, lines = E.grade("06-causal-tiles", tiles_full=full, tiles_causal=full // 2)
    assert not ok and "diagonal" in lines[1]


def test_saved_bytes_09():
    p = 4 * 16 * 8192 ** 2 * 2
    l = 4 * 16 * 8192 * 4
    assert E.grade("09-saved-bytes", p_bytes=p, l_bytes=l, flops_factor=1.25)[0]
    ok, lines = E.grade("09-saved-bytes", p_bytes=p // 64, l_bytes=l // 2, flops_factor=2.5)
    assert not ok
    assert "B x H" in lines[0] and "fp32" in lines[1] and "FORWARD" in lines[2]


def test_unanswered_parts_are_reported_not_raised(capsys):
    assert E.check("03-second-tile", m=None, l=None, alpha=None) is False
    assert capsys.readouterr().out.count("not answered yet") == 3


def test_bad_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown exercise"):
        E.grade("99-nothing")
    with pytest.raises(ValueError, match="has the parts"):
        E.grade("03-second-tile", mm=1)


def test_nonmatmul_flops_03():
    br, bc, d = E.NONMATMUL_TILE
    fa1 = 4 * br * bc + br + 5 * br + br + 4 * br * d          # counted by hand, line by line
    fa2 = 4 * br * bc + br + 3 * br + br * d
    assert E.grade("03-nonmatmul-flops", fa1_flops=fa1, fa2_flops=fa2)[0]
    ok, lines = E.grade("03-nonmatmul-flops", fa1_flops=fa1 - 4 * br * bc,
                        fa2_flops=fa2 + br * d + br)
    assert not ok and "share" in lines[0] and "once per query block" in lines[1]
    ok, lines = E.grade("03-nonmatmul-flops", fa1_flops=fa1 - 2 * br * d, fa2_flops=fa1)
    assert not ok and "more than once" in lines[0] and "FA1's count" in lines[1]


@pytest.mark.parametrize("nb,names", [("03_tiled_forward", ["03-second-tile", "03-causal-skips",
                                                            "03-nonmatmul-flops"]),
                                      ("06_numba_cuda_kernel", ["06-causal-tiles"]),
                                      ("09_backward_recompute", ["09-saved-bytes"])])
def test_notebooks_ask_for_predictions_without_printing_answers(nb, names):
    cells = json.loads((ROOT / "notebooks" / f"{nb}.ipynb").read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    for name in names:
        cell = [c for c in code if f'exercises.check("{name}"' in c]
        assert len(cell) == 1, name
        assert "= None" in cell[0] and "reveal(" not in cell[0]
    if nb.startswith("03"):
        md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
        heads = [i for i, s in enumerate(md) if s.startswith("## ")]
        names_ = [md[i].split("\n")[0] for i in heads]
        assert "## Exercises" in names_
        assert names_.index("## Exercises") == len(names_) - 3   # before summary, reading
