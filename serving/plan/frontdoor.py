"""The front door: what clients beyond loopback reach instead of vLLM (a profile's `front_door`).

vLLM's API key guards its /v1 routes only: /invocations, /tokenize, /pause, /abort_requests and, with the profiler
configured, /start_profile answer without it. So vLLM is never published beyond loopback, and a profile with a
front door publishes it nowhere: vLLM listens on its private network only (serving/plan/render.py
private_network), and beyond loopback clients reach nginx (Debian's package, images/frontdoor), in its own
container:

- on the host's network, listening on `listen:port` itself: no Docker-published port, so the host's firewall
  applies to it (Docker's published ports bypass it), and it reaches vLLM on its private address;
- TLS with the operator's certificate and key (root-only files on the host) or a pair generated for the host once
  and kept (its SHA-256 fingerprint is in the manifest);
- the API key on every route, compared by nginx with the header `Authorization: Bearer <key>` (what vLLM and the
  OpenAI clients send); the key reaches nginx in a file the serve role writes on the host from the key file, never
  through the controller;
- an allowlist: the client routes (CLIENT_ROUTES), /health and /metrics only from the monitoring networks and the
  host itself; any other path is 404, whatever vLLM would have answered;
- a body size and time limits, responses streamed as vLLM sends them (proxy_buffering off: a buffering proxy
  holds a stream's first token back), and an access log without the Authorization header or query strings, on
  stdout, which Docker's json-file driver rotates (LOG_OPTIONS);
- as the rest: no capabilities, no-new-privileges, a read-only root, nginx's own user (www-data), bounded pids and
  memory.

The bench client and `make status` reach vLLM on its private address from the host's namespace, the probes from
inside its own; a bench with bench_via=front sends its requests through the front door instead (TLS checked
against the door's certificate), a compared condition. The front door is checked end to end by the deploy (a
request with the key through it, and one without) and reported by `make status`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from serving.config.profile import FrontDoor, Profile
from serving.plan.render import SECRETS_DIR, private_network

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


def front_name(container: str) -> str:
    return f"{container}-front"


def front_dir(container: str) -> str:
    """nginx.conf, the key map, the certificate and its key (root:www-data, 0440), mounted read-only."""
    return f"{SECRETS_DIR}/{container}-front"


def selfsigned_dir(container: str) -> str:
    """Where a generated pair is kept (root only), so that a redeploy keeps the fingerprint clients pinned."""
    return f"{SECRETS_DIR}/{container}-front-selfsigned"


def failures(profile: Profile, key_file: str | None) -> list[str]:
    """Why the API cannot be offered beyond loopback as the profile asks."""
    out = []
    ports, fd = profile.ports, profile.front_door
    if not ports.loopback:
        out.append(
            f"profile {profile.name} publishes vLLM itself on {ports.host_ip}:{ports.host_port}, beyond loopback: "
            "vLLM's key guards only its /v1 routes (/pause, /tokenize and /invocations answer without it). Set "
            f"ports.host_ip: 127.0.0.1 and front_door: {{listen: {ports.host_ip}}}: clients then reach the "
            "authenticating proxy on port 8443"
        )
    if fd is None:
        return out
    if key_file is None:
        out.append(
            f"profile {profile.name} has a front door on {fd.listen}:{fd.port} but no API key: put a key in a "
            "root-only file on the host (install -m 0600 /dev/stdin /etc/refdeploy/api-key) and set the "
            "inventory's refdeploy_api_key_file to it"
        )
    return out


def _listen(fd: FrontDoor) -> str:
    ip = ipaddress.ip_address(fd.listen)
    return f"[{ip}]:{fd.port}" if ip.version == 6 else f"{ip}:{fd.port}"


def _upstream(profile: Profile) -> str:
    private = private_network(profile)
    if private is None:
        raise ValueError(f"profile {profile.name} has no front_door")
    return f"{private['address']}:{profile.ports.container_port}"


def render_conf(profile: Profile) -> str:
    """nginx.conf for the profile's front door. It holds no secret: the key map is a file of its own."""
    fd = profile.front_door
    if fd is None:
        raise ValueError(f"profile {profile.name} has no front_door")
    allowed = "".join(f"        {n} 1;\n" for n in fd.monitoring_networks)
    key_check = "            if ($refdeploy_key_ok = 0) { return 401; }\n"
    client = "".join(
        f"        location = {route} {{\n{key_check}            proxy_pass http://vllm;\n        }}\n"
        for route in CLIENT_ROUTES
    )
    monitoring = "".join(
        f"        location = {route} {{\n            if ($refdeploy_monitoring = 0) {{ return 403; }}\n"
        f"{key_check}            proxy_pass http://vllm;\n        }}\n"
        for route in MONITORING_ROUTES
    )
    return f"""# Rendered by serving/plan/frontdoor.py for profile {profile.name}; make deploy rewrites it.
worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr warn;
events {{
    worker_connections 1024;
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
    geo $refdeploy_monitoring {{
        default 0;
        127.0.0.0/8 1;
        ::1/128 1;
{allowed}    }}
    upstream vllm {{
        server {_upstream(profile)};
        keepalive 16;
    }}
    server {{
        listen {_listen(fd)} ssl;
        ssl_certificate {CONF_MOUNT}/cert.pem;
        ssl_certificate_key {CONF_MOUNT}/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        client_max_body_size {fd.max_body};
        client_header_timeout 30s;
        client_body_timeout 60s;
        send_timeout 60s;
        keepalive_timeout 65s;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_connect_timeout 5s;
        proxy_send_timeout 60s;
        proxy_read_timeout {fd.read_timeout_s}s;
        proxy_buffering off;
        proxy_request_buffering off;
{client}{monitoring}        location / {{
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
        "network_mode": "host",
        "read_only": True,
        "tmpfs": ["/tmp:size=64m"],
        "cap_drop": ["ALL"],
        "security_opts": ["no-new-privileges"],
        "pids_limit": 256,
        "memory": "256m",
        "volumes": [f"{front_dir(name)}:{CONF_MOUNT}:ro"],
        "restart_policy": "unless-stopped",
        "log_driver": "json-file",
        "log_options": dict(LOG_OPTIONS),
        "labels": {FRONT_LABEL: name},
    }


def plan_front_door(profile: Profile, image: str) -> dict[str, Any] | None:
    """What the serve role needs to run the front door, None where the profile has none."""
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
        "private_network": private_network(profile),
        "selfsigned_dir": selfsigned_dir(name),
        "listen": fd.listen,
        "port": fd.port,
        "url": f"https://{client_host if ':' not in client_host else f'[{client_host}]'}:{fd.port}",
        "tls_cert_file": fd.tls_cert_file,
        "tls_key_file": fd.tls_key_file,
        "conf": render_conf(profile),
        "spec": render_spec(profile, image),
        "uid": FRONT_UID,
        "gid": FRONT_GID,
        "client_routes": list(CLIENT_ROUTES),
        "monitoring_routes": list(MONITORING_ROUTES),
    }


def api_failures(profile: Profile, key_file: str | None, key_stat: str | None) -> list[str]:
    """Why the API cannot be served as configured: vLLM published beyond loopback, a front door without a key
    (failures, above), or a key file that is missing, empty or readable by anyone but root. `key_stat`
    is the host's `stat -c '%u %a %s %F'` of the file ("missing" when it is not there)."""
    out = failures(profile, key_file)
    if key_file is None:
        return out
    fix = f"install -m 0600 -o root -g root /dev/stdin {key_file} (the key on stdin)"
    parts = (key_stat or "missing").strip().split(maxsplit=3)
    if parts[0] == "missing" or len(parts) < 4:
        return [*out, f"the API key file {key_file} (refdeploy_api_key_file) is not on the host: {fix}"]
    uid, mode, size, kind = parts
    if kind not in ("regular file", "regular empty file"):
        return [*out, f"the API key file {key_file} is a {kind}, not a regular file: {fix}"]
    if uid != "0" or int(mode, 8) & 0o077:
        return [*out, f"the API key file {key_file} must be root's and readable by root only (it is uid {uid}, mode "
                      f"{mode}): chown root:root {key_file}; chmod 0600 {key_file}"]  # fmt: skip
    if int(size) == 0:
        return [*out, f"the API key file {key_file} is empty: {fix}"]
    return out
