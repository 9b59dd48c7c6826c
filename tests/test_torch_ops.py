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
