"""Decoded messages behave like ROS messages at every depth (issue 11).

Proves, with rosbags (and genpy for rospy's time API) as the oracle:

- the README's own loop on a real Imu bag (``m.msg.linear_acceleration.x``),
  every field of every message reached by attribute equal to rosbags' value;
- a field named like a NumPy attribute (or like the message's own API) means
  the field, at every depth: top level, a nested fixed struct, a nested
  variable struct, elements of arrays of fixed and of variable structs, a
  fixed-size array of structs, and ``std_msgs/Bool[]`` elements' ``data``;
- constants at every depth, as class attributes, on real NavSatFix and Log
  messages and on generated types;
- time and duration values: ``secs``/``nsecs``, ``sec``/``nanosec``,
  ``to_sec()``/``to_nsec()`` equal to genpy's, value equality, order, hash;
- a message is a value: ``==``, ``repr``, ``to_dict()``, pickling (small:
  not the batch behind it), ``copy``, and through a process pool;
- arrays keep ``[name]`` and gain attribute access where nothing clashes;
- iteration is lazy: only what is touched is built.
"""

from __future__ import annotations

import base64
import concurrent.futures
import copy
import dataclasses
import json
import math
import multiprocessing
import pickle
import warnings
from pathlib import Path
from typing import Any

import genpy
import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

import fastbag
from fastbag.msg.messages import Duration, MessageList, Record, Time
from fastbag.msg.msgdef import parse_definition
from fastbag.tooling.synth import write_demo_bag

from conftest import data_file
from oracle import assert_same

REAL_IMU = "ros1v2/CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__sparkfun_razor@940d7874.bag"
REAL_FIX = "ros1v2/nobleo__rviz_satellite__sample.bag"  # /gps/fix: sensor_msgs/NavSatFix


def _rosbags(path: Path, topic: str) -> list:
    with AnyReader([path]) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        return [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(conns)]


# -- the README example on a real bag -------------------------------------------------------

