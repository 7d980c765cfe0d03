"""What a report is drawn from: a finished run directory's own files.

``RunData.load(dir)`` reads ``summary.json`` and rebuilds the run's fabric
(``emulator.topo.Fabric``) from what the run recorded, so that a report of a
past run needs neither the experiment file nor its topology file (either may
have changed or moved since):

* the switches and their ports, with each port's peer and role, from
  ``summary.json``'s ``ports`` (read and checked by ``read_summary``); a peer that is not a switch is a host;
* each switch port's rate and delay from the switch's config in the raw
  directory (``run/<switch>.switch.json``); a host link takes its leaf port's.

The CSVs are read on demand, column by column (a 64-host all-to-all's
``flow_rate.csv`` has millions of rows), by ``results_io``'s readers.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import FabricEmuError
from emulator.experiment.results_io import read_result_columns, read_result_csv
from emulator.experiment.summary_file import read_summary
from emulator.rundir import RunDir
from emulator.topo.graph import HOST_PORT_NO, Fabric, Link, Node


class NotARunDir(FabricEmuError):
    """The directory holds no readable run (one line: which file, why)."""


@dataclass
class RunData:
    rd: RunDir
    summary: dict
    fabric: Fabric

    @classmethod
    def load(cls, where) -> "RunData":
        rd = RunDir.of(where)
        if not rd.path.is_dir():
            raise NotARunDir(f"{rd.path}: not a directory (a run's results directory expected)")
        return cls.of_summary(rd, read_summary(rd.path))  # one line naming the file if not one

    @classmethod
    def of_summary(cls, rd: RunDir, summary: dict) -> "RunData":
        """The run of ``rd`` with ``summary`` (checked, as ``read_summary`` gives it)."""
        ports = summary.get("ports")
        if not isinstance(ports, list):
            raise NotARunDir(f"{rd.summary}: ports: missing (not a run's summary)")
        for i, p in enumerate(ports):
            missing = [k for k in ("node", "port", "peer") if k not in p]
            if missing:
                raise NotARunDir(f"{rd.summary}: ports[{i}].{missing[0]}: missing "
                                 "(the fabric is drawn from the ports and their peers)")
        return cls(rd, summary, run_fabric(rd, summary))

    @property
    def end_ns(self) -> float:
        """The run's span in fabric time."""
        return float(self.summary.get("fabric_ns") or 0)

    def rows(self, name: str) -> list[dict]:
        return read_result_csv(self.rd.file(name))

    def columns(self, name: str, columns: tuple[str, ...], where: dict | None = None):
        return read_result_columns(self.rd.file(name), columns, where)

    def has(self, name: str) -> bool:
        return self.rd.file(name).is_file()


def _port_rates(rd: RunDir, switch: str) -> dict[int, tuple[int, int]]:
    """{port_no: (rate_bps, delay_ns)} of a switch's config; {} if absent."""
    try:
        cfg = json.loads(rd.raw.switch_config(switch).read_text())
        return {int(p["port_no"]): (int(p["rate_bps"]), int(p["delay_ns"]))
                for p in cfg.get("ports", [])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def run_fabric(rd: RunDir, summary: dict) -> Fabric:
    """The fabric of the run, as its summary's ports and switch configs record it."""
    ports = sorted(summary["ports"], key=lambda p: (p["node"], int(p["port"])))
    roles = {p["node"]: p.get("role", "leaf") for p in ports}
    rates = {sw: _port_rates(rd, sw) for sw in roles}
    hosts = sorted({p["peer"] for p in ports if p["peer"] not in roles}, key=_natural)
    counters: dict[str, int] = {}
    nodes = []
    for name, role in [*((h, "host") for h in hosts),
                       *sorted(roles.items(), key=lambda kv: _natural(kv[0]))]:
        counters[role] = counters.get(role, 0) + 1
        nodes.append(Node(name, role, counters[role]))
    links, taken = [], set()
    facing: dict[tuple[str, str], list[int]] = {}      # (node, peer): node's ports to peer
    for p in ports:
        facing.setdefault((p["node"], p["peer"]), []).append(int(p["port"]))
    for p in ports:
        node, port_no, peer = p["node"], int(p["port"]), p["peer"]
        if (node, port_no) in taken:
            continue
        rate_bps, delay_ns = rates[node].get(port_no, (0, 0))
        if peer not in roles:                           # a host link: host first
            links.append(Link(peer, HOST_PORT_NO, node, port_no, rate_bps, delay_ns))
            continue
        peer_port = next((q for q in facing.get((peer, node), ()) if (peer, q) not in taken),
                         None)
        if peer_port is None:
            continue
        taken |= {(node, port_no), (peer, peer_port)}
        lower = _TIER.get(roles[node], 0) <= _TIER.get(roles[peer], 0)
        a, a_port, b, b_port = ((node, port_no, peer, peer_port) if lower
                                else (peer, peer_port, node, port_no))
        links.append(Link(a, a_port, b, b_port, rate_bps, delay_ns))
    return Fabric(str(summary.get("topology") or "fabric"), str(summary.get("source") or ""),
                  tuple(nodes), tuple(links), host_prefix="10.0.0.0/16")


_TIER = {"host": 0, "leaf": 1, "spine": 2, "superspine": 3}


def tier(role: str) -> int:
    return _TIER.get(role, 1)


def _natural(name: str):
    """``h2`` before ``h10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


__all__ = ["NotARunDir", "RunData", "run_fabric", "tier"]
