"""The front door: what clients beyond loopback reach instead of vLLM (a profile's `front_door`).

vLLM's API key guards its /v1 routes only: /invocations, /tokenize, /pause, /abort_requests and, with the profiler
configured, /start_profile answer without it. So vLLM has no address at all: it listens on a unix socket in a
container without a network (serving/plan/render.py API_SOCKET_DIR), and beyond the host clients reach nginx
(Debian's package, images/frontdoor), in its own container:

- on the host's network, listening on `listen:port` itself: no Docker-published port, so the host's firewall
  applies to it (Docker's published ports bypass it), and it reaches vLLM through the socket, whose directory
  it may enter as a member of the socket's group (render.py API_GID) and nothing else may;
- TLS with the operator's certificate and key (root-only files on the host, checked as the key file is) or a pair
  generated for the host once and kept (its SHA-256 fingerprint is in the manifest); TLS 1.2 with forward-secret
  AEAD suites only, TLS 1.3, no session tickets (TLS12_CIPHERS);
- the API key on every route, compared by nginx with the header `Authorization: Bearer <key>` (what vLLM and the
  OpenAI clients send); the key reaches nginx in a file the serve role writes on the host from the key file, never
  through the controller; 32 characters or more (KEY_MIN_CHARS), judged on the host;
- an allowlist: the client routes (CLIENT_ROUTES), /health and /metrics only from the monitoring networks and the
  host itself (on any of its addresses); any other path is 404, whatever vLLM would have answered;
- limits per client address: requests without the key held to a rate and a count, then 429; those with it to a
  count only (KEYLESS_*, KEYED_CONNS, WORKER_CONNECTIONS);
- a body size and time limits, responses streamed as vLLM sends them (proxy_buffering off: a buffering proxy
  holds a stream's first token back), and an access log without the Authorization header or query strings, on
  stdout, which Docker's json-file driver rotates (LOG_OPTIONS);
- as the rest: no capabilities, no-new-privileges, a read-only root, nginx's own user (www-data), bounded pids and
  memory.

The bench client, the probes and `make status` reach vLLM through the socket too; a bench with bench_via=front
sends its requests through the front door instead (TLS checked against the door's certificate), a compared
condition. The front door is checked end to end by the deploy (a
request with the key through it, and one without) and reported by `make status`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from serving.config.profile import FrontDoor, Profile
from serving.plan.render import API_GID, API_SOCKET, API_SOCKET_MOUNT, SECRETS_DIR, api_socket_dir

# Debian's www-data: nginx's user in the front door image, the group its files on the host are readable by.
FRONT_UID = 33
FRONT_GID = 33
CONF_MOUNT = "/etc/refdeploy-front"
# What a client of the OpenAI API needs. Anything else of vLLM's (tokenize, pause, abort, profiler, LoRA loading,
# the docs) is not reachable through the front door.
CLIENT_ROUTES = ("/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings")
MONITORING_ROUTES = ("/health", "/metrics")
LOG_OPTIONS = {"max-size": "10m", "max-file": "3"}
FRONT_LABEL = "org.refdeploy.front-door-of"
# The longest key the key map takes (the serve role's check; map_hash_bucket_size 512 holds it with room).
KEY_MAX_CHARS = 256
# The shortest key taken, wherever a key is in play: 32 characters are 128 bits even as hex digits (the weakest
# alphabet a generator uses), 192 as base64; `openssl rand -hex 32` gives 64. A one-character key is guessed in
# a few dozen requests, and the door's limits (below) only slow guessing, they do not stop it.
KEY_MIN_CHARS = 32
# What the key may hold: what a header value nginx compares in a quoted string can carry, and what base64 and hex
# generators give. The host reports the key's length and whether it keeps to these (refdeploy_host_readings
# api_key_shape), never the key.
KEY_CHARSET = "A-Za-z0-9._~+/=-"

# Sized for one host's clients, per client address ($binary_remote_addr, so the door's own clients on the host
# are one address too). nginx answers a request without the key itself, never vLLM; what such a flood can spend
# is the door's connections and workers, so requests without the key (KEYLESS_*) are held hard: 5 a second with
# a burst of 10, 8 at a time, then 429. A client with the key is not rate limited (it is the operator's own, and
# vLLM's queue is its back-pressure): KEYED_CONNS requests at a time, above any bench concurrency here. Two
# workers of 4096 connections each: a proxied request holds two (the client's and vLLM's), so some 4,000 streams
# at once, with room for a keyless flood's idle connections, which no limit counts before their request line
# (client_header_timeout 10s closes them, and bounds a TLS handshake too). More than that from many addresses is
# the host firewall's to limit (connlimit), not nginx's.
KEYLESS_RATE = "5r/s"
KEYLESS_BURST = 10
KEYLESS_CONNS = 8
KEYED_CONNS = 512
WORKERS = 2
WORKER_CONNECTIONS = 4096
# Forward secrecy only: ECDHE key exchange with an AEAD (AES-GCM, ChaCha20-Poly1305) in TLS 1.2; no RSA key
# exchange, no CBC, no SHA-1 MACs. TLS 1.3's suites are all ECDHE and AEAD; named anyway, so the list is ours, not
# the OpenSSL build's. Session tickets off: nginx never rotates their key, which would decrypt every session
# recorded since it started.
TLS12_CIPHERS = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
)
TLS13_CIPHERSUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
# The internal locations the routes' auth_request asks (render_conf); internal, so a client asking them gets 404.
KEY_CHECK = "/refdeploy-key-check"
MONITORING_CHECK = "/refdeploy-monitoring-check"


def front_name(container: str) -> str:
    return f"{container}-front"


def front_dir(container: str) -> str:
    """nginx.conf, the key map, the certificate and its key (root:www-data, 0440), mounted read-only."""
    return f"{SECRETS_DIR}/{container}-front"


def selfsigned_dir(container: str) -> str:
    """Where a generated pair is kept (root only), so that a redeploy keeps the fingerprint clients pinned."""
    return f"{SECRETS_DIR}/{container}-front-selfsigned"


def failures(profile: Profile, key_file: str | None) -> list[str]:
    """Why the API cannot be offered beyond the host as the profile asks."""
    fd = profile.front_door
    if fd is None or key_file is not None:
        return []
    return [
        f"profile {profile.name} has a front door on {fd.listen}:{fd.port} but no API key: put a key in a "
        "root-only file on the host (install -m 0600 /dev/stdin /etc/refdeploy/api-key) and set the "
        "inventory's refdeploy_api_key_file to it"
    ]


def _listen(fd: FrontDoor) -> str:
    ip = ipaddress.ip_address(fd.listen)
    return f"[{ip}]:{fd.port}" if ip.version == 6 else f"{ip}:{fd.port}"


# vLLM's socket as nginx sees it: the socket's directory is mounted read-only at the same place as in vLLM's
# container (connecting to a socket needs no write access to the mount, only to the socket, which the group has).
def _upstream() -> str:
    return f"unix:{API_SOCKET}"


def host_networks(addresses: str) -> list[str]:
    """The host's own addresses beyond loopback as the monitoring allowlist takes them ("<ip>/32", "<ip>/128"):
    `addresses` is the host's reading (refdeploy_host_readings host_addresses, one a line). A line that is no
    address is left out, so nothing of the reading but an address reaches nginx.conf."""
    found = addresses.split()
    out: list[str] = []
    for text in found:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            continue
        net = f"{ip}/{ip.max_prefixlen}"
        if not ip.is_loopback and not ip.is_link_local and net not in out:
            out.append(net)
    return out


def render_conf(profile: Profile, host_addresses: str = "") -> str:
    """nginx.conf for the profile's front door. It holds no secret: the key map is a file of its own.
    `host_addresses`: the host's own addresses (host_networks), which may read /health and /metrics.

    The key and the monitoring networks are checked by an auth_request subrequest, in nginx's access phase: the
    limits (preaccess) then count a request before it is refused. A `return` in the route itself would answer in
    the rewrite phase, before any limit, and a keyless flood would never meet one."""
    fd = profile.front_door
    if fd is None:
        raise ValueError(f"profile {profile.name} has no front_door")
    allowed = "".join(f"        {n} 1;\n" for n in fd.monitoring_networks)
    own = "".join(f"        {n} 1;\n" for n in host_networks(host_addresses))
    client = "".join(
        f"        location = {route} {{\n            auth_request {KEY_CHECK};\n            proxy_pass http://vllm;\n"
        "        }\n"
        for route in CLIENT_ROUTES
    )
    monitoring = "".join(
        f"        location = {route} {{\n            auth_request {MONITORING_CHECK};\n"
        "            proxy_pass http://vllm;\n        }\n"
        for route in MONITORING_ROUTES
    )
    return f"""# Rendered by serving/plan/frontdoor.py for profile {profile.name}; make deploy rewrites it.
