"""Numba kernels that locate ROS1 message-data records (formats 2.0 and 1.2).

The container side of decoding: from an index entry's offset to the
``(start, length)`` of the message's serialized bytes, checked against its
chunk and against the connection and time the index promised. Imported on
first use, like every kernel.
"""

from __future__ import annotations

from numba import njit

from ..io.bytekernels import u32 as _u32


@njit(cache=True, nogil=True, inline="always")
def _header_fields(buf, field, header_end):
    """The fields of the record header ``buf[field:header_end]`` that locating and scanning check, read as
    records.Header.parse reads them: any order, extra fields allowed, a name up to its first '=', the last
    field of a name counting. Returns ``(ok, op, conn, time_sec, time_nsec, sec, nsec, seen, topic, md5)``: ``ok`` is
    False where a length runs past the header or a field has no '='; each value is -1 where absent and -2
    where of another size than the parser takes (``time``: 2.0's u32 sec and nsec; ``sec`` and ``nsec``:
    format 1.2's); ``seen`` counts the op, conn and time fields. ``topic`` and ``md5`` (format 1.2's key of a
    message) are where that field starts (its u32 length), -1 where absent."""
    op = -1
    conn = -1
    time_sec = -1
    time_nsec = -1
    sec = -1
    nsec = -1
    seen = 0
    topic = -1
    md5 = -1
    while field < header_end:
        if header_end - field < 4:
            return False, op, conn, time_sec, time_nsec, sec, nsec, seen, topic, md5
        n = _u32(buf, field)
        field += 4
        if n > header_end - field:
            return False, op, conn, time_sec, time_nsec, sec, nsec, seen, topic, md5
        eq = -1
        for j in range(n):
            if buf[field + j] == 0x3D:
                eq = j
                break
        if eq < 0:
            return False, op, conn, time_sec, time_nsec, sec, nsec, seen, topic, md5
        c0 = buf[field]
        if eq == 2 and c0 == 0x6F and buf[field + 1] == 0x70:  # op
            seen += 1
            op = buf[field + 3] if n == 4 else -2
        elif eq == 4 and c0 == 0x63 and buf[field + 1] == 0x6F and buf[field + 2] == 0x6E \
                and buf[field + 3] == 0x6E:  # conn
            seen += 1
            conn = _u32(buf, field + 5) if n == 9 else -2
        elif eq == 4 and c0 == 0x74 and buf[field + 1] == 0x69 and buf[field + 2] == 0x6D \
                and buf[field + 3] == 0x65:  # time
            seen += 1
            time_sec = _u32(buf, field + 5) if n == 13 else -2
            time_nsec = _u32(buf, field + 9) if n == 13 else -2
        elif eq == 3 and c0 == 0x73 and buf[field + 1] == 0x65 and buf[field + 2] == 0x63:  # sec
            sec = _u32(buf, field + 4) if n == 8 else -2
        elif eq == 4 and c0 == 0x6E and buf[field + 1] == 0x73 and buf[field + 2] == 0x65 \
                and buf[field + 3] == 0x63:  # nsec
            nsec = _u32(buf, field + 5) if n == 9 else -2
        elif eq == 5 and c0 == 0x74 and buf[field + 1] == 0x6F and buf[field + 2] == 0x70 \
                and buf[field + 3] == 0x69 and buf[field + 4] == 0x63:  # topic
            topic = field - 4
        elif eq == 3 and c0 == 0x6D and buf[field + 1] == 0x64 and buf[field + 2] == 0x35:  # md5
            md5 = field - 4
        field += n
    return True, op, conn, time_sec, time_nsec, sec, nsec, seen, topic, md5


