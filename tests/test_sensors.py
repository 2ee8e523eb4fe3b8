"""fastbag.pointcloud and fastbag.image on messages built by rosbags' serializer.

The messages exercise what real drivers do: padding inside points and at row
ends, organized clouds, big-endian data, fields with count > 1, image rows
padded beyond ``width * channels`` (``step``), and every supported encoding.
Expected values are computed with NumPy from the same bytes, independently of
fastbag's code.
"""

from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

import fastbag
from fastbag.tooling.synth import IMAGE, POINTCLOUD2

STORE = get_typestore(Stores.ROS1_NOETIC)
Header = STORE.types["std_msgs/msg/Header"]
Time = STORE.types["builtin_interfaces/msg/Time"]
PointField = STORE.types["sensor_msgs/msg/PointField"]
PointCloud2 = STORE.types["sensor_msgs/msg/PointCloud2"]
Image = STORE.types["sensor_msgs/msg/Image"]


def _write(path, msgtype, messages):
    with fastbag.Writer(path) as writer:
        conn = writer.add_connection("/t", msgtype.name, msgtype.definition, msgtype.md5sum)
        for i, msg in enumerate(messages):
            writer.write(conn, (i + 1) * 10**9, STORE.serialize_ros1(msg, msgtype.name.replace("/", "/msg/")))
    bag = fastbag.open(path)
    return bag, bag.read("/t")


def _header(i=0):
    return Header(seq=i, stamp=Time(sec=1, nanosec=i), frame_id="f")


@pytest.mark.parametrize("bigendian", [False, True])
def test_pointcloud_padding_organized_bigendian_and_counts(tmp_path, bigendian):
    order = ">" if bigendian else "<"
    height, width, point_step = 3, 5, 32
    row_step = width * point_step + 16  # padded rows
    point = np.dtype({"names": ["x", "y", "z", "rgb", "normal"],
                      "formats": [order + "f4", order + "f4", order + "f4", order + "u4", (order + "f8", (2,))],
                      "offsets": [0, 4, 8, 12, 16], "itemsize": point_step})
    rng = np.random.default_rng(0)
    raw = np.zeros(height * row_step, dtype=np.uint8)
    expected = np.zeros((height, width), dtype=point)
    for name in ("x", "y", "z"):
        expected[name] = rng.normal(size=(height, width))
    expected["rgb"] = rng.integers(0, 2**32, (height, width))
    expected["normal"] = rng.normal(size=(height, width, 2))
    for r in range(height):
        raw[r * row_step:r * row_step + width * point_step] = expected[r].view(np.uint8)
    fields = [PointField(name="x", offset=0, datatype=7, count=1), PointField(name="y", offset=4, datatype=7, count=1),
              PointField(name="z", offset=8, datatype=7, count=1), PointField(name="rgb", offset=12, datatype=6, count=1),
              PointField(name="normal", offset=16, datatype=8, count=2)]
    msg = PointCloud2(header=_header(), height=height, width=width, fields=fields, is_bigendian=bigendian,
                      point_step=point_step, row_step=row_step, data=raw, is_dense=True)
    bag, arr = _write(tmp_path / "pc.bag", POINTCLOUD2, [msg, msg])
    with bag:
        clouds = list(fastbag.pointcloud(arr))
        assert len(clouds) == 2
        points = clouds[0]
        assert points.shape == (height, width)
        for name in ("x", "y", "z", "rgb", "normal"):
            assert np.array_equal(points[name], expected[name]), name
        assert np.shares_memory(points, arr["data"][0])


