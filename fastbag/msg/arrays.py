"""Decoded topics as arrays: structs of columns, ragged arrays of views, records.

:class:`TopicBuilder` runs the generic kernel over runs of messages (one run
per stretch of consecutive messages in one chunk) and assembles the columns;
:class:`TopicArray` is what ``Bag.read`` returns.

How a field presents (``arr[name]``):

- a fixed-size field: a NumPy array with one entry per message (nested fixed
  structs are structured arrays, so ``imu["linear_acceleration"]["x"]`` works);
- a nested struct with variable parts: a :class:`StructArray` (same access);
- a string: a NumPy array of ``str`` (``bytes`` for values that are not UTF-8);
- an array of primitives or fixed-size structs: a dense ``(N, k, ...)`` array
  when every message has the same count and a message's part is at most
  :data:`DENSE_LIMIT` bytes; otherwise a :class:`Ragged` whose element ``i``
  is a zero-copy view into the file mapping (uncompressed chunks), into the
  decompressed chunk, or into the run's elements copied out of that chunk
  when they take at most half of it (:meth:`TopicBuilder.compact`);
- an array of variable-size structs (``TransformStamped[]``): a
  :class:`Nested` whose element ``i`` is the :class:`StructArray` of message
  i's elements; ``string[]`` elements are string arrays.

``arr[i]`` and iteration give message objects (:mod:`fastbag.msg.messages`):
fields by attribute and ``[name]`` at every depth, reading these columns.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DecodeError, NotFoundError, UnsupportedError, close_matches
from ..io.codecs import ZSTD_MAGIC
from .layout import REPRESENTATIONS, Layout, Node, Slot
from .messages import MessageTypes, Record, Source, message_types, node_class

#: A decoded run's array elements are copied out of their decompressed chunk (TopicBuilder.compact)
#: when they take at most this share of it; views of the chunk are kept otherwise.
COMPACT_SHARE = 0.5
#: Uniform arrays up to this many bytes per message are gathered into one dense
#: (N, k) array; larger ones (images, point clouds) stay per-message views.
DENSE_LIMIT = 16 * 1024
#: A CDR topic's byte order is that of most of the first messages decoded, this many at most.
ORDER_VOTERS = 1024


def _kernels():
    from . import kernels  # Numba loads on the first decode, not at import
    return kernels


# -- columns -------------------------------------------------------------------------

def offsets_of(counts: np.ndarray) -> np.ndarray:
    """Arrow-style offsets (int64, N+1) of N counts."""
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


#: What a message that does not fit its definition's length says besides: the usual cause, and the remedy.
MISMATCH_HINT = ("the definition does not describe these messages (a wrong or outdated definition, or damaged "
                 "data): pass the right one as definitions= to fastbag.open")


#: What a CDR message whose bytes are a zstd frame means (its magic where a CDR header should be).
ZSTD_FRAME_HINT = ("its bytes are a zstd frame: the recording is compressed per message (rosbag2's MESSAGE mode) "
                   "where nothing fastbag read says so (no metadata.yaml, one that says otherwise, or an MCAP "
                   "file without its rosbag2 metadata record): open the recording's directory with its "
                   "metadata.yaml")


def check_min_size(layout: Layout, lengths: np.ndarray, first_index: int, *, topic: str | None,
                   msgtype: str | None, which: np.ndarray | None = None, payload: np.ndarray | None = None,
                   starts: np.ndarray | None = None) -> None:
    """DecodeError for the first message shorter than the layout's fixed part.

    Message ``k`` has index ``first_index + k`` in the read (``first_index +
    which[k]`` with ``which``, the positions of ``lengths`` among the run's).
    Checked before anything is sized by messages x the fixed size. Given
    the ``payload`` and the messages' ``starts`` in it (-1: not held), a
    CDR message that is a zstd frame is said to be one.
    """
    short = np.flatnonzero(lengths < layout.min_size)
    if short.size:
        k = int(short[0])
        hint = MISMATCH_HINT
        if payload is not None and starts is not None and layout.encoding.aligned and \
                0 <= int(starts[k]) <= payload.size - len(ZSTD_MAGIC) and lengths[k] >= len(ZSTD_MAGIC) and \
                payload[int(starts[k]):int(starts[k]) + len(ZSTD_MAGIC)].tobytes() == ZSTD_MAGIC:
            hint = ZSTD_FRAME_HINT
        raise DecodeError(f"message has {int(lengths[k])} bytes, fewer than the {layout.min_size} its definition "
                          f"needs; {hint}", topic=topic, msgtype=msgtype,
                          index=first_index + (k if which is None else int(which[k])))


class _PerMessage:
    """A column with a variable number of elements per message: ``counts``, ``offsets``, ``[i]``."""

    counts: np.ndarray

    def __len__(self) -> int:
        return int(self.counts.size)

    def _position(self, i: int | np.integer) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} messages")
        return int(i) % n

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]  # type: ignore[index]

    @property
    def offsets(self) -> np.ndarray:
        """Where each message's elements start in :attr:`values` (int64, N+1; read-only, made once: Arrow's
        list columns share it)."""
        cached = self.__dict__.get("_offsets")
        if cached is None:
            cached = offsets_of(self.counts)
            cached.flags.writeable = False
            self.__dict__["_offsets"] = cached
        return cached


#: A path part naming one element of a fixed array, as to_pandas names its columns: ``name[4]``.
_ELEMENT = re.compile(r"(.+)\[(\d+)\]")


def _element(value: Any, i: int, field: str, msgtype: str) -> np.ndarray:
    """Element ``i`` of every message's fixed array ``value`` (``(N, ...)``, its elements in C order, as
    to_pandas numbers its ``field[i]`` columns)."""
    if not isinstance(value, np.ndarray) or value.ndim < 2 or value.dtype.names:
        raise NotFoundError(f"{msgtype} field {field!r} is no fixed array of numbers: [{i}] picks an element of "
                            "one (a column to_pandas names so)")
    flat = value.reshape(value.shape[0], int(np.prod(value.shape[1:])))  # (-1 cannot size 0 messages)
    if i >= flat.shape[1]:
        raise NotFoundError(f"{msgtype} field {field!r} has {flat.shape[1]} elements a message, not {i + 1}")
    return flat[:, i]


class Ragged(_PerMessage):
    """Per-message arrays of varying length: element ``i`` is a view of its bytes.

    ``counts`` (int64, N) and ``offsets`` (int64, N+1) describe the lengths;
    ``values`` gathers every element into one packed array (the Arrow layout)
    on first use. ``buffers[buf[i]]`` holds element i at byte ``pos[i]``.
    ``tail``: bytes of trailing padding (part of the dtype's itemsize, the
    CDR stride) the last element of a message may lack in the buffer.
    """

    COLUMN_KIND = "ragged"  # (how messages.per_row tells columns apart; a class attribute, never a field)

    def __init__(self, buffers: list[np.ndarray], buf: np.ndarray, pos: np.ndarray, counts: np.ndarray,
                 dtype: np.dtype, tail: int = 0) -> None:
        self.buffers = buffers
        self.buf = buf
        self.pos = pos
        self.counts = counts
        self.dtype = dtype
        self.tail = tail
        self._values: np.ndarray | None = None

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, str):  # a field of the structs, per message again (as Nested gives one)
            return Nested(_struct_field(self.values, i), self.offsets[:-1], self.counts)
        if isinstance(i, (int, np.integer)):
            i = self._position(i)
            if self.dtype.itemsize == 0:  # elements of an empty type: nothing to view, no memory
                return np.zeros(int(self.counts[i]), dtype=self.dtype)
            p, nbytes = int(self.pos[i]), int(self.counts[i]) * self.dtype.itemsize
            raw = self.buffers[int(self.buf[i])][p:p + nbytes]
            if raw.size < nbytes:  # the last element's padding lies past the buffer's end: a copy
                padded = np.zeros(nbytes, dtype=np.uint8)
                padded[:raw.size] = raw
                raw = padded
            return raw.view(self.dtype)
        return Ragged(self.buffers, self.buf[i], self.pos[i], self.counts[i], self.dtype, self.tail)

    def __getattr__(self, name: str) -> Any:
        dtype = self.__dict__.get("dtype")  # (absent while unpickling or copying)
        if name.startswith("_") or dtype is None or name not in (dtype.names or ()):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return self[name]

    def __dir__(self) -> list[str]:
        dtype = self.__dict__.get("dtype")
        return sorted(set(super().__dir__()) | set(getattr(dtype, "names", None) or ()))

    @property
    def uniform(self) -> bool:
        """True when every message has the same number of elements."""
        return bool(self.counts.size == 0 or (self.counts == self.counts[0]).all())

    @property
    def values(self) -> np.ndarray:
        """Every element of every message, packed in message order (a copy, made once)."""
        if self._values is None and self.dtype.itemsize == 0:
            self._values = np.zeros(int(self.counts.sum()), dtype=self.dtype)
        if self._values is None:
            nbytes = self.counts * self.dtype.itemsize
            if self.tail:
                nbytes = np.maximum(nbytes - self.tail, 0)
            self._values = _gather(self.buffers, self.buf, self.pos, nbytes, self.offsets * self.dtype.itemsize,
                                   zeroed=bool(self.tail)).view(self.dtype)
        return self._values

    def to_numpy(self) -> np.ndarray:
        """A dense ``(N, k, ...)`` copy; raises ValueError when the counts differ."""
        if not self.uniform:
            raise ValueError("messages have different numbers of elements; use .values and .offsets")
        k = int(self.counts[0]) if self.counts.size else 0
        return self.values.reshape((len(self), k) + self.dtype.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"Ragged({len(self)} messages of {self.dtype}, {int(self.counts.sum())} elements)"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its elements packed (what a worker process needs), not the buffers they are views of:
        # the file's whole mapping or every decompressed chunk, several times the topic's bytes.
        if self.dtype.itemsize == 0:
            packed = np.zeros(0, dtype=np.uint8)
        else:
            packed = np.ascontiguousarray(self.values).view(np.uint8).reshape(-1)
        return Ragged, ([packed], np.zeros(len(self), dtype=np.int64), self.offsets[:-1] * self.dtype.itemsize,
                        self.counts, self.dtype)


def _struct_field(values: np.ndarray, name: str) -> np.ndarray:
    """Field ``name`` of packed structs ``values`` (a record array where it is a struct itself, for its
    fields by attribute); NotFoundError, with the fields there are, where they have none of that name."""
    names = getattr(getattr(values, "dtype", None), "names", None) or ()
    if name not in names:
        what = f"fields: {', '.join(names)}" if names else "its elements have no fields"
        raise NotFoundError(f"no field {name!r} in the nested array{close_matches(name, names)}; {what}")
    value = values[name]
    return value.view(np.recarray) if value.dtype.names else value


def _gather(buffers: list[np.ndarray], buf: np.ndarray, pos: np.ndarray, nbytes: np.ndarray,
            out_offsets: np.ndarray, zeroed: bool = False) -> np.ndarray:
    """Bytes of spans spread over buffers, packed at ``out_offsets`` (gaps zeroed with ``zeroed``)."""
    out = (np.zeros if zeroed else np.empty)(int(out_offsets[-1]) if out_offsets.size else 0, dtype=np.uint8)
    kernels = _kernels()
    for b in np.unique(buf).tolist():
        rows = np.flatnonzero(buf == b)
        if not kernels.spans_in_bounds(buffers[b].size, pos[rows], nbytes[rows]):
            raise DecodeError("an array runs past the end of its chunk")
        kernels.gather(buffers[b], pos[rows], nbytes[rows], out, out_offsets[rows])
    return out


class Nested(_PerMessage):
    """Per-message arrays of variable-size structs: element ``i`` is a StructArray (or strings).

    ``n[name]`` (and ``n.name``) is one field of the structs, per message again: ``tf.transforms.
    child_frame_id[i]`` holds message ``i``'s frame ids, ``tf.transforms.transform.translation.x[i]`` its x.
    """

    COLUMN_KIND = "nested"  # (how messages.per_row tells columns apart; a class attribute, never a field)

    def __init__(self, child: "StructArray | np.ndarray", first: np.ndarray, counts: np.ndarray) -> None:
        self.child = child
        self.first = first
        self.counts = counts

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, str):
            return Nested(self._child_field(i), self.first, self.counts)
        if isinstance(i, (int, np.integer)):
            i = self._position(i)
            a = int(self.first[i])
            return self.child[a:a + int(self.counts[i])]
        return Nested(self.child, self.first[i], self.counts[i])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "child" not in self.__dict__:  # (absent while unpickling or copying)
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        try:
            return self[name]
        except NotFoundError as exc:
            raise AttributeError(str(exc)) from None

    def _child_field(self, name: str) -> Any:
        """Field ``name`` of every element (NotFoundError where the elements have no such field); where the
        elements hold arrays of structs themselves, their field per element again."""
        child = self.child
        if isinstance(child, (StructArray, Nested, Ragged)):
            return child[name]
        return _struct_field(child, name)

    def __dir__(self) -> list[str]:
        child = self.__dict__.get("child")
        names = child.fields if isinstance(child, StructArray) else getattr(getattr(child, "dtype", None), "names", ())
        return sorted(set(super().__dir__()) | set(names or ()))

    @property
    def values(self) -> "StructArray | np.ndarray":
        """Every element of every message, message after message (at :attr:`offsets`): the child table
        itself, or, for a part of the messages (``arr[5:8]``, a time range), the rows of theirs (made once)."""
        cached = self.__dict__.get("_values")
        if cached is None:
            offsets = self.offsets
            total = int(offsets[-1])
            # The child's rows, message after message: one stretch unless the column is a part of another.
            take = np.repeat(self.first - offsets[:-1], self.counts) + np.arange(total)
            start = int(take[0]) if total else 0
            child = self.child
            if start == 0 and total == len(child) and np.array_equal(take, np.arange(total)):
                cached = child
            elif np.array_equal(take, np.arange(start, start + total)):
                cached = child[start:start + total]
            else:
                cached = child[take]
            self.__dict__["_values"] = cached
        return cached

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its own elements, not the whole child table of the read it is a part of.
        return Nested, (self.values, self.offsets[:-1].copy(), self.counts)

    def __repr__(self) -> str:
        return f"Nested({len(self)} messages, {int(self.counts.sum())} elements)"


def decode_strings(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Strings of ``lengths[i]`` bytes each, packed back to back in ``values``: a ``str`` array, or an object
    array with ``bytes`` where not UTF-8."""
    n = lengths.size
    if n == 0:
        return np.empty(0, dtype="U1")
    if n == 1:  # (a sample's one message: no comparisons to make)
        return _strings([_text(values[:int(lengths[0])].tobytes())])
    if (lengths == lengths[0]).all():
        width = int(lengths[0])
        if width == 0:
            return np.zeros(n, dtype="U1")
        # A constant frame_id: decode once. Every string equals the first when the bytes repeat with
        # period ``width`` (one flat comparison, ~6x faster than comparing an (n, width) matrix's rows).
        if np.array_equal(values[width:n * width], values[:(n - 1) * width]):
            text = _text(values[:width].tobytes())
            # NumPy's str arrays drop trailing NULs: such text (and bytes) go in an object array
            if isinstance(text, str) and not text.endswith("\0"):
                return np.repeat(np.array([text]), n)  # (np.full fills 1 M strings in 5 ms, this in 2)
            out = np.empty(n, dtype=object)
            out.fill(text)  # np.full would pass the value through a str array, dropping trailing NULs
            return out
    offsets = offsets_of(lengths)  # (not needed above: a million frame_ids' offsets cost 5 ms)
    width = int(lengths.max())
    if n * width > _PAD_FACTOR * (values.size + n) and n * width * 4 > _PAD_BYTES:
        # A few long strings among short ones (a stack trace in /rosout, a JSON payload): a str array is
        # n x the longest at 4 bytes a character (gigabytes for a few MB of text): Python strings instead.
        return _objects(_texts(values, offsets))
    if values.size and values.max() < 0x80 and values.min() > 0:
        # ASCII without NULs: pad into fixed-width bytes and convert in one pass
        padded = np.zeros(n * width, dtype=np.uint8)
        _kernels().gather(values, offsets[:-1], lengths, padded, np.arange(n, dtype=np.int64) * width)
        return padded.view(f"S{width}").astype(f"U{width}")
    return _strings(_texts(values, offsets))