worker_processes {WORKERS};
# Two descriptors a proxied request, and room: raised within the container's hard limit.
worker_rlimit_nofile {4 * WORKER_CONNECTIONS};
pid /tmp/nginx.pid;
error_log stderr warn;
events {{
    worker_connections {WORKER_CONNECTIONS};
}}
http {{
    client_body_temp_path /tmp/client_body;
    proxy_temp_path /tmp/proxy;
    fastcgi_temp_path /tmp/fastcgi;
    uwsgi_temp_path /tmp/uwsgi;
    scgi_temp_path /tmp/scgi;
    server_tokens off;
    default_type application/octet-stream;
    # No Authorization header and no query string: the log holds no credential.
    log_format refdeploy '$remote_addr [$time_iso8601] "$request_method $uri $server_protocol" $status '
                         '$body_bytes_sent $request_time';
    access_log /dev/stdout refdeploy;
    # One entry, "Bearer <key>": the bucket holds a key up to KEY_MAX_CHARS (the serve role refuses a longer one).
    map_hash_bucket_size 512;
    map $http_authorization $refdeploy_key_ok {{
        default 0;
        include {CONF_MOUNT}/key-map.conf;
    }}
    # The limits' keys: the client's address for a request without the key, for one with it; "" is not counted.
    map $refdeploy_key_ok $refdeploy_keyless {{
        1 "";
        default $binary_remote_addr;
    }}
    map $refdeploy_key_ok $refdeploy_keyed {{
        1 $binary_remote_addr;
        default "";
    }}
    limit_req_zone $refdeploy_keyless zone=refdeploy_keyless_rate:10m rate={KEYLESS_RATE};
    limit_conn_zone $refdeploy_keyless zone=refdeploy_keyless_conns:10m;
    limit_conn_zone $refdeploy_keyed zone=refdeploy_keyed_conns:10m;
    limit_req_status 429;
    limit_conn_status 429;
    # The access log has each 429; a flood need not write an error line each too.
    limit_req_log_level info;
    limit_conn_log_level info;
    # The monitoring networks, and the host itself: loopback and its own addresses, as the plan read them (see also
    # {MONITORING_CHECK}).
    geo $refdeploy_monitoring {{
        default 0;
        127.0.0.0/8 1;
        ::1/128 1;
{own}{allowed}    }}
    upstream vllm {{
        server {_upstream()};
        keepalive 16;
    }}
    server {{
        listen {_listen(fd)} ssl;
        ssl_certificate {CONF_MOUNT}/cert.pem;
        ssl_certificate_key {CONF_MOUNT}/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {":".join(TLS12_CIPHERS)};
        ssl_conf_command Ciphersuites {":".join(TLS13_CIPHERSUITES)};
        ssl_prefer_server_ciphers on;
        ssl_session_tickets off;
        limit_req zone=refdeploy_keyless_rate burst={KEYLESS_BURST} nodelay;
        limit_conn refdeploy_keyless_conns {KEYLESS_CONNS};
        limit_conn refdeploy_keyed_conns {KEYED_CONNS};
        client_max_body_size {fd.max_body};
        client_header_timeout 10s;
        client_body_timeout 60s;
        send_timeout 60s;
        keepalive_timeout 65s;
        reset_timedout_connection on;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_connect_timeout 5s;
        proxy_send_timeout 60s;
        proxy_read_timeout {fd.read_timeout_s}s;
        proxy_buffering off;
        proxy_request_buffering off;
{client}{monitoring}        location = {KEY_CHECK} {{
            internal;
            if ($refdeploy_key_ok = 0) {{ return 401; }}
            return 204;
        }}
        # The monitoring networks and the host's own addresses (geo above), and an address the host gained since
        # the plan read them: a connection from the host to its own address has that address as its source, unless
        # a NAT rule rewrites it (Docker's masquerade of its bridges' subnets does, to another of the host's
        # addresses, which the list holds). A packet from elsewhere cannot carry a local source: the kernel drops
        # it (martian source).
        location = {MONITORING_CHECK} {{
            internal;
            set $refdeploy_allowed $refdeploy_monitoring;
            if ($remote_addr = $server_addr) {{ set $refdeploy_allowed 1; }}
            if ($refdeploy_allowed = 0) {{ return 403; }}
            if ($refdeploy_key_ok = 0) {{ return 401; }}
            return 204;
        }}
        location / {{
            return 404;
        }}
    }}
}}
"""


def render_spec(profile: Profile, image: str) -> dict[str, Any]:
    """The front door's container (docker_container's names)."""
    name = profile.container.name
    return {
        "name": front_name(name),
        "image": image,
        # -e: the log nginx opens before it reads its configuration (Debian's default is a root-only file).
        "command": ["nginx", "-e", "stderr", "-c", f"{CONF_MOUNT}/nginx.conf", "-g", "daemon off;"],
        "user": f"{FRONT_UID}:{FRONT_GID}",
        # The socket's group: nginx may enter the socket's directory and connect (render.py API_SOCKET_DIR).
        "groups": [str(API_GID)],
        "network_mode": "host",
        "read_only": True,
        "tmpfs": ["/tmp:size=64m"],
        "cap_drop": ["ALL"],
        "security_opts": ["no-new-privileges"],
        "pids_limit": 256,
        "memory": "256m",
        "volumes": [f"{front_dir(name)}:{CONF_MOUNT}:ro", f"{api_socket_dir(name)}:{API_SOCKET_MOUNT}:ro"],
        "restart_policy": "unless-stopped",
        "log_driver": "json-file",
        "log_options": dict(LOG_OPTIONS),
        "labels": {FRONT_LABEL: name},
    }


def plan_front_door(profile: Profile, image: str, host_addresses: str = "") -> dict[str, Any] | None:
    """What the serve role needs to run the front door, None where the profile has none. `host_addresses`: the
    host's reading of its own addresses (render_conf)."""
    fd = profile.front_door
    if fd is None:
        return None
    name = profile.container.name
    client_host = "127.0.0.1" if ipaddress.ip_address(fd.listen).is_unspecified else fd.listen
    return {
        "name": front_name(name),
        "dir": front_dir(name),
        # The certificate clients check the door against (public; a bench with bench_via=front takes a copy).
        "cert": f"{front_dir(name)}/cert.pem",
        "selfsigned_dir": selfsigned_dir(name),
        "listen": fd.listen,
        "port": fd.port,
        "url": f"https://{client_host if ':' not in client_host else f'[{client_host}]'}:{fd.port}",
        "tls_cert_file": fd.tls_cert_file,
        "tls_key_file": fd.tls_key_file,
        "conf": render_conf(profile, host_addresses),
        "spec": render_spec(profile, image),
        "uid": FRONT_UID,
        "gid": FRONT_GID,
        "key_min_chars": KEY_MIN_CHARS,
        "client_routes": list(CLIENT_ROUTES),
        "monitoring_routes": list(MONITORING_ROUTES),
    }


