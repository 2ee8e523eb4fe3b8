"""The message layer: definitions, the layout compiler (encoding rules), the Numba kernels, arrays, sensors.

Knows nothing of containers: it turns a type's definition and message bytes into arrays, and rows
of those arrays into message objects (messages.py). :func:`decode_messages` does that for messages
from any source.
"""

from __future__ import annotations

from typing import Any


def decode_messages(*args: Any, **kwargs: Any) -> Any:
    """Decode serialized messages of one type into a StructArray (see :func:`fastbag.msg.arrays.decode_messages`)."""
    from .arrays import decode_messages as decode
    return decode(*args, **kwargs)


__all__ = ["decode_messages"]
