"""Bad input fails with one clear FastbagError, or is recovered with one FastbagWarning.

Each test damages a small bag by editing bytes at positions found by an
independent record walk (``rosbags_fixtures.scan_file``) and asserts the exact
outcome and the message text: the file path, ``offset N`` (the damaged record),
and the record kind.

Where the damage is in the *index* (connection / chunk-info / index-data records)
while every chunk is intact, fastbag's documented behaviour is to rebuild the
index by scanning: those tests assert one warning naming the damaged record and
every message equal to rosbags' reading of the undamaged bag. Damage found while
reading a chunk (unknown compression, a size that disagrees, a corrupt lz4/bz2
stream, a message record running past its chunk) raises when that chunk is read.

Also: a seeded battery of random byte damage raises nothing but FastbagError /
FastbagWarning (never struct.error, IndexError, KeyError, ValueError,
MemoryError); a closed bag refuses to read, and memoryviews taken before close
stay valid and equal.
"""

from __future__ import annotations

import gc
import random
import re
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag1 import Reader

import fastbag
from rosbags_fixtures import (
    HEADER_END, conn_spec, fastbag_read, int32_msg, open_quietly, rosbags_read, scan_file, string_msg,
    write_with_fastbag, write_with_rosbags)

CONNS = [conn_spec("/a", "std_msgs/String"), conn_spec("/b", "std_msgs/Int32")]
MSGS = [m for k in range(40) for m in ((0, 10**9 + k * 10, string_msg(f"s{k}")), (1, 10**9 + k * 10 + 5, int32_msg(k)))]


def small_bag(tmp_path: Path, compression: str = "none", *, writer: str = "fastbag") -> tuple[Path, bytearray]:
    """80 messages on two topics in 6 chunks (fastbag) or 5 (rosbags)."""
    path = tmp_path / f"{writer}-{compression}.bag"
    if writer == "fastbag":
        write_with_fastbag(path, CONNS, MSGS, compression=compression, chunk_size=800)
    else:
        write_with_rosbags(path, CONNS, MSGS, compression=compression, chunk_threshold=800)
    return path, bytearray(path.read_bytes())


def damaged(tmp_path: Path, data: bytes | bytearray, name: str = "damaged.bag") -> Path:
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


def offset_in(message: str) -> int:
    found = re.findall(r"offset (\d+)", message)
    assert found, message
    return int(found[-1])


def assert_names(exc_or_text, path: Path, record: str, offsets: set[int]) -> None:
    """The text names the file, the record kind, and one of the acceptable offsets."""
    text = str(exc_or_text)
    assert str(path) in text, text
    assert record in text, text
    assert offset_in(text) in offsets, text


# -- not a bag ------------------------------------------------------------------------


def test_random_bytes_are_not_a_bag(tmp_path):
    data = np.random.default_rng(5).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    path = damaged(tmp_path, b"\x00" + data[1:])
    with pytest.raises(fastbag.BagFormatError, match="not a ROS bag") as info:
        fastbag.open(path)
    assert_names(info.value, path, "magic", {0})
    assert info.value.offset == 0 and info.value.path == str(path)


def test_text_file_is_not_a_bag(tmp_path):
    path = damaged(tmp_path, b"# a README, not a bag\n" * 20, "notes.bag")
    with pytest.raises(fastbag.BagFormatError, match="not a ROS bag") as info:
        fastbag.open(path)
    assert_names(info.value, path, "magic", {0})


def test_empty_file(tmp_path):
    path = damaged(tmp_path, b"", "empty.bag")
    with pytest.raises(fastbag.BagFormatError, match="empty") as info:
        fastbag.open(path)
    assert_names(info.value, path, "magic", {0})


def test_unknown_format_version(tmp_path):
    path = damaged(tmp_path, b"#ROSBAG V3.0\n" + b"\x00" * 100, "v3.bag")
    with pytest.raises(fastbag.UnsupportedError, match="V3.0") as info:
        fastbag.open(path)
    assert str(path) in str(info.value) and "offset 0" in str(info.value)


