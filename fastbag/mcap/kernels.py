"""Numba kernels over MCAP records. Imported on first use, like every kernel."""

from __future__ import annotations

import numpy as np
from numba import njit

from .records import MAX_TIME, MESSAGE_FIXED, RECORD_HEAD, Opcode

_MESSAGE = np.uint8(int(Opcode.MESSAGE))
_HEAD = RECORD_HEAD + MESSAGE_FIXED  # a Message record's bytes before its data


@njit(cache=True, nogil=True)
def message_headers(buf, starts, publish_time, sequence):
    """The publish_time (u64) and sequence (u32) of the Message records whose data start at ``starts`` in
    ``buf``: 8 and 20 bytes before the data. Returns -1, or the first ``i`` whose fields would lie outside
    ``buf`` (nothing is read for it or after it)."""
    for i in range(starts.size):
        at = starts[i]
        if at < MESSAGE_FIXED or at > buf.size:
            return i
        value = np.int64(0)
        for k in range(8):
            value |= np.int64(buf[at - 8 + k]) << (8 * k)
        publish_time[i] = value
        number = np.int64(0)
        for k in range(4):
            number |= np.int64(buf[at - 20 + k]) << (8 * k)
        sequence[i] = number
    return -1


@njit(cache=True, nogil=True)
def count_messages(buf):
    """The number of Message records among the records of ``buf`` (a decompressed chunk)."""
    return message_records(buf, np.empty(0, dtype=np.int64))


@njit(cache=True, nogil=True)
def message_records(buf, out):
    """The number of Message records among the records of ``buf`` (a decompressed chunk), walking each
    record's opcode and u64 length, and the offsets of the first ``out.size`` of them, in order, in
    ``out``. The walk stops at a record that runs past the end."""
    count = 0
    pos = 0
    n = buf.size
    while n - pos >= 9:
        length = np.uint64(0)
        for k in range(8):
            length |= np.uint64(buf[pos + 1 + k]) << np.uint64(8 * k)
        if length > np.uint64(n - pos - 9):
            break
        if buf[pos] == _MESSAGE:
            if count < out.size:
                out[count] = pos
            count += 1
        pos += 9 + np.int64(length)
    return count


@njit(cache=True, nogil=True)
def message_runs(buf, pos, end, channel, log_time, offset):
    """Message records one after another in ``buf[pos:end]`` (a decompressed chunk, or the file's data
    section being scanned): per record its channel id, log_time and offset, into the arrays from index 0.
    Returns ``(count, stop)``: the records taken, and where the walk stopped, at ``end``, when the arrays
    are full, or at the first record that is anything else or odd (another opcode, a length shorter than
    a message's fixed fields or past ``end``, a log_time past int64). The checked Python scan reads that
    record and says what it is, then the walk goes on."""
    k = 0
    if pos < 0 or end > buf.size:  # (a mapping shorter than the size the caller took: nothing is read)
        return k, pos
    while k < offset.size and end - pos >= _HEAD and buf[pos] == _MESSAGE:
        length = np.uint64(0)
        for j in range(8):
            length |= np.uint64(buf[pos + 1 + j]) << np.uint64(8 * j)
        if length < np.uint64(MESSAGE_FIXED) or length > np.uint64(end - pos - RECORD_HEAD):
            break
        time = np.uint64(0)
        for j in range(8):
            time |= np.uint64(buf[pos + 15 + j]) << np.uint64(8 * j)
        if time > np.uint64(MAX_TIME):
            break
        channel[k] = np.int64(buf[pos + 9]) | (np.int64(buf[pos + 10]) << 8)
        log_time[k] = np.int64(time)
        offset[k] = pos
        k += 1
        pos += RECORD_HEAD + np.int64(length)
    return k, pos


@njit(cache=True, nogil=True, inline="always")
def _message_span(buf, pos, lo, hi, channel, log_time):
    """(data start, data length) of the Message record at ``buf[pos:]`` inside ``[lo, hi)``, checked: opcode,
    a length that fits, and the channel id and log_time the index promised. (-1, -1) when anything differs."""
    if pos < lo or pos > hi - _HEAD or pos > buf.size - _HEAD or buf[pos] != _MESSAGE:
        return -1, -1
    length = np.uint64(0)
    for k in range(8):
        length |= np.uint64(buf[pos + 1 + k]) << np.uint64(8 * k)
    if length < np.uint64(MESSAGE_FIXED) or length > np.uint64(hi - pos - RECORD_HEAD):
        return -1, -1
    got_channel = np.int64(buf[pos + 9]) | (np.int64(buf[pos + 10]) << 8)
    got_time = np.uint64(0)
    for k in range(8):
        got_time |= np.uint64(buf[pos + 15 + k]) << np.uint64(8 * k)
    if got_channel != channel or got_time != np.uint64(log_time):
        return -1, -1
    return pos + _HEAD, np.int64(length) - MESSAGE_FIXED


@njit(cache=True, nogil=True)
def locate_messages(buf, at, lo, hi, channel, log_time, starts, lengths):
    """Message data spans of the records at ``buf[at[i]:]``, each inside ``[lo[i], hi[i])`` (see
    _message_span); fills ``starts`` and ``lengths``. Returns the first row that fails (the caller explains
    it with the NumPy checks), or -1."""
    for i in range(at.size):
        start, length = _message_span(buf, at[i], lo[i], hi[i], channel[i], log_time[i])
        if start < 0:
            return i
        starts[i] = start
        lengths[i] = length
    return -1


@njit(cache=True, nogil=True)
def file_spans(buf, selected, chunk, offset, time, conn, conn_ids, data_offset, size, data_len,
               starts, lengths, verified):
    """Message data spans for messages of uncompressed chunks, straight from the index arrays: message
    ``selected[i]`` lies in chunk ``chunk[m]`` at ``offset[m]`` of its records, which start at
    ``data_offset[c]`` in the file, and holds channel ``conn_ids[conn[m]]`` and log_time ``time[m]``.
    Marks what it verified; returns -1, or the first ``i`` whose chunk holds other than ``size`` bytes."""
    for i in range(selected.size):
        m = selected[i]
        c = chunk[m]
        if size[c] != data_len[c]:
            return i
        lo = data_offset[c]
        start, length = _message_span(buf, lo + offset[m], lo, lo + size[c], conn_ids[conn[m]], time[m])
        verified[i] = start >= 0
        if start >= 0:
            starts[i] = start
            lengths[i] = length
    return -1


@njit(cache=True, nogil=True)
def window_spans(heads, head_at, seen, at, chunk_end, channel, log_time, starts, lengths):
    """file_spans over windows onto the records: record ``i`` lies at file offset ``at[i]`` in a chunk ending
    at ``chunk_end[i]``, its first ``seen[i]`` bytes at ``heads[head_at[i]:]``. Fills file offsets into
    ``starts``/``lengths``; returns -1, or the first ``i`` not verified from its window."""
    for i in range(at.size):
        base = head_at[i]
        if seen[i] < _HEAD:  # (the record's fixed part runs past its window)
            return i
        start, length = _message_span(heads, base, base, base + chunk_end[i] - at[i], channel[i], log_time[i])
        if start < 0:
            return i
        starts[i] = at[i] + start - base
        lengths[i] = length
    return -1
