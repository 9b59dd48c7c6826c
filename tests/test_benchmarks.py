"""The benchmark scripts keep recorded results safe (issue 14, item 3; issue 23).

Without a GPU every GPU benchmark stops with an error naming the missing GPU (unless
asked for --simulator-smoke), and no run writes into benchmarks/results/ without
--record. The scripts import the installed package (no sys.path edits).
"""

import hashlib
import importlib.util
import os
import re
from argparse import ArgumentParser
from pathlib import Path

import pytest

from flashcourse import results
from flashcourse.gpu import using_simulator

BENCH = results.ROOT / "benchmarks"
GPU_SCRIPTS = ["gpu_forward", "gpu_backward", "tune_sweep", "verify_defaults", "ncu_traffic",
               "gpu_decode", "gpu_tensor_core", "kernel_ab", "gpu_tc_backward", "gpu_labs",
               "gpu_train", "gpu_variants", "gpu_fp8", "gpu_paged", "gpu_fp8_forward"]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _recorded_digest():
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(results.RECORDED_DIR.iterdir()) if p.is_file()}


@pytest.mark.parametrize("name", GPU_SCRIPTS)
def test_gpu_benchmark_without_a_gpu_stops_and_names_it(name):
    if not using_simulator():
        pytest.skip("a GPU is present")
    before = _recorded_digest()
    with pytest.raises(SystemExit) as stop:
        _load(name).main([])
    assert stop.value.code not in (0, None)
    assert "no NVIDIA CUDA GPU found" in str(stop.value.code)
    assert "--simulator-smoke" in str(stop.value.code)
    assert _recorded_digest() == before


def _args(argv, gpu=True):
    ap = ArgumentParser()
    results.add_output_arguments(ap, gpu=gpu)
    return ap.parse_args(argv)


def _record_run(tmp_path, monkeypatch):
    """(recorded folder, out folder, --record args, staging folder) of a --record run whose
    recorded and out folders are under tmp_path."""
    recorded, out_dir = tmp_path / "results", tmp_path / "out"
    recorded.mkdir()
    monkeypatch.setattr(results, "RECORDED_DIR", recorded)
    monkeypatch.setattr(results, "OUT_DIR", out_dir)
    args = _args(["--record"], gpu=False)
    return recorded, out_dir, args, results.output_dir(args)


def test_default_output_is_the_untracked_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "OUT_DIR", tmp_path / "out")
    assert results.output_dir(_args([])) == tmp_path / "out"
    assert results.output_dir(_args(["--out", str(tmp_path / "x")])) == tmp_path / "x"


def test_recorded_results_need_record(tmp_path):
    inside = [results.RECORDED_DIR, results.RECORDED_DIR / "sub",
              results.RECORDED_DIR / "h200_forward.json",
              results.OUT_DIR / ".." / "results" / "x"]
    link = tmp_path / "link"
    link.symlink_to(results.RECORDED_DIR, target_is_directory=True)
    for path in inside + [link, link / "sub"]:
        assert results.inside_recorded(path), path
        with pytest.raises(SystemExit, match="pass --record"):
            results.output_dir(_args(["--out", str(path)]))
    for path in (results.OUT_DIR, results.ROOT / "benchmarks", tmp_path / "results"):
        assert not results.inside_recorded(path), path
    with pytest.raises(SystemExit, match="never recorded"):
        results.output_dir(_args(["--record", "--simulator-smoke"]))


def test_record_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(results, "has_gpu", lambda: False)
    assert "needs a GPU run" in results.output_problem(_args(["--record"]))
    assert results.output_problem(_args(["--record"], gpu=False), gpu=False) is None
    monkeypatch.setattr(results, "has_gpu", lambda: True)
    assert results.output_problem(_args(["--record"])) is None
    assert "leave out --out" in results.output_problem(_args(["--record", "--out", "/tmp/x"]))


def test_record_needs_the_package_of_the_scripts_checkout(tmp_path, monkeypatch):
    """`python other/benchmarks/x.py --record` with flashcourse imported from here would
    write this checkout's results: refused, naming the PYTHONPATH to use."""
    monkeypatch.setattr(results, "has_gpu", lambda: True)
    other = tmp_path / "other" / "benchmarks" / "gpu_forward.py"
    problem = results.output_problem(_args(["--record"]), script_file=other)
    assert f"PYTHONPATH={tmp_path / 'other'}" in problem
    assert results.output_problem(_args(["--out", str(other.parent / "results")]),
                                  script_file=other).startswith("--out")


