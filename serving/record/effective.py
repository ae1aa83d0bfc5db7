"""What the engine actually resolved, compared with what the profile asked for.

Sources (REFERENCE §2): the start-up log line "Initializing a V1 LLM engine
(vX) with config: ..." and the `vllm:cache_config_info` metric.  A requested
setting that the engine reports differently fails the deploy; a setting the
engine does not report is listed as unverified, never silently passed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from probes.readers.metrics import info_labels
from serving.config.profile import Model, VllmArgs
from serving.errors import InputError
from serving.plan.served import tokenizer_path

CONFIG_LINE_RE = re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config: (?P<config>.*)$")
CACHE_INFO_METRIC = "vllm:cache_config_info"
SERVER_STARTED_RE = re.compile(r"INFO (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[[^\]]+\] Starting vLLM server on")


class EffectiveConfigError(InputError):
    pass


def find_config_line(log_text: str) -> str | None:
    """The last start-up config line in a container log (the current engine's)."""
    found = None
    for line in log_text.splitlines():
        if CONFIG_LINE_RE.search(line):
            found = line
    return found


def find_server_started(log_text: str) -> str | None:
    """Timestamp ("MM-DD HH:MM:SS", the container's clock) of the last "Starting vLLM server" line."""
    found = None
    for line in log_text.splitlines():
        m = SERVER_STARTED_RE.search(line)
        if m:
            found = m.group("ts")
    return found


def parse_config_line(line: str) -> tuple[str, dict[str, str]]:
    """(vLLM version, {key: raw value}) for the simple scalar keys of the config line."""
    m = CONFIG_LINE_RE.search(line)
    if not m:
        raise EffectiveConfigError("not a vLLM engine config line: " + line[:120])
    config = m.group("config")
    values: dict[str, str] = {}
    # Scalars are quoted strings or comma-free tokens; nested reprs (dicts,
    # dataclasses) are skipped rather than half-parsed.
    for km in re.finditer(r"(?:^|, )([a-z_]+)=('(?:[^'\\]|\\.)*'|[^,({\[]*?)(?=, [a-z_]+=|$)", config):
        key, raw = km.group(1), km.group(2)
        values[key] = raw[1:-1] if raw.startswith("'") else raw
    return m.group("version"), values


# compilation_config={'mode': <CompilationMode.NONE: 0>, ..., 'cudagraph_mode': <CUDAGraphMode.NONE: 0>, ...}:
# the two modes the engine resolved (seed 004's last step checked exactly these), as enum reprs in the config line.
_COMPILATION_KEYS = {"mode": "CompilationMode", "cudagraph_mode": "CUDAGraphMode"}


def compilation_modes(config_line: str) -> dict[str, dict[str, str] | None]:
    """{"mode": {"name": "NONE", "value": "0"}, "cudagraph_mode": {...}} as the config line reports them; None
    for a mode the line does not carry."""
    out: dict[str, dict[str, str] | None] = {}
    for key, enum in _COMPILATION_KEYS.items():
        m = re.search(rf"'{key}': <{enum}\.(?P<name>[A-Z_]+): (?P<value>[^>]+)>", config_line)
        out[key] = {"name": m.group("name"), "value": m.group("value")} if m else None
    return out


def _compilation_checks(requested: Mapping[str, Any] | None, effective: Mapping[str, Any]) -> list[Check]:
    """A check for each mode the profile's compilation_config asks for: by name ("VLLM_COMPILE", "FULL") or by
    the enum's number, as vLLM takes either."""
    checks = []
    for key in _COMPILATION_KEYS:
        if not requested or key not in requested:
            continue
        want, got = requested[key], effective.get(key)
        source = f"config_line:compilation_config.{key}"
        if got is None:
            checks.append(Check(f"compilation_config.{key}", want, None, source, "unverified"))
            continue
        ok = str(want).upper() == got["name"] if isinstance(want, str) else str(want) == got["value"]
        checks.append(Check(f"compilation_config.{key}", want, got["name"], source, "ok" if ok else "mismatch"))
    return checks


def _bool(v: str) -> bool:
    if v not in ("True", "False", "true", "false"):
        raise EffectiveConfigError(f"expected True/False, got {v!r}")
    return v in ("True", "true")


def _dtype(v: str) -> str:
    return v.removeprefix("torch.")


@dataclass(frozen=True)
class Check:
    setting: str
    requested: Any
    effective: Any
    source: str
    status: str  # "ok" | "mismatch" | "unverified"


# profile field -> [(source, key, parser)]; the first source that reports it wins.
_Parser = Callable[[str], Any]
_SOURCES: dict[str, list[tuple[str, str, _Parser]]] = {
    "max_model_len": [("config_line", "max_seq_len", int)],
    "dtype": [("config_line", "dtype", _dtype)],
    "enforce_eager": [("config_line", "enforce_eager", _bool)],
    "enable_prefix_caching": [
        ("cache_config_info", "enable_prefix_caching", _bool),
        ("config_line", "enable_prefix_caching", _bool),
    ],
    "enable_chunked_prefill": [("config_line", "enable_chunked_prefill", _bool)],
    "seed": [("config_line", "seed", int)],
    "tensor_parallel_size": [("config_line", "tensor_parallel_size", int)],
    "pipeline_parallel_size": [("config_line", "pipeline_parallel_size", int)],
    "block_size": [("cache_config_info", "block_size", int)],
    "gpu_memory_utilization": [("cache_config_info", "gpu_memory_utilization", float)],
    "kv_offloading_size": [("cache_config_info", "kv_offloading_size", float)],
    "kv_offloading_backend": [("cache_config_info", "kv_offloading_backend", str)],
}


def effective_config(
    vllm: VllmArgs, model: Model, env: Mapping[str, str], log_text: str, metrics_text: str
) -> dict[str, Any]:
    """Checks of every setting the engine was started with (the plan's launch: its vLLM arguments, model and
    environment), from the engine's log lines and its /metrics text."""
    config_line = find_config_line(log_text)
    if config_line is None:
        raise EffectiveConfigError(
            "the engine's start-up config line ('Initializing a V1 LLM engine ... with config:') "
            "is not in the container log, and no copy was kept when it was verified (log rotation drops it from a "
            "long-running engine; copies are kept since this version): replace the container to verify it afresh "
            "(docker rm -f the serving container, then make deploy)"
        )
    version, line_values = parse_config_line(config_line)
    cache_info = info_labels(metrics_text, CACHE_INFO_METRIC)
    if cache_info is None:
        raise EffectiveConfigError(f"{CACHE_INFO_METRIC} is missing from /metrics")
    sources: dict[str, dict[str, str]] = {"config_line": line_values, "cache_config_info": cache_info}

    checks: list[Check] = []
    requested_fields = vllm.model_dump(exclude_none=True, exclude={"extra_args", "compilation_config"})
    requested_fields["served_model_name"] = model.served_name
    # Served from a GGUF file, the engine's own `model` is where vLLM's GGUF plugin read the config: the
    # --tokenizer directory (vllm_gguf_plugin/plugin.py, _get_gguf_config_source, 0.0.5); else the directory.
    requested_fields["model"] = tokenizer_path(vllm.extra_args, model) if model.file else model.container_path
    extra_sources: dict[str, list[tuple[str, str, _Parser]]] = {
        "served_model_name": [("config_line", "served_model_name", str)],
        "model": [("config_line", "model", str)],
    }
    for setting, requested in sorted(requested_fields.items()):
        if setting == "dtype" and requested == "auto":
            continue
        for source, key, parse in _SOURCES.get(setting, []) + extra_sources.get(setting, []):
            raw = sources[source].get(key)
            if raw is None or raw == "None":
                continue
            effective = parse(raw)
            ok = effective == requested if not isinstance(requested, float) else abs(effective - requested) < 1e-9
            checks.append(Check(setting, requested, effective, f"{source}:{key}", "ok" if ok else "mismatch"))
            break
        else:
            checks.append(Check(setting, requested, None, "not reported by the engine", "unverified"))

    compilation = compilation_modes(config_line)
    checks += _compilation_checks(vllm.compilation_config, compilation)

    kv_space = env.get("VLLM_CPU_KVCACHE_SPACE")
    if kv_space is not None:
        raw = cache_info.get("kv_cache_memory_bytes")
        want = int(float(kv_space) * (1 << 30))
        got = int(raw) if raw not in (None, "None") else None
        checks.append(
            Check(
                "env.VLLM_CPU_KVCACHE_SPACE",
                want,
                got,
                "cache_config_info:kv_cache_memory_bytes",
                "unverified" if got is None else ("ok" if got == want else "mismatch"),
            )
        )

    return {
        "vllm_version": version,
        "config_line": config_line.strip(),
        "server_started_log_ts": find_server_started(log_text),
        "config_line_values": line_values,
        "cache_config_info": cache_info,
        # Recorded whether or not the profile asked for them: what a reader compares across deploys.
        "compilation": compilation,
        "checks": [asdict(c) for c in checks],
        "mismatches": [c.setting for c in checks if c.status == "mismatch"],
    }


def describe_mismatches(result: dict[str, Any]) -> str:
    lines = [
        f"requested {c['setting']}={c['requested']!r} but the engine runs with {c['effective']!r} ({c['source']})"
        for c in result["checks"]
        if c["status"] == "mismatch"
    ]
    return "; ".join(lines)