def test_unorganized_cloud_is_flat_and_unnamed_padding_is_skipped(tmp_path):
    fields = [PointField(name="x", offset=0, datatype=7, count=1), PointField(name="", offset=4, datatype=7, count=1),
              PointField(name="ring", offset=8, datatype=4, count=1)]
    pts = np.zeros(4, dtype=np.dtype({"names": ["x", "ring"], "formats": ["<f4", "<u2"], "offsets": [0, 8],
                                      "itemsize": 12}))
    pts["x"], pts["ring"] = [1, 2, 3, 4], [0, 1, 2, 3]
    msg = PointCloud2(header=_header(), height=1, width=4, fields=fields, is_bigendian=False, point_step=12,
                      row_step=48, data=pts.view(np.uint8).copy(), is_dense=True)
    bag, arr = _write(tmp_path / "pc.bag", POINTCLOUD2, [msg])
    with bag:
        points = fastbag.pointcloud(arr[0])
        assert points.shape == (4,) and points.dtype.names == ("x", "ring")
        assert points["x"].tolist() == [1, 2, 3, 4] and points["ring"].tolist() == [0, 1, 2, 3]
        m = next(bag.messages())  # an item of messages() (its .msg the message) is taken as its message
        assert fastbag.pointcloud(m).tobytes() == fastbag.pointcloud(m.msg).tobytes() == points.tobytes()


def test_pointcloud_data_shorter_than_declared_raises(tmp_path):
    fields = [PointField(name="x", offset=0, datatype=7, count=1)]
    msg = PointCloud2(header=_header(), height=1, width=10, fields=fields, is_bigendian=False, point_step=4,
                      row_step=40, data=np.zeros(36, dtype=np.uint8), is_dense=True)
    bag, arr = _write(tmp_path / "pc.bag", POINTCLOUD2, [msg])
    with bag, pytest.raises(fastbag.DecodeError, match="needs 40 data bytes, more than its 36"):
        fastbag.pointcloud(arr[0])


ENCODINGS = [("mono8", "u1", 1), ("mono16", "u2", 1), ("rgb8", "u1", 3), ("bgr8", "u1", 3), ("rgba8", "u1", 4),
             ("bgra8", "u1", 4), ("8UC1", "u1", 1), ("8UC3", "u1", 3), ("16UC1", "u2", 1), ("32FC1", "f4", 1),
             ("bayer_rggb8", "u1", 1), ("bayer_grbg16", "u2", 1), ("16SC3", "i2", 3), ("64FC1", "f8", 1)]


@pytest.mark.parametrize("encoding,code,channels", ENCODINGS, ids=[e[0] for e in ENCODINGS])
@pytest.mark.parametrize("bigendian", [0, 1])
def test_image_encodings_with_padded_rows(tmp_path, encoding, code, channels, bigendian):
    height, width = 4, 6
    dtype = np.dtype((">" if bigendian else "<") + code)
    row = width * channels * dtype.itemsize
    step = row + 8  # rows padded to a larger stride
    rng = np.random.default_rng(1)
    pixels = (rng.uniform(0, 200, (height, width, channels))).astype(dtype)
    raw = np.zeros(height * step, dtype=np.uint8)
    for r in range(height):
        raw[r * step:r * step + row] = pixels[r].reshape(-1).view(np.uint8)
    msgs = [Image(header=_header(i), height=height, width=width, encoding=encoding, is_bigendian=bigendian,
                  step=step, data=raw) for i in range(3)]
    bag, arr = _write(tmp_path / "img.bag", IMAGE, msgs)
    with bag:
        one = fastbag.image(arr[1])
        want = pixels if channels > 1 else pixels[:, :, 0]
        assert one.shape == want.shape and one.dtype == dtype
        assert np.array_equal(one, want)
        assert np.array_equal(fastbag.image(list(bag.messages())[1]), want)  # an item of messages()
        stacked = fastbag.image(arr)
        assert stacked.shape == (3,) + want.shape and np.array_equal(stacked[2], want)


