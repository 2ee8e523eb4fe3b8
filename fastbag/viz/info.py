"""What ``fastbag info`` prints of a bag, and ``str(bag)``: ``rosbag info``'s rows and layout, or a dict.

Text of numbers as rosbag info writes them (sizes in KB at least, 1024 to a
step; durations ``1:32s (92s)``; stamps in UTC and epoch seconds, both
truncated to the same hundredth). NumPy and the standard library only.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..bag import Bag
from .text import printable


def _stamp(ns: int) -> str:
    """``May 03 2024 13:00:15.79 (1714741215.79)``: both forms truncated to the same hundredth (in integers:
    a float would round, and the clock time and the epoch seconds could then differ)."""
    hundredths = int(ns) // 10_000_000
    seconds, rest = divmod(hundredths, 100)
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    sign = "-" if hundredths < 0 else ""
    return f"{moment:%b %d %Y %H:%M:%S}.{rest:02d} ({sign}{abs(hundredths) // 100}.{abs(hundredths) % 100:02d})"


def type_labels(bag: Bag) -> dict[str, str]:
    """``{type: what identifies its format}``, sorted by type: a ROS1 type's md5sum, another encoding's
    serialization and schema encoding (``cdr, ros2msg``); the first connection's where several differ."""
    types: dict[str, str] = {}
    for connection in bag.connections:
        known = connection.encoding == "ros1" and connection.md5sum != "*"
        types.setdefault(connection.msgtype, connection.md5sum if known else
                         f"{connection.encoding}, {connection.schema_encoding or 'no schema'}")
    return dict(sorted(types.items()))


def info_dict(bag: Bag) -> dict[str, object]:
    """The facts ``fastbag info`` prints, as a JSON-ready dict."""
    return {
        "path": bag.path, "format": bag.format, "version": bag.version, "duration_ns": bag.duration,
        "start_ns": bag.start_time, "end_ns": bag.end_time, "size": bag.size,
        "messages": bag.message_count, "chunks": bag.chunk_count, "compression": bag.compression,
        # the text's "uncompressed"/"compressed" sizes, per compression: bytes stored and decompressed
        "compression_sizes": {name: {"stored": stored, "decompressed": decompressed}
                              for name, (stored, decompressed) in bag.compression_sizes.items()},
        "indexed": not bag.recovered,
        "encryption": encryption_dict(bag.encryption),
        "types": type_labels(bag),
        "topics": [{"topic": t.name, "type": t.msgtype, "types": list(t.msgtypes), "messages": t.message_count,
                    "connections": len(t.connections), "frequency": t.frequency}
                   for t in bag.topics.values()],
        "problems": bag.problems,  # after the topics: reading the index can find more
    }


def encryption_dict(encryption: object) -> dict[str, str] | None:
    if encryption is None:
        return None
    return {"method": encryption.method, "recipient": encryption.recipient}  # type: ignore[attr-defined]


def encryption_rows(encryption: object) -> list[tuple[str, str]]:
    """rosbag info's rows for an encrypted bag: the encryptor, and the GPG user its key is for."""
    method, recipient = encryption.method, encryption.recipient  # type: ignore[attr-defined]
    return [("encryption", printable(method)),
            ("GPG key user", printable(recipient) if recipient else "none (a key given to the reader)")]


def rows_text(rows: list[tuple[str, str]]) -> str:
    """``key: value`` lines, the values in one column after the longest key (as rosbag info aligns them); a
    row without a key continues the one before."""
    key_width = max(len(key) for key, _ in rows) + 1
    return "\n".join(f"{key + ':' if key else '':<{key_width}} {value}" for key, value in rows)


def _size(n: float) -> str:
    """A byte count as rosbag info writes it: in KB at least, 1024 to a step (``0.4 KB``, ``1.6 GB``)."""
    for unit in ("KB", "MB", "GB", "TB", "PB"):
        n /= 1024.0
        if n < 1024.0:
            break
    return f"{n:.1f} {unit}"


def _duration_text(ns: int) -> str:
    """A duration as rosbag info writes it: ``12.2s``, ``1:32s (92s)``, ``2hr 5:03s (7503s)``."""
    seconds = ns / 1e9
    minutes, hours = int(seconds / 60), int(seconds / 3600)
    if hours > 0:
        return f"{hours}hr {minutes % 60}:{int(seconds % 60):02d}s ({int(seconds)}s)"
    if minutes > 0:
        return f"{minutes}:{int(seconds % 60):02d}s ({int(seconds)}s)"
    return f"{seconds:.1f}s"


def _frequency_text(hz: float) -> str:
    """``10.0 Hz``, ``1.2 kHz`` (as rosbag info writes a rate)."""
    for suffix in ("Hz", "kHz", "MHz", "GHz"):
        if hz < 1000.0:
            return f"{hz:.1f} {suffix}"
        hz /= 1000.0
    return f"{hz:.1f} THz"


