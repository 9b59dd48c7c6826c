"""Recorded results: where they live, their JSON Schemas, loading them, and writing new ones.

`benchmarks/results/` holds measurements made on a GPU (an H200) that the notebooks
plot for learners without one. Each kind of results file has one JSON Schema in
`flashcourse/schemas/<kind>.json` (`RESULT_KINDS` maps file names to kinds), checked
with the `jsonschema` package. Every recorded file is read through `read_file` (text:
`read_text`, JSON: `load_json`, validated: `load`), which checks it is a regular file
before opening it (a FIFO never blocks). A file that is not a regular file, not UTF-8,
not JSON (NaN and Infinity included) or does not match its schema raises `ResultsError`
naming the file and what is wrong; "no record" (no file, another GPU, another head
dimension) is None.

The benchmark scripts share the rules for writing (`add_output_arguments`,
`check_outputs`, `require_gpu`, `output_dir`, `write_output`, `finish`; the rules are
listed above `check_outputs`): without a GPU they stop with an error unless asked for a
`--simulator-smoke` run; they write to the untracked `benchmarks/out/` unless given
`--out`; no output option may name a path inside `benchmarks/results/` without
`--record`; every file is written by one writer (`write_output` and its siblings
`append_output`, `save_figure`, `write_json`), which takes a folder and a file name
(names, tags included, are not paths), resolves the real path and refuses a folder
inside `benchmarks/results/` or a link planted at the file; and `--record` (on a GPU;
for the CPU benchmark, its full default run) replaces recorded files only once the run
has succeeded.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from functools import lru_cache
from pathlib import Path

from ._checks import check_block

ROOT = Path(__file__).resolve().parents[1]
#: The recorded results of the repository (what --record writes to).
RECORDED_DIR = ROOT / "benchmarks" / "results"
#: Where recorded results are read from; FLASHCOURSE_RESULTS overrides it (tests, other GPUs).
RESULTS_DIR = Path(os.environ.get("FLASHCOURSE_RESULTS", RECORDED_DIR))
#: Where benchmarks write by default (git-ignored).
OUT_DIR = ROOT / "benchmarks" / "out"
#: The H200's recorded runs that the notebooks read (files in RESULTS_DIR).
SWEEP_FILE, TRAFFIC_FILE, TENSOR_CORE_FILE, HOST_PATH_FILE, TC_BACKWARD_FILE, BARS_FILE = (
    RESULTS_DIR / name for name in (
        "h200_tuning_sweep.json", "h200_ncu_traffic.json", "h200_tensor_core.json",
        "h200_host_path.json", "h200_tc_backward.json", "h200_bars.json"))
#: the bars run whose backward rows notebook 10 shows: BARS_FILE itself since its run of
#: 2026-12-03 19:40 UTC (all parts; dK, dV written in 16 bits, dQ by 8-byte pair adds); a
#: backward-only run newer than BARS_FILE would be named here
BARS_BACKWARD_FILE = BARS_FILE
#: Nsight Compute's sections for the fp16 d = 128 backward kernel (text, ncu's own layout)
TC_BACKWARD_NCU_FILE = RESULTS_DIR / "h200_tc_backward_ncu_log.txt"
#: the same sections for the same kernel after dK/dV in 16 bits and dQ by pair reductions
TC_BACKWARD_NCU_AFTER_FILE = RESULTS_DIR / "h200_tc_backward_ncu_v2_log.txt"
#: A/B runs of single steps, and the Hopper forward's runs (files in RESULTS_DIR).
(TENSOR_CORE_AB_FILE, TF32_VARIANTS_FILE, TF32_SPLIT_FILE, TF32_TILES_FILE, TF32_PLANES_FILE,
 LAZY_AB_FILE, HOPPER_FILE, HOPPER_V3_FILE, HOPPER_V45_FILE) = (
    RESULTS_DIR / name for name in (
        "h200_tensor_core_v2_ab.json", "h200_tensor_core_v2_tf32_variants.json",
        "h200_bars_tf32_split_ab.json", "h200_bars_tf32_tiles.json",
        "h200_bars_tf32_planes.json", "h200_bars_lazy_ab.json", "h200_hopper.json",
        "h200_hopper_v3_variants.json", "h200_hopper_v45_variants.json"))
#: Nsight Compute report of versions 2 and 3 (N = 4096), ncu's text output
HOPPER_NCU_FILE = RESULTS_DIR / "h200_hopper_ncu_log.txt"
SWEEP_SCHEMA = "flashcourse.tuning.sweep/1"
TRAFFIC_SCHEMA = "flashcourse.tuning.ncu_traffic/1"
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

#: Results file names (glob patterns) and the kind (schema) of each.
RESULT_KINDS = {
    "*tuning_sweep.json": "sweep",
    "*ncu_traffic.json": "ncu_traffic",
    "*_forward.json": "gpu_forward",
    "*_backward*.json": "gpu_backward",
    "cpu_forward_*.json": "cpu_forward",
    "*verify_defaults.json": "verify_defaults",
    "*flash_unroll.json": "flash_unroll",
    "*_decode*.json": "gpu_decode",
    "*_tensor_core.json": "tensor_core",
    "*_host_path.json": "host_path",
    "*_tc_backward.json": "tc_backward",
    "*_tc_backward_v2_*.json": "tc_backward",     # one step's own runs (checks, variants)
    "*_tensor_core_v2_*.json": "tensor_core",
    "*_bars.json": "bars",
    "*_bars_*.json": "bars",                   # one A/B run of the bars script
    "*_hopper.json": "hopper",
    "*_hopper_*.json": "hopper",               # one version's own runs (variants)
    "*gpu_labs.json": "gpu_labs",
    "*gpu_train.json": "gpu_train",
    "*gpu_attention_variants.json": "attention_variants",
    "*gpu_fp8.json": "fp8",
    "*fp8_forward*.json": "fp8_forward",
    "*gpu_paged.json": "gpu_paged",
}


class ResultsError(ValueError):
    """A results file that cannot be read or does not match its schema."""


def kind_of(path) -> str:
    """The results kind of a file name (see RESULT_KINDS); ResultsError for an unknown one."""
    name = Path(path).name
    for pattern in sorted(RESULT_KINDS, key=len, reverse=True):   # most specific first
        if fnmatch.fnmatch(name, pattern):
            return RESULT_KINDS[pattern]
    raise ResultsError(f"{path}: no results kind is known for this file name "
                       f"(patterns: {sorted(RESULT_KINDS)})")


@lru_cache(maxsize=None)
def schema(kind: str) -> dict:
    """The JSON Schema of a results kind (flashcourse/schemas/<kind>.json)."""
    path = SCHEMA_DIR / f"{kind}.json"
    if not path.exists():
        raise ValueError(f"kind must be one of {sorted(set(RESULT_KINDS.values()))}, "
                         f"got {kind!r}")
    return json.loads(path.read_text())


def schema_errors(doc, kind: str) -> list:
    """Where `doc` breaks flashcourse/schemas/<kind>.json: jsonschema's ValidationErrors in
    document order (none: it matches). Also checks the quiz files (kind "quiz")."""
    import jsonschema
    validator = jsonschema.Draft202012Validator(schema(kind))
    return sorted(validator.iter_errors(doc),   # keys before indices at one depth, each in order
                  key=lambda e: [(isinstance(p, int), p) for p in e.absolute_path])


def validate(doc, kind: str, source: str = "results document") -> dict:
    """Return `doc` if it matches the schema of `kind`; else ResultsError naming `source`,
    where in the document the first problem is, and what it is."""
    errors = schema_errors(doc, kind)
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise ResultsError(f"{source} does not match the {kind!r} schema "
                           f"(flashcourse/schemas/{kind}.json): at {where}: "
                           f"{first.message}{more}")
    return doc


def read_regular(path, limit: int | None = None) -> tuple[bytes, int]:
    """(bytes, st_mode) of `path`, read only when it is a regular file: checked with
    os.stat before opening and again on the open descriptor (opened with O_NONBLOCK), so a
    FIFO never blocks; b"" for anything else. limit: read at most limit + 1 bytes (the
    caller can tell a file over the limit). OSError (FileNotFoundError included) as
    os.stat and os.open raise it."""
    mode = os.stat(path).st_mode
    data = b""
    if stat.S_ISREG(mode):
        # O_NONBLOCK: should the path become a FIFO after the stat, open does not wait
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if stat.S_ISREG(mode):
                data = f.read() if limit is None else f.read(limit + 1)
    return data, mode


def refuse_irregular(mode, error, folder: str, special: str) -> None:
    """After `read_regular`: raise `error(folder)` when `mode` is a folder's, `error(special)`
    when it is any other but a regular file's (a FIFO, a socket, a device)."""
    if stat.S_ISDIR(mode):
        raise error(folder)
    if not stat.S_ISREG(mode):
        raise error(special)


