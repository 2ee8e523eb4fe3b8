"""Legacy ROS bags: format 1.2 (2009-2011) and format 1.1.

- **1.2**: records as in 2.0 but unchunked: ``op`` 0x01 message definition
  (``topic``, ``md5``, ``type``, ``def``), 0x02 message data (``topic``,
  ``md5``, ``type``, ``sec``, ``nsec``; data = the serialized message), an
  optional 0x03 bag header (``index_pos``) and optional 0x04 index data
  (version 0, per topic: ``count`` x (u32 sec, u32 nsec, u64 record position)).
- **1.1**: after the version line, messages back to back: topic, md5sum and
  type each ending in a newline, then u32 sec, u32 nsec, u32 length and the
  bytes. No definitions are stored.

Both become the same :class:`~fastbag.index.BagIndex` as format 2.0, with the
whole file as one uncompressed chunk and each message's record position as
its offset, so everything from message spans upward is shared.
"""

from __future__ import annotations

import struct
from array import array

import numpy as np

from ..container import BagIndex, Connection, build_index
from ..errors import BagFormatError, FastbagError, UnsupportedError
from ..io.chunks import Chunk
from ..io.startup import by_kernel
from ..io.source import Source
from .records import MAGIC_V11, MAGIC_V12, Header, Op, gather_u32, read_record, read_record_header

_V11_TAIL = struct.Struct("<III")  # sec, nsec, length
MAX_V11_LINE = 4096  # a topic, md5sum or type line longer than this is not a 1.1 header


def _whole_file(source: Source) -> list[Chunk]:
    return [Chunk(position=0, compression="none", size=source.size, data_offset=0, data_len=source.size)]


def _connection(cid: int, definition: Header, message: Header | None = None) -> Connection:
    """A connection from a definition record (or a message header when none exists).

    ``callerid`` and ``latching`` live in 1.2 message headers: taken from ``message``.
    """
    message = message or definition
    return Connection(id=cid, topic=definition.text("topic"), msgtype=definition.text("type"),
                      md5sum=definition.text("md5"), definition=definition.text("def", ""),
                      callerid=message.text("callerid") if "callerid" in message else None,
                      latching=message.text("latching", "0").strip() not in ("", "0"))


# -- format 1.2 -------------------------------------------------------------------------

def read_index_v12(source: Source) -> BagIndex:
    """Read a 1.2 bag through its index records; scan it when they are absent or damaged."""
    start = len(MAGIC_V12)
    index_pos = 0
    header, data_offset, data_len = read_record_header(source, start)
    if header.op() == Op.BAG_HEADER:
        index_pos = header.u64("index_pos") if "index_pos" in header else 0
        start = data_offset + data_len
    if index_pos == 0:
        return scan_v12(source, start, reason="it has no index (index_pos is 0)")
    if index_pos >= source.size:
        return scan_v12(source, start, reason=f"its index_pos {index_pos} is at or past the end of the file "
                                              f"({source.size} bytes)")
    try:
        return _indexed_v12(source, start, index_pos)
    except FastbagError as exc:
        return scan_v12(source, start, reason=f"its index is damaged: {exc}")


def _indexed_v12(source: Source, start: int, index_pos: int) -> BagIndex:
    topics: list[tuple[str, np.ndarray]] = []  # (topic, (n, 4) uint32: sec, nsec, pos lo, pos hi)
    pos = index_pos
    while pos < source.size:
        record = read_record(source, pos, expect=Op.INDEX_DATA)
        h = record.header
        if h.u32("ver") != 0:
            raise UnsupportedError(f"index data version {h.u32('ver')} is not supported in a 1.2 bag "
                                   f"({source.path}, offset {pos}, index data record)")
        count = h.u32("count")
        if record.data_len != count * 16:
            raise BagFormatError(f"index data holds {record.data_len} bytes for {count} entries",
                                 path=source.path, offset=pos, record="index data")
        entries = np.frombuffer(source.bytes(record.data_offset, record.data_len, "index data"), dtype="<u4")
        topics.append((h.text("topic"), entries.reshape(-1, 4)))
        pos = record.end
    if not topics:
        raise BagFormatError("the index section holds no index data records", path=source.path,
                             offset=index_pos, record="index data")
    connections: list[Connection] = []
    pieces = []
    definitions: list[int] = []  # definition records that a topic's first entry points at
    for cid, (topic, entries) in enumerate(topics):
        positions = entries[:, 2].astype(np.int64) | (entries[:, 3].astype(np.int64) << 32)
        if positions.size and (positions.min() < start or positions.max() >= index_pos):
            raise BagFormatError(f"index of topic {topic} points outside the data section", path=source.path,
                                 offset=index_pos, record="index data")
        # The first entry usually points at the topic's definition record: that
        # entry is the message right after it (span location skips the definition).
        first = read_record_header(source, int(positions[0]))[0] if positions.size else None
        if first is not None and first.op() == Op.MSG_DEF:
            definition = first
            definitions.append(int(positions[0]))
            message = read_record_header(source, read_record(source, int(positions[0])).end)[0]
        else:
            definition = _find_definition(source, start, index_pos, topic)
            message = first
        connections.append(_connection(cid, definition, message))
        pieces.append((cid, entries, positions))
    conn_ids = np.concatenate([np.full(len(e), c, dtype=np.int64) for c, e, _ in pieces])
    entries = np.concatenate([e for _, e, _ in pieces])
    time = entries[:, 0].astype(np.int64) * 1_000_000_000 + entries[:, 1]
    offsets = np.concatenate([p for _, _, p in pieces])
    covered = _bytes_covered(source, offsets, np.array(definitions, dtype=np.int64), index_pos)
    if covered != index_pos - start:
        # Index records cut off (a file cut between them) leave their topics' messages unlisted.
        raise BagFormatError(f"the index accounts for {covered} of the {index_pos - start} bytes of messages",
                             path=source.path, offset=index_pos, record="index data")
    return build_index("1.2", connections, _whole_file(source), conn_ids, np.zeros_like(conn_ids), time, offsets)


