"""The MCAP container: a file's summary, chunk indexes and message indexes behind the Container interface.

Opening reads the magic at both ends, the footer and the summary section
(schemas, channels, chunk indexes, statistics, attachment and metadata
indexes): a few kilobytes at the end of the file. The per-message index
(time, channel, chunk, offset) is built on first use from each chunk's
message-index records, which lie right after the chunk: one ``pread`` per
chunk for them and the chunk's head, parsed with NumPy. Without a summary,
with a damaged one, or for messages outside chunks, the file is scanned
record by record instead, recovering every complete record, with one
warning.

Messages are ordered by ``log_time`` (the receive time, ``.time``), ties in
file order, as the MCAP readers order them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import struct
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..container import NO_MD5, BagIndex, Connection, LazyIndexContainer, transient_local
from ..errors import BagFormatError, FastbagError, FastbagWarning, UnsupportedError
from ..io.chunks import DEFAULT_CACHE_BYTES, ChunkStore, ChunkTable, decompress
from ..io.codecs import ZSTD_MAGIC, crc32
from ..io.gather import item_positions, le_uint, rows
from ..io.source import Source
from .records import (MAGIC, MESSAGE_FIXED, RECORD_HEAD, Attachment, AttachmentIndex, Body, Channel, ChunkIndexes,
                      Metadata, MetadataIndex, Opcode, Schema, Statistics, parse_attachment,
                      parse_attachment_index, parse_channel, parse_chunk_indexes, parse_footer,
                      parse_metadata, parse_metadata_index, parse_schema, parse_statistics, record_end,
                      record_name)

_U64 = struct.Struct("<Q")
_RECORD_HEAD = struct.Struct("<BQ")
FOOTER_RECORD = RECORD_HEAD + 20  # opcode, length, summary_start u64, summary_offset_start u64, summary_crc u32
#: Bytes of a Message record before its data: the record head and the fixed fields.
MESSAGE_HEAD = RECORD_HEAD + MESSAGE_FIXED
#: Bytes of a Chunk record before its compression string: the record head and four fixed fields.
CHUNK_FIXED = RECORD_HEAD + 8 + 8 + 8 + 4
#: A handle reads windows' parts of the index (McapReader.window_index) until they have read this share of
#: the file's chunks' message indexes; the next window reads the whole index, once.
WINDOW_SHARE = 0.5


class _Damaged(Exception):
    """The summary cannot be trusted: scan instead (the text says why)."""


@dataclass
class _Summary:
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    chunk_indexes: ChunkIndexes = field(default_factory=ChunkIndexes.empty)
    statistics: Statistics | None = None
    attachment_indexes: list[AttachmentIndex] = field(default_factory=list)
    metadata_indexes: list[MetadataIndex] = field(default_factory=list)


def message_headers(buf: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(publish_time, sequence)`` of Message records whose data start at ``starts`` in ``buf``: the record's
    fields before its data are channel id (u16), sequence (u32), log_time and publish_time (u64). Every
    start comes from a record already checked, so ValueError where a field would lie outside ``buf``."""
    from .kernels import message_headers as read_headers

    starts = np.asarray(starts, dtype=np.int64)
    publish_time, sequence = np.empty(starts.size, dtype=np.int64), np.empty(starts.size, dtype=np.int64)
    outside = read_headers(buf, starts, publish_time, sequence)
    if outside >= 0:
        raise ValueError(f"a message's data starts at {int(starts[outside])}, too close to its buffer's edges "
                         "for the record fields before it")
    return publish_time, sequence


