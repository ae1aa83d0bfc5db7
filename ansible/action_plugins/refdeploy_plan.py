"""Action plugin refdeploy_plan: the run's plan (serving/plan/plan.py), made once per run on the controller.

It reads the managed host once (the module library/refdeploy_host_readings.py: the served files; for a GPU
profile also the GPU host's facts), builds the plan in-process and returns it as `refdeploy_plan`, with
the lines an operator reads first as `refdeploy_plan_summary`, and, where host_facts is true (the default), the
host's facts (ansible_hostname, ansible_processor_vcpus, ...: as the host keeps them from the last collection while
they hold, or collected by refdeploy_host_facts), and the host's tuning as the manifest
records it, `refdeploy_host_tuning` (serving/host/host_tuning.py: kernel command line, CPU governor, THP, swappiness,
NUMA balancing and on a GPU host each GPU's settings), kept out of the plan like refdeploy_host. The same read
says what is on the host now, for the roles to act on: `refdeploy_host` (Docker Engine's version or why it does
not answer, the containers on the serving port, the project's images, the serving container, one set aside and
the sidecar, whether the API key's copy and the sidecar's directory exist, and the rendered spec's sum, mode and
owner). A run that installs or restarts Docker Engine plans again after it. It is kept out of the plan, which
the manifest records and must not vary with what a deploy found there. It changes nothing. Bad input (a profile
that does not load, a GPU profile without gpu_class) fails the task with the one line that says what to fix. A
host the plan cannot deploy to is not an error here (status and capture still run there);
`refdeploy_plan.failures` says why, and the preflight role stops a deploy on them.

  - name: Plan | Build the deployment plan
    refdeploy_plan:
      profile: "{{ serving_profile }}"
      gpu_class: "{{ gpu_class | default(omit) }}"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from serving.errors import InputError


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        (
            "profile",
            "gpu_class",
            "patches_dir",
            "base_image",
            "data_disk",
            "engine_memlock",
            "api_key_file",
            "hf_token_file",
            "profiler",
            "install_toolkit",
            "wheelhouse_dir",
            "extra_ca_file",
            "read_health",
            "host_facts",
            "engine_readings",
        )
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.config.profile import load_profile
        from serving.host import gpu_facts, host_tuning
        from serving.plan import standin
        from serving.plan.describe import describe
        from serving.plan.frontdoor import front_dir
        from serving.plan.images import BuildFiles, plan_images
        from serving.plan.plan import build_plan
        from serving.plan.render import (
            API_GROUP,
            API_SOCKET,
            API_SOCKET_DIR,
            EFFECTIVE_DIR,
            PROFILERS,
            RENDERED_DIR,
            api_key_copy,
            api_socket,
            api_socket_dir,
            hf_token_copy,
            sidecar_host_dir,
        )
        from serving.plan.secret_files import hf_token_path

        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        host = str((task_vars or {}).get("inventory_hostname", ""))
        try:
            profile = load_profile(str(args["profile"]))
            profiler = str(args.get("profiler") or "") or None
            if profiler is not None and profiler not in PROFILERS:
                raise InputError(f"refdeploy_profiler={profiler}: the profilers are {', '.join(PROFILERS)}")
            mode = "gpu" if profile.gpu is not None else "cpu"
            key_file = str(args.get("api_key_file") or "") or None
            if key_file is not None:
                key_file = _api_key_path(key_file)
            hf_token_file = hf_token_path(str(args.get("hf_token_file") or ""))
            name = profile.container.name
            base_image = str(args.get("base_image") or "") or None
            # Planned twice: first for the repositories the read lists, then with what the read found of the
            # files a build copies from the host (their hashes are part of the tags).
            images = plan_images(
                profile.image.distribution, profile.image.version, _path(args.get("patches_dir")), base_image=base_image
            )
            wheelhouse_dir = str(args.get("wheelhouse_dir") or "")
            extra_ca_file = str(args.get("extra_ca_file") or "")
            # The setup module's facts, for the manifest and an image build: as the host keeps them, where what
            # they are read from is unchanged; collected (refdeploy_host_facts) only where it keeps none.
            facts = boolean(args.get("host_facts", True))
            read = self._execute_module(
                module_name="refdeploy_host_readings",
                module_args={
                    "facts_cache": FACTS_CACHE if facts else "",
                    "mode": mode,
                    "host": host,
                    "served_dirs": list(profile.served_dirs),
                    "api_key_file": key_file or "",
                    "hf_token_file": hf_token_file or "",
                    # The front door's operator key: its owner and mode are judged as the API key file's are.
                    "tls_key_file": profile.front_door.tls_key_file if profile.front_door is not None else "",
                    "query_gpu_fields": list(gpu_facts.QUERY_GPU_FIELDS),
                    "settings_fields": list(host_tuning.SETTINGS_FIELDS),
                    "read_docker": True,
                    # The one port a deploy binds: the front door's (vLLM has none).
                    "docker_port": profile.front_door.port if profile.front_door is not None else 0,
                    # By repository: a GPU test host's stand-in runs the CPU images (serving/plan/standin.py).
                    "images": sorted(
                        {t.rsplit(":", 1)[0] for t in (images.runtime_tag, images.probes_tag, images.frontdoor_tag)}
                    ),
                    # The front door's operator certificate and key too: preflight stops before any change without them.
                    "paths": [
                        api_key_copy(name),
                        hf_token_copy(name),
                        sidecar_host_dir(profile),
                        *_tls_files(profile),
                        front_dir(name),
                        f"{front_dir(name)}.auth-header",
                    ],
                    # What serve would otherwise set again on every deploy (a module run each, 0.3-0.5 s): the
                    # socket's directories and group, and the compile caches' directories of this container's
                    # profile (the one for the planned image among them: its name comes with the image tag,
                    # which depends on this read); a generated model's tree, which serve keeps root's.
                    "dirs": [API_SOCKET_DIR, api_socket_dir(name)],
                    "dir_children": [_cache_parent(profile)],
                    "groups": [API_GROUP],
                    "trees": [profile.model.host_path] if profile.model.generate != "none" else [],
                    # make status: the engine's /health on its socket, in this same read.
                    "health_socket": api_socket(name) if boolean(args.get("read_health", False)) else "",
                    # The serving container, one an interrupted replacement set aside, its samplers sidecar
                    # and its front door; and a bench client a stopped bench left.
                    "containers": [f"{name}{suffix}" for suffix in ("", "-previous", "-samplers", "-front", "-bench")],
                    "files": [f"{RENDERED_DIR}/{name}.json"],
                    # Each process's affinity as the deploy that started the container verified it (<ID>.affinity).
                    "kept_dir": EFFECTIVE_DIR,
                    # A deploy: the serving container's readings now, as serve's engine.yml reads them once it
                    # answers. Where serve keeps the container unchanged (a converged host), they are its
                    # readings, and the module run after the launch (0.7 s) is not needed.
                    "engine": {
                        "container": name,
                        "socket": API_SOCKET,
                        "kept_dir": EFFECTIVE_DIR,
                        "inside_script": INSIDE_READINGS.read_text(),
                        "inside_args": [profile.model.container_path],
                    }
                    if boolean(args.get("engine_readings", False))
                    else None,
                    # Only where the runtime build reads the wheelhouse (the CUDA one does not).
                    "wheelhouse_dir": wheelhouse_dir if images.build_args.get("WHEELHOUSE") == "on" else "",
                    "extra_ca_file": extra_ca_file,
                    "build_files_cache": BUILD_FILES_CACHE,
                    "cache_dir": profile.container.compile_cache_dir,
                },
                task_vars=task_vars,
            )
            if read.get("failed") or "readings" not in read:
                said = str(read.get("msg") or "no result").strip()[-400:]
                return {**result, "failed": True, "msg": f"reading {host} for the plan failed: {said}"}
            if facts and not read.get("host_facts_cached"):
                # Kept for the next deploy, but not by a run in check mode (the read itself runs in it, for real).
                keep = "" if (task_vars or {}).get("ansible_check_mode") else FACTS_CACHE
                got = self._execute_module(
                    module_name="refdeploy_host_facts", module_args={"cache": keep}, task_vars=task_vars
                )
                if got.get("failed") or "host_facts" not in got:
                    said = str(got.get("msg") or "no result").strip()[-400:]
                    return {**result, "failed": True, "msg": f"reading {host}'s facts failed: {said}"}
                read["host_facts"] = got["host_facts"]
            found = read.get("build_files") or {}
            if found.get("extra_ca_missing"):
                raise InputError(
                    f"images_extra_ca_file {extra_ca_file} is not a file on {host}: set it to the CA bundle the "
                    'image builds must trust, or to "" for none'
                )
            files = BuildFiles(
                dict(found.get("wheelhouse") or {}), found.get("extra_ca_sha256") or BuildFiles().extra_ca_sha256
            )
            images = plan_images(
                profile.image.distribution,
                profile.image.version,
                _path(args.get("patches_dir")),
                base_image=base_image,
                build_files=files,
            )
            plan = build_plan(
                profile,
                host,
                images,
                {str(k): str(v) for k, v in read["readings"].items()},
                args.get("gpu_class") or None,
                data_disk=str(args.get("data_disk") or "") or None,
                engine_memlock=str(args.get("engine_memlock") or "") or None,
                stand_in=standin.load_config(),
                api_key_file=key_file,
                hf_token_file=hf_token_file,
                profiler=profiler,
                install_toolkit=boolean(args.get("install_toolkit", False)),
                images_present=list((read.get("host_state") or {}).get("images_present") or []),
            )
        except InputError as e:
            return {**result, "failed": True, "msg": str(e)}
        # The host's facts come with the plan's read (the module's host_facts): a playbook needs no gather_facts.
        # The plan and the readings are not facts: Ansible deep-copies a host's facts twice for every task it
        # runs (VariableManager.get_vars: namespace_facts and clean_facts), and these are ~100 KB. The role keeps
        # them with set_fact (tasks/read.yml), whose variables are not copied per task.
        result.update(
            changed=False,
            ansible_facts=dict(read.get("host_facts") or {}),
            refdeploy_plan=plan.model_dump(mode="json"),
            refdeploy_plan_summary=describe(plan),
            refdeploy_host=read.get("host_state") or {},
            refdeploy_host_tuning=read.get("tuning"),
            refdeploy_engine_read=read.get("engine"),
        )
        if plan.api.secret_env or result["refdeploy_engine_read"] is not None:
            # The launch spec carries them to Docker, and the engine's readings the container's environment; -v
            # output must not (serving/config/redact.py).
            result["_ansible_no_log"] = True
        return result


# What serve's engine.yml runs inside the serving container (lookup of the same file there).
INSIDE_READINGS = Path(__file__).resolve().parents[2] / "serving" / "standalone" / "inside_readings.py"

# The host's facts as refdeploy_host_facts collected them, kept while what they are read from is unchanged
# (module_utils/refdeploy_facts_cache.py): root's, beside the state the deploy keeps.
FACTS_CACHE = "/var/lib/refdeploy/host-facts.json"

# The host's cache of its wheelhouse's hashes, by size and mtime (refdeploy_host_readings build_files): root's,
# beside the state the deploy keeps, not in /var/lib/refdeploy/cache, which vLLM's user owns.
BUILD_FILES_CACHE = "/var/lib/refdeploy/build-files.json"


def _cache_parent(profile: Any) -> str:
    """The directory holding the profile's compile caches, one per image (serving/plan/render.py compile_cache_dir)."""
    from serving.plan.render import compile_cache_dir

    return compile_cache_dir(profile, "-").rsplit("/", 1)[0]


def _tls_files(profile: Any) -> list[str]:
    """The operator's certificate and key of the profile's front door (none for a generated pair, or no door)."""
    fd = profile.front_door
    return [f for f in (fd.tls_cert_file, fd.tls_key_file) if f] if fd is not None else []


def _api_key_path(value: str) -> str:
    from serving.config.profile import check_path

    try:
        return check_path(value)
    except ValueError as e:
        raise InputError(f"refdeploy_api_key_file: {e}") from None


def _path(value: Any) -> Any:
    from pathlib import Path

    return Path(str(value)) if value else None
