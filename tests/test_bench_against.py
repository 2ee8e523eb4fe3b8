"""``fastbag bench --against rosbags BAG``: every topic rosbags reads is compared with fastbag's values.

On real ROS 2 recordings (rosbag2 sqlite3, MCAP) and a ROS 1 bag: every topic
is compared field by field (ROS 2 stamps by ``sec``/``nanosec``, ``byte`` and
``char``, bounded strings, constants) and none mismatches. A mismatch planted
in fastbag's read is reported as a mismatch (not as rosbags' failure), in the
table and in the exit status; rosbags' own failure stays a note about the peer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rosbags")

from conftest import DATA, NO_DATA

from fastbag import bag as bag_module
from fastbag.tooling import bench
from fastbag.tooling.bench import Limits, bench_paths, compare_topic, exit_status, format_paths

DB3_TF = DATA / "db3" / "MichaelGrupp__evo__test__data__tf_example"
MCAP_FILE = DATA / "mcap" / "Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample.mcap"
MCAP_CDR_TEST = DATA / "mcap" / "ros2__rosbag2__rosbag2_tests__resources__mcap__cdr_test"  # byte, char, constants
MCAP_STRINGS = DATA / "mcap" / "ros2__rosbag2__rosbag2_py__test__resources__mcap__convert_b"  # bounded strings
GEOCAM = [DATA / "db3" / "geocamxyz__rosbags-rs__tests__test_bags__test_bag_sqlite3",  # 94 common types
          DATA / "mcap" / "geocamxyz__rosbags-rs__tests__test_bags__test_bag_mcap"]
ROS1 = DATA / "ros1v2" / "MichaelGrupp__evo__test__data__ROS_example.bag"
HUMBLE = DATA / "db3" / "peterheim1__ros_bags__first_2"  # no stored definitions: rosbags needs its type store

LIMITS = Limits(cores=1, memcpy=1e10, lz4=1e9, bz2=1e8, zstd=1e9)  # measuring them takes seconds


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(NO_DATA if not DATA.is_dir() else f"{path} is absent")
    return path


def _quiet(_: str) -> None:
    pass


@pytest.mark.parametrize("path", [DB3_TF, MCAP_FILE, MCAP_CDR_TEST, MCAP_STRINGS, ROS1, HUMBLE],
                         ids=lambda p: p.name[-40:])
def test_every_topic_compared_without_mismatch(path: Path) -> None:
    report = bench_paths([str(_need(path))], against=True, limits=LIMITS, log=_quiet)
    assert report["topics"], "no topics"
    for row in report["topics"]:
        assert "mismatch" not in row and not row.get("note"), row
        assert row["compared"] == row["messages"] > 0, row  # every message compared with rosbags'
        assert row["ratio"] is not None and row["rosbags_s"] is not None
    assert report["mismatches"] == []
    assert exit_status(report) == 0
    assert "MISMATCH" not in format_paths(report)


@pytest.mark.parametrize("path", GEOCAM, ids=lambda p: p.name[-30:])
def test_common_ros2_types_compare_equal(path: Path) -> None:
    """Every topic of a recording of 94 common ROS 2 types (std_msgs Byte and Char, Empty, images, clouds...):
    the comparison bench_paths makes, without the timing."""
    import fastbag

    with fastbag.open(_need(path)) as b:
        reader = bench._rosbags_reader(path)
        try:
            for topic in b.topics:
                theirs = bench._rosbags_topic(reader, topic)
                assert theirs, topic
                assert compare_topic(b.read(topic), theirs, topic, "cdr") is None
        finally:
            reader.close()


class _Planted:
    """``bag.read(topic)`` with message 0 replaced by message 1 (same length, a different value)."""

    def __init__(self, arr: Any) -> None:
        self.arr = arr

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i: int) -> Any:
        return self.arr[1 if i == 0 else i]


def _plant(monkeypatch: pytest.MonkeyPatch, topic: str) -> None:
    read = bag_module.Bag.read

    def planted(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        arr = read(self, name, *args, **kwargs)
        return _Planted(arr) if name == topic else arr

    monkeypatch.setattr(bag_module.Bag, "read", planted)


@pytest.mark.parametrize("path, topic", [(DB3_TF, "/tf"), (MCAP_FILE, "/rosout"), (ROS1, "groundtruth")],
                         ids=["db3", "mcap", "ros1"])
def test_planted_mismatch_is_reported(monkeypatch: pytest.MonkeyPatch, path: Path, topic: str) -> None:
    _need(path)
    _plant(monkeypatch, topic)
    report = bench_paths([str(path)], against=True, limits=LIMITS, log=_quiet)
    rows = {r["topic"]: r for r in report["topics"]}
    bad = rows.pop(topic)
    assert bad["mismatch"].startswith(f"{topic}[0]"), bad  # names the first differing message and field
    assert bad["note"].startswith("MISMATCH: fastbag differs from rosbags"), bad
    assert not bad["note"].startswith("rosbags:") and "ratio" not in bad
    assert all("mismatch" not in r for r in rows.values())  # the other topics still compare equal
    assert [(m["bag"], m["topic"]) for m in report["mismatches"]] == [(str(path), topic)]
    assert exit_status(report) == 1
    table = format_paths(report)
    assert f"MISMATCH: fastbag's values differ from rosbags' on 1 topic(s):\n- {path.name} {topic}: " in table


def test_rosbags_failure_is_the_peers_note_not_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    _need(DB3_TF)

    def refuse(reader: Any, topic: str) -> list[Any]:
        raise RuntimeError("cannot decode")

    monkeypatch.setattr(bench, "_rosbags_topic", refuse)
    report = bench_paths([str(DB3_TF)], against=True, limits=LIMITS, log=_quiet)
    for row in report["topics"]:
        assert row["note"] == "rosbags: RuntimeError: cannot decode" and "mismatch" not in row
    assert exit_status(report) == 0

    def refuse_at_length(reader: Any, topic: str) -> list[Any]:  # (rosbags' parse errors run over lines)
        raise RuntimeError("cannot decode\n  line 2\n| not a column")

    monkeypatch.setattr(bench, "_rosbags_topic", refuse_at_length)
    report = bench_paths([str(DB3_TF)], against=True, limits=LIMITS, log=_quiet)
    for row in report["topics"]:  # one line: the Markdown table holds it
        assert row["note"] == "rosbags: RuntimeError: cannot decode line 2 | not a column"
    assert all(line.count(" | ") == 11 for line in format_paths(report).splitlines() if line.startswith("| "))
    assert report["mismatches"] == []


def test_rosbags_reading_nothing_is_the_peers_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """rosbags yields no messages from some rosbag2 directories (their QoS metadata): its limit, not a mismatch."""
    _need(DB3_TF)
    monkeypatch.setattr(bench, "_rosbags_topic", lambda reader, topic: [])
    report = bench_paths([str(DB3_TF)], against=True, limits=LIMITS, log=_quiet)
    assert {r["topic"]: r["note"] for r in report["topics"]} == \
        {"/tf": "rosbags: read no messages of 517", "/tf_static": "rosbags: read no messages of 1"}
    assert report["mismatches"] == [] and exit_status(report) == 0


def test_comparison_failures_are_mismatches() -> None:
    """A difference in count, or values that cannot even be compared, is fastbag's mismatch, not rosbags'."""
    import fastbag

    _need(MCAP_FILE)
    with fastbag.open(MCAP_FILE) as b:
        arr = b.read("/rosout")
    reader = bench._rosbags_reader(MCAP_FILE)
    try:
        theirs = bench._rosbags_topic(reader, "/rosout")
    finally:
        reader.close()
    assert compare_topic(arr, theirs, "/rosout", "cdr") is None
    assert compare_topic(arr, theirs[:-1], "/rosout", "cdr") == "/rosout: 10 messages != rosbags' 9"
    problem = compare_topic([object()] * len(theirs), theirs, "/rosout", "cdr")
    assert problem is not None and problem.startswith("/rosout[0]")


def test_cli_prints_the_mismatch(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from fastbag.cli import main

    _need(DB3_TF)
    monkeypatch.setattr(bench, "measure_limits", lambda: LIMITS)
    main(["bench", "--against", "rosbags", str(DB3_TF)])
    assert "MISMATCH" not in capsys.readouterr().out
    _plant(monkeypatch, "/tf")
    main(["bench", "--against", "rosbags", str(DB3_TF)])
    out = capsys.readouterr().out
    assert "| /tf | 517 |" in out and "MISMATCH: fastbag differs from rosbags: /tf[0]" in out
    assert "MISMATCH: fastbag's values differ from rosbags' on 1 topic(s):" in out


def test_cli_exits_nonzero_on_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    from fastbag.cli import main

    _need(DB3_TF)
    monkeypatch.setattr(bench, "measure_limits", lambda: LIMITS)
    assert main(["bench", "--against", "rosbags", str(DB3_TF)]) == 0
    _plant(monkeypatch, "/tf")
    assert main(["bench", "--against", "rosbags", str(DB3_TF)]) != 0
