"""rosbags' Connection fields on fastbag's connections: code written against rosbags' readers reads them unchanged.

rosbags gives each connection ``msgdef`` (format and text), ``digest``, ``msgcount`` and ``ext`` (ROS 1: the
publishing node and the latching flag; ROS 2: the serialization format and offered QoS profiles), and each topic
``msgdef``; its documentation copies bags with them. The oracle is rosbags' AnyReader on every real recording it
opens: the same fields, connection by connection. Its own recipe for copying a ROS 1 bag runs on fastbag's
connections, and the copy reads back in rosbags with every message and connection header.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import data_file, open_quietly, real_bags

import fastbag

pytest.importorskip("rosbags", reason="rosbags is the oracle here")
from rosbags.highlevel import AnyReader  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402
from rosbags.typesys.msg import normalize_msgtype  # noqa: E402


def peer_connections(path: Path):
    """rosbags' connections and topics of ``path`` (a skip where AnyReader cannot open it)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as peer:
                return list(peer.connections), dict(peer.topics)
    except Exception as exc:  # noqa: BLE001 - whatever the oracle raises, it has no answer to compare with
        pytest.skip(f"rosbags cannot open {path.name}: {type(exc).__name__}: {exc}"[:300])


def paired(ours: list, theirs: list) -> list[tuple]:
    """Connections matched by topic and type, in order (rosbags numbers a ROS 2 recording's from 1, fastbag from
    0; a topic may have several connections of one type: other publishers, other QoS)."""
    mine = defaultdict(list)
    for c in ours:
        mine[(c.topic, normalize_msgtype(c.msgtype))].append(c)
    pairs = []
    for c in theirs:
        found = mine[(c.topic, normalize_msgtype(c.msgtype))]
        assert found, f"rosbags has connection {c.topic} ({c.msgtype}), fastbag does not"
        pairs.append((found.pop(0), c))
    assert not any(mine.values()), f"fastbag has connections rosbags does not: {dict(mine)}"
    return pairs


def same_qos_value(ours, theirs) -> bool:
    """A QoS field of fastbag's dicts (a number in older recordings, a name in newer) against rosbags' enum or
    number."""
    if hasattr(theirs, "name") and hasattr(theirs, "value"):
        return ours == theirs.value if isinstance(ours, int) else str(ours).lower() == theirs.name.lower()
    return ours == theirs


@pytest.mark.parametrize("path", real_bags())
def test_connection_msgdef_digest_and_ext_are_rosbags(path):
    theirs, their_topics = peer_connections(path)
    with open_quietly(path) as bag:
        ours = bag.connections
        topics = bag.topics
        problems = bag.problems
    compared = 0
    for mine, peer in paired(ours, theirs):
        # (a lone MCAP file's channels store their type hash, which rosbags does not give: fastbag gives it)
        assert mine.digest == (peer.digest or mine.type_description_hash) and mine.msgcount == peer.msgcount, \
            mine.topic
        assert type(mine.ext).__name__ == type(peer.ext).__name__, mine.topic
        if type(peer.ext).__name__ == "ConnectionExtRosbag1":
            assert mine.ext == tuple(peer.ext) and mine.ext.callerid == peer.ext.callerid, mine.topic
            assert mine.ext.latching == peer.ext.latching, mine.topic
        else:
            assert mine.ext.serialization_format == peer.ext.serialization_format, mine.topic
            assert len(mine.ext.offered_qos_profiles) == len(peer.ext.offered_qos_profiles), mine.topic
            for qos, their_qos in zip(mine.ext.offered_qos_profiles, peer.ext.offered_qos_profiles):
                for name in ("history", "depth", "reliability", "durability"):
                    assert same_qos_value(qos[name], getattr(their_qos, name)), (mine.topic, name)
        if peer.msgdef.format.name == "NONE":
            # a recording that stores no definition: rosbags says none; fastbag gives the one it decodes with
            # (shipped with it), or none where it has none either
            assert mine.msgdef.format.name in ("MSG", "NONE"), mine.topic
            assert (mine.msgdef.format.name == "NONE") == (mine.schema_encoding == ""), mine.topic
        else:
            assert mine.msgdef.format.name == peer.msgdef.format.name, mine.topic
            assert mine.msgdef.format.value == peer.msgdef.format.value, mine.topic
            # rosbags' own members compare equal to fastbag's, either side and as dict keys: code ported from
            # rosbags (its writers: 'ros2msg' if fmt == MessageDefinitionFormat.MSG else 'ros2idl') branches alike
            assert mine.msgdef.format == peer.msgdef.format and peer.msgdef.format == mine.msgdef.format
            assert not (mine.msgdef.format != peer.msgdef.format)
            assert {peer.msgdef.format: 1}[mine.msgdef.format] == 1
            assert mine.msgdef.data == mine.definition, mine.topic
            if mine.msgdef.data != peer.msgdef.data:  # a stored definition fastbag found wanting: said, and why
                assert any(mine.msgtype in p and "stored in the recording" in p for p in problems), mine.topic
            else:
                assert mine.msgdef == tuple(peer.msgdef) and tuple(mine.msgdef) == peer.msgdef, mine.topic
            compared += 1
    replaced = any("stored in the recording" in p for p in problems)  # (a stored definition found wanting)
    for name, info in topics.items():
        if their_topics[name].msgdef.format.name != "NONE" and not replaced:
            assert info.msgdef.data == their_topics[name].msgdef.data and info.msgdef == info.connections[0].msgdef
    assert compared or all(p.msgdef.format.name == "NONE" for p in theirs)


