"""Write ROS1 bags, format 2.0, with a complete index.

>>> with fastbag.Writer("out.bag", compression="lz4") as w:     # doctest: +SKIP
...     c = w.add_connection("/imu", "sensor_msgs/Imu", definition, md5sum)
...     w.write(c, time_ns, serialized_bytes)

Layout written: ``header (chunk index_data*)* connection* chunk_info*``; the
bag header is rewritten on close with the index position and counts. A
connection record is also written inside the first chunk that uses it, as
rosbag does, so an unindexed copy can be recovered.

Encrypted bags are written as rosbag's ``AesCbcEncryptor`` writes them (see
:mod:`fastbag.ros1.encryption`): ``Writer(path, encrypt_for="user")`` draws a
random AES-128 key and stores it in the bag header encrypted by ``gpg`` to
that user's public key; ``aes_key=`` uses a given key (stored for
``encrypt_for`` when both are given; otherwise only readers given the key
can read the bag).

A Writer must be closed (``close()`` or a ``with`` block): until then the
last chunk and the index are not in the file. One garbage-collected unclosed
is closed then, with a :class:`~fastbag.errors.FastbagWarning`.
"""

from __future__ import annotations

import bz2
import contextlib
import gc
import os
import re
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..container import Connection
from ..errors import DefinitionError, FastbagError, FastbagWarning
from ..io.source import is_mapped
from ..msg.messages import Record, time_ns
from ..msg.msgdef import EMPTY_MD5, parse_definition
from .encryption import AES_CBC, BLOCK, AesCbcEncryptor, gpg_encrypt_key
from .records import MAGIC_V20, Op

_U32 = struct.Struct("<I")
_TIME = struct.Struct("<II")
BAG_HEADER_SIZE = 4096  # the bag header record is padded to this many bytes


def _field(name: str, value: bytes) -> bytes:
    raw = name.encode() + b"=" + value
    return _U32.pack(len(raw)) + raw


def _time(ns: int) -> bytes:
    sec, nsec = divmod(int(ns), 1_000_000_000)
    if not 0 <= sec < 1 << 32:
        raise ValueError(f"time {ns} ns does not fit a ROS1 time (u32 seconds)")
    return _TIME.pack(sec, nsec)


#: The largest record data (and chunk) a u32 length holds.
U32_MAX = (1 << 32) - 1


def record(fields: list[tuple[str, bytes]], data: bytes | bytearray | memoryview) -> bytes:
    """One record: header from ``fields``, then ``data`` (bytes, or a view of bytes: its length is theirs)."""
    header = b"".join(_field(n, v) for n, v in fields)
    data = bytes(data)
    if len(data) > U32_MAX:
        raise ValueError(f"a record of {len(data)} bytes does not fit a ROS1 bag (a u32 length: 4 GiB at most)")
    return _U32.pack(len(header)) + header + _U32.pack(len(data)) + data


def compressor(compression: str) -> Callable[[bytes | bytearray], bytes]:
    """The chunk compressor for ``compression``, its module imported now: a Writer left open closes when the
    interpreter exits, when importing is no longer possible (an lz4 bag then lost every message)."""
    if compression == "none":
        return bytes
    if compression == "bz2":
        return lambda data: bz2.compress(data, 9)
    import lz4.frame

    def lz4_frame(data: bytes | bytearray) -> bytes:
        # Framed as roslz4 (rosbag's lz4) frames them: independent 1 MB blocks, a content checksum, no content
        # size (FLG 0x64, BD 0x60). The streaming compressor keeps the block size for small chunks too, as
        # roslz4's stream does (lz4.frame.compress would shrink it to fit).
        framer = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX1MB, block_linked=False,
                                              content_checksum=True)
        return framer.begin() + framer.compress(bytes(data)) + framer.flush()

    return lz4_frame


