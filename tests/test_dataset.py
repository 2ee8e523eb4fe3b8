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
            inside = inside[np.argsort(times["imu"][inside], kind="stable")]  # in time order (by stamp)
            samples.append((int(a), rows, inside))
    return samples


def stamps_of(rows):
    """header.stamp of structured rows in int ns (ROS 1 secs/nsecs, ROS 2 sec/nanosec)."""
    stamp = rows["header"]["stamp"]
    secs, nsecs = ("secs", "nsecs") if "secs" in stamp.dtype.names else ("sec", "nanosec")
    return stamp[secs].astype(np.int64) * 10**9 + stamp[nsecs]


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
        assert sample["times"]["imu"].tolist() == written["imu"][which][inside].tolist()
        if stamp == "header":  # row j is the message of times[j] (header stamps lag receive times at random)
            assert stamps_of(sample["imu"]).tolist() == sample["times"]["imu"].tolist()
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


def test_windows_of_sensor_topics_give_lists_of_their_values(bags):
    """A window on an Image or PointCloud2 topic gave whole message rows, a structured array or a TopicArray
    by whether the window's messages had one size: now a list of pixels or points, as one message gives them."""
    path, written = bags[0]
    topics = {name: topic for name, (topic, *_) in STREAMS.items()}
    ds = fastbag.SyncedDataset(path, topics, anchor="imu", windows={"cloud": 0.3, "image": 0.3})
    with fastbag.open(path) as bag:
        images, clouds = bag.read("/camera/image_raw"), bag.read("/points")
        for i in (0, len(ds) // 2, len(ds) - 1):
            sample = ds[i]
            for name, topic, helper in (("image", images, fastbag.image), ("cloud", clouds, fastbag.pointcloud)):
                value, times = sample[name], sample["times"][name]
                assert isinstance(value, list) and len(value) == times.size
                inside = np.flatnonzero(np.isin(topic.time, times))
                assert inside.size == times.size
                for got, k in zip(value, inside):
                    want = helper(topic[int(k)])
                    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert any(len(ds[i]["image"]) > 1 for i in range(len(ds)))


def test_bad_arguments(bags):
    path = bags[0][0]
    topics = {name: s[0] for name, s in STREAMS.items()}
    for kwargs in ({"anchor": "lidar"}, {"anchor": "cloud", "stamp": "publish"}, {"anchor": "cloud", "match": "x"},
                   {"anchor": "imu", "windows": {"imu": 0.1}}, {"anchor": "cloud", "windows": {"gps": 1}}):
        with pytest.raises(ValueError):
            fastbag.SyncedDataset(path, topics, **kwargs)
    # A negative (or not finite) tolerance or window would leave no sample or empty windows, silently.
    for kwargs, name in (({"tolerance": -1}, "tolerance"), ({"tolerance": float("nan")}, "tolerance"),
                         ({"tolerance": float("inf")}, "tolerance"), ({"windows": {"imu": -0.5}}, r"windows\['imu'\]"),
                         ({"windows": {"imu": 0}}, r"windows\['imu'\]")):
        with pytest.raises(ValueError, match=name):
            fastbag.SyncedDataset(path, topics, anchor="cloud", **kwargs)
    assert len(fastbag.SyncedDataset(path, topics, anchor="cloud", tolerance=0)) == 0  # exact matches only: none
    # what is not a number of seconds, named; nanoseconds meant as seconds; names a sample already uses
    for kwargs, error, said in (
            ({"tolerance": None}, TypeError, "tolerance is a number of seconds, not NoneType"),
            ({"tolerance": "50ms"}, TypeError, "tolerance is a number of seconds, not str"),
            ({"tolerance": True}, TypeError, "tolerance is a number of seconds, not bool"),
            ({"windows": {"imu": "0.1"}}, TypeError, r"windows\['imu'\] is a number of seconds, not str"),
            ({"windows": [("imu", 0.1)]}, TypeError, "windows maps names of topics to seconds"),
            ({"tolerance": 50_000_000}, ValueError, "tolerance is in seconds: 50000000 is 579 days"),
            ({"worker": 2}, TypeError, "SyncedDataset got an unexpected keyword argument 'worker'")):
        with pytest.raises(error, match=said):
            fastbag.SyncedDataset(path, topics, anchor="cloud", **kwargs)
    assert fastbag.SyncedDataset(path, topics, anchor="cloud", tolerance=np.float32(0.05)).tolerance == \
        pytest.approx(0.05)
    with pytest.raises(TypeError, match="topics maps sample names to topics"):
        fastbag.SyncedDataset(path, list(topics.values()), anchor="cloud")
    for reserved in ("time", "times"):
        with pytest.raises(ValueError, match=f"'{reserved}' cannot name a topic"):
            fastbag.SyncedDataset(path, {**topics, reserved: "/imu"}, anchor="cloud")
    with pytest.raises(ValueError, match="no bag given"):
        fastbag.SyncedDataset([], topics, anchor="cloud")
    with pytest.raises(FileNotFoundError, match="no file matches"):
        fastbag.SyncedDataset(str(path.parent / "nothing*.bag"), topics, anchor="cloud")
    # a glob names the bags, sorted, as fastbag.dask takes them
    assert fastbag.SyncedDataset(str(path.parent / "run*.bag"), topics, anchor="cloud").paths == \
        sorted(str(p) for p in path.parent.glob("run*.bag"))


def test_errors_skip_passes_over_bags_that_cannot_be_read_or_lack_a_topic(bags, tmp_path):
    """One bag of a fleet lacking a topic, or an empty file a crashed recorder left, aborted the whole dataset
    (QA); with errors="skip", as fastbag.dask takes it, each is passed over with a warning naming it."""
    topics = {name: s[0] for name, s in STREAMS.items()}
    no_imu = tmp_path / "no_imu.bag"
    with fastbag.open(bags[0][0]) as source, fastbag.Writer(no_imu) as writer:
        conns = {}
        for m in source.messages(topics=["/points", "/camera/image_raw"], raw=True):
            c = m.connection
            if c.id not in conns:
                conns[c.id] = writer.add_connection(c.topic, c.msgtype, c.definition, c.md5sum)
            writer.write(conns[c.id], m.time, bytes(m.data))
    empty = tmp_path / "crashed.bag"
    empty.write_bytes(b"")
    paths = [bags[0][0], no_imu, empty, bags[1][0]]
    with pytest.raises(fastbag.NotFoundError, match="/imu"):
        fastbag.SyncedDataset(paths, topics, anchor="cloud")
    with pytest.warns(fastbag.FastbagWarning) as said:
        ds = fastbag.SyncedDataset(paths, topics, anchor="cloud", errors="skip")
    assert [str(w.message).split(":")[0] for w in said] == [f"SyncedDataset passed over {no_imu}",
                                                            f"SyncedDataset passed over {empty}"]
    assert "/imu" in str(said[0].message)
    good = fastbag.SyncedDataset([bags[0][0], bags[1][0]], topics, anchor="cloud")
    assert ds.paths == good.paths and len(ds) == len(good) > 0
    for i in (0, len(ds) // 2, -1):
        assert ds.sample_bag(i) == good.sample_bag(i) and ds[i]["times"] == good[i]["times"]
        assert np.array_equal(ds[i]["cloud"], good[i]["cloud"]) and np.array_equal(ds[i]["imu"], good[i]["imu"])
    with pytest.warns(fastbag.FastbagWarning), pytest.raises(fastbag.FastbagError, match="none of the 2 bags"):
        fastbag.SyncedDataset([no_imu, empty], topics, anchor="cloud", errors="skip")
    with pytest.raises(ValueError, match="errors is 'raise' or 'skip'"):
        fastbag.SyncedDataset(paths, topics, anchor="cloud", errors="ignore")


def test_an_empty_dataset_says_why(bags):
    topics = {name: s[0] for name, s in STREAMS.items()}
    ds = fastbag.SyncedDataset([p for p, _ in bags], topics, anchor="cloud", tolerance=1e-9)
    anchors = sum(len(w["cloud"][0]) for _, w in bags)
    assert len(ds) == 0
    # per topic, the anchors with a match of their own (within 1 ns), found by brute force
    counts = {name: sum(int((np.abs(w[name][0][:, None] - w["cloud"][0][None, :]) <= 1).any(axis=0).sum())
                        for _, w in bags) for name in ("image", "imu")}
    said = (f"the dataset is empty: none of the {anchors} messages of the anchor 'cloud' (/points) has a match "
            f"within tolerance=1e-09 s on every other topic ('image' (/camera/image_raw) matches {counts['image']}; "
            f"'imu' (/imu) matches {counts['imu']})")
    for access in (lambda: ds[0], lambda: ds.sample_bag(0), lambda: ds[-1]):
        with pytest.raises(IndexError) as caught:
            access()
        assert str(caught.value) == said
    windowed = fastbag.SyncedDataset([p for p, _ in bags], topics, anchor="cloud", tolerance=1e-9, windows={"imu": 0.1})
    with pytest.raises(IndexError, match=r"on every other topic \('image' \(/camera/image_raw\) matches \d+\)$"):
        windowed[0]  # (a window needs no match: only the image's count is said)


def test_an_empty_dataset_of_unfilled_header_stamps_says_so(tmp_path):
    """A driver that never fills header.stamp (all 0) matched nothing by stamp="header", and the error gave
    only the counts."""
    rng = np.random.default_rng(0)
    times = START + np.arange(20, dtype=np.int64) * 50_000_000
    with fastbag.Writer(tmp_path / "zero.bag") as w:
        cam = w.add_connection("/cam", IMAGE.name, IMAGE.definition, IMAGE.md5sum)
        gyro = w.add_connection("/imu", IMU.name, IMU.definition, IMU.md5sum)
        for t, frame, row in zip(times.tolist(), image(np.zeros(20, dtype=np.int64), rng, 4, 4), imu(times, rng)):
            w.write(cam, t, frame)
            w.write(gyro, t + 1, row)
    topics = {"cam": "/cam", "imu": "/imu"}
    with pytest.raises(IndexError, match=r"\('cam' \(/cam\) matches 0\); the header stamps of 'cam' are all 0 "
                                         r"\(never filled in\): stamp='receive' matches by receive times$"):
        fastbag.SyncedDataset(tmp_path / "zero.bag", topics, anchor="imu", stamp="header")[0]
    assert len(fastbag.SyncedDataset(tmp_path / "zero.bag", topics, anchor="imu", stamp="receive")) == 20


def test_sample_indexes_are_integers(bags):
    topics = {name: s[0] for name, s in STREAMS.items()}
    ds = fastbag.SyncedDataset([p for p, _ in bags], topics, anchor="cloud")
    for index in (True, False, np.True_, 1.0, np.float64(1), "1", None):
        with pytest.raises(TypeError, match="a sample index is an integer"):
            ds[index]
        with pytest.raises(TypeError, match="a sample index is an integer"):
            ds.sample_bag(index)
    assert ds[np.int64(1)]["time"] == ds[np.uint8(1)]["time"] == ds[1]["time"] != ds[0]["time"]
    assert ds[np.int32(-1)]["time"] == ds[len(ds) - 1]["time"]
    assert ds.sample_bag(np.int64(-1)) == str(bags[-1][0]) and ds.sample_bag(0) == str(bags[0][0])
    with pytest.raises(IndexError):
        ds.sample_bag(len(ds))


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


def test_a_fleet_keeps_at_most_max_open_bags_open_and_samples_as_with_all_open(bags, tmp_path):
    """Every bag a dataset touched stayed open: 500 recordings held 500 mappings, descriptors and caches, and
    a fleet past the descriptor limit could not be built (QA). Now at most ``max_open_bags`` stay open, the
    least recently used closed and opened again when a sample needs it; samples are those of a dataset that
    keeps all open, also with threads sampling at once (a bag in use is never closed under its read)."""
    import concurrent.futures
    import random

    topics = {name: s[0] for name, s in STREAMS.items()}
    paths = []
    for k in range(6):  # six recordings: links to the two bags
        paths.append(tmp_path / f"run{k}.bag")
        paths[-1].symlink_to(bags[k % 2][0])
    every = fastbag.SyncedDataset(paths, topics, anchor="cloud", windows={"imu": 0.1})
    few = fastbag.SyncedDataset(paths, topics, anchor="cloud", windows={"imu": 0.1}, max_open_bags=2)
    assert len(every._bags) == 6 and len(few._bags) == 2 and len(few) == len(every) > 0
    order = list(range(len(few)))
    random.Random(3).shuffle(order)
    want = {i: _sample_times((every, i)) for i in order}
    opened = []
    for i in order[:60]:
        assert _sample_times((few, i)) == want[i]
        opened.append(len(few._bags))
    assert max(opened) == 2
    one = fastbag.SyncedDataset(paths, topics, anchor="cloud", windows={"imu": 0.1}, max_open_bags=1)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda i: _sample_times((one, i)), order)) == [want[i] for i in order]
    assert len(one._bags) == 1 and not any(one._in_use.values())
    state = pickle.loads(pickle.dumps(few))
    assert state._bags == {} and state.max_open_bags == 2 and _sample_times((state, order[0])) == want[order[0]]
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_open_bags is an int of at least 1"):
            fastbag.SyncedDataset(paths, topics, anchor="cloud", max_open_bags=bad)
    for ds in (every, few, one, state):
        ds.close()


