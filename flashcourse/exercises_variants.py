"""exercises_variants: notebook 14's two exercises, functions the learner writes, checked the
way the labs check theirs (`labs._harness`: yours against expected, each typical mistake
replayed on the case's inputs and named by its own hint). Lab 14 has its own exercises (a
sliding window, documents, tanh soft-capping, the block-mask builder); these are others.

Exercise 1, a prefix-LM mask. The learner writes

    prefix_lm_mask(prefix, t_query, t_key) -> mask_mod(b, h, q_idx, kv_idx)

the first `prefix` keys (the prompt) seen by every query, the other keys causally, aligned
bottom-right as `variants.library.prefix_lm` (and every mask of the course): with
off = Tk - Tq, query i sees key j iff j < prefix or j <= i + off. The prefix counts keys from
key 0, whatever Tq and Tk. It is compared pair by pair with the library on whole tiles of
indices (`variants.mods.mask_tile`), then drives the tiled forward through a block mask.

Exercise 2, a per-head score scale. The learner writes

    head_scale_mods(tau) -> (score_mod, score_mod_grad)
        score_mod(score, b, h, q_idx, kv_idx)      = tau[h] * score
        score_mod_grad(score, b, h, q_idx, kv_idx) = d score_mod / d score = tau[h]

tau of shape (H,), one factor per query head, read from the closure as ALiBi's slopes are
(`library.alibi`). Both are compared on every head, then the pair goes through the float64
reference backward (dq, dk, dv).
"""

from __future__ import annotations

import numpy as np

from .labs._harness import Case, Result, mistake_diagnoses, run_checks
from .variants import library, reference, tiled
from .variants.block_mask import create_block_mask
from .variants.mods import check_mod, mask_tile, score_tile

# -- exercise 1: the prefix-LM mask ------------------------------------------------------

HINT_PREFIX = ("Compare with the rule: with off = t_key - t_query, query i sees key j iff "
               "j < prefix or j <= i + off. Return booleans for whole arrays: q_idx is a "
               "column (rows, 1), kv_idx a row (1, cols); combine with | and &, not `or`.")
HINT_PREFIX_LONG = ("Off by one at the prefix edge, one key too many: keys 0 to prefix - 1 "
                    "are the prompt, so the test is kv_idx < prefix, not kv_idx <= prefix.")
HINT_PREFIX_SHORT = ("Off by one at the prefix edge, one key short: the prompt is keys 0 to "
                     "prefix - 1, all `prefix` of them: kv_idx < prefix.")
HINT_PREFIX_ONLY = ("Queries after the prompt see only the prompt: the causal part is "
                    "missing. A key is visible if it is in the prompt *or* causally before "
                    "the query: (kv_idx < prefix) | (kv_idx <= q_idx + off).")
HINT_PREFIX_AND = ("You combined the two parts with &: then a key must be in the prompt *and* "
                   "before the query. Either is enough: use |.")
HINT_NOT_CAUSAL_ENDED = ("After the prompt your queries see every key, later ones included: "
                         "past the prefix the mask must end causally, kv_idx <= q_idx + off.")
HINT_NO_PREFIX = ("Your mask is plain causal: queries inside the prompt must also see the "
                  "prompt keys after them, kv_idx < prefix.")
HINT_PREFIX_BY_QUERY = ("You tested the query's position against the prefix (q_idx < prefix): "
                        "then the prompt's queries see every key, the answer's too. The "
                        "prefix is a set of *keys*: kv_idx < prefix.")
HINT_NOT_ITSELF = ("A query after the prompt does not see itself: the causal part is "
                   "kv_idx <= q_idx + off (<=, not <).")
HINT_CAUSAL_FORWARD = ("The causal part points forward: your queries see the keys after them. "
                       "A key is causally visible when kv_idx <= q_idx + off.")
