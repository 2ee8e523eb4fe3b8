"""The exceptions fastbag raises.

Everything derives from :class:`FastbagError`, so ``except fastbag.FastbagError``
catches every failure that comes from the file rather than from a bug.
Messages are one sentence and name the file, the byte offset and the record.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable


class FastbagError(Exception):
    """Root of every error fastbag raises for bad input or unsupported data."""


class BagFormatError(FastbagError):
    """The file is malformed: a record, header field or length is wrong.

    ``path``, ``offset`` (byte offset in the file, or None) and ``record``
    (the record kind being read) say where.
    """

    def __init__(self, message: str, *, path: str | None = None,
                 offset: int | None = None, record: str | None = None) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if offset is not None:
            where.append(f"offset {offset}")
        if record is not None:
            where.append(f"{record} record")
        text = f"{message} ({', '.join(where)})" if where else message
        super().__init__(text)
        self.path = path
        self.offset = offset
        self.record = record


class DecryptionError(BagFormatError):
    """Encrypted data does not decrypt with a key known to be the bag's: the ciphertext is damaged
    (bad padding, a length that is not a whole number of cipher blocks, a payload that no longer
    decompresses)."""


class EncryptionKeyError(FastbagError):
    """An encrypted bag's key cannot be had (no keyring holds it, a wrong passphrase, ``gpg`` or the
    ``cryptography`` package missing) or the key given is not the bag's.

    ``path``, ``offset`` and ``record`` say where, as for :class:`BagFormatError`; ``encryption``
    says how the bag is encrypted and for whom (a :class:`fastbag.container.Encryption`), so that
    a tool can still describe the bag.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 record: str | None = None, encryption: object = None) -> None:
        where = [str(path)] if path is not None else []
        if offset is not None:
            where.append(f"offset {offset}")
        if record is not None:
            where.append(f"{record} record")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.path = path
        self.offset = offset
        self.record = record
        self.encryption = encryption


class UnsupportedError(FastbagError):
    """The file is well formed but uses something fastbag does not support."""


class DefinitionError(FastbagError):
    """A message definition cannot be parsed or resolved."""


class DecodeError(FastbagError):
    """A message cannot be decoded: ``topic`` and ``index`` say which (``index``: its position among the
    topic's messages in read order, ``bag.read(topic)[index]``, whichever part of the topic was read)."""

    def __init__(self, message: str, *, topic: str | None = None,
                 index: int | None = None, msgtype: str | None = None) -> None:
        self.reason = message
        where = []
        if topic is not None:
            where.append(f"topic {topic}")
        if msgtype is not None:
            where.append(f"type {msgtype}")
        if index is not None:
            where.append(f"message {index}")
        text = f"{message} ({', '.join(where)})" if where else message
        super().__init__(text)
        self.topic = topic
        self.index = index
        self.msgtype = msgtype

    def at(self, index: int) -> DecodeError:
        """The same error, of the message at ``index`` (a position in a part translated to the topic's)."""
        return type(self)(self.reason, topic=self.topic, index=index, msgtype=self.msgtype)


class NotFoundError(FastbagError, KeyError):
    """The bag has no such topic or message type, or a message no such field.

    Also a ``KeyError``, so code written for dict-like lookups (``except KeyError``) still catches it.
    """

    def __str__(self) -> str:  # KeyError's own quotes its message, as a repr
        return str(self.args[0]) if self.args else ""


class NoMessagesError(FastbagError, ValueError):
    """The bag holds no messages where some were needed (its start and end time)."""


class FastbagWarning(UserWarning):
    """A bag was readable only in part, or disagrees with itself; or an argument was read one of two ways
    (a naive datetime as local time)."""


class TooLarge(ValueError):
    """A payload decompresses to more bytes than its limit (its chunk header's size).

    An internal signal between a codec and its caller, who turns it into a
    :class:`BagFormatError` naming the file, offset and record.
    """


def close_matches(name: str, names: Iterable[str]) -> str:
    """`` (did you mean '/imu'?)`` for the names closest to a mistyped ``name``, else ``""``: said before a
    bag's whole list of topics or a type's fields, which may run to hundreds."""
    import difflib  # (on first use: `import fastbag` stays light)

    near = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(map(repr, near))}?)" if near else ""


#: errno values of a process or machine out of resources (descriptors, memory, disk space or quota, a file size
#: limit): not damage, so said as the OSError they are, naming the file, never as a FastbagError about the
#: recording.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC, errno.EFBIG,
                              getattr(errno, "EDQUOT", errno.ENOSPC)})


def out_of_resources(exc: BaseException, path: str, doing: str) -> OSError | None:
    """``exc`` said again as an OSError naming ``path`` and what was being done, where it is the process or the
    machine out of resources (see OUT_OF_RESOURCES); None for any other error. (An OSError from loading a
    kernel, say, names a module file, not the bag.)"""
    if not isinstance(exc, OSError) or exc.errno not in OUT_OF_RESOURCES:
        return None
    other = f", at {exc.filename}" if exc.filename and exc.filename != path else ""
    return OSError(exc.errno, f"{exc.strerror} ({doing}{other})", path)
