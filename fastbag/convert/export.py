"""Export a bag's topics to files: Parquet, CSV or NPZ, one file per topic.

Topics are read with :meth:`~fastbag.bag.Bag.iter_read` (Parquet and CSV
stream part after part, so memory stays bounded however large the topic);
NPZ holds whole arrays, so a topic is read at once. Each file is written
under a temporary name in the output folder and renamed when complete: an
interrupted export leaves no half-written file under a final name. A topic
that cannot be decoded or written (a file-system error included) is reported
in :attr:`ExportResult.skipped` and the others are exported all the same.

File names are the topic with its leading ``/`` dropped and the others
turned into ``.`` (ROS names hold no dots, so names stay unique):
``/camera/image_raw`` -> ``camera.image_raw.parquet``. A name too long for
a file system (more than :data:`MAX_NAME` bytes) keeps a readable prefix and
ends in ``~`` and 12 hex digits of the topic's SHA-256.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import glob
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import sys
import time
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bag import Bag, no_topic, parse_step
from ..bag import open as open_bag
from ..errors import FastbagError, FastbagWarning
from ..msg.arrays import Nested, Ragged, StructArray, field_kind
from ..msg.messages import TimeLike, time_ns
from .arguments import check_open_options
from .tables import native, nested_child, require, time_column

FORMATS = ("parquet", "csv", "npz")
PARQUET_CODECS = ("lz4", "zstd", "snappy", "gzip", "brotli", "none")
#: CSV codecs and the suffix each adds to the file name (the one pandas.read_csv infers the codec from).
CSV_CODECS = {"none": "", "gzip": ".gz", "bz2": ".bz2", "xz": ".xz", "zstd": ".zst"}
#: NPZ codecs: both mean the zip's DEFLATE, as np.savez_compressed writes (np.load reads it as it is).
NPZ_CODECS = ("none", "deflate", "gzip")
CODECS = {"parquet": PARQUET_CODECS, "csv": tuple(CSV_CODECS), "npz": NPZ_CODECS}
#: Longest file name (bytes) an export writes; the temporary name adds ``.`` and ``.<pid>.partial`` to it and
#: must stay within the usual 255-byte limit too.
MAX_NAME = 200


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
    output folder or hides in it. A name longer than :data:`MAX_NAME` bytes
    keeps its start and ends in ``~`` + 12 hex digits of the topic's SHA-256
    (the same topic, the same name). ``format`` is the file's suffix without
    the dot (``"csv.gz"`` too).
    """
    stem = ".".join(re.sub(r"[^A-Za-z0-9_\-]", "_", part) for part in topic.strip("/").split("/")) or "_"
    if len(stem) + 1 + len(format) > MAX_NAME:  # ASCII after sanitizing: characters are bytes
        digest = hashlib.sha256(topic.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        stem = f"{stem[:MAX_NAME - len(format) - 15]}~{digest}"
    return f"{stem}.{format}"


def _unique_filenames(topics: Iterable[str], format: str) -> dict[str, str]:  # noqa: A002
    """A file name per topic; names that clash after sanitizing get ``~2``, ``~3``...

    Given all of a bag's topics, whatever an export selects, so that a topic's file is always the same. A topic
    named as ROS names it (``/a/b``: letters, digits, ``_``, ``-``, a leading ``/``) keeps the plain name
    before ones written otherwise (``a/b``, ``/a b``), then by name."""
    def plain(topic: str) -> bool:
        return topic.startswith("/") and re.fullmatch(r"[A-Za-z0-9_\-/]+", topic) is not None

    names: dict[str, str] = {}
    taken: set[str] = set()
    for topic in sorted(topics, key=lambda t: (not plain(t), t)):
        name = topic_filename(topic, format)
        stem, k = name[:-len(format) - 1], 1
        while name in taken:
            k += 1
            name = f"{stem}~{k}.{format}"
        taken.add(name)
        names[topic] = name
    return names


def _seconds(ns: int) -> str:
    """Nanoseconds since the epoch as exact seconds, as ``fastbag export --start`` takes them."""
    return f"{'-' if ns < 0 else ''}{abs(ns) // 10**9}.{abs(ns) % 10**9:09d}"


@dataclass(frozen=True)
class _Reading:
    """How an export reads each topic: parts of ``step``, the messages in ``[start, end)``."""

    step: int | str
    start: TimeLike | None = None
    end: TimeLike | None = None

    def parts(self, bag: Bag, topic: str) -> Iterator[Any]:
        """The topic's parts; an empty one gives one empty part, so that its file still has the schema."""
        empty = True
        for part in bag.iter_read(topic, step=self.step, start=self.start, end=self.end):
            empty = False
            yield part
        if empty:
            yield bag.take(topic, slice(0, 0))

    def whole(self, bag: Bag, topic: str) -> Any:
        return bag.read(topic, self.start, self.end)

    def count(self, bag: Bag, topic: str) -> int:
        if self.start is None and self.end is None:
            return bag.topics[topic].message_count
        return len(bag.times(topic, self.start, self.end))


def export(bag: Bag | str | os.PathLike[str], out_dir: str | os.PathLike[str], format: str = "parquet",  # noqa: A002
           topics: Iterable[str] | None = None, *, step: int | str = "256 MB", progress: bool | None = None,
           compression: str | None = None, start: TimeLike | None = None, end: TimeLike | None = None,
           **open_options: Any) -> ExportResult:
    """Write every topic (or ``topics``) of a bag into ``out_dir``, one file per topic.

    ``start`` and ``end`` bound the messages written (``[start, end)``, as
    :meth:`~fastbag.bag.Bag.read` takes them, but a start not before the
    end is a ValueError, where ``read`` gives no rows: an export of no
    time is a mistake); a topic without messages there still gets its
    file (no rows). A file name depends on the topic
    and the bag's other topics only, whichever are exported (see
    :func:`topic_filename`): an export into a folder holding an earlier
    one's files replaces the files of the topics it writes, and a topic it
    skips says when an earlier file of its name is there.

    ``format``: ``"parquet"`` (schema from :func:`~fastbag.convert.tables.to_arrow`,
    the ROS type, md5sum and definition in the schema's metadata), ``"csv"``
    (the flat columns of ``to_pandas``; ``time`` in int ns; list columns as
    text) or ``"npz"`` (flat NumPy arrays by path; a column of lists as
    ``path.values`` and ``path.offsets``). ``step`` is the part size for
    :meth:`~fastbag.bag.Bag.iter_read`. ``progress`` shows a tqdm bar
    (default: when stderr is a terminal and tqdm is installed). Unknown
    topics, an unknown format, codec or an invalid ``step`` raise KeyError
    or ValueError before anything is written (NPZ reads whole topics, but
    its ``step`` is checked all the same).

    ``compression`` by format (:data:`CODECS`):

    - Parquet: ``"lz4"`` by default (the fastest; sensor data is mostly
      noise that no codec shrinks much), ``"zstd"``, ``"snappy"``,
      ``"gzip"``, ``"brotli"``, ``"none"``.
    - CSV: none by default; ``"gzip"``, ``"bz2"``, ``"xz"``, ``"zstd"`` (needs
      the zstandard package) add ``.gz``, ``.bz2``, ``.xz``, ``.zst`` to the file
      name, which ``pandas.read_csv`` reads as it is.
    - NPZ: none by default; ``"deflate"`` (or ``"gzip"``: the same DEFLATE)
      compresses the members as ``np.savez_compressed`` does.

    Parquet strings: a string column (at any depth) is ``large_string``
    unless some message of the topic holds a string that is not UTF-8; then
    the whole column is ``large_binary`` (the raw bytes, every row), the
    schema ``to_arrow`` gives for the whole topic, whatever ``step``. When
    such a string first comes in a later part, the rows already written are
    copied once, row group by row group, into a file with the binary column.

    CSV: list and struct cells (``T[]``, fixed arrays of more than 16
    numbers, arrays of messages) are JSON text, as ``json.dumps`` writes it:
    objects with double-quoted keys, floats in the shortest text that reads
    back as the same value of their own type (a float32 ``0.019`` is
    ``0.019``), NaN and infinities as ``NaN``, ``Infinity``, ``-Infinity``
    (``json.loads`` reads them; strict JSON parsers need their NaN option),
    strings that are not UTF-8 with their bytes as ``\\udcXX`` escapes
    (``s.encode("utf-8", "surrogateescape")`` gives them back). A string cell
    that is not UTF-8 (``to_pandas`` keeps it as ``bytes``) is Python's bytes
    literal, ``b'caf\\xe9'``, as pandas writes bytes, and
    :func:`ast.literal_eval` gives the bytes back: the file stays UTF-8, so
    any CSV reader takes it (a real string spelling such a literal reads the
    same: Parquet and NPZ keep the two apart).

    NPZ keys depend on the message type only: every leaf by its dotted path
    (``pose.pose.position.x``; a fixed array ``T[k]`` of numbers is one
    ``(N, k)`` array), every variable-length array (``T[]``, arrays of
    messages) as ``path.offsets`` (int64, N+1) and its elements under
    ``path.values`` (``path.values.x``... for messages), even when every
    message has the same count. Strings are NumPy str arrays (bytes arrays
    where some are not UTF-8), which cannot end a string in NUL characters:
    a string's trailing NULs are dropped (Parquet and CSV keep them).
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    parse_step(step)  # one clear error before any folder or file exists (NPZ does not use it)
    first, stop = time_ns(start, "start"), time_ns(end, "end")
    if first is not None and stop is not None and first >= stop:
        raise ValueError(f"start ({_seconds(first)} s) is not before end ({_seconds(stop)} s): [start, end) "
                         "holds no time")
    reading = _Reading(step, start, end)
    check_open_options(open_options, "fastbag.export")
    if open_options and isinstance(bag, Bag):
        raise TypeError(f"fastbag.export got {', '.join(sorted(open_options))} for a bag already open: pass its "
                        "path to have it opened with them")
    if compression is not None and compression not in CODECS[format]:
        raise ValueError(f"{format} compression must be one of {', '.join(CODECS[format])}, not {compression!r}")
    skippable: tuple[type[BaseException], ...] = (FastbagError, ValueError, OSError, MemoryError)
    if format == "parquet":
        require("pyarrow.parquet", "arrow", "Parquet export")
        import pyarrow as pa

        skippable += (pa.ArrowException,)  # a type Arrow or Parquet cannot store (ArrowNotImplementedError...)
    elif format == "csv":
        require("pandas", "pandas", "CSV export")
    if format == "csv" and compression == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError:
            raise ImportError("CSV zstd compression needs zstandard: pip install zstandard") from None
    suffix = format + (CSV_CODECS[compression or "none"] if format == "csv" else "")
    options = {} if compression is None else {"compression": compression}
    owned = not isinstance(bag, Bag)
    opened = open_bag(bag, **open_options) if owned else bag  # type: ignore[arg-type]
    try:
        wanted = list(opened.topics) if topics is None else list(dict.fromkeys([topics] if isinstance(topics, str)
                                                                                else topics))
        unknown = [t for t in wanted if t not in opened.topics]
        if unknown:
            raise no_topic(unknown[0], opened.path, opened.topics)
        out = Path(out_dir)
        if out.exists() and not out.is_dir():  # (mkdir would say only "File exists")
            raise NotADirectoryError(errno.ENOTDIR, "not a folder to export into: a file of that name exists",
                                     str(out))
        total = sum(reading.count(opened, t) for t in wanted)  # (the time bounds checked before writing)
        if not total and (first is not None or stop is not None) and opened.message_count:
            warnings.warn(FastbagWarning(
                f"{opened.path}: no message of the {len(wanted)} topic{'s' * (len(wanted) != 1)} exported lies in "
                f"[start, end) = [{'-' if first is None else _seconds(first)}, "
                f"{'-' if stop is None else _seconds(stop)}) s; the bag's messages run from "
                f"{_seconds(opened.start_time)} to {_seconds(opened.end_time)} s (since the epoch): its files hold "
                "no rows"), stacklevel=2)
        created = not out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # (said as a folder it cannot write into is: mkdir names only the path)
            raise OSError(exc.errno, f"cannot make the export folder: {exc.strerror}", str(out)) from None
        try:
            _check_writable(out)
        except OSError:
            if created:  # (as when nothing could be written: no empty folder left behind)
                out.rmdir()
            raise
        result = ExportResult()
        bar = _progress_bar(progress, total, opened.path)
        try:
            filenames = _unique_filenames(opened.topics, suffix)
            _sweep_stale_partials(out, [filenames[t] for t in wanted])
            for topic in wanted:
                final = out / filenames[topic]
                temporary = out / f".{final.name}.{os.getpid()}.partial"
                try:
                    count = _WRITERS[format](opened, topic, temporary, reading, bar, **options)
                    os.replace(temporary, final)
                except skippable as exc:  # this topic cannot be decoded
                    # or stored (memory: a part of ``step`` too large for this machine; its arrays are gone now)
                    result.skipped[topic] = f"{type(exc).__name__}: {exc}" + (
                        " (a smaller step may fit)" if isinstance(exc, MemoryError) else "") + (
                        f" ({final} is an earlier export's, left as it was)" if final.exists() else "")
                    if bar is not None:
                        bar.write(f"fastbag: skipped {topic}: {exc}")
                    continue
                finally:
                    with contextlib.suppress(OSError):  # a cleanup error must not hide the one that matters
                        temporary.unlink(missing_ok=True)
                result.files[topic] = str(final)
                result.messages += count
        except KeyboardInterrupt as exc:  # (and SIGTERM as the CLI raises it): say which files are complete
            note = "complete before the interrupt: " + (", ".join(f"{t} -> {p}" for t, p in result.files.items())
                                                        or "none")
            # (BaseException.add_note from Python 3.11; 3.10's traceback prints no notes, the CLI does)
            exc.__notes__ = [*getattr(exc, "__notes__", ()), note]
            raise
        finally:
            if bar is not None:
                bar.close()
            if created and not result.files:  # nothing written (every topic skipped, or interrupted early):
                with contextlib.suppress(OSError):  # leave no empty folder behind (rmdir: only if empty)
                    out.rmdir()
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


def _check_writable(out: Path) -> None:
    """OSError, once, where nothing can be written into ``out`` (a read-only file system, no permission): not one
    per topic. Asked of the system (access(2)), with no file made: a file appearing in the folder is what a
    watcher of an export takes for its start."""
    if not os.access(out, os.W_OK | os.X_OK):
        read_only = os.statvfs(out).f_flag & os.ST_RDONLY
        code = errno.EROFS if read_only else errno.EACCES
        raise OSError(code, f"cannot write into the export folder: {os.strerror(code)}", str(out))


def _write_parquet(bag: Bag, topic: str, path: Path, reading: _Reading, bar: Any, compression: str = "lz4") -> int:
    pq = require("pyarrow.parquet", "arrow", "Parquet export")
    writer, count = None, 0
    opened: list[Any] = []  # files Python opened for pyarrow (see _sink), closed after their writer
    try:
        for part in reading.parts(bag, topic):
            table = bytes_as_binary(parquet_ready(part.to_arrow()))
            if writer is None:
                metadata = dict(table.schema.metadata or {})
                # (the name's bytes: a name that is not UTF-8 with \xNN escapes, as fastbag prints it)
                source = os.fsencode(os.path.basename(bag.path)).decode("utf-8", "backslashreplace")
                metadata[b"fastbag.source"] = source.encode()
                table = table.replace_schema_metadata(metadata)
                # No dictionaries: hashing every image or cloud costs 3x the write, for values that never repeat.
                writer = pq.ParquetWriter(_sink(path, "wb", opened), table.schema, compression=compression,
                                          use_dictionary=False)
            elif not table.schema.equals(writer.schema, check_metadata=False):
                schema = widened(writer.schema, table.schema)
                if not schema.equals(writer.schema, check_metadata=False):  # a string column turns binary
                    writer.close()
                    _close(opened)  # (flushed: the rewrite reads the file back)
                    writer = _rewritten(path, schema, compression, opened)
                table = table.cast(schema)  # e.g. UTF-8 strings after a part that was not: binary too
            writer.write_table(table)
            count += len(part)
            if bar is not None:
                bar.update(len(part))
    finally:
        if writer is not None:
            writer.close()
        _close(opened)
    return count


def _sink(path: Path, mode: str, opened: list[Any]) -> Any:
    """What pyarrow reads or writes ``path`` through: the path, or, where it is not UTF-8 (pyarrow encodes a
    path as UTF-8: a folder or bag named so made every topic's write fail), Python's file of it, added to
    ``opened``."""
    try:
        str(path).encode()
        return str(path)
    except UnicodeEncodeError:
        opened.append(open(path, mode))
        return opened[-1]


def _close(files: list[Any]) -> None:
    """Close ``files`` (what _sink opened, after their writer or reader) and forget them."""
    while files:
        files.pop().close()


def _rewritten(path: Path, schema: Any, compression: str, opened: list[Any]) -> Any:
    """A new writer at ``path`` holding the rows already written there, cast to ``schema`` row group by row group."""
    pq = require("pyarrow.parquet", "arrow", "Parquet export")
    old = path.with_name(path.name + ".old")
    os.replace(path, old)
    writer = pq.ParquetWriter(_sink(path, "wb", opened), schema, compression=compression, use_dictionary=False)
    reading: list[Any] = []
    try:
        with pq.ParquetFile(_sink(old, "rb", reading)) as source:
            for i in range(source.num_row_groups):
                writer.write_table(source.read_row_group(i).cast(schema))
    except BaseException:
        writer.close()
        raise
    finally:
        _close(reading)
        old.unlink()
    return writer


def widened(schema: Any, other: Any) -> Any:
    """``schema`` with every string that is binary in ``other`` (at any depth) made ``large_binary``.

    Two parts of a topic differ only there (a part whose strings are not all
    UTF-8); any other difference raises ValueError.
    """
    import pyarrow as pa

    def text(kind: Any) -> bool:
        return pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)

    def wide(a: Any, b: Any) -> Any:
        if a.equals(b):
            return a
        if text(a) and text(b):
            return pa.large_binary()
        if pa.types.is_struct(a) and pa.types.is_struct(b) and a.names == b.names:
            return pa.struct([f.with_type(wide(f.type, g.type)) for f, g in zip(a, b)])
        if pa.types.is_large_list(a) and pa.types.is_large_list(b):
            return pa.large_list(a.value_field.with_type(wide(a.value_type, b.value_type)))
        if pa.types.is_fixed_size_list(a) and pa.types.is_fixed_size_list(b) and a.list_size == b.list_size:
            return pa.list_(a.value_field.with_type(wide(a.value_type, b.value_type)), a.list_size)
        raise ValueError(f"a part of the topic has type {b}, the ones before {a}")

    if schema.names != other.names:
        raise ValueError(f"a part of the topic has columns {other.names}, the ones before {schema.names}")
    return pa.schema([f.with_type(wide(f.type, g.type)) for f, g in zip(schema, other)], metadata=schema.metadata)


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
            item = column.type.value_field.with_type(values.type)  # non-nullable stays so
            if pa.types.is_fixed_size_list(column.type):
                return pa.FixedSizeListArray.from_arrays(values, type=pa.list_(item, column.type.list_size))
            offsets = np.asarray(column.offsets)
            kind = pa.large_list(item) if pa.types.is_large_list(column.type) else pa.list_(item)
            return type(column).from_arrays(pa.array(offsets - offsets[0]), values, type=kind)  # ROS: no nulls
        if not pa.types.is_struct(column.type):
            return column
        kept, fields = [], []
        for i in range(column.type.num_fields):
            child_field = column.type.field(i)
            child = strip(f"{name}.{child_field.name}", column.field(i))
            if child is not None:
                kept.append(child)
                fields.append(child_field.with_type(child.type))
        if not fields:
            dropped.append(name)
            return None
        if fields == [column.type.field(i) for i in range(column.type.num_fields)]:
            return column  # no member dropped, at any depth below
        return pa.StructArray.from_arrays(kept, fields=fields)

    def has_empty_struct(kind: Any) -> bool:
        if is_list(kind):
            return has_empty_struct(kind.value_type)
        return pa.types.is_struct(kind) and (kind.num_fields == 0 or
                                             any(has_empty_struct(kind.field(i).type) for i in range(kind.num_fields)))

    if not any(has_empty_struct(f.type) for f in table.schema):
        return table  # the common case: nothing to drop, nothing copied
    columns, fields = [], []
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        column = strip(name, column)
        if column is not None:
            columns.append(column)
            fields.append(table.schema.field(name).with_type(column.type))
    if not dropped:
        return table
    metadata = dict(table.schema.metadata or {})
    metadata[b"fastbag.dropped"] = ",".join(dropped).encode()
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=metadata))


def bytes_as_binary(table: Any) -> Any:
    """Top-level ``uint8[]``/``int8[]`` list columns as ``large_binary``, sharing their buffers.

    Parquet stores a list one element at a time (with repetition levels):
    an image or a point cloud's ``data`` would cost a value per byte. As
    binary it is one value per message. The converted columns are named in
    the schema metadata under ``fastbag.binary`` (``name:uint8``), so a
    reader can view them as arrays again (``np.frombuffer``).
    """
    import pyarrow as pa

    converted, columns, fields = [], [], []
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
        fields.append(table.schema.field(name).with_type(column.type))
    if not converted:
        return table
    metadata = dict(table.schema.metadata or {})
    metadata[b"fastbag.binary"] = ",".join(converted).encode()
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=metadata))


#: A temporary file of an export killed outright (SIGKILL, the OOM killer) is removed by the next export of its
#: topic into its folder once its process is gone and it has not changed for this many seconds.
STALE_PARTIAL_SECONDS = 600


def _sweep_stale_partials(out: Path, names: list[str]) -> None:
    """Remove ``out/.<name>.<pid>.partial`` files of ``names`` left by exports that were killed (no cleanup
    runs then: hundreds of MB of a large topic stayed hidden in the folder for good): those whose process is
    not running here and that have not changed for STALE_PARTIAL_SECONDS (a process of that pid on another
    machine writing to a shared folder is still writing to it)."""
    if os.name != "posix":  # (os.kill with signal 0 asks whether a process runs on POSIX alone)
        return
    now = time.time()
    for name in names:
        for path in out.glob(f".{glob.escape(name)}.*.partial"):
            pid = path.name[len(name) + 2:-len(".partial")]
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                os.kill(int(pid), 0)
                continue  # running (or another user's process): not ours to judge
            except ProcessLookupError:
                pass
            except (PermissionError, OverflowError):
                continue
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime >= STALE_PARTIAL_SECONDS:
                    path.unlink()


def _write_csv(bag: Bag, topic: str, path: Path, reading: _Reading, bar: Any, compression: str = "none") -> int:
    pd = require("pandas", "pandas", "CSV export")
    count = 0
    with _csv_stream(path, compression) as f:
        for k, part in enumerate(reading.parts(bag, topic)):
            frame = part.to_pandas()
            for name in frame.columns:  # lists (and lists of structs) as JSON text: [1.5,NaN,2]
                if isinstance(frame[name].dtype, pd.ArrowDtype):
                    frame[name] = [cell for chunk in frame[name].array.__arrow_array__().chunks
                                   for cell in json_cells(chunk)]
            # the receive time (int ns) first, as the index: inserting a column into a wide frame copies
            # every block (pandas warns of it)
            frame.index = pd.Index(part.time, name=time_column(part))
            # a NaN number written NaN, as in list cells (pandas writes an empty cell, which a reader told to
            # keep empty strings, keep_default_na=False, reads as text, turning the float column into strings)
            frame.to_csv(f, header=k == 0, index=True, na_rep="NaN")
            count += len(part)
            if bar is not None:
                bar.update(len(part))
    return count


@contextlib.contextmanager
def _csv_stream(path: Path, compression: str) -> Iterator[io.TextIOWrapper]:
    """A UTF-8 text stream into ``path``, through the codec: one stream for every part (one gzip member...)."""
    with contextlib.ExitStack() as stack:
        raw: Any = stack.enter_context(open(path, "wb"))
        if compression == "gzip":  # no name and no time in the header: the temporary name means nothing
            raw = stack.enter_context(gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0))
        elif compression == "bz2":
            raw = stack.enter_context(bz2.BZ2File(raw, "wb"))
        elif compression == "xz":
            raw = stack.enter_context(lzma.LZMAFile(raw, "wb"))
        elif compression == "zstd":
            import zstandard  # an optional package: checked by export() before anything is written

            raw = stack.enter_context(zstandard.ZstdCompressor().stream_writer(raw, closefd=False))
        yield stack.enter_context(io.TextIOWrapper(raw, encoding="utf-8", newline=""))


#: The text of every int8 and uint8 value, at the value + 128.
_BYTE_TEXT = np.array([str(k) for k in range(-128, 256)], dtype=object)


def json_cells(column: Any) -> list[str]:
    """Every element of an Arrow array (lists, structs, numbers, strings) as JSON text, for CSV cells.

    Floats are written in the shortest text that reads back as the same value
    of their own type (float32 ``0.019`` is ``0.019``, not ``0.01899999938905239``);
    NaN and infinities as ``NaN``, ``Infinity``, ``-Infinity`` (what ``json.dumps``
    writes and ``json.loads`` reads); strings that are not UTF-8 with their
    bytes as ``\\udcXX`` escapes (``surrogateescape``). Numbers are formatted
    by NumPy over whole columns; lists and structs are joined per cell.
    """
    import pyarrow as pa

    kind = column.type
    if pa.types.is_struct(kind):
        keys = [json.dumps(kind.field(i).name) + ":" for i in range(kind.num_fields)]
        fields = [json_cells(child) for child in column.flatten()]  # flatten: this slice's rows only
        return ["{" + ",".join(key + value for key, value in zip(keys, row)) + "}" for row in zip(*fields)] \
            if fields else ["{}"] * len(column)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        values = json_cells(column.flatten())
        if pa.types.is_fixed_size_list(kind):
            offsets = np.arange(len(column) + 1) * kind.list_size
        else:
            offsets = np.asarray(column.offsets)
            offsets = offsets - offsets[0]
        return ["[" + ",".join(values[i:j]) + "]" for i, j in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    if pa.types.is_floating(kind):
        numbers = column.to_numpy(zero_copy_only=False)
        text = numbers.astype(str).astype(object)  # NumPy's shortest repr of each value in its own precision
        text[np.isnan(numbers)] = "NaN"
        text[np.isposinf(numbers)] = "Infinity"
        text[np.isneginf(numbers)] = "-Infinity"
        return text.tolist()
    if pa.types.is_integer(kind):
        numbers = column.to_numpy(zero_copy_only=False)
        if numbers.dtype.itemsize == 1:  # bytes (image, cloud data): a lookup, 4x faster than formatting each
            return _BYTE_TEXT[numbers.astype(np.int16) + 128].tolist()
        return numbers.astype(str).tolist()
    if pa.types.is_boolean(kind):
        return np.where(column.to_numpy(zero_copy_only=False), "true", "false").tolist()
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return [json.dumps(v, ensure_ascii=False) for v in column.to_pylist()]
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):  # ASCII escapes, so the file stays UTF-8
        return [json.dumps(v.decode("utf-8", "surrogateescape")) for v in column.to_pylist()]
    return [json.dumps(v, default=str) for v in column.to_pylist()]


def npz_columns(arr: StructArray, prefix: str = "") -> dict[str, np.ndarray]:
    """Flat NumPy arrays of a StructArray, keyed by what its message type declares, whatever the data.

    Every leaf by its dotted path (fixed structs too: ``pose.pose.position.x``;
    a fixed array ``T[k]`` of numbers is one ``(N, k)`` array); every
    variable-length array (``T[]``, arrays of messages) as ``path.offsets``
    (int64, N+1) and its elements under ``path.values`` (flattened the same
    way), even when every message has the same count. Strings are str
    arrays (``bytes`` where they are not UTF-8), so the file loads without pickle.
    """
    out: dict[str, np.ndarray] = {}
    for name in arr.fields:
        _npz_leaf(f"{prefix}{name}", arr[name], field_kind(arr, name), out)
    return out


def _npz_leaf(name: str, value: Any, kind: str, out: dict[str, np.ndarray]) -> None:
    if isinstance(value, StructArray):
        out.update(npz_columns(value, f"{name}."))
    elif isinstance(value, Ragged):
        out[f"{name}.offsets"] = value.offsets
        _npz_leaf(f"{name}.values", value.values, "fixed", out)
    elif isinstance(value, Nested):
        child, offsets = nested_child(value)
        out[f"{name}.offsets"] = offsets
        _npz_leaf(f"{name}.values", child, "fixed", out)
    elif kind == "slot" and value.ndim > 1:  # a T[] read dense (one count in every message): the same keys
        n, k = value.shape[:2]
        out[f"{name}.offsets"] = np.arange(n + 1, dtype=np.int64) * k
        _npz_leaf(f"{name}.values", value.reshape((n * k,) + value.shape[2:]), "fixed", out)
    elif value.dtype.names is not None:  # a fixed struct, or a fixed array of them: a leaf per field
        for sub in value.dtype.names:
            _npz_leaf(f"{name}.{sub}", value[sub], "fixed", out)
    elif value.dtype.kind == "O":
        if all(isinstance(v, str) for v in value.tolist()):
            out[name] = value.astype(str)
        else:
            out[name] = np.array([v.encode() if isinstance(v, str) else v for v in value.tolist()], dtype=bytes)
    else:
        out[name] = native(np.asarray(value))


def _write_npz(bag: Bag, topic: str, path: Path, reading: _Reading, bar: Any, compression: str = "none") -> int:
    arr = reading.whole(bag, topic)
    columns = {time_column(arr): arr.time, **npz_columns(arr)}
    method = zipfile.ZIP_STORED if compression == "none" else zipfile.ZIP_DEFLATED  # savez / savez_compressed
    # What np.savez writes, by hand: a field may be called "file", savez's own argument.
    with zipfile.ZipFile(path, "w", method, allowZip64=True) as archive:
        for name, column in columns.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(column), allow_pickle=False)
    if bar is not None:
        bar.update(len(arr))
    return len(arr)


_WRITERS = {"parquet": _write_parquet, "csv": _write_csv, "npz": _write_npz}
