"""A time window's index without the rest (Container.window_index): ``bag.messages(start=..., end=...)`` on a
handle of an MCAP file reads the message indexes of the chunks whose times meet the window alone, and the whole
index is not built (a look at a few seconds of a long recording read every chunk's message index first).

- a window reads its chunks' message-index records and no other chunk's; its messages (raw and decoded, by
  attribute) equal what the mcap package's own windowed read gives, and what the whole index gives;
- the connections it hands out carry the whole index's msgcount (from the statistics);
- on every real MCAP file and rosbag2 MCAP recording, windows read through window indexes equal the same
  windows read through the whole index: topics, times, bytes, publish_time, sequence, connections;
- windows that together reach WINDOW_SHARE of the chunks make the next one build the whole index, once;
- files without statistics, with statistics that do not count every channel, or whose chunk indexes' times
  do not match their entries read the whole index (the last with its warning), as before.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastbag
from conftest import open_quietly, ros2_bags
from fastbag.mcap import reader as mcap_reader

mcap = pytest.importorskip("mcap", reason="the mcap package (test extra) writes and reads the MCAP files here")
from mcap.reader import make_reader  # noqa: E402
from mcap.writer import CompressionType, Writer  # noqa: E402
from test_mcap import IMU_SCHEMA, real_mcaps  # noqa: E402
from test_topic_index import recorded_reads  # noqa: E402

START = 1_000_000_000
MS = 1_000_000


def write_long(path: Path, compression=CompressionType.NONE, *, statistics: bool = True, messages: int = 6000
               ) -> None:
    """/a every 1 ms and /b every 3rd message, in chunks of ~2 KiB (~37 messages): many chunks."""
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=2048, compression=compression, use_statistics=statistics)
        writer.start(profile="", library="fastbag tests")
        schema = writer.register_schema("test/Vec", "ros1msg", IMU_SCHEMA)
        ids = {topic: writer.register_channel(topic, "ros1", schema) for topic in ("/a", "/b")}
        for k in range(messages):
            writer.add_message(ids["/b" if k % 3 == 1 else "/a"], log_time=START + k * MS,
                               data=struct.pack("<3d", k, -k, k * 0.5), publish_time=START + k * MS + 7, sequence=k)
        writer.finish()


def theirs(path: Path, start: int | None, end: int | None) -> list[tuple]:
    """The window as the mcap package reads it: (topic, log_time, publish_time, sequence, data)."""
    with path.open("rb") as f, warnings.catch_warnings():
        # (start_time and end_time: [start, end), in every version the test extra allows; newer ones, which
        # name them otherwise, warn)
        warnings.simplefilter("ignore", DeprecationWarning)
        return [(c.topic, m.log_time, m.publish_time, m.sequence, m.data)
                for _, c, m in make_reader(f).iter_messages(start_time=start, end_time=end, log_time_order=True)]


def ours(bag: fastbag.Bag, start: int | None, end: int | None, topics=None) -> list[tuple]:
    return [(m.topic, m.time, m.publish_time, m.sequence, bytes(m.data))
            for m in bag.messages(topics, start=start, end=end, raw=True)]


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.ZSTD], ids=["none", "zstd"])
def test_a_window_reads_only_the_message_indexes_of_its_chunks(tmp_path, monkeypatch, compression):
    path = tmp_path / "long.mcap"
    write_long(path, compression)
    start, end = START + 2500 * MS, START + 2600 * MS
    reads = recorded_reads(monkeypatch)
    with fastbag.open(path) as bag:
        opened = len(reads)
        got = ours(bag, start, end)
        assert bag._container._index is None  # the whole index was never built
        indexes = bag._container._chunk_indexes
        near = np.flatnonzero((indexes.end_time >= start) & (indexes.start_time < end))
        assert 2 <= near.size <= 5 and len(indexes) > 100
        # the message indexes of the window's chunks and (compressed) their heads; nothing of another chunk
        region_start, region_length = bag._container._message_index_regions()
        records = {(int(region_start[k]), int(region_length[k])) for k in near}
        heads = {(int(indexes.chunk_offset[k]), int(bag._container._chunk_heads(indexes)[k])) for k in near}
        index_reads = {r for r in reads[opened:] if r in records or r in heads or r[1] < 200}
        assert records <= index_reads <= records | (heads if compression != CompressionType.NONE else set())
        assert got == theirs(path, start, end) and len(got) == 100
        assert [m.msg.x for m in bag.messages(start=start, end=end)] == [float(k) for k in range(2500, 2600)]
        assert bag._container._index is None
        counts = {m.connection.topic: m.connection.msgcount for m in bag.messages(start=start, end=end)}
        assert counts == {"/a": 4000, "/b": 2000}  # as the whole index counts them
        assert ours(bag, start, end, "/b") == [r for r in got if r[0] == "/b"]
        assert [m.topic for m in bag.messages(start=start, end=end, connections=bag.connections[1:])] == ["/b"] * 34
        assert bag._container._index is not None  # (bag.connections built it)
        assert ours(bag, start, end) == got


def test_a_topics_times_in_a_window_read_the_windows_part_of_the_index(tmp_path):
    path = tmp_path / "long.mcap"
    write_long(path, CompressionType.ZSTD)
    with fastbag.open(path) as whole:
        for a, b in [(2500, 2600), (0, 7), (5995, 9000), (-9, 0)]:
            start, end = START + a * MS, START + b * MS
            with fastbag.open(path) as bag:
                for topic in ("/a", "/b"):
                    times = bag.times(topic, start, end)
                    assert times.tolist() == whole.times(topic, start, end).tolist() == \
                        [t for name, t, *_ in theirs(path, start, end) if name == topic]
                assert bag._container._index is None and not bag._scopes  # neither the whole nor a topic's
        with fastbag.open(path) as bag:  # a topic read before: its own index, as before
            bag.read("/b")
            assert bag.times("/b", START, START + 10 * MS).tolist() == [START + k * MS for k in (1, 4, 7)]
            assert bag._container._window_chunks == 0


def test_windows_read_through_window_indexes_equal_the_whole_index_and_the_mcap_package(tmp_path):
    path = tmp_path / "long.mcap"
    write_long(path, CompressionType.LZ4)
    with fastbag.open(path) as whole:
        whole._index  # noqa: B018 - built first: the reference
        windows = [(START + a * MS, START + b * MS) for a, b in [(0, 1), (0, 90), (89, 91), (1234, 1300),
                                                                 (5990, 6000), (5999, 7000), (-5, 0)]]
        windows += [(None, START + 50 * MS), (START + 5950 * MS, None), (START + 17 * MS + 1, START + 17 * MS + 2)]
        for start, end in windows:
            with fastbag.open(path) as bag:
                got = ours(bag, start, end)
                assert bag._container._index is None, (start, end)
                assert got == ours(whole, start, end) == theirs(path, start, end), (start, end)
                decoded = [(m.topic, m.time, m.msg.x, m.msg.y, m.msg["z"]) for m in bag.messages(start=start, end=end)]
                assert decoded == [(m.topic, m.time, m.msg.x, m.msg.y, m.msg["z"])
                                   for m in whole.messages(start=start, end=end)], (start, end)


def test_windows_of_chunks_whose_times_overlap_read_every_chunk_that_meets_them(tmp_path):
    """Messages written out of time order (a late sensor's, logged with the time it was taken): chunks whose
    times overlap, the window's messages spread over chunks far apart in the file. Each window reads every chunk
    whose times meet it, and its messages in time order (ties in file order), as the mcap package does."""
    path = tmp_path / "late.mcap"
    rng = np.random.default_rng(5)
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=2048, compression=CompressionType.LZ4)
        writer.start(profile="", library="fastbag tests")
        schema = writer.register_schema("test/Vec", "ros1msg", IMU_SCHEMA)
        ids = {topic: writer.register_channel(topic, "ros1", schema) for topic in ("/now", "/late")}
        for k in range(4000):
            late = k % 4 == 0
            t = START + k * MS - (int(rng.integers(0, 800)) * MS if late else 0)  # up to 0.8 s late
            t -= t % (5 * MS) if k % 7 == 0 else 0  # and ties
            writer.add_message(ids["/late" if late else "/now"], log_time=t, data=struct.pack("<3d", k, -k, 0.5),
                               publish_time=t, sequence=k)
        writer.finish()
    with fastbag.open(path) as whole:
        whole._index  # noqa: B018
        indexes = whole._container._chunk_indexes
        assert (indexes.start_time[1:] < indexes.end_time[:-1]).sum() > 50  # overlapping chunks
        for a in (0, 900, 2222, 3600):
            start, end = START + a * MS, START + (a + 30) * MS
            with fastbag.open(path) as bag:
                got = ours(bag, start, end)
                assert bag._container._index is None
                near = np.flatnonzero((indexes.end_time >= start) & (indexes.start_time < end))
                assert bag._container._window_chunks == near.size >= 3  # (late messages: chunks after it too)
            assert got == ours(whole, start, end) and len(got) > 20
            assert sorted(got, key=lambda r: (r[1], r[3])) == sorted(theirs(path, start, end),
                                                                      key=lambda r: (r[1], r[3]))
            assert [r[1] for r in got] == sorted(r[1] for r in got)


def test_windows_that_reach_the_share_of_the_chunks_build_the_whole_index_once(tmp_path, monkeypatch):
    path = tmp_path / "long.mcap"
    write_long(path)
    built = []
    real = mcap_reader.McapReader._load_index
    monkeypatch.setattr(mcap_reader.McapReader, "_load_index",
                        lambda self: built.append(1) or real(self))
    with fastbag.open(path) as bag:
        chunks = len(bag._container._chunk_indexes)
        step = 100 * MS
        for start in range(START, START + 6000 * MS, step):
            assert ours(bag, start, start + step) == theirs(path, start, start + step)
            if bag._container._index is not None:
                break
        # each window met 3-5 chunks: the whole index came with the window that would have passed the share
        share = chunks * mcap_reader.WINDOW_SHARE
        assert share - 5 < bag._container._window_chunks <= share and start < START + 5000 * MS
        for start in range(START, START + 6000 * MS, 10 * step):
            assert ours(bag, start, start + step) == theirs(path, start, start + step)
    assert built == [1]


def test_a_window_over_most_of_the_file_reads_the_whole_index(tmp_path):
    path = tmp_path / "long.mcap"
    write_long(path)
    with fastbag.open(path) as bag:
        got = ours(bag, START + 100 * MS, START + 5000 * MS)
        assert bag._container._index is not None
    assert got == theirs(path, START + 100 * MS, START + 5000 * MS)


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.ZSTD], ids=["none", "zstd"])
def test_a_message_index_that_lost_entries_is_said_by_a_window_too(tmp_path, compression):
    """A message index record of a window's chunk cut short (its length field lowered: padding after a record's
    fields is legal, so nothing else tells): the whole index says so against the statistics' count, a window
    could not, and said nothing (review). The window's chunks are counted: the same messages, said."""
    from mcap.reader import make_reader

    path = tmp_path / "cut.mcap"
    write_long(path, compression)
    with path.open("rb") as f:
        summary = make_reader(f).get_summary()
    chunk = summary.chunk_indexes[50]
    b = next(c.id for c in summary.channels.values() if c.topic == "/b")
    data = bytearray(path.read_bytes())
    at = chunk.message_index_offsets[b]
    assert data[at] == 0x07  # a message index record: opcode, length u64, channel u16, records' length u32
    struct.pack_into("<I", data, at + 11, struct.unpack_from("<I", data, at + 11)[0] - 16)  # its last entry gone
    path.write_bytes(bytes(data))
    start, end = chunk.message_start_time, chunk.message_end_time + 1
    with fastbag.open(path) as whole:
        with pytest.warns(fastbag.FastbagWarning, match="indexes list 5999 messages, the statistics record 6000"):
            whole._index  # noqa: B018 - the whole index, first
        want = ours(whole, start, end)
    with fastbag.open(path) as bag:
        with pytest.warns(fastbag.FastbagWarning, match=r"the chunk at offset \d+ holds \d+ messages, its message "
                                                          r"indexes list \d+: reading the listed ones"):
            got = ours(bag, start, end)
        assert bag._container._index is None
        assert any("reading the listed ones" in p for p in bag.problems)
    assert got == want and len(got) == len(theirs(path, start, end)) - 1


