"""Whether a running fabric is still whole, and if not, what of it died, in one line.

A switch process that exits, a Mininet shell that ends (``fabric-emu clean
--force`` under a run) or an interface that vanishes leaves a run measuring
a fabric that is not there; ``FabricHealth.check_alive`` turns that into a
``RunAborted`` naming the part and its log, mid-run and while the fabric
starts (``fabric.py``). ``exit_phrase`` words how any process ended, for
the switches here and the agents (``experiment/agents.py``) alike.
"""
from __future__ import annotations

import os
import signal

from emulator.errors import RunAborted


def exit_phrase(returncode: int) -> str:
    """How a process ended, for one line: "exited with status 1", "was killed by SIGKILL"."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


class FabricHealth:
    """The liveness checks of a ``FabricNet`` (a mixin of it: it reads
    ``fabric``, ``net`` and ``switch_interfaces``)."""

    def check_alive(self) -> None:
        """Raise ``RunAborted`` (one line: what, and its log) if a switch
        process has exited or a fabric interface has gone."""
        broken = self._broken("mid-run")
        if broken:
            raise RunAborted(broken)

    def _broken(self, when: str) -> str | None:
        """What of the fabric died ``when``: a switch (and its log), a node
        shell, an interface; None if it is whole."""
        if self.net is None:
            return None
        for sw in self.fabric.switches():
            node = self.net.get(sw.name)
            proc = getattr(node, "proc", None)
            if proc is not None and proc.poll() is not None:
                return (f"switch {sw.name} {exit_phrase(proc.returncode)} {when} "
                        f"(its log: {node.log_path})")
        dead = self._dead_shell(self.net)
        if dead is not None:
            return (f"node {dead.name}'s Mininet shell {exit_phrase(dead.shell.returncode) if dead.shell else 'is gone'} "
                    f"{when}: the fabric was taken down under the run")
        present = set(os.listdir("/sys/class/net"))      # one read, not a stat per port
        gone = [n for n in self.switch_interfaces() if n not in present]
        if gone:
            return (f"interface {gone[0]} vanished {when} ({len(gone)} of the fabric's): "
                    f"the fabric was taken down under the run")
        return None

    @staticmethod
    def _dead_shell(net):
        """A node whose Mininet shell has ended (``clean`` kills them), or None."""
        return next((n for n in net.hosts + net.switches
                     if n.shell is None or n.shell.poll() is not None), None)
