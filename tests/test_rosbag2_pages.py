"""A rosbag2 ``messages`` table read straight from the SQLite file's pages (:mod:`fastbag.rosbag2.pages`).

The oracle is SQLite itself: Python's ``sqlite3`` module on the same file,
``SELECT id, topic_id, timestamp, data FROM messages ORDER BY id`` (opened
``immutable``, as fastbag opens a file no one writes). Wherever the pages are
read (:meth:`Db3._read_pages` returns a :class:`~fastbag.rosbag2.pages.TablePages`),
every row must be SQLite's, in id order: its id, topic id and timestamp (each an
integer to SQLite), its blob's length, and the blob bytes that
:meth:`TablePages.blobs` copies out. Where the pages are not as expected the
reader returns None and fastbag reads the table through SQL; then what a user
sees (``fastbag.open`` and every raw message) must be what they see with the
page reader switched off.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sqlite3
import tempfile
import urllib.parse
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zstandard
from conftest import DATA, NO_DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastbag
from fastbag.errors import BagFormatError, FastbagError, FastbagWarning
from fastbag.rosbag2 import pages
from fastbag.rosbag2.sqlite import Db3
from tools.fuzz_rosbag2 import SCHEMA

ORACLE = "SELECT id, topic_id, timestamp, data FROM messages ORDER BY id"
TOPICS = ("CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, "
          "serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL);")
#: Integers of every width SQLite stores (serial types 8 and 9, then 1, 2, 3, 4, 6 and 8 bytes), at both edges.
WIDTHS = [0, 1, 2, 127, 128, -1, -128, -129, 2**15 - 1, 2**15, -2**15, -2**15 - 1, 2**23 - 1, 2**23, -2**23,
          -2**23 - 1, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**47 - 1, 2**47, -2**47, -2**47 - 1, 10**18,
          2**63 - 1, -2**63 + 1, -2**63]


# -- the oracle and the comparison ----------------------------------------------------------------------

def _uri(path) -> str:
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro&immutable=1"


def oracle(path) -> list[tuple]:
    """Every row of ``messages`` as SQLite reads it, in id order (raises sqlite3.Error where it cannot, or
    UnicodeDecodeError where its message quotes damaged schema bytes)."""
    con = sqlite3.connect(_uri(path), uri=True)
    try:
        return con.execute(ORACLE).fetchall()
    finally:
        con.close()


def root_page(path) -> int:
    """The page number of the messages table's b-tree root."""
    con = sqlite3.connect(_uri(path), uri=True)
    try:
        return con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    finally:
        con.close()


def integrity_ok(path) -> bool:
    """Whether SQLite's ``PRAGMA integrity_check`` finds nothing wrong with the file."""
    try:
        con = sqlite3.connect(_uri(path), uri=True)
        try:
            return con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            con.close()
    except (sqlite3.Error, ValueError):
        return False


def differences(table: pages.TablePages, rows: list[tuple]) -> str | None:
    """What differs between the rows read from the pages and SQLite's (None: nothing)."""
    if not all(type(v) is int for r in rows for v in r[:3]) or not all(type(r[3]) is bytes for r in rows):
        return "SQLite reads values that are not integers and blobs"
    if table.id.tolist() != [r[0] for r in rows]:
        return "ids"
    if table.topic_id.tolist() != [r[1] for r in rows] or table.timestamp.tolist() != [r[2] for r in rows]:
        return "topic ids or timestamps"
    if table.length.tolist() != [len(r[3]) for r in rows]:
        return "blob lengths"
    blobs = table.blobs(table.id)
    if blobs is None:
        return "blobs not copied (an overflow chain leaves the file)"
    if blobs.dtype != np.uint8 or blobs.tobytes() != b"".join(r[3] for r in rows):
        return "blob bytes"
    return None


def assert_same_rows(table: pages.TablePages, rows: list[tuple]) -> None:
    assert all(a.dtype == np.int64 for a in (table.id, table.topic_id, table.timestamp, table.length))
    assert differences(table, rows) is None, differences(table, rows)


def assert_rows_equal(found, rows: list[tuple]) -> None:
    """``Db3.rows()`` (id, topic id, timestamp, length; in file order, which is id order unless the id is not
    the rowid) equal SQLite's rows (in id order)."""
    order = np.argsort(found.id, kind="stable")
    found = type(found)(*(getattr(found, name)[order] for name in ("id", "topic_id", "timestamp", "length")))
    assert found.id.tolist() == [r[0] for r in rows]
    assert found.topic_id.tolist() == [r[1] for r in rows]
    assert found.timestamp.tolist() == [r[2] for r in rows]
    assert found.length.tolist() == [len(r[3]) for r in rows]


def read_pages(path, *, compressed: bool = False) -> tuple[Db3, pages.TablePages | None]:
    """A Db3 (to close) and its messages table read from the pages, after ``totals()`` as fastbag opens it."""
    db = Db3(str(path), compressed=compressed)
    try:
        db.totals()
        return db, db._read_pages()
    except BaseException:
        db.close()
        raise