@njit(cache=True, nogil=True, inline="always")
def _record_span(buf, pos, lo, end, want_conn, want_time, data_end):
    """(data start, data length) of the message-data record at ``buf[pos:]`` inside ``[lo, end)``.

    The record's data may run on to ``data_end`` (>= ``end``): the bytes of
    ``buf`` may be a window onto the head of the record, its chunk going on
    past it. Parses the header field by field (any order, extra fields allowed),
    skipping connection (op 7) and definition (op 1) records in front of the
    message, and checks ``op`` = 2 and, where the header has them, ``conn`` =
    ``want_conn`` and the time (``time``, or format 1.2's ``sec`` and ``nsec``)
    = ``want_time`` (ns), as records._message_span_slow does. (-1, -1) when
    anything differs: the caller explains it with that checked parser.
    """
    if pos < lo or end > buf.size:
        return -1, -1
    for _ in range(16):  # a few metadata records may precede the message
        if end - pos < 4:
            break
        header_len = _u32(buf, pos)
        if header_len > end - pos - 8:
            break
        header_end = pos + 4 + header_len
        ok, op, got_conn, time_sec, time_nsec, sec, nsec, _, _, _ = _header_fields(buf, pos + 4, header_end)
        if not ok or op == -2 or got_conn == -2 or time_sec == -2:
            break
        got_time = -1
        if time_sec >= 0:
            got_time = time_sec * 1_000_000_000 + time_nsec
        elif sec != -1:  # (as the parser reads a 1.2 record: sec, then nsec, both u32)
            if sec < 0 or nsec < 0:
                break
            got_time = sec * 1_000_000_000 + nsec
        data_len = _u32(buf, header_end)
        data = header_end + 4
        if data_len > data_end - data:
            break
        if op == 2:
            if (got_conn == -1 or got_conn == want_conn) and (got_time == -1 or got_time == want_time):
                return data, data_len
            break
        if op != 7 and op != 1:
            break
        pos = data + data_len
    return -1, -1


@njit(cache=True, nogil=True)
def record_spans(buf, at, lo, hi, conn, time, starts, lengths, verified):
    """Locate message-data records: ``buf[at[i]:]`` within ``[lo[i], hi[i])`` (see _record_span).

    Sets ``starts``/``lengths`` and ``verified[i]`` for each record that
    passes; the caller explains the others with the checked Python parser.
    """
    for i in range(at.size):
        start, length = _record_span(buf, at[i], lo[i], hi[i], conn[i], time[i], hi[i])
        verified[i] = start >= 0
        if start >= 0:
            starts[i] = start
            lengths[i] = length


@njit(cache=True, nogil=True)
def file_spans(buf, selected, chunk, offset, time, conn, conn_ids, data_offset, size, data_len,
               starts, lengths, verified):
    """record_spans for messages of uncompressed chunks, straight from the index arrays.

    Message ``selected[i]`` lies in chunk ``chunk[m]`` at ``offset[m]`` of its
    payload, which starts at ``data_offset[c]`` in the file; its record must
    hold connection id ``conn_ids[conn[m]]`` and time ``time[m]``. One pass
    instead of a NumPy gather per array. Returns -1, or the first ``i`` whose
    chunk holds other than ``size`` bytes (the caller raises).
    """
    for i in range(selected.size):
        m = selected[i]
        c = chunk[m]
        if size[c] != data_len[c]:
            return i
        lo = data_offset[c]
        hi = lo + size[c]
        start, length = _record_span(buf, lo + offset[m], lo, hi, conn_ids[conn[m]], time[m], hi)
        verified[i] = start >= 0
        if start >= 0:
            starts[i] = start
            lengths[i] = length
    return -1


@njit(cache=True, nogil=True)
def window_spans(heads, head_at, seen, at, chunk_end, conn, time, starts, lengths):
    """record_spans over windows onto the records: record ``i`` lies at file offset ``at[i]`` in a chunk
    ending at ``chunk_end[i]``, and its first ``seen[i]`` bytes at ``heads[head_at[i]:]``. Fills file
    offsets into ``starts``/``lengths``; returns -1, or the first ``i`` not verified from its window."""
    for i in range(at.size):
        base = head_at[i]
        start, length = _record_span(heads, base, base, base + seen[i], conn[i], time[i],
                                     base + chunk_end[i] - at[i])
        if start < 0:
            return i
        starts[i] = at[i] + start - base
        lengths[i] = length
    return -1


@njit(cache=True, nogil=True)
def record_starts(buf, pos, out):
    """Where ``out.size`` records (u32 header length, header, u32 data length, data) follow one another in
    ``buf`` from ``pos``, into ``out``; returns where the next would start, or -1 when a record's lengths run
    past the end of ``buf``. (The index section's chunk infos: a loop of Python reads cost 0.3 ms a bag
    of 850 chunks at every open.)"""
    for k in range(out.size):
        if pos < 0 or pos > buf.size - 8:
            return -1
        out[k] = pos
        header_len = _u32(buf, pos)
        if header_len > buf.size - pos - 8:
            return -1
        pos += 8 + header_len + _u32(buf, pos + 4 + header_len)
    return pos


@njit(cache=True, nogil=True)
def entry_past_chunk(buf, data_at, counts, limit):
    """The first index-data record (rows of ``data_at``, ``counts``: where its 12-byte entries lie in ``buf``,
    how many) holding an entry whose offset (the entry's third u32) is not below its ``limit`` (the
    record's chunk size), or -1. Every entry is checked without gathering them (the index is built later,
    and for one topic perhaps only). The caller has checked every record's entries lie inside ``buf``."""
    for r in range(data_at.size):
        for j in range(counts[r]):
            if _u32(buf, data_at[r] + 12 * j + 8) >= limit[r]:
                return r
    return -1


