"""The container interface: what every file format gives the container-neutral :class:`~fastbag.bag.Bag`.

A container (ROS1 bag, MCAP, rosbag2) reads its own records and hands up:

- an index (:class:`BagIndex`): its connections (topic, type, encoding,
  definition), its chunks (a :class:`~fastbag.io.chunks.ChunkTable`: where
  each payload lies and how it is compressed), and every message's time,
  connection, chunk and offset in the chunk's uncompressed payload, as
  NumPy arrays in read order;
- a chunk's payload, through the shared :class:`~fastbag.io.chunks.ChunkStore`
  (decompressing ahead on the worker pool into recycled buffers);
- a vectorized way from the offsets of message records in a payload to each
  message's ``(start, length)``: :meth:`Container.payload_spans`, a Numba
  kernel or NumPy gathers, never a per-message Python loop.

Everything above this (selection, decoding, iteration, arrays) is shared: a
new format adds a folder that implements :class:`Container`.

A container whose payloads do not lie in a file (rosbag2's sqlite3 storage,
where a chunk is a batch of database rows) overrides :meth:`Container.chunk_store`
with a store that builds each payload, names its chunks' compression other
than ``none`` (so the Bag never reads them in place from ``source.array``),
and may give ``offset`` any meaning its :meth:`Container.payload_spans`
understands (rosbag2: the message's number in its chunk; ``Chunk.position``
is then the chunk's number).
"""

from __future__ import annotations

import enum
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from .io.chunks import DEFAULT_CACHE_BYTES, Chunk, ChunkStore, ChunkTable
from .io.source import Source
from .msg.msgdef import type_name

#: The md5sum of a connection that names none (rosbag2; an MCAP file's ROS1 channels written without it):
#: the type's definition is not checked against one, and connections agree by type and definition instead.
NO_MD5 = "*"


class DefinitionFormat(enum.Enum):
    """How a definition is written: rosbags' ``MessageDefinitionFormat``, with its names and values, and equal
    to its members (``c.msgdef.format == MessageDefinitionFormat.MSG``, either side, and as a dict key), so
    that code ported from rosbags takes the branch it took there (fastbag does not import rosbags)."""

    NONE = 0
    MSG = 1  # .msg text: ROS 1's, or ROS 2's (dependencies after ``===`` lines and ``MSG: pkg/Type``)
    IDL = 2  # ROS 2 IDL

    def __eq__(self, other: object) -> bool:
        if isinstance(other, enum.Enum) and type(other).__name__ == "MessageDefinitionFormat":
            return (other.name, other.value) == (self.name, self.value)
        return self is other

    __hash__ = enum.Enum.__hash__  # (the name's, as rosbags' members hash: a dict keyed by theirs finds ours)


class MessageDefinition(NamedTuple):
    """A connection's definition as rosbags gives it (``connection.msgdef``): its format and its text."""

    format: DefinitionFormat
    data: str


class ConnectionExtRosbag1(NamedTuple):
    """rosbags' ``connection.ext`` of a ROS 1 connection: the publishing node and the latching flag as the
    connection header stores it (``1``, ``0``; None where it has none)."""

    callerid: str | None
    latching: int | None


class ConnectionExtRosbag2(NamedTuple):
    """rosbags' ``connection.ext`` of a ROS 2 connection: how its messages are serialized (``cdr``) and its
    publishers' offered QoS profiles, each a dict (see :attr:`Connection.qos`; rosbags gives its own ``Qos``
    tuples, which fastbag, not depending on rosbags, cannot build)."""

    serialization_format: str
    offered_qos_profiles: list[dict[str, Any]]


#: A definition's format by the schema encoding it is stored in (others: NONE).
_DEFINITION_FORMATS = {"ros1msg": DefinitionFormat.MSG, "ros2msg": DefinitionFormat.MSG,
                       "ros2idl": DefinitionFormat.IDL}