def what_users_see(path):
    """Every raw message of ``fastbag.open(path)`` as (topic, time, bytes), and by topic its messages as a
    fresh handle's read of that topic locates them (through the topic's own index, where the pages are read:
    Rosbag2Reader.topic_index); or the type of FastbagError raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FastbagWarning)
            with fastbag.open(path) as bag:
                seen = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
                topics = list(bag.topics)
            by_topic = {}
            for topic in topics:
                with fastbag.open(path) as bag:
                    index, rows = bag._scope(topic).index, bag.topic_rows(topic)
                    by_topic[topic] = [(topic, t, data) for t, data in zip(index.time[rows].tolist(),
                                                                           located(bag, index, rows))]
            return seen, by_topic
    except FastbagError as exc:
        return type(exc)


def located(bag, index, rows) -> list[bytes]:
    """The bytes of messages ``rows`` of ``index``, located as a read locates them."""
    return [bytes(buf[s:s + n]) for buf, _, _, _, starts, lengths in bag._runs(index, rows, kernel=True)
            for s, n in zip(starts.tolist(), lengths.tolist())]


def assert_as_without_pages(path, monkeypatch) -> None:
    """``fastbag.open(path)`` gives the same messages (or the same error type) with the page reader off."""
    found = what_users_see(path)
    with monkeypatch.context() as patch:
        patch.setattr(Db3, "_read_pages", lambda self, *args: None)
        assert what_users_see(path) == found


def new_database(path, *, page_size: int = 4096, auto_vacuum: int = 0, reserved: int = 0, utf16: bool = False,
                 schema: str = SCHEMA) -> sqlite3.Connection:
    """A connection to a new database with these settings and ``schema`` (``reserved``: bytes SQLite leaves
    unused at each page's end, set by patching the header of the first page before any table exists)."""
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute(f"PRAGMA auto_vacuum = {auto_vacuum}")
    if utf16:
        con.execute("PRAGMA encoding = 'UTF-16le'")
    if reserved:
        con.execute("PRAGMA user_version = 1")  # writes page 1, its b-tree empty
        con.commit()
        con.close()
        head = bytearray(Path(path).read_bytes())
        head[20] = reserved
        head[105:107] = (page_size - reserved).to_bytes(2, "big")  # the (empty) cell content area starts there
        Path(path).write_bytes(bytes(head))
        con = sqlite3.connect(path)
    con.executescript(schema)
    return con


def write_rows(path, rows: list[tuple[int, int, bytes]], *, page_size: int = 1024) -> None:
    """A rosbag2 .db3 holding ``rows`` (topic id, timestamp, data), ids from 1."""
    con = new_database(path, page_size=page_size)
    con.executemany("INSERT INTO topics VALUES (?, ?, 'std_msgs/msg/String', 'cdr', '')", [(1, "/a"), (2, "/b")])
    con.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()


def mixed_rows(n: int, seed: int) -> list[tuple[int, int, bytes]]:
    """``n`` rows of two topics, most blobs small, one in five of 1-4 kB (overflowing 1 kB pages)."""
    rng = np.random.default_rng(seed)
    sizes = np.where(rng.random(n) < 0.2, rng.integers(1000, 4000, n), rng.integers(0, 200, n))
    return [(1 + k % 2, 10**18 + 1000 * k, rng.bytes(int(s))) for k, s in enumerate(sizes)]


# -- every real file --------------------------------------------------------------------------------------

def real_db3_files() -> list:
    """Every ``*.db3`` and ``*.db3.zstd`` under DATA, however deep."""
    files = sorted(p for p in DATA.rglob("*") if p.name.endswith((".db3", ".db3.zstd")) and p.is_file()) \
        if DATA.is_dir() else []
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    return [pytest.param(p, id=str(p.relative_to(DATA))[-80:]) for p in files]


@pytest.mark.parametrize("path", real_db3_files())
def test_real_files_are_read_from_their_pages_as_sqlite_reads_them(path, tmp_path):
    """Every real storage file is read from its pages, and its rows and blobs are SQLite's, through the
    page reader and through ``Db3.rows`` and ``Db3.blobs``."""
    compressed = path.name.endswith(".zstd")
    plain = path
    if compressed:
        plain = tmp_path / "plain.db3"
        plain.write_bytes(zstandard.ZstdDecompressor().stream_reader(path.read_bytes(),
                                                                     read_across_frames=True).read())
    rows = oracle(plain)
    db, table = read_pages(path, compressed=compressed)
    try:
        assert table is not None
        assert_same_rows(table, rows)
        found = db.rows()
        assert db._pages is not None  # rows() read the pages too
        assert_rows_equal(found, rows)
        for topic in sorted({r[1] for r in rows}):  # each topic's blobs as fastbag asks for them
            mine = [r for r in rows if r[1] == topic]
            ids = np.array([r[0] for r in mine], dtype=np.int64)
            got = db.blobs(topic, mine[0][0], mine[-1][0], ids, sum(len(r[3]) for r in mine))
            assert bytes(got) == b"".join(r[3] for r in mine)
    finally:
        db.close()


# -- generated tables: every page size, integer width, blob size, id pattern ----------------------------

@dataclasses.dataclass(frozen=True)
class Table:
    """How a generated messages table is written (see :func:`build`)."""

    page_size: int
    auto_vacuum: int
    reserved: int
    utf16: bool
    rows: int
    ids: str           # "auto" (1, 2, ... as inserted), "sparse" (explicit, spread), "extreme" (any int64)
    shuffled: bool     # explicit ids inserted in random order (pages split mid-tree, not only at the end)
    deleted: float     # the share of rows deleted after inserting
    wide: float        # the share of topic ids and timestamps drawn from WIDTHS
    big: float         # the share of blobs of 0 to 3 pages
    huge: int          # blobs of ~100 kB
    vacuum: bool
    seed: int


tables = st.builds(
    Table, page_size=st.sampled_from([512, 1024, 4096, 65536]), auto_vacuum=st.sampled_from([0, 1, 2]),
    reserved=st.sampled_from([0, 0, 0, 8, 32]), utf16=st.booleans(), rows=st.integers(0, 600) | st.integers(100, 600),
    ids=st.sampled_from(["auto", "sparse", "extreme"]), shuffled=st.booleans(),
    deleted=st.sampled_from([0.0, 0.0, 0.1, 0.5, 0.97]), wide=st.sampled_from([0.0, 0.5, 1.0]),
    big=st.sampled_from([0.0, 0.05, 0.3]), huge=st.integers(0, 3), vacuum=st.booleans(),
    seed=st.integers(0, 2**32 - 1))

#: Blob bytes a generated table holds at most (the rest of its rows then hold small blobs).
BLOB_BUDGET = 2_500_000


def build(path, spec: Table) -> None:
    """Write the messages table ``spec`` describes through SQLite."""
    rng = np.random.default_rng(spec.seed)
    n = spec.rows
    con = new_database(path, page_size=spec.page_size, auto_vacuum=spec.auto_vacuum, reserved=spec.reserved,
                       utf16=spec.utf16)
    con.execute("INSERT INTO topics VALUES (1, '/a', 'std_msgs/msg/String', 'cdr', '')")
    wide = np.array(WIDTHS, dtype=np.int64)
    topics = np.where(rng.random(n) < spec.wide, rng.choice(wide, n), rng.integers(1, 4, n))
    stamps = np.where(rng.random(n) < spec.wide, rng.choice(wide, n),
                      np.where(rng.random(n) < 0.5, 10**18 + np.arange(n, dtype=np.int64) * 997,
                               rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64, endpoint=True)))
    sizes = np.where(rng.random(n) < spec.big, rng.integers(0, 3 * spec.page_size + 1, n), rng.integers(0, 48, n))
    if n:
        sizes[rng.integers(0, n, spec.huge)] = 100_000 + rng.integers(-5, 5, spec.huge)
        sizes[np.cumsum(sizes) > BLOB_BUDGET] = 7
    values = [(int(t), int(s), rng.bytes(int(b))) for t, s, b in zip(topics, stamps, sizes)]
    if spec.ids == "auto":
        con.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (?, ?, ?)", values)
    else:
        if spec.ids == "sparse":
            pool = rng.integers(-10**6, 10**9, 2 * n + 1)
        else:
            pool = np.concatenate([wide, rng.integers(-2**63, 2**63 - 1, 2 * n + 1, dtype=np.int64, endpoint=True)])
        ids = rng.permutation(np.unique(pool))[:n]
        ids = ids if spec.shuffled else np.sort(ids)
        con.executemany("INSERT INTO messages(id, topic_id, timestamp, data) VALUES (?, ?, ?, ?)",
                        [(int(i), *v) for i, v in zip(ids, values)])
    con.commit()
    if spec.deleted:
        present = [r[0] for r in con.execute("SELECT id FROM messages")]
        gone = [(i,) for i, drop in zip(present, rng.random(len(present)) < spec.deleted) if drop]
        con.executemany("DELETE FROM messages WHERE id = ?", gone)
        con.commit()
    if spec.auto_vacuum == 2 and rng.random() < 0.5:
        con.execute("PRAGMA incremental_vacuum(20)").fetchall()
        con.commit()
    if spec.vacuum:
        con.execute("VACUUM")
    con.close()


