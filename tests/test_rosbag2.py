"""rosbag2 recordings (directories with metadata.yaml and sqlite3 storage, or one .db3), read raw.

The oracle is the database itself, read through Python's ``sqlite3`` here,
independently of fastbag: per-topic counts are ``SELECT count(*)``, every
message's bytes and timestamp are the rows' (merged across split files by
timestamp, ties in file order, then row id), and where ``rosbags`` reads a
directory its raw messages must match too. Where rosbags yields nothing (the
QoS-mismatch directories, ``wrong_rmw_test``) or fails (metadata v1), the
database rows are the proof.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import fastbag
from conftest import DATA, NO_DATA, open_quietly
from fastbag.errors import BagFormatError, DecodeError, FastbagError, FastbagWarning, UnsupportedError
from fastbag.rosbag2.metadata import parse_metadata, read_metadata
from fastbag.rosbag2.sqlite import Db3


def db3_entries() -> list:
    """Every rosbag2 directory and lone .db3 under DATA/db3."""
    root = DATA / "db3"
    found = sorted(p for p in root.iterdir() if p.is_dir() or p.suffix == ".db3") if root.is_dir() else []
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    return [pytest.param(p, id=p.name[-60:]) for p in found]



def _read_all_raw(path: Path) -> None:
    """Open and iterate every message raw, warnings silenced (the index is built on first use, so they
    come during the iteration too): what damage must fail cleanly in."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FastbagWarning)
        with fastbag.open(path) as bag:
            for _ in bag.messages(raw=True):
                pass


def storage_files(path: Path, tmp_path: Path) -> list[Path]:
    """The .db3 files of an entry, in order, decompressed into tmp_path where they are .db3.zstd."""
    if path.is_file():
        files = [path]
    elif (path / "metadata.yaml").exists():
        files = [path / p for p in read_metadata(path / "metadata.yaml").relative_file_paths]
    else:  # a directory without metadata: its storage files in name order (numbers as numbers)
        import re
        names = [p.name for p in path.iterdir() if p.name.endswith((".db3", ".db3.zstd"))]
        names.sort(key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)])
        files = [path / n for n in names]
    out = []
    for k, f in enumerate(files):
        if f.name.endswith(".zstd"):
            plain = tmp_path / f"plain{k}.db3"
            plain.write_bytes(zstandard.ZstdDecompressor().stream_reader(f.read_bytes(),
                                                                         read_across_frames=True).read())
            f = plain
        out.append(f)
    return out


def rows_of(files: list[Path]) -> list[tuple[str, int, bytes]]:
    """(topic, timestamp, data) of every row, read with sqlite3: by timestamp, then file, then id."""
    rows = []
    for k, f in enumerate(files):
        con = sqlite3.connect(f"file:{f}?mode=ro&immutable=1", uri=True)
        try:
            rows += [(ts, k, i, name, bytes(data)) for i, name, ts, data in con.execute(
                "SELECT m.id, t.name, m.timestamp, m.data FROM messages m JOIN topics t ON t.id = m.topic_id")]
        finally:
            con.close()
    rows.sort(key=lambda r: r[:3])
    return [(name, ts, data) for ts, _, _, name, data in rows]


def counts_of(files: list[Path]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in files:
        con = sqlite3.connect(f"file:{f}?mode=ro&immutable=1", uri=True)
        try:
            for name, n in con.execute("SELECT t.name, (SELECT count(*) FROM messages m WHERE m.topic_id = t.id) "
                                       "FROM topics t"):
                counts[name] = counts.get(name, 0) + n
        finally:
            con.close()
    return counts


# -- every real recording -------------------------------------------------------------------------

@pytest.mark.parametrize("path", db3_entries())
def test_real_recording_counts_and_rows_equal_the_database(path, tmp_path):
    if path.is_dir() and (path / "metadata.yaml").exists():
        meta = read_metadata(path / "metadata.yaml")
        missing = [p for p in meta.relative_file_paths if not (path / p).exists()]
        if missing:  # the reindex targets: metadata only, their storage lives elsewhere
            with pytest.raises(BagFormatError, match="storage file named in metadata.yaml is absent") as info:
                fastbag.open(path)
            assert missing[0] in str(info.value)
            return
    files = storage_files(path, tmp_path)
    expected = rows_of(files)
    with open_quietly(path) as bag:  # what opening says, before the index is built (from indexed queries)
        assert bag.message_count == len(expected)
        assert (bag.start_time, bag.end_time) == ((expected[0][1], expected[-1][1]) if expected else (None, None))
    with open_quietly(path) as bag:
        assert bag.format == "rosbag2"
        assert {t: i.message_count for t, i in bag.topics.items()} == dict(sorted(counts_of(files).items()))
        got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
        assert got == expected
        assert bag.message_count == len(expected)
        if expected:
            assert (bag.start_time, bag.end_time) == (expected[0][1], expected[-1][1])
        for topic in bag.topics:  # one topic at a time, and a time window
            assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(topic, raw=True)] == \
                [r for r in expected if r[0] == topic]
        if len(expected) > 2:
            lo, hi = expected[1][1], expected[-1][1]
            assert [m.time for m in bag.messages(start=lo, end=hi, raw=True)] == \
                [r[1] for r in expected if lo <= r[1] < hi]
        for k in range(0, len(expected), max(1, len(expected) // 7)):  # short windows: rows fetched by id
            lo, hi = expected[k][1], expected[min(k + 5, len(expected) - 1)][1]
            assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(start=lo, end=hi, raw=True)] == \
                [r for r in expected if lo <= r[1] < hi]


@pytest.mark.parametrize("path", db3_entries())
def test_real_recording_metadata_agrees_where_it_agrees_with_the_database(path, tmp_path):
    """metadata.yaml counts equal ours wherever they equal the database's (rosbag2 writes some as 0)."""
    if not (path.is_dir() and (path / "metadata.yaml").exists()):
        pytest.skip("no metadata.yaml")
    meta = read_metadata(path / "metadata.yaml")
    assert 1 <= meta.version <= 9 and meta.storage_identifier == "sqlite3"
    if any(not (path / p).exists() for p in meta.relative_file_paths):
        pytest.skip("storage files absent (tested above)")
    counts = counts_of(storage_files(path, tmp_path))
    with open_quietly(path) as bag:
        assert bag.version == str(meta.version)
        for topic in meta.topics:
            if counts.get(topic.name) == topic.message_count:
                assert bag.topics[topic.name].message_count == topic.message_count


def test_metadata_versions_1_to_9_are_all_present_and_parsed():
    if not (DATA / "db3").is_dir():
        pytest.skip(NO_DATA)
    versions = {read_metadata(p).version for p in (DATA / "db3").glob("*/metadata.yaml")}
    assert {1, 4, 5, 7, 8} <= versions
    v1 = read_metadata(DATA / "db3" / "ros2__rosbag2__rosbag2_tests__resources__test" / "metadata.yaml")
    assert [(t.name, t.type, t.message_count) for t in v1.topics] == [
        ("/test_topic", "test_msgs/Primitives", 3), ("/array_topic", "test_msgs/StaticArrayPrimitives", 4)]
    v8 = read_metadata(DATA / "db3" / "ANYbotics__grid_map__grid_map_ros__resource__double_chatter" / "metadata.yaml")
    assert v8.topics[0].type_description_hash.startswith("RIHS01_")
    assert "reliability: 1" in v8.topics[0].offered_qos_profiles
    assert v8.files[0].path == "double_chatter.db3" and v8.files[0].message_count == 25
    assert v8.ros_distro == "rolling" and v8.compression_mode == ""


@pytest.mark.parametrize("version", range(1, 10))
def test_metadata_every_version_parses(version):
    """Each version's shape, as rosbag2 writes it (v1: topic_and_type; v6+: files; v8+: hashes; v9: distro)."""
    key = "topic_and_type" if version == 1 else "topic_metadata"
    text = f"""rosbag2_bagfile_information:
  version: {version}
  storage_identifier: sqlite3
  relative_file_paths: [a_0.db3, a_1.db3]
  duration: {{nanoseconds: 5}}
  starting_time: {{nanoseconds_since_epoch: 7}}
  message_count: 3
  topics_with_message_count:
    - {key}: {{name: /x, type: std_msgs/msg/String, serialization_format: cdr,
        offered_qos_profiles: "- history: 3", type_description_hash: RIHS01_ab}}
      message_count: 3
  compression_format: zstd
  compression_mode: MESSAGE
  files:
    - {{path: a_0.db3, starting_time: {{nanoseconds_since_epoch: 7}}, duration: {{nanoseconds: 5}}, message_count: 3}}
  custom_data: {{k: v}}
  ros_distro: jazzy
"""
    meta = parse_metadata(text)
    assert (meta.version, meta.relative_file_paths, meta.starting_time, meta.duration) == (
        version, ("a_0.db3", "a_1.db3"), 7, 5)
    assert meta.topics[0].name == "/x" and meta.topics[0].type_description_hash == "RIHS01_ab"
    assert (meta.compression_mode, meta.compression_format, meta.ros_distro) == ("MESSAGE", "zstd", "jazzy")
    assert meta.files[0].message_count == 3 and meta.custom_data == {"k": "v"}


def test_rosbags_reads_the_same_raw_messages(tmp_path):
    """Where rosbags reads a directory, its raw messages (topic, time, bytes) equal ours."""
    from rosbags.rosbag2 import Reader

    compared = 0
    for param in db3_entries():
        path = param.values[0]
        if path is None or not path.is_dir() or not (path / "metadata.yaml").exists():
            continue
        try:
            with Reader(path) as reader:
                theirs = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
        except Exception:  # noqa: BLE001 - rosbags fails on some (v1, missing files): proved above instead
            continue
        if not theirs:
            continue  # the QoS-mismatch directories: rosbags silently yields nothing
        with open_quietly(path) as bag:
            assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == theirs
        compared += 1
    if compared == 0:
        pytest.skip(NO_DATA)
    assert compared >= 10


def test_lone_db3_inside_a_directory_and_the_directory_agree():
    path = DATA / "db3" / "ros2__rosbag2__rosbag2_py__test__resources__sqlite3__wbag"
    if not path.is_dir():
        pytest.skip(NO_DATA)
    with open_quietly(path) as whole, open_quietly(path / "wbag_2.db3") as part:
        assert whole.message_count == 6074 and part.message_count == 1240
        mine = {(m.time, bytes(m.data)) for m in part.messages(raw=True)}
        assert mine <= {(m.time, bytes(m.data)) for m in whole.messages(raw=True)}


# -- generated recordings ---------------------------------------------------------------------------

STORAGES = {"sqlite3": ("sqlite3", None), "sqlite3, zstd per message": ("sqlite3", "MESSAGE"),
            "sqlite3, zstd per file": ("sqlite3", "FILE"), "mcap": ("mcap", None),
            "mcap, zstd per file": ("mcap", "FILE")}


def rosbags_recording(folder: Path, storage: str, mode: str | None, count: int = 20) -> None:
    """``count`` Imu messages written by rosbags' rosbag2 writer (metadata version 9) with ``storage`` and
    compression ``mode``; none and no topic for ``count=0``."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    t = store.types
    writer = Writer(folder, version=9, storage_plugin=StoragePlugin[storage.upper()])
    if mode is not None:
        writer.set_compression(CompressionMode[mode], CompressionFormat.ZSTD)
    with writer:
        if not count:
            return
        imu = writer.add_connection("/imu", "sensor_msgs/msg/Imu", typestore=store)
        for i in range(count):
            ns = 1_700_000_000_000_000_000 + i * 10_000_000
            msg = t["sensor_msgs/msg/Imu"](
                t["std_msgs/msg/Header"](t["builtin_interfaces/msg/Time"](ns // 10**9, ns % 10**9), "imu"),
                t["geometry_msgs/msg/Quaternion"](0, 0, 0, 1), np.zeros(9), t["geometry_msgs/msg/Vector3"](i, 0, 0),
                np.zeros(9), t["geometry_msgs/msg/Vector3"](0, 0, 9.81), np.zeros(9))
            writer.write(imu, ns, store.serialize_cdr(msg, "sensor_msgs/msg/Imu"))


@pytest.mark.parametrize("storage, mode", [("sqlite3", None), ("sqlite3", "MESSAGE"), ("mcap", None)])
def test_a_topic_of_two_qos_rows_in_one_file_reads_as_rosbags_reads_it(tmp_path, storage, mode):
    """rosbags' writer stores a topic's two publishers of other QoS as two rows of the ``topics`` table (two
    MCAP channels). fastbag merged the rows into one connection whose chunks asked SQLite for one topic id's
    rows: "holds 5 rows where 10 were indexed ... the file is damaged", nothing readable (QA). Each row is a
    connection now, as each channel is; the topic reads whole, in order, equal to rosbags'."""
    from rosbags.highlevel import AnyReader
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    string = store.types["std_msgs/msg/String"]
    best_effort = Qos(QosHistory.KEEP_LAST, 5, QosReliability.BEST_EFFORT, QosDurability.VOLATILE, QosTime(0, 0),
                      QosTime(0, 0), QosLiveliness.AUTOMATIC, QosTime(0, 0), False)
    folder = tmp_path / "two_rows"
    writer = Writer(folder, version=9, storage_plugin=StoragePlugin[storage.upper()])
    if mode is not None:
        writer.set_compression(CompressionMode[mode], CompressionFormat.ZSTD)
    with writer:
        reliable = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store)
        other = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store,
                                      offered_qos_profiles=[best_effort])
        for i in range(10):
            writer.write(other if i % 2 else reliable, 1000 + i,
                         store.serialize_cdr(string(data=f"m{i}"), "std_msgs/msg/String"))
    if storage == "sqlite3":
        rows = sqlite3.connect(f"file:{folder / 'two_rows.db3'}?mode=ro", uri=True).execute(
            "SELECT count(*) FROM topics WHERE name = '/chatter'").fetchone()
        assert rows == (2,)
    with AnyReader([folder]) as reader:
        theirs = [(t, reader.deserialize(raw, c.msgtype).data) for c, t, raw in reader.messages()]
    with fastbag.open(folder) as bag:
        connections = bag.topics["/chatter"].connections
        assert [c.msgcount for c in connections] == [5, 5]
        assert ["best_effort" in c.offered_qos_profiles for c in connections] == [False, True]
        arr = bag.read("/chatter")
        assert list(zip(arr.time.tolist(), arr["data"].tolist())) == theirs
        assert [(m.time, m.msg.data) for m in bag.messages()] == theirs == [(1000 + i, f"m{i}") for i in range(10)]
        assert [m.msg.data for m in bag.messages(connections=[connections[1]])] == [f"m{i}" for i in range(1, 10, 2)]


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_decompressed_copy_goes_with_its_bag_even_unclosed_and_never_from_a_forked_child(tmp_path, storage):
    """A .mcap.zstd or .db3.zstd recording is decompressed into /tmp/fastbag-*, removed by close() only: a bag
    never closed (a notebook's, a script's) left a whole recording behind each time (QA). The folder now also
    goes when the bag is collected, or when the interpreter exits; a forked child (a DataLoader worker)
    dropping its copy of the bag leaves the parent's files alone."""
    import gc
    import subprocess
    import sys

    folder = tmp_path / "rec"
    rosbags_recording(folder, storage, "FILE")

    def scratch(bag):
        files = bag._container.files if storage == "sqlite3" else [bag._container]
        return Path(files[0]._scratch.path)

    bag = fastbag.open(folder)
    kept = scratch(bag)
    assert kept.is_dir() and len(bag.read("/imu")) == 20  # (a small .db3.zstd is read in memory: empty)
    pid = os.fork()
    if pid == 0:  # the child drops the bag it inherited, collects it, and exits as a worker does
        del bag
        gc.collect()
        os._exit(0)
    os.waitpid(pid, 0)
    assert kept.is_dir() and len(bag.read("/imu")) == 20
    del bag
    gc.collect()
    assert not kept.exists()
    code = ("import fastbag, sys; bag = fastbag.open(sys.argv[1]); bag.read('/imu'); "
            "print([f._scratch.path for f in getattr(bag._container, 'files', [bag._container])][0])")
    left = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, check=True)
    assert left.stdout.strip().startswith(tempfile.gettempdir()) and not Path(left.stdout.strip()).exists()


