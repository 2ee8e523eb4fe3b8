"""The benchmark's MCAP copy as rosbag2's ``zstd_fast`` preset writes it (fastbag.tooling.synth_mcap).

Oracle: the ``mcap`` package, reading the source and the copy through their
summaries and, with CRC validation, record by record; chunks are checked
against the mcap C++ writer's rule (compressed only where that saves 2%).
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import zstandard

import fastbag

pytest.importorskip("mcap", reason="the bench's MCAP tooling needs the test extra: pip install -e '.[test]'")


def _source(folder: Path) -> Path:
    """A rosbag2 directory of one MCAP file in uncompressed 16 KiB chunks with CRC-32s (as the ``mcap``
    writer makes the bench's ``-none`` recordings): a topic of zeros (compressible), one of random bytes
    (not), and an attachment and a metadata record between chunks."""
    from mcap.writer import CompressionType, Writer

    folder.mkdir()
    rng = np.random.default_rng(7)
    with (folder / "src.mcap").open("wb") as out:
        writer = Writer(out, chunk_size=16 * 1024, compression=CompressionType.NONE)
        writer.start(profile="ros2", library="test")
        schema = writer.register_schema("test_msgs/msg/Bytes", "ros2msg", b"uint8[] data")
        zeros = writer.register_channel("/zeros", "cdr", schema)
        noise = writer.register_channel("/noise", "cdr", schema)
        for k in range(60):
            channel, body = (noise, rng.bytes(5000)) if k < 20 else (zeros, bytes(3000))
            payload = b"\x00\x01\x00\x00" + struct.pack("<I", len(body)) + body  # CDR, little-endian
            writer.add_message(channel, log_time=1000 + k, publish_time=2000 + k, sequence=k, data=payload)
            if k == 30:
                writer.add_attachment(create_time=5, log_time=1030, name="calib.yaml", media_type="text/yaml",
                                      data=b"fx: 500\n")
                writer.add_metadata("robot", {"name": "r2"})
        writer.finish()
    (folder / "metadata.yaml").write_text("relative_file_paths: [src.mcap]\n")  # what the copy renames
    return folder


def _everything(path: Path) -> tuple[list, list, list]:
    """(messages, attachments, metadata) as the mcap package reads them through the summary."""
    from mcap.reader import make_reader

    with path.open("rb") as f:
        reader = make_reader(f)
        messages = [(c.topic, m.log_time, m.publish_time, m.sequence, bytes(m.data))
                    for _, c, m in reader.iter_messages(log_time_order=False)]
        attachments = [(a.name, a.media_type, a.log_time, a.create_time, bytes(a.data))
                       for a in reader.iter_attachments()]
        metadata = [(m.name, dict(m.metadata)) for m in reader.iter_metadata()]
    return messages, attachments, metadata


@pytest.mark.parametrize("level", ["preset", 3])
def test_zstd_fast_copy_holds_the_source_records_as_the_preset_stores_them(tmp_path, monkeypatch, level):
    """Every message, attachment and metadata record is the source's; each chunk is zstd at the level where
    that saves 2% and raw otherwise, its CRC-32 0; the rebuilt summary's offsets point at their records."""
    from mcap.reader import make_reader
    from mcap.records import Chunk, DataEnd, Footer
    from mcap.stream_reader import StreamReader

    from fastbag.tooling import synth_mcap

    if level != "preset":
        monkeypatch.setattr(synth_mcap, "ZSTD_FAST_LEVEL", level)
    source = _source(tmp_path / "src")
    copy = synth_mcap.write_zstd_fast(source, tmp_path / "fast")
    assert (tmp_path / "fast" / "metadata.yaml").read_text().count(copy.name) == 1
    assert _everything(copy) == _everything(source / "src.mcap")
    assert len(_everything(copy)[0]) == 60

    data = copy.read_bytes()
    with copy.open("rb") as f:
        summary = make_reader(f).get_summary()
    compressor = zstandard.ZstdCompressor(level=synth_mcap.ZSTD_FAST_LEVEL)
    kinds = set()
    for index in summary.chunk_indexes:
        start, length = index.chunk_start_offset, index.chunk_length
        assert data[start] == 0x06 and struct.unpack_from("<Q", data, start + 1)[0] == length - 9
        chunk = next(iter(StreamReader(io.BytesIO(data[start:start + length]), skip_magic=True,
                                       emit_chunks=True).records))
        assert (chunk.compression, len(chunk.data)) == (index.compression, index.compressed_size)
        assert chunk.uncompressed_crc == 0
        raw = zstandard.ZstdDecompressor().decompress(chunk.data) if chunk.compression else chunk.data
        assert len(raw) == index.uncompressed_size
        saves = len(raw) >= 1.02 * len(compressor.compress(raw))
        assert chunk.compression == ("zstd" if saves else "")
        kinds.add(chunk.compression)
        for offset in index.message_index_offsets.values():
            assert data[offset] == 0x07  # a message index record
    if level == 3:
        assert kinds == {"zstd", ""}  # the zeros' chunks compress, the noise's do not
    records = list(StreamReader(io.BytesIO(data), validate_crcs=True, emit_chunks=True).records)
    assert [type(r) for r in records].count(Chunk) == len(summary.chunk_indexes)
    assert next(r for r in records if isinstance(r, DataEnd)).data_section_crc == 0
    assert isinstance(records[-1], Footer) and records[-1].summary_crc == 0
    _assert_summary_offsets(data, records[-1])

    with fastbag.open(source / "src.mcap") as theirs, fastbag.open(copy) as ours:
        for topic in ("/zeros", "/noise"):
            assert [bytes(m.data) for m in ours.messages(topic, raw=True)] == \
                [bytes(m.data) for m in theirs.messages(topic, raw=True)]
            assert [bytes(a) for a in ours.read(topic).data] == [bytes(a) for a in theirs.read(topic).data]


def _assert_summary_offsets(data: bytes, footer) -> None:
    """Each summary offset record names a group of records of its opcode that ends where the next begins."""
    at, groups = footer.summary_offset_start, []
    while data[at] == 0x0E:  # summary offset records, up to the footer
        opcode, start, length = struct.unpack_from("<BQQ", data, at + 9)
        groups.append((opcode, start, length))
        at += 9 + struct.unpack_from("<Q", data, at + 1)[0]
    assert data[at] == 0x02  # the footer
    assert groups and groups[0][1] == footer.summary_start
    for (opcode, start, length), following in zip(groups, groups[1:] + [(None, footer.summary_offset_start, 0)]):
        assert start + length == following[1]
        position = start
        while position < start + length:
            assert data[position] == opcode
            position += 9 + struct.unpack_from("<Q", data, position + 1)[0]
        assert position == start + length
