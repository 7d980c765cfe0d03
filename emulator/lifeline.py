"""A run's processes die with the runner that started them.

The runner (the process that built the fabric) starts every switch and
agent with its own pid in ``FABRIC_EMU_RUNNER_PID`` (``child_env``); the
process's ``main()`` calls ``die_with_runner()`` first thing. When the
runner is the direct parent (``Popen``, or Mininet's ``mnexec -da``, which
execs), the kernel SIGKILLs the process when the runner dies
(``PR_SET_PDEATHSIG``); when something sits in between (a shell), a thread
blocked on a pidfd of the runner does. Either way a SIGKILLed runner leaves
no switch or agent behind, and its namespaces die with them; the watchdog
(``emulator.net.watchdog``) removes what does not die by itself.

The ``fabric-emu`` command itself ends without the interpreter's teardown
(``without_teardown``): freeing every module and object of a run (pydantic's
schemas, gRPC, Mininet, the results' rows) took ~0.3 s of CPU after the
command's last line was printed, and the whole command waited for it.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import select
import signal
import sys
import threading

RUNNER_PID_ENV = "FABRIC_EMU_RUNNER_PID"
_PR_SET_PDEATHSIG = 1
COMMAND = "fabric-emu"
MODULE = "emulator.cli"      # python -m emulator.cli


def child_env() -> dict[str, str]:
    """Environment for a process this runner starts: it names the runner."""
    return {**os.environ, RUNNER_PID_ENV: str(os.getpid())}


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """``sig`` to this process when the thread that forked it ends. Also a
    ``preexec_fn`` for programs that are not ours (BMv2)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except OSError:   # not glibc: the watchdog still reaps
        pass


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_runner(unsupervised_signal: int | None = None) -> None:
    """SIGKILL this process when its runner dies. Started by hand (no runner
    named), ``unsupervised_signal`` (if any) is sent when the parent dies."""
    pid = int(os.environ.get(RUNNER_PID_ENV) or 0)
    if not pid:
        if unsupervised_signal is not None:
            set_pdeathsig(unsupervised_signal)
        return
    if os.getppid() == pid:
        set_pdeathsig(signal.SIGKILL)
        if os.getppid() != pid:      # the runner died before prctl took effect
            _die()
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:       # gone already
        _die()
        return

    def watch() -> None:
        select.select([fd], [], [])   # readable when the runner has exited
        _die()

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def stop_on_signals() -> list[bool]:
    """A flag SIGTERM and SIGINT set: the loop ends at its next turn."""
    stop = [False]

    def on_signal(signum, frame):
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


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
