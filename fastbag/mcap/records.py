"""MCAP records (format version 0): opcodes, and parsers that check every length before use.

A record is ``u8 opcode | u64 length | body``, little-endian. Strings are
``u32 length + UTF-8``, byte arrays ``u32`` (schema data) or ``u64``
(attachments, chunk records) length + bytes, maps and arrays ``u32 byte
length + items``. A body may hold more bytes than its fields (later format
revisions add fields; the conformance corpus pads records): readers ignore
the rest. Every parser takes the record's body and its offset in the file,
and raises :class:`~fastbag.errors.BagFormatError` naming both when a field
runs past the body.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from ..errors import BagFormatError
from ..io.gather import le_uint

MAGIC = b"\x89MCAP0\r\n"
RECORD_HEAD = 9  # opcode u8 + length u64


class Opcode(IntEnum):
    HEADER = 0x01
    FOOTER = 0x02
    SCHEMA = 0x03
    CHANNEL = 0x04
    MESSAGE = 0x05
    CHUNK = 0x06
    MESSAGE_INDEX = 0x07
    CHUNK_INDEX = 0x08
    ATTACHMENT = 0x09
    ATTACHMENT_INDEX = 0x0A
    STATISTICS = 0x0B
    METADATA = 0x0C
    METADATA_INDEX = 0x0D
    SUMMARY_OFFSET = 0x0E
    DATA_END = 0x0F


def record_end(payload: np.ndarray, at: int) -> int:
    """Where the record at ``payload[at:]`` ends (opcode u8, length u64, body), as far as ``payload``,
    perhaps the head of a chunk's records, holds its length (see Container.record_end)."""
    if payload.size < at + RECORD_HEAD:
        return at + RECORD_HEAD
    return at + RECORD_HEAD + int(payload[at + 1:at + RECORD_HEAD].view("<u8")[0])


def record_name(opcode: int) -> str:
    """The record kind for error messages: ``"chunk index"``, or ``"opcode 0x42"`` for an unknown one."""
    try:
        return Opcode(opcode).name.lower().replace("_", " ")
    except ValueError:
        return f"opcode {opcode:#04x}"


#: Fixed part of a Message record's body: channel_id u16, sequence u32, log_time u64, publish_time u64.
MESSAGE_FIXED = 22
#: Times are int64 nanoseconds: a log_time past this is damage (no clock reaches the year 2262).
MAX_TIME = 2**63 - 1


class Body:
    """A cursor over one record's body that checks every read against the body's end."""

    __slots__ = ("raw", "pos", "path", "offset", "record")

    def __init__(self, raw: bytes | memoryview, *, path: str, offset: int, record: str) -> None:
        self.raw = raw
        self.pos = 0
        self.path = path
        self.offset = offset  # of the record in the file
        self.record = record

    def fail(self, what: str) -> BagFormatError:
        return BagFormatError(f"{what} runs past the end of the record's {len(self.raw)} bytes", path=self.path,
                              offset=self.offset, record=self.record)

    def take(self, n: int, what: str) -> bytes | memoryview:
        if n < 0 or n > len(self.raw) - self.pos:
            raise self.fail(what)
        out = self.raw[self.pos:self.pos + n]
        self.pos += n
        return out

    def _unpack(self, fmt: struct.Struct, what: str) -> int:
        if fmt.size > len(self.raw) - self.pos:
            raise self.fail(what)
        (value,) = fmt.unpack_from(self.raw, self.pos)
        self.pos += fmt.size
        return value

    def u8(self, what: str) -> int:
        return self._unpack(_U8, what)

    def u16(self, what: str) -> int:
        return self._unpack(_U16, what)

    def u32(self, what: str) -> int:
        return self._unpack(_U32, what)

    def u64(self, what: str) -> int:
        return self._unpack(_U64, what)

    def string(self, what: str) -> str:
        raw = self.take(self.u32(what), what)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BagFormatError(f"{what} is not UTF-8: {exc}", path=self.path, offset=self.offset,
                                 record=self.record) from None

    def bytes32(self, what: str) -> bytes:
        return bytes(self.take(self.u32(what), what))

    def string_map(self, what: str) -> dict[str, str]:
        inner = Body(self.take(self.u32(what), what), path=self.path, offset=self.offset, record=self.record)
        out = {}
        while inner.pos < len(inner.raw):
            key = inner.string(f"{what} key")
            out[key] = inner.string(f"{what} value")
        return out

    def u16_u64_map(self, what: str) -> dict[int, int]:
        raw = self.take(self.u32(what), what)
        if len(raw) % 10:
            raise BagFormatError(f"{what} holds {len(raw)} bytes, not a whole number of 10-byte entries",
                                 path=self.path, offset=self.offset, record=self.record)
        return {key: value for key, value in _U16_U64.iter_unpack(raw)}