def absent_ids(ids: np.ndarray) -> list[int]:
    """A few int64 values that are not row ids of the table."""
    present = set(ids.tolist())
    near = [int(ids[0]) - 1, int(ids[-1]) + 1, int(ids[ids.size // 2]) + 1] if ids.size else []
    return [v for v in [0, -1, 5, 2**63 - 1, -2**63, *near] if -2**63 <= v < 2**63 and v not in present]


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=tables)
def test_generated_tables_read_from_pages_equal_sqlite(spec):
    """Whatever the page size, reserved bytes, vacuum mode, encoding, id pattern, integer widths and blob
    sizes (overflow chains included), the pages are read and every row and blob of any subset is SQLite's."""
    with tempfile.TemporaryDirectory(prefix="fastbag-pages-") as folder:
        path = os.path.join(folder, "r.db3")
        build(path, spec)
        rows = oracle(path)
        db, table = read_pages(path)
        try:
            assert table is not None
            assert (table.page_size, table.usable) == (spec.page_size, spec.page_size - spec.reserved)
            assert_same_rows(table, rows)
            assert table.current()
            rng = np.random.default_rng(spec.seed + 1)
            for share in (0.0, 0.03, 0.5, 1.0):  # ascending subsets of the ids
                pick = np.flatnonzero(rng.random(len(rows)) < share)
                got = table.blobs(table.id[pick])
                assert got is not None and got.tobytes() == b"".join(rows[k][3] for k in pick)
            for missing in absent_ids(table.id):  # an id the table lacks, alone and among others
                assert table.blobs(np.array([missing], dtype=np.int64)) is None
                assert table.blobs(np.unique(np.append(table.id[:3], missing))) is None
            assert_rows_equal(db.rows(), rows)
            for topics in ([1], [2], [2, 1], [3]):  # some topics' rows alone, as a topic's own index reads them
                kept = db._read_pages(np.array(topics, dtype=np.int64))
                assert kept is not None
                assert_same_rows(kept, [r for r in rows if r[1] in topics])
        finally:
            db.close()


def varint(value: int, size: int) -> bytes:
    """``value`` (below 2**(7 * size), size at most 8) as an SQLite varint of ``size`` bytes."""
    return bytes((value >> 7 * (size - 1 - k)) & 0x7F | (0x80 if k < size - 1 else 0) for k in range(size))


def test_some_topics_rows_of_a_table_walked_in_two_parts_equal_sqlite(tmp_path, monkeypatch):
    """A large table's rows of some topics, walked in two parts: a rare topic's few rows (copied out of
    arrays sized for every row), a common one's (moved together in place), both; each part's rows and the
    seam between them in rowid order, as SQLite reads them."""
    splits: list = []
    split_point = pages._split_point
    monkeypatch.setattr(pages, "_split_point", lambda *a: splits.append(split_point(*a)) or splits[-1])
    path = tmp_path / "large.db3"
    n = 2 * pages.PART_ROWS + 3000
    write_rows(path, [(2 if k % 97 == 5 else 1, 10**18 + k, b"%d" % k) for k in range(n)])
    rows = oracle(path)
    db = Db3(str(path))
    try:
        db.totals()
        for topics in ([2], [1], [1, 2], [3]):
            kept = db._read_pages(np.array(topics, dtype=np.int64))
            assert kept is not None
            assert_same_rows(kept, [r for r in rows if r[1] in topics])
            assert splits[-1] is not None  # (walked in two parts)
    finally:
        db.close()


@pytest.mark.parametrize("ids", ["ids from 10**12", "the first rows deleted"])
def test_a_large_table_walked_in_two_parts_equals_sqlite(ids, tmp_path, monkeypatch):
    """A table of consecutive ids large enough to be walked in two parts at once (split at its root's middle
    key) is read as SQLite reads it; with that key changed (SQLite's scan never reads it), the pages are read
    right or not at all."""
    splits: list = []
    if hasattr(pages, "_split_point"):  # (record where the walk is split)
        split_point = pages._split_point
        monkeypatch.setattr(pages, "_split_point", lambda *a: splits.append(split_point(*a)) or splits[-1])
    path = tmp_path / "large.db3"
    n = 2 * getattr(pages, "PART_ROWS", 1 << 16) + 3000
    con = new_database(path, page_size=1024)
    con.execute("INSERT INTO topics VALUES (1, '/a', 'std_msgs/msg/String', 'cdr', '')")
    first = 10**12 if ids == "ids from 10**12" else 1
    con.executemany("INSERT INTO messages VALUES (?, 1, ?, ?)", ((first + k, 7 * k, b"%d" % k) for k in range(n)))
    if ids == "the first rows deleted":
        con.execute("DELETE FROM messages WHERE id <= 1000")
    con.commit()
    con.close()
    rows = oracle(path)
    db, table = read_pages(path)
    try:
        assert table is not None
        assert_same_rows(table, rows)
    finally:
        db.close()
    if not splits:
        return
    assert len(splits) == 1 and splits[0] is not None
    middle, key = splits[0]
    assert rows[0][0] <= key < rows[-1][0]
    # the middle key's varint, in the root's middle cell after the left child's page number
    data = bytearray(path.read_bytes())
    base = (root_page(path) - 1) * 1024
    cell = base + int.from_bytes(data[base + 12 + 2 * middle:base + 14 + 2 * middle], "big") + 4
    size = next(k for k in range(8) if data[cell + k] < 0x80) + 1
    assert varint(key, size) == data[cell:cell + size]
    for changed in (key - 5, key + 5):
        data[cell:cell + size] = varint(changed, size)
        path.write_bytes(bytes(data))
        assert oracle(path) == rows
        db, table = read_pages(path)
        try:
            assert table is None or differences(table, rows) is None
        finally:
            db.close()


# -- other schemas ----------------------------------------------------------------------------------------

BLOB = bytes(range(256)) * 20  # 5120 bytes: overflows a 4 kB page


def schema_case(path, ddl: str, statements: list[tuple[str, list[tuple]]]) -> None:
    pragma, sep, rest = ddl.partition(";") if ddl.startswith("PRAGMA") else ("", "", ddl)
    con = sqlite3.connect(path)
    con.executescript(pragma + sep + TOPICS + rest)  # (a PRAGMA first: the encoding is set before any table)
    con.execute("INSERT INTO topics VALUES (1, '/a', 'std_msgs/msg/String', 'cdr', '')")
    for sql, rows in statements:
        if rows:
            con.executemany(sql, rows)
        else:
            con.execute(sql)
    con.commit()
    con.close()


ROSBAG2_MESSAGES = "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, data BLOB);"
INSERT = "INSERT INTO messages(id, topic_id, timestamp, data) VALUES (?, ?, ?, ?)"
ROWS = [(1, 1, 100, b"one"), (2, 1, 200, BLOB), (5, 1, 150, b""), (9, 1, 300, b"\x00\x01")]
EXTRA_ROWS = [(*r, e) for r, e in zip(ROWS, ["x", None, 2**40, b"\xff" * 5000])]

#: (ddl, statements): tables whose records are laid out otherwise than rosbag2's; read right, or not at all.
READ_OR_REFUSED = {
    "columns in another order (a blob before the integers overflows)": (
        "CREATE TABLE messages(data BLOB, timestamp INTEGER, id INTEGER PRIMARY KEY, topic_id INTEGER);",
        [(INSERT, ROWS)]),
    "columns in another order, every value in the leaf": (
        "CREATE TABLE messages(data BLOB, timestamp INTEGER, id INTEGER PRIMARY KEY, topic_id INTEGER);",
        [(INSERT, [(1, 1, 100, b"one"), (2, 2, -2**63, b"x" * 300), (5, 1, 150, b""), (9, 7, 2**40, b"\0\1")])]),
    "an extra column before data": (
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, extra, data BLOB);",
        [("INSERT INTO messages(id, topic_id, timestamp, data, extra) VALUES (?, ?, ?, ?, ?)", EXTRA_ROWS[:3])]),
    "an extra column before data, large enough that data starts in the overflow pages": (
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, extra, data BLOB);",
        [("INSERT INTO messages(id, topic_id, timestamp, data, extra) VALUES (?, ?, ?, ?, ?)", EXTRA_ROWS)]),
    "an extra column after data": (
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, data BLOB, extra);",
        [("INSERT INTO messages(id, topic_id, timestamp, data, extra) VALUES (?, ?, ?, ?, ?)", EXTRA_ROWS)]),
    "rows written before a column was added (records shorter than the schema)": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS[:2]), ("ALTER TABLE messages ADD COLUMN extra INTEGER", []),
                           ("INSERT INTO messages(id, topic_id, timestamp, data, extra) VALUES (?, ?, ?, ?, 7)",
                            ROWS[2:])]),
    "every row written before a column was added": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS), ("ALTER TABLE messages ADD COLUMN extra INTEGER DEFAULT 3", [])]),
    "a virtual generated column between the integers": (
        ("CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, g BLOB AS (x'abcd') VIRTUAL, "
         "timestamp INTEGER, data BLOB);"), [(INSERT, ROWS)]),
    "lower-case names and types, AUTOINCREMENT": (
        ("create table messages(ID integer primary key autoincrement, Topic_Id integer, TIMESTAMP integer, "
         "Data blob);"), [(INSERT, ROWS)]),
    "a UTF-16 database": (
        "PRAGMA encoding = 'UTF-16be'; " + ROSBAG2_MESSAGES, [(INSERT, ROWS)]),
}