def _text(value: Any, name: str) -> str:
    """A connection field as text: bytes (a reader's ``Connection.header`` values) decoded, others refused."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    raise TypeError(f"{name} is text (str), not {type(value).__name__} {value!r:.60}")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _latching_field(value: Any) -> bytes | None:
    """The ``latching`` field a connection record holds for ``value``: ``b"1"`` for True (or 1), none for False,
    0 or None (as before: a bag's readers take both as not latched), and the text a reader's
    ``connection.header`` holds (``b"0"``, ``"1"``) as it is, so that a copy keeps it; any other text was
    taken as true (``latching=b"0"`` wrote a latched connection) and is refused now."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, str)):
        text = value.decode("ascii", "replace") if isinstance(value, (bytes, bytearray)) else value
        if text.strip() in ("0", "1"):
            return text.strip().encode()
    elif isinstance(value, (bool, np.bool_)) or isinstance(value, (int, np.integer)) and value in (0, 1):
        return b"1" if value else None
    raise TypeError(f"latching is a bool (or 0, 1, '0', '1'), not {type(value).__name__} {value!r:.40}")


def _aes_key(key: Any) -> bytes:
    """An AES key given as bytes: 16 of them (``bytes(16)`` of an int was a key of zeros; text is refused, as it
    is no key of its own)."""
    if isinstance(key, str):
        raise TypeError("aes_key is 16 bytes, not str: for a key in hex, pass bytes.fromhex(text)")
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"aes_key is 16 bytes, not {type(key).__name__} {key!r:.40}")
    key = bytes(key)
    if len(key) != BLOCK:
        raise ValueError(f"aes_key is {BLOCK} bytes (AES-128, as rosbag's encryptor uses), not {len(key)}")
    return key


def _check_md5sum(msgtype: str, definition: str, md5sum: str) -> None:
    """A FastbagWarning where ``md5sum`` is not the md5sum of ``definition`` (rosbag warns of such a bag, rosbags
    refuses it), or where either is missing (readers then cannot check or decode the messages)."""
    if md5sum == "*" or not definition.strip() and md5sum != EMPTY_MD5:  # (an empty type: "" and EMPTY_MD5)
        missing = " and ".join(n for n, v in (("definition", definition.strip()), ("md5sum", md5sum != "*")) if not v)
        warnings.warn(FastbagWarning(f"{msgtype}: no {missing} given: readers cannot decode or check its messages "
                                     "(rosbags refuses such a bag)"), stacklevel=3)
        return
    try:
        computed = parse_definition(msgtype, definition, allow_empty=True).md5sum()
    except DefinitionError as exc:  # (a type's text without its MSG: sections, most often)
        warnings.warn(FastbagWarning(f"{msgtype}: its definition does not parse ({exc}): readers decode a bag's "
                                     "messages from it, and will not decode these (a definition holds the types "
                                     "it uses too, in MSG: sections)"), stacklevel=3)
        return
    if computed != md5sum:
        warnings.warn(FastbagWarning(f"{msgtype}: md5sum {md5sum} is not its definition's ({computed}): rosbag "
                                     "warns of such a bag, and rosbags refuses it"), stacklevel=3)


def _serialized(data: Any) -> bytes | bytearray | memoryview:
    """``data``, a message's serialized bytes, as bytes: a buffer of wider items (a NumPy int32 array, a
    memoryview of one) by its bytes, not its items (their count was stored as the record's length, cutting
    the message); TypeError, saying what to pass, for anything that is no buffer."""
    _check_bytes(data)
    if isinstance(data, (bytes, bytearray)):
        return data
    view = memoryview(data)
    return view.cast("B") if view.c_contiguous else view.tobytes()


