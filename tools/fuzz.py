"""A fuzz campaign for fastbag: damaged bags must fail cleanly, never crash, hang or balloon.

Run::

    python -m tools.fuzz --seed 1 --cases 100000 --jobs 2 --timeout 10
    python -m tools.fuzz --seed 1 --case 4711 --verbose      # rerun one case, print what happened
    python -m tools.fuzz --seed 1 --case 4711 --save bad.bag  # and keep its input bytes
    python -m tools.fuzz --seed 1 --cases 100000 --formats mcap  # MCAP seeds only (default: ros1,mcap)

Every case is a damaged copy of a *seed bag*: the real bags of ``../shared/data``
(``ros1v2``, ``ros1legacy``, ``broken``; skipped, with a note, when the folder
is absent) and small bags generated at start-up with :func:`fastbag.tooling.synth.write_bag`
(``DEMO_STREAMS`` and ``MIXED_STREAMS``, shrunk), :class:`fastbag.Writer` (odd types,
empty messages, lost definitions, shared topics, out-of-order chunks) and two
hand-written legacy writers (1.2 indexed and not, 1.1), each in the three
compressions where the format has them. A case is drawn from ``(seed, case
number)`` alone, so it replays anywhere with the same corpus.

MCAP files are seeds too (``--formats``; the MCAP walk, seeds, mutation kinds
and oracles are in :mod:`tools.fuzz_mcap`): the conformance corpus' TenMessages,
OneAttachment and OneMetadata variants and the ROS2 files of ``../shared/data/mcap``,
and files written at start-up with the ``mcap`` package's writer. A case first
draws a format (when there are two), then a seed of it and one of that format's
mutation kinds: record lengths, opcodes, footer and summary offsets, chunk
indexes pointing anywhere, message index entries, CRCs, compressed payloads
(damaged, cut, misnamed, bombs), string / map / array lengths, cuts, a
summary dropped with a chunk damaged, a message's byte changed with its chunk
recompressed, and havoc.

Mutation kinds (see :data:`KINDS` for their shares): truncation at a record
boundary and at a random offset; bit flips in record headers, in chunk data, in
message payloads, in index records; length and count fields set to 0, 1,
0x7fffffff, 0xffffffff, neighbours and random values; compression names
replaced; lz4 / bz2 payloads corrupted (magic, flags, block sizes, a forged
content size with a valid header checksum, cut streams, the other codec, and
decompression bombs whose ``size`` header stays small); messages made shorter or
longer than their definitions; definitions with unknown types, cycles,
malformed lines, absurd array sizes (``float64[4294967295] x``), deep nesting,
changed or dropped fields, non-UTF-8 bytes, arrays of elements that take no
bytes and thousands of unresolvable names; unindexed copies with a damaged
chunk (payload or header); and havoc (stacked damage, records deleted,
duplicated, swapped, random bytes). Messages and definitions are damaged by
rewriting the seed's messages with :class:`fastbag.Writer`, so the rest of the
bag stays well formed and the damage is the only thing wrong.

Each case runs what a user runs: ``fastbag.open``, the metadata, every raw
message (``bytes(m.data)``), the attachments and metadata (MCAP), ``read()`` of every topic and a touch of every field
of the result (``np.asarray`` / ``tobytes`` of arrays, ``len()``, ``[0]``, ``[-1]``
and ``.values`` of Ragged and Nested, ``to_numpy()``, ``arr[i].to_dict()`` for
small results), decoded ``messages()`` for some cases, and the sensor helpers
for PointCloud2 / Image topics. It checks:

- only ``fastbag.FastbagError`` subclasses escape; a BagFormatError names the
  file, an offset and a record; a DecodeError names the topic and, for a
  message, its index; every warning is a ``fastbag.FastbagWarning``;
- no crash: cases run in worker processes (``--jobs``), each running many
  cases; a worker that dies is restarted and the case it held is reported
  with the signal and its mutation (each case is announced before it runs);
- no hang: a case taking longer than ``--timeout`` seconds kills its worker;
  it is retried once in a fresh worker (a busy machine is not a hang) and
  reported if it times out again;
- no huge allocation: :data:`TRACED_SHARE` of the cases trace every allocation
  (``tracemalloc``: the peak per case, attributed to the library function
  holding it) under an address-space limit of ``--memory-cap`` MiB above the
  worker's size, so a claimed size up to 4 GiB is allocated and seen; the
  other cases run with ``RLIMIT_AS`` capped at what the file justifies
  (``OVERSIZE_FLOOR + OVERSIZE_FACTOR x size`` plus slack), so a runaway
  allocation becomes a MemoryError the case reports. A traced peak above
  that bound is an oversize allocation. The largest ratio of peak to file
  size (and of ``ru_maxrss`` growth) is reported;
- results that can be known are right: a cut bag yields every message of every
  complete chunk and nothing that was not in the bag, in time order, with a
  warning saying what was lost; damage confined to the index section yields the
  intact bag's messages or a warning or an error; a damaged chunk in an
  unindexed bag loses that chunk only; a flipped payload byte changes that
  message only and a decode failure names it; a message made shorter or longer
  than its definition is a DecodeError naming its topic and index; a damaged
  definition leaves raw reading untouched; and in every case the messages come
  in time order, as many as ``message_count`` says, and ``read(topic)`` agrees
  with the raw messages of the topic.

At the end it prints the counts (cases, crashes, hangs, non-fastbag exceptions,
oversize allocations, wrong results, bad error messages: each should be zero),
cases per second, the largest allocation ratio, the share and cost of each
mutation kind, and one reproduction line per failing case. Failures that match a
defect already known (:data:`KNOWN_DEFECTS`) are labelled with it.
"""

from __future__ import annotations

import argparse
import bz2
import dataclasses
import functools
import json
import os
import random
import resource
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
import warnings
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

import fastbag
from fastbag.errors import BagFormatError, DecodeError, FastbagError, FastbagWarning, UnsupportedError
from fastbag.tooling import synth

#: The repository: workers run as ``python -m tools.fuzz`` from here.
REPO_ROOT = Path(__file__).resolve().parents[1]

MAGIC20 = b"#ROSBAG V2.0\n"
MAGIC12 = b"#ROSRECORD V1.2\n"
MAGIC11 = b"#ROSRECORD V1.1\n"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

#: A case whose traced peak allocation exceeds this multiple of the file size ...
OVERSIZE_FACTOR = 64
#: ... and this many bytes is an oversize allocation.
OVERSIZE_FLOOR = 64 << 20
#: Share of the cases run with every allocation traced (the others run under a tight RLIMIT_AS).
TRACED_SHARE = 0.3
#: Address space a capped case may use beyond what the file justifies (threads' stacks, arenas, Numba).
CAPPED_SLACK = 256 << 20
#: Results this small are touched record by record (``arr[i].to_dict()``).
SMALL = 24
#: ... and their messages hold at most this many bytes in all.
SMALL_BYTES = 64 << 10
#: Real seed bags larger than this are left out (throughput: a case should take milliseconds).
MAX_SEED_SIZE = 1_200_000

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# -- a record walk of the seed bags (independent of fastbag's parser) -----------------


@dataclass
class Rec:
    """One record: ``u32 header_len | header | u32 data_len | data`` at absolute offsets."""

    start: int
    header_len: int
    data_start: int
    data_len: int
    fields: dict[str, tuple[int, int]]   # name -> (value offset, value length), first occurrence
    field_starts: list[int]              # offset of each field's u32 length
    op: int | None
    inner: bool = False                  # inside an uncompressed chunk
    chunk: int | None = None             # the chunk holding it (inner records)

    @property
    def end(self) -> int:
        return self.data_start + self.data_len


@dataclass
class Msg:
    """One message as the walk finds it."""

    topic: str
    time: int
    data: bytes
    chunk: int                  # chunk index (2.0), -1 for legacy formats
    end: int | None             # absolute end of its record in the file, where known (uncompressed)
    data_start: int | None      # absolute start of its serialized bytes, where known
    conn: Any = None


@dataclass
class ChunkInfo:
    rec: Rec
    compression: str
    size: int
    payload: bytes | None       # decompressed (None when it does not decompress)
    inner: list[Rec] = field(default_factory=list)   # records, offsets relative to the payload
    messages: list[Msg] = field(default_factory=list)


@dataclass
class Structure:
    """What a bag holds, from a forgiving walk of its records."""

    version: str | None
    size: int
    records: list[Rec] = field(default_factory=list)      # top level
    inner: list[Rec] = field(default_factory=list)        # inside uncompressed chunks (absolute offsets)
    chunks: list[ChunkInfo] = field(default_factory=list)
    messages: list[Msg] = field(default_factory=list)     # file order
    conn_end: dict[Any, int] = field(default_factory=dict)  # connection -> end of its first record
    index_pos: int = 0
    header_end: int = 0
    complete: bool = True                                 # the walk reached the end of the file
    numeric: list[tuple[int, int, str]] = field(default_factory=list)  # (offset, width, label)

    def in_index_section(self, offset: int) -> bool:
        return self.version == "2.0" and 0 < self.index_pos <= offset

    def boundaries(self) -> list[int]:
        out = {self.header_end, self.size}
        out |= {r.end for r in self.records} | {r.end for r in self.inner} | {r.start for r in self.records}
        out |= {m.end for m in self.messages if m.end is not None}
        return sorted(b for b in out if 0 < b <= self.size)


def _parse_fields(data: bytes, start: int, end: int) -> tuple[dict[str, tuple[int, int]], list[int]]:
    fields: dict[str, tuple[int, int]] = {}
    starts: list[int] = []
    p = start
    while p + 4 <= end:
        n = _U32.unpack_from(data, p)[0]
        if p + 4 + n > end:
            break
        raw = data[p + 4:p + 4 + n]
        eq = raw.find(b"=")
        starts.append(p)
        if eq >= 0:
            fields.setdefault(raw[:eq].decode("latin-1"), (p + 5 + eq, n - eq - 1))
        p += 4 + n
    return fields, starts


def _records(data: bytes, pos: int, end: int, base: int = 0) -> tuple[list[Rec], bool]:
    """Records of ``data[pos:end]``; offsets shifted by ``base``; False when the walk stopped early."""
    out = []
    while pos < end:
        if pos + 4 > end:
            return out, False
        hlen = _U32.unpack_from(data, pos)[0]
        if pos + 8 + hlen > end:
            return out, False
        fields, starts = _parse_fields(data, pos + 4, pos + 4 + hlen)
        dlen = _U32.unpack_from(data, pos + 4 + hlen)[0]
        if pos + 8 + hlen + dlen > end:
            return out, False
        op = data[fields["op"][0]] if "op" in fields and fields["op"][1] == 1 else None
        out.append(Rec(pos + base, hlen, pos + 8 + hlen + base, dlen,
                       {k: (v + base, n) for k, (v, n) in fields.items()}, [s + base for s in starts], op))
        pos += 8 + hlen + dlen
    return out, True


def _value(data: bytes, rec: Rec, name: str, base: int = 0) -> bytes | None:
    if name not in rec.fields:
        return None
    at, n = rec.fields[name]
    return data[at - base:at - base + n]


def _u32_of(raw: bytes | None) -> int | None:
    return _U32.unpack(raw)[0] if raw is not None and len(raw) == 4 else None


def _time_of(raw: bytes | None) -> int | None:
    if raw is None or len(raw) != 8:
        return None
    sec, nsec = struct.unpack("<II", raw)
    return sec * 1_000_000_000 + nsec


def _decompress(compression: str, raw: bytes) -> bytes | None:
    try:
        if compression == "none":
            return raw
        if compression == "bz2":
            return bz2.decompress(raw)
        if compression == "lz4":
            import lz4.frame
            return lz4.frame.decompress(raw)
    except Exception:  # noqa: BLE001 - a seed may be broken; the walk just knows less
        return None
    return None


_NUMERIC = {"index_pos": 8, "conn_count": 4, "chunk_count": 4, "size": 4, "count": 4, "ver": 4, "conn": 4,
            "chunk_pos": 8, "start_time": 8, "end_time": 8, "time": 8, "sec": 4, "nsec": 4, "op": 1}


def _numeric_of(rec: Rec) -> list[tuple[int, int, str]]:
    out = [(rec.start, 4, "header_len"), (rec.data_start - 4, 4, "data_len")]
    out += [(s, 4, "field_len") for s in rec.field_starts]
    out += [(at, n, name) for name, (at, n) in rec.fields.items() if _NUMERIC.get(name) == n]
    return out


def walk(data: bytes) -> Structure:
    """Walk a bag of any supported version; never raises."""
    if data.startswith(MAGIC20):
        return _walk_v20(data)
    if data.startswith(MAGIC12):
        return _walk_v12(data)
    if data.startswith(MAGIC11):
        return _walk_v11(data)
    return Structure(None, len(data), complete=False)


