"""The Numba LZ4 frame kernel against the reference, python-lz4 (the C library).

Every frame variant ROS tools and python-lz4 write decodes to the original
bytes; every real lz4 chunk in ../shared/data decodes as ``lz4.frame`` does;
damaged frames give ValueError (or TooLarge, or Unsupported for the
fallback), never a crash or bytes the reference would not produce.
"""

from __future__ import annotations

import struct
import warnings

import lz4.frame
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastbag
from fastbag.io import lz4frame
from fastbag.errors import TooLarge
from fastbag.io.chunks import decompress

from conftest import DATA, NO_DATA

BLOCK_SIZES = [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB, lz4.frame.BLOCKSIZE_MAX1MB,
               lz4.frame.BLOCKSIZE_MAX4MB]


def frame_options() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({
        "block_size": st.sampled_from(BLOCK_SIZES), "block_linked": st.booleans(),
        "content_checksum": st.booleans(), "block_checksum": st.booleans(), "store_size": st.booleans(),
        "compression_level": st.sampled_from([0, 3, 9])})


def payloads() -> st.SearchStrategy[bytes]:
    """Short and long, compressible (repeats, long runs: overlapping matches) and not."""
    return st.one_of(
        st.binary(max_size=300),
        st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=7), st.integers(1, 40_000)),
        st.builds(lambda seed, n, k: np.random.default_rng(seed).integers(0, k, n).astype(np.uint8).tobytes(),
                  st.integers(0, 2**32 - 1), st.integers(0, 300_000), st.sampled_from([2, 16, 256])))


def kernel(frame: bytes, limit: int) -> bytes:
    return lz4frame.decompress(np.frombuffer(frame, dtype=np.uint8), limit).tobytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads(), frame_options())
def test_every_frame_variant_decodes_to_the_original(data: bytes, options: dict) -> None:
    frame = lz4.frame.compress(data, **options)
    assert kernel(frame, len(data)) == data
    if data:  # one byte less than the content is more than the limit
        with pytest.raises(TooLarge):
            kernel(frame, len(data) - 1)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads(), frame_options(), st.data())
def test_damaged_frames_fail_cleanly_or_agree_with_the_reference(data: bytes, options: dict, draw: st.DataObject
                                                                 ) -> None:
    frame = bytearray(lz4.frame.compress(data, **options))
    edits = draw.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(1, 255)), min_size=1,
                               max_size=4))
    for at, mask in edits:
        frame[at] ^= mask
    cut = draw.draw(st.integers(0, len(frame)))
    damaged = bytes(frame[:cut])
    limit = len(data) + draw.draw(st.integers(0, 1000))
    try:
        got = kernel(damaged, limit)
    except lz4frame.Unsupported:
        return  # handed to lz4.frame, which decides
    except ValueError:
        return  # includes TooLarge
    # When the kernel accepts a frame, the reference must produce the very same bytes.
    assert lz4.frame.decompress(damaged) == got


def test_an_enormous_claimed_size_is_not_allocated_up_front() -> None:
    frame = lz4.frame.compress(bytes(1000))
    out = lz4frame.decompress(np.frombuffer(frame, dtype=np.uint8), 0xFFFFFFFF)
    assert out.tobytes() == bytes(1000)
    assert out.base is None or out.base.nbytes <= lz4frame.FIRST_GUESS_RATIO * len(frame) + (1 << 16)


def test_output_grows_past_the_first_guess_when_the_data_really_is_that_compressible() -> None:
    data = bytes(5_000_000)  # ~250x: more than the first guess allows
    frame = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    assert len(data) > lz4frame.FIRST_GUESS_RATIO * len(frame) + (1 << 16)
    assert kernel(frame, 2 * len(data)) == data


def test_bytes_after_the_frame_are_an_error() -> None:
    frame = lz4.frame.compress(b"hello world" * 100)
    with pytest.raises(ValueError, match="follow the end"):
        kernel(frame + b"\0", 1100)


@pytest.mark.parametrize("frame", [
    struct.pack("<II", 0x184D2A50, 0),                                   # a skippable frame
    struct.pack("<I", lz4frame.MAGIC) + bytes([0x41, 0x40]) + bytes(10),  # a dictionary ID
    struct.pack("<I", lz4frame.MAGIC) + bytes([0x80, 0x40]) + bytes(10),  # another format version
], ids=["skippable", "dictionary-id", "version"])
def test_features_outside_the_kernel_are_handed_to_lz4_frame(frame: bytes) -> None:
    with pytest.raises(lz4frame.Unsupported):
        kernel(frame, 100)


