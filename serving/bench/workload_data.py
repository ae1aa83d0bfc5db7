"""A workload's data file (prompts, trace) as the bench reads it on the controller, before any request is sent: where
it is, its content by hash, a trace's requests and their lengths; and whether the workload fits the profile's
context. serving/bench/protocol.py plans the client from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from serving.config.workload import Workload, canonical_trace, read_prompts, read_trace
from serving.errors import InputError


def data_file(w: Workload) -> str | None:
    """The controller's path of the workload's data file (prompts or trace), None for generated prompts."""
    return w.prompts if w.dataset == "prompts" else w.trace if w.dataset == "trace" else None


def workload_data(w: Workload) -> dict[str, Any]:
    """The workload's data file read and checked on the controller, before any request is sent: {} for generated
    prompts; else its path, sha256 and lines, and for a trace the requests one run sends and each one's expected
    output length (vLLM sends a trace's lines in file order)."""
    path = data_file(w)
    if path is None:
        return {}
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise InputError(f"workload {w.name}: {w.dataset} file {path} cannot be read: {exc.strerror or exc}") from None
    if w.dataset == "prompts":
        return {"path": path, "sha256": digest, "lines": len(read_prompts(path))}
    entries = read_trace(path)[: w.num_prompts or None]
    text, shared = canonical_trace(entries, w.trace_block_tokens)
    return {
        "path": path,
        "sha256": digest,
        "content": text,
        "shared_blocks": shared,
        "lines": len(entries),
        "requests": len(entries),
        "expected_output_lens": [int(e["output_length"]) for e in entries],
        "max_tokens": max(int(e["input_length"]) + int(e["output_length"]) for e in entries),
        "span_s": float(entries[-1]["timestamp"] - entries[0]["timestamp"]) * w.trace_time_scale,
    }


# Tokens allowed per conversation turn for the chat template's role markers (a user and an assistant message; a
# Llama 3 template's headers are 5 tokens a message, its default system preamble about 25 once): the context check
# of conversations counts them, since the server counts the templated history.
CHAT_TEMPLATE_TOKENS_PER_TURN = 32


def context_problem(w: Workload, data: Mapping[str, Any], max_model_len: int | None) -> str | None:
    """A workload whose prompt and output would not fit the profile's context (vLLM would refuse every request
    mid-bench): one line, before any request. A prompts file's lengths are known only to the tokenizer, so only
    its output length is checked here; a conversation's last turn carries the whole history, so its every turn's
    tokens are counted, with an allowance for the chat template."""
    if not max_model_len:
        return None
    if w.dataset == "conversations":
        turns, per_turn = int(w.turns or 0), int(w.input_len or 0) + int(w.output_len or 0)
        longest = turns * (per_turn + CHAT_TEMPLATE_TOKENS_PER_TURN)
        what = (
            f"its last turn's history and answer need turns {turns} x (input_len {w.input_len} + output_len "
            f"{w.output_len} + {CHAT_TEMPLATE_TOKENS_PER_TURN} allowed for the chat template) = {longest} tokens"
        )
    elif w.dataset == "trace":
        longest = int(data.get("max_tokens") or 0)
        what = f"its longest request needs {longest} tokens (input_length + output_length)"
    elif w.dataset == "prompts":
        longest = int(w.output_len or 0)
        what = f"output_len {longest}"
    else:
        longest = int(w.input_len or 0) + int(w.output_len or 0)
        what = f"input_len {w.input_len} + output_len {w.output_len} = {longest} tokens"
    if longest <= max_model_len:
        return None
    return (
        f"workload {w.name}: {what}, beyond the profile's context (max_model_len {max_model_len}): shorten them, "
        f"give the workload a `sizes` entry for this profile, or deploy a profile with a longer context"
    )