def _strings(texts: list[str | bytes]) -> np.ndarray:
    """A str array of ``texts``, or an object array where one is bytes or text NumPy's str arrays would cut
    (at trailing NULs)."""
    if any(isinstance(t, bytes) or t.endswith("\0") for t in texts):
        return _objects(texts)
    return np.array(texts)


#: A str column is an object array of Python strings instead where padding every string to the longest
#: would take more than _PAD_FACTOR times the text (and more than _PAD_BYTES).
_PAD_FACTOR = 8
_PAD_BYTES = 32 << 20


def _texts(values: np.ndarray, offsets: np.ndarray) -> list[str | bytes]:
    """Each string of the packed bytes: ``str``, or ``bytes`` where not UTF-8."""
    raw = values.tobytes()
    return [_text(raw[a:b]) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def _objects(items: list[Any]) -> np.ndarray:
    """``items`` as a 1-D object array (np.array would make a str array, or a 2-D one of sequences)."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _text(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


# -- structs -------------------------------------------------------------------------

class StructArray:
    """A table of N rows: fixed fields in ``rows`` (structured array), variable ones in columns.

    ``s[name]`` is a field for every row (``s["a.b"]`` a nested one by its
    path, as ``to_pandas`` names columns), ``s.name`` too where no attribute
    of the array has that name (fixed structs then come as record arrays:
    ``imu.linear_acceleration.x``); ``s[i]`` is a message (see
    :mod:`fastbag.msg.messages`); ``s[a:b]`` or ``s[mask]`` a StructArray of
    those rows. ``types`` names fixed structs and their constants for the
    messages.
    """

    COLUMN_KIND = "struct"  # (how messages.per_row tells columns apart; a class attribute, never a field)

    def __init__(self, n: int, rows: np.ndarray | None, node: Node, columns: dict[int, Any], *,
                 types: MessageTypes | None = None) -> None:
        self._n = n
        self.rows = rows
        self._node = node
        self._columns = columns  # slot index -> column over all rows
        self.types = types
        self._source: Source | None = None

    def __len__(self) -> int:
        return self._n

    def __getstate__(self) -> dict[str, Any]:
        # Pickles without its message source: the classes it holds are built at run time, not importable;
        # the other process builds its own on first use (a DataLoader worker returning an array it looked in).
        return {**self.__dict__, "_source": None}

    @property
    def fields(self) -> list[str]:
        """The type's field names, in definition order (each is ``arr[name]``)."""
        return list(self._node.fields)

    @property
    def msgtype(self) -> str:
        """The message type of the rows (``sensor_msgs/Imu``; a nested field's own type for its array)."""
        return self._node.msgtype

    @property
    def constants(self) -> dict[str, Any]:
        """The message type's constants (``Log.DEBUG``, ``NavSatStatus.STATUS_FIX``...)."""
        return self._node.constants

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._field(key) if key in self._node.fields or not ("." in key or key.endswith("]")) \
                else self._path(key)
        if key is None or isinstance(key, (bool, np.bool_)):  # (NumPy adds an axis for these; rows have none)
            raise IndexError(f"messages are selected by an integer, a slice, an integer array or a boolean mask "
                             f"of {self._n} values, not {key!r}")
        if isinstance(key, (list, tuple)) and key and all(isinstance(k, str) for k in key):
            raise TypeError(f"fields are taken one at a time (arr[{key[0]!r}]); to_pandas() gives them as columns "
                            "of one table")
        if isinstance(key, (int, np.integer)):
            if not -self._n <= key < self._n:
                raise IndexError(f"index {key} out of range for {self._n} rows")
            source = self.record_source()
            return source.cls(source, int(key) % self._n)
        return self._subset(key)

    def __getattr__(self, name: str) -> Any:
        node = self.__dict__.get("_node")  # absent while unpickling or copying
        if node is None or name.startswith("_") or name not in node.fields:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        value = self._field(name)
        if isinstance(value, np.ndarray) and value.dtype.names:  # a fixed struct: fields by attribute too
            return value.view(np.recarray)
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._node.fields))

    def __contains__(self, item: Any) -> bool:
        """``"header" in arr``: whether the type has that field (as ``in`` asks a DataFrame for a column);
        anything else is looked for among the messages."""
        if isinstance(item, str):
            return item in self._node.fields
        return any(message == item for message in self)

    def record_class(self) -> type:
        """The message class of this array's rows (one per message type, built on first use)."""
        return node_class(self._node, self.rows.dtype if self.rows is not None else None, self.types)

    def record_source(self) -> Source:
        """What this array's messages read their fields from (columns built once, on first use)."""
        if self._source is None:
            self._source = Source(self.record_class(), struct=self)
        return self._source

    def _field(self, name: str) -> Any:
        try:
            kind, what = self._node.fields[name]
        except KeyError:
            raise NotFoundError(f"{self._node.msgtype} has no field {name!r}{close_matches(name, self._node.fields)}; "
                                f"fields: {', '.join(self._node.fields)}") from None
        if kind == "fixed":
            return self.rows[name]  # type: ignore[index]
        if kind == "slot":
            return self._columns[what.index]  # type: ignore[union-attr]
        sub: Node = what  # type: ignore[assignment]
        rows = self.rows[name] if sub.has_fixed else None  # type: ignore[index]
        return StructArray(self._n, rows, sub, self._columns, types=self.types)

    def _path(self, path: str) -> Any:
        """A nested field by its dotted path, as to_pandas names its columns: ``"pose.pose.position.x"`` is
        ``arr["pose"]["pose"]["position"]["x"]``, ``"orientation_covariance[4]"`` that fixed array's element 4
        (of its elements in C order); through an array of messages, ``"transforms.child_frame_id"`` is
        ``arr["transforms"]["child_frame_id"]``. NotFoundError names the part that is missing."""
        value: Any = self
        parts = path.split(".")
        for depth, part in enumerate(parts):
            element = _ELEMENT.fullmatch(part)
            name = element.group(1) if element else part
            inside = ".".join(parts[:depth])
            if isinstance(value, (StructArray, Nested)):
                value = value[name]
            else:
                names = getattr(getattr(value, "dtype", None), "names", None) or ()
                if name not in names:
                    have = f"; fields: {', '.join(names)}" if names else " (it has no fields)"
                    raise NotFoundError(f"{self._node.msgtype} field {inside!r} has no field {name!r}"
                                        f"{close_matches(name, names)}{have}")
                value = value[name]
            if element:
                value = _element(value, int(element.group(2)), ".".join(parts[:depth] + [name]), self._node.msgtype)
        return value

    def _subset(self, key: Any) -> "StructArray":
        index = np.arange(self._n)[key]
        columns = {slot: column[key] for slot, column in self._columns.items()}
        rows = self.rows[key] if self.rows is not None else None
        return StructArray(int(index.size), rows, self._node, columns, types=self.types)

    def __iter__(self) -> Iterator[Record]:
        source = self.record_source()
        cls = source.cls
        for i in range(self._n):
            yield cls(source, i)

    def to_numpy(self) -> np.ndarray:
        """One packed structured array of every field, when every row has the same layout.

        Strings become fixed-width unicode fields, uniform arrays sub-arrays.
        Raises ValueError naming the field whose length varies.
        """
        names, formats, values = [], [], []
        for name in self._node.fields:
            value = self[name]
            if isinstance(value, StructArray):
                value = value.to_numpy()
            elif isinstance(value, Ragged):
                if not value.uniform:
                    raise ValueError(f"field {name!r} has a different length in different messages")
                value = value.to_numpy()
            elif isinstance(value, Nested):
                if not (value.counts == (value.counts[0] if value.counts.size else 0)).all():
                    raise ValueError(f"field {name!r} has a different length in different messages")
                k = int(value.counts[0]) if value.counts.size else 0
                child = value.child.to_numpy() if isinstance(value.child, StructArray) else value.child
                value = np.asarray(child)[_take_rows(value.first, k)].reshape((self._n, k))
            names.append(name)
            formats.append((value.dtype, value.shape[1:]))
            values.append(value)
        out = np.empty(self._n, dtype=[(n, d, s) for n, (d, s) in zip(names, formats)])
        for name, value in zip(names, values):
            out[name] = value
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._node.msgtype}: {self._n} rows; fields {', '.join(self._node.fields)}>"


