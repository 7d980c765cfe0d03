"""``fabric-emu``: run experiments, look at fabrics, clean up after a crash."""
from __future__ import annotations

# Deferred imports: each command imports what it runs, in its function: --help,
# clean and topo show load neither Mininet, gRPC nor the runner.

import os
import signal
import sys
from pathlib import Path


def _exit_at_once(signum, frame):
    """A signal while the command's modules import: nothing is started yet,
    so the process ends at once, with its one line."""
    os.write(2, f"fabric-emu: interrupted ({signal.Signals(signum).name}) before anything "
                f"was started\n".encode())
    os._exit(128 + signum)


# As the command (not a module a test imports): the default action of SIGTERM
# would end it silently; ``_Group.invoke`` takes over once the command starts.
if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "fabric-emu":
    for _sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(_sig) is signal.SIG_DFL:
            signal.signal(_sig, _exit_at_once)

import click  # noqa: E402  (after the signals: its import is most of the start)
from rich.console import Console  # noqa: E402

from emulator.errors import FabricEmuError  # noqa: E402
from emulator.command_exit import without_teardown  # noqa: E402
from emulator.rundir import RunDir  # noqa: E402

console = Console(stderr=True)


def _stop(signum, frame):
    """SIGTERM and SIGHUP unwind as Ctrl-C does: the finally-blocks of
    whatever is being built (the fork server, the output directory, the
    fabric) undo it, and the run ends with one line. Without this, one in the
    run's first moments, before the fabric traps signals, ended it silently
    (the default action) and left its fork server and directory behind."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


class _Group(click.Group):
    """Every user error becomes one line on stderr and exit status 2."""

    main = without_teardown(click.Group.main)   # the command's end: no interpreter teardown

    def invoke(self, ctx):
        # Started in the background by a shell without job control (make, CI
        # scripts), a process inherits SIGINT ignored and Python installs no
        # Ctrl-C handler: `kill -INT` must still stop a run and tear it down.
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, _exit_at_once):
                signal.signal(sig, _stop)
        try:
            return super().invoke(ctx)
        except FabricEmuError as e:
            click.echo(f"fabric-emu: {e}", err=True)
            ctx.exit(getattr(e, "exit_status", 2))
        except KeyboardInterrupt as e:
            sig = _signal_of(e)
            why = "" if sig == signal.SIGINT else f" ({sig.name})"
            click.echo(f"fabric-emu: interrupted{why}; the fabric was torn down", err=True)
            ctx.exit(128 + sig)


def _signal_of(e: KeyboardInterrupt) -> signal.Signals:
    """The signal behind a KeyboardInterrupt: ``_stop``'s names it, the
    fabric's trap says "signal N", Ctrl-C says nothing."""
    arg = str(e)
    try:
        return signal.Signals(int(arg.split()[1])) if arg.startswith("signal ") else \
            signal.Signals[arg]
    except (KeyError, ValueError, IndexError):
        return signal.SIGINT


_SET_HELP = "Override a field of the experiment file: key.path=VALUE (YAML), repeatable."
_TIME_HELP = ("The clock; overrides the file's 'time' (virtual: every process keeps fabric time, "
              "no dilation; dilated: the wall clock slowed by the dilation; auto: virtual where "
              "it runs).")
_TIME_CHOICE = click.Choice(["auto", "virtual", "dilated"])


def _load(experiment, target=None, sets=()):
    """The experiment file with ``--set`` overrides applied, validated."""
    from emulator.api import load_experiment
    return load_experiment(experiment, set=sets, target=target)


@click.group(cls=_Group)
@click.version_option(package_name="ai-fabric-emulator")
def main():
    """Packet-level emulator of RoCEv2 GPU-cluster fabrics."""


@main.command()
@click.argument("experiment", type=click.Path())   # the loader refuses a directory in one line
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output directory (default: results/<experiment name>): new, or an "
                   "earlier run's.")
@click.option("--force", is_flag=True,
              help="Write into an --out that holds others' files too (they are kept).")
@click.option("--target", type=click.Choice(["embedded", "bmv2", "auto"]), default=None,
              help="Switch target; overrides the experiment file's 'target'.")
@click.option("--pcap", is_flag=True,
              help="Capture every switch port: DIR/pcap/<port>.pcap and DIR/capture.pcapng.")
