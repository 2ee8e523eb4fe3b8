"""Topics of many bags as Dask collections: ``fastbag.dask.read_topic`` and ``fastbag.dask.read_array``.

Building the collection opens each bag's index only: partitions are the
chunk-aligned parts :meth:`~fastbag.bag.Bag.iter_read` would make, and
divisions are the parts' first receive times, known when the bags' parts
follow one another in time. Nothing is decoded until the collection is
computed; each task opens its bag (in whichever worker process runs it),
decodes its part and closes the bag, so the graph pickles as paths and
positions and runs on ``dask.distributed`` worker processes. A task decodes
on one thread by default (``threads=1``): Dask's workers are the
parallelism, and a task that also spread over every core would compete with
the tasks beside it.

Every bag's type of the topic is checked then too: bags whose types differ
(or one type's definitions, where its columns or the field differ) raise
ValueError naming them, since one collection's columns and dtypes cannot
describe both.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..bag import Bag
from ..bag import open as open_bag
from ..container import NO_MD5
from ..errors import FastbagError, FastbagWarning, NotFoundError
from ..msg.arrays import StructArray, field_kind
from .arguments import check_open_options, expand_paths
from .tables import rebuilt_type, require

#: Default partition size: a part of this many bytes of serialized messages.
DEFAULT_STEP = "128 MB"
#: Decoding threads per task (``Bag(workers=...)``): Dask runs the tasks side by side.
DEFAULT_THREADS = 1


def _plan(paths: list[str], topic: str, step: int | str, describe: Callable[[Bag], Any],
          open_options: dict[str, Any], errors: str = "raise"
          ) -> tuple[list[tuple[str, int, int]], list[int], list[int], Any]:
    """Parts ``(path, a, b)`` of the topic in every bag holding it, each part's first and last time, and
    the first bag's ``describe(bag)``: ``(signature, value)``, what a collection needs of the topic's type (its
    columns' names and dtypes, a field's dtype and shape) and the value it builds on.

    ``describe`` runs once per distinct type and definition; ValueError where two bags' types differ, or their
    signatures do, since one collection cannot hold both. ``errors="skip"`` passes over a bag that cannot be
    opened, or whose topic is recorded in two formats (a FastbagWarning names it), ``"raise"`` raises its error.
    """
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors is 'raise' or 'skip', not {errors!r}")
    parts, first, last = [], [], []
    formats: dict[tuple[str, str, str], tuple[str, Any]] = {}  # (type, md5sum, definition) -> (first bag, description)
    for path in paths:
        try:
            bag = open_bag(path, workers=1, **open_options)  # the index only: no decoding threads
        except (FastbagError, OSError) as exc:
            if errors == "raise":
                raise
            warnings.warn(f"passed over a bag that cannot be opened: {exc}", FastbagWarning, stacklevel=3)
            continue
        with bag:
            if topic not in bag.topics:
                continue  # a fleet's bags need not all record every topic
            try:
                bag._check_topic(topic)  # DecodeError for a topic in two formats within the bag: one frame
                times = bag.topic_times(topic)
            except FastbagError as exc:
                if errors == "raise":
                    raise
                warnings.warn(f"passed over a bag whose topic cannot be read: {exc}", FastbagWarning, stacklevel=3)
                continue
            info = bag.topics[topic]
            key = (info.msgtype, info.md5sum, info.definition)
            if key not in formats:
                formats[key] = (path, describe(bag))
                _check_same_format(topic, formats, key)
            for a, b in bag.part_bounds(topic, step):
                parts.append((path, a, b))
                first.append(int(times[a]))
                last.append(int(times[b - 1]))
    if not formats:
        raise NotFoundError(f"no bag among {len(paths)} holds topic {topic!r}" + (
            " (or the bags that do cannot be opened)" if errors == "skip" else ""))
    return parts, first, last, next(iter(formats.values()))[1][1]  # (no parts: the topic has no messages)


def _check_same_format(topic: str, formats: dict[tuple[str, str, str], tuple[str, Any]],
                       key: tuple[str, str, str]) -> None:
    """ValueError unless the format ``key`` is the first one's type with the same description.

    One type: the same name (``pkg/Name`` as ``pkg/msg/Name``) or, as within a bag, the same ROS1 md5sum under
    two names (tf/tfMessage, tf2_msgs/TFMessage). Definitions that differ only where the description does not
    look (comments, a constant) still make one collection.
    """
    (msgtype, md5sum, definition), (path, description) = next(iter(formats.items()))
    other_type, other_md5sum, other_definition = key
    other_path, other_description = formats[key]
    same_type = msgtype.replace("/msg/", "/") == other_type.replace("/msg/", "/") or \
        (md5sum == other_md5sum and md5sum != NO_MD5)
    if same_type and description[0] == other_description[0]:
        return
    if same_type and len(description[0]) == 2 and all(isinstance(d, tuple) for d in description[0]):
        # one type, two layouts (ROS1's and ROS2's Header and Time): name the columns that differ
        mine, theirs = (dict(zip(*d[0])) for d in (description, other_description))
        differ = [c for c in dict.fromkeys([*mine, *theirs]) if mine.get(c) != theirs.get(c)]
        said = ", ".join(f"{c} ({mine.get(c, 'absent')} / {theirs.get(c, 'absent')})" for c in differ[:6])
        what = (f"{msgtype} in {path} and {other_type} in {other_path} have different columns: {said}"
                f"{' and more' if len(differ) > 6 else ''}")
    elif msgtype != other_type:
        what = f"{msgtype} in {path}, {other_type} in {other_path}"
    elif md5sum != other_md5sum and NO_MD5 not in (md5sum, other_md5sum):
        what = f"{msgtype} with md5sum {md5sum} in {path}, md5sum {other_md5sum} in {other_path}"
    else:
        line = next((f"{a!r} / {b!r}" for a, b in zip(definition.splitlines() + [""], other_definition.splitlines() +
                                                       [""]) if a != b), "")
        what = f"{msgtype} of two definitions in {path} and {other_path} (first difference: {line})"
    raise ValueError(f"topic {topic!r} differs between the bags: {what}; one collection cannot hold "
                     "both: read those bags separately")


def _known_divisions(first: list[int], last: list[int]) -> list[int] | None:
    """Divisions when every part ends before the next begins, else None (unknown)."""
    if all(last[k] < first[k + 1] for k in range(len(first) - 1)) and all(a <= b for a, b in zip(first, last)):
        return first + [last[-1]]
    return None


def _frame_meta(bag: Bag, topic: str) -> tuple[Any, Any]:
    """The topic's empty frame (decoding nothing: the columns and dtypes), with its columns and dtypes."""
    meta = bag.take(topic, slice(0, 0)).to_pandas()
    return (tuple(meta.columns), tuple(str(d) for d in meta.dtypes)), meta


