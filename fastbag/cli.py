"""The ``fastbag`` command: ``info``, ``demo``, ``bench``, ``plot``, ``timeline``, ``export``.

``fastbag info BAG`` prints what ``rosbag info`` prints; ``--json`` gives the
same as JSON. ``fastbag demo`` writes a sample bag into a temporary folder,
prints its info, reads every topic and prints the speed. ``fastbag plot`` and
``fastbag timeline`` draw fields and the bag's timeline (matplotlib:
``pip install 'fastbag[plot]'``) to a window or a file. ``fastbag export
BAG OUT --format parquet`` writes one file per topic (see
:mod:`fastbag.convert.export`).

As a Unix tool: errors are one ``fastbag: ...`` line on stderr (bad arguments
``fastbag: error: ...``, exit 2); warnings ``fastbag: warning: ...``; output
into a closed pipe (``| head``) ends quietly (exit 141); Ctrl-C and SIGTERM
interrupt cleanly (exit 130 and 143, export's temporary file removed).
"""

from __future__ import annotations

import argparse
import decimal
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ._version import __version__
from .bag import Bag, no_topic, parse_step
from .bag import open as open_bag
from .errors import EncryptionKeyError, FastbagError, NotFoundError
from .viz.info import encryption_dict, encryption_rows, rows_text, format_info, info_dict
from .viz.text import printable
from .viz.timeline import check_gap_factor  # numpy only: no matplotlib either


def _info_text(path: str, options: dict[str, Any], as_json: bool, freq: bool = False) -> tuple[str, bool]:
    """``(what fastbag info prints for path, whether it is a full report)``; FastbagError or OSError when
    the file cannot be read at all."""
    try:
        bag = open_bag(path, **options)
    except EncryptionKeyError as exc:
        # Encrypted for someone else (or the key is elsewhere): say so, and for whom; the rest of
        # the index (topics, types) is encrypted with the key.
        if exc.encryption is None:
            raise
        if as_json:
            return json.dumps({"path": str(path), "encryption": encryption_dict(exc.encryption),
                               "error": str(exc)}, indent=2), False
        return rows_text([("path", str(path)), *encryption_rows(exc.encryption),
                           ("key", f"not available ({exc})")]), False
    with bag:
        return (json.dumps(info_dict(bag), indent=2) if as_json else format_info(bag, freq=freq)), True


def _said(exc: BaseException) -> str:
    """An error in one line: an OSError as ``PATH: what went wrong``, without Python's ``[Errno N]``; anything
    else as its text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror if exc.filename is None else f"{printable(os.fsdecode(exc.filename))}: {exc.strerror}"
    return str(exc)


def _file_error_line(path: str, exc: BaseException) -> str:
    """``fastbag: PATH: what went wrong``, the path named once: an OSError as its strerror (``No such file
    or directory``); a message's own ``(PATH, offset N, ...)`` left as ``(offset N, ...)``."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"fastbag: {printable(path)}: {exc.strerror}"
    text = str(exc).replace(f" ({path})", "").replace(f"({path}, ", "(")
    return f"fastbag: {printable(path)}: {printable(text)}"  # (a message may quote the file's names)


def _add_open_options(parser: argparse.ArgumentParser) -> None:
    """The options of fastbag.open a command line needs: definitions for bags without them, an AES key."""
    parser.add_argument("--definitions", metavar="DIR", help="a folder of .msg (or .idl) files, <pkg>/msg/<Type>.msg "
                        "as in a workspace, for types the bag stores no definition of (ROS1 format 1.1, rosbag2 "
                        "before Iron: custom types)")
    parser.add_argument("--aes-key", metavar="HEX", help="the AES key of encrypted bags, as 32 hex digits (else the "
                        "key in the bag is decrypted through gpg; a GPG passphrase from $ROSBAG_GPG_PASSPHRASE)")


def _open_options(args: argparse.Namespace) -> dict[str, Any]:
    """fastbag.open's keyword arguments from :func:`_add_open_options`' options given."""
    return {name: value for name, value in (("definitions", args.definitions), ("aes_key", args.aes_key))
            if value is not None}


