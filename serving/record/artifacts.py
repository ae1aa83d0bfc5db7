"""The code's list of artifact files, to hold docs/artifacts.md to what the product really writes.

`code_names(root)` reads the source tree, never runs it, and returns every file name the code spells out that
looks like an artifact (`name.ext`, with an extension in SUFFIXES), each with the files that spell it:

- Python (serving/, probes/, images/vllm/*.py, ansible/action_plugins/): every string constant, and every
  f-string with each replacement field read as `*`, or as the string a name in the same function (or module) was
  given once, so `name = f"dump-{i}-{pid}"` then `f"{name}.json"` reads `dump-*-*.json`;
- Ansible (the playbooks, and each role's tasks/, defaults/, vars/ and handlers/): every string in the parsed
  YAML (comments are not read), with each `{{ ... }}` read as `*`.

Not read: ansible/library/ (modules that run on the managed host and return their readings as JSON: they never
write under runs/), argument specs and comments (they describe, they do not write), tests/, and this module (its
lists name what the others spell).

A name is compared by its last path component, with `<...>`, `{...}` and `*` alike read as one wildcard
(`normalize`), so the index can write `perf-<pid>.data` where the code writes `f"perf-{pid}.data"`. Names that
are not runs/ artifacts (inputs, host paths, fixtures) are in EXCLUDED, each with why; names that no constant
here spells because the tool that writes the file names it are in NAMED_BY_TOOLS.

    python -m serving.record.artifacts [ROOT]    prints each name the code spells, and where, one a line
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# Extensions of the files the product writes (and of the inputs it reads, which EXCLUDED names). Not `yml`: every
# .yml name in this tree is a playbook, a task file or an inventory file that the code reads; the product writes
# none (its YAML artifacts, the Benchmark Report documents, are .yaml).
SUFFIXES = (
    "json", "jsonl", "txt", "log", "html", "csv", "svg", "png", "tar", "gz", "perf", "data", "folded", "trace",
    "prom", "yaml",
)  # fmt: skip
# Ansible keys whose values are bare Jinja expressions, not text: `when: _serve_startup.log | trim` names no file.
_EXPRESSION_KEYS = frozenset(("when", "changed_when", "failed_when", "until", "that"))
_NAME = re.compile(r"^/?[\w.<>{}*+-]+(?:/[\w.<>{}*+-]+)*\.(?:" + "|".join(SUFFIXES) + r")$")
_TOKEN = re.compile(r"[\w.<>{}*+/-]+\.(?:" + "|".join(SUFFIXES) + r")(?![\w.])")
_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
_WILD = re.compile(r"<[^<>/]*>|\{[^{}/]*\}|\*")

# Names the code spells that look like artifacts but name no file under runs/, each with why. Each must still be
# spelled somewhere (check says which no longer is), so the list stays as short as the code.
EXCLUDED: Mapping[str, str] = {
    # Inputs the product reads. (A profile or workload, `<name>.yaml`, reads as `*.yaml`, which the Benchmark
    # Report documents, benchmark-report/<point>.yaml, hold in the index.)
    "config.json": "the served model's config.json (serving/plan/served.py; the serve role's model check)",
    "packages.txt": "an image input: images/base/packages.txt (serving/plan/images.py)",
    "*-*.txt": "an image input: images/vllm/constraints/<distribution>-<version>.txt (serving/plan/images.py)",
    "verified-cuda.json": "the CUDA image's record of itself, images/vllm/ (serving/plan/servability.py reads it)",
    # Files on the managed host or inside a container, never copied to runs/.
    "refdeploy-removed.txt": "the runtime image's record of what its build removed, read inside the container",
    "daemon.json": "Docker's /etc/docker/daemon.json on the host (role runtime)",
    "refdeploy-dockerd.log": "dockerd's log on a host without systemd, /var/log/refdeploy-dockerd.log",
    "build-files.json": "the host's cache of its wheelhouse's hashes (/var/lib/refdeploy; action refdeploy_plan)",
    "host-facts.json": "the host's facts kept on it while they hold (/var/lib/refdeploy; action refdeploy_plan)",
    "gpu-smoke.json": "the stand-in's constructed GPU smoke result, /opt/replay/gpu-smoke.json (plan/standin.py)",
    # Scratch archives: a probe's output packed on the host, unpacked into the run on the controller and removed.
    "*.tar.gz": "a probe's packed output (serving/evidence/fetched.py, refdeploy_collect, role profiler)",
    "bundle.tar.gz": "the capture's packed bundle, /out/bundle.tar.gz in the probe container (evidence/probe_plan.py)",
    "profile.tar.gz": "make profile's packed traces on the controller, removed once unpacked (role profiler)",
    # Not a file: a dotted field name.
    "workload.trace": "a bench manifest's field (serving/bench/protocol.py: not a condition of a compare)",
}

# Files under runs/ whose names the tool that writes them chooses, so no constant in this tree spells them; the
# index lists them all the same (by their normalized names).
NAMED_BY_TOOLS: Mapping[str, str] = {
    "rank*.*.pt.trace.json.gz": "vLLM's torch profiler, one trace per worker rank (make profile)",
    "*_*.async_llm.*.pt.trace.json.gz": "vLLM's torch profiler, the API server's engine client (make profile)",
    "*.profiler_out.txt": "vLLM's torch profiler, torch's table of the operators (make profile)",
}


def normalize(name: str) -> str:
    """The last path component, every `<...>`, `{...}` and `*` one wildcard `*`."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"\*+", "*", _WILD.sub("*", base))


