"""NumPy gathers of fixed-width byte rows from a buffer, for index records read in bulk at open.

Containers parse their indexes (ROS1 index data, MCAP message indexes and
chunk heads) with these: one fancy index over all records instead of a
Python loop per record, and no Numba (opening a bag does not load it).
"""

from __future__ import annotations

import numpy as np


def rows(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position of ``at`` (all in bounds, else IndexError), as an (n, width)
    uint8 array.

    One fancy index of a 1-D view whose items are ``width``-byte records starting at every byte: NumPy
    copies each as one item, 2.5x faster than a gather of (n, width) rows from a 2-D overlapping view
    (which copies byte by byte), and than ``at[:, None] + np.arange(width)``.
    """
    if at.size == 0 or buf.size < width:
        if at.size and width:
            raise IndexError(f"rows of {width} bytes in a buffer of {buf.size}")
        return np.zeros((0, width), dtype=np.uint8)
    if not buf.flags.c_contiguous:  # (never a mapping or a payload; a strided view is gathered in place)
        return np.lib.stride_tricks.sliding_window_view(buf, width)[at]
    return _overlapping(buf, f"V{width}", width)[at].view(np.uint8).reshape(-1, width)


def le_uint(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The little-endian unsigned ints of ``width`` (1, 2, 4 or 8) bytes at each position ``at`` of
    ``buf``, as uint64; the caller has checked that every ``at + width`` lies inside ``buf``."""
    if at.size == 0 or buf.size < width or not buf.flags.c_contiguous:
        return rows(buf, at, width).view(f"<u{width}").ravel().astype(np.uint64)
    return _overlapping(buf, f"<u{width}", width)[at].astype(np.uint64)


def _overlapping(buf: np.ndarray, dtype: str, width: int) -> np.ndarray:
    """A 1-D view of ``buf`` (uint8) whose item ``i`` is the ``width`` bytes from ``buf[i]`` (unaligned
    items: NumPy reads them with its unaligned loops); ``buf`` is C-contiguous."""
    return np.ndarray((buf.size - width + 1,), dtype=dtype, buffer=buf, strides=(1,))


def item_positions(offsets: np.ndarray, counts: np.ndarray, width: int) -> np.ndarray:
    """Records of ``counts[r]`` items of ``width`` bytes stored from ``offsets[r]``: where every item
    starts (item j of record r at ``offsets[r] + width * j``), so that one fancy index gathers them all."""
    first = np.zeros(counts.size, dtype=np.int64)  # each record's first item
    np.cumsum(counts[:-1], out=first[1:])
    total = int(first[-1] + counts[-1]) if counts.size else 0
    return np.repeat(offsets - first * width, counts) + np.arange(0, total * width, width, dtype=np.int64)
