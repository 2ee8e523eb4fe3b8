"""Decompressors: a registry from compression name to codec, each bounded by a size limit.

A codec decompresses a payload (a uint8 array) to at most ``size`` bytes,
into a buffer the caller provides where it can. Output never outgrows what
the data really holds: a payload that would expand past its limit (a
decompression bomb, a lying header) stops one byte past it, for the caller
to reject. Given ``reach`` (:mod:`fastbag.io.prefix`), a codec stops as
soon as the bytes it has decoded hold what the caller needs: a read of a
few small messages at the head of a chunk whose tail is one large image
decodes only the head. lz4 frames decode through the Numba kernel of
:mod:`fastbag.io.lz4frame` (frames it leaves alone go to ``lz4.frame``),
bz2 through the standard library's streaming decoder.
"""

from __future__ import annotations

import bz2
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import TooLarge
from .prefix import Reach, first_target, next_target

STEP = 8 << 20  # a streaming decompressor produces at most this much per call
#: The first bytes of a zstd frame, and of an LZ4 frame.
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_stream() -> Any:
    import lz4.frame  # imported on first use: a bag without lz4 chunks never needs it
    return lz4.frame.LZ4FrameDecompressor()


def stream(decompressor: Any, data: bytes | memoryview, limit: int, reach: Reach | None = None) -> bytes:
    """Decompress ``data``, never producing more than ``limit + 1`` bytes (and, given ``reach``, no more
    than it asks for).

    Output grows STEP bytes at a time, so memory follows what the data
    really holds, not what a header or a frame claims: a payload that would
    expand past ``limit`` (a decompression bomb, a lying size) stops one byte
    past it, for the caller to reject.
    """
    target = first_target(reach, limit)
    pieces: list[bytes] = []
    produced = 0
    feed: bytes | memoryview = data
    while True:
        if produced >= target:
            if reach is None or target > limit:
                break
            joined = b"".join(pieces)
            pieces = [joined]
            target = next_target(reach, np.frombuffer(joined, dtype=np.uint8), limit)
            if produced >= target:
                break
        if not feed and (decompressor.eof or decompressor.needs_input):
            break
        piece = decompressor.decompress(feed, max_length=min(STEP, target - produced))
        feed = b""
        if not piece:
            break
        pieces.append(piece)
        produced += len(piece)
    if decompressor.eof and getattr(decompressor, "unused_data", b""):
        # The stream ended before the payload did: its length is wrong (it may run into later chunks).
        raise ValueError(f"{len(decompressor.unused_data)} bytes follow the end of the compressed stream")
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _streamed(factory: Callable[[], Any]) -> Callable[..., np.ndarray]:
    def decompress(raw: np.ndarray, size: int, allocate: Callable[[int], np.ndarray] | None = None,
                   reach: Reach | None = None) -> np.ndarray:
        out = stream(factory(), memoryview(raw), size, reach)
        if len(out) > size:  # decompression stopped there: it would have produced more
            raise TooLarge(f"more than {size} bytes")
        return np.frombuffer(out, dtype=np.uint8)
    return decompress


def _lz4(raw: np.ndarray, size: int, allocate: Callable[[int], np.ndarray] | None = None,
         reach: Reach | None = None) -> np.ndarray:
    # The Numba frame kernel decodes into a buffer from ``allocate`` (recycled: see BufferPool);
    # frame features it leaves alone go to lz4.frame.
    from . import lz4frame

    try:
        return lz4frame.decompress(raw, size, allocate, reach)
    except lz4frame.Unsupported:
        return _streamed(_lz4_stream)(raw, size, reach=reach)



_PER_THREAD = threading.local()


def _zstd_decompressor() -> Any:
    """This thread's zstd decompression context: one per thread, since a context decodes one frame at a
    time, and reused, since making one per chunk cost ~10% of decoding a 800 KB chunk."""
    found = getattr(_PER_THREAD, "zstd", None)
    if found is None:
        import zstandard  # imported on first use: a bag without zstd chunks never needs it

        found = _PER_THREAD.zstd = zstandard.ZstdDecompressor()
    return found