def field_kind(arr: StructArray, name: str, default: str | None = None) -> str:
    """How field ``name`` of ``arr`` is laid out: ``"fixed"`` in its fixed rows (a column of ``arr.rows``),
    ``"slot"`` in a column of its own (strings, ``T[]``, structs with variable parts); ``default`` for a
    name the type lacks (KeyError without one). A function, not an attribute: a message's field may carry
    any name (rcl_interfaces/ParameterEvent has ``node``)."""
    found = arr._node.fields.get(name)
    if found is None:
        if default is None:
            raise NotFoundError(f"{arr.msgtype} has no field {name!r}")
        return default
    return str(found[0])


def to_ns(times: Any) -> np.ndarray | int:
    """ROS times as int64 nanoseconds: ``fastbag.to_ns(imu.header.stamp)``.

    ``times`` is a field of ``time``/``duration`` values (ROS1: ``secs``,
    ``nsecs``) or of ``builtin_interfaces/Time``/``Duration`` (ROS 2: ``sec``,
    ``nanosec``), as a read gives it. The seconds are widened first: uint32
    ``secs * 10**9`` overflows silently in NumPy. One time value (``m.msg.header.stamp``
    of a message: fastbag's, genpy's or a ROS 2 stamp) gives an int; a list of them an array.
    """
    if callable(getattr(times, "to_nsec", None)):  # one Time (fastbag's, genpy's, a ROS 2 stamp message)
        return int(times.to_nsec())  # type: ignore[return-value]
    if isinstance(times, (list, tuple)) and times and all(callable(getattr(t, "to_nsec", None)) for t in times):
        return np.array([int(t.to_nsec()) for t in times], dtype=np.int64)
    if isinstance(times, StructArray):
        names = times.fields
        times = {name: times[name] for name in names}
    else:
        times = np.asarray(times)
        names = list(times.dtype.names or ())
    for sec, nsec in (("secs", "nsecs"), ("sec", "nanosec")):
        if sec in names and nsec in names:
            return np.asarray(times[sec]).astype(np.int64) * 1_000_000_000 + np.asarray(times[nsec]).astype(np.int64)
    raise TypeError(f"not ROS times (fields secs, nsecs or sec, nanosec): fields {', '.join(names) or 'none'}")


