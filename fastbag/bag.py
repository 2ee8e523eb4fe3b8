"""The public :class:`Bag`: open a bag, list its topics, iterate its messages, read topics into arrays.

The Bag is container-neutral: :func:`open` recognizes the format from the
file's first bytes and opens its :class:`~fastbag.container.Container`,
which reads the index only (for a ROS1 bag, see :mod:`fastbag.ros1.index`).
Messages are yielded in receive-time order across chunks, as rosbag yields
them, filtered by topic and by time window ``[start, end)``; chunks holding
nothing wanted are never read, and compressed chunks are decompressed ahead
on a thread pool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import math
import operator
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .container import NO_MD5, BagIndex, Connection, Container, Encryption, MessageDefinition
from .errors import (BagFormatError, DecodeError, DefinitionError, FastbagError, FastbagWarning, NoMessagesError,
                     NotFoundError, UnsupportedError, close_matches)
from .io.chunks import BATCHED_CHUNK, DEFAULT_CACHE_BYTES, ChunkTable, Together, ordered_map, size_mismatch
from .io.codecs import ZSTD_MAGIC
from .io.forks import new_locks_in_children
from .io.startup import by_kernel, numba_loaded
from .msg.messages import Time, TimeLike, time_ns
from .msg.msgdef import EMPTY_MD5, TypeName, definition_code, ros1_spelling
from .msg.objects import ARRAY_ENCODINGS, OBJECT_ENCODINGS

if TYPE_CHECKING:
    from .io.threads import WorkerThreads
    from .msg.arrays import TopicArray, TopicBuilder
    from .msg.layout import Layout


#: A read decodes a compressed chunk only in part where it expects to spare this share of it (Bag._reach).
PREFIX_SPARED = 0.2
#: Reads of fewer messages than twice this decode on the calling thread; larger runs are cut
#: into parts of at least this many messages, one per worker.
PARALLEL_MIN = 4096
#: Bag._iter_merged iterates connections side by side where each holding its largest chunk (rosbag2's batches
#: are up to ~4 MiB) stays within this many bytes; more take turns in one stream.
MERGED_BYTES = 256 << 20
#: Whole-topic reads decode on the workers chunk by chunk when the messages' fixed parts fill at least this
#: share of their compressed chunks' bytes (see Bag._pipelined).
PIPELINE_SHARE = 1 / 8
#: Bytes a compressed chunk is assumed to hold, at most, per byte in the file before it is decompressed.
PLAUSIBLE_RATIO = 64
#: A read of at most this many messages, all in one compressed chunk whose payload the cache holds, locates them
#: there straight (Bag._runs): no plan of batches, reaches and runs (half of a cached take's time).
FEW_ROWS = 16
#: A read whose messages' fixed parts take at most this many bytes allocates them without weighing them
#: against its chunks' sizes first (Bag._check_fixed_size_fits): no file makes that a risk.
SMALL_ALLOCATION = 1 << 20
#: Raw iteration locates records with the Numba kernel from this many messages on (or once Numba is loaded):
#: NumPy's vectorized path costs ~1.4 us a message in a large file (a dozen gathers, each missing the
#: cache), loading Numba and the kernel ~0.15 s once.
RAW_KERNEL_FROM = 100_000
#: Whole-topic reads whose messages lie this many bytes of their chunks apart on average (a camera or lidar
#: topic, or Imu among them) read each message's head and tail with pread instead of touching the mapping:
#: every message would otherwise cost its own page faults (~2.5 us each on this VM, 5 us with cold caches,
#: and as much again to unmap), where a pread of a few hundred bytes costs under 1 us (Bag._decode_windows).
WINDOW_SPACING = 64 << 10
#: Reads of fewer messages go through the mapping however far apart they are: a message's head costs a page
#: fault or two there (~5 us), windows a fixed ~0.1 ms (a file opened, a score of NumPy passes): a take of
#: one small message among large ones spent 40% of its 0.22-0.27 ms on windows (QA).
WINDOW_MIN_ROWS = 32
#: Bytes read from each record's start (its header and the message's fixed head) and before its end.
WINDOW_HEAD = 1024
WINDOW_TAIL = 512
#: Bytes between two windows read as one range (see Bag._read_windows): about what one pread costs in copying.
WINDOW_GAP = 1024
#: Threads a bag may be given (fastbag.open's workers): a read keeps twice as many chunks in flight, so the
#: count bounds its memory too (a million was taken, and a read started a thread per chunk).
MAX_WORKERS = 256
#: Messages of a topic bag.messages() finds undecodable one by one before it stops looking for the good ones
#: among them (Bag._undecodable): a wrong definition spoils every message, a damaged one only itself.
SALVAGE_LIMIT = 16
#: Messages a windowed read reads and decodes at a time (bounded memory: at most ~2.5 KB of windows each).
WINDOW_PART = 4096
#: Messages the first part of a windowed read holds (see Bag._decode_windows).
WINDOW_PROBE = 32


def _raw_kernel(messages: int) -> bool:
    """Whether raw iteration over ``messages`` messages locates their records with the Numba kernel."""
    return by_kernel(messages, RAW_KERNEL_FROM - 1)


_INT64_MAX = (1 << 63) - 1


def _first_at_or_after(times: np.ndarray, t: int) -> int:
    """The first position in ``times`` (int64 ns, ascending) at or after ``t``. A bound past int64 (2**63 ns
    and later, as u64 MCAP times can be) is past every time: NumPy would compare it as a float, equal to
    2**63 - 1."""
    if t > _INT64_MAX:
        return int(times.size)
    return 0 if t < -_INT64_MAX - 1 else int(np.searchsorted(times, np.int64(t), side="left"))


def _run_bounds(key: np.ndarray) -> tuple[list[int], list[int]]:
    """(starts, ends) of the maximal runs of equal values in ``key`` (one chunk's messages in a row)."""
    bounds = np.flatnonzero(np.diff(key)) + 1
    return np.concatenate(([0], bounds)).tolist(), np.concatenate((bounds, [key.size])).tolist()


#: A read whose rows (or runs) number less than 1/SPARSE_TABLE of the bag's chunks maps its chunks through
#: sorted keys, not arrays as long as the chunk table.
SPARSE_TABLE = 4


def _batch_places(chunk_of: np.ndarray, batches: list[np.ndarray], chunk_count: int) -> tuple[np.ndarray, np.ndarray]:
    """For rows in chunks ``chunk_of``: each one's batch among ``batches`` (-1 for none: a chunk read in place)
    and its chunk's place in that batch, of a table of ``chunk_count`` chunks.

    Through arrays as long as the table where the read is as large, else through the batches' chunks
    sorted: a loop over a .db3 of 16,000 topics iterates each topic on its own (Bag._iter_merged), and
    tables as long as its 16,000 chunks for each took 6 GB and 20 s (QA).
    """
    n = chunk_of.size
    if not batches:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    ids = np.concatenate(batches)
    numbers = np.repeat(np.arange(len(batches)), [len(batch) for batch in batches])
    places = np.concatenate([np.arange(len(batch)) for batch in batches])
    if chunk_count <= SPARSE_TABLE * n:
        batch_of = np.full(chunk_count, -1, dtype=np.int64)
        rank = np.zeros(chunk_count, dtype=np.int64)
        batch_of[ids], rank[ids] = numbers, places
        return batch_of[chunk_of], rank[chunk_of]
    order = np.argsort(ids)
    ids, numbers, places = ids[order], numbers[order], places[order]
    where = np.minimum(np.searchsorted(ids, chunk_of), ids.size - 1)
    found = ids[where] == chunk_of
    return np.where(found, numbers[where], -1), np.where(found, places[where], 0)


def _rows_of(runs: list[tuple[int, int]]) -> slice | np.ndarray:
    """The positions ``[a, b)`` of every run, in order: a slice for one run (no index array)."""
    return slice(*runs[0]) if len(runs) == 1 else np.concatenate([np.arange(a, b) for a, b in runs])


class _Scope:
    """An index reads work on, and what the Bag learns about its rows: the whole index, or one topic's
    (:meth:`Container.topic_index`: an MCAP file indexes a topic without reading the others' indexes).

    A read captures its scope once, so a read on one thread never mixes the
    rows of two indexes while another thread builds one.
    """

    __slots__ = ("index", "read_before", "connections")

    def __init__(self, index: BagIndex) -> None:
        self.index = index
        # rows a windowed read may have read already (see Bag._windowed)
        self.read_before: np.ndarray | None = None
        # a topic's own index: its connections, each with its msgcount (see Bag._topic_connections)
        self.connections: tuple[Connection, ...] | None = None


@dataclass(frozen=True)
class TopicInfo:
    """What the index says about one topic.

    A topic recorded on several connections lists them all in
    ``connections``; ``msgtype`` and ``md5sum`` are those of the first, and
    ``msgtypes`` names every type seen.
    """

    name: str
    msgtype: str
    md5sum: str
    definition: str = field(repr=False)  # (pages of text: a REPL prints the topic's name, type, counts)
    message_count: int
    connections: tuple[Connection, ...]
    frequency: float | None  # median message rate in Hz, None with fewer than two messages

    @property
    def msgtypes(self) -> tuple[str, ...]:
        """Every message type the topic's connections carry, in order of appearance."""
        return tuple(dict.fromkeys(c.msgtype for c in self.connections))

    @property
    def msgcount(self) -> int:
        """rosbags' name of :attr:`message_count`."""
        return self.message_count

    @property
    def msgdef(self) -> MessageDefinition:
        """rosbags' name of the definition, with its format: the first connection's (:attr:`Connection.msgdef`)."""
        return self.connections[0].msgdef


class BagMessage(NamedTuple):
    """A message as ``rosbag.Bag.read_messages`` yields it (see :meth:`Bag.read_messages`)."""

    topic: str
    message: Any
    timestamp: Time


class BagMessageWithConnectionHeader(NamedTuple):
    """A message with its connection's header, as ``read_messages(return_connection_header=True)`` yields it."""

    topic: str
    message: Any
    timestamp: Time
    connection_header: dict[str, bytes]


class TopicTuple(NamedTuple):
    """One topic in ``get_type_and_topic_info()`` (rosbag's ``TopicTuple``)."""

    msg_type: str
    message_count: int
    connections: int
    frequency: float | None


class CompressionTuple(NamedTuple):
    """``get_compression_info()``: the bag's main compression and its chunks' bytes (rosbag's)."""

    compression: str
    uncompressed: int
    compressed: int


class TypesAndTopicsTuple(NamedTuple):
    """``get_type_and_topic_info()``: ``{type: md5sum}`` and ``{topic: TopicTuple}`` (rosbag's)."""

    msg_types: dict[str, str]
    topics: dict[str, TopicTuple]


def connection_header(connection: Connection) -> dict[str, bytes]:
    """A connection's header as rosbag gives it (bytes values): the record's own fields where the format
    stores them (ROS1), else those fastbag knows."""
    if connection.header:
        return dict(connection.header)
    header = {"topic": connection.topic, "type": connection.msgtype, "md5sum": connection.md5sum,
              "message_definition": connection.definition}
    if connection.callerid is not None:
        header["callerid"] = connection.callerid
    header["latching"] = "1" if connection.latching else "0"
    return {key: value.encode() for key, value in header.items()}


def _canonical_name(name: str) -> str:
    """A ROS name as rosbag compares topics (roslib's canonicalize_name): no repeated or trailing ``/``."""
    if not isinstance(name, str):
        raise TypeError(f"topic names are str, not {type(name).__name__} {name!r}")
    if not name or name == "/":
        return name
    return ("/" if name[0] == "/" else "") + "/".join(part for part in name.split("/") if part)


def _stamp(ns: int) -> Time:
    """int nanoseconds as the genpy-like Time rosbag's API hands out."""
    return Time(ns // 1_000_000_000, ns % 1_000_000_000)


def _as_bag_messages(messages: Iterator[Message], with_header: bool) -> Iterator[BagMessage]:
    """Messages as rosbag's read_messages yields them (see Bag.read_messages)."""
    for m in messages:
        stamp = _stamp(m.time)
        yield BagMessageWithConnectionHeader(m.topic, m.msg, stamp, connection_header(m.connection)) \
            if with_header else BagMessage(m.topic, m.msg, stamp)  # type: ignore[misc]


def _type_key(msgtype: str) -> tuple[str, str]:
    """``(pkg, Type)`` of ``pkg/Type`` and ``pkg/msg/Type`` alike (ROS 1 and rosbags' spellings)."""
    parts = msgtype.split("/")
    return parts[0], parts[-1]


#: The last message unpacked on this thread, (its data view, its type, its decoded message): rosbags' loop
#: unpacks a message and deserializes its bytes at once; Bag.deserialize answers that from the decoded batch.
_UNPACKED = threading.local()


_READ_ERRORS = (FastbagError, IndexError, ValueError)


@contextlib.contextmanager
def _closing_said(bag: "Bag") -> Iterator[None]:
    """A read's failure, where another thread closed ``bag`` during it (its mapping emptied, what the read met
    next looked like damage: an IndexError, a BagFormatError), as the ValueError any use of a closed bag is."""
    try:
        yield
    except _READ_ERRORS as exc:
        if not bag._source.closed or (isinstance(exc, ValueError) and "closed" in str(exc)):
            raise
        raise ValueError(f"bag {bag.path} was closed during the read") from exc


def _says_if_closed(method: Callable[..., Any]) -> Callable[..., Any]:
    """A public read (a function or a generator function) failing as :func:`_closing_said` says."""
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(self: "Bag", *args: Any, **kwargs: Any) -> Any:
            with _closing_said(self):
                yield from method(self, *args, **kwargs)
        return generator

    @functools.wraps(method)
    def function(self: "Bag", *args: Any, **kwargs: Any) -> Any:
        with _closing_said(self):
            return method(self, *args, **kwargs)
    return function


class Message:
    """One message: ``topic``, ``time`` (int ns receive time), ``data`` and ``connection``.

    ``data`` is the serialized message as a ``memoryview``: a view of the
    file mapping where the chunk is uncompressed, of the decompressed chunk
    otherwise (``bytes(m.data)`` copies it). Without ``raw=True``, ``msg`` is
    the decoded message: fields by attribute and by ``[name]``, ``to_dict()``.
    """

    __slots__ = ("topic", "time", "data", "connection", "msg")

    def __init__(self, topic: str, time: int, data: memoryview, connection: Connection, msg: Any = None) -> None:
        self.topic = topic
        self.time = time
        self.data = data
        self.connection = connection
        self.msg = msg

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, time={self.time}, {len(self.data)} bytes)"

    def __iter__(self) -> Iterator[Any]:
        """``connection, timestamp, rawdata = m``: unpacks as rosbags' readers yield a message, ``rawdata``
        a copy of the bytes as theirs is (``bytes``: it pickles to a worker, concatenates, decodes as
        text; ``m.data`` is the view). The decoded message is kept (one per thread) for
        :meth:`Bag.deserialize` of this ``rawdata``."""
        data = bytes(self.data)
        if self.msg is not None and not isinstance(self.msg, Undecodable):
            _UNPACKED.last = (data, self.connection.msgtype, self.msg)
        return iter((self.connection, self.time, data))

    def __len__(self) -> int:
        return 3  # (as the tuple it unpacks as)

    def __getitem__(self, item: int | slice) -> Any:
        """``m[0]``, ``m[1]``, ``m[2]``: the connection, time and bytes, as rosbags' tuples index
        (``sorted(bag.messages(), key=lambda x: x[1])``); ``m[2]`` and slices copy the bytes, as unpacking does."""
        if item in (0, 1, -3, -2):
            return self.connection if item in (0, -3) else self.time
        return tuple(self)[item]

    @property
    def publish_time(self) -> int | None:
        """When the message was published (int ns), where the format records it (MCAP); else None."""
        return None

    @property
    def sequence(self) -> int | None:
        """The publisher's sequence number of the message, where the format records it (MCAP); else None."""
        return None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles (to DataLoader workers, other processes) with a copy of its bytes, not the file's view.
        return _unpickle_message, (self.topic, self.time, bytes(self.data), self.connection, self.msg)


class _DecodedMessage(Message):
    """A message of decoded iteration: its ``data`` view is made when asked for (decoded loops
    rarely look at the bytes, and making the view is a good part of a message's cost)."""

    __slots__ = ("_spans", "_k")

    def __init__(self, topic: str, time: int, spans: tuple[memoryview, list[int], list[int]], k: int,
                 connection: Connection, msg: Any) -> None:
        self.topic = topic
        self.time = time
        self._spans = spans
        self._k = k
        self.connection = connection
        self.msg = msg

    @property  # type: ignore[override]
    def data(self) -> memoryview:  # noqa: D102 - Message.data
        view, starts, ends = self._spans
        return view[starts[self._k]:ends[self._k]]


class Undecodable:
    """``m.msg`` of a message :meth:`Bag.messages` could not decode (no definition, an encoding fastbag
    cannot decode, bytes that do not match the definition): using it, by attribute, ``[name]`` or
    ``to_dict()``, raises the error that stopped its decoding; it is false in a boolean test. Its type is
    known all the same: ``_type`` (rospy's spelling, ``pkg/Type``) and ``__msgtype__`` (rosbags',
    ``pkg/msg/Type``), so a loop that dispatches on them reaches the error where it uses a field. The
    messages of other topics decode as usual, and ``m.data`` holds this one's bytes."""

    __slots__ = ("error", "_type", "__msgtype__")

    def __init__(self, error: FastbagError, msgtype: str = "") -> None:
        self._type = TypeName(ros1_spelling(msgtype))
        pkg, _, name = self._type.partition("/")
        self.__msgtype__ = f"{pkg}/msg/{name}" if name and "/" not in name else msgtype
        # Kept as long as the message is: without the tracebacks of it and the errors it was raised from,
        # whose frames hold the batch's buffers (a mapping of the file, a decompressed chunk).
        chain: list[BaseException | None] = [error]
        while chain:
            link = chain.pop()
            if link is not None and link.__traceback__ is not None:
                link.__traceback__ = None
                chain += [link.__cause__, link.__context__]
        self.error = error

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # protocols probed with getattr (copy, pickle, NumPy): absent, as usual
            raise AttributeError(name)
        raise self.error.with_traceback(None)

    def __getitem__(self, key: Any) -> Any:
        raise self.error.with_traceback(None)

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<undecodable message: {self.error}>"


class _StampedMessage(Message):
    """A message with the publish_time and sequence its record holds (MCAP)."""

    __slots__ = ("publish_time", "sequence")

    def __init__(self, topic: str, time: int, data: memoryview, connection: Connection, msg: Any,
                 publish_time: int, sequence: int) -> None:
        super().__init__(topic, time, data, connection, msg)
        self.publish_time = publish_time  # type: ignore[misc]
        self.sequence = sequence  # type: ignore[misc]

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpickle_stamped, (self.topic, self.time, bytes(self.data), self.connection, self.msg,
                                   self.publish_time, self.sequence)


class _DecodedStampedMessage(_DecodedMessage):
    """A decoded message with the publish_time and sequence its record holds (MCAP)."""

    __slots__ = ("publish_time", "sequence")

    def __init__(self, topic: str, time: int, spans: tuple[memoryview, list[int], list[int]], k: int,
                 connection: Connection, msg: Any, publish_time: int, sequence: int) -> None:
        super().__init__(topic, time, spans, k, connection, msg)
        self.publish_time = publish_time  # type: ignore[misc]
        self.sequence = sequence  # type: ignore[misc]

    __reduce__ = _StampedMessage.__reduce__


def _unpickle_message(topic: str, time: int, data: bytes, connection: Connection, msg: Any) -> Message:
    return Message(topic, time, memoryview(data), connection, msg)


def _unpickle_stamped(topic: str, time: int, data: bytes, connection: Connection, msg: Any, publish_time: int,
                      sequence: int) -> Message:
    return _StampedMessage(topic, time, memoryview(data), connection, msg, publish_time, sequence)


class Bag:
    """An open ROS bag. Use :func:`fastbag.open`; close it or use it as a context manager.

    ``mode`` is ``"r"`` (rosbag's ``Bag(path, "r")``): a Bag only reads;
    :class:`fastbag.Writer` writes.
    ``cache_bytes`` bounds the decompressed chunks kept in memory; ``workers``
    is the number of threads decompressing ahead (default: the CPU count).
    ``definitions`` supplies message definitions where the bag has none
    (format 1.1, or a connection whose definition was lost): a mapping
    ``{"pkg/Type": ".msg text"}`` (a text may be composed, as a connection
    stores it: its ``MSG:`` blocks define the types it uses) or a folder of
    ``<pkg>/msg/<Type>.msg`` files; a type's dependencies are looked up in
    the same place.
    An encrypted bag is decrypted with ``aes_key`` (its 16-byte AES key) or
    with the key in its header, which ``gpg`` decrypts from the user's
    keyring (``passphrase`` for a protected GPG key); needs
    ``pip install 'fastbag[encryption]'``. Both are ignored for ROS1 bags
    that are not encrypted; MCAP files and rosbag2 recordings refuse them
    (TypeError).

    A read that needs only the head of a compressed chunk (a few small
    messages ahead of a large one, as recorders cut chunks) decompresses
    only that far. ``checksums`` (default True) keeps every checksum a
    chunk carries checked: a chunk with one over all of its bytes (an MCAP
    chunk's CRC-32, an LZ4 frame's content checksum, as roslz4 writes) is
    then decompressed whole. ``checksums=False`` lets those reads stop
    early too, checking only the part they decode (an Imu topic among
    camera and lidar data read 4-5x faster so, in the README's measures).
    """

    def __init__(self, path: str | os.PathLike[str], mode: str = "r", *, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 workers: int | None = None,
                 definitions: Mapping[str, str] | str | os.PathLike[str] | None = None,
                 aes_key: bytes | None = None, passphrase: str | None = None, checksums: bool = True) -> None:
        _check_mode(mode)
        if isinstance(path, (list, tuple)):  # rosbags' AnyReader([path]): one recording is one path
            if len(path) != 1:
                raise TypeError(f"fastbag.open reads one recording (a file, or a rosbag2 directory), not a list of "
                                f"{len(path)}: open each in turn, or use fastbag.SyncedDataset or fastbag.dask "
                                "for many")
            path = path[0]
        _check_bag_options(cache_bytes, workers, checksums)
        self.path = os.fspath(path)
        if os.path.basename(self.path) == "metadata.yaml" and os.path.isfile(self.path):
            self.path = os.path.dirname(self.path) or "."  # a rosbag2 recording is its directory
        # what pickling passes on: the other process opens the file again, with the same options
        self._reopen = {"cache_bytes": cache_bytes, "workers": workers, "definitions": definitions,
                        "aes_key": aes_key, "passphrase": passphrase, "checksums": checksums}
        if definitions is None or isinstance(definitions, Mapping):
            self._definitions = dict(definitions or {})
            odd = next(((k, v) for k, v in self._definitions.items()
                        if not isinstance(k, str) or not isinstance(v, str)), None)
            if odd is not None:
                raise TypeError(f"definitions= maps type names (str) to .msg texts (str); got {odd[0]!r}: "
                                f"{type(odd[1]).__name__} (bytes: decode them; a folder: pass its path)")
        else:
            from .msg.msgdef import load_definitions
            self._definitions = load_definitions(definitions)
        options = {k: v for k, v in (("aes_key", aes_key), ("passphrase", passphrase)) if v is not None}
        self._container = open_container(self.path, definitions=self._definitions, **options)
        self._source = self._container.source
        container = self._container
        self._counted = False  # whether the connections carry their msgcount (see _count_connections)
        self._counting = threading.Lock()
        if self._definitions:
            container.connections = [self._with_supplied_definition(c) for c in container.connections]
        if container.problems:
            warnings.warn(f"{self.path}: {'; '.join(container.problems)}", FastbagWarning, stacklevel=3)
        self._store = container.chunk_store(cache_bytes=cache_bytes, workers=workers, checksums=checksums)
        self._layouts: dict[tuple, Layout] = {}  # by (type, definition); object decoders, message types too
        self._definition_keys: dict[str, tuple[Any, ...]] = {}  # see _definition_key
        self._sizes: np.ndarray | None = None            # bytes of each index row's record, on first use
        # rows of each topic in the index of its scope, with that index, on first use
        self._topic_rows: dict[str, tuple[BagIndex, np.ndarray]] = {}
        self._unwindowed: set[str | None] = set()        # topics whose fields lie outside windows
        self._tailed: set[str | None] = set()            # topics whose fields lie in their messages' tails too
        self._whole: _Scope | None = None                # the whole index, once built
        self._scopes: dict[str, _Scope] = {}             # the index each topic is read from, on first use
        self._scoping = threading.Lock()
        new_locks_in_children(self, "_counting", "_scoping")
        self._in_file_of: tuple[ChunkTable, np.ndarray] | None = None  # see _in_file
        self._kinds: tuple[list[Connection], np.ndarray] | None = None  # see _decoding_kinds

    @property
    def _chunks(self) -> ChunkTable:
        """The container's chunks (a container may know them only once its index is built: rosbag2). Reads
        take the chunks of the index they work on (``index.chunks``): a rosbag2 topic's own index numbers
        the chunks it knows before the whole index exists."""
        return self._container.chunks

    def _in_file(self, table: ChunkTable) -> np.ndarray:
        """Where a chunk of ``table`` (an index's chunks) is read in place: uncompressed, and not cut off by
        the end of the file. Kept for the last table asked about (every index of a ROS1 or MCAP file shares
        the container's)."""
        found = self._in_file_of
        if found is not None and found[0] is table:
            return found[1]
        in_file = table.uncompressed.copy()
        in_file[list(self._container.salvaged)] = False
        self._in_file_of = (table, in_file)
        return in_file

    @property
    def _index(self) -> BagIndex:
        """Every message's time, connection, chunk and offset (a container may build it on first use)."""
        index = self._container.index
        if not self._counted:
            self._count_connections(index)
        return index

    @property
    def _whole_scope(self) -> _Scope:
        """The whole index as a read's scope (every topic's messages: what messages() iterates)."""
        if self._whole is None:
            index = self._index
            with self._scoping:
                if self._whole is None:
                    self._whole = _Scope(index)
        return self._whole

    def _scope(self, topic: str) -> _Scope:
        """The index reads of ``topic`` work on, chosen once per topic: the topic's own where the container
        builds one without the whole index (and the whole is not built yet), else the whole index."""
        scope = self._scopes.get(topic)
        if scope is not None:
            return scope
        index = self._container.topic_index(self._topic_ranks[topic])  # (None once the whole index is built)
        scope = _Scope(index) if index is not None else self._whole_scope
        with self._scoping:
            return self._scopes.setdefault(topic, scope)

    def _count_connections(self, index: BagIndex) -> None:
        """Give every connection its ``msgcount`` (rosbags' field) once the index exists: the connections
        handed out from then on (bag.connections, m.connection, a topic's) carry it."""
        with self._counting:
            if self._counted:
                return
            counts = np.bincount(index.conn, minlength=len(index.connections)).tolist()
            self._container.connections = [dataclasses.replace(c, msgcount=n)
                                           for c, n in zip(self._container.connections, counts)]
            self._counted = True

    # -- what the index says ---------------------------------------------------
    @property
    def format(self) -> str:
        """The container format, e.g. ``"ROS1 bag"``."""
        return self._container.format

    @property
    def encryption(self) -> Encryption | None:
        """How the file is encrypted and for whom (e.g. ``rosbag/AesCbcEncryptor`` for a GPG user), or None."""
        return self._container.encryption

    @property
    def version(self) -> str:
        """Format version, e.g. ``"2.0"``."""
        return self._container.version

    @property
    def size(self) -> int:
        """Size in bytes on disk: the file's (a compressed ``.mcap.zstd`` as stored, not as decompressed), or
        a recording directory's storage files'."""
        try:
            if os.path.isfile(self.path):
                return os.path.getsize(self.path)
        except OSError:  # (gone since it was opened: what was read is the answer)
            pass
        return self._source.size

    @property
    def message_count(self) -> int:
        """Messages in the bag, every topic (the index's count; for rosbag2, the rows opening counted)."""
        return self._container.message_count

    @property
    def start_time(self) -> int | None:
        """Earliest receive time (int ns), None for a bag without messages."""
        return self._container.time_range[0]

    @property
    def end_time(self) -> int | None:
        """Latest receive time (int ns), None for a bag without messages."""
        return self._container.time_range[1]

    @property
    def duration(self) -> int:
        """``end_time - start_time`` in ns (0 for an empty bag)."""
        return (self.end_time - self.start_time) if self.message_count else 0  # type: ignore[operator]

    @property
    def connections(self) -> list[Connection]:
        """Every connection, in the order of the bag's connection records, each with its ``msgcount`` (the
        messages the index lists on it; asking builds the index where it is built on first use)."""
        self._index  # noqa: B018 - counts the connections
        return list(self._container.connections)

    @property
    def chunk_count(self) -> int:
        """Chunks of the bag (ROS1 and MCAP chunks; a rosbag2 ``.db3``'s batches of ~4 MiB of a topic's rows;
        0 for the legacy ROS1 formats, which store messages unchunked)."""
        return self._container.chunk_count

    @property
    def compression(self) -> dict[str, int]:
        """How the data is compressed: a count per compression of :attr:`compression_unit`, e.g. ``{"lz4": 12}``
        chunks of a ROS1 bag or MCAP file, ``{"zstd": 2}`` storage files of a rosbag2 sqlite3 recording (zstd
        per file or per message), ``{"none": 1}``; ``{}`` for the legacy ROS1 formats, which have no chunks."""
        return self._container.compression_counts()

    @property
    def compression_sizes(self) -> dict[str, tuple[int, int]]:
        """``(bytes stored, bytes decompressed)`` per compression, summed over its chunks (``rosbag info``'s
        ``bz2 [170/170 chunks; 75.42%]``), or over its storage files (rosbag2 sqlite3 storage: see
        :attr:`compression_unit`); ``{}`` where the format does not record them (rosbag2 storage compressed
        per message, the unchunked legacy ROS1 formats)."""
        return self._container.compression_sizes()

    @property
    def compression_unit(self) -> str:
        """What :attr:`compression` counts: ``"chunks"``, or ``"files"`` (rosbag2 recordings: sqlite3
        storage, and MCAP storage compressed per file or per message, rosbag2's units of compression)."""
        return self._container.compression_unit

    @property
    def attachments(self) -> list[Any]:
        """Files stored in the recording (MCAP attachments: ``name``, ``media_type``, ``data``, ``log_time``);
        empty for formats without them."""
        return self._container.attachments

    @property
    def metadata(self) -> list[Any]:
        """Named string maps stored in the recording (MCAP metadata: ``name``, ``metadata``)."""
        return self._container.metadata

    @property
    def problems(self) -> list[str]:
        """What was found damaged or inconsistent so far (each also said once as a FastbagWarning).

        Some containers load parts of their index on first use (MCAP's message indexes), so the list
        can grow after the first read."""
        return list(self._container.problems)

    @property
    def recovered(self) -> bool:
        """True when the index was rebuilt by scanning (unindexed or damaged bag)."""
        return self._container.recovered

    @functools.cached_property
    def topics(self) -> dict[str, TopicInfo]:
        """Every topic's :class:`TopicInfo`, by name, sorted (computed on first use)."""
        index = self._index
        by_topic: dict[str, list[int]] = {}
        for rank, connection in enumerate(index.connections):
            by_topic.setdefault(connection.topic, []).append(rank)
        per_conn = np.bincount(index.conn, minlength=len(index.connections))
        # Each topic's times, in read order, grouped with one stable sort by topic (a mask over the whole
        # index per topic cost topics x messages: 0.39 s for 4,000 topics of 25 messages).
        topic_of = np.empty(len(index.connections), dtype=np.int64)
        for k, ranks in enumerate(by_topic.values()):
            topic_of[ranks] = k
        grouped = topic_of[index.conn] if index.conn.size else np.zeros(0, dtype=np.int64)
        order = np.argsort(grouped, kind="stable")
        bounds = np.searchsorted(grouped[order], np.arange(len(by_topic) + 1))
        infos = {}
        for k, (topic, ranks) in enumerate(by_topic.items()):
            first = index.connections[ranks[0]]
            times = index.time[order[bounds[k]:bounds[k + 1]]]
            frequency = None
            if times.size > 1:
                period = float(np.median(np.diff(times)))
                frequency = 1e9 / period if period > 0 else None
            infos[topic] = TopicInfo(topic, first.msgtype, first.md5sum, first.definition,
                                     int(per_conn[ranks].sum()),
                                     tuple(index.connections[r] for r in ranks), frequency)
        topics = TopicInfos(sorted(infos.items()))
        topics.path = self.path
        return topics

    @functools.cached_property
    def _topic_ranks(self) -> dict[str, list[int]]:
        """Every topic's connections as positions in the container's, sorted by topic: what reading needs
        of :attr:`topics`, from what opening read (no index, no statistics: a median over every message's
        time cost 10 ms of a 1 M message bag's fresh read)."""
        by_topic: dict[str, list[int]] = {}
        for rank, connection in enumerate(self._container.connections):
            by_topic.setdefault(connection.topic, []).append(rank)
        return {topic: by_topic[topic] for topic in sorted(by_topic)}

    def _topic_connections(self, topic: str, scope: _Scope | None = None) -> tuple[Connection, ...]:
        """``topic``'s connections as the bag hands them out: with their ``msgcount`` once counted, or counted
        in ``scope``, the topic's own index, where the whole index is not built yet (a read's TopicArray
        then holds the counts bag.connections gives, whatever was asked first)."""
        connections = self._container.connections
        ranks = self._topic_ranks[topic]
        if self._counted or scope is None or scope is self._whole:
            return tuple(connections[r] for r in ranks)
        if scope.connections is None:
            counts = np.bincount(scope.index.conn, minlength=len(connections))
            scope.connections = tuple(dataclasses.replace(connections[r], msgcount=int(counts[r])) for r in ranks)
        return scope.connections

    @_says_if_closed
    def times(self, topic: str, start: TimeLike | None = None, end: TimeLike | None = None) -> np.ndarray:
        """Receive times (int64 ns, ascending) of ``topic``'s messages in ``[start, end)``, from the
        index alone: nothing is read or decoded, so a topic that cannot be decoded has times too.
        KeyError for a topic the bag does not have. A time window of a topic not read before reads the window's
        part of the index where the format has one (see :meth:`messages`), not the topic's."""
        self._check_open()
        if not (isinstance(topic, str) and topic in self._topic_ranks):
            index = self._index  # (the error comes from _select)
        elif topic not in self._scopes and (window := self._window_index(start, end)) is not None:
            index = window
        else:
            index = self._scope(topic).index
        return index.time[self._select([topic], start, end, index=index)]

    def times_by_topic(self) -> dict[str, np.ndarray]:
        """Every topic's receive times (int64 ns, ascending), by topic name as in :attr:`topics`, from the
        index alone. One pass groups the index by connection, where :meth:`times` per topic would scan
        it once per topic."""
        self._check_open()
        index = self._index
        count = len(index.connections)
        # A stable sort groups rows by connection and keeps read (time) order in each; on 16-bit
        # ranks NumPy's stable sort is a radix sort, O(n).
        order = np.argsort(index.conn.astype(np.uint16) if count <= 1 << 16 else index.conn, kind="stable")
        bounds = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(index.conn, minlength=count), out=bounds[1:])
        ranks: dict[str, list[int]] = {topic: [] for topic in self._topic_ranks}
        for rank, connection in enumerate(index.connections):
            ranks[connection.topic].append(rank)
        out = {}
        for topic, mine in ranks.items():
            parts = [index.time[order[bounds[r]:bounds[r + 1]]] for r in mine]
            out[topic] = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))  # merge connections
        return out

    def plot_timeline(self, ax: Any = None, **options: Any) -> Any:
        """Draw the bag's timeline (a row per topic, rates, gaps) with matplotlib; returns the axes.

        See :func:`fastbag.viz.plot.plot_timeline` for ``options``; needs ``pip install 'fastbag[plot]'``.
        """
        from .viz.plot import plot_timeline  # an accessor: viz is built on Bag, imported only when used

        return plot_timeline(self, ax=ax, **options)

    def _repr_html_(self) -> str:
        from .viz.html import bag_html  # an accessor, like plot_timeline

        return bag_html(self)

    # -- messages --------------------------------------------------------------
    def _check_not_seconds(self, bound: Any, name: str) -> None:
        """TypeError for a bound given as a plain int that is the bag's time in seconds, not nanoseconds: far
        before the bag's first message, and inside the bag once read as seconds (every message or none would
        be read). Judged by the whole bag's time range, whatever index a call reads, so one bound gets one
        answer from every method; a ``Time``, a stamp or a datetime says its unit and is never refused."""
        if not isinstance(bound, (int, np.integer)) or isinstance(bound, (bool, np.bool_, _Judged)):
            return
        first, last = self.start_time, self.end_time
        if first is None or last is None or not 0 < int(bound) < first // 1000:
            return
        bound = int(bound)
        if first < (bound + 1) * 1_000_000_000 and bound * 1_000_000_000 <= last:
            raise TypeError(f"{name}={bound} is nanoseconds, {bound / 1e9:.3f} s after 1970-01-01, long before "
                            f"this bag; read as seconds it falls inside the bag: pass int(seconds * 1e9) or a Time")

    def _select(self, topics: Iterable[str] | str | None, start: TimeLike | None, end: TimeLike | None,
                connections: Iterable[Connection] | None = None, *, index: BagIndex | None = None) -> np.ndarray:
        """Rows of ``index`` (the whole index by default) of the wanted messages, in read order."""
        if index is None:
            index = self._index
        self._check_not_seconds(start, "start")
        self._check_not_seconds(end, "end")
        start, end = time_ns(start, "start"), time_ns(end, "end")
        lo = 0 if start is None else _first_at_or_after(index.time, start)
        hi = index.message_count if end is None else _first_at_or_after(index.time, end)
        hi = max(lo, hi)
        wanted: set[str] | None = None
        if topics is not None and not isinstance(topics, (str, bytes, bytearray)):
            topics = list(topics)
            if topics and all(isinstance(t, Connection) for t in topics):  # rosbags' reader.messages(connections)
                if connections is not None:
                    raise TypeError("connections given twice: as the first argument and as connections=")
                topics, connections = None, topics
        if topics is not None:
            if isinstance(topics, str):
                topics = [topics]
            if isinstance(topics, (bytes, bytearray)):
                raise TypeError(f"topics are names (str), not bytes: topics={topics.decode(errors='replace')!r}")
            wanted = set(topics)
            odd = [t for t in wanted if not isinstance(t, str)]
            if odd:
                raise TypeError(f"topics are names (str); got {type(odd[0]).__name__} {odd[0]!r}")
            unknown = wanted - set(self._topic_ranks)
            if unknown:
                raise no_topic(sorted(unknown)[0], self.path, self._topic_ranks)
        if wanted is None:
            want = np.ones(len(index.connections), dtype=bool)  # by rank
        else:  # (ranks in the container's connections, as every index of the bag has them)
            want = np.zeros(len(index.connections), dtype=bool)
            want[[rank for topic in wanted for rank in self._topic_ranks[topic]]] = True
        given = list(connections) if connections is not None else []
        if given:  # (none: every connection, as rosbags reads an empty iterable)
            foreign = [c for c in given if not isinstance(c, Connection)]
            if foreign:
                raise TypeError(f"connections are the bag's Connection objects (bag.connections); got "
                                f"{type(foreign[0]).__name__} {foreign[0]!r}")
            want &= np.array([c in given for c in index.connections], dtype=bool)
        if not want.all():  # (one pass over the window's ranks; no arange of the whole window)
            return lo + np.flatnonzero(want[index.conn[lo:hi]])
        return np.arange(lo, hi)

    def messages(self, topics: Iterable[str] | str | None = None, start: TimeLike | None = None,
                 end: TimeLike | None = None, *, raw: bool = False, connections: Iterable[Connection] | None = None,
                 stop: TimeLike | None = None) -> Iterator[Message]:
        """Messages in receive-time order, filtered by topics and time window ``[start, end)``.

        ``topics``: a name or names (None: every topic; an empty list: none,
        where ``connections=[]`` and rospy's ``read_messages(topics=[])``
        select every one, as the libraries they come from do).

        ``start`` and ``end`` are times: int nanoseconds, or what :func:`fastbag.msg.messages.time_ns`
        takes (a ``Time``, ``rospy.Time``, ``datetime``, ``numpy.datetime64``, a ROS 2 stamp). With
        ``raw=True`` each
        message's ``data`` is its serialized bytes (see :class:`Message`);
        otherwise ``msg`` is the decoded message as well (decoded a chunk at
        a time through the same kernels as :meth:`read`). ``connections``
        (of :attr:`connections`) selects by connection, as rosbags' readers
        do (also as the first argument, as rosbags takes them; ``connections=[]``
        selects every connection, as in rosbags, where an empty first argument
        is an empty list of topics: none), and ``stop`` is their name of
        ``end``; a message unpacks (and indexes) as theirs yield it, ``rawdata`` as ``bytes``:
        ``for connection, timestamp, rawdata in bag.messages(connections=...)``.

        A time window of a handle whose whole index is not built yet reads
        only the window's part of the index where the format allows (MCAP: the
        message indexes of the chunks that meet it).
        """
        if stop is not None:
            if end is not None:
                raise TypeError("pass end or stop (rosbags' name of end), not both")
            end = stop
        self._check_open()
        if not raw and not numba_loaded():
            # Decoding loads Numba: loaded first, the index read now takes its kernels too (a .db3's rows read
            # from its pages, which iterating a topic a chunk at a time needs: see _iter_merged).
            import numba  # noqa: F401
        index = self._window_index(start, end)
        if index is None:
            index = self._index
        selected = self._select(topics, start, end, connections, index=index)
        iterate = functools.partial(self._iter_raw if raw else self._iter_decoded, index=index)
        found = self._iter_merged(index, selected, iterate) if self._container.chunks_of_one_connection else \
            iterate(selected)
        return self._said_if_closed(found, forget_unpacked=not raw)

    def _window_index(self, start: TimeLike | None, end: TimeLike | None) -> BagIndex | None:
        """The index a read of the window ``[start, end)`` works on where the container builds one without
        the whole index (:meth:`Container.window_index`: an MCAP file reads the message indexes of the
        window's chunks alone), else None: the whole index. (A look at a few seconds of a long recording
        read every chunk's message index first: a thousand chunks' for one.)"""
        if (start is None and end is None) or type(self._container).window_index is Container.window_index:
            return None  # (no window, or a format without windows' indexes: ROS1 reads its whole at open)
        self._check_not_seconds(start, "start")
        self._check_not_seconds(end, "end")
        return self._container.window_index(time_ns(start, "start"), time_ns(end, "end"))

    def _said_if_closed(self, messages: Iterator[Message], *, forget_unpacked: bool) -> Iterator[Message]:
        """:meth:`messages`' iterator, failing as :func:`_closing_said` says. With ``forget_unpacked``, no
        reference is left after it to the last message unpacked (its bytes keep a chunk, or the file's mapping,
        alive: a Writer would refuse the path of a bag closed after the loop). (One generator for both, not one
        inside another: each layer is one more step for every message of a loop.)"""
        try:
            with _closing_said(self):
                yield from messages
        finally:
            if forget_unpacked:
                _UNPACKED.__dict__.pop("last", None)

    def _iter_merged(self, index: BagIndex, selected: np.ndarray, iterate: Callable[[np.ndarray], Iterator[Message]]
                     ) -> Iterator[Message]:
        """Messages ``selected`` of a container whose chunks each hold one connection's messages (rosbag2's
        sqlite3 batches of rows): each connection's iterated on its own, in runs as long as its chunks, and
        merged back into read order. Iterated together, topics that take turns cut the runs into single
        messages, each decoded alone (~0.1 ms a message: a whole-bag loop 20-40x slower than rosbags')."""
        if selected.size <= self._container.direct_read_max:  # fetched together, straight (see _runs)
            return iterate(selected)
        conn_of = index.conn[selected]
        order = np.argsort(conn_of, kind="stable")  # each connection's messages, in read order
        ranks, firsts = np.unique(conn_of[order], return_index=True)
        if ranks.size <= 1:
            return iterate(selected)
        # Each stream holds a chunk while it runs: at most its largest at once. (Counted, not capped at a
        # number of connections: 100 topics of small batches were cut into single messages, 60x slower.)
        largest = np.maximum.reduceat(index.chunks.size[index.chunk[selected[order]]], firsts)
        if int(largest.sum()) > MERGED_BYTES:
            return iterate(selected)
        streams = [iterate(selected[where]).__next__ for where in np.split(order, firsts[1:])]
        # Each stream yields its rows in read order, one message a row: the stream of each row in turn
        # gives the bag's order (no heap of keys to compare: that cost as much as rosbags' whole raw loop).
        owner = np.empty(selected.size, dtype=np.int64)
        owner[order] = np.repeat(np.arange(ranks.size), np.diff(np.append(firsts, selected.size)))
        return self._merged(streams, owner.tolist(), [index.topic_names[r] for r in ranks.tolist()])

    def _merged(self, streams: list[Callable[[], Message]], owner: list[int], topics: list[str]
                ) -> Iterator[Message]:
        """The messages of ``streams`` in the order of ``owner`` (each row's stream); a stream that ends
        before its rows do (which none should) is a BagFormatError naming its topic, not a RuntimeError
        made of its StopIteration."""
        k = 0
        try:
            for k in owner:
                yield streams[k]()
        except StopIteration:
            raise BagFormatError(f"the messages of topic {topics[k]} ended before the index's rows for it did",
                                 path=self.path) from None

    def _runs(self, index: BagIndex, selected: np.ndarray, *, kernel: bool = False
              ) -> Iterator[tuple[np.ndarray, int | None, int, int, np.ndarray, np.ndarray]]:
        """Maximal runs of consecutive selected messages (rows of ``index``) in one chunk, in read order.

        Yields ``(buf, base, a, b, starts, lengths)``: messages
        ``selected[a:b]`` lie at ``buf[starts[i]:starts[i]+lengths[i]]``.
        For an uncompressed chunk ``buf`` is the whole file and ``base`` 0
        (positions are file offsets); spans of every such message are located
        in one vectorized pass. For a compressed chunk ``buf`` is its
        decompressed payload, or the payloads of a batch of small chunks one
        after another (ChunkStore.batches), and ``base`` None; chunks are
        decompressed ahead in parallel and held only until their last run.
        ``kernel`` locates records in the file with the Numba kernel (decoding
        callers, which load Numba anyway); those of decompressed chunks
        always go through it.
        """
        self._check_open()  # a generator created before close() and started after it
        n = selected.size
        if n == 0:
            return
        if n <= self._container.direct_read_max:  # a few messages (a short window, a sample): straight
            direct = self._container.payloads_of(index, selected)
            if direct is not None:
                yield direct[0], None, 0, n, direct[1], direct[2]
                return
        if n <= FEW_ROWS and index.starts is None:  # a few messages (a sample): in one chunk decoded before?
            chunk = int(index.chunk[selected[0]])
            if not self._in_file(index.chunks)[chunk] and bool((index.chunk[selected] == chunk).all()):
                payload = self._store.cached_payload(chunk)
                if payload is not None and payload.size == int(index.chunks.size[chunk]):  # (all of it)
                    buffer, starts, lengths = self._locate_in_chunk(index, payload, chunk, selected)
                    yield buffer, None, 0, n, starts, lengths
                    return
        if kernel and index.starts is None and bool(self._in_file(index.chunks).all()):
            # Every chunk lies uncompressed in the file (the common large read): a kernel locates
            # every message straight from the index arrays, and one run covers them all.
            yield (self._source.array, 0, 0, n, *self._file_spans(index, selected))
            return
        chunk_of = index.chunk[selected]
        conn_ids = index.connection_ids[index.conn[selected]]
        starts = np.zeros(n, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        table = index.chunks
        in_file = self._in_file(table)[chunk_of]
        if index.starts is not None:  # the container located every message already (legacy scans)
            starts[:] = index.starts[selected]
            lengths[:] = index.lengths[selected]  # type: ignore[index]
        elif in_file.any():
            rows = np.flatnonzero(in_file)
            chunks = chunk_of[rows]
            mismatch = table.size[chunks] != table.data_len[chunks]
            if mismatch.any():
                raise size_mismatch(self.path, index.chunks[int(chunks[np.argmax(mismatch)])])
            lo = table.data_offset[chunks]
            at, hi = lo + index.offset[selected[rows]], lo + table.size[chunks]
            times = index.time[selected[rows]]

            def locate(part: slice) -> tuple[np.ndarray, np.ndarray]:
                return self._container.payload_spans(self._source.array, at[part], lo[part], hi[part],
                                                     table.position[chunks[part]], conn_ids[rows[part]], times[part],
                                                     kernel=kernel)

            pool, parts = self._split(rows.size, kernel)
            for part, (found_starts, found_lengths) in zip(parts, ordered_map(locate, parts, pool, len(parts))):
                starts[rows[part]], lengths[rows[part]] = found_starts, found_lengths
        # Runs break where the buffer changes: chunks that lie in the file share it, and small compressed
        # chunks needed one after another decompress into one (ChunkStore.batches).
        chunk_in_file = self._in_file(table)
        run_starts, run_ends = _run_bounds(np.where(in_file, -1, chunk_of))
        first_chunks = chunk_of[run_starts]
        run_chunks = first_chunks.tolist()
        reach = self._reach(index, selected, run_starts, run_chunks)
        compressed = first_chunks[~chunk_in_file[first_chunks]]
        batches = self._store.batches(compressed[np.sort(np.unique(compressed, return_index=True)[1])])
        batch_of, rank = _batch_places(chunk_of, batches, len(table))  # each row's batch, its chunk's place there
        if any(len(batch) > 1 for batch in batches):  # (else every run is one batch's already)
            run_starts, run_ends = _run_bounds(np.where(in_file, -1, batch_of))
        run_batches = batch_of[run_starts].tolist()
        last_run = {k: r for r, k in enumerate(run_batches)}
        groups: dict[int, list[tuple[int, int]]] = {}  # batch -> its runs
        for a, b, k in zip(run_starts, run_ends, run_batches):
            if k >= 0:
                groups.setdefault(k, []).append((a, b))
        payloads = self._store.iter_batches(batches, reach)
        live: dict[int, Together] = {}
        try:
            for r, (k, a, b) in enumerate(zip(run_batches, run_starts, run_ends)):
                self._check_open()
                if k < 0:
                    yield self._source.array, 0, a, b, starts[a:b], lengths[a:b]
                    continue
                while k not in live:
                    got, together = next(payloads)
                    pos = _rows_of(groups[got])
                    live[got] = self._located(index, batches[got], together, chunk_of[pos], rank[pos],
                                              selected[pos], pos, starts, lengths)
                together = live[k]
                if together.error is not None:  # the read reached a chunk the batch could not give
                    cut = np.flatnonzero(rank[a:b] >= together.done)
                    if cut.size:
                        if cut[0]:
                            yield together.buffer, None, a, a + int(cut[0]), starts[a:a + cut[0]], \
                                lengths[a:a + cut[0]]
                        raise together.error
                yield together.buffer, None, a, b, starts[a:b], lengths[a:b]
                if last_run[k] == r:
                    del live[k]
        finally:
            payloads.close()  # type: ignore[attr-defined]

    def _reach(self, index: BagIndex, selected: np.ndarray, run_starts: list[int], run_chunks: list[int]
               ) -> Callable[[int], Callable[[np.ndarray], int] | None]:
        """``reach_of(chunk)``: how far a read of rows ``selected`` of ``index`` (in runs of one chunk each,
        starting at ``run_starts``, in chunks ``run_chunks``) needs a chunk's payload decoded, to the end of
        its last record there (see :meth:`Container.record_end`); None for all of it. Small messages ahead
        of a large one in a chunk (an Imu among images, as the rosbag2 and ROS1 recorders cut chunks) then
        cost the chunk's head.

        Stopping early has a price: zstd decodes a frame it may not finish through its own window
        buffer, not straight into ours (a camera topic read 10-15% slower that way). So a chunk is
        decoded in part only where the read expects to spare PREFIX_SPARED of it at least: its last
        record of the read starts early enough, and ends early enough for the largest record of the
        read seen so far (an image's or a cloud's topic stops asking after its first chunks).
        """
        ends = np.maximum.reduceat(index.offset[selected], run_starts)
        keys = None  # the read's chunks, where far fewer than the table's (see _batch_places)
        if len(index.chunks) <= SPARSE_TABLE * len(run_chunks):
            last = np.full(len(index.chunks), -1, dtype=np.int64)
            np.maximum.at(last, run_chunks, ends)
        else:
            keys, where = np.unique(run_chunks, return_inverse=True)
            last = np.full(keys.size, -1, dtype=np.int64)
            np.maximum.at(last, where, ends)
        sizes = index.chunks.size
        record_end = self._container.record_end
        largest = [0]  # the largest record of the read whose length a prefix showed so far

        def reach_of(chunk: int) -> Callable[[np.ndarray], int] | None:
            at = int(last[chunk if keys is None else np.searchsorted(keys, chunk)])
            if at < 0:
                return None  # (an offset the index got wrong: the whole chunk, whose check names it)

            def reach(prefix: np.ndarray) -> int:
                end = record_end(prefix, at)
                largest[0] = max(largest[0], end - at)  # (a record is never shorter than a reach says)
                return end

            # Too little to spare: the whole chunk, and the prefix alone only where the rest is damaged
            # (ChunkStore.get), so that what the read gets never depends on this guess
            reach.whole = at + largest[0] >= (1 - PREFIX_SPARED) * int(sizes[chunk])  # type: ignore[attr-defined]
            return reach

        return reach_of

    def _located(self, index: BagIndex, batch: np.ndarray, together: Together, chunks: np.ndarray,
                 ranks: np.ndarray, rows: np.ndarray, pos: np.ndarray | slice, starts: np.ndarray,
                 lengths: np.ndarray) -> Together:
        """:meth:`_locate_together`, and where a chunk read alone was decoded only in part (as far as the
        read's last record there was guessed to end: see :meth:`_reach`) and its records are not all in that
        part, again in the whole chunk. What a read gets never depends on the guess: an index offset that
        names another record sent the locator on past the part (fuzz seed 20261217, case 839: an error on a
        fresh handle, one message read through the whole index)."""
        try:
            return self._locate_together(index, together, chunks, ranks, rows, pos, starts, lengths)
        except FastbagError:
            chunk = int(batch[0])
            if len(batch) != 1 or together.buffer.size >= int(index.chunks.size[chunk]):
                raise
        whole = Together.alone(self._store.get(chunk, False, None))
        return self._locate_together(index, whole, chunks, ranks, rows, pos, starts, lengths)

    def _locate_together(self, index: BagIndex, together: Together, chunks: np.ndarray, ranks: np.ndarray,
                         rows: np.ndarray, pos: np.ndarray | slice, starts: np.ndarray, lengths: np.ndarray
                         ) -> Together:
        """Locate rows ``rows`` of ``index`` (in chunks ``chunks``, ``ranks`` their places in their batch) in
        the batch's decompressed payloads ``together``, into ``starts[pos]`` and ``lengths[pos]``; the
        batch as located (see :class:`Together`).

        Always through the container's kernel: it locates a chunk's few dozen
        records in microseconds, where NumPy's fixed cost per call is ~0.3 ms,
        and a decompressed chunk is worth loading Numba for. Where a chunk's
        records are damaged, the batch stops at the first such chunk, its
        error kept for where the read first needs it, as for one that did not
        decompress.
        """
        if isinstance(pos, slice):
            pos = np.arange(pos.start, pos.stop)

        def locate(which: np.ndarray | slice) -> None:
            r = ranks[which]
            base = together.bases[r]
            starts[pos[which]], lengths[pos[which]] = self._container.payload_spans(
                together.buffer, base + index.offset[rows[which]], base, together.ends[r],
                index.chunks.position[chunks[which]], index.connection_ids[index.conn[rows[which]]],
                index.time[rows[which]], kernel=True)

        chunk_count = together.bases.size
        try:
            locate(slice(None) if together.done == chunk_count else np.flatnonzero(ranks < together.done))
            return together
        except FastbagError as exc:
            if chunk_count == 1:
                raise
            failure = exc
        for k in range(together.done):  # (damaged: chunk by chunk, to find the first it is in)
            try:
                locate(np.flatnonzero(ranks == k))
            except FastbagError as exc:
                return together._replace(done=k, error=exc)
        raise failure

    def _locate_in_chunk(self, index: BagIndex, payload: np.ndarray, chunk: int, rows: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(payload, starts, lengths) of rows ``rows`` of ``index`` (all in chunk ``chunk``) in its decompressed
        ``payload``: the whole chunk's instead, where ``payload`` is a part they run past (see :meth:`_located`)."""
        starts = np.zeros(rows.size, dtype=np.int64)
        lengths = np.zeros(rows.size, dtype=np.int64)
        located = self._located(index, np.array([chunk]), Together.alone(payload), np.full(rows.size, chunk),
                                np.zeros(rows.size, dtype=np.int64), rows, np.arange(rows.size), starts, lengths)
        return located.buffer, starts, lengths

    def _split(self, n: int, parallel: bool = True) -> tuple[WorkerThreads | None, list[slice]]:
        """Locating ``n`` messages: one part per worker for a large read (the kernels release the GIL),
        else one part on this thread. (pool, parts)."""
        pool = self._store.pool() if parallel and n >= 2 * PARALLEL_MIN else None
        step = max(1, -(-n // (self._store.workers if pool else 1)))
        return pool, [slice(k, min(n, k + step)) for k in range(0, n, step)]

    def _file_spans(self, index: BagIndex, selected: np.ndarray, parallel: bool = True
                    ) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) in the file of messages (rows of ``index``) that all lie in uncompressed chunks.

        The container's one-pass locator runs in one part per worker for
        large reads (its kernel releases the GIL; ``parallel`` False: on this
        thread, for callers on a worker already); records it cannot verify
        go through the checked parser, which explains what is wrong with them.
        """
        table = index.chunks
        n = selected.size
        starts = np.zeros(n, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        verified = np.zeros(n, dtype=bool)

        def locate(part: slice) -> int:
            first = self._container.file_spans(index, selected[part], starts[part], lengths[part], verified[part])
            return -1 if first < 0 else first + part.start

        pool, parts = self._split(n, parallel)
        for first in ordered_map(locate, parts, pool, len(parts)):
            if first >= 0:
                raise size_mismatch(self.path, index.chunks[int(index.chunk[selected[first]])])
        rows = np.flatnonzero(~verified)
        if rows.size:
            chunks = index.chunk[selected[rows]]
            mismatch = table.size[chunks] != table.data_len[chunks]
            if mismatch.any():
                raise size_mismatch(self.path, index.chunks[int(chunks[np.argmax(mismatch)])])
            lo = table.data_offset[chunks]
            starts[rows], lengths[rows] = self._container.payload_spans(
                self._source.array, lo + index.offset[selected[rows]], lo, lo + table.size[chunks],
                table.position[chunks], index.connection_ids[index.conn[selected[rows]]], index.time[selected[rows]])
        return starts, lengths

    def _iter_raw(self, selected: np.ndarray, *, index: BagIndex) -> Iterator[Message]:
        connections = index.connections
        conn_of = index.conn[selected].tolist()
        time_of = index.time[selected].tolist()
        topics = index.topic_names
        last, view = None, memoryview(b"")
        for buf, _, a, b, starts, lengths in self._batches(index, selected, kernel=_raw_kernel(selected.size)):
            if buf is not last:
                last, view = buf, memoryview(buf)
            headers = self._container.message_headers(buf, starts)
            if headers is not None:  # MCAP: publish_time and sequence too
                for c, t, s, n, p, q in zip(conn_of[a:b], time_of[a:b], starts.tolist(), lengths.tolist(),
                                            headers[0].tolist(), headers[1].tolist()):
                    yield _StampedMessage(topics[c], t, view[s:s + n], connections[c], None, p, q)
                continue
            # zip over the batch's own lists: no indexing per message (a third of this loop's cost)
            for c, t, s, n in zip(conn_of[a:b], time_of[a:b], starts.tolist(), lengths.tolist()):
                yield Message(topics[c], t, view[s:s + n], connections[c])

    def _batches(self, index: BagIndex, selected: np.ndarray, *, kernel: bool = True
                 ) -> Iterator[tuple[np.ndarray, int | None, int, int, np.ndarray, np.ndarray]]:
        """The runs of :meth:`_runs`, cut into batches of at most PARALLEL_MIN messages: iteration decodes
        a batch at a time, so memory and the wait for the first message stay small. A close under the
        iteration is a ValueError at the next batch (a bag's uncompressed chunks are one run: a loop closed
        under it went on to its end)."""
        for buf, base, a, b, starts, lengths in self._runs(index, selected, kernel=kernel):
            for k in range(0, b - a, PARALLEL_MIN):
                if k:
                    self._check_open()
                end = min(b - a, k + PARALLEL_MIN)
                yield buf, base, a + k, a + end, starts[k:end], lengths[k:end]

    def _iter_decoded(self, selected: np.ndarray, *, index: BagIndex) -> Iterator[Message]:
        from .msg.arrays import TopicBuilder, check_min_size
        from .msg.objects import decode_objects

        connections = index.connections
        conn_of = index.conn[selected]
        time_of = index.time[selected].tolist()
        # Array elements that take no bytes, beyond their runs' bytes, counted over the whole iteration as a
        # read counts them: each batch has builders of its own, and a definition declaring 100,000 such
        # elements a message would otherwise cost a Python object each, batch after batch.
        unbacked: dict[int, int] = {}
        failed: dict[str, int] = {}  # topics that had messages it could not decode: how many
        kind_of = self._decoding_kinds(connections)
        for payload, offset, a, b, starts, lengths in self._batches(index, selected):
            conns = conn_of[a:b]
            # Per kind of the batch (connections of one type and definition: topics of one type decode
            # together): its message class and where its messages read their fields; per message its row
            # among its kind's. Grouped with one sort: a batch of a thousand topics interleaved cost a pass
            # over the batch per topic, and a decode per topic (of a message or two each).
            kinds = kind_of[conns]
            order = np.argsort(kinds, kind="stable")
            grouped = kinds[order]
            edges = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
            group_start = np.concatenate(([0], edges))
            group_end = np.concatenate((edges, [b - a]))
            row_of = np.empty(b - a, dtype=np.int64)
            row_of[order] = np.arange(b - a) - np.repeat(group_start, group_end - group_start)
            rows = row_of.tolist()
            decoded: dict[int, tuple[Any, Any]] = {}
            for start, stop in zip(group_start.tolist(), group_end.tolist()):
                kind = int(grouped[start])
                mine = order[start:stop]  # (ascending: the sort is stable)

                def decode(which: np.ndarray, rank: int, kind: int = kind) -> tuple[Any, Any]:
                    """(class, source) of messages ``a + which``, of connection ``rank``'s kind: message k is
                    ``class(source, k)``. (Called within this iteration only: the batch's variables are its.)"""
                    connection = connections[rank]
                    if connection.encoding not in ARRAY_ENCODINGS:  # JSON, protobuf: one object each
                        objects = decode_objects(self._object_decoder(connection), memoryview(payload),
                                                 starts[which].tolist(), lengths[which].tolist(), (a + which).tolist())
                        return operator.getitem, objects  # the "class" picks the object
                    layout = self._layout(connection)
                    # Checked before the builder allocates messages x the fixed size: then that is real bytes.
                    check_min_size(layout, lengths[which], a, topic=connection.topic, msgtype=connection.msgtype,
                                   which=which, payload=payload, starts=starts[which])
                    builder = TopicBuilder(layout, self._source.array, which.size, topic=connection.topic,
                                           msgtype=connection.msgtype, types=self._message_types(connection))
                    builder.unbacked = unbacked.get(kind, 0)
                    builder.add_run(payload, offset, starts[which], lengths[which], a + int(which[0]))
                    unbacked[kind] = builder.unbacked
                    source = builder.finish().record_source()
                    return source.cls, source

                ranks = conns[mine]
                first = int(ranks[0])
                try:
                    decoded[kind] = decode(mine, first)
                except (DecodeError, DefinitionError, UnsupportedError) as exc:
                    self._check_open()  # (closed by another thread meanwhile: no damage to pass over)
                    # A topic that cannot be decoded must not stop the others (a user iterating the whole
                    # bag): its messages come with a msg that raises the error when used, said once. A
                    # kind of several topics: each decoded on its own, named in what it says.
                    if bool((ranks == first).all()):
                        decoded[kind] = (operator.getitem, self._undecodable(
                            functools.partial(decode, rank=first), mine, exc, connections[first], failed))
                        continue
                    out: list[Any] = [None] * mine.size
                    for rank in np.unique(ranks).tolist():
                        at = np.flatnonzero(ranks == rank)
                        try:
                            cls, source = decode(mine[at], rank)
                            found = list(map(cls, repeat(source), range(at.size)))
                        except (DecodeError, DefinitionError, UnsupportedError) as error:
                            found = self._undecodable(functools.partial(decode, rank=rank), mine[at], error,
                                                      connections[rank], failed)
                        for k, message in zip(at.tolist(), found):
                            out[k] = message
                    decoded[kind] = (operator.getitem, out)
            view = memoryview(payload)
            headers = self._container.message_headers(payload, starts)  # MCAP: publish_time and sequence
            if len(decoded) == 1 and bool((conns == conns[0]).all()):  # one connection (the usual case): message
                (cls, source), = decoded.values()  # k is row k
                connection = connections[int(conns[0])]
                # Built by map (a C loop), not by a Python loop: most of the per-message cost here.
                spans = (view, starts.tolist(), (starts + lengths).tolist())
                messages = map(cls, repeat(source), range(b - a))
                if headers is None:
                    yield from map(_DecodedMessage, repeat(connection.topic), time_of[a:b], repeat(spans),
                                   range(b - a), repeat(connection), messages)
                else:
                    yield from map(_DecodedStampedMessage, repeat(connection.topic), time_of[a:b], repeat(spans),
                                   range(b - a), repeat(connection), messages, headers[0].tolist(),
                                   headers[1].tolist())
                continue
            published, sequence = (headers[0].tolist(), headers[1].tolist()) if headers is not None else (None, None)
            for k, rank, kind, s, n in zip(range(b - a), conns.tolist(), kinds.tolist(), starts.tolist(),
                                           lengths.tolist()):
                connection = connections[rank]
                cls, source = decoded[kind]
                msg = cls(source, rows[k])
                if published is None:
                    yield Message(connection.topic, time_of[a + k], view[s:s + n], connection, msg)
                else:
                    yield _StampedMessage(connection.topic, time_of[a + k], view[s:s + n], connection, msg,
                                          published[k], sequence[k])

    def _decoding_kinds(self, connections: list[Connection]) -> np.ndarray:
        """Each connection's kind (int, by rank): connections of one type, definition and encoding share one
        (what their layout and message classes are made from), so that iteration decodes them together.
        Made once per list of connections (a loop per topic of a bag of thousands asks thousands of times)."""
        made = self._kinds
        if made is None or made[0] is not connections:
            kinds: dict[tuple[str, str, str, str], int] = {}
            made = self._kinds = (connections, np.array([
                kinds.setdefault((c.msgtype, c.definition, c.encoding, c.schema_encoding), len(kinds))
                for c in connections], dtype=np.int64))
        return made[1]

    @staticmethod
    def _undecodable(decode: Any, mine: np.ndarray, error: FastbagError, connection: Connection,
                     failed: dict[str, int]) -> list[Any]:
        """The messages ``mine`` of ``connection`` in a batch whose decoding failed with ``error``, each a
        message or an :class:`Undecodable`.

        The batch is split in halves until the bad messages stand alone, so one
        damaged message spoils only itself, at a few decodes of the halves
        around it. Once a topic has had SALVAGE_LIMIT bad messages (a wrong
        definition spoils them all) its failing batches are not split again.
        """
        topic = connection.topic
        before = failed.setdefault(topic, 0)

        def salvage(which: np.ndarray, error: FastbagError) -> list[Any]:
            if which.size == 1 or failed[topic] >= SALVAGE_LIMIT or isinstance(error, (DefinitionError,
                                                                                         UnsupportedError)):
                failed[topic] += 1  # (a type fastbag cannot decode at all: every message, at once)
                return [Undecodable(error, connection.msgtype)] * which.size
            out: list[Any] = []
            for part in (which[:which.size // 2], which[which.size // 2:]):
                try:
                    cls, source = decode(part)
                    out += map(cls, repeat(source), range(part.size))
                except (DecodeError, DefinitionError, UnsupportedError) as exc:
                    out += salvage(part, exc)
            return out

        found = salvage(mine, error)
        if before == 0 and failed[topic] > 0:  # said once, and only where a message is lost: halves of a batch
            # may decode each (CDR messages of both byte orders: each half settles its own)
            bad = next(m.error for m in found if isinstance(m, Undecodable))
            warnings.warn(f"messages of {topic} cannot be decoded ({bad}); bag.messages() yields them with a "
                          "msg that raises this error when used (m.data holds their bytes)", FastbagWarning,
                          stacklevel=4)
        return found

    def _message_types(self, connection: Connection) -> Any:
        """The message classes' type information for a connection (the definition its layout used), cached:
        iteration asks once per batch, and a new one would parse the definition and build its classes again."""
        from .msg.messages import message_types

        key = ("types", connection.msgtype, self._definition_key(connection.definition), connection.schema_encoding)
        if key not in self._layouts:
            definition = connection.definition
            if connection.encoding == "ros1" and not definition.strip() and connection.md5sum != EMPTY_MD5:
                definition = self._supplied_definition(connection)
            self._layouts[key] = message_types(connection.msgtype, definition,  # type: ignore[assignment]
                                               connection.schema_encoding)
        return self._layouts[key]

    # -- arrays ----------------------------------------------------------------------
    @_says_if_closed
    def read(self, topic: str, start: TimeLike | None = None, end: TimeLike | None = None) -> "TopicArray":
        """Every message of ``topic`` in ``[start, end)`` (int ns), decoded into arrays.

        Returns a :class:`~fastbag.msg.arrays.TopicArray`: ``len()``, ``.time``
        (int64 ns), ``.publish_time`` and ``.sequence`` (MCAP records; None
        elsewhere) and ``[field]`` for every field of the message type. No
        Python runs per message: a generic Numba kernel walks each chunk's
        messages. Raises DecodeError when a message does not match its
        definition, naming the topic and the message's index.
        """
        whole = start is None and end is None  # a whole topic's rows are kept (topic_rows), as take() keeps them
        self._check_topic(topic, formats_in_window=not whole)
        scope = self._scope(topic)
        selected = self.topic_rows(topic) if whole else self._select([topic], start, end, index=scope.index)
        decoded_as = None if whole else self._window_connection(topic, scope, selected)
        if start is None:
            return self._read_rows(topic, scope, selected, decoded_as=decoded_as)
        first = self._first_position(topic, scope.index, selected)
        return self._read_rows(topic, scope, selected, positions=np.arange(first, first + selected.size),
                               decoded_as=decoded_as)

    @_says_if_closed
    def iter_read(self, topic: str, step: int | str = 10_000, start: TimeLike | None = None,
                  end: TimeLike | None = None) -> Iterator["TopicArray"]:
        """``topic`` in ``[start, end)`` as consecutive TopicArrays, in time order, a part at a time.

        ``step`` is a number of messages (``10_000``) or of bytes (``"256 MB"``,
        ``"1 GiB"``, measured on the serialized messages). A part never
        cuts a compressed chunk: it takes as many consecutive chunks'
        messages as fit in ``step`` (at least one chunk), so it decompresses
        only its own chunks and memory stays bounded by the step and the
        chunk cache, however large the topic. Uncompressed chunks, read in
        place, are cut anywhere. Concatenated, the parts are ``read(topic,
        start, end)``.
        """
        self._check_topic(topic, formats_in_window=start is not None or end is not None)
        scope = self._step_scope(topic, step)
        selected = self._select([topic], start, end, index=scope.index)
        decoded_as = self._window_connection(topic, scope, selected)
        first = self._first_position(topic, scope.index, selected) if start is not None else 0
        for a, b in self._parts(scope.index, selected, step):
            yield self._read_rows(topic, scope, selected[a:b], positions=np.arange(first + a, first + b),
                                  decoded_as=decoded_as)

    def _first_position(self, topic: str, index: BagIndex, selected: np.ndarray) -> int:
        """The position in ``topic`` of the first of rows ``selected`` of ``index`` (the topic's messages from
        some time on, in read order)."""
        if not selected.size:
            return 0
        scope, rows = self._scope(topic), self._rows_of(topic)  # (rows ascending: read order is row order)
        if index is scope.index:  # found among the topic's rows by number: no gather of the topic's times
            return int(np.searchsorted(rows, selected[0]))
        return int(np.searchsorted(scope.index.time[rows], index.time[selected[0]]))

    def part_bounds(self, topic: str, step: int | str) -> list[tuple[int, int]]:
        """How :meth:`iter_read` cuts the whole topic: ``(a, b)`` positions for :meth:`take` (``slice(a, b)``).
        From the index alone, whatever formats the topic was recorded in (take() of a part in one reads it)."""
        self._check_topic(topic, formats_in_window=True)
        scope = self._step_scope(topic, step)
        # (a topic's messages are in the same order in every scope: positions mean the same in each)
        return self._parts(scope.index, self._select([topic], None, None, index=scope.index), step)

    def _step_scope(self, topic: str, step: int | str) -> _Scope:
        """Where parts of ``step`` are cut: steps in bytes measure records by their neighbours in the whole
        index (see :meth:`_record_sizes`); steps in messages need only the topic's scope."""
        return self._whole_scope if parse_step(step)[1] else self._scope(topic)

    def _parts(self, index: BagIndex, selected: np.ndarray, step: int | str) -> list[tuple[int, int]]:
        """``(a, b)`` bounds cutting rows ``selected`` of ``index`` (read order) into parts at chunk
        boundaries (``index`` is the whole index for steps in bytes).

        Each part is as long as fits in ``step`` (messages, or bytes as in
        :meth:`iter_read`) without cutting a compressed chunk's run of
        messages, and at least one run.
        """
        limit, by_bytes = parse_step(step)
        n = int(selected.size)
        if n == 0:
            return []
        weight = self._record_sizes()[selected] if by_bytes else np.ones(n, dtype=np.int64)
        total = np.concatenate(([0], np.cumsum(weight)))
        chunk_of = index.chunk[selected]
        # A part may end where the chunk changes, or anywhere inside a chunk read in place (uncompressed:
        # its messages are views of the mapping, so cutting it costs nothing and bounds nothing).
        free = self._in_file(index.chunks)[chunk_of[:-1]] if len(index.chunks) else np.zeros(n - 1, dtype=bool)
        cuts = np.concatenate((np.flatnonzero((np.diff(chunk_of) != 0) | free) + 1, [n]))
        at_cuts = total[cuts]  # (gathered once: per part, it made small steps over a long topic quadratic)
        bounds, a = [], 0
        while a < n:
            # The last run end b with total[b] - total[a] <= limit, and at least the first run after a.
            k = int(np.searchsorted(at_cuts, total[a] + limit, side="right")) - 1
            first = int(np.searchsorted(cuts, a, side="right"))
            b = int(cuts[max(k, first)])
            bounds.append((a, b))
            a = b
        return bounds

    def _record_sizes(self) -> np.ndarray:
        """Bytes of each index row's record (from the next record's offset in its chunk), computed once."""
        if self._sizes is None and self._index.lengths is not None:  # the container located every message
            self._sizes = self._index.lengths
        if self._sizes is None:
            index = self._index
            order = np.lexsort((index.offset, index.chunk))
            offset, chunk = index.offset[order], index.chunk[order]
            end = np.empty_like(offset)
            end[:-1] = offset[1:]
            last = np.ones(offset.size, dtype=bool)
            last[:-1] = chunk[1:] != chunk[:-1]
            end[last] = self._index.chunks.size[chunk[last]] if len(self._index.chunks) else 0
            sizes = np.empty_like(offset)
            sizes[order] = np.maximum(end - offset, 1)
            self._sizes = sizes
        return self._sizes

    def _check_topic(self, topic: str, formats_in_window: bool = False) -> None:
        """KeyError for an unknown topic; DecodeError for one recorded in two wire formats (unless
        ``formats_in_window``: a read of a time window checks the formats of the messages in it, see
        :meth:`_window_connection`)."""
        self._check_open()
        if not isinstance(topic, str):
            raise TypeError(f"a topic is one name (str), not {type(topic).__name__} {topic!r}: read one topic per "
                            "call, or iterate bag.messages(topics=[...]) over several")
        if topic not in self._topic_ranks:
            raise no_topic(topic, self.path, self._topic_ranks)
        if not formats_in_window:
            self._check_one_format(topic, self._topic_connections(topic))

    def _check_one_format(self, topic: str, connections: Sequence[Connection], window: str = "") -> None:
        """DecodeError where ``connections`` (of ``topic``) are in two wire formats, which one array cannot
        hold."""
        # Connections whose md5sums agree share a wire format, even under two
        # names (tf/tfMessage and tf2_msgs/TFMessage): they merge into one array.
        # Where one names none ("*": ROS 2 channels, ROS1 channels of an MCAP
        # file written without it), the type and its schema must agree instead.
        formats = self._formats(connections)
        if len(formats) > 1:
            msgtypes = list(dict.fromkeys(c.msgtype for c in connections))
            what = ", ".join(msgtypes) if len(msgtypes) > 1 else f"{msgtypes[0]}, defined {len(formats)} ways"
            raise DecodeError(f"topic is recorded with {len(formats)} different message formats ({what}) "
                              f"{window}in {self.path}; they cannot share one array: bag.messages(topics={topic!r}) "
                              "decodes each message with its own, and read() of a time window (or take() of "
                              "positions) holding one format reads it", topic=topic)

    def _formats(self, connections: Sequence[Connection]) -> set[Any]:
        """The wire formats of ``connections``: their md5sums, or where one names none, their encoding, type
        and definition (texts that differ only in comments, as split files of one recording may store, are
        one format) or binary schema."""
        formats: set[Any] = {c.md5sum for c in connections}
        if NO_MD5 in formats:
            formats = {(c.encoding, c.msgtype, self._definition_key(c.definition)[0],
                        b"" if c.definition else c.schema_data) for c in connections}  # (bytes: binary schemas)
        return formats

    def _window_connection(self, topic: str, scope: _Scope, selected: np.ndarray,
                           window: str = "in the time window read ") -> Connection | None:
        """For a read of some of ``topic``'s messages (rows ``selected`` of ``scope``'s index), the connection
        whose definition decodes them: None where the topic has one format. A topic recorded in two (its type
        changed between a split recording's files) reads over a window of messages in one of them; a window
        holding none decodes as the first. ``window`` says which messages, in the error where they are in
        two formats."""
        connections = self._topic_connections(topic, scope)
        ranks = self._topic_ranks[topic]
        if len(ranks) < 2 or len(self._formats(connections)) < 2:
            return None
        present = np.zeros(len(self._container.connections), dtype=bool)
        present[scope.index.conn[selected]] = True
        inside = [c for c, r in zip(connections, ranks) if present[r]] or [connections[0]]
        self._check_one_format(topic, inside, window=window)
        return inside[0]

    def topic_rows(self, topic: str) -> np.ndarray:
        """Rows of every message of ``topic`` in the index its reads use, in read order (cached): what
        ``take``'s positions pick from. From the index alone, whatever formats the topic was recorded in."""
        self._check_topic(topic, formats_in_window=True)
        return self._rows_of(topic)

    def _rows_of(self, topic: str) -> np.ndarray:
        """:meth:`topic_rows` of a known topic, whatever its formats (a window's read needs its positions)."""
        scope = self._scope(topic)
        known = self._topic_rows.get(topic)
        # (rows of another index, where another thread built the whole one while this topic took its own)
        if known is not None and known[0] is scope.index:
            return known[1]
        if scope is self._whole and len(self._topic_ranks) > 1:
            # Every topic's rows at once, one stable sort of the whole index by topic (a topic at a time
            # was a pass over the whole index each: 2,000 topics read one after another, 4 million rows).
            for name, found in self._rows_by_topic(scope.index).items():
                self._topic_rows.setdefault(name, (scope.index, found))
            known = self._topic_rows[topic]
            if known[0] is scope.index:
                return known[1]
        rows = self._select([topic], None, None, index=scope.index)
        self._topic_rows[topic] = (scope.index, rows)
        return rows

    def _rows_by_topic(self, index: BagIndex) -> dict[str, np.ndarray]:
        """Every topic's rows of ``index`` (the whole index), each in read order."""
        names = list(self._topic_ranks)
        topic_of = np.zeros(len(index.connections), dtype=np.int64)
        for k, name in enumerate(names):
            topic_of[self._topic_ranks[name]] = k
        grouped = topic_of[index.conn]
        order = np.argsort(grouped, kind="stable")
        bounds = np.searchsorted(grouped[order], np.arange(len(names) + 1)).tolist()
        return {name: order[bounds[k]:bounds[k + 1]] for k, name in enumerate(names)}

    def topic_times(self, topic: str) -> np.ndarray:
        """Receive times (int64 ns) of every message of ``topic``, from the index (nothing decoded)."""
        rows = self.topic_rows(topic)
        return self._scope(topic).index.time[rows]

    @_says_if_closed
    def take(self, topic: str, positions: Any) -> "TopicArray":
        """Messages of ``topic`` by position (0-based, in read order; an int array, a boolean mask over the
        topic's messages or a slice), decoded.

        Random access without reading anything else: the index says where
        each message is. Positions are in the order :meth:`topic_times` gives.
        A topic recorded in two message formats (its type changed between a
        split recording's files) takes positions that all lie in one of them.
        """
        rows = self.topic_rows(topic)
        scope = self._scope(topic)
        if isinstance(positions, slice):
            at = np.arange(rows.size, dtype=np.int64)[positions]
        else:
            at = np.asarray(positions)
            if at.dtype == bool:  # a mask over the topic's messages, as NumPy reads one
                if at.shape != rows.shape:
                    raise IndexError(f"a boolean mask for {topic!r} needs {rows.size} values, not {at.size}")
                at = np.flatnonzero(at)
            elif at.size and not np.issubdtype(at.dtype, np.integer):
                raise TypeError(f"positions are integers (or a slice, or a boolean mask), not {at.dtype}")
            at = at.astype(np.int64)
        selected = rows[at]  # (IndexError for a position past the topic's end, as NumPy says it)
        decoded_as = self._window_connection(topic, scope, selected, window="at the positions taken ")
        return self._read_rows(topic, scope, selected, positions=np.where(at < 0, at + rows.size, at),
                               decoded_as=decoded_as)

    def _read_rows(self, topic: str, scope: _Scope, selected: np.ndarray,
                   positions: np.ndarray | None = None, decoded_as: Connection | None = None) -> "TopicArray":
        """Decode rows ``selected`` of ``scope``'s index (all of ``topic``, in read order) into a TopicArray;
        ``positions``: theirs in the topic, where they are some of its messages (TopicArray.positions);
        ``decoded_as``: the connection whose definition decodes them (default: the topic's first)."""
        from .msg.arrays import TopicArray, TopicBuilder

        index = scope.index
        connections = self._topic_connections(topic, scope)
        connection = decoded_as or connections[0]
        if connection.encoding not in ARRAY_ENCODINGS:
            how = f"bag.messages(topics={topic!r}" + (") for its decoded messages" if connection.encoding in
                                                       OBJECT_ENCODINGS else ", raw=True) for its bytes")
            raise UnsupportedError(f"read() turns {' and '.join(ARRAY_ENCODINGS)} messages into arrays; this topic "
                                   f"is {connection.encoding or 'not'}-encoded: iterate {how}")
        layout = self._layout(connection)
        used = np.zeros(len(index.chunks), dtype=bool)  # the chunks the read needs (asked thrice below)
        used[index.chunk[selected]] = True  # O(n), where np.unique would sort
        self._check_fixed_size_fits(layout, index, selected, used, topic, connection.msgtype)
        headers = self._container.message_headers if self._container.has_message_headers else None
        builder = TopicBuilder(layout, self._source.array, selected.size, topic=topic, msgtype=connection.msgtype,
                               types=self._message_types(connection), headers=headers)
        try:
            if self._pipelined(index, selected, used, layout):
                self._decode_chunks(builder, index, selected)
            else:
                self._decode_runs(builder, scope, selected, used)
        except DecodeError as exc:
            # The builder counts the messages it was given; the user knows the message by its place in the
            # topic (a part of iter_read, take's positions, a time range)
            if positions is None or exc.index is None or not 0 <= exc.index < selected.size:
                raise
            raise exc.at(int(positions[exc.index])) from None
        own = self._topic_ranks[topic]
        local = np.searchsorted(np.array(own), index.conn[selected]).astype(np.int32) if len(own) > 1 else \
            np.zeros(selected.size, dtype=np.int32)
        return TopicArray(topic, index.time[selected], builder.finish(), local, list(connections),
                          builder.publish_time, builder.sequence, positions)

    def _pipelined(self, index: BagIndex, selected: np.ndarray, used: np.ndarray, layout: "Layout") -> bool:
        """Whether rows ``selected`` of ``index`` (in the chunks ``used`` marks) decode chunk by chunk on the
        workers (:meth:`_decode_chunks`).

        When every message lies in a compressed chunk, located through the
        chunks' records, over two chunks per worker at least (fewer chunks
        decode faster cut into parts across the workers: :meth:`_decode_runs`),
        and decoding is worth moving to the workers: arrays kept as views
        (copied out of their chunks there, see TopicBuilder.compact), or fixed
        parts that fill PIPELINE_SHARE of the chunks at least. A sparse topic
        of small messages (Imu among point clouds) leaves the workers to
        decompress alone: its decoding is a few Python calls per chunk, which
        hold the GIL the other worker then waits for (5% slower when pipelined).
        Chunks under BATCHED_CHUNK bytes on average cost more to hand over one
        by one than to decode: :meth:`_runs` decompresses them in batches,
        where the store can (not an encrypted bag's).
        """
        if index.starts is not None or selected.size < 2 * self._store.workers:  # (fewer chunks than that)
            return False
        chunks = int(np.count_nonzero(used))
        if self._in_file(index.chunks)[used].any() or chunks < 2 * self._store.workers:
            return False
        if int(index.chunks.size[used].sum()) < BATCHED_CHUNK * chunks and self._store.batches_small_chunks:
            return False
        keeps_views = any(slot.kind == "array" for slot in layout.slots)
        fixed = int(layout.min_size) * selected.size
        return keeps_views or fixed >= PIPELINE_SHARE * int(index.chunks.size[used].sum())

    def _decode_chunks(self, builder: "TopicBuilder", index: BagIndex, selected: np.ndarray) -> None:
        """Decode rows ``selected`` of ``index`` (all in compressed chunks) into ``builder``, chunk by chunk
        on the workers.

        Each task decompresses its chunks into a recycled buffer, checks
        them, locates their messages and decodes them at once, while the
        payload is still in the core's cache; root rows go straight to their
        place in the read's array (a chunk's rows are known from the index),
        so tasks decode independently, and the other worker decompresses the
        next meanwhile. The calling thread only appends each task's pieces in
        read order. At most ``2 * workers`` tasks are in flight.

        A task is one chunk, or several (see :meth:`_chunk_tasks`) decoded as
        one: one buffer, one location, one decoding pass for their runs.
        """
        store = self._store
        chunk_of = index.chunk[selected]
        run_starts, run_ends = _run_bounds(chunk_of)
        run_chunks = chunk_of[run_starts].tolist()
        groups: dict[int, list[tuple[int, int]]] = {}  # chunk -> its runs (a, b), first-need order
        for a, b, c in zip(run_starts, run_ends, run_chunks):
            groups.setdefault(c, []).append((a, b))
        number = {a: r for r, a in enumerate(run_starts)}  # a run's place in read order, by its first message
        # A read larger than the cache would evict what it caches before reusing it (see iter_batches).
        remember = int(index.chunks.size[list(groups)].sum()) <= store.cache_bytes
        reach = self._reach(index, selected, run_starts, run_chunks)

        def decode_runs(payload: np.ndarray, starts: np.ndarray, lengths: np.ndarray, runs: list[tuple[int, int]]
                        ) -> list[tuple[int, int, Any]]:
            """Pieces of ``runs`` (in read order) located at ``starts`` and ``lengths`` in ``payload``:
            (the first run's number, how many runs, the piece); runs that follow each other, one piece."""
            spans: list[list[int]] = []
            for a, b in runs:
                if spans and spans[-1][1] == a:
                    spans[-1][1:] = [b, spans[-1][2] + 1]
                else:
                    spans.append([a, b, 1])
            pieces, k = [], 0
            for a, b, count in spans:
                piece = builder.decode_run(payload, None, starts[k:k + b - a], lengths[k:k + b - a], a, a)
                pieces.append((number[a], count, builder.compact(piece)))  # views keep the topic's bytes only
                k += b - a
            return pieces

        def decode(task: list[int]) -> list[tuple[int, int, Any]]:
            if len(task) > 1:
                together = store.get_together(task)
                # (their runs, in read order, each with its chunk's place in the task)
                runs = sorted((a, b, k) for k, c in enumerate(task) for a, b in groups[c])
                rank = np.repeat([k for _, _, k in runs], [b - a for a, b, _ in runs])
                pos = _rows_of([(a, b) for a, b, _ in runs])
                starts, lengths = np.zeros(rank.size, dtype=np.int64), np.zeros(rank.size, dtype=np.int64)
                if together.done == len(task):
                    batch = np.asarray(task)
                    together = self._located(index, batch, together, batch[rank], rank, selected[pos],
                                             slice(0, rank.size), starts, lengths)
                if together.done == len(task):
                    return decode_runs(together.buffer, starts, lengths, [(a, b) for a, b, _ in runs])
                # (a chunk that failed: each on its own, so that the read fails where it needs that one)
            pieces = []
            for c in task:
                runs = groups[c]
                # (the index gathered here, on the workers, rather than for the whole read up front)
                payload, starts, lengths = self._locate_in_chunk(index, store.get(c, remember, reach(c)), c,
                                                                 selected[_rows_of(runs)])
                pieces += decode_runs(payload, starts, lengths, runs)
            return pieces

        waiting: dict[int, tuple[int, Any]] = {}  # pieces of runs after one not yet decoded (chunks overlapping)
        following = 0
        tasks = self._chunk_tasks(index, list(groups), remember, reach)
        for pieces in ordered_map(decode, tasks, store.pool(), 2 * store.workers):
            self._check_open()
            waiting.update((n, (count, piece)) for n, count, piece in pieces)
            while following in waiting:
                count, piece = waiting.pop(following)
                builder.append(piece)
                following += count

    def _chunk_tasks(self, index: BagIndex, chunks: list[int], remember: bool,
                     reach: Callable[[int], Any]) -> list[list[int]]:
        """``chunks`` (in the order a read needs them) cut into the tasks of :meth:`_decode_chunks`: runs of
        consecutive ones of about BATCH_BYTES together (ChunkStore.batches), where the read is larger than
        the cache (nothing it decompresses is kept: each chunk would be decoded again by the next read
        anyway) and each is decoded whole by a fast codec; every other chunk alone.

        One chunk a task, the Python of each step (~0.2 ms a chunk: a task, a location, a decoding pass)
        held the GIL the other worker waited for: 1 M Imu from 780 KB chunks read 1.25x slower, from zstd
        chunks and from lz4 ones (whose batch decompresses in one kernel call).
        """
        if remember:
            return [[c] for c in chunks]
        # (a chunk read in part stays alone, and bz2's: they decompress slower than a task's Python costs)
        whole = [(asked := reach(c)) is None or getattr(asked, "whole", False) for c in chunks]
        joining = np.array(whole, dtype=bool) & ~index.chunks.slow[chunks]
        return [batch.tolist() for batch in self._store.batches(chunks, joining)]

    def _windowed(self, topic: str | None, scope: _Scope, selected: np.ndarray, used: np.ndarray) -> bool:
        """Whether :meth:`_decode_windows` reads rows ``selected`` of ``scope``'s index: every message in an
        uncompressed chunk, located
        by the index, WINDOW_SPACING bytes of their chunks per message at least, none read before on this
        handle, and no earlier read of the topic found its fields outside the windows.

        Messages read again go through the mapping: that read faults their
        pages in, and every later one finds them mapped, which costs less
        than reading windows again (a loop over one topic, a notebook cell
        run twice); a first read, a fresh handle, is what windows are for.
        (Rows are marked read only by reads of messages this spaced: small
        ones read through the mapping cost too little to track.)
        """
        index = scope.index
        if index.starts is not None or selected.size < max(1, WINDOW_MIN_ROWS) or not self._container.windows or \
                topic in self._unwindowed:
            return False
        if not self._in_file(index.chunks)[used].all() or \
                int(index.chunks.size[used].sum()) < WINDOW_SPACING * selected.size:
            return False  # (checked first: a read of small messages then spends no pass over them here)
        if scope.read_before is None:
            scope.read_before = np.zeros(index.time.size, dtype=bool)
        again = bool(scope.read_before[selected].any())
        scope.read_before[selected] = True
        return not again

    def _decode_windows(self, builder: "TopicBuilder", index: BagIndex, selected: np.ndarray) -> None:
        """Decode rows ``selected`` of ``index`` (see :meth:`_windowed`) from windows onto each message's head
        and tail.

        Per part of WINDOW_PART messages: one pread of WINDOW_HEAD bytes at each
        record (the container locates the message in it), then the layout
        walk over the windows (kernels.walk): arrays stay views of the
        mapping, whose pages nothing touched. Where a field follows the
        message's last large array (PointCloud2's ``is_dense``), the walk
        needs its tail too: the part is read again with one pread of up to
        WINDOW_TAIL bytes before each message's end, and the topic's later
        parts read tails from the start (an Image, whose pixels end it, reads
        heads only). A message whose fields lie elsewhere (two large arrays)
        or whose record the window cannot verify sends its part, and every
        part after it, through the mapping as usual.
        """
        from .msg.arrays import OutsideWindows

        give_up: list[bool] = []
        topic = builder.topic
        # A type whose last field is a slot (Image's pixels, a Livox cloud's points) ends with its last
        # large array: its heads alone should do. Others (PointCloud2 ends with is_dense) read tails.
        fields = list(builder.layout.tables[0].node.fields.values())
        if not fields or fields[-1][0] != "slot":
            self._tailed.add(topic)

        def decode(part: tuple[int, int]) -> Any:
            a, b = part
            for tails in ((False, True) if topic not in self._tailed else (True,)):
                if give_up:
                    break
                found = self._read_windows(index, selected[a:b], tails)
                if found is None:
                    break
                buf, windows, starts, lengths = found
                try:
                    return builder.decode_run(buf, 0, starts, lengths, a, a, windows=windows)
                except OutsideWindows:
                    self._tailed.add(topic)  # (a set: parts on other threads add it too)
            give_up.append(True)
            return builder.decode_run(self._source.array, 0, *self._file_spans(index, selected[a:b], parallel=False),
                                      a, a)

        # A probe of a few messages first: a type whose fields lie outside the windows (two arrays, as in a
        # LaserScan) then wastes a few reads, not a part's, and the topic's later reads skip the windows.
        n = selected.size
        probe = min(n, WINDOW_PROBE)
        builder.append(decode((0, probe)))
        parts = [(a, min(n, a + WINDOW_PART)) for a in range(probe, n, WINDOW_PART)]
        pool = self._store.pool() if len(parts) > 1 and not give_up else None
        for piece in ordered_map(decode, parts, pool, 2 * self._store.workers):
            builder.append(piece)
        if give_up:
            self._unwindowed.add(builder.topic)

    def _read_windows(self, index: BagIndex, rows: np.ndarray, tails: bool = True
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """``(buf, windows, starts, lengths)`` for rows ``rows`` of ``index`` (see kernels.walk), each
        message's tail window read too where ``tails``, or None when a record is not what the index says,
        its chunk is damaged or the file changed under the mapping: the mapped path then says what is
        wrong."""
        table, source = index.chunks, self._source
        chunks = index.chunk[rows]
        at = table.data_offset[chunks] + index.offset[rows]
        chunk_end = table.data_offset[chunks] + table.size[chunks]
        head_len = np.minimum(WINDOW_HEAD, source.size - at)
        if (head_len <= 0).any() or (at < 0).any() or (table.size[chunks] != table.data_len[chunks]).any():
            return None
        # Windows that follow one another in the file with at most WINDOW_GAP bytes between are read as
        # one range (small messages of one topic lie close together: the Imu of a mixed bag takes a
        # fifth of the reads), each message's window then running to its range's end.
        end = at + head_len
        first = np.ones(rows.size, dtype=bool)
        first[1:] = (at[1:] < at[:-1]) | (at[1:] > end[:-1] + WINDOW_GAP)
        group = np.cumsum(first) - 1
        range_at = at[first]
        range_end = end[np.append(np.flatnonzero(first)[1:], rows.size) - 1]  # ends grow inside a range
        try:
            heads = source.gather(range_at, range_end - range_at)
        except ValueError:
            return None
        range_buf = np.zeros(range_at.size, dtype=np.int64)
        np.cumsum((range_end - range_at)[:-1], out=range_buf[1:])
        head_at = range_buf[group] + (at - range_at[group])
        head_len = range_end[group] - at
        starts = np.zeros(rows.size, dtype=np.int64)
        lengths = np.zeros(rows.size, dtype=np.int64)
        if self._container.window_spans(index, rows, heads, head_at, np.minimum(head_len, chunk_end - at), at,
                                        chunk_end, starts, lengths) >= 0:
            return None
        end = starts + lengths
        tail_start = np.maximum(end - WINDOW_TAIL, at + head_len)
        tail_len = np.maximum(end - tail_start, 0) if tails else np.zeros_like(at)
        windows = np.stack([at, head_len, head_at, tail_start, tail_len, np.zeros_like(at)], axis=1)
        windows[1:, 5] = np.cumsum(tail_len[:-1])
        windows[:, 5] += heads.size
        tailed = np.flatnonzero(tail_len)  # (messages inside their head window need no tail)
        if not tailed.size:
            return heads, windows, starts, lengths
        try:
            tails = source.gather(tail_start[tailed], tail_len[tailed])
        except ValueError:
            return None
        return np.concatenate((heads, tails)), windows, starts, lengths

    def _decode_runs(self, builder: "TopicBuilder", scope: _Scope, selected: np.ndarray, used: np.ndarray) -> None:
        """Decode rows ``selected`` of ``scope``'s index (in the chunks ``used`` marks) into ``builder`` run by
        run: chunks decompressed ahead, runs decoded on the workers in parts."""
        index = scope.index
        if self._windowed(builder.topic, scope, selected, used):
            self._decode_windows(builder, index, selected)
            return
        workers = self._store.workers

        def parts() -> Iterator[tuple[np.ndarray, int | None, int, np.ndarray, np.ndarray]]:
            """Runs, large ones cut in even parts so every worker gets one."""
            for buf, base, a, b, starts, lengths in self._runs(index, selected, kernel=True):
                step = max(PARALLEL_MIN, -(-(b - a) // workers))
                for k in range(0, b - a, step):
                    yield buf, base, a + k, starts[k:k + step], lengths[k:k + step]

        def decode(part: tuple[np.ndarray, int | None, int, np.ndarray, np.ndarray]) -> Any:
            buf, base, a, starts, lengths = part
            return builder.decode_run(buf, base, starts, lengths, a, a)

        # Parts decode on the worker threads (the kernels release the GIL) and append in read order;
        # a small read stays on this thread, where handing work over would cost more than it saves.
        pool = self._store.pool() if selected.size >= 2 * PARALLEL_MIN else None
        for piece in ordered_map(decode, parts(), pool, 2 * workers):
            builder.append(piece)

    def _object_decoder(self, connection: Connection) -> Any:
        """The per-message decoder of a connection whose encoding is not turned into arrays (cached)."""
        from .msg.objects import object_decoder

        key = ("object", connection.msgtype, connection.encoding, connection.schema_data)
        if key not in self._layouts:
            self._layouts[key] = object_decoder(connection.encoding, connection.msgtype,  # type: ignore[assignment]
                                                connection.schema_data, topic=connection.topic)
        return self._layouts[key]

    def _check_fixed_size_fits(self, layout: "Layout", index: BagIndex, selected: np.ndarray, used: np.ndarray,
                               topic: str, msgtype: str) -> None:
        """Before allocating messages x the definition's fixed size: could rows ``selected`` of ``index`` (in
        the chunks ``used`` marks) hold it?

        Every message lies inside its chunk, so the chunks' sizes bound the
        bytes there are. A compressed chunk's size is only a claim until it is
        decompressed, so it counts for at most PLAUSIBLE_RATIO times its bytes
        in the file: the allocation stays a small multiple of the file size.
        When the fixed parts alone would need more, the messages are located
        (decompressing) and the first too short is named, allocating nothing.
        (An allocation of at most SMALL_ALLOCATION is no risk, whatever the file: not weighed.)
        """
        if int(layout.min_size) * selected.size <= SMALL_ALLOCATION:
            return
        table = index.chunks
        chunks = np.flatnonzero(used)
        sizes = table.size[chunks]
        claimed = ~self._in_file(table)[chunks]
        sizes[claimed] = np.minimum(sizes[claimed], PLAUSIBLE_RATIO * table.data_len[chunks][claimed])
        bound = int(sizes.sum())
        if int(layout.min_size) * selected.size <= bound:
            return
        from .msg.arrays import check_min_size

        for buf, _, a, _, starts, lengths in self._runs(index, selected, kernel=True):
            check_min_size(layout, lengths, a, topic=topic, msgtype=msgtype, payload=buf, starts=starts)

    def _definition_key(self, text: str) -> tuple[Any, ...]:
        """What of a definition's text its layout and classes depend on (cached per text): its lines
        without comments, and whether it is empty. Connections whose texts differ only in comments (a
        topic merged from many nodes' recordings: 500 such texts) share one compiled layout; each compiled
        again cost 1.3 ms."""
        key = self._definition_keys.get(text)
        if key is None:
            key = self._definition_keys[text] = (definition_code(text), not text.strip())
        return key

    def _layout(self, connection: Connection) -> "Layout":
        """The compiled layout of a connection's type (cached), checking its md5sum once."""
        from .errors import DefinitionError, UnsupportedError
        from .msg.layout import layout_for

        key = (connection.msgtype, self._definition_key(connection.definition), connection.encoding,
               connection.schema_encoding)
        if key not in self._layouts:
            definition = connection.definition
            # ROS1: an empty text is lost unless the md5sum says the type has no fields (other encodings: the
            # container supplies what it knows; an empty ros2msg text is a type without fields, std_msgs/Empty)
            if connection.encoding == "ros1" and not definition.strip() and connection.md5sum != EMPTY_MD5:
                definition = self._supplied_definition(connection)
            if connection.encoding != "ros1" and not connection.schema_encoding and not definition.strip():
                raise DecodeError(f"no complete definition of {connection.msgtype or 'its type'} is known (the "
                                  "recording stores none, and neither fastbag's shipped definitions nor "
                                  "definitions= describe it and every type it uses), so its messages can only be "
                                  "read raw; pass definitions={type: .msg text} (or a folder of "
                                  "<pkg>/msg/<Type>.msg) to fastbag.open (fastbag's commands: --definitions "
                                  "DIR) to decode them", topic=connection.topic,
                                  msgtype=connection.msgtype)
            try:
                layout = layout_for(connection.msgtype, definition, encoding=connection.encoding,
                                    schema_encoding=connection.schema_encoding)
            except UnsupportedError as exc:  # an encoding or schema encoding the layout has no rules for
                raise UnsupportedError(f"{exc} ({self.path}, topic {connection.topic})") from exc
            except DefinitionError as exc:
                raise DecodeError(f"the message definition cannot be parsed: {exc}", topic=connection.topic,
                                  msgtype=connection.msgtype) from exc
            # Only ROS1 connections carry an md5sum computed from the definition (genmsg's) to check against.
            if connection.encoding == "ros1" and connection.schema_encoding == "ros1msg" and \
                    layout.md5sum not in (connection.md5sum, NO_MD5) and connection.md5sum != NO_MD5:
                warnings.warn(f"{self.path}: topic {connection.topic}: the md5sum computed from the definition of "
                              f"{connection.msgtype} is {layout.md5sum}, the connection says {connection.md5sum}",
                              FastbagWarning, stacklevel=4)
            self._layouts[key] = layout
        return self._layouts[key]

    def _with_supplied_definition(self, connection: Connection) -> Connection:
        """The connection, with its definition composed from ``definitions=`` when it stores none."""
        from .errors import DefinitionError
        from .msg.msgdef import compose_definition

        if connection.definition.strip() or connection.md5sum == EMPTY_MD5:
            return connection
        try:
            return dataclasses.replace(connection, definition=compose_definition(connection.msgtype,
                                                                                 self._definitions))
        except DefinitionError:
            return connection  # decoding it says what is missing

    def _supplied_definition(self, connection: Connection) -> str:
        """A definition from ``definitions=`` for a connection that stores none (an empty text is a type
        without fields, as the user supplied it)."""
        from .errors import DefinitionError
        from .msg.msgdef import compose_definition

        if not self._definitions:
            what = "the bag stores no message definitions (format 1.1)" if self.version == "1.1" else \
                "the connection's message definition is empty"
            raise DecodeError(f"{what}, so its messages can only be read raw; pass definitions= to "
                              "fastbag.open (fastbag's commands: --definitions DIR) to decode them",
                              topic=connection.topic, msgtype=connection.msgtype)
        try:
            return compose_definition(connection.msgtype, self._definitions)
        except DefinitionError as exc:
            raise DecodeError(f"the supplied definitions cannot describe the type: {exc}", topic=connection.topic,
                              msgtype=connection.msgtype) from exc

    # -- rosbag's spellings (the ROS 1 Python API), for code written against rosbag.Bag ----------------
    def read_messages(self, topics: Iterable[str] | str | None = None, start_time: Any = None, end_time: Any = None,
                      connection_filter: Callable[..., bool] | None = None, raw: bool = False,
                      return_connection_header: bool = False) -> Iterator[BagMessage]:
        """``rosbag.Bag.read_messages``: ``(topic, message, timestamp)`` tuples in receive-time order, so
        that ``for topic, msg, t in bag.read_messages(topics=["/imu"])`` runs as with rosbag.

        ``t`` is a :class:`~fastbag.msg.messages.Time` (genpy's ``secs``, ``nsecs``, ``to_sec()``...);
        ``start_time`` and ``end_time`` are times (``rospy.Time``, or whatever :meth:`messages` takes),
        ``end_time`` included, as rosbag includes it. ``topics`` compare as ROS names, as rosbag compares
        them (``"/a/b/"`` names ``/a/b``); none named (``None``, an empty list) means every topic.
        ``connection_filter(topic, datatype, md5sum, msg_def, header)`` selects connections;
        ``return_connection_header`` adds each connection's header
        (the fields fastbag keeps: topic, type, md5sum, message_definition, callerid, latching). rosbag's
        ``raw=True`` tuples are not made: :meth:`messages` with ``raw=True`` gives each message's bytes.
        """
        if raw:
            raise TypeError("read_messages(raw=True) is not supported: use bag.messages(raw=True), whose m.data "
                            "is each message's serialized bytes (m.connection its type and md5sum)")
        self._check_not_seconds(start_time, "start_time")  # (the caller's bounds; end + 1 below is no int)
        self._check_not_seconds(end_time, "end_time")
        start, end = time_ns(start_time, "start_time"), time_ns(end_time, "end_time")
        named = None if topics is None else [topics] if isinstance(topics, str) else list(topics)
        if named:  # (none named, an empty list or generator: every topic, as rosbag reads them)
            topics = self._rosbag_topics(named)
            if not topics:  # rosbag passes over a topic the bag lacks (a loop over bags, one list of topics)
                return iter(())
        kept = None if connection_filter is None else [
            c for c in self._container.connections
            if connection_filter(c.topic, c.msgtype, c.md5sum, c.definition, connection_header(c))]
        if kept == []:  # (messages(connections=[]) means every connection, as rosbags' reader means it)
            return iter(())
        messages = self.messages(topics if named else None, None if start is None else _Judged(start),
                                 None if end is None else _Judged(end + 1), connections=kept)  # (end included)
        return _as_bag_messages(messages, return_connection_header)

    @property
    def filename(self) -> str:
        """``rosbag.Bag.filename``: :attr:`path`."""
        return self.path

    # -- rosbags' reader names ------------------------------------------------------
    @property
    def paths(self) -> list[Path]:
        """rosbags' ``AnyReader.paths``: the recording's path, as a list of one ``Path``."""
        return [Path(self.path)]

    @property
    def is2(self) -> bool:
        """rosbags' ``AnyReader.is2``: whether this is a ROS 2 recording (rosbag2, or an MCAP file: anything
        but a ROS 1 bag, as rosbags tells them)."""
        return self._container.format != "ROS1 bag"

    def open(self) -> None:
        """rosbags' ``reader.open()``, for code that opens its reader after making it: a Bag is open from
        :func:`fastbag.open` on, so this checks that it still is (ValueError once closed: open the path
        again)."""
        self._check_open()

    @property
    def mode(self) -> str:
        """``rosbag.Bag.mode``: ``"r"`` (a Bag only reads; :class:`fastbag.Writer` writes)."""
        return "r"

    def get_compression_info(self) -> CompressionTuple:
        """``rosbag.Bag.get_compression_info``: the compression most chunks use (``"none"`` without chunks),
        and the bytes of every chunk decompressed and as stored (0 where the format does not record them)."""
        counts, sizes = self.compression, self.compression_sizes
        main = max(counts.items(), key=lambda item: (item[1], item[0]))[0] if counts else "none"
        return CompressionTuple(main, sum(size for _, size in sizes.values()),
                                sum(stored for stored, _ in sizes.values()))

    def get_message_count(self, topic_filters: Iterable[str] | str | None = None) -> int:
        """``rosbag.Bag.get_message_count``: messages in the bag, or on the topics named."""
        if topic_filters is None:
            return self.message_count
        return sum(self.topics[name].message_count for name in self._rosbag_topics(topic_filters))

    def _rosbag_topics(self, names: Iterable[str] | str) -> list[str]:
        """The bag's topics that rosbag selects by ``names`` (a name or several): compared as ROS names,
        so ``"/a/b/"`` and ``"//a/b"`` name ``/a/b``; names the bag lacks select nothing; each topic once."""
        wanted = {_canonical_name(name) for name in ([names] if isinstance(names, str) else names)}
        return [topic for topic in self._topic_ranks if topic in wanted or _canonical_name(topic) in wanted]

    def get_start_time(self) -> float:
        """``rosbag.Bag.get_start_time``: the first message's time in seconds (:attr:`start_time` in ns)."""
        if self.start_time is None:
            raise NoMessagesError(f"{self.path} holds no messages")
        return _stamp(self.start_time).to_sec()

    def get_end_time(self) -> float:
        """``rosbag.Bag.get_end_time``: the last message's time in seconds (:attr:`end_time` in ns)."""
        if self.end_time is None:
            raise NoMessagesError(f"{self.path} holds no messages")
        return _stamp(self.end_time).to_sec()

    def get_type_and_topic_info(self, topic_filters: Iterable[str] | str | None = None) -> TypesAndTopicsTuple:
        """``rosbag.Bag.get_type_and_topic_info``: every message type's md5sum, and each topic's type, message
        count, connection count and median rate in Hz (None with fewer than two messages). ``topic_filters``
        compare as ROS names; the topics are keyed by the bag's own names (rosbag's keys are the names given).
        Type names are the recording's own, equal to rospy's spelling too (a ROS 2 recording's
        ``sensor_msgs/msg/Imu == "sensor_msgs/Imu"``, as a message's ``_type``): code written for rosbag
        compares them so."""
        types = dict(sorted({TypeName(c.msgtype): c.md5sum for c in reversed(self._container.connections)}.items()))
        names = None if topic_filters is None else set(self._rosbag_topics(topic_filters))
        topics = {name: TopicTuple(TypeName(info.msgtype), info.message_count, len(info.connections), info.frequency)
                  for name, info in self.topics.items() if names is None or name in names}
        return TypesAndTopicsTuple(types, topics)

    # -- rosbags' spelling ---------------------------------------------------------------------------------
    def deserialize(self, rawdata: bytes | bytearray | memoryview, msgtype: str) -> Any:
        """rosbags' ``reader.deserialize``: one message's bytes as a message object of ``msgtype`` (a type
        of this bag's connections, decoded by its definition there), so ``for connection, timestamp,
        rawdata in bag.messages(connections=...): msg = bag.deserialize(rawdata, connection.msgtype)`` runs
        as with rosbags. One message at a time, in Python: :meth:`messages` (``m.msg``) and :meth:`read`
        decode whole chunks and topics."""
        from .msg.arrays import decode_with_layout

        last = getattr(_UNPACKED, "last", None)
        if last is not None and last[0] is rawdata and _type_key(last[1]) == _type_key(msgtype):
            del _UNPACKED.last  # (answered: no reference kept to its bytes)
            return last[2]  # the message messages() just yielded and the loop unpacked: decoded with its chunk
        connections = self._container.connections
        connection = next((c for c in connections if c.msgtype == msgtype), None) or \
            next((c for c in connections if _type_key(c.msgtype) == _type_key(msgtype)), None)
        if connection is None:
            raise NotFoundError(f"no connection of type {msgtype!r} in {self.path}; types: "
                                f"{', '.join(sorted({c.msgtype for c in connections}))}")
        connection = self._with_supplied_definition(connection)
        return decode_with_layout(self._layout(connection), [rawdata], connection.msgtype,
                                  self._message_types(connection))[0]

    # -- lifetime --------------------------------------------------------------
    def _check_open(self) -> None:
        """ValueError once closed; BagFormatError where the file shrank under its mapping (see
        Source.check_whole). Asked before each read and each chunk of a read."""
        if self._source.closed:
            raise ValueError(f"bag {self.path} is closed")
        self._source.check_whole()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (arrays and views already returned stay valid)."""
        return self._source.closed

    def close(self) -> None:
        """Release the file. Arrays and views already returned stay valid."""
        _UNPACKED.__dict__.pop("last", None)  # (a loop's last unpacked message: its bytes may be this file's)
        self._store.close()
        self._container.close()

    def __enter__(self) -> "Bag":
        self._check_open()  # (a closed file refuses ``with`` too)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __contains__(self, topic: object) -> bool:
        """``"/imu" in bag``: whether the bag records the topic."""
        return topic in self._topic_ranks

    def __iter__(self) -> Iterator[Any]:
        """``for topic, msg, t in bag``, as a ``rosbag.Bag`` iterates: :meth:`read_messages`."""
        return iter(self.read_messages())

    def __getitem__(self, key: object) -> Any:
        raise TypeError(f"a Bag is not indexed: bag.read({key!r}) decodes a topic into arrays, bag.topics[{key!r}] "
                        "describes it, bag.messages(topics=[...]) iterates its messages")

    def __reduce__(self) -> tuple[Any, ...]:
        """A Bag pickles as its path and options (to multiprocessing workers, say): unpickling opens the
        file again, a mapping of that process's own. A closed bag stays closed."""
        if self.closed:
            raise TypeError(f"bag {self.path} is closed: pickle an open bag (the other process opens it again)")
        return _reopen_bag, (self.path, self._reopen)

    def __str__(self) -> str:
        """What ``fastbag info`` prints (``print(bag)`` prints a rosbag.Bag's ``rosbag info`` text, which
        scripts print to log what they read); ``repr`` is one line."""
        if self.closed:
            return repr(self)
        from .viz.info import format_info  # an accessor: viz is a higher layer, loaded only when called

        return format_info(self)

    def __repr__(self) -> str:
        topics = len(self.topics) if not self.closed else 0
        state = "closed" if self.closed else f"{self.message_count} messages, {topics} topic{'s' * (topics != 1)}"
        version = f" v{self.version}" if self.version not in ("", "unknown") else ""
        return f"<fastbag.Bag {self.path!r} {self.format}{version}, {state}>"


def _check_bag_options(cache_bytes: Any, workers: Any, checksums: Any) -> None:
    """TypeError or ValueError naming an option of :func:`open` that is not what it takes (a string of a
    number, a negative count, ``checksums="no"``, which is true), before anything is opened."""
    def whole(value: Any) -> bool:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))

    if not whole(cache_bytes) or cache_bytes < 0:
        raise (ValueError if whole(cache_bytes) else TypeError)(
            f"cache_bytes is a number of bytes (an int, 0 or more: 256 << 20), not {cache_bytes!r}")
    if workers is not None and (not whole(workers) or not 1 <= workers <= MAX_WORKERS):
        raise (ValueError if whole(workers) else TypeError)(
            f"workers is a number of threads (an int, 1 to {MAX_WORKERS}; None: one per CPU), not {workers!r}")
    if not isinstance(checksums, (bool, np.bool_)):
        raise TypeError(f"checksums is True or False, not {checksums!r}")


class TopicInfos(dict):  # type: ignore[type-arg]
    """:attr:`Bag.topics`: a dict of :class:`TopicInfo` by name whose missing name is a NotFoundError (a
    KeyError) naming the bag's topics, the closest first."""

    path = ""

    def __missing__(self, topic: str) -> TopicInfo:
        raise no_topic(topic, self.path, self)


class _Judged(int):
    """Nanoseconds made from a bound the caller gave and :meth:`Bag._check_not_seconds` judged already
    (read_messages' ``end_time + 1``: the caller's ``Time(0)`` is no int of seconds)."""


def no_topic(topic: Any, path: str, topics: Iterable[str]) -> NotFoundError:
    """The error for a topic the bag at ``path`` lacks: the closest of its ``topics``, then all of them."""
    names = list(topics)
    return NotFoundError(f"no topic {topic!r} in {path}{close_matches(str(topic), names)}; topics: {', '.join(names)}")


def _reopen_bag(path: str, options: dict[str, Any]) -> Bag:
    return Bag(path, **options)


_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def parse_step(step: int | str) -> tuple[int, bool]:
    """``(limit, by_bytes)`` of a step: an int count of messages, or a size with its unit like ``"256 MB"``
    (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)."""
    if isinstance(step, (int, np.integer)) and not isinstance(step, bool):
        if step < 1:
            raise ValueError(f"step must be at least 1 message, not {step}")
        return int(step), False
    if isinstance(step, str):
        text = step.strip().lower().replace(" ", "")
        number = text.rstrip("kmgtib")
        unit = text[len(number):]
        try:
            value = float(number)
        except ValueError:
            value = math.nan
        if unit in _UNITS and 0 < value < 1e18:  # not inf, not nan
            return max(1, int(value * _UNITS[unit])), True
        if not unit and value > 0:  # "10000": messages or bytes? An int says messages, a unit bytes.
            raise ValueError(f"step {step!r} has no unit: pass an int for messages ({int(value)}) or a size with "
                             f"its unit ('{number} B', '{number} MB')")
        if (unit in _UNITS or not unit) and value <= 0:
            raise ValueError(f"step must be at least 1 message or 1 B, not {step!r}")
    raise ValueError(f"step must be a number of messages or a size like '256 MB', not {step!r}")


def open(path: str | os.PathLike[str], mode: str = "r", *,  # noqa: A001 - as builtins.open
         cache_bytes: int = DEFAULT_CACHE_BYTES, workers: int | None = None,
         definitions: Mapping[str, str] | str | os.PathLike[str] | None = None,
         aes_key: bytes | None = None, passphrase: str | None = None, checksums: bool = True) -> Bag:
    """Open a bag for reading (the format is recognized from its first bytes; a list of one path is taken
    as rosbags' ``AnyReader([path])`` takes it); see :class:`Bag` for the options. ``mode`` is ``"r"``, as
    ``rosbag.Bag(path, "r")`` takes it: a bag is written with :class:`fastbag.Writer`."""
    return Bag(path, mode, cache_bytes=cache_bytes, workers=workers, definitions=definitions, aes_key=aes_key,
               passphrase=passphrase, checksums=checksums)


def _check_mode(mode: Any) -> None:
    """rosbag's ``Bag(path, mode)``: reading only (``"r"``; ``"rb"`` as builtins.open spells it)."""
    if mode in ("r", "rb"):
        return
    if mode in ("w", "a", "wb", "ab"):
        raise ValueError(f"fastbag opens bags for reading only, not mode {mode!r}: to write a bag, use "
                         "fastbag.Writer(path) (README, Writing bags)")
    raise ValueError(f"mode is 'r' (fastbag opens bags for reading), not {mode!r}")


SQLITE_MAGIC = b"SQLite format 3\x00"


def _rosbag2_directory(path: str) -> tuple[str | None, list[str] | None, Any]:
    """``(mcap, mcap_files, metadata)`` of a rosbag2 directory: the MCAP file when its storage is one
    uncompressed ``.mcap`` file (else None); its MCAP storage files otherwise (several, or compressed; None
    for sqlite3 storage); its metadata.yaml parsed (None when absent or malformed: the rosbag2 reader
    reads it then, and says what is wrong). The file is read once, here."""
    from .errors import FastbagError
    from .rosbag2.mcap_storage import mcap_storage_files
    from .rosbag2.metadata import read_metadata

    yaml_path = os.path.join(path, "metadata.yaml")
    meta = None
    if os.path.exists(yaml_path):
        try:
            meta = read_metadata(yaml_path)
        except FastbagError:
            return None, None, None
        mcap = meta.storage_identifier == "mcap" or any(n.endswith((".mcap", ".mcap.zstd"))
                                                         for n in meta.relative_file_paths)
    else:
        present = os.listdir(path)
        mcap = not any(n.endswith((".db3", ".db3.zstd")) for n in present) and \
            any(n.endswith((".mcap", ".mcap.zstd")) for n in present)
    if not mcap:
        return None, None, meta
    files = mcap_storage_files(path, meta)
    if len(files) == 1 and files[0].endswith(".mcap") and os.path.isfile(files[0]) and \
            (meta is None or not meta.compression_mode):
        return files[0], None, meta
    return None, files, meta


def open_container(path: str, *, definitions: Mapping[str, str] | None = None, **options: Any) -> Container:
    """The container reader for ``path``, chosen by what a directory holds or by the file's first bytes.

    ``definitions`` (``{type: .msg text}``) serve containers that look up
    definitions themselves (rosbag2, before the interfaces fastbag ships);
    ``options`` go to the ROS1 reader (``aes_key`` and ``passphrase`` for
    encrypted bags). Raises BagFormatError for a file of no format fastbag
    knows (naming those it does), UnsupportedError for a known format it
    cannot read yet.
    """
    from .mcap.records import MAGIC as MCAP_MAGIC

    def no_options(kind: str) -> None:
        if options:
            raise TypeError(f"options {sorted(options)} apply to encrypted ROS1 bags, not to {kind}")

    if os.path.isdir(path):
        from .rosbag2.reader import Rosbag2Reader

        no_options("rosbag2 recordings")
        single, mcap_files, metadata = _rosbag2_directory(path)
        if single is not None:  # a rosbag2 directory of one MCAP file: that file holds everything
            from .rosbag2.mcap_storage import McapRecording, per_message_storage

            reader = McapRecording(single, metadata)  # (a metadata.yaml said how it is compressed: none)
            return reader if metadata is not None else per_message_storage(reader, single)
        if mcap_files is not None:  # MCAP storage split into several files, or compressed per file
            from .rosbag2.mcap_storage import McapStorage
            return McapStorage(path, mcap_files, metadata=metadata)
        return Rosbag2Reader(path, definitions=definitions, metadata=metadata)
    try:
        with io.open(path, "rb") as file:  # io.open: ``open`` in this module is fastbag.open
            head = file.read(len(SQLITE_MAGIC))
    except OSError:
        head = b""  # the ROS1 reader says what is wrong with the path
    if head == SQLITE_MAGIC or (head.startswith(ZSTD_MAGIC) and path.endswith(".db3.zstd")):
        from .rosbag2.reader import Rosbag2Reader

        no_options("rosbag2 recordings")
        return Rosbag2Reader(path, definitions=definitions)
    if head.startswith(ZSTD_MAGIC) and path.endswith(".mcap.zstd"):  # an MCAP file compressed whole (rosbag2)
        from .rosbag2.mcap_storage import McapStorage

        no_options("MCAP files")
        return McapStorage(path, [path])
    if head.startswith(MCAP_MAGIC[:5]):  # "\x89MCAP": a later major version is named by the MCAP reader
        from .mcap.reader import McapReader

        no_options("MCAP files")
        reader = McapReader(path)
        # By rosbag2 and compressed per message? Its own record says so, or (record lost) its messages' bytes.
        if any(m.name == "rosbag2" for m in reader.metadata_indexes) or reader.messages_look_zstd():
            from .rosbag2.mcap_storage import per_message_storage

            return per_message_storage(reader, path)
        return reader
    from .ros1.reader import Ros1Reader

    # Every other file goes to the ROS1 reader, whose errors say what is wrong with a would-be bag
    # (empty, truncated magic, unknown version) or that it is none of the formats above.
    return Ros1Reader(path, **options)
