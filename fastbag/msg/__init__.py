"""The message layer: definitions, the layout compiler (encoding rules), the Numba kernels, arrays, sensors.

Knows nothing of containers: it turns a type's definition and message bytes into arrays, and rows
of those arrays into message objects (messages.py). :func:`decode_messages` does that for messages
from any source.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def decode_messages(msgtype: str, definition: str, messages: Iterable[bytes | bytearray | memoryview], *,
                    encoding: str = "ros1", schema_encoding: str = "ros1msg") -> Any:
    """Decode serialized messages of one type into a StructArray (see :func:`fastbag.msg.arrays.decode_messages`;
    imported on first call: NumPy and the decoder load then, not with ``fastbag.msg``)."""
    from .arrays import decode_messages as decode
    return decode(msgtype, definition, messages, encoding=encoding, schema_encoding=schema_encoding)


__all__ = ["decode_messages"]
