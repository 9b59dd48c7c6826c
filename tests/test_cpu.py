"""flashcourse.cpu (Numba) against the float64 reference.

All three kernel versions, `forward` (v3, fast), `forward_rows` (v2) and
`forward_loops` (v1, the scalar lesson), are checked on the same cases.
Tolerances (relative, ||o - o_ref|| / ||o_ref||): float64 1e-12, float32 1e-5,
float16 inputs 1e-2 (helpers.TOL). The vectorised exp2 polynomial is checked on its
own against np.exp2 (float32: one unit in the last place, 2^-23 = 1.19e-7; float64:
1e-15).

Each kernel is compiled once per accumulator dtype (float32, float64) and cached
on disk, so a second run of this file starts in seconds.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import cpu, reference, tiled
from helpers import TOL, assert_close_to_reference, make_qkv, rel_err

KERNELS = {"fast": cpu.forward, "rows": cpu.forward_rows, "loops": cpu.forward_loops}
kernels = pytest.mark.parametrize("name", list(KERNELS))
dtypes = st.sampled_from([np.float64, np.float32, np.float16])


@given(tq=st.integers(1, 40), tk=st.integers(1, 40), d=st.integers(1, 9),
       bq=st.integers(1, 17), bk=st.integers(1, 17), causal=st.booleans(),
       dtype=dtypes, name=st.sampled_from(list(KERNELS)),
       scale=st.one_of(st.none(), st.floats(0.05, 3.0)), seed=st.integers(0, 2**32 - 1))
def test_cpu_matches_reference(tq, tk, d, bq, bk, causal, dtype, name, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v = make_qkv(rng, (), tq, tk, d, dtype)
    o, lse = KERNELS[name](q, k, v, block_q=bq, block_k=bk, causal=causal, scale=scale)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal, scale=scale)
    assert o.dtype == dtype
    assert lse.dtype == (np.float64 if dtype == np.float64 else np.float32)
    assert_close_to_reference(o, lse, o_ref, lse_ref, dtype, inputs=(q, k, v, causal, scale))


@kernels
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq,tk,d,bq,bk", [
    (37, 53, 7, 16, 10),     # ragged tiles, Tq != Tk, odd d
    (130, 70, 64, 64, 256),  # the default-like tile shape, Tq > Tk (causal hides rows)
    (67, 300, 33, 8, 128),   # d not a multiple of 4, Tk > Tq
    (5, 9, 1, 64, 64),       # d = 1, tiles taller and wider than the sequence
])
def test_batched_irregular(rng, name, causal, tq, tk, d, bq, bk):
    q, k, v = make_qkv(rng, (2, 3), tq, tk, d, np.float32)
    o, lse = KERNELS[name](q, k, v, block_q=bq, block_k=bk, causal=causal)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
    assert o.shape == (2, 3, tq, d) and lse.shape == (2, 3, tq)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


@kernels
def test_default_blocks_larger_problem(rng, name):
    # several query blocks of the default Br and key blocks of the default Bc, ragged
    q, k, v = make_qkv(rng, (2,), 301, 517, 64, np.float32)
    for causal in (False, True):
        o, lse = KERNELS[name](q, k, v, causal=causal)
        o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
        assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


@kernels
def test_agrees_with_numpy_tiled_in_float64(rng, name):
    q, k, v = make_qkv(rng, (), 45, 31, 6)
    for causal in (False, True):
        a = KERNELS[name](q, k, v, block_q=8, block_k=6, causal=causal)
        b = tiled.forward(q, k, v, block_q=8, block_k=6, causal=causal)
        assert rel_err(a[0], b[0]) < 1e-13
        assert np.allclose(a[1], b[1], rtol=1e-13, atol=0)


@kernels
def test_fully_masked_rows(rng, name):
    # causal with Tq > Tk: rows 0..13 see no key (j <= i + Tk - Tq = i - 14)
    q, k, v = make_qkv(rng, (), 20, 6, 3, np.float32)
    for bq, bk in ((4, 4), (64, 256), (1, 1)):
        o, lse = KERNELS[name](q, k, v, block_q=bq, block_k=bk, causal=True)
        assert np.all(o[:14] == 0) and np.all(np.isneginf(lse[:14]))
        assert not np.isnan(o).any() and not np.isnan(lse).any()
        o_ref, lse_ref = reference.attention(q, k, v, causal=True)
        assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


@kernels
def test_scale_default_is_inverse_sqrt_d(rng, name):
    q, k, v = make_qkv(rng, (), 5, 5, 16, np.float32)
    a = KERNELS[name](q, k, v)
    b = KERNELS[name](q, k, v, scale=0.25)
    assert np.array_equal(a[0], b[0])
    c = KERNELS[name](q, k, v, scale=0.5)
    assert not np.array_equal(a[0], c[0])                # the scale is really used


def test_interpreted_loops_match_compiled(rng):
    # the same source run by the Python interpreter (the notebook times both)
    q, k, v = make_qkv(rng, (), 9, 11, 3, np.float32)
    a = cpu.forward_loops(q, k, v, block_q=4, block_k=4, causal=True)
    b = cpu.forward_loops(q, k, v, block_q=4, block_k=4, causal=True, compiled=False)
    assert rel_err(a[0], b[0]) < 1e-6 and np.allclose(a[1], b[1], rtol=1e-6)
    with pytest.raises(TypeError, match="compiled"):
        cpu.forward_loops(q, k, v, compiled="no")


def test_dense_numpy_baseline_is_attention(rng):
    # the benchmark's baseline must compute the same thing (float32: 1e-5)
    q, k, v = make_qkv(rng, (), 33, 47, 8, np.float32)
    o_ref, _ = reference.attention(q, k, v, scale=0.3)
    assert rel_err(cpu.dense_numpy(q, k, v, scale=0.3), o_ref) <= TOL[np.float32]
    assert rel_err(cpu.dense_numpy(q, k, v), reference.attention(q, k, v)[0]) <= 1e-5


def test_same_result_with_one_or_two_threads(rng):
    # each query block is computed by one thread alone: the result cannot depend on
    # how blocks are spread over threads (bitwise)
    import numba
    q, k, v = make_qkv(rng, (3,), 700, 650, 16, np.float32)
    before = numba.get_num_threads()
    try:
        results = []
        for n in sorted({1, before}):
            numba.set_num_threads(n)
            results.append(cpu.forward(q, k, v, causal=True))
    finally:
        numba.set_num_threads(before)
    assert all(np.array_equal(r[0], results[0][0]) for r in results)


def test_non_contiguous_inputs(rng):
    q, k, v = make_qkv(rng, (), 40, 30, 8, np.float32)
    qt = np.asfortranarray(q)
    kt = np.ascontiguousarray(k[:, ::-1])[:, ::-1]         # negative strides
    o, lse = cpu.forward(qt, kt, v, block_q=8, block_k=8)
    o_ref, lse_ref = reference.attention(q, k, v)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


# --- the exp2 polynomial and the fast-math flags -----------------------------------

def test_exp2_poly_float32_within_one_ulp():
    x = np.concatenate([-np.linspace(0, 126, 2_000_001), -np.logspace(-9, 0, 2001),
                        [0.0, -0.5, -1.0, -125.5, -126.0]]).astype(np.float32)
    y = cpu.exp2_poly(x)
    ref = np.exp2(x.astype(np.float64))
    assert y.dtype == np.float32
    worst = np.max(np.abs(y - ref) / ref)
    assert worst <= 2.0 ** -23, worst                        # measured ~8e-8
    assert y[-5] == 1.0                                      # exp2(0) exactly 1


def test_exp2_poly_float64():
    x = -np.linspace(0, 1022, 2_000_001)
    y = cpu.exp2_poly(x)
    worst = np.max(np.abs(y - np.exp2(x)) / np.exp2(x))
    assert worst <= 1e-15, worst                             # measured ~5e-16


def test_exp2_poly_clamps_instead_of_underflowing():
    y = cpu.exp2_poly(np.array([-127.0, -1000.0, -np.inf], np.float32))
    assert np.all(y == np.float32(2.0 ** -126))             # tiny, never NaN
    assert np.isfinite(cpu.exp2_poly(np.array([-1e300, -np.inf]))).all()


def test_fastmath_flags_keep_infinities():
    assert "nnan" not in cpu.FASTMATH and "ninf" not in cpu.FASTMATH
    assert "fast" not in cpu.FASTMATH                        # "fast" would imply both


# --- bad input --------------------------------------------------------------------

def good():
    return make_qkv(np.random.default_rng(0), (), 6, 5, 4, np.float32)


@kernels
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_inputs_rejected_unless_allowed(name, bad):
    q, k, v = good()
    k[1, 2] = bad
    with pytest.raises(ValueError, match="k contains NaN or inf"):
        KERNELS[name](q, k, v)
    o, _ = KERNELS[name](q, k, v, allow_nonfinite=True)   # allowed: computes, no error
    assert o.shape == q.shape


# --- on-disk cache with a read-only install ------------------------------------------

def test_cache_works_from_read_only_install():
    """A copy of the package that its user cannot write to still compiles and caches.

    Runs a subprocess as an unprivileged user (root ignores file permissions) or, when
    the tests already run unprivileged, on a chmod'ed read-only copy.
    """
    src = Path(cpu.__file__).resolve().parent
    # not pytest's tmp_path: its parent folder is private to root (mode 700)
    with tempfile.TemporaryDirectory() as tmp:
        _check_read_only_install(src, Path(tmp))


def _check_read_only_install(src, tmp_path):
    pkg_root = tmp_path / "site"
    shutil.copytree(src, pkg_root / "flashcourse",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    home = tmp_path / "home"                                 # does not exist: no ~/.cache
    cache_base = tmp_path / "cache"
    cache_base.mkdir()
    script = textwrap.dedent("""
        import os, sys
        import numpy as np
        import flashcourse.cpu as cpu
        print(os.environ["NUMBA_CACHE_DIR"], os.path.dirname(cpu.__file__))
        print(cpu.exp2_poly(np.array([-1.0], np.float32))[0])
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env.update(PYTHONPATH=str(pkg_root), HOME=str(home), XDG_CACHE_HOME=str(cache_base))
    cmd = [sys.executable, "-c", script]
    if os.geteuid() == 0:  # root ignores permission bits: run as user nobody
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot drop privileges")
        os.chmod(tmp_path, 0o755)
        os.chmod(cache_base, 0o777)                          # the user's own cache folder
        for p in [pkg_root, *pkg_root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)          # readable, owned by root
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        # nobody must be able to load this Python and its numpy and numba: not so when
        # the venv lies under a private folder (a clone in a mode-700 home or mktemp -d)
        probe = subprocess.run([*cmd[:4], sys.executable, "-c", "import numpy, numba"],
                               env=env, cwd=tmp_path, capture_output=True, text=True,
                               timeout=120)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["(no message)"])[-1]
            pytest.skip(f"user nobody cannot import numpy and numba from {sys.prefix} "
                        f"(a private parent folder?): {last[:200]}; the cache-folder "
                        f"choice is tested in-process in tests/test_cache_dir.py")
    else:
        for p in [*pkg_root.rglob("*"), pkg_root]:
            p.chmod(0o555 if p.is_dir() else 0o444)
    for _ in range(2):                                       # compile + write, then load
        out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        cache_dir, where, value = out.stdout.split()
        assert Path(where) == pkg_root / "flashcourse"         # the read-only copy ran
        assert float(value) == 0.5
        assert Path(cache_dir) == cache_base / "flashcourse-numba"
        assert list(Path(cache_dir).rglob("*.nbi")), "no cache index written"
    assert not list((pkg_root / "flashcourse").rglob("*.nbi")), "cache written into package"
    assert not (tmp_path / "numba").exists(), "Numba fell back to ./numba in the cwd"
