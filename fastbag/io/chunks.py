"""Chunk payloads: size checks, recycled buffers, an LRU cache, read-ahead.

A chunk's ``size`` is its uncompressed length; every decompressed payload is
checked against it. Decompressed chunks are cached in a small LRU bounded in
bytes, and :meth:`ChunkStore.iter_batches` decompresses ahead on a thread
pool: the codecs (:mod:`fastbag.io.codecs`) release the GIL. Payloads decode
into buffers a :class:`BufferPool` recycles once nothing references them.
Every container format describes its chunks as :class:`Chunk` rows of a
:class:`ChunkTable`; this module knows nothing of any format's records.

A chunk may carry a :class:`PayloadTransform` (an encrypted bag's decryptor,
supplied by its container): the stored payload goes through it first, into a
recycled buffer, on the same worker threads, and is then decompressed as
usual.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import warnings
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, InvalidStateError
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from ..errors import (BagFormatError, DecryptionError, FastbagError, FastbagWarning, TooLarge, UnsupportedError,
                      out_of_resources)
from .codecs import COMPRESSIONS, DECOMPRESSORS, STREAMING, WHOLE_CHECKSUM, stream
from .forks import reset_in_children
from .prefix import Reach
from .source import Source
from .threads import WorkerThreads


class PayloadTransform(Protocol):
    """What a stored payload goes through before decompression (a decryptor).

    Calling it with the stored bytes (uint8) and ``allocate`` (a recycled
    buffer of n bytes, or None) returns the payload as the container wrote it
    before the transform; ValueError when the bytes do not go through it (the
    message says why; the caller names the file and offset). ``prefix`` gives
    what it can of a payload cut off by the end of the file.
    """

    name: str  # for messages: "AES-CBC encrypted"

    def __call__(self, raw: np.ndarray, allocate: Callable[[int], np.ndarray] | None = None) -> np.ndarray: ...

    def prefix(self, raw: np.ndarray) -> bytes: ...


class Chunk(NamedTuple):
    """Where a chunk's payload lies and how to get it uncompressed."""

    position: int      # offset of the chunk record in the file
    compression: str
    size: int          # uncompressed payload length, from the header
    data_offset: int   # compressed payload in the file
    data_len: int
    transform: PayloadTransform | None = None  # applied to the stored payload before decompressing

    @property
    def in_place(self) -> bool:
        """Whether the payload lies in the file as is (uncompressed, not encrypted)."""
        return self.compression == "none" and self.transform is None


@dataclass(frozen=True, eq=False)
class ChunkTable(Sequence[Chunk]):
    """Every chunk of a bag: its facts as arrays, for vectorized work over many messages at once.

    Also a sequence of :class:`Chunk`, each built when asked for: opening a
    large bag reads thousands of chunk headers straight into these arrays.
    ``uncompressed`` is True where a chunk's payload lies in the file as is
    (never where ``transform``, one for every chunk of the bag, applies).
    """

    position: np.ndarray     # int64 columns
    data_offset: np.ndarray
    size: np.ndarray
    data_len: np.ndarray
    compression: tuple[str, ...]
    uncompressed: np.ndarray  # bool
    transform: PayloadTransform | None = None

    @classmethod
    def of(cls, chunks: Iterable[Chunk]) -> "ChunkTable":
        """The table of a list of chunks."""
        chunks = list(chunks)
        if not chunks:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, empty, (), np.zeros(0, dtype=bool))
        position, compression, size, data_offset, data_len, transforms = zip(*chunks)  # columns, transposed in C
        if any(t is not transforms[0] for t in transforms):
            raise ValueError("every chunk of a table shares one transform")
        return cls.from_columns(position, data_offset, size, data_len, compression, transforms[0])

    @classmethod
    def from_columns(cls, position: Any, data_offset: Any, size: Any, data_len: Any,
                     compression: tuple[str, ...], transform: PayloadTransform | None = None) -> "ChunkTable":
        """The table of int columns (arrays or sequences), one compression name per chunk, and the
        transform every payload goes through first (None: stored as is)."""
        columns = (np.array(column, dtype=np.int64) for column in (position, data_offset, size, data_len))
        names = set(compression)  # (most files use one compression throughout: no loop over chunks)
        if len(names) == 1:
            uncompressed = np.full(len(compression), "none" in names and transform is None, dtype=bool)
        else:
            uncompressed = np.array([c == "none" and transform is None for c in compression], dtype=bool)
        return cls(*columns, tuple(compression), uncompressed, transform)

    def __len__(self) -> int:
        return len(self.compression)

    @functools.cached_property
    def slow(self) -> np.ndarray:
        """Where a chunk's codec decompresses tens of MB/s, not a GB/s (bz2, or one fastbag does not know):
        bool."""
        return np.array([c not in ("none", "lz4", "zstd") for c in self.compression], dtype=bool)

    @functools.cached_property
    def lz4(self) -> np.ndarray:
        """Where a chunk's stored payload is an LZ4 frame (compression ``lz4``, no transform): bool."""
        if self.transform is not None:
            return np.zeros(len(self), dtype=bool)
        return np.array([c == "lz4" for c in self.compression], dtype=bool)

    def __getitem__(self, k: int) -> Chunk:  # type: ignore[override]  # chunks are looked up one by one
        return Chunk(int(self.position[k]), self.compression[k], int(self.size[k]), int(self.data_offset[k]),
                     int(self.data_len[k]), self.transform)

    def __iter__(self) -> Iterator[Chunk]:
        return map(Chunk._make, zip(self.position.tolist(), self.compression, self.size.tolist(),
                                    self.data_offset.tolist(), self.data_len.tolist(), repeat(self.transform)))


