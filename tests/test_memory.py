"""Peak memory of reading a topic into arrays: close to the arrays themselves.

Measured in a fresh interpreter (the test process's own allocations would
blur it): Numba and the kernels are loaded by a small read first, then the
peak resident set (VmHWM, reset through /proc/self/clear_refs) while reading
200k Imu messages, less the bag's pages the read mapped in (RssFile: page
cache shared with the OS, not memory the read allocated). Measured: 1.10x
the arrays' bytes here (77.8 MB for 70.4 MB), 0.97x for 1 M Imu (1.28x
with Numba's own loading counted).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import json, sys
import numpy as np
import fastbag

def status():
    fields = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields

def owned(x):
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, dict):
        return sum(owned(v) for v in x.values())
    return 0

with fastbag.open(sys.argv[2]) as bag:  # loads Numba and the kernels
    bag.read("/imu")
bag = fastbag.open(sys.argv[1])
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
except OSError:
    pass  # then the peak so far counts too: the small read's, far below this one
before = status()
arr = bag.read("/imu")
after = status()
arrays = arr.time.nbytes + arr.connection.nbytes + arr.rows.nbytes + owned(arr._columns)
print(json.dumps({"arrays": arrays, "n": len(arr), "x": float(arr["linear_acceleration"]["x"].sum()),
                  "peak": after["VmHWM"] - before["VmRSS"], "file": after["RssFile"] - before["RssFile"],
                  "anon": after["RssAnon"] - before["RssAnon"]}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc/self/status")
def test_reading_imu_into_arrays_peaks_near_the_arrays_own_size(tmp_path) -> None:
    from fastbag.tooling.bench import imu_bag

    big, small = tmp_path / "imu-200k.bag", tmp_path / "imu-1k.bag"
    imu_bag(big, count=200_000)
    imu_bag(small, count=1000)
    out = subprocess.run([sys.executable, "-c", CHILD, str(big), str(small)], check=True, capture_output=True,
                         text=True, timeout=120)
    got = json.loads(out.stdout)
    assert got["n"] == 200_000 and got["x"] != 0.0
    assert got["arrays"] > 60e6  # 352 bytes a message
    above = got["peak"] - got["file"]  # the bag's mapped pages are the page cache's, not the read's
    assert above <= 1.5 * got["arrays"], got
    assert got["anon"] <= 1.2 * got["arrays"], got  # what stays allocated: the arrays, little else
