"""Run every CUDA lab's reference solution and every CUDA notebook top to bottom on a GPU.

The simulator accepts kernels the real compiler refuses (an array size computed inside
a kernel, for one), so `make test`, which runs everything on the simulator, cannot be the
only judge of the labs and notebooks that promise live kernels. This script executes
each one on the GPU in a fresh kernel and records, per notebook: whether it ran to the
end, how long it took, what its checkers printed (passed, FAILED, not implemented) and
the first error.

    python benchmarks/gpu_labs.py                   # on a GPU: writes benchmarks/out/
    python benchmarks/gpu_labs.py --record          # on a GPU: replaces the recorded file
    python benchmarks/gpu_labs.py --simulator-smoke # no GPU: one small lab on the simulator
    python benchmarks/gpu_labs.py --only lab05      # names containing lab05

Notebooks run through nbclient (a real Jupyter kernel) where it is installed; where it
is not (a GPU machine with the course's numerical packages only), the code cells run
in one IPython shell in this process, or with plain `exec` if IPython is missing too.
A lab solution passes when it ran to the end, printed "All checks passed" at least once,
and printed no FAILED and no "Not implemented yet" line; a notebook, when it ran to the end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import time
from pathlib import Path

import flashcourse  # noqa: F401  (selects the GPU or the simulator before numba loads)
from flashcourse import env, results

ROOT = Path(__file__).resolve().parents[1]
#: the labs whose kernels run on a GPU, and the notebooks that build or launch kernels
CUDA_LABS = ("lab05_cuda_puzzles", "lab06_cuda_kernel", "lab10_tensor_cores",
             "lab10b_tensor_core_backward")
CUDA_NOTEBOOKS = ("06_numba_cuda_kernel", "07_tile_sizes_and_occupancy", "08_measured_traffic",
                  "09_backward_recompute", "10_tensor_cores", "10b_tensor_core_case_studies",
                  "11_flash_decoding", "11b_paged_kv_cache", "12_hopper_wgmma",
                  "12b_hopper_case_studies", "14_attention_variants")
SMOKE = ("lab05_cuda_puzzles",)
RESULT_FILE = "gpu_labs.json"
LOG_FILE = "gpu_labs_log.txt"     # what each notebook printed
PASS_LINE, FAILED, TODO = "All checks passed", "FAILED", "Not implemented yet"


def targets(only: str | None, smoke: bool) -> list[tuple[str, Path]]:
    """(kind, path) of each notebook to run: 'lab' (a solution) or 'notebook'."""
    labs = SMOKE if smoke else CUDA_LABS
    found = [("lab", ROOT / "labs" / "solutions" / f"{n}.ipynb") for n in labs]
    if not smoke:
        found += [("notebook", ROOT / "notebooks" / f"{n}.ipynb") for n in CUDA_NOTEBOOKS]
    if only:
        found = [(k, p) for k, p in found if only in p.stem]
        if not found:
            raise SystemExit(f"--only {only!r}: no lab or notebook name contains it "
                             f"(names: {', '.join(CUDA_LABS + CUDA_NOTEBOOKS)})")
    return found


def _texts(nb) -> str:
    """Everything the executed notebook printed (streams and text/plain results)."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            elif "data" in o and "text/plain" in o["data"]:
                out.append(o["data"]["text/plain"])
            elif o.get("output_type") == "error":
                out.append(f"{o.get('ename')}: {o.get('evalue')}")
    return "".join(out)


