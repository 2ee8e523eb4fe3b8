"""Time-synced samples from one or many bags, for training: :class:`SyncedDataset` and :func:`collate`.

At construction the dataset reads only the bags' indexes (with
``stamp="receive"``) and matches every message of the anchor topic to the
nearest (or latest, ``match="asof"``) message of each other topic within
``tolerance`` seconds; windows collect a high-rate topic's messages in the
``window`` seconds up to the anchor. ``ds[i]`` then decodes just those
messages, found through the index, without scanning anything. With
``stamp="header"`` the times are the messages' ``header.stamp``, which
needs each topic read once at construction (a part at a time).

The dataset pickles without open files and each process opens its own
mapping on first use, so it works with DataLoader worker processes.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import operator
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bag import Bag
from ..bag import open as open_bag
from ..errors import FastbagError, FastbagWarning
from ..msg.sensors import image, pointcloud
from .arguments import check_open_options, expand_paths

NS = 1_000_000_000
#: A tolerance or window this long (11.6 days) is nanoseconds meant as seconds, not a real setting.
MAX_SECONDS = 1e6


def _seconds(value: Any, name: str, *, zero: bool) -> float:
    """``value`` as float seconds: a real number, finite, > 0 (>= 0 where ``zero``) and below MAX_SECONDS;
    TypeError or ValueError naming the argument otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise TypeError(f"{name} is a number of seconds, not {type(value).__name__} {value!r}")
    seconds = float(value)
    if not (0 <= seconds if zero else 0 < seconds) or not seconds < np.inf:  # NaN fails too
        raise ValueError(f"{name} must be a finite number of seconds {'>=' if zero else '>'} 0, not {value!r}")
    if seconds >= MAX_SECONDS:
        raise ValueError(f"{name} is in seconds: {value!r} is {seconds / 86400:,.0f} days (nanoseconds? divide "
                         "by 1e9)")
    return seconds


@dataclass
class _Topic:
    """One topic of one bag: message times sorted, and each one's position in read order."""

    times: np.ndarray      # int64 ns, ascending
    positions: np.ndarray  # int64: positions for Bag.take, in the order of ``times``


@dataclass
class _BagSamples:
    """The samples drawn from one bag."""

    anchor: np.ndarray                            # positions of the anchor messages
    time: np.ndarray                              # their times
    matched: dict[str, np.ndarray]                # name -> positions of the matched messages
    matched_time: dict[str, np.ndarray]
    window: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (lo, hi) into that topic's sorted times
    topics: dict[str, _Topic]
    anchors: int                                  # anchor messages in the bag, matched or not
    matches: dict[str, int]                       # name -> anchor messages with a match on that topic