def test_a_bag_replaced_under_its_path_is_refused_when_reopened(bags, tmp_path):
    """A recording replaced under its path after the dataset indexed it was reopened (its handle closed by
    max_open_bags) and read at the old index's positions: another recording's messages as this one's
    samples, in silence (QA). Its files' sizes and times are now checked at each reopen."""
    import os
    import shutil

    topics = {name: s[0] for name, s in STREAMS.items()}
    a, b = tmp_path / "a.bag", tmp_path / "b.bag"
    shutil.copy(bags[0][0], a)
    shutil.copy(bags[1][0], b)
    ds = fastbag.SyncedDataset([a, b], topics, anchor="cloud", max_open_bags=1)
    first = _sample_times((ds, 0))
    last = _sample_times((ds, len(ds) - 1))  # (b opened: a closed)
    assert _sample_times((ds, 0)) == first  # reopened unchanged: read as before
    _sample_times((ds, len(ds) - 1))
    shutil.copy(bags[1][0], tmp_path / "new.bag")
    os.replace(tmp_path / "new.bag", a)  # another recording under a's path
    with pytest.raises(fastbag.FastbagError, match=f"{a} changed since SyncedDataset indexed it"):
        ds[0]
    state = pickle.loads(pickle.dumps(ds))  # (a worker process checks as well)
    with pytest.raises(fastbag.FastbagError, match="changed since"):
        state[0]
    assert _sample_times((ds, len(ds) - 1)) == last  # b is as it was
    ds.close()


