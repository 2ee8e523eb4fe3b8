"""LZ4 frame decoding into a buffer fastbag owns (a Numba kernel).

Why not ``lz4.frame``: it returns a fresh ``bytes`` for every chunk (and
copies a ``memoryview`` input first). On a VM, touching fresh memory costs
more than decompressing into it: reading the raw messages of an lz4 bag was
page faults for the most part. Here a chunk decodes into a NumPy array
sized by the chunk header, which :class:`fastbag.io.chunks.BufferPool` hands
out again once nothing references it.

The kernel covers the frames ROS tools write (roslz4: independent 1 MiB
blocks with a content checksum; python-lz4: linked 64 KiB blocks with the
content size), checking every read and write against its buffer, and every
checksum the frame carries (xxHash32). Anything else it does not decode
(dictionary IDs, skippable frames, other versions) is reported as
``UNSUPPORTED`` so that the caller hands the chunk to ``lz4.frame``.
Imported on first use, like every kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from ..errors import TooLarge
from .bytekernels import copy as _copy  # forwards, byte by byte: an overlapping match repeats its pattern
from .bytekernels import copy_disjoint as _copy_disjoint
from .bytekernels import copy_wide as _copy_wide
from .prefix import Reach, first_target, next_target

MAGIC = 0x184D2204

# Kernel status codes (the message for each is in MESSAGES).
DONE = 0
NEED_SPACE = 1      # the next block may not fit in ``out``: grow it and call again with the same state
UNSUPPORTED = 2     # a valid frame feature this kernel leaves to lz4.frame
BAD_MAGIC = 3
BAD_DESCRIPTOR = 4
BAD_HEADER_CHECKSUM = 5
TRUNCATED = 6
BAD_BLOCK = 7
BAD_BLOCK_CHECKSUM = 8
TOO_LARGE = 9
BAD_CONTENT_SIZE = 10
BAD_CONTENT_CHECKSUM = 11
TRAILING = 12
PAUSED = 13         # ``stop`` bytes decoded (what the caller needs): call again with the same state for more

MESSAGES = {
    BAD_MAGIC: "it does not start with the LZ4 frame magic number",
    BAD_DESCRIPTOR: "its frame descriptor has reserved bits set or an unknown block size",
    BAD_HEADER_CHECKSUM: "its frame descriptor checksum does not match",
    TRUNCATED: "the frame ends in the middle of a block",
    BAD_BLOCK: "a compressed block is malformed",
    BAD_BLOCK_CHECKSUM: "a block checksum does not match",
    TOO_LARGE: "it decompresses to more bytes than the limit",
    BAD_CONTENT_SIZE: "its decompressed size differs from the content size in its frame header",
    BAD_CONTENT_CHECKSUM: "the content checksum does not match",
    TRAILING: "bytes follow the end of the compressed stream",
}

# state[] slots: the kernel can stop between blocks (NEED_SPACE) or between a block's sequences (PAUSED)
# and resume. S_BLOCK_AT is where a paused block goes on (0: at a block boundary), S_BLOCK_END where it
# ends, S_BLOCK_CAP and S_WINDOW its output bounds.
# The content checksum is computed block by block, while each block's output is still in the CPU's
# caches (a second pass over a whole chunk afterwards ran at memory speed: 1.6 vs 2.2 GB/s for
# lz4.frame): S_HASHED is how far the output was fed to xxHash32's lanes, S_LANES the four lanes.
# S_SCRATCH: lanes for block checksums (no allocation per block).
S_IN, S_OUT, S_FLAGS, S_BLOCK_MAX, S_CONTENT_SIZE, S_HASHED, S_LANES, S_SCRATCH = 0, 1, 2, 3, 4, 5, 6, 10
S_BLOCK_AT, S_BLOCK_END, S_BLOCK_CAP, S_WINDOW = 14, 15, 16, 17
STATE_SIZE = 18
#: ``stop`` for a decode that nothing pauses
NO_STOP = 1 << 62

P1, P2, P3, P4, P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
MASK = 0xFFFFFFFF


@njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & MASK


# Indices are made unsigned where the kernels index buffers: Numba then skips its
# negative-index wraparound, and LLVM vectorizes the copies (~10x faster here).
# bytekernels.copy copies forwards byte by byte, which an overlapping match needs.

@njit(cache=True, nogil=True, inline="always")
def _u32(buf, pos):
    p = np.uint64(pos)
    return np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16) | \
        (np.int64(buf[p + 3]) << 24)


@njit(cache=True, nogil=True, inline="always")
def _word(words, p):
    return np.int64(words[np.uint64(p)])


@njit(cache=True, nogil=True)
def _stripes(buf, lanes, start, end):
    """Feed the 16-byte stripes of ``buf[start:end]`` (a multiple of 16 bytes) into xxHash32's four lanes."""
    words = buf[start:end].view(np.uint32)
    v1, v2, v3, v4 = lanes[0], lanes[1], lanes[2], lanes[3]
    p = 0
    while p + 4 <= words.size:
        v1 = (_rotl((v1 + _word(words, p) * P2) & MASK, 13) * P1) & MASK
        v2 = (_rotl((v2 + _word(words, p + 1) * P2) & MASK, 13) * P1) & MASK
        v3 = (_rotl((v3 + _word(words, p + 2) * P2) & MASK, 13) * P1) & MASK
        v4 = (_rotl((v4 + _word(words, p + 3) * P2) & MASK, 13) * P1) & MASK
        p += 4
    lanes[0], lanes[1], lanes[2], lanes[3] = v1, v2, v3, v4


