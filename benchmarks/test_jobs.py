"""Every job of :mod:`fastbag.tooling.bench`, fastbag and rosbags side by side, with pytest-benchmark.

    pytest benchmarks/ --benchmark-only          # FASTBAG_BENCH_SECONDS=40 for the 1.7 GB mixed bag

Bags are generated once (deterministic seed) into ``$FASTBAG_BENCH_DIR``
(default ``~/.cache/fastbag/bench``). For each job rosbags runs first and its
result is kept; fastbag's result must equal it before fastbag is timed, so
no number is reported for a wrong answer. The groups in the report pair the
two sides of each job; ``fastbag bench`` prints the same jobs as one table
with ratios, targets and this machine's limits.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import fastbag
from fastbag.tooling import bench

pytest.importorskip("rosbags", reason="the benchmarks compare with rosbags: pip install -e '.[test]'")

SECONDS = float(os.environ.get("FASTBAG_BENCH_SECONDS", "10"))
BZ2_SECONDS = float(os.environ.get("FASTBAG_BENCH_BZ2_SECONDS", "4"))
CASES = [pytest.param(job, side, id=f"{job.name}-{side}") for job in bench.JOBS for side in ("rosbags", "fastbag")]
_rosbags_results: dict[str, object] = {}


@pytest.fixture(scope="session")
def paths():
    return bench.ensure_bags(SECONDS, BZ2_SECONDS)


@pytest.mark.parametrize(("job", "side"), CASES)
def test_job(benchmark, paths, job, side):
    """Reading jobs get open handles (opening is its own job); the others the path."""
    path = paths[job.bag]
    benchmark.group = f"{job.name}: {job.what}"
    if side == "rosbags":  # the job's peer: rosbags, or the mcap package for the MCAP "-py" jobs
        reader = job.open_peer(path) if job.opened else None
        try:
            _rosbags_results[job.name] = benchmark.pedantic(job.rosbags, args=(reader if job.opened else path,),
                                                            rounds=job.rosbags_repeats, iterations=1)
        finally:
            if reader is not None:
                job.close_peer(reader)
        return
    with fastbag.open(bench.fastbag_path(path)) as bag:
        target = bag if job.opened else bench.fastbag_path(path)
        if job.check is None:
            job.check_raw(path)  # whole-bag jobs: the full (topic, time, bytes) sequences agree
        else:
            job.check(job.fastbag(target), _rosbags_results[job.name])
        benchmark.pedantic(job.fastbag, args=(target,), rounds=job.repeats, iterations=1, warmup_rounds=1)


def test_first_read_in_a_fresh_process(benchmark, paths):
    """import fastbag, open the mixed bag, read /imu: a whole interpreter, Numba's on-disk cache warm."""
    command = [sys.executable, "-c", f"import fastbag; fastbag.open({str(paths['mixed-none'])!r}).read('/imu')"]
    subprocess.run(command, check=True)  # warm the cache
    benchmark.group = "first read in a fresh process"
    benchmark.pedantic(subprocess.run, args=(command,), kwargs={"check": True}, rounds=3, iterations=1)