@dataclass(frozen=True)
class Connection:
    """A topic published with one message type (a ROS1 connection record, an MCAP channel, a rosbag2 topic).

    ``encoding`` is how messages are serialized (``ros1``, ``cdr``, ...);
    ``schema_encoding`` how ``definition`` is written (``ros1msg``,
    ``ros2msg``, ``ros2idl``, ...). A binary schema (an MCAP ``protobuf``
    FileDescriptorSet, say) has no text ``definition``: its bytes are in
    ``schema_data``.
    """

    id: int
    topic: str
    msgtype: str
    md5sum: str
    definition: str = field(repr=False)  # (pages of text, printed once per connection by a repr)
    callerid: str | None = None
    latching: bool = False
    encoding: str = "ros1"
    schema_encoding: str = "ros1msg"
    schema_data: bytes = field(default=b"", repr=False)
    #: Messages on this connection (rosbags' name), set by the Bag once its index is built; -1 before.
    #: Not compared: a connection is the same one whether counted or not.
    msgcount: int = field(default=-1, compare=False, repr=False)
    #: A ROS1 connection record's header fields as stored, ``{name: bytes}`` (rosbag's ``header``: its
    #: ``topic`` may differ from the record's own, which names the connection); empty where the format has none.
    header: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    #: ROS 2: the publishers' offered QoS profiles as the recording stores them (rosbag2's YAML text, from
    #: its ``topics`` table, metadata.yaml or an MCAP channel's metadata); "" where none. :attr:`qos` parses it.
    offered_qos_profiles: str = field(default="", compare=False, repr=False)
    #: ROS 2 (Iron and newer): the type's hash as the recording stores it (``RIHS01_...``); "" where none.
    type_description_hash: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        # A ROS 1 spelling (pkg/Type) equals rosbags' too (see TypeName): a filter ported from rosbags finds
        # it. Any other name stays a plain str, as rosbags gives it: strict serializers refuse a subclass
        # (yaml.safe_dump, and so rosbags' rosbag2 Writer when a copied connection's msgtype is one).
        object.__setattr__(self, "msgtype", type_name(self.msgtype))

    @property
    def digest(self) -> str:
        """rosbags' name of the type's digest: the stored ROS 2 type hash where there is one, else
        :attr:`md5sum` (ROS 1), else ``""`` (a ROS 2 type without a stored hash, as rosbags gives it)."""
        if self.type_description_hash:
            return self.type_description_hash
        return "" if self.md5sum == NO_MD5 and self.encoding != "ros1" else self.md5sum

    @property
    def msgdef(self) -> MessageDefinition:
        """rosbags' name of the definition: :attr:`definition` with its format (``MSG`` or ``IDL``; ``NONE`` for
        a schema of another kind, such as protobuf, or none found). Where a recording stores none (a
        Humble-era ``.db3``, where rosbags says ``NONE``), the definition fastbag decodes with: its shipped
        one, or one supplied."""
        return MessageDefinition(_DEFINITION_FORMATS.get(self.schema_encoding, DefinitionFormat.NONE), self.definition)

    @property
    def ext(self) -> ConnectionExtRosbag1 | ConnectionExtRosbag2:
        """rosbags' format-specific fields: :class:`ConnectionExtRosbag1` (``callerid``, ``latching``) for a
        ROS 1 connection, :class:`ConnectionExtRosbag2` (``serialization_format``, ``offered_qos_profiles``)
        for any other."""
        if self.encoding == "ros1":
            if "latching" in self.header:  # as stored: rosbags reads "1" as 1, "0" as 0 and "" as None
                text = self.header["latching"].decode(errors="replace").strip()
                latching = int(text) if text.isdigit() else None
            else:
                latching = 1 if self.latching else None
            return ConnectionExtRosbag1(self.callerid, latching)
        return ConnectionExtRosbag2(self.encoding, self.qos)

    @property
    def qos(self) -> list[dict[str, Any]]:
        """The offered QoS profiles, one dict per publisher (``history``, ``depth``, ``reliability``,
        ``durability``, ...: numbers in older recordings, names in newer); [] where none or unreadable."""
        return qos_profiles(self.offered_qos_profiles)


def qos_profiles(text: str) -> list[dict[str, Any]]:
    """Offered QoS profiles from the YAML text rosbag2 stores (a list of mappings; one mapping alone is
    taken as a list of it); [] for text that is empty, damaged or not such a list."""
    if not text.strip():
        return []
    import yaml

    try:
        profiles = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe
    except (yaml.YAMLError, ValueError, RecursionError):  # (text with undecodable bytes, nesting too deep)
        return []
    if isinstance(profiles, dict):
        profiles = [profiles]
    return [p for p in profiles if isinstance(p, dict)] if isinstance(profiles, list) else []


