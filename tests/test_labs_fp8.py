"""Lab 15 (FP8 block scales and the Hadamard rotation): the solutions pass, the stubs say "not
implemented", and each typical mistake (an edit of the solution) gets its own hint: the scale
from the wrong axis, forgetting to rotate K too, an unnormalised Hadamard matrix, the scale
applied twice, and the others the checkers replay."""

import numpy as np

from flashcourse.labs import fp8 as L
from labtools import assert_hint, hint_leaks_test, lab_path, lab_tests, mistakes_test

LAB = lab_path("lab15_fp8")
CHECKS = [(L.check_block_scales, "block_scales"), (L.check_fake_quantize, "fake_quantize_blocks"),
          (L.check_hadamard, "hadamard_matrix"), (L.check_rotate_qk, "rotate_qk"),
          (L.check_fp8_forward, "fp8_forward")]

lab, test_solutions_pass, test_stubs_report_not_implemented = lab_tests(LAB, CHECKS)

_AMAX = "max(axis=(-2, -1))"
_RET = "    return (np.stack(amax, axis=-1) / 448.0).astype(np.float32)       # (..., n_blocks)"
_ST = "    s_t = np.repeat(s, block, axis=-1)[..., :x.shape[-2], None]       # (..., T, 1)"
_RT = "    return (round_to_fp8(x / s_t) * s_t).astype(np.float32)"
_NB = "    n_blocks = -(-x.shape[-2] // block)                               # ceil(T / block)"
_ROT = "        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))"