def test_images_of_different_sizes_give_a_list_and_bad_encodings_raise(tmp_path):
    def img(h, w, enc="mono8"):
        return Image(header=_header(), height=h, width=w, encoding=enc, is_bigendian=0, step=w,
                     data=np.arange(h * w, dtype=np.uint8))
    bag, arr = _write(tmp_path / "img.bag", IMAGE, [img(2, 3), img(3, 2), img(1, 1, "jpeg")])
    with bag:
        with pytest.raises(fastbag.UnsupportedError, match="'jpeg'"):
            fastbag.image(arr)
        views = fastbag.image(arr[:2])
        assert [v.shape for v in views] == [(2, 3), (3, 2)]
        assert views[1].tolist() == [[0, 1], [2, 3], [4, 5]]


def test_image_step_too_small_raises(tmp_path):
    msg = Image(header=_header(), height=2, width=4, encoding="rgb8", is_bigendian=0, step=4,
                data=np.zeros(8, dtype=np.uint8))
    bag, arr = _write(tmp_path / "img.bag", IMAGE, [msg])
    with bag, pytest.raises(fastbag.DecodeError, match="has step 4, less than a row's 12 bytes"):
        fastbag.image(arr[0])


@pytest.mark.parametrize("shapes", [[(1, 5), (2, 3), (3, 4)], [(2, 3)] * 3, [(1, 5)] * 3],
                         ids=["shapes-vary", "organized-one-shape", "unorganized-one-shape"])
def test_uniform_topic_fast_path_equals_the_message_by_message_path(tmp_path, monkeypatch, shapes):
    """A driver's topic (one field layout, every cloud fitting its data) is viewed in one vectorized pass
    (clouds of one shape by one map); its arrays must equal the per-message path's, organized and
    unorganized, and stay views."""
    from fastbag.msg import sensors

    fields = [PointField(name="x", offset=0, datatype=7, count=1), PointField(name="ring", offset=4, datatype=4,
                                                                               count=1)]
    rng = np.random.default_rng(3)
    messages = []
    for i, (height, width) in enumerate(shapes):
        step = 8
        data = rng.integers(0, 256, height * width * step + 3 + i).astype(np.uint8)  # trailing bytes: ragged data
        messages.append(PointCloud2(header=_header(i), height=height, width=width, fields=fields,
                                    is_bigendian=False, point_step=step, row_step=width * step, data=data,
                                    is_dense=True))
    bag, topic = _write(tmp_path / "c.bag", POINTCLOUD2, messages)
    with bag:
        assert sensors._uniform_clouds(topic, topic["fields"], topic["data"]) is not None  # the fast path serves it
        fast = list(fastbag.pointcloud(topic))
        monkeypatch.setattr(sensors, "_uniform_clouds", lambda *args: None)
        slow = list(fastbag.pointcloud(topic))
    assert len(fast) == len(slow) == 3
    for a, b in zip(fast, slow):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a, b)
    assert fast[0].base is not None  # a view, not a copy


