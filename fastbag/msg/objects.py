"""Decoders for encodings that become Python objects rather than arrays: JSON and protobuf.

ROS1 and CDR messages decode into arrays through the layout compiler.
Messages of other encodings are read raw, or decoded one by one here:
``json`` with the standard library, ``protobuf`` through the ``protobuf``
package (an optional extra) from the FileDescriptorSet an MCAP schema holds.
Either reads as ROS messages do where it can: a JSON message's keys as
attributes (``m.msg.pose.position.x``), and ``m.msg.to_dict()`` on both.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import DecodeError, UnsupportedError, close_matches

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
                return json.loads(bytes(data), object_pairs_hook=JsonMessage)
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
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(msgtype))
    except Exception as exc:  # the protobuf package's errors have no common base
        raise DecodeError(f"the protobuf schema cannot be loaded: {exc}", topic=topic, msgtype=msgtype) from exc
    # The classes are this schema's own (a pool of ours), so giving them the method every message has
    # touches no class of the user's. Nested types get it too: a message's fields are messages. The
    # protobuf package holds a type's class only while something else does (a nested one would be made
    # anew, without the method, once its last instance is gone): the top class holds them.
    cls._fastbag_classes = tuple(_message_classes(cls, message_factory, set()))
    for each in cls._fastbag_classes:
        each.to_dict = _protobuf_to_dict
    return cls


def _message_classes(cls: Any, message_factory: Any, seen: set[str]) -> Iterator[Any]:
    """``cls`` and the classes of every message type its fields hold, each once (types may nest themselves)."""
    if cls.DESCRIPTOR.full_name in seen:
        return
    seen.add(cls.DESCRIPTOR.full_name)
    yield cls
    for field in cls.DESCRIPTOR.fields:
        if field.message_type is not None:
            yield from _message_classes(message_factory.GetMessageClass(field.message_type), message_factory, seen)


#: Keys a failed attribute lookup compares against for a suggestion, at most (hasattr on a huge object).
SUGGESTED_AMONG = 1000


class JsonMessage(dict):  # type: ignore[type-arg]
    """A JSON message (and each object in it): a dict, so ``[key]``, ``==`` and ``json.dumps`` work as
    on ``json.loads``' own, whose keys also read as attributes, as ROS messages' fields do
    (``m.msg.pose.position.x``). A key named as a dict method (``items``, ``values``, ``get``...) or as
    Python's own (``__deepcopy__``: the file's content must not change how Python treats the object)
    reads only as ``m.msg["items"]``. (A message that is a JSON array or number is a list or a number.)"""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            keys = [k for k in self if isinstance(k, str)] if len(self) <= SUGGESTED_AMONG else []
            near = "" if name.startswith("_") else close_matches(name, keys)
            raise AttributeError(f"the JSON message has no key {name!r}{near}", name=name) from None

    def to_dict(self, plain: bool = False) -> dict[str, Any]:
        """The message as plain dicts and lists (JSON holds nothing else, so ``plain`` changes nothing)."""
        return _plain_json(self)  # type: ignore[no-any-return]


def _plain_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain_json(v) for key, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    return value


#: Well-known types that stand for JSON values: given as the values they hold.
_JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def _protobuf_to_dict(self: Any, plain: bool = False) -> Any:
    """The fields of a protobuf message as nested dicts, by the names the schema gives them.

    Every field, as a ROS message's ``to_dict`` gives them all; one that
    tracks whether it is set (a message field, a ``oneof`` member, an
    ``optional`` one) and is not, as None, so the member of a ``oneof`` that
    is set is the one not None. Numbers as Python numbers, enums as their
    numbers, bytes as bytes, repeated fields as lists, maps as dicts;
    ``Struct``, ``Value`` and ``ListValue`` as the dict, value or list they
    hold. ``plain=True`` gives protobuf's canonical JSON mapping instead
    (``json_format.MessageToDict`` with the schema's field names and every
    field: 64-bit integers as strings, enums by name, bytes as base64, a
    Timestamp as RFC 3339 text), which :func:`json.dumps` takes.
    """
    if plain or self.DESCRIPTOR.full_name in _JSON_TYPES:
        from google.protobuf import json_format

        # (the schema's own pool: an Any holding one of its types is looked up there)
        return json_format.MessageToDict(self, preserving_proto_field_name=True,
                                         descriptor_pool=self.DESCRIPTOR.file.pool,
                                         **{_every_field_option(): True} if plain else {})
    return {field.name: _protobuf_field(self, field) for field in self.DESCRIPTOR.fields}


@functools.cache
def _every_field_option() -> str:
    """MessageToDict's option printing fields that are not set: renamed in protobuf 5.26."""
    import inspect

    from google.protobuf import json_format

    named = inspect.signature(json_format.MessageToDict).parameters
    return "always_print_fields_with_no_presence" if "always_print_fields_with_no_presence" in named else \
        "including_default_value_fields"


def _protobuf_field(message: Any, field: Any) -> Any:
    value = getattr(message, field.name)
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        convert = _protobuf_value(entry.fields_by_name["value"])
        return {key: convert(v) for key, v in value.items()}
    if _repeated(field):
        convert = _protobuf_value(field)
        return [convert(v) for v in value]
    if _has_presence(field) and not message.HasField(field.name):
        return None  # (a message field: not an empty message, or a type holding itself would recurse for ever)
    return _protobuf_value(field)(value)


def _has_presence(field: Any) -> bool:
    presence = getattr(field, "has_presence", None)  # (protobuf 4.22 on)
    return bool(presence) if presence is not None else \
        field.message_type is not None or field.containing_oneof is not None


def _protobuf_value(field: Any) -> Callable[[Any], Any]:
    return _protobuf_to_dict if field.message_type is not None else _same


def _same(value: Any) -> Any:
    return value


def _repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf 6; ``label`` is deprecated there
    return bool(is_repeated) if is_repeated is not None else field.label == field.LABEL_REPEATED


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
