"""SyncedDataset against a brute-force search on generated bags (jittered rates, dropped messages); collate;
worker processes (a multiprocessing pool always, a torch DataLoader with 2 workers when torch is installed)."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest

import fastbag
from fastbag.tooling.synth import IMAGE, IMU, POINTCLOUD2, image, imu, pointcloud2

START = 1_700_000_000 * 10**9
STREAMS = {"cloud": ("/points", POINTCLOUD2, 10, pointcloud2, {"points": 320}),
           "image": ("/camera/image_raw", IMAGE, 15, image, {"height": 6, "width": 8}),
           "imu": ("/imu", IMU, 200, imu, {})}


def write_bag(path, seed, seconds=3.0):
    """Every stream at its rate with jitter, 20% of messages dropped; header stamps lag receive times.

    Returns {name: (receive times, header stamps)} of the messages written, in read order.
    """
    rng = np.random.default_rng(seed)
    queue, written = [], {}
    with fastbag.Writer(path, chunk_size=32 * 1024) as w:
        for name, (topic, msgtype, rate, generate, options) in STREAMS.items():
            n = int(seconds * rate)
            stamps = START + (np.arange(n) * 1e9 / rate).astype(np.int64) + rng.integers(-3_000_000, 3_000_000, n)
            stamps = np.sort(stamps[rng.random(n) > 0.2])
            received = stamps + rng.integers(1_000_000, 40_000_000, stamps.size)  # transport latency
            conn = w.add_connection(topic, msgtype.name, msgtype.definition, msgtype.md5sum)
            queue += [(int(t), conn, data) for t, data in zip(received, generate(stamps, rng, **options))]
            order = np.argsort(received, kind="stable")
            written[name] = (received[order], stamps[order])
        for time, conn, data in sorted(queue, key=lambda item: (item[0], item[1].id)):
            w.write(conn, time, data)
    return written


@pytest.fixture(scope="module")
def bags(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synced")
    paths = [folder / "run1.bag", folder / "run2.bag"]
    return [(p, write_bag(p, seed)) for seed, p in enumerate(paths)]


def brute_force(written, stamp, tolerance, window, match):
    """Expected samples by exhaustive search: [(anchor row, {name: row}, imu rows)] in anchor-time order."""
    which = 0 if stamp == "receive" else 1
    times = {name: w[which] for name, w in written.items()}
    samples = []
    for a in np.argsort(times["cloud"], kind="stable"):
        t = times["cloud"][a]
        rows = {}
        for name in ("image",):
            d = times[name] - t
            if match == "asof":
                d = np.where(d <= 0, -d, np.iinfo(np.int64).max)
            else:
                d = np.abs(d)
            j = int(np.argmin(d))  # the first of equal distances: the earlier in time
            if d[j] > tolerance * 1e9:
                break
            rows[name] = j
        else:
            inside = np.flatnonzero((times["imu"] > t - window * 1e9) & (times["imu"] <= t))
            samples.append((int(a), rows, inside))
    return samples


def check_brute_force(bags, stamp, match):
    """The dataset over ``bags`` [(path, written)] has the brute-force samples, values as ``read`` gives them."""
    topics = {name: s[0] for name, s in STREAMS.items()}
    ds = fastbag.SyncedDataset([p for p, _ in bags], topics, anchor="cloud", tolerance=0.02, stamp=stamp,
                               windows={"imu": 0.1}, match=match)
    expected = []
    for path, written in bags:
        with fastbag.open(path) as bag:
            arrays = {name: bag.read(topic) for name, topic in topics.items()}
        which = 0 if stamp == "receive" else 1
        for a, rows, inside in brute_force(written, stamp, 0.02, 0.1, match):
            expected.append((arrays, written, which, a, rows, inside))
    anchors = sum(len(w["cloud"][0]) for _, w in bags)
    assert 5 < len(ds) == len(expected) < anchors  # some anchors lack a match within the tolerance
    for i, (arrays, written, which, a, rows, inside) in enumerate(expected):
        sample = ds[i]
        assert sample["time"] == written["cloud"][which][a] == sample["times"]["cloud"]
        np.testing.assert_array_equal(sample["cloud"], fastbag.pointcloud(arrays["cloud"][a]))
        assert sample["times"]["image"] == written["image"][which][rows["image"]]
        np.testing.assert_array_equal(sample["image"], fastbag.image(arrays["image"][rows["image"]]))
        assert sample["image"].shape == (6, 8, 3)
        want = arrays["imu"].to_numpy()[inside]
        assert sample["imu"].dtype == want.dtype and len(sample["imu"]) == len(want)
        for field in ("linear_acceleration", "angular_velocity", "orientation"):
            np.testing.assert_array_equal(sample["imu"][field], want[field])
        assert sorted(sample["times"]["imu"].tolist()) == sorted(written["imu"][which][inside].tolist())
    assert ds.sample_bag(len(ds) - 1) == str(bags[-1][0])
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert ds[-1]["time"] == ds[len(ds) - 1]["time"]
    return ds


@pytest.mark.parametrize("stamp", ["receive", "header"])
@pytest.mark.parametrize("match", ["nearest", "asof"])
def test_samples_equal_brute_force(bags, stamp, match):
    check_brute_force(bags, stamp, match)


#: The same recordings as ROS2 writes them: an MCAP file (lz4 chunks), a rosbag2 directory of one
#: uncompressed MCAP file, a rosbag2 directory of sqlite3 storage (written by rosbags).
ROS2_FORMATS = ["mcap-lz4", "rosbag2-mcap", "rosbag2-sqlite"]


@pytest.fixture(scope="module")
def ros2_bags(bags, tmp_path_factory):
    synth_mcap = pytest.importorskip("fastbag.tooling.synth_mcap")
    pytest.importorskip("mcap", reason="the mcap package writes the MCAP recordings")
    folder = tmp_path_factory.mktemp("synced-ros2")
    made = {name: [] for name in ROS2_FORMATS}
    for path, written in bags:
        stem = path.stem
        made["mcap-lz4"].append((synth_mcap.write_rosbag2_mcap(path, folder / f"{stem}-lz4", compression="lz4"),
                                 written))
        directory = folder / f"{stem}-none"
        synth_mcap.write_rosbag2_mcap(path, directory, compression="none")
        made["rosbag2-mcap"].append((directory, written))
        made["rosbag2-sqlite"].append((synth_mcap.write_rosbag2_sqlite(path, folder / f"{stem}-db3"), written))
    return made


@pytest.mark.parametrize("stamp", ["receive", "header"])
@pytest.mark.parametrize("form", ROS2_FORMATS)
def test_other_formats_give_the_same_samples(bags, ros2_bags, form, stamp):
    """On MCAP and rosbag2 (CDR: sec/nanosec stamps, no seq) the samples equal the brute force, and the ROS1
    recording's samples: the same points, pixels and Imu values."""
    ds = check_brute_force(ros2_bags[form], stamp, "nearest")
    ros1 = fastbag.SyncedDataset([p for p, _ in bags], {name: s[0] for name, s in STREAMS.items()}, anchor="cloud",
                                 tolerance=0.02, stamp=stamp, windows={"imu": 0.1})
    assert len(ds) == len(ros1)
    for i in range(len(ds)):
        ours, theirs = ds[i], ros1[i]
        assert ours["time"] == theirs["time"] and ours["times"]["image"] == theirs["times"]["image"]
        np.testing.assert_array_equal(ours["cloud"], theirs["cloud"])
        np.testing.assert_array_equal(ours["image"], theirs["image"])
        for field in ("linear_acceleration", "angular_velocity", "orientation", "orientation_covariance"):
            np.testing.assert_array_equal(ours["imu"][field], theirs["imu"][field])
        assert ours["imu"]["header"]["frame_id"].tolist() == theirs["imu"]["header"]["frame_id"].tolist()
        np.testing.assert_array_equal(ours["times"]["imu"], theirs["times"]["imu"])