def is_name(text: str) -> bool:
    """A string that names one file with an artifact extension; one whose last component starts with a dot is a
    suffix (`.json`, `.record.stderr.txt`: Path.with_suffix's argument) or a hidden scratch file, and names none."""
    return bool(_NAME.match(text)) and not text.rsplit("/", 1)[-1].startswith(".")


def _render(node: ast.expr, known: Mapping[str, str]) -> str | None:
    """A string constant or an f-string as text, a replacement field read as `*` or as a name's known string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
                parts.append(known.get(value.value.id, "*"))
            else:
                parts.append("*")
        return "".join(parts)
    return None


def _own_nodes(scope: ast.AST) -> Iterable[ast.AST]:
    """The nodes of a module or function body, not those of the functions defined in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.JoinedStr):
            todo.extend(ast.iter_child_nodes(node))


def _strings_once(nodes: Iterable[ast.AST], known: Mapping[str, str]) -> dict[str, str]:
    """Names assigned exactly one string (constant or f-string) among a scope's own nodes; others are unknown."""
    seen: dict[str, list[str | None]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            seen.setdefault(node.targets[0].id, []).append(_render(node.value, known))
    return {k: v[0] for k, v in seen.items() if len(v) == 1 and v[0] is not None}


def python_names(source: str) -> set[str]:
    """Every artifact-like name one Python source spells, each f-string read in its own function's names."""
    found: set[str] = set()

    def visit(scope: ast.AST, outer: Mapping[str, str]) -> None:
        nodes = list(_own_nodes(scope))
        known = {**outer, **_strings_once(nodes, outer)}
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(node, known)
            elif isinstance(node, ast.JoinedStr | ast.Constant):
                text = _render(node, known)
                if text is not None and is_name(text):
                    found.add(text)

    visit(ast.parse(source), {})
    return found


def _yaml_strings(node: Any) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _yaml_strings(k)
            if k not in _EXPRESSION_KEYS:
                yield from _yaml_strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _yaml_strings(v)


def yaml_names(source: str) -> set[str]:
    """Every artifact-like name in one Ansible YAML file's strings, each `{{ ... }}` read as `*`."""
    found: set[str] = set()
    for text in _yaml_strings(yaml.safe_load(source)):
        for token in _TOKEN.findall(_JINJA.sub("*", text)):
            if is_name(token):
                found.add(token)
    return found


def sources(root: Path) -> list[Path]:
    """The files code_names reads, sorted."""
    py = [
        *sorted(p for p in (root / "serving").rglob("*.py") if p.name != "artifacts.py"),  # not its own lists
        *sorted((root / "probes").rglob("*.py")),
        *sorted((root / "images" / "vllm").glob("*.py")),
        *sorted((root / "ansible" / "action_plugins").glob("*.py")),
    ]
    roles = root / "ansible" / "roles"
    yml = [
        *sorted((root / "ansible").glob("*.yml")),
        *sorted(p for d in ("tasks", "defaults", "vars", "handlers") for p in roles.glob(f"*/{d}/*.yml")),
    ]
    return py + yml


def code_names(root: Path) -> dict[str, set[str]]:
    """{normalized name: the files (relative to root) that spell it} for the whole tree."""
    found: dict[str, set[str]] = {}
    for path in sources(root):
        text = path.read_text()
        names = python_names(text) if path.suffix == ".py" else yaml_names(text)
        for name in names:
            found.setdefault(normalize(name), set()).add(str(path.relative_to(root)))
    return found


_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def index_names(markdown: str) -> dict[str, str]:
    """{normalized name: the name as written} of every table row of the index whose first cell is one file name
    in backticks; a row naming a directory (`samplers/`) is not a file and is not compared."""
    found: dict[str, str] = {}
    for line in markdown.splitlines():
        m = _ROW.match(line)
        if m and is_name(m.group(1)):
            found[normalize(m.group(1))] = m.group(1)
    return found


@dataclass(frozen=True)
class Findings:
    """What check found; all empty when the index and the code agree."""

    unlisted: dict[str, set[str]]  # written (spelled by the code) but not in the index: {name: the files}
    stale: dict[str, str]  # in the index but spelled nowhere in the code: {normalized: as the index writes it}
    stale_exclusions: list[str]  # in EXCLUDED but spelled nowhere in the code any more

    def lines(self) -> list[str]:
        out = [
            f"written but not in the index: {k} (in {', '.join(sorted(v))})" for k, v in sorted(self.unlisted.items())
        ]
        out += [f"in the index but no code writes it: {v}" for _, v in sorted(self.stale.items())]
        out += [f"excluded but no code spells it any more: {k}" for k in self.stale_exclusions]
        return out


def check(root: Path, index: Path) -> Findings:
    """The code's names under root against the index's (docs/artifacts.md), each side's extras named."""
    code = code_names(root)
    listed = index_names(index.read_text())
    return Findings(
        unlisted={k: v for k, v in code.items() if k not in EXCLUDED and k not in listed},
        stale={k: v for k, v in listed.items() if k not in code and k not in NAMED_BY_TOOLS},
        stale_exclusions=sorted(k for k in EXCLUDED if k not in code),
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parents[2]
    for name, where in sorted(code_names(root).items()):
        why = EXCLUDED.get(name)
        print(f"{name}\t{', '.join(sorted(where))}" + (f"\t(excluded: {why})" if why else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