def _open_unclosed(folder: str, said) -> None:
    """A worker's work: open the recording and read it, never closing the bag; say its scratch folder."""
    bag = fastbag.open(folder)
    bag.read("/imu")
    said.put([f._scratch.path for f in getattr(bag._container, "files", [bag._container])][0])
    _open_unclosed.kept = bag  # (held to the end: the process exits as a DataLoader worker does, in os._exit)


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_worker_processes_decompressed_copy_goes_when_it_exits(tmp_path, storage):
    """A worker process (multiprocessing's, as a DataLoader's) ends in os._exit, past atexit: each epoch's
    workers left their decompressed copies in /tmp (QA: six copies after 3 epochs of 2 workers). The folder
    goes with the worker's own exit now."""
    import multiprocessing

    folder = tmp_path / "rec"
    rosbags_recording(folder, storage, "FILE")
    for method in ("fork", "spawn"):
        context = multiprocessing.get_context(method)
        said = context.Queue()
        worker = context.Process(target=_open_unclosed, args=(str(folder), said))
        worker.start()
        path = Path(said.get(timeout=60))
        worker.join(60)
        assert worker.exitcode == 0 and path.name.startswith("fastbag-") and not path.exists(), method


def test_one_recording_in_every_storage_looks_the_same(tmp_path):
    """The same recording in sqlite3 and MCAP storage, plain and compressed, through everything that is not about
    its storage. A directory of one MCAP file was read as a bare MCAP file ("MCAP" version "0") and lost the type
    hash metadata.yaml keeps; a .mcap.zstd's size was its decompressed size; sqlite3's compression sizes were 0
    (a ported ratio divided by zero); a recording of no topic had "0 messages name a missing topic id"."""
    from rosbags.highlevel import AnyReader

    seen = {}
    for name, (storage, mode) in STORAGES.items():
        folder = tmp_path / name.replace(" ", "").replace(",", "-")
        rosbags_recording(folder, storage, mode)
        with AnyReader([folder]) as reader:
            digest, = [c.digest for c in reader.connections]
        with fastbag.open(folder) as bag:
            c, = bag.topics["/imu"].connections
            on_disk = sum(p.stat().st_size for p in folder.iterdir() if p.name != "metadata.yaml")
            assert (bag.format, bag.version, bag.size, bag.problems) == ("rosbag2", "9", on_disk, []), name
            assert (c.md5sum, c.digest, c.type_description_hash) == ("*", digest, digest), name
            assert digest.startswith("RIHS01_")
            kind, whole, stored = bag.get_compression_info()
            assert (kind, whole > 0, stored > 0) == ("none" if mode is None else "zstd", mode != "MESSAGE",
                                                     mode != "MESSAGE"), name
            if mode == "FILE":
                assert stored == on_disk < whole, name
            imu = bag.read("/imu")
            seen[name] = (bag.topics["/imu"].message_count, c.latching, c.qos, bag.start_time, bag.end_time,
                          imu.time.tolist(), imu["angular_velocity"]["x"].tolist(),
                          [m.msg.header.stamp.nanosec for m in bag.messages()])
        assert seen[name] == seen["sqlite3"], name
    assert seen["sqlite3"][6] == list(range(20))
    for storage in ("sqlite3", "mcap"):  # a recording of no topic: nothing to say of it
        rosbags_recording(tmp_path / f"empty-{storage}", storage, None, count=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with fastbag.open(tmp_path / f"empty-{storage}") as bag:
                assert (bag.topics, bag.problems, bag.message_count, bag.format) == ({}, [], 0, "rosbag2")


from tools.fuzz_rosbag2 import SCHEMA  # noqa: E402 - the tables rosbag2 writes, one copy for both


def write_db3(path: Path, rows: list[tuple[int, int, bytes]], *, topics=((1, "/a", "std_msgs/msg/String"),
                                                                         (2, "/b", "std_msgs/msg/Int32")),
              compress: bool = False, wal: bool = False) -> list[tuple[int, int, bytes]]:
    """A .db3 holding ``rows`` (topic id, timestamp, data), blobs zstd-compressed when ``compress``."""
    con = sqlite3.connect(path)
    if wal:
        con.execute("PRAGMA journal_mode=WAL")
    con.executescript(SCHEMA)
    con.executemany("INSERT INTO topics VALUES (?, ?, ?, 'cdr', '')", topics)
    cctx = zstandard.ZstdCompressor()
    con.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (?, ?, ?)",
                    [(t, ts, cctx.compress(d) if compress else d) for t, ts, d in rows])
    con.commit()
    con.close()
    return rows


def write_metadata(folder: Path, files: list[str], *, mode: str = "", version: int = 5, topics=None) -> None:
    topics = topics or [("/a", "std_msgs/msg/String"), ("/b", "std_msgs/msg/Int32")]
    entries = "".join(f"""
    - topic_metadata:
        name: {name}
        type: {typ}
        serialization_format: cdr
        offered_qos_profiles: ""
      message_count: 0""" for name, typ in topics)
    (folder / "metadata.yaml").write_text(f"""rosbag2_bagfile_information:
  version: {version}
  storage_identifier: sqlite3
  relative_file_paths: [{', '.join(files)}]
  duration: {{nanoseconds: 0}}
  starting_time: {{nanoseconds_since_epoch: 0}}
  message_count: 0
  topics_with_message_count:{entries or ' []'}
  compression_format: {'zstd' if mode else '""'}
  compression_mode: {mode or '""'}
""")


def cdr_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return b"\0\1\0\0" + len(raw).to_bytes(4, "little") + raw


def sample_rows(n: int = 50, start: int = 10**18) -> list[tuple[int, int, bytes]]:
    return [(1 + k % 2, start + k * 1000 // 3, cdr_string(f"m{k}") if k % 2 == 0 else
             b"\0\1\0\0" + k.to_bytes(4, "little")) for k in range(n)]


def test_split_bag_reads_files_in_order_with_ties_in_file_order(tmp_path):
    write_db3(tmp_path / "r_0.db3", [(1, 100, b"a0"), (2, 300, b"a1"), (1, 300, b"a2")])
    # the second file numbers its topics differently: /a is 7 there, /b is 5
    write_db3(tmp_path / "r_1.db3", [(7, 300, b"b0"), (5, 200, b"b1"), (7, 400, b"b2")],
              topics=((5, "/b", "std_msgs/msg/Int32"), (7, "/a", "std_msgs/msg/String")))
    write_metadata(tmp_path, ["r_0.db3", "r_1.db3"])
    with fastbag.open(tmp_path) as bag:
        assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == [
            ("/a", 100, b"a0"), ("/b", 200, b"b1"), ("/b", 300, b"a1"), ("/a", 300, b"a2"), ("/a", 300, b"b0"),
            ("/a", 400, b"b2")]
        assert {t: i.message_count for t, i in bag.topics.items()} == {"/a": 4, "/b": 2}
        assert len(bag.connections) == 2


def _int32_topics(folder: Path, files: int, topics: int, per_topic: int) -> list[tuple[str, int, int]]:
    """A recording of ``files`` .db3 files, each holding ``per_topic`` Int32 messages of each of ``topics``
    topics, interleaved; every message as (topic, time, value) in read order."""
    names = [(k + 1, f"/t{k}", "std_msgs/msg/Int32") for k in range(topics)]
    messages = []
    for f in range(files):
        rows = []
        for i in range(topics * per_topic):
            value = len(messages)
            messages.append((f"/t{i % topics}", 10**18 + value * 1000, value))
            rows.append((i % topics + 1, 10**18 + value * 1000, b"\0\1\0\0" + value.to_bytes(4, "little")))
        write_db3(folder / f"r_{f}.db3", rows, topics=names)
    write_metadata(folder, [f"r_{f}.db3" for f in range(files)], topics=[(n, t) for _, n, t in names])
    return messages


@pytest.mark.parametrize("pages", [True, False], ids=["from pages", "through SQLite"])
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "zstd per message"])
def test_a_few_messages_are_fetched_by_row_id_and_equal_the_chunks_read(tmp_path, monkeypatch, pages, compressed):
    """A short window (or a dataset's sample) fetched each topic's whole chunk through the worker pool: 0.6 ms
    for 4 messages of 4 topics, where rosbags' query takes 0.02 ms. Reads of a few messages now fetch their
    rows by id; what they give equals the chunks' read (the whole loop), raw, decoded and by ``take``, in
    one file and across split files, a row taken twice."""
    import numba  # noqa: F401 - loaded before the index is read, as messages() loads it

    from fastbag.rosbag2.reader import DIRECT_ROWS

    if not pages:
        monkeypatch.setattr(Db3, "_read_pages", lambda self, *args: None)
    fetched = []
    row_blobs = Db3.row_blobs
    monkeypatch.setattr(Db3, "row_blobs",
                        lambda self, ids, *args: fetched.append(ids.size) or row_blobs(self, ids, *args))
    names = [(k + 1, f"/t{k}", "std_msgs/msg/Int32") for k in range(4)]
    want = []
    for f in range(2):
        rows = [(k % 4 + 1, 10**18 + (f * 600 + k) * 1000, b"\0\1\0\0" + (f * 600 + k).to_bytes(4, "little"))
                for k in range(600)]
        write_db3(tmp_path / f"r_{f}.db3", rows, topics=names, compress=compressed)
        want += [(f"/t{t - 1}", ts, d) for t, ts, d in rows]
    write_metadata(tmp_path, ["r_0.db3", "r_1.db3"], mode="MESSAGE" if compressed else "",
                   topics=[(n, t) for _, n, t in names])
    rng = np.random.default_rng(7)
    with fastbag.open(tmp_path) as bag:
        whole = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
        assert whole == want
        for first, count in [(0, 1), (597, 6), (1190, 10), *((int(rng.integers(0, 1200)), int(rng.integers(1, 40)))
                                                             for _ in range(30))]:
            start, end = want[first][1], want[min(first + count, 1199)][1]
            fetched.clear()
            assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(start=start, end=end, raw=True)] == \
                [w for w in want if start <= w[1] < end]
            assert fetched and sum(fetched) <= count  # (by id: never a whole chunk's rows)
            assert [(m.topic, m.time, m.msg.data) for m in bag.messages(start=start, end=end)] == \
                [(t, ts, int.from_bytes(d[4:], "little")) for t, ts, d in want if start <= ts < end]
        values = bag.read("/t2")["data"]
        for positions in ([0], [5, 5, 149, 150, 299, 0], rng.integers(0, 300, 50).tolist()):
            assert bag.take("/t2", positions)["data"].tolist() == values[positions].tolist()
        fetched.clear()  # more than DIRECT_ROWS, of each topic: through the chunks
        assert len(list(bag.messages(start=want[0][1], end=want[4 * DIRECT_ROWS + 4][1], raw=True))) == \
            4 * DIRECT_ROWS + 4
        assert not fetched
    page_reads = []
    page_blobs = Db3._page_blobs
    monkeypatch.setattr(Db3, "_page_blobs", lambda self, *a, **k: page_reads.append(1) or page_blobs(self, *a, **k))
    with fastbag.open(tmp_path) as bag:  # a topic read first, through its own index (a .db3's topic pages)
        lo, hi = want[401][1], want[441][1]
        assert bag.read("/t1", lo, hi)["data"].tolist() == \
            [int.from_bytes(d[4:], "little") for t, ts, d in want if t == "/t1" and lo <= ts < hi]
        assert bool(page_reads) is pages


