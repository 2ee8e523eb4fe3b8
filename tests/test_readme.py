"""The README's examples, run as written, and what it says they give, checked against independent readers.

- **The blocks themselves.** Every ```` ```python ```` block of the sections Use, ROS2 messages, rosbag2
  recordings, More on messages, Code written for rosbag or rosbags, Writing bags, Encrypted bags, Looking
  at a bag and Tables, export and training is taken from README.md (found by its section heading and its
  index in the section; the test first checks that the block still starts as it did, so an edited README
  fails loudly instead of testing something else) and executed with its placeholders (``"run.bag"``,
  ``"/imu"``, ``t0`` ...) substituted by real recordings from ``../shared/data`` or bags generated here.
  Each expression statement, and each simple assignment, is recorded per README line (``Run.at``), so
  the checks read the values the README's own lines produced. The sh block of Command line runs through
  ``fastbag.cli.main`` (and once through the installed ``fastbag`` script).
- **Oracles.** rosbags (``AnyReader``, ``deserialize_cdr``), the classic ``rosbag`` module (its
  ``read_messages``, ``get_*`` and ``rosbag info`` text), the ``mcap`` package, ``sqlite3`` queries and
  NumPy over raw bytes; never fastbag itself, but where a README line says two fastbag spellings give
  the same thing.
- **Inline claims.** The prose of those sections ("X gives Y") is checked beside its block.
- **Discrepancies** found between README and code were fixed (in the code or the README) with the test
  that found them kept.

Tests that need ``../shared/data`` skip, saying so, when it is absent; optional extras (pandas, pyarrow,
polars, awkward, torch, dask, matplotlib, rosbags, the classic rosbag module, gpg) skip when missing.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import datetime
import gc
import glob
import hashlib
import inspect
import io
import json
import math
import os
import pickle
import re
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DATA, NO_DATA, add_gpg_key, classic_rosbag, gnupg_env, open_quietly

import fastbag
from fastbag.msg.messages import Duration, Time

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FASTBAG_SCRIPT = Path(sys.executable).with_name("fastbag")


SEP = "=" * 80 + "\n"


def classic_call(rosbag: Any, path: str, what: Any, **options: Any) -> Any:
    """``what(bag)`` of the classic rosbag module's Bag of ``path``, closed after (it keeps its file open)."""
    bag = rosbag.Bag(path, **options)
    try:
        return what(bag)
    finally:
        bag.close()

# the real recordings the examples run on (see ../shared/data/MANIFEST.tsv)
IMU_BAG = "ros1v2/cra-ros-pkg__robot_localization__test__test1.bag"  # /imu/data, /fix: bz2 chunks
IMU_SMALL = "ros1v2/christinad5__bagfiles__bias_acc_static.bag"  # /sensor/Imu, /orientation
IMU_TINY = "ros1v2/christinad5__bagfiles__2021-08-16-20-14-47.bag"  # /sensor/Imu, 65 messages
SCAN_BAG = "ros1v2/CCNYRoboticsLab__scan_tools__laser_scan_matcher__demo__demo.bag"  # /scan, 681 ranges
SCAN_INF = "ros1v2/minhphongvn__lidarme__lidar.bag"  # /scan with inf ranges
CLOUD_BAG = "ros1v2/ashnarayan13__toposens_reader__tests__test.bag"  # /topo/pointCloud
IMAGE_BAG = "ros1v2/eric-wieser__ros_numpy__test__test.bag"  # /image (rgb8)
TF_BAG = "ros1v2/zaki0929__bagfiles__2018__feb13__col.bag"  # /tf: tf/tfMessage + tf2_msgs
FIX_BAG = "ros1v2/nobleo__rviz_satellite__sample.bag"  # /gps/fix NavSatFix
EVO_BAG = "ros1v2/MichaelGrupp__evo__test__data__ROS_example.bag"
SMACH_BAG = "ros1v2/jsk-ros-pkg__jsk_common__app_manager_utils__app_notification_saver__data__smach.bag"
EMPTY_DEF_BAG = (
    "ros1v2/cruise-automation__webviz__packages__webviz-core__public__fixtures__bag-with-empty-message-definition.bag"
)
UNSORTED_BAG = "ros1v2/cruise-automation__rosbag.js__fixtures__example-unsorted-chunks.bag"
NO_MESSAGES_BAG = "ros1v2/cruise-automation__rosbag.js__fixtures__no-messages.bag"
BZ2_BAG = "ros1v2/CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__sparkfun_razor.bag"
ROS2_MCAP = "mcap/geocamxyz__rosbags-rs__tests__test_bags__test_bag_mcap/test_bag_mcap.mcap"
ROS2_IMU = "/test/sensor_msgs/imu"
CONVERT_A_DB3 = "db3/ros2__rosbag2__rosbag2_py__test__resources__sqlite3__convert_a"
CONVERT_A_MCAP = "mcap/ros2__rosbag2__rosbag2_py__test__resources__mcap__convert_a"
WBAG_DB3 = "db3/ros2__rosbag2__rosbag2_py__test__resources__sqlite3__wbag"
WBAG_MCAP = "mcap/ros2__rosbag2__rosbag2_py__test__resources__mcap__wbag"
TALKER_DB3 = "db3/ros2__rosbag2__rosbag2_py__test__resources__sqlite3__talker"
TALKER_MCAP = "mcap/ros2__rosbag2__rosbag2_py__test__resources__mcap__talker"
FILE_ZSTD_DIR = "db3/ros2__rosbag2__rosbag2_tests__resources__reindex_test_bags__file_compression"
SERVICES_MCAP = "mcap/ros2__rosbag2__rosbag2_cpp__test__rosbag2_cpp__bags/only_services.mcap"
TOPICS_MCAP = "mcap/ros2__rosbag2__rosbag2_cpp__test__rosbag2_cpp__bags/only_topics.mcap"
WRONG_RMW_MCAP = "mcap/ros2__rosbag2__rosbag2_tests__resources__mcap__wrong_rmw_test"
UNINDEXED_BAG = "broken/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_unindexed.bag"


def need(relative: str) -> str:
    """A real file's path as a string; skips the test when ../shared/data (or the file) is absent."""
    path = DATA / relative
    if not path.exists():
        pytest.skip(NO_DATA if not DATA.is_dir() else f"{path} is absent")
    return str(path)


def imu_rows(synthetic: dict) -> list[tuple[Any, int, bytes]]:
    """(connection, time, bytes) of a real Imu recording, or of the generated one without ../shared/data."""
    path = DATA / IMU_TINY if (DATA / IMU_TINY).exists() else synthetic["mixed"]
    with open_quietly(path) as bag:
        topic = "/sensor/Imu" if path == DATA / IMU_TINY else "/imu"
        return [(m.connection, m.time, bytes(m.data)) for m in bag.messages(topics=[topic], raw=True)]


def need_module(name: str, why: str = "") -> Any:
    return pytest.importorskip(name, reason=f"{name} is not installed{': ' + why if why else ''}")


@contextlib.contextmanager
def quiet():
    """FastbagWarnings of recordings whose oddities a test does not judge, silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        yield


# =========================================================================================================
# README blocks and a runner that records what each line gives
# =========================================================================================================


@dataclasses.dataclass(frozen=True)
class Block:
    section: str
    index: int
    line: int  # README line of the block's first code line
    code: str

    def text_line(self, snippet: str) -> int:
        """The README line of the block holding ``snippet`` (exactly one)."""
        hits = [self.line + k for k, text in enumerate(self.code.splitlines()) if snippet in text]
        assert len(hits) == 1, f"{snippet!r} is on README lines {hits} of {self.section} block {self.index}"
        return hits[0]


def readme_blocks(language: str = "python") -> dict[tuple[str, int], Block]:
    """Every fenced block of ``language``, keyed by (heading of its section, index within the section)."""
    blocks: dict[tuple[str, int], Block] = {}
    section, counts, inside, start, lines = "", defaultdict(int), None, 0, []
    for number, text in enumerate(README.read_text().splitlines(), 1):
        if inside is None:
            if text.startswith("#") and not text.startswith("#!"):
                section = text.lstrip("#").strip()
            elif text.startswith("```"):
                inside, start, lines = text[3:].strip(), number + 1, []
        elif text.startswith("```"):
            if inside == language:
                blocks[(section, counts[section])] = Block(section, counts[section], start, "\n".join(lines) + "\n")
                counts[section] += 1
            inside = None
        else:
            lines.append(text)
    return blocks


def block(section: str, index: int = 0, starts: str = "", language: str = "python") -> Block:
    """The README block (``section`` a prefix of its heading); ``starts`` must open its first line."""
    found = [b for (s, i), b in readme_blocks(language).items() if s.startswith(section) and i == index]
    assert len(found) == 1, f"README has no {language} block {index} under a heading '{section}...'"
    assert found[0].code.lstrip().startswith(starts), (
        f"README {section} block {index} (line {found[0].line}) no longer starts with {starts!r}: update the test"
    )
    return found[0]


def _load(target: ast.expr) -> ast.expr:
    target = copy.deepcopy(target)
    for node in ast.walk(target):
        if hasattr(node, "ctx"):
            node.ctx = ast.Load()
    return target


class _Recorder(ast.NodeTransformer):
    """Each expression statement becomes ``__capture__(line, expr)``; each assignment is followed by
    ``__capture__(line, target)``; ``line`` is the README's."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        self.generic_visit(node)
        call = ast.Call(ast.Name("__capture__", ast.Load()), [ast.Constant(node.lineno + self.offset), node.value], [])
        return ast.copy_location(ast.Expr(call), node)

    def visit_Assign(self, node: ast.Assign) -> Any:
        self.generic_visit(node)
        record = ast.Expr(
            ast.Call(
                ast.Name("__capture__", ast.Load()),
                [ast.Constant(node.lineno + self.offset), _load(node.targets[0])],
                [],
            )
        )
        return [node, ast.copy_location(record, node)]


class Run:
    """A README block executed with substitutions; ``at(snippet)`` lists what that line gave, in order."""

    def __init__(
        self,
        blk: Block,
        subs: list[tuple[str, str]] | None = None,
        namespace: dict | None = None,
        line_subs: dict[str, list[tuple[str, str]]] | None = None,
    ) -> None:
        self.block = blk
        lines = blk.code.splitlines()
        for snippet, pairs in (line_subs or {}).items():
            k = blk.text_line(snippet) - blk.line
            for old, new in pairs:
                assert old in lines[k], f"{old!r} not on README line {blk.line + k}"
                lines[k] = lines[k].replace(old, new)
        code = "\n".join(lines) + "\n"
        for old, new in subs or []:
            assert old in code, f"{old!r} is not in README {blk.section} block {blk.index}: update the test"
            code = code.replace(old, new)
        assert code.count("\n") == blk.code.count("\n")
        self.code = code
        self.values: dict[int, list] = defaultdict(list)
        tree = _Recorder(blk.line - 1).visit(ast.parse(code))
        ast.increment_lineno(tree, blk.line - 1)
        ast.fix_missing_locations(tree)
        self.namespace = dict(namespace or {})
        self.namespace.setdefault("fastbag", fastbag)
        self.namespace["__capture__"] = self._capture
        self.namespace.setdefault("print", lambda *args, **kwargs: args)  # a print() line records its arguments
        exec(compile(tree, str(README), "exec"), self.namespace)  # noqa: S102 - the README's own examples

    def _capture(self, line: int, value: Any) -> Any:
        self.values[line].append(value)
        return value

    def at(self, snippet: str) -> list:
        return self.values[self.block.text_line(snippet)]

    def one(self, snippet: str) -> Any:
        values = self.at(snippet)
        assert len(values) == 1, f"README line {self.block.text_line(snippet)} ran {len(values)} times"
        return values[0]


# =========================================================================================================
# oracles and builders
# =========================================================================================================


def rosbags_messages(path: str, topic: str, limit: int | None = None) -> list[tuple[int, Any, bytes]]:
    """``(time, message, bytes)`` of a topic as rosbags' AnyReader reads it (the oracle)."""
    highlevel = need_module("rosbags.highlevel", "rosbags is the oracle")
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with highlevel.AnyReader([Path(path)]) as reader:
            connections = [c for c in reader.connections if c.topic == topic]
            for connection, stamp, raw in reader.messages(connections=connections):
                out.append((stamp, reader.deserialize(raw, connection.msgtype), bytes(raw)))
                if limit is not None and len(out) == limit:
                    break
    return out


def assert_same(ours: Any, theirs: Any, where: str = "msg") -> None:
    """A fastbag message (or value) equals a rosbags one, field by field."""
    if dataclasses.is_dataclass(theirs):
        for f in dataclasses.fields(theirs):
            if not f.name.startswith("_"):
                assert_same(getattr(ours, f.name), getattr(theirs, f.name), f"{where}.{f.name}")
    elif isinstance(theirs, np.ndarray):
        np.testing.assert_array_equal(np.asarray(ours), theirs, err_msg=where)
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{k}]")
    elif isinstance(theirs, float) and math.isnan(theirs):
        assert math.isnan(ours), where
    else:
        assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"


def copy_topics(dst: Path, sources: list[tuple[str, str, str, int | None]]) -> Path:
    """A ROS1 bag holding real messages: for each ``(bag, topic, new name, limit)`` the first ``limit``
    messages, bytes, connection definitions and receive times as recorded."""
    with fastbag.Writer(dst) as writer, quiet():
        for path, topic, name, limit in sources:
            with fastbag.open(path) as bag:
                made = {}
                for k, m in enumerate(bag.messages(topics=[topic], raw=True)):
                    if k == limit:
                        break
                    c = m.connection
                    if c.id not in made:
                        made[c.id] = writer.add_connection(
                            name, c.msgtype, c.definition, c.md5sum, callerid=c.callerid, latching=c.latching
                        )
                    writer.write(made[c.id], m.time, m.data)
    return dst


def shifted_copy(src: Path, dst: Path, shift_ns: int) -> Path:
    """``src`` with every receive time ``shift_ns`` later (header stamps unchanged: transport latency)."""
    with fastbag.open(src) as bag, fastbag.Writer(dst) as writer:
        made = {}
        for m in bag.messages(raw=True):
            c = m.connection
            if c.id not in made:
                made[c.id] = writer.add_connection(c.topic, c.msgtype, c.definition, c.md5sum)
            writer.write(made[c.id], m.time + shift_ns, m.data)
    return dst


def custom_bag(
    path: Path, msgtype: str, definition: str, payloads: list[bytes], topic: str, start: int = 10**18, step: int = 10**8
) -> Path:
    from fastbag.msg.msgdef import parse_definition

    md5 = parse_definition(msgtype, definition).md5sum()
    with fastbag.Writer(path) as writer:
        connection = writer.add_connection(topic, msgtype, definition, md5)
        for k, payload in enumerate(payloads):
            writer.write(connection, start + k * step, payload)
    return path


# =========================================================================================================
# fixtures
# =========================================================================================================


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> dict[str, Path]:
    """Generated bags: ``mixed`` (every README topic: /imu, /odom, /tf, /points, /camera/image_raw,
    /scan of 1080 ranges, /livox/lidar; 0.5 s), its lz4 twin, ``run1``/``run2`` (8 s with small images
    and clouds, received 7 ms after their header stamps) in ``fleet/``."""
    from fastbag.tooling import synth

    root = tmp_path_factory.mktemp("synthetic")
    mixed = root / "mixed.bag"
    synth.write_bag(mixed, synth.MIXED_STREAMS, seconds=0.5, points=2000)
    mixed_lz4 = root / "mixed_lz4.bag"
    synth.write_bag(mixed_lz4, synth.MIXED_STREAMS, seconds=0.5, points=2000, compression="lz4")
    streams = (
        synth.Stream("/imu", synth.IMU, 200, synth.imu),
        synth.Stream("/odom", synth.ODOMETRY, 50, synth.odometry),
        synth.Stream("/tf", synth.TFMESSAGE, 100, synth.tf),
        synth.Stream("/points", synth.POINTCLOUD2, 10, synth.pointcloud2, (("points", 512),)),
        synth.Stream("/camera/image_raw", synth.IMAGE, 10, synth.image, (("height", 24), ("width", 32))),
    )
    fleet = root / "fleet"
    fleet.mkdir()
    for k in (1, 2):
        plain = root / f"plain{k}.bag"
        synth.write_bag(plain, streams, seconds=8.0, seed=k, start=(1_700_000_000 + 100 * k) * 10**9)
        shifted_copy(plain, fleet / f"run{k}.bag", 7_000_000)
    return {
        "mixed": mixed,
        "mixed_lz4": mixed_lz4,
        "run1": fleet / "run1.bag",
        "run2": fleet / "run2.bag",
        "fleet": fleet,
        "root": root,
    }


