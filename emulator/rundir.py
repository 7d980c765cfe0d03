"""A run's directory and its raw directory: the one place that names their entries.

    rd = RunDir(out)                     # a run's results directory (``fabric-emu run --out``)
    rd.summary                           # out/summary.json
    rd.file(RunDir.FLOW_RATE_CSV)        # out/flow_rate.csv (any name below; others refused)
    rd.raw.stats("leaf1")                # out/run/leaf1.stats.json
    rd.point("kmax=20000").summary       # a sweep's point: a run directory inside this one

Readers and writers ask it for a path instead of spelling a file name:
the results writers (``experiment.results`` and the modules it calls), the
switches and agents writing into the raw directory (``RawDir``), and the
readers of a finished run (``fabric-emu show``, ``Result.load``, a sweep's
table). It only names: whose the directory is -- created, claimed, cleared
of an earlier run -- is ``experiment.outdir``'s (``OutputDir``). It imports
nothing of the emulator, so every layer may use it.
"""
from __future__ import annotations

import os
from pathlib import Path


class RawDir:
    """``RUN/``: the configs, raw logs and raw results of a run's switches and agents
    (formats in ``docs/lossless.md``, "Raw logs")."""

    SWITCH_LOGS = ("qdepth", "events")            # {switch}.{kind}.csv
    HOST_LOGS = ("qp", "cnp", "flows", "pfc", "int", "drops")   # {host}.{kind}.csv
    WATCHDOG = "watchdog.json"
    # what a cluster's servers write while the run goes, pulled by the runner
    LIVE = ("*.ready", "*.progress.json", "*.stats.json", "*.result.json")

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RawDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    def log(self, node: str, kind: str) -> Path:
        """A switch's (``SWITCH_LOGS``) or a host's (``HOST_LOGS``) raw log."""
        return self.path / f"{node}.{kind}.csv"

    def stats(self, switch: str) -> Path:
        return self.path / f"{switch}.stats.json"

    def reroute(self) -> Path:
        """The controller's port reports and reroutes (``control/reroute.py``)."""
        return self.path / "controller.reroute.json"

    def bmv2_faults(self) -> Path:
        """BMv2's link faults as played: each step when it ran, and per downed
        direction the frames its receiver's veth got (``net/bmv2_faults.py``)."""
        return self.path / "bmv2.faults.json"

    def stats_files(self) -> list[Path]:
        return sorted(self.path.glob("*.stats.json"))

    def switch_config(self, switch: str) -> Path:
        return self.path / f"{switch}.switch.json"

    def pack_config(self, tag: str) -> Path:
        """A pack's (several switches or agents in one process)."""
        return self.path / f"{tag}.pack.json"

    def agent_config(self, name: str) -> Path:
        return self.path / f"{name}.agent.json"

    def agent_log(self, name: str) -> Path:
        return self.path / f"{name}.agent.log"

    def result(self, name: str) -> Path:
        """An agent's result (``{name}.result.json``)."""
        return self.path / f"{name}.result.json"

    def progress(self, host: str) -> Path:
        """A host agent's ``{"delivered_bytes", "done"}``."""
        return self.path / f"{host}.progress.json"

    def ready(self, name: str) -> Path:
        """The file an agent creates when it can start (``agents.start_gate``)."""
        return self.path / f"{name}.ready"

    def port_pcap(self, ifname: str) -> Path:
        """A switch port's capture (``switch.pcap``)."""
        return self.path / f"{ifname}.pcap"

    def pcaps(self) -> dict[str, Path]:
        """{port ifname: its capture}, sorted."""
        return {p.stem: p for p in sorted(self.path.glob("*.pcap"))}

    def process_log(self, name: str) -> Path:
        """A switch process's (or a pack's) stdout and stderr."""
        return self.path / f"{name}.log"

    @property
    def watchdog(self) -> Path:
        return self.path / self.WATCHDOG

    def bmv2_log(self, switch: str) -> Path:
        """A BMv2 switch's own log (``--log-file``)."""
        return self.path / f"{switch}.bmv2"

    @property
    def watchdog_log(self) -> Path:
        return self.path / "watchdog.log"

    @property
    def forkserver_log(self) -> Path:
        return self.path / "forkserver.log"