@pytest.mark.parametrize("padding,encoding,bigendian", [(0, "rgb8", 0), (8, "mono16", 1), (2, "bgra8", 0)])
@pytest.mark.parametrize("trailing", [0, 3], ids=["one-length", "ragged"])
def test_uniform_image_topic_fast_path_equals_the_message_by_message_path(tmp_path, monkeypatch, padding, encoding,
                                                                         bigendian, trailing):
    """A camera's topic (one size, encoding and step) is viewed in one pass over the buffers (data of one
    length, or of lengths that differ past the pixels); its arrays must equal the per-message path's (rows
    padded or not, big-endian too) and stay views; a topic with one image too short for its size still
    goes message by message and names that message."""
    from fastbag.msg import sensors

    height, width = 3, 5
    code, channels = sensors.pixel_format(encoding)
    dtype = np.dtype((">" if bigendian else "<") + code)
    step = width * channels * dtype.itemsize + padding
    rng = np.random.default_rng(4)
    messages = [Image(header=_header(i), height=height, width=width, encoding=encoding, is_bigendian=bigendian,
                      step=step, data=rng.integers(0, 256, height * step + i * trailing).astype(np.uint8))
                for i in range(4)]
    bag, topic = _write(tmp_path / "i.bag", IMAGE, messages)
    with bag:
        columns = [topic[c].tolist() for c in ("height", "width", "step", "encoding", "is_bigendian")]
        assert isinstance(topic["data"], sensors.Ragged) == bool(trailing)
        assert sensors._uniform_images(columns, topic["data"]) is not None  # the fast path serves it
        fast = fastbag.image(topic, stack=False)
        monkeypatch.setattr(sensors, "_uniform_images", lambda *args: None)
        slow = fastbag.image(topic, stack=False)
    assert len(fast) == len(slow) == 4
    for a, b, msg in zip(fast, slow, messages):
        assert a.shape == b.shape == ((height, width, channels) if channels > 1 else (height, width))
        assert a.dtype == b.dtype == dtype and np.array_equal(a, b)
        assert a.base is not None and a.flags.c_contiguous == b.flags.c_contiguous  # views, laid out alike
        rows = msg.data[:height * step].reshape(height, step)[:, :width * channels * dtype.itemsize]
        assert np.array_equal(np.ascontiguousarray(a).reshape(height, -1).view(np.uint8), rows)
    short = messages[:2] + [Image(header=_header(2), height=height, width=width, encoding=encoding,
                                  is_bigendian=bigendian, step=step, data=np.zeros(step, dtype=np.uint8))]
    bag, topic = _write(tmp_path / "short.bag", IMAGE, short)
    needs = (height - 1) * step + width * channels * dtype.itemsize
    with bag, pytest.raises(fastbag.DecodeError, match=rf"needs {needs} data bytes, more than its {step} "
                            r"\(topic /t, message 2\)"):
        fastbag.image(topic, stack=False)


@pytest.mark.parametrize("encoding", ["nv21", "nv12"])
@pytest.mark.parametrize("height", [4, 5])
def test_yuv420_images_keep_their_chroma_plane(tmp_path, encoding, height):
    """nv21 was read as its Y plane alone (the chroma bytes dropped without a word) and nv12 refused: both are
    a Y plane of ``height`` rows, then interleaved chroma of ceil(height / 2) rows, one array as OpenCV's
    COLOR_YUV2RGB_NV21/NV12 take it. Rows padded beyond ``width`` (``step``) are honoured, topic-wide too."""
    width, step = 6, 8
    rows = height + (height + 1) // 2
    data = np.arange(rows * step, dtype=np.uint8)
    messages = [Image(header=_header(i), height=height, width=width, encoding=encoding, is_bigendian=0, step=step,
                      data=data + i) for i in range(3)]
    bag, topic = _write(tmp_path / "yuv.bag", IMAGE, messages)
    with bag:
        one = fastbag.image(topic[1])
        assert one.shape == (rows, width) and one.dtype == np.uint8
        assert np.array_equal(one, (data + 1).reshape(rows, step)[:, :width])
        assert np.array_equal(fastbag.image(topic), np.stack([(data + i).reshape(rows, step)[:, :width]
                                                              for i in range(3)]))
    short = [Image(header=_header(), height=height, width=width, encoding=encoding, is_bigendian=0, step=step,
                   data=data[:height * step])]  # the Y plane alone: the chroma is missing, and said to be
    bag, topic = _write(tmp_path / "short.bag", IMAGE, short)
    with bag, pytest.raises(fastbag.DecodeError, match=f"{rows} rows of Y and chroma"):
        fastbag.image(topic)


