"""One topic's index without the others' (Container.topic_index): an MCAP read of one topic reads only that
topic's message-index records, in the chunks that list it, and the whole index is never built. (A ROS1 bag
reads every index-data record at open, and builds the table of one topic's alone: its real bags are
compared below too.)

- a read of a sparse topic reads its records and nothing of the other channels or the chunks without it;
- on every real MCAP file and rosbag2 MCAP recording, every topic's rows, times, message bytes, parts and
  decoded arrays equal those read through the whole index (the values themselves are proved against
  mcap-ros2-support by tests/test_mcap.py, whose reads are fresh handles, so topic indexes);
- damage: another channel's broken message index leaves the topic readable; its own is named, or said
  when the statistics disagree (a compressed chunk's CRC is still checked: tests/test_mcap.py); files
  without statistics and recovered files read through the whole index.
"""

from __future__ import annotations

import struct
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastbag
from conftest import data_files, open_quietly, ros2_bags

mcap = pytest.importorskip("mcap", reason="the mcap package (test extra) writes the MCAP files here")
from mcap.writer import CompressionType, Writer  # noqa: E402
from test_mcap import IMU_SCHEMA, find, real_mcaps, write_mcap  # noqa: E402

START = 1_000_000_000


def write_sparse(path: Path, compression=CompressionType.NONE, *, statistics: bool = True) -> dict[str, list]:
    """/dense every 1 ms, /rare every 200th message, in chunks of ~1 KiB: most chunks hold no /rare.
    Returns each topic's (time, bytes) written."""
    written: dict[str, list] = {"/dense": [], "/rare": []}
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=1024, compression=compression, use_statistics=statistics)
        writer.start(profile="", library="fastbag tests")
        schema = writer.register_schema("test/Vec", "ros1msg", IMU_SCHEMA)
        ids = {topic: writer.register_channel(topic, "ros1", schema) for topic in written}
        for k in range(4000):
            topic = "/rare" if k % 200 == 7 else "/dense"
            data = struct.pack("<3d", k, -k, k * 0.5)
            writer.add_message(ids[topic], log_time=START + k * 1_000_000, data=data, publish_time=k)
            written[topic].append((START + k * 1_000_000, data))
        writer.finish()
    return written


def recorded_reads(monkeypatch) -> list[tuple[int, int]]:
    """Every (offset, length) read through Source.gather from now on."""
    reads: list[tuple[int, int]] = []
    real = fastbag.io.source.Source.gather

    def gather(self, offsets, lengths):
        reads.extend(zip(np.asarray(offsets).tolist(), np.asarray(lengths).tolist()))
        return real(self, offsets, lengths)

    monkeypatch.setattr(fastbag.io.source.Source, "gather", gather)
    return reads


def message_bytes(bag: fastbag.Bag, index, rows: np.ndarray) -> list[bytes]:
    """The serialized messages at ``rows`` of ``index``, located as reads locate them."""
    return [bytes(buf[s:s + n]) for buf, _, _, _, starts, lengths in bag._runs(index, rows, kernel=True)
            for s, n in zip(starts.tolist(), lengths.tolist())]


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.ZSTD], ids=["none", "zstd"])
def test_a_sparse_topic_reads_only_its_own_message_indexes(tmp_path, monkeypatch, compression):
    path = tmp_path / "sparse.mcap"
    written = write_sparse(path, compression)
    reads = recorded_reads(monkeypatch)
    with fastbag.open(path) as bag:
        opened = len(reads)
        indexes = bag._container._chunk_indexes
        arr = bag.read("/rare")
        assert bag._container._index is None  # the whole index was never built
        rare = bag._container.connections[bag._topic_ranks["/rare"][0]].id
        holding = {int(k) for k in np.repeat(np.arange(len(indexes)), np.diff(indexes.entry_start))[
            indexes.entry_channel == rare]}
        assert len(holding) == 20 < len(indexes) / 5  # most chunks hold no /rare
        index_reads = [r for r in reads[opened:] if r[1] < 1024]  # (message windows of a 1 KiB chunk aside)
        # per chunk holding /rare: its /rare record to the end of its message indexes, and (compressed)
        # its head; never a byte of the /dense records before it, nor of any other chunk
        region_start, region_length = bag._container._message_index_regions()
        rare_at = indexes.entry_offset[indexes.entry_channel == rare]
        records = {(a, int(region_start[k] + region_length[k] - a)) for k, a in zip(sorted(holding), sorted(rare_at))}
        heads = {(int(indexes.chunk_offset[k]), int(bag._container._chunk_heads(indexes)[k])) for k in holding}
        assert records <= set(index_reads) <= records | (heads if compression != CompressionType.NONE else set())
        assert arr.time.tolist() == [t for t, _ in written["/rare"]]
        assert arr.x.tolist() == [struct.unpack("<3d", d)[0] for _, d in written["/rare"]]
        assert bag.topic_times("/rare").tolist() == [t for t, _ in written["/rare"]]
        assert bag._container._index is None
        assert len(list(bag.messages(raw=True))) == 4000  # the other topics, through the whole index
        assert bag._container._index is not None
        assert bag.read("/rare").x.tolist() == arr.x.tolist()  # the topic keeps its own index


