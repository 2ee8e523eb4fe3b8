"""Numba kernels over a sqlite3 file's message rows. Imported on first use, like every kernel."""

from __future__ import annotations

import numpy as np
from numba import njit

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
