"""rosbag2 recordings compressed per message (each message's data a zstd frame): fastbag against rosbags.

    PYTHONPATH=. python benchmarks/per_message_zstd.py [count]

Writes (once, cached in ``$FASTBAG_BENCH_DIR``) two recordings with rosbags'
rosbag2 writer, ``compression_mode: message`` with zstd: ``count`` (20,000 by
default) sensor_msgs/Imu on ``/imu``, one in MCAP storage and one in sqlite3.
For each, checks that both read the same ``linear_acceleration.x``, then
times the whole topic as a user's script reads it: fastbag opens, reads
``/imu`` into arrays and closes; rosbags opens, deserializes every message
and closes. Best of 5, the two alternating; prints the load average.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import fastbag
from fastbag.tooling.bench import bench_dir


def write(folder: Path, storage: str, count: int) -> None:
    """The recording: ``count`` Imu, rosbags' writer, zstd per message."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    t = store.types
    rng = np.random.default_rng(0)
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    writer = Writer(folder, version=8, storage_plugin=plugin)
    writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
    vector = t["geometry_msgs/msg/Vector3"]
    with writer:
        connection = writer.add_connection("/imu", "sensor_msgs/msg/Imu", typestore=store)
        for k in range(count):
            stamp = 1_700_000_000 * 10**9 + k * 5 * 10**6
            header = t["std_msgs/msg/Header"](
                stamp=t["builtin_interfaces/msg/Time"](sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id="imu_link")
            message = t["sensor_msgs/msg/Imu"](
                header=header, orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                orientation_covariance=np.zeros(9),
                angular_velocity=vector(x=rng.random(), y=rng.random(), z=rng.random()),
                angular_velocity_covariance=np.zeros(9),
                linear_acceleration=vector(x=rng.random(), y=rng.random(), z=9.8),
                linear_acceleration_covariance=np.zeros(9))
            writer.write(connection, stamp, store.serialize_cdr(message, "sensor_msgs/msg/Imu"))


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    for storage in ("mcap", "sqlite3"):
        folder = bench_dir() / f"imu-{count}-per-message-{storage}.rosbag2"
        if not folder.exists():
            write(folder, storage, count)

        def ours() -> np.ndarray:
            with fastbag.open(folder) as bag:  # noqa: B023 - called in this iteration only
                return bag.read("/imu").linear_acceleration.x

        def theirs() -> np.ndarray:
            with Reader(folder) as reader:  # noqa: B023
                return np.array([store.deserialize_cdr(data, c.msgtype).linear_acceleration.x
                                 for c, _, data in reader.messages()])

        assert np.array_equal(ours(), theirs())
        best = [float("inf"), float("inf")]
        for _ in range(5):
            for side, fn in enumerate((ours, theirs)):
                started = time.perf_counter()
                fn()
                best[side] = min(best[side], time.perf_counter() - started)
        print(f"{storage:8} {count:,} Imu: fastbag {best[0] * 1e3:6.1f} ms, rosbags {best[1] * 1e3:6.1f} ms, "
              f"{best[1] / best[0]:5.1f}x (fresh open each, best of 5, alternated; load "
              f"{open('/proc/loadavg').read().split()[0]})")


if __name__ == "__main__":
    main()