def _cmd_info(args: argparse.Namespace) -> int:
    status, shown = 0, 0
    options = _open_options(args)
    as_list = args.json and len(args.bags) > 1  # one JSON document: a list of the reports
    if as_list:
        print("[")
    for path in args.bags:
        try:
            text, full = _info_text(path, options, args.json, args.freq)
        except (FastbagError, OSError) as exc:  # that file only, like rosbag info: the others are still shown
            sys.stdout.flush()  # in order with the reports before it, when both streams go to one file
            print(_file_error_line(path, exc), file=sys.stderr)
            status = 1
            continue
        separator = (",\n" if as_list else "") if args.json else "\n"
        print((separator if shown else "") + text, end="" if as_list else "\n")
        shown += 1
        status = status if full else 1
    if as_list:
        print("\n]")
    return status


def _cmd_demo(args: argparse.Namespace) -> int:
    from .tooling.synth import write_demo_bag

    with tempfile.TemporaryDirectory(prefix="fastbag-demo-") as folder:
        path = Path(args.output) if args.output else Path(folder) / f"demo-{args.compression}.bag"
        started = time.perf_counter()
        write_demo_bag(path, seconds=args.seconds, compression=args.compression)
        kept = "" if args.output else " (removed at the end: -o PATH keeps it)"
        print(f"wrote {path} in {time.perf_counter() - started:.2f}s{kept}\n")
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
        return bench.exit_status(report)  # 1 if a topic's values differ from rosbags'
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
            raise no_topic(item, bag.path, bag.topics)
        else:
            selections[-1][1].append(item)
    return selections


def _open_or_say(args: argparse.Namespace) -> Bag | None:
    """``args.bag`` opened, or None once stderr says why not, as ``fastbag info`` says it."""
    try:
        return open_bag(args.bag, **_open_options(args))
    except (FastbagError, OSError) as exc:
        print(_file_error_line(args.bag, exc), file=sys.stderr)
        return None


def _cmd_plot(args: argparse.Namespace) -> int:
    from .viz.plot import plot_topics, save_or_show

    bag = _open_or_say(args)
    if bag is None:
        return 1
    with bag:
        try:
            figure = plot_topics(bag, plot_selections(bag, args.items), stamp=args.stamp,
                                 use_pyplot=args.output is None, start=args.start, end=args.end)
        except (KeyError, ValueError, IndexError) as exc:  # no such topic, field or element, or not a number
            print(f"fastbag: {exc.args[0] if exc.args else exc}", file=sys.stderr)
            return 2
        save_or_show(figure, args.output)
    return 0


def _cmd_timeline(args: argparse.Namespace) -> int:
    from .viz.plot import plot_timeline, save_or_show

    bag = _open_or_say(args)
    if bag is None:
        return 1
    with bag:
        ax = plot_timeline(bag, gap_factor=args.gap_factor, use_pyplot=args.output is None)
        save_or_show(ax.figure, args.output)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    """Export each bag (into OUT, or with several bags into OUT/<bag's name>); 1 when a topic or a bag was not
    written (the others still are), 2 for a wrong argument."""
    outs = _export_folders(args.bags, args.out)
    failed = False
    for bag, out in zip(args.bags, outs):
        code = _export_one(bag, out, args)
        if code == 2 and len(args.bags) == 1:  # a topic the bag lacks; among several bags, that bag's failure
            return 2
        failed |= code != 0
    return 1 if failed else 0


def _export_folders(bags: list[str], out: str) -> list[str]:
    """OUT for one bag; for several, a folder in OUT per bag named after it (``~2``... where two share a name)."""
    if len(bags) == 1:
        return [out]
    taken: dict[str, int] = {}
    folders = []
    for bag in bags:
        name = os.path.basename(os.path.normpath(bag)) or "bag"
        stem = name.rsplit(".", 1)[0] if os.path.isfile(bag) and "." in name.lstrip(".") else name
        taken[stem] = taken.get(stem, 0) + 1
        folders.append(os.path.join(out, stem if taken[stem] == 1 else f"{stem}~{taken[stem]}"))
    return folders


