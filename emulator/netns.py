"""Entering a Mininet node's namespaces from Python (``setns(2)``).

``enter(pid)`` is what ``mnexec -a PID`` does before it execs: join node
``pid``'s network namespace, and its mount namespace when it has one of its
own (the fork server's children, ``forkserver.py``). ``network_of(pid)``
visits a node's network namespace only: the sockets made inside stay in it
after the thread returns to its own (``socket(2)`` takes the creating
thread's namespace for the socket's life), which is how one agent process
serves NICs of several hosts (``agents/pack.py``).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Iterator

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(path: str, flag: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, flag) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _same(path: str, kind: str) -> bool:
    return os.stat(path).st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino


def enter(pid: int) -> None:
    """Join node ``pid``'s network namespace, and its mount namespace when
    it has one of its own, for good (the calling process must be
    single-threaded to change its mount namespace)."""
    for kind, flag in (("net", CLONE_NEWNET), ("mnt", CLONE_NEWNS)):
        theirs = f"/proc/{pid}/ns/{kind}"
        if not _same(theirs, kind):
            _setns(theirs, flag)


def network_of(pid: int):
    """The calling thread in node ``pid``'s network namespace for the block,
    then back in its own (sockets opened inside stay in node ``pid``'s)."""
    return network_at(f"/proc/{pid}/ns/net")


@contextlib.contextmanager
def network_at(theirs: str | None) -> Iterator[None]:
    """``network_of`` a namespace by its path (``/proc/PID/ns/net``,
    ``/var/run/netns/NAME``); None: the thread's own."""
    if theirs is None or _same(theirs, "net"):
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(theirs, CLONE_NEWNET)
        try:
            yield
        finally:
            if _libc.setns(home, CLONE_NEWNET) != 0:     # cannot go home: do not go on elsewhere
                err = ctypes.get_errno()
                os.write(2, f"fatal: setns back to the agent's own namespace: {os.strerror(err)}\n"
                         .encode())
                os._exit(70)
    finally:
        os.close(home)
