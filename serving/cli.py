"""refdeploy: the controller-side commands the Makefile and the playbooks call.

  refdeploy check-host --inventory DIR HOST
  refdeploy plan --profile NAME|PATH [--patches-dir DIR]
  refdeploy effective --profile NAME|PATH  < {"log": ..., "metrics": ...}
  refdeploy probe-io-argv --probes-image TAG --target F --data-dir D --out DIR [...]
  refdeploy capture-argv --probes-image TAG --container NAME --container-port N --out DIR --host H [...]
  refdeploy gpu-plan --profile NAME --class-json J --image TAG  < host readings (JSON)
  refdeploy numa-verify --plan-json J [--tp N]  < workers' /proc/<pid>/status listing
  refdeploy manifest --runs-dir DIR  < raw readings (JSON)

Each prints JSON (or nothing) on stdout and one clear line on stderr when it
refuses; exit status 2 means bad input, 1 means a check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from serving.errors import InputError

# Each command imports what it needs when it runs: the playbooks call this CLI
# several times per deploy, and pydantic and prometheus_client cost ~0.3 s to import.


def cmd_check_host(a: argparse.Namespace) -> int:
    from serving.inventory import check_host

    check_host(a.host, Path(a.inventory))
    return 0


def cmd_plan(a: argparse.Namespace) -> int:
    from serving.images import plan_images
    from serving.profile import load_profile
    from serving.render import render_container_spec, render_sidecar_spec, render_vllm_argv

    profile = load_profile(a.profile)
    images = plan_images(
        profile.image.distribution,
        profile.image.version,
        Path(a.patches_dir) if a.patches_dir else None,
        base_image=a.base_image or None,
    )
    plan = {
        "profile": profile.model_dump(mode="json"),
        "argv": render_vllm_argv(profile),
        "container_spec": render_container_spec(profile, images.runtime_tag),
        "sidecar_spec": render_sidecar_spec(profile, images.probes_tag),
        "images": asdict(images),
        "served_dirs": profile.served_dirs,
    }
    json.dump(plan, sys.stdout, indent=None if a.compact else 2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def cmd_effective(a: argparse.Namespace) -> int:
    from serving.effective import describe_mismatches, effective_config
    from serving.profile import load_profile

    profile = load_profile(a.profile)
    readings = json.load(sys.stdin)
    result = effective_config(profile, str(readings.get("log", "")), str(readings.get("metrics", "")))
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    if result["mismatches"]:
        print(
            f"effective config differs from profile {profile.name}: {describe_mismatches(result)}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_manifest(a: argparse.Namespace) -> int:
    from serving.manifest import build_manifest, build_rendered_manifest, failed_checks, new_run_dir

    raw = json.loads(Path(a.raw).read_text() if a.raw else sys.stdin.read())
    run_dir = new_run_dir(Path(a.runs_dir), raw["host"])
    raw["run_id"] = run_dir.name
    (run_dir / "raw-readings.json").write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    manifest = build_rendered_manifest(raw) if raw.get("launched") is False else build_manifest(raw)
    out = run_dir / "manifest.json"
    out.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(str(out))
    bad = failed_checks(manifest)
    if bad:
        what = "the rendered container" if manifest["kind"] == "deploy-rendered" else "the running container"
        print(f"manifest {out}: {what} differs from the plan: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


def cmd_probe_io_argv(a: argparse.Namespace) -> int:
    from serving.probe_plan import parse_thresholds, render_probe_io_argv

    argv = render_probe_io_argv(
        a.probes_image,
        a.target,
        a.data_dir or [],
        a.out,
        a.runtime,
        a.depth or [1, 64],
        parse_thresholds(json.loads(a.thresholds_json)),
    )
    json.dump(argv, sys.stdout)
    sys.stdout.write("\n")
    return 0


def cmd_capture_argv(a: argparse.Namespace) -> int:
    from serving.probe_plan import probe_parts, render_capture_argv

    argv = render_capture_argv(
        a.probes_image,
        a.container,
        a.container_port,
        a.out,
        a.seconds,
        probe_parts(a.probe),
        a.data_file or [],
        a.data_dir or [],
        a.host,
        a.perf_capability,
        a.record_seconds,
    )
    json.dump(argv, sys.stdout)
    sys.stdout.write("\n")
    return 0


def cmd_gpu_plan(a: argparse.Namespace) -> int:
    from serving.gpu_plan import class_spec_from, dumps, parse_readings_blob, plan_gpu_host
    from serving.profile import load_profile

    text = Path(a.readings).read_text() if a.readings else sys.stdin.read()
    readings = parse_readings_blob(text) if a.readings_blob else json.loads(text)
    plan = plan_gpu_host(
        load_profile(a.profile),
        class_spec_from(json.loads(a.class_json)),
        readings,
        a.image,
        data_disk=a.data_disk or None,
        engine_memlock=a.engine_memlock or None,
    )
    sys.stdout.write(dumps(plan))
    if not plan.ok:
        sys.stderr.write(plan.budget_table)
        for line in plan.failures:
            print(f"{plan.host}: {line}", file=sys.stderr)
        return 1
    return 0


def cmd_numa_verify(a: argparse.Namespace) -> int:
    from serving.numa import plan_from_json, verify_running

    problems = verify_running(plan_from_json(json.loads(a.plan_json)), sys.stdin.read(), a.tp)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="refdeploy", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("check-host", help="fail unless HOST is in the inventory")
    p.add_argument("--inventory", required=True)
    p.add_argument("host")
    p.set_defaults(func=cmd_check_host)

    p = sub.add_parser("plan", help="render a profile into argv, container spec and image plan (JSON)")
    p.add_argument("--profile", required=True)
    p.add_argument("--patches-dir")
    p.add_argument("--base-image", help="a registry base image to build on instead of the debootstrap one")
    p.add_argument("--compact", action="store_true")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("effective", help="compare the engine's effective config with the profile")
    p.add_argument("--profile", required=True)
    p.set_defaults(func=cmd_effective)

    p = sub.add_parser("probe-io-argv", help="the docker run argv of the fio probe on a host (JSON)")
    p.add_argument("--probes-image", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--data-dir", action="append")
    p.add_argument("--out", required=True, help="host directory the probe writes into")
    p.add_argument("--runtime", type=int, default=10)
    p.add_argument("--depth", type=int, action="append")
    p.add_argument("--thresholds-json", default="{}")
    p.set_defaults(func=cmd_probe_io_argv)

    p = sub.add_parser("capture-argv", help="the docker run argv of a capture or one probe beside vLLM (JSON)")
    p.add_argument("--probes-image", required=True)
    p.add_argument("--probe", default="capture", help="capture, or one part: samplers, metrics, stacks, ...")
    p.add_argument("--container", required=True, help="the serving container")
    p.add_argument("--container-port", type=int, required=True)
    p.add_argument("--out", required=True, help="host directory the probe writes into")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--data-file", action="append")
    p.add_argument("--data-dir", action="append")
    p.add_argument("--host", required=True)
    p.add_argument("--perf-capability", default="PERFMON")
    p.add_argument("--record-seconds", type=int, default=0)
    p.set_defaults(func=cmd_capture_argv)

    p = sub.add_parser("gpu-plan", help="check a GPU host against its class; NUMA plan, RAM budget, container spec")
    p.add_argument("--profile", required=True)
    p.add_argument("--class-json", required=True, help="the inventory's gpu_class mapping, as JSON")
    p.add_argument("--image", required=True, help="the runtime image tag the container would run")
    p.add_argument("--readings", help="host readings JSON (default: stdin); see serving/gpu_plan.py")
    p.add_argument("--readings-blob", action="store_true", help="readings as the gpu_facts role prints them")
    p.add_argument("--data-disk", help="the disk the data paths must sit on (e.g. nvme1n1); default: any NVMe")
    p.add_argument("--engine-memlock", help="LimitMEMLOCK the deploy gives the engine (infinity or bytes)")
    p.set_defaults(func=cmd_gpu_plan)

    p = sub.add_parser("numa-verify", help="check running workers' CPU/memory binding against the NUMA plan")
    p.add_argument("--plan-json", required=True, help="the NUMA plan (gpu-plan's numa_plan), as JSON")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (ranks per PP stage)")
    p.set_defaults(func=cmd_numa_verify)

    p = sub.add_parser("manifest", help="build and verify a deploy manifest from raw host readings")
    p.add_argument("--runs-dir", required=True, help="writes RUNS_DIR/<host>/<timestamp>/manifest.json")
    p.add_argument("--raw", help="raw readings JSON (default: stdin)")
    p.set_defaults(func=cmd_manifest)

    # Benchmarks: bench-plan, bench-report, compare (serving/bench_cli.py).
    from serving.bench_cli import register as register_bench

    register_bench(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        return int(a.func(a))
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
