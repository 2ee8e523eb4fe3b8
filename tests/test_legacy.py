"""Legacy ROS bags (formats 1.2 and 1.1) read exactly as the classic reader and the raw bytes say.

rosbags cannot be the oracle here: it refuses both formats ("File magic is
invalid", see ``../shared/data/MANIFEST.tsv``). The proofs use instead:

- **Format 1.2, the three real 2010 bags in ``ros1legacy/``.** Raw messages
  (topic, time in ns, bytes), for the whole bag, every topic and several time
  windows, equal what the classic ``rosbag`` module reads (the ``py3rosmsgs``
  wheel; imported inside the tests, skipped with a reason when absent) *and*
  what an independent ``struct`` walk of the records finds
  (``legacy_fixtures.parse_v12``). Classic rosbag's public ``read_messages``
  fails on 1.2 under Python 3 (it passes 7 arguments to a 6-argument method),
  so its ``bag._reader.read_messages(topics, start, end, None, raw)`` is called
  directly; its time window is inclusive, fastbag's ``[start, end)``, and the
  helpers convert. Per-topic counts, types and md5sums equal the bag's own
  index records and definition records, parsed in the test; the stored
  definition text is returned unchanged. Decoded values - ``bag.read(topic)[i]``,
  ``to_dict()``, the columns, and ``m.msg`` of decoded ``messages()`` - equal,
  field by field and floats bit for bit, the genpy messages classic rosbag
  deserializes with the bag's stored definitions (``roslib/Header`` era
  texts). Opening and reading these intact files warns nothing. A copy whose
  definition record is emptied (index positions shifted to match) reads raw
  only, and decodes as classic rosbag does once ``definitions=`` supplies it.
- **Unindexed / damaged 1.2.** Copies of each real bag with ``index_pos`` zeroed,
  the index records cut off, both, the index overwritten with garbage, its
  position pointing into a message or past the end, a count disagreeing with
  its data, entries pointing nowhere, or a recorder killed mid-message: the
  same messages (minus the cut one) as the intact original per the record
  walk, the same topics, decoded values as classic rosbag's, exactly one
  ``FastbagWarning``.
- **Format 1.1, written by the tests** (no real file exists, and classic
  rosbag refuses 1.1: "unsupported bag version 101"): four topics
  (``std_msgs/String``, ``geometry_msgs/Point``, ``sensor_msgs/LaserScan`` with
  a Header and float32[] arrays, and a custom type with constants, nested
  arrays of fixed and variable structs from another package and the same
  package, uint8[], fixed int32[3], string[], time, duration, bool, int64,
  uint64), values serialized by rosbags. Raw reads equal the written rows;
  decoded reads with ``definitions=`` given as a dict, as a
  ``<pkg>/msg/<Type>.msg`` folder, a ``<pkg>/<Type>.msg`` folder and a mix equal
  the rosbags values (``oracle.assert_same``); without definitions raw works
  and ``read`` raises DecodeError naming topic and type; a missing dependency
  fails only the topics that need it; a wrong definition warns with both
  md5sums; out-of-order records come out in time order; a topic recorded
  with two types keeps each message's connection and refuses one array; a
  type without fields (``std_msgs/Empty``) decodes from its empty text; a
  file cut inside a record yields every complete message with one warning, a
  file cut at a record boundary is a complete (smaller) bag and warns nothing
  (every boundary, 40 seeded offsets, and a Hypothesis property over arbitrary
  payloads - newlines included - and cut points).
- **The CLI**: ``python -m fastbag info`` (text and ``--json``) on 1.2 and 1.1.
"""

from __future__ import annotations

import json
import random
import re
import struct
import subprocess
import sys
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastbag
from fastbag.msg.msgdef import parse_definition
from conftest import classic_rosbag, data_file, data_files
from legacy_fixtures import (
    MAGIC_V11, V11_TEXTS, V11_TOPICS, assert_same_genpy, classic_decoded, classic_raw, parse_v12, raw_record12,
    rosname, rows12, v11_md5sums, v11_typestore, v11_values, with_definition_replaced, write_msg_folder, write_v11)
from oracle import assert_same

LEGACY = data_files("ros1legacy")
GPSD = "ros1legacy/pbouffard__ccny-ros-pkg-pbouffard__ccny_ground_station__gpsd_viewer__demo__demo@381f1a07.bag"
REPO = Path(__file__).resolve().parents[1]
CLASSIC_MISSING = ("classic rosbag is the oracle for ROS bag 1.2 (rosbags refuses legacy files: 'File magic is "
                   "invalid'); install it with: pip install py3rosmsgs pycryptodomex rospkg pyyaml")


def classic() -> None:
    pytest.importorskip("rosbag", reason=CLASSIC_MISSING)
    pytest.importorskip("genpy", reason=CLASSIC_MISSING)


