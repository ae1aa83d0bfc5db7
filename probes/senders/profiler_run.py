"""The requests of `make profile`: `POST /start_profile`, a few requests of the workload, `POST /stop_profile`.

Runs in the probe image inside vLLM's network namespace, as the capture's client does (probes/senders/load.py), against
an engine the deploy started with vLLM's profiler configured (--profiler-config). vLLM writes every rank's trace
when the profiler stops, which takes a while (seen here: 27 s on 2 busy cores for 3 requests), so the stop has
its own, longer bound.

  python -m probes.senders.profiler_run --spec-json JSON --requests N --out DIR [--stop-timeout-s 600]

Writes DIR/requests/ (as the capture does) and DIR/profile-run.json: when the profiler ran on CLOCK_MONOTONIC and
UTC, the two calls' statuses, and the requests sent. Exit 0; 1 when a call or a request failed (the file says
which); 2 on bad input.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from probes.base.unix_http import UnixHTTPConnection
from probes.senders import load

RUN_FILE = "profile-run.json"


def _post(spec: load.LoadSpec, path: str, key: str, timeout_s: float) -> dict[str, Any]:
    """One POST with no body: its status, what it said (300 characters) and how long it took."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    conn = UnixHTTPConnection(spec.socket, timeout=timeout_s)
    t0, wall = time.monotonic(), datetime.now(UTC).isoformat()
    try:
        conn.request("POST", path, body=b"", headers=headers)
        resp = conn.getresponse()
        body = resp.read(300).decode(errors="replace").strip()
        out: dict[str, Any] = {"path": path, "status": resp.status, "said": body}
    except (OSError, http.client.HTTPException) as e:
        out = {"path": path, "status": None, "said": f"{type(e).__name__}: {e}"}
    finally:
        conn.close()
    out.update(mono_s=t0, wall=wall, seconds=round(time.monotonic() - t0, 3))
    return out


def run(spec: load.LoadSpec, requests: int, out: Path, stop_timeout_s: float) -> dict[str, Any]:
    driver = load.Load(spec, max_requests=requests)
    start = _post(spec, "/start_profile", driver.key, 60.0)
    records: list[load.RequestRecord] = []
    if start["status"] == 200:
        driver.start(time.monotonic() + spec.timeout_s * requests)
        records = driver.join()
    stop = _post(spec, "/stop_profile", driver.key, stop_timeout_s) if start["status"] == 200 else None
    result = load.write_records(out, spec, records, driver.sent)
    failed = [c["path"] for c in (start, stop) if c is not None and c["status"] != 200]
    run_record = {
        "schema_version": 1,
        "clock": "CLOCK_MONOTONIC",
        "start_profile": start,
        "stop_profile": stop,
        "requests": {k: result[k] for k in ("sent", "completed", "failed", "ttft_ms_p50", "tpot_ms_p50")},
        "ok": not failed and result["failed"] == 0 and result["sent"] == requests,
        "why": "; ".join(f"{p} answered {c['status']}: {c['said']}" for p in failed for c in (start, stop)
                         if c is not None and c["path"] == p) or None,
    }  # fmt: skip
    (out / RUN_FILE).write_text(json.dumps(run_record, indent=2) + "\n")
    return run_record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probes.senders.profiler_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec-json", required=True, help="the workload's requests (probes/senders/load.py LoadSpec)")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stop-timeout-s", type=float, default=600.0)
    a = ap.parse_args(argv)
    try:
        spec = load.LoadSpec.from_json(json.loads(a.spec_json))
        if a.requests < 1:
            raise load.LoadInputError(f"REQUESTS={a.requests}: profile at least one request")
        load.Load(spec)  # the key file reads
    except (load.LoadInputError, ValueError) as e:
        print(f"profile: {e}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    r = run(spec, a.requests, a.out, a.stop_timeout_s)
    print(json.dumps(r["requests"]))
    if not r["ok"]:
        print(f"profile: {r['why'] or 'a request failed (requests/requests.jsonl)'}", file=sys.stderr)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
