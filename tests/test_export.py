"""``fastbag.export`` and ``fastbag export``: files equal to ``read`` on every real bag, atomic, failures skipped."""

from __future__ import annotations

import json
import errno
import os
import warnings
import re
import time
from pathlib import Path

import numpy as np
import pytest

import fastbag
from fastbag.cli import main
from fastbag.convert.export import topic_filename
from fastbag.convert.tables import nested_child
from fastbag.msg.arrays import Nested, Ragged, offsets_of
from fastbag.tooling.synth import IMU, write_demo_bag
from conftest import open_quietly, real_bags
from tests.test_convert_tables import check_arrow, plain, sample_of

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")


def npz_expected(arr, key):
    """What ``read`` gives for an NPZ key: ``a.b``, ``a.values``, ``a.offsets``, ``a.values.b``...

    A ``T[]`` read dense (an ``(N, k)`` array) is ``a.values`` + ``a.offsets`` too, as every variable-length array.
    """
    value = arr
    for part in key.split("."):
        dense = isinstance(value, np.ndarray) and value.ndim > 1 and part not in (value.dtype.names or ())
        if part == "values" and isinstance(value, (Ragged, Nested)):
            value = value.values if isinstance(value, Ragged) else nested_child(value)[0]
        elif part == "offsets" and isinstance(value, (Ragged, Nested)):
            value = offsets_of(value.counts)
        elif dense and part == "values":
            value = value.reshape((-1,) + value.shape[2:])
        elif dense and part == "offsets":
            value = np.arange(value.shape[0] + 1) * value.shape[1]
        else:
            value = value[part]
    return value


def check_npz(arr, columns):
    assert columns["time"].tolist() == arr.time.tolist()
    for key in columns.files:
        assert columns[key].dtype.names is None, key  # every leaf by its path: no structured arrays
        same(columns[key], np.asarray(npz_expected(arr, key) if key != "time" else arr.time), key)


def from_json(value, kind):
    """A JSON cell's value made ready for ``pa.array(..., type=kind)``: binary strings back to their bytes."""
    if pa.types.is_large_binary(kind) or pa.types.is_binary(kind):
        return value.encode("utf-8", "surrogateescape")
    if pa.types.is_struct(kind):
        return {f.name: from_json(value[f.name], f.type) for f in kind}
    if hasattr(kind, "value_type"):
        return [from_json(v, kind.value_type) for v in value]
    return value


def same(got, want, key):
    if want.dtype.names:  # NaN equals NaN field by field, not in whole structured rows
        assert got.dtype.names == want.dtype.names, key
        for name in want.dtype.names:
            same(got[name], want[name], f"{key}.{name}")
    elif want.dtype.kind in "UOS":
        assert plain(got) == plain(want), key
    else:
        np.testing.assert_array_equal(got, want, err_msg=key)


def as_lists(table):
    """Byte arrays the export stored as binary (named in ``fastbag.binary``) viewed as lists again."""
    binary = (table.schema.metadata or {}).get(b"fastbag.binary", b"").decode()
    for item in filter(None, binary.split(",")):
        name, _, kind = item.rpartition(":")
        assert pa.types.is_large_binary(table.column(name).type)
        values = [list(np.frombuffer(v, dtype=kind)) if v is not None else None
                  for v in table.column(name).to_pylist()]
        table = table.set_column(table.column_names.index(name), name,
                                 pa.array(values, type=pa.large_list(getattr(pa, kind)())))
    return table


def empty_struct_paths(schema):
    """Dotted paths of the struct fields without fields, at any depth of structs and lists."""
    def walk(name, kind):
        while pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            kind = kind.value_type
        if pa.types.is_struct(kind):
            if kind.num_fields == 0:
                yield name
            for i in range(kind.num_fields):
                yield from walk(f"{name}.{kind.field(i).name}", kind.field(i).type)
    for field in schema:
        yield from walk(field.name, field.type)


def without(value, path):
    """A message's dict without the field at ``path`` (a list of names; lists of structs lose it in every element)."""
    if isinstance(value, dict):
        value = dict(value)
        if len(path) == 1:
            value.pop(path[0])
        else:
            value[path[0]] = without(value[path[0]], path[1:])
        return value
    return [without(v, path) for v in value]