_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U16_U64 = struct.Struct("<HQ")


@dataclass(frozen=True)
class Footer:
    summary_start: int
    summary_offset_start: int
    summary_crc: int


@dataclass(frozen=True)
class Schema:
    id: int
    name: str
    encoding: str
    data: bytes


@dataclass(frozen=True)
class Channel:
    id: int
    schema_id: int
    topic: str
    message_encoding: str
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkHead:
    """A Chunk record's fields before its records: where the (compressed) records lie."""

    start_time: int
    end_time: int
    uncompressed_size: int
    uncompressed_crc: int
    compression: str
    records_offset: int  # in the file
    records_length: int


@dataclass(frozen=True)
class ChunkIndex:
    start_time: int
    end_time: int
    chunk_offset: int
    chunk_length: int
    message_index_offsets: dict[int, int]
    message_index_length: int
    compression: str
    compressed_size: int
    uncompressed_size: int


@dataclass(frozen=True)
class Statistics:
    message_count: int
    schema_count: int
    channel_count: int
    attachment_count: int
    metadata_count: int
    chunk_count: int
    message_start_time: int
    message_end_time: int
    channel_message_counts: dict[int, int]


@dataclass(frozen=True)
class AttachmentIndex:
    offset: int
    length: int
    log_time: int
    create_time: int
    data_size: int
    name: str
    media_type: str


@dataclass(frozen=True)
class MetadataIndex:
    offset: int
    length: int
    name: str


@dataclass(frozen=True)
class Attachment:
    """A file stored in the recording (a calibration, a map, a URDF): ``data`` is its bytes."""

    name: str
    media_type: str
    data: bytes
    log_time: int
    create_time: int
    offset: int  # of the attachment record in the file


@dataclass(frozen=True)
class Metadata:
    """A named map of strings stored in the recording."""

    name: str
    metadata: dict[str, str]
    offset: int


def parse_footer(b: Body) -> Footer:
    return Footer(b.u64("summary_start"), b.u64("summary_offset_start"), b.u32("summary_crc"))


def parse_schema(b: Body) -> Schema:
    return Schema(b.u16("schema id"), b.string("schema name"), b.string("schema encoding"), b.bytes32("schema data"))


def parse_channel(b: Body) -> Channel:
    return Channel(b.u16("channel id"), b.u16("schema id"), b.string("topic"), b.string("message encoding"),
                   b.string_map("channel metadata"))


def parse_chunk_head(b: Body, body_offset: int) -> ChunkHead:
    """The chunk's fields; ``body_offset`` is where the body starts in the file."""
    start, end = b.u64("message_start_time"), b.u64("message_end_time")
    size, crc = b.u64("uncompressed_size"), b.u32("uncompressed_crc")
    compression = b.string("compression")
    length = b.u64("records length")
    if length > len(b.raw) - b.pos:
        raise b.fail(f"the chunk's records ({length} bytes)")
    return ChunkHead(start, end, size, crc, compression, body_offset + b.pos, length)


def parse_chunk_index(b: Body) -> ChunkIndex:
    return ChunkIndex(b.u64("message_start_time"), b.u64("message_end_time"), b.u64("chunk_start_offset"),
                      b.u64("chunk_length"), b.u16_u64_map("message_index_offsets"), b.u64("message_index_length"),
                      b.string("compression"), b.u64("compressed_size"), b.u64("uncompressed_size"))


