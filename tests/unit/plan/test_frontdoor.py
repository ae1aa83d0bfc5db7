"""The front door's configuration and container (serving/plan/frontdoor.py) and the profile's front_door section.
Whether nginx accepts the configuration and does what it says is the integration test's (test_front_door.py)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from serving.config.profile import FrontDoor, Profile, ProfileError, load_profile, parse_profile
from serving.plan.frontdoor import (
    CLIENT_ROUTES,
    KEY_CHECK,
    MONITORING_CHECK,
    MONITORING_ROUTES,
    api_failures,
    plan_front_door,
    render_conf,
)
from serving.plan.plan import plan_from_profile
from serving.plan.render import render_container_spec

KEYED = {"hostname": "localhost", "api_key_file": "0 600 65 regular file", "api_key_shape": "64 ok\n"}


def _fronted(**front: object) -> Profile:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["front_door"] = {"listen": "0.0.0.0", **front}
    return parse_profile(data)


def _locations(conf: str) -> dict[str, str]:
    """The routes clients reach: every exact location but the internal checks."""
    found = re.finditer(r"location = (\S+) \{\n(.*?)\n        \}", conf, re.S)
    return {m.group(1): m.group(2) for m in found if m.group(1) not in (KEY_CHECK, MONITORING_CHECK)}


def _internal(conf: str, check: str) -> list[str]:
    body = re.search(rf"location = {check} \{{\n(.*?)\n        \}}", conf, re.S)
    assert body is not None, check
    return [line.strip() for line in body.group(1).splitlines()]


def _directives(conf: str, name: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"^\s*{name} (.*);$", conf, re.M)]


def test_every_allowed_route_checks_the_key_monitoring_also_the_network_and_the_rest_is_404() -> None:
    conf = render_conf(_fronted(monitoring_networks=["10.20.0.0/16"]))
    locations = _locations(conf)
    assert sorted(locations) == sorted([*CLIENT_ROUTES, *MONITORING_ROUTES])
    for route, body in locations.items():
        check = MONITORING_CHECK if route in MONITORING_ROUTES else KEY_CHECK
        assert body == f"            auth_request {check};\n            proxy_pass http://vllm;", route
    # The checks the routes ask: the key; for monitoring the network first, then the key.
    key_check, monitoring_check = _internal(conf, KEY_CHECK), _internal(conf, MONITORING_CHECK)
    assert key_check == ["internal;", "if ($refdeploy_key_ok = 0) { return 401; }", "return 204;"]
    assert monitoring_check[0] == "internal;" and monitoring_check[-3:] == [
        "if ($refdeploy_allowed = 0) { return 403; }",
        "if ($refdeploy_key_ok = 0) { return 401; }",
        "return 204;",
    ]
    assert "location / {\n            return 404;" in conf
    assert "listen 0.0.0.0:8443 ssl;" in conf and "server unix:/run/refdeploy/api/vllm.sock;" in conf
    assert "10.20.0.0/16 1;" in conf and "127.0.0.0/8 1;" in conf
    # Streams pass as vLLM sends them; the log has neither the Authorization header nor the query string.
    assert "proxy_buffering off;" in conf and "$http_authorization" not in conf.split("map $http_authorization")[0]
    assert "$request " not in conf and "$args" not in conf
    assert "client_max_body_size 8m;" in conf and "proxy_read_timeout 600s;" in conf
    assert "include /etc/refdeploy-front/key-map.conf;" in conf


def test_the_front_doors_container_has_no_capabilities_a_read_only_root_and_its_own_user() -> None:
    plan = plan_from_profile(_fronted(), "localhost", KEYED, api_key_file="/etc/refdeploy/api-key")
    assert plan.ok, plan.failures
    front = plan.front_door
    assert front is not None and front["url"] == "https://127.0.0.1:8443"
    spec = front["spec"]
    assert (spec["name"], spec["network_mode"], spec["user"]) == ("refdeploy-vllm-front", "host", "33:33")
    assert spec["cap_drop"] == ["ALL"] and spec["security_opts"] == ["no-new-privileges"] and spec["read_only"]
    # Its configuration, and vLLM's socket directory, of whose group it is (its one way to vLLM), both read-only.
    assert spec["groups"] == ["10002"]
    assert spec["volumes"] == [
        "/var/lib/refdeploy/secrets/refdeploy-vllm-front:/etc/refdeploy-front:ro",
        "/var/lib/refdeploy/api/refdeploy-vllm:/run/refdeploy/api:ro",
    ]
    assert spec["image"] == plan.images.frontdoor_tag and spec["log_options"] == {"max-size": "10m", "max-file": "3"}
    assert plan_from_profile(load_profile("cpu-tiny"), "localhost", KEYED).front_door is None


def test_with_or_without_a_front_door_vllm_has_no_network_and_the_door_reaches_its_socket() -> None:
    fronted = plan_from_profile(_fronted(), "localhost", KEYED, api_key_file="/etc/refdeploy/api-key")
    plain = plan_from_profile(load_profile("cpu-tiny"), "localhost", KEYED)
    for plan in (fronted, plain):
        spec = plan.container_spec
        assert spec is not None and "published_ports" not in spec and "networks" not in spec
        assert spec["network_mode"] == "none" and "--uds" in spec["command"] and "--port" not in spec["command"]
        assert plan.base_url == "http://localhost"
        assert (plan.api.socket, plan.api.socket_dir, plan.api.socket_gid) == (
            "/var/lib/refdeploy/api/refdeploy-vllm/vllm.sock", "/var/lib/refdeploy/api/refdeploy-vllm", 10002,
        )  # fmt: skip
    assert fronted.front_door is not None and "server unix:/run/refdeploy/api/vllm.sock;" in fronted.front_door["conf"]
    # A profile written for the private network or a published port is refused in one line saying what replaced it.
    for data_change in (
        {"ports": {"host_ip": "127.0.0.1"}},
        {"front_door": {"listen": "0.0.0.0", "private_subnet": "10.99.0.16/28"}},
    ):
        data = {**load_profile("cpu-tiny").model_dump(mode="json"), **data_change}
        with pytest.raises(ProfileError) as e:
            parse_profile(data)
        line = str(e.value)
        assert "unix socket" in line and "\n" not in line.strip() and "got" not in line, line


def test_a_front_door_on_one_address_is_reached_there_and_ipv6_is_bracketed() -> None:
    one = plan_front_door(_fronted(listen="192.0.2.7"), "img")
    assert one is not None and one["url"] == "https://192.0.2.7:8443"
    six = _fronted(listen="::")
    assert "listen [::]:8443 ssl;" in render_conf(six)


@pytest.mark.parametrize(
    ("front", "says"),
    [
        ({"listen": "everywhere"}, "front_door.listen"),
        ({"tls_cert_file": "/etc/ssl/host.pem"}, "set tls_cert_file and tls_key_file together"),
        ({"monitoring_networks": ["10.0.0.1/8"]}, "expected networks like 10.0.0.0/8"),
        ({"max_body": "lots"}, "expected a size like '8m'"),
        ({"port": 80}, "front_door.port"),
    ],
)
def test_a_bad_front_door_is_refused_in_one_line_naming_the_field(front: dict[str, object], says: str) -> None:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["front_door"] = {"listen": "0.0.0.0", **front}
    with pytest.raises(ProfileError) as e:
        parse_profile(data)
    assert says in str(e.value) and "\n" not in str(e.value).strip()


def test_the_model_reads_its_defaults() -> None:
    fd = FrontDoor(listen="0.0.0.0")
    assert (fd.port, fd.max_body, fd.read_timeout_s, fd.monitoring_networks) == (8443, "8m", 600, [])


def test_requests_without_the_key_are_limited_by_address_and_those_with_it_only_by_connections() -> None:
    conf = render_conf(_fronted())
    # The limits' keys: the client's address for a request without the key ("" with it: not counted), and the
    # reverse; so a keyless flood from an address does not hold back a keyed client from the same address.
    assert 'map $refdeploy_key_ok $refdeploy_keyless {\n        1 "";\n        default $binary_remote_addr;' in conf
    assert 'map $refdeploy_key_ok $refdeploy_keyed {\n        1 $binary_remote_addr;\n        default "";' in conf
    assert _directives(conf, "limit_req_zone") == ["$refdeploy_keyless zone=refdeploy_keyless_rate:10m rate=5r/s"]
    assert _directives(conf, "limit_conn_zone") == [
        "$refdeploy_keyless zone=refdeploy_keyless_conns:10m",
        "$refdeploy_keyed zone=refdeploy_keyed_conns:10m",
    ]
    assert _directives(conf, "limit_req") == ["zone=refdeploy_keyless_rate burst=10 nodelay"]
    assert _directives(conf, "limit_conn") == ["refdeploy_keyless_conns 8", "refdeploy_keyed_conns 512"]
    assert _directives(conf, "limit_req_status") == _directives(conf, "limit_conn_status") == ["429"]
    # The key is checked in the access phase (auth_request), after the limits (preaccess) counted the request: no
    # route answers from its rewrite phase (a `return` there would come before any limit).
    assert all("return" not in body for body in _locations(conf).values())
    assert _directives(conf, "worker_processes") == ["2"] and _directives(conf, "worker_connections") == ["4096"]
    assert _directives(conf, "worker_rlimit_nofile") == ["16384"]
    assert _directives(conf, "client_header_timeout") == ["10s"]


def test_tls_offers_forward_secret_aead_suites_only_and_no_session_tickets() -> None:
    conf = render_conf(_fronted())
    [ciphers] = _directives(conf, "ssl_ciphers")
    assert _directives(conf, "ssl_protocols") == ["TLSv1.2 TLSv1.3"]
    assert _directives(conf, "ssl_conf_command") == [
        "Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
    ]
    assert _directives(conf, "ssl_prefer_server_ciphers") == ["on"]
    assert _directives(conf, "ssl_session_tickets") == ["off"]
    # What OpenSSL makes of the list for TLS 1.2: every suite ECDHE key exchange and an AEAD cipher.
    openssl = shutil.which("openssl")
    assert openssl is not None, "the unit tests need openssl (Debian's package) to expand the cipher list"
    listed = subprocess.run([openssl, "ciphers", "-v", "-tls1_2", ciphers], capture_output=True, text=True, check=True)
    suites = [line.split() for line in listed.stdout.splitlines() if "TLSv1.2" in line]
    assert len(suites) == 6, listed.stdout
    for name, _proto, kx, _au, enc, mac in suites:
        assert (kx, mac) == ("Kx=ECDH", "Mac=AEAD"), name
        assert enc.split("(")[0] in ("Enc=AESGCM", "Enc=CHACHA20/POLY1305"), name


def test_the_hosts_own_addresses_as_the_plan_read_them_may_read_monitoring() -> None:
    # Docker's masquerade of its bridges' subnets rewrites the host's connection to its own bridge address to
    # another of its addresses (measured: to 172.17.0.1, from 192.0.2.2): the whole list is allowed.
    read = "127.0.0.1\n172.17.0.1\n192.0.2.2\nfd00::2\n::1\nfe80::1\nnot-an-address;\n192.0.2.2\n"
    plan = plan_from_profile(_fronted(), "localhost", {**KEYED, "host_addresses": read},
                             api_key_file="/etc/refdeploy/api-key")  # fmt: skip
    assert plan.front_door is not None
    geo = re.search(r"geo \$refdeploy_monitoring \{\n(.*?)\n    \}", plan.front_door["conf"], re.S)
    assert geo is not None
    assert [line.strip() for line in geo.group(1).splitlines()] == [
        "default 0;", "127.0.0.0/8 1;", "::1/128 1;", "172.17.0.1/32 1;", "192.0.2.2/32 1;", "fd00::2/128 1;",
    ]  # fmt: skip
    # Without a reading: loopback only.
    assert "192.0.2.2" not in render_conf(_fronted()) and "/32 1;" not in render_conf(_fronted())


def test_the_host_reaches_monitoring_on_an_address_it_gained_since_the_plan() -> None:
    check = _internal(render_conf(_fronted()), MONITORING_CHECK)
    # A connection from the host to one of its addresses has that address as its source.
    assert check[1] == "set $refdeploy_allowed $refdeploy_monitoring;"
    assert check[2] == "if ($remote_addr = $server_addr) { set $refdeploy_allowed 1; }"


@pytest.mark.parametrize(
    ("shape", "says"),
    [
        ("1 ok\n", "is 1 characters, shorter than the 32 required"),
        ("31 ok\n", "is 31 characters, shorter than the 32 required"),
        ("64 other\n", "has characters other than letters, digits and . _ ~ + / = -"),
        ("257 ok\n", "takes 256 at most"),
        ("unreadable\n", "could not be read on the host"),
    ],
)
def test_a_short_key_or_one_of_other_characters_is_refused_in_one_line(shape: str, says: str) -> None:
    [line] = api_failures(_fronted(), "/etc/refdeploy/api-key", "0 600 65 regular file\n", shape)
    assert says in line and "openssl rand -hex 32" in line and "\n" not in line
    plan = plan_from_profile(_fronted(), "localhost", {**KEYED, "api_key_shape": shape},
                             api_key_file="/etc/refdeploy/api-key")  # fmt: skip
    assert not plan.ok and says in " ".join(plan.failures)


def test_a_key_of_32_to_256_allowed_characters_is_taken() -> None:
    for shape in ("32 ok\n", "64 ok\n", "256 ok\n"):
        assert api_failures(_fronted(), "/etc/refdeploy/api-key", "0 600 65 regular file\n", shape) == []


def test_the_operators_tls_key_must_be_roots_and_readable_by_root_only() -> None:
    profile = _fronted(tls_cert_file="/etc/ssl/refdeploy/cert.pem", tls_key_file="/etc/ssl/refdeploy/key.pem")
    key = ("/etc/refdeploy/api-key", "0 600 65 regular file\n", "64 ok\n")
    assert api_failures(profile, *key, "0 600 241 regular file\n") == []
    [line] = api_failures(profile, *key, "0 644 241 regular file\n")
    assert line == (
        "the front door's TLS key /etc/ssl/refdeploy/key.pem must be root's and readable by root only (it is uid 0, "
        "mode 644): chown root:root /etc/ssl/refdeploy/key.pem; chmod 0600 /etc/ssl/refdeploy/key.pem"
    )
    assert "uid 1000" in api_failures(profile, *key, "1000 600 241 regular file\n")[0]
    assert "is a directory" in api_failures(profile, *key, "0 700 4096 directory\n")[0]
    assert api_failures(profile, *key, "missing\n") == []  # preflight names the missing pair, both files
    plan = plan_from_profile(profile, "localhost", {**KEYED, "tls_key_file": "0 640 241 regular file\n"},
                             api_key_file="/etc/refdeploy/api-key")  # fmt: skip
    assert not plan.ok and "mode 640" in " ".join(plan.failures)


def test_the_renderer_publishes_nothing_whatever_preflight_did() -> None:
    """The renderer has no port to publish (vLLM's socket only): no profile field, shipped or not, puts one in the
    spec, so skipping preflight's checks (-e preflight_check_plan=false) cannot publish vLLM either."""
    for name in ("cpu-tiny", "cpu-tiny-tp2", "rtx3090-pp3", "rtxpro6000-tp8"):
        spec = render_container_spec(load_profile(name), "img")
        assert "published_ports" not in spec and spec["network_mode"] == "none", name
    assert render_container_spec(_fronted(), "img")["network_mode"] == "none"
