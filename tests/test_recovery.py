"""Unindexed, truncated and damaged bags: every complete message is recovered, with one warning.

rosbags refuses all of these files (unindexed: "reindex before reading"; the 2010
file: AssertionError on its index), so it cannot be the oracle here. Instead:

- ``broken/...test_unindexed.bag``: compared with an independent record walk
  (``rosbags_fixtures.scan_file``); its /rosout_agg messages equal, time and
  bytes, rosbags' reading of the sibling recording ``ros1v2/...test_sample.bag``
  (same generator; its /diagnostics_agg payloads differ), with the same md5sums
  and definitions; and an indexed twin rewritten with ``fastbag.Writer`` reads
  the same in rosbags;
- ``broken/...test_truncated.bag``: verified to be the first 5992 bytes of
  test_unindexed.bag; it yields exactly the messages whose records end before
  the cut (a subsequence, in read order, of test_unindexed's messages - not a
  prefix: the file holds /rosout_agg before /diagnostics_agg);
- ``broken/CCNYRoboticsLab...laser_ortho_projector...demo.bag`` (2010, index-data
  lengths wrong): its 360 scans are, message for message, the 360 scans rosbags
  reads from ``ros1v2/...laser_scan_matcher__demo__demo.bag`` - byte for byte
  once the frame_id "laser" is written "/laser" - received 93-103 ms later, with
  header stamps equal to the matcher bag's receive times: the same recording,
  played back and recorded again;
- ``dummy.bag`` (90-byte header only): no messages, one warning; the empty file:
  BagFormatError.

Generated: bags from fastbag's and rosbags' writers (none/lz4/bz2, many
out-of-order chunks) read identically to rosbags' reading of the intact bag
once their index_pos is zeroed, or when cut where a killed recorder stops; cut
at every record boundary (and, uncompressed, every message boundary) and at 50
seeded random offsets they yield exactly the messages of every complete chunk
plus the complete messages before the cut in a cut chunk (uncompressed: all of
them; lz4/bz2: a prefix in file order), in read order; a corrupt chunk in an
unindexed bag loses that chunk only.
"""

from __future__ import annotations

import random
import re
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag1 import Reader

import fastbag
from conftest import data_file
from rosbags_fixtures import (
    HEADER_END, Layout, assert_same_as_rosbags, conn_spec, fastbag_read, payload_for, rosbags_read, rows,
    scan_file, write_with_fastbag, write_with_rosbags)

UNINDEXED = "broken/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_unindexed.bag"
TRUNCATED = "broken/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_truncated.bag"
SIBLING = "ros1v2/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample.bag"
ORTHO = "broken/CCNYRoboticsLab__scan_tools__laser_ortho_projector__demo__demo.bag"
MATCHER = "ros1v2/CCNYRoboticsLab__scan_tools__laser_scan_matcher__demo__demo.bag"
DUMMY = "broken/SkoltechRobotics__rosbag-rs__dummy.bag"
EMPTY = "broken/cruise-automation__rosbag.js__fixtures__empty-file.bag"


def open_warned(path: Path, match: str) -> tuple[fastbag.Bag, str]:
    """Open, asserting exactly one warning, a FastbagWarning matching ``match``."""
    with pytest.warns(fastbag.FastbagWarning, match=match) as record:
        bag = fastbag.open(path)
    assert len(record) == 1, [str(w.message) for w in record]
    return bag, str(record[0].message)