def test_readme_loop_on_a_real_imu_bag():
    path = data_file(REAL_IMU)
    theirs = _rosbags(path, "/imu/data_raw")
    with fastbag.open(path) as bag:
        got = [(m.msg.linear_acceleration.x, m.msg.header.stamp.secs, m.msg.header.stamp.nsecs,
                m.msg.header.stamp.to_sec(), m.msg.orientation.w, m.msg["linear_acceleration"]["x"])
               for m in bag.messages(topics=["/imu/data_raw"])]
        assert len(got) == len(theirs) > 1000
        for (x, secs, nsecs, to_sec, w, x_by_name), t in zip(got, theirs):
            assert type(x) is float and x == t.linear_acceleration.x == x_by_name
            assert (secs, nsecs) == (t.header.stamp.sec, t.header.stamp.nanosec)
            assert to_sec == genpy.Time(secs, nsecs).to_sec()
            assert w == t.orientation.w
        imu = bag.read("/imu/data_raw")
        first = imu[0]
        assert first == next(iter(bag.messages(topics=["/imu/data_raw"]))).msg  # read() and messages() agree
        for i in (0, len(imu) // 2, len(imu) - 1):
            assert_same(imu[i], theirs[i], f"[{i}]")


def test_constants_at_every_depth_on_real_messages():
    """NavSatFix.status is a fixed struct (NavSatStatus) with constants; Log has its levels at the top."""
    path = data_file(REAL_FIX)
    theirs = _rosbags(path, "/gps/fix")
    with fastbag.open(path) as bag:
        fixes = [m.msg for m in bag.messages(topics=["/gps/fix"])]
    assert len(fixes) == len(theirs) > 10
    for ours, t in zip(fixes, theirs):
        status = ours.status
        assert status.status == t.status.status and status.service == t.status.service
        assert status.STATUS_FIX == 0 and status.STATUS_NO_FIX == -1 and status.SERVICE_GPS == 1
        assert (status.status == status.STATUS_FIX) == (t.status.status == t.status.STATUS_FIX)
        assert ours.COVARIANCE_TYPE_KNOWN == 3 == t.COVARIANCE_TYPE_KNOWN
        assert status._type == "sensor_msgs/NavSatStatus" and status.msgtype == "sensor_msgs/NavSatStatus"
        assert type(status).STATUS_GBAS_FIX == 2  # class-level, as genpy and rosbags have them
    path = data_file("ros1v2/aktaylor08__RosbagPandas__tests__data__rosout.bag")
    with fastbag.open(path) as bag:
        logs = [m.msg for m in bag.messages()]
    theirs = _rosbags(path, "/rosout")
    assert len(logs) == len(theirs) == 2
    for ours, t in zip(logs, theirs):
        assert ours.level == t.level and (ours.level == ours.ERROR) == (t.level == t.ERROR)
        assert (ours.DEBUG, ours.INFO, ours.WARN, ours.ERROR, ours.FATAL) == (1, 2, 4, 8, 16)
        assert ours.header.stamp.to_nsec() == t.header.stamp.sec * 10**9 + t.header.stamp.nanosec
        assert ours.topics == list(t.topics)


def test_dotted_paths_reach_through_arrays_of_messages_on_a_real_tf_bag():
    """``arr["transforms.child_frame_id"]`` is ``arr["transforms"]["child_frame_id"]``: per message, each
    transform's frame, as rosbags gives them. It said "field 'transforms' has no field ... (it has no fields)"."""
    path = data_file("ros1v2/cruise-automation__rosbag.js__fixtures__example-lz4.bag")
    theirs = _rosbags(path, "/tf")
    with fastbag.open(path) as bag:
        arr = bag.read("/tf")
    frames = arr["transforms.child_frame_id"]
    assert len(frames) == len(theirs) > 100
    assert [list(frames[i]) for i in range(len(arr))] == [[t.child_frame_id for t in m.transforms] for m in theirs]
    x = arr["transforms.transform.translation.x"]
    assert [list(x[i]) for i in range(len(arr))] == [[t.transform.translation.x for t in m.transforms] for m in theirs]


def test_a_path_into_arrays_of_fixed_structs_gives_each_messages_field():
    """An array of structs of varying length (a view per message): a field of its elements is each message's
    values of it (a Nested), where the path once stopped with an error pointing at ``.values``."""
    import struct

    from fastbag.msg.arrays import decode_messages

    definition = "p/Pt[] pts\n" + "=" * 80 + "\nMSG: p/Pt\nfloat32 z\nfloat32 w\n"
    arr = decode_messages("p/Top", definition, [struct.pack("<I", n) + np.arange(2 * n, dtype="<f4").tobytes()
                                                for n in (1, 3)])
    assert [arr["pts.z"][i].tolist() for i in range(2)] == [[0.0], [0.0, 2.0, 4.0]]
    assert [arr["pts"]["w"][i].tolist() for i in range(2)] == [[1.0], [1.0, 3.0, 5.0]]
    assert arr["pts"].values["z"].tolist() == arr["pts.z"].values.tolist() == [0.0, 0.0, 2.0, 4.0]
    with pytest.raises(fastbag.NotFoundError, match=r"has no field 'q'; fields: z, w"):
        arr["pts.q"]


def test_arrays_of_structs_on_a_real_tf_bag():
    path = data_file("ros1v2/cruise-automation__rosbag.js__fixtures__example-lz4.bag")
    theirs = _rosbags(path, "/tf")
    with fastbag.open(path) as bag:
        msgs = [m.msg for m in bag.messages(topics=["/tf"])]
    assert len(msgs) == len(theirs) > 100
    for ours, t in zip(msgs, theirs):
        # a list, as genpy's and rosbags' (code written for them tells arrays from messages so)
        assert isinstance(ours.transforms, list) and isinstance(ours.transforms, MessageList)
        assert not hasattr(ours.transforms, "__slots__") and len(ours.transforms) == len(t.transforms)
        assert ours.transforms + [] == list(ours.transforms) == ours.transforms == tuple(ours.transforms)
        assert json.loads(json.dumps([tr.child_frame_id for tr in ours.transforms])) == \
            [tr.child_frame_id for tr in t.transforms]
        assert ours.transforms is ours.transforms  # built once per message while it is the last one asked
        with pytest.raises(TypeError, match="read-only: list"):
            ours.transforms.append(ours.transforms[0])
        with pytest.raises(TypeError, match="read-only"):
            ours.transforms[0] = ours.transforms[-1]
        first = ours.transforms[0]
        assert first.transform.translation.x == t.transforms[0].transform.translation.x
        assert first.header.frame_id == t.transforms[0].header.frame_id
        assert ours.transforms[-1].child_frame_id == t.transforms[-1].child_frame_id
        assert [tr.transform.rotation.w for tr in ours.transforms] == [tr.transform.rotation.w for tr in t.transforms]


# -- names that clash with NumPy's (and with the message's own API) ------------------------

NUMPY_NAMES = ["data", "dtype", "shape", "size", "base", "flags", "real", "imag", "T", "ndim", "itemsize",
               "nbytes", "strides", "ctypes", "view", "copy", "item", "tolist", "astype", "sum", "mean", "min",
               "max", "all", "any", "fill", "sort", "reshape", "conj", "round", "nonzero", "tobytes"]
OWN_API = ["fields", "constants", "to_dict", "msgtype", "keys", "values", "items", "get"]


def _clash_types(name: str) -> dict[str, str]:
    """Types with a field ``name`` at every depth, and a Bool[] (whose elements' field is ``data``)."""
    top = "" if name == "flags" else f"int32 {name}\n"  # ``flags`` is already the Bool[] at the top
    return {
        "fbtest/Main": (f"{top}fbtest/Fixed fixed\nfbtest/Var var\nfbtest/Fixed[] fixeds\nfbtest/Var[] vars\n"
                        "fbtest/Fixed[2] pair\nstd_msgs/Bool[] flags\nuint8 LEVEL=4\n"),
        "fbtest/Fixed": f"float64 {name}\nint8 KIND_A=7\nuint8 other\n",
        "fbtest/Var": f"string label\nuint16 {name}\nstring KIND_B=text # not a comment\n",
        "std_msgs/Bool": "bool data\n",
    }


def _definition(types: dict[str, str], main: str) -> str:
    parts = [types[main]]
    for name, text in types.items():
        if name != main:
            parts.append("=" * 80 + f"\nMSG: {name}\n{text}")
    return "\n".join(parts)


def _store(types: dict[str, str]):
    store = get_typestore(Stores.EMPTY)
    registered = {}
    for name, text in types.items():
        registered.update(get_types_from_msg(text, name))
    store.register(registered)
    return store


def _write(path: Path, types: dict[str, str], main: str, payloads: list[bytes], topic: str = "/t") -> None:
    definition = _definition(types, main)
    md5 = parse_definition(main, definition).md5sum()
    with fastbag.Writer(path, chunk_size=256) as w:
        conn = w.add_connection(topic, main, definition, md5)
        for i, payload in enumerate(payloads):
            w.write(conn, 1_000 + i, payload)


def _clash_messages(store, name: str) -> list:
    ros = lambda t: t.replace("/", "/msg/")  # noqa: E731
    Main, Fixed, Var, Bool = (store.types[ros(t)] for t in ("fbtest/Main", "fbtest/Fixed", "fbtest/Var",
                                                             "std_msgs/Bool"))
    out = []
    for k in range(5):
        fields = {} if name == "flags" else {name: -k - 1}
        out.append(Main(**fields,
                        fixed=Fixed(**{name: k + 0.5, "other": k}),
                        var=Var(label=f"v{k}", **{name: 100 + k}),
                        fixeds=[Fixed(**{name: 10.0 * j + k, "other": j}) for j in range(k % 3)],
                        vars=[Var(label="x" * j, **{name: j}) for j in range(k % 4)],
                        pair=[Fixed(**{name: -1.0 * k, "other": 1}), Fixed(**{name: 2.0, "other": 2})],
                        flags=[Bool(data=bool((k + j) % 2)) for j in range(k % 3 + 1)]))
    return out


@pytest.mark.parametrize("name", NUMPY_NAMES + OWN_API)
def test_field_named_like_an_attribute_means_the_field(name, tmp_path):
    types = _clash_types(name)
    store = _store(types)
    msgs = _clash_messages(store, name)
    payloads = [bytes(store.serialize_ros1(m, "fbtest/msg/Main")) for m in msgs]
    path = tmp_path / "clash.bag"
    _write(path, types, "fbtest/Main", payloads)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastbag.FastbagWarning)  # the md5sum matches: the bag is what we think
        with fastbag.open(path) as bag:
            decoded = [m.msg for m in bag.messages()]
            arr = bag.read("/t")
            records = list(arr)
    assert len(decoded) == len(records) == len(msgs)
    for k, (ours, rec, theirs) in enumerate(zip(decoded, records, msgs)):
        assert ours == rec
        assert_same(ours, theirs, f"[{k}]")  # every field by attribute, checked against [name]
        if name != "flags":
            assert getattr(ours, name) == -k - 1 and type(getattr(ours, name)) is int  # top level
        assert getattr(ours.fixed, name) == k + 0.5 and ours.fixed[name] == k + 0.5  # nested fixed struct
        assert getattr(ours.var, name) == 100 + k and ours.var.label == f"v{k}"  # nested variable struct
        assert [getattr(f, name) for f in ours.fixeds] == [10.0 * j + k for j in range(k % 3)]
        assert [getattr(v, name) for v in ours.vars] == list(range(k % 4))  # array of variable structs
        assert getattr(ours.pair[0], name) == -1.0 * k and getattr(ours.pair[1], name) == 2.0  # T[2]
        assert [b.data for b in ours.flags] == [bool((k + j) % 2) for j in range(k % 3 + 1)]  # Bool[].data
        assert ours.flags[0].data is bool(k % 2)
        # constants at every depth, as class attributes
        assert ours.LEVEL == 4 and ours.fixed.KIND_A == 7 and ours.pair[1].KIND_A == 7
        assert ours.var.KIND_B == "text # not a comment"
        if ours.vars:
            assert ours.vars[0].KIND_B == "text # not a comment"
        # the API under names no field can take
        assert ours._fields == (() if name == "flags" else (name,)) + ("fixed", "var", "fixeds", "vars", "pair",
                                                                         "flags")
        assert ours._asdict()["fixed"][name] == k + 0.5
    # arrays keep [name] whatever the name
    assert np.array_equal(arr["fixed"][name], [k + 0.5 for k in range(5)])
    assert arr["var"][name].tolist() == [100 + k for k in range(5)]
    if name != "flags":
        assert np.asarray(arr[name]).tolist() == [-k - 1 for k in range(5)]


