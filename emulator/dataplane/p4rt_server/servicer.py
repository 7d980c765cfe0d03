"""The P4Runtime gRPC service of one embedded switch: RPC checks, then the managers.

Each RPC checks what is common to it (device id, role, primary, a pipeline
config being set), then hands the request to the manager of its concern;
Write and Read hand each entity to the manager of its kind.
"""
from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc as pb_grpc

from emulator.dataplane.p4rt_server.action_profiles import ActionProfiles
from emulator.dataplane.p4rt_server.arbitration import Arbitration
from emulator.dataplane.p4rt_server.counters import Counters
from emulator.dataplane.p4rt_server.packet_io import PacketIO
from emulator.dataplane.p4rt_server.pipeline_config import PipelineConfig
from emulator.dataplane.p4rt_server.port_events import PortEvents
from emulator.dataplane.p4rt_server.pre import CloneSessions
from emulator.dataplane.p4rt_server.read import Reader
from emulator.dataplane.p4rt_server.rpc import generic_handler
from emulator.dataplane.p4rt_server.tables import Tables
from emulator.dataplane.p4rt_server.write import Writer
from emulator.dataplane.state import SwitchState
from emulator.p4.p4info import P4Info

API_VERSION = "1.4.1"
BIND_HOST = "127.0.0.1"
_NO_PIPELINE = "no forwarding pipeline config has been set"


class P4RuntimeServer(pb_grpc.P4RuntimeServicer):
    """P4Runtime service of one embedded switch, on ``host:port`` (127.0.0.1 by default).

    ``port=0`` binds an ephemeral port; ``start()`` returns the bound port
    (also in ``.port``). ``contract`` is the P4Info of the program the target
    implements (default: ``p4src/fabric.p4info.txtpb``).
    """

    def __init__(self, state: SwitchState, device_id: int, port: int = 0,
                 contract: P4Info | None = None, *, max_workers: int = 8, host: str = BIND_HOST):
        self.state = state
        self.host = host
        self.device_id = device_id
        self.port = port
        self.contract = contract if contract is not None else P4Info.load()
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        codec = self.contract.codec
        self.arbitration = Arbitration(device_id)
        self.profiles = ActionProfiles(state, codec)
        self.tables = Tables(state, codec, self.profiles)
        self.counters = Counters(state, codec)
        self.clone_sessions = CloneSessions(state, codec)
        self.pipeline = PipelineConfig(state, self.contract, on_reset=self._reset)
        self.packet_io = PacketIO(state, codec, self.arbitration, self.pipeline)
        self.writer = Writer(state, {
            "table_entry": self.tables.write,
            "action_profile_member": self.profiles.write_member,
            "action_profile_group": self.profiles.write_group,
            "counter_entry": self.counters.write,
            "packet_replication_engine_entry": self.clone_sessions.write,
        })
        self.port_events = PortEvents(state, self.arbitration, self.writer, device_id)
        self.reader = Reader(state, {
            "table_entry": self.tables.read,
            "action_profile_member": self.profiles.read_members,
            "action_profile_group": self.profiles.read_groups,
            "counter_entry": self.counters.read,
            "packet_replication_engine_entry": self.clone_sessions.read,
        })

    def _reset(self) -> None:
        self.tables.reset()
        self.profiles.reset()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> int:
        if self._server is not None:
            return self.port
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers,
                                       thread_name_prefix=f"p4rt-dev{self.device_id}"),
            options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((generic_handler(self),))   # parses requests itself (rpc.py)
        try:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as e:
            raise RuntimeError(f"P4Runtime server of device {self.device_id}: cannot bind "
                               f"{self.host}:{self.port}: {e}") from None
        if not bound:
            raise RuntimeError(f"P4Runtime server of device {self.device_id}: cannot bind {self.host}:{self.port}")
        self.port = bound
        self.state.packet_in_handler = self.packet_io.packet_in
        self.state.port_status_handler = self.port_events.report
        self.state.switch_status_handler = self.port_events.report_switch
        self.state.on_wipe = self._reset
        self.state.apply_due_writes = self.port_events.apply_due
        server.start()
        self._server = server
        return bound

    def stop(self, grace: float | None = 0.5) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        if self.state.packet_in_handler == self.packet_io.packet_in:
            self.state.packet_in_handler = None
        self.state.port_status_handler = None
        self.state.switch_status_handler = None
        self.arbitration.close()
        server.stop(grace).wait()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ------------------------------------------------------------ checks

    def _check_device(self, device_id: int, context: grpc.ServicerContext) -> None:
        if device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"unknown device_id {device_id} (this is device {self.device_id})")

    @staticmethod
    def _check_role(request: Any, context: grpc.ServicerContext) -> None:
        if request.role or getattr(request, "role_id", 0):
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"unknown role {request.role or request.role_id!r}: only the default role exists")

    def _check_pipeline(self, context: grpc.ServicerContext) -> None:
        if self.pipeline.current is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, _NO_PIPELINE)

    # ------------------------------------------------------------ RPCs

    def Capabilities(self, request, context):
        return pb.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(self, request, context):
        self._check_device(request.device_id, context)
        self._check_role(request, context)
        if not self.arbitration.is_primary_request(request):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "only the primary controller may set the pipeline (election_id is not the primary's)")
        return self.pipeline.set(request, context)

    def GetForwardingPipelineConfig(self, request, context):
        self._check_device(request.device_id, context)
        return self.pipeline.get(request, context)

    def Write(self, request, context):
        self._check_device(request.device_id, context)
        self._check_role(request, context)
        if not self.arbitration.is_primary_request(request):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "Write refused: election_id is not the primary controller's")
        self._check_pipeline(context)
        at_ns = self.port_events.timed(context)
        if at_ns is not None:         # takes effect at that fabric time (port_events.py)
            return self.port_events.queue(request, at_ns, context)
        return self.writer.write(request, context)

    def Read(self, request, context):
        self._check_device(request.device_id, context)
        if request.role:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown role {request.role!r}")
        self._check_pipeline(context)
        yield from self.reader.read(request, context)

    def StreamChannel(self, request_iterator, context):
        return self.arbitration.stream(request_iterator, context, self.packet_io.packet_out,
                                       self.port_events.on_other)
