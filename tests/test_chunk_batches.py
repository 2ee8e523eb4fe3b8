"""Small compressed chunks (up to 256 KiB) decompress in batches (ChunkStore.batches), one buffer for many.

A recorder told to cut a chunk per message (or a few KiB) writes thousands
of tiny chunks; one by one, each cost a cache lookup, a worker handoff, a
location and a decode pass, ~0.2 ms of Python against rosbags' ~0.03 ms a
message (QA: 5,000 Imu read in 975 ms, rosbags 144 ms). In batches, LZ4 frames
decode in one kernel call and every run across the batch is located and
decoded at once.

Proved here: values equal rosbags' deserializer on ROS1 bags rosbags wrote
(lz4, bz2; a message per chunk, and 4 KiB chunks), and the ``mcap`` writer's
files (zstd, lz4; chunks in time order, shuffled, reversed), through read,
take, time windows, iter_read and both loops; and damage anywhere in a batch
(a payload, a CRC, a record the index disagrees with) fails exactly as the
chunk-by-chunk path fails: the same error, after the same messages.
"""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rosbags_fixtures import TYPESTORE, conn_spec, scan_file, twist_msg, write_with_rosbags
from test_chunk_pipeline import assert_parts_agree, assert_values, expected, ordered_times, write, write_damaged

import fastbag
import fastbag.io.chunks as chunks_module
from fastbag.io.chunks import ChunkStore


@pytest.fixture
def batched(monkeypatch) -> list[int]:
    """The sizes of the batches of several chunks that reads decompressed together."""
    sizes: list[int] = []
    real = ChunkStore.get_together

    def spy(self, batch, *args):
        sizes.append(len(batch))
        return real(self, batch, *args)

    monkeypatch.setattr(ChunkStore, "get_together", spy)
    return sizes


@contextlib.contextmanager
def chunk_by_chunk(monkeypatch):
    """Every chunk a batch of its own: the path before batches."""
    with monkeypatch.context() as m:
        m.setattr(ChunkStore, "batches", lambda self, indices: [np.array([c]) for c in indices])
        yield


@pytest.mark.parametrize("compression", ["lz4", "bz2"])
@pytest.mark.parametrize("threshold", [1, 4096], ids=["message-per-chunk", "4KiB"])
@pytest.mark.parametrize("workers", [1, 2])
def test_ros1_small_chunks_equal_rosbags(tmp_path, batched, compression, threshold, workers):
    from rosbags.rosbag1 import Reader

    path = tmp_path / f"{compression}.bag"
    conns = [conn_spec("/twist", "geometry_msgs/Twist"), conn_spec("/other", "geometry_msgs/Twist")]
    messages = [(k % 3 == 0, 1_000_000_000 + 1000 * k, twist_msg(k)) for k in range(1500)]
    write_with_rosbags(path, conns, [(int(c), t, d) for c, t, d in messages], compression=compression,
                       chunk_threshold=threshold)
    with Reader(path) as reader:
        theirs = {c.topic: [] for c in reader.connections}
        for c, _, raw in reader.messages():
            theirs[c.topic].append(TYPESTORE.deserialize_ros1(raw, c.msgtype))
    with fastbag.open(path, workers=workers) as bag:
        assert len(bag._chunks) >= 30 and set(bag.compression) == {compression}
        for topic, msgs in theirs.items():
            got = bag.read(topic)
            assert len(got) == len(msgs) == (1000 if topic == "/twist" else 500)
            for part in ("linear", "angular"):
                for axis in "xyz":
                    want = [getattr(getattr(m, part), axis) for m in msgs]
                    np.testing.assert_array_equal(got[part][axis], want)
            looped = [m.msg.linear.y for m in bag.messages(topic)]
            assert looped == [m.linear.y for m in msgs]
        raw = [bytes(m.data) for m in bag.messages(raw=True)]
    with Reader(path) as reader:
        assert raw == [bytes(r) for _, _, r in reader.messages()]
    assert batched and max(batched) > 1


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@pytest.mark.parametrize("order", ["in_order", "shuffled", "reversed"])
def test_mcap_small_chunks_in_any_order(tmp_path, monkeypatch, batched, compression, order):
    """Shuffled times spread every chunk over the whole read (a batch's chunks needed again and again,
    between other batches'); reversed ones read the last chunk first."""
    times = ordered_times(order)
    path = tmp_path / f"{compression}.mcap"
    write(path, times, compression=compression)
    with fastbag.open(path) as bag:
        assert len(bag._chunks) >= 20 and set(bag.compression) == {compression}
        for topic in ("/a", "/b"):
            got = bag.read(topic)
            assert_values(got, expected(times, topic))
            assert [m.msg.x for m in bag.messages(topic)] == (expected(times, topic) * 0.5).tolist()
        assert_parts_agree(bag, times)
        positions = np.random.default_rng(3).integers(0, len(expected(times, "/a")), 2000)
        assert_values(bag.take("/a", positions), expected(times, "/a")[positions])
    assert batched and max(batched) > 1
    with chunk_by_chunk(monkeypatch), fastbag.open(path) as bag:
        alone = [bytes(m.data) for m in bag.messages(raw=True)]
    with fastbag.open(path) as bag:
        assert [bytes(m.data) for m in bag.messages(raw=True)] == alone