def read_file(path) -> bytes | None:
    """The bytes of the recorded file at `path`, or None when there is none (a broken
    symbolic link is an error, not "none"). ResultsError naming the file when it is not a
    regular file: a folder, a FIFO, a socket or a device (checked with os.stat before
    opening and again on the open descriptor, so a FIFO never blocks), or unreadable."""
    path = Path(path)
    try:
        data, mode = read_regular(path)
    except FileNotFoundError:
        if not path.is_symlink():
            return None
        raise ResultsError(f"{path}: a broken symbolic link (to {os.readlink(path)}), not "
                           "a results file") from None
    except OSError as exc:                  # a link loop, permission denied, ...
        raise ResultsError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    refuse_irregular(mode, ResultsError, f"{path}: is a folder, not a results file",
                     f"{path}: not a regular file (a FIFO, socket or device), not a "
                     "results file")
    return data


def read_text(path) -> str | None:
    """The text of the recorded file at `path` (UTF-8; a text log, a CSV), or None when
    there is none. ResultsError naming the file as `read_file`, or when it is not UTF-8
    text (a binary file)."""
    data = read_file(path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text (a binary file?): byte {exc.start} "
                           f"is {data[exc.start]:#04x}") from None


def _not_json(name):
    raise ValueError(f"{name} is not a JSON value (Python's json module writes it for a "
                     "float that is not finite; a results file must not hold one)")


