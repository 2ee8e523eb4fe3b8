"""Numba kernels over MCAP records. Imported on first use, like every kernel."""

from __future__ import annotations

import numpy as np
from numba import njit

from .records import MESSAGE_FIXED, RECORD_HEAD, Opcode

_MESSAGE = np.uint8(int(Opcode.MESSAGE))
_HEAD = RECORD_HEAD + MESSAGE_FIXED  # a Message record's bytes before its data


@njit(cache=True, nogil=True)
def count_messages(buf):
    """The number of Message records among the records of ``buf`` (a decompressed chunk), walking
    each record's opcode and u64 length; stops at a record that runs past the end."""
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
            count += 1
        pos += 9 + np.int64(length)
    return count


@njit(cache=True, nogil=True)
def locate_messages(buf, at, lo, hi, channel, log_time, starts, lengths):
    """Message data spans of the records at ``buf[at[i]:]``, each inside ``[lo[i], hi[i])``: checks the
    opcode, that the length fits, and the channel id and log_time the index promised; fills ``starts``
    and ``lengths`` (of the message data). Returns the first row that fails (the caller explains it
    with the NumPy checks), or -1."""
    for i in range(at.size):
        pos = at[i]
        if pos < lo[i] or pos > hi[i] - _HEAD or pos > buf.size - _HEAD or buf[pos] != _MESSAGE:
            return i
        length = np.uint64(0)
        for k in range(8):
            length |= np.uint64(buf[pos + 1 + k]) << np.uint64(8 * k)
        if length < np.uint64(MESSAGE_FIXED) or length > np.uint64(hi[i] - pos - RECORD_HEAD):
            return i
        got_channel = np.int64(buf[pos + 9]) | (np.int64(buf[pos + 10]) << 8)
        got_time = np.uint64(0)
        for k in range(8):
            got_time |= np.uint64(buf[pos + 15 + k]) << np.uint64(8 * k)
        if got_channel != channel[i] or got_time != np.uint64(log_time[i]):
            return i
        starts[i] = pos + _HEAD
        lengths[i] = np.int64(length) - MESSAGE_FIXED
    return -1