# -- time values --------------------------------------------------------------------------

def test_time_and_duration_follow_rospy():
    for secs, nsecs in [(0, 0), (1, 500_000_000), (1_700_000_000, 999_999_999), (2**32 - 1, 2**32 - 1)]:
        ours, theirs = Time(secs, nsecs), genpy.Time(secs, nsecs)
        assert ours.to_sec() == theirs.to_sec() and ours.to_nsec() == theirs.to_nsec()
        # constructed values are normalized as genpy's (decoded ones keep the stored fields)
        assert (ours.secs, ours.nsecs, ours.sec, ours.nanosec) == (theirs.secs, theirs.nsecs) * 2
        assert ours == Time(secs, nsecs) and hash(ours) == hash(Time(secs, nsecs))
        assert ours != Duration(secs, nsecs)  # a time is not a duration
        assert pickle.loads(pickle.dumps(ours)) == ours and copy.deepcopy(ours) == ours
    for secs, nsecs in [(-1, 0), (-(2**31), -1), (5, -500_000_000)]:
        ours, theirs = Duration(secs, nsecs), genpy.Duration(secs, nsecs)
        assert ours.to_sec() == theirs.to_sec() and ours.to_nsec() == theirs.to_nsec()
    assert Time(1, 2) < Time(1, 3) < Time(2, 0) and sorted([Time(3, 0), Time(1, 5)]) == [Time(1, 5), Time(3, 0)]
    assert repr(Time(1, 2)) == "Time(secs=1, nsecs=2)" and Time(1, 2).to_dict() == {"secs": 1, "nsecs": 2}
    assert Time(1, 2)["secs"] == 1 and Time(1, 2)["nanosec"] == 2
    with pytest.raises(KeyError):
        Time(1, 2)["x"]


