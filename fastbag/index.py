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

from dataclasses import dataclass, field

import numpy as np

from .chunks import Chunk, decompress, decompress_truncated
from .errors import BagFormatError, FastbagError, UnsupportedError
from .records import MAGIC_V11, MAGIC_V12, MAGIC_V20, Header, Op, read_record, read_record_header
from .source import BufferSource, Source


class FastbagWarning(UserWarning):
    """A bag was readable only in part, or disagrees with itself."""


@dataclass(frozen=True)
class Connection:
    """One connection record: a topic published with one message type."""

    id: int
    topic: str
    msgtype: str
    md5sum: str
    definition: str
    callerid: str | None = None
    latching: bool = False


@dataclass(frozen=True)
class ChunkInfo:
    """A chunk-info record: where a chunk is, its time span and per-connection counts."""

    position: int
    start_time: int
    end_time: int
    counts: dict[int, int] = field(default_factory=dict)


# One index-data entry as stored: time (sec, nsec) and offset into the chunk.
INDEX_ENTRY = np.dtype([("sec", "<u4"), ("nsec", "<u4"), ("offset", "<u4")])


@dataclass
class BagIndex:
    """Everything needed to find every message, as NumPy arrays.

    ``time``, ``conn`` (position in ``connections``), ``chunk`` (position in
    ``chunks``) and ``offset`` (of the message record in the uncompressed
    chunk) are sorted in read order: by time, ties by connection order, then
    index order, as rosbag and rosbags yield them.
    """

    version: str
    connections: list[Connection]
    chunks: list[Chunk]
    time: np.ndarray
    conn: np.ndarray
    chunk: np.ndarray
    offset: np.ndarray
    recovered: bool = False
    # Payloads of chunks cut off by the end of the file, decompressed as far as
    # they go during recovery (keyed by position in ``chunks``).
    salvaged: dict[int, np.ndarray] = field(default_factory=dict)
    # What was wrong with the file, one sentence each; the Bag warns once with them.
    problems: list[str] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return int(self.time.size)


def _entries_to_index(version: str, connections: list[Connection], chunks: list[Chunk],
                      per_conn: dict[int, list[tuple[int, np.ndarray]]], recovered: bool) -> BagIndex:
    """Build the sorted message table from per-connection (chunk, entries) lists."""
    times, conns, chunk_ids, offsets = [], [], [], []
    for rank, connection in enumerate(connections):
        for chunk_id, entries in per_conn.get(connection.id, ()):
            n = entries.size
            times.append(entries["sec"].astype(np.int64) * 1_000_000_000 + entries["nsec"])
            conns.append(np.full(n, rank, dtype=np.int32))
            chunk_ids.append(np.full(n, chunk_id, dtype=np.int32))
            offsets.append(entries["offset"].astype(np.uint32))
    if times:
        time = np.concatenate(times)
        # Stable: ties keep connection order, then index order (rosbag's merge).
        order = np.argsort(time, kind="stable")
        return BagIndex(version, connections, chunks, time[order], np.concatenate(conns)[order],
                        np.concatenate(chunk_ids)[order], np.concatenate(offsets)[order], recovered)
    empty = np.empty(0, dtype=np.int64)
    return BagIndex(version, connections, chunks, empty, empty.astype(np.int32), empty.astype(np.int32),
                    empty.astype(np.uint32), recovered)


def read_connection(source: Source, offset: int, record_header: Header, data_offset: int,
                    data_len: int) -> Connection:
    """Parse a connection record (its header gave ``conn`` and ``topic``; its data the rest)."""
    data = Header.parse(source.bytes(data_offset, data_len, "connection"), path=source.path,
                        offset=data_offset, record="connection")
    topic = record_header.text("topic", "") or data.text("topic", "")
    latching = data.text("latching", "0").strip() not in ("", "0")
    return Connection(
        id=record_header.u32("conn"), topic=topic, msgtype=data.text("type"), md5sum=data.text("md5sum"),
        definition=data.text("message_definition", ""),
        callerid=data.text("callerid") if "callerid" in data else None, latching=latching)


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
    raise BagFormatError(f"not a ROS bag: the file starts with {head[:13]!r}", path=source.path,
                         offset=0, record="magic")


