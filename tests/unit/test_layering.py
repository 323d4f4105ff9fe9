"""The house's layering, read from the imports (DESIGN.md, "Layering"), so it stays true.

- core modules never import IPython, ipywidgets, pynvml or a framework at import time
  (a framework is looked up in sys.modules or imported inside the function that needs it);
- only nvml/lib.py imports pynvml, at any level;
- a room imports only rooms listed above it in DESIGN.md's layout (`ROOMS`), imports inside
  functions included (those under ``if TYPE_CHECKING:`` excepted); nothing below ipython/
  imports it (the package's load/unload in __init__.py excepted);
- no import circle among the package's modules, imports inside functions included;
- no ``importlib.import_module`` outside __init__'s lazy exports (no import reader sees it);
- the core reaches IPython's shell only through notebook_refs (no shell attribute names
  elsewhere).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "colab_gpu_guard"
NAME = PACKAGE.name

THIRD_PARTY_AT_IMPORT = {
    "IPython",
    "ipywidgets",
    "pynvml",
    "torch",
    "numpy",
    "cupy",
    "jax",
    "jaxlib",
    "tensorflow",
    "psutil",
    "nbformat",
    "nbclient",
}
# Where IPython keeps references and hooks; only notebook_refs (and the IPython layer) use them.
SHELL_ATTRIBUTES = {
    "user_ns_hidden",
    "displayhook",
    "InteractiveTB",
    "last_execution_result",
    "_oh",
    "magics_manager",
    "set_custom_exc",
    "showtraceback",
    "events",
    "history_manager",
    "user_global_ns",
}
# DESIGN.md's rooms in order: a room imports only rooms of an earlier tier (rooms of one tier
# do not import each other). __init__ (the lazy exports, load/unload) and __main__ (the CLI)
# stand outside the order.
ROOMS = [
    ["units"],
    ["serialize"],
    ["host_memory"],
    ["frameworks"],
    ["nvml", "cuda_health"],
    ["notebook_refs"],
    ["leftovers"],
    ["cells"],
    ["reset"],
    ["trace"],
    ["seeding"],
    ["advisor"],
    ["status"],
    ["ipython"],
]
TIER = {room: tier for tier, rooms in enumerate(ROOMS) for room in rooms}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def room(module: str) -> str:
    """The top-level room of a module: 'ipython', 'nvml', 'leftovers', 'units', ..."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The absolute module names an ImportFrom may load (the module, or its submodules)."""
    if node.level == 0:
        base = node.module or ""
    else:
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        for _ in range(node.level - 1):
            package = package.rsplit(".", 1)[0]
        base = f"{package}.{node.module}" if node.module else package
    targets = [base]
    targets += [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
    return targets


# 300 tests ask for the same hundred modules' imports: each parsed once, and only what was
# found kept (the syntax trees kept would be 200,000 objects more for every later full
# collection in the suite's process to go over)
@functools.cache
def imports(module: str, top_level_only: bool) -> tuple[tuple[str, int], ...]:
    """(imported module, line) for each import; top_level_only skips function bodies."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.extend((target, child.lineno) for target in resolve(module, child))
            visit(child)

    visit(tree)
    return tuple(found)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def internal(target: str) -> bool:
    return target == NAME or target.startswith(NAME + ".")


def core_modules() -> list[str]:
    return [m for m in MODULES if room(m) not in ("ipython", "__init__", "__main__")]


@pytest.mark.parametrize("module", core_modules())
def test_core_imports_no_front_end_or_framework_at_import_time(module):
    bad = [
        f"line {line}: {target}"
        for target, line in imports(module, top_level_only=True)
        if target.split(".")[0] in THIRD_PARTY_AT_IMPORT
    ]
    assert not bad, f"{module} imports at import time: {bad}"


def test_only_nvml_lib_imports_pynvml():
    users = sorted(
        module
        for module in MODULES
        for target, _ in imports(module, top_level_only=False)
        if target.split(".")[0] == "pynvml"
    )
    assert users == [f"{NAME}.nvml.lib"]


@pytest.mark.parametrize("module", [m for m in MODULES if room(m) != "ipython"])
def test_nothing_below_the_ipython_layer_imports_it(module):
    if module == NAME:  # load_ipython_extension / unload_ipython_extension
        return
    bad = [
        f"line {line}: {target}"
        for target, line in imports(module, top_level_only=False)
        if target.startswith(f"{NAME}.ipython")
    ]
    assert not bad, f"{module} reaches up into the IPython layer: {bad}"


def test_every_room_is_in_the_order():
    rooms = {room(module) for module in MODULES} - {"__init__", "__main__"}
    assert rooms <= set(TIER), sorted(rooms - set(TIER))


@pytest.mark.parametrize("module", [m for m in MODULES if room(m) in TIER])
def test_a_room_imports_only_rooms_above_it(module):
    here = room(module)
    bad = sorted(
        f"line {line}: {target} ({room(target)} is not above {here})"
        for target, line in imports(module, top_level_only=False)
        if internal(target)
        and target != NAME
        and room(target) != here
        and TIER.get(room(target), len(ROOMS)) >= TIER[here]
    )
    assert not bad, f"{module}: {bad}"


def test_import_module_only_in_the_lazy_exports():
    users = sorted(
        f"{module} line {node.lineno}"
        for module, path in MODULES.items()
        if module != NAME
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Attribute) and node.attr == "import_module")
        or (isinstance(node, ast.ImportFrom) and any(a.name == "import_module" for a in node.names))
    )
    assert not users, users


def test_no_import_circles():
    """No circle among the package's modules, imports inside functions included (an import
    deferred into a function is still an arrow between two ideas)."""
    graph = {
        module: {
            target
            for target, _ in imports(module, top_level_only=False)
            if internal(target) and target in MODULES and target != module
        }
        for module in MODULES
    }
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if node.startswith(target + ".") and MODULES[target].name == "__init__.py":
                continue  # a submodule importing its own package's re-exports
            if state.get(target) == 1:
                cycles.append(
                    path[path.index(target) :] + [target] if target in path else [node, target]
                )
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


@pytest.mark.parametrize("module", [m for m in core_modules() if room(m) != "notebook_refs"])
def test_only_notebook_refs_knows_the_shell(module):
    tree = ast.parse(MODULES[module].read_text())
    bad = sorted(
        f"line {node.lineno}: .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in SHELL_ATTRIBUTES
    )
    assert not bad, f"{module} touches the shell itself: {bad}"


def test_the_layering_test_sees_the_package():
    assert {f"{NAME}.units", f"{NAME}.notebook_refs", f"{NAME}.nvml.lib"} <= set(MODULES)
    assert any(room(m) == "ipython" for m in MODULES)
