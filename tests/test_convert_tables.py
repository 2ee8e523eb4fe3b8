"""to_pandas / to_arrow / to_polars / to_awkward / Parquet round trips against ``bag.read``, on every real bag.

The oracle is ``read`` itself (proved against rosbags by test_bag_oracle):
every topic fastbag decodes is converted whole, then up to SAMPLE messages
spread over the topic are compared value by value with ``arr[i].to_dict()``.
Subsets (``arr[idx]``) are converted too: their Nested columns no longer
hold one contiguous stretch of child rows.
"""

from __future__ import annotations

import math
import pickle
import re

import numpy as np
import pytest

import fastbag
from fastbag.convert.export import parquet_ready
from fastbag.msg.arrays import Nested, Ragged, StructArray
from conftest import open_quietly, real_bags

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
ak = pytest.importorskip("awkward")

#: Messages compared per topic (spread evenly), to bound the per-message Python of the comparison.
SAMPLE = 60


def plain(v):
    """Comparable plain values: lists, dicts, ints, floats (NaN as a marker), text as bytes."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, StructArray):
        return [plain(r.to_dict()) for r in v]
    if isinstance(v, np.ndarray):
        return [plain(x) for x in v] if v.dtype.names is not None or v.dtype.kind == "O" else plain(v.tolist())
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, np.void):
        return {n: plain(v[n]) for n in v.dtype.names}
    if isinstance(v, np.generic):
        return plain(v.item())
    if isinstance(v, str):
        return v.encode()  # strings that are not UTF-8 come back as binary: compare both as bytes
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def sample_of(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, SAMPLE)).astype(np.int64)) if n else np.zeros(0, np.int64)


def walk(arr, column: str):
    """The array ``read`` gives for a flat pandas column name (``a.b[3]``)."""
    match = re.fullmatch(r"(.*?)(?:\[(\d+)\])?", column)
    path, element = match.group(1), match.group(2)
    value = arr
    for part in path.split("."):
        value = value[part]
    if element is not None:
        value = np.asarray(value)
        value = value.reshape(len(arr), int(np.prod(value.shape[1:])))[:, int(element)]  # (-1: not for 0 rows)
    return value


def readable_topics(bag):
    for topic in bag.topics:
        try:
            yield bag.read(topic)
        except fastbag.FastbagError:
            continue  # the topic is not decodable (e.g. an empty definition): nothing to convert


def time_name(arr):
    """The receive time's column, as README says: ``time``, or ``receive_time`` beside a field ``time``."""
    return "time" if "time" not in arr.fields else "receive_time" + "_" * ("receive_time" in arr.fields)


def check_arrow(arr, table, rows):
    assert table.num_rows == len(arr)
    assert table.column(time_name(arr)).cast(pa.int64()).to_numpy().tolist() == arr.time.tolist()
    assert table.schema.metadata[b"ros.msgtype"].decode() == arr.msgtype
    assert table.column_names == [time_name(arr)] + arr.fields
    fields = table.drop_columns([time_name(arr)])
    # (a table without columns lists no rows: a type without fields, ROS2's std_msgs/Empty, has only the time)
    got = fields.take(pa.array(rows)).to_pylist() if fields.num_columns else [{} for _ in rows]
    want = [arr[int(i)].to_dict() for i in rows]
    assert plain(got) == plain(want)


def check_pandas(arr, frame, rows):
    assert len(frame) == len(arr)
    assert frame.index.name == time_name(arr) and frame.index.asi8.tolist() == arr.time.tolist()
    for field in arr.fields:
        value = arr[field]
        if (isinstance(value, StructArray) and not value.fields) or \
                (isinstance(value, np.ndarray) and value.dtype.names == ()):
            continue  # a field of a type without fields (or an array of them): nothing to show
        assert any(c == field or c.startswith((field + ".", field + "[")) for c in frame.columns), field
    for column in frame.columns:
        want = walk(arr, column)
        by_key = arr[column]  # every column's name is a key of the array too (README: arr["a.b"], "a[3]")
        if isinstance(want, np.ndarray):
            assert isinstance(by_key, np.ndarray), column
            np.testing.assert_array_equal(by_key, want, err_msg=column)
        else:
            assert type(by_key) is type(want) and plain([by_key[int(i)] for i in rows]) == \
                plain([want[int(i)] for i in rows]), column
        got = frame[column]
        if isinstance(got.dtype, pd.ArrowDtype):
            assert isinstance(want, (Ragged, Nested, np.ndarray))
            values = pa.array(got.array).take(pa.array(rows)).to_pylist()
            assert plain(values) == [plain(want[int(i)]) for i in rows], column
        elif np.asarray(want).dtype.kind in "UOS":
            assert plain(got.to_numpy(dtype=object)[rows]) == plain(np.asarray(want)[rows]), column
        else:
            np.testing.assert_array_equal(got.to_numpy(), np.asarray(want), err_msg=column)


