"""A run's switches and agents forked from one warm process, not started cold.

A cold ``python -m emulator.agents.host`` spends ~0.3 s of CPU importing
Scapy, pydantic and NumPy and holds ~60 MB of its own: 64 agents and 20
switches on two cores are half a minute of imports and gigabytes. Like
Android's zygote or a pre-loading server, ``python -m emulator.net.forkserver
RUN_DIR`` imports every entry point once (``ENTRY_POINTS``; the switches'
first, the rest once it serves: ``FIRST_MODULES``), freezes the heap out of
the garbage collector's reach (so collections do not touch, and copy, the
shared pages) and forks one child per process the run asks for: ~2 ms each,
sharing the imported code and data copy-on-write.

A child is what ``mnexec -da PID python -m MODULE ARGS`` would have run: in
its own session, in the network (and mount) namespace of Mininet node PID,
with the stdin and log the runner passed (``SCM_RIGHTS``), the runner's
environment, and ``python -m MODULE ARGS`` as its command line
(``setproctitle``), so ``ps``, ``fabric-emu clean`` and the watchdog see it
as before. It dies with the fork server (``PR_SET_PDEATHSIG``), which dies
with the runner. The runner holds a ``ForkedProcess`` per child: a
``subprocess.Popen`` look-alike whose exit status the server reports on a
socket of its own, since only the server, its parent, can wait for it.

The server must stay single-threaded: a fork copies only the forking
thread, and a lock another thread held would stay held in the child.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import BinaryIO

from emulator import netns
from emulator.lifeline import die_with_runner, set_pdeathsig
from emulator.prestart import UNADOPTED, ServerProcess, end_server, start_server, take_prestarted
from emulator.rundir import RawDir

# module run as ``python -m`` -> the module whose ``main(argv) -> int`` it calls
ENTRY_POINTS = {
    "emulator.dataplane": "emulator.dataplane.switch",
    "emulator.dataplane.pack": "emulator.dataplane.pack",
    "emulator.ib.switch": "emulator.ib.switch",
    "emulator.ib.pack": "emulator.ib.pack",
    "emulator.agents.host": "emulator.agents.host",
    "emulator.agents.pack": "emulator.agents.pack",
    "emulator.collectives.agent": "emulator.collectives.agent",
    "emulator.collectives.storage": "emulator.collectives.storage",
}
SERVER_TIMEOUT_S = 60.0     # to import everything and be ready; to answer a fork request
_MAX_REQUEST = 1 << 20


# ------------------------------------------------------------------ the runner's side

class ForkedProcess:
    """A child of the fork server, as the runner sees it: the parts of
    ``subprocess.Popen`` a run uses (``pid``, ``args``, ``stdin``, ``returncode``,
    ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``)."""

    def __init__(self, pid: int, args: list[str], report: socket.socket, stdin: BinaryIO | None):
        self.pid, self.args, self.stdin = pid, args, stdin
        self.returncode: int | None = None
        self._report = report        # the server writes the exit status here, then closes it

    def _collect(self, timeout_s: float | None) -> None:
        if self.returncode is not None:
            return
        r, _, _ = select.select([self._report], [], [], timeout_s)
        if not r:
            return
        data = self._report.recv(64)
        # No status: the server died, and its children with it (PDEATHSIG).
        self.returncode = int(data) if data else -signal.SIGKILL
        self._report.close()

    def poll(self) -> int | None:
        self._collect(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._collect(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:      # not reaped, so the pid is still this child's
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The runner's handle on its fork server. Started early (its imports
    overlap the fabric's build); ``spawn`` waits for it the first time.

        fs = ForkServer(run_dir, env)       # env: what every child gets
        p = fs.spawn("emulator.agents.host", [cfg], log_path, netns_pid=node.pid, stdin_pipe=True)
        ...
        fs.close()                          # the server ends; a child still running dies with it
    """

    def __init__(self, run_dir: Path | None, env: dict[str, str],
                 more_entry_points: tuple[str, ...] = (), *, started: ServerProcess | None = None):
        """``run_dir`` None: started before the run has one (``prestart``), its
        log an anonymous file until ``adopt`` names the run. ``more_entry_points``:
        modules with ``main(argv) -> int`` the server imports and runs besides
        ``ENTRY_POINTS`` (tests' probes). ``started``: the process, started
        already (``emulator.prestart``, for no run yet and with no more entry points)."""
        self.env = dict(env)
        self.entry_points = {**ENTRY_POINTS, **{m: m for m in more_entry_points}}
        self.log_path = None if run_dir is None else RawDir(run_dir).forkserver_log
        self.proc, self._ctl, self._early_log = started or start_server(
            run_dir, self.env, more_entry_points, self.log_path)
        self._ready = False
        self._lock = threading.Lock()     # one request and its answer at a time

    def adopt(self, run_dir: Path, env: dict[str, str]) -> None:
        """Make a server started by ``prestart`` this run's: its log becomes
        RUN_DIR/forkserver.log, its command line names RUN_DIR (as ps and the
        run's leftovers checks expect) and children get ``env``. Sent at once,
        handled when the server is ready; the server does not answer it."""
        self.env = dict(env)
        self.log_path = RawDir(run_dir).forkserver_log
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with self._lock:
                socket.send_fds(self._ctl, [json.dumps({"adopt": str(run_dir)}).encode()], [log])
        except OSError:     # it died (a failed import?): the first spawn says why, from its log
            pass
        finally:
            os.close(log)

    def _log_tail(self) -> str:
        text = ""
        if self._early_log is not None:
            self._early_log.seek(0)
            text = self._early_log.read().decode(errors="replace")
        if self.log_path is not None and self.log_path.exists():
            text += self.log_path.read_text(errors="replace")
        return text[-2000:]

    def _wait_ready(self) -> None:
        r, _, _ = select.select([self._ctl], [], [], SERVER_TIMEOUT_S)
        try:
            msg = self._ctl.recv(64) if r else b""
        except OSError:     # reset: it died with a request of ours unread
            msg = b""
        if msg != b"ready":
            raise OSError(f"the fork server did not start (log {self.log_path}):\n{self._log_tail()}")
        self._ready = True

    def spawn(self, module: str, args: list[str], log_path: Path, *,
              netns_pid: int | None = None, stdin_pipe: bool = False) -> ForkedProcess:
        """``python -m module args`` forked warm; stdout and stderr to
        ``log_path``; in Mininet node ``netns_pid``'s namespaces if given;
        with ``stdin_pipe`` its stdin is the returned process's ``stdin``."""
        if module not in self.entry_points:
            raise ValueError(f"the fork server runs {sorted(self.entry_points)}, not {module}")
        title = [sys.executable, "-m", module, *map(str, args)]
        mine, report = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        r_in, w_in = os.pipe() if stdin_pipe else (os.open(os.devnull, os.O_RDONLY), None)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        req = {"module": module, "args": [str(a) for a in args], "netns_pid": netns_pid,
               "cwd": os.getcwd(), "env": self.env, "title": " ".join(title)}
        try:
            with self._lock:
                if not self._ready:
                    self._wait_ready()
                socket.send_fds(self._ctl, [json.dumps(req).encode()], [r_in, log, report.fileno()])
                r, _, _ = select.select([self._ctl], [], [], SERVER_TIMEOUT_S)
                answer = json.loads(self._ctl.recv(_MAX_REQUEST) or b"{}") if r else {}
            if "pid" not in answer:
                raise OSError(f"the fork server could not start {module}: "
                              f"{answer.get('error', 'no answer')} (log {self.log_path})")
        except BaseException:    # the child's ends are ours to close: no child holds them
            mine.close()
            if w_in is not None:
                os.close(w_in)
            raise
        finally:
            for fd in (r_in, log):
                os.close(fd)
            report.close()
        stdin = os.fdopen(w_in, "wb") if w_in is not None else None
        return ForkedProcess(answer["pid"], title, mine, stdin)

    def close(self, grace_s: float = 5.0) -> None:
        """End the server (its children, if any still run, die with it)."""
        self._ctl.close()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._early_log is not None:
            self._early_log.close()


