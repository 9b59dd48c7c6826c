"""Compile the Hopper (wgmma) kernels for sm_90a WITHOUT a GPU and read what ptxas made.

    python3 tools/hopper_sass.py [--pipelines overlap producer] [--configs fp16:3:64:128 ...]

For each configuration (precision:warpgroups:block_k:d) and pipeline: registers, spill bytes,
whether ptxas serialized the wgmma instructions (its `(C7514)` or `(C7519) Potential Performance
Loss` line, an *info* message of `ptxas -v`, not a warning), and where the waits for the products
sit in the SASS: the number of MUFU.EX2 (the softmax's exponentials) between the wait for
S_j (`WARPGROUP.DEPBAR.LE gsb0, 0x1`) and the wait for P_{j-1} V_{j-1} (`... 0x0`). Version 2
is written so that the exponentials run between the two; ptxas moved its second wait above
them (benchmarks/NOTES_hopper.md, "Where version 2's wait really is"), which only the SASS
shows.

Needs, beside the course's packages: the CUDA compiler pieces as wheels, in a separate
environment (they are not in requirements.txt):

    python3 -m venv /tmp/ptxenv && /tmp/ptxenv/bin/pip install -e . "numba-cuda[cu13]" \\
        nvidia-cuda-nvcc nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    /tmp/ptxenv/bin/python tools/hopper_sass.py

Numba asks the driver for the GPU's compute capability when it builds a kernel; with no GPU
this script answers 9.0 for it (a stand-in device object), compiles the PTX with
`cuda.compile_ptx(..., cc=(9, 0))`, retargets it to sm_90a (wgmma is arch-specific) and runs
ptxas and cuobjdump from the wheels. Records nothing; `wait_report` and `serialized` are the
checked parts (tests/test_hopper_sass.py).
"""
from __future__ import annotations

import argparse
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")


def instructions(sass: str) -> list[str]:
    """The instructions of cuobjdump -sass text, one string each, without addresses."""
    return [m.group(1) for m in map(_INSTR.match, sass.splitlines()) if m]


def wait_report(sass: str) -> list[dict]:
    """For each `WARPGROUP.DEPBAR.LE gsb0, 0x1` (a wait that leaves one wgmma group running):
    the MUFU.EX2 before the next `... gsb0, 0x0` (the wait for that group) and, after it,
    up to the next HGMMA or barrier. Empty if the kernel has no such wait."""
    ins = instructions(sass)
    out = []
    for i, x in enumerate(ins):
        if "DEPBAR.LE gsb0, 0x1" not in x:
            continue
        j = next((j for j in range(i + 1, len(ins)) if "DEPBAR.LE gsb0, 0x0" in ins[j]),
                 len(ins))
        after = 0
        for y in ins[j + 1:]:
            if "HGMMA" in y or "BAR.SYNC" in y:
                break
            after += "MUFU.EX2" in y
        out.append({"between": sum("MUFU.EX2" in y for y in ins[i:j]), "after": after,
                    "instructions_between": j - i})
    return out


def serialized(ptxas_output: str) -> bool:
    """ptxas put a wait after every wgmma: its "Potential Performance Loss: wgmma.mma_async
    instructions are serialized" info line, whatever the reason (C7514: non-wgmma
    instructions read the accumulators; C7519: a wgmma in a branch ptxas thinks divergent,
    e.g. one on threadIdx / 128 that is not broadcast from one lane first)."""
    return "wgmma.mma_async instructions are serialized" in ptxas_output


def _tool(name: str) -> str:
    """The wheels' tool first (it matches the PTX version numba-cuda writes), then PATH."""
    try:
        import nvidia
        for root in nvidia.__path__:
            for cand in sorted(Path(root).glob(f"*/bin/{name}")):
                return str(cand)
    except ImportError:
        pass
    found = shutil.which(name)
    if found:
        return found
    raise SystemExit(f"hopper_sass: no {name}: install nvidia-cuda-nvcc, nvidia-cuda-nvdisasm and "
                     f"nvidia-cuda-cuobjdump (see the docstring)")


