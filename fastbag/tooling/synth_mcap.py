"""The benchmark recordings as ROS2 writes them: a rosbag2 directory holding one MCAP file of CDR messages.

Made from a generated ROS1 bench bag (:mod:`fastbag.tooling.synth`), so both
formats hold the same recording: every message is deserialized by rosbags,
rebuilt as its ROS2 type (``std_msgs/Header`` without ``seq``) and
serialized to CDR by rosbags; the 1 M Imu topic is rebuilt with NumPy (one
pass). The MCAP file is written with the ``mcap`` package's writer in
768 KiB chunks, zstd- or lz4-compressed, with the ``ros2msg`` schemas rosbag2
stores; ``metadata.yaml`` beside it lets rosbags' rosbag2 reader open the
directory. Needs the test extra (rosbags, mcap): benchmark tooling only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from ..bag import open as open_bag

CHUNK_SIZE = 768 * 1024  # rosbag2's MCAP storage default
LIVOX_ROS1 = ("livox_ros_driver/msg/CustomPoint", "livox_ros_driver/msg/CustomMsg")


def _typestores() -> tuple[Any, Any]:
    """(ROS1 store, ROS2 store) of rosbags, both knowing the Livox driver's types."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    from .synth import LIVOX_CUSTOM

    ros1, ros2 = get_typestore(Stores.ROS1_NOETIC), get_typestore(Stores.ROS2_HUMBLE)
    main, _, point = LIVOX_CUSTOM.definition.partition("MSG: livox_ros_driver/CustomPoint\n")
    main = main.split("=" * 80)[0]
    for store, header in ((ros1, "std_msgs/Header"), (ros2, "std_msgs/Header")):
        types = get_types_from_msg(point, LIVOX_ROS1[0])
        types.update(get_types_from_msg(main.replace("Header header", f"{header} header").replace(
            "CustomPoint[]", "livox_ros_driver/CustomPoint[]"), LIVOX_ROS1[1]))
        store.register(types)
    return ros1, ros2


def _to_ros2(value: Any, ros2: Any) -> Any:
    """A rosbags ROS1 message object rebuilt as the ROS2 type of the same name (fields matched by name)."""
    if hasattr(value, "__msgtype__"):
        cls = ros2.types[value.__msgtype__]
        return cls(**{f.name: _to_ros2(getattr(value, f.name), ros2) for f in dataclasses.fields(cls)})
    if isinstance(value, list):
        return [_to_ros2(item, ros2) for item in value]
    return value


def _imu_cdr(raw: np.ndarray, count: int) -> np.ndarray:
    """1 M ROS1 Imu messages (320 bytes each, frame_id 'imu_link') as CDR (324 bytes each), in one pass."""
    ros1 = raw.reshape(count, 320)
    cdr = np.zeros((count, 324), dtype=np.uint8)
    cdr[:, 1] = 1  # encapsulation: CDR little-endian
    cdr[:, 4:12] = ros1[:, 4:12]  # stamp: sec, nanosec
    cdr[:, 12:16] = np.frombuffer(np.uint32(9).tobytes(), np.uint8)  # frame_id length with its NUL
    cdr[:, 16:24] = ros1[:, 16:24]  # "imu_link"; then the NUL and 3 bytes of padding up to 8-byte alignment
    cdr[:, 28:] = ros1[:, 24:]  # orientation ... linear_acceleration_covariance (float64, aligned)
    return cdr


