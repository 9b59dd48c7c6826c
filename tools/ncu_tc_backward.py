"""The program Nsight Compute profiles for the tensor-core backward: one raw launch per
configuration (inputs made on the device, kernels compiled and run once before, so the
profiled launch is a warm one).

    ncu --clock-control none -k regex:tc_bwd --launch-skip 1 --launch-count 1 \
        python3 tools/ncu_tc_backward.py --n 4096 --d 64 [--causal] [tile options]

Needs a GPU; prints nothing but a one-line summary on stderr.
"""
from __future__ import annotations

import argparse
import sys

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)
import numpy as np
from numba import cuda

from flashcourse.cuda.gradients import tc_backward as tcb
from flashcourse.gpu import using_simulator


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--bh", type=int, default=32)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--warps", type=int)
    ap.add_argument("--block-q", type=int)
    ap.add_argument("--kv-regs", type=int, choices=(0, 1))
    ap.add_argument("--pipeline")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args(argv)
    if using_simulator():
        print("ncu_tc_backward: needs a GPU", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    n, d, bh = a.n, a.d, a.bh
    host = [rng.standard_normal((bh, n, d)).astype(np.float16) for _ in range(5)]
    q, k, v, o, do = (cuda.to_device(h) for h in host)
    lse = cuda.to_device(np.full((bh, n), np.log(n), np.float32))
    D = -(-d // 16) * 16
    words = [tcb._words(x, "fp16", D) for x in (q, k, v, do)]
    g32 = [cuda.device_array((bh, n, d), np.float32) for _ in range(3)]
    tiles = {"warps": a.warps, "block_q": a.block_q, "pipeline": a.pipeline,
             "kv_regs": None if a.kv_regs is None else bool(a.kv_regs)}
    for _ in range(a.runs):
        cfg = tcb.run(*words, o, do, lse, *g32, n, n, d, 1.0 / np.sqrt(d), a.causal, "fp16",
                      **{t: x for t, x in tiles.items() if x is not None})
    cuda.synchronize()
    print(f"ncu_tc_backward: n={n} d={d} causal={a.causal} {cfg}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
