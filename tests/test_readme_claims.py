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


# Round 18 c: the developer notes (benchmarks/NOTES_*.md) and the headers of the CUDA modules
# cite recorded files and quote their numbers too.

NOTES = sorted((ROOT / "benchmarks").glob("NOTES_*.md"))
CUDA_MODULES = sorted((ROOT / "flashcourse" / "cuda").rglob("*.py"))


def _module_doc(path: Path) -> str:
    import ast
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def _docs() -> dict:
    docs = {"README.md": README, "CONTRIBUTING.md": (ROOT / "CONTRIBUTING.md").read_text()}
    docs.update({p.name: p.read_text() for p in NOTES})
    docs.update({str(p.relative_to(ROOT)): _module_doc(p) for p in CUDA_MODULES})
    return docs


def test_every_recorded_file_the_docs_name_exists():
    """A results file named in the README, CONTRIBUTING, the notes or a CUDA module's header
    is in benchmarks/results/ (benchmarks/out/ is where an unrecorded run writes)."""
    missing = []
    for name, text in _docs().items():
        for f in set(re.findall(r"(?<![\w*])(?:h100|h200|gpu|cpu)_[A-Za-z0-9_*]+"
                                r"\.(?:json|txt|png|md)", text)):
            if f == "gpu_paged.json" and "benchmarks/out/gpu_paged.json" in text:
                continue
            if not list(RESULTS.glob(f)):
                missing.append((name, f))
    assert not missing


def test_backward_notes_name_no_sanitizer_file_of_the_sweep():
    notes = (ROOT / "benchmarks" / "NOTES_cuda_backward.md").read_text()
    assert "_sanitizer_sweep1" not in notes
    assert not (RESULTS / "h200_backward_sanitizer_sweep1.txt").exists()


def test_no_doc_points_outside_the_repository():
    """The notes and the modules cited ../shared/TOOLCHAIN.md, a file of the authors'
    workspace that is not in the repository."""
    for name, text in _docs().items():
        assert "TOOLCHAIN" not in text and "../shared" not in text, name
    for path in (ROOT / "flashcourse").rglob("*.py"):
        assert "../shared/" not in path.read_text(), path


def test_decode_tc_split_numbers_match_the_host_path_json():
    """NOTES_cuda_decode.md's run 3 (the tensor-core split kernel's variants) and the
    decode modules' headers, against `decode_variants` of h200_host_path.json."""
    doc = json.loads((RESULTS / "h200_host_path.json").read_text())
    rows = [r for r in doc["decode_variants"] if r["bhkv"] == 8 and r["tk"] == 65536]

    def us(kernel, n_rows, **kw):
        return [r["gpu_us"] for r in rows if r["kernel"] == kernel
                and r["group"] * r["tq"] == n_rows
                and all(r.get(k) == v for k, v in kw.items())]

    def span(xs):
        lo, hi = round(min(xs)), round(max(xs))
        return f"{lo}" if lo == hi else f"{lo}-{hi}"

    tc8 = [span(us("tensor_core", n, tc_warps=8, tc_block_k=16)) for n in (1, 4, 16)]
    cc = [span(us("cuda_cores", n)) for n in (1, 4, 16)]
    notes = " ".join((ROOT / "benchmarks" / "NOTES_cuda_decode.md").read_text().split())
    assert f"GPU time {' / '.join(tc8)} us for 1 / 4 / 16 rows" in notes
    assert f"(CUDA cores: {' / '.join(cc)} us;" in notes
    torch_all = [span([r["torch_gpu_us"] for r in rows if r["group"] * r["tq"] == n])
                 for n in (1, 4, 16)]
    assert f"PyTorch {' / '.join(torch_all)} us)" in notes
    for warps, label in ((1, "1 warp per block"), (4, "4 warps"), (6, "6 warps"),
                         (8, "8 warps")):
        times = [r["gpu_us"] for r in rows
                 if r.get("tc_warps") == warps and r.get("tc_block_k") == 16]
        assert f"{label} {span(times)} us" in notes, label
    bc32 = [r["gpu_us"] for r in rows if r.get("tc_block_k") == 32]
    assert f"Bc = 32 with 4 warps {span(bc32)} us" in notes
    every_tc = [r["gpu_us"] for r in rows if r["kernel"] == "tensor_core"
                and r.get("tc_warps") == 8 and r.get("tc_block_k") == 16]
    header = " ".join(_module_doc(ROOT / "flashcourse/cuda/decoding/decode_kernels.py").split())
    assert (f"{span(every_tc)} us for 1-16 rows, this kernel "
            f"{span(us('cuda_cores', 1) + us('cuda_cores', 16))} us") in header


