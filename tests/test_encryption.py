"""Encrypted ROS1 bags (rosbag_storage's ``rosbag/AesCbcEncryptor``), proved against the classic rosbag module.

- **Oracle.** The classic ``rosbag`` module (the ``py3rosmsgs`` wheel) writes
  the encrypted bags, ``none`` and ``bz2`` (its Python build has no lz4), and
  the same recording unencrypted. Every message fastbag reads from the
  encrypted bag equals what the classic module reads from it and what
  fastbag and rosbags read from the plain copy (rosbags refuses encrypted
  bags: "Bag encryption 'rosbag/AesCbcEncryptor' is not supported").
- **Real GnuPG, once.** The classic module's GPG step calls python-gnupg's
  API (``gnupg.GPG().encrypt(data, [user], always_trust=True)``), but
  py3rosmsgs depends on the ``gnupg`` 2.3.1 fork, whose ``encrypt(data,
  *recipients)`` fails on that call (status None) and which keeps its own
  keyring under ``~/.config/python-gnupg`` whatever ``$GNUPGHOME`` says. So
  the module's own GPG step cannot run here; :class:`GpgProgram` gives it
  python-gnupg's interface over the real ``gpg`` program, in a throwaway
  ``GNUPGHOME`` with keys generated in batch mode. Everything else in the
  module (key handling, AES, record layout) runs as shipped.
- **A known key, once.** The module's key step is replaced by a fixed AES
  key, and fastbag reads the bag with ``aes_key=`` (no GnuPG involved).
- fastbag's writer encrypts too; the classic module reads those bags (lz4:
  it opens the bag and decrypts every chunk, lz4 frames then decode to
  fastbag's payloads byte for byte).
- Bad input: a wrong key, a wrong passphrase, a key no keyring holds,
  damaged ciphertext, bad padding, a length that is not whole blocks.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastbag
from fastbag.container import Encryption
from fastbag.errors import DecryptionError, EncryptionKeyError, FastbagWarning, UnsupportedError

pytest.importorskip("cryptography", reason="AES needs the cryptography package: pip install 'fastbag[encryption]'")

from conftest import GPG, NO_GPG, add_gpg_key, gnupg_env  # noqa: E402
from conftest import run_gpg as _gpg  # noqa: E402
from legacy_fixtures import assert_same_genpy, classic_raw  # noqa: E402  (after the skip)

CLASSIC = ("the classic rosbag module is the oracle for encrypted bags (rosbags refuses them); "
           "install it with: pip install py3rosmsgs pycryptodomex rospkg pyyaml")
AES_CBC = "rosbag/AesCbcEncryptor"
KEY = bytes.fromhex("00112233445566778899aabbccddeeff")
USER = "Fleet Test"            # unprotected key
LOCKED = "Locked User"         # key protected by PASSPHRASE
PASSPHRASE = "s3cret words"
STRANGER = "Stranger"          # only the public key is in the keyring
TOPICS = ["/camera", "/chatter", "/imu", "/pose"]


def classic_module():
    rosbag = pytest.importorskip("rosbag", reason=CLASSIC)
    pytest.importorskip("genpy", reason=CLASSIC)
    return rosbag


# -- GnuPG: a throwaway home, keys generated in batch mode ------------------------------------------

KEYS = f"""
Key-Type: EDDSA
Key-Curve: ed25519
Subkey-Type: ECDH
Subkey-Curve: cv25519
Name-Real: {LOCKED}
Name-Email: locked@example.com
Passphrase: {PASSPHRASE}
Expire-Date: 0
%commit
%no-protection
Key-Type: EDDSA
Key-Curve: ed25519
Subkey-Type: ECDH
Subkey-Curve: cv25519
Name-Real: {USER}
Name-Email: fleet@example.com
Expire-Date: 0
%commit
"""


@pytest.fixture(scope="module")
def gnupg_home(tmp_path_factory):
    """A GNUPGHOME of its own (never the user's keyring): USER and LOCKED with secret keys, STRANGER's
    public key only. The passphrase is never cached, so every use of LOCKED's key needs it."""
    if GPG is None:
        pytest.skip(NO_GPG)
    home = tmp_path_factory.mktemp("gnupg")
    other = tmp_path_factory.mktemp("gnupg-stranger")
    for folder in (home, other):
        folder.chmod(0o700)
    params = tmp_path_factory.mktemp("gnupg-params") / "keys"
    params.write_text(KEYS)
    _gpg(home, "--pinentry-mode", "loopback", "--gen-key", str(params))
    # From now on the agent forgets a passphrase at once (a fresh agent: nothing cached from the key
    # generation, which needs the passphrase twice), so every use of LOCKED's key needs it.
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, timeout=30,
                   check=False)
    (home / "gpg-agent.conf").write_text("default-cache-ttl 0\nmax-cache-ttl 0\nallow-loopback-pinentry\n")
    add_gpg_key(other, STRANGER)
    _gpg(home, "--import", data=_gpg(other, "--export", STRANGER))
    with gnupg_env(home, other):
        yield home


