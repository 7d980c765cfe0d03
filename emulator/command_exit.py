"""The ``fabric-emu`` command ends without the interpreter's teardown.

Freeing every module and object of a run (pydantic's schemas, gRPC,
Mininet, the results' rows) took ~0.3 s of CPU after the command's last
line was printed, and the whole command waited for it. ``without_teardown``
wraps click's ``main``: where it would raise ``SystemExit`` as the command
itself, the process ends by ``exit_without_teardown`` instead; in a test
process (a ``CliRunner``) it raises as before.
"""
from __future__ import annotations

import atexit
import functools
import os
import sys
import threading

COMMAND = "fabric-emu"
MODULE = "emulator.cli"      # python -m emulator.cli


def is_the_command() -> bool:
    """This process is the command: the console script or ``python -m``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return os.path.basename(sys.argv[0]) == COMMAND or getattr(spec, "name", None) == MODULE


def exit_without_teardown(code) -> None:
    """End the process as ``sys.exit(code)`` would, less the teardown:
    non-daemon threads joined, atexit handlers run (``weakref.finalize``'s
    included), stdout and stderr flushed, then ``os._exit``. Every results
    file is closed before (``emulator.atomic``'s context managers)."""
    if code is None:
        code = 0
    elif not isinstance(code, int):         # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        code = 1
    # what the interpreter's exit does first: threading's own exit hooks
    # (an executor left open lets its workers go) and the join of every
    # non-daemon thread -- joining them alone would wait on such workers forever
    threading._shutdown()
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):       # a closed pipe or file: nothing more to say
            pass
    os._exit(code)


def without_teardown(main):
    """``main`` (click's), ending the process by ``exit_without_teardown``
    where it would raise ``SystemExit`` as the command."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except SystemExit as e:
            if is_the_command():
                exit_without_teardown(e.code)
            raise
    return wrapped
