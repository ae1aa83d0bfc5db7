"""The benchmark protocol: the client's plan, and the bench manifest whose conditions two compared benches must share.

`make bench` runs `vllm bench serve` from the runtime image in a client container on the serving host
(images/vllm/bench_client.py drives it there); the modules around it:

- serving/config/workload.py: a workload (serving/workloads/<name>.yaml) fixes the conditions.
- here: `plan_bench` turns a workload and the deployment's plan into the client's run list (each run's exact
  `vllm bench serve` argv, or for conversations the client's own spec; its own seed), the client container's
  `docker run` argv and the bench manifest.
- serving/bench/placement.py: where the client runs (`place_client`).
- serving/bench/conditions.py: the manifest's `conditions`, which `make compare` checks.
- serving/bench/runs.py: each run read back (its requests with the source's definitions, seed 000 §1, the
  server's side, the flags that make a run untrustworthy), and a point's valid runs pooled.
- serving/bench/reference.py: the class's reference figures beside the measured ones.
- serving/bench/stats.py: `describe`, the bootstrap of the difference of medians, Welch's interval over benches.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.bench.placement import Placement, place_client
from serving.bench.workload_data import context_problem, data_file, workload_data
from serving.config.redact import redact
from serving.config.workload import Workload, intends_prefix_hits, sized_for
from serving.errors import InputError
from serving.plan.render import PROBE_USER, PROFILER_LABEL

if TYPE_CHECKING:
    from serving.plan.launch import Launch
    from serving.plan.plan import BenchTargets, Plan

SCHEMA_VERSION = 1
# Where the client container sees its scratch directory, the model (for the tokenizer) and the sidecar logs.
CLIENT_DIR = "/bench"
CLIENT_SAMPLERS_DIR = "/samplers"
RESULT_FILE = "result.json"
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"


# --- the plan ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One operating point of the workload: a concurrency cap at rate inf, or a fixed arrival rate."""

    id: str
    max_concurrency: int | None
    request_rate: float  # math.inf for "as fast as the cap allows"


def points(w: Workload) -> list[Point]:
    if w.dataset == "trace":
        # One point: the trace's own arrival times (scaled), no cap.
        return [Point("trace", None, math.inf)]
    out = [Point(f"c{c}", c, math.inf) for c in w.concurrency]
    out += [Point(f"r{r:g}", None, r) for r in w.arrival_rates]
    return out


# Where the client container finds a workload's data file (prompts, trace): copied into its scratch directory.
DATA_DIR = f"{CLIENT_DIR}/data"


def _dataset_argv(w: Workload) -> list[str]:
    """The dataset's own `vllm bench serve` arguments (vLLM 0.32: random, prefix_repetition, custom, timed_trace)."""
    if w.dataset == "random":
        return ["--dataset-name", "random", "--random-input-len", str(w.input_len),
                "--random-output-len", str(w.output_len), "--random-range-ratio", "0"]  # fmt: skip
    if w.dataset == "shared_prefix":
        assert w.input_len is not None and w.prefix_len is not None
        return ["--dataset-name", "prefix_repetition",
                "--prefix-repetition-prefix-len", str(w.prefix_len),
                "--prefix-repetition-suffix-len", str(w.input_len - w.prefix_len),
                "--prefix-repetition-num-prefixes", str(w.num_prefixes),
                "--prefix-repetition-output-len", str(w.output_len)]  # fmt: skip
    path = f"{DATA_DIR}/{Path(data_file(w) or '').name}"
    if w.dataset == "prompts":
        # The raw prompt goes out: with api chat the server applies the model's chat template, once (vLLM's custom
        # dataset would otherwise template it on the client too, and the server again).
        return ["--dataset-name", "custom", "--dataset-path", path, "--custom-output-len", str(w.output_len),
                "--skip-chat-template"]  # fmt: skip
    return ["--dataset-name", "timed_trace", "--dataset-path", path,
            "--timed-trace-sec-multiplier", repr(w.trace_time_scale),
            "--timed-trace-chunk-hash-size", str(w.trace_block_tokens)]  # fmt: skip


