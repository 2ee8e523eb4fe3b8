"""One rosbag2 sqlite3 storage file (``.db3``), read strictly read-only.

Opened as ``file:...?mode=ro&immutable=1``: SQLite then takes no locks and
never creates ``-wal``/``-shm`` files beside the user's data. A file whose
write-ahead log holds data (a recording still running, or killed) is read
with that log: through the writer's own ``-shm`` when it exists, else from a
copy of both files in a temporary folder. A ``.db3.zstd`` is decompressed
first (:mod:`fastbag.rosbag2.compression`).

A file no one writes has its ``messages`` table read straight from its pages
(:mod:`fastbag.rosbag2.pages`: a Numba walk of the table's b-tree over the
file's mapping, 3-4x faster than SQLite's own scan); SQLite answers the
schema and counts, and reads any file that is not as it writes them. Through
SQLite, reading whole columns costs one query, not one Python object per row:
SQLite's ``group_concat`` joins a column into one text (the numbers as
decimal text, parsed by a Numba kernel that runs without the GIL, so the
parts of a scan parse on their own threads; the blobs as their bytes, for
which the connection's ``text_factory`` is ``bytes``). Message rows are
fetched in batches of one topic's rows in id order (a "chunk", see
:meth:`Db3.blobs`): a range of ids, or a list of them where the topic is
sparse; the count and bytes that come back are checked against the index.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BagFormatError, out_of_resources
from ..io.forks import reset_in_children
from ..io.scratch import ScratchFolder
from ..io.source import Source
from ..io.startup import by_kernel
from .compression import copy_file, decompress_file, writing_copy
from .pages import SQLITE_MAGIC, TablePages, column_places, read_table

#: Damaged stretches of a messages table read past before giving up on the rest of it.
MAX_RESUMES = 64
#: What reading a damaged messages table raises: SQLite's errors, text that is not UTF-8, numbers past int64,
#: and NOMEM (MemoryError) where SQLite believed a damaged record length.
ROW_DAMAGE = (sqlite3.Error, ValueError, OverflowError, MemoryError)
#: A chunk's rows are looked up by id when they are fewer than 1 in SPARSE of their id range (and at most
#: MAX_LISTED: the list is SQL text to parse).
SPARSE, MAX_LISTED = 4, 20_000
#: Rows of at least this many bytes on average are fetched one by one rather than joined by group_concat,
#: whose doubling buffer copies large blobs several times (3x slower for 160 kB rows).
LARGE_ROW = 4096
#: The index scan of a table of at least 2 x SCAN_PART_ROWS rows runs in SCAN_WORKERS parts at once.
SCAN_PART_ROWS, SCAN_WORKERS = 1 << 17, 2
#: Until Numba is loaded (see fastbag.io.startup), a table of at most this many rows is read by SQLite's
#: scan and its numbers parsed by Python, not from its pages by the kernels: ``fastbag info`` of a small
#: recording needs no kernel.
NUMPY_UP_TO = 100_000
#: Whether sqlite3 opens a database held in memory (Connection.deserialize: Python 3.11 and later).
DESERIALIZES = hasattr(sqlite3.Connection, "deserialize")
#: What SQLite's group_concat makes of an integer column: decimal int64s, comma-separated.
_INTEGERS = re.compile(rb"-?[0-9]{1,19}(?:,-?[0-9]{1,19})*")


def _cannot_open(exc: Exception) -> bool:
    """Whether SQLite said it could not open the file (SQLITE_CANTOPEN: Python 3.11 gives the code; 3.10
    only the text)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code == 14 if code is not None else "unable to open database file" in str(exc)


def _out_of_resources(path: str) -> OSError | None:
    """Why SQLite could not open ``path``, where the process is out of descriptors (or the machine out of
    memory): SQLite says only "unable to open database file", which would read as damage and leave the file
    out of its recording. Found by opening the file once more; None where that works or fails otherwise."""
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as exc:
        return out_of_resources(exc, path, "opening the sqlite3 storage")
    return None


@dataclass(frozen=True)
class TopicRow:
    """A row of the ``topics`` table (columns missing in older files are empty)."""

    id: int
    name: str
    type: str
    serialization_format: str
    offered_qos_profiles: str = ""
    type_description_hash: str = ""


@dataclass(frozen=True)
class Rows:
    """Every message row of a file as arrays (file order): id, topic id, timestamp (ns) and blob length."""

    id: np.ndarray
    topic_id: np.ndarray
    timestamp: np.ndarray
    length: np.ndarray
    segment: np.ndarray | None = None  # stretches read between damaged pages (see Db3._rows_one_by_one)


