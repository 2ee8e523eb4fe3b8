"""fastbag.dask: read_topic / read_array over several bags equal the concatenation of single-bag reads,
on a distributed LocalCluster with 2 worker processes; nothing is decoded until computed."""

from __future__ import annotations

import numpy as np
import pytest

import fastbag
from fastbag.tooling.synth import IMU, imu

pd = pytest.importorskip("pandas")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")


def write_imu_bag(path, start, n, seed):
    times = start + np.arange(n, dtype=np.int64) * 5_000_000
    with fastbag.Writer(path, chunk_size=32 * 1024) as w:
        conn = w.add_connection("/imu", IMU.name, IMU.definition, IMU.md5sum)
        for t, data in zip(times.tolist(), imu(times, np.random.default_rng(seed))):
            w.write(conn, t, data)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fleet")
    for k in range(3):  # one after another in time
        write_imu_bag(folder / f"run{k}.bag", 1_700_000_000 * 10**9 + k * 100 * 10**9, 3000 + 500 * k, k)
    return folder


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


def expected(paths):
    frames = []
    for path in paths:
        with fastbag.open(path) as bag:
            frames.append(bag.read("/imu").to_pandas())
    return pd.concat(frames)


def same_frame(got, want):
    """Equal frames; dask turns text columns into its own string dtype (only the missing-value marker differs)."""
    for name in want.columns:
        if isinstance(want[name].dtype, pd.StringDtype):
            assert isinstance(got[name].dtype, pd.StringDtype)
            got[name] = got[name].astype(want[name].dtype)
        elif isinstance(got[name].dtype, pd.StringDtype) and want[name].dtype == object:
            got[name] = got[name].astype(object)  # (pandas 2: text is object, which dask makes its string dtype)
    pd.testing.assert_frame_equal(got, want)