class McapReader(LazyIndexContainer):
    """An open MCAP file (any profile; ROS2 ``cdr`` and ROS1 ``ros1`` messages decode into arrays)."""

    format = "MCAP"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.source = Source(path)
        try:
            self._open()
        except BaseException:
            self.source.close()
            raise

    # -- opening -------------------------------------------------------------------------
    def _open(self) -> None:
        src = self.source
        head = src.bytes(0, min(src.size, len(MAGIC)), "magic")
        if head[:5] == MAGIC[:5] and len(head) > 5 and head[5:6] != MAGIC[5:6]:
            raise UnsupportedError(f"MCAP major version {head[5:6]!r} is not supported, only '0' ({self.path}, "
                                   "offset 0, magic)")
        if head != MAGIC:
            what = "the file is empty" if not src.size else "it does not start with the MCAP magic"
            raise BagFormatError(f"not an MCAP file: {what}", path=self.path, offset=0, record="magic")
        head = self._record_at(len(MAGIC), src.size)
        if head[0] != Opcode.HEADER:
            raise BagFormatError(f"the first record is a {record_name(head[0])}, not the header", path=self.path,
                                 offset=len(MAGIC), record="header")
        body = Body(src.bytes(head[1], head[2], "header"), path=self.path, offset=len(MAGIC), record="header")
        self.profile, self.library = body.string("profile"), body.string("library")
        self._data_start = head[1] + head[2]
        self._problems: list[str] = []
        self._index: BagIndex | None = None
        self._looks_zstd: bool | None = None  # see messages_look_zstd (asked at open, twice for a lone file)
        self._chunk_crc: np.ndarray = np.zeros(0, dtype=np.int64)
        self._listed_per_chunk: np.ndarray | None = None  # entries per chunk, kept in files without statistics
        self._counted: set[int] = set()  # chunks whose Message records were counted
        self._window_chunks = 0  # chunks whose message indexes window_index read so far
        self._window_listed: dict[int, int] = {}  # entries of the compressed chunks windows read (see _verify)
        self._file_chunk = -1  # see counted_chunks
        try:
            summary = self._read_summary()
        except _Damaged as exc:
            self._scan(reason=str(exc))
            return
        self._summary = summary
        self._recovered = False
        self._build_connections(summary.schemas, summary.channels)
        indexes = summary.chunk_indexes
        if (np.diff(indexes.chunk_offset) < 0).any():
            indexes = indexes.take(np.argsort(indexes.chunk_offset, kind="stable"))
        self._chunk_indexes = indexes
        self._chunk_crc = np.full(len(indexes), -1, dtype=np.int64)  # -1: its head not read yet
        self._chunks = self._chunk_table(indexes)

    def _holds_messages(self, end: int) -> bool:
        """Whether the data section (up to ``end``) holds a Chunk or Message record, or cannot be walked: a
        summary that counts no messages and indexes no chunk is then not believed (a file that records
        none holds few records, so the walk is short; one that does stops at its first)."""
        try:
            found = self._first_record(self._data_start, end, (Opcode.CHUNK, Opcode.MESSAGE))
        except BagFormatError:
            return True
        return found is not None and found[0] != Opcode.DATA_END

    def _first_record(self, at: int, end: int, opcodes: tuple[int, ...]) -> tuple[int, int] | None:
        """``(opcode, offset)`` of the first record from ``at`` to ``end`` whose opcode is one of ``opcodes`` or
        DATA_END, or None; BagFormatError where a record runs past ``end``."""
        while at < end:
            opcode, body, length = self._record_at(at, end)
            if opcode in opcodes or opcode == Opcode.DATA_END:
                return opcode, at
            at = body + length
        return None

    @classmethod
    def _chunk_table(cls, indexes: ChunkIndexes) -> ChunkTable:
        """The chunks ``indexes`` point at, as the store reads them."""
        return ChunkTable.from_columns(
            indexes.chunk_offset, indexes.chunk_offset + cls._chunk_heads(indexes) + 8, indexes.uncompressed_size,
            indexes.compressed_size, tuple(c or "none" for c in indexes.compression))

    @staticmethod
    def _chunk_heads(indexes: ChunkIndexes) -> np.ndarray:
        """Bytes of each Chunk record before its records' u64 length: fixed fields and compression."""
        return CHUNK_FIXED + 4 + indexes.compression_length

    def _record_at(self, offset: int, end: int) -> tuple[int, int, int]:
        """(opcode, body offset, body length) of the record at ``offset``, which must end by ``end``."""
        if end - offset < RECORD_HEAD:
            raise BagFormatError(f"a record head needs {RECORD_HEAD} bytes, {max(0, end - offset)} are left",
                                 path=self.path, offset=offset, record="record")
        opcode = self.source.bytes(offset, 1, "record")[0]
        length = self.source.u64(offset + 1, record_name(opcode))
        if length > end - offset - RECORD_HEAD:
            raise BagFormatError(f"its length {length} runs past the end of its section ({end})", path=self.path,
                                 offset=offset, record=record_name(opcode))
        return opcode, offset + RECORD_HEAD, length

    def _read_summary(self) -> _Summary:
        src = self.source
        footer_at = src.size - len(MAGIC) - FOOTER_RECORD
        if footer_at < self._data_start or src.bytes(src.size - len(MAGIC), len(MAGIC), "magic") != MAGIC:
            raise _Damaged("it does not end with the MCAP magic (cut short?)")
        try:
            opcode, at, length = self._record_at(footer_at, src.size - len(MAGIC))
            if opcode != Opcode.FOOTER:
                raise _Damaged(f"the record before the end magic is a {record_name(opcode)}, not the footer")
            footer = parse_footer(Body(src.bytes(at, length, "footer"), path=self.path, offset=footer_at,
                                       record="footer"))
        except BagFormatError as exc:
            raise _Damaged(f"its footer is damaged: {exc}") from None
        if footer.summary_start == 0:
            raise _Damaged("it has no summary section")
        if not self._data_start <= footer.summary_start <= footer_at:
            raise _Damaged(f"its footer's summary_start {footer.summary_start} lies outside the file's records")
        summary_end = footer.summary_offset_start if footer.summary_offset_start else footer_at
        if not footer.summary_start <= summary_end <= footer_at:
            raise _Damaged(f"its footer's summary_offset_start {footer.summary_offset_start} is out of place")
        if footer.summary_crc:
            # The CRC covers the summary section up to and including the footer's summary_offset_start.
            covered = src.view(footer.summary_start, footer_at + RECORD_HEAD + 16 - footer.summary_start, "summary")
            if zlib.crc32(covered) != footer.summary_crc:
                raise _Damaged("its summary section fails its CRC-32 check")
        summary = _Summary()
        parsers = {Opcode.SCHEMA: parse_schema, Opcode.CHANNEL: parse_channel, Opcode.STATISTICS: parse_statistics,
                   Opcode.ATTACHMENT_INDEX: parse_attachment_index, Opcode.METADATA_INDEX: parse_metadata_index}
        section = src.view(footer.summary_start, summary_end - footer.summary_start, "summary")
        raw = section.tobytes()  # one copy: the record walk reads it with struct, not the mapping
        chunk_index_at: list[int] = []  # chunk index records, parsed together (there are thousands)
        others: list[int] = []
        pos, end, unpack, chunk_index = 0, len(raw), _U64.unpack_from, int(Opcode.CHUNK_INDEX)
        try:
            # The walk is the tight loop of opening a file of many chunks: one test and one append a record.
            while pos < end:
                if end - pos < RECORD_HEAD:
                    raise BagFormatError(f"a record head needs {RECORD_HEAD} bytes, {end - pos} are left",
                                         path=self.path, offset=footer.summary_start + pos, record="record")
                length = unpack(raw, pos + 1)[0]
                if length > end - pos - RECORD_HEAD:
                    raise BagFormatError(f"its length {length} runs past the end of its section ({summary_end})",
                                         path=self.path, offset=footer.summary_start + pos,
                                         record=record_name(raw[pos]))
                (chunk_index_at if raw[pos] == chunk_index else others).append(pos)
                pos += RECORD_HEAD + length
            for pos in others:
                opcode, at = raw[pos], pos + RECORD_HEAD
                parse = parsers.get(opcode)  # type: ignore[call-overload]
                if parse is not None:
                    length = unpack(raw, pos + 1)[0]
                    self._add(summary, opcode, parse(Body(raw[at:at + length], path=self.path,
                                                          offset=footer.summary_start + pos,
                                                          record=record_name(opcode))))
            at_ = np.array(chunk_index_at, dtype=np.int64)
            summary.chunk_indexes = parse_chunk_indexes(section, at_ + RECORD_HEAD,
                                                        le_uint(section, at_ + 1, 8).astype(np.int64),
                                                        footer.summary_start + at_, path=self.path)
        except BagFormatError as exc:
            # (a u64 past 2**63 is valid MCAP, past what fastbag's int64 tables hold: not damage)
            said = "holds values fastbag cannot read" if "beyond 2**63" in str(exc) else "is damaged"
            raise _Damaged(f"its summary {said}: {exc}") from None
        indexes = summary.chunk_indexes
        if summary.statistics is not None and not len(indexes) and (
                summary.statistics.message_count or self._holds_messages(footer.summary_start)):
            raise _Damaged("its summary has no chunk indexes (messages outside chunks, or indexes not written)")
        if summary.statistics is None and not len(indexes):
            raise _Damaged("its summary has neither statistics nor chunk indexes")
        if not set(np.unique(indexes.entry_channel).tolist()) <= set(summary.channels):
            raise _Damaged("its summary does not repeat every channel (they are defined in the data section)")
        if not {c.schema_id for c in summary.channels.values()} - {0} <= set(summary.schemas):
            raise _Damaged("its summary does not repeat every schema (they are defined in the data section)")
        # (every offset, length and size parsed is below 2**63, so each side here stays in int64; a sum of
        # two of them could wrap)
        fits = (self._data_start <= indexes.chunk_offset) & \
            (indexes.chunk_offset <= footer.summary_start - indexes.chunk_length) & \
            (indexes.compressed_size <= indexes.chunk_length - self._chunk_heads(indexes) - 8)
        if not fits.all():
            k = int(np.argmax(~fits))
            raise _Damaged(f"a chunk index points at bytes no chunk can hold (chunk offset {indexes.chunk_offset[k]})")
        # (read even where the statistics count no message: a wrong count would hide the chunk's messages)
        unlisted = np.flatnonzero(np.diff(indexes.entry_start) == 0)
        if unlisted.size and not self._hold_no_messages(indexes, unlisted):
            raise _Damaged("its chunks carry no message indexes")
        loose = self._loose_message(indexes, footer.summary_start)
        if loose is not None:
            raise _Damaged(f"it holds messages outside its chunks, which no index lists (the first at offset {loose})")
        return summary

    def _hold_no_messages(self, indexes: ChunkIndexes, chunks: np.ndarray) -> bool:
        """Whether ``chunks``, which no message index lists, hold no Message record: valid MCAP, as when a
        writer closed a chunk on a channel added after the last message (rosbags' rosbag2 writer does). Their
        records are read to tell that from indexes that were lost, where they are few and small (such a
        chunk holds a schema or a channel or two); else, or where any is damaged (its CRC-32 too, which no
        later read checks: nothing reads such a chunk again), they are judged lost."""
        if int(indexes.uncompressed_size[chunks].sum()) > UNLISTED_CHUNK_BYTES:
            return False
        table = self._chunk_table(indexes.take(chunks))
        for k in range(len(chunks)):
            try:
                payload = decompress(self.source, table[k])
                crc = int.from_bytes(self.source.bytes(int(indexes.chunk_offset[chunks[k]]) + CHUNK_FIXED - 4, 4,
                                                       "chunk"), "little")  # (the Chunk's uncompressed_crc)
            except FastbagError:
                return False
            if crc and crc32(payload) != crc:
                return False
            message, end = _walk(payload, records=payload.size // RECORD_HEAD + 1)  # (every record)
            if message is not None or end != payload.size:  # (a message, or a record past the chunk's end)
                return False
        return True

    def _loose_message(self, indexes: ChunkIndexes, end: int) -> int | None:
        """The offset of a Message record outside every chunk (the spec allows them beside indexed chunks;
        no index lists them), or None. Walks only the records between one chunk's message indexes and the
        next chunk: none in files that writers lay out chunk after chunk, a few schemas, channels,
        attachments or metadata in others."""
        order = np.argsort(indexes.chunk_offset, kind="stable")
        starts = np.append(indexes.chunk_offset[order], end)
        stops = (indexes.chunk_offset + indexes.chunk_length + indexes.message_index_length)[order]
        # Where the walk stands before each chunk: past every chunk before it and its message indexes. Only
        # the gaps are walked (a loop over every chunk cost a file of 850 chunks 0.27 ms of its 1 ms open).
        before = np.maximum.accumulate(np.concatenate(([self._data_start], stops)))
        for k in np.flatnonzero(before < starts).tolist():
            try:
                found = self._first_record(int(before[k]), int(starts[k]), (Opcode.MESSAGE,))
            except BagFormatError:
                found = None  # (records not laid out as the indexes say: not this walk's to judge)
            if found is not None:
                return found[1] if found[0] == Opcode.MESSAGE else None
        return None

    @staticmethod
    def _add(summary: _Summary, opcode: int, item: object) -> None:
        if opcode == Opcode.SCHEMA:
            summary.schemas.setdefault(item.id, item)  # type: ignore[attr-defined]
        elif opcode == Opcode.CHANNEL:
            summary.channels.setdefault(item.id, item)  # type: ignore[attr-defined]
        elif opcode == Opcode.STATISTICS:
            summary.statistics = item  # type: ignore[assignment]
        elif opcode == Opcode.ATTACHMENT_INDEX:
            summary.attachment_indexes.append(item)  # type: ignore[arg-type]
        elif opcode == Opcode.METADATA_INDEX:
            summary.metadata_indexes.append(item)  # type: ignore[arg-type]

    def _build_connections(self, schemas: dict[int, Schema], channels: dict[int, Channel]) -> None:
        """One connection per channel, in channel id order; a message's ``conn`` is a position here."""
        connections = []
        for channel in sorted(channels.values(), key=lambda c: c.id):
            schema = schemas.get(channel.schema_id)
            if schema is None and channel.schema_id:
                self._problems.append(f"channel {channel.id} ({channel.topic}) names schema {channel.schema_id}, "
                                      "which the file does not hold: its messages read raw only")
            name = schema.name if schema else ""
            try:
                definition = schema.data.decode("utf-8") if schema else ""
            except UnicodeDecodeError:  # a binary schema (protobuf, flatbuffers): its bytes are schema_data
                definition = ""
            # ROS1 messages carry the md5sum of their type in the channel's metadata (rosbag2's and the mcap
            # CLI's converters write it); other encodings have none ("*", as in rosbag2's sqlite3 storage: the
            # Bag then tells a topic's schemas apart by their type and definition).
            md5sum = channel.metadata.get("md5sum", NO_MD5) if channel.message_encoding == "ros1" else NO_MD5
            # ROS1 channels say "latching"; rosbag2 writes its topics' offered QoS (transient_local: latched).
            qos = channel.metadata.get("offered_qos_profiles", "")
            connections.append(Connection(
                id=channel.id, topic=channel.topic, msgtype=name, md5sum=md5sum, definition=definition,
                callerid=channel.metadata.get("callerid"),
                latching=channel.metadata.get("latching", "0") == "1" or transient_local(qos),
                encoding=channel.message_encoding, schema_encoding=schema.encoding if schema else "",
                schema_data=schema.data if schema else b"", offered_qos_profiles=qos,
                type_description_hash=channel.metadata.get("topic_type_hash", "")))
        self._connections = connections
        self._channels = channels
        self._schemas = schemas

    # -- the per-message index, on first use ------------------------------------------------
    @property
    def index(self) -> BagIndex:  # type: ignore[override]
        if self._index is None:
            self._index = self._load_index()
        return self._index

    def _load_index(self) -> BagIndex:
        """Every message's (time, channel, chunk, offset) from the chunks' message-index records: each
        read where its chunk index lists it, all of them parsed and checked with NumPy gathers."""
        indexes = self._chunk_indexes
        n = len(indexes)
        entry_chunk = self._entry_chunk
        order = np.lexsort((indexes.entry_offset, entry_chunk))  # by chunk, then file order
        time, offset, chunk, conn = self._read_message_indexes(np.arange(n), entry_chunk[order],
                                                               indexes.entry_channel[order],
                                                               indexes.entry_offset[order])
        # Message indexes that lost entries would drop messages without a word. Witnesses of a shortened
        # index: the statistics' count, each chunk index's time bounds, and (in files without statistics)
        # each chunk's own count of Message records (see _verify). Bytes after a message index's entries
        # are no witness: padding after a record's fields is legal. Which side is damaged cannot be told,
        # so what the indexes list is read, and the disagreement said.
        stats = self._summary.statistics
        if stats is not None and stats.message_count != time.size:
            self._warn(f"the chunks' message indexes list {time.size} messages, the statistics record "
                       f"{stats.message_count}: one of them is damaged; reading what the indexes list")
        if stats is None:
            self._listed_per_chunk = self._count_uncompressed_chunks(chunk)
        off_bounds = self._outside_time_bounds(time, chunk)
        if off_bounds is not None:
            self._warn(f"the message indexes of the chunk at offset {off_bounds} span other times than its chunk "
                       "index says: entries may be missing; reading what the indexes list")
        return _in_read_order("0", self._connections, self._chunks, time, conn, chunk, offset,
                              problems=self._problems)

    def topic_index(self, ranks: Sequence[int]) -> BagIndex | None:
        """The messages of the channels at ``ranks``, from their own message-index records alone: in each
        chunk that lists them, their records (and a compressed chunk's head), see _read_message_indexes;
        the other channels' records and the chunks without these channels are not read.

        None once the whole index is built (a scan builds it at open), and for files without statistics,
        where each chunk's count of Message records is checked against all of its entries."""
        stats = self._summary.statistics
        if self._index is not None or stats is None:
            return None
        ids = [self._connections[r].id for r in ranks]
        time, offset, chunk, conn = self._entries(np.isin(self._chunk_indexes.entry_channel, ids))
        # The witnesses of a shortened index (see _load_index), as far as they speak of these channels: their
        # counts in the statistics (where it has them), and the entries' times inside their chunk's bounds.
        counts = stats.channel_message_counts
        if all(i in counts for i in ids) and sum(counts[i] for i in ids) != time.size:
            self._warn(f"the message indexes of {self._connections[ranks[0]].topic} list {time.size} messages, the "
                       f"statistics record {sum(counts[i] for i in ids)}: one of them is damaged; reading what the "
                       "indexes list")
        off_bounds = self._outside_time_bounds(time, chunk, some=True)
        if off_bounds is not None:
            self._warn(f"the message indexes of the chunk at offset {off_bounds} span other times than its chunk "
                       "index says: entries may be missing; reading what the indexes list")
        return _in_read_order("0", self._connections, self._chunks, time, conn, chunk, offset,
                              problems=self._problems)

    def window_index(self, start: int | None, end: int | None) -> BagIndex | None:
        """Every message of the chunks whose chunk index's times meet ``[start, end)``, from their message
        indexes alone (each chunk's, as for the whole index); the other chunks' are not read. Its
        connections carry the statistics' counts (the whole index's, where the file is intact). It trusts
        the chunk indexes' times, as every MCAP reader does: a chunk whose index lies about them outside the
        window (damage a summary CRC catches at open) is not read. A message index that lost entries is
        said as each of the window's chunks is counted (see _witness_window_chunks).

        None (the whole index is read instead) once it is built; for files without trusted statistics
        that count every channel; where the window's chunks and those of earlier windows pass WINDOW_SHARE
        of the file's (a loop of windows over the file then reads each message index at most twice, not
        once a window); and where the entries read do not span exactly their chunks' times (damage the
        whole index reads and says)."""
        stats = self._summary.statistics
        if self._index is not None or stats is None or not self._statistics_trusted:
            return None
        connections = self._counted_by_statistics
        if connections is None:
            return None
        indexes = self._chunk_indexes
        near = np.diff(indexes.entry_start) > 0  # (chunks without entries hold nothing the index lists)
        if start is not None:
            near &= indexes.end_time >= start
        if end is not None:
            near &= indexes.start_time < end
        reached = self._window_chunks + int(near.sum())
        if reached > WINDOW_SHARE * len(indexes):
            return None
        self._window_chunks = reached
        time, offset, chunk, conn = self._entries(near[self._entry_chunk])
        if self._outside_time_bounds(time, chunk) is not None:
            return None
        self._witness_window_chunks(np.flatnonzero(near), np.bincount(chunk, minlength=len(indexes)))
        return _in_read_order("0", connections, self._chunks, time, conn, chunk, offset, problems=self._problems)

    def _witness_window_chunks(self, chunks: np.ndarray, listed: np.ndarray) -> None:
        """The witness of a shortened message index for a window's chunks (the whole index has the statistics'
        total, which a window cannot use): each chunk's count of Message records against its entries, now for
        those read in place, when decompressed for the others (see _verify); said as the whole index says
        what it finds."""
        for k in chunks.tolist():
            if k in self._counted:
                continue
            if self._chunks[k].in_place:
                self._count_in_place(k, int(listed[k]))
            else:
                self._window_listed[k] = int(listed[k])

    @functools.cached_property
    def _counted_by_statistics(self) -> list[Connection] | None:
        """The connections, each with its ``msgcount`` from the statistics (a channel they do not list has
        none: writers list the channels that have); None where the counts of the connections do not add up
        to the statistics' message count (none kept: an empty map)."""
        stats = self._summary.statistics
        assert stats is not None
        counts = [stats.channel_message_counts.get(c.id, 0) for c in self._connections]
        if sum(counts) != stats.message_count:
            return None
        return [dataclasses.replace(c, msgcount=n) for c, n in zip(self._connections, counts)]

    @functools.cached_property
    def _entry_chunk(self) -> np.ndarray:
        """Each chunk-index entry's chunk (what the whole index, a topic's and a window's read from)."""
        indexes = self._chunk_indexes
        return np.repeat(np.arange(len(indexes)), np.diff(indexes.entry_start))

    def _entries(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(log_time, offset in chunk, chunk, connection rank) of the chunk indexes' message-index entries
        where ``wanted`` (a mask over them), read as _read_message_indexes reads them."""
        indexes = self._chunk_indexes
        picked = np.flatnonzero(wanted)
        entry_chunk = self._entry_chunk[picked]
        order = np.lexsort((indexes.entry_offset[picked], entry_chunk))  # by chunk, then file order
        k = entry_chunk[order]
        chunks = k[np.r_[True, k[1:] != k[:-1]]] if k.size else k
        return self._read_message_indexes(chunks, k, indexes.entry_channel[picked][order],
                                          indexes.entry_offset[picked][order])

    def _read_message_indexes(self, chunks: np.ndarray, k: np.ndarray, listed: np.ndarray, where: np.ndarray
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(log_time, offset in chunk, chunk, connection rank) of every entry of the message-index records
        at file offsets ``where`` (of channels ``listed``, in chunks ``k``, grouped by chunk and in file order
        within one: the chunk indexes' entries), with the heads of ``chunks`` (ascending: those of ``k``).

        Per chunk one read takes its records, from the first of them to the end of its message indexes;
        and for a chunk that is decompressed (not read in place), one more its head, checked against its
        chunk index, and its CRC kept. (A chunk read in place needs nothing of its head: each message
        record is checked against the index where it is read.)"""
        indexes = self._chunk_indexes
        # The message indexes of a chunk lie together after it.
        region_start, region_length = self._message_index_regions()
        region_end = region_start + region_length
        first = np.minimum(np.searchsorted(k, chunks), max(k.size - 1, 0))  # each chunk's first record read
        # (a chunk no entry lists, one that holds no messages, reads no record: its span is empty)
        span_start = np.where(k[first] == chunks, where[first], region_end[chunks]) if k.size else region_end[chunks]
        span_length = region_end[chunks] - span_start
        headed = chunks[~self._chunks.uncompressed[chunks]]
        heads = self._chunk_heads(indexes)[headed]
        span_at = np.zeros(chunks.size, dtype=np.int64)
        np.cumsum(span_length[:-1], out=span_at[1:])
        span_at += int(heads.sum())
        raw = self._gather(np.concatenate((indexes.chunk_offset[headed], span_start)),
                           np.concatenate((heads, span_length)))
        self._check_chunk_heads(raw, headed)
        span = np.searchsorted(chunks, k)  # each record's chunk among ``chunks``
        at = span_at[span] + (where - span_start[span])
        return self._message_index_entries(raw, at, where, region_end[k] - where, k, listed)

    def _gather(self, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Bytes the chunk indexes point at, one read per span (BagFormatError where one cannot be read)."""
        try:
            return self.source.gather(offsets, lengths)
        except ValueError as exc:
            raise BagFormatError(f"a chunk or its message indexes cannot be read: {exc}", path=self.path,
                                 offset=None, record="chunk index") from None

    def _message_index_regions(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) in the file of each chunk's message-index records (length 0: it has none),
        checked to lie in the file, after their chunk."""
        indexes = self._chunk_indexes
        has = np.diff(indexes.entry_start) > 0
        chunk_end = indexes.chunk_offset + indexes.chunk_length
        region_start = chunk_end.copy()
        if has.any():
            region_start[has] = np.minimum.reduceat(indexes.entry_offset, indexes.entry_start[:-1][has])
        region_length = np.where(has, indexes.message_index_length, 0)
        bad = (region_start < chunk_end) | (region_start > self.source.size - region_length)
        if bad.any():
            k = int(np.argmax(bad))
            raise BagFormatError("a chunk's message indexes lie outside the file or overlap their chunk",
                                 path=self.path, offset=int(indexes.chunk_offset[k]), record="chunk index")
        return region_start, region_length

    def _message_index_entries(self, raw: np.ndarray, at: np.ndarray, where: np.ndarray, room: np.ndarray,
                               k: np.ndarray, listed: np.ndarray
                               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(log_time, offset in chunk, chunk, connection rank) of every entry of the message-index records
        at ``raw[at]`` (file offsets ``where``, chunks ``k``, each listed for channel ``listed``, with
        ``room`` bytes to the end of their chunk's message indexes), in the records' order."""
        short = room < RECORD_HEAD + 6
        if short.any():
            j = int(np.argmax(short))
            raise BagFormatError("a message index record is cut short", path=self.path, offset=int(where[j]),
                                 record="message index")
        opcode = raw[at]
        length = le_uint(raw, at + 1, 8)
        channel = le_uint(raw, at + 9, 2).astype(np.int64)
        nbytes = le_uint(raw, at + 11, 4).astype(np.int64)
        ranks = np.full(1 << 16, -1, dtype=np.int32)
        ranks[[c.id for c in self._connections]] = np.arange(len(self._connections), dtype=np.int32)

        def check(bad: np.ndarray, text: Callable[[int], str], record: Callable[[int], str] | None = None) -> None:
            if bad.any():
                j = int(np.argmax(bad))
                raise BagFormatError(text(j), path=self.path, offset=int(where[j]),
                                     record=record(j) if record else "message index")

        check(opcode != Opcode.MESSAGE_INDEX,
              lambda j: "a record other than a message index lies among the chunk's message indexes",
              lambda j: record_name(int(opcode[j])))
        check(length > (room - RECORD_HEAD).astype(np.uint64),
              lambda j: f"its length {int(length[j])} runs past the chunk's message indexes")
        length = length.astype(np.int64)
        check(length < 6, lambda j: f"its length {length[j]} is shorter than a message index's fixed fields")
        check((nbytes > length - 6) | (nbytes % 16 != 0), lambda j: f"its entries claim {nbytes[j]} bytes")
        check(ranks[channel] < 0, lambda j: f"it indexes channel {channel[j]}, which the summary does not list")
        check(channel != listed, lambda j: f"it indexes channel {channel[j]}, which its chunk index lists at "
                                           f"another offset")
        per_record = nbytes // 16
        entries = rows(raw, item_positions(at + RECORD_HEAD + 6, per_record, 16), 16).view("<u8")
        first = np.zeros(at.size + 1, dtype=np.int64)  # each record's first entry
        np.cumsum(per_record, out=first[1:])
        filled = per_record > 0
        offsets = entries[:, 1]
        if entries.size and entries.max() >= np.uint64(1 << 63):
            j = int(np.searchsorted(first, np.argmax((entries >= np.uint64(1 << 63)).any(axis=1)), side="right")) - 1
            raise BagFormatError("an entry's log_time or offset is beyond 2**63 (int64: times past the year 2262)",
                                 path=self.path, offset=int(where[j]), record="message index")
        if filled.any():
            # (offsets are below 2**63 now: they are never negative) Each must leave room for a message head.
            furthest = np.zeros(at.size, dtype=np.uint64)
            furthest[filled] = np.maximum.reduceat(offsets, first[:-1][filled])
            room = self._chunks.size[k] - MESSAGE_HEAD
            bad = filled & ((room < 0) | (furthest > np.maximum(room, 0).astype(np.uint64)))
            if bad.any():
                j = int(np.argmax(bad))
                raise BagFormatError(f"a message index entry points at offset {int(furthest[j])} of a chunk holding "
                                     f"{int(self._chunks.size[k[j]])} bytes", path=self.path,
                                     offset=int(self._chunks.position[k[j]]), record="message index")
        falling = offsets[1:] <= offsets[:-1]
        starts = first[1:-1]
        falling[starts[(starts > 0) & (starts < offsets.size)] - 1] = False  # (the next record starts over)
        if falling.any():
            # Two entries of one message: it would be read twice (another one of its channel and log_time,
            # never), and the record checks cannot tell. Records out of order are checked one by one.
            for j in np.unique(np.searchsorted(first, np.flatnonzero(falling), side="right") - 1).tolist():
                mine = offsets[first[j]:first[j + 1]]
                if np.unique(mine).size != mine.size:
                    raise BagFormatError(f"it lists a message of channel {int(channel[j])} twice", path=self.path,
                                         offset=int(where[j]), record="message index")
        signed = entries.view("<i8")
        return (signed[:, 0].copy(), signed[:, 1].copy(), np.repeat(k.astype(np.int32), per_record),
                np.repeat(ranks[channel], per_record))

    def _check_chunk_heads(self, raw: np.ndarray, chunks: np.ndarray) -> None:
        """The heads of chunk records ``chunks`` (side by side at the start of ``raw``) agree with their chunk
        indexes; keeps their uncompressed CRC-32s (0: none) for :meth:`_verify`."""
        indexes = self._chunk_indexes
        heads = self._chunk_heads(indexes)[chunks]
        head_at = np.zeros(chunks.size, dtype=np.int64)
        np.cumsum(heads[:-1], out=head_at[1:])
        opcode = raw[head_at] if head_at.size else np.zeros(0, dtype=np.uint8)
        length = le_uint(raw, head_at + 1, 8)
        size = le_uint(raw, head_at + RECORD_HEAD + 16, 8)
        crc = le_uint(raw, head_at + RECORD_HEAD + 24, 4).astype(np.int64)
        name_length = le_uint(raw, head_at + RECORD_HEAD + 28, 4).astype(np.int64)
        bad = (opcode != Opcode.CHUNK) | \
            (length != (indexes.chunk_length[chunks] - RECORD_HEAD).astype(np.uint64)) | \
            (size != indexes.uncompressed_size[chunks].astype(np.uint64)) | (name_length != heads - CHUNK_FIXED - 4)
        if not bad.any():  # (the lengths agree now) each name's bytes, one gather per compression named
            named = np.asarray(indexes.compression, dtype=object)[chunks]
            for name in set(named.tolist()) - {""}:
                which = np.flatnonzero(named == name)
                bad[which] = (rows(raw, head_at[which] + CHUNK_FIXED + 4, len(name.encode()))
                              != np.frombuffer(name.encode(), dtype=np.uint8)).any(axis=1)
        if bad.any():
            k = int(np.argmax(bad))
            raise BagFormatError("the chunk record disagrees with its chunk index (opcode, length, size or "
                                 "compression)", path=self.path, offset=int(indexes.chunk_offset[chunks[k]]),
                                 record="chunk")
        self._chunk_crc[chunks] = crc

    def _warn(self, text: str) -> None:
        if text in self._problems:  # (a topic's index found it before the whole index)
            return
        self._problems.append(text)
        warnings.warn(f"{self.path}: {text}", FastbagWarning, stacklevel=5)

    def _count_uncompressed_chunks(self, chunk: np.ndarray) -> np.ndarray:
        """Entries per chunk; chunks stored uncompressed (read in place, never through _verify) have their
        Message records counted now. Only for files without statistics, which have no other count."""
        listed = np.bincount(chunk, minlength=len(self._chunk_indexes))
        for k, c in enumerate(self._chunks):
            if c.in_place:
                self._count_in_place(k, int(listed[k]))
        return listed

    def _count_in_place(self, k: int, listed: int) -> None:
        """Chunk ``k`` (read in place, never through _verify): its Message records counted against the
        ``listed`` entries of its message indexes, once."""
        from .kernels import count_messages

        self._counted.add(k)
        try:
            payload = decompress(self.source, self._chunks[k])
        except FastbagError:  # a damaged chunk: reading it says what is wrong, the others stay readable
            return
        self._count_against_index(k, count_messages(payload), listed)

    def _outside_time_bounds(self, time: np.ndarray, chunk: np.ndarray, *, some: bool = False) -> int | None:
        """The offset of the first chunk whose entries' first and last log_time differ from its chunk
        index's message_start_time and message_end_time (chunks without entries are not judged); with
        ``some`` (some channels' entries), that lie outside them."""
        if not time.size:
            return None
        # Entries come grouped by chunk, in chunk order: one reduceat per bound.
        starts = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1]])
        which = chunk[starts]
        indexes = self._chunk_indexes
        first, last = np.minimum.reduceat(time, starts), np.maximum.reduceat(time, starts)
        bad = (first < indexes.start_time[which]) | (last > indexes.end_time[which]) if some else \
            (first != indexes.start_time[which]) | (last != indexes.end_time[which])
        return int(indexes.chunk_offset[which[np.argmax(bad)]]) if bad.any() else None

    # -- recovery by scanning -------------------------------------------------------------------
    def _scan(self, reason: str) -> None:
        """Every complete record, in file order: for files without a usable summary or with messages
        outside chunks. Damage ends the scan; what came before stays readable."""
        from .scan import scan

        found = scan(self.source, self._data_start)
        self._recovered = True
        self._summary = _Summary(schemas=found.schemas, channels=found.channels,
                                 attachment_indexes=found.attachment_indexes,
                                 metadata_indexes=found.metadata_indexes)
        self._build_connections(found.schemas, found.channels)
        self._chunk_indexes = ChunkIndexes.empty()
        self._chunks = ChunkTable.of(found.chunks)
        self._file_chunk = found.file_chunk
        self._chunk_crc = np.array(found.chunk_crcs, dtype=np.int64)
        channel, time, chunk, offset = found.messages()
        rank = np.full(1 << 16, -1, dtype=np.int32)  # channel id (u16) -> connection
        rank[[c.id for c in self._connections]] = np.arange(len(self._connections), dtype=np.int32)
        conn = rank[channel]
        known = conn >= 0
        if not known.all():
            self._problems.append(f"{int((~known).sum())} messages name channels the file never defines: "
                                  "they are left out")
        what = f"{found.message_count} messages recovered" + (f"; {found.damage}" if found.damage else "")
        self._problems.insert(0, f"read by scanning, since {reason} ({what})")
        self._index = _in_read_order("0", self._connections, self._chunks, time[known], conn[known],
                                     chunk[known].astype(np.int32), offset[known], problems=self._problems,
                                     recovered=True)

    # -- what the Bag asks ----------------------------------------------------------------------
    @property
    def chunks(self) -> ChunkTable:
        return self._chunks

    def counted_chunks(self) -> np.ndarray | None:
        """Not the whole file, which a scan takes as one chunk for the messages outside chunks: an unchunked
        file has no chunk (``fastbag info`` said ``[1/1 chunks]``, its statistics 0)."""
        if self._file_chunk < 0:
            return None
        counted = np.ones(len(self._chunks), dtype=bool)
        counted[self._file_chunk] = False
        return counted

    @property
    def recovered(self) -> bool:
        return self._recovered

    @property
    def version(self) -> str:
        return "0"

    @property
    def message_count(self) -> int:
        stats = self._summary.statistics
        return stats.message_count if self._index is None and stats is not None else self.index.message_count

    @property
    def time_range(self) -> tuple[int | None, int | None]:
        stats = self._summary.statistics
        if self._index is None and stats is not None and self._statistics_trusted:
            return (stats.message_start_time, stats.message_end_time) if stats.message_count else (None, None)
        return super().time_range  # from the messages' index (read now, if not yet)

    @functools.cached_property
    def _statistics_trusted(self) -> bool:
        """:meth:`_statistics_times_agree` of the summary's statistics, judged once (time_range is asked on
        every read with int bounds)."""
        return self._statistics_times_agree(self._summary.statistics)

    def _statistics_times_agree(self, stats: Statistics) -> bool:
        """Whether the statistics' first and last log_time are the chunk indexes' (over the chunks that index
        messages). A writer that got them wrong (rosbag2's rewriter tests hold one) would make a bag's
        start time change once its index is read."""
        indexes = self._chunk_indexes
        held = np.diff(indexes.entry_start) > 0
        if not held.any():
            return True  # nothing to judge them by
        return bool(stats.message_count) and stats.message_start_time == int(indexes.start_time[held].min()) \
            and stats.message_end_time == int(indexes.end_time[held].max())

    @property
    def statistics(self) -> Statistics | None:
        """The summary's statistics record (None where the file has none)."""
        return self._summary.statistics

    @property
    def attachments(self) -> list[Attachment]:
        """Every attachment (read from the file when asked for), CRC-checked."""
        return [self._read_record_at(a.offset, a.length, Opcode.ATTACHMENT, parse_attachment)
                for a in self._indexed("attachment_indexes", "attachment_count")]

    @property
    def metadata(self) -> list[Metadata]:
        """Every metadata record (name and string map), read when asked for."""
        return [self._read_record_at(m.offset, m.length, Opcode.METADATA, parse_metadata)
                for m in self._indexed("metadata_indexes", "metadata_count")]

    @property
    def metadata_indexes(self) -> list[Any]:
        """The summary's metadata indexes (offset, length, name): what records there are, none read."""
        return list(self._summary.metadata_indexes)

    def metadata_named(self, name: str) -> list[Metadata]:
        """The metadata records the summary indexes under ``name``, read now (the data section is not
        scanned for unindexed ones: cheap enough to ask at open)."""
        return [self._read_record_at(m.offset, m.length, Opcode.METADATA, parse_metadata)
                for m in self._summary.metadata_indexes if m.name == name]

    def messages_look_zstd(self) -> bool:
        """Whether the file's first CDR message starts with zstd's frame magic, as each message does where
        rosbag2 compressed them one by one (``compression_mode: message``; no CDR message can: its
        representation ids are small). Asked of a file that does not say how it is compressed (no rosbag2
        record, no metadata.yaml), and answered from the bytes where that is cheap: a file recovered by
        scanning (a crashed recorder's: its record, written last, is lost; the scan's index says where its
        first CDR message is, in a chunk or not), or else the first message of an uncompressed first chunk
        (a view). A compressed chunk's head is a whole zstd block to decode (~0.1 ms, a sixth of opening a
        sound file): a sound file that lacks the record says False here, and its messages' zstd frames are
        named as such when read."""
        if self._looks_zstd is None:
            self._looks_zstd = self._first_cdr_message_is_zstd()
        return self._looks_zstd

    def _first_cdr_message_is_zstd(self) -> bool:
        cdr = [k for k, c in enumerate(self.connections) if c.encoding == "cdr"]
        chunks = self.chunks
        if not cdr or len(chunks) == 0:
            return False
        if self._index is not None:  # (built by the scan)
            rows = np.flatnonzero(np.isin(self._index.conn, cdr))
            if not rows.size:
                return False
            chunk, at = chunks[int(self._index.chunk[rows[0]])], int(self._index.offset[rows[0]])
            reach: Callable[[np.ndarray], int] = lambda prefix: at + MESSAGE_HEAD + len(ZSTD_MAGIC)  # noqa: E731
        else:
            chunk = chunks[int(np.argmin(chunks.position))]
            if chunk.compression != "none":
                return False
            reach = _first_message_reach
        try:
            payload = decompress(self.source, chunk, reach=reach, checksums=False)
        except FastbagError:
            return False  # (a damaged chunk: its reads will say so)
        if self._index is None:
            found = _walk(payload)[0]
            if found is None:
                return False
            at = found
        if payload.size < at + MESSAGE_HEAD + len(ZSTD_MAGIC) or payload[at] != Opcode.MESSAGE or \
                int(payload[at + 1:at + RECORD_HEAD].view("<u8")[0]) < MESSAGE_FIXED + len(ZSTD_MAGIC):
            return False
        channel = int(payload[at + RECORD_HEAD:at + RECORD_HEAD + 2].view("<u2")[0])
        return any(self.connections[k].id == channel for k in cdr) and \
            payload[at + MESSAGE_HEAD:at + MESSAGE_HEAD + len(ZSTD_MAGIC)].tobytes() == ZSTD_MAGIC

    def _indexed(self, name: str, count: str) -> list:  # type: ignore[type-arg]
        """The summary's attachment or metadata indexes; where its statistics count more records than it
        indexes (a writer that wrote no such indexes), the data section is scanned for them once."""
        indexes = getattr(self._summary, name)
        stats = self._summary.statistics
        if stats is not None and getattr(stats, count) > len(indexes) and not self._recovered:
            from .scan import scan

            found = scan(self.source, self._data_start, messages=False)
            self._summary.attachment_indexes = found.attachment_indexes
            self._summary.metadata_indexes = found.metadata_indexes
            indexes = getattr(self._summary, name)
        return indexes

    def _read_record_at(self, offset: int, length: int, opcode: Opcode, parse):  # type: ignore[no-untyped-def]
        got, at, body_length = self._record_at(offset, self.source.size)
        if got != opcode or RECORD_HEAD + body_length != length:
            raise BagFormatError(f"its index points at a {record_name(got)} record of {RECORD_HEAD + body_length} "
                                 f"bytes, not a {record_name(opcode)} of {length}", path=self.path, offset=offset,
                                 record=record_name(opcode))
        return parse(Body(self.source.bytes(at, body_length, record_name(opcode)), path=self.path, offset=offset,
                          record=record_name(opcode)))

    def chunk_store(self, *, cache_bytes: int = DEFAULT_CACHE_BYTES, workers: int | None = None,
                    checksums: bool = True) -> ChunkStore:
        """The shared store, checking each decompressed chunk's CRC-32 where the writer computed one."""
        return ChunkStore(self.source, self._chunks, cache_bytes=cache_bytes, workers=workers, verify=self._verify,
                          checksums=checksums, checksummed=self._checksummed)

    def _checksummed(self, k: int) -> bool:
        """Whether a CRC-32 covers chunk ``k``'s records (or its head is unread: it may)."""
        return k >= self._chunk_crc.size or int(self._chunk_crc[k]) != 0

    def record_end(self, payload: np.ndarray, at: int) -> int:
        return record_end(payload, at)

    def _verify(self, k: int, payload: np.ndarray) -> None:
        """A decompressed chunk's CRC-32, and in files without statistics (once per chunk) its count of
        Message records against its message indexes' entries. Both cover the whole chunk: the head of
        one that a read decoded only in part (see Container.record_end) waits for a read of all of it."""
        whole = payload.size >= int(self._chunks.size[k])
        if whole and self._summary.statistics is None:
            self.index  # noqa: B018 - without statistics, the counts per chunk come with the whole index
        if k < self._chunk_crc.size and self._chunk_crc[k] < 0:  # (its head unread: read in place till now)
            chunk = np.array([k])
            self._check_chunk_heads(self._gather(self._chunk_indexes.chunk_offset[chunk],
                                                 self._chunk_heads(self._chunk_indexes)[chunk]), chunk)
        if not whole:
            return
        expected = int(self._chunk_crc[k]) if k < self._chunk_crc.size else 0
        if expected and crc32(payload) != expected:
            raise BagFormatError("the chunk's decompressed records fail their CRC-32 check", path=self.path,
                                 offset=int(self._chunks.position[k]), record="chunk")
        listed = self._listed_per_chunk
        count = int(listed[k]) if listed is not None and k < listed.size else self._window_listed.get(k)
        if count is not None and k not in self._counted:
            from .kernels import count_messages

            self._counted.add(k)
            self._count_against_index(k, count_messages(payload), count)

    def _count_against_index(self, k: int, held: int, listed: int) -> None:
        if held > listed:
            self._warn(f"the chunk at offset {int(self._chunk_indexes.chunk_offset[k])} holds {held} messages, its "
                       f"message indexes list {listed}: reading the listed ones")

    def _window_kernel(self) -> Any:
        from .kernels import window_spans

        return window_spans

    def file_spans(self, index: BagIndex, selected: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   verified: np.ndarray) -> int:
        """One Numba pass from the index arrays over messages of uncompressed chunks."""
        from .kernels import file_spans

        table = self._chunks
        return file_spans(self.source.array, selected, index.chunk, index.offset, index.time, index.conn,
                          index.connection_ids, table.data_offset, table.size, table.data_len, starts, lengths,
                          verified)

    has_message_headers = True

    def message_headers(self, buf: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A Message record's sequence (u32) and publish_time (u64) lie 20 and 8 bytes before its data."""
        return message_headers(buf, starts)

    def payload_spans(self, buf: np.ndarray, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, chunk: np.ndarray,
                      conn: np.ndarray, time: np.ndarray, *, kernel: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Message records located and checked: opcode, length, channel and log_time. With ``kernel`` a Numba
        loop does it (microseconds for a chunk's records, where each NumPy call costs ~10 us); NumPy gathers
        otherwise, and to explain a record the kernel rejects."""
        at = np.asarray(at, dtype=np.int64)
        lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
        if kernel:
            from .kernels import locate_messages

            starts, lengths = np.empty(at.size, dtype=np.int64), np.empty(at.size, dtype=np.int64)
            if locate_messages(buf, at, lo, hi, np.asarray(conn, dtype=np.int64), np.asarray(time, dtype=np.int64),
                               starts, lengths) < 0:
                return starts, lengths
        inside = (at >= lo) & (at <= hi - MESSAGE_HEAD) & (at <= buf.size - MESSAGE_HEAD)
        heads = rows(buf, np.where(inside, at, 0), MESSAGE_HEAD) if at.size and \
            buf.size >= MESSAGE_HEAD else np.zeros((at.size, MESSAGE_HEAD), dtype=np.uint8)
        length = np.ascontiguousarray(heads[:, 1:9]).view("<u8").ravel()
        channel = np.ascontiguousarray(heads[:, 9:11]).view("<u2").ravel()
        log_time = np.ascontiguousarray(heads[:, 15:23]).view("<u8").ravel()
        room = (hi - at - RECORD_HEAD).astype(np.uint64)
        ok = inside & (heads[:, 0] == Opcode.MESSAGE) & (length >= MESSAGE_FIXED) & (length <= room) & \
            (channel == np.asarray(conn)) & (log_time == np.asarray(time).astype(np.uint64))
        if not ok.all():
            k = int(np.argmax(~ok))
            fits = MESSAGE_FIXED <= length[k] <= room[k]
            what = "lies outside its chunk" if not inside[k] else \
                f"is a {record_name(int(heads[k, 0]))} record" if heads[k, 0] != Opcode.MESSAGE else \
                f"has length {int(length[k])}, which does not fit its chunk" if not fits \
                else f"holds channel {int(channel[k])} at log_time {int(log_time[k])}, not channel {int(conn[k])} at " \
                     f"{int(time[k])}"
            where = f"{self.path} (chunk at offset {int(chunk[k])})" if buf is not self.source.array else self.path
            raise BagFormatError(f"the message index points at a record that {what}", path=where,
                                 offset=int(at[k]), record="message")
        return at + MESSAGE_HEAD, (length - MESSAGE_FIXED).astype(np.int64)


def _in_read_order(version: str, connections: list[Connection], chunks: ChunkTable, time: np.ndarray,
                   conn: np.ndarray, chunk: np.ndarray, offset: np.ndarray, *, problems: list[str],
                   recovered: bool = False) -> BagIndex:
    """The index sorted by log_time, ties in file order (chunk position, then offset in the chunk; a
    message outside chunks, in a scan's whole-file chunk whose payload starts at 0, by its own offset)."""
    step = np.diff(time)
    if (step > 0).all():  # one channel recorded in order, the common case: nothing to sort
        return BagIndex(version, connections, chunks, time, conn.astype(np.int32), chunk.astype(np.int32), offset,
                        recovered=recovered, problems=problems)
    position = np.where(chunks.data_offset[chunk] == 0, offset, chunks.position[chunk]) if chunk.size else \
        np.zeros(0, dtype=np.int64)
    order = np.argsort(time, kind="stable")
    if (np.diff(time[order]) == 0).any():
        order = np.lexsort((offset, position, time))
    return BagIndex(version, connections, chunks, time[order], conn[order].astype(np.int32),
                    chunk[order].astype(np.int32), offset[order], recovered=recovered, problems=problems)


#: Bytes of chunks that no message index lists read at open at most, to tell chunks that hold no messages
#: from lost indexes (see McapReader._hold_no_messages).
UNLISTED_CHUNK_BYTES = 256 * 1024

#: Records walked before a chunk's first message at most (writers put schemas and channels, if any, first).
RECORDS_BEFORE_MESSAGE = 64


def _walk(payload: np.ndarray, records: int = RECORDS_BEFORE_MESSAGE) -> tuple[int | None, int]:
    """Where the first Message record of a chunk's records (perhaps only their head) starts (None if none
    among the first ``records``), and where the records walked end."""
    at, size, data = 0, int(payload.size), memoryview(payload)  # (struct on the buffer: 10x NumPy's scalars)
    for _ in range(records):
        if size < at + RECORD_HEAD:
            break
        opcode, length = _RECORD_HEAD.unpack_from(data, at)
        if opcode == Opcode.MESSAGE:
            return at, at
        at += RECORD_HEAD + length
    return None, at


def _first_message_reach(prefix: np.ndarray) -> int:
    """A Reach (see io/prefix.py): the chunk's records up to the first message's first 4 bytes of data (or
    the next record's head while none is seen; nothing more after RECORDS_BEFORE_MESSAGE records)."""
    at, end = _walk(prefix)
    if at is not None:
        return at + MESSAGE_HEAD + len(ZSTD_MAGIC)
    return end + RECORD_HEAD
