"""Compare fastbag's decoded ROS2 values with what a CDR peer decodes (rosbags dataclasses, mcap_ros2 objects).

The comparator lives in :mod:`fastbag.tooling.compare` (``fastbag bench --against rosbags`` uses it on users'
bags); the tests import it from here. Values are reached the way users reach them: ``record.name`` for message
objects (checked to be what ``record["name"]`` gives), ``value[name]`` for fixed structs (NumPy records).
Floats are compared by their bytes (NaN payloads kept, -0.0 differs from 0.0).
"""

from fastbag.tooling.compare import PLACEHOLDER, assert_same_cdr

__all__ = ["PLACEHOLDER", "assert_same_cdr"]
