"""mask_mod and score_mod: one plain Python function, evaluated by numpy and compiled by Numba.

The two kinds of function (the names and arguments of PyTorch's FlexAttention):

    mask_mod(b, h, q_idx, kv_idx) -> bool        True: query q_idx may see key kv_idx
    score_mod(score, b, h, q_idx, kv_idx) -> score   the score after the change

b is the batch index, h the query head, q_idx and kv_idx positions (integers), score the
scaled score scale * q.k (a float, natural-log units). The function may read numpy
arrays and numbers it closes over (document ids, ALiBi slopes), or module globals, and
may call other such functions.

Numpy (`mask_tile`, `score_tile`): the same function is called once per tile with
arrays, q_idx of shape (rows, 1) and kv_idx of shape (1, cols), so a function written
with comparisons, arithmetic, `&`, `|`, `~`, indexing by the arrays and numpy functions
(np.tanh, np.abs) returns the whole (rows, cols) tile at once. A function that cannot
take arrays (an `if`, `and`/`or`, math.tanh) is detected by the error numpy raises and
called once per element instead (np.vectorize): same result, slower.

Numba (`compiled_mask`, `compiled_score`): the function is compiled with `numba.cfunc`
to a fixed signature (int64 indices; float64 score), and the CPU kernel receives it as a
first-class function (Numba's FunctionType): the kernel is compiled once, for every
mask, and each new mask costs only its own small compile (~0.1 s); the kernel calls it
through a pointer. Arrays and numbers the function closes over (or reads as globals)
are frozen into the compiled code as constants, the way Numba treats globals; helper
functions it calls are compiled with it (`jit_ready`). Because values are frozen, the
compiled function and the block mask are cached by `fingerprint`: the function's code
plus the contents of what it closes over (arrays hashed by their bytes), so changing a
captured array in place gives a new compile and a new block mask, never a stale one.

The backward needs d score_mod / d score (the score_mod's derivative with respect to
its first argument, same arguments): a second function, `score_mod_grad`, that the user
gives. The built-ins (`flashcourse.variants.library`) carry theirs as the attribute
`score_mod_grad` (`with_grad`); `check_grad` compares any pair with central finite
differences. Gradients with respect to values a score_mod closes over (ALiBi slopes)
are not computed; sinks, which are learnable, are an argument of their own.
"""

from __future__ import annotations

import hashlib
import types as pytypes

import numpy as np

MASK_SIGNATURE = "boolean(int64, int64, int64, int64)"
SCORE_SIGNATURE = "float64(float64, int64, int64, int64, int64)"


def always_visible(b, h, q_idx, kv_idx):
    """The mask_mod of plain attention: every key visible (what kernels use for none)."""
    return True


def unchanged_score(score, b, h, q_idx, kv_idx):
    """The score_mod that changes nothing (what kernels use for none)."""
    return score


def check_mod(fn, name: str, n_args: int):
    """`fn` if it is a plain Python function taking `n_args` positional arguments
    (TypeError naming `name` otherwise); None passes."""
    if fn is None:
        return None
    if not isinstance(fn, pytypes.FunctionType):
        raise TypeError(f"{name} must be a plain Python function (def or lambda) taking "
                        f"{_ARGS[n_args]}, got {type(fn).__name__}")
    code = fn.__code__
    takes = code.co_argcount - len(fn.__defaults__ or ())
    if takes != n_args or code.co_flags & 0x0C:            # 0x04 *args, 0x08 **kwargs
        raise TypeError(f"{name} must take exactly {n_args} arguments {_ARGS[n_args]}, "
                        f"got {fn.__name__} taking {code.co_argcount}")
    return fn


_ARGS = {4: "(b, h, q_idx, kv_idx)", 5: "(score, b, h, q_idx, kv_idx)"}


# ---------------------------------------------------------------------------
# numpy: one tile at a time
# ---------------------------------------------------------------------------

