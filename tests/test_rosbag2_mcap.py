"""rosbag2 directories whose MCAP storage is split into several files or zstd-compressed per file, read as one bag.

Oracles: the ``mcap`` package reading each storage file (messages merged by
log time, ties in file order, as rosbag2 plays them), rosbags' rosbag2
reader where it reads the directory, and rosbags' CDR deserializer for
decoded values.
"""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import zstandard

import fastbag
from conftest import DATA, open_quietly
from fastbag.cli import main
from fastbag.errors import BagFormatError, FastbagError, FastbagWarning

MCAP = DATA / "mcap"
WBAG = MCAP / "ros2__rosbag2__rosbag2_py__test__resources__mcap__wbag"
MULTIPLE = MCAP / "ros2__rosbag2__rosbag2_py__test__resources__mcap__reindex_test_bags__multiple_files"
LONE_ZSTD = MCAP / "Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample.mcap.zstd"


def need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} is not in the shared data ({DATA})")


def mcap_messages(files: list[Path]) -> list[tuple[str, int, bytes]]:
    """(topic, log_time, data) of every message of the files, read by the mcap package, merged by log time
    (ties in file order, then each file's own log-time order)."""
    from mcap.reader import make_reader

    rows = []
    for k, f in enumerate(files):
        with open(f, "rb") as stream:
            for n, (_, channel, message) in enumerate(make_reader(stream).iter_messages(log_time_order=True)):
                rows.append((message.log_time, k, n, channel.topic, bytes(message.data)))
    rows.sort(key=lambda r: r[:3])
    return [(topic, t, data) for t, _, _, topic, data in rows]


def ours(bag: fastbag.Bag, topic: str | None = None) -> list[tuple[str, int, bytes]]:
    return [(m.topic, m.time, bytes(m.data)) for m in bag.messages(topic, raw=True)]


@pytest.mark.parametrize("path", [WBAG, MULTIPLE], ids=["wbag", "multiple_files"])
def test_split_mcap_storage_reads_as_one_bag(path):
    need(path)
    files = sorted(path.glob("*.mcap"))
    assert len(files) > 1
    expected = mcap_messages(files)
    with fastbag.open(path) as bag:
        assert bag.format == "rosbag2"
        # What opening says (each file's statistics), then what the index says.
        assert bag.message_count == len(expected)
        assert (bag.start_time, bag.end_time) == (min(r[1] for r in expected), max(r[1] for r in expected))
        counts: dict[str, int] = {}
        for topic, _, _ in expected:
            counts[topic] = counts.get(topic, 0) + 1
        assert {t: i.message_count for t, i in bag.topics.items()} == dict(sorted(counts.items()))
        assert all(len(i.connections) == 1 for i in bag.topics.values())  # one connection over the files
        assert ours(bag) == expected
        for topic in bag.topics:
            assert ours(bag, topic) == [r for r in expected if r[0] == topic]


def test_a_split_recordings_time_range_is_judged_once(monkeypatch):
    """Every read with int bounds asks the bag's time range (whether an int is seconds); a split recording
    judged each file's statistics again each time: 21 ms a read over 200 files (QA). Once per file now."""
    from fastbag.mcap.reader import McapReader

    need(MULTIPLE)
    judged = []
    real = McapReader._statistics_times_agree
    monkeypatch.setattr(McapReader, "_statistics_times_agree", lambda self, stats: judged.append(self) or
                        real(self, stats))
    with open_quietly(MULTIPLE) as bag:  # (no metadata.yaml: said, and not what this test is about)
        for _ in range(20):  # (before any read: the index is not built, the statistics answer)
            assert bag.start_time < bag.end_time
        files = len(bag._container.parts)
        assert bag._container._index is None and files > 1 and len(judged) == len(set(judged)) <= files