def test_pointcloud_rows_may_not_overlap(tmp_path):
    """An organized cloud whose row_step is less than a row gave rows repeating each other's points; one row
    needs no row_step (drivers leave it 0)."""
    fields = [PointField(name="x", offset=0, datatype=7, count=1)]
    data = np.arange(32, dtype=np.float32).view(np.uint8)
    overlapping = PointCloud2(header=_header(), height=2, width=4, fields=fields, is_bigendian=False, point_step=4,
                              row_step=8, data=data, is_dense=True)
    single = PointCloud2(header=_header(1), height=1, width=4, fields=fields, is_bigendian=False, point_step=4,
                         row_step=0, data=data[:16], is_dense=True)
    bag, topic = _write(tmp_path / "pc.bag", POINTCLOUD2, [single, overlapping])
    with bag:
        assert fastbag.pointcloud(topic[0])["x"].tolist() == [0, 1, 2, 3]
        with pytest.raises(fastbag.DecodeError,
                           match=r"row_step 8, less than a row's 16 bytes \(topic /t, message 1\)"):
            list(fastbag.pointcloud(topic))


def test_errors_of_a_part_name_the_message_by_its_place_in_the_topic(tmp_path):
    """fastbag.image of what take(), a time range or iter_read gave named the message by its place in the part
    (so SyncedDataset's sample of frame 2 blamed message 0); TopicArray.positions says where each part's
    messages are."""
    good = np.zeros(18, dtype=np.uint8)
    messages = [Image(header=_header(i), height=2, width=3, encoding="rgb8", is_bigendian=0, step=9,
                      data=good if i != 2 else good[:10]) for i in range(5)]
    bag, topic = _write(tmp_path / "img.bag", IMAGE, messages)
    third = 3 * 10**9  # message 2's receive time
    with bag:
        assert topic.positions is None and bag.take("/t", [4, 2]).positions.tolist() == [4, 2]
        assert bag.take("/t", slice(-2, None)).positions.tolist() == [3, 4]
        assert bag.take("/t", [-3]).positions.tolist() == [2]
        assert topic[1:3].positions.tolist() == [1, 2] and bag.take("/t", [1, 2, 3])[1:].positions.tolist() == [2, 3]
        steps = list(bag.iter_read("/t", step=1, start=2 * 10**9))
        assert [part.positions.tolist() for part in steps] == [[1], [2], [3], [4]]
        parts = [bag.take("/t", [2]), bag.take("/t", [-3]), bag.take("/t", np.arange(5) >= 2),
                 bag.read("/t", start=third), bag.read("/t", start=third - 10**9), steps[1]]
        assert [part.positions[0] for part in parts] == [2, 2, 2, 2, 1, 2]
        for part in parts:
            with pytest.raises(fastbag.DecodeError, match=r"\(topic /t, message 2\)"):
                fastbag.image(part, stack=False)
        with pytest.raises(fastbag.DecodeError, match=r"\(topic /t, message 2\)"):
            fastbag.image(bag.take("/t", [2])[0])
    ds = fastbag.SyncedDataset(tmp_path / "img.bag", {"cam": "/t"}, anchor="cam")
    assert ds[1]["cam"].shape == (2, 3, 3)
    with pytest.raises(fastbag.DecodeError, match=r"\(topic /t, message 2\)"):
        ds[2]


def test_big_endian_views_keep_their_byte_order_and_stacks_are_native(tmp_path):
    """README (Use): per-message views of a big-endian image are >u2, which torch.from_numpy refuses; a stacked
    topic is native-endian, with the same values."""
    pixels = np.arange(12, dtype=">u2").reshape(3, 4)
    messages = [Image(header=_header(i), height=3, width=4, encoding="mono16", is_bigendian=1, step=8,
                      data=(pixels + i).astype(">u2").view(np.uint8).ravel()) for i in range(2)]
    bag, topic = _write(tmp_path / "be.bag", IMAGE, messages)
    with bag:
        view = fastbag.image(topic[0])
        assert view.dtype == np.dtype(">u2") and np.array_equal(view, pixels)
        stacked = fastbag.image(topic)
        assert stacked.dtype == np.dtype("=u2") and np.array_equal(stacked, np.stack([pixels, pixels + 1]))
        torch = pytest.importorskip("torch", reason="torch is an optional extra")
        with pytest.raises((ValueError, TypeError)):
            torch.from_numpy(view)
        assert torch.from_numpy(view.astype("=u2")).tolist() == pixels.tolist()