def test_rosbag2_sqlite_dataset_works_in_worker_processes(ros2_bags):
    """The sqlite connection stays in the process that opened it: a forked worker opens its own."""
    topics = {name: s[0] for name, s in STREAMS.items()}
    ds = fastbag.SyncedDataset([p for p, _ in ros2_bags["rosbag2-sqlite"]], topics, anchor="cloud",
                               windows={"imu": 0.1})
    want = [_sample_times((ds, i)) for i in range(len(ds))]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(_sample_times, [(ds, i) for i in range(len(ds))]) == want


def test_bad_arguments(bags):
    path = bags[0][0]
    topics = {name: s[0] for name, s in STREAMS.items()}
    for kwargs in ({"anchor": "lidar"}, {"anchor": "cloud", "stamp": "publish"}, {"anchor": "cloud", "match": "x"},
                   {"anchor": "imu", "windows": {"imu": 0.1}}, {"anchor": "cloud", "windows": {"gps": 1}}):
        with pytest.raises(ValueError):
            fastbag.SyncedDataset(path, topics, **kwargs)


def test_header_stamps_need_a_header(tmp_path):
    path = tmp_path / "plain.bag"
    with fastbag.Writer(path) as w:
        ints = w.add_connection("/n", "std_msgs/Int32", "int32 data\n")
        for k in range(3):
            w.write(ints, START + k, k.to_bytes(4, "little"))
    with pytest.raises(ValueError, match="has no header"):
        fastbag.SyncedDataset(path, {"n": "/n"}, anchor="n", stamp="header")
    ds = fastbag.SyncedDataset(path, {"n": "/n"}, anchor="n")
    assert len(ds) == 3 and ds[2]["n"]["data"] == 2 and ds[2]["time"] == START + 2


