from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.evidence.probe_plan import IoThresholds, ProbePlanError, parse_thresholds, render_probe_io_argv


def test_probe_io_argv_mounts_data_read_only_at_host_paths() -> None:
    argv = render_probe_io_argv(
        "refdeploy/probes:abc",
        "/var/lib/refdeploy/models/tiny-llama/model.safetensors",
        ["/var/lib/refdeploy/models"],
        "/var/lib/refdeploy/probe-runs/x",
        5,
        [1, 64],
        {64: IoThresholds(min_iops=20000, max_ms=200)},
    )
    # fio runs as the probe image's user (10003:10003), not root, with no capability at all.
    assert argv[:18] == [
        "docker", "run", "--rm", "--name", "refdeploy-probe-io", "--user", "10003:10003", "--network", "none",
        "--read-only", "--tmpfs", "/tmp", "--volume", "/var/lib/refdeploy/probe-runs/x:/out",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
    ]  # fmt: skip
    assert argv.count("--user") == 1 and "--cap-add" not in argv and "--privileged" not in argv
    assert "/var/lib/refdeploy/models:/var/lib/refdeploy/models:ro" in argv
    i = argv.index("refdeploy/probes:abc")
    assert argv[i + 1 : i + 4] == ["python3", "-m", "probes.io.probe"]
    assert argv[-2:] == ["--min-iops=64:20000", "--max-ms=64:200"]
    assert argv.count("--depth") == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"data_dirs": []}, "probe_io_data_dirs is empty"),
        ({"target": "models/x"}, "models/x: probe paths must be absolute"),
        ({"target": "/dev/vda"}, r"target /dev/vda is outside the data directories \(/data\)"),
        ({"depths": [0]}, "must be positive queue depths"),
        ({"thresholds": {8: IoThresholds(min_iops=1)}}, r"names depths \[8\] that are not probed"),
    ],
)
def test_bad_probe_settings_are_refused(kwargs: dict, message: str) -> None:
    args = {
        "probes_image": "img",
        "target": "/data/x",
        "data_dirs": ["/data"],
        "host_out_dir": "/out",
        "runtime_s": 5,
        "depths": [1, 64],
        "thresholds": {},
    }
    args.update(kwargs)
    with pytest.raises(ProbePlanError, match=message):
        render_probe_io_argv(**args)


def test_thresholds_from_inventory_yaml() -> None:
    t = parse_thresholds({1: {"min_iops": 2000}, "64": {"min_iops": 20000, "max_p999_ms": 50, "max_ms": 200}})
    assert t == {1: IoThresholds(min_iops=2000.0), 64: IoThresholds(20000.0, 50.0, 200.0)}
    assert parse_thresholds({}) == {}
    with pytest.raises(ProbePlanError, match="expected keys among"):
        parse_thresholds({64: {"min_iop": 1}})


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({64: {"max_ms": 0}}, "probe_io_thresholds.64.max_ms: a latency bound of 0 ms fails every drive"),
        ({1: {"max_p999_ms": "0"}}, "probe_io_thresholds.1.max_p999_ms: a latency bound of 0 ms fails every drive"),
        ({0: {"min_iops": 10}}, "probe_io_thresholds: 0 is not a queue depth (1 or more)"),
    ],
)
def test_a_threshold_no_drive_can_meet_is_refused_in_one_line(data: dict[int, object], says: str) -> None:
    with pytest.raises(ProbePlanError) as e:
        parse_thresholds(data)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)
    assert parse_thresholds({1: {"min_iops": 0}}) == {1: IoThresholds(min_iops=0.0)}  # no floor: allowed


def _capture(**kw: object) -> list[str]:
    from serving.evidence.probe_plan import render_capture_argv

    args: dict[str, object] = dict(
        probes_image="refdeploy/probes:abc",
        serving_container="refdeploy-vllm",
        socket_dir="/var/lib/refdeploy/api/refdeploy-vllm",
        host_out_dir="/var/lib/refdeploy/probe-runs/x",
        seconds=20,
        parts=["samplers", "metrics", "stacks"],
        data_files=["/var/lib/refdeploy/models/tiny-llama/model.safetensors"],
        data_dirs=["/var/lib/refdeploy/models/tiny-llama"],
        host="localhost",
    )
    args.update(kw)
    return render_capture_argv(**args)  # type: ignore[arg-type]


