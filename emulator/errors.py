"""Errors a user sees as one line: which file, which field, why."""
from __future__ import annotations


class FabricEmuError(Exception):
    """Base of the errors the CLI reports as one line and exit status 2."""


class ConfigError(FabricEmuError):
    """A configuration (topology or experiment file, a process's JSON config) that
    cannot be used as written."""

    def __init__(self, file: str, field: str, reason: str):
        self.file, self.field, self.reason = str(file), field, reason
        super().__init__(f"{self.file}: {field}: {reason}" if field else f"{self.file}: {reason}")


class EnvironmentProblem(FabricEmuError):
    """The machine cannot run the fabric: not root, a binary missing, ..."""


class RunAborted(FabricEmuError):
    """A run ended early: a switch or agent died, or the fabric was taken down
    under it. The CLI prints it as one line; the exit status is 1 (the run
    failed, as an incomplete one does), not 2 (bad input)."""

    exit_status = 1
