"""The payload pattern and the WRITE layout: what the host agents' config
generator (``emulator/experiment/agents.py``), the agents and the tests
must agree on without telling each other.

Conventions (what a config generator must follow)
-------------------------------------------------
* Payload: flow ``f`` carries ``pattern_bytes(f, 0, size)``: byte ``o`` is
  ``B_f[(o + (o // 65536) * 4099) % 65536]`` where ``B_f`` is
  ``random.Random(0x5EED0000 + f).randbytes(65536)``. Sender and receiver
  build it independently; the receiver compares what landed with it.
* WRITE: each host registers ONE receive memory region, rkey ``mr_rkey``
  (default 0x1234 = 4660), virtual addresses ``mr_addr`` (default 0) up.
  Its expected WRITE flows are laid out in the order they appear in
  ``expect``, each at the next 4096-byte-aligned address after the previous
  one (an entry may pin ``remote_addr`` instead; later ones follow the
  highest end so far). ``write_layout(expect)`` computes this; the sender's
  ``send`` entry must use that ``remote_addr`` and the receiver's rkey.
  The receiver recognizes the flow by the RETH address of the message.
* SEND: the receiver posts one receive buffer of ``size_bytes`` per expected
  SEND flow, per local QP in ``expect`` order. SENDs on a QP consume them in
  the order the sender posts them (by ``start_offset_ns``, then list
  order), so list a QP's expected SENDs in that order.
"""
from __future__ import annotations

import random

PATTERN_BLOCK = 65536
PATTERN_STRIDE = 4099          # odd: blocks up to 4 GiB are all different rotations
LAYOUT_ALIGN = 4096

def _base(flow_id: int) -> bytes:
    # Not cached: each flow's pattern is built once to send and once to check,
    # and 128 KiB per flow kept for nothing was a third of a 32-host agent's memory.
    b = random.Random(0x5EED0000 + flow_id).randbytes(PATTERN_BLOCK)
    return b + b


def _pieces(offset: int, length: int):
    """(position in bytes [offset, offset+length), start in ``_base``'s
    doubled block, length) of each piece of a payload that lies in one block."""
    pos, o = 0, offset
    while pos < length:
        blk, within = divmod(o, PATTERN_BLOCK)
        n = min(PATTERN_BLOCK - within, length - pos)
        yield pos, (within + blk * PATTERN_STRIDE) % PATTERN_BLOCK, n
        pos += n
        o += n


def pattern_bytes(flow_id: int, offset: int, length: int) -> bytearray:
    """Bytes [offset, offset+length) of flow ``flow_id``'s payload."""
    bb = _base(flow_id)
    out = bytearray(length)
    for pos, start, n in _pieces(offset, length):
        out[pos:pos + n] = bb[start:start + n]
    return out


def pattern_matches(flow_id: int, offset: int, data) -> bool:
    """Whether ``data`` (bytes or a memoryview of a memory region) is bytes
    [offset, offset+len(data)) of flow ``flow_id``'s payload, compared piece
    by piece without building them: a flow's check runs in the agents' loop,
    where comparing a 1 MiB memoryview to its pattern_bytes took 1.5 ms (a
    memoryview compares item by item; a bytearray on the left, memcmp)."""
    bb = bytearray(_base(flow_id))
    data = memoryview(data)
    return all(bb[start:start + n] == data[pos:pos + n]
               for pos, start, n in _pieces(offset, len(data)))


def write_layout(expect: list[dict], mr_addr: int = 0) -> dict[int, int]:
    """flow_id -> remote_addr for the expected WRITE flows of one host."""
    out = {}
    end = mr_addr
    for e in expect:
        if e.get("op", "write") != "write":
            continue
        addr = e.get("remote_addr")
        if addr is None:
            addr = (end + LAYOUT_ALIGN - 1) // LAYOUT_ALIGN * LAYOUT_ALIGN
        out[e["flow_id"]] = addr
        end = max(end, addr + e["size_bytes"])
    return out