def assert_same_through_both_indexes(path: Path, own: bool = True) -> int:
    """Every topic of ``path`` read with a fresh handle (its own index, unless not ``own``) equals the read
    through the whole index: rows' times and bytes, topic_times, parts, arrays; or both raise the same error.
    Returns the topics read into arrays."""
    compared = 0
    whole_bag = open_quietly(path)
    whole = whole_bag._index
    with whole_bag:
        for topic in whole_bag._topic_ranks:
            whole_rows = whole_bag._select([topic], None, None, index=whole)
            with open_quietly(path) as bag:
                try:
                    theirs = whole_bag._read_rows(topic, whole_bag._whole_scope, whole_rows)
                except (fastbag.UnsupportedError, fastbag.DecodeError, fastbag.DefinitionError) as exc:
                    with pytest.raises(type(exc)) as info:
                        bag.read(topic)
                    assert str(info.value) == str(exc)
                    continue
                arr = bag.read(topic)
                # the connections' msgcount, as the whole index counts them (it was -1 on a fresh handle)
                counts = [c.msgcount for c in arr.connections]
                assert counts == [c.msgcount for c in theirs.connections] == \
                    [c.msgcount for c in whole_bag.connections if c.topic == topic] and min(counts) >= 0, topic
                scope = bag._scope(topic)
                if own:
                    assert scope.index is not whole and bag._container.index is not None  # (built only now)
                rows = bag.topic_rows(topic)
                assert np.array_equal(scope.index.time[rows], whole.time[whole_rows]), topic
                assert message_bytes(bag, scope.index, rows) == message_bytes(whole_bag, whole, whole_rows), topic
                assert np.array_equal(bag.topic_times(topic), whole_bag.times(topic))
                assert bag.part_bounds(topic, 7) == whole_bag._parts(whole, whole_rows, 7)
                assert [len(p) for p in bag.iter_read(topic, step=7)] == \
                    [b - a for a, b in whole_bag._parts(whole, whole_rows, 7)]
                assert np.array_equal(arr.time, theirs.time)
                assert [repr(arr[i]) for i in range(len(arr))] == [repr(theirs[i]) for i in range(len(theirs))]
                compared += 1
    return compared


@pytest.mark.parametrize("path", real_mcaps() + [p for p in ros2_bags() if p.values[0] is not None and
                                                 p.values[0].is_dir() and list(p.values[0].glob("*.mcap"))])
def test_real_recordings_read_the_same_through_a_topic_index(path):
    compared = assert_same_through_both_indexes(path)
    with open_quietly(path) as bag:  # (wrong_rmw_test's topics are serialized as "wrong_format": raw only)
        arrays = [t for t, ranks in bag._topic_ranks.items()
                  if bag._container.connections[ranks[0]].encoding in ("cdr", "ros1")]
    assert compared == len(arrays)


def db3_recordings() -> list:
    """The rosbag2 sqlite3 recordings among ros2_bags(): lone .db3 files and directories holding them."""
    found = [p for p in ros2_bags() if p.values[0] is not None and (
        p.values[0].suffix == ".db3" or (p.values[0].is_dir() and list(p.values[0].glob("*.db3*"))))]
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="../shared/data is absent"), id="no-data")]


