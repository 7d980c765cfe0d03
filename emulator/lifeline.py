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
"""
from __future__ import annotations

import ctypes
import os
import select
import signal
import threading

RUNNER_PID_ENV = "FABRIC_EMU_RUNNER_PID"
_PR_SET_PDEATHSIG = 1


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