def test_time_fields_in_messages(tmp_path):
    """time, duration, time[2] and duration[] decode to Time/Duration values with the oracle's numbers."""
    types = {"fbtest/Main": "time t\nduration d\ntime[2] ts\nduration[] ds\nfbtest/Stamped s\n",
             "fbtest/Stamped": "time stamp\nstring frame\n"}
    store = _store(types)
    T, D = store.types["builtin_interfaces/msg/Time"], store.types["builtin_interfaces/msg/Duration"]
    Main, Stamped = store.types["fbtest/msg/Main"], store.types["fbtest/msg/Stamped"]
    msgs = [Main(t=T(sec=2**31 - 1, nanosec=7), d=D(sec=-5, nanosec=3), ts=[T(sec=1, nanosec=2), T(sec=3, nanosec=4)],
                 ds=[D(sec=-1, nanosec=j) for j in range(k)], s=Stamped(stamp=T(sec=k, nanosec=k), frame=f"f{k}"))
            for k in range(3)]
    _write(tmp_path / "t.bag", types, "fbtest/Main", [bytes(store.serialize_ros1(m, "fbtest/msg/Main")) for m in msgs])
    with fastbag.open(tmp_path / "t.bag") as bag:
        got = [m.msg for m in bag.messages()]
    for k, (ours, theirs) in enumerate(zip(got, msgs)):
        assert_same(ours, theirs, f"[{k}]")
        assert type(ours.t) is Time and ours.t == Time(2**31 - 1, 7) and ours.t.to_nsec() == (2**31 - 1) * 10**9 + 7
        assert type(ours.d) is Duration and ours.d.to_sec() == genpy.Duration(-5, 3).to_sec()
        assert ours.ts == [Time(1, 2), Time(3, 4)] and ours.ds == [Duration(-1, j) for j in range(k)]
        assert ours.s.stamp == Time(k, k) and ours.s.stamp.secs == k


def test_ros2_style_time_type_gets_the_time_api(tmp_path):
    """A message type builtin_interfaces/Time (fields sec, nanosec) has to_sec()/to_nsec() and secs/nsecs too."""
    types = {"fbtest/Main": "builtin_interfaces/Time stamp\n",
             "builtin_interfaces/Time": "int32 sec\nuint32 nanosec\n"}
    definition = _definition(types, "fbtest/Main")
    payload = np.array([(7, 250_000_000)], dtype=[("sec", "<i4"), ("nanosec", "<u4")]).tobytes()
    with fastbag.Writer(tmp_path / "t.bag") as w:
        w.write(w.add_connection("/t", "fbtest/Main", definition,
                                 parse_definition("fbtest/Main", definition).md5sum()), 1, payload)
    with fastbag.open(tmp_path / "t.bag") as bag:
        stamp = next(bag.messages()).msg.stamp
    assert (stamp.sec, stamp.nanosec, stamp.secs, stamp.nsecs) == (7, 250_000_000, 7, 250_000_000)
    assert stamp.to_sec() == 7.25 and stamp.to_nsec() == 7_250_000_000