def test_split_mcap_storage_agrees_with_rosbags_raw_and_decoded():
    need(WBAG)
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    with Reader(WBAG) as reader:
        theirs = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
        strings = {}
        for c, _, d in reader.messages():
            strings.setdefault(c.topic, []).append(store.deserialize_cdr(d, c.msgtype).data)
    with fastbag.open(WBAG) as bag:
        # rosbags yields by time, ties in its own order: compare as multisets of (topic, time, bytes) and by
        # topic in order.
        assert sorted(ours(bag)) == sorted(theirs)
        for topic, values in strings.items():
            assert list(bag.read(topic).data) == values
            assert [m.msg.data for m in bag.messages(topic)] == values


def compressed_copy(source: Path, folder: Path) -> Path:
    """``source`` with each storage file zstd-compressed (rosbag2's FILE compression mode)."""
    folder.mkdir()
    text = (source / "metadata.yaml").read_text()
    for f in sorted(source.glob("*.mcap")):
        (folder / (f.name + ".zstd")).write_bytes(zstandard.ZstdCompressor().compress(f.read_bytes()))
        text = text.replace(f"- {f.name}", f"- {f.name}.zstd")
    text = text.replace("compression_format: ''", "compression_format: zstd").replace(
        "compression_mode: ''", "compression_mode: FILE")
    (folder / "metadata.yaml").write_text(text)
    return folder


def test_split_and_compressed_mcap_storage_reads_as_the_plain_one(tmp_path):
    need(WBAG)
    folder = compressed_copy(WBAG, tmp_path / "wbag")
    assert "FILE" in (folder / "metadata.yaml").read_text()
    with fastbag.open(WBAG) as plain, fastbag.open(folder) as bag:
        assert bag.compression == plain.compression
        assert ours(bag) == ours(plain)
        assert list(bag.read("AAA").data) == list(plain.read("AAA").data)
    assert not list(Path(folder).glob("*.mcap")), "the user's folder gains no decompressed file"


def test_a_lone_compressed_mcap_file_opens(tmp_path):
    need(LONE_ZSTD)
    plain = tmp_path / "plain.mcap"
    plain.write_bytes(zstandard.ZstdDecompressor().stream_reader(LONE_ZSTD.read_bytes()).read())
    with fastbag.open(LONE_ZSTD) as bag, fastbag.open(plain) as reference:
        assert bag.format == "MCAP"
        assert bag.message_count == reference.message_count > 0
        assert ours(bag) == ours(reference) == mcap_messages([plain])
        assert bag.size == LONE_ZSTD.stat().st_size < reference.size == plain.stat().st_size  # sizes on disk
        # Compressed whole, it counts as a compressed file (its chunks said "none" for a file of plain chunks),
        # with the file's sizes stored and decompressed, as a .db3.zstd
        assert (bag.compression, bag.compression_unit) == ({"zstd": 1}, "files")
        assert bag.compression_sizes == {"zstd": (LONE_ZSTD.stat().st_size, plain.stat().st_size)}


def test_file_compressed_mcap_storage_counts_compressed_files(tmp_path):
    """A recording in FILE mode said compression 'none' (its chunks', uncompressed inside the .zstd files)."""
    need(WBAG)
    folder = compressed_copy(WBAG, tmp_path / "wbag")
    stored = sum(p.stat().st_size for p in folder.glob("*.mcap.zstd"))
    whole = sum(p.stat().st_size for p in WBAG.glob("*.mcap"))
    with fastbag.open(folder) as bag:
        assert (bag.compression, bag.compression_unit) == ({"zstd": 5}, "files")
        assert bag.compression_sizes == {"zstd": (stored, whole)}
    with fastbag.open(WBAG) as bag:  # the same recording's files as they are: their chunks (zstd themselves)
        assert bag.compression_unit == "chunks" and sum(bag.compression.values()) == len(bag._container.chunks) > 0