HINT_PREFIX_ALIGN = ("Right for Tq = Tk, wrong when they differ: the causal part is aligned "
                     "bottom-right, kv_idx <= q_idx + (t_key - t_query), so that the last "
                     "query sees every key.")
HINT_PREFIX_OFF_SIGN = ("Your causal offset has the wrong sign: the causal part is aligned "
                        "bottom-right, kv_idx <= q_idx + off with off = t_key - t_query, so "
                        "that the last query sees every key; with t_query - t_key, a query "
                        "block shorter than the keys sees almost no key past the prompt.")
HINT_PREFIX_SHIFTED = ("The offset moved the prompt too: the prefix is keys 0 to prefix - 1 "
                       "whatever Tq and Tk (kv_idx < prefix); only the causal part gets "
                       "+ (t_key - t_query).")
HINT_PREFIX_FORWARD = ("The mask is right pair by pair, but the tiled forward with its block "
                       "mask does not match the reference: make the function depend only on "
                       "its arguments and on prefix, t_query and t_key (no other state).")


def _prefix_rule(prefix: int, off: int, mistake: str | None):
    """The rule, or one typical mistake, as a function of index arrays q (rows, 1) and
    k (1, cols)."""
    p = prefix

    def rule(q, k):
        qo = q + off
        return np.broadcast_to({
            None: (k < p) | (k <= qo),
            "long": (k <= p) | (k <= qo),
            "short": (k < p - 1) | (k <= qo),
            "only": k < p,
            "and": (k < p) & (k <= qo),
            "not causal-ended": (k < p) | (qo >= p),
            "no prefix": k <= qo,
            "by query": (qo < p) | (k <= qo),
            "strict": (k < p) | (k < qo),
            "forward": (k < p) | (k >= qo),
            "top-left": (k < p) | (k <= q),
            "off sign": (k < p) | (k <= q - off),
            "shifted": (k < p + off) | (k <= qo)}[mistake], (q.size, k.size))
    return rule


#: "off sign" before "only": with Tq < Tk it gives "only"'s mask (q - off < 0 for every query),
#: and a mask that is "only" fails the first case (Tq = Tk), where "off sign" is right
PREFIX_MISTAKES = [("long", (HINT_PREFIX_LONG,)), ("short", (HINT_PREFIX_SHORT,)),
                   ("off sign", (HINT_PREFIX_OFF_SIGN,)), ("only", (HINT_PREFIX_ONLY,)),
                   ("and", (HINT_PREFIX_AND,)),
                   ("not causal-ended", (HINT_NOT_CAUSAL_ENDED,)),
                   ("no prefix", (HINT_NO_PREFIX,)), ("by query", (HINT_PREFIX_BY_QUERY,)),
                   ("strict", (HINT_NOT_ITSELF,)), ("forward", (HINT_CAUSAL_FORWARD,)),
                   ("top-left", (HINT_PREFIX_ALIGN,)), ("shifted", (HINT_PREFIX_SHIFTED,))]

#: (name, prefix, Tq, Tk): Tq = Tk first (where the edge and causal slips show), then
#: Tq < Tk and Tq > Tk (the alignment), no prefix, a prefix longer than the keys
PREFIX_CASES = [
    ("prefix 6, Tq = Tk = 20", 6, 20, 20),
    ("prefix 9, Tq = 14 < Tk = 31", 9, 14, 31),
    ("prefix 5, Tq = 27 > Tk = 16", 5, 27, 16),
    ("prefix 0 (plain causal), Tq = Tk = 12", 0, 12, 12),
    ("prefix 40, longer than Tk = 25 (every key seen), Tq = 15", 40, 15, 25),
]


HINT_MASK_FORM = ("prefix_lm_mask must return the mask_mod itself (the inner def, which the "
                  "line above names), taking exactly (b, h, q_idx, kv_idx): not a tile of "
                  "booleans computed with it, and with all four arguments even if it uses two.")
