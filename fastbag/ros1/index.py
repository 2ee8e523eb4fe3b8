"""The bag's index: connections, chunks, and every message's (time, chunk, offset).

An indexed v2.0 bag is read through its index section only: the bag header
points at the connection and chunk-info records, and the index-data records
right after each chunk give each message's time and offset in the
uncompressed chunk. No message data is touched.

A bag without a usable index (``index_pos`` 0 from a killed recorder, an
index past the end of a truncated file, a damaged index section) is rebuilt by
scanning the chunk records, with one warning saying what was recovered and
what was lost.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..container import BagIndex, Connection, build_index, connection_ranks, in_read_order
from ..errors import BagFormatError, DecryptionError, EncryptionKeyError, FastbagError, UnsupportedError
from ..io.chunks import Chunk, ChunkTable, decompress, decompress_truncated, size_mismatch
from ..io.gather import item_positions, rows
from ..io.startup import by_kernel
from ..io.source import BufferSource, Source
from .encryption import AesCbcDecryptor, EncryptionHeader, read_encrypted_connection, verify_key
from .records import (MAGIC_V11, MAGIC_V12, MAGIC_V20, Header, Op, connection_from_headers, gather_u32, read_record,
                      read_record_header)


@dataclass(frozen=True)
class ChunkInfo:
    """A chunk-info record: where a chunk is, its time span and per-connection counts."""

    position: int
    start_time: int
    end_time: int
    counts: dict[int, int] = field(default_factory=dict)
    pairs: int = 0  # (connection, count) pairs listed: one index-data record follows the chunk per pair


# One index-data entry as stored: time (u32 sec, u32 nsec) and u32 offset into the
# chunk; entries are handled as (count, 3) uint32 arrays.
INDEX_ENTRY_SIZE = 12

#: Until Numba is loaded (see fastbag.io.startup), indexes of at most this many messages (and record headers)
#: are read by NumPy: ``fastbag info`` or ``bag.topics`` of a small bag need no other kernel.
NUMPY_UP_TO = 100_000
#: Likewise the index section's records are found by a Python loop (0.4 us a record) up to this many.
RECORD_LOOP_UP_TO = 2_000


def _index_from_pieces(version: str, connections: list[Connection], chunks: Sequence[Chunk],
                       pieces: list[tuple[int, int, np.ndarray]], recovered: bool) -> BagIndex:
    """The table from ``(connection id, chunk, (n, 3) uint32 entries)`` pieces in file order."""
    if not pieces:
        entries = np.zeros((0, 3), dtype=np.uint32)
        conn_ids = chunk_ids = np.zeros(0, dtype=np.int64)
    else:
        entries = np.concatenate([e for _, _, e in pieces])
        counts = np.array([len(e) for _, _, e in pieces], dtype=np.int64)
        conn_ids = np.repeat(np.array([c for c, _, _ in pieces], dtype=np.int64), counts)
        chunk_ids = np.repeat(np.array([k for _, k, _ in pieces], dtype=np.int64), counts)
    time = entries[:, 0].astype(np.int64) * 1_000_000_000 + entries[:, 1]
    return build_index(version, connections, chunks, conn_ids, chunk_ids, time, entries[:, 2], recovered=recovered)


def read_connection(source: Source, offset: int, record_header: Header, data_offset: int,
                    data_len: int) -> Connection:
    """Parse a connection record (its header gave ``conn`` and ``topic``; its data the rest)."""
    data = Header.parse(source.bytes(data_offset, data_len, "connection"), path=source.path,
                        offset=data_offset, record="connection")
    return connection_from_headers(record_header, data)


def detect_version(source: Source) -> str:
    """The format version from the file's first line, or BagFormatError."""
    if source.size == 0:
        raise BagFormatError("file is empty, not a bag", path=source.path, offset=0, record="magic")
    head = source.bytes(0, min(source.size, 16), "magic")
    if head.startswith(MAGIC_V20):
        return "2.0"
    if head.startswith(MAGIC_V12):
        return "1.2"
    if head.startswith(MAGIC_V11):
        return "1.1"
    if head.startswith(b"#ROSBAG V") or head.startswith(b"#ROSRECORD V"):
        line = head.split(b"\n")[0].decode("ascii", "replace")
        raise UnsupportedError(f"bag format {line!r} is not supported ({source.path}, offset 0)")
    raise BagFormatError(f"not a ROS bag: the file starts with {head[:13]!r}; fastbag reads ROS1 bags "
                         "('#ROSBAG V2.0', '#ROSRECORD V1.2' or V1.1), MCAP files ('\\x89MCAP0') and rosbag2 "
                         "recordings (a directory with metadata.yaml, or its .db3 files)",
                         path=source.path, offset=0, record="magic")