def api_failures(
    profile: Profile,
    key_file: str | None,
    key_stat: str | None,
    key_shape: str | None = None,
    tls_key_stat: str | None = None,
) -> list[str]:
    """Why the API cannot be served as configured: vLLM published beyond loopback, a front door without a key
    (failures, above), a key file that is missing, empty or readable by anyone but root, a key shorter than
    KEY_MIN_CHARS or with characters beyond KEY_CHARSET, or the front door's operator TLS key readable by anyone but
    root. `key_stat` and `tls_key_stat` are the host's `stat -c '%u %a %s %F'` of each file ("missing" when it is
    not there), `key_shape` the host's verdict on the key's content (refdeploy_host_readings key_shape: "<length>
    <ok|other>"; None where the caller did not read it)."""
    out = failures(profile, key_file) + _tls_key_failures(profile, tls_key_stat)
    if key_file is None:
        return out
    fix = f"install -m 0600 -o root -g root /dev/stdin {key_file} (the key on stdin)"
    bad = _file_failure(f"the API key file {key_file}", key_stat, fix, "refdeploy_api_key_file")
    if bad is not None:
        return [*out, bad]
    shape = _key_shape_failure(key_file, key_shape)
    return [*out, shape] if shape is not None else out


def _file_failure(what: str, stat_line: str | None, fix: str, setting: str) -> str | None:
    """A secret file that is not a non-empty regular file of root's, readable by root only."""
    parts = (stat_line or "missing").strip().split(maxsplit=3)
    if parts[0] == "missing" or len(parts) < 4:
        return f"{what} ({setting}) is not on the host: {fix}"
    uid, mode, size, kind = parts
    path = what.rsplit(" ", 1)[-1]
    if kind not in ("regular file", "regular empty file"):
        return f"{what} is a {kind}, not a regular file: {fix}"
    if uid != "0" or int(mode, 8) & 0o077:
        return (f"{what} must be root's and readable by root only (it is uid {uid}, mode {mode}): "
                f"chown root:root {path}; chmod 0600 {path}")  # fmt: skip
    if int(size) == 0:
        return f"{what} is empty: {fix}"
    return None


