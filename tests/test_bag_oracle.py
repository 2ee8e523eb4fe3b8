"""fastbag's raw reading equals rosbags', message for message.

Proves, with rosbags 0.11.9's ``rosbag1.Reader`` as the oracle:

- for every real bag in ``../shared/data/ros1v2`` (54 files, 2010-2025, none/bz2/lz4,
  unsorted chunks, one topic on two types, no messages, an empty definition):
  the ``(topic, time, bytes)`` sequence of the whole bag, of each topic alone and
  of two time windows (the middle third; one starting exactly at a repeated
  message time and ending exactly at a later one, for ``[start, end)``), and the
  index metadata (connections, per-topic counts, ``message_count``,
  ``start_time == rosbags.start_time``, ``end_time == rosbags.end_time - 1``);
- the same for bags built here with rosbags' writer: none/bz2/lz4, several
  topics and types, a small chunk threshold (many chunks), times written out of
  order across chunks (overlapping, unsorted chunks), equal timestamps across
  topics and within one connection (tie order), one topic on two connections
  with different types; each also checked against the order computed from the
  spec alone (time, connection, write order), which proves the oracle itself;
- a hypothesis property: random small bags (random topics and types, times with
  repeats, payloads of 0..300 bytes, random compression and chunk threshold)
  written by rosbags read the same in fastbag and rosbags.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rosbags.rosbag1 import Reader

import fastbag.bag
import fastbag.tooling.synth

from conftest import data_files
from rosbags_fixtures import (
    ConnSpec, assert_metadata_same, assert_same_as_rosbags, conn_spec, fastbag_read, open_quietly, payload_for,
    rosbags_read, scan_file, spec_order, windows, write_with_rosbags)

REAL_BAGS = data_files("ros1v2")

# -- every real bag ------------------------------------------------------------------


@pytest.fixture(scope="module")
def rosbags_whole():
    """rosbags' whole-bag reading per path, computed once (the biggest file takes ~1 s)."""
    cache: dict[Path, list] = {}

    def get(path: Path) -> list:
        if path not in cache:
            with Reader(path) as reader:
                cache[path] = rosbags_read(reader)
        return cache[path]
    return get


@pytest.mark.parametrize("path", REAL_BAGS)
def test_real_bag_metadata(path):
    with open_quietly(path) as bag, Reader(path) as reader:
        assert_metadata_same(bag, reader)
        assert sum(info.message_count for info in bag.topics.values()) == bag.message_count


@pytest.mark.parametrize("locator", ["numpy", "kernel"])
@pytest.mark.parametrize("path", REAL_BAGS)
def test_real_bag_whole(path, rosbags_whole, locator, monkeypatch):
    """Every message, raw, as rosbags reads it: records located by NumPy (a small read before Numba is
    loaded) and by the Numba kernel (a large one)."""
    monkeypatch.setattr(fastbag.bag, "_raw_kernel", lambda messages: locator == "kernel")
    expected = rosbags_whole(path)
    with open_quietly(path) as bag:
        got = fastbag_read(bag)
        assert len(got) == len(expected) == bag.message_count
        assert got == expected
        if got:
            assert bag.start_time == min(t for _, t, _ in expected)
            assert bag.end_time == max(t for _, t, _ in expected)


@pytest.mark.parametrize("path", REAL_BAGS)
def test_real_bag_each_topic(path):
    with open_quietly(path) as bag, Reader(path) as reader:
        assert set(bag.topics) == {c.topic for c in reader.connections}
        for topic, info in bag.topics.items():
            expected = rosbags_read(reader, [topic])
            got = fastbag_read(bag, [topic])
            assert len(got) == info.message_count, topic
            assert got == expected, topic


@pytest.mark.parametrize("path", REAL_BAGS)
def test_real_bag_time_windows(path, rosbags_whole):
    times = [t for _, t, _ in rosbags_whole(path)]
    with open_quietly(path) as bag, Reader(path) as reader:
        for start, end in windows(times):
            expected = rosbags_read(reader, start=start, stop=end)
            assert fastbag_read(bag, start=start, end=end) == expected, (start, end)
            # The window is what its definition says, on rosbags' own list.
            assert [t for _, t, _ in expected] == [t for t in times if start <= t < end]