def test_a_field_named_twice_is_said(tmp_path):
    """Fields [x@0, x@4]: the second was dropped without a word (NumPy cannot hold two fields of one name)."""
    fields = [PointField(name="x", offset=0, datatype=7, count=1), PointField(name="x", offset=4, datatype=7, count=1),
              PointField(name="", offset=8, datatype=7, count=1)]
    data = np.arange(6, dtype=np.float32).view(np.uint8)
    msg = PointCloud2(header=_header(), height=1, width=2, fields=fields, is_bigendian=False, point_step=12,
                      row_step=24, data=data, is_dense=True)
    bag, topic = _write(tmp_path / "dup.bag", POINTCLOUD2, [msg])
    with bag, pytest.warns(fastbag.FastbagWarning, match=r"field 'x' is named twice \(offsets 0 and 4\)"):
        points = fastbag.pointcloud(topic[0])
    assert points.dtype.names == ("x",) and points["x"].tolist() == [0.0, 3.0]


def test_images_of_one_size_in_two_encodings_are_not_stacked(tmp_path):
    """rgb8 and bgr8 frames share a shape and dtype, not a channel order: a list of views, not one array."""
    red = {"rgb8": [255, 0, 0], "bgr8": [0, 0, 255]}
    messages = [Image(header=_header(i), height=1, width=1, encoding=enc, is_bigendian=0, step=3,
                      data=np.array(red[enc], dtype=np.uint8)) for i, enc in enumerate(red)]
    bag, arr = _write(tmp_path / "two.bag", IMAGE, messages)
    with bag:
        views = fastbag.image(arr)
        assert isinstance(views, list) and [v.tolist() for v in views] == [[[[255, 0, 0]]], [[[0, 0, 255]]]]
        assert fastbag.image(arr[:1]).shape == (1, 1, 1, 3)  # one encoding: stacked


def test_images_in_both_byte_orders_stack_native_and_collate_into_one_tensor(tmp_path):
    """Same size and encoding, is_bigendian 0 then 1: one native stack (it was a list), and collate's batch
    one tensor (it was a list of arrays, one of them >u2)."""
    pixels = np.arange(6).reshape(2, 3)
    messages = [Image(header=_header(i), height=2, width=3, encoding="mono16", is_bigendian=big, step=6,
                      data=(pixels + i).astype(">u2" if big else "<u2").view(np.uint8).ravel())
                for i, big in enumerate((0, 1))]
    bag, arr = _write(tmp_path / "orders.bag", IMAGE, messages)
    with bag:
        stacked = fastbag.image(arr)
        assert stacked.dtype == np.dtype("=u2") and stacked.tolist() == [pixels.tolist(), (pixels + 1).tolist()]
    dataset = fastbag.SyncedDataset(tmp_path / "orders.bag", {"d": "/t"}, anchor="d")
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    batch = fastbag.collate([dataset[0], dataset[1]])
    assert isinstance(batch["d"], torch.Tensor) and batch["d"].tolist() == stacked.tolist()
    dataset.close()


def test_empty_organized_clouds_keep_their_shape(tmp_path):
    fields = [PointField(name="x", offset=0, datatype=7, count=1)]
    messages = [PointCloud2(header=_header(i), height=h, width=w, fields=fields, is_bigendian=False, point_step=4,
                            row_step=4 * w, data=np.zeros(0, dtype=np.uint8), is_dense=True)
                for i, (h, w) in enumerate([(3, 0), (0, 5), (1, 0)])]
    bag, arr = _write(tmp_path / "empty.bag", POINTCLOUD2, messages)
    with bag:
        assert [c.shape for c in fastbag.pointcloud(arr)] == [(3, 0), (0, 5), (0,)]
        assert fastbag.pointcloud(arr[0]).shape == (3, 0)


