"""Decoding speed, side by side with rosbags and against this machine's own limits.

``fastbag bench`` (and the pytest-benchmark suite in ``benchmarks/``) runs the
jobs below on bags generated with :mod:`fastbag.synth` (deterministic, cached
in a folder), or, given paths, on the user's bags topic by topic. Every job
first checks that fastbag and rosbags give equal results, then times both in
the same run: the page cache and the Numba cache are warm, each side gets a
warm-up run, and the best of a few runs counts. rosbags does what its user
would write: deserialize each message, then build the arrays with NumPy.

The machine's limits are measured in the same run: memory copy bandwidth
(the ceiling for uncompressed data) and single-thread lz4, bz2 and zstd
decompression speed times the cores (the ceiling for compressed data).
rosbags is imported only here, and only when a job runs it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bag import open as open_bag
from .synth import IMU, MIXED_STREAMS, imu, write_bag

IMU_FIELDS = ("orientation", "angular_velocity", "linear_acceleration")


# -- the machine ---------------------------------------------------------------------------

@dataclass
class Limits:
    """What this machine can do, measured now (bytes per second)."""

    cores: int
    memcpy: float
    lz4: float  # decompressed bytes per second, one thread
    bz2: float
    zstd: float

    def ceiling(self, compression: str) -> float:
        """The fastest a bag of this compression could be read: copy bandwidth, or decompression on every core."""
        if compression == "lz4":
            return self.lz4 * self.cores
        if compression == "bz2":
            return self.bz2 * self.cores
        if compression == "zstd":
            return self.zstd * self.cores
        return self.memcpy


def _best(fn: Callable[[], Any], repeats: int, warmup: bool = True) -> tuple[float, Any]:
    """Best wall time of ``repeats`` runs (after one warm-up run), and the last result."""
    result = fn() if warmup else None
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def _interleaved(fast: Callable[[], Any], slow: Callable[[], Any] | None, fast_repeats: int, slow_repeats: int,
                 *, slow_warmup: bool) -> tuple[tuple[float, Any], tuple[float, Any]]:
    """Best times of ``fast`` and ``slow`` (fastbag and rosbags), their runs alternating.

    This machine is shared and its speed drifts by 2x over minutes: timing
    one side's runs after the other's compared two different machines.
    Alternating lets each round see the same one. ``slow`` None: fast only.
    """
    results = [fast(), slow() if slow is not None and slow_warmup else None]
    best = [float("inf"), float("inf")]
    for round_ in range(max(fast_repeats, slow_repeats if slow is not None else 0)):
        for side, fn, repeats in ((0, fast, fast_repeats), (1, slow, slow_repeats)):
            if fn is None or round_ >= repeats:
                continue
            started = time.perf_counter()
            results[side] = fn()
            best[side] = min(best[side], time.perf_counter() - started)
    return (best[0], results[0]), (best[1], results[1])


def sample_payload(nbytes: int = 32 << 20, seed: int = 0) -> bytes:
    """Realistic message bytes (Imu records and lidar points) to measure codecs on."""
    rng = np.random.default_rng(seed)
    parts, size = [], 0
    times = np.arange(2000, dtype=np.int64) * 5_000_000
    while size < nbytes:
        chunk = b"".join(imu(times, rng))
        cloud = rng.normal(10, 2, 200_000).astype(np.float32).tobytes()
        parts += [chunk, cloud]
        size += len(chunk) + len(cloud)
    return b"".join(parts)[:nbytes]


def measure_limits() -> Limits:
    """Memory copy bandwidth and single-thread lz4, bz2 and zstd decompression speed, measured now."""
    import bz2

    import lz4.frame
    import zstandard

    source = np.frombuffer(sample_payload(), dtype=np.uint8)
    target = np.empty_like(source)
    copy_time, _ = _best(lambda: np.copyto(target, source), 5)
    payload = source.tobytes()
    packed = lz4.frame.compress(payload)
    lz4_time, _ = _best(lambda: lz4.frame.decompress(packed), 3)
    small = payload[:8 << 20]
    packed_bz2 = bz2.compress(small, 9)
    bz2_time, _ = _best(lambda: bz2.decompress(packed_bz2), 1)
    packed_zstd = zstandard.ZstdCompressor(level=3).compress(payload)  # zstd's default level, as ROS2 writes
    zstd_time, _ = _best(lambda: zstandard.ZstdDecompressor().decompress(packed_zstd), 3)
    return Limits(os.cpu_count() or 1, source.nbytes / copy_time, len(payload) / lz4_time, len(small) / bz2_time,
                  len(payload) / zstd_time)


# -- the bags ----------------------------------------------------------------------------

def bench_dir() -> Path:
    """Where generated bags are cached: ``$FASTBAG_BENCH_DIR`` or ``~/.cache/fastbag/bench``."""
    return Path(os.environ.get("FASTBAG_BENCH_DIR", Path.home() / ".cache" / "fastbag" / "bench"))


def imu_bag(path: Path, count: int = 1_000_000, seed: int = 0, **writer_options: Any) -> None:
    """One topic of ``count`` Imu messages at 200 Hz, uncompressed (or as ``writer_options`` of
    :class:`fastbag.Writer` say)."""
    rng = np.random.default_rng(seed)
    times = 1_700_000_000 * 10**9 + np.arange(count, dtype=np.int64) * 5_000_000
    from ..ros1.writer import Writer
    with Writer(path, **writer_options) as writer:
        conn = writer.add_connection("/imu", IMU.name, IMU.definition, IMU.md5sum)
        for t, raw in zip(times.tolist(), imu(times, rng)):
            writer.write(conn, t, raw)


def pylz4_bag(path: Path, source: Path) -> None:
    """``source``'s messages rewritten by rosbags' rosbag1 writer with lz4 chunks: framed as python-lz4's
    ``lz4.frame.compress(data, 0)`` frames them (linked 64 KiB blocks, the content size, no checksums),
    where ``rosbag record --lz4`` writes roslz4 frames (independent 1 MiB blocks, a content checksum)."""
    from rosbags.rosbag1 import Writer

    path.unlink(missing_ok=True)  # a partial file left by an interrupted run: rosbags will not overwrite
    writer = Writer(path)
    writer.set_compression(Writer.CompressionFormat.LZ4)
    with open_bag(source) as bag, writer:
        out = {c.id: writer.add_connection(c.topic, c.msgtype.replace("/", "/msg/", 1), msgdef=c.definition,
                                           md5sum=c.md5sum,
                                           callerid=c.callerid) for c in bag.connections}
        for m in bag.messages(raw=True):
            writer.write(out[m.connection.id], m.time, m.data)


def ensure_bags(seconds: float = 40.0, bz2_seconds: float = 8.0, folder: Path | None = None,
                log: Callable[[str], None] = print, keys: Iterable[str] | None = None) -> dict[str, Path]:
    """Generate (once) and return the benchmark recordings (those of ``keys``, default all): the ROS1 bags
    imu-1m, imu-lz4-per-message, mixed-none, mixed-lz4, mixed-bz2, and the same recordings as rosbag2
    directories of one MCAP file (mcap-imu-1m, mcap-mixed: zstd chunks; mcap-imu-1m-lz4: lz4 chunks;
    mcap-imu-1m-none, mcap-mixed-none: uncompressed chunks; mcap-mixed-zstd-fast: as rosbag2's ``zstd_fast``
    preset writes it)."""
    from .synth_mcap import write_rosbag2_mcap, write_zstd_fast

    folder = folder or bench_dir()
    folder.mkdir(parents=True, exist_ok=True)
    specs: dict[str, tuple[str, Callable[[Path], None]]] = {
        "imu-1m": ("imu-1000000.bag", imu_bag),
        "mixed-none": (f"mixed-{seconds:g}s-none.bag", lambda p: write_bag(p, MIXED_STREAMS, seconds=seconds)),
        "mixed-lz4": (f"mixed-{seconds:g}s-roslz4.bag",  # named for its frames: older caches held others
                      lambda p: write_bag(p, MIXED_STREAMS, seconds=seconds, compression="lz4")),
        "mixed-bz2": (f"mixed-{bz2_seconds:g}s-bz2.bag",
                      lambda p: write_bag(p, MIXED_STREAMS, seconds=bz2_seconds, compression="bz2")),
        # a recorder told to cut a chunk per message (rosbag record --chunksize=1): thousands of tiny chunks
        "imu-lz4-per-message": ("imu-100000-lz4-per-message.bag",
                                lambda p: imu_bag(p, 100_000, compression="lz4", chunk_size=1)),
        # after mixed-none, which it is made from
        "mixed-lz4-py": (f"mixed-{seconds:g}s-pylz4.bag", lambda p: pylz4_bag(p, paths["mixed-none"])),
    }
    # rosbag2 directories of one MCAP file, each made from the recording it names (in this order)
    mcap_specs: dict[str, tuple[str, str, Callable[[Path, Path], Path]]] = {
        "mcap-imu-1m": ("imu-1000000-zstd.rosbag2", "imu-1m", functools.partial(write_rosbag2_mcap,
                                                                                compression="zstd")),
        "mcap-imu-1m-lz4": ("imu-1000000-lz4.rosbag2", "imu-1m", functools.partial(write_rosbag2_mcap,
                                                                                   compression="lz4")),
        "mcap-imu-1m-none": ("imu-1000000-none.rosbag2", "imu-1m", functools.partial(write_rosbag2_mcap,
                                                                                     compression="none")),
        "mcap-mixed": (f"mixed-{seconds:g}s-zstd.rosbag2", "mixed-none", functools.partial(write_rosbag2_mcap,
                                                                                           compression="zstd")),
        "mcap-mixed-none": (f"mixed-{seconds:g}s-none.rosbag2", "mixed-none",
                            functools.partial(write_rosbag2_mcap, compression="none")),
        "mcap-mixed-zstd-fast": (f"mixed-{seconds:g}s-zstd-fast.rosbag2", "mcap-mixed-none", write_zstd_fast)}
    wanted = set(keys) if keys is not None else set(specs) | set(mcap_specs) | set(DB3_BAGS)
    for key in reversed(mcap_specs):  # an MCAP recording is made from its source, which may be one too
        if key in wanted:
            wanted.add(mcap_specs[key][1])
    wanted |= {"mixed-none"} if "mixed-lz4-py" in wanted else set()
    paths = {}
    for key, (name, make) in specs.items():
        if key not in wanted:
            continue
        path = folder / name
        if not path.exists():
            log(f"generating {path} ...")
            partial = path.with_suffix(".partial")
            make(partial)
            partial.rename(path)
        paths[key] = path
    for key, (name, source, make_mcap) in mcap_specs.items():
        if key not in wanted:
            continue
        path = folder / name
        if not path.exists():
            log(f"generating {path} (from {paths[source].name}) ...")
            partial = folder / (name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            written = make_mcap(paths[source], partial)
            written.rename(partial / f"{path.name}.mcap")
            metadata = partial / "metadata.yaml"
            metadata.write_text(metadata.read_text().replace(written.name, f"{path.name}.mcap"))
            partial.rename(path)
        paths[key] = path
    paths.update(_ensure_db3(folder, wanted, log))
    return paths


#: The sqlite3 recording (rosbag2 directory of one .db3, written by rosbags): key -> (name, Imu count, clouds).
DB3_BAGS = {"db3-imu-clouds": ("imu-1000000-clouds400.rosbag2", 1_000_000, 400)}


def _ensure_db3(folder: Path, wanted: set[str], log: Callable[[str], None]) -> dict[str, Path]:
    """Generate (once) the wanted sqlite3 recordings of :data:`DB3_BAGS` (see :mod:`.synth_db3`)."""
    from .synth_db3 import write_rosbag2_db3

    paths = {}
    for key in wanted & set(DB3_BAGS):
        name, count, clouds = DB3_BAGS[key]
        path = folder / name
        if not path.exists():
            log(f"generating {path} ...")
            partial = folder / (name + ".partial")  # the writer names its .db3 after the directory: keep it
            shutil.rmtree(partial, ignore_errors=True)
            write_rosbag2_db3(partial / name, count, clouds)
            (partial / name).rename(path)
            partial.rmdir()
        paths[key] = path
    return paths


# -- the jobs ----------------------------------------------------------------------------

def _imu_arrays_fastbag(bag: Any, topic: str = "/imu") -> dict[str, np.ndarray]:
    arr = bag.read(topic)
    stamp = arr["header"]["stamp"]
    sec, nsec = stamp.dtype.names  # ROS1 time (secs, nsecs), ROS2 builtin_interfaces/Time (sec, nanosec)
    out = {"secs": stamp[sec], "nsecs": stamp[nsec]}
    for name in IMU_FIELDS:
        for axis in arr[name].dtype.names:
            out[f"{name}.{axis}"] = arr[name][axis]
    return out


def _imu_arrays_rosbags(reader: Any, topic: str = "/imu") -> dict[str, np.ndarray]:
    return _imu_columns(_rosbags_topic(reader, topic))


def _imu_columns(messages: list[Any]) -> dict[str, np.ndarray]:
    """What the user of a message-by-message reader writes: the Imu fields gathered into arrays."""
    columns: dict[str, list[float]] = {}
    for msg in messages:
        columns.setdefault("secs", []).append(msg.header.stamp.sec)
        columns.setdefault("nsecs", []).append(msg.header.stamp.nanosec)
        for name in IMU_FIELDS:
            value = getattr(msg, name)
            for axis in ("x", "y", "z", "w") if name == "orientation" else ("x", "y", "z"):
                columns.setdefault(f"{name}.{axis}", []).append(getattr(value, axis))
    return {k: np.array(v) for k, v in columns.items()}


def _check_columns(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert ours.keys() == theirs.keys(), "different columns"
    for key in ours:
        assert np.array_equal(np.asarray(ours[key]), theirs[key].astype(np.asarray(ours[key]).dtype)), key


def _rosbags_reader(path: Path) -> Any:
    """An open rosbags AnyReader: types registered from the bag's definitions, and for a rosbag2 recording
    that stores none (Humble and older), from rosbags' store of the latest ROS 2 distribution's types."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    reader = AnyReader([path], default_typestore=get_typestore(getattr(Stores, "LATEST", Stores.ROS2_HUMBLE)))
    reader.open()
    return reader


