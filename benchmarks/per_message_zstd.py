"""rosbag2 recordings compressed per message (each message's data a zstd frame): fastbag against rosbags.

    PYTHONPATH=. python benchmarks/per_message_zstd.py [count]

Writes (once, cached in ``$FASTBAG_BENCH_DIR``) two recordings with rosbags'
rosbag2 writer, ``compression_mode: message`` with zstd: ``count`` (20,000 by
default) sensor_msgs/Imu on ``/imu`` (the bench's Imu messages), one in MCAP
storage and one in sqlite3.
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
from fastbag.tooling.synth import imu
from fastbag.tooling.synth_db3 import rosbag2_writer
from fastbag.tooling.synth_mcap import _imu_cdr


def write(folder: Path, storage: str, count: int) -> None:
    """The recording: ``count`` Imu (the bench's, serialized to CDR as rosbags does), rosbags' writer,
    zstd per message."""
    writer, store = rosbag2_writer(folder, storage, per_message=True)
    times = 1_700_000_000 * 10**9 + np.arange(count, dtype=np.int64) * 5_000_000
    cdr = _imu_cdr(np.frombuffer(b"".join(imu(times, np.random.default_rng(0))), np.uint8), count)
    with writer:
        connection = writer.add_connection("/imu", "sensor_msgs/msg/Imu", typestore=store)
        for k, stamp in enumerate(times.tolist()):
            writer.write(connection, stamp, cdr[k].tobytes())


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
