"""Decoded values of rosbag2 recordings equal rosbags' deserialization of the same bytes.

Values are read the way users write it (``m.msg.pose.position.x`` from a
fresh ``fastbag.open``, and ``bag.read(topic)``) and compared field by field
with ``rosbags``. Where rosbags yields nothing for a directory (its
metadata.yaml QoS disagrees with the database, or it names a serialization
format rosbags refuses), the raw CDR of each row is deserialized with a
rosbags type store holding the definitions the sibling Iron recording
stores: the same messages, proved another way.

CDR decoding is the message layer's ``layout_for(..., encoding="cdr")``.
"""

from __future__ import annotations

import sqlite3

import pytest

import fastbag

from conftest import DATA, NO_DATA, open_quietly
from cdr_oracle import assert_same_cdr

#: Recordings rosbags deserializes whole (see MANIFEST.tsv), and the topics to compare.
ROSBAGS_READS = [
    "MichaelGrupp__evo__test__data__tf_example",
    "autowarefoundation__autoware_tools__planning__autoware_static_centerline_generator__test__data__"
    "bag_ego_trajectory.db3",
    "peterheim1__ros_bags__first_2",
    "ANYbotics__grid_map__grid_map_ros__resource__double_chatter",
    "geocamxyz__rosbags-rs__tests__test_bags__test_bag_sqlite3",
    "ros2__rosbag2__rosbag2_tests__resources__sqlite3__cdr_test",
    "foxglove__mcap__testdata__db3__chatter.db3",
]


def _humble():
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.ROS2_HUMBLE)


HUMBLE = _humble()



@pytest.mark.parametrize("name", ROSBAGS_READS)
def test_decoded_messages_equal_rosbags(name):
    from rosbags.highlevel import AnyReader

    path = DATA / "db3" / name
    if not path.exists():
        pytest.skip(NO_DATA)
    with AnyReader([path], default_typestore=HUMBLE) as reader:  # Humble-era bags carry no definitions
        theirs = [(c.topic, t, reader.deserialize(d, c.msgtype)) for c, t, d in reader.messages()]
    with open_quietly(path) as bag:
        ours = list(bag.messages())
    assert len(ours) == len(theirs) > 0
    for m, (topic, t, msg) in zip(ours, theirs):
        assert (m.topic, m.time) == (topic, t)
        assert_same_cdr(m.msg, msg, f"{topic}@{t}")


@pytest.mark.parametrize("name", ROSBAGS_READS)
def test_read_whole_topics_equals_rosbags(name):
    from rosbags.highlevel import AnyReader

    path = DATA / "db3" / name
    if not path.exists():
        pytest.skip(NO_DATA)
    with AnyReader([path], default_typestore=HUMBLE) as reader:
        by_topic: dict[str, list] = {}
        for c, t, d in reader.messages():
            by_topic.setdefault(c.topic, []).append((t, reader.deserialize(d, c.msgtype)))
    with open_quietly(path) as bag:
        for topic, expected in by_topic.items():
            arrays = bag.read(topic)
            assert len(arrays) == len(expected)
            assert arrays.time.tolist() == [t for t, _ in expected]
            for k in (0, len(expected) // 2, len(expected) - 1):
                assert_same_cdr(arrays[k], expected[k][1], f"{topic}[{k}]")


def test_a_nested_struct_array_gives_its_fields_per_message_as_rosbags_reads_them():
    """``arr.transforms.child_frame_id[i]``, ``arr.transforms.transform.translation.x[i]``: the fields of a
    ``TransformStamped[]`` per message, by attribute and by name, equal rosbags' for every message."""
    from rosbags.highlevel import AnyReader

    path = DATA / "db3" / "MichaelGrupp__evo__test__data__tf_example"
    if not path.exists():
        pytest.skip(NO_DATA)
    with AnyReader([path], default_typestore=HUMBLE) as reader:
        theirs = [reader.deserialize(d, c.msgtype).transforms for c, _, d in reader.messages()
                  if c.topic == "/tf"]
    with open_quietly(path) as bag:
        transforms = bag.read("/tf").transforms
    assert len(transforms) == len(theirs) > 0
    frames, x = transforms.child_frame_id, transforms.transform.translation.x
    stamps, w = transforms["header"]["stamp"]["sec"], transforms["transform"]["rotation"]["w"]
    for i, expected in enumerate(theirs):
        assert list(frames[i]) == [t.child_frame_id for t in expected]
        assert x[i].tolist() == [t.transform.translation.x for t in expected]
        assert stamps[i].tolist() == [t.header.stamp.sec for t in expected]
        assert w[i].tolist() == [t.transform.rotation.w for t in expected]
    with pytest.raises(AttributeError, match="has no field 'nope'"):
        transforms.nope
    with pytest.raises(fastbag.NotFoundError, match="has no field 'nope'"):
        transforms["nope"]
    assert "child_frame_id" in dir(transforms)


@pytest.mark.parametrize("name", [
    "ros2__rosbag2__rosbag2_tests__resources__cdr_test",            # QoS metadata disagrees: rosbags yields 0
    "ros2__rosbag2__rosbag2_tests__resources__sqlite3__wrong_rmw_test",  # rosbags refuses the format name
])
def test_values_rosbags_cannot_read_are_proved_from_the_raw_cdr(name):
    from rosbags.typesys import Stores, get_typestore, get_types_from_msg

    path, sibling = DATA / "db3" / name, DATA / "db3" / "ros2__rosbag2__rosbag2_tests__resources__sqlite3__cdr_test"
    if not path.exists() or not sibling.exists():
        pytest.skip(NO_DATA)
    con = sqlite3.connect(f"file:{sibling / 'cdr_test_0.db3'}?mode=ro&immutable=1", uri=True)
    stored = dict(con.execute("SELECT topic_type, encoded_message_definition FROM message_definitions"))
    con.close()
    store = get_typestore(Stores.ROS2_HUMBLE)
    for msgtype, text in stored.items():  # main type and its MSG: blocks
        blocks = text.split("=" * 80 + "\n")
        store.register(get_types_from_msg(blocks[0], msgtype))
        for block in blocks[1:]:
            header, _, body = block.partition("\n")
            pkg, _, typ = header.removeprefix("MSG: ").partition("/")
            store.register(get_types_from_msg(body, f"{pkg}/msg/{typ}"))
    supplied = {t: text.split("=" * 80)[0] for t, text in stored.items()}
    for block in (b for text in stored.values() for b in text.split("=" * 80 + "\n")[1:]):
        header, _, body = block.partition("\n")
        supplied.setdefault(header.removeprefix("MSG: "), body)
    with open_quietly(path, definitions=supplied) as bag:
        for m in bag.messages():
            assert_same_cdr(m.msg, store.deserialize_cdr(bytes(m.data), m.connection.msgtype), m.topic)