def outcome(path: Path, *, raw: bool, topic: str | None = None, value=lambda msg: msg.x
            ) -> tuple[list, tuple | None, tuple | None]:
    """What a loop yields before it fails (``value`` of each message, or its bytes, and the error), and
    how a read fails, on a fresh handle."""
    got: list = []
    loop_error = read_error = None
    with fastbag.open(path) as bag:
        try:
            for m in bag.messages(topic, raw=raw):
                got.append((m.topic, m.time, bytes(m.data) if raw else value(m.msg)))
        except fastbag.BagFormatError as exc:
            loop_error = (type(exc), str(exc), exc.offset, exc.record)
    with fastbag.open(path) as bag:
        try:
            bag.read(topic or "/a")
        except fastbag.BagFormatError as exc:
            read_error = (type(exc), str(exc), exc.offset, exc.record)
    return got, loop_error, read_error


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@pytest.mark.parametrize("where", ["payload", "crc"])
def test_a_damaged_chunk_in_a_batch_fails_as_alone(tmp_path, monkeypatch, batched, compression, where):
    """The error names the chunk's offset, after every message before its first; the read of a topic
    raises it too, and what lies before it stays readable: as chunk by chunk."""
    path, times, middle, position = write_damaged(tmp_path, compression, where)
    for raw in (True, False):
        with chunk_by_chunk(monkeypatch):
            alone = outcome(path, raw=raw)
        together = outcome(path, raw=raw)
        assert together == alone
        got, loop_error, read_error = together
        assert loop_error[2] == read_error[2] == position and loop_error[3] == "chunk"
        assert where != "crc" or "CRC-32" in loop_error[1]
        with fastbag.open(path) as bag:
            index = bag._container.index
            first = int(index.time[index.chunk == middle].min())
            assert len(got) == int((times < first).sum()) > 1000  # everything before the damaged chunk
            assert_values(bag.read("/a", end=first), expected(times, "/a")[:int((times[::2] < first).sum())])
    assert batched and max(batched) > 1


@pytest.mark.parametrize("compression", ["lz4", "bz2"])
def test_a_record_the_index_disagrees_with_fails_as_alone(tmp_path, monkeypatch, batched, compression):
    """The index says one message's time is a nanosecond later than its record does: its chunk is found
    damaged when located (after decompressing), where the read first needs it, as chunk by chunk."""
    path = tmp_path / f"{compression}.bag"
    conns = [conn_spec("/a", "geometry_msgs/Twist")]
    write_with_rosbags(path, conns, [(0, 1_000_000_000 + 10_000 * k, twist_msg(k)) for k in range(600)],
                       compression=compression, chunk_threshold=1)
    layout = scan_file(path)
    chunk = layout.chunks[300]
    index_data = next(r for r in layout.records if r[1] == 0x04 and r[0] > chunk.position)
    data = bytearray(path.read_bytes())
    nsec = index_data[2] + 4  # the first entry: sec, nsec, offset
    struct.pack_into("<I", data, nsec, struct.unpack_from("<I", data, nsec)[0] + 1)
    path.write_bytes(bytes(data))
    for raw in (True, False):
        with chunk_by_chunk(monkeypatch):
            alone = outcome(path, raw=raw, topic="/a", value=lambda msg: msg.linear.x)
        assert outcome(path, raw=raw, topic="/a", value=lambda msg: msg.linear.x) == alone
        got, loop_error, read_error = alone
        assert len(got) == 300 and loop_error is not None and read_error is not None
        assert loop_error == read_error and f"chunk at offset {chunk.position})" in loop_error[1]
        assert loop_error[2:] == (0, "message data")  # (the record's offset in its chunk's payload)
    assert batched and max(batched) > 1