def _call_tile(fn, args, otype):
    """fn(*args) on broadcast arrays, or element by element when fn cannot take arrays.
    An index past the end of an array fn reads is an IndexError naming fn: the compiled
    kernels do not check bounds, so it must be caught here, in numpy."""
    try:
        try:
            return np.asarray(fn(*args)), False
        # numpy's "truth value of an array is ambiguous" (ValueError) and "only length-1
        # arrays can be converted" (TypeError): fn uses if/and/math on scalars
        except (TypeError, ValueError):
            out = np.vectorize(fn, otypes=[otype])(*args)
            return out, True
    except IndexError as e:
        b, h, q_idx, kv_idx = args[-4:]
        raise IndexError(f"{fn.__name__} reads past the end of an array at b = {int(b)}, "
                         f"h = {int(h)}, q_idx up to {int(np.max(q_idx))}, kv_idx up to "
                         f"{int(np.max(kv_idx))} ({e}): make its arrays as long as the "
                         f"sequences (or heads) it is used with") from None


def mask_tile(mask_mod, b: int, h: int, q_idx, kv_idx) -> np.ndarray:
    """(rows, cols) bool: mask_mod on every pair of q_idx (rows,) x kv_idx (cols,).

    Raises TypeError when mask_mod returns something other than booleans (an int, a
    float: a mask must say True or False, not a weight), ValueError when its result does
    not have the tile's shape."""
    q_idx = np.asarray(q_idx, np.int64)
    kv_idx = np.asarray(kv_idx, np.int64)
    shape = (q_idx.size, kv_idx.size)
    args = (np.int64(b), np.int64(h), q_idx[:, None], kv_idx[None, :])
    out, per_element = _call_tile(mask_mod, args, object)
    if per_element:
        bad = [x for x in out.flat if not isinstance(x, (bool, np.bool_))]
        if bad:
            raise TypeError(f"mask_mod must return a bool (True: visible), got "
                            f"{type(bad[0]).__name__} {bad[0]!r} from {mask_mod.__name__}")
        out = out.astype(bool)
    if out.dtype != np.bool_:
        raise TypeError(f"mask_mod must return a bool (True: visible), got dtype {out.dtype} "
                        f"from {mask_mod.__name__}; compare (q_idx >= kv_idx), combine with "
                        f"& | ~")
    return _tile_shape(out, shape, "mask_mod")


def score_tile(score_mod, s, b: int, h: int, q_idx, kv_idx, name: str = "score_mod"):
    """(rows, cols) float64: score_mod(s, b, h, q_idx, kv_idx) on the score tile s."""
    s = np.asarray(s, np.float64)
    q_idx = np.asarray(q_idx, np.int64)
    kv_idx = np.asarray(kv_idx, np.int64)
    args = (s, np.int64(b), np.int64(h), q_idx[:, None], kv_idx[None, :])
    with np.errstate(all="ignore"):            # NaN/inf in masked places are dropped later
        out, _ = _call_tile(score_mod, args, np.float64)
    if out.dtype.kind not in "fiu" or out.dtype == np.bool_:
        raise TypeError(f"{name} must return a float score, got dtype {out.dtype} from "
                        f"{score_mod.__name__}")
    return _tile_shape(out.astype(np.float64, copy=False), s.shape, name)


def _tile_shape(out, shape, name):
    try:
        return np.broadcast_to(out, shape)
    except ValueError:                         # a shape that does not fit: say so below
        raise ValueError(f"{name} returned shape {out.shape} for a tile of {shape[0]} query "
                         f"rows (q_idx shape ({shape[0]}, 1)) by {shape[1]} keys (kv_idx "
                         f"shape (1, {shape[1]})); it must return one value per pair") \
            from None


# ---------------------------------------------------------------------------
# identity of a function: code + what it closes over
# ---------------------------------------------------------------------------

def _value_print(v, seen):
    if isinstance(v, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(v).tobytes(), digest_size=16)
        return ("array", v.dtype.str, v.shape, digest.hexdigest())
    if isinstance(v, (bool, int, float, complex, str, bytes, type(None), np.generic)):
        return ("value", type(v).__name__, v)
    if isinstance(v, tuple):
        return ("tuple",) + tuple(_value_print(x, seen) for x in v)
    if isinstance(v, pytypes.FunctionType):
        return fingerprint(v, seen)
    if isinstance(v, pytypes.ModuleType):
        return ("module", v.__name__)
    return ("object", id(v))           # identity: the cache keeps the function, so v lives


