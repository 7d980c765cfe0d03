"""A live fabric from Python: up on ``with``, torn down on exit -- exceptions included.

    import emulator as fe

    with fe.Fabric("topologies/clos-2x2.yaml", dilation=10000) as fab:   # root
        fab.ping("h1", "h4")                      # True: routed over the P4 switches
        fab.cmd("h1", "ip -br addr")              # a command in h1's namespace
        fab.table_entries("leaf1", "ipv4_lpm")    # P4Runtime reads, decoded
        fab.port_counters()[("leaf1", 1)]["tx_packets"]
        fab.set_qos({"ecn": {"kmin_bytes": 20000}})   # P4Runtime writes, between runs
        res = fab.run([{"src": "h2", "dst": "h1", "size_bytes": 1 << 20}])   # a Result
        fab.take_primary()                        # after another P4Runtime client took over

The source is an experiment (``Experiment``, or its file) -- its QoS, buffer
and MTU are installed -- or a topology (file or dict), which gets the
experiment defaults. ``target``: "embedded", "bmv2" or "auto". A live
fabric keeps dilated time: the kernel sends its traffic (ping, a shell's
commands) on the wall clock, so an experiment's ``time: virtual`` is
refused. ``dilation`` scales link rates and delays as in a run (``auto``:
the cached D of the experiment, else 10000). One fabric runs at a time on a machine (the run
lock): a second one, or a ``fabric-emu run``, is refused with one line.

The controller is each switch's primary P4Runtime client (election id
``controller.CONTROLLER_ELECTION_ID``). Another client with a higher id --
p4runtime-shell, say -- takes that away: the controller logs one line per
switch naming the other's id, and ``set_qos`` is refused with one line
(``NotPrimaryError``), nothing written, until ``take_primary()``.
"""
from __future__ import annotations

# Deferred imports: methods import the layers below them when called:
# ``import emulator`` stays light.

import contextlib
import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Mapping