def test_rosbags_recipe_copies_a_ros1_bag_read_by_fastbag(tmp_path):
    """rosbags' recipe for editing a ROS 1 bag, reading with fastbag: each connection added to rosbags' rosbag1
    Writer with its ``msgdef.data``, ``digest``, ``ext.callerid`` and ``ext.latching``, every message written.
    The copy reads in rosbags as the original does: connections (latched ones too) and messages. One change:
    a ROS 1 bag's ``msgtype`` is rospy's spelling (``pkg/Type``), which that Writer refuses (it takes rosbags'
    ``pkg/msg/Type`` alone): rosbags' own ``normalize_msgtype`` gives it (README, "Code written for rosbag or
    rosbags")."""
    from rosbags.rosbag1 import Writer

    path = data_file("ros1v2/cruise-automation__rosbag.js__fixtures__example.bag")
    out = tmp_path / "copy.bag"
    with fastbag.open(path) as bag, Writer(out) as writer:
        added = {}
        for conn in bag.connections:
            ext = conn.ext
            added[conn.id] = writer.add_connection(conn.topic, normalize_msgtype(conn.msgtype), msgdef=conn.msgdef.data,
                                                   md5sum=conn.digest, callerid=ext.callerid, latching=ext.latching)
        for conn, timestamp, data in bag.messages():
            writer.write(added[conn.id], timestamp, data)
        assert any(c.ext.latching == 1 for c in bag.connections) and any(c.ext.latching == 0 for c in bag.connections)

    def read(p: Path) -> tuple[list, list]:
        with AnyReader([p]) as peer:
            conns = [(c.topic, c.msgtype, c.msgdef, c.digest, c.ext, c.msgcount) for c in peer.connections]
            return conns, [(c.topic, t, bytes(raw)) for c, t, raw in peer.messages()]

    want_conns, want_messages = read(path)
    got_conns, got_messages = read(out)
    assert got_conns == want_conns and got_messages == want_messages and len(got_messages) == 8647


@pytest.mark.parametrize("relative", ["ros1v2/cruise-automation__rosbag.js__fixtures__example.bag",
                                      "db3/MichaelGrupp__evo__test__data__tf_example",
                                      "mcap/ros2__rosbag2__rosbag2_py__test__resources__mcap__talker"])
def test_rosbags_reader_names_is2_paths_and_open(relative):
    """AnyReader code ported by swapping in ``fastbag.open``: ``reader.is2`` (which typestore to use),
    ``reader.paths``, and ``reader.open()`` called after making the reader (a fastbag Bag is open already:
    it checks that it still is)."""
    path = data_file(relative)
    with AnyReader([path]) as peer:
        is2, paths = peer.is2, peer.paths
    reader = open_quietly(path)
    reader.open()
    assert reader.is2 == is2 and reader.paths == paths == [path]
    assert (reader.is2, reader.format) in ((False, "ROS1 bag"), (True, "rosbag2"), (True, "MCAP"))
    assert sum(1 for _ in reader.messages()) == reader.message_count > 0
    reader.close()
    with pytest.raises(ValueError, match="closed"):
        reader.open()