def test_batches_are_small_chunks_in_need_order(tmp_path, monkeypatch):
    """Consecutive chunks of at most BATCHED_CHUNK bytes together (bz2 ones of at most SMALL_CHUNK), a batch
    about every BATCH_BYTES; a larger chunk, or one the scan salvaged, alone; an encrypted bag's chunks each
    alone."""
    import dataclasses

    large = chunks_module.BATCHED_CHUNK + 1000
    path = tmp_path / "mixed.bag"
    with fastbag.Writer(path, compression="lz4", chunk_size=1) as writer:
        c = writer.add_connection("/s", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        for k, size in enumerate([10, 10, large, 10, 10, 10]):
            text = bytes(size)
            writer.write(c, 10**9 + k, struct.pack("<I", len(text)) + text)
    with fastbag.open(path) as bag:
        store = bag._store

        def batches(indices, store=store):
            return [batch.tolist() for batch in store.batches(indices)]

        assert batches([0, 1, 2, 3, 4, 5]) == [[0, 1], [2], [3, 4, 5]]
        assert batches([5, 0, 3]) == [[5, 0, 3]]
        assert batches([4]) == [[4]] and batches([]) == []
        with monkeypatch.context() as m:
            m.setattr(chunks_module, "BATCH_BYTES", int(bag._chunks.size[3] + bag._chunks.size[4]))
            assert batches([3, 4, 5]) == [[3, 4], [5]]
        store.salvaged[4] = np.zeros(0, dtype=np.uint8)
        try:
            assert batches([3, 4, 5]) == [[3], [4], [5]]
        finally:
            del store.salvaged[4]
        encrypted = ChunkStore(store.source, dataclasses.replace(bag._chunks, transform=object()))
        assert batches([0, 1], encrypted) == [[0], [1]]
        assert [len(m.msg.data) for m in bag.messages()] == [10, 10, large, 10, 10, 10]
    # bz2 decompresses at tens of MB/s: a chunk of more than SMALL_CHUNK is worth a worker of its own
    path = tmp_path / "bz2.bag"
    with fastbag.Writer(path, compression="bz2", chunk_size=1) as writer:
        c = writer.add_connection("/s", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        for k, size in enumerate([10, 10, chunks_module.SMALL_CHUNK + 1000, 10]):
            writer.write(c, 10**9 + k, struct.pack("<I", size) + bytes(size))
    with fastbag.open(path) as bag:
        assert [batch.tolist() for batch in bag._store.batches([0, 1, 2, 3])] == [[0, 1], [2], [3]]


def test_a_chunk_failing_its_check_in_the_kernel_is_decoded_once_more(tmp_path, monkeypatch):
    """An LZ4 chunk that the batch kernel decoded and that failed its CRC is read again once, by get() (which
    says why), not first tried whole into the batch's buffer as well: damage costs no third decode."""
    path, _times, _middle, position = write_damaged(tmp_path, "lz4", "crc")
    decoded: list[int] = []
    real = chunks_module.decompress

    def spy(source, chunk, *args, **kwargs):
        decoded.append(chunk.position)
        return real(source, chunk, *args, **kwargs)

    monkeypatch.setattr(chunks_module, "decompress", spy)
    with fastbag.open(path) as bag, pytest.raises(fastbag.BagFormatError, match="CRC-32") as caught:
        bag.read("/a")
    assert caught.value.offset == position
    assert decoded.count(position) == 1


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_batch_places_through_sorted_keys_equal_those_through_whole_tables(data):
    """Bag._runs maps each row's chunk to its batch and its place there through arrays as long as the chunk
    table, or, for a read much smaller than the table, through the batches' chunks sorted (bag.SPARSE_TABLE):
    both give the same places, -1 for a row whose chunk is in no batch (read in place)."""
    from fastbag import bag as bag_module

    table = data.draw(st.integers(1, 400))
    chunks = data.draw(st.lists(st.integers(0, table - 1), unique=True, max_size=40))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(chunks) - 1)), max_size=5))) if chunks else []
    batches = [np.array(part, dtype=np.int64) for part in np.split(np.array(chunks, dtype=np.int64), cuts)
               if len(part)]
    rows = np.array(data.draw(st.lists(st.integers(0, table - 1), min_size=1, max_size=60)), dtype=np.int64)
    found = {}
    for kind, ratio in (("dense", 10**9), ("sparse", 0)):  # (the table "shorter" than the rows x ratio, or not)
        before, bag_module.SPARSE_TABLE = bag_module.SPARSE_TABLE, ratio
        try:
            found[kind] = bag_module._batch_places(rows, batches, table)
        finally:
            bag_module.SPARSE_TABLE = before
    where = {int(c): (k, p) for k, batch in enumerate(batches) for p, c in enumerate(batch.tolist())}
    want = ([where.get(int(c), (-1, 0))[0] for c in rows], [where.get(int(c), (-1, 0))[1] for c in rows])
    for got in found.values():
        assert (got[0].tolist(), got[1].tolist()) == want