@pytest.mark.parametrize("path", db3_recordings())
def test_real_db3_recordings_read_the_same_through_a_topic_index(path):
    """Where the storage files' pages are read (no one writes them, laid out as SQLite writes them), each
    topic reads through its own index; elsewhere through the whole one (read through SQLite)."""
    try:
        with open_quietly(path) as bag:
            ranks = next(iter(bag._topic_ranks.values()), None)
            own = ranks is not None and bag._container.topic_index(ranks) is not None
    except fastbag.FastbagError as exc:  # (a recording with nothing intact: tests/test_rosbag2.py names it)
        pytest.skip(f"does not open: {exc}")
    decoded = 0
    with open_quietly(path) as bag:
        for topic in bag._topic_ranks:
            try:
                bag.read(topic)
                decoded += 1
            except (fastbag.UnsupportedError, fastbag.DecodeError, fastbag.DefinitionError):
                pass  # (raw only: a type no definition describes; the error is compared below all the same)
    assert assert_same_through_both_indexes(path, own) == decoded


@pytest.mark.parametrize("path", data_files("ros1v2"))
def test_real_ros1_bags_read_the_same_through_a_topic_index(path):
    """Where open read a sound index (the deferred table), each topic reads through its own; bags whose
    index is damaged or unusual were indexed record by record or scanned, and read through the whole."""
    with open_quietly(path) as bag:
        own = bag._container._deferred is not None
        # (a topic whose definition is empty reads as raw bytes only; the errors are compared)
        arrays = [t for t, ranks in bag._topic_ranks.items() if bag._container.connections[ranks[0]].definition]
    assert assert_same_through_both_indexes(path, own) == len(arrays)


def _window_positions_hold(path) -> int:
    """Every topic of ``path`` read in windows, on a fresh handle (a topic's own index) and after the whole
    topic's read: each window's ``positions`` are those of its messages among the whole topic's (the
    oracle: the whole read's times, masked by the window), and ``take`` of them gives the same values.
    Returns the windows checked."""
    checked = 0
    with open_quietly(path) as bag:
        topics = [t for t, ranks in bag._topic_ranks.items()
                  if bag._container.connections[ranks[0]].encoding in ("cdr", "ros1")]
    for topic in topics:
        with open_quietly(path) as bag:
            try:
                times = np.asarray(bag.read(topic).time)
            except (fastbag.UnsupportedError, fastbag.DecodeError, fastbag.DefinitionError):
                continue
        if times.size == 0:
            continue
        rng = np.random.default_rng(times.size)
        for fresh in (True, False):
            with open_quietly(path) as bag:
                whole_time = None if fresh else bag.read(topic).time
                for _ in range(4):
                    a, b = np.sort(rng.integers(int(times[0]), int(times[-1]) + 2, 2))
                    part = bag.read(topic, start=int(a), end=int(b))
                    want = np.flatnonzero((times >= a) & (times < b))
                    assert part.positions.tolist() == want.tolist(), (topic, fresh, int(a), int(b))
                    assert np.array_equal(part.time, times[want])
                    if want.size:
                        assert np.array_equal(bag.take(topic, want).time, part.time)
                    checked += 1
                assert whole_time is None or np.array_equal(whole_time, times)
    return checked


@pytest.mark.parametrize("path", [p for p in real_mcaps() if "conformance" not in str(p.values[0])][:6] +
                         db3_recordings()[:6] + data_files("ros1v2")[:6])
def test_a_windows_positions_are_its_messages_places_in_the_topic(path):
    """A window's read says where its messages are in their topic (read(topic, start, end).positions), found
    among the topic's rows by number, not by gathering the topic's times at every read (a window's
    read cost O(topic): 0.18 ms a read of a 100k-message topic)."""
    if path is None:
        pytest.skip("../shared/data is absent")
    assert _window_positions_hold(path) >= 0


def test_well_formed_ros1_bags_defer_their_message_table():
    """The real 2.0 bags open read soundly: most of them (what the ROS1 test above compares through topic
    indexes)."""
    paths = [p.values[0] for p in data_files("ros1v2") if p.values[0] is not None]
    if not paths:
        pytest.skip("no real bags")
    deferred = []
    for path in paths:
        with open_quietly(path) as bag:
            deferred.append(bag._container._deferred is not None and not bag.recovered)
    assert sum(deferred) >= 0.9 * len(paths), sum(deferred)  # 53 of the 54 here


