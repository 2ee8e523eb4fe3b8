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

import dataclasses
import functools
import io
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .container import BagIndex, Connection, Container
from .errors import BagFormatError, DecodeError, FastbagWarning
from .io.chunks import DEFAULT_CACHE_BYTES, ordered_map, size_mismatch
from .msg.msgdef import EMPTY_MD5

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from .msg.arrays import TopicArray
    from .msg.layout import Layout


#: Reads of fewer messages than twice this decode on the calling thread; larger runs are cut
#: into parts of at least this many messages, one per worker.
PARALLEL_MIN = 4096
#: Bytes a compressed chunk is assumed to hold, at most, per byte in the file before it is decompressed.
PLAUSIBLE_RATIO = 64


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
    definition: str
    message_count: int
    connections: tuple[Connection, ...]
    frequency: float | None  # median message rate in Hz, None with fewer than two messages

    @property
    def msgtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.msgtype for c in self.connections))


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


class Bag:
    """An open ROS bag. Use :func:`fastbag.open`; close it or use it as a context manager.

    ``cache_bytes`` bounds the decompressed chunks kept in memory; ``workers``
    is the number of threads decompressing ahead (default: the CPU count).
    ``definitions`` supplies message definitions where the bag has none
    (format 1.1, or a connection whose definition was lost): a mapping
    ``{"pkg/Type": ".msg text"}`` or a folder of ``<pkg>/msg/<Type>.msg``
    files; a type's dependencies are looked up in the same place.
    """

    def __init__(self, path: str | os.PathLike[str], *, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 workers: int | None = None,
                 definitions: Mapping[str, str] | str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(path)
        if definitions is None or isinstance(definitions, Mapping):
            self._definitions = dict(definitions or {})
        else:
            from .msg.msgdef import load_definitions
            self._definitions = load_definitions(definitions)
        self._container = open_container(self.path, definitions=self._definitions)
        self._source = self._container.source
        self._index: BagIndex = self._container.index
        if self._definitions:
            self._index.connections = [self._with_supplied_definition(c) for c in self._index.connections]
        if self._index.problems:
            warnings.warn(f"{self.path}: {'; '.join(self._index.problems)}", FastbagWarning, stacklevel=3)
        self._store = self._container.chunk_store(cache_bytes=cache_bytes, workers=workers)
        self._layouts: dict[tuple[str, str], Layout] = {}
        self._chunks = self._index.chunks
        # Where a chunk's messages are read in place: uncompressed, and not cut off by the end of the file.
        self._in_file = self._chunks.uncompressed.copy()
        self._in_file[list(self._index.salvaged)] = False
        self._connection_ids = np.array([c.id for c in self._index.connections], dtype=np.int64)

    # -- what the index says ---------------------------------------------------
    @property
    def format(self) -> str:
        """The container format, e.g. ``"ROS1 bag"``."""
        return self._container.format

    @property
    def version(self) -> str:
        """Format version, e.g. ``"2.0"``."""
        return self._index.version

    @property
    def size(self) -> int:
        """File size in bytes."""
        return self._source.size

    @property
    def message_count(self) -> int:
        return self._index.message_count

    @property
    def start_time(self) -> int | None:
        """Earliest receive time (int ns), None for a bag without messages."""
        return int(self._index.time[0]) if self._index.message_count else None

    @property
    def end_time(self) -> int | None:
        """Latest receive time (int ns), None for a bag without messages."""
        return int(self._index.time[-1]) if self._index.message_count else None

    @property
    def duration(self) -> int:
        """``end_time - start_time`` in ns (0 for an empty bag)."""
        return (self.end_time - self.start_time) if self._index.message_count else 0  # type: ignore[operator]

    @property
    def connections(self) -> list[Connection]:
        """Every connection, in the order of the bag's connection records."""
        return list(self._index.connections)

    @property
    def chunk_count(self) -> int:
        return len(self._index.chunks)

    @property
    def compression(self) -> dict[str, int]:
        """Chunk count per compression, e.g. ``{"lz4": 12}``."""
        counts: dict[str, int] = {}
        for compression in self._chunks.compression:
            counts[compression] = counts.get(compression, 0) + 1
        return counts

    @property
    def recovered(self) -> bool:
        """True when the index was rebuilt by scanning (unindexed or damaged bag)."""
        return self._index.recovered

    @functools.cached_property
    def topics(self) -> dict[str, TopicInfo]:
        """Every topic's :class:`TopicInfo`, by name, sorted (computed on first use)."""
        index = self._index
        by_topic: dict[str, list[int]] = {}
        for rank, connection in enumerate(index.connections):
            by_topic.setdefault(connection.topic, []).append(rank)
        per_conn = np.bincount(index.conn, minlength=len(index.connections))
        infos = {}
        for topic, ranks in by_topic.items():
            first = index.connections[ranks[0]]
            mine = np.zeros(len(index.connections), dtype=bool)
            mine[ranks] = True
            times = index.time[mine[index.conn]]
            frequency = None
            if times.size > 1:
                period = float(np.median(np.diff(times)))
                frequency = 1e9 / period if period > 0 else None
            infos[topic] = TopicInfo(topic, first.msgtype, first.md5sum, first.definition,
                                     int(per_conn[ranks].sum()),
                                     tuple(index.connections[r] for r in ranks), frequency)
        return dict(sorted(infos.items()))

    # -- messages --------------------------------------------------------------
    def _select(self, topics: Iterable[str] | str | None, start: int | None, end: int | None) -> np.ndarray:
        """Positions in the index table of the wanted messages, in read order."""
        index = self._index
        lo = 0 if start is None else int(np.searchsorted(index.time, start, side="left"))
        hi = index.message_count if end is None else int(np.searchsorted(index.time, end, side="left"))
        hi = max(lo, hi)
        selected = np.arange(lo, hi)
        if topics is not None:
            if isinstance(topics, str):
                topics = [topics]
            wanted = set(topics)
            unknown = wanted - set(self.topics)
            if unknown:
                raise KeyError(f"no topic {sorted(unknown)[0]!r} in {self.path}; topics: {', '.join(self.topics)}")
            want = np.array([c.topic in wanted for c in index.connections], dtype=bool)  # by connection rank
            if not want.all():
                selected = selected[want[index.conn[lo:hi]]]
        return selected

    def messages(self, topics: Iterable[str] | str | None = None, start: int | None = None,
                 end: int | None = None, *, raw: bool = False) -> Iterator[Message]:
        """Messages in receive-time order, filtered by topics and time window ``[start, end)``.

        ``start`` and ``end`` are int nanoseconds. With ``raw=True`` each
        message's ``data`` is its serialized bytes (see :class:`Message`);
        otherwise ``msg`` is the decoded message as well (decoded a chunk at
        a time through the same kernels as :meth:`read`).
        """
        self._check_open()
        selected = self._select(topics, start, end)
        return self._iter_raw(selected) if raw else self._iter_decoded(selected)

    def _runs(self, selected: np.ndarray, *, kernel: bool = False
              ) -> Iterator[tuple[np.ndarray, int | None, int, int, np.ndarray, np.ndarray]]:
        """Maximal runs of consecutive selected messages in one chunk, in read order.

        Yields ``(buf, base, a, b, starts, lengths)``: messages
        ``selected[a:b]`` lie at ``buf[starts[i]:starts[i]+lengths[i]]``.
        For an uncompressed chunk ``buf`` is the whole file and ``base`` 0
        (positions are file offsets); spans of every such message are located
        in one vectorized pass. For a compressed chunk ``buf`` is its
        decompressed payload and ``base`` None; chunks are decompressed ahead
        in parallel and held only until their last run. ``kernel`` locates
        records in the file with the Numba kernel (decoding callers, which
        load Numba anyway); those of decompressed chunks always go through it.
        """
        index = self._index
        self._check_open()  # a generator created before close() and started after it
        n = selected.size
        if n == 0:
            return
        if kernel and index.starts is None and bool(self._in_file.all()):
            # Every chunk lies uncompressed in the file (the common large read): a kernel locates
            # every message straight from the index arrays, and one run covers them all.
            yield (self._source.array, 0, 0, n, *self._file_spans(selected))
            return
        chunk_of = index.chunk[selected]
        conn_ids = self._connection_ids[index.conn[selected]]
        starts = np.zeros(n, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        table = self._chunks
        in_file = self._in_file[chunk_of]
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
        # Runs break where the chunk changes, except between chunks that both
        # lie in the file: those share one buffer, so one run serves them all.
        key = np.where(in_file, -1, chunk_of)
        bounds = np.flatnonzero(np.diff(key)) + 1
        run_starts = np.concatenate(([0], bounds)).tolist()
        run_ends = np.concatenate((bounds, [n])).tolist()
        run_chunks = chunk_of[run_starts].tolist()
        last_run = {c: k for k, c in enumerate(run_chunks)}
        groups: dict[int, list[tuple[int, int]]] = {}  # compressed chunk -> its runs
        for a, b, c in zip(run_starts, run_ends, run_chunks):
            if not self._in_file[c]:
                groups.setdefault(c, []).append((a, b))
        payloads = self._store.iter_chunks(list(groups))  # dicts keep first-need order
        live: dict[int, np.ndarray] = {}
        try:
            for k, (c, a, b) in enumerate(zip(run_chunks, run_starts, run_ends)):
                self._check_open()
                if self._in_file[c]:
                    yield self._source.array, 0, a, b, starts[a:b], lengths[a:b]
                    continue
                while c not in live:
                    got, payload = next(payloads)
                    pos = np.concatenate([np.arange(x, y) for x, y in groups[got]])
                    zero = np.zeros(pos.size, dtype=np.int64)
                    # The kernel locates a chunk's few dozen records in microseconds, where NumPy's
                    # fixed cost per call is ~0.3 ms; a decompressed chunk is worth loading Numba for.
                    starts[pos], lengths[pos] = self._container.payload_spans(
                        payload, index.offset[selected[pos]], zero, zero + payload.size,
                        zero + index.chunks[got].position, conn_ids[pos], index.time[selected[pos]], kernel=True)
                    live[got] = payload
                yield live[c], None, a, b, starts[a:b], lengths[a:b]
                if last_run[c] == k:
                    del live[c]
        finally:
            payloads.close()  # type: ignore[attr-defined]

    def _split(self, n: int, parallel: bool = True) -> tuple[ThreadPoolExecutor | None, list[slice]]:
        """Locating ``n`` messages: one part per worker for a large read (the kernels release the GIL),
        else one part on this thread. (pool, parts)."""
        pool = self._store.pool() if parallel and n >= 2 * PARALLEL_MIN else None
        step = max(1, -(-n // (self._store.workers if pool else 1)))
        return pool, [slice(k, min(n, k + step)) for k in range(0, n, step)]

    def _file_spans(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) in the file of messages that all lie in uncompressed chunks.

        The container's one-pass locator runs in one part per worker for
        large reads (its kernel releases the GIL); records it cannot verify
        go through the checked parser, which explains what is wrong with them.
        """
        index, table = self._index, self._chunks
        n = selected.size
        starts = np.zeros(n, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        verified = np.zeros(n, dtype=bool)

        def locate(part: slice) -> int:
            first = self._container.file_spans(selected[part], starts[part], lengths[part], verified[part])
            return -1 if first < 0 else first + part.start

        pool, parts = self._split(n)
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
                table.position[chunks], self._connection_ids[index.conn[selected[rows]]], index.time[selected[rows]])
        return starts, lengths

    def _iter_raw(self, selected: np.ndarray) -> Iterator[Message]:
        index = self._index
        connections = index.connections
        conn_of = index.conn[selected].tolist()
        time_of = index.time[selected].tolist()
        last, view = None, memoryview(b"")
        for buf, _, a, b, starts, lengths in self._runs(selected):
            if buf is not last:
                last, view = buf, memoryview(buf)
            for k, s, n in zip(range(a, b), starts.tolist(), lengths.tolist()):
                connection = connections[conn_of[k]]
                yield Message(connection.topic, time_of[k], view[s:s + n], connection)

    def _batches(self, selected: np.ndarray) -> Iterator[tuple[np.ndarray, int | None, int, int, np.ndarray,
                                                                np.ndarray]]:
        """The runs of :meth:`_runs`, cut into batches of at most PARALLEL_MIN messages: iteration decodes
        a batch at a time, so memory and the wait for the first message stay small."""
        for buf, base, a, b, starts, lengths in self._runs(selected, kernel=True):
            for k in range(0, b - a, PARALLEL_MIN):
                end = min(b - a, k + PARALLEL_MIN)
                yield buf, base, a + k, a + end, starts[k:end], lengths[k:end]

    def _iter_decoded(self, selected: np.ndarray) -> Iterator[Message]:
        from .msg.arrays import TopicBuilder, check_min_size

        index = self._index
        connections = index.connections
        conn_of = index.conn[selected]
        time_of = index.time[selected].tolist()
        for payload, offset, a, b, starts, lengths in self._batches(selected):
            conns = conn_of[a:b]
            decoded: dict[int, tuple[Any, np.ndarray]] = {}
            for rank in np.unique(conns).tolist():
                mine = np.flatnonzero(conns == rank)
                layout = self._layout(connections[rank])
                # Checked before the builder allocates messages x the fixed size: then that is real bytes.
                check_min_size(layout, lengths[mine], a, topic=connections[rank].topic,
                               msgtype=connections[rank].msgtype, which=mine)
                builder = TopicBuilder(layout, self._source.array, mine.size,
                                       topic=connections[rank].topic, msgtype=connections[rank].msgtype)
                builder.add_run(payload, offset, starts[mine], lengths[mine], a + int(mine[0]))
                row_of = np.zeros(b - a, dtype=np.int64)
                row_of[mine] = np.arange(mine.size)
                decoded[rank] = (builder.finish(), row_of)
            view = memoryview(payload)
            for k, rank in enumerate(conns.tolist()):
                connection = connections[rank]
                struct, row_of = decoded[rank]
                s, n = int(starts[k]), int(lengths[k])
                yield Message(connection.topic, time_of[a + k], view[s:s + n], connection,
                              struct[int(row_of[k])])

    # -- arrays ----------------------------------------------------------------------
    def read(self, topic: str, start: int | None = None, end: int | None = None) -> "TopicArray":
        """Every message of ``topic`` in ``[start, end)`` (int ns), decoded into arrays.

        Returns a :class:`~fastbag.arrays.TopicArray`: ``len()``, ``.time``
        (int64 ns) and ``[field]`` for every field of the message type. No
        Python runs per message: a generic Numba kernel walks each chunk's
        messages. Raises DecodeError when a message does not match its
        definition, naming the topic and the message's index.
        """
        from .msg.arrays import TopicArray, TopicBuilder

        self._check_open()
        if topic not in self.topics:
            raise KeyError(f"no topic {topic!r} in {self.path}; topics: {', '.join(self.topics)}")
        info = self.topics[topic]
        # Connections whose md5sums agree share a wire format, even under two
        # names (tf/tfMessage and tf2_msgs/TFMessage): they merge into one array.
        md5sums = {c.md5sum for c in info.connections}
        if len(md5sums) > 1:
            raise DecodeError(f"topic is recorded with {len(md5sums)} different message formats "
                              f"({', '.join(info.msgtypes)}); they cannot share one array", topic=topic)
        selected = self._select([topic], start, end)
        connection = info.connections[0]
        layout = self._layout(connection)
        self._check_fixed_size_fits(layout, selected, topic, connection.msgtype)
        builder = TopicBuilder(layout, self._source.array, selected.size, topic=topic, msgtype=connection.msgtype)
        workers = self._store.workers

        def parts() -> Iterator[tuple[np.ndarray, int | None, int, np.ndarray, np.ndarray]]:
            """Runs, large ones cut in even parts so every worker gets one."""
            for buf, base, a, b, starts, lengths in self._runs(selected, kernel=True):
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
        own = [r for r, c in enumerate(self._index.connections) if c.topic == topic]
        local = np.searchsorted(np.array(own), self._index.conn[selected]).astype(np.int32) if len(own) > 1 else \
            np.zeros(selected.size, dtype=np.int32)
        return TopicArray(topic, self._index.time[selected], builder.finish(), local, list(info.connections))

    def _check_fixed_size_fits(self, layout: "Layout", selected: np.ndarray, topic: str, msgtype: str) -> None:
        """Before allocating messages x the definition's fixed size: could the messages hold it?

        Every message lies inside its chunk, so the chunks' sizes bound the
        bytes there are. A compressed chunk's size is only a claim until it is
        decompressed, so it counts for at most PLAUSIBLE_RATIO times its bytes
        in the file: the allocation stays a small multiple of the file size.
        When the fixed parts alone would need more, the messages are located
        (decompressing) and the first too short is named, allocating nothing.
        """
        table = self._chunks
        used = np.zeros(len(self._index.chunks), dtype=bool)
        used[self._index.chunk[selected]] = True  # O(n), where np.unique would sort
        chunks = np.flatnonzero(used)
        sizes = table.size[chunks]
        claimed = ~self._in_file[chunks]
        sizes[claimed] = np.minimum(sizes[claimed], PLAUSIBLE_RATIO * table.data_len[chunks][claimed])
        bound = int(sizes.sum())
        if int(layout.min_size) * selected.size <= bound:
            return
        from .msg.arrays import check_min_size

        for _, _, a, _, _, lengths in self._runs(selected, kernel=True):
            check_min_size(layout, lengths, a, topic=topic, msgtype=msgtype)

    def _layout(self, connection: Connection) -> "Layout":
        """The compiled layout of a connection's type (cached), checking its md5sum once."""
        import inspect

        from .errors import DefinitionError, UnsupportedError
        from .msg.layout import layout_for

        key = (connection.msgtype, connection.definition)
        if key not in self._layouts:
            definition = connection.definition
            if not definition.strip() and connection.md5sum != EMPTY_MD5:  # lost, not a type without fields
                definition = self._supplied_definition(connection)
            if connection.encoding != "ros1" and "encoding" not in inspect.signature(layout_for).parameters:
                # Until the message layer decodes CDR, decoding ROS2 bytes by ROS1 rules would be wrong.
                raise UnsupportedError(f"decoding {connection.encoding!r} messages is not supported yet; read them "
                                       "raw with messages(raw=True)")
            try:
                layout = layout_for(connection.msgtype, definition)
            except DefinitionError as exc:
                raise DecodeError(f"the message definition cannot be parsed: {exc}", topic=connection.topic,
                                  msgtype=connection.msgtype) from exc
            if layout.md5sum not in (connection.md5sum, "*") and connection.md5sum != "*":
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
                              "fastbag.open to decode them", topic=connection.topic, msgtype=connection.msgtype)
        try:
            return compose_definition(connection.msgtype, self._definitions)
        except DefinitionError as exc:
            raise DecodeError(f"the supplied definitions cannot describe the type: {exc}", topic=connection.topic,
                              msgtype=connection.msgtype) from exc

    # -- lifetime --------------------------------------------------------------
    def _check_open(self) -> None:
        if self._source.closed:
            raise ValueError(f"bag {self.path} is closed")

    @property
    def closed(self) -> bool:
        return self._source.closed

    def close(self) -> None:
        """Release the file. Arrays and views already returned stay valid."""
        self._store.close()
        self._container.close()

    def __enter__(self) -> "Bag":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.message_count} messages, {len(self.topics)} topics"
        return f"<fastbag.Bag {self.path!r} v{self.version}, {state}>"


def open(path: str | os.PathLike[str], **options: object) -> Bag:  # noqa: A001 - mirrors builtins.open
    """Open a bag for reading (the format is recognized from its first bytes); see :class:`Bag` for ``options``."""
    return Bag(path, **options)  # type: ignore[arg-type]


#: What :func:`open_container` recognizes, for people: first bytes (or what a directory holds) and format.
KNOWN_FORMATS = ("ROS1 bag 2.0, 1.2 and 1.1 ('#ROSBAG V2.0', '#ROSRECORD V1.2', '#ROSRECORD V1.1')",
                 "rosbag2 directory (metadata.yaml, or .db3 storage files)",
                 "rosbag2 sqlite3 storage file ('SQLite format 3', or zstd-compressed .db3.zstd)")
SQLITE_MAGIC = b"SQLite format 3\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def open_container(path: str, *, definitions: Mapping[str, str] | None = None) -> Container:
    """The container reader for ``path``, chosen by what a directory holds or by the file's first bytes.

    ``definitions`` (``{type: .msg text}``) serve containers that look up
    definitions themselves (rosbag2, before the interfaces fastbag ships).
    Raises BagFormatError for a file of no format fastbag knows (naming
    those it does), UnsupportedError for a known format it cannot read yet.
    """
    if os.path.isdir(path):
        from .rosbag2.reader import Rosbag2Reader

        return Rosbag2Reader(path, definitions=definitions)
    try:
        with io.open(path, "rb") as file:  # io.open: ``open`` in this module is fastbag.open
            head = file.read(len(SQLITE_MAGIC))
    except OSError:
        head = b""  # the ROS1 reader says what is wrong with the path
    if head == SQLITE_MAGIC or (head.startswith(ZSTD_MAGIC) and path.endswith(".db3.zstd")):
        from .rosbag2.reader import Rosbag2Reader

        return Rosbag2Reader(path, definitions=definitions)
    from .ros1.reader import Ros1Reader

    # Every file that is not one of the other formats goes to the ROS1 reader, whose errors say
    # what is wrong with a would-be bag (empty, truncated magic, unknown version, not a bag at all).
    return Ros1Reader(path)