def test_collate():
    samples = [{"time": 1, "a": np.zeros((2, 3)), "r": np.zeros(k), "times": {"x": 5}, "s": "text"}
               for k in (1, 2)]
    batch = fastbag.collate(samples, tensors=False)
    assert batch["a"].shape == (2, 2, 3) and batch["time"].tolist() == [1, 1]
    assert isinstance(batch["r"], list) and [len(r) for r in batch["r"]] == [1, 2]
    assert batch["times"]["x"].tolist() == [5, 5] and batch["s"] == ["text", "text"]
    with pytest.raises(ValueError, match=r"different keys: \['a'\] and \['b'\]"):  # as torch refuses them
        fastbag.collate([{"a": np.zeros(1)}, {"b": np.zeros(1)}], tensors=False)
    rows = np.zeros(2, dtype=[("x", "<f8")])
    assert fastbag.collate([rows[0], rows[1]], tensors=False).dtype == rows.dtype
    points = np.zeros(4, dtype=[("x", "<f4"), ("ring", "<u2")])
    assert fastbag.collate([points, points], tensors=False).dtype == points.dtype
    if __import__("importlib").util.find_spec("torch"):
        batch = fastbag.collate([points, points])
        assert set(batch) == {"x", "ring"} and tuple(batch["x"].shape) == (2, 4)
        labelled = np.zeros(3, dtype=[("x", "<f4"), ("frame", "U4")])
        labelled["frame"] = ["a", "bb", "ccc"]
        batch = fastbag.collate([labelled, labelled])  # a struct holding text: one structured array
        assert isinstance(batch, np.ndarray) and batch["x"].shape == (2, 3)
        assert batch["frame"].tolist() == [["a", "bb", "ccc"]] * 2
        assert fastbag.collate([np.array(["a", "bb"]), np.array(["c", "d"])]) == [["a", "bb"], ["c", "d"]]


