"""Set/GetForwardingPipelineConfig (P4Runtime spec 14-15) of a target that runs one program.

The embedded target implements exactly ``p4src/fabric.p4``: a config is
accepted when its P4Info is that contract (``P4Info.differences``), and the
device config (BMv2's JSON) is only stored and given back. VERIFY_AND_COMMIT
empties the forwarding state; RECONCILE_AND_COMMIT keeps it (same program);
VERIFY_AND_SAVE then COMMIT keeps the writes made in between.
"""
from __future__ import annotations

from typing import Callable

import grpc
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.state import SwitchState
from emulator.p4.p4info import P4Info

_MAX_DIFFS = 10  # differences quoted in a refusal


class PipelineConfig:
    """The committed (and saved) config of one device.

    ``on_reset`` clears the managers' bookkeeping when the forwarding state
    is emptied (called with ``state.lock`` held).
    """

    def __init__(self, state: SwitchState, contract: P4Info, on_reset: Callable[[], None]):
        self.state = state
        self.contract = contract
        self.on_reset = on_reset
        self._committed: pb.ForwardingPipelineConfig | None = None
        self._saved: pb.ForwardingPipelineConfig | None = None

    @property
    def current(self) -> pb.ForwardingPipelineConfig | None:
        """The config the target runs (the saved one once saved), or None before any."""
        return self._saved if self._saved is not None else self._committed

    def set(self, request: pb.SetForwardingPipelineConfigRequest,
            context: grpc.ServicerContext) -> pb.SetForwardingPipelineConfigResponse:
        """An accepted request (device, role and primary already checked)."""
        A = pb.SetForwardingPipelineConfigRequest
        action = request.action
        if action == A.UNSPECIFIED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "SetForwardingPipelineConfig action is not set")
        if action == A.COMMIT:
            if request.HasField("config"):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "COMMIT must not carry a config")
            with self.state.lock:
                if self._saved is None:
                    context.abort(grpc.StatusCode.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
                # The saved program is the one the target runs: writes made since
                # the save were applied to it, so committing keeps the state.
                self._committed, self._saved = self._saved, None
            return pb.SetForwardingPipelineConfigResponse()
        if action not in (A.VERIFY, A.VERIFY_AND_SAVE, A.VERIFY_AND_COMMIT, A.RECONCILE_AND_COMMIT):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown SetForwardingPipelineConfig action {action}")
        if not request.HasField("config") or not request.config.HasField("p4info"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "config with a p4info is required")
        diffs = self.contract.differences(request.config.p4info)
        if diffs:
            more = f" (and {len(diffs) - _MAX_DIFFS} more)" if len(diffs) > _MAX_DIFFS else ""
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "the embedded target runs p4src/fabric.p4 and cannot realize this P4Info: "
                          + "; ".join(diffs[:_MAX_DIFFS]) + more)
        if action == A.VERIFY:
            return pb.SetForwardingPipelineConfigResponse()
        config = pb.ForwardingPipelineConfig()
        config.CopyFrom(request.config)
        with self.state.lock:
            had_pipeline = self.current is not None
            if action == A.VERIFY_AND_SAVE:
                self._saved = config
                if not had_pipeline:
                    self._reset()
            elif action == A.VERIFY_AND_COMMIT:
                self._committed, self._saved = config, None
                self._reset()
            else:  # RECONCILE_AND_COMMIT: same program, so the state is preserved
                self._committed, self._saved = config, None
                if not had_pipeline:
                    self._reset()
        return pb.SetForwardingPipelineConfigResponse()

    def _reset(self) -> None:
        c = self.contract
        self.on_reset()
        self.state.reset(c.table_ids, c.action_profile_ids, c.counter_sizes)

    def get(self, request: pb.GetForwardingPipelineConfigRequest,
            context: grpc.ServicerContext) -> pb.GetForwardingPipelineConfigResponse:
        with self.state.lock:
            config = self.current
        if config is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config has been set")
        R = pb.GetForwardingPipelineConfigRequest
        out = pb.ForwardingPipelineConfig()
        rt = request.response_type
        if rt == R.ALL:
            out.CopyFrom(config)
        elif rt == R.P4INFO_AND_COOKIE:
            out.p4info.CopyFrom(config.p4info)
        elif rt == R.DEVICE_CONFIG_AND_COOKIE:
            out.p4_device_config = config.p4_device_config
        elif rt != R.COOKIE_ONLY:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown response_type {rt}")
        if config.HasField("cookie"):
            out.cookie.CopyFrom(config.cookie)
        return pb.GetForwardingPipelineConfigResponse(config=out)
