"""Recorded results are written only by a GPU run with --record (issue 23).

Every benchmark script runs here, in this process (its `main(argv)`, from the checkout's
root folder, as `python benchmarks/x.py` would run it), with each of its output options:
--out inside benchmarks/results/ (directly, through '..' and through a symlink),
--record (no GPU here), --record with --simulator-smoke, --manifest, --plot, and the
CPU benchmark's reduced runs with --record. Each refused case must stop non-zero with a
message naming the option; afterwards `git status` of benchmarks/results/ and the bytes
of every file in it must be as before. (Were a guard to break, the fixture puts the
recorded files back before the test fails.) Issue 50's cases (links planted in
benchmarks/out, benchmarks/out itself a link, '..' in names) run against a fake
checkout in a temporary folder; one runs as a real process, in a temporary copy.

The scripts import the package of this checkout, as `python benchmarks/x.py` with
PYTHONPATH would. On a machine with a GPU these cases would really run (and --record
would record), so the module is skipped there.
"""

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from flashcourse import results

ROOT = results.ROOT
BENCH = ROOT / "benchmarks"
RECORDED = results.RECORDED_DIR

pytestmark = pytest.mark.skipif(results.has_gpu(), reason="a GPU is here: --record would "
                                "really run and record; these cases are for CPU machines")

#: Scripts with --out / --record / --simulator-smoke (flashcourse.results.add_output_arguments).
GPU_OUTPUT_SCRIPTS = ["gpu_forward", "gpu_backward", "gpu_decode", "gpu_tensor_core",
                      "tune_sweep", "verify_defaults", "ncu_traffic", "gpu_tc_backward",
                      "gpu_hopper", "gpu_labs", "gpu_train", "gpu_fp8", "gpu_paged"]
INSIDE = "benchmarks/results/sub"
NO_GPU = "no NVIDIA CUDA GPU found"

# (script, argv, what the error must name). {tmp}: a fresh folder of the case (it must
# stay empty or absent); {link}: a symlink to benchmarks/results/.
REFUSED = [
    *[(s, ["--record"], "--record") for s in GPU_OUTPUT_SCRIPTS],
    *[(s, ["--simulator-smoke", "--out", INSIDE], "--out") for s in GPU_OUTPUT_SCRIPTS],
    # scripts whose smoke run returned before they looked at their output options
    *[(s, ["--record", "--simulator-smoke"], "--simulator-smoke")
      for s in ("gpu_forward", "gpu_decode", "gpu_tensor_core")],
    ("gpu_decode", ["--record", "--sanitize-small"], "--record"),
    ("gpu_forward", ["--out", "benchmarks/results"], "--out"),
    ("gpu_tensor_core", ["--simulator-smoke", "--out", "benchmarks/out/../results"], "--out"),
    ("verify_defaults", ["--simulator-smoke", "--out", "{link}/sub"], "--out"),
    ("gpu_backward", ["--plot", "benchmarks/results/h200_backward.json", "--record"],
     "--record"),
    ("gpu_backward", ["--plot", "benchmarks/results/h200_backward.json", "--out",
                      "benchmarks/results"], "--out"),
    ("cpu_forward", ["--record", "--n", "64", "--repeats", "1"], "--n"),
    ("cpu_forward", ["--record", "--quick"], "--quick"),
    ("cpu_forward", ["--record", "--tag", "2core"], "--tag"),
    ("cpu_forward", ["--record", "--out", "{tmp}"], "--out"),
    ("cpu_forward", ["--n", "64", "--repeats", "1", "--out", INSIDE], "--out"),
    ("cpu_forward", ["--n", "64", "--out", "{link}"], "--out"),
    ("ncu_target", ["--manifest", "benchmarks/results/h200_forward.json"], "--manifest"),
    ("ncu_target", ["--configs", "cuda-dense-N1024", "--manifest", "{link}/new.json"],
     "--manifest"),
    ("ncu_target", ["--manifest", "{tmp}/manifest.json"], "--configs"),
    ("ncu_target", ["--configs", "nonsense", "--manifest", "{tmp}/manifest.json"], "--configs"),
    # a known configuration on the simulator: a clear stop, not a hang, and no manifest
    ("ncu_target", ["--configs", "cuda-dense-N1024", "--manifest", "{tmp}/manifest.json"],
     NO_GPU),
    # --out outside benchmarks/results/ is fine, but these scripts measure a GPU
    *[(s, ["--out", "{tmp}"], NO_GPU) for s in GPU_OUTPUT_SCRIPTS],
    ("kernel_ab", ["--label", "x"], NO_GPU),
]

