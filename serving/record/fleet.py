"""A group of hosts, one batch at a time: what a roll did, and what `make verify` found on each host.

`make deploy HOST=<group>` rolls (ansible/deploy.yml: `serial`, a canary first, then batches of
refdeploy_roll_batches; `max_fail_percentage: 0`): each host is deployed and verified as a single host is
(healthy, effective config in force, every rank placed, the manifest's checks), and the first host that fails
stops the roll after its batch. The roll's summary (callback_plugins/refdeploy_fleet.py, at the end of the run,
whatever stopped it) names the hosts done, the one(s) that failed with why, and those left untouched.
`make verify HOST=<group>` ends with a table of the hosts by must-match differences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _why(msg: str) -> str:
    first = " ".join(str(msg).split())
    return first[:200] + ("..." if len(first) > 200 else "")


def roll_summary(group: str, targeted: Sequence[str], processed: Sequence[str], failed: Mapping[str, str]) -> list[str]:
    """The roll of `group` in lines: done (in roll order), failed (and why), untouched (never reached)."""
    done = [h for h in targeted if h in processed and h not in failed]
    bad = [h for h in targeted if h in failed]
    untouched = [h for h in targeted if h not in processed and h not in failed]
    head = (
        f"roll of {group}: all {len(targeted)} hosts deployed and verified, one batch at a time"
        if not bad and not untouched
        else f"roll of {group} STOPPED at the first failure: {len(done)} done, {len(bad)} failed, "
        f"{len(untouched)} untouched"
    )
    lines = [head, f"  done (serving the new deploy): {', '.join(done) or 'none'}"]
    lines += [f"  failed: {h}: {_why(failed[h])}" for h in bad] or ["  failed: none"]
    lines.append(f"  untouched (not deployed by this roll): {', '.join(untouched) or 'none'}")
    if bad:
        lines.append(
            "  a failed host keeps what it ran before (a deploy that fails its checks brings the last good "
            "container back); fix it and deploy it alone, or the group again"
        )
    return lines


def verify_table(
    group: str, targeted: Sequence[str], results: Mapping[str, Mapping[str, Any]], failed: Mapping[str, str]
) -> list[str]:
    """`make verify` over a group: one row per host, by its must-match differences (most first)."""
    rows: list[tuple[int, str, str, str, str]] = []
    for h in targeted:
        r = results.get(h)
        if r is None:
            why = _why(failed[h]) if h in failed else "not read"
            rows.append((10**9, h, "NOT READ", "-", why))
            continue
        n = int(r.get("must_match", 0))
        first = next((str(x).strip() for x in r.get("lines") or [] if "MUST-MATCH" in str(x)), "")
        rows.append((n, h, "DIFFERS" if n else "matches", str(n), first[:110] or str(r.get("path", ""))))
    rows.sort(key=lambda x: (-x[0], targeted.index(x[1])))
    width = max([len(h) for h in targeted] + [4])
    lines = [f"verify of {group}: hosts by must-match differences from the reference"]
    lines.append(f"  {'host':{width}}  {'result':9} {'must-match':>10}  first difference / where")
    lines += [f"  {h:{width}}  {res:9} {n:>10}  {first}" for _, h, res, n, first in rows]
    return lines
