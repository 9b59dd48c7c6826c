"""Dump the SASS (machine code) of the tensor-core kernels and count their opcodes.

    python3 tools/sass_dump.py --out DIR

For each kernel below, writes DIR/<name>.sass and prints the static opcode histogram
(the main loops are fully unrolled, so the static mix is close to the executed one).
Needs a GPU (and nvdisasm, or cuobjdump, on the PATH). Records nothing.
"""
from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

import flashcourse  # noqa: F401  (selects GPU or simulator before numba loads)

from flashcourse.cuda.gradients import tc_backward as tcb
from flashcourse.cuda.tensor_core import host as tc
from flashcourse.gpu import using_simulator


def sass_of(ck, path: Path) -> str:
    try:
        text = ck.inspect_sass()
    except Exception as exc:                      # no nvdisasm: the cubin and cuobjdump
        cubin = path.with_suffix(".cubin")
        cubin.write_bytes(ck._codelibrary.get_cubin())
        tool = shutil.which("cuobjdump")
        if tool is None:
            raise RuntimeError(f"no nvdisasm ({exc}) and no cuobjdump") from exc
        text = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    path.write_text(text)
    return text


def histogram(text: str) -> collections.Counter:
    ops = collections.Counter()
    for line in text.splitlines():
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(1).split(".")[0]] += 1
    return ops


def targets():
    for d, knobs in ((64, dict(warps=8, block_k=64, m_tiles=2)),
                     (128, dict(warps=8, block_k=128, m_tiles=1))):
        kern, cfg = tc.make_tensor_core_kernel("fp16", knobs["warps"], knobs["block_k"], d,
                                               False, knobs["m_tiles"], False, 0, "async")
        yield f"fwd_async_d{d}", kern.compile(tc.signature(True, "async"))
    for d in (64, 128):
        tiles = tcb.default_tiles(d, False)
        cfg = tcb._plan("fp16", d, tiles["warps"], tiles["block_q"], False, True, False,
                        tiles["kv_regs"], tiles["q_block_k"], 0, tiles["pipeline"])
        key_major, _ = tcb.kernels(cfg)
        yield f"bwd_{tiles['pipeline']}_d{d}", key_major.compile(tcb.signatures(
            cfg.pipeline)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if using_simulator():
        print("sass_dump: needs a GPU", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    for name, ck in targets():
        ops = histogram(sass_of(ck, a.out / f"{name}.sass"))
        total = sum(ops.values())
        top = ", ".join(f"{op} {n}" for op, n in ops.most_common(24))
        print(f"{name}: regs {ck.regs_per_thread}, {total} instructions: {top}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
