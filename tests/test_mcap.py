"""The MCAP container against the ``mcap`` package's readers (the oracle), on real files and the conformance corpus.

- every real ``.mcap`` under ``../shared/data``: the ``(topic, log_time, bytes)``
  sequence, channels and schemas equal what the ``mcap`` reader gives;
- the MCAP conformance corpus (342 variants of NoData, OneMessage, TenMessages,
  OneAttachment, OneMetadata, with and without chunks, indexes, statistics,
  summary, padding and CRCs as their names say): messages, attachments and
  metadata equal the ``mcap`` reader's, and each name's features show
  (a file without usable indexes is scanned, with one warning);
- files written here with ``mcap``'s writer (none / lz4 / zstd chunks,
  unchunked, no summary), then damaged: every fault a FastbagError naming
  file, offset and record, what is intact still read.
"""

from __future__ import annotations

import re
import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

import fastbag
from cdr_oracle import assert_same_cdr
from fastbag.cli import format_info
from conftest import DATA, data_file, data_files

mcap = pytest.importorskip("mcap", reason="the mcap package (test extra) is the oracle for MCAP files")
from mcap.reader import NonSeekingReader, make_reader  # noqa: E402
from mcap.writer import CompressionType, Writer  # noqa: E402

CONFORMANCE = DATA / "mcap" / "foxglove__mcap__tests__conformance__data"


def real_mcaps() -> list:
    files = [p for p in data_files("mcap", "**/*.mcap") if p.values[0] is None or "conformance" not in str(p.values[0])]
    return files + [p for p in data_files("db3", "**/*.mcap") if p.values[0] is not None]


def channel_encodings(path: Path) -> set:
    with path.open("rb") as f:
        return {c.message_encoding for c in make_reader(f).get_summary().channels.values()}


def oracle(path: Path) -> tuple[list, list, list]:
    """(messages, attachments, metadata) as the mcap package reads them: messages by its seeking reader in
    log-time order, or, for files its seeking reader refuses (channels only in the data section), by its
    streaming reader, sorted stably by log_time; attachments and metadata by its streaming reader, which
    finds them whether or not the summary indexes them."""
    try:
        with path.open("rb") as f:
            messages = [(c.topic, m.log_time, m.data) for _, c, m in make_reader(f).iter_messages(log_time_order=True)]
    except Exception:  # noqa: BLE001 - the oracle's own limits, not the file's
        with path.open("rb") as f:
            messages = sorted(((c.topic, m.log_time, m.data) for _, c, m in NonSeekingReader(f).iter_messages()),
                              key=lambda row: row[1])
    with path.open("rb") as f:
        attachments = [(a.name, a.media_type, a.data, a.log_time) for a in NonSeekingReader(f).iter_attachments()]
    with path.open("rb") as f:
        metadata = [(m.name, m.metadata) for m in NonSeekingReader(f).iter_metadata()]
    return messages, attachments, metadata


def ours(path: Path, *, quiet: bool = True) -> tuple[list, list, list]:
    """(messages, attachments, metadata) as fastbag reads them (``quiet``: recovery warnings ignored)."""
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            messages = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
            attachments = [(a.name, a.media_type, a.data, a.log_time) for a in bag.attachments]
            metadata = [(m.name, m.metadata) for m in bag.metadata]
    return messages, attachments, metadata


@pytest.mark.parametrize("path", real_mcaps())
def test_real_files_equal_the_mcap_reader(path):
    assert ours(path) == oracle(path)
    with path.open("rb") as f:
        summary = make_reader(f).get_summary()
    with fastbag.open(path) as bag:
        assert bag.format == "MCAP" and bag.version == "0" and not bag.recovered
        assert bag.message_count == len(ours(path)[0])
        by_id = {c.id: c for c in bag.connections}
        for channel in summary.channels.values():
            connection, schema = by_id[channel.id], summary.schemas.get(channel.schema_id)
            assert (connection.topic, connection.encoding) == (channel.topic, channel.message_encoding)
            assert connection.msgtype == (schema.name if schema else "")
            assert connection.schema_encoding == (schema.encoding if schema else "")
            assert connection.schema_data == (schema.data if schema else b"")
            if schema and schema.encoding in ("ros1msg", "ros2msg", "ros2idl"):
                assert connection.definition == schema.data.decode()
        if summary.statistics is not None:  # files without statistics: counted from the message indexes
            assert bag.message_count == summary.statistics.message_count
            counts = summary.statistics.channel_message_counts
            for info in bag.topics.values():
                assert info.message_count == sum(counts.get(c.id, 0) for c in info.connections)


@pytest.mark.parametrize("path", real_mcaps())
def test_publish_time_and_sequence_equal_the_mcap_reader(path):
    """Every message's publish_time and sequence (m.publish_time, m.sequence), raw and decoded, as the mcap
    package reads them; ROS1 bags record neither (None)."""
    try:
        with path.open("rb") as f:
            theirs = [(c.topic, m.log_time, m.publish_time, m.sequence)
                      for _, c, m in make_reader(f).iter_messages(log_time_order=True)]
    except Exception:  # noqa: BLE001 - the oracle's own limits (channels only in the data section)
        with path.open("rb") as f:
            theirs = sorted(((c.topic, m.log_time, m.publish_time, m.sequence)
                             for _, c, m in NonSeekingReader(f).iter_messages()), key=lambda row: row[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)  # recovery, and topics that do not decode
        with fastbag.open(path) as bag:
            for raw in (True, False):
                got = [(m.topic, m.time, m.publish_time, m.sequence) for m in bag.messages(raw=raw)]
                assert got == theirs, f"raw={raw}"
            arrays = [t for t, info in bag.topics.items() if info.connections[0].encoding in ("cdr", "ros1")]
    for topic in arrays:  # whole topics as arrays, each read by a fresh handle: .publish_time and .sequence
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastbag.FastbagWarning)
            with fastbag.open(path) as bag:
                try:
                    arr = bag.read(topic)
                except fastbag.FastbagError:
                    continue  # a topic that does not decode (named by tests/test_cdr_real.py)
        mine = [row for row in theirs if row[0] == topic]
        assert list(zip(arr.time.tolist(), arr.publish_time.tolist(), arr.sequence.tolist())) == \
            [row[1:] for row in mine], topic


def test_ros1_messages_have_no_publish_time():
    path = DATA / "ros1v2" / "cruise-automation__rosbag.js__fixtures__example.bag"
    if not path.exists():
        pytest.skip("../shared/data is absent")
    with fastbag.open(path) as bag:
        m = next(bag.messages())
        assert (m.publish_time, m.sequence, next(bag.messages(raw=True)).sequence) == (None, None, None)
        arr = bag.read(m.topic)
        assert (arr.publish_time, arr.sequence, arr[:2].publish_time) == (None, None, None)


def conformance_files() -> list:
    files = sorted(CONFORMANCE.glob("*/*.mcap")) if CONFORMANCE.is_dir() else []
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CONFORMANCE} is absent"), id="no-data")]
    return [pytest.param(f, id=f.stem) for f in files]


@pytest.mark.parametrize("path", conformance_files())
def test_conformance_corpus(path):
    """Equal to the mcap package, and what the name promises: its record count, and a scan exactly where the
    file lacks a usable summary (no summary, no chunk indexes, no message indexes, channels not repeated)."""
    messages, attachments, metadata = ours(path)
    assert (messages, attachments, metadata) == oracle(path)
    kind, *features = path.stem.split("-")
    expected = {"NoData": (0, 0, 0), "OneMessage": (1, 0, 0), "TenMessages": (10, 0, 0),
                "OneAttachment": (0, 1, 0), "OneMetadata": (0, 0, 1)}[kind]
    assert (len(messages), len(attachments), len(metadata)) == expected
    if kind in ("OneMessage", "TenMessages"):
        assert [t for _, t, _ in messages] == sorted(t for _, t, _ in messages)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(path) as bag:
            recovered = bag.recovered
    assert len([w for w in caught if issubclass(w.category, fastbag.FastbagWarning)]) == int(recovered)
    if kind in ("OneMessage", "TenMessages"):
        # Features: ch chunks, chx chunk indexes, mx message indexes, rch / rsh channels / schemas repeated in
        # the summary, st statistics, sum summary offsets, pad padded records. Seeking needs the first five.
        assert recovered == (not {"ch", "chx", "mx", "rch", "rsh"} <= set(features))


# -- files written here ----------------------------------------------------------------------------------

IMU_SCHEMA = b"float64 x\nfloat64 y\nfloat64 z\n"


def write_mcap(path: Path, *, compression=CompressionType.ZSTD, chunked=True, chunk_size=1024,
               messages: int = 200, channels=("/a", "/b"), statistics: bool = True) -> list:
    """A file of ``messages`` messages round-robin over ``channels``; returns the (topic, time, bytes) written."""
    written = []
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=chunk_size, compression=compression, use_chunking=chunked,
                        use_statistics=statistics)
        writer.start(profile="", library="fastbag tests")
        schema = writer.register_schema("test/Vec", "ros1msg", IMU_SCHEMA)
        ids = [writer.register_channel(topic, "ros1", schema) for topic in channels]
        for k in range(messages):
            data = struct.pack("<3d", k, -k, k * 0.5)
            channel = ids[k % len(ids)]
            writer.add_message(channel, log_time=1_000_000_000 + k * 1000, data=data, publish_time=k)
            written.append((channels[k % len(ids)], 1_000_000_000 + k * 1000, data))
        writer.add_attachment(5, 6, "calib.yaml", "text/yaml", b"fx: 1\n")
        writer.add_metadata("robot", {"name": "r2"})
        writer.finish()
    return written


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD],
                         ids=["none", "lz4", "zstd"])
