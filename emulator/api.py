"""The emulator as a library: load or build an experiment, run it, read a typed result.

    import emulator as fe

    exp = fe.load_experiment("experiments/incast-pfc.yaml", set={"qos.pfc.xoff_bytes": 20000})
    res = fe.run(exp, out="results/incast", dilation="auto")   # root: builds the fabric
    res.lossless_drops(), res.pauses(), res.ecn_marks(), res.fct_us(99), res.retransmissions()

    exp = fe.build_experiment({"name": "mine", "topology": "topologies/clos-2x2.yaml",
                         "traffic": [{"src": "h1", "dst": "h4", "size_bytes": 1 << 20}]})
    table = fe.sweep(exp, {"qos.ecn.kmin_bytes": [5000, 20000], "nic.mtu_bytes": [1024, 4096]},
                     out="results/grid")              # every point's Result, one CSV

    with fe.Fabric("topologies/clos-2x2.yaml") as fab:  # a live fabric (``emulator.live``)
        fab.cmd("h1", "ping -c1 10.0.2.1")

Experiments built in Python go through the same schema and checks as files
(``emulator.experiment.model``); a result is ``summary.json`` behind typed
accessors (``Result.summary`` keeps the whole dict).
"""
from __future__ import annotations

# Deferred imports: functions import the layers below them when called:
# ``import emulator`` stays light for loading an experiment.

import csv
import io
import itertools
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from emulator.atomic import atomic_open
from emulator.experiment.model import experiment_from_dict, read_experiment_data
from emulator.experiment.outdir import output_dir
from emulator.experiment.overrides import apply_sets
from emulator.experiment.resolved import Experiment
from emulator.experiment.sweep import value_label
from emulator.experiment.time_mode import check_time
from emulator.rundir import RunDir
from emulator.schema.experiment import ExperimentSpec
from emulator.schema.load import read_yaml
from emulator.topo import fabric_from_dict, load_fabric

Sets = Mapping[str, Any] | Iterable[str] | None     # {"a.b": value} or ["a.b=yaml", ...]


def load_experiment(path: str | Path, *, set: Sets = None,
                    target: str | None = None) -> Experiment:
    """An experiment file, with fields changed (``set``) before it is checked."""
    return experiment_from_dict(apply_sets(read_experiment_data(path), set), path, target)


def build_experiment(data: Mapping[str, Any], *, base_dir: str | Path = ".", set: Sets = None,
                     target: str | None = None) -> Experiment:
    """An experiment from a dict shaped like the file (``topology:`` a path,
    relative to ``base_dir``, or the topology itself as a dict)."""
    source = Path(base_dir) / f"<{data.get('name', 'experiment')}>.yaml"
    return experiment_from_dict(apply_sets(dict(data), set), source, target)


def as_experiment(source, *, set: Sets = None, target: str | None = None) -> Experiment:
    """What a live fabric or a test runs: an ``Experiment`` as it is; a dict or
    file shaped like an experiment (``set`` applied); a topology (dict or
    file) as an experiment with the file defaults and no traffic."""
    from emulator.experiment.plan import is_experiment

    if isinstance(source, Experiment):
        return source
    if isinstance(source, Mapping):
        if is_experiment(source):
            return build_experiment(source, set=set, target=target)
        return _no_traffic(fabric_from_dict(dict(source)), dict(source), "<topology>", target)
    path = Path(source)
    data = read_yaml(path, "experiment or topology file")
    if is_experiment(data):
        return experiment_from_dict(apply_sets(data, set), path, target)
    path = path.resolve()
    return _no_traffic(load_fabric(path), str(path), str(path), target)


def _no_traffic(fabric, topology: str | dict, source: str, target: str | None) -> Experiment:
    """A topology (its file's absolute path, or its data) as an experiment
    with the file defaults (switch buffer, NIC MTU, QoS) and no traffic:
    what a live fabric is brought up with (``Fabric.run`` adds traffic)."""
    spec = ExperimentSpec.model_construct(name=fabric.name, topology=topology,
                                          **({"target": target} if target else {}))
    return Experiment(spec=spec, fabric=fabric, flows=(), source=source)


def load_topology(path: str | Path):
    """A topology file as the resolved ``Fabric`` (nodes, links, addresses, routes)."""
    return load_fabric(path)


# --------------------------------------------------------------------- results

@dataclass(frozen=True)
class FlowResult:
    flow_id: int
    src: str
    dst: str
    bytes: int
    delivered_bytes: int
    complete: bool
    fct_us: float | None
    retransmitted_packets: int
    timeouts: int
    naks: int


