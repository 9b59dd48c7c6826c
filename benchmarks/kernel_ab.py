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

A refactor must also leave the results and the compiled code as they were: `--bits` prints
a hash of each checked output (the 3xTF32 backward's dq, dk, dv in every version: async,
planes, the deterministic dQ pass, small terms in one chain or apart; the fp16 tensor-core
forward, version 2; the decode split kernel on tensor cores), `--resources` the
registers and local (spill) bytes per thread that ptxas gives each 3xTF32 backward kernel
(GPU only). Run both once per copy; `--table` puts every kind of line side by side and
says whether the hashes agree:

    for copy in old new; do
      PP=$([ $copy = old ] && echo /tmp/old || echo .)
      PYTHONPATH=$PP python benchmarks/kernel_ab.py --bits --label $copy >> ab.txt
      PYTHONPATH=$PP python benchmarks/kernel_ab.py --resources --label $copy >> ab.txt
    done

(`--bits --resources --times` prints all three lines from one process, which compiles the
kernels once.)

`--bits --simulator-smoke` runs the hashes on Numba's CUDA simulator (tiny shapes): the
simulator's bits say the arithmetic is the same, the GPU's that the compiled code is.

Timing: device arrays (no host copies), 3 untimed calls, then the median of 15 calls
timed with CUDA events (8 for the backward, 20 for decoding); flashcourse.timing. The
result of such a comparison is in benchmarks/results/h200_device_helpers_ab.txt.
"""

from __future__ import annotations

import json

import numpy as np

import flashcourse  # noqa: F401  (chooses Numba's CUDA simulator when there is no GPU)
from flashcourse import results
from flashcourse.timing import time_cuda


#: --only: substrings of the variant names to run (empty: all). A process compiles every
#: kernel it runs, which for the whole set takes longer than 140 s on an H100 (2026-12-07);
#: --only splits one A/B into calls that each fit a device session's command.
ONLY: tuple = ()


def _want(name: str) -> bool:
    return not ONLY or any(part in name for part in ONLY)


def _module(family: str, name: str):
    """flashcourse.cuda.<family>.<name>, or flashcourse.cuda.<name> in a copy of the package
    from before the cuda folder was grouped by family (so one script times both copies)."""
    import importlib
    try:
        return importlib.import_module(f"flashcourse.cuda.{family}.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"flashcourse.cuda.{name}")


def measure(small: bool) -> dict:
    """{variant: median ms}; `small`: tiny shapes that run on the simulator (times 0)."""
    from numba import cuda

    from flashcourse import cuda as fc
    decode_kernels = _module("decoding", "decode_kernels")

    rng = np.random.default_rng(0)
    out = {}

    def dev(shape, dtype=np.float32):
        return cuda.to_device(np.ascontiguousarray(rng.standard_normal(shape).astype(dtype)))

    def timed(name, fn, *args, repeats=15, **kwargs):
        if not _want(name):
            return

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
        o, lse = fc.forward(q, k, v, kernel="flash", causal=True)
        for label, kw in TF32_BACKWARDS:
            timed(f"tc-bwd 3xtf32 {label} d={d}", fc.backward, q, k, v, o, lse, do,
                  kernel="tensor_core", causal=True, repeats=8, **kw)
        for causal in (False, True):
            o, lse = fc.forward(q, k, v, kernel="flash", causal=causal)
            timed(f"bwd fast d={d} causal={causal}", fc.backward, q, k, v, o, lse, do,
                  kernel="fast", causal=causal, repeats=8)
        doh = dev((b, h, n, d), np.float16)
        for causal in (False, True):                   # version 2: fp16, shared key steps
            oh, lseh = fc.forward(qh, kh, vh, kernel="tensor_core", precision="fp16",
                                  causal=causal)
            timed(f"tc-bwd fp16 d={d} causal={causal}", fc.backward, qh, kh, vh, oh, lseh,
                  doh, kernel="tensor_core", precision="fp16", causal=causal, repeats=8)
    # decoding: GQA (B=8, Hq=32, Hkv=8) and MHA (B=1, H=16, twice the keys), d=128, fp16 K/V
    for label, (bq, hq, hkv, tk) in (("gqa", (8, 32, 8, tk_decode)),
                                     ("mha", (1, 16, 16, 2 * tk_decode))):
        qd = dev((bq, hq, 1, 128), np.float16)
        kd, vd = (dev((bq, hkv, tk, 128), np.float16) for _ in range(2))
        timed(f"decode {label} fp16 Tk={tk}", decode_kernels.decode, qd, kd, vd, repeats=20)
    return out


#: The 3xTF32 backward's versions that --bits and the timings run (tc_backward options).
TF32_BACKWARDS = (("async", dict(pipeline="async")), ("planes", dict(pipeline="planes")),
                  ("deterministic", dict(deterministic=True)))


def _tf32_versions():
    """(label, tc_backward options, SMALL_TERMS) of every 3xTF32 backward version."""
    for how in ("one_chain", "apart"):
        for label, kw in TF32_BACKWARDS:
            yield f"{label} {how}", kw, how


def bits(small: bool) -> dict:
    """{check: sha256 of the outputs' bytes (16 hex digits)}: the 3xTF32 backward's dq, dk,
    dv in every version, on ragged shapes (Tq != Tk, not multiples of the tiles, odd d),
    causal and not; on the simulator (`small`) tiny ones."""
    import hashlib

    from flashcourse import cuda as fc
    tcb = _module("gradients", "tc_backward")
    t32 = _module("gradients", "tc_backward_kernels_tf32")

    shapes = ((37, 29, 40, True), (21, 45, 16, False)) if small else \
        ((1000, 777, 64, True), (777, 1000, 100, False), (1024, 1024, 128, True))
    keep, out = t32.SMALL_TERMS, {}
    try:
        for label, kw, how in _tf32_versions():
            if not _want(f"tc-bwd 3xtf32 {label}"):
                continue
            t32.SMALL_TERMS = how
            tcb.kernels.cache_clear()
            for tq, tk, d, causal in shapes:
                rng = np.random.default_rng(tq * 7 + tk + d)
                q, k, v, do = (rng.standard_normal((2, t, d)).astype(np.float32)
                               for t in (tq, tk, tk, tq))
                o, lse = fc.forward(q, k, v, kernel="flash", causal=causal)
                grads = fc.backward(q, k, v, o, lse, do, kernel="tensor_core",
                                    causal=causal, **kw)
                h = hashlib.sha256(b"".join(np.ascontiguousarray(g).tobytes()
                                            for g in grads))
                out[f"tc-bwd 3xtf32 {label} {tq}x{tk} d={d} causal={causal}"] = \
                    h.hexdigest()[:16]
    finally:
        t32.SMALL_TERMS = keep
        tcb.kernels.cache_clear()
    out.update(_bits_fp16(small))
    return out


def _bits_fp16(small: bool) -> dict:
    """Hashes of the fp16 tensor-core forward (version 2, "async") and the decode split
    kernel on tensor cores (GQA: 4 query heads per KV head), ragged shapes."""
    import hashlib

    from flashcourse import cuda as fc
    decode_kernels = _module("decoding", "decode_kernels")

    def digest(arrays):
        return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes()
                                       for a in arrays)).hexdigest()[:16]

    out = {}
    rng = np.random.default_rng(5)
    fwd = ((37, 29, 32, True), (21, 45, 16, False)) if small else \
        ((1000, 777, 64, True), (1024, 1024, 128, False))
    for tq, tk, d, causal in fwd:
        q, k, v = (rng.standard_normal((2, t, d)).astype(np.float16) for t in (tq, tk, tk))
        if not _want("tc fp16 async"):
            continue
        out[f"tc fp16 async {tq}x{tk} d={d} causal={causal}"] = digest(fc.forward(
            q, k, v, kernel="tensor_core", precision="fp16", pipeline="async",
            causal=causal))
    for tk, d in ((45, 32),) if small else ((5000, 128), (777, 64)):
        q = rng.standard_normal((1, 8, 1, d)).astype(np.float16)
        k, v = (rng.standard_normal((1, 2, tk, d)).astype(np.float16) for _ in range(2))
        if not _want("decode tensor_core"):
            continue
        out[f"decode tensor_core Tk={tk} d={d}"] = digest(decode_kernels.decode(
            q, k, v, kernel="tensor_core"))
    return out


def resources() -> dict:
    """{kernel: [registers, local bytes] per thread} from ptxas, for the 3xTF32 backward's
    kernels at the GPU's default tiles (d = 64, 128), in every version (GPU only)."""
    tcb = _module("gradients", "tc_backward")
    t32 = _module("gradients", "tc_backward_kernels_tf32")

    keep, out = t32.SMALL_TERMS, {}
    try:
        for d in (64, 128):
            tiles = tcb.default_tiles(d, False, "3xtf32")
            for label, kw, how in _tf32_versions():
                if not _want(f"tc-bwd 3xtf32 {label}"):
                    continue
                t32.SMALL_TERMS = how
                tcb.kernels.cache_clear()
                det = bool(kw.get("deterministic", False))
                pipeline = kw.get("pipeline", tiles["pipeline"])
                cfg = tcb.plan("3xtf32", d, tiles["warps"], tiles["block_q"], False, not det,
                               False, tiles["kv_regs"], tiles["q_block_k"], 0, pipeline)
                km, qm = tcb.kernels(cfg)
                sig_kv, sig_q = tcb.signatures(cfg.pipeline, "3xtf32")
                for part, kern, sig in (("key-major", km, sig_kv), ("dq pass", qm, sig_q)):
                    if kern is not None:
                        ck = kern.compile(sig)
                        out[f"{label} d={d} {part}"] = [int(ck.regs_per_thread),
                                                        int(ck.local_mem_per_thread)]
    finally:
        t32.SMALL_TERMS = keep
        tcb.kernels.cache_clear()
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
    kinds = {"AB": {}, "BITS": {}, "RES": {}}
    for number, line in enumerate(text.splitlines(), 1):
        kind, _, rest = line.partition(" ")
        if kind in kinds:
            label, _, doc = rest.partition(" ")
            try:
                values = json.loads(doc)
            except ValueError as exc:       # json.JSONDecodeError: a cut or edited line
                raise SystemExit(f"benchmarks/kernel_ab.py: --table {path}: line {number}: "
                                 f"not '{kind} label {{json}}' ({exc})") from None
            if not (isinstance(values, dict) and all(_value_ok(kind, x)
                                                     for x in values.values())):
                raise SystemExit(f"benchmarks/kernel_ab.py: --table {path}: line {number}: "
                                 f"expected a JSON object of {_WHAT[kind]} per variant")
            kinds[kind][label] = values
    if not any(kinds.values()):
        raise SystemExit(f"benchmarks/kernel_ab.py: --table {path}: no 'AB label {{...}}' "
                         "lines (nor BITS or RES lines)")
    rows = []
    for kind, runs in kinds.items():
        if not runs:
            continue
        width = 14 if kind == "RES" else 8
        rows.append(f"{_WHAT[kind] + ':':46s} " + " ".join(f"{lb:>{width}s}" for lb in runs))
        variants = list(dict.fromkeys(v for r in runs.values() for v in r))
        for v in variants:
            cells = [runs[r].get(v) for r in runs]
            if kind == "AB":
                text_cells = [f"{float('nan') if c is None else c:8.3f}" for c in cells]
            elif kind == "RES":
                text_cells = [f"{'-' if c is None else f'{c[0]} regs {c[1]} B':>14s}"
                              for c in cells]
            else:
                same = len({c for c in cells}) == 1 and None not in cells
                text_cells = [f"{'same' if same else 'DIFFERS':>8s}"] * len(cells)
            rows.append(f"{v:46s} " + " ".join(text_cells))
    return "\n".join(rows)


_WHAT = {"AB": "milliseconds", "BITS": "output hashes", "RES": "registers, local bytes"}


def _value_ok(kind: str, x) -> bool:
    if kind == "AB":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    if kind == "BITS":
        return isinstance(x, str)
    return (isinstance(x, list) and len(x) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in x))


