"""`make verify REF=<manifest> [HOST=host|group]`: does each host run what a reference deploy manifest says?

ansible/verify.yml reads each host as the deploy reads it after a launch (the plan's read with the host's
tuning, the engine's start-up lines and metrics, the container, its image and what it sees inside), changing
nothing there, and builds the current manifest in memory with the deploy's own code (serving/record/manifest.py).
This module diffs the reference against it, field by field, and classifies every difference:

  must-match     what makes the environment: the image (id, digests, labels, patch hashes, vLLM version), the
                 container's spec and argv (as rendered, and as Docker started it), the effective config, the
                 limits in force, the model's files, placement, the host (kernel, CPUs, memory, Docker, driver/
                 CUDA through the GPUs' facts), the kernel command line and host tuning (governor, THP,
                 swappiness, NUMA balancing), the GPUs' settings, and the plan this controller makes of the
                 reference's profile. A field this table does not name is must-match: nothing drifts unread.
  informational  what differs between two deploys of one environment: times, container ids, pids, run ids,
                 start-up durations, memory measured at start-up, the controller's checkout (below).

The repo commit is informational. What a commit changes on a host reaches it only through what the controller
renders and builds from it (the plan, the container spec and argv, the image's inputs and patch hashes), and
those are must-match: a new commit that renders the same environment passes, one that renders another fails
on the field that differs, which says more than "the commit differs". (The checkout's paths in the plan, such
as a patch's path on the controller, are informational for the same reason: a second checkout renders the same.)

The result is written on the controller as runs/<host>/<timestamp>/verify.json (the differences, each with its
class and why), beside current-manifest.json (the manifest built now; redacted like every manifest).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from serving.config.make_vars import unsafe_yaml
from serving.errors import InputError

MUST_MATCH = "must-match"
INFORMATIONAL = "informational"
VERIFY_SCHEMA_VERSION = 1


class _Absent:
    """A field one side does not have."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()

# Lists of records compared record by record, by the field that names each one.
KEYED_LISTS: dict[str, str] = {
    "effective_config.checks": "setting",
    "verification": "check",
    "image.patches": "name",
    "plan.images.patches": "name",
    "plan.launch.images.patches": "name",
    "placement.ranks": "rank",
    "plan.capacity.disk": "place",
    "plan.launch.ranks": "rank",
    "gpu.gpus": "index",
    "gpu.peer.talking": "gpus",
    "plan.gpu.peer.talking": "gpus",
    "host_tuning.gpus": "index",
}
# argv lists compared flag by flag (`--max-num-seqs` and its value), so a difference names the flag.
ARGV_LISTS = frozenset(
    {
        "vllm_argv",
        "container.cmd",
        "container_spec.command",
        "plan.argv",
        "plan.container_spec.command",
        "plan.launch.spec.command",
    }
)