# (script, argv, files the run writes under {tmp})
ALLOWED = [
    ("gpu_backward", ["--plot", "benchmarks/results/h200_backward.json", "--out", "{tmp}"],
     ["h200_backward.png"]),
    ("ncu_target", ["--list"], []),
]


def _case_id(case):
    return f"{case[0]} {' '.join(case[1])}"


def _snapshot():
    """(git status of benchmarks/results/, {path: bytes} of every file in it, and its
    folders: git does not see an empty one)."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--",
                             str(RECORDED)], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    files = {p.relative_to(RECORDED): p.read_bytes()
             for p in sorted(RECORDED.rglob("*")) if p.is_file()}
    folders = sorted(p.relative_to(RECORDED) for p in RECORDED.rglob("*") if p.is_dir())
    return status, files, folders


def _restore(files, folders):
    """Put benchmarks/results/ back as `files` and `folders` (a guard broke: undo what a
    run wrote)."""
    for p in sorted(RECORDED.rglob("*"), reverse=True):      # deepest first
        rel = p.relative_to(RECORDED)
        if p.is_symlink() or p.is_file():
            if rel not in files:
                p.unlink()
        elif p.is_dir() and rel not in folders:
            shutil.rmtree(p)
    for rel, data in files.items():
        if (RECORDED / rel).read_bytes() != data:
            (RECORDED / rel).write_bytes(data)


def _run(case, folder: Path):
    """Run `case` as `python benchmarks/<script>.py ARGV` would, in this process: its
    main(argv), output captured; a SystemExit's message goes to stderr (status 1), any
    other exception is a traceback (status 1)."""
    script, argv = case[0], case[1]
    link = folder / "link"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(RECORDED, target_is_directory=True)
    tmp = folder / "tmp"
    argv = [a.format(tmp=tmp, link=link) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = _load(script).main(argv)
        except SystemExit as stop:          # what the interpreter does with it
            code = stop.code
            if isinstance(code, str):
                print(code, file=sys.stderr)
                code = 1
        except Exception:                   # a crash: shown as the interpreter would
            traceback.print_exc()
            code = 1
    cmd = [f"benchmarks/{script}.py", *argv]
    return subprocess.CompletedProcess(cmd, code or 0, out.getvalue(), err.getvalue()), tmp


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Run every case, in this process from the checkout's root folder (relative paths
    as on a command line; gpu_hopper imports gpu_bars from its own folder); check the
    recorded files after."""
    before = _snapshot()
    cases = REFUSED + ALLOWED
    base = tmp_path_factory.mktemp("bench_outputs")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(ROOT)
            mp.syspath_prepend(str(BENCH))
            done = [_run(case, base / f"case{i}") for i, case in enumerate(cases)]
    finally:
        after = _snapshot()
        if after != before:
            _restore(*before[1:])
    return {_case_id(c): d for c, d in zip(cases, done)}, before, after


@pytest.mark.parametrize("case", REFUSED, ids=_case_id)
def test_refused_run_names_the_option_and_writes_nothing(outcomes, case):
    proc, tmp = outcomes[0][_case_id(case)]
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said
    assert case[2] in said, said
    if case[2] != NO_GPU:
        assert "Traceback" not in said, said
    assert not tmp.exists() or not any(tmp.iterdir()), sorted(tmp.iterdir())


