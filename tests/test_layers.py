"""The package's shape: layers are folders, data flows one way, no import cycles, no tooling in the wheel.

Imports are read from the source (every ``import`` statement, including the
ones inside functions that load Numba or a codec lazily), so a lazy import
cannot hide a cycle or an upward dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fastbag"

#: Rank of each layer: a module may import its own layer's modules and lower ranks only.
#: errors < io < msg (encodings, kernels, arrays) < the container interface < containers
#: < the public Bag < what is built on it (CLI, tooling, conversions).
LAYERS = {
    "fastbag._version": 0,
    "fastbag.errors": 0,
    "fastbag.io": 1,
    "fastbag.msg": 2,
    "fastbag.container": 3,
    "fastbag.ros1": 4,
    "fastbag.mcap": 4,
    "fastbag.rosbag2": 4,
    "fastbag.bag": 5,
    "fastbag.convert": 6,
    "fastbag.dask": 7,  # the public name of fastbag.convert.dask, above it
    "fastbag.viz": 6,
    "fastbag.tooling": 6,
    "fastbag.cli": 7,
    "fastbag.__main__": 8,
    "fastbag": 8,  # the package's __init__: the public names
}
#: Containers are siblings: none may import another (rosbag2's MCAP storage goes through mcap's reader).
SIBLINGS = {"fastbag.ros1": set(), "fastbag.mcap": set(), "fastbag.rosbag2": {"fastbag.mcap"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, text: str | None = None) -> dict[str, bool]:
    """Every fastbag module ``path`` imports, anywhere in the file, resolved to absolute names, each
    mapped to True when some import of it runs at import time (outside every function)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, bool] = {}

    def add(target: str, at_import: bool) -> None:
        found[target] = found.get(target, False) or at_import

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, not in_function)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            add(target, not in_function)
            # ``from . import x`` / ``from .pkg import mod`` name modules too
            for alias in node.names:
                add(f"{target}.{alias.name}", not in_function)
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(path.read_text() if text is None else text, str(path)), False)
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    return {m: at_import for m, at_import in found.items() if m in modules and m != name}


def layer_of(module: str) -> str:
    best = ""
    for layer in LAYERS:
        if (module == layer or module.startswith(layer + ".")) and len(layer) > len(best):
            best = layer
    assert best, f"{module} belongs to no layer: add it to LAYERS"
    return best


#: Accessors: a method of a lower layer that hands its object to a function of a higher layer, so that
#: users write ``arr.plot(...)``, ``arr.to_pandas()``, ``bag.plot_timeline()``. Allowed only from these
#: modules into these layers, and only as imports inside functions: they run when the method is called,
#: never when the module is imported, so they are not dependencies of the lower layer and the cycle
#: check ignores them.
ACCESSORS = {
    "fastbag.msg.arrays": {"fastbag.viz", "fastbag.convert"},
    "fastbag.msg.messages": {"fastbag.viz"},
    "fastbag.bag": {"fastbag.viz", "fastbag.convert"},
}


def is_accessor(module: str, target: str, at_import: bool) -> bool:
    """True for an import the accessor exemption covers (see ACCESSORS)."""
    return not at_import and layer_of(target) in ACCESSORS.get(module, set())


IMPORTS = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {module: set(targets) for module, targets in IMPORTS.items()}
#: The graph of dependencies: every import but the accessors'.
DEPENDS = {module: {t for t, at_import in targets.items() if not is_accessor(module, t, at_import)}
           for module, targets in IMPORTS.items()}

@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_module_imports_a_higher_layer(module):
    mine = layer_of(module)
    for target in sorted(DEPENDS[module]):
        theirs = layer_of(target)
        if theirs == mine:
            continue
        assert LAYERS[theirs] < LAYERS[mine] or (
            LAYERS[theirs] == LAYERS[mine] and theirs in SIBLINGS.get(mine, set())), \
            f"{module} (layer {mine}) imports {target} (layer {theirs})"


def test_no_import_cycles():
    """Between modules, and between the layers' folders (a cycle through a package's __init__ counts)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(DEPENDS[module]):
            if target == module.rpartition(".")[0]:
                continue  # a submodule importing its own package's __init__ is not a dependency on itself
            if state.get(target) == 1:
                cycle = stack[stack.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def test_the_checker_sees_lazy_and_relative_imports():
    """The graph is not vacuous: known edges inside functions and across folders are found."""
    assert "fastbag.io.lz4frame" in GRAPH["fastbag.io.codecs"]          # imported inside a function
    assert "fastbag.ros1.kernels" in GRAPH["fastbag.ros1.records"]       # likewise, one folder down
    assert "fastbag.container" in GRAPH["fastbag.ros1.index"]           # ``from ..container import``
    assert "fastbag.msg.arrays" in GRAPH["fastbag.bag"]


def test_accessor_exemption_is_narrow():
    """Only imports inside functions, only from the named modules, only into the named layers."""
    arrays, layout = PACKAGE / "msg" / "arrays.py", PACKAGE / "msg" / "layout.py"
    in_function = "def plot(self):\n    from ..viz.plot import plot_fields\n"
    at_import = "from ..viz.plot import plot_fields\n"
    assert imports_of(arrays, in_function) == {"fastbag.viz.plot": False}
    assert imports_of(arrays, at_import) == {"fastbag.viz.plot": True}
    assert imports_of(arrays, "class A:\n    def f(self):\n        import fastbag.viz.plot\n") == \
        {"fastbag.viz.plot": False}
    assert is_accessor("fastbag.msg.arrays", "fastbag.viz.plot", False)
    assert not is_accessor("fastbag.msg.arrays", "fastbag.viz.plot", True)      # at import: a dependency
    assert not is_accessor("fastbag.msg.layout", "fastbag.viz.plot", False)     # not an accessor module
    assert not is_accessor("fastbag.msg.arrays", "fastbag.tooling.bench", False)  # not an accessor layer
    assert not is_accessor("fastbag.msg.arrays", "fastbag.cli", False)
    assert imports_of(layout, in_function) == {"fastbag.viz.plot": False}
    # The real accessors are seen, inside functions only.
    assert IMPORTS["fastbag.msg.arrays"].get("fastbag.viz.plot") is False
    assert IMPORTS["fastbag.bag"].get("fastbag.viz.plot") is False
    assert "fastbag.viz.plot" not in DEPENDS["fastbag.msg.arrays"]
    assert IMPORTS["fastbag.msg.arrays"].get("fastbag.convert.tables") is False  # to_pandas and the others


def test_fuzz_harness_is_not_in_the_package():
    assert not list(PACKAGE.rglob("fuzz*.py"))


def test_wheel_holds_no_fuzz_harness_or_tests(tmp_path):
    """``pip wheel .`` packages fastbag only: no fuzz harness, no tests, no tools."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path), str(PACKAGE.parent)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("fastbag-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n == "fastbag/bag.py" for n in names) and any(n.startswith("fastbag/msg/") for n in names)
    assert "fastbag/rosbag2/interfaces/sensor_msgs/msg/Imu.msg" in names  # package data: shipped definitions
    assert not [n for n in names if "fuzz" in n or n.startswith(("tools/", "tests/", "benchmarks/"))], names