@click.option("--pcap-time", type=click.Choice(["fabric", "wall"]), default="fabric",
              help="Timestamps of the captures: fabric time (default) or wall time.")
@click.option("--time", "time_mode", type=_TIME_CHOICE, default=None, help=_TIME_HELP)
@click.option("--dilation", "dilation", default=None, metavar="auto|N",
              help="Time dilation, of a dilated run; overrides the file's 'dilation' (auto: "
                   "measured and cached).")
@click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="Print summary.json on stdout (the progress and tables stay on stderr).")
@click.option("--hpcc-dport", type=click.IntRange(1, 65535), default=None,
              help="The dport fct.txt/flow.txt show (HPCC's fct_analysis.py keeps 100); "
                   "same as --set hpcc.dport=N.")
@click.option("--no-plots", is_flag=True, help="No PNGs, no report.html (CSVs, summary.json).")
def run(experiment, out_dir, force, target, pcap, pcap_time, time_mode, dilation, sets, as_json,
        hpcc_dport, no_plots):
    """Bring the fabric up, run EXPERIMENT's traffic, write DIR/summary.json, tear down."""
    pcap = "wall" if pcap and pcap_time == "wall" else pcap
    if hpcc_dport is not None:
        sets = (*sets, f"hpcc.dport={hpcc_dport}")
    if time_mode is not None:
        sets = (*sets, f"time={time_mode}")
    from emulator.prestart import discard_prestarted, prestart
    prestart()      # first: its imports, the start's longest part, beside this process's
    try:            # the input is checked meanwhile; a refusal leaves nothing running
        from emulator.experiment.run_input import checked_run_input
        exp, out, dilation = checked_run_input(lambda: _load(experiment, target, sets), out_dir,
                                               force, dilation)
    except BaseException:
        discard_prestarted()
        raise
    from emulator.net.runlock import RunLock
    with RunLock.acquire(experiment, out):      # one run at a time, sweeps included
        _run(experiment, exp, out, target, pcap, dilation, sets, as_json, force, not no_plots)


def _run(experiment, exp, out: Path, target, pcap: bool, dilation, sets=(), as_json=False,
         force=False, plots=True) -> None:
    import json

    from emulator.experiment.dilation import run_with_dilation
    from emulator.experiment.model import read_experiment_data
    from emulator.experiment.overrides import apply_sets
    from emulator.experiment.sweep import run_sweep
    from emulator.report import reports_prepared

    @reports_prepared()     # report.html's figures made while the run's PNGs draw
    def run_one(e, d):      # a D of "auto" is measured, cached, and rerun higher if behind
        summary = run_with_dilation(e, d, console, pcap, dilation, force=force, plots=plots)
        if plots:           # --no-plots: no report.html either
            _write_report(d)
        return summary

    if exp.spec.sweep is not None:
        data = apply_sets(read_experiment_data(experiment), sets)
        rows = run_sweep(experiment, out, run_one, target=target, data=data, force=force)
        console.print(f"sweep of {exp.spec.sweep.parameter}: {len(rows)} runs; "
                      f"{RunDir(out).sweep_csv}")
        if as_json:
            click.echo(json.dumps(rows, indent=1))
        return
    summary = run_one(exp, out)
    if as_json:
        click.echo(json.dumps(summary, indent=1))
    if not summary["complete"]:
        click.echo(f"fabric-emu: {'; '.join(what_failed(summary))} (see {RunDir(out).summary})",
                   err=True)
        sys.exit(1)


def _write_report(run_dir, runs: dict | None = None) -> None:
    """``report.html`` of a finished run, or of a comparison of ``runs`` ({label: dir})."""
    from emulator.report import write_told
    write_told(console.print, run_dir, runs)


def what_failed(summary: dict) -> list[str]:
    """Why a run is not ``complete``, one phrase per part that failed: plain
    flows, tenant isolation (endpoints:), collectives (workload:)."""
    out = []
    flows = summary.get("flows") or []
    # with endpoints:, flows expected dropped never complete and are fine
    missed = [f for f in flows if not f.get("as_expected", f["complete"])]
    if missed:
        failed = [f["status"] for f in missed if f.get("failed")]
        out.append(f"{len(missed)} of {len(flows)} flows did not complete" + (
            f" ({len(failed)} failed: {', '.join(sorted(set(failed)))})" if failed else ""))
    iso = summary.get("isolation")
    if iso is not None and not iso.get("isolated", True):
        out.append("tenants were not isolated")
    c = summary.get("collectives")
    if c is not None and not c.get("complete"):
        wrong = sum(r["wrong"] or 0 for r in c.get("results", []) + [c.get("training") or {}]
                    if r.get("wrong"))
        why = c.get("errors") or ([f"{wrong} wrong elements (#wrong)"] if wrong else
                                  ["a server agent was incomplete (wrong storage blocks?)"])
        out.append("collectives failed: " + "; ".join(why))
    return out or ["the run did not complete"]


