"""A rosbag2 directory's ``metadata.yaml``, versions 1 to 9, read through PyYAML.

The file describes the recording: its storage plugin (``sqlite3`` or
``mcap``), its storage files in order (split bags), its topics with their
types, serialization format, offered QoS and (version 8+) type description
hashes, and how it is compressed (``compression_mode`` ``FILE`` or
``MESSAGE``, ``compression_format`` ``zstd``). Version 1 names its topics
under ``topic_and_type``; later ones under ``topic_metadata``. Version 6+
lists per-file start times and counts under ``files``.

What the file says about topics is advice: the storage files are the truth
(topics are matched by name and type from the database; see
:mod:`fastbag.rosbag2.reader`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from ..container import Connection, transient_local
from ..errors import OUT_OF_RESOURCES, BagFormatError, UnsupportedError

#: Versions of metadata.yaml this module knows (rosbag2 Dashing to Jazzy and later).
KNOWN_VERSIONS = range(1, 10)


@dataclass(frozen=True)
class TopicMetadata:
    """One topic as metadata.yaml lists it."""

    name: str
    type: str
    serialization_format: str
    offered_qos_profiles: str = ""
    type_description_hash: str = ""
    message_count: int = 0


@dataclass(frozen=True)
class FileMetadata:
    """One storage file as metadata.yaml (version 6+) lists it: start time and duration in int ns."""

    path: str
    starting_time: int
    duration: int
    message_count: int


@dataclass(frozen=True)
class BagMetadata:
    """What a rosbag2 ``metadata.yaml`` says (see the module docstring)."""

    version: int
    storage_identifier: str
    relative_file_paths: tuple[str, ...]
    starting_time: int
    duration: int
    message_count: int
    topics: tuple[TopicMetadata, ...]
    compression_format: str = ""
    compression_mode: str = ""       # "", "FILE" or "MESSAGE" (upper case, as rosbag2 writes it)
    files: tuple[FileMetadata, ...] = ()
    ros_distro: str = ""
    custom_data: dict[str, str] = field(default_factory=dict)

    @property
    def per_message(self) -> bool:
        """Whether each message's data is compressed on its own (``compression_mode: message``)."""
        return self.compression_mode == "MESSAGE"

    def check_compression_format(self, where: str) -> None:
        """UnsupportedError naming ``where`` where the files or messages are compressed other than with zstd
        (the only format rosbag2 ships)."""
        if self.compression_mode in ("FILE", "MESSAGE") and self.compression_format != "zstd":
            raise UnsupportedError(f"rosbag2 compression format {self.compression_format!r} is not supported "
                                   f"(known: zstd) ({where})")


