"""Labs 10 and 10b: a learner's device function run at another tile configuration.

At the labs' tiles (D = 16, one m16 tile of keys or queries) the k16 step counts are 1 and
the n8 tile counts 2, so a loop over the wrong named size of a pair, or an offset right only
at step 0, gives the right result. Their checks therefore also run each part at wider tiles:
`at_tiles(fn, tiles)` is `fn` with the size names it reads (those of `tiles.sizes`) taken at
`tiles`, and so the device functions it calls. `tiles` is a NamedTuple whose default value
is the lab's configuration and whose `sizes` property maps each size name to its value.

Numba fixes a global when it compiles (the simulator reads it when the line runs), so a new
function on the same code with a copy of its globals, the names replaced, is compiled with
the new sizes on a GPU and runs with them on the simulator; array sizes stay names fixed
before compiling. A name is replaced only where it holds the lab's value (a learner's own
D = 5 is left as it is).

`names_read` and `literal_diagnosis` tell a part that reads none of the names of a loop's
size (a fixed count, range(1) or range(2)), `wide_diagnoses` the slips replayed at the wider
tiles.
"""

from __future__ import annotations

import sys
import types

from numba import cuda

from .kernel_source import is_numba_kernel, py_func

#: skeleton modules whose device functions follow the tiles (lab 10b's mask_transposed)
SKELETONS = ("flashcourse.labs.tensor_core_backward_lab",)


def tiles_text(tiles, shown) -> str:
    """`tiles` in words: its fields, then the size names `shown` at it ("D = 48, BC = 32
    (KT = 3, KP = 2, NS = 4, NO = 6)")."""
    z = tiles.sizes
    return (", ".join(f"{f} = {getattr(tiles, f)}" for f in tiles._fields)
            + " (" + ", ".join(f"{n} = {z[n]}" for n in shown) + ")")