def test_real_bags_cover_the_hard_cases():
    """The parametrization really includes the files the issue names (guards against a renamed corpus)."""
    names = {p.values[0].name for p in REAL_BAGS if p.values[0] is not None}
    if not names:
        pytest.skip("real bags absent")
    for needle in ("bag-with-empty-message-definition", "example-unsorted-chunks", "no-messages",
                   "example-lz4", "example-bz2", "zaki0929__bagfiles__2018__feb13__col"):
        assert any(needle in n for n in names), needle
    assert len(names) >= 54  # the corpus README's count


# -- bags built with rosbags' writer ----------------------------------------------------

IMU = conn_spec("/imu", "sensor_msgs/Imu")
STRING = conn_spec("/chatter", "std_msgs/String")
INT = conn_spec("/count", "std_msgs/Int32")
TWIST = conn_spec("/cmd_vel", "geometry_msgs/Twist")
MIXED_STRING = conn_spec("/mixed", "std_msgs/String", callerid="/talker")
MIXED_INT = conn_spec("/mixed", "std_msgs/Int32", callerid="/counter")
T0 = 1_600_000_000 * 10**9


def _messages(conns: list[ConnSpec], times_per_conn: list[list[int]], seed: int) -> list[tuple[int, int, bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    for index, times in enumerate(times_per_conn):
        for k, t in enumerate(times):
            out.append((index, t, payload_for(conns[index].msgtype, k, t, rng)))
    return out


def scenario_many_chunks():
    """Four topics and types, 800 messages in receive order: many chunks."""
    conns = [IMU, STRING, INT, TWIST]
    rates = [200, 50, 20, 10]
    times = [[T0 + int(k * 1e9 / r) + (k * 7919) % 100_000 for k in range(int(2 * r))] for r in rates]
    msgs = _messages(conns, times, 1)
    msgs.sort(key=lambda m: m[1])
    return conns, msgs


def scenario_out_of_order():
    """Blocks of messages written late: chunks overlap in time and are not sorted by start."""
    conns = [IMU, STRING, INT]
    times = [[T0 + k * 5_000_000 for k in range(300)], [T0 + k * 20_000_000 + 3 for k in range(75)],
             [T0 + k * 50_000_000 + 1 for k in range(30)]]
    msgs = _messages(conns, times, 2)
    rng = np.random.default_rng(3)
    blocks = [msgs[i:i + 25] for i in range(0, len(msgs), 25)]
    order = rng.permutation(len(blocks))
    shuffled = [m for b in order for m in blocks[b]]
    # and a few messages far in the past, at the very end of the file
    shuffled += [(1, T0 - 10**9 + k, b"\x03\x00\x00\x00old") for k in range(3)]
    return conns, shuffled


def scenario_equal_timestamps():
    """Three topics stamped with the same times, written in changing connection order, with repeats on
    one connection, straddling chunk boundaries: only the tie rule orders them."""
    conns = [STRING, INT, TWIST]
    msgs = []
    for k in range(120):
        t = T0 + (k // 4) * 1_000_000  # every time used by 4 consecutive rounds
        order = [(k + j) % 3 for j in range(3)]  # write order rotates: 0,1,2 / 1,2,0 / 2,0,1
        for c in order:
            data = payload_for(conns[c].msgtype, k, t, None)
            msgs.append((c, t, data))
        if k % 5 == 0:
            msgs.append((0, t, b"\x04\x00\x00\x00dup!"))  # same connection, same time again
    return conns, msgs


def scenario_two_types_one_topic():
    """``/mixed`` on a String connection and an Int32 connection, interleaved and tied, plus a plain topic."""
    conns = [MIXED_STRING, INT, MIXED_INT]
    msgs = []
    for k in range(200):
        t = T0 + k * 10_000_000
        msgs.append((2, t, payload_for("std_msgs/Int32", k, t, None)))
        if k % 2 == 0:
            msgs.append((0, t, payload_for("std_msgs/String", k, t, None)))  # tie with connection 2
        if k % 3 == 0:
            msgs.append((1, t + 1, payload_for("std_msgs/Int32", k, t, None)))
    return conns, msgs


SCENARIOS = {
    "many-chunks": scenario_many_chunks,
    "out-of-order": scenario_out_of_order,
    "equal-timestamps": scenario_equal_timestamps,
    "two-types-one-topic": scenario_two_types_one_topic,
}
COMPRESSIONS = ["none", "bz2", "lz4"]
CHUNK_THRESHOLD = 2048  # bytes of uncompressed chunk data: dozens of chunks per bag


@pytest.fixture(scope="module")
def built_bags(tmp_path_factory):
    """(scenario, compression) -> (path, conns, messages): built once per module."""
    root = tmp_path_factory.mktemp("rosbags_built")
    cache = {}

    def get(name: str, compression: str):
        if (name, compression) not in cache:
            conns, msgs = SCENARIOS[name]()
            path = root / f"{name}-{compression}.bag"
            write_with_rosbags(path, conns, msgs, compression=compression, chunk_threshold=CHUNK_THRESHOLD)
            cache[name, compression] = (path, conns, msgs)
        return cache[name, compression]
    return get


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_rosbags_built_bag(built_bags, name, compression):
    path, conns, msgs = built_bags(name, compression)
    expected = spec_order(conns, msgs)
    layout = scan_file(path)
    # The bag is what the scenario claims: many chunks, all of this compression.
    assert len(layout.chunks) >= 8
    assert {c.compression for c in layout.chunks} == {compression}
    with Reader(path) as reader:
        assert rosbags_read(reader) == expected  # the oracle agrees with the spec
    with open_quietly(path) as bag:
        assert bag.compression == {compression: len(layout.chunks)}
    whole = assert_same_as_rosbags(path)
    assert whole == expected


def test_out_of_order_bag_has_unsorted_overlapping_chunks(built_bags):
    path, _, _ = built_bags("out-of-order", "none")
    with Reader(path) as reader:
        infos = reader.chunk_infos
        starts = [i.start_time for i in infos]
        assert starts != sorted(starts)  # chunks not in time order
        spans = sorted((i.start_time, i.end_time) for i in infos)
        assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))  # and some overlap


def test_equal_timestamp_ties_follow_connection_order(built_bags):
    """Spelled out on one tie: same time on three connections written 1,2,0 comes back 0,1,2."""
    path, conns, msgs = built_bags("equal-timestamps", "lz4")
    t = T0 + 1_000_000  # rounds 4..7 use this time, round 5 writes connections 2,0,1
    with open_quietly(path) as bag:
        got = [(m.connection.id, bytes(m.data)) for m in bag.messages(start=t, end=t + 1, raw=True)]
    written = [(c, d) for c, tt, d in msgs if tt == t]
    assert len(got) == len(written) == 12 + 1  # 4 rounds x 3 connections + one repeat (round 5)
    assert [c for c, _ in got] == sorted(c for c, _ in written)
    for conn in range(3):  # within a connection: write order
        assert [d for c, d in got if c == conn] == [d for c, d in written if c == conn]


def test_two_types_on_one_topic(built_bags):
    path, _, msgs = built_bags("two-types-one-topic", "bz2")
    with open_quietly(path) as bag:
        info = bag.topics["/mixed"]
        assert set(info.msgtypes) == {"std_msgs/String", "std_msgs/Int32"}
        assert [c.id for c in info.connections] == [0, 2]
        assert info.message_count == sum(1 for c, _, _ in msgs if c in (0, 2))
        types = [m.connection.msgtype for m in bag.messages(topics=["/mixed"], raw=True)]
        assert types.count("std_msgs/String") == 100 and types.count("std_msgs/Int32") == 200


# -- property: random small bags written by rosbags --------------------------------------

TYPES = [conn_spec("/x", t) for t in ("std_msgs/String", "std_msgs/Int32", "geometry_msgs/Twist", "sensor_msgs/Imu")]


@st.composite
def random_bags(draw):
    n_conns = draw(st.integers(1, 4))
    conns = []
    for i in range(n_conns):
        topic = draw(st.sampled_from(["/a", "/b", "/c/d", "e"]))
        kind = draw(st.sampled_from(TYPES))
        conns.append(ConnSpec(topic, kind.msgtype, kind.msgdef, kind.md5sum, callerid=f"/node{i}",
                              latching=draw(st.booleans())))
    base = draw(st.integers(0, 4_000_000_000)) * 10**9
    step = draw(st.sampled_from([1, 999, 10**6, 10**9]))
    msgs = draw(st.lists(st.tuples(st.integers(0, n_conns - 1), st.integers(0, 12), st.binary(max_size=300)),
                         max_size=60))
    messages = [(c, base + k * step, data) for c, k, data in msgs]
    compression = draw(st.sampled_from(COMPRESSIONS))
    threshold = draw(st.sampled_from([1, 64, 300, 2000, 1 << 20]))
    window = sorted(base + draw(st.integers(-1, 14)) * step for _ in range(2))
    return conns, messages, compression, threshold, window


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_bags())
def test_random_rosbags_bags(spec):
    conns, messages, compression, threshold, (start, end) = spec
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "random.bag"
        write_with_rosbags(path, conns, messages, compression=compression, chunk_threshold=threshold)
        expected = spec_order(conns, messages)
        with open_quietly(path) as bag, Reader(path) as reader:
            assert rosbags_read(reader) == expected
            assert_metadata_same(bag, reader)
            assert fastbag_read(bag) == expected
            for topic in {c.topic for c in conns}:
                assert fastbag_read(bag, [topic]) == rosbags_read(reader, [topic]) == [
                    r for r in expected if r[0] == topic]
            assert fastbag_read(bag, start=start, end=end) == rosbags_read(reader, start=start, stop=end) == [
                r for r in expected if start <= r[1] < end]