def _read_frame(part: tuple[str, int, int], topic: str, threads: int = DEFAULT_THREADS,
                open_options: dict[str, Any] | None = None, text: bool = False) -> Any:
    path, a, b = part
    with open_bag(path, workers=threads, **(open_options or {})) as bag:
        frame = bag.take(topic, slice(a, b)).to_pandas()
    return _as_text(frame, path, topic) if text else frame


def _as_text(frame: Any, path: str, topic: str) -> Any:
    """``frame`` with the strings that are not UTF-8 (``to_pandas`` keeps them as bytes, in object columns)
    made text, each undecodable byte as ``\\xNN``: Dask's string columns (its default) hold text only, and
    converting bytes there raised a bare UnicodeDecodeError. Said once per part, naming the columns."""
    import pandas as pd
    from pandas.api.types import infer_dtype

    changed = []
    for name in frame.columns:
        column = frame[name]  # (which object columns hold bytes: asked in C, not per value in Python)
        if isinstance(column.dtype, pd.ArrowDtype):  # lists (string[]): binary where a string is not UTF-8
            arrow = column.array.__arrow_array__()
            text = _text_type(arrow.type)
            if text is not None:
                pa = require("pyarrow", "arrow", "fastbag.dask")
                frame[name] = pd.arrays.ArrowExtensionArray(pa.array(_texts(arrow.to_pylist()), type=text))
                changed.append(name)
            continue
        kind = infer_dtype(column, skipna=True) if column.dtype == object else ""
        if kind == "bytes" or (kind == "mixed" and any(isinstance(v, bytes) for v in column)):
            frame[name] = [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v for v in column]
            changed.append(name)
    if changed:
        warnings.warn(f"{path}: topic {topic}: strings that are not UTF-8 in {', '.join(changed)} are text with "
                      "\\xNN for each byte that is not (Dask's string columns hold text only; with "
                      "dask.config.set({'dataframe.convert-string': False}) they stay bytes)", FastbagWarning,
                      stacklevel=2)
    return frame