# (dotted-path pattern, class, why): the first pattern that matches a difference's path classifies it. fnmatch
# patterns: `*` matches across dots too.
RULES: tuple[tuple[str, str, str], ...] = (
    ("run_id", INFORMATIONAL, "each deploy's own run id"),
    ("created_utc", INFORMATIONAL, "when the manifest was written"),
    ("host", INFORMATIONAL, "the inventory name of the host compared"),
    ("schema_version", INFORMATIONAL, "the manifest's format; the fields themselves are compared"),
    ("repo", INFORMATIONAL, "the controller's checkout: what it renders is compared in the plan, spec and image"),
    ("repo.*", INFORMATIONAL, "the controller's checkout: what it renders is compared in the plan, spec and image"),
    ("host_facts.hostname", INFORMATIONAL, "the host's name"),
    ("host_facts.fqdn", INFORMATIONAL, "the host's name"),
    ("host_facts.ansible_version", INFORMATIONAL, "the controller's Ansible"),
    ("host_tuning.source", INFORMATIONAL, "where the readings came from (a test host's replay directory)"),
    ("host_tuning.gpus.*.pcie.gen_current", INFORMATIONAL, "a PCIe link's current gen drops at idle"),
    ("container.id", INFORMATIONAL, "each start's container id"),
    ("container.started_at", INFORMATIONAL, "when the container started"),
    ("container.engine_startup_s", INFORMATIONAL, "a start-up duration"),
    ("container.replaced_by_this_deploy", INFORMATIONAL, "what that deploy did, not what runs"),
    ("deploy_timing", INFORMATIONAL, "a deploy's times and durations"),
    ("deploy_timing.*", INFORMATIONAL, "a deploy's times and durations"),
    ("memory_by_phase", INFORMATIONAL, "memory measured at start-up, pids and clocks: they vary run to run"),
    ("memory_by_phase.*", INFORMATIONAL, "memory measured at start-up, pids and clocks: they vary run to run"),
    ("effective_config.config_line", INFORMATIONAL, "the log line carries a pid and a time; its values are compared"),
    ("effective_config.server_started_log_ts", INFORMATIONAL, "a log time"),
    ("limits_in_force.cgroup_paths*", INFORMATIONAL, "where each cgroup level is: the container's has its id"),
    ("placement.lines", INFORMATIONAL, "the lines carry pids; each rank's CPUs and nodes are compared"),
    ("placement.ranks.*.pid", INFORMATIONAL, "a worker's pid"),
    # Where a rank's anonymous and shared memory sit is measured (numa_maps) and moves by pages as it runs; the nodes
    # it may use (memory_nodes.allowed) and whether its binding held (ok, problems) are compared.
    ("placement.ranks.*.memory_nodes.anon_bytes*", INFORMATIONAL, "a rank's memory by node, measured as it runs"),
    ("placement.ranks.*.memory_nodes.shared_bytes*", INFORMATIONAL, "a rank's memory by node, measured as it runs"),
    ("placement.ranks.*.memory_nodes.outside_share", INFORMATIONAL, "a measured share; the verdict (ok) is compared"),
    ("plan.host", INFORMATIONAL, "the inventory name of the host compared"),
    ("plan.health_timeout_*", INFORMATIONAL, "how long a start was given, from the model as found when planned"),
    # Free space is measured (df), and what a deploy needed of it depends on whether it had to build the image; the
    # GPU room follows from the GPUs' memory and the model's facts, which are compared themselves.
    ("plan.capacity", INFORMATIONAL, "free space and GPU room as measured when planned: they move"),
    ("plan.capacity.*", INFORMATIONAL, "free space and GPU room as measured when planned: they move"),
    ("plan.gpu.toolkit_install", INFORMATIONAL, "whether that deploy had to install the container toolkit"),
    ("gpu.toolkit_install", INFORMATIONAL, "whether that deploy had to install the container toolkit"),
    ("plan.*images.constraints_file", INFORMATIONAL, "a path in the controller's checkout; its content is hashed"),
    ("plan.*images.lock_file", INFORMATIONAL, "a path in the controller's checkout; its content is hashed"),
    ("plan.*images.patches.*.path", INFORMATIONAL, "a path in the controller's checkout; its sha256 is compared"),
    ("plan.*images.probes_package_files", INFORMATIONAL, "paths in the checkout; hashed in the tag"),
    ("rendered_spec.path", INFORMATIONAL, "where the spec is written; its sha256 is compared"),
    ("gpu.gpus.*.uuid", INFORMATIONAL, "each GPU's serial identity"),
    ("gpu.host_settings", INFORMATIONAL, "what that deploy's host roles changed; verify changes nothing"),
    ("gpu.host_settings.*", INFORMATIONAL, "what that deploy's host roles changed; verify changes nothing"),
    ("gpu.data.smart.*", INFORMATIONAL, "the drive's counters (data read, hours, temperature) move"),
    # The peer section (serving/host/pcie_peer.py): P2P by pair, ACS bits, IOMMU mode and the talking pairs are
    # must-match; where the bridges sit, group numbers and the wording of its lines follow from those or move.
    ("*gpu.peer.paths*", INFORMATIONAL, "PCI addresses of the bridges above each GPU: the ACS bits are compared"),
    ("*gpu.peer.acs.*.name", INFORMATIONAL, "lspci's description of a bridge"),
    ("*gpu.peer.iommu.groups_total", INFORMATIONAL, "how many IOMMU groups the host has: its other devices"),
    ("*gpu.peer.iommu.gpus.*", INFORMATIONAL, "IOMMU group numbers and members: the mode is compared"),
    ("*gpu.peer.warnings*", INFORMATIONAL, "lines said from the compared facts"),
    ("*gpu.peer.notes*", INFORMATIONAL, "lines said from the compared facts"),
)
DEFAULT_WHY = "what makes the environment"
# Subtrees compared whole: one difference, not one per measured value (verify.json keeps both whole).
WHOLE = frozenset({"memory_by_phase"})