def _export_one(bag: str, out: str, args: argparse.Namespace) -> int:
    from .convert.export import export

    try:
        result = export(bag, out, args.format, args.topics, step=args.step,
                        progress=False if args.no_progress else None, compression=args.compression,
                        start=args.start, end=args.end, **_open_options(args))
    except NotFoundError as exc:  # a topic the bag lacks: a wrong argument, as for plot
        print(f"fastbag: {exc}", file=sys.stderr)
        return 2
    except (FastbagError, OSError) as exc:  # this bag cannot be read, or OUT not written (either named): the
        print(f"fastbag: {_said(exc)}", file=sys.stderr)  # next bags are exported all the same
        return 1
    except (KeyError, ImportError, ValueError, TypeError) as exc:
        print(f"fastbag: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    for topic, path in result.files.items():
        print(f"{topic} -> {printable(str(path))}")
    for topic, reason in result.skipped.items():
        print(f"fastbag: skipped {topic}: {reason}", file=sys.stderr)
    print(f"{result.messages} messages of {len(result.files)} topic{'' if len(result.files) == 1 else 's'} "
          f"written to {printable(out)}"
          + (f"; {len(result.skipped)} skipped" if result.skipped else ""), file=sys.stderr)
    return 1 if result.skipped else 0


def _epoch_seconds(text: str) -> int:
    """``--start``/``--end``: seconds since the epoch, as ``fastbag info`` prints them (decimals exact), in ns
    (digits past the nanosecond round up: the bound selects what the exact time would)."""
    try:
        seconds = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number of seconds since the epoch: {text!r}") from None
    if not seconds.is_finite():
        raise argparse.ArgumentTypeError(f"not a number of seconds since the epoch: {text!r}")
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{text} is before the epoch: times are seconds since 1970, as fastbag "
                                         "info prints them")
    if seconds >= 1 << 32:  # past 2106, where ROS 1 time ends: nanoseconds, as the Python API takes them
        year = 1970 + int(seconds) // 31_556_952
        raise argparse.ArgumentTypeError(f"{text} is no time as seconds since the epoch (the year {year}); "
                                         f"nanoseconds? then {seconds / 10**9:f}")
    # A bound between two nanoseconds selects as the next one does ([start, end) of int times): rounded up,
    # exactly (a context as precise as the text: the default 28 digits would round the tail away first).
    with decimal.localcontext() as exact:
        exact.prec = len(text) + 20
        return int((seconds * 10**9).to_integral_value(rounding=decimal.ROUND_CEILING))


def _step(text: str) -> int | str:
    """``--step``: a whole number (``10000``, ``10_000``, as Python writes them) is a message count; anything
    else is a size (``"256 MB"``) for :func:`fastbag.bag.parse_step` to read."""
    try:
        return int(text)
    except ValueError:
        return text


class _UsageError(ValueError):
    """An argument argparse's types cannot check: printed as one ``fastbag: error: ...`` line, exit 2."""


