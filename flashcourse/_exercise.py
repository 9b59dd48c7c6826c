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
    if isinstance(a, str):                  # "8,192" or "2 097 152": thousands separators
        a = a.replace(",", "").replace(" ", "")
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError, OverflowError):
        return False
    if math.isinf(b):
        return a == b
    return math.isfinite(a) and abs(a - b) <= rtol * max(abs(b), 1e-12)


def equal_to(value, message: str, rtol: float = 0.0) -> tuple:
    """A diagnosis: `message` when the answer is `value` (within rtol; `_same_number`)."""
    return (lambda y: _same_number(y, value, rtol), message)


def unit_slips(right: float, asked: str, units: dict, same: Callable) -> list:
    """Diagnoses for an amount given in another unit than `asked`: `units` maps a unit's name
    to how many of it make one `asked`; `same(yours, value)` compares (review round 20 a: the
    08 exercise's DRAM bytes given in bytes got "more than the model")."""
    return [(lambda y, v=right * per: same(y, v),
             f"that is the amount in {name}; the question asks for {asked}")
            for name, per in units.items()]
