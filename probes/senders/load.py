"""The requests a capture sends (`make capture WORKLOAD=...`): the workload's shape, driven through the window, each
request timed on the monotonic clock every container on the host shares.

A capture that only watches cannot show a request: "match request start and end timestamps to each log" (seed 000
§5) needs the requests themselves. So the capture can be its own client. It runs in the probe container, inside the
serving container's network namespace (`127.0.0.1:<port>`), and streams completions, so every token's arrival is
seen:

- prompts of the workload's `input_len` token ids, drawn from its seed (request i has its own stream of the seed), in
  [TOKEN_LOW, TOKEN_HIGH): ids every tokenizer has, from the 4,096 of the test model up (the probe image has no
  tokenizer; token ids make the prompt length exact without one). `max_tokens` is `output_len` and `ignore_eos` is
  set, so every request decodes the same number of tokens;
- the workload's first concurrency level: that many clients, each sending its next request when its last ends,
  from the window's opening until it closes. A request already sent when the window closes is waited for (bounded
  by the workload's `run_timeout_s`); none is sent after it.

Each request's record (requests/requests.jsonl, one JSON object a line): `t0_mono_s` (just before the request is
written), `first_token_mono_s`, `token_mono_s` (every streamed chunk that carried a choice, first included),
`end_mono_s`, the HTTP status, the usage vLLM reported, and the error where there was one. The prompt ids and the
generated text are not kept: they are the seed's and the model's, and not evidence.

This is the capture's workload, not a benchmark: `make bench` is the protocol that yields figures (warm-ups,
repeated runs, prefix cache kept out). The figures a capture prints from its requests describe its window only.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from probes.base.unix_http import VLLM_SOCKET, UnixHTTPConnection

TOKEN_LOW = 100
TOKEN_HIGH = 4000
CONNECT_TIMEOUT_S = 10.0
# A request whose streamed tokens all arrived within this of each other got them in one burst: the server sent
# them together (its API process fell behind the engine), so their arrival times say nothing of the decode.
ONE_BURST_S = 0.001
REQUESTS_FILE = "requests/requests.jsonl"
SUMMARY_FILE = "requests/requests.json"


class LoadInputError(ValueError):
    """A workload the capture cannot drive: one line saying what to give."""


@dataclass(frozen=True)
class LoadSpec:
    """What the capture sends: the workload's shape and where to send it."""

    workload: str
    model: str
    input_len: int
    output_len: int
    concurrency: int
    seed: int
    timeout_s: float
    # vLLM's unix socket inside the probe container (serving/plan/render.py API_SOCKET): vLLM has no address.
    socket: str = VLLM_SOCKET
    path: str = "/v1/completions"
    # The API key's file inside the probe container (mounted read-only); "" where the server has no key.
    api_key_file: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadSpec:
        try:
            spec = cls(**{k: data[k] for k in data if k in cls.__dataclass_fields__})
        except TypeError as e:
            raise LoadInputError(f"--workload-json: {e}") from None
        if spec.input_len < 1 or spec.output_len < 1 or spec.concurrency < 1 or spec.timeout_s <= 0:
            raise LoadInputError(
                f"--workload-json: input_len, output_len and concurrency must be at least 1 and timeout_s positive, "
                f"got {spec.input_len}, {spec.output_len}, {spec.concurrency}, {spec.timeout_s}"
            )
        return spec


@dataclass
class RequestRecord:
    id: str
    index: int
    client: int
    t0_mono_s: float
    status: int | None = None
    first_token_mono_s: float | None = None
    token_mono_s: list[float] = field(default_factory=list)
    end_mono_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and self.first_token_mono_s is not None


def prompt_ids(seed: int, index: int, length: int) -> list[int]:
    """Request `index`'s prompt: `length` token ids from its own stream of the seed."""
    rng = random.Random(f"{seed}:{index}")
    return [rng.randrange(TOKEN_LOW, TOKEN_HIGH) for _ in range(length)]


