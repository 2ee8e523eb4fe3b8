"""CDR topics through the container-neutral Bag: what the MCAP and rosbag2 containers will plug into.

A minimal container written here (records ``u32 connection | u64 time | u32
length | CDR message`` in one uncompressed chunk) hands ``Bag`` connections
with ``encoding="cdr"`` and ``ros2msg`` definitions; ``fastbag.open`` then
``read`` and ``messages`` must give what rosbags deserializes, in both byte
orders, with no md5sum warning (CDR connections carry none).
"""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

import fastbag
import fastbag.bag
from fastbag.container import Connection, Container, build_index
from fastbag.errors import DecodeError
from fastbag.io.chunks import Chunk
from fastbag.io.source import Source

typesys = pytest.importorskip("rosbags.typesys", reason="rosbags serializes the messages")
from cdr_oracle import assert_same_cdr  # noqa: E402

RECORD = struct.Struct("<IQI")


class CdrTestContainer(Container):
    """Records ``u32 connection | u64 time | u32 length | data`` in one uncompressed chunk."""

    format = "CDR test container"

    def __init__(self, path: str, connections: list[Connection]) -> None:
        self.source = Source(path)
        data = bytes(self.source.array)
        offsets, conns, times, pos = [], [], [], 0
        while pos < len(data):
            conn, time, length = RECORD.unpack_from(data, pos)
            offsets.append(pos), conns.append(conn), times.append(time)
            pos += RECORD.size + length
        n = len(offsets)
        self.index = build_index("test", connections, [Chunk(0, "none", len(data), 0, len(data))],
                                 np.array(conns, np.int64), np.zeros(n, np.int32), np.array(times, np.int64),
                                 np.array(offsets, np.int64))

    def payload_spans(self, buf, at, lo, hi, chunk, conn, time, *, kernel=False):
        lengths = np.array([RECORD.unpack_from(buf, int(a))[2] for a in at], dtype=np.int64)
        return at + RECORD.size, lengths


@pytest.fixture(scope="module")
def store():
    return typesys.get_typestore(typesys.Stores.LATEST)


def _imu(store, rng, k):
    T = store.types
    v3 = T["geometry_msgs/msg/Vector3"]
    return T["sensor_msgs/msg/Imu"](
        T["std_msgs/msg/Header"](T["builtin_interfaces/msg/Time"](k, k * 7), "imu" * (k % 3)),
        T["geometry_msgs/msg/Quaternion"](*rng.random(4)), rng.random(9), v3(*rng.random(3)), rng.random(9),
        v3(*rng.random(3)), rng.random(9))


