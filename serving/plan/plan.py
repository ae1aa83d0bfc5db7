"""The deployment plan: one typed object per run, which every playbook consumes.

`build_plan` makes it on the controller from the profile and what the host reported (the refdeploy_plan action
plugin reads the host once per run): for every profile, the files it serves; for a GPU profile also its GPUs,
NUMA topology, memory, cgroup, container runtime and the data's drive (serving/plan/gpu_plan.py decides on those).
It holds what to build (images), what the container is (container_spec, and its digest), what `docker run` is
asked to start (launch), where each worker rank must run (launch.ranks), the samplers sidecar, what the bench
client and the probes target, and every reason the host cannot be deployed to (failures).

Whether a running container is this plan's is decided in one place, one way, by `running_state`: the digest
of the spec it was started from (its label) against the digest of the plan's launch spec.

The launch is the planned container except on the GPU test hosts, where the one test seam (serving/plan/standin.py,
named by REFDEPLOY_STAND_IN) puts the CPU engine in the GPUs' place; the plan says so in `launch.stand_in`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict

from serving.config.profile import Profile
from serving.config.redact import HF_TOKEN_MOUNT, secret_env_names
from serving.config.schema import StrictModel
from serving.errors import InputError
from serving.host import numa
from serving.plan import capacity, frontdoor, gpu_plan, gpu_smoke, servability, startup
from serving.plan.capacity import Capacity
from serving.plan.gpu_smoke import GpuSmoke
from serving.plan.images import BuildFiles, ImagePlan, plan_images
from serving.plan.launch import GpuAccess, Launch, cpu_ranks, launch_spec
from serving.plan.model_facts import ModelFacts, served_model
from serving.plan.render import (
    API_GID,
    API_GROUP,
    API_SOCKET,
    CACHE_MOUNT,
    PROFILE_LABEL,
    PROFILER_LABEL,
    PROFILER_MOUNT,
    RUNTIME_GID,
    RUNTIME_UID,
    SOCKET_URL,
    SPEC_LABEL,
    STAND_IN_LABEL,
    api_key_copy,
    api_socket,
    api_socket_dir,
    cache_volume,
    hf_token_copy,
    profiler_host_dir,
    rank_trace_host_dir,
    render_container_spec,
    render_sidecar_spec,
    spec_digest,
    with_api_key,
    with_hf_token,
    with_profiler,
    with_rank_trace,
    with_start_period,
)
from serving.plan.secret_files import hf_token_failures
from serving.plan.served import largest_file, model_format_failures, model_state, parse_served_files, tokenizer_path

SCHEMA_VERSION = 1
# The sidecar is recreated when the serving container is: the ID it watches is this label.
TARGET_ID_LABEL = "org.refdeploy.target-id"


class PlanError(InputError):
    pass


class ProbeTargets(StrictModel):
    data_dirs: list[str]  # what the probes may read (read-only): the served directories
    data_file: str | None  # the largest served file: fio's target and the page-cache reading
    data_file_bytes: int | None
    data_file_note: str  # which file and why, or why there is none
    cpus: str  # the CPUs the probe containers run on; "" for the host's
    gpu_access: GpuAccess | None  # None where the profile has no GPUs


class BenchTargets(StrictModel):
    served_name: str
    tokenizer: str  # a path inside the serving container's volumes (the client mounts the same volumes)
    volumes: list[str]  # host:container:ro, as the serving container sees them
    image: str  # the runtime image the client's `vllm bench serve` comes from
    client_cpus: str  # "" for the host's CPUs outside the server's cpuset
    # The client reads the API key from the key file among its volumes (serving/config/redact.py API_KEY_MOUNT).
    api_key: bool = False
    # The runtime image's user, which the client runs as: its output directory on the host is that user's.
    runtime_uid: int = RUNTIME_UID


class Api(StrictModel):
    """Where the server's API answers and how it is protected."""

    # vLLM's unix socket on the host, and the group that may reach it (serving/plan/render.py API_SOCKET_DIR): no
    # address, no port. The host's own tools connect to `socket` as root; a container mounts `socket_dir`.
    socket: str
    socket_dir: str
    socket_gid: int = API_GID
    socket_group: str = API_GROUP
    # The same socket inside the serving container (curl there, by engine_wait.py and the engine's readings).
    container_socket: str = API_SOCKET
    # The root-only file on the managed host holding the API key (refdeploy_api_key_file); None: no key.
    # The key itself is never in the plan: the serve role copies the file to key_copy (root:RUNTIME_GID, 0440,
    # in a root-only directory), which the serving container and the bench client mount and read; with no key,
    # the serve role removes a copy left there by an earlier deploy.
    key_file: str | None
    key_copy: str
    key_gid: int = RUNTIME_GID
    # The root-only file holding the Hugging Face token (refdeploy_hf_token_file), copied like the key into the
    # directory hf_token_copy, which the container mounts (HF_TOKEN_PATH); None: no token.
    hf_token_file: str | None = None
    hf_token_copy: str = ""
    # Environment variables of the container whose values artifacts redact (serving/config/redact.py).
    secret_env: list[str]


