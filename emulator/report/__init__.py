"""An interactive, self-contained HTML report of a run (``report.html``).

    from emulator.report import write_report, write_compare_report
    write_report(run_dir)                       # run_dir/report.html
    write_compare_report(out, {label: run_dir}) # out/report.html: the runs side by side
    prepare_report(run_dir, summary_text)       # its figures, while the run's PNGs draw

Everything is read from the run directory's own files (``summary.json``, the
time-series CSVs, the raw directory's switch configs); nothing is re-run.
Figures are Plotly's, its JavaScript inlined (the page opens offline).
Layers: above ``emulator.experiment`` (it reads results with its readers);
it never imports the runner, the network or the data plane (pyproject's
import-linter contracts).

    rundata     the run directory -> summary + Fabric (RunData)
    series      slider frames and decimation (pure data shaping)
    fabric_fig  the animated fabric
    flows_fig   per-flow timelines and rates
    dist_fig    FCT CDF, slowdown by size, queue percentiles, collectives
    page        HTML assembly, atomic write
    build       one run's page;  compare: a comparison's page
"""
from emulator.report.build import prepare_report, write_report
from emulator.report.compare import write_compare_report
from emulator.report.rundata import NotARunDir

__all__ = ["NotARunDir", "prepare_report", "write_compare_report", "write_report"]
