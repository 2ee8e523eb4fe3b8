"""Export a bag's topics to files: Parquet, CSV or NPZ, one file per topic.

Topics are read with :meth:`~fastbag.bag.Bag.iter_read` (Parquet and CSV
stream part after part, so memory stays bounded however large the topic);
NPZ holds whole arrays, so a topic is read at once. Each file is written
under a temporary name in the output folder and renamed when complete: an
interrupted export leaves no half-written file under a final name. A topic
that cannot be decoded is reported in :attr:`ExportResult.skipped` and the
others are exported all the same.

File names are the topic with its leading ``/`` dropped and the others
turned into ``.`` (ROS names hold no dots, so names stay unique):
``/camera/image_raw`` -> ``camera.image_raw.parquet``.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bag import Bag
from ..bag import open as open_bag
from ..errors import FastbagError
from ..msg.arrays import Nested, Ragged, StructArray
from .tables import nested_child, require, time_column

FORMATS = ("parquet", "csv", "npz")
PARQUET_CODECS = ("lz4", "zstd", "snappy", "gzip", "brotli", "none")


@dataclass
class ExportResult:
    """What an export wrote: ``files`` (topic -> path), ``skipped`` (topic -> why), ``messages`` written."""

    files: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    messages: int = 0


def topic_filename(topic: str, format: str) -> str:  # noqa: A002 - the user-facing name
    """The file name of a topic: ``/camera/image_raw`` -> ``camera.image_raw.parquet``.

    A name read from a file may hold anything: characters other than
    letters, digits, ``_`` and ``-`` become ``_``, so no name leaves the
    output folder or hides in it.
    """
    stem = ".".join(re.sub(r"[^A-Za-z0-9_\-]", "_", part) for part in topic.strip("/").split("/")) or "_"
    return f"{stem}.{format}"


def _unique_filenames(topics: list[str], format: str) -> dict[str, str]:  # noqa: A002
    """A file name per topic; names that clash after sanitizing get ``~2``, ``~3``..."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for topic in topics:
        name = topic_filename(topic, format)
        stem, k = name[:-len(format) - 1], 1
        while name in taken:
            k += 1
            name = f"{stem}~{k}.{format}"
        taken.add(name)
        names[topic] = name
    return names


def export(bag: Bag | str | os.PathLike[str], out_dir: str | os.PathLike[str], format: str = "parquet",  # noqa: A002
           topics: Iterable[str] | None = None, *, step: int | str = "256 MB", progress: bool | None = None,
           compression: str | None = None, **open_options: Any) -> ExportResult:
    """Write every topic (or ``topics``) of a bag into ``out_dir``, one file per topic.

    ``format``: ``"parquet"`` (schema from :func:`~fastbag.convert.tables.to_arrow`,
    the ROS type, md5sum and definition in the schema's metadata), ``"csv"``
    (the flat columns of ``to_pandas``; ``time`` in int ns; list columns as
    text) or ``"npz"`` (flat NumPy arrays by path; a column of lists as
    ``path.values`` and ``path.offsets``). ``step`` is the part size for
    :meth:`~fastbag.bag.Bag.iter_read`. ``progress`` shows a tqdm bar
    (default: when stderr is a terminal and tqdm is installed). Unknown
    topics raise KeyError before anything is written. ``compression`` is
    Parquet's codec: ``"lz4"`` by default (the fastest; sensor data is
    mostly noise that no codec shrinks much), ``"zstd"``, ``"snappy"``, ``"none"``.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    if format == "parquet":
        require("pyarrow.parquet", "arrow", "Parquet export")
    elif format == "csv":
        require("pandas", "pandas", "CSV export")
    if compression is not None and compression not in PARQUET_CODECS:
        raise ValueError(f"compression must be one of {', '.join(PARQUET_CODECS)}, not {compression!r}")
    options = {} if compression is None or format != "parquet" else {"compression": compression}
    owned = not isinstance(bag, Bag)
    opened = open_bag(bag, **open_options) if owned else bag  # type: ignore[arg-type]
    try:
        wanted = list(opened.topics) if topics is None else list(dict.fromkeys([topics] if isinstance(topics, str)
                                                                                else topics))
        unknown = [t for t in wanted if t not in opened.topics]
        if unknown:
            raise KeyError(f"no topic {unknown[0]!r} in {opened.path}; topics: {', '.join(opened.topics)}")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        result = ExportResult()
        bar = _progress_bar(progress, sum(opened.topics[t].message_count for t in wanted), opened.path)
        try:
            filenames = _unique_filenames(wanted, format)
            for topic in wanted:
                final = out / filenames[topic]
                temporary = out / f".{final.name}.{os.getpid()}.partial"
                try:
                    count = _WRITERS[format](opened, topic, temporary, step, bar, **options)
                    os.replace(temporary, final)
                except (FastbagError, ValueError) as exc:  # the topic cannot be decoded (or stored): report it
                    result.skipped[topic] = f"{type(exc).__name__}: {exc}"
                    if bar is not None:
                        bar.write(f"fastbag: skipped {topic}: {exc}")
                    continue
                finally:
                    if temporary.exists():
                        temporary.unlink()
                result.files[topic] = str(final)
                result.messages += count
        finally:
            if bar is not None:
                bar.close()
        return result
    finally:
        if owned:
            opened.close()


def _progress_bar(progress: bool | None, total: int, path: str) -> Any:
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        if progress:
            raise ImportError("a progress bar needs tqdm: pip install 'fastbag[progress]'") from None
        return None
    return tqdm(total=total, unit="msg", unit_scale=True, desc=os.path.basename(path), file=sys.stderr)


def _parts(bag: Bag, topic: str, step: int | str) -> Any:
    """The topic's parts; an empty topic gives one empty part, so its file still has the schema."""
    empty = True
    for part in bag.iter_read(topic, step=step):
        empty = False
        yield part
    if empty:
        yield bag.take(topic, slice(0, 0))


