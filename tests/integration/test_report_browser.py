"""report.html in a real browser: Debian's headless Chromium driven by
Selenium (``tests/browser.py``; skips, saying why, where either is missing).
One run (the session's virtual-time incast under PFC), one page, one browser."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from emulator.report import write_report
from emulator.rundir import RunDir
from tests import browser
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))


@pytest.fixture(scope="module")
def page(incast_pfc_virtual):
    summary, out = incast_pfc_virtual
    path = write_report(out)
    driver = browser.start()
    try:
        load_s = browser.open_page(driver, path)
        yield driver, RunDir(out), load_s
    finally:
        browser.stop(driver)


def _csv_depths(rd: RunDir, t_ns: float) -> dict[tuple[str, int], int]:
    """Every port's queued bytes at t_ns by queue_depth.csv: per priority the last row at or
    before t_ns, summed."""
    last: dict[tuple, int] = {}
    with rd.file(rd.QUEUE_DEPTH_CSV).open(newline="") as f:
        for r in csv.DictReader(f):
            if float(r["time_ns"]) <= t_ns:
                last[(r["node"], int(r["port"]), int(r["priority"]))] = int(r["depth_bytes"])
    out: dict[tuple[str, int], int] = {}
    for (node, port, _), depth in last.items():
        out[(node, port)] = out.get((node, port), 0) + depth
    return out


def test_loads_with_no_errors_and_draws_every_node_of_the_topology(page):
    driver, rd, load_s = page
    assert browser.errors(driver) == []
    from emulator.api import load_experiment
    fabric = load_experiment(REPO / "experiments" / "incast-pfc.yaml").fabric
    nodes = browser.trace(driver, "fabric", "nodes")
    assert sorted(nodes["text"]) == sorted(n.name for n in fabric.nodes)
    assert load_s < 30


def test_the_slider_shows_the_csv_queue_depths_of_its_instant(page):
    driver, rd, _ = page
    frames = driver.execute_script("return document.getElementById('fabric')"
                                   "._transitionData._frames.map(f => f.name)")
    deepest = max(range(len(frames)),
                  key=lambda i: sum(_csv_depths(rd, float(frames[i])).values()))
    assert sum(_csv_depths(rd, float(frames[deepest])).values()) > 0   # the incast queued
    for step in (deepest, 0):
        browser.slider_to(driver, "fabric", step)
        shown = {(n, p): d for n, p, d, *_ in browser.trace(driver, "fabric", "queues")["customdata"]}
        want = _csv_depths(rd, float(frames[step]))
        assert {k: v for k, v in shown.items() if v} == {k: v for k, v in want.items() if v}, step
    assert browser.errors(driver) == []


def test_screenshot_is_not_blank(page, tmp_path):
    from PIL import Image, ImageStat
    driver, rd, _ = page
    png = browser.screenshot(driver, "fabric", tmp_path / "fabric.png")
    stat = ImageStat.Stat(Image.open(io.BytesIO(png)).convert("L"))
    assert stat.stddev[0] > 10, stat.stddev       # a blank or one-colour image is ~0
    assert Path(tmp_path / "fabric.png").stat().st_size > 10_000
