"""Check, on a GPU, that flashcourse.cuda's flash kernel picks the recorded tuned default
for this GPU model, that it is exact, and that it is at least as fast as the untuned
default in the same run (fp32, B x H = 32, N = 4096, d in {64, 128}).

    python benchmarks/verify_defaults.py                  # on a GPU: writes benchmarks/out/
    python benchmarks/verify_defaults.py --record         # on a GPU: replaces the recorded
                                                          # file once the run is done
    python benchmarks/verify_defaults.py --simulator-smoke     # tiny sizes, no GPU
"""

import argparse
import json
import statistics
from functools import partial

import numpy as np

import flashcourse  # noqa: F401  (selects the GPU or the simulator before numba loads)
from flashcourse import env, reference, results
from flashcourse.cuda import forward
from flashcourse.cuda.cuda_core import flash
from flashcourse.timing import rel_err, tflops, time_cuda
from flashcourse.traffic import attention_flops


def main(argv=None):
    from numba import cuda
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args = results.parse_gpu_arguments(ap, argv, __file__)
    out = results.output_dir(args)
    smoke = args.simulator_smoke
    rng = np.random.default_rng(0)
    report = {"environment": env.record(), "rows": []}
    dims, (tq, tk), (bh, n) = ((8,), (5, 7), (2, 16)) if smoke else \
        ((64, 128), (777, 1031), (32, 4096))
    repeats = 1 if smoke else 15
    for d in dims:
        # exactness of the default on a ragged causal shape, vs the float64 reference
        q, k, v = (rng.standard_normal((2, 3, t, d)).astype(np.float32) for t in (tq, tk, tk))
        o, lse = forward(q, k, v, causal=True)
        o_ref, _ = reference.attention(q, k, v, causal=True)
        err = rel_err(o, o_ref)
        # timing: default (tuned when recorded) vs untuned, same run
        qd, kd, vd = (cuda.to_device(rng.standard_normal((bh, n, d)).astype(np.float32))
                      for _ in range(3))
        od = cuda.device_array((bh, n, d), np.float32)
        ld = cuda.device_array((bh, n), np.float32)
        scale = 1 / np.sqrt(d)
        untuned = flash.untuned_config(d) if not smoke else flash.default_config(d)
        base = (qd, kd, vd, od, ld, n, n, d, scale, False)
        flops = attention_flops(n, n, d) * bh

        def median_ms(fn):
            return statistics.median(time_cuda(fn, warmup=1 if smoke else 3, repeats=repeats))

        ms_default = median_ms(partial(flash.run, *base))
        ms_untuned = median_ms(partial(flash.run, *base, *untuned, flash.UNTUNED_UNROLL))
        row = {"d": d, "tuned_config": None if smoke else flash._recorded_config(
                   d, flash._gpu_name()),
               "untuned_config": list(untuned),
               "default_config": list(flash.default_config(d)),
               "unroll_default": flash.default_unroll(d), "rel_err_ragged_causal": err,
               "ms_default": ms_default, "ms_untuned": ms_untuned,
               "tflops_default": tflops(flops, ms_default),
               "tflops_untuned": tflops(flops, ms_untuned)}
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
    path = results.write_json(out, "h200_verify_defaults.json", report, "verify_defaults")
    print("wrote", path)
    results.finish(args, out)                # --record: now into benchmarks/results/


if __name__ == "__main__":
    main()
