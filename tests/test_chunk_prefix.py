"""Reads that decode only the head of a compressed chunk (Container.record_end, codecs' ``reach``).

Recorders close a chunk when a message takes it past its size, so a large
message (an image, a point cloud) usually ends it and the small messages of
other topics come first. A read of those small ones decodes each chunk only
to the end of its last record there. Proved here:

- codec by codec (zstd, the LZ4 kernel and lz4.frame, bz2), a prefix is
  byte for byte the start of the whole payload and holds what ``reach`` asked
  for, whatever it asks (nothing, a little, past the end);
- ``checksums=True`` (the default) never leaves a checksum unchecked: a
  payload with one over all of it (an MCAP chunk's CRC-32, an LZ4 frame's
  content checksum, bz2's block CRCs) is decoded whole;
- on MCAP files (the ``mcap`` writer, with and without CRCs) and ROS1 bags
  (rosbags' writer: lz4 and bz2), a read of the small topic decodes less than
  the chunks hold, and gives what the ``mcap`` reader and rosbags give; a read
  of the large topic afterwards, with the prefixes in the cache, gives the
  whole messages; a damaged CRC is found by any read that decodes its chunk
  whole, and by every read with the default ``checksums``.
"""

from __future__ import annotations

import bz2
import struct
from pathlib import Path

import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from rosbags_fixtures import TYPESTORE, conn_spec, write_with_rosbags

import fastbag
from fastbag.io import chunks as chunks_module
from fastbag.io import codecs, lz4frame
from fastbag.io.source import BufferSource

pytest.importorskip("mcap")
from mcap.reader import make_reader
from mcap.writer import CompressionType, Writer


def payload_of(seed: int, size: int) -> bytes:
    """Compressible bytes with incompressible stretches: short repeats, runs, random bytes."""
    rng = np.random.default_rng(seed)
    parts, total = [], 0
    while total < size:
        kind = rng.integers(3)
        n = int(rng.integers(1, 3000))
        if kind == 0:
            part = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        elif kind == 1:
            part = bytes([int(rng.integers(256))]) * n
        else:
            part = (b"imu%d," % int(rng.integers(1000))) * (n // 6 + 1)
        parts.append(part)
        total += len(part)
    return b"".join(parts)[:size]


FRAMES = {
    "zstd": lambda data: zstandard.ZstdCompressor(level=3).compress(data),
    "zstd-checksum": lambda data: zstandard.ZstdCompressor(level=3, write_checksum=True).compress(data),
    "lz4-linked": lambda data: lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=True),
    "lz4-independent": lambda data: lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX1MB,
                                                       block_linked=False),
    "lz4-roslz4": lambda data: lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX1MB, block_linked=False,
                                                  content_checksum=True),
    "lz4-block-checksums": lambda data: lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                                           block_checksum=True),
    "bz2": bz2.compress,
}
CODEC = {name: name.split("-")[0] for name in FRAMES}


def stepwise(asks: list[int]):
    """A reach that asks for asks[0] bytes, then, once it sees them, asks[1], ... (as a record's length, read
    from its head, says how far the record runs). Records what it was shown."""
    shown: list[int] = []

    def reach(prefix: np.ndarray) -> int:
        shown.append(prefix.size)
        for ask in asks:
            if prefix.size < ask:
                return ask
        return asks[-1]

    reach.shown = shown  # type: ignore[attr-defined]
    return reach


@settings(max_examples=60, deadline=None)
@given(frame=st.sampled_from(sorted(FRAMES)), seed=st.integers(0, 2**16), size=st.integers(0, 300_000),
       asks=st.lists(st.floats(0, 1.2), min_size=1, max_size=3))
def test_a_prefix_is_the_start_of_the_payload_and_holds_what_was_asked(frame, seed, size, asks) -> None:
    data = payload_of(seed, size)
    raw = np.frombuffer(FRAMES[frame](data), dtype=np.uint8)
    targets = sorted(int(a * size) for a in asks)
    reach = stepwise(targets)
    out = codecs.DECOMPRESSORS[CODEC[frame]](raw, size, None, reach)
    assert out.tobytes() == data[:out.size]  # never a byte that is not the payload's
    assert out.size >= min(targets[-1], size)  # everything asked for
    if targets[-1] >= size:
        assert out.size == size  # asked for all: all of it, checked as usual
    elif CODEC[frame] != "lz4":
        assert out.size == targets[-1]  # stops where asked (LZ4: at the next sequence, see below)
    assert all(a <= b for a, b in zip(reach.shown, reach.shown[1:]))  # shown a growing prefix