@pytest.mark.parametrize("cut", [13, 15, 30, 100, 2000, HEADER_END - 1],
                         ids=lambda c: f"cut-at-{c}")
def test_file_cut_inside_bag_header(tmp_path, cut):
    _, data = small_bag(tmp_path)
    header_len = struct.unpack_from("<I", data, 13)[0]
    path = damaged(tmp_path, data[:cut])
    with pytest.raises(fastbag.BagFormatError) as info:
        fastbag.open(path)
    # the record at 13, or the part of it that is cut: its header (17), data length, data
    assert_names(info.value, path, "bag header", {13, 17, 17 + header_len, 21 + header_len})


# -- lengths running past the end of the file ----------------------------------------------


@pytest.mark.parametrize("field", ["header_len", "data_len"])
@pytest.mark.parametrize("value", [1 << 20, 0xFFFFFFFF], ids=["1MiB", "u32max"])
def test_bag_header_length_past_end_of_file(tmp_path, field, value):
    _, data = small_bag(tmp_path)
    header_len = struct.unpack_from("<I", data, 13)[0]
    at = 13 if field == "header_len" else 17 + header_len
    struct.pack_into("<I", data, at, value)
    path = damaged(tmp_path, data)
    with pytest.raises(fastbag.BagFormatError) as info:
        fastbag.open(path)
    assert_names(info.value, path, "bag header", {13, 17, at, 21 + header_len})


def test_bag_header_field_missing(tmp_path):
    _, data = small_bag(tmp_path)
    at = data.index(b"index_pos=")
    data[at:at + 9] = b"index_poz"
    path = damaged(tmp_path, data)
    with pytest.raises(fastbag.BagFormatError, match="index_pos") as info:
        fastbag.open(path)
    assert_names(info.value, path, "bag header", {13, 17})


@pytest.mark.parametrize("writer", ["fastbag", "rosbags"])
def test_chunk_info_data_length_past_end_of_file_recovers_by_scanning(tmp_path, writer):
    original, data = small_bag(tmp_path, writer=writer)
    layout = scan_file(original)
    start, op, data_start, _ = layout.records[-1]
    assert op == 0x06
    struct.pack_into("<I", data, data_start - 4, 1 << 20)
    path = damaged(tmp_path, data)
    with pytest.warns(fastbag.FastbagWarning) as record:
        bag = fastbag.open(path)
    assert len(record) == 1
    assert_names(record[0].message, path, "chunk info", {start, data_start})
    with bag, Reader(original) as reader:
        assert fastbag_read(bag) == rosbags_read(reader)


def test_chunk_header_length_past_end_of_file(tmp_path):
    """A chunk whose header length is absurd: the chunks before it are recovered, with a warning naming it."""
    original, data = small_bag(tmp_path)
    layout = scan_file(original)
    chunk = layout.chunks[3]
    struct.pack_into("<I", data, chunk.position, 1 << 20)
    path = damaged(tmp_path, data)
    with pytest.warns(fastbag.FastbagWarning) as record:
        bag = fastbag.open(path)
    assert len(record) == 1
    assert_names(record[0].message, path, "chunk", {chunk.position, chunk.position + 4})
    with bag:
        got = fastbag_read(bag)
    with Reader(original) as reader:
        full = rosbags_read(reader)
    before = {(m.time, m.data) for c in layout.chunks[:3] for m in c.messages}
    assert {(t, d) for _, t, d in got} >= before
    assert got == [r for r in full if r in got]  # nothing invented, order kept


def test_chunk_data_length_past_end_of_file(tmp_path):
    original, data = small_bag(tmp_path)
    layout = scan_file(original)
    chunk = layout.chunks[3]
    struct.pack_into("<I", data, chunk.data_start - 4, 1 << 24)
    path = damaged(tmp_path, data)
    with pytest.warns(fastbag.FastbagWarning) as record:
        bag = fastbag.open(path)
    assert len(record) == 1
    assert_names(record[0].message, path, "chunk", {chunk.position, chunk.data_start})
    with bag:
        got = fastbag_read(bag)
    with Reader(original) as reader:
        full = rosbags_read(reader)
    through = {(m.time, m.data) for c in layout.chunks[:4] for m in c.messages}
    assert {(t, d) for _, t, d in got} >= through
    assert got == [r for r in full if r in got]


