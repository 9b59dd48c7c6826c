"""_exercise: what one predict-then-check exercise is (`Exercise`) and how a learner's number
is compared with the answer; `exercises` (and `exercises_hopper`) build on it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Exercise:
    """One predict-then-check exercise.

    answer: {part: value}; working: how the answer is computed (shown on reveal);
    rtol: relative tolerance for numbers; diagnoses: {part: [(predicate(value), text)]}.
    """

    title: str
    answer: dict
    working: str
    rtol: float = 5e-3
    diagnoses: dict = field(default_factory=dict)
    same: Callable | None = None          # custom comparison: same(part, yours, answer)


def _same_number(a, b, rtol) -> bool:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError, OverflowError):
        return False
    if math.isinf(b):
        return a == b
    return math.isfinite(a) and abs(a - b) <= rtol * max(abs(b), 1e-12)
