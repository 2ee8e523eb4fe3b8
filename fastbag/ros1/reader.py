"""The ROS1 container: bag formats 2.0, 1.2 and 1.1 behind the :class:`~fastbag.container.Container` interface."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..container import BagIndex, Container
from ..io.source import Source
from .encryption import bag_decryptor, header_encryption
from .index import detect_version, read_index
from .records import MAGIC_V20, Op, message_spans, read_record


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
            self.index = read_index(self.source, decryptor=decryptor, encryption=encryption)
        except BaseException:
            self.source.close()
            raise

    def payload_spans(self, buf: np.ndarray, at: np.ndarray, lo: np.ndarray, hi: np.ndarray, chunk: np.ndarray,
                      conn: np.ndarray, time: np.ndarray, *, kernel: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Message-data records (after any connection or definition records) checked against the index."""
        return message_spans(buf, at, lo, hi, chunk, conn, time, path=self.path, kernel=kernel)

    def _window_kernel(self) -> Any:
        from .kernels import window_spans

        return window_spans

    def file_spans(self, index: BagIndex, selected: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   verified: np.ndarray) -> int:
        """One Numba pass from the index arrays over messages of uncompressed chunks."""
        from .kernels import file_spans

        table = index.chunks
        conn_ids = np.array([c.id for c in index.connections], dtype=np.int64)
        return file_spans(self.source.array, selected, index.chunk, index.offset, index.time, index.conn, conn_ids,
                          table.data_offset, table.size, table.data_len, starts, lengths, verified)