def _names(code) -> set:
    """The global names a code object (and any nested one) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _rebindable(obj) -> bool:
    """A device function whose sizes may follow the tiles: the learner's (defined outside
    flashcourse) or a skeleton's (SKELETONS); not the library's (mma, pack), whose names
    such as D mean other things."""
    if not is_numba_kernel(obj):
        return False
    module = getattr(py_func(obj), "__globals__", {}).get("__name__", "")
    return not module.startswith("flashcourse") or module in SKELETONS


_REBOUND: dict = {}


def at_tiles(fn, tiles):
    """`fn` (a device function, or a plain function to be jitted) with the size names it
    reads taken at `tiles`, and so the device functions it calls; `fn` itself where nothing
    changes (always at the lab's tiles, `type(tiles)()`)."""
    if tiles == type(tiles)():
        return fn
    key = (fn, type(tiles), tiles)
    if key not in _REBOUND:
        _REBOUND[key] = fn                  # a function that calls itself: left as it is
        _REBOUND[key] = _rebound(fn, tiles)
    return _REBOUND[key]


def _rebound(fn, tiles):
    inner = py_func(fn)
    code, glob = getattr(inner, "__code__", None), getattr(inner, "__globals__", None)
    if code is None or glob is None:
        return fn
    base, new = type(tiles)().sizes, tiles.sizes
    changes = {}
    for name in _names(code):
        value = glob.get(name)
        if name in base and type(value) is int and value == base[name]:
            changes[name] = new[name]
        elif _rebindable(value):
            other = at_tiles(value, tiles)
            if other is not value:
                changes[name] = other
    if not changes:
        return fn
    rebound = types.FunctionType(code, {**glob, **changes}, inner.__name__, inner.__defaults__,
                                 inner.__closure__)
    rebound.__kwdefaults__ = inner.__kwdefaults__
    rebound.__qualname__ = inner.__qualname__
    rebound.__doc__ = inner.__doc__
    return rebound if inner is fn else cuda.jit(device=True)(rebound)


#: modules whose functions are the library's, not the learner's: never walked into
LIBRARIES = ("flashcourse", "numba", "math", "numpy")


def _own_functions(fn):
    """(code, globals) of `fn` and of the functions of its own that it calls (not the
    library's, `LIBRARIES`), each once."""
    seen, todo = set(), [fn]
    while todo:
        inner = py_func(todo.pop())
        code, glob = getattr(inner, "__code__", None), getattr(inner, "__globals__", {})
        if code is None or id(inner) in seen:
            continue
        seen.add(id(inner))
        yield code, glob
        for name in code.co_names:
            dep = glob.get(name)
            if callable(dep) and not str(getattr(py_func(dep), "__module__", "")).startswith(
                    LIBRARIES):
                todo.append(dep)


def names_read(fn) -> set:
    """The global names `fn` reads, and those of the functions of its own that it calls."""
    return set().union(*(code.co_names for code, _ in _own_functions(fn)))


def literal_diagnosis(fn, needs, hint) -> tuple:
    """A diagnosis of a wide-tiles case: `fn` reads none of the names of one of the groups in
    `needs` (e.g. ("KT", "D"): the k16 steps of the head dimension), so a loop of it has a
    fixed count (range(1) where the lab's tiles need KT = 1); `hint` its (text, hint2)."""
    def fired(_yours, _expected):
        names = names_read(fn)
        return any(not names & set(group) for group in needs)
    return (fired, *hint)


def own_sizes(fn, tiles) -> list:
    """The whole-number globals of the learner's own that `fn` (and its own functions)
    read, holding a value one of the lab's sizes has at the lab's tiles, and not one of
    the lab module's names: NK = D // 16 computed in a cell of the learner's is 1, fixed
    when that cell ran, and stays 1 when the check rebuilds the part at `tiles`."""
    lab = vars(sys.modules[type(tiles).__module__])
    values = set(type(tiles)().sizes.values())
    found = []
    for code, glob in _own_functions(fn):
        for name in sorted(_names(code)):
            value = glob.get(name)
            if type(value) is int and value in values and name not in lab \
                    and name not in found:
                found.append(name)
    return found


def own_sizes_hint(named, tiles) -> tuple:
    """The (text, hint2) for a part that reads sizes of the learner's own: `named` their
    (name, value) pairs (`own_sizes`)."""
    base = type(tiles)().sizes
    yours = ", ".join(f"{n} = {v}" for n, v in named)
    moved = ", ".join(f"{k} = {v}" for k, v in tiles.sizes.items() if base.get(k) != v)
    return (f"Your part reads {yours}: a size of your own, fixed when your cell ran. The "
            f"check also runs your part at wider tiles, where only the lab's own names "
            f"change ({moved}), and yours keep the values they had. Use the lab's names in "
            "the part itself (KT rather than a D // 16 of your own, and so on).",
            "Replace each size you computed yourself by the lab's name for it.")


def wide_diagnoses(fn, want, slips, needs, literal_hint, near, tiles=None) -> list:
    """The first diagnoses of a wide case: a size of the learner's own (`own_sizes`, when
    `tiles` is given); each slip of `slips` ((wrong result, hint, the name the slip reads
    or None)) that differs from `want` and whose result the learner's gives (`near(yours,
    wrong)`), when it reads that name (range(KQ) for range(KT) reads KQ; range(2) is a
    fixed count); then a fixed count (`needs`, `literal_hint`)."""
    out = []
    own = own_sizes(fn, tiles) if tiles is not None else []
    if own:
        glob = getattr(py_func(fn), "__globals__", {})
        named = [(n, glob.get(n)) for n in own]
        out.append(((lambda _y, _e: True), *own_sizes_hint(named, tiles)))
    for wrong, hint, name in slips:
        if near(wrong, want):
            continue
        out.append(((lambda y, e, w=wrong, n=name: near(y, w)
                     and (n is None or n in names_read(fn))), *hint))
    return out + [literal_diagnosis(fn, needs, literal_hint)]