def test_files_a_window_index_cannot_trust_read_the_whole_index(tmp_path, monkeypatch):
    start, end = START + 2500 * MS, START + 2600 * MS
    plain = tmp_path / "no_statistics.mcap"
    write_long(plain, statistics=False)
    with fastbag.open(plain) as bag:
        assert ours(bag, start, end) == theirs(plain, start, end)
        assert bag._container._index is not None
    path = tmp_path / "long.mcap"
    write_long(path)
    with fastbag.open(path) as bag:  # statistics that do not count every channel
        counts = bag._container._summary.statistics.channel_message_counts
        counts.pop(bag._container.connections[0].id)
        assert ours(bag, start, end) == theirs(path, start, end)
        assert bag._container._index is not None
    with fastbag.open(path) as bag:  # a chunk index whose times end before its last message: a damaged summary
        indexes = bag._container._chunk_indexes
        k = int(np.flatnonzero(indexes.end_time >= start)[0])
        indexes.end_time[k] -= MS
        with pytest.warns(fastbag.FastbagWarning, match="span other times than its chunk index says"):
            got = ours(bag, int(indexes.start_time[k]), int(indexes.end_time[k]))
        assert bag._container._index is not None
        assert got == theirs(path, int(indexes.start_time[k]), int(indexes.end_time[k]))


