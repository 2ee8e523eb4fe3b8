"""matplotlib figures: fields of topics against time, and a bag's timeline.

matplotlib is the optional extra ``fastbag[plot]``, imported inside the
functions. Figures only to be saved are built without pyplot (no GUI backend, no
global state).

Every function making a new figure takes ``use_pyplot``: True (the
default) makes it through pyplot, so that notebooks and ``plt.show()``
display it; ``fastbag plot -o`` and ``fastbag timeline -o`` pass False.

Times on the x axis are seconds since an origin ``t0`` (int ns; by default
the first time drawn), labelled with that origin in UTC.
"""

from __future__ import annotations

import os
import warnings
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import FastbagWarning
from ..msg.messages import time_ns
from .fields import header_stamp_ns, numeric_fields, series
from .text import printable
from .timeline import GAP_FACTOR, bag_timeline, density

if TYPE_CHECKING:
    from ..bag import Bag
    from ..msg.messages import TimeLike
    from ..msg.arrays import TopicArray

#: Topics with more messages than this are drawn as message counts per time bin, not a mark each.
MAX_MARKS = 2000
#: Bins across the bag's duration for such topics.
DENSITY_BINS = 300
#: Fields drawn for a topic named without any (its first plain numeric ones): more would be unreadable.
DEFAULT_LINES = 12
#: What a receive-time or a header-stamp axis is called.
STAMPS = {"receive": "receive time", "header": "header.stamp"}
INSTALL_HINT = "plotting needs matplotlib: pip install 'fastbag[plot]'"


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return matplotlib


def pyplot() -> Any:
    """``matplotlib.pyplot``, or ImportError saying how to install it."""
    _matplotlib()
    import matplotlib.pyplot as plt

    return plt


def new_figure(*, use_pyplot: bool = True, **options: Any) -> Any:
    """A Figure: through pyplot (so that a notebook or ``plt.show()`` displays it), or standalone, for
    saving without any GUI backend or pyplot state."""
    if use_pyplot:
        return pyplot().figure(**options)
    _matplotlib()
    from matplotlib.figure import Figure

    return Figure(**options)


def _origin(t0: int) -> str:
    seconds, rest = divmod(int(t0), 1_000_000_000)  # as integers: a float would round 59.9999999 up
    return f"{datetime.fromtimestamp(seconds, tz=timezone.utc):%Y-%m-%d %H:%M:%S}.{rest // 1_000_000:03d} UTC"


def seconds_since(times: np.ndarray, t0: int) -> np.ndarray:
    """float64 seconds of int64 ns ``times`` after ``t0`` (subtracted as integers: no precision lost)."""
    return (np.asarray(times, dtype=np.int64) - np.int64(t0)) / 1e9


def plot_fields(arr: "TopicArray", *fields: str, ax: Any = None, stamp: str = "receive", t0: int | None = None,
                **line_options: Any) -> Any:
    """Draw ``fields`` of a decoded topic against time on ``ax`` (a new figure's axes if None); returns the axes.

    ``fields`` are paths (see :func:`fastbag.viz.fields.series`: ``"linear_acceleration.x"``,
    ``"ranges[0]"``, ``"ranges"`` for the length per message); none given
    draws the plain numeric fields (header and absolute times excluded), the
    first DEFAULT_LINES of them, with a warning saying where it cut. ``stamp`` is
    ``"receive"`` (the bag's receive times) or ``"header"`` (``header.stamp``).
    ``t0`` (int ns) is the origin of the x axis; by default the first time.
    ``line_options`` go to ``Axes.plot``.
    """
    fields = tuple(f for field in fields for f in (field if isinstance(field, (list, tuple)) else [field]))
    odd = [f for f in fields if not isinstance(f, str)]  # (a list of them is taken too, as pandas' plot takes it)
    if odd:
        raise TypeError(f"fields are paths (str) such as 'linear_acceleration.x', not {odd[0]!r}")
    if stamp not in STAMPS:
        raise ValueError(f"stamp must be one of {', '.join(STAMPS)}, not {stamp!r}")
    topic = getattr(arr, "topic", "")
    if not len(arr):  # (a blank panel would say nothing)
        raise ValueError(f"{topic or arr.msgtype} has no messages to plot")
    times = arr.time if stamp == "receive" else header_stamp_ns(arr, topic)
    paths = list(fields) or numeric_fields(arr)
    if not paths:
        raise ValueError(f"{topic or 'the topic'} ({arr.msgtype}) has no plain numeric field; name one "
                         "(an array's length: FIELD, one element: FIELD[0])")
    if not fields and len(paths) > DEFAULT_LINES:
        warnings.warn(FastbagWarning(f"{topic or arr.msgtype}: drawing the first {DEFAULT_LINES} of its "
                                     f"{len(paths)} numeric fields (up to {paths[DEFAULT_LINES - 1]}); name the "
                                     "fields to draw others"), stacklevel=2)
        paths = paths[:DEFAULT_LINES]
    drawn = [series(arr, path) for path in paths]  # every path checked before anything is drawn
    if ax is None:
        ax = new_figure(layout="constrained").add_subplot()
    if t0 is None:
        t0 = int(times[0]) if times.size else 0
    x = seconds_since(times, t0)
    if len(arr) <= 200:  # few messages: a mark on each, or a lone message would not show
        line_options.setdefault("marker", ".")
    if len(drawn) > 10 and "color" not in line_options:  # (the default cycle has 10 colours: no two alike)
        import matplotlib

        ax.set_prop_cycle(color=matplotlib.colormaps["tab20"].colors)
    _limit_overflowing_range(ax, [y for y, _ in drawn], topic or arr.msgtype)  # (before: no autoscale of them)
    for y, label in drawn:
        ax.plot(x, y, label=label, **line_options)
    ax.set_title(printable(f"{topic} ({arr.msgtype})" if topic else arr.msgtype), fontsize="medium",
                 parse_math=False)  # ($ in a name is no math)
    ax.set_xlabel(f"{STAMPS[stamp]} [s] since {_origin(t0)}")
    ax.set_ylabel(drawn[0][1] if len(drawn) == 1 else "value")
    if len(drawn) > 1:  # right of the panel: never over the data, and no scan of every point for a place
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, alpha=0.3)
    return ax


