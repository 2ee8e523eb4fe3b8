"""Numba kernels: one generic interpreter of layout programs, and byte gathers.

Every function here is a plain ``@njit(cache=True, nogil=True)`` function of
arrays and integers: the op program of :mod:`fastbag.msg.layout` is data, so a
new message type compiles nothing and the on-disk cache serves every type; an
encoding's rules (ROS1, CDR in either byte order) are integer arguments and
the ALIGN op, not other kernels. This module is imported on first use
(``import fastbag`` does not load Numba).

Every read of the message buffer is checked against the message's end before
it happens; a failure is reported through the ``status`` array, never by
reading past the buffer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..io.bytekernels import copy_disjoint as _copy  # message bytes to rows: never overlapping
from ..io.bytekernels import u32 as _u32

# Op codes (mirrors fastbag.msg.layout; kept literal so the kernels need no import).
OP_END, OP_COPY, OP_STRING, OP_ARRAY, OP_TABLE, OP_ALIGN = 0, 1, 2, 3, 4, 5

# status[0] codes
OK = 0
SHORT = 1        # a read would run past the message's end
TRAILING = 2     # bytes left over after the last field
TOO_DEEP = 3     # nested arrays deeper than the stack
BAD_SPAN = 4     # the message span itself lies outside the buffer
TOO_MANY = 5     # more elements that take no bytes than MAX_EMPTY_ELEMENTS
BAD_HEADER = 6   # the encapsulation header names another representation (status[2]: the id found)
OUTSIDE = 7      # windowed walk: a read falls outside the message's windows (the caller walks the file instead)
RUN_TOO_MANY = 8  # the walk's child rows outnumber its messages' bytes plus MAX_EMPTY_ELEMENTS (see walk)

STACK_DEPTH = 64
#: Elements that can take no bytes (a struct of only ``T[0]`` fields) cost a row each but are not
#: bounded by the message's bytes: a count read from the data may not exceed this.
MAX_EMPTY_ELEMENTS = 1 << 18


@njit(cache=True, nogil=True, inline="always")
def _fail(status, code, m, pos):
    """Record why message ``m`` failed, and where."""
    status[0] = code
    status[1] = m
    status[2] = pos


@njit(cache=True, nogil=True, inline="always")
def _count(buf, pos, big):
    """A u32 length or count, in the message's byte order."""
    if big:
        return (np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8) | \
            np.int64(buf[pos + 3])
    return _u32(buf, pos)


@njit(cache=True, nogil=True, inline="always")
def _at(windows, m, pos, n):
    """Where the file's bytes ``[pos, pos + n)`` of message ``m`` lie in the window buffer, or -1 when they
    are not all inside one of its two windows. ``pos`` itself without windows (the buffer is the file's
    bytes; a None argument compiles this away)."""
    if windows is None:
        return pos
    if windows[m, 0] <= pos and pos + n <= windows[m, 0] + windows[m, 1]:
        return windows[m, 2] + pos - windows[m, 0]
    if windows[m, 3] <= pos and pos + n <= windows[m, 3] + windows[m, 4]:
        return windows[m, 5] + pos - windows[m, 3]
    return -1