def _rosbags_topic(reader: Any, topic: str) -> list[Any]:
    """Every message of ``topic`` deserialized by rosbags."""
    connections = [c for c in reader.connections if c.topic == topic]
    return [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages(connections)]


def _imu_messages_fastbag(bag: Any, topic: str = "/imu") -> tuple[int, float, int]:
    """Iterate decoded messages as user code does, touching a nested float and a stamp's seconds."""
    count, x_sum, secs_sum = 0, 0.0, 0
    for m in bag.messages(topics=[topic]):
        x_sum += m.msg.linear_acceleration.x
        secs_sum += m.msg.header.stamp.secs
        count += 1
    return count, x_sum, secs_sum


def _imu_messages_rosbags(reader: Any, topic: str = "/imu") -> tuple[int, float, int]:
    """The same loop over rosbags' ``deserialize_ros1``."""
    connections = [c for c in reader.connections if c.topic == topic]
    deserialize = reader.deserialize
    count, x_sum, secs_sum = 0, 0.0, 0
    for c, _, raw in reader.messages(connections):
        msg = deserialize(raw, c.msgtype)
        x_sum += msg.linear_acceleration.x
        secs_sum += msg.header.stamp.sec
        count += 1
    return count, x_sum, secs_sum


def _livox_fastbag(bag: Any) -> list[np.ndarray]:
    points = bag.read("/livox/lidar")["points"]
    return [points[i] for i in range(len(points))]


