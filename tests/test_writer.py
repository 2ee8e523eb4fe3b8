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
  read in rosbags exactly as the originals do (connections and messages).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rosbags.highlevel import AnyReader
from rosbags.rosbag1 import Reader
from rosbags.typesys.msg import normalize_msgtype

import fastbag
from fastbag.tooling import synth
from conftest import data_file
from rosbags_fixtures import (
    TYPESTORE, ConnSpec, assert_same_as_rosbags, conn_spec, fastbag_read, open_quietly, payload_for,
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