def test_collate_without_torch_stacks_rows_whose_text_differs_in_length():
    """Each message's text is as wide as it is long ('<U3', '<U4'): one structured array all the same."""
    rows = [np.array(("imu", 1.5), dtype=[("frame", "U3"), ("x", "<f8")])[()],
            np.array(("base", 2.5), dtype=[("frame", "U4"), ("x", "<f8")])[()]]
    batch = fastbag.collate(rows, tensors=False)
    assert isinstance(batch, np.ndarray) and batch.dtype == np.dtype([("frame", "U4"), ("x", "<f8")])
    assert batch["frame"].tolist() == ["imu", "base"] and batch["x"].tolist() == [1.5, 2.5]
    words = fastbag.collate([np.array(["a", "bb"]), np.array(["ccc", "d"])], tensors=False)
    assert words.dtype == np.dtype("U3") and words.tolist() == [["a", "bb"], ["ccc", "d"]]


def test_collate_numbers_of_dicts_exactly():
    """A sample of a type with arrays of messages is a dict of Python values (``to_dict``): its uint64 fields
    are ints of up to 2**64 - 1, which stacked one by one NumPy promoted beside an int64 0 to float64 (and
    the tensor wrapped to -1); bools came back as a list (QA)."""
    big = [0, 2**64 - 1, 2**63, 2**63 + 1]
    assert fastbag.collate(big, tensors=False).dtype == np.uint64
    assert fastbag.collate(big, tensors=False).tolist() == big
    assert fastbag.collate([1, -2], tensors=False).dtype == np.int64
    assert fastbag.collate([-1, 2**64 - 1], tensors=False) == [-1, 2**64 - 1]  # no integer type holds both
    assert fastbag.collate([True, np.bool_(False)], tensors=False).tolist() == [True, False]
    assert fastbag.collate([1, True], tensors=False) == [1, True]  # a bool is no number of a batch
    assert fastbag.collate([np.float32(1.5), np.float32(2)], tensors=False).dtype == np.float32
    torch = pytest.importorskip("torch", reason="torch is not installed")
    assert fastbag.collate(big).dtype == torch.uint64 and fastbag.collate(big).numpy().tolist() == big
    assert fastbag.collate([True, False]).dtype == torch.bool