def _livox_rosbags(reader: Any) -> list[np.ndarray]:
    return _livox_points(_rosbags_topic(reader, "/livox/lidar"))


def _livox_points(messages: list[Any]) -> list[np.ndarray]:
    fields = ("offset_time", "x", "y", "z", "reflectivity", "tag", "line")
    from .synth import LIVOX_POINT
    return [np.array([tuple(getattr(p, f) for f in fields) for p in msg.points], dtype=LIVOX_POINT)
            for msg in messages]


def _clouds_fastbag(bag: Any) -> list[np.ndarray]:
    from ..msg.sensors import pointcloud
    return list(pointcloud(bag.read("/points")))


def _clouds_rosbags(reader: Any) -> list[np.ndarray]:
    return _clouds_of(_rosbags_topic(reader, "/points"))


def _clouds_of(messages: list[Any]) -> list[np.ndarray]:
    from ..msg.sensors import point_dtype
    clouds = []
    for msg in messages:
        dtype = point_dtype([f.name for f in msg.fields], [f.offset for f in msg.fields],
                            [f.datatype for f in msg.fields], [f.count for f in msg.fields], msg.point_step,
                            msg.is_bigendian)
        points = np.frombuffer(msg.data, dtype=dtype, count=msg.height * msg.width)
        clouds.append(points.reshape(msg.height, msg.width) if msg.height > 1 else points)
    return clouds


def _images_fastbag(bag: Any) -> list[np.ndarray]:
    from ..msg.sensors import image
    return image(bag.read("/camera/image_raw"), stack=False)


def _images_rosbags(reader: Any) -> list[np.ndarray]:
    return [msg.data.reshape(msg.height, msg.width, 3) for msg in _rosbags_topic(reader, "/camera/image_raw")]


