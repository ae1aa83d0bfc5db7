"""refdeploy diagnose, registered by serving/cli.py: its arguments here, its work in serving/diagnose/engine.py.

Apart from the engine, which imports the rules and pydantic (0.3 s here), so that every other refdeploy command
(make runs check-host before each operation on a host) starts without them.
"""

from __future__ import annotations

import argparse
from typing import Any


def cmd_diagnose(a: argparse.Namespace) -> int:
    from serving.diagnose.engine import cmd_diagnose as run

    return run(a)


def register(sub: Any) -> None:
    p = sub.add_parser("diagnose", help="the seed's method on a capture or bench: ranked findings, cited")
    p.add_argument("--run", default="", help="runs/<host>/<ts>[/capture|/bench], or the <ts>; default the newest")
    p.add_argument("--host", default="localhost", help="whose newest capture or bench, without --run")
    p.add_argument("--runs-dir", default="runs")
    p.set_defaults(func=cmd_diagnose)