def load_json(path):
    """The JSON document at `path` (not validated), or None when there is no file.
    ResultsError naming the file as `read_text`, or when it is not JSON: NaN, Infinity
    and -Infinity (which Python's json module accepts) are refused."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc})") from None
    except ValueError as exc:               # _not_json: a NaN or Infinity literal
        raise ResultsError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:                  # arrays nested thousands deep
        raise ResultsError(f"{path}: not a results file: nested too deeply") from None


def load(path, kind: str | None = None) -> dict | None:
    """The validated document at `path`, or None when the file does not exist.
    ResultsError naming the file when it is not a regular file, not UTF-8, not JSON
    (NaN included) or does not match its schema (`load_json`)."""
    doc = load_json(path)
    if doc is None:
        return None
    return validate(doc, kind_of(path) if kind is None else kind, str(path))


def _recorded_loader(file_name: str, kind: str, doc: str):
    """A loader `load_<name>(path=None)`: the document at `path` (by default the module's
    constant `file_name`, looked up at each call) validated as `kind` (`load`), or None when
    there is no file; `doc`, its docstring."""
    def loader(path=None) -> dict | None:
        return load(globals()[file_name] if path is None else path, kind)
    loader.__doc__ = doc
    return loader


load_sweep = _recorded_loader(
    "SWEEP_FILE", "sweep",
    "The recorded tuning sweep (validated), or None when none exists yet.")
load_tensor_core = _recorded_loader(
    "TENSOR_CORE_FILE", "tensor_core",
    "The recorded tensor-core results (benchmarks/gpu_tensor_core.py), or None.")
load_host_path = _recorded_loader(
    "HOST_PATH_FILE", "host_path",
    "The recorded host/wall/GPU times of the public calls (benchmarks/gpu_host_path.py).")
load_bars = _recorded_loader(
    "BARS_FILE", "bars",
    "The issues' bars measured through the public calls (benchmarks/gpu_bars.py), or None.")
load_hopper = _recorded_loader(
    "HOPPER_FILE", "hopper",
    "The Hopper (wgmma) forward's recorded run (benchmarks/gpu_hopper.py), or None; "
    "path=HOPPER_V3_FILE: version 3's own run (beside version 2); HOPPER_V45_FILE: versions "
    "3-5 beside version 2.")
load_tf32_variants = _recorded_loader(
    "TF32_VARIANTS_FILE", "tensor_core",
    "3xTF32 version 1 against version 2's tile variants (raw, N = 4096), and their checks.")
load_tensor_core_ab = _recorded_loader(
    "TENSOR_CORE_AB_FILE", "tensor_core",
    "The forward version 2's instruction-count step, before/after in one process.")
load_tc_backward = _recorded_loader(
    "TC_BACKWARD_FILE", "tc_backward",
    "The recorded tensor-core backward run (benchmarks/gpu_tc_backward.py), or None.")
load_traffic = _recorded_loader(
    "TRAFFIC_FILE", "ncu_traffic",
    "The recorded Nsight Compute traffic study (validated), or None when none exists yet.")


def tuned_config(head_dim: int, path=None, gpu_name: str | None = None,
                 doc=None) -> dict | None:
    """The tuned default {block_q, block_k, threads, tm, unroll} for `head_dim` from the
    recorded sweep (or the already loaded `doc`); None when there is no record (no file,
    another head dimension, or another GPU when `gpu_name` is given). A broken file
    raises ResultsError."""
    d = check_block(head_dim, "head_dim")
    doc = load_sweep(path) if doc is None else doc
    if doc is None:
        return None
    if gpu_name is not None and gpu_name != doc["environment"].get("gpu"):
        return None
    best = doc["best"].get(str(d))
    if best is None:
        return None
    return {k: best.get(k) for k in ("block_q", "block_k", "threads", "tm", "unroll")}


def recorded_limits():
    """The H200 limits stored with the recorded sweep, else the H200 preset."""
    from .limits import H200_LIMITS, DeviceLimits
    doc = load_sweep()
    if doc is not None and "limits" in doc:
        return DeviceLimits.from_dict(doc["limits"])
    return H200_LIMITS


def _match(r, head_dim, block_q, block_k, threads, tm):
    return (r["head_dim"], r["block_q"], r["block_k"], r["threads"], r.get("tm")) == \
        (head_dim, block_q, block_k, threads, tm)


def recorded_row(head_dim, seq_len, block_q, block_k, threads, tm, doc=None):
    """The recorded sweep row for this configuration at `seq_len` (the fastest `unroll`
    when several were timed), or None."""
    doc = load_sweep() if doc is None else doc
    if doc is None:
        return None
    hits = [r for r in doc["rows"] if r["seq_len"] == seq_len
            and _match(r, head_dim, block_q, block_k, threads, tm)]
    return max(hits, key=lambda r: r.get("tflops") or 0.0) if hits else None


#: The recorded backward benchmark of the H200 (its "resources" hold registers per thread).
BACKWARD_FILE = RESULTS_DIR / "h200_backward.json"


load_backward = _recorded_loader(
    "BACKWARD_FILE", "gpu_backward",
    "The recorded backward benchmark (validated), or None when none exists.")


def recorded_backward_regs(head_dim, tiles, kernel, doc=None):
    """Registers per thread recorded on the H200 for a fast backward kernel ("kv_atomic"
    or "q_pass") with tiles (block_q, block_k, ty, tx) at `head_dim`, or None."""
    doc = load_backward() if doc is None else doc
    for r in (doc or {}).get("resources", []):
        if (r.get("d"), tuple(r.get("config") or ()), r.get("kernel")) == \
                (head_dim, tuple(tiles), kernel) and r.get("regs"):
            return r["regs"]
    return None


def recorded_regs(head_dim, block_q, block_k, threads, tm, doc=None):
    """Registers per thread recorded by the sweep for this configuration, or None."""
    doc = load_sweep() if doc is None else doc
    if doc is None:
        return None
    for r in doc["rows"]:
        if _match(r, head_dim, block_q, block_k, threads, tm) and r.get("regs_per_thread"):
            return r["regs_per_thread"]
    return None


# ---------------------------------------------------------------------------
# Writing: the rules every benchmark script follows
# ---------------------------------------------------------------------------
#
# 1. Every output option (--out, --manifest, ...) naming a path inside benchmarks/results/
#    (a file or a folder, after following symlinks and '..') is refused unless --record
#    is given; a script without --record never writes there.
# 2. --record of a GPU script needs a real GPU (the CUDA simulator is not one, nor is
#    --simulator-smoke); a CPU script's --record needs its full default run (its own
#    `conflicts`). --record also needs the package of the script's own checkout, so
#    that it writes that checkout's benchmarks/results/ (a script run as
#    `python benchmarks/x.py` imports the *installed* flashcourse).
# 3. Nothing is written into benchmarks/results/ while a run goes: a --record run
#    writes into a fresh staging folder under benchmarks/out/, and `finish` moves its
#    files into benchmarks/results/ (each replaced atomically) only when the run has
#    succeeded. A crash or a failed check leaves the recorded files as they were.
# 4. One writer: every file a script writes goes through `write_output` (or
#    `append_output` for a log, `save_figure` for a picture, `write_json`), given the
#    output folder and a file *name*. It resolves the real path and refuses (OutputError,
#    one line) a name that is a path (empty, '/', '\', '..', NUL, a control character),
#    a folder that resolves inside benchmarks/results/ (benchmarks/out itself a link
#    there), and a symbolic link or anything but a regular file at the file itself (a
#    planted link could replace a recorded file); it writes through a temporary file and
#    a rename, which replaces a directory entry and never follows a link. Options that
#    become part of file names (a --tag) are names too. Only `finish` (rule 3) writes into
#    benchmarks/results/.
# `check_outputs` (rules 1, 2 and the names of rule 4) runs right after a script parses
# its arguments, before anything runs; `output_dir` and `finish` carry out rule 3.

class MissingGPUError(SystemExit):
    """A GPU benchmark started where there is no GPU (exits with status 1)."""


class OutputError(SystemExit):
    """An output refused by the rules above: the message names the option or file and
    why (a script stops with that one line, status 1)."""


def benchmark_parser(doc: str, *flags: str):
    """The argument parser of a benchmark script: the first line of its docstring `doc`
    as the description, and an on/off option --NAME for each of `flags`."""
    import argparse
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for flag in flags:
        parser.add_argument(f"--{flag}", action="store_true")
    return parser


def add_output_arguments(parser, gpu: bool = True) -> None:
    """--out, --record and (for a GPU script) --simulator-smoke, the same for every
    benchmark script."""
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the results (default benchmarks/out/, untracked; "
                             "never inside benchmarks/results/)")
    parser.add_argument("--record", action="store_true",
                        help="replace the recorded files in benchmarks/results/ once the "
                             "run has succeeded" + (" (on a GPU only)" if gpu else
                                                    " (the full default run only)"))
    if not gpu:
        return
    parser.add_argument("--simulator-smoke", action="store_true",
                        help="run tiny sizes on Numba's CUDA simulator (no GPU needed); "
                             "the numbers mean nothing")


def has_gpu() -> bool:
    """True when CUDA kernels run on a real GPU: the driver reports one and Numba's CUDA
    target is not the simulator."""
    from .gpu import driver_has_gpu, using_simulator
    return driver_has_gpu() and not using_simulator()


def require_gpu(script: str, simulator_smoke: bool = False, smoke_option: bool = True) -> None:
    """Stop with a message naming the missing GPU unless a CUDA GPU is here, or the
    caller asked for a simulator smoke run. `smoke_option`: the script has
    --simulator-smoke (the message suggests it)."""
    if simulator_smoke or has_gpu():
        return
    hint = (", or pass --simulator-smoke to check that it runs (tiny sizes, no meaningful "
            "numbers)") if smoke_option else ""
    raise MissingGPUError(
        f"{script}: no NVIDIA CUDA GPU found (the driver reports none, so Numba runs "
        f"its CUDA simulator): this benchmark measures a GPU. Run it on a machine with "
        f"one{hint}.")


def real_path(path) -> Path:
    """`path` with every symbolic link and '..' resolved (it need not exist); OutputError
    naming it for a link loop."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # a link loop: RuntimeError up to Python 3.12
        raise OutputError(f"{path}: cannot resolve it ({exc})") from None