class _Result:
    def __init__(self, done: subprocess.CompletedProcess) -> None:
        self.ok = done.returncode == 0
        self.status = done.stderr.decode("utf-8", "replace").strip() or None
        self.data = done.stdout

    def __str__(self) -> str:
        return self.data.decode("ascii")


class GpgProgram:
    """python-gnupg's ``GPG`` interface, as the classic module calls it, over the real ``gpg`` program."""

    def encrypt(self, data: bytes, recipients: list[str], always_trust: bool = False) -> _Result:
        trust = ["--trust-model", "always"] if always_trust else []
        to = [arg for user in recipients for arg in ("--recipient", user)]
        return _Result(subprocess.run([GPG, "--batch", "--quiet", "--armor", *trust, "--encrypt", *to], input=data,
                                      capture_output=True, timeout=60, check=False))

    def decrypt(self, message: bytes | str, passphrase: str | None = None) -> _Result:
        message = message.encode() if isinstance(message, str) else message
        if passphrase is None:
            return _Result(subprocess.run([GPG, "--batch", "--quiet", "--decrypt"], input=message,
                                          capture_output=True, timeout=60, check=False))
        read, write = os.pipe()
        os.write(write, passphrase.encode() + b"\n")
        os.close(write)
        try:
            return _Result(subprocess.run([GPG, "--batch", "--quiet", "--pinentry-mode", "loopback",
                                           "--passphrase-fd", str(read), "--decrypt"], input=message,
                                          capture_output=True, timeout=60, check=False, pass_fds=(read,)))
        finally:
            os.close(read)


@pytest.fixture
def classic_gpg(gnupg_home, monkeypatch):
    """The classic module, its GPG step through the real gpg program (see the module docstring)."""
    rosbag = classic_module()
    monkeypatch.setattr(rosbag.bag, "gnupg", types.SimpleNamespace(GPG=GpgProgram))
    return rosbag


@pytest.fixture
def classic_known_key(monkeypatch):
    """The classic module, its key step replaced by KEY (what GnuPG would have wrapped is not needed)."""
    rosbag = classic_module()
    cls = rosbag.bag._ROSBagAesCbcEncryptor

    def build(self):
        self._symmetric_key = KEY
        self._encrypted_symmetric_key = "(a fixed test key: no GPG message)"

    monkeypatch.setattr(cls, "_build_symmetric_key", build)
    monkeypatch.setattr(rosbag.bag, "_decrypt_string_gpg", lambda message, passphrase=None: KEY)
    return rosbag


# -- one recording, written by the classic module ------------------------------------------------------