def request_body(spec: LoadSpec, index: int) -> dict[str, Any]:
    return {
        "model": spec.model,
        "prompt": prompt_ids(spec.seed, index, spec.input_len),
        "max_tokens": spec.output_len,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _read_key(path: str) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        why = f"the API key file {path} cannot be read ({e.strerror}): the capture sends no request"
        raise LoadInputError(why) from None


def send_one(spec: LoadSpec, index: int, client: int, key: str) -> RequestRecord:
    """One streamed completion, timed: its record, with the error where it failed (never raised)."""
    body = json.dumps(request_body(spec, index)).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn = UnixHTTPConnection(spec.socket, timeout=spec.timeout_s)
    rec = RequestRecord(id=f"capture-{index}", index=index, client=client, t0_mono_s=time.monotonic())
    try:
        conn.request("POST", spec.path, body=body, headers=headers)
        resp = conn.getresponse()
        rec.status = resp.status
        if resp.status != 200:
            rec.error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace').strip()}"
            return rec
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = time.monotonic()
            chunk = json.loads(data)
            if chunk.get("choices"):
                rec.token_mono_s.append(now)
                if rec.first_token_mono_s is None:
                    rec.first_token_mono_s = now
            usage = chunk.get("usage")
            if usage:
                rec.prompt_tokens = usage.get("prompt_tokens")
                rec.completion_tokens = usage.get("completion_tokens")
        if rec.first_token_mono_s is None:
            rec.error = "the stream ended without a token"
    except (OSError, http.client.HTTPException, ValueError) as e:
        rec.error = f"{type(e).__name__}: {e}"
    finally:
        rec.end_mono_s = time.monotonic()
        conn.close()
    return rec


class Load:
    """`concurrency` clients sending the workload's requests until `stop_at` (monotonic seconds), or until
    `max_requests` were sent."""

    def __init__(self, spec: LoadSpec, max_requests: int | None = None) -> None:
        self.spec = spec
        self.max_requests = max_requests
        self.key = _read_key(spec.api_key_file)
        self.records: list[RequestRecord] = []
        self._next = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.stop_at = 0.0

    def _claim(self) -> int | None:
        with self._lock:
            if time.monotonic() >= self.stop_at or (self.max_requests is not None and self._next >= self.max_requests):
                return None
            i, self._next = self._next, self._next + 1
            return i

    def _client(self, client: int) -> None:
        while (i := self._claim()) is not None:
            rec = send_one(self.spec, i, client, self.key)
            with self._lock:
                self.records.append(rec)

    def start(self, stop_at: float) -> None:
        self.stop_at = stop_at
        for c in range(self.spec.concurrency):
            t = threading.Thread(target=self._client, args=(c,), name=f"load-{c}", daemon=True)
            t.start()
            self._threads.append(t)

    def join(self) -> list[RequestRecord]:
        """Wait for the requests in flight (each bounded by the spec's timeout); the records in sending order."""
        for t in self._threads:
            t.join(self.spec.timeout_s + CONNECT_TIMEOUT_S)
        with self._lock:
            return sorted(self.records, key=lambda r: r.index)

    @property
    def sent(self) -> int:
        with self._lock:
            return self._next


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def figures(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The window's own figures from its requests: counts (and how many got all their tokens in one burst), TTFT
    and per-request TPOT (first to last token over the tokens after the first, the bench's denominator), in ms.
    The denominator is the server's token count (usage.completion_tokens), not the chunks: a server whose API
    process falls behind puts several tokens in one chunk (seen here: 32 tokens in 31 chunks)."""
    ok = [r for r in records if r.ok]
    ttft = [(r.first_token_mono_s - r.t0_mono_s) * 1000 for r in ok if r.first_token_mono_s is not None]
    tpot = []
    for r in ok:
        tokens = r.completion_tokens if r.completion_tokens else len(r.token_mono_s)
        if len(r.token_mono_s) > 1 and tokens > 1:
            tpot.append((r.token_mono_s[-1] - r.token_mono_s[0]) * 1000 / (tokens - 1))
    bursts = [r for r in ok if len(r.token_mono_s) > 1 and r.token_mono_s[-1] - r.token_mono_s[0] < ONE_BURST_S]
    out: dict[str, Any] = {
        "sent": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "one_burst": len(bursts),
    }
    for name, vals in (("ttft_ms", ttft), ("tpot_ms", tpot)):
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            v = _quantile(vals, q)
            out[f"{name}_{label}"] = None if v is None else round(v, 3)
    return out


def write_records(out: Path, spec: LoadSpec, records: Sequence[RequestRecord], sent: int) -> dict[str, Any]:
    """requests/requests.jsonl and requests/requests.json (the spec, with no key, and the figures)."""
    d = out / "requests"
    d.mkdir(parents=True, exist_ok=True)
    with (out / REQUESTS_FILE).open("w") as f:
        for r in records:
            f.write(json.dumps({**asdict(r), "ok": r.ok}) + "\n")
    spec_out = {k: v for k, v in asdict(spec).items() if k != "api_key_file"}
    spec_out["api_key"] = bool(spec.api_key_file)
    result = {
        "schema_version": 1,
        "clock": "CLOCK_MONOTONIC",
        "spec": spec_out,
        "claimed": sent,
        **figures(records),
        "file": REQUESTS_FILE,
    }
    (out / SUMMARY_FILE).write_text(json.dumps(result, indent=2) + "\n")
    return result


def in_flight_series(records: Sequence[RequestRecord], t0: float) -> list[tuple[float, int]]:
    """Requests in flight against seconds since `t0`, drawn as steps: the value before and after every start
    and end."""
    edges = sorted(
        [(r.t0_mono_s - t0, 1) for r in records] + [(r.end_mono_s - t0, -1) for r in records if r.end_mono_s]
    )
    out: list[tuple[float, int]] = [(0.0, 0)] if edges and edges[0][0] > 0 else []
    n = 0
    for t, d in edges:
        out.append((round(t, 4), n))
        n += d
        out.append((round(t, 4), n))
    return out


def read_records(out: Path) -> list[RequestRecord]:
    """The records a load process wrote (requests/requests.jsonl), in sending order."""
    fields = RequestRecord.__dataclass_fields__
    rows = [json.loads(line) for line in (out / REQUESTS_FILE).read_text().splitlines() if line.strip()]
    return [RequestRecord(**{k: v for k, v in row.items() if k in fields}) for row in rows]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m probes.senders.load --spec-json JSON --stop-at MONO_S --out DIR`: the capture's client, in its own
    process (its own interpreter lock: in the capture's, beside the samplers and the wchan sampler, a streamed token was
    read late on a busy host and the tokens of a request arrived, as timed, all at once)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m probes.senders.load", description=main.__doc__)
    ap.add_argument("--spec-json", required=True)
    ap.add_argument("--stop-at", type=float, required=True, help="CLOCK_MONOTONIC seconds after which none is sent")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    try:
        driver = Load(LoadSpec.from_json(json.loads(a.spec_json)))
    except (LoadInputError, ValueError) as e:
        print(f"load: {e}", file=sys.stderr)
        return 2
    driver.start(a.stop_at)
    records = driver.join()
    write_records(a.out, driver.spec, records, driver.sent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