def _check(args: argparse.Namespace) -> None:
    """Check (and convert) what argparse cannot, before any bag is opened or file written: _UsageError."""
    if getattr(args, "aes_key", None) is not None:
        try:
            key = bytes.fromhex(args.aes_key)
        except ValueError:
            raise _UsageError(f"argument --aes-key: {args.aes_key!r} is not hexadecimal") from None
        if len(key) != 16:  # AES-128
            raise _UsageError(f"argument --aes-key: an AES key is 32 hex digits, not {len(args.aes_key)}")
        args.aes_key = key
    if getattr(args, "definitions", None) is not None and not os.path.exists(args.definitions):
        raise _UsageError(f"argument --definitions: {args.definitions!r} does not exist (a folder of .msg files)")
    if getattr(args, "jobs", None):  # bench: a misspelt job would time nothing and say nothing
        from .tooling.bench import JOBS

        known = [job.name for job in JOBS] + ["first-read"]
        unknown = [name for name in args.jobs if name not in known]
        if unknown:
            raise _UsageError(f"argument --jobs: no job {unknown[0]!r}; jobs: {' '.join(known)}")
    if getattr(args, "step", None) is not None:  # export
        try:
            parse_step(args.step)
        except ValueError as exc:
            raise _UsageError(f"argument --step: {exc}") from None
    if getattr(args, "compression", None) is not None and getattr(args, "format", None) is not None:  # export
        from .convert.export import CODECS

        if args.compression not in CODECS[args.format]:
            raise _UsageError(f"argument --compression: {args.format} compression is one of "
                              f"{', '.join(CODECS[args.format])}, not {args.compression!r}")
    start, end = getattr(args, "start", None), getattr(args, "end", None)  # export, plot
    if start is not None and end is not None and start >= end:  # (said once, not once a bag)
        exact = [f"{ns // 10**9}.{ns % 10**9:09d}" for ns in (end, start)]
        raise _UsageError(f"argument --end: {exact[0]} is not after --start {exact[1]}: the window is [start, end), "
                          "in seconds since the epoch")
    if args.run is _cmd_demo and args.output is not None and os.path.splitext(args.output)[1].lower() != ".bag":
        raise _UsageError(f"argument -o/--output: the demo writes a ROS 1 bag, named .bag, not "
                          f"{printable(args.output)!r}")
    for name in ("seconds", "bz2_seconds"):  # demo, bench
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise _UsageError(f"argument --{name.replace('_', '-')}: a length in seconds is 0 or more, not {value}")
    if getattr(args, "gap_factor", None) is not None:
        try:
            check_gap_factor(args.gap_factor)
        except ValueError:
            raise _UsageError(f"argument --gap-factor: must be a positive number, not {args.gap_factor}") from None
    if args.run in (_cmd_plot, _cmd_timeline):  # a misspelt suffix, or no display to show on, fails now
        from .viz.plot import check_can_show, check_output

        try:
            if args.output is not None:
                check_output(args.output)
            else:
                check_can_show()
        except ValueError as exc:
            raise _UsageError(f"argument -o/--output: {exc}" if args.output is not None else str(exc)) from None


