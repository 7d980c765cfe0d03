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


class OutputError(FabricEmuError):
    """An output directory that cannot be used as given: a system directory,
    under a regular file, not writable, or holding files that are not an
    earlier run's (``emulator.experiment.outdir``). Exit status 2: the place
    given is bad input, and nothing was built or written."""


class WriteFailed(FabricEmuError):
    """A result file that could not be written (disk full, no permission, a
    read-only file system): the earlier file is kept (``emulator.atomic``).
    Exit status 1, as a run that failed; ``oserror`` is the cause."""

    exit_status = 1

    def __init__(self, message: str, oserror: OSError | None = None):
        super().__init__(message)
        self.oserror = oserror
