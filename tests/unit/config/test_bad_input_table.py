"""Bad input, systematically (issue 31): every class of operator input, each row one bad value, driven through the
entry point the operator uses: `make <target> VAR=...` where make's own guard or the refdeploy CLI it calls refuses
before any Ansible play, `refdeploy` itself, ansible-playbook with the project's roles for inventory and -e role
variables (role check_vars, before any role's own check), and the workload loader in-process (a workload is first
read inside the bench's play: no command reads one before Ansible).

Each row asserts: exit status 2 (serving/errors.py; for a role variable, Ansible's failed-task status); exactly one
line of error output (besides make's own "make: *** [...] Error 2" trailer, which names the target), naming the
input and saying what to do; no traceback; no advice to delete anything; the row's secret, if it carries one, not
shown; and nothing created: the row's sandbox (its runs/ included) and its TMPDIR are as they were. The rows run
concurrently, each in its own sandbox, so the table costs about as long as its slowest few rows.

The injection rows (issue 46) put each way a value could become a command into every make variable that takes
free text, and into a profile's name: a shell separator, $(...), backticks, an Ansible template, a newline, and
'../'. Each would touch MARKER in the row's sandbox if it ran; the row asserts the one-line refusal and that
MARKER was never created.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from serving.config.workload import load_workload
from serving.errors import InputError

REPO = Path(__file__).resolve().parents[3]
TS = "20261205T101010Z"
CPU_TINY = yaml.safe_load((REPO / "serving" / "profiles" / "cpu-tiny.yaml").read_text())
SMOKE = yaml.safe_load((REPO / "serving" / "workloads" / "smoke.yaml").read_text())
BENCH = {"manifest.json": json.dumps({"kind": "bench", "runs": [], "workload": {}}), "runs/": ""}
PATCHES = REPO / "images" / "vllm" / "patches"
MAKE_TRAILER = re.compile(r"^make(\[\d+\])?: \*\*\* \[.*\] Error \d+$")


def _profile(**changes: object) -> str:
    doc = json.loads(json.dumps(CPU_TINY))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return yaml.safe_dump(doc)


def _workload(**changes: object) -> str:
    return yaml.safe_dump({**SMOKE, **changes})


def _under(prefix: str, files: Mapping[str, str]) -> dict[str, str]:
    return {f"{prefix}/{k}": v for k, v in files.items()}


@dataclass(frozen=True)
class Row:
    input: str  # what the operator sets
    bad: str  # the bad value, in words
    why: str  # why the row is here
    via: str  # make | cli | ansible | load
    argv: tuple[str, ...]  # make: target and VAR=value; cli: refdeploy's arguments; ansible: the role, then its args
    says: tuple[str, ...]  # what the one line must hold: the input's name, and what to do
    files: Mapping[str, str] = field(default_factory=dict)  # the sandbox's files first ("x/": a dir, "->t": a link)
    secret: str = ""  # a value the output must not show

    @property
    def id(self) -> str:
        where = f"make {self.argv[0]}" if self.via == "make" else self.via
        return f"{where}:{self.input}={self.bad}"


# fmt: off
# One row a line or two, aligned as a table reads: the formatter would give each field its own line.
ROWS = [
    # --- make variables: the Makefile's own guards, before anything runs -------------------------------------------
    Row("SEARCH", "fast", "a knee search that does not exist", "make", ("bench", "SEARCH=fast"),
        ("SEARCH=fast", "give SEARCH=rate")),
    Row("VIA", "front -e x=1", "missing quoting: split into extra -e arguments silently", "make",
        ("bench", "VIA=front -e x=1"), ("VIA='front -e x=1'", "give VIA=front")),
    Row("RUNS", "abc", "wrong type: reached -e bench_runs unchecked", "make", ("bench", "RUNS=abc"),
        ("RUNS=abc", "give RUNS=n")),
    Row("RUNS", "0", "out of range", "make", ("bench", "RUNS=0"), ("RUNS=0", "1 or more")),
    Row("SECONDS", "-5", "out of range: reached -e capture_seconds unchecked", "make", ("capture", "SECONDS=-5"),
        ("SECONDS=-5", "give SECONDS=n")),
    Row("SECONDS", "abc", "wrong type", "make", ("capture", "SECONDS=abc"), ("SECONDS=abc", "whole seconds")),
    Row("SECONDS", "1.5", "wrong type, for a probe's window", "make", ("probe", "PROBE=stacks", "SECONDS=1.5"),
        ("SECONDS=1.5", "give SECONDS=n")),
    Row("WORKLOAD", "smoke -e bench_runs=1", "missing quoting: split into extra -e arguments silently", "make",
        ("bench", "WORKLOAD=smoke -e bench_runs=1"), ("WORKLOAD='smoke -e bench_runs=1'", "without spaces")),
    Row("PROBE", "bogus", "not a probe", "make", ("probe", "PROBE=bogus"), ("PROBE=bogus", "choose io")),
    Row("PROBE", "", "missing", "make", ("probe",), ("set PROBE=",)),
    Row("REQUESTS", "-1", "out of range: reached -e profiler_requests unchecked", "make", ("profile", "REQUESTS=-1"),
        ("REQUESTS=-1", "give REQUESTS=n")),
    Row("DESIGN", "both", "not a design", "make", ("compare", "A=x", "B=y", "DESIGN=both"),
        ("DESIGN=both", "give DESIGN=restarts")),
    Row("LEVEL", "abc", "wrong type: argparse's usage dump before", "make", ("compare", "A=x", "B=y", "LEVEL=abc"),
        ("LEVEL=abc", "give LEVEL=0.95")),
    Row("B", "", "missing", "make", ("compare", "A=x"), ("set A=<run> and B=<run>",)),
    Row("B", "", "missing, for validate", "make", ("validate", "A=cpu-tiny"), ("set A=<profile> and B=<profile>",)),
    Row("PROFILE", "cpu-tiny", "ambiguous beside A and B", "make", ("validate", "A=a", "B=b", "PROFILE=cpu-tiny"),
        ("leave PROFILE unset",)),
    Row("HOST", "nohost", "not in the inventory", "make", ("status", "HOST=nohost"),
        ("unknown HOST 'nohost'", "pick one of these")),
    Row("INVENTORY", "inventory/none", "no such inventory", "make", ("status", "INVENTORY=inventory/none"),
        ("inventory/none", "set INVENTORY=")),
    Row("REF", "", "missing", "make", ("verify", "REF="), ("no REF", "give REF=")),
    # --- profile YAML: refdeploy plan (the plan's first step), and make validate's check before any deploy ---------
    Row("profile", "max_num_seqs: many", "wrong type", "cli", ("plan", "--profile", "p.yaml"),
        ("vllm.max_num_seqs", "expected an integer"), {"p.yaml": _profile(vllm__max_num_seqs="many")}),
    Row("profile", "gpu_memory_utilization: 1.5", "unsatisfiable: more than the whole device", "cli",
        ("plan", "--profile", "p.yaml"), ("vllm.gpu_memory_utilization", "less than or equal to 1"),
        {"p.yaml": _profile(vllm__gpu_memory_utilization=1.5)}),
    Row("profile", "ports: {host_port: 8000}", "a port vLLM no longer has", "cli", ("plan", "--profile", "p.yaml"),
        ("ports: vLLM publishes no port", "remove ports"), {"p.yaml": _profile(ports__host_port=8000)}),
    Row("profile", "nofile soft 9 > hard 8", "unsatisfiable limit", "cli", ("plan", "--profile", "p.yaml"),
        ("container.ulimits", "above the hard limit"),
        {"p.yaml": _profile(container__ulimits={"nofile": {"soft": 9, "hard": 8}})}),
    Row("profile", "memory: 0g", "a limit nothing can run under", "cli", ("plan", "--profile", "p.yaml"),
        ("container.memory", "a size above 0"), {"p.yaml": _profile(container__memory="0g")}),
    Row("profile", "vllm.maxnumseqs", "unknown key, misspelt", "cli", ("plan", "--profile", "p.yaml"),
        ("vllm.maxnumseqs", "did you mean 'max_num_seqs'"), {"p.yaml": _profile(vllm__maxnumseqs=4)}),
    Row("profile", "truncated YAML", "corrupt file", "cli", ("plan", "--profile", "p.yaml"),
        ("p.yaml:", "YAML syntax error"), {"p.yaml": "schema_version: 1\nname: [cpu\n"}),
    Row("profile", "nonesuch", "no such profile", "cli", ("plan", "--profile", "nonesuch"),
        ("nonesuch: no such profile", "known: ")),
    Row("profile", "env value of the wrong type", "a secret in the refused value is not echoed", "cli",
        ("plan", "--profile", "p.yaml"), ("env.HTTPS_PROXY", "expected"),
        {"p.yaml": _profile(env__HTTPS_PROXY=["http://user:pw-rowsecret@proxy:3128"])}, secret="pw-rowsecret"),
    Row("profile", "/etc/hostname", "a path to a file that is no profile", "cli",
        ("plan", "--profile", "/etc/hostname"), ("/etc/hostname", "expected a mapping at the top level")),
    Row("A", "a bad profile", "refused before any deploy", "make", ("validate", "A=p.yaml", "B=cpu-tiny"),
        ("make validate: A:", "vllm.max_num_seqs", "expected an integer"),
        {"p.yaml": _profile(vllm__max_num_seqs=-3.5)}),
    # --- workload YAML: the loader the bench's plan calls -----------------------------------------------------------
    Row("workload", "runs: 0", "out of range", "load", ("w.yaml",), ("runs:", "greater than or equal to 1"),
        {"w.yaml": _workload(runs=0)}),
    Row("workload", "concurrency: [0]", "unsatisfiable: no request is ever sent", "load", ("w.yaml",),
        ("concurrency", "at least 1"), {"w.yaml": _workload(concurrency=[0])}),
    Row("workload", "num_prompts: x", "wrong type", "load", ("w.yaml",), ("num_prompts", "valid integer"),
        {"w.yaml": _workload(num_prompts="x")}),
    Row("workload", "concurency", "unknown key", "load", ("w.yaml",), ("concurency", "remove it, or correct"),
        {"w.yaml": _workload(concurency=[1])}),
    Row("workload", "truncated YAML", "corrupt file", "load", ("w.yaml",), ("w.yaml:", "YAML syntax error"),
        {"w.yaml": "schema_version: 1\nname: [x\n"}),
    Row("workload", "/etc/hostname", "a path to a file that is no workload", "load", ("/etc/hostname",),
        ("/etc/hostname", "a workload is a mapping")),
    Row("workload", "nonesuch", "no such workload", "load", ("nonesuch",), ("unknown workload 'nonesuch'", "known")),
    # --- inventory and -e role variables: role check_vars, before any role's own argument check --------------------
    Row("-e bench_runs", "abc", "wrong type: Ansible's 80-line spec dump before", "ansible",
        ("bench", "-e", "bench_runs=abc"), ('bench_runs="abc"', "is not a whole number")),
    Row("-e probe_io_depths", "[x]", "wrong element type", "ansible", ("probe_io", "-e", "probe_io_depths=[x]"),
        ("probe_io_depths", "is not a list of whole numbers")),
    Row("-e capture_seconds", "abc", "wrong type", "ansible", ("capture", "-e", "capture_seconds=abc"),
        ("capture_seconds", "is not a whole number")),
    Row("-e bench_search", "fast", "not a choice", "ansible", ("bench", "-e", "bench_search=fast"),
        ("bench_search", 'is not one of "", rate, concurrency')),
    Row("-e serve_force_replace", "maybe", "not a boolean", "ansible", ("serve", "-e", "serve_force_replace=maybe"),
        ("serve_force_replace", "is not true or false")),
    Row("-e probe_io_target", "a file that is not there", "missing: fio refused it after the run directory was made",
        "ansible", ("probe_io", "-e", "serving_profile=cpu-tiny", "-e", f"images_vllm_patches_dir={PATCHES}",
                    "-e", "probe_io_target=/var/lib/refdeploy/models/tiny-llama/nonesuch.bin"),
        ("probe_io_target /var/lib/refdeploy/models/tiny-llama/nonesuch.bin does not exist on localhost",
         "set probe_io_target to a model weight or data file")),
    Row("inventory probe_io_runtime_s", "ten", "wrong type in group_vars", "ansible",
        ("probe_io", "-i", "inv"), ("probe_io_runtime_s", "is not a whole number", "set it in the inventory"),
        {"inv/hosts.yml": "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n",
         "inv/group_vars/all.yml": "probe_io_runtime_s: ten\n"}),
    # --- run references: make compare / make verify, resolved under runs/ -------------------------------------------
    Row("A", f"{TS} under two hosts", "ambiguous: was resolved to one silently", "make",
        ("compare", f"A={TS}", f"B={TS}"), (TS, "several hosts", "gpu-a", "gpu-b", "give the one meant as its path"),
        {**_under(f"runs/gpu-a/{TS}/bench", BENCH), **_under(f"runs/gpu-b/{TS}/bench", BENCH)}),
    Row("A", "a run id linked out of runs/", "escapes the runs directory after resolution", "make",
        ("compare", f"A={TS}", f"B={TS}"), (TS, "resolves outside runs", "give the bench directory's own path"),
        {**_under(f"elsewhere/{TS}/bench", BENCH), f"runs/gpu-a/{TS}": "->../../elsewhere/" + TS}),
    Row("A", "../../etc", "a path out of runs/ that is no bench", "make", ("compare", "A=../../etc", "B=../../etc"),
        ("A=../../etc", "climbs out", "give A=")),
    Row("A", "a run id that is not there", "missing", "make", ("compare", f"A={TS}", f"B={TS}"),
        (f"{TS}: not a bench run", "expected runs/<host>/<timestamp>/bench/")),
    Row("REF", f"{TS} under two hosts", "ambiguous", "make", ("verify", f"REF={TS}"),
        (f"run id {TS} is a deploy of several hosts (gpu-a, gpu-b)", "give REF=runs/<host>/<timestamp>"),
        {f"runs/gpu-a/{TS}/manifest.json": "{}", f"runs/gpu-b/{TS}/manifest.json": "{}"}),
    Row("REF", "a run id linked out of runs/", "escapes the runs directory after resolution", "make",
        ("verify", f"REF={TS}"), (f"REF={TS}", "resolves outside runs", "give REF="),
        {f"elsewhere/{TS}/manifest.json": "{}", f"runs/gpu-a/{TS}": "->../../elsewhere/" + TS}),
    Row("REF", "/etc", "a directory out of runs/ with no manifest", "make", ("verify", "REF=/etc"),
        ("REF=/etc: no such manifest", "give REF=")),
    Row("REF", "/etc/hostname", "a file that is not a manifest", "make", ("verify", "REF=/etc/hostname"),
        ("/etc/hostname", "give the manifest.json that make deploy wrote")),
    # --- truncated or corrupt JSON ----------------------------------------------------------------------------------
    Row("A", "a truncated bench manifest.json", "a traceback before", "make", ("compare", "A=b1", "B=b1"),
        ("manifest.json: the bench manifest is not valid JSON", "run the bench again"),
        {"b1/bench/manifest.json": '{"kind": "bench", "api_key": "sk-rowsecret", "ru', "b1/bench/runs/": ""},
        secret="sk-rowsecret"),
    Row("A", "a bench manifest.json that is a list", "corrupt: valid JSON, wrong shape", "make",
        ("compare", "A=b1", "B=b1"), ("manifest.json: not a bench manifest", "run the bench again"),
        {"b1/bench/manifest.json": "[]", "b1/bench/runs/": ""}),
    Row("A", "a bench manifest.json without its runs", "corrupt: a KeyError before", "make",
        ("compare", "A=b1", "B=b1"), ("the bench manifest's runs are missing or malformed", "run the bench again"),
        {"b1/bench/manifest.json": '{"kind": "bench"}', "b1/bench/runs/": ""}),
    Row("REF", "a truncated deploy manifest.json", "corrupt", "make", ("verify", "REF=m.json"),
        ("m.json is not JSON", "give the manifest.json that make deploy wrote"),
        {"m.json": '{"kind": "deploy", "plan": {"api": {"key": "sk-rowsecret'}, secret="sk-rowsecret"),
    # --- ANSIBLE_ARGS: what Ansible took silently, or reported in 40 lines blaming the inventory ----------------------
    Row("ANSIBLE_ARGS", "-e bench_runs=1", "a value the Makefile sets: one of the two was silently lost", "make",
        ("bench", "ANSIBLE_ARGS=-e bench_runs=1", "RUNS=2"), ("ANSIBLE_ARGS: -e bench_runs", "give RUNS= instead")),
    Row("ANSIBLE_ARGS", "-e serving_profile=x", "a value the Makefile sets, its make variable unset", "make",
        ("plan", "ANSIBLE_ARGS=-e serving_profile=x"), ("ANSIBLE_ARGS: -e serving_profile", "give PROFILE=")),
    Row("ANSIBLE_ARGS", 'unquoted JSON', "40 lines blaming the inventory before", "make",
        ("plan", 'ANSIBLE_ARGS=-e {"probe_io_depths": [1, 64]}'), ("ANSIBLE_ARGS: -e probe_io_depths", "quote it")),
    Row("ANSIBLE_ARGS", "key=[1, 64]", "a garbled line that named no variable before", "make",
        ("plan", "ANSIBLE_ARGS=-e probe_io_depths=[1, 64]"), ("-e probe_io_depths=", "give it as JSON")),
    Row("ANSIBLE_ARGS", "an injection: a template", "Ansible renders it where the variable is used", "make",
        ("plan", "ANSIBLE_ARGS=-e \"x={{ lookup('pipe','touch MARKER') }}\""),
        ("ANSIBLE_ARGS: -e x", "holds a template")),
]
# fmt: on

# Each would create MARKER in the row's sandbox if it ran: in a shell, in make ($(shell) needs no shell line), in
# Ansible's templating (a pipe lookup), or as a second line of a generated file; '../' climbs out of a directory.
INJECTIONS = {
    ";": "x;touch MARKER", "$()": "x$(touch MARKER)", "$(shell)": "$(shell touch MARKER)",
    "backticks": "x`touch MARKER`", "{{}}": "{{ lookup('pipe','touch MARKER') }}", "newline": "x\ntouch MARKER",
    "../": "../../MARKER",
}  # fmt: skip
# (variable, the target that reads it, the other variables that target needs)
FREE_TEXT = [
    ("HOST", "status", ()), ("INVENTORY", "status", ()), ("PROFILE", "plan", ()), ("WORKLOAD", "bench", ()),
    ("VIA", "bench", ()), ("A", "compare", ("B=y",)), ("B", "compare", ("A=x",)), ("C", "compare", ("A=x", "B=y")),
    ("D", "compare", ("A=x", "B=y")), ("VARIABLE", "compare", ("A=x", "B=y")), ("LEVEL", "compare", ("A=x", "B=y")),
    ("RUN", "diagnose", ()), ("REF", "verify", ()), ("PROBE", "probe", ()), ("SECONDS", "capture", ()),
    ("LOCK_WHEELHOUSE", "lock", ()),
]  # fmt: skip
# The variables that take a word or a number: one shell and one make injection each (the same checker refuses all).
WORDS = [("RUNS", "bench", ()), ("SEARCH", "bench", ()), ("REQUESTS", "profile", ()), ("KEEP", "profile", ()),
         ("PROFILER", "plan", ()), ("DESIGN", "compare", ("A=x", "B=y"))]  # fmt: skip
ROWS += [
    Row(var, name, "an injection: it would run", "make", (target, *others, f"{var}={value}"),
        (f"make {target}: {var}=", "choose" if var == "PROBE" else "give"))
    for var, target, others, names in [*[(*f, tuple(INJECTIONS)) for f in FREE_TEXT],
                                       *[(*w, (";", "$(shell)")) for w in WORDS]]
    for name, value in INJECTIONS.items() if name in names
]  # fmt: skip
ROWS += [
    Row("profile", f"name: {name}", "an injection into the files the name lands in (nginx.conf, a unit, a path)",
        "cli", ("plan", "--profile", "p.yaml"), ("name", "letters, digits and . _ -"), {"p.yaml": _profile(name=value)})
    for name, value in INJECTIONS.items()
]  # fmt: skip

PLAY = "- hosts: all\n  gather_facts: false\n  roles:\n    - role: plan\n    - role: {role}\n"


@dataclass
class Outcome:
    rc: int
    out: str  # stdout
    err: str  # stderr
    line: str  # the one line of error output (the first, where there are more)
    lines: int  # how many lines of error output
    before: list[str]
    after: list[str]
    tmp_left: list[str]
    marker: bool  # an injection ran: MARKER exists


def _tree(root: Path) -> list[str]:
    """Every path under root, links not followed (so a link out of it is one entry), with file sizes."""
    return sorted(
        f"{p.relative_to(root)}{'' if p.is_symlink() or p.is_dir() else ' ' + str(p.stat().st_size)}"
        for p in root.rglob("*")
    )


def _sandbox(row: Row, root: Path) -> Path:
    for rel, content in row.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        elif content.startswith("->"):
            path.symlink_to(content[2:])
        else:
            path.write_text(content)
    # make runs in the sandbox with the project's virtualenv and inventories, its runs/ the sandbox's.
    (root / ".venv").symlink_to(REPO / ".venv")
    (root / "inventory").symlink_to(REPO / "inventory")
    (root / "tmp").mkdir()
    if row.via == "ansible":  # the playbooks' order: plan first (its dependency check_vars before it), then the role
        (root / "play.yml").write_text(PLAY.format(role=row.argv[0]))
    return root


def _run(row: Row, root: Path) -> Outcome:
    sb = _sandbox(row, root)
    before = _tree(sb)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(sb / "tmp"), "ANSIBLE_NOCOLOR": "1"}
    env.pop("MAKEFLAGS", None)
    if row.via == "load":
        try:
            load_workload(str(sb / row.argv[0]) if row.argv[0].endswith(".yaml") else row.argv[0])
            rc, out, err = 0, "", ""
        except InputError as e:  # the CLI's convention: the message on stderr, exit 2
            rc, out, err = 2, "", f"{e}\n"
    else:
        if row.via == "make":
            # -o: never rebuild the virtualenv from a test, whatever the lock file's time.
            argv = ["make", "-s", "-f", str(REPO / "Makefile"), "-o", ".venv/.installed", *row.argv]
        elif row.via == "cli":
            argv = [sys.executable, "-m", "serving.cli", *row.argv]
        else:
            args = [a if a != "inv" else str(sb / "inv") for a in row.argv[1:]]
            inventory = [] if "-i" in args else ["-i", "localhost,", "-c", "local"]
            argv = [str(Path(sys.executable).parent / "ansible-playbook"), *inventory,
                    "-e", f"ansible_python_interpreter={sys.executable}", *args, str(sb / "play.yml")]  # fmt: skip
            # Whatever config the caller runs under (make exports the project's, whose results are YAML): this
            # one's plugins and roles, and Ansible's one-line JSON result, whose msg is read below.
            env.pop("ANSIBLE_CONFIG", None)
            env.update(
                ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                ANSIBLE_ROLES_PATH=str(REPO / "ansible" / "roles"),
                ANSIBLE_ACTION_PLUGINS=str(REPO / "ansible" / "action_plugins"),
                ANSIBLE_FILTER_PLUGINS=str(REPO / "ansible" / "filter_plugins"),
                ANSIBLE_LIBRARY=str(REPO / "ansible" / "library"),
                ANSIBLE_MODULE_UTILS=str(REPO / "ansible" / "module_utils"),
                ANSIBLE_LOCAL_TEMP=str(sb / "tmp"),
            )
        cp = subprocess.run(argv, cwd=sb, env=env, capture_output=True, text=True, timeout=120, check=False)
        rc, out, err = cp.returncode, cp.stdout, cp.stderr
    if row.via == "ansible":
        # The failed task's message: one line of Ansible's result, as the operator reads it.
        fatal = [ln for ln in out.splitlines() if ln.startswith("fatal: ")]
        msgs = [str(json.loads(ln.split(" => ", 1)[1]).get("msg", "")) for ln in fatal]
        text = msgs[0] if msgs else ""
        line, lines = text, len(text.splitlines())
    else:
        said = [ln for ln in err.splitlines() if not MAKE_TRAILER.match(ln)]
        line, lines = (said[0] if said else ""), len(said)
    tmp = sb / "tmp"
    left = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))
    return Outcome(rc, out, err, line, lines, before, _tree(sb), left, (sb / "MARKER").exists())


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = {r.id: pool.submit(_run, r, tmp_path_factory.mktemp("row")) for r in ROWS}
        return {k: f.result() for k, f in futures.items()}


def test_the_table_covers_every_input_class() -> None:
    assert len({r.id for r in ROWS}) == len(ROWS)
    assert {r.via for r in ROWS} == {"make", "cli", "ansible", "load"}
    kinds = " ".join(r.input + " " + r.why for r in ROWS)
    for what in ("wrong type", "out of range", "unsatisfiable", "unknown key", "ambiguous", "escapes", "corrupt",
                 "missing", "secret", "inventory", "-e ", "profile", "workload", "REF", "HOST", "injection",
                 "ANSIBLE_ARGS"):  # fmt: skip
        assert what in kinds, what


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_a_bad_input_is_one_line_naming_it_and_what_to_do_and_changes_nothing(
    row: Row, outcomes: dict[str, Outcome]
) -> None:
    o = outcomes[row.id]
    shown = f"rc={o.rc}\nstdout:\n{o.out[-3000:]}\nstderr:\n{o.err[-3000:]}"
    assert o.rc == 2, shown
    assert o.lines == 1, shown
    for part in row.says:
        assert part in o.line, f"{part!r} not in {o.line!r}"
    everything = o.out + o.err
    assert "Traceback" not in everything, shown
    assert "Validation of arguments failed" not in everything, shown  # Ansible's argument-spec dump
    assert not re.search(r"\brm -r|\bdelete\b|\brmdir\b", o.line, re.I), o.line
    if row.via in ("make", "cli"):
        assert o.out == "", shown  # the refusal is the only output
    if row.secret:
        assert row.secret not in everything, shown
    assert not o.marker, "an injection ran"
    assert o.after == o.before, "the refusal created or changed files"
    assert o.tmp_left == [], o.tmp_left