@njit(cache=True, nogil=True)
def walk(buf, starts, lengths, ops, row_sizes, root_fixed, fixed, fixed_base, slot_base, slot_pos, slot_cnt,
         table_rows, fill, status, header, representation, big, trailing, windows=None):
    """Walk messages ``buf[starts[m]:starts[m]+lengths[m]]`` through the op program.

    The encoding's rules come as integers: ``header`` bytes precede the
    fields (CDR: 4, whose first two bytes must be the big-endian u16
    ``representation`` when it is >= 0); alignment (OP_ALIGN) counts from the
    end of the header; lengths and counts are big-endian when ``big``; up to
    ``trailing`` bytes may follow the last field (CDR pads to 4 bytes).

    With ``fill`` false, only counts child-table rows into ``table_rows`` and
    validates every message. With ``fill`` true, also copies fixed parts:
    row r of the root table to ``root_fixed[fixed_base[0] + r * row_sizes[0]:]``
    (the caller's array for the whole read, so root rows are written once),
    row r of child table t to ``fixed[fixed_base[t] + r * row_sizes[t]:]``;
    and records each slot's data position and count (slot s of row r at
    ``slot_base[s] + r``). ``table_rows`` must then start from the same values
    as the counting pass did. Root rows are message indices ``m``.

    ``windows`` (None: ``buf`` is the bytes the positions count in) makes
    a walk over a message's head and tail only, for messages spread over a
    large file, where reading two small windows each costs less than the
    page faults of touching the mapping: positions stay file offsets (array
    slots are views of the file), ``buf`` holds the windows, and row ``m``
    is ``(head start, head length, its place in buf, tail start, tail
    length, its place in buf)``. String slots then record their bytes'
    place in ``buf``. A read outside both windows stops the walk with
    OUTSIDE, having read nothing else: whatever it decoded before came from
    the file's own bytes.

    On failure ``status`` = (code, message index, byte position) and the walk
    stops; on success ``status[0]`` stays ``OK``. Child rows that take no
    bytes are bounded per message (MAX_EMPTY_ELEMENTS) and for the whole
    walk: once the rows it adds to a table outnumber its messages' bytes plus
    MAX_EMPTY_ELEMENTS, it stops with RUN_TOO_MANY (a batch of 6,000 messages
    of 144 bytes, each claiming 100,000 empty elements, walked 12 s before
    its caller refused it).
    """
    stack = np.empty((STACK_DEPTH, 5), dtype=np.int64)
    size = buf.size if windows is None else np.int64(1) << 62  # windowed spans were checked in the file
    budget = np.int64(MAX_EMPTY_ELEMENTS)
    for m in range(lengths.size):
        budget += max(lengths[m], 0)
    rows_before = table_rows.copy()
    for m in range(starts.size):
        pos = starts[m]
        end = pos + lengths[m]
        if pos < 0 or lengths[m] < 0 or end > size:
            _fail(status, BAD_SPAN, m, pos)
            return
        if header > end - pos:
            _fail(status, SHORT, m, pos)
            return
        if representation >= 0:
            at = _at(windows, m, pos, 2)
            if at < 0:
                _fail(status, OUTSIDE, m, pos)
                return
            found = (np.int64(buf[at]) << 8) | np.int64(buf[at + 1])
            if found != representation:
                _fail(status, BAD_HEADER, m, found)
                return
        pos += header
        origin = pos
        table = 0
        row = m
        pc = 0
        sp = 0
        while True:
            code = ops[pc, 0]
            if code == OP_COPY:
                n = ops[pc, 1]
                if n > end - pos:
                    _fail(status, SHORT, m, pos)
                    return
                if fill:
                    at = _at(windows, m, pos, n)
                    if at < 0:
                        _fail(status, OUTSIDE, m, pos)
                        return
                    dst = fixed_base[table] + row * row_sizes[table] + ops[pc, 2]
                    if table == 0:
                        _copy(root_fixed, dst, buf, at, n)
                    else:
                        _copy(fixed, dst, buf, at, n)
                pos += n
                pc += 1
            elif code == OP_STRING:
                if 4 > end - pos:
                    _fail(status, SHORT, m, pos)
                    return
                at = _at(windows, m, pos, 4)
                if at < 0:
                    _fail(status, OUTSIDE, m, pos)
                    return
                count = _count(buf, at, big)
                pos += 4
                if count > end - pos:
                    _fail(status, SHORT, m, pos - 4)
                    return
                if fill:
                    at = _at(windows, m, pos, count)  # the string's bytes are gathered from buf
                    if at < 0:
                        _fail(status, OUTSIDE, m, pos)
                        return
                    k = slot_base[ops[pc, 1]] + row
                    slot_pos[k] = at
                    # CDR counts the trailing NUL, which is not part of the value (a length of 0: empty too)
                    slot_cnt[k] = count - 1 if ops[pc, 2] and count > 0 else count
                pos += count
                pc += 1
            elif code == OP_ARRAY:
                if 4 > end - pos:
                    _fail(status, SHORT, m, pos)
                    return
                at = _at(windows, m, pos, 4)
                if at < 0:
                    _fail(status, OUTSIDE, m, pos)
                    return
                count = _count(buf, at, big)
                pos += 4
                if count > 0:  # elements aligned to their alignment; the last may lack its trailing padding
                    a = ops[pc, 3]
                    if a > 1:
                        pos = origin + ((pos - origin + a - 1) // a) * a
                    nbytes = count * ops[pc, 2] - ops[pc, 4]
                    if pos > end or nbytes > end - pos:
                        _fail(status, SHORT, m, min(pos, end))
                        return
                else:
                    nbytes = 0
                if fill:
                    k = slot_base[ops[pc, 1]] + row
                    slot_pos[k] = pos
                    slot_cnt[k] = count
                pos += nbytes
                pc += 1
            elif code == OP_ALIGN:
                a = ops[pc, 1]
                pos = origin + ((pos - origin + a - 1) // a) * a
                if pos > end:
                    _fail(status, SHORT, m, end)
                    return
                pc += 1
            elif code == OP_TABLE:
                count = ops[pc, 4]
                if count < 0:
                    if 4 > end - pos:
                        _fail(status, SHORT, m, pos)
                        return
                    at = _at(windows, m, pos, 4)
                    if at < 0:
                        _fail(status, OUTSIDE, m, pos)
                        return
                    count = _count(buf, at, big)
                    pos += 4
                # each element takes at least ops[pc, 5] bytes: that bounds the work by the bytes,
                # whether the count comes from the data or from the definition (T[N])
                smallest = ops[pc, 5]
                if smallest > 0 and count > (end - pos) // smallest:
                    _fail(status, SHORT, m, pos)
                    return
                if smallest == 0 and count > MAX_EMPTY_ELEMENTS:
                    _fail(status, TOO_MANY, m, pos)
                    return
                child = ops[pc, 2]
                first = table_rows[child]
                table_rows[child] = first + count
                if smallest == 0 and table_rows[child] - rows_before[child] > budget:
                    _fail(status, RUN_TOO_MANY, m, pos)
                    return
                if fill:
                    k = slot_base[ops[pc, 1]] + row
                    slot_pos[k] = first
                    slot_cnt[k] = count
                if count == 0:
                    pc += 1
                else:
                    if sp >= STACK_DEPTH:
                        _fail(status, TOO_DEEP, m, pos)
                        return
                    stack[sp, 0] = pc + 1
                    stack[sp, 1] = table
                    stack[sp, 2] = row
                    stack[sp, 3] = count - 1
                    stack[sp, 4] = ops[pc, 3]
                    sp += 1
                    table = child
                    row = first
                    pc = ops[pc, 3]
            else:  # OP_END: next element of the innermost array, or back to its parent
                if sp == 0:
                    break
                if stack[sp - 1, 3] > 0:
                    stack[sp - 1, 3] -= 1
                    row += 1
                    pc = stack[sp - 1, 4]
                else:
                    sp -= 1
                    pc = stack[sp, 0]
                    table = stack[sp, 1]
                    row = stack[sp, 2]
        if pos > end or end - pos > trailing:
            _fail(status, TRAILING, m, pos)
            return


@njit(cache=True, nogil=True)
def gather(buf, pos, nbytes, out, out_offsets):
    """Copy ``buf[pos[i]:pos[i]+nbytes[i]]`` to ``out[out_offsets[i]:]`` for every i (spans pre-checked)."""
    for i in range(pos.size):
        _copy(out, out_offsets[i], buf, pos[i], nbytes[i])


@njit(cache=True, nogil=True)
def spans_in_bounds(size, pos, nbytes):
    """True when every span ``[pos[i], pos[i]+nbytes[i])`` lies inside ``[0, size)``."""
    for i in range(pos.size):
        if pos[i] < 0 or nbytes[i] < 0 or pos[i] + nbytes[i] > size:
            return False
    return True