#: (ddl, statements): tables the pages reader must leave to SQLite.
REFUSED = {
    "WITHOUT ROWID": (
        ("CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, data BLOB) "
         "WITHOUT ROWID;"), [(INSERT, ROWS)]),
    "id not the primary key": (
        "CREATE TABLE messages(id INTEGER, topic_id INTEGER, timestamp INTEGER, data BLOB);", [(INSERT, ROWS)]),
    "id a primary key of type INT (not a rowid alias)": (
        "CREATE TABLE messages(id INT PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, data BLOB);",
        [(INSERT, ROWS)]),
    "a two-column primary key": (
        ("CREATE TABLE messages(id INTEGER, topic_id INTEGER, timestamp INTEGER, data BLOB, "
         "PRIMARY KEY(id, topic_id));"), [(INSERT, ROWS)]),
    "data stored as TEXT in one row": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS), ("UPDATE messages SET data = 'text' WHERE id = 5", [])]),
    "a NULL timestamp in one row": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS), ("UPDATE messages SET timestamp = NULL WHERE id = 2", [])]),
    "a REAL timestamp in one row": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS), ("UPDATE messages SET timestamp = 1.5 WHERE id = 9", [])]),
    "a TEXT topic id in one row": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS), ("UPDATE messages SET topic_id = 'one' WHERE id = 1", [])]),
    "a NULL blob in one row": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS), ("UPDATE messages SET data = NULL WHERE id = 1", [])]),
    "an integer blob in one row": (
        ROSBAG2_MESSAGES, [(INSERT, ROWS), ("UPDATE messages SET data = 12 WHERE id = 1", [])]),
}