@pytest.mark.parametrize("path", real_bags())
def test_conversions_equal_read_on_real_bags(path, tmp_path):
    with open_quietly(path) as bag:
        for arr in readable_topics(bag):
            rows = sample_of(len(arr))
            table = arr.to_arrow()
            check_arrow(arr, table, rows)
            frame = arr.to_pandas()
            check_pandas(arr, frame, rows)
            # A frame that crossed processes (a Dask worker's) keeps its column types, so pandas concatenates
            # it with one that did not: fixed-size lists of more than EXPAND_LIMIT numbers (an Odometry's
            # covariance) became object columns, pyarrow's pickle dropping their items' "not null" (QA).
            again = pickle.loads(pickle.dumps(frame))
            assert [str(d) for d in again.dtypes] == [str(d) for d in frame.dtypes]
            assert [str(d) for d in pd.concat([frame, again]).dtypes] == [str(d) for d in frame.dtypes]
            # A subset: columns of several rows per message are gathered, not sliced.
            sub = arr[rows[::-1]]
            check_arrow(sub, sub.to_arrow(), np.arange(len(sub)))
            check_pandas(sub, sub.to_pandas(), np.arange(len(sub)))

            frame = arr.to_polars()
            assert frame.height == len(arr)
            assert frame[time_name(arr)].cast(pl.Int64).to_list() == arr.time.tolist()
            got = frame.drop(time_name(arr))[rows.tolist()].to_dicts()
            assert plain(got) == plain([arr[int(i)].to_dict() for i in rows])

            records = arr.to_awkward()
            assert len(records) == len(arr)
            assert "?" not in str(ak.type(records)), ak.type(records)  # ROS values are never null: no option types
            got = ak.to_list(records[ak.Array(rows)])
            assert plain([{k: v for k, v in r.items() if k != time_name(arr)} for r in got]) == \
                plain([arr[int(i)].to_dict() for i in rows])

            if parquet_ready(table) is not table:
                continue  # Parquet cannot hold a struct without fields; the export drops them (tested there)
            file = tmp_path / "topic.parquet"
            pq.write_table(table, file)
            back = pq.read_table(file)
            assert back.schema.metadata[b"ros.msgtype"] == arr.msgtype.encode()
            check_arrow(arr, back, rows)


def test_ragged_columns_share_their_values_with_arrow(tmp_path):
    """Zero copy: a Ragged column's values and offsets are the Arrow list's buffers."""
    from fastbag.tooling.synth import write_demo_bag

    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.5, points=2000)
    with fastbag.open(path) as bag:
        arr = bag.read("/points")
        data = arr["data"]
        assert isinstance(data, Ragged)
        column = arr.to_arrow().column("data").chunk(0)
        assert pa.types.is_large_list(column.type)
        assert column.values.buffers()[1].address == data.values.ctypes.data
        assert np.array_equal(column.offsets.to_numpy(), data.offsets)
        frame = bag.read("/imu").to_pandas()
        assert frame["linear_acceleration.z"].mean() == pytest.approx(9.81, abs=0.05)
        assert "orientation_covariance[8]" in frame.columns and "header.stamp.secs" in frame.columns


def test_fields_are_not_nullable(tmp_path):
    """ROS values are never null: Arrow fields are declared non-nullable at every depth, so Awkward gives plain
    types (``float64``, not ``?float64``) and a Parquet round trip keeps the schema."""
    from fastbag.tooling.synth import write_demo_bag

    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.3, points=100)
    with fastbag.open(path) as bag:
        for topic in ("/imu", "/tf", "/points"):
            arr = bag.read(topic)
            table = arr.to_arrow()

            def nullable(kind):
                if pa.types.is_struct(kind):
                    return any(f.nullable or nullable(f.type) for f in kind)
                if hasattr(kind, "value_field"):
                    return kind.value_field.nullable or nullable(kind.value_type)
                return False

            assert not any(f.nullable or nullable(f.type) for f in table.schema), table.schema
            records = arr.to_awkward()
            assert "?" not in str(ak.type(records))
            pq.write_table(table, tmp_path / "t.parquet")
            assert pq.read_table(tmp_path / "t.parquet").schema.equals(table.schema)
        imu = bag.read("/imu")
        assert str(ak.type(imu.to_awkward().linear_acceleration.x)) == f"{len(imu)} * float64"
        assert np.array_equal(ak.to_numpy(imu.to_awkward().linear_acceleration.x), imu["linear_acceleration"]["x"])


