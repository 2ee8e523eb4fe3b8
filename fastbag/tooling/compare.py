"""Compare fastbag's decoded values with rosbags' deserialized messages, bit for bit.

Used by the test suite and by ``fastbag bench --against rosbags``, which
checks equal results before timing anything. rosbags itself is never
imported here: values are compared by their shape (dataclasses, NumPy
arrays, lists, numbers).

rosbags represents a message as a dataclass (fields by attribute), ROS1
``time``/``duration`` as ``Time(sec, nanosec)``, arrays of primitives as
NumPy arrays and arrays of structs as lists. fastbag's messages have the ROS1
names ``secs``/``nsecs`` (and rosbags' ``sec``/``nanosec``). Floats are compared by their bytes, so NaN equals
NaN of the same payload and -0.0 differs from 0.0.

ROS2 (CDR) values are compared by :func:`assert_same_cdr` (:func:`assert_same_message`
picks by the connection's encoding): ``builtin_interfaces/Time`` and ``Duration`` are
plain messages there (``sec``, ``nanosec``), ``byte`` is an octet (uint8 here, int8 in
rosbags), bounded strings and sequences are strings and arrays like the others, and
rosbags' placeholder field of an empty message is not a field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..msg.messages import MessageList, Record, Time


def _is_time(value: Any) -> bool:
    return hasattr(value, "sec") and hasattr(value, "nanosec") and not hasattr(value, "__dataclass_fields__") \
        or type(value).__name__ in ("builtin_interfaces__msg__Time", "builtin_interfaces__msg__Duration")


def _field_names(theirs: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(theirs) if f.name != "__msgtype__"]


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """The same memory seen the same way (O(1): the values are compared with the oracle anyway), or two
    equal copies: a CDR array whose last element's trailing padding lies past the end of its buffer
    (the last message of a run) is copied, zero-padded, on each access (see msg.arrays.Ragged)."""
    if a.nbytes == 0 or b.nbytes == 0:  # elements of 0 bytes are made fresh on each access: nothing to share
        return (a.shape, a.dtype) == (b.shape, b.dtype)
    if (a.shape, a.strides, a.dtype) != (b.shape, b.strides, b.dtype):
        return False
    if a.__array_interface__["data"][0] == b.__array_interface__["data"][0]:
        return True
    return a.tobytes() == b.tobytes()


def same_access(by_attribute: Any, by_name: Any) -> bool:
    """``msg.name`` and ``msg["name"]`` give the same value (shallow: the recursion goes by attribute)."""
    if by_attribute is by_name:  # numbers and strings: the same object from the same column
        return True
    if type(by_attribute) is not type(by_name):
        return False
    if isinstance(by_attribute, Record):
        return by_attribute._src is by_name._src and by_attribute._i == by_name._i
    if isinstance(by_attribute, MessageList):
        a, b = by_attribute, by_name
        if a._src is b._src or a._src.array is None or b._src.array is None:
            return a._src is b._src and (a._first, len(a)) == (b._first, len(b))
        return _same_view(a._src.array, b._src.array) and (a._first, len(a)) == (b._first, len(b))
    if isinstance(by_attribute, np.ndarray):
        return _same_view(by_attribute, by_name)
    if isinstance(by_attribute, float):
        return np.float64(by_attribute).tobytes() == np.float64(by_name).tobytes()
    return bool(by_attribute == by_name)


def _same_items_or_float(ours: Any, theirs: Any, path: str, same: Callable[[Any, Any, str], None]) -> None:
    """What both comparators check alike: a list's items one by one (with ``same``), a float by its bytes."""
    if isinstance(theirs, float):
        assert np.float64(ours).tobytes() == np.float64(theirs).tobytes(), f"{path}: {ours!r} != {theirs!r}"
        return
    assert len(ours) == len(theirs), f"{path}: length {len(ours)} != {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        same(a, b, f"{path}[{i}]")