@pytest.mark.parametrize("case", ALLOWED, ids=_case_id)
def test_allowed_run_writes_only_where_it_was_told(outcomes, case):
    proc, tmp = outcomes[0][_case_id(case)]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []
    assert written == sorted(case[2])


def test_recorded_results_are_unchanged(outcomes):
    _, (status_before, files_before, dirs_before), (status_after, files_after, dirs_after) = \
        outcomes
    changed = sorted(str(p) for p in set(files_before) | set(files_after)
                     if files_before.get(p) != files_after.get(p))
    assert status_after == status_before, f"git status changed (restored): {status_after}"
    assert not changed, f"runs wrote into benchmarks/results/ (restored): {changed}"
    assert dirs_after == dirs_before, f"folders made in benchmarks/results/ (removed): " \
        f"{sorted(set(dirs_after) - set(dirs_before))}"


def test_every_benchmark_script_checks_its_outputs():
    """One check for all (flashcourse.results.check_outputs), right after parsing (called
    by the script, or by results.parse_gpu_arguments, which parses); a script that writes
    through output_dir also calls finish (the --record step)."""
    for path in sorted(BENCH.glob("*.py")):
        text = path.read_text()
        assert ("results.check_outputs(args, __file__" in text
                or "args = results.parse_gpu_arguments(ap, argv, __file__)" in text), path.name
        if "results.output_dir(" in text:
            assert "results.finish(" in text, path.name


# ----------------------------------------------------------------------------- in process
def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def cpu_forward(tmp_path, monkeypatch):
    """benchmarks/cpu_forward.py with a fake checkout under tmp_path (its recorded folder
    tmp_path/benchmarks/results/) and instant, fake timings."""
    mod = _load("cpu_forward")
    checkout = tmp_path / "benchmarks"
    (checkout / "results").mkdir(parents=True)
    monkeypatch.setattr(mod, "__file__", str(checkout / "cpu_forward.py"))
    monkeypatch.setattr(results, "RECORDED_DIR", checkout / "results")
    monkeypatch.setattr(results, "OUT_DIR", checkout / "out")
    monkeypatch.setattr(mod, "machine_info", lambda: {"cpu": "Zen 9", "cpus_allowed": 2,
                                                      "logical_cpus": 2})
    monkeypatch.setattr(mod, "bench_n", lambda n, repeats, **kw: {
        "N": n, "d": 64, "repeats": repeats, "results": {}})
    monkeypatch.setattr(mod, "print_row", lambda row: None)
    monkeypatch.setattr(mod, "big", lambda n: {"N": n, "seconds": 1.0})
    return mod


def test_cpu_forward_files_are_named_by_the_machine():
    mod = _load("cpu_forward")
    assert mod.machine_name({"cpu": "znver3", "cpus_allowed": 2}) == "znver3_2core"
    assert mod.machine_name({"cpu": "Skylake-AVX512", "logical_cpus": 8}, threads=1) == \
        "skylake-avx512_8core_1thread"
    assert mod.machine_name({"cpu": None, "cpus_allowed": 2}) == "unknown-cpu_2core"


def test_cpu_forward_record_replaces_that_machines_file_whole(cpu_forward):
    recorded = results.RECORDED_DIR
    mine = recorded / "cpu_forward_zen-9_2core.json"
    mine.write_text(json.dumps({"date": "old", "machine": {"cpu": "Zen 9"}, "rows": [],
                                "big": {"N": 1, "seconds": 1.0}, "sweep_N4096": {}}))
    legacy = recorded / "cpu_forward_2core.json"
    legacy.write_text("another machine's record\n")
    cpu_forward.main(["--record"])
    doc = json.loads(mine.read_text())
    assert "big" not in doc and "sweep_N4096" not in doc          # nothing kept from before
    assert doc["date"] != "old"
    assert [(r["N"], r["repeats"]) for r in doc["rows"]] == \
        [(n, cpu_forward.REPEATS) for n in cpu_forward.NS]
    assert legacy.read_text() == "another machine's record\n"
    assert not any(results.OUT_DIR.iterdir())                      # staging folder gone
    cpu_forward.main(["--record", "--big"])                       # a run of its own
    big = json.loads((recorded / "cpu_forward_zen-9_2core_big.json").read_text())
    assert set(big) == {"big"} and big["big"]["N"] == cpu_forward.BIG_N
    assert "big" not in json.loads(mine.read_text())