@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "unchunked"])
def test_written_files_read_back(tmp_path, compression, chunked):
    path = tmp_path / "w.mcap"
    written = write_mcap(path, compression=compression, chunked=chunked)
    messages, attachments, metadata = ours(path)
    assert messages == written
    assert attachments == [("calib.yaml", "text/yaml", b"fx: 1\n", 6)] and metadata == [("robot", {"name": "r2"})]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = fastbag.open(path)
    assert [str(w.message) for w in caught if "read by scanning" in str(w.message)] != [] if not chunked else \
        caught == []  # unchunked messages are found by scanning, with one warning
    with bag:
        assert bag.recovered == (not chunked)
        a = [m for m in bag.messages(topics="/a", start=1_000_000_000 + 50_000, end=1_000_000_000 + 100_000,
                                     raw=True)]
        assert [(m.topic, m.time, bytes(m.data)) for m in a] == [w for w in written if w[0] == "/a" and
                                                                 1_000_050_000 <= w[1] < 1_000_100_000]
        assert bag.topics["/a"].message_count == 100 and bag.topics["/a"].connections[0].encoding == "ros1"


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD],
                         ids=["none", "lz4", "zstd"])
@pytest.mark.parametrize("size", [8, 70_000], ids=["small", "large"])
def test_read_arrays_carry_publish_time_and_sequence(tmp_path, monkeypatch, compression, size):
    """``read``, ``take``, ``iter_read`` and slices give each message's publish_time and sequence as the
    record holds them, on every decoding path (messages located in place, in windows of a fresh handle,
    or decoded chunk by chunk on the workers), extremes included: u32 sequences and u64 times past 2**63."""
    path = tmp_path / "stamped.mcap"
    n = 64
    publish = [5 * k + 3 for k in range(n - 1)] + [(1 << 63) + 9]  # the last one reads as int64, like .time
    sequence = [(1 << 32) - 1 - k for k in range(n)]
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=4 * size, compression=compression)
        writer.start(profile="", library="fastbag tests")
        schema = writer.register_schema("test/Blob", "ros1msg", b"uint8[] data\n")
        channel = writer.register_channel("/blob", "ros1", schema)
        for k in range(n):
            data = struct.pack("<I", size) + bytes([k % 251]) * size
            writer.add_message(channel, log_time=1_000 + k, data=data, publish_time=publish[k], sequence=sequence[k])
        writer.finish()
    paths: list[str] = []
    for name in ("_decode_windows", "_decode_chunks", "_decode_runs"):
        original = getattr(fastbag.Bag, name)
        monkeypatch.setattr(fastbag.Bag, name,
                            lambda self, *a, _f=original, _n=name: (paths.append(_n), _f(self, *a))[1])
    expected_publish = np.array(publish, dtype=np.uint64).astype(np.int64)
    with fastbag.open(path) as bag:
        arr = bag.read("/blob")
        assert arr.publish_time.tolist() == expected_publish.tolist() and arr.sequence.tolist() == sequence
        assert arr[5:9].publish_time.tolist() == expected_publish[5:9].tolist()
        assert arr[[3, 1]].sequence.tolist() == [sequence[3], sequence[1]]
        assert bag.take("/blob", [7, 2]).sequence.tolist() == [sequence[7], sequence[2]]
        parts = list(bag.iter_read("/blob", step=10))
        assert np.concatenate([p.sequence for p in parts]).tolist() == sequence
    # the paths a large message takes: windows in place (a fresh handle), chunk by chunk where compressed
    if size > 8:
        assert ("_decode_windows" if compression == CompressionType.NONE else "_decode_chunks") in paths, paths


def test_open_reads_the_summary_only(tmp_path):
    """Counts and the time range come from the statistics; message indexes are read on first use."""
    path = tmp_path / "lazy.mcap"
    write_mcap(path, messages=1000)
    with fastbag.open(path) as bag:
        assert bag._container._index is None
        assert (bag.message_count, bag.start_time, bag.end_time) == (1000, 1_000_000_000, 1_000_000_000 + 999_000)
        assert bag._container._index is None
        assert len(list(bag.messages(topics="/b", raw=True))) == 500
        assert bag._container._index is not None


def test_ties_in_log_time_keep_file_order(tmp_path):
    path = tmp_path / "ties.mcap"
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=64, compression=CompressionType.NONE)
        writer.start()
        schema = writer.register_schema("t/T", "ros1msg", b"uint8 x\n")
        b, a = writer.register_channel("/b", "ros1", schema), writer.register_channel("/a", "ros1", schema)
        for k in range(20):
            writer.add_message([b, a][k % 2], log_time=7, data=bytes([k]), publish_time=0)
        writer.finish()
    got, _, _ = ours(path)
    assert [d[0] for _, _, d in got] == list(range(20))
    assert got == oracle(path)[0]


# -- damage ------------------------------------------------------------------------------------------------


def test_truncated_real_file_recovers_what_is_intact():
    cut = DATA / "broken" / "Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample_truncated.mcap"
    whole = DATA / "mcap" / "Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample.mcap"
    if not (cut.exists() and whole.exists()):
        pytest.skip("the truncated MCAP and its whole copy are absent")
    with pytest.warns(fastbag.FastbagWarning, match="read by scanning.*end with the MCAP magic.*cut off"):
        with fastbag.open(cut) as bag:
            assert bag.recovered
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
    assert got and got == oracle(whole)[0][:len(got)]


def find(data: bytes, opcode: int, after: int = 8) -> int:
    """Offset of the first record of ``opcode`` at or after ``after`` (walking records from the header)."""
    pos = 8
    while pos < len(data) - 8:
        if data[pos] == opcode and pos >= after:
            return pos
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    raise AssertionError(f"no record {opcode:#x}")


def test_chunk_crc_mismatch_names_the_chunk(tmp_path):
    path = tmp_path / "crc.mcap"
    write_mcap(path, compression=CompressionType.ZSTD)
    data = bytearray(path.read_bytes())
    chunk = find(data, 0x06)
    struct.pack_into("<I", data, chunk + 9 + 24, struct.unpack_from("<I", data, chunk + 9 + 24)[0] ^ 1)
    path.write_bytes(data)
    with fastbag.open(path) as bag:
        with pytest.raises(fastbag.BagFormatError, match="CRC-32") as info:
            list(bag.messages(raw=True))
    assert info.value.offset == chunk and info.value.record == "chunk" and info.value.path == str(path)
    with fastbag.open(path) as bag:  # a topic's own index (tests/test_topic_index.py) keeps the CRC too
        with pytest.raises(fastbag.BagFormatError, match="CRC-32") as info:
            bag.read("/a")
        assert info.value.offset == chunk and bag._container._index is None


def test_message_index_pointing_anywhere(tmp_path):
    path = tmp_path / "mx.mcap"
    write_mcap(path, compression=CompressionType.LZ4)
    data = bytearray(path.read_bytes())
    mx = find(data, 0x07)
    struct.pack_into("<Q", data, mx + 9 + 6 + 8, 3)  # the first entry's offset: into the middle of a record
    path.write_bytes(data)
    with fastbag.open(path) as bag:
        with pytest.raises(fastbag.BagFormatError, match="message index points at a record") as info:
            list(bag.messages(raw=True))
    assert info.value.record == "message" and "chunk at offset" in str(info.value)


@pytest.mark.parametrize("what", ["summary_start", "chunk_length", "record_length"])
def test_damaged_summary_falls_back_to_a_scan(tmp_path, what):
    path = tmp_path / "summary.mcap"
    written = write_mcap(path)
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - 29
    if what == "summary_start":
        struct.pack_into("<Q", data, footer + 9, len(data) * 3)
    elif what == "chunk_length":
        chunk_index = find(data, 0x08, struct.unpack_from("<Q", data, footer + 9)[0])
        struct.pack_into("<Q", data, chunk_index + 9 + 24, 2**63)
    else:
        chunk_index = find(data, 0x08, struct.unpack_from("<Q", data, footer + 9)[0])
        struct.pack_into("<Q", data, chunk_index + 1, 2**64 - 1)
    struct.pack_into("<I", data, footer + 9 + 16, 0)  # no summary CRC, so the damage itself is what is found
    path.write_bytes(data)
    with pytest.warns(fastbag.FastbagWarning, match="read by scanning"):
        got, attachments, _ = ours(path, quiet=False)
    assert got == written and len(attachments) == 1


def test_summary_crc_mismatch_scans(tmp_path):
    path = tmp_path / "sumcrc.mcap"
    written = write_mcap(path)
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - 29
    data[struct.unpack_from("<Q", data, footer + 9)[0] + 20] ^= 0xFF  # a byte of the summary
    path.write_bytes(data)
    with pytest.warns(fastbag.FastbagWarning, match="summary section fails its CRC-32"):
        assert ours(path, quiet=False)[0] == written


def test_zstd_bomb_is_bounded_by_the_declared_size(tmp_path):
    """A chunk whose zstd frame expands far past its declared uncompressed size: an error, not 1 GB."""
    import zstandard

    path = tmp_path / "bomb.mcap"
    write_mcap(path, compression=CompressionType.ZSTD, chunk_size=1 << 20, messages=10)
    data = bytes(path.read_bytes())
    chunk = find(bytearray(data), 0x06)
    length = struct.unpack_from("<Q", data, chunk + 1)[0]
    comp_len = struct.unpack_from("<I", data, chunk + 9 + 28)[0]
    records_at = chunk + 9 + 32 + comp_len + 8
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (1 << 30))
    body = bytearray(data[chunk + 9:records_at - 8]) + struct.pack("<Q", len(bomb)) + bomb
    struct.pack_into("<I", body, 24, 0)  # no CRC
    rebuilt = data[:chunk] + bytes([0x06]) + struct.pack("<Q", len(body)) + bytes(body) + \
        data[chunk + 9 + length:]
    path.write_bytes(rebuilt)
    import tracemalloc

    tracemalloc.start()
    try:
        # The rebuilt chunk moved the summary: the file is scanned, and the scan names the chunk it skips.
        with pytest.warns(fastbag.FastbagWarning, match=rf"zstd chunk decompressed to more than.*offset {chunk}"):
            with fastbag.open(path) as bag:
                assert list(bag.messages(raw=True)) == []
                assert len(bag.attachments) == 1  # what follows the damaged chunk is still read
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


