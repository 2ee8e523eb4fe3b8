"""Compare fastbag's decoded ROS2 values with what a CDR peer decodes (rosbags dataclasses, mcap_ros2 objects).

Values are reached the way users reach them: ``record.name`` for message
objects (checked to be what ``record["name"]`` gives), ``value[name]`` for
fixed structs (NumPy records). Floats are
compared by their bytes (NaN payloads kept, -0.0 differs from 0.0).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fastbag.tooling.compare import same_access

#: rosbags gives types without fields this placeholder (the byte CDR writes for them).
PLACEHOLDER = "structure_needs_at_least_one_member"


def _their_fields(theirs: Any) -> list[str] | None:
    if dataclasses.is_dataclass(theirs) and not isinstance(theirs, type):  # constants: fields with defaults
        return [f.name for f in dataclasses.fields(theirs)
                if f.name not in ("__msgtype__", PLACEHOLDER) and f.default is dataclasses.MISSING]
    slots = getattr(type(theirs), "__slots__", None)
    if slots is not None and not isinstance(theirs, (np.generic, np.ndarray)):
        return [s for s in slots if s != PLACEHOLDER]
    return None


def assert_same_cdr(ours: Any, theirs: Any, path: str = "msg") -> None:
    """Assert that a fastbag value equals a peer's decoded value, recursively, naming the path on failure."""
    names = _their_fields(theirs)
    if names is not None:
        if isinstance(ours, np.void):
            fields, constants = list(ours.dtype.names or ()), {}
        else:
            fields, constants = list(ours._fields), dict(ours._constants)  # names no field can shadow
        assert sorted(fields) == sorted(names), f"{path}: fields {fields} != {names}"
        for name in names:
            # by attribute, as users write it (a field always means the field: PointCloud2.fields too),
            # and the same value by [name]
            if isinstance(ours, np.void):
                mine = ours[name]
            else:
                mine = getattr(ours, name)
                assert same_access(mine, ours[name]), f"{path}.{name}: by attribute != by [name]"
            assert_same_cdr(mine, getattr(theirs, name), f"{path}.{name}")
        for name, value in constants.items():  # where the peer knows the type's constants (rosbags) too
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
    if isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), f"{path}: length {len(ours)} != {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same_cdr(a, b, f"{path}[{i}]")
        return
    if isinstance(theirs, float):
        assert np.float64(ours).tobytes() == np.float64(theirs).tobytes(), f"{path}: {ours!r} != {theirs!r}"
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
