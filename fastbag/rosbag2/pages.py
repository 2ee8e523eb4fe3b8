"""A rosbag2 ``messages`` table read straight from the SQLite file's pages.

SQLite's own scan copies every row through its page cache and a query's
result (``group_concat`` text, parsed again): ~0.2 s for a million rows. The
file format is public and stable (https://www.sqlite.org/fileformat2.html): a
table is a b-tree of pages, each leaf cell a rowid and a record (a header of
serial types, then the values), a long record's tail in a chain of overflow
pages. One Numba kernel lists the tree's leaf pages in rowid order from its
interior pages; a second reads the leaves (with pread, runs of pages at a
time) and keeps, per row, its id, topic id, timestamp and where its blob
lies; a third copies the blobs a chunk needs from there. SQLite still
answers what is small (the schema, the root page, the columns' order, the
row count).

Only a file no one writes is read this way (the caller's ``immutable`` case: no
write-ahead log to merge). Anything in the pages that is not as SQLite writes
it (a page number outside the file, a cell past its page, a column of another
type, rowids out of order, a deeper tree or longer overflow chains than the
file can hold) makes :func:`read_table` return None, and the caller reads the
table through SQLite, whose handling of damage stays the one answer to it.
"""

from __future__ import annotations

import re
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..io.chunks import BUFFERS

HEADER = struct.Struct(">16sHBBBBBB")  # magic, page size, write/read versions, reserved bytes, payload fractions
SQLITE_MAGIC = b"SQLite format 3\x00"
#: A table of at least 2 x PART_ROWS rows is walked in two parts at once (see read_table).
PART_ROWS = 1 << 16
#: "every child" of a root, for leaf_pages (a page has at most 65535 cells).
MAX_CHILD = 1 << 20
#: Leaf pages are read this many bytes at a time at most (a run of pages that follow one another in the
#: file): the block stays in the core's cache while its cells are parsed.
BLOCK_BYTES = 256 * 1024


@dataclass(frozen=True)
class TablePages:
    """Where each row of a ``messages`` table lies in the file (rowid order), and how to copy its blob."""

    buf: np.ndarray         # the whole database file (a read-only mapping, or the decompressed bytes)
    page_size: int
    usable: int             # page size less the reserved bytes at each page's end
    id: np.ndarray          # rowid (= the id column)
    topic_id: np.ndarray
    timestamp: np.ndarray
    length: np.ndarray      # blob bytes
    at: np.ndarray          # file offset of the blob's first byte
    local: np.ndarray       # how many of them lie there (in the leaf page)
    overflow: np.ndarray    # the first overflow page holding the rest (0: none)
    change_counter: bytes   # the header's file change counter when the pages were read

    def current(self) -> bool:
        """Whether the file is as it was when its pages were read: a writer committing to it (in rollback
        mode, the only one a file read this way is in) increments the header's change counter."""
        return self.buf[24:28].tobytes() == self.change_counter

    def blobs(self, ids: np.ndarray, fd: int = -1) -> np.ndarray | None:
        """The blobs of rows ``ids`` (rowids this table holds, ascending) concatenated, as uint8; None when an
        id is not in the table or an overflow chain leaves the file (the caller then asks SQLite). ``fd``: the
        file ``buf`` maps, open for reading (long blobs are then read with pread; see gather_blobs)."""
        from .kernels import gather_blobs

        rows = np.searchsorted(self.id, ids)
        if rows.size and (int(rows.max()) >= self.id.size or not np.array_equal(self.id[rows], ids)):
            return None
        out = BUFFERS.take(int(self.length[rows].sum()))  # (recycled: fresh pages cost more than the copy)
        block = np.empty(_block_pages(self.page_size) * self.page_size if fd >= 0 else 0, dtype=np.uint8)
        if gather_blobs(self.buf, fd, block, self.page_size, self.usable, self.length, self.at, self.local,
                        self.overflow, rows, out) >= 0:
            return None
        return out


def layout(buf: np.ndarray) -> tuple[int, int] | None:
    """(page size, usable bytes per page) from the database header, or None where it is not a valid one."""
    if buf.size < 100:
        return None
    magic, size, _write, _read, reserved, max_fraction, min_fraction, leaf_fraction = HEADER.unpack_from(
        buf[:HEADER.size].tobytes())
    page_size = 65536 if size == 1 else size
    if (magic != SQLITE_MAGIC or page_size < 512 or page_size & (page_size - 1) or (max_fraction, min_fraction,
                                                                              leaf_fraction) != (64, 32, 32)):
        return None
    usable = page_size - reserved
    return (page_size, usable) if usable >= 480 else None


def column_places(schema_sql: str, columns: list[tuple], id_is_rowid: bool) -> tuple[int, int, int, int] | None:
    """(column count, position of topic_id, of timestamp, of data) in the table's records, from ``PRAGMA
    table_xinfo`` rows (cid, name, type, notnull, default, pk, hidden). None unless ``id`` is the rowid
    (``id_is_rowid``, as SQLite's query plan says: an INTEGER PRIMARY KEY of a rowid table, stored as NULL
    in each record; ``INTEGER PRIMARY KEY DESC`` is not one), no column is hidden or generated (a stored
    one takes a place in the record that table_info does not show), and topic_id and timestamp have no
    REAL affinity (SQLite reads an integer stored there as a float)."""
    names = {str(c[1]).lower(): c for c in columns}
    if (not id_is_rowid or re.search(r"without\s+rowid", schema_sql, re.IGNORECASE)
            or any(len(c) < 7 or c[6] for c in columns) or not {"id", "topic_id", "timestamp", "data"} <= names.keys()
            or any(_affinity(str(names[n][2])) == "REAL" for n in ("topic_id", "timestamp"))):
        return None
    return len(columns), int(names["topic_id"][0]), int(names["timestamp"][0]), int(names["data"][0])


