"""Where a bench's client runs: its CPUs beside the server's (`place_client`), said in the manifest and the
report, since a client on the server's CPUs puts its own overhead inside the figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.errors import InputError
from serving.host.numa import format_cpulist, parse_cpulist


@dataclass(frozen=True)
class Placement:
    client_cpus: str
    server_cpus: str
    host_cpus: str
    shares_server_cpus: bool
    note: str


def place_client(host_online: str, server_cpuset: str, override: str = "", reserved: str = "") -> Placement:
    """The client's CPUs: `override` if given, else those the NUMA plan keeps for it (`reserved`), else the
    host's CPUs outside the server's set.

    A host with no CPU outside the server's set (this 2-core machine, cpuset 0-1) runs the client on the
    server's CPUs: the bench still runs, and the placement, in the manifest and the report, says it shares.
    """
    host = parse_cpulist(host_online)
    if not host:
        raise InputError(f"cannot read the host's online CPUs from {host_online!r}")
    server = parse_cpulist(server_cpuset) if server_cpuset.strip() else host
    if override.strip():
        try:
            client = parse_cpulist(override)
        except ValueError:
            raise InputError(f"client CPUs {override!r}: expected a cpulist like 30-31") from None
        missing = sorted(set(client) - set(host))
        if missing:
            raise InputError(f"client CPUs {override!r}: CPUs {format_cpulist(missing)} are not online on the host")
        note = "client CPUs set by bench_client_cpus"
    elif reserved.strip():
        client = parse_cpulist(reserved)
        note = "client on the CPUs the NUMA plan keeps for it"
    else:
        client = sorted(set(host) - set(server))
        note = "client on the host's CPUs outside the server's set"
        if not client:
            client = host
            note = (
                f"the host has no CPU outside the server's set ({format_cpulist(server)}): the client shares "
                "the server's CPUs, so client overhead is inside the figures"
            )
    shares = bool(set(client) & set(server))
    if shares and override.strip():
        note += "; it overlaps the server's set"
    return Placement(format_cpulist(client), format_cpulist(server), format_cpulist(host), shares, note)