VEC = "float64 x\nfloat64 y\nfloat64 z\n"


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_a_ros1_topic_builds_only_its_own_table(tmp_path, compression):
    """A ROS1 bag's topic read builds the table of its own messages, never the whole one; messages() then
    builds the whole, and each is read the same through both, on threads of a fresh handle too."""
    path = tmp_path / "sparse.bag"
    written: dict[str, list] = {"/dense": [], "/rare": []}
    with fastbag.Writer(path, compression=compression, chunk_size=1024) as writer:
        conns = {t: writer.add_connection(t, "test/Vec", VEC) for t in written}
        for k in range(4000):
            topic = "/rare" if k % 200 == 7 else "/dense"
            data = struct.pack("<3d", k, -k, k * 0.5)
            writer.write(conns[topic], START + k * 1_000_000, data)
            written[topic].append((START + k * 1_000_000, k))
    with fastbag.open(path) as bag:
        arr = bag.read("/rare")
        assert bag._container._index is None and len(bag._scope("/rare").index.time) == 20
        assert list(zip(arr.time.tolist(), arr.x.astype(int).tolist())) == written["/rare"]
        assert len(list(bag.messages(raw=True))) == 4000  # through the whole index, built now
        assert bag._container._index is not None and bag._container._deferred is None  # (its copy let go)
        assert bag.read("/rare").x.tolist() == arr.x.tolist()  # the topic keeps its own index
        assert bag.read("/dense").x.astype(int).tolist() == [k for _, k in written["/dense"]]
    assert_topics_read_on_threads(path, written)


def test_split_recording_joins_each_files_topic_index(tmp_path):
    rosbags = pytest.importorskip("rosbags.rosbag2", reason="rosbags' writer makes the recording")
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    Vector3 = store.types["geometry_msgs/msg/Vector3"]
    out = tmp_path / "split"
    with rosbags.Writer(out, version=8, storage_plugin=rosbags.StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, Vector3.__msgtype__, typestore=store) for t in ("/a", "/b")}
        for k in range(300):
            topic = "/b" if k % 3 else "/a"
            writer.write(conns[topic], START + k, store.serialize_cdr(Vector3(x=k, y=0.0, z=0.0), Vector3.__msgtype__))
    # a second file: the same recording's messages later, as a split recording holds them
    first = next(out.glob("*.mcap"))
    second = out / (first.stem.rsplit("_", 1)[0] + "_1.mcap")
    shifted = tmp_path / "later"
    with rosbags.Writer(shifted, version=8, storage_plugin=rosbags.StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, Vector3.__msgtype__, typestore=store) for t in ("/b", "/a")}
        for k in range(300, 500):
            topic = "/b" if k % 3 else "/a"
            writer.write(conns[topic], START + k, store.serialize_cdr(Vector3(x=k, y=0.0, z=0.0), Vector3.__msgtype__))
    next(shifted.glob("*.mcap")).rename(second)
    meta = (out / "metadata.yaml").read_text()
    listed = f"relative_file_paths:\n  - {first.name}\n"
    assert listed in meta
    (out / "metadata.yaml").write_text(meta.replace(listed, f"{listed}  - {second.name}\n"))
    with open_quietly(out) as bag:  # (metadata.yaml still counts the first file's messages only)
        assert len(bag._container.parts) == 2
        arr = bag.read("/a")
        assert bag._container._index is None and all(p._index is None for p in bag._container.parts)
        assert arr.x.tolist() == [float(k) for k in range(500) if k % 3 == 0]
    assert assert_same_through_both_indexes(out) == 2


def test_another_channels_broken_message_index_leaves_the_topic_readable(tmp_path):
    path = tmp_path / "mx.mcap"
    written = write_mcap(path, compression=CompressionType.LZ4, messages=40)
    data = bytearray(path.read_bytes())
    mx = find(data, 0x07)
    broken = struct.unpack_from("<H", data, mx + 9)[0]
    data[mx] = 0x0B  # no longer a message index
    path.write_bytes(data)
    intact = "/b" if broken == 1 else "/a"
    with fastbag.open(path) as bag:
        assert bag.read(intact).time.tolist() == [t for topic, t, _ in written if topic == intact]
        with pytest.raises(fastbag.BagFormatError, match="other than a message index") as info:
            bag.read("/a" if intact == "/b" else "/b")
        assert info.value.offset == mx and info.value.path == str(path)
        with pytest.raises(fastbag.BagFormatError, match="other than a message index"):
            list(bag.messages(raw=True))


