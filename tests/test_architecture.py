"""The package's shape (CONTRIBUTING.md, "Architecture"): no import cycle, small modules,
and every name a notebook imports from a module is defined in that module.

The import graph is read from the source (ast), so imports inside functions count too:
a lazy import that closes a cycle is still a cycle for a reader who follows it.
"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "flashcourse"
MAX_LINES = 800


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(mod: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(mod: str, path: Path) -> set:
    """flashcourse modules that `mod` imports anywhere in its source."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(mod, path, node)
            targets = [target] + [f"{target}.{a.name}" for a in node.names]
        else:
            continue
        # a module's own packages are imported implicitly before it: not an edge
        ancestors = {mod.rsplit(".", i)[0] for i in range(1, mod.count(".") + 1)}
        out |= {t for t in targets if t in MODULES and t != mod and t not in ancestors}
    return out


def find_cycle(graph: dict):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_lazy_imports_included():
    graph = {m: imports_of(m, p) for m, p in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: The layers of CONTRIBUTING.md's architecture map: a module imports from its own layer
#: or below, never above (a module named here covers its submodules). `plots` sits below
#: `widgets`: a widget may draw a plot, a plot never reaches into a widget.
LAYERS = {
    "flashcourse.gpu": 0, "flashcourse._checks": 0, "flashcourse.gpus": 0,
    "flashcourse.constants": 0, "flashcourse.timing": 0, "flashcourse.formats": 0,
    "flashcourse.printing": 0, "flashcourse.sim_scheduler": 0,
    "flashcourse.geometry": 1, "flashcourse.memory": 1, "flashcourse.traffic": 1,
    "flashcourse.limits": 1, "flashcourse.counter": 1, "flashcourse.reference": 1,
    "flashcourse.results": 1, "flashcourse._guards": 1, "flashcourse.env": 1,
    "flashcourse.fa2_work": 1,
    "flashcourse.tiled": 2, "flashcourse.dense": 2, "flashcourse.cpu": 2,
    "flashcourse.cuda": 2, "flashcourse.decode": 2, "flashcourse.decode_io": 2,
    "flashcourse.variants": 2, "flashcourse.fp8": 2, "flashcourse.paged_cache": 2,
    "flashcourse.configs": 3, "flashcourse.model": 3, "flashcourse.sweep": 3,
    "flashcourse.measured_traffic": 3, "flashcourse.torch_ops": 3,
    "flashcourse.distributed": 3,
    "flashcourse.plots": 4, "flashcourse.quiz": 4,
    "flashcourse.labs": 4, "flashcourse": 4,
    "flashcourse.quizzes": 4, "flashcourse.exercises": 4,
    "flashcourse.kv_cache": 4,
    "flashcourse.widgets": 5,
}

#: Inside `flashcourse.cuda`, from the ground up (flashcourse/cuda/__init__.py says what
#: each folder holds): the inline-PTX wrappers; the plumbing every family uses; the kernel
#: families (gradients, decoding and hopper build on tensor_core); on top the registry,
#: which imports every family, and the package's public calls.
CUDA_LAYERS = (
    ("ptx",),
    ("common",),
    ("cuda_core", "tensor_core"),
    ("gradients", "decoding", "hopper"),
    ("registry", ""),
)
for _i, _names in enumerate(CUDA_LAYERS):
    for _name in _names:
        LAYERS["flashcourse.cuda" + (f".{_name}" if _name else "")] = 2 + (_i + 1) / 10

def layer(mod: str) -> int:
    while mod not in LAYERS:
        mod = mod.rsplit(".", 1)[0]
    return LAYERS[mod]


def test_imports_go_down_the_layers():
    upward = [f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
              for m, p in MODULES.items() for t in sorted(imports_of(m, p))
              if layer(t) > layer(m)]
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_module_size(mod):
    lines = len(MODULES[mod].read_text().splitlines())
    assert lines <= MAX_LINES, f"{mod} has {lines} lines (at most {MAX_LINES})"


def defined_names(path: Path) -> set:
    """Names a module defines itself (functions, classes, assignments), not imports."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
    return names


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_all_lists_only_names_defined_here(mod):
    tree = ast.parse(MODULES[mod].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                for t in node.targets):
            listed = ast.literal_eval(node.value)
            missing = set(listed) - defined_names(MODULES[mod]) - {
                n.split(".")[-1] for n in MODULES if n.startswith(mod + ".")}
            assert not missing, f"{mod}.__all__ re-exports {sorted(missing)}"


def _notebook_imports():
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
            (ROOT / "labs").rglob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            try:
                tree = ast.parse("".join(cell["source"]))
            except SyntaxError:          # a cell with IPython magics: not ours to check
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "flashcourse"):
                    for alias in node.names:
                        yield nb.name, node.module, alias.name


@pytest.mark.parametrize("nb,module,name", sorted(set(_notebook_imports())))
def test_notebook_imports_find_the_definition(nb, module, name):
    """`from flashcourse.X import Y` in a notebook: Y is defined in X (or is a submodule)."""
    assert module in MODULES, f"{nb}: no module {module}"
    submodule = f"{module}.{name}" in MODULES
    assert submodule or name in defined_names(MODULES[module]), \
        f"{nb}: {name} is not defined in {module} (import it from where it lives)"


# ---------------------------------------------------------------------------
# flashcourse.cuda: one folder per kernel family, layered (CUDA_LAYERS above)
# ---------------------------------------------------------------------------

CUDA = PKG / "cuda"
CUDA_PACKAGES = sorted(n for names in CUDA_LAYERS for n in names if n and n != "registry")


def test_cuda_top_level_holds_only_the_public_calls_and_the_registry():
    assert sorted(p.name for p in CUDA.glob("*.py")) == ["__init__.py", "registry.py"]
    folders = sorted(p.name for p in CUDA.iterdir()
                     if p.is_dir() and p.name != "__pycache__")
    assert folders == CUDA_PACKAGES, "a folder of flashcourse/cuda not in CUDA_LAYERS"


def test_cuda_folders_do_not_shadow_the_public_calls():
    """`import flashcourse.cuda.backward.x` would replace the function
    `flashcourse.cuda.backward` with the folder: hence `gradients`, `decoding`."""
    tree = ast.parse((CUDA / "__init__.py").read_text())
    public = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and any(getattr(t, "id", "") == "__all__" for t in n.targets))
    assert not set(public) & set(CUDA_PACKAGES)


@pytest.mark.parametrize("folder", CUDA_PACKAGES)
def test_cuda_folder_docstring_maps_its_files(folder):
    doc = ast.get_docstring(ast.parse((CUDA / folder / "__init__.py").read_text())) or ""
    files = sorted(p.name for p in (CUDA / folder).glob("*.py") if p.name != "__init__.py")
    assert files, f"cuda/{folder} holds no module"
    missing = [f for f in files if f not in doc]
    assert not missing, f"cuda/{folder}/__init__.py does not map {missing}"
    named = set(re.findall(r"(?<![/\w])(\w+\.py)\b", doc.split("\n\n")[1]))
    stale = sorted(named - set(files))
    assert not stale, f"cuda/{folder}/__init__.py maps files it does not hold: {stale}"


#: Each registered kernel's folder: a family lives in one folder, and a folder of the
#: plumbing (ptx, common) holds no registered kernel.
KERNEL_FOLDERS = {
    ("forward", "textbook"): "cuda_core", ("forward", "flash"): "cuda_core",
    ("forward", "dense"): "cuda_core", ("forward", "decode"): "decoding",
    ("forward", "tensor_core"): "tensor_core", ("forward", "hopper"): "hopper",
    ("backward", "simple"): "gradients", ("backward", "fast"): "gradients",
    ("backward", "fast_two_pass"): "gradients", ("backward", "tensor_core"): "gradients",
    ("backward", "hopper"): "hopper",
}


def _registered():
    """(direction, name, module of its `launches`) for each register(Kernel(...)) call."""
    for node in ast.walk(ast.parse((CUDA / "registry.py").read_text())):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Kernel"):
            name, direction = (ast.literal_eval(a) for a in node.args[:2])
            launches = next(k.value for k in node.keywords if k.arg == "launches")
            yield direction, name, ast.literal_eval(launches.args[0])


def test_every_registered_kernel_lives_in_its_family_folder():
    found = {(d, n): m for d, n, m in _registered()}
    assert set(found) == set(KERNEL_FOLDERS), "registry and KERNEL_FOLDERS differ"
    wrong = {k: m for k, m in found.items() if m.split(".")[0] != KERNEL_FOLDERS[k]}
    assert not wrong, f"kernels outside their family's folder: {wrong}"
    assert all(f"flashcourse.cuda.{m}" in MODULES for m in found.values())


#: Calls from a family up to the public `flashcourse.cuda` functions (a name imported
#: from the package itself, which `imports_of` does not count as an edge: a module's own
#: packages load first). One, with its reason; no other may be added.
CALLS_UP_TO_THE_PUBLIC_API = {
    # the bfloat16 convenience wrapper of the tensor-core forward: converts ml_dtypes
    # bfloat16 arrays, then calls the public forward with kernel="tensor_core"
    ("flashcourse.cuda.tensor_core.host", "forward"),
}


def test_no_cuda_module_imports_the_public_calls_above_it():
    found = set()
    for mod, path in MODULES.items():
        if not mod.startswith("flashcourse.cuda.") or mod == "flashcourse.cuda.registry":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and _resolve(mod, path, node) == \
                    "flashcourse.cuda":
                found |= {(mod, a.name) for a in node.names
                          if f"flashcourse.cuda.{a.name}" not in MODULES}
    assert found == CALLS_UP_TO_THE_PUBLIC_API


def test_the_layer_test_catches_a_call_back_up():
    """The rules above fail on the arrows they exist to stop."""
    assert layer("flashcourse.cuda.common._launch") < layer("flashcourse.cuda.registry")
    assert layer("flashcourse.cuda.ptx.mma") < layer("flashcourse.cuda.common.host_plans")
    assert layer("flashcourse.cuda.tensor_core.host") < layer("flashcourse.cuda.hopper.host")
    assert layer("flashcourse.cuda.cuda_core.flash") == layer("flashcourse.cuda.tensor_core.host")
    assert layer("flashcourse.plots.backward") < layer("flashcourse.widgets.readouts")
