"""rosbag2's zstd compression, bounded: per file (``.db3.zstd``) and per message (each row a zstd frame).

A zstd frame may claim or produce any size. Output is bounded before it is
allocated: a message frame declaring more than :func:`message_limit` bytes,
or producing more, is an error (a zstd bomb), and so is a whole file
decompressing to more than :func:`file_limit`. A decompressed file is kept
in memory up to :data:`IN_MEMORY_BYTES`, else written to a temporary file
that is removed when the bag closes.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import BagFormatError, UnsupportedError
from ..io.scratch import TemporaryFolderError

#: Decompressed bytes per compressed byte a message or a file may reach. zstd's ratio on runs of
#: zeros is ~8000 at most, so real data stays under this; a bomb (a tiny frame declaring gigabytes)
#: does not.
MAX_RATIO = 8192
#: Allowed whatever the compressed size: small frames of real messages can compress very well.
MIN_LIMIT = 1 << 20
#: A decompressed storage file up to this size is kept in memory; a larger one goes to a temporary file
#: (each worker thread's connection holds its own copy of an in-memory database: keep that small).
IN_MEMORY_BYTES = 32 << 20
STEP = 8 << 20


def zstd() -> Any:
    """The ``zstandard`` module, imported on first use."""
    try:
        import zstandard
    except ImportError:  # a run-time dependency, but say what to do if it was left out
        raise UnsupportedError("reading zstd-compressed rosbag2 bags needs the zstandard package: "
                               "pip install zstandard") from None
    return zstandard


def message_limit(compressed: int) -> int:
    """The most bytes a frame of ``compressed`` bytes may decompress to."""
    return max(MIN_LIMIT, MAX_RATIO * compressed)


def decompress_frame(frame: bytes | memoryview, decompressor: Any, limit: int) -> bytes:
    """One zstd frame (a message in ``MESSAGE`` mode), at most ``limit`` bytes; ValueError otherwise."""
    zstandard = zstd()
    if limit <= 0:  # max_output_size=0 would mean no limit at all
        raise ValueError("the chunk's decompression budget is spent (a decompression bomb?)")
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise ValueError(f"not a zstd frame: {exc}") from None
    # decompress() allocates the size a frame declares, whatever max_output_size says: check it first.
    if declared > limit:
        raise ValueError(f"zstd frame declares {declared} bytes, more than the {limit} allowed for its "
                         f"{len(frame)} bytes (a decompression bomb?)")
    try:
        return decompressor.decompress(frame, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd frame does not decompress within {limit} bytes: {exc}") from None


class FrameError(ValueError):
    """A frame of :func:`decompress_frames` that does not decompress within its bounds: ``index`` says which."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index


