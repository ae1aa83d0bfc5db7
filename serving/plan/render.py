"""Render a profile into the exact vLLM argv and the container spec.

Both are pure functions of the profile (and the image reference), so what will
run on a host can be reviewed, diffed and tested without touching one.  The
container spec uses the option names of community.docker.docker_container.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from serving.config.profile import Profile
from serving.config.redact import API_KEY_MOUNT, HF_TOKEN_MOUNT, HF_TOKEN_PATH

# Order in which known vLLM arguments appear on the command line (stable argv).
_ARG_ORDER = (
    "dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "seed",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "distributed_executor_backend",
    "gpu_memory_utilization",
    "kv_offloading_size",
    "kv_offloading_backend",
    "compilation_config",
)
# Boolean options that vLLM declares with argparse.BooleanOptionalAction
# (--flag / --no-flag); enforce_eager is a plain store_true flag.
_BOOL_OPTIONAL = ("enable_prefix_caching", "enable_chunked_prefill")
_STORE_TRUE = ("enforce_eager",)

SPEC_LABEL = "org.refdeploy.spec-sha256"
SIDECAR_OF_LABEL = "org.refdeploy.sidecar-of"
PROFILE_LABEL = "org.refdeploy.profile"
# On a container the test seam started in place of the planned one (serving/plan/standin.py).
STAND_IN_LABEL = "org.refdeploy.stand-in"
# Told to the probe containers: they were given the GPUs (nvidia-smi must then run), and which.
GPU_ACCESS_ENV = "REFDEPLOY_GPU_ACCESS"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def render_vllm_argv(profile: Profile) -> list[str]:
    """The argv the container runs: `vllm serve MODEL --host ... [args]`."""
    args = profile.vllm
    argv = [
        "vllm",
        "serve",
        profile.model.served_path,
        # A unix socket, not a TCP port: API_SOCKET_DIR says why.
        "--uds",
        API_SOCKET,
        "--served-model-name",
        profile.model.served_name,
    ]
    for name in _ARG_ORDER:
        value = getattr(args, name)
        if value is None:
            continue
        if isinstance(value, dict):
            rendered = json.dumps(value, sort_keys=True, separators=(",", ":"))
        else:
            rendered = str(value)
        argv += [_flag(name), rendered]
    for name in _BOOL_OPTIONAL:
        value = getattr(args, name)
        if value is not None:
            argv.append(_flag(name) if value else "--no-" + _flag(name)[2:])
    for name in _STORE_TRUE:
        if getattr(args, name):
            argv.append(_flag(name))
    argv += list(args.extra_args)
    return argv


def spec_digest(spec: dict[str, Any]) -> str:
    """sha256 of the spec without its labels: equal digests mean an identical container."""
    body = {k: v for k, v in spec.items() if k != "labels"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def render_container_spec(profile: Profile, image: str) -> dict[str, Any]:
    """Parameters for community.docker.docker_container that run the profile. It publishes nothing, whatever
    preflight said: vLLM has its socket only (API_SOCKET_DIR)."""
    c = profile.container
    spec: dict[str, Any] = {
        "name": c.name,
        "image": image,
        "entrypoint": ["/bin/sh", "-c", entrypoint_script(api_key=False), ENTRYPOINT_NAME],
        "command": render_vllm_argv(profile),
        # The caches' places first, so that a profile that names its own keeps it.
        "env": dict(sorted({**CACHE_ENV, **SOCKET_ENV, **profile.env}.items())),
        "volumes": [
            f"{profile.model.host_path}:{profile.model.container_path}:ro",
            f"{compile_cache_dir(profile, image)}:{CACHE_MOUNT}",
            f"{api_socket_dir(c.name)}:{API_SOCKET_MOUNT}",
        ],
        "shm_size": c.shm_size,
        "ulimits": [f"{name}:{u.soft}:{u.hard}" for name, u in sorted(c.ulimits.items())],
        "restart_policy": c.restart_policy,
        # Docker's own health state is what the deploy waits on: it sees a
        # crashed engine at once, where polling the port only times out.
        "healthcheck": {
            "test": [
                "CMD",
                "curl",
                "-fsS",
                "-o",
                "/dev/null",
                "--unix-socket",
                API_SOCKET,
                f"{SOCKET_URL}/health",
            ],
            "interval": "5s",
            "timeout": "5s",
            "retries": 3,
            # The plan's start-up bound replaces it (with_start_period): a Docker that calls an engine unhealthy
            # before the deploy gives up on it would restart it under the deploy's wait.
            "start_period": "10m",
        },
    }
    if c.cpuset_cpus is not None:
        spec["cpuset_cpus"] = c.cpuset_cpus
    if c.cpuset_mems is not None:
        spec["cpuset_mems"] = c.cpuset_mems
    if c.memory is not None:
        spec["memory"] = c.memory
        # No swap beyond the memory limit: a serving process that swaps is a
        # slow process nobody asked for.
        spec["memory_swap"] = c.memory
    spec.update(least_privilege(profile))
    spec["labels"] = {PROFILE_LABEL: profile.name, SPEC_LABEL: spec_digest(spec)}
    return spec


# The serving container's bounds beyond its resources. Capabilities: none. The engine runs as the image's user
# (RUNTIME_UID, not root), so Docker's default capabilities were only in its bounding set, never effective (a
# running CPU engine here: CapEff 0 in every process); its socket, numactl/--cpuset and its own caches need none.
# The one a GPU plan adds back is SYS_NICE where vLLM binds workers with numactl (serving/plan/gpu_plan.py):
# Docker's seccomp profile allows set_mempolicy and mbind only to a container granted it. no-new-privileges:
# nothing in the image may gain one through a setuid or file-capability binary. No network at all (network_mode
# none: a loopback interface only), and vLLM on a unix socket (API_SOCKET_DIR).
SERVING_CAP_DROP = ["ALL"]
SERVING_SECURITY_OPTS = ["no-new-privileges"]
# pids.max counts threads. A running cpu-tiny engine here held 72 (the API server 10, the engine core 15, the
# worker 46); a GPU worker adds its CUDA, NCCL and compile threads, and torch.compile's workers are processes of
# their own. 4096, or 1024 a rank where there are more than four: some 50x the CPU engine's count, and a bound on a
# fork loop long before the host's pid space (4194304) is spent.
PIDS_LIMIT_MIN = 4096
PIDS_PER_RANK = 1024

# vLLM listens on a unix socket (vLLM's --uds), in a container with no network (issue 46). Its API (the /v1 routes
# its key guards, and /pause, /abort_requests, /tokenize, /invocations, /start_profile and /metrics, which it does
# not) is then reachable by no address: not from a neighbour that routes to a container subnet through the host
# (Docker Engines before 28 forward such traffic to a published port's container whatever its host IP: moby issue
# 48724), not from another local user or a host-network container on the host's loopback, and not from another
# container. The socket's directory is the access list: API_SOCKET_DIR/<container>, owned by the runtime user (vLLM
# makes and, on a restart, replaces the socket in it) and the group API_GID, mode 2750 (setgid: the socket takes
# the directory's group); vLLM makes the socket 0770 (the entrypoint's umask 0007). So the engine's user, members
# of API_GID (the front door's nginx, serving/plan/frontdoor.py, and nothing else) and root reach it: the
# operator's own tools (`make status`, the bench client as the runtime user, the probes, `curl --unix-socket`
# as root) and the front door, and nobody else. The serve role makes the group (refdeploy-api) with this gid, so
# the host has no other group of that number.
API_GID = 10002
API_GROUP = "refdeploy-api"
API_SOCKET_DIR = "/var/lib/refdeploy/api"
API_SOCKET_MOUNT = "/run/refdeploy/api"
API_SOCKET = f"{API_SOCKET_MOUNT}/vllm.sock"
# The URL a client of the socket sends (the host part is only the Host header).
SOCKET_URL = "http://localhost"
# With no network, vLLM's guess of the host's address (a UDP connect to a public address) fails and it warns and
# takes 0.0.0.0 for its ranks' rendezvous: the loopback address is what they share. NCCL's bootstrap sockets (a
# GPU host's ranks) go on the loopback interface too, the container's only one: named, rather than left to NCCL's
# automatic choice, which passes over lo while any other interface exists and was never run here without one.
SOCKET_ENV = {"NCCL_SOCKET_IFNAME": "lo", "VLLM_HOST_IP": "127.0.0.1"}
ENTRYPOINT_NAME = "refdeploy-entrypoint"


def api_socket_dir(container_name: str) -> str:
    """The host directory of the container's socket (API_SOCKET_DIR says who may enter it)."""
    return f"{API_SOCKET_DIR}/{container_name}"