HINT_PAIR_FORM = ("head_scale_mods must return the two functions as a pair, `return score_mod, "
                  "score_mod_grad`, each taking exactly (score, b, h, q_idx, kv_idx) (the line "
                  "above says which part is off).")


def _form_error(exc) -> bool:
    """A TypeError of the contract: not a function, the wrong arguments, not a pair."""
    return isinstance(exc, TypeError) and any(
        text in str(exc) for text in ("must be a plain Python function", "must take exactly",
                                      "not a pair", "returned None: return the inner"))


def _first_difference(yours, expected) -> str:
    i, j = (int(x[0]) for x in np.nonzero(yours != expected))
    return (f"query {i}, key {j}: yours {bool(yours[i, j])}, expected {bool(expected[i, j])} "
            f"({int((yours != expected).sum())} pairs differ)")


def _same_mask(yours, expected):
    yours = np.asarray(yours)
    if yours.shape != expected.shape:
        return False, f"shape {yours.shape}, expected {expected.shape}"
    if yours.dtype != np.bool_:
        return False, f"dtype {yours.dtype}, expected booleans"
    if np.array_equal(yours, expected):
        return True, ""
    return False, _first_difference(yours, expected)


def _made_mask(fn, prefix, tq, tk):
    mask_mod = fn(prefix, tq, tk)
    if mask_mod is None:
        raise TypeError(f"prefix_lm_mask({prefix}, {tq}, {tk}) returned None: return the "
                        f"inner mask_mod")
    return check_mod(mask_mod, "the mask_mod prefix_lm_mask returns", 4)


def _prefix_case(name, prefix, tq, tk):
    qi, ki = np.arange(tq), np.arange(tk)
    expected = mask_tile(library.prefix_lm(prefix, tq, tk), 0, 0, qi, ki)

    def run(fn):
        return mask_tile(_made_mask(fn, prefix, tq, tk), 0, 0, qi, ki), expected

    def close(a, b):
        return np.array_equal(np.asarray(a), np.asarray(b))

    diagnoses = mistake_diagnoses(
        lambda m: _prefix_rule(prefix, tk - tq, m)(qi[:, None], ki[None, :]),
        PREFIX_MISTAKES, close)
    return Case(name, run, HINT_PREFIX, diagnoses, compare=_same_mask,
                error_diagnoses=[(_form_error, HINT_MASK_FORM)])


def _prefix_forward_case():
    """The learner's mask drives the tiled forward (block mask of 8 x 8 tiles)."""
    prefix, tq, tk = 7, 21, 29
    rng = np.random.default_rng(14)
    q = rng.standard_normal((1, 2, tq, 8))                                  # (B, H, Tq, d)
    k, v = (rng.standard_normal((1, 2, tk, 8)) for _ in range(2))           # (B, H, Tk, d)
    o_ref, _ = reference.reference(q, k, v, mask_mod=library.prefix_lm(prefix, tq, tk))

    def run(fn):
        bm = create_block_mask(_made_mask(fn, prefix, tq, tk), None, None, tq, tk, 8, 8,
                               cache=False)
        o, _ = tiled.forward(q, k, v, block_mask=bm)
        return o, o_ref
    name = f"tiled forward with your mask (prefix {prefix}, Tq = {tq}, Tk = {tk}) vs reference"
    return Case(name, run, HINT_PREFIX_FORWARD, rtol=1e-10, atol=1e-12, names=("o",),
                error_diagnoses=[(_form_error, HINT_MASK_FORM)])


def check_prefix_lm(prefix_lm_mask, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check the learner's `prefix_lm_mask(prefix, t_query, t_key) -> mask_mod`."""
    cases = [_prefix_case(*c) for c in PREFIX_CASES] + [_prefix_forward_case()]
    return run_checks("prefix_lm_mask(prefix, t_query, t_key)", prefix_lm_mask, cases,
                      verbose=verbose, hint_level=hint_level)


def reference_prefix_lm_mask(prefix, t_query, t_key):
    """The solution."""
    off = t_key - t_query

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < prefix) | (kv_idx <= q_idx + off)
    return mask_mod