class Profiler(StrictModel):
    kind: str
    host_dir: str
    container_dir: str


class Plan(StrictModel):
    # As Launch's: read back from JSON, its ImagePlan arrives as an object (serving/plan/launch.py).
    model_config = ConfigDict(strict=False)

    schema_version: Literal[1] = 1
    host: str
    profile: Profile
    images: ImagePlan
    # The container the profile runs on this host, and its digest; None where a GPU host cannot be placed.
    container_spec: dict[str, Any] | None
    spec_digest: str | None
    argv: list[str] | None
    launch: Launch | None
    sidecar_spec: dict[str, Any] | None
    # What clients beyond loopback reach (serving/plan/frontdoor.py plan_front_door); None: loopback only.
    front_door: dict[str, Any] | None = None
    # The URL clients of vLLM's socket send (api.socket): its host part is only the Host header.
    base_url: str
    api: Api
    # What the deploy does about the model (model_state): generate, generated, staged, absent, refused, unknown.
    model_action: str
    # The served model as its own files on the host describe it (serving/plan/model_facts.py); None where the host
    # was not read or the model is not there yet.
    model: ModelFacts | None = None
    # Free space where the deploy writes, and the model's weights and KV room per GPU (serving/plan/capacity.py).
    capacity: Capacity | None = None
    served_dirs: list[str]
    probes: ProbeTargets
    bench: BenchTargets | None
    # A GPU host's facts and decisions (serving/plan/gpu_plan.py): GPUs, NUMA plan, RAM budget, data drive, slice.
    gpu: gpu_plan.GpuFacts | None
    failures: list[str]
    ok: bool
    # make profile: the profiler the engine runs with (vLLM's --profiler-config; serving/plan/render.py
    # with_profiler) and the host directory its traces go to; None for the normal spec.
    profiler: Profiler | None = None
    # The host directory each rank's per-step trace goes to (profile probes.rank_trace); None where it is off.
    rank_trace_dir: str | None = None
    # A GPU profile's smoke test, run before the serving container is touched (serving/plan/gpu_smoke.py).
    gpu_smoke: GpuSmoke | None = None
    # The host directory of the engine's compile caches (serving/plan/render.py compile_cache_dir); the serve role
    # makes it the runtime image user's. None where nothing is launched.
    compile_cache_dir: str | None = None
    # How long a new engine has to answer /health, and the line that says why (serving/plan/startup.py); the serve
    # role's serve_health_timeout_s overrides it where set.
    health_timeout_s: int = startup.FLOOR_S
    health_timeout_line: str = ""


def parse_plan(data: Any) -> Plan:
    """A plan read back (an Ansible fact, a manifest); plain JSON types only."""
    try:
        return Plan.model_validate(json.loads(json.dumps(data)))
    except (ValueError, TypeError) as e:
        raise PlanError(f"not a refdeploy plan (schema_version {SCHEMA_VERSION}): {e}") from None


# --- where each rank runs --------------------------------------------------------------------------------------


# --- the bench client and the probes -----------------------------------------------------------------------------


def _volume_for(path: str, volumes: Sequence[str]) -> str | None:
    for v in volumes:
        host, container = v.split(":")[:2]
        if path == container or path.startswith(container.rstrip("/") + "/"):
            return host
    return None