def test_message_record_past_end_of_its_chunk(tmp_path):
    original, data = small_bag(tmp_path)
    layout = scan_file(original)
    chunk = layout.chunks[1]
    victim = chunk.messages[2]
    at = chunk.data_start + victim.offset
    header_len = struct.unpack_from("<I", data, at)[0]
    struct.pack_into("<I", data, at + 4 + header_len, 1 << 20)  # its data length
    path = damaged(tmp_path, data)
    with open_quietly(path) as bag:  # the index is intact: opening reads nothing of the chunk
        first = chunk.messages[0].time
        assert len(fastbag_read(bag, end=first)) == len(layout.chunks[0].messages)
        with pytest.raises(fastbag.BagFormatError) as info:
            fastbag_read(bag)
    text = str(info.value)
    assert str(path) in text and "message data" in text
    assert str(chunk.position) in text  # which chunk
    assert offset_in(text) in {victim.offset, victim.offset + 4 + header_len, victim.offset + 8 + header_len}


def test_message_header_length_past_end_of_its_chunk_names_the_record(tmp_path):
    original, data = small_bag(tmp_path)
    layout = scan_file(original)
    chunk = layout.chunks[1]
    victim = chunk.messages[2]
    struct.pack_into("<I", data, chunk.data_start + victim.offset, 1 << 20)  # its header length
    path = damaged(tmp_path, data)
    with open_quietly(path) as bag, pytest.raises(fastbag.BagFormatError) as info:
        fastbag_read(bag)
    assert str(path) in str(info.value) and str(chunk.position) in str(info.value)
    assert "message data" in str(info.value), str(info.value)


# -- chunk payloads ---------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "lz4", "bz2"])
def test_unknown_chunk_compression(tmp_path, compression):
    """Decision: the index is intact, so the bag opens and tells what it holds; reading the chunk
    with the unknown compression raises UnsupportedError naming it, the others stay readable."""
    original, data = small_bag(tmp_path, compression)
    layout = scan_file(original)
    chunk = layout.chunks[2]
    at = data.index(b"compression=" + compression.encode(), chunk.position)
    assert at < chunk.data_start
    fake = b"z" * len(compression)
    data[at + 12:at + 12 + len(compression)] = fake
    path = damaged(tmp_path, data)
    with open_quietly(path) as bag:
        assert bag.compression == {compression: len(layout.chunks) - 1, fake.decode(): 1}
        assert bag.message_count == len(MSGS)
        before = fastbag_read(bag, end=chunk.messages[0].time)
        assert len(before) == sum(len(c.messages) for c in layout.chunks[:2])
        with pytest.raises(fastbag.UnsupportedError, match=fake.decode()) as info:
            fastbag_read(bag)
        assert_names(info.value, path, "chunk", {chunk.position})
        after = fastbag_read(bag, start=layout.chunks[3].messages[0].time)  # later chunks still read
        assert len(after) == sum(len(c.messages) for c in layout.chunks[3:])
    # The same file without its index: the chunk is lost, the others recovered, the warning says so.
    index_at = data.index(b"index_pos=")
    data[index_at + 10:index_at + 18] = bytes(8)
    path = damaged(tmp_path, data, "unindexed.bag")
    with pytest.warns(fastbag.FastbagWarning, match=fake.decode()) as record:
        bag = fastbag.open(path)
    assert len(record) == 1 and f"offset {chunk.position}" in str(record[0].message)
    with bag, Reader(original) as reader:
        lost = {(m.time, m.data) for m in chunk.messages}
        assert fastbag_read(bag) == [r for r in rosbags_read(reader) if (r[1], r[2]) not in lost]


