"""A benchmark recording as ROS2 writes it to sqlite3: a rosbag2 directory holding one ``.db3``.

Written by rosbags' rosbag2 writer (sqlite3 storage, metadata version 8):
``count`` sensor_msgs/Imu on ``/imu`` at 400 Hz and ``clouds``
sensor_msgs/PointCloud2 of :data:`CLOUD_POINTS` points (x, y, z, intensity
float32) on ``/points``, spread evenly among them, so a cloud read has to
skip Imu rows. The Imu messages are serialized to CDR with NumPy in one pass
(the same bytes rosbags' ``serialize_cdr`` gives, as the bench's check
proves by decoding with rosbags); the clouds by rosbags. Needs the test
extra (rosbags): benchmark tooling only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .synth import imu
from .synth_mcap import _imu_cdr

CLOUD_POINTS = 10_000
#: Receive-time step between Imu messages (400 Hz).
IMU_STEP_NS = 2_500_000


def rosbag2_writer(folder: Path, storage: str = "sqlite3", *, per_message: bool = False) -> tuple[Any, Any]:
    """rosbags' rosbag2 writer of a new recording ``folder`` (metadata version 8, ``storage`` "sqlite3" or
    "mcap"; each message's data a zstd frame where ``per_message``, as ``--compression-mode message`` makes
    it), and the ROS2 Humble typestore its connections take. Not yet opened: use it in a ``with``."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    writer = Writer(folder, version=8, storage_plugin=plugin)
    if per_message:
        writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
    return writer, get_typestore(Stores.ROS2_HUMBLE)


def write_rosbag2_db3(folder: Path, count: int = 1_000_000, clouds: int = 400, seed: int = 0) -> Path:
    """Write the recording into the new directory ``folder``; returns the ``.db3`` path."""
    writer, store = rosbag2_writer(folder)
    cloud_type, field_type, header_type, time_type = (store.types[t] for t in (
        "sensor_msgs/msg/PointCloud2", "sensor_msgs/msg/PointField", "std_msgs/msg/Header",
        "builtin_interfaces/msg/Time"))
    rng = np.random.default_rng(seed)
    times = 1_700_000_000 * 10**9 + np.arange(count, dtype=np.int64) * IMU_STEP_NS
    cdr = _imu_cdr(np.frombuffer(b"".join(imu(times, rng)), np.uint8), count)
    every = max(1, count // max(clouds, 1))
    fields = [field_type(name, 4 * k, 7, 1)  # 7: FLOAT32
              for k, name in enumerate("xyzi")]
    with writer:
        imu_conn = writer.add_connection("/imu", "sensor_msgs/msg/Imu", typestore=store)
        cloud_conn = writer.add_connection("/points", "sensor_msgs/msg/PointCloud2", typestore=store)
        written = 0
        for k, t in enumerate(times.tolist()):
            writer.write(imu_conn, t, cdr[k].tobytes())
            if written < clouds and k % every == 0:
                points = rng.standard_normal(CLOUD_POINTS * 4).astype(np.float32).view(np.uint8)
                cloud = cloud_type(header_type(time_type(t // 10**9, t % 10**9), "lidar"), 1, CLOUD_POINTS,
                                   fields, False, 16, 16 * CLOUD_POINTS, points, True)
                writer.write(cloud_conn, t + 1, bytes(store.serialize_cdr(cloud, cloud_type.__msgtype__)))
                written += 1
    return folder / f"{folder.name}.db3"
