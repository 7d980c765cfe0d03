"""P4Runtime scalar values: canonical bytestrings, human values, 128-bit election ids.

Bytestrings on the wire are canonical when sent (P4Runtime spec 8.4
"Bytestrings": the shortest big-endian string that holds the value, at least
one byte) and accepted with any leading zeros when received, as long as the
value fits the field's bitwidth.

Human values, wherever a builder takes one: an ``int``, an IPv4/IPv6 address
(``"10.0.1.0"``), a MAC address (``"02:00:00:00:00:01"``), a hex or decimal
string (``"0x800"``, ``"17"``) or a big-endian ``bytes``.
"""
from __future__ import annotations

import ipaddress
from typing import Any

from p4.v1 import p4runtime_pb2


def encode(value: Any, bitwidth: int) -> bytes:
    """Canonical P4Runtime bytestring of an unsigned ``bit<bitwidth>`` value.

    The shortest big-endian string, at least one byte; ``ValueError`` if the
    value is negative or does not fit ``bitwidth`` bits.
    """
    v = to_int(value)
    if v < 0:
        raise ValueError(f"{value!r} is negative; bit<{bitwidth}> values are unsigned")
    if v.bit_length() > bitwidth:
        raise ValueError(f"{value!r} does not fit in {bitwidth} bits")
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


def decode(data: bytes) -> int:
    """Integer value of a (big-endian, unsigned) P4Runtime bytestring."""
    return int.from_bytes(data, "big")


def check_bytestring(data: bytes, bitwidth: int) -> int:
    """Value of a received bytestring, checked as a P4Runtime receiver must.

    Any length is accepted as long as the value fits ``bitwidth`` bits (leading
    zero bytes are allowed); an empty string or a value that is too wide raises
    ``ValueError`` (P4Runtime: ``OUT_OF_RANGE``).
    """
    if len(data) == 0:
        raise ValueError("empty bytestring")
    v = int.from_bytes(data, "big")
    if v.bit_length() > bitwidth:
        raise ValueError(f"value 0x{data.hex()} does not fit in {bitwidth} bits")
    return v


def to_int(value: Any) -> int:
    """An integer from an int, bytes, an IP or MAC address, or a hex/decimal string."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, bytearray)):
        return int.from_bytes(value, "big")
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        try:
            if ":" in s or "-" in s:
                parts = s.replace("-", ":").split(":")
                if len(parts) == 6 and all(1 <= len(p) <= 2 for p in parts):
                    return int("".join(p.zfill(2) for p in parts), 16)
                return int(ipaddress.IPv6Address(s))
            if s.count(".") == 3:
                return int(ipaddress.IPv4Address(s))
            return int(s, 0)
        except ValueError:
            pass
        raise ValueError(f"cannot read {value!r} as a number, an IP or a MAC address")
    raise TypeError(f"cannot use {type(value).__name__} {value!r} as a P4 value")


def uint128(election_id: Any) -> p4runtime_pb2.Uint128:
    """``Uint128`` from ``(high, low)``, an int, or a ``Uint128``."""
    if isinstance(election_id, p4runtime_pb2.Uint128):
        return election_id
    if isinstance(election_id, tuple):
        high, low = election_id
    else:
        high, low = int(election_id) >> 64, int(election_id) & (2**64 - 1)
    return p4runtime_pb2.Uint128(high=high, low=low)


def uint128_value(msg: p4runtime_pb2.Uint128) -> int:
    return (msg.high << 64) | msg.low