def main(argv=None):
    ap = results.benchmark_parser(__doc__)
    ap.add_argument("--label", default="run", help="name of this run in the output line")
    ap.add_argument("--table", help="print the runs recorded in this file side by side")
    ap.add_argument("--simulator-smoke", action="store_true",
                    help="tiny shapes on Numba's CUDA simulator (the numbers mean nothing)")
    ap.add_argument("--bits", action="store_true",
                    help="print hashes of the checked outputs (BITS line) instead of times")
    ap.add_argument("--resources", action="store_true",
                    help="print ptxas registers and local bytes per kernel (RES line; GPU)")
    ap.add_argument("--times", action="store_true",
                    help="with --bits or --resources: print the AB line of times as well "
                         "(one process compiles the kernels once for all three)")
    ap.add_argument("--only", default="", help="comma-separated substrings of the variant "
                    "names to run (default: all), e.g. 'tc-bwd 3xtf32 async,decode'")
    args = ap.parse_args(argv)
    global ONLY
    ONLY = tuple(p.strip() for p in args.only.split(",") if p.strip())
    results.check_outputs(args, __file__)      # it writes only to stdout: nothing to refuse
    if args.table:
        print(table(args.table))
        return
    results.require_gpu("benchmarks/kernel_ab.py", args.simulator_smoke)
    if args.resources and args.simulator_smoke:
        raise SystemExit("benchmarks/kernel_ab.py: --resources needs a GPU (ptxas), not "
                         "--simulator-smoke")
    if args.bits:
        print(f"BITS {args.label} {json.dumps(bits(args.simulator_smoke))}", flush=True)
    if args.resources:
        print(f"RES {args.label} {json.dumps(resources())}", flush=True)
    if args.times or not (args.bits or args.resources):
        print(f"AB {args.label} {json.dumps(measure(args.simulator_smoke))}", flush=True)


if __name__ == "__main__":
    main()