class Result:
    """One run's results: ``summary.json`` with accessors for the usual questions.
    Counts are over every switch port unless a node is given."""

    def __init__(self, summary: dict, out_dir: str | Path | None = None):
        self.summary = summary
        self.out_dir = Path(out_dir) if out_dir is not None else None

    @classmethod
    def load(cls, out_dir: str | Path) -> "Result":
        """A past run's results directory (or its summary.json); a file that
        is not a run's summary is ``FabricEmuError`` saying what is wrong."""
        from emulator.experiment.summary_file import read_summary
        p = Path(out_dir)
        p = RunDir(p).summary if p.is_dir() else p
        return cls(read_summary(p), p.parent)

    def __repr__(self) -> str:
        s = self.summary
        return (f"Result({s.get('experiment')!r}, complete={s.get('complete')}, "
                f"fell_behind={s.get('fell_behind')}, time={self.time!r}, "
                f"dilation={s.get('dilation')})")

    # the run
    @property
    def complete(self) -> bool:
        return bool(self.summary.get("complete"))

    @property
    def fell_behind(self) -> bool:
        return bool(self.summary.get("fell_behind"))

    @property
    def time(self) -> str:
        """The clock the run kept: "virtual" or "dilated" (a summary from before
        virtual time: dilated)."""
        return self.summary.get("time", "dilated")

    @property
    def dilation(self) -> float:
        return float(self.summary["dilation"])

    # flows
    @property
    def flows(self) -> list[FlowResult]:
        return [FlowResult(f["flow_id"], f.get("src", ""), f.get("dst", ""), f["bytes"],
                           f.get("delivered_bytes", 0), bool(f.get("complete")),
                           f["fct_ns"] / 1000 if f.get("fct_ns") is not None else None,
                           f.get("retransmitted_packets") or 0, f.get("timeouts") or 0,
                           f.get("naks") or 0)
                for f in self.summary.get("flows", [])]

    def fct_us(self, percentile: float = 50) -> float | None:
        """A percentile of the completed flows' FCTs, fabric µs (nearest rank)."""
        fcts = sorted(f.fct_us for f in self.flows if f.fct_us is not None)
        if not fcts:
            return None
        rank = max(1, -(-percentile * len(fcts) // 100))
        return fcts[int(rank) - 1]

    def fct_mean_us(self) -> float | None:
        fcts = [f.fct_us for f in self.flows if f.fct_us is not None]
        return statistics.fmean(fcts) if fcts else None

    def retransmissions(self) -> int:
        return sum(f.retransmitted_packets for f in self.flows)

    def timeouts(self) -> int:
        return sum(f.timeouts for f in self.flows)

    # ports and priorities
    def _prio(self, field: str, node: str | None, priority: int | None) -> int:
        total = 0
        for port in self.summary.get("ports", []):
            if node is not None and port["node"] != node:
                continue
            for q in port.get("priorities", []):
                if priority is None or q["priority"] == priority:
                    total += q.get(field) or 0
        return total

    @property
    def lossless_priorities(self) -> list[int]:
        """The priorities PFC protected in this run (``[]``: PFC off)."""
        return list(self.summary.get("lossless_priorities", []))

    def drops(self, node: str | None = None, priority: int | None = None) -> int:
        return self._prio("drops", node, priority)

    def lossless_drops(self, node: str | None = None) -> int:
        """Drops in the PFC-protected classes: zero on a lossless fabric."""
        return sum(self._prio("drops", node, p) for p in self.lossless_priorities)

    def pauses(self, node: str | None = None, priority: int | None = None) -> int:
        """PFC pause frames sent."""
        return self._prio("pause_tx", node, priority)

    def ecn_marks(self, node: str | None = None, priority: int | None = None) -> int:
        return self._prio("ecn_marks", node, priority)

    def max_queue_bytes(self, node: str | None = None) -> int:
        return max((q.get("max_depth_bytes") or 0 for p in self.summary.get("ports", [])
                    if node is None or p["node"] == node for q in p.get("priorities", [])),
                   default=0)

    # collectives
    def busbw_GBps(self, collective: str | None = None, size_bytes: int | None = None) -> float | None:
        """The best bus bandwidth of the matching nccl-tests rows (None: no row)."""
        rows = (self.summary.get("collectives") or {}).get("results") or []
        vals = [r["busbw_GBps"] for r in rows
                if (collective is None or r["collective"] == collective)
                and (size_bytes is None or r["size_bytes"] == size_bytes)]
        return max(vals) if vals else None


# ----------------------------------------------------------------------- runs

def run(exp: Experiment, out: str | Path | None = None, *, dilation: float | str | None = None,
        pcap: bool = False, quiet: bool = False, force: bool = False,
        plots: bool = True) -> Result:
    """Run ``exp`` (root; builds and tears down its fabric) into ``out``
    (default ``results/<name>``) in its time (``time:``; auto: virtual
    where it runs, ``emulator.experiment.time_mode``). ``dilation``: a
    number or "auto" (measured, cached, rerun higher if behind) asks for a
    dilated run; None: the experiment's. ``out`` is new or an earlier run's;
    ``force``: one holding others' files too (they are kept;
    ``emulator.experiment.outdir``). ``plots``: false, no PNG figures."""
    from rich.console import Console

    from emulator.experiment.dilation import run_with_dilation
    check_time(exp, dilation_given=dilation is not None)      # refused before ``out`` exists
    out = Path(out or f"results/{exp.name}")
    console = Console(file=io.StringIO()) if quiet else Console(stderr=True)
    with output_dir(out, force=force, force_hint="force=True"):
        return Result(run_with_dilation(exp, out, console, pcap=pcap, dilation=dilation,
                                        plots=plots), out)


SWEEP_CSV_FIELDS = ("complete", "fell_behind", "dilation", "fct_p50_us", "fct_p99_us",
                    "lossless_drops", "drops", "pauses", "ecn_marks", "retransmissions", "busbw_GBps")


def sweep(exp: Experiment | str | Path, grid: Mapping[str, Iterable[Any]],
          out: str | Path | None = None, *, dilation: float | str | None = None,
          quiet: bool = True, force: bool = False) -> list[dict]:
    """Run every combination of ``grid`` ({"a.b": [values], ...}: their
    product) on the experiment; each run in ``out/<k=v,...>``, one row per run
    (the parameters, then ``SWEEP_CSV_FIELDS``, and ``result``: its Result)
    and ``out/sweep.csv``. ``out`` and ``force`` as ``run``'s."""
    if isinstance(exp, (str, Path)):
        base, source = read_experiment_data(exp), Path(exp)
    else:
        base, source = experiment_data(exp), Path(exp.source)
    out = Path(out or f"results/{base.get('name', 'sweep')}-sweep")
    keys = list(grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(list(grid[k]) for k in keys))]
    # every point checked before the first runs (as a file's sweep: is), its clock too
    exps = [check_time(experiment_from_dict(apply_sets(base, point), source),
                       dilation_given=dilation is not None) for point in points]
    names = [",".join(f"{k}={value_label(v)}" for k, v in point.items()) for point in points]
    rows = []
    with output_dir(out, force=force, what="sweep", force_hint="force=True") as odir:
        odir.claim(RunDir.SWEEP_CSV, *names)
        for point, e, name in zip(points, exps, names):
            res = run(e, out / name, dilation=dilation, quiet=quiet)
            rows.append({**point, **_row(res), "result": res})
            _write_csv(RunDir(odir.path).sweep_csv, keys, rows)
    return rows


def experiment_data(exp: Experiment) -> dict:
    """The experiment's data as a file would hold it (its topology inline)."""
    data = exp.spec.model_dump(mode="json", exclude_none=True, exclude={"topology"})
    data["topology"] = exp.spec.topology if isinstance(exp.spec.topology, dict) else str(
        (Path(exp.source).parent / exp.spec.topology).resolve())
    return data


def _row(res: Result) -> dict:
    return {"complete": res.complete, "fell_behind": res.fell_behind, "dilation": res.dilation,
            "fct_p50_us": res.fct_us(50), "fct_p99_us": res.fct_us(99),
            "lossless_drops": res.lossless_drops(), "drops": res.drops(), "pauses": res.pauses(),
            "ecn_marks": res.ecn_marks(), "retransmissions": res.retransmissions(),
            "busbw_GBps": res.busbw_GBps()}


def _write_csv(path: Path, keys: list[str], rows: list[dict]) -> None:
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*keys, *SWEEP_CSV_FIELDS], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


__all__ = ["FlowResult", "Result", "SWEEP_CSV_FIELDS", "as_experiment", "build_experiment",
           "experiment_data", "load_experiment",
           "load_topology", "run", "sweep"]