def test_a_recording_split_into_many_files_is_joined_once(tmp_path, monkeypatch):
    """Opening joined each file's chunks to those of the files before it, copying every column each time:
    O(files x rows), 7.5 s for bag.topics of 1,600 files of 1,000 rows (QA). Chunks are now joined when an
    index is made, once; the values are the files' own."""
    from fastbag.rosbag2.reader import _Chunks

    joins = []
    joined = _Chunks.joined.__func__
    monkeypatch.setattr(_Chunks, "joined", classmethod(lambda cls, parts: joins.append(len(parts)) or
                                                       joined(cls, parts)))
    want = _int32_topics(tmp_path, files=60, topics=3, per_topic=5)
    for topic_first in (False, True):  # (a topic's index first: the whole index then checks its chunks)
        joins.clear()
        with fastbag.open(tmp_path) as bag:
            if not topic_first:
                assert {t: i.message_count for t, i in bag.topics.items()} == {"/t0": 300, "/t1": 300, "/t2": 300}
            arr = bag.read("/t1")
            assert arr["data"].tolist() == [v for t, _, v in want if t == "/t1"]
            assert arr.time.tolist() == [ts for t, ts, _ in want if t == "/t1"]
            assert [(m.topic, m.time, m.msg.data) for m in bag.messages()] == want
        assert 1 <= len(joins) <= 2 and max(joins) >= 60, joins  # (an index of one topic, then the whole bag's)


def test_a_topic_stream_that_ends_early_is_a_bag_format_error_naming_it(tmp_path):
    """A .db3 loop merges its topics' streams by each row's stream (Bag._merged): one that ended before its
    rows (no path makes one now) would have been a RuntimeError out of a StopIteration; it is a
    BagFormatError naming the topic, after every message before it."""
    import itertools

    import numba  # noqa: F401 - loaded before the index is read: rows read from pages, streams merged

    want = _int32_topics(tmp_path, files=1, topics=3, per_topic=4)
    with fastbag.open(tmp_path) as bag:
        bag._container.direct_read_max = 0  # (12 messages: else fetched together, by id, not merged)
        iterate = bag._iter_raw

        def short(selected, *, index):  # /t1's stream loses its last message
            topics = {index.connections[r].topic for r in index.conn[selected].tolist()}
            found = iterate(selected, index=index)
            return itertools.islice(found, selected.size - 1) if topics == {"/t1"} else found

        bag._iter_raw = short
        got = []
        with pytest.raises(BagFormatError, match="topic /t1 ended before"):
            for m in bag.messages(raw=True):
                got.append((m.topic, m.time))
        assert got == [(t, ts) for t, ts, _ in want][:len(got)] and len(got) == len(want) - 2  # (/t2's last too)


def test_a_db3_of_thousands_of_topics_iterates_in_bounded_memory(tmp_path):
    """A loop over a .db3 iterates each topic on its own and merges them (Bag._iter_merged). Each topic's
    iteration made arrays as long as the bag's chunk table, and a list of every topic's name: memory grew
    with topics squared (16,000 topics of 3 messages: 6.4 GB for a 12 MB file, 21 s; QA). Messages and
    their order are the database's."""
    import tracemalloc

    import numba  # noqa: F401 - loaded before the index is read, as messages() loads it: rows read from pages

    want = _int32_topics(tmp_path, files=1, topics=2000, per_topic=3)
    with fastbag.open(tmp_path) as bag:
        next(bag.messages())  # (the index read before measuring)
        for raw in (False, True):
            tracemalloc.start()
            try:
                got = [(m.topic, m.time, bytes(m.data)[4:] if raw else m.msg.data) for m in bag.messages(raw=raw)]
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert got == [(t, ts, v.to_bytes(4, "little") if raw else v) for t, ts, v in want]
            assert peak < 40 << 20, f"peak {peak / 2**20:.0f} MiB for a 6,000-message loop (raw={raw})"


def test_topics_are_matched_by_name_and_type_from_the_database(tmp_path):
    """metadata.yaml names a type the database does not: the database wins, nothing is lost."""
    rows = write_db3(tmp_path / "r_0.db3", sample_rows())
    write_metadata(tmp_path, ["r_0.db3"], topics=[("/a", "std_msgs/msg/Wrong"), ("/zzz", "std_msgs/msg/Int32")])
    with fastbag.open(tmp_path) as bag:
        assert {t: (i.msgtype, i.message_count) for t, i in bag.topics.items()} == {
            "/a": ("std_msgs/msg/String", 25), "/b": ("std_msgs/msg/Int32", 25)}
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]


def test_message_compression_is_undone_per_row(tmp_path):
    rows = write_db3(tmp_path / "r_0.db3", sample_rows(200), compress=True)
    write_metadata(tmp_path, ["r_0.db3"], mode="MESSAGE")
    with fastbag.open(tmp_path) as bag:
        assert bag.compression == {"zstd": 1} and bag.chunk_count == 2  # one file, its rows in two batches
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]
        assert [bytes(m.data) for m in bag.messages("/b", raw=True)] == [r[2] for r in rows if r[0] == 2]


