"""Subscribe (gNMI specification 3.5): STREAM (SAMPLE, ON_CHANGE, TARGET_DEFINED), ONCE, POLL.

STREAM's samples and changes are taken by the switch's loop (``sampler``);
ONCE and POLL read the state when asked, as Get does. A request the switch
cannot serve raises ``Refused`` (the servicer turns it into the call's status).
"""
from __future__ import annotations

from typing import Callable, Iterator

import grpc
from gnmi import gnmi_pb2 as pb

from emulator.dataplane.gnmi_server.encode import encoding_problem, notification
from emulator.dataplane.gnmi_server.paths import PathError, join, select
from emulator.dataplane.gnmi_server.sampler import END, Sampler, StreamSub

DEFAULT_SAMPLE_NS = 1_000_000     # sample_interval 0 / TARGET_DEFINED counters: 1 ms
MIN_SAMPLE_NS = 1_000             # finer would be a read per few frames
_UNSEEN = object()


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def _leaves(catalog, prefix: pb.Path, sub: pb.Subscription) -> list[int]:
    try:
        return select(join(prefix, sub.path), catalog.leaves)
    except PathError as e:
        raise Refused(grpc.StatusCode.NOT_FOUND, str(e)) from None


def selected(catalog, sl: pb.SubscriptionList) -> list[int]:
    """Every leaf the list's subscriptions select, each once, in catalog order."""
    if not sl.subscription:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "SubscriptionList has no subscription")
    return sorted({i for sub in sl.subscription for i in _leaves(catalog, sl.prefix, sub)})


def stream_plan(catalog, sl: pb.SubscriptionList) -> tuple[dict[int, list[int]], list[int]]:
    """STREAM: (sample interval ns -> leaves, ON_CHANGE leaves)."""
    sample: dict[int, set[int]] = {}
    on_change: set[int] = set()
    for sub in sl.subscription:
        if sub.mode not in pb.SubscriptionMode.values():
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"unknown subscription mode {sub.mode}")
        leaves = _leaves(catalog, sl.prefix, sub)
        if sub.mode == pb.ON_CHANGE:
            counters = [i for i in leaves if not catalog.on_change[i]]
            if counters:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                              "ON_CHANGE is served for oper-status only; counters change with every "
                              "frame: subscribe to them with SAMPLE")
            on_change.update(leaves)
        elif sub.mode == pb.TARGET_DEFINED:
            on_change.update(i for i in leaves if catalog.on_change[i])
            sample.setdefault(sub.sample_interval or DEFAULT_SAMPLE_NS, set()).update(
                i for i in leaves if not catalog.on_change[i])
        else:                                   # SAMPLE
            interval = sub.sample_interval or DEFAULT_SAMPLE_NS
            if interval < MIN_SAMPLE_NS:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                              f"sample_interval {interval} ns is below the switch's minimum "
                              f"{MIN_SAMPLE_NS} ns")
            sample.setdefault(interval, set()).update(leaves)
    return {k: sorted(v) for k, v in sample.items() if v}, sorted(on_change)


class Subscriptions:
    """Serves Subscribe calls of one switch: ``paths[i]`` is leaf i's ``gnmi.Path``."""

    def __init__(self, catalog, sampler: Sampler, now_ns: Callable[[], int], paths: list[pb.Path]):
        self.catalog = catalog
        self.sampler = sampler
        self.now_ns = now_ns
        self.paths = paths

    def _now(self, leaves: list[int], encoding: int) -> pb.SubscribeResponse:
        t = self.now_ns()
        return pb.SubscribeResponse(update=notification(
            t, [self.paths[i] for i in leaves], self.catalog.read(leaves, t), encoding))

    def serve(self, first: pb.SubscribeRequest, requests: Iterator, context) -> Iterator:
        if not first.HasField("subscribe"):
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                          "the first SubscribeRequest must hold a SubscriptionList (subscribe)")
        sl = first.subscribe
        if sl.mode not in pb.SubscriptionList.Mode.values():
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"unknown SubscriptionList mode {sl.mode}")
        problem = encoding_problem(sl.encoding)
        if problem:
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, problem)
        if sl.mode == pb.SubscriptionList.STREAM:
            return self._stream(sl, context)
        leaves = selected(self.catalog, sl)
        if sl.mode == pb.SubscriptionList.ONCE:
            return iter([self._now(leaves, sl.encoding), pb.SubscribeResponse(sync_response=True)])
        return self._poll(leaves, sl.encoding, requests)

    def _poll(self, leaves: list[int], encoding: int, requests: Iterator) -> Iterator:
        yield self._now(leaves, encoding)
        yield pb.SubscribeResponse(sync_response=True)
        for req in requests:
            if not req.HasField("poll"):
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                              "a POLL subscription takes only Poll requests after its SubscriptionList")
            yield self._now(leaves, encoding)
            yield pb.SubscribeResponse(sync_response=True)

    def _stream(self, sl: pb.SubscriptionList, context) -> Iterator:
        sample, on_change = stream_plan(self.catalog, sl)
        sub = StreamSub(sample, on_change, since_ns=self.now_ns())
        first = []
        if on_change and not sl.updates_only:      # an ON_CHANGE leaf's state as it is now
            t = sub.since_ns
            first.append(pb.SubscribeResponse(update=notification(
                t, [self.paths[i] for i in on_change], self.catalog.read(on_change, t), sl.encoding)))
        self.sampler.add(sub)
        context.add_callback(lambda: sub.out.put(END))      # the client went: stop waiting
        return self._stream_out(sub, first, sl, context)

    def _stream_out(self, sub: StreamSub, first: list, sl: pb.SubscriptionList, context) -> Iterator:
        # suppress_redundant on any subscription of the list: only changed values are sent
        suppress = any(s.suppress_redundant for s in sl.subscription)
        last: dict[int, object] = {}
        try:
            yield from first
            yield pb.SubscribeResponse(sync_response=True)
            while True:
                item = sub.out.get()
                if item is END or not context.is_active():
                    return
                t, leaves, values = item
                if suppress:       # every leaf's last value: only changes are sent
                    kept = [(i, v) for i, v in zip(leaves, values) if last.get(i, _UNSEEN) != v]
                    for i, v in kept:
                        last[i] = v
                    if not kept:
                        continue
                    leaves, values = [i for i, _ in kept], [v for _, v in kept]
                yield pb.SubscribeResponse(update=notification(
                    t, [self.paths[i] for i in leaves], values, sl.encoding))
        finally:
            self.sampler.remove(sub)
