"""rosbag2 sqlite3 storage: what SQLite and Python's sqlite3 module cost per message, beside fastbag and rosbags.

    PYTHONPATH=. python benchmarks/rosbag2_sqlite.py

Uses the bench recording (generated once by ``fastbag bench``'s
``db3-imu-clouds`` with rosbags' rosbag2 writer, cached in
``$FASTBAG_BENCH_DIR``): 1 M sensor_msgs/Imu on ``/imu`` and 400
PointCloud2 on ``/points``. Checks that fastbag and rosbags yield the same
(topic, time, bytes), then times, each 3 times (min and max printed, with
the load average): opening; the ``/imu`` rows fetched by Python's sqlite3
module (``fetchall``, cursor iteration, ``group_concat`` in 4 MiB id ranges
as fastbag does); the payload fetch fastbag's read does (its chunk store, on
the worker threads); scanning the rows without their blobs; and copying the
same bytes once into fresh memory.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time

import numpy as np

import fastbag
from fastbag.tooling.bench import DB3_BAGS, _ensure_db3, bench_dir


def timed(fn, repeats: int = 3) -> tuple[float, float, object]:
    """(min, max) seconds over ``repeats`` runs, and the last result."""
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), max(times), out


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
    key = "db3-imu-clouds"
    path = _ensure_db3(bench_dir(), {key}, print)[key]
    db = path / f"{DB3_BAGS[key][0]}.db3"
    from rosbags.rosbag2 import Reader

    with fastbag.open(path) as bag, Reader(path) as reader:
        ours = digest((m.topic, m.time, m.data) for m in bag.messages(raw=True))
        theirs = digest((c.topic, t, d) for c, t, d in reader.messages())
    assert ours == theirs, (ours, theirs)
    print(f"{path.name}: {ours.split(':')[0]} messages, {db.stat().st_size / 1e6:.0f} MB; "
          "fastbag and rosbags yield the same bytes")

    def connect() -> sqlite3.Connection:
        con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
        con.execute("PRAGMA mmap_size = 1099511627776")
        return con

    con = connect()
    imu_id = con.execute("SELECT id FROM topics WHERE name = '/imu'").fetchone()[0]
    imu_count = con.execute("SELECT count(*) FROM messages WHERE topic_id = ?", (imu_id,)).fetchone()[0]
    query = "SELECT data FROM messages WHERE topic_id = ? ORDER BY timestamp"

    def fetchall() -> int:
        return sum(len(d) for (d,) in con.execute(query, (imu_id,)).fetchall())

    def iterate() -> int:
        return sum(len(d) for (d,) in con.execute(query, (imu_id,)))

    def group_concat() -> int:
        con.text_factory = bytes
        low, high = con.execute("SELECT min(id), max(id) FROM messages").fetchone()
        step = (4 << 20) // 324
        total = sum(len(con.execute("SELECT group_concat(data, '') FROM messages WHERE id BETWEEN ? AND ? AND "
                                    "topic_id = ?", (a, a + step - 1, imu_id)).fetchone()[0] or b"")
                    for a in range(low, high + 1, step))
        con.text_factory = str
        return total

    def scan() -> int:
        return con.execute("SELECT sum(length(data)) FROM messages WHERE topic_id = ?", (imu_id,)).fetchone()[0]

    opened = fastbag.open(path)
    imu_chunks = sorted(set(opened._index.chunk[opened._select("/imu", None, None)].tolist()))

    def fastbag_fetch() -> int:
        store = opened._container.chunk_store()  # a fresh store: nothing from a cache
        try:
            return sum(p.size for _, p in store.iter_chunks(imu_chunks))
        finally:
            store.close()

    def open_fastbag() -> int:
        with fastbag.open(path) as bag:
            return bag.message_count

    def open_rosbags() -> int:
        with Reader(path) as reader:
            return reader.message_count

    rows = []
    for name, fn, per in (("open (fastbag)", open_fastbag, None), ("open (rosbags rosbag2 Reader)", open_rosbags, None),
                          ("/imu rows: fetchall()", fetchall, imu_count),
                          ("/imu rows: cursor iteration", iterate, imu_count),
                          ("/imu rows: group_concat per 4 MiB id range", group_concat, imu_count),
                          ("/imu payloads: fastbag's chunk store (worker threads)", fastbag_fetch, imu_count),
                          ("/imu rows scanned, no blob (sum(length(data)))", scan, imu_count)):
        low, high, _ = timed(fn)
        rows.append((name, low, high, per))
    nbytes = scan()
    blob = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    low, high, _ = timed(lambda: blob.copy())
    rows.append((f"copying the same {nbytes / 1e6:.0f} MB once", low, high, imu_count))
    opened.close()
    print(f"load average {open('/proc/loadavg').read().split()[0]} on {os.cpu_count()} cores")
    for name, low, high, per in rows:
        unit = f"   {low / per * 1e9:6.0f} ns/message" if per else ""
        print(f"{name:<56} {low * 1e3:8.1f} ms (max {high * 1e3:8.1f}){unit}")


if __name__ == "__main__":
    main()
