"""HTTP to vLLM's unix socket: vLLM has no TCP address (serving/plan/render.py API_SOCKET_DIR says why).

Standard library only (aiohttp imported lazily, where the caller has it): the probes image runs it (the senders,
the capture's /metrics reader), and the bench role copies this file beside the bench client in the runtime image
(ansible/roles/bench/tasks/main.yml), which imports it from there. The host part of a URL sent over the socket is
only its Host header (serving/plan/render.py SOCKET_URL).

Why not a library: requests-unixsocket and aiohttp's UnixConnector are what a field expert reaches for, and the
aiohttp one is used below; http.client needs only its socket replaced, which is four lines, while a dependency in
both images would be one more pinned package for each.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import urllib.request
from typing import Any

# vLLM's socket inside every container that mounts its directory (the probes, the bench client, the engine itself):
# the probes' defaults; serving/plan/render.py API_SOCKET is this path (a unit test holds them equal).
VLLM_SOCKET = "/run/refdeploy/api/vllm.sock"


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client's connection, over the unix socket at `path` instead of TCP."""

    def __init__(self, path: str, host: str = "localhost", timeout: float | None = None) -> None:
        super().__init__(host, timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        sock.connect(self.path)
        self.sock = sock

    def send(self, data: Any) -> None:
        """http.client sends a request's headers and its body in two writes. A server that answers from the headers
        and closes (vLLM's 401 to a request without its key) makes the second write fail at once on a unix socket,
        where TCP's buffer would have taken it: the answer is already there, and getresponse() reads it, as a TCP
        client would have."""
        with contextlib.suppress(BrokenPipeError):
            super().send(data)


class _UnixHandler(urllib.request.HTTPHandler):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(lambda host, timeout=None, **_kw: UnixHTTPConnection(self.path, host, timeout), req)


def opener(path: str | None) -> urllib.request.OpenerDirector:
    """urllib's opener for http:// URLs: over the socket at `path`, or plain TCP where `path` is None. No proxy
    handler either way: a request to the server never goes through an operator's proxy variables."""
    if path is None:
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _UnixHandler(path))


def route_aiohttp(path: str) -> None:
    """Make every aiohttp.TCPConnector this process creates from now on an aiohttp.UnixConnector to `path`, with the
    pool settings it was asked for: `vllm bench serve` makes its own connector (vllm/benchmarks/serve.py), and this
    is the one place its transport can be chosen without changing vLLM. TCP-only settings (DNS cache, TLS) have
    nothing to apply to on a socket and are dropped."""
    import aiohttp  # type: ignore[import-not-found]

    unix = aiohttp.UnixConnector

    def connector(
        *,
        limit: int = 100,
        limit_per_host: int = 0,
        keepalive_timeout: Any = None,
        force_close: bool = False,
        **_tcp_only: Any,
    ) -> Any:
        kw: dict[str, Any] = {"limit": limit, "limit_per_host": limit_per_host, "force_close": force_close}
        if keepalive_timeout is not None and not force_close:
            kw["keepalive_timeout"] = keepalive_timeout
        return unix(path=path, **kw)

    aiohttp.TCPConnector = connector