def bench_argv(
    w: Workload,
    point: Point,
    seed: int,
    base_url: str,
    served_name: str,
    tokenizer: str,
    result_dir: str,
    num_prompts: int | None = None,
) -> list[str]:
    """The `vllm bench serve` arguments of one run (REFERENCE §4, seed 000 §4). A trace sends its own number of
    requests (`num_prompts`, its lines)."""
    chat = w.api == "chat"
    argv = [
        "--backend", "openai-chat" if chat else "vllm",
        "--base-url", base_url,
        "--endpoint", "/v1/chat/completions" if chat else "/v1/completions",
        "--model", served_name,
        "--tokenizer", tokenizer,
        *_dataset_argv(w),
        "--num-prompts", str(num_prompts or w.num_prompts),
        "--request-rate", "inf" if math.isinf(point.request_rate) else repr(point.request_rate),
        "--burstiness", "inf" if math.isinf(w.burstiness) else repr(w.burstiness),
        "--ignore-eos",
        "--temperature", "0",
        "--seed", str(seed),
        "--percentile-metrics", PERCENTILE_METRICS,
        "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed",
        "--result-dir", result_dir,
        "--result-filename", RESULT_FILE,
        "--disable-tqdm",
    ]  # fmt: skip
    if point.max_concurrency is not None:
        argv += ["--max-concurrency", str(point.max_concurrency)]
    if w.slo is not None:
        # vLLM's own goodput beside ours (serving/bench/runs.py): the same SLO, its definitions.
        names = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2el"}
        argv += ["--goodput", *(f"{names[k]}:{v:g}" for k, v in w.slo.thresholds_ms().items())]
    return argv


# The path conversations are sent to: their history is a list of chat messages.
CHAT_ENDPOINT = "/v1/chat/completions"


def conversation_spec(
    w: Workload, point: Point, seed: int, base_url: str, served_name: str, tokenizer: str, salt: str | None
) -> dict[str, Any]:
    """What the client needs to run one conversations run (images/vllm/bench_client.py run_conversations), in
    place of a `vllm bench serve` argv: the run's seed draws the user turns with vLLM's random dataset (the
    tokenizer is the served model's, as for vllm bench serve), at most max_concurrency conversations are in
    flight, and every request carries the run's cache salt and the sampling a run's argv asks for (--ignore-eos,
    --temperature 0)."""
    return {
        "base_url": base_url,
        "endpoint": CHAT_ENDPOINT,
        "model": served_name,
        "tokenizer": tokenizer,
        "seed": seed,
        "turns": w.turns,
        "num_conversations": w.num_conversations,
        "input_len": w.input_len,
        "output_len": w.output_len,
        "think_time_s": w.think_time_s(),
        "max_concurrency": point.max_concurrency,
        "ignore_eos": True,
        "temperature": 0.0,
        "cache_salt": salt,
        "timeout_s": w.run_timeout_s,
    }


def cache_salt_for(w: Workload, unix_s: float) -> str | None:
    """The bench's prefix-cache salt: None with prefix caching off, else one no earlier bench used.

    vLLM's KV cache outlives a bench, the default deploy offers no /reset_prefix_cache (it needs
    VLLM_SERVER_DEV_MODE), and vLLM's random dataset draws each prompt as consecutive token ids from a random
    start: with this tiny model's 4096-token vocabulary, prompts of later runs started where earlier ones had,
    and 2 to 7 of 16 prompts per run were partly served from the cache (64-224 tokens of hits). A request's
    `cache_salt` keeps it off blocks cached under another salt, so each run gets its own (the bench's salt and
    the run id), and the seeds stay fixed: two benches send the same prompts.
    """
    if w.prefix_cache == "off":
        return None
    return f"refdeploy-bench-{int(unix_s)}"