def read_warned(path: Path) -> tuple[list, list[str]]:
    """All messages; the warnings raised while opening and reading (none other than FastbagWarning allowed)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(path) as bag:
            got = fastbag_read(bag)
    assert all(issubclass(w.category, fastbag.FastbagWarning) for w in caught), [str(w.message) for w in caught]
    return got, [str(w.message) for w in caught]


# -- the real broken files -------------------------------------------------------------------


def test_unindexed_real_bag():
    path = data_file(UNINDEXED)
    bag, text = open_warned(path, "not indexed")
    with bag:
        got = fastbag_read(bag)
        assert bag.recovered
        assert len(got) == bag.message_count == 14
        assert {t: i.message_count for t, i in bag.topics.items()} == {"/diagnostics_agg": 4, "/rosout_agg": 10}
        assert {t: i.msgtype for t, i in bag.topics.items()} == {
            "/diagnostics_agg": "diagnostic_msgs/DiagnosticArray", "/rosout_agg": "rosgraph_msgs/Log"}
        connections = {c.topic: c for c in bag.connections}
    assert str(path) in text and "14" in text
    # 1. the independent record walk finds the same 14 messages
    layout = scan_file(path)
    assert layout.index_pos == 0
    assert got == rows(layout, layout.messages)
    # 2. the sibling recording, read by rosbags: same /rosout_agg messages and same connections
    with Reader(data_file(SIBLING)) as reader:
        assert [r for r in got if r[0] == "/rosout_agg"] == rosbags_read(reader, ["/rosout_agg"])
        assert len(rosbags_read(reader, ["/diagnostics_agg"])) == 4
        for c in reader.connections:
            assert (connections[c.topic].md5sum, connections[c.topic].definition) == (c.digest, c.msgdef.data)


def test_unindexed_real_bag_indexed_twin(tmp_path):
    """Rewritten with an index, rosbags reads exactly what fastbag recovered."""
    path = data_file(UNINDEXED)
    twin = tmp_path / "twin.bag"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag, fastbag.Writer(twin) as w:
            handles = {c.id: w.add_connection(c.topic, c.msgtype, c.definition, c.md5sum, callerid=c.callerid,
                                              latching=c.latching) for c in bag.connections}
            recovered = fastbag_read(bag)
            for m in bag.messages(raw=True):
                w.write(handles[m.connection.id], m.time, m.data)
    with Reader(twin) as reader:
        assert rosbags_read(reader) == recovered
        assert {t: i.msgcount for t, i in reader.topics.items()} == {"/diagnostics_agg": 4, "/rosout_agg": 10}
    assert assert_same_as_rosbags(twin) == recovered


def test_truncated_real_bag_is_a_cut_of_the_unindexed_one():
    truncated, unindexed = data_file(TRUNCATED), data_file(UNINDEXED)
    cut = truncated.stat().st_size
    # Verified, not assumed: the same recording, cut after 5992 bytes.
    assert cut == 5992 and unindexed.read_bytes()[:cut] == truncated.read_bytes()
    bag, text = open_warned(truncated, "not indexed")
    with bag:
        got = fastbag_read(bag)
        assert bag.recovered
    assert "cut off" in text and "4117" in text  # the chunk at offset 4117 is cut off
    layout = scan_file(unindexed)
    complete = [m for m in layout.messages if m.end_in_file <= cut]
    assert got == rows(layout, complete)
    assert complete == layout.messages[:3]  # a prefix, message for message, in file order
    assert [(t, time) for t, time, _ in got] == [("/rosout_agg", 1_700_000_000_000_000_000),
                                                 ("/rosout_agg", 1_700_000_000_100_000_000),
                                                 ("/rosout_agg", 1_700_000_000_200_000_000)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(unindexed) as whole:
            full = fastbag_read(whole)
    assert got == [r for r in full if r in got]  # a subsequence in read order ...
    assert got != full[:len(got)]  # ... not a prefix: /diagnostics_agg at t0 lies after the cut in the file


def test_2010_bag_with_wrong_index_lengths_is_the_matcher_recording():
    path = data_file(ORTHO)
    with pytest.raises(Exception):  # noqa: B017 - documents why rosbags cannot be the oracle here
        with Reader(path) as reader:
            list(reader.messages())
    bag, text = open_warned(path, r"offset 792650 declares 5560 bytes for 278 entries")
    with bag:
        got = fastbag_read(bag)
        assert bag.message_count == bag.topics["/scan"].message_count == 360
        assert bag.compression == {"none": 2}
        (connection,) = bag.connections
    assert "offset 1027986 declares 1640 bytes for 82 entries" in text
    with Reader(data_file(MATCHER)) as reader:
        matcher = rosbags_read(reader)
        (theirs,) = reader.connections
    assert connection.md5sum == theirs.digest and connection.msgtype == "sensor_msgs/LaserScan"
    assert len(got) == len(matcher) == 360
    times = [t for _, t, _ in got]
    assert times == sorted(times) and len(set(times)) == 360
    for (topic, time, data), (_, their_time, theirs_data) in zip(got, matcher):
        assert topic == "/scan"
        # header: seq, stamp (sec, nsec), frame_id; the rest of the LaserScan is identical
        assert theirs_data[12:21] == b"\x05\x00\x00\x00laser"
        assert data == theirs_data[:12] + b"\x06\x00\x00\x00/laser" + theirs_data[21:]
        sec, nsec = struct.unpack_from("<II", data, 4)
        assert sec * 10**9 + nsec == their_time  # stamped when the matcher bag received it
        assert 90_000_000 <= time - their_time <= 105_000_000


def test_dummy_header_only_bag():
    path = data_file(DUMMY)
    bag, text = open_warned(path, r"index_pos 90 .*past the end")
    with bag:
        assert bag.message_count == 0 and fastbag_read(bag) == []
        assert bag.topics == {} and bag.connections == []
        assert bag.start_time is None and bag.end_time is None
    assert str(path) in text


def test_empty_file():
    path = data_file(EMPTY)
    with pytest.raises(fastbag.BagFormatError, match="empty") as info:
        fastbag.open(path)
    assert str(path) in str(info.value) and "offset 0" in str(info.value)


# -- generated bags ----------------------------------------------------------------------------

CONNS = [conn_spec("/imu", "sensor_msgs/Imu"), conn_spec("/chatter", "std_msgs/String"),
         conn_spec("/count", "std_msgs/Int32")]


def _messages():
    rng = np.random.default_rng(17)
    msgs = []
    for k in range(120):
        t = 1_700_000_000 * 10**9 + k * 10_000_000
        msgs.append((0, t, payload_for("sensor_msgs/Imu", k, t, rng)))
        if k % 2:
            msgs.append((1, t, payload_for("std_msgs/String", k, t, rng)))
        if k % 3 == 0:
            msgs.append((2, t + 1, payload_for("std_msgs/Int32", k, t, rng)))
    blocks = [msgs[i:i + 30] for i in range(0, len(msgs), 30)]
    return [m for b in rng.permutation(len(blocks)) for m in blocks[b]]  # chunks out of time order


MESSAGES = _messages()
VARIANTS = [(w, c) for w in ("fastbag", "rosbags") for c in ("none", "lz4", "bz2")]
IDS = [f"{w}-{c}" for w, c in VARIANTS]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("recovery")
    cache = {}

    def get(writer: str, compression: str):
        if (writer, compression) not in cache:
            path = root / f"{writer}-{compression}.bag"
            if writer == "fastbag":
                write_with_fastbag(path, CONNS, MESSAGES, compression=compression, chunk_size=2000)
            else:
                write_with_rosbags(path, CONNS, MESSAGES, compression=compression, chunk_threshold=2000)
            with Reader(path) as reader:
                expected = rosbags_read(reader)
            layout = scan_file(path)
            assert len(layout.chunks) >= 10 and len(layout.messages) == len(MESSAGES)
            cache[writer, compression] = (path, layout, expected)
        return cache[writer, compression]
    return get


def _zero_index_pos(data: bytearray, *, counts: bool = False) -> None:
    for name, size in (("index_pos", 8), ("conn_count", 4), ("chunk_count", 4))[:3 if counts else 1]:
        at = data.index(name.encode() + b"=", 13, HEADER_END)
        data[at + len(name) + 1:at + len(name) + 1 + size] = bytes(size)


@pytest.mark.parametrize(("writer", "compression"), VARIANTS, ids=IDS)
def test_unindexed_copy_reads_every_message(tmp_path, built, writer, compression):
    path, layout, expected = built(writer, compression)
    data = bytearray(path.read_bytes())
    _zero_index_pos(data)
    copy = tmp_path / "unindexed.bag"
    copy.write_bytes(bytes(data))
    bag, text = open_warned(copy, "not indexed")
    with bag:
        assert bag.recovered
        assert fastbag_read(bag) == expected
        assert {t: i.message_count for t, i in bag.topics.items()} == {
            c.topic: sum(1 for i, _, _ in MESSAGES if CONNS[i] is c) for c in CONNS}
        assert bag.compression == {compression: len(layout.chunks)}
        for c in CONNS:
            assert fastbag_read(bag, [c.topic]) == [r for r in expected if r[0] == c.topic]
    assert str(copy) in text and str(len(expected)) in text


@pytest.mark.parametrize(("writer", "compression"), VARIANTS, ids=IDS)
def test_killed_recorder_copy_reads_every_message(tmp_path, built, writer, compression):
    """What a killed recorder leaves: the header never rewritten (index_pos, counts 0), no index section."""
    path, layout, expected = built(writer, compression)
    data = bytearray(path.read_bytes()[:layout.index_pos])
    _zero_index_pos(data, counts=True)
    copy = tmp_path / "recording.bag.active"
    copy.write_bytes(bytes(data))
    bag, _ = open_warned(copy, "not indexed")
    with bag:
        assert fastbag_read(bag) == expected
        assert [(c.id, c.topic, c.msgtype, c.md5sum, c.definition) for c in bag.connections] == [
            (i, c.topic, c.msgtype, c.md5sum, c.msgdef) for i, c in enumerate(CONNS)]


def expected_after_cut(layout: Layout, cut: int, got: list) -> list:
    """What a bag cut at ``cut`` must yield: every complete chunk's messages, and of a chunk cut in its
    payload the complete messages before the cut - all of them when uncompressed, a prefix in file order
    when compressed (how much a streaming decoder gives back depends on its blocks; ``got`` says how many)."""
    keep = []
    for chunk in layout.chunks:
        if chunk.data_end <= cut:
            keep += chunk.messages
        elif chunk.data_start < cut:
            if chunk.compression == "none":
                keep += [m for m in chunk.messages if m.end_in_file <= cut]
            else:
                complete = sum(len(c.messages) for c in layout.chunks if c.data_end <= cut)
                keep += chunk.messages[:max(0, len(got) - complete)]
    return rows(layout, keep)


def cut_points(layout: Layout, name: str) -> list[int]:
    """Every record boundary (the index section's too), every message boundary in uncompressed chunks,
    and 50 seeded random offsets."""
    cuts = {layout.header_end} | {b for b in layout.boundaries if b < layout.size}
    cuts |= {m.end_in_file for m in layout.messages if m.end_in_file is not None}
    rnd = random.Random(name)
    random_cuts = set()
    while len(random_cuts) < 50:
        random_cuts.add(rnd.randrange(layout.header_end, layout.size))
    return sorted(cuts | random_cuts)


@pytest.mark.parametrize(("writer", "compression"), VARIANTS, ids=IDS)
def test_truncated_at_every_boundary_and_random_offsets(tmp_path, built, writer, compression):
    path, layout, expected = built(writer, compression)
    data = path.read_bytes()
    copy = tmp_path / "cut.bag"
    cuts = cut_points(layout, f"{writer}-{compression}")
    assert len(cuts) >= 60
    partial_seen = 0
    for cut in cuts:
        copy.write_bytes(data[:cut])
        got, texts = read_warned(copy)
        assert len(texts) == 1, (cut, texts)
        assert str(copy) in texts[0] and re.search(rf"\b{len(got)} messages?\b", texts[0]), (cut, texts[0])
        assert " a index" not in texts[0], texts[0]  # ("an index data record running past the end")
        want = expected_after_cut(layout, cut, got)
        assert got == want, f"cut at {cut}: {len(got)} messages, expected {len(want)}"
        assert got == [r for r in expected if r in got]  # a subsequence of the intact bag, in read order
        partial_seen += any(c.data_start < cut < c.data_end for c in layout.chunks) and len(got) > 0
    assert partial_seen > 0
    # sanity: the very last cut before the index keeps everything
    copy.write_bytes(data[:layout.index_pos])
    assert read_warned(copy)[0] == expected


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_cut_chunk_keeps_its_complete_messages(tmp_path, built, compression):
    """Spelled out for one chunk: cut in the middle of chunk 5's payload. Uncompressed: exactly the
    messages whose records end before the cut; lz4: between none and all of that chunk's."""
    path, layout, expected = built("fastbag", compression)
    chunk = layout.chunks[5]
    cut = (chunk.data_start + chunk.data_end) // 2
    copy = tmp_path / "cut.bag"
    copy.write_bytes(path.read_bytes()[:cut])
    got, texts = read_warned(copy)
    before = sum(len(c.messages) for c in layout.chunks[:5])
    if compression == "none":
        inside = [m for m in chunk.messages if m.end_in_file <= cut]
        assert 0 < len(inside) < len(chunk.messages)
        assert len(got) == before + len(inside)
    else:
        assert before <= len(got) <= before + len(chunk.messages)
    assert "cut off" in texts[0] and f"offset {chunk.position}" in texts[0]


@pytest.mark.parametrize(("writer", "compression"), [("fastbag", "none"), ("rosbags", "lz4")],
                         ids=["fastbag-none", "rosbags-lz4"])
def test_truncated_at_index_section_boundaries(tmp_path, built, writer, compression):
    path, layout, expected = built(writer, compression)
    data = path.read_bytes()
    copy = tmp_path / "cut.bag"
    lost = {}
    for cut in [b for b in layout.boundaries if layout.index_pos < b < layout.size]:
        copy.write_bytes(data[:cut])
        got, texts = read_warned(copy)
        assert len(texts) == 1
        if got != expected:
            lost[cut] = len(expected) - len(got)
    assert not lost, f"messages lost per cut offset: {lost}"


@pytest.mark.parametrize(("writer", "compression"), VARIANTS, ids=IDS)
def test_corrupt_chunk_in_unindexed_bag_loses_that_chunk_only(tmp_path, built, writer, compression):
    path, layout, expected = built(writer, compression)
    data = bytearray(path.read_bytes())
    _zero_index_pos(data)
    victim = layout.chunks[4]
    n = victim.data_end - victim.data_start
    if compression == "bz2":
        data[victim.data_start + n // 2] ^= 0xFF
    elif compression == "lz4":
        data[victim.data_start:victim.data_start + 4] = b"\x00" * 4  # frame magic
    else:
        data[victim.data_start:victim.data_start + 4] = b"\xff\xff\xff\x00"  # first record's header length
    copy = tmp_path / "corrupt.bag"
    copy.write_bytes(bytes(data))
    bag, text = open_warned(copy, f"offset {victim.position}")
    lost = {(m.time, m.data) for m in victim.messages}
    with bag:
        assert fastbag_read(bag) == [r for r in expected if (r[1], r[2]) not in lost]
        assert bag.message_count == len(expected) - len(victim.messages)


def test_damaged_record_inside_uncompressed_chunk_keeps_what_precedes_it(tmp_path, built):
    path, layout, expected = built("fastbag", "none")
    data = bytearray(path.read_bytes())
    _zero_index_pos(data)
    victim = layout.chunks[4]
    bad = victim.messages[3]
    struct.pack_into("<I", data, victim.data_start + bad.offset, 0xFFFFFF00)
    copy = tmp_path / "damaged.bag"
    copy.write_bytes(bytes(data))
    bag, text = open_warned(copy, f"offset {victim.position}")
    lost = {(m.time, m.data) for m in victim.messages[3:]}
    with bag:
        assert fastbag_read(bag) == [r for r in expected if (r[1], r[2]) not in lost]


def test_messages_of_a_connection_without_its_record_are_said_with_their_chunk(tmp_path):
    """An unindexed bag whose message records in one chunk name a connection that has no record (a damaged
    id): those messages are lost, and the warning names the connection and the chunk they lie in (found by
    hypothesis in tests/test_fuzz.py: the warning named the connection alone)."""
    path = tmp_path / "orphans.bag"
    with fastbag.Writer(path, chunk_size=4096) as writer:
        imu = writer.add_connection("/n", "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
        for k in range(2000):
            writer.write(imu, 10**18 + k * 1000, struct.pack("<i", k))
    layout = scan_file(path)
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, data.index(b"index_pos=") + len(b"index_pos="), 0)  # unindexed
    victim = layout.chunks[3]
    first = data.index(b"op=\x02", victim.data_start)
    conn = data.index(b"conn=", first - 40) + len(b"conn=")
    struct.pack_into("<I", data, conn, 258)  # the first message of the fourth chunk: connection 258
    path.write_bytes(bytes(data))
    bag, text = open_warned(path, "rebuilt the index by scanning")
    with bag:
        assert bag.message_count == 1999
    assert f"lost messages of connection 258 in the chunk at offset {victim.position}, whose connection record is " \
           f"missing" in text


def _scanned(path: Path, monkeypatch, kernel: bool) -> tuple[list, list[str]]:
    """Every message (topic, time, bytes) of a bag that is scanned, and its problems, with the chunk scan's
    kernel forced on or off."""
    from fastbag.ros1 import index

    with monkeypatch.context() as patch:
        patch.setattr(index, "by_kernel", lambda size, up_to: kernel)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fastbag.open(path) as bag:
                return [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)], list(bag.problems)


def test_the_chunk_scan_kernel_reads_what_the_checked_parser_reads(tmp_path, built, monkeypatch):
    """A lost index is rebuilt by walking each chunk's records: a kernel walks runs of message records
    (6-10 us a message in Python: a 360 MB bag cut by a crash opened in 9.6 s), the checked parser every
    other record. On the real unindexed bags and on 300 copies with bytes of their record headers changed
    (op, conn, time fields, their lengths, '=', data lengths), both give the same messages and the same
    account of what was lost."""
    cases = [data_file("broken/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_unindexed.bag")]
    path, layout, _ = built("fastbag", "none")
    data = bytearray(path.read_bytes())
    _zero_index_pos(data)
    rng = random.Random(20261125)
    heads = [chunk.data_start + m.offset for chunk in layout.chunks for m in chunk.messages]
    for k in range(300):
        copy = bytearray(data)
        at = rng.choice(heads) + rng.randrange(0, 48)  # a record's header: its length, fields, data length
        copy[at] = rng.choice((0, 1, 2, 7, 0x3D, 0xFF, copy[at] ^ 1))
        cases.append(tmp_path / f"changed{k}.bag")
        cases[-1].write_bytes(bytes(copy))
    differ = [case.name for case in cases
              if _scanned(case, monkeypatch, kernel=True) != _scanned(case, monkeypatch, kernel=False)]
    assert differ == []
    messages, problems = _scanned(cases[0], monkeypatch, kernel=True)
    assert messages and "rebuilt the index by scanning" in problems[0]


def _record(fields: list[bytes], data: bytes = b"") -> bytes:
    header = b"".join(struct.pack("<I", len(f)) + f for f in fields)
    return struct.pack("<I", len(header)) + header + struct.pack("<I", len(data)) + data


MSG = [b"op=\x02", b"conn=" + struct.pack("<I", 3), b"time=" + struct.pack("<II", 5, 6)]


@pytest.mark.parametrize("odd", [
    [b"op=\x02\x00"] + MSG[1:],                                      # op of two bytes: refused
    MSG[:1] + [b"conn=" + struct.pack("<H", 3)] + MSG[2:],           # conn of two bytes
    MSG[:2] + [b"time=" + struct.pack("<I", 5)],                     # time of four bytes
    MSG[:2],                                                         # no time
    [b"op\x02"] + MSG[1:],                                           # a field without '='
    [b"op=\x07"] + MSG,                                              # op twice: the last counts
    MSG + [b"conn=" + struct.pack("<I", 9)],                         # conn twice
    [b"time=" + struct.pack("<II", 7, 8), b"x=y", b"=", b"conn=" + struct.pack("<I", 4), b"op=\x02"],  # any order
    [b"op=\x05"] + MSG[1:],                                          # another op
    [b"opx=\x02"] + MSG[1:] + [b"op=\x02"],                          # a name that only starts as op
])
def test_the_chunk_scan_kernel_leaves_odd_records_to_the_parser(odd, monkeypatch):
    """Records the kernel must not take as it finds them (the parser refuses them, or reads their fields
    otherwise) between ordinary ones: both walks give the same messages and the same verdict."""
    from fastbag.io.chunks import Chunk
    from fastbag.io.source import BufferSource
    from fastbag.ros1 import index

    payload = np.frombuffer(_record(MSG, b"a") + _record(odd, b"bb") + _record(MSG, b"ccc"), dtype=np.uint8)
    source = BufferSource(payload, "crafted")
    chunk = Chunk(0, "none", payload.size, 0, payload.size)
    results = []
    for kernel in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(index, "by_kernel", lambda size, up_to: kernel)
            entries, conns, complete = index._scan_chunk(source, chunk, payload)
        results.append(({c: e.tolist() for c, e in entries.items()}, conns, complete))
    assert results[0] == results[1]
    assert results[0][0][3][0] == [5, 6, 0]  # the first record, read either way


def test_a_chunk_info_repeating_another_chunks_position_rebuilds_the_index(tmp_path, built):
    """A chunk info whose chunk_pos repeats another's lists one chunk twice and its own chunk not at all:
    that chunk's messages were lost under a note saying the chunk was 'read once'. The index is damaged
    then, and rebuilt by scanning: every message is read (the classic rosbag module refuses the file)."""
    path, layout, expected = built("fastbag", "lz4")
    data = bytearray(path.read_bytes())
    infos = [start for start, op, _, _ in layout.records if op == 6 and start >= layout.index_pos]
    at = data.index(b"chunk_pos=", infos[1]) + len(b"chunk_pos=")
    struct.pack_into("<Q", data, at, layout.chunks[0].position)
    copy = tmp_path / "repeated.bag"
    copy.write_bytes(bytes(data))
    bag, text = open_warned(copy, f"lists the chunk at offset {layout.chunks[0].position} twice")
    with bag:
        assert bag.recovered and fastbag_read(bag) == expected


def test_an_index_pos_at_the_end_with_records_after_the_header_is_scanned(tmp_path, built):
    """A header saying no connections and no chunks, with index_pos at the end of the file, over a file of
    chunks (a header written before the recording, the index lost): nothing was read, and nothing said.
    The records are scanned; an empty bag (nothing after its header) still opens as it is, in silence."""
    path, layout, expected = built("fastbag", "none")
    data = bytearray(path.read_bytes()[:layout.index_pos])
    _zero_index_pos(data, counts=True)
    at = data.index(b"index_pos=", 13, HEADER_END) + len(b"index_pos=")
    struct.pack_into("<Q", data, at, len(data))
    copy = tmp_path / "no_counts.bag"
    copy.write_bytes(bytes(data))
    bag, text = open_warned(copy, "at or past the end of the file")
    with bag:
        assert fastbag_read(bag) == expected
    empty = tmp_path / "empty.bag"
    with fastbag.Writer(empty):
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastbag.open(empty) as bag:
            assert bag.message_count == 0 and not bag.problems


def test_two_index_connection_records_of_one_id_give_one_connection(tmp_path):
    """An extra index connection record reusing another's id with another topic gave bag.connections two
    connections of id 0, in silence (QA). One record per id counts (a second of another topic or type is
    said); here the index then holds fewer than its header announces, so it is rebuilt from the chunks."""
    path = tmp_path / "ids.bag"
    with fastbag.Writer(path) as writer:
        a = writer.add_connection("/a", "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
        b = writer.add_connection("/b", "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
        for k in range(10):
            writer.write(a if k % 2 else b, 10**9 + k, k.to_bytes(4, "little"))
    data = bytearray(path.read_bytes())
    index_pos = struct.unpack_from("<Q", data, data.index(b"index_pos=", 13) + len(b"index_pos="))[0]
    ends = [index_pos]
    for _ in range(2):  # the index's two connection records
        header_len = struct.unpack_from("<I", data, ends[-1])[0]
        data_at = ends[-1] + 4 + header_len
        ends.append(data_at + 4 + struct.unpack_from("<I", data, data_at)[0])
    extra = bytearray(data[ends[1]:ends[2]])  # /b's record, its id made 0: a third record, of id 0
    struct.pack_into("<I", extra, extra.index(b"conn=") + 5, 0)
    data[ends[2]:ends[2]] = extra
    struct.pack_into("<I", data, data.index(b"conn_count=", 13) + len(b"conn_count="), 3)
    copy = tmp_path / "same_id.bag"
    copy.write_bytes(bytes(data))
    with pytest.warns(fastbag.FastbagWarning, match="its index is damaged: the bag header announces 3 connections "
                                                    "and 1 chunks but the index holds 2"):
        bag = fastbag.open(copy)  # (one record per id: the chunks' own records are read instead)
    with bag:
        assert sorted(c.id for c in bag.connections) == [0, 1]
        got = sorted((m.topic, int.from_bytes(bytes(m.data), "little")) for m in bag.messages(raw=True))
    assert got == sorted(("/a" if k % 2 else "/b", k) for k in range(10))


@pytest.mark.parametrize("size", [0, 1, "len-1", "len+1", 2**32 - 1])
@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "unindexed"])
def test_an_uncompressed_chunk_whose_size_field_is_damaged_reads_as_its_data(tmp_path, built, size, indexed):
    """An uncompressed chunk's payload is its data: the header's size repeats its length. A size damaged to
    another number lost the whole intact chunk (a warning said so; size 0 through a rebuilt index, others as
    an error at read), where rosbag reads it. Now it reads as its data, the damage named once."""
    path, layout, expected = built("rosbags", "none")
    chunk = layout.chunks[3]
    data = bytearray(path.read_bytes())
    at = data.index(b"size=", chunk.position, chunk.data_start) + 5
    length = chunk.data_end - chunk.data_start
    value = {"len-1": length - 1, "len+1": length + 1}.get(size, size)
    struct.pack_into("<I", data, at, value)
    if not indexed:
        _zero_index_pos(data)
    copy = tmp_path / "size.bag"
    copy.write_bytes(bytes(data))
    imu = CONNS[0].topic
    with fastbag.open(path) as intact:
        want = [(m.time, m.msg.header.seq, m.msg.linear_acceleration.x) for m in intact.messages(topics=[imu])]
    with pytest.warns(fastbag.FastbagWarning) as said:
        bag = fastbag.open(copy)
    with bag:
        assert fastbag_read(bag) == expected
        assert [(m.time, m.msg.header.seq, m.msg.linear_acceleration.x) for m in bag.messages(topics=[imu])] == want
        assert bag.read(imu)["linear_acceleration.x"].tolist() == [w[2] for w in want]
    text = " ".join(str(w.message) for w in said)
    assert f"the uncompressed chunk at offset {chunk.position} holds {length} bytes, but its header says size " \
           f"{value}: read as its {length} bytes" in text
