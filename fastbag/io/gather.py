"""NumPy gathers of fixed-width byte rows from a buffer, for index records read in bulk at open.

Containers parse their indexes (ROS1 index data, MCAP message indexes and
chunk heads) with these: one fancy index over all records instead of a
Python loop per record, and no Numba (opening a bag does not load it).
"""

from __future__ import annotations

import numpy as np


def rows(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position of ``at`` (all in bounds, else IndexError), as an (n, width)
    uint8 array: one gather of rows of an overlapping view, faster than indexing with
    ``at[:, None] + np.arange(width)`` (and, built directly, than NumPy's sliding_window_view, whose own
    overhead is most of the time for the few hundred rows of a chunk table)."""
    if at.size == 0 or buf.size < width:
        if at.size and width:
            raise IndexError(f"rows of {width} bytes in a buffer of {buf.size}")
        return np.zeros((0, width), dtype=np.uint8)
    if buf.flags.c_contiguous:
        windows = np.ndarray((buf.size - width + 1, width), dtype=np.uint8, buffer=buf, strides=(1, 1))
    else:
        windows = np.lib.stride_tricks.sliding_window_view(buf, width)
    return windows[at]


def le_uint(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The little-endian unsigned ints of ``width`` (1, 2, 4 or 8) bytes at each position ``at`` of
    ``buf``, as uint64; the caller has checked that every ``at + width`` lies inside ``buf``."""
    return rows(buf, at, width).view(f"<u{width}").ravel().astype(np.uint64)


def item_positions(offsets: np.ndarray, counts: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Records of ``counts[r]`` items of ``width`` bytes stored from ``offsets[r]``: for every item, the
    record it belongs to and where it starts (item j of record r at ``offsets[r] + width * j``), so
    that one fancy index gathers them all."""
    which = np.repeat(np.arange(counts.size), counts)
    first = np.zeros(counts.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    return which, offsets[which] + (np.arange(which.size) - first[which]) * width