def inside_recorded(path, recorded_dirs=None) -> bool:
    """True when `path` (a file or folder, existing or not) resolves to benchmarks/results/
    or anything inside it, symlinks and '..' followed. `recorded_dirs`: the folders to
    protect (default: RECORDED_DIR); the `benchmarks/results` folder of any checkout (a
    folder `results` in a folder `benchmarks`) is protected too."""
    target = real_path(path)
    for folder in recorded_dirs or (RECORDED_DIR,):
        folder = real_path(folder)
        if target == folder or folder in target.parents:
            return True
    return any(p.name == "results" and p.parent.name == "benchmarks"
               for p in (target, *target.parents))


def name_problem(name, what: str = "file name") -> str | None:
    """What is wrong with `name` as a file name (or a part of one, such as a --tag), or
    None: names are not paths. `what`: how the message names it (an option)."""
    if not isinstance(name, str) or not name:
        why = "it is empty" if isinstance(name, str) else f"a {type(name).__name__}, not a str"
    elif "/" in name or "\\" in name:
        why = "it holds a '/' or '\\'"
    elif ".." in name or name == ".":
        why = "it holds '..'" if ".." in name else "it is '.'"
    elif any(ord(c) < 32 for c in name):
        why = "it holds a NUL or another control character"
    else:
        return None
    return f"{what} {name!r}: expected a plain file name, not a path: {why}"


