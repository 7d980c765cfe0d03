"""The gNMI service of one embedded switch: lifecycle, Capabilities, Get, Set, Subscribe.

Every refused request ends its call with a gRPC status and a message that
says why, and is counted (``stats``: in the switch's stats.json).
"""
from __future__ import annotations

import threading
from collections import Counter
from concurrent import futures

import grpc
from gnmi import gnmi_pb2 as pb
from gnmi import gnmi_pb2_grpc as pb_grpc

from emulator.dataplane.gnmi_server.encode import encoding_problem, notification
from emulator.dataplane.gnmi_server.leaves import Catalog
from emulator.dataplane.gnmi_server.paths import PathCache, PathError, join, select
from emulator.dataplane.gnmi_server.sampler import Sampler
from emulator.dataplane.gnmi_server.subscribe import Refused, Subscriptions

GNMI_VERSION = "0.10.0"
# The OpenConfig models' state leaves listed in leaves.py (no revision claimed:
# a subset, whose paths have been stable across the models' revisions).
MODELS = (pb.ModelData(name="openconfig-interfaces", organization="OpenConfig working group"),
          pb.ModelData(name="openconfig-qos", organization="OpenConfig working group"),
          pb.ModelData(name="fabric-emu-qos", organization="ai-fabric-emulator",
                       version="0.1.0"))


class GnmiServer(pb_grpc.gNMIServicer):
    """gNMI on ``listen`` ("HOST:PORT"; port 0: an ephemeral one, ``start``
    returns it) for ``switch`` (an ``EmbeddedSwitch``), whose loop takes its
    STREAM samples (``switch.sampler``)."""

    def __init__(self, switch, listen: str, *, max_workers: int = 8):
        self.name = switch.cfg.name
        self.listen = listen
        self.switch = switch
        self.sampler = Sampler(None, virtual=switch.virtual)    # its catalog: ``_serve``'s
        self.now_ns = switch.clock.now_ns
        self.catalog: Catalog | None = None
        self._catalog_lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self.port = 0
        switch.sampler = self.sampler
        switch.gnmi = self

    # ------------------------------------------------------------ lifecycle

    def start(self) -> int:
        host, _, port = self.listen.rpartition(":")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._max_workers,
                                                        thread_name_prefix=f"gnmi-{self.name}"),
                             options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_gNMIServicer_to_server(self, server)
        try:
            bound = server.add_insecure_port(self.listen)
        except RuntimeError as e:
            raise RuntimeError(f"gNMI server of {self.name}: cannot bind {self.listen}: {e}") from None
        if not bound:
            raise RuntimeError(f"gNMI server of {self.name}: cannot bind {self.listen}")
        server.start()
        self._server, self.port, self.listen = server, bound, f"{host}:{bound}"
        return bound

    def stop(self, grace: float | None = 1.0) -> None:
        """End every subscription after what the loop took (the loop has
        stopped), then the server."""
        self.sampler.close()
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace).wait()

    def stats(self) -> dict:
        with self._count_lock:
            return {"listen": self.listen, "requests": dict(self.requests),
                    "errors": dict(self.errors), "samples": self.sampler.samples}

    def _count(self, rpc: str) -> Catalog:
        """Count a request; the catalog of leaves, made at the first request
        (from the switch's config and objects, which its loop does not
        change): made at start, it cost every switch's bring-up tens of ms."""
        with self._count_lock:
            self.requests[rpc] += 1
        with self._catalog_lock:
            if self.catalog is None:
                catalog = Catalog(self.switch)
                self.paths = PathCache(catalog.leaves)
                self.sampler.catalog = catalog
                self.subscriptions = Subscriptions(catalog, self.sampler, self.now_ns, self.paths)
                self.catalog = catalog
        return self.catalog

    def _refuse(self, context, e: Refused):
        with self._count_lock:
            self.errors[e.code.name] += 1
        context.abort(e.code, str(e))

    # ------------------------------------------------------------ RPCs

    def Capabilities(self, request, context):
        self._count("Capabilities")
        return pb.CapabilityResponse(supported_models=MODELS, gNMI_version=GNMI_VERSION,
                                     supported_encodings=[pb.JSON_IETF, pb.PROTO])

    def Get(self, request, context):
        catalog = self._count("Get")
        try:
            problem = encoding_problem(request.encoding)
            if problem:
                raise Refused(grpc.StatusCode.UNIMPLEMENTED, problem)
            if not request.path:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "GetRequest has no path")
            try:
                leaves = sorted({i for p in request.path
                                 for i in select(join(request.prefix, p), catalog.leaves)})
            except PathError as e:
                raise Refused(grpc.StatusCode.NOT_FOUND, str(e)) from None
        except Refused as e:
            self._refuse(context, e)
        if request.type == pb.GetRequest.CONFIG:      # state only: no config leaf
            leaves = []
        t = self.now_ns()
        return pb.GetResponse(notification=[notification(
            t, [self.paths[i] for i in leaves], catalog.read(leaves, t), request.encoding)])

    def Set(self, request, context):
        self._count("Set")
        self._refuse(context, Refused(grpc.StatusCode.UNIMPLEMENTED,
                                      "Set is not supported: the switch's telemetry is read-only "
                                      "(its forwarding state is P4Runtime's)"))

    def Subscribe(self, request_iterator, context):
        self._count("Subscribe")
        try:
            first = next(request_iterator, None)
            if first is None:
                return
            yield from self.subscriptions.serve(first, request_iterator, context)
        except Refused as e:
            self._refuse(context, e)