def read_index(source: Source, *, decryptor: AesCbcDecryptor | None = None,
               encryption: EncryptionHeader | None = None) -> BagIndex | DeferredIndex:
    """Read a bag's index (formats 2.0, 1.2, 1.1); rebuild it by scanning when absent or damaged.

    A sound 2.0 index comes back as a :class:`DeferredIndex`: read and checked, its message table built on
    first use.

    An encrypted bag (``encryption``: its header's fields) needs its
    ``decryptor``: the key is checked on the encrypted connection records
    first (EncryptionKeyError when it is not the bag's), and every chunk
    carries the decryptor to the chunk store.
    """
    version = detect_version(source)
    if version != "2.0":
        from . import legacy  # formats 1.2 and 1.1 share everything above the index
        return legacy.read_index_v12(source) if version == "1.2" else legacy.scan_v11(source)
    header = read_record(source, len(MAGIC_V20), expect=Op.BAG_HEADER)
    index_pos = header.header.u64("index_pos")
    if index_pos == 0:
        return scan_index(source, header.end, reason="it is not indexed (index_pos is 0)", decryptor=decryptor,
                          encryption=encryption)
    # (an empty bag's index is empty: index_pos is the end of the file, and no record follows the header)
    if index_pos >= source.size and (header.header.u32("chunk_count") or header.end < source.size):
        return scan_index(source, header.end, decryptor=decryptor, encryption=encryption,
                          reason=f"its index_pos {index_pos} is at or past the end of the file ({source.size} bytes)")
    conn_count = header.header.u32("conn_count")
    if decryptor is not None and encryption is not None:
        try:
            verify_key(source, index_pos, conn_count, decryptor, encryption)  # a wrong key is not a damaged index
        except EncryptionKeyError:
            if not _first_chunk_decrypts(source, header.end, decryptor):
                raise
            # The key decrypts the chunks: the index's connection records are damaged, not the key wrong
            return scan_index(source, header.end, decryptor=decryptor, encryption=encryption,
                              reason="its encrypted connection records do not decrypt, though its chunks do "
                                     "(they are damaged)")
    try:
        return _read_indexed(source, index_pos, conn_count, header.header.u32("chunk_count"), decryptor)
    except FastbagError as exc:
        return scan_index(source, header.end, reason=f"its index is damaged: {exc}", decryptor=decryptor,
                          encryption=encryption)


class _Template:
    """A record header whose bytes repeat from record to record but for some field values.

    Built from one parsed record (``raw``: its header with the leading u32
    length); checks many positions at once and reads the varying fields
    there, vectorized.
    """

    def __init__(self, raw: bytes, varying: tuple[str, ...]) -> None:
        self.raw = np.frombuffer(raw, dtype=np.uint8)
        self.fields: dict[str, tuple[int, int]] = {}
        i = 4
        while i + 4 <= len(raw):
            n = int.from_bytes(raw[i:i + 4], "little")
            name = raw[i + 4:i + 4 + n].split(b"=", 1)[0].decode("ascii", "replace")
            self.fields[name] = (i + 4 + len(name) + 1, n - len(name) - 1)
            i += 4 + n
        self.mask = np.ones(len(raw), dtype=bool)
        for name in varying:
            at, n = self.fields.get(name, (0, 0))
            if n not in (4, 8):  # missing or odd-sized: not the layout this fast path knows
                raise BagFormatError(f"header field {name!r} is not a u32 or u64", record="template")
            self.mask[at:at + n] = False

    def match(self, buf: np.ndarray, at: np.ndarray) -> bool:
        """Whether every header at ``at`` in ``buf`` equals the template outside the varying fields (and is
        followed by a u32 data length)."""
        if by_kernel(at.size * self.raw.size, NUMPY_UP_TO * INDEX_ENTRY_SIZE):  # bytes, as of the entries
            from .kernels import headers_match

            return bool(headers_match(buf, at, self.raw, self.mask))
        if at.size and (at.min() < 0 or at.max() > buf.size - self.raw.size - 4):
            return False
        return bool((rows(buf, at, self.raw.size)[:, self.mask] == self.raw[self.mask]).all())

    def value(self, buf: np.ndarray, at: np.ndarray, name: str) -> np.ndarray:
        """A varying u32 or u64 field of the headers at ``at`` (matched first), as int64."""
        offset, n = self.fields[name]
        return rows(buf, at + offset, n).view("<u4" if n == 4 else "<u8")[:, 0].astype(np.int64)


