"""One contract for every attention implementation, forward and backward.

Every forward (numpy tiled in both loop orders, numpy dense, the three Numba CPU
versions, each registered CUDA kernel) and every backward (numpy tiled, each registered
CUDA kernel) must
  - match the float64 reference on irregular shapes (Tq != Tk both ways, lengths not
    multiples of the tiles, odd d, batch dimensions, causal rows that see no key:
    o = 0 and lse = -inf, zero gradients), within TOL[float32] (inputs are float32),
    and on scores of +-1e4 (where exp overflows without the running max);
  - reject every entry of the bad-input table with the same error naming the argument
    (all of them validate through `flashcourse._checks.flatten_heads`).
CUDA kernels run on Numba's simulator without a GPU: the shapes stay tiny (a few 8 x 8
tiles; the simulator runs ~7k threads/s).
"""

import numpy as np
import pytest

from flashcourse import cpu, reference, tiled
from flashcourse import cuda as fc_cuda
from flashcourse.cuda.registry import BACKWARD, FORWARD
from flashcourse.gpu import using_simulator
from helpers import assert_close_to_reference, cpu_forwards, make_qkv, rel_err

SIM = using_simulator()
#: tiles small enough that the tiny shapes below span several of them on the simulator
CUDA_FORWARD_OPTIONS = {"flash": dict(block_q=8, block_k=8, threads=16, tm=2) if SIM else {},
                        "textbook": dict(block_q=8) if SIM else {}}


def _cuda_forward(name):
    def run(q, k, v, **kw):
        return fc_cuda.forward(q, k, v, kernel=name, **CUDA_FORWARD_OPTIONS.get(name, {}),
                               **kw)
    return run


#: the tolerance (by dtype, `helpers.TOL`) of each forward whose kernel computes in 16 bits
#: whatever the inputs: the Hopper kernel rounds float32 inputs to bf16 (its precision for
#: them); every other forward is held to float32's
FORWARD_TOL_DTYPE = {"cuda-hopper": np.float16}

#: options the contract's float32 problems need per backward kernel
CUDA_BACKWARD_OPTIONS = {"tensor_core": dict(precision="bf16")}
#: gradient tolerance vs float64 per backward (bf16 rounds the inputs, P and dS)
BACKWARD_TOL = {"cuda-tensor_core": 3e-2, "cuda-hopper": 3e-2}


def _cuda_backward(name):
    def run(*args, **kw):
        return fc_cuda.backward(*args, kernel=name, **CUDA_BACKWARD_OPTIONS.get(name, {}), **kw)
    return run


FORWARDS = {**cpu_forwards(4, 3), **{f"cuda-{name}": _cuda_forward(name)
                                     for name, k in FORWARD.items() if k.simulator}}
BACKWARDS = {
    "tiled": lambda *a, **kw: tiled.backward(*a, block_q=4, block_k=3, **kw),
    **{f"cuda-{name}": _cuda_backward(name) for name in BACKWARD},
}

# (lead dims, Tq, Tk, d, causal): ragged tiles, Tq != Tk both ways, odd d, batch dims,
# and causal with Tq > Tk so that the first rows see no key at all.
SHAPES = [
    ((2,), 13, 11, 5, False),
    ((1,), 9, 14, 7, True),
    ((2, 1), 14, 9, 4, True),       # rows 0..4 see no key (Tk - Tq = -5)
    ((), 1, 1, 3, False),
]


@pytest.mark.parametrize("impl", list(FORWARDS))
@pytest.mark.parametrize("lead,tq,tk,d,causal", SHAPES)
def test_forward_matches_reference(impl, lead, tq, tk, d, causal):
    """float32 inputs: o and lse within TOL[float32]; empty rows o = 0, lse = -inf."""
    rng = np.random.default_rng(abs(hash((impl, tq, tk, d, causal))) % 2**32)
    q, k, v = make_qkv(rng, lead, tq, tk, d, dtype=np.float32)
    o, lse = FORWARDS[impl](q, k, v, causal=causal)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
    assert o.dtype == np.float32 and lse.dtype == np.float32
    assert o.shape == q.shape and lse.shape == q.shape[:-1]
    assert_close_to_reference(o, lse, o_ref, lse_ref, FORWARD_TOL_DTYPE.get(impl, np.float32))


@pytest.mark.parametrize("impl,dtype", [(impl, dtype) for impl in FORWARDS
                                         for dtype in (np.float32, np.float64)
                                         if dtype == np.float32 or not impl.startswith("cuda")])