def assert_same(ours: Any, theirs: Any, path: str = "msg") -> None:
    """Assert that a fastbag value equals a rosbags value (recursively), naming the path on failure.

    A fastbag message is walked the way user code walks it: every field by
    attribute (``msg.header.stamp.secs``), checked to equal ``msg["name"]``;
    every constant of every nested type as a class attribute. (Rows of
    ``to_numpy()`` are NumPy records: those are walked by ``[name]``.)
    """
    if _is_time(theirs):
        if isinstance(ours, Time):
            assert (ours.secs, ours.nsecs) == (theirs.sec, theirs.nanosec), f"{path}: {ours} != {theirs}"
            assert (ours["secs"], ours["nsecs"], ours.sec, ours.nanosec) == (ours.secs, ours.nsecs) * 2, path
            assert ours.to_nsec() == theirs.sec * 1_000_000_000 + theirs.nanosec, f"{path}: to_nsec()"
            assert ours == type(ours)(theirs.sec, theirs.nanosec), f"{path}: =="
            return
        assert int(ours["secs"]) == theirs.sec and int(ours["nsecs"]) == theirs.nanosec, \
            f"{path}: {ours} != {theirs}"
        return
    if hasattr(theirs, "__dataclass_fields__"):
        # rosbags declares a type's constants as dataclass fields with defaults:
        # they must equal the constants fastbag parsed from the definition.
        names = _field_names(theirs)
        if isinstance(ours, Record):
            constants = ours._constants
            fields = list(ours._fields)
            assert fields == [n for n in names if n not in constants], f"{path}: fields {fields} differ"
            for name in names:
                if name in constants:
                    want = getattr(theirs, name)
                    assert constants[name] == want and getattr(ours, name) == want and \
                        getattr(type(ours), name) == want, f"{path}.{name}: constant differs"
                    continue
                value = getattr(ours, name)
                assert same_access(value, ours[name]), f"{path}.{name}: by attribute != by [name]"
                assert_same(value, getattr(theirs, name), f"{path}.{name}")
            return
        if hasattr(ours, "constants"):  # (to_numpy rows have no constants: theirs are taken as given)
            constants, fields = ours.constants, ours.fields
        else:
            fields = list(ours.dtype.names)
            constants = {f.name: f.default for f in dataclasses.fields(theirs)
                         if f.name not in fields and f.default is not dataclasses.MISSING}
        assert sorted(fields) == sorted(n for n in names if n not in constants), f"{path}: fields differ"
        for name in names:
            if name in constants:
                assert constants[name] == getattr(theirs, name), f"{path}.{name}: constant differs"
            else:
                assert_same(ours[name], getattr(theirs, name), f"{path}.{name}")
        return
    if isinstance(theirs, np.ndarray):
        got = np.asarray(ours)
        assert got.shape == theirs.shape, f"{path}: shape {got.shape} != {theirs.shape}"
        assert got.dtype.itemsize == theirs.dtype.itemsize and got.dtype.kind == theirs.dtype.kind, \
            f"{path}: dtype {got.dtype} != {theirs.dtype}"
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(theirs).tobytes(), \
            f"{path}: values differ"
        return
    if isinstance(theirs, (list, tuple, float)):
        _same_items_or_float(ours, theirs, path, assert_same)
        return
    if isinstance(theirs, bool):
        assert bool(ours) == theirs, f"{path}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, int):
        assert int(ours) == theirs, f"{path}: {ours!r} != {theirs!r}"
        return
    assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"


# -- ROS2 (CDR) ------------------------------------------------------------------------------

#: rosbags gives types without fields this placeholder (the byte CDR writes for them).
PLACEHOLDER = "structure_needs_at_least_one_member"