@pytest.mark.parametrize("path", real_bags())
def test_export_equals_read_on_real_bags(path, tmp_path):
    with open_quietly(path) as bag:
        results = {fmt: fastbag.export(bag, tmp_path / fmt, fmt, step=2000) for fmt in ("parquet", "csv", "npz")}
        for topic in bag.topics:
            try:
                arr = bag.read(topic)
            except fastbag.FastbagError as exc:
                for result in results.values():  # reported, not fatal
                    assert topic in result.skipped and type(exc).__name__ in result.skipped[topic]
                continue
            rows = sample_of(len(arr))
            table = pq.read_table(results["parquet"].files[topic])
            assert table.schema.metadata[b"ros.md5sum"] == arr.connections[0].md5sum.encode()
            assert table.schema.metadata[b"ros.definition"] == arr.connections[0].definition.encode()
            dropped = (table.schema.metadata or {}).get(b"fastbag.dropped", b"").decode()
            if dropped:  # what Parquet cannot hold (structs without fields): every one of them, and only them
                assert {f"{name}" for name in dropped.split(",")} == set(empty_struct_paths(arr.to_arrow().schema))
                assert table.column_names == [c for c in ["time"] + arr.fields if c not in dropped.split(",")]
                got = as_lists(table).drop_columns(["time"]).take(pa.array(rows)).to_pylist()
                want = [arr[int(i)].to_dict() for i in rows]
                for name in dropped.split(","):
                    want = [without(w, name.split(".")) for w in want]
                assert plain(got) == plain(want)
            else:
                check_arrow(arr, as_lists(table), rows)
            with np.load(results["npz"].files[topic], allow_pickle=False) as columns:
                check_npz(arr, columns)
            exact = {"float_precision": "round_trip"} if pd.__version__.startswith("2.") else {}  # (3: the default)
            frame = pd.read_csv(results["csv"].files[topic], **exact)
            assert frame["time"].tolist() == arr.time.tolist()
            flat = arr.to_pandas()
            for column in flat.columns:
                if isinstance(flat[column].dtype, pd.ArrowDtype):  # lists: JSON cells, equal once typed again
                    kind = flat[column].dtype.pyarrow_dtype
                    cells = [from_json(json.loads(frame[column][int(i)]), kind) for i in rows]
                    want = pa.array(flat[column].array).take(pa.array(rows)).to_pylist()
                    assert plain(pa.array(cells, type=kind).to_pylist()) == plain(want), column
                elif flat[column].dtype.kind in "fiub":
                    np.testing.assert_array_equal(frame[column].to_numpy().astype(flat[column].dtype),
                                                  flat[column].to_numpy(), err_msg=column)
        for result in results.values():
            assert set(result.files) | set(result.skipped) == set(bag.topics)
        # no partial file left; no folder at all where nothing could be written (every topic skipped)
        assert (tmp_path / "parquet").exists() == bool(results["parquet"].files)
        assert not [p for p in (tmp_path / "parquet").glob(".*")]


def test_topic_filenames():
    assert topic_filename("/camera/image_raw", "parquet") == "camera.image_raw.parquet"
    assert topic_filename("chatter", "csv") == "chatter.csv"
    assert topic_filename("/../../etc/passwd", "csv") == "__.__.etc.passwd.csv"  # never leaves the folder
    assert topic_filename("/a b\x00/ü", "npz") == "a_b_._.npz"
    assert topic_filename("/.hidden", "npz") == "_hidden.npz"


def test_topics_whose_names_clash_after_sanitizing_get_their_own_files(tmp_path):
    path = tmp_path / "clash.bag"
    definition = "int32 data\n"
    with fastbag.Writer(path) as w:
        for k, topic in enumerate(["/a b", "/a_b", "/a?b"]):
            conn = w.add_connection(topic, "std_msgs/Int32", definition)
            w.write(conn, 10**18 + k, k.to_bytes(4, "little"))
    result = fastbag.export(path, tmp_path / "out", "npz")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a_b.npz", "a_b~2.npz", "a_b~3.npz"]
    for k, topic in enumerate(["/a b", "/a_b", "/a?b"]):
        with np.load(result.files[topic]) as columns:
            assert columns["data"].tolist() == [k]