def api_socket(container_name: str) -> str:
    """The host path of the container's socket: what the host's own tools connect to."""
    return f"{api_socket_dir(container_name)}/{API_SOCKET.rsplit('/', 1)[1]}"


def least_privilege(profile: Profile) -> dict[str, Any]:
    """The spec's capability, privilege, pids and network settings (docker_container's names)."""
    ranks = (profile.vllm.tensor_parallel_size or 1) * (profile.vllm.pipeline_parallel_size or 1)
    return {
        "cap_drop": list(SERVING_CAP_DROP),
        "security_opts": list(SERVING_SECURITY_OPTS),
        "pids_limit": max(PIDS_LIMIT_MIN, PIDS_PER_RANK * ranks),
        "network_mode": "none",
    }


# The serving container's entrypoint, a constant (no profile value is ever put into it): the umask that makes the
# socket 0770 (API_SOCKET_DIR), and the removal of a socket its previous start left (vLLM binds the path and
# fails where it exists: a restart under restart_policy would not come up). With an API key, it also reads the key
# from the root-only file mounted at API_KEY_MOUNT into VLLM_API_KEY, so that the key is in no spec, no
# `docker inspect`, no argv and no process title; a missing or empty file stops the container (exit 78) rather
# than start an API without its key. Then it execs the vLLM argv it is given.
def entrypoint_script(api_key: bool) -> str:
    start = f"umask 0007 && rm -f {API_SOCKET} || exit 78; "
    if not api_key:
        return start + 'exec "$@"'
    return start + (
        f'k=$(cat {API_KEY_MOUNT}) && [ -n "$k" ] || '
        f'{{ echo "refdeploy: no API key in {API_KEY_MOUNT}" >&2; exit 78; }}; '
        'VLLM_API_KEY=$k exec "$@"'
    )