def test_a_lone_db3_compressed_per_message_says_so_in_its_own_metadata(tmp_path):
    """Opened alone (no metadata.yaml beside it), a .db3 that rosbags' writer compressed per message was read
    as uncompressed (a DecodeError at the first message): its own metadata table says compression_mode:
    message. Checked against rosbags reading the directory."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    String = store.types["std_msgs/msg/String"]
    writer = Writer(tmp_path / "rec", version=8)
    writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
    with writer:
        connection = writer.add_connection("/s", "std_msgs/msg/String", typestore=store)
        for k in range(20):
            writer.write(connection, 10**18 + k, store.serialize_cdr(String(data=f"text {k}"), "std_msgs/msg/String"))
    with Reader(tmp_path / "rec") as reader:
        theirs = [store.deserialize_cdr(raw, c.msgtype).data for c, _, raw in reader.messages()]
    with fastbag.open(tmp_path / "rec" / "rec.db3") as bag:
        assert bag.compression == {"zstd": 1}
        assert bag.read("/s").data.tolist() == theirs == [f"text {k}" for k in range(20)]


@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "python-3.10"])
def test_file_compression_is_undone_once(tmp_path, monkeypatch, in_memory):
    """A small .db3.zstd is read from memory; where sqlite3 cannot (Python 3.10 has no
    Connection.deserialize: every such recording raised AttributeError), from a temporary file."""
    from fastbag.rosbag2 import sqlite as sqlite_storage

    in_memory = sqlite_storage.DESERIALIZES and in_memory  # (Python 3.10: never)
    monkeypatch.setattr(sqlite_storage, "DESERIALIZES", in_memory)
    rows = write_db3(tmp_path / "plain.db3", sample_rows(), wal=True)
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "r_0.db3.zstd").write_bytes(zstandard.ZstdCompressor().compress(
        (tmp_path / "plain.db3").read_bytes()))
    write_metadata(tmp_path / "rec", ["r_0.db3.zstd"], mode="FILE")
    with fastbag.open(tmp_path / "rec") as bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]
        assert bag.read("/a")["data"].tolist() == [f"m{k}" for k in range(0, 50, 2)]
        assert (bag._container.files[0]._memory is None) != in_memory
    assert sorted(os.listdir(tmp_path / "rec")) == ["metadata.yaml", "r_0.db3.zstd"]


def test_file_compression_beyond_memory_goes_to_a_temporary_file_removed_on_close(tmp_path, monkeypatch):
    import tempfile

    from fastbag.rosbag2 import compression

    monkeypatch.setattr(compression, "IN_MEMORY_BYTES", 1000)
    monkeypatch.setattr(compression, "STEP", 1000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    rows = write_db3(tmp_path / "plain.db3", sample_rows())
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "r_0.db3.zstd").write_bytes(zstandard.ZstdCompressor().compress(
        (tmp_path / "plain.db3").read_bytes()))
    write_metadata(tmp_path / "rec", ["r_0.db3.zstd"], mode="FILE")
    bag = fastbag.open(tmp_path / "rec")
    assert os.listdir(tmp_path / "tmp")  # spilled
    assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]
    assert bag._container.files[0]._pages is not None  # the spilled copy is read from its pages (and mapped)
    bag.close()
    assert os.listdir(tmp_path / "tmp") == []


def test_chunks_split_large_topics_and_read_in_parallel(tmp_path, monkeypatch):
    from fastbag.rosbag2 import reader

    monkeypatch.setattr(reader, "CHUNK_BYTES", 200)
    rows = write_db3(tmp_path / "r.db3", sample_rows(500))
    with fastbag.open(tmp_path / "r.db3", workers=4) as bag:
        assert bag.chunk_count > 20
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]


# -- read-only, strictly ---------------------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("name", ["ros2__rosbag2__rosbag2_tests__resources__test/test.db3",      # WAL header
                                  "MichaelGrupp__evo__test__data__tf_example/tf_example.db3"])  # rollback
def test_reading_leaves_no_trace(tmp_path, name):
    source = DATA / "db3" / name
    if not source.exists():
        pytest.skip(NO_DATA)
    folder = tmp_path / "rec"
    folder.mkdir()
    shutil.copy(source, folder / source.name)
    shutil.copy(source.parent / "metadata.yaml", folder / "metadata.yaml")
    os.utime(folder / source.name, ns=(10**18, 10**18))
    before = snapshot(folder)
    for path in (folder, folder / source.name):
        with open_quietly(path) as bag:
            assert sum(1 for _ in bag.messages(raw=True)) == bag.message_count > 0
            assert bag.message_count == len(rows_of([folder / source.name]))
    assert snapshot(folder) == before  # no -wal/-shm, same bytes, same mtime


def test_a_recording_in_progress_reads_what_is_committed(tmp_path):
    """A writer still holds the database in WAL mode, its rows not yet checkpointed; no metadata.yaml."""
    folder = tmp_path / "rec"
    folder.mkdir()
    writer = sqlite3.connect(folder / "r_0.db3")
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.executescript(SCHEMA)
    writer.execute("INSERT INTO topics VALUES (1, '/a', 'std_msgs/msg/String', 'cdr', '')")
    writer.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (1, ?, ?)",
                       [(k, cdr_string(str(k))) for k in range(30)])
    writer.commit()
    writer.execute("INSERT INTO messages(topic_id, timestamp, data) VALUES (1, 99, x'00')")  # not committed
    try:
        assert os.path.getsize(folder / "r_0.db3-wal") > 0
        files = sorted(os.listdir(folder))
        with pytest.warns(FastbagWarning, match="no metadata.yaml.*write-ahead log|write-ahead log"):
            bag = fastbag.open(folder)
        with bag:
            assert [bytes(m.data) for m in bag.messages(raw=True)] == [cdr_string(str(k)) for k in range(30)]
        assert sorted(os.listdir(folder)) == files
        # The same files copied without the writer's -shm: read from a private copy, nothing created here.
        copy = tmp_path / "copy"
        copy.mkdir()
        for name in ("r_0.db3", "r_0.db3-wal"):
            shutil.copy(folder / name, copy / name)
        with pytest.warns(FastbagWarning, match="write-ahead log"):
            bag = fastbag.open(copy / "r_0.db3")
        with bag:
            assert bag.message_count == 30
        assert sorted(os.listdir(copy)) == ["r_0.db3", "r_0.db3-wal"]
    finally:
        writer.rollback()
        writer.close()


# -- bad input --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, error, match", [
    ("rosbag2_bagfile_information: [unclosed", BagFormatError, r"not valid YAML at line \d+, column \d+"),
    ("rosbag2_bagfile_information:\n  storage_identifier: sqlite3\n", BagFormatError, "lacks the field .*version"),
    ("rosbag2_bagfile_information:\n  version: 99\n", UnsupportedError, "version 99 is not supported"),
    ("rosbag2_bagfile_information:\n  version: 5\n  storage_identifier: sqlite3\n  relative_file_paths: 7\n",
     BagFormatError, "relative_file_paths is not a list"),
    ("rosbag2_bagfile_information:\n  version: 5\n  storage_identifier: sqlite3\n  relative_file_paths: []\n",
     BagFormatError, "lists no storage files"),
    ("rosbag2_bagfile_information:\n  version: x\n", BagFormatError, "version is 'x', not a 64-bit integer"),
    ("- 1\n- 2\n", BagFormatError, "is list, not a mapping"),
    ("rosbag2_bagfile_information:\n  version: 5\n  storage_identifier: mcap\n  relative_file_paths: [a.mcap]\n",
     BagFormatError, r"absent \(.*a\.mcap\)"),  # MCAP storage: read by fastbag.rosbag2.mcap_storage
    ("rosbag2_bagfile_information:\n  version: 5\n  storage_identifier: sqlite3\n  relative_file_paths: [r.db3]\n"
     "  compression_mode: FILE\n  compression_format: lz4\n", UnsupportedError, "compression format 'lz4'"),
])
def test_malformed_metadata_is_named(tmp_path, text, error, match):
    write_db3(tmp_path / "r.db3", sample_rows(4))
    (tmp_path / "metadata.yaml").write_text(text)
    with pytest.raises(error, match=match) as info:
        fastbag.open(tmp_path)
    assert "metadata.yaml" in str(info.value) or error is UnsupportedError


def test_missing_storage_file_is_named_and_the_rest_stays_readable(tmp_path):
    rows = write_db3(tmp_path / "r_0.db3", sample_rows(10))
    write_metadata(tmp_path, ["r_0.db3", "r_1.db3"])
    with pytest.warns(FastbagWarning, match=r"storage file named in metadata.yaml is absent \(.*r_1.db3\)"):
        bag = fastbag.open(tmp_path)
    with bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]
    write_metadata(tmp_path, ["r_5.db3"])
    with pytest.raises(BagFormatError, match=r"absent \(.*r_5.db3\)"):
        fastbag.open(tmp_path)


def test_not_a_rosbag2_database(tmp_path):
    con = sqlite3.connect(tmp_path / "x.db3")
    con.execute("CREATE TABLE other(x)")
    con.commit()
    con.close()
    with pytest.raises(BagFormatError, match=r"no table 'messages'.*x.db3"):
        fastbag.open(tmp_path / "x.db3")
    os.mkdir(tmp_path / "empty")
    with pytest.raises(BagFormatError, match=r"neither metadata.yaml nor any.*recording \("):
        fastbag.open(tmp_path / "empty")
    for k in range(7):  # a folder of ROS1 bags: named, and what to do
        (tmp_path / "empty" / f"run_{k}.bag").write_bytes(b"#ROSBAG V2.0\n")
    with pytest.raises(BagFormatError, match=r"it holds ROS1 bags: open each \(run_0.bag, run_1.bag, run_2.bag, "
                                             r"run_3.bag, run_4.bag, \.\.\.\)"):
        fastbag.open(tmp_path / "empty")


def test_truncated_and_damaged_databases_raise_naming_the_file_or_read_what_is_intact(tmp_path):
    rows = {r[2] for r in sample_rows(3000)}
    write_db3(tmp_path / "good.db3", sample_rows(3000))
    data = (tmp_path / "good.db3").read_bytes()
    assert len(data) > 30 * 4096
    (tmp_path / "cut.db3").write_bytes(data[:len(data) // 2])
    with pytest.raises(BagFormatError, match=r"database disk image is malformed.*cut.db3"):
        fastbag.open(tmp_path / "cut.db3")
    salvaged = 0
    for page in range(1, len(data) // 4096):  # damage each page in turn
        damaged = bytearray(data)
        damaged[4096 * page + 8:4096 * page + 200] = bytes([0x5A]) * 192
        path = tmp_path / f"bad{page}.db3"
        path.write_bytes(bytes(damaged))
        try:
            with warnings.catch_warnings(record=True) as caught:  # at open, or when the index is built
                warnings.simplefilter("always")
                with fastbag.open(path) as bag:
                    got = [bytes(m.data) for m in bag.messages(raw=True)]
        except FastbagError as exc:
            assert path.name in str(exc)
            continue
        assert set(got) <= rows  # every message read is a real row
        if len(got) < len(rows):  # read what was intact, and said so
            assert any(path.name in str(w.message) and "damaged" in str(w.message) for w in caught)
            salvaged += len(got) > 0
    assert salvaged >= 10


def test_a_damaged_table_reads_every_row_its_index_lists(tmp_path):
    """Where a page is damaged, SQLite's answers vary with the query: the index's scan listed 63 rows of
    /t0 in ids 1 to 621 and the chunk's query then met 61, so a loop over the file raised after 0 messages
    (9 of 40 offsets where 3,000 bytes of 0xff were written raised so). Rows whose blobs SQLite will not give by id are
    left out of the index now, and those it lists are read."""
    rows = write_db3(tmp_path / "good.db3", [(1 + k % 10, 10**18 + 1000 * k, b"\0\1\0\0" + k.to_bytes(4, "little"))
                                              for k in range(20000)],
                     topics=[(t + 1, f"/t{t}", "std_msgs/msg/Int32") for t in range(10)])
    named = [(f"/t{t - 1}", ts, d) for t, ts, d in rows]
    real = set(named)
    data = (tmp_path / "good.db3").read_bytes()
    read_past_damage = 0
    # (at 7 * 4096 + 2433 the first leaf is damaged: probes past it started at id -2**63 and never reached
    # id 1, so nothing was read; at 13 * 4096 + 782, /t0's first chunk met 61 of its 63 rows)
    for offset in [7 * 4096 + 2433, *range(13 * 4096 + 782, len(data), 8 * 4096)]:
        damaged = bytearray(data)
        damaged[offset:offset + 3000] = b"\xff" * 3000
        path = tmp_path / f"at{offset}.db3"
        path.write_bytes(bytes(damaged))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fastbag.open(path) as bag:
                got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
                assert len(got) == bag.message_count, offset
                for k in range(0, len(got), 1999):  # short windows, their rows fetched by id (payloads_of)
                    lo, hi = got[k][1], got[min(k + 5, len(got) - 1)][1]
                    assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(start=lo, end=hi, raw=True)] == \
                        [g for g in got if lo <= g[1] < hi], offset
                if len(got) < len(rows):
                    assert any(path.name in p and "damaged" in p for p in bag.problems), offset
                    read_past_damage += 1
            # Each a real row, in time order, once. (A blob the 0xff bytes fell on reads as it now is: rows
            # carry no checksum. Its header kept its length.)
            keys = {m[:2] for m in got}
            assert [m[:2] for m in got] == [m[:2] for m in named if m[:2] in keys], offset
            overwritten = [m for m in got if m not in real]
            assert len(overwritten) <= 3000 // 20 and all(len(m[2]) == 8 for m in overwritten), offset
    assert read_past_damage >= 12


def test_a_damaged_key_hides_no_row_the_index_lists(tmp_path):
    """A damaged cell (row 16's rowid byte made the start of a longer varint: SQLite reads a row 133 of
    NULLs) puts the leaf's keys out of order. A scan still meets every row after it, a search by id misses
    row 17, and a topic's range query missed it too: a loop raised after 0 messages (fuzz_rosbag2 seed
    20261214, cases 1167 and 1263). Rows a search by id cannot find are left out of the index now, and said."""
    rows = write_db3(tmp_path / "r.db3", sample_rows(20))
    raw = bytearray((tmp_path / "r.db3").read_bytes())
    con = sqlite3.connect(tmp_path / "r.db3")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    con.close()
    leaf = (root - 1) * 4096
    assert raw[leaf] == 0x0D  # (one leaf holds the table)
    cells = [int.from_bytes(raw[leaf + 8 + 2 * i:leaf + 10 + 2 * i], "big")
             for i in range(int.from_bytes(raw[leaf + 3:leaf + 5], "big"))]
    (cell,) = [c for c in cells if raw[leaf + c + 1] == 16]  # (payload length, then the rowid: one byte each)
    raw[leaf + cell + 1] = 0x81
    (tmp_path / "r.db3").write_bytes(bytes(raw))
    write_metadata(tmp_path, ["r.db3"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fastbag.open(tmp_path) as bag:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
            assert got == [({1: "/a", 2: "/b"}[t], ts, d) for k, (t, ts, d) in enumerate(rows) if k + 1 not in (16, 17)]
            assert bag.message_count == 18 and bag.read("/b").time.size == 9
            assert any("1 malformed rows left out, 1 rows whose data cannot be read left out" in p
                       for p in bag.problems), bag.problems


def test_damage_in_one_split_file_leaves_the_others_readable(tmp_path):
    rows = write_db3(tmp_path / "r_0.db3", sample_rows(10))
    (tmp_path / "r_1.db3").write_bytes(b"SQLite format 3\0" + bytes(5000))
    write_metadata(tmp_path, ["r_0.db3", "r_1.db3"])
    with pytest.warns(FastbagWarning, match="r_1.db3"):
        bag = fastbag.open(tmp_path)
    with bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]


def _frames(pieces: list[bytes]) -> tuple[bytes, list[int], list[int]]:
    lengths = [len(p) for p in pieces]
    return b"".join(pieces), [sum(lengths[:i]) for i in range(len(lengths))], lengths


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 255, 256, 257, 300, 65791, 65792, 70000]),
                          st.booleans(), st.booleans(), st.booleans()), min_size=1, max_size=12))
def test_zstd_frame_headers_read_as_zstandard_reads_them(frames):
    """The declared content size of frames as every writer setting makes them (size field of 1, 2, 4 bytes or
    none, single segment or not, checksum, a dictionary id) equals zstandard's frame_content_size; a frame
    without one is named (decompress_frames then goes frame by frame)."""
    from fastbag.rosbag2.kernels import zstd_content_sizes

    dictionary = zstandard.ZstdCompressionDict(b"rosbag2 " * 64, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    pieces = []
    for size, content_size, checksum, with_dict in frames:
        compressor = zstandard.ZstdCompressor(write_content_size=content_size, write_checksum=checksum,
                                              dict_data=dictionary if with_dict else None, write_dict_id=with_dict)
        pieces.append(compressor.compress(bytes(range(256)) * (size // 256) + bytes(size % 256)))
    data, starts, lengths = _frames(pieces)
    out = np.zeros(len(pieces), dtype=np.int64)
    first = zstd_content_sizes(np.frombuffer(data, np.uint8), np.array(starts), np.array(lengths), out)
    theirs = [zstandard.frame_content_size(p) for p in pieces]
    unknown = [i for i, size in enumerate(theirs) if size < 0]
    assert first == (unknown[0] if unknown else -1)
    assert out[:first if first >= 0 else None].tolist() == theirs[:first if first >= 0 else None]


def test_frames_decompress_the_same_in_one_call_or_one_by_one(monkeypatch):
    """decompress_frames gives what zstd gives frame by frame, whether the frames take the one-call path
    (every size declared) or not (one frame without its size), and names a frame whose size is a lie."""
    from fastbag.rosbag2 import compression
    from fastbag.rosbag2.compression import FrameError, decompress_frames

    one_by_one = []
    real = compression._decompress_one_by_one
    monkeypatch.setattr(compression, "_decompress_one_by_one", lambda *a: one_by_one.append(1) or real(*a))

    rng = np.random.default_rng(7)
    messages = [rng.integers(0, 40, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 900, 300)]
    compressor = zstandard.ZstdCompressor()
    pieces = [compressor.compress(m) for m in messages]
    for variant in ("declared", "one without its size"):
        if variant != "declared":
            pieces[150] = zstandard.ZstdCompressor(write_content_size=False).compress(messages[150])
        payload, sizes = decompress_frames(*_frames(pieces))
        assert sizes.tolist() == [len(m) for m in messages]
        assert payload.tobytes() == b"".join(messages)
        assert len(one_by_one) == (variant != "declared")
    # Frames of nothing (one call with all of them empty crashed the process: zstandard frees twice)
    for empty in ([b""], [b"", b""], [b"", b"abc"]):
        payload, sizes = decompress_frames(*_frames([compressor.compress(m) for m in empty]))
        assert sizes.tolist() == [len(m) for m in empty] and payload.tobytes() == b"".join(empty)
    # A frame declaring one byte more than it holds: the one call fails, the loop names the frame.
    liar = next(i for i, m in enumerate(messages) if 300 <= len(m) < 600)  # a 2-byte size field
    bad = bytearray(pieces[liar])
    assert bad[4] >> 6 == 1 and bad[4] & 0x20  # single segment: the size right after the descriptor
    bad[5:7] = (int.from_bytes(bad[5:7], "little") + 1).to_bytes(2, "little")
    assert zstandard.frame_content_size(bytes(bad)) == len(messages[liar]) + 1
    pieces[liar] = bytes(bad)
    with pytest.raises(FrameError) as info:
        decompress_frames(*_frames(pieces))
    assert info.value.index == liar


def test_zstd_bombs_are_refused(tmp_path):
    bomb = zstandard.ZstdCompressor().compress(bytes(256 << 20))  # 256 MiB of zeros in ~8 KiB
    assert len(bomb) < 16 << 10
    # per message: the row is named
    write_db3(tmp_path / "m.db3", [(1, 5, b"")])
    con = sqlite3.connect(tmp_path / "m.db3")
    con.execute("UPDATE messages SET data = ? WHERE id = 1", (bomb,))
    con.commit()
    con.close()
    (tmp_path / "m").mkdir()
    shutil.move(tmp_path / "m.db3", tmp_path / "m" / "m.db3")
    write_metadata(tmp_path / "m", ["m.db3"], mode="MESSAGE")
    with fastbag.open(tmp_path / "m") as bag:
        with pytest.raises(BagFormatError, match=r"message row 1 does not decompress: zstd frame declares 268435456"):
            list(bag.messages(raw=True))
    # a frame without its size: stopped at the limit
    sizeless = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(256 << 20))
    con = sqlite3.connect(tmp_path / "m" / "m.db3")
    con.execute("UPDATE messages SET data = ? WHERE id = 1", (sizeless,))
    con.commit()
    con.close()
    with fastbag.open(tmp_path / "m") as bag:
        with pytest.raises(BagFormatError, match=r"message row 1 does not decompress"):
            list(bag.messages(raw=True))
    # per file
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "f.db3.zstd").write_bytes(bomb)
    write_metadata(tmp_path / "f", ["f.db3.zstd"], mode="FILE")
    with pytest.raises(BagFormatError, match=r"decompresses to more than \d+ bytes.*f.db3.zstd"):
        fastbag.open(tmp_path / "f")
    for damaged in (b"\x28\xb5\x2f\xfd" + bytes(40), b"\x28\xb5\x2f\xfd" + b"\xff" * 40):
        (tmp_path / "f" / "f.db3.zstd").write_bytes(damaged)
        with pytest.raises(BagFormatError, match=r"does not (decompress|hold an SQLite database).*f.db3.zstd"):
            fastbag.open(tmp_path / "f")
    # a compressed database cut short: an error naming the file, or what was intact, with a warning
    write_db3(tmp_path / "whole.db3", sample_rows(2000))
    packed = zstandard.ZstdCompressor().compress((tmp_path / "whole.db3").read_bytes())
    (tmp_path / "f" / "f.db3.zstd").write_bytes(packed[:len(packed) // 2])
    with pytest.raises(FastbagError, match="f.db3.zstd"):
        with fastbag.open(tmp_path / "f") as bag:
            list(bag.messages(raw=True))


@pytest.mark.parametrize("pages", [True, False], ids=["from pages", "through SQLite"])
def test_rows_changed_after_opening_are_detected(tmp_path, monkeypatch, pages):
    """A row deleted after the index was built: the header's change counter says the file changed, whether
    the rows were read from the pages or through SQLite (which, reading a file opened immutable, answers
    from the pages a connection cached: the rows it fetched on the thread that indexed them were the old
    ones, and only a worker thread's new connection saw the change)."""
    if not pages:
        monkeypatch.setattr(Db3, "_read_pages", lambda self, *args: None)
    write_db3(tmp_path / "r.db3", sample_rows(20))
    bag = fastbag.open(tmp_path / "r.db3")
    assert bag.topics["/a"].message_count == 10  # the index is built (on first use: opening reads no row)
    con = sqlite3.connect(tmp_path / "r.db3")
    con.execute("DELETE FROM messages WHERE id = 3")
    con.commit()
    con.close()
    with bag, pytest.raises(BagFormatError, match=r"changed after it was opened.*open it again.*r\.db3"):
        list(bag.messages(raw=True))


def test_random_damage_raises_only_fastbag_errors(tmp_path):
    write_db3(tmp_path / "r.db3", sample_rows(400))
    data = (tmp_path / "r.db3").read_bytes()
    rng = np.random.default_rng(14)
    for trial in range(40):
        damaged = bytearray(data)
        for at in rng.integers(100, len(data), size=int(rng.integers(1, 20))):
            damaged[int(at)] = int(rng.integers(0, 256))
        path = tmp_path / f"d{trial}.db3"
        path.write_bytes(bytes(damaged))
        try:
            _read_all_raw(path)
        except FastbagError as exc:
            assert path.name in str(exc)


def test_random_metadata_and_blob_damage_raises_only_fastbag_errors(tmp_path):
    """A seeded slice of the damage a fuzz campaign would do: YAML fields and zstd rows."""
    rng = np.random.default_rng(2014)
    real = sorted((DATA / "db3").glob("*/metadata.yaml")) if (DATA / "db3").is_dir() else []
    write_db3(tmp_path / "r_0.db3", sample_rows(60), compress=True)
    write_metadata(tmp_path, ["r_0.db3"], mode="MESSAGE")
    texts = [p.read_bytes() for p in real] + [(tmp_path / "metadata.yaml").read_bytes()]
    for trial in range(60):
        text = bytearray(texts[trial % len(texts)])
        for _ in range(int(rng.integers(1, 6))):
            at = int(rng.integers(0, len(text)))
            choice = int(rng.integers(0, 4))
            if choice == 0:
                text[at] = int(rng.integers(0, 256))
            elif choice == 1:
                del text[at:at + int(rng.integers(1, 40))]
            elif choice == 2:
                text[at:at] = rng.choice([b"- ", b": ", b"\n", b"{", b"[", b"9" * 30, b"~", b"!!binary "])
            else:
                text[at:at] = text[int(rng.integers(0, len(text))):][:int(rng.integers(1, 80))]
        (tmp_path / "metadata.yaml").write_bytes(bytes(text))
        try:
            _read_all_raw(tmp_path)
        except FastbagError:
            pass
    # rows of a message-compressed bag damaged in place
    write_metadata(tmp_path, ["r_0.db3"], mode="MESSAGE")
    con = sqlite3.connect(tmp_path / "r_0.db3")
    ids = [r[0] for r in con.execute("SELECT id FROM messages")]
    for trial, row in enumerate(ids[:20]):
        blob = bytearray(con.execute("SELECT data FROM messages WHERE id = ?", (row,)).fetchone()[0])
        blob[int(rng.integers(0, len(blob)))] ^= 1 << int(rng.integers(0, 8))
        con.execute("UPDATE messages SET data = ? WHERE id = ?", (bytes(blob[:len(blob) - trial % 3]), row))
    con.commit()
    con.close()
    with fastbag.open(tmp_path) as bag:
        for topic in bag.topics:
            try:
                for _ in bag.messages(topic, raw=True):
                    pass
            except FastbagError as exc:
                assert "r_0.db3" in str(exc) and "message row" in str(exc)


def test_a_lone_compressed_db3_opens(tmp_path):
    rows = write_db3(tmp_path / "plain.db3", sample_rows(30))
    (tmp_path / "r.db3.zstd").write_bytes(zstandard.ZstdCompressor().compress((tmp_path / "plain.db3").read_bytes()))
    with fastbag.open(tmp_path / "r.db3.zstd") as bag:
        assert bag.format == "rosbag2"
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]