def _cdr_fields(theirs: Any) -> list[str] | None:
    """A peer message's field names (rosbags dataclasses: constants, fields with defaults, left out; objects
    with ``__slots__``, as mcap_ros2 makes them), or None if ``theirs`` is not a message."""
    if dataclasses.is_dataclass(theirs) and not isinstance(theirs, type):
        return [f.name for f in dataclasses.fields(theirs)
                if f.name not in ("__msgtype__", PLACEHOLDER) and f.default is dataclasses.MISSING]
    slots = getattr(type(theirs), "__slots__", None)
    if slots is not None and not isinstance(theirs, (np.generic, np.ndarray)):
        return [s for s in slots if s != PLACEHOLDER]
    return None


def assert_same_cdr(ours: Any, theirs: Any, path: str = "msg") -> None:
    """Assert that a fastbag ROS2 (CDR) value equals a peer's decoded value (rosbags' ROS2 dataclasses,
    mcap_ros2 objects), recursively, naming the path on failure.

    A fastbag message is walked by attribute, as users write it (checked to equal ``msg["name"]``); fixed
    structs that are NumPy records by ``[name]``. The type's constants are compared where the peer has them.
    """
    names = _cdr_fields(theirs)
    if names is not None:
        if isinstance(ours, np.void):
            fields, constants = list(ours.dtype.names or ()), {}
        else:
            assert isinstance(ours, Record), f"{path}: {type(ours).__name__} where a message was expected"
            fields, constants = list(ours._fields), dict(ours._constants)  # names no field can shadow
        assert sorted(fields) == sorted(names), f"{path}: fields {fields} != {names}"
        for name in names:
            if isinstance(ours, np.void):
                mine = ours[name]
            else:
                mine = getattr(ours, name)
                assert same_access(mine, ours[name]), f"{path}.{name}: by attribute != by [name]"
            assert_same_cdr(mine, getattr(theirs, name), f"{path}.{name}")
        for name, value in constants.items():
            if hasattr(theirs, name):
                assert_same_cdr(value, getattr(theirs, name), f"{path}.{name}")
        return
    if isinstance(theirs, (bytes, bytearray)):  # mcap_ros2: uint8 arrays
        got = np.asarray(ours)
        assert got.dtype.itemsize == 1 and got.tobytes() == bytes(theirs), f"{path}: bytes differ"
        return
    if isinstance(theirs, np.ndarray):
        got = np.asarray(ours)
        assert got.shape == theirs.shape, f"{path}: shape {got.shape} != {theirs.shape}"
        # ROS2's byte is an octet: uint8 here (as rosidl and mcap_ros2 have it), int8 in rosbags
        kinds = {got.dtype.kind, theirs.dtype.kind}
        assert got.dtype.itemsize == theirs.dtype.itemsize and (len(kinds) == 1 or kinds == {"i", "u"} and
                                                                 got.dtype.itemsize == 1), \
            f"{path}: dtype {got.dtype} != {theirs.dtype}"
        assert got.astype(got.dtype.newbyteorder("=")).tobytes() == \
            theirs.astype(theirs.dtype.newbyteorder("=")).tobytes(), f"{path}: values differ"
        return
    if isinstance(theirs, (list, tuple, float)):
        _same_items_or_float(ours, theirs, path, assert_same_cdr)
        return
    if isinstance(theirs, bool):
        assert bool(ours) == theirs and np.asarray(ours).dtype.kind in "bu", f"{path}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, (int, np.integer)):
        if -128 <= int(theirs) < 0 and 128 <= int(ours) <= 255:
            theirs = int(theirs) & 0xFF  # a byte: an octet (uint8) here and in rosidl, int8 in rosbags
        assert int(ours) == int(theirs), f"{path}: {ours!r} != {theirs!r}"
        return
    assert type(ours) is type(theirs) or isinstance(ours, str), f"{path}: {type(ours)} vs {type(theirs)}"
    assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"


def assert_same_message(ours: Any, theirs: Any, path: str = "msg", *, encoding: str = "ros1") -> None:
    """:func:`assert_same_cdr` for ``encoding`` ``"cdr"`` (ROS2), else :func:`assert_same` (ROS1)."""
    if encoding == "cdr":
        assert_same_cdr(ours, theirs, path)
    else:
        assert_same(ours, theirs, path)