# The runtime image's user (images/vllm/Dockerfile USER; a unit test keeps the two equal). The engine and the
# bench client run as it, so they read the key from a copy the serve role makes of the root-only key file:
# root:RUNTIME_GID, 0440, in a directory only root can enter (SECRETS_DIR, 0700).
RUNTIME_UID = 10001
RUNTIME_GID = 10001
# The probe image's user (images/probes/Dockerfile; a unit test keeps the two equal): what the probe containers whose
# tools need no capability run as (fio's reads of `make probe-io`, the samplers sidecar), so that a flaw in a parser
# of theirs is not root's on the host's directories they write. A number of its own, neither the engine's (10001:
# it would read the engine's 0660 files and its socket) nor refdeploy-api's (10002: it would reach the socket), and
# fixed, as the roles make its host directories owned by it. The image sets no USER: the capture starts from it
# as root, the one user Docker 20.10 gives added capabilities to (it has no ambient capabilities for another).
PROBE_UID = 10003
PROBE_GID = 10003
PROBE_USER = f"{PROBE_UID}:{PROBE_GID}"
SECRETS_DIR = "/var/lib/refdeploy/secrets"
# Where the serve role writes the spec it starts from, as <container name>.json (its serve_rendered_dir default,
# which tests/unit/ansible/test_library_host_state.py holds to this): the plan's read of the host reports that file.
RENDERED_DIR = "/var/lib/refdeploy/rendered"
# What a deploy verified of the container it started, per container ID (the serve role's serve_effective_dir): its
# start-up lines (<ID>.startup) and its processes' affinity (<ID>.affinity), read back by the plan's read of the host.
EFFECTIVE_DIR = "/var/lib/refdeploy/effective"


# The compiled artefacts of a start (torch.compile/inductor's FX graph and kernel caches, Triton's kernels, vLLM's
# own compile cache) on a host volume, one per container, profile and image: a replacing deploy, `make profile`
# and each step of `make validate` reuse them instead of compiling again. Every one of these caches keys its
# entries on what it compiled (graph, shapes, torch and vLLM versions), so a changed setting misses and compiles;
# the image in the path keeps an old image's entries from being read by a new one, and the profile's name keeps
# the directories of different profiles apart; the profile's container.compile_cache_dir is the root (by default
# /var/lib/refdeploy/cache). The serve role makes it the runtime image user's (0750); undeploy
# keeps it, as it keeps the images. The variables are the tools' own: vLLM's VLLM_CACHE_ROOT (vllm/envs.py),
# torch's TORCHINDUCTOR_CACHE_DIR, Triton's TRITON_CACHE_DIR.
CACHE_MOUNT = "/var/cache/refdeploy"
CACHE_ENV = {
    "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/torchinductor",
    "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
    "VLLM_CACHE_ROOT": f"{CACHE_MOUNT}/vllm",
}


