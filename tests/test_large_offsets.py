"""Bags past 4 GiB: chunk positions, index positions and file offsets beyond 32 bits.

Drives of lidar and camera data are tens of gigabytes; every offset in the
file past 2**32 must survive as a 64-bit value (ROS1 stores the index
position and each chunk's position as u64, message offsets inside a chunk as
u32). Writing gigabytes in every test run would cost minutes, so the bag here
is sparse: two chunks each hold one 2.2 GB ``uint8[]`` message whose bytes
are a hole in the file (no disk, no writing), and the messages after them,
an uncompressed chunk and small lz4 chunks, lie beyond 4.4 GB.

The file is written by the struct-level writer below (no fastbag code), and
rosbags reads the same file as the oracle: values, times and bytes of the
far topic equal its reader's; the blobs are read as zero-copy views, their
lengths checked, their bytes never touched but for a last one. An MCAP file
does the same in one chunk of 4.4 GB (its lengths are u64), the ``mcap``
package's reader the oracle.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import lz4.frame
import numpy as np
import pytest

import fastbag

BLOB = 2_200_000_000  # bytes of each hole message: two of them put what follows past 2**32
FLOAT64 = ("std_msgs/Float64", "float64 data\n", "fdb28210bfa9d7c91146260178d9a584")
BLOB_TYPE = ("test_msgs/Blob", "uint8[] data\n", "f43a8e1b362b75baa741461b46adc7e0")
TOPICS = {0: ("/x", FLOAT64), 1: ("/blob", BLOB_TYPE)}


def _field(name: str, value: bytes) -> bytes:
    return struct.pack("<I", len(name) + 1 + len(value)) + name.encode() + b"=" + value


def _header(*fields: bytes) -> bytes:
    joined = b"".join(fields)
    return struct.pack("<I", len(joined)) + joined


def _time(ns: int) -> bytes:
    return struct.pack("<II", ns // 10**9, ns % 10**9)


def _connection(conn: int) -> bytes:
    topic, (msgtype, definition, md5sum) = TOPICS[conn]
    data = b"".join(_field(k, v.encode()) for k, v in (("topic", topic), ("type", msgtype), ("md5sum", md5sum),
                                                       ("message_definition", definition)))
    return _header(_field("op", b"\x07"), _field("conn", struct.pack("<I", conn)),
                   _field("topic", topic.encode())) + struct.pack("<I", len(data)) + data


def _message(conn: int, time: int, data: bytes, unwritten: int = 0) -> bytes:
    """A message data record, but for its last ``unwritten`` bytes (a hole the caller leaves)."""
    return _header(_field("op", b"\x02"), _field("conn", struct.pack("<I", conn)), _field("time", _time(time))) + \
        struct.pack("<I", len(data) + unwritten) + data


def write_sparse_bag(path: Path) -> dict[str, list[tuple[int, object]]]:
    """The bag described above; per topic its ``(time, value)`` in order (a blob's value: its length)."""
    written: dict[str, list[tuple[int, object]]] = {"/x": [], "/blob": []}
    chunk_infos = []  # (position, start, end, {conn: count})
    with path.open("wb") as f:
        f.write(b"#ROSBAG V2.0\n")
        f.write(b"\0" * 4096)  # the bag header, written last

        def chunk(records: list[tuple[int, int, bytes]], compression: str = "none", hole: int = 0) -> None:
            """Records (conn, time, payload); ``hole`` bytes of zeros appended to the last payload, unwritten
            (an uncompressed chunk's)."""
            body, offsets, seen = b"", [], set()
            for conn, time, data in records:
                if conn not in seen and not any(conn in info[3] for info in chunk_infos):
                    body += _connection(conn)
                seen.add(conn)
                offsets.append(len(body))
                body += _message(conn, time, data, hole if (conn, time, data) == records[-1] else 0)
            size = len(body) + hole
            stored = lz4.frame.compress(body) if compression == "lz4" else body
            position = f.tell()
            f.write(_header(_field("op", b"\x05"), _field("compression", compression.encode()),
                            _field("size", struct.pack("<I", size))) + struct.pack("<I", len(stored) + hole))
            f.write(stored)
            if hole:
                f.seek(hole, os.SEEK_CUR)  # a hole: the file system writes nothing
            counts: dict[int, int] = {}
            for conn in sorted({c for c, _, _ in records}):
                entries = [(t, o) for (c, t, _), o in zip(records, offsets) if c == conn]
                counts[conn] = len(entries)
                f.write(_header(_field("op", b"\x04"), _field("ver", struct.pack("<I", 1)),
                                _field("conn", struct.pack("<I", conn)),
                                _field("count", struct.pack("<I", len(entries)))))
                f.write(struct.pack("<I", 12 * len(entries)) + b"".join(_time(t) + struct.pack("<I", o)
                                                                         for t, o in entries))
            times = [t for _, t, _ in records]
            chunk_infos.append((position, min(times), max(times), counts))

        def x(k: int) -> tuple[int, int, bytes]:
            time = 10**9 + k * 10**7
            written["/x"].append((time, k * 0.5))
            return 0, time, struct.pack("<d", k * 0.5)

        chunk([x(k) for k in range(10)])
        for b in range(2):  # the blobs: a count, then BLOB bytes of hole
            time = 10**9 + (10 + b) * 10**7
            written["/blob"].append((time, BLOB))
            chunk([(1, time, struct.pack("<I", BLOB))], hole=BLOB)
        chunk([x(k) for k in range(12, 60)])  # past 2**32, uncompressed
        for k in range(60, 200, 4):  # past 2**32, lz4, a few messages each
            chunk([x(j) for j in range(k, k + 4)], compression="lz4")
        index_pos = f.tell()
        for conn in TOPICS:
            f.write(_connection(conn))
        for position, start, end, counts in chunk_infos:
            f.write(_header(_field("op", b"\x06"), _field("ver", struct.pack("<I", 1)),
                            _field("chunk_pos", struct.pack("<Q", position)), _field("start_time", _time(start)),
                            _field("end_time", _time(end)), _field("count", struct.pack("<I", len(counts)))))
            f.write(struct.pack("<I", 8 * len(counts)) + b"".join(struct.pack("<II", c, n) for c, n in counts.items()))
        header = _header(_field("op", b"\x03"), _field("index_pos", struct.pack("<Q", index_pos)),
                         _field("conn_count", struct.pack("<I", len(TOPICS))),
                         _field("chunk_count", struct.pack("<I", len(chunk_infos))))
        f.seek(13)
        f.write(header + struct.pack("<I", 4096 - len(header) - 4) + b" " * (4096 - len(header) - 4))
    return written


@pytest.fixture(scope="module")
def sparse_bag(tmp_path_factory) -> tuple[Path, dict[str, list[tuple[int, object]]]]:
    path = tmp_path_factory.mktemp("large") / "past-4GiB.bag"
    written = write_sparse_bag(path)
    stat = path.stat()
    if stat.st_blocks * 512 > 256 << 20:
        path.unlink()
        pytest.skip(f"this file system does not keep holes ({stat.st_blocks * 512} bytes allocated for a sparse "
                    "file): writing 4.4 GB per run is not worth it")
    yield path, written
    path.unlink()


def test_a_bag_past_4_gib_reads_as_rosbags_reads_it(sparse_bag):
    from rosbags.rosbag1 import Reader
    from rosbags.typesys import Stores, get_typestore

    path, written = sparse_bag
    assert path.stat().st_size > 2**32 + 10**6
    store = get_typestore(Stores.ROS1_NOETIC)
    with Reader(path) as reader:
        x = [c for c in reader.connections if c.topic == "/x"]
        theirs = [(t, store.deserialize_ros1(raw, "std_msgs/msg/Float64").data, bytes(raw))
                  for _, t, raw in reader.messages(connections=x)]
    assert [(t, v) for t, v, _ in theirs] == [(t, v) for t, v in written["/x"]]
    with fastbag.open(path) as bag:
        assert bag.message_count == 200 - 2 + 2 and int(bag._chunks.position.max()) > 2**32
        assert bag._chunks.position[bag._chunks.position > 2**32].size == 1 + 35  # the far chunks
        arr = bag.read("/x")
        assert arr.time.tolist() == [t for t, _, _ in theirs]
        assert arr["data"].tolist() == [v for _, v, _ in theirs]
        assert [(m.time, m.msg.data) for m in bag.messages("/x")] == [(t, v) for t, v, _ in theirs]
        assert [bytes(m.data) for m in bag.messages("/x", raw=True)] == [raw for _, _, raw in theirs]
        far = bag.read("/x", start=10**9 + 150 * 10**7)
        assert far["data"].tolist() == [k * 0.5 for k in range(150, 200)]


def test_messages_of_2_gb_are_views(sparse_bag):
    """Each blob is a view of the mapping: its length from its count, its last byte the hole's zero."""
    path, written = sparse_bag
    for fresh in (True, False):
        with fastbag.open(path) as bag:
            if not fresh:
                bag.read("/blob")  # a second read goes through the mapping, not windows
            blobs = bag.read("/blob")
            assert blobs.time.tolist() == [t for t, _ in written["/blob"]]
            assert [len(blobs["data"][k]) for k in range(2)] == [BLOB, BLOB]
            assert int(blobs["data"][1][-1]) == 0 and blobs["data"][1].dtype == np.uint8
            raw = [len(m.data) for m in bag.messages("/blob", raw=True)]
            assert raw == [4 + BLOB] * 2


# -- MCAP: the same, in one chunk of 4.4 GB (MCAP's lengths and offsets are u64 throughout) ----------------

MCAP_MAGIC = b"\x89MCAP0\r\n"


def _str(text: str) -> bytes:
    return struct.pack("<I", len(text)) + text.encode()


def _record(op: int, body: bytes, unwritten: int = 0) -> bytes:
    """An MCAP record (opcode, u64 length), but for its last ``unwritten`` bytes (a hole the caller leaves)."""
    return struct.pack("<BQ", op, len(body) + unwritten) + body


def write_sparse_mcap(path: Path) -> list[tuple[int, float]]:
    """An MCAP file: a chunk holding two messages of BLOB bytes (holes), then a chunk of /x (Float64 in the
    ros1 encoding) past 4 GiB; a summary of chunk indexes. /x's ``(log_time, value)``."""
    xs = [(10**9 + k * 10**7, k * 0.5) for k in range(50)]
    schema = _record(0x03, struct.pack("<H", 1) + _str(FLOAT64[0]) + _str("ros1msg") + _str(FLOAT64[1]))
    blob_schema = _record(0x03, struct.pack("<H", 2) + _str(BLOB_TYPE[0]) + _str("ros1msg") + _str(BLOB_TYPE[1]))
    channels = [_record(0x04, struct.pack("<HH", c, c) + _str(topic) + _str("ros1") + struct.pack("<I", 0))
                for c, topic in ((1, "/x"), (2, "/blob"))]
    chunk_indexes = []
    with path.open("wb") as f:
        f.write(MCAP_MAGIC + _record(0x01, _str("ros1") + _str("fastbag tests")))
        f.write(schema + blob_schema + b"".join(channels))

        def chunk(messages: list[tuple[int, int, bytes]], hole: int = 0) -> None:
            """Messages (channel, log_time, data) in an uncompressed chunk; ``hole`` bytes of zeros after each
            one's data, unwritten (a hole: the file system stores nothing)."""
            records, offsets = [], []
            at = 0
            for channel, time, data in messages:
                offsets.append((channel, time, at))
                head = _record(0x05, struct.pack("<HIQQ", channel, 0, time, time) + data, hole)
                records.append(head)
                at += len(head) + hole
            start = f.tell()
            times = [t for _, t, _ in messages]
            f.write(_record(0x06, struct.pack("<QQQI", min(times), max(times), at, 0) + _str("") +
                            struct.pack("<Q", at), 0))
            for head in records:
                f.write(head)
                f.seek(hole, os.SEEK_CUR)
            end = f.tell()
            index_offsets = {}
            for channel in sorted({c for c, _, _ in messages}):
                index_offsets[channel] = f.tell()
                entries = b"".join(struct.pack("<QQ", t, o) for c, t, o in offsets if c == channel)
                f.write(_record(0x07, struct.pack("<HI", channel, len(entries)) + entries))
            index_map = b"".join(struct.pack("<HQ", c, o) for c, o in index_offsets.items())
            chunk_indexes.append(_record(0x08, struct.pack("<QQQQ", min(times), max(times), start, end - start) +
                                         struct.pack("<I", len(index_map)) + index_map +
                                         struct.pack("<Q", f.tell() - end) + _str("") + struct.pack("<QQ", at, at)))

        chunk([(2, 10**9 + 5 * 10**6, struct.pack("<I", BLOB)), (2, 10**9 + 6 * 10**6, struct.pack("<I", BLOB))],
              hole=BLOB)
        chunk([(1, t, struct.pack("<d", v)) for t, v in xs])
        f.write(_record(0x0F, struct.pack("<I", 0)))  # data end, no CRC
        summary_start = f.tell()
        f.write(schema + blob_schema + b"".join(channels) + b"".join(chunk_indexes))
        f.write(_record(0x02, struct.pack("<QQI", summary_start, 0, 0)) + MCAP_MAGIC)
    return xs


def test_an_mcap_file_past_4_gib_reads_as_the_mcap_package_reads_it(tmp_path):
    from mcap.reader import make_reader

    path = tmp_path / "past-4GiB.mcap"
    xs = write_sparse_mcap(path)
    if path.stat().st_blocks * 512 > 256 << 20:
        pytest.skip("this file system does not keep holes: writing 4.4 GB per run is not worth it")
    assert path.stat().st_size > 2**32 + 1000
    with path.open("rb") as f:
        theirs = [(m.log_time, struct.unpack("<d", m.data)[0], m.data)
                  for _, _, m in make_reader(f).iter_messages(topics=["/x"])]
    assert [(t, v) for t, v, _ in theirs] == xs
    with fastbag.open(path) as bag:
        assert bag.topics["/x"].message_count == 50 and bag.topics["/blob"].message_count == 2
        assert int(bag._chunks.position.max()) > 2**32
        arr = bag.read("/x")
        assert list(zip(arr.time.tolist(), arr["data"].tolist())) == xs
        assert [(m.time, m.msg.data, bytes(m.data)) for m in bag.messages("/x")] == theirs
        blobs = bag.read("/blob")
        assert [len(blobs["data"][k]) for k in range(2)] == [BLOB, BLOB] and int(blobs["data"][0][-1]) == 0