@lru_cache(maxsize=256)
def transient_local(text: str) -> bool:
    """Whether offered QoS profiles (:func:`qos_profiles`' text) offer transient_local durability, ROS 2's
    counterpart of a latched ROS1 topic (``durability: 1`` in older recordings, ``transient_local`` in newer).
    (Cached: a recording's topics mostly share a few texts, and parsing one takes ~75 us.)"""
    return "durability" in text and any(p.get("durability") in (1, "transient_local") for p in qos_profiles(text))


@dataclass(frozen=True)
class Encryption:
    """How a file is encrypted (``method``, e.g. ``"rosbag/AesCbcEncryptor"``) and for whom
    (``recipient``: the GPG user its key was encrypted to; empty when the key was given directly)."""

    method: str
    recipient: str


@dataclass
class BagIndex:
    """Everything needed to find every message, as NumPy arrays.

    ``time``, ``conn`` (position in ``connections``), ``chunk`` (position in
    ``chunks``) and ``offset`` (int64: of the message record in the
    uncompressed chunk, or what the container's ``payload_spans`` reads
    it as) are sorted in read order: by time, ties by connection
    order, then file order, as rosbag and rosbags yield them. Formats without
    chunks describe the whole file as one chunk. Where the container already
    knows where each message's bytes are (a scan of a legacy file),
    ``starts`` and ``lengths`` give them in file coordinates.
    """

    version: str
    connections: list[Connection]
    chunks: ChunkTable  # a list of Chunk given here becomes one
    time: np.ndarray
    conn: np.ndarray
    chunk: np.ndarray
    offset: np.ndarray
    recovered: bool = False
    starts: np.ndarray | None = None
    lengths: np.ndarray | None = None
    # Payloads of chunks cut off by the end of the file, decompressed as far as
    # they go during recovery (keyed by position in ``chunks``).
    salvaged: dict[int, np.ndarray] = field(default_factory=dict)
    # What was wrong with the file, one sentence each; the Bag warns once with them.
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.chunks, ChunkTable):
            self.chunks = ChunkTable.of(self.chunks)

    @property
    def message_count(self) -> int:
        return int(self.time.size)

    @property
    def connection_ids(self) -> np.ndarray:
        """Each connection's id (int64), by position; made once per list of connections (a new list replaces
        it when connections gain their counts, never a change in place): reads ask at every call, and
        a bag of thousands of topics read topic after topic built it thousands of times."""
        made = self.__dict__.get("_connection_ids")
        if made is None or made[0] is not self.connections:
            made = self.__dict__["_connection_ids"] = (
                self.connections, np.array([c.id for c in self.connections], dtype=np.int64))
        return made[1]  # type: ignore[no-any-return]

    @property
    def topic_names(self) -> list[str]:
        """Each connection's topic, by position; made once per list of connections, as :attr:`connection_ids`
        (a loop over a .db3 of 16,000 topics iterates each on its own, and a list each took 2 GB)."""
        made = self.__dict__.get("_topic_names")
        if made is None or made[0] is not self.connections:
            made = self.__dict__["_topic_names"] = (self.connections, [c.topic for c in self.connections])
        return made[1]  # type: ignore[no-any-return]


def build_index(version: str, connections: list[Connection], chunks: Sequence[Chunk], conn_ids: np.ndarray,
                chunk_ids: np.ndarray, time: np.ndarray, offset: np.ndarray, *, recovered: bool = False,
                spans: tuple[np.ndarray, np.ndarray] | None = None) -> BagIndex:
    """Sort per-message arrays (given in file order) into the read-order table of a BagIndex.

    ``conn_ids`` are connection ids (as the records give them); every one
    must be among ``connections``.
    """
    return in_read_order(version, connections, chunks, np.asarray(time, dtype=np.int64),
                         connection_ranks(connections, conn_ids), chunk_ids, offset, recovered=recovered, spans=spans)


def connection_ranks(connections: list[Connection], conn_ids: np.ndarray) -> np.ndarray:
    """Each id's position in ``connections`` (int32; an id listed twice: its first), every id among them."""
    ids = np.array([c.id for c in connections], dtype=np.int64)
    if ids.size and 0 <= ids.min() and ids.max() < 1 << 20:  # a table of ranks by id: one take, not a search
        table = np.zeros(int(ids.max()) + 1, dtype=np.int32)
        table[ids[::-1]] = np.arange(ids.size - 1, -1, -1, dtype=np.int32)  # the first of an id's repeats
        return table[conn_ids]
    if ids.size:
        by_id = np.argsort(ids)
        return by_id[np.searchsorted(ids[by_id], conn_ids)].astype(np.int32)
    return np.zeros(0, dtype=np.int32)


