"""Lab 15's checkers: block scales, FP8 round trips, the Hadamard matrix, rotating Q and K,
and the FP8 forward built from them (`flashcourse.fp8` holds the course's versions).

The learner writes, for arrays x (..., T, d) of T tokens of d values:

    block_scales(x, block)            (..., ceil(T / block)) float32: amax / 448 per block
                                      of `block` tokens (all d values of those tokens)
    fake_quantize_blocks(x, s, block) float32 x rounded through e4m3 with those scales:
                                      round_to_fp8(x / s_t) * s_t, s_t = each token's scale
    hadamard_matrix(d)                (d, d) Sylvester-Hadamard / sqrt(d)
    rotate_qk(q, k, h)                (q @ h, k @ h): both rotated along d
    fp8_forward(q, k, v, block, use_hadamard)
                                      the FP8 forward: rotate (if asked), quantize each of
                                      Q, K, V by blocks, then `forward_dequantized`

Each checker runs the function on shapes the learner does not see (a ragged last block,
a block longer than T, several heads, outliers), compares it with `flashcourse.fp8`, and
names the typical mistakes by replaying them on the case's inputs (`_harness`): the scale
taken over the wrong axis (per token or per channel), the scale inverted or without 448,
a signed max, the ragged block dropped, a block's slice one token short or long at its
edge, scales tiled instead of repeated, the scale applied twice or never applied back, an
unnormalised Hadamard matrix, K left unrotated, V rotated too, Q and K rotated whatever
`use_hadamard` says, Q and K quantized with the scales they had before the rotation.
"""

from __future__ import annotations

import numpy as np

from ..fp8 import attention as fa
from ..fp8.codes import round_to_fp8
from ..fp8.hadamard import hadamard as course_hadamard
from ..fp8.scaling import amax_scale, block_amax, fake_quantize
from ._harness import Case, Result, mistake_diagnoses, plain, real_array, run_checks

E4M3_MAX = 448.0


def _same(yours, want, rtol=1e-6) -> bool:
    try:
        y = np.asarray(plain(yours), np.float64)
    except (TypeError, ValueError):
        return False
    w = np.asarray(want, np.float64)
    return y.shape == w.shape and np.allclose(y, w, rtol=rtol, atol=0.0, equal_nan=True)


