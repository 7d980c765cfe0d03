"""Every veth of a fabric made by one ``ip -batch``, not a shell round trip each.

Mininet's ``Link`` makes its pair from the first node's shell (``ip link
add``) and brings each end up there (``ifconfig up``): three round trips a
link, and a host's default interface then takes four more (``ifconfig``
down, MAC, up, address). ``BatchedLink`` only records its pair: the
Mininet objects (``Intf``, ports, names) are made as before, nothing is run.
``BatchedMininet`` then creates all pairs in one ``ip`` process of this
namespace -- each end straight into its node's namespace, with its MAC and
MTU -- and brings up the ends that are in this namespace (the switches').
An end in a node's own namespace is brought up by the node's
configuration: a server's (``RoceHost.config``, one round trip with its
addresses and routes), a management network's (``configure_management``).
"""
from __future__ import annotations

import subprocess

from mininet.link import Link
from mininet.net import Mininet

from emulator.errors import FabricEmuError


class BatchedLink(Link):
    """A ``Link`` whose veth pair ``BatchedMininet`` creates later, with the rest."""

    def __init__(self, node1, node2, **params):
        self.pair: tuple | None = None
        # up=None: Intf.config leaves the end as created (down)
        super().__init__(node1, node2, fast=True, up=None, **params)

    def makeIntfPair(self, intfname1, intfname2, addr1=None, addr2=None,   # noqa: N802 (Mininet's)
                     node1=None, node2=None, deleteIntfs=False):
        self.pair = (intfname1, addr1, node1, intfname2, addr2, node2)


def batch_lines(links, mtu_bytes: int | None = None) -> list[str]:
    """The ``ip -batch`` lines that create ``links`` (``BatchedLink``s), each
    end in its node's namespace with its MAC (and ``mtu_bytes``, if given),
    then bring up the ends in this namespace's nodes (not in a namespace)."""
    mtu = f" mtu {mtu_bytes}" if mtu_bytes else ""
    lines, up = [], []
    for link in links:
        name1, addr1, node1, name2, addr2, node2 = link.pair
        end1 = f"name {name1}" + (f" address {addr1}" if addr1 else "") + mtu
        end2 = f"name {name2}" + (f" address {addr2}" if addr2 else "") + mtu
        lines.append(f"link add {end1} netns {node1.pid} type veth peer {end2} netns {node2.pid}")
        up += [f"link set dev {name} up" for name, node in ((name1, node1), (name2, node2))
               if not node.inNamespace]
    return lines + up


class BatchedMininet(Mininet):
    """Mininet whose links are ``BatchedLink``s, made at once after the nodes.

    ``mtu_bytes``: every link's MTU as created (None: the kernel's, 1500)."""

    def __init__(self, *args, mtu_bytes: int | None = None, **kwargs):
        self.mtu_bytes = mtu_bytes
        super().__init__(*args, link=BatchedLink, **kwargs)

    def buildFromTopo(self, topo=None):   # noqa: N802 (Mininet's)
        super().buildFromTopo(topo)
        pending = [link for link in self.links if getattr(link, "pair", None) is not None]
        if not pending:
            return
        proc = subprocess.run(["ip", "-batch", "-"], input="\n".join(
            batch_lines(pending, self.mtu_bytes)) + "\n", capture_output=True, text=True)
        if proc.returncode != 0:
            raise FabricEmuError(f"creating the fabric's links failed: {proc.stderr.strip()}")
        for link in pending:
            link.pair = None
