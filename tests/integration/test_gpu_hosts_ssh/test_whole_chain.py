"""The whole chain on each class's host over SSH: deploy, a second deploy, status, bench, capture, probe-io,
undeploy. Then the two hosts as one group: a roll that succeeds, and one that stops at its first failure."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, bundle_dir, docker, inspect, manifest_of, probe_io_dir, ran_bench
from tests.integration.conftest import make as make_here
from tests.integration.test_gpu_hosts_ssh.gpu_hosts import (
    FIXTURES,
    STAND_IN,
    _container,
    _flat,
    _host_files,
    make,
)

pytestmark = pytest.mark.integration
ENGINE_STARTS = 6


def _recap(output: str, host: str) -> dict[str, int]:
    m = re.search(rf"^{re.escape(host)}\s+: (ok=\d+.*)$", output, re.M)
    assert m, output[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def _changed_tasks(output: str) -> list[str]:
    tasks, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[6 : line.index("]")]
        elif line.startswith("changed: "):
            tasks.append(task)
    return tasks


# host, fixture, model dir, the plan's cpuset and memory nodes, the stand-in's kind of parallelism
CHAIN = [
    ("rdtest-gpu3090", "rtx3090-3gpu", "served", "0-27", "0", "pipeline_parallel_size"),
    ("rdtest-gpupro", "rtxpro6000-8gpu", "moe-gguf", None, "0-1", "tensor_parallel_size"),
]


@pytest.mark.parametrize(("host", "fixture", "model", "cpus", "mems", "parallel"), CHAIN, ids=[c[0] for c in CHAIN])
def test_a_gpu_host_runs_the_whole_chain_over_ssh(
    hosts: tuple[Path, Path], share: Path, host: str, fixture: str, model: str, cpus: str | None, mems: str,
    parallel: str,
) -> None:  # fmt: skip
    """deploy (the container started: the stand-in plays the class's), a second deploy that changes nothing,
    status, bench, capture, probe-io and undeploy, all against the class's plan. Before this, no GPU chain ran
    past the container start, and bench was refused on every GPU host (it compared the running argv with a
    plan that had no --numa-bind*)."""
    inv = hosts[0]
    name = _container(host)
    docker("exec", host, "rm", "-f", "/var/log/refdeploy-systemctl.log")
    first = make("deploy", f"INVENTORY={inv}", f"HOST={host}")
    assert first.rc == 0, first.output[-6000:]
    _run, manifest = manifest_of(first)
    running = inspect(name)
    assert running is not None and running["State"]["Status"] == "running"

    # The GPU smoke test ran at its seam before the container was started (serving/plan/standin.py).
    assert (
        "GPU smoke test: stand-in (serving/plan/standin.py): a container of the CPU image (no GPUs) replays"
        in _flat(first.output)
    ), first.output[-6000:]
    second = make("deploy", f"INVENTORY={inv}", f"HOST={host}")
    assert second.rc == 0, second.output[-5000:]
    assert _recap(second.output, host)["changed"] == 0, _changed_tasks(second.output)
    assert inspect(name)["Id"] == running["Id"]  # type: ignore[index]
    _check_smoke_refusal(inv, host, name, running["Id"])
    _check_manifest(manifest, running, share, model, cpus, mems, parallel, host)
    gpu = manifest["gpu"]
    _check_host_writes(host, gpu, mems)
    _check_golden_spec(manifest["plan"], share, fixture, name, host)
    _check_status(inv, host, name)
    _check_bench(inv, host, model, running)
    _check_capture(inv, host, share, model, gpu)
    _check_probe_io(inv, host, share, model)
    # undeploy: the class's containers go, the host's files stay.
    gone = make("undeploy", f"INVENTORY={inv}", f"HOST={host}")
    assert gone.rc == 0, gone.output[-3000:]
    assert inspect(name) is None and inspect(f"{name}-samplers") is None


def _check_smoke_refusal(inv: Path, host: str, name: str, running_id: str) -> None:
    """A replacement on a host whose Docker Engine cannot give a container the GPUs (no NVIDIA container
    toolkit) stops at the smoke test: the stand-in keeps the GPU request, and this machine's Docker Engine, which
    has no NVIDIA runtime, answers it. The running container and the host's files stay as they were."""
    variant = Path(STAND_IN["REFDEPLOY_STAND_IN"]).with_name(f"stand-in-toolkit-less-{host}.json")
    variant.write_text(json.dumps({**json.loads(Path(STAND_IN["REFDEPLOY_STAND_IN"]).read_text()),
                                   "gpu_smoke": {"gpu_request": True}}))  # fmt: skip
    files = _host_files(host)
    r = make_here(
        "deploy", f"INVENTORY={inv}", f"HOST={host}", "ANSIBLE_ARGS=-e serve_force_replace=true",
        env={"REFDEPLOY_STAND_IN": str(variant)},
    )  # fmt: skip
    out = _flat(r.output)
    assert r.rc != 0, out[-4000:]
    assert f"Docker Engine on {host} cannot give a container the GPUs: the NVIDIA container toolkit" in out, out[-4000:]
    assert f"The serving container was not touched: {name} on {host} runs as before" in out, out[-4000:]
    assert inspect(name)["Id"] == running_id and inspect(f"{name}-gpu-smoke") is None  # type: ignore[index]
    assert _host_files(host) == files


def _check_manifest(
    manifest: dict[str, Any],
    running: dict[str, Any],
    share: Path,
    model: str,
    cpus: str | None,
    mems: str,
    parallel: str,
    host: str,
) -> None:
    # The manifest: the launched (stand-in) container verified, the class's plan beside it.
    assert manifest["kind"] == "deploy" and manifest["verified"] is True, manifest["verification"]
    plan = manifest["plan"]
    stand_in = manifest["stand_in"]
    assert stand_in and stand_in["module"] == "serving/plan/standin.py"
    assert running["Config"]["Labels"]["org.refdeploy.stand-in"] == "serving/plan/standin.py"
    assert plan["container_spec"]["image"].startswith("refdeploy/vllm:0.32.0-cuda-")
    assert manifest["container_spec"]["image"] == running["Config"]["Image"] == plan["images"]["runtime_tag"]
    assert "device_requests" in plan["container_spec"] and "device_requests" not in manifest["container_spec"]
    assert stand_in["replaced"]["image"] == [plan["container_spec"]["image"], running["Config"]["Image"]]
    # Two ranks of the class's kind, each on its own CPU, verified rank by rank.
    argv = running["Config"]["Cmd"]
    assert argv[argv.index("--" + parallel.replace("_", "-")) + 1] == "2"
    ranks = manifest["placement"]["ranks"]
    assert [(r["rank"], r["cpus_allowed"], r["ok"]) for r in ranks] == [(0, "0", True), (1, "1", True)]
    titles = {r["title"] for r in ranks}
    assert titles == ({"VLLM::Worker_PP0", "VLLM::Worker_PP1"} if "pipeline" in parallel
                      else {"VLLM::Worker_TP0", "VLLM::Worker_TP1"})  # fmt: skip
    # The class's plan: facts, NUMA plan, budget table, the data's drive, the slice.
    gpu = manifest["gpu"]
    assert len(gpu["gpus"]) == len(plan["container_spec"]["device_requests"][0]["device_ids"])
    assert gpu["numa_plan"]["cpuset_mems"] == mems
    if cpus:
        assert gpu["numa_plan"]["cpuset_cpus"] == cpus
    assert any("verdict: FITS" in ln for ln in gpu["ram_budget_table"]), gpu["ram_budget_table"]
    assert [(d["path"], d["disk"], d["transport"]) for d in gpu["data"]] == [
        (f"{share}/models/{model}", "nvme1n1", "nvme")
    ]
    assert gpu["data"][0]["smart"]["media_errors"] == 0
    assert gpu["slice"]["name"] == "refdeploy.slice" and gpu["slice"]["allowed_memory_nodes"] == mems
    # Not read back: a test host has no systemd, so the slice's cgroup is never created; the manifest says which
    # directory it looked for, and that directory is indeed missing on the host.
    absent = gpu["slice"]["absent"]
    assert gpu["slice"]["limits_read_back"] is None and absent and " does not exist yet" in absent, gpu["slice"]
    looked_for = absent.split(" does not exist yet")[0]
    assert looked_for.endswith("/refdeploy.slice"), absent
    assert (
        docker("exec", host, "bash", "-c", f"test -e {looked_for} && echo present || echo missing").strip() == "missing"
    )
    assert manifest["host_facts"]["hostname"] == host
    assert manifest["effective_config"]["mismatches"] == []


def _check_host_writes(host: str, gpu: dict[str, Any], mems: str) -> None:
    # What the host roles wrote, and what they asked systemd to do (once, on the first run).
    daemon = json.loads(docker("exec", host, "cat", "/etc/docker/daemon.json"))
    assert daemon["log-opts"] == {"max-size": "100m", "max-file": "5"} and daemon["live-restore"] is True
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    unit = docker("exec", host, "cat", "/etc/systemd/system/refdeploy.slice")
    assert unit == gpu["slice"]["unit"] and f"AllowedMemoryNodes={mems}\n" in unit
    calls = docker("exec", host, "cat", "/var/log/refdeploy-systemctl.log").splitlines()
    memlock = docker(
        "exec",
        host,
        "bash",
        "-c",
        "cat /etc/systemd/system/docker.service.d/refdeploy-memlock.conf 2>/dev/null || true",
    )
    # Only the 3090 host's inventory asks the deploy to raise the engine's memlock.
    assert ("LimitMEMLOCK=infinity" in memlock) == (host == "rdtest-gpu3090"), memlock
    restarts = ["restart containerd.service"] if memlock else []
    assert calls == ["daemon-reload", *restarts, "restart docker.service"]


def _check_golden_spec(plan: dict[str, Any], share: Path, fixture: str, name: str, host: str) -> None:
    # The class's container spec is the reviewed golden one, but for what the test host changes: the model's
    # path, the compile caches' root (both in the directory it shares with this machine's engine), the
    # container's name (and with it its socket's directory), and the image tag (the golden uses a placeholder; the
    # caches' path carries it).
    planned = plan["container_spec"]
    golden = json.loads((FIXTURES / fixture / "container-spec.golden.json").read_text())
    planned_key, golden_key = (i.rsplit("/", 1)[-1].replace(":", "_") for i in (planned["image"], golden["image"]))
    planned["image"] = golden["image"]
    planned["volumes"] = [
        v.replace(f"{share}/models/", "/srv/models/")
        .replace(f"{share}/cache/{name}/", f"/var/lib/refdeploy/cache/{golden['name']}/")
        .replace(f"/{planned_key}:", f"/{golden_key}:")
        .replace(f"/var/lib/refdeploy/api/{name}:", f"/var/lib/refdeploy/api/{golden['name']}:")
        for v in planned["volumes"]
    ]
    # No port and no network, as on every host (vLLM on its unix socket).
    assert planned["name"] == name and "published_ports" not in planned and planned["network_mode"] == "none"
    planned["name"] = golden["name"]
    # Docker's healthcheck grace is the plan's start-up bound, from the model's size on this host (the test host
    # serves the tiny model); the golden is the class's spec before the bound is set (serving/plan/gpu_plan.py).
    assert planned["healthcheck"]["start_period"] == f"{plan['health_timeout_s']}s"
    planned["healthcheck"]["start_period"] = golden["healthcheck"]["start_period"]
    for spec in (planned, golden):
        spec["labels"].pop("org.refdeploy.spec-sha256")
        spec["labels"]["org.refdeploy.profile"] = golden["labels"]["org.refdeploy.profile"]
    assert planned == golden


def _check_status(inv: Path, host: str, name: str) -> None:
    # status: the running container is the plan's (its digest), and the stand-in is named.
    status = make("status", f"INVENTORY={inv}", f"HOST={host}")
    assert status.rc == 0, status.output[-3000:]
    out = _flat(status.output)
    assert f"container {name}: running" in out and "health: 200" in out and "spec: matches the plan" in out
    assert "STAND-IN: the CPU engine" in out


def _check_bench(inv: Path, host: str, model: str, running: dict[str, Any]) -> None:
    # bench: runs against the class's plan (refused before: the running argv carries --numa-bind*).
    bench = make("bench", f"INVENTORY={inv}", f"HOST={host}", "WORKLOAD=smoke", "RUNS=1", timeout=900)
    # The directory this bench printed; its exit agrees with its summary (ran_bench): where every measured run was a
    # buffered stream, it measured nothing valid and says so (issue 46), as this full run's 3090 host once did.
    bench_dir = ran_bench(bench)
    summary = json.loads((bench_dir / "summary.json").read_text())
    # Valid by the bench's own rules, except a stream that reached the client in bursts (a CPU client on 2 cores,
    # seen in about 1 run in 8; the bench flags it, issue 14 is its cause): that is the bench working.
    measured = [r for r in summary["runs"] if r["phase"] == "measured"]
    assert measured, summary["runs"]
    assert all(r["valid"] or all(f.startswith("buffered stream:") for f in r["flags"]) for r in measured), [
        r["flags"] for r in summary["runs"]
    ]
    bm = summary["manifest"]
    assert bm["stand_in"] and bm["server"]["spec_digest"] == running["Config"]["Labels"]["org.refdeploy.spec-sha256"]
    # The tokenizer the server uses: the PRO 6000 class's lies beside its weights, not in the model directory.
    assert bm["tokenizer"] == ("/models/moe-gguf/tokenizer" if model == "moe-gguf" else "/models/served")
    report = _flat((bench_dir / "report.txt").read_text())
    assert "STAND-IN engine ran here" in report
    # The sidecar's replayed nvidia-smi over the bench: GPU 1 of the 3090 host runs at Gen 1 x8 while busy.
    assert ("FLAG GPU 1: PCIe link at Gen 1 x8" in report) == (host == "rdtest-gpu3090"), report[-3000:]


def _check_capture(inv: Path, host: str, share: Path, model: str, gpu: dict[str, Any]) -> None:
    # capture: every rank's stacks and perf, the replayed nvidia-smi through the sidecar and the capture
    # container, the largest served file's page cache.
    capture = make("capture", f"INVENTORY={inv}", f"HOST={host}", "SECONDS=6", timeout=900)
    assert capture.rc == 0, capture.output[-5000:]
    bundle = bundle_dir(capture, host)
    index = json.loads((bundle / "bundle.json").read_text())
    workers = sorted(p["pid"] for p in index["processes"] if p["role"] == "worker")
    assert len(workers) == 2
    dumped = {d["pid"] for d in json.loads((bundle / "stacks" / "result.json").read_text())["dumps"]
              if d["status"] == "successful"}  # fmt: skip
    assert set(workers) <= dumped
    perf = [json.loads(f.read_text()) for f in sorted((bundle / "kernel").glob("perf-*.result.json"))]
    assert sorted(r["pid"] for r in perf) == workers, perf
    assert index["parts"]["samplers"]["status"] == "successful", index["parts"]["samplers"]
    gpu_samples = (bundle / "samplers" / "nvidia-smi.log").read_text().splitlines()
    assert len(gpu_samples) >= len(gpu["gpus"]), "the replayed nvidia-smi stream did not reach the capture"
    links = index["gpu_links"]
    assert links["judged"] is True
    if host == "rdtest-gpu3090":
        # GPU 1's link is replayed at Gen 1 x8 while busy: below the class's Gen 4 x16.
        assert [f.split(":")[0] for f in links["flags"]] == ["GPU 1"], links
        assert "PCIe link at Gen 1 x8" in (bundle / "summary.txt").read_text()
    else:
        assert links["flags"] == [], links
    state = json.loads((bundle / "host-state" / "after" / "host-state.json").read_text())
    assert state["page_cache"]["status"] == "successful", state["page_cache"]
    assert [f["path"] for f in state["page_cache"]["files"]] == [f"{share}/models/{model}/model.safetensors"]


def _check_probe_io(inv: Path, host: str, share: Path, model: str) -> None:
    # probe-io on the largest served file (the tiny model's weights), not a model.safetensors it may lack.
    io = make("probe-io", f"INVENTORY={inv}", f"HOST={host}", timeout=600)
    assert io.rc == 0, io.output[-4000:]
    result = json.loads((probe_io_dir(io, host) / "result.json").read_text())
    assert result["target"] == f"{share}/models/{model}/model.safetensors" and result["verdict"] == "PASS"


# --- the two hosts as one group, after the chain (a roll leaves the hosts' engine settings written, which the
# refused-deploy and restart tests above expect absent) -----------------------------------------------------

CANARY, SECOND = "rdtest-gpu3090", "rdtest-gpupro"


def _running_id(host: str) -> str:
    c = inspect(_container(host))
    assert c is not None and c["State"]["Status"] == "running", host
    return str(c["Id"])


def test_a_group_rolls_a_batch_at_a_time_and_stops_at_its_first_failure(hosts: tuple[Path, Path]) -> None:
    inv, _ = hosts
    slow = inv / "host_vars" / f"{SECOND}.yml"
    try:
        first = make("deploy", f"INVENTORY={inv}", "HOST=fleet")
        out = _flat(first.output)
        assert first.rc == 0, out[-5000:]
        assert "roll of fleet: all 2 hosts deployed and verified, one batch at a time" in out
        assert f"done (serving the new deploy): {CANARY}, {SECOND}" in out
        # Two batches: the play starts once per batch, the canary's recap line before the second's tasks.
        assert first.output.count("PLAY [Deploy the vLLM serving stack]") == 2
        assert first.output.index(f"ok: [{CANARY}]") < first.output.index(f"ok: [{SECOND}]")
        before = {h: _running_id(h) for h in (CANARY, SECOND)}

        # The second host now fails its checks before any change; every host is asked to restart its container.
        slow.parent.mkdir(exist_ok=True)
        slow.write_text(yaml.safe_dump({"probe_io_thresholds": {1: {"min_iops": 100_000_000}}}))
        second = make("deploy", f"INVENTORY={inv}", "HOST=fleet", "ANSIBLE_ARGS=-e serve_force_replace=true")
        out = _flat(second.output)
        assert second.rc != 0, out[-5000:]
        assert "roll of fleet STOPPED at the first failure: 1 done, 1 failed, 0 untouched" in out, out[-3000:]
        assert f"done (serving the new deploy): {CANARY}" in out
        assert re.search(rf"failed: {SECOND}: .*misses the I/O thresholds", out), out[-3000:]
        assert _running_id(CANARY) != before[CANARY]  # replaced: the canary serves its new container
        assert _running_id(SECOND) == before[SECOND]  # untouched by the failed deploy: still serving

        # make verify over the group, against the manifest the canary's deploy printed: a table of both hosts.
        (ref,) = {
            Path(p) for p in re.findall(r"manifest: (\S+/manifest\.json)", second.output)
            if Path(p).is_relative_to(REPO / "runs" / CANARY)
        }  # fmt: skip
        assert json.loads(ref.read_text())["container"]["id"] == _running_id(CANARY)
        verify = make("verify", f"INVENTORY={inv}", "HOST=fleet", f"REF={ref}")
        lines = verify.output.splitlines()
        assert verify.rc != 0  # the other class's host differs from the canary's reference
        head = lines.index("verify of fleet: hosts by must-match differences from the reference")
        rows = [ln.split() for ln in lines[head + 2 : head + 4]]
        # The other class's host: the canary's profile cannot even be planned there, and the table says why.
        assert [(r[0], r[1]) for r in rows] == [(SECOND, "NOT"), (CANARY, "matches")], lines[head : head + 4]
        assert f"the reference's profile rtx3090-pp3 cannot be planned on {SECOND}" in lines[head + 2]
        assert rows[1][2] == "0"
    finally:
        slow.unlink(missing_ok=True)
        gone = make("undeploy", f"INVENTORY={inv}", "HOST=fleet")
        assert gone.rc == 0, gone.output[-3000:]


# The smoke test's collectives on the 3090 host (issue 45): the plan's PP=3 ranks run for real at the stand-in's seam
# (gloo over three CPU processes in the CPU image, the per-GPU part replayed), a deploy passes them and says what they
# measured, and a replacement whose collectives fail (a rank that never joins, a bound exceeded) stops with one line
# in gloo's own words, the serving container running as before and no smoke container left. Last in this module, the
# package's last: the tests before it need the hosts as their fixture made them (no engine settings written yet).
COLLECTIVES_HOST = "rdtest-gpu3090"

# (case, the stand-in file's gpu_smoke.collectives, the words the deploy must stop with)
FAULTS = [
    (
        "absent-rank",
        {"absent_rank": 1, "bound_s": 20},
        "the collectives of TP=1 x PP=3 (gloo) failed: rank 1 was never started (an induced fault: --absent-rank); "
        "rank(s) 0, 2: ",
    ),
    (
        "bound",
        {"bound_s": 1},
        "the collectives of TP=1 x PP=3 (gloo) failed: not finished within the bound of 1 s: rank(s) 0, 1, 2 killed",
    ),
]


def test_the_collectives_pass_then_a_failing_group_stops_a_replacement_untouched(hosts: tuple[Path, Path]) -> None:
    inv = hosts[0]
    name = _container(COLLECTIVES_HOST)
    first = make("deploy", f"INVENTORY={inv}", f"HOST={COLLECTIVES_HOST}")
    out = _flat(first.output)
    assert first.rc == 0, first.output[-6000:]
    assert "a container of the CPU image (no GPUs) replays" in out and (
        "the collectives of TP=1 x PP=3 run for real with gloo over 3 CPU processes" in out
    ), out[-6000:]
    measured = out[out.index("GPU smoke test: collectives (gloo, TP=1 x PP=3): ") :].split('"')[0]
    print(measured)  # the seconds, for the record (pytest -s)
    assert "send 0->1 " in measured and "send 1->2 " in measured and "all 3 ranks in " in measured
    running = inspect(name)
    assert running is not None and running["State"]["Status"] == "running"
    try:
        for case, collectives, words in FAULTS:
            variant = Path(STAND_IN["REFDEPLOY_STAND_IN"]).with_name(f"stand-in-collectives-{case}.json")
            base = json.loads(Path(STAND_IN["REFDEPLOY_STAND_IN"]).read_text())
            variant.write_text(json.dumps({**base, "gpu_smoke": {"collectives": collectives}}))
            files = _host_files(COLLECTIVES_HOST)
            r = make_here(
                "deploy", f"INVENTORY={inv}", f"HOST={COLLECTIVES_HOST}", "ANSIBLE_ARGS=-e serve_force_replace=true",
                env={"REFDEPLOY_STAND_IN": str(variant)},
            )  # fmt: skip
            said = _flat(r.output)
            assert r.rc != 0, said[-4000:]
            assert f"GPU smoke test on {COLLECTIVES_HOST}: {words}" in said, (case, said[-4000:])
            untouched = f"The serving container was not touched: {name} on {COLLECTIVES_HOST} runs as before"
            assert untouched in said, said[-4000:]
            now = inspect(name)
            assert now is not None and now["Id"] == running["Id"] and now["State"]["Status"] == "running"
            assert inspect(f"{name}-gpu-smoke") is None
            assert _host_files(COLLECTIVES_HOST) == files
    finally:
        gone = make("undeploy", f"INVENTORY={inv}", f"HOST={COLLECTIVES_HOST}")
        assert gone.rc == 0, gone.output[-3000:]