#: function: [(solution text, the mistake that replaces it, the hint it must get), ...]
MISTAKES = {
    "block_scales": [
        # review round 5 ac, M5: block x block tiles (d cut at `block`) passed while d < block
        ("x[..., b * block:(b + 1) * block, :]", "x[..., b * block:(b + 1) * block, :block]",
         (L.HINT_SCALES,)),
        (_NB, "    return (np.abs(x).max(axis=-1) / 448.0).astype(np.float32)",
         (L.HINT_PER_TOKEN,)),                                        # scale from the wrong axis
        (_AMAX, "max(axis=-2)", (L.HINT_PER_CHANNEL,)),               # ... the other wrong axis
        ("    n_blocks = -(-x.shape[-2] // block)                               # ceil(T / block)",
         "    n_blocks = x.shape[-2] // block", (L.HINT_DROPPED.format(t=70, b=16, n=5),)),
        # review round 18 b: T // block + 1 blocks (an empty last block when block divides
        # T) crashed with the generic hint
        ("    n_blocks = -(-x.shape[-2] // block)                               # ceil(T / block)",
         "    n_blocks = x.shape[-2] // block + 1", (L.HINT_EXTRA_BLOCK,)),
        (_RET, "    return np.stack(amax, axis=-1).astype(np.float32)", (L.HINT_NO_448,)),
        (_RET, "    return (448.0 / np.stack(amax, axis=-1)).astype(np.float32)",
         (L.HINT_INVERTED,)),
        ("np.abs(x[..., b * block:(b + 1) * block, :])", "x[..., b * block:(b + 1) * block, :]",
         (L.HINT_SIGNED,)),
        (_RET, "    return (np.stack(amax, axis=-1) / 57344.0).astype(np.float32)",
         (L.HINT_E5M2,)),
        ("    n_blocks = -(-x.shape[-2] // block)                               # ceil(T / block)",
         "    n_blocks = 1; block = x.shape[-2]", (L.HINT_WHOLE,)),
        # review round 13 c: a slice one token short passed (no case put a block's max on
        # its last or first token)
        ("(b + 1) * block, :])", "(b + 1) * block - 1, :])", (L.HINT_EDGE,)),
        ("np.abs(x[..., b * block:", "np.abs(x[..., b * block + 1:", (L.HINT_EDGE,)),
        ("(b + 1) * block, :])", "(b + 1) * block + 1, :])", (L.HINT_EDGE,)),
    ],
    "fake_quantize_blocks": [
        (_RT, "    return (round_to_fp8(x / s_t) * s_t * s_t).astype(np.float32)",
         (L.HINT_TWICE,)),                                            # scale applied twice
        (_RT, "    return round_to_fp8(x / s_t).astype(np.float32)", (L.HINT_NOT_BACK,)),
        (_RT, "    return (round_to_fp8(x * s_t) / s_t).astype(np.float32)",
         (L.HINT_MULTIPLIED,)),
        (_RT, "    return x.astype(np.float32)", (L.HINT_NOT_ROUNDED,)),
        (_ST, "    s_t = np.tile(s, -(-x.shape[-2] // s.shape[-1]))[..., :x.shape[-2], None]",
         (L.HINT_TILED,)),
    ],
    "hadamard_matrix": [
        ("    return h / np.sqrt(d)", "    return h", (L.HINT_UNNORMALISED,)),
        ("    return h / np.sqrt(d)", "    return h / d", (L.HINT_BY_D,)),
        ("np.block([[h, h], [h, -h]])", "np.block([[h, h], [-h, h]])", (L.HINT_ORDER,)),
    ],
    "rotate_qk": [
        ("    return q @ h, k @ h", "    return q @ h, k", (L.HINT_ONLY_Q,)),  # K not rotated
        ("    return q @ h, k @ h", "    return q, k @ h", (L.HINT_ONLY_K,)),
        ("    return q @ h, k @ h", "    return h @ q, h @ k", (L.HINT_TOKEN_AXIS,)),
    ],
    "fp8_forward": [
        (_ROT, "        q = q @ hadamard_matrix(q.shape[-1])", (L.HINT_FWD_ONLY_Q,)),
        (_ROT, _ROT + "\n        v = v @ hadamard_matrix(q.shape[-1])", (L.HINT_FWD_V,)),
        (_ROT, "        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]) "
               "* np.sqrt(q.shape[-1]))", (L.HINT_FWD_UNNORM,)),
        (_ROT, "        pass", (L.HINT_FWD_NO_ROT,)),
        # rotated after quantizing: float64 q, k next to float32 v crash the forward ...
        ("    if use_hadamard:\n        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n"
         "    q, k, v = (fake_quantize_blocks(x, block_scales(x, block), block) for x in "
         "(q, k, v))\n",
         "    q, k, v = (fake_quantize_blocks(x, block_scales(x, block), block) for x in "
         "(q, k, v))\n    if use_hadamard:\n"
         "        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n",
         (L.HINT_FWD_ROTATE_AFTER_DTYPE,)),
        # ... and, cast back to float32, cancel out: the output of no rotation
        ("    if use_hadamard:\n        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n"
         "    q, k, v = (fake_quantize_blocks(x, block_scales(x, block), block) for x in "
         "(q, k, v))\n",
         "    q, k, v = (fake_quantize_blocks(x, block_scales(x, block), block) for x in "
         "(q, k, v))\n    if use_hadamard:\n"
         "        q, k = (x.astype(np.float32) for x in rotate_qk(q, k, "
         "hadamard_matrix(q.shape[-1])))\n", (L.HINT_FWD_NO_ROT,)),
        # review round 16 b, m: use_hadamard ignored (always rotated) got the generic hint
        ("    if use_hadamard:\n        q, k = rotate", "    if True:\n        q, k = rotate",
         (L.HINT_FWD_ALWAYS_ROT,)),
        ("for x in (q, k, v))", "for x in (q, k, v))\n    v = v * 0 + v", ()),  # harmless
    ],
}
MISTAKES["fp8_forward"] = [m for m in MISTAKES["fp8_forward"] if m[2]]

test_mistake_gets_its_hint = mistakes_test(LAB, CHECKS, MISTAKES, id_width=40)


def test_mistakes_the_brief_names_are_replayed():
    """Scale from the wrong axis, K not rotated, unnormalised Hadamard, scale applied twice."""
    hints = {h[0] for edits in MISTAKES.values() for _, _, h in edits}
    for needed in (L.HINT_PER_TOKEN, L.HINT_PER_CHANNEL, L.HINT_ONLY_Q, L.HINT_FWD_ONLY_Q,
                   L.HINT_UNNORMALISED, L.HINT_FWD_UNNORM, L.HINT_TWICE):
        assert needed in hints