def _limit_overflowing_range(ax: Any, ys: list[np.ndarray], name: str) -> None:
    """Values beyond +-4.5e307 (such as +-1.8e308, the largest floats, which often mean "no reading") leave
    matplotlib no axis: placing ticks, or margins around them, overflows float64, and drawing the figure
    failed. The y axis then spans the other values, and a warning counts those left out."""
    limit = np.finfo(np.float64).max / 4  # (a span, with margins, of values within it cannot overflow)
    finite = [y[np.isfinite(y)] for y in (np.asarray(y, dtype=np.float64) for y in ys)]
    values = np.concatenate(finite) if finite else np.zeros(0)
    beyond = np.abs(values) > limit
    if not beyond.any():
        return
    inner = values[~beyond]
    low, high = (float(inner.min()), float(inner.max())) if inner.size else (-1.0, 1.0)
    pad = (high - low) * 0.05 or max(abs(low), 1.0) * 0.05
    ax.set_ylim(low - pad, high + pad)
    outside = int(beyond.sum())
    warnings.warn(FastbagWarning(f"{name}: {outside} value{'s' if outside != 1 else ''} beyond +-4.5e307 (such "
                                 "as +-1.8e308, the largest floats, which often mean no reading) left outside "
                                 "the y axis: no axis spans them"), stacklevel=3)


def plot_topics(bag: "Bag", selections: list[tuple[str, list[str]]], *, stamp: str = "receive",
                use_pyplot: bool = True, start: "TimeLike | None" = None, end: "TimeLike | None" = None) -> Any:
    """A figure with one panel per ``(topic, fields)`` of ``bag``, sharing the time axis (origin: the bag's
    start, or ``start``, or with ``stamp="header"`` the earliest first header stamp). Each topic is read
    whole, or its messages in ``[start, end)``; fields as in :func:`plot_fields`. ValueError for a topic
    without messages there (a blank panel would say nothing)."""
    read = {topic: bag.read(topic, start, end) for topic, _ in selections}  # a topic named twice is read once
    empty = [topic for topic, arr in read.items() if not len(arr)]
    if empty:
        window = " in [start, end)" if start is not None or end is not None else ""
        raise ValueError(f"topic {empty[0]} has no messages to plot{window}")
    arrays = [(read[topic], fields) for topic, fields in selections]
    figure = new_figure(use_pyplot=use_pyplot, figsize=(10, 1.2 + 2.6 * len(arrays)), layout="constrained")
    axes = figure.subplots(len(arrays), 1, sharex=True, squeeze=False)[:, 0]
    t0 = time_ns(start) if start is not None else bag.start_time or 0
    if stamp == "header":  # header stamps may run on another clock (simulation time): start at the first
        firsts = [int(header_stamp_ns(arr, arr.topic)[0]) for arr, _ in arrays if len(arr)]
        t0 = min(firsts, default=t0)
    for ax, (arr, fields) in zip(axes, arrays):
        plot_fields(arr, *fields, ax=ax, stamp=stamp, t0=t0)
    for ax in axes[:-1]:
        ax.set_xlabel("")
    return figure


