"""Network namespaces joined to this one by veth pairs: real network partitions for the tests.

A process started with :meth:`Netns.prefix` runs in the namespace and reaches this one only through the
namespace's links; :meth:`Link.cut` takes one end of a link down and the kernel drops every packet, so the
peers see silence (no reset, no refusal), which is what a partition looks like. ``tc netem`` is not used
(the kernels these tests run on lack it).

Each link is a /30 of its own in 10.<block>.<n>.0/24 (``n`` from the test process's pid), reachable from
nothing else. Needs root and iproute2; :func:`unavailable` says why not, for ``pytest.skip``. Everything is
removed by :meth:`Netns.down` (deleting the namespace deletes its veth ends and their peers).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

IP = shutil.which("ip")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    assert IP is not None
    return subprocess.run([IP, *args], check=check, capture_output=True, timeout=10)


def unavailable() -> str | None:
    """None when network namespaces can be made here, else why not."""
    if IP is None or os.geteuid() != 0:
        return "a network namespace needs root and iproute2"
    probe = f"pgas-probe-{os.getpid()}"
    if ip("netns", "add", probe, check=False).returncode != 0:
        return "this machine does not allow network namespaces"
    ip("netns", "del", probe, check=False)
    return None


@dataclass
class Link:
    """One veth pair: ``host_if``/``host_ip`` in this namespace, ``ns_if``/``ns_ip`` in the other."""

    netns: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str

    @property
    def subnet(self) -> str:
        return f"{self.host_ip.rsplit('.', 1)[0]}.{int(self.host_ip.rsplit('.', 1)[1]) - 1}/30"

    def cut(self, end: str = "host") -> None:
        """Take ``end`` ("host" or "ns") of the link down. The other end keeps its address and its route
        (the kernel marks it linkdown): packets sent from there go nowhere, with no error to the sender."""
        if end == "host":
            ip("link", "set", self.host_if, "down")
        else:
            ip("netns", "exec", self.netns, "ip", "link", "set", self.ns_if, "down")

    def heal(self) -> None:
        ip("link", "set", self.host_if, "up")
        ip("netns", "exec", self.netns, "ip", "link", "set", self.ns_if, "up")


class Netns:
    """A network namespace of the caller's own, with ``lo`` up, and its veth links to this namespace."""

    def __init__(self, tag: str, *, block: int = 214) -> None:
        self.name = f"pgas-{tag}-{os.getpid()}"
        self.tag = tag
        self.block = block
        self.n = os.getpid() % 250 + 1
        self.links: list[Link] = []

    def up(self) -> Netns:
        ip("netns", "add", self.name)
        ip("netns", "exec", self.name, "ip", "link", "set", "lo", "up")
        return self

    def link(self) -> Link:
        """A new veth pair between this namespace and the other, both ends up."""
        k = len(self.links)
        stem = f"{self.tag[:3]}{os.getpid()}{k}"[:13]
        link = Link(
            netns=self.name,
            host_if=f"{stem}h",
            ns_if=f"{stem}n",
            host_ip=f"10.{self.block}.{self.n}.{4 * k + 1}",
            ns_ip=f"10.{self.block}.{self.n}.{4 * k + 2}",
        )
        ip("link", "add", link.host_if, "type", "veth", "peer", "name", link.ns_if)
        self.links.append(link)
        ip("link", "set", link.ns_if, "netns", self.name)
        ip("addr", "add", f"{link.host_ip}/30", "dev", link.host_if)
        ip("link", "set", link.host_if, "up")
        ip("netns", "exec", self.name, "ip", "addr", "add", f"{link.ns_ip}/30", "dev", link.ns_if)
        ip("netns", "exec", self.name, "ip", "link", "set", link.ns_if, "up")
        return link

    def prefix(self) -> list[str]:
        """The command prefix that runs a program in the namespace (``ip netns exec`` execs it: same pid)."""
        assert IP is not None
        return [IP, "netns", "exec", self.name]

    def down(self) -> None:
        """Delete the links and the namespace (no error for what is already gone)."""
        for link in self.links:
            ip("link", "del", link.host_if, check=False)
        ip("netns", "del", self.name, check=False)
