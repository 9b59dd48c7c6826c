"""The checkers of notebook 16's exercises (flashcourse/exercises_distributed.py): the
solutions pass, the stubs say "not implemented", and each typical mistake, written out as a
learner would write it, gets its own hint."""

import pytest

from flashcourse import exercises_distributed as X


def test_solutions_pass():
    assert X.check_ring_break_even(X.reference_ring_break_even, verbose=False).passed
    assert X.check_comm_bytes(X.reference_comm_bytes, verbose=False).passed


def test_stubs_are_reported_as_not_implemented(capsys):
    def stub(*args):
        raise NotImplementedError("write it")
    for check in (X.check_ring_break_even, X.check_comm_bytes):
        r = check(stub)
        assert r.todo and not r.passed
    assert capsys.readouterr().out.count("Not implemented yet") == 2


@pytest.mark.parametrize("fn,hint", [
    (lambda f, b, e, h, hkv: f * e / (2 * b), X.HINT_EVEN_NO_GQA),
    (lambda f, b, e, h, hkv: f * e * h / (2 * b * hkv), X.HINT_EVEN_GQA_INVERTED),
    (lambda f, b, e, h, hkv: f * e * hkv / (4 * b * h), X.HINT_EVEN_HALF_OR_NO_E),
    (lambda f, b, e, h, hkv: f * e * hkv / (b * h), X.HINT_EVEN_ONE_MATMUL),
    (lambda f, b, e, h, hkv: 2 * b * h / (f * e * hkv), X.HINT_EVEN_INVERTED),
    (lambda f, b, e, h, hkv: f * e * hkv / (3 * b * h), X.HINT_EVEN),       # none of these
], ids=["no gqa", "gqa inverted", "only K", "one matmul", "inverted", "other"])
def test_break_even_mistakes_get_their_hint(fn, hint):
    r = X.check_ring_break_even(fn, verbose=False)
    assert not r.passed and r.hint == hint


def _bytes(*, steps=None, kv="kv", tensors=2, out=True, keep=True):
    def fn(design, n, world, heads, kv_heads, d, e):
        rows = n / world
        kvh = kv_heads if kv == "kv" else heads
        if design in ("ring", "allgather"):
            return tensors * (world - 1 if steps is None else steps(world)) * rows * kvh * d * e
        share = (world - 1) / world if keep else 1.0
        q_o = 2 * heads if out else heads
        return share * rows * d * e * (q_o + tensors * kvh)
    return fn


@pytest.mark.parametrize("fn,hint", [
    (_bytes(steps=lambda w: w), X.HINT_BYTES_W_STEPS),
    (_bytes(kv="q"), X.HINT_BYTES_Q_HEADS),
    (_bytes(tensors=1), X.HINT_BYTES_ONLY_K),
    (_bytes(out=False), X.HINT_BYTES_NO_OUT),
    (_bytes(keep=False), X.HINT_BYTES_KEEP),
], ids=["w steps", "H heads of K/V", "only K", "no O", "keeps nothing"])
def test_bytes_mistakes_get_their_hint(fn, hint):
    r = X.check_comm_bytes(fn, verbose=False)
    assert not r.passed and r.hint == hint


@pytest.mark.parametrize("rounding", [round, int, lambda x: -(-x // 1)],
                         ids=["round", "int", "ceil"])
def test_break_even_rounded_to_whole_positions_passes(rounding):
    """The break-even is a number of positions: rounded to a whole one, it is right."""
    def fn(f, b, e, h, hkv):
        return rounding(X.reference_ring_break_even(f, b, e, h, hkv))
    assert X.check_ring_break_even(fn, verbose=False).passed


def test_break_even_without_element_bytes_is_not_told_only_k():
    """Leaving out e (2 bytes) halves the block like sending only K: the hint names both."""
    r = X.check_ring_break_even(lambda f, b, e, h, hkv: f * hkv / (2 * b * h), verbose=False)
    assert not r.passed and r.hint == X.HINT_EVEN_HALF_OR_NO_E


def test_ulysses_counted_as_the_ring_gets_its_own_hint():
    def fn(design, n, world, heads, kv_heads, d, e):
        return 2.0 * (world - 1) * (n / world) * kv_heads * d * e     # the ring's, everywhere
    r = X.check_comm_bytes(fn, verbose=False)
    assert not r.passed and r.hint == X.HINT_BYTES_ULYSSES_RING


@pytest.mark.parametrize("design,hint", [("ring", X.HINT_BYTES_NO_E),
                                         ("ulysses", X.HINT_BYTES_NO_E),
                                         ("allgather", X.HINT_BYTES_HALF_OR_NO_E)])
def test_bytes_without_element_size_are_not_told_only_k(design, hint):
    """Leaving out e counts elements: the hint says so, never only "only K travels" (with
    e = 2 the ring's two slips give the same number, and the all-gather's cases all have
    e = 2: both causes are named; the first ring case has e = 4, where they differ)."""
    def fn(d_, n, world, heads, kv_heads, d, e):
        right = X.reference_comm_bytes(d_, n, world, heads, kv_heads, d, e)
        return right / e if d_ == design else right
    r = X.check_comm_bytes(fn, verbose=False)
    assert not r.passed and r.hint == hint


def test_bytes_only_k_or_no_e_named_together_where_they_coincide():
    """A learner who gets the fp32 case right but halves the e = 2 all-gather's bytes is
    told both possible causes."""
    def fn(design, n, world, heads, kv_heads, d, e):
        right = X.reference_comm_bytes(design, n, world, heads, kv_heads, d, e)
        return right / 2 if design == "allgather" and e == 2 else right
    r = X.check_comm_bytes(fn, verbose=False)
    assert not r.passed and r.hint == X.HINT_BYTES_HALF_OR_NO_E
