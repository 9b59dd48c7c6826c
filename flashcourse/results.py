"""Recorded results: where they live, their JSON Schemas, loading them, and writing new ones.

`benchmarks/results/` holds measurements made on a GPU (an H200) that the notebooks
plot for learners without one. Each kind of results file has one JSON Schema in
`flashcourse/schemas/<kind>.json` (`RESULT_KINDS` maps file names to kinds), checked
with the `jsonschema` package. A file that does not parse or does not match its schema
raises `ResultsError` naming the file and what is wrong; "no record" (no file, another
GPU, another head dimension) is None.

The benchmark scripts share the rules for writing (`add_output_arguments`,
`require_gpu`, `output_dir`): without a GPU they stop with an error unless asked for a
`--simulator-smoke` run; they write to the untracked `benchmarks/out/` unless given
`--out`; and they replace a recorded file in `benchmarks/results/` only with `--record`.
"""

from __future__ import annotations

import fnmatch
import json
import os
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
SWEEP_FILE = RESULTS_DIR / "h200_tuning_sweep.json"
TRAFFIC_FILE = RESULTS_DIR / "h200_ncu_traffic.json"
TENSOR_CORE_FILE = RESULTS_DIR / "h200_tensor_core.json"
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


def load(path, kind: str | None = None) -> dict | None:
    """The validated document at `path`, or None when the file does not exist.
    ResultsError when it is not JSON or does not match its schema."""
    path = Path(path)
    if not path.exists():
        return None
    kind = kind_of(path) if kind is None else kind
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc})") from exc
    return validate(doc, kind, str(path))


def load_sweep(path=None) -> dict | None:
    """The recorded tuning sweep (validated), or None when none exists yet."""
    return load(SWEEP_FILE if path is None else path, "sweep")


def load_tensor_core(path=None) -> dict | None:
    """The recorded tensor-core results (benchmarks/gpu_tensor_core.py), or None."""
    return load(TENSOR_CORE_FILE if path is None else path, "tensor_core")


def load_traffic(path=None) -> dict | None:
    """The recorded Nsight Compute traffic study (validated), or None when none exists yet."""
    return load(TRAFFIC_FILE if path is None else path, "ncu_traffic")


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


def load_backward(path=None) -> dict | None:
    """The recorded backward benchmark (validated), or None when none exists."""
    return load(BACKWARD_FILE if path is None else path, "gpu_backward")


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

class MissingGPUError(SystemExit):
    """A GPU benchmark started where there is no GPU (exits with status 2)."""


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
                        help="folder for the results (default benchmarks/out/, untracked)")
    parser.add_argument("--record", action="store_true",
                        help="write into benchmarks/results/, replacing the recorded files")
    if not gpu:
        return
    parser.add_argument("--simulator-smoke", action="store_true",
                        help="run tiny sizes on Numba's CUDA simulator (no GPU needed); "
                             "the numbers mean nothing")


def require_gpu(script: str, simulator_smoke: bool = False) -> None:
    """Stop with a message naming the missing GPU unless a CUDA GPU is here, or the
    caller asked for a simulator smoke run."""
    from .gpu import driver_has_gpu, using_simulator
    if simulator_smoke:
        return
    if using_simulator() or not driver_has_gpu():
        raise MissingGPUError(
            f"{script}: no NVIDIA CUDA GPU found (the driver reports none, so Numba runs "
            "its CUDA simulator): this benchmark measures a GPU. Run it on a machine with "
            "one, or pass --simulator-smoke to check that it runs (tiny sizes, no "
            "meaningful numbers).")


def output_dir(args) -> Path:
    """The folder a benchmark writes to, from its --out/--record/--simulator-smoke.

    Default: benchmarks/out/. --record: benchmarks/results/ (refused in a simulator
    smoke run). A --out inside benchmarks/results/ without --record is refused, so that
    recorded measurements are never overwritten by accident.
    """
    if args.record:
        if getattr(args, "simulator_smoke", False):
            raise SystemExit("--record with --simulator-smoke: simulator numbers are never "
                             "recorded")
        if args.out is not None and Path(args.out).resolve() != RECORDED_DIR.resolve():
            raise SystemExit("--record writes to benchmarks/results/; leave out --out")
        out = RECORDED_DIR
    else:
        out = OUT_DIR if args.out is None else Path(args.out)
        if out.resolve() == RECORDED_DIR.resolve():
            raise SystemExit(f"{out} holds the recorded results: pass --record to replace "
                             "them (on a GPU), or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    return out