def test_xxh32_matches_the_frame_checksums_lz4_writes() -> None:
    # lz4.frame writes xxh32(content) as the content checksum: the kernel's hash must equal it.
    for n in (0, 1, 3, 15, 16, 17, 1000, 65537):
        data = np.random.default_rng(n).integers(0, 256, n).astype(np.uint8)
        frame = lz4.frame.compress(data.tobytes(), content_checksum=True)
        (stored,) = struct.unpack("<I", frame[-4:])
        assert lz4frame.xxh32(data, 0, n) == stored


def test_real_lz4_chunks_decode_as_the_reference_does() -> None:
    folder = DATA / "ros1v2"
    if not folder.is_dir():
        pytest.skip(NO_DATA)
    checked = 0
    for path in sorted(folder.glob("*.bag")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastbag.FastbagWarning)
            bag = fastbag.open(path)
        with bag:
            for chunk in bag._index.chunks:
                if chunk.compression == "lz4":
                    raw = bag._source.view(chunk.data_offset, chunk.data_len, "chunk")
                    assert decompress(bag._source, chunk).tobytes() == lz4.frame.decompress(raw), (path, chunk)
                    checked += 1
    assert checked > 0, "the real bags hold lz4 chunks (roslz4 frames): none were checked"


# -- recycled payload buffers ------------------------------------------------------------------


def test_pool_reuses_a_buffer_only_once_nothing_references_it():
    from fastbag.io.chunks import MIN_POOLED, BufferPool

    pool = BufferPool(1 << 24)
    n = MIN_POOLED  # (smaller payloads are not pooled)
    a = pool.take(2 * n)
    a[:] = 1
    b = pool.take(2 * n)  # `a` is alive: a new buffer
    assert not np.shares_memory(a, b)
    keep = a[10:20]  # a view keeps its buffer busy after `a` goes
    del a
    c = pool.take(n)
    assert not np.shares_memory(c, keep) and (keep == 1).all()
    base = keep.base
    del keep, c, base
    d = pool.take(n + 800)  # now free: handed out again (the most recently used that fits)
    assert d.size == n + 800 and d.flags.writeable
    d.flags.writeable = False  # what decompress() does to a payload
    del d
    assert pool.take(2 * n).flags.writeable  # the pooled array itself stays writable


def test_pool_holds_few_buffers_however_small_the_chunks():
    """Every take looks at every pooled buffer: a bag of 1 KiB chunks, its payloads held by the chunk
    cache, had filled the pool with thousands and made each chunk's take scan them all (a read of
    40,000 messages in 13,334 chunks took 7.3 s, 0.73 s now; audit G)."""
    from fastbag.io.chunks import MAX_POOLED, MIN_POOLED, BufferPool

    pool = BufferPool(1 << 30)
    held = [pool.take(1000) for _ in range(5000)]  # small: never pooled
    assert len(pool._arrays) == 0
    held += [pool.take(MIN_POOLED) for _ in range(2 * MAX_POOLED)]  # all busy: at most MAX_POOLED kept
    assert len(pool._arrays) <= MAX_POOLED
    del held
    assert pool.take(MIN_POOLED).size == MIN_POOLED and len(pool._arrays) <= MAX_POOLED