def for_run(run_dir: Path, env: dict[str, str]) -> ForkServer:
    """The fork server of the run in ``run_dir``: the prestarted one
    (``emulator.prestart``) if it is alive, else a new one."""
    started = take_prestarted()
    if started is not None and started.proc.poll() is None:
        server = ForkServer(None, env, started=started)
        server.adopt(run_dir, env)
        return server
    if started is not None:      # it died (killed?): its log says why; a new one for this run
        end_server(started)
    return ForkServer(run_dir, env)


# ------------------------------------------------------------------ the server

PROFILE_ENV = "FABRIC_EMU_PROFILE"      # a directory: each child's cProfile stats go there


def _profiled(entry, req: dict) -> int:
    """``entry(args)`` under cProfile; its stats to $FABRIC_EMU_PROFILE/
    MODULE.ARG.PID.prof (``python -m pstats`` reads them): where a run's
    switches and agents spend their CPU, the process's own, in place."""
    import cProfile     # deferred: only when FABRIC_EMU_PROFILE asks for a profile
    prof = cProfile.Profile()
    try:
        return prof.runcall(entry, req["args"])
    finally:
        tag = Path(req["args"][0]).name.split(".")[0] if req["args"] else "noargs"
        out = Path(os.environ[PROFILE_ENV]) / f"{req['module']}.{tag}.{os.getpid()}.prof"
        out.parent.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(out)


