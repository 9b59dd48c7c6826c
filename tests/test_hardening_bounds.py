"""Bounded work and clear types for every option (issue 23, part: bounds and types).

1. `num_splits` is a whole number from 1 to min(Tc, 128), Tc = ceil(Tk / block_k) the
   key blocks, in every decode entry (numpy, CUDA, the registered "decode" kernel);
   anything else is refused at once, naming num_splits and Tc.
2. Array subclasses: np.matrix is refused, masked arrays are refused (their mask
   would be ignored), naming the argument.
3. Quiz files: read as UTF-8 bytes; binary, non-UTF-8, directory and FIFO paths give
   an error naming the file (a FIFO never blocks); the cache follows the content.
4. Concurrency: simulated CUDA calls from two threads are serialised.

CUDA kernels run on Numba's simulator here (tiny shapes).
"""

import time

import numpy as np
import pytest

import flashcourse.cuda as fcuda
from flashcourse import decode
from flashcourse.cuda.decoding import decode_kernels

# --- 1. num_splits -----------------------------------------------------------------

def _decode_problem(tk=100, d=8, dtype=np.float32):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 1, d)).astype(dtype)        # Hq = 2, Tq = 1
    k = rng.standard_normal((1, 1, tk, d)).astype(dtype)       # Hkv = 1
    v = rng.standard_normal((1, 1, tk, d)).astype(dtype)
    return q, k, v


DECODES = {
    "numpy": lambda q, k, v, **kw: decode.split_kv_forward(q, k, v, **kw),
    "cuda": lambda q, k, v, **kw: fcuda.decode(q, k, v, **kw),
    "cuda_registered": lambda q, k, v, **kw: fcuda.forward(
        q[:, :1], k, v, kernel="decode", **kw),
}


@pytest.mark.parametrize("name", DECODES)
@pytest.mark.parametrize("num_splits", [10 ** 7, 500])
def test_huge_num_splits_is_refused_fast(name, num_splits):
    """10**7 ran 48 s in numpy and failed there; 500 hung cuda.decode on the simulator."""
    q, k, v = _decode_problem()
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"num_splits = .* key blocks: Tc = ceil\(Tk / "
                                         r"block_k\) = ceil\(100 / 4\) = 25"):
        DECODES[name](q, k, v, num_splits=num_splits, block_k=4)
    assert time.perf_counter() - t0 < 5


def test_num_splits_beyond_the_key_blocks_or_the_cap():
    q, k, v = _decode_problem(tk=20)
    with pytest.raises(ValueError, match=r"ceil\(20 / 4\) = 5"):
        decode.split_kv_forward(q, k, v, num_splits=6, block_k=4)
    o, lse = decode.split_kv_forward(q, k, v, num_splits=5, block_k=4)   # Tc itself: fine
    assert np.isfinite(lse).all()
    with pytest.raises(ValueError, match="MAX_SPLITS = 128"):
        decode.check_num_splits(129, 10_000, 1)
    assert decode.check_num_splits(128, 10_000, 1) == 128
    with pytest.raises(ValueError, match="num_splits"):
        decode.split_bounds(300, 64, 6)                          # Tc = 5
    with pytest.raises(TypeError, match="num_splits"):
        decode.split_kv_forward(q, k, v, num_splits=2.0, block_k=4)
    with pytest.raises(ValueError, match="num_splits"):
        decode_kernels.plan_splits(1, 1, 20, decode_kernels.plan(8, 4, 1, unroll=1, warps=1),
                                   num_splits=6, block_k=4)


# --- 2. array subclasses ------------------------------------------------------------

def _plain(lead=(1, 2), tq=3, tk=5, d=4, dtype=np.float32, seed=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*lead, tq, d)).astype(dtype)
    k = rng.standard_normal((*lead, tk, d)).astype(dtype)
    v = rng.standard_normal((*lead, tk, d)).astype(dtype)
    return q, k, v


def _masked(x):
    mask = np.zeros(x.shape, bool)
    mask[..., 1, :] = True                       # one row hidden: the kernels would use it
    return np.ma.MaskedArray(x, mask=mask)


def _forwards():
    from flashcourse import cpu, dense, reference, tiled
    return {
        "reference": reference.attention,
        "dense": dense.forward,
        "tiled": lambda q, k, v: tiled.forward(q, k, v, block_q=2, block_k=2),
        "cpu": lambda q, k, v: cpu.forward(q, k, v, block_q=4, block_k=4),
        "cpu_loops": lambda q, k, v: cpu.forward_loops(q, k, v, block_q=2, block_k=2),
        "cuda_flash": lambda q, k, v: fcuda.forward(q, k, v, kernel="flash"),
        "cuda_textbook": lambda q, k, v: fcuda.forward(q, k, v, kernel="textbook"),
        "cuda_tensor_core": lambda q, k, v: fcuda.forward(q, k, v, kernel="tensor_core"),
        "decode": lambda q, k, v: decode.split_kv_forward(q, k, v, num_splits=2, block_k=2),
        "cuda_decode": lambda q, k, v: fcuda.decode(q, k, v, num_splits=2, block_k=2),
    }


