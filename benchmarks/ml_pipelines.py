"""Speed of the ML-pipeline features against what a rosbags user writes, side by side in one run.

    FASTBAG_BENCH_DIR=/tmp/fbbench40 python benchmarks/ml_pipelines.py [pandas parquet dataset dask]

- pandas: 1 M Imu messages into a flat pandas DataFrame (``read(...).to_pandas()``) against rosbags
  deserialize + the same columns + ``pandas.DataFrame`` (the frames are checked equal);
- parquet: every topic of the 1.7 GB mixed bag to Parquet files (``fastbag.export``) against rosbags
  deserialize + ``pyarrow.Table.from_pylist`` + the same writer settings (lz4, no dictionaries, byte
  arrays as binary), row counts checked;
- dataset: samples/s of a SyncedDataset (PointCloud2 + Image + 0.1 s of Imu) through a torch DataLoader
  with 2 persistent workers against the same dataset built on rosbags (index from its message iteration,
  its reader opened once per worker, samples by time-window reads, the same NumPy out), both after a
  warm-up epoch, 3 epochs each; beside them the loader's floor (ready-made samples through the same
  loader), fastbag's loader without worker processes (``num_workers=0``) and the readers alone (one
  process, no loader);
- dask: ``fastbag.dask.read_topic(8 bags, "/imu").mean().compute()`` on a LocalCluster of 2 worker
  processes against 1.

fastbag runs best of 3 (warm caches); rosbags once (its runs take tens of seconds to minutes), but for the
dataset, where both run 3 epochs.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import fastbag
from fastbag.tooling import bench

RESULTS: list[tuple[str, float, float | None, str]] = []


def best(fn, repeats=3):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def once(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def report(job, ours, theirs, note=""):
    RESULTS.append((job, ours, theirs, note))
    ratio = f"{theirs / ours:.1f}x" if theirs else "-"
    print(f"{job:<10} fastbag {ours:9.3f} s   other {theirs if theirs is None else round(theirs, 3)!s:>9} s   "
          f"{ratio:>8}  {note}", flush=True)


def rosbags_reader(path):
    from rosbags.highlevel import AnyReader

    reader = AnyReader([Path(path)])
    reader.open()
    return reader


# -- pandas ------------------------------------------------------------------------------------------

def imu_frame_rosbags(path):
    import pandas as pd

    reader = rosbags_reader(path)
    columns: dict[str, list] = {}
    times = []
    names = ["header.seq", "header.stamp.secs", "header.stamp.nsecs", "header.frame_id"]
    for name in ("orientation", "orientation_covariance", "angular_velocity", "angular_velocity_covariance",
                 "linear_acceleration", "linear_acceleration_covariance"):
        if name.endswith("covariance"):
            names += [f"{name}[{i}]" for i in range(9)]
        else:
            names += [f"{name}.{a}" for a in ("xyzw" if name == "orientation" else "xyz")]
    lists = [columns.setdefault(n, []) for n in names]
    for connection, t, raw in reader.messages([c for c in reader.connections if c.topic == "/imu"]):
        m = reader.deserialize(raw, connection.msgtype)
        times.append(t)
        values = [m.header.seq if hasattr(m.header, "seq") else 0, m.header.stamp.sec, m.header.stamp.nanosec,
                  m.header.frame_id]
        o = m.orientation
        values += [o.x, o.y, o.z, o.w, *m.orientation_covariance]
        v = m.angular_velocity
        values += [v.x, v.y, v.z, *m.angular_velocity_covariance]
        a = m.linear_acceleration
        values += [a.x, a.y, a.z, *m.linear_acceleration_covariance]
        for column, value in zip(lists, values):
            column.append(value)
    reader.close()
    return pd.DataFrame(columns, index=pd.DatetimeIndex(np.array(times, dtype="datetime64[ns]"), name="time"))


def job_pandas(paths):
    path = paths["imu-1m"]

    def ours():
        with fastbag.open(path) as bag:
            return bag.read("/imu").to_pandas()

    t_ours, frame = best(ours)
    t_theirs, theirs = once(lambda: imu_frame_rosbags(path))
    for column in theirs.columns:
        if column == "header.frame_id":
            assert frame[column].tolist() == theirs[column].tolist()
        elif column != "header.seq":  # rosbags drops ROS1's Header.seq
            assert np.array_equal(frame[column].to_numpy(), theirs[column].to_numpy().astype(frame[column].dtype)), \
                column
    report("pandas", t_ours, t_theirs, f"{len(frame):,} Imu rows x {frame.shape[1]} columns, frames equal")


# -- parquet -----------------------------------------------------------------------------------------

def plain_value(value):
    """A rosbags message field as from_pylist takes it: dicts, lists, ndarrays; byte arrays as bytes."""
    if isinstance(value, np.ndarray):
        return value.tobytes() if value.dtype in (np.uint8, np.int8) else value
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: plain_value(getattr(value, k)) for k in value.__dataclass_fields__ if k != "__msgtype__"}
    return value


def export_rosbags(path, out):
    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = rosbags_reader(path)
    counts = {}
    for topic in sorted({c.topic for c in reader.connections}):
        rows, times = [], []
        for connection, t, raw in reader.messages([c for c in reader.connections if c.topic == topic]):
            rows.append(plain_value(reader.deserialize(raw, connection.msgtype)))
            times.append(t)
        table = pa.Table.from_pylist(rows)
        table = table.add_column(0, "time", pa.array(np.array(times, dtype=np.int64), type=pa.timestamp("ns")))
        pq.write_table(table, Path(out) / (topic.strip("/").replace("/", ".") + ".parquet"), compression="lz4",
                       use_dictionary=False)
        counts[topic] = table.num_rows
    reader.close()
    return counts


def job_parquet(paths):
    import pyarrow.parquet as pq

    path = paths["mixed-none"]
    folder = Path(tempfile.mkdtemp(prefix="fastbag-parquet-"))
    try:
        def ours():
            shutil.rmtree(folder / "ours", ignore_errors=True)
            return fastbag.export(path, folder / "ours", "parquet")

        t_ours, result = best(ours)
        (folder / "theirs").mkdir()
        t_theirs, counts = once(lambda: export_rosbags(path, folder / "theirs"))
        ours_counts = {t: pq.ParquetFile(f).metadata.num_rows for t, f in result.files.items()}
        assert ours_counts == counts, (ours_counts, counts)
        size = sum(os.path.getsize(f) for f in result.files.values())
        report("parquet", t_ours, t_theirs, f"{os.path.getsize(path) / 1e9:.2f} GB bag, {len(counts)} topics, "
               f"{size / 1e9:.2f} GB of Parquet, row counts equal")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- dataset -----------------------------------------------------------------------------------------

TOPICS = {"cloud": "/points", "image": "/camera/image_raw", "imu": "/imu"}


class RosbagsSynced:
    """The SyncedDataset pipeline on rosbags: times from iterating the topics, samples by window reads."""

    def __init__(self, path, tolerance=0.05, window=0.1):
        self.path = path
        self.window = int(window * 1e9)
        reader = rosbags_reader(path)
        times = {}
        for name, topic in TOPICS.items():
            conns = [c for c in reader.connections if c.topic == topic]
            times[name] = np.array([t for _, t, _ in reader.messages(conns)], dtype=np.int64)
        reader.close()
        anchor = times["cloud"]
        k = np.clip(np.searchsorted(times["image"], anchor), 1, times["image"].size - 1)
        k = np.where(np.abs(times["image"][k - 1] - anchor) <= np.abs(times["image"][k] - anchor), k - 1, k)
        keep = np.abs(times["image"][k] - anchor) <= int(tolerance * 1e9)
        self.anchor, self.image = anchor[keep], times["image"][k[keep]]
        self._reader, self._pid = None, os.getpid()

    def __len__(self):
        return self.anchor.size

    def _one(self, topic, start, stop):
        reader = self._reader
        conns = [c for c in reader.connections if c.topic == topic]
        return [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(conns, start=start, stop=stop)]

    def __getitem__(self, i):
        if self._reader is None or self._pid != os.getpid():  # a forked worker must not share the parent's file
            self._reader, self._pid = rosbags_reader(self.path), os.getpid()
        t = int(self.anchor[i])
        cloud = self._one("/points", t, t + 1)[0]
        names = [f.name for f in cloud.fields]
        dtype = np.dtype({"names": names, "offsets": [f.offset for f in cloud.fields],
                          "formats": [{7: "<f4", 4: "<u2"}[f.datatype] for f in cloud.fields],
                          "itemsize": cloud.point_step})
        points = np.frombuffer(cloud.data, dtype=dtype).reshape(cloud.height, cloud.width)
        img = self._one("/camera/image_raw", int(self.image[i]), int(self.image[i]) + 1)[0]
        pixels = img.data.reshape(img.height, img.width, 3)
        imus = self._one("/imu", t - self.window + 1, t + 1)
        rows = np.array([(m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z,
                          m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z) for m in imus])
        return {"time": t, "cloud": points, "image": pixels, "imu": rows}

    def __getstate__(self):
        return {**self.__dict__, "_reader": None}


def job_dataset(paths):
    import torch

    path = paths["mixed-none"]
    ds = fastbag.SyncedDataset(path, TOPICS, anchor="cloud", windows={"imu": 0.1})
    theirs = RosbagsSynced(path)
    assert len(ds) == len(theirs), (len(ds), len(theirs))
    sample, other = ds[5], theirs[5]
    assert np.array_equal(sample["image"], other["image"]) and np.array_equal(sample["cloud"], other["cloud"])
    assert np.array_equal(sample["imu"]["linear_acceleration"]["x"], other["imu"][:, 0])

    # Steady state, the same for both: persistent workers (each opens its reader once), one warm-up
    # epoch (worker start, bag open, Numba's cache), then 3 timed epochs each.
    def epochs(dataset, workers=2):
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=workers, collate_fn=fastbag.collate,
                                             persistent_workers=workers > 0)
        def count():
            return sum(len(batch["time"]) for batch in loader)

        count()
        runs = [once(count) for _ in range(3)]
        return sorted(t for t, _ in runs), runs[0][1]

    # The floor: the same 8 samples, already made (plain arrays), through the same loader and collate.
    # No reader can deliver faster than the loader moves its bytes (~3.8 MB a sample) between processes.
    floor = ReadySamples([{k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in ds[i].items()}
                          for i in range(8)], len(ds))
    # Both batch with fastbag.collate: the same tensors cross from the workers on both sides.
    ours, n = epochs(ds)
    theirs_t, m = epochs(theirs)
    floor_t, _ = epochs(floor)
    assert n == m == len(ds)
    def spread(times):
        return f"{n / times[-1]:,.0f}-{n / times[0]:,.0f}"

    report("dataset", ours[0], theirs_t[0], f"{n} samples (130k-point cloud + 640x480 image + 0.1 s Imu), "
           f"DataLoader 2 persistent workers, batch 8, best of 3 epochs after a warm-up: samples/s fastbag "
           f"{spread(ours)}, rosbags {spread(theirs_t)}, ready-made samples (the loader's floor) {spread(floor_t)}")
    # The same loader without worker processes: fastbag's samples cost less to read than to move between
    # processes, so the main process reading them itself is faster (README: SyncedDataset).
    inline, _ = epochs(ds, workers=0)
    report("dataset-0", inline[0], theirs_t[0], f"fastbag's DataLoader with num_workers=0 (samples/s "
           f"{spread(inline)}) against rosbags' with 2 workers, as above")
    # What the readers alone cost, one process, no loader: the part a reader controls.
    t_ours, _ = best(lambda: [ds[i] for i in range(len(ds))])
    t_theirs, _ = best(lambda: [theirs[i] for i in range(len(ds))])
    report("sample", t_ours, t_theirs, f"{n} samples read in one process (no loader, no collate): "
           f"{t_ours / n * 1e3:.2f} vs {t_theirs / n * 1e3:.2f} ms a sample")


class ReadySamples:
    """A dataset handing out samples made beforehand: what the DataLoader alone costs."""

    def __init__(self, samples, size):
        self.samples, self.size = samples, size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        return self.samples[i % len(self.samples)]


# -- dask ------------------------------------------------------------------------------------------------

def job_dask(paths):
    import distributed

    folder = Path(os.environ.get("FASTBAG_FLEET_DIR", Path(tempfile.gettempdir()) / "fastbag-fleet-8x250k"))
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(8):
        bag = folder / f"run{k}.bag"
        if not bag.exists():
            bench.imu_bag(bag.with_suffix(".partial"), count=250_000, seed=k)
            bag.with_suffix(".partial").rename(bag)

    def mean():
        ddf = fastbag.dask.read_topic(str(folder / "run*.bag"), "/imu")
        return ddf[[c for c in ddf.columns if c.startswith(("linear", "angular"))]].mean().compute()

    # Each cluster is started (not timed) and warmed by one run (the workers load Numba's cache), then
    # timed 3 times; a task decodes on one thread (read_topic's default), so 1 worker uses one core.
    # Beside it, on the same clusters, two controls without fastbag: what 2 processes gain over 1 on this
    # machine for 8 tasks of pure Python and for 8 tasks writing 80 MB of fresh memory (decoding is the latter).
    timings, results, controls = {}, {}, {}
    for workers in (1, 2):
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                      dashboard_address=None, silence_logs=40) as cluster, \
                distributed.Client(cluster) as client:
            mean()
            runs = [once(mean) for _ in range(3)]
            timings[workers], results[workers] = sorted(t for t, _ in runs), runs[0][1]
            for control in (python_task, memory_task):
                client.gather(client.map(control, range(8), pure=False))
                controls[control.__name__, workers] = best(
                    lambda: client.gather(client.map(control, range(8), pure=False)))[0]  # noqa: B023
    assert np.allclose(results[1].to_numpy(), results[2].to_numpy())
    gains = {name: controls[name, 1] / controls[name, 2] for name in ("python_task", "memory_task")}
    report("dask", timings[2][0], timings[1][0], f"8 bags x 250k Imu (640 MB): 2 worker processes (fastbag) vs 1 "
           f"(other), best of 3 on a warmed cluster; runs {', '.join(f'{t:.2f}' for t in timings[2])} s vs "
           f"{', '.join(f'{t:.2f}' for t in timings[1])} s; means equal ({results[1].iloc[0]:.4f}...); "
           f"controls, 2 vs 1 processes: pure Python {gains['python_task']:.2f}x, "
           f"writing fresh memory {gains['memory_task']:.2f}x")


def python_task(k):
    """A control task: 3 M additions in the interpreter (CPU only)."""
    total = 0
    for i in range(3_000_000):
        total += i
    return total


def memory_task(k):
    """A control task: 80 MB of fresh memory written 4 times over (page faults and memory bandwidth)."""
    for _ in range(4):
        block = np.empty(80_000_000, np.uint8)
        block[::64] = 1
    return k


JOBS = {"pandas": job_pandas, "parquet": job_parquet, "dataset": job_dataset, "dask": job_dask}


def main(argv):
    jobs = argv or list(JOBS)
    paths = bench.ensure_bags()
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores", flush=True)
    for job in jobs:
        JOBS[job](paths)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main(sys.argv[1:])