class SyncedDataset:
    """A map-style dataset of time-aligned samples: ``len(ds)``, ``ds[i]`` (NumPy out).

    ``topics`` names the topics (``{"cloud": "/velodyne_points", ...}``);
    every sample holds one message of ``anchor``, and of each other topic
    the message nearest to it (``match="nearest"``) or the latest at or
    before it (``match="asof"``), within ``tolerance`` seconds; anchors
    lacking a match are left out. Topics in ``windows`` (name -> seconds)
    give every message in ``(t - window, t]`` instead. ``stamp`` is
    ``"receive"`` (the bag's receive times, from the index) or ``"header"``
    (``header.stamp``). Several bags are one dataset, in the order given
    (``paths``: a path, a glob pattern or a list of them, as
    :func:`fastbag.dask.read_topic` takes them). ``tolerance`` is a number of
    seconds, finite and >= 0, a window's finite and > 0, both under
    MAX_SECONDS (TypeError or ValueError naming the argument otherwise);
    ``"time"`` and ``"times"`` cannot name topics (a sample's keys);
    ``open_options`` go to :func:`fastbag.open`. ``errors="skip"`` passes
    over a bag that cannot be opened or lacks one of the topics (a
    FastbagWarning names it and why; a FastbagError if no bag is left),
    ``"raise"`` (the default) raises its error. ``ds[i]`` takes an integer (NumPy's too; TypeError for a
    bool or a float), negative from the end; on an empty dataset its
    IndexError says why no anchor was kept. Each process keeps at most
    ``max_open_bags`` bags open (the least recently used closed first, and
    opened again when a sample needs it, its topics' index read again): a
    dataset of thousands of recordings holds that many mappings,
    descriptors and chunk caches, not thousands (their memory is bounded by
    ``max_open_bags`` times ``cache_bytes``).

    A sample is ``{"time": anchor time (int ns), "times": {name: matched
    time}, name: value}``: a PointCloud2 gives its structured points, an
    Image its ``(H, W[, C])`` pixels, a CompressedImage its bytes as uint8,
    other types one structured row (``TopicArray.to_numpy()``), or the
    message's ``to_dict()`` where fields vary in length; a window gives the
    structured rows of its messages in the order of ``times[name]`` (by time,
    as ``stamp`` says), or their TopicArray where fields vary
    in length (of a PointCloud2, Image or CompressedImage topic, a list of
    its messages' points, pixels or bytes).

    It pickles without open files, for DataLoader workers; but a sample costs less to read than worker
    processes cost to hand it over (clouds and images are views of the mapping), so ``num_workers=0`` is
    usually the faster loader (README: SyncedDataset).
    """

    def __init__(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], topics: Mapping[str, str],
                 anchor: str, *, tolerance: float = 0.05, stamp: str = "receive",
                 windows: Mapping[str, float] | None = None, match: str = "nearest", errors: str = "raise",
                 max_open_bags: int = 128, **open_options: Any) -> None:
        self.paths = expand_paths(paths)
        if not isinstance(topics, Mapping):
            raise TypeError(f"topics maps sample names to topics ({{'imu': '/imu', ...}}), not a "
                            f"{type(topics).__name__}")
        if windows is not None and not isinstance(windows, Mapping):
            raise TypeError(f"windows maps names of topics to seconds ({{'imu': 0.1}}), not a {type(windows).__name__}")
        self.topics = dict(topics)
        self.anchor = anchor
        self.tolerance = _seconds(tolerance, "tolerance", zero=True)
        self.stamp = stamp
        self.windows = {name: _seconds(value, f"windows[{name!r}]", zero=False)
                        for name, value in (windows or {}).items()}
        self.match = match
        check_open_options(open_options, "SyncedDataset")
        self.open_options = open_options
        reserved = sorted(set(self.topics) & {"time", "times"})
        if reserved:
            raise ValueError(f"{reserved[0]!r} cannot name a topic: a sample's {reserved[0]!r} holds the "
                             f"{'anchor time' if reserved[0] == 'time' else 'matched times'}")
        if anchor not in self.topics:
            raise ValueError(f"the anchor {anchor!r} is not among the topics' names: {', '.join(self.topics)}")
        if anchor in self.windows:
            raise ValueError("the anchor cannot be a window")
        unknown = set(self.windows) - set(self.topics)
        if unknown:
            raise ValueError(f"window {sorted(unknown)[0]!r} is not among the topics' names")
        if stamp not in ("receive", "header"):
            raise ValueError(f"stamp must be 'receive' or 'header', not {stamp!r}")
        if match not in ("nearest", "asof"):
            raise ValueError(f"match must be 'nearest' or 'asof', not {match!r}")
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors is 'raise' or 'skip', not {errors!r}")
        if isinstance(max_open_bags, bool) or not isinstance(max_open_bags, numbers.Integral) or max_open_bags < 1:
            raise ValueError(f"max_open_bags is an int of at least 1, not {max_open_bags!r}")
        self.max_open_bags = int(max_open_bags)
        self._identities: dict[int, tuple[tuple[str, int, int], ...]] = {}  # bag number -> its files as indexed
        self._forget_bags()
        self._samples = self._index_bags(errors)
        self._starts = np.concatenate(([0], np.cumsum([s.anchor.size for s in self._samples]))).astype(np.int64)

    # -- building the index ------------------------------------------------------
    def _index_bags(self, errors: str) -> list[_BagSamples]:
        """Every bag's samples; with ``errors="skip"``, the bags that cannot be read (or lack a topic) are
        passed over, each named in a warning, and left out of :attr:`paths`."""
        samples, kept = [], []
        for b, path in enumerate(self.paths):
            try:
                samples.append(self._index_bag(b))
            except (FastbagError, OSError) as exc:
                if errors == "raise":
                    raise
                self._close_bag(b)
                warnings.warn(FastbagWarning(f"SyncedDataset passed over {path}: {exc}"), stacklevel=3)
                continue
            kept.append(b)
        if self.paths and not kept:
            raise FastbagError(f"SyncedDataset: none of the {len(self.paths)} bags could be read with every topic "
                               "(the warnings say why)")
        rank = {b: k for k, b in enumerate(kept)}
        self._bags = OrderedDict((rank[b], bag) for b, bag in self._bags.items())  # (none in use now)
        self._in_use = {}
        self._identities = {rank[b]: seen for b, seen in self._identities.items() if b in rank}
        self.paths = [self.paths[b] for b in kept]
        return samples

    def _topic(self, bag: Bag, topic: str) -> _Topic:
        if self.stamp == "receive":
            times = bag.topic_times(topic)  # in read order: ascending
            return _Topic(times, np.arange(times.size, dtype=np.int64))
        if "header" not in bag.take(topic, slice(0, 0)).fields:  # decodes nothing: the type's fields
            raise ValueError(f"{topic} ({bag.topics[topic].msgtype}) has no header: use stamp='receive'")
        stamps = [header_stamps(part) for part in bag.iter_read(topic, step="64 MB")]
        times = np.concatenate(stamps) if stamps else np.zeros(0, dtype=np.int64)
        order = np.argsort(times, kind="stable")
        return _Topic(times[order], order.astype(np.int64))

    def _index_bag(self, b: int) -> _BagSamples:
        with self._using(b) as bag:
            topics = {name: self._topic(bag, topic) for name, topic in self.topics.items()}
        anchor = topics[self.anchor]
        t = anchor.times
        keep = np.ones(t.size, dtype=bool)
        tolerance = int(round(self.tolerance * NS))
        found: dict[str, np.ndarray] = {}
        matches: dict[str, int] = {}
        for name, other in topics.items():
            if name == self.anchor or name in self.windows:
                continue
            k, ok = match_times(other.times, t, tolerance, self.match)
            found[name] = k
            matches[name] = int(ok.sum())
            keep &= ok
        window = {}
        for name, seconds in self.windows.items():
            times = topics[name].times
            lo = np.searchsorted(times, t - int(round(seconds * NS)), side="right")
            hi = np.searchsorted(times, t, side="right")
            window[name] = (lo[keep], hi[keep])
        return _BagSamples(anchor.positions[keep], t[keep],
                           {name: topics[name].positions[k[keep]] for name, k in found.items()},
                           {name: topics[name].times[k[keep]] for name, k in found.items()}, window, topics,
                           int(t.size), matches)

    # -- access ----------------------------------------------------------------------
    def __len__(self) -> int:
        """Samples over every bag: the anchor's messages that have a match on every other topic."""
        return int(self._starts[-1])

    def _locate(self, i: int) -> tuple[int, int]:
        """Sample ``i`` (an integer, negative from the end) as (bag number, sample number within the bag)."""
        if isinstance(i, (bool, np.bool_)):  # operator.index takes True as 1: a mask is not a position
            raise TypeError(f"a sample index is an integer, not {type(i).__name__} {i!r}")
        try:
            i = operator.index(i)  # ints, NumPy integers, 0-d integer tensors; not floats
        except TypeError:
            raise TypeError(f"a sample index is an integer, not {type(i).__name__} {i!r}") from None
        n = len(self)
        if n == 0:
            anchors = sum(s.anchors for s in self._samples)
            anchor = f"{self.anchor!r} ({self.topics[self.anchor]})"
            if not anchors:
                raise IndexError(f"the dataset is empty: the bags hold no message of the anchor {anchor}")
            counts = {name: sum(s.matches.get(name, 0) for s in self._samples) for name in self.topics
                      if name != self.anchor and name not in self.windows}
            said = "; ".join(f"{name!r} ({self.topics[name]}) matches {n}" for name, n in counts.items())
            # A driver that never fills header.stamp leaves it 0: nothing then matches by it
            unstamped = [name for name in self.topics if self.stamp == "header" and any(
                s.topics[name].times.size for s in self._samples) and all(
                not s.topics[name].times.any() for s in self._samples)]
            hint = (f"; the header stamps of {', '.join(map(repr, unstamped))} are all 0 (never filled in): "
                    "stamp='receive' matches by receive times") if unstamped else ""
            raise IndexError(f"the dataset is empty: none of the {anchors} messages of the anchor {anchor} has a "
                             f"match within tolerance={self.tolerance} s on every other topic ({said}){hint}")
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples")
        i %= n
        b = int(np.searchsorted(self._starts, i, side="right")) - 1
        return b, i - int(self._starts[b])

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i``: ``time`` (the anchor's), ``times`` (each topic's matched time) and each topic's
        value by name (see the class docstring), read from the bags' indexes."""
        b, k = self._locate(i)
        with self._using(b) as bag:
            return self._sample(bag, self._samples[b], k)

    def _sample(self, bag: Bag, samples: _BagSamples, k: int) -> dict[str, Any]:
        sample: dict[str, Any] = {"time": int(samples.time[k]), "times": {self.anchor: int(samples.time[k])}}
        sample[self.anchor] = present(bag.take(self.topics[self.anchor], [int(samples.anchor[k])]))
        for name, positions in samples.matched.items():
            sample["times"][name] = int(samples.matched_time[name][k])
            sample[name] = present(bag.take(self.topics[name], [int(positions[k])]))
        for name, (lo, hi) in samples.window.items():
            topic = samples.topics[name]
            # in the order of the times (by header stamp: not always the bag's order)
            rows = bag.take(self.topics[name], topic.positions[int(lo[k]):int(hi[k])])
            sample["times"][name] = topic.times[int(lo[k]):int(hi[k])].copy()
            sample[name] = rows_of(rows)
        return sample

    def sample_bag(self, i: int) -> str:
        """The path of the bag sample ``i`` comes from (IndexError and TypeError as ``ds[i]``)."""
        return self.paths[self._locate(i)[0]]

    # -- the open bags ---------------------------------------------------------------
    def _forget_bags(self) -> None:
        """No bag open (in a new process: a forked or spawned worker opens its own)."""
        self._bags: OrderedDict[int, Bag] = OrderedDict()  # least recently used first
        self._in_use: dict[int, int] = {}  # bag number -> reads under way (never closed under them)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @contextlib.contextmanager
    def _using(self, b: int) -> Iterator[Bag]:
        """This process's open bag number ``b``, opened where it is not; on the way out, idle bags beyond
        ``max_open_bags`` are closed, least recently used first."""
        if self._pid != os.getpid():
            self._forget_bags()
        with self._lock:
            bag = self._bags.get(b)
            if bag is not None:
                self._take(b)
        if bag is None:
            # Opened with the lock released (a .zstd recording decompresses at open: seconds during which
            # other threads' samples of open bags go on); where another thread opened it meanwhile, its wins.
            opened = open_bag(self.paths[b], **self.open_options)  # (an error leaves nothing behind)
            self._check_unchanged(b, opened)
            with self._lock:
                bag = self._bags.setdefault(b, opened)
                self._take(b)
            if bag is not opened:
                opened.close()
        try:
            yield bag
        finally:
            with self._lock:
                self._in_use[b] -= 1
                idle = [k for k in self._bags if not self._in_use.get(k)]
                closing = [self._bags.pop(k) for k in idle[:max(0, len(self._bags) - self.max_open_bags)]]
            for old in closing:
                old.close()

    def _take(self, b: int) -> None:
        """Bag ``b`` is in use, and the most recently used (with the lock held)."""
        self._bags.move_to_end(b)
        self._in_use[b] = self._in_use.get(b, 0) + 1

    def _check_unchanged(self, b: int, bag: Bag) -> None:
        """Bag ``b``'s files as when it was indexed (their names, sizes and modification times), else a
        FastbagError: a recording replaced under its path since would be read at the old index's positions,
        another recording's messages given as this one's samples."""
        try:
            now = _identity(self.paths[b])
        except BaseException:
            bag.close()
            raise
        seen = self._identities.setdefault(b, now)
        if now != seen:
            bag.close()
            raise FastbagError(f"{self.paths[b]} changed since SyncedDataset indexed it (its files' sizes or "
                               "modification times differ): make the dataset again to read it")

    def _close_bag(self, b: int) -> None:
        with self._lock:
            bag = self._bags.pop(b, None)
        if bag is not None:
            bag.close()

    def close(self) -> None:
        """Close the bags this process opened (they reopen on the next access)."""
        with self._lock:
            bags, self._bags = list(self._bags.values()), OrderedDict()
        for bag in bags:
            bag.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_bags", "_in_use", "_lock", "_pid"):  # no open files in a pickle: each process opens its own
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._forget_bags()

    def __repr__(self) -> str:
        return (f"<SyncedDataset {len(self)} samples from {len(self.paths)} bags; anchor {self.anchor!r}; "
                f"topics {', '.join(self.topics)}>")