def test_lz4_stops_between_sequences_part_way_through_a_block() -> None:
    """A roslz4 frame of one 1 MiB block of short sequences: asked for 1,000 bytes, the kernel stops
    within a sequence's length of them, not at the end of the block."""
    data = b"".join(b"%08d," % k for k in range(100_000))[:1 << 20]
    raw = np.frombuffer(FRAMES["lz4-independent"](data), dtype=np.uint8)
    out = lz4frame.decompress(raw, len(data), reach=lambda prefix: 1000)
    assert 1000 <= out.size < 2000 and out.tobytes() == data[:out.size]
    # and it goes on from there when the prefix asks for more, as a record's length read from its head does
    out = lz4frame.decompress(raw, len(data), reach=stepwise([1000, 500_000]))
    assert 500_000 <= out.size < 501_000 and out.tobytes() == data[:out.size]


@pytest.mark.parametrize("frame", ["zstd", "lz4-independent", "lz4-linked"])
def test_a_payload_that_runs_out_before_what_was_asked_is_an_error(frame) -> None:
    """A chunk whose stream ends before the record a read needs (its header claims more) is damaged,
    prefix or not; a read that needs only what the stream holds gets it."""
    data = payload_of(1, 50_000)
    raw = np.frombuffer(FRAMES[frame](data), dtype=np.uint8)
    source = BufferSource(raw, "test.mcap")
    chunk = chunks_module.Chunk(0, CODEC[frame], 60_000, 0, raw.size)
    with pytest.raises(fastbag.BagFormatError, match="header says 60000"):
        chunks_module.decompress(source, chunk, reach=lambda prefix: 55_000)
    out = chunks_module.decompress(source, chunk, reach=lambda prefix: 40_000)
    assert 40_000 <= out.size < 50_000 and out.tobytes() == data[:out.size] and not out.flags.writeable


@pytest.mark.parametrize("frame, checked", [("zstd", False), ("zstd-checksum", True), ("lz4-linked", False),
                                            ("lz4-independent", False), ("lz4-roslz4", True),
                                            ("lz4-block-checksums", False), ("bz2", True)])
def test_which_payloads_carry_a_checksum_over_all_of_them(frame, checked) -> None:
    raw = np.frombuffer(FRAMES[frame](payload_of(2, 10_000)), dtype=np.uint8)
    assert codecs.WHOLE_CHECKSUM[CODEC[frame]](raw) is checked
    assert codecs.WHOLE_CHECKSUM[CODEC[frame]](raw[:3])  # too short to tell: decoded whole, errors and all


# -- whole files ------------------------------------------------------------------------------------------

SMALL, BIG = 40, 60_000  # bytes: an Imu-sized message, an image-sized one


def small_message(k: int) -> bytes:
    return struct.pack("<I", k) + bytes([k % 251]) * (SMALL - 4)


def big_message(k: int) -> bytes:
    return struct.pack("<I", k) + np.random.default_rng(k).integers(0, 256, BIG - 4, dtype=np.uint8).tobytes()


SCHEMA = b"uint8[] data\n"


def ros1_array(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


def write_mcap(path: Path, compression: CompressionType, crcs: bool, frames: int = 30, t0: int = 1_000_000_000
               ) -> None:
    """Five /small messages, then one /big, ``frames`` times: the /big closes each chunk (of 50 KB)."""
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=50_000, compression=compression, enable_crcs=crcs)
        writer.start(profile="", library="fastbag tests")
        schema = writer.register_schema("std_msgs/UInt8MultiArrayLike", "ros1msg", SCHEMA)
        small = writer.register_channel("/small", "ros1", schema)
        big = writer.register_channel("/big", "ros1", schema)
        t = t0
        for k in range(frames):
            for j in range(5):
                t += 1000
                writer.add_message(small, log_time=t, data=ros1_array(small_message(5 * k + j)), publish_time=t)
            t += 1000
            writer.add_message(big, log_time=t, data=ros1_array(big_message(k)), publish_time=t)
        writer.finish()


def mcap_messages(path: Path, topic: str) -> list[tuple[int, bytes]]:
    with path.open("rb") as f:
        return [(m.log_time, m.data) for _, c, m in make_reader(f).iter_messages(topics=[topic])]


@pytest.fixture(autouse=True)
def chunks_alone(monkeypatch):
    """These files' chunks are a few dozen KiB (to keep the tests fast), which reads decompress in batches,
    whole (test_chunk_batches.py): here each chunk is read alone, as chunks larger than BATCHED_CHUNK
    (rosbag's and rosbag2's 768 KiB) always are."""
    monkeypatch.setattr(chunks_module.ChunkStore, "batches", lambda self, indices: [np.array([c]) for c in indices])