def _read_indexed_fast(source: Source, index_pos: int, conn_count: int, chunk_count: int,
                       decryptor: AesCbcDecryptor | None = None) -> DeferredIndex | None:
    """The index of a well-formed bag, read with templates checked on every record at once (its message
    table left to build on first use: :class:`DeferredIndex`).

    Walks the index section's record boundaries (two u32 per record), then
    checks chunk-info, chunk and index-data headers against the first of each
    kind in vectorized passes and reads their varying fields in bulk. Returns
    None at the first thing out of the ordinary (damage, mixed compressions,
    an unusual writer): :func:`_read_indexed` then reads record by record and
    says what is wrong.

    The bytes come through :meth:`Source.gather` (pread), not the mapping: the
    chunk headers and index data lie all over the file, and touching them
    through the mapping costs a page fault per place (7 ms against 0.9 ms for
    the 1,700 places of a 1.7 GB bag, on this VM). Each chunk's index data
    is read together with the next chunk's header, one read per chunk.
    """
    try:
        # connections and chunk infos: the contiguous index section at the end, in one read
        tail = source.gather(np.array([index_pos]), np.array([source.size - index_pos]))
        conn_at, pos = _record_starts(tail, 0, conn_count)
        if chunk_count == 0 or pos >= tail.size:
            return None
        connections = []
        for at in conn_at.tolist():
            if decryptor is not None:  # two encrypted sized blocks, framed like a record
                connections.append(read_encrypted_connection(source, index_pos + at, decryptor)[0])
                continue
            record = read_record(source, index_pos + at, expect=Op.CONNECTION)
            connections.append(read_connection(source, record.offset, record.header, record.data_offset,
                                               record.data_len))
        # chunk infos: ver, chunk_pos, start_time, end_time, count; data = count x (conn, messages)
        first = read_record(source, index_pos + pos, expect=Op.CHUNK_INFO)
        if first.header.u32("ver") != 1:
            return None
        infos = _Template(tail[pos:first.data_offset - 4 - index_pos].tobytes(),
                          ("chunk_pos", "start_time", "end_time", "count"))
        info_at, end = _record_starts(tail, pos, chunk_count)
        if not infos.match(tail, info_at) or end != tail.size:
            return None
        chunk_pos, pairs = infos.value(tail, info_at, "chunk_pos"), infos.value(tail, info_at, "count")
        data_at = info_at + infos.raw.size + 4
        if (gather_u32(tail, data_at - 4) != pairs * 8).any():
            return None
        pair_at = item_positions(data_at, pairs, 8)  # out of the tail: IndexError, the careful path
        conn_of = rows(tail, pair_at, 8).view("<u4").astype(np.int64)  # (connection id, messages)
        ids = [c.id for c in connections]
        if len(set(ids)) != len(ids) or not np.isin(conn_of[:, 0], ids).all():
            # a connection without its record, or two records of one id (the careful path says which, and
            # keeps the first of an id)
            return None
        # Chunk headers (op, compression, size: the same compression throughout, or the slow path)
        # and the index-data records after each chunk, one per (chunk, connection) pair in chunk-info
        # order. A writer puts a chunk's index data right before the next chunk (the last chunk's right
        # before the index section), so one read per chunk takes the previous chunk's index data and
        # this chunk's header together; each chunk's data_len then has to agree with that layout.
        first = read_record(source, int(chunk_pos[0]), expect=Op.CHUNK)
        head = first.data_offset - int(chunk_pos[0])  # u32 header length, header, u32 data length
        chunk = _Template(source.bytes(int(chunk_pos[0]), head - 4, "chunk"), ("size",))
        first_index = read_record(source, first.end, expect=Op.INDEX_DATA)
        if first_index.header.u32("ver") != 1:
            return None
        index = _Template(source.bytes(first.end, first_index.data_offset - 4 - first.end, "index data"),
                          ("conn", "count"))
        record_size = index.raw.size + 4 + INDEX_ENTRY_SIZE * conn_of[:, 1]
        chunk_of_pair = np.repeat(np.arange(chunk_count), pairs)
        ends = np.concatenate(([0], np.cumsum(record_size)))  # of the records, in all blocks together
        first_of_chunk = np.concatenate(([0], np.cumsum(pairs)))
        block_len = ends[first_of_chunk[1:]] - ends[first_of_chunk[:-1]]
        before = ends[:-1] - ends[first_of_chunk[chunk_of_pair]]  # where each record starts in its block
        block_end = np.append(chunk_pos[1:], index_pos)
        range_at = np.concatenate(([chunk_pos[0]], block_end - block_len))
        range_len = np.append(chunk_pos + head, index_pos) - range_at
        if (range_at[1:] < range_at[:-1] + range_len[:-1]).any():
            return None  # ranges out of file order or overlapping: a chunk listed twice, or damage
        buf = source.gather(range_at, range_len)
        range_start = np.zeros(chunk_count + 1, dtype=np.int64)  # where each range landed in buf
        np.cumsum(range_len[:-1], out=range_start[1:])
        head_at = range_start[1:] - head  # chunk k's header ends range k
        if not chunk.match(buf, head_at):
            return None
        size = chunk.value(buf, head_at, "size")
        data_offset = chunk_pos + head
        data_len = gather_u32(buf, head_at + head - 4)
        if ((data_offset + data_len) != range_at[1:]).any():
            return None  # not the layout assumed (the careful path reads record by record)
        compression = first.header.text("compression")
        if compression == "none" and decryptor is None and (size != data_len).any():
            return None  # a damaged size: the careful path says which
        chunks = ChunkTable.from_columns(chunk_pos, data_offset, size, data_len, (compression,) * chunk_count,
                                         decryptor)
        record_at = range_start[1:][chunk_of_pair] + before
        file_at = range_at[1:][chunk_of_pair] + before
        if not index.match(buf, record_at) or (index.value(buf, record_at, "conn") != conn_of[:, 0]).any() or \
                (index.value(buf, record_at, "count") != conn_of[:, 1]).any() or \
                (gather_u32(buf, record_at + index.raw.size) != INDEX_ENTRY_SIZE * conn_of[:, 1]).any():
            return None
        records = np.stack([file_at, conn_of[:, 0], chunk_of_pair, record_at + index.raw.size + 4, conn_of[:, 1]],
                           axis=1)
        _check_entries(source, chunks, records, buf)
        return DeferredIndex(connections, chunks, records, buf)
    except (FastbagError, ValueError, IndexError, KeyError, struct.error):
        return None  # malformed in a way this path does not explain: the careful path will


