"""What one learner's kernel needs: `python tools/measure_resources.py [--json FILE]`.

Executes every notebook (and, with --labs, every solved lab) top to bottom on a fresh
kernel, one at a time, as a learner would, and reports for each the kernel's peak
resident memory (ru_maxrss of the kernel process, after it exits) and the CPU time it
used (user + system), plus the wall time. Instructors size a JupyterHub from these:
memory per learner = the largest peak (one kernel at a time) plus the server's own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, resource, sys, time
import nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
t0 = time.perf_counter()
NotebookClient(nb, timeout=900, kernel_name="python3",
               resources={"metadata": {"path": os.path.dirname(path)}}).execute()
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)      # the kernel, reaped by nbclient
print(json.dumps({"peak_rss_mib": ru.ru_maxrss / 1024, "cpu_s": ru.ru_utime + ru.ru_stime,
                  "wall_s": wall}))
"""


def measure(path: Path) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labs", action="store_true", help="also the solved labs")
    ap.add_argument("--json", type=Path, help="write the results to this file")
    args = ap.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.labs:
        paths += sorted((ROOT / "labs" / "solutions").glob("*.ipynb"))
    rows = []
    print(f"{'notebook':44s} {'peak MiB':>9s} {'CPU s':>7s} {'wall s':>7s}")
    for p in paths:
        r = {"notebook": p.relative_to(ROOT).as_posix(), **measure(p)}
        rows.append(r)
        print(f"{r['notebook']:44s} {r['peak_rss_mib']:9.0f} {r['cpu_s']:7.1f} {r['wall_s']:7.1f}")
    peak = max(r["peak_rss_mib"] for r in rows)
    cpu = sum(r["cpu_s"] for r in rows)
    print(f"largest kernel peak {peak:.0f} MiB; CPU time for all {len(rows)}: {cpu:.0f} s")
    if args.json:
        doc = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform()},
               "measured": time.strftime("%Y-%m-%d"), "rows": rows,
               "largest_peak_rss_mib": peak, "total_cpu_s": cpu}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
