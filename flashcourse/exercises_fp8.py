"""exercises_fp8: notebook 15's two exercises, functions the learner writes, checked the way
the labs check theirs (`labs._harness`: yours against expected, each typical mistake replayed
on the case's inputs and named by its own hint). Lab 15 has its own parts (block scales, the
Hadamard rotation); these are others.

Exercise 1, rounding to e4m3. The learner writes

    round_e4m3(x) -> float64 array, x's shape

the e4m3 value nearest to each finite x, ties to the even mantissa, saturating at +-448:
for |x| >= 2^-6 the step between neighbours is 2^(e - 3) with e = floor(log2 |x|); below,
the subnormal step 2^-9. It is compared with `fp8.codes.round_to_fp8` on the ties, the
boundaries and random values of every binade.

Exercise 2, P for the second product. The learner writes

    fp8_probabilities(s) -> float64 (rows, cols)

FlashAttention-3's P~ = 2^8 exp(s - m) (m each row's max), rounded to e4m3: the values the
tensor cores multiply with V. Compared with `fp8.attention.quantize_p` on rows whose small
probabilities underflow without the lift.
"""

from __future__ import annotations

import numpy as np

from .fp8.attention import P_LOG2_OFFSET
from .fp8.codes import E4M3, round_to_fp8, value_table
from .labs._harness import Case, Result, mistake_diagnoses, real_array, run_checks

# -- exercise 1: rounding to e4m3 ----------------------------------------------------------

HINT_ROUND = ("Compare with the rule: e = floor(log2 |x|), raised to -6 for the subnormals; the "
              "step is 2^(e - 3); round |x| / step to the nearest integer, ties to even "
              "(np.rint), multiply back, clamp to 448 and restore the sign.")
HINT_HALF_UP = ("Ties go up in yours (1.0625 became 1.125): a tie goes to the neighbour whose "
                "last mantissa bit is 0. np.rint rounds half to even (so do np.round and "
                "Python's round); np.floor(y + 0.5) rounds half up.")
HINT_TRUNCATE = ("You cut the extra bits off (rounding toward zero): 1.1 became 1.0 where the "
                 "nearest value is 1.125. Round to the nearest step (np.rint).")
HINT_MANTISSA = ("Your step is wrong by a factor of two: e4m3 keeps 3 mantissa bits, so the "
                 "step in [2^e, 2^(e+1)) is 2^(e - 3).")
HINT_NO_SUBNORMAL = ("Below 2^-6 your values are finer than e4m3's: the exponent cannot go "
                     "below -6 (the subnormals share the step 2^-9). Clamp e at -6 before "
                     "computing the step.")
HINT_FLUSH = ("Your values below 2^-6 became 0: e4m3 has subnormals down to 2^-9 (step "
              "2^-9). Clamp e at -6 instead of dropping them.")
HINT_NO_SATURATION = ("Values past 448 must become 448 (the GPU's conversion saturates): "
                      "np.minimum(r, 448) after rounding.")
HINT_240 = ("You saturated at 240, the largest value of an IEEE-style e4m3 with infinities: "
            "the OCP e4m3 used by Hopper keeps its top exponent for numbers, up to 448.")
HINT_NOT_ROUNDED = ("Your values come back unchanged: nothing was rounded. Divide |x| by the "
                    "step, round to an integer, multiply back.")
HINT_SIGN = ("Negative inputs came out positive: round |x|, then give the result x's sign "
             "(np.copysign).")


