"""Numba byte helpers shared by every kernel: little-endian reads and checked copies.

Plain ``@njit(cache=True, nogil=True)`` functions, inlined into their callers
(the LZ4 frame kernel, the containers' record locators, the message decoder).
Imported on first use: ``import fastbag`` does not load Numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import compilenotice  # noqa: F401  # says so on stderr while the kernels compile (a cold cache)


@njit(cache=True, nogil=True, inline="always")
def u32(buf, pos):
    return np.int64(buf[pos]) | (np.int64(buf[pos + 1]) << 8) | (np.int64(buf[pos + 2]) << 16) | \
        (np.int64(buf[pos + 3]) << 24)


@njit(cache=True, nogil=True, inline="always")
def copy(dst, d, src, s, n):
    """dst[d:d+n] = src[s:s+n] for checked spans, forwards byte by byte (so an overlapping
    LZ4 match repeats its pattern, as fastbag.io.lz4frame needs).

    Unsigned indices spare Numba's negative-index wraparound, so LLVM
    vectorizes the loop; a slice assignment costs ~10x more for the short
    copies of message fields (measured: 64-byte copies 1.5 vs 42 GB/s).
    """
    d0 = np.uint64(d)
    s0 = np.uint64(s)
    for k in range(np.uint64(n)):
        dst[d0 + k] = src[s0 + k]