@njit(cache=True, nogil=True)
def headers_match(buf, at, raw, mask):
    """Whether the ``raw.size`` bytes at every position ``at`` of ``buf`` equal ``raw`` where ``mask`` is set,
    each followed by 4 more bytes in ``buf`` (record headers against a template, then the record's data
    length: compared in place, where copying the headers out first allocated a few hundred KB at every
    open)."""
    n = raw.size
    for i in range(at.size):
        p = at[i]
        if p < 0 or p > buf.size - n - 4:
            return False
        for j in range(n):
            if mask[j] and buf[p + j] != raw[j]:
                return False
    return True


@njit(cache=True, nogil=True)
def entries_table(buf, data_at, counts, rank, chunk, time, conn, chunk_of, offset):
    """The index-data entries of records ``data_at``/``counts`` in ``buf`` (12 bytes each: u32 sec, u32 nsec,
    u32 offset in the chunk), one after another, into the message table's columns: ``time`` (ns), ``conn``
    (the record's connection ``rank``), ``chunk_of`` (its ``chunk``) and ``offset``. One pass writing only
    the columns (gathering the entries first, then converting and repeating per record, wrote three times
    as many bytes: 10 ms for 1 M messages). The caller has checked the entries lie in ``buf``."""
    k = 0
    for r in range(data_at.size):
        p = data_at[r]
        for _ in range(counts[r]):
            time[k] = _u32(buf, p) * 1_000_000_000 + _u32(buf, p + 4)
            conn[k] = rank[r]
            chunk_of[k] = chunk[r]
            offset[k] = _u32(buf, p + 8)
            p += 12
            k += 1


#: What the checked parser refuses (records.MAX_HEADER_LEN): a longer header is left to it.
_MAX_HEADER_LEN = 1 << 24


@njit(cache=True, nogil=True, inline="always")
def _record_frame(buf, pos, end):
    """``(header_end, data_len)`` of the record at ``buf[pos:]`` (u32 header length, header, u32 data length,
    data), or (-1, -1) when its lengths run past ``end`` or its header is longer than the parser takes."""
    if end - pos < 8:
        return -1, -1
    header_len = _u32(buf, pos)
    if header_len > _MAX_HEADER_LEN or header_len > end - pos - 8:
        return -1, -1
    header_end = pos + 4 + header_len
    data_len = _u32(buf, header_end)
    if data_len > end - header_end - 4:
        return -1, -1
    return header_end, data_len


@njit(cache=True, nogil=True)
def message_records(buf, pos, end, sec, nsec, at, conn):
    """Message-data records one after another in ``buf[pos:end]`` (a chunk's payload, being scanned to
    rebuild a lost index): per record its time as stored (u32 sec, nsec), offset and connection id, into
    the arrays from index 0. Returns ``(count, stop)``: the records taken, and where the walk stopped, at
    ``end`` or at the first record that is anything else, or anything odd: another op, a field without
    '=', a duplicate or misshapen op/conn/time, a length past ``end``. The checked Python parser reads
    that record and says what it is (a connection record, damage), then the walk goes on. Fields are
    read as that parser reads them: any order, extra fields allowed, a name up to its first '='."""
    k = 0
    while pos < end and k < at.size:
        header_end, data_len = _record_frame(buf, pos, end)
        if header_end < 0:
            break
        ok, op, got_conn, got_sec, got_nsec, _, _, seen, _, _ = _header_fields(buf, pos + 4, header_end)
        if not ok or seen != 3 or op != 2 or got_conn < 0 or got_sec < 0:
            break
        sec[k] = got_sec
        nsec[k] = got_nsec
        at[k] = pos
        conn[k] = got_conn
        k += 1
        pos = header_end + 4 + data_len
    return k, pos


# -- the legacy formats' scans (1.2 without its index, 1.1 at every open) ---------------------------------

