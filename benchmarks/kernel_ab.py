"""A/B timing of the main CUDA kernels: one fixed set of shapes, one JSON line per run.

For a change that should not alter speed (a refactor of kernel code): run this script
once per copy of the package, alternating, in one session on one GPU, and compare the
medians. PYTHONPATH picks the copy, e.g. with the old package unpacked by
`git archive HEAD flashcourse | tar -x -C /tmp/old`:

    for r in 1 2; do
      PYTHONPATH=/tmp/old python benchmarks/kernel_ab.py --label old$r >> ab.txt
      python benchmarks/kernel_ab.py --label new$r >> ab.txt
    done
    python benchmarks/kernel_ab.py --table ab.txt

Timing: device arrays (no host copies), 3 untimed calls, then the median of 15 calls
timed with CUDA events (8 for the backward, 20 for decoding); flashcourse.timing. The
result of such a comparison is in benchmarks/results/h200_device_helpers_ab.txt.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import flashcourse  # noqa: F401  (chooses Numba's CUDA simulator when there is no GPU)
from flashcourse import results
from flashcourse.timing import time_cuda


def measure(small: bool) -> dict:
    """{variant: median ms}; `small`: tiny shapes that run on the simulator (times 0)."""
    from numba import cuda

    from flashcourse import cuda as fc
    from flashcourse.cuda.decoding import decode_kernels

    rng = np.random.default_rng(0)
    out = {}

    def dev(shape, dtype=np.float32):
        return cuda.to_device(np.ascontiguousarray(rng.standard_normal(shape).astype(dtype)))

    def timed(name, fn, *args, repeats=15, **kwargs):
        def call():
            return fn(*args, **kwargs)
        if small:
            call()
            out[name] = 0.0
        else:
            out[name] = float(np.median(time_cuda(call, warmup=3, repeats=repeats)))

    b, h, n = (1, 1, 40) if small else (4, 16, 4096)            # forward and backward
    tk_decode = 64 if small else 32768
    for d in (64,) if small else (64, 128):
        q, k, v, do = (dev((b, h, n, d)) for _ in range(4))    # (B, H, N, d) float32
        qh, kh, vh = (dev((b, h, n, d), np.float16) for _ in range(3))
        for causal in (False, True):
            timed(f"flash d={d} causal={causal}", fc.forward, q, k, v, kernel="flash",
                  causal=causal)
            timed(f"tc fp16 d={d} causal={causal}", fc.forward, qh, kh, vh,
                  kernel="tensor_core", precision="fp16", causal=causal)
        timed(f"tc 3xtf32 d={d}", fc.forward, q, k, v, kernel="tensor_core",
              precision="3xtf32")
        for causal in (False, True):
            o, lse = fc.forward(q, k, v, kernel="flash", causal=causal)
            timed(f"bwd fast d={d} causal={causal}", fc.backward, q, k, v, o, lse, do,
                  kernel="fast", causal=causal, repeats=8)
    # decoding: GQA (B=8, Hq=32, Hkv=8) and MHA (B=1, H=16, twice the keys), d=128, fp16 K/V
    for label, (bq, hq, hkv, tk) in (("gqa", (8, 32, 8, tk_decode)),
                                     ("mha", (1, 16, 16, 2 * tk_decode))):
        qd = dev((bq, hq, 1, 128), np.float16)
        kd, vd = (dev((bq, hkv, tk, 128), np.float16) for _ in range(2))
        timed(f"decode {label} fp16 Tk={tk}", decode_kernels.decode, qd, kd, vd, repeats=20)
    return out


def table(path) -> str:
    """The runs of `path` (lines 'AB label {json}') side by side, one row per variant;
    one line (SystemExit) naming --table and the file when it is missing, not a text
    file (flashcourse.results.read_text) or holds a broken 'AB' line."""
    try:
        text = results.read_text(path)
    except results.ResultsError as exc:
        raise SystemExit(f"benchmarks/kernel_ab.py: --table: {exc}") from None
    if text is None:
        raise SystemExit(f"benchmarks/kernel_ab.py: --table {path}: no such file (expected "
                         "the output of kernel_ab.py runs: lines 'AB label {json}')")
    runs = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("AB "):
            label, _, doc = line[3:].partition(" ")
            try:
                times = json.loads(doc)
            except ValueError as exc:       # json.JSONDecodeError: a cut or edited line
                raise SystemExit(f"benchmarks/kernel_ab.py: --table {path}: line {number}: "
                                 f"not 'AB label {{json}}' ({exc})") from None
            if not (isinstance(times, dict) and all(
                    isinstance(t, (int, float)) and not isinstance(t, bool)
                    for t in times.values())):
                raise SystemExit(f"benchmarks/kernel_ab.py: --table {path}: line {number}: "
                                 "expected a JSON object of milliseconds per variant")
            runs[label] = times
    if not runs:
        raise SystemExit(f"benchmarks/kernel_ab.py: --table {path}: no 'AB label {{...}}' "
                         "lines")
    variants = list(next(iter(runs.values())))
    rows = [f"{'variant':34s} " + " ".join(f"{label:>8s}" for label in runs)]
    for v in variants:
        rows.append(f"{v:34s} " + " ".join(f"{runs[r].get(v, float('nan')):8.3f}"
                                          for r in runs))
    return "\n".join(rows)


def main(argv=None):
    ap = results.benchmark_parser(__doc__)
    ap.add_argument("--label", default="run", help="name of this run in the output line")
    ap.add_argument("--table", help="print the runs recorded in this file side by side")
    ap.add_argument("--simulator-smoke", action="store_true",
                    help="tiny shapes on Numba's CUDA simulator (the numbers mean nothing)")
    args = ap.parse_args(argv)
    results.check_outputs(args, __file__)      # it writes only to stdout: nothing to refuse
    if args.table:
        print(table(args.table))
        return
    results.require_gpu("benchmarks/kernel_ab.py", args.simulator_smoke)
    print(f"AB {args.label} {json.dumps(measure(args.simulator_smoke))}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
