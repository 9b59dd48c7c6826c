"""Helpers for the lab tests: run a lab's function cells, mutate a solution, count lines.

Wrong implementations are made from the solution itself by replacing one line
(`mutate`), so each test shows exactly which mistake it plays and the checker
must name that mistake.
"""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from helpers import ROOT, tool

SOLUTIONS = ROOT / "labs" / "solutions"
make_labs = tool("make_labs")

BEGIN = re.compile(r"^\s*### BEGIN SOLUTION")
END = re.compile(r"^\s*### END SOLUTION")


def lab_path(name: str) -> Path:
    return SOLUTIONS / f"{name}.ipynb"


def cells_of(path: Path, *, student: bool = False) -> list[str]:
    nb = make_labs.student_version(path) if student else nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _is_definition(src: str) -> bool:
    body = src.lstrip()
    return body.startswith(("import", "from", "def ", "@"))


def exec_cell(src: str, name: str, namespace: dict) -> None:
    """Execute the cell `src` in `namespace` as the file `name`, registered in linecache so
    that inspect.getsource works, as it does in Jupyter."""
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    exec(compile(src, name, "exec"), namespace)  # noqa: S102


def functions_of(path: Path, *, student: bool = False, replace=()) -> dict:
    """Execute the import and definition cells of a lab; `replace` = [(old, new), ...] edits
    the source first (each `old` must occur)."""
    namespace: dict = {}
    used = set()
    for n, src in enumerate(cells_of(path, student=student)):
        if not _is_definition(src):
            continue
        for i, (old, new) in enumerate(replace):
            if old in src:
                src = src.replace(old, new)
                used.add(i)
        exec_cell(src, f"<{path.stem}{'-student' if student else ''}-cell{n}-{hash(src)}>",
                  namespace)
    missing = [old for i, (old, _) in enumerate(replace) if i not in used]
    assert not missing, f"{path.name}: edits whose text is in no definition cell: {missing}"
    return namespace


def mutate(path: Path, name: str, old: str, new: str):
    """The solution's function `name` with the text `old` replaced by `new` (must occur)."""
    sources = [s for s in cells_of(path) if f"def {name}(" in s]
    assert sources and old in sources[0], (name, old)
    return functions_of(path, replace=[(old, new)])[name]


def edited(path: Path, name: str, edits, *, anywhere: bool = False, also=()):
    """The solution's function `name` with `edits` [(old, new), ...] applied: each `old` must
    stand in the cell that defines `name` (with `anywhere`, in any cell of the lab); `also`,
    more edits applied unchecked (an import the edited code needs)."""
    for old, _ in edits:
        assert any((anywhere or f"def {name}(" in src) and old in src
                   for src in cells_of(path)), (name, old)
    return functions_of(path, replace=[*edits, *also])[name]


def loop_over(var: str, size: str, other) -> tuple[str, str]:
    """The edit that makes the solution's loop `for var in range(size):` run over `other`
    instead: another size name, a fixed count, or an expression for the same size."""
    return f"for {var} in range({size}):", f"for {var} in range({other}):"


#: an edit of a CUDA lab's import cell for edits that call float32(...)
IMPORT_FLOAT32 = ("from numba import cuda\n", "from numba import cuda, float32\n")


def assert_hint(check, fn, hint: str, *args, todo: bool = False):
    """Run the lab checker `check` on the wrong `fn` (numpy warnings silenced; `args` go after
    `fn`): it must fail and name `hint`; `todo` also asserts it is not read as a TODO stub."""
    with np.errstate(all="ignore"):
        result = check(fn, *args, verbose=False)
    assert not result.passed and result.hint == hint
    if todo:
        assert not result.todo
    return result


def lab_fixture(path: Path):
    """A module-scoped fixture: the functions of the solution lab at `path`."""
    @pytest.fixture(scope="module")
    def lab():
        return functions_of(path)
    return lab


def run_named(ns: dict, checks, **kw) -> list:
    """Each (checker, function name, ...) of `checks` run on those functions of `ns`."""
    return [check(*(ns[n] for n in names), **kw) for check, *names in checks]


def stubs_test(path: Path, checks):
    """A test: the student version's stubs fail every check of `checks` (as `run_named`)
    with "Not implemented yet" (see `assert_stubs_not_implemented`)."""
    def test(capsys):
        results = run_named(functions_of(path, student=True), checks)
        assert_stubs_not_implemented(results, capsys.readouterr().out)
    return test


