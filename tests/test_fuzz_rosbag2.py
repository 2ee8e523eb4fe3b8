"""A deterministic slice of the rosbag2 fuzz campaign (``python -m tools.fuzz_rosbag2``), run in-process.

Every case must end in a FastbagError or a clean read (only FastbagWarnings,
messages in time order, the directory unchanged); the harness itself is shown
to catch a foreign exception and a changed directory.
"""

from __future__ import annotations

import pytest

from conftest import DATA
from tools import fuzz_rosbag2


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return fuzz_rosbag2.build_seeds(tmp_path_factory.mktemp("seeds"), DATA)


@pytest.mark.parametrize("start", range(0, 60, 20))
def test_campaign_slice(seeds, tmp_path, start):
    failing = {}
    for case in range(start, start + 20):
        target, done = fuzz_rosbag2.make_case(seeds, 2026, case, tmp_path)
        result = fuzz_rosbag2.run_case(target)
        if result["problems"]:
            failing[case] = (result["problems"], done)
    assert not failing


def test_the_harness_sees_foreign_exceptions_and_changes(seeds, tmp_path, monkeypatch):
    from fastbag.rosbag2.sqlite import Db3

    target, _ = fuzz_rosbag2.make_case(seeds[:1], 1, 0, tmp_path)
    assert fuzz_rosbag2.run_case(target)["problems"] == []

    def broken(self):
        raise KeyError("planted")

    monkeypatch.setattr(Db3, "topics", broken)
    assert any("exception open: KeyError" in p for p in fuzz_rosbag2.run_case(target)["problems"])
    monkeypatch.undo()
    original = Db3.close

    def leaves_a_file(self):
        original(self)
        open(self.path + "-shm", "wb").close()

    monkeypatch.setattr(Db3, "close", leaves_a_file)
    assert any("changed the directory" in p for p in fuzz_rosbag2.run_case(target)["problems"])


def test_regression_resuming_past_damage_is_bounded(seeds, tmp_path):
    """Found by the campaign (seed 15, cases 1277 and 18990): a damaged page that every resumed scan ran
    into again, one row id further each time, up to a damaged max(id): a hang, then a MemoryError."""
    import time

    original = seeds[:fuzz_rosbag2.ORIGINAL_SEEDS]
    if len(original) != 28 or any(s.name.startswith("mcap_") for s in original):
        pytest.skip(f"the seed corpus has {len(seeds)} recordings, not the 28 the cases were drawn from")
    for case in (1277, 18990):
        target, done = fuzz_rosbag2.make_case(original, 15, case, tmp_path, fuzz_rosbag2.MUTATORS_BEFORE_BTREE)
        assert done[1].startswith("pages: bytes")
        start = time.perf_counter()
        assert fuzz_rosbag2.run_case(target)["problems"] == []
        assert time.perf_counter() - start < 20


def test_the_harness_sees_intact_rows_left_unreadable(seeds, tmp_path, monkeypatch):
    """After a mutation of some rows' timestamps (what `expects_intact` picks out), the other rows must read:
    the defect fixed in 0dc09f7 (a malformed row's chunk refused whole) is what the harness now reports."""
    import shutil
    import sqlite3

    from fastbag.errors import BagFormatError
    from fastbag.rosbag2.sqlite import Db3

    assert fuzz_rosbag2.expects_intact(["seed plain", "rows: timestamp in plain_0.db3"])
    assert not fuzz_rosbag2.expects_intact(["seed plain", "rows: cut in plain_0.db3"])
    assert not fuzz_rosbag2.expects_intact(["seed plain", "rows: timestamp in plain_0.db3", "pages: bytes"])
    assert not fuzz_rosbag2.expects_intact(["seed wal", "rows: topic_id in w_0.db3 (failed: locked)"])
    plain = next(s for s in seeds if s.name == "plain")
    folder = tmp_path / "plain"
    shutil.copytree(plain, folder)
    con = sqlite3.connect(folder / "plain_0.db3")
    con.execute("UPDATE messages SET timestamp = 'soon' WHERE id % 3 = 0")
    con.commit()
    con.close()
    assert fuzz_rosbag2.run_case(folder, intact=True)["problems"] == []

    def refuses(self, *args, **kwargs):
        raise BagFormatError("planted", path=self.path, record="sqlite3")

    monkeypatch.setattr(Db3, "blobs", refuses)
    monkeypatch.setattr(Db3, "row_blobs", refuses)  # (reads of a few messages: see Rosbag2Reader.payloads_of)
    assert any("rows the mutation left alone are unreadable" in p
               for p in fuzz_rosbag2.run_case(folder, intact=True)["problems"])
    assert fuzz_rosbag2.run_case(folder)["problems"] == []  # without the promise, a refusal is clean
