"""Run a helper process on the CPU a run leaves idle, and only on that.

A run's switches and agents wake every few hundred microseconds of wall time
and must run at once: their lateness is the run's fidelity. A helper that
works during the traffic (the plotter importing matplotlib) must give way
to them the instant one wakes. A nice value does not do that here (autogroups,
EEVDF's run-to-parity: ``docs/design-notes.md``, "The idle cgroup"); the
scheduler's idle class does: a task in a cgroup with ``cpu.idle`` = 1 is
preempted at once by any other wakeup and gets the CPU only when nothing else
wants it (Linux 5.15+, cgroup v1 and v2).

    back = enter_idle(pid)     # the process into the idle cgroup (None: not possible)
    ...                        # its work nobody waits for
    leave_idle(back, pid)      # back where it was, normal priority again

The runner moves its plotter right after starting it (before the child's
interpreter has done much) and moves it back when the traffic is over.
Without a cgroup cpu controller (or cpu.idle), ``enter_idle`` falls back to
nice 19 for the process and its autogroup. ``fabric-emu clean`` removes the
cgroup (``remove_idle_cgroup``).
"""
from __future__ import annotations

import os
from pathlib import Path

IDLE_CGROUP = "fabric-emu-idle"
FALLBACK_NICE = 19


def cpu_cgroup_root() -> Path | None:
    """Where the hierarchy with the cpu controller is mounted: cgroup v1's
    ``cpu``, or a cgroup v2 whose root delegates ``cpu`` to its children."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1:4] for line in f]
    except OSError:
        return None
    for mnt, fstype, opts in mounts:
        if fstype == "cgroup" and "cpu" in opts.split(","):
            return Path(mnt)
    for mnt, fstype, _ in mounts:
        try:
            if fstype == "cgroup2" and \
                    "cpu" in (Path(mnt) / "cgroup.subtree_control").read_text().split():
                return Path(mnt)
        except OSError:
            continue
    return None


def _cgroup_of(root: Path, pid: int) -> Path:
    """Process ``pid``'s cgroup in ``root``'s hierarchy."""
    v2 = not (root / "tasks").exists()
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if (v2 and controllers == "") or (not v2 and "cpu" in controllers.split(",")):
                return root / path.lstrip("/")
    return root


def enter_idle(pid: int | None = None) -> tuple[str, str] | None:
    """Move process ``pid`` (default: this one) into the idle cgroup; what
    ``leave_idle`` needs to move it back (("cgroup", its cgroup.procs) or
    ("nice", "") after the fallback), None if neither was possible."""
    pid = os.getpid() if pid is None else pid
    root = cpu_cgroup_root()
    if root is not None:
        try:
            origin = _cgroup_of(root, pid) / "cgroup.procs"
            group = root / IDLE_CGROUP
            group.mkdir(exist_ok=True)
            (group / "cpu.idle").write_text("1")
            (group / "cgroup.procs").write_text(str(pid))
            return ("cgroup", str(origin))
        except OSError:
            pass
    return ("nice", "") if _set_nice(pid, FALLBACK_NICE) else None


def leave_idle(back: tuple[str, str] | None, pid: int | None = None) -> None:
    """Undo ``enter_idle`` for ``pid``: its own cgroup and nice 0 again."""
    if back is None:
        return
    pid = os.getpid() if pid is None else pid
    kind, origin = back
    if kind == "cgroup":
        try:
            Path(origin).write_text(str(pid))
        except OSError:          # gone already
            pass
        remove_idle_cgroup()
    else:
        _set_nice(pid, 0)


def out_of_idle(pids) -> None:
    """Those of ``pids`` in the idle cgroup, moved to the hierarchy's root
    before they are killed: a dying process exits on the CPU it is given,
    and in the idle class a busy machine gives it none for seconds."""
    root = cpu_cgroup_root()
    if root is None:
        return
    try:
        idle = set((root / IDLE_CGROUP / "cgroup.procs").read_text().split())
    except OSError:          # no idle cgroup: nothing in it
        return
    for pid in pids:
        if str(pid) in idle:
            try:
                (root / "cgroup.procs").write_text(str(pid))
            except OSError:  # gone already
                pass


def remove_idle_cgroup() -> bool:
    """Remove the idle cgroup if it exists and nothing is in it (a helper
    killed inside it left it behind); True if it is gone."""
    root = cpu_cgroup_root()
    if root is None or not (root / IDLE_CGROUP).exists():
        return True
    try:
        (root / IDLE_CGROUP).rmdir()
        return True
    except OSError:        # a process still in it
        return False


def _set_nice(pid: int, nice: int) -> bool:
    """``pid``'s nice value and its autogroup's (it must lead its own session:
    the autogroup is then its own). Back to 0 needs CAP_SYS_NICE."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:          # no autogroups: the nice value is what there is
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        return True
    except OSError:
        return False
