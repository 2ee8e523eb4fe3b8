"""Notebook views: ``_repr_html_`` of a Bag, a TopicArray and a decoded message.

Plain HTML tables and small inline SVG timelines: nothing to install, and
every piece of text that comes from the file (topic names, types, strings
in messages) is escaped. A Bag shows what ``fastbag info`` shows, a row
per topic with its timeline, and its first messages (raw); a TopicArray its
summary, its timeline and its first rows; a message its fields. Timelines
come from the index alone.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import FastbagError
from .info import compression_rows, type_labels
from .text import printable
from .timeline import bag_timeline, density, find_gaps, rate_of

if TYPE_CHECKING:
    from ..bag import Bag
    from ..msg.arrays import TopicArray

#: Rows of a TopicArray shown, topics (and types) of a Bag listed, elements of a list in a message shown,
#: fields of a message shown (a row each in its view, a column each in a TopicArray's).
FIRST_ROWS = 5
MAX_TOPICS = 200
MAX_ELEMENTS = 10
MAX_FIELDS = 400
MAX_COLUMNS = 40
#: Size of a timeline strip (pixels) and its bins.
STRIP_WIDTH, STRIP_HEIGHT, STRIP_BINS = 240, 14, 80
#: One style block per view, for its tables' cells (inline styles on every cell would double the size).
_STYLE = ("<style>table.fastbag{border-collapse:collapse;font-size:12px}"
          "table.fastbag td,table.fastbag th{padding:1px 8px;text-align:left;vertical-align:top}</style>")


def _e(value: object) -> str:
    """Text from the file for HTML: escaped, and its control characters and lone surrogates written out
    (NUL or ESC make HTML invalid; a surrogate could not be encoded at all)."""
    return html.escape(printable(value), quote=True)


def _utc(ns: int) -> str:
    """UTC to the microsecond, then the exact seconds (int ns, so no float rounding)."""
    seconds, rest = divmod(int(ns), 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{rest // 1000:06d} UTC ({seconds}.{rest:09d})"


def size_text(n: float) -> str:
    """A byte count for people: ``1.7 GB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TB"


