"""Decoded values equal rosbags', field by field and bit for bit, on real and generated bags.

For every topic of every bag in ``../shared/data/ros1v2`` that rosbags can
deserialize, ``Bag.read`` and decoded ``Bag.messages`` give the same value as
rosbags for every field of every message (floats compared by their bytes).
Where rosbags fails, the result is proved another way:

- ``roslib/Header`` (2010): rosbags does not know the type; its wire format is
  std_msgs/Header's, so rosbags decodes the same bytes once the definition
  says ``std_msgs/Header``, and that is the oracle;
- non-UTF-8 strings (``smach.bag``): rosbags raises UnicodeDecodeError; a
  hand-written parser of that one type gives the expected values;
- an empty definition: rosbags refuses the type; fastbag keeps the raw bytes
  readable and ``read`` raises DecodeError naming the topic and type.
"""

from __future__ import annotations

import mmap
import pickle
import struct
import warnings

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

import fastbag
from fastbag.tooling.synth import write_demo_bag

from conftest import data_file, data_files
from oracle import assert_reads_equal, assert_same, rosbags_messages

ROSBAGS_FAILS = ("bag-with-empty-message-definition", "gt_strongbot__motions__joints_2010", "smach.bag")


@pytest.mark.parametrize("path", data_files("ros1v2"))
def test_every_field_equals_rosbags(path):
    if any(name in path.name for name in ROSBAGS_FAILS):
        pytest.skip("rosbags cannot deserialize this file; proved another way below")
    expected = rosbags_messages(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastbag.FastbagWarning)  # every md5 must match its definition
        with fastbag.open(path) as bag:
            assert_reads_equal(bag, expected)
            seen: dict[str, int] = {}
            for m in bag.messages():
                i = seen.get(m.topic, 0)
                assert_same(m.msg, expected[m.topic][i], f"messages {m.topic}[{i}]")
                assert m.msg._type == m.connection.msgtype == expected[m.topic][i].__msgtype__.replace("/msg/", "/")
                if i == 0:  # a message is a value: it pickles (as its values), prints, and gives plain dicts
                    back = pickle.loads(pickle.dumps(m.msg))
                    assert back == m.msg and repr(back) == repr(m.msg) and repr(m.msg).startswith(m.msg._type)
                    assert back.to_dict().keys() == m.msg.to_dict().keys() == set(m.msg._fields)
                    assert_same(back, expected[m.topic][i], f"unpickled {m.topic}[{i}]")
                seen[m.topic] = i + 1
            assert seen == {t: len(v) for t, v in expected.items()}