def _identity(path: str) -> tuple[tuple[str, int, int], ...]:
    """(name, size, modification time in ns) of the file at ``path``, or of each file in the folder but
    SQLite's ``-shm`` indexes (which a reader of a database in WAL mode writes: reading changes them)."""
    if os.path.isdir(path):
        with os.scandir(path) as entries:
            found = sorted((e.name, e.stat()) for e in entries if e.is_file() and not e.name.endswith("-shm"))
    else:
        found = [("", os.stat(path))]
    return tuple((name, stat.st_size, stat.st_mtime_ns) for name, stat in found)


def match_times(times: np.ndarray, targets: np.ndarray, tolerance: int, match: str) -> tuple[np.ndarray, np.ndarray]:
    """For each target time, the index in sorted ``times`` matched to it, and whether it lies within tolerance.

    ``nearest``: the closest (the earlier on a tie); ``asof``: the latest at
    or before the target.
    """
    if times.size == 0:
        return np.zeros(targets.size, dtype=np.int64), np.zeros(targets.size, dtype=bool)
    if match == "asof":
        k = np.searchsorted(times, targets, side="right") - 1
        ok = k >= 0
        k = np.maximum(k, 0)
        return k, ok & (targets - times[k] <= tolerance)
    after = np.minimum(np.searchsorted(times, targets, side="left"), times.size - 1)
    before = np.maximum(after - 1, 0)
    k = np.where(np.abs(times[before] - targets) <= np.abs(times[after] - targets), before, after)
    return k, np.abs(times[k] - targets) <= tolerance