class RunDir:
    """A run's results directory: what ``fabric-emu run`` writes, by name."""

    MARKER = ".fabric-emu-run"      # whose the directory is (``experiment.outdir``)
    SUMMARY = "summary.json"        # every number of the run (``experiment.summary_file``)
    RAW = "run"                     # the switches' and agents' configs, logs, raw results (RawDir)
    # time series (``experiment.timeseries``)
    QUEUE_DEPTH_CSV, FLOW_RATE_CSV = "queue_depth.csv", "flow_rate.csv"
    DCQCN_RATE_CSV, PFC_EVENTS_CSV = "dcqcn_rate.csv", "pfc_events.csv"
    ECN_MARKS_CSV, CNP_CSV, DROPS_CSV = "ecn_marks.csv", "cnp.csv", "drops.csv"
    INT_HOPS_CSV = "int_hops.csv"
    TIME_SERIES = (QUEUE_DEPTH_CSV, FLOW_RATE_CSV, DCQCN_RATE_CSV, PFC_EVENTS_CSV, ECN_MARKS_CSV,
                   CNP_CSV, DROPS_CSV, INT_HOPS_CSV)
    # distributions (``experiment.distributions``)
    FCT_SLOWDOWN_CSV, QUEUE_DEPTH_DIST_CSV = "fct_slowdown.csv", "queue_depth_dist.csv"
    DISTRIBUTIONS = (FCT_SLOWDOWN_CSV, QUEUE_DEPTH_DIST_CSV)
    # HPCC's formats (``experiment.hpcc``)
    FCT_TXT, PFC_TXT, QLEN_TXT = "fct.txt", "pfc.txt", "qlen.txt"
    TOPOLOGY_TXT, FLOW_TXT = "topology.txt", "flow.txt"
    HPCC = (FCT_TXT, PFC_TXT, QLEN_TXT, TOPOLOGY_TXT, FLOW_TXT)
    # figures (``experiment.plots``)
    QUEUE_DEPTH_PNG, THROUGHPUT_PNG = "queue_depth.png", "throughput.png"
    PAUSE_TIMELINE_PNG, FCT_CDF_PNG = "pause_timeline.png", "fct_cdf.png"
    FCT_SLOWDOWN_PNG = "fct_slowdown.png"
    PLOTS = (QUEUE_DEPTH_PNG, THROUGHPUT_PNG, PAUSE_TIMELINE_PNG, FCT_CDF_PNG, FCT_SLOWDOWN_PNG)
    HOSTS_CSV = "hosts.csv"         # with ``endpoints:`` (``experiment.endpoint_results``)
    TELEMETRY_CSV = "telemetry.csv"  # with ``telemetry:``: the gNMI collector's (``experiment.telemetry``)
    MANAGEMENT_JSON = "management.json"   # with in-band management: its reports and bridges (``net.management``)
    PFCWD_EVENTS_CSV = "pfcwd_events.csv"   # with the PFC watchdog on (``experiment.pfcwd_results``)
    REPORT_HTML = "report.html"     # the run (or a comparison) in one page (``emulator.report``)
    # a workload's (``collectives.report``, ``experiment.servers``)
    COLLECTIVES_CSV, COLLECTIVES_JSON = "collectives.csv", "collectives.json"
    COLLECTIVES_TXT, TRAINING_JSON = "collectives.txt", "training.json"
    COLLECTIVES_PNG = "collectives.png"
    TRAINING_CSV = "training.csv"   # a parallelism-shaped step's phases (``collectives.training``)
    COLLECTIVES = (COLLECTIVES_CSV, COLLECTIVES_JSON, COLLECTIVES_TXT, TRAINING_JSON,
                   COLLECTIVES_PNG, TRAINING_CSV)
    PCAP_DIR, CAPTURE = "pcap", "capture.pcapng"     # with --pcap (``experiment.capture``)
    CAPTURES = (PCAP_DIR, CAPTURE)
    # Every entry a run may write: what it claims (``OutputDir.claim``) before
    # anything is built.
    ENTRIES = (RAW, SUMMARY, *TIME_SERIES, *DISTRIBUTIONS, *HPCC, *PLOTS, HOSTS_CSV,
               TELEMETRY_CSV, MANAGEMENT_JSON, PFCWD_EVENTS_CSV, *COLLECTIVES, *CAPTURES, REPORT_HTML)
    # Run directories inside one: a sweep's points beside its table
    # (``experiment.sweep``, ``emulator.api.sweep``), ``compare``'s runs beside
    # theirs, the calibration runs and the runs that fell behind of
    # ``dilation: auto`` (``experiment.dilation``).
    SWEEP_CSV, SWEEP_PNG = "sweep.csv", "sweep.png"
    SWEEP = (SWEEP_CSV, SWEEP_PNG)
    # ``fabric-emu compare``'s table of its runs (``experiment.compare``)
    COMPARISON_CSV, COMPARISON_JSON = "comparison.csv", "comparison.json"
    COMPARISON_PNG = "comparison.png"
    COMPARISON_SLOWDOWN_CSV = "comparison_fct_slowdown.csv"
    COMPARISON_SLOWDOWN_PNG = "comparison_fct_slowdown.png"
    COMPARISON = (COMPARISON_CSV, COMPARISON_JSON, COMPARISON_PNG, COMPARISON_SLOWDOWN_CSV,
                  COMPARISON_SLOWDOWN_PNG, REPORT_HTML)
    CALIBRATION = "calibration"     # ``dilation: auto``'s calibration runs
    BEHIND = "fell-behind-D{:g}"    # a run that fell behind at D, kept beside its rerun
    BEHIND_GLOB = "fell-behind-D*"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def of(cls, where: "str | os.PathLike | RunDir") -> "RunDir":
        return where if isinstance(where, RunDir) else cls(where)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __eq__(self, other) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def file(self, name: str) -> Path:
        """The entry ``name``: one of ``ENTRIES``, ``SWEEP`` or ``COMPARISON`` (a
        name this type does not know is a bug, refused here, not a file
        nobody reads)."""
        if name not in _KNOWN:
            raise ValueError(f"{name!r} is not an entry of a run directory")
        return self.path / name

    @property
    def summary(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def raw(self) -> RawDir:
        return RawDir(self.path / self.RAW)

    @property
    def marker(self) -> Path:
        return self.path / self.MARKER

    @property
    def hosts_csv(self) -> Path:
        return self.path / self.HOSTS_CSV

    @property
    def report_html(self) -> Path:
        return self.path / self.REPORT_HTML

    @property
    def pcap_dir(self) -> Path:
        return self.path / self.PCAP_DIR

    @property
    def capture(self) -> Path:
        return self.path / self.CAPTURE

    def port_capture(self, name: str) -> Path:
        """A port's capture in ``pcap/`` (``RawDir.pcaps``' name)."""
        return self.pcap_dir / f"{name}.pcap"

    @property
    def sweep_csv(self) -> Path:
        return self.path / self.SWEEP_CSV

    @property
    def sweep_png(self) -> Path:
        return self.path / self.SWEEP_PNG

    def point(self, name: str) -> "RunDir":
        """A run directory inside this one (a sweep's point, ``compare``'s run)."""
        return RunDir(self.path / name)

    def calibration(self, dilation: float) -> "RunDir":
        """``dilation: auto``'s calibration run at D."""
        return RunDir(self.path / self.CALIBRATION / f"D={dilation:g}")

    @classmethod
    def behind_name(cls, dilation: float) -> str:
        """Where a run at D that fell behind is set aside for its rerun."""
        return cls.BEHIND.format(dilation)


_KNOWN = frozenset((*RunDir.ENTRIES, *RunDir.SWEEP, *RunDir.COMPARISON))

__all__ = ["RawDir", "RunDir"]