def test_an_absent_or_damaged_storage_file_is_named_and_the_rest_stays_readable(tmp_path):
    need(WBAG)
    folder = tmp_path / "wbag"
    shutil.copytree(WBAG, folder)
    (folder / "wbag_1.mcap").unlink()
    (folder / "wbag_3.mcap").write_bytes(b"\x89MCAP0\r\n" + bytes(100))
    expected = mcap_messages([folder / f"wbag_{k}.mcap" for k in (0, 2, 4)])
    with pytest.warns(FastbagWarning, match=r"absent.*wbag_1\.mcap.*wbag_3\.mcap|wbag_1\.mcap.*wbag_3\.mcap"):
        bag = fastbag.open(folder)
    with bag:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FastbagWarning)
            assert ours(bag) == expected
    for k in (0, 2, 4):
        (folder / f"wbag_{k}.mcap").unlink()
    with pytest.raises(BagFormatError, match=r"absent.*wbag_0\.mcap"):
        fastbag.open(folder)


def test_a_scanned_file_of_a_split_recording_is_named(tmp_path):
    """One file of a split recording cut short (read by scanning): its problem names that file, where the
    recording's warning named only the folder (QA)."""
    need(WBAG)
    folder = tmp_path / "wbag"
    shutil.copytree(WBAG, folder)
    cut = folder / "wbag_2.mcap"
    cut.write_bytes(cut.read_bytes()[:-40])  # (its footer and end magic gone: no summary to read)
    with pytest.warns(FastbagWarning, match=r"wbag_2\.mcap: read by scanning"):
        bag = fastbag.open(folder)
    with bag:
        assert any(p.startswith("wbag_2.mcap: read by scanning") for p in bag.problems), bag.problems
        assert not any(p.startswith(("wbag_0", "wbag_1", "wbag_3", "wbag_4")) for p in bag.problems)


def test_compressed_storage_bombs_and_garbage_raise_naming_the_file(tmp_path):
    need(WBAG)
    folder = compressed_copy(WBAG, tmp_path / "wbag")
    for name, data in (("bomb", zstandard.ZstdCompressor().compress(bytes(600 << 20))),
                       ("garbage", b"\x28\xb5\x2f\xfd" + bytes(200))):
        for k in range(5):
            (folder / f"wbag_{k}.mcap.zstd").write_bytes(data)
        with pytest.raises(FastbagError, match=r"wbag_0\.mcap\.zstd"):
            fastbag.open(folder)


def test_without_metadata_the_mcap_files_present_are_read_in_name_order():
    need(MULTIPLE)
    assert not (MULTIPLE / "metadata.yaml").exists()
    with pytest.warns(FastbagWarning, match=r"no metadata.yaml .* as one recording \(multiple_files_0.mcap, "
                      r"multiple_files_1.mcap, multiple_files_2.mcap\)$"):  # split files of one recording
        bag = fastbag.open(MULTIPLE)
    with bag:
        assert [Path(p.path).name for p in bag._container.parts] == [f"multiple_files_{k}.mcap" for k in range(3)]
        assert bag.version == "unknown"
        assert np.all(np.diff(bag.times("/chatter")) >= 0)


@pytest.mark.parametrize("names", [("a.mcap", "b.mcap"), ("run_0.mcap", "run_0.mcap.zstd"),
                                   ("run_0.mcap", "other_1.mcap"), ("x.db3", "y.db3")])
def test_a_folder_of_files_not_one_recordings_splits_is_refused_naming_them(tmp_path, names):
    """Without metadata.yaml, files not named as one recording's splits (NAME_0, NAME_1...: what rosbag2 writes,
    also while recording) were read as one bag, with a warning: two recordings of different years gave a bag of
    19,523 hours, and a file beside its .zstd copy every message twice, `fastbag info` exiting 0 (QA). They are
    refused, as a folder of ROS1 bags is, naming the files to open alone."""
    need(WBAG)
    need(LONE_ZSTD)
    mcap = sorted(WBAG.glob("*.mcap"))[0].read_bytes()
    for name in names:
        if name.endswith(".db3"):
            (tmp_path / name).write_bytes(b"SQLite format 3\0" + bytes(100))
        else:
            (tmp_path / name).write_bytes(zstandard.ZstdCompressor().compress(mcap) if name.endswith(".zstd") else mcap)
    listed = re.escape(", ".join(sorted(names)))
    with pytest.raises(BagFormatError, match=r"no metadata.yaml, and its storage files are not the split files of one "
                       rf"recording \(NAME_0, NAME_1...\): open each file alone \({listed}\)"):
        fastbag.open(tmp_path)
    assert main(["info", str(tmp_path)]) == 1
    if not names[0].endswith(".db3"):
        with fastbag.open(tmp_path / names[0]) as alone:
            assert alone.message_count > 0