def _check_arrays(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    assert len(ours) == len(theirs), f"{len(ours)} != {len(theirs)} messages"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and a.tobytes() == np.ascontiguousarray(b).tobytes(), f"message {i} differs"


def _raw_fastbag(path: Path) -> tuple[int, int]:
    with open_bag(path) as bag:
        count = nbytes = 0
        for m in bag.messages(raw=True):
            count += 1
            nbytes += len(m.data)
        return count, nbytes


def _raw_rosbags(path: Path, reader_class: Any = None) -> tuple[int, int]:
    """Every message's bytes through rosbags' reader of the format (rosbag1's by default)."""
    from rosbags.rosbag1 import Reader
    with (reader_class or Reader)(path) as reader:
        count = nbytes = 0
        for _, _, raw in reader.messages():
            count += 1
            nbytes += len(raw)
        return count, nbytes


def _raw_digest(messages: Any) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for topic, stamp, raw in messages:
        digest.update(topic.encode())
        digest.update(stamp.to_bytes(8, "little"))
        digest.update(raw)
    return digest.hexdigest()


def _check_raw(path: Path, *, rosbag2: bool = False) -> None:
    """The full (topic, time, bytes) sequences of fastbag and rosbags' rosbag1 (or rosbag2) reader are
    equal (compared by digest, outside the timing)."""
    if rosbag2:
        from rosbags.rosbag2 import Reader
    else:
        from rosbags.rosbag1 import Reader  # type: ignore[assignment]
    with open_bag(path) as bag:
        ours = _raw_digest((m.topic, m.time, m.data) for m in bag.messages(raw=True))
    with Reader(path) as reader:
        theirs = _raw_digest((c.topic, t, raw) for c, t, raw in reader.messages())
    assert ours == theirs, "raw messages differ"


def _check_equal(ours: Any, theirs: Any) -> None:
    assert ours == theirs, f"{ours!r} != {theirs!r}"


def _open_fastbag(path: Path) -> int:
    with open_bag(path) as bag:
        return bag.message_count


def _open_rosbags(path: Path) -> int:
    from rosbags.rosbag1 import Reader
    with Reader(path) as reader:
        return reader.message_count


# -- MCAP (rosbag2 directories of one MCAP file): rosbags' rosbag2 reader and the mcap package as peers ----

def fastbag_path(path: Path) -> Path:
    """What fastbag opens for a bench recording: the MCAP file of a rosbag2 directory, else the bag itself."""
    mcap = path / f"{path.name}.mcap"
    return mcap if path.is_dir() and mcap.exists() else path


def _mcap_reader(path: Path) -> Any:
    """An open mcap reader with mcap-ros2-support's decoders (its file closes with it: see _close_mcap)."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    return make_reader(fastbag_path(path).open("rb"), decoder_factories=[DecoderFactory()])


def _close_mcap(reader: Any) -> None:
    reader._stream.close()  # the reader does not own a close(); its stream is the file we opened


def _mcap_topic(reader: Any, topic: str) -> list[Any]:
    return [decoded for _, _, _, decoded in reader.iter_decoded_messages(topics=[topic], log_time_order=True)]


def _imu_arrays_mcap(reader: Any, topic: str = "/imu") -> dict[str, np.ndarray]:
    return _imu_columns(_mcap_topic(reader, topic))


def _livox_mcap(reader: Any) -> list[np.ndarray]:
    return _livox_points(_mcap_topic(reader, "/livox/lidar"))


def _clouds_mcap(reader: Any) -> list[np.ndarray]:
    return _clouds_of(_mcap_topic(reader, "/points"))


def _images_mcap(reader: Any) -> list[np.ndarray]:
    return [np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)
            for msg in _mcap_topic(reader, "/camera/image_raw")]


def _raw_rosbags2(path: Path) -> tuple[int, int]:
    from rosbags.rosbag2 import Reader
    return _raw_rosbags(path, Reader)


def _raw_mcap(path: Path) -> tuple[int, int]:
    from mcap.reader import make_reader
    with fastbag_path(path).open("rb") as f:
        count = nbytes = 0
        for _, _, message in make_reader(f).iter_messages(log_time_order=True):
            count += 1
            nbytes += len(message.data)
        return count, nbytes


def _open_rosbags2(path: Path) -> int:
    from rosbags.rosbag2 import Reader
    with Reader(path) as reader:
        return reader.message_count


def _open_mcap(path: Path) -> int:
    from mcap.reader import make_reader
    with fastbag_path(path).open("rb") as f:
        return make_reader(f).get_summary().statistics.message_count


def _check_raw_mcap(path: Path) -> None:
    """fastbag's (topic, time, bytes) sequence equals the mcap package's (compared by digest)."""
    from mcap.reader import make_reader
    with open_bag(fastbag_path(path)) as bag:
        ours = _raw_digest((m.topic, m.time, m.data) for m in bag.messages(raw=True))
    with fastbag_path(path).open("rb") as f:
        theirs = _raw_digest((c.topic, m.log_time, m.data) for _, c, m in make_reader(f).iter_messages(
            log_time_order=True))
    assert ours == theirs, "raw messages differ"


@dataclass
class Job:
    """One benchmark: the same work done by fastbag and by rosbags on one bag.

    Reading jobs (``opened``) are timed twice: on an open ``fastbag.Bag``
    and an open rosbags ``AnyReader`` (the read alone, its mapping already
    faulted in by the runs before), and as a user's script does it, with a
    fresh handle (open, read, close inside every timed run). The targets
    apply to both. The others get the path and open it themselves each run
    (no decompressed chunk survives from one run to the next).
    """

    name: str
    what: str
    bag: str
    fastbag: Callable[[Any], Any]
    rosbags: Callable[[Any], Any] | None
    check: Callable[[Any, Any], None] | None
    target: float | None = None   # ratio rosbags / fastbag to reach
    topic: str | None = None      # the topic whose bytes the job reads (for MB/s), None: the whole bag
    repeats: int = 3
    rosbags_repeats: int = 1      # more than 1: a warm-up run first, as for fastbag (where rosbags is quick)
    opened: bool = True
    views: bool = False  # the result is views of the bytes: nothing is copied, so no copy ceiling applies
    within_copies: float | None = None  # also a target: at most this many times a copy of the topic's bytes
    under_seconds: float | None = None  # also a target: fastbag's time below this
    # The peer (rosbags by default): its name, how it opens and closes a handle, how a whole-bag job checks
    # the raw messages against it.
    peer: str = "rosbags"
    open_peer: Callable[[Path], Any] = field(default=lambda path: _rosbags_reader(path))
    close_peer: Callable[[Any], None] = field(default=lambda reader: reader.close())
    check_raw: Callable[[Path], None] = field(default=lambda path: _check_raw(path))


JOBS: list[Job] = [
    Job("imu-1m", "1 M Imu messages into arrays", "imu-1m", _imu_arrays_fastbag, _imu_arrays_rosbags,
        _check_columns, 100, "/imu", within_copies=3),
    Job("imu-messages", "1 M Imu messages iterated, touching linear_acceleration.x and header.stamp.secs",
        "imu-1m", _imu_messages_fastbag, _imu_messages_rosbags, _check_equal, 5),  # per-message Python: no byte ceiling
    Job("livox", "Livox CustomMsg (24,000 points a message) into per-message point arrays", "mixed-none",
        _livox_fastbag, _livox_rosbags, _check_arrays, 300, "/livox/lidar", views=True),
    Job("pointcloud2", "PointCloud2 (130k points) into per-message structured points", "mixed-none",
        _clouds_fastbag, _clouds_rosbags, _check_arrays, 50, "/points", views=True, rosbags_repeats=3),
    Job("image", "Image 640x480 rgb8 into (H, W, C) per-message views", "mixed-none",
        _images_fastbag, _images_rosbags, _check_arrays, 20, "/camera/image_raw", views=True, rosbags_repeats=3),
    Job("imu-mixed", "Imu topic of the mixed bag (touching only Imu pages)", "mixed-none",
        _imu_arrays_fastbag, _imu_arrays_rosbags, _check_columns, 20, "/imu", rosbags_repeats=3),
    Job("raw-lz4", "all messages, raw, lz4 chunks", "mixed-lz4", _raw_fastbag, _raw_rosbags, None, 1.8,
        rosbags_repeats=3, opened=False),
    Job("raw-lz4-py", "all messages, raw, lz4 chunks as rosbags' writer frames them (python-lz4: linked 64 KiB "
        "blocks)", "mixed-lz4-py", _raw_fastbag, _raw_rosbags, None, 1.8, rosbags_repeats=3, opened=False),
    Job("raw-bz2", "all messages, raw, bz2 chunks", "mixed-bz2", _raw_fastbag, _raw_rosbags, None, 1.7,
        repeats=2, rosbags_repeats=2, opened=False),
    Job("raw-imu-1m", "1 M Imu messages, raw, uncompressed chunks (per-message Python on both sides)", "imu-1m",
        _raw_fastbag, _raw_rosbags, None, 1.8, repeats=3, rosbags_repeats=2, opened=False),
    Job("imu-lz4-per-message", "100 k Imu messages into arrays, lz4, a chunk per message", "imu-lz4-per-message",
        _imu_arrays_fastbag, _imu_arrays_rosbags, _check_columns, 5, "/imu"),
    Job("imu-messages-lz4-per-message", "100 k Imu messages iterated, lz4, a chunk per message",
        "imu-lz4-per-message", _imu_messages_fastbag, _imu_messages_rosbags, _check_equal, 5),
    Job("open", "open the mixed bag", "mixed-none", _open_fastbag, _open_rosbags, _check_equal, 5,
        repeats=10, rosbags_repeats=5, opened=False, under_seconds=0.05),
]


def _check_fields(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    """Per message, every field of the points equal (a CDR point's padding is not a field)."""
    assert len(ours) == len(theirs), f"{len(ours)} != {len(theirs)} messages"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and all(np.array_equal(a[name], b[name]) for name in b.dtype.names), \
            f"message {i} differs"


def _mcap_peer(**kw: Any) -> dict[str, Any]:
    """Job options for the mcap package (with mcap-ros2-support) as the peer."""
    return dict(peer="mcap + mcap-ros2-support", open_peer=_mcap_reader, close_peer=_close_mcap,
                check_raw=_check_raw_mcap, **kw)


_ROSBAGS2 = dict(peer="rosbags (rosbag2 reader)", check_raw=_check_raw_mcap)

# The same jobs on the recordings as ROS2 writes them (CDR messages, MCAP with zstd chunks), against each peer.
JOBS += [
    Job("imu-1m-mcap", "1 M Imu messages (CDR, MCAP zstd) into arrays", "mcap-imu-1m", _imu_arrays_fastbag,
        _imu_arrays_rosbags, _check_columns, 100, "/imu", **_ROSBAGS2),
    Job("imu-1m-mcap-py", "1 M Imu messages (CDR, MCAP zstd) into arrays", "mcap-imu-1m", _imu_arrays_fastbag,
        _imu_arrays_mcap, _check_columns, 100, "/imu", **_mcap_peer()),
    Job("imu-1m-mcap-lz4", "1 M Imu messages (CDR, MCAP lz4) into arrays", "mcap-imu-1m-lz4", _imu_arrays_fastbag,
        _imu_arrays_rosbags, _check_columns, 100, "/imu", **_ROSBAGS2),
    Job("imu-1m-mcap-none", "1 M Imu messages (CDR, MCAP uncompressed chunks) into arrays", "mcap-imu-1m-none",
        _imu_arrays_fastbag, _imu_arrays_rosbags, _check_columns, 100, "/imu", **_ROSBAGS2),
    Job("livox-mcap", "Livox CustomMsg (CDR, MCAP zstd) into per-message point arrays", "mcap-mixed",
        _livox_fastbag, _livox_rosbags, _check_fields, 300, "/livox/lidar", views=True, **_ROSBAGS2),
    Job("livox-mcap-py", "Livox CustomMsg (CDR, MCAP zstd) into per-message point arrays", "mcap-mixed",
        _livox_fastbag, _livox_mcap, _check_fields, 300, "/livox/lidar", views=True, **_mcap_peer()),
    Job("pointcloud2-mcap", "PointCloud2 (CDR, MCAP zstd) into per-message structured points", "mcap-mixed",
        _clouds_fastbag, _clouds_rosbags, _check_arrays, 50, "/points", views=True, rosbags_repeats=3,
        **_ROSBAGS2),
    Job("pointcloud2-mcap-py", "PointCloud2 (CDR, MCAP zstd) into per-message structured points", "mcap-mixed",
        _clouds_fastbag, _clouds_mcap, _check_arrays, 50, "/points", views=True, rosbags_repeats=3,
        **_mcap_peer()),
    Job("image-mcap", "Image 640x480 rgb8 (CDR, MCAP zstd) into (H, W, C) per-message views", "mcap-mixed",
        _images_fastbag, _images_rosbags, _check_arrays, 20, "/camera/image_raw", views=True, rosbags_repeats=3,
        **_ROSBAGS2),
    Job("image-mcap-py", "Image 640x480 rgb8 (CDR, MCAP zstd) into (H, W, C) per-message views", "mcap-mixed",
        _images_fastbag, _images_mcap, _check_arrays, 20, "/camera/image_raw", views=True, rosbags_repeats=3,
        **_mcap_peer()),
    Job("pointcloud2-mcap-none", "PointCloud2 (CDR, MCAP uncompressed chunks) into per-message structured points",
        "mcap-mixed-none", _clouds_fastbag, _clouds_mcap, _check_arrays, 50, "/points", views=True,
        rosbags_repeats=3, **_mcap_peer()),
    Job("image-mcap-none", "Image 640x480 rgb8 (CDR, MCAP uncompressed chunks) into (H, W, C) per-message views",
        "mcap-mixed-none", _images_fastbag, _images_mcap, _check_arrays, 20, "/camera/image_raw", views=True,
        rosbags_repeats=3, **_mcap_peer()),
    Job("livox-mcap-none", "Livox CustomMsg (CDR, MCAP uncompressed chunks) into per-message point arrays",
        "mcap-mixed-none", _livox_fastbag, _livox_mcap, _check_fields, 300, "/livox/lidar", views=True,
        **_mcap_peer()),
    # rosbag2's zstd_fast preset (what `ros2 bag record` writes with zstd chunks): this content at zstd's
    # fastest level saves under 2% a chunk, so the writer keeps every chunk uncompressed, without CRC-32s
    Job("pointcloud2-mcap-zstd-fast", "PointCloud2 (CDR, MCAP as rosbag2's zstd_fast preset writes it) into "
        "per-message structured points", "mcap-mixed-zstd-fast", _clouds_fastbag, _clouds_mcap, _check_arrays, 50,
        "/points", views=True, rosbags_repeats=3, **_mcap_peer()),
    Job("image-mcap-zstd-fast", "Image 640x480 rgb8 (CDR, MCAP as rosbag2's zstd_fast preset writes it) into "
        "(H, W, C) per-message views", "mcap-mixed-zstd-fast", _images_fastbag, _images_mcap, _check_arrays, 20,
        "/camera/image_raw", views=True, rosbags_repeats=3, **_mcap_peer()),
    Job("livox-mcap-zstd-fast", "Livox CustomMsg (CDR, MCAP as rosbag2's zstd_fast preset writes it) into "
        "per-message point arrays", "mcap-mixed-zstd-fast", _livox_fastbag, _livox_rosbags, _check_fields, 300,
        "/livox/lidar", views=True, **_ROSBAGS2),
    Job("raw-zstd-mcap", "all messages, raw, MCAP zstd chunks", "mcap-mixed", _raw_fastbag, _raw_rosbags2, None,
        1.8, rosbags_repeats=3, opened=False, **_ROSBAGS2),
    Job("raw-zstd-mcap-py", "all messages, raw, MCAP zstd chunks", "mcap-mixed", _raw_fastbag, _raw_mcap, None,
        1.8, rosbags_repeats=3, opened=False, **_mcap_peer()),
    Job("open-mcap", "open the mixed MCAP file", "mcap-mixed", _open_fastbag, _open_rosbags2, _check_equal, 5,
        repeats=10, rosbags_repeats=5, opened=False, under_seconds=0.05, **_ROSBAGS2),
    Job("open-mcap-py", "open the mixed MCAP file", "mcap-mixed", _open_fastbag, _open_mcap, _check_equal, 5,
        repeats=10, rosbags_repeats=5, opened=False, under_seconds=0.05, **_mcap_peer()),
]


def _check_raw_rosbags2(path: Path) -> None:
    """fastbag's (topic, time, bytes) sequence equals rosbags' rosbag2 reader's (compared by digest)."""
    _check_raw(path, rosbag2=True)


# The sqlite3 storage (.db3) ROS2 recorders write by default, against rosbags' rosbag2 reader.
_DB3 = dict(peer="rosbags (rosbag2 reader)", check_raw=_check_raw_rosbags2)
JOBS += [
    Job("imu-1m-db3", "1 M Imu messages (CDR, sqlite3) into arrays", "db3-imu-clouds", _imu_arrays_fastbag,
        _imu_arrays_rosbags, _check_columns, 20, "/imu", **_DB3),
    Job("pointcloud2-db3", "PointCloud2 (10k points, CDR, sqlite3, among 1 M Imu rows) into per-message structured "
        "points", "db3-imu-clouds", _clouds_fastbag, _clouds_rosbags, _check_arrays, 20, "/points", views=True,
        rosbags_repeats=3, **_DB3),
    Job("raw-db3", "all messages, raw, sqlite3", "db3-imu-clouds", _raw_fastbag, _raw_rosbags2, None, 1.0,
        repeats=2, rosbags_repeats=2, opened=False, **_DB3),
    Job("open-db3", "open the sqlite3 recording (1 M rows)", "db3-imu-clouds", _open_fastbag, _open_rosbags2,
        _check_equal, 5, repeats=10, rosbags_repeats=5, opened=False, under_seconds=0.05, **_DB3),
]


@dataclass
class Row:
    """One line of the report."""

    job: str
    what: str
    bag: str
    fastbag_s: float
    peer: str = "rosbags"
    rosbags_s: float | None = None
    ratio: float | None = None
    # With a fresh handle per run (open, read, close inside the timing); None for jobs that open anyway.
    fresh_fastbag_s: float | None = None
    fresh_rosbags_s: float | None = None
    fresh_ratio: float | None = None
    target: float | None = None
    messages: int = 0
    megabytes: float = 0.0
    limit_fraction: float | None = None  # of this machine's ceiling for the bag's compression
    notes: list[str] = field(default_factory=list)
    conditions: list[tuple[str, bool]] = field(default_factory=list)  # the target's other parts: (text, met)

    @property
    def met(self) -> bool | None:
        if self.target is None or self.ratio is None:
            return None
        fresh_ok = self.fresh_ratio is None or self.fresh_ratio >= self.target
        return self.ratio >= self.target and fresh_ok and all(ok for _, ok in self.conditions)


def _volume(path: Path, topic: str | None) -> tuple[int, int, str]:
    """(messages, bytes, compression) of a topic (its serialized messages) or a whole bag (its chunks)."""
    with open_bag(path) as bag:
        compression = next(iter(bag.compression), "none")
        if topic is None:
            return bag.message_count, sum(c.size for c in bag._index.chunks), compression
        sizes = [len(m.data) for m in bag.messages(topics=[topic], raw=True)]
        return len(sizes), sum(sizes), compression


def run_job(job: Job, paths: dict[str, Path], limits: Limits, *, against: bool = True,
            log: Callable[[str], None] = print) -> Row:
    """Check fastbag against rosbags on the job, then time both; one report row."""
    path = paths[job.bag]
    ours_path = fastbag_path(path)  # a rosbag2 directory's MCAP file; the peers open the directory
    count, nbytes, compression = _volume(ours_path, job.topic)
    row = Row(job.name, job.what, path.name, 0.0, target=job.target, messages=count, megabytes=nbytes / 1e6,
              peer=job.peer)
    log(f"{job.name}: {job.what} ({path.name})")
    compare = against and job.rosbags is not None
    if compare and job.check is None:
        job.check_raw(path)
    with open_bag(ours_path) as bag:
        reader = job.open_peer(path) if compare and job.opened else None
        try:
            fast = lambda: job.fastbag(bag if job.opened else ours_path)  # noqa: E731
            slow = (lambda: job.rosbags(reader if job.opened else path)) if compare else None  # noqa: E731
            (fast_s, ours), (slow_s, theirs) = _interleaved(fast, slow, job.repeats, job.rosbags_repeats,
                                                            slow_warmup=job.rosbags_repeats > 1)
        finally:
            if reader is not None:
                job.close_peer(reader)
    row.fastbag_s = fast_s
    if job.opened:  # as a user's script does it: open, read, close in every run
        fresh = lambda: _with_fresh_bag(job.fastbag, ours_path)  # noqa: E731
        fresh_slow = (lambda: _with_fresh_reader(job, path)) if compare else None  # noqa: E731
        (row.fresh_fastbag_s, _), (fresh_slow_s, _) = _interleaved(fresh, fresh_slow, job.repeats,
                                                                   job.rosbags_repeats,
                                                                   slow_warmup=job.rosbags_repeats > 1)
        if compare:
            row.fresh_rosbags_s = fresh_slow_s
            row.fresh_ratio = fresh_slow_s / row.fresh_fastbag_s
    row.limit_fraction = None if job.views or not (job.topic or compression != "none") else \
        (nbytes / fast_s) / limits.ceiling(compression)
    if job.views:
        row.notes.append("zero-copy views of the message bytes")
    if compare:
        if job.check is not None:
            job.check(ours, theirs)
        row.rosbags_s = slow_s
        row.ratio = slow_s / fast_s
    if job.within_copies is not None:
        copy_s = _copy_time(nbytes)
        slowest = max(fast_s, row.fresh_fastbag_s or 0.0)
        row.notes.append(f"{fast_s / copy_s:.1f}x (fresh handle {slowest / copy_s:.1f}x) the time of copying the "
                         f"topic's {nbytes / 1e6:.0f} MB once ({copy_s * 1e3:.0f} ms)")
        row.conditions.append((f"<= {job.within_copies:g}x a copy", slowest <= job.within_copies * copy_s))
    if job.under_seconds is not None:
        row.notes.append(f"{fast_s * 1e3:.1f} ms for {_size(ours_path) / 1e9:.2f} GB")
        row.conditions.append((f"< {job.under_seconds * 1e3:g} ms", fast_s < job.under_seconds))
    return row


def _size(path: Path) -> int:
    """Bytes of a file, or of the files of a directory (a rosbag2 recording)."""
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file()) if path.is_dir() else path.stat().st_size


def _with_fresh_bag(read: Callable[[Any], Any], path: Path) -> Any:
    with open_bag(path) as bag:
        return read(bag)


def _with_fresh_reader(job: Job, path: Path) -> Any:
    reader = job.open_peer(path)
    try:
        return job.rosbags(reader)  # type: ignore[misc]
    finally:
        job.close_peer(reader)


def _copy_time(nbytes: int) -> float:
    """Copying ``nbytes`` once into fresh memory: the floor of any decode that produces new arrays."""
    source = np.ones(nbytes, dtype=np.uint8)
    best, _ = _best(lambda: source.copy(), 3)
    return best


def first_read_seconds(path: Path, topic: str) -> float:
    """A fresh interpreter: import fastbag, open, read a topic; the child's own clock (Numba cache warm, and
    the bytecode cache: with PYTHONDONTWRITEBYTECODE set, as on some CI hosts, every import compiled
    fastbag's sources again, 0.1 s that no installed fastbag pays)."""
    code = ("import time; t = time.perf_counter(); import fastbag\n"
            f"with fastbag.open({str(path)!r}) as bag: bag.read({topic!r})\n"
            "print(time.perf_counter() - t)")
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env)  # warm the caches
    runs = [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                 env=env).stdout.strip()) for _ in range(3)]
    return min(runs)


