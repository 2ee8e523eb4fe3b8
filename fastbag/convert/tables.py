"""A decoded topic as a table: pandas, Arrow, Polars, Awkward.

Arrow is the common layout: :func:`arrow_array` turns every column of a
:class:`~fastbag.msg.arrays.TopicArray` into an Arrow array without Python
per message. Numbers go in without a copy when they are contiguous (strided
fields of a packed row are copied once); a :class:`Ragged` column already
holds Arrow's layout (``values`` and int64 ``offsets``), so it becomes a
``large_list`` sharing those buffers; a :class:`Nested` column becomes a
``large_list`` of structs. Every field is declared non-nullable (ROS
values are never null), so Awkward gives plain types (``float64``, not
``?float64``) and Parquet stores required columns. Polars and Awkward are
built from the Arrow table.

pandas gets flat columns named by their path (``pose.pose.position.x``):
nested structs are flattened, fixed-size arrays of at most
:data:`EXPAND_LIMIT` numbers from the definition (``float64[9]
orientation_covariance``) become one column per element
(``orientation_covariance[0]``...), and what varies per message (``T[]``,
arrays of structs) stays one column of Arrow lists (``pd.ArrowDtype``; the
items of fixed-size lists there are nullable, the one type of those columns
a pickle keeps: see :func:`_picklable_type`). The index is the receive time
(``datetime64[ns]``, named ``time``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..msg.arrays import Nested, Ragged, StructArray, field_kind, offsets_of

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from ..msg.arrays import TopicArray

#: Fixed-size numeric arrays of at most this many elements become one pandas column per element.
EXPAND_LIMIT = 16


def time_column(arr: StructArray) -> str:
    """The name of the receive-time column: ``time``; ``receive_time`` when the message has a ``time`` field; with
    ``_`` appended until it names no field (a type with both ``time`` and ``receive_time`` fields)."""
    if "time" not in arr.fields:
        return "time"
    name = "receive_time"
    while name in arr.fields:
        name += "_"
    return name


def require(module: str, extra: str, what: str) -> Any:
    """Import an optional library, or raise ImportError saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs {module.split('.')[0]}: pip install 'fastbag[{extra}]'") from exc


def _pa() -> Any:
    return require("pyarrow", "arrow", "converting to Arrow")


# -- Arrow -----------------------------------------------------------------------------

def arrow_array(value: Any, kind: str = "fixed") -> "pyarrow.Array":
    """One column (a field of a StructArray, for every message) as an Arrow array.

    ``kind`` is how the message type declares the field (:func:`fastbag.msg.arrays.field_kind`):
    a ``"slot"`` array (``T[]``) is a list column even when every message
    has the same count and it was read as a dense ``(N, k)`` array, so the
    schema depends on the type only, not on the data.
    """
    pa = _pa()
    if isinstance(value, StructArray):
        names = value.fields
        if not names:  # a type without fields (std_msgs/Empty)
            return pa.StructArray.from_buffers(pa.struct([]), len(value), [None])
        return _struct([arrow_array(value[name], field_kind(value, name)) for name in names], names)
    if isinstance(value, Ragged):
        return _list(value.offsets, arrow_array(value.values))
    if isinstance(value, Nested):
        child, offsets = nested_child(value)
        return _list(offsets, arrow_array(child))
    value = np.asarray(value)
    if value.ndim > 1 and (kind == "slot" or value.shape[1] == 0):  # a dense T[], or T[0]: lists
        n, k = value.shape[:2]
        child = _numpy_arrow(value.reshape((n * k,) + value.shape[2:]))
        return _list(np.arange(n + 1, dtype=np.int64) * k, child)
    return _numpy_arrow(value)


def nested_child(value: Nested) -> tuple[Any, np.ndarray]:
    """A Nested column's elements, message after message, and their int64 offsets (the list layout)."""
    return value.values, value.offsets


def required(name: str, kind: "pyarrow.DataType") -> "pyarrow.Field":
    """A non-nullable Arrow field: ROS values are never null (Awkward then gives ``float64``, not ``?float64``)."""
    return _pa().field(name, kind, nullable=False)


def _struct(children: list["pyarrow.Array"], names: list[str]) -> "pyarrow.Array":
    return _pa().StructArray.from_arrays(children, fields=[required(n, c.type) for n, c in zip(names, children)])


def _list(offsets: np.ndarray, child: "pyarrow.Array") -> "pyarrow.Array":
    """A large_list column of ``child`` cut at ``offsets`` (int64, shared as the list's offsets buffer:
    from_arrays would copy them)."""
    pa = _pa()
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_list(required("item", child.type)), offsets.size - 1,
                                 [None, pa.py_buffer(offsets)], children=[child])


