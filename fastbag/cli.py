"""The ``fastbag`` command: ``info``, ``demo``, ``bench``, ``plot``, ``timeline``, ``export``.

``fastbag info BAG`` prints what ``rosbag info`` prints; ``--json`` gives the
same as JSON. ``fastbag demo`` writes a sample bag into a temporary folder,
prints its info, reads every topic and prints the speed. ``fastbag plot`` and
``fastbag timeline`` draw fields and the bag's timeline (matplotlib:
``pip install 'fastbag[plot]'``) to a window or a file. ``fastbag export
BAG OUT --format parquet`` writes one file per topic (see
:mod:`fastbag.convert.export`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .bag import Bag
from .bag import open as open_bag
from .errors import EncryptionKeyError, FastbagError
from .viz.html import size_text as _size  # viz/html.py imports no matplotlib




def _stamp(ns: int) -> str:
    moment = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    return f"{moment:%b %d %Y %H:%M:%S}.{(ns // 10_000_000) % 100:02d} ({ns / 1e9:.2f})"


def info_dict(bag: Bag) -> dict[str, object]:
    """The facts ``fastbag info`` prints, as a JSON-ready dict."""
    types: dict[str, str] = {}
    for connection in bag.connections:
        # ROS1 types are known by their md5sum; other encodings by how they are serialized and described
        known = connection.encoding == "ros1" and connection.md5sum != "*"
        types.setdefault(connection.msgtype, connection.md5sum if known else
                         f"{connection.encoding}, {connection.schema_encoding or 'no schema'}")
    return {
        "path": bag.path, "format": bag.format, "version": bag.version, "duration_ns": bag.duration,
        "start_ns": bag.start_time, "end_ns": bag.end_time, "size": bag.size,
        "messages": bag.message_count, "chunks": bag.chunk_count, "compression": bag.compression,
        "indexed": not bag.recovered,
        "encryption": _encryption_dict(bag.encryption),
        "types": dict(sorted(types.items())),
        "topics": [{"topic": t.name, "type": t.msgtype, "types": list(t.msgtypes), "messages": t.message_count,
                    "connections": len(t.connections), "frequency": t.frequency}
                   for t in bag.topics.values()],
        "problems": bag.problems,  # after the topics: reading the index can find more
    }


def _encryption_dict(encryption: object) -> dict[str, str] | None:
    if encryption is None:
        return None
    return {"method": encryption.method, "recipient": encryption.recipient}  # type: ignore[attr-defined]


def _encryption_line(encryption: object) -> str:
    method, recipient = encryption.method, encryption.recipient  # type: ignore[attr-defined]
    return f"encryption:  {method} ({f'GPG user {recipient!r}' if recipient else 'no GPG user: a given key'})"


def format_info(bag: Bag) -> str:
    """``rosbag info``-style text."""
    info = info_dict(bag)
    lines = [f"path:        {bag.path}", f"format:      {bag.format}", f"version:     {bag.version}"]
    if bag.message_count:
        lines += [f"duration:    {bag.duration / 1e9:.1f}s", f"start:       {_stamp(bag.start_time)}",  # type: ignore[arg-type]
                  f"end:         {_stamp(bag.end_time)}"]  # type: ignore[arg-type]
    lines += [f"size:        {_size(bag.size)}", f"messages:    {bag.message_count}"]
    chunks = bag.chunk_count
    compression = ", ".join(f"{name} [{n}/{chunks} chunks]" for name, n in bag.compression.items()) or "none"
    lines.append(f"compression: {compression}")
    if bag.encryption is not None:
        lines.append(_encryption_line(bag.encryption))
    if bag.recovered:
        lines.append("index:       rebuilt by scanning (the file is not indexed or is damaged)")
    if bag.attachments or bag.metadata:
        lines.append(f"attachments: {len(bag.attachments)}, metadata: {len(bag.metadata)}")
    types = info["types"]
    width = max((len(t) for t in types), default=0)  # type: ignore[union-attr]
    for k, (name, md5) in enumerate(types.items()):  # type: ignore[union-attr]
        lines.append(f"{'types:' if k == 0 else '':<13}{name:<{width}} [{md5}]")
    topics = list(bag.topics.values())
    twidth = max((len(t.name) for t in topics), default=0)
    cwidth = max((len(str(t.message_count)) for t in topics), default=0)
    for k, t in enumerate(topics):
        extra = f" ({len(t.connections)} connections)" if len(t.connections) > 1 else ""
        kinds = ", ".join(t.msgtypes)
        lines.append(f"{'topics:' if k == 0 else '':<13}{t.name:<{twidth}} {t.message_count:>{cwidth}} msgs"
                     f" : {kinds}{extra}")
    for k, problem in enumerate(info["problems"]):  # type: ignore[arg-type]
        lines.append(f"{'problems:' if k == 0 else '':<13}{problem}")
    return "\n".join(lines)


def _cmd_info(args: argparse.Namespace) -> int:
    status = 0
    options = {"aes_key": bytes.fromhex(args.aes_key)} if args.aes_key else {}
    for k, path in enumerate(args.bags):
        try:
            bag = open_bag(path, **options)
        except EncryptionKeyError as exc:
            # Encrypted for someone else (or the key is elsewhere): say so, and for whom; the rest of
            # the index (topics, types) is encrypted with the key.
            if exc.encryption is None:
                raise
            status = 1
            if args.json:
                print(json.dumps({"path": str(path), "encryption": _encryption_dict(exc.encryption),
                                  "error": str(exc)}, indent=2))
            else:
                print(("\n" if k else "") + "\n".join([f"path:        {path}", _encryption_line(exc.encryption),
                                                       f"key:         not available ({exc})"]))
            continue
        with bag:
            if args.json:
                print(json.dumps(info_dict(bag), indent=2))
            else:
                print(("\n" if k else "") + format_info(bag))
    return status


def _cmd_demo(args: argparse.Namespace) -> int:
    from .tooling.synth import write_demo_bag

    with tempfile.TemporaryDirectory(prefix="fastbag-demo-") as folder:
        path = Path(folder) / f"demo-{args.compression}.bag"
        started = time.perf_counter()
        write_demo_bag(path, seconds=args.seconds, compression=args.compression)
        print(f"wrote {path} in {time.perf_counter() - started:.2f}s\n")
        with open_bag(path) as bag:
            print(format_info(bag))
            print(f"\n{'topic':<20} {'messages':>9} {'MB':>8} {'seconds':>9} {'msgs/s':>11} {'MB/s':>9}  fields")
            for topic, info in bag.topics.items():
                nbytes = sum(len(m.data) for m in bag.messages(topics=[topic], raw=True))
                started = time.perf_counter()
                arr = bag.read(topic)
                elapsed = max(time.perf_counter() - started, 1e-9)
                print(f"{topic:<20} {len(arr):>9} {nbytes / 1e6:>8.1f} {elapsed:>9.4f} {len(arr) / elapsed:>11,.0f} "
                      f"{nbytes / 1e6 / elapsed:>9,.0f}  {info.msgtype}")
                for line in describe(arr):
                    print(f"{'':<22}{line}")
            print("\n(the first read in a process loads the compiled kernels; the very first after installing "
                  "compiles them, once, into Numba's on-disk cache)")
    return 0


def describe(value: object, prefix: str = "") -> list[str]:
    """One line per leaf field: its path, shape and dtype (what ``bag.read`` returns)."""
    from .msg.arrays import Nested, Ragged, StructArray

    lines = []
    if isinstance(value, StructArray):
        for name in value.fields:
            lines += describe(value[name], f"{prefix}{name}.")
        return lines
    path = prefix.rstrip(".")
    if isinstance(value, Ragged):
        lines.append(f"{path}: ragged {value.dtype} (element i a view of message i)")
    elif isinstance(value, Nested):
        lines.append(f"{path}: nested, {int(value.counts.sum())} elements")
    elif isinstance(value, np.ndarray) and value.dtype.names:
        for name in value.dtype.names:
            lines += describe(value[name], f"{prefix}{name}.")
    elif isinstance(value, np.ndarray):
        lines.append(f"{path}: {value.dtype} {value.shape}")
    return lines


def _cmd_bench(args: argparse.Namespace) -> int:
    from .tooling import bench

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    # The generated suite compares with rosbags unless told not to; the user's bags only when asked.
    against = args.against == "rosbags" or (not args.paths and args.against is None)
    if against:
        import importlib.util

        if importlib.util.find_spec("rosbags") is None:  # the comparison needs it
            if args.paths:
                print("fastbag: --against rosbags needs rosbags: pip install rosbags", file=sys.stderr)
                return 1
            log("rosbags is not installed: timing fastbag alone (pip install rosbags for the ratios)")
            against = False
    if args.paths:
        report = bench.bench_paths(args.paths, against=against, log=log)
        print(bench.to_json(report) if args.json else bench.format_paths(report))
    else:
        report = bench.run_suite(args.jobs, seconds=args.seconds, bz2_seconds=args.bz2_seconds, against=against,
                                 log=log)
        print(bench.to_json(report) if args.json else bench.format_suite(report))
    return 0


def plot_selections(bag: Bag, items: list[str]) -> list[tuple[str, list[str]]]:
    """``[(topic, fields)]`` from ``TOPIC FIELD... TOPIC FIELD...``: an item naming a topic of the bag
    starts a group, the items after it are its fields (none: its numeric fields)."""
    selections: list[tuple[str, list[str]]] = []
    for item in items:
        if item in bag.topics:
            selections.append((item, []))
        elif not selections:
            raise KeyError(f"no topic {item!r} in {bag.path}; topics: {', '.join(bag.topics)}")
        else:
            selections[-1][1].append(item)
    return selections


def _cmd_plot(args: argparse.Namespace) -> int:
    from .viz.plot import plot_topics, save_or_show

    with open_bag(args.bag) as bag:
        try:
            figure = plot_topics(bag, plot_selections(bag, args.items), stamp=args.stamp,
                                 use_pyplot=args.output is None)
        except (KeyError, ValueError) as exc:  # a topic or field that is not there, or not a number
            print(f"fastbag: {exc.args[0] if exc.args else exc}", file=sys.stderr)
            return 2
        save_or_show(figure, args.output)
    return 0


def _cmd_timeline(args: argparse.Namespace) -> int:
    from .viz.plot import plot_timeline, save_or_show

    with open_bag(args.bag) as bag:
        ax = plot_timeline(bag, gap_factor=args.gap_factor, use_pyplot=args.output is None)
        save_or_show(ax.figure, args.output)
    return 0
def _cmd_export(args: argparse.Namespace) -> int:
    from .convert.export import export

    try:
        result = export(args.bag, args.out, args.format, args.topics, step=args.step,
                        progress=False if args.no_progress else None, compression=args.compression)
    except (KeyError, ImportError, ValueError) as exc:
        print(f"fastbag: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    for topic, path in result.files.items():
        print(f"{topic} -> {path}")
    for topic, reason in result.skipped.items():
        print(f"fastbag: skipped {topic}: {reason}", file=sys.stderr)
    print(f"{result.messages} messages of {len(result.files)} topics written to {args.out}"
          + (f"; {len(result.skipped)} skipped" if result.skipped else ""), file=sys.stderr)
    return 1 if result.skipped and not result.files else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fastbag`` command."""
    parser = argparse.ArgumentParser(prog="fastbag", description="Read ROS bags into NumPy, fast.")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="summarize bags, like rosbag info")
    info.add_argument("bags", nargs="+", metavar="BAG")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.add_argument("--aes-key", metavar="HEX", help="the AES key of encrypted bags, as 32 hex digits (else the "
                      "key in the bag is decrypted through gpg; a GPG passphrase from $ROSBAG_GPG_PASSPHRASE)")
    info.set_defaults(run=_cmd_info)
    demo = sub.add_parser("demo", help="write a sample bag, read it back and print the speed")
    demo.add_argument("--seconds", type=float, default=3.0, help="recording length (default 3)")
    demo.add_argument("--compression", choices=("none", "lz4", "bz2"), default="lz4")
    demo.set_defaults(run=_cmd_demo)
    bench = sub.add_parser("bench", help="time decoding side by side with rosbags (generated bags, or yours)")
    bench.add_argument("paths", nargs="*", metavar="PATH", help="bags to time topic by topic (default: the "
                       "generated benchmark bags, cached in $FASTBAG_BENCH_DIR or ~/.cache/fastbag/bench)")
    bench.add_argument("--against", choices=("rosbags", "none"), default=None,
                       help="compare with rosbags (the default for the generated bags)")
    bench.add_argument("--json", action="store_true", help="print JSON")
    bench.add_argument("--jobs", nargs="+", metavar="JOB", help="only these jobs of the generated suite: "
                       "imu-1m livox pointcloud2 image imu-mixed raw-lz4 raw-bz2 open first-read")
    bench.add_argument("--seconds", type=float, default=40.0, help="length of the mixed bags (default 40)")
    bench.add_argument("--bz2-seconds", type=float, default=8.0, help="length of the bz2 bag (default 8)")
    bench.set_defaults(run=_cmd_bench)
    plot = sub.add_parser("plot", help="draw fields of topics against time (one panel per topic)",
                          description="fastbag plot run.bag /imu linear_acceleration.x linear_acceleration.y "
                          "/scan ranges[0] ranges: each topic is followed by its fields (none: its numeric "
                          "fields); FIELD[k] is element k of an array field, an array field alone its length "
                          "per message.")
    plot.add_argument("bag", metavar="BAG")
    plot.add_argument("items", nargs="+", metavar="TOPIC|FIELD", help="a topic, then its fields; repeat")
    plot.add_argument("--stamp", choices=("receive", "header"), default="receive",
                      help="x axis: the bag's receive time (default) or each message's header.stamp")
    plot.add_argument("-o", "--output", metavar="FILE", help="write FILE (.png, .svg, .pdf...) instead of "
                      "opening a window")
    plot.set_defaults(run=_cmd_plot)
    timeline = sub.add_parser("timeline", help="draw which topics ran when, their rates and gaps (from the index)")
    timeline.add_argument("bag", metavar="BAG")
    timeline.add_argument("-o", "--output", metavar="FILE", help="write FILE (.png, .svg, .pdf...) instead of "
                          "opening a window")
    timeline.add_argument("--gap-factor", type=float, default=5.0,
                          help="an interval longer than this many periods is a gap (default 5)")
    timeline.set_defaults(run=_cmd_timeline)
    export = sub.add_parser("export", help="write topics to Parquet, CSV or NPZ files, one per topic")
    export.add_argument("bag", metavar="BAG")
    export.add_argument("out", metavar="OUT", help="output folder (created if needed)")
    export.add_argument("--format", choices=("parquet", "csv", "npz"), default="parquet")
    export.add_argument("--topics", nargs="+", metavar="TOPIC", help="only these topics (default: all)")
    export.add_argument("--step", default="256 MB", help="read this much at a time: a size or a message count")
    export.add_argument("--compression", choices=("lz4", "zstd", "snappy", "gzip", "brotli", "none"), default=None,
                        help="Parquet codec (default lz4)")
    export.add_argument("--no-progress", action="store_true", help="no progress bar (shown on a terminal "
                        "when tqdm is installed)")
    export.set_defaults(run=_cmd_export)
    args = parser.parse_args(argv)
    if getattr(args, "step", None) is not None and str(args.step).isdigit():
        args.step = int(args.step)  # a message count
    try:
        return args.run(args)
    except (FastbagError, OSError) as exc:
        print(f"fastbag: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # an optional extra that is not installed: its message says what to install
        print(f"fastbag: {exc}", file=sys.stderr)
        return 1