@pytest.mark.parametrize("name", list(_forwards()))
@pytest.mark.parametrize("arg", ["q", "k", "v"])
def test_masked_arrays_are_refused_naming_the_argument(name, arg):
    """Before: the CPU, CUDA and decode paths ignored the mask; numpy ones crashed."""
    q, k, v = _plain()
    args = dict(q=q, k=k, v=v)
    args[arg] = _masked(args[arg])
    with pytest.raises(TypeError, match=f"^{arg} is a masked array .* fill or drop"):
        _forwards()[name](**args)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("name", [n for n in _forwards() if "decode" not in n])
def test_np_matrix_is_refused_naming_the_argument(name):
    """Before: reference took it, dense/tiled/cpu/cuda failed deep in numpy or Numba."""
    q, k, v = (x[0, 0] for x in _plain())                    # (T, d): a matrix can hold it
    with pytest.raises(TypeError, match=r"^k is a numpy.matrix .* np.asarray\(k\)"):
        _forwards()[name](q, np.asmatrix(k), v)


@pytest.mark.parametrize("name", ["tiled", "cuda_fast", "cuda_simple"])
@pytest.mark.parametrize("arg", ["o", "lse", "do"])
def test_backward_refuses_masked_arrays(name, arg):
    from flashcourse import tiled
    q, k, v = _plain()
    o, lse = tiled.forward(q, k, v, block_q=2, block_k=2)
    args = dict(o=o, lse=lse, do=np.ones_like(o))
    args[arg] = np.ma.MaskedArray(args[arg], mask=np.zeros(args[arg].shape, bool))
    backward = {"tiled": lambda *a: tiled.backward(*a, block_q=2, block_k=2),
                "cuda_fast": lambda *a: fcuda.backward(*a, kernel="fast"),
                "cuda_simple": lambda *a: fcuda.backward(*a, kernel="simple")}[name]
    with pytest.raises(TypeError, match=f"^{arg} is a masked array"):
        backward(q, k, v, args["o"], args["lse"], args["do"])


def test_small_entries_refuse_masked_arrays():
    from flashcourse import cpu, reference
    q, k, v = (x[0, 0].astype(np.float64) for x in _plain())
    mask = np.ones((3, 5), bool)
    with pytest.raises(TypeError, match="^mask is a masked array"):
        reference.attention_with_mask(q, k, v, np.ma.MaskedArray(mask))
    with pytest.raises(TypeError, match="^x is a masked array"):
        reference.softmax_safe(np.ma.MaskedArray(np.ones(4)))
    with pytest.raises(TypeError, match="^x is a masked array"):
        cpu.exp2_poly(np.ma.MaskedArray(-np.ones(4)))
    o_parts, lse_parts = np.zeros((2, 3, 4)), np.zeros((2, 3))
    with pytest.raises(TypeError, match="^lse_parts is a masked array"):
        decode.combine(o_parts, np.ma.MaskedArray(lse_parts))
    with pytest.raises(TypeError, match="^o_parts is a masked array"):
        decode.merge_tree(np.ma.MaskedArray(o_parts), lse_parts)
    with pytest.raises(TypeError, match="^lse_b is a masked array"):
        decode.merge(o_parts[0], lse_parts[0], o_parts[1], np.ma.MaskedArray(lse_parts[1]))


def test_memmap_and_plain_views_still_work(tmp_path):
    """Other ndarray subclasses (np.memmap) behave as arrays and are taken as they are."""
    from flashcourse import reference, tiled
    q, k, v = (x.astype(np.float64) for x in _plain())
    mm = np.memmap(tmp_path / "k.bin", dtype=np.float64, mode="w+", shape=k.shape)
    mm[:] = k
    o, lse = tiled.forward(q, mm, v, block_q=2, block_k=2)
    o_ref, lse_ref = reference.attention(q, k, v)
    assert np.allclose(o, o_ref, rtol=1e-12, atol=0) and np.allclose(lse, lse_ref, rtol=1e-12)


# --- 3. quiz files -------------------------------------------------------------------

QUIZ = """
[[question]]
text = "First?"
why = "Because."
option = [{text = "right one", right = true}, {text = "wrong one", feedback = "No."}]
"""