def _affinity(declared: str) -> str:
    """A column's type affinity from its declared type (SQLite's rules, in their order)."""
    upper = declared.upper()
    if "INT" in upper:
        return "INTEGER"
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in upper or not upper:
        return "BLOB"
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def read_table(buf: np.ndarray, root: int, places: tuple[int, int, int, int], capacity: int,
               id_run: tuple[int, int] | None = None, fd: int = -1,
               topic_ids: np.ndarray | None = None) -> TablePages | None:
    """The rows of the table whose b-tree is rooted at page ``root`` (see :func:`column_places` for
    ``places``; ``capacity``: the row count SQLite reports), or None where the pages are not as SQLite
    writes them or hold another number of rows. ``topic_ids``: keep only the rows of these topic ids (every
    row is still parsed, checked and counted).

    ``id_run``: (first, last) where the rowids are every integer between (as SQLite reports them). A large
    table's root children are then walked in two parts at once, the second part's rows written from where
    the root's key says they start (the largest rowid of the first part). ``fd``: the file ``buf`` maps,
    open for reading: its leaf pages are then read with pread(2) into a block per part instead of through
    the mapping (see :func:`fastbag.rosbag2.kernels.walk_leaves`); -1 for a database in memory.
    """
    from .kernels import leaf_pages, walk_leaves

    found = layout(buf)
    if found is None:
        return None
    page_size, usable = found
    wanted = np.zeros(0, dtype=np.uint8)
    if topic_ids is not None:
        if topic_ids.size and (int(topic_ids.min()) < 0 or int(topic_ids.max()) >= 1 << 20):
            return None  # (recorders number topics from 1; others are read through SQLite)
        wanted = np.zeros(int(topic_ids.max(initial=-1)) + 1, dtype=np.uint8)
        wanted[topic_ids] = 1
    # Each part writes its rows from where the root's key says they start; where only some topics' rows are
    # kept, the parts' rows are joined after (the pages of rows never written are never touched).
    out = [np.empty(capacity, dtype=np.int64) for _ in range(7)]
    parts = [(0, MAX_CHILD, 0, capacity)]
    split = _split_point(buf, page_size, usable, root) if id_run is not None and capacity >= 2 * PART_ROWS else None
    if split is not None and id_run is not None and id_run[0] <= split[1] < id_run[1]:
        rows_before = split[1] - id_run[0] + 1
        parts = [(0, split[0], 0, rows_before), (split[0] + 1, MAX_CHILD, rows_before, capacity)]

    def walk(part: tuple[int, int, int, int]) -> tuple[int, int, int] | None:
        first_child, last_child, start, stop = part
        pages = np.empty(buf.size // page_size, dtype=np.int64)
        count = leaf_pages(buf, page_size, usable, root, first_child, last_child, pages)
        if count < 0:
            return None
        views = [array[start:stop] for array in out]
        block = np.empty(_block_pages(page_size) * page_size if fd >= 0 else 0, dtype=np.uint8)
        counts = np.zeros(4, dtype=np.int64)
        kept = walk_leaves(buf, fd, block, pages[:count], page_size, usable, *places, wanted, *views, counts)
        if kept < 0 or counts[1] != stop - start:
            return None
        return kept, int(counts[2]), int(counts[3])  # with the first and last rowid seen

    if len(parts) == 1:
        walked = [walk(parts[0])]
    else:
        with ThreadPoolExecutor(len(parts), thread_name_prefix="fastbag-pages") as pool:
            walked = list(pool.map(walk, parts))
    if any(w is None for w in walked):
        return None
    # Each part is in rowid order (the kernel checks): so must be the rows they meet at.
    if len(walked) > 1 and walked[0][2] >= walked[1][1]:  # type: ignore[index]
        return None
    if topic_ids is not None:
        out = _kept_rows(out, [(part[2], w[0]) for part, w in zip(parts, walked)])  # type: ignore[index]
    return TablePages(buf, page_size, usable, *out, change_counter=buf[24:28].tobytes())


def _kept_rows(out: list[np.ndarray], kept: list[tuple[int, int]]) -> list[np.ndarray]:
    """The rows the parts kept, ``(where the part's rows start, how many it kept)`` each, one after another:
    a few copied out (the arrays sized for every row then go, most of their pages never touched), many
    moved down in place."""
    total = sum(n for _, n in kept)
    if 2 * total < out[0].size:
        return [np.concatenate([column[a:a + n] for a, n in kept]) for column in out]
    put = 0
    for a, n in kept:
        if a != put:
            for column in out:
                column[put:put + n] = column[a:a + n]  # (NumPy copies overlapping ranges as if apart)
        put += n
    return [column[:total] for column in out]


def _block_pages(page_size: int) -> int:
    return max(1, BLOCK_BYTES // page_size)


def _split_point(buf: np.ndarray, page_size: int, usable: int, root: int) -> tuple[int, int] | None:
    """(cell, key) of the root's middle cell when the root is an interior table page with cells: its key is
    the largest rowid in the children up to that cell. None otherwise, or where the bytes say otherwise."""
    from .kernels import _varint

    base = (root - 1) * page_size
    head = base + (100 if root == 1 else 0)
    if root < 1 or base + page_size > buf.size or buf[head] != 0x05:
        return None
    ncells = int(buf[head + 3]) << 8 | int(buf[head + 4])
    middle = ncells // 2
    if ncells < 2 or head + 12 + 2 * ncells > base + usable:
        return None
    at = head + 12 + 2 * middle
    cell = base + (int(buf[at]) << 8 | int(buf[at + 1]))
    key, after = _varint(buf, cell + 4, base + usable)  # after the left child's page number
    return (middle, int(key)) if after >= 0 else None
