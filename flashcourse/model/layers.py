"""The layers of a small GPT in numpy, each with its forward and its backward written out.

Every layer is a `Layer`: `forward(x)` computes the output and keeps in `self.saved` what
its backward needs (the *activations saved for the backward*); `backward(dy)` takes the
gradient of the loss with respect to the output, dy = dL/dy (same shape as y), adds the
gradients of the layer's parameters into `self.grads` and returns dL/dx. A layer is used
once per forward (the GPT has one instance per use), so `saved` holds one call.

Shapes: B sequences of T positions, C = n_embd features, V = vocabulary size,
H heads of hd = C / H features. Arrays are float64 or float32 (the model's dtype);
token ids are integers.

    Embedding      idx (B, T) -> W[idx] (B, T, C)
    LayerNorm      (..., C) -> (x - mean) / sqrt(var + eps) * g + b
    Linear         (..., Cin) -> x W + b (..., Cout)
    GELU           elementwise, the tanh form of GPT-2
    MLP            Linear(C, 4C) -> GELU -> Linear(4C, C)
    cross_entropy  logits (N, V), targets (N,) -> mean loss, dlogits

The attention layer (its softmax is where FlashAttention acts) is in `model.attention`.
Each backward is checked against central differences in float64 (tests/test_model.py).
"""

from __future__ import annotations

import math

import numpy as np

#: GPT-2's initialisation: weights ~ N(0, 0.02^2)
INIT_STD = 0.02


class Layer:
    """Parameters (`params`), their gradients (`grads`, same keys, accumulated by
    `backward` until `zero_grad`), and what the last forward saved (`saved`)."""

    def __init__(self):
        self.params: dict[str, np.ndarray] = {}
        self.grads: dict[str, np.ndarray] = {}
        self.saved: dict[str, np.ndarray] = {}

    def _param(self, name: str, value: np.ndarray) -> None:
        self.params[name] = value
        self.grads[name] = np.zeros_like(value)

    def zero_grad(self) -> None:
        for g in self.grads.values():
            g[...] = 0

    def saved_bytes(self) -> int:
        """Bytes of the arrays kept by the last forward for the backward."""
        return sum(a.nbytes for a in self.saved.values() if isinstance(a, np.ndarray))


class Embedding(Layer):
    """A table of n rows of C numbers: token (or position) ids -> their rows."""

    def __init__(self, n: int, c: int, rng, dtype):
        super().__init__()
        self._param("W", (INIT_STD * rng.standard_normal((n, c))).astype(dtype))   # (n, C)

    def forward(self, idx):
        self.saved = {"idx": idx}
        return self.params["W"][idx]                                   # (..., C)

    def backward(self, dy):
        # a row used at several positions gets the sum of their gradients
        np.add.at(self.grads["W"], self.saved["idx"], dy)
        return None                                                    # ids have no gradient


class LayerNorm(Layer):
    """y = (x - mu) / sigma * g + b over the last axis, sigma = sqrt(var + eps).

    Backward, with xhat = (x - mu) / sigma and dxhat = dy * g (N = C features):
        dg = sum dy * xhat,   db = sum dy   (over every axis but the last)
        dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sigma
    """

    def __init__(self, c: int, dtype, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self._param("g", np.ones(c, dtype=dtype))
        self._param("b", np.zeros(c, dtype=dtype))

    def forward(self, x):
        mu = x.mean(axis=-1, keepdims=True)                            # (..., 1)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)             # (..., 1)
        rstd = 1.0 / np.sqrt(var + self.eps)                           # (..., 1)
        xhat = (x - mu) * rstd                                         # (..., C)
        self.saved = {"xhat": xhat, "rstd": rstd}
        return xhat * self.params["g"] + self.params["b"]

    def backward(self, dy):
        xhat, rstd = self.saved["xhat"], self.saved["rstd"]
        axes = tuple(range(dy.ndim - 1))
        self.grads["g"] += (dy * xhat).sum(axis=axes)
        self.grads["b"] += dy.sum(axis=axes)
        dxhat = dy * self.params["g"]                                  # (..., C)
        return (dxhat - dxhat.mean(axis=-1, keepdims=True)
                - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)) * rstd