def recording():
    """(topic, genpy message, genpy time) of a few topics over several chunks, in time order."""
    import genpy
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import Image, Imu
    from std_msgs.msg import String

    rng = np.random.default_rng(17)
    out = []
    for k in range(120):
        t = genpy.Time(1_700_000_000 + k // 10, (k % 10) * 100_000_000 + 7)
        if k % 2 == 0:
            imu = Imu()
            imu.header.seq, imu.header.stamp, imu.header.frame_id = k, t, "imu_link"
            imu.orientation.x, imu.orientation.w = float(rng.normal()), 1.0
            imu.angular_velocity.z = float(rng.normal())
            imu.linear_acceleration.x = float(rng.normal())
            imu.orientation_covariance = [float(v) for v in rng.normal(size=9)]
            out.append(("/imu", imu, t))
        if k % 3 == 0:
            pose = PoseStamped()
            pose.header.seq, pose.header.stamp, pose.header.frame_id = k, t, "map"
            pose.pose.position.x, pose.pose.position.y = k * 0.5, float(rng.normal())
            pose.pose.orientation.w = 1.0
            out.append(("/pose", pose, t))
        if k % 5 == 0:
            out.append(("/chatter", String(data=f"hello {k} \u00e9t\u00e9"), t))
        if k % 8 == 0:
            image = Image()
            image.header.seq, image.header.stamp, image.header.frame_id = k, t, "camera"
            image.height, image.width, image.encoding, image.step = 3, 4, "rgb8", 12
            image.data = bytes(rng.integers(0, 256, size=36, dtype=np.uint8))
            out.append(("/camera", image, t))
    return out


def write_classic(rosbag, path: Path, compression: str, user: str | None) -> Path:
    bag = rosbag.Bag(str(path), "w", compression=compression, chunk_threshold=2048)
    if user is not None:
        bag.set_encryptor(AES_CBC, user)
    for topic, msg, t in recording():
        bag.write(topic, msg, t)
    bag.close()
    return path


def raw(bag, topics=None) -> list[tuple[str, int, bytes]]:
    """(topic, time, bytes) of a bag's messages (or of messages already selected)."""
    messages = bag.messages(topics, raw=True) if isinstance(bag, fastbag.Bag) else bag
    return [(m.topic, m.time, bytes(m.data)) for m in messages]


def assert_same_as_plain(encrypted: fastbag.Bag, plain_path: Path, rosbag) -> None:
    """Everything fastbag reads from ``encrypted`` equals fastbag's and rosbags' reading of the plain copy
    and the genpy messages written."""
    from rosbags.rosbag1 import Reader
    from rosbags.typesys import Stores, get_typestore

    written = recording()
    with fastbag.open(plain_path) as plain:
        assert raw(encrypted) == raw(plain)
        assert encrypted.message_count == plain.message_count == len(written)
        assert sorted(encrypted.topics) == sorted(plain.topics) == TOPICS
        for topic in TOPICS:
            assert encrypted.topics[topic].message_count == plain.topics[topic].message_count
            assert encrypted.topics[topic].msgtype == plain.topics[topic].msgtype
        assert (encrypted.start_time, encrypted.end_time) == (plain.start_time, plain.end_time)
        assert plain.encryption is None
    # the plain copy as rosbags reads it: same bytes, same decoded values
    store = get_typestore(Stores.ROS1_NOETIC)
    with Reader(plain_path) as reader:
        theirs = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
        decoded = [store.deserialize_ros1(bytes(d), c.msgtype) for c, _, d in reader.messages(
            [c for c in reader.connections if c.topic == "/pose"])]
    assert raw(encrypted) == theirs
    poses = encrypted.read("/pose")
    assert np.asarray(poses["pose"]["position"]["x"]).tolist() == [d.pose.position.x for d in decoded]
    # every message decoded, as users write it, equals the genpy message written
    for m, (topic, msg, t) in zip(encrypted.messages(), written):
        assert (m.topic, m.time) == (topic, t.secs * 10**9 + t.nsecs)
        assert_same_genpy(m.msg.to_dict(), msg, topic)
    first_pose = next(m for m in encrypted.messages("/pose"))
    # (m.msg.pose.position.x: a nested fixed-size struct comes back as numpy.void on main, unrelated to
    # encryption; reported, not fixed here)
    assert first_pose.msg.pose["position"]["x"] == 0.0 and first_pose.msg.header.frame_id == "map"
    # a sensor helper
    pixels = fastbag.image(encrypted.read("/camera"))
    images = [msg for topic, msg, _ in written if topic == "/camera"]
    assert pixels.shape == (len(images), 3, 4, 3)
    assert pixels.tobytes() == b"".join(bytes(i.data) for i in images)


# -- 1. bags the classic module encrypted -------------------------------------------------------------

@pytest.mark.parametrize("compression", ["none", "bz2"])
def test_classic_bag_through_real_gnupg(classic_gpg, tmp_path, compression):
    encrypted = write_classic(classic_gpg, tmp_path / "enc.bag", compression, USER)
    plain = write_classic(classic_gpg, tmp_path / "plain.bag", compression, None)
    theirs = classic_raw(encrypted)  # the classic module decrypting its own bag
    assert len(theirs) == len(recording())
    with fastbag.open(encrypted) as bag:  # the key through the keyring in $GNUPGHOME
        assert bag.encryption == Encryption(AES_CBC, USER)
        assert bag.chunk_count > 5
        assert raw(bag) == theirs
        assert_same_as_plain(bag, plain, classic_gpg)


@pytest.mark.parametrize("compression", ["none", "bz2"])
def test_classic_bag_with_a_known_key(classic_known_key, tmp_path, compression):
    encrypted = write_classic(classic_known_key, tmp_path / "enc.bag", compression, USER)
    plain = write_classic(classic_known_key, tmp_path / "plain.bag", compression, None)
    theirs = classic_raw(encrypted)
    with fastbag.open(encrypted, aes_key=KEY) as bag:
        assert raw(bag) == theirs
        assert_same_as_plain(bag, plain, classic_known_key)
        for topic in TOPICS:  # topic by topic and time windows, as for any bag
            assert raw(bag, [topic]) == [r for r in theirs if r[0] == topic]
        middle = theirs[len(theirs) // 2][1]
        assert [m.time for m in bag.messages(start=middle)] == [t for _, t, _ in theirs if t >= middle]


def test_chunks_decrypt_on_the_worker_threads(classic_known_key, tmp_path):
    encrypted = write_classic(classic_known_key, tmp_path / "enc.bag", "bz2", USER)
    threads = set()
    with fastbag.open(encrypted, aes_key=KEY, workers=2) as bag:
        decryptor = bag._chunks.transform
        assert decryptor is not None and not bag._chunks.uncompressed.any()
        original = type(decryptor).__call__

        def spy(self, raw_bytes, allocate=None):
            threads.add(threading.current_thread().name)
            return original(self, raw_bytes, allocate)

        type(decryptor).__call__ = spy
        try:
            assert len(bag.read("/imu")) == 60
        finally:
            type(decryptor).__call__ = original
    assert threads and all(name.startswith("fastbag") for name in threads), threads


# -- 2. bags fastbag encrypted, read by the classic module ----------------------------------------------

def write_fastbag(path: Path, compression: str, **encryption) -> Path:
    """The recording, serialized by genpy, written by fastbag's writer."""
    import io

    with fastbag.Writer(path, compression=compression, chunk_size=2048, **encryption) as writer:
        connections = {}
        for topic, msg, t in recording():
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msg._type, msg._full_text, msg._md5sum)
            buffer = io.BytesIO()
            msg.serialize(buffer)
            writer.write(connections[topic], t.secs * 10**9 + t.nsecs, buffer.getvalue())
    return path


@pytest.mark.parametrize("compression", ["none", "bz2"])
def test_fastbag_writes_what_the_classic_module_reads(classic_gpg, tmp_path, compression):
    path = write_fastbag(tmp_path / "enc.bag", compression, encrypt_for=USER)
    theirs = classic_raw(path)  # the classic module: its gpg step unwraps the key, AES-CBC as shipped
    assert len(theirs) == len(recording())
    with fastbag.open(path) as bag:
        assert bag.encryption == Encryption(AES_CBC, USER)
        assert raw(bag) == theirs
    info = classic_gpg.Bag(str(path))
    try:
        assert "GPG key user: Fleet Test" in str(info)
    finally:
        info.close()


def test_fastbag_lz4_encrypted_chunks_decrypt_with_the_classic_module(classic_gpg, tmp_path):
    import lz4.frame

    path = write_fastbag(tmp_path / "enc.bag", "lz4", encrypt_for=USER)
    theirs = classic_gpg.Bag(str(path))  # reads the header, unwraps the key, decrypts the connection records
    try:
        assert sorted(c.topic for c in theirs._connections.values()) == TOPICS
        with fastbag.open(path) as bag:
            assert bag.chunk_count == len(theirs._chunks) > 5
            for k, chunk in enumerate(bag._chunks):
                with open(path, "rb") as f:
                    f.seek(chunk.data_offset)
                    stored = f.read(chunk.data_len)
                frame = theirs._encryptor.decrypt_chunk(stored)  # the classic module's AES-CBC and unpadding
                assert lz4.frame.decompress(frame) == bag._store.get(k).tobytes()
            plain = write_fastbag(tmp_path / "plain.bag", "lz4")
            with fastbag.open(plain) as unencrypted:
                assert raw(bag) == raw(unencrypted)
    finally:
        theirs.close()


def test_writer_with_a_key_only(tmp_path):
    path = write_fastbag(tmp_path / "enc.bag", "lz4", aes_key=KEY)
    with fastbag.open(path, aes_key=KEY) as bag:
        assert bag.encryption == Encryption(AES_CBC, "")
        assert len(raw(bag)) == len(recording())
    with pytest.raises(EncryptionKeyError, match="holds no encrypted key; pass aes_key="):
        fastbag.open(path)
    with pytest.raises(ValueError, match="16 bytes"):
        fastbag.open(path, aes_key=b"short")


# -- 3. keys and passphrases -------------------------------------------------------------------------------

def test_passphrase(gnupg_home, tmp_path, monkeypatch):
    path = write_fastbag(tmp_path / "locked.bag", "bz2", encrypt_for=LOCKED)
    monkeypatch.delenv("ROSBAG_GPG_PASSPHRASE", raising=False)
    with pytest.raises(EncryptionKeyError, match="does not decrypt through gpg") as caught:
        fastbag.open(path)  # no passphrase, no pinentry in batch mode, nothing cached
    assert caught.value.encryption == Encryption(AES_CBC, LOCKED)
    with pytest.raises(EncryptionKeyError, match=f"GPG user '{LOCKED}'.*{path}, offset 13, bag header record"):
        fastbag.open(path, passphrase="not it")
    with fastbag.open(path, passphrase=PASSPHRASE) as bag:
        assert len(raw(bag)) == len(recording())
    monkeypatch.setenv("ROSBAG_GPG_PASSPHRASE", PASSPHRASE)  # as rosbag reads it
    with fastbag.open(path) as bag:
        assert bag.message_count == len(recording())


def test_a_key_no_keyring_holds(gnupg_home, tmp_path):
    # the key wrapped for a user whose secret key is not in this keyring: gpg cannot unwrap it
    path = write_fastbag(tmp_path / "stranger.bag", "none", encrypt_for=STRANGER, aes_key=KEY)
    with pytest.raises(EncryptionKeyError, match=f"encrypted for GPG user '{STRANGER}', does not decrypt through "
                                                 f"gpg .*No secret key.*{path}, offset 13, bag header record"):
        fastbag.open(path)
    with fastbag.open(path, aes_key=KEY) as bag:  # a pipeline holding the key itself
        assert bag.message_count == len(recording())


def test_writer_cannot_encrypt_for_an_unknown_user(gnupg_home, tmp_path):
    with pytest.raises(fastbag.FastbagError, match="cannot encrypt the bag's key for GPG user 'Nobody'"):
        fastbag.Writer(tmp_path / "x.bag", encrypt_for="Nobody")
    assert not (tmp_path / "x.bag").exists()


# -- 4. bad input -----------------------------------------------------------------------------------------------

@pytest.fixture
def known_key_bags(classic_known_key, tmp_path):
    """{compression: path} of classic-written bags encrypted with KEY, and their messages as classic reads them."""
    bags = {c: write_classic(classic_known_key, tmp_path / f"enc-{c}.bag", c, USER) for c in ("none", "bz2")}
    return bags, {c: classic_raw(p) for c, p in bags.items()}


def damaged(path: Path, out: Path, at: int, value: bytes | None = None, *, cut: bool = False) -> Path:
    """A copy of ``path`` with the byte at ``at`` flipped (or ``value`` written there, or cut off there)."""
    data = bytearray(path.read_bytes())
    if cut:
        data = data[:at]
    elif value is not None:
        data[at:at + len(value)] = value
    else:
        data[at] ^= 0x01
    out.write_bytes(bytes(data))
    return out


def chunks_of(path: Path):
    with fastbag.open(path, aes_key=KEY) as bag:
        return list(bag._chunks), bag._index.chunk.copy()


def test_a_wrong_key_is_told_apart(known_key_bags):
    bags, _ = known_key_bags
    for path in bags.values():
        with pytest.raises(EncryptionKeyError, match=r"does not decrypt any of the 4 encrypted connection records: "
                                                     r"it is not this bag's key") as caught:
            fastbag.open(path, aes_key=bytes(16))
        assert caught.value.path == str(path) and caught.value.record == "connection"
        assert caught.value.offset > 4096 and caught.value.encryption == Encryption(AES_CBC, USER)


@pytest.mark.parametrize("compression", ["none", "bz2"])
def test_bad_padding(known_key_bags, tmp_path, compression):
    bags, _ = known_key_bags
    chunks, _ = chunks_of(bags[compression])
    chunk = chunks[3]
    # the next-to-last cipher block's last byte flips the padding's last byte
    path = damaged(bags[compression], tmp_path / "padding.bag", chunk.data_offset + chunk.data_len - 17)
    with fastbag.open(path, aes_key=KEY) as bag:  # the index is intact: the key is checked, the bag opens
        with pytest.raises(DecryptionError, match=rf"AES-CBC encrypted chunk payload does not decrypt: its PKCS#7 "
                                                  rf"padding is invalid: the ciphertext is damaged \({path}, offset "
                                                  rf"{chunk.position}, chunk record\)"):
            list(bag.messages(raw=True))


def test_damaged_ciphertext(known_key_bags, tmp_path):
    bags, theirs = known_key_bags
    chunks, chunk_of = chunks_of(bags["bz2"])
    chunk = chunks[2]
    path = damaged(bags["bz2"], tmp_path / "damaged.bag", chunk.data_offset + 40)
    with fastbag.open(path, aes_key=KEY) as bag:
        with pytest.raises(DecryptionError, match=rf"AES-CBC encrypted bz2 chunk payload does not decompress.*"
                                                  rf"offset {chunk.position}, chunk record"):
            bag.read("/imu")
        # what the damage does not touch stays readable: the other chunks, the messages before it
        with fastbag.open(bags["bz2"], aes_key=KEY) as intact:
            for k in range(len(chunks)):
                if k != 2:
                    assert bag._store.get(k).tobytes() == intact._store.get(k).tobytes()
        first = min(t for (_, t, _), k in zip(theirs["bz2"], chunk_of) if k == 2)
        assert raw(bag.messages(end=first, raw=True)) == [r for r in theirs["bz2"] if r[1] < first]


def test_a_length_that_is_not_whole_blocks(known_key_bags, tmp_path):
    bags, theirs = known_key_bags
    chunks, chunk_of = chunks_of(bags["none"])
    chunk = chunks[4]
    path = damaged(bags["none"], tmp_path / "length.bag", chunk.data_offset - 4,
                   struct.pack("<I", chunk.data_len - 1))
    with pytest.warns(FastbagWarning) as caught:
        bag = fastbag.open(path, aes_key=KEY)
    text = str(caught[0].message)
    assert f"the chunk at offset {chunk.position} (AES-CBC encrypted chunk payload does not decrypt: its " \
           f"{chunk.data_len - 1} bytes are not a whole number of 16-byte blocks" in text
    with bag:  # the index rebuilt by scanning: every other chunk's messages, announced as partial
        assert bag.recovered
        assert raw(bag) == [r for r, k in zip(theirs["none"], chunk_of) if k != 4]


def test_a_file_cut_inside_a_chunk(known_key_bags, tmp_path):
    bags, theirs = known_key_bags
    chunks, chunk_of = chunks_of(bags["none"])
    chunk = chunks[5]
    path = damaged(bags["none"], tmp_path / "cut.bag", chunk.data_offset + chunk.data_len // 2, cut=True)
    with pytest.warns(FastbagWarning, match="cut off by the end of the file"):
        bag = fastbag.open(path, aes_key=KEY)
    with bag:
        got = raw(bag)
    before = [r for r, k in zip(theirs["none"], chunk_of) if k < 5]
    within = [r for r, k in zip(theirs["none"], chunk_of) if k == 5]
    assert got[:len(before)] == before  # the whole chunks, then what decrypts of the cut one
    assert 0 < len(got) - len(before) < len(within) and got[len(before):] == within[:len(got) - len(before)]


def test_a_damaged_encrypted_connection_record(known_key_bags, tmp_path):
    bags, theirs = known_key_bags
    data = bags["bz2"].read_bytes()
    index_pos = struct.unpack_from("<Q", data, data.index(b"index_pos=") + 10)[0]
    # the second connection record's data block (the key still decrypts the others)
    first_end = index_pos + 4 + struct.unpack_from("<I", data, index_pos)[0]
    first_end += 4 + struct.unpack_from("<I", data, first_end)[0]
    second_data = first_end + 4 + struct.unpack_from("<I", data, first_end)[0]
    path = damaged(bags["bz2"], tmp_path / "connection.bag", second_data + 4 + 20)
    with pytest.warns(FastbagWarning, match="its index is damaged: the encrypted connection data "
                                            "(does not decrypt|decrypts to no header).*connection record"):
        bag = fastbag.open(path, aes_key=KEY)
    with bag:  # rebuilt from the chunks, whose connection records are intact
        assert raw(bag) == theirs["bz2"]


def test_an_unindexed_encrypted_bag(known_key_bags, tmp_path):
    # a recorder killed before writing the index: index_pos 0, the chunks (and their connection records) only
    bags, theirs = known_key_bags
    data = bags["bz2"].read_bytes()
    path = damaged(bags["bz2"], tmp_path / "unindexed.bag", data.index(b"index_pos=") + 10, bytes(8))
    first = chunks_of(bags["bz2"])[0][0]
    with pytest.warns(FastbagWarning, match=r"rebuilt the index by scanning: recovered 139 messages in \d+ chunks "
                                            r"on 4 connections; nothing in the file lost"):
        bag = fastbag.open(path, aes_key=KEY)
    with bag:
        assert raw(bag) == theirs["bz2"]
    # with a wrong key no chunk decrypts: an error, not an empty bag
    with pytest.raises(EncryptionKeyError, match=r"the AES key decrypts none of the bag's \d+ encrypted chunks: it "
                                                 rf"is not this bag's key .*offset {first.position}, chunk record"):
        fastbag.open(path, aes_key=bytes(range(16)))


def test_cryptography_missing(known_key_bags, monkeypatch):
    bags, _ = known_key_bags
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers", None)
    with pytest.raises(UnsupportedError, match=r"needs the cryptography package: pip install 'fastbag\[encryption\]'"):
        fastbag.open(bags["none"], aes_key=KEY)


def test_import_fastbag_loads_no_cipher():
    code = "import sys, fastbag; assert 'cryptography' not in sys.modules, 'cryptography loaded'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})


# -- 5. fastbag info ------------------------------------------------------------------------------------------

def test_info_says_for_whom(classic_gpg, tmp_path, capsys, monkeypatch):
    from fastbag.cli import main

    path = write_classic(classic_gpg, tmp_path / "enc.bag", "bz2", USER)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    with classic_gpg.Bag(str(path)) as theirs:  # rosbag info's rows, as it writes them
        said = [line for line in str(theirs).splitlines() if line.startswith(("encryption:", "GPG key user:"))]
    assert said == [f"encryption:   {AES_CBC}", f"GPG key user: {USER}"]
    assert set(said) <= set(out.splitlines()) and "/imu" in out
    # without the key: still says that the bag is encrypted and for whom, and why it cannot say more
    monkeypatch.setenv("GNUPGHOME", str(tmp_path / "empty-home"))
    (tmp_path / "empty-home").mkdir(mode=0o700)
    assert main(["info", str(path)]) == 1
    captured = capsys.readouterr()
    assert set(said) <= set(captured.out.splitlines())
    assert "key:          not available" in captured.out and "does not decrypt through gpg" in captured.out
    assert main(["info", "--json", str(path)]) == 1
    import json
    assert json.loads(capsys.readouterr().out)["encryption"] == {"method": AES_CBC, "recipient": USER}
    subprocess.run(["gpgconf", "--homedir", str(tmp_path / "empty-home"), "--kill", "gpg-agent"],
                   capture_output=True, timeout=30, check=False)


# -- 6. random damage ---------------------------------------------------------------------------------------------

def test_random_damage_raises_only_fastbag_errors(tmp_path):
    """Flips, hostile lengths and cuts anywhere in encrypted bags (each compression): only FastbagErrors,
    naming the file; only FastbagWarnings; never a hang or a crash."""
    import random

    seeds = {c: write_fastbag(tmp_path / f"seed-{c}.bag", c, aes_key=KEY) for c in ("none", "bz2", "lz4")}
    rng = random.Random(17)
    outcomes = {"read": 0, "error": 0, "warned": 0}
    for case in range(150):
        compression = ("none", "bz2", "lz4")[case % 3]
        data = bytearray(seeds[compression].read_bytes())
        kind = rng.choice(("flip", "length", "cut"))
        at = rng.randrange(13, len(data) - 4)
        if kind == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "length":
            data[at:at + 4] = struct.pack("<I", rng.choice((0, 1, 15, 16, 17, 0x7FFFFFFF, 0xFFFFFFFF)))
        else:
            del data[at:]
        path = tmp_path / f"case-{case}.bag"
        path.write_bytes(bytes(data))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with fastbag.open(path, aes_key=KEY, workers=1) as bag:
                    got = raw(bag)
                    for topic in bag.topics:
                        bag.read(topic)
                    assert len(got) == bag.message_count
                outcomes["read"] += 1
            except fastbag.FastbagError as exc:
                assert str(path) in str(exc) or isinstance(exc, fastbag.DecodeError), (case, kind, at, exc)
                outcomes["error"] += 1
        caught = [w for w in caught if not w.category.__module__.startswith("numba")]
        assert all(issubclass(w.category, FastbagWarning) for w in caught), (case, [str(w.message) for w in caught])
        outcomes["warned"] += bool(caught)
    assert outcomes["read"] and outcomes["error"] and outcomes["warned"], outcomes


def test_a_binary_gpg_message_as_the_cpp_recorder_writes_it(gnupg_home):
    # rosbag's C++ encryptor stores gpgme's binary output, the Python module ASCII armor: gpg takes both
    from fastbag.ros1.encryption import gpg_decrypt_key

    binary = _gpg(gnupg_home, "--trust-model", "always", "--encrypt", "--recipient", USER, data=KEY)
    assert not binary.startswith(b"-----BEGIN")
    assert gpg_decrypt_key(binary) == KEY


def test_an_unknown_encryptor(tmp_path):
    path = write_fastbag(tmp_path / "enc.bag", "none", aes_key=KEY)
    data = path.read_bytes()
    other = damaged(path, tmp_path / "other.bag", data.index(AES_CBC.encode()), b"acme/OtherEncryptor123")
    with pytest.raises(UnsupportedError, match=rf"bag encryptor 'acme/OtherEncryptor123' is not supported \(known: "
                                               rf"{AES_CBC}\) \({other}, offset 13, bag header record\)"):
        fastbag.open(other, aes_key=KEY)


def test_damaged_connection_records_with_the_right_key_rebuild_the_index(tmp_path):
    """The only connection record of a one-topic bag damaged (bad padding): 'the AES key does not decrypt
    the encrypted connection record ... it is not this bag's key', though every chunk decrypts with it. The
    first chunk now tells a right key from a wrong one: the index is rebuilt from the chunks; a wrong key is
    still refused."""
    path = tmp_path / "one.bag"
    with fastbag.Writer(path, compression="lz4", chunk_size=512, aes_key=KEY) as writer:
        c = writer.add_connection("/n", "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
        for k in range(60):
            writer.write(c, 10**9 + k, k.to_bytes(4, "little"))
    data = bytearray(path.read_bytes())
    index_pos = struct.unpack_from("<Q", data, data.index(b"index_pos=", 13) + len(b"index_pos="))[0]
    block = struct.unpack_from("<I", data, index_pos)[0]
    data[index_pos + 4 + block - 1] ^= 0x01  # the last byte of its header block: the padding
    broken = tmp_path / "broken.bag"
    broken.write_bytes(bytes(data))
    with pytest.warns(FastbagWarning, match="its encrypted connection records do not decrypt, though its chunks do"):
        bag = fastbag.open(broken, aes_key=KEY)
    with bag:
        assert [int.from_bytes(bytes(m.data), "little") for m in bag.messages(raw=True)] == list(range(60))
    with pytest.raises(EncryptionKeyError, match="it is not this bag's key"):
        fastbag.open(broken, aes_key=bytes(16))