def test_own_shortened_message_index_is_said_against_the_statistics(tmp_path):
    path = tmp_path / "mx.mcap"
    write_mcap(path, compression=CompressionType.LZ4, messages=40)
    data = bytearray(path.read_bytes())
    mx = find(data, 0x07)
    channel = struct.unpack_from("<H", data, mx + 9)[0]
    lost = struct.unpack_from("<I", data, mx + 9 + 2)[0] // 16
    struct.pack_into("<I", data, mx + 9 + 2, 0)
    path.write_bytes(data)
    topic = "/a" if channel == 1 else "/b"
    with fastbag.open(path) as bag:
        with pytest.warns(fastbag.FastbagWarning, match=f"message indexes of {topic} list {20 - lost} messages, the "
                                                        "statistics record 20"):
            assert len(bag.read(topic)) == 20 - lost
        assert bag._container._index is None


def test_files_without_statistics_or_recovered_read_through_the_whole_index(tmp_path):
    """Without statistics each chunk's count of Message records is checked against all its message-index
    entries; a recovered file's scan found every message already."""
    path = tmp_path / "nostats.mcap"
    written = write_sparse(path, CompressionType.LZ4, statistics=False)
    with fastbag.open(path) as bag:
        assert bag.read("/rare").time.tolist() == [t for t, _ in written["/rare"]]
        assert bag._container._index is not None
    unchunked = tmp_path / "unchunked.mcap"  # recovered by a scan at open, which is its whole index
    written_flat = write_mcap(unchunked, chunked=False, messages=30)
    with open_quietly(unchunked) as bag:
        assert bag.recovered and bag._container.topic_index(bag._topic_ranks["/a"]) is None
        assert bag.read("/a").time.tolist() == [t for topic, t, _ in written_flat if topic == "/a"]