@dataclass(frozen=True)
class Difference:
    path: str
    reference: Any
    current: Any
    kind: str  # MUST_MATCH | INFORMATIONAL
    why: str

    def line(self, width: int = 160) -> str:
        label = "MUST-MATCH" if self.kind == MUST_MATCH else "info      "
        return f"{label} {self.path}: reference {_show(self.reference, width)}, now {_show(self.current, width)}"


def _show(value: Any, width: int) -> str:
    if value is ABSENT:
        return "(absent)"
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def argv_map(argv: list[Any]) -> dict[str, Any]:
    """An argv as {flag: value}: `--flag value` and `--flag=value` by flag, a bare `--flag` as true, the words
    before the first flag by position (arg0, arg1, ...); a flag given twice keeps its values in order."""
    out: dict[str, Any] = {}
    i = 0
    words = [str(a) for a in argv]
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                got: Any = value
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                got = words[i + 1]
                i += 1
            else:
                got = True
            if name in out:
                got = [*(out[name] if isinstance(out[name], list) else [out[name]]), got]
            out[name] = got
        else:
            out[f"arg{i}"] = word
        i += 1
    return out


def _keyed(items: list[Any], key: str) -> dict[str, Any] | None:
    """A list of records by their naming field; None when they cannot be (a record without it, two alike)."""
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, dict) or key not in item or str(item[key]) in out:
            return None
        out[str(item[key])] = item
    return out


