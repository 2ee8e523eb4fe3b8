"""The rosbags oracle, for the tests: the comparator (it lives in the library, where ``fastbag bench`` uses it
too) and every message of a bag as rosbags decodes it."""

from __future__ import annotations

from pathlib import Path

from rosbags.highlevel import AnyReader

from fastbag.tooling.compare import assert_same

__all__ = ["assert_reads_equal", "assert_same", "rosbags_messages"]


def rosbags_messages(path: Path) -> dict[str, list]:
    """Every message of the bag at ``path`` as rosbags deserializes it, by topic, in its reading order."""
    out: dict[str, list] = {}
    with AnyReader([path]) as reader:
        for connection, _, raw in reader.messages():
            out.setdefault(connection.topic, []).append(reader.deserialize(raw, connection.msgtype))
    return out


def assert_reads_equal(bag, expected: dict[str, list]) -> None:
    """``bag.read`` of every topic equals ``expected`` (rosbags_messages), message by message, field by field."""
    assert sorted(bag.topics) == sorted(expected)
    for topic in bag.topics:
        arr = bag.read(topic)
        assert len(arr) == len(expected[topic])
        for i, theirs in enumerate(expected[topic]):
            assert_same(arr[i], theirs, f"read({topic})[{i}]")