def test_a_storage_file_that_is_no_mcap_is_named(tmp_path):
    """Found by tools/fuzz_rosbag2 (seed 6, case 2891): metadata.yaml says mcap, the file is empty."""
    need(WBAG)
    folder = tmp_path / "wbag"
    shutil.copytree(WBAG, folder)
    for k in range(5):
        (folder / f"wbag_{k}.mcap").write_bytes(b"" if k % 2 else b"SQLite format 3\0" + bytes(100))
    with pytest.raises(BagFormatError, match=r"neither an MCAP file nor zstd-compressed.*wbag_0\.mcap"):
        fastbag.open(folder)


def write_per_message(folder: Path, count: int = 600) -> dict[str, list]:
    """A rosbag2 directory written by rosbags' writer: MCAP storage compressed per message (each message's
    data a zstd frame), Imu and String topics. Returns rosbags' own messages, by topic."""
    from fastbag.tooling.synth_db3 import rosbag2_writer

    writer, store = rosbag2_writer(folder, "mcap", per_message=True)
    t = store.types
    rng = np.random.default_rng(7)
    written: dict[str, list] = {"/imu": [], "/s": []}
    with writer:
        imu = writer.add_connection("/imu", "sensor_msgs/msg/Imu", typestore=store)
        text = writer.add_connection("/s", "std_msgs/msg/String", typestore=store)
        for k in range(count):
            stamp = 1_700_000_000 * 10**9 + k * 10**7
            header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=stamp // 10**9,
                                                                                      nanosec=stamp % 10**9),
                                              frame_id=f"imu{k % 3}")
            vector = t["geometry_msgs/msg/Vector3"]
            msg = t["sensor_msgs/msg/Imu"](
                header=header, orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                orientation_covariance=rng.random(9), angular_velocity=vector(x=rng.random(), y=-1.0, z=k * 0.5),
                angular_velocity_covariance=np.zeros(9), linear_acceleration=vector(x=k * 1.0, y=0.0, z=9.81),
                linear_acceleration_covariance=np.full(9, 0.25))
            writer.write(imu, stamp, store.serialize_cdr(msg, "sensor_msgs/msg/Imu"))
            written["/imu"].append(msg)
            if k % 7 == 0:
                msg = t["std_msgs/msg/String"](data="text " * (k % 50))
                writer.write(text, stamp, store.serialize_cdr(msg, "std_msgs/msg/String"))
                written["/s"].append(msg)
    return written


def rewrite_mcap(source: Path, target: Path, *, data=lambda k, data: data, chunk_size: int = 4096,
                 compression: str = "lz4", metadata: bool = True, chunked: bool = True) -> None:
    """``source`` written again by the ``mcap`` package's writer in other chunks (schemas, channels, messages
    and metadata kept, metadata records unless ``metadata`` is False; no chunks at all unless ``chunked``),
    each message's data passed through ``data(k, data)``."""
    from mcap.reader import make_reader
    from mcap.writer import CompressionType, Writer

    with open(source, "rb") as stream, open(target, "wb") as out:
        reader = make_reader(stream)
        writer = Writer(out, chunk_size=chunk_size, compression=CompressionType[compression.upper()],
                        use_chunking=chunked)
        summary = reader.get_summary()
        writer.start(profile=reader.get_header().profile, library="test")
        for schema in summary.schemas.values():
            writer.register_schema(schema.name, schema.encoding, schema.data)
        for channel in summary.channels.values():
            writer.register_channel(channel.topic, channel.message_encoding, channel.schema_id, channel.metadata)
        for record in reader.iter_metadata() if metadata else ():
            writer.add_metadata(record.name, record.metadata)
        for k, (_, channel, message) in enumerate(reader.iter_messages(log_time_order=False)):
            writer.add_message(channel.id, message.log_time, data(k, message.data), message.publish_time,
                               message.sequence)
        writer.finish()