@njit(cache=True, nogil=True, inline="always")
def _start_lanes(lanes):
    lanes[0] = (P1 + P2) & MASK
    lanes[1] = P2
    lanes[2] = 0
    lanes[3] = (-P1) & MASK


@njit(cache=True, nogil=True)
def _digest(buf, n, lanes, hashed):
    """xxHash32 (seed 0) of ``buf[:n]`` whose stripes below ``hashed`` are already in ``lanes``.

    In int64: every value is masked to 32 bits before it is shifted or
    multiplied, and products wrap, so the low 32 bits come out right. Words
    are read through a uint32 view (little-endian hosts, as x86 and ARM are).
    """
    full = n >> 4 << 4
    if hashed < full:
        _stripes(buf, lanes, hashed, full)
    if n >= 16:
        h = (_rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)) & MASK
    else:
        h = np.int64(P5)
    h = (h + (n & MASK)) & MASK
    words = buf[full:n >> 2 << 2].view(np.uint32)
    for p in range(words.size):
        h = (_rotl((h + _word(words, p) * P3) & MASK, 17) * P4) & MASK
    for q in range(n >> 2 << 2, n):
        h = (_rotl((h + _word(buf, q) * P5) & MASK, 11) * P1) & MASK
    h ^= h >> 15
    h = (h * P2) & MASK
    h ^= h >> 13
    h = (h * P3) & MASK
    h ^= h >> 16
    return h


@njit(cache=True, nogil=True, inline="always")
def _hash(buf, start, n, lanes):
    _start_lanes(lanes)
    return _digest(buf[start:start + n], n, lanes, 0)


@njit(cache=True, nogil=True)
def xxh32(buf, start, n):
    """xxHash32 (seed 0) of ``buf[start:start+n]``, as the LZ4 frame format uses it."""
    return _hash(buf, start, n, np.empty(4, dtype=np.int64))


@njit(cache=True, nogil=True)
def _header(src, state):
    """Parse the frame descriptor into ``state``; returns a status."""
    n = src.size
    if n < 7:
        return TRUNCATED
    magic = _u32(src, 0)
    if magic != MAGIC:
        if (magic & 0xFFFFFFF0) == 0x184D2A50:
            return UNSUPPORTED  # a skippable frame
        return BAD_MAGIC
    flags = np.int64(src[4])
    bd = np.int64(src[5])
    if (flags >> 6) != 1:
        return UNSUPPORTED  # another version of the frame format
    if (flags & 0x02) or (bd & 0x8F):
        return BAD_DESCRIPTOR
    size_id = (bd >> 4) & 7
    if size_id < 4:
        return BAD_DESCRIPTOR
    if flags & 0x01:
        return UNSUPPORTED  # a dictionary ID
    pos = 6
    content_size = -1
    if flags & 0x08:
        if n < pos + 9:
            return TRUNCATED
        low = _u32(src, pos)
        high = _u32(src, pos + 4)
        if high >= 0x80000000:
            return BAD_CONTENT_SIZE
        content_size = np.int64(low) | (np.int64(high) << 32)
        pos += 8
    if (xxh32(src, 4, pos - 4) >> 8) & 0xFF != np.int64(src[pos]):
        return BAD_HEADER_CHECKSUM
    state[S_IN] = pos + 1
    state[S_OUT] = 0
    state[S_FLAGS] = flags
    state[S_BLOCK_MAX] = np.int64(1) << (8 + 2 * size_id)
    state[S_CONTENT_SIZE] = content_size
    state[S_HASHED] = 0
    _start_lanes(state[S_LANES:S_LANES + 4])
    return DONE


