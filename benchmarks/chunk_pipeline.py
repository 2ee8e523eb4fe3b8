"""Whole-topic reads of compressed MCAP chunks: this tree's fastbag against an older commit's, in one process.

    PYTHONPATH=. python benchmarks/chunk_pipeline.py [--old 3971789] [--rounds 5] [JOB ...]

The older commit is extracted (``git archive``) into a temporary folder and
imported as the package ``fastbag_old`` (fastbag's imports are relative; its
kernels compile once per run, in that folder), so
both run in the same process, their runs alternating: a shared host's drift
hits both alike. Jobs (the bench recordings, generated once by ``fastbag
bench`` in ``$FASTBAG_BENCH_DIR``): the 1 M Imu recording with zstd, lz4 and
uncompressed chunks; Livox points, PointCloud2 points and all messages raw
from the mixed zstd recording. Each job runs on an open handle and with a
fresh handle per run; printed: the best time of each side, and the old/new
ratio of each round (median, min, max), with the load average. The two
sides' Imu columns are checked equal first.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import fastbag
from fastbag.tooling.bench import bench_dir

RECORDINGS = {"imu-1m-mcap": "imu-1000000-zstd.rosbag2", "imu-1m-mcap-lz4": "imu-1000000-lz4.rosbag2",
              "imu-1m-mcap-none": "imu-1000000-none.rosbag2", "livox-mcap": "mixed-40s-zstd.rosbag2",
              "pointcloud2-mcap": "mixed-40s-zstd.rosbag2", "raw-zstd-mcap": "mixed-40s-zstd.rosbag2"}


def old_package(ref: str, folder: str) -> Any:
    """fastbag as of ``ref``, imported as ``fastbag_old``."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(root), "archive", ref, "fastbag"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    os.rename(os.path.join(folder, "fastbag"), os.path.join(folder, "fastbag_old"))
    sys.path.insert(0, folder)
    return importlib.import_module("fastbag_old")


def job(package: Any, name: str) -> Callable[[Any], Any]:
    """What the job does with an open bag of ``package``."""
    if name.startswith("imu"):
        return lambda bag: bag.read("/imu")["linear_acceleration"]["x"]
    if name == "livox-mcap":
        def livox(bag: Any) -> list[np.ndarray]:
            points = bag.read("/livox/lidar")["points"]
            return [points[i] for i in range(len(points))]
        return livox
    if name == "pointcloud2-mcap":
        pointcloud = importlib.import_module(f"{package.__name__}.msg.sensors").pointcloud
        return lambda bag: list(pointcloud(bag.read("/points")))
    return lambda bag: sum(len(m.data) for m in bag.messages(raw=True))


def compare(name: str, path: Path, packages: dict[str, Any], rounds: int) -> None:
    modes = ("fresh",) if name.startswith("raw") else ("open", "fresh")
    for mode in modes:
        bags = {side: package.open(path) for side, package in packages.items()} if mode == "open" else {}

        def run(side: str, mode: str = mode, bags: dict[str, Any] = bags) -> Any:
            work = job(packages[side], name)
            if mode == "open":
                return work(bags[side])
            with packages[side].open(path) as bag:
                return work(bag)

        for side in packages:
            run(side)  # warm: kernels loaded, pages cached
        times: dict[str, list[float]] = {side: [] for side in packages}
        for _ in range(rounds):
            for side in packages:
                started = time.perf_counter()
                result = run(side)
                times[side].append(time.perf_counter() - started)
                del result
        for bag in bags.values():
            bag.close()
        ratios = [o / n for o, n in zip(times["old"], times["new"])]
        print(f"{name:17s} {mode:5s} old {min(times['old']):.3f} s  new {min(times['new']):.3f} s  old/new median "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})  load "
              f"{os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", default="3971789", help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("jobs", nargs="*", default=list(RECORDINGS))
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="fastbag-old-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    packages = {"old": old_package(args.old, folder), "new": fastbag}
    for name in args.jobs:
        recording = bench_dir() / RECORDINGS[name]
        path = recording / f"{recording.name}.mcap"
        if not path.exists():
            print(f"{name}: {path} is absent (run `fastbag bench --jobs {name}` once)")
            continue
        if name.startswith("imu"):
            with packages["old"].open(path) as old, fastbag.open(path) as new:
                assert np.array_equal(job(packages["old"], name)(old), job(fastbag, name)(new))
        compare(name, path, packages, args.rounds)


if __name__ == "__main__":
    main()