#: Tables whose ids, blobs or integers SQLite reads otherwise than their records' bytes say (this suite found
#: the pages reader misreading each; now each is refused, or read as SQLite reads it).
MISREAD = {
    "INTEGER PRIMARY KEY DESC (not a rowid alias: the reader returns the rowids, not the ids)": (
        "CREATE TABLE messages(id INTEGER PRIMARY KEY DESC, topic_id INTEGER, timestamp INTEGER, data BLOB);",
        [(INSERT, [(10, 1, 100, b"x"), (5, 1, 200, b"y"), (7, 1, 300, b"z")])]),
    "a STORED generated column before data (PRAGMA table_info hides it: its blob is read as data)": (
        ("CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, "
         "g BLOB AS (x'abcd') STORED, data BLOB);"), [(INSERT, ROWS)]),
    "topic_id of REAL affinity (SQLite reads 1.0, stored as the integer 1)": (
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id REAL, timestamp INTEGER, data BLOB);",
        [(INSERT, ROWS)]),
    "timestamp of REAL affinity (SQLite reads 100.0, stored as the integer 100)": (
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp DOUBLE, data BLOB);",
        [(INSERT, ROWS)]),
}


def _check_schema(path, expect_refused: bool, monkeypatch) -> None:
    rows = oracle(path)
    db = Db3(str(path))
    try:
        try:
            db.totals()
        except FastbagError:
            pass  # (timestamps that are not all integers: the table is read row by row)
        table = db._read_pages()
        if expect_refused:
            assert table is None
        elif table is not None:
            assert_same_rows(table, rows)
        if all(type(v) is int for r in rows for v in r[:3]) and all(type(r[3]) is bytes for r in rows):
            assert_rows_equal(db.rows(), rows)
    finally:
        db.close()
    assert_as_without_pages(path, monkeypatch)


@pytest.mark.parametrize("name", list(READ_OR_REFUSED))
def test_other_layouts_are_read_as_sqlite_reads_them_or_left_to_it(name, tmp_path, monkeypatch):
    """A messages table of another column order, extra columns or records shorter than its schema is read
    from the pages exactly as SQLite reads it, or not at all; ``Db3.rows`` and ``fastbag.open`` agree."""
    schema_case(tmp_path / "r.db3", *READ_OR_REFUSED[name])
    _check_schema(tmp_path / "r.db3", False, monkeypatch)


@pytest.mark.parametrize("name", list(REFUSED))
def test_layouts_the_pages_reader_cannot_take_are_left_to_sqlite(name, tmp_path, monkeypatch):
    """WITHOUT ROWID, an id that is not the rowid, and rows holding TEXT, NULL or REAL where rosbag2
    writes integers and blobs: ``_read_pages`` returns None and ``fastbag.open`` behaves as without it."""
    schema_case(tmp_path / "r.db3", *REFUSED[name])
    _check_schema(tmp_path / "r.db3", True, monkeypatch)


@pytest.mark.parametrize("name", list(MISREAD))
def test_tables_sqlite_reads_otherwise_than_their_bytes_are_read_as_sqlite_does(name, tmp_path, monkeypatch):
    """Tables whose ids, blobs or integer types SQLite reads otherwise than their records' bytes say: read
    exactly as SQLite reads them, or left to it; what users see is then SQLite's rows in time order."""
    schema_case(tmp_path / "r.db3", *MISREAD[name])
    _check_schema(tmp_path / "r.db3", False, monkeypatch)
    rows = oracle(tmp_path / "r.db3")
    if all(type(v) is int for r in rows for v in r[:3]):
        expected = [("/a", t, data) for _, _, t, data in sorted(rows, key=lambda r: (r[2], r[0]))]
        assert what_users_see(tmp_path / "r.db3") == (expected, {"/a": expected})


