"""Indexed counters (P4Runtime spec 9.3): read the pipeline's counts, overwrite cells.

The pipeline counts into ``SwitchState.counters`` without the lock; a Read
copies the cells under it, a MODIFY overwrites them (all cells when the
entry has no index).
"""
from __future__ import annotations

from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.write import Journal
from emulator.dataplane.state import SwitchState
from emulator.p4.codec import Codec


class Counters:
    """The indexed counters of the program, as Write and Read see them."""

    def __init__(self, state: SwitchState, codec: Codec):
        self.state = state
        self.codec = codec

    def write(self, update: int, ce: pb.CounterEntry, journal: Journal) -> None:
        cid, indexes, data = self.codec.decode_counter_entry(ce, update)
        if data is None:
            return
        arr = self.state.counters[cid]
        packets, nbytes = data
        for i in indexes:
            journal.set(arr.packets, i, packets)
            journal.set(arr.bytes, i, nbytes)

    def read(self, q: pb.CounterEntry) -> list[pb.CounterEntry]:
        """Cells of one counter (one cell with an index), or of all counters (``counter_id`` 0)."""
        p4info = self.codec.p4info
        counters = [self.codec.counter(q.counter_id)] if q.counter_id \
            else [p4info.counter(cid) for cid in p4info.counter_sizes]
        out = []
        for c in counters:
            cid = c.preamble.id
            arr = self.state.counters.get(cid)
            if arr is None:
                continue
            if q.counter_id and q.HasField("index"):
                indexes = [self.codec.counter_index(c, q.index.index)]
            else:
                indexes = range(len(arr.packets))
            for i in indexes:
                out.append(self.codec.encode_counter_entry(cid, i, arr.packets[i], arr.bytes[i]))
        return out