def _record_starts(buf: np.ndarray, pos: int, count: int) -> tuple[np.ndarray, int]:
    """Where ``count`` records follow one another in ``buf`` from ``pos``; where the next would start.
    (IndexError when they run past the end.)"""
    if count > (buf.size - pos) // 8:  # a record takes 8 bytes at least: a count from a damaged header
        raise IndexError(f"{count} records cannot fit in {buf.size - pos} bytes")
    starts = np.empty(count, dtype=np.int64)
    if by_kernel(count, RECORD_LOOP_UP_TO):
        from .kernels import record_starts

        end = record_starts(buf, pos, starts)
    else:  # a Python loop over the record lengths (each record's start depends on the one before)
        view, end = memoryview(buf), pos
        for k in range(count):
            if end > buf.size - 8:
                end = -1
                break
            starts[k] = end
            header_len = int.from_bytes(view[end:end + 4], "little")
            if header_len > buf.size - end - 8:
                end = -1
                break
            end += 8 + header_len + int.from_bytes(view[end + 4 + header_len:end + 8 + header_len], "little")
    if end < 0:
        raise IndexError("records run past the end of the index section")
    return starts, int(end)


def _read_indexed(source: Source, index_pos: int, conn_count: int, chunk_count: int,
                  decryptor: AesCbcDecryptor | None = None) -> BagIndex | DeferredIndex:
    fast = _read_indexed_fast(source, index_pos, conn_count, chunk_count, decryptor)
    if fast is not None:
        return fast
    problems: list[str] = []
    connections: dict[int, Connection] = {}
    infos: list[ChunkInfo] = []
    pos = index_pos
    if decryptor is not None:  # the encrypted connection records come first (a reader can tell them only so)
        for _ in range(conn_count):
            conn, pos = read_encrypted_connection(source, pos, decryptor)
            _keep_first(connections, conn, problems)
    while pos < source.size:
        record = read_record(source, pos)
        op = record.header.op()
        if op == Op.CONNECTION:
            conn = read_connection(source, pos, record.header, record.data_offset, record.data_len)
            _keep_first(connections, conn, problems)
        elif op == Op.CHUNK_INFO:
            infos.append(_read_chunk_info(source, record))
        pos = record.end
    if len(connections) < conn_count or len(infos) < chunk_count:
        # An index section cut short at a record boundary: the chunks it no
        # longer lists are still in the file, so rebuild instead of trusting it.
        raise BagFormatError(f"the bag header announces {conn_count} connections and {chunk_count} chunks but the "
                             f"index holds {len(connections)} and {len(infos)}", path=source.path,
                             offset=index_pos, record="index")
    if len(connections) > conn_count or len(infos) > chunk_count:
        problems.append(f"the bag header announces {conn_count} connections and {chunk_count} chunks, "
                        f"the index holds {len(connections)} and {len(infos)}")
    conn_list = list(connections.values())
    chunks: list[Chunk] = []
    records: list[tuple[int, int, int, int, int]] = []  # record offset, connection, chunk, data offset, count
    reader = _IndexDataReader(source, problems)
    listed = set()
    for info in infos:
        if info.position in listed:  # a damaged chunk info: the chunk it should list is listed by none
            raise BagFormatError(f"the index lists the chunk at offset {info.position} twice (another chunk may "
                                 "be listed by none)", path=source.path, record="chunk info")
        listed.add(info.position)
        chunk_id = len(chunks)
        chunk_record = read_record(source, info.position, expect=Op.CHUNK)
        chunks.append(_chunk_from_record(source, chunk_record, decryptor, problems))
        pos = chunk_record.end
        if info.pairs != len(info.counts):
            problems.append(f"the chunk info of the chunk at offset {info.position} lists a connection twice")
        for _ in range(info.pairs):
            conn_id, data_offset, count = reader.read(pos)
            if conn_id not in connections:
                raise BagFormatError(f"index data names connection {conn_id}, which has no connection record",
                                     path=source.path, offset=pos, record="index data")
            records.append((pos, conn_id, chunk_id, data_offset, count))
            pos = data_offset + count * INDEX_ENTRY_SIZE
    index = _gather_entries(source, conn_list, ChunkTable.of(chunks), np.array(records, dtype=np.int64).reshape(-1, 5))
    index.problems = problems
    return index


def _check_entries(source: Source, chunks: ChunkTable, records: np.ndarray, buf: np.ndarray) -> None:
    """Raise BagFormatError naming the record unless every index-data entry of ``records`` lies inside
    ``buf`` and points inside its chunk (``records`` rows as :func:`_gather_entries` takes them)."""
    # Entries of a sound index lie side by side in the file: more of them than the bytes can hold
    # means records claim the same bytes (or counts are damaged), and would be allocated regardless.
    claimed = np.cumsum(records[:, 4]) * INDEX_ENTRY_SIZE
    if claimed.size and claimed[-1] > buf.size:
        bad = int(np.argmax(claimed > buf.size))
        raise BagFormatError(f"index data records claim {int(claimed[-1]) // INDEX_ENTRY_SIZE} entries, more than "
                             f"the {buf.size} bytes they are read from can hold", path=source.path,
                             offset=int(records[bad, 0]), record="index data")
    counts, data_at = records[:, 4], records[:, 3]
    outside = (counts > 0) & ((data_at < 0) | (data_at > buf.size - counts * INDEX_ENTRY_SIZE))
    if outside.any():
        raise BagFormatError("index data entries run past the end of the file", path=source.path,
                             offset=int(records[np.argmax(outside), 0]), record="index data")
    limit = chunks.size[records[:, 2]]
    if by_kernel(int(claimed[-1]) if claimed.size else 0, NUMPY_UP_TO * INDEX_ENTRY_SIZE):
        from .kernels import entry_past_chunk

        bad = entry_past_chunk(buf, data_at, counts, limit)
    else:  # every entry's offset (its third u32) against its record's chunk size
        past = gather_u32(buf, item_positions(data_at + 8, counts, INDEX_ENTRY_SIZE)) >= np.repeat(limit, counts)
        bad = int(np.searchsorted(np.cumsum(counts), np.argmax(past), side="right")) if past.any() else -1
    if bad >= 0:
        raise BagFormatError(f"index data points past the end of its {int(chunks.size[records[bad, 2]])}-byte chunk",
                             path=source.path, offset=int(records[bad, 0]), record="index data")


