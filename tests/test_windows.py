"""Windowed reads: large messages decoded from pread windows onto their heads and tails (Bag._decode_windows).

A topic whose messages lie far apart in uncompressed chunks (a camera or
lidar topic) is read without touching the mapping's pages: each record's head
and each message's tail are read with pread, the layout walk runs over those
windows, and arrays stay views of the mapping. These tests prove that the
values are what rosbags decodes, whichever way a read goes (windows, or the
mapping when a type's fields lie outside the windows), that the pages are in
fact not touched, and that damage is reported as it is without windows.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import fastbag
from fastbag import bag as bag_module
from fastbag.tooling.synth import MIXED_STREAMS, write_bag

from oracle import assert_reads_equal, assert_same, rosbags_messages

TWO_ARRAYS = "/scan"  # LaserScan: ranges[] then intensities[], whose count lies between the windows


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """A mixed recording, uncompressed: 0.5 s of every benchmark stream (clouds of 20k points), ~6 MB."""
    path = tmp_path_factory.mktemp("windows") / "mixed.bag"
    write_bag(path, MIXED_STREAMS, seconds=0.5, points=20_000)
    return path


@pytest.fixture(scope="module")
def expected(mixed) -> dict[str, list]:
    return rosbags_messages(mixed)


def _force_windows(monkeypatch, head: int | None = None, tail: int | None = None) -> None:
    """Windows for every read, however close its messages (the small test bag's are)."""
    monkeypatch.setattr(bag_module, "WINDOW_SPACING", 0)
    monkeypatch.setattr(bag_module, "WINDOW_MIN_ROWS", 0)
    if head is not None:
        monkeypatch.setattr(bag_module, "WINDOW_HEAD", head)
    if tail is not None:
        monkeypatch.setattr(bag_module, "WINDOW_TAIL", tail)


def _spy(monkeypatch) -> list[str]:
    """Topics read through windows (each appended once its windowed read has finished)."""
    used: list[str] = []
    original = bag_module.Bag._decode_windows

    def spy(self, builder, index, selected):
        original(self, builder, index, selected)
        used.append(builder.topic)

    monkeypatch.setattr(bag_module.Bag, "_decode_windows", spy)
    return used


def test_windowed_reads_equal_rosbags(mixed, expected, monkeypatch):
    _force_windows(monkeypatch)
    used = _spy(monkeypatch)
    with fastbag.open(mixed) as bag:
        assert_reads_equal(bag, expected)
        assert sorted(used) == sorted(bag.topics)
        # The fields of every type but LaserScan's lie in the windows; a LaserScan's second count does not,
        # and the topic went through the mapping (values above), later reads of it straight away.
        assert bag._unwindowed == {TWO_ARRAYS}
        used.clear()
        assert_same(bag.read(TWO_ARRAYS)[0], expected[TWO_ARRAYS][0], "second read")
        # Messages read before go through the mapping (whose pages then stay mapped for the reads after).
        again = bag.read("/points")
        assert_same(again[-1], expected["/points"][-1], "read again")
        assert used == []
    with fastbag.open(mixed) as bag:  # a fresh handle: windows again
        bag.take("/points", [0, 2])
        bag.take("/points", [1, 3])  # other messages of the topic: windows too
        bag.take("/points", [3])
    assert used == ["/points", "/points"]


def test_user_code_on_a_fresh_handle(mixed, expected, monkeypatch):
    """As a user writes it: open, read the clouds, use the points and header by attribute."""
    _force_windows(monkeypatch)
    from fastbag.msg.sensors import pointcloud

    with fastbag.open(mixed) as bag:
        clouds = bag.read("/points")
    for i, (points, msg) in enumerate(zip(pointcloud(clouds), expected["/points"])):
        assert points.tobytes() == bytes(msg.data)
        assert clouds[i].header.frame_id == msg.header.frame_id
        assert clouds[i].header.stamp.sec == msg.header.stamp.sec
        assert clouds[i].is_dense == msg.is_dense  # the byte after the data: the tail window
        assert [f.name for f in clouds[i].fields] == [f.name for f in msg.fields]


def _tails_spy(monkeypatch) -> list[bool]:
    """Whether each windowed read of a part read its messages' tails."""
    calls: list[bool] = []
    original = bag_module.Bag._read_windows

    def spy(self, index, rows, tails=True):
        calls.append(tails)
        return original(self, index, rows, tails)

    monkeypatch.setattr(bag_module.Bag, "_read_windows", spy)
    return calls


def test_a_type_ending_with_its_array_reads_heads_only(mixed, expected, monkeypatch):
    """Image (pixels last) and Livox CustomMsg (points last) need no tails: heads only, once; PointCloud2
    (is_dense after its data) reads heads and tails from the start. Values equal rosbags'."""
    _force_windows(monkeypatch)
    calls = _tails_spy(monkeypatch)
    for topic, tails in (("/camera/image_raw", False), ("/livox/lidar", False), ("/points", True)):
        calls.clear()
        with fastbag.open(mixed) as bag:
            arr = bag.read(topic)
            assert calls and set(calls) == {tails}, topic
            assert bag._unwindowed == set()
        for i in range(len(arr)):
            assert_same(arr[i], expected[topic][i], f"read({topic})[{i}]")


def test_a_field_in_the_tail_after_all_is_read_again_with_tails(tmp_path, monkeypatch):
    """A type ending with a slot whose bytes lie in the tail (a note after a large array): heads alone miss
    it, the part is read again with tails, and so are the topic's later parts; values as written."""
    _force_windows(monkeypatch)
    monkeypatch.setattr(bag_module, "WINDOW_PROBE", 2)
    monkeypatch.setattr(bag_module, "WINDOW_PART", 3)
    path = tmp_path / "note.bag"
    notes = [f"note {k}" * (k + 1) for k in range(8)]
    with fastbag.Writer(path) as writer:
        c = writer.add_connection("/big", "test_msgs/BigThenNote", "uint8[] big\nstring note\n",
                                  "7fb76fe606ee3f9ec706b9056dee0f85")
        for k, note in enumerate(notes):
            big = bytes([k]) * (5000 + k)
            writer.write(c, 10**9 + k, struct.pack("<I", len(big)) + big + struct.pack("<I", len(note)) +
                         note.encode())
    calls = _tails_spy(monkeypatch)
    with fastbag.open(path) as bag:
        arr = bag.read("/big")
        assert list(arr["note"]) == notes
        assert [bytes(arr["big"][k]) for k in range(8)] == [bytes([k]) * (5000 + k) for k in range(8)]
        assert calls == [False, True, True, True] and bag._unwindowed == set()  # the probe twice, then 2 parts


@pytest.mark.parametrize("head,tail", [(40, 0), (47, 8), (64, 1), (96, 16), (200, 0), (300, 64), (4096, 4096)])
def test_any_window_size_reads_the_same(mixed, expected, monkeypatch, head, tail):
    """Windows too small for the record header, cut inside a field, or larger than whole messages: every
    read equals rosbags' values, by windows where they hold every field read, through the mapping otherwise."""
    _force_windows(monkeypatch, head, tail)
    with fastbag.open(mixed) as bag:
        for topic in bag.topics:
            arr = bag.read(topic)
            for i in (0, len(arr) // 2, len(arr) - 1):
                assert_same(arr[i], expected[topic][i], f"read({topic})[{i}] with windows {head}/{tail}")
            assert [m.topic for m in bag.messages(topics=topic)] == [topic] * len(arr)


@pytest.mark.parametrize("gap", [0, 100, 1 << 20])
@pytest.mark.parametrize("head,tail", [(47, 8), (1024, 512)])
def test_windows_read_as_shared_ranges_read_the_same(mixed, expected, monkeypatch, gap, head, tail):
    """Windows close together in the file are read as one range each message's window runs to the end of
    (WINDOW_GAP): values equal rosbags' whether only overlapping windows share a range, close ones too, or a whole
    topic is one range; and close windows are in fact read together (fewer reads than messages)."""
    from fastbag.io.source import Source

    _force_windows(monkeypatch, head, tail)
    monkeypatch.setattr(bag_module, "WINDOW_GAP", gap)
    reads: list[int] = []
    original = Source.gather

    def gather(self, offsets, lengths):
        reads.append(len(offsets))
        return original(self, offsets, lengths)

    monkeypatch.setattr(Source, "gather", gather)
    with fastbag.open(mixed) as bag:
        reads.clear()
        imu = bag.read("/imu")  # 100 messages of ~0.3 kB, 5 ms apart, other topics between
        if head == 1024:  # an Imu message fits its head window: no tails, every field in the windows
            assert bag._unwindowed == set()
            assert sum(reads) < len(imu)  # overlapping windows (the next message starts in this one's) at least
            if gap == 1 << 20:
                assert sum(reads) < 10  # a few ranges: the probe's and the rest's, cut where file order turns
        for topic in bag.topics:
            arr = imu if topic == "/imu" else bag.read(topic)
            for i in range(len(arr)):
                assert_same(arr[i], expected[topic][i], f"read({topic})[{i}] with windows {head}/{tail}, gap {gap}")


def _rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_windowed_read_leaves_the_pages_of_messages_untouched(tmp_path, monkeypatch):
    # Clouds of 256 KB (a page fault each, with the kernel's fault-around of 64 KB): far apart by themselves.
    path = tmp_path / "clouds.bag"
    write_bag(path, MIXED_STREAMS[3:4], seconds=4.0, points=16_384)
    with fastbag.open(path) as bag:
        windowed = bag.read("/points")
        touched_windowed = _rss_kb(path)
        count = len(windowed)
    monkeypatch.setattr(bag_module, "WINDOW_SPACING", 1 << 62)
    with fastbag.open(path) as bag:
        mapped = bag.read("/points")
        touched_mapped = _rss_kb(path) - touched_windowed  # (the first mapping is still alive: its views)
        assert [bytes(a) for a in windowed.data] == [bytes(a) for a in mapped.data]
    assert count == 40
    assert touched_mapped >= 4 * count       # at least a page a message, through the mapping
    assert touched_windowed < touched_mapped / 4


def test_mcap_windowed_reads_equal_the_mapped(mixed, tmp_path, monkeypatch):
    from fastbag.tooling.synth_mcap import write_rosbag2_mcap

    file = write_rosbag2_mcap(mixed, tmp_path / "ros2", compression="none")
    with fastbag.open(file) as bag:
        mapped = {topic: bag.read(topic) for topic in bag.topics}
    _force_windows(monkeypatch)
    used = _spy(monkeypatch)
    with fastbag.open(file) as bag:
        for topic, theirs in mapped.items():
            ours = bag.read(topic)
            assert len(ours) == len(theirs)
            for i in range(len(ours)):
                assert ours[i] == theirs[i], f"{topic}[{i}]"
        assert sorted(used) == sorted(mapped)
        assert TWO_ARRAYS in bag._unwindowed and "/points" not in bag._unwindowed


def test_damaged_record_is_reported_as_without_windows(mixed, monkeypatch):
    """A record the window cannot verify goes through the mapping, whose checks name what is wrong."""
    data = bytearray(mixed.read_bytes())
    with fastbag.open(mixed) as bag:
        row = int(bag.topic_rows("/points")[3])  # a row of the topic's own index
        index = bag._scope("/points").index
        chunk = int(index.chunk[row])
        offset = int(index.offset[row])
        at = int(bag._chunks.data_offset[chunk]) + offset
        chunk_at = int(bag._chunks.position[chunk])
    header_len = struct.unpack_from("<I", data, at)[0]
    op = data.find(b"op=\x02", at, at + 4 + header_len)
    assert op > 0
    data[op + 3] = 5  # the message-data record becomes another kind of record
    damaged = mixed.with_name("damaged.bag")
    damaged.write_bytes(bytes(data))
    errors = []
    monkeypatch.setattr(bag_module, "WINDOW_MIN_ROWS", 0)
    for spacing in (0, 1 << 62):
        monkeypatch.setattr(bag_module, "WINDOW_SPACING", spacing)
        with fastbag.open(damaged) as bag, pytest.raises(fastbag.FastbagError) as info:
            bag.read("/points")
        errors.append(str(info.value))
        with fastbag.open(damaged) as bag:  # the other topics stay readable
            assert len(bag.read("/camera/image_raw")) == bag.topics["/camera/image_raw"].message_count
    assert errors[0] == errors[1]
    assert f"chunk at offset {chunk_at}" in errors[0] and f"offset {offset}," in errors[0]


@pytest.mark.parametrize("values", [100, 20_000])  # 800 B messages (through the mapping), 160 KB (windows)
def test_big_endian_cdr_reads_through_windows(tmp_path, monkeypatch, values):
    """A topic of big-endian CDR messages far apart reads through windows in its own byte order. Before, the
    byte-order vote looked for each message at its window's start, which is its record's: no vote, little-endian
    assumed, and a DecodeError ("message is CDR_BE, unlike most of the topic's messages")."""
    rosbag2 = pytest.importorskip("rosbags.rosbag2", reason="rosbags writes the big-endian recording")
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    store.register(get_types_from_msg("float64[] data\nint32 k\n", "qa/msg/M"))
    kind = store.types["qa/msg/M"]
    raws = [bytes(store.serialize_cdr(kind(np.arange(k, k + values, dtype=np.float64), k), "qa/msg/M",
                                      little_endian=False)) for k in range(6)]
    assert {raw[:2] for raw in raws} == {b"\0\0"}  # CDR_BE
    writer = rosbag2.Writer(tmp_path / "be", version=9, storage_plugin=rosbag2.StoragePlugin.MCAP)
    with writer:
        conn = writer.add_connection("/t", "qa/msg/M", typestore=store)
        for k, raw in enumerate(raws):
            writer.write(conn, 10**9 + k, raw)
    monkeypatch.setattr(bag_module, "WINDOW_MIN_ROWS", 0)  # (6 messages: windows for their spacing alone)
    used = _spy(monkeypatch)
    with fastbag.open(tmp_path / "be") as bag:
        arr = bag.read("/t")
    assert used == (["/t"] if values == 20_000 else [])
    assert arr["k"].tolist() == list(range(6)) and arr["k"].dtype.byteorder == ">"
    for k, raw in enumerate(raws):
        np.testing.assert_array_equal(arr["data"][k], store.deserialize_cdr(raw, "qa/msg/M").data)


def test_a_read_of_a_few_messages_goes_through_the_mapping(mixed, expected, monkeypatch):
    """Windows cost a fixed ~0.1 ms (the file opened, a score of NumPy passes), a message's head read through
    the mapping a page fault or two: a take of one small message among large ones (1 MiB of chunk for it)
    spent 40% of its time on windows. Fewer than WINDOW_MIN_ROWS messages go through the mapping; the
    values are rosbags'."""
    used = _spy(monkeypatch)
    with fastbag.open(mixed) as bag:
        for topic in bag.topics:
            n = bag.topics[topic].message_count
            few = [0, n // 2, n - 1, n // 2]
            got = bag.take(topic, few)
            for k, i in enumerate(few):
                assert_same(got[k], expected[topic][i], f"take({topic})[{k}]")
        assert not used
        bag.read("/imu")
    assert used == ["/imu"]  # (its whole topic, 100 messages among clouds and images: through windows)
