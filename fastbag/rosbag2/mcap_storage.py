"""A rosbag2 recording whose storage is MCAP split into several files, or zstd-compressed per file, as one bag.

Each storage file is an MCAP file read by :class:`~fastbag.mcap.reader.McapReader`
(a ``.mcap.zstd`` is decompressed first, once, to memory-bounded temporary
storage, see :mod:`fastbag.rosbag2.compression`). This container joins them:

- connections are matched across files by topic, type, encoding and
  definition (a rosbag2 split repeats its channels in every file, each
  file numbering them anew); a connection's ``id`` is its position;
- chunks are every file's chunks in file order; a chunk's ``position`` is
  its offset plus the sizes of the files before it, so positions stay
  unique and name the file (errors subtract it again);
- the index (built on first use, as each file's is) is every file's index,
  merged by time, ties in file order, as rosbag2 and rosbags read them.

No chunk is read in place from one mapping (there is one per file): the
chunk table marks none as in place, and the store hands out each file's
payloads (an uncompressed chunk is still a view of its file's mapping).

Compressed per message (``compression_mode: message``: rosbag2 wrote each
message's data as a zstd frame), a chunk's payload is rebuilt once
decompressed: its Message records again, each holding its data decompressed
(bounded as sqlite3 rows are), and nothing else. The message indexes give
offsets in the chunk as stored; :meth:`McapStorage.payload_spans` maps them
to the rebuilt payload's through the offsets its rebuild kept.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..container import BagIndex, Connection, LazyIndexContainer
from ..errors import OUT_OF_RESOURCES, BagFormatError, FastbagError
from ..io.chunks import DEFAULT_CACHE_BYTES, ChunkStore, ChunkTable
from ..io.codecs import ZSTD_MAGIC
from ..io.forks import new_locks_in_children
from ..io.gather import le_uint, rows
from ..io.prefix import Reach
from ..io.scratch import ScratchFolder
from ..mcap.reader import MESSAGE_HEAD, McapReader, message_headers
from ..mcap.records import MAGIC, MESSAGE_FIXED, Channel, Opcode, Schema, record_end
from .compression import FrameError, decompress_file, decompress_frames, file_compression, writing_copy
from .metadata import BagMetadata, with_recorded_topics
from .reader import StorageSource, _natural_order, no_metadata_problem


def mcap_storage_files(path: str, metadata: BagMetadata | None) -> list[str]:
    """The storage files of the rosbag2 directory ``path``, in order (metadata.yaml's, else by name)."""
    if metadata is None:
        return [os.path.join(path, n) for n in _natural_order(
            [n for n in os.listdir(path) if n.endswith((".mcap", ".mcap.zstd"))])]
    files = []
    for relative in metadata.relative_file_paths:
        full = os.path.normpath(os.path.join(path, relative))
        if not os.path.exists(full) and os.path.exists(full + ".zstd"):
            full += ".zstd"  # older writers list the name before compression
        files.append(full)
    return files


class McapRecording(McapReader):
    """A rosbag2 directory whose storage is one uncompressed MCAP file: that file read as it is (in place, as any
    MCAP file), as the recording ``metadata`` (its metadata.yaml) describes. Without one it is still a rosbag2
    recording, of version "unknown" (the file holds everything; one still being written is scanned, saying so)."""

    format = "rosbag2"

    def __init__(self, path: str, metadata: BagMetadata | None) -> None:
        self.bag_metadata = metadata
        super().__init__(path)

    @property
    def version(self) -> str:
        return str(self.bag_metadata.version) if self.bag_metadata is not None else "unknown"

    def _build_connections(self, schemas: dict[int, Schema], channels: dict[int, Channel]) -> None:
        super()._build_connections(schemas, channels)
        self._connections = with_recorded_topics(self._connections, self.bag_metadata)


#: A serialized rosbag2 metadata text that may say ``compression_mode: message`` (then parsed to be sure).
_MESSAGE_MODE = re.compile(r"compression_mode\W+message", re.IGNORECASE)


def per_message_storage(reader: McapReader, path: str) -> McapReader | McapStorage:
    """``reader``, unless rosbag2 wrote its file compressed per message (each message's data a zstd frame):
    then MCAP storage compressed per message, reading the file through ``reader``. The file's ``rosbag2``
    metadata record says so; where it has none (lost with a recorder's crash: it is written last, or from a
    rosbag2 that wrote none), its first message's bytes may (see McapReader.messages_look_zstd). A damaged
    record is no reason to doubt the file: ``bag.metadata`` says what is wrong with it."""
    described = _per_message_metadata(reader, path)
    recorded = any(m.name == "rosbag2" for m in reader.metadata_indexes)
    if described is None and (recorded or not reader.messages_look_zstd()):
        return reader
    try:
        return McapStorage(path, [path], metadata=described, opened=[reader], per_message=True)  # (summary read once)
    except BaseException:
        reader.close()
        raise


def _per_message_metadata(reader: McapReader, path: str) -> BagMetadata | None:
    """The recording's metadata as the file's ``rosbag2`` metadata record stores it, where it says the
    messages are compressed one by one; else None."""
    from .metadata import parse_metadata

    try:
        records = reader.metadata_named("rosbag2")
    except FastbagError:
        return None
    for record in records:
        text = record.metadata.get("serialized_metadata", "")
        if not _MESSAGE_MODE.search(text):  # (most files: no YAML parsed at open, a third of its time)
            continue
        try:
            described = parse_metadata(text, path) if text else None
        except FastbagError:
            continue
        if described is not None and described.per_message:
            return described
    return None


class McapStorage(LazyIndexContainer):
    """Several MCAP storage files (``files``, in order; ``.zstd`` ones decompressed) read as one recording."""

    format = "rosbag2"

    def __init__(self, path: str | os.PathLike[str], files: list[str], *, metadata: BagMetadata | None = None,
                 opened: Sequence[McapReader] = (), per_message: bool = False) -> None:
        """``opened``: readers of some of ``files`` already open (a lone file, opened to see what it is),
        taken over rather than opened again; ``per_message``: compressed per message, whatever ``metadata``
        says (none said it, the messages' bytes did)."""
        self.bag_metadata = metadata
        self.parts: list[McapReader] = []
        self._part_names: list[str] = []  # each part's file name (a .mcap.zstd's: it is read from a copy)
        self._scratch: ScratchFolder | None = None  # decompressed .mcap.zstd files, removed on close
        self._problems: list[str] = []
        self._index: BagIndex | None = None
        self._counted_by_files: list[Connection] | None = None  # see window_index
        self._parts_range: tuple[int | None, int | None] | None = None  # see time_range
        path = os.fspath(path)
        self.format = "rosbag2" if os.path.isdir(path) else "MCAP"  # a lone .mcap.zstd is an MCAP file
        self._version = "0" if self.format == "MCAP" else str(metadata.version) if metadata is not None else \
            "unknown"
        #: Each message's data a zstd frame (see the module docstring).
        self.per_message = per_message or (metadata is not None and metadata.per_message)
        if metadata is not None:
            metadata.check_compression_format(path)
        elif os.path.isdir(path):
            self._problems.append(no_metadata_problem(path, [os.path.basename(f) for f in files]))
        self._rebuilt: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # chunk position -> (offsets, new offsets)
        self._rebuilt_lock = threading.Lock()
        new_locks_in_children(self, "_rebuilt_lock")
        #: Per part: (compressed whole, as a .mcap.zstd; its bytes stored; its bytes decompressed).
        self._stored: list[tuple[bool, int, int]] = []
        try:
            taken = {reader.path: reader for reader in opened}
            errors = [error for error in (self._open_part(f, taken.pop(f, None)) for f in files) if error is not None]
            if metadata is None and self.parts and not self.per_message:  # no metadata.yaml: the files say
                first = self.parts[0]
                self.per_message = _per_message_metadata(first, first.path) is not None or first.messages_look_zstd()
            if self.per_message or self._file_mode:
                self.compression_unit = "files"
            for reader in taken.values():  # (none: each names one of ``files``)
                reader.close()
            if not self.parts:  # nothing intact to read: the first file's error says why
                raise errors[0] if errors else BagFormatError("the recording lists no storage file", path=path)
            self._join_connections()
            self._join_chunks()
        except BaseException:
            self.close()
            raise
        self.source = StorageSource(path, sum(stored for _, stored, _ in self._stored))  # (on disk, as stored)

    # -- opening ---------------------------------------------------------------------
    def _open_part(self, full: str, opened: McapReader | None = None) -> FastbagError | None:
        """Open one storage file (or take ``opened``, its reader); one that is absent or damaged is left out
        with a problem (its error is returned: the caller raises the first when no file is left)."""
        if opened is not None:
            self.parts.append(opened)
            self._part_names.append(os.path.basename(full))
            self._stored.append((False, opened.source.size, opened.source.size))
            return None
        try:
            if not os.path.exists(full):
                raise BagFormatError("storage file named in metadata.yaml is absent", path=full)
            head = _head(full)
            if head.startswith(ZSTD_MAGIC):
                part = self._decompressed(full)
                self._stored.append((True, os.path.getsize(full), part.source.size))
                self.parts.append(part)
            elif head.startswith(MAGIC[:5]):  # a later major version is named by the MCAP reader
                self.parts.append(McapReader(full))
                self._stored.append((False, self.parts[-1].source.size, self.parts[-1].source.size))
            else:
                raise BagFormatError(f"storage file is neither an MCAP file nor zstd-compressed (it starts "
                                     f"{head!r})", path=full, offset=0, record="magic")
        except FastbagError as exc:
            self._problems.append(str(exc))
            return exc
        self._part_names.append(os.path.basename(full))
        return None

    def _decompressed(self, full: str) -> McapReader:
        """A ``.mcap.zstd`` decompressed (bounded) to a temporary file, opened; errors name ``full``."""
        if self._scratch is None:
            self._scratch = ScratchFolder(self)
        # Named after the user's file: errors met while reading (which name the file read) still say which.
        spill = os.path.join(self._scratch.path, f"{len(self.parts)}-{os.path.basename(full).removesuffix('.zstd')}")
        memory = decompress_file(full, spill)
        if memory is not None:  # small: written out all the same, the MCAP reader maps a file
            with writing_copy(full, spill), open(spill, "wb") as out:
                out.write(memory)
        with open(spill, "rb") as check:
            head = check.read(len(MAGIC))
        if head != MAGIC:
            raise BagFormatError(f"zstd-compressed storage file does not hold an MCAP file (it decompresses to "
                                 f"{os.path.getsize(spill)} bytes starting {head!r})", path=full,
                                 record="decompressed")
        try:
            reader = McapReader(spill)
        except FastbagError as exc:
            raise type(exc)(str(exc).replace(spill, f"{full} (decompressed)")) from None
        return reader

    def _join_connections(self) -> None:
        """One connection per (topic, type, encoding, definition) over all files, in order of appearance."""
        merged: list[Connection] = []
        by_key: dict[tuple[str, str, str, str, bytes], int] = {}
        self._rank_of: list[np.ndarray] = []     # per file: its connection rank -> merged rank
        self._channel_of: list[np.ndarray] = []  # per file: merged rank -> its channel id (-1: none)
        for part in self.parts:
            ranks = []
            for c in part.connections:
                key = (c.topic, c.msgtype, c.encoding, c.definition, c.schema_data)
                if key not in by_key:
                    by_key[key] = len(merged)
                    merged.append(replace(c, id=len(merged)))
                ranks.append(by_key[key])
            self._rank_of.append(np.array(ranks, dtype=np.int32))
        for part, ranks in zip(self.parts, self._rank_of):
            channel = np.full(len(merged), -1, dtype=np.int64)
            channel[ranks] = [c.id for c in part.connections]
            self._channel_of.append(channel)
        self._connections = with_recorded_topics(merged, self.bag_metadata)

    def _join_chunks(self) -> None:
        tables = [p.chunks for p in self.parts]
        self._file_base = np.cumsum([0] + [p.source.size for p in self.parts])[:-1].astype(np.int64)
        self._chunk_base = np.cumsum([0] + [len(t) for t in tables])[:-1].astype(np.int64)
        cat = (lambda name: np.concatenate([getattr(t, name) + (base if name in ("position", "data_offset") else 0)
                                            for t, base in zip(tables, self._file_base)]).astype(np.int64))
        compression = tuple(c for t in tables for c in t.compression)
        self._chunks = ChunkTable.from_columns(cat("position"), cat("data_offset"), cat("size"), cat("data_len"),
                                               compression)
        # Never read in place: each file has its own mapping (see the module docstring).
        self._chunks.uncompressed[:] = False

    # -- the index ---------------------------------------------------------------------
    @property
    def index(self) -> BagIndex:  # type: ignore[override]
        if self._index is None:
            self._index = self._joined([part.index for part in self.parts])
        return self._index

    def topic_index(self, ranks: Sequence[int]) -> BagIndex | None:
        """Each file's index of the topic's channels alone (see McapReader.topic_index), joined; None where
        a file has none to give."""
        if self._index is not None:
            return None
        wanted = set(ranks)
        indexes = []
        for k, part in enumerate(self.parts):
            index = part.topic_index([r for r, rank in enumerate(self._rank_of[k].tolist()) if rank in wanted])
            if index is None:
                return None
            indexes.append(index)
        return self._joined(indexes)

    def window_index(self, start: int | None, end: int | None) -> BagIndex | None:
        """Each file's index of the window (see McapReader.window_index), joined, its connections counted
        over the files; None where a file has none to give."""
        if self._index is not None:
            return None
        indexes = []
        for part in self.parts:
            index = part.window_index(start, end)
            if index is None:
                return None
            indexes.append(index)
        if self._counted_by_files is None:  # (each file's counts are its statistics': the same every window)
            counts = np.zeros(len(self._connections), dtype=np.int64)
            for ranks, index in zip(self._rank_of, indexes):
                np.add.at(counts, ranks, [c.msgcount for c in index.connections])
            self._counted_by_files = [replace(c, msgcount=int(n)) for c, n in zip(self._connections, counts)]
        return self._joined(indexes, self._counted_by_files)

    def _joined(self, indexes: list[BagIndex], connections: list[Connection] | None = None) -> BagIndex:
        """The files' indexes (``indexes[k]`` of ``parts[k]``) as one, in read order (with ``connections``,
        the recording's, by default)."""
        times, conns, chunks, offsets = [], [], [], []
        for k, (part, index) in enumerate(zip(self.parts, indexes)):
            times.append(index.time)
            conns.append(self._rank_of[k][index.conn] if index.conn.size else index.conn)
            chunks.append(index.chunk.astype(np.int64) + self._chunk_base[k])
            offsets.append(index.offset)
        self._take_part_problems()
        time = np.concatenate(times)
        order = np.argsort(time, kind="stable")  # ties: file order, then each file's own order
        return BagIndex(self._version, connections or self._connections, self._chunks, time[order],
                        np.concatenate(conns)[order].astype(np.int32), np.concatenate(chunks)[order].astype(np.int32),
                        np.concatenate(offsets)[order], recovered=any(p.recovered for p in self.parts),
                        problems=self._problems)

    # -- what the Bag asks -------------------------------------------------------------
    @property
    def chunks(self) -> ChunkTable:
        return self._chunks

    @property
    def problems(self) -> list[str]:
        self._take_part_problems()  # what each file found at open
        return self._problems

    def _take_part_problems(self) -> None:
        """Each file's problems, said with its name: the recording's warning named only its folder, not which
        of its files was damaged or scanned."""
        for name, part in zip(self._part_names, self.parts):
            for problem in part.problems:
                said = f"{name}: {problem}"
                if said not in self._problems:
                    self._problems.append(said)

    @property
    def recovered(self) -> bool:
        return any(p.recovered for p in self.parts)

    @property
    def version(self) -> str:
        return self._version

    @property
    def message_count(self) -> int:
        return sum(p.message_count for p in self.parts) if self._index is None else self._index.message_count

    @property
    def time_range(self) -> tuple[int | None, int | None]:
        if self._index is not None:
            return super().time_range
        if self._parts_range is None:  # (every part asked once: a read with int bounds asks on every call)
            ranges = [p.time_range for p in self.parts if p.message_count]
            self._parts_range = (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else (None, None)
        return self._parts_range  # type: ignore[return-value]

    @property
    def attachments(self) -> list[Any]:
        return [a for p in self.parts for a in p.attachments]

    @property
    def metadata(self) -> list[Any]:
        return [m for p in self.parts for m in p.metadata]

    def chunk_store(self, *, cache_bytes: int = DEFAULT_CACHE_BYTES, workers: int | None = None,
                    checksums: bool = True) -> ChunkStore:
        """A store handing out each file's payloads (decompressed and checked by that file's store)."""
        stores = [p.chunk_store(cache_bytes=max(1, cache_bytes // len(self.parts)), workers=1, checksums=checksums)
                  for p in self.parts]
        return _PartStore(self, stores, cache_bytes=cache_bytes, workers=workers)

    @property
    def _file_mode(self) -> bool:
        """Whether files are compressed whole (``.mcap.zstd``, rosbag2's FILE mode)."""
        return any(compressed for compressed, _, _ in self._stored)

    def compression_counts(self) -> dict[str, int]:
        """Chunks per compression; files where they are compressed, whole or per message (``zstd`` for each
        such file, as for sqlite3 storage; the chunks inside a ``.mcap.zstd`` may be compressed again)."""
        if self.per_message:
            return {"zstd": len(self.parts)}
        return file_compression(self._stored)[0] if self._file_mode else super().compression_counts()

    def compression_sizes(self) -> dict[str, tuple[int, int]]:
        """The chunks' sizes, or the files' where they are compressed whole; none for files compressed per
        message (their chunks hold the frames as is)."""
        if self.per_message:
            return {}
        return file_compression(self._stored)[1] if self._file_mode else super().compression_sizes()

    def rebuild(self, k: int, payload: np.ndarray) -> np.ndarray:
        """Chunk ``k``'s ``payload`` (compressed per message) as Message records holding their data
        decompressed, in the same order; their offsets before and after are kept for payload_spans."""
        from ..mcap.kernels import count_messages, message_records
        from .kernels import spread_records

        position = int(self._chunks.position[k])
        part = int(self.part_of_position(np.array([position]))[0])
        where = f"{self.parts[part].path} (chunk at offset {position - int(self._file_base[part])})"
        # Messages outside chunks (a file written unchunked: rosbag2's fastwrite preset) are one chunk of the
        # whole file, its offsets the file's: the records start past the magic.
        skip = len(MAGIC) if payload[:len(MAGIC)].tobytes() == MAGIC else 0
        offsets = np.empty(count_messages(payload[skip:]), dtype=np.int64)
        message_records(payload[skip:], offsets)
        offsets += skip
        lengths = le_uint(payload, offsets + 1, 8).astype(np.int64) - MESSAGE_FIXED
        if (lengths < 0).any():
            at = int(offsets[np.argmax(lengths < 0)])
            raise BagFormatError("a message record is shorter than its fixed fields", path=where, offset=at,
                                 record="message")
        try:
            datas, data_sizes = decompress_frames(payload, (offsets + MESSAGE_HEAD).tolist(), lengths.tolist())
        except FrameError as exc:
            raise BagFormatError(f"a message's data does not decompress: {exc}", path=where,
                                 offset=int(offsets[exc.index]), record="message") from None
        sizes = MESSAGE_HEAD + data_sizes
        rebuilt = np.cumsum(sizes) - sizes
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        heads = np.empty((offsets.size, MESSAGE_HEAD), dtype=np.uint8)  # opcode, length, then as stored:
        heads[:, 0] = Opcode.MESSAGE
        heads[:, 1:9] = (MESSAGE_FIXED + data_sizes).astype("<u8").view(np.uint8).reshape(-1, 8)
        heads[:, 9:] = rows(payload, offsets + 9, MESSAGE_HEAD - 9)  # channel, sequence, log and publish time
        spread_records(out, rebuilt, heads, datas, data_sizes)
        with self._rebuilt_lock:
            self._rebuilt[position] = (offsets, rebuilt)
        return out

    def _rebuilt_offsets(self, at: np.ndarray, lo: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        """Where the records the message indexes place at ``at`` (offsets in their chunk as stored, from
        ``lo``) lie in the rebuilt payloads; a BagFormatError where no Message record starts."""
        out = np.empty(at.size, dtype=np.int64)
        for position in np.unique(chunk).tolist():
            mine = np.flatnonzero(chunk == position)
            with self._rebuilt_lock:
                old, new = self._rebuilt.get(position, (None, None))
            if old is None:
                raise BagFormatError("a chunk's messages were located before it was decompressed", path=self.path,
                                     offset=position, record="chunk")
            rel = at[mine] - lo[mine]
            j = np.minimum(np.searchsorted(old, rel), max(old.size - 1, 0))
            bad = rel != old[j] if old.size else np.ones(rel.size, dtype=bool)
            if bad.any():
                part = int(self.part_of_position(np.array([position]))[0])
                raise BagFormatError("a message index points where no message record starts in its chunk",
                                     path=f"{self.parts[part].path} (chunk at offset "
                                          f"{position - int(self._file_base[part])})",
                                     offset=int(rel[np.argmax(bad)]), record="message index")
            out[mine] = lo[mine] + new[j]
        return out

    def part_of_position(self, position: np.ndarray) -> np.ndarray:
        """The file of each chunk position (see the module docstring)."""
        return np.searchsorted(self._file_base, position, side="right") - 1

    has_message_headers = True

    def message_headers(self, buf: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return message_headers(buf, starts)

    def record_end(self, payload: np.ndarray, at: int) -> int:
        """As an MCAP chunk's records; a chunk rebuilt from per-message frames is built whole."""
        return sys.maxsize if self.per_message else record_end(payload, at)

    def payload_spans(self, buf: np.ndarray, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, chunk: np.ndarray,
                      conn: np.ndarray, time: np.ndarray, *, kernel: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Each file's reader locates its own records (its channel ids, its chunk positions)."""
        chunk = np.asarray(chunk, dtype=np.int64)
        conn = np.asarray(conn, dtype=np.int64)
        if self.per_message:
            at = self._rebuilt_offsets(np.asarray(at, dtype=np.int64), np.asarray(lo, dtype=np.int64), chunk)
        part = self.part_of_position(chunk) if chunk.size else chunk
        starts = np.zeros(at.size, dtype=np.int64)
        lengths = np.zeros(at.size, dtype=np.int64)
        for k in np.unique(part).tolist():
            mine = part == k
            channel = self._channel_of[k][conn[mine]]
            starts[mine], lengths[mine] = self.parts[k].payload_spans(
                buf, np.asarray(at)[mine], np.asarray(lo)[mine], np.asarray(hi)[mine],
                chunk[mine] - self._file_base[k], channel, np.asarray(time)[mine], kernel=kernel)
        return starts, lengths

    def close(self) -> None:
        for part in self.parts:
            part.close()
        if getattr(self, "source", None) is not None:
            self.source.close()
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None


class _PartStore(ChunkStore):
    """Chunk payloads from the store of the file each chunk belongs to."""

    payloads_in_source = False

    def __init__(self, storage: McapStorage, stores: list[ChunkStore], *, cache_bytes: int,
                 workers: int | None) -> None:
        super().__init__(storage.source, storage.chunks, cache_bytes=cache_bytes, workers=workers)
        self.storage, self.stores = storage, stores

    def get(self, index: int, remember: bool = True, reach: Reach | None = None) -> np.ndarray:
        """Chunk ``index``'s payload, from its file's store (cached there); compressed per message, rebuilt
        from it and cached here."""
        k = int(np.searchsorted(self.storage._chunk_base, index, side="right") - 1)
        if not self.storage.per_message:
            return self.stores[k].get(index - int(self.storage._chunk_base[k]), remember, reach)
        hit = self.cached_payload(index)
        if hit is not None:
            return hit
        payload = self.storage.rebuild(index, self.stores[k].get(index - int(self.storage._chunk_base[k]), False))
        if remember:
            self._remember(index, payload)
        return payload

    def close(self) -> None:
        for store in self.stores:
            store.close()
        super().close()




def _head(path: str) -> bytes:
    """The first bytes of a storage file (BagFormatError naming it when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(MAGIC))
    except OSError as exc:
        if exc.errno in OUT_OF_RESOURCES:  # the process's limit, not the file's fault
            raise
        raise BagFormatError(f"storage file cannot be read: {exc.strerror or exc}", path=path) from None