def _numpy_arrow(a: np.ndarray) -> "pyarrow.Array":
    pa = _pa()
    if a.ndim > 1:  # fixed-size arrays: (N, k, ...) -> fixed_size_list of what one element is
        k = a.shape[1]
        child = _numpy_arrow(a.reshape((a.shape[0] * k,) + a.shape[2:]))
        if k == 0:  # Arrow has no fixed-size lists of 0 elements
            return _list(np.zeros(a.shape[0] + 1, dtype=np.int64), child)
        return pa.FixedSizeListArray.from_arrays(child, type=pa.list_(required("item", child.type), k))
    if a.dtype.names is not None:  # () too: a type without fields (CDR pads it with one byte)
        names = list(a.dtype.names)
        if not names:
            return pa.StructArray.from_buffers(pa.struct([]), a.size, [None])
        return _struct([_numpy_arrow(a[name]) for name in names], names)
    if a.dtype.kind == "O":  # strings with bytes that are not UTF-8, or text ending in NULs
        try:
            return pa.array(a, type=pa.large_string())
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            return pa.array([v.encode() if isinstance(v, str) else v for v in a.tolist()], type=pa.large_binary())
    if a.dtype.kind == "U":
        return _text_arrow(a)
    if a.dtype.kind == "S":
        return pa.array(a, type=pa.large_binary())
    return pa.array(np.ascontiguousarray(native(a)))