def _inputs(seed, shape, outliers=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if outliers:
        x = x + rng.standard_normal(shape) * 10.0 * (rng.random(shape) < 0.01)
    x.flat[rng.integers(x.size)] = -30.0               # a negative amax somewhere
    return x.astype(np.float32)


# -- part 1: block scales -------------------------------------------------------------------

HINT_SCALES = ("Compare with the rule: split the T tokens into blocks of `block` (the last one "
               "may be shorter), take the largest |x| over each block's tokens and all their d "
               "values, and divide by 448. One scale per block: shape (..., ceil(T / block)).")
HINT_PER_TOKEN = ("You took the max over d only: one scale per token, shape (..., T). A block "
                  "scale covers `block` tokens: take the max over the block's tokens *and* d.")
HINT_PER_CHANNEL = ("You took the max over the tokens but not over d: one scale per block and "
                    "per coordinate, shape (..., n_blocks, d). A block scale also covers all d "
                    "values of its tokens.")
HINT_WHOLE = ("One scale for the whole head (the max over all T tokens): that is the per-head "
              "scheme. Split T into blocks of `block` tokens first.")
HINT_NO_448 = ("Your scales are the block maxima themselves: divide by 448, e4m3's largest "
               "value, so that the largest element of each block lands on 448.")
HINT_INVERTED = ("Your scales are 448 / amax, the inverse: the stored value is x / s, so s = "
                 "amax / 448 (small for small blocks).")
HINT_SIGNED = ("You took the largest x, not the largest |x|: a block whose biggest entry is "
               "negative gets too small a scale. Use np.abs before the max.")
HINT_DROPPED = ("The last, shorter block is missing: T = {t} tokens in blocks of {b} make "
                "ceil(T / block) = {n} blocks. Pad, or take the last block as a shorter slice.")
HINT_EDGE = ("Each block's max takes one token too few or too many at its edge: block b holds "
             "the tokens b * block to (b + 1) * block - 1, which is the slice "
             "x[..., b * block:(b + 1) * block, :] (Python's end is exclusive: no - 1, no + 1).")
HINT_EXTRA_BLOCK = ("One block too many: the max of an empty block failed. T // block + 1 blocks "
                    "is right only when block does not divide T; when it does (T = 64 in "
                    "blocks of 64) the last of them is empty. The count is ceil(T / block).")
HINT_E5M2 = ("You divided by 57344, e5m2's largest value: the lab quantizes to e4m3, whose "
             "largest value is 448.")


def _scales_mistake(x, block, mistake):
    x64 = np.abs(x.astype(np.float64))
    t = x.shape[-2]
    if mistake is None:
        return amax_scale(block_amax(x, block))
    if mistake == "per token":
        return (x64.max(axis=-1) / E4M3_MAX).astype(np.float32)
    if mistake == "per channel":
        nb = -(-t // block)
        parts = [x64[..., i * block:(i + 1) * block, :].max(axis=-2) for i in range(nb)]
        return (np.stack(parts, axis=-2) / E4M3_MAX).astype(np.float32)
    if mistake == "per channel, stacked last":                    # (..., d, n_blocks)
        return np.swapaxes(_scales_mistake(x, block, "per channel"), -1, -2)
    if mistake == "whole":
        return (x64.max(axis=(-2, -1))[..., None] / E4M3_MAX).astype(np.float32)
    if mistake == "no 448":
        return block_amax(x, block).astype(np.float32)
    if mistake == "inverted":
        return (E4M3_MAX / block_amax(x, block)).astype(np.float32)
    if mistake == "signed":
        nb = -(-t // block)
        parts = [x[..., i * block:(i + 1) * block, :].astype(np.float64).max(axis=(-2, -1))
                 for i in range(nb)]
        return (np.stack(parts, axis=-1) / E4M3_MAX).astype(np.float32)
    if mistake == "dropped":
        return amax_scale(block_amax(x, block))[..., : t // block]
    if mistake == "e5m2":
        return (block_amax(x, block) / 57344.0).astype(np.float32)
    if mistake in ("edge last", "edge first", "edge next"):       # an off-by-one slice
        lo, hi = {"edge last": (0, -1), "edge first": (1, 0), "edge next": (0, 1)}[mistake]
        parts = [x64[..., i * block + lo:min((i + 1) * block, t) + hi, :].max(
                 axis=(-2, -1), initial=0.0) for i in range(-(-t // block))]
        return (np.stack(parts, axis=-1) / E4M3_MAX).astype(np.float32)
    raise ValueError(mistake)


SCALES_STEPS = ("Step by step: (1) the number of blocks is T / block rounded up (math.ceil, or "
                "minus the floor division of -T); (2) block b's tokens are those from b * block "
                "up to, not including, (b + 1) * block (a slice stops at T by itself, so the "
                "last block is shorter); (3) take np.abs of that slice and its max over the "
                "tokens and d together (axis=(-2, -1)), which keeps the leading axes; (4) "
                "stack the block maxima along a new last axis, divide by 448 and return "
                "float32.")


def _level2(mistakes, steps):
    """The (mistake, (hint,)) pairs with `steps` as each hint's second, more explicit level."""
    return [(m, (h[0], steps)) for m, h in mistakes]


def _edge_inputs(seed, shape, block):
    """Inputs whose largest |x| in each block sits on the block's last token (even blocks) or
    its first (odd blocks), so that a slice one token short at either end changes a scale."""
    x = _inputs(seed, shape, outliers=False)
    t = shape[-2]
    for i in range(-(-t // block)):
        token = min((i + 1) * block, t) - 1 if i % 2 == 0 else i * block
        x[..., token, i % shape[-1]] = 40.0 + i if i % 3 else -(40.0 + i)   # above the -30
    return x


def _scales_case(name, seed, shape, block, edges=False):
    x = _edge_inputs(seed, shape, block) if edges else _inputs(seed, shape)
    t = shape[-2]
    n = -(-t // block)
    mistakes = [("per token", (HINT_PER_TOKEN,)), ("per channel", (HINT_PER_CHANNEL,)),
                ("per channel, stacked last", (HINT_PER_CHANNEL,)),
                ("whole", (HINT_WHOLE,)), ("no 448", (HINT_NO_448,)),
                ("inverted", (HINT_INVERTED,)), ("signed", (HINT_SIGNED,)),
                ("dropped", (HINT_DROPPED.format(t=t, b=block, n=n),)),
                ("e5m2", (HINT_E5M2,)), ("edge last", (HINT_EDGE,)),
                ("edge first", (HINT_EDGE,)), ("edge next", (HINT_EDGE,))]
    diagnoses = mistake_diagnoses(lambda m: _scales_mistake(x, block, m),
                                  _level2(mistakes, SCALES_STEPS), _same)
    want = _scales_mistake(x, block, None)

    def run(fn):
        return real_array(fn(x.copy(), block)), want
    empty = [((lambda exc: isinstance(exc, ValueError) and "zero-size array" in str(exc)),
              HINT_EXTRA_BLOCK, SCALES_STEPS)]
    return Case(name, run, HINT_SCALES, diagnoses, rtol=1e-6, atol=0.0, hint2=SCALES_STEPS,
                error_diagnoses=empty)


SCALE_CASES = [("2 heads, T = 70 in blocks of 16 (a ragged last block of 6), d = 8", 1,
                (2, 70, 8), 16),
               ("1 head, T = 64 in blocks of 64 (one block), d = 4", 2, (1, 64, 4), 64),
               ("batch 2 x 3 heads, T = 5, block 8 (longer than T), d = 3", 3, (2, 3, 5, 3), 8),
               ("1 head, T = 12 in blocks of 4, d = 16 (wider than a block)", 4, (1, 12, 16), 4),
               ("2 heads, T = 30 in blocks of 8, d = 4, each block's largest |x| on its first "
                "or last token", 5, (2, 30, 4), 8, True)]


def check_block_scales(block_scales, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `block_scales(x, block) -> (..., ceil(T / block)) float32`."""
    cases = [_scales_case(*c) for c in SCALE_CASES]
    return run_checks("block_scales(x, block)", block_scales, cases, verbose=verbose,
                      hint_level=hint_level)


# -- part 2: the FP8 round trip -------------------------------------------------------------

HINT_ROUND = ("Compare with the rule: each token's scale s_t (its block's), then "
              "round_to_fp8(x / s_t) * s_t in float32. np.repeat(s, block, axis=-1)[..., :T] "
              "gives one scale per token; add an axis ([..., None]) to divide all d values.")
HINT_TWICE = ("The scale is applied twice: you multiplied by s_t again after dequantizing "
              "(or divided twice). The round trip is x / s_t, round, times s_t, once each.")
HINT_NOT_BACK = ("You returned the e4m3 values themselves (up to 448): multiply them by s_t to "
                 "bring them back to x's units.")
HINT_MULTIPLIED = ("You multiplied by the scale before rounding and divided after: the stored "
                   "value is x / s_t (then the block's amax lands on 448), and x ~ value * s_t.")
HINT_NOT_ROUNDED = ("Your result equals x: nothing was rounded. Call round_to_fp8(x / s_t) "
                    "(imported from flashcourse.fp8.codes) before multiplying back.")
HINT_TILED = ("Tokens got the wrong block's scale: np.tile repeats the whole list of scales "
              "(s0 s1 s0 s1 ...); each scale must cover its `block` consecutive tokens "
              "(s0 s0 ... s1 s1 ...): np.repeat(s, block, axis=-1).")


ROUND_STEPS = ("Step by step: (1) give every token its block's scale: repeat each scale `block` "
               "times along the last axis (np.repeat: s0 s0 ... s1 s1 ..., not np.tile) and "
               "keep the first T; (2) add a last axis of length 1, so that a token's scale "
               "divides all d of its values; (3) divide x by those scales (float32 divided by "
               "float32) and round the quotient with round_to_fp8; (4) multiply the rounded "
               "values by the same scales, once, and return float32.")


def _expand(s, block, t):
    return np.repeat(np.asarray(s, np.float32), block, axis=-1)[..., :t, None]


def _round_mistake(x, s, block, mistake):
    t = x.shape[-2]
    st = _expand(s, block, t)
    if mistake == "tiled":
        reps = -(-t // s.shape[-1])
        st = np.tile(np.asarray(s, np.float32), reps)[..., :t, None]
    r = lambda y: round_to_fp8(y).astype(np.float32)        # noqa: E731
    return {None: r(x / st) * st, "tiled": r(x / st) * st, "twice": r(x / st) * st * st,
            "not back": r(x / st), "multiplied": r(x * st) / st,
            "not rounded": x.astype(np.float32)}[mistake]


def _round_case(name, seed, shape, block):
    x = _inputs(seed, shape)
    s = amax_scale(block_amax(x, block))
    mistakes = [("tiled", (HINT_TILED,)), ("twice", (HINT_TWICE,)),
                ("not back", (HINT_NOT_BACK,)), ("multiplied", (HINT_MULTIPLIED,)),
                ("not rounded", (HINT_NOT_ROUNDED,))]
    diagnoses = mistake_diagnoses(lambda m: _round_mistake(x, s, block, m),
                                  _level2(mistakes, ROUND_STEPS),
                                  lambda a, b: _same(a, b, 1e-5))
    want = _round_mistake(x, s, block, None)

    def run(fn):
        return real_array(fn(x.copy(), s.copy(), block)), want
    # float32 x / s may round to the other e4m3 neighbour at a tie if computed in float64:
    # rtol 1e-5 keeps float32 noise, a tie flip (2^-3) is a failure
    return Case(name, run, HINT_ROUND, diagnoses, rtol=1e-5, atol=0.0, hint2=ROUND_STEPS)


ROUND_CASES = [("2 heads, T = 70, blocks of 16, d = 8", 11, (2, 70, 8), 16),
               ("3 heads, T = 33, blocks of 8, d = 5", 12, (3, 33, 5), 8)]


def check_fake_quantize(fake_quantize_blocks, *, verbose: bool = True,
                        hint_level: int = 1) -> Result:
    """Check `fake_quantize_blocks(x, s, block) -> float32 x through e4m3`."""
    cases = [_round_case(*c) for c in ROUND_CASES]
    return run_checks("fake_quantize_blocks(x, s, block)", fake_quantize_blocks, cases,
                      verbose=verbose, hint_level=hint_level)


# -- part 3: the Hadamard matrix ----------------------------------------------------------------

HINT_HADAMARD = ("Compare with Sylvester's construction: start from [[1.0]] and double it, "
                 "H -> [[H, H], [H, -H]], until it is d x d; then divide by sqrt(d) so that "
                 "H @ H.T is the identity.")
HINT_UNNORMALISED = ("Your matrix has entries +-1: it is orthogonal only up to a factor, H @ H.T "
                     "= d I. Divide by sqrt(d); without it every score is multiplied by d.")
HINT_BY_D = ("You divided by d: then H @ H.T = I / d. The normalisation is 1 / sqrt(d).")
HINT_ORDER = ("Your matrix is orthogonal but not Sylvester's: the doubling step is "
              "[[H, H], [H, -H]] (the minus sign in the bottom-right block).")


HADAMARD_STEPS = ("Step by step: (1) start from the 1 x 1 matrix of one 1.0; (2) while it has "
                  "fewer than d rows, replace it by the 2 x 2 arrangement of itself (np.block) "
                  "whose top-left, top-right and bottom-left blocks are the matrix and whose "
                  "bottom-right block is its negative; (3) after the loop divide every entry "
                  "by the square root of d (not by d). For d = 1 the loop never runs and the "
                  "result is [[1.0]].")


def _hadamard_mistake(d, mistake):
    h = course_hadamard(d)
    if mistake is None:
        return h
    if mistake == "unnormalised":
        return h * np.sqrt(d)
    if mistake == "by d":
        return h * np.sqrt(d) / d
    if mistake == "order":
        g = np.ones((1, 1))
        while g.shape[0] < d:
            g = np.block([[g, g], [-g, g]])
        return g / np.sqrt(d)
    raise ValueError(mistake)


def _hadamard_case(d):
    mistakes = [("unnormalised", (HINT_UNNORMALISED,)), ("by d", (HINT_BY_D,)),
                ("order", (HINT_ORDER,))]
    diagnoses = mistake_diagnoses(lambda m: _hadamard_mistake(d, m),
                                  _level2(mistakes, HADAMARD_STEPS),
                                  lambda a, b: _same(a, b, 1e-9))

    def run(fn):
        return real_array(fn(d)), _hadamard_mistake(d, None)
    return Case(f"d = {d}", run, HINT_HADAMARD, diagnoses, rtol=1e-12, atol=1e-14,
                hint2=HADAMARD_STEPS)


def check_hadamard(hadamard_matrix, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `hadamard_matrix(d) -> (d, d)` for d = 1, 2, 8, 64."""
    cases = [_hadamard_case(d) for d in (1, 2, 8, 64)]
    return run_checks("hadamard_matrix(d)", hadamard_matrix, cases, verbose=verbose,
                      hint_level=hint_level)


# -- part 4: rotating Q and K -----------------------------------------------------------------

HINT_ROTATE = ("Compare with the rule: both q and k are multiplied by h along d, q @ h and "
               "k @ h (d is the last axis), so that (q h)(k h)^T = q k^T.")
HINT_ROT_TRANSPOSE = ("You multiplied by h transposed (q @ h.T): the Hadamard matrix is "
                      "symmetric, so it looked right, but rotate_qk takes any h. The rule is "
                      "q @ h and k @ h.")
HINT_ONLY_Q = ("Only q was rotated: k must be rotated by the same h, or every score q . k "
               "changes. Return (q @ h, k @ h).")
HINT_ONLY_K = ("Only k was rotated: q must be rotated by the same h. Return (q @ h, k @ h).")
HINT_TOKEN_AXIS = ("You rotated along the tokens (h @ x): the rotation mixes the d coordinates "
                   "of each token, x @ h.")


ROTATE_STEPS = ("Step by step: (1) d is the last axis of q and of k, so each is multiplied by h "
                "on the right, with the @ operator, which keeps every leading axis (heads, "
                "tokens) as it is; (2) use h as it is given, not h.T: the checker also passes "
                "an orthogonal h that is not symmetric; (3) return the two products as a "
                "pair, the rotated q first.")


def _rotate_case(name, seed, tq, tk, d, general=False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, tq, d))
    k = rng.standard_normal((2, tk, d))
    h = course_hadamard(d)
    if general:   # any orthogonal matrix, not symmetric: h.T differs from h
        h = np.linalg.qr(rng.standard_normal((d, d)))[0]
    replay = {None: (q @ h, k @ h), "only q": (q @ h, k), "only k": (q, k @ h),
              "transpose": (q @ h.T, k @ h.T)}
    if tq == d and tk == d:
        replay["token axis"] = (h @ q, h @ k)
    mistakes = [("only q", (HINT_ONLY_Q,)), ("only k", (HINT_ONLY_K,))] + (
        [("transpose", (HINT_ROT_TRANSPOSE,))] if general else []) + (
        [("token axis", (HINT_TOKEN_AXIS,))] if "token axis" in replay else [])

    def close(a, b):
        a = plain(a)
        return isinstance(a, tuple) and len(a) == 2 and all(_same(x, y, 1e-9)
                                                            for x, y in zip(a, b))
    diagnoses = mistake_diagnoses(lambda m: replay[m], _level2(mistakes, ROTATE_STEPS), close)

    def run(fn):
        out = fn(q.copy(), k.copy(), h.copy())
        if isinstance(out, list):
            out = tuple(out)
        if isinstance(out, tuple):
            out = tuple(real_array(o) for o in out)
        return out, replay[None]
    return Case(name, run, HINT_ROTATE, diagnoses, rtol=1e-10, atol=1e-12, names=("q", "k"),
                hint2=ROTATE_STEPS)


def check_rotate_qk(rotate_qk, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `rotate_qk(q, k, h) -> (q @ h, k @ h)`."""
    cases = [_rotate_case("Tq = Tk = d = 8", 21, 8, 8, 8),
             _rotate_case("Tq = 5, Tk = 11, d = 16", 22, 5, 11, 16),
             _rotate_case("a general rotation h (orthogonal, not symmetric), Tq = 5, Tk = 7, "
                          "d = 8", 23, 5, 7, 8, general=True)]
    return run_checks("rotate_qk(q, k, h)", rotate_qk, cases, verbose=verbose,
                      hint_level=hint_level)


# -- part 5: the FP8 forward from the parts ---------------------------------------------------

HINT_FORWARD = ("Compare with the recipe: if use_hadamard, h = hadamard_matrix(d) and (q, k) = "
                "rotate_qk(q, k, h); then for each of q, k, v: s = block_scales(x, block) and x "
                "= fake_quantize_blocks(x, s, block); finally hand the three to "
                "forward_dequantized.")
HINT_FWD_ONLY_Q = ("Your output matches rotating q but not k: the scores changed. Rotate both.")
HINT_FWD_V = ("Your output matches rotating v as well: o came out rotated (o h instead of o). "
              "Only q and k are rotated; their product does not change, v's would.")
HINT_FWD_UNNORM = ("Your output matches an unnormalised Hadamard matrix: every score grew d "
                   "times, so the softmax is far too sharp. Use H / sqrt(d).")
HINT_FWD_NO_ROT = ("Your output matches the forward without the rotation: use_hadamard=True "
                   "must rotate q and k first, BEFORE quantizing them (rotating both after the "
                   "FP8 step cancels out: (q h)(k h)^T = q k^T for an orthogonal h).")
HINT_FWD_NO_V = ("Your output matches quantizing q and k but not v: v goes through FP8 too.")
HINT_FWD_ROTATE_AFTER_DTYPE = (
    "forward_dequantized received q and k in float64 but v in float32 (the error above): q "
    "and k went through a float64 step after fake_quantize_blocks, which returns float32. "
    "If that step is the rotation, it goes before quantizing, so that FP8 holds the rotated "
    "values (whose outliers are spread over the head dimension).")
HINT_FWD_ALWAYS_ROT = ("Your output matches rotating q and k although use_hadamard is False: "
                      "rotate them only when use_hadamard is True; otherwise q and k go to "
                      "FP8 as they are.")
HINT_FWD_SCALES_BEFORE = ("Your output matches q and k quantized with the scales of q and k "
                          "before the rotation: the rotation changes each block's largest "
                          "value (it spreads the outliers), so take block_scales of the "
                          "rotated q and k, just before fake_quantize_blocks.")
HINT_FWD_TENSOR = ("Your output matches one scale per head (the whole tensor), not per block "
                   "of `block` tokens.")


FORWARD_STEPS = ("Step by step: (1) only when use_hadamard is True: h is your hadamard_matrix "
                 "of q's last size, and q and k are replaced by what your rotate_qk returns "
                 "for them (v is never rotated); (2) then each of q, k and v in turn: its "
                 "scales from block_scales(x, block), and x replaced by "
                 "fake_quantize_blocks(x, those scales, block); (3) return what "
                 "forward_dequantized gives for the three quantized arrays.")


def _with_scales_of(x, before, block):
    """x through e4m3 with the block scales of `before` (the unrotated tensor)."""
    s_t = np.repeat(amax_scale(block_amax(before, block)), block, axis=-1)
    s_t = s_t[..., :x.shape[-2], None]
    return (round_to_fp8(x.astype(np.float32) / s_t) * s_t).astype(np.float32)


def _forward_mistake(q, k, v, block, use_h, mistake):
    d = q.shape[-1]
    q0, k0 = q, k
    h = course_hadamard(d)
    if mistake == "unnormalised":
        h = h * np.sqrt(d)
    if (use_h and mistake != "no rotation") or mistake == "always rotated":
        q = q.astype(np.float64) @ h
        if mistake == "v":
            v = v.astype(np.float64) @ h
        if mistake != "only q":
            k = k.astype(np.float64) @ h
    scheme = "head" if mistake == "tensor" else "block"
    qd, kd = (fake_quantize(x, scheme, block=block) for x in (q, k))
    if mistake == "scales before":
        qd, kd = _with_scales_of(q, q0, block), _with_scales_of(k, k0, block)
    vd = v.astype(np.float32) if mistake == "no v" else fake_quantize(v, scheme, block=block)
    return fa.forward_dequantized(qd, kd, vd)


def _forward_case(name, seed, tq, tk, d, block, use_h):
    rng = np.random.default_rng(seed)
    q, k, v = fa.outlier_qkv(rng, (2, tq, d), (2, tk, d))
    mistakes = [("tensor", (HINT_FWD_TENSOR,)), ("no v", (HINT_FWD_NO_V,))]
    if not use_h:
        mistakes.append(("always rotated", (HINT_FWD_ALWAYS_ROT,)))
    if use_h:
        mistakes = [("only q", (HINT_FWD_ONLY_Q,)), ("v", (HINT_FWD_V,)),
                    ("unnormalised", (HINT_FWD_UNNORM,)),
                    ("no rotation", (HINT_FWD_NO_ROT,)),
                    ("scales before", (HINT_FWD_SCALES_BEFORE,))] + mistakes
    want = _forward_mistake(q, k, v, block, use_h, None)
    diagnoses = mistake_diagnoses(lambda m: _forward_mistake(q, k, v, block, use_h, m),
                                  _level2(mistakes, FORWARD_STEPS),
                                  lambda a, b: _same(a, b, 1e-3), right=want)

    def run(fn):
        return real_array(fn(q.copy(), k.copy(), v.copy(), block, use_h)), want
    # the same FP8 numbers up to float32 order of operations: a tie may flip one e4m3 step
    # a rotation by the float64 h after the quantization hands float64 q, k to the forward
    errors = [((lambda exc: isinstance(exc, TypeError) and "must share one dtype" in str(exc)
                and "q float64, k float64, v float32" in str(exc)),
               HINT_FWD_ROTATE_AFTER_DTYPE, FORWARD_STEPS)] if use_h else []
    return Case(name, run, HINT_FORWARD, diagnoses, rtol=1e-3, atol=1e-4, time_limit_s=60.0,
                error_diagnoses=errors, hint2=FORWARD_STEPS)


def check_fp8_forward(fp8_forward, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `fp8_forward(q, k, v, block, use_hadamard) -> o` (float32, (..., Tq, d))."""
    cases = [_forward_case("no rotation, Tq = 40, Tk = 52, d = 16, blocks of 16", 31,
                           40, 52, 16, 16, False),
             _forward_case("with the rotation, Tq = 40, Tk = 52, d = 16, blocks of 16", 31,
                           40, 52, 16, 16, True),
             _forward_case("with the rotation, Tq = 70, Tk = 33, d = 32, blocks of 8", 32,
                           70, 33, 32, 8, True)]
    return run_checks("fp8_forward(q, k, v, block, use_hadamard)", fp8_forward, cases,
                      verbose=verbose, hint_level=hint_level)


def rmse_table(fp8_forward, q, k, v, block: int = 64) -> dict:
    """{label: RMSE against float64} for the course's per-tensor FP8 and the learner's
    forward without and with the rotation (the lab's closing table)."""
    o_ref = fa.reference(q, k, v)
    return {"course: FP8 per tensor": fa.rmse(fa.fp8_attention(q, k, v, scheme="tensor"),
                                              o_ref),
            "yours: FP8 per block": fa.rmse(fp8_forward(q, k, v, block, False), o_ref),
            "yours: FP8 per block + Hadamard": fa.rmse(fp8_forward(q, k, v, block, True),
                                                        o_ref)}