def check_name(name, what: str = "file name") -> str:
    """`name` when it is a plain file name (`name_problem`); else OutputError naming `what`."""
    problem = name_problem(name, what)
    if problem:
        raise OutputError(problem)
    return name


def output_problem(args, gpu: bool = True, outputs: dict | None = None,
                   conflicts: dict | None = None, script_file=None,
                   names: dict | None = None) -> str | None:
    """What is wrong with a run's output options (rules 1, 2 and 4 above), or None.

    args: the parsed arguments (its `out`, `record`, `simulator_smoke` when the script
    has them); gpu: a GPU script; outputs: {option: path} of other files the run writes
    (e.g. {"--manifest": args.manifest}: never a symbolic link, never named '..');
    conflicts: {option: reason} of options that are set and make the run other than the
    full one that --record needs; script_file: the script's own path (its checkout's
    benchmarks/results/ is protected too, and --record needs the package of that
    checkout); names: {option: value} of options that become part of file names (a
    --tag: a plain name, `name_problem`; None: not given)."""
    has_record = hasattr(args, "record")
    record = bool(getattr(args, "record", False))
    protected = [RECORDED_DIR]
    if script_file is not None:
        protected.append(Path(script_file).resolve().parent / "results")
    for option, value in (names or {}).items():
        if value is not None and name_problem(value, option):
            return name_problem(value, option)
    for option, path in (outputs or {}).items():
        if path is not None and Path(path).is_symlink():
            return (f"{option} {path} is a symbolic link (to {os.readlink(path)}): a "
                    f"benchmark never writes through a link; remove it or choose another "
                    f"{option}")
        if path is not None and Path(path).name in ("", ".", ".."):
            return f"{option} {path}: expected a file path that ends in a file name"
    if hasattr(args, "out") and args.out is None and inside_recorded(OUT_DIR, protected):
        return (f"the default output folder {OUT_DIR} resolves to {real_path(OUT_DIR)}, "
                "inside benchmarks/results/ (is it a symbolic link?): remove the link, or "
                "choose another folder with --out")
    paths = {"--out": getattr(args, "out", None), **(outputs or {})}
    if record:
        if gpu and getattr(args, "simulator_smoke", False):
            return ("--record with --simulator-smoke: simulator numbers are never recorded; "
                    "leave out --record")
        if gpu and not has_gpu():
            return ("--record needs a GPU run: no NVIDIA CUDA GPU found (the driver reports "
                    "none, or Numba runs its CUDA simulator), so nothing would be worth "
                    "recording; leave out --record")
        if conflicts:
            listed = ", ".join(f"{option} ({reason})" for option, reason in conflicts.items())
            return f"--record needs the full default run: leave out {listed}"
        out = paths.pop("--out")
        if out is not None and Path(out).resolve() != RECORDED_DIR.resolve():
            return f"--record writes to benchmarks/results/; leave out --out {out}"
        if script_file is not None and protected[1].resolve() != RECORDED_DIR.resolve():
            return (f"--record: this script's checkout is {protected[1].parents[1]}, but "
                    f"flashcourse was imported from {ROOT}, so --record would write "
                    f"{RECORDED_DIR}; run it with PYTHONPATH={protected[1].parents[1]}")
    for option, path in paths.items():
        if path is None or not inside_recorded(path, protected):
            continue
        if record:                  # only the script's own recorded files, via output_dir
            return (f"{option} {path}: inside benchmarks/results/; a --record run writes "
                    f"there through its own file names only: choose another {option}")
        how = ("pass --record to replace them (on a GPU), or " if gpu else
               "pass --record to replace them (with the full run), or ") if has_record else \
            "this script never writes there: "
        return (f"{option} {path} is inside benchmarks/results/, which holds the recorded "
                f"results: {how}choose another {option}")
    return None