def plot_timeline(bag: "Bag", ax: Any = None, *, gap_factor: float = GAP_FACTOR, max_marks: int = MAX_MARKS,
                  bins: int = DENSITY_BINS, use_pyplot: bool = True) -> Any:
    """Draw ``bag``'s timeline on ``ax`` (a new figure's if None); returns the axes.

    One row per topic (sorted by name): a mark per message, or for topics
    of more than ``max_marks`` messages the message count in each of
    ``bins`` equal time bins (the bar's height relative to the busiest bin);
    gaps longer than ``gap_factor`` periods shaded red (see
    :func:`~fastbag.viz.timeline.find_gaps`); the mean rate and message
    count right of each row. Only the index is read: topics that
    cannot be decoded are drawn too. ValueError for a ``gap_factor`` that is
    not a positive number.
    """
    rows = bag_timeline(bag, gap_factor)
    _matplotlib()
    from matplotlib.patches import StepPatch

    if ax is None:
        figure = new_figure(use_pyplot=use_pyplot, figsize=(10, 1.4 + 0.38 * max(1, len(rows))), layout="constrained")
        ax = figure.add_subplot()
    t0 = bag.start_time or 0
    end = bag.end_time or t0
    colors = [f"C{k % 10}" for k in range(len(rows))]
    for y, (row, color) in enumerate(zip(rows, colors)):
        if row.count > max_marks:
            counts, edges = density(row.times, t0, end, bins)
            heights = 0.7 * counts / max(1, int(counts.max()))  # rows grow upwards: the y axis is inverted
            # Added as an artist, not through ax.stairs, which would walk every step's curve to update
            # the data limits (24 ms a row); the limits are set below.
            ax.add_artist(StepPatch(y + 0.35 - heights, edges / 1e9, baseline=y + 0.35, fill=True, color=color,
                                    label=f"{row.topic} density"))
        elif row.count:
            ax.vlines(seconds_since(row.times, t0), y - 0.35, y + 0.35, colors=color, linewidth=0.8,
                      label=f"{row.topic} messages")
        if row.gaps.size:
            spans = [(a, b - a) for a, b in zip(seconds_since(row.gaps[:, 0], t0).tolist(),
                                                 seconds_since(row.gaps[:, 1], t0).tolist())]
            ax.broken_barh(spans, (y - 0.45, 0.9), facecolors="red", alpha=0.25, label=f"{row.topic} gaps")
        rate = f"{row.rate:.1f} Hz" if row.rate else "-"
        gaps = f", {len(row.gaps)} gap{'s' if len(row.gaps) > 1 else ''}" if row.gaps.size else ""
        count = f"{row.count} msg{'s' if row.count != 1 else ''}"
        ax.text(1.01, y, f"{rate}  {count}{gaps}", transform=ax.get_yaxis_transform(), va="center",
                fontsize="small")
    ax.set_yticks(range(len(rows)), [printable(row.topic) for row in rows], parse_math=False)
    ax.set_ylim(max(1, len(rows)) - 0.5, -0.5)  # the first topic on top
    span = (end - t0) / 1e9
    ax.set_xlim(-0.01 * span - 1e-6, 1.01 * span + 1e-6)
    ax.set_xlabel(f"receive time [s] since {_origin(t0)}")
    # What the marks and numbers are (QA: mean rates read as rosbag info's medians; bins taken for marks)
    binned = f"; topics of more than {max_marks} messages: messages per time bin" if any(
        row.count > max_marks for row in rows) else ""
    ax.set_title(f"{printable(os.path.basename(bag.path))}: {bag.message_count} messages, {span:.1f} s\n"
                 f"right: mean rate, messages, gaps (red: over {gap_factor:g} periods){binned}", fontsize="medium",
                 parse_math=False)
    ax.grid(True, axis="x", alpha=0.3)
    if not rows:
        ax.text(0.5, 0.5, "no messages", transform=ax.transAxes, ha="center")
    return ax


def check_output(output: str | os.PathLike[str] | None) -> None:
    """ValueError unless matplotlib writes the format ``output``'s suffix names (none: PNG) and ``output`` is no
    folder, so that a misspelt suffix fails before a bag is read rather than after the figure is drawn."""
    if output is None:
        return
    if os.path.isdir(output):
        raise ValueError(f"cannot write {printable(os.fspath(output))}: it is a folder; name the image's file "
                         "(plot.png, .svg, .pdf)")
    suffix = os.path.splitext(os.fspath(output))[1][1:].lower()  # as Figure.savefig reads it
    if not suffix:
        return
    _matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise ValueError(f"cannot write {os.fspath(output)!r}: matplotlib writes no {suffix!r} images; "
                         f"suffixes: {', '.join(sorted(formats))}")


def check_can_show() -> None:
    """ValueError where matplotlib has no window to show a figure in (no display: its backend is ``agg`` or
    another that only writes files), so that a plot asked for without ``-o`` says so rather than doing
    nothing."""
    backend = str(pyplot().get_backend()).lower()
    try:
        from matplotlib.backends import BackendFilter, backend_registry

        writers = set(backend_registry.list_builtin(BackendFilter.NON_INTERACTIVE))
    except ImportError:  # matplotlib before 3.9
        writers = {"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"}
    if backend in writers:
        raise ValueError(f"no window to show the plot in (matplotlib's backend is {backend}: no display?): write "
                         "it to a file with -o FILE.png (.svg, .pdf)")


def save_or_show(figure: Any, output: str | os.PathLike[str] | None) -> None:
    """Save to ``output`` (format from its suffix: .png, .svg, .pdf...; a PNG without one, at that very path,
    where matplotlib would add ``.png`` to the name) or, without ``output``, show a window."""
    if output is None:
        pyplot().show()
    else:
        suffix = os.path.splitext(os.fspath(output))[1]
        figure.savefig(output, dpi=100, bbox_inches="tight", format=None if suffix else "png")