def _traced_statements(monkeypatch) -> list[str]:
    """Every SQL statement fastbag's sqlite3 connections run from now on, in order."""


    statements: list[str] = []
    connect = Db3._connect

    def traced(self, *args):
        con = connect(self, *args)
        con.set_trace_callback(statements.append)
        return con

    monkeypatch.setattr(Db3, "_connect", traced)
    return statements


@pytest.mark.parametrize("pages", [True, False], ids=["from pages", "through SQLite"])
def test_opening_reads_no_blob(tmp_path, monkeypatch, pages):
    """Every statement run while opening reads ids, topics, timestamps and lengths, never ``data`` itself;
    reading then takes the blobs from the file's pages, or (where those are not read) with SQL."""
    if pages:
        import numba  # noqa: F401 - the pages are read where it is loaded (as in the suite, by tests before)
    else:
        monkeypatch.setattr(Db3, "_read_pages", lambda self, *args: None)
    statements = _traced_statements(monkeypatch)
    write_db3(tmp_path / "r.db3", sample_rows(100))
    with fastbag.open(tmp_path / "r.db3") as bag:
        assert bag.message_count == 100
        opened = list(statements)
        assert len(list(bag.messages(raw=True))) == 100
    assert opened and all(not re.search(r"\bdata\b", s.replace("length(data)", "")) for s in opened), opened
    blobs_by_sql = ("group_concat(data", "SELECT id, data FROM")  # (a chunk's rows, or a few rows by id)
    read = statements[len(opened):]
    assert any(sql in s for sql in blobs_by_sql for s in read) is not pages, read