def test_collate_stacks_rows_whose_text_ends_in_nuls():
    """A string ending in NULs is an object field (NumPy's str arrays cut them): the rows still stack into one
    structured array, as rows of the same type whose text is plain do (the batch type follows the message
    type, not the text; it was a list, QA)."""
    plain = np.array(("imu", 1.5), dtype=[("frame", "U3"), ("x", "<f8")])[()]
    nuls = np.array(("abc\0\0", 2.5), dtype=[("frame", "O"), ("x", "<f8")])[()]
    for tensors in (False, True):
        batch = fastbag.collate([plain, nuls], tensors=tensors)
        assert isinstance(batch, np.ndarray) and batch["frame"].tolist() == ["imu", "abc\0\0"]
        assert batch["x"].tolist() == [1.5, 2.5]


def test_collate_ragged_values_are_lists_of_tensors():
    """What varies in size per sample is a list, of the tensors a stack would have held, field by field."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    clouds = [np.zeros(k, dtype=[("x", "<f4"), ("ring", "<u2")]) for k in (2, 3)]
    clouds[1]["x"] = [1, 2, 3]
    batch = fastbag.collate([{"cloud": c, "jpeg": np.arange(k, dtype=np.uint8)} for k, c in zip((4, 5), clouds)])
    assert set(batch["cloud"]) == {"x", "ring"} and [t.tolist() for t in batch["cloud"]["ring"]] == [[0, 0], [0] * 3]
    assert [t.tolist() for t in batch["cloud"]["x"]] == [[0, 0], [1, 2, 3]]
    # Rows holding text (a window of messages with a header) in windows of two counts: a list of their arrays.
    rows = [np.zeros(k, dtype=[("x", "<f4"), ("frame", "U3")]) for k in (2, 3)]
    together = fastbag.collate(rows)
    assert isinstance(together, list) and [r.size for r in together] == [2, 3]
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in batch["jpeg"])
    assert [t.tolist() for t in batch["jpeg"]] == [[0, 1, 2, 3], [0, 1, 2, 3, 4]]
    # One LaserScan's row holds its ranges as an array of its count: scans of two counts, one dict all the same.
    scans = [np.zeros((), dtype=[("angle_min", "<f4"), ("ranges", "<f4", (k,))])[()] for k in (3, 4)]
    batch = fastbag.collate(scans)
    assert batch["angle_min"].tolist() == [0, 0] and [t.shape[0] for t in batch["ranges"]] == [3, 4]
    assert isinstance(fastbag.collate(scans, tensors=False), list)  # NumPy: one structured array cannot hold both


def test_collate_batch_types_follow_the_message_type():
    """Real recordings: a Pose row collates as a point cloud does, a dict of tensors (by dotted path); Imu rows
    (a header: text) are one structured array, also where frame_id differs in length ('imu', '/imu'), in every
    shuffled batch (they were a list where the widths differed)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from tests.conftest import data_file

    ds = fastbag.SyncedDataset(data_file("ros1v2/eric-wieser__ros_numpy__test__test.bag"),
                               {"cloud": "/pointcloud", "pose": "/pose"}, anchor="cloud", tolerance=0.01)
    batch = fastbag.collate([ds[0], ds[0]])
    assert list(batch["pose"]) == ["position.x", "position.y", "position.z", "orientation.x", "orientation.y",
                                   "orientation.z", "orientation.w"]
    for name, column in batch["pose"].items():
        path = name.split(".")
        assert isinstance(column, torch.Tensor) and column.dtype == torch.float64
        assert column.tolist() == [float(ds[0]["pose"][path[0]][path[1]])] * 2
    assert all(isinstance(column, torch.Tensor) for column in batch["cloud"].values())

    folder = "ros1v2/CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__"
    ds = fastbag.SyncedDataset([data_file(folder + "phidgets_imu_upside_down.bag"),
                                data_file(folder + "sparkfun_razor.bag")],
                               {"imu": "/imu/data_raw", "mag": "/imu/mag"}, anchor="imu", tolerance=0.002)
    x, y = ds[0], ds[len(ds) - 1]
    assert x["imu"]["header"]["frame_id"].dtype != y["imu"]["header"]["frame_id"].dtype  # <U3, <U4
    mixed, same = fastbag.collate([x, y]), fastbag.collate([x, x])  # rows with a header: structured arrays
    assert mixed["imu"]["header"]["frame_id"].tolist() == [str(x["imu"]["header"]["frame_id"]),
                                                           str(y["imu"]["header"]["frame_id"])] == ["imu", "/imu"]
    assert mixed["imu"]["linear_acceleration"]["z"].tolist() == [x["imu"]["linear_acceleration"]["z"],
                                                                 y["imu"]["linear_acceleration"]["z"]]
    assert tuple(mixed["imu"]["orientation_covariance"].shape) == (2, 9)
    assert isinstance(same["imu"], np.ndarray) and same["imu"].dtype.names == mixed["imu"].dtype.names
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True, collate_fn=fastbag.collate,
                                         generator=torch.Generator().manual_seed(0))
    for _, batch in zip(range(100), loader):  # one batch type, whatever the frame_ids' lengths
        assert isinstance(batch["imu"], np.ndarray) and batch["imu"].dtype.names == same["imu"].dtype.names
        assert isinstance(batch["mag"], np.ndarray) and batch["mag"]["magnetic_field"]["x"].shape == (4,)


