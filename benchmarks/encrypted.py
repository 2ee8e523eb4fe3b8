"""Reading every message of a ~200 MB encrypted ROS1 bag: fastbag against the classic rosbag module, one run.

    PYTHONPATH=. python benchmarks/encrypted.py [--mb 200] [--compression none|bz2] [--folder DIR]

The bag is generated here (fastbag's writer, rosbag's AES-CBC encryptor with
a fixed key; camera images and IMU messages), never stored in the
repository. The classic module's GPG step is replaced by that key (its
``gnupg`` dependency cannot run here: see tests/test_encryption.py); its
AES, record layout and decoding run as shipped. Both sides first read every
message raw and must agree on a digest of (topic, time, bytes) of all of
them; then each is timed, best of 3 (a fresh open each, the file in the page
cache for both): fastbag raw, fastbag decoded arrays (every topic),
the classic module raw and decoded. The machine's single-thread AES-CBC
decryption speed and fastbag on the same bag unencrypted are printed too.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import fastbag

KEY = bytes.fromhex("00112233445566778899aabbccddeeff")


def write_bag(path: Path, megabytes: float, compression: str, encrypted: bool, images: bool = True) -> int:
    """IMU at 200 Hz and (``images``) 640x480 mono8 images at 10 Hz, until about ``megabytes``; returns the
    message count."""
    from sensor_msgs.msg import Image, Imu

    rng = np.random.default_rng(0)
    image, imu = Image(), Imu()
    image.height, image.width, image.encoding, image.step = 480, 640, "mono8", 640
    image.header.frame_id, imu.header.frame_id = "camera", "imu_link"
    pixels = [bytes(rng.integers(0, 256, size=480 * 640, dtype=np.uint8)) for _ in range(8)]
    count, written, t = 0, 0, 1_700_000_000 * 10**9
    options = {"aes_key": KEY} if encrypted else {}
    with fastbag.Writer(path, compression=compression, **options) as writer:
        c_image = writer.add_connection("/camera/image", image._type, image._full_text, image._md5sum)
        c_imu = writer.add_connection("/imu", imu._type, imu._full_text, imu._md5sum)
        k = 0
        while written < megabytes * 1e6:
            stamp = t + k * 5_000_000  # 200 Hz
            imu.header.seq = k
            imu.header.stamp.secs, imu.header.stamp.nsecs = divmod(stamp, 10**9)
            imu.angular_velocity.z = float(k % 100) / 7
            buffer = io.BytesIO()
            imu.serialize(buffer)
            writer.write(c_imu, stamp, buffer.getvalue())
            written += len(buffer.getvalue())
            count += 1
            if images and k % 20 == 0:  # 10 Hz
                image.header.seq = k // 20
                image.header.stamp = imu.header.stamp
                image.data = pixels[(k // 20) % len(pixels)]
                buffer = io.BytesIO()
                image.serialize(buffer)
                writer.write(c_image, stamp, buffer.getvalue())
                written += len(buffer.getvalue())
                count += 1
            k += 1
    return count


def classic_module():
    """The classic rosbag module with its GPG step replaced by KEY."""
    import rosbag

    rosbag.bag._decrypt_string_gpg = lambda message, passphrase=None: KEY
    return rosbag


def digest(items) -> tuple[int, str]:
    h = hashlib.blake2b(digest_size=16)
    n = 0
    for topic, t, data in items:
        h.update(topic.encode())
        h.update(t.to_bytes(8, "little"))
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
        n += 1
    return n, h.hexdigest()


def fastbag_digest(path: Path, **options):
    with fastbag.open(path, **options) as bag:
        return digest((m.topic, m.time, m.data) for m in bag.messages(raw=True))


def fastbag_raw(path: Path, **options) -> int:
    with fastbag.open(path, **options) as bag:
        return sum(1 for m in bag.messages(raw=True) if len(m.data))


def fastbag_arrays(path: Path, **options) -> int:
    with fastbag.open(path, **options) as bag:
        return sum(len(bag.read(topic)) for topic in bag.topics)


def classic_digest(rosbag, path: Path):
    bag = rosbag.Bag(str(path))
    try:
        return digest((topic, t.secs * 10**9 + t.nsecs, m[1])
                      for topic, m, t in bag.read_messages(raw=True))
    finally:
        bag.close()


def classic_raw(rosbag, path: Path) -> int:
    bag = rosbag.Bag(str(path))
    try:
        return sum(1 for _, m, _ in bag.read_messages(raw=True) if len(m[1]))
    finally:
        bag.close()


def classic_decoded(rosbag, path: Path) -> int:
    bag = rosbag.Bag(str(path))
    try:
        return sum(1 for _ in bag.read_messages())
    finally:
        bag.close()


def aes_speed() -> float:
    """Single-thread AES-128-CBC decryption, bytes per second (cryptography, 64 MB)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    data = np.frombuffer(os.urandom(64 << 20), dtype=np.uint8)
    out = np.empty(data.size + 16, dtype=np.uint8)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        decryptor = Cipher(algorithms.AES(KEY), modes.CBC(bytes(16))).decryptor()
        decryptor.update_into(data, out)
        best = min(best, time.perf_counter() - started)
    return data.size / best


def timed(label: str, fn, size: int, repeats: int = 3) -> float:
    """Best of ``repeats`` runs (this shared machine's speed drifts): the equality check ran both once before."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    print(f"  {label:<48} {best:7.3f} s  {size / 1e6 / best:7.0f} MB/s   ({result} messages)")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200)
    parser.add_argument("--compression", choices=("none", "bz2"), default="none")
    parser.add_argument("--imu-only", action="store_true", help="IMU messages only (many small messages) instead "
                        "of camera images and IMU")
    parser.add_argument("--folder", default=None, help="where to write the bags (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        encrypted, plain = Path(folder) / "encrypted.bag", Path(folder) / "plain.bag"
        count = write_bag(encrypted, args.mb, args.compression, True, not args.imu_only)
        write_bag(plain, args.mb, args.compression, False, not args.imu_only)
        size = encrypted.stat().st_size
        content = "IMU" if args.imu_only else "camera images and IMU"
        print(f"{encrypted.name}: {size / 1e6:.0f} MB of {content}, {count} messages, {args.compression} chunks, AES-CBC; "
              f"{os.cpu_count()} cores; AES-CBC decryption one thread: {aes_speed() / 1e9:.2f} GB/s")
        rosbag = classic_module()
        ours, theirs = fastbag_digest(encrypted, aes_key=KEY), classic_digest(rosbag, encrypted)
        assert ours == theirs == fastbag_digest(plain), (ours, theirs)
        print(f"  equal: {ours[0]} messages, digest {ours[1]} (fastbag, classic rosbag, and the plain copy)")
        t_raw = timed("fastbag, every message raw", lambda: fastbag_raw(encrypted, aes_key=KEY), size)
        t_arrays = timed("fastbag, every topic decoded (bag.read)", lambda: fastbag_arrays(encrypted, aes_key=KEY),
                         size)
        timed("fastbag, every topic decoded, one worker", lambda: fastbag_arrays(encrypted, aes_key=KEY, workers=1),
              size)
        timed("fastbag, every topic decoded, unencrypted copy", lambda: fastbag_arrays(plain), size)
        c_raw = timed("classic rosbag, every message raw", lambda: classic_raw(rosbag, encrypted), size)
        c_decoded = timed("classic rosbag, every message decoded", lambda: classic_decoded(rosbag, encrypted), size)
        print(f"  fastbag is {c_raw / t_raw:.1f}x faster raw, {c_decoded / t_arrays:.1f}x decoded")


if __name__ == "__main__":
    main()
