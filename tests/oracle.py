"""The rosbags comparator, for the tests (it lives in the library, where ``fastbag bench`` uses it too)."""

from fastbag.tooling.compare import assert_same

__all__ = ["assert_same"]