def in_read_order(version: str, connections: list[Connection], chunks: Sequence[Chunk], time: np.ndarray,
                  ranks: np.ndarray, chunk_ids: np.ndarray, offset: np.ndarray, *, recovered: bool = False,
                  spans: tuple[np.ndarray, np.ndarray] | None = None) -> BagIndex:
    """The BagIndex of per-message arrays given in file order (``time`` int64, ``ranks`` int32: positions in
    ``connections``), sorted into read order."""
    # Read order as rosbag's merge of per-connection indexes yields it: by time,
    # ties by the connection's rank, then file order (both sorts are stable).
    # Sorting by time alone is 3x faster and right unless two times are equal;
    # times already strictly increasing (one topic, say) are the read order itself.
    if time.size < 2 or bool((time[1:] > time[:-1]).all()):
        return BagIndex(version, connections, chunks, time, ranks, np.asarray(chunk_ids, dtype=np.int32),
                        np.asarray(offset, dtype=np.int64), recovered, *(spans if spans is not None else (None, None)))
    order = np.argsort(time, kind="stable")
    if (np.diff(time[order]) == 0).any():
        order = np.lexsort((ranks, time))
    starts, lengths = (spans[0][order], spans[1][order]) if spans is not None else (None, None)
    return BagIndex(version, connections, chunks, time[order], ranks[order],
                    chunk_ids[order].astype(np.int32), offset[order].astype(np.int64), recovered, starts, lengths)


