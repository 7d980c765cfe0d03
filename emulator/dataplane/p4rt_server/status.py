"""gRPC statuses of the P4Runtime server: batch failures with one ``p4.v1.Error`` per item, bounded.

A Write or Read that fails in part ends with gRPC ``UNKNOWN`` whose
``grpc-status-details-bin`` trailer holds a ``google.rpc.Status`` with one
``p4.v1.Error`` per update/request, in batch order, ``OK`` for those that
succeeded (P4Runtime spec 12.3 for Write, as PI does; 13.3 for Read, where
PI instead stops at the first failing request and ends the Read with its
code). The top-level message (``grpc-message``, what a client such as
p4runtime-shell prints of a failed Read) quotes the first failure and the
first of each other kind, so the per-item code -- UNIMPLEMENTED, say -- is
in the one line a user sees.

The whole trailer must fit the peer's metadata limit: gRPC's default
``grpc.max_metadata_size`` is 8 KiB (a soft limit: between it and the hard
16 KiB the call is failed at random; above, always) and counts each header as
name + value + 32 bytes, a binary value base64-encoded. A failing batch of
10,000 updates would need ~900 KB: the client gets RESOURCE_EXHAUSTED and
none of the errors. So the details are bounded (``TRAILER_BUDGET_BYTES``):

* if one ``Error`` per item fits, that is what is sent (every small batch);
* otherwise the details are the *prefix* of that list that fits -- errors
  stay positional, so a client reads item i's error at index i as usual, and
  the items after the prefix have no entry -- and the top-level message
  (``Status.message`` and ``grpc-message``, at most ``MESSAGE_MAX_BYTES``)
  says so: how many items the details cover, how many failed with which
  code, and the first failure and the first of each other kind (index,
  code, message), so a client learns them even when they lie beyond it.
"""
from __future__ import annotations

import collections
import logging
from typing import Optional, Sequence

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.p4.rejected import Rejected

# google.rpc code -> grpc.StatusCode
GRPC_CODE = {sc.value[0]: sc for sc in grpc.StatusCode}

# (google.rpc code, message) of one failed batch item; None: it succeeded.
# A plain tuple, not the ``Rejected`` raised: an exception kept in a list
# holds its traceback, whose frames hold the list (a cycle only the garbage
# collector frees, with the whole request in it).
Failure = tuple[int, str]

GRPC_DEFAULT_MAX_METADATA_BYTES = 8 * 1024   # grpcio's default grpc.max_metadata_size
TRAILER_BUDGET_BYTES = 6 * 1024              # what a batch failure's trailer may take of it
MESSAGE_MAX_BYTES = 1024                     # top-level message when the details are cut
_HEADER_OVERHEAD = 32                        # HPACK's per-header cost (RFC 7541 4.1)
_DETAILS_KEY = "grpc-status-details-bin"
_FIRST_FAILURES = 3                          # distinct failures quoted in a cut batch's message
_QUOTE_CHARS = 160                           # of each quoted failure's message
_ERROR_URL = "type.googleapis.com/" + pb.Error.DESCRIPTOR.full_name


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    """A ``grpc.Status`` for ``abort_with_status`` (what ``grpc_status.rpc_status`` builds)."""


def failure(e: Rejected) -> Failure:
    return (e.code, e.message)


