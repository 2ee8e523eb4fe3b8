"""rosbag's spellings on a fastbag Bag: code written against ``rosbag.Bag`` runs unchanged.

The oracle is the classic ``rosbag`` module itself (py3rosmsgs), on every ROS1 bag in the data it reads:
the same ``(topic, message, timestamp)`` tuples from ``read_messages`` (topics, time bounds with the end
included, connection filters, connection headers), the same message values field by field against
genpy's, and the same answers from ``get_message_count``, ``get_start_time``, ``get_end_time`` and
``get_type_and_topic_info``.
"""

from __future__ import annotations

import itertools
import re
import math
import warnings

import numpy as np
import pytest
from conftest import classic_rosbag, data_file, data_files, open_quietly, real_bags

import fastbag
from fastbag.msg.messages import Duration

genpy = pytest.importorskip("genpy", reason="the classic rosbag module (py3rosmsgs) is the oracle here")
try:
    rosbag = classic_rosbag()
except ImportError:
    pytest.skip("the classic rosbag module (py3rosmsgs) is the oracle here", allow_module_level=True)

#: Messages whose values are compared with genpy's per bag (the classic module deserializes in Python).
VALUES_PER_BAG = 300


def classic(path) -> "rosbag.Bag":
    """The classic module's Bag, or a skip where it cannot read the file (encrypted, damaged)."""
    rosbag.bag._message_types.clear()  # its classes from this bag's definitions (see legacy_fixtures)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return rosbag.Bag(str(path))
    except Exception as exc:  # noqa: BLE001 - whatever the oracle raises, it has no answer to compare with
        pytest.skip(f"the classic rosbag module cannot read {path.name}: {type(exc).__name__}: {exc}")


