"""``fastbag.export`` edge cases: strings that turn binary in a later part, long topic names, file-system errors,
an invalid step, CSV cells as JSON, an NPZ layout fixed by the message type, compression of every format."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

import fastbag
from fastbag.cli import main
from fastbag.convert.export import MAX_NAME, topic_filename
from fastbag.tooling.synth import write_demo_bag
from conftest import data_file

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

SEP = "=" * 80 + "\n"
TAGGED = ("string label\nItem[] items\n" + SEP + "MSG: test_msgs/Item\nstring name\nfloat32 value\n")
LISTS = ("float32[] values\nItem[] items\nstring[] names\nfloat32[20] big\n" + SEP
         + "MSG: test_msgs/Item\nstring name\nfloat32 value\n")


def ros_string(raw: bytes) -> bytes:
    return struct.pack("<I", len(raw)) + raw


def tagged(label: bytes, names: list[bytes]) -> bytes:
    """A test_msgs/Tagged message: a string, and an array of (string, float32) items."""
    items = b"".join(ros_string(n) + struct.pack("<f", 0.5) for n in names)
    return ros_string(label) + struct.pack("<I", len(names)) + items


def write_tagged_bag(path, labels: list[bytes]):
    """One message per chunk (chunk_size=1), so ``step=1`` gives one part per message."""
    with fastbag.Writer(path, compression="none", chunk_size=1) as w:
        conn = w.add_connection("/tagged", "test_msgs/Tagged", TAGGED)
        for k, label in enumerate(labels):
            w.write(conn, 10**18 + k, tagged(label, [label, b"x"]))
    return path


@pytest.mark.parametrize("labels", [[b"hello", b"world", b"caf\xe9", b"ok"],  # the first bad string in a later part
                                    [b"caf\xe9", b"ok", b"fine"]])             # in the first part
def test_parquet_strings_that_are_not_utf8_make_the_column_binary_whatever_the_step(tmp_path, labels):
    path = write_tagged_bag(tmp_path / "t.bag", labels)
    for step in (1, 2, 10**6):
        out = tmp_path / f"out{step}"
        result = fastbag.export(path, out, "parquet", step=step)
        assert result.skipped == {} and result.messages == len(labels), step
        table = pq.read_table(result.files["/tagged"])
        assert table.schema.field("label").type == pa.large_binary()
        assert table.schema.field("items").type.value_type.field("name").type == pa.large_binary()
        assert table.column("label").to_pylist() == labels
        assert table.column("items").to_pylist() == [[{"name": s, "value": 0.5}, {"name": b"x", "value": 0.5}]
                                                     for s in labels]
        assert table.schema.metadata[b"ros.msgtype"] == b"test_msgs/Tagged"
        assert pq.ParquetFile(result.files["/tagged"]).num_row_groups == -(-len(labels) // step)  # kept by the copy
        assert sorted(p.name for p in out.iterdir()) == ["tagged.parquet"]  # nothing left of the copy


def test_parquet_utf8_strings_stay_strings(tmp_path):
    path = write_tagged_bag(tmp_path / "t.bag", [b"a", "\u00e9t\u00e9".encode(), b"c"])
    result = fastbag.export(path, tmp_path / "out", "parquet", step=1)
    table = pq.read_table(result.files["/tagged"])
    assert table.schema.field("label").type == pa.large_string()
    assert table.column("label").to_pylist() == ["a", "\u00e9t\u00e9", "c"]


def int32_bag(path, topics):
    with fastbag.Writer(path, compression="none") as w:
        for k, topic in enumerate(topics):
            conn = w.add_connection(topic, "std_msgs/Int32", "int32 data\n")
            w.write(conn, 10**18 + k, struct.pack("<i", k))
    return path


@pytest.mark.parametrize("fmt", ["parquet", "csv", "npz"])
def test_paths_that_are_not_utf8_export(tmp_path, fmt, capsys):
    """A bag's name or the export folder's with a byte that is not UTF-8 (``b\\xe9.bag``): every format writes,
    where Parquet skipped every topic (pyarrow encodes a path as UTF-8, and the name went into the schema's
    metadata as such); the command line prints the names as fastbag prints them (``\\xe9``). (QA)"""
    folder = tmp_path / b"d\xe9".decode("utf-8", "surrogateescape")
    folder.mkdir()
    bag = folder / b"b\xe9.bag".decode("utf-8", "surrogateescape")
    write_tagged_bag(bag, [b"a", b"b", b"c"])
    out = folder / b"out\xe9".decode("utf-8", "surrogateescape")
    assert main(["export", str(bag), str(out), "--format", fmt, "--no-progress"]) == 0
    printed = capsys.readouterr()
    assert "d\\xe9" in printed.out and "\\udce9" not in printed.out + printed.err
    written = out / f"tagged.{fmt}"
    with fastbag.open(bag) as source:
        labels = source.read("/tagged")["label"].tolist()
    if fmt == "parquet":
        with open(written, "rb") as f:
            table = pq.read_table(f)
        assert table.column("label").to_pylist() == labels == ["a", "b", "c"]
        assert table.schema.metadata[b"fastbag.source"] == b"b\\xe9.bag"
        # A later part's text that is not UTF-8 rewrites the file read back from there (flushed first)
        mixed = write_tagged_bag(folder / b"m\xe9.bag".decode("utf-8", "surrogateescape"), [b"a", b"b", b"caf\xe9"])
        result = fastbag.export(mixed, out / "mixed", "parquet", step=1)
        with open(result.files["/tagged"], "rb") as f:
            assert pq.read_table(f).column("label").to_pylist() == [b"a", b"b", b"caf\xe9"]
    elif fmt == "csv":
        assert pd.read_csv(written)["label"].tolist() == labels
    else:
        with np.load(written) as npz:
            assert npz["label"].tolist() == labels


def test_long_topic_names_are_shortened_with_a_hash(tmp_path):
    long = "/" + "very_long_namespace/" * 13 + "points"
    other = long[:-1] + "z"  # the same first MAX_NAME bytes: told apart by the hash
    path = int32_bag(tmp_path / "long.bag", ["/a", long, other, "/z"])
    name = topic_filename(long, "parquet")
    assert len(name) <= MAX_NAME and name == topic_filename(long, "parquet")  # deterministic
    assert name.startswith("very_long_namespace.very_long_namespace.") and name.endswith(".parquet")
    assert name != topic_filename(other, "parquet")
    assert topic_filename("/a" * 90, "csv") == "a." * 89 + "a.csv"  # short enough: unchanged
    for fmt in ("parquet", "csv", "npz"):
        result = fastbag.export(path, tmp_path / fmt, fmt)
        assert result.skipped == {} and len(result.files) == 4 and result.messages == 4
    with np.load(tmp_path / "npz" / topic_filename(other, "npz")) as columns:
        assert columns["data"].tolist() == [2]


def test_a_file_system_error_skips_only_its_topic(tmp_path):
    path = int32_bag(tmp_path / "three.bag", ["/a", "/b", "/c"])
    out = tmp_path / "out"
    (out / "b.npz").mkdir(parents=True)  # the final name is taken by a folder: the rename fails
    result = fastbag.export(path, out, "npz")
    assert list(result.skipped) == ["/b"] and "IsADirectoryError" in result.skipped["/b"]
    assert sorted(result.files) == ["/a", "/c"] and result.messages == 2
    assert sorted(p.name for p in out.iterdir()) == ["a.npz", "b.npz", "c.npz"]  # no partial file left


def test_a_topic_too_large_for_memory_skips_only_itself(tmp_path, monkeypatch):
    """A MemoryError (a part of ``step`` this machine cannot hold) left the export: it skips that topic."""
    from fastbag.convert import export as module

    path = int32_bag(tmp_path / "three.bag", ["/a", "/b", "/c"])
    write = module._WRITERS["npz"]

    def short_of_memory(bag, topic, *args, **kwargs):
        if topic == "/b":
            raise MemoryError("Unable to allocate 24.4 GiB")
        return write(bag, topic, *args, **kwargs)

    monkeypatch.setitem(module._WRITERS, "npz", short_of_memory)
    result = fastbag.export(path, tmp_path / "out", "npz")
    assert result.skipped == {"/b": "MemoryError: Unable to allocate 24.4 GiB (a smaller step may fit)"}
    assert sorted(result.files) == ["/a", "/c"] and sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        ["a.npz", "c.npz"]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "npz"])
@pytest.mark.parametrize("step", ["10 MBx", 0, -5, 1.5, True])
def test_an_invalid_step_fails_before_anything_is_created(tmp_path, fmt, step):
    path = int32_bag(tmp_path / "one.bag", ["/a"])
    with pytest.raises(ValueError, match="step"):
        fastbag.export(path, tmp_path / "out", fmt, step=step)
    assert not (tmp_path / "out").exists()


def lists_message(values, items, names, big) -> bytes:
    data = struct.pack(f"<I{len(values)}f", len(values), *values)
    data += struct.pack("<I", len(items)) + b"".join(ros_string(n) + struct.pack("<f", v) for n, v in items)
    data += struct.pack("<I", len(names)) + b"".join(ros_string(n) for n in names)
    return data + struct.pack("<20f", *big)


def test_csv_list_cells_are_json(tmp_path):
    path = tmp_path / "lists.bag"
    big = [k / 10 for k in range(20)]
    with fastbag.Writer(path, compression="none") as w:
        conn = w.add_connection("/lists", "test_msgs/Lists", LISTS)
        w.write(conn, 10**18, lists_message([0.019, math.nan, math.inf, -math.inf, 1.5], [(b'a"b', 0.1)],
                                            [b"caf\xe9", "\u00e9".encode()], big))
        w.write(conn, 10**18 + 1, lists_message([], [], [], big))
    result = fastbag.export(path, tmp_path / "out", "csv")
    frame = pd.read_csv(result.files["/lists"])
    assert frame["values"].tolist() == ["[0.019,NaN,Infinity,-Infinity,1.5]", "[]"]  # float32 at its own precision
    assert frame["items"].tolist() == ['[{"name":"a\\"b","value":0.1}]', "[]"]  # JSON objects, double quotes
    assert frame["big"][0] == "[" + ",".join(str(np.float32(v)) for v in big) + "]"
    names = json.loads(frame["names"][0])  # not UTF-8: the bytes as surrogate escapes, the file stays UTF-8
    assert [n.encode("utf-8", "surrogateescape") for n in names] == [b"caf\xe9", "\u00e9".encode()]
    values = json.loads(frame["values"][0])
    assert values[0] == 0.019 and math.isnan(values[1]) and values[2:] == [math.inf, -math.inf, 1.5]


def test_csv_a_nan_number_is_written_nan_and_reads_back_by_the_readme_recipe(tmp_path):
    """A NaN number is ``NaN``, as in list cells; pandas wrote an empty cell, which a reader that keeps empty
    strings (the README's ``keep_default_na=False``) read as text, the float column with it (QA). The README's
    recipe reads both columns back as written."""
    path = tmp_path / "nan.bag"
    with fastbag.Writer(path, compression="none") as w:
        conn = w.add_connection("/pair", "test_msgs/Pair", "float64 f\nstring s\n")
        for k, (f, text) in enumerate([(1.5, "a"), (math.nan, ""), (math.inf, "NaN"), (-0.0, "NA")]):
            w.write(conn, 10**18 + k, struct.pack("<d", f) + ros_string(text.encode()))
    result = fastbag.export(path, tmp_path / "out", "csv")
    lines = Path(result.files["/pair"]).read_text().splitlines()
    assert [line.split(",", 1)[1] for line in lines[1:]] == ["1.5,a", "NaN,", "inf,NaN", "-0.0,NA"]
    frame = pd.read_csv(result.files["/pair"], dtype={"s": str}, keep_default_na=False, na_values={"f": ["NaN"]})
    assert frame["s"].tolist() == ["a", "", "NaN", "NA"] and frame["f"].dtype == np.float64
    assert frame["f"][0] == 1.5 and math.isnan(frame["f"][1]) and frame["f"][2] == math.inf
    assert math.copysign(1, frame["f"][3]) == -1


def test_csv_string_cells_not_utf8_are_bytes_literals_in_a_utf8_file(tmp_path):
    """A string field holding bytes that are not UTF-8 is Python's bytes literal, as pandas writes bytes, and the
    file stays UTF-8 (real bags hold such strings: smach's introspection, pickles in ROS strings; a file of raw
    bytes failed pandas.read_csv's defaults on them). ast.literal_eval gives the bytes back (QA asked which)."""
    import ast

    path = tmp_path / "text.bag"
    texts = [b"ok", b"bad\xff", "caf\u00e9".encode()]
    with fastbag.Writer(path, compression="none") as w:
        conn = w.add_connection("/text", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        for k, text in enumerate(texts):
            w.write(conn, 10**18 + k, ros_string(text))
    result = fastbag.export(path, tmp_path / "out", "csv")
    Path(result.files["/text"]).read_bytes().decode("utf-8")  # (UTF-8 throughout)
    cells = pd.read_csv(result.files["/text"], dtype={"data": str})["data"].tolist()
    assert cells == ["ok", "b'bad\\xff'", "caf\u00e9"]
    assert ast.literal_eval(cells[1]) == b"bad\xff"


def nan_equal(got, want):
    got, want = np.asarray(got, dtype=want.dtype), np.asarray(want)
    assert got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)


def test_csv_cells_of_a_real_laserscan_and_tf_are_json_equal_to_read(tmp_path):
    path = data_file("ros1v2/zaki0929__bagfiles__2018__feb13__col.bag")
    result = fastbag.export(path, tmp_path, "csv", topics=["/scan", "/tf"])
    scan, tf = pd.read_csv(result.files["/scan"]), pd.read_csv(result.files["/tf"])
    with fastbag.open(path) as bag:
        ranges = bag.read("/scan")["ranges"]
        assert any(np.isnan(ranges[i]).any() for i in range(len(ranges)))  # the file shows the NaN case
        for i in range(len(ranges)):
            nan_equal(json.loads(scan["ranges"][i]), ranges[i])  # float32 text reads back as the same float32
        assert scan["ranges"][0].startswith("[0.019,")
        arr = bag.read("/tf")
        for i in range(0, len(arr), max(1, len(arr) // 50)):
            assert json.loads(tf["transforms"][i]) == arr[i].to_dict()["transforms"]


def floats_bag(path, lengths):
    with fastbag.Writer(path, compression="none") as w:
        conn = w.add_connection("/v", "audit_msgs/Floats", "float32[] values\n")
        for i, n in enumerate(lengths):
            w.write(conn, 10**18 + i, struct.pack("<I", n) + np.arange(n, dtype="<f4").tobytes())
    return path


def test_npz_keys_depend_on_the_type_not_the_data(tmp_path):
    keys = {}
    for name, lengths in (("same", [3, 3, 3]), ("varying", [3, 1, 2])):
        result = fastbag.export(floats_bag(tmp_path / f"{name}.bag", lengths), tmp_path / name, "npz")
        with np.load(result.files["/v"], allow_pickle=False) as columns:
            keys[name] = columns.files
            assert columns["values.offsets"].tolist() == np.cumsum([0] + lengths).tolist()
            assert columns["values.values"].tolist() == [float(k) for n in lengths for k in range(n)]
    assert keys["same"] == keys["varying"] == ["time", "values.offsets", "values.values"]


def test_npz_fixed_structs_are_flat_leaves(tmp_path):
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.3, points=100)
    result = fastbag.export(path, tmp_path / "out", "npz", topics=["/imu"])
    with np.load(result.files["/imu"], allow_pickle=False) as columns, fastbag.open(path) as bag:
        arr = bag.read("/imu")
        assert "orientation" not in columns.files and "header.stamp" not in columns.files
        assert columns["linear_acceleration.z"].tolist() == arr["linear_acceleration"]["z"].tolist()
        assert columns["header.stamp.secs"].tolist() == arr["header"]["stamp"]["secs"].tolist()
        assert columns["orientation_covariance"].shape == (len(arr), 9)  # a fixed T[k] of numbers: one (N, k) array
        assert all(columns[k].dtype.names is None for k in columns.files)


def test_npz_on_a_real_odometry_has_the_pandas_paths(tmp_path):
    path = data_file("ros1v2/zaki0929__bagfiles__2018__feb13__col.bag")
    result = fastbag.export(path, tmp_path, "npz", topics=["/odom"])
    with np.load(result.files["/odom"], allow_pickle=False) as columns, fastbag.open(path) as bag:
        arr = bag.read("/odom")
        frame = arr.to_pandas()
        for column in ("pose.pose.position.x", "twist.twist.angular.z", "header.stamp.nsecs"):
            np.testing.assert_array_equal(columns[column], frame[column].to_numpy())
        assert columns["pose.covariance"].shape == (len(arr), 36)
        assert all(columns[k].dtype.names is None for k in columns.files)


@pytest.mark.parametrize("codec, suffix, opener", [("gzip", ".gz", gzip.open), ("bz2", ".bz2", bz2.open),
                                                   ("xz", ".xz", lzma.open), ("zstd", ".zst", None)])
def test_csv_compression(tmp_path, codec, suffix, opener):
    if codec == "zstd":
        zstandard = pytest.importorskip("zstandard")
        def opener(p):
            return zstandard.open(p, "rb")
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.3, points=100)
    plain = fastbag.export(path, tmp_path / "plain", "csv", ["/imu", "/tf"], step=20)
    packed = fastbag.export(path, tmp_path / codec, "csv", ["/imu", "/tf"], step=20, compression=codec)
    for topic in ("/imu", "/tf"):
        assert packed.files[topic].endswith(".csv" + suffix)
        with opener(packed.files[topic]) as f, open(plain.files[topic], "rb") as g:
            assert f.read() == g.read()  # every part in one stream
        pd.testing.assert_frame_equal(pd.read_csv(packed.files[topic]), pd.read_csv(plain.files[topic]))


def test_npz_compression(tmp_path):
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.3, points=100)
    plain = fastbag.export(path, tmp_path / "plain", "npz", ["/imu"])
    for codec in ("deflate", "gzip"):
        packed = fastbag.export(path, tmp_path / codec, "npz", ["/imu"], compression=codec)
        with zipfile.ZipFile(packed.files["/imu"]) as archive:
            assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
        with np.load(packed.files["/imu"]) as a, np.load(plain.files["/imu"]) as b:
            assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    with zipfile.ZipFile(fastbag.export(path, tmp_path / "none", "npz", ["/imu"], compression="none")
                         .files["/imu"]) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}


