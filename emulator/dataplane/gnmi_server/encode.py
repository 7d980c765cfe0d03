"""Values and notifications in the encodings the server speaks: JSON_IETF and PROTO.

JSON_IETF follows RFC 7951 as OpenConfig's YANG types ask: a counter64 (every
counter here) is a JSON string of its digits, an enumeration (oper-status)
its name. PROTO carries them as ``uint_val`` and ``string_val``.
"""
from __future__ import annotations

import json

from gnmi import gnmi_pb2 as pb

ENCODINGS = (pb.JSON_IETF, pb.PROTO)


def encoding_problem(encoding: int) -> str | None:
    """Why ``encoding`` cannot be served (None: it can)."""
    if encoding in ENCODINGS:
        return None
    name = pb.Encoding.Name(encoding) if encoding in pb.Encoding.values() else str(encoding)
    return f"encoding {name} is not supported: ask for JSON_IETF or PROTO"


def typed_value(value, encoding: int) -> pb.TypedValue:
    if encoding == pb.PROTO:
        return pb.TypedValue(string_val=value) if isinstance(value, str) \
            else pb.TypedValue(uint_val=value)
    return pb.TypedValue(json_ietf_val=json.dumps(str(value)).encode())


def decode_value(tv: pb.TypedValue):
    """A value as a client reads it back: an int or a string (either encoding)."""
    kind = tv.WhichOneof("value")
    if kind == "json_ietf_val":
        v = json.loads(tv.json_ietf_val)
        return int(v) if isinstance(v, str) and v.isdigit() else v
    return getattr(tv, kind)


def notification(t_ns: int, paths: list[pb.Path], values: list, encoding: int) -> pb.Notification:
    """One instant's values: ``paths[k]`` holds ``values[k]``."""
    return pb.Notification(timestamp=t_ns, update=[
        pb.Update(path=p, val=typed_value(v, encoding)) for p, v in zip(paths, values)])
