"""Compare fastbag's decoded values with rosbags' deserialized messages, bit for bit.

Used by the test suite and by ``fastbag bench --against rosbags``, which
checks equal results before timing anything. rosbags itself is never
imported here: values are compared by their shape (dataclasses, NumPy
arrays, lists, numbers).

rosbags represents a message as a dataclass (fields by attribute), ROS1
``time``/``duration`` as ``Time(sec, nanosec)``, arrays of primitives as
NumPy arrays and arrays of structs as lists. fastbag's ``Record`` has the ROS1
names ``secs``/``nsecs``. Floats are compared by their bytes, so NaN equals
NaN of the same payload and -0.0 differs from 0.0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def _is_time(value: Any) -> bool:
    return hasattr(value, "sec") and hasattr(value, "nanosec") and not hasattr(value, "__dataclass_fields__") \
        or type(value).__name__ in ("builtin_interfaces__msg__Time", "builtin_interfaces__msg__Duration")


def _field_names(theirs: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(theirs) if f.name != "__msgtype__"]


def assert_same(ours: Any, theirs: Any, path: str = "msg") -> None:
    """Assert that a fastbag value equals a rosbags value (recursively), naming the path on failure."""
    if _is_time(theirs):
        assert int(ours["secs"]) == theirs.sec and int(ours["nsecs"]) == theirs.nanosec, \
            f"{path}: {ours} != {theirs}"
        return
    if hasattr(theirs, "__dataclass_fields__"):
        # rosbags declares a type's constants as dataclass fields with defaults:
        # they must equal the constants fastbag parsed from the definition.
        if not isinstance(ours, np.void):  # a Record (a NumPy record has attributes named as its fields)
            constants = ours.constants
            fields = ours.fields
        else:  # a fixed-size struct is a NumPy record: its constants live on the type only
            fields = list(ours.dtype.names)
            constants = {f.name: f.default for f in dataclasses.fields(theirs)
                         if f.name not in fields and f.default is not dataclasses.MISSING}
        names = _field_names(theirs)
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
    if isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), f"{path}: length {len(ours)} != {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{path}[{i}]")
        return
    if isinstance(theirs, float):
        assert np.float64(ours).tobytes() == np.float64(theirs).tobytes(), f"{path}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, bool):
        assert bool(ours) == theirs, f"{path}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, int):
        assert int(ours) == theirs, f"{path}: {ours!r} != {theirs!r}"
        return
    assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"
