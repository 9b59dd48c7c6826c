"""The package's shape (CONTRIBUTING.md, "Architecture"): no import cycle, small modules,
and every name a notebook imports from a module is defined in that module.

The import graph is read from the source (ast), so imports inside functions count too:
a lazy import that closes a cycle is still a cycle for a reader who follows it.
"""

import ast
import json
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
#: or below, never above (a module named here covers its submodules).
LAYERS = {
    "flashcourse.gpu": 0, "flashcourse._checks": 0, "flashcourse.gpus": 0,
    "flashcourse.constants": 0, "flashcourse.timing": 0, "flashcourse.formats": 0,
    "flashcourse.printing": 0,
    "flashcourse.geometry": 1, "flashcourse.memory": 1, "flashcourse.traffic": 1,
    "flashcourse.limits": 1, "flashcourse.counter": 1, "flashcourse.reference": 1,
    "flashcourse.results": 1, "flashcourse._guards": 1, "flashcourse.env": 1,
    "flashcourse.fa2_work": 1,
    "flashcourse.tiled": 2, "flashcourse.dense": 2, "flashcourse.cpu": 2,
    "flashcourse.cuda": 2, "flashcourse.decode": 2, "flashcourse.decode_io": 2,
    "flashcourse.variants": 2,
    "flashcourse.configs": 3, "flashcourse.sweep": 3, "flashcourse.measured_traffic": 3,
    "flashcourse.widgets": 4, "flashcourse.plots": 4, "flashcourse.quiz": 4,
    "flashcourse.labs": 4, "flashcourse": 4,
    "flashcourse.quizzes": 4, "flashcourse.exercises": 4,
    "flashcourse.kv_cache": 4,
}


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