def test_a_cloud_whose_size_overflows_int64_is_a_decode_error_on_every_path(tmp_path):
    """height * row_step past 2**63 wrapped negative in the whole-topic check, which then passed: a view of
    2**31 x 2**28 points over 20 kB, and reading it crashed the process. Now the message-by-message path
    refuses it, as it refuses it alone."""
    fields = [PointField(name="x", offset=0, datatype=7, count=1), PointField(name="y", offset=4, datatype=7, count=1)]
    good = PointCloud2(header=_header(0), height=1, width=2500, fields=fields, is_bigendian=False, point_step=8,
                       row_step=20000, data=np.zeros(20000, dtype=np.uint8), is_dense=True)
    bad = PointCloud2(header=_header(1), height=2**31 + 1, width=2**28 + 1, fields=fields, is_bigendian=False,
                      point_step=8, row_step=2**32 - 1, data=np.zeros(20000, dtype=np.uint8), is_dense=True)
    bag, arr = _write(tmp_path / "huge.bag", POINTCLOUD2, [good, bad])
    with bag:
        assert isinstance(arr["data"], fastbag.msg.arrays.Ragged)  # (the whole-topic path)
        with pytest.raises(fastbag.DecodeError, match="needs 9223372036854775816 data bytes, more than its 20000"):
            list(fastbag.pointcloud(arr))
        with pytest.raises(fastbag.DecodeError, match="more than its 20000"):
            fastbag.pointcloud(bag.take("/t", [1])[0])
        assert fastbag.pointcloud(arr[0]).shape == (2500,)


def test_a_field_name_that_is_not_utf8_keeps_its_bytes_as_surrogates(tmp_path):
    """It was the repr of its bytes ("b'temp\\\\xe9'"); now str with its bytes escaped, as
    decode(..., "surrogateescape") gives them (``name.encode("utf-8", "surrogateescape")`` is the bytes again)."""
    with fastbag.Writer(tmp_path / "name.bag") as writer:
        conn = writer.add_connection("/t", POINTCLOUD2.name, POINTCLOUD2.definition, POINTCLOUD2.md5sum)
        msg = PointCloud2(header=_header(), height=1, width=2, fields=[PointField(name="NAMEX", offset=0, datatype=7,
                                                                                  count=1)],
                          is_bigendian=False, point_step=4, row_step=8,
                          data=np.array([1.5, 2.5], dtype="<f4").view(np.uint8), is_dense=True)
        raw = bytes(STORE.serialize_ros1(msg, "sensor_msgs/msg/PointCloud2")).replace(b"NAMEX", b"temp\xe9")
        writer.write(conn, 10**9, raw)
    with fastbag.open(tmp_path / "name.bag") as bag:
        for points in (fastbag.pointcloud(bag.read("/t")[0]), next(iter(fastbag.pointcloud(bag.read("/t"))))):
            assert points.dtype.names == ("temp\udce9",) and points["temp\udce9"].tolist() == [1.5, 2.5]
            assert points.dtype.names[0].encode("utf-8", "surrogateescape") == b"temp\xe9"


def test_a_raw_message_is_refused_as_raw_not_as_damaged(tmp_path):
    msg = Image(header=_header(), height=1, width=1, encoding="mono8", is_bigendian=0, step=1,
                data=np.array([7], dtype=np.uint8))
    bag, _ = _write(tmp_path / "raw.bag", IMAGE, [msg])
    with bag:
        raw = next(iter(bag.messages(raw=True)))
        for helper in (fastbag.image, fastbag.pointcloud):
            with pytest.raises(TypeError, match=r"bag.messages\(raw=True\) \(/t\) holds bytes"):
                helper(raw)
        assert fastbag.image(next(iter(bag.messages()))).tolist() == [[7]]
