"""Dense float64 attention with a mask_mod, a score_mod, sinks and GQA: the ground truth.

For query head h of batch entry b (key/value head h // G, G = Hq / Hkv):

    S_raw = scale Q K^T                                         (Tq, Tk)
    S     = score_mod(S_raw, b, h, i, j) where mask_mod(b, h, i, j), else -inf
    lse_i = log(sum_j exp(S_ij) + exp(sink_h))                  (Tq,)  sink term if given
    P     = exp(S - lse)                                        (Tq, Tk)
    O     = P V                                                 (Tq, d)

A sink is one more logit in each row's softmax sum with no value: it lowers every P_ij
and adds nothing to O. A row with no visible key has O = 0 and lse = -inf without a
sink (FlexAttention's rule), lse = sink_h with one. The backward, with dO = dL/dO:

    dV = sum over the group of P^T dO,  dP = dO V^T,  D_i = sum_j P_ij dP_ij
    dS = P (dP - D),  dS_raw = dS * score_mod_grad(S_raw, ...)
    dQ = scale dS_raw K,  dK = scale sum over the group of dS_raw^T Q
    dsink_h = -sum_{b, i} exp(sink_h - lse_i) D_i   (the sink's P times its dP = 0, minus D)

Everything is materialised, in float64: use it on small shapes to check the tiled paths.
`float32_backward` is the yardstick for 16-bit kernels: the same backward as a tensor-core
kernel computes it (float32, P and dS rounded to 16 bits), whose error a kernel's is
compared with.
"""

from __future__ import annotations

import numpy as np

from .._checks import BACKWARD_NONFINITE_HINT, check_array
from .._guards import check_dense_size
from .inputs import check_inputs, check_result
from .mods import mask_tile, resolve_grad, score_tile

#: (Tq, Tk) float64 matrices alive at once per head (S, P, dP, dS and temporaries)
PEAK_COPIES = 6


def _head(p, b, h, q64, k64):
    """(S_raw, S) of one head: raw scaled scores and modded, masked ones (Tq, Tk)."""
    qi, ki = np.arange(p.tq), np.arange(p.tk)
    s_raw = p.scale * (q64 @ k64.T)                                     # (Tq, Tk)
    s = s_raw if p.score_mod is None else score_tile(p.score_mod, s_raw, b, h, qi, ki)
    if p.mask_mod is not None:
        s = np.where(mask_tile(p.mask_mod, b, h, qi, ki), s, -np.inf)
    return s_raw, s


def _softmax(s, sink):
    """(P, lse) of modded scores s (Tq, Tk), the sink logit (or None) in each row's sum."""
    m = s.max(axis=1)                                                   # (Tq,)
    if sink is not None:
        m = np.maximum(m, sink)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    total = np.exp(s - m_safe[:, None]).sum(axis=1)                    # (Tq,)
    if sink is not None:
        total = total + np.exp(sink - m_safe)
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, m_safe + np.log(np.where(total > 0, total, 1.0)), -np.inf)
    lse_safe = np.where(np.isneginf(lse), np.inf, lse)                 # exp(s - inf) = 0
    return np.exp(s - lse_safe[:, None]), lse


def _size_check(p, what):
    check_dense_size((p.batch, p.heads), p.tq, p.tk, what, copies=PEAK_COPIES)


def reference(q, k, v, *, mask_mod=None, score_mod=None, sinks=None, scale=None):
    """(o, lse) in float64: o (B, Hq, Tq, d), lse (B, Hq, Tq) natural log (module doc)."""
    p = check_inputs(q, k, v, mask_mod=mask_mod, score_mod=score_mod, sinks=sinks,
                     scale=scale)
    _size_check(p, "variants.reference")
    o = np.zeros(p.q.shape)
    lse = np.empty(p.q.shape[:3])
    for b in range(p.batch):
        for h in range(p.heads):
            kh = h // p.group
            k64, v64 = p.k[b, kh].astype(np.float64), p.v[b, kh].astype(np.float64)
            _, s = _head(p, b, h, p.q[b, h].astype(np.float64), k64)
            probs, lse[b, h] = _softmax(s, None if p.sinks is None else p.sinks[h])
            o[b, h] = probs @ v64                                        # (Tq, d)
    check_result(o, lse)
    return o, lse