def parse_statistics(b: Body) -> Statistics:
    return Statistics(b.u64("message_count"), b.u16("schema_count"), b.u32("channel_count"),
                      b.u32("attachment_count"), b.u32("metadata_count"), b.u32("chunk_count"),
                      b.u64("message_start_time"), b.u64("message_end_time"),
                      b.u16_u64_map("channel_message_counts"))


def parse_attachment_index(b: Body) -> AttachmentIndex:
    return AttachmentIndex(b.u64("offset"), b.u64("length"), b.u64("log_time"), b.u64("create_time"),
                           b.u64("data_size"), b.string("name"), b.string("media_type"))


def parse_metadata_index(b: Body) -> MetadataIndex:
    return MetadataIndex(b.u64("offset"), b.u64("length"), b.string("name"))


def parse_attachment(b: Body) -> Attachment:
    """The attachment, its CRC-32 (of every field before it) checked where the writer computed one (0: none)."""
    log_time, create_time = b.u64("log_time"), b.u64("create_time")
    name, media_type = b.string("name"), b.string("media_type")
    data = bytes(b.take(b.u64("data length"), "attachment data"))
    covered = b.pos
    crc = b.u32("attachment crc")
    if crc and zlib.crc32(b.raw[:covered]) != crc:
        raise BagFormatError(f"attachment {name!r} fails its CRC-32 check", path=b.path, offset=b.offset,
                             record=b.record)
    return Attachment(name, media_type, data, log_time, create_time, b.offset)


def parse_metadata(b: Body) -> Metadata:
    return Metadata(b.string("name"), b.string_map("metadata"), b.offset)