def test_opening_reads_no_message_row(tmp_path, monkeypatch):
    """Opening runs indexed aggregates only (count, min and max of the timestamp index); the per-message
    index is built by one scan of the rows on first use, and agrees with what opening said."""
    statements = _traced_statements(monkeypatch)
    for k in range(2):
        write_db3(tmp_path / f"r_{k}.db3", sample_rows(100, start=10**18 + k * 10**6))
    write_metadata(tmp_path, ["r_0.db3", "r_1.db3"])
    with fastbag.open(tmp_path) as bag:
        opened = [s for s in statements if "messages" in s]
        assert bag._container._index is None
        assert opened and all(re.fullmatch(r"SELECT (count\(\*\)|min\(timestamp\)|max\(timestamp\)) FROM messages|"
                                           r"EXPLAIN QUERY PLAN SELECT max\(timestamp\) FROM messages", s)
                              for s in opened), opened
        said = (bag.message_count, bag.start_time, bag.end_time)
        assert said == (200, 10**18, 10**18 + 10**6 + 99 * 1000 // 3)
        assert bag._container._index is None
        assert sum(i.message_count for i in bag.topics.values()) == 200  # builds the index
        assert bag._container._index is not None
        assert (bag.message_count, bag.start_time, bag.end_time) == said


def test_metadata_yaml_is_parsed_once(tmp_path, monkeypatch):
    import fastbag.rosbag2.metadata as metadata

    parsed: list[str] = []
    parse = metadata.parse_metadata
    monkeypatch.setattr(metadata, "parse_metadata", lambda text, path="": parsed.append(path) or parse(text, path))
    write_db3(tmp_path / "r_0.db3", sample_rows(10))
    write_metadata(tmp_path, ["r_0.db3"])
    with fastbag.open(tmp_path) as bag:
        assert bag.message_count == 10 and bag.version == "5"
    assert parsed == [str(tmp_path / "metadata.yaml")]


def test_sparse_topics_are_fetched_by_id_and_large_rows_one_by_one(tmp_path, monkeypatch):
    """Through SQLite (a file being written, say): a topic of a few large rows among many small ones: its
    rows are looked up by id (the rows between are never read) and fetched one by one; the dense topic's
    rows as a range, joined by group_concat."""
    monkeypatch.setattr(Db3, "_read_pages", lambda self, *args: None)
    statements = _traced_statements(monkeypatch)
    rng = np.random.default_rng(3)
    rows = [(2, 10**18 + k, b"\0\1\0\0" + rng.bytes(20_000)) if k % 50 == 7 else
            (1, 10**18 + k, cdr_string(f"m{k}")) for k in range(2000)]
    write_db3(tmp_path / "r.db3", rows)
    with fastbag.open(tmp_path / "r.db3") as bag:
        for topic, topic_id in (("/b", 2), ("/a", 1)):
            statements.clear()
            got = [(m.time, bytes(m.data)) for m in bag.messages(topic, raw=True)]
            assert got == [(t, d) for i, t, d in rows if i == topic_id]
            # (but the first message's first bytes, asked once: is each a zstd frame? no metadata says)
            fetches = [s for s in statements if "data" in s.replace("length(data)", "") and "substr(m.data" not in s]
            if topic == "/b":
                assert fetches and all("SELECT id, data" in s and "id IN (" in s for s in fetches), fetches
            else:
                assert fetches and all("group_concat(data" in s and "BETWEEN" in s for s in fetches), fetches


def test_an_index_that_counts_other_rows_than_the_table_is_said(tmp_path, monkeypatch):
    """Found by tools/fuzz_rosbag2 (seed 5, case 659: table pages swapped): SQLite scans fewer rows than
    its timestamp index counts, silently. Opening said the index's count; the read says what it found."""


    write_db3(tmp_path / "r.db3", sample_rows(30))
    totals = Db3.totals
    monkeypatch.setattr(Db3, "totals", lambda self: (lambda c, lo, hi: (c + 5, lo, hi))(*totals(self)))
    with fastbag.open(tmp_path / "r.db3") as bag:
        assert bag.message_count == 35
        with pytest.warns(FastbagWarning, match=r"r\.db3: the messages table is damaged: its timestamp index "
                                                r"counts 35 rows, the table yields 30"):
            got = list(bag.messages(raw=True))
        assert len(got) == bag.message_count == 30


def test_without_a_timestamp_index_opening_scans_the_rows(tmp_path):
    write_db3(tmp_path / "r.db3", sample_rows(30))
    con = sqlite3.connect(tmp_path / "r.db3")
    con.execute("DROP INDEX timestamp_idx")
    con.commit()
    con.close()
    with fastbag.open(tmp_path / "r.db3") as bag:
        assert bag._container._index is not None  # min/max would scan anyway: the scan builds the index
        assert bag.message_count == 30 and bag.start_time == 10**18


def test_definitions_folder_serves_types_the_bag_lacks(tmp_path):
    path = DATA / "db3" / "ros2__rosbag2__rosbag2_tests__resources__test_msgs_string"
    if not path.exists():
        pytest.skip(NO_DATA)
    (tmp_path / "test_msgs" / "msg").mkdir(parents=True)
    (tmp_path / "test_msgs" / "msg" / "Strings.msg").write_text("string string_value\nWStrings w\n")
    (tmp_path / "test_msgs" / "msg" / "WStrings.msg").write_text("wstring wstring_value\n")
    for folder in (tmp_path, tmp_path / "test_msgs"):  # a workspace of packages, or the package itself
        with open_quietly(path, definitions=folder) as bag:
            definition = bag.topics["/test_msg_strings"].connections[0].definition
        assert definition == ("string string_value\nWStrings w\n" + "=" * 80 + "\nMSG: test_msgs/WStrings\n"
                              "wstring wstring_value\n")


@pytest.mark.parametrize("compress", [False, True])
def test_decoding_goes_through_the_row_chunks(tmp_path, monkeypatch, compress):
    """Rows serialized by ROS1 rules (serialization_format ros1, as a converter writes them) decode with
    today's ROS1 layouts: read() and decoded messages() through many chunks, the way CDR will."""
    import struct

    from fastbag.rosbag2 import reader

    monkeypatch.setattr(reader, "CHUNK_BYTES", 300)
    rows = [(1 + k % 2, 5000 + k, struct.pack("<I", len(f"m{k}")) + f"m{k}".encode() if k % 2 == 0 else
             struct.pack("<i", -k)) for k in range(3000)]
    write_db3(tmp_path / "r_0.db3", rows, compress=compress)
    con = sqlite3.connect(tmp_path / "r_0.db3")
    con.execute("UPDATE topics SET serialization_format = 'ros1'")
    con.commit()
    con.close()
    write_metadata(tmp_path, ["r_0.db3"], mode="MESSAGE" if compress else "")
    with fastbag.open(tmp_path, workers=2) as bag:
        assert bag.chunk_count > 20
        strings, ints = bag.read("/a"), bag.read("/b")
        assert list(strings["data"]) == [f"m{k}" for k in range(0, 3000, 2)]
        assert ints["data"].tolist() == [-k for k in range(1, 3000, 2)]
        assert strings.time.tolist() == list(range(5000, 8000, 2))
        window = bag.read("/b", start=5101, end=5201)
        assert window["data"].tolist() == [-k for k in range(101, 201, 2)]
        assert [m.msg.data for m in bag.messages("/b")][:3] == [-1, -3, -5]


def test_file_compression_is_recognized_by_its_bytes(tmp_path):
    """metadata.yaml says FILE but the file was decompressed by hand (or the reverse, without a .zstd name)."""
    rows = write_db3(tmp_path / "r_0.db3", sample_rows(20))
    write_metadata(tmp_path, ["r_0.db3"], mode="FILE")
    with fastbag.open(tmp_path) as bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]
    packed = zstandard.ZstdCompressor().compress((tmp_path / "r_0.db3").read_bytes())
    (tmp_path / "r_0.db3").write_bytes(packed)
    write_metadata(tmp_path, ["r_0.db3"])
    with fastbag.open(tmp_path) as bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for r in rows]


def test_many_small_bombs_spend_the_chunk_budget(tmp_path):
    """Frames without a declared size, each within its own limit, together past the chunk's budget."""
    from fastbag.rosbag2 import compression

    frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(compression.MIN_LIMIT))
    assert zstandard.frame_content_size(frame) == -1
    write_db3(tmp_path / "m.db3", [(1, k, b"") for k in range(400)])
    con = sqlite3.connect(tmp_path / "m.db3")
    con.execute("UPDATE messages SET data = ?", (frame,))
    con.commit()
    con.close()
    write_metadata(tmp_path, ["m.db3"], mode="MESSAGE")
    with fastbag.open(tmp_path) as bag:
        with pytest.raises(BagFormatError, match=r"message row (\d+) does not decompress") as info:
            list(bag.messages(raw=True))
    # each frame alone is allowed; the rows before the budget ran out decompressed
    assert 100 < int(re.search(r"row (\d+)", str(info.value)).group(1)) < 400


def test_rows_whose_every_blob_is_null_are_left_out(tmp_path):
    """Found by tools/fuzz_rosbag2 (seed 14, case 10411): group_concat skips NULLs, so a column of NULLs
    came back empty beside a count of 20."""
    write_db3(tmp_path / "r.db3", sample_rows(20))
    con = sqlite3.connect(tmp_path / "r.db3")
    con.executescript("CREATE TABLE m2(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, data BLOB);"
                      "INSERT INTO m2 SELECT id, topic_id, timestamp, NULL FROM messages; DROP TABLE messages;"
                      "ALTER TABLE m2 RENAME TO messages;")
    con.commit()
    con.close()
    with pytest.warns(FastbagWarning, match=r"messages table is damaged.*0 rows are read, 20 malformed rows"):
        bag = fastbag.open(tmp_path / "r.db3")
    with bag:
        assert bag.message_count == 0


@pytest.mark.parametrize("split", [False, True], ids=["one-scan", "parallel-scan"])
@pytest.mark.parametrize("deleted", [(), (1,), (7, 8, 30), (50,)], ids=["consecutive", "first", "middle", "last"])
def test_row_ids_with_and_without_gaps_index_the_same_messages(tmp_path, monkeypatch, deleted, split):
    """Through SQLite: consecutive ids (what a recorder writes) are not read from the file: the index takes
    them from the ends of the table, and a large table is scanned in parts on the workers (here: parts of 4
    rows); ids with gaps (rows deleted) are read in one scan. Either way every message is where it was."""
    from fastbag.rosbag2 import sqlite

    monkeypatch.setattr(Db3, "_read_pages", lambda self, *args: None)


    if split:
        monkeypatch.setattr(sqlite, "SCAN_PART_ROWS", 4)
        monkeypatch.setattr(sqlite, "SCAN_WORKERS", 3)
        scanned = []
        monkeypatch.setattr(Db3, "_scan_range", lambda self, ids, real=Db3._scan_range: scanned.append(ids) or
                            real(self, ids))

    rows = write_db3(tmp_path / "r_0.db3", sample_rows())
    if deleted:
        con = sqlite3.connect(tmp_path / "r_0.db3")
        con.execute(f"DELETE FROM messages WHERE id IN ({','.join(map(str, deleted))})")
        con.commit()
        con.close()
    write_metadata(tmp_path, ["r_0.db3"])
    kept = [(k + 1, row) for k, row in enumerate(rows) if k + 1 not in deleted]
    db = Db3(str(tmp_path / "r_0.db3"))
    try:
        assert (db._id_run() is None) == (deleted not in ((), (1,), (50,)))  # a gap at either end is no gap
        found = db.rows()
        assert found.id.tolist() == [k for k, _ in kept]
        assert found.topic_id.tolist() == [r[0] for _, r in kept]
        assert found.timestamp.tolist() == [r[1] for _, r in kept]
        assert found.length.tolist() == [len(r[2]) for _, r in kept]
        if split:  # three parts covering the ids once each where they are one run, else one scan
            run = db._id_run()
            if run is None:
                assert scanned == []
            else:
                ranges = sorted(scanned)
                assert len(ranges) == 3 and ranges[0][0] == run[0] and ranges[-1][1] == run[1]
                assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:]))
    finally:
        db.close()
    with fastbag.open(tmp_path) as bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [r[2] for _, r in sorted(kept, key=lambda x: x[1][1])]
        assert bag.read("/b")["data"].tolist() == [int.from_bytes(r[2][4:], "little") for _, r in kept if r[0] == 2]


def test_compression_is_counted_in_storage_files(tmp_path):
    """bag.compression and fastbag info said 'sqlite3 [N/N chunks]' of an uncompressed recording (SQLite is not
    a compression, and its chunks are fastbag's batches of rows) and never zstd for FILE compression."""
    from fastbag.cli import format_info

    for name, want in [("MichaelGrupp__evo__test__data__tf_example", {"none": 1}),
                       ("ros2__rosbag2__rosbag2_tests__resources__compressed_bag", {"zstd": 1}),
                       ("ros2__rosbag2__rosbag2_tests__resources__reindex_test_bags__file_compression", {"zstd": 4})]:
        path = DATA / "db3" / name
        if not path.exists():
            pytest.skip(NO_DATA)
        with open_quietly(path) as bag:
            assert (bag.compression, bag.compression_unit) == (want, "files"), name
            (kind, count), = want.items()
            assert re.search(rf"compression:\s+{kind} \[{count}/{count} files(; [\d.]+%)?\]", format_info(bag))
            files = sorted(p for p in path.iterdir() if ".db3" in p.name and not p.name.endswith(("-shm", "-wal")))
            stored = sum(p.stat().st_size for p in files)
            assert bag.size == stored
            if all(p.suffix == ".zstd" for p in files):  # compressed whole: the files' sizes both ways
                import zstandard

                whole = sum(len(zstandard.ZstdDecompressor().stream_reader(p.read_bytes()).read()) for p in files)
                assert bag.compression_sizes == {"zstd": (stored, whole)}
                assert bag.get_compression_info() == ("zstd", whole, stored)
            else:  # the files as they are: rosbag's ratio of them is 100%, not a division by zero
                assert bag.compression_sizes == {"none": (stored, stored)}
                assert bag.get_compression_info() == ("none", stored, stored)
    write_db3(tmp_path / "r_0.db3", sample_rows(20), compress=True)
    write_db3(tmp_path / "r_1.db3", sample_rows(20, start=2 * 10**18), compress=True)
    write_metadata(tmp_path, ["r_0.db3", "r_1.db3"], mode="MESSAGE")
    with fastbag.open(tmp_path) as bag:  # compressed per message: no size is known before decompressing all
        assert bag.compression == {"zstd": 2} and len(bag.read("/a")) == 20
        assert bag.compression_sizes == {} and bag.get_compression_info() == ("zstd", 0, 0)


def test_a_folder_of_sqlite3_and_mcap_files_without_metadata_says_so():
    """The error said 'open the recording with fastbag.open', the call just made."""
    path = DATA / "mcap" / "ros2__rosbag2__rosbag2_cpp__test__rosbag2_cpp__bags"
    if not path.exists():
        pytest.skip(NO_DATA)
    with pytest.raises(fastbag.UnsupportedError, match=r"both sqlite3 \(\.db3\) and MCAP \(\.mcap\) storage files "
                                                       r"and no metadata.yaml.*open one of the files"):
        fastbag.open(path)
    for name in sorted(os.listdir(path)):  # each file alone opens
        with open_quietly(path / name) as bag:
            assert bag.message_count >= 0


def test_transient_local_topics_are_latched():
    """Offered QoS was parsed and dropped: a transient_local topic (ROS 2's latched) showed latching=False, so
    converting to ROS1 with the Writer lost it. Checked against the QoS text itself."""
    from fastbag.container import transient_local

    seen = set()
    for name in ("ANYbotics__grid_map__grid_map_demos__data__grid_map_bag",
                 "ANYbotics__grid_map__grid_map_ros__resource__double_chatter",
                 "ros2__rosbag2__rosbag2_py__test__resources__sqlite3__talker"):
        path = DATA / "db3" / name
        if not path.exists():
            pytest.skip(NO_DATA)
        with open_quietly(path) as bag:
            for connection in bag.connections:
                import sqlite3

                db = next(p for p in sorted(path.iterdir()) if p.suffix == ".db3")
                con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
                qos, = con.execute("SELECT offered_qos_profiles FROM topics WHERE name = ?",
                                   (connection.topic,)).fetchone()
                con.close()
                durable = "durability: 1" in qos or "durability: transient_local" in qos
                assert connection.latching == durable, (name, connection.topic)
                seen.add(durable)
    assert seen == {True, False}
    assert transient_local("- durability: transient_local\n  history: keep_last\n")
    assert not transient_local("- durability: volatile\n") and not transient_local("durability: [unclosed")
    # a damaged page's text, decoded with surrogateescape: YAML cannot even encode it (fuzz seed 20261124)
    assert not transient_local(b"- durability: 1\n  \xe0x: 2\n".decode("utf-8", "surrogateescape"))


