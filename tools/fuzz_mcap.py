"""MCAP for the fuzz campaign (:mod:`tools.fuzz`): a record walk, seed files, mutators and oracles.

The walk is the harness's own (independent of :mod:`fastbag.mcap`, like the ROS1
walk in :mod:`tools.fuzz`): it reads every record, the records inside chunks
(decompressed with the ``lz4`` and ``zstandard`` packages), and notes where each
length, offset, count and CRC field lies, so a mutator can set it to an edge
value, and where the summary points into the file, so a chunk can be replaced by
a longer or shorter one with every pointer after it moved (the damage is then
the only thing wrong).

Seeds: the real ``.mcap`` files of ``../shared/data/mcap`` (the conformance
corpus' TenMessages, OneAttachment and OneMetadata variants, and the files
rosbag2 and other tools wrote) and small files written at start-up with the
``mcap`` package's writer (a test extra, never imported by the library): chunks
in none / lz4 / zstd, unchunked, without CRCs, with data CRCs, without
indexes; several channels and schemas in the ``ros1``, ``cdr`` and ``json``
encodings and a schemaless one; attachments and metadata.

Mutation kinds: :data:`KINDS` (their shares sum to 100).
"""

from __future__ import annotations

import functools
import random
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAGIC = b"\x89MCAP0\r\n"
HEAD = 9  # opcode u8 + length u64

HEADER, FOOTER, SCHEMA, CHANNEL, MESSAGE, CHUNK, MESSAGE_INDEX, CHUNK_INDEX, ATTACHMENT, ATTACHMENT_INDEX, \
    STATISTICS, METADATA, METADATA_INDEX, SUMMARY_OFFSET, DATA_END = range(1, 16)

#: The body of each record as fields: u8/u16/u32/u64 numbers, ``str`` (u32 length + bytes), ``b32`` / ``b64``
#: (u32 / u64 length + bytes), ``map`` / ``arr`` (u32 byte length + items, items parsed by ``ITEMS``),
#: ``rest`` (the remaining bytes).
FIELDS: dict[int, list[tuple[str, str]]] = {
    HEADER: [("profile", "str"), ("library", "str")],
    FOOTER: [("summary_start", "u64"), ("summary_offset_start", "u64"), ("summary_crc", "u32")],
    SCHEMA: [("id", "u16"), ("name", "str"), ("encoding", "str"), ("data", "b32")],
    CHANNEL: [("id", "u16"), ("schema_id", "u16"), ("topic", "str"), ("message_encoding", "str"),
              ("metadata", "map")],
    MESSAGE: [("channel_id", "u16"), ("sequence", "u32"), ("log_time", "u64"), ("publish_time", "u64"),
              ("data", "rest")],
    CHUNK: [("message_start_time", "u64"), ("message_end_time", "u64"), ("uncompressed_size", "u64"),
            ("uncompressed_crc", "u32"), ("compression", "str"), ("records", "b64")],
    MESSAGE_INDEX: [("channel_id", "u16"), ("records", "arr")],
    CHUNK_INDEX: [("message_start_time", "u64"), ("message_end_time", "u64"), ("chunk_start_offset", "u64"),
                  ("chunk_length", "u64"), ("message_index_offsets", "map"), ("message_index_length", "u64"),
                  ("compression", "str"), ("compressed_size", "u64"), ("uncompressed_size", "u64")],
    ATTACHMENT: [("log_time", "u64"), ("create_time", "u64"), ("name", "str"), ("media_type", "str"),
                 ("data", "b64"), ("crc", "u32")],
    ATTACHMENT_INDEX: [("offset", "u64"), ("length", "u64"), ("log_time", "u64"), ("create_time", "u64"),
                       ("data_size", "u64"), ("name", "str"), ("media_type", "str")],
    STATISTICS: [("message_count", "u64"), ("schema_count", "u16"), ("channel_count", "u32"),
                 ("attachment_count", "u32"), ("metadata_count", "u32"), ("chunk_count", "u32"),
                 ("message_start_time", "u64"), ("message_end_time", "u64"), ("channel_message_counts", "map")],
    METADATA: [("name", "str"), ("metadata", "map")],
    METADATA_INDEX: [("offset", "u64"), ("length", "u64"), ("name", "str")],
    SUMMARY_OFFSET: [("group_opcode", "u8"), ("group_start", "u64"), ("group_length", "u64")],
    DATA_END: [("data_section_crc", "u32")],
}
#: Items of maps and arrays: (record, field) -> item layout (``str`` or a number width).
ITEMS: dict[tuple[int, str], tuple[str, str]] = {
    (CHANNEL, "metadata"): ("str", "str"), (METADATA, "metadata"): ("str", "str"),
    (CHUNK_INDEX, "message_index_offsets"): ("u16", "u64"),
    (STATISTICS, "channel_message_counts"): ("u16", "u64"),
    (MESSAGE_INDEX, "records"): ("u64", "u64"),
}
WIDTH = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
#: Fields holding an absolute file offset (moved when bytes before what they point at are replaced).
POINTERS = {(FOOTER, "summary_start"), (FOOTER, "summary_offset_start"), (CHUNK_INDEX, "chunk_start_offset"),
            (CHUNK_INDEX, "message_index_offsets"), (ATTACHMENT_INDEX, "offset"), (METADATA_INDEX, "offset"),
            (SUMMARY_OFFSET, "group_start")}
NAMES = {v: k.lower() for k, v in dict(
    HEADER=1, FOOTER=2, SCHEMA=3, CHANNEL=4, MESSAGE=5, CHUNK=6, MESSAGE_INDEX=7, CHUNK_INDEX=8, ATTACHMENT=9,
    ATTACHMENT_INDEX=10, STATISTICS=11, METADATA=12, METADATA_INDEX=13, SUMMARY_OFFSET=14, DATA_END=15).items()}


# -- the walk ---------------------------------------------------------------------------------------


@dataclass
class McapRec:
    """One record: ``u8 opcode | u64 length | body``; offsets absolute, or relative to a chunk's records."""

    op: int
    start: int
    length: int
    fields: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (offset, width or byte length)
    numbers: dict[str, int] = field(default_factory=dict)            # the numeric fields' values
    items: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # map/array: [(offset, width)] values
    lengths: list[tuple[int, int, str]] = field(default_factory=list)      # (offset, width, label) length prefixes
    strings: dict[str, bytes] = field(default_factory=dict)

    @property
    def body(self) -> int:
        return self.start + HEAD

    @property
    def end(self) -> int:
        return self.start + HEAD + self.length

    @property
    def name(self) -> str:
        return NAMES.get(self.op, f"opcode {self.op:#04x}")