def write_rosbag2_mcap(ros1_bag: Path, folder: Path, *, compression: str = "zstd") -> Path:
    """The recording of ``ros1_bag`` as a rosbag2 directory ``folder`` (metadata.yaml + ``<name>.mcap``)."""
    from mcap.writer import CompressionType, Writer

    from rosbags.typesys import get_types_from_msg

    ros1, ros2 = _typestores()
    folder.mkdir(parents=True, exist_ok=True)
    mcap_path = folder / f"{folder.name}.mcap"
    counts: dict[str, int] = {}
    with open_bag(ros1_bag) as bag, mcap_path.open("wb") as out:
        writer = Writer(out, chunk_size=CHUNK_SIZE, compression={"zstd": CompressionType.ZSTD,
                                                                   "lz4": CompressionType.LZ4,
                                                                   "none": CompressionType.NONE}[compression])
        writer.start(profile="ros2", library="fastbag bench")
        channels: dict[str, tuple[int, str]] = {}
        for info in bag.topics.values():
            name = info.msgtype.replace("/", "/msg/", 1)
            ros1.register(get_types_from_msg(info.definition, name))  # the ROS1 types as the bag defines them
            text, _ = ros2.generate_msgdef(name, ros_version=2)
            schema = writer.register_schema(name, "ros2msg", text.encode())
            channels[info.name] = (writer.register_channel(info.name, "cdr", schema), name)
        imu_only = list(bag.topics) == ["/imu"]
        if imu_only:  # the 1 M Imu recording: converted with NumPy, not message by message
            raw = np.concatenate([np.frombuffer(m.data, np.uint8) for m in bag.messages(raw=True)])
            times = bag.times("/imu")
            cdr = _imu_cdr(raw, times.size)
            channel = channels["/imu"][0]
            for k, t in enumerate(times.tolist()):
                writer.add_message(channel, log_time=t, data=cdr[k].tobytes(), publish_time=t, sequence=k)
            counts["/imu"] = times.size
        else:
            for k, m in enumerate(bag.messages(raw=True)):
                channel, name = channels[m.topic]
                msg = ros1.deserialize_ros1(bytes(m.data), name)
                data = ros2.serialize_cdr(_to_ros2(msg, ros2), name)
                writer.add_message(channel, log_time=m.time, data=bytes(data), publish_time=m.time, sequence=k)
                counts[m.topic] = counts.get(m.topic, 0) + 1
        writer.finish()
        _write_metadata(folder, mcap_path.name, bag, channels, counts)
    return mcap_path


def _write_metadata(folder: Path, file: str, bag: Any, channels: dict[str, tuple[int, str]],
                    counts: dict[str, int]) -> None:
    """metadata.yaml (version 8, as rosbag2 writes it) for rosbags' reader."""
    import yaml

    start, duration = bag.start_time or 0, bag.duration
    topics = [{"topic_metadata": {"name": topic, "type": name, "serialization_format": "cdr",
                                  "offered_qos_profiles": "", "type_description_hash": ""},
               "message_count": counts.get(topic, 0)} for topic, (_, name) in channels.items()]
    info = {"version": 8, "storage_identifier": "mcap", "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start}, "message_count": sum(counts.values()),
            "topics_with_message_count": topics, "compression_format": "", "compression_mode": "",
            "relative_file_paths": [file], "files": [{"path": file, "starting_time": {"nanoseconds_since_epoch":
                                                                                        start},
                                                      "duration": {"nanoseconds": duration},
                                                      "message_count": sum(counts.values())}],
            "custom_data": None, "ros_distro": "fastbag-bench"}
    (folder / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False))