def read_metadata(path: str | os.PathLike[str]) -> BagMetadata:
    """Parse the ``metadata.yaml`` at ``path``; BagFormatError naming the file and the field if malformed."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as file:
            text = file.read(MAX_METADATA_BYTES + 1)
    except OSError as exc:
        if exc.errno in OUT_OF_RESOURCES:  # the process's or the machine's limit, not the recording's fault
            raise
        raise BagFormatError(f"metadata.yaml cannot be read: {exc.strerror or exc}", path=path) from exc
    if len(text) > MAX_METADATA_BYTES:
        raise BagFormatError(f"metadata.yaml is larger than {MAX_METADATA_BYTES} bytes", path=path)
    return parse_metadata(text, path)


#: A metadata.yaml lists topics and files: megabytes would be a damaged or hostile file.
MAX_METADATA_BYTES = 64 << 20


def parse_metadata(text: str | bytes, path: str = "metadata.yaml") -> BagMetadata:
    """Parse the text of a ``metadata.yaml`` (or the ``metadata`` table of a newer ``.db3``)."""
    import yaml  # imported on first use: `import fastbag` stays light

    try:
        # libyaml's loader where PyYAML was built with it: 10x faster than the pure-Python one.
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise BagFormatError(f"metadata.yaml is not valid YAML{where}: {getattr(exc, 'problem', exc)}",
                             path=path) from exc
    except (ValueError, RecursionError) as exc:  # a YAML integer too large, or nesting too deep
        raise BagFormatError(f"metadata.yaml cannot be parsed: {exc}", path=path) from exc
    if isinstance(document, dict) and "rosbag2_bagfile_information" in document:
        info = document["rosbag2_bagfile_information"]
    else:
        info = document  # the db3 ``metadata`` table stores the mapping without the outer key
    fields = _Fields(info, path, "rosbag2_bagfile_information")
    version = fields.integer("version")
    if version not in KNOWN_VERSIONS:
        raise UnsupportedError(f"metadata.yaml version {version} is not supported (known: 1 to 9) ({path})")
    topics = []
    for k, entry in enumerate(fields.sequence("topics_with_message_count")):
        item = _Fields(entry, path, f"topics_with_message_count[{k}]")
        key = "topic_and_type" if version == 1 or "topic_metadata" not in item.mapping else "topic_metadata"
        topic = _Fields(item.mapping.get(key), path, f"topics_with_message_count[{k}].{key}")
        topics.append(TopicMetadata(
            name=topic.text("name"), type=topic.text("type"),
            serialization_format=topic.text("serialization_format", ""),
            offered_qos_profiles=_qos_text(topic.mapping.get("offered_qos_profiles", "")),
            type_description_hash=topic.text("type_description_hash", ""),
            message_count=item.integer("message_count", 0)))
    files = []
    for k, entry in enumerate(fields.sequence("files")):
        item = _Fields(entry, path, f"files[{k}]")
        files.append(FileMetadata(item.text("path"), item.nested_integer("starting_time", "nanoseconds_since_epoch"),
                                  item.nested_integer("duration", "nanoseconds"), item.integer("message_count", 0)))
    paths = tuple(_Fields({"p": p}, path, f"relative_file_paths[{k}]").text("p")
                  for k, p in enumerate(fields.sequence("relative_file_paths")))
    if not paths and files:
        paths = tuple(f.path for f in files)
    custom = fields.mapping.get("custom_data") or {}
    return BagMetadata(
        version=version,
        storage_identifier=fields.text("storage_identifier"),
        relative_file_paths=paths,
        starting_time=fields.nested_integer("starting_time", "nanoseconds_since_epoch", 0),
        duration=fields.nested_integer("duration", "nanoseconds", 0),
        message_count=fields.integer("message_count", 0),
        topics=tuple(topics),
        compression_format=fields.text("compression_format", ""),
        compression_mode=fields.text("compression_mode", "").upper(),
        files=tuple(files),
        ros_distro=fields.text("ros_distro", ""),
        custom_data={str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {},
    )


def _qos_text(value: Any) -> str:
    """Offered QoS profiles: a YAML text inside the YAML (versions 4+); kept as text."""
    return value if isinstance(value, str) else "" if value is None else str(value)


_MISSING = object()


class _Fields:
    """Typed getters over one YAML mapping, raising one-sentence errors that name the field."""

    def __init__(self, mapping: Any, path: str, where: str) -> None:
        if not isinstance(mapping, dict):
            raise BagFormatError(f"metadata.yaml field {where} is {type(mapping).__name__}, not a mapping",
                                 path=path)
        self.mapping, self.path, self.where = mapping, path, where

    def _get(self, key: str, default: Any) -> Any:
        value = self.mapping.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise BagFormatError(f"metadata.yaml lacks the field {self.where}.{key}", path=self.path)
            return default
        return value

    def text(self, key: str, default: Any = _MISSING) -> str:
        value = self._get(key, default)
        if isinstance(value, (dict, list)):
            raise BagFormatError(f"metadata.yaml field {self.where}.{key} is not a text", path=self.path)
        return str(value)

    def integer(self, key: str, default: Any = _MISSING) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 63) <= value < (1 << 64):
            raise BagFormatError(f"metadata.yaml field {self.where}.{key} is {value!r}, not a 64-bit integer",
                                 path=self.path)
        return value

    def nested_integer(self, key: str, inner: str, default: Any = _MISSING) -> int:
        value = self._get(key, _MISSING if default is _MISSING else {inner: default})
        return _Fields(value, self.path, f"{self.where}.{key}").integer(inner, default)

    def sequence(self, key: str) -> list[Any]:
        value = self._get(key, [])
        if not isinstance(value, list):
            raise BagFormatError(f"metadata.yaml field {self.where}.{key} is not a list", path=self.path)
        return value


def with_recorded_topics(connections: list[Connection], metadata: BagMetadata | None) -> list[Connection]:
    """``connections`` completed by what metadata.yaml records of their topics (matched by name and type) where
    the storage file's channels do not say it: the type description hash and the offered QoS (latching with
    it). rosbags' writer, for one, keeps them in metadata.yaml only."""
    if metadata is None:
        return connections
    recorded = {(t.name, t.type): t for t in metadata.topics}
    completed = []
    for c in connections:
        topic = recorded.get((c.topic, c.msgtype))
        if topic is not None and (not c.type_description_hash or not c.offered_qos_profiles):
            qos = c.offered_qos_profiles or topic.offered_qos_profiles
            c = replace(c, type_description_hash=c.type_description_hash or topic.type_description_hash,
                        offered_qos_profiles=qos, latching=c.latching or transient_local(qos))
        completed.append(c)
    return completed