def read_index(source: Source) -> BagIndex:
    """Read a v2.0 bag's index; rebuild it by scanning when absent or damaged."""
    version = detect_version(source)
    if version != "2.0":
        raise UnsupportedError(f"bag format {version} is not supported yet ({source.path}, offset 0)")
    header = read_record(source, len(MAGIC_V20), expect=Op.BAG_HEADER)
    index_pos = header.header.u64("index_pos")
    if index_pos == 0:
        return scan_index(source, header.end, reason="it is not indexed (index_pos is 0)")
    if index_pos >= source.size and header.header.u32("chunk_count"):
        return scan_index(source, header.end,
                          reason=f"its index_pos {index_pos} lies past the end of the file ({source.size} bytes)")
    try:
        return _read_indexed(source, index_pos, header.header.u32("conn_count"), header.header.u32("chunk_count"))
    except FastbagError as exc:
        return scan_index(source, header.end, reason=f"its index is damaged: {exc}")


def _read_indexed(source: Source, index_pos: int, conn_count: int, chunk_count: int) -> BagIndex:
    problems: list[str] = []
    connections: dict[int, Connection] = {}
    infos: list[ChunkInfo] = []
    pos = index_pos
    while pos < source.size:
        record = read_record(source, pos)
        op = record.header.op()
        if op == Op.CONNECTION:
            conn = read_connection(source, pos, record.header, record.data_offset, record.data_len)
            connections.setdefault(conn.id, conn)
        elif op == Op.CHUNK_INFO:
            infos.append(_read_chunk_info(source, record))
        pos = record.end
    if len(connections) != conn_count or len(infos) != chunk_count:
        problems.append(f"the bag header announces {conn_count} connections and {chunk_count} chunks, "
                        f"the index holds {len(connections)} and {len(infos)}")
    conn_list = list(connections.values())
    chunks: list[Chunk] = []
    per_conn: dict[int, list[tuple[int, np.ndarray]]] = {}
    for chunk_id, info in enumerate(infos):
        chunk_record = read_record(source, info.position, expect=Op.CHUNK)
        chunks.append(_chunk_from_record(source, chunk_record))
        pos = chunk_record.end
        for _ in range(len(info.counts)):
            conn_id, entries, pos = _read_index_data(source, pos, chunks[-1], problems)
            if conn_id not in connections:
                raise BagFormatError(f"index data names connection {conn_id}, which has no connection record",
                                     path=source.path, offset=pos, record="index data")
            per_conn.setdefault(conn_id, []).append((chunk_id, entries))
    index = _entries_to_index("2.0", conn_list, chunks, per_conn, recovered=False)
    index.problems = problems
    return index


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
    return ChunkInfo(h.u64("chunk_pos"), h.time("start_time"), h.time("end_time"), counts)


def _chunk_from_record(source: Source, record) -> Chunk:
    h = record.header
    return Chunk(position=record.offset, compression=h.text("compression"), size=h.u32("size"),
                 data_offset=record.data_offset, data_len=record.data_len)


def _read_index_data(source: Source, pos: int, chunk: Chunk, problems: list[str]) -> tuple[int, np.ndarray, int]:
    """One index-data record at ``pos``: (connection id, entries, position after it)."""
    try:
        record = read_record(source, pos, expect=Op.INDEX_DATA)
        count = None
    except BagFormatError:
        # Early writers (2010) stored a data length of count * 20 for count * 12
        # bytes of entries, so the declared length may run past the file's end.
        # Classic rosbag trusts the count; so do we, checked below.
        record = None
    if record is None:
        header_len = source.u32(pos, "index data")
        header = Header.parse(source.bytes(pos + 4, header_len, "index data"), path=source.path,
                              offset=pos + 4, record="index data")
        if header.op() != Op.INDEX_DATA:
            raise BagFormatError("expected an index data record", path=source.path, offset=pos,
                                 record="index data")
        data_offset = pos + 8 + header_len
    else:
        header, data_offset = record.header, record.data_offset
    ver = header.u32("ver")
    if ver != 1:
        raise UnsupportedError(f"index data version {ver} is not supported ({source.path}, offset {pos}, "
                               "index data record)")
    count = header.u32("count")
    nbytes = count * INDEX_ENTRY.itemsize
    if record is not None and record.data_len != nbytes:
        problems.append(f"the index data record at offset {pos} declares {record.data_len} bytes for {count} "
                        f"entries; used the count ({nbytes} bytes)")
    entries = np.frombuffer(source.bytes(data_offset, nbytes, "index data"), dtype=INDEX_ENTRY)
    if count and int(entries["offset"].max()) >= chunk.size:
        raise BagFormatError(f"index data points past the end of its {chunk.size}-byte chunk",
                             path=source.path, offset=pos, record="index data")
    return header.u32("conn"), entries, data_offset + nbytes


