"""The messages between the coordinator and its members: one stream
connection each (a Unix socket; a cluster's remote servers reach it through
the runner's ssh connection, which forwards streams only), every message
prefixed by its length (``send_msg``/``recv_msg``).

member -> coordinator
  HELLO   ``b"H"`` + JSON ``{"name", "ifnames", "agent"}``: the links the
          member sends and receives on (a veth end's name is both), in the
          order of its report's link indexes; ``agent``: its end matters
          (a switch's does not: the run ends when every agent is done).
  REPORT  ``b"R"`` (or ``b"B"``: the member leaves after this report):
          next event ns, done flag, then per link it sent on: index,
          frames, earliest arrival ns.
coordinator -> member
  GO      ``b"G"``: the window's start and end ns (exclusive), then per link
          of the member: its index and how many frames were sent to it since
          the last GO. The member reads each link's socket until it holds all
          of that link's (a count per link, not in all: a frame of this
          window on a fast link must not stand in for an earlier one still
          crossing a slow link, such as a cluster's tunnel between servers).
  END     ``b"E"``: the run is over; time stops.
"""
from __future__ import annotations

import json
import struct

from emulator.clock import NEVER_NS

NEVER = NEVER_NS                # "no event": the members' and the coordinator's
_LEN = struct.Struct("<I")

HELLO, REPORT, BYE, GO, END = b"H", b"R", b"B", b"G", b"E"
_REPORT = struct.Struct("<cqBH")          # kind, next event ns, flags, entries
_ENTRY = struct.Struct("<HIq")            # link index, frames, earliest arrival ns
_GO = struct.Struct("<cqqH")              # kind, window start ns, end ns, entries
_GO_ENTRY = struct.Struct("<HI")          # the member's link index, frames newly sent to it
DONE_FLAG = 1


def hello(name: str, ifnames: list[str], agent: bool) -> bytes:
    return HELLO + json.dumps({"name": name, "ifnames": ifnames, "agent": agent}).encode()


def parse_hello(msg: bytes) -> dict:
    if msg[:1] != HELLO:
        raise ValueError(f"expected HELLO, got {msg[:1]!r}")
    return json.loads(msg[1:])


def report(next_ns: int, done: bool, sent: list[tuple[int, int, int]], bye: bool = False) -> bytes:
    head = _REPORT.pack(BYE if bye else REPORT, min(next_ns, NEVER), DONE_FLAG if done else 0,
                        len(sent))
    return head + b"".join(_ENTRY.pack(*e) for e in sent)


def parse_report(msg: bytes) -> tuple[bytes, int, bool, list[tuple[int, int, int]]]:
    """(kind, next event ns, done, [(link index, frames, earliest arrival ns)])."""
    kind, next_ns, flags, n = _REPORT.unpack_from(msg)
    if kind not in (REPORT, BYE):
        raise ValueError(f"expected REPORT, got {kind!r}")
    off = _REPORT.size
    entries = [_ENTRY.unpack_from(msg, off + i * _ENTRY.size) for i in range(n)]
    return kind, next_ns, bool(flags & DONE_FLAG), entries


def go(start_ns: int, end_ns: int, new_rx: list[tuple[int, int]]) -> bytes:
    """``new_rx``: (link index, frames sent to the member on it since its last GO)."""
    return _GO.pack(GO, start_ns, end_ns, len(new_rx)) + b"".join(_GO_ENTRY.pack(*e) for e in new_rx)


def parse_go(msg: bytes) -> tuple[int, int, list[tuple[int, int]]]:
    """(window start ns, end ns, [(link index, new frames)])."""
    kind, start_ns, end_ns, n = _GO.unpack_from(msg)
    if kind != GO:
        raise ValueError(f"expected GO, got {kind!r}")
    off = _GO.size
    return start_ns, end_ns, [_GO_ENTRY.unpack_from(msg, off + i * _GO_ENTRY.size) for i in range(n)]


def send_msg(sock, payload: bytes) -> None:
    sock.sendall(_LEN.pack(len(payload)) + payload)


def recv_msg(sock) -> bytes:
    """The next message, b"" if the connection closed (cleanly or mid-message)."""
    head = _recv_exactly(sock, _LEN.size)
    if len(head) < _LEN.size:
        return b""
    return _recv_exactly(sock, _LEN.unpack(head)[0])


def _recv_exactly(sock, n: int) -> bytes:
    buf = sock.recv(n)
    if len(buf) == n or not buf:
        return buf
    parts = [buf]
    got = len(buf)
    while got < n:
        more = sock.recv(n - got)
        if not more:
            return b""
        parts.append(more)
        got += len(more)
    return b"".join(parts)