def _zstd(raw: np.ndarray, size: int, allocate: Callable[[int], np.ndarray] | None = None,
          reach: Reach | None = None) -> np.ndarray:
    # zstandard's stream reader decodes into our buffer (recycled where ``allocate`` gives one) as
    # blocks arrive; the buffer starts at a plausible size and doubles, so a frame that claims or
    # expands to far more than its bytes justify costs only what it really produces.
    guess = 32 * raw.size + (1 << 16)
    first = size if size <= guess else guess
    out = allocate(first) if allocate is not None else np.empty(first, dtype=np.uint8)
    filled = 0
    target = first_target(reach, size)
    # All input at once: the reader's default 128 KiB reads make it decode in small steps, at half the speed.
    with _zstd_decompressor().stream_reader(memoryview(raw), read_size=max(raw.size, 1),
                                            read_across_frames=True) as reader:
        while True:
            if filled >= target:  # (only with reach: the whole payload's target is past its end)
                target = next_target(reach, out[:filled], size)  # type: ignore[arg-type]
                if filled >= target:
                    break
            if filled == out.size:
                if out.size >= size:
                    if reader.read(1):
                        raise TooLarge(f"more than {size} bytes")
                    break
                grown = np.empty(min(2 * out.size, size), dtype=np.uint8)
                grown[:filled] = out[:filled]
                out = grown
            got = reader.readinto(memoryview(out)[filled:min(out.size, target)])
            if not got:
                break
            filled += got
    return out[:filled]


def _checksum_flag(magic: bytes) -> Callable[[np.ndarray], bool]:
    """Whether a frame starting with ``magic`` says a checksum over its content ends it: bit 2 of the byte
    after the magic, in an LZ4 frame's FLG byte as in a zstd frame's header descriptor. (A chunk is one
    frame as every writer makes it; a frame after the first is not looked at.)"""
    return lambda raw: raw.size < 5 or bytes(raw[:4]) != magic or bool(raw[4] & 0x04)


#: compression name -> whether a payload carries a checksum over all of its output (checked only once
#: all of it is decoded: a prefix would leave it unchecked). bz2 checks each block's CRC as the block
#: ends, and a prefix ends where a block may not.
WHOLE_CHECKSUM: dict[str, Callable[[np.ndarray], bool]] = {
    "bz2": lambda raw: True,
    "lz4": _checksum_flag(LZ4_MAGIC),
    "zstd": _checksum_flag(ZSTD_MAGIC),
}


_CRC32: Callable[[Any], int] | None = None


def crc32(data: Any) -> int:
    """The CRC-32 (zlib's polynomial) of a buffer: ISA-L's where the ``isal`` package is installed
    (``pip install 'fastbag[fast]'``; it folds with carry-less multiplies, ~100 GB/s on a chunk in
    cache against zlib's ~6 GB/s, measured: 0.06 s of CPU per 355 MB of chunks), else zlib's."""
    global _CRC32
    if _CRC32 is None:
        try:
            from isal.isal_zlib import crc32 as found
        except ImportError:
            import zlib

            found = zlib.crc32
        _CRC32 = found
    return _CRC32(data)


#: compression name -> ``decompress(raw, size, allocate=None, reach=None)``: the payload ``raw``
#: (uint8, a view of the file) decompressed to a new uint8 array of at most ``size`` bytes, written
#: into ``allocate(n)`` where the codec can, and only as far as ``reach`` asks (see Reach); ValueError
#: if malformed, TooLarge past ``size``. ``none`` is handled without copying. Add codecs here.
DECOMPRESSORS: dict[str, Callable[..., np.ndarray]] = {
    "bz2": _streamed(bz2.BZ2Decompressor),
    "lz4": _lz4,
    "zstd": _zstd,
}
#: The same codecs as streaming decompressors, for payloads cut off by the end of the file.
STREAMING: dict[str, Callable[[], Any]] = {"bz2": bz2.BZ2Decompressor, "lz4": _lz4_stream}
COMPRESSIONS = ("none", *DECOMPRESSORS)