def _table(rows: list[list[str]], header: list[str] | None = None) -> str:
    """An HTML table of already-escaped cells."""
    out = ['<table class="fastbag">']
    if header:
        out.append("<tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>")
    out += ["<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows]
    out.append("</table>")
    return "".join(out)


def timeline_svg(times: np.ndarray, start: int, end: int, gaps: np.ndarray | None = None,
                 width: int = STRIP_WIDTH, height: int = STRIP_HEIGHT, bins: int = STRIP_BINS) -> str:
    """A strip of ``bins`` cells over ``[start, end]``: each cell's darkness is its share of the busiest
    cell's messages; ``gaps`` (int64 ``(k, 2)`` ns) are red."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'style="background:#f4f4f4;vertical-align:middle">']
    span = max(end - start, 1)
    if times.size:
        counts, _ = density(times, start, end, bins)
        cell = width / bins
        peak = max(1, int(counts.max()))
        for k in np.flatnonzero(counts).tolist():
            out.append(f'<rect x="{k * cell:.1f}" y="0" width="{cell:.1f}" height="{height}" fill="#1f77b4" '
                       f'fill-opacity="{0.25 + 0.75 * counts[k] / peak:.2f}"/>')
    for a, b in (gaps if gaps is not None else np.empty((0, 2), np.int64)).tolist():
        x = width * (a - start) / span
        out.append(f'<rect class="gap" x="{x:.1f}" y="0" width="{max(1.0, width * (b - a) / span):.1f}" '
                   f'height="{height}" fill="#d62728" fill-opacity="0.35"/>')
    out.append("</svg>")
    return "".join(out)


def _rate(rate: float | None) -> str:
    return f"{rate:.2f} Hz" if rate else "-"


def bag_html(bag: "Bag") -> str:
    """What ``fastbag info`` shows, a row per topic (type, messages, mean rate, gaps, timeline), and the
    first messages (topic, receive time, size, first bytes)."""
    if bag.closed:
        return f"<p><b>fastbag.Bag</b> {_e(bag.path)} (closed)</p>"
    facts = [["path", _e(bag.path)], ["format", _e(f"{bag.format} {bag.version}")]]
    if bag.start_time is not None and bag.end_time is not None:
        facts += [["duration", f"{bag.duration / 1e9:.3f} s"], ["start", _e(_utc(bag.start_time))],
                  ["end", _e(_utc(bag.end_time))]]
    facts += [["size", size_text(bag.size)], ["messages", str(bag.message_count)]]
    facts += [[key, _e(value)] for key, value in compression_rows(bag)]
    types = type_labels(bag)
    if types:
        shown = [_e(f"{name} [{label}]") for name, label in list(types.items())[:MAX_TOPICS]]
        shown += [f"... and {len(types) - MAX_TOPICS} more types"] if len(types) > MAX_TOPICS else []
        facts.append(["types", "<br>".join(shown)])
    if bag.recovered:
        facts.append(["index", "rebuilt by scanning (the bag is not indexed or is damaged)"])
    rows = bag_timeline(bag)
    start, end = bag.start_time or 0, bag.end_time or 0
    topics = []
    for row in rows[:MAX_TOPICS]:
        topics.append([_e(row.topic), _e(", ".join(row.msgtypes)), str(row.count), _rate(row.rate),
                       str(len(row.gaps)) if row.gaps.size else "", timeline_svg(row.times, start, end, row.gaps)])
    more = f"<p>... and {len(rows) - MAX_TOPICS} more topics</p>" if len(rows) > MAX_TOPICS else ""
    return (f'{_STYLE}<div class="fastbag-bag"><p><b>fastbag.Bag</b> {_e(os.path.basename(bag.path))}</p>'
            + _table(facts)
            + _table(topics, ["topic", "type", "messages", "mean rate", "gaps", "timeline"]) + more
            + _first_messages(bag) + "</div>")


def _first_messages(bag: "Bag") -> str:
    """The bag's first messages (topic, receive time, size, first bytes): reads the first chunk only.
    A view must not fail: a chunk that cannot be read shows its error instead."""
    cells = []
    try:
        for k, m in zip(range(FIRST_ROWS), bag.messages(raw=True)):
            head = bytes(m.data[:16])
            cells.append([str(k), _e(m.topic), _e(_utc(m.time)), str(len(m.data)),
                          _e(head.hex(" ") + (" ..." if len(m.data) > len(head) else ""))])
    except FastbagError as exc:
        return f"<p>first messages: cannot be read: {_e(exc)}</p>"
    if not cells:
        return ""
    return "<p>first messages</p>" + _table(cells, ["#", "topic", "receive time", "bytes", "data"])


def topic_array_html(arr: "TopicArray") -> str:
    """A TopicArray's topic, type, messages, span, mean rate and timeline, then its first rows."""
    times = arr.time
    n = len(arr)
    facts = [["topic", _e(arr.topic)], ["type", _e(arr.msgtype)], ["messages", str(n)]]
    if n:
        # (rows picked out of order, take(t, [5, 1, 3]) or arr[::-1], span the same time as in order)
        ordered = times if bool((times[1:] >= times[:-1]).all()) else np.sort(times)
        start, end = int(ordered[0]), int(ordered[-1])
        facts += [["start", _e(_utc(start))], ["duration", f"{(end - start) / 1e9:.3f} s"],
                  ["mean rate", _rate(rate_of(ordered))],
                  ["timeline", timeline_svg(ordered, start, end, find_gaps(ordered))]]
    header: list[str] = []
    body: list[list[str]] = []
    for i in range(min(n, FIRST_ROWS)):
        flat = dict(_flatten(arr[i]))
        if not header:
            header = list(flat)[:MAX_COLUMNS]
        body.append([str(i), _e(_utc(int(times[i])))] + [_e(_cell(flat.get(k, ""))) for k in header])
    more = f"<p>... {n - FIRST_ROWS} more rows</p>" if n > FIRST_ROWS else ""
    if body and len(flat) > MAX_COLUMNS:
        more += f"<p>... {_more_fields(flat, MAX_COLUMNS)} (a message's own view shows them)</p>"
    rows = _table(body, ["#", "receive time"] + [_e(h) for h in header]) if body else ""
    return (f'{_STYLE}<div class="fastbag-topic"><p><b>TopicArray</b> {_e(arr.topic)}</p>' + _table(facts) + rows + more
            + "</div>")


def record_html(record: Any) -> str:
    """A decoded message: its type, then a row per field (nested fields as dotted paths).

    Uses only what every decoded message offers: ``_type``, and its ``_fields``
    or else ``to_dict()``. At most MAX_FIELDS rows.
    """
    msgtype = getattr(record, "_type", "") or ""  # _type: no field can shadow it (msgtype, a field name, can)
    flat = _flatten(record)
    rows = [[_e(path), _e(_cell(value))] for path, value in flat[:MAX_FIELDS]]
    if len(flat) > MAX_FIELDS:
        rows.append(["...", _more_fields(flat, MAX_FIELDS)])
    return f'{_STYLE}<div class="fastbag-message"><p><b>{_e(msgtype) or "message"}</b></p>' + \
        _table(rows, ["field", "value"]) + "</div>"


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, leaf)`` of a message (its fields, read one by one: an array of messages is never
    converted whole) or of nested dicts (JSON messages, ``to_dict()``); lists of messages or dicts show their
    first MAX_ELEMENTS elements."""
    fields = getattr(type(value), "_fields", None)
    if isinstance(fields, tuple) and hasattr(value, "to_dict"):  # fastbag's messages and times
        return _flatten_items(((name, getattr(value, name)) for name in fields), prefix)
    if isinstance(value, dict):
        return _flatten_items(value.items(), prefix)
    if not isinstance(value, (dict, str, bytes, bytearray, np.ndarray)) and hasattr(value, "to_dict"):
        return _flatten(value.to_dict(), prefix)  # another kind of message object: as it converts itself
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)) and len(value):
        first = value[0]
        if isinstance(first, dict) or hasattr(first, "to_dict"):
            out = []
            for k in range(min(len(value), MAX_ELEMENTS)):
                out += _flatten(value[k], f"{prefix}[{k}]")
            if len(value) > MAX_ELEMENTS:
                out.append((f"{prefix}[...]", f"{len(value) - MAX_ELEMENTS} more elements"))
            return out
    return [(prefix, value)]


def _more_fields(flat: list[tuple[str, Any]], shown: int) -> str:
    """What a view says of the fields it leaves out: how many, where :func:`_flatten` counted them all."""
    return "more fields" if len(flat) > MAX_FIELDS else f"{len(flat) - shown} more fields"


def _flatten_items(items: Iterable[tuple[str, Any]], prefix: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, sub in items:
        out += _flatten(sub, f"{prefix}.{name}" if prefix else str(name))
        if len(out) > MAX_FIELDS:  # (a view shows no more: the rest is never flattened, nor counted)
            break
    return out


def _cell(value: Any, limit: int = 80) -> str:
    """A short text for a value: numbers in full precision, arrays as type, length and first values."""
    if isinstance(value, np.ndarray):
        shown = value.reshape(-1)[:8]
        items = ", ".join(_cell(v, 24) for v in shown.tolist())
        etc = ", ..." if value.size > shown.size else ""
        text = f"{value.dtype}{list(value.shape)}: {items}{etc}"
    elif isinstance(value, list):
        text = f"[{', '.join(_cell(v, 24) for v in value[:8])}{', ...' if len(value) > 8 else ''}]"
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, (bytes, bytearray)):
        text = repr(bytes(value[:limit]))
    else:
        text = str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
