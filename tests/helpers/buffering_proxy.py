"""A reverse proxy that buffers whole responses, as a proxy with response buffering on does (nginx's proxy_buffering,
its default): a stream reaches the client in one burst. For the tests of what the client/server agreement checks
make of it (test_bench.py, test_diagnose_faults.py)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from typing import Any

from probes.base.unix_http import UnixHTTPConnection


def _handler(upstream: str) -> type[http.server.BaseHTTPRequestHandler]:
    class BufferingProxy(http.server.BaseHTTPRequestHandler):
        """Holds each response until the server has finished it, then sends all of it at once."""

        def _relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            conn = UnixHTTPConnection(upstream, timeout=300)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()  # the whole response, then all of it at once
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = _relay

        def log_message(self, *args: Any) -> None:
            pass

    return BufferingProxy


@contextlib.contextmanager
def buffering_proxy(upstream: str) -> Iterator[int]:
    """A buffering proxy to vLLM's unix socket `upstream` on a free loopback port, for the block's length: yields the
    port."""
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield int(proxy.server_address[1])
    finally:
        proxy.shutdown()