def _write_parquet(bag: Bag, topic: str, path: Path, step: int | str, bar: Any, compression: str = "lz4") -> int:
    pq = require("pyarrow.parquet", "arrow", "Parquet export")
    writer, count = None, 0
    try:
        for part in _parts(bag, topic, step):
            table = bytes_as_binary(parquet_ready(part.to_arrow()))
            if writer is None:
                metadata = dict(table.schema.metadata or {})
                metadata[b"fastbag.source"] = os.path.basename(bag.path).encode()
                table = table.replace_schema_metadata(metadata)
                # No dictionaries: hashing every image or cloud costs 3x the write, for values that never repeat.
                writer = pq.ParquetWriter(path, table.schema, compression=compression, use_dictionary=False)
            elif not table.schema.equals(writer.schema, check_metadata=False):
                table = table.cast(writer.schema)  # e.g. a part whose strings are all UTF-8 after one that was not
            writer.write_table(table)
            count += len(part)
            if bar is not None:
                bar.update(len(part))
    finally:
        if writer is not None:
            writer.close()
    return count


def parquet_ready(table: Any) -> Any:
    """The table without struct columns (at any depth of structs and lists) that hold no fields: Parquet cannot
    store them.

    They carry no data (a field of type ``std_msgs/Empty``, or an array of a
    type with constants only); the dropped paths are listed in the schema
    metadata under ``fastbag.dropped``.
    """
    import numpy as np
    import pyarrow as pa

    dropped: list[str] = []

    def is_list(kind: Any) -> bool:
        return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)

    def strip(name: str, column: Any) -> Any:
        if is_list(column.type):  # the elements stripped; a list of nothing goes as a whole
            values = strip(name, column.flatten())  # flatten: this array's elements only, slicing respected
            if values is None:
                return None
            if pa.types.is_fixed_size_list(column.type):
                return pa.FixedSizeListArray.from_arrays(values, column.type.list_size)
            offsets = np.asarray(column.offsets)
            return type(column).from_arrays(pa.array(offsets - offsets[0]), values)  # ROS arrays have no nulls
        if not pa.types.is_struct(column.type):
            return column
        kept, names = [], []
        for i in range(column.type.num_fields):
            child_name = column.type.field(i).name
            child = strip(f"{name}.{child_name}", column.field(i))
            if child is not None:
                kept.append(child)
                names.append(child_name)
        if not names:
            dropped.append(name)
            return None
        return column if len(names) == column.type.num_fields else pa.StructArray.from_arrays(kept, names=names)

    def has_empty_struct(kind: Any) -> bool:
        if is_list(kind):
            return has_empty_struct(kind.value_type)
        return pa.types.is_struct(kind) and (kind.num_fields == 0 or
                                             any(has_empty_struct(kind.field(i).type) for i in range(kind.num_fields)))

    if not any(has_empty_struct(f.type) for f in table.schema):
        return table  # the common case: nothing to drop, nothing copied
    columns, names = [], []
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        column = strip(name, column)
        if column is not None:
            columns.append(column)
            names.append(name)
    if not dropped:
        return table
    metadata = dict(table.schema.metadata or {})
    metadata[b"fastbag.dropped"] = ",".join(dropped).encode()
    return pa.Table.from_arrays(columns, names=names, metadata=metadata)