@pytest.mark.parametrize("seed", range(6))
def test_random_damage_raises_only_fastbag_errors(tmp_path, seed):
    """Bytes flipped anywhere: a FastbagError or FastbagWarning at worst, never another exception."""
    rng = np.random.default_rng(seed)
    path = tmp_path / "rand.mcap"
    write_mcap(path, compression=[CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD][seed % 3],
               messages=60)
    clean = path.read_bytes()
    for _ in range(40):
        data = bytearray(clean)
        for at in rng.integers(0, len(data), rng.integers(1, 6)):
            data[at] = int(rng.integers(0, 256))
        path.write_bytes(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fastbag.FastbagWarning)
                with fastbag.open(path) as bag:
                    list(bag.messages(raw=True))
                    bag.attachments, bag.metadata  # noqa: B018
        except fastbag.FastbagError as exc:
            assert str(path) in str(exc)


def test_unknown_major_version(tmp_path):
    path = tmp_path / "v1.mcap"
    path.write_bytes(b"\x89MCAP1\r\n" + b"\0" * 64)
    with pytest.raises(fastbag.UnsupportedError, match="MCAP major version"):
        fastbag.open(path)


def test_an_empty_mcap_file_is_named_empty(tmp_path):
    """fuzz_rosbag2 seed 20261129 case 5675: a rosbag2 directory without metadata.yaml holding an empty .mcap
    raised a TypeError (reading 0 bytes of a file too empty to be mapped); now a BagFormatError, alone or
    in its directory."""
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "rec_0.mcap").write_bytes(b"")
    for path in (tmp_path / "rec", tmp_path / "rec" / "rec_0.mcap"):
        with pytest.raises(fastbag.BagFormatError, match="empty") as info:
            fastbag.open(path)
        assert "rec_0.mcap" in str(info.value) and info.value.offset == 0


