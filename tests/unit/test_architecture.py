"""The import graph of the two packages: no cycles, and the probes (which run in their own image) never import
the controller's serving package. Read from the source with ast, so a lazy import inside a function counts."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("serving", "probes")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).glob("*.py") if p.name != "__init__.py"}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return found


def test_the_packages_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the packages' modules were found
    assert cycles(graph) == []


def test_a_cycle_is_found_where_there_is_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_the_probes_never_import_serving() -> None:
    graph = import_graph()
    crossing = {
        m: sorted(d for d in deps if d.startswith("serving.")) for m, deps in graph.items() if m.startswith("probes.")
    }
    assert {m: d for m, d in crossing.items() if d} == {}


def test_the_probes_never_import_matplotlib() -> None:
    # The probe image carries no plotting library: the pages are drawn on the controller (serving/plots.py).
    heavy = {}
    for path in sorted((REPO / "probes").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            if any(n.split(".")[0] == "matplotlib" for n in names):
                heavy[path.name] = names
    assert heavy == {}