@pytest.fixture
def decoded(monkeypatch):
    """(chunk size, bytes decoded) of every chunk decompression."""
    seen: list[tuple[int, int]] = []
    real = chunks_module.decompress

    def spy(source, chunk, *args):
        out = real(source, chunk, *args)
        seen.append((chunk.size, out.size))
        return out

    monkeypatch.setattr(chunks_module, "decompress", spy)
    return seen


def arrays_of(arr) -> list[bytes]:
    return [bytes(np.asarray(x, dtype=np.uint8)) for x in arr["data"]]


@pytest.mark.parametrize("compression", [CompressionType.ZSTD, CompressionType.LZ4])
@pytest.mark.parametrize("crcs", [False, True])
@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("workers", [1, 2])
def test_mcap_small_topic_reads_decode_the_heads_of_chunks(tmp_path, decoded, compression, crcs, checksums,
                                                           workers) -> None:
    path = tmp_path / "mixed.mcap"
    write_mcap(path, compression, crcs)
    small, big = mcap_messages(path, "/small"), mcap_messages(path, "/big")
    # lz4.frame as the mcap writer calls it writes no content checksum: only the CRC-32 can ask for all
    prefix_allowed = not (crcs and checksums)
    with fastbag.open(path, workers=workers, checksums=checksums) as bag:
        assert len(bag._chunks) >= 10
        arr = bag.read("/small")
        assert arrays_of(arr) == [d[4:] for _, d in small]
        assert arr.time.tolist() == [t for t, _ in small]
        assert arr[7].data.tobytes() == small_message(7)  # as users reach it
        spent, held = sum(n for _, n in decoded), sum(size for size, _ in decoded)
        if prefix_allowed:
            assert spent < 0.2 * held  # heads only: the /big message ending each chunk stays compressed
        else:
            assert spent == held  # every chunk whole: its CRC-32 checked
        # with those heads cached, the other topic still gets whole messages, and raw iteration all of them
        decoded.clear()
        assert [bytes(m.data)[4:] for m in bag.messages(topics="/big", raw=True)] == [d[4:] for _, d in big]
        assert arrays_of(bag.read("/big")) == [d[4:] for _, d in big]
        assert [(m.topic, m.time) for m in bag.messages(raw=True)] == sorted(
            [("/small", t) for t, _ in small] + [("/big", t) for t, _ in big], key=lambda x: x[1])
        assert all(n == size for size, n in decoded)
    # a fresh handle: the first read of the topic goes through its own index (Container.topic_index)
    with fastbag.open(path, checksums=checksums) as bag:
        assert [m.msg.data.tobytes() for m in bag.messages(topics="/small")] == [d[4:] for _, d in small]


@pytest.mark.parametrize("compression", [CompressionType.ZSTD, CompressionType.LZ4])
def test_a_damaged_crc_is_found_by_whole_reads_and_by_default(tmp_path, compression) -> None:
    path = tmp_path / "damaged.mcap"
    write_mcap(path, compression, crcs=True)
    with fastbag.open(path) as bag:
        position = int(bag._chunks.position[3])
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, position + 9 + 24, struct.unpack_from("<I", data, position + 9 + 24)[0] ^ 1)
    path.write_bytes(bytes(data))
    with fastbag.open(path) as bag, pytest.raises(fastbag.BagFormatError, match="CRC-32") as info:
        bag.read("/small")
    assert info.value.offset == position
    with fastbag.open(path, checksums=False) as bag:
        assert len(bag.read("/small")) == 150  # its part of the chunk, unchecked, as asked
        with pytest.raises(fastbag.BagFormatError, match="CRC-32") as info:
            bag.read("/big")  # decodes the chunk whole: the CRC is checked
        assert info.value.offset == position