def reference_backward(q, k, v, do, *, mask_mod=None, score_mod=None, score_mod_grad=None,
                       sinks=None, scale=None):
    """(dq, dk, dv, dsinks) in float64, shaped like q, k, v and sinks (dsinks None
    without sinks), from the full softmax Jacobian (module docstring): it does not use
    the forward's o or the shortcut D = rowsum(dO o), so the tiled backward is checked
    against an independent formula."""
    p = check_inputs(q, k, v, mask_mod=mask_mod, score_mod=score_mod, sinks=sinks,
                     scale=scale)
    grad = resolve_grad(score_mod, score_mod_grad)
    do = check_array(do, "do", hint=BACKWARD_NONFINITE_HINT)
    if do.shape != p.q.shape:
        raise ValueError(f"do must have q's shape {p.q.shape}, got {do.shape}")
    _size_check(p, "variants.reference_backward")
    dq = np.zeros(p.q.shape)
    dk = np.zeros(p.k.shape)
    dv = np.zeros(p.v.shape)
    dsinks = None if p.sinks is None else np.zeros(p.heads)
    qi, ki = np.arange(p.tq), np.arange(p.tk)
    for b in range(p.batch):
        for h in range(p.heads):
            kh = h // p.group
            q64 = p.q[b, h].astype(np.float64)
            k64, v64 = p.k[b, kh].astype(np.float64), p.v[b, kh].astype(np.float64)
            do64 = do[b, h].astype(np.float64)
            s_raw, s = _head(p, b, h, q64, k64)
            sink = None if p.sinks is None else p.sinks[h]
            probs, lse = _softmax(s, sink)                               # (Tq, Tk), (Tq,)
            dv[b, kh] += probs.T @ do64                                  # (Tk, d)
            dp = do64 @ v64.T                                            # (Tq, Tk)
            delta = (probs * dp).sum(axis=1)                             # (Tq,)
            ds = probs * (dp - delta[:, None])                           # (Tq, Tk)
            if grad is not None:
                g = score_tile(grad, s_raw, b, h, qi, ki, "score_mod_grad")
                ds = np.where(probs > 0, ds * g, 0.0)
            dq[b, h] = p.scale * (ds @ k64)                              # (Tq, d)
            dk[b, kh] += p.scale * (ds.T @ q64)                          # (Tk, d)
            if dsinks is not None:
                seen = np.isfinite(lse)
                p_sink = np.exp(sink - np.where(seen, lse, np.inf))     # (Tq,)
                dsinks[h] -= float((p_sink * delta).sum())
    return dq, dk, dv, dsinks


def float32_backward(q, k, v, o, lse, do, *, rounding, mask_mod=None, score_mod=None,
                     score_mod_grad=None, sinks=None, scale=None):
    """(dq, dk, dv, dsinks) as a 16-bit tensor-core backward computes them, in numpy
    float32: the yardstick that a kernel's error is compared with (twice its error,
    tests/test_variants_tc_backward_sim.py and benchmarks/gpu_variants.py).

    q, k, v, o, do hold 16-bit values (float32 arrays), lse the forward's float32 one;
    rounding(x) rounds float32 values to the kernel's 16-bit type (numpy in, numpy out).
    Per head, float32 throughout: x = scale Q K^T, P = exp(score_mod(x) - lse) (0 where
    hidden), D = rowsum(dO o O), dS = P (dP - D) score_mod_grad(x); then P and dS are
    ROUNDED before the products that take them, dV += P^T dO, dK += scale dS^T Q,
    dQ = scale dS K (FlashAttention-2's order; FlexAttention's Triton backward rounds
    them too: `ppT.to(MATMUL_PRECISION)`, `dsT.to(MATMUL_PRECISION)` in PyTorch's
    torch/_inductor/kernel/flex_attention.py); dsink_h = -sum_i exp(sink_h - lse_i) D_i.
    Dense: small shapes only."""
    p = check_inputs(q, k, v, mask_mod=mask_mod, score_mod=score_mod, sinks=sinks,
                     scale=scale)
    grad = resolve_grad(score_mod, score_mod_grad)
    _size_check(p, "variants.reference.float32_backward")
    f = np.float32
    q, k, v, o, do = (np.asarray(a, f) for a in (p.q, p.k, p.v, o, do))
    lse = np.asarray(lse, f)
    scale32 = f(p.scale)
    dq, dk, dv = np.zeros(q.shape, f), np.zeros(k.shape, f), np.zeros(v.shape, f)
    dsinks = None if p.sinks is None else np.zeros(p.heads)
    qi, ki = np.arange(p.tq), np.arange(p.tk)
    for b in range(p.batch):
        for h in range(p.heads):
            kh = h // p.group
            x = (q[b, h] @ k[b, kh].T).astype(f) * scale32                 # (Tq, Tk)
            y = x if score_mod is None else score_tile(score_mod, x, b, h, qi, ki).astype(f)
            lse_s = np.where(np.isneginf(lse[b, h]), np.inf, lse[b, h]).astype(f)
            with np.errstate(invalid="ignore", over="ignore"):   # hidden pairs: dropped
                probs = np.exp(y - lse_s[:, None]).astype(f)                # (Tq, Tk)
            if mask_mod is not None:
                probs = np.where(mask_tile(mask_mod, b, h, qi, ki), probs, f(0))
            delta = (do[b, h] * o[b, h]).sum(axis=1, dtype=f)               # (Tq,)
            ds = probs * ((do[b, h] @ v[b, kh].T).astype(f) - delta[:, None])
            if grad is not None:
                g = score_tile(grad, x, b, h, qi, ki, "score_mod_grad").astype(f)
                ds = np.where(probs > 0, ds * g, f(0)).astype(f)
            p16, ds16 = (np.asarray(rounding(a), f) for a in (probs, ds))
            dv[b, kh] += p16.T @ do[b, h]                                   # (Tk, d)
            dk[b, kh] += scale32 * (ds16.T @ q[b, h])
            dq[b, h] = scale32 * (ds16 @ k[b, kh])                          # (Tq, d)
            if dsinks is not None:
                dsinks[h] -= float((np.exp(f(p.sinks[h]) - lse_s) * delta).sum())
    return dq, dk, dv, dsinks