@njit(cache=True, nogil=True, inline="always")
def _same_bytes(buf, at, keys, lo, hi):
    """Whether ``buf[at:at + hi - lo]`` equals ``keys[lo:hi]`` (the caller checked both lie in their arrays)."""
    for j in range(hi - lo):
        if buf[at + j] != keys[lo + j]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _known_key(buf, a, a_len, b, b_len, keys, bounds, guess):
    """The known key whose two parts equal ``buf[a:a + a_len]`` and ``buf[b:b + b_len]``, or -1. Key ``c`` is
    ``keys[bounds[2c]:bounds[2c + 1]]`` and ``keys[bounds[2c + 1]:bounds[2c + 2]]`` (the caller builds them:
    bounds rise, the last within ``keys``). Tried from ``guess`` on, wrapping (the last record's key,
    then the next: recorders write their topics in turn)."""
    count = (bounds.size - 1) // 2
    for i in range(count):
        c = (guess + i) % count
        lo = bounds[2 * c]
        mid = bounds[2 * c + 1]
        hi = bounds[2 * c + 2]
        if mid - lo == a_len and hi - mid == b_len and _same_bytes(buf, a, keys, lo, mid) \
                and _same_bytes(buf, b, keys, mid, hi):
            return c
    return -1


@njit(cache=True, nogil=True, inline="always")
def _put_row(rows, k, key, time, at, start, length):
    """Row ``k`` of a legacy scan: the message's key, time (ns), record offset, data start and length; returns
    where the next record starts."""
    rows[k, 0] = key
    rows[k, 1] = time
    rows[k, 2] = at
    rows[k, 3] = start
    rows[k, 4] = length
    return start + length


@njit(cache=True, nogil=True)
def v12_message_records(buf, pos, end, keys, bounds, rows, k):
    """Format 1.2 message-data records one after another in ``buf[pos:end]``, each keyed by its ``topic`` and
    ``md5`` fields as one already known (see _known_key): per record its key, time (ns), offset, data start
    and data length into ``rows[k]``, ``rows[k + 1]``... Returns ``(k, stop)``: the rows filled, and where the
    walk stopped, at ``end``, when ``rows`` is full, or at the first record that is anything else: another
    op, a new key, a field without '=', a missing or misshapen op/sec/nsec/topic/md5, a length past ``end``.
    The checked Python parser reads that record (a definition, a new connection, damage), then the walk
    goes on. Fields are read as that parser reads them (see _header_fields)."""
    if pos < 0 or end > buf.size:
        return k, pos
    guess = 0
    while pos < end and k < rows.shape[0]:
        header_end, data_len = _record_frame(buf, pos, end)
        if header_end < 0:
            break
        ok, op, _, _, _, sec, nsec, _, topic, md5 = _header_fields(buf, pos + 4, header_end)
        if not ok or op != 2 or sec < 0 or nsec < 0 or topic < 0 or md5 < 0:
            break
        # (the fields lie inside the header: _header_fields checked their lengths)
        c = _known_key(buf, topic + 10, _u32(buf, topic) - 6, md5 + 8, _u32(buf, md5) - 4, keys, bounds, guess)
        if c < 0:
            break
        pos = _put_row(rows, k, c, sec * 1_000_000_000 + nsec, pos, header_end + 4, data_len)
        k += 1
        guess = c
    return k, pos


@njit(cache=True, nogil=True, inline="always")
def _lines_end(buf, pos, end, count, max_line):
    """Where ``count`` lines from ``buf[pos:]`` end (just past the last newline), each found within
    ``max_line`` bytes of its start and before ``end``; -1 when one is not."""
    for _ in range(count):
        stop = min(end, pos + max_line)
        found = -1
        for j in range(pos, stop):
            if buf[j] == 0x0A:
                found = j
                break
        if found < 0:
            return -1
        pos = found + 1
    return pos


@njit(cache=True, nogil=True)
def v11_message_records(buf, pos, end, keys, bounds, rows, k, max_line):
    """Format 1.1 messages one after another in ``buf[pos:end]`` (topic, md5sum and type lines, each found
    within ``max_line`` bytes, then u32 sec, nsec, length and the data), each of a key already known: its
    three lines as one part, the second part empty (see _known_key). Fills ``rows`` as
    v12_message_records does; stops at ``end``, when ``rows`` is full, or at a new key or anything odd (a
    line too long, a length past ``end``), which the checked Python parser reads."""
    if pos < 0 or end > buf.size:
        return k, pos
    guess = 0
    while pos < end and k < rows.shape[0]:
        tail = _lines_end(buf, pos, end, 3, max_line)
        if tail < 0 or end - tail < 12:
            break
        data_len = _u32(buf, tail + 8)
        if data_len > end - tail - 12:
            break
        c = _known_key(buf, pos, tail - pos, tail, 0, keys, bounds, guess)
        if c < 0:
            break
        pos = _put_row(rows, k, c, _u32(buf, tail) * 1_000_000_000 + _u32(buf, tail + 4), pos, tail + 12, data_len)
        k += 1
        guess = c
    return k, pos
