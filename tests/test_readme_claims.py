"""Claims of README.md and notebook 00 that go stale as the course grows or that quote a
recorded GPU run: the notebook range and the labs named, which notebooks' GPU numbers come
from an H100, and the paged decode's first-run host times and PyTorch ratio, read from
their JSON files."""

import json
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
RESULTS = ROOT / "benchmarks" / "results"


def _markdown(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


START = _markdown(ROOT / "notebooks" / "00_start_here.ipynb")
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]*.ipynb"))
LAST = max(int(name[:2]) for name in NOTEBOOKS)
LABS = sorted(re.match(r"lab(\d+b?)_", p.name).group(1)
              for p in (ROOT / "labs" / "solutions").glob("lab*.ipynb"))


def test_notebook_00_summary_names_every_notebook_and_lab():
    summary = START.split("## Summary", 1)[1].split("##", 1)[0]
    assert f"Notebooks 01–{LAST:02d}" in summary
    listed = re.search(r"Labs ([\d, b]+?) and (\d+b?) practise", " ".join(summary.split()))
    assert listed, "the summary's list of labs"
    named = [x.strip() for x in listed.group(1).split(",")] + [listed.group(2)]
    assert sorted(named) == LABS


def test_readme_layout_names_the_last_notebook():
    assert f"the lessons, 00-{LAST:02d}" in README


def test_every_notebook_quoting_an_h100_run_is_named_with_the_h100():
    """Notebooks whose GPU numbers come from an `h100_*.json` file are named wherever the
    README and notebook 00 say the measurements are the H200's except on an H100."""
    on_h100 = sorted(name.split("_")[0] for name in NOTEBOOKS
                     if re.search(r"h100_[a-z0-9_]*\.json",
                                  (ROOT / "notebooks" / name).read_text()))
    assert on_h100, "some notebook quotes an H100 run"
    listing = ", ".join(on_h100[:-1]) + " and " + on_h100[-1]
    text = " ".join(README.split())
    assert text.count(f"notebooks {listing}") == 3     # intro, laptops, Kubernetes
    assert f"notebooks {listing} on an NVIDIA" in " ".join(START.split())
    assert "13 and 14 on an NVIDIA H100" not in README


def test_paged_first_run_host_times_match_the_json():
    run1 = json.loads((RESULTS / "h100_run1_gpu_paged.json").read_text())
    small = [r["ms"] for r in run1["table"] if r["bhkv"] * r["tk"] <= 8 * 131072]
    large = [r["ms"] for r in run1["table"] if r["bhkv"] * r["tk"] > 8 * 131072]
    assert {r["bhkv"] for r in run1["table"] if r["ms"] in large} == {32}
    text = " ".join(README.split())
    assert f"took {min(small):.2f}-{max(small):.2f} ms whatever its size" in text
    assert f"caches {min(large):.2f}-{max(large):.2f} ms" in text


def test_paged_second_run_ratio_to_pytorch_matches_the_json():
    run2 = json.loads((RESULTS / "h100_run2_gpu_paged.json").read_text())
    ratios = [r["speed_vs_torch_flash_padded"] for r in run2["ragged"]["rows"]
              if "speed_vs_torch_flash_padded" in r]
    fractions = [r["fraction_of_copy"] for r in run2["ragged"]["rows"]]
    text = " ".join(README.split())
    assert f"and {min(ratios):.1f}-{max(ratios):.1f}x PyTorch flash" in text
    assert f"{np.round(100 * min(fractions)):.0f}-{np.round(100 * max(fractions)):.0f}% of the " \
           "device copy" in text



def test_env_note_names_the_h100_notebooks_too():
    """Notebook 00's environment check says where the GPU numbers come from, as the README."""
    from flashcourse import env
    facts = dict(env.report(), cuda_gpu=False, simulator=True)
    text = " ".join(" ".join(env.advice(facts)).split())
    assert "(notebooks 11b, 13, 14 and 15: on an H100)" in text


def test_paged_kernel_ratios_match_the_json():
    """The README's table of kernel-time ratios (min / median / max) and the ranges in
    benchmarks/NOTES_cuda_decode.md, from the second H100 run."""
    run2 = json.loads((RESULTS / "h100_run2_gpu_paged.json").read_text())
    text = " ".join(README.split())
    notes = " ".join((ROOT / "benchmarks" / "NOTES_cuda_decode.md").read_text().split())
    spans = {}
    for kernel, label in (("tensor_core", "tensor cores (G = 8, or Tq = 4)"),
                          ("cuda_cores", "CUDA cores (G = 1, Tq = 1)")):
        cells = []
        for page in (64, 16):
            r = [x["kernel_ratio"] for x in run2["table"]
                 if x["kernel"] == kernel and x["page_size"] == page]
            cells.append(f"{min(r):.2f} / {np.median(r):.2f} / {max(r):.2f}")
        assert f"| {label} | {cells[0]} | {cells[1]} |" in text
        every = [x["kernel_ratio"] for x in run2["table"] if x["kernel"] == kernel]
        spans[kernel] = f"{min(every):.2f}-{max(every):.2f}x"
    assert (f"{spans['cuda_cores']} the contiguous ones on CUDA cores and "
            f"{spans['tensor_core']} on tensor cores") in notes