def test_record_writes_the_recorded_files_only_when_the_run_succeeded(tmp_path, monkeypatch):
    recorded, out_dir, args, staging = _record_run(tmp_path, monkeypatch)
    (recorded / "a.json").write_text("old")
    assert staging.parent == out_dir and staging.name.startswith("record-")
    (staging / "a.json").write_text("new")
    assert (recorded / "a.json").read_text() == "old"         # nothing while the run goes
    assert results.finish(args, staging, ok=False) == []       # a failed check: nothing
    assert (recorded / "a.json").read_text() == "old" and (staging / "a.json").exists()
    assert results.finish(args, staging) == [recorded / "a.json"]
    assert (recorded / "a.json").read_text() == "new"
    assert not staging.exists() and sorted(p.name for p in recorded.iterdir()) == ["a.json"]
    with pytest.raises(ValueError, match="staging folder"):
        results.finish(args, recorded)
    plain = _args(["--out", str(tmp_path / "mine")], gpu=False)
    assert results.finish(plain, results.output_dir(plain)) == []


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a\\b", "a\0b", "x..y",
                                  "a\nb", 7])
def test_output_names_are_names_not_paths(name, tmp_path):
    with pytest.raises(SystemExit, match="expected a plain file name, not a path"):
        results.write_output(tmp_path, name, "x")
    assert results.name_problem(name, "--tag").startswith("--tag ")
    assert list(tmp_path.iterdir()) == []


def test_write_output_refuses_links_and_odd_files_and_replaces_regular_ones(tmp_path):
    (tmp_path / "kept.json").write_text("recorded")
    (tmp_path / "link.json").symlink_to(tmp_path / "kept.json")
    (tmp_path / "folder.json").mkdir()
    os.mkfifo(tmp_path / "fifo.json")
    for name, match in (("link.json", "is a symbolic link"),
                        ("folder.json", "not a regular file"),
                        ("fifo.json", "not a regular file")):
        with pytest.raises(SystemExit, match=f"--out {tmp_path / name}.* {match}"):
            results.write_output(tmp_path, name, "new", option="--out")
    assert (tmp_path / "kept.json").read_text() == "recorded"
    assert results.write_output(tmp_path, "kept.json", b"new") == tmp_path / "kept.json"
    assert (tmp_path / "kept.json").read_text() == "new"
    with pytest.raises(SystemExit, match="does not exist or is not a folder"):
        results.write_output(tmp_path / "missing", "a.json", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fifo.json", "folder.json", "kept.json", "link.json"]       # no temporary left


def test_the_writer_refuses_any_checkouts_recorded_folder(tmp_path):
    other = tmp_path / "other" / "benchmarks" / "results"
    other.mkdir(parents=True)
    (tmp_path / "out").symlink_to(other, target_is_directory=True)
    for folder in (other, tmp_path / "out", other / ".." / "results"):
        with pytest.raises(SystemExit, match="inside benchmarks/results/"):
            results.write_output(folder, "a.json", "x")
    assert list(other.iterdir()) == []


def test_append_output_never_follows_a_link_planted_after_the_check(tmp_path, monkeypatch):
    results.write_output(tmp_path, "log.txt", "")
    results.append_output(tmp_path, "log.txt", "one\n")
    results.append_output(tmp_path, "log.txt", "two\n")
    assert (tmp_path / "log.txt").read_text() == "one\ntwo\n"
    (tmp_path / "kept.txt").write_text("recorded")
    (tmp_path / "late.txt").symlink_to(tmp_path / "kept.txt")
    monkeypatch.setattr(results, "output_file", lambda out, name, option=None: out / name)
    with pytest.raises(SystemExit, match="late.txt: cannot append to it"):
        results.append_output(tmp_path, "late.txt", "three\n")
    assert (tmp_path / "kept.txt").read_text() == "recorded"


def test_save_figure_and_write_json_go_through_the_writer(tmp_path):
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(1, 1))
    path = results.save_figure(tmp_path, "f.png", fig, dpi=20)
    plt.close(fig)
    assert path.read_bytes().startswith(b"\x89PNG")
    (tmp_path / "g.png").symlink_to(path)
    with pytest.raises(SystemExit, match="g.png is a symbolic link"):
        results.save_figure(tmp_path, "g.png", fig)
    with pytest.raises(results.ResultsError, match="verify_defaults"):
        results.write_json(tmp_path, "v.json", {}, "verify_defaults")
    assert not (tmp_path / "v.json").exists()