def run_nbclient(path: Path, timeout_s: int) -> tuple[str, str]:
    """(printed text, error or "") of the notebook executed in a fresh Jupyter kernel."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:  # recorded
        return _texts(nb), str(exc).strip().splitlines()[-1][:500]
    return _texts(nb), ""


def run_in_process(path: Path) -> tuple[str, str]:
    """(printed text, error or "") of the code cells run in this process, in order."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    buf = io.StringIO()
    import matplotlib
    matplotlib.use("agg")               # figures are drawn, never shown
    old = os.getcwd()
    os.chdir(path.parent)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                from IPython.core.interactiveshell import InteractiveShell
            except ImportError:         # no IPython on this machine: plain exec
                InteractiveShell = None
            if InteractiveShell is not None:
                shell = InteractiveShell.instance()
                shell.reset(new_session=True)       # each notebook starts empty
                for src in sources:
                    res = shell.run_cell(src, silent=False)
                    if not res.success:
                        err = res.error_in_exec or res.error_before_exec
                        return buf.getvalue(), f"{type(err).__name__}: {err}"[:500]
            else:
                namespace = {"__name__": "__main__", "display": print}
                for n, src in enumerate(sources):
                    try:
                        exec(compile(src, f"<{path.stem} cell {n}>", "exec"), namespace)  # noqa: S102
                    except Exception as exc:    # recorded as this notebook's error
                        return buf.getvalue(), f"{type(exc).__name__}: {exc}"[:500]
    finally:
        os.chdir(old)
    return buf.getvalue(), ""


def judge(kind: str, text: str, error: str) -> dict:
    """The verdict of one executed notebook from what it printed."""
    lines = text.splitlines()
    passed = sum(PASS_LINE in ln for ln in lines)
    failed = [ln.strip() for ln in lines if re.search(rf"\b{FAILED}\b", ln)]
    todo = sum(TODO in ln for ln in lines)
    ok = not error and (kind == "notebook" or (passed > 0 and not failed and not todo))
    return {"ok": ok, "checks_passed": passed, "failed_lines": failed[:20],
            "not_implemented": todo, "error": error,
            "on_gpu": any("a CUDA GPU" in ln for ln in lines) or None}


def main(argv=None):
    ap = results.benchmark_parser(__doc__)
    results.add_output_arguments(ap)
    ap.add_argument("--only", default=None, help="run only the labs/notebooks whose name "
                    "contains this text")
    ap.add_argument("--timeout", type=int, default=600,
                    help="seconds per cell (nbclient) before the notebook counts as failed")
    args = ap.parse_args(argv)
    results.check_outputs(args, __file__, conflicts={"--only": "a subset"} if args.only else None)
    results.require_gpu("benchmarks/gpu_labs.py", args.simulator_smoke)
    if args.timeout < 1:
        raise SystemExit(f"--timeout must be a positive number of seconds, got {args.timeout}")
    out = results.output_dir(args)
    try:
        import nbclient  # noqa: F401
        import ipykernel  # noqa: F401
        runner, how = (lambda p: run_nbclient(p, args.timeout)), "nbclient"
    except ImportError:                 # the GPU image may lack Jupyter: run in process
        runner, how = run_in_process, "in-process"
    doc = {"environment": env.record(), "runner": how, "rows": []}
    print(f"runner: {how}", flush=True)
    log = []
    for kind, path in targets(args.only, args.simulator_smoke):
        t0 = time.perf_counter()
        text, error = runner(path)
        row = {"name": path.stem, "kind": kind, "seconds": round(time.perf_counter() - t0, 1),
               **judge(kind, text, error)}
        doc["rows"].append(row)
        print(json.dumps(row), flush=True)
        log += [f"===== {path.stem}: {json.dumps(row)}", text.rstrip(), ""]
        # after each notebook, so a run stopped by a time limit keeps what it printed
        log_path = results.write_output(out, LOG_FILE, "\n".join(log) + "\n")
    doc["passed"] = sum(r["ok"] for r in doc["rows"])
    doc["total"] = len(doc["rows"])
    print(f"{doc['passed']} of {doc['total']} ran clean", flush=True)
    path = results.write_json(out, RESULT_FILE, doc, "gpu_labs")
    print("wrote", path, "and", log_path)
    results.finish(args, out, ok=doc["passed"] == doc["total"])
    return 0 if doc["passed"] == doc["total"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