def _notes(exc: BaseException) -> str:
    """What an interrupted command added to its interruption (export: the files complete before it)."""
    return "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """``warnings.showwarning`` of the command: ``fastbag: warning: ...`` on one line (the source line in
    fastbag that raised it means nothing to a user)."""
    text = " ".join(str(message).splitlines())
    try:
        print(f"fastbag: warning: {text}", file=file if file is not None else sys.stderr)
    except OSError:  # a closed stderr loses the warning, not the command (as warnings' own does)
        pass


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is (like Ctrl-C's KeyboardInterrupt), so that cleanups run: export
    removes its temporary file."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null after a closed pipe: Python flushes it at exit, which would fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (a test's capture)
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fastbag`` command."""
    parser = argparse.ArgumentParser(prog="fastbag", description="Read ROS bags into NumPy, fast.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="summarize bags, like rosbag info", description="Summarize each bag as "
                          "rosbag info does: format, times, size, compression, types and topics.")
    info.add_argument("bags", nargs="+", metavar="BAG", help="ROS1 bags, MCAP files or rosbag2 directories")
    info.add_argument("--json", action="store_true", help="print JSON (each topic's frequency included)")
    info.add_argument("--freq", action="store_true", help="show each topic's median message rate, as "
                      "rosbag info --freq does")
    _add_open_options(info)
    info.set_defaults(run=_cmd_info)
    demo = sub.add_parser("demo", help="write a sample bag, read it back and print the speed")
    demo.add_argument("--seconds", type=float, default=3.0, help="recording length (default 3)")
    demo.add_argument("--compression", choices=("none", "lz4", "bz2"), default="lz4",
                      help="the sample bag's chunk compression (default lz4)")
    demo.add_argument("-o", "--output", metavar="PATH", help="write the sample bag to PATH and keep it (default: "
                      "a temporary file, removed at the end)")
    demo.set_defaults(run=_cmd_demo)
    bench = sub.add_parser("bench", help="time decoding side by side with rosbags (generated bags, or yours)")
    bench.add_argument("paths", nargs="*", metavar="PATH", help="bags to time topic by topic (default: the "
                       "generated benchmark bags, cached in $FASTBAG_BENCH_DIR or ~/.cache/fastbag/bench)")
    bench.add_argument("--against", choices=("rosbags", "none"), default=None,
                       help="compare with rosbags (the default for the generated bags)")
    bench.add_argument("--json", action="store_true", help="print JSON")
    bench.add_argument("--jobs", nargs="+", metavar="JOB", help="only these jobs of the generated suite, "
                       "named as in the report's first column (imu-1m, pointcloud2, imu-1m-mcap, "
                       "pointcloud2-db3, first-read...); an unknown name is refused with the list")
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
    plot.add_argument("--start", type=_epoch_seconds, metavar="SECONDS", help="only messages from this time on "
                      "(seconds since the epoch, as info prints them)")
    plot.add_argument("--end", type=_epoch_seconds, metavar="SECONDS", help="only messages before this time")
    _add_open_options(plot)
    plot.set_defaults(run=_cmd_plot)
    timeline = sub.add_parser("timeline", help="draw which topics ran when, their rates and gaps (from the index)")
    timeline.add_argument("bag", metavar="BAG")
    timeline.add_argument("-o", "--output", metavar="FILE", help="write FILE (.png, .svg, .pdf...) instead of "
                          "opening a window")
    timeline.add_argument("--gap-factor", type=float, default=5.0,
                          help="an interval longer than this many periods is a gap (default 5)")
    _add_open_options(timeline)
    timeline.set_defaults(run=_cmd_timeline)
    export = sub.add_parser("export", help="write topics to Parquet, CSV or NPZ files, one per topic")
    export.add_argument("bags", nargs="+", metavar="BAG", help="one or more bags (several: each into "
                        "OUT/<its name>)")
    export.add_argument("out", metavar="OUT", help="output folder (created if needed)")
    export.add_argument("--start", type=_epoch_seconds, metavar="SECONDS", help="only messages from this time on "
                        "(seconds since the epoch, as info prints them)")
    export.add_argument("--end", type=_epoch_seconds, metavar="SECONDS", help="only messages before this time")
    export.add_argument("--format", choices=("parquet", "csv", "npz"), default="parquet")
    export.add_argument("--topics", nargs="+", metavar="TOPIC", help="only these topics (default: all)")
    export.add_argument("--step", type=_step, default="256 MB",
                        help="read this much at a time: a size (256 MB) or a message count (10000)")
    export.add_argument("--compression", default=None,  # checked by _check, by format (export.CODECS)
                        help="Parquet: lz4 (default), zstd, snappy, gzip, brotli; CSV: gzip, bz2, xz, zstd; "
                             "NPZ: deflate; none")
    export.add_argument("--no-progress", action="store_true", help="no progress bar (shown on a terminal "
                        "when tqdm is installed)")
    _add_open_options(export)
    export.set_defaults(run=_cmd_export)
    args = parser.parse_args(argv)
    showwarning, warnings.showwarning = warnings.showwarning, _show_warning
    # SIGTERM (kill, timeout, batch schedulers) interrupts as Ctrl-C does; a handler only in the main thread
    catch_term = threading.current_thread() is threading.main_thread()
    on_term = signal.signal(signal.SIGTERM, _raise_terminated) if catch_term else None
    try:
        _check(args)
        status = args.run(args)
        sys.stdout.flush()  # here, so that a closed pipe shows now and not at exit
        return status
    except _UsageError as exc:
        print(f"fastbag: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as Unix tools do
        _quiet_stdout()
        return 128 + 13  # as if killed by SIGPIPE
    except _Terminated as exc:
        print("fastbag: terminated" + _notes(exc), file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt as exc:
        print("fastbag: interrupted" + _notes(exc), file=sys.stderr)
        return 128 + signal.SIGINT
    except (FastbagError, OSError) as exc:
        print(f"fastbag: {_said(exc)}", file=sys.stderr)
        return 1
    except ImportError as exc:  # an optional extra that is not installed: its message says what to install
        print(f"fastbag: {exc}", file=sys.stderr)
        return 1
    finally:
        warnings.showwarning = showwarning
        if catch_term:
            signal.signal(signal.SIGTERM, on_term if on_term is not None else signal.SIG_DFL)