# -- a message is a value --------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "demo.bag"
    write_demo_bag(path, seconds=1, compression="lz4", points=2000)
    return path


def _child_x(msg):
    return msg.linear_acceleration.x, msg.header.stamp, msg


def test_messages_are_values(demo):
    with fastbag.open(demo) as bag:
        msgs = [m for m in bag.messages(topics=["/imu", "/tf", "/points"])]
        imu = [m.msg for m in msgs if m.topic == "/imu"]
        tf = [m.msg for m in msgs if m.topic == "/tf"]
        points = [m.msg for m in msgs if m.topic == "/points"]
        arr = bag.read("/imu")
    a, b = imu[0], imu[1]
    assert a == arr[0] and a != b and a == a and not (a != arr[0])
    text = repr(a)
    assert text.startswith("sensor_msgs/Imu(header=std_msgs/Header(seq=") and "stamp=Time(secs=" in text
    assert "linear_acceleration=geometry_msgs/Vector3(x=" in text
    plain = a.to_dict()
    assert plain["header"]["stamp"] == {"secs": a.header.stamp.secs, "nsecs": a.header.stamp.nsecs}
    assert plain["linear_acceleration"] == {"x": a.linear_acceleration.x, "y": a.linear_acceleration.y,
                                            "z": a.linear_acceleration.z}
    assert isinstance(plain["orientation_covariance"], np.ndarray)
    assert isinstance(tf[0].to_dict()["transforms"], list) and isinstance(tf[0].to_dict()["transforms"][0], dict)
    # pickling: a detached copy of the values, not the batch behind them
    for msg in (a, tf[0], points[0]):
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            back = pickle.loads(pickle.dumps(msg, protocol=protocol))
            assert back == msg and type(back).__name__ == type(msg).__name__ and isinstance(back, Record)
            assert back._type == msg._type and back._constants == msg._constants
        assert copy.copy(msg) == msg and copy.deepcopy(msg) == msg
    back = pickle.loads(pickle.dumps(tf[0]))
    assert back.transforms[0].transform.translation.x == tf[0].transforms[0].transform.translation.x
    assert back.transforms[0].header.stamp.to_sec() == tf[0].transforms[0].header.stamp.to_sec()
    assert len(pickle.dumps(a)) < 2000  # one Imu's values (a batch holds thousands)
    assert len(pickle.dumps(points[0])) < points[0].data.nbytes + 2000
    first_imu = next(m for m in msgs if m.topic == "/imu")
    assert len(pickle.dumps(first_imu)) < 4000  # the envelope too, with a copy of its own bytes only
    envelope = pickle.loads(pickle.dumps(first_imu))
    assert bytes(envelope.data) == bytes(first_imu.data) and envelope.msg == first_imu.msg
    # arrays pickle after their messages were looked at too (the run-time classes they then held were not
    # picklable: every array of the type failed, a DataLoader worker returning one among them)
    for array, stamp in ((arr, lambda m: m.header.stamp), (arr["header"], lambda m: m.stamp),
                         (arr[2:5], lambda m: m.header.stamp)):
        back = pickle.loads(pickle.dumps(array))
        assert len(back) == len(array) and back[0] == array[0] and back[0]._type == array[0]._type
        assert stamp(back[0]).to_sec() == stamp(array[0]).to_sec()


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_arrays_pickle_as_their_own_values_and_parts_keep_their_own_elements(tmp_path, compression):
    """A read's ragged columns are views of the file's mapping or of whole decompressed chunks: pickled (to
    a worker process) they carry their own elements only, not those buffers (an uncompressed bag's clouds
    pickled the whole file). A part of a read (``arr[5:8]``) gives its own elements as ``values``, at its
    ``offsets``, and pickles them alone (audit: concurrency pass)."""
    path = tmp_path / f"demo-{compression}.bag"
    write_demo_bag(path, seconds=2, compression=compression, points=2000)
    with fastbag.open(path) as bag:
        points, tf = bag.read("/points"), bag.read("/tf")
        size = path.stat().st_size
        own = sum(len(m.data) for m in bag.messages(topics=["/points"], raw=True))
    assert own < size / 2  # (else the bound below proves nothing)
    assert len(pickle.dumps(points)) < own * 1.05 + 10_000
    back = pickle.loads(pickle.dumps(points))
    assert all(np.array_equal(back["data"][i], points["data"][i]) for i in range(len(points)))
    assert len(pickle.dumps(points[:2])) < 2 * points["data"][0].nbytes + 10_000
    part = tf[5:8]
    transforms = part["transforms"]
    assert int(transforms.offsets[-1]) == len(transforms.values) == sum(len(tf[k].transforms) for k in (5, 6, 7))
    assert transforms.values["child_frame_id"].tolist() == \
        [t.child_frame_id for k in (5, 6, 7) for t in tf[k].transforms]
    assert len(pickle.dumps(part)) < len(pickle.dumps(tf)) / 10
    back = pickle.loads(pickle.dumps(part))
    assert [[t.transform.translation.x for t in back[k].transforms] for k in range(3)] == \
        [[t.transform.translation.x for t in tf[k].transforms] for k in (5, 6, 7)]