def test_forward_extreme_scores(impl, dtype):
    """Scores of +-1e4 after scaling: exp would overflow without the running max."""
    rng = np.random.default_rng(7)
    q, k, v = make_qkv(rng, (), 19, 23, 4, dtype)
    q = (q / np.linalg.norm(q, axis=-1, keepdims=True) * 100).astype(dtype)
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True) * 100).astype(dtype)
    o, lse = FORWARDS[impl](q, k, v, scale=1.0)
    o_ref, lse_ref = reference.attention(q, k, v, scale=1.0)
    assert np.abs(lse_ref).max() > 5e3
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(lse))
    assert_close_to_reference(o, lse, o_ref, lse_ref, FORWARD_TOL_DTYPE.get(impl, dtype))


def _backward_problem(lead, tq, tk, d, causal, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = make_qkv(rng, lead, tq, tk, d, dtype=np.float32)
    do = rng.standard_normal((*lead, tq, d)).astype(np.float32)
    o, lse = reference.attention(q, k, v, causal=causal)
    return q, k, v, o.astype(np.float32), lse.astype(np.float32), do


@pytest.mark.parametrize("impl", list(BACKWARDS))
@pytest.mark.parametrize("lead,tq,tk,d,causal", SHAPES[:3])
def test_backward_matches_reference(impl, lead, tq, tk, d, causal):
    """float32: each gradient within 1e-4 relative (fp32 accumulation over Tq or Tk terms);
    rows that see no key contribute nothing (dq = 0 there)."""
    problem = _backward_problem(lead, tq, tk, d, causal, seed=tq * 100 + tk)
    got = BACKWARDS[impl](*problem, causal=causal)
    q, k, v, _, lse, do = problem
    ref = reference.attention_backward(q, k, v, do, causal=causal)
    tol = BACKWARD_TOL.get(impl, 1e-4)
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert g.shape == r.shape and g.dtype == np.float32, name
        assert rel_err(g, r) <= tol, f"{impl} {name}: {rel_err(g, r):.3g}"
    empty = np.isneginf(lse)
    assert np.all(got[0][empty] == 0)


# --- the shared bad-input tables -------------------------------------------------------

def good_forward():
    return make_qkv(np.random.default_rng(0), (), 6, 5, 4, np.float32)


BAD_ARRAYS = [
    (lambda q, k, v: (q.tolist(), k, v), TypeError, "q must be a numpy array"),
    (lambda q, k, v: (q, k.astype(np.int32), v), TypeError, "k must have dtype"),
    (lambda q, k, v: (q, k, v.astype(np.float64)), TypeError, "share one dtype"),
    (lambda q, k, v: (q[:, :3], k, v), ValueError, "head dim"),
    (lambda q, k, v: (q, k, v[:4]), ValueError, "v must have the same shape"),
    (lambda q, k, v: (q[None], k, v), ValueError, "number of dimensions"),
    (lambda q, k, v: (q[None].repeat(2, 0), k[None].repeat(3, 0), v[None].repeat(3, 0)),
     ValueError, "leading"),
    (lambda q, k, v: (q[:0], k, v), ValueError, "q must not have an empty axis"),
    (lambda q, k, v: (q[0], k, v), ValueError, "at least 2 dimensions"),
    (lambda q, k, v: (np.where(q == q[0, 0], np.nan, q).astype(q.dtype), k, v), ValueError,
     "q contains NaN or inf"),
]
BLOCKED = {"tiled": tiled.forward, "cpu": cpu.forward, "cpu-rows": cpu.forward_rows,
           "cpu-loops": cpu.forward_loops, "tiled-backward": None}


@pytest.mark.parametrize("impl", ["tiled", "cpu", "cpu-rows", "cpu-loops", "tiled-backward"])
@pytest.mark.parametrize("kwargs,exc,word", [
    (dict(block_q=0), ValueError, "block_q"), (dict(block_k=-3), ValueError, "block_k"),
    (dict(block_q=2.0), TypeError, "block_q"), (dict(block_k=True), TypeError, "block_k"),
])
def test_bad_block_sizes(impl, kwargs, exc, word):
    with pytest.raises(exc, match=word):
        if impl == "tiled-backward":
            tiled.backward(*good_backward(), **kwargs)
        else:
            BLOCKED[impl](*good_forward(), **kwargs)


def good_backward():
    return _backward_problem((), 6, 5, 4, False)


BAD_BACKWARD = [
    (lambda q, k, v, o, l, g: (q, k, v, o[:5], l, g), ValueError, "o must have q's shape"),
    (lambda q, k, v, o, l, g: (q, k, v, o.astype(np.float64), l, g), TypeError, "o must have"),
    (lambda q, k, v, o, l, g: (q, k, v, o.tolist(), l, g), TypeError, "o must be a numpy"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l[:5], g), ValueError, "lse must have shape"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l[:, None], g), ValueError, "lse must have shape"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l.tolist(), g), TypeError, "lse must be a numpy"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l.astype(np.int64), g), TypeError, "lse must have"),
    (lambda q, k, v, o, l, g: (q, k, v, o, np.full_like(l, np.nan), g), ValueError,
     "lse contains NaN"),
    (lambda q, k, v, o, l, g: (q, k, v, o, np.full_like(l, np.inf), g), ValueError,
     r"\+inf"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l, g[:, :3]), ValueError, "do must have the shape"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l, g.astype(np.float16)), TypeError,
     "do must have the dtype"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l, g.astype(np.int32)), TypeError, "do must have"),
    (lambda q, k, v, o, l, g: (q, k, v, o, l, np.full_like(g, np.nan)), ValueError,
     "do contains NaN"),
    (lambda q, k, v, o, l, g: (q, k[:, :3], v, o, l, g), ValueError, "head dim"),
    (lambda q, k, v, o, l, g: (q, k, v[:4], o, l, g), ValueError, "v must have the same"),
]


