"""Two test hosts on this machine: two network namespaces joined by a veth pair.

Each test that needs several hosts makes its own pair (unique names from the PID and a tag),
with addresses of its own from 198.18.0.0/15 -- the range RFC 2544 sets aside for benchmark
networks -- that exist only inside those namespaces: nothing is routed to or from any other
network, and deleting a namespace removes its end of the link. A process started with
:meth:`Host.argv` lives in that host's network namespace (and shares everything else: files,
PIDs), so ``pdtrt serve`` runs there unchanged and ``pdtrt stop`` works from anywhere.
Creating namespaces needs root (CI has it); :func:`unavailable_reason` says why not otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SUBNET = "198.18.0"  # /24 inside the pair's namespaces only
# Both ends of the link have this name, each in its own namespace -- as two real hosts would
# both call their NIC eth1 -- so one spec's kv_transfer.net_devices fits both.
DEVICE = "pdtrt0"


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True)


@dataclass(frozen=True)
class Host:
    ns: str  # network namespace name
    device: str  # this host's end of the veth pair
    address: str  # its IPv4 address on that link

    def argv(self, *cmd: str) -> list[str]:
        """``cmd`` run inside this host's network namespace."""
        return ["ip", "netns", "exec", self.ns, *cmd]

    def link_bytes(self) -> tuple[int, int]:
        """(received, sent) bytes on this host's end of the link."""
        out = _ip("-n", self.ns, "-j", "-s", "link", "show", "dev", self.device).stdout
        stats = json.loads(out)[0]["stats64"]
        return stats["rx"]["bytes"], stats["tx"]["bytes"]

    def set_link(self, up: bool) -> None:
        _ip("-n", self.ns, "link", "set", self.device, "up" if up else "down")


def unavailable_reason() -> str | None:
    """Why two namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    if os.geteuid() != 0:
        return "needs root to create network namespaces (CI runs as root)"
    probe = f"pdtrt-probe-{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"cannot create a network namespace: {exc.stderr.strip()}"
    _ip("netns", "delete", probe)
    return None


@contextmanager
def two_hosts(tag: str) -> Iterator[tuple[Host, Host]]:
    """Hosts ``a`` (SUBNET.1) and ``b`` (SUBNET.2) on one veth link; both deleted on exit."""
    base = f"pdtrt-{os.getpid()}-{tag}"
    a = Host(ns=f"{base}-a", device=DEVICE, address=f"{SUBNET}.1")
    b = Host(ns=f"{base}-b", device=DEVICE, address=f"{SUBNET}.2")
    made: list[str] = []
    try:
        for host in (a, b):
            _ip("netns", "add", host.ns)
            made.append(host.ns)
            _ip("-n", host.ns, "link", "set", "lo", "up")
        # created directly inside the two namespaces: the name never exists outside them
        _ip("link", "add", a.device, "netns", a.ns, "type", "veth", "peer", "name", b.device,
            "netns", b.ns)
        for host in (a, b):
            _ip("-n", host.ns, "addr", "add", f"{host.address}/24", "dev", host.device)
            host.set_link(True)
        yield a, b
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