# -- recovery ---------------------------------------------------------------------

def scan_index(source: Source, start: int, *, reason: str) -> BagIndex:
    """Rebuild the index by walking the chunk records from ``start``.

    Every message in every complete chunk is recovered; a chunk cut off by the
    end of the file, or whose payload is damaged, is skipped. One warning says
    what was recovered and what was lost.
    """
    connections: dict[int, Connection] = {}
    chunks: list[Chunk] = []
    per_conn: dict[int, list[tuple[int, np.ndarray]]] = {}
    lost: list[str] = []
    salvaged: dict[int, np.ndarray] = {}
    pos = start
    while pos < source.size:
        try:
            header, data_offset, data_len = read_record_header(source, pos)
        except FastbagError as exc:
            lost.append(f"the last {source.size - pos} bytes from offset {pos} ({exc})")
            break
        op = header.op()
        truncated = data_offset + data_len > source.size
        if truncated and op != Op.CHUNK:
            lost.append(f"the last {source.size - pos} bytes from offset {pos} (a {header.record} record "
                        "cut off by the end of the file)")
            break
        if op == Op.CONNECTION:
            conn = read_connection(source, pos, header, data_offset, data_len)
            connections.setdefault(conn.id, conn)
        elif op == Op.CHUNK:
            try:
                chunk = Chunk(pos, header.text("compression"), header.u32("size"), data_offset,
                              min(data_len, source.size - data_offset))
                if truncated:
                    lost.append(f"the end of the chunk at offset {pos}, cut off by the end of the file "
                                f"({data_offset + data_len - source.size} bytes missing)")
                    payload = decompress_truncated(source, chunk)
                else:
                    payload = decompress(source, chunk)
                found, chunk_conns, complete = _scan_chunk(source, chunk, payload)
            except FastbagError as exc:
                lost.append(f"the chunk at offset {pos} ({exc})")
            else:
                if not complete and not truncated:
                    lost.append(f"the end of the chunk at offset {pos} (a damaged record)")
                for conn in chunk_conns:
                    connections.setdefault(conn.id, conn)
                if found:
                    if truncated:  # keep what we salvaged: the file alone cannot give it again
                        salvaged[len(chunks)] = payload
                    chunk_id = len(chunks)
                    chunks.append(chunk)
                    for conn_id, entries in found.items():
                        per_conn.setdefault(conn_id, []).append((chunk_id, entries))
        pos = data_offset + data_len
    unknown = set(per_conn) - set(connections)
    for conn_id in unknown:
        lost.append(f"messages of connection {conn_id}, whose connection record is missing")
        del per_conn[conn_id]
    conn_list = sorted(connections.values(), key=lambda c: c.id)
    index = _entries_to_index("2.0", conn_list, chunks, per_conn, recovered=True)
    index.salvaged = salvaged
    text = (f"{reason}; rebuilt the index by scanning: recovered {index.message_count} messages "
            f"in {len(chunks)} chunks on {len(conn_list)} connections")
    text += f"; lost {'; '.join(lost)}" if lost else "; nothing lost"
    index.problems = [text]
    return index


def _scan_chunk(source: Source, chunk: Chunk, payload: np.ndarray) -> tuple[dict[int, np.ndarray],
                                                                            list[Connection], bool]:
    """Messages and connections inside one uncompressed chunk payload.

    Returns entries per connection id, the connections found, and whether the
    payload parsed to its end.
    """
    inner = BufferSource(payload, f"{source.path} (chunk at offset {chunk.position})")
    found: dict[int, list[tuple[int, int, int]]] = {}
    conns: list[Connection] = []
    pos, complete = 0, True
    while pos < inner.size:
        try:
            record = read_record(inner, pos)
            op = record.header.op()
            if op == Op.MSG_DATA:
                time = record.header.time("time")
                found.setdefault(record.header.u32("conn"), []).append(
                    (time // 1_000_000_000, time % 1_000_000_000, pos))
            elif op == Op.CONNECTION:
                conns.append(read_connection(inner, pos, record.header, record.data_offset, record.data_len))
        except FastbagError:
            complete = False
            break
        pos = record.end
    entries = {c: np.array(rows, dtype=np.uint32).view(INDEX_ENTRY).reshape(-1) for c, rows in found.items()}
    return entries, conns, complete