def test_finish_records_no_link_of_the_staging_folder(tmp_path, monkeypatch):
    recorded, _, args, staging = _record_run(tmp_path, monkeypatch)
    (tmp_path / "secret").write_text("not a result")
    results.write_output(staging, "a.json", "new")
    (staging / "b.json").symlink_to(tmp_path / "secret")
    assert results.finish(args, staging) == [recorded / "a.json"]
    assert sorted(p.name for p in recorded.iterdir()) == ["a.json"]


def test_benchmarks_out_is_ignored_by_git():
    ignore = (results.ROOT / ".gitignore").read_text().split()
    assert "benchmarks/out/" in ignore


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_benchmarks_import_the_installed_package(path):
    assert "sys.path.insert" not in Path(path).read_text()


def test_slow_skip_scales_the_last_timed_run_as_n_squared():
    """SlowSkip (the guard of the benchmark loops): 0 s before any run of the key, then
    the last time x (n / n_last)^2, per key (exact arithmetic: powers of two)."""
    from flashcourse.timing import SlowSkip
    slow = SlowSkip(1.0)
    assert slow.estimate_s(("flash", 64, False), 4096) == 0.0
    assert slow.reason(("flash", 64, False), 4096) is None
    slow.record(("flash", 64, False), 1024, 250.0)
    assert slow.estimate_s(("flash", 64, False), 4096) == 4.0
    assert slow.reason(("flash", 64, False), 2048) is None            # 1.0 s: not above
    assert slow.reason(("flash", 64, False), 4096) == "estimated 4.0 s per run (> 1.0 s): skipped"
    assert slow.estimate_s(("flash", 64, True), 4096) == 0.0
    assert slow.row("flash", 4096, 64, False, 32)["skipped"].startswith("estimated 4.0 s")
    row = slow.row("flash", 2048, 64, True, 32)             # causal: half of 4 x 32 N^2 d
    assert "skipped" not in row and row["flops"] == 2.0 * 32 * 2048 * 2048 * 64


def test_row_summary_names_the_time_or_why_there_is_none():
    from flashcourse.timing import row_summary
    assert row_summary({"ms": 1.5, "tflops": 2.25}) == "    1.500 ms    2.25 TFLOP/s"
    assert row_summary({"skipped": "too slow", "error": "x"}) == "too slow"
    assert row_summary({"error": "OOM"}) == "OOM"
    assert row_summary({}) == ""


def test_gpu_labs_judges_what_a_notebook_printed():
    labs = _load("gpu_labs")
    ok = "running on a CUDA GPU\nAll checks passed (3 cases).\n"
    assert labs.judge("lab", ok, "") == {"ok": True, "checks_passed": 1, "failed_lines": [],
                                         "not_implemented": 0, "error": "", "on_gpu": True}
    failed = ok + "  FAILED ragged: o differs\n"
    assert not labs.judge("lab", failed, "")["ok"]
    assert labs.judge("lab", failed, "")["failed_lines"] == ["FAILED ragged: o differs"]
    assert not labs.judge("lab", ok + "Not implemented yet: write x.\n", "")["ok"]
    assert not labs.judge("lab", "nothing checked\n", "")["ok"]        # no check ran
    assert not labs.judge("notebook", "", "TypingError: array(int64, float32)")["ok"]
    assert labs.judge("notebook", "plots\n", "")["ok"]


def test_gpu_labs_runs_every_cuda_lab_and_names_a_bad_choice():
    labs = _load("gpu_labs")
    names = [p.stem for _, p in labs.targets(None, smoke=False)]
    solutions = sorted(p.stem for p in (BENCH.parent / "labs" / "solutions").glob("*.ipynb")
                       if re.search(r"cuda\.jit|numba import cuda", p.read_text()))
    assert set(solutions) <= set(names) and all(
        (BENCH.parent / "notebooks" / f"{n}.ipynb").exists() or n in solutions for n in names)
    with pytest.raises(SystemExit, match="--only 'nope'"):
        labs.targets("nope", smoke=False)
