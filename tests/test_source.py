"""The mapped file's scattered reads (Source.gather): one os.preadv per span, or, once Numba is loaded,
one compiled loop of pread(2) (io.bytekernels.pread_spans), which must read exactly the same bytes and
fail the same way when the file has shrunk since it was mapped."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fastbag.io import source
from fastbag.io.bytekernels import pread_spans
from fastbag.io.source import Source


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "bytes.bin"
    payload = np.random.default_rng(5).integers(0, 256, 1 << 16, dtype=np.uint8)
    path.write_bytes(payload.tobytes())
    return path, payload


def spans(size: int, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    offsets = np.sort(rng.integers(0, size - 300, count)).astype(np.int64)
    return offsets, rng.integers(0, 300, count).astype(np.int64)  # empty spans among them


def test_pread_spans_reads_each_span_in_turn(data_file):
    path, payload = data_file
    offsets, lengths = spans(payload.size, 500)
    out = np.full(int(lengths.sum()), 7, dtype=np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_spans(fd, out, offsets, lengths) == -1
        want = np.concatenate([payload[o:o + n] for o, n in zip(offsets.tolist(), lengths.tolist())])
        assert np.array_equal(out, want)
        # a span running past the end of the file, or more bytes than the buffer holds: its number
        assert pread_spans(fd, out, np.array([0, payload.size - 10]), np.array([5, 20])) == 1
        assert pread_spans(fd, np.empty(4, np.uint8), np.array([0, 0]), np.array([3, 3])) == 1
        assert pread_spans(fd, out, np.array([-1]), np.array([3])) == 0
    finally:
        os.close(fd)


@pytest.mark.parametrize("through", ["kernel", "python"])
def test_gather_is_the_same_either_way_and_says_when_the_file_shrank(data_file, monkeypatch, through):
    path, payload = data_file
    monkeypatch.setattr(source, "KERNEL_SPANS", 1 if through == "kernel" else 1 << 60)
    offsets, lengths = spans(payload.size, 200, seed=1)
    src = Source(path)
    try:
        got = src.gather(offsets, lengths)
        assert np.array_equal(got, np.concatenate([payload[o:o + n] for o, n in zip(offsets.tolist(),
                                                                                     lengths.tolist())]))
        with open(path, "r+b") as f:  # a recorder's file cut short under a reader that mapped it
            f.truncate(1000)
        with pytest.raises(ValueError, match="at offset 2000"):
            src.gather(np.array([0, 2000]), np.array([10, 10]))
    finally:
        src.close()