@pytest.fixture(scope="module")
def composite(tmp_path_factory) -> dict[str, Any]:
    """One ROS1 bag of real messages under the README's topic names: Imu (robot_localization), LaserScan
    (scan_tools), PointCloud2 (toposens), Image (ros_numpy), tf on two connections and Odometry (zaki0929)."""
    sources = {
        "/imu": (need(IMU_BAG), "/imu/data", 400),
        "/scan": (need(SCAN_BAG), "/scan", None),
        "/points": (need(CLOUD_BAG), "/topo/pointCloud", 300),
        "/camera/image_raw": (need(IMAGE_BAG), "/image", None),
        "/tf": (need(TF_BAG), "/tf", None),
        "/odom": (need(TF_BAG), "/odom", 200),
    }
    path = tmp_path_factory.mktemp("composite") / "run.bag"
    copy_topics(path, [(src, topic, name, limit) for name, (src, topic, limit) in sources.items()])
    return {"path": path, "sources": sources}


def oracle(composite: dict, name: str) -> list[tuple[int, Any, bytes]]:
    src, topic, limit = composite["sources"][name]
    return rosbags_messages(src, topic, limit)


@pytest.fixture(scope="module")
def gnupg(tmp_path_factory):
    """A throwaway GNUPGHOME with one unprotected key pair for "QA User" (never the user's keyring)."""
    if shutil.which("gpg") is None:
        pytest.skip("the gpg program (GnuPG) is not installed")
    need_module("cryptography", "AES for encrypted bags: pip install 'fastbag[encryption]'")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    add_gpg_key(home, "QA User")
    with gnupg_env(home):
        yield home


# =========================================================================================================
# ## Use
# =========================================================================================================


@pytest.mark.parametrize("source", ["generated", "real"])
def test_use_block(source, synthetic, request):
    blk = block("Use", 0, 'import fastbag\n\nwith fastbag.open("run.bag") as bag:')
    if source == "real":
        comp = request.getfixturevalue("composite")
        path = comp["path"]
    else:
        path = synthetic["mixed"]
    with fastbag.open(path) as probe:
        imu_times = probe.times("/imu")
    t0, t1 = int(imu_times[5]), int(imu_times[15])
    run = Run(blk, [('"run.bag"', repr(str(path)))], {"t0": t0, "t1": t1})

    # bag.version, times, counts
    assert run.one("bag.version") == "2.0"
    start, end = run.one("bag.start_time, bag.end_time")
    with fastbag.open(path) as bag:
        by_topic = bag.times_by_topic()
    every = np.concatenate(list(by_topic.values()))
    assert (start, end) == (int(every.min()), int(every.max())) and type(start) is int
    assert run.one("bag.message_count") == every.size
    info = run.one("info = bag.topics")
    assert info.msgtype == "sensor_msgs/Imu" and len(info.md5sum) == 32 and "linear_acceleration" in info.definition
    assert info.message_count == imu_times.size and len(info.connections) == 1
    assert info.frequency == pytest.approx((imu_times.size - 1) / ((imu_times[-1] - imu_times[0]) / 1e9), rel=0.5)

    # the decoded topic against rosbags (real) / against the per-message objects of the same README block
    imu = run.one('imu = bag.read("/imu"')
    n, times = run.one("len(imu), imu.time")
    assert n == imu_times.size and times.dtype == np.int64 and np.array_equal(times, imu_times)
    x = run.one('imu["linear_acceleration"]["x"]')
    assert x.dtype == np.float64 and x.shape == (n,)
    per_message = run.at("m.msg.linear_acceleration.x   #")
    assert np.array_equal(x, np.array(per_message))  # "equals what m.msg.linear_acceleration.x gives"
    secs = run.one('imu["header"]["stamp"]["secs"]')
    assert secs.dtype == np.uint32
    ns = run.one("fastbag.to_ns(imu.header.stamp)")
    assert ns.dtype == np.int64
    frame_ids = run.one('imu["header"]["frame_id"]')
    assert frame_ids.dtype.kind == "U"
    packed = run.one("imu.to_numpy()")
    assert packed.shape == (n,) and not packed.dtype.isalignedstruct
    assert packed.dtype.itemsize == sum(packed.dtype.fields[f][0].itemsize for f in packed.dtype.names)  # packed
    assert np.array_equal(packed["linear_acceleration"]["x"], x)
    assert np.array_equal(run.one("imu.linear_acceleration.x   "), x)
    assert np.array_equal(run.one('imu["linear_acceleration.x"]'), x)
    covariance = run.one('imu["orientation_covariance[4]"]')
    assert covariance.shape == (n,) and np.array_equal(covariance, imu["orientation_covariance"][:, 4])
    if source == "real":
        assert covariance.tolist() == [m.orientation_covariance[4] for _, m, _ in
                                       oracle(request.getfixturevalue("composite"), "/imu")]
    assert run.one('"header" in imu') is True
    stamps_sec = run.at("m.msg.header.stamp.to_sec()")
    if source == "real":
        theirs = oracle(request.getfixturevalue("composite"), "/imu")
        assert [t for t, _, _ in theirs] == times.tolist()
        assert_same(list(x), [m.linear_acceleration.x for _, m, _ in theirs])
        assert secs.tolist() == [m.header.stamp.sec for _, m, _ in theirs]
        assert ns.tolist() == [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, m, _ in theirs]
        assert frame_ids.tolist() == [m.header.frame_id for _, m, _ in theirs]
        assert stamps_sec == [m.header.stamp.sec + m.header.stamp.nanosec / 1e9 for _, m, _ in theirs]
    else:
        assert ns.tolist() == [int(s) * 10**9 + int(q) for s, q in zip(secs, imu["header"]["stamp"]["nsecs"])]
        assert stamps_sec == pytest.approx((ns / 1e9).tolist(), abs=1e-6)

    # LaserScan: dense (N, k) float32
    ranges = run.one('scan["ranges"]')
    assert ranges.dtype == np.float32 and ranges.ndim == 2
    if source == "generated":
        assert ranges.shape[1] == 1080
    else:
        theirs = oracle(request.getfixturevalue("composite"), "/scan")
        np.testing.assert_array_equal(ranges, np.stack([m.ranges for _, m, _ in theirs]))

    # PointCloud2: message 0's bytes are a view into the file mapping
    data0 = run.one('pc["data"][0]')
    base = data0
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    assert type(base).__name__ == "mmap", f"pc['data'][0] is not a view of the file mapping but of {base!r}"
    points_x = run.at('points["x"]')
    with fastbag.open(path) as bag:
        raw_clouds = [bytes(m.data) for m in bag.messages(topics=["/points"], raw=True)]
    if source == "real":
        theirs = oracle(request.getfixturevalue("composite"), "/points")
        assert bytes(data0) == bytes(theirs[0][1].data)
        for xs, (_, msg, _) in zip(points_x, theirs, strict=True):
            off = next(f.offset for f in msg.fields if f.name == "x")
            expect = np.ndarray((msg.height * msg.width,), "<f4", msg.data.tobytes(), off, (msg.point_step,))
            np.testing.assert_array_equal(np.ravel(xs), expect)
    else:
        assert bytes(data0) in raw_clouds[0] and len(points_x) == len(raw_clouds)

    # images: a stacked copy, or one view per message
    frames, views = run.one("frames = fastbag.image"), run.one("views = fastbag.image")
    assert frames.ndim == 4 and frames.flags.owndata and len(views) == frames.shape[0]
    assert all(v.shape == frames.shape[1:] and not v.flags.owndata for v in views)
    assert all(np.array_equal(v, f) for v, f in zip(views, frames))
    if source == "real":
        ((_, msg, _),) = oracle(request.getfixturevalue("composite"), "/camera/image_raw")
        assert frames.shape == (1, msg.height, msg.width, 3)
        np.testing.assert_array_equal(frames[0], msg.data.reshape(msg.height, msg.width, 3))

    # raw messages in [t0, t1): memoryviews of the recorded bytes; no publish_time/sequence in ROS1
    raw = run.at("m.topic, m.time, m.data")
    assert [r[1] for r in raw] == imu_times[(imu_times >= t0) & (imu_times < t1)].tolist()
    assert all(r[0] == "/imu" and isinstance(r[2], memoryview) for r in raw)
    assert run.at("m.publish_time, m.sequence") == [(None, None)] * len(raw)
    if source == "real":
        theirs = oracle(request.getfixturevalue("composite"), "/imu")
        assert [bytes(r[2]) for r in raw] == [b for t, _, b in theirs if t0 <= t < t1]


def test_use_messages_spellings_and_mcap_records():
    """README (Use): m.msg["..."], to_dict(); publish_time and sequence as an MCAP record holds them."""
    mcap_reader = need_module("mcap.reader", "the mcap package is the oracle for MCAP files")
    path = need(ROS2_MCAP)
    with open(path, "rb") as f:
        records = [
            (m.log_time, m.publish_time, m.sequence)
            for _, _, m in mcap_reader.make_reader(f).iter_messages(topics=[ROS2_IMU])
        ]
    with fastbag.open(path) as bag:
        got = [(m.time, m.publish_time, m.sequence) for m in bag.messages(topics=[ROS2_IMU], raw=True)]
        arr = bag.read(ROS2_IMU)
        msgs = list(bag.messages(topics=[ROS2_IMU]))
    assert got == records
    assert arr.publish_time.dtype == np.int64 and arr.publish_time.tolist() == [r[1] for r in records]
    assert arr.sequence.tolist() == [r[2] for r in records]
    for m in msgs:
        assert m.msg["linear_acceleration"]["x"] == m.msg.linear_acceleration.x
        assert m.msg.to_dict()["linear_acceleration"]["x"] == m.msg.linear_acceleration.x


