"""Protobuf's wire format by hand, for the few messages built around bytes that are already
serialized (ConverseMany's batches carry requests and journaled events that way, so they are
never parsed and serialized again just to be wrapped)."""

from __future__ import annotations

_LEN, _VARINT = 2, 0  # wire types


def varint(value: int) -> bytes:
    """An unsigned integer as protobuf's base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a message, bytes or a string) with its tag."""
    return varint(number << 3 | _LEN) + varint(len(payload)) + payload


def varint_field(number: int, value: int) -> bytes:
    """A varint field (an integer or a bool) with its tag."""
    return varint(number << 3 | _VARINT) + varint(value)