def gpu_access_for(devices: Sequence[int]) -> GpuAccess:
    return GpuAccess(
        device_requests=[{"driver": "nvidia", "device_ids": [str(d) for d in devices], "capabilities": [["utility"]]}]
    )


# --- the plan ---------------------------------------------------------------------------------------------------


def _place_on_gpu_host(
    profile: Profile,
    host: str,
    images: ImagePlan,
    readings: Mapping[str, str],
    gpu_class: Mapping[str, Any] | None,
    data_disk: str | None,
    engine_memlock: str | None,
    install_toolkit: bool = False,
) -> tuple[dict[str, Any] | None, gpu_plan.GpuFacts | None, list[numa.RankExpectation], tuple[str, str], list[str]]:
    """A GPU profile on a host (serving/plan/gpu_plan.py): (container spec or None, the host's facts and decisions,
    the ranks, the CPUs kept for the bench client and the probes, failures)."""
    if not readings.get("hostname"):
        return None, None, [], ("", ""), [f"{host} was not read: a GPU profile is planned from the host's readings"]
    if gpu_class is None:
        # A failure, not an error: `make images` builds a GPU profile's image on any host.
        return (
            None,
            None,
            [],
            ("", ""),
            [
                f"profile {profile.name} is a GPU profile, and {host}'s inventory group sets no gpu_class: "
                "give the host's group its class (see inventory/production-example/group_vars/*/class.yml)"
            ],
        )
    gp = gpu_plan.plan_gpu_host(
        profile,
        gpu_plan.class_spec_from(gpu_class),
        readings,
        images.runtime_tag,
        data_disk=data_disk,
        engine_memlock=engine_memlock,
        cuda_runtime=images.cuda_runtime,
        install_toolkit=install_toolkit,
    )
    facts = gpu_plan.facts_of(gp, engine_memlock)
    placement = gp.placement
    if placement is None:
        return gp.container_spec, facts, [], ("", ""), gp.failures
    return (
        gp.container_spec,
        facts,
        numa.ranks_of(placement),
        (placement.client_cpus, placement.probe_cpus),
        gp.failures,
    )


def _unanswered(host: str, readings: Mapping[str, str]) -> list[str]:
    """A failure for each host command that did not answer in time while the host was read."""
    return [
        f"reading {host} for the plan: {what} did not answer; find out why on the host, then run again"
        for what in (readings.get("timeout") or "").splitlines()
        if what.strip()
    ]


def _served_state(profile: Profile, readings: Mapping[str, str]) -> tuple[str | None, int | None, str, str, list[str]]:
    """From the host's listing: the probes' target (largest served file, its size, or why none), what the
    deploy does with the model, and what is wrong with what is served."""
    files = parse_served_files(readings.get("served_files", ""))
    data_file, data_bytes, data_note = largest_file(files, profile.served_dirs)
    model_action, failures = model_state(profile, files)
    failures = model_format_failures(profile, files) + failures
    if readings.get("served_files") is None:  # planned without reading the host
        model_action, data_note = "unknown", "the host was not read"
    return data_file, data_bytes, data_note, model_action, failures


def _launch(
    profile: Profile,
    images: ImagePlan,
    spec: dict[str, Any],
    ranks: list[numa.RankExpectation],
    api_key_file: str | None,
    hf_token_file: str | None = None,
) -> Launch:
    """The planned container as docker starts it: the API key's and the HF token's mounts where there are, and its
    digest."""
    if api_key_file is not None:
        spec = with_api_key(spec)
    if hf_token_file is not None:
        spec = with_hf_token(spec)
    spec, digest = launch_spec(spec)
    return Launch(
        spec=spec,
        spec_digest=digest,
        images=images,
        vllm=profile.vllm,
        model=profile.model,
        env=dict(spec["env"]),
        ranks=ranks,
    )


def _bench_targets(profile: Profile, launch: Launch, api_key: bool, client_cpus: str) -> BenchTargets:
    return BenchTargets(
        served_name=profile.model.served_name,
        tokenizer=tokenizer_path(launch.spec["command"], launch.model),
        # The serving container's volumes, read-only, less its compile caches (the client compiles nothing).
        volumes=[
            v if v.endswith(":ro") else f"{v}:ro"
            for v in launch.spec["volumes"]
            if v.split(":")[1] not in (CACHE_MOUNT, HF_TOKEN_MOUNT)  # nor the HF token: the client downloads nothing
        ],
        api_key=api_key,
        image=launch.images.runtime_tag,
        client_cpus=client_cpus,
    )