@main.command()
@click.argument("experiments", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output directory (default: results/compare-<first>-<second>...): new, or "
                   "an earlier comparison's.")
@click.option("--force", is_flag=True,
              help="Write into an --out that holds others' files too (they are kept).")
@click.option("--time", "time_mode", type=_TIME_CHOICE, default=None, help=_TIME_HELP)
@click.option("--dilation", "dilation", default=None, metavar="auto|N",
              help="Time dilation of every dilated run; overrides the files' (auto: measured "
                   "and cached).")
def compare(experiments, out_dir, force, time_mode, dilation):
    """Run each of EXPERIMENTS (the same work on different fabrics -- RoCE and
    InfiniBand: incast-pfc.yaml incast-ib.yaml) into DIR/<name>/, then write
    DIR/comparison.csv, comparison.json and comparison.png (with flows also
    comparison_fct_slowdown.csv and .png: FCT slowdown by flow-size bucket) and
    DIR/report.html (the runs side by side)."""
    from emulator.experiment.compare import (render_bucket_table, render_comparison_table,
                                             write_comparison)
    from emulator.experiment.dilation import parse_dilation, run_with_dilation
    from emulator.experiment.outdir import OutputDir, output_dir
    from emulator.experiment.time_mode import check_time
    from emulator.net.environment import check_environment
    from emulator.net.runlock import RunLock

    if len(experiments) < 2:
        raise click.UsageError("compare needs two experiments or more")
    dilation = parse_dilation(dilation)
    sets = () if time_mode is None else (f"time={time_mode}",)
    exps = [check_time(_load(e, sets=sets), dilation_given=dilation is not None)
            for e in experiments]
    labels = [e.name if [x.name for x in exps].count(e.name) == 1 else f"{e.name}-{i + 1}"
              for i, e in enumerate(exps)]
    out = Path(out_dir or f"results/{comparison_dir_name(labels)}")
    check_environment()
    OutputDir(out, force=force).check()
    with RunLock.acquire(experiments[0], out), \
            output_dir(out, force=force, what="compare") as odir:
        odir.claim(*RunDir.COMPARISON, *labels)
        runs, points = {}, {label: RunDir(odir.path).point(label).path for label in labels}
        for label, exp in zip(labels, exps):
            runs[label] = run_with_dilation(exp, points[label], console, dilation=dilation)
            _write_report(points[label])
        rows = write_comparison(odir.path, runs,
                                {label: e.fabric for label, e in zip(labels, exps)})
        _write_report(odir.path, points)
    console.print(render_comparison_table(rows, out))
    if (bt := render_bucket_table(runs, out)) is not None:
        console.print(bt)
    if not all(r["complete"] for r in rows):
        click.echo(f"fabric-emu: a run did not complete (see {out}/*/{RunDir.SUMMARY})", err=True)
        sys.exit(1)


# A file name's limit (NAME_MAX) is 255 bytes; names are at most 63 characters each.
COMPARE_DIR_MAX_BYTES = 200


def comparison_dir_name(labels: list[str]) -> str:
    """``compare-<a>-<b>...``, or, past ``COMPARE_DIR_MAX_BYTES`` (many long
    names), as many names as fit and ``-and-N-more``: always one valid name."""
    name = "compare-" + "-".join(labels)
    if len(name.encode()) <= COMPARE_DIR_MAX_BYTES:
        return name
    kept = "compare"
    for i, label in enumerate(labels):
        more = f"-and-{len(labels) - i}-more"
        if len(f"{kept}-{label}{more}".encode()) > COMPARE_DIR_MAX_BYTES:
            return kept + more
        kept = f"{kept}-{label}"
    return kept