# -- damage -----------------------------------------------------------------------------------------------

def mutate(data: bytes, table: pages.TablePages, rng: np.random.Generator, kind: int) -> tuple[bytes, str]:
    """``data`` with some bytes replaced, and a description: anywhere (one byte, or a run of 2-16), in a
    record's first bytes (cell header, rowid, record header), or in the header of a page holding rows."""
    damaged = bytearray(data)
    if kind == 0:
        at, new = int(rng.integers(0, len(data))), rng.bytes(1)
    elif kind == 1:
        at, new = int(rng.integers(0, len(data))), rng.bytes(int(rng.integers(2, 17)))
    elif kind == 2:
        row = int(rng.integers(0, table.id.size))
        at, new = int(table.at[row]) - int(rng.integers(1, 16)), rng.bytes(int(rng.integers(1, 3)))
    else:
        page = int(table.at[int(rng.integers(0, table.id.size))]) // table.page_size
        at = page * table.page_size + (100 if page == 0 else 0) + int(rng.integers(0, 8))
        new = rng.bytes(int(rng.integers(1, 3)))
    damaged[at:at + len(new)] = new
    return bytes(damaged[:len(data)]), f"{len(new)} bytes at {at} set to {new.hex()}"


def unreadable_rows_verdict(table: pages.TablePages, path, error: Exception) -> str | None:
    """Where SQLite's scan of a damaged table fails: None when every row SQLite reads alone is the pages' and
    every row it cannot read has its blob refused by the pages too (``Db3.blobs`` then asks SQLite, which
    names the damage); else how they disagree."""
    con = sqlite3.connect(_uri(path), uri=True)
    try:
        for k, rowid in enumerate(table.id.tolist()):
            try:
                row = con.execute("SELECT id, topic_id, timestamp, data FROM messages WHERE id = ?", (rowid,)).fetchone()
            except (sqlite3.Error, ValueError):
                if table.blobs(table.id[k:k + 1]) is not None:
                    return f"a row SQLite cannot read ({error}) is read from the pages"
                continue
            if row is None:
                return "a row SQLite cannot find by its id is read from the pages"
            if differences(dataclasses.replace(table, **{name: getattr(table, name)[k:k + 1] for name in (
                    "id", "topic_id", "timestamp", "length", "at", "local", "overflow")}), [row]) is not None:
                return "a row SQLite reads alone differs"
    finally:
        con.close()
    return None


def damage_outcome(path, name: str) -> tuple[str, str | None, bool]:
    """What fastbag makes of a damaged file: (how its table is read, how the pages disagree with SQLite or
    None, whether SQLite's integrity check passes); fails the test where reading the pages raises."""
    try:
        rows, sql_error = oracle(path), None
    except (sqlite3.Error, ValueError) as exc:  # (ValueError: SQLite's message quotes damaged bytes)
        rows, sql_error = None, exc
    ok = integrity_ok(path)
    try:
        db = Db3(str(path))
    except FastbagError:
        return "not opened (SQLite cannot read the schema)", None, ok
    try:
        try:
            db.totals()
        except FastbagError:
            pass
        try:
            found = db._read_pages()
            if found is None:
                return "fell back to SQLite", None, ok
            verdict = differences(found, rows) if rows is not None else unreadable_rows_verdict(found, path, sql_error)
            del found
        except Exception as exc:  # noqa: BLE001 - what must never happen, with the mutation named
            pytest.fail(f"{name}: _read_pages or blobs raised {exc!r}")
    finally:
        db.close()
    if rows is None and verdict is None:
        return "read from the pages; SQLite's scan fails, and each blob it cannot read is refused too", None, ok
    return "read from the pages" + (" (integrity check ok)" if ok else ""), verdict, ok


def test_random_damage_never_raises_and_what_is_read_agrees_with_sqlite(tmp_path):
    """Under 200 seeded mutations of a file's bytes, ``_read_pages`` and ``blobs`` never raise, and whatever
    they read is what SQLite reads (row by row where its scan fails). The three disagreements this test first
    found (values ending before their record's payload, which SQLite calls malformed) are refused now."""
    source = tmp_path / "source.db3"
    write_rows(source, mixed_rows(300, seed=7))
    data = source.read_bytes()
    db, table = read_pages(source)
    try:
        assert table is not None and (table.overflow > 0).sum() > 30
        assert_same_rows(table, oracle(source))
        # (plain copies: the mapping is closed with the Db3)
        layout = pages.TablePages(np.frombuffer(data, np.uint8), table.page_size, table.usable, *(
            getattr(table, k).copy() for k in ("id", "topic_id", "timestamp", "length", "at", "local", "overflow")),
            change_counter=table.change_counter)
    finally:
        db.close()
    rng = np.random.default_rng(20240611)
    outcomes: Counter = Counter()
    examples: dict[str, str] = {}
    for trial in range(200):
        damaged, mutation = mutate(data, layout, rng, trial % 4)
        path = tmp_path / "damaged.db3"
        path.write_bytes(damaged)
        outcome, verdict, ok = damage_outcome(path, f"trial {trial} ({mutation})")
        path.unlink()
        outcomes[outcome] += 1
        if verdict is not None:
            outcomes[f"disagreed: {verdict}"] += 1
            examples.setdefault(verdict, f"trial {trial}: {mutation}")
        assert not (ok and verdict is not None), f"trial {trial} ({mutation}): integrity ok, but {verdict}"
    print(f"\ndamage outcomes: {dict(outcomes)}\nfirst example of each disagreement: {examples}")
    assert not examples, examples
    assert sum(n for k, n in outcomes.items() if not k.startswith("disagreed")) == 200
    assert outcomes["read from the pages (integrity check ok)"] and outcomes["fell back to SQLite"]  # both taken


