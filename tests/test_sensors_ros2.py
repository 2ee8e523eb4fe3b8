"""Sensor helpers on ROS2 types: PointCloud2, Image and CompressedImage decoded from CDR.

Messages are serialized by rosbags from known points and pixels, decoded with
:func:`fastbag.msg.decode_messages` from the ros2msg text rosbags generates for
the standard types, then read with ``fastbag.pointcloud`` and ``fastbag.image``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fastbag
from fastbag.msg import decode_messages

typesys = pytest.importorskip("rosbags.typesys", reason="rosbags serializes the messages")


@pytest.fixture(scope="module")
def store():
    return typesys.get_typestore(typesys.Stores.LATEST)


def _decode(store, typename: str, messages: list, little_endian: bool = True):
    text, _ = store.generate_msgdef(typename, ros_version=2)
    raw = [bytes(store.serialize_cdr(m, typename, little_endian=little_endian)) for m in messages]
    return decode_messages(typename, text, raw, encoding="cdr", schema_encoding="ros2msg")


def _header(store, frame: str, sec: int = 1):
    T = store.types
    return T["std_msgs/msg/Header"](T["builtin_interfaces/msg/Time"](sec, 2), frame)


@pytest.mark.parametrize("little_endian", [True, False])
def test_pointcloud2(store, little_endian) -> None:
    T = store.types
    PointField = T["sensor_msgs/msg/PointField"]
    fields = [PointField("x", 0, 7, 1), PointField("y", 4, 7, 1), PointField("z", 8, 7, 1),
              PointField("intensity", 12, 2, 1)]
    dtype = np.dtype({"names": ["x", "y", "z", "intensity"], "formats": ["<f4", "<f4", "<f4", "u1"],
                      "offsets": [0, 4, 8, 12], "itemsize": 16})
    clouds = []
    for n in (5, 3):
        pts = np.zeros(n, dtype)
        pts["x"], pts["y"], pts["z"], pts["intensity"] = np.arange(n), -np.arange(n), 0.5, np.arange(n) * 7
        clouds.append((pts, T["sensor_msgs/msg/PointCloud2"](_header(store, "lidar"), 1, n, fields, False, 16,
                                                             16 * n, pts.view(np.uint8), True)))
    topic = _decode(store, "sensor_msgs/msg/PointCloud2", [m for _, m in clouds], little_endian)
    for (pts, _), got, one in zip(clouds, fastbag.pointcloud(topic), (topic[0], topic[1])):
        assert got.tolist() == pts.tolist()
        assert fastbag.pointcloud(one).tolist() == pts.tolist()
    assert topic[0].header.frame_id == "lidar" and topic["fields"][0]["name"].tolist() == ["x", "y", "z",
                                                                                           "intensity"]


def test_image_and_compressed_image(store) -> None:
    T = store.types
    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    padded = np.zeros((4, 20), np.uint8)  # step 20 > 18: row padding honoured
    padded[:, :18] = pixels.reshape(4, 18)
    images = [T["sensor_msgs/msg/Image"](_header(store, "cam", s), 4, 6, "rgb8", 0, 20, padded.reshape(-1))
              for s in range(3)]
    topic = _decode(store, "sensor_msgs/msg/Image", images)
    stacked = fastbag.image(topic)
    assert stacked.shape == (3, 4, 6, 3) and (stacked == pixels).all()
    assert (fastbag.image(topic[1]) == pixels).all() and topic[2].header.stamp["sec"] == 2
    jpeg = b"\xff\xd8\xff\xe0fake-jpeg\xff\xd9"
    compressed = _decode(store, "sensor_msgs/msg/CompressedImage",
                         [T["sensor_msgs/msg/CompressedImage"](_header(store, "cam"), "jpeg",
                                                               np.frombuffer(jpeg, np.uint8))])
    assert compressed[0].format == "jpeg" and bytes(np.asarray(compressed[0].data)) == jpeg
    for value in (compressed, compressed[0]):  # said plainly (it was a KeyError inside a DecodeError: no 'height')
        with pytest.raises(fastbag.UnsupportedError, match="CompressedImage holds encoded images.*image library"):
            fastbag.image(value)