def _key_shape_failure(key_file: str, key_shape: str | None) -> str | None:
    if key_shape is None:
        return None
    make = "make one with openssl rand -hex 32 | install -m 0600 -o root -g root /dev/stdin " + key_file
    parts = key_shape.split()
    if len(parts) != 2 or not parts[0].isdigit():
        return f"the API key file {key_file} could not be read on the host ({key_shape.strip()}): {make}"
    chars, charset = int(parts[0]), parts[1]
    if charset != "ok":
        return (f"the API key in {key_file} has characters other than letters, digits and . _ ~ + / = -, which "
                f"the front door's header comparison cannot hold: {make}")  # fmt: skip
    if chars < KEY_MIN_CHARS:
        return f"the API key in {key_file} is {chars} characters, shorter than the {KEY_MIN_CHARS} required: {make}"
    if chars > KEY_MAX_CHARS:
        return f"the API key in {key_file} is {chars} characters, the front door takes {KEY_MAX_CHARS} at most: {make}"
    return None


def _tls_key_failures(profile: Profile, tls_key_stat: str | None) -> list[str]:
    """The operator's TLS key of the front door, held as the API key file is (root's, 0600): nginx reads its copy."""
    fd = profile.front_door
    # A missing pair is preflight's to name, the certificate with the key (roles/preflight/tasks/main.yml).
    if fd is None or not fd.tls_key_file or tls_key_stat is None or tls_key_stat.strip() == "missing":
        return []
    fix = f"put the certificate's key there (install -m 0600 -o root -g root KEY {fd.tls_key_file})"
    bad = _file_failure(f"the front door's TLS key {fd.tls_key_file}", tls_key_stat, fix, "front_door.tls_key_file")
    return [bad] if bad is not None else []