def header_stamps(arr: Any) -> np.ndarray:
    """``header.stamp`` of every message as int64 ns (ROS1 ``secs``/``nsecs``, ROS2 ``sec``/``nanosec``)."""
    stamp = arr["header"]["stamp"]
    names = stamp.dtype.names
    secs, nsecs = ("secs", "nsecs") if "secs" in names else ("sec", "nanosec")
    return stamp[secs].astype(np.int64) * NS + stamp[nsecs].astype(np.int64)


def present(arr: Any) -> Any:
    """One message (``arr`` holds one) as a sample presents it (see :class:`SyncedDataset`)."""
    values = sensor_values(arr)
    if values is not None:
        return values[0]
    try:
        return arr.to_numpy()[0]
    except ValueError:
        return arr[0].to_dict()


def rows_of(arr: Any) -> Any:
    """A window's messages as a sample presents them (see :class:`SyncedDataset`): a sensor topic's as
    :func:`sensor_values` gives them (a list whatever the messages' sizes: one type for every sample); others
    as structured rows (``to_numpy()``), or the TopicArray where fields vary."""
    values = sensor_values(arr)
    if values is not None:
        return values
    try:
        return arr.to_numpy()
    except ValueError:
        return arr


def sensor_values(arr: Any) -> list[np.ndarray] | None:
    """Each message's value where the topic is a sensor's: a PointCloud2's structured points, an Image's
    pixels, a CompressedImage's bytes as uint8; None for other types."""
    kind = arr.msgtype.replace("/msg/", "/")
    if kind == "sensor_msgs/PointCloud2":
        return list(pointcloud(arr))
    if kind == "sensor_msgs/Image":
        return image(arr, stack=False)  # type: ignore[no-any-return]
    if kind == "sensor_msgs/CompressedImage":
        return [np.asarray(data) for data in arr["data"]]
    return None


