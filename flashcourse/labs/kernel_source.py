"""What the GPU compiler will refuse, found in a learner's kernel source before anything runs.

Numba's CUDA simulator runs kernels as Python, so it accepts code that the real compiler
rejects. The one that bit the course's own labs: a `cuda.local.array` or
`cuda.shared.array` whose size is computed inside the kernel (`TPB + 1`, `TM * TN`, a
variable). The compiler needs the size as a number fixed before it compiles: a literal, a
name defined outside the kernel, or a tuple of those. `kernel_guard` checks this (and
that the function is not a stub) for every CUDA lab, so a learner without a GPU hears
about it from the checker, and one with a GPU gets the same message instead of Numba's
typing error. It also tells a puzzle kernel that was never decorated with `@cuda.jit`
(`require_cuda_kernel`: a plain function, or another object that is not a Numba kernel),
and finds float constants that make a float32 kernel compute in float64
(`float64_literals`, for labs 05, 06 and 10).
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from ._harness import stub_guard


def py_func(fn):
    """The plain Python function behind a Numba kernel or device function (GPU or
    simulator)."""
    for attr in ("py_func", "fn"):
        inner = getattr(fn, attr, None)
        if callable(inner):
            return inner
    return fn


class ArraySizeError(Exception):
    """A kernel allocates an array whose size the GPU compiler cannot fix (see module)."""


class NotAKernelError(Exception):
    """A puzzle's kernel is a plain Python function: `@cuda.jit` is missing."""


class NotNumbaKernelError(Exception):
    """A puzzle's kernel is some object with [] (launchable-looking) that Numba did not
    build: a kernel it cannot be, whatever it computes."""


#: the classes `@cuda.jit` makes: on a GPU (numba-cuda) and on Numba's CUDA simulator
KERNEL_CLASSES = ("CUDADispatcher", "FakeCUDAKernel")


def _source_tree(fn):
    try:
        src = textwrap.dedent(inspect.getsource(py_func(fn)))
    except (OSError, TypeError):      # no source to read (e.g. built with exec): no verdict
        return None
    return ast.parse(src)


def _fixed(node, assigned) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id not in assigned
    if isinstance(node, ast.Attribute):          # module.CONSTANT
        return isinstance(node.value, ast.Name) and node.value.id not in assigned
    if isinstance(node, ast.Tuple):
        return all(_fixed(e, assigned) for e in node.elts)
    if isinstance(node, ast.IfExp):              # A if FLAG else B: Numba prunes the branch
        test = node.test
        fixed_test = isinstance(test, (ast.Constant, ast.Attribute)) or (
            isinstance(test, ast.Name) and test.id not in assigned)
        return fixed_test and _fixed(node.body, assigned) and _fixed(node.orelse, assigned)
    return False


def _own_nodes(func):
    """The nodes of one function's body, not descending into functions defined inside it."""
    todo = list(ast.iter_child_nodes(func))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def unfixed_array_sizes(tree) -> list[str]:
    """In every function of the parsed source `tree`: the sizes (as written) of its own
    `cuda.local.array` / `cuda.shared.array` calls that are not fixed before compiling
    (arithmetic, a call, or a name that function itself assigns or takes)."""
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        own = list(_own_nodes(func))
        assigned = {n.id for n in own if isinstance(n, ast.Name)
                    and isinstance(n.ctx, (ast.Store, ast.Del))}
        assigned |= {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}
        for node in own:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "array" and isinstance(node.func.value, ast.Attribute)
                    and node.func.value.attr in ("local", "shared")):
                continue
            shape = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg == "shape"), None)
            if shape is not None and not _fixed(shape, assigned):
                found.append(f"cuda.{node.func.value.attr}.array({ast.unparse(shape)}, ...)")
    return found


def array_sizes_not_fixed(fn) -> list[str]:
    """`unfixed_array_sizes` of `fn`'s source; [] when it cannot be read."""
    tree = _source_tree(fn)
    return [] if tree is None else unfixed_array_sizes(tree)


def kernel_guard(fn, what: str) -> None:
    """Before a CUDA lab runs `fn`: NotImplementedError for a stub, ArraySizeError when an
    array's size is computed inside it (the GPU compiler would refuse it)."""
    stub_guard(fn, what)
    sizes = array_sizes_not_fixed(fn)
    if sizes:
        raise ArraySizeError(
            f"{what}: {sizes[0]} has a size computed inside the kernel; a GPU compiles only "
            "sizes fixed beforehand (a number, or a name defined outside the kernel)")


def is_numba_kernel(obj) -> bool:
    """Whether `obj` was made by `@cuda.jit` (by class name, so that this module need not
    import Numba's GPU or simulator parts)."""
    return any(c.__name__ in KERNEL_CLASSES for c in type(obj).__mro__)


def require_cuda_kernel(kernel, what: str) -> None:
    """NotAKernelError when `kernel` is a plain function (no `@cuda.jit`);
    NotNumbaKernelError when it is any other object that `@cuda.jit` did not make."""
    if is_numba_kernel(kernel):
        return
    if callable(kernel) and not hasattr(kernel, "__getitem__"):
        raise NotAKernelError(
            f"{what} is a plain Python function, not a CUDA kernel: put @cuda.jit on the line "
            "above its def (and run that cell again)")
    raise NotNumbaKernelError(
        f"{what} is a {type(kernel).__name__}, not a kernel made by @cuda.jit: the checker "
        "launches a CUDA kernel and checks what its threads read and write")


def float64_literals(fn) -> list[str]:
    """Float constants in `fn`'s source that are not wrapped in float32(...) (also
    np.float32(...)), float('-inf') and float(0) among them (Numba types both float64):
    in a float32 kernel each makes Numba compute in float64 on a GPU.
    [] when the source cannot be read."""
    tree = _source_tree(fn)
    if tree is None:
        return []
    wrapped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name == "float32":
                for a in ast.walk(node):
                    wrapped.add(id(a))
    found = []
    for node in ast.walk(tree):
        if id(node) in wrapped:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            found.append(repr(node.value))
        elif isinstance(node, ast.Attribute) and node.attr in ("inf", "nan", "pi", "e") and \
                getattr(node.value, "id", "") in ("math", "np", "numpy"):
            found.append(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "float" and \
                node.args and isinstance(node.args[0], ast.Constant):
            found.append(ast.unparse(node))           # float('-inf'), float(0): float64 too
    return found