@contextmanager
def caught():
    """Record every warning raised inside (Numba's own compile-time warnings excepted)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        found: list = []
        yield found
    found.extend(w for w in got if not w.category.__module__.startswith("numba"))


def texts(found: list) -> list[str]:
    return [f"{w.category.__name__}: {w.message}" for w in found]


def assert_one_fastbag_warning(found: list) -> str:
    assert len(found) == 1 and issubclass(found[0].category, fastbag.FastbagWarning), texts(found)
    return str(found[0].message)


def ours_raw(bag: fastbag.Bag, topics=None, start=None, end=None) -> list[tuple[str, int, bytes]]:
    out = []
    for m in bag.messages(topics, start, end, raw=True):
        assert isinstance(m.data, memoryview) and type(m.time) is int
        assert m.connection.topic == m.topic
        out.append((m.topic, m.time, bytes(m.data)))
    return out


def windows(times: list[int]) -> list[tuple[int | None, int | None]]:
    """Windows on message times, between them, open on either side, empty, the last message alone."""
    n = len(times)
    return [(times[n // 4], times[3 * n // 4]), (times[n // 4] + 1, times[3 * n // 4] + 1),
            (None, times[n // 2]), (times[n // 2], None), (times[0], times[0]), (times[-1], times[-1] + 1),
            (times[0] - 10**9, times[-1] + 10**9)]


def within(rows: list, start: int | None, end: int | None) -> list:
    return [r for r in rows if (start is None or r[1] >= start) and (end is None or r[1] < end)]


_CLASSIC_CACHE: dict = {}


def classic_messages(path: Path) -> list:
    """Classic rosbag's decoded messages of a whole bag (cached: several tests compare with them)."""
    if path not in _CLASSIC_CACHE:
        _CLASSIC_CACHE[path] = classic_decoded(path)
    return _CLASSIC_CACHE[path]


def assert_topic_matches_classic(bag: fastbag.Bag, topic: str, theirs: list, *, to_dict: bool = True) -> None:
    """bag.read(topic): length, times, records, columns and to_dict() equal classic rosbag's messages."""
    arr = bag.read(topic)
    assert len(arr) == len(theirs)
    assert np.asarray(arr.time).dtype == np.int64
    assert np.asarray(arr.time).tolist() == [t for _, t, _ in theirs]
    for i, (_, _, msg) in enumerate(theirs):
        assert_same_genpy(arr[i], msg, f"{topic}[{i}]")
    # columns: the header, one value per message
    header = arr["header"]
    assert np.asarray(header["seq"]).tolist() == [m.header.seq for _, _, m in theirs]
    assert np.asarray(header["stamp"]["secs"]).tolist() == [m.header.stamp.secs for _, _, m in theirs]
    assert np.asarray(header["stamp"]["nsecs"]).tolist() == [m.header.stamp.nsecs for _, _, m in theirs]
    assert list(header["frame_id"]) == [m.header.frame_id for _, _, m in theirs]
    # attribute access and to_dict() of the first record
    first = arr[0]
    assert int(first.header.stamp["secs"]) == theirs[0][2].header.stamp.secs
    if to_dict:
        assert_same_genpy(first.to_dict(), theirs[0][2], f"{topic}[0].to_dict()")


# -- 1. format 1.2: the real bags -------------------------------------------------------------------


@pytest.mark.parametrize("path", LEGACY)
def test_v12_metadata_equals_the_index_records(path):
    parsed = parse_v12(path)
    assert parsed.index_pos == parsed.index[next(iter(parsed.index))].pos  # an intact, indexed file
    with caught() as found:
        with fastbag.open(path) as bag:
            assert bag.version == "1.2"
            assert sorted(bag.topics) == sorted(parsed.index)
            for topic, index in parsed.index.items():
                info = bag.topics[topic]
                msgtype, md5sum, definition = parsed.definitions[topic]
                assert index.ver == 0
                assert info.message_count == index.count == len(index.entries)
                assert info.msgtype == index.msgtype == msgtype
                assert info.md5sum == md5sum
                assert info.definition == definition  # the stored text, unchanged
            times = [t for index in parsed.index.values() for t, _ in index.entries]
            assert bag.message_count == sum(i.count for i in parsed.index.values()) == len(parsed.messages)
            assert bag.start_time == min(times) and bag.end_time == max(times)
            assert not bag.recovered
            assert (bag.chunk_count, bag.compression, bag.compression_sizes) == (0, {}, {})  # (no chunks: it was 1)
    assert not found, texts(found)


@pytest.mark.parametrize("path", LEGACY)
def test_v12_raw_messages_equal_classic_rosbag(path):
    classic()
    parsed = parse_v12(path)
    walked = rows12(parsed)
    with caught() as found:
        with fastbag.open(path) as bag:
            whole = ours_raw(bag)
            assert whole == classic_raw(path) == walked
            for topic, index in parsed.index.items():
                mine = ours_raw(bag, [topic])
                assert mine == classic_raw(path, [topic]) == [r for r in walked if r[0] == topic]
                assert len(mine) == index.count
                assert [t for _, t, _ in mine] == [t for t, _ in index.entries]
            times = [t for _, t, _ in whole]
            first_topic = whole[0][0]
            for start, end in windows(times):
                got = ours_raw(bag, None, start, end)
                assert got == classic_raw(path, None, start, end) == within(walked, start, end), (start, end)
                got = ours_raw(bag, [first_topic], start, end)
                assert got == classic_raw(path, [first_topic], start, end), (first_topic, start, end)
    assert not found, texts(found)