@main.command()
@click.argument("experiment", type=click.Path())   # the loader refuses a directory in one line
@click.option("--target", type=click.Choice(["embedded", "bmv2", "auto"]), default=None,
              help="Switch target; overrides the experiment file's 'target'.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where the switches' logs go (default: results/<experiment name>-cli): "
                   "new, or an earlier run's.")
@click.option("--force", is_flag=True,
              help="Write into an --out that holds others' files too (they are kept).")
@click.option("--dilation", "dilation", default=None, metavar="auto|N",
              help="Time dilation; overrides the file's 'dilation' (auto: the cached value).")
@click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
def cli(experiment, target, out_dir, force, dilation, sets):
    """The EXPERIMENT's fabric up and programmed, under Mininet's CLI (and its
    `take_primary` command: the controller primary again where another
    P4Runtime client took over)."""
    from mininet.log import setLogLevel

    from emulator.experiment.dilation import dilation_for_cli, parse_dilation, with_dilation
    from emulator.experiment.outdir import OutputDir, output_dir
    from emulator.experiment.runner import fabric_net, resolve_target
    from emulator.experiment.time_mode import planned_target, resolve_time
    from emulator.net.environment import check_environment
    from emulator.net.runlock import RunLock

    exp = _load(experiment, target, sets)
    dilation = parse_dilation(dilation)
    # the kernel sends a live fabric's traffic: dilated time (time: virtual refused)
    exp = resolve_time(exp, planned_target(exp.spec.target), live=True)
    if dilation is not None:
        exp = with_dilation(exp, dilation)
    exp = dilation_for_cli(exp, resolve_target(exp.spec.target))     # auto: the cached D
    # beside a run's results/<name>, not in it: a later run there would find
    # it someone else's entry
    run_dir = Path(out_dir or f"results/{exp.name}-cli")
    check_environment()
    OutputDir(run_dir, force=force).check()
    with RunLock.acquire(experiment, run_dir), \
            output_dir(run_dir, force=force, what="cli") as odir, \
            fabric_net(exp, odir.path, target=resolve_target(exp.spec.target)) as fnet:
        addresses = {sw.name: fnet.switch(sw.name).grpc_address for sw in exp.fabric.switches()}
        click.echo(p4runtime_banner(exp, addresses), err=True)     # unwrapped: lines to paste
        setLogLevel("output")   # the CLI prints through Mininet's log
        _mininet_cli(fnet)


def p4runtime_banner(exp, addresses: dict[str, str]) -> str:
    """Per switch (``addresses``: its gRPC address): device id, address and a
    p4runtime-shell line to paste (it reads the running pipeline from the
    switch: no --config), then who may write. The shell's election id is
    below the controller's: the controller stays primary, the shell is a
    backup that reads; the last line says how to write from it instead."""
    from emulator.control.controller import CONTROLLER_ELECTION_ID
    from emulator.control.p4rt_errors import election_id_text

    high, low = CONTROLLER_ELECTION_ID
    ours, above, shell = (election_id_text(e) for e in (CONTROLLER_ELECTION_ID, (high, low + 1),
                                                          P4RT_SHELL_ELECTION_ID))
    lines = [f"{exp.fabric.name}: up at dilation {exp.dilation:g} (dilated time); P4Runtime per "
             "switch (pip install p4runtime-shell):"]
    for sw in exp.fabric.switches():
        addr, dev = addresses[sw.name], exp.fabric.device_id(sw.name)
        lines.append(f"  {sw.name:<8} device {dev:<3} {addr:<16} "
                     f"python3 -m p4runtime_sh --grpc-addr {addr} --device-id {dev} --election-id {shell}")
    lines.append(f"The controller is every switch's primary client (election id {ours}): these shells are "
                 "backups, they read but cannot write.")
    lines.append(f"To write from a shell, give it --election-id {above} or higher: the controller says it "
                 "lost primary, and `take_primary` at the mininet> prompt takes it back.")
    return "\n".join(lines)


# (high, low): p4runtime-shell's default, below the controller's (controller.CONTROLLER_ELECTION_ID)
P4RT_SHELL_ELECTION_ID = (1, 0)


