"""The program Nsight Compute profiles: runs named attention configurations once each.

    python benchmarks/ncu_target.py --list
    python benchmarks/ncu_target.py --configs flash-N4096-q64k64,torch-math-N4096
    ncu --metrics ... python benchmarks/ncu_target.py --configs NAME[,NAME...]

Each configuration is bracketed by two empty marker kernels, `ncu_begin` and
`ncu_end`, so that `flashcourse.measured_traffic.split_by_marker` can tell which profiled
kernels belong to which configuration. Inputs are made on the host (numpy,
standard normal, fp32) and copied to the GPU (copies are not kernels), so the only
kernels between the markers are the attention path's own. PyTorch paths are warmed
up once on a tiny input *before* the begin marker (library set-up kernels then fall
outside the brackets). Numba kernels compile on the host before their first launch.

`--manifest PATH` writes the list of configurations run, in order, as JSON, once they
have run (never an empty list: with no known configuration it stops with an error and
writes nothing). PATH may not be inside benchmarks/results/ (this script records
nothing; benchmarks/ncu_traffic.py --record does). It needs a GPU for everything but
--list: on Numba's CUDA simulator it stops with a message instead of running.
Prints nothing on stdout (ncu's CSV may share it); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flashcourse import results   # (also selects the GPU or the simulator before numba)

D = 64          # head dimension of every configuration (fp32)
H = 16          # heads (B x H) unless a configuration says otherwise
DEFAULT_TILE = {"block_q": 64, "block_k": 64, "threads": 256, "tm": 4}


def _configs() -> dict:
    c = {}
    for n in (1024, 4096):
        c[f"cuda-dense-N{n}"] = {"impl": "dense", "seq_len": n, "head_dim": D, "heads": H}
        c[f"torch-math-N{n}"] = {"impl": "torch-math", "seq_len": n, "head_dim": D, "heads": H}
        c[f"torch-efficient-N{n}"] = {"impl": "torch-efficient", "seq_len": n, "head_dim": D,
                                      "heads": H}
    c["textbook-N4096"] = {"impl": "textbook", "seq_len": 4096, "head_dim": D, "heads": H,
                           "block_q": 32, "block_k": 32}
    tiles = {"q32k32": {"block_q": 32, "block_k": 32, "threads": 128, "tm": 4},
             "q64k64": DEFAULT_TILE,
             "q128k64": {"block_q": 128, "block_k": 64, "threads": 256, "tm": 8},
             "q128k128": {"block_q": 128, "block_k": 128, "threads": 256, "tm": 8}}
    for name, t in tiles.items():
        c[f"flash-N4096-{name}"] = {"impl": "flash", "seq_len": 4096, "head_dim": D,
                                    "heads": H, **t}
    # K + V of all heads: 2 N d 4 B x 16 = 8 KiB x N -> 8, 64, 128 MiB (L2: 60 MiB)
    for n in (1024, 8192, 16384):
        c[f"flash-N{n}-q64k64"] = {"impl": "flash", "seq_len": n, "head_dim": D, "heads": H,
                                   **DEFAULT_TILE}
    # one head, long: K + V = 512 B x N -> 32, 64, 128 MiB
    for n in (65536, 131072, 262144):
        c[f"flash-N{n}-h1-q64k64"] = {"impl": "flash", "seq_len": n, "head_dim": D,
                                      "heads": 1, **DEFAULT_TILE}
    return c


CONFIGS = _configs()


def tuned_best(path, option: str = "--tuned-json") -> dict | None:
    """The sweep's best configuration for d = D from the sweep JSON at `path` (None when
    the file does not exist or has no best for D); one line naming `option` and the file
    when it is not a sweep file (flashcourse.results.load)."""
    try:
        doc = results.load(path, "sweep")
    except results.ResultsError as exc:
        raise SystemExit(f"{option}: {exc}") from None
    return None if doc is None else doc.get("best", {}).get(str(D))


def add_tuned(configs: dict, tuned: dict | None) -> dict:
    """Add 'flash-N4096-tuned' (the sweep's best for d = 64) when it is given."""
    if tuned:
        configs["flash-N4096-tuned"] = {"impl": "flash", "seq_len": 4096, "head_dim": D,
                                        "heads": H, **{k: tuned.get(k) for k in
                                                       ("block_q", "block_k", "threads", "tm",
                                                        "unroll")}}
    return configs


def _markers():
    from numba import cuda

    @cuda.jit
    def ncu_begin(x):
        x[0] = 1.0

    @cuda.jit
    def ncu_end(x):
        x[0] = 2.0

    return ncu_begin, ncu_end


def _inputs(cfg, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    shape = (cfg["heads"], cfg["seq_len"], cfg["head_dim"])
    return [rng.standard_normal(shape, dtype=np.float32) for _ in range(3)]


def run_one(cfg):
    """Run one configuration's forward once on the GPU (inputs already prepared)."""
    import numpy as np
    from numba import cuda
    impl = cfg["impl"]
    q, k, v = _inputs(cfg)
    n, d, h = cfg["seq_len"], cfg["head_dim"], cfg["heads"]
    if impl.startswith("torch"):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = SDPBackend.MATH if impl == "torch-math" else SDPBackend.EFFICIENT_ATTENTION
        tq, tk, tv = (torch.from_numpy(x).reshape(1, h, n, d).cuda() for x in (q, k, v))
        small = [torch.from_numpy(x[:1, :128].copy()).reshape(1, 1, 128, d).cuda()
                 for x in (q, k, v)]
        def sdpa(a, b, c):
            with sdpa_kernel(backend):              # entering it launches nothing
                return torch.nn.functional.scaled_dot_product_attention(a, b, c)

        sdpa(*small)                                # warm-up, outside the markers
        torch.cuda.synchronize()
        return (lambda: sdpa(tq, tk, tv)), torch.cuda.synchronize
    from flashcourse.cuda.cuda_core import dense, flash, textbook
    dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
    o = cuda.device_array((h, n, d), np.float32)
    lse = cuda.device_array((h, n), np.float32)
    scale = 1.0 / np.sqrt(d)
    if impl == "flash":
        from flashcourse.configs import make_config
        from flashcourse.sweep import kernel_for
        args = (cfg["block_q"], cfg["block_k"], cfg["threads"], cfg["tm"])
        tc = make_config(*args, d, unroll=cfg.get("unroll"))
        kern, kw = kernel_for(tc, shuffle=True)
        ck = kern.compile(flash.signature())       # host-side compile before the markers
        cfg["regs_per_thread"] = int(ck.regs_per_thread)
        cfg["unroll"] = kw.get("unroll")
        fn = lambda: flash.run(dq, dk, dv, o, lse, n, n, d, scale, False, *args, **kw)
    elif impl == "textbook":
        fn = lambda: textbook.run(dq, dk, dv, o, lse, n, n, d, scale, False,
                                  block=cfg["block_q"])
    elif impl == "dense":
        fn = lambda: dense.run(dq, dk, dv, o, lse, n, n, d, scale, False)
    else:
        raise ValueError(f"unknown impl {impl!r}")
    return fn, cuda.synchronize


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="", help="comma-separated names (see --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--manifest", type=Path, default=None,
                    help="JSON list of the configurations run (not inside benchmarks/results/)")
    ap.add_argument("--tuned-json", default=None, help="sweep JSON: adds flash-N4096-tuned")
    args = ap.parse_args(argv)
    results.check_outputs(args, __file__, outputs={"--manifest": args.manifest})
    configs = dict(CONFIGS)
    if args.tuned_json:
        add_tuned(configs, tuned_best(args.tuned_json))
    if args.list:
        for name, cfg in configs.items():
            print(name, cfg, file=sys.stderr)
        return
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in configs]
    if unknown:                    # say so, run the others
        print(f"unknown configuration(s) {unknown}; see --list", file=sys.stderr)
        names = [n for n in names if n in configs]
    if not names:
        raise SystemExit(f"benchmarks/ncu_target.py: --configs {args.configs!r}: no known "
                         "configuration to run (see --list); nothing run, nothing written")
    results.require_gpu("benchmarks/ncu_target.py", smoke_option=False)
    import numpy as np
    from numba import cuda
    begin, end = _markers()
    flag = cuda.to_device(np.zeros(1, np.float32))
    done = []
    for name in names:
        cfg = dict(configs[name])
        bracketed = False
        try:
            fn, sync = run_one(cfg)
            sync()
            begin[1, 1](flag)
            bracketed = True
            cuda.synchronize()
            fn()
            sync()
            done.append({"name": name, **cfg, "status": "ok", "bracketed": True})
            print(f"ran {name}", file=sys.stderr, flush=True)
        except Exception as exc:   # record and go on: one failure must not lose the rest
            done.append({"name": name, **cfg, "status": "error", "bracketed": bracketed,
                         "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(f"FAILED {name}: {exc}", file=sys.stderr, flush=True)
        finally:
            if bracketed:
                end[1, 1](flag)
                cuda.synchronize()
    if args.manifest:              # after the runs, whole: a reader never finds it half written
        results.write_output(args.manifest.parent, args.manifest.name,
                             json.dumps(done, indent=1), option="--manifest")


if __name__ == "__main__":
    main()