def _sample_times(args):
    ds, i = args
    sample = ds[i]
    return sample["time"], float(sample["cloud"]["x"].sum()), int(sample["image"].sum()), len(sample["imu"])


def test_pickles_without_open_files_and_works_in_worker_processes(bags):
    topics = {name: s[0] for name, s in STREAMS.items()}
    ds = fastbag.SyncedDataset([p for p, _ in bags], topics, anchor="cloud", windows={"imu": 0.1})
    ds[0]  # opens the bags in this process
    state = pickle.loads(pickle.dumps(ds))
    assert state._bags == {} and len(state) == len(ds)
    want = [_sample_times((ds, i)) for i in range(len(ds))]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.map(_sample_times, [(ds, i) for i in range(len(ds))]) == want
    with multiprocessing.get_context("fork").Pool(2) as pool:  # inherits the parent's open bags: reopens its own
        assert pool.map(_sample_times, [(ds, i) for i in range(len(ds))]) == want


def test_collate():
    samples = [{"time": 1, "a": np.zeros((2, 3)), "r": np.zeros(k), "times": {"x": 5}, "s": "text"}
               for k in (1, 2)]
    batch = fastbag.collate(samples, tensors=False)
    assert batch["a"].shape == (2, 2, 3) and batch["time"].tolist() == [1, 1]
    assert isinstance(batch["r"], list) and [len(r) for r in batch["r"]] == [1, 2]
    assert batch["times"]["x"].tolist() == [5, 5] and batch["s"] == ["text", "text"]
    rows = np.zeros(2, dtype=[("x", "<f8")])
    assert fastbag.collate([rows[0], rows[1]], tensors=False).dtype == rows.dtype
    points = np.zeros(4, dtype=[("x", "<f4"), ("ring", "<u2")])
    assert fastbag.collate([points, points], tensors=False).dtype == points.dtype
    if __import__("importlib").util.find_spec("torch"):
        batch = fastbag.collate([points, points])
        assert set(batch) == {"x", "ring"} and tuple(batch["x"].shape) == (2, 4)
        labelled = np.zeros(3, dtype=[("x", "<f4"), ("frame", "U4")])  # text: stays one NumPy array
        assert fastbag.collate([labelled, labelled]).dtype == labelled.dtype