def test_cpu_forward_out_never_merges_two_runs(cpu_forward, tmp_path):
    out = tmp_path / "elsewhere"
    cpu_forward.main(["--n", "64", "--repeats", "1", "--out", str(out)])
    cpu_forward.main(["--n", "128", "--repeats", "1", "--out", str(out)])
    doc = json.loads((out / "cpu_forward_zen-9_2core.json").read_text())
    assert [r["N"] for r in doc["rows"]] == [128]
    assert not any(results.RECORDED_DIR.iterdir())


@pytest.mark.parametrize("argv, option", [
    (["--repeats", "8"], "--repeats"), (["--n", "1024", "4096"], "--n"),
    (["--quick"], "--quick"), (["--big", "--big-n", "1024"], "--big-n"),
    (["--tag", "2core"], "--tag"), (["--no-save"], "--no-save")])
def test_cpu_forward_refuses_a_reduced_record_before_timing(cpu_forward, argv, option):
    cpu_forward.bench_n = cpu_forward.big = None           # any timing would fail
    with pytest.raises(SystemExit, match=f"--record needs the full default run: leave "
                                         f"out {option} "):
        cpu_forward.main(["--record", *argv])
    assert not any(results.RECORDED_DIR.iterdir())


def test_cpu_forward_records_more_repeats_and_the_default_sizes(cpu_forward):
    cpu_forward.main(["--record", "--repeats", "11", "--n", *map(str, cpu_forward.NS)])
    doc = json.loads((results.RECORDED_DIR / "cpu_forward_zen-9_2core.json").read_text())
    assert {r["repeats"] for r in doc["rows"]} == {11}


# ------------------------------------------------- one writer: links, '..' (issue 50, item 1)
#: Copies of these recorded files make the fake checkout's benchmarks/results/.
SAMPLE = ["h200_backward.json", "h200_forward.json", "cpu_forward_2core.json",
          "h200_tuning_sweep.json", "h200_ncu_traffic.json"]


