"""mkdocs hooks (mkdocs.yml ``hooks:``).

``docs/report.md`` (the run report, ``report.html``) is written on a branch of
its own; until it is in the tree the nav must not name it (``--strict`` fails
on a nav entry without a page), and once it is, it belongs under How-to.
"""
from __future__ import annotations

from pathlib import Path

REPORT_PAGE = "report.md"


def on_config(config, **kwargs):
    if (Path(config["docs_dir"]) / REPORT_PAGE).is_file() and not _named(config["nav"], REPORT_PAGE):
        for section in config["nav"]:
            if isinstance(section, dict) and "How-to guides" in section:
                section["How-to guides"].insert(8, {"Read a run's report": REPORT_PAGE})
    return config


def _named(nav, page: str) -> bool:
    if isinstance(nav, str):
        return nav == page
    if isinstance(nav, dict):
        return any(_named(v, page) for v in nav.values())
    if isinstance(nav, list):
        return any(_named(v, page) for v in nav)
    return False
