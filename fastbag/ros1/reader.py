"""The ROS1 container: bag formats 2.0, 1.2 and 1.1 behind the :class:`~fastbag.container.Container` interface."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..container import BagIndex, Connection, Container
from ..io.chunks import ChunkTable
from ..io.forks import new_locks_in_children
from ..io.source import Source
from .encryption import bag_decryptor, header_encryption
from .index import DeferredIndex, detect_version, read_index
from .records import MAGIC_V20, Op, message_spans, read_record, record_end


class Ros1Reader(Container):
    """An open ROS1 bag: the mapped file and its index (read, or rebuilt by scanning).

    An encrypted bag (rosbag's AES-CBC encryptor) is decrypted with
    ``aes_key`` (16 bytes) or with its own key, encrypted in its header to a
    GPG user, which ``gpg`` decrypts from the user's keyring (``passphrase``
    for a protected GPG key, else gpg-agent or ``$ROSBAG_GPG_PASSPHRASE``).
    Both are ignored for a bag that is not encrypted.
    """

    format = "ROS1 bag"

    def __init__(self, path: str | os.PathLike[str], *, aes_key: bytes | None = None,
                 passphrase: str | None = None) -> None:
        self.source = Source(path)
        try:
            decryptor = encryption = None
            if detect_version(self.source) == "2.0":
                header = read_record(self.source, len(MAGIC_V20), expect=Op.BAG_HEADER).header
                encryption = header_encryption(header)
                if encryption is not None:
                    self.encryption = encryption.public
                    decryptor = bag_decryptor(self.source, header, encryption, aes_key=aes_key,
                                              passphrase=passphrase)
            found = read_index(self.source, decryptor=decryptor, encryption=encryption)
        except BaseException:
            self.source.close()
            raise
        # A sound 2.0 index is read and checked at open; its message table is built on first use, whole or
        # for one topic (topic_index). Others (legacy formats, a scan) come built.
        self._deferred = found if isinstance(found, DeferredIndex) else None
        self._index = found if isinstance(found, BagIndex) else None
        self._index_lock = threading.Lock()
        new_locks_in_children(self, "_index_lock")

    @property
    def index(self) -> BagIndex:  # type: ignore[override]
        """Every message's time, connection, chunk and offset (built on first use from what open read)."""
        if self._index is None:
            with self._index_lock:
                if self._index is None:
                    assert self._deferred is not None
                    self._index = self._deferred.whole()
                    self._deferred = None  # its copy of the index data is not needed any more
        return self._index

    def topic_index(self, ranks: Sequence[int]) -> BagIndex | None:
        """The messages of the connections at ``ranks`` alone, from the index-data records open read (their
        entries only), while the whole index is not built; else None."""
        deferred = self._deferred  # (once the whole index is built, None: read through that)
        return deferred.of(ranks) if deferred is not None else None

    # What open read answers these until the index is built (each reads _deferred once: another
    # thread may build the index meanwhile, and drop it).
    @property
    def connections(self) -> list[Connection]:
        deferred = self._deferred
        return deferred.connections if deferred is not None else self.index.connections

    @connections.setter
    def connections(self, value: list[Connection]) -> None:
        with self._index_lock:  # an index built meanwhile must not keep the old list
            if self._deferred is not None:
                self._deferred.connections = value
            if self._index is not None:
                self._index.connections = value

    @property
    def chunks(self) -> ChunkTable:
        deferred = self._deferred
        return deferred.chunks if deferred is not None else self.index.chunks

    @property
    def problems(self) -> list[str]:
        return [] if self._deferred is not None else self.index.problems  # a sound index has none

    @property
    def salvaged(self) -> dict[int, np.ndarray]:
        return {} if self._deferred is not None else self.index.salvaged

    @property
    def recovered(self) -> bool:
        return False if self._deferred is not None else self.index.recovered

    @property
    def version(self) -> str:
        return "2.0" if self._deferred is not None else self.index.version

    @property
    def chunk_count(self) -> int:
        """0 in the legacy formats, which store no chunks (their reader reads the whole file as one)."""
        return 0 if self.version.startswith("1.") else len(self.chunks)

    def compression_counts(self) -> dict[str, int]:
        """Chunks per compression; none for the legacy formats (1.2 and 1.1 store messages unchunked)."""
        return {} if self.version.startswith("1.") else super().compression_counts()

    def compression_sizes(self) -> dict[str, tuple[int, int]]:
        return {} if self.version.startswith("1.") else super().compression_sizes()

    @property
    def message_count(self) -> int:
        deferred = self._deferred
        return deferred.message_count if deferred is not None else self.index.message_count

    def payload_spans(self, buf: np.ndarray, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, chunk: np.ndarray,
                      conn: np.ndarray, time: np.ndarray, *, kernel: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Message-data records (after any connection or definition records) checked against the index."""
        return message_spans(buf, at, lo, hi, chunk, conn, time, path=self.path, kernel=kernel)

    def record_end(self, payload: np.ndarray, at: int) -> int:
        """A message data record: header length (u32), header, data length (u32), data."""
        return record_end(payload, at)

    def _window_kernel(self) -> Any:
        from .kernels import window_spans

        return window_spans

    def file_spans(self, index: BagIndex, selected: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   verified: np.ndarray) -> int:
        """One Numba pass from the index arrays over messages of uncompressed chunks."""
        from .kernels import file_spans

        table = index.chunks
        return file_spans(self.source.array, selected, index.chunk, index.offset, index.time, index.conn,
                          index.connection_ids, table.data_offset, table.size, table.data_len, starts, lengths,
                          verified)