def _gather_entries(source: Source, connections: list[Connection], chunks: ChunkTable,
                    records: np.ndarray, buf: np.ndarray | None = None) -> BagIndex:
    """Every index entry of every index-data record, gathered in one pass, checked (:func:`_check_entries`).

    ``records`` rows are (record offset, connection id, chunk, data offset,
    count); each record's entries are count x (u32 sec, u32 nsec, u32 offset),
    contiguous at their data offset in ``buf`` (the whole file by default),
    all gathered at once.
    """
    if buf is None:
        buf = source.array
    _check_entries(source, chunks, records, buf)
    return _entries_index(connections, chunks, records, buf)


def _entries_index(connections: list[Connection], chunks: ChunkTable, records: np.ndarray,
                   buf: np.ndarray) -> BagIndex:
    """The index of the entries of ``records``, checked before (see :func:`_gather_entries`)."""
    counts, data_at = records[:, 4], records[:, 3]
    ranks, chunk_of = connection_ranks(connections, records[:, 1]), records[:, 2].astype(np.int32)
    n = int(counts.sum())
    if by_kernel(n, NUMPY_UP_TO):
        from .kernels import entries_table

        time, offset = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        conn, chunk = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
        entries_table(buf, data_at, counts, ranks, chunk_of, time, conn, chunk, offset)
    else:  # the entries gathered, then converted (three times the bytes written, but no kernel to load)
        entries = rows(buf, item_positions(data_at, counts, INDEX_ENTRY_SIZE), INDEX_ENTRY_SIZE).view("<u4")
        time = entries[:, 0].astype(np.int64) * 1_000_000_000 + entries[:, 1]
        conn, chunk, offset = np.repeat(ranks, counts), np.repeat(chunk_of, counts), entries[:, 2].astype(np.int64)
    return in_read_order("2.0", connections, chunks, time, conn, chunk, offset)


@dataclass
class DeferredIndex:
    """A bag 2.0 index read and checked at open but for the last step, building the message table: every
    connection, chunk and index-data record is known (``records`` rows as :func:`_gather_entries` takes
    them; their entries in ``buf``, already checked), so the table of every message, or of one topic's
    alone, is built on first use without reading the file again. (Building all 16,800 rows of a 1.7 GB
    bag at open cost a third of the open; a topic's read needs only its own.)"""

    connections: list[Connection]
    chunks: ChunkTable
    records: np.ndarray
    buf: np.ndarray

    @property
    def message_count(self) -> int:
        return int(self.records[:, 4].sum())

    def whole(self) -> BagIndex:
        """The index of every message."""
        return _entries_index(self.connections, self.chunks, self.records, self.buf)

    def of(self, ranks: Sequence[int]) -> BagIndex:
        """The index of the connections at ``ranks`` alone: :meth:`whole`'s rows of them, in its order (an id
        listed twice belongs to its first connection, as in the whole index)."""
        mine = np.isin(connection_ranks(self.connections, self.records[:, 1]), list(ranks))
        return _entries_index(self.connections, self.chunks, self.records[mine], self.buf)


def _read_chunk_info(source: Source, record) -> ChunkInfo:
    h = record.header
    ver = h.u32("ver")
    if ver != 1:
        raise UnsupportedError(f"chunk info version {ver} is not supported ({source.path}, offset {record.offset}, "
                               "chunk info record)")
    count = h.u32("count")
    if record.data_len != count * 8:
        raise BagFormatError(f"chunk info holds {record.data_len} bytes for {count} connections",
                             path=source.path, offset=record.offset, record="chunk info")
    pairs = np.frombuffer(source.bytes(record.data_offset, record.data_len, "chunk info"), dtype="<u4")
    counts = {int(c): int(n) for c, n in zip(pairs[0::2], pairs[1::2])}
    return ChunkInfo(h.u64("chunk_pos"), h.time("start_time"), h.time("end_time"), counts, count)


def _keep_first(connections: dict[int, Connection], conn: Connection, problems: list[str]) -> None:
    """``conn`` into ``connections`` by id, unless its id is taken: the first record of an id counts, and a
    second that says another topic or type is noted."""
    first = connections.setdefault(conn.id, conn)
    if first is not conn and (first.topic, first.msgtype) != (conn.topic, conn.msgtype):
        problems.append(f"the index holds two connection records of id {conn.id} ({first.topic}: "
                        f"{first.msgtype}, and {conn.topic}: {conn.msgtype}); read as the first")


