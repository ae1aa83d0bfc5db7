"""HTTP over a unix socket (probes/base/unix_http.py), against a real HTTP server listening on one."""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes.base.unix_http import UnixHTTPConnection, opener


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{self.path} host={self.headers['Host']}".encode()
        self.send_response(200 if self.path != "/missing" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:  # a unix socket's peer has no address
        return "unix"

    def log_message(self, format: str, *args: object) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "vllm.sock")
    srv = _UnixServer(path, _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield path
    srv.shutdown()
    srv.server_close()


def test_urllib_and_http_client_reach_a_server_on_the_socket_and_send_its_host_header(server: str) -> None:
    with opener(server).open("http://localhost/health", timeout=5) as resp:
        assert (resp.status, resp.read()) == (200, b"/health host=localhost")
    with pytest.raises(urllib.error.HTTPError) as e:
        opener(server).open("http://localhost/missing", timeout=5)
    assert e.value.code == 404
    conn = UnixHTTPConnection(server, timeout=5)
    conn.request("GET", "/metrics")
    assert conn.getresponse().read() == b"/metrics host=localhost"
    conn.close()


def test_an_answer_sent_before_the_body_was_read_is_read_not_a_broken_pipe(tmp_path: Path) -> None:
    """A server that answers from the headers and closes (vLLM's 401 to a request without its key): on a unix socket
    the body's write then fails at once (EPIPE) where TCP's buffer would have taken it; the answer is still read."""
    path = str(tmp_path / "early.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def answer_early() -> None:
        conn, _ = listener.accept()
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()

    server = threading.Thread(target=answer_early, daemon=True)
    server.start()
    body = b"x" * (8 << 20)  # far more than a unix socket's buffer: its write meets the closed socket
    req = urllib.request.Request("http://localhost/v1/completions", data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        opener(path).open(req, timeout=10)
    assert e.value.code == 401
    server.join(5)
    listener.close()


def test_no_server_on_the_socket_is_an_os_error_and_a_tcp_url_without_a_socket_is_plain_tcp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(urllib.error.URLError) as e:
        opener(str(tmp_path / "none.sock")).open("http://localhost/health", timeout=5)
    assert isinstance(e.value.reason, FileNotFoundError)
    # Without a socket the opener is urllib's own, without the environment's proxies: a closed local port refuses.
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    with pytest.raises(urllib.error.URLError) as e:
        opener(None).open("http://127.0.0.1:1/health", timeout=5)
    assert isinstance(e.value.reason, ConnectionRefusedError)