@pytest.mark.parametrize("fmt, codec", [("csv", "lz4"), ("csv", "snappy"), ("npz", "zstd"), ("npz", "lz4"),
                                        ("parquet", "xz")])
def test_a_codec_the_format_cannot_use_is_refused_naming_the_ones_it_can(tmp_path, fmt, codec):
    path = int32_bag(tmp_path / "one.bag", ["/a"])
    with pytest.raises(ValueError, match=f"{fmt} compression must be one of .*none.*not '{codec}'"):
        fastbag.export(path, tmp_path / "out", fmt, compression=codec)
    assert not (tmp_path / "out").exists()


def test_cli_export_compression(tmp_path, capsys):
    path = int32_bag(tmp_path / "one.bag", ["/a"])
    assert main(["export", str(path), str(tmp_path / "out"), "--format", "csv", "--compression", "gzip"]) == 0
    assert pd.read_csv(tmp_path / "out" / "a.csv.gz")["data"].tolist() == [0]
    capsys.readouterr()
    assert main(["export", str(path), str(tmp_path / "bad"), "--format", "csv", "--compression", "lz4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # a usage error, before any work
    assert err == ["fastbag: error: argument --compression: csv compression is one of none, gzip, bz2, xz, zstd, "
                   "not 'lz4'"] and not (tmp_path / "bad").exists()


def test_json_cells_of_every_leaf_kind():
    from fastbag.convert.export import json_cells

    assert json_cells(pa.array([[-128, -1, 0, 127]], type=pa.large_list(pa.int8()))) == ["[-128,-1,0,127]"]
    assert json_cells(pa.array([[0, 1, 255], []], type=pa.large_list(pa.uint8()))) == ["[0,1,255]", "[]"]
    assert json_cells(pa.array([[True, False]], type=pa.large_list(pa.bool_()))) == ["[true,false]"]
    assert json_cells(pa.array([[2**64 - 1]], type=pa.large_list(pa.uint64()))) == ["[18446744073709551615]"]
    assert json_cells(pa.array([[0.1, 1e300]], type=pa.large_list(pa.float64()))) == ["[0.1,1e+300]"]
    sliced = pa.array([[1, 2], [3, 4], [5]], type=pa.large_list(pa.int32()))[1:]  # offsets not from 0
    assert json_cells(sliced) == ["[3,4]", "[5]"]
    fixed = pa.array([[{"a": 1, "b": "x"}], [{"a": 2, "b": "y"}]],
                     type=pa.list_(pa.struct([("a", pa.int32()), ("b", pa.large_string())]), 1))[1:]
    assert json_cells(fixed) == ['[{"a":2,"b":"y"}]']


def test_an_array_of_a_type_without_fields_has_no_column_whatever_its_counts(tmp_path):
    """``Empty[] e``: to_pandas and CSV have no column for it whether its counts are equal within a part (a dense
    array) or vary (Ragged): one CSV header for every part (before, a later part's rows had a cell more)."""
    path = tmp_path / "empties.bag"
    sep = "=" * 80
    with fastbag.Writer(path, compression="none") as w:
        conn = w.add_connection("/t", "p/Main", f"Empty[] e\nint32 v\n{sep}\nMSG: p/Empty\n")
        for k, count in enumerate([1, 1, 1, 2]):  # parts of 2: counts 1, 1 (equal), then 1, 2
            w.write(conn, 10**18 + k, struct.pack("<Ii", count, k))
    with fastbag.open(path) as bag:
        for part in (bag.read("/t", end=10**18 + 2), bag.read("/t", start=10**18 + 2), bag.read("/t")):
            assert list(part.to_pandas().columns) == ["v"]
        assert np.diff(bag.read("/t")["e"].offsets).tolist() == [1, 1, 1, 2]  # (the counts are read)
    result = fastbag.export(path, tmp_path / "csv", "csv", step=2)
    assert (tmp_path / "csv" / "t.csv").read_text().splitlines() == [
        "time,v", *(f"{10**18 + k},{k}" for k in range(4))]
    assert result.messages == 4