def write_rosbag2_sqlite(ros1_bag: Path, folder: Path) -> Path:
    """The recording of ``ros1_bag`` as a rosbag2 directory of sqlite3 storage (``folder``, which must not exist),
    written by rosbags' rosbag2 writer (metadata version 8, message definitions stored): the same messages,
    rebuilt as their ROS2 types and serialized to CDR as :func:`write_rosbag2_mcap` does."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_types_from_msg

    ros1, ros2 = _typestores()
    with open_bag(ros1_bag) as bag, Writer(folder, version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        connections = {}
        for info in bag.topics.values():
            name = info.msgtype.replace("/", "/msg/", 1)
            ros1.register(get_types_from_msg(info.definition, name))
            connections[info.name] = (writer.add_connection(info.name, name, typestore=ros2), name)
        for m in bag.messages(raw=True):
            connection, name = connections[m.topic]
            msg = ros1.deserialize_ros1(bytes(m.data), name)
            writer.write(connection, m.time, bytes(ros2.serialize_cdr(_to_ros2(msg, ros2), name)))
    return folder


#: rosbag2's ``zstd_fast`` storage preset (rosbag2_storage_mcap): zstd at its fastest level
#: (``ZSTD_minCLevel()``), no CRC-32s, the default 768 KiB chunks.
ZSTD_FAST_LEVEL = -(1 << 17)


def write_zstd_fast(source: Path, folder: Path) -> Path:
    """The rosbag2 directory ``source`` (one MCAP file of uncompressed chunks) as ``folder`` holding the same
    recording as ``ros2 bag record -s mcap --storage-preset-profile zstd_fast`` writes it.

    The chunks keep their messages and each is compressed as the mcap C++ writer behind rosbag2 stores
    it: zstd at :data:`ZSTD_FAST_LEVEL`, kept only where that makes it at least 2% smaller (the writer's
    ``MIN_COMPRESSION_RATIO``), else the chunk stays uncompressed. Chunk, data-section and summary CRC-32s
    are 0 (the preset's ``noCRC``). The summary is rebuilt for the new offsets.
    """
    import zstandard
    from mcap.records import Chunk, DataEnd, Footer, SummaryOffset
    from mcap.stream_reader import StreamReader

    from ..mcap.records import MAGIC

    (mcap_source,) = source.glob("*.mcap")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{folder.name}.mcap"
    compressor = zstandard.ZstdCompressor(level=ZSTD_FAST_LEVEL)
    moved: dict[int, tuple[int, Any]] = {}  # source offset of a data-section record -> (target offset, record)
    summary: list[Any] = []
    with mcap_source.open("rb") as f, target.open("wb") as out:
        out.write(MAGIC)
        old = new = len(MAGIC)
        data_ended = False
        for record in StreamReader(f, emit_chunks=True).records:
            length = len(_serialized(record))
            if isinstance(record, Footer):
                break
            if data_ended:
                summary.append(record)
            else:
                if isinstance(record, Chunk):
                    packed = compressor.compress(record.data)
                    keep = len(record.data) >= 1024 and len(record.data) >= 1.02 * len(packed)
                    record = dataclasses.replace(record, compression="zstd" if keep else "",
                                                 data=packed if keep else record.data, uncompressed_crc=0)
                elif isinstance(record, DataEnd):
                    record, data_ended = DataEnd(data_section_crc=0), True
                data = _serialized(record)
                out.write(data)
                moved[old] = (new, record)
                new += len(data)
            old += length
        summary_start = new
        groups: list[SummaryOffset] = []
        body = bytearray()
        for record in summary:
            if isinstance(record, SummaryOffset):
                continue  # rebuilt below
            data = _serialized(_moved(record, moved))
            if not groups or groups[-1].group_opcode != data[0]:
                groups.append(SummaryOffset(group_opcode=data[0], group_start=summary_start + len(body),
                                            group_length=0))
            body += data
            groups[-1].group_length = summary_start + len(body) - groups[-1].group_start
        summary_offset_start = summary_start + len(body)
        for group in groups:
            body += _serialized(group)
        body += _serialized(Footer(summary_start=summary_start, summary_offset_start=summary_offset_start,
                                   summary_crc=0))
        out.write(bytes(body))
        out.write(MAGIC)
    metadata = (source / "metadata.yaml").read_text()
    (folder / "metadata.yaml").write_text(metadata.replace(mcap_source.name, target.name))
    return target


def _serialized(record: Any) -> bytes:
    """An ``mcap`` package record as its bytes in a file."""
    from mcap.data_stream import RecordBuilder

    builder = RecordBuilder()
    record.write(builder)
    return builder.end()


def _moved(record: Any, moved: dict[int, tuple[int, Any]]) -> Any:
    """A summary record with its offsets into the data section moved to where :func:`write_zstd_fast` put
    those records; a chunk index also takes its chunk's new compression, size and length."""
    from mcap.records import AttachmentIndex, ChunkIndex, MetadataIndex

    if isinstance(record, ChunkIndex):
        start, chunk = moved[record.chunk_start_offset]
        return dataclasses.replace(record, chunk_start_offset=start, chunk_length=len(_serialized(chunk)),
                                   message_index_offsets={c: moved[o][0] for c, o in
                                                          record.message_index_offsets.items()},
                                   compression=chunk.compression, compressed_size=len(chunk.data))
    if isinstance(record, (AttachmentIndex, MetadataIndex)):
        return dataclasses.replace(record, offset=moved[record.offset][0])
    return record
