"""Run a function on world_size processes joined by torch.distributed's gloo backend.

    results = run(world_size, fn, *args, timeout_s=120)

spawns world_size processes (torch.multiprocessing, start method "spawn"); rank r calls
fn(rank, world_size, *args) after `init_process_group("gloo")` and returns its result
(picklable; tensors are fine) to the parent: `results[r]`. Everything stays on this
machine and nothing listens beyond it: the ranks meet through a file store
(`torch.distributed.FileStore`) in a private temporary directory, removed afterwards
(torch's TCP store would listen on every interface), and gloo's connections use the
loopback interface only (GLOO_SOCKET_IFNAME = lo, lo0 on macOS; MASTER_ADDR 127.0.0.1
for any code that reads it). A failure on any rank raises, in the
parent, a RuntimeError that names the rank and carries its traceback; a run that takes
longer than timeout_s (a rank stuck waiting for a message) is stopped and raises a
TimeoutError naming the ranks that did not finish. Every process is destroyed
(`destroy_process_group`) and joined.
"""

from __future__ import annotations

import os
import pickle
import queue as queue_mod
import shutil
import socket
import sys
import tempfile
import time
import traceback

from .kernels import require_torch

__all__ = ["run", "free_port"]

LOOPBACK = "127.0.0.1"
#: the loopback interface's name, for gloo (GLOO_SOCKET_IFNAME)
LOOPBACK_IFNAME = "lo0" if sys.platform == "darwin" else "lo"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _worker(rank, world, port, store_path, fn, args, results, init_timeout_s):
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port))
    os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK_IFNAME        # loopback only, always
    torch.set_num_threads(1)
    initialised = False
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                store=dist.FileStore(store_path, world),
                                timeout=datetime.timedelta(seconds=init_timeout_s))
        initialised = True
        payload = ("ok", pickle.dumps(fn(rank, world, *args)))
    except BaseException:                          # noqa: BLE001 (sent to the parent)
        payload = ("error", traceback.format_exc())
    finally:
        if initialised:
            try:
                dist.destroy_process_group()
            except Exception:                      # noqa: BLE001 (the result matters more)
                pass
    results.put((rank,) + payload)


def run(world_size: int, fn, *args, timeout_s: float = 120.0, init_timeout_s: float = 60.0,
        grace_s: float = 10.0):
    """[fn(0, world_size, *args), ..., fn(world_size - 1, world_size, *args)], each run in
    its own gloo process. fn must be importable by name (a module-level function).
    init_timeout_s bounds init_process_group and every collective; once a rank has
    failed, the others get grace_s more seconds (they may wait for it forever)."""
    torch = require_torch("launch.run")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not (timeout_s > 0 and init_timeout_s > 0 and grace_s > 0):
        raise ValueError(f"timeout_s, init_timeout_s and grace_s must be > 0, got "
                         f"{timeout_s}, {init_timeout_s}, {grace_s}")
    ctx = torch.multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    store_dir = tempfile.mkdtemp(prefix="flashcourse-gloo-")       # mode 0700
    store_path = os.path.join(store_dir, "store")
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(r, world_size, port, store_path, fn, args, results,
                               init_timeout_s))
             for r in range(world_size)]
    for p in procs:
        p.start()
    got, errors = {}, {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) + len(errors) < world_size:
            left = deadline - time.monotonic()
            if left <= 0 and errors:
                raise RuntimeError(f"launch.run: rank(s) {sorted(errors)} of {world_size} "
                                   f"failed (the others then waited for them)"
                                   + _error_text(errors))
            if left <= 0:
                missing = sorted(set(range(world_size)) - set(got) - set(errors))
                raise TimeoutError(f"launch.run: rank(s) {missing} of {world_size} did not "
                                   f"finish within timeout_s={timeout_s} s"
                                   + _error_text(errors))
            try:
                rank, status, payload = results.get(timeout=min(left, 0.5))
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if not p.is_alive()
                        and p.exitcode != 0 and r not in got and r not in errors]
                for r in dead:
                    errors[r] = f"process exited with code {procs[r].exitcode}"
                continue
            if status == "ok":
                got[rank] = pickle.loads(payload)
            else:
                errors[rank] = payload
                deadline = min(deadline, time.monotonic() + grace_s)  # others may hang
        if errors:
            raise RuntimeError(f"launch.run: rank(s) {sorted(errors)} of {world_size} failed"
                               + _error_text(errors))
    finally:
        finished = len(got) == world_size
        for p in procs:
            p.join(timeout=5 if finished else 0.2)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        results.close()
        shutil.rmtree(store_dir, ignore_errors=True)
    return [got[r] for r in range(world_size)]


def _error_text(errors) -> str:
    return "".join(f"\n--- rank {r} ---\n{text}" for r, text in sorted(errors.items()))