# -- the vectorized index reader agrees with the record-by-record one ------------------------


def _index_both_ways(path: Path):
    from fastbag.ros1 import index as index_module
    from fastbag.ros1.records import MAGIC_V20, Op, read_record
    from fastbag.io.source import Source

    source = Source(path)
    try:
        if not source.array[:len(MAGIC_V20)].tobytes() == MAGIC_V20:
            return None, None
        header = read_record(source, len(MAGIC_V20), expect=Op.BAG_HEADER).header
        args = (source, header.u64("index_pos"), header.u32("conn_count"), header.u32("chunk_count"))
        fast = index_module._read_indexed_fast(*args)
        original = index_module._read_indexed_fast
        index_module._read_indexed_fast = lambda *a: None  # force the careful path
        try:
            careful = index_module._read_indexed(*args)
        except Exception as exc:  # noqa: BLE001 - a damaged index: the fast path must have declined too
            careful = exc
        finally:
            index_module._read_indexed_fast = original
        return fast, careful
    finally:
        source.close()


@pytest.mark.parametrize("path", REAL_BAGS)
def test_fast_index_path_equals_the_careful_one(path):
    """_read_indexed_fast (templates, pread) and _read_indexed (record by record) build the same index."""
    fast, careful = _index_both_ways(path)
    if fast is None:
        return  # declined: the careful path is what open() used (proved by the oracle tests above)
    assert not isinstance(careful, Exception), careful
    whole = fast.whole()  # the fast path defers building the message table
    for name in ("time", "conn", "chunk", "offset"):
        assert np.array_equal(getattr(whole, name), getattr(careful, name)), name
    assert list(whole.chunks) == list(careful.chunks)
    assert [c.id for c in whole.connections] == [c.id for c in careful.connections]
    assert fast.message_count == whole.message_count
    # A topic's own index (topic_index) is the whole index's rows of its connections, in the same order.
    topics: dict[str, list[int]] = {}
    for rank, connection in enumerate(whole.connections):
        topics.setdefault(connection.topic, []).append(rank)
    for topic, ranks in topics.items():
        own, rows = fast.of(ranks), np.isin(whole.conn, ranks)
        for name in ("time", "conn", "chunk", "offset"):
            assert np.array_equal(getattr(own, name), getattr(whole, name)[rows]), (topic, name)


def test_fast_index_path_serves_well_formed_bags(built_bags):
    """Bags as rosbags and fastbag's Writer write them take the vectorized path (open's speed depends on it)."""
    taken = {(name, compression): _index_both_ways(built_bags(name, compression)[0])[0] is not None
             for name in SCENARIOS for compression in COMPRESSIONS}
    assert all(taken.values()), taken
    writer_bag = Path(tempfile.mkdtemp()) / "writer.bag"
    fastbag.tooling.synth.write_demo_bag(writer_bag, seconds=1)
    assert _index_both_ways(writer_bag)[0] is not None
    real = [_index_both_ways(p.values[0])[0] is not None for p in REAL_BAGS if p.values[0] is not None]
    assert not real or sum(real) >= len(real) // 2, f"only {sum(real)} of {len(real)} real bags"
