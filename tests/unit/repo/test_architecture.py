"""The import graph of the two packages, read from the source with ast (a lazy import inside a function counts):
no cycles; serving's packages in floors, none importing one above it; the standalone scripts on the standard
library alone; the probes' packages in floors of their own, each importing only its own package and those on the
floors below; and the probes (which run in their own image) never importing the controller's serving package.

serving's floors, from the bottom (docs/layout.md draws them):
  errors, standalone   the one input error; the scripts that run away from the controller's virtualenv
  config               what an operator writes (profiles, workloads, inventories) and redaction
  host                 what a managed host is (GPU facts, NUMA, pinned RAM, NVMe, limits, tuning, Docker Engine)
  plan                 the deployment plan, made from the config and the host's facts
  record               what ran: manifest, verify, effective config, validate, the run record
  evidence             probe plans and outcomes, capture and profiler reports, what a probe brought home
  bench                the benchmark protocol, reports, exports, compare, hypotheses
  diagnose             the seed's method on a capture or bench: the rules and the diagnosis
  bridge               what the playbooks call
  cli                  the operator's commands

probes' floors, from the bottom (docs/layout.md draws them too). A probes package imports its own package and those
on floors strictly below, never a sibling on its own floor: the capture is the one that puts the others together.
  base                 what every probe shares: bounded commands, bounded kernel text, progress lines
  readers              what the host and the engine say, read and parsed (the controller reads bundles with them)
  senders              requests through the real endpoint: the capture's client, validate's, the profiler's
  io                   the I/O probe: fio, the target's identity, the verdict
  capture              one evidence capture: its parts, steps, bundle, timeline and summary
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("serving", "probes")
FLOORS = {
    "serving.errors": 0,
    "serving.standalone": 0,
    "serving.config": 1,
    "serving.host": 2,
    "serving.plan": 3,
    "serving.record": 4,
    "serving.evidence": 5,
    "serving.bench": 6,
    "serving.diagnose": 7,
    "serving.bridge": 8,
    "serving.cli": 9,
}
PROBES_FLOORS = {
    "probes.base": 0,
    "probes.readers": 1,
    "probes.senders": 1,
    "probes.io": 1,
    "probes.capture": 2,
}
# Copied beside each other on the host (the bench role's copy loop), so they import each other by plain name.
STANDALONE_SIBLINGS = {"knee", "knee_runs"}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py") if p.name != "__init__.py"}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
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


def floor(module: str) -> int:
    """A serving module's floor: its package's, or its own for a top-level module; KeyError for an unplaced one."""
    parts = module.split(".")
    return FLOORS[".".join(parts[:2])]


def probes_package(module: str) -> str:
    """A probes module's package (probes.readers); KeyError for a module outside every package of PROBES_FLOORS."""
    package = ".".join(module.split(".")[:2])
    if package not in PROBES_FLOORS:
        raise KeyError(module)
    return package


def probes_out_of_order(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a probes package from another on its own floor or above it, named."""
    found = []
    for m, deps in graph.items():
        if not m.startswith("probes."):
            continue
        for d in deps:
            if not d.startswith("probes."):
                continue
            mp, dp = probes_package(m), probes_package(d)
            if mp != dp and PROBES_FLOORS[dp] >= PROBES_FLOORS[mp]:
                found.append(f"{m} ({mp}, floor {PROBES_FLOORS[mp]}) imports {d} ({dp}, floor {PROBES_FLOORS[dp]})")
    return sorted(found)


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} (floor {floor(m)}) imports {d} (floor {floor(d)})"
        for m, deps in graph.items()
        if m.startswith("serving.")
        for d in deps
        if d.startswith("serving.") and floor(d) > floor(m)
    )


def test_the_packages_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the packages' modules were found
    assert cycles(graph) == []


def test_a_cycle_is_found_where_there_is_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_every_serving_module_sits_in_a_package_with_a_floor() -> None:
    unplaced = [m for m in import_graph() if m.startswith("serving.") and ".".join(m.split(".")[:2]) not in FLOORS]
    assert unplaced == [], "put each in a package of FLOORS (or give a new package its floor and say why)"


def test_no_serving_package_imports_one_above_it() -> None:
    assert upward(import_graph()) == []


def test_an_upward_import_is_named() -> None:
    graph = {"serving.config.profile": {"serving.plan.plan"}, "serving.plan.plan": {"serving.config.profile"}}
    assert upward(graph) == ["serving.config.profile (floor 1) imports serving.plan.plan (floor 3)"]


def test_the_standalone_scripts_import_the_standard_library_alone() -> None:
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "serving" / "standalone").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for n in names:
                top = n.split(".")[0]
                if top in sys.stdlib_module_names or top == "__future__" or n in STANDALONE_SIBLINGS:
                    continue
                if n == "serving.standalone":  # knee_runs' fallback for the controller's import of knee
                    continue
                found.setdefault(path.name, []).append(n)
    assert found == {}


def test_every_probes_module_sits_in_a_package_with_a_floor() -> None:
    unplaced = [
        m for m in import_graph() if m.startswith("probes.") and ".".join(m.split(".")[:2]) not in PROBES_FLOORS
    ]
    assert unplaced == [], "put each in a package of PROBES_FLOORS (or give a new package its floor and say why)"
    # Each package of PROBES_FLOORS is a directory of probes/ with an __init__.py, and every directory is one.
    dirs = {f"probes.{p.parent.name}" for p in (REPO / "probes").glob("*/__init__.py")}
    assert dirs == set(PROBES_FLOORS)


def test_no_probes_package_imports_a_sibling_or_one_above_it() -> None:
    assert probes_out_of_order(import_graph()) == []


def test_a_probes_import_out_of_order_is_named() -> None:
    graph = {
        "probes.readers.samplers": {"probes.capture.parts", "probes.readers.nvml", "probes.base.bounded"},
        "probes.senders.load": {"probes.io.fio"},
        "probes.capture.parts": set(),
        "probes.readers.nvml": set(),
        "probes.base.bounded": set(),
        "probes.io.fio": set(),
    }
    assert probes_out_of_order(graph) == [
        "probes.readers.samplers (probes.readers, floor 1) imports probes.capture.parts (probes.capture, floor 2)",
        "probes.senders.load (probes.senders, floor 1) imports probes.io.fio (probes.io, floor 1)",
    ]


def test_the_probes_never_import_serving() -> None:
    graph = import_graph()
    crossing = {
        m: sorted(d for d in deps if d.startswith("serving.")) for m, deps in graph.items() if m.startswith("probes.")
    }
    assert {m: d for m, d in crossing.items() if d} == {}


def test_the_probes_never_import_matplotlib() -> None:
    # The probe image carries no plotting library: the pages are drawn on the controller (serving/evidence/plots.py).
    heavy = {}
    for path in sorted((REPO / "probes").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            if any(n.split(".")[0] == "matplotlib" for n in names):
                heavy[str(path.relative_to(REPO))] = names
    assert heavy == {}


def test_refdeploys_commands_are_parsed_without_the_heavy_packages() -> None:
    # make runs `refdeploy check-host` before every operation on a host: building the parser imported the diagnose
    # engine, and with it pydantic and every rule (0.33 s of check-host's 0.34 s here). Each command imports what
    # it needs when it runs (serving/cli.py); the parser imports none of it. In a fresh interpreter, as make runs it.
    probe = (
        "import sys; from serving.cli import parser; parser(); "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'prometheus_client', "
        "'matplotlib', 'jinja2', 'yaml') or m.startswith(('serving.diagnose.', 'serving.plan.')))))"
    )
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert got.stdout.split() == ["serving.diagnose.cli"], got.stdout