def test_messages_kept_from_a_recycled_chunk_keep_their_bytes(tmp_path):
    """Raw messages are views of decompressed chunks; keeping some while reading on must not let a
    recycled buffer overwrite them."""
    path = tmp_path / "many.bag"
    rng = np.random.default_rng(0)
    with fastbag.Writer(path, compression="lz4", chunk_size=4096) as w:
        c = w.add_connection("/x", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        payloads = [rng.integers(0, 256, 1000).astype(np.uint8).tobytes() for _ in range(300)]
        for k, p in enumerate(payloads):
            w.write(c, 10**9 + k, len(p).to_bytes(4, "little") + p)
    with fastbag.open(path, workers=2) as bag:
        kept = [m.data for k, m in enumerate(bag.messages(raw=True)) if k % 7 == 0]
        for m in bag.messages(raw=True):  # read everything again: buffers are reused where free
            pass
        assert [bytes(d)[4:] for d in kept] == payloads[::7]


# -- every frame shape, through the codec registry (the kernel, and lz4.frame for what it leaves) ----------


@pytest.mark.parametrize("block_size", BLOCK_SIZES, ids=["64K", "256K", "1M", "4M"])
@pytest.mark.parametrize("linked", [False, True], ids=["independent", "linked"])
@pytest.mark.parametrize("checksums", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["no-checksums", "block-checksum", "content-checksum", "both"])
def test_every_frame_shape_decodes_as_lz4_frame_does(block_size: int, linked: bool, checksums: tuple) -> None:
    from fastbag.io.codecs import DECOMPRESSORS

    rng = np.random.default_rng(block_size + linked)
    # Blocks of every kind: compressible records, incompressible bytes (stored blocks), a tail not a multiple of 16.
    data = (b"".join(rng.integers(0, 8, 64).astype(np.uint8).tobytes() * 3 for _ in range(40_000))
            + rng.integers(0, 256, 3_000_001).astype(np.uint8).tobytes())
    block_checksum, content_checksum = checksums
    compressor = lz4.frame.LZ4FrameCompressor(block_size=block_size, block_linked=linked,
                                              block_checksum=block_checksum, content_checksum=content_checksum)
    frame = compressor.begin(len(data)) + compressor.compress(data) + compressor.flush()
    expected = lz4.frame.decompress(frame)
    assert expected == data
    assert DECOMPRESSORS["lz4"](np.frombuffer(frame, dtype=np.uint8), len(data)).tobytes() == expected
    if content_checksum:  # one flipped byte of content: the checksum, hashed block by block, must catch it
        damaged = bytearray(frame)
        damaged[-5] ^= 1  # the last byte of the last block's data (stored or literal)
        with pytest.raises(ValueError):
            DECOMPRESSORS["lz4"](np.frombuffer(bytes(damaged), dtype=np.uint8), len(data))


def test_a_frame_the_kernel_leaves_alone_goes_to_lz4_frame() -> None:
    from fastbag.io.codecs import DECOMPRESSORS

    frame = struct.pack("<II", 0x184D2A50, 4) + b"skip"  # a skippable frame: the kernel hands it on
    with pytest.raises(lz4frame.Unsupported):
        kernel(frame, 100)
    assert lz4.frame.decompress(frame) == b""
    assert DECOMPRESSORS["lz4"](np.frombuffer(frame, dtype=np.uint8), 100).tobytes() == b""
    with pytest.raises(ValueError, match="follow the end"):  # and lz4.frame's answer is checked as the kernel's is
        DECOMPRESSORS["lz4"](np.frombuffer(frame + lz4.frame.compress(b"x"), dtype=np.uint8), 100)


def test_a_bag_written_by_rosbags_with_lz4_reads_as_rosbags_reads_it(tmp_path) -> None:
    """rosbags' rosbag1 writer frames lz4 chunks as python-lz4 does (linked 64 KiB blocks, the content size)."""
    from rosbags.rosbag1 import Reader, Writer

    path = tmp_path / "pylz4.bag"
    rng = np.random.default_rng(0)
    writer = Writer(path)
    writer.set_compression(Writer.CompressionFormat.LZ4)
    with writer:
        conn = writer.add_connection("/blob", "std_msgs/msg/String", msgdef="string data\n",
                                     md5sum="992ce8a1687cec8c8bd883ec73ca41d1")
        for k in range(400):
            body = rng.integers(0, 4 if k % 2 else 256, int(rng.integers(0, 20_000))).astype(np.uint8).tobytes()
            writer.write(conn, 10**9 + k, len(body).to_bytes(4, "little") + body)
    with Reader(path) as reader:
        theirs = [(c.topic, t, bytes(raw)) for c, t, raw in reader.messages()]
    with fastbag.open(path) as bag:
        frames = {bytes(bag._source.view(c.data_offset, 6, "chunk"))[4:] for c in bag._index.chunks}
        ours = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
    assert frames == {bytes([0x48, 0x40])}  # FLG: version 1, linked blocks (no 0x20), content size; BD: 64 KiB
    assert len(ours) == 400 and ours == theirs
