"""How many bytes the dense score matrix takes, and how to print byte counts.

    M_score = Tq * Tk * s        bytes, for one head and one request

    Tq  query positions        (positions)
    Tk  key positions          (positions)
    s   stored bytes per score (bytes/score): 8 fp64, 4 fp32, 2 fp16/bf16, 1 fp8

Example: 4096 * 4096 * 2 B = 33,554,432 B = 32 MiB.

Assumptions: one head, one request, no padding. It counts only the score matrix:
Q, K, V and O need storage of their own, and a batch of B requests with H heads
multiplies M_score by B * H. A causal mask hides about half the pairs, but a
dense kernel still allocates the full rectangle; only a triangular store would
reach the smaller causal count.
"""

from __future__ import annotations

import math

from ._checks import check_block, check_causal, check_sizes
from .geometry import visible_pairs

#: Bytes per stored score for the formats the widgets offer (bytes/score).
BYTES_PER_SCORE = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def score_matrix_bytes(t_query: int, t_key: int, bytes_per_score: int, *,
                       causal: bool = False) -> int:
    """M_score = Tq x Tk x s in bytes, for one head and one request.

    Args:
        t_query: Tq, query positions (>= 1).
        t_key: Tk, key positions (>= 1).
        bytes_per_score: s, bytes per stored score (e.g. 2 for fp16).
        causal: count only the visible pairs, Tq*Tk minus the masked ones. This is
            a lower bound that only a triangular (packed) store would reach: a
            dense kernel still allocates the full Tq x Tk rectangle.

    >>> score_matrix_bytes(4096, 4096, 2)
    33554432
    """
    s = check_block(bytes_per_score, "bytes_per_score")
    return visible_pairs(t_query, t_key, causal=causal) * s


def binary_size(n_bytes: int | float) -> str:
    """Human-readable binary size: 33554432 -> '32 MiB', 1536 -> '1.5 KiB'."""
    if not math.isfinite(n_bytes) or n_bytes < 0:     # NaN or inf: named (review round 21 a)
        raise ValueError(f"n_bytes must be a finite number >= 0, got {n_bytes}")
    value, unit = float(n_bytes), 0
    while value >= 1024 and unit < len(_BINARY_UNITS) - 1:
        value /= 1024
        unit += 1
    # Past the largest unit the value keeps its thousands separators (4,194,304 EiB).
    text = f"{value:,.2f}".rstrip("0").rstrip(".") if unit else f"{int(n_bytes):,}"
    return f"{text} {_BINARY_UNITS[unit]}"


def format_bytes(n_bytes: int) -> str:
    """Exact bytes with thousands separators and the binary size.

    >>> format_bytes(33554432)
    '33,554,432 B = 32 MiB'
    """
    if not math.isfinite(n_bytes):
        raise ValueError(f"n_bytes must be a finite number of bytes, got {n_bytes}")
    n_bytes = int(n_bytes)
    if n_bytes < 1024:
        return f"{n_bytes:,} B"
    return f"{n_bytes:,} B = {binary_size(n_bytes)}"


# ---------------------------------------------------------------------------
# What the forward keeps for the backward (notebook 09)
# ---------------------------------------------------------------------------

#: Methods `saved_for_backward_bytes` knows: standard attention keeps P, the tiled
#: (FlashAttention) forward keeps only the per-row logsumexp L.
BACKWARD_METHODS = ("standard", "tiled")


def saved_for_backward(t_query: int, t_key: int, head_dim: int, *, method: str = "standard",
                       bytes_per_element: int = 2, bytes_per_score: int = 2,
                       causal: bool = False) -> dict:
    """Bytes the forward keeps in outer memory for the backward, by tensor (one head).

        both methods   Q, O   Tq x d x e each;  K, V   Tk x d x e each
        "standard"     P      Tq x Tk x s      (the probabilities, for dV = P^T dO, dS)
        "tiled"        L      Tq x 4           (lse, fp32: P is recomputed from it)

    Args:
        t_query: Tq (positions). t_key: Tk (positions). head_dim: d (elements).
        method: "standard" or "tiled".
        bytes_per_element: e, bytes per Q/K/V/O element.
        bytes_per_score: s, bytes per stored probability (standard only).
        causal: count P's visible pairs only (a triangular store; a dense kernel
            still allocates the whole rectangle, see `score_matrix_bytes`).

    Returns:
        dict tensor name -> bytes, e.g. {"Q": ..., "K": ..., "V": ..., "O": ..., "P": ...}.
    """
    tq, tk, d, e = check_sizes(t_query=t_query, t_key=t_key, head_dim=head_dim,
                               bytes_per_element=bytes_per_element)
    if method not in BACKWARD_METHODS:
        raise ValueError(f"method must be 'standard' or 'tiled', got {method!r}")
    out = {"Q": tq * d * e, "K": tk * d * e, "V": tk * d * e, "O": tq * d * e}
    if method == "standard":
        out["P"] = score_matrix_bytes(tq, tk, bytes_per_score, causal=causal)
    else:
        check_block(bytes_per_score, "bytes_per_score")
        check_causal(causal)
        out["L"] = tq * 4
    return out


def saved_for_backward_bytes(t_query: int, t_key: int, head_dim: int, *,
                             method: str = "standard", bytes_per_element: int = 2,
                             bytes_per_score: int = 2, causal: bool = False) -> int:
    """Total bytes kept for the backward, one head (see `saved_for_backward`).

        standard: (2 Tq + 2 Tk) d e + Tq Tk s
        tiled:    (2 Tq + 2 Tk) d e + 4 Tq

    >>> saved_for_backward_bytes(4096, 4096, 64, method="standard")
    35651584
    >>> saved_for_backward_bytes(4096, 4096, 64, method="tiled")
    2113536
    """
    return sum(saved_for_backward(t_query, t_key, head_dim, method=method,
                                  bytes_per_element=bytes_per_element,
                                  bytes_per_score=bytes_per_score, causal=causal).values())