def test_read_and_messages_of_cdr_topics(tmp_path, store, monkeypatch) -> None:
    rng = np.random.default_rng(1)
    imu_text, _ = store.generate_msgdef("sensor_msgs/msg/Imu", ros_version=2)
    str_text, _ = store.generate_msgdef("std_msgs/msg/String", ros_version=2)
    connections = [Connection(0, "/imu", "sensor_msgs/msg/Imu", "", imu_text, encoding="cdr",
                              schema_encoding="ros2msg"),
                   Connection(1, "/imu_be", "sensor_msgs/msg/Imu", "", imu_text, encoding="cdr",
                              schema_encoding="ros2msg"),
                   Connection(2, "/chatter", "std_msgs/msg/String", "", str_text, encoding="cdr",
                              schema_encoding="ros2msg")]
    n = 9000  # more than two parallel parts: the big-endian topic's byte order is settled across workers
    messages, out = {0: [], 1: [], 2: []}, bytearray()
    for k in range(n):
        conn = k % 3
        msg = _imu(store, rng, k) if conn < 2 else store.types["std_msgs/msg/String"](f"hello {k}")
        typename = "std_msgs/msg/String" if conn == 2 else "sensor_msgs/msg/Imu"
        raw = bytes(store.serialize_cdr(msg, typename, little_endian=conn != 1))
        messages[conn].append(raw)
        out += RECORD.pack(conn, 1_000 + k, len(raw)) + raw
    path = tmp_path / "cdr.test"
    path.write_bytes(bytes(out))
    monkeypatch.setattr(fastbag.bag, "open_container", lambda p, **options: CdrTestContainer(p, connections))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no md5sum warning for CDR connections
        with fastbag.open(path) as bag:
            for conn, topic, typename in ((0, "/imu", "sensor_msgs/msg/Imu"), (1, "/imu_be", "sensor_msgs/msg/Imu"),
                                          (2, "/chatter", "std_msgs/msg/String")):
                arr = bag.read(topic)
                assert len(arr) == n // 3 and arr.time[0] == 1_000 + conn
                for i in (0, 1, 2, len(arr) - 1):
                    assert_same_cdr(arr[i], store.deserialize_cdr(messages[conn][i], typename), f"{topic}[{i}]")
                if conn < 2:
                    expected = [store.deserialize_cdr(m, typename).orientation.w for m in messages[conn]]
                    assert arr["orientation"]["w"].tolist() == expected
                    assert arr["orientation_covariance"].shape == (n // 3, 9)
            assert bag.read("/imu_be")["orientation"].dtype["w"].byteorder == ">"
            got = [(m.topic, m.msg.data) for m in bag.messages(topics=["/chatter"])][:3]
            assert got == [("/chatter", "hello 2"), ("/chatter", "hello 5"), ("/chatter", "hello 8")]
            first = next(iter(bag.messages(topics=["/imu"])))
            assert first.msg.header.frame_id == "" and first.msg.linear_acceleration.x == \
                store.deserialize_cdr(messages[0][0], "sensor_msgs/msg/Imu").linear_acceleration.x


def test_a_topic_in_two_byte_orders_is_a_decode_error(tmp_path, store, monkeypatch) -> None:
    text, _ = store.generate_msgdef("std_msgs/msg/String", ros_version=2)
    connections = [Connection(0, "/s", "std_msgs/msg/String", "", text, encoding="cdr", schema_encoding="ros2msg")]
    String = store.types["std_msgs/msg/String"]
    raws = [bytes(store.serialize_cdr(String(f"m{k}"), "std_msgs/msg/String", little_endian=k != 3))
            for k in range(5)]
    path = tmp_path / "mixed.test"
    path.write_bytes(b"".join(RECORD.pack(0, k, len(r)) + r for k, r in enumerate(raws)))
    monkeypatch.setattr(fastbag.bag, "open_container", lambda p, **options: CdrTestContainer(p, connections))
    with fastbag.open(path) as bag:
        with pytest.raises(DecodeError, match=r"CDR_BE, unlike most of the topic's messages \(CDR_LE\)") as info:
            bag.read("/s")
        assert info.value.index == 3 and info.value.topic == "/s"
        # A message loop decodes each, without a warning: only the one array cannot hold both byte orders
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = [m.msg.data for m in bag.messages()]
        assert got == [store.deserialize_cdr(r, "std_msgs/msg/String").data for r in raws] == \
            [f"m{k}" for k in range(5)]


def test_fixed_structs_by_attribute_in_ros1_too(tmp_path) -> None:
    """``m.msg.linear_acceleration.x``, as the README writes it: fixed structs of a record are NumPy records."""
    from fastbag.tooling import synth

    path = tmp_path / "imu.bag"
    synth.write_bag(path, (synth.Stream("/imu", synth.IMU, 200, synth.imu),), seconds=0.1)
    with fastbag.open(path) as bag:
        arr = bag.read("/imu")
        first = next(iter(bag.messages(topics=["/imu"])))
        assert first.msg.linear_acceleration.x == arr["linear_acceleration"]["x"][0]
        assert arr[1].header.stamp.secs == arr["header"]["stamp"]["secs"][1]
        assert first.msg.to_dict()["orientation"]["w"] == arr["orientation"]["w"][0]
