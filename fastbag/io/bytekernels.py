"""Numba byte helpers shared by every kernel: little-endian reads and checked copies.

Plain ``@njit(cache=True, nogil=True)`` functions, inlined into their callers
(the LZ4 frame kernel, the containers' record locators, the message decoder).
Imported on first use: ``import fastbag`` does not load Numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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


@intrinsic
def _memcpy(typingctx, dst, d, src, s, n):  # type: ignore[no-untyped-def]
    """LLVM's memcpy of ``n`` bytes from ``src[s:]`` to ``dst[d:]`` (uint8 arrays, int offsets)."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == types.uint8 and
            src.dtype == types.uint8 and all(isinstance(x, types.Integer) for x in (d, s, n))):
        return None
    sig = types.void(dst, d, src, s, n)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        dst_, d_, src_, s_, n_ = args
        to = context.make_array(signature.args[0])(context, builder, dst_)
        frm = context.make_array(signature.args[2])(context, builder, src_)
        cgutils.raw_memcpy(builder, builder.gep(to.data, [d_]), builder.gep(frm.data, [s_]), n_, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def copy_disjoint(dst, d, src, s, n):
    """dst[d:d+n] = src[s:s+n] for checked spans of two different arrays, through memcpy.

    Inside the layout interpreter (fastbag.msg.kernels.walk) LLVM leaves
    :func:`copy`'s loop a slow one, whatever the size: measured on a chunk of
    Imu records in cache, 57 ms per million messages with it, 19 ms with this
    (and 54 ms again with an ``if n > 0`` around the call: the length is
    clamped instead).
    """
    _memcpy(dst, d, src, s, max(n, 0))


@njit(cache=True, nogil=True, inline="always")
def copy_wide(dst, d, src, s, n):
    """dst[d:d+n] = src[s:s+n] in 16-byte steps, each one fixed-size memcpy (two moves): up to 15 bytes
    past ``d+n`` are overwritten and past ``s+n`` read, which the caller must allow. Within one array,
    safe forwards when ``d - s >= 16`` (each step reads only bytes already final)."""
    k = 0
    while k < n:
        _memcpy(dst, d + k, src, s + k, 16)
        k += 16


# libc's pread(2), called from compiled code: Numba resolves the symbol by name in this process (also
# when the kernel comes from the on-disk cache).
_pread = types.ExternalFunction("pread", types.int64(types.int32, types.uint64, types.uint64, types.int64))


@njit(cache=True, nogil=True)
def pread_spans(fd, out, offsets, lengths):
    """Read ``lengths[i]`` bytes at file offset ``offsets[i]`` of ``fd`` into ``out``, one span after another.

    Returns -1 when every span was read whole, else the number of the first
    span that could not be (past the end of the file, an error, or more
    bytes than ``out`` holds). The same reads as a loop of ``os.preadv``
    without its ~0.4 us of Python per call: 0.22 against 0.52 ms for the
    851 spans of index data that opening a 1.7 GB bag reads.
    """
    base = out.ctypes.data
    at = 0
    for i in range(offsets.size):
        n = lengths[i]
        if n < 0 or offsets[i] < 0 or at + n > out.size:
            return i
        done = 0
        while done < n:
            got = _pread(np.int32(fd), np.uint64(base + at + done), np.uint64(n - done), offsets[i] + done)
            if got <= 0:
                return i
            done += got
        at += n
    return -1