def oracle(read):
    """``read()`` of the classic module, or a skip where it cannot read what the file holds (lz4 chunks
    without its roslz4 extension, which py3rosmsgs lacks)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return read()
    except rosbag.ROSBagException as exc:
        pytest.skip(f"the classic rosbag module cannot read it: {exc}")


def assert_same_genpy(ours, theirs, path: str = "msg") -> None:
    """fastbag's message object equals genpy's message, field by field (floats by their bits)."""
    if isinstance(theirs, genpy.Message):
        assert list(ours.__slots__) == list(theirs.__slots__), path
        assert type(ours._slot_types) is type(theirs._slot_types) is type(ours._get_types()), path  # (lists)
        # (genpy names the Header of 2010 bags std_msgs/Header; fastbag as the bag's definition does)
        assert ours._has_header == theirs._has_header and \
            [t.replace("roslib/Header", "std_msgs/Header") for t in ours._get_types()] == list(theirs._get_types()), path
        for name in theirs.__slots__:
            assert_same_genpy(getattr(ours, name), getattr(theirs, name), f"{path}.{name}")
    elif isinstance(theirs, (genpy.Time, genpy.Duration)):
        assert (ours.secs, ours.nsecs) == (theirs.secs, theirs.nsecs), path
    elif isinstance(theirs, bytes):  # uint8[] and char[] come as bytes from genpy
        assert np.asarray(ours).tobytes() == theirs, path
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), path
        if theirs and isinstance(theirs[0], genpy.Message):  # messages, in a list as genpy's (numbers: NumPy)
            assert isinstance(ours, list), path
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same_genpy(a, b, f"{path}[{k}]")
    elif isinstance(theirs, float):
        assert float(ours) == theirs or (math.isnan(float(ours)) and math.isnan(theirs)), path
    else:
        assert ours == theirs, path


@pytest.mark.parametrize("path", data_files("ros1v2"))
def test_read_messages_yields_what_rosbag_yields(path):
    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        theirs = oracle(lambda: [(topic, t, data, pytype) for topic, (_, data, _, _, pytype), t in
                                 theirs_bag.read_messages(raw=True)])
        ours = list(bag.read_messages())
        assert all(isinstance(m, fastbag.bag.BagMessage) and m[0] == m.topic for m in ours)
        mine = [(m.topic, m.timestamp.secs, m.timestamp.nsecs) for m in ours]
        expected = [(topic, t.secs, t.nsecs) for topic, t, _, _ in theirs]
        if expected != sorted(expected, key=lambda e: e[1:]):
            # Chunks out of time order: rosbag merges each connection's index as if sorted and so yields them
            # out of order (example-unsorted-chunks.bag); fastbag yields every message in time order.
            assert sorted(mine) == sorted(expected) and mine == sorted(mine, key=lambda e: e[1:])
            return
        assert mine == expected
        # Values, field by field, where both decode (genpy builds classes from the stored definitions and
        # fails on text that is not UTF-8, which fastbag gives as bytes).
        compared = unread = 0
        for m, (_, _, data, pytype) in zip(ours[:VALUES_PER_BAG], theirs):
            if isinstance(m.message, fastbag.bag.Undecodable):
                assert m.message._type == pytype._type and str(m.message._type) == pytype._type  # (its type known)
                continue
            try:
                msg = pytype().deserialize(data)
            except (genpy.DeserializationError, UnicodeDecodeError):
                unread += 1  # (the values are proved against rosbags in test_bag_oracle.py)
                continue
            assert_same_genpy(m.message, msg)
            compared += 1
        assert compared or unread or all(isinstance(m.message, fastbag.bag.Undecodable)
                                         for m in ours[:VALUES_PER_BAG])


@pytest.mark.parametrize("path", data_files("ros1v2"))
def test_counts_times_and_topic_info_are_rosbags(path):
    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = theirs_bag.get_type_and_topic_info()
            assert bag.get_message_count() == theirs_bag.get_message_count()
            for topic in info.topics:
                assert bag.get_message_count(topic) == theirs_bag.get_message_count(topic)
            some = sorted(info.topics)[:2]
            assert bag.get_message_count(some) == theirs_bag.get_message_count(some)
            mine = bag.get_type_and_topic_info()
            assert mine.msg_types == info.msg_types
            assert mine.topics.keys() == info.topics.keys()
            for topic, expected in info.topics.items():
                got = mine.topics[topic]
                assert got[:3] == expected[:3], topic
                # rosbag takes the median period of times as float seconds (2.4e-7 s steps at this epoch, 1%
                # of a 40 kHz burst's period) where it has read the connection indexes (else None); fastbag
                # takes it of the int nanoseconds.
                if expected.frequency is not None:
                    assert abs(1 / got.frequency - 1 / expected.frequency) < 1e-6, topic
            assert bag.get_type_and_topic_info(some).topics == {t: mine.topics[t] for t in some}
            assert bag.get_compression_info() == tuple(theirs_bag.get_compression_info())
            assert (bag.filename, bag.mode) == (theirs_bag.filename, theirs_bag.mode)
            if bag.message_count:
                # rosbag answers with its first chunk's start and its last chunk's end: the bag's bounds where
                # chunks are in time order; fastbag with the first and last message's time in any case.
                assert bag.get_start_time() == min(c.start_time for c in theirs_bag._chunks).to_sec()
                assert bag.get_end_time() == max(c.end_time for c in theirs_bag._chunks).to_sec()
                if theirs_bag._chunks == sorted(theirs_bag._chunks, key=lambda c: (c.start_time, c.end_time)):
                    assert (bag.get_start_time(), bag.get_end_time()) == (theirs_bag.get_start_time(),
                                                                          theirs_bag.get_end_time())
            else:
                with pytest.raises(fastbag.NoMessagesError, match="holds no messages"):  # a ValueError too
                    bag.get_start_time()


def _bag_with_topics():
    """A real bag of three topics and 26,566 messages in uncompressed chunks (the classic module reads it)."""
    return data_file("ros1v2/MichaelGrupp__evo__test__data__ROS_example.bag")


def test_topic_and_time_filters_as_rosbag_applies_them():
    """A topic as a str or a list (empty: every topic), times as genpy's (rospy's) Time, the end included."""
    path = _bag_with_topics()
    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        times = oracle(lambda: [t for _, _, t in theirs_bag.read_messages(raw=True)])
        start, end = times[len(times) // 4], times[len(times) // 2]  # both the time of a message
        topic = sorted(bag.topics)[0]
        # names compare as ROS names ("a/" and "a//" are a: this bag's names are relative); an empty generator
        # is every topic
        spelled = [topic + "/", topic + "//"]
        cases = [lambda: dict(topics=topic), lambda: dict(topics=[topic]), lambda: dict(topics=[]),
                 lambda: dict(topics=iter([])), lambda: dict(start_time=start, end_time=end),
                 lambda: dict(topics=[topic], start_time=start), lambda: dict(end_time=end),
                 lambda: dict(topics=[topic, "/nowhere"]), lambda: dict(topics=iter(spelled)),
                 *(lambda name=name: dict(topics=name) for name in spelled)]
        for case in cases:  # (each a new dict: a generator is used up by the first reader)
            expected = [(tp, t.to_nsec()) for tp, _, t in theirs_bag.read_messages(raw=True, **case())]
            got = [(m.topic, m.timestamp.to_nsec()) for m in bag.read_messages(**case())]
            assert got == expected, case()
            assert got, case()
        for name in spelled:
            assert bag.get_message_count(name) == theirs_bag.get_message_count(name) == bag.topics[topic].message_count
            assert list(bag.get_type_and_topic_info(name).topics) == [topic]  # (rosbag keys it by the name given)
        last = [m.timestamp.to_nsec() for m in bag.read_messages(start_time=start, end_time=end)][-1]
        assert last == end.to_nsec()  # the end itself is read
        with pytest.raises(TypeError, match="seconds"):  # said when called, not at the first message
            bag.read_messages(start_time=start.to_sec())
        # a Duration is no time: rosbag refuses it too (deep in its loop), where reading it as a time since
        # 1970 would read every message, or none
        for duration in (genpy.Duration(5), Duration(5)):
            with pytest.raises(TypeError, match=r"start_time is a point in time; got a Duration .* For a time "
                                                r"5000000000 ns into the bag: bag.start_time \+ 5000000000"):
                bag.read_messages(start_time=duration)
            with pytest.raises(TypeError):
                list(theirs_bag.read_messages(start_time=duration))
        # a topic named twice counts once, as rosbag counts it (and as read_messages yields it)
        assert bag.get_message_count([topic, topic]) == theirs_bag.get_message_count([topic, topic]) == \
            len(list(bag.read_messages(topics=[topic, topic]))) > 0
        with pytest.raises(TypeError, match=r"messages\(raw=True\)"):
            bag.read_messages(raw=True)
        # rosbag passes over a topic the bag lacks: nothing of it, no error
        assert list(theirs_bag.read_messages(topics="/nowhere")) == list(bag.read_messages(topics="/nowhere")) == []
        with pytest.raises(fastbag.NotFoundError, match="no topic '/nowhere'"):  # fastbag's own API names it
            bag.messages(topics=[topic, "/nowhere"])


def test_topic_names_compare_as_ros_names_as_rosbag_compares_them():
    """"/turtle1/pose/", "//turtle1/pose" and "/turtle1//pose" name /turtle1/pose (roslib's canonical form);
    before, read_messages and get_message_count found nothing of them."""
    path = data_file("ros1v2/cruise-automation__rosbag.js__fixtures__example.bag")
    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        for name in ("/turtle1/pose/", "//turtle1/pose", "/turtle1//pose", ["/turtle1//pose", "/turtle1/pose"]):
            expected = [(tp, t.to_nsec()) for tp, _, t in theirs_bag.read_messages(topics=name, raw=True)]
            assert [(m.topic, m.timestamp.to_nsec()) for m in bag.read_messages(topics=name)] == expected
            assert {tp for tp, _ in expected} == {"/turtle1/pose"} and len(expected) == 1344
            assert bag.get_message_count(name) == 1344
        assert bag.get_message_count("/turtle1/pose/") == theirs_bag.get_message_count("/turtle1/pose/")
        assert list(bag.get_type_and_topic_info(["//turtle1/pose", "/nowhere"]).topics) == ["/turtle1/pose"]
        with pytest.raises(TypeError, match="topic names are str, not int 7"):
            bag.read_messages(topics=[7])


def test_connection_filters_and_headers_as_rosbag_gives_them():
    path = _bag_with_topics()
    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        wanted = sorted({c.msgtype for c in bag.connections})[0]

        def by_type(topic, datatype, md5sum, msg_def, header):
            assert header["type"] == datatype.encode()  # rosbag's header: str keys, bytes values
            return datatype == wanted

        expected = [(tp, t.to_nsec()) for tp, _, t in theirs_bag.read_messages(raw=True, connection_filter=by_type)]
        got = [(m.topic, m.timestamp.to_nsec()) for m in bag.read_messages(connection_filter=by_type)]
        assert got == expected and got
        # a filter that keeps no connection yields nothing, alone or with topics (fastbag's messages() reads
        # connections=[] as every connection, as rosbags does: read_messages must not pass that on)
        def nothing(*_):
            return False

        topic = bag.connections[0].topic
        for topics in (None, [topic]):
            assert list(bag.read_messages(topics=topics, connection_filter=nothing)) == \
                list(theirs_bag.read_messages(topics=topics, connection_filter=nothing)) == []
        for mine, theirs in zip(bag.read_messages(return_connection_header=True),
                                theirs_bag.read_messages(return_connection_header=True)):
            assert mine.topic == theirs.topic and mine.timestamp.to_nsec() == theirs.timestamp.to_nsec()
            assert mine.connection_header == theirs.connection_header


@pytest.mark.parametrize("path", data_files("ros1v2"))
def test_connection_headers_are_the_stored_ones(path):
    """Every connection's header is its record's, field for field (a publisher's ``topic`` may lack the
    record's leading slash, a header may hold fields fastbag does not use), as rosbag gives them."""
    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        theirs = {c.id: c.header for c in theirs_bag._connections.values()}
        if not bag.message_count or bag.recovered:
            pytest.skip("no messages, or an index rebuilt by scanning")
        for connection in bag.connections:
            assert connection.header == theirs[connection.id], connection.topic  # rosbag's connection.header
            assert fastbag.bag.connection_header(connection) == theirs[connection.id], connection.topic


@pytest.mark.parametrize("path", [p for p in real_bags() if p.values[0] is not None and
                                  p.values[0].suffix in (".mcap", ".db3")][:6] or real_bags()[:1])
def test_read_messages_on_ros2_recordings_is_messages(path):
    """The same spellings on every format: the tuples are messages()'s, times as Time values."""
    with open_quietly(path) as bag:
        ours = [(m.topic, m.timestamp.to_nsec(), m.message) for m in bag.read_messages()]
        plain = [(m.topic, m.time, m.msg) for m in bag.messages()]
    assert [o[:2] for o in ours] == [p[:2] for p in plain]
    assert all(type(o[2]) is type(p[2]) for o, p in zip(ours, plain))


# -- rosbags' loop ---------------------------------------------------------------------------------------

ROSBAGS_LOOP_BAGS = ["ros1v2/MichaelGrupp__evo__test__data__ROS_example.bag",
                     "ros1v2/cruise-automation__rosbag.js__fixtures__example.bag",
                     "ros1v2/CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__sparkfun_razor.bag",
                     "db3/MichaelGrupp__evo__test__data__tf_example",
                     "db3/ANYbotics__grid_map__grid_map_ros__resource__double_chatter"]


@pytest.mark.parametrize("relative", ROSBAGS_LOOP_BAGS)
def test_the_rosbags_loop_runs_unchanged(relative):
    """rosbags' README loop, with fastbag.open in place of AnyReader: connections picked from
    ``reader.connections``, messages unpacked as (connection, timestamp, rawdata), each deserialized by
    its type; the values equal rosbags', field by field."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    from fastbag.tooling.compare import assert_same_message

    path = data_file(relative)
    # (a Humble-era .db3 stores no definitions: rosbags then takes its own, as fastbag its shipped ones)
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as peer:
        topic = sorted({c.topic for c in peer.connections})[-1]
        theirs = [(c.topic, t, peer.deserialize(raw, c.msgtype))
                  for c, t, raw in peer.messages(connections=[c for c in peer.connections if c.topic == topic])]
        their_counts = sorted((c.topic, c.msgcount) for c in peer.connections)
        # an empty iterable disables rosbags' filter: every message
        their_unfiltered = [(c.topic, t) for c, t, _ in peer.messages(connections=[])]
        their_digests = sorted((c.topic, c.digest) for c in peer.connections)
    with open_quietly([path]) as reader:  # AnyReader's list of one recording
        # rosbags' Connection fields: msgcount per connection, digest (ROS 1's md5sum)
        assert sorted((c.topic, c.msgcount) for c in reader.connections) == their_counts
        assert sorted((c.topic, c.digest) for c in reader.connections) == their_digests
        connections = [x for x in reader.connections if x.topic == topic]
        ours = []
        for connection, timestamp, rawdata in reader.messages(connections=connections):
            ours.append((connection.topic, timestamp, reader.deserialize(rawdata, connection.msgtype),
                         connection.encoding))
            assert connection.msgcount == next(c.msgcount for c in connections if c == connection) > 0
            assert type(rawdata) is bytes  # as rosbags' (it pickles to a worker pool, concatenates, ...)
        # rosbags' positional form, reader.messages(connections), reads the same
        assert [(c.topic, t, raw) for c, t, raw in itertools.islice(reader.messages(connections), 20)] == \
            [(c.topic, t, raw) for c, t, raw in itertools.islice(reader.messages(connections=connections), 20)]
        assert [(c.topic, t) for c, t, _ in reader.messages(connections=[])] == their_unfiltered
        # bytes that are no unpacked message's view decode on their own (one at a time), to the same values
        copies = [reader.deserialize(bytes(m.data), m.connection.msgtype)
                  for m in itertools.islice(reader.messages(connections=connections, raw=True), 50)]
    assert theirs and [(a, b) for a, b, _, _ in ours] == [(a, b) for a, b, _ in theirs]
    for (_, _, msg, encoding), (_, _, expected) in zip(ours, theirs):
        assert_same_message(msg, expected, encoding=encoding)
    for msg, (_, _, expected), (_, _, unpacked, _) in zip(copies, theirs, ours):
        assert_same_message(msg, expected, encoding=ours[0][3])
        assert msg == unpacked and repr(msg) == repr(unpacked)  # nested types named as in the loop's messages


def test_a_message_indexes_as_the_tuple_it_unpacks_as():
    """rosbags yields tuples, so its users index them too (``sorted(reader.messages(), key=lambda x: x[1])``):
    a fastbag message was only unpackable, and ``m[1]`` a TypeError (QA)."""
    path = _bag_with_topics()
    with fastbag.open(path) as bag:
        messages = list(itertools.islice(bag.messages(), 50))
        for m in messages:
            connection, timestamp, rawdata = m
            assert len(m) == 3 and (m[0], m[1], m[2]) == (connection, timestamp, rawdata) == tuple(m)
            assert (m[-3], m[-2], m[-1]) == tuple(m) and m[1:] == (timestamp, rawdata) and type(m[2]) is bytes
            with pytest.raises(IndexError):
                m[3]
        assert [m[1] for m in sorted(messages, key=lambda x: x[1])] == sorted(m.time for m in messages)


@pytest.mark.parametrize("relative", ROSBAGS_LOOP_BAGS)
def test_a_filter_by_rosbags_type_names_picks_the_same_connections(relative):
    """rosbags spells every type ``pkg/msg/Type``, ROS 1 bags' too; fastbag keeps a ROS 1 bag's own
    ``pkg/Type``. A ported ``x.msgtype == "sensor_msgs/msg/Imu"`` filter matched nothing on ROS 1 bags, and
    the empty list it made read every message (QA). Both spellings now equal a ROS 1 type, whichever side. A
    ROS 2 recording's is rosbags' own, a plain str (strict serializers refuse a subclass); rosbag's API
    (``get_type_and_topic_info``, a message's ``_type``) equals rospy's spelling in every format."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    path = data_file(relative)
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as peer:
        theirs = {msgtype: sorted(c.topic for c in peer.connections if c.msgtype == msgtype)
                  for msgtype in {c.msgtype for c in peer.connections}}
        counts = {msgtype: sum(1 for _ in peer.messages(connections=[c for c in peer.connections
                                                                     if c.msgtype == msgtype]))
                  for msgtype in theirs}
    with open_quietly([path]) as reader:
        ros1 = all(c.msgtype.count("/") == 1 for c in reader.connections)
        assert ros1 or all(type(c.msgtype) is str for c in reader.connections)
        for msgtype, topics in theirs.items():
            rospy_spelling = msgtype.replace("/msg/", "/")
            for spelling in (msgtype, rospy_spelling) if ros1 else (msgtype,):
                picked = [x for x in reader.connections if x.msgtype == spelling]
                assert sorted(c.topic for c in picked) == topics
                assert sorted(c.topic for c in reader.connections if spelling == c.msgtype) == topics
                assert not [x for x in picked if x.msgtype != spelling]
                assert sum(1 for _ in reader.messages(connections=picked)) == counts[msgtype]
            topic = max(topics, key=lambda t: reader.topics[t].message_count)
            assert reader.topics[topic].msgtype == msgtype
            assert (reader.topics[topic].msgtype == rospy_spelling) is ros1
            # rosbag's API (as a message's _type) equals rospy's spelling in every format (review)
            rospy_info = reader.get_type_and_topic_info()
            assert rospy_info.topics[topic].msg_type == rospy_spelling == rospy_info.topics[topic].msg_type
            assert rospy_info.topics[topic].msg_type == msgtype and any(t == rospy_spelling for t in rospy_info.msg_types)
            assert reader.read(topic).msgtype == msgtype  # (a message's _type is pkg/Type in every format)
            for m in itertools.islice(reader.messages(topics=[topic]), 1):
                assert m.msg._type == msgtype == m.msg.__msgtype__ and m.msg._type == rospy_spelling
            assert reader.topics[topic].msgtype != "std_msgs/msg/Nothing" and reader.topics[topic].msgtype != 3


def test_type_names_compare_by_either_spelling_and_hash_as_the_str_they_are():
    from fastbag.msg.msgdef import TypeName

    ros1, ros2 = TypeName("sensor_msgs/Imu"), TypeName("sensor_msgs/msg/Imu")
    assert ros1 == "sensor_msgs/msg/Imu" and "sensor_msgs/msg/Imu" == ros1 and ros1 == ros2
    assert ros2 == "sensor_msgs/Imu" and not ros2 != "sensor_msgs/Imu"
    assert ros1 != "sensor_msgs/Image" and ros1 != "sensor_msgs/srv/Imu" and ros1 != b"sensor_msgs/Imu"
    assert TypeName("pkg/srv/Call_Request") == "pkg/srv/Call_Request" != TypeName("pkg/Call_Request")
    # a dict keyed by one spelling finds only that one: hashes are the str's (said in TypeName's docstring)
    assert hash(ros1) == hash("sensor_msgs/Imu") and {"sensor_msgs/Imu": 1}[ros1] == 1
    assert "sensor_msgs/msg/Imu" not in {"sensor_msgs/Imu"} and ros1 in ["sensor_msgs/msg/Imu"]
    assert type(str(ros1)) is str and repr(ros1) == "'sensor_msgs/Imu'" and ros1.split("/") == ["sensor_msgs", "Imu"]
    import pickle

    assert pickle.loads(pickle.dumps(ros1)) == ros2


def test_rosbags_filter_a_bag_recipe_copies_a_ros2_recording_read_by_fastbag(tmp_path):
    """rosbags' recipe for filtering a bag, reading with fastbag: each connection added to rosbags' rosbag2
    Writer with its ``msgtype``, every message's bytes written. A ROS 2 recording's msgtype was a str
    subclass (TypeName), which the Writer's YAML dumper refused at close, leaving a folder with a database
    and no metadata.yaml (QA). It is a plain str now (a ROS 1 spelling alone is a TypeName), so the copy
    reads back in rosbags with every message, and ``yaml.safe_dump`` takes the names."""
    import yaml
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    path = data_file("db3/MichaelGrupp__evo__test__data__tf_example")
    out = tmp_path / "filtered"
    with open_quietly(path) as bag:
        assert yaml.safe_load(yaml.safe_dump({c.topic: c.msgtype for c in bag.connections})) == \
            {"/tf": "tf2_msgs/msg/TFMessage", "/tf_static": "tf2_msgs/msg/TFMessage"}
        want = [(c.topic, t, raw) for c, t, raw in bag.messages()]
        with Writer(out, version=8) as writer:
            added = {c: writer.add_connection(c.topic, c.msgtype, typestore=store) for c in bag.connections}
            for c, t, raw in bag.messages():
                writer.write(added[c], t, raw)
    assert (out / "metadata.yaml").is_file()
    with AnyReader([out], default_typestore=store) as peer:
        got = [(c.topic, t, bytes(raw)) for c, t, raw in peer.messages()]
    assert len(want) == 518 and got == want


def test_messages_are_not_iterable_and_answer_in_by_field():
    """genpy's and rosbags' messages are not iterable; fastbag's were, through ``[name]`` (Python asks
    ``msg[0]``, ``msg[1]``...), so ``list(msg)`` and ``"header" in msg`` met a NotFoundError for field 0
    (QA). ``in`` asks for a field, as of a read's array."""
    import collections.abc

    path = _bag_with_topics()
    with fastbag.open(path) as bag:
        topic = next(iter(bag.topics))
        message = next(bag.messages(topics=[topic])).msg
        array = bag.read(topic)
    field = message._fields[0]
    assert field in message and field in array and "no_such_field" not in message
    assert not isinstance(message, collections.abc.Iterable)
    for walk in (list, dict, iter, lambda m: [x for x in m]):
        with pytest.raises(TypeError, match="not iterable"):
            walk(message)
    stamp = fastbag.msg.messages.Time(1, 2)
    with pytest.raises(TypeError, match="not iterable"):
        list(stamp)


@pytest.mark.parametrize("mode", ["r", "rb"])
def test_open_takes_rosbags_read_mode(mode):
    """``rosbag.Bag(path, "r")`` is the idiom a ported script keeps; a writing mode says what writes."""
    path = _bag_with_topics()
    with fastbag.open(path, mode) as bag, fastbag.Bag(path, mode) as same:
        assert bag.mode == "r" and bag.topics.keys() == same.topics.keys()
    for writing in ("w", "a"):
        with pytest.raises(ValueError, match=f"reading only, not mode '{writing}': to write a bag, use "
                                             r"fastbag.Writer\(path\)"):
            fastbag.open(path, writing)
    with pytest.raises(ValueError, match="mode is 'r'"):
        fastbag.Bag(path, "x")


def test_a_list_of_recordings_is_refused_saying_what_reads_many():
    path = _bag_with_topics()
    with pytest.raises(TypeError, match="fastbag.open reads one recording .* not a list of 2: open each in turn, "
                                        "or use fastbag.SyncedDataset or fastbag.dask"):
        fastbag.open([path, path])


def test_deserialize_and_connections_arguments():
    path = _bag_with_topics()
    with open_quietly(path) as bag:
        connection = bag.connections[0]
        raw = bytes(next(bag.messages(connections=[connection], raw=True)).data)
        pkg, name = connection.msgtype.split("/")
        # rosbags spells ROS 1 types pkg/msg/Type: both name the same type
        assert bag.deserialize(raw, f"{pkg}/msg/{name}") == bag.deserialize(raw, connection.msgtype)
        with pytest.raises(KeyError, match="no connection of type 'nav_msgs/Nothing'"):
            bag.deserialize(raw, "nav_msgs/Nothing")
        with pytest.raises(TypeError, match="Connection objects"):
            next(bag.messages(connections=[connection.topic]))
        # by topic and by connection together: the messages of both
        both = list(bag.messages(topics=[connection.topic], connections=bag.connections, raw=True))
        assert [m.time for m in both] == [m.time for m in bag.messages(topics=connection.topic, raw=True)]
        assert not list(bag.messages(topics=bag.connections[1].topic, connections=[connection], raw=True))
        # rosbags' names: stop for end, msgcount for message_count
        times = [m.time for m in bag.messages(raw=True)]
        assert [m.time for m in bag.messages(start=times[10], stop=times[20], raw=True)] == times[10:20]
        with pytest.raises(TypeError, match="not both"):
            bag.messages(end=times[20], stop=times[20])
        assert all(info.msgcount == info.message_count > 0 for info in bag.topics.values())


def test_the_rosbags_loop_leaves_no_reference_to_a_closed_bag(tmp_path):
    """deserialize() answers from the message the loop just unpacked, which it keeps a reference to: none
    may be left once the loop ends or the bag closes, or the file stays mapped (a Writer then refuses its
    path)."""
    import gc
    import shutil

    from fastbag.io.source import is_mapped

    path = tmp_path / "copy.bag"
    shutil.copy(_bag_with_topics(), path)
    for deserialize, stop in ((True, None), (False, None), (False, 5), (True, 5)):
        with open_quietly(path) as reader:
            for k, (connection, _, rawdata) in enumerate(reader.messages()):
                if deserialize:
                    reader.deserialize(rawdata, connection.msgtype)
                if k == stop:
                    break
            del rawdata, connection
        gc.collect()
        assert not is_mapped(path), (deserialize, stop)


def _info_rows(text: str) -> list[tuple[str, str]]:
    """``(key, value)`` rows of rosbag-info text; a continued row (types, topics) keeps its key."""
    rows, key = [], ""
    for line in text.splitlines():
        head, _, rest = line.partition(":") if not line.startswith(" ") else ("", "", line)
        key = head or key
        rows.append((key, (rest if head else line).strip()))
    return rows


#: A rate as rosbag info writes it, and its unit's factor.
RATE = re.compile(r"@ +([\d.]+) (k|M|G)?Hz")
UNIT = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}
#: A size and its rate: ``1.8 KB @ 137.5 MB/s``.
SIZE_RATE = re.compile(r"^ *([\d.]+ [KMGT]B) @ +([\d.]+) ([KMGT])B/s")


@pytest.mark.parametrize("path", data_files("ros1v2") + data_files("ros1legacy"))
def test_info_text_is_rosbag_info(path):
    """``fastbag info --freq`` prints what ``rosbag info --freq`` prints (its rows, their layout, the
    compression ratios and rates), plus a ``format`` row; ``print(bag)`` prints it, as for a rosbag.Bag."""
    from fastbag.cli import format_info

    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        assert str(bag) == format_info(bag) and f"{bag}" == format_info(bag)
        if bag.recovered or bag.problems:
            pytest.skip("fastbag reports a rebuilt index or problems, rows rosbag info has not")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = _info_rows(oracle(lambda: str(theirs_bag)))
            chunks = theirs_bag._chunks
        # (rosbag gives rates only where it has read the connection indexes: not of every 1.2 bag)
        rates = any(RATE.search(value) for key, value in theirs if key == "topics")
        # A topic of several types (tf/tfMessage and tf2_msgs/TFMessage) is listed with all of them,
        # rosbag's with its first connection's
        ours = [(key, re.sub(r"(: [\w/]+)(, [\w/]+)+", r"\1", value))
                for key, value in _info_rows(format_info(bag, freq=rates)) if key != "format"]
    if [key for key, _ in theirs] == ["path", "version", "size"]:  # rosbag says no more of a bag without
        assert bag.message_count == 0 and ours[:3] == theirs  # messages
        return
    # rosbag's bounds are its first chunk's start and last chunk's end (a negative duration where chunks
    # are out of order), fastbag's the first and last message's: its duration and rates follow them.
    same_bounds = not chunks or (chunks[0].start_time.to_nsec(), chunks[-1].end_time.to_nsec()) == (
        bag.start_time, bag.end_time)
    assert [key for key, _ in ours] == [key for key, _ in theirs]
    for (key, mine), (_, expected) in zip(ours, theirs):
        if key in ("start", "end", "duration", "uncompressed", "compressed") and not same_bounds:
            continue
        if key in ("start", "end"):
            # rosbag rounds the epoch seconds to the hundredth of their float (its clock text truncates, so
            # that the two can disagree); fastbag truncates both
            assert abs(float(mine.rsplit("(")[1][:-1]) - float(expected.rsplit("(")[1][:-1])) < 0.011, key
        elif key in ("uncompressed", "compressed") and SIZE_RATE.match(expected):
            # rates over rosbag's float duration (2.4e-7 s steps at this epoch: 2% of a 13 us bag's)
            got, want = SIZE_RATE.match(mine).groups(), SIZE_RATE.match(expected).groups()
            assert (got[0], got[2]) == (want[0], want[2]), key
            assert float(got[1]) == pytest.approx(float(want[1]), rel=0.02, abs=0.1), key
            assert mine.partition("(")[2] == expected.partition("(")[2], key  # the same percentage
        elif key == "topics" and rates:
            # rosbag's median period is of float seconds (steps of 2.4e-7 s at this epoch: 1% of a 40 kHz
            # period), fastbag's of int nanoseconds: the rates agree to 1%, the rest of the row exactly
            # (spaces aside: the column's width follows the rates' texts)
            assert " ".join(RATE.sub("@", mine).split()) == " ".join(RATE.sub("@", expected).split())
            rates = [[float(f) * UNIT[u] for f, u in RATE.findall(text)] for text in (mine, expected)]
            assert rates[0] == pytest.approx(rates[1], rel=0.01), key
        else:
            assert mine == expected, key


def genpy_walk(msg, prefix: str = "", out: dict | None = None) -> dict:
    """A rospy-era generic flattener, as bag-to-table scripts write them: a message is what has
    ``__slots__``, an array what is a list or tuple, a time what has ``to_sec``."""
    out = {} if out is None else out
    for slot in msg.__slots__:
        value, key = getattr(msg, slot), prefix + slot
        if hasattr(value, "to_sec"):
            out[key] = value.to_sec()
        elif hasattr(value, "__slots__"):
            genpy_walk(value, key + ".", out)
        elif isinstance(value, (list, tuple)):
            for k, item in enumerate(value):
                if hasattr(item, "__slots__"):
                    genpy_walk(item, f"{key}[{k}].", out)
                else:
                    out[f"{key}[{k}]"] = item
        else:
            out[key] = value
    return out


def test_code_written_for_genpy_messages_walks_ours_alike():
    """A generic walk over genpy's message API (``__slots__``, lists, ``to_sec``) gives the same columns and
    values on fastbag's messages of /tf (arrays of messages) as on rosbag's; a message's genpy-only
    serialization API is missing with a hint at fastbag.Writer (rosbag's writer asks for it)."""
    path = data_file("ros1v2/zaki0929__bagfiles__2018__feb13__col.bag")
    theirs_bag = classic(path)
    with theirs_bag, open_quietly(path) as bag:
        theirs = oracle(lambda: [genpy_walk(msg) for _, msg, _ in theirs_bag.read_messages(topics=["/tf"])])
        ours = [genpy_walk(msg) for _, msg, _ in bag.read_messages(topics=["/tf"])]
        assert ours == theirs and len(theirs) > 100 and any("transforms[0].header.seq" in row for row in ours)
        msg = next(iter(bag.read_messages(topics=["/tf"]))).message
        for name in ("_md5sum", "serialize", "_full_text"):
            with pytest.raises(AttributeError, match=r"no .*: fastbag's messages are read-only views .* "
                                                     r"fastbag.Writer takes each one's bytes \(m.data\)"):
                getattr(msg, name)
        with pytest.raises(AttributeError, match=r"has no attribute 'transform'$") as caught:
            msg.transform
        # What Python's own "Did you mean: 'transforms'?" under a traceback reads: the name, the object, its dir()
        assert caught.value.name == "transform" and caught.value.obj is msg and "transforms" in dir(msg)
        assert "serialize" not in dir(msg)
        # No __getattr__ on a message class: with one, CPython stops specializing attribute lookups, and every
        # field of every message costs more (a decoded loop 15% slower)
        assert not any("__getattr__" in vars(cls) for cls in type(msg).__mro__)


READ_POINTS_BAGS = ["ros1v2/eric-wieser__ros_numpy__test__test.bag",
                    "ros1v2/ashnarayan13__toposens_reader__tests__test.bag",
                    "ros1v2/SICKAG__sick_scan_xd__doc__combination_rms_1xxx_lms_1xx__rms_1xxx_lms_1xx_movement_off.bag"]


@pytest.mark.parametrize("relative", READ_POINTS_BAGS)
def test_pointcloud_of_a_message_gives_what_read_points_gives_rospys_message(relative):
    """``sensor_msgs.point_cloud2.read_points`` asserts a genpy message, so it refuses fastbag's (README
    says so and names this instead): ``fastbag.pointcloud(m.msg)``'s rows, as tuples, are its points, NaN
    points skipped as its ``skip_nans`` skips them, for every cloud of the bag."""
    point_cloud2 = pytest.importorskip("sensor_msgs.point_cloud2", reason="py3rosmsgs' sensor_msgs")
    path = data_file(relative)
    with classic_rosbag().Bag(str(path)) as peer:
        topics = [t for t, info in peer.get_type_and_topic_info().topics.items()
                  if info.msg_type == "sensor_msgs/PointCloud2"]
        theirs = [msg for _, msg, _ in peer.read_messages(topics=topics)]
    with open_quietly(path) as bag:
        ours = [m.msg for m in bag.messages(topics=topics)]
    assert len(ours) == len(theirs) > 0
    for mine, their in zip(ours, theirs):
        with pytest.raises(AssertionError):
            next(point_cloud2.read_points(mine))
        names = tuple(f.name for f in their.fields if f.count == 1)
        points = fastbag.pointcloud(mine)[list(names)].ravel()
        nan = np.zeros(points.shape, dtype=bool)
        for name in names:
            if points[name].dtype.kind == "f":
                nan |= np.isnan(points[name])
        if not nan.any():  # (NaN equals nothing: compared below, skipped)
            assert points.tolist() == list(point_cloud2.read_points(their, field_names=names))
        assert points[~nan].tolist() == list(point_cloud2.read_points(their, field_names=names, skip_nans=True))