@pytest.mark.parametrize("compression, prefix_by_default", [("lz4", True), ("bz2", False)])
def test_ros1_small_topic_reads_decode_the_heads_of_chunks(tmp_path, decoded, compression,
                                                           prefix_by_default) -> None:
    """rosbags' writer: lz4 frames without a content checksum (python-lz4's defaults), bz2 streams (a CRC per
    block: whole unless ``checksums=False``). Values equal rosbags' deserializer's."""
    from rosbags.rosbag1 import Reader

    path = tmp_path / f"mixed-{compression}.bag"
    conns = [conn_spec("/small", "std_msgs/UInt8MultiArray"), conn_spec("/big", "std_msgs/UInt8MultiArray")]
    messages = []
    for k in range(30):
        for j in range(5):
            messages.append((0, 1_000_000_000 + 6000 * k + 1000 * j, small_message(5 * k + j)))
        messages.append((1, 1_000_000_000 + 6000 * k + 5000, big_message(k)))
    # std_msgs/UInt8MultiArray: an empty layout (no dims, data_offset 0), then the bytes
    serialized = [(conn, t, struct.pack("<II", 0, 0) + ros1_array(data)) for conn, t, data in messages]
    write_with_rosbags(path, conns, serialized, compression=compression, chunk_threshold=50_000)
    with Reader(path) as reader:
        theirs = [TYPESTORE.deserialize_ros1(raw, c.msgtype).data.tobytes() for c, _, raw in
                  reader.messages(connections=[c for c in reader.connections if c.topic == "/small"])]
    assert len(theirs) == 150
    for checksums in (True, False):
        decoded.clear()
        with fastbag.open(path, checksums=checksums) as bag:
            assert len(bag._chunks) >= 10
            arr = bag.read("/small")
            assert [x.tobytes() for x in arr["data"]] == theirs
            assert [m.msg.data.tobytes() for m in bag.messages(topics="/small")] == theirs
            spent, held = sum(n for _, n in decoded), sum(size for size, _ in decoded)
            assert (spent < 0.3 * held) if (prefix_by_default or not checksums) else spent == held
            assert [x.tobytes() for x in bag.read("/big")["data"]] == [big_message(k) for k in range(30)]


def asked_for_prefixes(monkeypatch) -> list[bool]:
    """A list that grows by one entry per chunk decompression from now on: whether it was asked for a prefix
    (a ``reach``) rather than the whole payload."""
    asked: list[bool] = []
    real = chunks_module.decompress

    def spy(source, chunk, allocate=None, reach=None, checksums=True):
        asked.append(reach is not None)
        return real(source, chunk, allocate, reach, checksums)

    monkeypatch.setattr(chunks_module, "decompress", spy)
    return asked


def test_a_topic_of_large_records_stops_asking_for_parts(tmp_path, monkeypatch) -> None:
    """A prefix costs zstd its direct decoding into our buffer: once a read has seen a record that leaves
    little of its chunk to spare (an image closing the chunk), it asks for the rest of its chunks whole."""
    path = tmp_path / "mixed.mcap"
    write_mcap(path, CompressionType.ZSTD, crcs=False)
    asked = asked_for_prefixes(monkeypatch)
    with fastbag.open(path, workers=1) as bag:
        assert arrays_of(bag.read("/big")) == [d[4:] for _, d in mcap_messages(path, "/big")]
        assert asked[0] and not any(asked[1:]) and len(asked) == 30  # the first chunk shows the size
        asked.clear()
        assert len(bag.read("/small")) == 150 and all(asked)  # small records: every chunk in part


@pytest.mark.parametrize("compression", ["lz4", "bz2"])
def test_encrypted_chunks_decrypt_whole_and_decompress_in_part(tmp_path, decoded, compression) -> None:
    """An encrypted bag's chunk is decrypted whole (AES-CBC runs front to back anyway), then decompressed
    as far as the read needs, where ``checksums=False`` allows it (fastbag's writer frames lz4 as roslz4
    does, with a content checksum). Values equal those written."""
    pytest.importorskip("cryptography")
    key = bytes(range(16))
    path = tmp_path / f"encrypted-{compression}.bag"
    with fastbag.Writer(path, compression=compression, chunk_size=50_000, aes_key=key) as writer:
        small = writer.add_connection("/small", "std_msgs/UInt8MultiArrayLike", SCHEMA.decode())
        big = writer.add_connection("/big", "std_msgs/UInt8MultiArrayLike", SCHEMA.decode())
        for k in range(30):
            for j in range(5):
                writer.write(small, 1_000_000_000 + 6000 * k + 1000 * j, ros1_array(small_message(5 * k + j)))
            writer.write(big, 1_000_000_000 + 6000 * k + 5000, ros1_array(big_message(k)))
    for checksums in (True, False):
        decoded.clear()
        with fastbag.open(path, aes_key=key, checksums=checksums) as bag:
            assert bag.encryption is not None and len(bag._chunks) >= 10
            assert arrays_of(bag.read("/small")) == [small_message(k) for k in range(150)]
            spent, held = sum(n for _, n in decoded), sum(size for size, _ in decoded)
            assert (spent < 0.3 * held) if not checksums else spent == held
            assert arrays_of(bag.read("/big")) == [big_message(k) for k in range(30)]


