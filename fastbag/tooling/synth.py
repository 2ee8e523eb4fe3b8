"""Synthetic sensor data in real ROS1 message types, for the demo, tests and benchmarks.

Messages are serialized with NumPy structured arrays (one vectorized pass for
fixed-size types), deterministic for a given seed, at realistic rates: Imu
200 Hz, Odometry 50 Hz, tf 100 Hz, LaserScan 40 Hz, PointCloud2, Image and a
Livox CustomMsg at 10 Hz (see DEMO_STREAMS and MIXED_STREAMS).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ..ros1.writer import Writer

_SEP = "=" * 80 + "\n"
_HEADER = "MSG: std_msgs/Header\nuint32 seq\ntime stamp\nstring frame_id\n"
_VECTOR3 = "MSG: geometry_msgs/Vector3\nfloat64 x\nfloat64 y\nfloat64 z\n"
_QUATERNION = "MSG: geometry_msgs/Quaternion\nfloat64 x\nfloat64 y\nfloat64 z\nfloat64 w\n"


def _definition(main: str, *deps: str) -> str:
    return main + "".join(_SEP + d for d in deps)


@dataclass(frozen=True)
class MsgType:
    """A message type as a bag connection records it."""

    name: str
    md5sum: str
    definition: str


IMU = MsgType("sensor_msgs/Imu", "6a62c6daae103f4ff57a132d6f95cec2", _definition(
    "Header header\ngeometry_msgs/Quaternion orientation\nfloat64[9] orientation_covariance\n"
    "geometry_msgs/Vector3 angular_velocity\nfloat64[9] angular_velocity_covariance\n"
    "geometry_msgs/Vector3 linear_acceleration\nfloat64[9] linear_acceleration_covariance\n",
    _HEADER, _QUATERNION, _VECTOR3))
POINTCLOUD2 = MsgType("sensor_msgs/PointCloud2", "1158d486dd51d683ce2f1be655c3c181", _definition(
    "Header header\nuint32 height\nuint32 width\nPointField[] fields\nbool is_bigendian\nuint32 point_step\n"
    "uint32 row_step\nuint8[] data\nbool is_dense\n",
    _HEADER, "MSG: sensor_msgs/PointField\nuint8 INT8    = 1\nuint8 UINT8   = 2\nuint8 INT16   = 3\n"
    "uint8 UINT16  = 4\nuint8 INT32   = 5\nuint8 UINT32  = 6\nuint8 FLOAT32 = 7\nuint8 FLOAT64 = 8\n"
    "string name\nuint32 offset\nuint8  datatype\nuint32 count\n"))
IMAGE = MsgType("sensor_msgs/Image", "060021388200f6f0f447d0fcd9c64743", _definition(
    "Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\nuint32 step\n"
    "uint8[] data\n", _HEADER))
TFMESSAGE = MsgType("tf2_msgs/TFMessage", "94810edda583a504dfda3829e70d7eec", _definition(
    "geometry_msgs/TransformStamped[] transforms\n",
    "MSG: geometry_msgs/TransformStamped\nHeader header\nstring child_frame_id\nTransform transform\n",
    _HEADER, "MSG: geometry_msgs/Transform\nVector3 translation\nQuaternion rotation\n", _VECTOR3, _QUATERNION))

LASERSCAN = MsgType("sensor_msgs/LaserScan", "90c7ef2dc6895d81024acba2ac42f369", _definition(
    "Header header\nfloat32 angle_min\nfloat32 angle_max\nfloat32 angle_increment\nfloat32 time_increment\n"
    "float32 scan_time\nfloat32 range_min\nfloat32 range_max\nfloat32[] ranges\nfloat32[] intensities\n", _HEADER))
_POINT = "MSG: geometry_msgs/Point\nfloat64 x\nfloat64 y\nfloat64 z\n"
ODOMETRY = MsgType("nav_msgs/Odometry", "cd5e73d190d741a2f92e81eda573aca7", _definition(
    "Header header\nstring child_frame_id\ngeometry_msgs/PoseWithCovariance pose\n"
    "geometry_msgs/TwistWithCovariance twist\n", _HEADER,
    "MSG: geometry_msgs/PoseWithCovariance\nPose pose\nfloat64[36] covariance\n",
    "MSG: geometry_msgs/Pose\nPoint position\nQuaternion orientation\n", _POINT, _QUATERNION,
    "MSG: geometry_msgs/TwistWithCovariance\nTwist twist\nfloat64[36] covariance\n",
    "MSG: geometry_msgs/Twist\nVector3 linear\nVector3 angular\n", _VECTOR3))
LIVOX_CUSTOM = MsgType("livox_ros_driver/CustomMsg", "e4d6829bdfe657cb6c21a746c86b21a6", _definition(
    "Header header\nuint64 timebase\nuint32 point_num\nuint8 lidar_id\nuint8[3] rsvd\nCustomPoint[] points\n",
    _HEADER, "MSG: livox_ros_driver/CustomPoint\nuint32 offset_time\nfloat32 x\nfloat32 y\nfloat32 z\n"
    "uint8 reflectivity\nuint8 tag\nuint8 line\n"))
LIVOX_POINT = np.dtype([("offset_time", "<u4"), ("x", "<f4"), ("y", "<f4"), ("z", "<f4"),
                        ("reflectivity", "u1"), ("tag", "u1"), ("line", "u1")])  # packed: 19 bytes


def _string_field(name: str, text: str) -> list[tuple[str, object]]:
    """Dtype fields of a ROS1 string of fixed content: u32 length, then the bytes."""
    return [(f"{name}_len", "<u4"), (name, f"S{len(text.encode())}" if text else "V0")]


def _header_dtype(frame_id: str, prefix: str = "") -> list[tuple[str, object]]:
    return [(f"{prefix}seq", "<u4"), (f"{prefix}secs", "<u4"), (f"{prefix}nsecs", "<u4"),
            *_string_field(f"{prefix}frame_id", frame_id)]


def _fill_header(arr: np.ndarray, times: np.ndarray, frame_id: str, prefix: str = "") -> None:
    arr[f"{prefix}seq"] = np.arange(arr.shape[0])
    arr[f"{prefix}secs"], arr[f"{prefix}nsecs"] = np.divmod(times, 1_000_000_000)
    arr[f"{prefix}frame_id_len"] = len(frame_id.encode())
    if frame_id:
        arr[f"{prefix}frame_id"] = frame_id.encode()


def _split(arr: np.ndarray) -> list[bytes]:
    """One serialized message per row of a packed structured array."""
    raw = arr.tobytes()
    step = arr.dtype.itemsize
    return [raw[i:i + step] for i in range(0, len(raw), step)]


def imu(times: np.ndarray, rng: np.random.Generator, frame_id: str = "imu_link") -> list[bytes]:
    """sensor_msgs/Imu messages stamped ``times`` (int ns): a slowly turning, shaking IMU."""
    dtype = np.dtype(_header_dtype(frame_id) + [
        ("orientation", "<f8", 4), ("orientation_covariance", "<f8", 9), ("angular_velocity", "<f8", 3),
        ("angular_velocity_covariance", "<f8", 9), ("linear_acceleration", "<f8", 3),
        ("linear_acceleration_covariance", "<f8", 9)])
    n = times.size
    arr = np.zeros(n, dtype=dtype)
    _fill_header(arr, times, frame_id)
    yaw = np.cumsum(rng.normal(0, 1e-3, n))
    arr["orientation"] = np.stack([np.zeros(n), np.zeros(n), np.sin(yaw / 2), np.cos(yaw / 2)], axis=1)
    arr["angular_velocity"] = rng.normal(0, 0.02, (n, 3))
    arr["linear_acceleration"] = rng.normal(0, 0.1, (n, 3)) + [0.0, 0.0, 9.81]
    for name in ("orientation_covariance", "angular_velocity_covariance", "linear_acceleration_covariance"):
        arr[name] = np.eye(3).ravel() * 1e-4
    return _split(arr)


def odometry(times: np.ndarray, rng: np.random.Generator, frame_id: str = "odom",
             child_frame_id: str = "base_link") -> list[bytes]:
    """nav_msgs/Odometry messages of a robot driving a slow curve."""
    dtype = np.dtype(_header_dtype(frame_id) + _string_field("child_frame_id", child_frame_id) + [
        ("position", "<f8", 3), ("orientation", "<f8", 4), ("pose_covariance", "<f8", 36),
        ("linear", "<f8", 3), ("angular", "<f8", 3), ("twist_covariance", "<f8", 36)])
    n = times.size
    arr = np.zeros(n, dtype=dtype)
    _fill_header(arr, times, frame_id)
    arr["child_frame_id_len"] = len(child_frame_id.encode())
    arr["child_frame_id"] = child_frame_id.encode()
    heading = np.cumsum(np.full(n, 0.002) + rng.normal(0, 1e-4, n))
    arr["position"] = np.stack([np.cumsum(np.cos(heading)) * 0.02, np.cumsum(np.sin(heading)) * 0.02,
                                np.zeros(n)], axis=1)
    arr["orientation"] = np.stack([np.zeros(n), np.zeros(n), np.sin(heading / 2), np.cos(heading / 2)], axis=1)
    arr["linear"] = np.stack([np.full(n, 1.0) + rng.normal(0, 0.01, n), np.zeros(n), np.zeros(n)], axis=1)
    arr["angular"][:, 2] = 0.1
    arr["pose_covariance"] = np.eye(6).ravel() * 1e-3
    arr["twist_covariance"] = np.eye(6).ravel() * 1e-3
    return _split(arr)


def laserscan(times: np.ndarray, rng: np.random.Generator, beams: int = 1080,
              frame_id: str = "laser") -> list[bytes]:
    """sensor_msgs/LaserScan messages of a 270-degree scanner with ``beams`` ranges and intensities."""
    dtype = np.dtype(_header_dtype(frame_id) + [
        ("angles", "<f4", 7), ("ranges_len", "<u4"), ("ranges", "<f4", beams),
        ("intensities_len", "<u4"), ("intensities", "<f4", beams)])
    n = times.size
    arr = np.zeros(n, dtype=dtype)
    _fill_header(arr, times, frame_id)
    arr["angles"] = [-2.356194, 2.356194, 4.712389 / beams, 0.025 / beams, 0.025, 0.05, 30.0]
    arr["ranges_len"] = arr["intensities_len"] = beams
    walls = 4 + 2 * np.abs(np.sin(np.linspace(0, 3 * np.pi, beams)))
    arr["ranges"] = walls + rng.normal(0, 0.01, (n, beams))
    arr["intensities"] = rng.uniform(100, 2000, (n, beams))
    return _split(arr)


def tf(times: np.ndarray, rng: np.random.Generator,
       frames: tuple[tuple[str, str], ...] = (("odom", "base_link"), ("base_link", "lidar"))) -> list[bytes]:
    """tf2_msgs/TFMessage messages, each with one transform per (parent, child) pair."""
    fields: list[tuple[str, object]] = [("count", "<u4")]
    for k, (parent, child) in enumerate(frames):
        fields += _header_dtype(parent, f"t{k}_") + _string_field(f"t{k}_child", child)
        fields += [(f"t{k}_translation", "<f8", 3), (f"t{k}_rotation", "<f8", 4)]
    arr = np.zeros(times.size, dtype=np.dtype(fields))
    arr["count"] = len(frames)
    for k, (parent, child) in enumerate(frames):
        _fill_header(arr, times, parent, f"t{k}_")
        arr[f"t{k}_child_len"] = len(child.encode())
        arr[f"t{k}_child"] = child.encode()
        arr[f"t{k}_translation"] = np.cumsum(rng.normal(0, 0.01, (times.size, 3)), axis=0)
        arr[f"t{k}_rotation"] = [0.0, 0.0, 0.0, 1.0]
    return _split(arr)


def _header_bytes(seq: int, time: int, frame_id: str) -> bytes:
    frame = frame_id.encode()
    sec, nsec = divmod(int(time), 1_000_000_000)
    return struct.pack("<III", seq, sec, nsec) + struct.pack("<I", len(frame)) + frame


# PointField datatypes (sensor_msgs/PointField constants)
FLOAT32, UINT16 = 7, 4
LIDAR_FIELDS = (("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 12, FLOAT32),
                ("ring", 16, UINT16), ("time", 18, FLOAT32))
LIDAR_POINT = np.dtype({"names": ["x", "y", "z", "intensity", "ring", "time"],
                        "formats": ["<f4", "<f4", "<f4", "<f4", "<u2", "<f4"],
                        "offsets": [0, 4, 8, 12, 16, 18], "itemsize": 22})


def pointcloud2(times: np.ndarray, rng: np.random.Generator, points: int = 130_000,
                frame_id: str = "lidar") -> Iterator[bytes]:
    """sensor_msgs/PointCloud2 messages of a 32-ring spinning lidar (x, y, z, intensity, ring, time)."""
    rings = 32
    width = points // rings
    fields = b"".join(struct.pack("<I", len(name)) + name.encode() + struct.pack("<IBI", off, dt, 1)
                      for name, off, dt in LIDAR_FIELDS)
    for seq, time in enumerate(times.tolist()):
        cloud = np.zeros(rings * width, dtype=LIDAR_POINT)
        azimuth = np.tile(np.linspace(0, 2 * np.pi, width, endpoint=False), rings)
        ring = np.repeat(np.arange(rings, dtype=np.uint16), width)
        distance = 10 + rng.normal(0, 0.05, azimuth.size)
        elevation = np.deg2rad(ring.astype(np.float64) - 15)
        cloud["x"] = distance * np.cos(elevation) * np.cos(azimuth)
        cloud["y"] = distance * np.cos(elevation) * np.sin(azimuth)
        cloud["z"] = distance * np.sin(elevation)
        cloud["intensity"] = rng.uniform(0, 255, azimuth.size)
        cloud["ring"] = ring
        cloud["time"] = azimuth / (2 * np.pi) * 0.1
        data = cloud.tobytes()
        yield b"".join([
            _header_bytes(seq, time, frame_id), struct.pack("<II", rings, width),
            struct.pack("<I", len(LIDAR_FIELDS)), fields,
            struct.pack("<BII", 0, LIDAR_POINT.itemsize, LIDAR_POINT.itemsize * width),
            struct.pack("<I", len(data)), data, b"\x01"])


def image(times: np.ndarray, rng: np.random.Generator, height: int = 480, width: int = 640,
          frame_id: str = "camera") -> Iterator[bytes]:
    """sensor_msgs/Image messages, rgb8, a moving gradient with noise."""
    base = (np.add.outer(np.arange(height), np.arange(width)) % 256).astype(np.uint8)
    for seq, time in enumerate(times.tolist()):
        pixels = np.stack([base, np.roll(base, seq, axis=1), 255 - base], axis=-1)
        pixels ^= rng.integers(0, 8, pixels.shape, dtype=np.uint8)
        data = pixels.tobytes()
        yield b"".join([
            _header_bytes(seq, time, frame_id), struct.pack("<II", height, width),
            struct.pack("<I", 4), b"rgb8", struct.pack("<BI", 0, width * 3), struct.pack("<I", len(data)), data])


def livox(times: np.ndarray, rng: np.random.Generator, points: int = 24_000,
          frame_id: str = "livox_frame") -> Iterator[bytes]:
    """livox_ros_driver/CustomMsg messages: ``points`` packed 19-byte points of a rosette scan."""
    for seq, time in enumerate(times.tolist()):
        cloud = np.zeros(points, dtype=LIVOX_POINT)
        phase = np.linspace(0, 40 * np.pi, points) + seq
        radius = 5 + 20 * np.abs(np.sin(phase / 7))
        cloud["offset_time"] = np.arange(points, dtype=np.uint32) * (100_000_000 // points)
        cloud["x"] = radius
        cloud["y"] = radius * np.sin(phase) * 0.3
        cloud["z"] = radius * np.cos(phase) * 0.2
        cloud["reflectivity"] = rng.integers(0, 256, points)
        cloud["line"] = np.arange(points) % 6
        yield b"".join([
            _header_bytes(seq, time, frame_id), struct.pack("<QIB", time, points, 0), b"\0\0\0",
            struct.pack("<I", points), cloud.tobytes()])


@dataclass(frozen=True)
class Stream:
    """A topic of synthetic messages: its type, rate (Hz) and generator."""

    topic: str
    msgtype: MsgType
    rate: float
    generate: Callable[..., Iterable[bytes]]
    options: tuple[tuple[str, object], ...] = ()


#: What ``fastbag demo`` records: Imu 200 Hz, tf 100 Hz, a 30k-point cloud and an image at 10 Hz.
DEMO_STREAMS = (
    Stream("/imu", IMU, 200, imu), Stream("/tf", TFMESSAGE, 100, tf),
    Stream("/points", POINTCLOUD2, 10, pointcloud2, (("points", 30_000),)),
    Stream("/camera/image_raw", IMAGE, 10, image))

#: A realistic mixed recording (the benchmark bag): ~43 MB per second of recording.
MIXED_STREAMS = (
    Stream("/imu", IMU, 200, imu), Stream("/odom", ODOMETRY, 50, odometry), Stream("/tf", TFMESSAGE, 100, tf),
    Stream("/points", POINTCLOUD2, 10, pointcloud2, (("points", 130_000),)),
    Stream("/camera/image_raw", IMAGE, 10, image), Stream("/scan", LASERSCAN, 40, laserscan),
    Stream("/livox/lidar", LIVOX_CUSTOM, 10, livox, (("points", 24_000),)))


def write_bag(path: str | os.PathLike[str], streams: Iterable[Stream] = DEMO_STREAMS, *, seconds: float = 3.0,
              compression: str = "none", seed: int = 0, start: int = 1_700_000_000 * 10**9,
              chunk_size: int = 768 * 1024, **options: object) -> None:
    """Write a bag of synthetic streams, messages in receive-time order as a recorder writes them.

    ``options`` override a generator option of every stream that has it
    (e.g. ``points=2000`` for small clouds in tests).
    """
    rng = np.random.default_rng(seed)
    queue = []
    with Writer(path, compression=compression, chunk_size=chunk_size) as writer:
        for stream in streams:
            n = int(seconds * stream.rate)
            jitter = rng.integers(0, 200_000, n)  # receive-time jitter, up to 0.2 ms
            times = start + (np.arange(n) * (1e9 / stream.rate)).astype(np.int64) + jitter
            kwargs = {k: options.get(k, v) for k, v in stream.options}
            conn = writer.add_connection(stream.topic, stream.msgtype.name, stream.msgtype.definition,
                                         stream.msgtype.md5sum, callerid="/fastbag_synth")
            data = iter(stream.generate(times, rng, **kwargs))
            queue += [(t, conn.id, conn, data) for t in times.tolist()]
        # Generators advance in step with the sorted queue, so large messages are made one at a time.
        for time, _, conn, data in sorted(queue, key=lambda item: (item[0], item[1])):
            writer.write(conn, time, next(data))


def write_demo_bag(path: str | os.PathLike[str], *, seconds: float = 3.0, compression: str = "none",
                   seed: int = 0, points: int = 30_000) -> None:
    """The ``fastbag demo`` bag: Imu, tf, PointCloud2 and Image streams (see DEMO_STREAMS)."""
    write_bag(path, DEMO_STREAMS, seconds=seconds, compression=compression, seed=seed, points=points)