def collate(samples: Sequence[Any], *, tensors: bool | None = None) -> Any:
    """A batch of samples: arrays of one shape and dtype stacked, ragged ones kept as lists, dicts by key.

    With torch installed (or ``tensors=True``), stacked numeric arrays become
    torch tensors, and ragged numeric arrays lists of tensors; a structured
    value of numbers only (a point cloud, a Pose row) becomes a dict of its
    leaf fields by dotted path (``batch["cloud"]["x"]``), each a tensor (a
    list of tensors where the samples' shapes differ), so that batches cross
    from DataLoader workers in shared memory. A structured value holding text
    (a message row with a header) stacks into one structured NumPy array,
    strings as wide as the longest (a list of the samples' arrays where their
    counts differ, as for a window): its tens of fields as tensors would cross
    as that many shared-memory segments. Text alone is a list of ``str``. So
    a field's batch type follows its message type, not the strings' lengths.
    Pass it as a DataLoader's ``collate_fn``.
    """
    if tensors is None:
        import importlib.util

        tensors = importlib.util.find_spec("torch") is not None
    return _collate(list(samples), tensors)


def _collate(values: list[Any], tensors: bool) -> Any:
    first = values[0] if values else None
    if isinstance(first, dict) and all(isinstance(v, dict) for v in values):
        other = next((v for v in values if v.keys() != first.keys()), None)
        if other is not None:  # (as torch's default_collate refuses them: a batch is of one kind of sample)
            raise ValueError(f"samples of one batch have different keys: {sorted(map(str, first))} and "
                             f"{sorted(map(str, other))}")
        return {key: _collate([v[key] for v in values], tensors) for key in first}
    # The same type of value: string widths may differ (each message's text is as wide as it is long), and with
    # tensors, which stack field by field, the counts of array fields.
    shapes = not tensors or isinstance(first, (np.ndarray, np.void)) and _has_text(first.dtype)  # one array then
    kinds = _kinds(first.dtype, shapes) if isinstance(first, (np.ndarray, np.void)) else None
    if kinds is not None and first.dtype.kind != "O" and \
            all(isinstance(v, (np.ndarray, np.void)) and _kinds(v.dtype, shapes) == kinds for v in values):
        arrays = [np.asarray(v) for v in values]
        # Numbers, and structs of numbers only (points, a Pose): tensors field by field. Structs holding text
        # (a message with a header) stay one structured array: their tens of fields as tensors each would
        # cross from a DataLoader worker as that many shared-memory segments (the loader's floor halved).
        if tensors and (first.dtype.kind in "US" or first.dtype.names and not _has_text(first.dtype)):
            return _columns(arrays)
        if all(a.shape == arrays[0].shape for a in arrays):
            dtype = _common_dtype([a.dtype for a in arrays])
            return _stack([a.astype(dtype, copy=False) for a in arrays], tensors)
        return [_stack([a], tensors)[0] for a in arrays] if tensors and not first.dtype.names else values
    if isinstance(first, (int, float, np.integer, np.floating, np.bool_)) and _one_kind(first, values):
        column = _scalars(values)
        if column is not None:
            return _stack(list(column), tensors)
    return values