def decompress_frames(data: Any, starts: list[int], lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The zstd frames ``data[starts[i]:starts[i] + lengths[i]]`` (a chunk's messages in ``MESSAGE`` mode)
    decompressed back to back, and each one's size: each bounded by :func:`message_limit` and all together by
    that of ``data``'s size (many small bombs add up); FrameError naming the first that is not.

    Where every frame declares its size within those bounds (as zstd's one-shot compressor writes them),
    one call decompresses them all into the sizes declared (any other size is an error): a Python call per
    frame cost twice the decompression of a 300-byte message. Otherwise, or where that call fails, frame
    by frame, which names the frame at fault.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    at, n = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    declared = np.zeros(at.size, dtype=np.int64)
    if at.size:
        from .kernels import zstd_content_sizes

        # (frames of nothing stay out: zstandard 0.25's one call frees its output twice when all are empty)
        within = zstd_content_sizes(buf, at, n, declared) < 0 and bool((declared > 0).all()) and \
            bool((declared <= np.maximum(MIN_LIMIT, MAX_RATIO * n)).all()) and \
            int(declared.sum()) <= message_limit(buf.size)
        if within:
            zstandard = zstd()
            frames = zstandard.BufferWithSegments(buf, np.stack([at, n], axis=1).astype(np.uint64).tobytes())
            try:
                out = zstandard.ZstdDecompressor().multi_decompress_to_buffer(
                    frames, decompressed_sizes=declared.astype(np.uint64).tobytes(), threads=0)
            except zstandard.ZstdError:
                pass  # a frame that does not decompress to what it declares: the loop below names it
            else:
                return np.frombuffer(b"".join(out), dtype=np.uint8), declared
    pieces = _decompress_one_by_one(memoryview(buf), starts, lengths)
    return np.frombuffer(b"".join(pieces), dtype=np.uint8), np.array([len(p) for p in pieces], dtype=np.int64)


def _decompress_one_by_one(view: memoryview, starts: list[int], lengths: list[int]) -> list[bytes]:
    """:func:`decompress_frames` a frame at a time (FrameError naming the first out of bounds)."""
    decompressor = zstd().ZstdDecompressor()
    budget = message_limit(view.nbytes)
    out: list[bytes] = []
    produced = 0
    for i, (at, n) in enumerate(zip(starts, lengths)):
        try:
            piece = decompress_frame(view[at:at + n], decompressor, min(message_limit(n), budget - produced))
        except ValueError as exc:
            raise FrameError(i, str(exc)) from None
        out.append(piece)
        produced += len(piece)
    return out


def file_limit(compressed: int) -> int:
    """The most bytes a compressed storage file of ``compressed`` bytes may decompress to."""
    return max(MIN_LIMIT, MAX_RATIO * compressed)


@contextlib.contextmanager
def writing_copy(path: str, copy: str) -> Iterator[None]:
    """OSErrors of writing ``copy``, a temporary copy of ``path`` (a full temporary folder, a file size limit),
    said naming both and where the folder comes from: the bare errors named neither."""
    try:
        yield
    except OSError as exc:
        room = exc.errno in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
        hint = " (the folder is TMPDIR's: set TMPDIR to one with room)" if room else ""
        raise TemporaryFolderError(exc.errno, f"{exc.strerror} writing a temporary copy of {path}{hint}",
                                   copy) from exc


def copy_file(path: str, copy: str) -> None:
    """``path`` copied to ``copy``, a temporary file: an error reading ``path`` is that file's own (an OSError
    as raised), one writing ``copy`` a TemporaryFolderError (see writing_copy)."""
    with open(path, "rb") as source:
        with writing_copy(path, copy):
            out = open(copy, "wb")  # noqa: SIM115 - closed below, on every path
        try:
            while piece := source.read(STEP):
                with writing_copy(path, copy):
                    out.write(piece)
        finally:
            with writing_copy(path, copy):
                out.close()


def decompress_file(path: str, spill: str) -> bytes | None:
    """A ``.db3.zstd`` file decompressed: its bytes, or None when they went to the file ``spill``.

    The caller removes ``spill``. Raises BagFormatError naming the
    file and the offset reached when it is not zstd or decompresses past its
    bound.
    """
    zstandard = zstd()
    size = os.path.getsize(path)
    limit = file_limit(size)
    pieces: list[bytes] = []
    produced = 0
    out: Any = None
    try:
        with open(path, "rb") as raw, \
                zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as reader:
            while True:
                try:
                    piece = reader.read(STEP)
                except zstandard.ZstdError as exc:
                    raise BagFormatError(f"zstd-compressed storage file does not decompress: {exc}", path=path,
                                         offset=produced, record="decompressed") from None
                if not piece:
                    break
                produced += len(piece)
                if produced > limit:
                    raise BagFormatError(f"zstd-compressed storage file decompresses to more than {limit} bytes "
                                         f"({MAX_RATIO} times its size: a decompression bomb?)", path=path)
                if out is None and produced > IN_MEMORY_BYTES:
                    with writing_copy(path, spill):
                        out = open(spill, "wb")  # noqa: SIM115 - closed below, on every path
                        out.writelines(pieces)
                    pieces.clear()
                if out is not None:
                    with writing_copy(path, spill):
                        out.write(piece)
                else:
                    pieces.append(piece)
    finally:
        if out is not None:
            with writing_copy(path, spill):
                out.close()
    return None if out is not None else b"".join(pieces)


def file_compression(files: Iterable[tuple[bool, int, int]]) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """Storage files per compression (``zstd`` for one compressed whole, ``none`` else) and their bytes
    ``(stored, decompressed)`` per compression, from each file's ``(compressed whole, stored, decompressed)``."""
    counts: dict[str, int] = {}
    sizes: dict[str, tuple[int, int]] = {}
    for compressed, stored, size in files:
        name = "zstd" if compressed else "none"
        counts[name] = counts.get(name, 0) + 1
        before = sizes.get(name, (0, 0))
        sizes[name] = (before[0] + stored, before[1] + size)
    return counts, sizes