@pytest.mark.parametrize("path", LEGACY)
def test_v12_decoded_values_equal_classic_rosbag(path):
    classic()
    theirs = classic_messages(path)
    with caught() as found:
        with fastbag.open(path) as bag:
            for topic in bag.topics:
                assert_topic_matches_classic(bag, topic, [r for r in theirs if r[0] == topic])
            decoded = list(bag.messages(raw=False))
            assert len(decoded) == len(theirs)
            for k, (m, (topic, time, msg)) in enumerate(zip(decoded, theirs)):
                assert (m.topic, m.time) == (topic, time)
                assert_same_genpy(m.msg, msg, f"messages()[{k}] {topic}")
            # a window of one topic, decoded
            topic = theirs[0][0]
            mine = [r for r in theirs if r[0] == topic]
            start, end = mine[len(mine) // 3][1], mine[2 * len(mine) // 3][1] + 1
            part = bag.read(topic, start, end)
            want = within(mine, start, end)
            assert np.asarray(part.time).tolist() == [t for _, t, _ in want]
            for i, (_, _, msg) in enumerate(want):
                assert_same_genpy(part[i], msg, f"{topic} window [{i}]")
    assert not found, texts(found)


@pytest.mark.parametrize("path", LEGACY)
def test_v12_first_index_entries_point_at_definition_records(path):
    """The premise the raw tests rely on: a reader must skip the definition record an index entry points at."""
    parsed = parse_v12(path)
    op_at = {r.pos: r.op for r in parsed.records}
    for topic, index in parsed.index.items():
        first = index.entries[0][1]
        assert op_at[first] == 0x01 and parsed.records[[r.pos for r in parsed.records].index(first)].fields[
            "topic"].decode() == topic
        assert all(op_at[pos] == 0x02 for _, pos in index.entries[1:])


LASER = "ros1legacy/CCNYRoboticsLab__scan_tools__laser_scan_sparsifier__demo__demo.bag"


def test_v12_lost_definition_is_supplied_by_definitions(tmp_path):
    """A 1.2 bag whose definition record is empty: raw only, until ``definitions=`` supplies the type."""
    classic()
    source = data_file(LASER)
    parsed = parse_v12(source)
    path = tmp_path / "lost.bag"
    path.write_bytes(with_definition_replaced(parsed, "scan", ""))
    rewritten = parse_v12(path)
    assert rewritten.definitions["scan"][2] == "" and rows12(rewritten) == rows12(parsed)
    assert rewritten.index_pos == rewritten.index["scan"].pos  # still indexed, positions shifted to match
    theirs = classic_messages(source)
    with caught() as found:
        with fastbag.open(path) as bag:
            assert not bag.recovered
            assert ours_raw(bag) == rows12(parsed)
            with pytest.raises(fastbag.DecodeError) as info:
                bag.read("scan")
            assert "scan" in str(info.value) and "sensor_msgs/LaserScan" in str(info.value)
        with fastbag.open(path, definitions=V11_TEXTS) as bag:
            assert_topic_matches_classic(bag, "scan", theirs)
    assert not found, texts(found)


# -- 2. format 1.2 without a usable index -------------------------------------------------------------


def _set_u64_field(data: bytearray, start: int, end: int, name: bytes, value: int) -> None:
    at = data.index(name + b"=", start, end) + len(name) + 1
    data[at:at + 8] = struct.pack("<Q", value)


def _set_u32_field(data: bytearray, start: int, end: int, name: bytes, value: int) -> None:
    at = data.index(name + b"=", start, end) + len(name) + 1
    data[at:at + 4] = struct.pack("<I", value)


def damaged_copy(parsed, variant: str) -> tuple[bytes, int]:
    """The damaged file and how many of the original's messages (in file order) it still holds."""
    data = bytearray(parsed.data)
    header = parsed.header
    index_pos, n = parsed.index_pos, len(parsed.messages)
    first_index = min(i.pos for i in parsed.index.values())
    if variant == "index_pos_zero":
        _set_u64_field(data, header.pos, header.data_pos, b"index_pos", 0)
    elif variant == "index_cut":
        del data[index_pos:]
    elif variant == "last_index_record_cut":
        last = max((r for r in parsed.records if r.op == 0x04), key=lambda r: r.pos)
        assert last.end == len(data)
        del data[last.data_pos + len(last.data) // 2 + 3:]  # mid-entry
    elif variant == "index_pos_zero_and_cut":
        _set_u64_field(data, header.pos, header.data_pos, b"index_pos", 0)
        del data[index_pos:]
    elif variant == "index_garbage":
        data[index_pos:] = b"\xff" * (len(data) - index_pos)
    elif variant == "index_pos_into_a_message":
        _set_u64_field(data, header.pos, header.data_pos, b"index_pos", parsed.messages[n // 2].pos + 3)
    elif variant == "index_pos_past_the_end":
        _set_u64_field(data, header.pos, header.data_pos, b"index_pos", len(data) + 1000)
    elif variant == "index_count_disagrees_with_its_data":
        record = next(r for r in parsed.records if r.pos == first_index)
        _set_u32_field(data, record.pos, record.data_pos, b"count", u32_count(record) + 1)
    elif variant == "index_entries_point_nowhere":
        record = next(r for r in parsed.records if r.pos == first_index)
        for k in range(u32_count(record)):
            at = record.data_pos + 16 * k + 8
            (pos,) = struct.unpack_from("<Q", data, at)
            data[at:at + 8] = struct.pack("<Q", pos + 1)
    elif variant == "recorder_killed_mid_message":
        _set_u64_field(data, header.pos, header.data_pos, b"index_pos", 0)
        last = parsed.records[[r.op for r in parsed.records].index(0x04) - 1]
        assert last.op == 0x02
        del data[last.data_pos + len(last.data) // 2:]
        return bytes(data), n - 1
    else:
        raise AssertionError(variant)
    return bytes(data), n


def u32_count(record) -> int:
    return struct.unpack("<I", record.fields["count"])[0]


DAMAGE = ["index_pos_zero", "index_cut", "last_index_record_cut", "index_pos_zero_and_cut", "index_garbage",
          "index_pos_into_a_message", "index_pos_past_the_end", "index_count_disagrees_with_its_data", "index_entries_point_nowhere",
          "recorder_killed_mid_message"]


@pytest.mark.parametrize("variant", DAMAGE)
@pytest.mark.parametrize("path", LEGACY)
def test_v12_without_a_usable_index_is_scanned(path, variant, tmp_path):
    parsed = parse_v12(path)
    data, kept = damaged_copy(parsed, variant)
    copy = tmp_path / f"{variant}.bag"
    copy.write_bytes(data)
    kept_messages = sorted(parsed.messages[:kept], key=lambda m: m.time)
    want = [(m.topic, m.time, m.data) for m in kept_messages]
    with caught() as found:
        with fastbag.open(copy) as bag:
            assert bag.version == "1.2"
            assert bag.recovered
            got = ours_raw(bag)
            assert got == want
            counts = Counter(m.topic for m in kept_messages)
            assert {t: i.message_count for t, i in bag.topics.items()} == dict(counts)
            for topic, info in bag.topics.items():
                assert (info.msgtype, info.md5sum, info.definition) == parsed.definitions[topic]
            for topic in counts:
                assert ours_raw(bag, [topic]) == [r for r in want if r[0] == topic]
            start, end = want[len(want) // 3][1], want[2 * len(want) // 3][1]
            assert ours_raw(bag, None, start, end) == within(want, start, end)
            smallest = min(counts, key=lambda t: (counts[t] * max(len(m.data) for m in kept_messages
                                                                    if m.topic == t)))
            arr = bag.read(smallest)
            assert len(arr) == counts[smallest]
    message = assert_one_fastbag_warning(found)
    assert copy.name in message
    # decoded values still equal classic rosbag's reading of the intact original
    if _has_classic():
        theirs = [r for r in classic_messages(path) if r[0] == smallest][:counts[smallest]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastbag.FastbagWarning)
            with fastbag.open(copy) as bag:
                assert_topic_matches_classic(bag, smallest, theirs, to_dict=False)


def _has_classic() -> bool:
    try:
        import genpy  # noqa: F401
        classic_rosbag()
    except ImportError:
        return False
    return True


# -- 3. format 1.1, written from scratch -----------------------------------------------------------------


@pytest.fixture(scope="module")
def v11(tmp_path_factory):
    """The 1.1 bag: 40 interleaved messages on 4 topics, its rows and the rosbags values they serialize."""
    store = v11_typestore()
    md5sums = v11_md5sums(store)
    values = v11_values(store)
    rows = [(topic, time, bytes(store.serialize_ros1(msg, rosname(V11_TOPICS[topic]))))
            for topic, time, msg in values]
    folder = tmp_path_factory.mktemp("v11")
    path = folder / "v11.bag"
    ends = write_v11(path, [(t, md5sums[V11_TOPICS[t]], V11_TOPICS[t], time, data) for t, time, data in rows])
    return SimpleNamespace(path=path, store=store, md5sums=md5sums, values=values, rows=rows, ends=ends,
                           folder=folder)


def parse_v11(data: bytes) -> list[tuple[str, str, str, int, bytes]]:
    """An independent walk of a complete 1.1 file."""
    assert data.startswith(MAGIC_V11)
    out, p = [], len(MAGIC_V11)
    while p < len(data):
        lines = []
        for _ in range(3):
            q = data.index(b"\n", p)
            lines.append(data[p:q].decode())
            p = q + 1
        sec, nsec, n = struct.unpack_from("<III", data, p)
        p += 12
        out.append((*lines, sec * 10**9 + nsec, data[p:p + n]))
        p += n
    assert p == len(data)
    return out


def test_v11_fixture_is_what_it_claims(v11):
    """The fixture itself: a 1.1 file walked back to the rows, payloads rosbags deserializes to the values."""
    walked = parse_v11(v11.path.read_bytes())
    assert [(t, time, data) for t, _, _, time, data in walked] == v11.rows
    assert all((md5, msgtype) == (v11.md5sums[V11_TOPICS[t]], V11_TOPICS[t]) for t, md5, msgtype, _, _ in walked)
    times = [t for _, t, _ in v11.rows]
    assert times == sorted(times) and len(set(times)) == len(times)
    for (topic, _, data), (_, _, msg) in zip(v11.rows, v11.values):
        back = v11.store.deserialize_ros1(data, rosname(V11_TOPICS[topic]))
        assert v11.store.serialize_ros1(back, rosname(V11_TOPICS[topic])) == data
    if _has_classic():  # classic rosbag does not read 1.1 at all
        rosbag = classic_rosbag()

        with pytest.raises(rosbag.ROSBagException, match="unsupported bag version 101"):
            rosbag.Bag(str(v11.path))


def test_v11_has_no_chunks(v11):
    with fastbag.open(v11.path) as bag:
        assert (bag.version, bag.chunk_count, bag.compression) == ("1.1", 0, {})


def test_v11_raw_without_definitions(v11):
    with fastbag.open(v11.path) as bag:
        assert bag.version == "1.1"
        counts = Counter(t for t, _, _ in v11.rows)
        assert sorted(bag.topics) == sorted(V11_TOPICS)
        for topic, info in bag.topics.items():
            assert (info.msgtype, info.md5sum, info.message_count) == (
                V11_TOPICS[topic], v11.md5sums[V11_TOPICS[topic]], counts[topic])
        assert bag.message_count == len(v11.rows)
        assert (bag.start_time, bag.end_time) == (v11.rows[0][1], v11.rows[-1][1])
        assert ours_raw(bag) == v11.rows
        for topic in V11_TOPICS:
            assert ours_raw(bag, [topic]) == [r for r in v11.rows if r[0] == topic]
        for m in bag.messages(raw=True):
            assert m.connection.msgtype == V11_TOPICS[m.topic]
            assert m.connection.md5sum == v11.md5sums[m.connection.msgtype]
        for start, end in windows([t for _, t, _ in v11.rows]):
            assert ours_raw(bag, None, start, end) == within(v11.rows, start, end)
            assert ours_raw(bag, ["/scan"], start, end) == within([r for r in v11.rows if r[0] == "/scan"],
                                                                  start, end)


def test_v11_decoding_without_definitions_raises(v11):
    with fastbag.open(v11.path) as bag:
        for topic, msgtype in V11_TOPICS.items():
            with pytest.raises(fastbag.DecodeError) as info:
                bag.read(topic)
            assert info.value.topic == topic
            assert topic in str(info.value) and msgtype in str(info.value)
            with pytest.warns(fastbag.FastbagWarning, match=f"{topic} cannot be decoded"):
                first = next(iter(bag.messages([topic], raw=False)))
            with pytest.raises(fastbag.DecodeError, match="no message definitions"):
                first.msg.header
        assert ours_raw(bag) == v11.rows  # raw reading is unaffected by the failures


def definitions_for(kind: str, root: Path):
    if kind == "dict":
        return dict(V11_TEXTS)
    if kind == "composed":  # each topic's type alone, as a 2.0 connection stores it: its text, then MSG: blocks
        return {main: V11_TEXTS[main] + "".join(f"{'=' * 80}\nMSG: {name}\n{text}" for name, text in
                                                V11_TEXTS.items() if name != main)
                for main in V11_TOPICS.values()}
    if kind == "folder_pkg_msg":
        return write_msg_folder(root / "defs_msg", V11_TEXTS, with_msg_dir=True)
    if kind == "folder_pkg_flat_as_str":
        return str(write_msg_folder(root / "defs_flat", V11_TEXTS, with_msg_dir=False))
    if kind == "folder_mixed":
        names = sorted(V11_TEXTS)
        write_msg_folder(root / "defs_mixed", {n: V11_TEXTS[n] for n in names[::2]}, with_msg_dir=True)
        return write_msg_folder(root / "defs_mixed", {n: V11_TEXTS[n] for n in names[1::2]}, with_msg_dir=False)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["dict", "composed", "folder_pkg_msg", "folder_pkg_flat_as_str", "folder_mixed"])
def test_v11_decoded_with_definitions(v11, kind, tmp_path):
    definitions = definitions_for(kind, tmp_path)
    with caught() as found:
        with fastbag.open(v11.path, definitions=definitions) as bag:
            assert bag.version == "1.1"
            assert ours_raw(bag) == v11.rows
            for topic, msgtype in V11_TOPICS.items():
                # the composed definition is what the topic reports, and it hashes to the recorded md5sum
                info = bag.topics[topic]
                assert info.definition.startswith(V11_TEXTS[msgtype].rstrip("\n"))
                assert parse_definition(msgtype, info.definition, allow_empty=True).md5sum() == info.md5sum
                mine = [(time, msg) for t, time, msg in v11.values if t == topic]
                arr = bag.read(topic)
                assert len(arr) == len(mine)
                assert np.asarray(arr.time).tolist() == [time for time, _ in mine]
                for i, (_, msg) in enumerate(mine):
                    assert_same(arr[i], msg, f"{topic}[{i}]")
                assert arr[0].to_dict().keys() == {f for f in arr[0].fields}
            custom = bag.read("/custom")
            assert custom[0].constants == {"KIND_A": 1, "KIND_B": 2} and custom[0].KIND_B == 2
            assert np.asarray(custom["kind"]).tolist() == [m.kind for t, _, m in v11.values if t == "/custom"]
            assert np.asarray(bag.read("/point")["x"]).tobytes() == np.array(
                [m.x for t, _, m in v11.values if t == "/point"], dtype=np.float64).tobytes()
            start, end = v11.values[9][1], v11.values[31][1]
            part = bag.read("/scan", start, end)
            want = [(time, msg) for t, time, msg in v11.values[9:31] if t == "/scan"]
            assert np.asarray(part.time).tolist() == [time for time, _ in want]
            for i, (_, msg) in enumerate(want):
                assert_same(part[i], msg, f"/scan window [{i}]")
            decoded = list(bag.messages(raw=False))
            assert len(decoded) == len(v11.values)
            for k, (m, (topic, time, msg)) in enumerate(zip(decoded, v11.values)):
                assert (m.topic, m.time, bytes(m.data)) == v11.rows[k]
                assert_same(m.msg, msg, f"messages()[{k}] {topic}")
    assert not found, texts(found)  # the md5sums computed from the given texts agree with the bag's


@pytest.mark.parametrize("missing", ["std_msgs/Header", "my_pkg/Sample", "geometry_msgs/Point"])
def test_v11_missing_dependency_fails_only_its_topics(v11, missing):
    definitions = {k: v for k, v in V11_TEXTS.items() if k != missing}
    needs = {"std_msgs/Header": {"/scan", "/custom"}, "my_pkg/Sample": {"/custom"},
             "geometry_msgs/Point": {"/point", "/custom"}}[missing]
    with fastbag.open(v11.path, definitions=definitions) as bag:
        assert ours_raw(bag) == v11.rows
        for topic, msgtype in V11_TOPICS.items():
            if topic in needs:
                with pytest.raises(fastbag.DecodeError) as info:
                    bag.read(topic)
                assert topic in str(info.value) and msgtype in str(info.value)
            else:
                arr = bag.read(topic)
                mine = [msg for t, _, msg in v11.values if t == topic]
                assert len(arr) == len(mine)
                for i, msg in enumerate(mine):
                    assert_same(arr[i], msg, f"{topic}[{i}]")


def test_v11_wrong_definition_warns_with_both_md5sums(v11):
    wrong = dict(V11_TEXTS, **{"std_msgs/String": "string text\n"})  # same wire format, another md5sum
    with fastbag.open(v11.path, definitions=wrong) as bag:
        with caught() as found:
            arr = bag.read("/chatter")
        message = assert_one_fastbag_warning(found)
        assert v11.md5sums["std_msgs/String"] in message
        assert re.search(r"\b[0-9a-f]{32}\b.*\b[0-9a-f]{32}\b", message, re.S)
        assert list(arr["text"]) == [m.data for t, _, m in v11.values if t == "/chatter"]


def test_v11_records_out_of_time_order_are_read_in_time_order(v11, tmp_path):
    rng = random.Random(11)
    shuffled = v11.rows[:]
    rng.shuffle(shuffled)
    path = tmp_path / "shuffled.bag"
    write_v11(path, [(t, v11.md5sums[V11_TOPICS[t]], V11_TOPICS[t], time, data) for t, time, data in shuffled])
    with fastbag.open(path, definitions=V11_TEXTS) as bag:
        assert ours_raw(bag) == v11.rows
        assert (bag.start_time, bag.end_time) == (v11.rows[0][1], v11.rows[-1][1])
        start, end = v11.rows[10][1], v11.rows[30][1]
        assert ours_raw(bag, None, start, end) == v11.rows[10:30]
        arr = bag.read("/custom")
        mine = [(time, msg) for t, time, msg in v11.values if t == "/custom"]
        assert np.asarray(arr.time).tolist() == [time for time, _ in mine]
        for i, (_, msg) in enumerate(mine):
            assert_same(arr[i], msg, f"/custom[{i}]")


def test_v11_topic_recorded_with_two_types(v11, tmp_path):
    """One topic, two types: raw reads carry each message's own connection; read() refuses to merge them."""
    chatter = [r for r in v11.rows if r[0] == "/chatter"]
    point = [r for r in v11.rows if r[0] == "/point"]
    rows = sorted([("/mixed", time, data, "std_msgs/String") for _, time, data in chatter]
                  + [("/mixed", time, data, "geometry_msgs/Point") for _, time, data in point], key=lambda r: r[1])
    path = tmp_path / "mixed.bag"
    write_v11(path, [(t, v11.md5sums[msgtype], msgtype, time, data) for t, time, data, msgtype in rows])
    with fastbag.open(path, definitions=V11_TEXTS) as bag:
        info = bag.topics["/mixed"]
        assert info.message_count == len(rows) and set(info.msgtypes) == {"std_msgs/String", "geometry_msgs/Point"}
        got = list(bag.messages(raw=True))
        assert [(m.topic, m.time, bytes(m.data), m.connection.msgtype) for m in got] == rows
        assert all(m.connection.md5sum == v11.md5sums[m.connection.msgtype] for m in got)
        with pytest.raises(fastbag.DecodeError) as info:
            bag.read("/mixed")
        assert "/mixed" in str(info.value)
        values = {time: msg for t, time, msg in v11.values}
        for m in bag.messages(raw=False):
            assert_same(m.msg, values[m.time], f"/mixed at {m.time}")


def test_v11_type_without_fields(tmp_path):
    """std_msgs/Empty: its definition is the empty text (md5sum of b"") and its messages are 0 bytes long."""
    md5sum = "d41d8cd98f00b204e9800998ecf8427e"
    path = tmp_path / "empty.bag"
    write_v11(path, [("/tick", md5sum, "std_msgs/Empty", 10**9 * k, b"") for k in range(1, 4)])
    folder = write_msg_folder(tmp_path / "defs", {"std_msgs/Empty": ""}, with_msg_dir=True)
    for definitions in ({"std_msgs/Empty": ""}, folder):
        with fastbag.open(path, definitions=definitions) as bag:
            assert ours_raw(bag) == [("/tick", 10**9 * k, b"") for k in range(1, 4)]
            arr = bag.read("/tick")
            assert len(arr) == 3 and np.asarray(arr.time).tolist() == [10**9, 2 * 10**9, 3 * 10**9]
            assert arr[0].fields == [] and arr[0].to_dict() == {}
            assert [m.msg.to_dict() for m in bag.messages(raw=False)] == [{}, {}, {}]


V11_ROWS = st.lists(
    st.tuples(st.sampled_from(["/a", "/b/c", "/d_1"]),
              st.integers(0, 2**32 - 1), st.integers(0, 10**9 - 1),
              st.binary(max_size=64) | st.sampled_from([b"", b"\n", b"\n\n\n", b"/a\n" + b"0" * 32 + b"\n"])),
    max_size=12, unique_by=lambda r: (r[1], r[2]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=V11_ROWS, cut_at=st.floats(0, 1))
def test_v11_property_arbitrary_payloads_and_cuts(rows, cut_at, tmp_path):
    """Any payload bytes (newlines included), any u32 times; a cut keeps the complete records, warns iff mid-record."""
    md5 = {"/a": "a" * 32, "/b/c": "b" * 32, "/d_1": "c" * 32}
    msgtype = {"/a": "pkg_a/A", "/b/c": "pkg_b/B", "/d_1": "pkg_a/C"}
    written = [(t, sec * 10**9 + nsec, data) for t, sec, nsec, data in rows]
    path = tmp_path / "prop.bag"
    ends = write_v11(path, [(t, md5[t], msgtype[t], time, data) for t, time, data in written])
    blob = path.read_bytes()
    cut = len(MAGIC_V11) + round(cut_at * (len(blob) - len(MAGIC_V11)))
    path.write_bytes(blob[:cut])
    kept = [r for r, e in zip(written, ends) if e <= cut]
    with caught() as found:
        with fastbag.open(path) as bag:
            assert bag.version == "1.1"
            assert ours_raw(bag) == sorted(kept, key=lambda r: r[1])
            assert {t: (i.msgtype, i.md5sum, i.message_count) for t, i in bag.topics.items()
                    if i.message_count} == {t: (msgtype[t], md5[t], n) for t, n in Counter(r[0] for r in kept).items()}
    ours = [w for w in found if issubclass(w.category, fastbag.FastbagWarning)]
    if cut == len(MAGIC_V11) or cut in ends:
        assert not ours, texts(found)
    else:
        assert_one_fastbag_warning(found)


def _cut_points_in_last_record(v11) -> dict[str, int]:
    start = v11.ends[-2]
    topic = v11.rows[-1][0]
    fixed = start + len(topic) + 1 + 33 + len(V11_TOPICS[topic]) + 1  # the three lines end here
    return {"in_topic_line": start + 2, "after_topic_line": start + len(topic) + 1,
            "in_md5_line": start + len(topic) + 10, "in_type_line": fixed - 3, "after_type_line": fixed,
            "in_sec": fixed + 2, "in_length": fixed + 9, "after_length": fixed + 12,
            "in_data": fixed + 12 + len(v11.rows[-1][2]) // 2, "one_byte_short": v11.ends[-1] - 1}


@pytest.mark.parametrize("where", ["in_topic_line", "after_topic_line", "in_md5_line", "in_type_line",
                                   "after_type_line", "in_sec", "in_length", "after_length", "in_data",
                                   "one_byte_short"])
def test_v11_truncated_inside_the_last_message(v11, where, tmp_path):
    cut = _cut_points_in_last_record(v11)[where]
    assert v11.ends[-2] < cut < v11.ends[-1]
    path = tmp_path / "cut.bag"
    path.write_bytes(v11.path.read_bytes()[:cut])
    with caught() as found:
        with fastbag.open(path, definitions=V11_TEXTS) as bag:
            assert bag.version == "1.1"
            assert ours_raw(bag) == v11.rows[:-1]
            assert bag.message_count == len(v11.rows) - 1
            lost = v11.rows[-1][0]
            arr = bag.read(lost)
            mine = [msg for t, _, msg in v11.values[:-1] if t == lost]
            assert len(arr) == len(mine)
            for i, msg in enumerate(mine):
                assert_same(arr[i], msg, f"{lost}[{i}]")
    message = assert_one_fastbag_warning(found)
    assert path.name in message


def test_v11_cut_anywhere(v11, tmp_path):
    """Cut at every record boundary and at 40 seeded offsets: the complete records, warning iff a record is cut."""
    data = v11.path.read_bytes()
    rng = random.Random(1234)
    cuts = [len(MAGIC_V11)] + v11.ends[:-1] + sorted(rng.sample(range(len(MAGIC_V11) + 1, len(data)), 40))
    path = tmp_path / "cut.bag"
    for cut in cuts:
        path.write_bytes(data[:cut])
        complete = sum(1 for e in v11.ends if e <= cut)
        with caught() as found:
            with fastbag.open(path) as bag:
                assert ours_raw(bag) == v11.rows[:complete], cut
                assert bag.message_count == complete
                assert sum(i.message_count for i in bag.topics.values()) == complete
                if complete == 0:
                    assert bag.start_time is None and bag.end_time is None
        if cut == len(MAGIC_V11) or cut in v11.ends:
            assert not [w for w in found if issubclass(w.category, fastbag.FastbagWarning)], (cut, texts(found))
        else:
            assert_one_fastbag_warning(found)


# -- 4. the command line ------------------------------------------------------------------------------


def run_info(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fastbag", "info", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_cli_info_on_a_v12_bag():
    path = data_file(GPSD)
    parsed = parse_v12(path)
    done = run_info(str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "version:     1.2" in lines
    assert re.search(r"^messages:\s+267$", done.stdout, re.M)
    for topic, index in parsed.index.items():
        assert re.search(rf"^(topics:)?\s+{re.escape(topic)}\s+{index.count} msgs\s+:\s+{re.escape(index.msgtype)}$",
                         done.stdout, re.M), done.stdout
    done = run_info("--json", str(path))
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["version"] == "1.2" and info["messages"] == 267 and info["indexed"] is True
    assert {t["topic"]: (t["type"], t["messages"]) for t in info["topics"]} == {
        topic: (index.msgtype, index.count) for topic, index in parsed.index.items()}
    assert info["types"] == {m: md5 for m, md5, _ in parsed.definitions.values()}


def test_cli_info_on_v11_and_unindexed_v12_bags(v11, tmp_path):
    done = run_info("--json", str(v11.path))
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["version"] == "1.1" and info["messages"] == len(v11.rows)
    assert {t["topic"]: t["type"] for t in info["topics"]} == V11_TOPICS
    done = run_info(str(v11.path))
    assert done.returncode == 0 and "version:     1.1" in done.stdout.splitlines()
    parsed = parse_v12(data_file(GPSD))
    data, _ = damaged_copy(parsed, "index_pos_zero")
    (tmp_path / "unindexed.bag").write_bytes(data)
    done = run_info("--json", str(tmp_path / "unindexed.bag"))
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["version"] == "1.2" and info["indexed"] is False and info["messages"] == 267


_V12_MSG = [b"op=\x02", b"topic=/a", b"md5=x", b"type=t", b"sec=" + struct.pack("<I", 5), b"nsec=" + struct.pack("<I", 6)]


@pytest.mark.parametrize(("records", "want_time"), [
    ([_V12_MSG], 5_000_000_006),                                                   # a 1.2 message: read
    ([_V12_MSG], 5_000_000_007),                                                   # its time differs: refused
    ([[b"op=\x07"] + _V12_MSG[1:], _V12_MSG[:4] + [b"sec=\x05\0\0\0", b"nsec=\x07\0\0\0"]], 5_000_000_006),
    ([_V12_MSG[:5]], 5_000_000_006),                                               # sec without nsec
    ([_V12_MSG[:4] + [b"sec=\x05\0\0", b"nsec=\x06\0\0\0"]], 5_000_000_006),       # sec of 3 bytes
    ([[b"op=\x02\x02"] + _V12_MSG[1:]], 5_000_000_006),                           # op of 2 bytes
    ([[b"op=\x01", b"topic=/a"], _V12_MSG], 5_000_000_006),                        # a definition before it
    ([_V12_MSG[:4] + [b"time=" + struct.pack("<II", 5, 6)]], 5_000_000_006),       # 2.0's time field
    ([_V12_MSG[:4] + [b"time=" + struct.pack("<I", 5)]], 5_000_000_006),           # ... of 4 bytes
])
def test_record_checks_agree_with_and_without_the_kernel(records, want_time):
    """Once Numba was loaded (any earlier read in the process) a 1.2 record's time went unchecked: its
    sec/nsec fields were not read, so an index entry pointing at the wrong record (or past a record whose op
    was damaged to 7) gave another message's bytes in silence, where the checked parser refuses. Both
    check the same now."""
    from fastbag.ros1.records import message_spans

    payload = b"".join(raw_record12(f, b"data") for f in records)
    buf = np.frombuffer(payload, dtype=np.uint8)
    outcomes = []
    for kernel in (True, False):
        args = (np.array([a], dtype=np.int64) for a in (0, 0, len(payload), 0, 3, want_time))
        try:
            starts, lengths = message_spans(buf, *args, path="crafted", kernel=kernel)
            outcomes.append((starts.tolist(), lengths.tolist()))
        except fastbag.FastbagError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