def _one_kind(first: Any, values: list[Any]) -> bool:
    """Whether ``values`` are all numbers of ``first``'s type (or a subclass), or all bools: a bool is an int
    to Python, not to a batch."""
    if isinstance(first, (bool, np.bool_)):
        return all(isinstance(v, (bool, np.bool_)) for v in values)
    return all(isinstance(v, type(first)) and not isinstance(v, (bool, np.bool_)) for v in values)


def _scalars(values: list[Any]) -> np.ndarray | None:
    """Numbers (or bools) of one Python or NumPy type as one array that holds each exactly: Python ints as int64,
    or uint64 where one is 2**63 or more (a message's uint64 field, through ``to_dict``); None where no
    integer type holds them all (negative ones beside ones past 2**63). Stacked one by one, NumPy promoted an
    int64 beside a uint64 to float64, and the tensor wrapped them."""
    if not isinstance(values[0], int) or isinstance(values[0], bool):
        return np.array(values)
    for dtype in (np.int64, np.uint64):  # (np.array alone takes 0 and 2**64 - 1 as float64)
        try:
            return np.array(values, dtype=dtype)
        except OverflowError:
            pass
    return None


def _common_dtype(dtypes: list[np.dtype]) -> np.dtype:
    """The dtype that each of ``dtypes`` (one message type's, string widths apart) casts to losing nothing:
    its strings as wide as the widest, packed. (Not ``np.result_type``: NumPy 2.4's promotion of a field that
    is an array of structs keeps that array's old size, so widening a string inside it (TFMessage's
    ``transforms``) made rows that overlap, and stacking into them corrupted values.)"""
    first = dtypes[0]
    if first.subdtype is not None:
        return np.dtype((_common_dtype([d.subdtype[0] for d in dtypes]), first.subdtype[1]))
    if first.names:
        return np.dtype([(name, _common_dtype([d[name] for d in dtypes])) for name in first.names])
    return np.result_type(*dtypes)