def fingerprint(fn, _seen=None) -> tuple:
    """A hashable key for `fn`: its code, defaults, the contents of its closure cells and
    of the globals it names (arrays by their bytes, functions recursively). Two closures
    made by one factory from equal arrays get equal keys."""
    seen = set() if _seen is None else _seen
    if id(fn) in seen:
        return ("recursive", fn.__name__)
    seen.add(id(fn))
    code = fn.__code__
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(_value_print(cell.cell_contents, seen))
        except ValueError:             # an empty cell (a name bound later): nothing to hash
            cells.append(("empty",))
    named = tuple((n, _value_print(fn.__globals__[n], seen)) for n in _global_names(code)
                  if n in fn.__globals__)
    return ("function", code, _value_print(fn.__defaults__ or (), seen), tuple(cells), named)


def _global_names(code):
    """The global names `code` (and the code of functions defined inside it) reads."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names += _global_names(const)
    return names


# ---------------------------------------------------------------------------
# Numba: compile once per fingerprint
# ---------------------------------------------------------------------------

def jit_ready(fn):
    """`fn` rebuilt so that the plain Python functions it calls (through its closure or
    its globals) are Numba functions: then `cfunc` can compile it."""
    from numba import njit
    swaps = {n: njit(jit_ready(fn.__globals__[n])) for n in _global_names(fn.__code__)
             if isinstance(fn.__globals__.get(n), pytypes.FunctionType)}
    cells, changed = [], bool(swaps)
    for cell in fn.__closure__ or ():
        v = cell.cell_contents
        if isinstance(v, pytypes.FunctionType):
            v, changed = njit(jit_ready(v)), True
        cells.append(pytypes.CellType(v))
    if not changed:
        return fn
    glob = {**fn.__globals__, **swaps}
    return pytypes.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__,
                                tuple(cells) if fn.__closure__ else None)


_COMPILED: dict = {}
#: compiled functions kept at most (each holds its frozen arrays)
MAX_COMPILED = 64


def _compile(fn, signature: str, name: str):
    from numba import cfunc
    from numba.core.errors import NumbaError
    key = (signature, fingerprint(fn))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit[1]
    try:
        compiled = cfunc(signature)(jit_ready(fn))
    except NumbaError as e:            # say which function and why, in one line
        first = next((ln for ln in str(e).splitlines() if ln.strip()), str(e))
        raise TypeError(f"{name} {fn.__name__} cannot be compiled by Numba: {first.strip()} "
                        f"(use integer arithmetic, comparisons, & | ~, numpy arrays it "
                        f"closes over and scalar math)") from None
    if len(_COMPILED) >= MAX_COMPILED:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[key] = (fn, compiled)    # fn kept alive: its id may be in the key
    return compiled


def compiled_mask(mask_mod):
    """The Numba first-class function of mask_mod: bool(int64 b, h, q_idx, kv_idx)."""
    return _compile(mask_mod, MASK_SIGNATURE, "mask_mod")


def compiled_score(score_mod, name: str = "score_mod"):
    """The Numba first-class function of a score_mod (or of its gradient):
    float64(float64 score, int64 b, h, q_idx, kv_idx)."""
    return _compile(score_mod, SCORE_SIGNATURE, name)


def compiled_count() -> int:
    """How many mask/score functions are compiled and cached now."""
    return len(_COMPILED)


# ---------------------------------------------------------------------------
# composing, and the derivative of a score_mod
# ---------------------------------------------------------------------------

def and_masks(*mask_mods):
    """A mask_mod visible where every one of `mask_mods` is (intersection)."""
    return _combine(mask_mods, "and_masks", True)


def or_masks(*mask_mods):
    """A mask_mod visible where any one of `mask_mods` is (union)."""
    return _combine(mask_mods, "or_masks", False)


def _combine(mask_mods, name, intersect):
    """and_masks (intersect) / or_masks: a chain of two-mask functions, each of which
    numpy broadcasts and Numba compiles (its parts are compiled with it)."""
    parts = tuple(check_mod(m, f"{name} argument {i}", 4) for i, m in enumerate(mask_mods))
    if not parts:
        raise ValueError(f"{name} needs at least one mask_mod")
    first = parts[0]
    if len(parts) == 1:
        return first
    tail = _combine(parts[1:], name, intersect)

    def combined(b, h, q_idx, kv_idx):
        if intersect:
            return first(b, h, q_idx, kv_idx) & tail(b, h, q_idx, kv_idx)
        return first(b, h, q_idx, kv_idx) | tail(b, h, q_idx, kv_idx)
    combined.__name__ = name
    return _inherit(combined, parts)


def _inherit(combined, parts):
    """Give a combined mask the lengths and head count its parts were made for."""
    for attr in ("seq_lengths", "num_heads"):
        found = {getattr(p, attr) for p in parts if getattr(p, attr, None) is not None}
        if len(found) > 1:
            raise ValueError(f"the masks combined were made for different {attr}: "
                             f"{sorted(found)}")
        if found:
            setattr(combined, attr, found.pop())
    return combined


#: pairs `check_fits` evaluates a function on (2 x 2 at two (b, h) corners)
PROBE_PAIRS = 8


def check_fits(fn, name: str, t_query: int, t_key: int, num_heads: int,
               batch: int = 1) -> None:
    """ValueError if `fn` was made for other lengths (attribute seq_lengths) or another
    number of query heads (num_heads) than the inputs have; IndexError if it reads past
    an array's end at the last batch entry, head, query and key (a probe of 2 x 2 pairs
    in numpy: the compiled kernels would read out of bounds without a word)."""
    if fn is None:
        return
    lengths = getattr(fn, "seq_lengths", None)
    if lengths is not None and tuple(lengths) != (t_query, t_key):
        raise ValueError(f"{name} {fn.__name__} was made for (Tq, Tk) = {tuple(lengths)}, "
                         f"the inputs have ({t_query}, {t_key})")
    heads = getattr(fn, "num_heads", None)
    if heads is not None and heads != num_heads:
        raise ValueError(f"{name} {fn.__name__} was made for {heads} query heads, the "
                         f"inputs have {num_heads}")
    corners = (np.array([0, t_query - 1]), np.array([0, t_key - 1]))   # PROBE_PAIRS
    for b, h in ((0, 0), (batch - 1, num_heads - 1)):
        if fn.__code__.co_argcount - len(fn.__defaults__ or ()) == 4:
            mask_tile(fn, b, h, *corners)
        else:
            score_tile(fn, np.zeros((2, 2)), b, h, *corners, name)


def with_grad(score_mod, score_mod_grad):
    """Attach d score_mod / d score to score_mod (attribute `score_mod_grad`): the
    backward then finds it without being told. Returns score_mod."""
    check_mod(score_mod, "score_mod", 5)
    score_mod.score_mod_grad = check_mod(score_mod_grad, "score_mod_grad", 5)
    return score_mod


def resolve_grad(score_mod, score_mod_grad):
    """The derivative the backward uses: score_mod_grad if given, else the one attached
    to score_mod (the built-ins); None without a score_mod. ValueError if one is needed
    and there is none."""
    if score_mod is None:
        if score_mod_grad is not None:
            raise ValueError("score_mod_grad was given without a score_mod")
        return None
    grad = score_mod_grad if score_mod_grad is not None else getattr(
        score_mod, "score_mod_grad", None)
    if grad is None:
        raise ValueError(f"score_mod_grad is needed for the backward of score_mod "
                         f"{score_mod.__name__}: d score_mod / d score, a function of "
                         f"(score, b, h, q_idx, kv_idx); pass score_mod_grad=...")
    return check_mod(grad, "score_mod_grad", 5)


def check_grad(score_mod, score_mod_grad, *, b: int = 0, h: int = 0, q_len: int = 7,
               kv_len: int = 9, seed: int = 0, spread: float = 4.0) -> float:
    """The largest error of score_mod_grad against central finite differences of
    score_mod, on random scores (normal, std `spread`) at every pair of a
    (q_len, kv_len) tile: max |grad - fd| / (1 + |fd|), in float64 (step 1e-5 (1 + |s|):
    truncation and rounding errors ~1e-9 for smooth functions)."""
    check_mod(score_mod, "score_mod", 5)
    check_mod(score_mod_grad, "score_mod_grad", 5)
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((q_len, kv_len)) * spread                   # (Tq, Tk)
    qi, ki = np.arange(q_len), np.arange(kv_len)
    step = 1e-5 * (1 + np.abs(s))
    up = score_tile(score_mod, s + step, b, h, qi, ki)
    down = score_tile(score_mod, s - step, b, h, qi, ki)
    fd = (up - down) / (2 * step)
    got = score_tile(score_mod_grad, s, b, h, qi, ki, "score_mod_grad")
    return float(np.max(np.abs(got - fd) / (1 + np.abs(fd))))
