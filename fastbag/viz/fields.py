"""Field paths to plottable series: one float per message, NaN where a message has no such value.

A path is dot-separated names, each optionally indexed: ``linear_acceleration.x``,
``header.stamp`` (a time: seconds), ``ranges[540]`` (element 540 of each
message's array; NaN in messages with fewer elements), ``ranges`` (a
per-message array without an index: its length per message),
``transforms[0].transform.translation.x`` (a field of element 0 of an array
of structs). Everything is vectorized over the messages: an element of a
ragged array is picked through its offsets, never message by message.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import NotFoundError, close_matches
from ..msg.arrays import Nested, Ragged, StructArray, field_kind

_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$")
#: Field names of a time or duration (ROS1, ROS2): such a leaf plots as seconds.
_TIME_FIELDS = ({"secs", "nsecs"}, {"sec", "nanosec"})


def _parse(path: str) -> list[tuple[str, int | None]]:
    segments = []
    for part in path.split("."):
        match = _SEGMENT.match(part)
        if not match:
            raise ValueError(f"bad field path {path!r}: expected names with optional [index], "
                             "like linear_acceleration.x or ranges[0]")
        segments.append((match.group(1), None if match.group(2) is None else int(match.group(2))))
    return segments


def _names(value: Any) -> list[str]:
    if isinstance(value, StructArray):
        return value.fields
    if isinstance(value, np.ndarray) and value.dtype.names:
        return list(value.dtype.names)
    return []


def _field(value: Any, name: str, where: str, fixed: bool) -> tuple[Any, bool]:
    """``(field name of value, whether its array dimensions are fixed by the definition)``.

    ``fixed`` says the same of ``value``. A dense ``(N, k)`` array is either a fixed-size array
    (``float64[9]``: in the message's fixed rows) or a variable one whose messages happen to have one length.
    """
    names = _names(value)
    if isinstance(value, (Nested, Ragged)):  # (a dense structured array's fields are its columns)
        raise NotFoundError(f"{where} is an array in each message: name one element of it, as "
                            f"{where}[0].{name}")
    if name not in names:
        what = f"fields: {', '.join(names)}" if names else "it has no fields"
        topic = getattr(value, "topic", None) if not where else None  # (a topic's own fields: name it and its type)
        whole = f"{value.msgtype} of {topic}" if topic else "the message"
        raise NotFoundError(f"no field {name!r} in {where or whole}{close_matches(name, names)}; {what}")
    if isinstance(value, StructArray):
        return value[name], field_kind(value, name) == "fixed"
    # a field of a structured array: fixed, unless the array is itself a dense variable array of structs
    return value[name], fixed or value.ndim == 1


def _check_some_message_has(k: int, counts: np.ndarray, where: str) -> None:
    """IndexError when no message's array (``counts`` elements each) has element ``k``."""
    longest = int(counts.max()) if counts.size else k + 1  # (no message: nothing to say)
    if longest <= k:
        raise IndexError(f"no message's {where!r} has an element [{k}]: "
                         + (f"the longest has {longest}" if longest else "every one is empty"))


def _element(value: Any, k: int, where: str, fixed: bool = False) -> tuple[Any, np.ndarray]:
    """Element ``k`` of each message's array: (values of the messages that have one, which do).

    IndexError when ``k`` is past the end of an array whose size the definition fixes (``fixed``), or past
    the end of every message's array: no message has that element (a plot of it would be empty).
    """
    if isinstance(value, np.ndarray) and value.ndim >= 2:  # a dense (N, k, ...) array
        if fixed and k >= value.shape[1]:
            raise IndexError(f"field {where!r} is a fixed-size array of {value.shape[1]} elements: "
                             f"it has no element [{k}]")
        _check_some_message_has(k, np.full(value.shape[0], value.shape[1]), where)
        has = np.full(value.shape[0], k < value.shape[1])  # (a topic of no messages has nothing to plot)
        return (value[:, k] if k < value.shape[1] else np.empty((0,) + value.shape[2:], value.dtype)), has
    if isinstance(value, (Ragged, Nested)):
        _check_some_message_has(k, value.counts, where)
        has = value.counts > k
        # k is below some message's count (an int64) from here on, or nothing is picked
        rows = (value.offsets[:-1] if isinstance(value, Ragged) else value.first)[has] + (k if has.any() else 0)
        return (value.values if isinstance(value, Ragged) else value.child)[rows], has
    raise ValueError(f"{where} is not an array: it has no element [{k}]")


def _is_time(value: np.ndarray) -> bool:
    return bool(value.dtype.names) and set(value.dtype.names) in _TIME_FIELDS


def time_ns(value: np.ndarray) -> np.ndarray:
    """int64 ns of a time/duration column (ROS1 ``secs, nsecs`` or ROS2 ``sec, nanosec``)."""
    secs, nsecs = value.dtype.names  # type: ignore[misc]
    return value[secs].astype(np.int64) * 1_000_000_000 + value[nsecs].astype(np.int64)


def series(arr: StructArray, path: str) -> tuple[np.ndarray, str]:
    """``(y, label)``: float64, one value per message of ``arr``, for the field ``path``.

    Numbers as they are (bools as 0/1), times as seconds, a per-message array
    without an index as its length per message (label ``len(path)``). Raises
    KeyError for a field that does not exist, ValueError for one that is not
    a number (text, a struct: the message lists what is inside), IndexError for
    an element past the end of a fixed-size array (``orientation_covariance[9]``
    of a ``float64[9]``); past the end of a variable array it is NaN.
    """
    n = len(arr)
    present = np.ones(n, dtype=bool)
    value: Any = arr
    fixed = True  # arr has one row per message: no array dimension yet
    done = ""
    for name, k in _parse(path):
        value, fixed = _field(value, name, done, fixed)
        done = f"{done}.{name}" if done else name
        if k is not None:
            value, has = _element(value, k, done, fixed)
            fixed = True  # what is left of an element's dimensions comes from its type
            rows = np.flatnonzero(present)
            present[rows[~has]] = False
            done = f"{done}[{k}]"
    label = path
    if isinstance(value, (Ragged, Nested)):
        y, label = value.counts.astype(np.float64), f"len({path})"
    elif isinstance(value, np.ndarray) and value.ndim >= 2:
        y, label = np.full(value.shape[0], float(value.shape[1])), f"len({path})"
    elif isinstance(value, np.ndarray) and _is_time(value):
        y, label = time_ns(value) / 1e9, f"{path} [s]"
    elif isinstance(value, np.ndarray) and (value.dtype.kind in "biuf"):
        y = value.astype(np.float64)
    elif isinstance(value, np.ndarray) and value.dtype.kind in "USO":
        raise ValueError(f"field {path!r} is text, not a number")
    else:
        inside = _names(value)
        hint = f"; pick one of {', '.join(f'{path}.{name}' for name in inside)}" if inside else ""
        raise ValueError(f"field {path!r} is not a number{hint}")
    out = np.full(n, np.nan)
    out[present] = y
    return out, label


def numeric_fields(arr: StructArray) -> list[str]:
    """Paths of the plain numeric fields (one number per message), header and times excluded (a stamp's
    seconds since 1970 would flatten every other line to 0): what ``fastbag plot`` draws for a topic named
    without fields (the first DEFAULT_LINES of them)."""
    found: list[str] = []

    def walk(value: Any, prefix: str) -> None:
        for name in _names(value):
            if not prefix and name == "header":
                continue
            sub = value[name]
            path = f"{prefix}{name}"
            if isinstance(sub, StructArray) or isinstance(sub, np.ndarray) and sub.dtype.names and not _is_time(sub):
                walk(sub, path + ".")
            elif isinstance(sub, np.ndarray) and sub.ndim == 1 and sub.dtype.kind in "biuf":
                found.append(path)

    walk(arr, "")
    return found


def header_stamp_ns(arr: StructArray, topic: str = "") -> np.ndarray:
    """int64 ns ``header.stamp`` of each message; ValueError when the type has no header stamp."""
    try:
        stamp = arr["header"]["stamp"]
    except (KeyError, IndexError, ValueError):
        stamp = None
    if not isinstance(stamp, np.ndarray) or not _is_time(stamp):
        raise ValueError(f"{topic or 'the topic'} ({arr.msgtype}) has no header.stamp; plot it against receive time")
    return time_ns(stamp)