def size_mismatch(path: str, chunk: Chunk) -> BagFormatError:
    """The error for an uncompressed chunk whose payload length disagrees with its header's size."""
    return BagFormatError(f"uncompressed chunk holds {chunk.data_len} bytes but its header says {chunk.size}",
                          path=path, offset=chunk.position, record="chunk")


def _untransform(source: Source, chunk: Chunk, allocate: Callable[[int], np.ndarray] | None) -> np.ndarray:
    """The stored payload of a chunk with a transform, through it (DecryptionError naming the chunk)."""
    if allocate is not None and type(source) is Source:  # read into a recycled buffer: see decompress
        raw = source.read_into(chunk.data_offset, allocate(chunk.data_len), "chunk")
    else:
        raw = source.view(chunk.data_offset, chunk.data_len, "chunk")
    try:
        return chunk.transform(raw, allocate)  # type: ignore[misc]
    except ValueError as exc:
        raise DecryptionError(f"{chunk.transform.name} chunk payload does not decrypt: {exc}",  # type: ignore[union-attr]
                              path=source.path, offset=chunk.position, record="chunk") from exc


def decompress(source: Source, chunk: Chunk, allocate: Callable[[int], np.ndarray] | None = None,
               reach: Reach | None = None, checksums: bool = True) -> np.ndarray:
    """The chunk's uncompressed payload as a read-only ``uint8`` array.

    For ``none`` this is a view of the file mapping; otherwise a new buffer
    (from ``allocate`` where the codec can use one) whose length is checked
    against the header's ``size``. A chunk's transform (decryption) comes
    first, into a buffer from ``allocate`` too. Given ``reach`` (see
    :data:`~fastbag.io.prefix.Reach`), a compressed payload is decoded only
    as far as it asks: the result may be a prefix of the payload, shorter
    than ``size`` (and is then all that was checked). With ``checksums``, a
    payload that carries a checksum over all of it (an LZ4 frame's content
    checksum) is decoded whole, whatever ``reach`` says, and checked.
    """
    if chunk.transform is not None:
        raw = _untransform(source, chunk, allocate)
        if chunk.compression == "none":
            if raw.size != chunk.size:
                raise DecryptionError(f"{chunk.transform.name} uncompressed chunk decrypts to {raw.size} bytes but "
                                      f"its header says {chunk.size}", path=source.path, offset=chunk.position,
                                      record="chunk")
            raw.flags.writeable = False
            return raw
    else:
        raw = source.view(chunk.data_offset, chunk.data_len, "chunk")
    if chunk.compression == "none":
        if chunk.data_len != chunk.size:
            raise size_mismatch(source.path, chunk)
        return raw
    try:
        codec = DECOMPRESSORS[chunk.compression]
        if reach is not None and checksums and WHOLE_CHECKSUM[chunk.compression](raw):
            reach = None
    except KeyError:
        raise UnsupportedError(
            f"chunk compression {chunk.compression!r} is not supported (known: {', '.join(COMPRESSIONS)}) "
            f"({source.path}, offset {chunk.position}, chunk record)") from None
    try:
        # The codec reads the payload straight from the mapping. (A pread into a recycled buffer
        # first cost one more copy: on Linux 6.18, whose page faults map the page cache's large
        # folios, that copy took 1.6x the CPU time of faulting the pages in, unmapping included:
        # raw lz4, 1.7 GB, one thread 0.34 vs 0.21 s; two workers 0.83 vs 0.38 s, rosbags 1.26 s.)
        out = codec(raw, chunk.size, allocate, reach)
    except TooLarge:
        raise _error(chunk)(f"{_kind(chunk)} chunk decompressed to more than its header's {chunk.size} bytes",
                            path=source.path, offset=chunk.position, record="chunk") from None
    except Exception as exc:  # each codec has its own error types
        limit = out_of_resources(exc, source.path, f"decompressing the chunk at offset {chunk.position}")
        if limit is not None:  # (loading the codec's kernel, say: not the chunk's fault)
            raise limit from exc
        raise _error(chunk)(f"{_kind(chunk)} chunk payload does not decompress: {exc}",
                            path=source.path, offset=chunk.position, record="chunk") from exc
    if out.size != chunk.size and (reach is None or out.size > chunk.size or reach(out) > out.size):
        raise _error(chunk)(
            f"{_kind(chunk)} chunk decompressed to {out.size} bytes but its header says {chunk.size}",
            path=source.path, offset=chunk.position, record="chunk")
    out.flags.writeable = False  # shared by the cache and by every message view of it
    return out