def test_collate_rows_with_text_in_an_array_of_structs_are_one_structured_array():
    """A TFMessage row holds its text inside the structs of ``transforms``: it collated as a dict of a dozen
    tensors and lists of lists (QA), where a row holding text is one structured array (README), or a list
    of the rows where their counts differ. Without tensors (no torch), the rows' common dtype came from
    np.result_type, whose promotion of an array of structs keeps its old size: the stacked rows overlapped."""
    def tf_row(count: int, frame: str) -> np.void:
        row = np.zeros((), dtype=[("transforms", [("header", [("seq", "<u4"), ("frame_id", f"<U{len(frame)}")]),
                                                  ("x", "<f8")], (count,))])
        row["transforms"]["header"]["frame_id"] = frame
        row["transforms"]["x"] = np.arange(count)
        return row[()]

    for tensors in (True, False):  # (True: the path with torch, whether or not it is installed)
        batch = fastbag.collate([tf_row(2, "map"), tf_row(2, "odom")], tensors=tensors)
        assert isinstance(batch, np.ndarray) and batch.shape == (2,)
        assert batch["transforms"]["header"]["frame_id"].tolist() == [["map", "map"], ["odom", "odom"]]
        assert batch["transforms"]["x"].tolist() == [[0, 1], [0, 1]]
        rows = [tf_row(1, "map"), tf_row(2, "map")]
        assert fastbag.collate(rows, tensors=tensors) == rows


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
        # windows of Imu rows (with a header: text) of varying counts: a list of one structured array per sample
        assert isinstance(one["imu"], list) and len(one["imu"]) == len(two["imu"]) == len(one["time"])
        for a, b in zip(one["imu"], two["imu"]):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
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
    # (all 8 MiB mapped; a loaded host may already have reclaimed a page or two: CI saw 8184 KiB once)
    assert before < 1024 and _resident_kib(storage.data_ptr()) >= (8 << 10) * 0.99
    assert bytes(storage[:16]) == bytes(16)  # fresh memory still reads as zeros