def compile_one(precision: str, wg: int, bk: int, d: int, pipeline: str, work: Path,
                lazy_rescale: bool | None = None) -> dict:
    from numba import cuda

    from flashcourse.cuda.hopper import host as hopper
    from flashcourse.cuda.hopper.hopper_kernels import make_wgmma_kernel
    if lazy_rescale is None:           # the kernel's own default
        lazy_rescale = hopper.LAZY_RESCALE
    cfg = hopper.HopperConfig(precision, wg, bk, d, pipeline=pipeline,
                              lazy_rescale=lazy_rescale)
    kern = make_wgmma_kernel(cfg)
    kw = {}
    if "launch_bounds" in inspect.signature(cuda.compile_ptx).parameters:
        kw["launch_bounds"] = (cfg.threads, 1)
    ptx, _ = cuda.compile_ptx(kern.py_func, hopper.signature(pipeline), cc=(9, 0), **kw)
    ptx = re.sub(r"\.target sm_90\b", ".target sm_90a", ptx)
    name = f"{pipeline}_{precision}_wg{wg}_bk{bk}_d{d}" + ("_lazy" if lazy_rescale else "")
    (work / f"{name}.ptx").write_text(ptx)
    cubin = work / f"{name}.cubin"
    r = subprocess.run([_tool("ptxas"), "-arch=sm_90a", "-v", str(work / f"{name}.ptx"),
                        "-o", str(cubin)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"ptxas failed on {name}:\n{r.stderr[-2000:]}")
    info = r.stdout + r.stderr
    sass = subprocess.run([_tool("cuobjdump"), "-sass", str(cubin)], capture_output=True,
                          text=True, check=True).stdout
    regs = re.search(r"Used (\d+) registers", info)
    spill = re.search(r"(\d+) bytes spill stores", info)
    return {"name": name, "regs": int(regs.group(1)) if regs else None,
            "spill_bytes": int(spill.group(1)) if spill else None,
            "serialized": serialized(info), "waits": wait_report(sass)}


def _pretend_compute_capability_9():
    import numba.cuda.dispatcher as dispatcher

    class Hopper:
        compute_capability = (9, 0)
        name = "no GPU (compute capability 9.0 assumed)"
    dispatcher.get_current_device = lambda: Hopper()
    from flashcourse import limits             # hopper.plan checks against the H200's
    if not limits._cached:
        limits._cached.append(limits.H200_LIMITS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipelines", nargs="*", default=["serial", "overlap", "producer",
                                                       "pingpong"])
    ap.add_argument("--configs", nargs="*", default=["fp16:4:64:64", "fp16:3:64:128",
                                                     "fp16:2:128:128"],
                    help="PRECISION:WARPGROUPS:BLOCK_K:D")
    ap.add_argument("--every-block", action="store_true",
                    help="compile with lazy_rescale=False (the papers' rescale at every "
                         "raised max; the default compiles the kernel's default, lazy)")
    args = ap.parse_args(argv)
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    _pretend_compute_capability_9()
    with tempfile.TemporaryDirectory() as tmp:
        for pipeline in args.pipelines:
            for c in args.configs:
                p, wg, bk, d = c.split(":")
                from flashcourse.cuda.hopper import host as hopper
                try:                   # the configurations the kernel accepts, only
                    hopper.plan(p, int(d), int(wg), int(bk), pipeline=pipeline)
                except ValueError:
                    continue
                r = compile_one(p, int(wg), int(bk), int(d), pipeline, Path(tmp),
                                False if args.every_block else None)
                waits = "; ".join(f"{w['between']} EX2 between the waits, {w['after']} after"
                                  for w in r["waits"]) or "no wait_group 1"
                print(f"{r['name']:34} {r['regs']} regs, spills {r['spill_bytes']} B, "
                      f"{'SERIALIZED' if r['serialized'] else 'not serialized'} | "
                      f"{waits}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