# -- exercise 2: a per-head score scale and its derivative -------------------------------

HINT_SCALE = ("Compare with the formulas: score_mod = tau[h] * score and score_mod_grad = "
              "tau[h], the factor of the query head h (an integer; index the array with it).")
HINT_DIVIDE = ("You divided by tau[h]: here tau multiplies the score, tau[h] * score (a "
               "factor above 1 sharpens the head's softmax).")
HINT_BY_QUERY = ("The factor follows the query position (tau[q_idx]): tau holds one factor "
                 "per *head*, so index it with h.")
HINT_BY_KEY = ("The factor follows the key position (tau[kv_idx]): tau holds one factor per "
               "*head*, so index it with h.")
HINT_ONE_FACTOR = ("Every head got the same factor (tau[0], or tau[b] with the batch index): "
                   "head h has its own, tau[h].")
HINT_ADDED = ("You added tau[h] to the score (a bias, as ALiBi adds its penalty): here the "
              "score is multiplied, tau[h] * score.")
HINT_GRAD_IS_SCORE = ("score_mod_grad returned the modified score, tau[h] * score: it must "
                      "return the derivative d(tau[h] s)/ds = tau[h].")
HINT_GRAD_ONE = ("score_mod_grad returns 1, the derivative of a score_mod that only adds "
                 "something (ALiBi): scaling by tau[h] scales the derivative, tau[h].")
HINT_GRAD_WRT_TAU = ("score_mod_grad returned the score, the derivative with respect to tau: "
                     "the backward needs d/d score, which is tau[h].")
HINT_GRAD_INVERSE = ("score_mod_grad returned 1 / tau[h]: the derivative of tau[h] * s with "
                     "respect to s is tau[h] itself.")
HINT_SCALE_BACKWARD = ("score_mod and its derivative each match alone, but the backward does "
                       "not: make both depend only on their arguments and on tau.")

SCALE_MISTAKES = {
    "score": [("divide", (HINT_DIVIDE,)), ("query", (HINT_BY_QUERY,)),
              ("key", (HINT_BY_KEY,)), ("first", (HINT_ONE_FACTOR,)),
              ("batch", (HINT_ONE_FACTOR,)), ("add", (HINT_ADDED,))],
    "grad": [("score", (HINT_GRAD_IS_SCORE,)), ("one", (HINT_GRAD_ONE,)),
             ("wrt tau", (HINT_GRAD_WRT_TAU,)), ("inverse", (HINT_GRAD_INVERSE,)),
             ("query", (HINT_BY_QUERY,)), ("key", (HINT_BY_KEY,)),
             ("first", (HINT_ONE_FACTOR,)), ("batch", (HINT_ONE_FACTOR,))],
}


def _scale_value(s, tau, b, h, q, k, part, mistake):
    """score_mod (part "score") or its derivative ("grad") on the (rows, cols) scores s of
    head h, right (mistake None) or with one typical mistake."""
    one = np.ones_like(s)
    t = {"query": tau[q] * one, "key": tau[k] * one, "first": tau[0] * one,
         "batch": tau[b] * one}
    if part == "score":
        if mistake in t:
            return t[mistake] * s
        return {None: tau[h] * s, "divide": s / tau[h], "add": s + tau[h]}[mistake]
    if mistake in t:
        return t[mistake]
    return {None: tau[h] * one, "score": tau[h] * s, "one": one, "wrt tau": s,
            "inverse": one / tau[h]}[mistake]


def _scale_pair(fn, tau):
    out = fn(tau.copy())
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"head_scale_mods(tau) returned {type(out).__name__}, not a pair "
                        f"(score_mod, score_mod_grad)")
    return (check_mod(out[0], "score_mod", 5), check_mod(out[1], "score_mod_grad", 5))


