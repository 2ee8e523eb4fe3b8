"""The rosbag2 container: a recording directory (or one ``.db3``) behind the :class:`~fastbag.container.Container`
interface.

A directory holds ``metadata.yaml`` and its storage files, read in the
order the metadata lists them (split bags read as one). Without
``metadata.yaml`` (a recording still running) the ``.db3`` files present are
read in name order, with a warning.

Topics come from each storage file's ``topics`` table, matched across files
by name, type and serialization format: the database is the truth where
``metadata.yaml`` disagrees (its QoS or type names differ in real bags).
(MCAP storage is read by :mod:`fastbag.rosbag2.mcap_storage`.)

Opening reads no message row: the topics and definitions, and per file
``count(*)``, ``min(timestamp)`` and ``max(timestamp)``, which SQLite answers
from rosbag2's ``timestamp_idx`` (a file without one, or one these queries
fail on, is scanned at open). The per-message index (every row's id, topic
id, timestamp and blob length: one scan per file, see
:meth:`~fastbag.rosbag2.sqlite.Db3.rows`) is built on first use. The first
topic read builds that topic's alone where every file's pages are read
(:meth:`Rosbag2Reader.topic_index`): the ``messages`` table has no index on
``topic_id``, so the walk still parses every row, but the other topics' rows
are neither written down nor indexed (a sparse topic's fresh read: ~1.6x
faster). A second topic, and every read through SQLite, take every topic's
rows at once. The numbers
SQLite returns as text are parsed, and the rows cut into chunks, by Numba
kernels (:mod:`fastbag.rosbag2.kernels`).

How rows map onto the interface: a *chunk* is a batch of one topic's rows
of one file, in id order, of at most :data:`CHUNK_BYTES` of blobs; its
payload is their blobs concatenated, fetched with one query (see
:mod:`fastbag.rosbag2.sqlite`). A message's ``offset`` in the index is its
number within its chunk; :meth:`Rosbag2Reader.payload_spans` turns numbers
into ``(start, length)`` from the lengths the index read (or, for
per-message zstd, from the lengths found when the chunk was decompressed).
A chunk's ``position`` is its number in the bag: chunks are numbered in the
order indexes first meet them (a topic's own index, then the whole one, which
keeps the numbers a topic's index gave). No chunk lies in place in
a mapped file: their compression is ``sqlite3`` (or ``sqlite3+zstd``), never
``none``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..container import NO_MD5, BagIndex, Connection, LazyIndexContainer, transient_local
from ..errors import OUT_OF_RESOURCES, BagFormatError, FastbagError, FastbagWarning, UnsupportedError
from ..io.chunks import DEFAULT_CACHE_BYTES, ChunkStore, ChunkTable
from ..io.codecs import ZSTD_MAGIC
from ..io.forks import new_locks_in_children
from ..io.gather import item_positions
from ..io.prefix import Reach
from ..io.scratch import TemporaryFolderError
from ..io.source import Source
from ..io.startup import by_kernel
from ..msg.msgdef import EMPTY_MD5, definition_code
from .compression import FrameError, decompress_frames, file_compression
from .definitions import resolve_definition, stores_definition
from .metadata import BagMetadata, parse_metadata, read_metadata, with_recorded_topics
from .sqlite import NUMPY_UP_TO, Db3

#: Blob bytes per chunk: large enough that a query's fixed cost vanishes, small enough that chunks
#: fetch in parallel and the cache holds several.
CHUNK_BYTES = 4 << 20
#: Reads of at most DIRECT_ROWS messages and DIRECT_BYTES bytes fetch their rows by id (see payloads_of).
DIRECT_ROWS, DIRECT_BYTES = 256, 16 << 20
#: The chunk compression names rosbag2 chunks report (Bag.compression counts them).
PLAIN, ZSTD_MESSAGES = "sqlite3", "sqlite3+zstd"


def chunk_rows(rank: np.ndarray, length: np.ndarray, segment: np.ndarray, ranks: int, chunk_bytes: int
               ) -> tuple[np.ndarray, ...]:
    """One file's rows cut into chunks, as :func:`fastbag.rosbag2.kernels.chunk_rows` (numbered from 0) cuts
    them: by that kernel, or, while Numba is not loaded and the rows are few (see NUMPY_UP_TO), by NumPy."""
    if by_kernel(rank.size, NUMPY_UP_TO):
        from .kernels import chunk_rows as by_counting_sort

        return by_counting_sort(rank, length, segment, ranks, chunk_bytes, 0)
    n = rank.size
    order = np.argsort(rank, kind="stable")
    r, ln = rank[order], length[order]
    before = np.cumsum(ln) - ln  # blob bytes before each row, all connections'
    new_connection = np.ones(n, dtype=bool)
    new_connection[1:] = r[1:] != r[:-1]
    first_of_connection = np.maximum.accumulate(np.where(new_connection, np.arange(n), 0)) if n else order
    part = (before - before[first_of_connection]) // chunk_bytes
    new_chunk = new_connection.copy()
    new_chunk[1:] |= part[1:] != part[:-1]
    if segment.size:
        new_chunk[1:] |= segment[order][1:] != segment[order][:-1]
    starts = np.flatnonzero(new_chunk)
    local = np.cumsum(new_chunk) - 1  # each row's chunk, rows in order
    chunk_of, number = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int64)
    chunk_of[order] = local
    number[order] = np.arange(n) - starts[local]
    size = np.add.reduceat(ln, starts) if n else np.zeros(0, dtype=np.int64)
    return order, chunk_of, number, starts, np.diff(np.append(starts, n)), size.astype(np.int64)


class StorageSource(Source):
    """The recording as the Bag sees it: a path and a size in bytes (its storage files'), no mapping.

    rosbag2 chunks never lie in place in a file (see the module docstring),
    so ``array`` stays empty.
    """

    what = "storage"

    def __init__(self, path: str, size: int) -> None:  # noqa: D107 - nothing to map
        self.path = path
        self.size = size
        self.array = np.empty(0, dtype=np.uint8)
        self._mmap = None
        self._closed = False

    def close(self) -> None:
        self._closed = True


@dataclass(frozen=True)
class _Chunks:
    """Every chunk's rows: per chunk (file, topic id in that file, first and last row id, count, blob bytes)
    and, in chunk order, every message's row id and blob length."""

    file: np.ndarray
    topic_id: np.ndarray
    first_id: np.ndarray
    last_id: np.ndarray
    first: np.ndarray      # position of the chunk's first message in ``ids``/``lengths``
    count: np.ndarray
    size: np.ndarray
    ids: np.ndarray
    lengths: np.ndarray

    @classmethod
    def empty(cls) -> "_Chunks":
        return cls(*(np.zeros(0, dtype=np.int64) for _ in dataclasses.fields(cls)))

    @classmethod
    def joined(cls, parts: list["_Chunks"]) -> "_Chunks":
        """The chunks of ``parts``, one after another (each part's ``first`` counting from the start of its
        own ``ids``): one concatenation of each column, however many parts (a split recording's files)."""
        parts = [part for part in parts if part.file.size] or parts[:1]  # (dtypes as found: no empty's int64)
        shift = np.cumsum([0] + [part.ids.size for part in parts[:-1]])
        parts = [dataclasses.replace(part, first=part.first + int(k)) for part, k in zip(parts, shift)]
        return cls(*(np.concatenate([getattr(part, f.name) for part in parts]) for f in dataclasses.fields(cls)))

    def table(self, per_message: bool) -> ChunkTable:
        """The ChunkTable of these chunks: position k is chunk k; none lies in place in a file."""
        n = self.file.size
        return ChunkTable.from_columns(np.arange(n), np.zeros(n), self.size, self.size,
                                       (ZSTD_MESSAGES if per_message else PLAIN,) * n)


class Rosbag2Reader(LazyIndexContainer):
    """An open rosbag2 recording: its metadata, its storage files and their index.

    ``definitions`` (``{"pkg/Type" or "pkg/msg/Type": text}``) are used for
    types the storage carries no definition of, before the interface
    definitions shipped with fastbag.
    """

    format = "rosbag2"

    def __init__(self, path: str | os.PathLike[str], *, definitions: Mapping[str, str] | None = None,
                 metadata: BagMetadata | None = None) -> None:
        """Open ``path`` (a directory or one storage file); ``metadata`` is its metadata.yaml already read
        (by :func:`fastbag.bag.open_container`: the file is read once)."""
        path = os.fspath(path)
        self.bag_metadata: BagMetadata | None = metadata  # metadata.yaml (``metadata`` is MCAP-style records)
        self.files: list[Db3] = []
        self._spans: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per-message zstd: spans found on decompression
        self._spans_lock = threading.Lock()
        self._index: BagIndex | None = None
        self._index_lock = threading.Lock()
        # Every chunk numbered so far, by topic indexes (topic_index) and the whole index: each (file,
        # connection rank) cut into chunks once, its chunks keeping their numbers in every index after.
        self._chunks = _Chunks.empty()
        self._table = ChunkTable.from_columns([], [], [], [], ())
        # Chunks numbered since _chunks and _table were last made (see _joined_chunks), and the count of all
        self._unjoined: list[_Chunks] = []
        self._chunk_count = 0
        self._numbered: dict[tuple[int, int], np.ndarray] = {}  # (file, rank) -> its chunks' numbers
        self._numbering = threading.Lock()
        new_locks_in_children(self, "_spans_lock", "_index_lock", "_numbering")
        self._walked_for_topic = False  # see topic_index
        self._opened = False
        self._problems: list[str] = []
        self._counted: dict[int, int] = {}  # rows per file as opening counted them (see _cheap_totals)
        try:
            storage = self._storage_files(path, self._problems)
            self._open_files(storage, self._problems)
            self._read_topics(definitions or {}, self._problems)
            # Without metadata.yaml (a lone file, a recording cut short): what a newer .db3 stores of it
            stored = None if self.bag_metadata is not None else self._stored_metadata()
            described = self.bag_metadata or stored
            self._version = str(described.version) if described is not None else "unknown"
            if described is not None:
                described.check_compression_format(path)
            # (None: no metadata says; the first message's bytes will, when asked: see _per_message)
            self._said_per_message = described.per_message if described is not None else None
            self._totals = self._cheap_totals()
            if self._totals is None:  # no timestamp index, or damage: the scan says what is wrong now
                self._index = self._load_index()
        except BaseException:
            self.close()
            raise
        self.source = StorageSource(path, sum(f.size for f in self.files))
        self._opened = True

    #: rosbag2 compresses per file or per message, never per chunk (the chunks here are batches of rows).
    compression_unit = "files"

    @property
    def chunks_of_one_connection(self) -> bool:  # type: ignore[override]
        """A chunk is a batch of one topic's rows (see the module docstring). Said only where every file's
        rows were read from its pages (whose change counter notices a file written since): iterated by
        connection, the batches fetched through SQLite could come from its cache of an immutable file."""
        return all(db.read_from_pages for db in self.files)

    def compression_counts(self) -> dict[str, int]:
        """Storage files per compression: ``zstd`` for a ``.db3.zstd`` (FILE mode) or a file of zstd messages
        (MESSAGE mode), else ``none``."""
        return file_compression((db.compressed or self._per_message, db.size, db.decompressed_size)
                                for db in self.files)[0]

    def compression_sizes(self) -> dict[str, tuple[int, int]]:
        """The storage files' sizes, stored and decompressed (``.db3.zstd``, decompressed at open), per
        compression; none known for files compressed per message (a message's size once decompressed is known
        only by decompressing it)."""
        if self._per_message:
            return {}
        return file_compression((db.compressed, db.size, db.decompressed_size) for db in self.files)[1]

    # What the Bag needs at open, answered without the index (see LazyIndexContainer).
    @property
    def recovered(self) -> bool:
        return False

    @property
    def version(self) -> str:
        return self._version

    @property
    def message_count(self) -> int:
        """Messages in every storage file: ``count(*)`` before the index is built, then the index's (rows
        the index leaves out, naming no known topic or damaged, are counted until then)."""
        if self._index is None and self._totals is not None:
            return self._totals[0]
        return self.index.message_count

    @property
    def time_range(self) -> tuple[int | None, int | None]:
        if self._index is None and self._totals is not None:
            return self._totals[1], self._totals[2]
        return super().time_range

    # -- opening ------------------------------------------------------------------
    def _storage_files(self, path: str, problems: list[str]) -> list[tuple[str, bool]]:
        """``(path, file-compressed)`` of every storage file, in order."""
        if not os.path.isdir(path):
            self.bag_metadata = None
            return [(path, _is_zstd(path, path.endswith(".zstd")))]
        yaml_path = os.path.join(path, "metadata.yaml")
        if not os.path.exists(yaml_path):
            found = sorted(n for n in os.listdir(path) if n.endswith((".db3", ".db3.zstd", ".mcap", ".mcap.zstd")))
            if not found:
                # A folder of ROS1 bags (or of one's splits) is no recording: each bag opens by itself.
                bags = sorted(n for n in os.listdir(path) if n.endswith(".bag"))
                listed = f"; it holds ROS1 bags: open each ({', '.join(bags[:5])}{', ...' if len(bags) > 5 else ''})" \
                    if bags else ""
                raise BagFormatError(f"directory has neither metadata.yaml nor any .db3 or .mcap storage file, so "
                                     f"it is no rosbag2 recording{listed}", path=path)
            mcap = [n for n in found if n.endswith((".mcap", ".mcap.zstd"))]
            if mcap and len(mcap) < len(found):  # two recordings' files, or a converted copy beside its source
                raise UnsupportedError(f"directory holds both sqlite3 (.db3) and MCAP (.mcap) storage files and no "
                                       "metadata.yaml to say which make the recording: open one of the files, or "
                                       f"move the others out ({path}: {', '.join(found)})")
            problems.append(no_metadata_problem(path, found))
            self._refuse_mcap(found, path)
            return [(os.path.join(path, n), _is_zstd(os.path.join(path, n), n.endswith(".zstd")))
                    for n in _natural_order(found)]
        meta = self.bag_metadata = self.bag_metadata or read_metadata(yaml_path)
        self._refuse_mcap(meta.relative_file_paths, path, meta.storage_identifier)
        if meta.storage_identifier not in ("sqlite3", ""):
            raise UnsupportedError(f"rosbag2 storage {meta.storage_identifier!r} is not supported "
                                   f"(known: sqlite3) ({yaml_path})")
        mode = meta.compression_mode
        if mode not in ("", "NONE", "FILE", "MESSAGE"):
            raise UnsupportedError(f"rosbag2 compression mode {meta.compression_mode!r} is not supported "
                                   f"(known: FILE, MESSAGE) ({yaml_path})")
        meta.check_compression_format(yaml_path)
        if not meta.relative_file_paths:
            raise BagFormatError("metadata.yaml lists no storage files (relative_file_paths is empty)",
                                 path=yaml_path)
        files = []
        for relative in meta.relative_file_paths:
            full = os.path.normpath(os.path.join(path, relative))
            if not os.path.exists(full) and mode == "FILE" and os.path.exists(full + ".zstd"):
                full += ".zstd"  # older writers list the name before compression
            files.append((full, _is_zstd(full, relative.endswith(".zstd"))))
        return files

    @staticmethod
    def _refuse_mcap(names: tuple[str, ...] | list[str], path: str, storage: str = "") -> None:
        if storage == "mcap" or any(n.endswith((".mcap", ".mcap.zstd")) for n in names):
            raise UnsupportedError(f"rosbag2 MCAP storage is read by fastbag.rosbag2.mcap_storage: open the "
                                   f"recording with fastbag.open ({path})")

    def _open_files(self, storage: list[tuple[str, bool]], problems: list[str]) -> None:
        """Open every storage file; one that is absent or damaged is left out with a problem, unless all are."""
        errors: list[FastbagError] = []
        for full, compressed in storage:
            if not os.path.exists(full):
                error: FastbagError = BagFormatError("storage file named in metadata.yaml is absent", path=full)
            else:
                try:
                    self.files.append(Db3(full, compressed=compressed))
                    problems.extend(self.files[-1].problems)
                    continue
                except FastbagError as exc:
                    error = exc
                except OSError as exc:
                    # the process's limit or the temporary folder: the file is not lost, nothing is
                    if exc.errno in OUT_OF_RESOURCES or isinstance(exc, TemporaryFolderError):
                        raise
                    where = f" ({exc.filename})" if exc.filename and os.fspath(exc.filename) != full else ""
                    error = BagFormatError(f"storage file cannot be read: {exc.strerror or exc}{where}", path=full)
            errors.append(error)
            problems.append(str(error))
        if errors and not self.files:
            raise errors[0]

    # -- the index ------------------------------------------------------------------
    def _read_topics(self, definitions: Mapping[str, str], problems: list[str]) -> None:
        """Connections from every file's ``topics`` table (matched across files by name, type, format and
        stored definition), with their definitions; a file whose tables cannot be read is left out, unless
        all are. Rows of one file with the same name, type and format (rosbags' writer stores a topic's
        publishers of other QoS so) are connections of their own, each matched to the same one of every other
        file. A file that stores a type's definition otherwise than the files before it (a split recording
        whose type changed) gets connections of its own, decoded with its text: the topic then has two
        formats, as in a split MCAP recording."""
        connections: list[Connection] = []
        by_key: dict[tuple[str, str, str, int, int], int] = {}
        # type -> the distinct stored (encoding, text)s, in the order files give them (comment-blind)
        variants: dict[str, list[tuple[str, str]]] = {}
        chosen: list[tuple[str, str] | None] = []  # per connection: its variant of the stored definition
        self._per_file: list[tuple[int, list, list[int]]] = []  # (file, its topics, their connection ranks)
        failed: list[FastbagError] = []
        for k, db in enumerate(self.files):
            try:
                topics = db.topics()
                own = {t: d for t, d in db.definitions().items() if stores_definition(*d)}
            except FastbagError as exc:
                failed.append(exc)
                problems.append(str(exc))
                continue
            variant_of: dict[str, int] = {}  # type -> which of its variants this file stores (0: none stored)
            for t, d in own.items():
                known = variants.setdefault(t, [])
                code = definition_code(d[1])
                same = [j for j, v in enumerate(known) if definition_code(v[1]) == code]
                if not same:
                    known.append(d)
                variant_of[t] = same[0] if same else len(known) - 1
            ranks = []
            in_file: dict[tuple[str, str, str], int] = {}  # rows of each name, type and format so far
            for topic in topics:
                same_topic = (topic.name, topic.type, topic.serialization_format)
                in_file[same_topic] = in_file.get(same_topic, 0) + 1
                variant = variant_of.get(topic.type, 0)
                key = same_topic + (in_file[same_topic], variant)
                if key not in by_key:
                    by_key[key] = len(connections)
                    connections.append(Connection(len(connections), topic.name, topic.type, NO_MD5, "",
                                                  encoding=topic.serialization_format, schema_encoding="",
                                                  latching=transient_local(topic.offered_qos_profiles),
                                                  offered_qos_profiles=topic.offered_qos_profiles,
                                                  type_description_hash=topic.type_description_hash))
                    chosen.append(variants[topic.type][variant] if topic.type in variant_of else None)
                ranks.append(by_key[key])
            self._per_file.append((k, topics, ranks))
        if failed and not self._per_file:  # nothing intact to read: the first file's error says why
            raise failed[0]
        stored = {t: v[0] for t, v in variants.items()}
        # (QoS and type hashes a writer kept in metadata.yaml alone: rosbags' writer before rosbag2 v9 tables)
        self._connections = with_recorded_topics(
            [self._with_definition(c, stored if d is None else {**stored, c.msgtype: d}, definitions, problems)
             for c, d in zip(connections, chosen)], self.bag_metadata)

    def _cheap_totals(self) -> tuple[int, int | None, int | None] | None:
        """(messages, first time, last time) over every file from indexed queries, or None where a file has
        no index on ``timestamp`` or a query fails (the index is built at open then, and says why).

        ``count(*)`` counts the cells of the smallest index's pages and ``min``/``max`` walk one path down
        ``timestamp_idx``: no message row is read. (metadata.yaml's counts would be cheaper still, but
        only the database is sure to be right; see the module docstring.)
        """
        total, first, last = 0, [], []
        for k, _, _ in self._per_file:
            db = self.files[k]
            try:
                if not db.timestamp_indexed():
                    return None
                count, low, high = db.totals()
            except FastbagError:
                return None
            self._counted[k] = count
            total += count
            first += [low] if low is not None else []
            last += [high] if high is not None else []
        return total, min(first, default=None), max(last, default=None)

    @property
    def index(self) -> BagIndex:  # type: ignore[override]
        """Every message's time, connection, chunk and number in its chunk: one scan of each file's
        ``messages`` table, on first use (opening reads none of it)."""
        if self._index is None:
            with self._index_lock:
                if self._index is None:
                    known = len(self._problems)
                    index = self._load_index()
                    self._index = index
                    if len(self._problems) > known and self._opened:
                        warnings.warn(f"{self.path}: {'; '.join(self._problems[known:])}", FastbagWarning,
                                      stacklevel=3)
        return self._index

    def topic_index(self, ranks: Sequence[int]) -> BagIndex | None:
        """The messages of the connections at ``ranks`` alone, from every file's pages (see
        :meth:`~fastbag.rosbag2.sqlite.Db3.topic_rows`: every row is walked, only these topics' are written
        down and indexed). Their chunks keep their numbers in the whole index, if it is built later.

        None once the whole index is built, where a file cannot be read from its pages (being written, or
        not as SQLite writes it: the whole index then reads it, and says what is wrong), and for every
        topic after the first: each walk reads every row, so a second topic builds the whole index, and
        reading many topics (an export, a dataset) walks the table twice at most, never once per topic."""
        with self._numbering:
            if self._index is not None or self._walked_for_topic:
                return None
            self._walked_for_topic = True
        wanted = set(ranks)
        per_file = []
        for k, topics, file_ranks in self._per_file:
            rows = self.files[k].topic_rows([t.id for t, r in zip(topics, file_ranks) if r in wanted])
            if rows is None:
                return None
            per_file.append((k, topics, file_ranks, rows))
        return self._index_rows(self._version, self._connections, per_file, self._problems)

    def _load_index(self) -> BagIndex:
        """Rows of every file (ids, topic ids, timestamps, blob lengths; no blob) into the index."""
        per_file = []
        failed: list[FastbagError] = []
        for k, topics, ranks in self._per_file:
            db = self.files[k]
            try:
                rows = db.rows()
            except FastbagError as exc:
                failed.append(exc)
                self._problems.append(str(exc))
                continue
            self._problems.extend(p for p in db.problems if p not in self._problems)
            counted = self._counted.get(k)
            if counted is not None and counted != rows.id.size and not db.problems:
                # The timestamp index and the table disagree: one of them is damaged (pages swapped, say),
                # though SQLite reported nothing.
                self._problems.append(f"{os.path.basename(db.path)}: the messages table is damaged: its timestamp "
                                      f"index counts {counted} rows, the table yields {rows.id.size}; reading those")
            per_file.append((k, topics, ranks, rows))
        if failed and not per_file:
            raise failed[0]
        return self._index_rows(self._version, self._connections, per_file, self._problems)

    def _stored_metadata(self) -> BagMetadata | None:
        """Without metadata.yaml: the metadata a newer .db3 stores in its ``metadata`` table (version,
        compression), else None."""
        for db in self.files:
            try:
                text = db.metadata_text()
                if text:
                    return parse_metadata(text, db.path)
            except FastbagError:
                continue
        return None

    @property
    def _per_message(self) -> bool:
        """Whether each message is a zstd frame (MESSAGE compression): as the metadata says, else as the first
        message's bytes do, asked on first use (opening reads no blob)."""
        if self._said_per_message is None:
            self._said_per_message = self._messages_look_zstd()
        return self._said_per_message

    def _messages_look_zstd(self) -> bool:
        """Without any metadata (a lone .db3 of rosbag2 before it stored its ``metadata`` table, or one that
        lost it): whether the first CDR message of a file starts with zstd's frame magic, as each does in
        MESSAGE compression. CDR data cannot (its representation ids are small), so the bytes tell."""
        for db in self.files:
            try:
                rows = db.query("SELECT substr(m.data, 1, 4), t.serialization_format FROM messages m "
                                "JOIN topics t ON t.id = m.topic_id LIMIT 1", what="first message")
            except FastbagError:
                continue
            if rows:
                head, encoding = rows[0]
                return isinstance(head, bytes) and head == ZSTD_MAGIC and db._text(encoding) == "cdr"
        return False

    @staticmethod
    def _with_definition(connection: Connection, stored: dict[str, tuple[str, str]],
                         definitions: Mapping[str, str], problems: list[str]) -> Connection:
        encoding, text, note = resolve_definition(connection.msgtype, stored, definitions)
        if note and note not in problems:
            problems.append(note)
        # A definition found but empty is a type without fields (the Bag tells it from one that was lost).
        md5 = EMPTY_MD5 if encoding and not text.strip() else NO_MD5
        return dataclasses.replace(connection, definition=text, schema_encoding=encoding, md5sum=md5)

    @staticmethod
    def _ranks(topics: list, ranks: list[int], topic_id: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Each row's connection rank (int32) from its topic id, and None when every id is in the file's
        ``topics`` table, else the mask of the rows whose id is (the others' rank is meaningless)."""
        ids = np.array([t.id for t in topics], dtype=np.int64)
        if not ids.size:  # (no rows either, in a recording of no topics: nothing is missing)
            return np.zeros(topic_id.size, dtype=np.int32), (np.zeros(topic_id.size, dtype=bool) if topic_id.size
                                                             else None)
        if 0 <= ids.min() and ids.max() < 1 << 20:  # small ids, as recorders number them: one take
            table = np.full(int(ids.max()) + 2, -1, dtype=np.int32)  # the last entry: any id out of range
            table[ids] = ranks
            inside = topic_id.size == 0 or (topic_id.min() >= 0 and topic_id.max() <= ids.max())
            rank = table[topic_id] if inside else table[np.clip(topic_id, -1, ids.max() + 1)]  # (clip: a copy)
        else:
            sort = np.argsort(ids)
            where = np.minimum(np.searchsorted(ids[sort], topic_id), ids.size - 1)
            rank = np.where(ids[sort][where] == topic_id, np.array(ranks, dtype=np.int32)[sort][where], -1)
        known = rank >= 0
        return rank, (None if known.all() else known)

    def _index_rows(self, version: str, connections: list[Connection], per_file: list, problems: list[str]
                    ) -> BagIndex:
        """Chunks and the read-order table from every file's rows (see the module docstring): every file's,
        or some topics' alone (:meth:`topic_index`)."""
        times, conns, chunk_of, ordinal = [], [], [], []
        for k, topics, ranks, rows in per_file:
            rank, known = self._ranks(topics, ranks, rows.topic_id)
            segment = rows.segment if rows.segment is not None else np.zeros(0, dtype=np.int64)
            ids, topic, stamp, length = rows.id, rows.topic_id, rows.timestamp, rows.length
            if known is not None:
                problems.append(f"{os.path.basename(self.files[k].path)}: {int((~known).sum())} messages name a "
                                "topic id missing from the topics table; they are left out")
                ids, topic, stamp, length, rank = (a[known] for a in (ids, topic, stamp, length, rank))
                segment = segment[known] if segment.size else segment
            if ids.size > 1 and not bool((ids[1:] > ids[:-1]).all()):  # SQLite scans a table in id order
                by_id = np.argsort(ids, kind="stable")
                ids, topic, stamp, length, rank = (a[by_id] for a in (ids, topic, stamp, length, rank))
                segment = segment[by_id] if segment.size else segment
            # Chunks: each topic's rows in id order, cut every CHUNK_BYTES of blobs, never across damaged
            # pages (segments).
            order, chunk, number, starts, count, size = chunk_rows(rank, length, segment, len(connections),
                                                                   CHUNK_BYTES)
            sorted_ids = ids[order]
            found = _Chunks(np.full(starts.size, k, dtype=np.int64), topic[order[starts]], sorted_ids[starts],
                            sorted_ids[starts + count - 1], starts, count, size, sorted_ids, length[order])
            numbers = self._number_chunks(k, rank[order[starts]], found)
            if numbers.size and not np.array_equal(numbers, numbers[0] + np.arange(numbers.size)):
                chunk = numbers[chunk]  # some chunks numbered before (by a topic's index)
            elif numbers.size and numbers[0]:
                chunk = chunk + np.int32(numbers[0])
            chunk_of.append(chunk)
            ordinal.append(number)
            times.append(stamp)
            conns.append(rank)

        def cat(xs: list[np.ndarray], dtype: type = np.int64) -> np.ndarray:
            joined = xs[0] if len(xs) == 1 else np.concatenate(xs) if xs else np.zeros(0, dtype)
            return joined.astype(dtype, copy=False)

        time, conn = cat(times), cat(conns, np.int32)
        # Read order: by timestamp, ties in file order, then by row id (what rosbag2 and rosbags yield). Rows
        # are in (file, id) order already: a stable sort by time keeps it, and runs in near-linear time on
        # the nearly sorted times of a recording.
        in_order = time.size < 2 or bool((time[1:] >= time[:-1]).all())  # one recorder's single file, often
        read_order = slice(None) if in_order else np.argsort(time, kind="stable")
        return BagIndex(version, connections, self._joined_chunks(), time[read_order], conn[read_order],
                        cat(chunk_of, np.int32)[read_order], cat(ordinal)[read_order], problems=problems)

    def _number_chunks(self, k: int, rank: np.ndarray, found: _Chunks) -> np.ndarray:
        """The numbers of chunks ``found`` (file ``k``'s, of connection ``rank`` each, grouped by rank): those
        of a (file, rank) numbered before by an index of its topic, where it cut them alike; the next free
        ones for the others, which join the chunk table."""
        with self._numbering:
            first = self._chunk_count
            numbers = np.arange(first, first + rank.size, dtype=np.int64)
            fresh = np.ones(rank.size, dtype=bool)
            groups, begin = np.unique(rank, return_index=True)
            bounds = np.append(begin, rank.size)
            for r, a, b in zip(groups.tolist(), bounds[:-1].tolist(), bounds[1:].tolist()):
                before = self._numbered.get((k, r))
                if before is None or before.size != b - a:
                    continue
                # (joined already, but where another thread's index numbers them now: joining at every file
                # would copy the table per file again)
                known = self._chunks if int(before.max()) < self._chunks.file.size else self._join()
                if all(np.array_equal(getattr(known, name)[before], getattr(found, name)[a:b])
                       for name in ("first_id", "last_id", "count")):
                    numbers[a:b] = before
                    fresh[a:b] = False
            if not fresh.all():
                kept = np.flatnonzero(fresh)
                numbers[kept] = first + np.arange(kept.size)
                rows = item_positions(found.first[kept], found.count[kept], 1)  # their messages, in chunk order
                found = _Chunks(found.file[kept], found.topic_id[kept], found.first_id[kept], found.last_id[kept],
                                np.cumsum(found.count[kept]) - found.count[kept], found.count[kept],
                                found.size[kept], found.ids[rows], found.lengths[rows])
            if found.file.size:  # (joined when an index is made: joining each file's was O(files x rows))
                self._unjoined.append(found)
                self._chunk_count += found.file.size
            for r, a, b in zip(groups.tolist(), bounds[:-1].tolist(), bounds[1:].tolist()):
                self._numbered.setdefault((k, r), numbers[a:b])
            return numbers

    def _joined_chunks(self) -> ChunkTable:
        """The chunk table of every chunk numbered so far (an index's: made after its rows are numbered)."""
        with self._numbering:
            self._join()
            return self._table

    def _join(self) -> _Chunks:
        """Every chunk numbered so far, chunks numbered since the last call joined to the others (and to the
        table) at once. Under ``_numbering``."""
        if self._unjoined:
            self._chunks = _Chunks.joined([self._chunks, *self._unjoined])
            self._table = self._chunks.table(self._per_message)
            self._unjoined = []
        return self._chunks

    # -- payloads ---------------------------------------------------------------------
    def chunk_store(self, *, cache_bytes: int = DEFAULT_CACHE_BYTES, workers: int | None = None,
                    checksums: bool = True) -> ChunkStore:
        """A store whose payload for a chunk is its rows' blobs, fetched with one query (decompressed for
        per-message zstd) on the worker pool. (Rows carry no checksums: ``checksums`` changes nothing.)"""
        return _RowStore(self, cache_bytes=cache_bytes, workers=workers)

    def fetch(self, k: int) -> np.ndarray:
        """Chunk ``k``'s payload: its rows' blobs concatenated (each decompressed in per-message zstd)."""
        c = self._chunks
        first, count = int(c.first[k]), int(c.count[k])
        ids, lengths = c.ids[first:first + count], c.lengths[first:first + count]
        db = self.files[int(c.file[k])]
        data = db.blobs(int(c.topic_id[k]), int(c.first_id[k]), int(c.last_id[k]), ids, int(lengths.sum()))
        if len(data) != int(lengths.sum()):
            raise BagFormatError(f"sqlite3 rows of topic id {int(c.topic_id[k])} (ids {int(c.first_id[k])} to "
                                 f"{int(c.last_id[k])}) hold {len(data)} bytes where {int(lengths.sum())} were "
                                 "indexed: the file is damaged or changed after it was opened", path=db.path,
                                 record="sqlite3")
        if self._table.compression[k] != ZSTD_MESSAGES:
            return np.frombuffer(data, dtype=np.uint8)
        return self._decompress_messages(k, data, ids, lengths, db.path)

    def _decompress_messages(self, k: int, data: bytes, ids: np.ndarray, lengths: np.ndarray,
                             path: str) -> np.ndarray:
        """Per-message zstd: every row's frame of chunk ``k`` decompressed; their spans kept for payload_spans."""
        payload, starts, sizes = _rows_decompressed(data, np.cumsum(lengths) - lengths, lengths, ids,
                                                    lambda _: path)
        with self._spans_lock:
            self._spans[k] = (starts, sizes)
        return payload

    direct_read_max = DIRECT_ROWS

    def payloads_of(self, index: BagIndex, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """A few messages' rows fetched by id (a short time window, a dataset's sample). Through their chunks,
        each topic's chunk cost a fetch of all its rows' blobs, a pass over its lengths and a round trip to
        the worker pool: a window of 4 messages on 4 topics took 0.6 ms, where rosbags' query takes 0.02."""
        c = self._chunks  # (once: a join meanwhile replaces it, numbering every chunk as before)
        chunks = index.chunk[selected]
        number = index.offset[selected]
        if int(chunks.max()) >= c.file.size or int(number.min()) < 0 or bool((number >= c.count[chunks]).any()):
            return None  # (chunks numbered since the last join, or a fault the chunks' read names)
        rows = c.first[chunks] + number
        ids, lengths, files = c.ids[rows], c.lengths[rows], c.file[chunks]
        if int(lengths.sum()) > DIRECT_BYTES:
            return None
        if int(files.min()) == int(files.max()) and bool((ids[1:] > ids[:-1]).all()):  # (a window in one file)
            data = self.files[int(files[0])].row_blobs(ids, set(c.topic_id[chunks].tolist()))
            if data is None or len(data) != int(lengths.sum()):
                return None
            buf, starts = np.frombuffer(data, dtype=np.uint8), np.cumsum(lengths) - lengths
        else:
            buf, starts = self._row_blobs_of_files(files, ids, lengths, c.topic_id[chunks])
            if buf is None:
                return None
        if not self._per_message:
            return buf, starts, lengths
        return _rows_decompressed(buf, starts, lengths, ids, lambda i: self.files[int(files[i])].path)

    def _row_blobs_of_files(self, files: np.ndarray, ids: np.ndarray, lengths: np.ndarray, topic_ids: np.ndarray
                            ) -> tuple[np.ndarray | None, np.ndarray]:
        """(buffer, starts) of rows ``ids`` of storage files ``files`` (and topics ``topic_ids``: each row's), in
        any order, a row perhaps twice (a dataset's sample may take one twice): each file's rows fetched once,
        in id order."""
        starts = np.empty(ids.size, dtype=np.int64)
        parts: list[bytes] = []
        size = 0
        for f in np.unique(files).tolist():
            mine = np.flatnonzero(files == f)
            wanted, inverse = np.unique(ids[mine], return_inverse=True)
            own = np.zeros(wanted.size, dtype=np.int64)
            own[inverse] = lengths[mine]
            data = self.files[f].row_blobs(wanted, set(topic_ids[mine].tolist()))
            if data is None or len(data) != int(own.sum()):
                return None, starts
            starts[mine] = (size + np.cumsum(own) - own)[inverse]
            parts.append(bytes(data))
            size += len(data)
        return np.frombuffer(b"".join(parts), dtype=np.uint8), starts

    def _chunk_spans(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) of chunk ``k``'s messages in its payload, by their number in the chunk."""
        if self._table.compression[k] == ZSTD_MESSAGES:
            with self._spans_lock:
                found = self._spans.get(k)
            if found is None:
                raise BagFormatError(f"chunk {k}'s messages were located before it was decompressed",
                                     path=self.path, record="sqlite3")
            return found
        c = self._chunks
        lengths = c.lengths[int(c.first[k]):int(c.first[k]) + int(c.count[k])]
        return np.cumsum(lengths) - lengths, lengths

    def payload_spans(self, buf: np.ndarray, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, chunk: np.ndarray,
                      conn: np.ndarray, time: np.ndarray, *, kernel: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Spans of messages by their number in the chunk (``at``: see the module docstring)."""
        starts = np.zeros(at.size, dtype=np.int64)
        lengths = np.zeros(at.size, dtype=np.int64)
        chunks = np.unique(chunk)
        for k in chunks.tolist():
            mine = np.flatnonzero(chunk == k) if chunks.size > 1 else slice(None)
            chunk_starts, chunk_lengths = self._chunk_spans(int(k))
            number = at[mine] - lo[mine]
            if number.size and (int(number.min()) < 0 or int(number.max()) >= chunk_starts.size):
                raise BagFormatError(f"the index names a message outside chunk {k}", path=self.path,
                                     record="sqlite3")
            starts[mine] = lo[mine] + chunk_starts[number]
            lengths[mine] = chunk_lengths[number]
        if at.size and ((starts + lengths) > hi).any():
            raise BagFormatError("a message runs past the end of its chunk's rows", path=self.path,
                                 record="sqlite3")
        return starts, lengths

    def close(self) -> None:
        """Close every storage file (and remove any temporary copy)."""
        for db in self.files:
            db.close()
        if getattr(self, "source", None) is not None:
            self.source.close()


class _RowStore(ChunkStore):
    """The ChunkStore of a rosbag2 recording: a chunk's payload comes from a query, not from a file span."""

    payloads_in_source = False

    def __init__(self, reader: Rosbag2Reader, *, cache_bytes: int, workers: int | None) -> None:
        self.reader = reader
        super().__init__(reader.source, (), cache_bytes=cache_bytes, workers=workers)

    @property  # type: ignore[override]
    def chunks(self) -> ChunkTable:
        """Every chunk the reader has numbered so far (by its whole index or by topics' own indexes)."""
        return self.reader._table

    @chunks.setter
    def chunks(self, value: object) -> None:
        pass  # ChunkStore.__init__ sets it: the table is the reader's, see the getter

    def get(self, index: int, remember: bool = True, reach: Reach | None = None) -> np.ndarray:
        """Chunk ``index``'s payload, from the cache or the database (always all of it: ``reach`` is for
        compressed chunks)."""
        hit = self.cached_payload(index)
        if hit is not None:
            return hit
        payload = self.reader.fetch(index)
        if remember:
            self._remember(index, payload)
        return payload


def _rows_decompressed(data: Any, starts: np.ndarray, lengths: np.ndarray, ids: np.ndarray,
                       path_of: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-message zstd: the frames of rows ``ids`` at ``data[starts[i]:starts[i] + lengths[i]]`` decompressed
    back to back, bounded (see decompress_frames): (payload, starts, sizes) of the messages in it. A frame that
    does not decompress is a BagFormatError naming its row and its file (``path_of(i)``)."""
    try:
        payload, sizes = decompress_frames(data, starts.tolist(), lengths.tolist())
    except FrameError as exc:
        raise BagFormatError(f"message row {int(ids[exc.index])} does not decompress: {exc}",
                             path=path_of(exc.index), record="sqlite3") from None
    sizes = np.asarray(sizes, dtype=np.int64)
    return payload, np.cumsum(sizes) - sizes, sizes


def _is_zstd(path: str, named: bool) -> bool:
    """Whether a storage file is zstd-compressed: by its first bytes (a file decompressed by hand keeps
    its listing in metadata.yaml), by its name where it cannot be read (the error comes later)."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError:
        return named
    return head == ZSTD_MAGIC or (named and len(head) < 4)


def no_metadata_problem(path: str, names: list[str]) -> str:
    """What opening the rosbag2 directory ``path`` without metadata.yaml does instead: read its storage files
    ``names`` as one recording (a recording still running writes its metadata.yaml last). BagFormatError
    where there are several and they are not one recording's split files (``NAME_0``, ``NAME_1``...: what
    rosbag2 writes): read as one, a folder of unrelated recordings (or a file beside its ``.zstd`` copy) gave
    one bag of years-long gaps and topics counted twice."""
    split = [re.fullmatch(r"(.+)_(\d+)\.(?:db3|mcap)(?:\.zstd)?", name) for name in names]
    if len(names) > 1 and not (all(split) and len({m.group(1) for m in split if m}) == 1
                               and len({int(m.group(2)) for m in split if m}) == len(names)):
        raise BagFormatError("directory has no metadata.yaml, and its storage files are not the split files of "
                             "one recording (NAME_0, NAME_1...): open each file alone "
                             f"({', '.join(_natural_order(names))})", path=path)
    return ("no metadata.yaml (a recording still running, or stopped abruptly): reading the storage files "
            f"present as one recording ({', '.join(_natural_order(names))})")


def _natural_order(names: list[str]) -> list[str]:
    """``bag_2.db3`` before ``bag_10.db3``: split files in the order they were written."""
    import re

    return sorted(names, key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)])
