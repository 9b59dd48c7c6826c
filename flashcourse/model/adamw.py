"""AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization", 2019) and gradient
clipping by the global norm, in numpy, as `torch.optim.AdamW` and nanoGPT use them.

For each parameter p with gradient g, at step t = 1, 2, ...:

    p <- p - lr * wd * p                          decoupled weight decay (matrices only)
    m <- b1 m + (1 - b1) g                        first moment
    v <- b2 v + (1 - b2) g^2                      second moment
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

Weight decay applies to parameters with two or more axes (weight matrices and embedding
tables), not to biases and LayerNorm gains, as in nanoGPT's `configure_optimizers`.
"""

from __future__ import annotations

import numpy as np


class AdamW:
    """params: a list of (name, parameter, gradient) arrays; the parameters are updated in
    place by `step()`, from the gradients as they are at that moment."""

    def __init__(self, params, *, lr: float = 1e-3, betas=(0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float = 0.1):
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.m = [np.zeros_like(p) for _, p, _ in self.params]
        self.v = [np.zeros_like(p) for _, p, _ in self.params]
        self.t = 0

    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for (_, p, g), m, v in zip(self.params, self.m, self.v):
            if p.ndim >= 2 and self.weight_decay:
                p -= self.lr * self.weight_decay * p
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


def clip_grad_norm(grads, max_norm: float) -> float:
    """Scale every gradient by min(1, max_norm / norm), norm = sqrt(sum of all g^2);
    return the norm before clipping (as `torch.nn.utils.clip_grad_norm_`)."""
    grads = list(grads)
    norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads)))
    if norm > max_norm:
        for g in grads:
            g *= max_norm / (norm + 1e-6)
    return norm