def _child(req: dict, fds: list[int], server_fds: list[int], server_pid: int,
           entry_points: dict[str, str]) -> None:
    """In the forked child: become the requested process, run it, exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in server_fds:
            os.close(fd)
        stdin_fd, log_fd, report_fd = fds
        os.close(report_fd)
        os.setsid()
        set_pdeathsig(signal.SIGKILL)
        if os.getppid() != server_pid:       # the server died before prctl took effect
            os._exit(1)
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(stdin_fd)
        os.close(log_fd)
        if req["netns_pid"]:
            netns.enter(int(req["netns_pid"]))
        import setproctitle     # deferred: only in the fork server's processes (see serve)
        setproctitle.setproctitle(req["title"])
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [req["module"], *req["args"]]
        entry = importlib.import_module(entry_points[req["module"]]).main
        code = _profiled(entry, req) if os.environ.get(PROFILE_ENV) else entry(req["args"])
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(code if isinstance(code, int) else 1)


def _adopt(msg: bytes, fds: list[int]) -> None:
    """Log to the run's file from now on; name the run on the command line.
    A failure is logged, not answered: the runner reads no answer to this."""
    import setproctitle     # deferred: only in the fork server's processes (see serve)
    try:
        run_dir = json.loads(msg)["adopt"]
        sys.stdout.flush()
        for fd in fds[:1]:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
    except Exception:
        traceback.print_exc()
        return
    finally:
        for fd in fds:
            os.close(fd)
    # sys.argv: [this file, RUN_DIR (UNADOPTED), CONTROL_FD, MODULE...]
    setproctitle.setproctitle(" ".join([sys.executable, "-m", "emulator.net.forkserver", run_dir,
                                        *sys.argv[2:]]))
    print(f"fork server for {run_dir}: adopted", flush=True)


# What a run forks first: its switches. The server is ready once these are
# imported; the agents' modules follow, each once no request has come for
# IDLE_BEFORE_IMPORT_S (a runner waiting for "ready", or spawning its switch
# packs one after the other, sends its next request within it), or on demand
# before a fork that needs one.
FIRST_MODULES = ("emulator.dataplane.pack", "emulator.dataplane.switch")
# Imported with them: what a switch process imports first thing, its
# P4Runtime and gNMI servers and gRPC under them (the switch modules defer
# them, for importers that serve nothing). Safe before a fork: importing gRPC
# starts no thread; its core starts when a channel or server is made, which
# only a child does.
FIRST_PRELOADS = ("emulator.dataplane.p4rt_server", "emulator.dataplane.gnmi_server")
IDLE_BEFORE_IMPORT_S = 0.05


def _freeze() -> None:
    gc.collect()
    gc.freeze()          # imported objects leave the collector's reach: their pages stay shared


def _import_later(module: str, failed: dict[str, str]) -> None:
    """Import a module after the server is ready; a failure is logged and
    kept, answered to the requests for that module."""
    try:
        importlib.import_module(module)
    except Exception as e:
        traceback.print_exc()
        sys.stdout.flush()
        failed[module] = f"{type(e).__name__}: {e}"
    _freeze()


def serve(ctl: socket.socket, entry_points: dict[str, str]) -> None:
    die_with_runner()
    modules = sorted(set(entry_points.values()))
    # tests' probes (not ENTRY_POINTS) too: a probe that cannot be imported ends the start
    later = [m for m in modules if m in ENTRY_POINTS.values() and m not in FIRST_MODULES]
    for module in [*(m for m in modules if m not in later), *FIRST_PRELOADS]:
        importlib.import_module(module)
    # deferred: the runner imports this module too, and its own process title is
    # not to be touched; setproctitle is loaded in the fork server only.
    import setproctitle
    # Set up here, while argv and environ lie as the kernel laid them out:
    # a child that changed its environment first could not move them.
    setproctitle.setproctitle(setproctitle.getproctitle())
    _freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    failed: dict[str, str] = {}
    ctl.send(b"ready")
    me = os.getpid()
    while True:
        ready, _, _ = select.select([ctl, wake_r], [], [], IDLE_BEFORE_IMPORT_S if later else None)
        if not ready:                        # nothing waits: the next module
            _import_later(later.pop(0), failed)
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(children)
        if ctl not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(ctl, _MAX_REQUEST, 3)
        if not msg:                          # the runner closed its end: done
            return
        if msg.startswith(b'{"adopt"'):      # ForkServer.adopt: never answered
            _adopt(msg, fds)
            continue
        try:
            req = json.loads(msg)
            module = entry_points.get(req["module"])
            if module in later:
                later.remove(module)
                _import_later(module, failed)
            if module in failed:
                raise ImportError(failed[module])
            pid = os.fork()
        except Exception as e:               # a bad request, or no fork: say so, keep serving
            for fd in fds:
                os.close(fd)
            ctl.send(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
            continue
        if pid == 0:
            _child(req, fds, [ctl.fileno(), wake_r, wake_w, *(s.fileno() for s in children.values())],
                   me, entry_points)
        os.close(fds[0])
        os.close(fds[1])
        children[pid] = socket.socket(fileno=fds[2])
        ctl.send(json.dumps({"pid": pid}).encode())


def _reap(children: dict[int, socket.socket]) -> None:
    """Reap exited children, and tell each one's runner handle its status."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        report = children.pop(pid, None)
        if report is not None:
            try:
                report.send(str(os.waitstatus_to_exitcode(status)).encode())
            except OSError:               # the runner closed its end
                pass
            report.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m emulator.net.forkserver RUN_DIR CONTROL_FD [MODULE...] "
              "(started by the runner: emulator.net.forkserver.ForkServer)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    ctl = socket.socket(fileno=int(argv[1]))
    print(f"fork server for {argv[0]}: importing", flush=True)
    serve(ctl, {**ENTRY_POINTS, **{m: m for m in argv[2:]}})
    print(f"fork server done after {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