def test_a_record_whose_values_end_before_its_payload_is_not_read(tmp_path, monkeypatch):
    """A blob's serial type made one byte shorter than the record holds: SQLite finds the record malformed,
    so the pages must not hand out the shortened blob (``fastbag.open`` must behave as through SQLite)."""
    path = tmp_path / "short.db3"
    write_rows(path, [(1, 10**18 + k, bytes([k]) * 100) for k in range(5)])
    db, table = read_pages(path)
    try:
        at = int(table.at[2])
    finally:
        db.close()
    damaged = bytearray(path.read_bytes())
    # the record's header ends with the blob's serial type (12 + 2 * 100 = 212: 0x81 0x54), then its body holds
    # the topic id (1: serial type 9, no bytes) and the timestamp (8 bytes) before the blob
    assert damaged[at - 10:at - 8] == b"\x81\x54"
    damaged[at - 10:at - 8] = b"\x81\x52"  # a 99-byte blob
    path.write_bytes(bytes(damaged))
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        oracle(path)
    assert not integrity_ok(path)
    db, table = read_pages(path)
    try:
        assert table is None or table.blobs(np.array([3], dtype=np.int64)) is None
    finally:
        db.close()
    assert_as_without_pages(path, monkeypatch)


@pytest.mark.parametrize("target", ["beyond the end", "zero (the chain ends early)"])
def test_an_overflow_pointer_leaving_the_file_is_left_to_sqlite_which_names_the_file(target, tmp_path):
    """A blob whose overflow chain points past the file's end (or ends early) is not copied from the pages;
    SQLite then reads the row, and the error a user gets is a FastbagError naming the file."""
    path = tmp_path / "pointer.db3"
    write_rows(path, mixed_rows(60, seed=3))
    db, table = read_pages(path)
    try:
        row = int(np.flatnonzero(table.overflow)[3])
        rowid, at = int(table.id[row]), int(table.at[row] + table.local[row])  # the pointer ends the leaf bytes
        npages = table.buf.size // table.page_size
        assert int.from_bytes(table.buf[at:at + 4].tobytes(), "big") == table.overflow[row]
    finally:
        db.close()
    damaged = bytearray(path.read_bytes())
    damaged[at:at + 4] = (npages + 1000 if target == "beyond the end" else 0).to_bytes(4, "big")
    path.write_bytes(bytes(damaged))
    db, table = read_pages(path)
    try:
        assert table is None or table.blobs(np.array([rowid], dtype=np.int64)) is None
        if table is not None:  # the other rows still come from the pages
            assert table.blobs(np.array([int(table.id[0])], dtype=np.int64)) is not None
        found = db.rows()
        k = int(np.flatnonzero(found.id == rowid)[0])
        with pytest.raises(BagFormatError, match=re.escape(path.name)):  # through SQLite, which names the damage
            db.blobs(int(found.topic_id[k]), rowid, rowid, found.id[k:k + 1], int(found.length[k]))
    finally:
        db.close()
    with pytest.raises(FastbagError) as info, fastbag.open(path) as bag:
        for _ in bag.messages(raw=True):
            pass
    assert path.name in str(info.value)