class Linear(Layer):
    """y = x W + b, W (Cin, Cout). Backward: dW = x^T dy, db = sum dy, dx = dy W^T."""

    def __init__(self, c_in: int, c_out: int, rng, dtype, *, bias: bool = True,
                 std: float = INIT_STD):
        super().__init__()
        self._param("W", (std * rng.standard_normal((c_in, c_out))).astype(dtype))
        if bias:
            self._param("b", np.zeros(c_out, dtype=dtype))

    def forward(self, x):
        self.saved = {"x": x}
        y = x @ self.params["W"]                                       # (..., Cout)
        return y + self.params["b"] if "b" in self.params else y

    def backward(self, dy):
        x = self.saved["x"]
        c_in, c_out = self.params["W"].shape
        self.grads["W"] += x.reshape(-1, c_in).T @ dy.reshape(-1, c_out)   # (Cin, Cout)
        if "b" in self.params:
            self.grads["b"] += dy.reshape(-1, c_out).sum(axis=0)
        return dy @ self.params["W"].T                                 # (..., Cin)


_GELU_A = 0.044715
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class GELU(Layer):
    """GPT-2's GELU, the tanh form: y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).

    dy/dx = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
    """

    def forward(self, x):
        t = np.tanh(_SQRT_2_OVER_PI * (x + _GELU_A * (x * x * x)))
        self.saved = {"x": x, "t": t}
        return 0.5 * x * (1.0 + t)

    def backward(self, dy):
        x, t = self.saved["x"], self.saved["t"]
        du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_A * (x * x))
        return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


class MLP(Layer):
    """Linear(C, 4C) -> GELU -> Linear(4C, C): the feed-forward half of a block.
    `proj_std`: the second layer's initial spread (GPT-2 scales it by 1/sqrt(2 n_layer))."""

    def __init__(self, c: int, rng, dtype, proj_std: float = INIT_STD):
        super().__init__()
        self.fc = Linear(c, 4 * c, rng, dtype)
        self.act = GELU()
        self.proj = Linear(4 * c, c, rng, dtype, std=proj_std)

    def layers(self):
        return [self.fc, self.act, self.proj]

    def forward(self, x):
        return self.proj.forward(self.act.forward(self.fc.forward(x)))

    def backward(self, dy):
        return self.fc.backward(self.act.backward(self.proj.backward(dy)))


def cross_entropy(logits, targets):
    """Mean cross-entropy of next-token predictions, and its gradient.

    logits: (N, V) scores; targets: (N,) integer ids in [0, V).
    loss = mean_n (lse(logits_n) - logits_n[target_n]), in nats per token;
    dlogits = (softmax(logits) - onehot(targets)) / N, shape (N, V).
    """
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy takes logits (N, V) and targets (N,), got "
                         f"{logits.shape} and {targets.shape}")
    if not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"targets must be integer token ids, got dtype {targets.dtype}")
    n, v = logits.shape
    if n and (targets.min() < 0 or targets.max() >= v):
        raise ValueError(f"targets must be token ids in [0, {v}), got values in "
                         f"[{targets.min()}, {targets.max()}]")
    m = logits.max(axis=1, keepdims=True)                             # (N, 1)
    e = np.exp(logits - m)                                            # (N, V)
    total = e.sum(axis=1, keepdims=True)                              # (N, 1)
    lse = m[:, 0] + np.log(total[:, 0])                               # (N,)
    rows = np.arange(n)
    loss = float((lse - logits[rows, targets]).mean())
    dlogits = e / total                                               # (N, V) softmax
    dlogits[rows, targets] -= 1.0
    return loss, dlogits / n
