"""The file: a read-only memory map with bounded, checked views.

The :class:`Source` owns the mapping. Views handed out are NumPy arrays whose
``base`` chain ends at the mmap object, so a view keeps the mapping alive even
after the bag is closed: closing drops our references and unmaps only when no
view remains (``mmap.close`` refuses while buffers are exported, and the
mapping is then released when the last view is garbage collected).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
import weakref
from collections.abc import Iterator

import numpy as np

from ..errors import BagFormatError
from .forks import in_children
from .startup import numba_loaded

#: Reads of this many spans or more go through one compiled loop of pread(2) once Numba is loaded anyway
#: (bytekernels.pread_spans); fewer, or before Numba is needed, one os.preadv each.
KERNEL_SPANS = 64

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# -- the files this process maps ------------------------------------------------
# Every live mapping a Source made, with its file's (st_dev, st_ino): writing such a file in place (truncating
# it) would make the next read of the mapping raise SIGBUS and kill the process. Keys are weak, so a Source
# garbage-collected without close() (and all its views) drops out by itself; a mapping that close() could not
# unmap, because views of it are still alive, stays listed until the last view is gone.
_MAPPED: weakref.WeakKeyDictionary[mmap.mmap, tuple[int, int]] = weakref.WeakKeyDictionary()
_MAPPED_LOCK = threading.Lock()


def _new_lock_after_fork() -> None:
    global _MAPPED_LOCK
    _MAPPED_LOCK = threading.Lock()  # (another thread of the parent may have held it at the fork)


in_children(_new_lock_after_fork)


def _register(mapping: mmap.mmap, identity: tuple[int, int]) -> None:
    with _MAPPED_LOCK:
        _MAPPED[mapping] = identity


def _unregister(mapping: mmap.mmap) -> None:
    with _MAPPED_LOCK:
        _MAPPED.pop(mapping, None)


def is_mapped(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` (the same file: device and inode, through links) is mapped by a
    :class:`Source` of this process, that is: read by an open bag, or by views of a closed one."""
    try:
        stat = os.stat(path)
    except OSError:  # no such file (yet)
        return False
    identity = (stat.st_dev, stat.st_ino)
    with _MAPPED_LOCK:
        return any(mapped == identity and not mapping.closed for mapping, mapped in list(_MAPPED.items()))


