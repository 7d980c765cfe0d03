"""Two emulated servers on one machine, for Mininet's cluster edition.

Each server is a network namespace; server "b" runs its own sshd (host and
client keys generated for the test) on a private address, and has a
private tmpfs over ``private_dir`` (so a run directory under it is not
shared with "a": what b's processes write must be gathered over ssh, as
between real machines). A veth pair joins a (10.77.0.1) and b (10.77.0.2).
The runner runs inside "a" (``run_in_a``); ``cluster_spec`` is the
experiment's ``cluster:`` section for them.

    with TwoServers(tmp_path, private_dir=tmp_path / "out") as rig:
        rig.run_in_a([fabric-emu, run, exp.yaml, --out, ...])
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
A_ADDR, B_ADDR = "10.77.0.1", "10.77.0.2"


def unavailable_reason() -> str | None:
    for tool in (SSHD, "ssh", "ssh-keygen", "sudo", "unshare"):
        if not shutil.which(tool) and not Path(tool).exists():
            return f"{tool} is not installed (apt: openssh-server openssh-client sudo util-linux)"
    if not Path("/dev/net/tun").exists():
        return "/dev/net/tun is missing: the ssh-carried links need tap devices"
    return None


def _sh(*argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True, **kw)


class TwoServers:
    def __init__(self, tmp: Path, private_dir: Path, tag: str = "fe",
                 sshd_options: tuple[str, ...] = ()):
        """sshd_options: lines added to b's sshd_config."""
        self.tmp, self.private_dir = Path(tmp), Path(private_dir)
        self.sshd_options = sshd_options
        self.ns_a, self.ns_b = f"{tag}srva", f"{tag}srvb"
        self.key = self.tmp / "id_ed25519"
        self.known_hosts = self.tmp / "known_hosts"
        self.sshd: subprocess.Popen | None = None
        self.master: subprocess.Popen | None = None      # the rig's own ssh connection

    # ------------------------------------------------------------------ setup
    def __enter__(self) -> "TwoServers":
        try:
            self._namespaces()
            self._sshd()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _namespaces(self) -> None:
        for ns in (self.ns_a, self.ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "link", "add", "fecla", "netns", self.ns_a, "type", "veth",
            "peer", "name", "feclb", "netns", self.ns_b)
        for ns, dev, addr in ((self.ns_a, "fecla", A_ADDR), (self.ns_b, "feclb", B_ADDR)):
            _sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")

    def _sshd(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.private_dir.mkdir(parents=True, exist_ok=True)
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key)
        host_key = self.tmp / "host_ed25519"
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key)
        auth = self.tmp / "authorized_keys"
        auth.write_text(Path(f"{self.key}.pub").read_text())
        auth.chmod(0o600)
        cfg = self.tmp / "sshd_config"
        cfg.write_text("\n".join([
            f"ListenAddress {B_ADDR}", f"HostKey {host_key}", f"AuthorizedKeysFile {auth}",
            f"PidFile {self.tmp / 'sshd.pid'}", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
            "StrictModes no", "UseDNS no", "PermitTunnel yes", "AllowTcpForwarding yes",
            "MaxSessions 200", "MaxStartups 200", "LogLevel ERROR", *self.sshd_options, ""]))
        Path("/run/sshd").mkdir(exist_ok=True)      # sshd's privilege separation directory
        # b's own view of private_dir: an empty tmpfs, as on another machine
        self.sshd = subprocess.Popen(
            ["ip", "netns", "exec", self.ns_b, "unshare", "-m", "--propagation", "private",
             "sh", "-c", f'mount -t tmpfs fe-cluster-test "$1" && exec {SSHD} -D -e -f "$2"',
             "sh", str(self.private_dir), str(cfg)],
            stdout=subprocess.DEVNULL, stderr=open(self.tmp / "sshd.log", "w"))
        deadline = time.monotonic() + 15
        while self.ssh("true").returncode != 0:
            if self.sshd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd in {self.ns_b} did not start: "
                                   f"{(self.tmp / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.1)
        self.master = subprocess.Popen([*self._ssh_argv(), "-o", "ControlMaster=yes", "-N",
                                        f"root@{B_ADDR}"], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @property
    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=accept-new", "-o", "LogLevel=ERROR"]

    def _ssh_argv(self) -> list[str]:
        # The rig's own checks share the connection _sshd opened (a new one
        # costs 0.3-0.5 s on a busy machine); without it, ssh connects anew.
        return ["ip", "netns", "exec", self.ns_a, "ssh", "-o", "BatchMode=yes", *self.ssh_options,
                "-o", f"ControlPath={self.tmp / 'rig.ssh'}"]

    def ssh(self, command: str) -> subprocess.CompletedProcess:
        """``command`` on server b (from a)."""
        return subprocess.run([*self._ssh_argv(), f"root@{B_ADDR}", command],
                              capture_output=True, text=True, timeout=30)

    def cluster_spec(self, placement) -> dict:
        return {"servers": [{"name": "a", "address": "localhost"},
                            {"name": "b", "address": B_ADDR}],
                "placement": placement, "link": "ssh", "ssh_options": self.ssh_options}

    def run_in_a(self, argv, timeout_s: float = 600, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns_a, *map(str, argv)],
                              capture_output=True, text=True, timeout=timeout_s, **kw)

    def interfaces(self, ns: str) -> list[str]:
        out = _sh("ip", "-n", ns, "-o", "link", "show").stdout
        return [line.split(":", 2)[1].strip().split("@", 1)[0] for line in out.splitlines()]

    # --------------------------------------------------------------- teardown
    def __exit__(self, *exc) -> None:
        if self.master is not None:
            # ssh's master has been seen to sleep through a SIGTERM (pytest
            # then waited forever): ask it to exit over its socket, then kill
            try:
                subprocess.run([*self._ssh_argv(), "-O", "exit", f"root@{B_ADDR}"],
                               capture_output=True, timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.master.terminate()
            try:
                self.master.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait()
        if self.sshd is not None and self.sshd.poll() is None:
            pid_file = self.tmp / "sshd.pid"
            if pid_file.exists():
                subprocess.run(["kill", pid_file.read_text().strip()], capture_output=True)
            try:
                self.sshd.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.sshd.kill()
                self.sshd.wait()
        for ns in (self.ns_a, self.ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