def test_forward_without_v_quantized_and_per_head_scales_are_named(lab):
    def no_v(q, k, v, block, use_h):
        if use_h:
            q, k = lab["rotate_qk"](q, k, lab["hadamard_matrix"](q.shape[-1]))
        q, k = (lab["fake_quantize_blocks"](x, lab["block_scales"](x, block), block)
                for x in (q, k))
        return L.fa.forward_dequantized(q, k, v)
    assert_hint(L.check_fp8_forward, no_v, L.HINT_FWD_NO_V)

    def per_head(q, k, v, block, use_h):
        return lab["fp8_forward"](q, k, v, q.shape[-2] + k.shape[-2], use_h)
    assert_hint(L.check_fp8_forward, per_head, L.HINT_FWD_TENSOR)


def test_a_float64_division_still_passes(lab):
    def f64(x, s, block):
        s_t = np.repeat(s.astype(np.float64), block, axis=-1)[..., :x.shape[-2], None]
        return (L.round_to_fp8(x.astype(np.float64) / s_t) * s_t).astype(np.float32)
    assert L.check_fake_quantize(f64, verbose=False).passed


def test_the_rmse_falls_with_the_solution(lab):
    q, k, v = L.fa.outlier_qkv(np.random.default_rng(53), (2, 512, 128), (2, 512, 128))
    t = L.rmse_table(lab["fp8_forward"], q, k, v, block=64)
    assert t["yours: FP8 per block + Hadamard"] < t["yours: FP8 per block"] \
        < t["course: FP8 per tensor"]


test_no_hint_contains_a_solution_line = hint_leaks_test(
    [v for k, v in vars(L).items() if k.startswith("HINT_") or k.endswith("_STEPS")], LAB)


def test_hint_level_two_adds_an_explicit_nudge():
    """The lab promises a more explicit hint with hint_level=2 (review round 18 b: every
    checker gave the level-1 text again): each checker gives its steps, for a named mistake,
    an unnamed one and a crash."""
    def scales_per_token(x, block):
        return (np.abs(x).max(axis=-1) / 448.0).astype(np.float32)

    def forward_crash(q, k, v, block, use_h):
        raise ValueError("a slip")
    wrong = [(L.check_block_scales, scales_per_token, L.SCALES_STEPS),
             (L.check_block_scales, lambda x, block: np.ones(x.shape[:-2] + (1,)),
              L.SCALES_STEPS),
             (L.check_fake_quantize, lambda x, s, block: x, L.ROUND_STEPS),
             (L.check_fake_quantize, lambda x, s, block: x * 0.5, L.ROUND_STEPS),
             (L.check_hadamard, lambda d: np.eye(d), L.HADAMARD_STEPS),
             (L.check_hadamard, lambda d: L.course_hadamard(d) * np.sqrt(d), L.HADAMARD_STEPS),
             (L.check_rotate_qk, lambda q, k, h: (q @ h, k), L.ROTATE_STEPS),
             (L.check_rotate_qk, lambda q, k, h: (q, k), L.ROTATE_STEPS),
             (L.check_fp8_forward, lambda q, k, v, block, use_h: L.fa.forward_dequantized(
                 q, k, v), L.FORWARD_STEPS),
             (L.check_fp8_forward, forward_crash, L.FORWARD_STEPS)]
    for check, fn, steps in wrong:
        with np.errstate(all="ignore"):
            one = check(fn, verbose=False)
            two = check(fn, verbose=False, hint_level=2)
        assert not two.passed and two.hint == f"{one.hint}\n  More explicitly: {steps}", check



def test_every_recorded_mistake_gets_a_second_level():
    """Review round 18 c (merged with 18 b's levels): each mistake of MISTAKES gets, at
    hint_level=2, its level-1 hint followed by a step-by-step second one."""
    from labtools import mutate
    checks = {name: check for check, name in CHECKS}
    for name, edits in MISTAKES.items():
        for old, new, _ in edits:
            fn = mutate(LAB, name, old, new)
            with np.errstate(all="ignore"):
                one = checks[name](fn, verbose=False)
                two = checks[name](fn, verbose=False, hint_level=2)
            assert not two.passed and two.hint.startswith(one.hint) and two.hint != one.hint
            assert "Step by step" in two.hint, (name, old, two.hint)
