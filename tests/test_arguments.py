"""What users pass to the Bag's methods: time bounds in the forms they hold them, topic names, and whole-bag
iteration over topics that cannot all be decoded."""

from __future__ import annotations

import datetime
import warnings

import numpy as np
import pytest

import fastbag
from conftest import DATA, NO_DATA
from fastbag.bag import time_ns
from fastbag.msg.messages import Time

T0 = 1_700_000_000 * 10**9  # 2023-11-14 22:13:20 UTC


@pytest.fixture
def strings_bag(tmp_path):
    """/good (std_msgs/String) every 10 ms from T0, interleaved with /opaque, a type with no definition."""
    path = tmp_path / "mixed.bag"
    with fastbag.Writer(path) as writer:
        good = writer.add_connection("/good", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        opaque = writer.add_connection("/opaque", "my_pkg/Blob", "", "0123456789abcdef0123456789abcdef")
        for k in range(20):
            text = f"m{k}".encode()
            writer.write(good, T0 + k * 10**7, len(text).to_bytes(4, "little") + text)
            writer.write(opaque, T0 + k * 10**7 + 1, b"\x01\x02\x03")
    return path


@pytest.mark.parametrize("value", [
    T0 + 5 * 10**7, np.int64(T0 + 5 * 10**7), np.uint64(T0 + 5 * 10**7),
    Time(1_700_000_000, 50_000_000),                                  # what m.msg.header.stamp holds
    datetime.datetime(2023, 11, 14, 22, 13, 20, 50_000, tzinfo=datetime.timezone.utc),
    np.datetime64(T0 + 5 * 10**7, "ns"), np.datetime64("2023-11-14T22:13:20.050"),
])
def test_time_bounds_in_every_form_users_hold_them(strings_bag, value):
    with fastbag.open(strings_bag) as bag:
        assert bag.times("/good", start=value)[0] == T0 + 5 * 10**7
        assert len(bag.read("/good", end=value)) == 5
        assert [m.msg.data for m in bag.messages(topics="/good", start=value, end=T0 + 7 * 10**7)] == ["m5", "m6"]


def test_time_bounds_from_other_libraries():
    pd = pytest.importorskip("pandas")
    assert time_ns(pd.Timestamp(T0 + 123, unit="ns")) == T0 + 123  # nanoseconds kept
    naive = datetime.datetime(2023, 11, 14, 22, 13, 20)
    assert time_ns(naive) == int(naive.timestamp()) * 10**9  # naive: local time, as datetime.timestamp() reads it

    class Ros2Stamp:  # builtin_interfaces/Time as rclpy and rosbags give it
        sec, nanosec = 1_700_000_000, 7

    assert time_ns(Ros2Stamp()) == T0 + 7 and time_ns(None) is None


@pytest.fixture
def local_zone(monkeypatch):
    """Set this process's local time zone (TZ and tzset), restored after."""
    import time

    def set_zone(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def test_a_naive_datetime_away_from_utc_is_said_to_be_local_time(strings_bag, local_zone):
    """A time from fastbag's own tables (to_pandas' index, to_polars' column) is naive UTC; passed back as a
    Python datetime (polars gives one) it is read as local time, as datetime.timestamp() reads it: in New
    York that selected nothing, silently (QA). It still reads so, and says how to pass a UTC one."""
    pd = pytest.importorskip("pandas")
    with fastbag.open(strings_bag) as bag:
        utc = bag.read("/good").to_pandas().index[5].to_pydatetime()  # 2023-11-14 22:13:20.05, naive (UTC)
        local_zone("America/New_York")
        with pytest.warns(fastbag.FastbagWarning, match=r"start 2023-11-14T22:13:20.050000 is a naive datetime: "
                          r"read as local time \(EST, UTC-05:00\).*start.replace\(tzinfo=datetime.timezone.utc\)"):
            assert len(bag.read("/good", start=utc)) == 0  # five hours later than the bag
        assert len(bag.read("/good", start=utc.replace(tzinfo=datetime.timezone.utc))) == 15
        assert len(bag.read("/good", start=pd.Timestamp(utc))) == 15  # naive pandas and NumPy times: UTC
        local_zone("UTC")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert len(bag.read("/good", start=utc)) == 15  # local time is UTC: nothing to say


@pytest.mark.parametrize("value, hint", [(T0 / 1e9 + 1, "seconds"), (np.float64(3.0), "seconds"), ("1", ""),
                                         (True, "")])
def test_float_and_other_time_bounds_are_refused(strings_bag, value, hint):
    """A float was read as nanoseconds: seconds since the epoch selected every message (start) or none
    (end), with no word. Seconds and nanoseconds cannot be told apart, so a float is refused."""
    with fastbag.open(strings_bag) as bag:
        for call in (lambda: bag.read("/good", start=value), lambda: list(bag.messages(end=value)),
                     lambda: bag.times("/good", start=value)):
            with pytest.raises(TypeError, match=f"must be int nanoseconds.*{hint}"):
                call()


def test_int_seconds_of_the_bag_are_refused(strings_bag, tmp_path):
    """An int is nanoseconds: the bag's time in seconds (1_700_000_000) selected every message (start) or none
    (end), with no word. One far before the bag that falls inside it read as seconds is refused."""
    with fastbag.open(strings_bag) as bag:
        for seconds in (T0 // 10**9, np.int64(T0 // 10**9)):  # (the bag lasts 0.2 s: one second is inside)
            for call in (lambda: bag.read("/good", start=seconds), lambda: bag.messages(end=seconds),
                         lambda: bag.times("/good", start=seconds), lambda: bag.iter_read("/good", end=seconds),
                         lambda: bag.read_messages(start_time=seconds)):
                with pytest.raises(TypeError, match=f"^(start|end)(_time)?={seconds} is nanoseconds, "
                                                    r"1\.700 s after 1970-01-01, long before this bag; read as "
                                                    r"seconds it falls inside the bag: pass int\(seconds \* 1e9\)"):
                    next(iter(call()))
        assert len(bag.read("/good", start=10**9)) == 20  # any other bound before the bag: every message
        assert len(bag.read("/good", end=T0 // 10**9 + 10)) == 0  # seconds past the bag: none, as ns say
    sim = tmp_path / "sim.bag"  # simulated time from 1 s: small ints are its nanoseconds
    with fastbag.Writer(sim) as writer:
        c = writer.add_connection("/good", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        for k in range(20):
            writer.write(c, 10**9 + k * 10**7, (1).to_bytes(4, "little") + b"x")
    with fastbag.open(sim) as bag:
        assert len(bag.read("/good", start=10**9 + 5 * 10**7)) == 15 and len(bag.read("/good", start=3)) == 20
        # Only a plain int can be seconds: a Time, a stamp or a datetime64 of 1 ns says its unit (they were
        # refused as "start=1 is nanoseconds ... pass a Time"), as does rosbag's Time(0) end, whose end + 1
        # read_messages made was refused as "end=1".
        for bound in (Time(0, 1), np.datetime64(1, "ns")):
            assert len(list(bag.messages(start=bound))) == 20 and len(bag.read("/good", start=bound)) == 20
        assert list(bag.read_messages(end_time=Time(0))) == []
        with pytest.raises(TypeError, match="^start=1 is nanoseconds"):
            bag.read("/good", start=1)


def test_int_seconds_are_judged_by_the_whole_bag_on_every_path(tmp_path):
    """Whether an int is refused as seconds depended on the index a call read: a fresh MCAP handle's topic
    index (from 100 s) refused start=150 in read/times/iter_read, while messages() (the whole bag, from a
    message at 0) read it; after messages() every call read it. The whole bag's range decides now."""
    from mcap.writer import Writer

    path = tmp_path / "sim.mcap"
    with path.open("wb") as f:
        writer = Writer(f)
        writer.start("ros1", "test")
        schema = writer.register_schema("std_msgs/Int32", "ros1msg", b"int32 data\n")
        latched, odom = (writer.register_channel(t, "ros1", schema) for t in ("/latched", "/odom"))
        writer.add_message(latched, log_time=0, publish_time=0, data=(7).to_bytes(4, "little"))
        for k in range(201):
            writer.add_message(odom, log_time=(100 + k // 2) * 10**9 + k % 2, publish_time=0,
                               data=k.to_bytes(4, "little"))
        writer.finish()
    for first in ("read", "messages"):
        with fastbag.open(path) as bag:
            calls = {"read": lambda: len(bag.read("/odom", start=150)),
                     "messages": lambda: len(list(bag.messages(topics=["/odom"], start=150))),
                     "times": lambda: len(bag.times("/odom", start=150)),
                     "iter_read": lambda: sum(map(len, bag.iter_read("/odom", start=150)))}
            order = [first] + [name for name in calls if name != first]
            assert {name: calls[name]() for name in order} == dict.fromkeys(calls, 201)  # (150 ns: every one)


def test_topic_arguments_of_the_wrong_type_say_so(strings_bag):
    with fastbag.open(strings_bag) as bag:
        with pytest.raises(TypeError, match=r"a topic is one name \(str\), not list"):
            bag.read(["/good"])
        with pytest.raises(TypeError, match="not bytes"):
            list(bag.messages(topics=b"/good"))
        with pytest.raises(TypeError, match="got int 3"):
            list(bag.messages(topics=["/good", 3]))
        for missing in (lambda: bag.read("/nope"), lambda: bag.times("/nope"), lambda: bag.messages("/nope"),
                        lambda: bag.read("/good")["nope"],
                        lambda: next(bag.messages("/good")).msg["nope"]):
            # one class for "no such topic or field": a FastbagError, and a KeyError as dict lookups raise
            with pytest.raises(fastbag.NotFoundError, match="no (topic '/nope'|field 'nope')") as caught:
                missing()
            assert isinstance(caught.value, KeyError) and isinstance(caught.value, fastbag.FastbagError)
            assert not str(caught.value).startswith(("'", '"'))  # the message, not its repr as KeyError gives


def test_whole_bag_iteration_goes_past_a_topic_that_cannot_be_decoded(strings_bag):
    """bag.messages() raised at the first /opaque message (no definition), so /good yielded nothing; now
    every message comes, /opaque's with a msg that raises the error when used, said once in a warning."""
    with fastbag.open(strings_bag) as bag, pytest.warns(fastbag.FastbagWarning, match="/opaque cannot be decoded"):
        got = list(bag.messages())
    assert [m.topic for m in got] == ["/good", "/opaque"] * 20
    assert [m.msg.data for m in got if m.topic == "/good"] == [f"m{k}" for k in range(20)]
    opaque = got[1]
    assert not opaque.msg and bytes(opaque.data) == b"\x01\x02\x03" and "undecodable" in repr(opaque.msg)
    for use in (lambda: opaque.msg.data, lambda: opaque.msg["data"], lambda: opaque.msg.to_dict()):
        with pytest.raises(fastbag.DecodeError, match="definition is empty.*pass definitions="):
            use()
    with pytest.raises(AttributeError):  # protocols probed by name stay absent
        opaque.msg.__array_interface__
    # its type is known all the same: a loop that dispatches on it (rospy's _type, rosbags' __msgtype__) reaches
    # the error where it uses a field, not a bare AttributeError: _type (QA)
    assert str(opaque.msg._type) == "my_pkg/Blob" and opaque.msg._type == "my_pkg/msg/Blob"
    assert opaque.msg.__msgtype__ == "my_pkg/msg/Blob" and type(opaque.msg.__msgtype__) is str
    import pickle

    assert str(pickle.loads(pickle.dumps(opaque.msg))._type) == "my_pkg/Blob"


def test_a_wrong_stored_definition_is_overridden_by_the_users():
    """The talker recording stores 'uint8 level' as rcl_interfaces/msg/Log: its /rosout rows cannot decode
    with it (rosbags, with its own Log, decodes them). The whole-bag loop still yields /topic's messages, and
    definitions= replaces the stored text."""
    path = DATA / "db3" / "ros2__rosbag2__rosbag2_py__test__resources__sqlite3__talker"
    if not path.exists():
        pytest.skip(NO_DATA)
    from rosbags.typesys import Stores, get_typestore

    from fastbag.rosbag2.definitions import shipped

    store = get_typestore(Stores.ROS2_HUMBLE)
    with pytest.warns(fastbag.FastbagWarning, match="ParameterEvent stored in the recording is incomplete"):
        bag = fastbag.open(path)
    with bag:
        assert bag.topics["/rosout"].connections[0].definition == "uint8 level"
        events = bag.read("/parameter_events")  # stored as 'Parameter[] new_parameters': the shipped one reads
        assert len(events) == 0 and events.fields[:3] == ["stamp", "node", "new_parameters"]
        assert events.node.tolist() == [] and events.stamp.sec.dtype == np.int32
        with pytest.raises(fastbag.DecodeError, match=r"bytes left over .*at byte 5 of its 176\); the definition "
                           r"does not describe these messages .*pass the right one as definitions="):
            bag.read("/rosout")
        with pytest.warns(fastbag.FastbagWarning, match="/rosout cannot be decoded"):
            got = list(bag.messages())
        topic = [m.msg.data for m in got if m.topic == "/topic"]
        rosout = [bytes(m.data) for m in got if m.topic == "/rosout"]
    assert len(topic) == 10 and topic[0].startswith("Hello, world!") and rosout
    log = shipped("rcl_interfaces", "msg", "Log")
    with fastbag.open(path, definitions={"rcl_interfaces/msg/Log": log}) as bag:
        logs = bag.read("/rosout")
        messages = [m.msg for m in bag.messages(topics="/rosout")]
    theirs = [store.deserialize_cdr(data, "rcl_interfaces/msg/Log") for data in rosout]
    assert list(logs["msg"]) == [m.msg for m in theirs] and [m.name for m in messages] == [m.name for m in theirs]
    assert [m.level for m in messages] == [m.level for m in theirs]


def test_field_names_are_in_a_topic_array_and_stamps_widen_to_ns():
    """'header' in imu was False (in iterated the messages); header.stamp.secs * 10**9 overflows uint32
    silently: to_ns widens first. Checked against rosbags' stamps of a real Imu topic and a ROS 2 one."""
    from rosbags.highlevel import AnyReader

    for relative, topic in [("ros1v2/CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__phidgets_imu_upside_down"
                             ".bag", "/imu/data_raw"), ("db3/MichaelGrupp__evo__test__data__tf_example", "/tf")]:
        path = DATA / relative
        if not path.exists():
            pytest.skip(NO_DATA)
        with fastbag.open(path) as bag:
            arr = bag.read(topic)
            stamps = fastbag.to_ns(arr.header.stamp) if "header" in arr else \
                fastbag.to_ns(arr["transforms"].child["header"]["stamp"])
            assert "nope" not in arr and ("header" in arr) == (topic != "/tf")
        with AnyReader([path]) as reader:
            connections = [c for c in reader.connections if c.topic == topic]
            msgs = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(connections=connections)]
        heads = [m.header for m in msgs] if topic != "/tf" else [t.header for m in msgs for t in m.transforms]
        assert stamps.dtype == np.int64
        assert stamps.tolist() == [h.stamp.sec * 10**9 + h.stamp.nanosec for h in heads]
    with pytest.raises(TypeError, match="not ROS times"):
        fastbag.to_ns(np.zeros(3))


def counted_builders(monkeypatch) -> list:
    """The topic of every TopicBuilder made from now on (one per decode of a batch of messages)."""
    from fastbag.msg import arrays

    builders: list = []
    original = arrays.TopicBuilder.__init__

    def counting(self, *args, **kwargs):
        builders.append(kwargs.get("topic"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(arrays.TopicBuilder, "__init__", counting)
    return builders


def test_a_topic_that_never_decodes_costs_a_few_decodes_a_batch(tmp_path, monkeypatch):
    """Every message of /x is 4 bytes where its definition says 8: after SALVAGE_LIMIT of them are found one by
    one, its failing batches are not split again, so iterating stays a few decode attempts a batch."""
    import struct

    from fastbag.bag import SALVAGE_LIMIT

    path = tmp_path / "bad.bag"
    with fastbag.Writer(path, chunk_size=16 * 1024) as writer:
        bad = writer.add_connection("/x", "std_msgs/Int64", "int64 data\n", "34add168574510e6e17f5d23ecc077ef")
        good = writer.add_connection("/g", "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
        for k in range(20_000):
            writer.write(bad, T0 + 2 * k, struct.pack("<i", k))
            writer.write(good, T0 + 2 * k + 1, struct.pack("<i", k))
    builders = counted_builders(monkeypatch)
    with fastbag.open(path) as bag, pytest.warns(fastbag.FastbagWarning, match="/x cannot be decoded"):
        got = [(m.topic, m.msg) for m in bag.messages()]
        batches = len({int(c) for c in bag._index.chunk})
    assert [msg.data for topic, msg in got if topic == "/g"] == list(range(20_000))
    assert not any(msg for topic, msg in got if topic == "/x")
    tries = builders.count("/x")
    assert batches > 20 and tries <= batches + SALVAGE_LIMIT * 16, (tries, batches)


def test_a_bag_pickles_as_its_path_and_opens_again(strings_bag):
    """pickle.dumps(bag) raised "cannot pickle 'mmap.mmap' object" (a Bag passed to multiprocessing)."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    with fastbag.open(strings_bag, workers=1) as bag:
        copy = pickle.loads(pickle.dumps(bag))
        with ProcessPoolExecutor(1) as pool:
            texts = pool.submit(_good_texts, bag).result()
    with copy:
        assert copy.path == str(strings_bag) and copy._store.workers == 1 and copy._source is not bag._source
        assert list(copy.read("/good")["data"]) == texts == [f"m{k}" for k in range(20)]
    with pytest.raises(TypeError, match="is closed"):
        pickle.dumps(bag)


def _good_texts(bag):
    return list(bag.read("/good")["data"])


def test_topics_of_one_type_decode_together_and_a_damaged_one_is_named_alone(tmp_path, monkeypatch):
    """Iteration decodes the messages of a batch by kind (type and definition), not by topic: 60 String
    topics taking turns are one decode a batch (a decode per topic cost a builder per message or two, and
    made a loop over thousands of topics slower than rosbags'). A damaged message of one of them leaves the
    others whole, spoils only itself, and the warning names its topic alone."""
    import struct


    def write(path, damaged):
        with fastbag.Writer(path, chunk_size=64 * 1024) as writer:
            topics = [writer.add_connection(f"/t{k}", "std_msgs/String", "string data\n",
                                            "992ce8a1687cec8c8bd883ec73ca41d1") for k in range(60)]
            for i in range(50):
                for k, connection in enumerate(topics):
                    body = f"{k}:{i}".encode()
                    length = 999 if (k, i) == damaged else len(body)  # a length past the message's end
                    writer.write(connection, T0 + i * 100 + k, struct.pack("<I", length) + body)

    builders = counted_builders(monkeypatch)
    for damaged in (None, (7, 20)):
        path = tmp_path / f"many-{damaged is None}.bag"
        write(path, damaged)
        builders.clear()
        with fastbag.open(path) as bag, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [(m.topic, m.msg) for m in bag.messages()]
            batches = -(-bag.message_count // fastbag.bag.PARALLEL_MIN)
        said = [str(w.message) for w in caught if issubclass(w.category, fastbag.FastbagWarning)]
        for k in range(60):
            values = [msg.data if msg else None for topic, msg in got if topic == f"/t{k}"]
            assert values == [None if (k, i) == damaged else f"{k}:{i}" for i in range(50)], k
        if damaged is None:
            assert not said and len(builders) == batches, (len(builders), batches)  # one decode a batch
        else:
            assert len(said) == 1 and said[0].startswith("messages of /t7 cannot be decoded"), said


def test_an_empty_topic_list_selects_no_topic_and_an_empty_connection_list_every_one(strings_bag):
    """As documented in Bag.messages: fastbag's ``topics=[]`` selects nothing; rosbags' ``connections=[]`` and
    rospy's ``read_messages(topics=[])`` select every connection, as those libraries do (QA asked why)."""
    with fastbag.open(strings_bag) as bag:
        assert list(bag.messages(topics=[])) == [] and len(bag.read("/good", start=T0)) == 20
        assert len(list(bag.messages(connections=[], raw=True))) == 40
        assert len(list(bag.read_messages(topics=[]))) == 40


def test_definitions_that_are_not_texts_are_a_type_error_naming_the_entry(strings_bag):
    """definitions={type: 5} or {type: None} raised AttributeError from inside the .msg parser, bytes a
    TypeError naming nothing (QA); a TypeError now names the entry before anything is read."""
    for bad in (5, None, b"string data\n"):
        with pytest.raises(TypeError, match=rf"^definitions= maps type names \(str\) to \.msg texts \(str\); got "
                                            rf"'std_msgs/String': {type(bad).__name__} "):
            fastbag.open(strings_bag, definitions={"std_msgs/String": bad})
    with pytest.raises(TypeError, match="got 3: str"):
        fastbag.open(strings_bag, definitions={3: "string data\n"})
