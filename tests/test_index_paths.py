"""A ROS1 index is read by NumPy (a small bag, Numba not loaded) or by Numba kernels: both give the same.

Below ``NUMPY_UP_TO`` messages the index section's records, templates and
entries are read with NumPy and Python, so that ``fastbag info``, ``bag.topics``
and the like on a small bag never start Numba (0.5 s in a fresh process, more
than the rest of ``fastbag info``); once Numba is loaded, every index is read
by the kernels. Each test here reads the same file twice, once as this process
(Numba loaded: kernels) and once as a process without Numba would (NumPy), and
compares everything the index gives, on every real ROS1 bag and on seeded
damage to the index section of generated ones (the same outcome: the same
index and problems, or the same error).
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
from conftest import data_file, data_files
from fastbag.ros1 import index as ros1_index
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
        patch.setattr(ros1_index, "_numba_loaded", lambda: False)
        return index_facts(path)


@pytest.mark.parametrize("path", data_files("ros1v2") + data_files("broken"))
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


def test_small_bag_info_never_starts_numba() -> None:
    """``fastbag info``, ``bag.topics`` and the connections' counts of a small bag, in a fresh process,
    leave Numba unimported."""
    path = data_file("ros1v2/MichaelGrupp__evo__test__data__ROS_example.bag")
    code = ("import contextlib, io, sys\n"
            "import fastbag, fastbag.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    fastbag.cli.main(['info', {str(path)!r}])\n"
            f"bag = fastbag.open({str(path)!r})\n"
            "assert [t.message_count for t in bag.topics.values()] == [8362, 5439, 12765], bag.topics\n"
            "assert 'groundtruth   12765 msgs' in out.getvalue(), out.getvalue()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