def bytes_as_binary(table: Any) -> Any:
    """Top-level ``uint8[]``/``int8[]`` list columns as ``large_binary``, sharing their buffers.

    Parquet stores a list one element at a time (with repetition levels):
    an image or a point cloud's ``data`` would cost a value per byte. As
    binary it is one value per message. The converted columns are named in
    the schema metadata under ``fastbag.binary`` (``name:uint8``), so a
    reader can view them as arrays again (``np.frombuffer``).
    """
    import pyarrow as pa

    converted, columns = [], []
    for name in table.column_names:
        column = table.column(name)
        kind = column.type
        if pa.types.is_large_list(kind) and kind.value_type in (pa.uint8(), pa.int8()) and column.null_count == 0:
            lists = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()  # one chunk: no copy
            if lists.offset == 0 and lists.values.offset == 0 and lists.values.null_count == 0:
                _, offsets, _, data = lists.buffers()
                column = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lists), [None, offsets, data])
                converted.append(f"{name}:{kind.value_type}")
        columns.append(column)
    if not converted:
        return table
    metadata = dict(table.schema.metadata or {})
    metadata[b"fastbag.binary"] = ",".join(converted).encode()
    return pa.Table.from_arrays(columns, names=table.column_names, metadata=metadata)


def _write_csv(bag: Bag, topic: str, path: Path, step: int | str, bar: Any, compression: str = "") -> int:
    pd = require("pandas", "pandas", "CSV export")
    count = 0
    with open(path, "w", newline="", encoding="utf-8") as f:
        for k, part in enumerate(_parts(bag, topic, step)):
            frame = part.to_pandas()
            for name in frame.columns:  # lists as text: [1, 2, 3]
                if isinstance(frame[name].dtype, pd.ArrowDtype):
                    frame[name] = [str(v) for v in frame[name].array.__arrow_array__().to_pylist()]
            # the receive time (int ns) first, as the index: inserting a column into a wide frame copies
            # every block (pandas warns of it)
            frame.index = pd.Index(part.time, name=time_column(part))
            frame.to_csv(f, header=k == 0, index=True)
            count += len(part)
            if bar is not None:
                bar.update(len(part))
    return count


def npz_columns(arr: StructArray, prefix: str = "") -> dict[str, np.ndarray]:
    """Flat NumPy arrays of a StructArray by path; lists as ``path.values`` + ``path.offsets``.

    Strings are str arrays (``bytes`` where they are not UTF-8), so the file
    loads without pickle.
    """
    out: dict[str, np.ndarray] = {}
    for name in arr.fields:
        _npz_leaf(f"{prefix}{name}", arr[name], out)
    return out


def _npz_leaf(name: str, value: Any, out: dict[str, np.ndarray]) -> None:
    if isinstance(value, StructArray):
        out.update(npz_columns(value, f"{name}."))
    elif isinstance(value, Ragged):
        out[f"{name}.values"], out[f"{name}.offsets"] = value.values, value.offsets
    elif isinstance(value, Nested):
        child, offsets = nested_child(value)
        out[f"{name}.offsets"] = offsets
        _npz_leaf(f"{name}.values", child, out)
    elif isinstance(value, np.ndarray) and value.dtype.kind == "O":
        if all(isinstance(v, str) for v in value.tolist()):
            out[name] = value.astype(str)
        else:
            out[name] = np.array([v.encode() if isinstance(v, str) else v for v in value.tolist()], dtype=bytes)
    else:
        out[name] = np.asarray(value)


def _write_npz(bag: Bag, topic: str, path: Path, step: int | str, bar: Any, compression: str = "") -> int:
    arr = bag.read(topic)
    columns = {time_column(arr): arr.time, **npz_columns(arr)}
    # What np.savez writes, by hand: a field may be called "file", savez's own argument.
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, column in columns.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(column), allow_pickle=False)
    if bar is not None:
        bar.update(len(arr))
    return len(arr)


_WRITERS = {"parquet": _write_parquet, "csv": _write_csv, "npz": _write_npz}