def _take_rows(first: np.ndarray, k: int) -> np.ndarray:
    return (first[:, None] + np.arange(k)).reshape(-1)


class TopicArray(StructArray):
    """A whole topic decoded: ``len()``, ``.time`` (int64 ns receive times), ``[field]``.

    Also ``.topic``, ``.msgtype``, ``.connection`` (int32 index into
    ``.connections`` per message), ``.publish_time`` and ``.sequence`` (int64
    per message where the format records them, MCAP; else None),
    ``.plot(field, ...)`` (matplotlib) and an HTML view in notebooks.
    ``.positions``: each message's position in its topic (int64) where the
    array holds some of the topic's messages (``take``, ``iter_read``, a
    subset); None for a whole topic read from its start, the positions then
    0 to len - 1. Errors about a message name it by this position.
    """

    def __init__(self, topic: str, time: np.ndarray, struct: StructArray, connection: np.ndarray,
                 connections: list[Any], publish_time: np.ndarray | None = None,
                 sequence: np.ndarray | None = None, positions: np.ndarray | None = None) -> None:
        super().__init__(len(struct), struct.rows, struct._node, struct._columns, types=struct.types)
        self.topic = topic
        self.time = time
        self.connection = connection
        self.connections = connections
        self.publish_time = publish_time
        self.sequence = sequence
        self.positions = positions

    def _subset(self, key: Any) -> "TopicArray":
        sub = super()._subset(key)
        positions = np.arange(len(self), dtype=np.int64) if self.positions is None else self.positions
        return TopicArray(self.topic, self.time[key], sub, self.connection[key], self.connections,
                          None if self.publish_time is None else self.publish_time[key],
                          None if self.sequence is None else self.sequence[key], positions[key])

    def plot(self, *fields: str, ax: Any = None, stamp: str = "receive", **options: Any) -> Any:
        """Draw ``fields`` (``"linear_acceleration.x"``, ``"ranges[0]"``...) against time; returns the
        matplotlib axes. See :func:`fastbag.viz.plot.plot_fields`; needs ``pip install 'fastbag[plot]'``."""
        from ..viz.plot import plot_fields  # an accessor: viz is a higher layer, loaded only when called

        return plot_fields(self, *fields, ax=ax, stamp=stamp, **options)

    def _repr_html_(self) -> str:
        from ..viz.html import topic_array_html  # an accessor, like plot

        return topic_array_html(self)

    # Conversions live in fastbag.convert (above this layer): imported when called, never at import.
    def to_pandas(self) -> Any:
        """A pandas DataFrame: flat columns by path, index = receive time (:func:`fastbag.convert.tables.to_pandas`)."""
        from ..convert.tables import to_pandas
        return to_pandas(self)

    def to_arrow(self) -> Any:
        """An Arrow table: struct and list columns, ragged values shared (:func:`fastbag.convert.tables.to_arrow`)."""
        from ..convert.tables import to_arrow
        return to_arrow(self)

    def to_polars(self) -> Any:
        """A Polars DataFrame (:func:`fastbag.convert.tables.to_polars`)."""
        from ..convert.tables import to_polars
        return to_polars(self)

    def to_awkward(self) -> Any:
        """An Awkward array of records (:func:`fastbag.convert.tables.to_awkward`)."""
        from ..convert.tables import to_awkward
        return to_awkward(self)

    def __repr__(self) -> str:
        return (f"<TopicArray {self.topic} ({self._node.msgtype}): {len(self)} message{'s' * (len(self) != 1)}; "
                f"fields {', '.join(self._node.fields)}>")


