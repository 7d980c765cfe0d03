"""The docs site builds with ``mkdocs build --strict`` (a broken link, a
missing page or a nav entry without one fails), fast enough for the suite,
and its generated reference covers what the code has: every experiment and
topology field, every command and option, every summary.json key."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from emulator.cli import main
from emulator.experiment.summary_file import RunSummary
from emulator.schema.experiment import ExperimentSpec
from emulator.schema.topology import FabricSpec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docs" / "_gen"))
import cli_ref  # noqa: E402
import files_ref  # noqa: E402
import schema_ref  # noqa: E402

BUILD_LIMIT_S = 60          # the build takes a few seconds; a loaded 2-core machine, more


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1",
           "DISABLE_MKDOCS_2_WARNING": "true"}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    took_s = time.monotonic() - t0
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    warnings = [ln for ln in done.stderr.splitlines() if ln.startswith(("WARNING", "ERROR"))]
    assert not warnings, warnings
    assert took_s < BUILD_LIMIT_S, f"the docs build took {took_s:.1f} s"
    return out


def test_every_page_is_built(site):
    for page in ["index.html", "reference/experiment/index.html", "reference/topology/index.html",
                 "reference/cli/index.html", "reference/summary/index.html",
                 "reference/result-files/index.html", "reference/api/index.html",
                 "virtual-time/index.html", "dilated-time/index.html", "lossless/index.html",
                 "nic/index.html", "design-notes/index.html"]:
        assert (site / page).is_file(), page
    api = (site / "reference/api/index.html").read_text()
    for name in ("load_experiment", "Result", "Fabric", "run_experiment", "busbw_GBps"):
        assert name in api, name


def _field_paths(model, prefix="") -> set[str]:
    return {f"{prefix}{name}" for name in model.model_fields}


def test_the_experiment_reference_has_every_field():
    page = schema_ref.experiment_page()
    for sec in schema_ref.sections(ExperimentSpec):
        for name in sec.model.model_fields:
            assert f"| `{name}` |" in page, f"{sec.path}.{name}"
    assert "| `mtu_bytes` | 256 \\| 512 \\| 1024 \\| 2048 \\| 4096 | bytes | `1024` |" in page
    # bounds from a Field and from the limits' validators
    assert "| `retry_cnt` | integer |  | `7` | ≥ 1; ≤ 1000 |" in page
    topo = schema_ref.topology_page()
    assert "| `rate_gbps` | number | Gbit/s | **required** | > 0; 1e-06 .. 100,000 |" in topo
    for sec in schema_ref.sections(FabricSpec):
        for name in sec.model.model_fields:
            assert f"| `{name}` |" in topo, f"{sec.path}.{name}"


def test_a_source_comment_is_the_description():
    rows = {r.name: r for r in schema_ref.sections(ExperimentSpec)[0].rows}
    assert rows["storage"].doc == "checkpoint reads during the workload's training"
    assert rows["name"].default == "**required**" and rows["cc"].default == "`dcqcn`"


def test_the_cli_reference_has_every_command_and_option():
    page = cli_ref.cli_page()
    ctx = click.Context(main, info_name="fabric-emu")
    for path, cmd, sub in cli_ref._commands(main, ctx, []):
        assert f"## fabric-emu {' '.join(path)}" in page
        for p in cmd.params:
            if isinstance(p, click.Option):
                assert any(f"`{o}" in page or f", {o}" in page for o in p.opts), (path, p.opts)


def test_every_summary_key_is_in_the_reference_and_explained():
    """The reference lists every key RunSummary writes; the results how-to,
    which says what each means, names every one too."""
    page = schema_ref.summary_page()
    howto = (REPO / "docs/how-to/results.md").read_text()
    for key in RunSummary.model_fields:
        assert f"| `{key}` |" in page, key
        assert re.search(rf"`{key}(\[\]|\{{\}})?`", howto), f"docs/how-to/results.md does not explain {key}"


def test_the_files_reference_has_every_entry():
    from emulator.rundir import RunDir
    page = files_ref.files_page()
    for name in (*RunDir.ENTRIES, *RunDir.SWEEP, *RunDir.COMPARISON, RunDir.CALIBRATION):
        assert f"| `{name}` |" in page, name
    assert "`time_ns`, `node`, `port`, `priority`, `depth_bytes`" in page


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), re.M | re.S)


def test_python_snippets_parse_and_the_tour_runs_the_example():
    """Every Python snippet is Python; the test README's tour and the pytest
    tutorial show is examples/test_my_fabric.py, which the suite runs
    (tests/integration/test_examples.py)."""
    import ast
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    blocks = [(d, b) for d in docs for b in _python_blocks(d)]
    assert len(blocks) >= 4
    for doc, block in blocks:
        ast.parse(block, filename=str(doc))
    example = (REPO / "examples/test_my_fabric.py").read_text()
    body = example[example.index("MY_FABRIC = "):].strip()
    for doc in (REPO / "README.md", REPO / "docs/tutorials/pytest-plugin.md"):
        assert body in doc.read_text(), f"{doc.name}: not examples/test_my_fabric.py's test"


def test_the_readme_links_resolve():
    """README.md is outside the site (mkdocs --strict does not see it): its
    links into docs/ are checked here."""
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 15
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (REPO / link).is_file(), f"README.md links to {link}, which is not in the repository"
    assert len(readme.splitlines()) < 250
