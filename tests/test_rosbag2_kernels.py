"""The sqlite3 index kernels (fastbag/rosbag2/kernels.py) against plain Python and NumPy references.

``parse_integers`` turns SQLite's ``group_concat`` of an integer column into int64: it must give exactly
the numbers SQLite wrote, and refuse (-1) anything else a hostile file's column could hold, so that the
reader falls back to reading rows one by one. ``chunk_rows`` cuts rows into chunks: it must give what
the NumPy formulation gives. (A process that has not loaded Numba parses and cuts a small file's rows
with Python and NumPy: both ways are compared here.)
"""

from __future__ import annotations

import sqlite3
import warnings
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rosbag2 import sample_rows, write_db3, write_metadata

import fastbag
from fastbag.errors import FastbagWarning
from fastbag.io import startup
from fastbag.rosbag2 import reader
from fastbag.rosbag2.kernels import chunk_rows, parse_integers
from fastbag.rosbag2.sqlite import _numbers

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def parse(text: bytes, room: int | None = None) -> list[int] | int:
    """The kernel's parse of ``text`` (-1: refused), checked against the reader's two ways of reading a
    column: by the kernel, and by the Python parse of a process without Numba (the same numbers, or both
    refuse)."""
    out = np.zeros(room if room is not None else text.count(b",") + 1, dtype=np.int64)
    got = parse_integers(np.frombuffer(text, dtype=np.uint8), out)
    assert numbers(text, room, numba=True) == numbers(text, room, numba=False) == \
        (out.tolist() if got == out.size else -1)
    return got if got < 0 else out[:got].tolist()


def numbers(text: bytes, count: int | None, *, numba: bool) -> list[int] | int:
    """What the sqlite3 reader makes of a ``group_concat`` of ``count`` numbers (-1: refused), in a process
    with Numba loaded or without."""
    with mock.patch.object(startup, "numba_loaded", lambda: numba):
        try:
            return _numbers(text, "test", count).tolist()
        except ValueError:
            return -1


@settings(max_examples=300, deadline=None)
@given(st.lists(INT64, min_size=1, max_size=50))
def test_parse_integers_reads_what_sqlite_writes(values):
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (v INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
    text = con.execute("SELECT group_concat(v) FROM t").fetchone()[0].encode()
    assert parse(text) == values


@pytest.mark.parametrize("text", [
    b"9223372036854775807", b"-9223372036854775808", b"0", b"-0", b"7,-7,0,12345678901234567"])
def test_parse_integers_edges(text):
    assert parse(text) == [int(v) for v in text.split(b",")]


@pytest.mark.parametrize("text", [
    b"9223372036854775808", b"-9223372036854775809", b"12345678901234567890", b"1,,2", b",1", b"1,",
    b"-", b"--1", b"1-2", b"+1", b"1.5", b"1e3", b" 1", b"1 ", b"0x10", b"\xff", b"1,2\x00"])
def test_parse_integers_refuses_what_is_not_a_list_of_int64(text):
    assert parse(text) == -1


def test_parse_integers_refuses_more_numbers_than_expected():
    assert parse(b"1,2,3", room=2) == -1
    assert parse(b"1,2,3", room=4) == [1, 2, 3]  # fewer: the caller compares the count


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_chunk_rows_equals_the_numpy_formulation(data):
    """The kernel's chunks (numbered from ``base``) are the NumPy formulation's, which a process without
    Numba uses for small files."""
    ranks = data.draw(st.integers(1, 5))
    n = data.draw(st.integers(0, 60))
    rank = np.array(data.draw(st.lists(st.integers(0, ranks - 1), min_size=n, max_size=n)), dtype=np.int32)
    length = np.array(data.draw(st.lists(st.integers(0, 300), min_size=n, max_size=n)), dtype=np.int64)
    segmented = data.draw(st.booleans())
    segment = np.sort(np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                               dtype=np.int64)) if segmented else np.zeros(0, dtype=np.int64)
    chunk_bytes = data.draw(st.integers(1, 500))
    base = data.draw(st.integers(0, 1000))
    order, chunk, number, first, count, size = chunk_rows(rank, length, segment, ranks, chunk_bytes, base)
    with mock.patch.object(startup, "numba_loaded", lambda: False):
        want = reader.chunk_rows(rank, length, segment, ranks, chunk_bytes)
    assert order.tolist() == want[0].tolist()
    assert chunk.dtype == want[1].dtype == np.int32 and (chunk - base).tolist() == want[1].tolist()
    for got, expected in zip((number, first, count, size), want[2:]):
        assert got.tolist() == expected.tolist() and got.dtype == expected.dtype