class Fabric:
    """A fabric up and programmed while the ``with`` block runs."""

    def __init__(self, source, *, target: str | None = None, dilation: float | str = "auto",
                 out: str | Path | None = None, pcap: bool = False, force: bool = False):
        from emulator.experiment.dilation import dilation_for_cli, with_dilation
        from emulator.experiment.runner import resolve_target
        from emulator.experiment.time_mode import planned_target, resolve_time

        from emulator.api import as_experiment
        exp = as_experiment(source, target=target)
        exp = resolve_time(exp, planned_target(exp.spec.target), live=True)
        self.target = resolve_target(exp.spec.target)
        self.experiment = dilation_for_cli(with_dilation(exp, dilation), self.target)
        self._tmp = None
        if out is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fabric-emu-live-")
            out = self._tmp.name
        self.run_dir = Path(out)
        self.force = force
        self.pcap = pcap
        self._odir = contextlib.ExitStack()      # ``out``: an output directory, as a run's
        self.net = None            # emulator.net.fabric.FabricNet while up
        self._runs = 0

    # lifecycle
    def __enter__(self) -> "Fabric":
        from emulator.experiment.outdir import output_dir
        from emulator.experiment.runner import fabric_net
        if self._tmp is None:     # the user's: checked, marked, never cleared of others' files
            self._odir.enter_context(output_dir(self.run_dir, force=self.force, what="fabric",
                                                force_hint="force=True"))
        try:
            self.net = fabric_net(self.experiment, self.run_dir, self.pcap, self.target)
            self.net.start()
        except BaseException:
            self.net = None
            self._odir.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.net is not None:
                self.net.stop()
        finally:
            self.net = None
            self._odir.close()
            if self._tmp is not None:
                self._tmp.cleanup()

    def _up(self):
        if self.net is None:
            raise RuntimeError("the fabric is not up: use it inside `with Fabric(...) as fab:`")
        return self.net

    @property
    def fabric(self):
        """The resolved topology (nodes, addresses, routes): ``emulator.topo.Fabric``."""
        return self.experiment.fabric

    @property
    def dilation(self) -> float:
        return self.experiment.dilation

    @property
    def controller(self):
        """The ``FabricController``: one P4Runtime connection per switch (primary)."""
        return self._up().controller

    # hosts
    def cmd(self, host: str, command: str) -> str:
        """Run a shell command in a host's (server's) namespace; its output."""
        return self._up().host(host).cmd(command)

    def ping(self, src: str, dst: str, count: int = 1, timeout_s: float = 5.0) -> bool:
        """Whether ``src`` gets ICMP echo replies from ``dst``'s address."""
        ip = self.fabric.addresses.host_ip(dst)
        out = self.cmd(src, f"ping -c {count} -W {max(1, round(timeout_s))} {ip}")
        return " 0% packet loss" in out

    # P4Runtime
    def port_counters(self) -> dict[tuple[str, int], dict]:
        """(switch, port) -> the P4 port counters (rx/enq/tx/pipeline_drop packets and bytes)."""
        return self.controller.read_port_counters()

    def table_entries(self, switch: str, table: str | None = None) -> list:
        """A switch's table entries (P4Runtime ``TableEntry`` messages), all or one table's."""
        return self.controller.conns[switch].read_table_entries(table)

    def take_primary(self) -> dict[str, int]:
        """Make the controller primary again on the switches where another
        P4Runtime client took over (it never does so by itself): {switch:
        the controller's election id now}, empty if it was primary everywhere."""
        return self.controller.take_primary()

    def run(self, traffic: list | None = None, *, out: str | Path | None = None,
            set=None, quiet: bool = False, plots: bool = True):
        """Run traffic on this fabric; an ``emulator.Result``. ``traffic``: the
        experiment file's ``traffic:`` list (None: the experiment's own);
        ``set``: other fields of the experiment (not its dilation or QoS: the
        fabric has them -- ``set_qos`` changes the QoS). Runs one after the
        other see the same switches; each run's counters, switch stats and
        raw logs are its own (``runner.run_on_fabric``). ``plots``: false, no
        PNG figures (the numbers and CSVs alone)."""
        import io

        from rich.console import Console

        from emulator.api import Result, experiment_data
        from emulator.experiment.model import experiment_from_dict
        from emulator.experiment.overrides import apply_sets
        from emulator.experiment.runner import run_on_fabric

        data = apply_sets(experiment_data(self.experiment), set)
        if traffic is not None:
            data["traffic"] = traffic
        data["time"], data["dilation"] = self.experiment.time_mode, self.experiment.dilation
        data["qos"] = self.experiment.spec.qos.model_dump()
        exp = experiment_from_dict(data, self.experiment.source)
        self._runs += 1
        out = Path(out) if out is not None else self.run_dir / f"traffic-{self._runs}"
        console = Console(file=io.StringIO()) if quiet else Console(stderr=True)
        return Result(run_on_fabric(self._up(), exp, out, console, plots=plots), out)

    def set_qos(self, changes: Mapping[str, Any]) -> None:
        """Change ECN/PFC thresholds over P4Runtime: ``changes`` is merged into
        the experiment's ``qos`` (``{"ecn": {"kmin_bytes": 20000}}``)."""
        from emulator.experiment.model import check_qos
        from emulator.schema.load import validate
        from emulator.schema.qos import QosSpec
        merged = _merge(self.experiment.spec.qos.model_dump(), dict(changes))
        exp = self.experiment
        qos = validate(QosSpec, merged, "set_qos", prefix="qos")    # ConfigErrors, as a file's
        check_qos(qos, exp.spec, exp.fabric, "set_qos")
        self.controller.set_qos(qos)
        self.experiment = dataclasses.replace(
            self.experiment, spec=self.experiment.spec.model_copy(update={"qos": qos}))


def _merge(base: dict, changes: Mapping) -> dict:
    out = dict(base)
    for k, v in changes.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


__all__ = ["Fabric"]