def test_mcap_storage_compressed_per_message_reads_as_rosbags_does(tmp_path):
    """rosbag2 MCAP storage compressed per message (``compression_mode: message``: each message's data a zstd
    frame): opened as a directory and as a lone file (its rosbag2 metadata record says how it is compressed),
    and rewritten in many lz4 chunks, it reads as rosbags reads it: raw bytes decompressed, values equal to
    the messages rosbags wrote, by attribute and by ``[name]``. The same file without per-message compression
    still opens as a plain MCAP file."""
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    written = write_per_message(tmp_path / "per_message")
    with Reader(tmp_path / "per_message") as reader:
        theirs = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
    rechunked = tmp_path / "rechunked"
    rechunked.mkdir()
    shutil.copy(tmp_path / "per_message" / "metadata.yaml", rechunked)
    rewrite_mcap(tmp_path / "per_message" / "per_message.mcap", rechunked / "per_message.mcap")
    bare = tmp_path / "bare"  # a directory without metadata.yaml: the file's own rosbag2 record says how
    bare.mkdir()
    shutil.copy(tmp_path / "per_message" / "per_message.mcap", bare)
    imu, text = written["/imu"], written["/s"]
    for path in (tmp_path / "per_message", tmp_path / "per_message" / "per_message.mcap", rechunked,
                 rechunked / "per_message.mcap", bare):
        with fastbag.open(path) as bag:
            assert bag.compression == {"zstd": 1}, path
            assert ours(bag) == theirs, path
            arrays = bag.read("/imu")
            assert arrays.linear_acceleration.x.tolist() == [m.linear_acceleration.x for m in imu]
            assert np.array_equal(arrays["orientation_covariance"], np.stack([m.orientation_covariance for m in imu]))
            assert arrays.header.frame_id.tolist() == [m.header.frame_id for m in imu]
            assert arrays.header.stamp.nanosec.tolist() == [m.header.stamp.nanosec for m in imu]
            assert bag.read("/s").data.tolist() == [m.data for m in text]
            decoded = list(bag.messages("/imu"))
            assert [m.msg.angular_velocity.z for m in decoded] == [m.angular_velocity.z for m in imu]
            assert [m.publish_time for m in decoded] == [m.time for m in decoded]  # as rosbags writes them
            chunks = [part.data.tolist() for part in bag.iter_read("/s", step=5)]
            assert sum(chunks, []) == [m.data for m in text]
    with fastbag.open(rechunked) as bag:
        assert len(bag._container.chunks) > 20  # many chunks, each rebuilt
    store = get_typestore(Stores.ROS2_HUMBLE)
    with Writer(tmp_path / "plain", version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        connection = writer.add_connection("/s", "std_msgs/msg/String", typestore=store)
        for k in range(5):
            writer.write(connection, 10**18 + k, store.serialize_cdr(text[k], "std_msgs/msg/String"))
    for path in (tmp_path / "plain", tmp_path / "plain" / "plain.mcap"):
        with fastbag.open(path) as bag:
            assert bag.compression == {"none": 1}
            assert bag.read("/s").data.tolist() == [m.data for m in text[:5]]


def test_a_per_message_file_whose_record_is_lost_is_told_by_its_messages(tmp_path):
    """rosbag2 writes the record that says a file is compressed per message last, so a recorder's crash (or
    a rosbag2 that wrote none) leaves a file without it, and no metadata.yaml. Such a file read every
    message's zstd frame as CDR (an UnsupportedError: "representation id 0x28b5"); now its first message's
    bytes tell, as they do for a lone .db3, where that is cheap: a file cut short by 40% (zstd chunks, no
    summary: scanned), and a whole file without the record in uncompressed chunks (lone, and as a directory
    without metadata.yaml). Values against what rosbags wrote. A sound file of zstd chunks without the
    record is not second-guessed at open (its first chunk's head would cost a zstd block): reading it
    names the zstd frames. The plain MCAP files of the other tests stay plain."""
    written = write_per_message(tmp_path / "per_message", count=600)
    source = tmp_path / "per_message" / "per_message.mcap"
    imu = written["/imu"]
    bare = tmp_path / "bare"
    bare.mkdir()
    rewrite_mcap(source, bare / "rec_0.mcap", chunk_size=64 << 10, compression="none", metadata=False)
    zstd_chunks = tmp_path / "zstd_chunks.mcap"
    rewrite_mcap(source, zstd_chunks, chunk_size=64 << 10, compression="zstd", metadata=False)
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(zstd_chunks.read_bytes()[:int(zstd_chunks.stat().st_size * 0.6)])
    # Written without chunks (rosbag2's fastwrite preset), with and without the record: a whole-file
    # "chunk" of the messages outside chunks, whose records start past the magic (its rebuild read the
    # magic as a record and lost every message, QA).
    loose = [tmp_path / "loose_record.mcap", tmp_path / "loose.mcap"]
    for target, kept in zip(loose, (True, False)):
        rewrite_mcap(source, target, chunked=False, metadata=kept)
    from mcap.reader import make_reader

    with open(bare / "rec_0.mcap", "rb") as f:
        assert not list(make_reader(f).iter_metadata())  # (the rosbag2 record left out)
    for path in (bare / "rec_0.mcap", bare, cut, *loose):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastbag.FastbagWarning)  # (cut short, or no metadata.yaml: said)
            with fastbag.open(path) as bag:
                assert bag.compression_unit == "files", path
                arrays = bag.read("/imu")
                got = len(arrays)
                assert (got == len(imu)) if path != cut else (100 < got < len(imu)), (path, got)
                assert arrays.linear_acceleration.x.tolist() == [m.linear_acceleration.x for m in imu[:got]]
                assert arrays.header.frame_id.tolist() == [m.header.frame_id for m in imu[:got]]
                texts = [m.msg.data for m in bag.messages("/s")]
                assert texts == [m.data for m in written["/s"][:len(texts)]] and texts
    with fastbag.open(zstd_chunks) as bag:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastbag.FastbagWarning)  # (messages() says it once, as a warning)
            for read in (lambda: bag.read("/imu"), lambda: next(bag.messages("/imu")).msg.linear_acceleration):
                with pytest.raises(fastbag.FastbagError, match="its bytes are a zstd frame: the recording is "
                                   "compressed per message.*open the recording's directory with its metadata"):
                    read()
    # The check reads the head of the first chunk alone: a file whose first message is plain CDR opens
    # as the MCAP file it is.
    plain = tmp_path / "plain.mcap"
    rewrite_mcap(source, plain, data=lambda k, data: zstandard.ZstdDecompressor().decompress(data),
                 compression="none", metadata=False)
    with fastbag.open(plain) as bag:
        assert bag.format == "MCAP" and bag.compression == {"none": len(bag._container.chunks)}
        assert bag.read("/imu").linear_acceleration.x.tolist() == [m.linear_acceleration.x for m in imu]