def write_bag_with_a_broken_topic(path):
    """A good Imu topic and a topic whose messages are too short for their definition."""
    write_demo_bag(path, seconds=0.5, points=200)
    good = path.with_name("mixed.bag")
    with fastbag.open(path) as src, fastbag.Writer(good) as w:
        conns = {}
        for m in src.messages(topics=["/imu", "/tf"], raw=True):
            if m.topic not in conns:
                conns[m.topic] = w.add_connection(m.topic, m.connection.msgtype, m.connection.definition,
                                                  m.connection.md5sum)
            w.write(conns[m.topic], m.time, m.data)
        bad = w.add_connection("/broken", IMU.name, IMU.definition, IMU.md5sum)
        for k in range(5):
            w.write(bad, src.start_time + k, b"\x00" * 10)
    return good


def test_undecodable_topic_is_reported_and_skipped(tmp_path):
    path = write_bag_with_a_broken_topic(tmp_path / "demo.bag")
    out = tmp_path / "out"
    result = fastbag.export(path, out, "parquet")
    assert set(result.files) == {"/imu", "/tf"} and list(result.skipped) == ["/broken"]
    assert "DecodeError" in result.skipped["/broken"] and "/broken" in result.skipped["/broken"]
    assert sorted(p.name for p in out.iterdir()) == ["imu.parquet", "tf.parquet"]
    assert pq.read_table(out / "imu.parquet").num_rows == 100
    assert pq.ParquetFile(out / "imu.parquet").metadata.row_group(0).column(0).compression.startswith("LZ4")
    assert result.messages == 150


def test_byte_arrays_are_stored_as_binary_sharing_buffers(tmp_path):
    from fastbag.convert.export import bytes_as_binary

    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.3, points=2000)
    with fastbag.open(path) as bag:
        arr = bag.read("/points")
        lists = arr.to_arrow()
        table = bytes_as_binary(lists)
        data = table.column("data").chunk(0)
        assert pa.types.is_large_binary(data.type) and table.schema.metadata[b"fastbag.binary"] == b"data:uint8"
        assert data.buffers()[2].address == lists.column("data").chunk(0).values.buffers()[1].address
        assert [np.frombuffer(v, np.uint8).tolist() for v in data.to_pylist()] == [d.tolist() for d in arr["data"]]
        result = fastbag.export(bag, tmp_path / "out", "parquet", ["/points"], compression="zstd")
        back = pq.read_table(result.files["/points"])
        assert back.column("data").to_pylist() == data.to_pylist()
        assert pq.ParquetFile(result.files["/points"]).metadata.row_group(0).column(0).compression == "ZSTD"


def test_interrupted_export_leaves_no_file_under_its_final_name(tmp_path, monkeypatch):
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=1.0, points=200)
    from fastbag.msg.arrays import TopicArray

    real = TopicArray.to_arrow
    calls = []

    def interrupted(self):
        calls.append(self.topic)
        if self.topic == "/points" and calls.count("/points") == 2:
            raise KeyboardInterrupt  # Ctrl-C in the middle of a topic's parts
        return real(self)

    monkeypatch.setattr(TopicArray, "to_arrow", interrupted)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt) as interrupted_at:
        fastbag.export(path, out, "parquet", ["/imu", "/points", "/tf"], step=3)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["imu.parquet"], names  # finished before; nothing else, not even the partial file
    # which files are complete is said (the command prints it: its topic lines come only at the end; QA)
    assert interrupted_at.value.__notes__ == [f"complete before the interrupt: /imu -> {out / 'imu.parquet'}"]


def test_bad_arguments_fail_before_writing(tmp_path):
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.2, points=100)
    for kwargs in ({"format": "xlsx"}, {"compression": "rar"}):
        with pytest.raises(ValueError):
            fastbag.export(path, tmp_path / "out", **kwargs)
    with pytest.raises(KeyError):
        fastbag.export(path, tmp_path / "out", topics=["/imu", "/nope"])
    # keyword arguments fastbag.open does not take are export's error, not open()'s
    with pytest.raises(TypeError, match="fastbag.export got an unexpected keyword argument 'worker'"):
        fastbag.export(path, tmp_path / "out", worker=1)
    with fastbag.open(path) as bag, pytest.raises(TypeError, match="workers for a bag already open"):
        fastbag.export(bag, tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()


def test_progress_bar(tmp_path, capsys):
    pytest.importorskip("tqdm")
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.5, points=200)
    fastbag.export(path, tmp_path / "a", "npz", progress=True)
    err = capsys.readouterr().err
    assert "160/160" in err and "msg" in err
    fastbag.export(path, tmp_path / "b", "npz")  # stderr is not a terminal here: silent
    assert capsys.readouterr().err == ""


