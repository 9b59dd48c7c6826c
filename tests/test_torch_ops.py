"""flashcourse.torch_ops: the course's attention as PyTorch custom operators. Runs where
PyTorch is installed (requirements-train.txt); skipped cleanly where it is not. Without a
GPU the operators take their CPU path (the numpy tiled forward and backward)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flashcourse import reference, torch_ops  # noqa: E402


def _qkv(dtype=torch.float64, b=2, h=3, tq=37, tk=37, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, d, generator=g, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(b, h, tk, d, generator=g, dtype=dtype, requires_grad=True)
            for _ in range(2))
    return q, k, v


def test_forward_and_gradients_match_the_float64_reference():
    """Ragged T (37 on 64-wide tiles), odd d, causal; float64: 1e-12 relative."""
    q, k, v = _qkv()
    o = torch_ops.attention(q, k, v, causal=True)
    do = torch.randn_like(o)
    o.backward(do)
    arr = [t.detach().numpy() for t in (q, k, v)]
    o_ref, _ = reference.attention(*arr, causal=True)
    g_ref = reference.attention_backward(*arr, do.numpy(), causal=True)
    rel = lambda a, r: np.linalg.norm(a - r) / np.linalg.norm(r)
    assert rel(o.detach().numpy(), o_ref) < 1e-12
    for t, r in zip((q, k, v), g_ref):
        assert rel(t.grad.numpy(), r) < 1e-12


def test_gradcheck_float64():
    q, k, v = _qkv(tq=6, tk=6, d=3)
    assert torch.autograd.gradcheck(lambda a, b, c: torch_ops.attention(a, b, c, causal=True),
                                    (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck_passes_for_both_operators(dtype):
    q, k, v = _qkv(dtype, tq=19, tk=19, d=8)
    scale = 1 / math.sqrt(8)
    torch.library.opcheck(torch_ops.attention_forward, (q, k, v, True, scale))
    o, lse = torch_ops.attention_forward(q, k, v, True, scale)
    assert o.dtype == dtype and lse.shape == q.shape[:-1]
    args = (q.detach(), k.detach(), v.detach(), o.detach(), lse.detach(), torch.randn_like(o),
            True, scale)
    torch.library.opcheck(torch_ops.attention_backward, args)


def test_compiles_fullgraph_with_no_graph_break():
    q, k, v = _qkv(torch.float32, tq=16, tk=16, d=8)

    def f(a, b, c):
        return (torch_ops.attention(a * 2, b, c, causal=True) ** 2).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    loss = compiled(q, k, v)
    loss.backward()
    want = f(*(t.detach().clone().requires_grad_() for t in (q, k, v)))
    assert torch.allclose(loss, want, rtol=1e-5)
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_bfloat16_on_the_cpu_path_is_computed_in_float32_and_rounded():
    q, k, v = _qkv(torch.bfloat16, tq=9, tk=9, d=4)
    o = torch_ops.attention(q, k, v)
    assert o.dtype == torch.bfloat16
    ref, _ = reference.attention(*(t.detach().float().numpy() for t in (q, k, v)), causal=True)
    assert np.abs(o.detach().float().numpy() - ref).max() < 2e-2


def test_bad_input_gets_one_clear_error():
    q, k, v = _qkv(tq=5, tk=5)
    with pytest.raises(ValueError, match=r"q must be \(B, H, T, d\)"):
        torch_ops.attention(q[0], k, v)
    with pytest.raises(TypeError, match="one dtype"):
        torch_ops.attention(q.float(), k, v)


# -- the fast path on CUDA tensors (`torch_ops._planned`), with stand-ins -------------------
# A GPU replays the recorded kernels (benchmarks/gpu_train.py compares it with the checked
# path there); here CPU tensors stand in for CUDA ones, and a stand-in plan records what
# the operators ask of it.

class StandInPlan:
    def __init__(self, outputs):
        self.outputs, self.replays = outputs, []

    def replay(self, ptrs, stream, outs):
        self.replays.append((list(ptrs), stream, [o.data_ptr() for o in outs]))
        for o in outs:
            o.fill_(7)
        return outs


def _spec(shape, dtype):
    a = np.empty(shape, dtype)
    return shape, a.strides, a.dtype, a.nbytes


@pytest.fixture
def fast_path(monkeypatch):
    from types import SimpleNamespace

    from flashcourse.cuda.common import host_plans
    built, checked = [], []
    stream = SimpleNamespace(cuda_stream=0)
    monkeypatch.setattr(host_plans, "enabled", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    monkeypatch.setattr(torch_ops, "_to_numba", lambda t: t)
    monkeypatch.setattr(torch_ops, "_from_numba", lambda a, dtype: a)
    monkeypatch.setattr(torch_ops, "_PLANS", {})
    monkeypatch.setattr(torch_ops, "_UNPLANNED", set())

    def build_plan(ptrs, slow):
        result = slow()
        plan = StandInPlan([_spec(tuple(r.shape), np.float32) for r in result])
        built.append((list(ptrs), plan))
        return result, plan
    monkeypatch.setattr(host_plans, "build_plan", build_plan)

    def call(*ts, entry=("forward", "k", True, 0.5), dtypes=(torch.float32, torch.float32)):
        def run(arrays):
            checked.append(arrays)
            return tuple(torch.zeros_like(a) for a in arrays[:len(dtypes)])
        return torch_ops._planned(entry, ts, dtypes, run)
    return SimpleNamespace(call=call, built=built, checked=checked, stream=stream)


def _tensors(*shapes):
    return tuple(torch.randn(s) for s in shapes)


def test_first_call_runs_the_checked_path_later_calls_replay_its_plan(fast_path):
    ts = _tensors((2, 3, 8, 4), (2, 3, 8, 4))
    first = fast_path.call(*ts)
    assert len(fast_path.checked) == 1 and len(fast_path.built) == 1
    assert fast_path.built[0][0] == [t.data_ptr() for t in ts]
    assert all(float(o.abs().max()) == 0 for o in first)             # the checked path's
    moved = _tensors((2, 3, 8, 4), (2, 3, 8, 4))
    outs = fast_path.call(*moved)
    plan = fast_path.built[0][1]
    assert len(fast_path.checked) == 1                                # not run again
    assert plan.replays[0][0] == [t.data_ptr() for t in moved] and plan.replays[0][1] == 0
    assert [o.shape for o in outs] == [t.shape for t in moved]
    assert all(o.dtype == torch.float32 and float(o.min()) == 7 for o in outs)
    assert plan.replays[0][2] == [o.data_ptr() for o in outs]         # into PyTorch's tensors


@pytest.mark.parametrize("change", ["shape", "dtype", "aliasing", "settings"])
def test_another_key_builds_another_plan(fast_path, change):
    ts = _tensors((2, 3, 8, 4), (2, 3, 8, 4))
    fast_path.call(*ts)
    other = {"shape": lambda: fast_path.call(*_tensors((2, 3, 9, 4), (2, 3, 9, 4))),
             "dtype": lambda: fast_path.call(*(t.double() for t in _tensors((2, 3, 8, 4),
                                                                              (2, 3, 8, 4)))),
             "aliasing": lambda: fast_path.call(ts[0], ts[0]),
             "settings": lambda: fast_path.call(*ts, entry=("forward", "k", False, 0.5))}
    other[change]()
    assert len(fast_path.built) == 2 and len(fast_path.checked) == 2


def test_outputs_pytorch_cannot_stand_in_for_keep_the_checked_path(fast_path):
    """A plan whose outputs are not C-contiguous arrays of the operator's dtypes' sizes is
    not kept: every call takes the checked path."""
    ts = _tensors((2, 3, 8, 4), (2, 3, 8, 4))
    for _ in range(3):
        fast_path.call(*ts, dtypes=(torch.float16, torch.float32))   # plan: float32 outputs
    assert len(fast_path.checked) == 3 and len(fast_path.built) == 1


def test_another_stream_takes_the_checked_path(fast_path):
    fast_path.stream.cuda_stream = 12345
    ts = _tensors((2, 3, 8, 4), (2, 3, 8, 4))
    for _ in range(2):
        fast_path.call(*ts)
    assert len(fast_path.checked) == 2 and fast_path.built == []
