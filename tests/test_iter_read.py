"""``bag.iter_read``: parts in time order, cut at chunk boundaries, equal to ``read`` when joined, bounded memory."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

import fastbag
from fastbag.bag import parse_step
from fastbag.tooling.synth import POINTCLOUD2, IMU, imu, pointcloud2
from tests.conftest import data_files, real_bags
from tests.test_convert_tables import plain, sample_of


def joined_equals_read(bag, topic, step):
    pa = pytest.importorskip("pyarrow")
    full = bag.read(topic)
    parts = list(bag.iter_read(topic, step=step))
    assert sum(len(p) for p in parts) == len(full)
    if not parts:
        return parts
    assert all(len(p) for p in parts)
    assert np.array_equal(np.concatenate([p.time for p in parts]), full.time)
    joined = pa.concat_tables([p.to_arrow() for p in parts])
    rows = pa.array(sample_of(len(full)))
    assert plain(joined.take(rows).to_pylist()) == plain(full.to_arrow().take(rows).to_pylist())
    return parts


def chunk_aligned(bag, topic, parts):
    """Every cut between two parts falls where the chunk changes, or inside an uncompressed chunk."""
    chunks = bag._scope(topic).index.chunk[bag.topic_rows(topic)]  # rows of the topic's own index
    ends = np.cumsum([len(p) for p in parts], dtype=np.int64)[:-1]
    in_place = np.array([c == "none" for c in bag._index.chunks.compression], dtype=bool)
    assert ((chunks[ends] != chunks[ends - 1]) | in_place[chunks[ends - 1]]).all()


@pytest.mark.parametrize("path", real_bags())
def test_parts_join_into_read_on_real_bags(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        bag = fastbag.open(path)
    with bag:
        for topic in bag.topics:
            try:
                bag.read(topic)
            except fastbag.FastbagError:
                continue
            count = bag.topics[topic].message_count
            # A message per part on small topics; about 40 parts on large ones (bounded test time).
            for step in (1 if count <= 400 else count // 40 + 1, 500, "64 kB"):
                parts = joined_equals_read(bag, topic, step)
                chunk_aligned(bag, topic, parts)
                if step == 500 and bool(bag._in_file(bag._scope(topic).index.chunks).all()):
                    assert all(len(p) == 500 for p in parts[:-1])  # read in place: cut anywhere


def write_imu_bag(path, n=20_000, chunk_size=64 * 1024, compression="lz4"):
    times = 1_700_000_000 * 10**9 + np.arange(n, dtype=np.int64) * 5_000_000
    with fastbag.Writer(path, compression=compression, chunk_size=chunk_size) as w:
        conn = w.add_connection("/imu", IMU.name, IMU.definition, IMU.md5sum)
        for t, data in zip(times.tolist(), imu(times, np.random.default_rng(1))):
            w.write(conn, t, data)
    return times


def test_step_in_messages_and_bytes(tmp_path):
    path = tmp_path / "imu.bag"
    times = write_imu_bag(path)
    with fastbag.open(path) as bag:
        per_chunk = np.bincount(bag._index.chunk)
        assert per_chunk.max() < 1000  # several chunks fit in a step below
        parts = joined_equals_read(bag, "/imu", 1000)
        chunk_aligned(bag, "/imu", parts)
        assert all(len(p) <= 1000 for p in parts) and len(parts) <= 2 * len(times) // 1000 + 2
        assert sum(len(p) for p in parts[:-1]) / (len(parts) - 1) > 1000 - per_chunk.max()  # parts are filled
        # 320 bytes a message (plus the record header): "320 kB" is about a thousand messages.
        parts = joined_equals_read(bag, "/imu", "320 kB")
        assert all(len(p) <= 1000 for p in parts) and max(len(p) for p in parts) > 500
        # A step smaller than a chunk gives a chunk per part.
        parts = joined_equals_read(bag, "/imu", 10)
        assert [len(p) for p in parts] == per_chunk[per_chunk > 0].tolist()
        # A time window, and an empty one.
        window = list(bag.iter_read("/imu", step=777, start=int(times[100]), end=int(times[5000])))
        assert np.array_equal(np.concatenate([p.time for p in window]), times[100:5000])
        assert list(bag.iter_read("/imu", start=int(times[-1]) + 1)) == []
        with pytest.raises(KeyError):
            next(bag.iter_read("/nope"))


def test_take_by_position(tmp_path):
    path = tmp_path / "imu.bag"
    times = write_imu_bag(path, n=3000)
    with fastbag.open(path) as bag:
        assert np.array_equal(bag.topic_times("/imu"), times)
        some = bag.take("/imu", [5, 2999, 1000])
        whole = bag.read("/imu")
        assert some.time.tolist() == times[[5, 2999, 1000]].tolist()
        assert np.array_equal(some["linear_acceleration"], whole["linear_acceleration"][[5, 2999, 1000]])
        assert len(bag.take("/imu", slice(10, 20))) == 10 and len(bag.take("/imu", [])) == 0
        with pytest.raises(IndexError):
            bag.take("/imu", [3000])
        mask = np.zeros(3000, dtype=bool)
        mask[[7, 2000]] = True  # a mask selects, as in NumPy (it was read as the positions 0 and 1)
        assert bag.take("/imu", mask).time.tolist() == times[[7, 2000]].tolist()
        assert bag.take("/imu", np.array([4, 9], dtype=np.uint16)).time.tolist() == times[[4, 9]].tolist()
        with pytest.raises(IndexError, match="needs 3000 values"):
            bag.take("/imu", [True, False])
        with pytest.raises(TypeError, match="integers"):
            bag.take("/imu", [1.9])


def test_uncompressed_chunks_are_cut_anywhere(tmp_path):
    path = tmp_path / "imu.bag"
    write_imu_bag(path, n=5000, chunk_size=1 << 20, compression="none")
    with fastbag.open(path) as bag:
        assert bag.chunk_count <= 3
        parts = joined_equals_read(bag, "/imu", 300)
        assert [len(p) for p in parts] == [300] * 16 + [200]
        legacy = data_files("ros1legacy")[0].values[0]
        if legacy is not None:  # a format 1.2 bag is one chunk, read in place
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fastbag.FastbagWarning)
                with fastbag.open(legacy) as old:
                    topic = next(iter(old.topics))
                    parts = joined_equals_read(old, topic, 10)
                    assert len(parts) == -(-old.topics[topic].message_count // 10)


@pytest.mark.parametrize("step, want", [(5, (5, False)), ("256 MB", (256_000_000, True)),
                                        ("1GiB", (1 << 30, True)), ("1.5 kb", (1500, True))])
def test_parse_step(step, want):
    assert parse_step(step) == want


@pytest.mark.parametrize("step", [0, -3, "lots", "5 parsecs", "", True, 2.5, "inf MB", "nan kB", "-1 MB", "10000",
                                  "1e3"])
def test_bad_step(step):
    with pytest.raises(ValueError):
        parse_step(step)


@pytest.mark.parametrize("step", ["0", "0 MB", "-5 MB", "0.0kb", "-1"])
def test_a_step_of_no_size_says_at_least_one(step):
    """"0 MB" met the generic "a number of messages or a size" error, which did not say what was wrong (QA)."""
    with pytest.raises(ValueError, match=f"step must be at least 1 message or 1 B, not '{step}'"):
        parse_step(step)


def test_a_step_without_unit_says_which_to_choose():
    """"10000" was 10,000 bytes while 10000 is 10,000 messages: a string now needs its unit."""
    with pytest.raises(ValueError, match=r"no unit: pass an int for messages \(10000\) or a size with its unit"):
        parse_step("10000")


@pytest.mark.parametrize("form", ["ros1", "mcap", "rosbag2-sqlite"])
def test_memory_stays_bounded_over_a_topic_many_times_the_step(tmp_path, monkeypatch, form):
    """Peak traced memory while iterating a ~50 MB compressed topic in 4 MB steps stays far below the topic.

    The same measurement of a whole ``read`` sees the topic's bytes, so the bound is not vacuous. The
    recording is a ROS1 bag (lz4 chunks of 1 MB), the same as MCAP (zstd chunks of 768 KiB), and as a
    rosbag2 sqlite3 directory, whose chunks are runs of one topic's rows of a fixed size of blobs.
    """
    path = tmp_path / "clouds.bag"
    n, points = 120, 20_000
    times = 1_700_000_000 * 10**9 + np.arange(n, dtype=np.int64) * 100_000_000
    with fastbag.Writer(path, compression="lz4", chunk_size=1 << 20) as w:
        conn = w.add_connection("/points", POINTCLOUD2.name, POINTCLOUD2.definition, POINTCLOUD2.md5sum)
        for t, data in zip(times.tolist(), pointcloud2(times, np.random.default_rng(2), points=points)):
            w.write(conn, t, data)
    topic_bytes = n * points * 22
    bound, part_bound = topic_bytes / 3, 6 << 20
    if form != "ros1":
        synth_mcap = pytest.importorskip("fastbag.tooling.synth_mcap")
        if form == "mcap":
            pytest.importorskip("mcap", reason="the mcap package writes the MCAP recording")
            path = synth_mcap.write_rosbag2_mcap(path, tmp_path / "clouds-mcap", compression="zstd")
        else:
            from fastbag.rosbag2 import reader as rosbag2_reader

            path = synth_mcap.write_rosbag2_sqlite(path, tmp_path / "clouds-db3")
            # 2 MB chunks (16 MB by default, as large as this whole test's topic) to see the parts bounded.
            monkeypatch.setattr(rosbag2_reader, "CHUNK_BYTES", 2 << 20)
    # tracemalloc stops only once the bag is closed (its worker threads joined): tracemalloc.stop() while
    # another thread takes the GIL back crashes CPython before 3.12.9 (gh-128679).
    try:
        with fastbag.open(path, cache_bytes=2 << 20, workers=2) as bag:
            list(bag.iter_read("/points", step="4 MB"))  # compile and warm up outside the measurement
            tracemalloc.start()
            count = 0
            for part in bag.iter_read("/points", step="4 MB"):
                count += len(part)
                assert part["data"].values.nbytes <= part_bound
                del part
            _, iter_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            whole = bag.read("/points")
            whole["data"].values
            _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    assert read_peak > topic_bytes  # the measurement sees decompressed payloads
    print(f"iter_read peak {iter_peak / 1e6:.1f} MB, read peak {read_peak / 1e6:.1f} MB, "
          f"topic {topic_bytes / 1e6:.1f} MB")
    assert iter_peak < bound, (iter_peak, topic_bytes)
