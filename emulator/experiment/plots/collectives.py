"""What collectives achieved: ``collectives.png``, bus bandwidth by message size.

``plot_busbw`` draws it for a run with collectives (``servers.py``) from
their results (busbw by size, as nccl-tests reports it), not from a results
directory's CSVs: it is not one of a run's ``PLOT_FILES``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from emulator.experiment.plots.figure import legend, new_figure, save


def plot_busbw(rows: list[Mapping], out_path: str | Path, link_rate_GBps: float | None = None) -> Path | None:
    """Bus bandwidth against message size, one line per collective and
    algorithm (nccl-tests' busbw, fabric time), with the NIC link rate for
    reference; None without rows."""
    if not rows:
        return None
    fig, ax = new_figure()
    lines: dict[tuple, list] = {}
    for r in rows:
        lines.setdefault((r["collective"], r["algorithm"]), []).append((r["size_bytes"], r["busbw_GBps"]))
    for (coll, algo), pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{coll} ({algo})")
    if link_rate_GBps:
        ax.axhline(link_rate_GBps, color="grey", linestyle="--", linewidth=1,
                   label=f"NIC link {link_rate_GBps:g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("collectives: bus bandwidth by size")
    legend(ax, len(lines) + 1)
    return save(fig, Path(out_path))