BAD_ARGUMENTS = [
    (dict(scale=float("nan")), ValueError, "scale"), (dict(scale="1"), TypeError, "scale"),
    (dict(scale=float("inf")), ValueError, "scale"),
    (dict(causal=1), TypeError, "causal"), (dict(causal="yes"), TypeError, "causal"),
    (dict(causal="no"), TypeError, "^causal must be True or False"),
]
#: boolean options accept booleans only (issue 50: "no" was taken as True)
BAD_FORWARD_ARGUMENTS = [
    (dict(allow_nonfinite="no"), TypeError, "^allow_nonfinite must be True or False"),
    (dict(allow_nonfinite=0), TypeError, "^allow_nonfinite must be True or False"),
]
IMPLS = [("forward", name) for name in FORWARDS] + [("backward", name) for name in BACKWARDS]


def call(direction, impl, mutate=None, **kwargs):
    """Run one implementation on the good problem of its direction, mutated."""
    args = good_forward() if direction == "forward" else good_backward()
    fn = FORWARDS[impl] if direction == "forward" else BACKWARDS[impl]
    return fn(*(mutate(*args) if mutate else args), **kwargs)


@pytest.mark.parametrize("direction,impl,mutate,exc,word", [
    (direction, impl, *bad) for direction, impl in IMPLS
    for bad in (BAD_ARRAYS if direction == "forward" else BAD_BACKWARD)])
def test_bad_arrays(direction, impl, mutate, exc, word):
    with pytest.raises(exc, match=word):
        call(direction, impl, mutate)


@pytest.mark.parametrize("direction,impl", IMPLS)
@pytest.mark.parametrize("kwargs,exc,word", BAD_ARGUMENTS)
def test_bad_arguments(direction, impl, kwargs, exc, word):
    with pytest.raises(exc, match=word):
        call(direction, impl, **kwargs)


@pytest.mark.parametrize("impl", FORWARDS)
@pytest.mark.parametrize("kwargs,exc,word", BAD_FORWARD_ARGUMENTS)
def test_bad_forward_arguments(impl, kwargs, exc, word):
    with pytest.raises(exc, match=word):
        call("forward", impl, **kwargs)


def test_one_validator_per_kind_of_argument():
    """`_checks.check_bool`, `check_choice` and `check_whole`: the messages name the
    argument and what was expected."""
    from flashcourse._checks import check_bool, check_choice, check_whole
    assert check_bool(np.True_, "flag") is True and check_bool(None, "f", none_ok=True) is None
    for bad in ("no", "False", 0, 1.0, None, [True]):
        with pytest.raises(TypeError, match=r"^flag must be True or False, got"):
            check_bool(bad, "flag")
    assert check_choice("b", "pick", ("a", "b")) == "b"
    with pytest.raises(ValueError, match=r"^pick must be one of \('a', 'b'\), got 'c'"):
        check_choice("c", "pick", ("a", "b"))
    for bad in (["a"], np.array(["a"]), 1, b"a"):
        with pytest.raises(TypeError, match=r"^pick must be one of \('a', 'b'\) \(a string\)"):
            check_choice(bad, "pick", ("a", "b"))
    assert check_whole(np.int64(0), "n") == 0
    with pytest.raises(TypeError, match=r"^n must be an integer >= 1 \(rows\), got 'x'"):
        check_whole("x", "n", least=1, meaning="rows")
    with pytest.raises(ValueError, match=r"^n must be an integer >= 0, got -1"):
        check_whole(-1, "n")