def _has_text(dtype: np.dtype) -> bool:
    """Whether a (structured) dtype holds text anywhere: in its fields, and in the elements of its arrays
    (a TFMessage row: its text is in the structs of ``transforms``)."""
    if dtype.subdtype is not None:
        return _has_text(dtype.subdtype[0])
    if dtype.names:
        return any(_has_text(dtype[name]) for name in dtype.names)
    return dtype.kind in "USO"


def _kinds(dtype: np.dtype, shapes: bool) -> Any:
    """A dtype with string widths left out (and the counts of its array fields unless ``shapes``): what two
    messages of one type have in common, one message's ``T[]`` field being an array of its count."""
    if dtype.names:
        return tuple((name, _kinds(dtype[name], shapes)) for name in dtype.names)
    if dtype.subdtype is not None:
        return _kinds(dtype.subdtype[0], shapes), dtype.subdtype[1] if shapes else None
    if dtype.kind in "USO":  # text: an object field holds the strings a str one cannot (trailing NULs, bytes)
        return "U"
    return dtype.newbyteorder("=").str  # (either byte order: stacked native)


def _columns(arrays: list[np.ndarray], prefix: str = "") -> Any:
    """Values of one structured type as a dict of their leaf fields by dotted path (a plain type: one column)."""
    if not arrays[0].dtype.names:
        return _column(arrays)
    out: dict[str, Any] = {}
    for name in arrays[0].dtype.names:
        fields = [a[name] for a in arrays]
        if fields[0].dtype.names:
            out.update(_columns(fields, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = _column(fields)
    return out


def _column(arrays: list[np.ndarray]) -> Any:
    """One leaf field of every sample: text as lists of str, numbers a tensor (a list of tensors when ragged)."""
    if arrays[0].dtype.kind in "US":
        return [a.tolist() for a in arrays]
    if all(a.shape == arrays[0].shape for a in arrays):
        return _stack(arrays, True)
    return [_stack([a], True)[0] for a in arrays]


_MADV_POPULATE_WRITE = 23  # Linux 5.14


def _populate(address: int, size: int) -> None:
    """Map fresh shared memory in one call, not one page fault per 4 KiB page while the batch is written.

    Shared memory gets no huge pages on most systems, so a batch of clouds
    and images (~30 MB) is ~7,500 pages to map; a DataLoader worker spent
    27 ms collating such a batch faulting them one by one and 24 ms mapping
    them in bulk (10% more samples/s through the loader). Kernels without the
    advice (before Linux 5.14) or a libc without madvise leave the pages to
    fault as before.
    """
    madvise = _madvise()
    if madvise is not None:
        import mmap

        start = address & ~(mmap.PAGESIZE - 1)
        madvise(start, size + (address - start), _MADV_POPULATE_WRITE)


@functools.cache
def _madvise() -> Any:
    """libc's madvise through ctypes, or None off Linux (the advice's number is Linux's) or without libc."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def _stack(values: list[np.ndarray], tensors: bool) -> Any:
    """Arrays of one shape and dtype stacked: a tensor of numbers (with ``tensors``), else a NumPy array.

    In a DataLoader worker the tensor's memory is shared from the start, so
    the batch is copied once (into it), not again on its way to the loader.
    """
    first = values[0]
    if not tensors or first.dtype.kind not in "biuf":
        return np.stack(values)
    import torch

    try:
        dtype = torch.from_numpy(np.empty(0, dtype=first.dtype.newbyteorder("="))).dtype
    except TypeError:  # a dtype torch lacks: stays NumPy
        return np.stack(values)
    shape = (len(values),) + first.shape
    if torch.utils.data.get_worker_info() is not None:
        count = int(np.prod(shape))
        try:  # what torch's default_collate does: storage born in shared memory
            storage = torch.UntypedStorage._new_shared(count * first.dtype.itemsize)
            _populate(storage.data_ptr(), storage.nbytes())
            out = torch.empty(0, dtype=dtype).set_(storage, 0, shape)
        except (AttributeError, RuntimeError, TypeError):
            out = torch.empty(shape, dtype=dtype).share_memory_()
    else:
        out = torch.empty(shape, dtype=dtype)
    np.stack([v.astype(v.dtype.newbyteorder("="), copy=False) for v in values], out=out.numpy())
    return out
