"""Helpers shared by the test modules (random attention inputs, error measures)."""

import importlib
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from flashcourse.timing import rel_err  # noqa: F401  (the course's one error measure)

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
if str(TOOLS) not in sys.path:          # the tools/ scripts import as modules in the tests
    sys.path.insert(0, str(TOOLS))

#: Relative-error tolerance of an implementation against the float64 reference,
#: by input dtype: float64 rounding ~1e-16 per op, a few thousand ops -> 1e-12;
#: float32 accumulation -> 1e-5; float16 inputs/outputs (3 decimal digits) -> 1e-2.
TOL = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 1e-2}


def require(condition: bool, reason: str, test: str) -> None:
    """Skip with `reason` unless `condition`; under CI=true fail instead, where `test` (e.g.
    "browser test") must run."""
    if condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the {test} must run)")
    pytest.skip(reason)


def tool(name: str):
    """The script tools/<name>.py as a module."""
    return importlib.import_module(name)


def assert_tool_check_passes(name: str) -> None:
    """`python tools/<name>.py --check` exits 0 (its output is the failure message)."""
    r = subprocess.run([sys.executable, str(TOOLS / f"{name}.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def cpu_forwards(block_q: int, block_k: int, sep: str = "-") -> dict:
    """The numpy forwards (tiled in both loop orders, dense) and the three Numba CPU versions,
    with these tiles: name -> f(q, k, v, **kw) -> (o, lse); `sep` joins the name's parts."""
    from flashcourse import cpu, dense, tiled
    tiles = dict(block_q=block_q, block_k=block_k)
    binds = {f"tiled{sep}fa2": (tiled.forward, dict(loop_order="fa2")),
             f"tiled{sep}fa1": (tiled.forward, dict(loop_order="fa1")),
             f"cpu{sep}loops": (cpu.forward_loops, {}), f"cpu{sep}rows": (cpu.forward_rows, {}),
             f"cpu{sep}cols": (cpu.forward, {})}

    def bind(fn, fixed):
        return lambda q, k, v, **kw: fn(q, k, v, **tiles, **fixed, **kw)
    return {"dense": dense.forward, **{name: bind(*b) for name, b in binds.items()}}


def make_qkv(rng, lead, tq, tk, d, dtype=np.float64, spread=1.0):
    """Random q (lead, Tq, d), k, v (lead, Tk, d), normal with std `spread`."""
    q = (rng.standard_normal((*lead, tq, d)) * spread).astype(dtype)
    k = (rng.standard_normal((*lead, tk, d)) * spread).astype(dtype)
    v = rng.standard_normal((*lead, tk, d)).astype(dtype)
    return q, k, v


def output_term_scale(q, k, v, causal=False, scale=None) -> float:
    """||P |V|||: the size of the terms each output row O_i = sum_j P_ij V_j adds up."""
    from flashcourse import reference

    s = reference.scores(q, k, causal=causal, scale=scale)           # (..., Tq, Tk)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0))
    total = p.sum(axis=-1, keepdims=True)
    p /= np.where(total > 0, total, 1)
    return float(np.linalg.norm(p @ np.abs(v.astype(np.float64))))


def assert_close_to_reference(o, lse, o_ref, lse_ref, dtype, inputs=None):
    """o and lse match the float64 reference within TOL[dtype]; -inf rows agree exactly.

    o: relative error ||o - o_ref|| / ||o_ref||. With `inputs=(q, k, v, causal, scale)`
    the denominator is ||P |V||| instead, the size of the terms the output sums: an
    output that nearly cancels (tiny Tk and d, fp16) says nothing about rounding by
    its own norm, and ||P |V||| >= ||o_ref|| always, so nothing else is loosened.
    lse: |lse - lse_ref| <= tol * (1 + |lse_ref|) per row (an absolute error on lse is
    a relative error on exp(lse) = the row's sum of exp(scores)).
    """
    tol = TOL[np.dtype(dtype).type]
    assert o.shape == o_ref.shape
    assert lse.shape == lse_ref.shape
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    empty = np.isneginf(lse_ref)
    assert np.array_equal(np.isneginf(lse), empty), "masked rows must have lse = -inf"
    assert np.all(o[empty] == 0), "rows with no visible key must output 0"
    err = rel_err(o, o_ref)
    if inputs is not None:
        size = output_term_scale(*inputs)
        if size > 0:
            err = float(np.linalg.norm(o.astype(np.float64) - o_ref) / size)
    assert err <= tol, f"o error {err:.3g} > {tol}"
    if (~empty).any():
        got, want = lse[~empty].astype(np.float64), lse_ref[~empty]
        worst = float(np.max(np.abs(got - want) / (1 + np.abs(want))))
        assert worst <= tol, f"lse error {worst:.3g} > {tol}"


def assert_kernels_cached_by_contents(forward, kernels: dict, key_at: int, d: int,
                                      block: int) -> None:
    """A variants forward compiles one kernel per mask contents, not per mask object: the same
    mask (document [0, 3, 6] and causal, Tq = Tk = 6) built twice, two closures, runs
    `forward` (head dim `d`, `block` x `block` tiles) and leaves one key of `kernels` (the
    module's kernel cache) whose entry `key_at` is its fingerprint. The block masks are built
    past their own cache (cache=False), which would hand back the first mask object."""
    from flashcourse.variants import library as lib, mods
    from flashcourse.variants.block_mask import create_block_mask
    q = np.random.default_rng(0).standard_normal((1, 1, 6, d)).astype(np.float32)
    masks = [create_block_mask(mods.and_masks(lib.document([0, 3, 6]), lib.causal(6, 6)),
                               None, None, 6, 6, block, block, cache=False) for _ in range(2)]
    assert masks[0].mask_mod is not masks[1].mask_mod
    for bm in masks:
        forward(q, q, q, block_mask=bm)
    key = mods.fingerprint(masks[0].mask_mod)
    assert len([k for k in kernels if k[key_at] == key]) == 1


def wait_until_ready(proc, probe, what: str, timeout_s: float, log_tail, interval_s: float):
    """Poll `probe()` (raises OSError until the server answers) while `proc` runs; a clear
    RuntimeError with the server's log tail if it exits first or is not ready in time."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before it was "
                               f"ready\n{log_tail()}")
        try:
            probe()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after {timeout_s} s\n"
                                   f"{log_tail()}") from None
            time.sleep(interval_s)


@contextmanager
def build_flags(module, clear, **flags):
    """Inside the block, the module-level build flags `flags` of `module` (read when its
    kernels are built) have the given values; `clear` (a kernel cache's cache_clear) runs
    after they are set and again after they are restored, so no kernel built with the
    block's flags outlives it."""
    keep = {name: getattr(module, name) for name in flags}
    for name, value in flags.items():
        setattr(module, name, value)
    clear()
    try:
        yield
    finally:
        for name, value in keep.items():
            setattr(module, name, value)
        clear()


def quiz_error_without_blocking(path, fifo) -> str:
    """The QuizFileError message of `load_questions(path)` ("" if none), the load run in a
    thread so that an open blocking on the FIFO `fifo` cannot hang pytest: after 5 s the
    FIFO's write end is opened (which unblocks it) and the test fails."""
    import os
    import threading

    import pytest

    from flashcourse.quiz import QuizFileError, load_questions
    box = {"error": ""}

    def load():
        try:
            load_questions(path)
        except QuizFileError as exc:
            box["error"] = str(exc)
    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():                                    # unblock it: open the write end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"load_questions blocked on {path} (a FIFO or a link to one)")
    return box["error"]