def test_a_lone_per_message_file_is_opened_once(tmp_path, monkeypatch):
    """A lone .mcap (or a directory of it without metadata.yaml) compressed per message is opened once: the
    reader that found its rosbag2 record is taken over as the storage's, not closed and opened again (its
    summary was read twice), and closed with the bag."""
    from fastbag.mcap.reader import McapReader

    written = write_per_message(tmp_path / "per_message", count=40)
    lone = tmp_path / "per_message" / "per_message.mcap"
    opened: list[str] = []
    real = McapReader.__init__
    monkeypatch.setattr(McapReader, "__init__", lambda self, path: opened.append(str(path)) or real(self, path))
    with fastbag.open(lone) as bag:
        assert bag.format == "MCAP" and bag.compression == {"zstd": 1}
        assert len(bag.read("/imu")) == len(written["/imu"]) > 0
    assert opened == [str(lone)]
    with fastbag.open(lone) as bag:  # what it took over is closed with the bag
        part = bag._container.parts[0]
    assert part.source.closed


def test_mcap_storage_compressed_per_message_bad_frames_are_named(tmp_path):
    """A message whose data is no zstd frame, and a bomb (a frame of 64 MiB of zeros, 2 KiB compressed),
    are BagFormatErrors naming the file, the chunk and the record's offset in it. A compression format
    other than zstd is refused, naming it."""
    write_per_message(tmp_path / "source", count=50)
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    for name, bad in (("garbage", b"not a zstd frame"), ("bomb", bomb)):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(tmp_path / "source" / "metadata.yaml", folder)
        # Message 10 is an Imu (messages 0 and 1 are the Imu and String of time 0; 2 to 7 Imus).
        rewrite_mcap(tmp_path / "source" / "source.mcap", folder / "source.mcap",
                     data=lambda k, data, bad=bad: bad if k == 10 else data, chunk_size=1 << 20)
        with fastbag.open(folder) as bag:
            with pytest.raises(BagFormatError, match=r"(not a zstd frame|decompression bomb).*source\.mcap "
                               r"\(chunk at offset \d+\), offset \d+, message record"):
                bag.read("/imu")
    with fastbag.open(tmp_path / "garbage") as bag:  # both topics share the chunk: its rebuild fails for both
        with pytest.raises(BagFormatError, match="does not decompress"):
            bag.read("/s")
    text = (tmp_path / "source" / "metadata.yaml").read_text()
    assert "compression_format: zstd" in text
    (tmp_path / "source" / "metadata.yaml").write_text(text.replace("compression_format: zstd",
                                                                    "compression_format: lz4"))
    with pytest.raises(fastbag.UnsupportedError, match="compression format 'lz4'"):
        fastbag.open(tmp_path / "source")


