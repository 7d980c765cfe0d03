"""A run's gNMI telemetry collector (``telemetry: {sample_us: N}``; docs/telemetry.md).

Before the agents start (fabric time 0 on every virtual clock), it subscribes
to every switch's gNMI server -- STREAM, SAMPLE every ``sample_us`` of fabric
time on ``telemetry.paths``, ON_CHANGE on oper-status -- and holds what comes
back until the switches stop; then it writes ``telemetry.csv`` whole:

    fabric_ns,switch,path,value
    0,leaf1,/interfaces/interface[name=leaf1-eth1]/state/counters/in-pkts,0

The switches take the samples at exact fabric times (``gnmi_server.sampler``)
and the rows are sorted (time, switch, then the switch's order), so a
virtual-time run's file is the same in every rerun. Virtual time only: a
dilated switch's clock is wall time, its samples a wall-clock poll.
"""
from __future__ import annotations

# deferred imports: gRPC and the gNMI bindings load only in a run that collects telemetry
import csv
import io
import threading
from pathlib import Path

from emulator.atomic import atomic_write_text
from emulator.errors import ConfigError, RunAborted
from emulator.experiment.time_mode import VIRTUAL, run_time_mode

SYNC_TIMEOUT_S = 20.0           # every subscription in place (the switches are up)
END_TIMEOUT_S = 30.0            # every stream ended after the switches stopped
HEADER = ("fabric_ns", "switch", "path", "value")


def telemetry_problem(exp, target: str) -> str | None:
    """Why ``exp``'s telemetry cannot run (None: it can, or it is off)."""
    if exp.spec.telemetry.sample_us is None:
        return None
    if target != "embedded":
        return "needs the embedded target (BMv2 serves no gNMI here)"
    if run_time_mode(exp) != VIRTUAL:
        return "needs virtual time (time: virtual or auto): a dilated switch samples wall time"
    if exp.spec.cluster is not None:
        return "is not supported on a cluster yet (its switches' gNMI is on their servers)"
    if exp.fabric.link_layer == "infiniband":
        return "is not supported on InfiniBand yet (its switches serve no gNMI)"
    return None


def telemetry_collector(exp, target: str) -> "TelemetryCollector | None":
    """The run's collector (None: telemetry is off); refused before anything is built."""
    why = telemetry_problem(exp, target)
    if why is not None:
        raise ConfigError(exp.source, "telemetry.sample_us", why)
    if exp.spec.telemetry.sample_us is None:
        return None
    return TelemetryCollector(exp, subscription_plan(exp))


def subscription_plan(exp) -> dict[str, list[str]]:
    """Switch -> the ``telemetry.paths`` that select some leaf of it; a path
    that is malformed or selects nothing on any switch is refused."""
    from emulator.dataplane.gnmi_server.leaves import leaf_paths
    from emulator.dataplane.gnmi_server.paths import PathError, matches, parse_elems
    leaves = {sw.name: leaf_paths([p.ifname for p in exp.fabric.ports(sw.name)])
              for sw in exp.fabric.switches()}
    plan: dict[str, list[str]] = {name: [] for name in leaves}
    for text in exp.spec.telemetry.paths:
        try:
            pattern = parse_elems(text)
        except PathError as e:
            raise ConfigError(exp.source, "telemetry.paths", str(e)) from None
        for name, of_switch in leaves.items():
            if any(matches(pattern, leaf) for leaf in of_switch):
                plan[name].append(text)
        if not any(text in paths for paths in plan.values()):
            raise ConfigError(exp.source, "telemetry.paths",
                              f"{text} selects no leaf of any switch (the leaves: "
                              "docs/telemetry.md)")
    return plan


class _Stream:
    """One switch's subscription, read by a thread of its own."""

    def __init__(self, name: str, address: str):
        self.name, self.address = name, address
        self.rows: list[tuple] = []
        self.synced = threading.Event()
        self.error: str | None = None
        self.call = None
        self.thread: threading.Thread | None = None

    def read(self, responses) -> None:
        from emulator.dataplane.gnmi_server.encode import decode_value
        from emulator.dataplane.gnmi_server.paths import format_path
        import grpc
        paths: dict[bytes, str] = {}
        try:
            for i, resp in enumerate(responses):
                if resp.sync_response:
                    self.synced.set()
                    continue
                n = resp.update
                for k, u in enumerate(n.update):
                    key = u.path.SerializeToString()
                    path = paths.get(key) or paths.setdefault(key, format_path(u.path))
                    self.rows.append((n.timestamp, self.name, i, k, path, decode_value(u.val)))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self.error = f"{e.code().name}: {e.details()}"
        finally:
            self.synced.set()


class TelemetryCollector:
    """``plan``: switch -> the paths it is sampled on (``subscription_plan``)."""

    def __init__(self, exp, plan: dict[str, list[str]]):
        self.exp = exp
        self.plan = plan
        self.sample_ns = round(exp.spec.telemetry.sample_us * 1000)
        self.streams: list[_Stream] = []
        self._channels = []

    def _request(self, paths: list[str]):
        from gnmi import gnmi_pb2 as pb
        from emulator.dataplane.gnmi_server.paths import parse_path
        subs = [pb.Subscription(path=parse_path(p), mode=pb.SAMPLE, sample_interval=self.sample_ns)
                for p in paths]
        subs.append(pb.Subscription(path=parse_path("/interfaces/interface/state/oper-status"),
                                    mode=pb.ON_CHANGE))
        return pb.SubscribeRequest(subscribe=pb.SubscriptionList(
            mode=pb.SubscriptionList.STREAM, encoding=pb.PROTO, subscription=subs))

    def start(self, fnet) -> None:
        """Subscribe to every switch; back once each has its subscription in place."""
        import grpc
        from gnmi import gnmi_pb2_grpc as pb_grpc
        for sw in self.exp.fabric.switches():
            request = self._request(self.plan[sw.name])
            address = fnet.switch(sw.name).gnmi_address
            stream = _Stream(sw.name, address)
            channel = grpc.insecure_channel(address)
            self._channels.append(channel)
            stream.call = pb_grpc.gNMIStub(channel).Subscribe(iter([request]))
            stream.thread = threading.Thread(target=stream.read, args=(stream.call,),
                                             name=f"telemetry-{sw.name}", daemon=True)
            stream.thread.start()
            self.streams.append(stream)
        for s in self.streams:
            if not s.synced.wait(SYNC_TIMEOUT_S):
                raise RunAborted(f"telemetry: switch {s.name}'s gNMI server ({s.address}) "
                                 f"did not answer the subscription in {SYNC_TIMEOUT_S:g} s")
            if s.error is not None:
                raise ConfigError(self.exp.source, "telemetry.paths",
                                  f"switch {s.name} refused the subscription: {s.error}")

    def finish(self, csv_path: Path) -> int:
        """Once the switches stopped: every stream's end awaited, telemetry.csv
        written whole; the number of rows."""
        for s in self.streams:
            s.thread.join(END_TIMEOUT_S)
            if s.thread.is_alive():
                s.call.cancel()
                raise RunAborted(f"telemetry: switch {s.name}'s stream did not end "
                                 f"{END_TIMEOUT_S:g} s after the switches stopped")
            if s.error is not None:
                raise RunAborted(f"telemetry: switch {s.name}'s stream broke: {s.error}")
        for channel in self._channels:
            channel.close()
        rows = sorted(r for s in self.streams for r in s.rows)
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(HEADER)
        w.writerows((t, name, path, value) for t, name, _, _, path, value in rows)
        atomic_write_text(csv_path, out.getvalue())
        return len(rows)