def _mininet_cli(fnet) -> None:
    """Mininet's CLI on the fabric, with ``take_primary``."""
    from mininet.cli import CLI
    from mininet.log import output

    from emulator.control.p4rt_errors import P4RuntimeError, election_id_text

    class FabricCLI(CLI):
        def do_take_primary(self, _line: str) -> None:
            """take_primary: the controller primary again where another P4Runtime client took over"""
            try:
                taken = fnet.controller.take_primary()
            except P4RuntimeError as e:
                output(f"take_primary: {e}\n")
                return
            if not taken:
                output("take_primary: the controller is primary on every switch already\n")
                return
            output("take_primary: the controller is primary again on " + ", ".join(
                f"{name} (election id {election_id_text(eid)})" for name, eid in taken.items()) + "\n")

    FabricCLI(fnet.net)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--target", type=click.Choice(["embedded", "bmv2", "auto"]), default=None,
              help="Switch target; overrides the experiment file's 'target'.")
@click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
@click.option("--quiet", "-q", is_flag=True, help="Only say which files are valid.")
def validate(files, target, sets, quiet):
    """Check experiment and topology FILES (no root, nothing built) and print the plan."""
    from emulator.experiment.plan import describe_file

    bad = 0
    for f in files:
        try:
            text = describe_file(f, sets, target)
        except FabricEmuError as e:
            click.echo(f"fabric-emu: {e}", err=True)
            bad += 1
            continue
        click.echo(text.splitlines()[0] if quiet else text)
    if bad:
        sys.exit(2)


@main.command()
@click.argument("results_dir", type=click.Path())
def show(results_dir):
    """Print a past run's summary table (RESULTS_DIR/summary.json) and where its report is."""
    from emulator.experiment.endpoint_results import render_endpoints
    from emulator.experiment.servers import render_collectives
    from emulator.experiment.summary import render_slowdown_buckets, render_summary
    from emulator.experiment.summary_file import read_summary

    summary = read_summary(results_dir)     # bounded, checked: one line if it is not one
    out = Console()
    out.print(render_summary(summary))
    if (buckets := render_slowdown_buckets(summary)) is not None:
        out.print(buckets)
    if "collectives" in summary:
        out.print(render_collectives(summary["collectives"]))
    if (table := render_endpoints(summary)) is not None:
        out.print(table)
    report = RunDir(results_dir).report_html
    click.echo(f"report: {report}" if report.is_file() else      # whole, never wrapped
               f"report: none yet (fabric-emu report {results_dir} builds {report})")


@main.command()
@click.argument("results_dir", type=click.Path())
def report(results_dir):
    """(Re)build RESULTS_DIR/report.html from a past run's files (nothing is re-run)."""
    from emulator.report import write_report
    click.echo(write_report(results_dir))


@main.command()
@click.option("--require", "require", multiple=True, type=click.Choice(["bmv2"]),
              help="Treat a missing BMv2 toolchain as a problem (the Vagrant lab's provisioning does).")
def doctor(require):
    """Check this machine: the venv's packages, Mininet, tshark, p4c, BMv2 and
    whether BMv2 takes fabric.p4's pipeline. One line per part; exit 1 on a problem."""
    from emulator.doctor import exit_status, iter_check
    findings = []
    for f in iter_check(tuple(require)):
        click.echo(f.line())
        findings.append(f)
    sys.exit(exit_status(findings))


@main.command()
@click.option("--force", is_flag=True,
              help="Clean even while a run is active: its fabric goes, and the run ends.")
def clean(force):
    """Remove leftover switch/agent processes, Mininet shells and veths after a crash."""
    from emulator.net.clean import clean as do_clean
    from emulator.net.runlock import RunActive, RunLock

    if os.geteuid() != 0:
        raise FabricEmuError("clean needs root (it deletes interfaces and kills root's processes)")
    lock = None
    try:     # held while cleaning: no run starts meanwhile
        lock = RunLock.acquire("fabric-emu clean", "-",
                               doing="not cleaning (--force takes its fabric down)")
    except RunActive:
        if not force:
            raise
    try:
        removed = do_clean()
    finally:
        if lock is not None:
            lock.release()
    click.echo(f"removed {removed['processes']} processes, {removed['interfaces']} interfaces")


@main.group()
def topo():
    """Inspect topology files."""


@topo.command("show")
@click.argument("topology", type=click.Path())   # the loader refuses a directory in one line
def topo_show(topology):
    """Print a topology's nodes, links, addresses and routes."""
    from emulator.topo import load_fabric
    from emulator.topo.show import render_fabric

    click.echo(render_fabric(load_fabric(topology)))


if __name__ == "__main__":
    main()