def test_a_split_recording_compressed_per_message_without_metadata_yaml(tmp_path):
    """Without metadata.yaml (a recording cut short), a directory of MCAP files compressed per message is told
    so by the files' own rosbag2 record, as one such file alone is: the directory read every message's zstd
    frame as CDR ("fewer bytes than its definition needs")."""
    from rosbags.rosbag2 import Writer
    from rosbags.rosbag2.writer import CompressionFormat, CompressionMode, StoragePlugin
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    vector = store.types["geometry_msgs/msg/Vector3"]
    folder = tmp_path / "rec"
    folder.mkdir()
    for k in range(2):
        writer = Writer(tmp_path / f"part{k}", version=9, storage_plugin=StoragePlugin.MCAP)
        writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
        with writer:
            conn = writer.add_connection("/v", "geometry_msgs/msg/Vector3", typestore=store)
            for i in range(10 * k, 10 * k + 10):
                writer.write(conn, 10**18 + i * 10**7,
                             store.serialize_cdr(vector(x=float(i), y=0.0, z=0.0), "geometry_msgs/msg/Vector3"))
        shutil.copy(next((tmp_path / f"part{k}").glob("*.mcap")), folder / f"rec_{k}.mcap")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)  # (no metadata.yaml: said)
        with fastbag.open(folder) as bag:
            assert bag.read("/v")["x"].tolist() == [float(i) for i in range(20)]
            assert bag.compression == {"zstd": 2} and bag.compression_unit == "files"
