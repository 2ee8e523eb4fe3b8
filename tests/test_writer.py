"""Bags written by ``fastbag.Writer`` read back identically in rosbags and in fastbag.

Proves:

- for compression none/bz2/lz4, several topics and types, a chunk size forcing
  many chunks, times written out of order, a latching connection with a callerid:
  rosbags reads the same connections (topic, type, md5sum, definition,
  callerid, latching) and the same ``(topic, time, bytes)`` sequence as the spec
  (time, connection, write order), whole, per topic and windowed; fastbag agrees;
- a hypothesis property: random small bags written by fastbag read the same in
  rosbags and fastbag, and as the spec says;
- the synthetic demo bag (``fastbag.tooling.synth.write_demo_bag``) deserializes in
  rosbags' ``AnyReader`` from the definitions the bag embeds (which checks every
  md5sum), its Imu messages are byte for byte what ``fastbag.tooling.synth.imu``
  regenerates from the seed and decode equal to the Noetic definition's reading,
  and every topic's values are physically what the generator makes;
- a round trip: real bags copied with ``Writer`` from ``bag.messages(raw=True)``
  read in rosbags exactly as the originals do (connections and messages);
- the Writer refuses the path of a bag open for reading (it would truncate the
  file under the mapping: SIGBUS), sorts each chunk's index entries by time (as
  classic rosbag needs), refuses float times, and closes itself, with a
  warning, when garbage-collected unclosed.
"""

from __future__ import annotations

import contextlib
import gc
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rosbags.highlevel import AnyReader
from rosbags.rosbag1 import Reader
from rosbags.typesys.msg import normalize_msgtype

import fastbag
from fastbag.io.source import Source, is_mapped
from fastbag.tooling import synth
from conftest import data_file
from rosbags_fixtures import (
    TYPESTORE, ConnSpec, _records, assert_same_as_rosbags, conn_spec, fastbag_read, open_quietly, payload_for,
    rosbags_read, scan_file, spec_order, write_with_fastbag)

T0 = 1_650_000_000 * 10**9
CONNS = [
    conn_spec("/imu", "sensor_msgs/Imu"),
    conn_spec("/chatter", "std_msgs/String", callerid="/talker", latching=True),
    conn_spec("/count", "std_msgs/Int32", callerid="/counter"),
    conn_spec("/cmd_vel", "geometry_msgs/Twist"),
    conn_spec("/chatter", "std_msgs/Int32", callerid="/other_talker"),  # one topic, two types
]


def _spec_messages():
    """~700 messages; blocks written in shuffled order, so chunks overlap in time; ties across topics."""
    rng = np.random.default_rng(7)
    msgs = []
    for k in range(400):
        t = T0 + k * 5_000_000
        msgs.append((0, t, payload_for("sensor_msgs/Imu", k, t, rng)))
        if k % 2 == 0:
            msgs.append((1, t, payload_for("std_msgs/String", k, t, rng)))  # tie with /imu
        if k % 3 == 0:
            msgs.append((2, t + 1, payload_for("std_msgs/Int32", k, t, rng)))
        if k % 5 == 0:
            msgs.append((3, t + 2, payload_for("geometry_msgs/Twist", k, t, rng)))
            msgs.append((4, t, payload_for("std_msgs/Int32", -k, t, rng)))
    blocks = [msgs[i:i + 40] for i in range(0, len(msgs), 40)]
    return [m for b in rng.permutation(len(blocks)) for m in blocks[b]]


SPEC = _spec_messages()