def test_cli_export(tmp_path, capsys):
    path = write_bag_with_a_broken_topic(tmp_path / "demo.bag")
    out = tmp_path / "out"
    # a topic skipped fails the command (a script must know), the others written all the same
    assert main(["export", str(path), str(out), "--format", "npz", "--topics", "/imu", "/broken"]) == 1
    captured = capsys.readouterr()
    assert f"/imu -> {out / 'imu.npz'}" in captured.out
    assert re.search(r"skipped /broken: DecodeError", captured.err)
    with np.load(out / "imu.npz") as columns, fastbag.open(path) as bag:
        assert np.array_equal(columns["linear_acceleration.z"], bag.read("/imu")["linear_acceleration"]["z"])
    assert main(["export", str(path), str(out), "--topics", "/nope"]) == 2  # a wrong argument
    assert "no topic '/nope'" in capsys.readouterr().err
    assert main(["export", str(path), str(path), "--topics", "/imu"]) == 1  # OUT is a file: said so
    assert capsys.readouterr().err.splitlines() == [
        f"fastbag: {path}: not a folder to export into: a file of that name exists"]
    assert main(["export", str(path), str(out), "--topics", "/broken"]) == 1  # nothing could be written
    assert out.is_dir()  # (a folder that was there stays)
    assert main(["export", str(path), str(tmp_path / "new"), "--topics", "/broken"]) == 1
    assert not (tmp_path / "new").exists()  # one export made and left empty is taken away