def test_decode_tc_header_describes_the_default_warps():
    from flashcourse.cuda.decoding import decode_tc_kernels as tc
    header = " ".join(_module_doc(ROOT / "flashcourse/cuda/decoding/decode_tc_kernels.py")
                      .split())
    assert "One warp per block" not in header
    assert f"(by default {tc.DEFAULT_TC_WARPS} on a GPU, halved until" in header


def test_decode_tc_header_rates_match_the_host_path_json():
    """The CUDA-core split kernel's TB/s by rows per KV head, which the tensor-core kernel's
    header quotes as its reason."""
    doc = json.loads((RESULTS / "h200_host_path.json").read_text())
    large = [r for r in doc["decode_variants"] if r["kernel"] == "cuda_cores"
             and r["bhkv"] * r["tk"] >= 8 * 65536]             # from 256 MiB of K/V up
    one = [r["ours_tbs"] for r in doc["decode"] if r["group"] * r["tq"] == 1
           and r["kv_bytes"] >= 2 ** 28] + [r["tbs"] for r in large
                                          if r["group"] * r["tq"] == 1]
    four = [r["tbs"] for r in large if r["group"] * r["tq"] == 4]
    sixteen = [r["tbs"] for r in large if r["group"] * r["tq"] == 16]
    header = " ".join(_module_doc(ROOT / "flashcourse/cuda/decoding/decode_tc_kernels.py")
                      .split())
    assert f"reaches {min(one):.1f}-{max(one):.1f} TB/s with one query row" in header
    assert f"falls to {min(four):.1f}-{max(four):.1f} TB/s" in header
    assert f"with 16 rows to {min(sixteen):.1f} TB/s" in header


def test_host_path_headers_cite_the_probe_of_the_host_costs_before():
    """host_plans' and packed_launch's 'before' numbers come from the host-cost probe, not
    from h200_host_path.json (which is the run after the plans)."""
    probe = {}
    for line in (RESULTS / "h200_host_probe_log.txt").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            probe[parts[0]] = float(parts[1])
    split, combine = round(probe["dispatch_split_us"]), round(probe["dispatch_combine_us"])
    plans = " ".join(_module_doc(ROOT / "flashcourse/cuda/common/host_plans.py").split())
    packed = " ".join(_module_doc(ROOT / "flashcourse/cuda/common/packed_launch.py").split())
    assert "h200_host_probe_log.txt" in plans and "h200_host_probe_log.txt" in packed
    assert f"kernel dispatch ({combine}-{split} us per launch" in plans
    assert f"~{round(probe['torch_flash_host_us'])} us of host time" in plans
    assert f"that is {split} + {combine} us of Python" in packed


def test_notebook_11b_says_the_paged_kernels_were_measured_and_the_change_since_is_not():
    text = " ".join(_markdown(ROOT / "notebooks" / "11b_paged_kv_cache.ipynb").split())
    assert "still to be measured" not in text.split("vLLM paid 20% to 26%")[1][:200]
    assert "about 15%" not in text
    assert "one step ahead" in text and "not been timed on a GPU yet" in text
    run2 = json.loads((RESULTS / "h100_run2_gpu_paged.json").read_text())
    cc = [x["kernel_ratio"] for x in run2["table"] if x["kernel"] == "cuda_cores"]
    speed = round(float(np.median(cc)), 2)                       # 0.85
    assert f"about {speed:.2f} times the speed" in text
    assert f"about {round(100 * (1 / speed - 1))}% longer" in text   # 1 / 0.85: 18%
