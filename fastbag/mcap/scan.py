"""Recovery of an MCAP file by scanning its records: no summary, a damaged one, or messages outside chunks.

Reads the data section record by record (decompressing chunks to walk their
records), keeping every complete schema, channel and message. The first
record that cannot be read (cut off, a length past the end) ends the scan; a
chunk that does not decompress or fails its CRC is skipped and named. Runs
of Message records are walked by a kernel (see
:func:`fastbag.mcap.kernels.message_runs`) once the data is large enough to
pay for Numba's start; every other record, and any the kernel leaves, is read
here in Python, one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BagFormatError
from ..io.chunks import Chunk, decompress
from ..io.codecs import crc32
from ..io.source import Source
from ..io.startup import by_kernel
from .records import (MAGIC, MAX_TIME, MESSAGE_FIXED, RECORD_HEAD, AttachmentIndex, Body, Channel, MetadataIndex,
                      Opcode, Schema, parse_channel, parse_chunk_head, parse_schema, record_name)

#: Data up to this many bytes is scanned in Python while Numba is not loaded (its start, ~0.5 s, buys nothing
#: there); more loads the kernel, which walks Message records ~50x faster than Python (~3 us a record).
SCAN_IN_PYTHON_UP_TO = 4 << 20


@dataclass
class Scanned:
    """What a scan found, in file order."""

    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    attachment_indexes: list[AttachmentIndex] = field(default_factory=list)
    metadata_indexes: list[MetadataIndex] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    chunk_crcs: list[int] = field(default_factory=list)
    file_chunk: int = -1  # the position in ``chunks`` of the whole file, made for messages outside chunks
    damage: str = ""  # what ended the scan or was skipped, one clause each
    # messages in file order: runs of (channel id, log_time, position in ``chunks``, offset of the record in its
    # chunk) arrays, the kernel's and (gathered in ``_parsed`` until the next run) the Python scan's
    _runs: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    _parsed: list[tuple[int, int, int, int]] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return sum(run[0].size for run in self._runs) + len(self._parsed)

    def note(self, text: str) -> None:
        self.damage = f"{self.damage}; {text}" if self.damage else text

    def add_message(self, channel: int, log_time: int, chunk: int, offset: int) -> None:
        """One message the Python scan read."""
        self._parsed.append((channel, log_time, chunk, offset))

    def add_run(self, channel: np.ndarray, log_time: np.ndarray, chunk: int, offset: np.ndarray) -> None:
        """Messages the kernel walked, all in one chunk (copies kept: the arrays are the kernel's scratch)."""
        self._keep_parsed()
        self._runs.append((channel.copy(), log_time.copy(), np.full(offset.size, chunk, dtype=np.int64),
                           offset.copy()))

    def messages(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every message's channel id, log_time, chunk position and offset (int64 arrays, file order)."""
        self._keep_parsed()
        if not self._runs:
            return tuple(np.zeros(0, dtype=np.int64) for _ in range(4))  # type: ignore[return-value]
        return tuple(np.concatenate([run[k] for run in self._runs]) for k in range(4))  # type: ignore[return-value]

    def _keep_parsed(self) -> None:
        if self._parsed:
            self._runs.append(tuple(np.array(self._parsed, dtype=np.int64).reshape(-1, 4).T))
            self._parsed = []


class _Walker:
    """The Message-record kernel with its scratch arrays, or None where the data is small and Numba not loaded
    (see SCAN_IN_PYTHON_UP_TO)."""

    ROOM = 1 << 16  # records per kernel call (a walk stops when the arrays are full, and goes on)

    def __init__(self, size: int) -> None:
        self.kernel: Any = None
        if size and by_kernel(size, SCAN_IN_PYTHON_UP_TO):  # (size 0: a scan for attachments, no messages)
            from .kernels import message_runs

            self.kernel = message_runs
            self.channel, self.time, self.offset = (np.empty(self.ROOM, dtype=np.int64) for _ in range(3))

    def walk(self, found: Scanned, buf: np.ndarray, pos: int, end: int, chunk: int) -> int:
        """Walks the Message records from ``pos`` into ``found``; returns where they stop (``pos`` itself when
        the record there is not one the kernel takes, or without a kernel)."""
        while self.kernel is not None:
            count, pos = self.kernel(buf, pos, end, self.channel, self.time, self.offset)
            if count:
                found.add_run(self.channel[:count], self.time[:count], chunk, self.offset[:count])
            if count < self.ROOM:
                break
        return pos


def scan(source: Source, start: int, *, messages: bool = True) -> Scanned:
    """Every complete record from ``start`` (after the header) to the footer or the first damage. Without
    ``messages``, chunks and Message records are skipped (for the attachment and metadata records alone)."""
    found = Scanned()
    path, end, pos = source.path, source.size, start
    walker = _Walker(end if messages else 0)
    file_chunk = -1  # the whole file as a chunk, for messages outside chunks (made on the first one)
    summary = False  # past the Data End record: the summary repeats definitions, it holds no data
    while pos < end:
        if end - pos < RECORD_HEAD:
            if source.bytes(pos, end - pos, "magic") != MAGIC[:end - pos]:
                found.note(f"{end - pos} stray bytes end the file at offset {pos}")
            break
        opcode = source.bytes(pos, 1, "record")[0]
        length = source.u64(pos + 1, "record")
        if length > end - pos - RECORD_HEAD:
            if not (opcode == MAGIC[0] and source.bytes(pos, min(8, end - pos), "magic") == MAGIC[:min(8, end - pos)]):
                found.note(f"the {record_name(opcode)} record at offset {pos} is cut off by the end of the file")
            break
        at = pos + RECORD_HEAD
        name = record_name(opcode)
        try:
            if opcode == Opcode.FOOTER:
                break
            if opcode == Opcode.DATA_END:
                summary = True
            elif summary and opcode in (Opcode.MESSAGE, Opcode.CHUNK, Opcode.ATTACHMENT, Opcode.METADATA):
                raise BagFormatError("it lies after the Data End record, in the summary section, which holds no "
                                     "data: left out", path=path, offset=pos, record=name)
            if opcode in (Opcode.SCHEMA, Opcode.CHANNEL, Opcode.ATTACHMENT, Opcode.METADATA):
                _definition(found, opcode, Body(source.bytes(at, length, name), path=path, offset=pos, record=name),
                            pos, length)
            elif opcode == Opcode.MESSAGE and messages:
                if length < MESSAGE_FIXED:
                    raise BagFormatError(f"its length {length} is shorter than a message's fixed fields",
                                         path=path, offset=pos, record=name)
                if file_chunk < 0:
                    file_chunk = found.file_chunk = len(found.chunks)
                    found.chunks.append(Chunk(0, "none", end, 0, end))
                    found.chunk_crcs.append(0)
                walked = walker.walk(found, source.array, pos, end, file_chunk)
                if walked > pos:
                    pos = walked
                    continue
                _message(found, source.bytes(at, MESSAGE_FIXED, name), file_chunk, pos)
            elif opcode == Opcode.CHUNK and messages:
                _chunk(found, source, pos, length, walker)
        except BagFormatError as exc:
            found.note(f"a damaged {name} record was skipped: {exc}")
        pos = at + length
    return found


def _definition(found: Scanned, opcode: int, body: Body, pos: int, length: int) -> None:
    if opcode == Opcode.SCHEMA:
        schema = parse_schema(body)
        found.schemas.setdefault(schema.id, schema)
    elif opcode == Opcode.CHANNEL:
        channel = parse_channel(body)
        found.channels.setdefault(channel.id, channel)
    elif opcode == Opcode.ATTACHMENT:
        log_time, create_time = body.u64("log_time"), body.u64("create_time")
        name, media_type = body.string("name"), body.string("media_type")
        data_size = body.u64("data length")
        found.attachment_indexes.append(AttachmentIndex(pos, RECORD_HEAD + length, log_time, create_time,
                                                        data_size, name, media_type))
    else:
        found.metadata_indexes.append(MetadataIndex(pos, RECORD_HEAD + length, body.string("name")))


def _message(found: Scanned, fixed: bytes, chunk: int, offset: int) -> None:
    log_time = int.from_bytes(fixed[6:14], "little")
    if log_time > MAX_TIME:
        found.note(f"a message record at offset {offset} has log_time {log_time}, past int64: left out")
        return
    found.add_message(int.from_bytes(fixed[0:2], "little"), log_time, chunk, offset)


def _chunk(found: Scanned, source: Source, pos: int, length: int, walker: _Walker) -> None:
    """A chunk's schemas, channels and messages (its records decompressed and walked)."""
    body = Body(memoryview(source.view(pos + RECORD_HEAD, length, "chunk")), path=source.path, offset=pos,
                record="chunk")
    head = parse_chunk_head(body, pos + RECORD_HEAD)
    chunk = Chunk(pos, head.compression or "none", head.uncompressed_size, head.records_offset, head.records_length)
    payload = decompress(source, chunk)
    if head.uncompressed_crc and crc32(payload) != head.uncompressed_crc:
        raise BagFormatError("its decompressed records fail their CRC-32 check", path=source.path, offset=pos,
                             record="chunk")
    k = len(found.chunks)
    found.chunks.append(chunk)
    found.chunk_crcs.append(head.uncompressed_crc)
    inner, size, at = memoryview(payload), payload.size, 0
    where = f"{source.path} (chunk at offset {pos})"
    while at < size:
        walked = walker.walk(found, payload, at, size, k)
        if walked >= size:
            break
        at = walked
        if size - at < RECORD_HEAD:
            raise BagFormatError("its records end in a cut-off record head", path=where, offset=at, record="record")
        opcode = inner[at]
        length = int.from_bytes(inner[at + 1:at + 9], "little")
        name = record_name(opcode)
        if length > size - at - RECORD_HEAD:
            raise BagFormatError(f"its length {length} runs past the chunk's records", path=where, offset=at,
                                 record=name)
        if opcode == Opcode.MESSAGE:
            if length < MESSAGE_FIXED:
                raise BagFormatError(f"its length {length} is shorter than a message's fixed fields", path=where,
                                     offset=at, record=name)
            _message(found, bytes(inner[at + RECORD_HEAD:at + RECORD_HEAD + MESSAGE_FIXED]), k, at)
        elif opcode in (Opcode.SCHEMA, Opcode.CHANNEL):
            _definition(found, opcode, Body(inner[at + RECORD_HEAD:at + RECORD_HEAD + length], path=where,
                                            offset=at, record=name), at, length)
        at += RECORD_HEAD + length
