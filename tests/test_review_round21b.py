"""Review round 21 b: each test failed before its fix (REVIEW_2026-12-08_round21_b.md)."""

from __future__ import annotations

import numpy as np
import pytest

from flashcourse.labs import _harness
from flashcourse.labs.decode import check_combine
from flashcourse.labs.fragments import c_map_solution, check_c_map
from flashcourse.labs.hopper_layouts import check_descriptor
from flashcourse.labs.paged_cache import check_token_address


#: M1: a checker handed something that is not a function (the function called, its result
#: passed: check_c_map(c_map(0, 0)); None; a name bound to a number) said "your function
#: raised TypeError: ... object is not callable" and gave the formula hint of the first case,
#: a mistake the learner's function need not have made
NOT_FUNCTIONS = {
    "c_map's result": (check_c_map, c_map_solution(0, 0)),
    "combine's result": (check_combine, (np.zeros((4, 16)), np.zeros(4))),
    "None": (check_descriptor, None),
    "a number": (check_token_address, 7),
}


@pytest.mark.parametrize("key", sorted(NOT_FUNCTIONS))
def test_a_checker_handed_a_result_says_pass_the_function(key):
    check, thing = NOT_FUNCTIONS[key]
    result = check(thing, verbose=False)
    assert not result.passed and not result.todo
    assert result.hint == _harness.HINT_NOT_CALLABLE


def test_parts_given_as_functions_still_run():
    """A tuple or dict of functions is what several checkers take: not refused."""
    def fn(x):
        return x
    case = _harness.Case("identity", lambda f: (f[0](1.0), 1.0) if isinstance(f, tuple)
                         else (f["a"](1.0), 1.0), "hint")
    assert _harness.run_checks("t", (fn, fn), [case], verbose=False).passed
    assert _harness.run_checks("t", {"a": fn}, [case], verbose=False).passed
    assert not _harness.run_checks("t", (fn, None), [case], verbose=False).passed


def test_append_names_v_new_when_its_token_count_differs_from_k_new():
    """m1: k_new of 2 tokens with v_new of 3 raised numpy's "shape mismatch: value array of
    shape (3,1,4) could not be broadcast ..." after the pages were already taken (the cache
    left with a page in its table and no token counted in it)."""
    from flashcourse import paged_cache as pc
    cache = pc.PagedKVCache(num_pages=8, heads_kv=1, page_size=16, head_dim=4, max_seqs=2,
                            max_pages_per_seq=2)
    with pytest.raises(ValueError, match="v_new must have the shape of k_new"):
        cache.append(0, np.zeros((1, 2, 4)), np.zeros((1, 3, 4)))
    assert len(cache.free) == 8
    assert (cache.block_table == pc.NO_PAGE).all() and cache.seq_lens[0] == 0


@pytest.mark.parametrize("check", [check_combine, check_c_map], ids=["combine", "c_map"])
def test_notebook_checkers_take_hint_level_as_the_labs_do(check):
    """m2: the labs teach check(fn, hint_level=2); notebooks 10 and 11's checkers raised
    TypeError ("unexpected keyword argument 'hint_level'") for it."""
    result = check(lambda *args: None, hint_level=2, verbose=False)
    assert not result.passed and result.hint


def _lab_parts(lab: str, names):
    from labtools import functions_of, lab_path
    ns = functions_of(lab_path(lab))
    return {n: ns[n] for n in names}


def test_lab_forward_and_backward_name_inputs_of_the_wrong_shape():
    """m3: lab 10's lab_forward and lab 10b's lab_backward (the cells a learner reuses on
    shapes of their own) read v of 6 rows beside k of 7 past its end ("index 6 is out of
    bounds" from the simulator's thread, garbage on a GPU) and took a (1, T, d) q to
    "too many values to unpack"."""
    from flashcourse.labs import tensor_core_backward_lab as BL
    from flashcourse.labs import tensor_core_lab as L
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, 8)) for n in (5, 7, 6))
    fwd = _lab_parts("lab10_tensor_cores", L.PARTS)
    with pytest.raises(ValueError, match="v must have the same shape as k"):
        L.lab_forward(fwd, q, k, v)
    with pytest.raises(ValueError, match="q must be 2-D"):
        L.lab_forward(fwd, q[None], k[None], k[None])
    bwd = _lab_parts("lab10b_tensor_core_backward", BL.PARTS)
    with pytest.raises(ValueError, match="v must have the same shape as k"):
        BL.lab_backward(bwd, q, k, v, q, np.zeros(5), q)
    with pytest.raises(ValueError, match="lse must have shape"):
        BL.lab_backward(bwd, q, k, k, q, np.zeros(4), q)


def test_float_of_a_string_or_int_constant_is_named_as_float64():
    """M2: x = float('-inf') (a common spelling of -inf) passed lab 10's float32-constants
    check, which flags -math.inf: Numba types float('-inf') and float(0) float64 as well
    (numba-cuda lowers float(string literal) to a float64 constant)."""
    from labtools import edited, lab_path

    from flashcourse.labs import tensor_core_parts as P
    from flashcourse.labs.cuda_kernel import HINT_FLOAT64
    from flashcourse.labs.kernel_source import float64_literals
    fn = edited(lab_path("lab10_tensor_cores"), "softmax_tile",
                [("x = NEG_INF", "x = float('-inf')")])
    assert float64_literals(fn) == ["float('-inf')"]
    with np.errstate(all="ignore"):
        result = P.check_softmax_tile(fn, verbose=False)
    assert not result.passed and result.hint == HINT_FLOAT64[0]


@pytest.mark.parametrize("value", [None, "0x0"], ids=["None", "hex text"])
def test_show_bank_groups_names_an_offset_that_is_not_a_number(value, capsys):
    """m4: lab 12's show_bank_groups with a my_swizzled_offset that returns None (a missing
    return) or text raised int()'s TypeError / ValueError out of the library."""
    from flashcourse.labs.hopper_layouts import show_bank_groups
    show_bank_groups(lambda row, k: value)
    out = capsys.readouterr().out
    assert "not a whole number of bytes" in out and "check_swizzled_offset" in out