@pytest.mark.parametrize("stray", [9, 0], ids=["beyond-the-ids", "among-the-ids"])
@pytest.mark.parametrize("a_id", [1, 1 << 40, -5], ids=["small-ids", "large-id", "negative-id"])
def test_rows_of_a_topic_id_the_topics_table_lacks_are_left_out_and_said(tmp_path, a_id, stray):
    """A row naming a topic id no topic has (9, beyond the table's; 0, inside its range): said once, left out;
    every other row reads as written. Small topic ids are looked up in a table, others searched: both ways."""
    rows = [(a_id if t == 1 else t, ts, data) for t, ts, data in sample_rows(20)]
    write_db3(tmp_path / "r_0.db3", rows[:7] + [(stray, rows[7][1], b"stray")] + rows[8:],
              topics=((a_id, "/a", "std_msgs/msg/String"), (2, "/b", "std_msgs/msg/Int32")))
    write_metadata(tmp_path, ["r_0.db3"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(tmp_path) as bag:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
            assert {t: i.message_count for t, i in bag.topics.items()} == {"/a": 10, "/b": 9}
    kept = [r for k, r in enumerate(rows) if k != 7]
    assert got == [({a_id: "/a", 2: "/b"}[t], ts, data) for t, ts, data in kept]
    said = [str(w.message) for w in caught if issubclass(w.category, FastbagWarning)]
    assert len(said) == 1 and "1 messages name a topic id missing from the topics table" in said[0]


@pytest.mark.parametrize("column, value", [("timestamp", 2.5), ("timestamp", "soon"), ("topic_id", "one"),
                                           ("topic_id", 1.5), ("data", None)])
def test_a_row_whose_number_is_not_an_integer_is_left_out_and_said(tmp_path, column, value):
    """A column holding a REAL or a TEXT (SQLite keeps what it cannot turn into an integer), or a NULL
    blob, makes the joined text no list of integers: the parser refuses it, the rows are read one by
    one, the odd row is left out and said, and every other row reads as written, also the rows of its
    topic around it (their chunk's id range holds it: the blob fetch must leave it out too)."""
    rows = sample_rows(12)
    write_db3(tmp_path / "r_0.db3", rows)
    con = sqlite3.connect(tmp_path / "r_0.db3")
    # rosbag2's table refuses a NULL blob; a table without that constraint (as the fuzz campaign makes) does not
    con.executescript("CREATE TABLE m2(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, data BLOB);"
                      "INSERT INTO m2 SELECT * FROM messages; DROP TABLE messages;"
                      "ALTER TABLE m2 RENAME TO messages;")
    con.execute(f"UPDATE messages SET {column} = ? WHERE id = 5", (value,))
    con.commit()
    assert con.execute(f"SELECT typeof({column}) FROM messages WHERE id = 5").fetchone()[0] in ("real", "text",
                                                                                               "null")
    con.close()
    write_metadata(tmp_path, ["r_0.db3"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(tmp_path) as bag:
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
    assert got == [({1: "/a", 2: "/b"}[t], ts, data) for k, (t, ts, data) in enumerate(rows) if k != 4]
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, FastbagWarning))
    assert "1 malformed rows left out" in said