def test_dataloader_with_two_workers_yields_what_one_process_does(bags):
    torch = pytest.importorskip("torch", reason="torch is not installed: the DataLoader path is untested here")
    topics = {name: s[0] for name, s in STREAMS.items()}
    ds = fastbag.SyncedDataset([p for p, _ in bags], topics, anchor="cloud", windows={"imu": 0.1})

    def batches(workers):
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=fastbag.collate)
        return list(loader)

    single, parallel = batches(0), batches(2)
    assert len(single) == len(parallel) == -(-len(ds) // 4)
    for one, two in zip(single, parallel):
        assert isinstance(one["image"], torch.Tensor) and one["image"].shape[1:] == (6, 8, 3)
        assert torch.equal(one["image"], two["image"]) and torch.equal(one["time"], two["time"])
        assert set(one["cloud"]) == {"x", "y", "z", "intensity", "ring", "time"}  # a tensor per point field
        for name, column in one["cloud"].items():
            assert isinstance(column, torch.Tensor) and column.shape == (len(one["time"]), 32, 10)
            assert torch.equal(column, two["cloud"][name])
        assert one["cloud"]["ring"].dtype == torch.uint16
        for a, b in zip(one["imu"], two["imu"]):
            np.testing.assert_array_equal(a, b)
    assert np.array_equal(single[0]["cloud"]["x"][0].numpy(), ds[0]["cloud"]["x"])


def test_real_rosbag2_recording():
    """A real rosbag2 sqlite3 recording: samples against a brute-force nearest search over every message's
    receive time, values as ``read`` gives them (JointState varies in length: its dict)."""
    from tests.conftest import data_file
    from tests.test_convert_tables import plain  # (imports pyarrow, pandas...: skips this test without them)

    path = data_file("db3/peterheim1__ros_bags__first_2")
    topics = {"cmd": "/cmd_vel", "joints": "/joint_states", "serial": "/base_serial"}
    ds = fastbag.SyncedDataset(path, topics, anchor="cmd", tolerance=0.05, windows={"serial": 0.5})
    with fastbag.open(path) as bag:
        cmd, joints, serial = (bag.read(t) for t in topics.values())
    expected = []
    for a, t in enumerate(cmd.time.tolist()):
        d = np.abs(joints.time - t)
        j = int(np.argmin(d))
        if d[j] <= 50_000_000:
            expected.append((a, j, np.flatnonzero((serial.time > t - 500_000_000) & (serial.time <= t))))
    assert 100 < len(ds) == len(expected) <= len(cmd)
    for i in np.linspace(0, len(ds) - 1, 40).astype(int).tolist():
        a, j, inside = expected[i]
        sample = ds[i]
        assert sample["time"] == cmd.time[a] and sample["times"]["joints"] == joints.time[j]
        assert sample["cmd"] == cmd.to_numpy()[a]
        assert plain(sample["joints"]) == plain(joints[j].to_dict())
        assert sample["times"]["serial"].tolist() == serial.time[inside].tolist()
        assert plain(list(sample["serial"]["data"])) == plain(list(serial["data"][inside]))


def _resident_kib(address: int) -> int:
    """Rss of the mapping holding `address`, from /proc/self/smaps."""
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the address")


def test_populate_maps_a_fresh_shared_batch_in_one_call():
    """collate's shared storage is mapped before it is written (one madvise, not a fault per page)."""
    import platform

    torch = pytest.importorskip("torch", reason="torch is not installed: collate makes no shared storage here")
    from fastbag.convert.dataset import _populate

    release = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit())
    if platform.system() != "Linux" or release < (5, 14):
        pytest.skip(f"MADV_POPULATE_WRITE needs Linux 5.14 (this is {platform.system()} {platform.release()})")
    storage = torch.UntypedStorage._new_shared(8 << 20)
    before = _resident_kib(storage.data_ptr())
    _populate(storage.data_ptr(), storage.nbytes())
    assert before < 1024 and _resident_kib(storage.data_ptr()) >= 8 << 10
    assert bytes(storage[:16]) == bytes(16)  # fresh memory still reads as zeros