def test_messages_cross_process_boundaries(demo):
    with fastbag.open(demo) as bag:
        imu = [m.msg for m in bag.messages(topics=["/imu"])][:20]
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        results = list(pool.map(_child_x, imu))
    for msg, (x, stamp, back) in zip(imu, results):
        assert x == msg.linear_acceleration.x and stamp == msg.header.stamp and back == msg


# -- arrays ------------------------------------------------------------------------------------

def test_arrays_gain_attribute_access(demo):
    with fastbag.open(demo) as bag:
        imu = bag.read("/imu")
        pc = bag.read("/points")
    assert np.array_equal(imu.linear_acceleration.x, imu["linear_acceleration"]["x"])
    assert np.array_equal(imu.header.stamp.secs, imu["header"]["stamp"]["secs"])
    assert list(imu.header.frame_id) == list(imu["header"]["frame_id"])
    assert np.array_equal(imu.orientation_covariance, imu["orientation_covariance"])
    assert imu.constants == imu["header"].constants == {}
    # the array's own attributes win: ``fields`` of a PointCloud2 topic is the list of its field names
    assert pc.fields == ["header", "height", "width", "fields", "is_bigendian", "point_step", "row_step", "data",
                         "is_dense"]
    assert pc["fields"].counts.tolist() == [len(m.fields) for m in pc]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        imu.nope


def test_pointcloud_fields_mean_the_field(demo):
    """PointCloud2.fields is the PointField list (genpy and rosbags code reads it so), not the name list."""
    with fastbag.open(demo) as bag:
        msg = next(bag.messages(topics=["/points"])).msg
        theirs = _rosbags(demo, "/points")[0]
    assert [f.name for f in msg.fields] == [f.name for f in theirs.fields]
    assert [f.offset for f in msg.fields] == [f.offset for f in theirs.fields]
    assert msg.fields[0].FLOAT32 == 7 == theirs.fields[0].FLOAT32
    assert list(msg.fields["name"]) == [f.name for f in theirs.fields]  # a column of the elements
    assert msg._fields[3] == "fields" and msg["fields"] == msg.fields
    points = fastbag.pointcloud(msg)
    assert points.size == msg.width * msg.height


# -- laziness -----------------------------------------------------------------------------------

def test_iteration_builds_only_what_is_touched(demo):
    with fastbag.open(demo) as bag:
        msgs = []
        for m in bag.messages(topics=["/imu"]):
            assert m.msg.linear_acceleration.x == m.msg["linear_acceleration"]["x"]
            msgs.append(m.msg)
        batches = bag.chunk_count  # lz4 chunks: a batch per chunk
    sources = {id(m._src): m._src for m in msgs}
    assert 1 <= len(sources) <= batches < len(msgs) / 10  # one per decoded batch, shared by its messages
    for source in sources.values():
        assert set(source.children) == {"linear_acceleration"} and not source.cols and not source.times
        assert set(source.children["linear_acceleration"].cols) == {"x"}


def test_type_without_fields_and_missing_names(tmp_path):
    with fastbag.Writer(tmp_path / "e.bag") as w:
        w.write(w.add_connection("/e", "fbtest/Empty", "", parse_definition("fbtest/Empty", "",
                                                                            allow_empty=True).md5sum()), 1, b"")
    with fastbag.open(tmp_path / "e.bag") as bag:
        msg = next(bag.messages()).msg
    assert msg._fields == () and msg.to_dict() == {} and repr(msg) == "fbtest/Empty()"
    assert pickle.loads(pickle.dumps(msg)) == msg
    with pytest.raises(AttributeError, match="has no attribute 'x'"):
        msg.x
    with pytest.raises(KeyError, match="no field 'x'"):
        msg["x"]


def test_fields_are_read_only(demo):
    with fastbag.open(demo) as bag:
        msg = next(bag.messages(topics=["/imu"])).msg
    with pytest.raises(AttributeError):
        msg.linear_acceleration = None
    assert math.isfinite(msg.linear_acceleration.x)