def decompress_together(source: Source, table: ChunkTable, batch: np.ndarray, out: np.ndarray,
                        bases: np.ndarray) -> int:
    """Decompress chunks ``batch`` of ``table`` (LZ4 frames stored in ``source``, no transform) into ``out``
    at ``bases``, each to exactly its ``size``, in one kernel call: how many, from the first, did (see
    :func:`fastbag.io.lz4frame.decode_frames`; the rest are for :func:`decompress`, which explains them)."""
    from .lz4frame import decode_frames

    src = source.array  # (held here: a close() meanwhile unmaps nothing this call reads)
    source.check(0, 0, "chunk")  # (ValueError once closed)
    return int(decode_frames(src, table.data_offset[batch], table.data_len[batch], out, bases, table.size[batch]))


def _kind(chunk: Chunk) -> str:
    return chunk.compression if chunk.transform is None else f"{chunk.transform.name} {chunk.compression}"


def _error(chunk: Chunk) -> type[BagFormatError]:
    # Decrypted with the bag's key (the container checked it) yet not decompressing: damaged ciphertext.
    return BagFormatError if chunk.transform is None else DecryptionError


def decompress_truncated(source: Source, chunk: Chunk) -> np.ndarray:
    """What can be decompressed of a chunk whose payload the end of the file cut off.

    ``chunk.data_len`` is the part present in the file. Streaming decoders
    return every byte they can produce from it; the caller keeps only the
    complete records.
    """
    raw = bytes(source.view(chunk.data_offset, chunk.data_len, "chunk"))
    try:
        if chunk.transform is not None:
            raw = chunk.transform.prefix(np.frombuffer(raw, dtype=np.uint8))
        if chunk.compression == "none":
            out = raw
        elif chunk.compression in STREAMING:
            out = stream(STREAMING[chunk.compression](), raw, chunk.size)
        else:
            out = b""
    except Exception:  # a damaged tail: nothing to salvage from this chunk
        out = b""
    return np.frombuffer(out[:chunk.size], dtype=np.uint8)


T = TypeVar("T")
R = TypeVar("R")
_END = object()  # (ordered_map: no more items)


def ordered_map(fn: Callable[[T], R], items: Iterable[T], pool: WorkerThreads | None,
                ahead: int) -> Iterator[R]:
    """``map(fn, items)`` on ``pool``, results in order, at most ``ahead`` in flight.

    Items are drawn lazily, so a generator of large items (chunk payloads)
    holds only a bounded number at a time. Without a pool it is plain map.
    A pool shut down under the map (its bag closed by another thread) is a
    ValueError, as any use of a closed bag is, not the executor's own errors.
    A map continued in a forked child (a generator the parent started) maps
    the rest itself: the parent's threads, which held its pending items, are
    not in the child, and waiting for them would hang.
    """
    if pool is None or ahead < 2:
        yield from map(fn, items)
        return
    pending: deque[tuple[T, Future[R]]] = deque()
    source = iter(items)
    parent = os.getpid()
    try:
        while os.getpid() == parent:  # (asked before an item is drawn: a child maps it below)
            item = next(source, _END)
            if item is _END:
                break
            try:
                pending.append((item, pool.submit(fn, item)))  # type: ignore[arg-type]
            except RuntimeError as exc:  # "cannot schedule new futures after [interpreter] shutdown"
                if "interpreter shutdown" in str(exc):  # (a daemon thread reading while Python exits)
                    raise RuntimeError("the interpreter is exiting: no more chunks are read") from exc
                if "after shutdown" in str(exc):
                    raise ValueError("the bag was closed during the read") from exc
                raise  # (no thread could start: the process's limit, said as it is)
            if len(pending) >= ahead:
                yield _result(pending.popleft()[1])
        while pending and os.getpid() == parent:
            yield _result(pending.popleft()[1])
        if os.getpid() != parent:  # forked: what the parent's threads held, then the rest, here
            while pending:
                yield fn(pending.popleft()[0])
            yield from map(fn, source)
    finally:
        for _, future in pending:
            future.cancel()


def _result(future: Future[R]) -> R:
    try:
        return future.result()
    except CancelledError as exc:  # cancelled by the pool's shutdown: its bag closed by another thread
        raise ValueError("the bag was closed during the read") from exc