def check_outputs(args, script_file, gpu: bool = True, outputs: dict | None = None,
                  conflicts: dict | None = None, names: dict | None = None) -> None:
    """The one check of a benchmark's output options (rules 1, 2 and 4 above): every
    script calls it with its own `__file__` right after parsing its arguments, before
    anything runs or is written. Stops (OutputError, status 1) with a message naming the
    option. The arguments are those of `output_problem`."""
    problem = output_problem(args, gpu, outputs, conflicts, script_file, names)
    if problem:
        raise OutputError(f"benchmarks/{Path(script_file).name}: {problem}")


def parse_gpu_arguments(parser, argv, script_file):
    """The start of a GPU benchmark's `main(argv)`, the same in each script that needs
    nothing else between its steps: --out, --record and --simulator-smoke added to
    `parser` (`add_output_arguments`), `argv` parsed, the outputs checked before anything
    runs (`check_outputs` with the script's `__file__`) and a GPU required unless
    --simulator-smoke (`require_gpu`, naming the script benchmarks/<file>). The parsed
    arguments."""
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    check_outputs(args, script_file)
    require_gpu(f"benchmarks/{Path(script_file).name}", args.simulator_smoke)
    return args


def output_dir(args) -> Path:
    """The folder a benchmark writes into as it runs, from its --out/--record.

    Default: benchmarks/out/ (untracked), or --out. --record: a fresh staging folder
    benchmarks/out/record-*/, whose files `finish` moves into benchmarks/results/ when
    the run has succeeded. Refuses what `check_outputs` refuses (a script calls that
    first; this is the second line of defence)."""
    problem = output_problem(args, gpu=hasattr(args, "simulator_smoke"))
    if problem:
        raise OutputError(problem)
    out = OUT_DIR if args.out is None or args.record else Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if args.record:
            import tempfile
            return Path(tempfile.mkdtemp(prefix="record-", dir=OUT_DIR))
    except (FileExistsError, NotADirectoryError) as exc:    # a file, or a broken link
        raise OutputError(f"{'--out ' if args.out is not None else ''}{out}: cannot be "
                          f"the output folder ({exc.strerror}): it is a file or a broken "
                          "link") from None
    return out