def _text_type(kind: Any) -> Any:
    """An Arrow list or struct type with its binary leaves as strings (what ``to_pandas`` gives a part whose
    strings are all UTF-8, so the collection's meta), or None where it has none."""
    pa = require("pyarrow", "arrow", "fastbag.dask")
    return rebuilt_type(kind, lambda node: pa.large_string()
                        if pa.types.is_binary(node) or pa.types.is_large_binary(node) else None)


def _texts(value: Any) -> Any:
    """``value`` (Arrow's Python values of a cell) with each ``bytes`` text, ``\\xNN`` for what is not UTF-8."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, list):
        return [_texts(v) for v in value]
    if isinstance(value, dict):
        return {k: _texts(v) for k, v in value.items()}
    return value


def read_topic(paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], topic: str, *,
               step: int | str = DEFAULT_STEP, threads: int = DEFAULT_THREADS, errors: str = "raise",
               **open_options: Any) -> Any:
    """A Dask DataFrame of ``topic`` over many bags: the columns of ``TopicArray.to_pandas()``.

    One partition per chunk-aligned part of ``step`` (messages or bytes, as
    :meth:`~fastbag.bag.Bag.iter_read`); bags in the order given (globs
    sorted); divisions are receive times when the parts follow each other
    in time. Bags without the topic are passed over. ``threads`` is how
    many threads a task decodes on (default 1: Dask's workers run tasks side
    by side). ``open_options`` go to every :func:`fastbag.open` of a bag, on
    the workers too (``definitions=`` for bags that lack some,
    ``checksums=False``, ``cache_bytes=``). ValueError names two bags whose
    message types (or types' columns) differ. ``errors="skip"`` passes over
    bags that cannot be opened (empty or damaged beyond reading, as a
    crashed recorder leaves them) or whose topic is recorded in two formats
    (a FastbagWarning names each) instead of raising their error.

    Text columns are Dask's strings where it converts them (its default,
    ``dataframe.convert-string``; ``to_pandas`` gives pandas' own ``str``):
    a string that is not UTF-8, which ``to_pandas`` keeps as bytes, then
    becomes text with ``\\xNN`` for each undecodable byte, with a
    FastbagWarning.
    """
    dd = require("dask.dataframe", "dask", "fastbag.dask")
    pd = require("pandas", "pandas", "fastbag.dask")
    paths = expand_paths(paths_or_glob)
    _check_options(open_options, "fastbag.dask.read_topic")
    parts, first, last, meta = _plan(paths, topic, step, lambda bag: _frame_meta(bag, topic), open_options, errors)
    if not parts:  # the topic is there, without messages: its columns, no rows
        return dd.from_pandas(meta, npartitions=1)
    divisions = _known_divisions(first, last)
    if divisions is not None:
        divisions = [pd.Timestamp(t, unit="ns") for t in divisions]
    from dask.dataframe.utils import pyarrow_strings_enabled

    return dd.from_map(_read_frame, parts, topic=topic, threads=threads, open_options=open_options,
                       text=pyarrow_strings_enabled(), meta=meta, divisions=divisions,
                       label=f"fastbag-{topic.strip('/').replace('/', '.')}", enforce_metadata=False)


def _check_options(open_options: dict[str, Any], caller: str) -> None:
    """TypeError for ``workers`` (a task's threads are ``threads``, its bags' opening is the index only), and
    for what fastbag.open does not take."""
    if "workers" in open_options:
        raise TypeError("fastbag.dask takes threads= (the threads a task decodes on), not workers=")
    check_open_options(open_options, caller)


def _field(arr: StructArray, field: str) -> Any:
    value: Any = arr
    for name in field.split("."):
        value = value[name]
    return value


def _field_meta(bag: Bag, topic: str, field: str) -> tuple[Any, Any]:
    """The field's kind (``"slot"`` where its size varies) and empty value, with its kind, dtype and shape; the
    KeyError for a type without the field."""
    empty = bag.take(topic, slice(0, 0))  # decodes nothing
    try:
        parent = _field(empty, field.rpartition(".")[0]) if "." in field else empty
        kind = field_kind(parent, field.rpartition(".")[2], "fixed") if isinstance(parent, StructArray) \
            else "fixed"
        value = _field(empty, field)
    except KeyError as error:
        return ("no field",), error
    if isinstance(value, np.ndarray):
        return (kind, value.dtype, value.shape[1:]), (kind, value)
    return (kind, type(value).__name__), (kind, value)


def _read_field(part: tuple[str, int, int], topic: str, field: str, threads: int = DEFAULT_THREADS,
                open_options: dict[str, Any] | None = None) -> np.ndarray:
    path, a, b = part
    with open_bag(path, workers=threads, **(open_options or {})) as bag:
        return np.ascontiguousarray(_field(bag.take(topic, slice(a, b)), field))


def read_array(paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], topic: str, field: str, *,
               step: int | str = DEFAULT_STEP, threads: int = DEFAULT_THREADS, errors: str = "raise",
               **open_options: Any) -> Any:
    """A Dask array of one fixed-size field (``"linear_acceleration"``, ``"pose.pose.position.x"``) over many bags.

    One block per part, and ``threads``, ``errors`` and ``open_options`` per task, as :func:`read_topic`. Fixed
    structs give
    structured arrays; fields whose size varies per message (``T[]``,
    strings) raise ValueError: use :func:`read_topic`. So do two bags whose
    message types differ, or whose field does (one type recorded in ROS1 and
    ROS2 is one type: a field both hold alike is one array).
    """
    da = require("dask.array", "dask", "fastbag.dask")
    dask = require("dask", "dask", "fastbag.dask")
    paths = expand_paths(paths_or_glob)
    _check_options(open_options, "fastbag.dask.read_array")
    parts, _, _, found = _plan(paths, topic, step, lambda bag: _field_meta(bag, topic, field), open_options, errors)
    if isinstance(found, KeyError):
        raise found
    kind, value = found
    if kind == "slot" or not isinstance(value, np.ndarray) or value.dtype.kind in "OU":
        raise ValueError(f"{topic} field {field!r} is of variable length in its definition (T[] or a string), so "
                         "no array can be planned for it before reading; read_array takes fixed-size fields (numbers, "
                         "T[k], structs of them): use read_topic, or read the topic and stack its arrays")
    if not parts:  # the topic is there, without messages
        return da.from_array(value)
    blocks = [da.from_delayed(dask.delayed(_read_field)(part, topic, field, threads, open_options),
                              shape=(part[2] - part[1],) + value.shape[1:], dtype=value.dtype) for part in parts]
    return da.concatenate(blocks, axis=0)