def _tokenizer_failures(tokenizer: str, volumes: Sequence[str]) -> list[str]:
    """The bench client mounts the serving container's volumes to load the tokenizer: it must be inside one."""
    if _volume_for(tokenizer, volumes) is not None:
        return []
    return [
        f"the tokenizer {tokenizer} is not inside a volume of the serving container "
        f"({', '.join(volumes)}): put it beside the model, or mount it"
    ]


def _api(profile: Profile, api_key_file: str | None, launch: Launch | None, hf_token_file: str | None = None) -> Api:
    """Where the API answers and its key; the secrets to redact are those of the environment the container
    is started with (the launch's, a stand-in's included), the profile's where nothing is launched."""
    return Api(
        socket=api_socket(profile.container.name),
        socket_dir=api_socket_dir(profile.container.name),
        key_file=api_key_file,
        key_copy=api_key_copy(profile.container.name),
        hf_token_file=hf_token_file,
        hf_token_copy=hf_token_copy(profile.container.name),
        secret_env=secret_env_names(dict(launch.env if launch is not None else profile.env)),
    )


def build_plan(
    profile: Profile,
    host: str,
    images: ImagePlan,
    readings: Mapping[str, str] | None = None,
    gpu_class: Mapping[str, Any] | None = None,
    *,
    data_disk: str | None = None,
    engine_memlock: str | None = None,
    stand_in: Mapping[str, Any] | None = None,
    api_key_file: str | None = None,
    hf_token_file: str | None = None,
    profiler: str | None = None,
    install_toolkit: bool = False,
    images_present: Sequence[str] | None = None,
) -> Plan:
    """The plan of `profile` on `host`. `readings` are the host's (ansible/library/refdeploy_host_readings.py):
    `served_files` for every profile, the GPU host's facts for a GPU profile (see serving/plan/gpu_plan.py); None
    plans from the profile alone (no host read: a GPU profile then cannot be placed, and says so). `stand_in`
    is the test seam's configuration (serving/plan/standin.py), None in production. `api_key_file` is the root-only
    file on the host holding the API key (the host reports its owner and mode as `api_key_file`), None for no
    key. `profiler` ("torch") plans the engine with vLLM's profiler configured (make profile), None without.
    `install_toolkit`: this run may install a missing NVIDIA container toolkit (preflight_install_nvidia_toolkit,
    on a deploy). `images_present`: the repository:tags the host's engine has (None: not read), for the free space
    a build of the runtime image needs (serving/plan/capacity.py)."""
    readings = dict(readings or {})
    failures = frontdoor.api_failures(
        profile, api_key_file, readings.get("api_key_file"), readings.get("api_key_shape"), readings.get("tls_key_file")
    ) + _unanswered(host, readings)
    failures += hf_token_failures(hf_token_file, readings.get("hf_token_file"))
    served_dirs = profile.served_dirs
    data_file, data_bytes, data_note, model_action, served_failures = _served_state(profile, readings)
    model, model_failures = served_model(profile, readings.get("model_headers"))
    disk, disk_failures = capacity.disk_needs(
        profile, readings.get("df"), model_action, images_present is None or images.runtime_tag in images_present
    )
    failures += served_failures + model_failures + disk_failures
    failures += servability.runner_refusals(profile)
    gpu: gpu_plan.GpuFacts | None = None
    room: capacity.GpuRoom | None = None
    client_cpus = probe_cpus = ""
    gpu_access: GpuAccess | None = None
    spec: dict[str, Any] | None
    if profile.gpu is None:
        spec = render_container_spec(profile, images.runtime_tag)
        ranks, rank_failures = cpu_ranks(profile.vllm, profile.env, spec.get("cpuset_mems"), spec.get("cpuset_cpus"))
        failures += rank_failures
    else:
        gpu_access = gpu_access_for(profile.gpu.devices)
        spec, gpu, ranks, (client_cpus, probe_cpus), gpu_failures = _place_on_gpu_host(
            profile, host, images, readings, gpu_class, data_disk, engine_memlock, install_toolkit
        )
        failures += gpu_failures + servability.refusals(profile, model, gpu_class, servability.recorded_offer())
        room, room_failures = capacity.gpu_room(profile, model, [asdict(g) for g in gpu.gpus] if gpu else None)
        failures += room_failures
    launch: Launch | None = None
    bench: BenchTargets | None = None
    if spec is not None and profiler:
        spec = with_profiler(spec, profiler)
    if spec is not None and profile.probes.rank_trace:
        spec = with_rank_trace(spec, profile.probes.rank_trace_max_bytes)
    started = startup.plan_fields(profile, parse_served_files(readings.get("served_files", "")), gpu_class)
    if spec is not None:
        spec = with_start_period(spec, int(started["health_timeout_s"]))
    argv = list(spec["command"]) if spec is not None else None
    smoke: GpuSmoke | None = None
    if spec is not None:
        launch = _launch(profile, images, spec, ranks, api_key_file, hf_token_file)
        spec = launch.spec
        if profile.gpu is not None and gpu is not None and gpu_class is not None:
            smoke = gpu_smoke.plan_smoke(
                launch.spec, gpu.gpus, profile.gpu.devices, str(gpu_class["model_substring"]),
                profile.vllm.gpu_memory_utilization, profile.vllm.tensor_parallel_size or 1,
                profile.vllm.pipeline_parallel_size or 1,
            )  # fmt: skip
        if stand_in is not None:
            from serving.plan import standin

            launch, gpu_access = standin.stand_in(profile, launch, stand_in, host)
            smoke = standin.stand_in_smoke(smoke, launch, stand_in, host) if smoke is not None else None
            client_cpus = probe_cpus = ""
        bench = _bench_targets(profile, launch, api_key_file is not None, client_cpus)
        failures += _tokenizer_failures(bench.tokenizer, launch.spec["volumes"])
    probes = ProbeTargets(
        data_dirs=served_dirs,
        data_file=data_file,
        data_file_bytes=data_bytes,
        data_file_note=data_note,
        cpus=probe_cpus,
        gpu_access=gpu_access,
    )
    sidecar = render_sidecar_spec(
        profile, images.probes_tag, probes.gpu_access.model_dump() if probes.gpu_access else None
    )
    return Plan(
        host=host,
        profile=profile,
        images=launch.images if launch is not None else images,
        container_spec=spec,
        spec_digest=spec_digest(spec) if spec is not None else None,
        argv=argv,
        launch=launch,
        sidecar_spec=sidecar,
        base_url=SOCKET_URL,
        api=_api(profile, api_key_file, launch, hf_token_file),
        model_action=model_action,
        model=model,
        capacity=Capacity(disk=disk, gpu=room),
        served_dirs=served_dirs,
        probes=probes,
        bench=bench,
        gpu=gpu,
        failures=failures,
        ok=not failures,
        profiler=_profiler(profile, profiler) if profiler and spec is not None else None,
        rank_trace_dir=rank_trace_host_dir(profile.container.name) if profile.probes.rank_trace and spec else None,
        gpu_smoke=smoke,
        compile_cache_dir=_cache_dir(launch),
        front_door=frontdoor.plan_front_door(profile, images.frontdoor_tag, readings.get("host_addresses", "")),
        **started,
    )