def _as_mapping(path: str, value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and path in ARGV_LISTS:
        return argv_map(value)
    if isinstance(value, list) and path in KEYED_LISTS:
        return _keyed(value, KEYED_LISTS[path])
    return None


def classify(path: str, reference_older: bool = False, reference: Any = None, current: Any = None) -> tuple[str, str]:
    """(class, why) of a difference at `path`. A field a reference of an older manifest format does not have
    is informational (that reference predates the reading), unless it is a check that fails now."""
    for pattern, kind, why in RULES:
        if fnmatchcase(path, pattern):
            return kind, why
    failing = path.startswith("verification.") and isinstance(current, dict) and current.get("ok") is False
    if reference_older and reference is ABSENT and not failing:
        return INFORMATIONAL, "not recorded by the reference (an older manifest format)"
    return MUST_MATCH, DEFAULT_WHY


def diff(reference: Any, current: Any, reference_older: bool = False, path: str = "") -> list[Difference]:
    """Every difference between two manifests (or parts of them), each at its dotted path, classified."""
    ref_map, cur_map = _as_mapping(path, reference), _as_mapping(path, current)
    if ref_map is not None and cur_map is not None and path not in WHOLE:
        out: list[Difference] = []
        for key in sorted(set(ref_map) | set(cur_map), key=str):
            sub = f"{path}.{key}" if path else str(key)
            out += diff(ref_map.get(key, ABSENT), cur_map.get(key, ABSENT), reference_older, sub)
        return out
    if reference is not ABSENT and current is not ABSENT and reference == current:
        return []
    kind, why = classify(path, reference_older, reference, current)
    return [Difference(path, reference, current, kind, why)]


def compare(reference: Mapping[str, Any], current: Mapping[str, Any]) -> list[Difference]:
    from serving.record.manifest import SCHEMA_VERSION

    older = int(reference.get("schema_version") or 0) < SCHEMA_VERSION
    return diff(dict(reference), dict(current), older)


# --- the reference --------------------------------------------------------------------------------------------


def resolve_reference(ref: str, runs_dir: Path) -> Path:
    """The manifest a REF names: a manifest.json, a run directory holding one, or a run id under runs/<host>/."""
    hint = "give REF=runs/<host>/<timestamp>/manifest.json (what make deploy wrote), its directory, or its run id"
    if not ref.strip():
        raise InputError(f"make verify: no REF: {hint}")
    path = Path(ref)
    if path.is_dir():
        path = path / "manifest.json"
    if path.is_file():
        return path.resolve()
    if "/" not in ref and ref not in (".", ".."):
        found = sorted(runs_dir.glob(f"*/{ref}/manifest.json"))
        # A run id names a run under runs/: one that a symlink takes elsewhere is not one.
        if outside := [p for p in found if not p.resolve().is_relative_to(runs_dir.resolve())]:
            raise InputError(f"make verify: REF={ref}: {outside[0]} resolves outside {runs_dir}: {hint}")
        if len(found) == 1:
            return found[0].resolve()
        if len(found) > 1:
            hosts = ", ".join(p.parent.parent.name for p in found)
            raise InputError(f"make verify: run id {ref} is a deploy of several hosts ({hosts}): {hint}")
    raise InputError(f"make verify: REF={ref}: no such manifest: {hint}")


def load_reference(path: Path) -> dict[str, Any]:
    """The reference manifest, or one line saying why it is not a deploy manifest."""
    from serving.record.manifest import DEPLOY_KINDS

    what = "give the manifest.json that make deploy wrote (runs/<host>/<timestamp>/manifest.json)"
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"make verify: cannot read {path}: {e.strerror}: {what}") from None
    except ValueError as e:
        raise InputError(f"make verify: {path} is not JSON ({e}): {what}") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in DEPLOY_KINDS:
        said = f"its kind is {kind!r}" if kind else "it has no kind"
        raise InputError(f"make verify: {path} is not a deploy manifest ({said}): {what}")
    profile = (data.get("plan") or {}).get("profile")
    if not isinstance(profile, dict):
        raise InputError(f"make verify: {path} holds no plan with its profile: {what}")
    return dict(data)


def write_reference_profile(reference: Mapping[str, Any], out: Path) -> None:
    """The profile the reference was deployed with, as a file the plan loads: verify plans with it, so that
    it reads the host where that deploy put things and expects what that deploy expected."""
    from serving.config.profile import load_profile

    out.write_text(json.dumps(reference["plan"]["profile"], indent=2, sort_keys=True) + "\n")
    try:
        load_profile(str(out))
    except InputError as e:
        raise InputError(f"make verify: the reference's profile does not load here: {e}") from None


# --- one host -------------------------------------------------------------------------------------------------


def current_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    """The manifest of what runs now, built as the deploy builds it (redacted on arrival)."""
    from serving.config.redact import redact
    from serving.record.manifest import build_manifest, build_rendered_manifest

    raw = redact(raw)
    return build_rendered_manifest(raw) if raw.get("launched") is False else build_manifest(raw)