#: (name, tau (H,), batch index, rows, cols, which function). Tiles no larger than H, so a
#: factor indexed by position is read (and named), not an index error.
TAU_8 = np.array([0.5, 1.0, 1.5, 2.0, 0.25, 3.0, 0.75, 1.25])
TAU_6 = np.array([2.5, 0.4, 1.2, 0.8, 1.8, 0.6])
SCALE_CASES = [
    ("score_mod, H = 8 heads, tiles 5 x 7", TAU_8, 0, 5, 7, "score"),
    ("score_mod_grad, H = 8 heads, tiles 5 x 7", TAU_8, 0, 5, 7, "grad"),
    ("score_mod, H = 6 heads, batch entry 1, tiles 6 x 4", TAU_6, 1, 6, 4, "score"),
    ("score_mod_grad, H = 6 heads, batch entry 1, tiles 6 x 4", TAU_6, 1, 6, 4, "grad"),
]


def _scale_case(name, tau, b, rows, cols, part):
    rng = np.random.default_rng(rows * 10 + cols)
    s = rng.standard_normal((tau.size, rows, cols)) * 3                # (H, rows, cols)
    qi, ki = np.arange(rows), np.arange(cols)
    q, k = qi[:, None], ki[None, :]

    def replay(mistake):
        return np.stack([_scale_value(s[h], tau, b, h, q, k, part, mistake)
                         for h in range(tau.size)])
    expected = replay(None)
    label = "score_mod" if part == "score" else "score_mod_grad"

    def run(fn):
        mod = _scale_pair(fn, tau)[0 if part == "score" else 1]
        return np.stack([score_tile(mod, s[h].copy(), b, h, qi, ki, label)
                         for h in range(tau.size)]), expected

    def close(a, c):
        a, c = np.asarray(a, np.float64), np.asarray(c, np.float64)
        return a.shape == c.shape and np.allclose(a, c, rtol=1e-9, atol=1e-12)

    diagnoses = mistake_diagnoses(replay, SCALE_MISTAKES[part], close)
    return Case(name, run, HINT_SCALE, diagnoses, rtol=1e-10, atol=1e-12,
                error_diagnoses=[(_form_error, HINT_PAIR_FORM)])


def _scale_backward_case():
    tau, n = np.array([0.7, 1.6, 2.2, 0.3]), 11
    rng = np.random.default_rng(41)
    q, k, v, do = (rng.standard_normal((1, 4, n, 4)) for _ in range(4))  # (B, H, T, d)
    mask = library.causal(n, n)
    score_mod, grad = reference_head_scale_mods(tau)
    expected = reference.reference_backward(q, k, v, do, mask_mod=mask, score_mod=score_mod,
                                            score_mod_grad=grad)[:3]

    def run(fn):
        score_mod, grad = _scale_pair(fn, tau)
        out = reference.reference_backward(q, k, v, do, mask_mod=mask, score_mod=score_mod,
                                           score_mod_grad=grad)
        return out[:3], expected
    return Case("reference backward (dq, dk, dv) with your pair, H = 4, causal", run,
                HINT_SCALE_BACKWARD, rtol=1e-9, atol=1e-12, names=("dq", "dk", "dv"),
                error_diagnoses=[(_form_error, HINT_PAIR_FORM)])


def check_head_scale(head_scale_mods, *, verbose: bool = True,
                     hint_level: int = 1) -> Result:
    """Check the learner's `head_scale_mods(tau) -> (score_mod, score_mod_grad)`."""
    cases = [_scale_case(*c) for c in SCALE_CASES] + [_scale_backward_case()]
    return run_checks("head_scale_mods(tau)", head_scale_mods, cases, verbose=verbose,
                      hint_level=hint_level)


def reference_head_scale_mods(tau):
    """The solution."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return tau[h] * score

    def score_mod_grad(score, b, h, q_idx, kv_idx):
        return tau[h] + 0.0 * score
    return score_mod, score_mod_grad