def _bytes_covered(source: Source, at: np.ndarray, definitions: np.ndarray, stop: int) -> int:
    """Bytes of the records the index points at (``at``), plus the message after each definition record
    an entry points at (``definitions``); -1 when a record runs past ``stop``. A complete index covers
    the whole data section."""
    buf = source.array

    def sizes(pos: np.ndarray) -> np.ndarray:
        ok = (pos >= 0) & (pos + 8 <= stop)
        pos = np.where(ok, pos, 0)
        header_len = gather_u32(buf, pos)
        ok &= pos + 8 + header_len <= stop
        size = 8 + header_len + gather_u32(buf, np.where(ok, pos + 4 + header_len, 0))
        return np.where(ok & (pos + size <= stop), size, -1)

    size, following = sizes(at), sizes(definitions + sizes(definitions))
    if (size < 0).any() or (following < 0).any():
        return -1
    return int(size.sum() + following.sum())


def _find_definition(source: Source, start: int, stop: int, topic: str) -> Header:
    """The first definition record of ``topic`` (they precede the topic's first message)."""
    pos = start
    while pos < stop:
        header, data_offset, data_len = read_record_header(source, pos)
        if header.op() == Op.MSG_DEF and header.text("topic") == topic:
            return header
        pos = data_offset + data_len
    raise BagFormatError(f"no message definition record for topic {topic}", path=source.path, offset=start,
                         record="message definition")


def scan_v12(source: Source, start: int, *, reason: str) -> BagIndex:
    """Rebuild a 1.2 bag's index from its records, keeping every complete message.

    Runs of message records of known connections are walked by a kernel (see
    :func:`fastbag.ros1.kernels.v12_message_records`); every other record, and
    any the kernel leaves (a new connection, damage), by the checked parser.
    """
    connections: dict[tuple[str, str], Connection] = {}
    definitions: dict[tuple[str, str], Header] = {}
    rows = _Rows(source, start, _SMALLEST_V12_MESSAGE, "v12_message_records")
    lost = ""
    pos = start
    while pos < source.size:
        pos = rows.walk(pos)
        if pos >= source.size:
            break
        try:
            header, data_offset, data_len = read_record_header(source, pos)
            source.check(data_offset, data_len, header.record)
            op = header.op()
            key = (header.text("topic", ""), header.text("md5", ""))
            if op == Op.MSG_DEF:
                definitions.setdefault(key, header)
            elif op == Op.MSG_DATA:
                if key not in connections:  # a message without a definition record keeps its type name
                    connections[key] = _connection(len(connections), definitions.get(key, header), header)
                    rows.known(header.fields.get("topic", b""), header.fields.get("md5", b""))
                time = header.u32("sec") * 1_000_000_000 + header.u32("nsec")
                rows.add(connections[key].id, time, pos, data_offset, data_len)
        except FastbagError as exc:
            lost = f"; lost the last {source.size - pos} bytes from offset {pos} ({exc})"
            break
        pos = data_offset + data_len
    table = rows.table()
    said = f"{reason}; rebuilt the index by scanning: recovered {len(table)} messages"
    said += lost or "; nothing in the file lost"
    return _scanned("1.2", source, list(connections.values()), table, said)


#: A file up to this many bytes is scanned in Python while Numba is not loaded (its start, ~0.5 s, would cost
#: more than the scan); a larger one loads the kernel, ~50x faster than Python (measured with 4-byte messages:
#: 1.2 7-8 us a message in Python, 0.14 us in the kernel; 1.1 13 us and 0.2 us).
SCAN_IN_PYTHON_UP_TO = 4 << 20
#: The fewest bytes a message record takes, to size the rows' buffer: 1.2's header fields op, sec and nsec
#: and two lengths; 1.1's three newlines and the u32 sec, nsec and length.
_SMALLEST_V12_MESSAGE = 4 + (4 + 4) + (4 + 8) + (4 + 9) + 4
_SMALLEST_V11_MESSAGE = 3 + 12