def native(a: np.ndarray) -> np.ndarray:
    """Numbers in the machine's byte order (a copy of big-endian CDR's; anything else as it is): Arrow holds
    no other, pandas sorts, groups and counts no other, and torch takes no other."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _text_arrow(a: np.ndarray) -> "pyarrow.Array":
    """A str array as Arrow large_string, built from buffers where NumPy can encode it in bulk.

    A frame_id repeated in every message, and ASCII text, skip pyarrow's
    per-element conversion of UTF-32 (~1 s per million strings).
    """
    pa = _pa()
    n = a.size
    if n and bool((a == a[0]).all()):
        raw = str(a[0]).encode()
        offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
        data = np.frombuffer(raw, dtype=np.uint8) if raw else np.zeros(0, np.uint8)
        return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.tile(data, n)))
    try:
        encoded = a.astype(f"S{max(a.dtype.itemsize // 4, 1)}")  # ASCII only: raises for anything else
    except UnicodeEncodeError:  # UTF-8 in one C loop (pyarrow's own conversion cuts a string at a NUL)
        encoded = np.char.encode(a, "utf-8")
    width = max(encoded.dtype.itemsize, 1)
    lengths = np.char.str_len(encoded).astype(np.int64)  # (a str array holds no trailing NULs to lose)
    matrix = encoded.view(np.uint8).reshape(n, width)
    data = matrix[np.arange(matrix.shape[1]) < lengths[:, None]]  # row by row: each string's bytes in order
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets_of(lengths)), pa.py_buffer(data))


def schema_metadata(arr: "TopicArray") -> dict[str, str]:
    """What a table says about its topic: name, ROS type, md5sum and definition."""
    connection = arr.connections[0] if arr.connections else None
    meta = {"ros.topic": arr.topic, "ros.msgtype": arr.msgtype}
    if connection is not None:
        meta["ros.md5sum"] = connection.md5sum
        meta["ros.definition"] = connection.definition
        meta["ros.encoding"] = connection.encoding
    return meta


def to_arrow(arr: "TopicArray") -> "pyarrow.Table":
    """The topic as an Arrow table: ``time`` (timestamp[ns], receive time), then one column per field.

    (The receive time is ``receive_time`` for a message type with a field called ``time``, see
    :func:`time_column`.)

    Nested messages are struct columns, arrays are (large) list columns;
    the schema's metadata names the topic and its ROS type (``ros.msgtype``,
    ``ros.md5sum``, ``ros.definition``). Every field is non-nullable.
    """
    pa = _pa()
    names = [time_column(arr)] + arr.fields
    columns = [pa.array(arr.time.astype(np.int64, copy=False), type=pa.timestamp("ns"))]
    columns += [arrow_array(arr[name], field_kind(arr, name)) for name in arr.fields]
    schema = pa.schema([required(n, c.type) for n, c in zip(names, columns)], metadata=schema_metadata(arr))
    return pa.Table.from_arrays(columns, schema=schema)


def to_polars(arr: "TopicArray") -> Any:
    """The topic as a Polars DataFrame (built from :func:`to_arrow`: struct and list columns)."""
    pl = require("polars", "polars", "to_polars")
    return pl.from_arrow(to_arrow(arr))


def to_awkward(arr: "TopicArray") -> Any:
    """The topic as an Awkward array of records (built from :func:`to_arrow`; numbers and offsets shared)."""
    ak = require("awkward", "awkward", "to_awkward")
    return ak.from_arrow(to_arrow(arr), highlevel=True)


# -- pandas ----------------------------------------------------------------------------

def flat_columns(arr: StructArray) -> dict[str, Any]:
    """Every leaf column of a StructArray by its dotted path, as pandas takes them.

    NumPy arrays for numbers and strings (views where the rows allow);
    Arrow-backed pandas arrays for what holds a list per message.
    """
    out: dict[str, Any] = {}
    for name in arr.fields:
        _flatten(name, arr[name], field_kind(arr, name), out)
    return out


def _flatten(name: str, value: Any, kind: str, out: dict[str, Any]) -> None:
    data = value.values if isinstance(value, Ragged) else value
    if isinstance(data, np.ndarray) and data.dtype.names == ():
        # a type without fields (CDR pads it with a byte), or an array of them, whether its counts vary or not:
        # no data, no column (the columns depend on the type only)
        return
    if isinstance(value, StructArray):
        for sub in value.fields:
            _flatten(f"{name}.{sub}", value[sub], field_kind(value, sub), out)
        return
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.names:  # a fixed struct
        for sub in value.dtype.names:
            _flatten(f"{name}.{sub}", value[sub], "fixed", out)
        return
    if isinstance(value, np.ndarray) and value.ndim > 1 and kind == "fixed" and not value.dtype.names \
            and 0 < int(np.prod(value.shape[1:])) <= EXPAND_LIMIT:
        flat = native(value).reshape(value.shape[0], int(np.prod(value.shape[1:])))
        for i in range(flat.shape[1]):
            out[f"{name}[{i}]"] = flat[:, i]
        return
    if isinstance(value, (Ragged, Nested)) or (isinstance(value, np.ndarray) and value.ndim > 1):
        pd = require("pandas", "pandas", "to_pandas")
        column = arrow_array(value, kind)
        picklable = _picklable_type(column.type)
        out[name] = pd.arrays.ArrowExtensionArray(column if picklable is None else column.cast(picklable))
        return
    if isinstance(value, np.ndarray) and value.dtype.kind == "U":
        pd = require("pandas", "pandas", "to_pandas")
        if int(pd.__version__.split(".")[0]) >= 3:  # pandas' own str dtype is Arrow text: build it from buffers
            out[name] = pd.array(_text_arrow(value), dtype="str")
            return
    out[name] = native(value) if isinstance(value, np.ndarray) else value


def rebuilt_type(kind: "pyarrow.DataType", rule: Callable[[Any], Any]) -> "pyarrow.DataType | None":
    """``kind`` with ``rule`` applied to every type in it, the items of lists and the fields of structs first:
    ``rule(type)`` gives the type to put there, or None to keep it. None where nothing changed."""
    pa = _pa()
    new = None
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        inner = rebuilt_type(kind.value_type, rule)
        if inner is not None:
            item = kind.value_field.with_type(inner)
            new = pa.list_(item, kind.list_size) if pa.types.is_fixed_size_list(kind) else \
                pa.large_list(item) if pa.types.is_large_list(kind) else pa.list_(item)
    elif pa.types.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        inner = [rebuilt_type(f.type, rule) for f in fields]
        if any(t is not None for t in inner):
            new = pa.struct([f if t is None else f.with_type(t) for f, t in zip(fields, inner)])
    changed = rule(kind if new is None else new)
    return new if changed is None else changed


def _picklable_type(kind: "pyarrow.DataType") -> "pyarrow.DataType | None":
    """``kind`` with the items of its fixed-size lists nullable, or None where it has none non-nullable.
    pyarrow's pickle of a fixed-size list type drops its item's "not null" (pyarrow 26), so a frame that
    crossed processes (a Dask worker's) no longer had the type of one that did not, and pandas concatenated
    the two into an ``object`` column. A column of a DataFrame takes the type pickling keeps (a cast of the
    type alone: the buffers are shared)."""
    pa = _pa()

    def nullable_items(node: Any) -> Any:
        if pa.types.is_fixed_size_list(node) and not node.value_field.nullable:
            return pa.list_(node.value_field.with_nullable(True), node.list_size)
        return None

    return rebuilt_type(kind, nullable_items)


def to_pandas(arr: "TopicArray") -> "pandas.DataFrame":
    """The topic as a pandas DataFrame: flat columns by path, indexed by receive time (see the module doc)."""
    pd = require("pandas", "pandas", "to_pandas")
    index = pd.DatetimeIndex(arr.time.astype("datetime64[ns]"), name=time_column(arr))
    frame = pd.DataFrame(flat_columns(arr), index=index, copy=False)
    frame.attrs.update(schema_metadata(arr))
    return frame
