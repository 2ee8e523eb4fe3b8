"""fastbag's LZ4 frame kernel against ``lz4.frame.decompress``, one thread, for every frame shape.

    PYTHONPATH=. python benchmarks/lz4_frames.py [--file BAG]

Block sizes 64 KB, 256 KB, 1 MB, 4 MB; independent and linked blocks; with
and without block and content checksums. The payload is 16 MB of realistic
message bytes (Imu records and lidar points, ``bench.sample_payload``), or
the 16 MB before the 200 MB mark of ``--file``. The kernel decodes into a
reused buffer, as fastbag's recycled chunk buffers let it; python-lz4
returns new bytes, as it does for every reader. Best of 7, the two sides
alternating. Prints a Markdown table (MB/s of output).
"""

from __future__ import annotations

import argparse
import time

import lz4.frame
import numpy as np

from fastbag.io import lz4frame
from fastbag.tooling.bench import sample_payload

SIZES = [(lz4.frame.BLOCKSIZE_MAX64KB, "64 KB"), (lz4.frame.BLOCKSIZE_MAX256KB, "256 KB"),
         (lz4.frame.BLOCKSIZE_MAX1MB, "1 MB"), (lz4.frame.BLOCKSIZE_MAX4MB, "4 MB")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", help="take the payload from this file instead")
    args = parser.parse_args()
    if args.file:
        with open(args.file, "rb") as f:
            f.seek(184 << 20)
            payload = f.read(16 << 20)
    else:
        payload = sample_payload(16 << 20)
    out = np.empty(len(payload), dtype=np.uint8)
    print("| blocks | linked | block checksum | content checksum | python-lz4 | fastbag | ratio |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    for size, label in SIZES:
        for linked in (False, True):
            for block_checksum in (False, True):
                for content_checksum in (False, True):
                    compressor = lz4.frame.LZ4FrameCompressor(block_size=size, block_linked=linked,
                                                              block_checksum=block_checksum,
                                                              content_checksum=content_checksum)
                    frame = compressor.begin(len(payload)) + compressor.compress(payload) + compressor.flush()
                    array = np.frombuffer(frame, dtype=np.uint8)
                    sides = [lambda frame=frame: lz4.frame.decompress(frame),
                             lambda array=array: lz4frame.decompress(array, len(payload), lambda n: out[:n])]
                    assert lz4.frame.decompress(frame) == payload == sides[1]().tobytes()
                    best = [float("inf"), float("inf")]
                    for _ in range(7):
                        for k, side in enumerate(sides):
                            started = time.perf_counter()
                            side()
                            best[k] = min(best[k], time.perf_counter() - started)
                    theirs, ours = (len(payload) / t / 1e6 for t in best)
                    print(f"| {label} | {'linked' if linked else 'independent'} | {'yes' if block_checksum else 'no'} "
                          f"| {'yes' if content_checksum else 'no'} | {theirs:.0f} | {ours:.0f} | {ours / theirs:.2f} |",
                          flush=True)


if __name__ == "__main__":
    main()