def test_missing_library_names_the_extra(monkeypatch, tmp_path):
    from fastbag.tooling.synth import write_demo_bag

    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.2, points=100)
    monkeypatch.setitem(__import__("sys").modules, "polars", None)  # as if it were not installed
    with fastbag.open(path) as bag, pytest.raises(ImportError, match=r"pip install 'fastbag\[polars\]'"):
        bag.read("/imu").to_polars()


def test_a_field_called_time_keeps_its_name(tmp_path):
    """The receive time steps aside (``receive_time``) for a message with a field ``time``."""
    import struct

    path = tmp_path / "time.bag"
    with fastbag.Writer(path) as w:
        conn = w.add_connection("/t", "my_msgs/Tick", "float64 time\nint32 value\n")
        for k in range(5):
            w.write(conn, 10**18 + k, struct.pack("<di", k / 2, k))
    with fastbag.open(path) as bag:
        arr = bag.read("/t")
        table = arr.to_arrow()
        assert table.column_names == ["receive_time", "time", "value"]
        assert table.column("time").to_pylist() == [0.0, 0.5, 1.0, 1.5, 2.0]
        frame = arr.to_pandas()
        assert frame.index.name == "receive_time" and frame["time"].tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
        assert arr.to_polars().columns == ["receive_time", "time", "value"]
        result = fastbag.export(bag, tmp_path / "csv", "csv")
        assert pd.read_csv(result.files["/t"]).columns.tolist() == ["receive_time", "time", "value"]


def test_fields_called_time_and_receive_time_keep_their_names(tmp_path):
    """With fields ``time`` and ``receive_time`` both, the receive time is ``receive_time_``: no column hides
    another in Arrow, pandas, polars, Parquet, CSV or NPZ (before, two columns were called ``receive_time``)."""
    import struct

    path = tmp_path / "times.bag"
    with fastbag.Writer(path) as w:
        conn = w.add_connection("/t", "my_msgs/Tick", "float64 time\nint64 receive_time\n")
        for k in range(3):
            w.write(conn, 10**18 + k, struct.pack("<dq", k / 2, 40 + k))
    with fastbag.open(path) as bag:
        arr = bag.read("/t")
    assert time_name(arr) == "receive_time_" and arr["receive_time"].tolist() == [40, 41, 42]
    names = ["receive_time_", "time", "receive_time"]
    table = arr.to_arrow()
    assert table.column_names == names and table.column("receive_time").to_pylist() == [40, 41, 42]
    assert table.column("receive_time_").cast(pa.int64()).to_pylist() == arr.time.tolist()
    frame = arr.to_pandas()
    assert frame.index.name == "receive_time_" and frame["receive_time"].tolist() == [40, 41, 42]
    assert arr.to_polars().columns == names
    for fmt in ("parquet", "csv", "npz"):
        result = fastbag.export(path, tmp_path / fmt, fmt)
        assert result.skipped == {}, result.skipped
    assert pq.read_table(result_file(tmp_path, "parquet")).column_names == names
    assert pd.read_csv(result_file(tmp_path, "csv")).to_dict("list") == {
        "receive_time_": arr.time.tolist(), "time": [0.0, 0.5, 1.0], "receive_time": [40, 41, 42]}
    with np.load(result_file(tmp_path, "npz")) as columns:
        assert columns["receive_time_"].tolist() == arr.time.tolist()
        assert columns["receive_time"].tolist() == [40, 41, 42]


def result_file(tmp_path, fmt):
    return tmp_path / fmt / f"t.{fmt}"