# -- structs with no fields (constants only) --------------------------------------------------

def test_fixed_array_of_constants_only_structs_on_a_real_file():
    """test_msgs/Arrays.constants_values (Constants[3]: constants, no field) in rosbag2's cdr_test MCAP: message
    objects with the type's constants, as rosbags gives them (mcap_ros2 gives objects too, without constants)."""
    path = data_file("mcap/ros2__rosbag2__rosbag2_tests__resources__mcap__cdr_test")
    with AnyReader([path]) as reader:
        conns = [c for c in reader.connections if c.topic == "/array_topic"]
        theirs = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(conns)]
    with warnings.catch_warnings():  # mcap_ros2.reader warns that it is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        from mcap_ros2.reader import read_ros2_messages
        peer = [m.ros_msg for m in read_ros2_messages(str(path / "cdr_test_0.mcap"), topics=["/array_topic"])]
    with fastbag.open(path) as bag:
        got = [m.msg for m in bag.messages(topics="/array_topic")]
        arr = bag.read("/array_topic")
    assert len(got) == len(theirs) == len(peer) == len(arr) > 0
    names = [n for n in dir(theirs[0].constants_values[0]) if n.isupper()]
    assert "INT8_CONST" in names
    for k, (ours, their, other) in enumerate(zip(got, theirs, peer)):
        for values in (ours.constants_values, arr[k].constants_values):
            assert len(values) == len(their.constants_values) == len(other.constants_values) == 3
            for mine, theirs_element in zip(values, their.constants_values):
                assert isinstance(mine, Record) and mine._type == "test_msgs/Constants" and mine._fields == ()
                for name in names:
                    assert getattr(mine, name) == getattr(theirs_element, name) == mine._constants[name], name
                assert not isinstance(other.constants_values[0], np.void)  # mcap_ros2: an object too
        assert ours.constants_values[0].INT8_CONST == -50
        assert ours.to_dict()["constants_values"] == [{}, {}, {}]
        assert ours.to_dict(plain=True)["constants_values"] == [{}, {}, {}]
        assert isinstance(ours.basic_types_values[0], Record)  # as it was: elements of structs with fields
        back = pickle.loads(pickle.dumps(ours))
        assert back == ours and back.constants_values[1].UINT64_CONST == their.constants_values[1].UINT64_CONST


# -- to_dict(plain=True): JSON-ready ------------------------------------------------------------