def assert_topics_read_on_threads(path: Path, written: dict[str, list]) -> None:
    """Topic indexes built on several threads at once, and the whole index beside them, 5 fresh handles."""
    for _ in range(5):
        with fastbag.open(path) as bag:
            got: dict[str, list] = {}

            def read(topic: str) -> None:
                got[topic] = bag.read(topic).time.tolist() if topic else \
                    [m.time for m in bag.messages(raw=True)]  # noqa: B023 - joined before the bag closes

            threads = [threading.Thread(target=read, args=(t,)) for t in ("/rare", "/dense", "")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert got["/rare"] == [t for t, _ in written["/rare"]]
        assert got["/dense"] == [t for t, _ in written["/dense"]]
        assert got[""] == sorted(t for topic in written.values() for t, _ in topic)


def test_topics_read_on_threads_of_a_fresh_handle(tmp_path):
    """Topic indexes built on several threads at once, and the whole index beside them."""
    path = tmp_path / "sparse.mcap"
    written = write_sparse(path, CompressionType.ZSTD)
    assert_topics_read_on_threads(path, written)


def test_warnings_of_the_same_damage_are_said_once(tmp_path):
    path = tmp_path / "bounds.mcap"
    write_mcap(path, compression=CompressionType.NONE, messages=40)
    data = bytearray(path.read_bytes())
    mx = find(data, 0x07)
    struct.pack_into("<Q", data, mx + 9 + 6, START + 10**9)  # the first entry's log_time: past its chunk
    path.write_bytes(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(path) as bag:
            for topic in ("/a", "/b"):
                try:
                    bag.read(topic)
                except fastbag.BagFormatError:
                    pass  # the record no longer agrees with its entry: named by the read
            bag._index
            said = [str(w.message) for w in caught if "span other times" in str(w.message)]
    assert len(said) == 1 and bag.problems.count(said[0].split(": ", 1)[1]) == 1


# -- rosbag2 sqlite3: a topic's rows walked out of every row's pages ------------------------------------------

def write_sparse_db3(folder: Path, *, per_message: bool = False, count: int = 3000,
                     blob: int = 300) -> dict[str, list]:
    """A rosbag2 sqlite3 recording (rosbags' writer): /dense every 1 ms, /rare every 150th message with a
    larger blob (chunks of 4 MiB of a topic's blobs: /rare's several, where ``blob`` is large). Returns each
    topic's (time, x) written."""
    from fastbag.tooling.synth_db3 import rosbag2_writer

    writer, store = rosbag2_writer(folder, per_message=per_message)
    Vector3 = store.types["geometry_msgs/msg/Vector3"]
    String = store.types["std_msgs/msg/String"]
    written: dict[str, list] = {"/dense": [], "/rare": []}
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)
    rng = np.random.default_rng(5)
    with writer:
        conns = {"/dense": writer.add_connection("/dense", Vector3.__msgtype__, typestore=store),
                 "/rare": writer.add_connection("/rare", String.__msgtype__, typestore=store)}
        for k in range(count):
            time = START + k * 1_000_000
            if k % 150 == 7:
                text = f"{k}:" + rng.choice(letters, blob).tobytes().decode()  # (no zstd bomb)
                writer.write(conns["/rare"], time, store.serialize_cdr(String(data=text), String.__msgtype__))
                written["/rare"].append((time, text))
            else:
                writer.write(conns["/dense"], time, store.serialize_cdr(Vector3(x=k, y=0.0, z=0.0),
                                                                        Vector3.__msgtype__))
                written["/dense"].append((time, k))
    return written


@pytest.mark.parametrize("per_message", [False, True], ids=["plain", "zstd-per-message"])
def test_a_db3_topic_indexes_only_its_own_rows(tmp_path, per_message):
    """A .db3 topic read walks every row of the table's pages but indexes its own alone, never the whole
    index; messages() builds the whole one later, in which the topic's chunks keep their numbers (one chunk
    table, no chunk fetched twice under two numbers), and each topic reads the same through both."""
    pytest.importorskip("rosbags.rosbag2", reason="rosbags' writer makes the recording")
    folder = tmp_path / "rec"
    written = write_sparse_db3(folder, per_message=per_message, blob=500_000)  # /rare: 20 rows of 500 kB
    with fastbag.open(folder) as bag:
        reader = bag._container
        arr = bag.read("/rare")
        assert reader._index is None and len(bag._scope("/rare").index.time) == 20
        assert list(zip(arr.time.tolist(), arr.data.tolist())) == written["/rare"]
        own = bag._scope("/rare").index
        rare_chunks = np.unique(own.chunk)
        assert rare_chunks.tolist() == list(range(len(own.chunks))) and rare_chunks.size >= 2  # 4 MiB a chunk
        assert len(list(bag.messages(raw=True))) == 3000  # through the whole index, built now
        whole = reader._index
        rare = bag._topic_ranks["/rare"][0]
        assert np.array_equal(whole.chunk[whole.conn == rare], own.chunk)  # the same numbers
        assert len(whole.chunks) == len(np.unique(whole.chunk))  # every chunk numbered once
        assert bag.read("/rare").data.tolist() == arr.data.tolist()  # the topic keeps its own index
        assert bag.read("/dense").x.astype(int).tolist() == [k for _, k in written["/dense"]]
    assert_topics_read_on_threads(folder, written)
    assert assert_same_through_both_indexes(folder) == 2


def test_a_second_db3_topic_builds_the_whole_index(tmp_path):
    """Each topic's walk reads every row of the table: the first topic read gets its own index, any other
    the whole one (the table walked twice at most, whatever number of topics is read), in which the first
    topic's chunks keep their numbers."""
    pytest.importorskip("rosbags.rosbag2", reason="rosbags' writer makes the recording")
    folder = tmp_path / "rec"
    written = write_sparse_db3(folder, count=900)
    with fastbag.open(folder) as bag:
        reader = bag._container
        rare = bag.read("/rare")
        own = bag._scope("/rare").index
        assert reader._index is None
        dense = bag.read("/dense")
        assert reader._index is not None and bag._scope("/dense").index is reader._index
        whole = reader._index
        assert np.array_equal(whole.chunk[whole.conn == bag._topic_ranks["/rare"][0]], own.chunk)
        assert rare.data.tolist() == [text for _, text in written["/rare"]]
        assert dense.x.astype(int).tolist() == [k for _, k in written["/dense"]]


def test_a_split_db3_recording_joins_each_files_topic_rows(tmp_path):
    """Two .db3 files of one recording, numbering their topics differently: a topic's index takes its rows
    from each file's pages, in file order."""
    pytest.importorskip("rosbags.rosbag2", reason="rosbags' writer makes the recording")
    first, second = tmp_path / "first", tmp_path / "second"
    written = write_sparse_db3(first, count=900)
    name = next(first.glob("*.db3")).name
    from fastbag.tooling.synth_db3 import rosbag2_writer

    writer, store = rosbag2_writer(second)
    String = store.types["std_msgs/msg/String"]
    with writer:  # the second file: /rare first (topic id 1 there), later times
        conn = writer.add_connection("/rare", String.__msgtype__, typestore=store)
        for k in range(5):
            writer.write(conn, START + 10**12 + k, store.serialize_cdr(String(data=f"late{k}"), String.__msgtype__))
    late = next(second.glob("*.db3"))
    moved = first / "rec_1.db3"
    late.rename(moved)
    meta = (first / "metadata.yaml").read_text()
    listed = f"relative_file_paths:\n  - {name}\n"
    assert listed in meta
    (first / "metadata.yaml").write_text(meta.replace(listed, f"{listed}  - {moved.name}\n"))
    with open_quietly(first) as bag:  # (metadata.yaml counts the first file's messages only)
        assert len(bag._container.files) == 2
        arr = bag.read("/rare")
        assert bag._container._index is None
        assert arr.data.tolist() == [text for _, text in written["/rare"]] + [f"late{k}" for k in range(5)]
    assert assert_same_through_both_indexes(first) == 2


def test_a_db3_read_through_sqlite_indexes_every_row(tmp_path):
    """A file whose pages are not read (a write-ahead log holds committed rows: SQLite reads it) has no
    topic index: a topic read builds the whole index, as before."""
    pytest.importorskip("rosbags.rosbag2", reason="rosbags' writer makes the recording")
    folder = tmp_path / "rec"
    written = write_sparse_db3(folder, count=600)
    db3 = next(folder.glob("*.db3"))
    import sqlite3

    con = sqlite3.connect(db3)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT INTO messages(topic_id, timestamp, data) SELECT topic_id, timestamp + 10000000000, data "
                "FROM messages WHERE id = 8")
    con.commit()
    try:
        with open_quietly(folder) as bag:
            assert bag._container.topic_index(bag._topic_ranks["/rare"]) is None
            arr = bag.read("/rare")
            assert bag._container._index is not None
            assert arr.data.tolist() == [text for _, text in written["/rare"]] + [written["/rare"][0][1]]
    finally:
        con.close()