class Outcomes(list):
    """Each item's outcome in batch order: None (succeeded) or its ``Failure``.

    Equal failures are kept once: a big batch's failures repeat (10,000
    inserts into a full table, one message), and 10,000 copies of it would
    be ~1.5 MB held until the answer is sent.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[Failure, Failure] = {}

    def ok(self) -> None:
        self.append(None)

    def failed(self, f: Failure) -> None:
        self.append(self._seen.setdefault(f, f))


def code_name(code: int) -> str:
    try:
        return code_pb2.Code.Name(code)
    except ValueError:
        return str(code)


def trailer_bytes(message: str, details_len: int) -> int:
    """What gRPC counts against ``max_metadata_size`` for a status trailer whose
    ``grpc-status-details-bin`` value is ``details_len`` bytes (before base64)."""
    status = len("grpc-status") + 2 + _HEADER_OVERHEAD
    msg = len("grpc-message") + _percent_encoded_len(message) + _HEADER_OVERHEAD if message else 0
    det = len(_DETAILS_KEY) + (details_len + 2) // 3 * 4 + _HEADER_OVERHEAD   # base64: 4 per 3, padded
    return status + msg + det


def _percent_encoded_len(message: str) -> int:
    # grpc-message keeps printable ASCII but '%', and %XX-escapes every other byte.
    return sum(1 if 0x20 <= b < 0x7F and b != 0x25 else 3 for b in message.encode())


def _entry(item: Optional[Failure]) -> any_pb2.Any:
    err = pb.Error(canonical_code=item[0], message=item[1]) if item else pb.Error(canonical_code=code_pb2.OK)
    return any_pb2.Any(type_url=_ERROR_URL, value=err.SerializeToString())


def _entry_bytes(any_msg: any_pb2.Any) -> int:
    """Bytes of one element of ``Status.details``: tag, length, message."""
    n = any_msg.ByteSize()
    return 1 + len(_varint(n)) + n


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def batch_failure(what: str, items: Sequence[Optional[Failure]], noun: str = "updates") -> grpc.Status:
    """``UNKNOWN`` status for a batch in which some items failed (None: succeeded).

    ``what`` ("Write failure") starts the message; see the module docstring
    for how the details are bounded.
    """
    failed = [(i, f) for i, f in enumerate(items) if f is not None]
    own = [(i, f) for i, f in failed if f[0] != code_pb2.ABORTED]   # ABORTED: rolled back for another
    head = f"{what}: {len(own)} of {len(items)} {noun} failed"
    message = _bounded(f"{head}: {_first_failures(failed, own)}")
    entries = _prefix(message, items)
    if len(entries) < len(items):
        # The longest message this batch can have (the count of covered items
        # at its widest) leaves the room the details get; the real count is
        # no wider, so the final message fits too.
        entries = _prefix(_cut_message(head, len(items), failed, own, noun), items)
        message = _cut_message(head, len(entries), failed, own, noun)
    status = _status(message, entries)
    return _Status(GRPC_CODE[code_pb2.UNKNOWN], message, ((_DETAILS_KEY, status.SerializeToString()),))


def _prefix(message: str, items: Sequence[Optional[Failure]]) -> list[any_pb2.Any]:
    """The longest prefix of the items' ``Error`` entries whose trailer, with
    ``message``, fits ``TRAILER_BUDGET_BYTES``."""
    size = _status(message, []).ByteSize()
    # Per distinct item, its entry and size: a big batch's failures repeat (and OK is one entry).
    memo: dict[Optional[Failure], tuple[any_pb2.Any, int]] = {}
    out: list[any_pb2.Any] = []
    for item in items:
        if item not in memo:
            e = _entry(item)
            memo[item] = (e, _entry_bytes(e))
        e, n = memo[item]
        if trailer_bytes(message, size + n) > TRAILER_BUDGET_BYTES:
            break
        size += n
        out.append(e)
    return out


def _status(message: str, details: list[any_pb2.Any]) -> status_pb2.Status:
    return status_pb2.Status(code=code_pb2.UNKNOWN, message=message, details=details)


def _cut_message(head: str, covered: int, failed: list[tuple[int, Failure]],
                 own: list[tuple[int, Failure]], noun: str) -> str:
    """The top-level message of a batch whose details cover only its first ``covered`` items."""
    by_code = collections.Counter(f[0] for _, f in failed)
    codes = ", ".join(f"{code_name(c)} x{n}" for c, n in by_code.most_common())
    cover = f"details cover {noun} #0-#{covered - 1} only" if covered else f"details list none of the {noun}"
    return _bounded(f"{head} ({codes}); {cover} (trailer size limit); "
                    f"first failures: {_first_failures(failed, own)}")


def _first_failures(failed: list[tuple[int, Failure]], own: list[tuple[int, Failure]]) -> str:
    """The first failure, then the first of each other kind: ``#index CODE: message; ...``
    (the ones rolled back for another, ABORTED, only if there are no others)."""
    quoted: dict[Failure, int] = {}
    for i, f in own or failed:
        if f not in quoted:
            quoted[f] = i
            if len(quoted) == _FIRST_FAILURES:
                break
    return "; ".join(f"#{i} {code_name(f[0])}: {f[1][:_QUOTE_CHARS]}" for f, i in quoted.items())


def _bounded(text: str) -> str:
    data = text.encode()
    if len(data) > MESSAGE_MAX_BYTES:
        text = data[:MESSAGE_MAX_BYTES - 3].decode(errors="ignore") + "..."
    return text


def internal(log: logging.Logger, what: str, e: Exception) -> Failure:
    """A bug met while serving one item: logged, and reported as that item's ``INTERNAL``."""
    log.exception("P4Runtime %s: internal error", what)
    return (code_pb2.INTERNAL, f"internal error: {e!r}")