def _json_oracle(value: Any, ros1: bool) -> Any:
    """A rosbags value as to_dict(plain=True) must give it: dicts by field (constants left out), arrays as
    lists, uint8 arrays as base64 text, ROS1 time/duration as {"secs", "nsecs"}."""
    name = type(value).__name__
    if ros1 and name in ("builtin_interfaces__msg__Time", "builtin_interfaces__msg__Duration"):
        nsecs = value.nanosec if name.endswith("Time") else (value.nanosec + 2**31) % 2**32 - 2**31
        return {"secs": value.sec, "nsecs": nsecs}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _json_oracle(getattr(value, f.name), ros1) for f in dataclasses.fields(value)
               if f.default is dataclasses.MISSING and f.name != "__msgtype__"}
        if name == "std_msgs__msg__ByteMultiArray" and not ros1:  # ROS2 byte[]: an octet (uint8, as in fastbag)
            out["data"] = base64.b64encode(value.data.tobytes()).decode("ascii")  # rosbags reads it as int8
        return out
    if isinstance(value, np.ndarray):
        if value.dtype == np.uint8:
            return base64.b64encode(value.tobytes()).decode("ascii")
        return value.tolist()
    if isinstance(value, list):
        return [_json_oracle(v, ros1) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


@pytest.mark.parametrize("relative", [
    REAL_IMU,                                                    # Imu
    REAL_FIX,                                                    # NavSatFix
    "ros1v2/eric-wieser__ros_numpy__test__test.bag",             # Image, PointCloud2, CompressedImage, OccupancyGrid
    "ros1v2/CCNYRoboticsLab__scan_tools__laser_scan_matcher__demo__demo.bag",  # LaserScan
    "db3/geocamxyz__rosbags-rs__tests__test_bags__test_bag_sqlite3",  # ROS2: 94 types (Image, JointState, ...)
])
def test_to_dict_plain_is_json_ready_on_real_messages(relative):
    path = data_file(relative)
    ros1 = relative.startswith("ros1")
    with AnyReader([path]) as reader:
        theirs = {}
        for conn, _, raw in reader.messages():
            if conn.topic not in theirs:
                theirs[conn.topic] = reader.deserialize(raw, conn.msgtype)
    with fastbag.open(path) as bag:
        ours = {}
        for m in bag.messages():
            ours.setdefault(m.topic, m.msg)
    assert set(ours) == set(theirs) and len(ours) >= (90 if not ros1 else 1)
    types = set()
    for topic, msg in ours.items():
        text = json.dumps(msg.to_dict(plain=True))
        assert text == json.dumps(_json_oracle(theirs[topic], ros1)), topic
        assert json.loads(text).keys() == msg.to_dict().keys()
        assert json.dumps(msg._asdict(True)) == text
        types.add(msg._type)
    if ros1 and "Image" in relative:
        assert {"sensor_msgs/Image", "sensor_msgs/PointCloud2"} <= types
    if not ros1:
        assert {"sensor_msgs/Image", "sensor_msgs/JointState", "sensor_msgs/Imu", "sensor_msgs/PointCloud2"} <= types


def test_to_dict_default_keeps_numpy_arrays_and_plain_converts(demo):
    with fastbag.open(demo) as bag:
        imu = next(bag.messages(topics=["/imu"])).msg
        cloud = next(bag.messages(topics=["/points"])).msg
    default = imu.to_dict()
    assert isinstance(default["orientation_covariance"], np.ndarray)  # as documented: arrays stay NumPy
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(default)
    plain = imu.to_dict(plain=True)
    assert plain["orientation_covariance"] == imu.orientation_covariance.tolist()
    assert all(type(v) is float for v in plain["orientation_covariance"])
    assert plain["header"]["stamp"] == {"secs": imu.header.stamp.secs, "nsecs": imu.header.stamp.nsecs}
    data = json.loads(json.dumps(cloud.to_dict(plain=True)))["data"]
    assert base64.b64decode(data) == bytes(cloud.data)  # uint8[] as base64 text (rosbridge's convention)
    assert json.loads(json.dumps(cloud.to_dict(plain=True)))["fields"][0]["name"] == cloud.fields[0].name


def test_many_interleaved_topics_decode_each_message_as_its_own(tmp_path):
    """A batch holding hundreds of topics round-robin (diagnostics-heavy robots): each message decodes to its
    own value. The batch is grouped by connection with one sort (it cost a pass over the batch per topic:
    16.7 us a message over 1,000 topics, 6.9 us now; audit E #5)."""
    path = tmp_path / "many.bag"
    with fastbag.Writer(path) as writer:
        connections = [writer.add_connection(f"/t{i}", "std_msgs/Float64", "float64 data\n",
                                              "fdb28210bfa9d7c91146260178d9a584") for i in range(300)]
        for k in range(6000):
            writer.write(connections[(k * 7) % 300], 10**18 + k, np.float64(k).tobytes())
    with fastbag.open(path) as bag:
        got = [(m.topic, m.msg.data) for m in bag.messages()]
        by_topic = [(m.topic, m.msg.data) for m in bag.messages(topics=["/t3", "/t250"])]
    assert got == [(f"/t{(k * 7) % 300}", float(k)) for k in range(6000)]
    assert by_topic == [(t, v) for t, v in got if t in ("/t3", "/t250")]


def test_connections_whose_definitions_differ_in_comments_share_one_layout(tmp_path, monkeypatch):
    """A topic merged from many nodes' recordings: 200 connections of one type whose texts differ only in a
    comment. Each text was parsed and compiled again (1.3 ms a connection: messages() of 5,000 messages over
    500 such connections 0.8 s, rosbags' speed); one layout and one set of classes serve them now. A string
    constant's '#' is its value, not a comment: texts differing there stay two definitions."""
    from fastbag.msg import layout, messages
    from fastbag.msg.msgdef import definition_code

    path = tmp_path / "merged.bag"
    md5 = "da5909fbe378aeaf85e547e830cc1bb7"  # std_msgs/Int32
    with fastbag.Writer(path) as writer:
        for k in range(200):
            c = writer.add_connection("/n", "std_msgs/Int32", f"# node {k}\nint32 data  # comment {k}\n", md5)
            writer.write(c, 10**9 + k, k.to_bytes(4, "little"))
    compiled, typed = [], []
    real_layout, real_types = layout.layout_for, messages.message_types
    monkeypatch.setattr(layout, "layout_for", lambda *a, **k: compiled.append(a) or real_layout(*a, **k))
    monkeypatch.setattr(messages, "message_types", lambda *a, **k: typed.append(a) or real_types(*a, **k))
    with fastbag.open(path) as bag:
        assert [m.msg.data for m in bag.messages()] == list(range(200))
        assert bag.read("/n")["data"].tolist() == list(range(200))
    assert len(compiled) == 1 and len(typed) == 1
    assert definition_code('string A=x#y\nint32 b # c\n') == ("string A=x#y", "int32 b")
    assert definition_code('string A=x#y') != definition_code('string A=x#z')