def _check_bytes(data: Any) -> None:
    """TypeError, saying what to pass, unless ``data`` is a message's serialized bytes (bytes-like)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return
    if isinstance(data, str):
        raise TypeError("data is a message's serialized bytes, not str")
    if isinstance(data, Record):
        raise TypeError(f"data is a message's serialized bytes, not a decoded {data._type}: write m.data of "
                        "bag.messages(raw=True) (fastbag's messages are not serialized again)")
    if callable(getattr(data, "serialize", None)):  # a genpy message
        raise TypeError(f"data is a message's serialized bytes, not a {type(data).__name__}: serialize it "
                        "(msg.serialize(buffer) into an io.BytesIO)")
    if hasattr(data, "data") and hasattr(data, "topic") and hasattr(data, "connection"):  # a fastbag Message
        raise TypeError("data is a message's serialized bytes: write m.data, not the message m")
    try:
        memoryview(data)
    except TypeError:
        raise TypeError(f"data is a message's serialized bytes, not {type(data).__name__}") from None


@dataclass
class _OpenChunk:
    data: bytearray
    start: int | None = None
    end: int | None = None


class Writer:
    """Write a ROS1 format 2.0 bag.

    ``compression`` is ``"none"``, ``"bz2"`` or ``"lz4"``; a chunk is closed
    once its uncompressed payload reaches ``chunk_size`` bytes.
    ``encrypt_for`` (a GPG user whose public key is in the keyring) and/or
    ``aes_key`` (16 bytes) encrypt the bag as ``rosbag record
    --encrypt-with-gpg-user`` does; needs ``pip install 'fastbag[encryption]'``.
    """

    def __init__(self, path: str | os.PathLike[str], *, compression: str = "none",
                 chunk_size: int = 768 * 1024, encrypt_for: str | None = None,
                 aes_key: bytes | None = None) -> None:
        if compression not in ("none", "bz2", "lz4"):
            raise ValueError(f"compression must be 'none', 'bz2' or 'lz4', not {compression!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
            raise TypeError(f"chunk_size is a number of bytes (an int), not {type(chunk_size).__name__} "
                            f"{chunk_size!r:.40}")
        if chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        self.path = os.fspath(path)
        # "wb" would truncate the file under a reader's mapping: SIGBUS, input lost. Decoded arrays hold views
        # of the file in reference cycles (an array and its messages' source): collect those first.
        if is_mapped(self.path):
            gc.collect()
        if is_mapped(self.path):
            raise ValueError(f"{self.path} is open for reading in this process (fastbag.open, or arrays still "
                             "viewing a closed bag's file); writing it in place would destroy it. Write to another "
                             "path, then rename that onto this one (os.replace) once the bag is closed")
        self.compression = compression
        self._compress = compressor(compression)
        self.chunk_size = chunk_size
        self._encryption: list[tuple[str, bytes]] = []  # bag header fields
        self._encryptor: AesCbcEncryptor | None = None
        if encrypt_for is not None or aes_key is not None:
            key = _aes_key(aes_key) if aes_key is not None else os.urandom(BLOCK)
            self._encryptor = AesCbcEncryptor(key)
            wrapped = b""
            if encrypt_for is not None:
                try:
                    wrapped = gpg_encrypt_key(key, encrypt_for)
                except (OSError, RuntimeError) as exc:
                    raise FastbagError(f"cannot encrypt the bag's key for GPG user {encrypt_for!r}: {exc}; is "
                                       "the user's public key in the keyring?") from exc
            self._encryption = [("encryptor", AES_CBC.encode()), ("gpg_user", (encrypt_for or "").encode()),
                                ("encrypted_key", wrapped)]
        self._file = open(self.path, "wb")
        self._file.write(MAGIC_V20)
        self._file.write(self._bag_header(0, 0, 0))
        self.connections: list[Connection] = []
        self._latching: list[bytes | None] = []  # each connection's latching field (None: none)
        self._chunk = _OpenChunk(bytearray())
        self._chunk_index: dict[int, list[tuple[int, int]]] = {}  # conn -> [(time, offset)]
        self._in_chunk: set[int] = set()  # connections whose record this chunk already holds
        self._written: set[int] = set()   # connections whose record some chunk holds
        self._chunk_infos: list[bytes] = []

    def add_connection(self, topic: str, msgtype: str, definition: str = "", md5sum: str = "*",
                       *, callerid: str | None = None, latching: bool | str | bytes | None = False) -> Connection:
        """Declare a connection (a topic with a message type); returns it for :meth:`write`.

        ``msgtype`` is a ROS1 type name, ``pkg/Type``: a ROS 2 one (``pkg/msg/Type``) is refused (ValueError),
        since a ROS 2 recording's messages are CDR bytes, which no ROS1 reader decodes. ``latching``: True
        writes ``latching=1``, False or None no such field, and the text a reader's ``connection.header`` holds
        (``b"0"``, ``b"1"``) that text, so that a copy keeps the header as it was."""
        self._check_open()
        topic, msgtype, definition, md5sum = (_text(value, name) for value, name in (
            (topic, "topic"), (msgtype, "msgtype"), (definition, "definition"), (md5sum, "md5sum")))
        callerid = None if callerid is None else _text(callerid, "callerid")
        latching_field = _latching_field(latching)
        for value, name in ((topic, "topic"), (msgtype, "msgtype"), (definition, "definition"),
                            (callerid or "", "callerid")):
            try:
                _bytes(value)
            except UnicodeEncodeError as exc:  # (close() met it writing the index: a bag without one)
                raise ValueError(f"{name} {value!r:.60} holds {value[exc.start:exc.end]!r}, which is no text a "
                                 "bag can hold (UTF-8)") from None
        if not topic or not msgtype:  # (rosbag's writer refuses them; rosbags cannot open such a bag)
            raise ValueError(f"a connection needs a topic and a message type, not {topic!r} and {msgtype!r}")
        if md5sum != "*" and not re.fullmatch(r"[0-9a-f]{32}", md5sum):
            raise ValueError(f"md5sum is 32 lowercase hex digits (or '*'), not {md5sum!r}")
        if msgtype.count("/") > 1:
            raise ValueError(f"{msgtype!r} is a ROS 2 type name: a ROS1 bag holds ROS1 messages (pkg/Type), and a "
                             "ROS 2 recording's are CDR bytes, which no ROS1 reader decodes (fastbag writes ROS1 "
                             "bags only)")
        _check_md5sum(msgtype, definition, md5sum)
        connection = Connection(len(self.connections), topic, msgtype, md5sum, definition, callerid,
                                latching_field == b"1")
        self._latching.append(latching_field)
        self.connections.append(connection)
        return connection

    def write(self, connection: Connection, time: Any, data: bytes | bytearray | memoryview) -> None:
        """Append one serialized message received at ``time``.

        ``time`` is int nanoseconds since the epoch (a Python or NumPy int), or a
        time with ``to_nsec()`` (fastbag's or genpy's ``Time``), as
        :func:`fastbag.bag.time_ns` reads it; a float is refused (TypeError),
        since seconds would be stored as nanoseconds.
        """
        self._check_open()
        if not isinstance(connection, Connection):
            swapped = " (rosbag's write(topic, msg, t) order)" if isinstance(connection, str) else ""
            raise TypeError(f"write(connection, time, data): connection is what add_connection returned, not "
                            f"{type(connection).__name__} {connection!r:.60}{swapped}")
        data = _serialized(data)
        time = time_ns(time)
        if time is None:
            raise TypeError("time must be int nanoseconds since the epoch or a Time, not None")
        if not (0 <= connection.id < len(self.connections)) or self.connections[connection.id] is not connection:
            raise FastbagError(f"connection {connection.topic!r} was not added to this writer")
        message = record([("op", bytes([Op.MSG_DATA])), ("conn", _U32.pack(connection.id)),
                          ("time", _time(time))], data)  # validates the time before anything is recorded
        if len(self._chunk.data) + len(message) + self._connection_bytes(connection) > U32_MAX:
            self._flush_chunk()  # (a chunk's size is a u32: close it before it would pass 4 GiB)
        chunk = self._chunk
        if connection.id not in self._in_chunk and connection.id not in self._written:
            chunk.data += self._connection_record(connection)
            self._in_chunk.add(connection.id)
        self._chunk_index.setdefault(connection.id, []).append((time, len(chunk.data)))
        chunk.data += message
        chunk.start = time if chunk.start is None else min(chunk.start, time)
        chunk.end = time if chunk.end is None else max(chunk.end, time)
        if len(chunk.data) >= self.chunk_size:
            self._flush_chunk()

    def _connection_bytes(self, connection: Connection) -> int:
        """Bytes the chunk takes for ``connection``'s record before its next message (0 where it holds it)."""
        if connection.id in self._in_chunk or connection.id in self._written:
            return 0
        return len(self._connection_record(connection))

    # -- records ---------------------------------------------------------------
    def _bag_header(self, index_pos: int, conn_count: int, chunk_count: int) -> bytes:
        header = b"".join([
            _field("op", bytes([Op.BAG_HEADER])), _field("index_pos", struct.pack("<Q", index_pos)),
            _field("conn_count", _U32.pack(conn_count)), _field("chunk_count", _U32.pack(chunk_count)),
            *(_field(n, v) for n, v in self._encryption)])
        padding = BAG_HEADER_SIZE - 8 - len(header)
        if padding < 0:
            raise FastbagError(f"the bag header ({len(header)} bytes with the encrypted key) does not fit "
                               f"{BAG_HEADER_SIZE} bytes")
        return _U32.pack(len(header)) + header + _U32.pack(padding) + b" " * padding

    def _connection_record(self, c: Connection, encrypt: bool = False) -> bytes:
        # (surrogate escapes, as bytes.decode(..., "surrogateescape") makes them, are written as the bytes they are)
        data_fields = [("topic", _bytes(c.topic)), ("type", _bytes(c.msgtype)), ("md5sum", _bytes(c.md5sum)),
                       ("message_definition", _bytes(c.definition))]
        if c.callerid is not None:
            data_fields.append(("callerid", _bytes(c.callerid)))
        if self._latching[c.id] is not None:  # ("0" too, where given so: a copy keeps what its source held)
            data_fields.append(("latching", self._latching[c.id]))
        data = b"".join(_field(n, v) for n, v in data_fields)
        fields = [("op", bytes([Op.CONNECTION])), ("conn", _U32.pack(c.id)), ("topic", _bytes(c.topic))]
        if encrypt and self._encryptor is not None:  # the index section's copy: header and data each encrypted
            header = self._encryptor.encrypt(b"".join(_field(n, v) for n, v in fields))
            data = self._encryptor.encrypt(data)
            return _U32.pack(len(header)) + header + _U32.pack(len(data)) + data
        return record(fields, data)

    def _flush_chunk(self) -> None:
        chunk = self._chunk
        if not self._chunk_index:
            return
        position = self._file.tell()
        payload = self._compress(chunk.data)
        if self._encryptor is not None:
            payload = self._encryptor.encrypt(payload)
        self._file.write(record([("op", bytes([Op.CHUNK])), ("compression", self.compression.encode()),
                                 ("size", _U32.pack(len(chunk.data)))], payload))
        for conn_id, entries in sorted(self._chunk_index.items()):
            # in time order (stable for equal times), as rosbag writes them: rosbag reads and bisects them as is
            entries = sorted(entries, key=lambda entry: entry[0])
            data = b"".join(_time(t) + _U32.pack(off) for t, off in entries)
            self._file.write(record([("op", bytes([Op.INDEX_DATA])), ("ver", _U32.pack(1)),
                                     ("conn", _U32.pack(conn_id)), ("count", _U32.pack(len(entries)))], data))
        counts = b"".join(_U32.pack(c) + _U32.pack(len(e)) for c, e in sorted(self._chunk_index.items()))
        self._chunk_infos.append(record([
            ("op", bytes([Op.CHUNK_INFO])), ("ver", _U32.pack(1)), ("chunk_pos", struct.pack("<Q", position)),
            ("start_time", _time(chunk.start)), ("end_time", _time(chunk.end)),
            ("count", _U32.pack(len(self._chunk_index)))], counts))
        self._written |= self._in_chunk
        self._in_chunk = set()
        self._chunk = _OpenChunk(bytearray())
        self._chunk_index = {}

    # -- lifetime --------------------------------------------------------------
    def _check_open(self) -> None:
        if self._file.closed:
            raise ValueError(f"writer for {self.path} is closed")

    def close(self) -> None:
        """Flush the last chunk, write the index section and the final bag header. The file is closed even
        where writing them fails (a full disk: the error is raised; fastbag.open recovers what is complete)."""
        if self._file.closed:
            return
        try:
            self._flush_chunk()
            index_pos = self._file.tell()
            for connection in self.connections:
                self._file.write(self._connection_record(connection, encrypt=True))
            for info in self._chunk_infos:
                self._file.write(info)
            self._file.seek(len(MAGIC_V20))
            self._file.write(self._bag_header(index_pos, len(self.connections), len(self._chunk_infos)))
        except BaseException:
            # (closing flushes what could not be written, and fails again: the first error is the one to raise;
            # the file is closed all the same)
            with contextlib.suppress(OSError):
                self._file.close()
            raise
        self._file.close()

    def __del__(self) -> None:
        """Close a Writer garbage-collected unclosed (its open chunk would be lost), with a warning.

        Never raises: at interpreter shutdown what closing needs may already be gone.
        """
        file = getattr(self, "_file", None)  # None: __init__ failed before opening the file
        if file is None or file.closed:
            return
        problem = ""
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - a finalizer must not raise
            problem = f", but closing it failed ({exc}): the file has no index (fastbag.open recovers it)"
        try:
            warnings.warn(f"fastbag.Writer for {self.path} was never closed; it was closed when garbage-collected"
                          f"{problem}. Call close() or use 'with fastbag.Writer(...) as w:'", FastbagWarning,
                          stacklevel=2)
        except Exception:  # noqa: BLE001, S110 - e.g. warnings turned into errors, or shutting down
            pass

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
