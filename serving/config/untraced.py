"""A profile's copy with the patched runtime's per-step rank trace off, everything else as it is.

Seed 000 §8 finds an ordering with an instrument and proves the change without it: docs/experiments/pp-receive.sh
checks the trace first, then benches copies of its A and B made here, so the comparison measures the engine as it
serves, not the engine with patch 0004 recording every step. The copy is the source file's mapping as written, with
`probes.rank_trace: false` and `-untraced` after its name (A's and B's copies differ as A and B do), loaded back as
any profile is before its path is printed.

    python -m serving.config.untraced <profile name or path>... --out <dir>     prints each copy's path
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from serving.config.profile import load_profile, resolve_profile_path
from serving.errors import InputError

SUFFIX = "-untraced"


def untraced(name_or_path: str, out_dir: Path) -> Path:
    source = resolve_profile_path(name_or_path)
    load_profile(str(source))  # a profile that does not load is named as such, before any copy
    data = yaml.safe_load(source.read_text())
    name = f"{data['name']}{SUFFIX}"
    copy = {
        **data,
        "name": name,
        "description": f"{data.get('description') or data['name']}; rank trace off",
        "probes": {**(data.get("probes") or {}), "rank_trace": False},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.yaml"
    path.write_text(f"---\n# {source.name} with probes.rank_trace off (serving/config/untraced.py)\n"
                    + yaml.safe_dump(copy, sort_keys=False))  # fmt: skip
    load_profile(str(path))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m serving.config.untraced", description=__doc__.split("\n\n")[0])
    ap.add_argument("profiles", nargs="+", help="profile names (serving/profiles/) or paths")
    ap.add_argument("--out", type=Path, required=True, help="the directory the copies are written to")
    args = ap.parse_args(argv)
    try:
        paths = [untraced(p, args.out) for p in args.profiles]
    except InputError as e:
        print(f"untraced: {e}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