@dataclass
class McapMsg:
    """One message as the walk finds it (``data_start`` is absolute where the bytes lie in the file as is)."""

    channel: int
    topic: str
    time: int
    data: bytes
    chunk: int            # position in ``McapStructure.chunks``, -1 outside chunks
    rel: int              # offset of its record: in its chunk's records, or absolute
    data_start: int | None


@dataclass
class McapChunk:
    rec: McapRec
    compression: str
    records_start: int                  # absolute start of the (compressed) records
    records_len: int
    payload: bytes | None               # decompressed records (None: they do not decompress)
    inner: list[McapRec] = field(default_factory=list)
    messages: list[McapMsg] = field(default_factory=list)


@dataclass
class McapStructure:
    """What an MCAP file holds, from a forgiving walk of its records."""

    size: int
    version: str = "mcap"
    records: list[McapRec] = field(default_factory=list)    # top level, file order
    chunks: list[McapChunk] = field(default_factory=list)
    messages: list[McapMsg] = field(default_factory=list)   # file order
    topics: dict[int, str] = field(default_factory=dict)    # channel id -> topic (first definition)
    encodings: dict[int, str] = field(default_factory=dict)  # channel id -> message encoding
    channel_end: dict[int, int] = field(default_factory=dict)  # channel id -> end of the first record holding it
    header_end: int = 0
    summary_start: int = 0                                  # 0: no summary (as the footer says)
    footer: McapRec | None = None
    complete: bool = True

    def boundaries(self) -> list[int]:
        out = [len(MAGIC), self.header_end] + [r.start for r in self.records] + [r.end for r in self.records]
        for c in self.chunks:
            if c.compression == "":
                out += [c.records_start + r.start for r in c.inner]
        return sorted(set(out))

    def in_summary(self, offset: int) -> bool:
        return 0 < self.summary_start <= offset

    def inner_abs(self, chunk: McapChunk, rec: McapRec) -> int | None:
        """Where an inner record lies in the file (None: its chunk is compressed)."""
        return chunk.records_start + rec.start if chunk.compression == "" else None


def _parse(data: bytes | memoryview, op: int, start: int, end: int, base: int = 0) -> McapRec:
    """The record at ``start`` (its body ends at ``end``); field offsets are ``base`` + position."""
    length = int.from_bytes(data[start + 1:start + 9], "little")
    rec = McapRec(op, start + base, length)
    pos, stop = start + HEAD, min(end, start + HEAD + length)
    for name, kind in FIELDS.get(op, []):
        if kind in WIDTH:
            w = WIDTH[kind]
            if pos + w > stop:
                break
            rec.fields[name] = (pos + base, w)
            rec.numbers[name] = int.from_bytes(data[pos:pos + w], "little")
            pos += w
        elif kind == "rest":
            rec.fields[name] = (pos + base, stop - pos)
            pos = stop
        else:
            w = 8 if kind == "b64" else 4
            if pos + w > stop:
                break
            n = int.from_bytes(data[pos:pos + w], "little")
            rec.lengths.append((pos + base, w, f"{rec.name} {name} length"))
            pos += w
            if n > stop - pos:
                break
            rec.fields[name] = (pos + base, n)
            if kind == "str":
                rec.strings[name] = bytes(data[pos:pos + n])
            elif kind in ("map", "arr"):
                rec.items[name] = _items(data, pos, pos + n, ITEMS.get((op, name), ("str", "str")), base, rec, name)
            pos += n
    return rec


def _items(data: bytes | memoryview, pos: int, end: int, layout: tuple[str, str], base: int, rec: McapRec,
           name: str) -> list[tuple[int, int]]:
    """The values of a map or array (and the length prefixes of string items, noted on ``rec``)."""
    values = []
    while pos < end:
        for part, kind in enumerate(layout):
            if kind == "str":
                if pos + 4 > end:
                    return values
                n = int.from_bytes(data[pos:pos + 4], "little")
                rec.lengths.append((pos + base, 4, f"{rec.name} {name} item length"))
                pos += 4 + n
            else:
                w = WIDTH[kind]
                if pos + w > end:
                    return values
                if part == 1:
                    values.append((pos + base, w))
                pos += w
    return values


def _decompress(compression: str, raw: bytes, size: int) -> bytes | None:
    try:
        if compression == "":
            out = raw
        elif compression == "lz4":
            import lz4.frame
            out = lz4.frame.decompress(raw)
        elif compression == "zstd":
            import zstandard
            out = zstandard.ZstdDecompressor().decompress(raw, max_output_size=max(size, 1))
        else:
            return None
    except Exception:  # noqa: BLE001 - a damaged seed: its chunk stays opaque
        return None
    return out if len(out) == size else None


def walk(data: bytes) -> McapStructure:
    """Every record of an MCAP file, chunks opened; stops quietly at the first record that does not fit."""
    s = McapStructure(size=len(data))
    if data[:len(MAGIC)] != MAGIC:
        s.complete = False
        return s
    pos, end = len(MAGIC), len(data)
    while pos + HEAD <= end:
        op = data[pos]
        length = int.from_bytes(data[pos + 1:pos + 9], "little")
        if length > end - pos - HEAD:
            s.complete = data[pos:] == MAGIC
            break
        rec = _parse(data, op, pos, end)
        s.records.append(rec)
        if op == HEADER:
            s.header_end = rec.end
        elif op == FOOTER:
            s.footer = rec
            s.summary_start = rec.numbers.get("summary_start", 0)
        elif op in (SCHEMA, CHANNEL):
            _definition(s, rec, rec.end)
        elif op == MESSAGE:
            _message(s, data, rec, -1, 0, rec.start)
        elif op == CHUNK:
            _chunk(s, data, rec)
        pos = rec.end
    return s


def _definition(s: McapStructure, rec: McapRec, end: int) -> None:
    if rec.op == CHANNEL and "topic" in rec.strings:
        cid = rec.numbers["id"]
        s.topics.setdefault(cid, rec.strings["topic"].decode("utf-8", "replace"))
        s.encodings.setdefault(cid, rec.strings.get("message_encoding", b"").decode("utf-8", "replace"))
        s.channel_end.setdefault(cid, end)


def _message(s: McapStructure, data: bytes | memoryview, rec: McapRec, chunk: int, base: int,
             absolute: int | None) -> McapMsg | None:
    if "data" not in rec.fields:
        return None
    at, n = rec.fields["data"]
    cid = rec.numbers["channel_id"]
    msg = McapMsg(cid, s.topics.get(cid, "?"), rec.numbers["log_time"], bytes(data[at - base:at - base + n]), chunk,
                  rec.start, None if absolute is None else absolute + (at - rec.start))
    s.messages.append(msg)
    return msg