def _digests(folder: Path) -> dict:
    """{relative path: sha256} of every file under `folder`, and its links and folders."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = f"link to {os.readlink(p)}"
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "folder"
    return out


@pytest.fixture(scope="module")
def env_record():
    from flashcourse import env
    return env.record()


@pytest.fixture
def checkout(tmp_path, monkeypatch, env_record):
    """A fake checkout tmp_path/benchmarks/: results/ (results.RECORDED_DIR) holds copies
    of SAMPLE, out/ (results.OUT_DIR) is the default output folder; the scripts believe
    a GPU is here (results.has_gpu) and env.record is instant. Yields the benchmarks
    folder; afterwards the fake and the real recorded files must be as before."""
    from flashcourse import env
    bench = tmp_path / "benchmarks"
    recorded = bench / "results"
    recorded.mkdir(parents=True)
    for name in SAMPLE:
        shutil.copy(RECORDED / name, recorded / name)
    monkeypatch.setattr(results, "RECORDED_DIR", recorded)
    monkeypatch.setattr(results, "OUT_DIR", bench / "out")
    monkeypatch.setattr(results, "has_gpu", lambda: True)
    monkeypatch.setattr(env, "record", lambda: json.loads(json.dumps(env_record)))
    monkeypatch.syspath_prepend(str(BENCH))            # gpu_hopper imports gpu_bars
    real, fake = _digests(RECORDED), _digests(recorded)
    yield bench
    assert _digests(recorded) == fake, "a run changed the fake checkout's recorded files"
    assert _digests(RECORDED) == real, "a run changed benchmarks/results/"


def _patch(**attrs):
    """A set-up that replaces these attributes of the script module (its GPU work)."""
    def setup(mod, monkeypatch):
        for name, value in attrs.items():
            monkeypatch.setattr(mod, name, value)
    return setup


def _fake_cpu_timings(mod, monkeypatch):
    _patch(machine_info=lambda: {"cpu": "Zen 9", "cpus_allowed": 2, "logical_cpus": 2},
           bench_n=lambda n, repeats, **kw: {"N": n, "d": 64, "repeats": repeats,
                                             "results": {}},
           print_row=lambda row: None)(mod, monkeypatch)


def _hopper_here(mod, monkeypatch):
    monkeypatch.setattr(mod.hopper, "check_capability", lambda: None)


def _torch_stub(mod, monkeypatch):
    import types
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="0"))


def _true(*args, **kwargs):
    return True


def _decode_checked(rng, doc, **kwargs):
    doc["check"] = {"runs": 0, "passed": 0, "rows": []}
    return True


def _verify_instantly(mod, monkeypatch):
    """verify_defaults' smoke run without the simulator: the reference as the forward,
    1 ms per timed call."""
    from flashcourse import reference
    _patch(forward=lambda q, k, v, causal: reference.attention(q, k, v, causal=causal),
           time_cuda=lambda fn, warmup, repeats: [1.0])(mod, monkeypatch)


def _none(*args, **kwargs):
    return None


def _lab_ran(path, *args):
    return "running on a CUDA GPU\nAll checks passed (1 cases).\n", ""


# script: (argv that gets it to its writes without a GPU, the files it writes in order,
# the set-up that stands in for its GPU work)
WRITERS = {
    "gpu_forward": (["--simulator-smoke", "--check"], ["gpu_forward.json"],
                    _patch(check=_true)),
    "gpu_backward": (["--simulator-smoke", "--check"], ["h200_backward.json"],
                     _patch(run_checks=_none)),
    "gpu_decode": (["--check"], ["gpu_decode_log.txt", "gpu_decode.json"],
                   _patch(check=_decode_checked)),
    "gpu_bars": (["--parts", "errors"], ["h200_bars.json", "h200_bars_log.txt"],
                 _patch(errors=_none)),
    "gpu_hopper": ([], ["h200_hopper.json", "h200_hopper_log.txt"], _hopper_here),
    "gpu_host_path": ([], ["gpu_host_path.json", "gpu_host_path_log.txt"], _torch_stub),
    "gpu_tc_backward": ([], ["gpu_tc_backward.json"], None),
    "gpu_labs": (["--simulator-smoke"], ["gpu_labs.json", "gpu_labs_log.txt"],
                 _patch(run_nbclient=_lab_ran, run_in_process=_lab_ran)),
    "gpu_tensor_core": ([], ["h200_tensor_core.json", "h200_tensor_core_log.txt"], None),
    "verify_defaults": (["--simulator-smoke"], ["h200_verify_defaults.json"],
                        _verify_instantly),
    "cpu_forward": (["--n", "64", "--repeats", "1", "--tag", "x"], ["cpu_forward_x.json"],
                    _fake_cpu_timings),
}


def _main(name, argv, monkeypatch):
    mod = _load(name)
    setup = WRITERS[name][2] if name in WRITERS else None
    if setup is not None:
        setup(mod, monkeypatch)
    return mod.main(argv)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_each_script_writes_its_files_through_the_one_writer(name, checkout, monkeypatch):
    """The baseline of the cases below: the set-up reaches every write of the script,
    and each file lands in the output folder as a regular file."""
    argv, files, _ = WRITERS[name]
    assert _main(name, argv, monkeypatch) in (0, None)
    out = checkout / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    assert all(p.is_file() and not p.is_symlink() for p in out.iterdir())


@pytest.mark.parametrize("name, file", [(n, f) for n in sorted(WRITERS)
                                        for f in WRITERS[n][1]])
def test_a_link_planted_at_an_output_file_is_refused(name, file, checkout, monkeypatch):
    """`ln -s ../results/h200_backward.json benchmarks/out/<file>`: the run stops naming
    the link, which stays a link; the recorded file is unchanged (the fixture)."""
    out = checkout / "out"
    out.mkdir()
    (out / file).symlink_to(Path("..") / "results" / "h200_backward.json")
    with pytest.raises(SystemExit, match=f"{file} is a symbolic link") as stop:
        _main(name, WRITERS[name][0], monkeypatch)
    assert "\n" not in str(stop.value)
    assert (out / file).is_symlink()


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_benchmarks_out_linked_to_results_is_refused(name, checkout, monkeypatch):
    (checkout / "out").symlink_to("results", target_is_directory=True)
    with pytest.raises(SystemExit, match="default output folder .* inside benchmarks/results"):
        _main(name, WRITERS[name][0], monkeypatch)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_out_through_dotdot_or_a_link_into_results_is_refused(name, checkout, monkeypatch):
    (checkout / "link").symlink_to("results", target_is_directory=True)
    for out in (checkout / "out" / ".." / "results", checkout / "link" / "sub"):
        with pytest.raises(SystemExit, match="--out .* inside benchmarks/results"):
            _main(name, [*WRITERS[name][0], "--out", str(out)], monkeypatch)
    assert not (checkout / "out").exists()


def test_the_issues_repro_as_typed_in_a_copy_of_the_checkout(tmp_path):
    """`ln -s ../results/h200_backward.json benchmarks/out/h200_backward.json && python
    benchmarks/gpu_backward.py --simulator-smoke --check`, as a process, in a temporary
    copy of the checkout (package, script, recorded file): one line, the file kept."""
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "flashcourse", copy / "flashcourse",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "benchmarks" / "results").mkdir(parents=True)
    (copy / "benchmarks" / "out").mkdir()
    shutil.copy(BENCH / "gpu_backward.py", copy / "benchmarks")
    recorded = copy / "benchmarks" / "results" / "h200_backward.json"
    shutil.copy(RECORDED / "h200_backward.json", recorded)
    (copy / "benchmarks" / "out" / "h200_backward.json").symlink_to(
        "../results/h200_backward.json")
    proc = subprocess.run([sys.executable, "benchmarks/gpu_backward.py", "--simulator-smoke",
                           "--check"], cwd=copy, env=dict(os.environ, PYTHONPATH=str(copy)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"{copy}/benchmarks/out/h200_backward.json is a symbolic link (to "
        "../results/h200_backward.json): a benchmark never writes through a link (it could "
        "replace what the link points to, e.g. a recorded result): remove the link"]
    assert recorded.read_bytes() == (RECORDED / "h200_backward.json").read_bytes()


@pytest.mark.parametrize("tag", ["x/../../results/cpu_forward_2core", "..", "", "a\\b",
                                 "a\0b", "../results"])
def test_cpu_forward_tags_are_names_not_paths(tag, checkout, monkeypatch):
    (checkout / "out" / "cpu_forward_x").mkdir(parents=True)      # the issue's repro
    with pytest.raises(SystemExit, match="--tag .*expected a plain file name"):
        _main("cpu_forward", ["--n", "64", "--repeats", "1", "--tag", tag], monkeypatch)
    assert sorted(p.name for p in (checkout / "out").iterdir()) == ["cpu_forward_x"]


def test_ncu_target_manifest_is_never_a_link_or_dotdot(checkout, monkeypatch):
    link = checkout / "manifest.json"
    link.symlink_to(Path("results") / "h200_forward.json")
    for manifest, match in ((link, "--manifest .* is a symbolic link"),
                            (checkout / "out" / "..", "--manifest .* ends in a file name")):
        with pytest.raises(SystemExit, match=match):
            _main("ncu_target", ["--configs", "cuda-dense-N1024", "--manifest",
                                 str(manifest)], monkeypatch)


def test_tune_sweep_and_ncu_traffic_write_through_the_one_writer(checkout):
    """Their runs need a GPU and ncu: their writing steps, called directly."""
    sweep = results.load_sweep(RECORDED / "h200_tuning_sweep.json")
    traffic = results.load_traffic(RECORDED / "h200_ncu_traffic.json")
    tune, ncu = _load("tune_sweep"), _load("ncu_traffic")
    out = checkout / "out"
    out.mkdir()
    tune.save(out, sweep)
    ncu.write_outputs(out, {"all": "csv\n"}, traffic)
    assert sorted(p.name for p in out.iterdir()) == [
        "h200_ncu_traffic.csv", "h200_ncu_traffic.json", "h200_tuning_sweep.json",
        "ncu_raw_flush.csv"]
    for p in out.iterdir():
        p.unlink()
        p.symlink_to(Path("..") / "results" / p.name)
    with pytest.raises(SystemExit, match="h200_tuning_sweep.json is a symbolic link"):
        tune.save(out, sweep)
    with pytest.raises(SystemExit, match="ncu_raw_flush.csv is a symbolic link"):
        ncu.write_outputs(out, {"all": "csv\n"}, traffic)
    shutil.rmtree(out)
    out.symlink_to("results", target_is_directory=True)
    with pytest.raises(SystemExit, match="inside benchmarks/results"):
        tune.save(out, sweep)


def test_no_script_writes_a_file_but_through_the_one_writer():
    """Path.write_text/write_bytes, savefig and open(..., 'w') follow a planted link:
    every benchmark writes through flashcourse.results.write_output and friends."""
    import re
    direct = re.compile(r"\.write_text\(|\.write_bytes\(|savefig\(|write_atomic\(|"
                        r"open\([^)]*['\"][wax+]|\.open\(|os\.open\(")
    for path in sorted(BENCH.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not direct.search(line), f"{path.name}:{number}: {line.strip()}"


# ------------------------------------------------------------ the no-GPU check (item 3)
@pytest.mark.slow
def test_gpu_forward_check_runs_on_the_simulator(tmp_path, capsys):
    """`python benchmarks/gpu_forward.py --check --simulator-smoke`, the documented no-GPU
    check: every fp32 kernel the simulator can run is checked (all of them; the 16-bit
    Hopper kernel has gpu_hopper.py); one it could not run would be skipped, said in a line."""
    assert _load("gpu_forward").main(["--check", "--simulator-smoke", "--out",
                                      str(tmp_path)]) == 0
    said = capsys.readouterr().out
    assert "skipped" not in said
    doc = results.load(tmp_path / "gpu_forward.json", "gpu_forward")
    from flashcourse.cuda.registry import FORWARD
    checked = {r["kernel"] for r in doc["check"]["rows"] if r.get("ok")}
    assert checked == {name for name, k in FORWARD.items() if k.simulator} - {"hopper"}
    assert doc["check"]["passed"] == doc["check"]["runs"] > 0


# ------------------------------------------- loaders of recorded files: one line (item 7)
@pytest.fixture
def odd_files(tmp_path):
    """{what: path} of files no loader may hang on or accept, each named like a
    backward results file: a FIFO, a folder, binary bytes, a NaN and an Infinity
    literal, a broken link, a link loop."""
    files = {what: tmp_path / f"{what}_backward.json" for what in
             ("fifo", "folder", "binary", "nan", "infinity", "broken", "loop")}
    os.mkfifo(files["fifo"])
    files["folder"].mkdir()
    files["binary"].write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    files["nan"].write_text('{"env": {"gpu": null}, "checks": {"worst": NaN}}')
    files["infinity"].write_text('{"env": {"gpu": null}, "x": -Infinity}')
    files["broken"].symlink_to(tmp_path / "nowhere.json")
    files["loop"].symlink_to(files["loop"])
    return files


#: what each odd file's message says
ODD = {"fifo": "not a regular file", "folder": "is a folder", "binary": "not UTF-8",
       "nan": "NaN is not a JSON value", "infinity": "-Infinity is not a JSON value",
       "broken": "a broken symbolic link", "loop": "cannot read it"}


@pytest.mark.parametrize("what", sorted(ODD))
def test_recorded_results_loaders_refuse_odd_files_in_one_line(what, odd_files):
    path = odd_files[what]
    loaders = [results.load, results.load_backward, results.load_json]
    if what not in ("nan", "infinity"):         # text readers: JSON literals are text
        from flashcourse.plots.tensor_cores import ncu_summary
        loaders += [results.read_text, ncu_summary]
    for loader in loaders:
        with pytest.raises(results.ResultsError) as err:
            loader(path)
        assert str(path) in str(err.value) and ODD[what] in str(err.value), err.value
        assert "\n" not in str(err.value)
    assert results.load(path.parent / "missing_backward.json") is None


def test_a_json_document_nested_too_deeply_is_one_line(tmp_path):
    path = tmp_path / "deep_backward.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(results.ResultsError, match="nested too deeply"):
        results.load(path)


@pytest.mark.parametrize("what", ["missing", "wrong kind", "no rows", *sorted(ODD)])
def test_gpu_backward_plot_of_a_bad_file_is_one_line(what, odd_files, tmp_path):
    path = {"missing": tmp_path / "nope.json", "wrong kind": RECORDED / "h200_forward.json",
            "no rows": tmp_path / "checks_backward.json"}.get(what) or odd_files[what]
    if what == "no rows":
        path.write_text(json.dumps({"env": {"gpu": None}}))
    with pytest.raises(SystemExit) as stop:
        _load("gpu_backward").main(["--plot", str(path), "--out", str(tmp_path / "out")])
    said = str(stop.value)
    assert said.startswith("benchmarks/gpu_backward.py: --plot") and str(path) in said, said
    assert "\n" not in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("what", ["missing", "no AB lines", "cut line", "not times",
                                  "fifo", "folder", "binary"])
def test_kernel_ab_table_of_a_bad_file_is_one_line(what, odd_files, tmp_path):
    path = {"missing": tmp_path / "nope.json"}.get(what) or odd_files.get(what) or \
        tmp_path / "ab.txt"
    text = {"no AB lines": "hello\n", "cut line": 'AB old {"fwd": 1.5\n',
            "not times": 'AB old ["fwd"]\n'}
    if what in text:
        path.write_text(text[what])
    with pytest.raises(SystemExit) as stop:
        _load("kernel_ab").main(["--table", str(path)])
    said = str(stop.value)
    assert said.startswith("benchmarks/kernel_ab.py: --table") and str(path) in said, said
    assert "\n" not in said


def test_kernel_ab_table_prints_the_runs_side_by_side(tmp_path, capsys):
    path = tmp_path / "ab.txt"
    path.write_text('AB old {"fwd": 1.5, "bwd": 2}\nnoise\nAB new {"fwd": 1.25}\n')
    _load("kernel_ab").main(["--table", str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["fwd", "1.500", "1.250"]
    assert lines[2].split() == ["bwd", "2.000", "nan"]


def test_kernel_ab_only_runs_the_named_variants(capsys):
    """--only splits one A/B into smaller calls (a whole run compiles for longer than a
    device command's time); the hashes of what it runs are those of a whole run."""
    mod = _load("kernel_ab")
    mod.main(["--bits", "--simulator-smoke", "--only", "decode", "--label", "part"])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    kind, label, doc = line.split(" ", 2)
    got = json.loads(doc)
    assert kind == "BITS" and label == "part" and got
    assert all(name.startswith("decode") for name in got)
    mod.ONLY = ()
    whole = mod._bits_fp16(True)
    assert set(whole) > set(got) and all(whole[name] == value for name, value in got.items())