def _walk_v20(data: bytes) -> Structure:
    s = Structure("2.0", len(data))
    s.records, s.complete = _records(data, len(MAGIC20), len(data))
    if not s.records:
        return s
    header = s.records[0]
    s.header_end = header.end
    index_pos = _value(data, header, "index_pos")
    s.index_pos = _U64.unpack(index_pos)[0] if index_pos is not None and len(index_pos) == 8 else 0
    topics: dict[int, str] = {}
    for rec in s.records:
        s.numeric += _numeric_of(rec)
        if rec.op == 0x07:
            conn = _u32_of(_value(data, rec, "conn"))
            topic = _value(data, rec, "topic")
            if conn is not None and topic is not None:
                topics.setdefault(conn, topic.decode("utf-8", "replace"))
                s.conn_end.setdefault(conn, rec.end)
        elif rec.op == 0x04:  # index data entries: time, offset
            for k in range(min(rec.data_len // 12, 64)):
                at = rec.data_start + 12 * k
                s.numeric += [(at, 4, "entry_sec"), (at + 8, 4, "entry_offset")]
        elif rec.op == 0x06:  # chunk info: (conn, count) pairs
            for k in range(min(rec.data_len // 8, 64)):
                s.numeric += [(rec.data_start + 8 * k, 4, "info_conn"), (rec.data_start + 8 * k + 4, 4, "info_count")]
        elif rec.op == 0x05:
            compression = (_value(data, rec, "compression") or b"?").decode("latin-1")
            size = _u32_of(_value(data, rec, "size")) or 0
            payload = _decompress(compression, data[rec.data_start:rec.end])
            chunk = ChunkInfo(rec, compression, size, payload)
            k = len(s.chunks)
            s.chunks.append(chunk)
            if payload is None:
                continue
            base = rec.data_start if compression == "none" else 0
            chunk.inner, _ = _records(payload, 0, len(payload))
            for r in chunk.inner:
                r.inner, r.chunk = True, k
                absolute = dataclasses.replace(r, start=r.start + base, data_start=r.data_start + base,
                                               fields={n: (a + base, m) for n, (a, m) in r.fields.items()},
                                               field_starts=[x + base for x in r.field_starts])
                if compression == "none":
                    s.inner.append(absolute)
                    s.numeric += _numeric_of(absolute)
                end_in_file = r.end + base if compression == "none" else rec.end
                if r.op == 0x07:
                    conn = _u32_of(_value(payload, r, "conn"))
                    topic = _value(payload, r, "topic")
                    if topic is None:
                        fields, _ = _parse_fields(payload, r.data_start, r.end)
                        topic = _value(payload, Rec(0, 0, 0, 0, fields, [], None), "topic")
                    if conn is not None and topic is not None:
                        topics.setdefault(conn, topic.decode("utf-8", "replace"))
                        s.conn_end.setdefault(conn, end_in_file)
                elif r.op == 0x02:
                    conn = _u32_of(_value(payload, r, "conn"))
                    t = _time_of(_value(payload, r, "time"))
                    if conn is None or t is None:
                        continue
                    m = Msg("", t, payload[r.data_start:r.end], k,
                            r.end + base if compression == "none" else None,
                            r.data_start + base if compression == "none" else None, conn)
                    chunk.messages.append(m)
                    s.messages.append(m)
    for m in s.messages:
        m.topic = topics.get(m.conn, "?")
    return s


def _walk_v12(data: bytes) -> Structure:
    s = Structure("1.2", len(data))
    s.records, s.complete = _records(data, len(MAGIC12), len(data))
    s.header_end = len(MAGIC12)
    for rec in s.records:
        s.numeric += _numeric_of(rec)
        if rec.op == 0x03:
            raw = _value(data, rec, "index_pos")
            s.index_pos = _U64.unpack(raw)[0] if raw is not None and len(raw) == 8 else 0
            s.header_end = rec.end
        elif rec.op == 0x04:
            for k in range(min(rec.data_len // 16, 64)):
                s.numeric += [(rec.data_start + 16 * k + 8, 8, "entry_pos")]
        elif rec.op == 0x02:
            topic = (_value(data, rec, "topic") or b"?").decode("utf-8", "replace")
            sec, nsec = _u32_of(_value(data, rec, "sec")), _u32_of(_value(data, rec, "nsec"))
            if sec is None or nsec is None:
                continue
            key = (topic, _value(data, rec, "md5"))
            s.conn_end.setdefault(key, rec.end)
            s.messages.append(Msg(topic, sec * 1_000_000_000 + nsec, data[rec.data_start:rec.end], -1, rec.end,
                                  rec.data_start, key))
    return s


def _walk_v11(data: bytes) -> Structure:
    s = Structure("1.1", len(data))
    s.header_end = pos = len(MAGIC11)
    while pos < len(data):
        lines, p = [], pos
        for _ in range(3):
            nl = data.find(b"\n", p, p + 4096)
            if nl < 0:
                break
            lines.append(data[p:nl])
            p = nl + 1
        if len(lines) < 3 or p + 12 > len(data):
            s.complete = False
            break
        sec, nsec, n = struct.unpack_from("<III", data, p)
        if p + 12 + n > len(data):
            s.complete = False
            break
        s.numeric += [(p + 8, 4, "length"), (p, 4, "sec")]
        rec = Rec(pos, p - pos, p + 12, n, {}, [], 0x02)
        s.records.append(rec)
        key = tuple(lines)
        s.conn_end.setdefault(key, rec.end)
        s.messages.append(Msg(lines[0].decode("utf-8", "replace"), sec * 1_000_000_000 + nsec,
                              data[p + 12:p + 12 + n], -1, p + 12 + n, p + 12, key))
        pos = p + 12 + n
    return s


# -- seed bags ---------------------------------------------------------------------------


@dataclass
class SeedSpec:
    """A seed bag: a file and how to open it."""

    name: str
    path: str
    origin: str                      # "real" or "gen"
    open_kwargs: dict[str, Any] = field(default_factory=dict)
    format: str = "ros1"             # "ros1" or "mcap": which walk, mutators and oracles apply
    weight: float = 1.0              # how often it is drawn, relative to its pool


def _serialize_string(text: bytes) -> bytes:
    return _U32.pack(len(text)) + text


STRING_DEF = "string data\n"
INT32_DEF = "int32 data\n"
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"

# A type exercising every layout path: constants, time/duration, fixed arrays,
# string[], dynamic arrays of fixed structs, arrays of variable structs, nesting.
ODD_DEF = """# every kind of field
uint8 KIND_A=1
string NAME=odd # not a comment
Header header
time t
duration d
bool flag
int8[3] small
string[] names
fuzz_msgs/Pair[] pairs
fuzz_msgs/Labelled[] labelled
fuzz_msgs/Labelled[2] two
float32[] values
uint8[] blob
================================================================================
MSG: std_msgs/Header
uint32 seq
time stamp
string frame_id
================================================================================
MSG: fuzz_msgs/Pair
int16 a
float64 b
================================================================================
MSG: fuzz_msgs/Labelled
string label
fuzz_msgs/Pair[] pairs
uint64 id
"""


def _odd_message(k: int, rng: random.Random) -> bytes:
    def pair(i: int) -> bytes:
        return struct.pack("<hd", i - 3, i * 0.5)

    def labelled(i: int) -> bytes:
        return _serialize_string(f"l{i}".encode()) + _U32.pack(i % 3) + b"".join(pair(j) for j in range(i % 3)) + \
            _U64.pack(i)

    frame = [b"", b"map", b"\xff\xfe", "é".encode()][k % 4]
    out = struct.pack("<III", k, 1000 + k, k) + _serialize_string(frame)
    out += struct.pack("<IIii", k, 5, -k, 7) + bytes([k % 2]) + struct.pack("<bbb", -1, 0, k % 100)
    names = [f"n{i}".encode() for i in range(k % 4)]
    out += _U32.pack(len(names)) + b"".join(_serialize_string(n) for n in names)
    out += _U32.pack(k % 5) + b"".join(pair(i) for i in range(k % 5))
    out += _U32.pack(k % 3) + b"".join(labelled(i) for i in range(k % 3))
    out += labelled(k) + labelled(k + 1)
    nvals = [0, 3, 3, 17][k % 4]
    out += _U32.pack(nvals) + struct.pack(f"<{nvals}f", *[rng.random() for _ in range(nvals)])
    blob = bytes(rng.randrange(256) for _ in range(k % 40))
    return out + _U32.pack(len(blob)) + blob


def _odd_md5() -> str:
    from fastbag.msg.msgdef import parse_definition
    return parse_definition("fuzz_msgs/Odd", ODD_DEF).md5sum()


def write_types_bag(path: str, compression: str, seed: int) -> None:
    """A Writer bag with odd types, empty messages, a lost definition (which the Writer warns of, as meant), a
    shared topic, unsorted chunks."""
    rng = random.Random(seed)
    with fastbag.Writer(path, compression=compression, chunk_size=900) as w, warnings.catch_warnings():
        warnings.simplefilter("ignore", FastbagWarning)
        s = w.add_connection("/str", "std_msgs/String", STRING_DEF, "992ce8a1687cec8c8bd883ec73ca41d1",
                             callerid="/talker")
        i = w.add_connection("/i32", "std_msgs/Int32", INT32_DEF, "da5909fbe378aeaf85e547e830cc1bb7",
                             latching=True)
        e = w.add_connection("/empty", "std_msgs/Empty", "", EMPTY_MD5)
        o = w.add_connection("/odd", "fuzz_msgs/Odd", ODD_DEF, _odd_md5())
        lost = w.add_connection("/lost", "fuzz_msgs/Lost", "", "0123456789abcdef0123456789abcdef")
        s2 = w.add_connection("/str", "std_msgs/String", STRING_DEF, "992ce8a1687cec8c8bd883ec73ca41d1",
                              callerid="/other")
        t0 = 1_600_000_000 * 10**9
        blocks = []
        for b in range(6):
            rows = []
            for k in range(b * 8, b * 8 + 8):
                t = t0 + k * 10_000_000
                text = [b"", b"hello", b"\xff\x00bytes", "ünï".encode(), b"x" * (k * 3)][k % 5]
                rows.append((s if k % 3 else s2, t, _serialize_string(text)))
                rows.append((i, t, struct.pack("<i", -k)))  # same time as /str: ties
                if k % 4 == 0:
                    rows.append((e, t + 1, b""))
                rows.append((o, t + 2, _odd_message(k, rng)))
                if k % 6 == 0:
                    rows.append((lost, t + 3, bytes(range(k % 9))))
            blocks.append(rows)
        rng.shuffle(blocks)  # chunks out of time order
        for rows in blocks:
            for conn, t, data in rows:
                w.write(conn, t, data)


def write_empty_bags(root: Path) -> list[SeedSpec]:
    out = []
    path = root / "gen-no-messages.bag"
    with fastbag.Writer(path) as w:
        w.add_connection("/nothing", "std_msgs/String", STRING_DEF, "992ce8a1687cec8c8bd883ec73ca41d1")
    out.append(SeedSpec(path.name, str(path), "gen"))
    path = root / "gen-no-connections.bag"
    with fastbag.Writer(path):
        pass
    out.append(SeedSpec(path.name, str(path), "gen"))
    return out


def _record(fields: list[tuple[str, bytes]], data: bytes = b"") -> bytes:
    header = b"".join(_U32.pack(len(k) + 1 + len(v)) + k.encode() + b"=" + v for k, v in fields)
    return _U32.pack(len(header)) + header + _U32.pack(len(data)) + data


V12_TYPES = {
    "/chatter": ("std_msgs/String", STRING_DEF, "992ce8a1687cec8c8bd883ec73ca41d1"),
    "/count": ("std_msgs/Int32", INT32_DEF, "da5909fbe378aeaf85e547e830cc1bb7"),
    "/odd": ("fuzz_msgs/Odd", ODD_DEF, None),
}


def _legacy_rows(seed: int, n: int = 36) -> list[tuple[str, int, bytes]]:
    rng = random.Random(seed)
    rows = []
    t0 = 1_262_304_000 * 10**9
    for k in range(n):
        topic = list(V12_TYPES)[k % 3]
        t = t0 + k * 20_000_000 + (0 if k % 5 else -5_000_000)  # a few out of order
        if topic == "/chatter":
            data = _serialize_string(f"msg {k} ".encode() * (k % 4))
        elif topic == "/count":
            data = struct.pack("<i", k * 7)
        else:
            data = _odd_message(k, rng)
        rows.append((topic, t, data))
    return rows


def write_v12(path: str, seed: int, *, indexed: bool) -> None:
    """A format 1.2 bag: header (index_pos), definition records, messages, per-topic index records."""
    md5 = {t: m or _odd_md5() for t, (_, _, m) in V12_TYPES.items()}
    blob = bytearray(MAGIC12)
    header_at = len(blob)
    blob += _record([("op", b"\x03"), ("index_pos", bytes(8))], b" " * 4000)
    positions: dict[str, list[tuple[int, int]]] = defaultdict(list)
    defined: set[str] = set()
    for topic, t, data in _legacy_rows(seed):
        msgtype, definition, _ = V12_TYPES[topic]
        first = topic not in defined
        if first:
            defined.add(topic)
            positions[topic].append((t, len(blob)))  # the first entry points at the definition
            blob += _record([("op", b"\x01"), ("topic", topic.encode()), ("md5", md5[topic].encode()),
                             ("type", msgtype.encode()), ("def", definition.encode())])
        else:
            positions[topic].append((t, len(blob)))
        sec, nsec = divmod(t, 10**9)
        blob += _record([("op", b"\x02"), ("topic", topic.encode()), ("md5", md5[topic].encode()),
                         ("type", msgtype.encode()), ("sec", _U32.pack(sec)), ("nsec", _U32.pack(nsec))], data)
    if indexed:
        index_pos = len(blob)
        for topic, entries in positions.items():
            body = b"".join(struct.pack("<IIQ", *divmod(t, 10**9), pos) for t, pos in entries)
            blob += _record([("op", b"\x04"), ("ver", _U32.pack(0)), ("topic", topic.encode()),
                             ("type", V12_TYPES[topic][0].encode()), ("count", _U32.pack(len(entries)))], body)
        at = blob.index(b"index_pos=", header_at) + len(b"index_pos=")
        blob[at:at + 8] = _U64.pack(index_pos)
    Path(path).write_bytes(bytes(blob))


def write_v11(path: str, seed: int) -> None:
    blob = bytearray(MAGIC11)
    md5 = {t: m or _odd_md5() for t, (_, _, m) in V12_TYPES.items()}
    for topic, t, data in _legacy_rows(seed):
        sec, nsec = divmod(t, 10**9)
        blob += f"{topic}\n{md5[topic]}\n{V12_TYPES[topic][0]}\n".encode() + struct.pack("<III", sec, nsec, len(data))
        blob += data
    Path(path).write_bytes(bytes(blob))


V11_DEFINITIONS = {
    "std_msgs/String": "string data", "std_msgs/Int32": "int32 data", "std_msgs/Header": "uint32 seq\ntime stamp\n"
    "string frame_id", "fuzz_msgs/Odd": ODD_DEF.split("=" * 80)[0], "fuzz_msgs/Pair": "int16 a\nfloat64 b",
    "fuzz_msgs/Labelled": "string label\nfuzz_msgs/Pair[] pairs\nuint64 id",
}


def _small_streams(kind: str) -> tuple[synth.Stream, ...]:
    """DEMO_STREAMS / MIXED_STREAMS with tiny images, clouds and scans (a case must take milliseconds)."""
    small = {
        "/camera/image_raw": functools.partial(synth.image, height=6, width=8),
        "/scan": functools.partial(synth.laserscan, beams=24),
    }
    streams = synth.DEMO_STREAMS if kind == "demo" else synth.MIXED_STREAMS
    return tuple(dataclasses.replace(s, generate=small.get(s.topic, s.generate)) for s in streams)


def build_generated(root: Path, seed: int) -> list[SeedSpec]:
    """The generated seed bags (deterministic for a seed)."""
    root.mkdir(parents=True, exist_ok=True)
    seeds = []
    for compression in ("none", "lz4", "bz2"):
        path = root / f"gen-demo-{compression}.bag"
        synth.write_bag(path, _small_streams("demo"), seconds=0.25, compression=compression, seed=seed,
                        chunk_size=4096, points=64)
        seeds.append(SeedSpec(path.name, str(path), "gen"))
        path = root / f"gen-mixed-{compression}.bag"
        synth.write_bag(path, _small_streams("mixed"), seconds=0.15, compression=compression, seed=seed + 1,
                        chunk_size=6000, points=40)
        seeds.append(SeedSpec(path.name, str(path), "gen"))
        path = root / f"gen-types-{compression}.bag"
        write_types_bag(str(path), compression, seed)
        seeds.append(SeedSpec(path.name, str(path), "gen"))
    path = root / "gen-demo-ragged-lz4.bag"  # clouds above DENSE_LIMIT: Ragged views of decompressed chunks
    synth.write_bag(path, _small_streams("demo"), seconds=0.2, compression="lz4", seed=seed, chunk_size=30000,
                    points=1024)
    seeds.append(SeedSpec(path.name, str(path), "gen"))
    path = root / "gen-demo-ragged-none.bag"
    synth.write_bag(path, _small_streams("demo"), seconds=0.2, compression="none", seed=seed, chunk_size=30000,
                    points=1024)
    seeds.append(SeedSpec(path.name, str(path), "gen"))
    seeds += write_empty_bags(root)
    for indexed in (True, False):
        path = root / f"gen-v12-{'indexed' if indexed else 'unindexed'}.bag"
        write_v12(str(path), seed, indexed=indexed)
        seeds.append(SeedSpec(path.name, str(path), "gen"))
    path = root / "gen-v11.bag"
    write_v11(str(path), seed)
    seeds.append(SeedSpec(path.name, str(path), "gen", {"definitions": V11_DEFINITIONS}))
    path = root / "gen-v11-nodefs.bag"
    write_v11(str(path), seed + 1)
    seeds.append(SeedSpec(path.name, str(path), "gen"))
    return seeds


def real_seeds(data: Path, max_size: int = MAX_SEED_SIZE) -> list[SeedSpec]:
    """The real bags of ``data`` (ros1v2, ros1legacy, broken), up to ``max_size`` bytes; [] when absent."""
    out = []
    for folder in ("ros1v2", "ros1legacy", "broken"):
        d = data / folder
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.bag")):
            if path.stat().st_size <= max_size:
                out.append(SeedSpec(f"{folder}/{path.name}", str(path), "real"))
    return out


# -- exercising a bag ------------------------------------------------------------------------


@dataclass
class Problem:
    """A guarantee broken by a case."""

    category: str      # exception | oversize | wrong | message | warning | harness
    stage: str
    text: str
    signature: str     # for grouping: category, exception type, where


@dataclass
class Outcome:
    """What running a bag did."""

    opened: bool = False
    open_error: str | None = None
    recovered: bool = False
    message_count: int | None = None
    raw: list[tuple[str, int, bytes]] | None = None     # None: the raw iteration raised
    raw_error: str | None = None
    topic_counts: dict[str, int] = field(default_factory=dict)
    reads: dict[str, Any] = field(default_factory=dict)  # topic -> ("ok", n, times) | ("error", type, index, text)
    attachments: list[tuple[str, str, bytes]] | None = None  # (name, media type, data); None: raised
    metadata: list[tuple[str, tuple]] | None = None           # (name, sorted items); None: raised
    after_raw: list[tuple[str, int, bytes]] | None = None     # messages(raw=True, start=after), where asked
    after_raw_error: str | None = None
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)     # FastbagError class names seen
    peak: int = 0
    rss_growth: int = 0
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)


def _where(exc: BaseException) -> str:
    """The innermost frame inside fastbag (or the last frame) of an exception: file:function."""
    tb = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in tb if "fastbag" in f.filename and not f.filename.endswith("fuzz.py")]
    frame = (inside or tb or [None])[-1]
    if frame is None:
        return "?"
    return f"{Path(frame.filename).name}:{frame.name}"


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        out.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return out


# Errors about a type, not a message: they name the topic and type, and no message index.
_DEFINITION_LEVEL = ("definition cannot be parsed", "different message formats", "can only be read raw",
                     "supplied definitions cannot describe", "protobuf schema cannot be loaded")


class Runner:
    """Runs one bag through everything a user does, recording problems instead of stopping."""

    def __init__(self, path: str, *, open_kwargs: dict[str, Any] | None = None, decoded: bool = False,
                 verbose: bool = False, sensors: bool = True, after: int | None = None) -> None:
        self.path = path
        self.after = after  # also read the raw messages from this time on (an oracle knows what they are)
        self.open_kwargs = open_kwargs or {}
        self.decoded = decoded
        self.sensors = sensors
        self.verbose = verbose
        self.out = Outcome()

    def log(self, text: str) -> None:
        self.out.log.append(text)
        if self.verbose:
            print("   ", text, flush=True)

    def problem(self, category: str, stage: str, text: str, signature: str) -> None:
        self.out.problems.append(Problem(category, stage, text, signature))
        self.log(f"PROBLEM [{category}] {stage}: {text}")

    def guarded(self, stage: str, fn: Callable[[], Any], *, topic: str | None = None) -> tuple[bool, Any]:
        """Run ``fn``; FastbagErrors are checked and recorded, anything else is a problem."""
        try:
            return True, fn()
        except FastbagError as exc:
            self.out.errors[type(exc).__name__] += 1
            self.check_error(stage, exc, topic)
            self.log(f"{stage}: {type(exc).__name__}: {exc}")
            return False, exc
        except MemoryError as exc:
            self.problem("oversize", stage, f"MemoryError: {exc}", f"oversize MemoryError {_where(exc)}")
            return False, exc
        except RecursionError as exc:
            self.problem("exception", stage, f"RecursionError: {str(exc)[:200]}",
                         f"exception RecursionError {_where(exc)}")
            return False, exc
        except Exception as exc:  # noqa: BLE001 - the point of the campaign
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300]
            self.problem("exception", stage, text + f" [at {_where(exc)}]",
                         f"exception {type(exc).__name__} {_where(exc)}")
            if self.verbose:
                traceback.print_exc()
            return False, exc

    def check_error(self, stage: str, exc: FastbagError, topic: str | None) -> None:
        text = str(exc)
        for inner in _chain(exc):
            if isinstance(inner, MemoryError):
                self.problem("oversize", stage, f"{type(exc).__name__} caused by MemoryError: {text[:200]}",
                             f"oversize MemoryError {_where(exc)}")
                break
        if isinstance(exc, BagFormatError):
            if exc.path is None or not str(exc.path).startswith(self.path) or exc.offset is None or \
                    exc.record is None or self.path not in text or "offset" not in text:
                self.problem("message", stage, f"BagFormatError without file, offset and record: {text[:200]}",
                             f"message BagFormatError {_where(exc)}")
        elif isinstance(exc, DecodeError):
            stage_topic = topic
            if stage_topic is not None and exc.topic != stage_topic:
                self.problem("message", stage, f"DecodeError names topic {exc.topic!r}, not {stage_topic!r}: "
                             f"{text[:200]}", f"message DecodeError-topic {_where(exc)}")
            elif exc.index is None and not any(k in text for k in _DEFINITION_LEVEL) and \
                    not stage.startswith("sensors"):
                self.problem("message", stage, f"DecodeError without a message index: {text[:200]}",
                             f"message DecodeError-index {_where(exc)}")
        elif isinstance(exc, UnsupportedError):
            # The sensor helpers see arrays, not files: like their DecodeErrors, they name topic and message.
            # read() of an encoding that does not decode into arrays (MCAP: cdr today, json, protobuf ...)
            # is about the topic, not about bytes of the file: it names the topic.
            named = (stage.startswith("sensors") and "topic " in text and "message " in text) or \
                (topic is not None and stage.startswith(("read ", "fresh read ")) and topic in text) or \
                (stage == "decoded" and "topic " in text and "decod" in text)
            if self.path not in text and not named:
                self.problem("message", stage, f"UnsupportedError without the file: {text[:200]}",
                             f"message UnsupportedError {_where(exc)}")

    # -- the run -----------------------------------------------------------------------
    def run(self) -> Outcome:
        out = self.out
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok, bag = self.guarded("open", lambda: fastbag.open(self.path, **self.open_kwargs))
            if ok:
                out.opened = True
                try:
                    self.exercise(bag)
                    said = bool(bag.problems)
                finally:
                    self.guarded("close", bag.close)
                self.fresh_reads()
                self.fresh_window(said_problems=said or any(issubclass(w.category, FastbagWarning) for w in caught))
            else:
                out.open_error = f"{type(bag).__name__}: {bag}"
        out.seconds = time.perf_counter() - start
        for w in caught:
            text = str(w.message)
            out.warnings.append(text)
            if not issubclass(w.category, FastbagWarning):
                self.problem("warning", "warn", f"{w.category.__name__}: {text[:200]} ({Path(w.filename).name}:"
                             f"{w.lineno})", f"warning {w.category.__name__} {Path(w.filename).name}")
            else:
                self.log(f"warning: {text[:300]}")
        return out

    def fresh_reads(self) -> None:
        """Each topic read first thing on a fresh handle, where the container indexes that topic alone (MCAP:
        Container.topic_index): the messages the whole index read, or, where it could not read the topic,
        those messages(raw=True) yielded, or an error; never others (see on_fresh_handle)."""
        for topic, ref in list(self.out.reads.items()):
            done = self.on_fresh_handle("topic_index", f"fresh read {topic}", lambda bag: bag.read(topic),
                                        topic=topic)
            if done is None:
                return
            ok, arr = done
            times = np.asarray(arr.time).tolist() if ok else None
            if ref[0] == "ok" and times != ref[2]:
                self.problem("wrong", "fresh read", f"read({topic}) on a fresh handle gave "
                             f"{'an error' if times is None else f'{len(times)} messages'} where the whole index "
                             f"read {len(ref[2])}", "wrong fresh-read")
            elif ref[0] != "ok" and times is not None and self.out.raw is not None and \
                    times != [t for name, t, _ in self.out.raw if name == topic]:
                self.problem("wrong", "fresh read", f"read({topic}) on a fresh handle gave {len(times)} messages, "
                             "not those messages(raw=True) yields", "wrong fresh-read-raw")

    def on_fresh_handle(self, method: str, stage: str, action: Callable[[fastbag.Bag], Any], *,
                        topic: str | None = None) -> tuple[bool, Any] | None:
        """``action(bag)`` (guarded) first thing on a fresh handle opened with ``checksums=False`` (so that its
        reads decode only the heads of compressed chunks they need, hostile bytes and all: see
        Container.record_end), where its container
        overrides Container's ``method`` (else, or where it does not open: None). Warnings other than
        FastbagWarnings are problems; its FastbagWarnings repeat the first open's, and are kept out of
        out.warnings, which the oracles compare."""
        from fastbag.container import Container

        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            ok, bag = self.guarded("fresh open", lambda: fastbag.open(self.path, **{**self.open_kwargs,
                                                                                    "checksums": False}))
            if not ok:
                return None
            try:
                if getattr(type(bag._container), method) is getattr(Container, method):
                    return None  # (nothing indexed apart: the first open's reads were these)
                done = self.guarded(stage, lambda: action(bag), topic=topic)
            finally:
                self.guarded("close", bag.close)
        for w in said:
            if not issubclass(w.category, FastbagWarning):
                self.problem("warning", stage, f"{w.category.__name__}: {str(w.message)[:200]}",
                             f"warning {w.category.__name__} {stage.split()[0]} {stage.split()[1]}")
        return done

    def fresh_window(self, *, said_problems: bool) -> None:
        """A time window read first thing on a fresh handle, where the container indexes that window alone
        (MCAP: Container.window_index, let read every window here: fuzzed files hold a few chunks): the
        messages in it that messages(raw=True) yielded, or an error. A window index trusts the chunk
        indexes' times as every MCAP reader does; where they lie about a chunk it never reads, it misses
        that chunk's messages: wrong only where the whole index said nothing (it reads and says that)."""
        from fastbag.mcap import reader as mcap_reader

        whole = self.out.raw
        if not whole:
            return
        times = sorted(t for _, t, _ in whole)
        start, end = times[len(times) // 2], times[min(len(times) - 1, len(times) // 2 + 5)] + 1

        def window(bag: fastbag.Bag) -> list[tuple[str, int, bytes]]:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True, start=start, end=end)]
            self.log(f"fresh window: {len(got)}, through "
                     f"{'the whole index' if bag._container._index is not None else 'a window index'}")
            return got

        share, mcap_reader.WINDOW_SHARE = mcap_reader.WINDOW_SHARE, 1.0
        try:
            done = self.on_fresh_handle("window_index", "fresh window", window)
        finally:
            mcap_reader.WINDOW_SHARE = share
        if done is None:
            return
        ok, got = done
        want = [m for m in whole if start <= m[1] < end]
        if ok and got != want and not said_problems:
            self.problem("wrong", "fresh window", f"messages(start, end) on a fresh handle gave {len(got)} messages "
                         f"where the whole index read {len(want)} in [{start}, {end})", "wrong fresh-window")

    def exercise(self, bag: fastbag.Bag) -> None:
        out = self.out
        out.recovered = bool(bag.recovered)

        def meta() -> None:
            out.message_count = bag.message_count
            (bag.version, bag.start_time, bag.end_time, bag.duration, bag.size, bag.chunk_count,
             bag.compression, repr(bag), bag.connections)
            for name, info in bag.topics.items():
                out.topic_counts[name] = info.message_count
                (info.msgtype, info.md5sum, info.definition, info.frequency, info.msgtypes)
            from fastbag.cli import format_info, info_dict
            json.dumps(info_dict(bag))
            format_info(bag)
        self.guarded("meta", meta)
        self.log(f"opened: {out.message_count} messages, recovered={out.recovered}")

        def raw() -> list[tuple[str, int, bytes]]:
            return [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
        ok, got = self.guarded("raw", raw)
        out.raw = got if ok else None
        out.raw_error = None if ok else f"{type(got).__name__}: {got}"
        if self.after is not None:
            ok, got = self.guarded("after", lambda: [(m.topic, m.time, bytes(m.data))
                                                     for m in bag.messages(raw=True, start=self.after)])
            out.after_raw = got if ok else None
            out.after_raw_error = None if ok else f"{type(got).__name__}: {got}"
        ok, got = self.guarded("attachments", lambda: [(a.name, a.media_type, bytes(a.data)) for a in bag.attachments])
        out.attachments = got if ok else None
        ok, got = self.guarded("metadata", lambda: [(m.name, tuple(sorted(m.metadata.items()))) for m in bag.metadata])
        out.metadata = got if ok else None
        ok, topics = self.guarded("topics", lambda: list(bag.topics))  # (MCAP: may load the message indexes)
        for topic in topics if ok else []:
            ok, arr = self.guarded(f"read {topic}", lambda: bag.read(topic), topic=topic)
            if not ok:
                exc = arr
                out.reads[topic] = ("error", type(exc).__name__, getattr(exc, "index", None), str(exc)[:300],
                                    getattr(exc, "topic", None))
                continue
            out.reads[topic] = ("ok", len(arr), np.asarray(arr.time).tolist())
            nbytes = sum(len(d) for t, _, d in out.raw if t == topic) if out.raw is not None else 1 << 30
            self.guarded(f"touch {topic}", lambda: touch(arr, records=nbytes <= SMALL_BYTES), topic=topic)
            info = bag.topics[topic]
            if not self.sensors:
                continue
            if info.msgtype == "sensor_msgs/PointCloud2":
                self.guarded(f"sensors {topic}", lambda: [np.asarray(p).tobytes() for p in fastbag.pointcloud(arr)],
                             topic=topic)
            elif info.msgtype == "sensor_msgs/Image":
                self.guarded(f"sensors {topic}", lambda: _touch_array(fastbag.image(arr)), topic=topic)
        if self.decoded and (out.message_count or 0) <= 2000:
            def decoded() -> int:
                # messages() says once per topic what it cannot decode (a warning), and yields those messages
                # with a msg that raises it when used (here, by hasattr): kept apart from out.warnings, which
                # the oracles compare with a reference run that does not iterate decoded.
                with warnings.catch_warnings(record=True) as said:
                    warnings.simplefilter("always")
                    n = 0
                    try:
                        for m in bag.messages():
                            if n < SMALL:
                                msg = m.msg  # a message object, or a dict (MCAP json)
                                msg.to_dict() if hasattr(msg, "to_dict") else repr(msg)
                            n += 1
                    finally:
                        for w in said:
                            if not issubclass(w.category, FastbagWarning):
                                self.problem("warning", "decoded", f"{w.category.__name__}: {str(w.message)[:200]}",
                                             f"warning {w.category.__name__} decoded")
                return n
            self.guarded("decoded", decoded)


def _touch_array(value: Any) -> None:
    if isinstance(value, list):
        for v in value:
            _touch_array(v)
        return
    a = np.asarray(value)
    if a.dtype == object:
        for v in a.ravel()[:10_000]:
            len(v) if isinstance(v, (str, bytes)) else v
    else:
        zlib.crc32(a.tobytes())


def _elements(struct: Any) -> int:
    """Array elements under a result's top-level fields (to_dict() of millions of them costs seconds)."""
    from fastbag.msg.arrays import Nested, Ragged
    total = 0
    for name in struct.fields:
        column = struct[name]
        if isinstance(column, (Nested, Ragged)):
            total += int(np.asarray(column.counts).sum())
    return total


def touch(value: Any, depth: int = 0, *, records: bool = True) -> None:
    """Read every byte of a decoded result, the way a user would reach it.

    ``records``: also build ``arr[i].to_dict()`` of every message (when the result is small).
    """
    from fastbag.msg.arrays import Nested, Ragged, StructArray
    if depth > 80:
        return
    if isinstance(value, StructArray):
        n = len(value)
        for name in value.fields:
            touch(value[name], depth + 1)
        if n:
            value[0], value[-1]
            value[n // 2].fields
        if n <= SMALL and depth == 0 and records and _elements(value) <= 100_000:
            for i in range(n):
                value[i].to_dict()
        if depth == 0:
            try:
                value.to_numpy()
            except ValueError:
                pass  # documented: some field's length varies between messages
        value[:1]
    elif isinstance(value, Ragged):
        len(value), value.counts, value.offsets, value.uniform
        if len(value):
            _touch_array(value[0])
            _touch_array(value[-1])
        _touch_array(value.values)
    elif isinstance(value, Nested):
        len(value), value.offsets
        if len(value):
            touch(value[0], depth + 1)
            touch(value[-1], depth + 1)
        touch(value.values, depth + 1)
    elif isinstance(value, np.ndarray):
        _touch_array(value)
    else:
        repr(value)


# -- mutations -----------------------------------------------------------------------------


@dataclass
class Mutant:
    """A damaged bag and what can be known about the result."""

    data: bytes
    kind: str
    detail: str
    oracle: tuple | None = None
    open_kwargs: dict[str, Any] = field(default_factory=dict)
    seed_version: str | None = None


class Seed:
    """A seed bag loaded in a worker: its bytes, its walk, and its intact reading (the reference)."""

    def __init__(self, spec: SeedSpec) -> None:
        self.spec = spec
        self.data = Path(spec.path).read_bytes()
        if spec.format == "mcap":
            from tools import fuzz_mcap
            self.structure = fuzz_mcap.walk(self.data)
        else:
            self.structure = walk(self.data)
        self._reference: Outcome | None = None
        self._messages: list[tuple[int, int, bytes]] | None = None
        self._connections: list[fastbag.Connection] = []

    @property
    def reference(self) -> Outcome:
        if self._reference is None:
            self._reference = Runner(self.spec.path, open_kwargs=self.spec.open_kwargs).run()
        return self._reference

    @property
    def clean(self) -> bool:
        """The intact bag opens without warnings and reads every message."""
        ref = self.reference
        return ref.opened and ref.raw is not None and not ref.warnings and not ref.problems

    def _load(self) -> None:
        if self._messages is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with fastbag.open(self.spec.path, **self.spec.open_kwargs) as bag:
                    self._connections = bag.connections
                    self._messages = [(m.connection.id, m.time, bytes(m.data)) for m in bag.messages(raw=True)]

    def connections(self) -> list[fastbag.Connection]:
        self._load()
        return self._connections

    def messages(self) -> list[tuple[int, int, bytes]]:
        """(connection id, time, bytes) in read order, from the intact bag."""
        self._load()
        return self._messages


def _flip(buf: bytearray, at: int, rng: random.Random) -> str:
    if at >= len(buf):  # an earlier step of a havoc case shortened the file
        return f"(offset {at} is gone)"
    if rng.random() < 0.3:
        old = buf[at]
        buf[at] = rng.randrange(256)
        return f"byte {at}: {old:#04x}->{buf[at]:#04x}"
    bit = rng.randrange(8)
    buf[at] ^= 1 << bit
    return f"bit {bit} of byte {at}"


def _pick_value(rng: random.Random, old: int, width: int, size: int) -> int:
    top = (1 << (8 * width)) - 1
    choices = [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, old + 1, old - 1, old + rng.randint(2, 64),
               old - rng.randint(2, 64), old * 2, old // 2, rng.randrange(top + 1), size, size - 1, size + 1,
               1 << 20, 1 << 24]
    if width == 8:
        choices += [(1 << 63) - 1, top, 1 << 32]
    if width == 1:
        choices = list(range(9)) + [rng.randrange(256)]
    return rng.choice(choices) & top


def mutate_set_number(rng: random.Random, seed: Seed, buf: bytearray,
                      where: Callable[[int], bool] | None = None) -> str | None:
    """Replace a length / count / position field with an edge value."""
    fields = [f for f in seed.structure.numeric if f[0] + f[1] <= len(buf) and (where is None or where(f[0]))]
    if not fields:
        return None
    at, width, label = rng.choice(fields)
    old = int.from_bytes(buf[at:at + width], "little")
    new = _pick_value(rng, old, width, len(buf))
    buf[at:at + width] = new.to_bytes(width, "little")
    return f"{label} at {at}: {old:#x} -> {new:#x}"


def mutate_flip_header(rng: random.Random, seed: Seed, buf: bytearray,
                       where: Callable[[int], bool] | None = None) -> str | None:
    recs = [r for r in seed.structure.records + seed.structure.inner if where is None or where(r.start)]
    if not recs:
        return None
    rec = rng.choice(recs)
    flips = [_flip(buf, rng.randrange(rec.start, rec.data_start), rng) for _ in range(rng.choice((1, 1, 2, 3)))]
    return f"record at {rec.start} (op {rec.op}) header: " + ", ".join(flips)


def _chunk_data_range(rng: random.Random, seed: Seed) -> tuple[ChunkInfo, int, int] | None:
    chunks = [c for c in seed.structure.chunks if c.rec.data_len]
    if not chunks:
        return None
    chunk = rng.choice(chunks)
    return chunk, chunk.rec.data_start, chunk.rec.end


def mutate_flip_chunk(rng: random.Random, seed: Seed, buf: bytearray) -> str | None:
    picked = _chunk_data_range(rng, seed)
    if picked is None:
        recs = [r for r in seed.structure.records if r.data_len]
        if not recs:
            return None
        rec = rng.choice(recs)
        a, b = rec.data_start, rec.end
        label = f"record at {rec.start}"
    else:
        chunk, a, b = picked
        label = f"{chunk.compression} chunk at {chunk.rec.start}"
    flips = [_flip(buf, rng.randrange(a, b), rng) for _ in range(rng.choice((1, 1, 2, 4, 8)))]
    return f"{label} data: " + ", ".join(flips)


def mutate_flip_payload(rng: random.Random, seed: Seed, buf: bytearray) -> tuple[str, tuple] | None:
    msgs = [m for m in seed.structure.messages if m.data_start is not None and m.data]
    if not msgs:
        return None
    m = rng.choice(msgs)
    n = rng.choice((1, 1, 2, 3))
    flips = [_flip(buf, rng.randrange(m.data_start, m.data_start + len(m.data)), rng) for _ in range(n)]
    new = bytes(buf[m.data_start:m.data_start + len(m.data)])
    return f"message of {m.topic} at {m.time} ({len(m.data)} bytes): " + ", ".join(flips), \
        ("payload", m.topic, m.time, m.data, new)


def mutate_flip_index(rng: random.Random, seed: Seed, buf: bytearray) -> str | None:
    s = seed.structure
    recs = [r for r in s.records if r.op in (0x04, 0x06) or s.in_index_section(r.start)]
    if not recs:
        return None
    rec = rng.choice(recs)
    flips = [_flip(buf, rng.randrange(rec.start, rec.end), rng) for _ in range(rng.choice((1, 1, 2, 3)))]
    return f"index record at {rec.start} (op {rec.op}): " + ", ".join(flips)


def _index_only(seed: Seed) -> Callable[[int], bool]:
    s = seed.structure
    index_recs = [r for r in s.records if r.op in (0x04, 0x06) or s.in_index_section(r.start)]
    spans = [(r.start, r.end) for r in index_recs]
    return lambda at: any(a <= at < b for a, b in spans)


def replace_record(data: bytes, s: Structure, rec: Rec, fields: list[tuple[str, bytes]], payload: bytes) -> bytes:
    """``data`` with top-level ``rec`` rebuilt; index_pos and chunk positions after it shifted to match."""
    new = _record(fields, payload)
    delta = len(new) - (rec.end - rec.start)
    out = bytearray(data[:rec.start] + new + data[rec.end:])
    if not delta:
        return bytes(out)

    def shift(at_old: int, width: int) -> None:
        at = at_old + delta if at_old >= rec.end else at_old
        value = int.from_bytes(out[at:at + width], "little")
        if value > rec.start:
            out[at:at + width] = (value + delta).to_bytes(width, "little")
    if s.version == "2.0" and s.records:
        at, n = s.records[0].fields.get("index_pos", (0, 0))
        if n == 8 and rec is not s.records[0]:
            shift(at, 8)
        for r in s.records:
            if r.op == 0x06 and r is not rec and r.fields.get("chunk_pos", (0, 0))[1] == 8:
                shift(r.fields["chunk_pos"][0], 8)
    return bytes(out)


def _fields_of(data: bytes, rec: Rec) -> list[tuple[str, bytes]]:
    out = []
    for s in rec.field_starts:
        n = _U32.unpack_from(data, s)[0]
        raw = data[s + 4:s + 4 + n]
        name, _, value = raw.partition(b"=")
        out.append((name.decode("latin-1"), value))
    return out


COMPRESSION_NAMES = ["none", "lz4", "bz2", "zstd", "", "LZ4", "lz4\x00", "gzip", "bz2 ", "nonee", "\xff\xfe",
                     "l" * 300]


def mutate_compression_name(rng: random.Random, seed: Seed) -> tuple[bytes, str] | None:
    chunks = seed.structure.chunks
    if not chunks:
        return None
    chunk = rng.choice(chunks)
    name = rng.choice([n for n in COMPRESSION_NAMES if n != chunk.compression])
    fields = [(k, name.encode("latin-1") if k == "compression" else v) for k, v in _fields_of(seed.data, chunk.rec)]
    payload = seed.data[chunk.rec.data_start:chunk.rec.end]
    return replace_record(seed.data, seed.structure, chunk.rec, fields, payload), \
        f"chunk at {chunk.rec.start}: compression {chunk.compression!r} -> {name!r}"


def lz4_with_content_size(frame: bytes, content_size: int) -> bytes:
    """An lz4 frame whose descriptor claims ``content_size``, with a valid header checksum."""
    flg = frame[4]
    descriptor_end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    rest = frame[descriptor_end + 1:]
    descriptor = bytes([flg | 0x08, frame[5]]) + _U64.pack(content_size) + \
        (frame[6 + (8 if flg & 0x08 else 0):descriptor_end] if flg & 0x01 else b"")
    from fastbag.io.lz4frame import xxh32  # the header checksum: a forged content size must still pass it
    check = xxh32(np.frombuffer(descriptor, dtype=np.uint8), 0, len(descriptor))
    return frame[:4] + descriptor + bytes([(check >> 8) & 0xFF]) + rest


@functools.lru_cache(maxsize=None)
def _bz2_zeros() -> bytes:
    return bz2.compress(b"\0" * 45_000_000, 9)  # 50 bytes; streams concatenate


@functools.lru_cache(maxsize=None)
def _lz4_zeros(n: int) -> bytes:
    import lz4.frame
    return lz4.frame.compress(b"\0" * n, store_size=False)


def mutate_codec(rng: random.Random, seed: Seed) -> tuple[bytes, str] | None:
    import lz4.frame
    chunks = [c for c in seed.structure.chunks if c.compression in ("lz4", "bz2") and c.rec.data_len > 16]
    if not chunks:
        return None
    chunk = rng.choice(chunks)
    rec = chunk.rec
    raw = bytearray(seed.data[rec.data_start:rec.end])
    fields = _fields_of(seed.data, rec)
    kind = rng.choice(["magic", "flags", "block-size", "middle", "cut-padded", "cut", "other-codec", "bomb",
                       "content-size", "trailing-garbage", "empty"])
    if chunk.compression == "bz2" and kind in ("flags", "content-size"):
        kind = rng.choice(["block-digit", "crc"])
    if kind == "magic":
        raw[0:4] = bytes(4)
    elif kind == "flags":
        raw[4] = rng.randrange(256)
    elif kind == "block-size":  # first block's size field, after the frame descriptor
        at = 7 + (8 if raw[4] & 0x08 else 0) + (4 if raw[4] & 0x01 else 0)
        raw[at:at + 4] = _U32.pack(rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 0x80000000 | rng.randrange(1 << 22),
                                                0, len(raw), rng.randrange(1 << 31)]))
    elif kind == "middle":
        for _ in range(rng.choice((1, 3, 10))):
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    elif kind == "cut-padded":
        at = rng.randrange(1, len(raw))
        raw[at:] = bytes(len(raw) - at)
    elif kind == "cut":
        del raw[rng.randrange(1, len(raw)):]
    elif kind == "other-codec":
        payload = chunk.payload or bytes(raw)
        raw = bytearray(bz2.compress(payload) if chunk.compression == "lz4" else lz4.frame.compress(payload))
    elif kind == "bomb":  # decompresses far past the (unchanged, small) size header
        if chunk.compression == "bz2":
            raw = bytearray(_bz2_zeros())   # 50 bytes -> 45 MB (the campaign keeps cases short)
        else:
            raw = bytearray(_lz4_zeros(96 << 20))  # 390 KB -> 96 MB
    elif kind == "content-size":
        claim = rng.choice([chunk.size + 1, chunk.size * 2 + 7, 1 << 28, 3 << 30, (1 << 32) + 5, 1 << 40, 1 << 63])
        raw = bytearray(lz4_with_content_size(bytes(raw), claim))
    elif kind == "trailing-garbage":
        raw += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif kind == "empty":
        raw = bytearray()
    elif kind == "block-digit":
        raw[3] = rng.choice(b"0:\xff19")
    elif kind == "crc":
        raw[10 + rng.randrange(4)] ^= 0xFF
    return replace_record(seed.data, seed.structure, rec, fields, bytes(raw)), \
        f"{chunk.compression} chunk at {rec.start}: {kind}"


def mutate_structure(rng: random.Random, seed: Seed, buf: bytearray) -> tuple[bytearray, str] | None:
    """Delete, duplicate or swap whole records, or splice in random bytes."""
    s = seed.structure
    recs = [r for r in s.records[1:] if r.end <= len(buf)] if s.version != "1.1" else \
        [r for r in s.records if r.end <= len(buf)]
    op = rng.choice(["delete", "duplicate", "swap", "insert", "overwrite", "zeros"])
    if op in ("delete", "duplicate", "swap") and not recs:
        op = "overwrite"
    if op == "delete":
        r = rng.choice(recs)
        return buf[:r.start] + buf[r.end:], f"deleted the record at {r.start} (op {r.op})"
    if op == "duplicate":
        r = rng.choice(recs)
        return buf[:r.end] + buf[r.start:r.end] + buf[r.end:], f"duplicated the record at {r.start} (op {r.op})"
    if op == "swap":
        k = rng.randrange(len(recs))
        a, b = recs[k], recs[(k + 1) % len(recs)]
        if a.end != b.start:
            return buf[:a.start] + buf[a.end:], f"deleted the record at {a.start} (op {a.op})"
        return buf[:a.start] + buf[b.start:b.end] + buf[a.start:a.end] + buf[b.end:], \
            f"swapped the records at {a.start} and {b.start}"
    at = rng.randrange(len(buf) + 1)
    n = rng.choice((1, 4, 8, 16, 100, 1000))
    if op == "insert":
        blob = bytes(rng.randrange(256) for _ in range(n))
        return buf[:at] + blob + buf[at:], f"inserted {n} random bytes at {at}"
    fill = bytes(n) if op == "zeros" else bytes(rng.randrange(256) for _ in range(n))
    buf[at:at + n] = fill[:max(0, len(buf) - at)]
    return buf, f"{op} {n} bytes at {at}"


# -- semantic mutations: bags rewritten with fastbag.Writer ---------------------------------


def rewrite(seed: Seed, path: str, *, compression: str, chunk_size: int,
            definition: Callable[[fastbag.Connection], str] | None = None,
            message: Callable[[int, int, int, bytes], bytes] | None = None) -> bytes:
    """The seed's connections and messages (read order) written anew, optionally altered (definitions that no
    longer match their md5sums, on purpose: the Writer's warnings of them are not this harness's to report)."""
    with fastbag.Writer(path, compression=compression, chunk_size=chunk_size) as w, warnings.catch_warnings():
        warnings.simplefilter("ignore", FastbagWarning)
        handles = {}
        for c in seed.connections():
            text = definition(c) if definition else c.definition
            handles[c.id] = w.add_connection(c.topic, c.msgtype, text, c.md5sum, callerid=c.callerid,
                                             latching=c.latching)
        for k, (cid, t, data) in enumerate(seed.messages()):
            w.write(handles[cid], t, message(k, cid, t, data) if message else data)
    return Path(path).read_bytes()


def _rewrite_chunk_size(rng: random.Random, seed: Seed) -> int:
    """Small chunks for small bags; at most ~40 chunks (bz2 compresses each chunk slowly)."""
    total = sum(len(d) + 60 for _, _, d in seed.messages())
    return max(rng.choice([700, 4096, 1 << 20]), total // 40)


def mutate_message_length(rng: random.Random, seed: Seed, scratch: str) -> tuple[bytes, str, tuple] | None:
    """One message made shorter or longer than its definition allows."""
    ref = seed.reference
    good = [t for t, r in ref.reads.items() if r[0] == "ok" and r[1] > 0]
    if seed.structure.version == "1.1" or not good:
        return None
    topic = rng.choice(good)
    n = ref.reads[topic][1]
    j = rng.randrange(n)
    messages = seed.messages()
    topic_of = {c.id: c.topic for c in seed.connections()}
    positions = [k for k, (cid, _, _) in enumerate(messages) if topic_of[cid] == topic]
    if len(positions) != n:
        return None
    k = positions[j]
    old = messages[k][2]
    if old and rng.random() < 0.5:
        cut = rng.randint(1, min(len(old), 16))
        change, new = f"{cut} bytes shorter", old[:-cut]
    else:
        extra = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        change, new = f"{len(extra)} bytes longer", old + extra
    compression = rng.choice(["none", "lz4", "bz2"])
    data = rewrite(seed, scratch, compression=compression, chunk_size=_rewrite_chunk_size(rng, seed),
                   message=lambda i, cid, t, d: new if i == k else d)
    return data, f"{topic} message {j} of {n} made {change} ({compression})", ("msglen", topic, j)


#: Bytes that are not UTF-8, put into definitions as surrogate escapes (the Writer writes the bytes).
NON_UTF8_BYTES = b"\xff\xfe\x80abc\xc3(\xed\xa0\x80"
NON_UTF8 = NON_UTF8_BYTES.decode("utf-8", "surrogateescape")  # the Writer writes these bytes back

DEFINITION_EDITS = ["unknown-type", "unknown-bare-type", "cycle", "self-cycle", "malformed", "absurd-array",
                    "deep", "separator", "duplicate-type", "duplicate-field", "retype", "drop-field", "add-field",
                    "empty", "truncated", "flipped", "non-utf8", "huge-comment", "fixed-array-of-strings",
                    "empty-type-array", "zero-size-elements", "many-bare-types"]

MALFORMED_LINES = ["float64", "float64 x y", "x", "int32[abc] x", "int32[-1] x", "string<=5 s", "int32 9x",
                   "int32[[]] x", "MSG: nothing", "uint8 A=300", "bool B=maybe", "float32 F=1e", "int32[3 x",
                   "time T=1", "\x00", "Header", "/ x", "pkg//T x", "a/b/c/d x", "int32[99999999999999999999] x",
                   "int32 x=", "string S", "===\n", "\t\t", "uint8[0] nothing", "char[] c", "byte b"]

ABSURD_ARRAYS = ["float64[4294967295] x", "uint8[2147483647] x", "uint8[4294967296] x", "float64[268435456] x",
                 "uint8[1000000000] x", "string[4294967295] s", "fuzz_msgs/Big[100000000] big\n" + "=" * 80 +
                 "\nMSG: fuzz_msgs/Big\nstring s", "time[536870912] t", "uint8[65536] a\nuint8[65536] b"]


def edit_definition(rng: random.Random, text: str, msgtype: str) -> tuple[str, str]:
    """A damaged definition text, and what was done."""
    lines = text.split("\n")
    kind = rng.choice(DEFINITION_EDITS)
    field_lines = [i for i, l in enumerate(lines) if l.strip() and not l.startswith(("#", "MSG:", "==="))
                   and "=" not in l.split("#")[0] and len(l.split("#")[0].split()) == 2]
    pkg = msgtype.partition("/")[0] or "pkg"
    if kind in ("retype", "drop-field", "unknown-type", "unknown-bare-type") and not field_lines:
        kind = "add-field"
    if kind == "unknown-type":
        i = rng.choice(field_lines)
        lines[i] = f"nonexistent_msgs/Mystery{lines[i].split()[0].count('[') and '[]' or ''} {lines[i].split()[1]}"
    elif kind == "unknown-bare-type":
        i = rng.choice(field_lines)
        lines[i] = f"Mystery {lines[i].split()[1]}"
    elif kind == "cycle":
        lines += ["=" * 80, f"MSG: {pkg}/CycleA", f"{pkg}/CycleB b", "=" * 80, f"MSG: {pkg}/CycleB",
                  f"{pkg}/CycleA{rng.choice(['', '[]', '[2]'])} a"]
        lines.insert(0, f"{pkg}/CycleA loop")
    elif kind == "self-cycle":
        lines.insert(0, f"{msgtype}{rng.choice(['', '[]', '[1]'])} me")
    elif kind == "malformed":
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(MALFORMED_LINES))
    elif kind == "absurd-array":
        lines.insert(rng.randrange(len(lines) + 1) if rng.random() < 0.5 else 0, rng.choice(ABSURD_ARRAYS))
    elif kind == "deep":
        depth = rng.choice([70, 200, 1200, 3000])
        arr = rng.choice(["", "[]", "[1]"])
        sep = "=" * 80
        blocks = "".join(f"{sep}\nMSG: fuzz_deep/L{i}\nfuzz_deep/L{i + 1}{arr} next\n" for i in range(1, depth))
        return f"fuzz_deep/L1{arr} deep\n{text.rstrip()}\n{blocks}{sep}\nMSG: fuzz_deep/L{depth}\nuint8 leaf\n", \
            f"deep: {depth} nested types{arr and ' in arrays ' + arr}"
    elif kind == "separator":
        lines.insert(rng.randrange(len(lines) + 1), "=" * rng.choice([3, 80]))
    elif kind == "duplicate-type":
        blocks = [l for l in lines if l.startswith("MSG:")]
        lines += ["=" * 80, rng.choice(blocks) if blocks else f"MSG: {msgtype}", "int8 again"]
    elif kind == "duplicate-field":
        if field_lines:
            lines.insert(rng.choice(field_lines), lines[rng.choice(field_lines)])
        else:
            lines += ["int8 dup", "int8 dup"]
    elif kind == "retype":
        i = rng.choice(field_lines)
        old_type, name = lines[i].split("#")[0].split()
        new_type = rng.choice(["float32", "float64", "uint64", "int8", "string", "uint8[]", "uint8[3]", "time",
                               "Header", "bool[]", "string[]", "float64[2]"])
        lines[i] = f"{new_type} {name}"
    elif kind == "drop-field":
        del lines[rng.choice(field_lines)]
    elif kind == "add-field":
        lines.insert(rng.randrange(len(lines) + 1) if field_lines else 0,
                     rng.choice(["int32 extra", "string extra", "uint8[] extra", "float64[3] extra"]))
    elif kind == "empty":
        return "", "empty definition"
    elif kind == "truncated":
        cut = rng.randrange(len(text) + 1)
        return text[:cut], f"truncated at {cut} of {len(text)} characters"
    elif kind == "flipped":
        raw = bytearray(text.encode("utf-8", "surrogateescape"))
        for _ in range(rng.choice((1, 3, 8))):
            if raw:
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(7)
        return raw.decode("utf-8", "replace"), "flipped bits"
    elif kind == "non-utf8":
        lines.insert(rng.randrange(len(lines) + 1), rng.choice([f"# {NON_UTF8}", f"string {NON_UTF8}",
                                                                f"int32 {NON_UTF8}", f"{NON_UTF8} x"]))
    elif kind == "huge-comment":
        return text + "\n" + ("# " + "x" * 998 + "\n") * 1000, "1 MB of comments"
    elif kind == "fixed-array-of-strings":
        lines.insert(0, rng.choice(["string[1000000] many", "string[4294967295] many", "Header[1000000] hs"]))
    elif kind == "zero-size-elements":  # variable structs that take no bytes, in a fixed-size array
        n = 4294967295 if rng.random() < 0.02 else rng.choice([1000, 100_000, 500_000])
        lines[0:0] = [f"fuzz_msgs/Z[{n}] zs"]
        lines += ["=" * 80, "MSG: fuzz_msgs/Z", "string[0] nothing"]
        return "\n".join(lines), f"zero-size-elements: {n} elements of no bytes"
    elif kind == "many-bare-types":  # bare names that resolve nowhere: each looks through every block
        n = 30_000 if rng.random() < 0.02 else rng.choice([300, 1500])
        lines += [f"{'=' * 3}\nMSG: fuzz_many/T{i}\nQ{i} f" for i in range(n)]
        return "\n".join(lines), f"many-bare-types: {n} blocks with bare types that resolve nowhere"
    elif kind == "empty-type-array":
        lines[0:0] = ["fuzz_msgs/Nothing[] nothings"] if rng.random() < 0.5 else ["fuzz_msgs/Nothing[4000000000] n"]
        lines += ["=" * 80, "MSG: fuzz_msgs/Nothing", "# no fields"]
    return "\n".join(lines), kind


def mutate_definition(rng: random.Random, seed: Seed, scratch: str) -> tuple[bytes, str, tuple] | None:
    if seed.structure.version == "1.1" or seed.spec.open_kwargs:
        return None
    conns = seed.connections()
    if not conns:
        return None
    victim = rng.choice(conns)
    new, what = edit_definition(rng, victim.definition, victim.msgtype)
    compression = rng.choice(["none", "lz4", "bz2"])
    data = rewrite(seed, scratch, compression=compression, chunk_size=_rewrite_chunk_size(rng, seed),
                   definition=lambda c: new if c.id == victim.id else c.definition)
    return data, f"definition of {victim.topic} ({victim.msgtype}): {what} ({compression})", \
        ("definition", victim.topic)


# -- the mutation kinds, their shares, and the case generator ------------------------------

#: kind -> share of cases (the weights sum to 100)
KINDS = {
    "cut-boundary": 8, "cut-random": 7, "flip-header": 9, "set-number": 12, "flip-chunk": 9, "flip-payload": 6,
    "flip-index": 6, "index-number": 4, "compression-name": 3, "codec": 7, "message-length": 5, "definition": 8,
    "unindexed": 6, "havoc": 10,
}


def kinds_of(fmt: str) -> dict[str, int]:
    """The mutation kinds of a format and their shares."""
    if fmt == "mcap":
        from tools import fuzz_mcap
        return fuzz_mcap.KINDS
    return KINDS


def _byte_damage(rng: random.Random, seed: Seed, buf: bytearray) -> tuple[bytearray, str | None]:
    pick = rng.choice(["set-number", "flip-header", "flip-chunk", "structure"])
    if pick == "set-number":
        return buf, mutate_set_number(rng, seed, buf)
    if pick == "flip-header":
        return buf, mutate_flip_header(rng, seed, buf)
    if pick == "flip-chunk":
        return buf, mutate_flip_chunk(rng, seed, buf)
    got = mutate_structure(rng, seed, buf)
    return (got[0], got[1]) if got else (buf, None)


def _zero_index(seed: Seed, buf: bytearray) -> bool:
    s = seed.structure
    if s.version not in ("2.0", "1.2") or not s.records or s.index_pos == 0:
        return False
    header = s.records[0]
    if "index_pos" not in header.fields:
        return False
    at, n = header.fields["index_pos"]
    buf[at:at + n] = bytes(n)
    return True


def make_case(rng: random.Random, seed: Seed, kind: str, scratch: str) -> Mutant | None:
    """Damage ``seed`` one way; None when the kind does not apply to this seed."""
    data, s = seed.data, seed.structure
    buf = bytearray(data)
    oracle_ok = seed.clean
    if kind in ("cut-boundary", "cut-random"):
        if kind == "cut-boundary":
            cut = rng.choice(s.boundaries() or [len(data)])
            cut = max(0, min(len(data), cut + rng.choice([0, 0, 0, -1, 1])))
        else:
            cut = rng.randrange(len(data) + 1) if rng.random() < 0.1 else \
                rng.randrange(min(s.header_end, len(data)), len(data) + 1)
        return Mutant(data[:cut], kind, f"cut at {cut} of {len(data)}", ("cut", cut) if oracle_ok else None)
    if kind == "flip-header":
        what = mutate_flip_header(rng, seed, buf)
        return Mutant(bytes(buf), kind, what) if what else None
    if kind == "set-number":
        what = mutate_set_number(rng, seed, buf)
        return Mutant(bytes(buf), kind, what) if what else None
    if kind == "flip-chunk":
        what = mutate_flip_chunk(rng, seed, buf)
        return Mutant(bytes(buf), kind, what) if what else None
    if kind == "flip-payload":
        got = mutate_flip_payload(rng, seed, buf)
        if not got:
            return None
        return Mutant(bytes(buf), kind, got[0], got[1] if oracle_ok else None)
    if kind in ("flip-index", "index-number"):
        if s.version != "2.0" or not s.index_pos:
            return None
        what = mutate_flip_index(rng, seed, buf) if kind == "flip-index" else \
            mutate_set_number(rng, seed, buf, _index_only(seed))
        return Mutant(bytes(buf), kind, what, ("index",) if oracle_ok else None) if what else None
    if kind == "compression-name":
        got = mutate_compression_name(rng, seed)
        return Mutant(got[0], kind, got[1]) if got else None
    if kind == "codec":
        got = mutate_codec(rng, seed)
        return Mutant(got[0], kind, got[1]) if got else None
    if kind == "message-length":
        if not oracle_ok:
            return None
        got = mutate_message_length(rng, seed, scratch)
        return Mutant(got[0], kind, got[1], got[2]) if got else None
    if kind == "definition":
        if not oracle_ok:
            return None
        got = mutate_definition(rng, seed, scratch)
        return Mutant(got[0], kind, got[1], got[2]) if got else None
    if kind == "unindexed":
        if not _zero_index(seed, buf):
            return None
        chunks = [c for c in s.chunks if c.rec.data_len > 8]
        if not chunks or rng.random() < 0.2:
            return Mutant(bytes(buf), kind, "index_pos zeroed", ("unindexed", None) if oracle_ok else None)
        victim_k = rng.randrange(len(chunks))
        victim = chunks[victim_k]
        k = s.chunks.index(victim)
        what = []
        if rng.random() < 0.3:  # the chunk's header: its lengths, compression, size
            rec = victim.rec
            if rng.random() < 0.5:
                old = _U32.unpack_from(buf, rec.data_start - 4)[0]
                new = _pick_value(rng, old, 4, len(buf))
                _U32.pack_into(buf, rec.data_start - 4, new)
                what.append(f"data_len {old:#x} -> {new:#x}")
            else:
                what += [_flip(buf, rng.randrange(rec.start, rec.data_start), rng) for _ in range(rng.choice((1, 2)))]
            return Mutant(bytes(buf), kind, f"index_pos zeroed; chunk {k} at {rec.start} header: " + ", ".join(what),
                          ("unindexed", k) if oracle_ok else None)
        for _ in range(rng.choice((1, 2, 5))):
            at = rng.randrange(victim.rec.data_start, victim.rec.end)
            what.append(_flip(buf, at, rng))
        return Mutant(bytes(buf), kind, f"index_pos zeroed; chunk {k} at {victim.rec.start} data: " + ", ".join(what),
                      ("unindexed", k) if oracle_ok else None)
    if kind == "havoc":
        steps = []
        if rng.random() < 0.3 and _zero_index(seed, buf):
            steps.append("index_pos zeroed")
        for _ in range(rng.randint(2, 6)):
            buf, what = _byte_damage(rng, seed, buf)
            if what:
                steps.append(what)
        if rng.random() < 0.2:
            cut = rng.randrange(len(buf) + 1)
            del buf[cut:]
            steps.append(f"cut at {cut}")
        return Mutant(bytes(buf), kind, "; ".join(steps) or "nothing")
    raise ValueError(kind)


# -- checking a case's outcome ---------------------------------------------------------------


def _multiset(rows: list[tuple[str, int, bytes]]) -> Counter:
    return Counter(rows)


def _time_rows(rows: list[tuple[str, int, bytes]]) -> Counter:
    return Counter((t, d) for _, t, d in rows)


def check_consistency(out: Outcome, mutant: Mutant) -> list[Problem]:
    """What must hold for any bag: time order, counts, and read() agreeing with the raw messages."""
    problems = []

    def wrong(text: str, sig: str) -> None:
        problems.append(Problem("wrong", "consistency", text, f"wrong {sig}"))
    if not out.opened or out.raw is None:
        return problems
    times = [t for _, t, _ in out.raw]
    if any(b < a for a, b in zip(times, times[1:])):
        wrong("messages(raw=True) are not in time order", "time-order")
    # (MCAP: message_count comes from the statistics until the message indexes load; where they disagree,
    # a warning says so and the indexes are read)
    disagree = any("the statistics record" in w for w in out.warnings)
    if out.message_count is not None and len(out.raw) != out.message_count and not disagree:
        wrong(f"messages(raw=True) yielded {len(out.raw)} messages, message_count says {out.message_count}",
              "message-count")
    per_topic: dict[str, list[int]] = defaultdict(list)
    for topic, t, _ in out.raw:
        per_topic[topic].append(t)
    for topic, count in out.topic_counts.items():
        if len(per_topic.get(topic, [])) != count:
            wrong(f"topic {topic}: {count} messages in topics, {len(per_topic.get(topic, []))} yielded",
                  "topic-count")
    for topic, r in out.reads.items():
        if r[0] == "ok" and r[2] != per_topic.get(topic, []):
            wrong(f"read({topic}) has {r[1]} messages and times that differ from the raw messages' "
                  f"({len(per_topic.get(topic, []))})", "read-vs-raw")
    return problems


def check_oracle(out: Outcome, mutant: Mutant, seed: Seed) -> list[Problem]:
    """What can be known about a result from the kind of damage done."""
    problems: list[Problem] = []
    if mutant.oracle is None:
        return problems
    ref = seed.reference
    kind = mutant.oracle[0]

    def wrong(text: str, sig: str) -> None:
        problems.append(Problem("wrong", kind, text, f"wrong {kind} {sig}"))
    if ref.raw is None:
        return problems
    if kind.startswith("mcap-"):
        from tools import fuzz_mcap
        fuzz_mcap.check_oracle(out, mutant, seed, wrong)
        return problems
    original = _multiset(ref.raw)
    if kind == "cut":
        cut = mutant.oracle[1]
        s = seed.structure
        if not out.opened or out.raw is None:
            complete = [c for c in s.chunks if c.rec.end <= cut and c.messages]
            if s.version in ("1.2", "1.1"):
                complete = [m for m in s.messages if m.end is not None and m.end <= cut]
            if cut >= s.header_end + 8 and complete and out.open_error and "magic" not in out.open_error:
                wrong(f"a bag cut at {cut} failed to open ({out.open_error[:200]}) though it holds complete "
                      "messages", "open-failed")
            elif out.opened and out.raw is None:
                wrong(f"a bag cut at {cut} opened but its messages raise: {out.raw_error}", "raw-raises")
            return problems
        got = _multiset(out.raw)
        extra = got - original
        if extra:
            wrong(f"a bag cut at {cut} yields {sum(extra.values())} messages the bag does not hold", "invented")
        if s.version == "2.0":
            must = [m for c in s.chunks if c.rec.end <= cut for m in c.messages
                    if s.conn_end.get(m.conn, 1 << 62) <= cut]
        else:
            must = [m for m in s.messages if m.end is not None and m.end <= cut
                    and s.conn_end.get(m.conn, 1 << 62) <= cut]
        missing = _multiset([(m.topic, m.time, m.data) for m in must]) - got
        if missing:
            wrong(f"a bag cut at {cut} lost {sum(missing.values())} messages of complete chunks "
                  f"(kept {len(out.raw)} of {len(ref.raw)})", "lost-complete")
        at_boundary = s.version == "1.1" and cut in {r.end for r in s.records} | {s.header_end}
        if len(out.raw) < len(ref.raw) and not at_boundary and \
                not any("lost" in w or "cut" in w for w in out.warnings):
            # (a 1.1 bag cut between two messages is a complete 1.1 bag: nothing says it was longer)
            wrong(f"a bag cut at {cut} lost {len(ref.raw) - len(out.raw)} messages without a warning saying so",
                  "silent-loss")
    elif kind == "index":
        if out.raw is None:
            return problems
        if _time_rows(out.raw) != _time_rows(ref.raw):
            if not out.warnings:
                wrong(f"index damage changed the messages without a warning: {len(out.raw)} messages, "
                      f"{len(ref.raw)} intact", "silent-change")
            elif _time_rows(out.raw) - _time_rows(ref.raw):
                wrong("index damage yields messages the bag does not hold", "invented")
    elif kind == "unindexed":
        victim = mutant.oracle[1]
        if not out.opened or out.raw is None:
            wrong(f"an unindexed bag (chunk {victim} damaged) failed: {out.open_error or out.raw_error}",
                  "failed")
            return problems
        s = seed.structure
        keep = [m for k, c in enumerate(s.chunks) if k != victim for m in c.messages]
        # (time, bytes): a damaged connection record inside the chunk may rename a topic, legitimately
        missing = Counter((m.time, m.data) for m in keep) - _time_rows(out.raw)
        if missing:
            wrong(f"damage to chunk {victim} of an unindexed bag lost {sum(missing.values())} messages of other "
                  "chunks", "lost-other-chunks")
        if victim is None and _multiset(out.raw) != original:
            wrong("an unindexed copy does not read the same messages", "differs")
    elif kind == "payload":
        _, topic, t, old, new = mutant.oracle
        if not out.opened or out.raw is None:
            wrong(f"a flipped payload byte broke more than decoding: {out.open_error or out.raw_error}", "failed")
            return problems
        expected = original.copy()
        expected[(topic, t, old)] -= 1
        expected[(topic, t, new)] += 1
        if _multiset(out.raw) != +expected:
            wrong("a flipped payload byte changed other messages", "other-messages")
        r = out.reads.get(topic)
        if r and r[0] == "error" and r[1] == "DecodeError" and r[2] is not None:
            times = [tt for tp, tt, d in ref.raw if tp == topic]
            datas = [d for tp, tt, d in ref.raw if tp == topic]
            candidates = [i for i, (tt, d) in enumerate(zip(times, datas)) if tt == t and d == old]
            # Two byte orders in equal numbers: which message's header was damaged, the bytes cannot say.
            orders = Counter(d[:2] for tp, tt, d in out.raw if tp == topic and d[:2] in (b"\0\0", b"\0\1"))
            tied = "unlike most of the topic's messages" in r[3] and len(orders) == 2 and len(set(orders.values())) == 1
            if candidates and r[2] not in candidates and not tied:
                wrong(f"DecodeError names message {r[2]} of {topic}, the damaged one is {candidates}", "index")
        for other, rr in out.reads.items():
            if other != topic and ref.reads.get(other, ("?",))[0] == "ok" and rr[0] != "ok":
                wrong(f"a flipped payload byte in {topic} broke read({other}): {rr[3][:200]}", "other-topic")
    elif kind == "msglen":
        _, topic, j = mutant.oracle
        r = out.reads.get(topic)
        if r is None:
            wrong(f"topic {topic} vanished", "topic")
        elif r[0] == "ok":
            wrong(f"message {j} of {topic} no longer matches its definition but read() succeeded", "undetected")
        elif r[1] != "DecodeError" or r[2] != j:
            wrong(f"message {j} of {topic} does not match its definition: expected DecodeError naming message {j}, "
                  f"got {r[1]} index {r[2]}: {r[3][:200]}", "index")
    elif kind == "definition":
        topic = mutant.oracle[1]
        if not out.opened or out.raw is None:
            wrong(f"a damaged definition broke raw reading: {out.open_error or out.raw_error}", "raw")
            return problems
        if _time_rows(out.raw) != _time_rows(ref.raw):
            wrong("a damaged definition changed the raw messages", "raw-changed")
        for other, rr in out.reads.items():
            if other != topic and ref.reads.get(other, ("?",))[0] == "ok" and rr[0] != "ok":
                wrong(f"a damaged definition of {topic} broke read({other}): {rr[3][:200]}", "other-topic")
    return problems


# -- known defects ------------------------------------------------------------------------------

#: Defects known but not yet fixed, by name: (description, whether a problem on a mutant is it).
#: A problem matching one is labelled with its name instead of counted as new. All 22 the campaign
#: found (D1-D22) are fixed, each a regression test in tests/test_fuzz.py; add new ones here while
#: they wait for a fix.
KNOWN_DEFECTS: dict[str, tuple[str, Callable[[Problem, Mutant], bool]]] = {
}


def known_defect(problem: Problem, mutant: Mutant | None) -> str | None:
    for name, (_, matches) in KNOWN_DEFECTS.items():
        try:
            if mutant is not None and matches(problem, mutant):
                return name
        except Exception:  # noqa: BLE001
            continue
    return None


# -- where memory goes -----------------------------------------------------------------------------


class PeakSites:
    """Per case: the traced peak, and the largest peak inside each of a few library functions.

    The functions are wrapped where they are looked up (module attributes), so the library's files are
    untouched. Each wrapper records the peak so far before resetting it, so the case's overall peak
    is exact; the per-function peaks attribute an oversize allocation to where it happened.
    """

    TARGETS = [("fastbag.io.chunks", "decompress"), ("fastbag.ros1.index", "decompress"),
               ("fastbag.ros1.index", "decompress_truncated"), ("fastbag.ros1.reader", "read_index"),
               ("fastbag.msg.layout", "layout_for"), ("fastbag.ros1.records", "message_spans"),
               ("fastbag.ros1.reader", "message_spans")]
    METHODS = [("fastbag.msg.arrays", "TopicBuilder", "__init__"), ("fastbag.msg.arrays", "TopicBuilder", "add_run"),
               ("fastbag.msg.arrays", "TopicBuilder", "decode_run"), ("fastbag.msg.arrays", "TopicBuilder", "append"),
               ("fastbag.msg.arrays", "TopicBuilder", "finish"), ("fastbag.io.chunks", "ChunkStore", "get")]

    def __init__(self) -> None:
        self.overall = 0
        self.base = 0
        self.sites: dict[str, int] = {}
        self.installed = False

    def install(self) -> None:
        if self.installed:
            return
        import importlib
        self.installed = True
        for module, name in self.TARGETS:
            mod = importlib.import_module(module)
            if hasattr(mod, name):
                setattr(mod, name, self._wrap(getattr(mod, name), name))
        for module, cls, name in self.METHODS:
            klass = getattr(importlib.import_module(module), cls, None)
            if klass is not None and hasattr(klass, name):
                setattr(klass, name, self._wrap(getattr(klass, name), f"{cls}.{name}"))

    def _wrap(self, fn: Callable, label: str) -> Callable:
        tracker = self

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not tracemalloc.is_tracing():
                return fn(*args, **kwargs)
            current, peak = tracemalloc.get_traced_memory()
            tracker.overall = max(tracker.overall, peak)
            tracemalloc.reset_peak()
            try:
                return fn(*args, **kwargs)
            finally:
                _, peak = tracemalloc.get_traced_memory()
                tracker.overall = max(tracker.overall, peak)
                tracker.sites[label] = max(tracker.sites.get(label, 0), peak - current)
        return wrapper

    def start(self) -> None:
        tracemalloc.reset_peak()
        self.base = tracemalloc.get_traced_memory()[0]
        self.overall = 0
        self.sites = {}

    def stop(self) -> tuple[int, str | None]:
        """(peak above the start, the function holding the largest share of it)"""
        self.overall = max(self.overall, tracemalloc.get_traced_memory()[1])
        peak = max(0, self.overall - self.base)
        site = max(self.sites, key=self.sites.get) if self.sites else None
        if site is not None and self.sites[site] < peak * 2 // 5:
            site = None
        return peak, site


PEAKS = PeakSites()


def unknown_problems(result: dict[str, Any]) -> list[str]:
    """The problems of a case result (or a crash / hang report) that match no known defect."""
    kind, detail = result.get("kind", "?"), result.get("detail", "") or ""
    if "crash" in result or result.get("hang"):
        cat = "crash" if "crash" in result else "hang"
        p = Problem(cat, "run", str(result.get("crash", "hang")), cat)
        return [] if known_defect(p, Mutant(b"", kind, detail)) else [f"case {result['case']}: {cat} ({kind}: {detail})"]
    return [f"case {result['case']}: [{p['category']}] {p['stage']}: {p['text']} ({kind}: {detail})"
            for p in result.get("problems", []) if " [D" not in p["signature"]]


# -- one case ------------------------------------------------------------------------------------


class Context:
    """What a worker holds across cases: the seeds (loaded lazily) and a scratch folder."""

    def __init__(self, seed: int, specs: list[SeedSpec], scratch: Path, *, memory: bool = True,
                 memory_cap: int = 4608 << 20) -> None:
        self.seed = seed
        self.specs = specs
        self.scratch = scratch
        self.memory = memory
        self.memory_cap = memory_cap
        self._seeds: dict[str, Seed] = {}
        self._weights: dict[str, float] = {}
        scratch.mkdir(parents=True, exist_ok=True)

    def weight(self, spec: SeedSpec) -> float:
        """Large seeds are drawn less often (a case should take milliseconds)."""
        if spec.name not in self._weights:
            size = Path(spec.path).stat().st_size
            self._weights[spec.name] = spec.weight * min(1.0, 200_000 / max(1, size))
        return self._weights[spec.name]

    def seed_bag(self, spec: SeedSpec) -> Seed:
        if spec.name not in self._seeds:
            self._seeds[spec.name] = Seed(spec)
        return self._seeds[spec.name]

    def pick(self, rng: random.Random) -> tuple[SeedSpec, str]:
        formats = sorted({s.format for s in self.specs})
        fmt = formats[0] if len(formats) == 1 else rng.choice(formats)  # (one format: the draws of old)
        gen = [s for s in self.specs if s.origin == "gen" and s.format == fmt]
        real = [s for s in self.specs if s.origin == "real" and s.format == fmt]
        pool = real if real and (not gen or rng.random() < 0.45) else gen
        spec = rng.choices(pool, weights=[self.weight(s) for s in pool])[0]
        table = kinds_of(fmt)
        kinds = list(table)
        kind = rng.choices(kinds, weights=[table[k] for k in kinds])[0]
        return spec, kind


def case_rng(seed: int, case: int) -> random.Random:
    return random.Random(f"fastbag-fuzz/{seed}/{case}")


def build_mutant(ctx: Context, case: int) -> tuple[Seed, Mutant]:
    rng = case_rng(ctx.seed, case)
    for attempt in range(20):
        spec, kind = ctx.pick(rng)
        seed = ctx.seed_bag(spec)
        if spec.format == "mcap":
            from tools import fuzz_mcap
            mutant = fuzz_mcap.make_case(rng, seed, kind)
        else:
            mutant = make_case(rng, seed, kind, str(ctx.scratch / "rewrite.bag"))
        if mutant is not None:
            mutant.open_kwargs = dict(spec.open_kwargs)
            mutant.seed_version = seed.structure.version
            if rng.random() < 0.3:
                mutant.open_kwargs["workers"] = 1
            if rng.random() < 0.3:  # every read larger than the cache: chunks in tasks of several (Bag._chunk_tasks)
                mutant.open_kwargs["cache_bytes"] = 0
            return seed, mutant
    seed = ctx.seed_bag(rng.choice(ctx.specs))
    return seed, Mutant(seed.data[:rng.randrange(len(seed.data) + 1)], "cut-random", "fallback cut")


def run_case(ctx: Context, case: int, *, verbose: bool = False, save: str | None = None,
             announce: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Build case ``case`` and run it; a JSON-ready summary (``announce`` hears what it is before it runs)."""
    started = time.perf_counter()
    result: dict[str, Any] = {"case": case}
    try:
        seed, mutant = build_mutant(ctx, case)
    except Exception as exc:  # noqa: BLE001 - a harness bug: report it, do not blame the library
        result.update(kind="?", seed_bag="?", problems=[dataclasses.asdict(Problem(
            "harness", "mutate", "".join(traceback.format_exception(exc))[-800:], f"harness {type(exc).__name__}"))])
        return result
    path = str(ctx.scratch / "case.bag")
    Path(path).write_bytes(mutant.data)
    if save:
        Path(save).write_bytes(mutant.data)
    result.update(kind=mutant.kind, seed_bag=seed.spec.name, detail=mutant.detail, size=len(mutant.data))
    if announce:
        announce({"start": case, "kind": mutant.kind, "seed_bag": seed.spec.name, "detail": mutant.detail,
                  "size": len(mutant.data)})
    if verbose:
        print(f"case {case}: seed bag {seed.spec.name} ({len(seed.data)} bytes)\n  mutation {mutant.kind}: "
              f"{mutant.detail}\n  file {path} ({len(mutant.data)} bytes), open options {mutant.open_kwargs}",
              flush=True)
    rng = random.Random(f"fastbag-fuzz-run/{ctx.seed}/{case}")
    decoded = rng.random() < 0.2
    size = max(1, len(mutant.data))
    # Memory: a share of the cases trace every allocation (peak per case; the address space may grow by
    # --memory-cap, so a claimed size up to 4 GiB is allocated and seen); the others run with the address
    # space capped near what the file justifies, so a runaway allocation is a MemoryError.
    mode = "off"
    if ctx.memory:
        mode = "traced" if rng.random() < TRACED_SHARE else "capped"
        vm = _vm_size()
        if mode == "traced":
            if not tracemalloc.is_tracing():
                tracemalloc.start(1)
            PEAKS.install()
            PEAKS.start()
            _limit_address_space(vm + ctx.memory_cap)
        else:
            if tracemalloc.is_tracing():
                tracemalloc.stop()
            _limit_address_space(vm + CAPPED_SLACK + OVERSIZE_FLOOR + OVERSIZE_FACTOR * size)
    if verbose:
        print(f"  memory: {mode}", flush=True)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    after = mutant.oracle[2] if mutant.oracle and mutant.oracle[0] == "mcap-chunk" else None
    runner = Runner(path, open_kwargs=mutant.open_kwargs, decoded=decoded, verbose=verbose, after=after)
    try:
        out = runner.run()
    finally:
        if ctx.memory:
            _limit_address_space(_vm_size() + ctx.memory_cap)
    site = None
    if mode == "traced":
        out.peak, site = PEAKS.stop()
    out.rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    problems = list(out.problems)
    if out.peak > OVERSIZE_FLOOR and out.peak > OVERSIZE_FACTOR * size:
        problems.append(Problem("oversize", "memory", f"peak allocation {out.peak} bytes for a {size}-byte file "
                                f"({out.peak / size:.0f}x), mostly in {site or '?'}", f"oversize peak {site or '?'}"))
    try:
        problems += check_consistency(out, mutant)
        problems += check_oracle(out, mutant, seed)
    except Exception as exc:  # noqa: BLE001
        problems.append(Problem("harness", "check", "".join(traceback.format_exception(exc))[-800:],
                                f"harness {type(exc).__name__}"))
    for p in problems:
        known = known_defect(p, mutant)
        if known:
            p.signature = f"{p.signature} [{known}]"
    result.update(
        problems=[dataclasses.asdict(p) for p in problems], opened=out.opened, recovered=out.recovered,
        errors=dict(out.errors), warned=bool(out.warnings), peak=out.peak, rss_growth=out.rss_growth, memory=mode,
        seconds=time.perf_counter() - started, run_seconds=out.seconds,
        outcome=("error" if not out.opened else "warning" if out.warnings else
                 "partial" if out.errors else "clean"))
    if verbose:
        print(f"  outcome: {result['outcome']}; errors {dict(out.errors)}; {len(out.warnings)} warnings; "
              f"peak allocation {out.peak} bytes ({out.peak / size:.1f}x the file); {out.seconds * 1000:.1f} ms")
        for p in problems:
            print(f"  PROBLEM [{p.category}] {p.stage}: {p.text}")
        if not problems:
            print("  no problems")
    return result


# -- workers ------------------------------------------------------------------------------------


def _vm_size() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _limit_address_space(limit: int) -> None:
    """Set the soft RLIMIT_AS (the hard limit stays, so it can be raised again)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def warm_up(ctx: Context) -> None:
    """Load Numba's kernels and every code path once, so cases measure only themselves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for spec in ctx.specs:
            if spec.origin == "gen":
                Runner(spec.path, open_kwargs=spec.open_kwargs, decoded=True).run()


def worker_main(args: argparse.Namespace) -> int:
    """Serve cases: read a case number per line on stdin, answer one JSON line per case."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed goes to the log, not the protocol
    sys.stdout = sys.stderr
    import faulthandler
    faulthandler.enable()
    specs = [SeedSpec(**s) for s in json.loads(Path(args.corpus_list).read_text())]
    ctx = Context(args.seed, specs, Path(args.scratch), memory=bool(args.memory_cap),
                  memory_cap=args.memory_cap << 20)
    warm_up(ctx)
    proto.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        case = int(line)
        print(f"case {case}", file=sys.stderr, flush=True)
        result = run_case(ctx, case, announce=lambda info: proto.write(json.dumps(info, default=str) + "\n"))
        proto.write(json.dumps(result, default=str) + "\n")
    return 0


class Worker:
    def __init__(self, index: int, args: argparse.Namespace, corpus_list: Path, root: Path) -> None:
        self.index = index
        self.args = args
        self.corpus_list = corpus_list
        self.root = root
        self.case: int | None = None
        self.info: dict[str, Any] = {}
        self.deadline = 0.0
        self.started = 0.0
        self.buffer = b""
        self.ready = False
        self.log_path = root / f"worker-{index}.log"
        self.proc: subprocess.Popen | None = None
        self.restarts = -1
        self.start()

    def start(self) -> None:
        self.restarts += 1
        scratch = self.root / f"w{self.index}"
        cmd = [sys.executable, "-m", "tools.fuzz", "--worker", "--seed", str(self.args.seed),
               "--corpus-list", str(self.corpus_list), "--scratch", str(scratch),
               "--memory-cap", str(self.args.memory_cap)] + (["--windows"] if self.args.windows else [])
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     bufsize=0, cwd=REPO_ROOT)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.ready = False
        self.buffer = b""
        self.case = None
        self.deadline = time.monotonic() + 300  # start-up (Numba loads, seeds warm up)

    def send(self, case: int, timeout: float) -> None:
        self.case = case
        self.info: dict[str, Any] = {}
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.proc.stdin.write(f"{case}\n".encode())

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait()
        self.log.close()

    def tail(self, n: int = 12) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


def _info(w: "Worker") -> dict[str, Any]:
    info = dict(getattr(w, "info", {}) or {})
    info.pop("start", None)
    return info


def supervise(args: argparse.Namespace, specs: list[SeedSpec], root: Path, cases: list[int],
              report: Callable[[dict[str, Any]], None]) -> None:
    """Run ``cases`` on ``args.jobs`` workers; crashes and hangs become results too."""
    corpus_list = root / "corpus.json"
    corpus_list.write_text(json.dumps([dataclasses.asdict(s) for s in specs]))
    workers = [Worker(i, args, corpus_list, root) for i in range(args.jobs)]
    todo = list(reversed(cases))
    retried: set[int] = set()
    sel = selectors.DefaultSelector()
    for w in workers:
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
    try:
        while True:
            for w in workers:
                if w.ready and w.case is None and todo:
                    w.send(todo.pop(), args.timeout)
            if not todo and all(w.case is None for w in workers if w.ready) and all(w.ready for w in workers):
                break
            now = time.monotonic()
            wait = max(0.0, min(w.deadline for w in workers) - now)
            for key, _ in sel.select(timeout=min(wait, 1.0)):
                w = key.data
                try:
                    chunk = os.read(w.proc.stdout.fileno(), 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:  # the worker died
                    sel.unregister(w.proc.stdout)
                    code = w.proc.wait()
                    if w.case is not None:
                        sig = -code if code < 0 else None
                        name = signal.Signals(sig).name if sig else f"exit {code}"
                        report({"case": w.case, "crash": name, "log": w.tail(),
                                "seconds": time.monotonic() - w.started, **_info(w)})
                    elif not w.ready:
                        raise RuntimeError(f"worker {w.index} failed to start:\n{w.tail(40)}")
                    w.kill()
                    w.start()
                    sel.register(w.proc.stdout, selectors.EVENT_READ, w)
                    continue
                w.buffer += chunk
                while b"\n" in w.buffer:
                    line, w.buffer = w.buffer.split(b"\n", 1)
                    msg = json.loads(line)
                    if "ready" in msg:
                        w.ready = True
                        w.deadline = float("inf")
                        continue
                    if "start" in msg:
                        w.info = msg
                        continue
                    w.case = None
                    w.deadline = float("inf")
                    report(msg)
            now = time.monotonic()
            for w in workers:
                if now > w.deadline:
                    if w.case is not None and w.case not in retried:
                        retried.add(w.case)   # once more, in a fresh worker: a busy machine is not a hang
                        todo.append(w.case)
                    elif w.case is not None:
                        report({"case": w.case, "hang": True, "seconds": now - w.started, "log": w.tail(4),
                                **_info(w)})
                    elif not w.ready:
                        raise RuntimeError(f"worker {w.index} did not start in time:\n{w.tail(40)}")
                    sel.unregister(w.proc.stdout)
                    w.kill()
                    w.start()
                    sel.register(w.proc.stdout, selectors.EVENT_READ, w)
    finally:
        for w in workers:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
            w.kill()


# -- the campaign ----------------------------------------------------------------------------------

CATEGORIES = [("crash", "crashes (worker died: signal)"), ("hang", "hangs (timeouts)"),
              ("exception", "non-fastbag exceptions"), ("oversize", "oversize allocations"),
              ("wrong", "wrong results"), ("message", "errors without file/offset/record or topic/index"),
              ("warning", "warnings other than FastbagWarning"), ("harness", "harness errors")]


class Tally:
    """Everything the summary prints."""

    def __init__(self, seed: int, command: str) -> None:
        self.seed = seed
        self.command = command
        self.results = 0
        self.kinds: Counter = Counter()
        self.kind_seconds: Counter = Counter()
        self.kind_failures: Counter = Counter()
        self.outcomes: Counter = Counter()
        self.errors: Counter = Counter()
        self.failures: dict[str, list[tuple[int, str]]] = defaultdict(list)   # category -> [(case, text)]
        self.signatures: dict[str, list[int]] = defaultdict(list)
        self.max_ratio = (0.0, None, 0)
        self.max_peak = (0, None, 0)
        self.max_clean_ratio = (0.0, None, 0)
        self.max_rss = (0.0, None, 0)
        self.slowest = (0.0, None)
        self.started = time.monotonic()
        self.seeds: Counter = Counter()
        self.memory: Counter = Counter()
        self.seed_seconds: Counter = Counter()

    def add(self, r: dict[str, Any]) -> None:
        self.results += 1
        case = r["case"]
        kind = r.get("kind", "?")
        if "crash" in r or r.get("hang"):
            cat = "crash" if "crash" in r else "hang"
            what = f"worker died: {r['crash']}" if cat == "crash" else f"no answer after {r['seconds']:.1f} s " \
                "(twice, in fresh workers)"
            sig = f"crash {r['crash']}" if cat == "crash" else "hang"
            known = known_defect(Problem(cat, "run", what, sig), Mutant(b"", kind, r.get("detail", "")))
            if known:
                sig += f" [{known}]"
            self.failures[cat].append((case, f"[{kind}] {r.get('seed_bag')}: {r.get('detail')}\n      {what}" +
                                       (f"\n      known defect [{known}]" if known else "") +
                                       (f"\n      worker log: {r.get('log', '')[-300:]}" if cat == "crash" else "")))
            self.signatures[sig].append(case)
            self.outcomes[cat] += 1
            self.kinds[kind] += 1
            self.kind_failures[kind] += 1
            return
        self.kinds[kind] += 1
        self.seeds[r.get("seed_bag", "?")] += 1
        self.seed_seconds[r.get("seed_bag", "?")] += r.get("seconds", 0.0)
        self.kind_seconds[kind] += r.get("seconds", 0.0)
        self.outcomes[r.get("outcome", "?")] += 1
        self.memory[r.get("memory", "?")] += 1
        self.errors.update(r.get("errors", {}))
        size = max(1, r.get("size", 1))
        ratio = r.get("peak", 0) / size
        if ratio > self.max_ratio[0] and r.get("peak", 0) >= 1 << 20:  # tiny files make tiny peaks look big
            self.max_ratio = (ratio, case, r.get("peak", 0))
        if r.get("peak", 0) > self.max_peak[0]:
            self.max_peak = (r["peak"], case, size)
        if not r.get("problems") and r.get("peak", 0) >= 1 << 20 and ratio > self.max_clean_ratio[0]:
            self.max_clean_ratio = (ratio, case, r.get("peak", 0))
        rss = r.get("rss_growth", 0) / size
        if rss > self.max_rss[0]:
            self.max_rss = (rss, case, r.get("rss_growth", 0))
        if r.get("seconds", 0) > self.slowest[0]:
            self.slowest = (r["seconds"], case)
        problems = r.get("problems", [])
        if problems:
            self.kind_failures[kind] += 1
        seen = set()
        for p in problems:
            if p["signature"] in seen:
                continue
            seen.add(p["signature"])
            label = p["signature"].rsplit(" [", 1)[1].rstrip("]") if " [D" in p["signature"] else None
            self.failures[p["category"]].append((case, f"[{kind}] {r.get('seed_bag')}: {r.get('detail')}\n"
                                                       f"      {p['stage']}: {p['text']}" +
                                                       (f"\n      known defect [{label}]" if label else "")))
            self.signatures[p["signature"]].append(case)

    def failed_cases(self) -> set[int]:
        return {c for items in self.failures.values() for c, _ in items}

    def summary(self, cases: int, first: int, *, limit: int = 5) -> str:
        elapsed = time.monotonic() - self.started
        lines = ["", "=" * 78, "fastbag fuzz campaign summary", "=" * 78,
                 f"command: {self.command}",
                 f"seed {self.seed}; cases {first}..{first + cases - 1}; {self.results} run in {elapsed:.1f} s "
                 f"({self.results / max(elapsed, 1e-9):.1f} cases/s)",
                 f"seed bags: {len(self.seeds)} used; outcomes: " + ", ".join(f"{k} {v}" for k, v in
                                                                              sorted(self.outcomes.items())),
                 "fastbag errors raised: " + (", ".join(f"{k} {v}" for k, v in self.errors.most_common()) or "none"),
                 ""]
        lines.append(f"cases: {self.results}")
        for cat, label in CATEGORIES:
            items = self.failures.get(cat, [])
            n = len({c for c, _ in items})
            known = Counter(text.split("[D")[1].split("]")[0] for _, text in items if "[D" in text)
            note = f" ({sum(known.values())} of them known defects: " + ", ".join(
                f"D{k} {v}" for k, v in sorted(known.items())) + ")" if known else ""
            lines.append(f"{label}: {n}{note}")
        ratio, case, peak = self.max_ratio
        traced = self.memory.get("traced", 0)
        lines.append(f"largest peak allocation / file size (peaks of 1 MiB or more; {traced} traced cases): "
                     f"{ratio:.1f}x ({peak} bytes, case {case})")
        ratio, case, peak = self.max_clean_ratio
        lines.append(f"  ... among cases without problems: {ratio:.1f}x ({peak} bytes, case {case})")
        peak, case, size = self.max_peak
        lines.append(f"largest peak allocation: {peak} bytes for a {size}-byte file (case {case}; numpy records "
                     "the size of an allocation that then fails)")
        ratio, case, peak = self.max_rss
        lines.append(f"largest RSS growth / file size: {ratio:.1f}x ({peak} bytes, case {case})")
        lines.append(f"slowest case: {self.slowest[0] * 1000:.0f} ms (case {self.slowest[1]})")
        lines += ["", "mutation kinds: cases (share), mean ms per case, cases with problems"]
        total = max(1, sum(self.kinds.values()))
        from tools import fuzz_mcap
        for kind in [k for k in list(KINDS) + list(fuzz_mcap.KINDS) if self.kinds.get(k)] or list(KINDS):
            n = self.kinds.get(kind, 0)
            ms = 1000 * self.kind_seconds.get(kind, 0.0) / max(1, n)
            lines.append(f"  {kind:17s} {n:7d} ({100 * n / total:4.1f}%) {ms:7.1f} ms  {self.kind_failures.get(kind, 0)}")
        costly = sorted(self.seed_seconds.items(), key=lambda kv: -kv[1])[:5]
        lines += ["", "seed bags taking the most time: " + "; ".join(
            f"{name[-50:]} {self.seeds[name]} cases, {1000 * t / max(1, self.seeds[name]):.0f} ms each"
            for name, t in costly)]
        if self.signatures:
            lines += ["", "problems by signature (cases):"]
            for sig, found in sorted(self.signatures.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"  {len(found):6d}  {sig}   e.g. case {found[0]}")
        for cat, label in CATEGORIES:
            items = self.failures.get(cat, [])
            if not items:
                continue
            lines += ["", f"{label}:"]
            shown: Counter = Counter()
            for case, text in items:
                key = text.split("\n")[-1][:60]
                shown[key] += 1
                if shown[key] <= limit:
                    lines.append(f"  case {case}: {text}")
                    lines.append(f"    reproduce: python -m tools.fuzz --seed {self.seed} --case {case} --verbose")
            hidden = len(items) - sum(min(v, limit) for v in shown.values())
            if hidden:
                lines.append(f"  ... and {hidden} more (--failures FILE lists every case)")
        lines.append("=" * 78)
        return "\n".join(lines)


def corpus(args: argparse.Namespace, root: Path) -> list[SeedSpec]:
    from tools import fuzz_mcap
    formats = set(args.formats.split(","))
    unknown = formats - {"ros1", "mcap"}
    if unknown:
        raise SystemExit(f"--formats: unknown {', '.join(sorted(unknown))} (known: ros1, mcap)")
    data = Path(args.data)
    specs: list[SeedSpec] = []
    if "ros1" in formats:
        specs += build_generated(root / "corpus", args.seed)
        real = real_seeds(data, args.max_seed_size) if not args.generated_only else []
        if not real and not args.generated_only:
            print(f"note: no real bags in {data} (absent?): generated seed bags only", file=sys.stderr)
        specs += real
    if "mcap" in formats:
        specs += fuzz_mcap.build_generated(root / "corpus-mcap", args.seed)
        real = fuzz_mcap.real_seeds(data, args.max_seed_size) if not args.generated_only else []
        if not real and not args.generated_only:
            print(f"note: no real MCAP files in {data / 'mcap'} (absent?): generated ones only", file=sys.stderr)
        specs += real
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    parser.add_argument("--cases", type=int, default=1000, help="number of cases (default 1000)")
    parser.add_argument("--first", type=int, default=0, help="number of the first case (default 0)")
    parser.add_argument("--case", type=int, help="run this one case in this process and print what happened")
    parser.add_argument("--verbose", action="store_true", help="with --case: print every step")
    parser.add_argument("--save", help="with --case: write the case's input bytes to this file")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per case before it counts as a hang")
    parser.add_argument("--memory-cap", type=int, default=4608,
                        help="MiB of address space a worker may grow by (RLIMIT_AS; default 4608; 0: none)")
    parser.add_argument("--data", default=os.environ.get("FASTBAG_DATA", str(DEFAULT_DATA)),
                        help="folder of real bags (ros1v2, ros1legacy, broken); default ../shared/data")
    parser.add_argument("--max-seed-size", type=int, default=MAX_SEED_SIZE, help="largest real seed bag, bytes")
    parser.add_argument("--generated-only", action="store_true", help="use generated seed bags only")
    parser.add_argument("--formats", default="ros1,mcap",
                        help="seed formats, comma-separated: ros1, mcap (default both)")
    parser.add_argument("--failures", help="write every failing case as JSON lines to this file")
    parser.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    parser.add_argument("--windows", action="store_true",
                        help="read every topic of uncompressed chunks through pread windows, however close its "
                             "messages (the small seeds' would not be: WINDOW_SPACING and WINDOW_MIN_ROWS 0)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus-list", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.windows:
        import fastbag.bag
        fastbag.bag.WINDOW_SPACING = fastbag.bag.WINDOW_MIN_ROWS = 0
    if args.worker:
        return worker_main(args)
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="fastbag-fuzz-", dir=shm if shm.is_dir() else None))
    try:
        specs = corpus(args, root)
        if args.case is not None:
            ctx = Context(args.seed, specs, root / "single", memory=bool(args.memory_cap),
                          memory_cap=args.memory_cap << 20)
            warm_up(ctx)
            result = run_case(ctx, args.case, verbose=True, save=args.save)
            return 1 if result.get("problems") else 0
        command = (f"python -m tools.fuzz --seed {args.seed} --cases {args.cases} --jobs {args.jobs} "
                   f"--timeout {args.timeout:g}" + (f" --first {args.first}" if args.first else "") +
                   (" --windows" if args.windows else "") +
                   (f" --formats {args.formats}" if args.formats != "ros1,mcap" else ""))
        tally = Tally(args.seed, command)
        print(f"{command}: {len(specs)} seed bags ({sum(1 for s in specs if s.origin == 'real')} real), "
              f"{args.jobs} workers", flush=True)
        failures = open(args.failures, "w") if args.failures else None
        last = [time.monotonic()]

        def report(r: dict[str, Any]) -> None:
            tally.add(r)
            if failures and (r.get("problems") or "crash" in r or r.get("hang")):
                failures.write(json.dumps(r, default=str) + "\n")
                failures.flush()
            if time.monotonic() - last[0] > args.progress:
                last[0] = time.monotonic()
                bad = len(tally.failed_cases())
                el = time.monotonic() - tally.started
                print(f"  {tally.results}/{args.cases} cases, {tally.results / el:.1f}/s, {bad} with problems",
                      flush=True)
        supervise(args, specs, root, list(range(args.first, args.first + args.cases)), report)
        if failures:
            failures.close()
        print(tally.summary(args.cases, args.first), flush=True)
        return 1 if tally.failed_cases() else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    # Run as tools.fuzz, not __main__: tools.fuzz_mcap imports this module, and one copy must hold its state.
    from tools import fuzz as _fuzz
    sys.exit(_fuzz.main())