def _first_chunk_decrypts(source: Source, start: int, decryptor: AesCbcDecryptor) -> bool:
    """Whether the record at ``start`` (the first after the bag header) is a chunk that ``decryptor``
    decrypts and decompresses into a record: the key is then the bag's, whatever its index says."""
    try:
        chunk = _chunk_from_record(source, read_record(source, start, expect=Op.CHUNK), decryptor)
        payload = decompress(source, chunk)
        read_record(BufferSource(payload, f"{source.path} (chunk at offset {start})"), 0)
    except FastbagError:
        return False
    return True


def _chunk_from_record(source: Source, record, decryptor: AesCbcDecryptor | None = None,
                       problems: list[str] | None = None) -> Chunk:
    h = record.header
    return _chunk(record.offset, h.text("compression"), h.u32("size"), record.data_offset, record.data_len,
                  decryptor, problems)


def _chunk(position: int, compression: str, size: int, data_offset: int, data_len: int,
           decryptor: AesCbcDecryptor | None, problems: list[str] | None) -> Chunk:
    """A chunk record's facts. An uncompressed chunk's payload is its data, whatever its header's ``size``
    says (as rosbag reads it): a size damaged to another number (0, say) is noted in ``problems``, and the
    chunk's messages, each checked against the data's bounds, stay readable."""
    if compression == "none" and decryptor is None and size != data_len and problems is not None:
        problems.append(f"the uncompressed chunk at offset {position} holds {data_len} bytes, but its header says "
                        f"size {size}: read as its {data_len} bytes")
        size = data_len
    return Chunk(position, compression, size, data_offset, data_len, decryptor)


