"""mkdocs-gen-files' script (mkdocs.yml): the reference pages generated from
the code at every build, never checked in."""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]     # these modules, then the tree's emulator

import mkdocs_gen_files  # noqa: E402

import cli_ref  # noqa: E402
import files_ref  # noqa: E402
import schema_ref  # noqa: E402

PAGES = {
    "reference/experiment.md": schema_ref.experiment_page,
    "reference/topology.md": schema_ref.topology_page,
    "reference/summary.md": schema_ref.summary_page,
    "reference/cli.md": cli_ref.cli_page,
    "reference/result-files.md": files_ref.files_page,
}

for path, page in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(page())
    mkdocs_gen_files.set_edit_path(path, "docs/_gen/main.py")
