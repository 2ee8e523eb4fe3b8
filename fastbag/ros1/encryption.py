"""Encrypted ROS1 bags: rosbag_storage's ``rosbag/AesCbcEncryptor``.

What rosbag writes (``rosbag record --encrypt-with-gpg-user USER``; the C++
``AesCbcEncryptor`` and the classic Python module agree):

- the bag header gains ``encryptor=rosbag/AesCbcEncryptor``, ``gpg_user``
  (the GPG user the key was encrypted for) and ``encrypted_key`` (a random
  AES-128 key, encrypted to that user's GPG public key: an OpenPGP message,
  ASCII-armored by the Python module, binary by the C++ one);
- every chunk's stored payload (after compression) becomes a 16-byte random
  IV, then the AES-128-CBC ciphertext of the payload with PKCS#7 padding.
  The chunk header keeps its ``compression`` and ``size`` (uncompressed);
  its data length is the encrypted length;
- each connection record of the index section becomes two sized blocks,
  ``u32 len | IV | ciphertext`` of the record header, then the same of the
  connection data. Connection records inside chunks, index-data and
  chunk-info records are not encrypted (the chunks as a whole are).

Decrypting needs the ``cryptography`` package (``pip install
'fastbag[encryption]'``); the key comes from ``gpg --decrypt`` of
``encrypted_key`` (the user's keyring and gpg-agent, as rosbag does) or is
given directly. Whole chunks decrypt into recycled buffers on the chunk
store's worker threads (:mod:`fastbag.io.chunks`), then decompress as usual.

CBC carries no authentication: a wrong key is recognized because the
connection records then fail to unpad and parse, and damage is found by bad
padding, a compressed payload that no longer decompresses (lz4 and bz2 carry
checksums) or records that no longer parse. Damage inside the message bytes
of an uncompressed chunk cannot be seen by any reader of this format.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..container import Connection, Encryption
from ..errors import BagFormatError, DecryptionError, EncryptionKeyError, FastbagError, UnsupportedError
from ..io.source import Source
from .records import Header, Op, connection_from_headers

AES_CBC = "rosbag/AesCbcEncryptor"
NO_ENCRYPTOR = "rosbag/NoEncryptor"
BLOCK = 16  # AES block and key size (AES-128), and the IV's length
INSTALL_HINT = "pip install 'fastbag[encryption]'"
#: rosbag reads a passphrase for the GPG key from this environment variable too.
PASSPHRASE_ENV = "ROSBAG_GPG_PASSPHRASE"


@dataclass(frozen=True)
class EncryptionHeader:
    """The encryption fields of a bag header."""

    encryptor: str
    gpg_user: str
    encrypted_key: bytes

    @property
    def public(self) -> Encryption:
        return Encryption(self.encryptor, self.gpg_user)


def header_encryption(header: Header) -> EncryptionHeader | None:
    """The bag header's encryption fields, or None for a bag that is not encrypted.

    UnsupportedError for an encryptor other than rosbag's AES-CBC one.
    """
    if "encryptor" not in header:
        return None
    name = header.text("encryptor", "")
    if name in ("", NO_ENCRYPTOR):
        return None
    if name != AES_CBC:
        raise UnsupportedError(f"bag encryptor {name!r} is not supported (known: {AES_CBC}) "
                               f"({header.path}, offset {header.offset - 4}, bag header record)")
    return EncryptionHeader(name, header.text("gpg_user", ""), header.fields.get("encrypted_key", b""))


def _cipher_module() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError:
        raise UnsupportedError(f"this bag is encrypted; decrypting needs the cryptography package: {INSTALL_HINT}") \
            from None
    return Cipher, algorithms, modes


class BadCiphertext(ValueError):
    """Bytes that do not decrypt: a length that is not whole blocks, or bad padding."""


def unpadded_length(plain: np.ndarray | bytes) -> int:
    """The length of PKCS#7-padded ``plain`` without its padding (BadCiphertext when the padding is bad)."""
    n = len(plain)
    pad = int(plain[n - 1]) if n else 0
    if not 1 <= pad <= BLOCK or pad > n or any(int(b) != pad for b in plain[n - pad:n]):
        raise BadCiphertext("its PKCS#7 padding is invalid")
    return n - pad


