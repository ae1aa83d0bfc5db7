"""The parts of a capture: one list, which probes/capture/bundle.py runs, probes/capture/cutshort.py indexes, serving's
probe plan accepts for `make probe PROBE=<part>`, and the capture role's argument spec offers (a unit test holds the
spec and the Makefile's help to it)."""

from __future__ import annotations

# Every part a capture can take, in the order a bundle lists them.
PARTS = ("samplers", "metrics", "stacks", "wchan", "perf", "hoststate", "record")
# What `make capture` takes by default; "record" (py-spy record) is asked for with --record-seconds.
DEFAULT_PARTS = ("samplers", "metrics", "stacks", "wchan", "perf", "hoststate")
# Where each part writes inside a bundle.
PART_DIRS = {
    "samplers": ["samplers"],
    "metrics": ["metrics"],
    "stacks": ["stacks"],
    "wchan": ["kernel/wchan.json", "kernel/wchan.txt"],
    "perf": ["kernel"],
    "hoststate": ["host-state"],
    "record": ["stacks"],
}