def _cache_dir(launch: Launch | None) -> str | None:
    found = cache_volume(launch.spec) if launch is not None else None
    return found[0] if found is not None else None


def _profiler(profile: Profile, kind: str) -> Profiler:
    return Profiler(kind=kind, host_dir=profiler_host_dir(profile.container.name), container_dir=PROFILER_MOUNT)


def plan_from_profile(
    profile: Profile,
    host: str,
    readings: Mapping[str, str] | None = None,
    gpu_class: Mapping[str, Any] | None = None,
    *,
    patches_dir: Path | None = None,
    base_image: str | None = None,
    data_disk: str | None = None,
    engine_memlock: str | None = None,
    stand_in: Mapping[str, Any] | None = None,
    api_key_file: str | None = None,
    hf_token_file: str | None = None,
    profiler: str | None = None,
    install_toolkit: bool = False,
    build_files: BuildFiles | None = None,
) -> Plan:
    """build_plan with the profile's image plan (`build_files`: what the host's wheelhouse and CA file hold)."""
    images = plan_images(
        profile.image.distribution, profile.image.version, patches_dir, base_image=base_image, build_files=build_files
    )
    return build_plan(
        profile,
        host,
        images,
        readings,
        gpu_class,
        data_disk=data_disk,
        engine_memlock=engine_memlock,
        stand_in=stand_in,
        api_key_file=api_key_file,
        hf_token_file=hf_token_file,
        profiler=profiler,
    )


