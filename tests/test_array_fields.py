"""Fields of arrays of structs, per message, at any depth: ``arr["pts"]["x"]`` where each message holds a
``Point[]`` of its own length, and through two levels of such arrays (``arr["deep"]["many"]["a"]``), by
``[name]``, by attribute and by dotted path, in ROS 1 and CDR recordings.

The oracle is rosbags: each message deserialized by its typestore, the same values walked in Python.
Before, a field of a ``T[]`` of fixed-size structs whose counts varied raised NumPy's IndexError (or a
NotFoundError pointing at ``.values``), and a field two arrays deep "no field 'a' ... its elements have
no fields", where the same field of a uniform array or one level deep was read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fastbag

rosbags_typesys = pytest.importorskip("rosbags.typesys", reason="rosbags writes and decodes the oracle")

DEFINITIONS = {
    "Point": "float32 x\nuint64 id\nint8 k",
    "Inner": "int32 a\nstring name\nPoint[] pts",
    "Outer": "Point[] pts\nInner[] many\nstring tag",
}
COUNTS = [(0, 0), (3, 1), (1, 0), (2, 3), (5, 2)]  # (points, inner structs) per message; varying


def _store(ros: int):
    store = rosbags_typesys.get_typestore(rosbags_typesys.Stores.ROS1_NOETIC if ros == 1
                                          else rosbags_typesys.Stores.ROS2_HUMBLE)
    for name, text in DEFINITIONS.items():
        store.register(rosbags_typesys.get_types_from_msg(text, f"qa/msg/{name}"))
    return store


def _messages(store) -> list:
    point, inner, outer = (store.types[f"qa/msg/{n}"] for n in ("Point", "Inner", "Outer"))

    def points(k: int, n: int) -> list:
        return [point(x=np.float32(k + j / 4), id=2**63 + 10 * k + j, k=-j) for j in range(n)]

    return [outer(pts=points(k, p), many=[inner(a=100 * k + j, name=f"i{k}.{j}", pts=points(j, j + k % 2))
                                          for j in range(m)], tag=f"m{k}")
            for k, (p, m) in enumerate(COUNTS)]


def _write(tmp_path: Path, ros: int) -> tuple[Path, list]:
    store = _store(ros)
    messages = _messages(store)
    if ros == 1:
        from rosbags.rosbag1 import Writer

        path = tmp_path / "fields.bag"
        with Writer(path) as writer:
            conn = writer.add_connection("/t", "qa/msg/Outer", typestore=store)
            for k, msg in enumerate(messages):
                writer.write(conn, 10**9 + k, bytes(store.serialize_ros1(msg, "qa/msg/Outer")))
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        path = tmp_path / "fields"
        with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            conn = writer.add_connection("/t", "qa/msg/Outer", typestore=store)
            for k, msg in enumerate(messages):
                writer.write(conn, 10**9 + k, bytes(store.serialize_cdr(msg, "qa/msg/Outer")))
    return path, messages


@pytest.mark.parametrize("ros", [1, 2])
def test_fields_of_arrays_of_structs_per_message(tmp_path, ros):
    path, messages = _write(tmp_path, ros)
    with fastbag.open(path) as bag:
        arr = bag.read("/t")
        # One level: each message's points' x, id and k, however many points it has
        for field in ("x", "id", "k"):
            expected = [[getattr(p, field) for p in m.pts] for m in messages]
            for got in (arr["pts"][field], arr[f"pts.{field}"], getattr(arr.pts, field)):
                assert [np.asarray(got[i]).tolist() for i in range(len(messages))] == expected, field
                assert np.asarray(got.values).tolist() == [v for row in expected for v in row]
                assert got.counts.tolist() == [len(m.pts) for m in messages]
        assert arr["pts"]["id"].values.dtype == np.uint64  # (2**63 + k: no float, no wrap)
        # Two levels: per message, per inner struct, its field (and its own points' field)
        expected_a = [[i.a for i in m.many] for m in messages]
        for got in (arr["many"]["a"], arr["many.a"], arr.many.a):
            assert [np.asarray(got[i]).tolist() for i in range(len(messages))] == expected_a
        names = arr["many"]["name"]
        assert [list(names[i]) for i in range(len(messages))] == [[i.name for i in m.many] for m in messages]
        expected_x = [[[p.x for p in i.pts] for i in m.many] for m in messages]
        for got in (arr["many"]["pts"]["x"], arr["many.pts.x"], arr.many.pts.x):
            assert [[np.asarray(got[i][j]).tolist() for j in range(len(got[i]))] for i in range(len(messages))] \
                == expected_x
        # The same values message by message, as a user reaches them
        for m, theirs in zip(bag.messages(topics=["/t"]), messages):
            assert [p.id for p in m.msg.pts] == [p.id for p in theirs.pts]
            assert [[p.x for p in i.pts] for i in m.msg.many] == [[p.x for p in i.pts] for i in theirs.many]
        # A field the structs lack: named, with the fields there are
        with pytest.raises(fastbag.NotFoundError, match=r"no field 'y'.*fields: x, id, k"):
            arr["pts"]["y"]
        with pytest.raises(fastbag.NotFoundError, match=r"no field 'y'"):
            arr["many.pts.y"]
        with pytest.raises(AttributeError):
            arr.pts.y
        assert {"x", "id", "k"} <= set(dir(arr["pts"]))


@pytest.mark.parametrize("ros", [1, 2])
def test_struct_fields_named_as_the_arrays_own_attributes(tmp_path, ros):
    """Elements whose fields are called ``first``, ``child``, ``counts``, ``buffers``: the names the array
    layer's Nested and Ragged hold their own parts under. The messages API told the two apart by those
    attributes, so a ``Point[]`` (a Ragged) with fields ``first`` and ``child`` was taken for a Nested and
    every message failed to decode (found by hypothesis in CI)."""
    store = rosbags_typesys.get_typestore(rosbags_typesys.Stores.ROS1_NOETIC if ros == 1
                                          else rosbags_typesys.Stores.ROS2_HUMBLE)
    definitions = {"Fixed": "bool first\nint16 child\nuint8 counts\nfloat64 buffers",
                   "Varied": "string first\nint32 child\nint32[] counts",
                   "Top": "Fixed[] fixed\nVaried[] varied"}
    for name, text in definitions.items():
        store.register(rosbags_typesys.get_types_from_msg(text, f"qa/msg/{name}"))
    fixed, varied, top = (store.types[f"qa/msg/{n}"] for n in ("Fixed", "Varied", "Top"))
    messages = [top(fixed=[fixed(first=bool(j % 2), child=-j, counts=j, buffers=j / 2) for j in range(k)],
                    varied=[varied(first=f"f{k}.{j}", child=j, counts=np.arange(j, dtype=np.int32))
                            for j in range(3 - k)])
                for k in range(4)]
    serialize = store.serialize_ros1 if ros == 1 else store.serialize_cdr
    if ros == 1:
        from rosbags.rosbag1 import Writer

        path = tmp_path / "names.bag"
        kwargs = {}
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        path = tmp_path / "names"
        kwargs = {"version": 9, "storage_plugin": StoragePlugin.MCAP}
    with Writer(path, **kwargs) as writer:
        conn = writer.add_connection("/t", "qa/msg/Top", typestore=store)
        for k, msg in enumerate(messages):
            writer.write(conn, 10**9 + k, bytes(serialize(msg, "qa/msg/Top")))
    with fastbag.open(path) as bag:
        got = list(bag.messages(topics=["/t"]))
        assert len(got) == len(messages)
        for m, theirs in zip(got, messages):
            assert [(p.first, p.child, p.counts, p.buffers) for p in m.msg.fixed] \
                == [(p.first, p.child, p.counts, p.buffers) for p in theirs.fixed]
            assert [(v.first, v.child, list(v.counts)) for v in m.msg.varied] \
                == [(v.first, v.child, v.counts.tolist()) for v in theirs.varied]
        arr = bag.read("/t")
        assert [np.asarray(arr["fixed"]["child"][i]).tolist() for i in range(4)] \
            == [[p.child for p in m.fixed] for m in messages]
        assert [list(arr["varied"]["first"][i]) for i in range(4)] == [[v.first for v in m.varied] for m in messages]