def run_suite(jobs: list[str] | None = None, *, seconds: float = 40.0, bz2_seconds: float = 8.0,
              against: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every job (or those named) on the generated bags; a JSON-ready report."""
    selected = [job for job in JOBS if not jobs or job.name in jobs]
    pylz4 = bench_dir() / f"mixed-{seconds:g}s-pylz4.bag"
    if any(job.bag == "mixed-lz4-py" for job in selected) and not pylz4.exists():
        import importlib.util

        if importlib.util.find_spec("rosbags") is None:  # its bag is written by rosbags' writer
            log("raw-lz4-py skipped: its bag is written by rosbags' writer (pip install rosbags)")
            selected = [job for job in selected if job.bag != "mixed-lz4-py"]
    keys = {job.bag for job in selected} | ({"mixed-none"} if not jobs or "first-read" in jobs else set())
    paths = ensure_bags(seconds, bz2_seconds, log=log, keys=keys)
    limits = measure_limits()
    rows = [run_job(job, paths, limits, against=against, log=log) for job in selected]
    first = None
    if not jobs or "first-read" in jobs:
        first = first_read_seconds(paths["mixed-none"], "/imu")
    return {"machine": machine(limits), "rows": [dict(asdict(r), met=r.met) for r in rows],
            "first_read_s": first, "command": " ".join(["fastbag bench", *sys.argv[2:]]).strip()}


def machine(limits: Limits) -> dict[str, Any]:
    """The facts a reader needs to weigh the numbers."""
    import platform

    import numba

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else \
        platform.processor()
    return {"cpu": cpu, "cores": limits.cores, "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "memcpy_GBps": round(limits.memcpy / 1e9, 2),
            "lz4_MBps_per_core": round(limits.lz4 / 1e6), "bz2_MBps_per_core": round(limits.bz2 / 1e6),
            "zstd_MBps_per_core": round(limits.zstd / 1e6)}


# -- the user's bags -------------------------------------------------------------------------

def bench_paths(paths: list[str], *, against: bool = False, limits: Limits | None = None,
                log: Callable[[str], None] = print) -> dict[str, Any]:
    """Per topic of each bag: open, read into arrays, iterate raw; rosbags side by side with ``against``.

    With ``against``, every message of a topic rosbags reads is compared with fastbag's, field by field
    (:mod:`.compare`). A topic rosbags cannot read or decode gets a ``rosbags: ...`` note (the peer's
    limit); a topic whose values differ gets a ``mismatch`` and a ``MISMATCH: ...`` note, and is listed in
    the report's ``mismatches`` (see :func:`exit_status`).
    """
    from ..errors import FastbagError

    limits = limits or measure_limits()
    rows = []
    mismatches = []
    for name in paths:
        path = Path(name)
        open_s, _ = _best(lambda: _open_fastbag(path), 5)
        with open_bag(path) as bag:
            compression = next(iter(bag.compression), "none")
            topics = list(bag.topics)
            encodings = {t: {c.encoding for c in info.connections} for t, info in bag.topics.items()}
        for topic in topics:
            count, nbytes, _ = _volume(path, topic)
            row: dict[str, Any] = {"bag": str(path), "topic": topic, "messages": count, "megabytes": nbytes / 1e6,
                                   "open_s": open_s}

            def raw() -> int:
                with open_bag(path) as b:
                    return sum(len(m.data) for m in b.messages(topics=[topic], raw=True))

            row["raw_s"], _ = _best(raw, 3)

            def read() -> Any:
                with open_bag(path) as b:
                    return b.read(topic)

            try:
                row["read_s"], arr = _best(read, 3)
            except FastbagError as exc:
                row["read_s"], arr = None, None
                row["note"] = str(exc)
            seconds = row["read_s"] or row["raw_s"]
            row["msgs_per_s"] = count / seconds if seconds else None
            row["MB_per_s"] = nbytes / 1e6 / seconds if seconds else None
            row["limit_fraction"] = nbytes / seconds / limits.ceiling(compression) if seconds else None
            if against and arr is not None:
                theirs = None
                try:  # only rosbags' own reading is its limit: the comparison below is fastbag's
                    reader = _rosbags_reader(path)
                    try:
                        started = time.perf_counter()
                        theirs = _rosbags_topic(reader, topic)
                        row["rosbags_s"] = time.perf_counter() - started
                    finally:
                        reader.close()
                except Exception as exc:  # noqa: BLE001 - rosbags refuses many real files: say so
                    row["note"] = " ".join(f"rosbags: {type(exc).__name__}: {exc}".split())[:200]  # one line
                if theirs is not None and not theirs and len(arr):
                    # rosbags yields nothing for some rosbag2 directories (QoS metadata it cannot parse)
                    row["note"] = f"rosbags: read no messages of {len(arr)}"
                elif theirs is not None:
                    encoding = "cdr" if encodings.get(topic) == {"cdr"} else "ros1"
                    problem = compare_topic(arr, theirs, topic, encoding)
                    if problem is None:
                        row["compared"] = len(theirs)
                        row["ratio"] = row["rosbags_s"] / row["read_s"]
                    else:
                        row["mismatch"] = problem
                        row["note"] = f"MISMATCH: fastbag differs from rosbags: {problem}"[:300]
                        mismatches.append({"bag": str(path), "topic": topic, "mismatch": problem})
            log(f"{path.name} {topic}: {count} messages" + (" - MISMATCH with rosbags" if "mismatch" in row else ""))
            rows.append(row)
    return {"machine": machine(limits), "topics": rows, "mismatches": mismatches}


def compare_topic(ours: Any, theirs: list[Any], topic: str, encoding: str = "ros1") -> str | None:
    """None if fastbag's messages of ``topic`` (``bag.read(topic)``) equal rosbags' (``theirs``), message
    by message and field by field; else what differs first. A comparison that cannot proceed (a field
    missing on one side, a value of the wrong kind) is a difference too."""
    from .compare import assert_same_message

    try:
        assert len(ours) == len(theirs), f"{topic}: {len(ours)} messages != rosbags' {len(theirs)}"
        for i, msg in enumerate(theirs):
            assert_same_message(ours[i], msg, f"{topic}[{i}]", encoding=encoding)
    except AssertionError as exc:
        return str(exc) or f"{topic}: values differ"
    except Exception as exc:  # noqa: BLE001 - the values could not even be compared: not rosbags' doing
        return f"{topic}: comparison failed: {type(exc).__name__}: {exc}"
    return None


def exit_status(report: dict[str, Any]) -> int:
    """The exit code of ``fastbag bench --against rosbags BAG...``: 1 if any topic's values differ from rosbags'."""
    return 1 if report.get("mismatches") else 0


# -- printing --------------------------------------------------------------------------------

def format_suite(report: dict[str, Any]) -> str:
    """The report of :func:`run_suite` as a Markdown table."""
    m = report["machine"]
    lines = [f"machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, NumPy {m['numpy']}, "
             f"Numba {m['numba']}",
             f"limits measured in this run: memcpy {m['memcpy_GBps']} GB/s, lz4 {m['lz4_MBps_per_core']} MB/s, "
             f"bz2 {m['bz2_MBps_per_core']} MB/s and zstd {m['zstd_MBps_per_core']} MB/s per core", "",
             "| job | fastbag | peer | ratio | fresh handle: fastbag | peer | ratio | target | messages | "
             "MB/s | of limit | notes |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in report["rows"]:
        ratio = f"{r['ratio']:.1f}x" if r["ratio"] is not None else "-"
        target = ", ".join([f">= {r['target']:g}x"] + [text for text, _ in r["conditions"]]) + \
            {True: " ok", False: " MISSED", None: ""}[r["met"]] if r["target"] else "-"
        rosbags = f"{r['rosbags_s']:.3f} s" if r["rosbags_s"] is not None else "-"
        fraction = f"{r['limit_fraction'] * 100:.0f}%" if r["limit_fraction"] is not None else "-"
        speed = f"{r['megabytes'] / r['fastbag_s']:,.0f}" if r["megabytes"] else "-"
        fresh = [f"{r['fresh_fastbag_s']:.4f} s" if r["fresh_fastbag_s"] is not None else "same",
                 f"{r['fresh_rosbags_s']:.3f} s" if r["fresh_rosbags_s"] is not None else "same",
                 f"{r['fresh_ratio']:.1f}x" if r["fresh_ratio"] is not None else "same"]
        what = r["what"] + (f" (peer: {r['peer']})" if r.get("peer", "rosbags") != "rosbags" else "")
        lines.append(f"| {r['job']}: {what} | {r['fastbag_s']:.4f} s | {rosbags} | {ratio} | {' | '.join(fresh)} | "
                     f"{target} | {r['messages']:,} | {speed} | {fraction} | {'; '.join(r['notes'])} |")
    if report.get("first_read_s") is not None:
        ok = "ok" if report["first_read_s"] < 1 else "MISSED"
        lines.append(f"| first-read: import fastbag, open, read /imu in a fresh process | "
                     f"{report['first_read_s']:.3f} s | - | - | | | | < 1 s {ok} | | | | Numba cache warm |")
    return "\n".join(lines)


def format_paths(report: dict[str, Any]) -> str:
    """The report of :func:`bench_paths` as a table."""
    lines = ["| bag | topic | messages | open | read | raw | msgs/s | MB/s | of limit | rosbags | ratio | note |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]

    def sec(value: float | None) -> str:
        return f"{value:.4f} s" if value is not None else "-"

    for r in report["topics"]:
        note = r.get("note", "").replace("|", r"\|")  # (a Markdown cell)
        lines.append(
            f"| {Path(r['bag']).name} | {r['topic']} | {r['messages']:,} | {sec(r['open_s'])} | {sec(r['read_s'])} | "
            f"{sec(r['raw_s'])} | {r['msgs_per_s'] or 0:,.0f} | {r['MB_per_s'] or 0:,.0f} | "
            f"{(r['limit_fraction'] or 0) * 100:.0f}% | {sec(r.get('rosbags_s'))} | "
            f"{(str(round(r['ratio'], 1)) + 'x') if r.get('ratio') else '-'} | {note} |")
    mismatches = report.get("mismatches") or []
    if mismatches:
        lines += ["", f"MISMATCH: fastbag's values differ from rosbags' on {len(mismatches)} topic(s):"]
        lines += [f"- {Path(m['bag']).name} {m['topic']}: {m['mismatch']}" for m in mismatches]
    return "\n".join(lines)


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, default=float)