def lab_tests(path: Path, checks):
    """The usual start of a lab's tests: the fixture `lab` (`lab_fixture`), a test that the
    solutions pass every check of `checks` and one that the stubs do not (`stubs_test`)."""
    def test_solutions_pass(lab):
        assert all(r.passed for r in run_named(lab, checks, verbose=False))
    return lab_fixture(path), test_solutions_pass, stubs_test(path, checks)


def mistakes_test(path: Path, checks, mistakes: dict, *, id_width: int = 30, ids=None):
    """A test: each (old, new, hint) of `mistakes[name]`, an edit of the solution's function
    `name`, must fail the checker of `name` in `checks` ((checker, name) pairs, as for
    `lab_tests`) with hint[0] (see `mutate`, `assert_hint`). `ids`, the test ids, one a
    mistake in order; by default each value's text cut to `id_width`."""
    check_of = {name: check for check, name in checks}
    rows = [(name, old, new, hint) for name, edits in mistakes.items()
            for old, new, hint in edits]

    @pytest.mark.parametrize("name,old,new,hint", rows,
                             ids=ids if ids is not None else lambda x: str(x)[:id_width])
    def test(name, old, new, hint):
        assert_hint(check_of[name], mutate(path, name, old, new), hint[0])
    return test


def joint_mistakes_test(path: Path, check, names, mistakes, *, ids):
    """A test for a checker of several functions, `check(names[0], names[1], ...)`: each
    (old, new, hint) of `mistakes`, an edit anywhere in the solution (it may touch any of
    those functions), must make `check` on the edited lab's functions `names` fail with
    hint[0] (see `assert_hint`); `ids`, one a mistake."""
    @pytest.mark.parametrize("old,new,hint", mistakes, ids=ids)
    def test(old, new, hint):
        ns = functions_of(path, replace=[(old, new)])
        assert_hint(check, ns[names[0]], hint[0], *(ns[n] for n in names[1:]))
    return test


def edits_mistakes_test(path: Path, checks, mistakes: dict):
    """A test: each mistake of several edits, `mistakes[key] = (name, [(old, new), ...],
    hint)`, edits of the solution's function `name` (each `old` must occur in the lab), fails
    the checker of `name` in `checks` ((checker, name) pairs, as for `lab_tests`) with hint[0]
    (see `edited`, `assert_hint`); the one-edit mistakes' test is `mistakes_test`."""
    check_of = {name: check for check, name in checks}

    @pytest.mark.parametrize("key", list(mistakes))
    def test(key):
        name, edits, hint = mistakes[key]
        assert_hint(check_of[name], edited(path, name, edits, anywhere=True), hint[0])
    return test


def variants_test(path: Path, checks, variants: dict):
    """A test: each unusual correct solution `variants[key] = (name, [(old, new), ...])`,
    edits of the solution's function `name` (each `old` must occur in the lab), passes the
    checker of `name` in `checks` ((checker, name) pairs, as for `lab_tests`; numpy
    warnings silenced). The failure names the variant, the case, the detail and the hint."""
    check_of = {name: check for check, name in checks}

    @pytest.mark.parametrize("key", list(variants))
    def test(key):
        name, edits = variants[key]
        fn = edited(path, name, edits, anywhere=True)
        with np.errstate(all="ignore"):
            result = check_of[name](fn, verbose=False)
        assert result.passed, (key, result.case, result.detail, result.hint[:80])
    return test


def parts_picker(names):
    """`parts_of(ns, **swap)`: the kernel parts `names` of the namespace `ns` by name, those in
    `swap` replaced (what a tensor-core lab's check_kernel takes)."""
    def parts_of(ns, **swap):
        return {n: swap.get(n, ns[n]) for n in names}
    return parts_of


# The tests below are shared by the labs whose kernel is made of parts, each with its own check
# (labs 10 and 10b): `parts` is the lab's module of part checks (check_<part>, check_kernel,
# HINT_KERNEL, HINT_KERNEL_ERROR) and `parts_of` its `parts_picker`.