def _chunk(s: McapStructure, data: bytes, rec: McapRec) -> None:
    if "records" not in rec.fields:
        return
    at, n = rec.fields["records"]
    compression = rec.strings.get("compression", b"").decode("latin-1")
    payload = _decompress(compression, data[at:at + n], rec.numbers.get("uncompressed_size", -1))
    chunk = McapChunk(rec, compression, at, n, payload)
    k = len(s.chunks)
    s.chunks.append(chunk)
    if payload is None:
        return
    pos = 0
    while pos + HEAD <= len(payload):
        length = int.from_bytes(payload[pos + 1:pos + 9], "little")
        if length > len(payload) - pos - HEAD:
            break
        inner = _parse(payload, payload[pos], pos, len(payload))
        chunk.inner.append(inner)
        if inner.op in (SCHEMA, CHANNEL):
            _definition(s, inner, rec.end)
        elif inner.op == MESSAGE:
            m = _message(s, payload, inner, k, 0, at + pos if compression == "" else None)
            if m is not None:
                chunk.messages.append(m)
        pos = inner.end
    for m in chunk.messages:  # a chunk may hold its channel after ... no: but the topic may come from later
        m.topic = s.topics.get(m.channel, m.topic)


# -- rewriting: a chunk replaced, the pointers after it moved -------------------------------------------


def _u64(v: int) -> bytes:
    return (v & (2**64 - 1)).to_bytes(8, "little")


def chunk_record(chunk: McapChunk, data: bytes, *, compression: str | None = None, records: bytes | None = None,
                 uncompressed_size: int | None = None, crc: int | None = None) -> bytes:
    """The chunk's record with some of its fields replaced."""
    n = chunk.rec.numbers
    name = (chunk.compression if compression is None else compression).encode("latin-1")
    if records is None:
        records = data[chunk.records_start:chunk.records_start + chunk.records_len]
    body = _u64(n.get("message_start_time", 0)) + _u64(n.get("message_end_time", 0)) + \
        _u64(n.get("uncompressed_size", 0) if uncompressed_size is None else uncompressed_size) + \
        struct.pack("<I", n.get("uncompressed_crc", 0) if crc is None else crc) + \
        struct.pack("<I", len(name)) + name + _u64(len(records)) + records
    return bytes([CHUNK]) + _u64(len(body)) + body


def splice(data: bytes, s: McapStructure, start: int, end: int, new: bytes, chunk: McapChunk | None = None) -> bytes:
    """``data[start:end]`` replaced by ``new``; every absolute pointer past ``end`` moved, the replaced chunk's
    index entry given its new length, the summary and data CRCs recomputed where the file has them."""
    delta = len(new) - (end - start)
    buf = bytearray(data[:start] + new + data[end:])

    def moved(at: int) -> int:
        return at + delta if at >= end else at

    for rec in s.records:
        for name, (at, w) in rec.fields.items():
            if (rec.op, name) not in POINTERS or w != 8:
                continue
            at = moved(at)
            v = int.from_bytes(buf[at:at + 8], "little")
            if v >= end:
                buf[at:at + 8] = _u64(v + delta)
        for at, w in rec.items.get("message_index_offsets", []) if rec.op == CHUNK_INDEX else []:
            at = moved(at)
            v = int.from_bytes(buf[at:at + 8], "little")
            if v >= end:
                buf[at:at + 8] = _u64(v + delta)
        if chunk is not None and rec.op == CHUNK_INDEX and rec.numbers.get("chunk_start_offset") == chunk.rec.start:
            new_len = int.from_bytes(new[1:9], "little")
            for name, value in (("chunk_length", HEAD + new_len), ("compressed_size", new_len - _records_offset(new))):
                if name in rec.fields:
                    at = moved(rec.fields[name][0])
                    buf[at:at + 8] = _u64(value)
    fix_crcs(buf, s, delta, end)
    return bytes(buf)


def _records_offset(chunk_rec: bytes) -> int:
    """Bytes of a chunk body before its records."""
    n = int.from_bytes(chunk_rec[HEAD + 28:HEAD + 32], "little")
    return 28 + 4 + n + 8


def fix_crcs(buf: bytearray, s: McapStructure, delta: int = 0, after: int = 1 << 62) -> None:
    """Recompute the summary CRC and the data-section CRC where the file has them (nonzero)."""
    def moved(at: int) -> int:
        return at + delta if at >= after else at
    for rec in s.records:
        if rec.op == DATA_END and rec.numbers.get("data_section_crc"):
            at = moved(rec.start)
            buf[at + HEAD:at + HEAD + 4] = struct.pack("<I", zlib.crc32(buf[:at]))
    f = s.footer
    if f is not None and f.numbers.get("summary_crc") and "summary_crc" in f.fields:
        at = moved(f.start)
        start = int.from_bytes(buf[at + HEAD:at + HEAD + 8], "little")
        if 0 < start <= at:
            buf[at + HEAD + 16:at + HEAD + 20] = struct.pack("<I", zlib.crc32(buf[start:at + HEAD + 16]))


def compress(compression: str, payload: bytes) -> bytes:
    if compression == "lz4":
        import lz4.frame
        return lz4.frame.compress(payload)
    if compression == "zstd":
        import zstandard
        return zstandard.ZstdCompressor().compress(payload)
    return payload


@functools.lru_cache(maxsize=None)
def zstd_zeros(n: int, declare: bool) -> bytes:
    """A zstd frame of ``n`` zero bytes, its content size declared in the frame header or not."""
    import zstandard
    if declare:
        return zstandard.ZstdCompressor(level=3).compress(b"\0" * n)
    c = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    block = b"\0" * (1 << 20)
    return b"".join([c.compress(block) for _ in range(n >> 20)] + [c.flush()])


# -- seeds ----------------------------------------------------------------------------------------

POINT_DEF = "float64 x\nfloat64 y\nfloat64 z\n"
STRING_DEF = "string data\n"
POSE_DEF = "Header header\nint32[] values\nstring label\n================================================================================\nMSG: std_msgs/Header\nuint32 seq\ntime stamp\nstring frame_id\n"  # noqa: E501


def _ros1_string(text: bytes) -> bytes:
    return struct.pack("<I", len(text)) + text


def _cdr_string(text: bytes) -> bytes:
    return b"\x00\x01\x00\x00" + struct.pack("<I", len(text) + 1) + text + b"\0"