@pytest.mark.parametrize("content, message", [
    ("Latin-1: café".encode("latin-1"), r"not UTF-8 text \(byte 0xe9 at offset 12, line 1\)"),
    (QUIZ.encode("utf-16"), r"contains a NUL byte|not UTF-8 text"),
    (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", r"not UTF-8 text|contains a NUL byte"),
    (QUIZ.encode() + b"\0", r"contains a NUL byte at offset"),
], ids=["latin-1", "utf-16", "png", "nul"])
def test_quiz_files_that_are_not_utf8_text_are_named(tmp_path, content, message):
    from flashcourse.quiz import QuizFileError, load_questions
    path = tmp_path / "nb98.toml"
    path.write_bytes(content)
    with pytest.raises(QuizFileError, match=r"nb98.toml: " + message):
        load_questions(path)


def test_quiz_file_utf8_with_bom_and_accents_loads(tmp_path):
    from flashcourse.quiz import load_questions
    path = tmp_path / "nb98.toml"
    path.write_bytes(b"\xef\xbb\xbf" + QUIZ.replace("First?", "Première?").encode())
    assert load_questions(path)[0].text == "Première?"


def test_quiz_paths_that_are_not_regular_files_are_named(tmp_path):
    import os

    from flashcourse.quiz import QuizFileError, load_questions
    from helpers import quiz_error_without_blocking
    (tmp_path / "nb97.toml").mkdir()
    with pytest.raises(QuizFileError, match=r"nb97.toml: is a directory"):
        load_questions(tmp_path / "nb97.toml")
    fifo = tmp_path / "nb96.toml"
    os.mkfifo(fifo)
    assert "nb96.toml: not a regular file (a FIFO" in quiz_error_without_blocking(fifo, fifo)
    with pytest.raises(QuizFileError, match=r"null: not a regular file"):
        load_questions("/dev/null")


def test_quiz_cache_follows_the_content_not_the_mtime(tmp_path):
    import os

    from flashcourse.quiz import load_questions
    path = tmp_path / "nb98.toml"
    path.write_text(QUIZ)
    before = path.stat()
    assert load_questions(path)[0].text == "First?"
    path.write_text(QUIZ.replace("First?", "Second"))   # the same length, the same mtime
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert load_questions(path)[0].text == "Second"


# --- 4. threads ----------------------------------------------------------------------

def _in_threads(jobs):
    """Run each job (a no-argument callable) in its own thread, all released together;
    returns what each returned, or raises the first exception one raised."""
    import threading
    start = threading.Barrier(len(jobs))
    out = [None] * len(jobs)

    def run(i):
        start.wait()
        try:
            out[i] = jobs[i]()
        except BaseException as exc:        # handed to the main thread below
            out[i] = exc
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return out


def test_simulated_cuda_calls_from_two_threads_are_right():
    """Before: the second thread's launch failed, 'concurrent simulated kernel not
    supported' (the simulator swaps module globals while a kernel runs)."""
    from flashcourse import reference
    from flashcourse.gpu import using_simulator
    if not using_simulator():
        pytest.skip("serialisation is for the simulator; a GPU runs calls as they come")
    problems = [_plain(lead=(1,), tq=3, tk=5, d=4, seed=s) for s in range(2)]
    dq = _plain(lead=(1, 2), tq=1, tk=6, d=4, seed=5)

    def flash(q, k, v):
        return lambda: [fcuda.forward(q, k, v, kernel="flash") for _ in range(2)]
    results = _in_threads([flash(*problems[0]), flash(*problems[1]),
                           lambda: fcuda.decode(*dq, num_splits=2, block_k=2)])
    for (q, k, v), runs in zip(problems, results[:2]):
        o_ref, lse_ref = reference.attention(q, k, v)
        for o, lse in runs:
            assert np.allclose(o, o_ref, rtol=0, atol=1e-5)     # float32: 1e-5
            assert np.allclose(lse, lse_ref, rtol=1e-5, atol=0)
    o, _ = results[2]
    assert np.allclose(o, reference.attention(*dq)[0], rtol=0, atol=1e-5)


CPU_THREADS = """
import threading, numpy as np, flashcourse
from flashcourse import cpu, reference
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((2, 33, 8)).astype(np.float32) for _ in range(3))
cpu.forward(q, k, v)                       # compile (or load from the cache) first
ref = reference.attention(q, k, v)[0]
bad = []
def run():
    for _ in range(20):
        if not np.allclose(cpu.forward(q, k, v, block_q=4, block_k=8)[0], ref, atol=1e-5):
            bad.append(1)
ts = [threading.Thread(target=run) for _ in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
import numba
print("layer", numba.threading_layer(), "bad", len(bad))
"""


def test_cpu_kernels_from_two_threads_under_the_workqueue_layer():
    """Before: Numba's workqueue layer terminated the process ("Concurrent access has
    been detected"); now the parallel kernels take turns."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue", "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-c", CPU_THREADS], cwd=root, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "layer workqueue bad 0" in r.stdout, r.stdout + r.stderr