def client_runs(
    w: Workload,
    base_url: str,
    served_name: str,
    tokenizer: str,
    seed_offset: int = 0,
    cache_salt: str | None = None,
    num_prompts: int | None = None,
) -> list[dict[str, Any]]:
    """Every run the client makes, in order: per point, the warm-ups then the measured runs.

    Each run has its own seed (workload seed + offset + its position) and, with a salt, its own cache_salt, so
    no run is served from blocks another run cached.
    """
    runs: list[dict[str, Any]] = []
    k = seed_offset
    for p in points(w):
        for phase, count in (("warmup", w.warmups), ("measured", w.runs)):
            for i in range(count):
                run_id = f"{p.id}-{'w' if phase == 'warmup' else 'm'}{i + 1}"
                seed = w.seed + k
                k += 1
                salt = f"{cache_salt}-{run_id}" if cache_salt else None
                run: dict[str, Any] = {
                    "id": run_id,
                    "point": p.id,
                    "phase": phase,
                    "seed": seed,
                    "cache_salt": salt,
                    "max_concurrency": p.max_concurrency,
                    "request_rate": None if math.isinf(p.request_rate) else p.request_rate,
                    "timeout_s": w.run_timeout_s,
                }
                if w.dataset == "conversations":
                    run["conversations"] = conversation_spec(w, p, seed, base_url, served_name, tokenizer, salt)
                else:
                    result_dir = f"{CLIENT_DIR}/out/runs/{run_id}"
                    argv = bench_argv(w, p, seed, base_url, served_name, tokenizer, result_dir, num_prompts)
                    run["argv"] = argv + (["--extra-body", json.dumps({"cache_salt": salt})] if salt else [])
                runs.append(run)
    return runs


def served_paths(served_dirs: Sequence[str], volumes: Sequence[str]) -> list[str]:
    """The served host directories as the client container sees them (through the serving container's volumes,
    which it mounts read-only): the files whose page-cache state each run makes and records."""
    out: list[str] = []
    for d in served_dirs:
        for v in volumes:
            host, inside = v.split(":")[:2]
            if d == host or d.startswith(host.rstrip("/") + "/"):
                out.append(inside.rstrip("/") + d[len(host.rstrip("/")) :])
                break
    return out


def _client_docker_argv(
    container: str, placement: Placement, host_out: str, volumes: Sequence[str], samplers_dir: str, image: str
) -> list[str]:
    """The client container's `docker run` argv: on the host's network, pinned to the client's CPUs, writing
    into `host_out` and reading the sidecar's logs from `samplers_dir` ("" for none).

    It sees the host's PIDs, to read the engine processes' /proc/<pid>/io around each run (the serving container's
    init and its descendants; it records nothing of any other process). It does not join the serving container's
    PID namespace: a server that dies would take the client with it (the kernel kills a namespace's processes with
    its init), and the bench would lose the record of the run it died in. It starts as root with FOWNER, SETUID
    and SETGID only: the
    served files' residency is read by a helper that keeps FOWNER (mincore(2) reports every page resident to a
    reader that neither owns a file nor holds FOWNER), and the client then drops to the runtime user, which the
    engine runs as too (so it may read its /proc/<pid>/io), with no capability left."""
    argv = [
        "docker", "run", "--rm", "--name", f"{container}-bench",
        "--network", "host",
        "--pid", "host",
        "--user", "0:0",
        "--cap-drop", "ALL", "--cap-add", "FOWNER", "--cap-add", "SETUID", "--cap-add", "SETGID",
        "--security-opt", "no-new-privileges",
        "--pids-limit", "4096",
        "--cpuset-cpus", placement.client_cpus,
        "--label", "refdeploy.role=bench-client",
        # vLLM's timed_trace seeds each trace block's tokens with hash(): fixed, so a trace sends the same prompts
        # in every run and every bench.
        "--env", "PYTHONHASHSEED=0",
        "-v", f"{host_out}:{CLIENT_DIR}",
    ]  # fmt: skip
    # The serving container's volumes, read-only: the tokenizer resolves as it does in the server.
    for v in volumes:
        argv += ["-v", v]
    if samplers_dir:
        argv += ["-v", f"{samplers_dir}:{CLIENT_SAMPLERS_DIR}:ro"]
    argv += ["--entrypoint", "python3", image, f"{CLIENT_DIR}/bench_client.py", f"{CLIENT_DIR}/plan.json"]
    return argv


