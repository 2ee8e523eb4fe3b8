"""The public :class:`Bag`: open a bag, list its topics, iterate its messages.

Opening reads the index only (see :mod:`fastbag.index`). Messages are yielded
in receive-time order across chunks, as rosbag yields them, filtered by topic
and by time window ``[start, end)``; chunks holding nothing wanted are never
read, and compressed chunks are decompressed ahead on a thread pool.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from .chunks import DEFAULT_CACHE_BYTES, ChunkStore
from .index import BagIndex, Connection, FastbagWarning, read_index
from .records import message_spans
from .source import Source


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

    With ``raw=True``, ``data`` is the serialized message as a ``memoryview``:
    a view of the file mapping where the chunk is uncompressed, of the
    decompressed chunk otherwise (``bytes(m.data)`` copies it).
    """

    __slots__ = ("topic", "time", "data", "connection")

    def __init__(self, topic: str, time: int, data: memoryview, connection: Connection) -> None:
        self.topic = topic
        self.time = time
        self.data = data
        self.connection = connection

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, time={self.time}, {len(self.data)} bytes)"


class Bag:
    """An open ROS bag. Use :func:`fastbag.open`; close it or use it as a context manager.

    ``cache_bytes`` bounds the decompressed chunks kept in memory; ``workers``
    is the number of threads decompressing ahead (default: the CPU count).
    """

    def __init__(self, path: str | os.PathLike[str], *, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 workers: int | None = None) -> None:
        self.path = os.fspath(path)
        self._source = Source(self.path)
        try:
            self._index: BagIndex = read_index(self._source)
        except BaseException:
            self._source.close()
            raise
        if self._index.problems:
            warnings.warn(f"{self.path}: {'; '.join(self._index.problems)}", FastbagWarning, stacklevel=3)
        self._store = ChunkStore(self._source, self._index.chunks, cache_bytes=cache_bytes, workers=workers,
                                 salvaged=self._index.salvaged)
        self.topics: dict[str, TopicInfo] = self._topic_infos()

    # -- what the index says ---------------------------------------------------
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
        for chunk in self._index.chunks:
            counts[chunk.compression] = counts.get(chunk.compression, 0) + 1
        return counts

    @property
    def recovered(self) -> bool:
        """True when the index was rebuilt by scanning (unindexed or damaged bag)."""
        return self._index.recovered

    def _topic_infos(self) -> dict[str, TopicInfo]:
        index = self._index
        by_topic: dict[str, list[int]] = {}
        for rank, connection in enumerate(index.connections):
            by_topic.setdefault(connection.topic, []).append(rank)
        per_conn = np.bincount(index.conn, minlength=len(index.connections))
        infos = {}
        for topic, ranks in by_topic.items():
            first = index.connections[ranks[0]]
            times = index.time[np.isin(index.conn, ranks)]
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
            ranks = [r for r, c in enumerate(index.connections) if c.topic in wanted]
            selected = selected[np.isin(index.conn[lo:hi], ranks)]
        return selected

    def messages(self, topics: Iterable[str] | str | None = None, start: int | None = None,
                 end: int | None = None, *, raw: bool = False) -> Iterator[Message]:
        """Messages in receive-time order, filtered by topics and time window ``[start, end)``.

        ``start`` and ``end`` are int nanoseconds. With ``raw=True`` each
        message's ``data`` is its serialized bytes (see :class:`Message`).
        """
        self._check_open()
        if not raw:
            from .errors import UnsupportedError
            raise UnsupportedError("decoded messages are not available yet; pass raw=True")
        selected = self._select(topics, start, end)
        return self._iter_raw(selected)

    def _iter_raw(self, selected: np.ndarray) -> Iterator[Message]:
        index = self._index
        n = selected.size
        if n == 0:
            return
        chunk_of = index.chunk[selected]
        # Group the selection by chunk (stable, so each group keeps read order):
        # message spans are located once per chunk, vectorized, however the
        # chunks interleave in time; a chunk is held only until its last use.
        by_chunk = np.argsort(chunk_of, kind="stable")
        chunk_ids, group_starts = np.unique(chunk_of[by_chunk], return_index=True)
        group_ends = np.append(group_starts[1:], n)
        groups = {int(c): by_chunk[a:b] for c, a, b in zip(chunk_ids, group_starts, group_ends)}
        last_use = {c: int(pos[-1]) for c, pos in groups.items()}
        first_need = sorted(groups, key=lambda c: int(groups[c][0]))
        payloads = self._store.iter_chunks(first_need)
        starts = np.zeros(n, dtype=np.int64)
        ends = np.zeros(n, dtype=np.int64)
        views: dict[int, memoryview] = {}
        connections = index.connections
        try:
            for k, (c, conn, time) in enumerate(zip(chunk_of.tolist(), index.conn[selected].tolist(),
                                                    index.time[selected].tolist())):
                view = views.get(c)
                if view is None:
                    while c not in views:
                        got, payload = next(payloads)
                        pos = groups[got]
                        s, length = message_spans(payload, index.offset[selected[pos]], path=self.path,
                                                  chunk_position=index.chunks[got].position)
                        starts[pos] = s
                        ends[pos] = s + length
                        views[got] = memoryview(payload)
                    view = views[c]
                connection = connections[conn]
                yield Message(connection.topic, time, view[starts[k]:ends[k]], connection)
                if last_use[c] == k:
                    del views[c]
        finally:
            payloads.close()  # type: ignore[attr-defined]

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
        self._source.close()

    def __enter__(self) -> "Bag":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.message_count} messages, {len(self.topics)} topics"
        return f"<fastbag.Bag {self.path!r} v{self.version}, {state}>"


def open(path: str | os.PathLike[str], **options: object) -> Bag:  # noqa: A001 - mirrors builtins.open
    """Open a ROS bag for reading; see :class:`Bag` for ``options``."""
    return Bag(path, **options)  # type: ignore[arg-type]
