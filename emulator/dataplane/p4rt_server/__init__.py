"""P4Runtime (v1.4) gRPC server of the embedded target, split by concern like PI's.

The embedded target implements exactly ``p4src/fabric.p4``; this server is
its control plane, speaking the same API as BMv2's ``simple_switch_grpc`` so
the controller cannot tell them apart. It validates what a real target
validates (P4Runtime spec 1.4: arbitration 5, table entries 9.1, action
profiles 9.2, counters 9.3, PRE 9.5, Write 12, Read 13, pipeline config
14-15, stream 16) and keeps the decoded entries in a ``SwitchState``.
Entities are decoded and checked against the P4Info by the codec the
controller encodes with (``emulator.p4.codec``); error codes, where the spec
leaves a choice, follow PI (BMv2's P4Runtime server).

    servicer         P4RuntimeServer: lifecycle, per-RPC checks, wiring
    arbitration      sessions (StreamChannel), election ids, the primary
    pipeline_config  Set/GetForwardingPipelineConfig
    write            Write batches: dispatch, atomicity, undo journal
    read             Read requests: dispatch, chunking
    tables           table entries, default entries
    action_profiles  members, groups, their users
    counters         indexed counters
    pre              clone sessions
    packet_io        packet-out / packet-in on the stream
    status           batch failure statuses (p4.v1.Error details, bounded to a trailer)
    rpc              gRPC method handlers: malformed requests -> INVALID_ARGUMENT

    server = P4RuntimeServer(state, device_id=1, port=0)   # P4Info: fabric.p4's
    server.start()                                          # -> bound port
    ...
    server.stop()
"""
from emulator.dataplane.p4rt_server.servicer import P4RuntimeServer

__all__ = ["P4RuntimeServer"]
