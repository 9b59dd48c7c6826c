"""Check, on a GPU, that flashcourse.cuda's flash kernel picks the recorded tuned default
for this GPU model, that it is exact, and that it is at least as fast as the untuned
default in the same run (fp32, B x H = 32, N = 4096, d in {64, 128}).

    python benchmarks/verify_defaults.py [--out DIR]
"""

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import flashcourse  # noqa: E402,F401  (selects the GPU before numba loads)
from flashcourse import reference  # noqa: E402
from flashcourse.cuda import flash, forward  # noqa: E402
from flashcourse.tuning import environment  # noqa: E402


def median_ms(fn, repeats=15, warmup=3):
    from numba import cuda
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = cuda.event(), cuda.event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cuda.event_elapsed_time(a, b))
    return float(np.median(times))


def main():
    from numba import cuda
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    report = {"environment": environment(), "rows": []}
    for d in (64, 128):
        tuned = flash.tuned_config(d)
        # exactness of the default on a ragged causal shape, vs the float64 reference
        q, k, v = (rng.standard_normal((2, 3, t, d)).astype(np.float32) for t in (777, 1031, 1031))
        o, lse = forward(q, k, v, causal=True)
        o_ref, _ = reference.attention(q, k, v, causal=True)
        err = float(np.linalg.norm(o - o_ref) / np.linalg.norm(o_ref))
        # timing: default (tuned when recorded) vs untuned, same run
        bh, n = 32, 4096
        qd, kd, vd = (cuda.to_device(rng.standard_normal((bh, n, d)).astype(np.float32))
                      for _ in range(3))
        od = cuda.device_array((bh, n, d), np.float32)
        ld = cuda.device_array((bh, n), np.float32)
        scale = 1 / np.sqrt(d)
        untuned = flash.untuned_config(d)
        bq, bk, th, tm = untuned

        base = (qd, kd, vd, od, ld, n, n, d, scale, False)
        flops = 4 * bh * n * n * d
        ms_default = median_ms(partial(flash.run, *base))
        ms_untuned = median_ms(partial(flash.run, *base, bq, bk, th, tm, flash.UNTUNED_UNROLL))
        row = {"d": d, "tuned_config": tuned, "untuned_config": list(untuned),
               "default_config": list(flash.default_config(d)),
               "unroll_default": flash.default_unroll(d), "rel_err_ragged_causal": err,
               "ms_default": ms_default, "ms_untuned": ms_untuned,
               "tflops_default": flops / ms_default / 1e9,
               "tflops_untuned": flops / ms_untuned / 1e9}
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out, "h200_verify_defaults.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