def _check_size_disagreement(tmp_path, compression, delta):
    original, data = small_bag(tmp_path, compression)
    layout = scan_file(original)
    chunk = layout.chunks[1]
    at = data.index(b"size=", chunk.position)
    assert at < chunk.data_start
    size = struct.unpack_from("<I", data, at + 5)[0]
    assert max(m.offset for m in chunk.messages) < size + delta  # the index stays plausible
    struct.pack_into("<I", data, at + 5, size + delta)
    path = damaged(tmp_path, data)
    with open_quietly(path) as bag:
        with pytest.raises(fastbag.BagFormatError) as info:
            fastbag_read(bag)
        assert len(fastbag_read(bag, end=chunk.messages[0].time)) == len(layout.chunks[0].messages)
    assert_names(info.value, path, "chunk", {chunk.position})
    if compression != "none" and delta < 0:
        # Decompression stops one byte past the declared size (a bomb must not expand further), so the
        # message says "more than" the header's size rather than the payload's true length.
        assert f"more than its header's {size + delta}" in str(info.value), str(info.value)
    else:
        assert str(size) in str(info.value) and str(size + delta) in str(info.value)


@pytest.mark.parametrize("delta", [+7, -7], ids=["larger", "smaller"])
@pytest.mark.parametrize("compression", ["lz4", "bz2"])
def test_chunk_size_disagrees_with_decompressed_payload(tmp_path, compression, delta):
    _check_size_disagreement(tmp_path, compression, delta)


@pytest.mark.parametrize("delta", [+7, -7], ids=["larger", "smaller"])
def test_chunk_size_disagrees_with_uncompressed_payload(tmp_path, delta):
    """An uncompressed chunk's payload is its data, whatever its header's size says (rosbag reads it so): the
    damaged size is named once, and every message reads (it was a BagFormatError on read)."""
    original, data = small_bag(tmp_path)
    chunk = scan_file(original).chunks[1]
    at = data.index(b"size=", chunk.position) + 5
    length = chunk.data_end - chunk.data_start
    struct.pack_into("<I", data, at, length + delta)
    path = damaged(tmp_path, data)
    with fastbag.open(original) as bag:
        want = fastbag_read(bag), {t: bag.read(t).to_numpy().tolist() for t in ("/a", "/b")}
    with pytest.warns(fastbag.FastbagWarning, match=f"the uncompressed chunk at offset {chunk.position} holds "
                      f"{length} bytes, but its header says size {length + delta}: read as its {length} bytes"):
        bag = fastbag.open(path)
    with bag:
        assert (fastbag_read(bag), {t: bag.read(t).to_numpy().tolist() for t in ("/a", "/b")}) == want


