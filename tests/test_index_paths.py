"""An index is read by NumPy (a small recording, Numba not loaded) or by Numba kernels: both give the same.

While Numba is not loaded, a small ROS1 bag's index section, templates and
entries are read with NumPy and Python, and a small sqlite3 file's rows by
SQLite's scan (numbers parsed by Python, rows cut into chunks by NumPy), not
from its pages by the kernels; so ``fastbag info``, ``bag.topics`` and the like
never start Numba (0.5 s in a fresh process, more than the rest of ``fastbag
info``). Once Numba is loaded, every index is read by the kernels. Each test
here reads the same recording twice, once as this process (Numba loaded:
kernels) and once as a process without Numba would (NumPy), and compares
everything the index gives, on every real ROS1 bag and ROS2 recording and on
seeded damage to the index section of generated ROS1 bags (the same outcome:
the same index and problems, or the same error).
"""

from __future__ import annotations

import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastbag
from conftest import data_file, data_files, ros2_bags
from fastbag.io import startup
from rosbags_fixtures import Layout, conn_spec, payload_for, scan_file, write_with_fastbag


def index_facts(path: Path) -> object:
    """Everything the index of ``path`` gives (its message table, connections, chunks, problems and
    warnings), or the error opening or indexing it raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with fastbag.open(path) as bag:
                index = bag._index
                facts = {name: getattr(index, name).tolist() for name in ("time", "conn", "chunk", "offset")}
                facts["connections"] = [(c.id, c.topic, c.msgcount) for c in bag.connections]
                facts["chunks"] = [bag._chunks.position.tolist(), bag._chunks.size.tolist()]
                facts["problems"] = list(bag.problems)
                facts["recovered"] = bag.recovered
        except fastbag.FastbagError as exc:
            facts = {"error": f"{type(exc).__name__}: {exc}"}
    facts["warnings"] = [str(w.message) for w in caught]
    return facts


def by_numpy(monkeypatch: pytest.MonkeyPatch, path: Path) -> object:
    """:func:`index_facts` as a process that has not loaded Numba reads the index: by NumPy (for a small
    bag; this process has loaded Numba, which makes every step a kernel's)."""
    with monkeypatch.context() as patch:
        patch.setattr(startup, "numba_loaded", lambda: False)
        return index_facts(path)


@pytest.mark.parametrize("path", data_files("ros1v2") + data_files("broken") + ros2_bags())
def test_real_bags_index_the_same_either_way(monkeypatch, path) -> None:
    with_numpy = by_numpy(monkeypatch, path)
    assert index_facts(path) == with_numpy
    if "error" not in with_numpy and path.parent.name == "ros1v2":
        assert len(with_numpy["time"]) == sum(n for _, _, n in with_numpy["connections"])


def small_bag(path: Path, compression: str) -> None:
    """Three topics over many small chunks: a long index section of every record kind."""
    conns = [conn_spec("/imu", "sensor_msgs/Imu"), conn_spec("/chat", "std_msgs/String"),
             conn_spec("/count", "std_msgs/Int32")]
    rng = np.random.default_rng(7)
    messages = [(k % 3, 1_700_000_000_000_000_000 + 10_000_000 * k + (k % 5), payload_for(conns[k % 3].msgtype, k,
                 1_700_000_000_000_000_000 + k, rng)) for k in range(600)]
    write_with_fastbag(path, conns, messages, compression=compression, chunk_size=4096)


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_damaged_index_sections_end_the_same_either_way(tmp_path, monkeypatch, compression) -> None:
    """Bytes of the index section (connection and chunk-info records) and of the index-data records after
    each chunk, overwritten at seeded places: each damaged copy gives the same index, problems and
    warnings, or the same error, whichever way it is read."""
    intact = tmp_path / "intact.bag"
    small_bag(intact, compression)
    layout: Layout = scan_file(intact)
    data = intact.read_bytes()
    index_data = [(start, end) for start, op, _, end in layout.records if op == 4]  # index-data records
    assert len(index_data) > 30 and layout.index_pos > 0
    rng = random.Random(20261124)
    differing = 0
    for case in range(120):
        damaged = bytearray(data)
        if case % 2:
            at = rng.randrange(layout.index_pos, len(data))
        else:
            start, end = rng.choice(index_data)
            at = rng.randrange(start, end)
        for k in range(rng.choice([1, 1, 2, 4])):
            if at + k < len(damaged):
                damaged[at + k] = rng.choice([0, 0xFF, rng.randrange(256), damaged[at + k] ^ 1])
        path = tmp_path / f"damaged{case}.bag"
        path.write_bytes(bytes(damaged))
        with_numpy = by_numpy(monkeypatch, path)
        assert index_facts(path) == with_numpy, f"case {case}: byte {at}"
        differing += with_numpy != index_facts(intact)
        path.unlink()
    assert differing > 60  # the damage mattered in most cases (else the comparison proves little)


@pytest.mark.parametrize("relative, counts, line", [
    ("ros1v2/MichaelGrupp__evo__test__data__ROS_example.bag", [8362, 5439, 12765], "groundtruth   12765 msgs"),
    ("db3/peterheim1__ros_bags__first_2", [7020, 1257, 1407, 1407, 2344],
     "/joint_states                                      2344 msgs    : sensor_msgs/msg/JointState"),
    ("mcap/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample.mcap", [4, 10],
     "/rosout            10 msgs    : rcl_interfaces/msg/Log")], ids=["ros1", "db3", "mcap"])
def test_small_bag_info_never_starts_numba(relative, counts, line) -> None:
    """``fastbag info``, ``bag.topics`` and the connections' counts of a small recording, in a fresh
    process, leave Numba unimported."""
    path = data_file(relative)
    code = ("import contextlib, io, sys\n"
            "import fastbag, fastbag.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    fastbag.cli.main(['info', {str(path)!r}])\n"
            f"bag = fastbag.open({str(path)!r})\n"
            f"assert [t.message_count for t in bag.topics.values()] == {counts!r}, bag.topics\n"
            f"assert {line!r} in out.getvalue(), out.getvalue()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
