"""No import circle inside the package (issue 48): a circle works only while the imports
happen in an order nobody wrote down, and a function-level import that hides one still
ties the two modules together. Every import counts, at module level or in a function,
except those under `if TYPE_CHECKING:`, which never run.

An edge goes to the module an import names (`from a.b import c` goes to `a.b.c` if that
is a module, else to `a.b`), not to its parent packages: Python runs their `__init__`
too, but a package whose `__init__` gathers its own submodules is the ordinary layout,
not a circle. `importlib.import_module` with a computed name is not seen."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import p2panda_assets

PACKAGE = Path(p2panda_assets.__file__).resolve().parent
Graph = Mapping[str, Iterable[str]]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """The dotted name of the module at `path` (a package is named by its `__init__`)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    """Whether an `if` tests `TYPE_CHECKING` (bare or as `typing.TYPE_CHECKING`)."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def run_time_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements under `node` that can run: all of them, at any depth, but
    those in the body of an `if TYPE_CHECKING:` (its `else` runs, so it counts)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and is_type_checking(child.test):
            for other in child.orelse:
                yield from run_time_imports_of(other)
            continue
        yield from run_time_imports_of(child)


def run_time_imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """`node` itself if it is an import, then the run-time imports beneath it."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    yield from run_time_imports(node)


def absolute_base(statement: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a `from ... import` names, with a relative one resolved against the
    importing module (`importer`; a package's own name is its first level)."""
    if not statement.level:
        return statement.module or ""
    parts = importer.split(".")
    keep = len(parts) - statement.level + (1 if is_package else 0)
    base = parts[:keep]
    return ".".join([*base, statement.module] if statement.module else base)


def imported_modules(
    source: str, importer: str, known: Iterable[str], is_package: bool = False
) -> set[str]:
    """The modules among `known` that the module `importer`, of text `source`, imports
    at run time."""
    modules = set(known)
    found: set[str] = set()
    for statement in run_time_imports(ast.parse(source)):
        if isinstance(statement, ast.Import):
            found.update(alias.name for alias in statement.names)
            continue
        base = absolute_base(statement, importer, is_package)
        for alias in statement.names:
            submodule = f"{base}.{alias.name}"
            found.add(submodule if submodule in modules else base)
    return (found & modules) - {importer}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package under `root`, with the package's modules it imports."""
    modules = package_modules(root)
    return {
        name: imported_modules(path.read_text(), name, modules, path.name == "__init__.py")
        for name, path in modules.items()
    }


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph`, iteratively (a long chain of
    imports must not meet Python's recursion limit)."""
    nodes = set(graph) | {target for targets in graph.values() for target in targets}
    edges = {node: sorted(graph.get(node, ())) for node in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, next_edge = work.pop()
            if next_edge == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if next_edge < len(edges[node]):
                work.append((node, next_edge + 1))
                target = edges[node][next_edge]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while not component or component[-1] != node:
                    component.append(stack.pop())
                    on_stack.discard(component[-1])
                components.append(sorted(component))
    return components


def path_within(graph: Graph, start: str, end: str, allowed: set[str]) -> list[str]:
    """A shortest path of imports from `start` to `end` through `allowed` modules only
    (breadth first; `allowed` is one strongly connected component, so there is one)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier and end not in came_from:
        following: list[str] = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target in allowed and target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    path = [end]
    while path[-1] != start or len(path) == 1:
        path.append(came_from[path[-1]])
    return path[::-1]


def import_cycles(graph: Graph) -> list[list[str]]:
    """One circle per tangle of `graph`, as the modules in import order, the first
    repeated at the end (`[a, b, a]`): every component of more than one module, and
    every module that imports itself."""
    cycles = []
    for component in strongly_connected(graph):
        first = component[0]
        if len(component) > 1 or first in graph.get(first, ()):
            cycles.append(path_within(graph, first, first, set(component)))
    return cycles


def described(cycles: list[list[str]]) -> str:
    """The circles as `a -> b -> a`, one a line."""
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_package_imports_without_a_circle() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, f"import circles in p2panda_assets:\n{described(cycles)}"


def test_the_cycle_search_finds_a_circle_and_only_a_circle() -> None:
    acyclic = {"a": {"b", "c"}, "b": {"c"}, "c": {"d"}, "d": set()}
    assert import_cycles(acyclic) == []
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert import_cycles(circle) == [["a", "b", "c", "a"]]
    two = {"a": {"b"}, "b": {"a"}, "x": {"x"}, "y": {"a"}}
    assert sorted(import_cycles(two)) == [["a", "b", "a"], ["x", "x"]]
    long_chain = {str(n): {str(n + 1)} for n in range(5000)}
    assert import_cycles(long_chain) == []
    assert len(import_cycles({**long_chain, "5000": {"0"}})[0]) == 5002


def test_function_level_imports_count_and_type_checking_ones_do_not() -> None:
    source = """
from typing import TYPE_CHECKING
import typing
import pkg.a
from pkg import b
from pkg.c import thing
from . import d
from .e import other

if TYPE_CHECKING:
    from pkg import hidden
else:
    from pkg import fallback
if typing.TYPE_CHECKING:
    import pkg.hidden_too

def late() -> None:
    from pkg import f
    if True:
        import pkg.g
"""
    known = {"pkg", *(f"pkg.{n}" for n in "abcdefg"), "pkg.hidden", "pkg.hidden_too"}
    known |= {"pkg.fallback", "pkg.mod"}
    imported = imported_modules(source, "pkg.mod", known)
    assert imported == {f"pkg.{n}" for n in "abcdefg"} | {"pkg.fallback"}
    # In a package's own __init__, `.` is the package itself.
    assert imported_modules("from .a import x", "pkg", known, is_package=True) == {"pkg.a"}


def test_the_graph_is_the_real_package() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert (
        "p2panda_assets.pipeline.spark.session"
        in graph["p2panda_assets.pipeline.spark.class_archive"]
    )
    # live/coordinator.py imports the listener in a method (and under TYPE_CHECKING).
    assert "p2panda_assets.live.listener" in graph["p2panda_assets.live.coordinator"]


def test_the_kernels_import_no_spark() -> None:
    """`pipeline/kernels/` holds the rules both paths call: the driver path runs them with
    no Spark, so none of them imports pyspark, or a pipeline module outside the kernels."""
    kernels = PACKAGE / "pipeline" / "kernels"
    found = []
    for module in sorted(kernels.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                outside = name.startswith("p2panda_assets.pipeline.") and not name.startswith(
                    "p2panda_assets.pipeline.kernels"
                )
                if name.split(".")[0] == "pyspark" or outside:
                    found.append(f"{module.name}: {name}")
    assert found == []
