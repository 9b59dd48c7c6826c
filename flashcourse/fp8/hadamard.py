"""The Hadamard rotation of Q and K ("incoherent processing", FlashAttention-3 section 3.3).

Sylvester's construction: H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]]; every entry is +-1
and the rows are orthogonal, so H = H_d / sqrt(d) has H H^T = I (d a power of two). Then

    (Q H)(K H)^T = Q H H^T K^T = Q K^T

in exact arithmetic: rotating both Q and K along d leaves every score unchanged. What it
changes is how the values are spread over the d coordinates. A row with one large entry c
(an outlier) becomes a row whose entries are each about +-c / sqrt(d) plus the rest: the
largest magnitude, which sets an FP8 scale, falls by up to sqrt(d) (11.3x at d = 128),
and the rounding error of the large terms no longer lands on the few keys that dominate
the softmax. Rotating only one of Q and K changes the scores (that is a mistake the lab's
checker names).

The paper multiplies by random +-1 signs as well (a random diagonal matrix times a
Hadamard matrix), citing Chee et al. and Tseng et al.; `rotate(x, signs=...)` takes them.
A head dimension that is not a power of two is padded with zeros first
(`pad_to_power_of_two`): zeros add nothing to Q K^T.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_array, check_block


def is_power_of_two(d) -> bool:
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 \
        and (d & (d - 1)) == 0


def hadamard(d: int) -> np.ndarray:
    """(d, d) float64 Sylvester-Hadamard matrix divided by sqrt(d): orthogonal, symmetric."""
    d = check_block(d, "d")
    if not is_power_of_two(d):
        raise ValueError(f"d must be a power of two (1, 2, 4, ..., 128, ...) for a Sylvester "
                         f"Hadamard matrix, got {d}; pad the head dimension with zeros "
                         f"first (pad_to_power_of_two)")
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(d)


def pad_to_power_of_two(x) -> np.ndarray:
    """x (..., T, d) with zero columns appended up to the next power of two of d."""
    x = check_array(x, "x")
    d = x.shape[-1]
    d2 = 1 << (d - 1).bit_length()
    if d2 == d:
        return x
    return np.concatenate([x, np.zeros(x.shape[:-1] + (d2 - d,), x.dtype)], axis=-1)


def rotate(x, signs=None) -> np.ndarray:
    """x (..., T, d) times diag(signs) H along d, in float64 (signs: (d,) of +-1, or None)."""
    x = check_array(x, "x")
    d = x.shape[-1]
    h = hadamard(d)
    if signs is not None:
        signs = np.asarray(signs, np.float64)
        if signs.shape != (d,) or not np.isin(signs, (-1.0, 1.0)).all():
            raise ValueError(f"signs must be None or an array of {d} values, each +1 or -1")
        h = signs[:, None] * h                                        # diag(signs) H
    return x.astype(np.float64) @ h                                   # (..., T, d)