def client_tool(w: Workload) -> str:
    """What sends a workload's requests: `vllm bench serve`, or for conversations (which it has no dataset for)
    the bench client's own loop around vLLM's chat request function and random dataset."""
    if w.dataset == "conversations":
        return "bench_client.py conversations with vllm bench serve's chat request function and random dataset"
    return "vllm bench serve"


def _bench_manifest(
    workload: Workload,
    plan: Plan,
    launch: Launch,
    targets: BenchTargets,
    placement: Placement,
    runs: Sequence[Mapping[str, Any]],
    gpu_class: Mapping[str, Any] | None,
    seed_offset: int,
    cache_salt: str | None,
) -> dict[str, Any]:
    """The bench manifest: what `make compare` checks as conditions (`conditions` below), and what the report
    sets beside the figures (the server's argv and digest, the client's placement, the runs' seeds)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "bench",
        "host": plan.host,
        "workload": workload.model_dump(mode="json"),
        "profile": redact(plan.profile.model_dump(mode="json")),
        "runtime_image": targets.image,
        "server": {
            "container": launch.spec["name"],
            "argv": launch.spec["command"],
            "cpuset": placement.server_cpus,
            "spec_digest": launch.spec_digest,
        },
        "stand_in": launch.stand_in,
        "client": asdict(placement),
        "tool": f"{client_tool(workload)} ({launch.images.distribution} {launch.images.version}, the runtime image)",
        "tokenizer": targets.tokenizer,
        "base_url": plan.base_url,
        "seed_offset": seed_offset,
        "cache_salt": cache_salt,
        "runs": [
            {k: r[k] for k in ("id", "point", "phase", "seed", "cache_salt", "max_concurrency", "request_rate")}
            for r in runs
        ],
        "gpu_class": dict(gpu_class) if gpu_class else None,
        # The served model as the plan read it from its files (serving/plan/model_facts.py): the diagnosis's scaling
        # rule takes the layer count and the weight bytes a decode step reads from it.
        "model": plan.model.model_dump(mode="json") if plan.model is not None else None,
        # How the client reached the server: its unix socket (vLLM has no TCP address), or through what `via` names.
        "api": {"key": bool(targets.api_key), "socket": plan.api.socket},
        # make profile: the engine ran with a profiler configured; its figures are not results (seed 000 §6).
        "profiler": (launch.spec.get("labels") or {}).get(PROFILER_LABEL),
    }


def plan_bench(
    workload: Workload,
    plan: Plan,
    host_out: str,
    host_online_cpus: str,
    server_cpuset: str,
    client_cpus: str = "",
    gpu_class: Mapping[str, Any] | None = None,
    seed_offset: int = 0,
    cache_salt: str | None = None,
    via: str = "",
    engine_pid: int | None = None,
    search: str = "",
) -> dict[str, Any]:
    """The client's plan, its container's argv and the bench manifest, from the deployment's plan.

    `plan` is the run's plan (serving/plan/plan.py; the serving container must be its launch, which the bench role
    checks first); `host_out` the host directory the client container writes into (mounted at /bench);
    `server_cpuset` what the running serving container is pinned to (docker inspect), "" for unpinned;
    `client_cpus` pins the client (bench_client_cpus), else the CPUs the NUMA plan keeps for it, else the host's
    outside the server's set. `via` ("host:port", or "https://host:port" where the deploy has a key; bench_via)
    sends the client's requests through what listens there (a proxy, a load balancer in front of the server)
    instead of to the server itself, and "front" through the deploy's front door (TLS, the key): a condition, and
    the client/server agreement checks say what it did to the stream. The client's /health, /metrics and cache
    resets go to the server itself either way. `engine_pid` is the serving container's init on the host (docker
    inspect State.Pid): the client reads its processes' read volume.
    """
    if plan.launch is None or plan.bench is None:
        raise InputError(f"the plan has no serving container on {plan.host}: " + "; ".join(plan.failures))
    targets = plan.bench
    profile = plan.profile
    container = plan.launch.spec["name"]
    workload, sized = sized_for(workload, profile.name)
    data = workload_data(workload)
    fits = context_problem(workload, data, profile.vllm.max_model_len)
    if fits:
        raise InputError(fits)
    placement = place_client(host_online_cpus, server_cpuset, client_cpus, targets.client_cpus)
    base_url, front = _via(via, plan)
    knee = search_plan(
        workload, search, base_url, targets.served_name, targets.tokenizer, seed_offset, cache_salt,
        profile.vllm.max_num_seqs,
    )  # fmt: skip
    if knee is not None:
        # The search's first load, once, as the warm-up; its measured runs are decided as it goes.
        warm = workload.model_copy(update={"runs": 0, "concurrency": [], "arrival_rates": []})
        warm = warm.model_copy(update={"concurrency": [int(knee["start"])]} if search == "concurrency"
                               else {"arrival_rates": [float(knee["start"])]})  # fmt: skip
        runs = client_runs(warm, base_url, targets.served_name, targets.tokenizer, seed_offset, cache_salt)
    else:
        runs = client_runs(
            workload, base_url, targets.served_name, targets.tokenizer, seed_offset, cache_salt, data.get("requests")
        )
    samplers_dir = f"{profile.probes.sidecar_host_dir}/{container}" if profile.probes.sidecar_samplers else ""
    image = targets.image
    client_plan = {
        "schema_version": SCHEMA_VERSION,
        # Where the requests go (through bench_via's proxy or the front door, else the server), and the server's
        # own address, which the client's /health, /metrics and cache reset always read.
        "base_url": base_url,
        "server_url": plan.base_url,
        # The server's socket, where the client sees it (among the serving container's volumes it mounts): /health,
        # /metrics and cache resets always, the requests too unless they go through the front door or a proxy.
        "server_socket": plan.api.container_socket,
        "requests_socket": None if via else plan.api.container_socket,
        # The front door's certificate, which its TLS is checked against (SSL_CERT_FILE); None: no TLS.
        "ca_file": FRONT_CERT if front else None,
        "out": f"{CLIENT_DIR}/out",
        "samplers_dir": CLIENT_SAMPLERS_DIR if samplers_dir else None,
        "prefix_cache": workload.prefix_cache,
        "page_cache": {
            "state": workload.page_cache,
            "paths": served_paths(profile.served_dirs, targets.volumes),
            "engine_pid": engine_pid,
        },
        # The user the client drops to once the residency reader has started (images/vllm/bench_client.py).
        "run_as_uid": targets.runtime_uid,
        # The client reads the key from the key file among the volumes below (images/vllm/bench_client.py).
        "api_key": targets.api_key,
        "runs": runs,
        "search": knee,
    }
    argv = _client_docker_argv(container, placement, host_out, targets.volumes, samplers_dir, image)
    manifest = _bench_manifest(
        workload, plan, plan.launch, targets, placement, runs, gpu_class, seed_offset, cache_salt
    )
    manifest["via"] = (f"front door {front['url']}" if front else via) or None
    manifest["base_url"] = base_url
    manifest["search"] = {k: v for k, v in knee.items() if k != "argv"} if knee else None
    # The workload's data file by content (a condition), its requests' expected lengths, and any resizing.
    manifest["workload_data"] = {k: v for k, v in data.items() if k not in ("path", "content")} or None
    manifest["sized"] = sized
    # Per run: the timeout, the client's start-up and a margin for metrics snapshots; a search's runs are at most
    # its max_runs.
    searched = (knee["max_runs"] + len(("knee", "above"))) * (workload.run_timeout_s + 30) if knee else 0
    timeout_s = int(sum(r["timeout_s"] + 30 for r in runs) + searched + 120)
    # A prompts file goes as it is; a trace as vLLM reads it (canonical_trace: every line with its blocks).
    name = f"data/{Path(str(data.get('path'))).name}"
    files = [{"content": data["content"], "name": name}] if "content" in data else []
    files += [{"src": data["path"], "name": name}] if data.get("path") and "content" not in data else []
    # The manifest is an artifact (manifest.json, and compare's conditions): redacted whole, as every artifact is
    # (serving/config/redact.py), not field by field: the server's argv and any URL in it are in it too.
    return {"client_plan": client_plan, "docker_argv": argv, "manifest": redact(manifest), "timeout_s": timeout_s,
            "cgroup_argv": cgroup_argv(plan.images.probes_tag, container), "files": files,
            "front_cert": front["cert"] if front else ""}  # fmt: skip


# bench_via's name for the deploy's own front door (serving/plan/frontdoor.py), and where the client finds the
# door's certificate: the bench role copies it (a public certificate, never its key) into the client's directory.
FRONT_VIA = "front"
FRONT_CERT = f"{CLIENT_DIR}/front-door-cert.pem"


def _via(via: str, plan: Plan) -> tuple[str, dict[str, Any] | None]:
    """The URL the client sends its requests to, and the front door when that is what it goes through."""
    if via == FRONT_VIA:
        if plan.front_door is None:
            raise InputError(
                f"bench_via=front: profile {plan.profile.name} has no front door: deploy a profile with "
                "front_door, or give host:port of what the client should send through"
            )
        return str(plan.front_door["url"]), plan.front_door
    tls = via.startswith("https://")
    if via and not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:\d{1,5}", via.removeprefix("https://")):
        raise InputError(
            f"bench_via={via!r}: give host:port of what the client should send through (https://host:port for a "
            "TLS proxy), or front (the front door)"
        )
    # Every request carries the key: over plain HTTP to a proxy it crosses the network readable.
    if via and not tls and plan.api.key_file is not None:
        raise InputError(
            f"bench_via={via}: this deploy has an API key, which would go to {via} over plain HTTP: use VIA=front "
            f"(the front door, TLS) or VIA=https://{via} (a proxy that terminates TLS)"
        )
    return (via if tls else f"http://{via}" if via else plan.base_url), None


# A searched run sends at least this many times the engine's max_num_seqs (serving/standalone/knee_runs.py sizes it by
# time).
MIN_BATCHES_PER_RUN = 4


def search_plan(
    w: Workload,
    kind: str,
    base_url: str,
    served_name: str,
    tokenizer: str,
    seed_offset: int = 0,
    cache_salt: str | None = None,
    max_num_seqs: int | None = None,
) -> dict[str, Any] | None:
    """What the client needs to run a knee search (serving/standalone/knee.py, serving/standalone/knee_runs.py,
    images/vllm/bench_client.py): the kind, its settings, the SLO thresholds, and the argv of a run without its
    load (the client adds --request-rate or --max-concurrency, --num-prompts for the run's duration, the seed, the
    result directory and the run's cache salt). A run sends at least the workload's num_prompts, and at least
    MIN_BATCHES_PER_RUN times the profile's max_num_seqs, so that the engine's batch fills many times over. None
    without SEARCH. Refused with one line: an unknown kind, a workload without an SLO, a trace (its timestamps set
    the load)."""
    if not kind:
        return None
    if kind not in ("rate", "concurrency"):
        raise InputError(f"SEARCH={kind}: give SEARCH=rate (arrival rate, no cap) or SEARCH=concurrency")
    if w.slo is None or not w.slo.thresholds_ms():
        raise InputError(
            f"SEARCH={kind}: workload {w.name} has no slo, and the knee is the highest load that meets one: give it "
            "e.g. slo: {ttft: 500ms, tpot: 100ms}"
        )
    if w.dataset == "trace":
        raise InputError(f"SEARCH={kind}: a trace sets its own load (its timestamps); search with another dataset")
    if w.dataset == "conversations":
        raise InputError(
            f"SEARCH={kind}: conversations run at a concurrency of conversations, and the search drives vllm bench "
            "serve's own loads: bench them at fixed levels (concurrency: [1, 4])"
        )
    if kind == "rate" and not math.isinf(w.burstiness):
        raise InputError(
            f"SEARCH=rate: workload {w.name} draws its arrivals (burstiness {w.burstiness:g}), and a run's achieved "
            "rate then misses the requested one by chance, so it cannot say whether the client kept up: search "
            "with evenly spaced arrivals (burstiness: .inf)"
        )
    rng = w.search.rate if kind == "rate" else w.search.concurrency
    if kind == "concurrency" and (rng.start != int(rng.start) or rng.limit != int(rng.limit)):
        raise InputError(f"workload {w.name}: search.concurrency start and limit are whole numbers of requests")
    if rng.start > rng.limit:
        raise InputError(f"workload {w.name}: search.{kind} start {rng.start:g} is above its limit {rng.limit:g}")
    template = bench_argv(w, Point("search", None, math.inf), 0, base_url, served_name, tokenizer, "")
    # The client sets these per run: drop the template's values.
    for name in ("--request-rate", "--seed", "--result-dir", "--num-prompts"):
        i = template.index(name)
        del template[i : i + 2]
    return {
        "kind": kind,
        "start": rng.start,
        "limit": rng.limit,
        "min_share": w.slo.min_share,
        "slo_ms": w.slo.thresholds_ms(),
        "probe_runs": w.search.probe_runs,
        # At least the workload's measured runs per bracketing load, as a plain bench has per point.
        "confirm_runs": max(w.search.confirm_runs, w.runs, 2),
        "resolution": rng.resolution
        if rng.resolution is not None
        else (w.search.resolution if kind == "rate" else None),
        "max_runs": w.search.max_runs,
        "duration_s": w.search.duration_s,
        "ramp_up_s": w.search.ramp_up_s,
        "min_completed": w.search.min_completed,
        "check_duration_s": w.search.check_duration_s,
        "min_prompts": max(w.num_prompts or 1, MIN_BATCHES_PER_RUN * (max_num_seqs or 0)),
        "seed": w.seed + seed_offset + 1000,
        # A run the cache served part of is left out by the report: the client judges it so too (not for a shared
        # prefix, whose hits are the point).
        "hits_intended": intends_prefix_hits(w.model_dump(mode="json")),
        "cache_salt": cache_salt,
        "timeout_s": w.run_timeout_s,
        "argv": template,
    }


CGROUP_MOUNT = "/host/sys/fs/cgroup"


def cgroup_argv(probes_image: str, container: str) -> list[str]:
    """The probe container that reads the serving container's cgroup and every ancestor's (probes/readers/cgroups.py),
    as JSON on stdout: run before and after the bench, so the report shows throttling, memory events and pressure
    at every level that sets a limit over the bench. vLLM's PID namespace (its PID 1 is the API server), the
    host's cgroup tree read-only, nothing else: no network, no capability, a read-only root, and the probe image's
    user, not root (/proc/<pid>/cgroup and the cgroup files it reads are world-readable: the same JSON as root's,
    measured on cgroup v1)."""
    return ["docker", "run", "--rm", "--name", f"{container}-bench-cgroup", "--user", PROBE_USER,
            "--pid", f"container:{container}",
            "--cgroupns", "host", "--network", "none", "--read-only", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--memory", "128m", "--pids-limit", "64",
            "--volume", f"/sys/fs/cgroup:{CGROUP_MOUNT}:ro", probes_image,
            "python3", "-m", "probes.readers.cgroups", "--pid", "1", "--cgroup-root", CGROUP_MOUNT]  # fmt: skip