DEFAULT_CACHE_BYTES = 256 << 20
#: Batches of chunks smaller than this on average are decompressed on the reading thread (handing one to
#: a worker costs ~40 us; see ChunkStore.iter_batches).
SMALL_CHUNK = 16 << 10
#: Compressed chunks of at most this many bytes that a read needs one after another decompress together
#: (ChunkStore.batches): one by one, each cost 50-100 us of Python besides decompressing.
BATCHED_CHUNK = 256 << 10
#: About this many bytes of them make a batch, decompressed into one buffer.
BATCH_BYTES = 4 << 20
# Chunks of a slow codec (bz2: tens of MB/s) batch only up to SMALL_CHUNK bytes: a batch decompresses on
# one worker, and larger ones cost so much more to decompress than to hand over that the other worker
# should take its share (bz2 chunks of 250 KiB in batches read 1.7x slower than one by one on two).


_ZERO = np.zeros(1, dtype=np.int64)
_ZERO.flags.writeable = False


class Together(NamedTuple):
    """Chunks a read needs one after another, decompressed into one buffer (see ChunkStore.get_together)."""

    buffer: np.ndarray       # their payloads, one after another (read-only)
    bases: np.ndarray        # int64: where each chunk's payload starts in ``buffer``
    ends: np.ndarray         # int64: where it ends (short of the next one's base: a prefix, see Reach)
    done: int                # how many of the chunks, from the first, are there
    error: FastbagError | None  # why the next one is not: raised where the read first needs it

    @classmethod
    def alone(cls, payload: np.ndarray) -> "Together":
        """One chunk's payload (or the prefix a reach asked for), as a batch of one."""
        return cls(payload, _ZERO, np.array([payload.size], dtype=np.int64), 1, None)