def test_time_bounds_take_every_documented_spelling():
    """README (Use): int ns, a Time, genpy's, a ROS 2 stamp, naive datetime (local time), NumPy/pandas; a float and an
    int that is the bag's time in seconds are TypeErrors, for read, messages, times, iter_read."""
    genpy = need_module("genpy")
    path = need(IMU_SMALL)
    with fastbag.open(path) as bag:
        times = bag.times("/sensor/Imu")
        t0, t1 = int(times[20]), int(times[40])
        want = times[(times >= t0) & (times < t1)]
        assert want.size == 20  # [start, end)

        def selected(start, end=t1):
            return bag.read("/sensor/Imu", start=start, end=end).time

        assert np.array_equal(selected(t0), want)
        assert np.array_equal(selected(Time(t0 // 10**9, t0 % 10**9)), want)
        assert np.array_equal(selected(genpy.Time(t0 // 10**9, t0 % 10**9)), want)
        stamp = bag.read("/sensor/Imu")[20].header.stamp  # m.msg.header.stamp (its header time)
        assert np.array_equal(selected(stamp), times[(times >= stamp.to_nsec()) & (times < t1)])
        ros2 = types_ros2_stamp(t0)
        assert np.array_equal(selected(ros2), want)
        assert np.array_equal(selected(np.datetime64(t0, "ns")), want)
        pd = need_module("pandas")
        assert np.array_equal(selected(pd.Timestamp(t0, unit="ns")), want)
        # a naive datetime is local time: checked under a time zone that is not UTC
        before = os.environ.get("TZ")
        os.environ["TZ"] = "Asia/Kolkata"
        time.tzset()
        try:
            from zoneinfo import ZoneInfo

            zone = ZoneInfo("Asia/Kolkata")
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            aware = epoch + datetime.timedelta(microseconds=int(times[60]) // 1000 + 1)
            naive = aware.astimezone(zone).replace(tzinfo=None)  # the wall clock in Kolkata
            expect = (aware - epoch) // datetime.timedelta(microseconds=1) * 1000
            chosen = times[times >= expect]
            assert 0 < chosen.size < times.size
            assert np.array_equal(selected(naive, None), chosen)
        finally:
            if before is None:
                os.environ.pop("TZ")
            else:
                os.environ["TZ"] = before
            time.tzset()
        for bad in (t0 / 1e9, float(t0), t0 // 10**9):
            with pytest.raises(TypeError):
                bag.read("/sensor/Imu", start=bad)
            with pytest.raises(TypeError):
                list(bag.messages(topics=["/sensor/Imu"], start=bad))
            with pytest.raises(TypeError):
                bag.times("/sensor/Imu", start=bad)
            with pytest.raises(TypeError):
                list(bag.iter_read("/sensor/Imu", start=bad))


def types_ros2_stamp(ns: int) -> Any:
    """A ROS 2 stamp as rosbags builds it (``sec``, ``nanosec``)."""
    typesys = need_module("rosbags.typesys")
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    return store.types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)


def test_whole_bag_iteration_goes_past_what_it_cannot_decode(tmp_path):
    """README (Use): such a message's m.msg raises when used and is false, m.data holds its bytes, one FastbagWarning
    per topic; the topic's other messages decode."""
    from fastbag.tooling import synth

    good = list(synth.imu(10**18 + np.arange(6) * 10**9, np.random.default_rng(0)))
    payloads = [p if k not in (1, 4) else p[:-10] for k, p in enumerate(good)]
    path = custom_bag(tmp_path / "short.bag", synth.IMU.name, synth.IMU.definition, payloads, "/imu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            ms = list(bag.messages())
    assert [bool(m.msg) for m in ms] == [True, False, True, True, False, True]
    assert [bytes(m.data) for m in ms] == payloads
    assert len([w for w in caught if issubclass(w.category, fastbag.FastbagWarning)]) == 1
    with pytest.raises(fastbag.DecodeError):
        ms[1].msg.linear_acceleration  # noqa: B018
    oracle_x = [struct.unpack_from("<d", p, len(p) - 72 - 24)[0] for p in good]  # linear_acceleration.x
    assert [m.msg.linear_acceleration.x for k, m in enumerate(ms) if k not in (1, 4)] == [
        v for k, v in enumerate(oracle_x) if k not in (1, 4)
    ]
    # an empty definition (real) and an encoding fastbag does not decode (real)
    for relative, topics in ((EMPTY_DEF_BAG, 1), (WRONG_RMW_MCAP, 2)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", fastbag.FastbagWarning)
            with fastbag.open(need(relative)) as bag:
                ms = list(bag.messages())
                raw = [bytes(m.data) for m in bag.messages(raw=True)]
        assert ms and not any(ms_.msg for ms_ in ms) and [bytes(m.data) for m in ms] == raw
        assert len([w for w in caught if "cannot be decoded" in str(w.message)]) == topics


def test_end_time_is_the_last_message():
    """README (Use): bag.end_time is the last message's time, as rosbag and MCAP's statistics give it: end=bag.end_time
    leaves that message out, end=None keeps it."""
    mcap_reader = need_module("mcap.reader")
    path = need(TOPICS_MCAP)
    with open(path, "rb") as f:
        statistics = mcap_reader.make_reader(f).get_summary().statistics
    with fastbag.open(path) as bag:
        assert (bag.start_time, bag.end_time) == (statistics.message_start_time, statistics.message_end_time)
        assert len(list(bag.messages(end=bag.end_time))) == bag.message_count - 1
        assert len(list(bag.messages(end=None))) == bag.message_count
    rosbag = _classic()
    with fastbag.open(need(IMU_SMALL)) as bag:
        theirs = classic_call(rosbag, need(IMU_SMALL), lambda b: b.get_end_time())
        assert bag.get_end_time() == pytest.approx(theirs, abs=1e-6)
        assert bag.get_end_time() == pytest.approx(bag.end_time / 1e9, abs=1e-6)
        last = bag.times("/sensor/Imu")[-1]
        assert len(bag.read("/sensor/Imu", end=bag.end_time)) == bag.topics["/sensor/Imu"].message_count - (
            1 if last == bag.end_time else 0
        )


def test_take_positions_slice_and_mask():
    """README (Use, Tables): integer positions, a slice or a boolean mask over the topic."""
    with fastbag.open(need(IMU_SMALL)) as bag:
        times = bag.times("/sensor/Imu")
        assert np.array_equal(bag.take("/sensor/Imu", [10, 11, 100]).time, times[[10, 11, 100]])
        assert np.array_equal(bag.take("/sensor/Imu", slice(5, 9)).time, times[5:9])
        mask = times % 3 == 0
        assert np.array_equal(bag.take("/sensor/Imu", mask).time, times[mask])
        taken = bag.take("/sensor/Imu", [7])
        assert taken[0] == bag.read("/sensor/Imu")[7]


def test_open_options(synthetic):
    """README (Use): fastbag.open(path, cache_bytes=256 << 20, workers=None, checksums=True)."""
    parameters = inspect.signature(fastbag.open).parameters
    assert parameters["cache_bytes"].default == 256 << 20
    assert parameters["workers"].default is None and parameters["checksums"].default is True
    with fastbag.open(synthetic["mixed"]) as bag:
        expect = {t: bag.read(t).time for t in ("/imu", "/points", "/scan")}
        expect_x = bag.read("/imu").linear_acceleration.x
    with fastbag.open(synthetic["mixed_lz4"], cache_bytes=1 << 20, workers=1, checksums=False) as bag:
        for topic, times in expect.items():
            assert np.array_equal(bag.read(topic).time, times)
        assert np.array_equal(bag.read("/imu").linear_acceleration.x, expect_x)


def test_pointcloud_xyz_block(synthetic):
    """README (Use): the (N, 3) recipe, on a cloud where a driver marked points invalid with NaN."""
    blk = block("Use", 1, "from numpy.lib.recfunctions import structured_to_unstructured")
    with fastbag.open(synthetic["mixed"]) as bag:
        points = np.array(fastbag.pointcloud(bag.read("/points")[0]))  # (a copy: the view is read-only)
    points["y"][::7] = np.nan
    namespace = {"np": np, "points": points}
    exec(compile(blk.code, "README.md", "exec"), namespace)
    keep = ~np.isnan(points["y"].ravel())
    want = np.stack([points[axis].ravel()[keep] for axis in "xyz"], axis=1).astype(np.float64)
    assert namespace["xyz"].shape == (keep.sum(), 3) and np.array_equal(namespace["xyz"], want)


def test_checksum_claims_about_the_data(tmp_path):
    """README (Use): MCAP files as rosbag2 records them (libmcap) carry no chunk CRC, in every one of the test data; nor
    do rosbags' lz4 chunks (their LZ4 frames have no content checksum)."""
    stream_reader = need_module("mcap.stream_reader", "the mcap package reads the records")
    from mcap.records import Chunk, Header

    found = 0
    paths = glob.glob(str(DATA / "mcap" / "**" / "*.mcap"), recursive=True) + glob.glob(
        str(DATA / "db3" / "**" / "*.mcap"), recursive=True
    )
    for path in sorted(paths):
        if "conformance" in path:
            continue
        with open(path, "rb") as f:
            records = list(stream_reader.StreamReader(f, emit_chunks=True).records)
        header = next(r for r in records if isinstance(r, Header))
        if header.profile == "ros2" and header.library.startswith("libmcap"):
            found += 1
            assert all(r.uncompressed_crc == 0 for r in records if isinstance(r, Chunk)), path
    if not found:
        pytest.skip(NO_DATA)
    rosbag1 = need_module("rosbags.rosbag1")
    typesys = need_module("rosbags.typesys")
    store = typesys.get_typestore(typesys.Stores.ROS1_NOETIC)
    written = tmp_path / "rosbags-lz4.bag"
    writer = rosbag1.Writer(written)
    writer.set_compression(rosbag1.Writer.CompressionFormat.LZ4)
    with writer:
        c = writer.add_connection("/s", "std_msgs/msg/String", typestore=store)
        writer.write(
            c, 10**9, store.serialize_ros1(store.types["std_msgs/msg/String"](data="x" * 100), "std_msgs/msg/String")
        )
    data = written.read_bytes()
    frames = [m.start() for m in re.finditer(re.escape(bytes.fromhex("04224d18")), data)]
    assert frames and all(not data[f + 4] & 0x04 for f in frames)  # FLG: no content checksum


# =========================================================================================================
# ### What bag.read returns
# =========================================================================================================


def test_read_returns_as_the_table_says(tmp_path, composite):
    """README (bag.read): on real messages: Nested tf over two connections of one md5sum, dense and Ragged arrays, views
    that survive close(), arr[i] == m.msg, attributes, strings (bytes where not UTF-8)."""
    path = composite["path"]
    bag = fastbag.open(path)
    # T[] of variable-size structs: Nested; tf/tfMessage and tf2_msgs/TFMessage read as one array
    tf = bag.read("/tf")
    assert type(tf["transforms"]).__name__ == "Nested" and len(tf.connections) == 2
    theirs = oracle(composite, "/tf")
    assert len(tf) == len(theirs)
    for i in (0, 1, len(tf) - 1):
        assert list(tf.transforms.child_frame_id[i]) == [t.child_frame_id for t in theirs[i][1].transforms]
        assert list(tf.transforms.transform.translation.x[i]) == [
            t.transform.translation.x for t in theirs[i][1].transforms
        ]
    assert len(tf.transforms.values) == sum(len(m.transforms) for _, m, _ in theirs)
    # T[] of numbers: Ragged of views (counts, offsets, values) where counts differ
    clouds = bag.read("/points")
    data = clouds["data"]
    assert type(data).__name__ == "Ragged"
    cl = oracle(composite, "/points")
    assert data.counts.tolist() == [len(m.data) for _, m, _ in cl]
    assert data.offsets.tolist() == np.concatenate([[0], np.cumsum(data.counts)]).tolist()
    assert bytes(data.values) == b"".join(m.data.tobytes() for _, m, _ in cl)
    assert not data[3].flags.owndata
    assert [f.name for f in clouds[0].fields] == [f.name for f in cl[0][1].fields]  # the field wins
    assert list(clouds["fields"][0].name) == [f.name for f in cl[0][1].fields]
    # arr[i] is m.msg
    msgs = list(bag.messages(topics=["/odom"]))
    odom = bag.read("/odom")
    assert all(odom[i] == msgs[i].msg for i in (0, 5, len(odom) - 1))
    # attributes: fields where the array has no such attribute; fixed structs as record arrays
    assert isinstance(odom.pose.pose.position, np.recarray)
    for name in (
        "time",
        "topic",
        "msgtype",
        "fields",
        "constants",
        "rows",
        "types",
        "connection",
        "connections",
        "publish_time",
        "sequence",
    ):
        assert hasattr(odom, name)
    assert odom.topic == "/odom" and odom.msgtype == "nav_msgs/Odometry" and odom.publish_time is None
    assert odom.sequence is None
    assert_same(list(odom.pose.pose.position.x), [m.pose.pose.position.x for _, m, _ in oracle(composite, "/odom")])
    ranges = bag.read("/scan")["ranges"]
    bag.close()  # views keep the file mapped
    assert float(ranges[0][0]) == float(oracle(composite, "/scan")[0][1].ranges[0])
    assert bytes(data[0]) == cl[0][1].data.tobytes()
    # string: str, bytes where a value is not UTF-8 (real smach recording)
    with fastbag.open(need(SMACH_BAG)) as smach:
        status = smach.read("/server_name/smach/container_status")
        local = status["local_data"]
        assert all(isinstance(v, bytes) for v in local) and status["path"].dtype.kind == "U"
        # rosbags cannot decode these strings (MANIFEST): the raw bytes are the oracle
        raws = [bytes(m.data) for m in smach.messages(raw=True)]
        assert all(v in r for v, r in zip(local, raws))


def test_dense_up_to_16_kib_then_ragged(tmp_path):
    """README (bag.read): a T[] of numbers is a dense (N, k) array when every message has k elements and its part is at
    most 16 KiB."""
    for n, dense in ((4096, True), (4097, False)):
        payloads = [struct.pack("<I", n) + np.arange(n, dtype=np.float32).tobytes() for _ in range(3)]
        path = custom_bag(tmp_path / f"r{n}.bag", "qa_pkg/R", "float32[] r\n", payloads, "/r")
        with fastbag.open(path) as bag:
            r = bag.read("/r")["r"]
        assert (type(r) is np.ndarray and r.shape == (3, n)) is dense
        assert np.array_equal(np.asarray(r[2]), np.arange(n, dtype=np.float32))


def test_decode_error_and_md5_warning_and_empty_definition(tmp_path):
    """README (bag.read): DecodeError naming topic and index; a warning with both md5sums; an empty definition leaves
    the messages raw only."""
    from fastbag.tooling import synth

    good = list(synth.imu(10**18 + np.arange(4) * 10**9, np.random.default_rng(0)))
    path = custom_bag(
        tmp_path / "bad.bag",
        synth.IMU.name,
        synth.IMU.definition,
        [p if k != 2 else p[:-10] for k, p in enumerate(good)],
        "/imu",
    )
    with fastbag.open(path) as bag, pytest.raises(fastbag.DecodeError) as info:
        bag.read("/imu")
    assert info.value.topic == "/imu" and info.value.index == 2 and "message 2" in str(info.value)
    with fastbag.Writer(tmp_path / "md5.bag") as writer:
        c = writer.add_connection("/imu", synth.IMU.name, synth.IMU.definition, "0123456789abcdef" * 2)
        writer.write(c, 10**18, good[0])
    with pytest.warns(fastbag.FastbagWarning) as caught, fastbag.open(tmp_path / "md5.bag") as bag:
        bag.read("/imu")
    text = " ".join(str(w.message) for w in caught)
    assert "0123456789abcdef" * 2 in text and synth.IMU.md5sum in text
    with quiet(), fastbag.open(need(EMPTY_DEF_BAG)) as bag:
        with pytest.raises(fastbag.DecodeError):
            bag.read("/led_array_status")
        assert len(list(bag.messages(raw=True))) == 14


# =========================================================================================================
# ### ROS2 messages (CDR), from any source
# =========================================================================================================


def test_ros2_decode_messages_block():
    """README (ROS2): on the real MCAP's Imu schema and bytes (read with the mcap package), against rosbags'
    deserialize_cdr."""
    mcap_reader = need_module("mcap.reader", "the mcap package reads the schema and bytes")
    typesys = need_module("rosbags.typesys", "rosbags is the oracle")
    blk = block("ROS2 messages", 0, "from fastbag.msg import decode_messages")
    with open(need(ROS2_MCAP), "rb") as f:
        pairs = [
            (schema, message.data) for schema, _, message in mcap_reader.make_reader(f).iter_messages(topics=[ROS2_IMU])
        ]
    schema_text, list_of_bytes = pairs[0][0].data.decode(), [d for _, d in pairs]
    assert pairs[0][0].encoding == "ros2msg"
    run = Run(blk, namespace={"schema_text": schema_text, "list_of_bytes": list_of_bytes})
    w, sec, frame = run.one('imu["orientation"]["w"]')
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    theirs = [store.deserialize_cdr(d, "sensor_msgs/msg/Imu") for d in list_of_bytes]
    assert w.tolist() == [m.orientation.w for m in theirs]
    assert sec == theirs[0].header.stamp.sec and frame == theirs[0].header.frame_id
    imu = run.one("imu = decode_messages")
    assert_same([imu[k] for k in range(len(imu))], theirs)
    # "ros1"/"ros1msg" and layout_for
    from fastbag.msg import decode_messages
    from fastbag.msg.layout import layout_for

    layout = layout_for("sensor_msgs/msg/Imu", schema_text, encoding="cdr", schema_encoding="ros2msg")
    assert layout.encoding.name == "cdr"
    with open_quietly(need(IMU_TINY)) as bag:
        raw = [bytes(m.data) for m in bag.messages(raw=True)]
        ours = decode_messages(
            "sensor_msgs/Imu", bag.topics["/sensor/Imu"].definition, raw, encoding="ros1", schema_encoding="ros1msg"
        )
        assert np.array_equal(ours.linear_acceleration.x, bag.read("/sensor/Imu").linear_acceleration.x)
    assert [
        m.linear_acceleration.x for _, m, _ in rosbags_messages(need(IMU_TINY), "/sensor/Imu")
    ] == ours.linear_acceleration.x.tolist()


def _livox_store():
    typesys = need_module("rosbags.typesys", "rosbags serializes the CDR messages")
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    types = typesys.get_types_from_msg(LIVOX_MSG, "livox_ros_driver2/msg/CustomMsg")
    types.update(typesys.get_types_from_msg(LIVOX_POINT, "livox_ros_driver2/msg/CustomPoint"))
    store.register(types)
    return store, typesys


LIVOX_MSG = (
    "std_msgs/Header header\nuint64 timebase\nuint32 point_num\nuint8 lidar_id\nuint8[3] rsvd\nCustomPoint[] points\n"
)
LIVOX_POINT = "uint32 offset_time\nfloat32 x\nfloat32 y\nfloat32 z\nuint8 reflectivity\nuint8 tag\nuint8 line\n"


def test_ros2_cdr_layout_claims():
    """README (ROS2): a 19-byte Livox point is a 20-byte zero-copy element; both byte orders; a later message in the
    other order is a DecodeError; XCDR2 and parameter lists raise UnsupportedError naming the representation id; wstring
    raises UnsupportedError; bounded strings and sequences; ros2idl."""
    from fastbag.msg import decode_messages

    store, typesys = _livox_store()
    point, custom = store.types["livox_ros_driver2/msg/CustomPoint"], store.types["livox_ros_driver2/msg/CustomMsg"]
    header, stamp = store.types["std_msgs/msg/Header"], store.types["builtin_interfaces/msg/Time"]
    msgs = [
        custom(
            header=header(stamp=stamp(sec=10 + i, nanosec=5), frame_id="livox"),
            timebase=1000 + i,
            point_num=3 + i,
            lidar_id=1,
            rsvd=np.zeros(3, np.uint8),
            points=[
                point(offset_time=k, x=k * 1.5, y=-k * 1.0, z=float(i), reflectivity=k, tag=2, line=k % 6)
                for k in range(3 + i)
            ],
        )
        for i in range(4)
    ]
    schema = LIVOX_MSG + SEP + "MSG: livox_ros_driver2/CustomPoint\n" + LIVOX_POINT
    name = "livox_ros_driver2/msg/CustomMsg"
    little = [bytes(store.serialize_cdr(m, name)) for m in msgs]
    big = [bytes(store.serialize_cdr(m, name, little_endian=False)) for m in msgs]
    for data in (little, big):
        arr = decode_messages(name, schema, data, encoding="cdr", schema_encoding="ros2msg")
        points = arr["points"]
        assert points.values.dtype.itemsize == 20 and not points[1].flags.owndata
        assert_same([arr[k] for k in range(4)], msgs)
    with pytest.raises(fastbag.DecodeError, match="message 1"):
        decode_messages(name, schema, [little[0], big[1]], encoding="cdr", schema_encoding="ros2msg")
    for rid in (0x0003, 0x0007, 0x0011):
        with pytest.raises(fastbag.UnsupportedError, match=f"0x{rid:04x}"):
            decode_messages(
                name, schema, [rid.to_bytes(2, "big") + little[0][2:]], encoding="cdr", schema_encoding="ros2msg"
            )
    with pytest.raises(fastbag.UnsupportedError, match="wstring"):
        decode_messages(
            "qa_pkg/msg/W", "wstring w\n", [b"\x00\x01\x00\x00" + bytes(8)], encoding="cdr", schema_encoding="ros2msg"
        )
    def round_trip(msgtype: str, text: str, values: list, schema_encoding: str) -> None:
        """``values`` serialized by rosbags decode (with ``text`` as the schema) to equal messages."""
        arr = decode_messages(msgtype, text, [bytes(store.serialize_cdr(v, msgtype)) for v in values],
                              encoding="cdr", schema_encoding=schema_encoding)
        assert_same([arr[k] for k in range(len(values))], values)

    bounded = "string<=10 name\nint32[<=5] vals\n"
    store.register(typesys.get_types_from_msg(bounded, "qa_pkg/msg/Bounded"))
    round_trip("qa_pkg/msg/Bounded", bounded, [store.types["qa_pkg/msg/Bounded"](
        name="ab" * i, vals=np.arange(i, dtype=np.int32)) for i in (1, 2, 3)], "ros2msg")
    store.register(typesys.get_types_from_msg("int32 a\nstring b\nfloat64[2] c\n", "qa_pkg/msg/Simple"))
    idl = (
        "module qa_pkg {\n  module msg {\n    struct Simple {\n      int32 a;\n      string b;\n"
        "      double c[2];\n    };\n  };\n};\n"
    )
    round_trip("qa_pkg/msg/Simple", idl, [store.types["qa_pkg/msg/Simple"](
        a=i, b="x" * i, c=np.array([i, -i], float)) for i in range(3)], "ros2idl")


def test_ros2_byte_char_time_empty_struct_and_service_events():
    """README (ROS2): on real recordings: byte/char are uint8 (test_msgs/BasicTypes), Time is a struct of sec, nanosec,
    an empty struct reads, a service event topic (request --- response) reads as the event."""
    typesys = need_module("rosbags.typesys", "rosbags is the oracle")
    with fastbag.open(need(CONVERT_A_MCAP)) as bag:
        basic = bag.read("b_basictypes")
        text = bag.topics["b_basictypes"].connections[0].definition
        raw = [bytes(m.data) for m in bag.messages(topics=["b_basictypes"], raw=True)]
        assert len(bag.read("a_empty")) == bag.topics["a_empty"].message_count > 0
    assert basic.byte_value.dtype == np.uint8 and basic.char_value.dtype == np.uint8
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    store.register(typesys.get_types_from_msg(text, "test_msgs/msg/BasicTypes"))
    theirs = [store.deserialize_cdr(r, "test_msgs/msg/BasicTypes") for r in raw]
    assert_same([basic[k] for k in range(len(basic))], theirs)
    with fastbag.open(need(ROS2_MCAP)) as bag:
        assert bag.read(ROS2_IMU).header.stamp.dtype.names == ("sec", "nanosec")
    with fastbag.open(need(SERVICES_MCAP)) as bag:
        info = bag.topics["/add_two_ints/_service_event"]
        assert "---" in info.connections[0].definition
        events = bag.read("/add_two_ints/_service_event")
    assert events.msgtype == "example_interfaces/AddTwoInts_Event"
    assert events.fields == ["info", "request", "response"]
    requests = {int(e.info.sequence_number): e.request[0] for e in events if len(e.request)}
    responses = [(int(e.info.sequence_number), e.response[0].sum) for e in events if len(e.response)]
    assert responses and all(requests[s].a + requests[s].b == total for s, total in responses if s in requests)


# =========================================================================================================
# ### rosbag2 recordings
# =========================================================================================================


def _rosbags_v9_recording(folder: Path) -> list[tuple[int, bytes]]:
    rosbag2 = need_module("rosbags.rosbag2", "rosbags writes the recording")
    typesys = need_module("rosbags.typesys")
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    t = store.types
    written = []
    with rosbag2.Writer(folder, version=9, storage_plugin=rosbag2.StoragePlugin.SQLITE3) as writer:
        connection = writer.add_connection("/imu", "sensor_msgs/msg/Imu", typestore=store)
        for i in range(30):
            v3 = t["geometry_msgs/msg/Vector3"]
            msg = t["sensor_msgs/msg/Imu"](
                header=t["std_msgs/msg/Header"](
                    stamp=t["builtin_interfaces/msg/Time"](sec=1_700_000_000 + i, nanosec=7), frame_id="imu"
                ),
                orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                orientation_covariance=np.zeros(9),
                angular_velocity=v3(x=0.0, y=0.0, z=i * 0.5),
                angular_velocity_covariance=np.zeros(9),
                linear_acceleration=v3(x=i * 0.1, y=0.0, z=9.8),
                linear_acceleration_covariance=np.zeros(9),
            )
            data = bytes(store.serialize_cdr(msg, "sensor_msgs/msg/Imu"))
            writer.write(connection, 1_700_000_000 * 10**9 + i * 10**8 + 5, data)
            written.append((1_700_000_000 * 10**9 + i * 10**8 + 5, data))
    return written


def _sqlite_rows(folder: str) -> list[tuple[str, int, bytes]]:
    """Every row of a recording's .db3 files through sqlite3, by timestamp (stable in file order)."""
    rows = []
    for path in sorted(Path(folder).glob("*.db3")):
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            rows += con.execute(
                "SELECT t.name, m.timestamp, m.data FROM messages m JOIN topics t "
                "ON m.topic_id = t.id ORDER BY m.timestamp, m.id"
            ).fetchall()
        finally:
            con.close()
    return sorted(rows, key=lambda r: r[1])


@pytest.mark.parametrize("source", ["generated", "real"])
def test_rosbag2_block(source, tmp_path):
    blk = block("rosbag2 recordings", 0, 'with fastbag.open("recording/") as bag:')
    convert_a = need(CONVERT_A_DB3)
    with fastbag.open(need(CONVERT_A_MCAP)) as twin:
        text = twin.topics["b_basictypes"].connections[0].definition
        expect = twin.read("b_basictypes")
    ws = tmp_path / "my_ws" / "src" / "test_msgs" / "msg"
    ws.mkdir(parents=True)
    (ws / "BasicTypes.msg").write_text(text)
    if source == "generated":
        folder, topic, version = tmp_path / "recording", "/imu", "9"
        written = _rosbags_v9_recording(folder)
        rows = [("/imu", t, d) for t, d in written]
    else:
        folder, topic = Path(need(WBAG_DB3)), "AAA"
        version = re.search(r"version: (\d+)", (folder / "metadata.yaml").read_text()).group(1)
        rows = _sqlite_rows(str(folder))
    subs = [
        ('"recording/"', repr(str(folder) + "/")),
        ('"/imu"', repr(topic)),
        ('"humble_bag/"', repr(convert_a + "/")),
        ('"my_ws/src"', repr(str(tmp_path / "my_ws" / "src"))),
    ]
    with quiet():
        run = Run(blk, subs)
    assert run.one("bag.format, bag.version") == ("rosbag2", version)
    definition = run.one("connections[0].definition")
    assert ("linear_acceleration" in definition) if source == "generated" else ("string data" in definition)
    assert run.at("m.topic, m.time, bytes(m.data)") == [(t, ts, bytes(d)) for t, ts, d in rows]
    humble = run.one('fastbag.open("humble_bag/"')
    with humble:
        got = humble.read("b_basictypes")
    assert all(np.array_equal(got[f], expect[f]) for f in expect.fields) and np.array_equal(got.time, expect.time)
    # "or one package (or {"pkg/Type": text})"; or its msg folder (QA: it matched nothing)
    package = tmp_path / "my_ws" / "src" / "test_msgs"
    assert (package / "msg").is_dir()
    for definitions in (str(package), str(package / "msg"), {"test_msgs/BasicTypes": text}):
        with fastbag.open(convert_a, definitions=definitions) as bag:
            assert np.array_equal(bag.read("b_basictypes").int64_value, expect.int64_value)
    # a type found nowhere: read() says which and how to supply it
    with fastbag.open(convert_a) as bag, pytest.raises(fastbag.DecodeError, match="definitions="):
        bag.read("b_basictypes")


def test_rosbag2_files_compression_and_read_only(tmp_path):
    """README (rosbag2): metadata.yaml as the path, a lone .db3, split files merged by time (sqlite3 and MCAP storage
    alike), no metadata.yaml (a warning), a missing file left out (a warning), a folder of .db3 and .mcap refused,
    bag.compression/compression_unit, read-only (nothing appears or changes)."""
    wbag = need(WBAG_DB3)
    rows = _sqlite_rows(wbag)
    with fastbag.open(Path(wbag) / "metadata.yaml") as bag:
        assert bag.message_count == len(rows)
    with fastbag.open(need(WBAG_MCAP)) as a, fastbag.open(wbag) as b:
        assert (
            [(m.topic, m.time, bytes(m.data)) for m in a.messages(raw=True)]
            == [(m.topic, m.time, bytes(m.data)) for m in b.messages(raw=True)]
            == [(t, s, bytes(d)) for t, s, d in rows]
        )
        assert (b.compression, b.compression_unit) == ({"none": 5}, "files")
        assert a.compression_unit == "chunks"
    one = min(Path(wbag).glob("*.db3"))
    with fastbag.open(one) as bag:
        assert bag.format == "rosbag2" and bag.message_count == sum(1 for r in _sqlite_rows_of(one))
    with pytest.warns(fastbag.FastbagWarning, match="metadata.yaml"), fastbag.open(need(FILE_ZSTD_DIR)) as bag:
        assert (bag.compression, bag.compression_unit) == ({"zstd": 4}, "files")
    with fastbag.open(need(IMU_BAG)) as bag:
        assert bag.compression_unit == "chunks"
    # a missing file is left out with a warning
    partial = tmp_path / "wbag"
    shutil.copytree(wbag, partial)
    (partial / "wbag_2.db3").unlink()
    with pytest.warns(fastbag.FastbagWarning, match="wbag_2"), fastbag.open(partial) as bag:
        assert bag.message_count == len(rows) - len(_sqlite_rows_of(Path(wbag) / "wbag_2.db3"))
    # both storages and no metadata.yaml: refused, naming them
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(one, mixed / "a.db3")
    shutil.copy(next(Path(need(WBAG_MCAP)).glob("*.mcap")), mixed / "b.mcap")
    with pytest.raises(fastbag.FastbagError, match=r"a\.db3, b\.mcap"):
        fastbag.open(mixed)
    # read-only: no -wal/-shm appears, no byte changes
    talker = tmp_path / "talker"
    shutil.copytree(need(TALKER_DB3), talker, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in talker.iterdir()}
    with quiet(), fastbag.open(talker) as bag:
        list(bag.messages(raw=True))
        bag.read("/topic")
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in talker.iterdir()} == before


def test_rosbag2_topic_metadata():
    """README (rosbag2): offered_qos_profiles (the stored YAML), connection.qos (one dict per publisher), latching
    (transient_local), encoding (serialization_format) and type_description_hash, from sqlite3 and MCAP storage alike;
    rosbag2_py's idioms: bag.topics, messages(topics=, start=), bag.deserialize."""
    yaml = need_module("yaml")
    mcap_reader = need_module("mcap.reader")
    folder = Path(need("db3/ANYbotics__grid_map__grid_map_ros__resource__double_chatter"))
    con = sqlite3.connect(f"file:{next(folder.glob('*.db3'))}?mode=ro&immutable=1", uri=True)
    try:
        rows = con.execute(
            "SELECT name, type, serialization_format, offered_qos_profiles, type_description_hash FROM topics"
        ).fetchall()
    finally:
        con.close()
    with quiet(), fastbag.open(folder) as bag:
        for name, msgtype, encoding, qos_text, type_hash in rows:
            c = bag.topics[name].connections[0]
            assert (c.msgtype, c.encoding, c.offered_qos_profiles, c.type_description_hash) == (
                msgtype,
                encoding,
                qos_text,
                type_hash,
            )
            assert c.qos == yaml.safe_load(qos_text)
            assert c.latching is any(profile["durability"] == 1 for profile in c.qos)  # 1: transient_local
        first = next(iter(bag.messages(topics=["/chatter1"], raw=True)))
        later = list(bag.messages(topics=["/chatter1"], start=first.time + 1, raw=True))
        assert (
            bag.deserialize(first.data, first.connection.msgtype).data
            == next(iter(bag.messages(topics=["/chatter1"]))).msg.data
        )
        assert len(later) == bag.topics["/chatter1"].message_count - 1
    path = need(
        "mcap/ros2__rosbag2__rosbag2_tests__resources__mcap__bag_with_topics_and_service_events/"
        "bag_with_topics_and_service_events.mcap"
    )
    with open(path, "rb") as f:
        channels = mcap_reader.make_reader(f).get_summary().channels.values()
    with quiet(), fastbag.open(path) as bag:
        for channel in channels:
            c = bag.topics[channel.topic].connections[0]
            assert c.offered_qos_profiles == channel.metadata.get("offered_qos_profiles", "")
            assert c.encoding == channel.message_encoding
            if c.qos:
                assert c.latching is any(profile["durability"] == 1 for profile in c.qos)


def _sqlite_rows_of(path: Path) -> list:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute("SELECT id FROM messages").fetchall()
    finally:
        con.close()


def test_rosbag2_definitions_and_bombs(tmp_path):
    """README (rosbag2): a wrong stored text gives way to definitions=; the shipped packages; a zstd bomb in a
    per-message-compressed row is a BagFormatError naming the file and row (8192 x its size)."""
    with fastbag.open(need(TALKER_MCAP)) as bag:
        log_text = bag.topics["/rosout"].connections[0].definition
        expect = bag.read("/rosout").msg
    with quiet():
        with fastbag.open(need(TALKER_DB3)) as bag:
            assert "uint8 level" in bag.topics["/rosout"].connections[0].definition
            with pytest.raises(fastbag.DecodeError):
                bag.read("/rosout")
        with fastbag.open(need(TALKER_DB3), definitions={"rcl_interfaces/msg/Log": log_text}) as bag:
            got = bag.read("/rosout").msg
    assert len(got) == 10 and all(m.startswith("Publishing: 'Hello, world! ") for m in got) and len(expect) == 10
    shipped = sorted(p.name for p in (REPO / "fastbag" / "rosbag2" / "interfaces").iterdir() if p.is_dir())
    assert shipped == sorted(
        [
            "builtin_interfaces",
            "std_msgs",
            "geometry_msgs",
            "sensor_msgs",
            "nav_msgs",
            "tf2_msgs",
            "diagnostic_msgs",
            "visualization_msgs",
            "rcl_interfaces",
            "rosgraph_msgs",
            "shape_msgs",
            "stereo_msgs",
            "trajectory_msgs",
            "actionlib_msgs",
            "action_msgs",
            "unique_identifier_msgs",
            "lifecycle_msgs",
            "statistics_msgs",
            "service_msgs",
            "rosbag2_interfaces",
            "std_srvs",
        ]
    )
    zstandard = need_module("zstandard")
    from fastbag.tooling.synth_db3 import rosbag2_writer

    need_module("rosbags.rosbag2")
    writer, store = rosbag2_writer(tmp_path / "pm", per_message=True)
    string = store.types["std_msgs/msg/String"]
    with writer:
        c = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store)
        for i in range(5):
            writer.write(c, 10**18 + i, store.serialize_cdr(string(data=f"hello {i}"), "std_msgs/msg/String"))
    with fastbag.open(tmp_path / "pm") as bag:
        assert bag.compression == {"zstd": 1} and bag.read("/chatter")["data"].tolist() == [
            f"hello {i}" for i in range(5)
        ]
    db3 = next((tmp_path / "pm").glob("*.db3"))
    # "a .db3 opened alone ... says its mode in its own metadata table; one from before that table, or
    # without it, by its first message starting with zstd's frame magic"
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(db3, alone / "lone.db3")
    for drop in (False, True):
        if drop:
            con = sqlite3.connect(alone / "lone.db3")
            con.execute("DROP TABLE metadata")
            con.commit()
            con.close()
        with quiet(), fastbag.open(alone / "lone.db3") as bag:
            assert bag.read("/chatter")["data"].tolist() == [f"hello {i}" for i in range(5)]
    bomb = zstandard.ZstdCompressor().compress(bytes(20 << 20))
    con = sqlite3.connect(db3)
    con.execute("UPDATE messages SET data=? WHERE id=3", (bomb,))
    con.commit()
    con.close()
    with fastbag.open(tmp_path / "pm") as bag, pytest.raises(fastbag.BagFormatError) as info:
        bag.read("/chatter")
    assert "row 3" in str(info.value) and db3.name in str(info.value) and str(8192 * len(bomb)) in str(info.value)


# =========================================================================================================
# ### More on messages
# =========================================================================================================


def test_more_on_messages_block(tmp_path, composite):
    """README (More on messages): each line with ``m`` a message of a type that has the fields it uses (real Imu, tf,
    NavSatFix; a generated type with ``flags``), values against rosbags."""
    blk = block("More on messages", 0, "m.msg.header.stamp.secs")
    lines = blk.code.splitlines()
    path = composite["path"]
    bag = fastbag.open(path)
    imu_msgs = list(bag.messages(topics=["/imu"]))
    imu_theirs = oracle(composite, "/imu")
    tf_msg = next(iter(bag.messages(topics=["/tf"])))
    with fastbag.open(need(FIX_BAG)) as fixes:
        fix_msg = next(iter(fixes.messages(topics=["/gps/fix"])))
    fix_theirs = rosbags_messages(need(FIX_BAG), "/gps/fix", 1)[0][1]
    flags_def = "std_msgs/Bool[] flags\nint32 size\nfloat64 shape\n" + SEP + "MSG: std_msgs/Bool\nbool data\n"
    flags_bag = custom_bag(
        tmp_path / "flags.bag",
        "qa_pkg/Flags",
        flags_def,
        [struct.pack("<I3?id", 3, False, True, True, 7, 0.5) for _ in range(2)],
        "/flags",
    )
    with fastbag.open(flags_bag) as fb:
        flag_msg = next(iter(fb.messages()))
    m = imu_msgs[3]
    namespaces = {"transforms": tf_msg, "status": fix_msg, "flags": flag_msg}
    results = {}
    for k, text in enumerate(lines):
        if not text.strip():
            continue
        which = next((key for key in namespaces if f"m.msg.{key}" in text), None)
        sub = Block(blk.section, blk.index, blk.line + k, text + "\n")
        run = Run(
            sub,
            namespace={
                "m": namespaces.get(which, m),
                "t0": imu_msgs[0].msg.header.stamp,
                "other": bag.take("/imu", [3])[0],
                "json": json,
                "pickle": pickle,
            },
        )
        results[blk.line + k] = run.values[blk.line + k][0]
    values = [
        results[blk.text_line(s)]
        for s in (
            "m.msg.header.stamp.secs",
            "m.msg.transforms[0]",
            "STATUS_FIX",
            "m.msg.flags[0].data",
            'm.msg["header"]["frame_id"]',
            "(m.msg.header.stamp - t0)",
            "m.msg == other",
            "json.dumps",
            "pickle.dumps",
        )
    ]
    secs, to_sec = values[0]
    theirs = imu_theirs[3][1]
    assert secs == theirs.header.stamp.sec and to_sec == pytest.approx(
        theirs.header.stamp.sec + theirs.header.stamp.nanosec / 1e9
    )
    assert values[1] == oracle(composite, "/tf")[0][1].transforms[0].transform.translation.x
    assert values[2] is (fix_theirs.status.status == 0) and type(fix_msg.msg.status).STATUS_FIX == 0
    assert values[3] is False
    assert values[4] == theirs.header.frame_id
    first = imu_theirs[0][1].header.stamp
    assert values[5] == pytest.approx(
        (theirs.header.stamp.sec - first.sec) + (theirs.header.stamp.nanosec - first.nanosec) / 1e9
    )
    equal, text, as_dict = values[6]
    assert (
        equal is True
        and text.startswith("sensor_msgs/Imu(")
        and isinstance(as_dict["orientation_covariance"], np.ndarray)
    )
    assert json.loads(values[7])["linear_acceleration"]["x"] == theirs.linear_acceleration.x
    assert pickle.loads(values[8]) == m.msg
    # len(), [i], iteration of arrays of structs; number arrays as NumPy; uint8[] data as base64 in plain dicts
    assert (
        len(tf_msg.msg.transforms) == len(list(tf_msg.msg.transforms)) == len(oracle(composite, "/tf")[0][1].transforms)
    )
    image = next(iter(bag.messages(topics=["/camera/image_raw"])))
    assert image.msg.data.dtype == np.uint8 and isinstance(image.msg.data, np.ndarray)
    import base64

    assert base64.b64decode(json.loads(json.dumps(image.msg.to_dict(plain=True)))["data"]) == bytes(image.msg.data)
    scan = next(iter(bag.messages(topics=["/scan"]))).msg
    assert np.array_equal(scan.ranges + scan.ranges, 2 * np.asarray(scan.ranges)) and isinstance(
        list(scan.ranges), list
    )
    # no serialize() or _md5sum; m.connection.md5sum the type's
    assert not hasattr(m.msg, "serialize") and not hasattr(m.msg, "_md5sum")
    assert m.connection.md5sum == "6a62c6daae103f4ff57a132d6f95cec2"
    # the class API and read-only messages
    assert (
        m.msg._fields[0] == "header" and m.msg._type == "sensor_msgs/Imu" and m.msg.__msgtype__ == "sensor_msgs/msg/Imu"
    )
    assert list(m.msg._asdict()) == list(m.msg.__slots__) == list(m.msg._fields) and len(m.msg._slot_types) == 7
    assert fix_msg.msg.status._constants["STATUS_FIX"] == 0
    with pytest.raises(AttributeError):
        m.msg.header = None
    bag.close()


def test_time_values_behave_as_genpy(composite):
    """README (More on messages): Time/Duration arithmetic, ordering, hashing, printing, normalization, mixing with
    genpy and rospy values, to_ns; ROS 2 stamps compare, sort and subtract alike and equal Time."""
    genpy = need_module("genpy")
    rospy = need_module("rospy")
    with fastbag.open(composite["path"]) as bag:
        msgs = list(bag.messages(topics=["/imu"]))
        stamps = bag.read("/imu").header.stamp
    t0, t = msgs[0].msg.header.stamp, msgs[5].msg.header.stamp
    d = t - t0
    assert isinstance(d, Duration) and d.to_nsec() == t.to_nsec() - t0.to_nsec()
    assert isinstance(t + d, Time) and isinstance(t - d, Time) and (t - d) == t0
    for value in (d + d, d - d, d * 2, d / 2):
        assert isinstance(value, Duration)
    assert (d * 2).to_nsec() == 2 * d.to_nsec() and abs((d / 2).to_nsec() - d.to_nsec() / 2) <= 1
    for value in (t, d):
        assert value.to_sec() == pytest.approx(value.to_nsec() / 1e9) and value.is_zero() is False
        assert value.to_time() == value.to_sec()
    assert sorted([t, t0]) == [t0, t] and hash(t) == hash(Time(t.secs, t.nsecs)) and str(t) == str(t.to_nsec())
    with pytest.raises(TypeError):
        float(t)
    for args in ((1, 1_500_000_000), (2, -1_500_000_000), (1.5, 0)):
        assert (Time(*args).secs, Time(*args).nsecs) == (genpy.Time(*args).secs, genpy.Time(*args).nsecs)
    assert (Duration(0, -1).secs, Duration(0, -1).nsecs) == (-1, 999_999_999)
    g = genpy.Time(t.secs, t.nsecs)
    assert (t - rospy.Time(t0.secs, t0.nsecs)) == d and (t < g + genpy.Duration(1)) is True
    assert max(t, g) == t and (t == g) is True and (g == t) is False
    assert fastbag.to_ns(t) == t.to_nsec() and fastbag.to_ns(stamps).dtype == np.int64
    # ROS 2 builtin_interfaces/Time: compare, sort, subtract by (sec, nanosec), equal the Time of the same value
    with fastbag.open(need(ROS2_MCAP)) as bag:
        s0, s1 = (m.msg.header.stamp for m in bag.messages(topics=[ROS2_IMU]))
    same = Time(s0.sec, s0.nanosec)
    assert s0 < s1 and sorted([s1, same, s0]) == [same, s0, s1] and (s1 - s0).to_nsec() == s1.to_nsec() - s0.to_nsec()
    assert s0 == same and same == s0 and hash(s0) == hash(same)
    assert (s1 - genpy.Time(s0.sec, s0.nanosec)).to_nsec() == s1.to_nsec() - s0.to_nsec()


def test_ros2_stamp_equals_genpy_time():
    genpy = need_module("genpy")
    with fastbag.open(need(ROS2_MCAP)) as bag:
        stamp = next(iter(bag.messages(topics=[ROS2_IMU]))).msg.header.stamp
    g = genpy.Time(stamp.sec, stamp.nanosec)
    assert not (stamp < g) and not (stamp > g)  # ordered as equal ...
    assert stamp == g and not (stamp != g)  # ... and equal (it was not)


def test_type_names_and_constants_only_arrays(tmp_path):
    """README (More on messages): a fixed array of a constants-only type gives objects with the constants; _type is
    pkg/Type in every format, __msgtype__ pkg/msg/Type; topics[t].msgtype is the recording's own."""
    definition = "Level[2] levels\nint32 v\n" + SEP + "MSG: qa_pkg/Level\nuint8 LOW=0\nuint8 HIGH=9\n"
    path = custom_bag(tmp_path / "levels.bag", "qa_pkg/Levels", definition, [struct.pack("<i", 4)], "/levels")
    with fastbag.open(path) as bag:
        msg = next(iter(bag.messages())).msg
    assert len(msg.levels) == 2 and msg.levels[1].HIGH == 9 and msg.v == 4
    with fastbag.open(need(ROS2_MCAP)) as bag:
        m = next(iter(bag.messages(topics=[ROS2_IMU])))
        arr = bag.read(ROS2_IMU)
        assert bag.topics[ROS2_IMU].msgtype == m.connection.msgtype == "sensor_msgs/msg/Imu"
    assert m.msg._type == arr.msgtype == "sensor_msgs/Imu" and m.msg.__msgtype__ == "sensor_msgs/msg/Imu"


# =========================================================================================================
# ### Code written for rosbag or rosbags
# =========================================================================================================


def _classic() -> Any:
    try:
        return classic_rosbag()
    except ImportError:
        pytest.skip("the classic rosbag module is the oracle: pip install py3rosmsgs pycryptodomex rospkg")


def test_rosbag_block_gives_what_rosbag_gives():
    """README (rosbag/rosbags): run twice on a real bag: as written, and with the ``was:`` line (rosbag.Bag); each line
    gives the same (bag.version, which differs, is not in it: see test_rosbag_version_spelling)."""
    rosbag = _classic()
    rospy = need_module("rospy")
    blk = block("Code written for rosbag", 0, 'with fastbag.open("run.bag", "r") as bag:')
    path = need(IMU_SMALL)
    subs = [('"run.bag"', repr(path)), ('"/imu"', '"/sensor/Imu"')]
    ours = Run(blk, subs, {"rospy": rospy})
    theirs = Run(blk, subs + [("fastbag.open(", "rosbag.Bag(")], {"rospy": rospy, "rosbag": rosbag})
    printed = ours.at("print(t.to_sec()")
    assert printed and printed == theirs.at("print(t.to_sec()")
    assert ours.one("bag.get_message_count") == theirs.one("bag.get_message_count")
    (types, topics), (their_types, their_topics) = ours.one("types, topics ="), theirs.one("types, topics =")
    assert types == their_types and topics.keys() == their_topics.keys()
    for name, info in topics.items():
        assert (info.msg_type, info.message_count, info.connections) == tuple(their_topics[name])[:3]
        assert info.frequency == pytest.approx(their_topics[name].frequency, rel=1e-5)
    compression, filename, mode, size = ours.one("bag.get_compression_info()")
    their_compression, *their_rest = theirs.one("bag.get_compression_info()")
    assert tuple(compression) == tuple(their_compression) and [filename, mode, size] == their_rest


def test_rosbag_version_spelling():
    """README (rosbag/rosbags): bag.version is the format's string, where rosbag's is an int (said as a difference)."""
    rosbag = _classic()
    path = need(IMU_SMALL)
    with fastbag.open(path) as bag:
        assert (bag.version, classic_call(rosbag, path, lambda b: b.version)) == ("2.0", 200)
    text = README.read_text()
    assert "`bag.version` is the format's version as a string" in text and "bag.version\n" not in text

def test_read_messages_as_documented():
    """README (rosbag/rosbags): time order where chunks are not; first/last message times; end_time included;
    connection_filter; return_connection_header as rosbag's; no raw tuples; missing topics."""
    rosbag = _classic()
    rospy = need_module("rospy")
    unsorted = need(UNSORTED_BAG)
    with fastbag.open(unsorted) as bag:
        ours = [t.to_nsec() for _, _, t in bag.read_messages()]
        assert (bag.get_start_time(), bag.get_end_time()) == (min(ours) / 1e9, max(ours) / 1e9)
        header = next(iter(bag.read_messages(return_connection_header=True)))[3]
        assert bag.connections[0].header == header
        with pytest.raises(TypeError):
            list(bag.read_messages(raw=True))
    theirs = classic_call(rosbag, unsorted, lambda b: [t.to_nsec() for _, _, t in b.read_messages()])
    assert ours == sorted(theirs) and theirs != sorted(theirs)  # rosbag yields them out of order
    first = classic_call(rosbag, unsorted, lambda b: next(iter(b.read_messages(return_connection_header=True))))
    assert header == first[3]
    path = need(IMU_SMALL)
    with fastbag.open(path) as bag:
        end, count = bag.end_time, bag.message_count
        assert len(list(bag.read_messages(end_time=rospy.Time(nsecs=end)))) == count
        chosen = list(
            bag.read_messages(
                connection_filter=lambda topic, datatype, md5sum, msg_def, header: topic == "/orientation"
            )
        )
        assert {c[0] for c in chosen} == {"/orientation"} and len(chosen) == bag.get_message_count("/orientation")
        assert len(list(bag.read_messages(topics=["/nope", "/sensor/Imu"]))) == bag.get_message_count("/sensor/Imu")
        for call in (lambda: bag.messages(topics=["/nope"]), lambda: bag.read("/nope")):
            with pytest.raises(fastbag.NotFoundError, match="/orientation, /sensor/Imu") as info:
                call()
            assert isinstance(info.value, fastbag.FastbagError) and isinstance(info.value, KeyError)
        with pytest.raises(KeyError):
            bag.read("/sensor/Imu")["nope"]
    assert classic_call(rosbag, path, lambda b: len(list(b.read_messages(end_time=rospy.Time(nsecs=end))))) == count
    # every format: MCAP and rosbag2
    for relative in (ROS2_MCAP, "db3/geocamxyz__rosbags-rs__tests__test_bags__test_bag_sqlite3"):
        with fastbag.open(need(relative)) as bag:
            (topic, msg, stamp, header), *_ = bag.read_messages(topics=[ROS2_IMU], return_connection_header=True)
            assert topic == ROS2_IMU and msg.linear_acceleration.x == bag.read(ROS2_IMU).linear_acceleration.x[0]
            assert header["type"] == b"sensor_msgs/msg/Imu" and stamp.to_nsec() == bag.read(ROS2_IMU).time[0]
            assert bag.get_type_and_topic_info()[1][ROS2_IMU].message_count == 2


def test_connection_header_in_every_format():
    """README (rosbag/rosbags): the header is the connection record's as stored, and connection.header holds it too; ROS
    2 recordings have no such record: read_messages gives the fields fastbag knows, connection.header is empty."""
    with fastbag.open(need(IMU_SMALL)) as bag:
        header = next(iter(bag.read_messages(topics=["/sensor/Imu"], return_connection_header=True)))[3]
        assert bag.topics["/sensor/Imu"].connections[0].header == header and header["callerid"] == b"/imu"
    for relative in (ROS2_MCAP, "db3/geocamxyz__rosbags-rs__tests__test_bags__test_bag_sqlite3"):
        with fastbag.open(need(relative)) as bag:
            header = next(iter(bag.read_messages(topics=[ROS2_IMU], return_connection_header=True)))[3]
            assert sorted(header) == ["latching", "md5sum", "message_definition", "topic", "type"]
            assert bag.topics[ROS2_IMU].connections[0].header == {}


def test_digest_is_the_type_hash_in_ros2_recordings():
    """README (rosbag/rosbags, rosbag2): digest is the md5sum, or in ROS 2 recordings that store one the type hash."""
    with quiet(), fastbag.open(need("db3/ANYbotics__grid_map__grid_map_ros__resource__double_chatter")) as bag:
        connection = bag.topics["/chatter1"].connections[0]
        assert connection.digest == connection.type_description_hash != connection.md5sum
        assert connection.digest.startswith("RIHS01_")



def test_rosbags_loop_block():
    """README (rosbag/rosbags): on evo's ROS_example.bag, beside the same loop with rosbags' AnyReader."""
    highlevel = need_module("rosbags.highlevel", "rosbags is the oracle")
    blk = block("Code written for rosbag", 1, "with fastbag.open(path) as reader:")
    path = need(EVO_BAG)
    subs = [('"/imu"', '"S-PTAM"')]
    ours = Run(blk, subs, {"path": path})
    theirs = Run(
        blk,
        subs + [("fastbag.open(path)", "AnyReader([Path(path)])")],
        {"path": path, "AnyReader": highlevel.AnyReader, "Path": Path},
    )
    ours_msgs, their_msgs = ours.at("msg = reader.deserialize"), theirs.at("msg = reader.deserialize")
    assert len(ours_msgs) == 5439
    assert_same(ours_msgs, their_msgs)
    (connection,) = ours.one("connections = [x for x")
    (their_connection,) = theirs.one("connections = [x for x")
    assert (connection.msgcount, connection.digest, connection.msgtype) == (
        their_connection.msgcount,
        their_connection.digest,
        "geometry_msgs/PoseStamped",
    )
    with fastbag.open(path) as reader:
        assert reader.topics["S-PTAM"].msgcount == 5439 and "Pose pose" in connection.definition
        stop = int(reader.times("S-PTAM")[100])
        assert len(list(reader.messages(connections=[connection], stop=stop))) == 100
        # "rosbags' reader.end_time is one nanosecond past the last message, fastbag's the last message's time"
        whole = [c for c in reader.connections]
        assert len(list(reader.messages(connections=whole, stop=reader.end_time))) == reader.message_count - 1
        assert len(list(reader.messages(connections=whole, stop=reader.end_time + 1))) == reader.message_count
        ours_end = reader.end_time
        decoded = list(reader.messages(topics=["S-PTAM"]))
        pairs = list(reader.messages(connections=[connection]))
        for k in (0, 77):
            _, _, rawdata = pairs[k]
            assert reader.deserialize(rawdata, connection.msgtype) == decoded[k].msg
            assert reader.deserialize(bytes(rawdata), connection.msgtype) == decoded[k].msg  # other bytes
    with highlevel.AnyReader([Path(path)]) as their_reader:
        assert their_reader.end_time == ours_end + 1


# =========================================================================================================
# ### Writing bags
# =========================================================================================================


def test_writing_block_and_claims(tmp_path, synthetic):
    """README (Writing bags): the block with a real Imu connection and message; rosbags and rosbag read it; crop by
    messages(raw=True); an open bag's path refused; Time or int times, a float refused; index entries in time order; an
    unclosed Writer closed when collected, with a warning."""
    rosbag1 = need_module("rosbags.rosbag1", "rosbags reads what the writer writes")
    blk = block("Writing bags", 0, 'with fastbag.Writer("out.bag"')
    connection, time_ns, serialized_bytes = imu_rows(synthetic)[0]
    definition, md5sum = connection.definition, connection.md5sum
    out = tmp_path / "out.bag"
    Run(
        blk,
        [('"out.bag"', repr(str(out)))],
        {"definition": definition, "md5sum": md5sum, "time_ns": time_ns, "serialized_bytes": serialized_bytes},
    )
    reader = rosbag1.Reader(out)
    reader.open()
    try:
        assert [(c.topic, t, d) for c, t, d in reader.messages()] == [("/imu", time_ns, serialized_bytes)]
        assert reader.connections[0].msgtype == "sensor_msgs/msg/Imu" and reader.connections[0].digest == md5sum
    finally:
        reader.close()
    with fastbag.open(out) as bag:
        assert bag.compression == {"lz4": 1}
    # crop: messages(raw=True) into a new path; the classic module reads it (uncompressed)
    src = fastbag.open(synthetic["mixed"])
    t0 = src.start_time + 10**8
    t1 = t0 + 2 * 10**8
    crop = tmp_path / "crop.bag"
    with fastbag.Writer(crop) as writer:
        made = {}
        for m in src.messages(topics=["/imu", "/odom"], start=t0, end=t1, raw=True):
            c = m.connection
            if c.id not in made:
                made[c.id] = writer.add_connection(c.topic, c.msgtype, c.definition, c.md5sum)
            writer.write(made[c.id], m.time if m.topic == "/imu" else Time(nsecs=m.time), m.data)
        with pytest.raises(TypeError):
            writer.write(made[c.id], float(t0), m.data)
    expect = src.read("/imu", start=t0, end=t1)
    with pytest.raises(ValueError, match="open for reading"):
        fastbag.Writer(synthetic["mixed"])
    src.close()
    rosbag = _classic()
    classic = classic_call(rosbag, str(crop), lambda b: [
        (t.to_nsec(), msg.linear_acceleration.x) for _, msg, t in b.read_messages(topics=["/imu"])])
    assert classic == list(zip(expect.time.tolist(), expect.linear_acceleration.x.tolist()))
    # each chunk's index entries in time order, whatever order they were written in
    shuffled = tmp_path / "shuffled.bag"
    order = [3, 0, 4, 1, 2]
    with fastbag.Writer(shuffled) as writer:
        c = writer.add_connection("/imu", "sensor_msgs/Imu", definition, md5sum)
        for k in order:
            writer.write(c, 10**18 + k * 10**6, serialized_bytes)
    buf = shuffled.read_bytes()
    index_times = []
    pos = 13 + 4 + struct.unpack_from("<I", buf, 13)[0]
    pos += 4 + struct.unpack_from("<I", buf, pos)[0]
    while pos < len(buf):
        hlen = struct.unpack_from("<I", buf, pos)[0]
        header = buf[pos + 4 : pos + 4 + hlen]
        dlen = struct.unpack_from("<I", buf, pos + 4 + hlen)[0]
        data = buf[pos + 8 + hlen : pos + 8 + hlen + dlen]
        if b"op=\x04" in header:
            index_times += [s * 10**9 + ns for s, ns, _ in struct.iter_unpack("<III", data)]
        pos += 8 + hlen + dlen
    assert index_times == sorted(index_times) and len(index_times) == 5
    # garbage-collected unclosed: closed, with a warning

    def unclosed():
        w = fastbag.Writer(tmp_path / "gc.bag")
        w.write(w.add_connection("/imu", "sensor_msgs/Imu", definition, md5sum), time_ns, serialized_bytes)

    def collected() -> None:
        unclosed()
        gc.collect()

    with pytest.warns(fastbag.FastbagWarning, match="never closed"):
        collected()
    with fastbag.open(tmp_path / "gc.bag") as bag:
        assert bag.message_count == 1


# =========================================================================================================
# ### Encrypted bags
# =========================================================================================================


def test_encrypted_block(tmp_path, gnupg, synthetic):
    """README (Encrypted bags): as written (USER a throwaway GPG key; site.bag written by fastbag's Writer for that user
    with the README's AES key); a wrong key, damaged ciphertext, fastbag info without the key."""
    blk = block("Encrypted bags", 0, 'with fastbag.open("site.bag") as bag:')
    key = bytes.fromhex("00112233445566778899aabbccddeeff")
    assert key.hex() in blk.code
    rows = imu_rows(synthetic)
    site = tmp_path / "site.bag"
    with fastbag.Writer(site, compression="lz4", encrypt_for="QA User", aes_key=key) as writer:
        c = rows[0][0]
        connection = writer.add_connection(c.topic, c.msgtype, c.definition, c.md5sum)
        for _, t, data in rows:
            writer.write(connection, t, data)
    out = tmp_path / "out.bag"
    run = Run(blk, [('"site.bag"', repr(str(site))), ('"USER"', '"QA User"'), ('"out.bag"', repr(str(out)))])
    comment = blk.code.splitlines()[blk.text_line("bag.encryption") - blk.line].split("#", 1)[1].strip()
    assert repr(run.one("bag.encryption")) == comment.replace("'USER'", "'QA User'")
    for snippet in ('passphrase="..."', "aes_key=bytes.fromhex"):
        with run.one(snippet) as bag:
            assert [bytes(m.data) for m in bag.messages(raw=True)] == [d for _, _, d in rows]
    with fastbag.open(out) as bag:  # the README's own Writer line: an encrypted, empty bag
        assert bag.encryption.recipient == "QA User" and bag.message_count == 0
    with pytest.raises(fastbag.EncryptionKeyError):
        fastbag.open(site, aes_key=bytes(16))
    damaged = bytearray(site.read_bytes())
    pos = 13 + 4096  # the first record after the bag header: the first chunk
    hlen = struct.unpack_from("<I", damaged, pos)[0]
    dlen = struct.unpack_from("<I", damaged, pos + 4 + hlen)[0]
    damaged[pos + 8 + hlen + dlen - 1] ^= 0xFF  # the chunk's last ciphertext byte: the padding breaks
    (tmp_path / "damaged.bag").write_bytes(damaged)
    with pytest.raises(fastbag.DecryptionError), fastbag.open(tmp_path / "damaged.bag", aes_key=key) as bag:
        list(bag.messages(raw=True))
    # fastbag info says it is encrypted and for whom, also without the key
    from fastbag.cli import main

    os.environ["GNUPGHOME"] = str(tmp_path)  # a keyring without the key
    try:
        with contextlib.redirect_stdout(io.StringIO()) as text, contextlib.redirect_stderr(io.StringIO()):
            assert main(["info", str(site)]) == 1
        assert "rosbag/AesCbcEncryptor" in text.getvalue() and "QA User" in text.getvalue()
        with contextlib.redirect_stdout(io.StringIO()) as text:
            assert main(["info", "--aes-key", key.hex(), str(site)]) == 0
        assert f"messages:     {len(rows)}" in text.getvalue()
    finally:
        os.environ["GNUPGHOME"] = str(gnupg)


# =========================================================================================================
# ### Looking at a bag
# =========================================================================================================


@pytest.mark.parametrize("source", ["generated", "real"])
def test_looking_block(source, synthetic, request):
    need_module("matplotlib", "plotting needs matplotlib: pip install 'fastbag[plot]'")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blk = block("Looking at a bag", 0, 'imu = bag.read("/imu")')
    path = request.getfixturevalue("composite")["path"] if source == "real" else synthetic["mixed"]
    bag = fastbag.open(path)
    try:
        run = Run(blk, namespace={"bag": bag})
        imu = run.one('imu = bag.read("/imu")')
        ax = run.one("ax = imu.plot(")
        lines = ax.get_lines()
        assert [line.get_label() for line in lines] == ["linear_acceleration.x", "linear_acceleration.y"]
        np.testing.assert_array_equal(lines[0].get_ydata(), imu.linear_acceleration.x)
        np.testing.assert_allclose(np.diff(lines[0].get_xdata()), np.diff(imu.time) / 1e9, atol=1e-6)
        assert "receive time [s]" in ax.get_xlabel()
        stamped = run.one('stamp="header"').get_lines()[0]
        stamps = fastbag.to_ns(imu.header.stamp)
        np.testing.assert_allclose(np.diff(stamped.get_xdata()), np.diff(stamps) / 1e9, atol=1e-6)
        np.testing.assert_array_equal(stamped.get_ydata(), imu.angular_velocity.z)
        scan = bag.read("/scan")
        element, length = run.one('plot("ranges[540]", "ranges")').get_lines()
        np.testing.assert_array_equal(element.get_ydata(), np.asarray(scan["ranges"])[:, 540])
        assert set(length.get_ydata()) == {np.asarray(scan["ranges"]).shape[1]}
        tf_line = run.one('"transforms[0].transform.translation.x"').get_lines()[0]
        tf = bag.read("/tf")
        np.testing.assert_array_equal(tf_line.get_ydata(), [x[0] for x in tf.transforms.transform.translation.x])
        assert run.one("bag.plot_timeline()") is not None
        times = run.one('bag.times("/imu")')
        assert times.dtype == np.int64 and np.array_equal(times, imu.time)
        by_topic = run.one("bag.times_by_topic()")
        assert by_topic.keys() == bag.topics.keys()
        assert all(np.array_equal(v, bag.read(k).time) for k, v in by_topic.items())
        if source == "real":
            theirs = oracle(request.getfixturevalue("composite"), "/tf")
            assert tf_line.get_ydata().tolist() == [m.transforms[0].transform.translation.x for _, m, _ in theirs]
    finally:
        bag.close()
        plt.close("all")


def test_plot_nan_where_absent_timeline_of_undecodable_and_html(tmp_path):
    """README (Looking at a bag): field[k] is NaN where a message has fewer elements; the timeline reads the index only
    (an undecodable topic too); HTML views never raise (a chunk that cannot be read shows its error)."""
    need_module("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fastbag.tooling import synth

    rng = np.random.default_rng(0)
    payloads = [next(iter(synth.laserscan(np.array([10**18]), rng, beams=600 if k % 2 else 1080))) for k in range(6)]
    path = custom_bag(tmp_path / "scans.bag", synth.LASERSCAN.name, synth.LASERSCAN.definition, payloads, "/scan")
    with fastbag.open(path) as bag:
        ranges = bag.read("/scan")["ranges"]
        element, length = bag.read("/scan").plot("ranges[800]", "ranges").get_lines()
    y = element.get_ydata()
    assert np.isnan(y[1::2]).all() and np.array_equal(y[0::2], [ranges[k][800] for k in (0, 2, 4)])
    assert length.get_ydata().tolist() == [1080, 600] * 3
    with quiet(), fastbag.open(need(EMPTY_DEF_BAG)) as bag:
        ax = bag.plot_timeline()
        assert any("/led_array_status" in t.get_text() for t in ax.get_yticklabels() + ax.texts)
    plt.close("all")
    synth.write_bag(
        tmp_path / "small.bag", (synth.Stream("/imu", synth.IMU, 200, synth.imu),), seconds=0.2, compression="lz4"
    )
    damaged = bytearray((tmp_path / "small.bag").read_bytes())
    for i in range(13 + 4096 + 60, 13 + 4096 + 100):
        damaged[i] ^= 0xFF
    (tmp_path / "damaged.bag").write_bytes(damaged)
    with quiet(), fastbag.open(tmp_path / "damaged.bag") as bag:
        html = bag._repr_html_()
        with pytest.raises(fastbag.BagFormatError):
            bag.read("/imu")
    assert "cannot be read" in html and "lz4" in html


# =========================================================================================================
# ### Tables, export and training
# =========================================================================================================


def test_tables_block(tmp_path, synthetic):
    """README (Tables): as written: "run.bag", "run1.bag", "run2.bag" and "fleet/*.bag" are generated (8 s of every
    topic; received 7 ms after their header stamps); "humble/*/" holds real rosbag2 sqlite3 recordings of a type only
    definitions= describes."""
    for module in ("pandas", "pyarrow", "polars", "awkward", "torch", "dask"):
        need_module(module)
    import pandas as pd
    import torch

    blk = block("Tables, export and training", 0, 'arr = bag.read("/odom")')
    humble = tmp_path / "humble"
    humble.mkdir()
    ws = tmp_path / "my_ws" / "src" / "test_msgs" / "msg"
    ws.mkdir(parents=True)
    run1, run2 = synthetic["run1"], synthetic["run2"]
    real = (DATA / CONVERT_A_MCAP).is_dir()
    if real:  # real rosbag2 recordings of test_msgs/BasicTypes, which only my_ws/src defines
        with fastbag.open(need(CONVERT_A_MCAP)) as twin:
            (ws / "BasicTypes.msg").write_text(twin.topics["b_basictypes"].connections[0].definition)
            expect_basic = twin.read("b_basictypes").int64_value.tolist() * 2
        for relative in (CONVERT_A_DB3, "db3/ros2__rosbag2__rosbag2_transport__test__resources__sqlite3__rewriter_a"):
            (humble / Path(relative).name).symlink_to(need(relative), target_is_directory=True)
        humble_topic, humble_field = "b_basictypes", "int64_value"
    else:  # without ../shared/data: rosbag2 sqlite3 copies of the generated runs, written by rosbags
        need_module("rosbags.rosbag2")
        from fastbag.tooling.synth_mcap import write_rosbag2_sqlite

        expect_basic = []
        for k, run_bag in enumerate((run1, run2)):
            write_rosbag2_sqlite(run_bag, humble / f"run{k}")
            with fastbag.open(run_bag) as b:
                expect_basic += b.read("/odom").pose.pose.position.x.tolist()
        humble_topic, humble_field = "/odom", "pose.pose.position.x"
    bag = fastbag.open(run1)
    subs = [
        ('"/velodyne_points"', '"/points"'),
        ('"run1.bag"', repr(str(run1))),
        ('"run2.bag"', repr(str(run2))),
        ('"run.bag"', repr(str(run1))),
        ('"out/"', repr(str(tmp_path / "out") + "/")),
        ('"fleet/*.bag"', repr(str(synthetic["fleet"]) + "/*.bag")),
        ('"my_ws/src"', repr(str(tmp_path / "my_ws" / "src"))),
    ]
    line_subs = {'"humble/*/"': [('"humble/*/"', repr(str(humble) + "/*/")), ('"/odom"', repr(humble_topic))]}
    run = Run(blk, subs, {"bag": bag, "torch": torch}, line_subs)
    arr = run.one('arr = bag.read("/odom")')
    odom_msgs = list(bag.messages(topics=["/odom"]))
    # to_pandas: flat columns, pose.covariance (36 > 16) as a list column, indexed by receive time
    df = run.one("df = arr.to_pandas()")
    assert "pose.pose.position.x" in df.columns and "pose.covariance" in df.columns
    assert df.index.name == "time" and df.index.dtype == "datetime64[ns]"
    assert np.array_equal(df.index.asi8, arr.time)
    assert df["pose.pose.position.x"].tolist() == [m.msg.pose.pose.position.x for m in odom_msgs]
    assert isinstance(df["pose.covariance"].dtype, pd.ArrowDtype)
    assert np.array_equal(np.asarray(df["pose.covariance"].iloc[3]), odom_msgs[3].msg.pose.covariance)
    tbl = run.one("tbl = arr.to_arrow()")
    import pyarrow as pa

    assert pa.types.is_struct(tbl.schema.field("pose").type)
    assert pa.types.is_fixed_size_list(tbl.schema.field("pose").type.field("covariance").type)
    assert {b"ros.topic", b"ros.msgtype", b"ros.md5sum", b"ros.definition"} <= set(tbl.schema.metadata)
    pl_df, ak_arr = run.at("pl_df = arr.to_polars(); ak_arr = arr.to_awkward()")
    assert pl_df.height == len(arr) and ak_arr.pose.pose.position.x.tolist() == arr.pose.pose.position.x.tolist()
    # iter_read in bytes: parts in time order that join into read()
    last = run.namespace["part"]  # the loop's last part: time order, ends with the topic
    assert last.time[-1] == bag.read("/points").time[-1]
    joined = list(bag.iter_read("/points", step="256 MB"))
    assert np.array_equal(np.concatenate([p.time for p in joined]), bag.read("/points").time)
    taken = run.one('bag.take("/imu", [10, 11, 500])')
    imu = bag.read("/imu")
    assert np.array_equal(taken.time, imu.time[[10, 11, 500]]) and taken[2] == imu[500]
    assert np.array_equal(run.one('bag.topic_times("/imu")'), imu.time)
    result = run.one("fastbag.export(")
    assert sorted(result.files) == ["/imu", "/odom"] and not result.skipped
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "out" / "imu.parquet")
    assert (
        table.column("linear_acceleration").combine_chunks().field("x").to_numpy().tolist()
        == imu.linear_acceleration.x.tolist()
    )
    # SyncedDataset: by header stamps, nearest within 0.05 s, the 0.1 s of imu up to the anchor
    ds = run.one("ds = fastbag.SyncedDataset")
    sample = run.one("sample = ds[123]")
    assert set(sample) == {"time", "times", "cloud", "image", "imu"}
    bag_path = ds.sample_bag(123)
    with fastbag.open(bag_path) as b:
        clouds = b.read("/points")
        stamps = fastbag.to_ns(clouds.header.stamp)
        k = int(np.flatnonzero(stamps == sample["time"])[0])  # the anchor's time is its header stamp
        assert clouds.time[k] == stamps[k] + 7_000_000
        points = next(p for i, p in enumerate(fastbag.pointcloud(clouds)) if i == k)
        assert np.array_equal(sample["cloud"], points)
        images = b.read("/camera/image_raw")
        image_stamps = fastbag.to_ns(images.header.stamp)
        j = int(np.argmin(np.abs(image_stamps - sample["time"])))
        assert sample["times"]["image"] == image_stamps[j] and abs(image_stamps[j] - sample["time"]) <= 5 * 10**7
        assert np.array_equal(sample["image"], fastbag.image(images)[j]) and sample["image"].shape == (24, 32, 3)
        imu_b = b.read("/imu")
        imu_stamps = fastbag.to_ns(imu_b.header.stamp)
        window = (imu_stamps > sample["time"] - 10**8) & (imu_stamps <= sample["time"])
        assert np.array_equal(sample["imu"]["linear_acceleration"]["x"], imu_b.linear_acceleration.x[window])
    loader = run.one("loader = torch.utils.data.DataLoader")
    batch = next(iter(loader))
    assert isinstance(batch["image"], torch.Tensor) and tuple(batch["image"].shape) == (8, 24, 32, 3)
    assert isinstance(batch["cloud"], dict) and isinstance(batch["cloud"]["x"], torch.Tensor)
    # windows: one structured array, or a list of the samples' arrays where their counts differ
    windows = [ds[i]["imu"] for i in range(8)]
    if len({w.size for w in windows}) > 1:
        assert isinstance(batch["imu"], list) and [b.size for b in batch["imu"]] == [w.size for w in windows]
    else:
        assert isinstance(batch["imu"], np.ndarray) and batch["imu"].shape == (8, windows[0].size)
    del loader
    # Dask: partitions of the fleet, equal to the bags' tables
    ddf = run.one("ddf = fastbag.dask.read_topic")
    frames = [fastbag.open(p).read("/imu").to_pandas() for p in (run1, run2)]
    assert ddf.compute()["linear_acceleration.x"].tolist() == pd.concat(frames)["linear_acceleration.x"].tolist()
    assert ddf.known_divisions
    acc = run.one("acc = fastbag.dask.read_array")
    assert acc.compute()["x"].tolist() == pd.concat(frames)["linear_acceleration.x"].tolist()
    basic = run.one('fastbag.dask.read_topic("humble/*/"').compute()
    assert basic[humble_field].tolist() == expect_basic
    bag.close()


def test_ragged_offsets_shared_with_arrow(synthetic):
    need_module("pyarrow")
    with fastbag.open(synthetic["mixed"]) as bag:
        clouds = bag.read("/points")
    ragged = clouds["data"]
    column = clouds.to_arrow().column("data").chunk(0)
    _, offsets, _, values = column.buffers()
    assert values.address == ragged.values.__array_interface__["data"][0]  # shared
    assert offsets.address == ragged.offsets.__array_interface__["data"][0]  # copied


def test_tables_claims(tmp_path, synthetic):
    """README (Tables): large_list always, fixed_size_list, lists of structs; fixed arrays of at most 16 numbers as
    name[i]; a field of a type with no fields: an empty struct in Arrow, no column elsewhere."""
    need_module("pandas")
    pa = need_module("pyarrow")
    with fastbag.open(synthetic["mixed"]) as bag:
        scan, tf, imu = bag.read("/scan"), bag.read("/tf"), bag.read("/imu")
    assert type(scan["ranges"]) is np.ndarray  # every message has 1080: dense, still a large_list
    assert pa.types.is_large_list(scan.to_arrow().schema.field("ranges").type)
    tf_type = tf.to_arrow().schema.field("transforms").type
    assert pa.types.is_large_list(tf_type) and pa.types.is_struct(tf_type.value_type)
    columns = list(imu.to_pandas().columns)
    assert [f"orientation_covariance[{k}]" for k in range(9)] == [c for c in columns if c.startswith("orientation_cov")]
    wide = custom_bag(
        tmp_path / "wide.bag",
        "qa_pkg/W",
        "float64[16] a\nfloat64[17] b\n",
        [np.arange(33, dtype=np.float64).tobytes()] * 3,
        "/w",
    )
    with fastbag.open(wide) as bag:
        df = bag.read("/w").to_pandas()
    assert list(df.columns) == [f"a[{k}]" for k in range(16)] + ["b"]
    definition = "std_msgs/Empty e\nint32 v\n" + SEP + "MSG: std_msgs/Empty\n"
    empty = custom_bag(tmp_path / "empty.bag", "qa_pkg/E", definition, [struct.pack("<i", k) for k in range(3)], "/e")
    with fastbag.open(empty) as bag:
        arr = bag.read("/e")
        assert arr.to_arrow().schema.field("e").type == pa.struct([])
        assert list(arr.to_pandas().columns) == ["v"]
    for fmt in ("csv", "npz", "parquet"):
        result = fastbag.export(empty, tmp_path / fmt, format=fmt)
        target = result.files["/e"]
        if fmt == "csv":
            import pandas as pd

            assert list(pd.read_csv(target).columns) == ["time", "v"]
        elif fmt == "npz":
            assert sorted(np.load(target).files) == ["time", "v"]
        else:
            import pyarrow.parquet as pq

            assert pq.read_table(target).schema.names == ["time", "v"]


def test_iter_read_never_cuts_a_compressed_chunk(synthetic):
    """README (Tables): bz2 chunks are whole parts even at step=1 (real), uncompressed chunks are cut to exactly step
    messages, the parts join into read(), "10000" without a unit is refused."""
    path = need(BZ2_BAG)
    with fastbag.open(path) as bag:
        read = bag.read("/imu/data_raw")
        parts = list(bag.iter_read("/imu/data_raw", step=1))
        assert len(parts) == 2 and all(len(p) > 1 for p in parts)  # its two bz2 chunks
        assert np.array_equal(np.concatenate([p.linear_acceleration.x for p in parts]), read.linear_acceleration.x)
    theirs = rosbags_messages(path, "/imu/data_raw")
    assert read.linear_acceleration.x.tolist() == [m.linear_acceleration.x for _, m, _ in theirs]
    with fastbag.open(synthetic["mixed"]) as bag:
        assert [len(p) for p in bag.iter_read("/imu", step=30)] == [30, 30, 30, 10]
        with pytest.raises(ValueError, match="no unit"):
            list(bag.iter_read("/imu", step="10000"))


def test_export_claims(tmp_path, synthetic):
    """README (Tables): file names (long ones end in ~ and 12 hex digits of the SHA-256), ValueError before anything is
    created, Parquet (binary uint8[], non-UTF-8 text as large_binary, lz4 by default), CSV (int ns time, JSON cells with
    NaN/Infinity, compressions pandas reads), NPZ (offsets + values, no pickle, deflate), undecodable topics in
    result.skipped."""
    pd = need_module("pandas")
    pq = need_module("pyarrow.parquet")
    from fastbag.tooling import synth

    rng = np.random.default_rng(0)
    long = "/" + "a" * 120 + "/" + "b" * 120
    path = tmp_path / "topics.bag"
    imu = list(synth.imu(10**18 + np.arange(4) * 10**8, rng))
    with fastbag.Writer(path) as writer:
        good = writer.add_connection(long, synth.IMU.name, synth.IMU.definition, synth.IMU.md5sum)
        bad = writer.add_connection("/bad", synth.IMU.name, synth.IMU.definition, synth.IMU.md5sum)
        for k, payload in enumerate(imu):
            writer.write(good, 10**18 + k * 10**8, payload)
            writer.write(bad, 10**18 + k * 10**8, payload[:-3])
    result = fastbag.export(path, tmp_path / "p", format="parquet")
    name = Path(result.files[long]).name
    assert name.endswith(f"~{hashlib.sha256(long.encode()).hexdigest()[:12]}.parquet") and name.startswith(
        "a" * 120 + "."
    )
    assert len(name.encode()) <= 200 + len(".parquet") and list(result.skipped) == ["/bad"]
    for bad_args in (
        {"format": "xls"},
        {"format": "parquet", "compression": "nope"},
        {"format": "csv", "step": "10000"},
    ):
        with pytest.raises(ValueError):
            fastbag.export(path, tmp_path / "never", **bad_args)
        assert not (tmp_path / "never").exists()
    # Parquet of real data: uint8[] as binary, non-UTF-8 text as large_binary whatever step, lz4
    images = fastbag.export(need(IMAGE_BAG), tmp_path / "img", format="parquet", topics=["/image"])
    table = pq.read_table(images.files["/image"])
    assert str(table.schema.field("data").type) in ("binary", "large_binary")
    assert b"data" in table.schema.metadata[b"fastbag.binary"]
    assert table.column("data").to_pylist()[0] == rosbags_messages(need(IMAGE_BAG), "/image")[0][1].data.tobytes()
    assert pq.ParquetFile(images.files["/image"]).metadata.row_group(0).column(0).compression == "LZ4"
    for step in (None, 1):
        options = {} if step is None else {"step": step}
        smach = fastbag.export(need(SMACH_BAG), tmp_path / f"sm{step}", format="parquet", **options)
        assert (
            str(pq.read_table(smach.files["/server_name/smach/container_status"]).schema.field("local_data").type)
            == "large_binary"
        )
    zstd = fastbag.export(synthetic["mixed"], tmp_path / "z", format="parquet", topics=["/imu"], compression="zstd")
    assert pq.ParquetFile(zstd.files["/imu"]).metadata.row_group(0).column(0).compression == "ZSTD"
    # CSV of a real scan with inf ranges: JSON cells as json.loads reads them; int ns time; compressions
    scans = fastbag.export(need(SCAN_INF), tmp_path / "csv", format="csv", compression="gzip")
    csv_path = scans.files["/scan"]
    assert csv_path.endswith(".csv.gz")
    frame = pd.read_csv(csv_path)
    theirs = rosbags_messages(need(SCAN_INF), "/scan", 50)
    assert frame["time"].tolist()[:50] == [t for t, _, _ in theirs]
    cells = [np.float32(json.loads(c)) for c in frame["ranges"][:50]]
    assert all(np.array_equal(c, m.ranges, equal_nan=True) for c, (_, m, _) in zip(cells, theirs))
    assert any(np.isinf(c).any() for c in cells)
    for codec, suffix in (("bz2", ".bz2"), ("xz", ".xz"), ("zstd", ".zst")):
        done = fastbag.export(synthetic["mixed"], tmp_path / codec, format="csv", topics=["/tf"], compression=codec)
        assert done.files["/tf"].endswith(".csv" + suffix) and len(pd.read_csv(done.files["/tf"])) == 50
    # NPZ: every T[] as offsets + values, even with equal counts; no pickle; deflate
    npz = fastbag.export(
        synthetic["mixed"], tmp_path / "npz", format="npz", topics=["/scan", "/odom"], compression="deflate"
    )
    with np.load(npz.files["/scan"], allow_pickle=False) as z:
        assert {"ranges.offsets", "ranges.values"} <= set(z.files)
        with fastbag.open(synthetic["mixed"]) as bag:
            assert np.array_equal(z["ranges.values"].reshape(-1, 1080), bag.read("/scan")["ranges"])
    with np.load(npz.files["/odom"], allow_pickle=False) as z:
        assert z["pose.covariance"].shape == (25, 36) and "pose.pose.position.x" in z.files


def test_synced_dataset_claims(synthetic):
    """README (Tables): argument checks, negative and NumPy indices, empty datasets' IndexError, asof, pickling, collate
    without torch."""
    topics = {"cloud": "/points", "imu": "/imu"}
    ds = fastbag.SyncedDataset(str(synthetic["run1"]), topics=topics, anchor="cloud", tolerance=0.05)
    for kwargs, error in (
        ({"tolerance": "1"}, TypeError),
        ({"tolerance": -1}, ValueError),
        ({"tolerance": float("nan")}, ValueError),
        ({"tolerance": 10**6}, ValueError),
        ({"windows": {"imu": 0}}, ValueError),
        ({"bogus": 1}, TypeError),
    ):
        args = {"topics": topics, "anchor": "cloud", "tolerance": 0.05} | kwargs
        with pytest.raises(
            error, match="SyncedDataset" if "bogus" in kwargs else ("windows" if "windows" in kwargs else "tolerance")
        ):
            fastbag.SyncedDataset(str(synthetic["run1"]), **args)
    for name in ("time", "times"):
        with pytest.raises(ValueError, match=name):
            fastbag.SyncedDataset(str(synthetic["run1"]), topics={name: "/imu", "cloud": "/points"}, anchor="cloud")
    assert ds[np.int64(-1)]["time"] == ds[len(ds) - 1]["time"]
    for index in (1.0, True):
        with pytest.raises(TypeError):
            ds[index]
    assert pickle.loads(pickle.dumps(ds))[2]["time"] == ds[2]["time"]
    asof = fastbag.SyncedDataset(str(synthetic["run1"]), topics=topics, anchor="cloud", tolerance=0.05, match="asof")
    sample = asof[5]
    assert sample["times"]["imu"] <= sample["time"]
    empty = fastbag.SyncedDataset(str(synthetic["run1"]), topics=topics, anchor="cloud", tolerance=0.0)
    assert len(empty) == 0
    with pytest.raises(IndexError, match="matches 0"):
        empty[0]
    with pytest.raises(IndexError):
        empty.sample_bag(0)
    globbed = fastbag.SyncedDataset(str(synthetic["fleet"]) + "/run*.bag", topics=topics, anchor="cloud")
    assert len(globbed) == len(
        fastbag.SyncedDataset([str(synthetic["run1"]), str(synthetic["run2"])], topics=topics, anchor="cloud")
    )
    samples = [ds[i] for i in range(3)]
    saved = sys.modules.get("torch", None)
    sys.modules["torch"] = None  # collate without torch: every structured value one structured array
    try:
        batch = fastbag.collate(samples)
    finally:
        if saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = saved
    assert isinstance(batch["cloud"], np.ndarray) and batch["cloud"].dtype.names[:3] == ("x", "y", "z")
    assert isinstance(batch["imu"], np.ndarray) and batch["imu"].shape == (3,)


def test_dask_claims(tmp_path, synthetic):
    """README (Tables): divisions unknown where bags overlap in time, differing types a ValueError naming them, a topic
    without messages an empty collection with the type's columns, dask loads on first call."""
    need_module("dask")
    import fastbag.dask as fdask
    from fastbag.tooling import synth

    twin = tmp_path / "twin.bag"
    shutil.copy(synthetic["run1"], twin)
    assert not fdask.read_topic([str(synthetic["run1"]), str(twin)], "/imu").known_divisions
    other = tmp_path / "other.bag"
    with fastbag.Writer(other) as writer:
        scan = writer.add_connection("/imu", synth.LASERSCAN.name, synth.LASERSCAN.definition, synth.LASERSCAN.md5sum)
        writer.add_connection("/quiet", synth.IMU.name, synth.IMU.definition, synth.IMU.md5sum)
        writer.write(scan, 10**18, next(iter(synth.laserscan(np.array([10**18]), np.random.default_rng(0), beams=8))))
    with pytest.raises(ValueError, match="sensor_msgs/Imu in .*run1.bag, sensor_msgs/LaserScan in .*other.bag"):
        fdask.read_topic([str(synthetic["run1"]), str(other)], "/imu")
    quiet_topic = fdask.read_topic(str(other), "/quiet")
    with fastbag.open(synthetic["run1"]) as bag:
        assert list(quiet_topic.columns) == list(bag.read("/imu").to_pandas().columns)
    assert len(quiet_topic.compute()) == 0
    with pytest.raises(fastbag.NotFoundError):
        fdask.read_topic(str(other), "/nope")
    done = subprocess.run(
        [sys.executable, "-c", "import fastbag.dask, sys; print('dask' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=True,
    )
    assert done.stdout.strip() == "False"


# =========================================================================================================
# ### Command line
# =========================================================================================================


def _commands(blk: Block) -> list[tuple[int, str]]:
    """Each ``fastbag ...`` command of a sh block (continuations joined, comments dropped), by README line."""
    out, pending, first = [], "", 0
    for k, text in enumerate(blk.code.splitlines()):
        text = text.split("   #")[0].split("  #")[0].rstrip() if not pending else text.split("  #")[0].rstrip()
        if not pending and not text.startswith("fastbag "):
            continue
        first = first if pending else blk.line + k
        pending += " " + text.rstrip("\\").strip()
        if not text.endswith("\\"):
            out.append((first, pending.strip()))
            pending = ""
    return out


def _cli(args: list[str]) -> tuple[int, str, str]:
    from fastbag.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


def test_command_line_block(tmp_path, synthetic, monkeypatch):
    """README (Command line): every command as written ("run.bag" the generated bag with every topic the commands name,
    "site.bag" an encrypted bag and HEX its key, "humble_run/" a real rosbag2 recording of a type only "my_ws/src"
    defines), through fastbag.cli.main; `fastbag bench` (the full suite, minutes) is not run; plot's window gets a file
    instead (-o)."""
    need_module("matplotlib")
    pq = need_module("pyarrow.parquet")
    import matplotlib

    matplotlib.use("Agg")
    blk = block("Command line", 0, "fastbag info run.bag", language="sh")
    key = bytes.fromhex("00112233445566778899aabbccddeeff")
    site = tmp_path / "site.bag"
    with fastbag.Writer(site, compression="lz4", aes_key=key) as writer:
        c = writer.add_connection("/x", "std_msgs/Float64", "float64 data\n", "fdb28210bfa9d7c91146260178d9a584")
        for k in range(3):
            writer.write(c, 10**18 + k * 10**8, np.float64(k + 0.5).tobytes())
    run_bag = str(synthetic["mixed"])
    monkeypatch.chdir(tmp_path)
    ran = set()
    for line, command in _commands(blk):
        args = command.split()[1:]
        if args == ["bench"]:
            continue
        args = [
            run_bag if a == "run.bag" else str(site) if a == "site.bag" else key.hex() if a == "HEX" else a
            for a in args
        ]
        if "fleet/*.bag" in args:  # (the shell's glob)
            at = args.index("fleet/*.bag")
            args[at:at + 1] = sorted(str(p) for p in synthetic["fleet"].glob("*.bag"))
        if args[0] == "bench":
            args[-1] = str(DATA / IMU_SMALL) if (DATA / IMU_SMALL).exists() else run_bag
        if args[0] == "plot" and "-o" not in args:
            args += ["-o", str(tmp_path / f"line{line}.svg")]
        if "humble_run/" in args:
            if not (DATA / CONVERT_A_DB3).is_dir():
                continue  # (a real recording of a type only my_ws/src defines: ../shared/data is absent)
            humble = need(CONVERT_A_DB3)
            with fastbag.open(need(CONVERT_A_MCAP)) as twin:
                (tmp_path / "my_ws" / "src" / "test_msgs" / "msg").mkdir(parents=True)
                text = twin.topics["b_basictypes"].connections[0].definition
                (tmp_path / "my_ws" / "src" / "test_msgs" / "msg" / "BasicTypes.msg").write_text(text)
                (tmp_path / "my_ws" / "src" / "test_msgs" / "msg" / "Empty.msg").write_text("")  # (no fields)
                expect = twin.read("b_basictypes").int64_value
            args = [humble if a == "humble_run/" else "humble_out/" if a == "out/" else a for a in args]
        code, out, err = _cli(args)
        assert code == 0, f"README line {line}: {command} -> exit {code}: {err}"
        ran.add(args[0])
        if args[:2] == ["info", "--json"]:
            report = json.loads(out)
            with fastbag.open(run_bag) as bag:
                assert report["messages"] == bag.message_count
                assert {t["topic"] for t in report["topics"]} == set(bag.topics)
        elif args[0] == "info" and "--aes-key" in args:
            assert "messages:     3" in out and "rosbag/AesCbcEncryptor" in out
        elif args[:2] == ["info", "--freq"]:
            assert re.search(r"/imu +100 msgs @ 200\.\d Hz : sensor_msgs/Imu", out)
        elif args[0] == "info":
            assert re.search(r"/imu +100 msgs +: sensor_msgs/Imu", out)
        elif args[0] == "demo":
            assert "/imu" in out and "msgs/s" in out and "linear_acceleration.x: float64" in out
        elif args[0] == "bench":
            assert "/imu" in out.lower() and "MISMATCH" not in out + err
        elif args[0] in ("plot", "timeline"):
            assert Path(args[args.index("-o") + 1]).stat().st_size > 1000
        elif args[0] == "export" and "--definitions" in args:
            table = pq.read_table(tmp_path / "humble_out" / "b_basictypes.parquet")
            assert table.column("int64_value").to_pylist() == expect.tolist()
        elif args[0] == "export" and "fleet_out/" in args:
            assert sorted(os.listdir(tmp_path / "fleet_out")) == ["run1", "run2"]
            start, end = 1_700_000_101_500_000_000, 1_700_000_204_000_000_000
            for name in ("run1", "run2"):
                with fastbag.open(synthetic[name]) as bag:
                    for topic in bag.topics:
                        file = tmp_path / "fleet_out" / name / f"{topic.strip('/').replace('/', '.')}.parquet"
                        times = pq.read_table(file)["time"].cast("int64").to_numpy()
                        assert np.array_equal(times, bag.times(topic, start, end)), (name, topic)
        elif args[0] == "export":
            assert sorted(os.listdir(tmp_path / "out")) == ["imu.parquet", "odom.parquet"]
    assert ran == {"info", "demo", "bench", "plot", "timeline", "export"}
    if not DATA.is_dir():
        pytest.skip(f"the --definitions commands need real rosbag2 recordings: {NO_DATA}")
    assert {"plot.png", "timeline.png"} <= set(os.listdir(tmp_path))
    # "info, plot, timeline and export take fastbag.open's definitions= ... and aes_key (--aes-key HEX)"
    for args in (
        ["info", "--definitions", "my_ws/src", need(CONVERT_A_DB3)],
        ["timeline", "--definitions", "my_ws/src", need(CONVERT_A_DB3), "-o", "d.png"],
        ["plot", "--definitions", "my_ws/src", need(CONVERT_A_DB3), "b_basictypes", "int64_value", "-o", "e.png"],
        ["plot", "--aes-key", key.hex(), str(site), "/x", "data", "-o", "a.png"],
        ["timeline", "--aes-key", key.hex(), str(site), "-o", "b.png"],
        ["export", "--aes-key", key.hex(), str(site), "enc_out/", "--format", "csv"],
    ):
        code, _, err = _cli(args)
        assert code == 0, (args, err)
    import pandas as pd

    assert pd.read_csv(tmp_path / "enc_out" / "x.csv")["data"].tolist() == [0.5, 1.5, 2.5]
    code, _, err = _cli(["export", run_bag, "never/", "--definitions", "no/such/folder"])
    assert code == 2 and err.startswith("fastbag: error: ") and not (tmp_path / "never").exists()
    # once through the installed script: the same report
    if FASTBAG_SCRIPT.exists():
        done = subprocess.run(
            [str(FASTBAG_SCRIPT), "info", run_bag], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0 and done.stdout == _cli(["info", run_bag])[1]


def test_pictures_commands(tmp_path):
    """README (Command line): on the real bags they name (pictures written to a temporary folder, not docs/)."""
    need_module("matplotlib")
    blk = block("Command line", 1, "fastbag timeline ../shared/data", language="sh")
    for line, command in _commands(blk):
        command = command.replace("../shared/data/", str(DATA) + "/").replace("docs/", str(tmp_path) + "/")
        for word in command.split():
            if word.startswith(str(DATA)):
                need(str(Path(word).relative_to(DATA)))
        code, _, err = _cli(command.split()[1:])
        assert code == 0, f"README line {line}: {err}"
    assert sorted(os.listdir(tmp_path)) == ["imu.png", "timeline.png"]


def test_info_is_rosbag_info():
    """README (Command line): rows and layout of `rosbag info` (and --freq), the format line added, start and end
    truncated to the hundredth (rosbag rounds), a topic of two types listing both; compression_sizes."""
    rosbag = _classic()
    for relative in (IMU_BAG, TF_BAG):
        path = need(relative)
        for freq in (False, True):
            _, ours, _ = _cli(["info", *(["--freq"] if freq else []), path])
            theirs = classic_call(rosbag, path, str, skip_index=not freq).splitlines()
            mine = [line.rstrip() for line in ours.splitlines() if not line.startswith("format:")]
            theirs = [line.rstrip() for line in theirs]
            assert len(mine) == len(theirs)
            for a, b in zip(mine, theirs):
                if a.startswith(("start:", "end:")):
                    with fastbag.open(path) as bag:
                        ns = bag.start_time if a.startswith("start:") else bag.end_time
                    assert a.endswith(f"({ns // 10**7 // 100}.{ns // 10**7 % 100:02d})")  # truncated
                    assert (
                        abs(float(a.split("(")[1][:-1]) - float(b.split("(")[1][:-1])) <= 0.01 + 1e-6
                    )  # rosbag rounds
                elif "(2 connections)" in a:
                    assert a.replace(", tf/tfMessage", "") == re.sub(r" +\(2", " (2", b)
                else:
                    assert a == b
    with fastbag.open(need(BZ2_BAG)) as bag:
        stored, raw = bag.compression_sizes["bz2"]
    info = classic_call(rosbag, need(BZ2_BAG), lambda b: b.get_compression_info())
    assert (stored, raw) == (info.compressed, info.uncompressed)


def test_command_line_errors(tmp_path, synthetic):
    """README (Command line): per-file errors then exit 1; bad arguments exit 2 before any work; a missing topic; plot's
    FIELD[k] past the end; warnings as one line; --step spellings; a closed pipe (141); SIGTERM (143) leaves no file."""
    bag = str(synthetic["mixed"])
    code, out, err = _cli(["info", bag, str(tmp_path / "missing.bag")])
    assert (
        code == 1
        and "path:        " + bag in out
        and err.strip() == f"fastbag: {tmp_path / 'missing.bag'}: No such file or directory"
    )
    for args in (
        ["info", "--aes-key", "12", bag],
        ["plot", bag, "/imu", "linear_acceleration.x", "-o", "x.xyz"],
        ["timeline", bag, "--gap-factor", "0", "-o", str(tmp_path / "t.png")],
        ["demo", "--seconds", "-1"],
        ["export", bag, str(tmp_path / "s"), "--step", "10k"],
    ):
        code, _, err = _cli(args)
        assert code == 2 and err.startswith("fastbag: error: ") and len(err.strip().splitlines()) == 1, (args, err)
    for args in (
        ["plot", bag, "/nope", "-o", str(tmp_path / "n.png")],
        ["export", bag, str(tmp_path / "n"), "--topics", "/nope"],
        ["plot", bag, "/scan", "ranges[2000]", "-o", str(tmp_path / "r.png")],
        ["plot", bag, "/imu", "orientation_covariance[9]", "-o", str(tmp_path / "c.png")],
    ):
        code, _, err = _cli(args)
        assert code == 2 and err.startswith("fastbag: "), (args, err)
    assert not (tmp_path / "n").exists() and not (tmp_path / "s").exists()
    code, _, err = _cli(["info", need(UNINDEXED_BAG)])
    assert code == 0 and err.startswith("fastbag: warning: ") and len(err.strip().splitlines()) == 1
    for step in ("10000", "10_000", "256 MB"):
        code, _, _ = _cli(
            ["export", bag, str(tmp_path / f"step{step[:3]}"), "--topics", "/imu", "--step", step, "--no-progress"]
        )
        assert code == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "fastbag", "info", "--json", *[bag] * 300],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    process.stdout.close()
    err = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=120) == 141 and err == ""
    from fastbag.tooling import synth

    long = tmp_path / "long.bag"
    # long enough that the export is still running when this (loaded) process gets to send the signal: a
    # signal sent to an export that ended in the meantime changes nothing (exit 0)
    synth.write_bag(long, (synth.Stream("/imu", synth.IMU, 2000, synth.imu),), seconds=40.0)
    out = tmp_path / "sigterm"
    process = subprocess.Popen(
        [sys.executable, "-m", "fastbag", "export", str(long), str(out), "--step", "1", "--no-progress"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (out.is_dir() and any(f.name.endswith(".partial") for f in out.iterdir())):
        assert process.poll() is None and time.monotonic() < deadline, "the export ended before it was interrupted"
        time.sleep(0.01)
    assert process.poll() is None, "the export ended before it was interrupted"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and not out.exists(), err