@pytest.mark.parametrize("cut", ["at a page boundary", "mid-page"])
def test_a_file_cut_short_mid_table_is_left_to_sqlite(cut, tmp_path):
    """A file cut in the middle of its messages table is not read from the pages (SQLite answers)."""
    whole = tmp_path / "whole.db3"
    write_rows(whole, [(1, 10**18 + k, b"m%d" % k) for k in range(3000)])
    data = whole.read_bytes()
    db, table = read_pages(whole)
    try:
        assert table is not None and table.id.size == 3000
        page_size = table.page_size
    finally:
        db.close()
    end = (len(data) // page_size // 2) * page_size + (0 if cut == "at a page boundary" else page_size // 2 + 3)
    path = tmp_path / "cut.db3"
    cut_short = bytearray(data[:end])
    cut_short[28:32] = (end // page_size).to_bytes(4, "big")  # the header's page count as the file's (else
    path.write_bytes(bytes(cut_short))                           # SQLite cannot even read the schema)
    con = sqlite3.connect(_uri(whole), uri=True)
    columns = con.execute("PRAGMA table_xinfo(messages)").fetchall()
    con.close()
    places, root = pages.column_places(SCHEMA, columns, True), root_page(whole)
    assert places == (4, 1, 2, 3)
    assert pages.read_table(np.frombuffer(data, np.uint8), root, places, 3000) is not None
    assert pages.read_table(np.frombuffer(bytes(cut_short), np.uint8), root, places, 3000) is None
    db = Db3(str(path))
    try:
        try:
            db.totals()
        except FastbagError:
            pass
        assert db._read_pages() is None
    finally:
        db.close()


# -- a file that changes, or is being written -------------------------------------------------------------

def test_a_commit_by_another_connection_is_noticed(tmp_path):
    """``TablePages.current`` holds after reading and not once another connection commits to the file (rollback
    journal mode); ``Db3.blobs`` then raises, naming the file (the index no longer describes it, and SQLite,
    opened immutable, may answer from pages it cached before)."""
    path = tmp_path / "r.db3"
    rows = mixed_rows(40, seed=5)
    write_rows(path, rows)
    db = Db3(str(path))
    try:
        db.totals()
        db.rows()
        table = db._pages
        assert table is not None and table.current()
        assert bytes(db.blobs(1, 1, 1, np.array([1]), len(rows[0][2]))) == rows[0][2]
        assert db._pages is table  # (still current: still the pages)
        writer = sqlite3.connect(path)
        assert writer.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        writer.execute("UPDATE messages SET data = ? WHERE id = 1", (b"\xee" * len(rows[0][2]),))
        writer.commit()
        writer.close()
        assert not table.current()
        with pytest.raises(BagFormatError, match=r"changed after it was opened.*open it again.*r\.db3"):
            db.blobs(1, 1, 1, np.array([1]), len(rows[0][2]))
    finally:
        db.close()


def test_a_file_with_a_write_ahead_log_is_read_through_sqlite(tmp_path):
    """A file whose -wal holds committed rows (its writer still open) is not read from the pages, and
    ``fastbag.open`` reads every committed message, with the writer's -shm and from a copy without it."""
    folder = tmp_path / "rec"
    folder.mkdir()
    path = folder / "r_0.db3"
    rows = mixed_rows(50, seed=9)
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.executescript(SCHEMA)
    writer.executemany("INSERT INTO topics VALUES (?, ?, 'std_msgs/msg/String', 'cdr', '')", [(1, "/a"), (2, "/b")])
    writer.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (?, ?, ?)", rows)
    writer.commit()
    writer.execute("INSERT INTO messages(topic_id, timestamp, data) VALUES (1, 5, x'00')")  # not committed
    try:
        assert os.path.getsize(str(path) + "-wal") > 0
        copy = tmp_path / "copy"
        copy.mkdir()
        for name in ("r_0.db3", "r_0.db3-wal"):
            shutil.copy(folder / name, copy / name)
        expected = [("/a" if t == 1 else "/b", ts, d) for t, ts, d in rows]
        for file in (path, copy / "r_0.db3"):
            db = Db3(str(file))
            try:
                assert db.totals()[0] == 50
                assert db._read_pages() is None
                assert any("write-ahead log" in p for p in db.problems)
            finally:
                db.close()
            with pytest.warns(FastbagWarning, match="write-ahead log"):
                bag = fastbag.open(file)
            with bag:
                assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == expected
    finally:
        writer.rollback()
        writer.close()


def test_header_fields_outside_the_layout_read_are_refused():
    """``layout`` refuses a header that is not SQLite's (magic, page size, payload fractions, usable size)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r.db3")
        new_database(path, page_size=65536).close()
        head = np.frombuffer(Path(path).read_bytes()[:100], np.uint8)
    assert pages.layout(head) == (65536, 65536)
    for at, value in [(0, b"X"), (16, b"\x03\x00"), (16, b"\x00\x80"), (21, b"\x41"), (23, b"\x21")]:
        damaged = bytearray(head.tobytes())
        damaged[at:at + len(value)] = value
        assert pages.layout(np.frombuffer(bytes(damaged), np.uint8)) is None, (at, value)
    small = bytearray(head.tobytes())
    small[16:18], small[20] = b"\x02\x00", 33  # 512-byte pages, 479 usable: fewer than SQLite allows
    assert pages.layout(np.frombuffer(bytes(small), np.uint8)) is None
    small[20] = 32
    assert pages.layout(np.frombuffer(bytes(small), np.uint8)) == (512, 480)
    assert pages.layout(head[:99]) is None


def _chain_pages(table: pages.TablePages, row: int) -> list[int]:
    """The overflow pages of row ``row``'s blob, in chain order (read through the mapping)."""
    buf, room = table.buf, table.usable - 4
    page, rest, chain = int(table.overflow[row]), int(table.length[row] - table.local[row]), []
    while rest > 0:
        chain.append(page)
        start = (page - 1) * table.page_size
        page = int.from_bytes(buf[start:start + 4].tobytes(), "big")
        rest -= min(rest, room)
    return chain


def test_leaves_and_chains_read_with_pread_equal_the_mapping_and_sqlite(tmp_path):
    """The pages reader reads leaves and long blobs' overflow chains with pread, runs of pages at a time,
    guessing that a chain's pages follow one another. Rows deleted and written again (freed pages reused)
    leave chains that jump about and leaves out of file order; the pread reads must equal the mapping's
    and SQLite's rows there too."""
    path = tmp_path / "reused.db3"
    rng = np.random.default_rng(7)
    rows = [(1 + k % 2, 1000 * k, rng.bytes(int(rng.integers(1500, 9000)) if k % 3 == 0 else 40))
            for k in range(600)]
    write_rows(path, rows)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM messages WHERE id % 7 = 0 OR (id > 200 AND id < 260)")
    con.commit()
    con.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (?, ?, ?)",
                    [(1, 10**9 + k, rng.bytes(int(rng.integers(1500, 20000)))) for k in range(120)])
    con.commit()
    con.close()
    expected = oracle(path)
    db, table = read_pages(path)  # the leaves read with pread
    try:
        assert table is not None
        assert_same_rows(table, expected)  # blobs through the mapping
        with db._source.descriptor() as fd:
            assert table.blobs(table.id, fd).tobytes() == b"".join(r[3] for r in expected)
            for k in rng.choice(table.id.size, 40, replace=False):
                one = table.id[k:k + 1]
                assert table.blobs(one, fd).tobytes() == expected[k][3]
        chains = [_chain_pages(table, k) for k in range(table.id.size) if table.overflow[k]]
        jumps = sum(any(b != a + 1 for a, b in zip(c, c[1:])) for c in chains)
        assert jumps > 0, "no chain out of file order: the test does not reach the pread path's fallback"
        mapped = pages.read_table(table.buf, root_page(path), (4, 1, 2, 3), table.id.size)
        assert mapped is not None and all(np.array_equal(getattr(mapped, n), getattr(table, n)) for n in
                                          ("id", "topic_id", "timestamp", "length", "at", "local", "overflow"))
    finally:
        db.close()
    in_order = [("/a" if t == 1 else "/b", ts, data) for _, t, ts, data in sorted(expected, key=lambda r: (r[2], r[0]))]
    assert what_users_see(path) == (in_order, {topic: [m for m in in_order if m[0] == topic] for topic in ("/a", "/b")})