def write_atomic(path, data) -> Path:
    """Write `data` (str or bytes) to `path` through a temporary file in the same folder
    and a rename, so that a reader (or a crash) never finds it half written. The rename
    replaces whatever entry `path` is (a link too) and never writes through it. No checks:
    a script writes through `write_output`; only `finish` calls this directly."""
    import tempfile
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:           # anything, even KeyboardInterrupt: no stray temp file
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def output_file(out_dir, name, option: str | None = None) -> Path:
    """The real path at which the file `name` is written in the folder `out_dir` (rule 4
    above); OutputError naming `option` (or the file) and why, when `name` is not a plain
    file name, `out_dir` resolves inside benchmarks/results/ or is not a folder, or the
    file is a symbolic link or not a regular file."""
    shown = Path(out_dir) / name if isinstance(name, str) else Path(out_dir)
    where = f"{option} {shown}" if option else str(shown)
    check_name(name, f"{option}: file name" if option else "file name")
    folder = real_path(out_dir)
    if inside_recorded(folder):
        raise OutputError(f"{where}: its folder resolves to {folder}, inside "
                          "benchmarks/results/ (a symbolic link?); only --record's last "
                          "step writes there: choose another folder")
    if not folder.is_dir():
        raise OutputError(f"{where}: the folder {folder} does not exist or is not a folder")
    target = folder / name
    if target.is_symlink():
        raise OutputError(f"{where} is a symbolic link (to {os.readlink(target)}): a "
                          "benchmark never writes through a link (it could replace what the "
                          "link points to, e.g. a recorded result): remove the link")
    if target.exists() and not target.is_file():
        raise OutputError(f"{where} exists and is not a regular file (a folder, a FIFO, ...): "
                          "remove it or choose another folder")
    return target