def part_mistakes_tests(path: Path, parts, parts_of, checks: dict, mistakes: dict,
                        kernel_keys, *, kernel_hint: dict | None = None, also: dict | None = None):
    """Two tests of the typical mistakes `mistakes[key] = (part, edits, hint, in_kernel)`,
    edits of the solution's `part` (`also[key]`: more edits applied unchecked, an import the
    mistake needs): each fails its part's check `checks[part]` with hint[0] (numpy's invalid
    value warning ignored: some make NaN), and each of `kernel_keys` (they must be marked
    `in_kernel`), put into the solution's kernel, fails the kernel check with hint[0], or with
    `kernel_hint[part][0]` where the kernel names the failing part instead."""
    also = also or {}

    def wrong(key):
        part, edits, hint, _ = mistakes[key]
        return part, edited(path, part, edits, also=also.get(key, ())), hint

    @pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
    @pytest.mark.parametrize("key", sorted(mistakes))
    def test_part(key):
        part, fn, hint = wrong(key)
        assert_hint(checks[part], fn, hint[0])

    @pytest.mark.parametrize("key", kernel_keys)
    def test_kernel(lab, key):
        assert mistakes[key][3], f"{key} is not marked as named by the kernel"
        part, fn, hint = wrong(key)
        hint = kernel_hint[part] if kernel_hint else hint
        assert_hint(parts.check_kernel, parts_of(lab, **{part: fn}), hint[0])
    return test_part, test_kernel


def idle_part_test(path: Path, parts, parts_of, part: str, before: str, guard: str):
    """A test: the solution's `part` with `if guard: return` put before its line `before`
    passes its own check but does nothing inside the kernel (contrived: `guard` tells the two
    apart by an argument's shape); the kernel check then gets the hint that says all part
    checks pass and names what remains, never "make them pass first"."""
    def test(lab):
        wrong = edited(path, part, [(before, f"    if {guard}:\n        return\n{before}")])
        assert getattr(parts, f"check_{part}")(wrong, verbose=False).passed
        result = assert_hint(parts.check_kernel, parts_of(lab, **{part: wrong}),
                             parts.HINT_KERNEL[0])
        assert "Every part check passes" in result.hint and "mask" in result.hint
    return test


def kernel_error_test(path: Path, parts, parts_of, part: str, edits, on_gpu: str):
    """A test: the solution's `part` with `edits`, which make it index past an array, makes
    the kernel check point to the part checks (HINT_KERNEL_ERROR). Simulator only: skipped on
    a GPU, where `on_gpu` says what happens instead."""
    def test(lab):
        from flashcourse.gpu import using_simulator
        if not using_simulator():
            pytest.skip(on_gpu)
        assert_hint(parts.check_kernel, parts_of(lab, **{part: edited(path, part, edits)}),
                    parts.HINT_KERNEL_ERROR[0])
    return test


def correct_variants_test(path: Path, parts, parts_of, checks: dict, variants: dict):
    """A test: the solution with every edit of `variants` ({part: [(old, new), ...]}, unusual
    but correct ways to write the part; each `old` must stand in the lab; float32 imported
    for them) passes each part check of `checks` ({part: check}) and the kernel check."""
    def test():
        edits = [e for part in variants.values() for e in part]
        for old, _ in edits:
            assert any(old in src for src in cells_of(path)), old
        ns = functions_of(path, replace=[IMPORT_FLOAT32] + edits)
        for part, check in checks.items():
            assert check(ns[part], verbose=False).passed, part
        assert parts.check_kernel(parts_of(ns), verbose=False).passed
    return test


def hint_leaks_test(hints, path: Path):
    """A test: no line of the solution lab at `path` stands in any of `hints` (`hint_leaks`)."""
    def test():
        assert hint_leaks(hints, path) == []
    return test


def solution_lines(path: Path) -> list[str]:
    """The stripped lines between the solution markers (comments removed, blanks skipped)."""
    out, inside = [], False
    for src in cells_of(path):
        for line in src.splitlines():
            if BEGIN.match(line):
                inside = True
                continue
            if END.match(line):
                inside = False
                continue
            if inside:
                code = line.split("#")[0].strip()
                if code:
                    out.append(code)
    return out


def hint_leaks(hints, path: Path, min_len: int = 12) -> list[str]:
    """Solution lines (at least min_len characters) that appear inside any hint text."""
    texts = []
    for h in hints:
        texts.extend(h if isinstance(h, tuple) else (h,))
    squeeze = [re.sub(r"\s+", "", t) for t in texts]
    leaks = []
    for line in solution_lines(path):
        flat = re.sub(r"\s+", "", line)
        if len(flat) >= min_len and any(flat in t for t in squeeze):
            leaks.append(line)
    return leaks


def assert_stubs_not_implemented(results, out: str) -> None:
    """Every checker result of a student stub says "Not implemented yet", none passes, and
    the printed report (`out`, from capsys) says so once per check."""
    assert all(r.todo and not r.passed for r in results)
    assert out.count("Not implemented yet") == len(results)
    assert "All checks passed" not in out
