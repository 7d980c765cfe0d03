"""Progress reports over the in-band management network: real management traffic.

With ``management: {in_band: ...}``, a run starts a **head** in the
management host (a UDP listener on its in-band address) and a **reporter**
in every server's namespace, beside the server's agents: every
``interval_ms`` of wall time it sends the head what its agents last wrote
to their progress files (``RUN/<nic>.progress.json``), one datagram a
report, out of the server's in-band interface -- never its NICs: the head's
address is on the in-band subnet, which only that interface reaches. The
head counts what arrives per server and writes it at the end. Both are
``python -m emulator.net.inband head|report ...``::

    head   PORT OUT.json
    report HEAD_IP:PORT SERVER INTERVAL_MS PROGRESS.json...

What the reports measure is wall time (the management network is the
kernel's, not the fabric's); they never enter the fabric's results.
"""
from __future__ import annotations

import json
import signal
import socket
import sys
import time
from pathlib import Path

from emulator.atomic import atomic_write_text
from emulator.lifeline import die_with_runner

HEAD_PORT = 7100
MAX_DATAGRAM_BYTES = 8192


def _stopper() -> list[bool]:
    stop = [False]

    def on_stop(*_):
        stop[0] = True
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    return stop


def head(port: int, out: Path) -> int:
    """Receive reports until SIGTERM; then ``out``: server -> {reports, bytes, last}."""
    stop = _stopper()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(0.05)
    seen: dict[str, dict] = {}
    count = _counter(seen)
    print(f"head: listening on udp {port}", flush=True)
    while not stop[0]:
        try:
            data = sock.recv(MAX_DATAGRAM_BYTES)
        except (socket.timeout, InterruptedError):
            continue
        count(data)
    sock.setblocking(False)             # what arrived before the stop, still queued
    while True:
        try:
            count(sock.recv(MAX_DATAGRAM_BYTES))
        except (BlockingIOError, InterruptedError):
            break
    atomic_write_text(out, json.dumps(seen, indent=1, sort_keys=True))
    return 0


def _counter(seen: dict[str, dict]):
    def count(data: bytes) -> None:
        try:
            report = json.loads(data)
            server = str(report["server"])
        except (ValueError, KeyError, TypeError):     # not a report: counted apart
            seen.setdefault("(malformed)", {"reports": 0, "bytes": 0})["reports"] += 1
            return
        entry = seen.setdefault(server, {"reports": 0, "bytes": 0})
        entry["reports"] += 1
        entry["bytes"] += len(data)
        entry["last"] = report.get("progress")
    return count


def report(head_addr: str, server: str, interval_ms: float, files: list[Path]) -> int:
    """Send ``files``' contents to the head every ``interval_ms`` until SIGTERM."""
    stop = _stopper()
    ip, _, port = head_addr.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def send() -> None:
        progress = {}
        for f in files:
            try:
                progress[f.name.removesuffix(".progress.json")] = json.loads(f.read_text())
            except (OSError, ValueError):        # not written yet, or being replaced
                pass
        try:
            sock.sendto(json.dumps({"server": server, "progress": progress}).encode(),
                        (ip, int(port)))
        except OSError:                           # the network went (teardown)
            pass
    print(f"{server}: reporting to {head_addr} every {interval_ms:g} ms", flush=True)
    while not stop[0]:
        send()
        time.sleep(interval_ms / 1000)
    send()                  # the last word: what the agents wrote before they stopped
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_runner(unsupervised_signal=signal.SIGTERM)
    if len(argv) == 3 and argv[0] == "head":
        return head(int(argv[1]), Path(argv[2]))
    if len(argv) >= 4 and argv[0] == "report":
        return report(argv[1], argv[2], float(argv[3]), [Path(a) for a in argv[4:]])
    print("usage: python -m emulator.net.inband head PORT OUT.json | "
          "report HEAD_IP:PORT SERVER INTERVAL_MS PROGRESS.json...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