def _numbers(text: bytes | None, what: str, count: int | None = None) -> np.ndarray:
    """A ``group_concat`` of integers (decimal text, comma-separated) as int64, checked complete."""
    if not text:  # no rows, or every value NULL (group_concat skips NULLs)
        if count:
            raise ValueError(f"the {what} column holds something other than integers")
        return np.zeros(0, dtype=np.int64)
    out = np.empty(count if count is not None else text.count(b",") + 1, dtype=np.int64)
    if by_kernel(out.size, NUMPY_UP_TO):
        from .kernels import parse_integers

        if parse_integers(np.frombuffer(text, dtype=np.uint8), out) != out.size:
            raise ValueError(f"the {what} column holds something other than integers")
        return out
    items = text.split(b",") if _INTEGERS.fullmatch(text) else []
    if len(items) != out.size:
        raise ValueError(f"the {what} column holds something other than integers")
    try:
        out[:] = [int(item) for item in items]
    except OverflowError:  # 19 digits beyond int64
        raise ValueError(f"the {what} column holds something other than integers") from None
    return out


#: One row's blob, asked for by id: how a damaged table's rows are checked and fetched (see Db3._damaged).
BLOB_BY_ID = "SELECT data FROM messages WHERE id = ?"


class Db3:
    """An open ``.db3`` (or ``.db3.zstd``) storage file.

    ``path`` is the user's file, named in every error. ``problems`` gathers
    one sentence per thing worth a warning (a write-ahead log, rows lost to
    damage).
    """

    def __init__(self, path: str, *, compressed: bool = False) -> None:
        self.path = path
        self.closed = False
        self.compressed = compressed  # a .db3.zstd (rosbag2's FILE compression)
        self.problems: list[str] = []
        self._row_count: int | None = None  # count(*) as totals() or _read_pages found it, for a file no one writes
        # SQL that keeps only the rows the index took, where it left malformed rows out (see _rows_one_by_one):
        # a chunk's id range then holds rows the index does not.
        self._well_formed = ""
        # Where a page is damaged, SQLite's answers vary with the query (a range scan met 61 of a topic's 63
        # rows that another scan listed; a damaged key hides the rows after it from a search by id, not from
        # a scan): the blobs of a damaged table are fetched by id, as the index checked each row could be.
        self._damaged = False
        self._lock = threading.Lock()
        # Connections not in use, and those in use (see _leased): never closed while a thread uses one
        self._idle: list[sqlite3.Connection] = []
        self._busy: set[sqlite3.Connection] = set()
        self._memory: bytes | None = None     # a decompressed .db3.zstd kept in memory
        self._scratch: ScratchFolder | None = None  # a decompressed or copied file, removed on close
        self._source: Source | None = None     # the file's mapping, for reading its pages (see rows)
        self._pages: TablePages | None = None  # where each row and blob lies, when the pages were read
        self._topic_pages: dict[int, TablePages] = {}  # where some topics' rows lie (topic_rows), by topic id
        self._id_is_rowid: bool | None = None  # see id_is_rowid
        self._indexed_counter: bytes | None = None  # the header's change counter when SQLite's scan read the rows
        reset_in_children(self)
        self.size = os.path.getsize(path)
        self.decompressed_size = self.size  # (a .db3.zstd's database, once decompressed below)
        self._database = path  # the database file an immutable URI names: this one, or its decompressed copy
        try:
            if compressed:
                self._scratch = ScratchFolder(self)
                spill = self._database = os.path.join(self._scratch.path, "storage.db3")
                memory = decompress_file(path, spill)
                if memory is not None and not memory.startswith(SQLITE_MAGIC):
                    raise BagFormatError("zstd-compressed storage file does not hold an SQLite database "
                                         f"(it decompresses to {len(memory)} bytes starting {memory[:16]!r})",
                                         path=path, record="decompressed")
                if memory is not None and memory[18:20] == b"\x02\x02":
                    # An in-memory database cannot be in WAL mode: SQLite refuses a WAL header (bytes 18
                    # and 19 = 2). Setting them to 1 (rollback journal) leaves every page as it is.
                    memory = memory[:18] + b"\x01\x01" + memory[20:]
                if memory is not None and not DESERIALIZES:  # written out, and read as a larger one is
                    with writing_copy(path, spill), open(spill, "wb") as out:
                        out.write(memory)
                    memory = None
                self._memory = memory
                self.decompressed_size = len(memory) if memory is not None else os.path.getsize(spill)
                self._uri = None if self._memory is not None else self._uri_of(spill, immutable=True)
            else:
                self._uri = self._open_uri(path)
            try:
                self._check_readable()
            except BagFormatError:
                if self._uri is None or "immutable=1" in self._uri or self._scratch is not None:
                    raise
                # The writer's -shm could not serve a read-only reader (stale, from a recorder killed):
                # read a private copy of the database and its log instead.
                self.close()
                self._uri = self._private_copy(path)
                self._check_readable()
        except BaseException:
            self.close()
            raise

    # -- connections ------------------------------------------------------------
    @staticmethod
    def _uri_of(path: str, *, immutable: bool) -> str:
        quoted = urllib.parse.quote(os.path.abspath(path))
        return f"file:{quoted}?mode=ro" + ("&immutable=1" if immutable else "")

    def _open_uri(self, path: str) -> str:
        """The read-only URI for ``path``: immutable unless its write-ahead log holds committed data."""
        wal, shm = path + "-wal", path + "-shm"
        if not (os.path.exists(wal) and os.path.getsize(wal) > 0):
            return self._uri_of(path, immutable=True)
        self.problems.append(f"{os.path.basename(path)} has a write-ahead log (a recording still running or "
                             "stopped abruptly): reading what is committed")
        if os.path.exists(shm):  # the writer's shared index: read through it, as a second reader would
            return self._uri_of(path, immutable=False)
        # Without -shm, SQLite would create one (and a -wal) beside the user's file: read a copy instead.
        return self._private_copy(path)

    def _private_copy(self, path: str) -> str:
        """The URI of a copy of the database and its write-ahead log in a temporary folder."""
        self._scratch = ScratchFolder(self)
        copy = os.path.join(self._scratch.path, "storage.db3")
        copy_file(path, copy)
        copy_file(path + "-wal", copy + "-wal")
        return self._uri_of(copy, immutable=False)

    @contextlib.contextmanager
    def _leased(self) -> Iterator[sqlite3.Connection]:
        """A connection for one use (a query and its rows), by one thread at a time: an idle one, or a new
        one. A close meanwhile interrupts it (its query then fails: a ValueError, the bag closed) and it is
        closed once given back. (close() closed every thread's connection, whatever it was doing: SQLite
        then crashed the process under a read.)"""
        with self._lock:
            if self.closed:
                raise self._closed_error()
            con = self._idle.pop() if self._idle else None
            if con is not None:
                self._busy.add(con)  # (in the same step: a close then interrupts it)
            memory, uri = self._memory, self._uri  # (what to connect to, as it was while open)
        if con is None:
            con = self._connect(memory, uri)
            with self._lock:
                closed = self.closed
                if not closed:
                    self._busy.add(con)
            if closed:  # (closed while it connected: it would not have been interrupted)
                con.close()
                raise self._closed_error()
        try:
            yield con
        finally:
            with self._lock:
                self._busy.discard(con)
                keep = not self.closed
                if keep:
                    self._idle.append(con)
            if not keep:
                con.close()

    def _connect(self, memory: bytes | None, uri: str | None) -> sqlite3.Connection:
        """A new read-only connection to the file at ``uri`` (or to the decompressed copy ``memory``)."""
        if memory is not None:
            con = sqlite3.connect(":memory:", check_same_thread=False)
            con.deserialize(memory)  # a WAL-mode header was turned to rollback mode: see __init__
        else:
            con = sqlite3.connect(uri, uri=True, check_same_thread=False)  # type: ignore[arg-type]
        con.text_factory = bytes  # group_concat of blobs is text to SQLite: take it as bytes
        return con

    def _mapped(self, con: sqlite3.Connection) -> sqlite3.Connection:
        """``con``, reading pages through a mapping rather than a read() each, for a scan of the table: ~40%
        less time. Not for the few pages opening reads (a fresh mapping's faults made ``count(*)`` 18 ms
        where reads take 6), nor for a file someone writes (it could shrink under the mapping). A leased
        connection is given back unmapped (:meth:`_mapped_lease`)."""
        if "immutable=1" in (self._uri or ""):
            con.execute("PRAGMA mmap_size = 1099511627776")  # SQLite maps at most the file, up to its cap
        return con

    @contextlib.contextmanager
    def _mapped_lease(self) -> Iterator[sqlite3.Connection]:
        """A leased connection reading through a mapping (see :meth:`_mapped`), unmapped when given back."""
        with self._leased() as con:
            try:
                yield self._mapped(con)
            finally:
                if "immutable=1" in (self._uri or ""):
                    with contextlib.suppress(sqlite3.Error):
                        con.execute("PRAGMA mmap_size = 0")

    def _closed_error(self) -> ValueError:
        """What a read meets once the file is closed (by another thread, under it)."""
        return ValueError(f"the bag was closed during the read ({self.path})")

    def _error(self, exc: Exception, what: str, **where: Any) -> BagFormatError | ValueError | OSError:
        if self.closed:  # (closed under a read: its copy and connections went away, no damage)
            return self._closed_error()
        if _cannot_open(exc) and self._memory is None:
            limit = _out_of_resources(self.path)
            if limit is not None:
                return limit
        detail = ", ".join(f"{k} {v}" for k, v in where.items())
        return BagFormatError(f"sqlite3 storage cannot be read ({what}{': ' + detail if detail else ''}): {exc}",
                              path=self.path, record="sqlite3")

    def query(self, sql: str, params: tuple = (), *, what: str) -> list[tuple]:
        """All rows of a small query; BagFormatError naming the file on any database error."""
        try:
            with self._leased() as con:
                return con.execute(sql, params).fetchall()
        except (sqlite3.Error, ValueError) as exc:  # ValueError: a damaged name that is not UTF-8
            raise self._error(exc, what) from exc

    def _check_readable(self) -> None:
        tables = {self._text(r[0]) for r in self.query("SELECT name FROM sqlite_master WHERE type='table'",
                                                        what="list of tables")}
        missing = {"topics", "messages"} - tables
        if missing:
            raise BagFormatError(f"sqlite3 file has no table {sorted(missing)[0]!r}: not a rosbag2 storage file",
                                 path=self.path, record="sqlite3")
        self.tables = tables
        encoding = self.query("PRAGMA encoding", what="text encoding")[0][0]
        # group_concat hands blobs through as text: only UTF-8 databases keep their bytes unchanged.
        self.utf8 = self._text(encoding).upper() == "UTF-8"

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)

    # -- what the file holds ------------------------------------------------------
    def topics(self) -> list[TopicRow]:
        """The ``topics`` table, whatever its columns (version 1 files lack the QoS)."""
        try:
            with self._leased() as con:
                cursor = con.execute("SELECT * FROM topics ORDER BY id")
                names = [d[0] for d in cursor.description]
                rows = cursor.fetchall()
        except (sqlite3.Error, ValueError) as exc:
            raise self._error(exc, "topics table") from exc
        out = []
        for row in rows:
            values = dict(zip(names, row))
            try:
                out.append(TopicRow(int(values["id"]), *(self._text(values.get(k) or b"") for k in (
                    "name", "type", "serialization_format", "offered_qos_profiles", "type_description_hash"))))
            except (KeyError, TypeError, ValueError) as exc:
                raise BagFormatError(f"topics table row {row[0]!r} is malformed: {exc}", path=self.path,
                                     record="sqlite3") from None
        return out

    def definitions(self) -> dict[str, tuple[str, str]]:
        """``{topic type: (encoding, text)}`` from ``message_definitions`` (Iron and newer), else empty."""
        if "message_definitions" not in self.tables:
            return {}
        rows = self.query("SELECT topic_type, encoding, encoded_message_definition FROM message_definitions",
                          what="message_definitions table")
        return {self._text(t): (self._text(e), self._text(d)) for t, e, d in rows}

    def metadata_text(self) -> str | None:
        """The newest metadata.yaml text a file stores in its ``metadata`` table (Iron and newer)."""
        if "metadata" not in self.tables:
            return None
        rows = self.query("SELECT metadata FROM metadata ORDER BY id DESC LIMIT 1", what="metadata table")
        return self._text(rows[0][0]) if rows else None

    def timestamp_indexed(self) -> bool:
        """Whether SQLite answers ``max(timestamp)`` from an index (rosbag2's ``timestamp_idx``), not a scan."""
        plan = self.query("EXPLAIN QUERY PLAN SELECT max(timestamp) FROM messages", what="query plan")
        return any("INDEX" in self._text(row[-1]) for row in plan)

    def totals(self) -> tuple[int, int | None, int | None]:
        """(row count, least timestamp, greatest timestamp) without reading a row: with an index on
        ``timestamp`` (see :meth:`timestamp_indexed`) each is a walk of index pages. One query per
        aggregate: SQLite takes the index's shortcut for a lone ``min`` or ``max`` only."""
        count = self.query("SELECT count(*) FROM messages", what="messages table")[0][0]
        if self._memory is not None or "immutable=1" in (self._uri or ""):  # cannot change: asked once
            self._row_count = count
        low = self.query("SELECT min(timestamp) FROM messages", what="messages table")[0][0]
        high = self.query("SELECT max(timestamp) FROM messages", what="messages table")[0][0]
        if not all(type(v) is int or (v is None and not count) for v in (count, low, high)):
            raise BagFormatError("messages table holds timestamps that are not integers", path=self.path,
                                 record="sqlite3")
        return count, low, high

    def rows(self) -> Rows:
        """Every message's id, topic id, timestamp and length, without reading a blob.

        A file no one writes is read from its pages (:mod:`fastbag.rosbag2.pages`), where they are as
        SQLite writes them. Otherwise one query joins each column into a text SQLite builds in C; a file
        it fails on is read row by row, as far as the damage allows (recorded in ``problems``).
        """
        pages = self._pages = self._read_pages()
        if pages is not None:
            return Rows(pages.id, pages.topic_id, pages.timestamp, pages.length)
        self._indexed_counter = self._change_counter()
        try:
            if not self.utf8:
                raise ValueError("a database in UTF-16 is read row by row")
            run = self._id_run()
            if run is None or self._memory is not None or run[1] - run[0] < 2 * SCAN_PART_ROWS:
                with self._mapped_lease() as con:
                    return self._scan(con, run)
            # A large table: its id range in one part per worker, each scanned on its own connection
            # (SQLite steps without the GIL), so the scan takes both cores.
            edges = np.linspace(run[0], run[1] + 1, SCAN_WORKERS + 1).astype(np.int64).tolist()
            ranges = [(a, b - 1) for a, b in zip(edges[:-1], edges[1:])]
            with ThreadPoolExecutor(SCAN_WORKERS, thread_name_prefix="fastbag-sqlite") as pool:
                parts = list(pool.map(self._scan_range, ranges))
            return Rows(*(np.concatenate([getattr(part, name) for part in parts]) for name in
                          ("id", "topic_id", "timestamp", "length")))
        except ROW_DAMAGE as exc:
            return self._rows_one_by_one(exc)

    @property
    def read_from_pages(self) -> bool:
        """Whether the rows indexed so far were read from the file's pages (not through SQLite)."""
        return self._pages is not None or bool(self._topic_pages)

    def topic_rows(self, topic_ids: list[int]) -> Rows | None:
        """The rows of ``topic_ids`` alone (as :meth:`rows` gives every row), read from the file's pages, or
        None where they cannot be read so (SQLite has no index on ``topic_id``: a query would scan every row
        all the same; the caller then reads every row with :meth:`rows`). Every row is still walked, and the
        walk must meet as many as ``count(*)``: what is skipped is writing the others down."""
        pages = self._read_pages(np.array(sorted(set(topic_ids)), dtype=np.int64))
        if pages is None:
            return None
        with self._lock:
            self._topic_pages.update((t, pages) for t in topic_ids)
        return Rows(pages.id, pages.topic_id, pages.timestamp, pages.length)

    def _read_pages(self, topic_ids: np.ndarray | None = None) -> TablePages | None:
        """The messages table read from the file's pages (the rows of ``topic_ids`` alone, where given), or
        None where it cannot be (a file being written, a layout other than rosbag2's, pages not as SQLite
        writes them: SQLite then reads the table)."""
        if self._memory is None and "immutable=1" not in (self._uri or ""):
            return None
        try:
            found = self.query("SELECT rootpage, sql FROM sqlite_master WHERE type='table' AND name='messages'",
                               what="messages table")
            columns = [tuple(self._text(v) if isinstance(v, bytes) else v for v in row)  # names come as bytes
                       for row in self.query("PRAGMA table_xinfo(messages)", what="messages table")]
            if self._row_count is None:  # (no one writes the file: asked once, here or by totals)
                self._row_count = self.query("SELECT count(*) FROM messages", what="messages table")[0][0]
            count = self._row_count
            run = self._id_run()
        except (BagFormatError, sqlite3.Error):
            return None
        if len(found) != 1 or type(found[0][0]) is not int or type(count) is not int:
            return None
        if not by_kernel(count, NUMPY_UP_TO):  # SQLite's scan: no kernel to load
            return None
        places = column_places(self._text(found[0][1] or b""), columns, self.id_is_rowid())
        if places is None:
            return None
        if self._memory is not None:
            buf = np.frombuffer(self._memory, dtype=np.uint8)
        else:
            try:
                with self._lock:  # (topics' indexes may be built on two threads at once)
                    if self._source is None:
                        self._source = Source(self._database)
            except (OSError, ValueError):  # SQLite reads it, but it cannot be mapped here
                return None
            buf = self._source.array
            try:
                with self._source.descriptor() as fd:  # the leaves read with pread, not faulted in
                    return read_table(buf, found[0][0], places, count, run, fd=fd, topic_ids=topic_ids)
            except (OSError, ValueError):  # replaced since it was mapped: SQLite reads what it opened
                return None
        return read_table(buf, found[0][0], places, count, run, topic_ids=topic_ids)

    def _change_counter(self) -> bytes | None:
        """The file's header change counter (bytes 24-27, which a writer's commit increments) where SQLite
        reads it immutable (it then never looks for changes itself); None for other files."""
        if self._memory is not None or "immutable=1" not in (self._uri or ""):
            return None
        try:
            fd = os.open(self._database, os.O_RDONLY)
        except OSError:
            return None
        try:
            return os.pread(fd, 4, 24)
        finally:
            os.close(fd)

    def id_is_rowid(self) -> bool:
        """Whether the ``id`` column is the table's rowid (as rosbag2 declares it: ``INTEGER PRIMARY KEY``), so
        SQLite scans rows in id order; SQLite's query plan for a lookup by id says so."""
        if self._id_is_rowid is None:
            try:
                plan = self.query("EXPLAIN QUERY PLAN SELECT id FROM messages WHERE id = 0", what="query plan")
                self._id_is_rowid = any("INTEGER PRIMARY KEY" in self._text(row[-1]) for row in plan)
            except BagFormatError:
                self._id_is_rowid = False
        return self._id_is_rowid

    def _scan_range(self, ids: tuple[int, int]) -> Rows:
        """The rows with ids ``ids[0]`` to ``ids[1]`` (all present), on a connection of their own."""
        with self._lock:
            if self.closed:
                raise self._closed_error()
            memory, uri = self._memory, self._uri
        con = self._mapped(self._connect(memory, uri))
        try:
            return self._scan(con, ids, f" WHERE id BETWEEN {int(ids[0])} AND {int(ids[1])}")
        finally:
            con.close()

    @staticmethod
    def _scan(con: sqlite3.Connection, run: tuple[int, int] | None, where: str = "") -> Rows:
        """One query joining each column into a text SQLite builds in C; ``run``: the ids are every integer
        from ``run[0]`` to ``run[1]`` and are not read. ValueError when what comes back is not that."""
        found = con.execute(f"SELECT count(*), {'NULL' if run else 'group_concat(id)'}, group_concat(topic_id), "
                            f"group_concat(timestamp), group_concat(length(data)) FROM messages{where}").fetchone()
        n = int(found[0])
        if run is not None and n != run[1] - run[0] + 1:
            raise ValueError("the messages table changed while it was read")
        ids = np.arange(run[0], run[1] + 1, dtype=np.int64) if run else _numbers(found[1], "id", n)
        return Rows(ids, *(_numbers(text, what, n) for text, what in zip(
            found[2:], ("topic_id", "timestamp", "data length"))))

    def _id_run(self) -> tuple[int, int] | None:
        """(first, last) row id when the ids are every integer between (a recorder's AUTOINCREMENT ids,
        unless rows were deleted), else None. Row ids are unique, so ``count(*)`` equal to the span says
        so; each of the three is answered from the ends of a b-tree. The scan then leaves the id column
        out: a fifth of its time."""
        if not self.id_is_rowid():  # the scan then meets the rows in rowid order, not by id: ids are read
            return None
        count = self._row_count
        with self._leased() as con:
            if count is None:  # (not asked at open, or the file is being written)
                count = con.execute("SELECT count(*) FROM messages").fetchone()[0]
            low = con.execute("SELECT min(id) FROM messages").fetchone()[0]
            high = con.execute("SELECT max(id) FROM messages").fetchone()[0]
        if type(low) is int and type(high) is int and count and high - low + 1 == count:
            return low, high
        return None

    def _rows_one_by_one(self, first_error: Exception) -> Rows:
        """Rows read one at a time, for a file the fast query fails on (damaged, or hostile).

        Rows whose columns are not integers are left out. Where a page is
        damaged, reading resumes at the next row id past it that SQLite can
        reach (probing ids ever further on); each stretch read is a
        ``segment`` (chunks never span two, so the intact rows stay readable).
        """
        with self._leased() as con:
            return self._rows_one_by_one_on(con, first_error)

    def _rows_one_by_one_on(self, con: sqlite3.Connection, first_error: Exception) -> Rows:
        """:meth:`_rows_one_by_one` on the connection ``con``."""
        found: list[tuple[int, int, int, int]] = []
        segments: list[int] = []
        skipped = segment = 0
        errors: list[str] = []
        top = low = None
        with contextlib.suppress(*ROW_DAMAGE):
            top = con.execute("SELECT max(id) FROM messages").fetchone()[0]
        with contextlib.suppress(*ROW_DAMAGE):
            low = con.execute("SELECT min(id) FROM messages").fetchone()[0]
        # (probes past damage go on from the last id read, or from the first id: from -2**63 they would
        # never reach a recorder's ids, which start at 1)
        after = low - 1 if type(low) is int and low > -(1 << 63) else 0
        reach = 0  # probes past a damaged page start 2**reach ids on; it grows while resuming gains nothing
        while True:
            gained = 0
            try:
                for row in con.execute("SELECT id, topic_id, timestamp, length(data) FROM messages WHERE id > ? "
                                       "ORDER BY id", (after,)):
                    gained += 1
                    if all(type(v) is int for v in row):
                        found.append(row)
                        segments.append(segment)
                        after = row[0]
                    else:
                        skipped += 1
                break
            except ROW_DAMAGE as exc:
                if self.closed:  # (interrupted by a close: no damage)
                    raise self._error(exc, "messages table") from exc
                said = str(exc) or f"{type(exc).__name__} (a damaged length SQLite believed)"
                errors.append(f"{said} after row id {after}" if found else said)
                if len(errors) > MAX_RESUMES:  # damage everywhere: keep what was read
                    break
                reach = reach + 1 if segment and not gained else 0
                resume = self._past_damage(con, after, top, reach)
                if resume is None:
                    break
                after, segment = resume, segment + 1
        if not found and errors:
            raise self._error(first_error, "messages table")
        unreadable = 0
        if errors or skipped:  # (a malformed cell may be a damaged key: a search by id then misses rows after it)
            self._damaged = True
            found, segments, unreadable = self._fetchable(con, found, segments)
        if skipped:
            self._well_formed = (" AND typeof(topic_id) = 'integer' AND typeof(timestamp) = 'integer'"
                                 " AND data IS NOT NULL")
        if errors or skipped:
            self.problems.append(f"{os.path.basename(self.path)}: the messages table is damaged "
                                 f"({'; '.join(errors[:3]) or first_error}): {len(found)} rows are read" +
                                 (f", {skipped} malformed rows left out" if skipped else "") +
                                 (f", {unreadable} rows whose data cannot be read left out" if unreadable else ""))
        table = np.array(found, dtype=np.int64).reshape(-1, 4)
        return Rows(*(np.ascontiguousarray(table[:, k]) for k in range(4)),
                    segment=np.array(segments, dtype=np.int64))

    def _fetchable(self, con: sqlite3.Connection, found: list[tuple[int, int, int, int]], segments: list[int]
                   ) -> tuple[list[tuple[int, int, int, int]], list[int], int]:
        """The rows of a damaged table (and their segments) whose blob SQLite gives when asked by id, at the
        length read, as :meth:`blobs` then asks for it; and how many are not. The blob itself is read: a
        row's length is in its header, its data may lie on damaged overflow pages."""
        kept: list[tuple[int, int, int, int]] = []
        kept_segments: list[int] = []
        for row, segment in zip(found, segments):
            try:
                got = con.execute(BLOB_BY_ID, (row[0],)).fetchone()
            except ROW_DAMAGE as exc:
                if self.closed:  # (interrupted by a close: no damage)
                    raise self._error(exc, "messages table") from exc
                continue
            if got is not None and type(got[0]) is bytes and len(got[0]) == row[3]:
                kept.append(row)
                kept_segments.append(segment)
        return kept, kept_segments, len(found) - len(kept)

    def _blobs_by_id(self, ids: np.ndarray, where: dict[str, Any]) -> bytes:
        """The blobs of rows ``ids`` of a damaged table, each asked for by id (see ``_damaged``)."""
        parts = []
        with self._leased() as con:
            for row_id in ids.tolist():
                try:
                    got = con.execute(BLOB_BY_ID, (row_id,)).fetchone()
                except ROW_DAMAGE as exc:
                    raise self._error(exc, "messages table", **where, **{"row id": row_id}) from exc
                if got is None or type(got[0]) is not bytes:
                    detail = ", ".join(f"{k} {v}" for k, v in where.items())
                    raise BagFormatError(f"sqlite3 row id {row_id} ({detail}) holds no blob now where one was "
                                         "indexed: the file is damaged or changed after it was opened",
                                         path=self.path, record="sqlite3")
                parts.append(got[0])
        return b"".join(parts)

    @staticmethod
    def _past_damage(con: sqlite3.Connection, after: int, top: int | None, reach: int) -> int | None:
        """A row id at least ``2**reach`` past ``after`` from which SQLite reads again, or None."""
        if type(top) is not int:
            return None
        for k in range(min(reach, 63), 64):
            probe = after + (1 << k)
            if probe >= top:
                return None
            try:
                con.execute("SELECT id, topic_id, timestamp, length(data) FROM messages WHERE id > ? "
                            "ORDER BY id LIMIT 16", (probe,)).fetchall()
            except ROW_DAMAGE:
                continue
            return probe
        return None

    def _page_blobs(self, pages: TablePages, ids: np.ndarray, *, pread: bool = True) -> np.ndarray | None:
        """The blobs of ``ids`` from the file's pages (see TablePages.blobs), long ones read with pread
        (``pread`` False: from the mapping, for a few rows, where opening the file costs more)."""
        source = self._source  # (once: a close meanwhile sets it to None)
        if source is None or not pread:  # decompressed into memory, or closed
            if self.closed:
                raise self._closed_error()
            return pages.blobs(ids)
        try:
            with source.descriptor() as fd:
                return pages.blobs(ids, fd)
        except (OSError, ValueError):  # the path names another file now: SQLite reads what it opened
            return None

    def row_blobs(self, ids: np.ndarray, topic_ids: set[int]) -> bytes | np.ndarray | None:
        """The blobs of rows ``ids`` (ascending, unique, of topics ``topic_ids``; a few) concatenated in id
        order, for a read of a few messages: from the file's pages where :meth:`rows` or :meth:`topic_rows`
        read them, else by id. None where they are not found so (the read then fetches their chunks, which
        name the fault)."""
        pages = self._pages
        if pages is None and self._topic_pages:
            found = {id(self._topic_pages.get(t)): self._topic_pages.get(t) for t in topic_ids}
            pages = next(iter(found.values())) if len(found) == 1 else None
        if pages is not None:
            return self._page_blobs(pages, ids, pread=False) if pages.current() else None
        if self._indexed_counter is not None and self._change_counter() != self._indexed_counter:
            return None
        where = {"rows with ids": f"{int(ids[0])} to {int(ids[-1])}"} if ids.size else {}
        if self._damaged:
            return self._blobs_by_id(ids, where)
        try:
            with self._leased() as con:
                # (placeholders: the statement is prepared once for each number of rows, not for each read)
                rows = con.execute(f"SELECT id, data FROM messages WHERE id IN ({','.join('?' * ids.size)})"
                                   f"{self._well_formed} ORDER BY id", ids.tolist()).fetchall()
        except (sqlite3.Error, ValueError) as exc:
            raise self._error(exc, "messages table", **where) from exc
        if [r[0] for r in rows] != ids.tolist() or not all(type(r[1]) is bytes for r in rows):
            return None
        return b"".join(r[1] for r in rows)

    def blobs(self, topic_id: int, first_id: int, last_id: int, ids: np.ndarray, nbytes: int) -> bytes | np.ndarray:
        """The blobs of ``topic_id``'s rows ``ids`` (ascending, from ``first_id`` to ``last_id``, ``nbytes`` in
        all), concatenated in id order: copied from the file's pages where :meth:`rows` read them, else
        with one query.

        Rows that are most of their id range are scanned as a range; a few
        rows spread over a long range (a sparse topic among a dense one) are
        looked up by id instead, so the rows between are never read. A file
        whose rows differ from ``ids`` (changed since it was opened, or
        damaged) raises BagFormatError naming the file and the rows.
        """
        pages = self._pages if self._pages is not None else self._topic_pages.get(topic_id)
        if pages is not None and not pages.current():
            # Written since it was opened. SQLite, opened immutable, may answer from pages it cached before.
            raise BagFormatError("sqlite3 storage changed after it was opened (its header's change counter "
                                 f"moved; topic id {topic_id}, rows with ids {first_id} to {last_id}): the index "
                                 "no longer describes it; open it again", path=self.path, record="sqlite3")
        if pages is not None:
            data = self._page_blobs(pages, ids)
            if data is not None:
                return data
            # An overflow chain leaves the file: SQLite reads these rows and names the damage.
        elif self._indexed_counter is not None and self._change_counter() != self._indexed_counter:
            # Opened immutable, SQLite answers from the pages a connection cached before the change.
            raise BagFormatError("sqlite3 storage changed after it was opened (its header's change counter "
                                 f"moved; topic id {topic_id}, rows with ids {first_id} to {last_id}): the index "
                                 "no longer describes it; open it again", path=self.path, record="sqlite3")
        where = {"topic id": topic_id, "rows with ids": f"{first_id} to {last_id}"}
        if self._damaged:
            return self._blobs_by_id(ids, where)
        if ids.size * SPARSE < last_id - first_id + 1 and ids.size <= MAX_LISTED:
            rows_sql, params = f"id IN ({','.join(map(str, ids.tolist()))})", (topic_id,)  # our own int64s
        else:
            rows_sql, params = "id BETWEEN ? AND ?", (first_id, last_id, topic_id)
        try:
            if self.utf8 and nbytes < LARGE_ROW * ids.size and self.id_is_rowid():
                # Small rows: one aggregate joins them in C (no Python object per row), its count checks
                # them. No ORDER BY: a rowid range or an id list is read in id order (the id being the
                # rowid), and a sort would copy every blob once more.
                with self._leased() as con:
                    data, count = con.execute(
                        f"SELECT group_concat(data, ''), count(*) FROM messages WHERE {rows_sql} AND topic_id = ?"
                        f"{self._well_formed}",
                        params).fetchone()
                data = data or b""
                got_ids = ids if count == ids.size else np.zeros(count, dtype=np.int64)
            else:
                # Large rows (or UTF-16 text): group_concat's growing buffer would copy each blob several
                # times; a few rows fetched one by one cost nothing per row, and their ids are checked.
                with self._leased() as con:
                    rows = con.execute(f"SELECT id, data FROM messages WHERE {rows_sql} AND topic_id = ?"
                                       f"{self._well_formed} ORDER BY id", params).fetchall()
                got_ids = np.array([r[0] for r in rows], dtype=np.int64)
                data = b"".join(r[1] for r in rows)
        except (sqlite3.Error, ValueError, TypeError) as exc:  # TypeError: a blob that is not bytes
            raise self._error(exc, "messages table", **where) from exc
        if not np.array_equal(got_ids, ids):
            raise BagFormatError(f"sqlite3 storage holds {got_ids.size} rows where {ids.size} were indexed "
                                 f"(topic id {topic_id}, rows with ids {first_id} to {last_id}): the file is damaged "
                                 "or changed after it was opened", path=self.path, record="sqlite3")
        return data

    def _after_fork(self) -> None:
        # SQLite connections must not cross a fork: the child opens its own. (The temporary copy stays the
        # parent's to remove: see ScratchFolder.)
        self._lock = threading.Lock()
        self._idle, self._busy = [], set()

    def close(self) -> None:
        """Close the idle connections, interrupt those in use (each closed when its user gives it back), and
        remove temporary copies."""
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
            for con in self._busy:  # (under the lock: none is given back and closed meanwhile)
                with contextlib.suppress(sqlite3.Error):
                    con.interrupt()  # (thread-safe, as closing under another thread's query is not)
        for con in idle:
            with contextlib.suppress(sqlite3.Error):
                con.close()
        self._pages = None  # (its array is a view of the mapping: dropped first, so the mapping can close)
        self._topic_pages = {}
        if self._source is not None:
            self._source.close()
            self._source = None
        self._memory = None
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None