class Source:
    """A memory-mapped file with bounds-checked reads.

    ``array`` is the whole file as a read-only ``uint8`` array (empty for an
    empty file); ``size`` is its length in bytes.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._closed = False
        # The mapping keeps its own duplicate of the descriptor: the file
        # object is closed at once, so a bag never holds an open file.
        with open(self.path, "rb") as file:
            stat = os.fstat(file.fileno())
            self.size = stat.st_size
            self._identity = (stat.st_dev, stat.st_ino)
            self._mmap: mmap.mmap | None = None
            if self.size:
                try:
                    self._mmap = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
                except OSError as exc:  # out of descriptors or address space: mmap's error names no file
                    raise type(exc)(exc.errno, f"{exc.strerror} (mapping the file)", self.path) from exc
                _register(self._mmap, self._identity)
                self.array = np.frombuffer(self._mmap, dtype=np.uint8)
            else:
                self.array = np.empty(0, dtype=np.uint8)

    # -- checked access -------------------------------------------------
    #: what the bytes are, for error messages
    what = "file"

    def check(self, offset: int, length: int, record: str) -> None:
        """Raise BagFormatError unless ``[offset, offset+length)`` lies inside the file (ValueError once closed:
        a worker reading for a bag that another thread closes must not take the emptied mapping for damage)."""
        if self._closed:
            raise ValueError(f"{self.path} was closed during the read")
        if offset < 0 or length < 0 or offset + length > self.size:
            raise BagFormatError(
                f"{record} record needs {length} bytes but the {self.what} ends at {self.size}",
                path=self.path, offset=offset, record=record)

    def u32(self, offset: int, record: str) -> int:
        """The little-endian uint32 at ``offset``."""
        self.check(offset, 4, record)
        return _U32.unpack_from(self._mmap, offset)[0]  # type: ignore[arg-type]

    def u64(self, offset: int, record: str) -> int:
        """The little-endian uint64 at ``offset``."""
        self.check(offset, 8, record)
        return _U64.unpack_from(self._mmap, offset)[0]  # type: ignore[arg-type]

    def bytes(self, offset: int, length: int, record: str) -> bytes:
        """A copy of ``length`` bytes at ``offset`` (for headers: small)."""
        self.check(offset, length, record)
        if self._mmap is None:  # an empty file has no mapping: only nothing can be read from it
            return b""
        return self._mmap[offset:offset + length]

    def view(self, offset: int, length: int, record: str) -> np.ndarray:
        """A zero-copy ``uint8`` view of ``length`` bytes at ``offset``."""
        self.check(offset, length, record)
        return self.array[offset:offset + length]

    def gather(self, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The byte ranges ``[offsets[i], offsets[i] + lengths[i])``, concatenated into one new array.

        Read with ``os.pread``, not through the mapping: for a few hundred
        bytes at each of many places spread over a large file (chunk headers,
        index data), a page fault per place costs several times the system
        call on a VM. Raises ValueError if a range leaves the file.
        """
        try:
            offsets = np.asarray(offsets, dtype=np.int64)
            lengths = np.asarray(lengths, dtype=np.int64)
        except OverflowError:  # a position read from the file beyond 2**63
            raise ValueError("a range to gather leaves the file") from None
        if offsets.size and ((offsets < 0).any() or (lengths < 0).any() or (offsets > self.size - lengths).any()):
            raise ValueError("a range to gather leaves the file")
        out = np.empty(int(lengths.sum()), dtype=np.uint8)
        if offsets.size > 1:  # ranges that continue one another are one read (an MCAP chunk's message
            # indexes and the next chunk's head)
            new_read = np.ones(offsets.size, dtype=bool)
            new_read[1:] = offsets[1:] != offsets[:-1] + lengths[:-1]
            if not new_read.all():
                first = np.flatnonzero(new_read)
                offsets, lengths = offsets[first], np.add.reduceat(lengths, first)
        return self._pread(offsets.tolist(), lengths.tolist(), out)

    def read_into(self, offset: int, out: np.ndarray, record: str) -> np.ndarray:
        """``out`` (uint8) filled with the file's bytes at ``offset``: an encrypted chunk's payload, read
        into a recycled buffer to be decrypted there. (Compressed payloads decode straight from the
        mapping: faulting its pages in cost less than this copy, see chunks.decompress.)"""
        self.check(offset, out.size, record)
        return self._pread([offset], [out.size], out)

    @contextlib.contextmanager
    def descriptor(self) -> Iterator[int]:
        """The mapped file open for reading (for pread), closed after the ``with``: the mapping holds none
        that could be shared. ValueError where the path names another file now (replaced since)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            stat = os.fstat(fd)
            if (stat.st_dev, stat.st_ino) != self._identity:
                raise ValueError(f"{self.path} is no longer the file that was mapped")
            yield fd
        finally:
            os.close(fd)

    def _pread(self, offsets: list[int], lengths: list[int], out: np.ndarray) -> np.ndarray:
        view = memoryview(out)
        with self.descriptor() as fd:
            if len(offsets) >= KERNEL_SPANS and numba_loaded():  # loaded anyway: spare the Python per read
                from .bytekernels import pread_spans

                short = pread_spans(fd, out, np.asarray(offsets, dtype=np.int64), np.asarray(lengths, dtype=np.int64))
                if short >= 0:  # the file shrank since it was mapped
                    raise ValueError(f"could not read {lengths[short]} bytes at offset {offsets[short]}")
                return out
            at = 0
            for offset, length in zip(offsets, lengths):
                got = os.preadv(fd, [view[at:at + length]], offset)
                if got != length:  # the file shrank since it was mapped
                    raise ValueError(f"read {got} of {length} bytes at offset {offset}")
                at += length
        return out

    def check_whole(self) -> None:
        """BagFormatError where the mapped file is shorter now than when it was mapped (another program
        truncated or is rewriting it): reading the mapping past the file's new end would kill the process
        with SIGBUS. Costs one fstat of the mapping's own descriptor (the mapped file, whatever its name
        now names: a file replaced by another under its name, or removed, is no danger)."""
        mapped = self._mmap
        if not isinstance(mapped, mmap.mmap):
            return
        try:
            size = mapped.size()
        except (OSError, ValueError):  # (closed under this call by another thread: the caller says so)
            return
        if size < self.size:
            raise BagFormatError(f"the file shrank from {self.size} to {size} bytes since it was opened "
                                 "(another program truncated it or is writing it): open it again",
                                 path=self.path, offset=size, record="file")

    # -- lifetime ---------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Drop the mapping; views already handed out stay valid."""
        if self._closed:
            return
        self._closed = True
        self.array = np.empty(0, dtype=np.uint8)
        mm, self._mmap = self._mmap, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                # Views still point into the mapping: it is unmapped when the
                # last of them is collected, never before (and stays registered till then).
                pass
            else:
                _unregister(mm)


class BufferSource(Source):
    """An in-memory buffer (a decompressed chunk) seen through the Source interface.

    Offsets are relative to the buffer; ``path`` names where it came from for
    error messages (e.g. ``"run.bag (chunk at offset 4117)"``).
    """

    what = "chunk"

    def __init__(self, array: np.ndarray, path: str) -> None:  # noqa: D107 - no file to open
        self.path = path
        self.size = int(array.size)
        self.array = array
        self._mmap = memoryview(array)  # type: ignore[assignment]  # struct.unpack_from and slicing work on it
        self._closed = False

    def bytes(self, offset: int, length: int, record: str) -> bytes:
        self.check(offset, length, record)
        return bytes(self._mmap[offset:offset + length])  # type: ignore[index]

    def close(self) -> None:
        self._closed = True
        self._mmap = None