def compile_cache_dir(profile: Profile, image: str) -> str:
    """The host directory of the profile's compile caches for this image: refdeploy/vllm:0.32.0-cpu-320a623327f0
    gives .../<container>/<profile>/vllm_0.32.0-cpu-320a623327f0."""
    image_key = re.sub(r"[^A-Za-z0-9._-]", "_", image.rsplit("/", 1)[-1])
    return f"{profile.container.compile_cache_dir.rstrip('/')}/{profile.container.name}/{profile.name}/{image_key}"


def cache_volume(spec: dict[str, Any]) -> tuple[str, str] | None:
    """(host directory, mount) of the spec's compile-cache volume; None for a spec without one."""
    for v in spec.get("volumes") or []:
        host, _, rest = v.partition(":")
        if rest == CACHE_MOUNT:
            return host, rest
    return None


# make profile: the engine started with a profiler configured (vLLM's --profiler-config), writing each rank's
# trace into a directory of the host that it alone writes (the runtime image's user owns it), mounted at
# PROFILER_MOUNT. The label says so on the container, and every artifact taken from it carries the condition.
PROFILERS = ("torch",)
PROFILER_LABEL = "org.refdeploy.profiler"
PROFILES_DIR = "/var/lib/refdeploy/profiles"
PROFILER_MOUNT = "/run/refdeploy/profile"


def profiler_host_dir(container_name: str) -> str:
    return f"{PROFILES_DIR}/{container_name}"


def with_profiler(spec: dict[str, Any], profiler: str) -> dict[str, Any]:
    """The spec with vLLM's profiler configured: `--profiler-config` (one trace per rank into PROFILER_MOUNT, which
    the host's profiler_host_dir backs) and the label that marks the container as profiled."""
    if profiler not in PROFILERS:
        raise ValueError(f"profiler {profiler!r}: vLLM's profilers here are {', '.join(PROFILERS)}")
    # No Python stacks (vLLM's default records them): with them, each rank of the two-rank CPU engine held about
    # 3.8 GB of trace when the profiler stopped and the kernel's OOM killer took one in its 8 GiB container (the
    # engine died); without them a rank's trace is its operators, which the summary reads.
    config = json.dumps(
        {"profiler": profiler, "torch_profiler_dir": PROFILER_MOUNT, "torch_profiler_with_stack": False},
        separators=(",", ":"),
    )
    return {
        **spec,
        "command": [*spec["command"], "--profiler-config", config],
        "volumes": [*spec["volumes"], f"{profiler_host_dir(spec['name'])}:{PROFILER_MOUNT}"],
        "labels": {**(spec.get("labels") or {}), PROFILER_LABEL: profiler},
    }


# The per-step rank trace (patch 0004): each rank's steps into a host directory the runtime image's user alone writes,
# mounted at RANK_TRACE_MOUNT; the capture reads it from the host.
RANK_TRACE_DIR = "/var/lib/refdeploy/rank-trace"
RANK_TRACE_MOUNT = "/run/refdeploy/rank-trace"


def rank_trace_host_dir(container_name: str) -> str:
    return f"{RANK_TRACE_DIR}/{container_name}"