class Container(ABC):
    """One open file (or directory) of a container format, behind the interface :class:`~fastbag.bag.Bag` uses.

    Subclasses set ``format`` (a name for people: ``"ROS1 bag"``), and build
    ``source`` (the mapped file) and ``index`` in their constructor.
    """

    format: str = "container"
    source: Source
    index: BagIndex
    #: how the file is encrypted (None: it is not)
    encryption: Encryption | None = None
    #: whether each chunk holds one connection's messages (rosbag2's sqlite3 batches of rows): iteration over
    #: several then goes connection by connection, merged in read order (Bag._iter_merged)
    chunks_of_one_connection: bool = False

    @property
    def path(self) -> str:
        return self.source.path

    @property
    def version(self) -> str:
        """The format's version, e.g. ``"2.0"`` for a ROS1 bag."""
        return self.index.version

    # What the Bag needs at open. A container that builds ``index`` lazily (MCAP: from the message
    # indexes, on first use) overrides these to answer from what it read at open.
    @property
    def connections(self) -> list[Connection]:
        """Every connection, in the container's order (an index's ``conn`` values are positions here)."""
        return self.index.connections

    @connections.setter
    def connections(self, value: list[Connection]) -> None:
        self.index.connections = value

    @property
    def chunks(self) -> ChunkTable:
        return self.index.chunks

    @property
    def problems(self) -> list[str]:
        """What was wrong with the file, one sentence each (the Bag warns once with them)."""
        return self.index.problems

    @property
    def salvaged(self) -> dict[int, np.ndarray]:
        return self.index.salvaged

    @property
    def recovered(self) -> bool:
        """True when the index was rebuilt by scanning."""
        return self.index.recovered

    @property
    def message_count(self) -> int:
        return self.index.message_count

    @property
    def time_range(self) -> tuple[int | None, int | None]:
        """(earliest, latest) receive time in int ns; (None, None) without messages."""
        time = self.index.time
        return (int(time[0]), int(time[-1])) if time.size else (None, None)

    @property
    def attachments(self) -> list[Any]:
        """Files stored in the recording (MCAP attachments): objects with ``name``, ``media_type``, ``data``."""
        return []

    @property
    def metadata(self) -> list[Any]:
        """Named string maps stored in the recording (MCAP metadata): objects with ``name``, ``metadata``."""
        return []

    def chunk_store(self, *, cache_bytes: int = DEFAULT_CACHE_BYTES, workers: int | None = None,
                    checksums: bool = True) -> ChunkStore:
        """The store that hands out this container's chunk payloads (decompressed, cached, read ahead;
        ``checksums``: see :class:`~fastbag.io.chunks.ChunkStore`).

        Containers whose payloads are not spans of ``source`` override it
        (see the module docstring).
        """
        return ChunkStore(self.source, self.chunks, cache_bytes=cache_bytes, workers=workers,
                          salvaged=self.salvaged, checksums=checksums)

    def record_end(self, payload: np.ndarray, at: int) -> int:
        """How many bytes of a chunk's payload a read of the record at offset ``at`` needs, as far as
        ``payload`` (a prefix of it, perhaps empty) tells: the record's end once its lengths are in the
        prefix, else the end of the next length field. A read of a compressed chunk decodes only that far
        (a few small messages before a large one decode only the head of the chunk: see
        :data:`~fastbag.io.prefix.Reach`). The default, any size, means the whole payload."""
        return sys.maxsize

    @abstractmethod
    def payload_spans(self, buf: np.ndarray, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, chunk: np.ndarray,
                      conn: np.ndarray, time: np.ndarray, *, kernel: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, lengths)`` in ``buf`` of the messages whose records start at ``at``.

        Message ``i``'s record lies at ``buf[at[i]:]`` and must end within
        ``[lo[i], hi[i])`` (its chunk's payload in ``buf``); ``chunk`` is the
        chunk's position in the file (for errors), ``conn`` the connection
        id and ``time`` the int ns time the index promised, which the record
        must agree with. A record that does not raises BagFormatError naming
        the file and offset. ``kernel`` asks for the Numba path where NumPy's
        fixed costs would dominate.
        """

    def file_spans(self, index: BagIndex, selected: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   verified: np.ndarray) -> int:
        """Spans in the file of messages ``selected`` (rows of ``index``: the whole index, or one of
        :meth:`topic_index`), all in uncompressed chunks, in one pass.

        Fills ``starts``/``lengths`` and ``verified`` for what it can check
        cheaply; rows left unverified go through :meth:`payload_spans`, which
        explains any fault. Returns -1, or the first ``i`` whose chunk holds
        other than its declared size (the caller raises). The default
        verifies nothing.
        """
        return -1

    def topic_index(self, ranks: Sequence[int]) -> BagIndex | None:
        """The index of the messages of the connections at ``ranks`` (positions in :attr:`connections`)
        alone, built without the others', or None: the Bag then uses :attr:`index`.

        For a container that builds its index on first use and can read one
        topic's part of it for less (MCAP: only that topic's message-index
        records, only in the chunks that hold it). Its ``connections`` are the
        whole index's, and its ``chunks`` number every chunk as the whole
        index does (a rosbag2 ``.db3``, whose chunks are cut from the rows,
        gives the chunks numbered so far: the whole index keeps their
        numbers); its rows are that index's rows of these connections, in the
        same order. None (the default) once the whole index is built, or where
        nothing cheaper exists.
        """
        return None

    def window_index(self, start: int | None, end: int | None) -> BagIndex | None:
        """An index holding every message of the time window ``[start, end)`` (int ns, None: open), built
        without the rest of the file's, or None: the Bag then uses :attr:`index`.

        For a container that builds its index on first use and can read a
        window's part of it for less (MCAP: the message indexes of the chunks
        whose times meet the window). It may hold messages outside the window
        (the chunks' others); its ``chunks`` are the whole index's, and its
        ``connections`` those of :attr:`connections`, in their order, each with
        its ``msgcount`` (MCAP: the statistics', the whole index's count where
        the file is intact). None (the default) once the whole index is built,
        or where nothing cheaper exists.
        """
        return None

    #: Reads of at most this many messages fetch them with :meth:`payloads_of` (0: never)
    direct_read_max = 0

    def payloads_of(self, index: BagIndex, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The bytes of a few messages (rows ``selected`` of ``index``, at most :attr:`direct_read_max`)
        fetched straight, where the format has a cheaper way to them than their chunks: ``(buf, starts,
        lengths)``, message ``i`` at ``buf[starts[i]:starts[i] + lengths[i]]``. None (the default, and
        wherever a fault is met: the chunks' read then names it): the read goes through the chunks."""
        return None

    #: Whether each message's record holds a publish_time and a sequence (MCAP): see :meth:`message_headers`.
    has_message_headers = False

    def message_headers(self, buf: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(publish_time, sequence)`` (int64) of the messages whose bytes start at ``starts`` in ``buf``
        (their run's buffer), where the format records them (MCAP: :attr:`has_message_headers`); None where it
        does not (the default)."""
        return None

    #: What :meth:`compression_counts` counts, for people (``fastbag info``).
    compression_unit = "chunks"

    def counted_chunks(self) -> np.ndarray | None:
        """Which of :attr:`chunks` are the format's chunks, for :attr:`chunk_count` and the compression counts
        (a bool mask), or None for all of them."""
        return None

    @property
    def chunk_count(self) -> int:
        """The format's chunks, as :attr:`Bag.chunk_count` gives them (the default: :attr:`chunks`)."""
        counted = self.counted_chunks()
        return len(self.chunks) if counted is None else int(counted.sum())

    def _counted_chunk_sizes(self) -> tuple[list[str], list[int], list[int]]:
        """Compression name, bytes stored and bytes decompressed of each counted chunk."""
        table, counted = self.chunks, self.counted_chunks()
        names, stored, size = list(table.compression), table.data_len, table.size
        if counted is not None:
            names = [name for name, keep in zip(names, counted.tolist()) if keep]
            stored, size = stored[counted], size[counted]
        return names, stored.tolist(), size.tolist()

    def compression_counts(self) -> dict[str, int]:
        """How the data is compressed, as :attr:`Bag.compression` gives it: chunks per compression name."""
        counts: dict[str, int] = {}
        for name in self._counted_chunk_sizes()[0]:
            counts[name] = counts.get(name, 0) + 1
        return counts

    def compression_sizes(self) -> dict[str, tuple[int, int]]:
        """``(bytes stored, bytes decompressed)`` of the chunks of each compression, as
        :attr:`Bag.compression_sizes` gives them (``{}`` where the format does not say)."""
        sizes: dict[str, tuple[int, int]] = {}
        for name, stored, size in zip(*self._counted_chunk_sizes()):
            before = sizes.get(name, (0, 0))
            sizes[name] = (before[0] + stored, before[1] + size)
        return sizes

    @property
    def windows(self) -> bool:
        """Whether :meth:`window_spans` locates messages in windows onto their records (Bag._decode_windows)."""
        return self._window_kernel() is not None

    def _window_kernel(self) -> Any:
        """The Numba kernel that locates this format's message records in windows, or None (the default)."""
        return None

    def window_spans(self, index: BagIndex, selected: np.ndarray, heads: np.ndarray, head_at: np.ndarray,
                     seen: np.ndarray, at: np.ndarray, chunk_end: np.ndarray, starts: np.ndarray,
                     lengths: np.ndarray) -> int:
        """Spans in the file of messages ``selected`` (rows of ``index``, in uncompressed chunks), located in
        copies of their records' first bytes.

        Record ``i`` lies at file offset ``at[i]`` in a chunk ending at
        ``chunk_end[i]``; its first ``seen[i]`` bytes are at
        ``heads[head_at[i]:]``. Fills ``starts``/``lengths`` (file offsets)
        for the records the format's kernel verifies against the index, as
        :meth:`file_spans` does; returns -1, or the first ``i`` it cannot
        verify from the window (the caller then reads through the mapping,
        where :meth:`payload_spans` explains any fault).
        """
        kernel = self._window_kernel()
        if kernel is None:
            return 0
        conn_ids = index.connection_ids[index.conn[selected]]
        return kernel(heads, head_at, seen, at, chunk_end, conn_ids, index.time[selected], starts, lengths)

    def close(self) -> None:
        """Release the file."""
        self.source.close()


class LazyIndexContainer(Container):
    """A container that builds ``index`` on first use (MCAP from its message indexes, rosbag2 by a scan of
    its rows): the connections and problems the Bag needs at open come from what the subclass read then,
    kept in ``_connections`` and ``_problems``, with ``_index`` None until built."""

    _connections: list[Connection]
    _problems: list[str]
    _index: BagIndex | None

    @property
    def connections(self) -> list[Connection]:
        return self._connections

    @connections.setter
    def connections(self, value: list[Connection]) -> None:
        self._connections = value
        if self._index is not None:
            self._index.connections = value

    @property
    def problems(self) -> list[str]:
        return self._problems

    @property
    def salvaged(self) -> dict[int, np.ndarray]:
        """Nothing: these formats index every message they read (a damaged file is scanned, not salvaged)."""
        return {}