def test_qos_and_latching_do_not_depend_on_the_storage():
    """rosbag2 writes a topic's offered QoS into an MCAP channel's metadata as into the sqlite3 topics table;
    fastbag read only a ROS1 "latching" key from MCAP, so the same recording's transient_local topics were
    latched stored as sqlite3 and not as MCAP. Checked against the mcap package's channel metadata."""
    from mcap.reader import make_reader

    pairs = [("ros2__rosbag2__rosbag2_tests__resources__mcap__cdr_test",
              "ros2__rosbag2__rosbag2_tests__resources__sqlite3__cdr_test"),
             ("ros2__rosbag2__rosbag2_py__test__resources__mcap__talker",
              "ros2__rosbag2__rosbag2_py__test__resources__sqlite3__talker")]
    seen = set()
    for mcap_name, db3_name in pairs:
        mcap_dir, db3_dir = DATA / "mcap" / mcap_name, DATA / "db3" / db3_name
        if not (mcap_dir.exists() and db3_dir.exists()):
            pytest.skip(NO_DATA)
        mcap_file = next(p for p in sorted(mcap_dir.iterdir()) if p.suffix == ".mcap")
        with mcap_file.open("rb") as f:
            stored = {c.topic: c.metadata for c in make_reader(f).get_summary().channels.values()}
        with open_quietly(mcap_dir) as as_mcap, open_quietly(db3_dir) as as_db3:
            assert sorted(as_mcap.topics) == sorted(as_db3.topics)
            for topic in as_mcap.topics:
                ours, theirs = as_mcap.topics[topic].connections[0], as_db3.topics[topic].connections[0]
                assert ours.offered_qos_profiles == stored[topic]["offered_qos_profiles"]
                assert ours.type_description_hash == stored[topic].get("topic_type_hash", "")
                durable = [p["durability"] for p in ours.qos]
                assert durable and all(isinstance(d, int) for d in durable)
                assert ours.latching == theirs.latching == (1 in durable), topic
                assert [p["durability"] for p in theirs.qos] == durable
                assert ours.qos[0]["history"] == theirs.qos[0]["history"] and ours.qos[0]["depth"] == theirs.qos[0]["depth"]
                seen.add(ours.latching)
    assert seen == {True, False}


def test_a_field_named_like_an_array_attribute_reads_by_attribute():
    """rcl_interfaces/ParameterEvent has a field ``node``: ``events.node`` returned the array's layout node
    (an attribute it had) instead of the node names. Checked against rosbags' decoding of the same rows."""
    path = DATA / "mcap" / "ros2__rosbag2__rosbag2_cpp__test__rosbag2_cpp__bags" / "topics_and_services.db3"
    if not path.exists():
        pytest.skip(NO_DATA)
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    with open_quietly(path) as bag:
        events = bag.read("/parameter_events")
        raw = [bytes(m.data) for m in bag.messages("/parameter_events", raw=True)]
        first = next(iter(bag.messages("/parameter_events")))
    theirs = [store.deserialize_cdr(data, "rcl_interfaces/msg/ParameterEvent") for data in raw]
    assert len(theirs) == len(events) == 7
    assert events.node.tolist() == [m.node for m in theirs] == events["node"].tolist()
    assert events.stamp.sec.tolist() == [m.stamp.sec for m in theirs]
    assert [len(p) for p in events.new_parameters] == [len(m.new_parameters) for m in theirs]
    assert first.msg.node == theirs[0].node
    assert "node" in dir(events) and events.fields[:2] == ["stamp", "node"]


def test_definitions_as_another_recording_stores_them():
    """The composed text an Iron+ recording (here its MCAP twin) stores for test_msgs/msg/Arrays, passed as
    definitions= to the Humble .db3 that stores none, decodes it: the same values as the MCAP twin's."""
    iron = DATA / "mcap" / "ros2__rosbag2__rosbag2_tests__resources__mcap__cdr_test"
    humble = DATA / "db3" / "ros2__rosbag2__rosbag2_tests__resources__cdr_test"
    if not (iron.exists() and humble.exists()):
        pytest.skip(NO_DATA)
    with open_quietly(iron) as bag:
        text = bag.topics["/array_topic"].definition
        expected = [m.msg.to_dict(plain=True) for m in bag.messages("/array_topic")]
    assert "MSG: test_msgs/BasicTypes" in text
    with open_quietly(humble, definitions={"test_msgs/msg/Arrays": text}) as bag:
        assert [m.msg.to_dict(plain=True) for m in bag.messages("/array_topic")] == expected and len(expected) == 4
    with pytest.warns(FastbagWarning, match="Arrays uses test_msgs/BasicTypes, which no definition describes"):
        fastbag.open(humble, definitions={"test_msgs/msg/Arrays": text.split("=" * 80)[0]}).close()


def test_a_lone_db3_of_zstd_messages_without_metadata_reads_them(tmp_path):
    """A .db3 compressed per message with no metadata table (rosbag2 before it stored one, Foxy/Galactic) was
    read as plain CDR: every read failed on "representation id 0x28b5". Each blob starting with zstd's frame
    magic (no CDR message can) says how they are stored."""
    rows = write_db3(tmp_path / "alone.db3", sample_rows(20), compress=True)
    with fastbag.open(tmp_path / "alone.db3") as bag:
        assert bag.compression == {"zstd": 1}
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [d for _, _, d in rows]
        assert bag.read("/b")["data"].tolist() == [int.from_bytes(d[4:], "little") for t, _, d in rows if t == 2]
        assert [m.msg.data for m in bag.messages("/a")] == [f"m{k}" for k in range(0, 20, 2)]
    plain = write_db3(tmp_path / "plain.db3", sample_rows(20))  # uncompressed, no metadata either: as it is
    with fastbag.open(tmp_path / "plain.db3") as bag:
        assert bag.compression == {"none": 1}
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [d for _, _, d in plain]


def test_topics_taking_turns_are_iterated_a_chunk_at_a_time(tmp_path, monkeypatch):
    """A chunk of a .db3 is a batch of one topic's rows: iterated together, topics taking turns cut the runs
    into single messages, each decoded alone (a whole-bag loop of a real recording 24-38x slower than rosbags,
    QA). Each topic is iterated by itself and merged in read order: the same messages, far fewer decodes."""
    from fastbag.msg import arrays

    rows = write_db3(tmp_path / "r.db3", sample_rows(400))
    built = []
    real = arrays.TopicBuilder.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(arrays.TopicBuilder, "__init__", counted)
    with fastbag.open(tmp_path / "r.db3") as bag:
        merged = [(m.topic, m.time, bytes(m.data), m.msg.data) for m in bag.messages()]
        assert len(built) <= 4 and bag._container.chunks_of_one_connection
        raw = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
        monkeypatch.setattr(type(bag._container), "chunks_of_one_connection", False)
        built.clear()
        together = [(m.topic, m.time, bytes(m.data), m.msg.data) for m in bag.messages()]
        assert len(built) == 400  # (the runs of one message each)
    assert merged == together and [m[:3] for m in merged] == raw
    expected = sorted(((t, k), d) for k, (_, t, d) in enumerate(rows))  # by timestamp, ties by id
    assert [m[2] for m in merged] == [d for _, d in expected]
    assert merged[1][3] == int.from_bytes(rows[1][2][4:], "little") and merged[0][3] == "m0"


def test_many_topics_taking_turns_are_still_iterated_a_chunk_at_a_time(tmp_path, monkeypatch):
    """Above 64 topics the merge gave up and every message was decoded alone (100 interleaved topics: 179 us
    a message, 17x rosbags' time, QA). The bound is now the bytes the streams hold (each its largest chunk),
    not their number; past it they still take turns in one stream, and read the same."""
    from fastbag import bag as bag_module
    from fastbag.msg import arrays

    topics = [(k + 1, f"/t{k:03d}", "std_msgs/msg/Int32") for k in range(100)]
    rows = write_db3(tmp_path / "r.db3", [(1 + k % 100, 10**18 + k, b"\0\1\0\0" + k.to_bytes(4, "little"))
                                          for k in range(3000)], topics=topics)
    built = []
    real = arrays.TopicBuilder.__init__
    monkeypatch.setattr(arrays.TopicBuilder, "__init__", lambda self, *a, **k: built.append(1) or real(self, *a, **k))
    for merged_bytes, builders in ((bag_module.MERGED_BYTES, 100), (1000, 3000)):
        monkeypatch.setattr(bag_module, "MERGED_BYTES", merged_bytes)
        built.clear()
        with fastbag.open(tmp_path / "r.db3") as bag:
            assert [(m.topic, m.msg.data) for m in bag.messages()] == [(f"/t{k % 100:03d}", k) for k in range(3000)]
        assert len(built) == builders  # a builder per topic's chunk, or per message taking turns
    assert len(rows) == 3000


def _split_db3_of_two_definitions(root: Path, texts: list[str]) -> Path:
    """A split sqlite3 recording (no metadata.yaml): /v of one type, each file storing its own text for it;
    value a = k, b = -k in message k, serialized in each file's field order."""
    import struct

    from rosbags.rosbag2 import StoragePlugin, Writer

    folder = root / "split"
    folder.mkdir()
    for k, text in enumerate(texts):
        written = root / f"part{k}"
        with Writer(written, version=9, storage_plugin=StoragePlugin.SQLITE3) as writer:
            conn = writer.add_connection("/v", "my_pkg/msg/Pair", msgdef=text, rihs01="RIHS01_" + str(k) * 64)
            for i in range(10 * k, 10 * k + 10):
                a_first = text.strip().startswith("float64 a")
                writer.write(conn, 10**18 + i * 10**7,
                             b"\0\1\0\0" + struct.pack("<dd", *((i, -i) if a_first else (-i, i))))
        shutil.copy(next(written.glob("*.db3")), folder / f"r_{k}.db3")
    return folder


def test_split_db3_files_defining_a_type_otherwise_decode_with_their_own(tmp_path):
    """Each file of a split recording stores a definition; a later file whose text differs (fields swapped)
    was decoded with the first file's text (wrong values, then a warning). Its topics are now connections of
    their own with its text: messages() decodes every file right, read() says the topic has two formats,
    and nothing is warned. Texts that differ only in comments are one definition."""
    folder = _split_db3_of_two_definitions(tmp_path, ["float64 a\nfloat64 b\n", "float64 b\nfloat64 a\n"])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with fastbag.open(folder) as bag:
            decoded = [(m.msg.a, m.msg.b) for m in bag.messages()]
            assert decoded == [(float(i), float(-i)) for i in range(20)]
            conns = bag.topics["/v"].connections
            assert [c.definition.split()[1] for c in conns] == ["a", "b"]
            assert [c.msgcount for c in conns] == [10, 10] and bag.topics["/v"].message_count == 20
            with pytest.raises(DecodeError, match="2 different message formats .*my_pkg/msg/Pair, defined 2 ways"):
                bag.read("/v")
            # a window of one file's messages reads with that file's definition
            later = bag.read("/v", start=10**18 + 10 * 10**7)
            assert later["a"].tolist() == list(range(10, 20)) and later["b"].tolist() == list(range(-10, -20, -1))
            assert bag.read("/v", end=10**18 + 10 * 10**7)["a"].tolist() == list(range(10))
    assert [str(w.message) for w in said if "no metadata.yaml" not in str(w.message)] == []
    with fastbag.open(folder / "r_1.db3") as alone:
        assert alone.read("/v")["a"].tolist() == list(range(10, 20))
    other = tmp_path / "comments"
    other.mkdir()
    folder = _split_db3_of_two_definitions(other, ["float64 a\nfloat64 b\n", "float64 a  # m\n\nfloat64 b\n"])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with fastbag.open(folder) as bag:
            assert bag.read("/v")["a"].tolist() == list(range(20))
    assert [str(w.message) for w in said if "defines" in str(w.message)] == []
    assert any("no metadata.yaml" in str(w.message) for w in said)  # (the one thing said of it)


def test_a_scratch_folder_that_cannot_be_removed_now_is_removed_later(tmp_path, monkeypatch):
    """A reader that failed to open for want of file descriptors could not remove its decompressed copy
    then (rmtree fails alike, in silence), and the copy stayed in /tmp for good (QA: 19 MB an open). It is
    removed at the next removal, or when the process exits."""
    from fastbag.io import scratch

    class Owner:
        pass

    real = shutil.rmtree
    monkeypatch.setattr(scratch.shutil, "rmtree", lambda path, ignore_errors=False: None)  # (no descriptors)
    owner = Owner()
    stuck = scratch.ScratchFolder(owner)
    (Path(stuck.path) / "copy.db3").write_bytes(b"x" * 100)
    stuck.remove()
    assert os.path.isdir(stuck.path) and stuck.path in scratch._LEFT
    monkeypatch.setattr(scratch.shutil, "rmtree", real)
    other = scratch.ScratchFolder(owner)
    other.remove()
    assert not os.path.exists(stuck.path) and not os.path.exists(other.path) and not scratch._LEFT