def test_import_loads_no_optional_library():
    """``import fastbag`` (export, SyncedDataset, collate included) loads none of the extras, nor does
    ``fastbag.dask`` until it builds a collection."""
    import subprocess
    import sys

    code = ("import sys, fastbag; extras = ('pandas', 'pyarrow', 'polars', 'awkward', 'dask', 'distributed', "
            "'tqdm', 'torch'); print(sorted(m for m in extras if m in sys.modules)); "
            "print(callable(fastbag.dask.read_topic), sorted(m for m in extras if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True []"
    # the submodule imported by name, as users write it: the same functions, dask still not loaded
    code = ("import sys, fastbag.dask; from fastbag.dask import read_topic, read_array; "
            "assert read_topic is fastbag.dask.read_topic and fastbag.dask is sys.modules['fastbag.dask']; "
            "print('dask' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


@pytest.mark.parametrize("texts", [["\0b", "a\0b", "\u00df"], ["\0b", "a\0b", "x"]], ids=["utf8", "ascii"])
def test_strings_holding_nuls_convert_whole(tmp_path, texts):
    """ROS strings are counted bytes: a NUL inside one is text. Arrow, pandas, polars and Parquet cut non-ASCII
    text at its first NUL ("\\0b" became "", "a\\0b" "a")."""
    import struct

    path = tmp_path / "nuls.bag"
    with fastbag.Writer(path) as w:
        conn = w.add_connection("/t", "std_msgs/String", "string data\n")
        for k, text in enumerate(texts):
            raw = text.encode()
            w.write(conn, 10**18 + k, struct.pack("<I", len(raw)) + raw)
    with fastbag.open(path) as bag:
        arr = bag.read("/t")
    assert arr["data"].tolist() == texts
    assert arr.to_arrow().column("data").to_pylist() == texts
    assert arr.to_pandas()["data"].tolist() == texts
    assert arr.to_polars()["data"].to_list() == texts
    result = fastbag.export(path, tmp_path / "out", "parquet")
    assert pq.read_table(result.files["/t"]).column("data").to_pylist() == texts


def test_big_endian_columns_convert_in_the_machines_order(tmp_path):
    """Big-endian CDR reads as '>' arrays; Arrow takes numbers in the machine's order only, and refused them
    ("Byte-swapped arrays not supported") in to_arrow, to_pandas, to_polars, to_awkward and the exports."""
    rosbag2 = pytest.importorskip("rosbags.rosbag2", reason="rosbags writes the big-endian recording")
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    store.register(get_types_from_msg("float64 x\nint32[] a\nuint16[2] b\n", "qa/msg/M"))
    kind = store.types["qa/msg/M"]
    messages = [kind(1.5 + k, np.array([k, 7], dtype=np.int32), np.array([k, 9], dtype=np.uint16)) for k in range(3)]
    for name, little in (("be", False), ("le", True)):
        with rosbag2.Writer(tmp_path / name, version=9, storage_plugin=rosbag2.StoragePlugin.MCAP) as writer:
            conn = writer.add_connection("/t", "qa/msg/M", typestore=store)
            for k, msg in enumerate(messages):
                writer.write(conn, 10**9 + k, bytes(store.serialize_cdr(msg, "qa/msg/M", little_endian=little)))
    with fastbag.open(tmp_path / "be") as bag, fastbag.open(tmp_path / "le") as little:
        arr = bag.read("/t")
        # A message equals the same values written little-endian, and its own pickled copy
        assert [m.msg for m in bag.messages()] == [m.msg for m in little.messages()]
        assert pickle.loads(pickle.dumps(arr[1])) == arr[1] == little.read("/t")[1]
    assert arr["x"].dtype.byteorder == ">"
    rows = [{"x": m.x, "a": m.a.tolist(), "b": m.b.tolist()} for m in messages]
    assert arr.to_arrow().drop_columns(["time"]).to_pylist() == rows
    frame = arr.to_pandas()
    assert frame["x"].tolist() == [1.5, 2.5, 3.5] and frame["b[1]"].tolist() == [9, 9, 9]
    assert [list(v) for v in frame["a"]] == [[0, 7], [1, 7], [2, 7]]
    # Number columns in the machine's order: pandas sorts, groups and counts no other ("Big-endian buffer not
    # supported on little-endian compiler"), and a Dask partition's must match its meta
    assert all(frame[c].dtype.isnative for c in ("x", "b[0]", "b[1]"))
    assert frame["x"].value_counts().to_dict() == {1.5: 1, 2.5: 1, 3.5: 1} and frame.describe().shape[1] == 3
    assert arr.to_polars()["x"].to_list() == [1.5, 2.5, 3.5]
    for fmt in ("parquet", "csv", "npz"):
        result = fastbag.export(tmp_path / "be", tmp_path / fmt, fmt)
        assert result.skipped == {} and list(result.files) == ["/t"], fmt
    assert pq.read_table(result_file(tmp_path, "parquet")).drop_columns(["time"]).to_pylist() == rows
    assert pd.read_csv(result_file(tmp_path, "csv"))["x"].tolist() == [1.5, 2.5, 3.5]
    with np.load(result_file(tmp_path, "npz")) as npz:  # (torch.from_numpy refuses other byte orders)
        assert all(npz[key].dtype.isnative for key in npz.files) and npz["x"].tolist() == [1.5, 2.5, 3.5]
