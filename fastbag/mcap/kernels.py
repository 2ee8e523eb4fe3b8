"""Numba kernels over MCAP records. Imported on first use, like every kernel."""

from __future__ import annotations

import numpy as np
from numba import njit

from .records import Opcode

_MESSAGE = np.uint8(int(Opcode.MESSAGE))


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