@pytest.mark.parametrize("path", data_files("ros1v2") + ros2_bags())
def test_every_topics_rows_at_once_equal_each_topics_own(path):
    """Once the whole index is built (``bag.topics`` builds it), every topic's rows come from one sort of it
    by topic (a pass over it per topic made reading thousands of topics quadratic); they equal a fresh
    handle's, which reads each topic through its own index or a pass of its own."""
    with open_quietly(path) as whole:
        assert whole.topics is not None  # builds the whole index
        got = {topic: (whole.topic_times(topic), whole.topic_rows(topic)) for topic in whole.topics}
        rows = np.concatenate([r for _, r in got.values()]) if got else np.zeros(0, dtype=np.int64)
        assert np.array_equal(np.sort(rows), np.arange(whole.message_count))  # each message once
    for topic, (times, topic_rows) in got.items():
        assert np.all(np.diff(topic_rows) > 0), topic  # in read order
        with open_quietly(path) as fresh:
            assert np.array_equal(fresh.topic_times(topic), times), topic


def test_a_topic_scoped_to_its_own_index_keeps_its_rows_when_the_whole_index_fills_the_others(tmp_path):
    """A topic takes its own index; then the whole index is built and another topic's read fills every
    topic's rows from it at once: the first topic still reads through its own index, with its own rows
    (the rows of the whole index were taken for them on a thread that had not stored its own yet:
    IndexError, in CI)."""
    path = tmp_path / "sparse.mcap"
    written = write_sparse(path)
    with fastbag.open(path) as bag:
        own = bag._scope("/rare").index  # its own index, its rows not asked yet
        assert len(own.time) == len(written["/rare"])
        assert len(list(bag.messages(raw=True))) == sum(map(len, written.values()))  # the whole index, now
        assert len(bag.topic_rows("/dense")) == len(written["/dense"])  # every topic's rows from the whole
        assert bag._scope("/rare").index is own
        assert bag.read("/rare").time.tolist() == [t for t, _ in written["/rare"]]
        assert bag.topic_times("/rare").tolist() == [t for t, _ in written["/rare"]]
