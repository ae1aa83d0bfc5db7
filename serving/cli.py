"""refdeploy: the controller-side commands an operator types, and that the Makefile and playbooks call.

  refdeploy check-host --inventory DIR HOST
  refdeploy plan --profile NAME|PATH [--host H] [--readings FILE] [--gpu-class FILE]
  refdeploy bench-report BENCH_DIR
  refdeploy compare --a RUN[,RUN...] --b RUN[,RUN...] [--variable FIELD]
  refdeploy verify-ref --ref REF [--profile-out FILE]
  refdeploy diagnose [--run RUN] [--host HOST]

Each prints JSON or text on stdout and one clear line on stderr when it refuses; exit status 2 means bad
input, 1 means a check failed. The playbooks' own decisions run in-process (ansible/action_plugins,
ansible/filter_plugins) on the same package; the deploy's manifest is written by the action plugin
refdeploy_manifest (serving/record/manifest.py record_deploy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from serving.errors import InputError

# Each command imports what it needs when it runs: the playbooks call this CLI
# several times per deploy, and pydantic and prometheus_client cost ~0.3 s to import.


def cmd_check_host(a: argparse.Namespace) -> int:
    from serving.config.inventory import check_host

    check_host(a.host, Path(a.inventory))
    return 0


def cmd_plan(a: argparse.Namespace) -> int:
    from serving.config.profile import load_profile
    from serving.config.schema import read_yaml
    from serving.plan.images import read_build_files
    from serving.plan.plan import plan_from_profile
    from serving.plan.standin import load_config

    readings = json.loads(Path(a.readings).read_text()) if a.readings else None
    gpu_class = read_yaml(Path(a.gpu_class)) if a.gpu_class else None
    if isinstance(gpu_class, dict) and "gpu_class" in gpu_class:
        gpu_class = gpu_class["gpu_class"]
    plan = plan_from_profile(
        load_profile(a.profile),
        a.host,
        readings,
        gpu_class,
        patches_dir=Path(a.patches_dir) if a.patches_dir else None,
        base_image=a.base_image or None,
        stand_in=load_config(),
        build_files=read_build_files(a.wheelhouse_dir, a.extra_ca_file),
    )
    from serving.config.redact import redact

    json.dump(redact(plan.model_dump(mode="json")), sys.stdout, indent=None if a.compact else 2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


class _Parser(argparse.ArgumentParser):
    """Bad arguments in one line, as every refusal (argparse prints its usage first: five lines and more)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} ({self.prog} --help lists what each argument takes)\n")


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="refdeploy", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("check-host", help="fail unless HOST is in the inventory")
    p.add_argument("--inventory", required=True)
    p.add_argument("host")
    p.set_defaults(func=cmd_check_host)

    p = sub.add_parser("plan", help="the deployment plan of a profile on a host (JSON)")
    p.add_argument("--profile", required=True)
    p.add_argument("--host", default="localhost", help="the host it is planned for (its inventory name)")
    p.add_argument("--readings", help="the host's readings: JSON {name: text}, as refdeploy_host_readings gives")
    p.add_argument("--gpu-class", help="a YAML file with the host's gpu_class (a group_vars class.yml will do)")
    p.add_argument("--patches-dir")
    p.add_argument("--base-image", help="a registry base image to build on instead of the debootstrap one")
    p.add_argument("--wheelhouse-dir", default="", help="images_wheelhouse_dir, read here: its wheels are in the tags")
    p.add_argument("--extra-ca-file", default="", help="images_extra_ca_file, read here: it is in the tags")
    p.add_argument("--compact", action="store_true")
    p.set_defaults(func=cmd_plan)

    # Benchmarks: bench-plan, bench-report, compare (serving/bench/cli.py).
    from serving.bench.cli import register as register_bench

    register_bench(sub)
    # Correctness through the server: validate-check, validate-report (serving/record/validate.py).
    from serving.record.validate import register as register_validate

    register_validate(sub)
    # make verify's reference, checked before any host is read (serving/record/verify.py).
    from serving.record.verify import register as register_verify

    register_verify(sub)
    # make diagnose: the seed's method on one capture or bench (serving/diagnose/).
    from serving.diagnose.cli import register as register_diagnose

    register_diagnose(sub)
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