class AesCbcDecryptor:
    """rosbag's AES-128-CBC payload cipher with one key: a :class:`~fastbag.io.chunks.PayloadTransform`.

    ``verified`` is set once the key has decrypted one of the bag's own
    records to a well-formed header; from then on a payload that does not
    decrypt is damage, not a wrong key.
    """

    name = "AES-CBC encrypted"

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray, memoryview)) or len(bytes(key)) != BLOCK:
            raise ValueError(f"aes_key must be {BLOCK} bytes (AES-128), not {key!r:.40}")
        self.key = bytes(key)
        self.verified = False
        self._cipher, self._algorithms, self._modes = _cipher_module()

    def _decryptor(self, iv: bytes) -> Any:
        return self._cipher(self._algorithms.AES(self.key), self._modes.CBC(iv)).decryptor()

    def _check_length(self, n: int) -> None:
        if n % BLOCK:
            raise BadCiphertext(f"its {n} bytes are not a whole number of {BLOCK}-byte blocks")
        if n < 2 * BLOCK:
            raise BadCiphertext(f"its {n} bytes hold no initialization vector and ciphertext")

    def __call__(self, raw: np.ndarray, allocate: Callable[[int], np.ndarray] | None = None) -> np.ndarray:
        """The plaintext of one payload (IV + ciphertext), unpadded, in a buffer from ``allocate``."""
        self._check_length(raw.size)
        body = raw[BLOCK:]
        # cryptography asks for one block of room past the data it decrypts into a buffer
        out = allocate(body.size + BLOCK) if allocate is not None else np.empty(body.size + BLOCK, dtype=np.uint8)
        decryptor = self._decryptor(raw[:BLOCK].tobytes())
        n = decryptor.update_into(body, out)
        decryptor.finalize()
        try:
            size = unpadded_length(out[n - BLOCK:n]) + n - BLOCK
        except BadCiphertext:
            raise BadCiphertext("its PKCS#7 padding is invalid: the ciphertext is damaged" if self.verified else
                                "its PKCS#7 padding is invalid: a wrong key, or damaged ciphertext") from None
        return out[:size]

    def decrypt(self, data: bytes) -> bytes:
        """The plaintext of a small sized block (IV + ciphertext), unpadded."""
        return self(np.frombuffer(data, dtype=np.uint8)).tobytes()

    def prefix(self, raw: np.ndarray) -> bytes:
        """What decrypts of a payload cut off by the end of the file: its whole blocks, padding unchecked."""
        whole = raw.size // BLOCK * BLOCK
        if whole < 2 * BLOCK:
            return b""
        decryptor = self._decryptor(raw[:BLOCK].tobytes())
        return decryptor.update(raw[BLOCK:whole].tobytes())