@pytest.mark.parametrize("damage", ["frame-magic", "middle-bytes", "cut-stream"])
@pytest.mark.parametrize("compression", ["lz4", "bz2"])
def test_corrupt_compressed_payload(tmp_path, compression, damage):
    original, data = small_bag(tmp_path, compression)
    layout = scan_file(original)
    chunk = layout.chunks[1]
    n = chunk.data_end - chunk.data_start
    if damage == "frame-magic":
        data[chunk.data_start:chunk.data_start + 4] = b"\x00\x00\x00\x00"
    elif damage == "middle-bytes" and compression == "bz2":
        data[chunk.data_start + n // 2] ^= 0xFF  # bz2 checks a CRC per block
    elif damage == "middle-bytes":
        # lz4 frames here carry no checksum: damage a block size so the frame cannot parse.
        data[chunk.data_start + 7:chunk.data_start + 11] = b"\xff\xff\xff\x7f"
    else:  # the stream ends early; the record keeps its length, padded with zeros
        data[chunk.data_start + n // 2:chunk.data_end] = bytes(chunk.data_end - chunk.data_start - n // 2)
    path = damaged(tmp_path, data)
    with open_quietly(path) as bag:
        with pytest.raises(fastbag.BagFormatError) as info:
            fastbag_read(bag)
    assert_names(info.value, path, "chunk", {chunk.position})
    assert compression in str(info.value)
    assert info.value.__cause__ is not None or "decompressed to" in str(info.value)


def test_index_data_pointing_past_its_chunk_recovers_by_scanning(tmp_path):
    original, data = small_bag(tmp_path)
    layout = scan_file(original)
    index_records = [r for r in layout.records if r[1] == 0x04]
    start, _, data_start, _ = index_records[2]
    struct.pack_into("<I", data, data_start + 8, 1 << 20)  # first entry's offset
    path = damaged(tmp_path, data)
    with pytest.warns(fastbag.FastbagWarning, match="past the end") as record:
        bag = fastbag.open(path)
    assert len(record) == 1
    assert_names(record[0].message, path, "index data", {start, data_start})
    with bag, Reader(original) as reader:
        assert fastbag_read(bag) == rosbags_read(reader)


def test_index_entry_pointing_at_another_connections_message(tmp_path):
    original, data = small_bag(tmp_path)
    layout = scan_file(original)
    first_a, first_b = [r for r in layout.records if r[1] == 0x04][:2]
    a_at, b_at = first_a[2] + 8, first_b[2] + 8  # offsets of each connection's first entry in chunk 0
    a, b = bytes(data[a_at:a_at + 4]), bytes(data[b_at:b_at + 4])
    data[a_at:a_at + 4], data[b_at:b_at + 4] = b, a
    path = damaged(tmp_path, data)
    with Reader(original) as reader:
        truth = rosbags_read(reader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            try:
                got = fastbag_read(bag)
            except fastbag.BagFormatError:
                return  # detected: fine
    assert got == truth  # or not detected, but never a message under another topic


def test_read_of_uncompressed_chunks_names_damage_like_raw_reading(tmp_path):
    """read() locates messages of uncompressed chunks in one kernel pass from the index arrays
    (Bag._file_spans): an index entry pointing at another connection's message must be reported as raw
    reading reports it. (A chunk whose size disagrees reads whole both ways: see above.)"""
    original, data = small_bag(tmp_path)
    layout = scan_file(original)
    chunk = layout.chunks[1]
    # the first index entries of /a and /b in chunk 1 trade their offsets
    first_a, first_b = [r for r in layout.records if r[1] == 0x04 and r[2] > chunk.position][:2]
    a_at, b_at = first_a[2] + 8, first_b[2] + 8
    data[a_at:a_at + 4], data[b_at:b_at + 4] = bytes(data[b_at:b_at + 4]), bytes(data[a_at:a_at + 4])
    record = "message data"
    path = damaged(tmp_path, data)
    with open_quietly(path) as bag:
        with pytest.raises(fastbag.BagFormatError) as raw:
            fastbag_read(bag)
        for topic in ("/a", "/b"):
            with pytest.raises(fastbag.BagFormatError) as decoded:
                bag.read(topic)
            assert str(path) in str(decoded.value) and record in str(decoded.value), str(decoded.value)
    assert record in str(raw.value)


# -- any damage: only fastbag's own errors -----------------------------------------------

ALLOWED = (fastbag.FastbagError,)


@pytest.mark.parametrize("writer", ["fastbag", "rosbags"])
@pytest.mark.parametrize("compression", ["none", "lz4", "bz2"])
def test_random_damage_raises_only_fastbag_errors(tmp_path, compression, writer):
    original, data = small_bag(tmp_path, compression, writer=writer)
    rnd = random.Random(f"{compression}-{writer}")
    path = tmp_path / "fuzzed.bag"
    for trial in range(100):
        fuzzed = bytearray(data)
        at = rnd.randrange(HEADER_END - 200, len(fuzzed) - 8)
        kind = trial % 3
        if kind == 0:
            fuzzed[at] = rnd.randrange(256)
        elif kind == 1:  # a length-like value
            value = rnd.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, struct.unpack_from("<I", fuzzed, at)[0] + rnd.randint(-9, 9)])
            struct.pack_into("<I", fuzzed, at, value & 0xFFFFFFFF)
        else:
            fuzzed = fuzzed[:at]
        path.write_bytes(bytes(fuzzed))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with fastbag.open(path) as bag:
                    for m in bag.messages(raw=True):
                        bytes(m.data)
                    for topic in bag.topics:
                        list(bag.messages(topics=[topic], raw=True))
            except ALLOWED:
                pass
            except Exception as exc:  # noqa: BLE001 - the point of the test
                pytest.fail(f"trial {trial} (damage kind {kind} at offset {at}) raised {type(exc).__name__}: {exc}")
        others = [w for w in caught if not issubclass(w.category, fastbag.FastbagWarning)]
        assert not others, [str(w.message) for w in others]
        assert len(caught) <= 1, [str(w.message) for w in caught]


# -- closed bags ----------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_closed_bag_refuses_to_read_and_views_stay_valid(tmp_path, compression):
    path, _ = small_bag(tmp_path, compression)
    bag = fastbag.open(path)
    views = [m.data for m in bag.messages(raw=True)]
    copies = [bytes(v) for v in views]
    assert copies == [d for _, _, d in sorted(MSGS, key=lambda m: (m[1], m[0]))]
    bag.close()
    assert bag.closed
    gc.collect()
    assert [bytes(v) for v in views] == copies  # still mapped, still the same bytes
    with pytest.raises((ValueError, fastbag.FastbagError), match="closed"):
        bag.messages(raw=True)
    with pytest.raises((ValueError, fastbag.FastbagError), match="closed"):
        bag.messages(topics=["/a"], raw=True)
    bag.close()  # closing twice is harmless
    del bag
    gc.collect()
    assert [bytes(v) for v in views] == copies  # the views outlive the Bag object itself


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_iterator_advanced_after_close(tmp_path, compression):
    path, _ = small_bag(tmp_path, compression)
    bag = fastbag.open(path)
    iterator = bag.messages(raw=True)
    bag.close()
    with pytest.raises((ValueError, fastbag.FastbagError), match="closed") as info:
        next(iterator)
    assert not isinstance(info.value, fastbag.BagFormatError)


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_regression_elements_of_no_bytes_are_bounded_over_a_whole_iteration(tmp_path, compression):
    """Fuzz case 8723 (seed 20261129): a definition declaring 100,000 elements of a type that takes no bytes
    (``Z[100000]``, Z holding only ``string[0]``) in every message. read() refused it once the elements
    passed the cap over the read, but decoded iteration counted them per batch (its builders are new for
    each), so it built 100,000 objects a message, message after message: 10 s and 75 MB for a 32 kB file.
    Now the cap counts over the whole iteration too, and both raise a DecodeError naming the message."""
    from rosbags_fixtures import ConnSpec, write_with_rosbags

    from fastbag.msg.msgdef import parse_definition

    definition = "fuzz_msgs/Z[100000] zs\nint32 x\n" + "=" * 80 + "\nMSG: fuzz_msgs/Z\nstring[0] nothing\n"
    conn = ConnSpec("/z", "fuzz_msgs/Top", definition, parse_definition("fuzz_msgs/Top", definition).md5sum())
    path = tmp_path / "z.bag"
    write_with_rosbags(path, [conn], [(0, 1000 + k, struct.pack("<i", k)) for k in range(40)],
                       compression=compression, chunk_threshold=64)  # a few messages a chunk: many batches
    with fastbag.open(path) as bag:
        one = bag.take("/z", [5])  # one message alone is within the cap: its elements, each empty
        assert len(one) == 1 and one[0].x == 5 and len(one[0].zs) == 100_000
        assert list(one[0].zs[99_999].nothing) == []
        # (one run of them all, uncompressed: more elements than bytes at once; chunk by chunk: the cap over
        # the read or the iteration)
        with pytest.raises(fastbag.DecodeError, match="array elements"):
            bag.read("/z")
        decoded = 0
        with pytest.raises(fastbag.DecodeError, match="array elements") as info:
            for m in bag.messages():
                assert m.msg.x == decoded
                decoded += 1
        assert decoded <= 3 and info.value.topic == "/z"  # 262,144 elements: the third message crosses it


def test_a_walk_stops_where_its_empty_elements_outnumber_its_bytes_and_the_cap():
    """Fuzz case 769 (seed 20261218): a batch of 6,000 messages of 144 bytes, each claiming 100,000 elements
    of no bytes, was walked whole (600 million elements, 12 s of a decoded loop, 3.2 s before read() refused
    it) before the caller compared its rows with its bytes. The walk stops where they cross: at the third
    message here, as the caller's check names it."""
    import numpy as np

    from fastbag.msg import kernels
    from fastbag.msg.layout import layout_for

    layout = layout_for("fuzz_msgs/Top", "fuzz_msgs/Z[100000] zs\nint32 x\n" + "=" * 80 +
                        "\nMSG: fuzz_msgs/Z\nstring[0] nothing\n")
    n, enc = 1000, layout.encoding
    payload = np.frombuffer(b"".join(struct.pack("<i", k) for k in range(n)), dtype=np.uint8)
    starts, lengths = np.arange(0, 4 * n, 4, dtype=np.int64), np.full(n, 4, dtype=np.int64)
    rows = np.zeros(len(layout.tables), dtype=np.int64)
    status = np.zeros(3, dtype=np.int64)
    empty8, empty64 = np.empty(0, np.uint8), np.empty(0, np.int64)
    kernels.walk(payload, starts, lengths, layout.ops, layout.row_sizes, empty8, empty8, rows, rows, empty64,
                 empty64, rows, False, status, enc.header, enc.representation, enc.big_endian, enc.trailing, None)
    assert status.tolist()[:2] == [kernels.RUN_TOO_MANY, 2]  # (262,144 + 12 bytes: the third message crosses)
    assert int(rows.max()) == 300_000


TRUNCATED_CHILD = r"""
import os, shutil, sys, warnings
import fastbag
src, dst, topic = sys.argv[1:4]
warnings.simplefilter("ignore")
results = []
for call in ("read", "take", "messages", "iter_read"):
    shutil.copy(src, dst)
    bag = fastbag.open(dst)
    os.truncate(dst, os.path.getsize(dst) // 2)  # another program shrinks the file under the open bag
    try:
        if call == "read":
            bag.read(topic)
        elif call == "take":
            bag.take(topic, [0, 1, bag.topics[topic].message_count - 1])
        elif call == "messages":
            sum(1 for _ in bag.messages(raw=True))
        else:
            sum(len(part) for part in bag.iter_read(topic, step=10))
        results.append(f"{call}: no error")
    except fastbag.BagFormatError:  # "the file shrank", or what the index read past the new end says
        results.append(f"{call}: BagFormatError")
    bag.close()
print(";".join(results))
"""


@pytest.mark.parametrize("relative, topic", [
    ("ros1v2/cruise-automation__rosbag.js__fixtures__example.bag", "/turtle1/pose"),  # uncompressed chunks
    ("ros1v2/cra-ros-pkg__robot_localization__test__test1.bag", "/imu/data"),         # bz2 chunks
    ("mcap/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample.mcap", "/rosout")])
def test_a_file_truncated_under_an_open_bag_is_an_error_not_sigbus(relative, topic, tmp_path):
    """Reading pages of the mapping past a file's new end kills the process with SIGBUS: a ROS1 bag cut in
    half by another program while open did (audit E #2). Each read now checks the file first. Run in a
    child process, so that a crash fails the test instead of killing the suite."""
    import subprocess
    import sys

    from conftest import data_file

    src = data_file(relative)
    done = subprocess.run([sys.executable, "-c", TRUNCATED_CHILD, str(src), str(tmp_path / src.name), topic],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == ";".join(f"{call}: BagFormatError" for call in
                                           ("read", "take", "messages", "iter_read")), done.stdout