@njit(cache=True, nogil=True)
def _block(src, ip, end, out, op, cap, window, stop, state):
    """Decode the compressed block ``src[ip:end]`` to ``out[op:]``, writing below ``cap``.

    Matches may reach back to ``out[window]``. Returns the new output
    position; -1 if the block is malformed, -2 if it would write past ``cap``.
    Once ``stop`` bytes are out it pauses between two sequences, leaving
    where the next begins in ``state[S_BLOCK_AT]``.
    Literals and matches are copied 16 bytes at a time where both buffers
    have 16 bytes to spare beyond them (as the C library does; what lands
    past the copy is output not yet decoded, overwritten in turn), exactly
    near the ends. (The two length extensions are written out: a shared
    helper returning a tuple made this loop 35% slower.)
    """
    src_room = src.size - 16
    out_room = out.size - 16
    while True:
        if op >= stop:
            state[S_BLOCK_AT] = ip
            return op
        if ip >= end:
            return -1
        token = np.int64(src[ip])
        ip += 1
        run = token >> 4
        if run == 15:
            while True:
                if ip >= end:
                    return -1
                b = np.int64(src[ip])
                ip += 1
                run += b
                if b != 255:
                    break
        if run > end - ip:
            return -1
        if run > cap - op:
            return -2
        if ip + run <= src_room and op + run <= out_room:
            _copy_wide(out, op, src, ip, run)
        else:
            _copy_disjoint(out, op, src, ip, run)
        ip += run
        op += run
        if ip == end:
            return op  # the last sequence holds only literals
        if end - ip < 2:
            return -1
        offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
        ip += 2
        if offset == 0 or offset > op - window:
            return -1
        length = token & 15
        if length == 15:
            while True:
                if ip >= end:
                    return -1
                b = np.int64(src[ip])
                ip += 1
                length += b
                if b != 255:
                    break
        length += 4
        if length > cap - op:
            return -2
        if offset >= 16 and op + length <= out_room:
            _copy_wide(out, op, out, op - offset, length)
        else:
            _copy(out, op, out, op - offset, length)
        op += length


@njit(cache=True, nogil=True)
def decode(src, out, limit, state, stop):
    """Decode the LZ4 frame ``src`` into ``out`` (at most ``limit`` bytes in all).

    ``state`` (int64[STATE_SIZE], zeros to start) carries the position between
    calls: NEED_SPACE asks for a larger ``out`` (the bytes written so far
    copied over) before the next block; PAUSED says ``stop`` bytes or more
    are out (``state[S_OUT]``), for a caller that needs no more yet. DONE
    leaves the decoded length in ``state[S_OUT]``; other codes are errors
    (see MESSAGES).
    """
    if state[S_IN] == 0:
        status = _header(src, state)
        if status != DONE:
            return status
    flags = state[S_FLAGS]
    block_max = state[S_BLOCK_MAX]
    check = 4 if flags & 0x10 else 0
    ip = state[S_IN]
    op = state[S_OUT]
    n = src.size
    while True:
        if state[S_BLOCK_AT]:  # a block paused part way goes on
            start, end = state[S_BLOCK_AT], state[S_BLOCK_END]
            cap, window = state[S_BLOCK_CAP], state[S_WINDOW]
            state[S_BLOCK_AT] = 0
        else:
            if op >= stop:
                state[S_IN] = ip
                state[S_OUT] = op
                return PAUSED
            if n - ip < 4:
                return TRUNCATED
            word = _u32(src, ip)
            if word == 0:  # the end mark
                ip += 4
                break
            size = word & 0x7FFFFFFF
            stored = word >> 31
            if size > block_max:
                return BAD_BLOCK
            if n - ip - 4 - check < size:
                return TRUNCATED
            if out.size - op < min(block_max, limit - op) and out.size < limit:  # a block makes <= block_max
                state[S_IN] = ip
                state[S_OUT] = op
                return NEED_SPACE
            cap = min(out.size, limit, op + block_max)
            start = ip + 4
            end = start + size
            if check and _hash(src, start, size, state[S_SCRATCH:S_SCRATCH + 4]) != _u32(src, end):
                return BAD_BLOCK_CHECKSUM
            window = op if flags & 0x20 else 0  # independent blocks may not reach into earlier ones
            if stored:
                if size > cap - op:
                    return TOO_LARGE
                _copy_disjoint(out, op, src, start, size)
                start = end  # (nothing left to decode)
                op += size
        if start < end:
            new = _block(src, start, end, out, op, cap, window, stop, state)
            if new == -2:
                return TOO_LARGE if cap == limit else BAD_BLOCK  # past the limit, or past block_max
            if new < 0:
                return BAD_BLOCK
            op = new
            if state[S_BLOCK_AT]:
                state[S_BLOCK_END], state[S_BLOCK_CAP], state[S_WINDOW] = end, cap, window
                state[S_IN] = ip
                state[S_OUT] = op
                return PAUSED
        ip = end + check
        if flags & 0x04 and op - state[S_HASHED] >= 16:  # hash this block's output while it is cached
            full = op >> 4 << 4
            _stripes(out, state[S_LANES:S_LANES + 4], state[S_HASHED], full)
            state[S_HASHED] = full
    state[S_OUT] = op
    if flags & 0x04:
        if n - ip < 4:
            return TRUNCATED
        if _digest(out, op, state[S_LANES:S_LANES + 4], state[S_HASHED]) != _u32(src, ip):
            return BAD_CONTENT_CHECKSUM
        ip += 4
    if state[S_CONTENT_SIZE] >= 0 and state[S_CONTENT_SIZE] != op:
        return BAD_CONTENT_SIZE
    if ip != n:
        return TRAILING
    return DONE


