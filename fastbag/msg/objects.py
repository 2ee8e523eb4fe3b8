"""Decoders for encodings that become Python objects rather than arrays: JSON and protobuf.

ROS1 and CDR messages decode into arrays through the layout compiler.
Messages of other encodings are read raw, or decoded one by one here:
``json`` with the standard library, ``protobuf`` through the ``protobuf``
package (an optional extra) from the FileDescriptorSet an MCAP schema holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import DecodeError, UnsupportedError

#: Encodings the layout compiler turns into arrays.
ARRAY_ENCODINGS = ("ros1", "cdr")
#: Encodings decoded one message at a time into Python objects (bag.messages()), not into arrays.
OBJECT_ENCODINGS = ("json", "protobuf")


def object_decoder(encoding: str, msgtype: str, schema_data: bytes, *, topic: str) -> Callable[[Any], Any]:
    """``decode(data) -> object`` for one message of ``encoding`` (``json`` or ``protobuf``).

    Raises UnsupportedError for an encoding with no decoder (flatbuffer, a
    custom one), naming it; such messages stay readable raw.
    """
    if encoding == "json":
        def decode_json(data: Any) -> Any:
            try:
                return json.loads(bytes(data))
            except ValueError as exc:
                raise DecodeError(f"the message is not valid JSON: {exc}", topic=topic, msgtype=msgtype) from None
        return decode_json
    if encoding == "protobuf":
        from_string = _protobuf_class(msgtype, schema_data, topic).FromString

        def decode_protobuf(data: Any) -> Any:
            try:
                return from_string(bytes(data))
            except Exception as exc:  # google.protobuf.message.DecodeError, and others of that package
                raise DecodeError(f"the message is not a valid {msgtype} protobuf message: {exc}", topic=topic,
                                  msgtype=msgtype) from None
        return decode_protobuf
    raise UnsupportedError(f"messages of topic {topic} are {encoding or 'not'}-encoded, which fastbag does not "
                           f"decode; read them raw (bag.messages(topics={topic!r}, raw=True))")


def _protobuf_class(msgtype: str, schema_data: bytes, topic: str) -> Any:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise UnsupportedError(f"topic {topic} holds protobuf messages: pip install 'fastbag[protobuf]' to "
                               "decode them (they stay readable raw)") from None
    try:
        files = descriptor_pb2.FileDescriptorSet.FromString(schema_data)
        pool = descriptor_pool.DescriptorPool()
        pending = {f.name: f for f in files.file}
        while pending:  # dependencies first: a file is added once all it imports is in the pool
            ready = [f for f in pending.values() if all(d not in pending for d in f.dependency)]
            if not ready:
                raise ValueError("the schema's files import each other in a cycle")
            for f in ready:
                pool.Add(f)
                del pending[f.name]
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(msgtype))
    except Exception as exc:  # the protobuf package's errors have no common base
        raise DecodeError(f"the protobuf schema cannot be loaded: {exc}", topic=topic, msgtype=msgtype) from exc


def decode_objects(decode: Callable[[Any], Any], payload: memoryview, starts: list[int], lengths: list[int],
                   indexes: list[int]) -> list[Any]:
    """Messages ``payload[start:start + length]`` decoded one by one; a DecodeError names the message's
    index in the read (``indexes``)."""
    out = []
    for start, length, index in zip(starts, lengths, indexes):
        try:
            out.append(decode(payload[start:start + length]))
        except DecodeError as exc:
            raise DecodeError(exc.args[0].rsplit(" (topic ", 1)[0], topic=exc.topic, index=index,
                              msgtype=exc.msgtype) from None
    return out