# -- building ------------------------------------------------------------------------

@dataclass
class _RunPiece:
    """What :meth:`TopicBuilder.decode_run` made of one run, waiting to be appended."""

    payload: np.ndarray
    file_offset: int | None
    rows: np.ndarray                 # rows per table
    fixed: list[np.ndarray]          # child tables' fixed rows (index 0 unused: root rows are in place)
    nbytes: int = 0                  # bytes of the run's messages
    first_index: int = 0             # the run's first message's index in the read, for errors
    slots: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # (pos, count) per slot
    strings: dict[int, np.ndarray] = field(default_factory=dict)             # string slot -> its bytes


class OutsideWindows(Exception):
    """A windowed walk needed bytes its windows do not hold (not an error of the file: the caller decodes
    the same messages from the mapping instead)."""


#: A zstd frame's first two bytes as a CDR representation id: messages compressed per message, undeclared.
ZSTD_FRAME_START = 0x28B5


class TopicBuilder:
    """Decode runs of messages of one layout into columns, then assemble a StructArray.

    ``file`` is the whole file's byte array: positions inside uncompressed
    chunks are kept as file offsets, so views point into the mapping.
    ``headers`` (the container's ``message_headers``, where its records hold
    a publish_time and sequence: MCAP) fills :attr:`publish_time` and
    :attr:`sequence` as each run decodes, while its bytes are in the cache.
    """

    def __init__(self, layout: Layout, file: np.ndarray, count: int, *, topic: str | None, msgtype: str,
                 types: MessageTypes | None = None,
                 headers: Callable[[np.ndarray, np.ndarray], Any] | None = None) -> None:
        self.layout = layout
        self._headers = headers
        self.publish_time = np.empty(count, dtype=np.int64) if headers is not None else None
        self.sequence = np.empty(count, dtype=np.int64) if headers is not None else None
        self.types = types  # for the decoded messages: fixed structs' type names and constants
        # Root rows of the whole read, written in place by the kernel (no concatenation).
        self.root = np.empty(count * int(layout.row_sizes[0]), dtype=np.uint8)
        self.topic = topic
        self.msgtype = msgtype
        self.buffers: list[np.ndarray] = [file]
        self._buffer_ids: dict[int, int] = {}
        self.total = np.zeros(len(layout.tables), dtype=np.int64)   # rows so far per table
        self.fixed: list[list[np.ndarray]] = [[] for _ in layout.tables]
        self.slot_pos: list[list[np.ndarray]] = [[] for _ in layout.slots]
        self.slot_cnt: list[list[np.ndarray]] = [[] for _ in layout.slots]
        self.slot_buf: list[list[np.ndarray]] = [[] for _ in layout.slots]
        self.strings: list[list[np.ndarray]] = [[] for _ in layout.slots]
        self.keeps_views = any(s.kind == "array" for s in layout.slots)
        self.unbacked = 0  # child rows so far beyond the bytes of their runs (elements that take no bytes)
        # CDR: the byte order is the messages' (their header says), settled by the first run decoded
        self._order_settled = not layout.encoding.aligned
        self._order_lock = threading.Lock()

    def add_run(self, payload: np.ndarray, file_offset: int | None, starts: np.ndarray, lengths: np.ndarray,
                first_index: int) -> None:
        """Decode messages at ``payload[starts[i]:starts[i]+lengths[i]]`` and append them.

        ``file_offset`` is where ``payload`` starts in the file when it is a
        view of it (uncompressed chunk), else None. ``first_index`` is the
        first message's index in the read, for error messages.
        """
        self.append(self.decode_run(payload, file_offset, starts, lengths, int(self.total[0]), first_index))

    def decode_run(self, payload: np.ndarray, file_offset: int | None, starts: np.ndarray, lengths: np.ndarray,
                   root_row: int, first_index: int, *, windows: np.ndarray | None = None) -> "_RunPiece":
        """The kernel work of one run; safe on a worker thread (the kernels release the GIL).

        Root rows go straight to rows ``root_row...`` of the read's array
        (disjoint for every run); everything else comes back in the piece,
        for :meth:`append` to add in read order. ``windows``: ``payload``
        holds only windows onto the messages in the file (``file_offset`` 0;
        see kernels.walk); OutsideWindows when a message's fields are not
        all inside them.
        """
        if windows is None:
            heads = starts
        else:  # each message's first bytes, where its head window holds them (the mapping is not touched);
            # the window starts at the message's record, before the message
            held = (windows[:, 0] <= starts) & (starts + 2 <= windows[:, 0] + windows[:, 1])
            heads = np.where(held, windows[:, 2] + starts - windows[:, 0], -1)
        self._settle_byte_order(payload, heads, lengths)
        layout, kernels = self.layout, _kernels()
        enc = layout.encoding
        rules = (enc.header, enc.representation, enc.big_endian, enc.trailing)
        n = int(starts.size)
        check_min_size(layout, lengths, first_index, topic=self.topic, msgtype=self.msgtype, payload=payload,
                       starts=heads)
        if layout.row_sizes[0] and (root_row + n) * int(layout.row_sizes[0]) > self.root.size:
            raise ValueError("more messages than the builder was sized for")
        status = np.zeros(3, dtype=np.int64)
        rows = np.zeros(len(layout.tables), dtype=np.int64)
        if len(layout.tables) > 1:  # child tables: count their rows first, to allocate them exactly
            empty8, empty64 = np.empty(0, np.uint8), np.empty(0, np.int64)
            kernels.walk(payload, starts, lengths, layout.ops, layout.row_sizes, empty8, empty8, rows, rows,
                         empty64, empty64, rows, False, status, *rules, windows)
            # Elements that take bytes are bounded by the bytes; those that take none only per message.
            # Across the run, child rows may not outnumber the bytes plus one cap's worth of empty ones: the
            # walk stops where they do.
            if int(status[0]) == kernels.RUN_TOO_MANY:
                m, claimed, held = self._over_cap(payload, starts, lengths, rules, windows)
                raise DecodeError(f"messages up to this one claim {claimed} array elements, more than their "
                                  f"{held} bytes can hold", topic=self.topic, msgtype=self.msgtype,
                                  index=first_index + m)
            self._check(status, first_index, starts, lengths)
        rows[0] = n
        if len(layout.tables) == 1:  # the root alone (Imu, most types): no child rows to lay out (a small
            # read's fixed cost: these are a few microseconds of each)
            child_bytes = np.zeros(1, dtype=np.int64)
            fixed_base = np.array([root_row * int(layout.row_sizes[0])], dtype=np.int64)
            fixed = np.empty(0, dtype=np.uint8)
            slot_rows = np.full(len(layout.slots), n, dtype=np.int64)
            slot_base = np.arange(len(layout.slots), dtype=np.int64) * n
        else:
            child_bytes = rows * layout.row_sizes
            child_bytes[0] = 0
            fixed_base = np.zeros(len(layout.tables), dtype=np.int64)
            np.cumsum(child_bytes[:-1], out=fixed_base[1:])
            fixed_base[0] = root_row * layout.row_sizes[0]
            fixed = np.empty(int(child_bytes.sum()), dtype=np.uint8)
            slot_rows = np.array([rows[s.table] for s in layout.slots], dtype=np.int64)
            slot_base = np.zeros(len(layout.slots), dtype=np.int64)
            np.cumsum(slot_rows[:-1], out=slot_base[1:])
        slot_pos = np.empty(int(slot_rows.sum()), dtype=np.int64)
        slot_cnt = np.empty_like(slot_pos)
        counters = np.zeros(len(layout.tables), dtype=np.int64)
        kernels.walk(payload, starts, lengths, layout.ops, layout.row_sizes, self.root, fixed, fixed_base,
                     slot_base, slot_pos, slot_cnt, counters, True, status, *rules, windows)
        self._check(status, first_index, starts, lengths)
        if self._headers is not None:
            self._read_headers(payload, starts, root_row, windows)
        piece = _RunPiece(payload, file_offset, rows,
                          [fixed[fixed_base[t]:fixed_base[t] + int(child_bytes[t])] for t in range(len(rows))],
                          nbytes=int(lengths.sum()), first_index=first_index)
        for s, slot in enumerate(layout.slots):
            pos = slot_pos[slot_base[s]:slot_base[s] + slot_rows[s]]
            cnt = slot_cnt[slot_base[s]:slot_base[s] + slot_rows[s]]
            if slot.kind == "string":  # copied now: a compressed chunk's payload is not kept for strings
                offsets = offsets_of(cnt)
                values = np.empty(int(offsets[-1]), dtype=np.uint8)
                kernels.gather(payload, pos, cnt, values, offsets[:-1])
                piece.strings[s] = values
            elif slot.kind == "array" and file_offset is not None:
                pos = pos + file_offset
            piece.slots.append((pos, cnt))
        return piece

    def _over_cap(self, payload: np.ndarray, starts: np.ndarray, lengths: np.ndarray, rules: tuple[int, ...],
                  windows: np.ndarray | None) -> tuple[int, int, int]:
        """Where a run's child rows outnumber its bytes plus MAX_EMPTY_ELEMENTS: the first message at which,
        counted from the run's start, they do (a walk per message: for the error only), the rows claimed and
        the bytes up to it. (A run spans many chunks' messages: its first is not the one to name.)"""
        kernels = _kernels()
        layout = self.layout
        rows = np.zeros(len(layout.tables), dtype=np.int64)
        status = np.zeros(3, dtype=np.int64)
        empty8, empty64 = np.empty(0, np.uint8), np.empty(0, np.int64)
        held = 0
        for m in range(starts.size):
            kernels.walk(payload, starts[m:m + 1], lengths[m:m + 1], layout.ops, layout.row_sizes, empty8, empty8,
                         rows, rows, empty64, empty64, rows, False, status, *rules,
                         None if windows is None else windows[m:m + 1])
            held += int(lengths[m])
            if int(rows.max()) > held + kernels.MAX_EMPTY_ELEMENTS:
                return m, int(rows.max()), held
        return 0, int(rows.max()), held

    def _read_headers(self, payload: np.ndarray, starts: np.ndarray, root_row: int,
                      windows: np.ndarray | None) -> None:
        """The run's publish_time and sequence into rows ``root_row...`` (disjoint for every run). In windows,
        a record's fields lie in its head window, just before the message's first byte."""
        if windows is not None:
            starts = windows[:, 2] + (starts - windows[:, 0])
            if ((starts - windows[:, 2] > windows[:, 1]) | (starts < windows[:, 2])).any():
                raise OutsideWindows("a message's record fields lie outside its head window")
        n = starts.size
        self.publish_time[root_row:root_row + n], self.sequence[root_row:root_row + n] = \
            self._headers(payload, starts)  # type: ignore[index]

    def compact(self, piece: "_RunPiece") -> "_RunPiece":
        """The piece with its array elements moved out of its decompressed chunk into a buffer of
        their own, when they take at most COMPACT_SHARE of the chunk; safe on a worker thread.

        A read's arrays are views of the buffers that hold them. Views of a
        whole decompressed chunk keep all of it alive for the topic's part of
        it (a Livox topic: a quarter of each chunk), and every chunk of the
        read then needs fresh memory, whose page faults cost more than
        decompressing it. Copied out, the topic's bytes are all that is kept,
        and the chunk's buffer goes back to the pool for the next chunk.
        Views of the file (uncompressed chunks) stay views.
        """
        if piece.file_offset is not None or not self.keeps_views:
            return piece
        arrays = [(s, slot) for s, slot in enumerate(self.layout.slots) if slot.kind == "array"]
        full = {s: piece.slots[s][1] * slot.dtype.itemsize for s, slot in arrays}  # type: ignore[union-attr]
        total = sum(int(f.sum()) for f in full.values())
        if total > COMPACT_SHARE * piece.payload.size:
            return piece
        padded = any(slot.tail for _, slot in arrays)
        out = (np.zeros if padded else np.empty)(total, dtype=np.uint8)  # (trailing padding not in the chunk: 0)
        base, kernels = 0, _kernels()
        for s, slot in arrays:
            pos, cnt = piece.slots[s]
            at = base + offsets_of(full[s])
            # each span was checked inside its message by the walk: count x stride less the last one's padding
            kernels.gather(piece.payload, pos, np.where(cnt > 0, full[s] - slot.tail, 0), out, at[:-1])
            piece.slots[s] = (at[:-1], cnt)
            base = int(at[-1])
        piece.payload = out
        return piece

    def append(self, piece: "_RunPiece") -> None:
        """Add a decoded run's columns, in read order.

        Child rows beyond the bytes that back them (elements that take none)
        are bounded across the whole read, not only per run.
        """
        self.unbacked += max(0, int(piece.rows[1:].max(initial=0)) - piece.nbytes)
        if self.unbacked > _kernels().MAX_EMPTY_ELEMENTS:  # named by the first message of the run that crossed it
            raise DecodeError(f"messages up to this run claim more than {_kernels().MAX_EMPTY_ELEMENTS} array "
                              "elements that take no bytes", topic=self.topic, msgtype=self.msgtype,
                              index=piece.first_index)
        buffer_id = self._buffer_id(piece.payload, piece.file_offset)
        for t in range(1, len(self.layout.tables)):
            self.fixed[t].append(piece.fixed[t])
        for s, slot in enumerate(self.layout.slots):
            pos, cnt = piece.slots[s]
            if slot.kind == "string":
                self.strings[s].append(piece.strings[s])
            elif slot.kind == "table":
                pos = pos + self.total[slot.child]  # child rows are numbered across runs
            elif slot.kind == "array":
                self.slot_buf[s].append(np.full(cnt.size, buffer_id, dtype=np.int32))
            self.slot_pos[s].append(pos)
            self.slot_cnt[s].append(cnt)
        self.total += piece.rows

    def _settle_byte_order(self, payload: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
        """CDR: take the byte order most messages of the first run decoded are in (its first ORDER_VOTERS;
        little-endian layouts are compiled by default; big-endian headers switch to the big-endian layout
        before anything is decoded).

        By majority, not by the first message: where one message's header is damaged, the error then names
        that message, not every other one (ties go to the first message's order)."""
        if self._order_settled:
            return
        with self._order_lock:
            if self._order_settled:
                return
            if self.layout.encoding.representation < 0:  # no encapsulation header (ROS1): one byte order
                self._order_settled = True
                return
            starts, lengths = starts[:ORDER_VOTERS], lengths[:ORDER_VOTERS]  # (a run may be a whole topic)
            if starts.size <= 16:  # a few messages (a sample, a short window): Python's ints cost less
                votes = [(int(payload[s]) << 8) | int(payload[s + 1]) for s, n in zip(starts.tolist(), lengths.tolist())
                         if n >= 2 and 0 <= s <= payload.size - 2]
                found = [v for v in votes if v in (0x0000, 0x0001)]
                big, little = found.count(0x0000), found.count(0x0001)
                first_big = bool(found) and found[0] == 0x0000
            else:
                inside = (lengths >= 2) & (starts >= 0) & (starts <= payload.size - 2)
                at = starts[inside]
                both = (payload[at].astype(np.int64) << 8) | payload[at + 1]
                big, little = int((both == 0x0000).sum()), int((both == 0x0001).sum())
                first_big = bool(big or little) and bool(both[(both == 0x0000) | (both == 0x0001)][0] == 0x0000)
            if big or little:
                self.layout = self.layout.with_byte_order(big > little or (big == little and first_big))
            self._order_settled = True

    def _buffer_id(self, payload: np.ndarray, file_offset: int | None) -> int:
        if file_offset is not None or not self.keeps_views:
            return 0
        key = id(payload)
        if key not in self._buffer_ids:
            self._buffer_ids[key] = len(self.buffers)
            self.buffers.append(payload)
        return self._buffer_ids[key]

    def _check(self, status: np.ndarray, first_index: int, starts: np.ndarray, lengths: np.ndarray) -> None:
        code, m, pos = (int(v) for v in status)
        if code == 0:
            return
        if code == 7:
            raise OutsideWindows(f"message {first_index + m} reads byte {pos} outside its windows")
        if code == 6:  # pos holds the representation id found in the encapsulation header
            name = REPRESENTATIONS.get(pos, "unknown")
            expected = REPRESENTATIONS.get(self.layout.encoding.representation, "?")
            if pos in (0x0000, 0x0001):
                raise DecodeError(f"message is {name}, unlike most of the topic's messages ({expected}); "
                                  "fastbag decodes a topic in one byte order", topic=self.topic, msgtype=self.msgtype,
                                  index=first_index + m)
            where = f"topic {self.topic}, " if self.topic is not None else ""
            # An id no CDR writer uses: the first bytes are no encapsulation header (a recorder that stored
            # ROS 1 bytes under a cdr label, say)
            if pos == ZSTD_FRAME_START:  # b"\x28\xb5", a zstd frame's first bytes
                hint = f"; {ZSTD_FRAME_HINT}"
            elif pos in REPRESENTATIONS:
                hint = ""
            else:
                hint = ("; its first bytes are no CDR encapsulation header: the messages may be serialized otherwise "
                        "(ROS 1's format?) under a cdr label")
            raise UnsupportedError(f"message has CDR representation id 0x{pos:04x} ({name}); fastbag decodes "
                                   f"CDR_LE and CDR_BE (XCDR1) only{hint} ({where}type {self.msgtype}, message "
                                   f"{first_index + m})")
        reasons = {1: "is shorter than its definition says", 2: "has bytes left over after its last field",
                   3: "nests arrays deeper than 64 levels", 4: "lies outside its chunk",
                   5: f"claims more than {_kernels().MAX_EMPTY_ELEMENTS} elements of a type that takes no bytes"}
        # Where in the message, when the kernel stopped inside it (pos is a position in the run's buffer).
        inside = 0 <= m < starts.size and 0 <= pos - int(starts[m]) <= int(lengths[m])
        where = f"at byte {pos - int(starts[m])} of its {int(lengths[m])}" if inside else f"at byte {pos} of its chunk"
        hint = f"; {MISMATCH_HINT}" if code in (1, 2) else ""
        raise DecodeError(f"message {reasons.get(code, 'cannot be decoded')} ({where}){hint}",
                          topic=self.topic, msgtype=self.msgtype, index=first_index + m)

    def finish(self) -> StructArray:
        """Assemble every table into StructArrays and columns."""
        layout = self.layout
        columns: dict[int, Any] = {}
        tables: list[StructArray | None] = [None] * len(layout.tables)
        # Children first: a table slot needs its child's StructArray.
        for t in reversed(range(len(layout.tables))):
            table = layout.tables[t]
            n = int(self.total[t])
            rows = None
            if table.dtype.itemsize:
                if t == 0:
                    raw = self.root[:n * table.dtype.itemsize]
                else:
                    raw = np.concatenate(self.fixed[t]) if self.fixed[t] else np.empty(0, np.uint8)
                rows = raw.view(table.dtype)
            elif table.dtype.names:  # fixed fields of 0 bytes (only T[0] arrays): empty rows, no memory
                rows = np.zeros(n, dtype=table.dtype)
            own = {s.index: self._column(s, tables) for s in layout.slots if s.table == t}
            if table.scalar:
                tables[t] = own[next(iter(own))]  # string[] elements: just the strings
            else:
                tables[t] = StructArray(n, rows, table.node, own, types=self.types)
            columns.update(own)
        root = tables[0]
        assert isinstance(root, StructArray)
        return root

    def _column(self, slot: Slot, tables: list[Any]) -> Any:
        s = slot.index
        cnt = np.concatenate(self.slot_cnt[s]) if self.slot_cnt[s] else np.empty(0, np.int64)
        if slot.kind == "string":
            values = np.concatenate(self.strings[s]) if self.strings[s] else np.empty(0, np.uint8)
            return decode_strings(values, cnt)
        pos = np.concatenate(self.slot_pos[s]) if self.slot_pos[s] else np.empty(0, np.int64)
        if slot.kind == "table":
            return Nested(tables[slot.child], pos, cnt)
        buf = np.concatenate(self.slot_buf[s]) if self.slot_buf[s] else np.empty(0, np.int32)
        ragged = Ragged(self.buffers, buf, pos, cnt, slot.dtype, slot.tail)  # type: ignore[arg-type]
        if ragged.uniform and cnt.size and int(cnt[0]) * slot.dtype.itemsize <= DENSE_LIMIT:  # type: ignore[union-attr]
            return ragged.to_numpy()
        return ragged


def decode_messages(msgtype: str, definition: str, messages: Iterable[bytes | bytearray | memoryview], *,
                    encoding: str = "ros1", schema_encoding: str = "ros1msg") -> StructArray:
    """Decode serialized messages of one type, from any source, into a StructArray.

    ``definition`` is the type's full definition as written by
    ``schema_encoding`` (``"ros1msg"``, ``"ros2msg"`` or ``"ros2idl"``);
    ``encoding`` how the messages are serialized (``"ros1"`` or ``"cdr"``,
    either byte order, as each message's header says). Fields read as from
    ``Bag.read``: ``decode_messages(...)["pose"]["position"]["x"]``,
    ``[i].header.frame_id``. Raises DecodeError naming the first message that
    does not match the definition.
    """
    from .layout import layout_for

    layout = layout_for(msgtype, definition, encoding=encoding, schema_encoding=schema_encoding)
    return decode_with_layout(layout, messages, msgtype, message_types(msgtype, definition, schema_encoding))


def decode_with_layout(layout: Layout, messages: Iterable[bytes | bytearray | memoryview], msgtype: str,
                       types: MessageTypes | None = None) -> StructArray:
    """:func:`decode_messages` with the type's layout compiled already (a Bag's, say); ``types`` names the
    messages' nested types and their constants (see :func:`fastbag.msg.messages.message_types`)."""
    chunks = [bytes(m) for m in messages]
    lengths = np.array([len(m) for m in chunks], dtype=np.int64)
    check_min_size(layout, lengths, 0, topic=None, msgtype=msgtype)  # before sizing rows by the count
    buffer = np.frombuffer(bytearray(b"".join(chunks)), dtype=np.uint8)
    builder = TopicBuilder(layout, np.empty(0, dtype=np.uint8), len(chunks), topic=None, msgtype=msgtype,
                           types=types)
    builder.add_run(buffer, None, offsets_of(lengths)[:-1], lengths, 0)
    return builder.finish()