def verify_host(raw: dict[str, Any], reference_path: Path, runs_dir: Path) -> dict[str, Any]:
    """Compare a host now with the reference; write verify.json and current-manifest.json in a new run
    directory: {"path", "run_id", "lines", "must_match", "informational"}."""
    from serving.config.redact import redact
    from serving.record.manifest import new_run_dir

    # Compared redacted, as every manifest is written: a hand-made reference's secrets reach no artifact or line.
    reference = redact(load_reference(reference_path))
    run_dir = new_run_dir(runs_dir, str(raw["host"]))
    current = current_manifest({**raw, "run_id": run_dir.name})
    (run_dir / "current-manifest.json").write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    found = compare(reference, current)
    must = [d for d in found if d.kind == MUST_MATCH]
    info = [d for d in found if d.kind == INFORMATIONAL]
    out = run_dir / "verify.json"
    verdict = "differs from the reference" if must else "matches the reference"
    summary = (
        f"{raw['host']} {verdict}: {len(must)} must-match and {len(info)} informational differences from "
        f"{reference_path} (run {reference.get('run_id')} on {reference.get('host')}); written to {out}"
    )
    doc = {
        "schema_version": VERIFY_SCHEMA_VERSION,
        "kind": "verify",
        "host": raw["host"],
        "run_id": run_dir.name,
        "reference": {"path": str(reference_path), "host": reference.get("host"), "run_id": reference.get("run_id")},
        "current_manifest": "current-manifest.json",
        "verdict": "differs" if must else "matches",
        "must_match": len(must),
        "informational": len(info),
        "differences": [
            {**asdict(d), "reference": _plain(d.reference), "current": _plain(d.current)} for d in [*must, *info]
        ],
        "summary": summary,
    }
    out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    lines = [d.line() for d in must] + [d.line() for d in info] + [summary]
    return {"path": str(out), "run_id": run_dir.name, "lines": lines, "must_match": len(must), "summary": summary}


def _plain(value: Any) -> Any:
    return "(absent)" if value is ABSENT else value


# --- the CLI ------------------------------------------------------------------------------------------------------


def plan_inputs(reference: Mapping[str, Any], profile_file: Path) -> dict[str, str]:
    """The playbook's extra vars that plan as the reference was planned: its profile (written to profile_file),
    and the plan's inputs beyond the profile that it records (the API key and HF token files, the profiler). The
    inventory's per-host inputs (gpu_class, the data disk, memlock) stay the inventory's: each host is planned as it
    is."""
    plan = reference["plan"]
    write_reference_profile(reference, profile_file)
    return {
        "serving_profile": str(profile_file.resolve()),
        "refdeploy_api_key_file": str((plan.get("api") or {}).get("key_file") or ""),
        "refdeploy_hf_token_file": str((plan.get("api") or {}).get("hf_token_file") or ""),
        "refdeploy_profiler": str((plan.get("profiler") or {}).get("kind") or ""),
    }


def cmd_verify_ref(a: argparse.Namespace) -> int:
    """Check REF before any host is read: print the manifest's path. With --vars-out, write the playbook's extra
    vars there (no path passes through a shell string or Ansible's key=value parsing): verify_reference, and with
    --profile-out (no PROFILE= given) what plans as the reference was planned (plan_inputs). As YAML tagged
    !unsafe (serving/config/make_vars.py unsafe_yaml), not JSON: Ansible templates a JSON extra var's strings, and these
    come from a manifest file REF names, which anyone who can write one could fill with a {{ lookup('pipe') }}."""
    path = resolve_reference(a.ref, Path(a.runs_dir))
    reference = load_reference(path)
    extra: dict[str, str] = {"verify_reference": str(path)}
    if a.profile_out:
        extra.update(plan_inputs(reference, Path(a.profile_out)))
    if a.vars_out:
        Path(a.vars_out).write_text(unsafe_yaml(extra))
    print(path)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("verify-ref", help="check make verify's REF: print its manifest's path (one line if not)")
    p.add_argument("--ref", required=True, help="runs/<host>/<ts>/manifest.json, its directory, or its run id")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--profile-out", help="write the reference's profile here, for verify to plan with")
    p.add_argument("--vars-out", help="write ansible/verify.yml's extra vars here (YAML, each value !unsafe)")
    p.set_defaults(func=cmd_verify_ref)
