"""ROS1 bag records: ``u32 header_len | header | u32 data_len | data``.

A header is a run of ``u32 len | name=value`` fields in any order. This module
parses record framing and header fields with every length checked against the
bounds it must stay inside, and offers typed getters that turn a missing or
mis-sized field into a one-sentence :class:`BagFormatError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ..container import Connection
from ..errors import BagFormatError
from ..io.source import BufferSource, Source

MAGIC_V20 = b"#ROSBAG V2.0\n"
MAGIC_V12 = b"#ROSRECORD V1.2\n"
MAGIC_V11 = b"#ROSRECORD V1.1\n"

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TIME = struct.Struct("<II")


class Op(IntEnum):
    """Record kinds (the ``op`` header field)."""

    MSG_DEF = 0x01
    MSG_DATA = 0x02
    BAG_HEADER = 0x03
    INDEX_DATA = 0x04
    CHUNK = 0x05
    CHUNK_INFO = 0x06
    CONNECTION = 0x07


RECORD_NAMES = {
    Op.MSG_DEF: "message definition", Op.MSG_DATA: "message data",
    Op.BAG_HEADER: "bag header", Op.INDEX_DATA: "index data", Op.CHUNK: "chunk",
    Op.CHUNK_INFO: "chunk info", Op.CONNECTION: "connection",
}


def record_name(op: int | None) -> str:
    """A readable name for a record kind."""
    try:
        return RECORD_NAMES[Op(op)]  # type: ignore[arg-type]
    except ValueError:
        return f"unknown (op {op:#04x})" if op is not None else "unknown"


def time_to_ns(sec: int, nsec: int) -> int:
    """ROS ``(sec, nsec)`` as integer nanoseconds."""
    return sec * 1_000_000_000 + nsec


class Header:
    """The fields of one record header (or of a connection's data block).

    ``offset`` is where the header starts in the file (for error messages);
    ``record`` the record kind being read.
    """

    __slots__ = ("fields", "path", "offset", "record")

    def __init__(self, fields: dict[str, bytes], *, path: str, offset: int, record: str) -> None:
        self.fields = fields
        self.path = path
        self.offset = offset
        self.record = record

    @classmethod
    def parse(cls, raw: bytes, *, path: str, offset: int, record: str = "record") -> "Header":
        """Split ``raw`` into fields; ``offset`` is raw's position in the file."""
        fields: dict[str, bytes] = {}
        pos, end = 0, len(raw)
        while pos < end:
            if pos + 4 > end:
                raise BagFormatError(f"header field length at {pos} runs past the header's {end} bytes",
                                     path=path, offset=offset + pos, record=record)
            flen = _U32.unpack_from(raw, pos)[0]
            pos += 4
            if flen > end - pos:
                raise BagFormatError(f"header field of {flen} bytes runs past the header's end",
                                     path=path, offset=offset + pos - 4, record=record)
            field = raw[pos:pos + flen]
            eq = field.find(b"=")
            if eq < 0:
                raise BagFormatError("header field has no '='", path=path, offset=offset + pos, record=record)
            fields[field[:eq].decode("ascii", "replace")] = field[eq + 1:]
            pos += flen
        return cls(fields, path=path, offset=offset, record=record)

    def __contains__(self, name: str) -> bool:
        return name in self.fields

    def _get(self, name: str, size: int | None) -> bytes:
        try:
            value = self.fields[name]
        except KeyError:
            raise BagFormatError(f"header field {name!r} is missing", path=self.path,
                                 offset=self.offset, record=self.record) from None
        if size is not None and len(value) != size:
            raise BagFormatError(f"header field {name!r} has {len(value)} bytes, expected {size}",
                                 path=self.path, offset=self.offset, record=self.record)
        return value

    def op(self) -> int:
        return self._get("op", 1)[0]

    def u32(self, name: str) -> int:
        return _U32.unpack(self._get(name, 4))[0]

    def u64(self, name: str) -> int:
        return _U64.unpack(self._get(name, 8))[0]

    def time(self, name: str) -> int:
        """A ``time`` field (u32 sec, u32 nsec) as int nanoseconds."""
        return time_to_ns(*self.time_parts(name))

    def time_parts(self, name: str) -> tuple[int, int]:
        """A ``time`` field as stored: (u32 sec, u32 nsec)."""
        return _TIME.unpack(self._get(name, 8))

    def text(self, name: str, default: str | None = None) -> str:
        """A string field, decoded as UTF-8 (undecodable bytes replaced)."""
        if default is not None and name not in self.fields:
            return default
        return self._get(name, None).decode("utf-8", "replace")


@dataclass(frozen=True)
class Record:
    """One record's framing: where its header and data are in the file."""

    offset: int        # first byte of the record (its header length)
    header: Header
    data_offset: int
    data_len: int

    @property
    def end(self) -> int:
        """Offset of the next record."""
        return self.data_offset + self.data_len


# A header larger than this is not a bag header: guard against absurd lengths
# before allocating (connection records with long definitions stay far below).
MAX_HEADER_LEN = 1 << 24


def read_record_header(source: Source, offset: int, *, expect: Op | None = None,
                       kind: str | None = None) -> tuple[Header, int, int]:
    """The header of the record at ``offset``, its data offset and its declared data length.

    The data length is not checked against the file: :func:`read_record` does
    that; recovery uses this to salvage a chunk cut off by the end of the file.
    ``kind`` names the record expected there in error messages.
    """
    kind = kind or (RECORD_NAMES[expect] if expect is not None else "next")  # "next record needs..."
    header_len = source.u32(offset, kind)
    if header_len > MAX_HEADER_LEN:
        raise BagFormatError(f"header length {header_len} is implausible", path=source.path,
                             offset=offset, record=kind)
    raw = source.bytes(offset + 4, header_len, kind)
    header = Header.parse(raw, path=source.path, offset=offset + 4, record=kind)
    op = header.op()
    header.record = record_name(op)
    if expect is not None and op != expect:
        raise BagFormatError(f"expected a {kind} record, found a {record_name(op)} record",
                             path=source.path, offset=offset, record=kind)
    data_len_at = offset + 4 + header_len
    return header, data_len_at + 4, source.u32(data_len_at, header.record)


def read_record(source: Source, offset: int, *, expect: Op | None = None, kind: str | None = None) -> Record:
    """Read the record at ``offset`` in the file, checking every length.

    With ``expect`` the op must match. Raises :class:`BagFormatError` naming
    the offset and the record kind when anything runs past the file's end.
    """
    header, data_offset, data_len = read_record_header(source, offset, expect=expect, kind=kind)
    source.check(data_offset, data_len, header.record)
    return Record(offset, header, data_offset, data_len)


def record_end(payload: np.ndarray, at: int) -> int:
    """Where the record at ``payload[at:]`` ends (header length u32, header, data length u32, data), as far
    as ``payload``, perhaps the head of a chunk's payload, holds its lengths (see Container.record_end)."""
    if payload.size < at + 4:
        return at + 4
    data_at = at + 4 + int(payload[at:at + 4].view("<u4")[0])
    if payload.size < data_at + 4:
        return data_at + 4
    return data_at + 4 + int(payload[data_at:data_at + 4].view("<u4")[0])


def gather_u32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Little-endian uint32 at each position of ``at`` (positions must be in bounds).

    Four ``<u4`` views of the buffer, one per alignment, turn the byte-wise
    gather into one element gather per position.
    """
    out = np.empty(at.size, dtype=np.int64)
    align = at & 3
    for r in range(4):
        sel = align == r
        if sel.any():
            words = buf[r:r + (buf.size - r) // 4 * 4].view("<u4")
            out[sel] = words[(at[sel] - r) >> 2]
    return out


SMALL_GROUP = 16  # fewer messages than this are located one by one


def message_spans(buf: np.ndarray, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, chunk: np.ndarray,
                  conn: np.ndarray, time: np.ndarray, *, path: str, kernel: bool = False
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Where each message's serialized bytes lie in ``buf``.

    ``at`` points at message-data records (as the index gives them, in
    ``buf`` coordinates); record ``i`` must lie inside its chunk's payload
    ``buf[lo[i]:hi[i]]``, hold connection id ``conn[i]`` and time ``time[i]``
    (ns) as its index entry says; ``chunk[i]`` is that chunk's file offset
    for error messages. ``buf`` is the whole file (uncompressed chunks: one
    call for a whole read) or one decompressed payload. Returns int64
    ``(starts, lengths)``. The common record (a 38-byte header of ``op``,
    ``conn`` and ``time`` in any order) is located and checked with
    vectorized gathers; anything else (a connection record before the
    message, extra fields, a mismatch to explain) goes through the checked
    record parser. With ``kernel``, a Numba kernel parses every header
    instead (for callers that decode, and so have Numba loaded anyway).
    """
    size = buf.size
    off = at.astype(np.int64)
    starts = np.zeros(off.size, dtype=np.int64)
    lengths = np.zeros(off.size, dtype=np.int64)
    if kernel:
        from .kernels import record_spans
        fast = np.empty(off.size, dtype=bool)
        record_spans(buf, off, np.asarray(lo, np.int64), np.asarray(hi, np.int64), np.asarray(conn, np.int64),
                     np.asarray(time, np.int64), starts, lengths, fast)
    elif off.size < SMALL_GROUP:  # a few large messages: NumPy's fixed cost per call would dominate
        fast = np.zeros(off.size, dtype=bool)
    else:
        fast = (off >= lo) & (off + 8 + 38 <= hi)
    if fast.any() and not kernel:
        o, end = off[fast], hi[fast]
        header_len = gather_u32(buf, o)
        ok = header_len == 38
        # The three fields' offsets; clipped so that rows already failing stay in bounds.
        p = [np.minimum(o + 4, size - 17)]
        lens = []
        for _ in range(3):
            lens.append(gather_u32(buf, p[-1]))
            p.append(np.minimum(p[-1] + 4 + np.minimum(lens[-1], 38), size - 17))
        ok &= (lens[0] + lens[1] + lens[2] + 12) == 38
        found_op = np.zeros(o.size, dtype=bool)
        found_conn = np.zeros(o.size, dtype=bool)
        found_time = np.zeros(o.size, dtype=bool)
        want_conn, want_time = conn[fast], time[fast]
        for k in range(3):
            q = p[k]
            found_op |= (lens[k] == 4) & _named(buf, q, b"op=") & (buf[q + 7] == Op.MSG_DATA)
            found_conn |= (lens[k] == 9) & _named(buf, q, b"conn=") & (gather_u32(buf, q + 9) == want_conn)
            found_time |= (lens[k] == 13) & _named(buf, q, b"time=") & (
                gather_u32(buf, q + 9) * 1_000_000_000 + gather_u32(buf, q + 13) == want_time)
        ok &= found_op & found_conn & found_time
        data_len = gather_u32(buf, np.minimum(o + 42, size - 4))
        ok &= o + 46 + data_len <= end
        idx = np.flatnonzero(fast)[ok]
        starts[idx] = o[ok] + 46
        lengths[idx] = data_len[ok]
        fast[np.flatnonzero(fast)[~ok]] = False
    for i in np.flatnonzero(~fast).tolist():
        a, b = int(lo[i]), int(hi[i])
        start, length = _message_span_slow(buf[a:b], int(off[i]) - a, int(conn[i]), int(time[i]), path,
                                           int(chunk[i]))
        starts[i], lengths[i] = start + a, length
    return starts, lengths


def _named(buf: np.ndarray, at: np.ndarray, name: bytes) -> np.ndarray:
    """True where the header field at ``at`` (its u32 length first) starts with ``name``."""
    ok = np.ones(at.size, dtype=bool)
    for k, byte in enumerate(name):
        ok &= buf[at + 4 + k] == byte
    return ok


def _message_span_slow(payload: np.ndarray, offset: int, conn: int, time: int, path: str,
                       chunk_position: int) -> tuple[int, int]:
    """The checked path of :func:`message_spans` for one record.

    Skips connection (2.0) and message definition (1.2) records that an index
    entry may point at just before the message, and checks the message's
    connection and time (where its header has them) against the index entry.
    """
    inner = BufferSource(payload, f"{path} (chunk at offset {chunk_position})")
    pos = offset
    while True:
        record = read_record(inner, pos, kind="message data")
        header = record.header
        op = header.op()
        if op == Op.MSG_DATA:
            got_conn = header.u32("conn") if "conn" in header else conn
            got_time = header.time("time") if "time" in header else \
                header.u32("sec") * 1_000_000_000 + header.u32("nsec") if "sec" in header else time
            if (got_conn, got_time) != (conn, time):
                raise BagFormatError(f"the index says connection {conn} at time {time} but the message record holds "
                                     f"connection {got_conn} at time {got_time}", path=inner.path, offset=pos,
                                     record="message data")
            return record.data_offset, record.data_len
        if op not in (Op.CONNECTION, Op.MSG_DEF):
            raise BagFormatError(f"index points at a {record_name(op)} record, not message data",
                                 path=inner.path, offset=pos, record="message data")
        pos = record.end


def connection_from_headers(record_header: Header, data: Header) -> Connection:
    """The connection a connection record describes: its header gave ``conn`` and ``topic``, its data
    (a header-format block) the rest."""
    topic = record_header.text("topic", "") or data.text("topic", "")
    latching = data.text("latching", "0").strip() not in ("", "0")
    return Connection(
        id=record_header.u32("conn"), topic=topic, msgtype=data.text("type"), md5sum=data.text("md5sum"),
        definition=data.text("message_definition", ""),
        callerid=data.text("callerid") if "callerid" in data else None, latching=latching,
        header=dict(data.fields))