class AesCbcEncryptor:
    """The writing side: payloads and headers as rosbag encrypts them (random IV, PKCS#7 padding)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != BLOCK:
            raise ValueError(f"aes_key must be {BLOCK} bytes (AES-128)")
        self.key = bytes(key)
        self._cipher, self._algorithms, self._modes = _cipher_module()

    def encrypt(self, data: bytes | bytearray | memoryview) -> bytes:
        """A random IV, then the ciphertext of ``data`` padded to whole blocks."""
        iv = os.urandom(BLOCK)
        pad = BLOCK - len(data) % BLOCK
        encryptor = self._cipher(self._algorithms.AES(self.key), self._modes.CBC(iv)).encryptor()
        return iv + encryptor.update(bytes(data)) + encryptor.update(bytes([pad]) * pad) + encryptor.finalize()


# -- the key through GnuPG ------------------------------------------------------------

def _gpg() -> str:
    found = shutil.which("gpg")
    if found is None:
        raise FileNotFoundError("the gpg program (GnuPG) is not installed")
    return found


def gpg_decrypt_key(encrypted_key: bytes, passphrase: str | None = None, *, timeout: float = 300) -> bytes:
    """The AES key inside ``encrypted_key`` (an OpenPGP message), decrypted by ``gpg``.

    The user's keyring (``$GNUPGHOME``) and gpg-agent are used as rosbag uses
    them; a ``passphrase`` (or ``$ROSBAG_GPG_PASSPHRASE``) goes to gpg through
    loopback pinentry. RuntimeError with gpg's message when it fails.
    """
    passphrase = passphrase if passphrase is not None else os.environ.get(PASSPHRASE_ENV)
    with tempfile.TemporaryDirectory(prefix="fastbag-key-") as folder:
        message = os.path.join(folder, "key.gpg")
        with open(message, "wb") as f:
            f.write(encrypted_key)  # encrypted: nothing secret lands on disk
        command = [_gpg(), "--batch", "--quiet", "--no-tty", "--decrypt"]
        if passphrase is not None:
            command += ["--pinentry-mode", "loopback", "--passphrase-fd", "0"]
        done = subprocess.run([*command, message], input=(passphrase + "\n").encode() if passphrase is not None
                              else None, stdin=None if passphrase is not None else subprocess.DEVNULL,
                              capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        raise RuntimeError("; ".join(lines[-3:]) or f"gpg exited with status {done.returncode}")
    return done.stdout


def gpg_encrypt_key(key: bytes, user: str, *, timeout: float = 60) -> bytes:
    """``key`` encrypted by ``gpg`` to ``user``'s public key, ASCII-armored (as the classic rosbag module
    writes it; rosbag's C++ reader takes it too). RuntimeError with gpg's message when it fails."""
    done = subprocess.run([_gpg(), "--batch", "--quiet", "--no-tty", "--armor", "--trust-model", "always",
                           "--encrypt", "--recipient", user], input=key, capture_output=True, timeout=timeout,
                          check=False)
    if done.returncode != 0 or not done.stdout:
        lines = [line.strip() for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        raise RuntimeError("; ".join(lines[-3:]) or f"gpg exited with status {done.returncode}")
    return done.stdout


def bag_decryptor(source: Source, header: Header, encryption: EncryptionHeader, *, aes_key: bytes | None,
                  passphrase: str | None) -> AesCbcDecryptor:
    """The decryptor of an encrypted bag: from ``aes_key``, or from its encrypted key through gpg."""
    where = dict(path=source.path, offset=header.offset - 4, record="bag header", encryption=encryption.public)
    if aes_key is not None:
        return AesCbcDecryptor(aes_key)
    if not encryption.encrypted_key:
        raise EncryptionKeyError("the bag is encrypted but its header holds no encrypted key; pass aes_key=",
                                 **where)
    _cipher_module()  # the install hint before asking gpg for anything
    try:
        key = gpg_decrypt_key(encryption.encrypted_key, passphrase)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        raise EncryptionKeyError(f"the bag's AES key, encrypted for GPG user {encryption.gpg_user!r}, does not "
                                 f"decrypt through gpg ({exc}); is the private key in this keyring, and the "
                                 f"passphrase right? (or pass aes_key=)", **where) from exc
    if len(key) != BLOCK:
        raise EncryptionKeyError(f"gpg decrypted the bag's key to {len(key)} bytes, not an AES-128 key", **where)
    return AesCbcDecryptor(key)


# -- connection records of the index section --------------------------------------------

def read_sized_block(source: Source, offset: int, what: str) -> tuple[bytes, int]:
    """The ``u32 len | bytes`` block at ``offset`` (checked against the file) and where it ends."""
    n = source.u32(offset, what)
    return source.bytes(offset + 4, n, what), offset + 4 + n


def read_encrypted_connection(source: Source, offset: int, decryptor: AesCbcDecryptor) -> tuple[Connection, int]:
    """The encrypted connection record at ``offset`` (two encrypted sized blocks: header, data); where it ends.

    DecryptionError when a block does not decrypt or parse.
    """
    headers = []
    pos = offset
    for part in ("header", "data"):
        block, end = read_sized_block(source, pos, "connection")
        try:
            plain = decryptor.decrypt(block)
        except BadCiphertext as exc:
            raise DecryptionError(f"the encrypted connection {part} does not decrypt: {exc}", path=source.path,
                                  offset=pos, record="connection") from exc
        try:
            headers.append(Header.parse(plain, path=f"{source.path} (decrypted)", offset=0, record="connection"))
        except BagFormatError as exc:
            raise DecryptionError(f"the encrypted connection {part} decrypts to no header ({exc})",
                                  path=source.path, offset=pos, record="connection") from exc
        pos = end
    header, data = headers
    try:
        if header.op() != Op.CONNECTION:
            raise BagFormatError("not a connection record", path=source.path, offset=offset, record="connection")
        connection = connection_from_headers(header, data)
    except BagFormatError as exc:
        raise DecryptionError(f"the encrypted connection record decrypts to a malformed record ({exc})",
                              path=source.path, offset=offset, record="connection") from exc
    return connection, pos


def verify_key(source: Source, index_pos: int, conn_count: int, decryptor: AesCbcDecryptor,
               encryption: EncryptionHeader) -> None:
    """Check the key on the index section's encrypted connection records before anything else.

    With a wrong key none of them decrypts to a header (AES-CBC has no other
    check value); if some do, the key is right and the others are damaged,
    which the index reader reports. EncryptionKeyError when none does.
    """
    pos, tried, failures = index_pos, 0, []
    for _ in range(conn_count):
        try:
            _, pos = read_encrypted_connection(source, pos, decryptor)
        except DecryptionError as exc:
            failures.append(exc)
            try:  # skip the record's two blocks to try the next
                pos = read_sized_block(source, read_sized_block(source, pos, "connection")[1], "connection")[1]
            except FastbagError:
                break
        except FastbagError:
            break  # a damaged index section: the index reader explains it (and rebuilds)
        else:
            decryptor.verified = True
            return
        finally:
            tried += 1
    if failures and len(failures) == tried:
        several = f"any of the {tried} encrypted connection records" if tried > 1 else \
            "the encrypted connection record (or the record is damaged)"
        raise EncryptionKeyError(f"the AES key does not decrypt {several}: it is not this bag's key (GPG user "
                                 f"{encryption.gpg_user!r})", path=source.path, offset=failures[0].offset,
                                 record="connection", encryption=encryption.public) from failures[0]