@dataclass(frozen=True, eq=False)
class ChunkIndexes:
    """Every Chunk Index record of a summary, as columns (opening a file of thousands of chunks parses
    them with a few NumPy gathers). Times and sizes are int64; the message-index offsets of chunk ``k``
    are entries ``entry_start[k]:entry_start[k + 1]`` of ``entry_channel`` / ``entry_offset``."""

    start_time: np.ndarray
    end_time: np.ndarray
    chunk_offset: np.ndarray
    chunk_length: np.ndarray
    message_index_length: np.ndarray
    compressed_size: np.ndarray
    uncompressed_size: np.ndarray
    compression: tuple[str, ...]
    compression_length: np.ndarray  # bytes of each compression name
    entry_start: np.ndarray
    entry_channel: np.ndarray
    entry_offset: np.ndarray

    def __len__(self) -> int:
        return len(self.compression)

    def take(self, order: np.ndarray) -> ChunkIndexes:
        """The records in ``order`` (their message-index entries follow them)."""
        counts = np.diff(self.entry_start)[order]
        starts = np.zeros(order.size + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        pick = (np.repeat(self.entry_start[:-1][order] - starts[:-1], counts) + np.arange(int(starts[-1]))
                if order.size else np.zeros(0, dtype=np.int64))
        return ChunkIndexes(self.start_time[order], self.end_time[order], self.chunk_offset[order],
                            self.chunk_length[order], self.message_index_length[order], self.compressed_size[order],
                            self.uncompressed_size[order], tuple(self.compression[k] for k in order.tolist()),
                            self.compression_length[order], starts, self.entry_channel[pick], self.entry_offset[pick])

    @staticmethod
    def empty() -> ChunkIndexes:
        z = np.zeros(0, dtype=np.int64)
        return ChunkIndexes(z, z, z, z, z, z, z, (), z, np.zeros(1, dtype=np.int64), z, z)


def _strings(buf: np.ndarray, at: np.ndarray, length: np.ndarray, record_at: np.ndarray, *, path: str
             ) -> tuple[str, ...]:
    """The strings ``buf[at[i]:at[i] + length[i]]`` (compression names: a few distinct ones, thousands of
    times), each distinct one decoded once."""
    if length.size and length.max() <= 8:  # every name fits a u64 key: group them without a Python loop
        held = np.arange(8) < length[:, None]
        keys = np.ascontiguousarray(np.where(held, buf[np.where(held, at[:, None] + np.arange(8), 0)], 0)
                                    .astype(np.uint8)).view("<u8").ravel()
        if (keys == keys[0]).all():  # one compression for the whole file, as writers do: no sort
            first, inverse = np.zeros(1, dtype=np.int64), np.zeros(keys.size, dtype=np.int64)
        else:
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        picks = first
    else:
        picks = np.arange(length.size)
        inverse = picks
    names = []
    for k in picks.tolist():
        try:
            names.append(buf[at[k]:at[k] + length[k]].tobytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BagFormatError(f"compression is not UTF-8: {exc}", path=path, offset=int(record_at[k]),
                                 record="chunk index") from None
    if len(names) == 1:
        return (names[0],) * inverse.size
    return tuple(names[k] for k in inverse.ravel().tolist())


def parse_chunk_indexes(buf: np.ndarray, body_at: np.ndarray, body_length: np.ndarray, record_at: np.ndarray, *,
                        path: str) -> ChunkIndexes:
    """Chunk Index records whose bodies lie at ``body_at`` (``body_length`` bytes each) in ``buf``;
    ``record_at`` are their offsets in the file, for errors. Every field is checked against its body."""
    body_at = np.asarray(body_at, dtype=np.int64)
    end = body_at + np.asarray(body_length, dtype=np.int64)

    def fail(bad: np.ndarray, what: str) -> BagFormatError:
        k = int(np.argmax(bad))
        return BagFormatError(f"{what} runs past the end of the record's {int(end[k] - body_at[k])} bytes",
                              path=path, offset=int(record_at[k]), record="chunk index")

    if (end - body_at < 36).any():
        raise fail(end - body_at < 36, "message_index_offsets")
    fixed = [le_uint(buf, body_at + 8 * j, 8) for j in range(4)]
    map_length = le_uint(buf, body_at + 32, 4).astype(np.int64)
    after_map = body_at + 36 + map_length
    if (after_map + 12 > end).any():
        raise fail(after_map + 12 > end, "message_index_length")
    if (map_length % 10).any():
        k = int(np.argmax(map_length % 10 != 0))
        raise BagFormatError(f"message_index_offsets holds {int(map_length[k])} bytes, not a whole number of "
                             "10-byte entries", path=path, offset=int(record_at[k]), record="chunk index")
    mi_length = le_uint(buf, after_map, 8)
    name_length = le_uint(buf, after_map + 8, 4).astype(np.int64)
    after_name = after_map + 12 + name_length
    if (after_name + 16 > end).any():
        raise fail(after_name + 16 > end, "compression")
    compressed, uncompressed = le_uint(buf, after_name, 8), le_uint(buf, after_name + 8, 8)
    compression = _strings(buf, after_map + 12, name_length, record_at, path=path)
    counts = map_length // 10
    entry_start = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=entry_start[1:])
    total = int(entry_start[-1])
    entry_at = np.repeat(body_at + 36 - 10 * entry_start[:-1], counts) + 10 * np.arange(total)
    # Beyond 2**63 no offset, time or size fits the int64 tables: such a value is damage.
    columns = [*fixed, mi_length, compressed, uncompressed, le_uint(buf, entry_at + 2, 8)]
    for column in columns:
        if (column >= np.uint64(1 << 63)).any():
            k = int(np.argmax(column >= np.uint64(1 << 63)))
            k = int(np.searchsorted(entry_start, k, side="right")) - 1 if column is columns[-1] else k
            raise BagFormatError("a time, offset or size beyond 2**63 (int64: times past the year 2262)", path=path,
                                 offset=int(record_at[k]), record="chunk index")
    as_int = [c.astype(np.int64) for c in columns]
    return ChunkIndexes(*as_int[:5], as_int[5], as_int[6], compression, name_length, entry_start,
                        le_uint(buf, entry_at, 2).astype(np.int64), as_int[7])