def test_capture_carries_the_serving_containers_engine_labels_as_one_json_argument() -> None:
    assert "--engine-json" not in _capture()  # where the caller did not say, the bundle says nothing
    argv = _capture(engine={"profiler": "torch", "stand_in": None, "other": "x"})
    assert json.loads(argv[argv.index("--engine-json") + 1]) == {"profiler": "torch", "stand_in": ""}


def test_capture_joins_the_serving_namespaces_with_least_capabilities() -> None:
    argv = _capture()
    joined = " ".join(argv)
    # vLLM's processes, and its socket (no network: vLLM has no address), as a member of the socket's group.
    assert "--pid container:refdeploy-vllm --network none --group-add 10002" in joined
    assert "/var/lib/refdeploy/api/refdeploy-vllm:/run/refdeploy/api:ro" in argv
    assert "--cap-drop ALL --cap-add SYS_PTRACE" in joined
    assert "PERFMON" not in joined and "SYS_ADMIN" not in joined  # no perf, no perf capability
    assert "FOWNER" not in joined  # no page-cache reading
    with_residency = " ".join(_capture(parts=["hoststate"]))
    assert "--cap-drop ALL --cap-add SYS_PTRACE" in with_residency and "--cap-add FOWNER" in with_residency
    assert "--read-only" in argv
    assert "/sys/fs/cgroup:/host/sys/fs/cgroup:ro" in argv
    assert "/var/lib/refdeploy/models/tiny-llama:/var/lib/refdeploy/models/tiny-llama:ro" in argv
    i = argv.index("refdeploy/probes:abc")
    assert argv[i + 1 : i + 4] == ["python3", "-m", "probes.capture.bundle"]
    assert argv[argv.index("--only") + 1] == "samplers,metrics,stacks"
    assert argv[argv.index("--metrics-url") + 1] == "http://localhost/metrics"
    assert argv[argv.index("--metrics-socket") + 1] == "/run/refdeploy/api/vllm.sock"


def test_perf_gets_the_chosen_capability() -> None:
    assert "PERFMON" in _capture(parts=["perf"])
    argv = _capture(parts=["perf"], perf_capability="SYS_ADMIN")
    assert argv[argv.index("SYS_ADMIN") - 1] == "--cap-add"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"parts": ["flamegraph"]}, "unknown probe flamegraph"),
        ({"parts": []}, "unknown probe"),
        ({"seconds": 0}, "1 to 3600 seconds"),
        ({"data_files": ["/etc/shadow"]}, "outside the data directories"),
        ({"host_out_dir": "relative/dir"}, "absolute"),
        ({"perf_capability": "ALL"}, "PERFMON or SYS_ADMIN"),
    ],
)
def test_bad_capture_settings(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ProbePlanError, match=message):
        _capture(**kw)


def test_probe_names() -> None:
    from serving.evidence.probe_plan import DEFAULT_CAPTURE_PARTS, probe_parts

    assert probe_parts("stacks") == ["stacks"]
    assert probe_parts("capture") == list(DEFAULT_CAPTURE_PARTS)
    with pytest.raises(ProbePlanError, match="choose from io, samplers"):
        probe_parts("fio")


def test_every_list_of_capture_parts_is_the_one_in_probes_parts() -> None:
    import re

    import yaml

    from probes.capture import parts

    repo = Path(__file__).resolve().parents[3]
    assert tuple(parts.PART_DIRS) == parts.PARTS and set(parts.DEFAULT_PARTS) <= set(parts.PARTS)
    specs = yaml.safe_load((repo / "ansible/roles/capture/meta/argument_specs.yml").read_text())["argument_specs"]
    assert specs["main"]["options"]["capture_probe"]["choices"] == ["capture", *parts.PARTS]
    makefile = (repo / "Makefile").read_text()
    m = re.search(r"PROBE=io\|([a-z|]+)", makefile)
    assert m and m.group(1).split("|") == list(parts.PARTS), "make help lists other probes than probes/capture/parts.py"