class _Rows:
    """The messages a scan finds, in file order: (connection id, time ns, record offset, data start, data
    length) rows that a kernel and the checked parser write in turn into one buffer, kept as runs as it
    fills. Also the key of each connection as the kernel compares it: the raw bytes of two parts (1.2:
    topic, md5; 1.1: the three lines, nothing), connection ``c``'s key ``c``."""

    ROOM = 1 << 16  # rows per buffer

    def __init__(self, source: Source, start: int, smallest: int, kernel: str, *extra: int) -> None:
        self.source = source
        self.kernel = None
        rest = max(source.size - start, 0)  # (a 1.2 bag header's data may claim more than the file holds)
        if by_kernel(rest, SCAN_IN_PYTHON_UP_TO):
            from . import kernels
            self.kernel = getattr(kernels, kernel)
        self.extra = extra  # the kernel's arguments after the rows
        self.buffer = np.empty((min(rest // smallest + 1, self.ROOM), 5), dtype=np.int64)
        self.count = 0
        self.runs: list[np.ndarray] = []
        # Grown in place: the kernel gets zero-copy views (a new connection costs no copy of the others').
        self.keys = bytearray()
        self.bounds = array("q", [0])

    def known(self, first: bytes, second: bytes) -> None:
        """The next connection's key."""
        self.keys += first
        self.bounds.append(len(self.keys))
        self.keys += second
        self.bounds.append(len(self.keys))

    def walk(self, pos: int) -> int:
        """Let the kernel take the message records from ``pos`` on (none without it); where it stopped."""
        if self.kernel is None or len(self.bounds) == 1:
            return pos
        keys, bounds = np.frombuffer(self.keys, dtype=np.uint8), np.frombuffer(self.bounds, dtype=np.int64)
        while True:
            self.count, pos = self.kernel(self.source.array, pos, self.source.size, keys, bounds, self.buffer,
                                          self.count, *self.extra)
            if self.count < len(self.buffer):  # stopped at a record, or at the end
                return pos
            self._flush()

    def add(self, *row: int) -> None:
        """One row the parser read."""
        self.buffer[self.count] = row
        self.count += 1
        if self.count == len(self.buffer):
            self._flush()

    def _flush(self) -> None:
        self.runs.append(self.buffer)
        self.buffer = np.empty_like(self.buffer)
        self.count = 0

    def table(self) -> np.ndarray:
        """Every row, ``(n, 5)``."""
        return np.concatenate(self.runs + [self.buffer[:self.count]])


def _scanned(version: str, source: Source, connections: list[Connection], table: np.ndarray,
             problem: str) -> BagIndex:
    conn, time, at, starts, lengths = np.ascontiguousarray(table.T)
    index = build_index(version, connections, _whole_file(source), conn, np.zeros(len(table), np.int64),
                        time, at, recovered=True, spans=(starts, lengths))
    index.problems = [problem] if problem else []
    return index


# -- format 1.1 -------------------------------------------------------------------------

def scan_v11(source: Source) -> BagIndex:
    """Read a 1.1 bag: one pass over its messages (the format has no index).

    Runs of messages of known connections are walked by a kernel (see
    :func:`fastbag.ros1.kernels.v11_message_records`); a new connection, and
    damage, by the checked parser.
    """
    connections: dict[tuple[bytes, bytes, bytes], Connection] = {}
    rows = _Rows(source, len(MAGIC_V11), _SMALLEST_V11_MESSAGE, "v11_message_records", MAX_V11_LINE)
    lost = ""
    pos = len(MAGIC_V11)
    raw = source.array
    while pos < source.size:
        pos = rows.walk(pos)
        if pos >= source.size:
            break
        record = pos
        try:
            lines = []
            for what in ("topic", "md5sum", "type"):
                end = _find_newline(raw, pos, source.size)
                if end < 0:
                    raise BagFormatError(f"the {what} line has no newline within {MAX_V11_LINE} bytes",
                                         path=source.path, offset=pos, record="message")
                lines.append(raw[pos:end].tobytes())
                pos = end + 1
            source.check(pos, 12, "message")
            sec, nsec, length = _V11_TAIL.unpack(source.bytes(pos, 12, "message"))
            source.check(pos + 12, length, "message")
        except FastbagError as exc:
            lost = f"; lost the last {source.size - record} bytes from offset {record} ({exc})"
            break
        key = (lines[0], lines[1], lines[2])
        if key not in connections:
            topic, md5, msgtype = (x.decode("utf-8", "replace") for x in key)
            connections[key] = Connection(len(connections), topic, msgtype, md5, "")
            rows.known(raw[record:pos].tobytes(), b"")
        rows.add(connections[key].id, sec * 1_000_000_000 + nsec, record, pos + 12, length)
        pos += 12 + length
    table = rows.table()
    problem = f"a 1.1 bag was cut short: read {len(table)} complete messages{lost}" if lost else ""
    return _scanned("1.1", source, list(connections.values()), table, problem)


def _find_newline(raw: np.ndarray, start: int, size: int) -> int:
    stop = min(size, start + MAX_V11_LINE)
    hits = np.flatnonzero(raw[start:stop] == 0x0A)
    return start + int(hits[0]) if hits.size else -1