def write_output(out_dir, name, data, option: str | None = None) -> Path:
    """Write `data` (str or bytes) as the file `name` of the folder `out_dir`, checked by
    `output_file` and written by `write_atomic` (never through a link); its real path.
    Every benchmark output goes through here (or `append_output`, `save_figure`,
    `write_json`). `option`: the option that chose the path, for messages."""
    return write_atomic(output_file(out_dir, name, option), data)


def write_json(out_dir, name, doc, kind: str | None = None,
               option: str | None = None) -> Path:
    """`doc` as indented JSON into `out_dir`/`name` (`write_output`), validated first
    against the schema of `kind` when given (`validate`)."""
    if kind is not None:
        validate(doc, kind, name)
    return write_output(out_dir, name, json.dumps(doc, indent=1) + "\n", option)


def append_output(out_dir, name, text: str, option: str | None = None) -> Path:
    """Append `text` to the file `name` of `out_dir` (a log written as a run goes),
    checked by `output_file`; opened with O_NOFOLLOW, so a link planted after the check
    is refused too, never written through."""
    target = output_file(out_dir, name, option)
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_NONBLOCK", 0))   # a FIFO planted since the check: no wait
    try:
        fd = os.open(target, flags, 0o644)
    except OSError as exc:                  # ELOOP (a link) or ENXIO (a FIFO) since the check
        raise OutputError(f"{target}: cannot append to it ({exc.strerror}); a benchmark "
                          "writes only regular files") from None
    with os.fdopen(fd, "ab") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OutputError(f"{target}: not a regular file; a benchmark writes only "
                              "regular files")
        f.write(text.encode())
    return target


def save_figure(out_dir, name, fig, option: str | None = None, **savefig_kw) -> Path:
    """Draw the matplotlib figure `fig` into memory (its format from the suffix of `name`)
    and write it with `write_output`: a benchmark never calls `fig.savefig(path)`."""
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(str(name)).suffix.lstrip(".") or "png", **savefig_kw)
    return write_output(out_dir, name, buf.getvalue(), option)


def finish(args, out: Path, ok: bool = True) -> list:
    """End of a run that wrote into `out` (from `output_dir`). Without --record: nothing
    to do. With --record and `ok`: move every file of the staging folder `out` into
    benchmarks/results/, each replacing the recorded file of that name atomically, and
    remove `out`; not `ok` (a failed check, nothing measured): record nothing and say
    where the run's files are. Returns the recorded paths."""
    if not args.record:
        return []
    out = Path(out)
    if out.resolve().parent != OUT_DIR.resolve() or not out.name.startswith("record-"):
        raise ValueError(f"out must be a staging folder from output_dir, got {out}")
    if not ok:
        print(f"the run did not succeed: nothing recorded, benchmarks/results/ unchanged; "
              f"its files are in {out}", flush=True)
        return []
    import shutil
    recorded = []
    for src in sorted(p for p in out.iterdir() if p.is_file() and not p.is_symlink()):
        recorded.append(write_atomic(RECORDED_DIR / src.name, src.read_bytes()))
        print(f"recorded {recorded[-1]}", flush=True)
    shutil.rmtree(out)
    return recorded