def test_cli_export_of_several_bags_each_into_its_folder_going_past_a_broken_one(tmp_path, capsys):
    """A fleet's bags in one command: each into OUT/<its name> (two of one name apart), a bag that cannot be read
    said and passed over, the exit status 1 when anything was not written."""
    first, second = tmp_path / "a" / "run.bag", tmp_path / "b" / "run.bag"
    for bag, seconds in ((first, 0.3), (second, 0.2)):
        bag.parent.mkdir()
        write_demo_bag(bag, seconds=seconds)
    empty = tmp_path / "crashed.bag"
    empty.write_bytes(b"")
    out = tmp_path / "out"
    assert main(["export", str(first), str(empty), str(second), str(out), "--topics", "/imu", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "crashed.bag" in err and "empty" in err
    assert sorted(p.name for p in out.iterdir()) == ["run", "run~2"]
    for folder, bag in ((out / "run", first), (out / "run~2", second)):
        with fastbag.open(bag) as opened:
            assert pq.read_table(folder / "imu.parquet").num_rows == opened.topics["/imu"].message_count
    assert main(["export", str(first), str(second), str(tmp_path / "again"), "--no-progress"]) == 0


def test_export_between_times(tmp_path, capsys):
    """start and end bound what is written (as read() takes them); the command takes epoch seconds."""
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=1.0)
    with fastbag.open(path) as bag:
        times = bag.topic_times("/imu")
        start, end = int(times[10]), int(times[30])
        want = bag.read("/imu", start, end)["linear_acceleration"]["x"]

    def written_x(table):
        return table["linear_acceleration"].combine_chunks().field("x").to_numpy()

    result = fastbag.export(path, tmp_path / "a", topics=["/imu"], start=start, end=end, step=7)
    assert result.messages == 20 and np.array_equal(written_x(pq.read_table(tmp_path / "a" / "imu.parquet")), want)
    with np.load(fastbag.export(path, tmp_path / "b", "npz", ["/imu"], start=start, end=end).files["/imu"]) as z:
        assert np.array_equal(z["linear_acceleration.x"], want)
    seconds, until = (f"{t // 10**9}.{t % 10**9:09d}" for t in (start, end))
    assert main(["export", str(path), str(tmp_path / "c"), "--topics", "/imu", "--start", seconds, "--end", until,
                 "--no-progress"]) == 0
    assert np.array_equal(written_x(pq.read_table(tmp_path / "c" / "imu.parquet")), want)
    with pytest.raises(TypeError):  # seconds as a float are refused, as read() refuses them, before writing
        fastbag.export(path, tmp_path / "d", topics=["/imu"], start=start / 1e9)
    assert not (tmp_path / "d").exists()
    with pytest.raises(SystemExit):
        main(["export", str(path), str(tmp_path / "e"), "--start", "soon"])
    assert "not a number of seconds since the epoch: 'soon'" in capsys.readouterr().err
    # Digits past the nanosecond round up, as the exact time selects: a start just after message 10 leaves it
    # out, an end just after message 30 keeps it (they were cut toward zero). 40 decimals: beyond 28 digits.
    after = [seconds + "0" * 30 + "1", until + "0000000001"]
    assert main(["export", str(path), str(tmp_path / "f"), "--format", "npz", "--topics", "/imu", "--start",
                 after[0], "--end", after[1], "--no-progress"]) == 0
    with fastbag.open(path) as bag, np.load(tmp_path / "f" / "imu.npz") as z:
        assert np.array_equal(z["time"], bag.topic_times("/imu")[11:31])


def test_an_export_window_that_holds_nothing_is_said(tmp_path, capsys):
    """An end before the start, nanoseconds given as seconds, or offsets into the bag (10 to 20 s, as rosbag
    play's -s takes them) wrote empty files and exited 0 without a word (QA). The first two are refused
    before anything is written; a window holding no message says where the bag's messages lie."""
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=1.0)
    with fastbag.open(path) as bag:
        start, end = bag.start_time, bag.end_time
    with pytest.raises(ValueError, match=r"start \(20.000000000 s\) is not before end \(10.000000000 s\)"):
        fastbag.export(path, tmp_path / "a", start=20 * 10**9, end=10 * 10**9)
    assert not (tmp_path / "a").exists()
    # in the shell a usage error (2) said once, before any bag is opened: it was said once per bag, exit 1 (QA)
    bags = [str(path), str(path)]
    assert main(["export", *bags, str(tmp_path / "b"), "--start", "20", "--end", "10", "--no-progress"]) == 2
    said = capsys.readouterr().err
    assert said.count("fastbag: error: argument --end: 10.000000000 is not after --start 20.000000000") == 1
    assert not (tmp_path / "b").exists()
    assert main(["export", str(path), str(tmp_path / "b"), "--start", "10.5", "--end", "10.5"]) == 2
    assert "10.500000000 is not after" in capsys.readouterr().err and not (tmp_path / "b").exists()
    with pytest.raises(SystemExit):
        main(["export", str(path), str(tmp_path / "c"), "--start", str(start)])
    said = capsys.readouterr().err
    assert f"{start} is no time as seconds since the epoch" in said and f"nanoseconds? then {start / 1e9:.0f}" in said
    bag_range = rf"the bag's messages run from {start // 10**9}\.{start % 10**9:09d} to {end // 10**9}\.\d{{9}} s"
    with pytest.warns(fastbag.FastbagWarning, match=r"no message of the 4 topics exported lies in \[start, end\) = "
                      rf"\[10\.000000000, 20\.000000000\) s; {bag_range}"):
        result = fastbag.export(path, tmp_path / "d", "npz", start=10 * 10**9, end=20 * 10**9)
    assert result.messages == 0 and len(result.files) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a window holding messages: nothing to say
        assert fastbag.export(path, tmp_path / "e", "npz", start=start, end=end).messages > 0


