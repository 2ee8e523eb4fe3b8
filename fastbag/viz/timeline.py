"""A bag's timeline from its index: per topic, when messages arrived, how often, and where they stopped.

Nothing here decodes a message: times come from :meth:`fastbag.Bag.times_by_topic`,
so a topic whose messages cannot be decoded (an empty or broken definition)
is on the timeline like any other. Big topics are summarized as message
counts in equal time bins; gaps are intervals between consecutive messages
longer than ``gap_factor`` times the topic's period: the larger of the median
and the mean interval, so that a topic publishing in bursts (several
messages at once, then a pause) is not all gaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..bag import Bag

#: Between consecutive messages, more than this many periods is a gap.
GAP_FACTOR = 5.0
#: A gap needs a period to compare with: at least this many messages.
GAP_MIN_MESSAGES = 3


@dataclass(frozen=True)
class TopicTimeline:
    """One row of a timeline: ``times`` (int64 ns), ``rate`` (mean messages per second, None with fewer
    than two messages or no time between them) and ``gaps``, an int64 ``(k, 2)`` array of
    ``(last time before, first time after)``."""

    topic: str
    msgtypes: tuple[str, ...]
    times: np.ndarray
    rate: float | None
    gaps: np.ndarray

    @property
    def count(self) -> int:
        return int(self.times.size)


def check_gap_factor(factor: float) -> float:
    """``factor`` as a float; ValueError unless it is a positive finite number (at 0 or below every
    interval would be a gap)."""
    try:
        value = float(factor)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < float("inf"):  # NaN too
        raise ValueError(f"gap factor must be a positive number (of periods), not {factor!r}")
    return value


def find_gaps(times: np.ndarray, factor: float = GAP_FACTOR) -> np.ndarray:
    """Intervals between consecutive ``times`` longer than ``factor`` periods: int64 ``(k, 2)``.

    The period is the larger of the median and the mean interval: the median
    alone is tiny for a bursty topic, and the mean grows with a dropout only
    in proportion to the dropout's share of the recording. ValueError for a
    ``factor`` that is not a positive number.
    """
    factor = check_gap_factor(factor)
    times = np.asarray(times, dtype=np.int64)
    if times.size < GAP_MIN_MESSAGES:
        return np.empty((0, 2), dtype=np.int64)
    steps = np.diff(times)
    period = max(float(np.median(steps)), float(times[-1] - times[0]) / steps.size)
    if period <= 0:  # every message at one time: no period to measure a gap by
        return np.empty((0, 2), dtype=np.int64)
    at = np.flatnonzero(steps > factor * period)
    return np.stack([times[at], times[at + 1]], axis=1)


def rate_of(times: np.ndarray) -> float | None:
    """Mean messages per second between the first and the last message (what a bursty topic really
    delivers), None with fewer than two messages or all at one time."""
    if times.size < 2 or times[-1] == times[0]:
        return None
    return 1e9 * (times.size - 1) / float(times[-1] - times[0])


def density(times: np.ndarray, start: int, end: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, edges)``: messages per bin over ``bins`` equal bins spanning ``[start, end]``.

    ``edges`` are ns after ``start`` (float64): times are made relative as
    integers first, since float64 cannot hold an absolute ns time exactly.
    """
    edges = np.linspace(0.0, float(max(end - start, 1)), bins + 1)
    relative = (np.asarray(times, dtype=np.int64) - np.int64(start)).astype(np.float64)
    counts, _ = np.histogram(relative, bins=edges)
    return counts, edges


def bag_timeline(bag: "Bag", gap_factor: float = GAP_FACTOR) -> list[TopicTimeline]:
    """A :class:`TopicTimeline` per topic of ``bag``, sorted by topic name, from the index alone.

    ValueError for a ``gap_factor`` that is not a positive number (checked before the index is read)."""
    gap_factor = check_gap_factor(gap_factor)
    rows = []
    every = bag.times_by_topic()
    for name, info in bag.topics.items():
        times = every[name]
        rows.append(TopicTimeline(name, info.msgtypes, times, rate_of(times), find_gaps(times, gap_factor)))
    return rows