def compression_rows(bag: Bag) -> list[tuple[str, str]]:
    """rosbag info's ``compression`` row (``bz2 [170/170 chunks; 75.42%]``), and where any chunk is
    compressed its ``uncompressed`` and ``compressed`` totals with their rates over the bag's duration."""
    counts, sizes = bag.compression, bag.compression_sizes
    total = sum(counts.values())
    parts = []
    for name, n in sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True):  # as rosbag orders
        stored, size = sizes.get(name, (0, 0))
        ratio = f"; {100.0 * stored / size:.2f}%" if name != "none" and size else ""
        parts.append(f"{name} [{n}/{total} {bag.compression_unit}{ratio}]")
    rows = [("compression", ", ".join(parts) or "none")]
    size, stored = sum(pair[1] for pair in sizes.values()), sum(pair[0] for pair in sizes.values())
    if size and any(name != "none" for name in sizes):
        texts = [_size(size), _size(stored)]
        width = max(map(len, texts))
        seconds = bag.duration / 1e9 if bag.message_count else 0.0
        if seconds > 0:
            rates = [_size(size / seconds) + "/s", _size(stored / seconds) + "/s"]
            rate_width = max(map(len, rates))
            rows += [("uncompressed", f"{texts[0]:>{width}} @ {rates[0]:>{rate_width}}"),
                     ("compressed", f"{texts[1]:>{width}} @ {rates[1]:>{rate_width}} ({100.0 * stored / size:.2f}%)")]
        else:
            rows += [("uncompressed", f"{texts[0]:>{width}}"), ("compressed", f"{texts[1]:>{width}}")]
    return rows


def format_info(bag: Bag, *, freq: bool = False) -> str:
    """``rosbag info``-style text (its rows and layout; ``freq`` adds each topic's median rate, as
    ``rosbag info --freq``), with what rosbag's has no row for: the format, encryption, an index rebuilt by
    scanning, attachments and problems found."""
    info = info_dict(bag)
    # (names and problems come from the file: printable() keeps each on its row and out of the terminal's
    # control; info_dict leaves them as they are, for JSON, which escapes them itself)
    rows: list[tuple[str, str]] = [("path", printable(bag.path)), ("format", bag.format),
                                   ("version", printable(bag.version))]
    if bag.message_count:
        rows += [("duration", _duration_text(bag.duration)), ("start", _stamp(bag.start_time)),  # type: ignore[arg-type]
                 ("end", _stamp(bag.end_time))]  # type: ignore[arg-type]
    rows += [("size", _size(bag.size)), ("messages", str(bag.message_count))]
    rows += compression_rows(bag)
    if bag.encryption is not None:
        rows += encryption_rows(bag.encryption)
    if bag.recovered:
        rows.append(("index", "rebuilt by scanning (the file is not indexed or is damaged)"))
    if bag.attachments or bag.metadata:
        rows.append(("attachments", f"{len(bag.attachments)}, metadata: {len(bag.metadata)}"))
    types = {printable(name): printable(md5) for name, md5 in info["types"].items()}  # type: ignore[union-attr]
    width = max((len(t) for t in types), default=0)  # type: ignore[union-attr]
    rows += [("types" if k == 0 else "", f"{name:<{width}} [{md5}]")
             for k, (name, md5) in enumerate(types.items())]  # type: ignore[union-attr]
    topics = list(bag.topics.values())
    names = {t.name: printable(t.name) for t in topics}
    twidth = max(map(len, names.values()), default=0)
    cwidth = max((len(str(t.message_count)) for t in topics), default=0)
    rates = {t.name: _frequency_text(t.frequency) for t in topics if freq and t.frequency}
    fwidth = max(map(len, rates.values()), default=0)
    kinds = {t.name: printable(", ".join(t.msgtypes)) for t in topics}
    kwidth = max(map(len, kinds.values()), default=0)
    for k, t in enumerate(topics):
        line = f"{names[t.name]:<{twidth}}   {t.message_count:>{cwidth}} {'msgs' if t.message_count > 1 else 'msg '}"
        line += f" @ {rates[t.name]:>{fwidth}}" if t.name in rates else " " * (fwidth + 3)  # (also without)
        line += f" : {kinds[t.name]:<{kwidth}}"
        line += f" ({len(t.connections)} connections)" if len(t.connections) > 1 else ""
        rows.append(("topics" if k == 0 else "", line.rstrip()))
    rows += [("problems" if k == 0 else "", printable(problem))
             for k, problem in enumerate(info["problems"])]  # type: ignore[arg-type]
    return rows_text(rows)
