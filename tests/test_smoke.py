"""The package imports light and the demo bag reads back."""

from __future__ import annotations

import subprocess
import sys

import fastbag
from fastbag.tooling.synth import write_demo_bag


def test_import_does_not_load_numba_or_codecs():
    code = "import sys, fastbag; print(sorted(m for m in ('numba', 'lz4', 'rosbags') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_demo_bag_round_trip(tmp_path):
    path = tmp_path / "demo.bag"
    write_demo_bag(path, seconds=0.5, compression="lz4", points=1000)
    with fastbag.open(path) as bag:
        assert bag.version == "2.0"
        assert {t: i.message_count for t, i in bag.topics.items()} == {
            "/camera/image_raw": 5, "/imu": 100, "/points": 5, "/tf": 50}
        times = [m.time for m in bag.messages(raw=True)]
        assert times == sorted(times) and len(times) == bag.message_count == 160
        assert bag.start_time == times[0] and bag.end_time == times[-1]