def _round_mistake(x, mistake):
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    if mistake is None:
        return round_to_fp8(x)
    if mistake == "not rounded":
        return x.copy()
    m = {"mantissa 2": 2, "mantissa 4": 4}.get(mistake, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
        if mistake not in ("no subnormal", "flush"):
            e = np.maximum(e, -6)
        step = 2.0 ** (e - m)
        y = a / step
        r = {"half up": np.floor(y + 0.5), "truncate": np.floor(y)}.get(mistake, np.rint(y))
        r = r * step
    if mistake == "flush":
        r = np.where(a < 2.0 ** -6, 0.0, r)
    top = 240.0 if mistake == "240" else E4M3.max_finite
    if mistake != "no saturation":
        r = np.minimum(r, top)
    return r if mistake == "sign" else np.copysign(r, x)


def _round_inputs():
    table = value_table("e4m3")
    fin = np.unique(np.abs(table[np.isfinite(table)]))
    mids = (fin[1:] + fin[:-1]) / 2                           # every tie
    rng = np.random.default_rng(15)
    rand = rng.standard_normal(400) * np.exp2(rng.uniform(-11, 9, 400))
    # random values first: there every mistake differs from every other (the ties are
    # exact with 4 mantissa bits, where "not rounded" and "4 bits" look alike)
    return {"random values of every binade (2^-11 ... 2^9, both signs)": rand,
            "ties": np.concatenate([mids, -mids[::3]]),
            "boundaries": np.array([448.0, 464.0, 465.0, 1000.0, -1e6, 2.0 ** -9, 2.0 ** -10,
                                    1.5 * 2.0 ** -9, 2.0 ** -6, 0.0, 1.1, 1.0625, -1.1875])}


MISTAKES_ROUND = [("not rounded", (HINT_NOT_ROUNDED,)), ("half up", (HINT_HALF_UP,)),
                  ("truncate", (HINT_TRUNCATE,)),
                  ("mantissa 2", (HINT_MANTISSA,)), ("mantissa 4", (HINT_MANTISSA,)),
                  ("flush", (HINT_FLUSH,)), ("no subnormal", (HINT_NO_SUBNORMAL,)),
                  ("no saturation", (HINT_NO_SATURATION,)), ("240", (HINT_240,)),
                  ("sign", (HINT_SIGN,))]


def _same(a, b) -> bool:
    try:
        a = np.asarray(a, np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == np.shape(b) and np.array_equal(a, np.asarray(b, np.float64))


def _round_case(name, x):
    diagnoses = mistake_diagnoses(lambda m: _round_mistake(x, m), MISTAKES_ROUND, _same)

    def run(fn):
        return real_array(fn(x.copy())), _round_mistake(x, None)
    return Case(name, run, HINT_ROUND, diagnoses, rtol=0.0, atol=0.0)


def check_round_e4m3(round_e4m3, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check the learner's `round_e4m3(x) -> float64` (exact: e4m3 values are exact floats)."""
    cases = [_round_case(n, x) for n, x in _round_inputs().items()]
    return run_checks("round_e4m3(x)", round_e4m3, cases, verbose=verbose,
                      hint_level=hint_level)


def reference_round_e4m3(x):
    """The solution."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))             # binade; 0 gets any
    step = 2.0 ** (np.maximum(e, -6) - 3)                      # subnormals: step 2^-9
    r = np.minimum(np.rint(a / step) * step, 448.0)            # ties to even, saturate
    return np.copysign(r, x)


# -- exercise 2: P for the second product -----------------------------------------------------

HINT_P = ("Compare with the rule: for each row, m = its max; P~ = 2^8 exp(s - m), in [0, 256]; "
          "then round every entry to e4m3 (round_to_fp8).")
HINT_P_NO_LIFT = ("You rounded exp(s - m) itself, in [0, 1]: every probability at or below "
                  "2^-10 became 0. Multiply by 2^8 = 256 before rounding, as FlashAttention-3.")
HINT_P_LIFT_AFTER = ("You multiplied by 256 after rounding: the small probabilities were already "
                     "lost to underflow. Lift first, then round.")
HINT_P_E8 = ("Your lift is e^8 = 2981 (you added 8 inside exp): FlashAttention-3 subtracts 8 "
             "from the row max in the exp2 domain, a factor 2^8 = 256, which stays below 448; "
             "e^8 saturates.")
HINT_P_SHRUNK = ("Your P~ is 2^-8 exp(s - m), in [0, 1/256]: you subtracted 8 from the exponent. "
                 "FlashAttention-3 subtracts 8 from the row max m (in base 2), and s - (m - 8) "
                 "adds 8 to the exponent: P~ = 2^8 exp(s - m), in [0, 256].")
HINT_P_GLOBAL_MAX = ("You subtracted the largest score of the whole matrix: each row has its "
                     "own max m (its largest P~ is exactly 256).")
HINT_P_NORMALISED = ("You divided by the row sum: the kernel rounds the unnormalised P~ and "
                     "divides O by the sum l at the end.")
HINT_P_448 = ("You lifted by 448 (e4m3's largest value): FlashAttention-3 uses a power of two, "
              "2^8, so the lift itself adds no rounding.")


def _p_mistake(s, mistake):
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - (s.max() if mistake == "global max" else m))
    lift = 2.0 ** P_LOG2_OFFSET
    if mistake is None or mistake == "global max":
        return round_to_fp8(e * lift)
    if mistake == "no lift":
        return round_to_fp8(e)
    if mistake == "lift after":
        return round_to_fp8(e) * lift
    if mistake == "e8":
        return round_to_fp8(e * np.exp(8.0))
    if mistake == "normalised":
        return round_to_fp8(e * lift / e.sum(axis=1, keepdims=True))
    if mistake == "448":
        return round_to_fp8(e * 448.0)
    if mistake == "shrunk":
        return round_to_fp8(e / lift)
    raise ValueError(mistake)


MISTAKES_P = [("no lift", (HINT_P_NO_LIFT,)), ("lift after", (HINT_P_LIFT_AFTER,)),
              ("e8", (HINT_P_E8,)), ("global max", (HINT_P_GLOBAL_MAX,)),
              ("normalised", (HINT_P_NORMALISED,)), ("448", (HINT_P_448,)),
              ("shrunk", (HINT_P_SHRUNK,))]


def _p_case(name, s):
    diagnoses = mistake_diagnoses(lambda m: _p_mistake(s, m), MISTAKES_P,
                                  lambda a, b: _same_rtol(a, b))

    def run(fn):
        return real_array(fn(s.copy())), _p_mistake(s, None)
    return Case(name, run, HINT_P, diagnoses, rtol=1e-6, atol=0.0)


def _same_rtol(a, b):
    try:
        a = np.asarray(a, np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == np.shape(b) and np.allclose(a, b, rtol=1e-6, atol=0.0)


def check_fp8_probabilities(fp8_probabilities, *, verbose: bool = True,
                            hint_level: int = 1) -> Result:
    """Check `fp8_probabilities(s) -> float64 (rows, cols)`: P~ = 2^8 exp(s - m) in e4m3."""
    rng = np.random.default_rng(51)
    spread = rng.standard_normal((6, 40)) * 4.0                 # many P below 2^-10
    spread[2, 5] += 20.0                                        # one row with a far max
    cases = [_p_case("6 rows of 40 scores, spread 4 (small probabilities)", spread),
             _p_case("3 rows of 9 scores, spread 1", rng.standard_normal((3, 9)))]
    return run_checks("fp8_probabilities(s)", fp8_probabilities, cases, verbose=verbose,
                      hint_level=hint_level)


def reference_fp8_probabilities(s):
    """The solution."""
    s = np.asarray(s, np.float64)
    p = 256.0 * np.exp(s - s.max(axis=1, keepdims=True))       # (rows, cols), max 256
    return round_to_fp8(p)


HINTS = tuple(v for k, v in dict(globals()).items() if k.startswith("HINT_"))