class BufferPool:
    """Payload arrays handed out again once nothing references them any more.

    A whole-bag read decompresses chunk after chunk into buffers of about
    the same size. Fresh ones cost a page fault per 4 KiB page (the
    allocator returns freed ones to the system), which was more than lz4
    decoding itself. A buffer is free again when only the pool holds it:
    every view of it (a message's ``data``, a decoded array) references it.
    The most recently used free buffer that fits is handed out first (the
    likeliest to be in the CPU's caches). At most ``max_bytes`` are pooled.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._arrays: list[np.ndarray] = []
        self._bytes = 0
        self._lock = threading.Lock()
        reset_in_children(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # (a parent's worker may have held it at the fork)

    def take(self, size: int) -> np.ndarray:
        """A writable uint8 array of ``size`` bytes: a free pooled buffer (a view of it) or a new one.

        Payloads under MIN_POOLED bytes are not pooled (their memory comes from the allocator's arenas,
        not fresh pages), and at most MAX_POOLED buffers are: each take looks at every pooled buffer, and
        a bag of 1 KiB chunks had filled the pool with thousands, every chunk's take then scanning them
        all (40,000 messages read in 7.3 s, 17x rosbags' time).
        """
        if size < MIN_POOLED:
            return np.empty(size, dtype=np.uint8)
        with self._lock:
            # The most recently used free buffer that fits: the likeliest to be in the CPU's caches.
            for k in reversed(range(len(self._arrays))):
                # 2: the list's reference and getrefcount's argument; anything more is a user of it
                if self._arrays[k].size >= size and sys.getrefcount(self._arrays[k]) == 2:
                    found = self._arrays.pop(k)
                    self._arrays.append(found)
                    return found[:size]
            out = np.empty(size, dtype=np.uint8)
            k = 0
            while k < len(self._arrays) and (self._bytes + size > self.max_bytes  # make room: drop the least
                                             or len(self._arrays) >= MAX_POOLED):  # recently used free ones
                if sys.getrefcount(self._arrays[k]) == 2:
                    self._bytes -= self._arrays.pop(k).size
                else:
                    k += 1
            if self._bytes + size <= self.max_bytes and len(self._arrays) < MAX_POOLED:
                self._arrays.append(out)
                self._bytes += size
            return out[:]  # always a view: users may make theirs read-only, the pooled array stays writable

    def clear(self) -> None:
        with self._lock:
            self._arrays.clear()
            self._bytes = 0


#: Payload buffers smaller than this are not pooled (see BufferPool.take); at most MAX_POOLED are.
MIN_POOLED = 64 << 10
MAX_POOLED = 256

#: Shared by every bag of the process: reading bag after bag (a training set, a benchmark) reuses
#: the buffers of the one before instead of faulting fresh pages in for each.
BUFFERS = BufferPool(64 << 20)


def _process_cache_bytes() -> int:
    """The bound on every bag's cached chunks together: FASTBAG_PROCESS_CACHE_BYTES where set (a number of
    bytes: 1000000000, 1e9), else a quarter of the machine's memory, at most 4 GiB, at least one bag's default
    cache."""
    said = os.environ.get("FASTBAG_PROCESS_CACHE_BYTES", "").strip()
    if said:
        try:
            return max(0, int(float(said)))
        except ValueError:
            warnings.warn(FastbagWarning(f"FASTBAG_PROCESS_CACHE_BYTES={said!r} is not a number of bytes: "
                                         "ignored"), stacklevel=2)
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # (no sysconf: Windows)
        memory = 16 << 30
    return max(DEFAULT_CACHE_BYTES, min(4 << 30, memory // 4))


class CacheLedger:
    """The bytes every ChunkStore of the process caches, held to one bound (``limit``).

    A store's ``cache_bytes`` bounds one bag; a process holding many open
    (a dataset's, a notebook's list of bags) would otherwise hold hundreds
    of times that. Over the bound, the store used least recently gives up
    its least recently used chunks first. Stores report every change with
    their own lock held (store, then ledger: the one order the two locks are
    taken in); :meth:`trim` takes a store's lock with the ledger's released.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        # store key -> (the store, its cached bytes), least recently used first
        self._held: OrderedDict[int, tuple[weakref.ref[ChunkStore], int]] = OrderedDict()
        self._lock = threading.Lock()
        # Stores collected, to forget at the next call: a store's finalizer runs when the garbage collector
        # frees it, which can be on a thread inside this ledger's lock (since Python 3.12 the collector runs
        # between any two bytecodes), so it must not wait for the lock (it waited for ever: a hang).
        self._forgotten: deque[int] = deque()
        reset_in_children(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # (a parent's worker may have held it at the fork)

    def change(self, store: ChunkStore, delta: int) -> None:
        """``store`` caches ``delta`` bytes more (and was used last), or fewer (its place kept: a store giving
        up chunks is not thereby the most recently used)."""
        key = store.ledger_key
        with self._lock:
            self._drop_forgotten()
            ref, held = self._held.get(key, (None, 0))
            held += delta
            if held <= 0:
                self._held.pop(key, None)
            else:
                self._held[key] = (ref or weakref.ref(store), held)
                if delta > 0:
                    self._held.move_to_end(key)
            self.total += delta

    def touch(self, store: ChunkStore) -> None:
        """``store`` was used last (a cache hit)."""
        with self._lock:
            self._drop_forgotten()
            if store.ledger_key in self._held:
                self._held.move_to_end(store.ledger_key)

    def forget(self, key: int) -> None:
        """The store ``key`` is gone (collected): its cache went with it. Noted without the lock (a deque's
        append is atomic), and dropped from the count at the ledger's next call."""
        self._forgotten.append(key)

    def _drop_forgotten(self) -> None:
        # (the lock held)
        while self._forgotten:
            _, held = self._held.pop(self._forgotten.popleft(), (None, 0))
            self.total -= held

    def settle(self, store: ChunkStore) -> None:
        """``store``'s count is what it caches now (called with its lock held: nothing changes it meanwhile)."""
        with self._lock:
            self._drop_forgotten()
            ref, held = self._held.pop(store.ledger_key, (None, 0))
            if store._cached > 0:
                self._held[store.ledger_key] = (ref or weakref.ref(store), store._cached)
            self.total += store._cached - held

    def trim(self) -> None:
        """Evict chunks, least recently used store first, until every cache together fits ``limit``."""
        while True:
            with self._lock:
                self._drop_forgotten()
                if self.total <= self.limit or not self._held:
                    return
                key, (ref, _) = next(iter(self._held.items()))
            store = ref()
            if store is None:
                self.forget(key)  # (collected: its finalizer forgets it too, harmlessly twice; dropped next turn)
            else:
                store.evict_oldest()  # (or, where another thread emptied it first, its count settled)


#: Every bag's cached chunks, held to one bound (see CacheLedger).
LEDGER = CacheLedger(_process_cache_bytes())
_LEDGER_KEYS = itertools.count()


class ChunkStore:
    """Decompressed chunks of one bag, with a byte-bounded LRU cache.

    ``cache_bytes`` bounds what the cache keeps (uncompressed chunks are views
    of the mapping and cost nothing to keep, so they are not cached); every
    store of the process together keeps at most ``LEDGER.limit`` bytes.
    ``verify(index, payload)``, where given, checks each decompressed payload
    (a container's checksum) on the worker that decompressed it, raising a
    BagFormatError for a bad one.

    A read that needs only the head of a chunk (``reach``) gets a prefix of
    the payload, decoded no further, unless ``checksums`` asks for every
    checksum to be checked and one covers the whole payload: the codec's
    own (see :func:`decompress`) or the container's (``checksummed(index)``,
    an MCAP chunk's CRC-32). ``verify`` sees a prefix too, and checks what
    it can.
    """

    #: Whether chunk k's payload is ``chunks.size[k]`` bytes decompressed from ``source`` at
    #: ``chunks.data_offset[k]``, as :func:`decompress` gets it. Stores whose payloads come from elsewhere
    #: (a database's rows, other files) say no, and decompress small chunks one by one.
    payloads_in_source = True

    def __init__(self, source: Source, chunks: Sequence[Chunk], *, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 workers: int | None = None, salvaged: dict[int, np.ndarray] | None = None,
                 verify: Callable[[int, np.ndarray], None] | None = None, checksums: bool = True,
                 checksummed: Callable[[int], bool] | None = None) -> None:
        self.source = source
        self.chunks = chunks
        self.salvaged = salvaged or {}
        self.verify = verify
        self.checksums = checksums
        self.checksummed = checksummed
        self.cache_bytes = cache_bytes
        self.workers = workers or os.cpu_count() or 1
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._buffers = BUFFERS  # shared by every bag of the process
        self._cached = 0
        self._closed = False
        self.ledger_key = next(_LEDGER_KEYS)
        weakref.finalize(self, LEDGER.forget, self.ledger_key)
        self._lock = threading.Lock()
        self._pool: WorkerThreads | None = None
        # Payloads being decompressed (whole or a prefix), by chunk: a thread that misses the cache waits for
        # the one in flight and takes it where it reaches far enough, rather than decompressing the chunk
        # again (threads reading one bag meet on its chunks).
        self._decoding: dict[int, Future[np.ndarray | None]] = {}
        reset_in_children(self)

    def _after_fork(self) -> None:
        # The parent's pool believes its workers idle, but none came along: a new one on first use.
        self._pool = None
        self._lock = threading.Lock()
        self._decoding = {}

    def get(self, index: int, remember: bool = True, reach: Reach | None = None) -> np.ndarray:
        """The uncompressed payload of chunk ``index`` (kept in the cache when ``remember``); given
        ``reach``, perhaps only the prefix of it that ``reach`` asks for (see :func:`decompress`)."""
        chunk = self.chunks[index]
        if index in self.salvaged:
            return self.salvaged[index]
        if chunk.in_place:
            return decompress(self.source, chunk)
        if reach is not None and self.checksums and self.checksummed is not None and self.checksummed(index):
            reach = None
        mine: Future[np.ndarray | None] | None = None
        try:
            with self._lock:
                hit = self._cache.get(index)
                if hit is not None and self._serves(hit, chunk, reach):
                    self._cache.move_to_end(index)
                    LEDGER.touch(self)
                    return hit
                decoding = self._decoding.get(index)
                if decoding is None:
                    mine = Future()
                    self._decoding[index] = mine
            if mine is not None:
                payload = self._decoded(index, reach)
                if remember:  # (cached before it stops being in flight: no thread then misses both)
                    self._remember(index, payload)
                self._settle(index, mine, payload)
                return payload
        except BaseException as exc:
            if mine is not None:
                # An error is the chunk's: the threads waiting for it get it too. An interrupt (Ctrl-C) is this
                # thread's alone: they decompress the chunk themselves (a KeyboardInterrupt was raised in them,
                # and one between registering and settling left the chunk in flight for ever: reads hung).
                self._settle(index, mine, exc if isinstance(exc, Exception) else None)
            raise
        # Another thread is decompressing it: its payload serves if it reaches as far.
        try:
            theirs = decoding.result()  # (None: that thread was interrupted)
            if theirs is not None and self._serves(theirs, chunk, reach):
                return theirs
        except BagFormatError:
            if reach is None:
                raise
        payload = self._decoded(index, reach)
        if remember:
            self._remember(index, payload)
        return payload

    def _settle(self, index: int, future: Future[np.ndarray | None],
                outcome: np.ndarray | BaseException | None) -> None:
        """Chunk ``index`` is no longer in flight: ``future`` (its waiters') gets ``outcome``, once."""
        with self._lock:
            if self._decoding.get(index) is future:
                del self._decoding[index]
        if not future.done():
            try:
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
            except InvalidStateError:  # (settled meanwhile: an interrupt inside set_result, then here again)
                pass

    @staticmethod
    def _serves(payload: np.ndarray, chunk: Chunk, reach: Reach | None) -> bool:
        """Whether ``payload`` (all of ``chunk``'s, or a prefix) holds what ``reach`` asks for (all: None)."""
        return payload.size == chunk.size or (reach is not None and reach(payload) <= payload.size)

    def _decoded(self, index: int, reach: Reach | None) -> np.ndarray:
        """Chunk ``index``'s payload, as far as ``reach`` asks. A reach marked ``whole`` asks for all of it
        (cheaper than stopping early: see Bag._reach), yet needs only its prefix: where the rest turns out
        damaged, the prefix is decoded by itself, so that a read gets what is intact whichever way it
        asked (as one asking for the prefix alone does)."""
        if reach is None or not getattr(reach, "whole", False):
            return self._decompress(index, reach)
        try:
            return self._decompress(index, None)
        except BagFormatError:
            return self._decompress(index, reach)

    def _decompress(self, index: int, reach: Reach | None) -> np.ndarray:
        """Chunk ``index``'s payload, decoded (as far as ``reach`` asks) and verified. Where it fails, a prefix
        cached before is forgotten too: every later read of the chunk then fails as a fresh handle's would."""
        try:
            payload = decompress(self.source, self.chunks[index], self._buffers.take, reach, self.checksums)
            if self.verify is not None:
                self.verify(index, payload)
        except Exception:
            with self._lock:
                held = self._cache.pop(index, None)
                if held is not None:
                    self._account(-self._cost(index, held))
            raise
        return payload

    def _cost(self, index: int, payload: np.ndarray) -> int:
        """The memory a cached payload holds: a prefix (see :meth:`get`) keeps its whole buffer, which the
        codec sized for the whole chunk."""
        return max(payload.nbytes, int(self.chunks[index].size))

    def _remember(self, index: int, payload: np.ndarray) -> None:
        cost = self._cost(index, payload)
        if cost > self.cache_bytes:
            return
        with self._lock:
            if self._closed:  # (a read that was under way when the bag closed: nothing is kept for it)
                return
            held = self._cache.get(index)
            if held is not None:
                if held.size >= payload.size:
                    return
                self._account(-self._cost(index, held))  # a prefix, replaced by more of the payload
            self._cache[index] = payload
            self._account(cost)
            while self._cached > self.cache_bytes:
                old_index, old = self._cache.popitem(last=False)
                self._account(-self._cost(old_index, old))
        LEDGER.trim()

    def _account(self, delta: int) -> None:
        """The cache holds ``delta`` bytes more (or fewer): counted here and in the process's LEDGER (with
        this store's lock held)."""
        self._cached += delta
        LEDGER.change(self, delta)

    def cached_payload(self, index: int) -> np.ndarray | None:
        """Chunk ``index``'s cached payload (now the most recently used; perhaps a prefix of it), or None."""
        with self._lock:
            hit = self._cache.get(index)
            if hit is not None:
                self._cache.move_to_end(index)
                LEDGER.touch(self)
            return hit

    def evict_oldest(self) -> None:
        """Drop the least recently used cached chunk (for the LEDGER); where none is, the LEDGER's count of
        this store is settled (another thread's trim emptied it since the LEDGER chose it)."""
        with self._lock:
            if not self._cache:
                LEDGER.settle(self)
                return
            index, payload = self._cache.popitem(last=False)
            self._account(-self._cost(index, payload))

    @property
    def batches_small_chunks(self) -> bool:
        """Whether :meth:`batches` puts small chunks together: not where the payloads come from elsewhere
        than spans of the file, nor through a transform (decryption)."""
        return self.payloads_in_source and getattr(self.chunks, "transform", None) is None

    def batches(self, indices: Sequence[int] | np.ndarray, joining: np.ndarray | None = None) -> list[np.ndarray]:
        """``indices`` (compressed chunks, in the order a read first needs them) in batches, each decompressed
        into one buffer (:meth:`get_together`): chunks of at most BATCHED_CHUNK bytes one after another
        together (bz2 ones of at most SMALL_CHUNK), a batch about every BATCH_BYTES, every other chunk
        alone. ``joining`` (a mask over ``indices``) names the chunks that may join a batch instead of the
        small ones (see Bag._chunk_tasks).

        A recorder told to cut a chunk per message writes thousands of
        chunks of a few hundred bytes. One by one, each costs a cache lookup,
        a location and a decode pass: ~0.1 ms of Python, more than rosbags
        spends on a message. Together they cost one of each. Chunks of a few
        hundred KiB still spent as long on that as on decompressing; larger
        ones (rosbag's and rosbag2's default is 768 KiB) stay alone, where a
        read may decode only the head it needs and the cache keeps them.
        """
        at = np.asarray(indices, dtype=np.int64)
        if not self.batches_small_chunks or at.size < 2:
            return [at[k:k + 1] for k in range(at.size)]
        sizes = np.asarray(self.chunks.size)[at]  # type: ignore[attr-defined]
        small = sizes <= np.where(self.chunks.slow[at], SMALL_CHUNK, BATCHED_CHUNK) if joining is None else \
            np.array(joining, dtype=bool)  # type: ignore[attr-defined]
        if self.salvaged:  # (a salvaged payload is no span of the file)
            small &= ~np.isin(at, np.fromiter(self.salvaged, dtype=np.int64))
        run_start = np.ones(at.size, dtype=bool)  # runs of small chunks, and every other chunk alone
        run_start[1:] = ~small[1:] | ~small[:-1]
        before = np.cumsum(sizes) - sizes
        in_run = before - np.maximum.accumulate(np.where(run_start, before, 0))
        part = in_run // BATCH_BYTES  # a run cut about every BATCH_BYTES
        new = run_start
        new[1:] |= part[1:] != part[:-1]
        return np.split(at, np.flatnonzero(new)[1:])

    def get_together(self, batch: Sequence[int] | np.ndarray, reach: Callable[[int], Reach | None] | None = None,
                     remember: bool = False) -> Together:
        """The payloads of chunks ``batch`` (small ones: see :meth:`batches`) one after another in one buffer.

        LZ4 frames in the file decode in one kernel call, the rest of a fast
        codec's chunks (zstd's, an LZ4 frame the kernel leaves) one call each
        straight into the buffer, whole and checked as :meth:`get` checks
        them (not cached: decoding them again costs less than a lookup did).
        A chunk that fails so, and bz2's, go through :meth:`get` (``reach`` as
        it asks, cached where ``remember``), as a chunk read alone would: where
        one fails there, the batch stops at it, keeping its error for the read
        to raise where it first needs that chunk, so what came before stays
        readable.
        """
        table = self.chunks
        at = np.asarray(batch, dtype=np.int64)
        sizes = np.asarray(table.size)[at]  # type: ignore[attr-defined]
        bases = np.zeros(at.size, dtype=np.int64)
        np.cumsum(sizes[:-1], out=bases[1:])
        ends = bases + sizes
        buffer = self._buffers.take(int(ends[-1]) if at.size else 0)
        done = 0
        failed = -1  # a chunk the kernel decoded that failed its check: get() reads it (and says why)
        if table.lz4[at].all():  # type: ignore[attr-defined]
            done = decompress_together(self.source, table, at, buffer, bases)  # type: ignore[arg-type]
            if self.verify is not None:
                for k in range(done):
                    try:
                        self.verify(int(at[k]), buffer[bases[k]:ends[k]])
                    except FastbagError:
                        done = failed = k  # (the chunk read alone raises it again, at its place)
                        break
        error = None
        slow = table.slow  # type: ignore[attr-defined]
        for k in range(done, at.size):
            c = int(at[k])
            if not slow[c] and k != failed and self._decompress_into(c, buffer[bases[k]:ends[k]]):
                done = k + 1
                continue
            try:
                payload = self.get(c, remember, None if reach is None else reach(c))
            except FastbagError as exc:
                error = exc
                break
            buffer[bases[k]:bases[k] + payload.size] = payload
            ends[k] = bases[k] + payload.size
            done = k + 1
        buffer.flags.writeable = False  # shared by every message view of it
        return Together(buffer, bases, ends, done, error)

    def _decompress_into(self, index: int, out: np.ndarray) -> bool:
        """Chunk ``index``'s payload decompressed whole into ``out`` (its size), checked as :meth:`get`
        checks it; False where anything is amiss (:meth:`get` then reads it as it can, or says why). A
        fraction of get's cost (no cache, no lock, no future): a few KiB of zstd take 5 us to decode."""
        try:
            payload = decompress(self.source, self.chunks[index], lambda n: out[:n] if n <= out.size else
                                 np.empty(n, dtype=np.uint8), None, self.checksums)
            if self.verify is not None:
                self.verify(index, payload)
        except FastbagError:
            return False
        if payload.size != out.size:
            return False
        if not np.shares_memory(payload, out):  # (a codec that decodes into a buffer of its own)
            out[:] = payload
        return True

    def iter_batches(self, batches: Sequence[np.ndarray], reach: Callable[[int], Reach | None] | None = None
                     ) -> Iterator[tuple[int, Together]]:
        """Yield ``(k, payloads)`` for each batch of compressed chunks ``batches[k]`` (see :meth:`batches`),
        in order, decompressing ahead in parallel: a chunk alone through :meth:`get`, several through
        :meth:`get_together`.

        At most ``2 * workers`` batches are in flight, so memory stays bounded
        however many chunks the read spans. ``reach(index)``, where given, is
        each chunk's ``reach`` (see :meth:`get`).
        """
        table = self.chunks
        sizes = np.asarray(table.size)[np.concatenate(batches)] if batches else np.zeros(0, np.int64)  # type: ignore[attr-defined]
        # Chunks of a few KiB decompress in microseconds, less than handing each to a worker costs (~40 us):
        # those are decompressed on this thread (where batches of them are few, see batches()).
        workers = self.workers if len(batches) >= 2 and int(sizes.sum()) >= SMALL_CHUNK * len(batches) else 1
        # A read larger than the cache would only evict what it caches before reusing it, and keep
        # cache_bytes of freshly allocated payloads alive: it bypasses the cache.
        remember = int(sizes.sum()) <= self.cache_bytes

        def get(k: int) -> tuple[int, Together]:
            batch = batches[k]
            if len(batch) > 1:
                return k, self.get_together(batch, reach, remember)
            c = int(batch[0])
            payload = self.get(c, remember, None if reach is None else reach(c))
            return k, Together.alone(payload)

        yield from ordered_map(get, range(len(batches)), self.pool() if workers > 1 else None, 2 * workers)

    def pool(self) -> WorkerThreads | None:
        """The worker threads (None with one worker): decompression and decoding share them. They end when
        idle, and start again with the next read (see io/threads.py)."""
        if self.workers < 2:
            return None
        with self._lock:
            if self._pool is None:
                if self._closed:  # (a read racing the close: refused as the pool's shutdown refuses it)
                    raise ValueError("the bag was closed during the read")
                self._pool = WorkerThreads(self.workers)
            return self._pool

    def close(self) -> None:
        """Forget cached chunks; cancel the queued work and wait for the running work (every close waits:
        a second closing thread too)."""
        with self._lock:
            pool = self._pool
            self._closed = True
        if pool is not None:
            pool.shutdown()
        with self._lock:
            self._cache.clear()
            self._account(-self._cached)