def test_not_a_known_format_names_the_formats(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(fastbag.BagFormatError, match="fastbag reads ROS1 bags .*, MCAP files .* and rosbag2 recordings"):
        fastbag.open(path)


def test_info_command_on_mcap(tmp_path):
    from fastbag.cli import format_info, info_dict

    path = tmp_path / "info.mcap"
    write_mcap(path)
    with fastbag.open(path) as bag:
        text = format_info(bag)
        info = info_dict(bag)
    rows = [line.split(None, 1) for line in text.splitlines()]
    assert ["format:", "MCAP"] in rows and ["attachments:", "1, metadata: 1"] in rows
    # the values in one column, after the longest key and a space (as rosbag info aligns them)
    lines = text.splitlines()
    column = len(lines[0]) - len(lines[0][len("path:"):].lstrip())
    assert all(line[column - 1] == " " and line[:column].strip() in {"", line.split(":")[0] + ":"}
               for line in lines), text
    assert info["types"] == {"test/Vec": "ros1, ros1msg"} and info["messages"] == 200
    assert [t["messages"] for t in info["topics"]] == [100, 100]


@pytest.mark.parametrize("content_size", [True, False], ids=["declared", "undeclared"])
def test_zstd_codec_stops_past_its_limit(content_size):
    """The codec itself: a frame expanding past the chunk's size raises TooLarge after producing little more."""
    import tracemalloc

    import zstandard

    from fastbag.errors import TooLarge
    from fastbag.io.codecs import DECOMPRESSORS

    data = np.arange(1 << 20, dtype=np.uint8).tobytes()
    frame = np.frombuffer(zstandard.ZstdCompressor(write_content_size=content_size).compress(data), np.uint8)
    assert DECOMPRESSORS["zstd"](frame, len(data)).tobytes() == data
    bomb = np.frombuffer(zstandard.ZstdCompressor(write_content_size=content_size).compress(b"\0" * (1 << 30)),
                         np.uint8)
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge):
            DECOMPRESSORS["zstd"](bomb, 1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


# -- encodings that are not arrays ---------------------------------------------------------------------

SIMPLE_PROTOBUF = DATA / "mcap" / "rerun-io__rerun__crates__store__re_data_loader__tests__assets__simple-protobuf.mcap"
FOXGLOVE_LOG = DATA / "mcap" / "rerun-io__rerun__crates__store__re_data_loader__src__loader_mcap__tests__assets__foxglove_log.mcap"


def _json_and_protobuf_oracle(path) -> list[tuple[str, object]]:
    """(topic, message) of every message in log-time order, as the oracles decode them: json.loads for JSON,
    mcap-protobuf-support's decoder (its own descriptor pool) for protobuf. Skips without the file or them."""
    import json

    if not path.exists():
        pytest.skip(f"{path} is absent")
    pytest.importorskip("google.protobuf", reason="the protobuf extra is not installed")
    mcap_protobuf = pytest.importorskip("mcap_protobuf.decoder", reason="mcap-protobuf-support is the oracle")
    out: list[tuple[str, object]] = []
    with path.open("rb") as f:
        reader = make_reader(f)
        schemas = reader.get_summary().schemas
        for _, channel, message in reader.iter_messages(log_time_order=True):
            if channel.message_encoding == "json":
                out.append((channel.topic, json.loads(message.data)))
            else:
                decode = mcap_protobuf.DecoderFactory().decoder_for("protobuf", schemas[channel.schema_id])
                out.append((channel.topic, decode(message.data)))
    return out


@pytest.mark.parametrize("path", [SIMPLE_PROTOBUF, FOXGLOVE_LOG], ids=["simple-protobuf", "foxglove-log"])
def test_json_and_protobuf_messages_decode_as_mcap_support_decodes_them(path):
    """JSON with the standard library, protobuf through the schema's FileDescriptorSet; the oracle for protobuf
    is mcap-protobuf-support's decoder (its own descriptor pool), compared as dicts; JSON against json.loads."""
    from google.protobuf.json_format import MessageToDict

    expected = [(topic, value if isinstance(value, dict) else MessageToDict(value))
                for topic, value in _json_and_protobuf_oracle(path)]
    with fastbag.open(path) as bag:
        got = [(m.topic, m.msg if m.connection.encoding == "json" else MessageToDict(m.msg)) for m in bag.messages()]
        assert got == expected and len(got) == bag.message_count
        for topic in bag.topics:
            with pytest.raises(fastbag.UnsupportedError, match=r"read\(\) turns ros1 and cdr messages into arrays"):
                bag.read(topic)


@pytest.mark.parametrize("path", [SIMPLE_PROTOBUF, FOXGLOVE_LOG], ids=["simple-protobuf", "foxglove-log"])
def test_json_and_protobuf_messages_read_as_ros_messages_do(path):
    """Code written for ROS messages runs on these too: a JSON message's keys read as attributes (it was a
    plain dict: m.msg.clientX was an AttributeError), and both have to_dict(). Oracle: json.loads for JSON;
    for protobuf, to_dict(plain=True) parses back (json_format.ParseDict) into a message equal to the one
    mcap-protobuf-support decodes, and to_dict()'s leaves are that message's attributes."""
    import gc
    import json

    expected = [value for _, value in _json_and_protobuf_oracle(path)]
    from google.protobuf import json_format

    with fastbag.open(path) as bag:
        got = list(bag.messages())
    gc.collect()  # (the protobuf package makes a nested type's class anew once nothing holds it)
    assert len(got) == len(expected) > 0
    for m, want in zip(got, expected):
        if m.connection.encoding == "json":
            assert isinstance(m.msg, dict) and m.msg == want and json.loads(json.dumps(m.msg)) == want
            for key, value in want.items():
                assert getattr(m.msg, key) == value == m.msg[key]
            assert m.msg.to_dict() == want and type(m.msg.to_dict()) is dict
            with pytest.raises(AttributeError, match="no key 'clientx' .did you mean .*'clientX'"):
                m.msg.clientx  # noqa: B018
            continue
        plain = m.msg.to_dict(plain=True)
        json.dumps(plain)
        assert json_format.ParseDict(plain, type(want)()) == want
        values = m.msg.to_dict()
        assert set(values) == {field.name for field in want.DESCRIPTOR.fields}
        assert values["timestamp"] == {"seconds": want.timestamp.seconds, "nanos": want.timestamp.nanos}
        if m.topic == "pose":
            assert values["frame_id"] == want.frame_id == "device"
            assert values["pose"]["orientation"] == {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}
            assert m.msg.pose.orientation.to_dict() == values["pose"]["orientation"]
        else:
            assert values["message"] == want.message and values["level"] == want.level
            assert isinstance(values["level"], int) and plain["level"] == type(want).Level.Name(want.level)


def test_protobuf_to_dict_gives_every_kind_of_field():
    """Repeated numbers and messages as lists, maps as dicts, an unset message field as None (a type that
    holds itself would otherwise recurse without end), bytes as bytes; plain=True as protobuf's JSON."""
    pytest.importorskip("google.protobuf", reason="the protobuf package decodes protobuf messages")
    from google.protobuf import descriptor_pb2

    from fastbag.msg.objects import object_decoder

    file = descriptor_pb2.FileDescriptorProto(name="node.proto", package="t", syntax="proto3")
    node = file.message_type.add(name="Node")
    F = descriptor_pb2.FieldDescriptorProto
    node.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    node.field.add(name="child", number=2, type=F.TYPE_MESSAGE, type_name=".t.Node", label=F.LABEL_OPTIONAL)
    node.field.add(name="kids", number=3, type=F.TYPE_MESSAGE, type_name=".t.Node", label=F.LABEL_REPEATED)
    node.field.add(name="values", number=4, type=F.TYPE_DOUBLE, label=F.LABEL_REPEATED)
    node.field.add(name="blob", number=5, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    node.field.add(name="big", number=6, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    entry = node.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, type_name=".t.Node", label=F.LABEL_OPTIONAL)
    node.field.add(name="tags", number=7, type=F.TYPE_MESSAGE, type_name=".t.Node.TagsEntry", label=F.LABEL_REPEATED)
    files = descriptor_pb2.FileDescriptorSet(file=[file]).SerializeToString()
    decode = object_decoder("protobuf", "t.Node", files, topic="/tree")
    cls = type(decode(b""))
    msg = cls(name="root", kids=[cls(name="a", child=cls(name="b"))], values=[1.5, -2.0], blob=b"\x00\xff",
              big=2**40)
    msg.tags["k"].name = "v"
    got = decode(msg.SerializeToString())
    assert got.to_dict() == {
        "name": "root", "child": None, "values": [1.5, -2.0], "blob": b"\x00\xff", "big": 2**40,
        "kids": [{"name": "a", "child": {"name": "b", "child": None, "kids": [], "values": [], "blob": b"",
                                         "big": 0, "tags": {}},
                  "kids": [], "values": [], "blob": b"", "big": 0, "tags": {}}],
        "tags": {"k": {"name": "v", "child": None, "kids": [], "values": [], "blob": b"", "big": 0, "tags": {}}}}
    plain = got.to_dict(plain=True)
    assert plain["big"] == str(2**40) and plain["blob"] == "AP8=" and plain["tags"]["k"]["name"] == "v"
    assert "child" not in plain and plain["kids"][0]["child"]["name"] == "b"


def test_a_json_messages_keys_do_not_change_how_python_treats_it():
    """Keys named as Python's special names read by [key] only: {"__deepcopy__": 1} made copy.deepcopy call
    the 1, {"__array__": 1} broke np.array (QA). A failed lookup on a huge object suggests no key (it
    compared against every one: 0.12 s on 50,000)."""
    import copy
    import json

    from fastbag.msg.objects import object_decoder

    decode = object_decoder("json", "T", b"{}", topic="/j")
    odd = decode(json.dumps({"__deepcopy__": 1, "__array__": 2, "__array_interface__": 3, "x": 4}).encode())
    assert copy.deepcopy(odd) == odd and odd["__deepcopy__"] == 1 and odd.x == 4
    assert np.array([odd], dtype=object)[0] is odd
    with pytest.raises(AttributeError):
        odd.__array_interface__  # noqa: B018
    huge = decode(json.dumps({f"key{k}": k for k in range(50_000)}).encode())
    with pytest.raises(AttributeError, match="no key 'kez1'$"):
        huge.kez1  # noqa: B018


def test_protobuf_to_dict_says_which_fields_are_set_and_gives_json_types_as_values():
    """A oneof's unset members, and optional fields not set, are None (every member was its default: a Value
    holding null, 0.0, "" or False gave one dict, QA); Struct, Value and ListValue are the dict, value and
    list they hold; plain=True of an Any holding one of the schema's own types finds it in the schema's
    pool (it raised a TypeError naming an option, hiding "cannot find message descriptor")."""
    pytest.importorskip("google.protobuf", reason="the protobuf package decodes protobuf messages")
    from google.protobuf import any_pb2, descriptor_pb2, struct_pb2

    from fastbag.msg.objects import object_decoder

    files = descriptor_pb2.FileDescriptorSet()
    for module in (any_pb2, struct_pb2):
        module.DESCRIPTOR.CopyToProto(files.file.add())
    file = files.file.add(name="probe.proto", package="t", syntax="proto3",
                          dependency=["google/protobuf/any.proto", "google/protobuf/struct.proto"])
    probe = file.message_type.add(name="Probe")
    F = descriptor_pb2.FieldDescriptorProto
    probe.oneof_decl.add(name="choice")
    probe.oneof_decl.add(name="_maybe")  # (proto3 optional: a synthetic oneof)
    probe.field.add(name="number", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL, oneof_index=0)
    probe.field.add(name="text", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    probe.field.add(name="maybe", number=3, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL, oneof_index=1,
                    proto3_optional=True)
    probe.field.add(name="plain", number=4, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    probe.field.add(name="value", number=5, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Value",
                    label=F.LABEL_OPTIONAL)
    probe.field.add(name="doc", number=6, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Struct",
                    label=F.LABEL_OPTIONAL)
    probe.field.add(name="packed", number=7, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Any",
                    label=F.LABEL_OPTIONAL)
    decode = object_decoder("protobuf", "t.Probe", files.SerializeToString(), topic="/probe")
    cls = type(decode(b""))
    value_cls = type(cls().value)
    inner = cls(number=0.0)
    msg = cls(number=0.0, plain=0, value=value_cls(null_value=0))
    msg.doc.update({"a": 1.5, "b": [True, "x"]})
    msg.packed.Pack(inner)
    got = decode(msg.SerializeToString()).to_dict()
    assert got["number"] == 0.0 and got["text"] is None  # the member set, though its default
    assert got["maybe"] is None and got["plain"] == 0  # optional not set; a plain field has no "not set"
    assert got["value"] is None and got["doc"] == {"a": 1.5, "b": [True, "x"]}
    assert decode(cls(value=value_cls(string_value="")).SerializeToString()).to_dict()["value"] == ""
    assert decode(cls(text="").SerializeToString()).to_dict()["number"] is None
    plain = decode(msg.SerializeToString()).to_dict(plain=True)
    assert plain["packed"]["@type"] == "type.googleapis.com/t.Probe" and plain["packed"]["number"] == 0.0
    assert plain["value"] is None and plain["doc"] == {"a": 1.5, "b": [True, "x"]}


def test_unknown_encoding_reads_raw_and_says_so():
    path = DATA / "mcap" / "ros2__rosbag2__rosbag2_tests__resources__mcap__wrong_rmw_test" / "wrong_rmw_test_0.mcap"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    with fastbag.open(path) as bag:
        raw = [bytes(m.data) for m in bag.messages(raw=True)]
        assert raw == [d for _, _, d in oracle(path)[0]]
        with pytest.raises(fastbag.UnsupportedError, match=r"wrong_format-encoded.*raw=True\) for its bytes"):
            bag.read("/test_topic")
        with pytest.warns(fastbag.FastbagWarning, match="wrong_format-encoded"):
            got = list(bag.messages())
        assert [bytes(m.data) for m in got] == raw  # each message still there, its msg saying why it is not
        with pytest.raises(fastbag.UnsupportedError, match="wrong_format-encoded.*raw=True"):
            got[0].msg.data


# -- CDR messages into arrays and messages, through the container -----------------------------------------


def cdr_mcaps() -> list:
    return [p for p in real_mcaps() if p.values[0] is None or channel_encodings(p.values[0]) & {"cdr"}]


@pytest.mark.parametrize("path", cdr_mcaps())
def test_cdr_topics_decode_as_mcap_ros2_decodes_them(path):
    """Every CDR topic of every real MCAP file, read with a fresh handle (``read``) and iterated (``messages``),
    equals mcap-ros2-support's decoding field by field; topics it cannot decode are proved by the message
    layer's own tests (tests/test_cdr_real.py) and named here."""
    decoder = pytest.importorskip("mcap_ros2.decoder", reason="mcap-ros2-support is the oracle")
    expected: dict[str, list] = {}
    refused: dict[str, str] = {}
    with path.open("rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        factory = decoder.DecoderFactory()
        for _, channel, message in reader.iter_messages(log_time_order=True):
            if channel.message_encoding != "cdr" or channel.topic in refused:
                continue
            try:
                decode = factory.decoder_for("cdr", summary.schemas[channel.schema_id])
                expected.setdefault(channel.topic, []).append(decode(message.data))
            except Exception as exc:  # noqa: BLE001 - the oracle's limits (service events, missing types)
                refused[channel.topic] = f"{type(exc).__name__}: {exc}"
                expected.pop(channel.topic, None)
    if not expected:
        pytest.skip(f"mcap-ros2-support decodes no topic of {path.name} ({refused}); tests/test_cdr_real.py "
                    "proves these messages against rosbags")
    for topic, theirs in expected.items():
        with fastbag.open(path) as bag:
            arr = bag.read(topic)
            assert len(arr) == len(theirs)
            for i, msg in enumerate(theirs):
                assert_same_cdr(arr[i], msg, f"{topic}[{i}]")
        with fastbag.open(path) as bag:
            got = [m.msg for m in bag.messages(topics=topic)]
        for i, (ours, msg) in enumerate(zip(got, theirs)):
            assert_same_cdr(ours, msg, f"{topic} message {i}")


# -- regressions: defects the fuzz campaign (python -m tools.fuzz --formats mcap) found ------------------


def test_regression_scan_of_a_log_time_past_int64(tmp_path):
    """A scanned message whose log_time is past 2**63-1 (an attachment's opcode flipped to a message's made
    one) raised OverflowError building the int64 index; now that message is left out and named."""
    path = tmp_path / "time.mcap"
    written = write_mcap(path, chunked=False, messages=4)
    data = bytearray(path.read_bytes())
    second = find(data, 0x05, find(data, 0x05) + 1)
    struct.pack_into("<Q", data, second + 9 + 6, 2**64 - 1)
    path.write_bytes(data)
    with pytest.warns(fastbag.FastbagWarning, match=f"message record at offset {second} has log_time "
                      f"{2**64 - 1}, past int64: left out"):
        with fastbag.open(path) as bag:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
    assert got == [written[0]] + written[2:]


@pytest.mark.parametrize("damage", ["opcode", "entries"])
def test_regression_damaged_message_index_loses_messages_silently(tmp_path, damage):
    """A chunk's message index record turned into another record (opcode 0x07 -> 0x0b), or its entries'
    byte length set to 0, dropped that channel's messages of the chunk without a word, while message_count
    (from the statistics) still counted them. Now a record other than a message index where the chunk
    index lists one is a BagFormatError naming it; entries fewer than the statistics count are read with
    a warning saying how many each claims."""
    path = tmp_path / "mx.mcap"
    written = write_mcap(path, compression=CompressionType.LZ4, messages=20)
    data = bytearray(path.read_bytes())
    mx = find(data, 0x07)
    lost = struct.unpack_from("<I", data, mx + 9 + 2)[0] // 16
    assert 0 < lost < 20
    if damage == "opcode":
        data[mx] = 0x0B
    else:
        struct.pack_into("<I", data, mx + 9 + 2, 0)
    path.write_bytes(data)
    with fastbag.open(path) as bag:
        assert bag.message_count == 20
        if damage == "opcode":
            with pytest.raises(fastbag.BagFormatError, match="other than a message index") as info:
                list(bag.messages(raw=True))
            assert info.value.path == str(path) and info.value.offset == mx
            assert info.value.record == "opcode 0x0b" or info.value.record == "statistics"
            return
        with pytest.warns(fastbag.FastbagWarning) as said:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
        # both witnesses speak: the count against the statistics, and the time bounds of the chunk index
        said = " ".join(str(w.message) for w in said)
        assert f"message indexes list {20 - lost} messages, the statistics record 20: one of them is damaged" in said
        assert "span other times than its chunk index says" in said
        assert bag.message_count == 20 - lost
    channel = struct.unpack_from("<H", data, mx + 9)[0]
    assert got == [w for k, w in enumerate(written) if not (k < 2 * lost and k % 2 == channel - 1)]


@pytest.mark.parametrize("damage,compression", [("entries", CompressionType.LZ4), ("entries", CompressionType.NONE),
                                                 ("chunk index", CompressionType.ZSTD)],
                         ids=["entries-lz4", "entries-uncompressed", "chunk-index"])
def test_regression_shortened_message_index_without_statistics_is_said(tmp_path, damage, compression):
    """Fuzz cases 17701 and 27021 (seed 5151): in a file without a statistics record, a message index whose
    entries' byte length was lowered (the record's length unchanged) dropped one or two messages without a
    word, since nothing was left to count them against. Now entries whose first and last log_time differ
    from their chunk index's bounds are said when the index loads, and a decompressed chunk holding more
    Message records than its indexes list is said when it is read. (Bytes after the entries prove nothing:
    the conformance corpus's "pad" files put them there legally.)"""
    path = tmp_path / "nostats.mcap"
    written = write_mcap(path, compression=compression, messages=20, statistics=False)
    data = bytearray(path.read_bytes())
    with pytest.raises(AssertionError, match="no record"):
        find(data, 0x0B)  # no statistics record to count against
    mx = find(data, 0x07)
    channel = struct.unpack_from("<H", data, mx + 9)[0]
    nbytes = struct.unpack_from("<I", data, mx + 9 + 2)[0]
    assert nbytes >= 32
    if damage == "entries":  # the channel's last entry of the chunk is cut off
        struct.pack_into("<I", data, mx + 9 + 2, nbytes - 16)
        expected = ["messages, its message indexes list", "span other times than its chunk index says"]
    else:  # the chunk index claims a later end than any message of the chunk
        ci = find(data, 0x08)
        end = struct.unpack_from("<Q", data, ci + 9 + 8)[0]
        struct.pack_into("<Q", data, ci + 9 + 8, end + 1)
        struct.pack_into("<I", data, len(data) - 8 - 4, 0)  # the footer's summary CRC: 0, not computed
        expected = ["span other times than its chunk index says"]
    path.write_bytes(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(path) as bag:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
            problems = list(bag.problems)
            info = format_info(bag)  # `fastbag info` lists them too
    said = [str(w.message) for w in caught if issubclass(w.category, fastbag.FastbagWarning)]
    for text in expected:
        assert any(text in w for w in said), (text, said)
        assert any(text in p for p in problems), (text, problems)
        assert text in info and "problems:" in info
    if damage == "entries":
        held, listed = map(int, re.search(r"holds (\d+) messages, its message indexes list (\d+)",
                                          " ".join(said)).groups())
        assert held == listed + 1
        mine = [w for w in written[:nbytes // 16 * 2] if w[0] == ("/a", "/b")[channel - 1]]
        assert got == [w for w in written if w != mine[-1]]
    else:
        assert got == written


def test_regression_damaged_uncompressed_chunk_leaves_the_others_readable_without_statistics(tmp_path):
    """Fuzz case 1713 (seed 20261123): counting the Message records of uncompressed chunks (files without
    statistics) read each at index load, so one chunk whose stored size disagrees with its uncompressed
    size made every read fail. That chunk's error now waits for a read that needs it."""
    path = tmp_path / "nostats-none.mcap"
    written = write_mcap(path, compression=CompressionType.NONE, messages=40, statistics=False, chunk_size=256)
    data = bytearray(path.read_bytes())
    chunk = find(data, 0x06)
    ci = find(data, 0x08, find(data, 0x0F))  # chunk 0's index in the summary
    compressed_at = ci + 9 + struct.unpack_from("<Q", data, ci + 1)[0] - 16  # compressed_size
    struct.pack_into("<Q", data, compressed_at, struct.unpack_from("<Q", data, compressed_at)[0] - 8)
    struct.pack_into("<I", data, len(data) - 8 - 4, 0)  # the footer's summary CRC: 0, not computed
    path.write_bytes(data)
    with fastbag.open(path) as bag:
        first_chunk = struct.unpack_from("<Q", data, chunk + 9 + 8)[0]  # message_end_time of chunk 0
        later = [w for w in written if w[1] > first_chunk]
        assert 0 < len(later) < len(written)
        got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True, start=first_chunk + 1)]
        assert got == later
        with pytest.raises(fastbag.BagFormatError, match="uncompressed chunk holds") as info:
            list(bag.messages(raw=True))
        assert info.value.offset == chunk


def test_regression_scan_reads_data_records_in_the_summary(tmp_path):
    """A summary's schema record turned into a message record (opcode 0x03 -> 0x05) made the summary
    unusable, and the scan that followed yielded that record as a message the file never held. The summary
    section (after the Data End record) holds no data: the scan now leaves such records out, and says so."""
    path = tmp_path / "summary-message.mcap"
    written = write_mcap(path, compression=CompressionType.LZ4, messages=12)
    data = bytearray(path.read_bytes())
    schema = find(data, 0x03, find(data, 0x0F))  # the schema repeated in the summary
    data[schema] = 0x05
    path.write_bytes(data)
    with pytest.warns(fastbag.FastbagWarning, match=f"message record was skipped: it lies after the Data End record.*"
                      f"offset {schema}, message record"):
        with fastbag.open(path) as bag:
            assert bag.recovered
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
    assert got == written


def test_regression_message_index_entry_pointing_at_a_twin(tmp_path):
    """A message index entry's offset changed to that of another message of the same channel and log_time
    (a tie) read that message twice and the indexed one never, without a word: the record checks (opcode,
    channel, log_time) all pass. Now two entries of one offset are a BagFormatError."""
    path = tmp_path / "twin.mcap"
    with path.open("wb") as f:
        writer = Writer(f, compression=CompressionType.NONE)
        writer.start()
        schema = writer.register_schema("t/T", "ros1msg", b"uint8 x\n")
        channel = writer.register_channel("/t", "ros1", schema)
        for k in range(3):
            writer.add_message(channel, log_time=7, data=bytes([k]), publish_time=0)
        writer.finish()
    data = bytearray(path.read_bytes())
    mx = find(data, 0x07)
    first = struct.unpack_from("<Q", data, mx + 9 + 6 + 8)[0]
    struct.pack_into("<Q", data, mx + 9 + 6 + 16 + 8, first)  # the second entry points at the first message
    path.write_bytes(data)
    with fastbag.open(path) as bag:
        with pytest.raises(fastbag.BagFormatError, match="lists a message of channel 1 twice") as info:
            list(bag.messages(raw=True))
    assert info.value.offset == mx and info.value.record == "message index"


@pytest.mark.parametrize("length", [0, 1, 5])
def test_regression_message_index_shorter_than_its_fixed_fields(tmp_path, length):
    """A message index record whose length (0, 1, 5) cannot hold its channel id and entries' length raised
    IndexError or ValueError from NumPy; now a BagFormatError names the record."""
    path = tmp_path / "short.mcap"
    write_mcap(path, compression=CompressionType.ZSTD, messages=6)
    data = bytearray(path.read_bytes())
    mx = find(data, 0x07)
    struct.pack_into("<Q", data, mx + 1, length)
    path.write_bytes(data)
    with fastbag.open(path) as bag:
        with pytest.raises(fastbag.BagFormatError, match=f"its length {length} is shorter") as info:
            list(bag.messages(raw=True))
    assert info.value.offset == mx and info.value.record == "message index" and info.value.path == str(path)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_regression_corrupt_object_message_names_topic_and_index(tmp_path, encoding):
    """A protobuf message whose bytes are not valid wire format let google.protobuf's DecodeError escape
    bag.messages(); a JSON one raised a DecodeError naming no message. Both now raise fastbag's DecodeError
    naming the topic and the message's index in the read."""
    pytest.importorskip("google.protobuf", reason="the protobuf package decodes protobuf messages")
    from google.protobuf import descriptor_pb2, timestamp_pb2

    path = tmp_path / "objects.mcap"
    with path.open("wb") as f:
        writer = Writer(f, compression=CompressionType.NONE)
        writer.start()
        if encoding == "protobuf":
            files = descriptor_pb2.FileDescriptorSet()
            timestamp_pb2.DESCRIPTOR.CopyToProto(files.file.add())
            schema = writer.register_schema("google.protobuf.Timestamp", "protobuf", files.SerializeToString())
            good = [timestamp_pb2.Timestamp(seconds=k).SerializeToString() for k in range(3)]
            bad = b"\xff\xff\xff\xff"  # field 0x1fffffff... of wire type 7: no such wire type
        else:
            schema = writer.register_schema("Note", "jsonschema", b"{}")
            good = [b'{"k": %d}' % k for k in range(3)]
            bad = b'{"k": '
        channel = writer.register_channel("/o", encoding, schema)
        for k, data in enumerate(good[:2] + [bad] + good[2:]):
            writer.add_message(channel, log_time=10 + k, data=data, publish_time=0)
        writer.finish()
    with fastbag.open(path) as bag, pytest.warns(fastbag.FastbagWarning, match="/o cannot be decoded"):
        got = list(bag.messages())
    # The bad message's msg raises the error naming it when used; the messages around it decode.
    with pytest.raises(fastbag.DecodeError, match=r"\(topic /o, type .*, message 2\)$") as info:
        got[2].msg["k"]
    assert info.value.topic == "/o" and info.value.index == 2 and not got[2].msg
    values = [m.msg.seconds if encoding == "protobuf" else m.msg["k"] for m in got[:2] + got[3:]]
    assert values == [0, 1, 2] and bytes(got[2].data) == bad


def test_regression_chunk_index_uncompressed_size_past_int64(tmp_path):
    """A chunk index claiming an uncompressed size of 2**64-1 raised OverflowError building the int64 chunk
    table at open; now the summary is distrusted and the file scanned, every message read."""
    path = tmp_path / "size.mcap"
    written = write_mcap(path, compression=CompressionType.LZ4, messages=10)
    data = bytearray(path.read_bytes())
    ci = find(data, 0x08, find(data, 0x0F))
    at = ci + 9 + struct.unpack_from("<Q", data, ci + 1)[0] - 8  # its last field, uncompressed_size
    struct.pack_into("<Q", data, at, 2**64 - 1)
    struct.pack_into("<I", data, len(data) - 8 - 4, 0)  # no summary CRC: the index itself must be judged
    path.write_bytes(data)
    with pytest.warns(fastbag.FastbagWarning, match=r"its summary holds values fastbag cannot read: a time, offset or "
                      r"size beyond 2\*\*63 "
                      r"\(int64: times past the year 2262\) "
                      rf"\({path}, offset {ci}, chunk index record\)"):
        with fastbag.open(path) as bag:
            assert bag.recovered
            assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == written


def test_regression_chunk_index_offset_near_int64_max(tmp_path):
    """Fuzz case 7608 (seed 20261124): a chunk index's chunk_start_offset of 2**63-1 passed the vectorized
    bounds check (offset + length wrapped around int64) and failed later with an error naming no offset. The
    check now compares without sums that can wrap: the summary is distrusted and the file scanned."""
    path = tmp_path / "offset.mcap"
    written = write_mcap(path, compression=CompressionType.LZ4, messages=10)
    data = bytearray(path.read_bytes())
    ci = find(data, 0x08, find(data, 0x0F))
    struct.pack_into("<Q", data, ci + 9 + 16, 2**63 - 1)  # chunk_start_offset
    struct.pack_into("<I", data, len(data) - 8 - 4, 0)  # no summary CRC: the index itself must be judged
    path.write_bytes(data)
    with pytest.warns(fastbag.FastbagWarning, match="a chunk index points at bytes no chunk can hold"):
        with fastbag.open(path) as bag:
            assert bag.recovered
            assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == written


def test_cdr_channel_without_a_schema_or_with_an_unknown_schema_encoding(tmp_path):
    """Found by the campaign once CDR decoded: a cdr channel without a schema reads raw and read() says how to
    supply a definition, naming the topic; an unknown schema encoding's error names the file and the topic."""
    path = tmp_path / "schemas.mcap"
    with path.open("wb") as f:
        writer = Writer(f, compression=CompressionType.NONE)
        writer.start()
        odd = writer.register_schema("pkg/msg/T", "roc1msg", b"int32 x\n")
        bare = writer.register_channel("/bare", "cdr", 0)
        labelled = writer.register_channel("/labelled", "cdr", odd)
        for k in range(3):
            writer.add_message(bare, log_time=k, data=b"\x00\x01\x00\x00" + struct.pack("<i", k), publish_time=k)
            writer.add_message(labelled, log_time=k, data=b"\x00\x01\x00\x00" + struct.pack("<i", k), publish_time=k)
        writer.finish()
    with fastbag.open(path) as bag:
        assert [bytes(m.data)[4:] for m in bag.messages(topics="/bare", raw=True)] == \
            [struct.pack("<i", k) for k in range(3)]
        with pytest.raises(fastbag.DecodeError, match="can only be read raw; pass definitions=") as info:
            bag.read("/bare")
        assert info.value.topic == "/bare"
        with pytest.raises(fastbag.UnsupportedError, match=rf"'roc1msg'.*{path}.*topic /labelled"):
            bag.read("/labelled")


def test_a_topic_on_two_schemas_without_md5sums_is_not_one_array(tmp_path):
    """ROS1 channels name no md5sum unless the writer adds one ("*"): /x on Int32 and on Float32 merged into
    one array, the float's bits read as int32 with no word. Now the types and definitions must agree, as
    md5sums must in a ROS1 bag; messages() decodes each with its own schema."""
    path = tmp_path / "two.mcap"
    with path.open("wb") as f:
        writer = Writer(f)
        writer.start("ros1", "test")
        as_int = writer.register_schema("std_msgs/Int32", "ros1msg", b"int32 data\n")
        as_float = writer.register_schema("std_msgs/Float32", "ros1msg", b"float32 data\n")
        same = writer.register_schema("std_msgs/Int32", "ros1msg", b"int32 data\n")
        for k, schema in enumerate((as_int, as_float, same)):
            topic = "/x" if k < 2 else "/y"
            channel = writer.register_channel(topic, "ros1", schema)
            writer.add_message(channel, log_time=10 + k, publish_time=0, data=struct.pack("<i", 7) if k != 1 else
                               struct.pack("<f", 2.5))
            if topic == "/y":  # a second channel of one type and definition: one array
                other = writer.register_channel("/y", "ros1", as_int)
                writer.add_message(other, log_time=20, publish_time=0, data=struct.pack("<i", 8))
        writer.finish()
    with fastbag.open(path) as bag:
        with pytest.raises(fastbag.DecodeError, match="2 different message formats.*Int32, std_msgs/Float32"):
            bag.read("/x")
        assert [m.msg.data for m in bag.messages(topics="/x")] == [7, 2.5]
        assert bag.read("/y")["data"].tolist() == [7, 8]
    with fastbag.open(path) as bag:  # fresh: a window holding one format reads (the topic's own index)
        part = bag.read("/x", start=11)
        assert part["data"].tolist() == [2.5] and part["data"].dtype == np.float32 and part.time.tolist() == [11]
        assert bag.read("/x", end=11)["data"].tolist() == [7] and bag.read("/x", 10, 11)["data"].dtype == np.int32
        assert [p["data"].tolist() for p in bag.iter_read("/x", step=1, start=11)] == [[2.5]]
        with pytest.raises(fastbag.DecodeError, match="2 different message formats .* in the time window read "):
            bag.read("/x", start=10)
        with pytest.raises(fastbag.DecodeError, match="2 different message formats"):
            list(bag.iter_read("/x"))
        assert len(bag.read("/x", start=12)) == 0  # (a window of none decodes as the first format)
        # From the index alone, whatever the formats: times, positions; take() of positions in one format
        # decodes them with it (both raised DecodeError, as did a SyncedDataset over the topic)
        assert bag.topic_times("/x").tolist() == [10, 11] and bag.topic_rows("/x").size == 2
        assert bag.take("/x", [1])["data"].tolist() == [2.5] and bag.take("/x", [1])["data"].dtype == np.float32
        assert bag.take("/x", slice(0, 1))["data"].tolist() == [7]
        assert bag.take("/x", [1]).positions.tolist() == [1]
        assert bag.part_bounds("/x", 1) == [(0, 2)]  # (index only, as topic_rows; one compressed chunk)
        with pytest.raises(fastbag.DecodeError, match="2 different message formats .* at the positions taken "):
            bag.take("/x", [0, 1])
        with pytest.raises(fastbag.DecodeError, match="2 different message formats"):
            bag.read("/x")  # (the whole topic still cannot be one array)
    dataset = fastbag.SyncedDataset(path, {"x": "/x", "y": "/y"}, anchor="x", tolerance=10e-9, stamp="receive")
    assert [(s["x"]["data"], s["y"]["data"]) for s in dataset] == [(7, 7), (2.5, 7)]


def test_schemas_that_differ_only_in_comments_are_one_format_and_others_name_the_file(tmp_path):
    """Two channels of one topic and type whose ros2msg texts differ in comments only (split files of one
    recording store them so) read as one array: they were refused as "2 different message formats". Texts
    that differ in code are refused, naming the type, how many ways it is defined, and the file."""
    path = tmp_path / "comments.mcap"
    texts = [b"float64 x\n", b"# the x\nfloat64 x  # m\n\n", b"float32 x\n"]
    with path.open("wb") as f:
        writer = Writer(f, compression=CompressionType.NONE)
        writer.start()
        for k, text in enumerate(texts):
            schema = writer.register_schema("p/msg/X", "ros2msg", text)
            channel = writer.register_channel("/x" if k < 2 else "/z", "cdr", schema)
            raw = struct.pack("<d", 1.5 + k) if k < 2 else struct.pack("<f", 0.5)
            writer.add_message(channel, log_time=10 + k, publish_time=0, data=b"\0\1\0\0" + raw)
            if k == 2:
                other = writer.register_channel("/z", "cdr", writer.register_schema("p/msg/X", "ros2msg", texts[0]))
                writer.add_message(other, log_time=20, publish_time=0, data=b"\0\1\0\0" + struct.pack("<d", 9.0))
        writer.finish()
    with fastbag.open(path) as bag:
        assert bag.read("/x")["x"].tolist() == [1.5, 2.5]
        with pytest.raises(fastbag.DecodeError, match=r"2 different message formats \(p/msg/X, defined 2 ways\) in "
                                                      + re.escape(str(path))):
            bag.read("/z")
        assert [m.msg.x for m in bag.messages(topics="/z")] == [0.5, 9.0]


def test_regression_statistics_counting_no_messages_of_a_file_without_chunk_indexes(tmp_path):
    """A summary whose statistics count 0 messages and which indexes no chunk was believed: the file read as
    empty, silently, though its data section holds ten messages (fuzz seed 20261201 case 1945). Now the data
    section is walked to its first Chunk or Message record, and one found means a scan, with its warning."""
    source = data_file("mcap/foxglove__mcap__tests__conformance__data/TenMessages/TenMessages-ch-mx-st-sum.mcap")
    data = bytearray(source.read_bytes())
    footer = len(data) - 8 - 29  # Footer: opcode, length, summary_start, summary_offset_start, summary_crc
    summary_start = struct.unpack_from("<Q", data, footer + 9)[0]
    stats = find(data, 0x0B, summary_start)
    assert struct.unpack_from("<Q", data, stats + 9)[0] == 10
    struct.pack_into("<Q", data, stats + 9, 0)
    struct.pack_into("<I", data, footer + 9 + 16, 0)  # no summary CRC to disagree
    path = tmp_path / "zero-count.mcap"
    path.write_bytes(data)
    with pytest.warns(fastbag.FastbagWarning, match="read by scanning.*10 messages recovered"):
        bag = fastbag.open(path)
    with bag:
        assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == oracle(source)[0]
    empty = tmp_path / "empty.mcap"
    with empty.open("wb") as f:  # statistics of 0 messages, no chunk: believed, no scan
        writer = Writer(f, use_statistics=True)
        writer.start(profile="", library="fastbag tests")
        writer.register_channel("/a", "json", writer.register_schema("s", "jsonschema", b"{}"))
        writer.finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastbag.open(empty) as bag:
            assert bag.message_count == 0 and not bag.recovered and list(bag.topics) == ["/a"]


def _mcap_of_parts(path: Path, parts: list, statistics: bool, counted: int | None = None) -> None:
    """An MCAP file written record by record, for layouts writers rarely make: schema t/T and channels /u (1)
    and /v (2) up front, then ``parts`` in order, each ``("loose", channel, time, value)`` (a Message record
    outside chunks) or ``("chunk", rows, indexed[, crc])`` (a Chunk of ``(channel, time, value)`` rows, its
    Message Index records listed in its chunk index where ``indexed``, its uncompressed_crc ``crc`` where
    given (else the right one); a chunk of no rows holds a Channel record, /w (3), as a writer that adds a
    channel after a chunk closed on the last message writes). ``counted``: the Statistics' message count,
    where not the true one."""
    from mcap.data_stream import RecordBuilder
    from mcap.records import (Channel, Chunk, ChunkIndex, DataEnd, Footer, Header, Message, MessageIndex, Schema,
                              Statistics)

    out = bytearray(b"\x89MCAP0\r\n")

    def emit(*records) -> int:
        at, builder = len(out), RecordBuilder()
        for record in records:
            record.write(builder)
        out.extend(builder.end())
        return at

    schema = Schema(id=1, name="t/T", encoding="ros1msg", data=b"uint8 x\n")
    channels = [Channel(id=k, topic=topic, message_encoding="ros1", schema_id=1, metadata={})
                for k, topic in ((1, "/u"), (2, "/v"), (3, "/w"))]
    emit(Header(profile="", library="test"), schema, *channels[:2])
    chunk_indexes, counts, times = [], {}, []
    for kind, *part in parts:
        if kind == "loose":
            channel, time, value = part
            emit(Message(channel_id=channel, log_time=time, publish_time=time, sequence=0, data=bytes([value])))
            rows = [(channel, time, value)]
        else:
            rows, indexed, *crc = part
            inner, where = RecordBuilder(), {}
            if not rows:
                channels[2].write(inner)
            for channel, time, value in rows:
                where.setdefault(channel, []).append((time, inner.count))
                Message(channel_id=channel, log_time=time, publish_time=time, sequence=0,
                        data=bytes([value])).write(inner)
            raw = inner.end()
            # (a chunk of no messages: its times as rosbags' writer leaves them, first above last)
            first, last = (min(t for _, t, _ in rows), max(t for _, t, _ in rows)) if rows else (2**63 - 1, 0)
            at = emit(Chunk(message_start_time=first, message_end_time=last, uncompressed_size=len(raw),
                            uncompressed_crc=crc[0] if crc else zlib.crc32(raw), compression="", data=raw))
            indexes_at = len(out)
            offsets = {channel: emit(MessageIndex(channel_id=channel, records=entries))
                       for channel, entries in where.items()}
            chunk_indexes.append(ChunkIndex(message_start_time=first, message_end_time=last,
                                            chunk_start_offset=at, chunk_length=indexes_at - at,
                                            message_index_offsets=offsets if indexed else {},
                                            message_index_length=len(out) - indexes_at, compression="",
                                            compressed_size=len(raw), uncompressed_size=len(raw)))
        for channel, time, _ in rows:
            counts[channel] = counts.get(channel, 0) + 1
            times.append(time)
    emit(DataEnd(data_section_crc=0))
    summary = [schema, *channels[:2 + any(not p[1] for p in parts if p[0] == "chunk")], *chunk_indexes]
    if statistics:
        summary.append(Statistics(message_count=len(times) if counted is None else counted, schema_count=1, channel_count=len(summary) - 1
                                  - len(chunk_indexes), attachment_count=0, metadata_count=0,
                                  chunk_count=len(chunk_indexes), message_start_time=min(times),
                                  message_end_time=max(times), channel_message_counts=counts))
    summary_at = emit(*summary)
    emit(Footer(summary_start=summary_at, summary_offset_start=0, summary_crc=0))
    out.extend(b"\x89MCAP0\r\n")
    path.write_bytes(bytes(out))


def _mcap_with_loose_messages(path: Path, statistics: bool) -> None:
    """An MCAP file whose data section holds Message records outside its chunks, between indexed chunks (the
    spec allows them; no index lists them): two loose messages, a chunk, one more, a chunk."""
    _mcap_of_parts(path, [("loose", 1, 100, 1), ("loose", 2, 50, 2), ("chunk", [(1, 60, 3), (2, 100, 4)], True),
                          ("loose", 1, 100, 5), ("chunk", [(1, 40, 6)], True)], statistics)


@pytest.mark.parametrize("statistics", [True, False])
def test_messages_outside_chunks_beside_indexed_chunks_are_read(tmp_path, statistics):
    """Message records between indexed chunks (spec-valid, listed by no index) are read, ties at one log_time in
    file order: the file is scanned, saying why. They were lost: 3 of 6 read, silently without statistics."""
    path = tmp_path / "loose.mcap"
    _mcap_with_loose_messages(path, statistics)
    with path.open("rb") as f:  # every record in file order, sorted stably by log_time
        expected = sorted(((c.topic, m.log_time, m.data) for _, c, m in NonSeekingReader(f).iter_messages()),
                          key=lambda row: row[1])
    assert [d[0] for _, _, d in expected] == [6, 2, 3, 1, 4, 5]
    with pytest.warns(fastbag.FastbagWarning, match="messages outside its chunks"):
        got, _, _ = ours(path, quiet=False)
    assert got == expected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            assert bag.message_count == 6 and {t: i.message_count for t, i in bag.topics.items()} == {"/u": 4, "/v": 2}
            assert bag.read("/u").time.tolist() == [40, 60, 100, 100]
            # its two Chunk records, not the whole file the scan takes as one for the loose messages
            assert bag.chunk_count == 2 and bag.compression == {"none": 2}


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("lost", [False, True])
def test_a_chunk_no_message_index_lists_is_read_for_messages(tmp_path, statistics, lost):
    """A chunk that no message index lists either holds no messages (valid: a channel added after a chunk closed
    on the last message) or lost its indexes. The first was taken for the second: the whole file scanned at
    open, with a damage warning. Now such a chunk's records are read at open: none a message, the summary is
    used and nothing said; a message among them, the file is scanned, said, and every message read."""
    path = tmp_path / "unlisted.mcap"
    middle = ("chunk", [(2, 30, 3), (1, 40, 4)], False) if lost else ("chunk", [], True)
    _mcap_of_parts(path, [("chunk", [(1, 10, 1), (2, 20, 2)], True), middle, ("chunk", [(1, 50, 5)], True)],
                   statistics)
    with path.open("rb") as f:
        expected = sorted(((c.topic, m.log_time, m.data) for _, c, m in NonSeekingReader(f).iter_messages()),
                          key=lambda row: row[1])
    assert [d[0] for _, _, d in expected] == ([1, 2, 3, 4, 5] if lost else [1, 2, 5])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, _, _ = ours(path, quiet=False)
        with fastbag.open(path) as bag:
            assert bag.recovered == lost
            assert bag.chunk_count == 3
            assert bag.read("/u", start=45)["x"].tolist() == [5]  # a window, on a fresh handle
            if not lost:
                assert "/w" in bag.topics and bag.topics["/w"].message_count == 0
                assert len(bag.read("/w")) == 0
    assert got == expected
    said = [str(w.message) for w in caught if issubclass(w.category, fastbag.FastbagWarning)]
    assert bool(said) == lost and all("carry no message indexes" in text for text in said)


@pytest.mark.parametrize("case", ["wrong_crc", "statistics_count_none"])
def test_a_chunk_no_message_index_lists_is_judged_by_all_it_holds(tmp_path, case):
    """An unlisted chunk whose records fail its CRC-32 is damage (nothing would check it later: no read goes
    there), and statistics that count no message do not vouch for an unlisted chunk that holds some (they were
    believed: 0 messages read of 2, silently). Both scan the file, say so, and read every message (QA)."""
    path = tmp_path / "judged.mcap"
    if case == "wrong_crc":
        _mcap_of_parts(path, [("chunk", [(1, 10, 1)], True), ("chunk", [], True, 12345)], statistics=True)
        expected = [("/u", 10, b"\x01")]
    else:
        _mcap_of_parts(path, [("chunk", [(1, 10, 1), (1, 20, 2)], False)], statistics=True, counted=0)
        expected = [("/u", 10, b"\x01"), ("/u", 20, b"\x02")]
    with pytest.warns(fastbag.FastbagWarning, match="carry no message indexes"):
        with fastbag.open(path) as bag:
            assert bag.recovered
            assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == expected


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_rosbags_writer_chunk_of_a_late_channel_alone_opens_by_its_summary(tmp_path, compression):
    """rosbags' rosbag2 MCAP writer closes a chunk once it passes 1 MiB, and writes a channel added after that
    into the next chunk: closed at the end with no message, it is a chunk no message index lists. The
    recording opened by a whole-file scan with a damage warning (a first small window 11x slower)."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    blob, layout = store.types["std_msgs/msg/UInt8MultiArray"], store.types["std_msgs/msg/MultiArrayLayout"]
    path = tmp_path / "late"
    writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
    if compression == "zstd":  # (storage mode: each chunk compressed whole)
        writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    with writer:
        big = writer.add_connection("/big", "std_msgs/msg/UInt8MultiArray", typestore=store)
        for k in range(2):  # 2 x 600 kB: the chunk closes on the second
            data = blob(layout=layout(dim=[], data_offset=0), data=np.full(600_000, k + 1, dtype=np.uint8))
            writer.write(big, 10**9 + k, bytes(store.serialize_cdr(data, "std_msgs/msg/UInt8MultiArray")))
        writer.add_connection("/late", "std_msgs/msg/String", typestore=store)
    with Reader(path) as reader:
        theirs = [(c.topic, t, store.deserialize_cdr(raw, c.msgtype).data.tolist()) for c, t, raw in
                  reader.messages()]
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            assert not bag.recovered and bag.chunk_count == 2 and set(bag.topics) == {"/big", "/late"}
            arr = bag.read("/big")
            assert [("/big", t, arr["data"][i].tolist()) for i, t in enumerate(arr.time.tolist())] == theirs
            assert [m.msg.data.tolist() for m in bag.messages(topics="/big", start=10**9 + 1)] == [theirs[1][2]]


def test_an_unchunked_file_counts_no_chunk():
    """Messages straight in the data section (no Chunk record): 0 chunks, as the statistics say, where ``fastbag
    info`` said ``none [1/1 chunks]`` (the whole file, which the scan reads as one). (QA)"""
    folder = "mcap/foxglove__mcap__tests__conformance__data/TenMessages/"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        for name in ("TenMessages-pad-st.mcap", "TenMessages-pad-rch-rsh-st-sum.mcap"):
            path = data_file(folder + name)
            with path.open("rb") as f:
                stats = make_reader(f).get_summary().statistics
            with fastbag.open(path) as bag:
                assert bag.chunk_count == stats.chunk_count == 0 and bag.compression == {}, path.name
                assert bag.compression_sizes == {} and bag.message_count == stats.message_count == 10


def test_records_between_chunks_that_are_not_messages_keep_the_index(tmp_path):
    """Attachments and metadata between chunks (and message indexes after each) are walked over, not read as
    loose messages: the file opens from its summary, without a scan or a warning."""
    path = tmp_path / "between.mcap"
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=64, compression=CompressionType.NONE)
        writer.start()
        schema = writer.register_schema("t/T", "ros1msg", b"uint8 x\n")
        channel = writer.register_channel("/a", "ros1", schema)
        for k in range(30):
            writer.add_message(channel, log_time=k, data=bytes([k]), publish_time=k)
            if k % 10 == 5:
                writer.add_attachment(create_time=0, log_time=k, name=f"a{k}", media_type="text/plain", data=b"x")
                writer.add_metadata(f"m{k}", {"k": str(k)})
        writer.finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fastbag.open(path) as bag:
            assert not bag.recovered and bag.read("/a").time.tolist() == list(range(30))


def test_time_bounds_past_int64_select_nothing(tmp_path):
    """A start of 2**63 ns or later (u64 MCAP times reach it) is after every message: NumPy compared it as a
    float, equal to 2**63 - 1, and the message at that time was selected."""
    path = tmp_path / "late.mcap"
    with path.open("wb") as f:
        writer = Writer(f, compression=CompressionType.NONE)
        writer.start()
        channel = writer.register_channel("/u", "ros1", writer.register_schema("t/T", "ros1msg", b"uint8 x\n"))
        for k, t in enumerate((10, 20, 2**63 - 1)):
            writer.add_message(channel, log_time=t, data=bytes([k]), publish_time=t)
        writer.finish()
    with fastbag.open(path) as bag:
        for start in (2**63, 2**64 - 1, 2**64):
            assert [m.time for m in bag.messages(start=start)] == []
            assert bag.read("/u", start=start).time.tolist() == bag.times("/u", start=start).tolist() == []
        assert [m.time for m in bag.messages(end=2**63 - 1)] == [10, 20]
        assert [m.time for m in bag.messages(start=2**63 - 1, end=2**64)] == [2**63 - 1]
        assert [m.time for m in bag.messages(start=-2**64)] == [10, 20, 2**63 - 1]


def test_statistics_times_that_disagree_with_the_chunk_indexes_are_not_believed():
    """rosbag2's rewriter_a_0.mcap: its Statistics say the messages start at 1 ms, its chunk index and first
    message are at 0. A fresh handle said 1 ms (and `read(t, start=bag.start_time)` lost that message), and the
    same handle 0 once its index was read: the start time is now the messages' from the first question."""
    path = data_file("mcap/ros2__rosbag2__rosbag2_transport__test__resources__mcap__rewriter_a/rewriter_a_0.mcap")
    with path.open("rb") as f:
        summary = make_reader(f).get_summary()
        first = min(m.log_time for _, _, m in make_reader(f).iter_messages())
    assert (summary.statistics.message_start_time, first) == (1_000_000, 0)  # what the file says, what it holds
    with fastbag.open(path) as bag:
        assert (bag.start_time, bag.end_time) == (0, 100_000_000) and bag.get_start_time() == 0.0
        assert len(bag.read("a_empty", start=bag.start_time)) == len(bag.read("a_empty")) == 100
        bag.topics  # the index read: the same times
        assert (bag.start_time, bag.end_time) == (0, 100_000_000)


def test_statistics_times_that_agree_are_used_without_reading_message_indexes(tmp_path):
    path = tmp_path / "agree.mcap"
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=64, compression=CompressionType.NONE)
        writer.start()
        channel = writer.register_channel("/a", "ros1", writer.register_schema("t/T", "ros1msg", b"uint8 x\n"))
        for k in range(30):
            writer.add_message(channel, log_time=1000 + k, data=bytes([k]), publish_time=k)
        writer.finish()
    with fastbag.open(path) as bag:
        assert (bag.start_time, bag.end_time, bag.message_count) == (1000, 1029, 30)
        assert bag._container._index is None  # (the summary alone answered)


# -- the scan's Message-record kernel -------------------------------------------------------------------

def _scan_both(path: Path, monkeypatch) -> tuple:
    """What scan() finds in ``path`` walked by the kernel and by the Python loop alone, each as plain values."""
    from fastbag.io.source import Source
    from fastbag.mcap import scan as scan_module

    found = []
    for kernel in (True, False):
        monkeypatch.setattr(scan_module, "by_kernel", lambda size, up_to, kernel=kernel: kernel)
        source = Source(path)
        try:
            s = scan_module.scan(source, 8)
            walker = scan_module._Walker(source.size)
        finally:
            source.close()
        assert (walker.kernel is not None) == kernel
        found.append((s.schemas, s.channels, s.attachment_indexes, s.metadata_indexes, s.chunks, s.chunk_crcs,
                      s.damage, s.message_count, [a.tolist() for a in s.messages()]))
    return tuple(found)


def _scan_inputs() -> list:
    files = [p for p in conformance_files() + real_mcaps() if p.values[0] is not None]
    return files or [pytest.param(None, marks=pytest.mark.skip(reason=f"{DATA} is absent"), id="no-data")]


@pytest.mark.parametrize("path", _scan_inputs())
def test_the_scan_kernel_finds_what_the_python_scan_finds_in_real_files(path, monkeypatch):
    """Every real MCAP file and conformance variant, scanned whole: the same records, messages and damage."""
    walked, parsed = _scan_both(path, monkeypatch)
    assert walked == parsed


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.LZ4], ids=["none", "lz4"])
@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "unchunked"])
def test_the_scan_kernel_finds_what_the_python_scan_finds_in_damaged_files(tmp_path, monkeypatch, compression,
                                                                          chunked):
    """Files cut at every 37th byte and with bytes flipped (lengths, opcodes, log_times past int64 among
    them): the kernel's runs and the Python loop's records agree to the message and the damage said."""
    path = tmp_path / "w.mcap"
    written = write_mcap(path, compression=compression, chunked=chunked, messages=300, chunk_size=4096)
    clean = path.read_bytes()
    walked, parsed = _scan_both(path, monkeypatch)
    assert walked == parsed
    assert walked[7] == 300 and walked[8][1] == [t for _, t, _ in written]  # (a real result, not two empty ones)
    rng = np.random.default_rng(7)
    variants = [clean[:cut] for cut in range(8, len(clean), 37)]
    for _ in range(60):
        data = bytearray(clean)
        for at in rng.integers(8, len(data), rng.integers(1, 4)):
            data[at] = int(rng.choice([0, 1, 5, 0x80, 0xFF, rng.integers(0, 256)]))
        variants.append(bytes(data))
    messages = []
    for data in variants:
        path.write_bytes(data)
        walked, parsed = _scan_both(path, monkeypatch)
        assert walked == parsed
        messages.append(walked[7])
    assert len(set(messages)) > 5 and max(messages) == 300  # the cuts found fewer messages, some variants all


def test_the_scan_kernel_leaves_a_log_time_past_int64_to_the_python_scan(tmp_path, monkeypatch):
    """A run stops at a message whose log_time no int64 holds: the Python scan says it and the run resumes."""
    path = tmp_path / "time.mcap"
    write_mcap(path, chunked=False, messages=40)
    data = bytearray(path.read_bytes())
    at = 8
    for _ in range(3):  # the third message record
        at = find(data, 0x05, at + 1)
    struct.pack_into("<Q", data, at + 9 + 6, 2**63)
    path.write_bytes(data)
    walked, parsed = _scan_both(path, monkeypatch)
    assert walked == parsed and walked[7] == 39
    assert f"a message record at offset {at} has log_time {2**63}, past int64: left out" in walked[6]
