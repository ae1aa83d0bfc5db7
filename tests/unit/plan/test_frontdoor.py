"""The front door's configuration and container (serving/plan/frontdoor.py) and the profile's front_door section.
Whether nginx accepts the configuration and does what it says is the integration test's (test_front_door.py)."""

from __future__ import annotations

import re

import pytest

from serving.config.profile import FrontDoor, Profile, ProfileError, load_profile, parse_profile
from serving.plan.frontdoor import CLIENT_ROUTES, MONITORING_ROUTES, plan_front_door, render_conf
from serving.plan.plan import plan_from_profile

KEYED = {"hostname": "localhost", "api_key_file": "0 600 65 regular file"}


def _fronted(**front: object) -> Profile:
    data = load_profile("cpu-tiny").model_dump(mode="json")
    data["front_door"] = {"listen": "0.0.0.0", **front}
    return parse_profile(data)


def _locations(conf: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"location = (\S+) \{\n(.*?)\n        \}", conf, re.S)}


def test_every_allowed_route_checks_the_key_monitoring_also_the_network_and_the_rest_is_404() -> None:
    conf = render_conf(_fronted(monitoring_networks=["10.20.0.0/16"]))
    locations = _locations(conf)
    assert sorted(locations) == sorted([*CLIENT_ROUTES, *MONITORING_ROUTES])
    for route, body in locations.items():
        assert "if ($refdeploy_key_ok = 0) { return 401; }" in body and "proxy_pass http://vllm;" in body
        assert ("$refdeploy_monitoring = 0) { return 403; }" in body) == (route in MONITORING_ROUTES)
    assert "location / {\n            return 404;" in conf
    assert "listen 0.0.0.0:8443 ssl;" in conf and "server 172.31.254.2:8000;" in conf
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
    assert spec["volumes"] == ["/var/lib/refdeploy/secrets/refdeploy-vllm-front:/etc/refdeploy-front:ro"]
    assert spec["image"] == plan.images.frontdoor_tag and spec["log_options"] == {"max-size": "10m", "max-file": "3"}
    assert plan_from_profile(load_profile("cpu-tiny"), "localhost", KEYED).front_door is None


def test_behind_a_front_door_vllm_publishes_nothing_and_answers_on_its_private_address() -> None:
    plan = plan_from_profile(_fronted(private_subnet="10.99.0.16/28"), "localhost", KEYED,
                             api_key_file="/etc/refdeploy/api-key")  # fmt: skip
    spec = plan.container_spec
    assert spec is not None and spec["published_ports"] == []
    assert spec["network_mode"] == "refdeploy-vllm-private"
    assert spec["networks"] == [{"name": "refdeploy-vllm-private", "ipv4_address": "10.99.0.18"}]
    assert plan.front_door is not None and plan.front_door["private_network"] == {
        "name": "refdeploy-vllm-private",
        "subnet": "10.99.0.16/28",
        "gateway": "10.99.0.17",
        "address": "10.99.0.18",
    }
    assert plan.base_url == "http://10.99.0.18:8000" and plan.api.private_address == "10.99.0.18"
    assert "server 10.99.0.18:8000;" in plan.front_door["conf"]
    # Without a front door: published on loopback, on NAME-net, as before.
    plain = plan_from_profile(load_profile("cpu-tiny"), "localhost", KEYED)
    assert plain.container_spec is not None and plain.container_spec["published_ports"] == ["127.0.0.1:8000:8000"]
    assert plain.container_spec["network_mode"] == "refdeploy-vllm-net" and "networks" not in plain.container_spec
    assert plain.base_url == "http://127.0.0.1:8000" and plain.api.private_address is None


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
        ({"private_subnet": "8.8.8.0/29"}, "expected a private IPv4 network of 8 addresses or more"),
        ({"private_subnet": "10.0.0.0/30"}, "front_door.private_subnet"),
        ({"private_subnet": "10.0.0.1/29"}, "front_door.private_subnet"),
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