def write_mcap(path: Path, seed: int, *, compression: str = "zstd", chunked: bool = True, chunk_size: int = 1500,
               crcs: bool = True, data_crcs: bool = False, indexed: bool = True, n: int = 60) -> None:
    """A small MCAP file with ros1, cdr, json and schemaless channels, attachments and metadata."""
    from mcap.writer import CompressionType, IndexType, Writer
    rng = random.Random(seed)
    kinds = {"none": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
    with open(path, "wb") as f:
        w = Writer(f, chunk_size=chunk_size, compression=kinds[compression], use_chunking=chunked,
                   enable_crcs=crcs, enable_data_crcs=data_crcs,
                   index_types=IndexType.ALL if indexed else IndexType.NONE, use_statistics=indexed,
                   use_summary_offsets=indexed, repeat_channels=indexed, repeat_schemas=indexed)
        w.start(profile="ros1", library="fastbag-fuzz")
        point = w.register_schema("geometry_msgs/Point", "ros1msg", POINT_DEF.encode())
        string = w.register_schema("std_msgs/String", "ros1msg", STRING_DEF.encode())
        pose = w.register_schema("fuzz_msgs/Labelled", "ros1msg", POSE_DEF.encode())
        cdr = w.register_schema("std_msgs/msg/String", "ros2msg", b"string data\n")
        js = w.register_schema("Note", "jsonschema", b'{"type": "object"}')
        channels = [
            (w.register_channel("/point", "ros1", point, {"md5sum": "4a842b65f413084dc2b10fb484ea7f17"}), "point"),
            (w.register_channel("/chatter", "ros1", string, {"callerid": "/talker"}), "string"),
            (w.register_channel("/chatter", "ros1", string, {"callerid": "/other"}), "string"),
            (w.register_channel("/labelled", "ros1", pose), "pose"),
            (w.register_channel("/ros2/chatter", "cdr", cdr), "cdr"),
            (w.register_channel("/notes", "json", js), "json"),
            (w.register_channel("/raw", "", 0), "raw"),
        ]
        w.add_metadata("setup", {"robot": "r2", "run": str(seed)})
        t = 1_700_000_000_000_000_000 + seed
        for k in range(n):
            cid, kind = channels[rng.randrange(len(channels))] if k >= len(channels) else channels[k]
            if kind == "point":
                data = struct.pack("<3d", rng.random(), -k, 1e300 * rng.random())
            elif kind == "string":
                data = _ros1_string(b"hello %d" % k + b"!" * rng.randrange(20))
            elif kind == "pose":
                values = [rng.randrange(-99, 99) for _ in range(rng.randrange(6))]
                data = struct.pack("<III", k, t // 10**9, t % 10**9) + _ros1_string(b"map") + \
                    struct.pack(f"<I{len(values)}i", len(values), *values) + _ros1_string(b"L" * rng.randrange(4))
            elif kind == "cdr":
                data = _cdr_string(b"ros2 %d" % k)
            elif kind == "json":
                data = b'{"k": %d, "text": "note"}' % k
            else:
                data = bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
            w.add_message(cid, log_time=t, data=data, publish_time=t - 5, sequence=k)
            t += rng.choice([0, 1, 1000, 10**6, 10**7])  # ties included
            if k == n // 2:
                w.add_attachment(create_time=t, log_time=t, name="calibration.yaml", media_type="application/yaml",
                                 data=b"camera: {fx: 500}\n" * 3)
        w.add_attachment(create_time=t, log_time=t, name="empty", media_type="", data=b"")
        w.add_metadata("notes", {})
        w.finish()


def build_generated(root: Path, seed: int) -> list[Any]:
    """The generated MCAP seeds (deterministic for a seed)."""
    from tools.fuzz import SeedSpec
    root.mkdir(parents=True, exist_ok=True)
    variants: list[tuple[str, dict[str, Any]]] = [
        ("none", dict(compression="none")), ("lz4", dict(compression="lz4")), ("zstd", dict(compression="zstd")),
        ("zstd-big", dict(compression="zstd", chunk_size=1 << 20, n=40)),
        ("unchunked", dict(chunked=False)), ("lz4-nocrc", dict(compression="lz4", crcs=False)),
        ("none-nocrc", dict(compression="none", crcs=False)),
        ("none-datacrc", dict(compression="none", data_crcs=True)),
        ("zstd-unindexed", dict(compression="zstd", indexed=False)),
    ]
    out = []
    for k, (name, kwargs) in enumerate(variants):
        path = root / f"gen-mcap-{name}.mcap"
        write_mcap(path, seed + k, **kwargs)
        out.append(SeedSpec(path.name, str(path), "gen", format="mcap"))
    return out


#: Conformance variants used as seeds (every one of each).
CONFORMANCE = ("TenMessages", "OneAttachment", "OneMetadata")


def real_seeds(data: Path, max_size: int) -> list[Any]:
    """The real ``.mcap`` files under ``data/mcap``: conformance variants (drawn less often) and the rest."""
    from tools.fuzz import SeedSpec
    root = data / "mcap"
    if not root.is_dir():
        return []
    out = []
    conformance = root / "foxglove__mcap__tests__conformance__data"
    for name in CONFORMANCE:
        for path in sorted((conformance / name).glob("*.mcap")):
            out.append(SeedSpec(f"mcap/{name}/{path.name}", str(path), "real", format="mcap", weight=0.1))
    for path in sorted(root.rglob("*.mcap")):
        if conformance in path.parents or path.stat().st_size > max_size:
            continue
        out.append(SeedSpec(f"mcap/{path.relative_to(root)}"[-90:], str(path), "real", format="mcap"))
    return out


# -- mutations --------------------------------------------------------------------------------------

#: kind -> share of the MCAP cases (the weights sum to 100)
KINDS = {
    "mcap-cut-boundary": 8, "mcap-cut-random": 6, "mcap-record-length": 11, "mcap-opcode": 6, "mcap-footer": 7,
    "mcap-chunk-index": 7, "mcap-summary-index": 3, "mcap-message-index": 7, "mcap-crc": 7, "mcap-codec": 10, "mcap-lengths": 9,
    "mcap-flip-payload": 5, "mcap-cdr": 3, "mcap-unindexed": 5, "mcap-havoc": 6,
}

U64_EDGES = [0, 1, 2, 8, 9, 2**31 - 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64 - 2]


def pick_u64(rng: random.Random, old: int, size: int) -> int:
    """An edge value for a u64 length or offset."""
    choices = U64_EDGES + [old + 1, old - 1, old + rng.randint(2, 64), old - rng.randint(2, 64), size, size - 1,
                           size + 1, rng.randrange(size + 1), rng.randrange(2**64), old * 2, old // 2]
    return rng.choice(choices) & (2**64 - 1)


def pick_value(rng: random.Random, old: int, width: int, size: int) -> int:
    if width == 8:
        return pick_u64(rng, old, size)
    from tools.fuzz import _pick_value
    return _pick_value(rng, old, width, size)


def _set(buf: bytearray, at: int, width: int, value: int) -> int:
    old = int.from_bytes(buf[at:at + width], "little")
    buf[at:at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return old


def _fields_of(s: McapStructure, where: Any, names: tuple[str, ...] | None = None,
               ops: tuple[int, ...] | None = None) -> list[tuple[int, int, str]]:
    """(offset, width, label) of the numeric fields of top-level records (and of uncompressed chunks' inner ones)."""
    out = []
    for rec, base in _all_records(s):
        if ops is not None and rec.op not in ops:
            continue
        for name, (at, w) in rec.fields.items():
            if w in (1, 2, 4, 8) and name in rec.numbers and (names is None or name in names) and where(base + at):
                out.append((base + at, w, f"{rec.name} {name}"))
        for name, values in rec.items.items():
            if names is None or name in names:
                out += [(base + at, w, f"{rec.name} {name} entry") for at, w in values if where(base + at)]
    return out


def _set_field(rng: random.Random, buf: bytearray, fields: list[tuple[int, int, str]]) -> str | None:
    fields = [f for f in fields if f[0] + f[1] <= len(buf)]
    if not fields:
        return None
    at, width, label = rng.choice(fields)
    new = pick_value(rng, int.from_bytes(buf[at:at + width], "little"), width, len(buf))
    old = _set(buf, at, width, new)
    return f"{label} at {at}: {old:#x} -> {new:#x}"


def _all_records(s: McapStructure) -> list[tuple[McapRec, int]]:
    """Records whose bytes lie in the file as is: (record, base)."""
    return [(r, 0) for r in s.records] + \
        [(r, c.records_start) for c in s.chunks if c.compression == "" for r in c.inner]


def mutate_record_length(rng: random.Random, s: McapStructure, buf: bytearray) -> str | None:
    recs = [(r, b) for r, b in _all_records(s) if b + r.start + HEAD <= len(buf)]
    if not recs:
        return None
    rec, base = rng.choice(recs)
    at = base + rec.start + 1
    new = pick_u64(rng, rec.length, len(buf))
    old = _set(buf, at, 8, new)
    return f"{rec.name} record at {base + rec.start}{' (in a chunk)' if base else ''}: length {old:#x} -> {new:#x}"


def mutate_opcode(rng: random.Random, s: McapStructure, buf: bytearray) -> str | None:
    recs = [(r, b) for r, b in _all_records(s) if b + r.start < len(buf)]
    if not recs:
        return None
    rec, base = rng.choice(recs)
    at = base + rec.start
    new = rng.choice([0x00, 0x10, 0x7F, 0x80, 0xFF, rng.randrange(256)] + list(range(1, 16)))
    old = _set(buf, at, 1, new)
    return f"{rec.name} record at {at}{' (in a chunk)' if base else ''}: opcode {old:#04x} -> {new:#04x}"


def mutate_footer(rng: random.Random, s: McapStructure, buf: bytearray) -> str | None:
    f = s.footer
    if f is None or not f.fields:
        return None
    name = rng.choice(list(f.fields))
    at, width = f.fields[name]
    targets = [r.start for r in s.records] + [r.end for r in s.records] + [rng.randrange(len(buf) + 1),
                                                                          f.start, len(buf), 0]
    old = int.from_bytes(buf[at:at + width], "little")
    new = rng.choice(targets) if rng.random() < 0.5 and width == 8 else pick_value(rng, old, width, len(buf))
    _set(buf, at, width, new)
    what = f"footer {name}: {old:#x} -> {new:#x}"
    if name != "summary_crc" and rng.random() < 0.7:
        fix_crcs(buf, s)
        what += " (summary CRC recomputed)"
    return what


def mutate_chunk_index(rng: random.Random, s: McapStructure, buf: bytearray,
                       ops: tuple[int, ...] = (CHUNK_INDEX,)) -> str | None:
    """A field of a chunk index (or of another summary record: ``ops``) set to an edge value or made to point
    at a record boundary; the summary CRC mostly recomputed, so the reader has to judge the index itself."""
    fields = _fields_of(s, lambda at: True, ops=ops)
    if not fields:
        return None
    at, width, label = rng.choice(fields)
    old = int.from_bytes(buf[at:at + width], "little")
    if rng.random() < 0.4:  # point at another record or chunk boundary
        new = rng.choice(s.boundaries() + [len(buf), rng.randrange(len(buf) + 1)]) + rng.choice([0, 0, 1, -1, HEAD])
    else:
        new = pick_value(rng, old, width, len(buf))
    _set(buf, at, width, new)
    what = f"{label} at {at}: {old:#x} -> {new & 2**64 - 1:#x}"
    if rng.random() < 0.8:
        fix_crcs(buf, s)
        what += " (summary CRC recomputed)"
    return what


def mutate_message_index(rng: random.Random, s: McapStructure, buf: bytearray) -> str | None:
    recs = [r for r in s.records if r.op == MESSAGE_INDEX]
    if not recs:
        return None
    rec = rng.choice(recs)
    values = rec.items.get("records", [])
    pick = rng.random()
    if values and pick < 0.7:
        at, _ = rng.choice(values)     # an entry's offset, or (8 bytes before) its log_time
        if rng.random() < 0.5:
            at -= 8
            name = "log_time"
        else:
            name = "offset"
        old = int.from_bytes(buf[at:at + 8], "little")
        new = pick_u64(rng, old, len(buf)) if rng.random() < 0.6 else \
            int.from_bytes(buf[v[0] - (8 if name == "log_time" else 0):][:8], "little") \
            if (v := rng.choice(values)) else old
        _set(buf, at, 8, new)
        what = f"message index at {rec.start}: an entry's {name} {old:#x} -> {new:#x}"
    else:
        what = "message index " + (_set_field(rng, buf, [f for f in _fields_of(s, lambda a: rec.start <= a < rec.end)])
                                   or "(nothing)")
        if pick > 0.9 and rec.lengths:
            at, w, label = rng.choice(rec.lengths)
            old = _set(buf, at, w, new := pick_value(rng, int.from_bytes(buf[at:at + w], "little"), w, len(buf)))
            what = f"message index at {rec.start}: {label} {old:#x} -> {new:#x}"
    if rng.random() < 0.8:
        fix_crcs(buf, s)
    return what


CRC_FIELDS = {(CHUNK, "uncompressed_crc"), (FOOTER, "summary_crc"), (DATA_END, "data_section_crc"),
              (ATTACHMENT, "crc")}


def mutate_crc(rng: random.Random, s: McapStructure, buf: bytearray) -> tuple[str, bool] | None:
    """A CRC zeroed (no CRC: nothing changes) or changed. Returns (what, zeroed)."""
    fields = [(r.fields[name][0], r.name, name, r.numbers.get(name, 0)) for r in s.records
              for op, name in CRC_FIELDS if r.op == op and name in r.fields]
    if not fields:
        return None
    at, rname, name, old = rng.choice(fields)
    if rng.random() < 0.35 and old:
        _set(buf, at, 4, 0)
        return f"{rname} at {at}: {name} {old:#x} -> 0 (none)", True
    new = rng.choice([old ^ (1 << rng.randrange(32)), rng.randrange(1, 2**32), 0xFFFFFFFF, old + 1])
    _set(buf, at, 4, new)
    return f"{rname} at {at}: {name} {old:#x} -> {new & 0xFFFFFFFF:#x}", False


def mutate_lengths(rng: random.Random, s: McapStructure, buf: bytearray) -> str | None:
    """A string, byte-array, map or array length prefix inside a record."""
    fields = [(base + at, w, label) for r, base in _all_records(s) for at, w, label in r.lengths]
    if not fields:
        return None
    at, width, label = rng.choice(fields)
    old = int.from_bytes(buf[at:at + width], "little")
    new = pick_value(rng, old, width, len(buf)) if rng.random() < 0.8 else rng.choice([0, 1, old ^ 0x80000000])
    _set(buf, at, width, new)
    what = f"{label} at {at}: {old:#x} -> {new:#x}"
    if s.in_summary(at) and rng.random() < 0.7:
        fix_crcs(buf, s)
        what += " (summary CRC recomputed)"
    return what


CODEC_NAMES = ["", "lz4", "zstd", "none", "gzip", "bz2", "LZ4", "zstd\x00", "z" * 300, "\xff"]


def mutate_codec(rng: random.Random, seed: Any) -> tuple[bytes, str, tuple | None] | None:
    """A chunk's compressed records damaged, cut, named wrongly or made a bomb; the file stays coherent.
    The oracle, where the chunk's head stays as its index says: the messages after the chunk's last
    log_time read as before (``("mcap-chunk", k, after, rows)``)."""
    s, data = seed.structure, seed.data
    chunks = [c for c in s.chunks if c.records_len > 0]
    if not chunks:
        return None
    c = rng.choice(chunks)
    raw = bytearray(data[c.records_start:c.records_start + c.records_len])
    compressed = c.compression in ("lz4", "zstd")
    op = rng.choice(["flip", "cut", "name", "bomb", "bomb", "other-codec", "size", "trailing", "empty", "magic"])
    if op == "bomb" and not compressed:
        op = "name"
    kw: dict[str, Any] = {}
    if op == "flip":
        for _ in range(rng.choice((1, 3, 10))):
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        detail = "records flipped"
    elif op == "cut":
        del raw[rng.randrange(len(raw)):]
        detail = f"records cut to {len(raw)} bytes"
    elif op == "name":
        kw["compression"] = rng.choice([n for n in CODEC_NAMES if n != c.compression])
        detail = f"compression {c.compression!r} -> {kw['compression']!r}"
    elif op == "bomb":  # far past the declared size, which stays small
        if c.compression == "lz4":
            from tools.fuzz import _lz4_zeros, lz4_with_content_size
            raw = bytearray(_lz4_zeros(64 << 20))
            if rng.random() < 0.5:
                raw = bytearray(lz4_with_content_size(bytes(raw), 64 << 20))
        else:
            raw = bytearray(zstd_zeros(256 << 20, rng.random() < 0.5))
        detail = f"bomb of {len(raw)} bytes expanding to {'64' if c.compression == 'lz4' else '256'} MiB"
    elif op == "other-codec":
        payload = c.payload if c.payload is not None else bytes(raw)
        other = rng.choice([x for x in ("lz4", "zstd", "") if x != c.compression])
        raw = bytearray(compress(other, payload))
        detail = f"records compressed with {other or 'nothing'} under the name {c.compression!r}"
    elif op == "size":
        size = c.rec.numbers.get("uncompressed_size", 0)
        kw["uncompressed_size"] = rng.choice([0, 1, size - 1, size + 1, size * 2, 2**32, 2**63, 2**64 - 1])
        detail = f"uncompressed_size {size} -> {kw['uncompressed_size']} (the chunk index says {size})"
    elif op == "trailing":
        raw += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        detail = "trailing bytes after the records"
    elif op == "empty":
        raw = bytearray()
        detail = "records emptied"
    else:
        raw[:4] = bytes(4)
        detail = "first 4 bytes zeroed"
    new = chunk_record(c, data, records=bytes(raw), **kw)
    oracle = None
    if not kw and s.summary_start and c.messages:
        after = max(m.time for m in c.messages) + 1
        oracle = ("mcap-chunk", s.chunks.index(c), after)
    return splice(data, s, c.rec.start, c.rec.end, new, c), f"{c.compression or 'uncompressed'} chunk at " \
        f"{c.rec.start}: {detail}", oracle


def _cdr_edit(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A CDR message with its encapsulation header's representation id, or a u32 (a string length, a
    sequence count, or any aligned word) set to an edge value."""
    new = bytearray(data)
    if len(new) < 8 or rng.random() < 0.25:
        rep_id = rng.choice([0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 0xFF])
        new[1] = rep_id
        return bytes(new), f"representation id {data[1]:#x} -> {rep_id:#x}"
    at = 4 if rng.random() < 0.5 else 4 + 4 * rng.randrange((len(new) - 4) // 4)
    old = int.from_bytes(new[at:at + 4], "little")
    value = pick_value(rng, old, 4, len(data))
    new[at:at + 4] = value.to_bytes(4, "little")
    return bytes(new), f"u32 at {at} {old:#x} -> {value:#x}"


def mutate_payload(rng: random.Random, seed: Any, *, cdr: bool = False) -> tuple[bytes, str, tuple] | None:
    """One message's bytes changed in place (a byte; ``cdr``: a CDR length, count or header), its chunk
    recompressed and its CRCs recomputed: that message changes, nothing else."""
    s, data = seed.structure, seed.data
    msgs = [m for m in s.messages if m.data and (m.chunk < 0 or s.chunks[m.chunk].payload is not None)
            and (not cdr or s.encodings.get(m.channel) == "cdr")]
    if not msgs:
        return None
    m = rng.choice(msgs)
    if cdr:
        new, what = _cdr_edit(rng, m.data)
        if new == m.data:
            return None
        new_data = bytearray(new)
    else:
        i = rng.randrange(len(m.data))
        new_data = bytearray(m.data)
        new_data[i] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
        what = f"byte {i}"
    oracle = ("payload", m.topic, m.time, m.data, bytes(new_data))
    if m.chunk < 0:
        buf = bytearray(data)
        buf[m.data_start:m.data_start + len(new_data)] = new_data
        fix_crcs(buf, s)
        return bytes(buf), f"message at {m.rel} ({m.topic}): {what}", oracle
    c = s.chunks[m.chunk]
    inner = next(r for r in c.inner if r.start == m.rel)
    at = inner.fields["data"][0]
    payload = bytearray(c.payload)
    payload[at:at + len(new_data)] = new_data
    crc = zlib.crc32(payload) if c.rec.numbers.get("uncompressed_crc") else 0
    new = chunk_record(c, data, records=compress(c.compression, bytes(payload)), crc=crc)
    return splice(data, s, c.rec.start, c.rec.end, new, c), \
        f"message at {m.rel} of chunk {m.chunk} ({m.topic}): {what}", oracle


def _zero_summary(s: McapStructure, buf: bytearray) -> bool:
    f = s.footer
    if f is None or "summary_start" not in f.fields or not s.summary_start:
        return False
    _set(buf, f.fields["summary_start"][0], 8, 0)
    return True


def mutate_unindexed(rng: random.Random, seed: Any, buf: bytearray) -> tuple[str, tuple] | None:
    """The summary dropped (the file is scanned) and maybe one chunk's records damaged."""
    s = seed.structure
    if not _zero_summary(s, buf):
        return None
    chunks = [k for k, c in enumerate(s.chunks) if c.records_len > 0]
    if not chunks or rng.random() < 0.2:
        return "summary_start zeroed", ("mcap-unindexed", None, ())
    k = rng.choice(chunks)
    c = s.chunks[k]
    flips = []
    for _ in range(rng.choice((1, 2, 5))):
        at = rng.randrange(c.records_start, c.records_start + c.records_len)
        buf[at] ^= 1 << rng.randrange(8)
        flips.append(str(at))
    # What must survive: messages of the other chunks and outside chunks whose channel a record outside
    # the damaged chunk defines.
    defined = {r.numbers.get("id") for r in s.records if r.op == CHANNEL} | \
        {r.numbers.get("id") for j, o in enumerate(s.chunks) if j != k for r in o.inner if r.op == CHANNEL}
    keep = tuple((m.time, m.data) for m in s.messages if m.chunk != k and m.channel in defined)
    return f"summary_start zeroed; chunk {k} at {c.rec.start} records: bits flipped at " + ", ".join(flips), \
        ("mcap-unindexed", k, keep)


def mutate_structure(rng: random.Random, s: McapStructure, buf: bytearray) -> tuple[bytearray, str]:
    """Delete, duplicate or swap whole top-level records, or splice in random bytes."""
    recs = [r for r in s.records[1:] if r.end <= len(buf)]
    op = rng.choice(["delete", "duplicate", "swap", "insert", "overwrite"])
    if op in ("delete", "duplicate", "swap") and len(recs) < 2:
        op = "overwrite"
    if op == "delete":
        r = rng.choice(recs)
        return buf[:r.start] + buf[r.end:], f"deleted the {r.name} record at {r.start}"
    if op == "duplicate":
        r = rng.choice(recs)
        return buf[:r.end] + buf[r.start:r.end] + buf[r.end:], f"duplicated the {r.name} record at {r.start}"
    if op == "swap":
        k = rng.randrange(len(recs) - 1)
        a, b = recs[k], recs[k + 1]
        return buf[:a.start] + buf[b.start:b.end] + buf[a.start:a.end] + buf[b.end:], \
            f"swapped the {a.name} record at {a.start} and the {b.name} at {b.start}"
    at = rng.randrange(len(buf) + 1)
    n = rng.choice((1, 4, 9, 16, 100))
    blob = bytes(rng.randrange(256) for _ in range(n))
    if op == "insert":
        return buf[:at] + blob + buf[at:], f"inserted {n} random bytes at {at}"
    buf[at:at + n] = blob[:max(0, len(buf) - at)]
    return buf, f"overwrote {n} bytes at {at}"


def make_case(rng: random.Random, seed: Any, kind: str) -> Any:
    """Damage an MCAP ``seed`` one way; None when the kind does not apply to it."""
    from tools.fuzz import Mutant
    data, s = seed.data, seed.structure
    buf = bytearray(data)
    # Oracles need an intact reading; a warning is fine (the library scans files without chunk indexes, and
    # says so once).
    ref = seed.reference
    ok = ref.opened and ref.raw is not None and ref.attachments is not None and not ref.problems
    index = ("index",) if ok else None
    if kind in ("mcap-cut-boundary", "mcap-cut-random"):
        if kind == "mcap-cut-boundary":
            cut = rng.choice(s.boundaries() or [len(data)]) + rng.choice([0, 0, 0, -1, 1])
        else:
            cut = rng.randrange(len(data) + 1) if rng.random() < 0.1 else rng.randrange(s.header_end, len(data) + 1)
        cut = max(0, min(len(data), cut))
        return Mutant(data[:cut], kind, f"cut at {cut} of {len(data)}", ("mcap-cut", cut) if ok else None)
    if kind == "mcap-record-length":
        what = mutate_record_length(rng, s, buf)
        summary = what is not None and s.in_summary(int(what.split(" at ")[1].split(":")[0].split(" ")[0]))
        return Mutant(bytes(buf), kind, what, index if summary else None) if what else None
    if kind == "mcap-opcode":
        what = mutate_opcode(rng, s, buf)
        summary = what is not None and s.in_summary(int(what.split(" at ")[1].split(":")[0].split(" ")[0]))
        return Mutant(bytes(buf), kind, what, index if summary else None) if what else None
    if kind == "mcap-footer":
        what = mutate_footer(rng, s, buf)
        return Mutant(bytes(buf), kind, what, index) if what else None
    if kind == "mcap-chunk-index":
        what = mutate_chunk_index(rng, s, buf)
        return Mutant(bytes(buf), kind, what, index) if what else None
    if kind == "mcap-summary-index":  # summary offsets, attachment and metadata indexes, statistics
        what = mutate_chunk_index(rng, s, buf, (SUMMARY_OFFSET, ATTACHMENT_INDEX, METADATA_INDEX, STATISTICS))
        return Mutant(bytes(buf), kind, what, index) if what else None
    if kind == "mcap-message-index":
        what = mutate_message_index(rng, s, buf)
        return Mutant(bytes(buf), kind, what, index) if what else None
    if kind == "mcap-crc":
        got = mutate_crc(rng, s, buf)
        if not got:
            return None
        return Mutant(bytes(buf), kind, got[0], (("mcap-same",) if got[1] else index) if ok else None)
    if kind == "mcap-lengths":
        what = mutate_lengths(rng, s, buf)
        return Mutant(bytes(buf), kind, what) if what else None
    if kind == "mcap-codec":
        got = mutate_codec(rng, seed)
        if not got:
            return None
        oracle = got[2] + (tuple(r for r in ref.raw if r[1] >= got[2][2]),) if ok and got[2] else None
        return Mutant(got[0], kind, got[1], oracle)
    if kind in ("mcap-flip-payload", "mcap-cdr"):
        got = mutate_payload(rng, seed, cdr=kind == "mcap-cdr")
        return Mutant(got[0], kind, got[1], got[2] if ok else None) if got else None
    if kind == "mcap-unindexed":
        got = mutate_unindexed(rng, seed, buf)
        return Mutant(bytes(buf), kind, got[0], got[1] if ok else None) if got else None
    if kind == "mcap-havoc":
        steps = []
        if rng.random() < 0.3 and _zero_summary(s, buf):
            steps.append("summary_start zeroed")
        for _ in range(rng.randint(2, 6)):
            pick = rng.choice(["length", "opcode", "lengths", "index", "footer", "structure", "flip"])
            if pick == "length":
                what = mutate_record_length(rng, s, buf)
            elif pick == "opcode":
                what = mutate_opcode(rng, s, buf)
            elif pick == "lengths":
                what = mutate_lengths(rng, s, buf)
            elif pick == "index":
                what = mutate_chunk_index(rng, s, buf)
            elif pick == "footer":
                what = mutate_footer(rng, s, buf)
            elif pick == "structure":
                buf, what = mutate_structure(rng, s, buf)
            else:
                at = rng.randrange(max(1, len(buf)))
                if at < len(buf):
                    buf[at] ^= 1 << rng.randrange(8)
                what = f"bit flipped at {at}"
            if what:
                steps.append(what)
        if rng.random() < 0.2:
            cut = rng.randrange(len(buf) + 1)
            del buf[cut:]
            steps.append(f"cut at {cut}")
        return Mutant(bytes(buf), kind, "; ".join(steps) or "nothing")
    raise ValueError(kind)


# -- oracles ---------------------------------------------------------------------------------------


def check_oracle(out: Any, mutant: Any, seed: Any, wrong: Any) -> None:
    """The MCAP oracles (``mcap-cut``, ``mcap-same``, ``mcap-unindexed``); ``wrong(text, sig)`` records one."""
    ref = seed.reference
    kind = mutant.oracle[0]
    s: McapStructure = seed.structure
    original = Counter(ref.raw)
    if kind == "mcap-cut":
        cut = mutant.oracle[1]
        must = [m for m in s.messages if s.channel_end.get(m.channel, 1 << 62) <= cut and
                (s.chunks[m.chunk].rec.end if m.chunk >= 0 else m.rel + HEAD + 22 + len(m.data)) <= cut]
        if not out.opened or out.raw is None:
            if must and cut >= s.header_end:
                wrong(f"a file cut at {cut} failed ({out.open_error or out.raw_error}) though it holds complete "
                      "messages", "open-failed")
            return
        got = Counter(out.raw)
        extra = got - original
        if extra:
            wrong(f"a file cut at {cut} yields {sum(extra.values())} messages the file does not hold", "invented")
        missing = Counter((m.time, m.data) for m in must) - Counter((t, d) for _, t, d in out.raw)
        if missing:
            wrong(f"a file cut at {cut} lost {sum(missing.values())} messages of complete records "
                  f"(kept {len(out.raw)} of {len(ref.raw)})", "lost-complete")
        if len(out.raw) < len(ref.raw) and not out.warnings:
            wrong(f"a file cut at {cut} lost {len(ref.raw) - len(out.raw)} messages without a warning", "silent-loss")
        complete = [r for r in s.records if r.op == ATTACHMENT and r.end <= cut and r.strings.get("name") is not None]
        if complete and ref.attachments is not None:
            if out.attachments is None:
                wrong(f"a file cut at {cut} holds {len(complete)} complete attachments, reading them raised",
                      "attachments")
            elif len(out.attachments) < len(complete):
                wrong(f"a file cut at {cut} holds {len(complete)} complete attachments, {len(out.attachments)} "
                      "were read", "attachments-lost")
    elif kind == "mcap-same":
        if out.raw != ref.raw:
            wrong(f"a zeroed CRC (no CRC) changed the messages: {out.open_error or out.raw_error or len(out.raw)}",
                  "messages")
        if out.attachments != ref.attachments or out.metadata != ref.metadata:
            wrong("a zeroed CRC (no CRC) changed the attachments or metadata", "attachments")
        if len(out.warnings) > len(ref.warnings):
            wrong(f"a zeroed CRC (no CRC) added warnings: {out.warnings[:2]}", "warnings")
    elif kind == "mcap-chunk":
        victim, after, expected = mutant.oracle[1:]
        if not out.opened:
            wrong(f"damage to the records of chunk {victim} broke opening: {out.open_error}", "open-failed")
        elif out.after_raw != list(expected):
            what = out.after_raw_error or f"{len(out.after_raw)} messages, {len(expected)} intact"
            wrong(f"damage to the records of chunk {victim} changed the messages from {after} on, which lie in "
                  f"other chunks: {what}", "other-chunks")
    elif kind == "mcap-unindexed":
        victim, keep = mutant.oracle[1], mutant.oracle[2]
        if not out.opened or out.raw is None:
            wrong(f"a file without summary (chunk {victim} damaged) failed: {out.open_error or out.raw_error}",
                  "failed")
            return
        if victim is None:
            if Counter(out.raw) != original:
                wrong("a file without its summary does not read the same messages", "differs")
            if ref.attachments is not None and out.attachments is not None and \
                    sorted(out.attachments) != sorted(ref.attachments):
                wrong("a file without its summary does not read the same attachments", "attachments")
            return
        missing = Counter(keep) - Counter((t, d) for _, t, d in out.raw)
        if missing:
            wrong(f"damage to chunk {victim} of a file without summary lost {sum(missing.values())} messages of "
                  "other chunks", "lost-other-chunks")