@pytest.fixture(scope="module", params=["none", "bz2", "lz4"])
def written(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("fastbag_written") / f"spec-{request.param}.bag"
    write_with_fastbag(path, CONNS, SPEC, compression=request.param, chunk_size=4096)
    return path, request.param


def test_connections_read_back_in_rosbags(written):
    path, _ = written
    with Reader(path) as reader:
        got = [(c.id, c.topic, c.msgtype, c.digest, c.msgdef.data, c.ext.callerid, c.ext.latching)
               for c in reader.connections]
    expected = [(i, c.topic, normalize_msgtype(c.msgtype), c.md5sum, c.msgdef, c.callerid,
                 1 if c.latching else None) for i, c in enumerate(CONNS)]
    assert got == expected
    assert expected[1][1:] == ("/chatter", "std_msgs/msg/String", CONNS[1].md5sum, CONNS[1].msgdef, "/talker", 1)


def test_messages_read_back_in_rosbags_and_fastbag(written):
    path, compression = written
    expected = spec_order(CONNS, SPEC)
    with Reader(path) as reader:
        assert rosbags_read(reader) == expected
        assert len(reader.chunk_infos) >= 20
    assert assert_same_as_rosbags(path) == expected
    layout = scan_file(path)
    assert {c.compression for c in layout.chunks} == {compression}


def test_fastbag_reads_its_own_metadata(written):
    path, compression = written
    with open_quietly(path) as bag:
        assert [(c.id, c.topic, c.msgtype, c.md5sum, c.definition, c.callerid, c.latching) for c in bag.connections] == [
            (i, c.topic, c.msgtype, c.md5sum, c.msgdef, c.callerid, c.latching) for i, c in enumerate(CONNS)]
        assert bag.topics["/chatter"].message_count == sum(1 for c, _, _ in SPEC if c in (1, 4))
        assert bag.start_time == min(t for _, t, _ in SPEC)
        assert bag.end_time == max(t for _, t, _ in SPEC)
        assert list(bag.compression) == [compression]
        assert not bag.recovered


def test_connection_record_precedes_first_message_in_chunks(written):
    """The writer also puts each connection record in the first chunk that uses it (so a copy without
    index can be recovered): checked by walking the file."""
    path, _ = written
    layout = scan_file(path)
    first_use = {}
    for m in layout.messages:
        first_use.setdefault(m.conn, m)
    assert len(first_use) == len(CONNS)
    for conn, m in first_use.items():
        chunk = layout.chunks[m.chunk]
        _, conn_end = layout.connections[conn]
        if chunk.compression == "none":
            assert conn_end <= chunk.data_start + m.offset, conn  # right before the message, in the chunk
        else:
            assert conn_end <= chunk.data_end, conn  # in that chunk (or an earlier one), not only in the index


def test_empty_and_single_message_bags(tmp_path):
    empty = tmp_path / "empty.bag"
    with fastbag.Writer(empty) as w:
        w.add_connection("/x", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
    with open_quietly(empty) as bag, Reader(empty) as reader:
        assert bag.message_count == reader.message_count == 0
        assert bag.start_time is None and list(bag.messages(raw=True)) == []
        assert [c.topic for c in bag.connections] == ["/x"]
    one = tmp_path / "one.bag"
    with fastbag.Writer(one, compression="lz4") as w:
        c = w.add_connection("/x", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        w.write(c, 5, b"")  # time 5 ns, empty payload
    with Reader(one) as reader:
        assert rosbags_read(reader) == [("/x", 5, b"")]
    assert assert_same_as_rosbags(one) == [("/x", 5, b"")]


def _lz4_frame_descriptors(path: Path) -> set[bytes]:
    """The (FLG, BD) bytes of every lz4 chunk's frame in a bag."""
    with open_quietly(path) as bag:
        return {bytes(bag._source.array[c.data_offset + 4:c.data_offset + 6]) for c in bag._index.chunks
                if c.compression == "lz4"}


def test_lz4_chunks_are_framed_as_roslz4_frames_them(tmp_path):
    """Benchmarks and tests read what rosbag writes: independent 1 MB blocks with a content
    checksum (FLG 0x64, BD 0x60), as in the real lz4 bags; not python-lz4's default framing."""
    real = _lz4_frame_descriptors(data_file("ros1v2/cruise-automation__rosbag.js__fixtures__example-lz4.bag"))
    assert real == {b"\x64\x60"}
    path = tmp_path / "lz4.bag"
    synth.write_demo_bag(path, seconds=1, compression="lz4")
    assert _lz4_frame_descriptors(path) == real
    assert assert_same_as_rosbags(path)  # and rosbags reads them (python-lz4 checks the content checksum)


def test_writer_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="compression"):
        fastbag.Writer(tmp_path / "a.bag", compression="zstd")
    other = fastbag.Writer(tmp_path / "c.bag")
    foreign = other.add_connection("/y", "std_msgs/String")
    other.close()
    with fastbag.Writer(tmp_path / "b.bag") as w:
        with pytest.raises(fastbag.FastbagError, match="/y"):
            w.write(foreign, 0, b"")
    with pytest.raises(ValueError, match="closed"):
        w.write(foreign, 0, b"")


def test_writer_refuses_ros2_types(tmp_path):
    """A ROS 2 recording's raw messages (CDR) fed to the ROS1 writer gave a bag no reader decodes, and fastbag's
    error on reading it then pointed at definitions=: the type name says what the bytes are, at once."""
    with fastbag.Writer(tmp_path / "a.bag") as w:
        with pytest.raises(ValueError, match="sensor_msgs/msg/Imu.* ROS 2 type name"):
            w.add_connection("/imu", "sensor_msgs/msg/Imu", "", "*")
        w.add_connection("/tf", "tf2_msgs/TFMessage")  # ROS1 names stay accepted
        assert [c.msgtype for c in w.connections] == ["tf2_msgs/TFMessage"]


@pytest.mark.parametrize("bad_time", [-1, 1 << 62], ids=["negative", "past-u32-seconds"])
def test_rejected_write_leaves_writer_usable(tmp_path, bad_time):
    path = tmp_path / "w.bag"
    with fastbag.Writer(path) as w:
        c = w.add_connection("/x", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        w.write(c, 10, b"\x01\x00\x00\x00a")
        with pytest.raises(ValueError, match="ROS1 time"):
            w.write(c, bad_time, b"")
        w.write(c, 20, b"\x01\x00\x00\x00b")
    with Reader(path) as reader:  # closed cleanly, indexed, holding exactly the accepted messages
        assert rosbags_read(reader) == [("/x", 10, b"\x01\x00\x00\x00a"), ("/x", 20, b"\x01\x00\x00\x00b")]


# -- property: random small bags written by fastbag --------------------------------------

KINDS = [conn_spec("/x", t) for t in ("std_msgs/String", "std_msgs/Int32", "sensor_msgs/Imu")]


@st.composite
def random_specs(draw):
    conns = []
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(KINDS))
        conns.append(ConnSpec(draw(st.sampled_from(["/a", "/b", "c"])), kind.msgtype, kind.msgdef, kind.md5sum,
                              callerid=draw(st.sampled_from([None, f"/n{i}"])), latching=draw(st.booleans())))
    base = draw(st.integers(0, 4_000_000_000)) * 10**9 + draw(st.integers(0, 10**9 - 1))
    step = draw(st.sampled_from([1, 10**6, 10**9 - 1]))
    msgs = draw(st.lists(st.tuples(st.integers(0, len(conns) - 1), st.integers(0, 10), st.binary(max_size=200)),
                         min_size=1, max_size=50))
    compression = draw(st.sampled_from(["none", "bz2", "lz4"]))
    chunk_size = draw(st.sampled_from([1, 100, 1000, 1 << 20]))
    return conns, [(c, base + k * step, d) for c, k, d in msgs], compression, chunk_size


@settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_specs())
def test_random_fastbag_bags_read_in_rosbags(spec):
    conns, msgs, compression, chunk_size = spec
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "random.bag"
        write_with_fastbag(path, conns, msgs, compression=compression, chunk_size=chunk_size)
        expected = spec_order(conns, msgs)
        with Reader(path) as reader:
            assert rosbags_read(reader) == expected
            assert [(c.topic, c.digest, c.ext.callerid, c.ext.latching) for c in reader.connections] == [
                (c.topic, c.md5sum, c.callerid, 1 if c.latching else None) for c in conns]
        with open_quietly(path) as bag:
            assert fastbag_read(bag) == expected


# -- the demo bag, deserialized by rosbags ---------------------------------------------------

DEMO_SECONDS, DEMO_SEED, DEMO_POINTS = 0.5, 11, 1000


@pytest.fixture(scope="module")
def demo_bag(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "demo.bag"
    synth.write_demo_bag(path, seconds=DEMO_SECONDS, compression="bz2", seed=DEMO_SEED, points=DEMO_POINTS)
    return path


def _decoded(path: Path) -> dict[str, list]:
    out: dict[str, list] = {}
    with AnyReader([path]) as reader:  # registers the types from the definitions in the bag
        for conn, time, raw in reader.messages():
            out.setdefault(conn.topic, []).append((time, bytes(raw), reader.deserialize(raw, conn.msgtype)))
    return out


def test_demo_bag_deserializes_in_rosbags(demo_bag):
    decoded = _decoded(demo_bag)
    assert {t: len(v) for t, v in decoded.items()} == {"/imu": 100, "/tf": 50, "/points": 5, "/camera/image_raw": 5}
    for topic in ("/imu", "/points", "/camera/image_raw"):  # stamped types: stamp = receive time, seq counts
        items = decoded[topic]
        assert [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, _, m in items] == [t for t, _, _ in items]
        assert [m.header.seq for _, _, m in items] == list(range(len(items)))
    for _, _, msg in decoded["/imu"]:
        assert msg.header.frame_id == "imu_link"
        q = msg.orientation
        assert abs(q.x ** 2 + q.y ** 2 + q.z ** 2 + q.w ** 2 - 1) < 1e-9
        assert abs(msg.linear_acceleration.z - 9.81) < 1.0
        assert np.array_equal(msg.linear_acceleration_covariance, np.eye(3).ravel() * 1e-4)
    for time, _, msg in decoded["/tf"]:
        assert [(t.header.frame_id, t.child_frame_id) for t in msg.transforms] == [("odom", "base_link"),
                                                                                  ("base_link", "lidar")]
        assert all(t.header.stamp.sec * 10**9 + t.header.stamp.nanosec == time for t in msg.transforms)
        assert all(t.transform.rotation.w == 1.0 for t in msg.transforms)
    for _, _, msg in decoded["/points"]:
        width = DEMO_POINTS // 32
        assert (msg.height, msg.width, msg.point_step) == (32, width, 22)
        assert [f.name for f in msg.fields] == ["x", "y", "z", "intensity", "ring", "time"]
        assert msg.data.size == 32 * width * 22 == msg.row_step * msg.height
        points = np.frombuffer(msg.data.tobytes(), dtype=synth.LIDAR_POINT)
        assert np.array_equal(points["ring"], np.repeat(np.arange(32, dtype=np.uint16), width))
        distance = np.sqrt(points["x"].astype(float) ** 2 + points["y"] ** 2 + points["z"] ** 2)
        assert abs(distance.mean() - 10) < 0.1
    for _, _, msg in decoded["/camera/image_raw"]:
        assert (msg.height, msg.width, msg.encoding, msg.step) == (480, 640, "rgb8", 1920)
        assert msg.data.size == 480 * 640 * 3


def test_demo_imu_equals_regenerated_synth(demo_bag):
    imu = _decoded(demo_bag)["/imu"]
    times = np.array([t for t, _, _ in imu], dtype=np.int64)
    # synth.write_bag, per stream in order (Imu first): draws the receive-time jitter, then generates the
    # messages from the same generator. Regenerate both from the seed.
    rng = np.random.default_rng(DEMO_SEED)
    jitter = rng.integers(0, 200_000, times.size)
    start = times[0] - jitter[0]
    assert np.array_equal(times, start + (np.arange(times.size) * (1e9 / 200)).astype(np.int64) + jitter)
    regenerated = synth.imu(times, rng)
    assert [raw for _, raw, _ in imu] == regenerated
    # The bag's embedded definition decodes them as rosbags' own Noetic Imu does.
    for (_, raw, from_bag), again in zip(imu, regenerated):
        reference = TYPESTORE.deserialize_ros1(again, "sensor_msgs/msg/Imu")
        for name in ("linear_acceleration", "angular_velocity", "orientation"):
            a, b = getattr(from_bag, name), getattr(reference, name)
            assert [getattr(a, k) for k in "xyz"] == [getattr(b, k) for k in "xyz"]
        assert np.array_equal(from_bag.orientation_covariance, reference.orientation_covariance)


def test_demo_bag_is_the_same_in_fastbag(demo_bag):
    with Reader(demo_bag) as reader:
        expected = rosbags_read(reader)
        callerids = [c.ext.callerid for c in reader.connections]
    with open_quietly(demo_bag) as bag:
        assert fastbag_read(bag) == expected
        assert bag.topics["/imu"].msgtype == synth.IMU.name and bag.topics["/imu"].md5sum == synth.IMU.md5sum
        assert [c.callerid for c in bag.connections] == callerids
        assert len(set(callerids)) == 1 and callerids[0]  # one recording node, named


# -- round trip: copy real bags through Writer ------------------------------------------------

ROUND_TRIP = [
    "ros1v2/cruise-automation__rosbag.js__fixtures__example.bag",         # 9 topics on 12 connections
    "ros1v2/zaki0929__bagfiles__2018__feb13__col.bag",                    # /tf on two types
    "ros1v2/ros2__rosbag2__rosbag2_bag_v2_plugins__resources__test_bag_multiple_connections.bag",
    "ros1v2/cruise-automation__rosbag.js__fixtures__example-unsorted-chunks.bag",
    "ros1v2/MichaelGrupp__evo__test__data__tf_example.bag",               # lz4, latched /tf_static
]


@pytest.mark.parametrize("compression", ["none", "lz4", "bz2"])
@pytest.mark.parametrize("relative", ROUND_TRIP, ids=lambda r: r.split("__")[-1])
def test_round_trip_copy_of_real_bag(tmp_path, relative, compression):
    original = data_file(relative)
    copy = tmp_path / "copy.bag"
    with open_quietly(original) as bag, fastbag.Writer(copy, compression=compression, chunk_size=64 * 1024) as w:
        handles = {c.id: w.add_connection(c.topic, c.msgtype, c.definition, c.md5sum, callerid=c.callerid,
                                          latching=c.latching) for c in bag.connections}
        for m in bag.messages(raw=True):
            w.write(handles[m.connection.id], m.time, m.data)
    with Reader(original) as a, Reader(copy) as b:
        assert [(c.topic, c.msgtype, c.digest, c.msgdef.data, c.ext.callerid, bool(c.ext.latching))
                for c in a.connections] == [(c.topic, c.msgtype, c.digest, c.msgdef.data, c.ext.callerid,
                                             bool(c.ext.latching)) for c in b.connections]
        expected = rosbags_read(a)
        assert rosbags_read(b) == expected
        assert {t: i.msgcount for t, i in a.topics.items()} == {t: i.msgcount for t, i in b.topics.items()}
    assert assert_same_as_rosbags(copy) == expected


# -- writing over an open bag, time order, time types, unclosed writers -------------------

STRING = ("std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")


def _string(text: str) -> bytes:
    return struct.pack("<I", len(text)) + text.encode()


def test_writer_refuses_the_path_of_an_open_bag(tmp_path):
    """Writing a bag in place while it is open for reading truncated it under the reader's mapping: the
    process died of SIGBUS and the input was lost. Run in a subprocess so that a regression cannot kill
    the test run; the file must come out unchanged, also when reached through a hard link."""
    path = tmp_path / "in.bag"
    with fastbag.Writer(path, chunk_size=200) as w:
        c = w.add_connection("/s", *STRING)
        for i in range(100):
            w.write(c, T0 + i, _string(f"m{i}"))
    os.link(path, tmp_path / "link.bag")
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import fastbag
        for target in ({str(path)!r}, {str(tmp_path / "link.bag")!r}):
            with fastbag.open({str(path)!r}) as bag:
                try:
                    with fastbag.Writer(target) as w:      # crop in place
                        c = w.add_connection("/s", "std_msgs/String")
                        for m in bag.messages(raw=True):
                            w.write(c, m.time, m.data)
                except ValueError as exc:
                    assert "rename" in str(exc) and "open for reading" in str(exc), exc
                    print("refused")
                print(sum(1 for _ in bag.messages(raw=True)))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode, result.stdout.split()) == (0, ["refused", "100", "refused", "100"]), result.stderr
    assert path.read_bytes() == before


def test_writer_may_write_a_bag_no_longer_mapped(tmp_path):
    """Once the bag is closed (or collected unclosed), and no view of its file remains, the path is free."""
    path = tmp_path / "in.bag"
    with fastbag.Writer(path) as w:
        w.write(w.add_connection("/s", *STRING), T0, _string("a"))
    with fastbag.open(path) as bag:
        assert is_mapped(path) and len(bag.read("/s")) == 1
    assert not is_mapped(path)
    bag = fastbag.open(path)
    assert is_mapped(path)
    del bag
    gc.collect()
    assert not is_mapped(path)
    source = Source(path)
    view = source.view(0, 13, "magic")
    source.close()
    assert is_mapped(path)  # the view still reads the mapping: truncating the file would kill the reader of it
    with pytest.raises(ValueError, match="open for reading"):
        fastbag.Writer(path)
    assert bytes(view) == b"#ROSBAG V2.0\n"
    del view
    assert not is_mapped(path)
    with fastbag.Writer(path) as w:  # crop in place, done right: read, close, then write
        w.write(w.add_connection("/s", *STRING), T0 + 1, _string("b"))
    with open_quietly(path) as bag:
        assert bag.message_count == 1 and bag.start_time == T0 + 1
    assert not is_mapped(tmp_path / "missing.bag")


def _index_entries(path: Path) -> list[tuple[int, list[int]]]:
    """(connection, times) of each index data record, in file order, parsed from the file."""
    buf = path.read_bytes()
    layout = scan_file(path)
    out = []
    for _, fields, start, end in _records(buf, layout.header_end, layout.index_pos):
        if fields["op"] == b"\x04":
            entries = struct.iter_unpack("<III", buf[start:end])
            out.append((struct.unpack("<I", fields["conn"])[0], [s * 10**9 + n for s, n, _ in entries]))
    return out


def test_index_entries_are_in_time_order(tmp_path):
    """Times written out of order (merged recordings, header stamps as times): each chunk's index data
    entries are sorted by time, stably, as rosbag writes them; classic rosbag, which bisects them as they
    are, then yields time order and answers time windows right."""
    path = tmp_path / "shuffled.bag"
    times = [5, 3, 4, 1, 2, 3]
    with fastbag.Writer(path) as w:
        a, b = w.add_connection("/a", *STRING), w.add_connection("/b", *STRING)
        for k, t in enumerate(times):
            w.write(a, t * 10**9, _string(f"a{t}.{k}"))
            w.write(b, (10 - t) * 10**9, _string(f"b{t}"))
    assert _index_entries(path) == [(0, sorted(t * 10**9 for t in times)),
                                    (1, sorted((10 - t) * 10**9 for t in times))]
    with open_quietly(path) as bag:
        assert (bag.start_time, bag.end_time) == (10**9, 9 * 10**9)
        assert [m.data for m in bag.messages(raw=True, topics="/a")][2:4] == [_string("a3.1"), _string("a3.5")]
    rosbag = pytest.importorskip("rosbag")
    genpy = pytest.importorskip("genpy")
    with rosbag.Bag(str(path)) as classic:
        got = [(topic, ts.to_nsec(), bytes(raw[1])) for topic, raw, ts in classic.read_messages(raw=True)]
        assert [t for _, t, _ in got] == sorted(t for _, t, _ in got)
        assert [d for topic, _, d in got if topic == "/a"] == [_string(x) for x in ("a1.3", "a2.4", "a3.1", "a3.5",
                                                                                    "a4.2", "a5.0")]
        assert [ts.secs for _, _, ts in classic.read_messages(topics="/a", raw=True, start_time=genpy.Time(3))] \
            == [3, 3, 4, 5]
        assert [ts.secs for _, _, ts in classic.read_messages(topics="/a", raw=True, end_time=genpy.Time(3))] \
            == [1, 2, 3, 3]


def test_write_time_must_be_int_nanoseconds(tmp_path):
    """A float (seconds, as ``stamp.to_sec()`` gives them) was stored as nanoseconds, 1.7 s after 1970:
    refused, as the readers refuse it; ints of any kind and times with ``to_nsec()`` are taken."""
    path = tmp_path / "t.bag"

    class Stamp:
        def to_nsec(self) -> int:
            return T0 + 3

    with fastbag.Writer(path) as w:
        c = w.add_connection("/s", *STRING)
        for bad in (1_700_000_000.25, np.float64(1.7e18), None, "1700000000", True):
            with pytest.raises(TypeError, match="int nanoseconds"):
                w.write(c, bad, _string("x"))
        with pytest.raises(TypeError, match=r"int\(seconds \* 1e9\)"):
            w.write(c, 1_700_000_000.25, _string("x"))
        w.write(c, T0, _string("int"))
        w.write(c, np.int64(T0 + 1), _string("numpy"))
        w.write(c, np.uint64(T0 + 2), _string("numpy unsigned"))
        w.write(c, Stamp(), _string("to_nsec"))
    with open_quietly(path) as bag:
        assert [(m.time, m.data) for m in bag.messages(raw=True)] == [
            (T0, _string("int")), (T0 + 1, _string("numpy")), (T0 + 2, _string("numpy unsigned")),
            (T0 + 3, _string("to_nsec"))]


def _write_unclosed(path: Path) -> None:
    w = fastbag.Writer(path, chunk_size=1000)
    c = w.add_connection("/s", *STRING)
    for i in range(100):
        w.write(c, T0 + i, _string("abc"))


@pytest.mark.parametrize("options", ["compression='lz4'", "compression='bz2'",
                                     "compression='lz4', aes_key=bytes(range(16))"])
def test_a_writer_left_open_at_exit_closes_whatever_it_compresses_with(tmp_path, options):
    """An lz4 Writer still open when the interpreter exited failed to close (its compressor was imported only
    then, and importing no longer works at exit): the bag kept no index and no message for any reader (QA).
    (Its one chunk is still open at exit: nothing was compressed before.)"""
    if "aes_key" in options:
        pytest.importorskip("cryptography", reason="encrypting needs the cryptography package")
    exiting = tmp_path / "exit.bag"
    script = textwrap.dedent(f"""
        import fastbag
        w = fastbag.Writer({str(exiting)!r}, {options})
        c = w.add_connection("/s", *{STRING!r})
        for i in range(100):
            w.write(c, {T0} + i, b"\\x03\\x00\\x00\\x00abc")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and "was never closed; it was closed when garbage-collected." in result.stderr, \
        result.stderr
    kwargs = {"aes_key": bytes(range(16))} if "aes_key" in options else {}
    with fastbag.open(exiting, **kwargs) as bag:
        assert bag.message_count == 100 and not bag.problems
    with AnyReader([exiting]) if not kwargs else contextlib.nullcontext() as reader:
        assert reader is None or sum(1 for _ in reader.messages()) == 100


def test_connection_fields_as_bytes_are_text_and_other_types_are_refused(tmp_path):
    """Fields copied from a reader's ``Connection.header`` are bytes: add_connection took them, and close()
    then failed on them, leaving a bag without index (QA). Bytes are decoded; other types refused at once."""
    path = tmp_path / "bytes.bag"
    with fastbag.Writer(path) as w:
        c = w.add_connection(b"/s", b"std_msgs/String", STRING[1].encode(), STRING[2].encode(), callerid=b"/node")
        w.add_connection(b"/quiet", b"std_msgs/String", STRING[1].encode(), STRING[2].encode())  # no message
        w.write(c, T0, _string("abc"))
        for bad in ({"topic": None}, {"md5sum": 5}):
            args = {"topic": "/x", "msgtype": STRING[0], "definition": STRING[1], "md5sum": STRING[2], **bad}
            with pytest.raises(TypeError, match=f"{next(iter(bad))} is text \\(str\\), not"):
                w.add_connection(**args)
        with pytest.raises(ValueError, match="md5sum is 32 lowercase hex digits"):
            w.add_connection("/x", STRING[0], STRING[1], "not-an-md5sum")
    with AnyReader([path]) as reader:
        assert [(c.topic, c.msgtype, c.msgcount) for c in reader.connections] == [
            ("/s", "std_msgs/msg/String", 1), ("/quiet", "std_msgs/msg/String", 0)]
    with fastbag.open(path) as bag:
        assert bag.read("/s")["data"].tolist() == ["abc"] and bag.topics["/s"].connections[0].callerid == "/node"


def test_a_definition_and_md5sum_that_disagree_or_are_missing_are_said_when_written(tmp_path):
    """The Writer wrote a wrong md5sum, or none, without a word: rosbag warns of such a bag and rosbags' AnyReader
    refuses it ("hash mismatch"); fastbag said so only when reading it back (QA)."""
    with fastbag.Writer(tmp_path / "md5.bag") as w:
        with pytest.warns(fastbag.FastbagWarning, match=r"std_msgs/String: md5sum 0{32} is not its definition's "
                          r"\(992ce8a1687cec8c8bd883ec73ca41d1\)"):
            w.add_connection("/a", STRING[0], STRING[1], "0" * 32)
        with pytest.warns(fastbag.FastbagWarning, match="std_msgs/String: no definition and md5sum given"):
            w.add_connection("/b", STRING[0])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            w.add_connection("/c", *STRING)  # right: nothing to say


def test_write_says_what_it_takes(tmp_path):
    """Common mistakes met errors that said nothing of what to pass (QA): rosbag's write(topic, msg, t), the
    message object of a loop, a decoded message, a str."""
    source = tmp_path / "source.bag"
    with fastbag.Writer(source) as w:
        c = w.add_connection("/s", *STRING)
        w.write(c, T0, _string("abc"))
    with fastbag.open(source) as bag, fastbag.Writer(tmp_path / "out.bag") as w:
        m = next(bag.messages(raw=False))
        c = w.add_connection("/s", *STRING)
        cases = [((("/s", m.msg, T0)), r"connection is what add_connection returned, not str '/s' \(rosbag's "
                                         r"write\(topic, msg, t\) order\)"),
                 ((c, T0, m), "write m.data, not the message m"),
                 ((c, T0, m.msg), "not a decoded std_msgs/String: write m.data of bag.messages"),
                 ((c, T0, "abc"), "serialized bytes, not str"),
                 ((c, T0, 42), "serialized bytes, not int")]
        for args, said in cases:
            with pytest.raises(TypeError, match=said):
                w.write(*args)
        w.write(c, T0, m.data)  # the right one
    with fastbag.open(tmp_path / "out.bag") as copy:
        assert copy.read("/s")["data"].tolist() == ["abc"]


def test_a_close_that_fails_still_closes_the_file(tmp_path, monkeypatch):
    """A full disk at close(): the error was raised, but the file stayed open, and its collection later said
    the Writer 'was never closed' (QA). The file is closed; what is complete is recovered on reading."""
    path = tmp_path / "full.bag"
    w = fastbag.Writer(path, chunk_size=1000)
    c = w.add_connection("/s", *STRING)
    for i in range(100):
        w.write(c, T0 + i, _string("abc"))
    real = w._file.write

    def full(data):
        if len(data) > 100:  # the last chunk
            raise OSError(28, "No space left on device")
        return real(data)

    monkeypatch.setattr(w._file, "write", full)
    with pytest.raises(OSError, match="No space left"):
        w.close()
    assert w._file.closed
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "never closed" when collected
        del w
        gc.collect()
    with pytest.warns(fastbag.FastbagWarning, match="rebuilt the index by scanning"), fastbag.open(path) as bag:
        assert 0 < bag.message_count < 100


def test_unclosed_writer_is_closed_with_a_warning(tmp_path):
    """A Writer garbage-collected unclosed lost its open chunk, and the reader then said "nothing lost":
    it is closed then (last chunk and index written), with a FastbagWarning naming the file; also at exit."""
    path = tmp_path / "unclosed.bag"
    with pytest.warns(fastbag.FastbagWarning, match="unclosed.bag was never closed"):
        _write_unclosed(path)  # collected on return
    with open_quietly(path) as bag:
        assert bag.message_count == 100 and not bag.problems
    with pytest.raises(ValueError):  # a Writer that never opened its file has nothing to close: no warning
        fastbag.Writer(tmp_path / "bad.bag", compression="zstd")
    exiting = tmp_path / "exit.bag"  # a global still open when the interpreter exits
    script = textwrap.dedent(f"""
        import fastbag
        w = fastbag.Writer({str(exiting)!r}, chunk_size=1000)
        c = w.add_connection("/s", "std_msgs/String")
        for i in range(100):
            w.write(c, {T0} + i, b"\\x03\\x00\\x00\\x00abc")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and "FastbagWarning" in result.stderr and "exit.bag" in result.stderr, result.stderr
    with open_quietly(exiting) as bag:
        assert bag.message_count == 100 and not bag.problems


def test_an_empty_type_needs_no_definition_to_be_said(tmp_path):
    """std_msgs/Empty has no fields: its definition is empty and its md5sum EMPTY_MD5. Nothing to warn of."""
    from fastbag.msg.msgdef import EMPTY_MD5

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastbag.Writer(tmp_path / "empty.bag") as w:
            w.add_connection("/e", "std_msgs/Empty", "", EMPTY_MD5)
            w.add_connection("/c", "std_msgs/Empty", "# a comment only\n", EMPTY_MD5)


# -- what a QA pass of the Writer found (each failed before its fix) -------------------------------------------

INT32 = ("std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")


def test_a_buffer_of_wider_items_is_written_as_its_bytes(tmp_path):
    """A NumPy int32 array (or a memoryview of one) is 4 bytes a value: its item count was stored as the record's
    length and its bytes written after, so readers cut the message to 1 byte and a scan misread the chunk."""
    path = tmp_path / "wide.bag"
    payloads = [np.array([7], dtype=np.int32), memoryview(np.array([8], dtype=np.int32)),
                np.arange(6, dtype=np.int32)[::2]]  # (not contiguous: copied in order)
    with fastbag.Writer(path) as w:
        conn = w.add_connection("/i", *INT32)
        for k, payload in enumerate(payloads):
            w.write(conn, 10**9 + k, payload)
    with fastbag.open(path) as bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == [np.asarray(p).tobytes() for p in payloads]
        assert bag.take("/i", [0, 1])["data"].tolist() == [7, 8]


def test_latching_is_written_as_given(tmp_path):
    """``latching=b"0"`` (a reader's header value, as a copy passes it) wrote a latched connection; it is kept as
    ``0`` now, ``"1"`` and True latch, False writes no field, and anything else is refused."""
    path = tmp_path / "latch.bag"
    with fastbag.Writer(path) as w:
        for k, latching in enumerate((b"0", "1", True, False)):
            w.add_connection(f"/t{k}", *INT32, latching=latching)
        with pytest.raises(TypeError, match="latching is a bool"):
            w.add_connection("/bad", *INT32, latching="yes")
        for c in w.connections:
            w.write(c, 10**9, struct.pack("<i", c.id))
    with fastbag.open(path) as bag:
        headers = {c.topic: c.header.get("latching") for c in bag.connections}
        assert headers == {"/t0": b"0", "/t1": b"1", "/t2": b"1", "/t3": None}
        assert [c.latching for c in bag.connections] == [False, True, True, False]


def test_text_a_bag_cannot_hold_is_refused_where_it_is_given(tmp_path):
    """A lone surrogate in a topic was taken, and close() then failed writing the index: a bag without one,
    which rosbag and rosbags refuse. An empty topic or type, which rosbag's writer refuses and rosbags cannot
    open, is refused too."""
    path = tmp_path / "text.bag"
    with fastbag.Writer(path) as w:
        good = w.add_connection("/good", *INT32)
        w.write(good, 10**9, struct.pack("<i", 1))
        for topic, callerid in (("/bad\ud800", None), ("/ok", "/node\udfff")):
            with pytest.raises(ValueError, match="which is no text a bag can hold"):
                w.add_connection(topic, *INT32, callerid=callerid)
        for topic, msgtype in (("", "std_msgs/Int32"), ("/t", "")):
            with pytest.raises(ValueError, match="needs a topic and a message type"):
                w.add_connection(topic, msgtype, INT32[1], INT32[2])
    with fastbag.open(path) as bag:
        assert not bag.recovered and bag.message_count == 1


def test_bad_keys_and_chunk_sizes_are_refused(tmp_path):
    """``aes_key=16`` encrypted with bytes(16), a key of zeros; a str key met "string argument without an
    encoding"; a chunk_size of text met a comparison error, and True or 0.5 were taken."""
    for key, error, said in ((16, TypeError, "aes_key is 16 bytes, not int"),
                             ("00" * 16, TypeError, "bytes.fromhex"), (b"short", ValueError, "not 5")):
        with pytest.raises(error, match=said):
            fastbag.Writer(tmp_path / "k.bag", aes_key=key)
    for size in ("768k", None, True, 0.5):
        with pytest.raises(TypeError, match="chunk_size is a number of bytes"):
            fastbag.Writer(tmp_path / "c.bag", chunk_size=size)


def test_a_chunk_is_closed_before_its_size_passes_a_u32(tmp_path, monkeypatch):
    """A chunk's size is a u32: with a chunk_size past 4 GiB, close() met struct.error and every message was lost.
    (The limit made small here, to test it without 4 GiB.)"""
    from fastbag.ros1 import writer as writer_module

    monkeypatch.setattr(writer_module, "U32_MAX", 400)
    path = tmp_path / "u32.bag"
    with fastbag.Writer(path, chunk_size=1 << 40) as w:
        conn = w.add_connection("/i", *INT32)
        for k in range(40):
            w.write(conn, 10**9 + k, struct.pack("<i", k))
        with pytest.raises(ValueError, match="does not fit a ROS1 bag"):
            w.write(conn, 2 * 10**9, bytes(500))
    with fastbag.open(path) as bag:
        assert bag.chunk_count > 1 and int(bag._container.chunks.size.max()) <= 400
        assert bag.read("/i")["data"].tolist() == list(range(40))


def test_a_definition_that_does_not_parse_is_said(tmp_path):
    """A type's text without its MSG: sections (the common slip) was taken silently, and no reader decoded its
    messages."""
    with fastbag.Writer(tmp_path / "d.bag") as w:
        with pytest.warns(fastbag.FastbagWarning, match=r"sensor_msgs/Imu: its definition does not parse"):
            w.add_connection("/imu", "sensor_msgs/Imu", "std_msgs/Header header\nfloat64 x\n",
                             "6a62c6daae103f4ff57a132d6f95cec2")