def test_read_topic_equals_single_bag_reads_on_worker_processes(fleet, client):
    paths = sorted(fleet.glob("run*.bag"))
    ddf = fastbag.dask.read_topic(str(fleet / "run*.bag"), "/imu", step=1000)
    assert ddf.known_divisions and ddf.npartitions > 3
    want = expected(paths)
    assert ddf.divisions[0] == want.index[0] and ddf.divisions[-1] == want.index[-1]
    got = client.compute(ddf).result()
    same_frame(got, want)
    mean = client.compute(ddf["linear_acceleration.z"].mean()).result()
    assert mean == pytest.approx(want["linear_acceleration.z"].mean(), rel=1e-12)
    # Workers did the reading: the tasks ran in other processes.
    assert len(client.scheduler_info()["workers"]) == 2
    # Divisions are usable: a time slice touches only the partitions it needs.
    t = want.index[len(want) // 2]
    same_frame(client.compute(ddf.loc[t:]).result(), want.loc[t:])


def test_read_array(fleet, client):
    paths = sorted(fleet.glob("run*.bag"))
    arr = fastbag.dask.read_array(paths, "/imu", "linear_acceleration", step="64 kB")
    with_x = fastbag.dask.read_array(paths, "/imu", "linear_acceleration.x", step="64 kB")
    want = []
    for path in paths:
        with fastbag.open(path) as bag:
            want.append(bag.read("/imu")["linear_acceleration"])
    want = np.concatenate(want)
    assert arr.shape == want.shape and arr.dtype == want.dtype and arr.numblocks[0] > 3
    np.testing.assert_array_equal(client.compute(arr).result(), want)
    np.testing.assert_array_equal(client.compute(with_x).result(), want["x"])
    cov = fastbag.dask.read_array(paths, "/imu", "orientation_covariance")
    assert cov.shape == (len(want), 9)
    with pytest.raises(ValueError, match=r"field .header.frame_id. is of variable length in its definition "
                                         r".*fixed-size"):
        fastbag.dask.read_array(paths, "/imu", "header.frame_id")


def test_nothing_is_decoded_until_computed(fleet, monkeypatch):
    from fastbag.bag import Bag

    decoded = []
    real = Bag._read_rows

    def counting(self, topic, scope, selected, **options):
        decoded.append(int(selected.size))
        return real(self, topic, scope, selected, **options)

    monkeypatch.setattr(Bag, "_read_rows", counting)
    ddf = fastbag.dask.read_topic(sorted(fleet.glob("run*.bag")), "/imu", step=1000)
    assert set(decoded) <= {0}  # only the empty read that gives the columns
    assert len(ddf.compute(scheduler="sync")) == sum(decoded) == 3000 + 3500 + 4000


def test_overlapping_bags_give_unknown_divisions(fleet, tmp_path):
    write_imu_bag(tmp_path / "early.bag", 1_700_000_000 * 10**9 + 10**9, 800, 9)  # inside run0's time span
    paths = [fleet / "run0.bag", tmp_path / "early.bag"]
    ddf = fastbag.dask.read_topic(paths, "/imu", step=300)
    assert not ddf.known_divisions
    same_frame(ddf.compute(scheduler="sync"), expected(paths))
    with pytest.raises(KeyError):
        fastbag.dask.read_topic(paths, "/nope")
    with pytest.raises(TypeError, match="fastbag.dask.read_topic got an unexpected keyword argument 'start'"):
        fastbag.dask.read_topic(paths, "/imu", start=0)
    with pytest.raises(TypeError, match="fastbag.dask.read_array got an unexpected keyword argument 'end'"):
        fastbag.dask.read_array(paths, "/imu", "linear_acceleration", end=0)


@pytest.fixture(scope="module")
def ros2_fleet(fleet, tmp_path_factory):
    """The fleet as ROS2 writes it: MCAP files (zstd chunks) and rosbag2 sqlite3 directories, one per bag."""
    synth_mcap = pytest.importorskip("fastbag.tooling.synth_mcap")
    pytest.importorskip("mcap", reason="the mcap package writes the MCAP recordings")
    folder = tmp_path_factory.mktemp("fleet-ros2")
    mcaps, sqlites = [], []
    for path in sorted(fleet.glob("run*.bag")):
        mcaps.append(synth_mcap.write_rosbag2_mcap(path, folder / f"{path.stem}-mcap", compression="zstd"))
        sqlites.append(synth_mcap.write_rosbag2_sqlite(path, folder / f"{path.stem}-db3"))
    return {"mcap": mcaps, "rosbag2-sqlite": sqlites}


@pytest.mark.parametrize("form", ["mcap", "rosbag2-sqlite"])
def test_read_topic_and_array_on_other_formats(fleet, ros2_fleet, client, form):
    """MCAP files and rosbag2 directories: the frames equal single-bag reads, on worker processes, and hold
    the ROS1 fleet's values (CDR's Header has no seq)."""
    paths = ros2_fleet[form]
    ddf = fastbag.dask.read_topic(paths, "/imu", step=1000)
    # A part never cuts a chunk: MCAP's are 768 KiB, a rosbag2 sqlite3 bag's 16 MB of one topic's blobs.
    parts = []
    for path in paths:
        with fastbag.open(path) as bag:
            parts.append(len(bag.part_bounds("/imu", 1000)))
    assert ddf.known_divisions and ddf.npartitions == sum(parts)
    assert (parts == [1, 1, 1]) if form == "rosbag2-sqlite" else (min(parts) > 1)
    want = expected(paths)
    same_frame(client.compute(ddf).result(), want)
    ros1 = expected(sorted(fleet.glob("run*.bag")))
    assert want.index.equals(ros1.index)
    for column in want.columns:
        if column.startswith(("orientation", "angular_velocity", "linear_acceleration")):
            np.testing.assert_array_equal(want[column].to_numpy(), ros1[column].to_numpy(), err_msg=column)
    arr = fastbag.dask.read_array(paths, "/imu", "linear_acceleration.z", step=1000)
    assert arr.numblocks[0] == ddf.npartitions
    np.testing.assert_array_equal(client.compute(arr).result(), ros1["linear_acceleration.z"].to_numpy())


def test_read_topic_on_real_ros2_recordings(monkeypatch):
    """A real split recording (five MCAP files of one rosbag2 run) and a real sqlite3 rosbag2 directory."""
    from tests.conftest import DATA, data_file

    data_file("mcap")
    split = sorted((DATA / "mcap" / "ros2__rosbag2__rosbag2_py__test__resources__mcap__wbag").glob("*.mcap"))
    assert len(split) == 5
    ddf = fastbag.dask.read_topic(split, "AAA", step=50)
    assert ddf.npartitions >= len(split)
    frames = []
    for path in split:
        with fastbag.open(path) as bag:
            frames.append(bag.read("AAA").to_pandas())
    want = pd.concat(frames)
    same_frame(ddf.compute(scheduler="sync"), want)
    assert want["data"].str.len().min() > 0 and len(want) == 804  # as the sqlite3 copy of the run holds
    sqlite = data_file("db3/peterheim1__ros_bags__first_2")
    from fastbag.rosbag2 import reader as rosbag2_reader

    monkeypatch.setattr(rosbag2_reader, "CHUNK_BYTES", 64 * 1024)  # chunks small enough to cut into parts
    ddf = fastbag.dask.read_topic(sqlite, "/joint_states", step=500)
    assert ddf.npartitions > 3
    with fastbag.open(sqlite) as bag:
        same_frame(ddf.compute(scheduler="sync"), bag.read("/joint_states").to_pandas())


def test_bags_of_two_message_types_fail_at_build_time():
    """Two real versions of one recording: /imu/mag is a MagneticField in one, a Vector3Stamped in the other.
    Building the collection raises (no lazy frame whose columns are the first bag's while the data mixes both)."""
    from tests.conftest import data_file

    folder = "ros1v2/CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__"
    paths = [data_file(folder + "sparkfun_razor.bag"), data_file(folder + "sparkfun_razor@940d7874.bag")]
    for build in (lambda: fastbag.dask.read_topic(paths, "/imu/mag"),
                  lambda: fastbag.dask.read_array(paths, "/imu/mag", "magnetic_field"),
                  lambda: fastbag.dask.read_array(paths[::-1], "/imu/mag", "vector")):
        with pytest.raises(ValueError, match="differs between the bags") as info:
            build()
        message = str(info.value)
        assert "sensor_msgs/MagneticField in " in message and "geometry_msgs/Vector3Stamped in " in message
        assert str(paths[0]) in message and str(paths[1]) in message
    # Each bag alone reads, with its own type's columns.
    alone = fastbag.dask.read_topic(paths[1:], "/imu/mag").compute(scheduler="sync")
    assert {"vector.x", "vector.y", "vector.z"} <= set(alone.columns) and len(alone) == 2144
    assert not any(c.startswith("magnetic_field") for c in alone.columns)


def write_vector_bag(path, msgtype, definition, rows, md5sum=None):
    """A bag of one topic "/v" whose messages are three float64 each (``rows``), 1 ms apart."""
    import struct

    from fastbag.msg.msgdef import parse_definition

    md5sum = parse_definition(msgtype, definition).md5sum() if md5sum is None else md5sum
    with fastbag.Writer(path) as w:
        conn = w.add_connection("/v", msgtype, definition, md5sum)
        for k, row in enumerate(rows):
            w.write(conn, 1_700_000_000 * 10**9 + k * 10**6, struct.pack("<3d", *row))
    return path


XYZ = "float64 x\nfloat64 y\nfloat64 z\n"


def test_same_columns_of_another_type_fail(tmp_path):
    """Two types with the same columns (and md5sums that differ) are still two types, not one frame; two names of
    one md5sum are one wire format, as a bag merges them (tf/tfMessage and tf2_msgs/TFMessage)."""
    rows = [(1.0, 2.0, 3.0), (4.0, 5.0, 6.0)]
    paths = [write_vector_bag(tmp_path / "a.bag", "geometry_msgs/Point", XYZ, rows),
             write_vector_bag(tmp_path / "b.bag", "my_msgs/P", "int8 KIND=2\n" + XYZ, rows)]
    for build in (lambda: fastbag.dask.read_topic(paths, "/v"), lambda: fastbag.dask.read_array(paths, "/v", "x")):
        with pytest.raises(ValueError, match=r"geometry_msgs/Point in .*a\.bag, my_msgs/P in .*b\.bag"):
            build()
    renamed = write_vector_bag(tmp_path / "c.bag", "geometry_msgs/Vector3", XYZ, rows)  # Point's md5sum
    got = fastbag.dask.read_topic([paths[0], renamed], "/v").compute(scheduler="sync")
    assert got["y"].tolist() == [2.0, 5.0, 2.0, 5.0]


def test_one_type_of_two_definitions(tmp_path):
    """One type name, two definitions: different fields fail naming the columns that differ (a field, by the
    md5sums or, without md5sums, the first line that differs); a definition that adds only a constant has the
    same columns and reads as one frame."""
    rows = [(1.0, 2.0, 3.0), (4.0, 5.0, 6.0)]
    renamed = "float64 x\nfloat64 y\nfloat64 w\n"
    paths = [write_vector_bag(tmp_path / "a.bag", "my_msgs/V", XYZ, rows),
             write_vector_bag(tmp_path / "b.bag", "my_msgs/V", renamed, rows)]
    from fastbag.msg.msgdef import parse_definition

    md5s = [parse_definition("my_msgs/V", text).md5sum() for text in (XYZ, renamed)]
    with pytest.raises(ValueError, match=r"my_msgs/V in .*a.bag and my_msgs/V in .*b.bag have different columns: "
                                         r"z \(float64 / absent\), w \(absent / float64\); one collection"):
        fastbag.dask.read_topic(paths, "/v")
    with pytest.raises(ValueError, match=f"my_msgs/V with md5sum {md5s[0]} in .*a.bag, md5sum {md5s[1]} in .*b.bag"):
        fastbag.dask.read_array(paths, "/v", "z")  # a's field z, b has none
    # The field x is the same in both: one array of both bags' values.
    np.testing.assert_array_equal(fastbag.dask.read_array(paths, "/v", "x").compute(scheduler="sync"), [1, 4, 1, 4])
    unknown = [write_vector_bag(tmp_path / "c.bag", "my_msgs/V", XYZ, rows, md5sum="*"),
               write_vector_bag(tmp_path / "d.bag", "my_msgs/V", renamed, rows, md5sum="*")]
    with pytest.raises(ValueError, match=r"c.bag and my_msgs/V in .*d.bag have different columns: z \(float64 / "):
        fastbag.dask.read_topic(unknown, "/v")
    with pytest.raises(ValueError, match="two definitions .*first difference: 'float64 z' / 'float64 w'"):
        fastbag.dask.read_array(unknown, "/v", "z")
    constant = write_vector_bag(tmp_path / "e.bag", "my_msgs/V", "int32 ONE=1\n" + XYZ, [(7.0, 8.0, 9.0)])
    got = fastbag.dask.read_topic([paths[0], constant], "/v").compute(scheduler="sync")
    assert got["z"].tolist() == [3.0, 6.0, 9.0]


def test_ros1_and_ros2_recordings_of_one_type(fleet, ros2_fleet):
    """sensor_msgs/Imu (ROS1) and sensor_msgs/msg/Imu (ROS2, no header.seq): not one frame, but one type, so a
    field both hold the same way is one array."""
    paths = [fleet / "run0.bag", ros2_fleet["mcap"][1]]
    with pytest.raises(ValueError, match="sensor_msgs/Imu in .* and sensor_msgs/msg/Imu in .* have different "
                                         r"columns: header.seq \(uint32 / absent\)"):
        fastbag.dask.read_topic(paths, "/imu")
    want = []
    for path in paths:
        with fastbag.open(path) as bag:
            want.append(bag.read("/imu")["linear_acceleration"]["z"])
    got = fastbag.dask.read_array(paths, "/imu", "linear_acceleration.z").compute(scheduler="sync")
    np.testing.assert_array_equal(got, np.concatenate(want))


def test_a_topic_without_messages_is_an_empty_collection(tmp_path, fleet):
    """A topic a bag records without messages: its columns (and a field's dtype), no rows; a topic no bag
    records is a NotFoundError."""
    empty = tmp_path / "empty.bag"
    with fastbag.Writer(empty) as w:
        w.add_connection("/imu", IMU.name, IMU.definition, IMU.md5sum)
    frame = fastbag.dask.read_topic(empty, "/imu").compute(scheduler="sync")
    with fastbag.open(fleet / "run0.bag") as bag:
        columns = bag.read("/imu").to_pandas()
    assert len(frame) == 0 and list(frame.columns) == list(columns.columns)
    numeric = [c for c in columns.columns if columns[c].dtype.kind in "iufb"]  # (dask keeps text its own way)
    assert len(numeric) > 10 and list(frame[numeric].dtypes) == list(columns[numeric].dtypes)
    array = fastbag.dask.read_array(empty, "/imu", "linear_acceleration").compute(scheduler="sync")
    assert array.shape == (0,) and array.dtype.names == ("x", "y", "z")
    both = fastbag.dask.read_topic([empty, fleet / "run0.bag"], "/imu").compute(scheduler="sync")
    assert len(both) == len(columns)
    with pytest.raises(fastbag.NotFoundError, match="no bag among 1 holds topic '/nope'"):
        fastbag.dask.read_topic(empty, "/nope")


def test_open_options_reach_every_open_of_a_bag(tmp_path, monkeypatch):
    """A fleet of format-1.1 bags (no definitions stored) reads with ``definitions=``, which every open gets:
    the planning opens and each task's, as ``checksums=`` and the other options of fastbag.open do."""
    from legacy_fixtures import V11_TEXTS, rosname, v11_md5sums, v11_typestore, write_v11

    store = v11_typestore()
    md5sum = v11_md5sums(store)["geometry_msgs/Point"]
    Point = store.types["geometry_msgs/msg/Point"]
    paths = []
    for k in range(2):
        path = tmp_path / f"v11-{k}.bag"
        write_v11(path, [("/point", md5sum, "geometry_msgs/Point", 10**9 * (10 * k + j + 1),
                          bytes(store.serialize_ros1(Point(x=float(10 * k + j), y=1.0, z=2.0),
                                                     rosname("geometry_msgs/Point")))) for j in range(5)])
        paths.append(path)
    with pytest.raises(fastbag.FastbagError):  # (without definitions: raw only)
        fastbag.dask.read_topic(paths, "/point").compute(scheduler="sync")
    opened = []
    real = fastbag.convert.dask.open_bag
    monkeypatch.setattr(fastbag.convert.dask, "open_bag", lambda *a, **kw: opened.append(kw) or real(*a, **kw))
    ddf = fastbag.dask.read_topic(paths, "/point", definitions=V11_TEXTS, checksums=False)
    assert ddf.compute(scheduler="sync")["x"].tolist() == [float(v) for v in [*range(5), *range(10, 15)]]
    acc = fastbag.dask.read_array(paths, "/point", "y", definitions=V11_TEXTS).compute(scheduler="sync")
    assert acc.tolist() == [1.0] * 10
    assert len(opened) >= 6 and all(kw.get("definitions") is V11_TEXTS for kw in opened)
    assert all(kw["checksums"] is False for kw in opened[:4])  # read_topic's: planning and both tasks
    with pytest.raises(TypeError, match="threads="):
        fastbag.dask.read_topic(paths, "/point", workers=2)


def test_strings_that_are_not_utf8_become_text_in_dask_strings(tmp_path):
    """to_pandas keeps a string that is not UTF-8 as bytes (an object column); Dask's string conversion (its
    default) then raised a bare UnicodeDecodeError in the task. They are text with \\xNN escapes there, said with
    a FastbagWarning; without the conversion they stay bytes, as to_pandas gives them."""
    import dask

    texts = [b"plain", b"caf\xe9", b"\x88\x01ok"]
    with fastbag.Writer(tmp_path / "text.bag") as w:
        c = w.add_connection("/s", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        for k, text in enumerate(texts):
            w.write(c, 10**18 + k, len(text).to_bytes(4, "little") + text)
    with dask.config.set({"dataframe.convert-string": True}):
        frame = fastbag.dask.read_topic(tmp_path / "text.bag", "/s")
        with pytest.warns(fastbag.FastbagWarning, match=r"text\.bag: topic /s: strings that are not UTF-8 in data"):
            got = frame.compute(scheduler="sync")
    assert got["data"].tolist() == ["plain", "caf\\xe9", "\\x88\x01ok"]
    with dask.config.set({"dataframe.convert-string": False}):
        kept = fastbag.dask.read_topic(tmp_path / "text.bag", "/s").compute(scheduler="sync")
    with fastbag.open(tmp_path / "text.bag") as bag:
        assert kept["data"].tolist() == bag.read("/s").to_pandas()["data"].tolist() == ["plain", *texts[1:]]


def test_strings_that_are_not_utf8_inside_lists_keep_the_columns_type(tmp_path):
    """A part whose ``string[]`` holds text that is not UTF-8 is a list of binary in to_pandas, where the
    collection's meta (and every other part) says a list of strings: computed, the column was an object one,
    without a word (QA). Such cells are text with \\xNN escapes too, said with a FastbagWarning."""
    import dask

    names = [[b"a", b"b"], [b"caf\xe9", b"ok"], [], [b"\x88"], [b"z"]]
    with fastbag.Writer(tmp_path / "lists.bag") as w:
        c = w.add_connection("/n", "test_msgs/Names", "string[] names\n")
        for k, row in enumerate(names):
            w.write(c, 10**18 + k, len(row).to_bytes(4, "little") + b"".join(len(t).to_bytes(4, "little") + t
                                                                             for t in row))
    with dask.config.set({"dataframe.convert-string": True}):
        frame = fastbag.dask.read_topic(tmp_path / "lists.bag", "/n", step=2)
        assert frame.npartitions == 3
        with pytest.warns(fastbag.FastbagWarning, match=r"lists\.bag: topic /n: strings that are not UTF-8 in names"):
            got = frame.compute(scheduler="sync")
    assert str(got["names"].dtype) == str(frame["names"].dtype) == "large_list<item: large_string not null>[pyarrow]"
    assert [list(v) for v in got["names"]] == [["a", "b"], ["caf\\xe9", "ok"], [], ["\\x88"], ["z"]]


def test_bags_that_cannot_be_opened_are_passed_over_when_asked(fleet, tmp_path):
    """One empty bag (a crashed recorder's) among a fleet's failed the whole collection: errors="skip" passes
    over it, naming it in a FastbagWarning; the default still raises its error."""
    import shutil

    good = sorted(fleet.glob("run*.bag"))
    for path in good:
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "run1b.bag").write_bytes(b"")
    pattern = str(tmp_path / "run*.bag")
    with pytest.raises(fastbag.BagFormatError, match="empty"):
        fastbag.dask.read_topic(pattern, "/imu")
    with pytest.warns(fastbag.FastbagWarning, match=r"passed over a bag that cannot be opened: .*run1b\.bag"):
        frame = fastbag.dask.read_topic(pattern, "/imu", errors="skip", step=1000)
    same_frame(frame.compute(scheduler="sync"), expected(good))
    with pytest.warns(fastbag.FastbagWarning, match="run1b.bag"):
        x = fastbag.dask.read_array(pattern, "/imu", "linear_acceleration.x", errors="skip")
    assert np.array_equal(x.compute(scheduler="sync"), expected(good)["linear_acceleration.x"].to_numpy())
    with pytest.raises(ValueError, match="errors is 'raise' or 'skip'"):
        fastbag.dask.read_topic(pattern, "/imu", errors="ignore")


def test_a_bag_whose_topic_has_two_formats_is_named_and_passed_over_when_asked(fleet, tmp_path):
    """A bag recording /imu in two formats: the error names the bag (it did not), and errors="skip" passes over
    it with a warning (it raised), as over a bag that cannot be opened."""
    import shutil

    good = sorted(fleet.glob("run*.bag"))
    for path in good:
        shutil.copy(path, tmp_path / path.name)
    with fastbag.Writer(tmp_path / "run1b.bag") as w:
        for k, (msgtype, text) in enumerate((("std_msgs/Int32", "int32 data\n"), ("std_msgs/Float32",
                                                                                 "float32 data\n"))):
            w.write(w.add_connection("/imu", msgtype, text), 10**18 + k, b"\0\0\0\0")
    pattern = str(tmp_path / "run*.bag")
    with pytest.raises(fastbag.DecodeError, match=r"2 different message formats .* in .*run1b\.bag"):
        fastbag.dask.read_topic(pattern, "/imu")
    with pytest.warns(fastbag.FastbagWarning, match=r"passed over a bag whose topic cannot be read: .*run1b\.bag"):
        frame = fastbag.dask.read_topic(pattern, "/imu", errors="skip", step=1000)
    same_frame(frame.compute(scheduler="sync"), expected(good))