def with_rank_trace(spec: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """The spec with the patched runtime's rank trace on: its directory mounted and named to the workers."""
    env = {
        **spec["env"],
        "REFDEPLOY_RANK_TRACE_DIR": RANK_TRACE_MOUNT,
        "REFDEPLOY_RANK_TRACE_MAX_BYTES": str(max_bytes),
    }
    return {
        **spec,
        "env": dict(sorted(env.items())),
        "volumes": [*spec["volumes"], f"{rank_trace_host_dir(spec['name'])}:{RANK_TRACE_MOUNT}"],
    }


def api_key_copy(container_name: str) -> str:
    """Where the serve role puts the copy of the key the containers read."""
    return f"{SECRETS_DIR}/{container_name}.api-key"


def sidecar_host_dir(profile: Profile) -> str:
    """The samplers sidecar's one writable directory on the host."""
    return f"{profile.probes.sidecar_host_dir}/{profile.container.name}"


def with_api_key(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the key's copy mounted read-only and the entrypoint that hands it to vLLM."""
    return {
        **spec,
        "entrypoint": ["/bin/sh", "-c", entrypoint_script(api_key=True), ENTRYPOINT_NAME],
        "volumes": [*spec["volumes"], f"{api_key_copy(spec['name'])}:{API_KEY_MOUNT}:ro"],
    }


def gpu_access_description(gpu_access: dict[str, Any] | None) -> str:
    """What a probe container was given of the GPUs, for its skip reasons ("" for nothing)."""
    if not gpu_access:
        return ""
    if gpu_access.get("device_requests"):
        ids = ",".join(str(d) for r in gpu_access["device_requests"] for d in r.get("device_ids") or [])
        return f"--gpus device={ids},capabilities=utility (nvidia runtime)"
    if gpu_access.get("volumes"):
        return "a replayed nvidia-smi (test stand-in)"
    return ""


def with_start_period(spec: dict[str, Any], seconds: int) -> dict[str, Any]:
    """The spec with Docker's healthcheck grace equal to the plan's start-up bound (serving/plan/startup.py): the same
    seconds the deploy waits for /health, so Docker does not count failures (and `docker ps` does not say unhealthy)
    while the deploy still waits, nor wait 10 minutes where the plan says 5."""
    return {**spec, "healthcheck": {**spec["healthcheck"], "start_period": f"{seconds}s"}}


def render_sidecar_spec(
    profile: Profile, probes_image: str, gpu_access: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The samplers sidecar beside the serving container, or None when the profile runs none.

    It joins the serving container's PID namespace (pidstat sees vLLM's processes and threads), has no
    network and no capabilities (vmstat, iostat and pidstat read world-readable /proc files), runs as the probe
    image's user (PROBE_USER, not root), a read-only root, and one writable directory whose logs rotate at
    `sidecar_max_bytes`: `host_dir`, which the serve role makes the probe user's, of `host_dir_access`'s group (the
    runtime's: the bench client reads the logs as the runtime user), 0750. The serve role records the
    serving container's ID beside it and recreates the sidecar when that container is replaced. On a GPU
    profile it gets the GPUs through the nvidia runtime with the `utility` capability only, so the host
    driver's nvidia-smi runs inside (`gpu_access`, serving/plan/plan.py).
    """
    p = profile.probes
    if not p.sidecar_samplers:
        return None
    name = profile.container.name
    spec: dict[str, Any] = {
        "name": f"{name}-samplers",
        "image": probes_image,
        "command": ["python3", "-m", "probes.readers.samplers", "--sidecar", "--out", "/out",
                    "--only", ",".join(p.sidecar_samplers), "--max-bytes", str(p.sidecar_max_bytes)],
        "pid_mode": f"container:{name}",
        "network_mode": "none",
        "read_only": True,
        "tmpfs": ["/tmp:size=16m"],
        "user": PROBE_USER,
        "cap_drop": ["ALL"],
        "security_opts": ["no-new-privileges"],
        "memory": "256m",
        "pids_limit": 128,
        "volumes": [f"{sidecar_host_dir(profile)}:/out"],
        "env": {"LC_ALL": "C"},
        "restart_policy": "unless-stopped",
        "host_dir": sidecar_host_dir(profile),
        # The logs' readers besides the sidecar: the bench client, as the runtime user with no other group
        # (images/vllm/bench_client.py drop_to), and root's tools. Nobody else.
        "host_dir_access": {"owner": PROBE_UID, "group": RUNTIME_GID},
    }  # fmt: skip
    if gpu_access:
        if gpu_access.get("device_requests"):
            spec["device_requests"] = gpu_access["device_requests"]
        spec["volumes"] += gpu_access.get("volumes") or []
        spec["env"] = {**spec["env"], **(gpu_access.get("env") or {}),
                       GPU_ACCESS_ENV: gpu_access_description(gpu_access)}  # fmt: skip
    spec["labels"] = {SIDECAR_OF_LABEL: name, SPEC_LABEL: spec_digest(spec)}
    return spec


def hf_token_copy(container_name: str) -> str:
    """Where the serve role puts the directory holding the copy of the Hugging Face token the container reads."""
    return f"{SECRETS_DIR}/{container_name}.hf-token"


def with_hf_token(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the Hugging Face token's copy mounted read-only and named to huggingface_hub by HF_TOKEN_PATH
    (it reads that file at each request), never the token itself in the environment: an environment value is in
    `docker inspect`. The copy's directory is mounted, not the file, so that a new token, which the serve role writes
    by a rename, reaches the running container."""
    return {
        **spec,
        "env": dict(sorted({**spec["env"], "HF_TOKEN_PATH": HF_TOKEN_PATH}.items())),
        "volumes": [*spec["volumes"], f"{hf_token_copy(spec['name'])}:{HF_TOKEN_MOUNT}:ro"],
    }