def test_file_names_do_not_depend_on_the_topics_selected(tmp_path):
    """Clashing names were numbered in the order of the topics exported, so exporting one of them alone wrote it
    under another's name (replacing that one's file); ROS-style names keep the plain name."""
    topics = ["/a b", "a/b", "/a/b", "/a_b"]
    with fastbag.Writer(tmp_path / "names.bag") as w:
        for k, topic in enumerate(topics):
            c = w.add_connection(topic, "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
            w.write(c, 10**9 + k, k.to_bytes(4, "little"))
    everything = fastbag.export(tmp_path / "names.bag", tmp_path / "all").files
    assert {t: Path(p).name for t, p in everything.items()} == {
        "/a/b": "a.b.parquet", "/a_b": "a_b.parquet", "/a b": "a_b~2.parquet", "a/b": "a.b~2.parquet"}
    for topic in topics:
        alone = fastbag.export(tmp_path / "names.bag", tmp_path / "one", topics=[topic]).files[topic]
        assert Path(alone).name == Path(everything[topic]).name
        assert pq.read_table(alone)["data"].to_pylist() == [topics.index(topic)]


def test_an_unwritable_folder_is_said_once_and_a_stale_file_is_named(tmp_path, capsys, monkeypatch):
    path = write_bag_with_a_broken_topic(tmp_path / "demo.bag")
    out = tmp_path / "out"
    out.mkdir()
    real_access = os.access

    def refused(where, mode, **kwargs):  # (as access(2) answers for a folder of another user's)
        return False if Path(where) == out else real_access(where, mode, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(os, "access", refused)
        assert main(["export", str(path), str(out), "--no-progress"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"fastbag: {out}: cannot write into the export folder: Permission denied"]
    (out / "broken.parquet").write_bytes(b"an earlier export's file")
    result = fastbag.export(path, out, topics=["/broken"])
    assert "broken.parquet is an earlier export's, left as it was" in result.skipped["/broken"]


def test_an_export_folder_that_cannot_be_made_is_said_as_one_it_cannot_write_into(tmp_path, capsys, monkeypatch):
    """A missing folder under a read-only mount said only ``[Errno 30] Read-only file system: 'ro/sub'`` (QA)."""
    path = write_bag_with_a_broken_topic(tmp_path / "demo.bag")
    out = tmp_path / "ro" / "sub"

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    with monkeypatch.context() as patched:
        patched.setattr(Path, "mkdir", read_only)
        assert main(["export", str(path), str(out), "--no-progress"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"fastbag: {out}: cannot make the export folder: Read-only file system"]


def test_parquet_ready_strips_field_less_structs_inside_lists(tmp_path):
    """Lists of structs lose their field-less members (fixed and variable lists, sliced ones too); a list of
    nothing goes whole; what remains writes to Parquet and reads back equal."""
    from fastbag.convert.export import parquet_ready

    empty = pa.StructArray.from_buffers(pa.struct([]), 6, [None])
    inner = pa.StructArray.from_arrays([pa.array(np.arange(6, dtype=np.int32)), empty], names=["a", "e"])
    ragged = pa.LargeListArray.from_arrays(pa.array([0, 1, 1, 4, 6], type=pa.int64()), inner)[1:]  # sliced
    fixed = pa.FixedSizeListArray.from_arrays(inner, 1)[3:]  # sliced
    nothing = pa.FixedSizeListArray.from_arrays(empty, 2)
    table = pa.table({"ragged": ragged, "fixed": fixed, "nothing": nothing, "n": pa.array([7, 8, 9])})
    ready = parquet_ready(table)
    assert ready.column_names == ["ragged", "fixed", "n"]
    assert set(ready.schema.metadata[b"fastbag.dropped"].decode().split(",")) == {"ragged.e", "fixed.e", "nothing"}
    assert ready.column("ragged").to_pylist() == [[], [{"a": 1}, {"a": 2}, {"a": 3}], [{"a": 4}, {"a": 5}]]
    assert ready.column("fixed").to_pylist() == [[{"a": 3}], [{"a": 4}], [{"a": 5}]]
    assert ready.column("n").to_pylist() == [7, 8, 9]
    pq.write_table(ready, tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").to_pylist() == ready.to_pylist()


def test_parquet_ready_strips_field_less_structs_two_structs_down(tmp_path):
    """A field-less struct inside a struct inside a struct (Main{A a}, A{B b}, B{Empty e; uint8 c}) is dropped:
    the struct above it is rebuilt even though its own member count did not change."""
    from fastbag.convert.export import parquet_ready

    empty = pa.StructArray.from_buffers(pa.struct([]), 2, [None])
    b = pa.StructArray.from_arrays([empty, pa.array([7, 9], type=pa.uint8())], names=["e", "c"])
    a = pa.StructArray.from_arrays([b], names=["b"])
    ready = parquet_ready(pa.table({"a": a}))
    assert ready.schema.field("a").type == pa.struct([("b", pa.struct([("c", pa.uint8())]))])
    assert ready.schema.metadata[b"fastbag.dropped"] == b"a.b.e"
    assert ready.column("a").to_pylist() == [{"b": {"c": 7}}, {"b": {"c": 9}}]
    pq.write_table(ready, tmp_path / "t.parquet")  # (before: ArrowNotImplementedError, an empty struct)
    assert pq.read_table(tmp_path / "t.parquet").to_pylist() == ready.to_pylist()


def deep_empty_bag(path):
    """/deep: Main{A a}, A{B b}, B{Empty e; uint8 c}; /n: Int32."""
    sep = "=" * 80
    text = f"A a\n{sep}\nMSG: p/A\nB b\n{sep}\nMSG: p/B\nEmpty e\nuint8 c\n{sep}\nMSG: p/Empty\n"
    with fastbag.Writer(path, compression="none") as w:
        deep = w.add_connection("/deep", "p/Main", text)
        number = w.add_connection("/n", "std_msgs/Int32", "int32 data\n")
        for k in range(3):
            w.write(deep, 10**18 + 2 * k, bytes([7 + k]))
            w.write(number, 10**18 + 2 * k + 1, int(k).to_bytes(4, "little"))
    return path


def test_parquet_export_of_an_empty_struct_two_structs_down(tmp_path):
    path = deep_empty_bag(tmp_path / "deep.bag")
    result = fastbag.export(path, tmp_path / "out", "parquet")
    assert result.skipped == {} and sorted(result.files) == ["/deep", "/n"]
    table = pq.read_table(result.files["/deep"])
    assert table.column("a").to_pylist() == [{"b": {"c": c}} for c in (7, 8, 9)]
    with fastbag.open(path) as bag:
        assert bag.read("/deep")["a.b.c"].tolist() == [7, 8, 9]


def test_parquet_export_skips_a_topic_arrow_cannot_store(tmp_path, monkeypatch):
    """An Arrow error writing one topic (a type Parquet cannot hold) skips that topic, not the whole export."""
    import fastbag.convert.export as export

    path = deep_empty_bag(tmp_path / "deep.bag")
    ready = export.parquet_ready

    def refuse_deep(table):
        if "a" in table.column_names:
            raise pa.ArrowNotImplementedError("Cannot write struct type 'e' with no child field to Parquet")
        return ready(table)

    monkeypatch.setattr(export, "parquet_ready", refuse_deep)
    result = fastbag.export(path, tmp_path / "out", "parquet")
    assert list(result.skipped) == ["/deep"] and "ArrowNotImplementedError" in result.skipped["/deep"]
    assert list(result.files) == ["/n"] and pq.read_table(result.files["/n"]).column("data").to_pylist() == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["n.parquet"]  # no partial file left


def test_the_temporary_file_of_an_export_killed_outright_is_removed_by_the_next_one(tmp_path):
    """SIGKILL (the OOM killer) runs no cleanup: an export's hidden temporary file stayed in the folder for good,
    190 MB of a large topic (QA). The next export of that topic into the folder removes it, once its process is
    gone and it has not changed for STALE_PARTIAL_SECONDS; a running process's, a recent one's, another topic's
    and a file not of that name are left alone."""
    import subprocess
    import sys

    from fastbag.convert import export as export_module

    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.3)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid whose process is gone
    alive = str(os.getppid())  # (this test's parent: running)
    old = time.time() - export_module.STALE_PARTIAL_SECONDS - 5
    made = {}
    for label, name in [("dead", f".imu.parquet.{dead}.partial"), ("recent", f".tf.parquet.{dead}.partial"),
                        ("alive", f".imu.parquet.{alive}.partial"), ("other topic", f".odd.parquet.{dead}.partial"),
                        ("other name", f".imu.parquet.{dead}.partial.keep")]:
        file = out / name
        file.write_bytes(b"x" * 1000)
        if label != "recent":
            os.utime(file, (old, old))
        made[label] = file
    fastbag.export(path, out, "parquet", topics=["/imu", "/tf"], progress=False)
    assert not made["dead"].exists()
    assert all(made[k].exists() for k in ("recent", "alive", "other topic", "other name"))
    assert (out / "imu.parquet").exists() and (out / "tf.parquet").exists()
