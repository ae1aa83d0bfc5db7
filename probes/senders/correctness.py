"""The fixed requests of `make validate`: what the model computes, read through the real endpoint (seed 000 §13:
"compare prompt-logprob differences old-vs-new against old-vs-old").

Runs in the probe image inside vLLM's network namespace, as the capture's client does (probes/senders/load.py). Every
request is a non-streamed `/v1/completions` at temperature 0 with token-id prompts (exact lengths without a
tokenizer; ids from probes/senders/load.py's range, drawn from a fixed seed), and asks for the prompt's logprobs and the
generated tokens' top-k logprobs (vLLM's `prompt_logprobs`, `logprobs`) and the generated ids
(`return_token_ids`). The set covers prefill and decode at two prompt lengths, first one request at a time,
then all of them at once (a batch: several concurrent requests share the engine's steps):

  python -m probes.senders.correctness --out DIR [--socket /run/refdeploy/api/vllm.sock]
      [--model NAME] [--api-key-file F]
      [--short 32] [--long 512] [--max-tokens 16] [--top-k 5]

Writes DIR/correctness.json: each request's prompt ids, per prompt position the logprob of the prompt's own token
and the top k, the generated ids and per generated position the top k. Exit 0; 1 when a request failed (the
file says which); 2 on bad input.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.base.unix_http import VLLM_SOCKET, UnixHTTPConnection
from probes.senders import load

OUT_FILE = "correctness.json"
SEED = 20261203
PROMPTS_PER_LENGTH = 2
TIMEOUT_S = 300.0


def requests_plan(short: int, long: int, max_tokens: int) -> list[dict[str, Any]]:
    """The fixed requests: two prompts at each length; sent one at a time ("sequential"), then all at once
    ("concurrent"), each set with the same prompts so a batch can be set against the lone request."""
    out: list[dict[str, Any]] = []
    for phase in ("sequential", "concurrent"):
        for length in (short, long):
            for i in range(PROMPTS_PER_LENGTH):
                index = length * 100 + i
                out.append(
                    {
                        "name": f"{phase}-len{length}-{i}",
                        "phase": phase,
                        "prompt": load.prompt_ids(SEED, index, length),
                        "max_tokens": max_tokens,
                    }
                )
    return out


def _body(req: Mapping[str, Any], model: str, top_k: int) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": req["prompt"],
        "max_tokens": req["max_tokens"],
        "temperature": 0.0,
        "ignore_eos": True,
        "logprobs": top_k,
        "prompt_logprobs": top_k,
        "return_token_ids": True,
        "seed": 0,
    }


def _tops(d: Mapping[str, Any] | None) -> dict[str, float]:
    """{token id: logprob} of one position of vLLM's prompt_logprobs ({id: {logprob, rank, decoded_token}})."""
    return {str(k): float(v["logprob"]) for k, v in (d or {}).items()}


def reduce_choice(req: Mapping[str, Any], choice: Mapping[str, Any]) -> dict[str, Any]:
    """What the comparison needs from one choice: per prompt position (from the second: the first has no
    context) the prompt token's logprob and the top k; the generated ids and per generated position the top k
    (the OpenAI form keys these by token text; the ids come from return_token_ids)."""
    ids = list(choice.get("prompt_token_ids") or req["prompt"])
    plp = choice.get("prompt_logprobs") or []
    prompt = []
    for pos in range(1, len(ids)):
        tops = _tops(plp[pos] if pos < len(plp) else None)
        prompt.append({"id": ids[pos], "logprob": tops.get(str(ids[pos])), "top": tops})
    lp = choice.get("logprobs") or {}
    return {
        "prompt_token_ids": ids,
        "prompt_logprobs": prompt,
        "output_token_ids": list(choice.get("token_ids") or []),
        "output_logprobs": [float(x) if x is not None else None for x in lp.get("token_logprobs") or []],
        "output_top": [dict(t or {}) for t in lp.get("top_logprobs") or []],
        "text": choice.get("text", ""),
    }


def send(socket: str, body: Mapping[str, Any], key: str) -> tuple[int | None, Any]:
    """(HTTP status, decoded JSON or the error's text)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn = UnixHTTPConnection(socket, timeout=TIMEOUT_S)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(), headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        if resp.status != 200:
            return resp.status, raw[:300].decode(errors="replace")
        return resp.status, json.loads(raw)
    except (OSError, http.client.HTTPException, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def run(socket: str, model: str, key: str, plan: Sequence[Mapping[str, Any]], top_k: int) -> dict[str, Any]:
    results: dict[str, Any] = {}

    def one(req: Mapping[str, Any]) -> None:
        t0 = time.monotonic()
        status, got = send(socket, _body(req, model, top_k), key)
        rec: dict[str, Any] = {"phase": req["phase"], "status": status, "seconds": round(time.monotonic() - t0, 3)}
        if status == 200 and isinstance(got, dict) and got.get("choices"):
            rec.update(reduce_choice(req, got["choices"][0]))
        else:
            rec["error"] = got if isinstance(got, str) else "no choices in the response"
        results[req["name"]] = rec

    for req in (r for r in plan if r["phase"] == "sequential"):
        one(req)
    threads = [threading.Thread(target=one, args=(r,)) for r in plan if r["phase"] == "concurrent"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {name: results[name] for name in (r["name"] for r in plan)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probes.senders.correctness", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--socket", default=VLLM_SOCKET, help="vLLM's unix socket")
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key-file", default="")
    ap.add_argument("--short", type=int, default=32)
    ap.add_argument("--long", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=5)
    a = ap.parse_args(argv)
    if not (1 < a.short < a.long) or a.max_tokens < 2 or not 1 <= a.top_k <= 20:
        print("correctness: --short < --long, both over 1; --max-tokens 2 or more; --top-k 1 to 20", file=sys.stderr)
        return 2
    try:
        key = load._read_key(a.api_key_file) if a.api_key_file else ""
    except load.LoadInputError as e:
        print(f"correctness: {e}", file=sys.stderr)
        return 2
    plan = requests_plan(a.short, a.long, a.max_tokens)
    started = time.time()
    results = run(a.socket, a.model, key, plan, a.top_k)
    failed = [n for n, r in results.items() if r.get("error")]
    doc = {
        "schema_version": 1,
        "started_unix_s": started,
        "settings": {"short": a.short, "long": a.long, "max_tokens": a.max_tokens, "top_k": a.top_k, "seed": SEED},
        "requests": results,
        "failed": failed,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / OUT_FILE).write_text(json.dumps(doc, sort_keys=True) + "\n")
    print(f"correctness: {len(results)} requests, {len(failed)} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