@njit(cache=True, nogil=True)
def decode_frames(src, offsets, lengths, out, bases, sizes):
    """Decode the LZ4 frames ``src[offsets[k]:offsets[k] + lengths[k]]``, in order, each into
    ``out[bases[k]:bases[k] + sizes[k]]``, which it must fill exactly: many small chunks in one call.

    Returns how many decoded so; the first that did not (damaged, truncated,
    or a feature left to ``lz4.frame``) and those after it are left to
    :func:`decompress`, one by one, which says what is wrong. Spans outside
    ``src`` or ``out`` count as not decoded.
    """
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    for k in range(offsets.size):
        start, end = offsets[k], offsets[k] + lengths[k]
        if start < 0 or lengths[k] < 0 or end > src.size or bases[k] < 0 or bases[k] + sizes[k] > out.size:
            return k
        state[:] = 0
        status = decode(src[start:end], out[bases[k]:bases[k] + sizes[k]], sizes[k], state, NO_STOP)
        if status != DONE or state[S_OUT] != sizes[k]:
            return k
    return offsets.size


class Unsupported(Exception):
    """The frame uses a feature this kernel leaves to ``lz4.frame``."""


#: Until output proves otherwise, a chunk is assumed to expand at most this much.
FIRST_GUESS_RATIO = 32


def decompress(src: np.ndarray, limit: int, allocate: Callable[[int], np.ndarray] | None = None,
               reach: Reach | None = None) -> np.ndarray:
    """The LZ4 frame ``src`` (uint8) decompressed: a new uint8 array of at most ``limit`` bytes.

    Raises ValueError if malformed, :class:`~fastbag.errors.TooLarge` past
    ``limit``, :class:`Unsupported` for a frame to hand to ``lz4.frame``. Memory follows what the data produces: a
    ``limit`` far beyond what the frame could plausibly hold is not
    allocated up front; the buffer doubles as blocks arrive. ``allocate(n)``
    gives the first buffer (a recycled one, say; default ``np.empty``).
    Given ``reach`` (see :data:`fastbag.io.prefix.Reach`), decoding stops
    once the output holds what it asks for: the frame's checksums past that
    point are not checked.
    """
    guess = FIRST_GUESS_RATIO * src.size + (1 << 16)
    first = limit if limit <= guess else guess
    out = allocate(first) if allocate is not None else np.empty(first, dtype=np.uint8)
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    target = first_target(reach, limit)
    while True:
        status = decode(src, out, limit, state, target if target <= limit else NO_STOP)
        if status == PAUSED:
            target = next_target(reach, out[:state[S_OUT]], limit)  # type: ignore[arg-type]
            if state[S_OUT] >= target:
                break
            continue
        if status != NEED_SPACE:
            break
        grown = np.empty(min(2 * out.size, limit), dtype=np.uint8)
        grown[:state[S_OUT]] = out[:state[S_OUT]]
        out = grown
    if status == UNSUPPORTED:
        raise Unsupported("this LZ4 frame uses a feature left to lz4.frame")
    if status == TOO_LARGE:
        raise TooLarge(f"more than {limit} bytes")
    if status not in (DONE, PAUSED):
        raise ValueError(MESSAGES[status])
    size = int(state[S_OUT])
    return out if size == out.size else out[:size]
