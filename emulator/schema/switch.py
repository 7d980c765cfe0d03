"""The embedded switch process's JSON config (``python -m emulator.dataplane
CONFIG.json``): written by the Mininet node (``emulator/net/nodes.py``),
read by ``emulator/dataplane/switch.py``. Rates and delays are already
dilated (wall); bytes are not::

    {"name": "leaf1", "device_id": 1, "grpc_port": 50001,
     "ports": [{"port_no": 1, "ifname": "leaf1-eth1", "rate_bps": 1000000,
                "delay_ns": 10000000}, ...],
     "stats_path": "RUN/leaf1.stats.json",      # optional; its directory gets the raw logs
     "p4info_path": null,                       # optional: default p4src/fabric.p4info.txtpb
     "buffer_bytes": 4000000,                   # shared buffer of the switch
     "sample_interval_ns": 10000000,            # queue-depth sampling (wall ns); 0: off
     "router_mac": "02:00:00:00:01:01",         # source MAC of the PFC frames it sends
     "pcap": false,                             # RUN/{ifname}.pcap per port
     "seed": 1,                                 # ECN marking's random numbers
     "gnmi_listen": "127.0.0.1:50002",          # its gNMI server (docs/telemetry.md); null: none
     "ib": null,                                # InfiniBand: emulator/ib/switch.py (IbLinkConfig)
     "pfc_watchdog": null}                      # {detection_ns, restoration_ns, action}: PfcWatchdogConfig
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, field_validator

from emulator.schema.faults import DownInterval, EndFaults
from emulator.schema.load import ProcessConfig, StrictSpec
from emulator.schema.nic import IbLinkLayer
from emulator.wire import MAX_SWITCH_PORTS

DEFAULT_BUFFER_BYTES = 4_000_000
_MAC_RE = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


class PortConfig(StrictSpec):
    port_no: int = Field(ge=1, le=MAX_SWITCH_PORTS)
    ifname: str
    rate_bps: int = Field(gt=0)
    delay_ns: int = Field(ge=0)
    buffer_bytes: Optional[int] = Field(None, gt=0)   # old per-port FIFO limit: summed into the shared buffer
    faults: Optional[EndFaults] = None                 # scripted faults of the link it sends on
    # when the direction INTO the port is down (its sender's intervals): the
    # port sees no signal a link delay later, reports it (dataplane/port_status.py)
    # and its gNMI oper-status is DOWN (dataplane/gnmi_server)
    rx_down: list[DownInterval] = []


class PfcWatchdogSpec(StrictSpec):
    """The experiment's ``switch.pfc_watchdog``, as SONiC's pfcwd: a lossless
    queue held paused by received PFC for ``detection_time_us`` while it
    holds frames is in a storm: ``drop`` discards its frames (and the
    frames of that priority arriving on that port), ``forward`` sends them
    ignoring the pause; once no PAUSE came for ``restoration_time_us`` it
    honours PFC again (``emulator/dataplane/pfcwd.py``; docs/faults.md).
    Fabric µs; SONiC's defaults are 200 ms each, for runs of minutes."""
    enabled: bool = False
    detection_time_us: float = Field(200.0, gt=0, allow_inf_nan=False)
    restoration_time_us: float = Field(400.0, gt=0, allow_inf_nan=False)
    action: Literal["drop", "forward"] = "drop"


class PfcWatchdogConfig(StrictSpec):
    """The switch process's watchdog: its times in the switch clock's ns
    (dilated in a dilated run)."""
    detection_ns: int = Field(gt=0)
    restoration_ns: int = Field(gt=0)
    action: Literal["drop", "forward"] = "drop"


class IbLinkConfig(IbLinkLayer):
    """An InfiniBand switch's link layer (``python -m emulator.ib.switch``):
    data VLs per port and each VL's receive buffer and flow-control updates
    (``emulator.ib.credits.CreditParams``; here ``update_period_ns`` is wall
    ns, already dilated by the runner, ``net.mininet_topo.ib_link_config``)."""
    vls: int = Field(1, description="data VLs per port: 1, 2, 4 or 8")

    @field_validator("vls")
    @classmethod
    def _vls(cls, v: int) -> int:
        if v not in (1, 2, 4, 8):
            raise ValueError("an IB port runs 1, 2, 4 or 8 data VLs")
        return v


class SwitchConfig(ProcessConfig):
    name: str
    device_id: int = Field(ge=1)
    grpc_port: int = Field(ge=0, le=65535)
    ports: list[PortConfig]
    p4info_path: Optional[str] = None
    stats_path: Optional[str] = None
    buffer_bytes: Optional[int] = Field(None, gt=0)   # shared buffer; None: sum of the ports' buffer_bytes, or 4 MB
    sample_interval_ns: int = Field(0, ge=0)
    router_mac: Optional[str] = None                   # None: 02:00:00:fe:<device id>
    pcap: bool = False
    seed: int = 0
    # HOST:PORT of its gNMI server (dataplane/gnmi_server; the management
    # network's address once it has one); None: no gNMI server
    gnmi_listen: Optional[str] = None
    # Where its P4Runtime server listens (gnmi_listen's host too, when it
    # has a management port), and the namespace both servers bind in (a
    # ``/proc/PID/ns/net`` path: its management port's; None: the process's)
    grpc_host: str = "127.0.0.1"
    mgmt_netns: Optional[str] = None
    ib: Optional[IbLinkConfig] = None                  # set: an InfiniBand switch (p4src/ib.p4)
    # when the switch is down (a scripted switch_down until its switch_up):
    # a modelled reboot, dataplane/port_status.py
    reboots: list[DownInterval] = []
    pfc_watchdog: Optional[PfcWatchdogConfig] = None   # None: off

    @field_validator("gnmi_listen")
    @classmethod
    def _listen(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise ValueError("not HOST:PORT (a port 0-65535; 0: any free one)")
        return v

    @field_validator("router_mac")
    @classmethod
    def _mac(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _MAC_RE.fullmatch(v):
            raise ValueError("not a MAC address (xx:xx:xx:xx:xx:xx)")
        return v

    @property
    def run_dir(self) -> Path | None:
        """Where raw logs and pcaps go: the stats file's directory."""
        return Path(self.stats_path).parent if self.stats_path else None

    def shared_buffer_bytes(self) -> int:
        if self.buffer_bytes is not None:
            return self.buffer_bytes
        per_port = [p.buffer_bytes for p in self.ports if p.buffer_bytes is not None]
        return sum(per_port) if per_port else DEFAULT_BUFFER_BYTES

    def router_mac_bytes(self) -> bytes:
        if self.router_mac:
            return bytes.fromhex(self.router_mac.replace(":", ""))
        return bytes([0x02, 0, 0, 0xFE]) + (self.device_id & 0xFFFF).to_bytes(2, "big")


class SwitchPackConfig(ProcessConfig):
    """Several embedded switches in one process (``dataplane/pack.py``): a
    ``SwitchConfig`` file per member."""
    members: list[str] = Field(min_length=1)


def snapshot_request_path(stats_path: str | Path) -> Path:
    """The file that says which switch of a pack a SIGUSR1 is for: the
    Mininet node creates it, the pack removes it and takes that switch's
    snapshot (a process of one switch needs none)."""
    return Path(f"{stats_path}.request")