def test_rosbag2_mcap_storage_of_several_files_reads_heads_of_chunks(tmp_path, decoded) -> None:
    """A rosbag2 directory of two MCAP files (no metadata.yaml: read in name order) is one McapStorage;
    each file's store decodes the heads of its chunks for the small topic."""
    folder = tmp_path / "split"
    folder.mkdir()
    write_mcap(folder / "split_0.mcap", CompressionType.ZSTD, crcs=False)
    write_mcap(folder / "split_1.mcap", CompressionType.ZSTD, crcs=False, t0=2_000_000_000)
    small = [d[4:] for k in range(2) for _, d in mcap_messages(folder / f"split_{k}.mcap", "/small")]
    with fastbag.open(folder) as bag:
        assert len(bag._container.parts) == 2
        assert arrays_of(bag.read("/small")) == small
        spent, held = sum(n for _, n in decoded), sum(size for size, _ in decoded)
        assert spent < 0.2 * held
        assert [bytes(m.data)[4:] for m in bag.messages(topics="/big", raw=True)] == \
            [d[4:] for k in range(2) for _, d in mcap_messages(folder / f"split_{k}.mcap", "/big")]


def test_a_cached_prefix_counts_as_the_buffer_it_holds(tmp_path) -> None:
    """A prefix keeps its whole chunk-sized buffer alive: the cache's bound counts that, not the prefix's
    bytes (else a cache of 10% prefixes would hold ten times its bound)."""
    path = tmp_path / "mixed.mcap"
    write_mcap(path, CompressionType.ZSTD, crcs=False)
    with fastbag.open(path) as bag:
        sizes = bag._chunks.size
        budget = int(sizes[:12].sum())  # room for 12 whole chunks of the 30
    with fastbag.open(path, cache_bytes=budget) as bag:
        for start in range(0, 30, 6):  # reads of 6 chunks each, within the bound: cached
            lo, hi = int(bag.start_time) + 6000 * start, int(bag.start_time) + 6000 * (start + 6)
            assert len(bag.read("/small", start=lo, end=hi)) == 30
        store = bag._store
        cached = {k: p for k, p in store._cache.items()}
        assert cached and all(p.size < sizes[k] for k, p in cached.items())  # prefixes
        assert store._cached == sum(int(sizes[k]) for k in cached) <= budget
        assert len(cached) <= 12


def test_a_pickled_bag_keeps_its_checksums_option(tmp_path) -> None:
    """DataLoader workers and Dask tasks reopen a pickled bag: with the option it was opened with."""
    import pickle

    path = tmp_path / "mixed.mcap"
    write_mcap(path, CompressionType.ZSTD, crcs=True, frames=3)
    for checksums in (True, False):
        with fastbag.open(path, checksums=checksums) as bag:
            with pickle.loads(pickle.dumps(bag)) as again:
                assert again._store.checksums is checksums
                assert arrays_of(again.read("/small")) == arrays_of(bag.read("/small"))


@pytest.mark.parametrize("frame", ["lz4-independent", "zstd"])
def test_a_damaged_tail_leaves_the_prefix_a_read_needs_readable(frame, monkeypatch) -> None:
    """A read whose records end early in a chunk may still ask for all of it (``reach.whole``: cheaper than
    stopping, see Bag._reach). Where the rest of the payload is damaged (here: bytes after the end of the
    compressed stream), it gets the prefix it needs, as a read asking for that prefix alone does; a read
    of all of it fails, naming the chunk; and the prefix it decoded first is not kept for later reads."""
    from fastbag.io.chunks import Chunk, ChunkStore

    payload = payload_of(7, 200_000)
    stored = np.frombuffer(FRAMES[frame](payload) + b"\x01\x02\x03", dtype=np.uint8)
    source = BufferSource(stored, "damaged.bag")
    chunk = Chunk(position=0, compression=CODEC[frame], size=len(payload), data_offset=0, data_len=stored.size)
    store = ChunkStore(source, [chunk], workers=1)
    asked = asked_for_prefixes(monkeypatch)
    for whole, tries in ((True, [False, True]), (False, [True])):  # whole: all of it first, then the prefix
        reach = stepwise([1000])
        reach.whole = whole  # type: ignore[attr-defined]
        asked.clear()
        head = store.get(0, remember=False, reach=reach)
        assert 1000 <= head.size < len(payload) and head.tobytes() == payload[:head.size]
        assert asked == tries
    store.get(0, reach=stepwise([1000]))  # a prefix cached, then found to be of a damaged chunk:
    with pytest.raises(fastbag.BagFormatError, match=r"does not decompress: .*damaged.bag, offset 0, chunk"):
        store.get(0)
    assert not store._cache and store._cached == 0  # the prefixes went with the failure
    with pytest.raises(fastbag.BagFormatError):
        store.get(0, reach=stepwise([len(payload)]))  # all of it asked for, step by step: the same failure