# --- is the running container this plan's? ----------------------------------------------------------------------


def running_state(
    container: Mapping[str, Any] | None, planned: Mapping[str, Any] | None, target_id: str | None = None
) -> dict[str, Any]:
    """What runs under the planned container's name, and whether it is the planned container.

    `container` is `docker container inspect` of that name (None or {} when absent), `planned` the spec the plan
    starts there (plan.launch.spec, or plan.sidecar_spec). The running container is the planned one when it
    carries the digest of that spec (SPEC_LABEL, set at its start) and runs. A sidecar must also watch the
    serving container that runs now (`target_id`, its TARGET_ID_LABEL).
    """
    c = dict(container or {})
    exists = bool(c)
    status = str((c.get("State") or {}).get("Status", "absent")) if exists else "absent"
    labels = (c.get("Config") or {}).get("Labels") or {}
    want = ((planned or {}).get("labels") or {}).get(SPEC_LABEL)
    have = labels.get(SPEC_LABEL)
    why = ""
    if planned is None:
        why = "the plan has no container for this host"
    elif not exists:
        why = "no container runs under this name"
    elif have != want:
        profile, planned_profile = labels.get(PROFILE_LABEL), ((planned or {}).get("labels") or {}).get(PROFILE_LABEL)
        why = (
            f"it runs profile {profile}, not {planned_profile}"
            if profile and planned_profile and profile != planned_profile
            else f"it was started from another spec (digest {str(have)[:12]}, the plan's is {str(want)[:12]})"
        )
    elif status != "running":
        why = f"it is {status}"
    elif target_id is not None and labels.get(TARGET_ID_LABEL) != target_id:
        why = "it watches a serving container that no longer runs"
    return {
        "exists": exists,
        "status": status,
        "running": status == "running",
        "planned": not why,
        "why": why,
        "id": c.get("Id", ""),
        "image": (c.get("Config") or {}).get("Image", ""),
        "profile": labels.get(PROFILE_LABEL, ""),
        "stand_in": labels.get(STAND_IN_LABEL, ""),
        "profiler": labels.get(PROFILER_LABEL, ""),
        "restart_count": int(c.get("RestartCount") or 0),
    }


def _where(memory: Mapping[str, Any] | None) -> str:
    """A rank's memory per node (numa_maps) for its placement line: anonymous, and its own shared (pinned) memory."""
    if not memory:
        return ""
    anon, shared = ((", ".join(f"{n} {b >> 20} MiB" for n, b in (memory.get(k) or {}).items()) or "none")
                    for k in ("anon_bytes", "shared_bytes"))  # fmt: skip
    return f" (anonymous memory {anon}; shared and pinned {shared}: {memory['outside_share']:.0%} outside its nodes)"


def verify_ranks(plan: Plan, workers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The running workers (pid, title, cpus_allowed, mems_allowed, read inside the container) against the launch's
    ranks: one record per rank for the manifest, and one line per problem."""
    if plan.launch is None:
        return {"ok": False, "ranks": [], "problems": ["the plan has no container on this host"]}
    tp = plan.launch.vllm.tensor_parallel_size or 1
    records, problems = numa.verify_ranks(plan.launch.ranks, workers, tp, plan.launch.spec.get("cpuset_cpus"))
    lines = [
        f"rank {r['rank']}: {r.get('title') or 'no worker'} (pid {r.get('pid')}) on CPUs {r.get('cpus_allowed')}, "
        f"memory nodes {r.get('mems_allowed')}{_where(r.get('memory_nodes'))}; planned CPUs "
        f"{r['expected_cpus'] or 'within the cpuset'}: " + ("as planned" if r["ok"] else "NOT as planned")
        for r in records
    ]
    return {"ok": not problems, "ranks": records, "problems": problems, "lines": lines}