class _IndexDataReader:
    """Reads index-data records, fast for the common header layout.

    Writers emit the same header for every index-data record but for the
    ``conn`` and ``count`` values. The first record is parsed in full; later
    ones whose header bytes equal it outside those two values are read by
    unpacking at the same offsets, which keeps opening a bag of thousands of
    chunks in milliseconds. Anything else takes the checked parser.
    """

    def __init__(self, source: Source, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        self.template: tuple[bytes, int, int] | None = None  # header with conn/count zeroed, their offsets

    def read(self, pos: int) -> tuple[int, int, int]:
        """The record at ``pos``: (connection id, offset of its entries, entry count); the entries are checked
        to lie inside the file."""
        source = self.source
        if self.template is not None:
            raw, conn_at, count_at = self.template
            header = source.bytes(pos, len(raw), "index data") if pos + len(raw) <= source.size else b""
            if len(header) == len(raw):
                masked = bytearray(header)
                masked[conn_at:conn_at + 4] = masked[count_at:count_at + 4] = masked[-4:] = b"\0\0\0\0"
                if masked == raw:
                    conn_id = int.from_bytes(header[conn_at:conn_at + 4], "little")
                    count = int.from_bytes(header[count_at:count_at + 4], "little")
                    data_len = int.from_bytes(header[-4:], "little")
                    return self._entries(pos, conn_id, count, pos + len(raw), data_len)
        return self._read_full(pos)

    def _read_full(self, pos: int) -> tuple[int, int, int]:
        source = self.source
        # Not read_record: early writers (2010) declare a data length of count*20
        # for count*12 bytes of entries, which may run past the end of the file.
        header, data_offset, data_len = read_record_header(source, pos, expect=Op.INDEX_DATA)
        ver = header.u32("ver")
        if ver != 1:
            raise UnsupportedError(f"index data version {ver} is not supported ({source.path}, offset {pos}, "
                                   "index data record)")
        conn_id, count = header.u32("conn"), header.u32("count")
        if self.template is None:
            self.template = self._make_template(pos, data_offset, conn_id, count)
        return self._entries(pos, conn_id, count, data_offset, data_len)

    def _make_template(self, pos: int, data_offset: int, conn_id: int, count: int) -> tuple[bytes, int, int] | None:
        raw = bytearray(self.source.bytes(pos, data_offset - pos, "index data"))
        conn_at, count_at = raw.find(b"conn=") + 5, raw.find(b"count=") + 6
        if conn_at < 5 or count_at < 6:
            return None
        if raw[conn_at:conn_at + 4] != conn_id.to_bytes(4, "little") or \
                raw[count_at:count_at + 4] != count.to_bytes(4, "little"):
            return None
        raw[conn_at:conn_at + 4] = raw[count_at:count_at + 4] = b"\0\0\0\0"
        raw[-4:] = b"\0\0\0\0"  # the data length varies too
        return bytes(raw[:-4]) + b"\0\0\0\0", conn_at, count_at

    def _entries(self, pos: int, conn_id: int, count: int, data_offset: int, data_len: int) -> tuple[int, int, int]:
        nbytes = count * INDEX_ENTRY_SIZE
        if data_len != nbytes:
            self.problems.append(f"the index data record at offset {pos} declares {data_len} bytes for {count} "
                                 f"entries; used the count ({nbytes} bytes)")
        self.source.check(data_offset, nbytes, "index data")
        return conn_id, data_offset, count


# -- recovery ---------------------------------------------------------------------

def scan_index(source: Source, start: int, *, reason: str, decryptor: AesCbcDecryptor | None = None,
               encryption: EncryptionHeader | None = None) -> BagIndex:
    """Rebuild the index by walking the chunk records from ``start``.

    Every message in every intact chunk is recovered. A chunk cut off by the
    end of the file gives its complete messages; a damaged record or chunk
    is skipped, and the walk resumes at the next chunk header found after it
    (:func:`next_chunk`), so one bad length does not lose the rest of the
    file. One warning says what was recovered and what was lost.

    An encrypted bag's chunks decrypt with ``decryptor`` on the way; if none
    of them does, the key is wrong: EncryptionKeyError, not an empty bag.
    """
    connections: dict[int, Connection] = {}
    chunks: list[Chunk] = []
    pieces: list[tuple[int, int, np.ndarray]] = []
    lost: list[str] = []
    noted: list[str] = []  # what was read otherwise than a record says
    salvaged: dict[int, np.ndarray] = {}
    undecrypted: list[DecryptionError] = []  # chunks that did not decrypt
    pos = start

    def skip(frm: int, what: str) -> int:
        """Resume at the next chunk after ``frm``, noting what was lost; the end when there is none."""
        resume = next_chunk(source, frm)
        end = source.size if resume is None else resume
        lost.append(f"{what}: bytes {pos} to {end}" if resume is not None else f"{what}: the last "
                    f"{source.size - pos} bytes from offset {pos}")
        return end

    while pos < source.size:
        try:
            header, data_offset, data_len = read_record_header(source, pos)
        except FastbagError as exc:
            if decryptor is not None:  # an encrypted connection record of the index section?
                try:
                    conn, pos = read_encrypted_connection(source, pos, decryptor)
                    connections.setdefault(conn.id, conn)
                    continue
                except FastbagError:
                    pass
            pos = skip(pos + 1, f"a damaged record ({exc})")
            continue
        op = header.op()
        end = data_offset + data_len
        if end > source.size and op != Op.CHUNK:
            article = "an" if header.record[:1] in tuple("aeiou") else "a"  # ("an index data record")
            pos = skip(pos + 1, f"{article} {header.record} record running past the end of the file")
            continue
        if op == Op.CONNECTION:
            try:
                conn = read_connection(source, pos, header, data_offset, data_len)
            except FastbagError as exc:
                pos = skip(data_offset, f"a damaged connection record ({exc})")
                continue
            connections.setdefault(conn.id, conn)
        elif op == Op.CHUNK:
            resume = next_chunk(source, data_offset) if end > source.size else None
            if resume is not None:  # a damaged length, not the end of a recording: the chunk ends before the next
                end = resume
            cut = end > source.size
            try:
                chunk = Chunk(pos, header.text("compression"), header.u32("size"), data_offset,
                              min(end, source.size) - data_offset, decryptor)
                if cut or resume is not None:
                    lost.append(f"the end of the chunk at offset {pos}, " + (
                        f"cut off by the end of the file ({end - source.size} bytes missing)" if cut else
                        "whose length runs past the next chunk"))
                    payload = decompress_truncated(source, chunk)
                else:
                    if chunk.in_place and chunk.size != chunk.data_len:
                        chunk = _sized_by_its_records(source, chunk, noted)
                    payload = decompress(source, chunk)
                found, chunk_conns, complete = _scan_chunk(source, chunk, payload)
            except FastbagError as exc:
                if isinstance(exc, DecryptionError):
                    undecrypted.append(exc)
                pos = skip(data_offset, f"the chunk at offset {pos} ({exc})")
                continue
            if decryptor is not None and found:
                decryptor.verified = True  # records parsed out of a decrypted chunk: the key is right
            if not complete and not cut and resume is None:
                lost.append(f"the end of the chunk at offset {pos} (a damaged record)")
            for conn in chunk_conns:
                connections.setdefault(conn.id, conn)
            if found:
                if cut or resume is not None:  # keep what was salvaged: the file alone cannot give it again
                    salvaged[len(chunks)] = payload
                chunk_id = len(chunks)
                chunks.append(chunk)
                pieces += [(conn_id, chunk_id, entries) for conn_id, entries in found.items()]
        pos = end
    if decryptor is not None and undecrypted and not decryptor.verified:
        raise EncryptionKeyError(
            f"the AES key decrypts none of the bag's {len(undecrypted)} encrypted chunks: it is not this bag's key "
            f"(or every chunk is damaged)", path=source.path, offset=undecrypted[0].offset, record="chunk",
            encryption=encryption.public if encryption is not None else None) from undecrypted[0]
    for conn_id in sorted({c for c, _, _ in pieces} - set(connections)):  # (a damaged id, or a lost record)
        at = sorted({chunks[k].position for c, k, _ in pieces if c == conn_id})
        where = f"the chunk at offset {at[0]}" if len(at) == 1 else f"the chunks at offsets {', '.join(map(str, at))}"
        lost.append(f"messages of connection {conn_id} in {where}, whose connection record is missing")
    pieces = [p for p in pieces if p[0] in connections]
    conn_list = sorted(connections.values(), key=lambda c: c.id)
    index = _index_from_pieces("2.0", conn_list, chunks, pieces, recovered=True)
    index.salvaged = salvaged
    text = (f"{reason}; rebuilt the index by scanning: recovered {index.message_count} messages "
            f"in {len(chunks)} chunks on {len(conn_list)} connections")
    text += f"; lost {'; '.join(lost)}" if lost else "; nothing in the file lost"
    index.problems = [text] + noted
    return index


def _sized_by_its_records(source: Source, chunk: Chunk, noted: list[str]) -> Chunk:
    """An uncompressed chunk whose header's size is not its record's data length: one of the two is damaged,
    and its records decide. Where they end at the data's length, the size is the damage (noted, and the chunk
    read as its data, see _chunk); else the length is, and the chunk a BagFormatError (the scan resumes at
    the next chunk it finds)."""
    said: list[str] = []  # (noted only once the records have decided)
    whole = _chunk(chunk.position, chunk.compression, chunk.size, chunk.data_offset, chunk.data_len, None, said)
    if not _scan_chunk(source, whole, decompress(source, whole))[2]:
        raise size_mismatch(source.path, chunk)
    noted += said
    return whole


CHUNK_OP = b"op=\x05"


def next_chunk(source: Source, start: int) -> int | None:
    """Offset of the first plausible chunk record at or after ``start``, or None.

    Looks for a header field ``op=\x05`` and, just before it, a record start
    whose header parses, holds that field and says chunk. Used to resume a
    recovery scan after damage.
    """
    data = source._mmap
    at = start
    while True:
        k = data.find(CHUNK_OP, at) if data is not None else -1  # type: ignore[union-attr]
        if k < 0:
            return None
        field = k - 4  # the field's u32 length precedes it
        for s in range(field - 4, max(start, field - 4 - 256) - 1, -1):
            try:
                header, data_offset, _ = read_record_header(source, s)
            except FastbagError:
                continue
            if header.op() == Op.CHUNK and s + 4 <= field < data_offset - 4:
                return s
        at = k + 1


#: A chunk payload up to this many bytes is scanned in Python while Numba is not loaded (its start, ~0.5 s,
#: buys nothing there); a larger one loads the kernel, which walks ~40x faster than Python (6-10 us a message).
SCAN_IN_PYTHON_UP_TO = 4 << 20
#: The fewest bytes a message-data record takes (header fields op, conn and time, two lengths).
_MIN_MESSAGE_RECORD = 4 + (4 + 4) + (4 + 9) + (4 + 13) + 4


def _scan_chunk(source: Source, chunk: Chunk, payload: np.ndarray) -> tuple[dict[int, np.ndarray],
                                                                            list[Connection], bool]:
    """Messages and connections inside one uncompressed chunk payload.

    Returns entries per connection id, the connections found, and whether the
    payload parsed to its end. Runs of message-data records are walked by a
    kernel (see :func:`fastbag.ros1.kernels.message_records`); every other
    record, and any the kernel leaves, by the checked parser.
    """
    inner = BufferSource(payload, f"{source.path} (chunk at offset {chunk.position})")
    found: dict[int, list[tuple[int, int, int]]] = {}
    walked: list[tuple[np.ndarray, ...]] = []  # (sec, nsec, at, conn) of the kernel's runs
    conns: list[Connection] = []
    pos, complete = 0, True
    kernel = None
    if by_kernel(payload.size, SCAN_IN_PYTHON_UP_TO):
        from .kernels import message_records as kernel
        room = min(payload.size // _MIN_MESSAGE_RECORD + 1, 1 << 16)  # (a walk stops when they are full)
        sec, nsec, at, conn = (np.empty(room, dtype=np.int64) for _ in range(4))
    while pos < inner.size:
        if kernel is not None:
            count, pos = kernel(payload, pos, payload.size, sec, nsec, at, conn)
            if count:
                walked.append(tuple(a[:count].copy() for a in (sec, nsec, at, conn)))
            if pos >= inner.size:
                break
            if count == room:  # full, not stopped
                continue
        try:
            record = read_record(inner, pos)
            op = record.header.op()
            if op == Op.MSG_DATA:
                secs, nsecs = record.header.time_parts("time")  # as stored, like index entries (no carry)
                found.setdefault(record.header.u32("conn"), []).append((secs, nsecs, pos))
            elif op == Op.CONNECTION:
                conns.append(read_connection(inner, pos, record.header, record.data_offset, record.data_len))
        except FastbagError:
            complete = False
            break
        pos = record.end
    entries = _entries_by_connection(found, walked)
    return entries, conns, complete


def _entries_by_connection(found: dict[int, list[tuple[int, int, int]]], walked: list[tuple[np.ndarray, ...]]
                           ) -> dict[int, np.ndarray]:
    """``(n, 3)`` uint32 rows (sec, nsec, offset) per connection id, in payload order: the parser's rows
    (``found``) and the kernel's runs (``walked``: sec, nsec, offset, connection) merged."""
    parsed = [(sec, nsec, at, c) for c, rows in found.items() for sec, nsec, at in rows]
    runs = walked + ([tuple(np.array(parsed, dtype=np.int64).T)] if parsed else [])
    if not runs:
        return {}
    sec, nsec, at, conn = (np.concatenate([run[k] for run in runs]) for k in range(4))
    order = np.lexsort((at, conn))  # by connection, each in payload order
    table = np.stack((sec, nsec, at), axis=1)[order].astype(np.uint32)
    ids, firsts = np.unique(conn[order], return_index=True)
    return {int(c): part for c, part in zip(ids.tolist(), np.split(table, firsts[1:]))}
