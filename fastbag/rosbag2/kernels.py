"""Numba kernels of the rosbag2 storages: a sqlite3 file's message rows, and the zstd frame headers of messages
compressed one by one. Imported on first use, like every kernel."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..io.bytekernels import copy_disjoint, pread_spans

_COMMA, _MINUS, _ZERO = 44, 45, 48
_INT64_MAX = np.uint64(9223372036854775807)


@njit(cache=True, nogil=True)
def parse_integers(text, out):
    """Parse ``text`` (uint8: decimal integers joined by commas, as SQLite's ``group_concat`` writes an
    integer column) into ``out``; the count parsed, or -1 when ``text`` holds anything else (an empty
    item, a sign or character out of place, a number beyond int64, more numbers than ``out`` holds).

    The caller checks the count: what a column holds is the file's to say. Runs without the GIL, so the
    parts of a scan parse on their own threads (NumPy's text parser holds it).
    """
    n = text.size
    count = 0
    pos = 0
    while pos < n:
        if count >= out.size:
            return -1
        negative = text[pos] == _MINUS
        if negative:
            pos += 1
        start = pos
        value = np.uint64(0)
        while pos < n and text[pos] != _COMMA:
            digit = np.int64(text[pos]) - _ZERO
            if digit < 0 or digit > 9 or pos - start >= 19:  # 19 digits hold every int64
                return -1
            value = value * np.uint64(10) + np.uint64(digit)
            pos += 1
        if pos == start or value > _INT64_MAX + np.uint64(1 if negative else 0):
            return -1
        out[count] = -np.int64(value - np.uint64(1)) - 1 if negative and value > 0 else np.int64(value)
        count += 1
        pos += 1  # the comma
        if pos == n and text[n - 1] == _COMMA:  # a trailing comma: an empty last item
            return -1
    return count


@njit(cache=True, nogil=True)
def chunk_rows(rank, length, segment, ranks, chunk_bytes, chunk_base):
    """Cut one file's rows (in id order: ``rank`` of each row's connection, below ``ranks``; blob
    ``length``; ``segment``, the stretch of the table it was read in, or empty for one stretch) into
    chunks: each connection's rows in id order, a new chunk where the bytes of the connection's rows
    before a row reach the next multiple of ``chunk_bytes``, or where the segment changes.

    Returns ``order`` (the rows in chunk order: by rank, stable), per row in file order its chunk
    (int32, numbered from ``chunk_base``) and number in the chunk, and per chunk its first position in
    ``order``, its row count and its blob bytes. A counting sort and two passes; what NumPy does in
    twenty passes over the rows.
    """
    n = rank.size
    start_of = np.zeros(ranks + 1, np.int64)
    for i in range(n):
        start_of[rank[i] + 1] += 1
    for r in range(ranks):
        start_of[r + 1] += start_of[r]
    order = np.empty(n, np.int64)
    for i in range(n):
        r = rank[i]
        order[start_of[r]] = i
        start_of[r] += 1
    chunk_of = np.empty(n, np.int32)
    ordinal = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    bytes_in = np.empty(n, np.int64)
    chunks = 0
    previous_rank = -1
    previous_part = -1
    previous_segment = 0
    in_topic = 0  # blob bytes of this connection's rows before this one
    start = 0
    for j in range(n):
        i = order[j]
        r = rank[i]
        if r != previous_rank:
            in_topic = 0
        part = in_topic // chunk_bytes
        seg = segment[i] if segment.size else 0
        if r != previous_rank or part != previous_part or seg != previous_segment:
            first[chunks] = j
            bytes_in[chunks] = 0
            chunks += 1
            start = j
        chunk_of[i] = chunk_base + chunks - 1
        ordinal[i] = j - start
        bytes_in[chunks - 1] += length[i]
        in_topic += length[i]
        previous_rank, previous_part, previous_segment = r, part, seg
    count = np.empty(chunks, np.int64)
    for c in range(chunks):
        count[c] = (first[c + 1] if c + 1 < chunks else n) - first[c]
    return order, chunk_of, ordinal, first[:chunks].copy(), count, bytes_in[:chunks].copy()


# -- a table b-tree read straight from the file (see fastbag.rosbag2.pages) ----------------------------------

#: leaf_pages' and walk_leaves' refusals: the file is not as this reader needs it (SQLite then reads it instead).
BAD_PAGE, BAD_CELL, BAD_RECORD, BAD_COLUMN, BAD_ORDER, TOO_MANY, TOO_DEEP, BAD_OVERFLOW = range(-1, -9, -1)
#: b-tree depth beyond which a tree is refused (SQLite's own limit is 20).
MAX_DEPTH = 40
#: Record headers longer than this are parsed for every row (rosbag2's are 5-7 bytes).
MAX_SHARED_HEADER = 32


@njit(cache=True, nogil=True)
def _varint(buf, pos, end):
    """SQLite's big-endian varint at ``pos`` (at most 9 bytes, all before ``end``): (value, next position),
    the position -1 where it runs past ``end``. One exit: Numba compiles a tuple returned from several
    places to code ~5x slower (10 ns a varint)."""
    value = np.int64(0)
    done = False
    k = 0
    while not done and k < 9 and pos < end:
        byte = np.int64(buf[pos])
        pos += 1
        if k == 8:
            value = (value << 8) | byte
            done = True
        else:
            value = (value << 7) | (byte & 0x7F)
            done = byte < 0x80
        k += 1
    return value, pos if done else np.int64(-1)


@njit(cache=True, nogil=True)
def _u16(buf, pos):
    return (np.int64(buf[pos]) << 8) | np.int64(buf[pos + 1])


@njit(cache=True, nogil=True)
def _u32(buf, pos):
    return ((np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8)
            | np.int64(buf[pos + 3]))


@njit(cache=True, nogil=True)
def _serial_size(kind):
    """Bytes of a value of serial type ``kind`` (-1 for the reserved 10 and 11)."""
    size = kind  # 0-4: NULL and integers of 1-4 bytes
    if kind == 5:
        size = 6
    elif kind == 6 or kind == 7:
        size = 8
    elif kind == 8 or kind == 9:
        size = 0
    elif kind == 10 or kind == 11:
        size = -1
    elif kind >= 12:
        size = (kind - 12) >> 1  # blobs (even) and text (odd, (kind - 13) / 2)
    return size


@njit(cache=True, nogil=True)
def _integer(buf, pos, kind):
    """The integer of serial type ``kind`` (1-6 big-endian two's complement, 8 and 9 the constants 0 and 1)."""
    value = np.int64(kind - 8)
    if kind < 8:
        value = np.int64(np.int8(buf[pos]))  # the sign comes from the first byte
        for k in range(1, _serial_size(kind)):
            value = (value << 8) | np.int64(buf[pos + k])
    return value


@njit(cache=True, nogil=True)
def leaf_pages(buf, page_size, usable, root, first_child, last_child, out_pages):
    """The leaf pages of the table b-tree rooted at page ``root`` of the database ``buf`` (the whole file), in
    rowid order, into ``out_pages``; where the root is an interior page, only those under its children
    ``first_child`` to ``last_child`` (the right-most child being number ``ncells``): parts of a table walk
    on their own threads. Returns the count, or a negative refusal (the constants above).

    Only interior pages are read (a few hundred in a gigabyte): SQLite keeps every leaf of a b-tree at one
    depth, so the children of the pages one level above that depth, found down the first path, are leaves
    (walk_leaves checks each is one). A page outside the file, an interior page that is none, a tree
    deeper than MAX_DEPTH or visiting more pages than the file has is refused.
    """
    npages = buf.size // page_size
    # the leaves' depth, down the first path
    leaf_depth = 0
    page = root
    while True:
        if page < 1 or page > npages:
            return BAD_PAGE
        head = (page - 1) * page_size + (100 if page == 1 else 0)
        if buf[head] == 0x0D:
            break
        if buf[head] != 0x05 or leaf_depth + 1 >= MAX_DEPTH:
            return BAD_PAGE if buf[head] != 0x05 else TOO_DEEP
        if leaf_depth == 0 and first_child > 0:
            ncells = _u16(buf, head + 3)
            if first_child > ncells:
                return 0
            page = _child(buf, page, page_size, usable, first_child)
        else:
            page = _child(buf, page, page_size, usable, 0)
        if page < 0:
            return BAD_CELL
        leaf_depth += 1
    if leaf_depth == 0:  # the root is the one leaf
        out_pages[0] = root
        return 1
    stack_page = np.empty(MAX_DEPTH, np.int64)
    stack_cell = np.empty(MAX_DEPTH, np.int64)
    depth = 0
    stack_page[0] = root
    stack_cell[0] = first_child
    visited = 0
    count = 0
    while depth >= 0:
        page = stack_page[depth]
        if page < 1 or page > npages:
            return BAD_PAGE
        base = (page - 1) * page_size
        head = base + (100 if page == 1 else 0)
        if buf[head] != 0x05:
            return BAD_PAGE
        ncells = _u16(buf, head + 3)
        if head + 12 + 2 * ncells > base + usable:
            return BAD_CELL
        k = stack_cell[depth]
        if k == 0 or (depth == 0 and k == first_child):
            visited += 1
            if visited > npages:
                return BAD_PAGE
        if k > ncells or (depth == 0 and k > last_child):
            depth -= 1
            continue
        child = _child(buf, page, page_size, usable, k)
        if child < 0:
            return BAD_CELL
        stack_cell[depth] = k + 1
        if depth + 1 == leaf_depth:
            if count >= out_pages.size:
                return BAD_PAGE  # more leaves than the file has pages: a loop
            out_pages[count] = child
            count += 1
            continue
        depth += 1
        stack_page[depth] = child
        stack_cell[depth] = 0
    return count


@njit(cache=True, nogil=True)
def _child(buf, page, page_size, usable, k):
    """Child ``k`` of interior page ``page`` (cell k's left child; k == ncells: the right-most), -1 where the
    cell lies outside its page."""
    base = (page - 1) * page_size
    head = base + (100 if page == 1 else 0)
    ncells = _u16(buf, head + 3)
    pointers = head + 12
    child = np.int64(-1)
    if k < ncells:
        cell = base + _u16(buf, pointers + 2 * k)
        if cell >= pointers + 2 * ncells and cell + 4 <= base + usable:
            child = _u32(buf, cell)
    elif k == ncells:
        child = _u32(buf, head + 8)
    return child


@njit(cache=True, nogil=True)
def _read_pages(fd, block, first_page, count, page_size):
    """Pages ``first_page`` to ``first_page + count - 1`` of file ``fd`` into ``block``: whether all were read."""
    spans = pread_spans(fd, block, np.array([(first_page - 1) * page_size], np.int64),
                        np.array([count * page_size], np.int64))
    return spans < 0


@njit(cache=True, nogil=True)
def walk_leaves(buf, fd, block, pages, page_size, usable, columns, topic_col, stamp_col, data_col, wanted,
                out_id, out_topic, out_stamp, out_length, out_at, out_local, out_overflow, sink):
    """Every row of the table leaves ``pages`` (leaf_pages' list, in rowid order) of the database ``buf``
    (the whole file): its rowid, the integers in columns ``topic_col`` and ``stamp_col`` and, for the blob in
    ``data_col``, its length, the file offset of its first byte, how many of its bytes lie there (in the
    leaf page) and the first overflow page holding the rest (0: none).

    ``wanted`` (uint8 by topic id) keeps only the rows of the topic ids it marks; empty, every row. Every
    row is parsed and checked all the same: ``sink`` (4 int64) gets the rows seen in ``sink[1]``, the first
    and last rowid seen in ``sink[2]`` and ``sink[3]``.

    With a file descriptor ``fd`` (>= 0) the leaves are read with pread(2), runs of consecutive pages at a
    time, into ``block`` (a whole number of pages), not through the mapping ``buf``: faulting a fresh
    mapping in and unmapping it cost twice the copy on this VM (31 + 17 ms against 22 ms for 457 MB on two
    threads). In-memory databases (``fd`` -1) are read in place.

    Returns the count of rows kept, or a negative refusal (the constants above) for anything this reader does not
    take as SQLite writes it: a page outside the file or no table leaf, a cell or record running past its
    page, a column of another type, rowids out of order, more rows than the outputs hold, overflow chains
    claiming more pages than the file has. Every read is checked against its page's usable end.
    """
    npages = buf.size // page_size
    max_local = usable - 35
    min_local = ((usable - 12) * 32) // 255 - 23
    block_pages = block.size // page_size
    block_first = np.int64(0)  # the first page in block, and how many (none yet)
    block_count = np.int64(0)
    overflow_pages = 0
    rows = 0  # kept
    seen = 0
    last_rowid = np.int64(0)
    touched = 0
    # Where the last record parsed keeps its values (see the record below); its header bytes are copied,
    # as the block they lay in is read over.
    last_payload = np.int64(-1)
    last_header = np.empty(MAX_SHARED_HEADER, np.uint8)
    last_header_size = np.int64(-1)
    topic_at = topic_kind = stamp_at = stamp_kind = data_at = data_length = np.int64(0)
    for i in range(pages.size):
        page = pages[i]
        if page < 1 or page > npages:
            return BAD_PAGE
        if fd < 0:
            data = buf
            shift = np.int64(0)
            base = (page - 1) * page_size
        else:
            if not block_first <= page < block_first + block_count:
                run = 1  # the next leaves that follow one another in the file, as many as the block holds
                while run < block_pages and i + run < pages.size and pages[i + run] == page + run:
                    run += 1
                if not _read_pages(fd, block, page, run, page_size):
                    return BAD_PAGE  # the file shrank since it was mapped
                block_first, block_count = page, run
            data = block
            shift = (block_first - 1) * page_size  # file offset = position in block + shift
            base = (page - block_first) * page_size
        head = base + (100 if page == 1 else 0)
        end = base + usable
        if data[head] != 0x0D:
            return BAD_PAGE
        ncells = _u16(data, head + 3)
        pointers = head + 8
        if pointers + 2 * ncells > end:
            return BAD_CELL
        # Load the first byte of every cell before parsing any: the loads do not depend on each other, so
        # the memory fetches them at once (the cells of a page in memory need not be in any cache; parsing
        # them in turn waited out one memory latency each, ~100 ns a row).
        for k in range(ncells):
            cell = base + _u16(data, pointers + 2 * k)
            if cell < end:
                touched += data[cell]
        for k in range(ncells):
            cell = base + _u16(data, pointers + 2 * k)
            if cell < pointers + 2 * ncells or cell >= end:
                return BAD_CELL
            payload, pos = _varint(data, cell, end)
            if pos < 0 or payload < 0:
                return BAD_CELL
            rowid, pos = _varint(data, pos, end)
            if pos < 0:
                return BAD_CELL
            if seen > 0 and rowid <= last_rowid:
                return BAD_ORDER
            # How much of the payload the leaf holds (the file format's rule for table leaves).
            local = payload
            spill = 0
            if payload > max_local:
                local = min_local + (payload - min_local) % (usable - 4)
                if local > max_local:
                    local = min_local
                spill = (payload - local + usable - 5) // (usable - 4)
            if pos + local + (4 if spill else 0) > end:
                return BAD_CELL
            overflow_pages += spill
            if overflow_pages > npages:
                return BAD_OVERFLOW
            # The record: a header of serial types, then the values; the integers must lie in the leaf. Rows
            # of one topic mostly share their header bytes and payload size, and then where each value lies:
            # the header is compared with the last one parsed instead of parsed again.
            header, at = _varint(data, pos, pos + local)
            if at < 0 or header > local or header < at - pos:
                return BAD_RECORD
            same = payload == last_payload and header == last_header_size
            k2 = 0
            while same and k2 < header:
                same = data[pos + k2] == last_header[k2]
                k2 += 1
            if not same:
                body = header
                column = 0
                found = 0
                while at < pos + header:
                    serial, at = _varint(data, at, pos + header)
                    if at < 0 or serial < 0:
                        return BAD_RECORD
                    size = _serial_size(serial)
                    if size < 0 or body + size > payload:
                        return BAD_RECORD
                    if column == topic_col or column == stamp_col:
                        if not (1 <= serial <= 6 or serial == 8 or serial == 9) or body + size > local:
                            return BAD_COLUMN
                        if column == topic_col:
                            topic_at, topic_kind = body, serial
                        else:
                            stamp_at, stamp_kind = body, serial
                        found += 1
                    elif column == data_col:
                        if serial < 12 or serial % 2 == 1 or body > local:
                            return BAD_COLUMN
                        data_at = body
                        data_length = size
                        found += 1
                    body += size
                    column += 1
                if found != 3 or column < columns:
                    return BAD_COLUMN
                if body != payload:  # values ending before the payload does: SQLite finds the record malformed
                    return BAD_RECORD
                last_payload = payload
                last_header_size = header if header <= MAX_SHARED_HEADER else -1
                for k2 in range(min(header, MAX_SHARED_HEADER)):
                    last_header[k2] = data[pos + k2]
            topic = _integer(data, pos + topic_at, topic_kind)
            if seen == 0:
                sink[2] = rowid
            last_rowid = rowid
            seen += 1
            if wanted.size and not (0 <= topic < wanted.size and wanted[topic]):
                continue
            stamp = _integer(data, pos + stamp_at, stamp_kind)
            if rows >= out_id.size:
                return TOO_MANY
            out_id[rows] = rowid
            out_topic[rows] = topic
            out_stamp[rows] = stamp
            out_length[rows] = data_length
            out_at[rows] = pos + data_at + shift
            out_local[rows] = min(data_length, local - data_at)
            out_overflow[rows] = _u32(data, pos + local) if data_at + data_length > local else 0
            rows += 1
    sink[0] = touched
    sink[1] = seen
    sink[3] = last_rowid
    return rows


@njit(cache=True, nogil=True)
def gather_blobs(buf, fd, block, page_size, usable, length, at, local, overflow, rows, out):
    """Copy the blobs of ``rows`` (positions in walk_leaves' outputs) into ``out``, one after another: each
    blob's leaf bytes, then the rest from its overflow chain (each page: a u32 next page, then usable - 4
    bytes of payload). Returns -1, or the position in ``rows`` of a blob whose chain leaves the file or ends
    early (``out`` is then partly written).

    With a file descriptor ``fd`` (>= 0), a blob with an overflow chain (a point cloud, an image) is read
    with pread(2): its leaf bytes straight into ``out``, its chain a run of pages at a time into ``block``
    (as many as the blob still needs: a writer appending rows puts a chain's pages one after another), as
    walk_leaves reads the leaves. Blobs wholly in their leaf, and every blob of an in-memory database, are
    copied from ``buf``.
    """
    npages = buf.size // page_size
    room = usable - 4
    block_pages = block.size // page_size
    block_first = np.int64(0)
    block_count = np.int64(0)
    put = 0
    for r in range(rows.size):
        i = rows[r]
        n = local[i]
        rest = length[i] - n
        page = overflow[i]
        chained = fd >= 0 and rest > 0
        if chained:
            if pread_spans(fd, out[put:put + n], np.array([at[i]], np.int64), np.array([n], np.int64)) >= 0:
                return r
        else:
            copy_disjoint(out, put, buf, at[i], n)
        put += n
        # The blob's bytes in the overflow stream start where its leaf bytes end, which the leaf ends.
        while rest > 0:
            if page < 1 or page > npages:
                return r
            take = min(rest, room)
            if chained:
                if not block_first <= page < block_first + block_count:
                    run = min(block_pages, (rest + room - 1) // room, npages - page + 1)
                    if not _read_pages(fd, block, page, run, page_size):
                        return r
                    block_first, block_count = page, run
                start = (page - block_first) * page_size
                copy_disjoint(out, put, block, start + 4, take)
                page = _u32(block, start)
            else:
                start = (page - 1) * page_size
                copy_disjoint(out, put, buf, start + 4, take)
                page = _u32(buf, start)
            put += take
            rest -= take
    return -1


_ZSTD_MAGIC = 0xFD2FB528


@njit(cache=True, nogil=True)
def zstd_content_sizes(buf, starts, lengths, out):
    """The content size each zstd frame ``buf[starts[i]:starts[i] + lengths[i]]`` declares in its header
    (RFC 8878, 3.1.1.1), into ``out``; -1 when every frame declares one, else the first frame that does not
    (another magic number, a header cut short or with its reserved bit set, no size field): the caller then
    asks zstd about each frame in turn, which says what is wrong."""
    for i in range(starts.size):
        at, n = starts[i], lengths[i]
        if at < 0 or n < 5 or at > buf.size - n:
            return i
        magic = np.int64(buf[at]) | (np.int64(buf[at + 1]) << 8) | (np.int64(buf[at + 2]) << 16) | \
            (np.int64(buf[at + 3]) << 24)
        descriptor = np.int64(buf[at + 4])
        if magic != _ZSTD_MAGIC or descriptor & 0x08:
            return i
        single_segment = (descriptor >> 5) & 1
        size_flag = descriptor >> 6
        field = (1 if single_segment else 0) if size_flag == 0 else 1 << size_flag  # 0, 1, 2, 4 or 8 bytes
        if field == 0:
            return i  # the size is not in the header
        dict_flag = descriptor & 3
        pos = at + 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
        if pos + field > at + n:
            return i
        size = np.int64(0)
        for k in range(field):
            size |= np.int64(buf[pos + k]) << (8 * k)
        if field == 8 and size < 0:
            return i  # beyond int64: no real message
        out[i] = size + 256 if field == 2 else size
    return -1


@njit(cache=True, nogil=True)
def spread_records(out, at, heads, data, sizes):
    """Record ``i`` into ``out`` at ``at[i]``: its head (row ``i`` of ``heads``), then its ``sizes[i]`` bytes
    of ``data``, whose records' bytes lie back to back (an MCAP chunk compressed per message, rebuilt with
    its messages' data decompressed; the caller sized ``out`` for every record)."""
    width = heads.shape[1]
    d = 0
    for i in range(at.size):
        for j in range(width):
            out[at[i] + j] = heads[i, j]
        copy_disjoint(out, at[i] + width, data, d, sizes[i])
        d += sizes[i]
