"""rosbags' README loop, unchanged but for the open: fastbag.open against rosbags' AnyReader.

    PYTHONPATH=. python benchmarks/rosbags_loop.py [BAG ...]

Default: evo's ``ROS_example.bag`` from ``../shared/data`` (26,566 messages, three topics). For each bag:
every message unpacked as ``(connection, timestamp, rawdata)`` and deserialized by its type, the two
readers alternating, 3 rounds after a warm-up; prints the best and worst time of each and their ratio.
Checks first that both loops give the same topics and timestamps.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import fastbag

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "ros1v2" / \
    "MichaelGrupp__evo__test__data__ROS_example.bag"


def loop_fastbag(path: Path) -> list[tuple[str, int]]:
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as reader:
            for connection, timestamp, rawdata in reader.messages():
                reader.deserialize(rawdata, connection.msgtype)
                seen.append((connection.topic, timestamp))
    return seen


def loop_rosbags(path: Path) -> list[tuple[str, int]]:
    from rosbags.highlevel import AnyReader

    seen = []
    with AnyReader([path]) as reader:
        for connection, timestamp, rawdata in reader.messages():
            reader.deserialize(rawdata, connection.msgtype)
            seen.append((connection.topic, timestamp))
    return seen


def main(paths: list[Path]) -> None:
    for path in paths:
        assert loop_fastbag(path) == loop_rosbags(path), f"{path.name}: the loops yield different messages"
        times: dict[str, list[float]] = {"fastbag": [], "rosbags": []}
        for _ in range(3):
            for name, loop in (("fastbag", loop_fastbag), ("rosbags", loop_rosbags)):
                start = time.perf_counter()
                loop(path)
                times[name].append(time.perf_counter() - start)
        ours, theirs = times["fastbag"], times["rosbags"]
        print(f"{path.name}: fastbag {min(ours) * 1e3:.0f}-{max(ours) * 1e3:.0f} ms, rosbags "
              f"{min(theirs) * 1e3:.0f}-{max(theirs) * 1e3:.0f} ms, {min(theirs) / min(ours):.1f}x (best of 3 each)")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]] or [DEFAULT])