def test_a_database_closed_under_a_query_says_closed_not_damaged(tmp_path):
    """close() from another thread under a read of a .db3.zstd removed its copy and connections while a
    query opened one: 'sqlite3 storage cannot be read (messages table): unable to open database file', a
    BagFormatError (1 in 30 rounds, QA). A closed database says it was closed, as every closed bag does."""
    folder = tmp_path / "rec"
    rosbags_recording(folder, "sqlite3", "FILE")
    bag = fastbag.open(folder)
    db = bag._container.files[0]
    bag.close()
    with pytest.raises(ValueError, match="the bag was closed during the read"):
        raise db._error(sqlite3.OperationalError("unable to open database file"), "messages table")


_OPEN_UNTIL_OUT_OF_DESCRIPTORS = """
import errno, resource, sys, warnings
import fastbag
warnings.simplefilter("error", fastbag.FastbagWarning)  # a file left out as damaged would fail here
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), int(sys.argv[2])))
held = []
try:
    for _ in range(100):
        held.append(fastbag.open(sys.argv[1]))
        assert held[-1].message_count == int(sys.argv[3]), held[-1].problems
except OSError as exc:
    print(len(held), exc.errno == errno.EMFILE, exc.filename)
"""


@pytest.mark.parametrize("limit", [40, 44, 47])
def test_split_sqlite3_files_out_of_descriptors_are_an_os_error_not_files_left_out(tmp_path, limit):
    """Each split file holds a SQLite connection (a descriptor). Out of descriptors, SQLite says only "unable to
    open database file": the later files were left out of the recording as damaged, with a warning. The open
    is now the OSError (EMFILE) it is, naming the file."""
    import subprocess
    import sys

    names = [f"r_{k}.db3" for k in range(30)]
    for name in names:
        write_db3(tmp_path / name, sample_rows(4))
    write_metadata(tmp_path, names)
    out = subprocess.run([sys.executable, "-c", _OPEN_UNTIL_OUT_OF_DESCRIPTORS, str(tmp_path), str(limit),
                          str(4 * len(names))], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    held, emfile, named = out.stdout.split()
    assert emfile == "True" and Path(named).parent == tmp_path and Path(named).name in names + ["metadata.yaml"]


_OPEN_WITH_A_FILE_SIZE_LIMIT = """
import errno, resource, sys
import fastbag
from fastbag.rosbag2 import compression
compression.IN_MEMORY_BYTES = 0  # (every decompressed file to the temporary folder)
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.RLIM_INFINITY))  # (Python ignores SIGXFSZ: EFBIG)
try:
    fastbag.open(sys.argv[1])
except OSError as exc:
    print(exc.errno == errno.EFBIG, isinstance(exc, fastbag.FastbagError), exc.filename.startswith(sys.argv[2]),
          sys.argv[1] in str(exc), "TMPDIR" in str(exc))
"""


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_temporary_folder_without_room_is_an_os_error_naming_both_files(tmp_path, storage):
    """A decompressed copy the temporary folder cannot take (full, a quota, a file size limit): a bare OSError
    naming neither file (".mcap.zstd"), or "storage file cannot be read", a BagFormatError calling a sound
    recording damaged (".db3.zstd"). Now the OSError names the copy, the recording and TMPDIR; nothing stays."""
    import subprocess
    import sys

    folder, scratch = tmp_path / "rec", tmp_path / "scratch"
    rosbags_recording(folder, storage, "FILE")
    scratch.mkdir()
    out = subprocess.run([sys.executable, "-c", _OPEN_WITH_A_FILE_SIZE_LIMIT, str(folder), str(scratch)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(scratch)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False", "True", "True", "True"]
    assert list(scratch.iterdir()) == []


_HOLD_A_COMPRESSED_RECORDING = """
import sys, time
import fastbag
bag = fastbag.open(sys.argv[1])
bag.read("/imu")
print(bag._container._scratch.path if sys.argv[2] == "mcap" else bag._container.files[0]._scratch.path, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_killed_process_decompressed_copy_is_swept_by_the_next_and_a_live_ones_kept(tmp_path, storage):
    """A process killed (SIGKILL: the OOM killer; SIGTERM: a scheduler) runs no exit hook: its decompressed
    recording stayed in /tmp for good (QA found 5 GB of them). The next folder made now removes it, seeing
    its owner's lock free; a folder whose process lives stays."""
    import signal
    import subprocess
    import sys

    from fastbag.io import scratch

    folder, tmp = tmp_path / "rec", tmp_path / "tmp"
    rosbags_recording(folder, storage, "FILE", count=20)
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    holders = [subprocess.Popen([sys.executable, "-c", _HOLD_A_COMPRESSED_RECORDING, str(folder), storage],
                                stdout=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    try:
        held = [Path(p.stdout.readline().strip()) for p in holders]
        assert all(h.parent == tmp and h.is_dir() for h in held) and len(set(held)) == 3
        holders[0].send_signal(signal.SIGKILL)
        holders[1].send_signal(signal.SIGTERM)
        holders[0].wait(60), holders[1].wait(60)
        assert held[0].is_dir() and held[1].is_dir()  # (nothing ran in them to remove their folders)
        (tmp / "fastbag-made-by-an-older-version").mkdir()  # no .owner: not ours to judge, left alone
        holders.append(subprocess.Popen([sys.executable, "-c", _HOLD_A_COMPRESSED_RECORDING, str(folder), storage],
                                        stdout=subprocess.PIPE, text=True, env=env))
        held.append(Path(holders[3].stdout.readline().strip()))  # its folder made, the temporary folder swept
        assert not held[0].exists() and not held[1].exists() and held[2].is_dir() and held[3].is_dir()
        assert (tmp / "fastbag-made-by-an-older-version").is_dir()
        assert scratch.sweep(str(tmp)) == []  # (the live ones' locks are held)
    finally:
        for p in holders:
            p.kill()
            p.wait(60)
    assert sorted(scratch.sweep(str(tmp))) == sorted(map(str, held[2:]))


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_temporary_folder_that_cannot_be_made_is_an_os_error_naming_it(tmp_path, monkeypatch, storage):
    """TMPDIR read-only (or not a folder): a .db3.zstd was "storage file cannot be read", a BagFormatError
    calling a sound recording damaged; a .mcap.zstd a bare error naming no recording. Now both are the
    OSError they are (TemporaryFolderError), naming the folder and TMPDIR."""
    import tempfile

    from fastbag.io.scratch import TemporaryFolderError

    folder = tmp_path / "rec"
    rosbags_recording(folder, storage, "FILE")
    not_a_folder = tmp_path / "tmp"
    not_a_folder.write_bytes(b"")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))
    with pytest.raises(TemporaryFolderError) as raised:
        fastbag.open(folder)
    assert not isinstance(raised.value, fastbag.FastbagError) and isinstance(raised.value, OSError)
    assert str(not_a_folder) in str(raised.value) and "TMPDIR" in str(raised.value)


def test_sqlite_errors_read_alike_where_python_gives_no_error_code(tmp_path, monkeypatch):
    """Python 3.10's sqlite3 has neither SQLITE_CANTOPEN nor an error's sqlite_errorcode: comparing with the
    constant raised AttributeError for every damaged .db3 there (review). The message tells it instead."""
    from fastbag.rosbag2.sqlite import _cannot_open

    class Coded(sqlite3.OperationalError):
        sqlite_errorcode = 14

    assert _cannot_open(Coded("unable to open database file"))
    assert not _cannot_open(sqlite3.DatabaseError("database disk image is malformed"))
    monkeypatch.delattr(sqlite3.OperationalError, "sqlite_errorcode", raising=False)
    assert _cannot_open(sqlite3.OperationalError("unable to open database file"))
    path = tmp_path / "r_0.db3"
    write_db3(path, sample_rows(200))
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema's page damaged
    path.write_bytes(bytes(data))
    monkeypatch.delattr(sqlite3, "SQLITE_CANTOPEN", raising=False)  # (as on Python 3.10)
    with pytest.raises(fastbag.BagFormatError, match="database disk image is malformed"):
        fastbag.open(path)


_KILLED_RECORDER = """
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA wal_autocheckpoint=0")
con.executescript(sys.argv[2])
con.execute("INSERT INTO topics VALUES (1, '/a', 'std_msgs/msg/String', 'cdr', '')")
text = lambda t: b"\\0\\1\\0\\0" + (len(t) + 1).to_bytes(4, "little") + t.encode() + b"\\0"
con.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (1, ?, ?)",
                [(k * 10**6, text(str(k))) for k in range(20)])
con.commit()
os._exit(0)  # killed: its -wal and -shm stay
"""


def test_a_dataset_reopens_a_killed_recorders_database_though_reading_writes_its_shm(tmp_path):
    """A .db3 left in WAL mode with its -shm is read through that -shm, which SQLite writes at each open: the
    dataset's check of a reopened bag's files took that for a changed recording and refused it (review)."""
    import subprocess
    import sys

    folders = []
    for name in ("rec0", "rec1"):
        folder = tmp_path / name
        folder.mkdir()
        subprocess.run([sys.executable, "-c", _KILLED_RECORDER, str(folder / "r_0.db3"), SCHEMA], check=True)
        assert sorted(p.name for p in folder.iterdir()) == ["r_0.db3", "r_0.db3-shm", "r_0.db3-wal"]
        folders.append(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)  # (the write-ahead log is said)
        ds = fastbag.SyncedDataset(folders, {"a": "/a"}, anchor="a", max_open_bags=1)
        first, last = ds[0], ds[len(ds) - 1]  # rec0, then rec1 (rec0 closed)
        assert ds[0]["time"] == first["time"] and len(ds) == 40 and last["time"] == 19 * 10**6
    ds.close()


def test_a_write_ahead_log_that_cannot_be_read_is_the_recordings_error_not_the_temporary_folders(tmp_path):
    """A database in WAL mode without its -shm is read from a private copy. An error reading the user's -wal
    was said as the temporary folder's ("writing a temporary copy", naming the copy: review); it is the
    storage file's, naming the -wal."""
    folder = tmp_path / "rec"
    folder.mkdir()
    write_db3(folder / "r_0.db3", sample_rows(10))
    (folder / "r_0.db3-wal").mkdir()  # (stands for a log that cannot be read)
    write_metadata(folder, ["r_0.db3"])
    with pytest.raises(fastbag.BagFormatError) as raised:
        fastbag.open(folder)
    assert f"({folder / 'r_0.db3-wal'})" in str(raised.value) and "temporary" not in str(raised.value)


def test_sqlite_out_of_memory_on_a_damaged_length_is_damage_not_a_memory_error(tmp_path, monkeypatch):
    """SQLite meeting a damaged record length it believes reports NOMEM, which Python raises as MemoryError:
    it escaped the index's scan and its row-by-row reading (review, a .db3 with 3,000 bytes of 0xff at one
    offset). It is damage now: the rows SQLite reads past it are read, and the problem is said. SQLite's
    NOMEM is emulated at rows 20 to 39 (their damage is not reproducible byte for byte)."""
    import fastbag.rosbag2.sqlite as sqlite_module

    def nomem_at_damage(rows):
        for row in rows:
            if 20 <= row[0] < 40:
                raise MemoryError
            yield row

    class Nomem(sqlite3.Connection):
        def execute(self, sql, parameters=()):
            if "length(data)" in sql and "group_concat" in sql:
                raise MemoryError
            found = super().execute(sql, parameters)
            if "length(data)" not in sql:
                return found
            rows = nomem_at_damage(found)
            return type("Rows", (), {"__iter__": lambda _: rows, "fetchall": lambda _: list(rows)})()

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite_module.sqlite3, "connect", lambda *a, **k: connect(*a, factory=Nomem, **k))
    monkeypatch.setattr(Db3, "_read_pages", lambda self: None)  # (the scan through SQLite, not the pages)
    rows = write_db3(tmp_path / "r.db3", sample_rows(100))
    write_metadata(tmp_path, ["r.db3"])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with fastbag.open(tmp_path) as bag:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
            problems = bag.problems
    named = [({1: "/a", 2: "/b"}[t], ts, d) for t, ts, d in rows]  # row id k + 1 is rows[k]
    assert got[:19] == named[:19] and got[-49:] == named[-49:]  # (resumed at a probe past the damage: id 51)
    assert not set(got) & set(named[19:39]) and got == [m for m in named if m in set(got)]
    assert any("MemoryError (a damaged length SQLite believed)" in p for p in problems), problems
