"""rosbag2 sqlite3 storage: open and raw reads, fastbag beside rosbags, on a generated recording.

    PYTHONPATH=. python benchmarks/rosbag2_sqlite.py [--count 1000000] [--clouds 400]

Writes (once, cached in ``$FASTBAG_BENCH_DIR``, default ``~/.cache/fastbag/bench``)
a rosbag2 directory with rosbags' rosbag2 writer: ``count`` sensor_msgs/Imu
on ``/imu`` and ``clouds`` sensor_msgs/PointCloud2 of 10 000 points on
``/points``. Then, in one run, checks that both readers yield the same
(topic, time, bytes) and times: opening, the raw bytes of every message, the
whole ``/imu`` topic's payload fetch, and two floors: Python's sqlite3 module
fetching the same rows one by one, and copying the blobs' bytes once.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sqlite3
import time
from pathlib import Path

import numpy as np

import fastbag


def best(fn, repeats: int = 3) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def write_recording(path: Path, count: int, clouds: int) -> None:
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    Imu, Header, Time = (store.types[t] for t in ("sensor_msgs/msg/Imu", "std_msgs/msg/Header",
                                                   "builtin_interfaces/msg/Time"))
    Quaternion, Vector3 = store.types["geometry_msgs/msg/Quaternion"], store.types["geometry_msgs/msg/Vector3"]
    Cloud, Field = store.types["sensor_msgs/msg/PointCloud2"], store.types["sensor_msgs/msg/PointField"]
    rng = np.random.default_rng(0)
    values = rng.standard_normal((count, 10))
    start = 1_700_000_000 * 10**9
    with Writer(path, version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        imu = writer.add_connection("/imu", Imu.__msgtype__, typestore=store)
        points = writer.add_connection("/points", Cloud.__msgtype__, typestore=store)
        cloud_every = max(1, count // max(clouds, 1))
        for k in range(count):
            t = start + k * 2_500_000
            v = values[k]
            msg = Imu(Header(Time(t // 10**9, t % 10**9), "imu_link"), Quaternion(*v[:4]), np.zeros(9),
                      Vector3(*v[4:7]), np.zeros(9), Vector3(*v[7:10]), np.zeros(9))
            writer.write(imu, t, store.serialize_cdr(msg, Imu.__msgtype__))
            if clouds and k % cloud_every == 0 and k // cloud_every < clouds:
                data = rng.standard_normal(10_000 * 4).astype(np.float32).view(np.uint8)
                fields = [Field(n, 4 * i, 7, 1) for i, n in enumerate("xyzi")]
                cloud = Cloud(Header(Time(t // 10**9, t % 10**9), "lidar"), 1, 10_000, fields, False, 16,
                              160_000, data, True)
                writer.write(points, t, store.serialize_cdr(cloud, Cloud.__msgtype__))


def digest(messages) -> str:
    h = hashlib.sha1()
    n = 0
    for topic, t, data in messages:
        h.update(topic.encode())
        h.update(t.to_bytes(8, "little"))
        h.update(data)
        n += 1
    return f"{n}:{h.hexdigest()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--clouds", type=int, default=400)
    args = parser.parse_args()
    folder = Path(os.environ.get("FASTBAG_BENCH_DIR", Path.home() / ".cache" / "fastbag" / "bench"))
    path = folder / f"rosbag2-imu{args.count}-clouds{args.clouds}"
    if not (path / "metadata.yaml").exists():
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        write_recording(path, args.count, args.clouds)
        print(f"wrote {path} in {time.perf_counter() - t0:.1f} s")
    db = next(path.glob("*.db3"))
    size = db.stat().st_size
    from rosbags.rosbag2 import Reader

    # Same answer first: every message's topic, time and bytes.
    with fastbag.open(path) as bag, Reader(path) as reader:
        ours = digest((m.topic, m.time, m.data) for m in bag.messages(raw=True))
        theirs = digest((c.topic, t, d) for c, t, d in reader.messages())
    assert ours == theirs, (ours, theirs)
    n = int(ours.split(":")[0])
    print(f"{path.name}: {n} messages, {size / 1e6:.0f} MB; fastbag and rosbags yield the same bytes")

    def open_fastbag():
        with fastbag.open(path) as bag:
            return bag.message_count

    def open_rosbags():
        with Reader(path) as reader:
            return reader.message_count

    def raw_fastbag():
        with fastbag.open(path) as bag:
            return sum(len(m.data) for m in bag.messages(raw=True))

    def raw_rosbags():
        with Reader(path) as reader:
            return sum(len(d) for _, _, d in reader.messages())

    opened = fastbag.open(path)
    imu_chunks = sorted(set(opened._index.chunk[opened._select("/imu", None, None)].tolist()))

    def imu_payloads():
        # The payloads as read() gets them (one query per chunk, on the worker threads), without decoding:
        # a fresh store each time, so nothing comes from a cache.
        store = opened._container.chunk_store()
        try:
            return sum(p.size for _, p in store.iter_chunks(imu_chunks))
        finally:
            store.close()

    def imu_rows_python():
        con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
        try:
            cur = con.execute("SELECT m.data FROM messages m JOIN topics t ON m.topic_id = t.id "
                              "WHERE t.name = '/imu' ORDER BY m.id")
            total = 0
            while rows := cur.fetchmany(65536):
                total += sum(len(r[0]) for r in rows)
            return total
        finally:
            con.close()

    rows = []
    for name, fast, slow in (("open", open_fastbag, open_rosbags), ("raw bytes of every message", raw_fastbag,
                                                                    raw_rosbags)):
        tf, a = best(fast)
        ts, b = best(slow, 1 if "raw" in name else 3)
        assert a == b
        rows.append((name, tf, ts))
    t_payload, nbytes = best(imu_payloads)
    t_rows, nbytes2 = best(imu_rows_python)
    assert nbytes == nbytes2
    blob = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    t_copy, _ = best(lambda: blob.copy())
    imu_count = opened.topics["/imu"].message_count
    opened.close()
    print(f"load average {open('/proc/loadavg').read().split()[0]} on {os.cpu_count()} cores")
    for name, tf, ts in rows:
        print(f"{name:<30} fastbag {tf * 1e3:9.1f} ms ({tf / n * 1e9:5.0f} ns/message)   rosbags {ts * 1e3:9.1f} ms"
              f"   {ts / tf:6.1f}x")
    print(f"{'/imu payloads (one query per chunk)':<40} {t_payload * 1e3:9.1f} ms  "
          f"{t_payload / imu_count * 1e9:6.0f} ns/message  ({nbytes / 1e6:.0f} MB)")
    print(f"{'/imu rows one by one (sqlite3 module)':<40} {t_rows * 1e3:9.1f} ms  "
          f"{t_rows / imu_count * 1e9:6.0f} ns/message")
    print(f"{'copying the same bytes once':<40} {t_copy * 1e3:9.1f} ms  {t_copy / imu_count * 1e9:6.0f} ns/message")


if __name__ == "__main__":
    main()