def window_bounds(bag: fastbag.Bag) -> list[tuple[int | None, int | None]]:
    """A few windows over a bag: short ones at its start, middle and end, open-ended ones, one before it."""
    first, last = bag.start_time, bag.end_time
    span = max(last - first, 1)
    cuts = [first + span * q // 8 for q in (0, 1, 4, 7)]
    return [(c, c + max(span // 50, 1)) for c in cuts] + [(last, last + 1), (first - 10, first), (None, first + 1),
                                                          (last - span // 20, None)]


@pytest.mark.parametrize("path", real_mcaps() + [p for p in ros2_bags() if p.values[0] is not None and
                                                 p.values[0].is_dir() and list(p.values[0].glob("*.mcap"))])
def test_real_recordings_read_windows_the_same_through_a_window_index(path, monkeypatch):
    # Every window through a window index where the file allows one (real files hold a few chunks: the share
    # that stops them is lifted; each window below has a fresh handle)
    monkeypatch.setattr(mcap_reader, "WINDOW_SHARE", 1.0)
    whole = open_quietly(path)
    with whole:
        if whole.start_time is None:
            pytest.skip("no messages")
        whole._index  # noqa: B018
        windowed = 0
        for start, end in window_bounds(whole):
            with open_quietly(path) as bag:
                got = [(m.topic, m.time, m.publish_time, m.sequence, bytes(m.data), m.connection, m.connection.msgcount)
                       for m in bag.messages(start=start, end=end, raw=True)]
                windowed += bag._container._index is None
            want = [(m.topic, m.time, m.publish_time, m.sequence, bytes(m.data), m.connection, m.connection.msgcount)
                    for m in whole.messages(start=start, end=end, raw=True)]
            assert got == want, (start, end)
    # Files with statistics that agree with their chunk indexes and count every message: every window its own
    # index (others: rosbag2's rewriter test files, whose statistics start before their chunks, the whole)
    files = getattr(whole._container, "parts", [whole._container])
    if all(f.statistics is not None and f._statistics_trusted and f._counted_by_statistics for f in files):
        assert windowed == len(window_bounds(whole))
    else:
        assert windowed == 0


def test_a_window_of_a_split_recording_joins_each_files_window_index(tmp_path, monkeypatch):
    rosbags = pytest.importorskip("rosbags.rosbag2", reason="rosbags' writer makes the recording")
    from rosbags.typesys import Stores, get_typestore

    monkeypatch.setattr(mcap_reader, "WINDOW_SHARE", 1.0)  # (each file is one chunk)
    store = get_typestore(Stores.ROS2_HUMBLE)
    Vector3 = store.types["geometry_msgs/msg/Vector3"]

    def record(folder: Path, ks: range) -> None:
        with rosbags.Writer(folder, version=8, storage_plugin=rosbags.StoragePlugin.MCAP) as writer:
            conns = {t: writer.add_connection(t, Vector3.__msgtype__, typestore=store) for t in ("/a", "/b")}
            for k in ks:
                writer.write(conns["/b" if k % 3 else "/a"], START + k * MS,
                             store.serialize_cdr(Vector3(x=k, y=0.0, z=0.0), Vector3.__msgtype__))

    out, later = tmp_path / "split", tmp_path / "later"
    record(out, range(0, 300))
    record(later, range(300, 500))  # the same recording's messages later, in a second file
    first = next(out.glob("*.mcap"))
    second = out / (first.stem.rsplit("_", 1)[0] + "_1.mcap")
    next(later.glob("*.mcap")).rename(second)
    meta = (out / "metadata.yaml").read_text()
    listed = f"relative_file_paths:\n  - {first.name}\n"
    (out / "metadata.yaml").write_text(meta.replace(listed, f"{listed}  - {second.name}\n"))
    with open_quietly(out) as whole:
        whole._index  # noqa: B018
        for start, end in [(350, 360), (290, 310), (0, 2), (499, 600)]:
            with open_quietly(out) as bag:
                got = [(m.topic, m.time, m.msg.x, m.connection.msgcount)
                       for m in bag.messages(start=START + start * MS, end=START + end * MS)]
                parts = bag._container.parts
                assert bag._container._index is None and all(p._index is None for p in parts)
                # a window in one file reads nothing of the other's message indexes
                assert [p._window_chunks for p in parts] == [int(start < 300), int(end > 300)]
            assert got == [(m.topic, m.time, m.msg.x, m.connection.msgcount) for m in
                           whole.messages(start=START + start * MS, end=START + end * MS)]
            assert [x for _, _, x, _ in got] == [float(k) for k in range(start, min(end, 500))]
            assert {(t, n) for t, _, _, n in got} <= {("/a", 167), ("/b", 333)}