def test_read_time_window_equals_rosbags():
    path = data_file("ros1v2/cra-ros-pkg__robot_localization__test__test2.bag")
    with fastbag.open(path) as bag:
        start = bag.start_time + (bag.end_time - bag.start_time) // 3
        end = bag.start_time + 2 * (bag.end_time - bag.start_time) // 3
        arr = bag.read("/imu/data", start=start, end=end)
    with AnyReader([path]) as reader:
        conns = [c for c in reader.connections if c.topic == "/imu/data"]
        expected = [(t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages(conns, start, end)]
    assert arr.time.tolist() == [t for t, _ in expected]
    assert len(expected) > 100
    for i, (_, theirs) in enumerate(expected):
        assert_same(arr[i], theirs, f"[{i}]")


def test_roslib_header_decodes_like_std_msgs_header():
    """rosbags fails ('std_msgs/msg/Header is unknown'); the same bytes under std_msgs/Header are the oracle."""
    path = data_file("ros1v2/gt-ros-pkg__hrl__hrl__gt_strongbot__motions__joints_2010-08-17-22-10-33.bag")
    with fastbag.open(path) as bag:
        (topic,) = bag.topics
        connection = bag.connections[0]
        assert "MSG: roslib/Header" in connection.definition
        arr = bag.read(topic)
        raws = [bytes(m.data) for m in bag.messages(raw=True)]
    store = get_typestore(Stores.EMPTY)
    blocks = connection.definition.replace("roslib/Header", "std_msgs/Header").split("\n" + "=" * 80 + "\n")
    types = get_types_from_msg(blocks[0], connection.msgtype)
    for block in blocks[1:]:
        name, _, text = block.partition("\n")
        types.update(get_types_from_msg(text, name.removeprefix("MSG: ").strip()))
    store.register(types)
    assert len(arr) == len(raws) == 305
    msgtype = "pr2_controllers_msgs/msg/JointTrajectoryControllerState"
    for i, raw in enumerate(raws):
        assert_same(arr[i], store.deserialize_ros1(raw, msgtype), f"[{i}]")


def _parse_smach(raw: bytes) -> dict:
    """SmachContainerStatus by hand: Header, path, string[] initial_states, active_states, local_data, info."""
    pos = 0

    def u32() -> int:
        nonlocal pos
        (value,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        return value

    def string() -> bytes:
        nonlocal pos
        n = u32()
        pos += n
        return raw[pos - n:pos]

    seq, secs, nsecs = u32(), u32(), u32()
    out = {"seq": seq, "secs": secs, "nsecs": nsecs, "frame_id": string(), "path": string()}
    out["initial_states"] = [string() for _ in range(u32())]
    out["active_states"] = [string() for _ in range(u32())]
    out["local_data"], out["info"] = string(), string()
    assert pos == len(raw)
    return out


def _text_or_bytes(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def test_non_utf8_strings_are_bytes_and_the_rest_text():
    """rosbags raises UnicodeDecodeError on this file; a hand parser of the type is the oracle."""
    path = data_file("ros1v2/jsk-ros-pkg__jsk_common__app_manager_utils__app_notification_saver__data__smach.bag")
    with fastbag.open(path) as bag:
        (topic,) = bag.topics
        arr = bag.read(topic)
        raws = [bytes(m.data) for m in bag.messages(raw=True)]
        decoded = [m.msg for m in bag.messages()]
    assert len(arr) == len(raws) == 7
    undecodable = 0
    for i, raw in enumerate(raws):
        want = _parse_smach(raw)
        for rec in (arr[i], decoded[i]):
            assert rec.header.seq == want["seq"] and rec.header.stamp["secs"] == want["secs"]
            assert rec.header.stamp["nsecs"] == want["nsecs"]
            for name in ("path", "local_data", "info"):
                assert rec[name] == _text_or_bytes(want[name])
            assert rec.header.frame_id == _text_or_bytes(want["frame_id"])
            for name in ("initial_states", "active_states"):
                assert list(rec[name]) == [_text_or_bytes(s) for s in want[name]]
        undecodable += isinstance(arr[i]["local_data"], bytes)
    assert undecodable > 0  # the file really holds non-UTF-8 bytes


def test_empty_definition_keeps_raw_readable_and_decoding_names_topic_and_type():
    path = data_file("ros1v2/cruise-automation__webviz__packages__webviz-core__public__fixtures__"
                     "bag-with-empty-message-definition.bag")
    with fastbag.open(path) as bag:
        assert len(list(bag.messages(raw=True))) == 14
        with pytest.raises(fastbag.DecodeError, match=r"definition is empty.*topic /led_array_status.*"
                                                      r"type led_array_msgs/Status"):
            bag.read("/led_array_status")
        with pytest.warns(fastbag.FastbagWarning, match="/led_array_status cannot be decoded"):
            got = list(bag.messages())
        assert len(got) == 14 and not any(m.msg for m in got if m.topic == "/led_array_status")
        with pytest.raises(fastbag.DecodeError, match="definition is empty"):
            next(m for m in got if m.topic == "/led_array_status").msg.status


def test_two_type_names_with_one_md5_merge_into_one_array():
    """/tf in this bag is recorded as tf/tfMessage and tf2_msgs/TFMessage (same md5, same wire format)."""
    path = data_file("ros1v2/zaki0929__bagfiles__2018__feb13__col.bag")
    with fastbag.open(path) as bag:
        info = bag.topics["/tf"]
        assert set(info.msgtypes) == {"tf/tfMessage", "tf2_msgs/TFMessage"}
        arr = bag.read("/tf")
        assert len(arr) == info.message_count
        assert set(np.unique(arr.connection).tolist()) == {0, 1}
        assert (np.diff(arr.time) >= 0).all()


# -- generated bags --------------------------------------------------------------------

@pytest.fixture(scope="module", params=["none", "lz4", "bz2"])
def demo_bag(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / f"demo-{request.param}.bag"
    write_demo_bag(path, seconds=0.5, compression=request.param, points=2000)
    return path


def test_demo_bag_equals_rosbags(demo_bag):
    expected = rosbags_messages(demo_bag)
    with fastbag.open(demo_bag) as bag:
        for topic, messages in expected.items():
            arr = bag.read(topic)
            for i, theirs in enumerate(messages):
                assert_same(arr[i], theirs, f"{topic}[{i}]")


def test_uniform_topic_reads_as_one_packed_array(demo_bag):
    with fastbag.open(demo_bag) as bag:
        imu = bag.read("/imu")
        packed = imu.to_numpy()
    assert packed.shape == (len(imu),)
    assert packed["header"]["frame_id"].tolist() == ["imu_link"] * len(imu)
    assert np.array_equal(packed["linear_acceleration"]["z"], imu["linear_acceleration"]["z"])
    assert packed["orientation_covariance"].shape == (len(imu), 9)


def _mapped(array: np.ndarray) -> bool:
    """True when the array's base chain ends at a memory map (the bag file)."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = getattr(base, "base", None) if not isinstance(base, memoryview) else base.obj
    return False


def test_arrays_are_views_of_the_file_or_of_the_decompressed_chunk(demo_bag):
    with fastbag.open(demo_bag) as bag:
        compressed = bag.compression != {"none": bag.chunk_count}
        pc = bag.read("/points")
        image = bag.read("/camera/image_raw")
        data = pc["data"]
        assert isinstance(data, fastbag.msg.arrays.Ragged)
        first = data[0]
        assert first.dtype == np.uint8 and first.size == 2000 // 32 * 32 * 22
        assert _mapped(first) != compressed
        points = fastbag.pointcloud(pc[0])
        assert np.shares_memory(points, first)
        pixels = fastbag.image(image[0])
        assert pixels.shape == (480, 640, 3) and np.shares_memory(pixels, image["data"][0])
    # views stay valid after the bag is closed
    assert points["x"].size == first.size // 22 and np.isfinite(points["x"]).all()


def test_md5_mismatch_warns_with_both_values(tmp_path):
    from fastbag.tooling.synth import IMU, imu
    path = tmp_path / "wrong-md5.bag"
    with fastbag.Writer(path) as writer:
        conn = writer.add_connection("/imu", IMU.name, IMU.definition, "0123456789abcdef0123456789abcdef")
        for t, raw in zip(range(3), imu(np.arange(3, dtype=np.int64) * 10**9, np.random.default_rng(0))):
            writer.write(conn, t * 10**9, raw)
    with fastbag.open(path) as bag:
        with pytest.warns(fastbag.FastbagWarning, match=f"is {IMU.md5sum}, the connection says 0123456789abcdef"):
            arr = bag.read("/imu")
    assert len(arr) == 3


def test_short_message_raises_decode_error_naming_topic_and_index(tmp_path):
    from fastbag.tooling.synth import IMU, imu
    path = tmp_path / "short.bag"
    raws = imu(np.arange(5, dtype=np.int64), np.random.default_rng(0))
    with fastbag.Writer(path) as writer:
        conn = writer.add_connection("/imu", IMU.name, IMU.definition, IMU.md5sum)
        other = writer.add_connection("/other", IMU.name, IMU.definition, IMU.md5sum)
        for t, raw in enumerate(raws):
            writer.write(other, t, raw)  # other topics' rows among /imu's: positions are the topic's own
            writer.write(conn, t, raw[:-8] if t == 3 else raw)
    with fastbag.open(path) as bag:
        with pytest.raises(fastbag.DecodeError, match=r"shorter than its definition.*topic /imu.*message 3"):
            bag.read("/imu")
        assert len(bag.read("/imu", end=3)) == 3  # what is intact stays readable
    # a part of the topic names the message by its place in the topic, not in the part: read through the
    # topic's own index, and through the whole index built first (other topics' rows among /imu's)
    for whole in (False, True):
        with fastbag.open(path) as bag:
            assert not whole or bag.topics["/other"].message_count == 5
            for read in (lambda: list(bag.iter_read("/imu", step=2)), lambda: bag.take("/imu", [0, 3]),
                         lambda: bag.read("/imu", start=2), lambda: list(bag.iter_read("/imu", step="1 kB"))):
                with pytest.raises(fastbag.DecodeError, match=r"topic /imu.*message 3\)") as caught:
                    read()
                assert caught.value.index == 3 and caught.value.topic == "/imu"
    with fastbag.open(path) as bag:
        result = fastbag.export(bag, tmp_path / "out", format="csv", step=2)
        assert "message 3)" in result.skipped["/imu"]
        dataset = fastbag.SyncedDataset(path, {"imu": "/imu"}, anchor="imu")
        with pytest.raises(fastbag.DecodeError, match=r"message 3\)"):
            dataset[3]


def test_pointcloud_matches_a_hand_unpack_of_the_real_cloud():
    path = data_file("ros1v2/eric-wieser__ros_numpy__test__test.bag")
    with fastbag.open(path) as bag:
        topic = next(t for t, i in bag.topics.items() if i.msgtype == "sensor_msgs/PointCloud2")
        pc = bag.read(topic)
        raw = bytes(next(bag.messages(topics=[topic], raw=True)).data)
        points = fastbag.pointcloud(pc[0])
    msg = pc[0]
    fields = msg["fields"]
    formats = {7: "<f", 8: "<d", 2: "<B", 4: "<H", 6: "<I", 5: "<i", 1: "<b", 3: "<h"}
    data_start = raw.index(bytes(np.asarray(msg["data"])[:64]))
    flat = points.reshape(-1)
    step = int(msg["point_step"])
    for k in range(0, flat.size, max(1, flat.size // 50)):
        row, col = divmod(k, int(msg["width"]))
        at = data_start + row * int(msg["row_step"]) + col * step
        for name, offset, datatype in zip(fields["name"], fields["offset"], fields["datatype"]):
            (value,) = struct.unpack_from(formats[int(datatype)], raw, at + int(offset))
            got = flat[k][str(name)]
            assert np.asarray(got).tobytes() == np.asarray(value, dtype=np.dtype(formats[int(datatype)])).tobytes()
