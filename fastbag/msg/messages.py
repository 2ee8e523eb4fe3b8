"""Decoded messages as objects: fields by attribute and by ``[name]`` at every depth, constants, ``==``, pickling.

A message type becomes one Python class (built at run time from the decoded
layout, cached per type and definition; the Numba kernels never see it):
every field is a property, every constant a class attribute, so code written
for genpy or rosbags messages runs unchanged::

    m.msg.header.stamp.secs, m.msg.linear_acceleration.x, m.msg.transforms[0].transform.translation.x
    m.msg.status.status == m.msg.status.STATUS_FIX

Instances are two slots: a :class:`Source` (one decoded batch: a
:class:`~fastbag.msg.arrays.StructArray` or a structured array of fixed
structs) and a row. A field is read from the batch's column for that field,
built once per batch on first use (a Python list for numbers, so ``m.msg.x``
is a list lookup); a nested struct is a new instance over the child batch and
the same row. Nothing is built for fields nobody touches.

Field names always win: a field named ``data``, ``fields`` or ``to_dict``
means the field. The object's own API has spellings no ROS field can take
(field names start with a letter): ``_fields``, ``_constants``, ``_type``,
``_asdict()``; ``fields``, ``constants``, ``msgtype`` and ``to_dict()`` are the
same where no field has that name. genpy's ``__slots__`` / ``_slot_types`` and
rosbags' ``__msgtype__`` are there too.

``time`` and ``duration`` values are :class:`Time` and :class:`Duration`, with
genpy's API: ``secs``/``nsecs`` (also rosbags' ``sec``/``nanosec``),
``to_sec()``, ``to_nsec()``, ``to_time()``, ``is_zero()``, genpy's arithmetic
(``t1 - t0`` is a Duration) and order, compared and hashed as values. ROS2
``builtin_interfaces/Time``/``Duration`` messages take the same comparisons and
arithmetic, by ``(sec, nanosec)``.

``to_dict()`` gives nested dicts whose number arrays stay NumPy arrays;
``to_dict(plain=True)`` only what :func:`json.dumps` takes (see :func:`json_value`).

A message pickles as its type's name, field names, constants and values (a
detached copy of what it holds, never the batch behind it).
"""

from __future__ import annotations

import base64
import datetime
import numbers
import warnings
from functools import lru_cache
from itertools import repeat
from typing import Any, Callable, Union

import numpy as np

from ..errors import FastbagWarning, NotFoundError
from .msgdef import TypeName

#: The packed dtypes of ROS1 ``time`` and ``duration`` (as :mod:`fastbag.msg.layout` builds them).
TIME_DTYPE = np.dtype([("secs", "<u4"), ("nsecs", "<u4")])
DURATION_DTYPE = np.dtype([("secs", "<i4"), ("nsecs", "<i4")])
#: ROS2 types that behave as time values (fields ``sec``, ``nanosec``).
ROS2_TIME_TYPES = ("builtin_interfaces/Time", "builtin_interfaces/Duration")


# -- time values -------------------------------------------------------------------------

_NS = 1_000_000_000


def _canon(secs: int, nsecs: int) -> tuple[int, int]:
    """genpy's canonical form: ``nsecs`` in ``[0, 1e9)``, the rest carried into ``secs`` (floor)."""
    over = nsecs // _NS
    return secs + over, nsecs - over * _NS


def _raw_value(cls: type, secs: int, nsecs: int) -> Any:
    """A Time/Duration holding ``secs``/``nsecs`` as given: decoded values (what the message stores) and unpickling.

    Faster than the constructor (no checks, no normalization): the per-message path.
    """
    value = _new(cls)
    value.secs = secs
    value.nsecs = nsecs
    return value


_new = object.__new__


def _nsec_of(value: Any, kind: str) -> int | None:
    """``value`` as int nanoseconds if it is a time value of ``kind`` ("time" or "duration"), else None.

    Time values are fastbag's :class:`Time`/:class:`Duration`, ROS2 ``builtin_interfaces/Time``/``Duration``
    messages, and genpy's (rospy's) ``Time``/``Duration``, which scripts ported from rospy still make.
    """
    if _time_kind_of(value) != kind:
        return None
    return value.to_nsec()  # type: ignore[no-any-return]


def _time_kind_of(value: Any) -> str | None:
    """"time" or "duration" for a time value :func:`_nsec_of` takes, else None."""
    return getattr(value, "_time_kind", None) or _genpy_kind(value)


def _genpy_kind(value: Any) -> str | None:
    """"time" or "duration" for a genpy (or rospy: subclasses) Time or Duration, else None; by class name and
    module, so that genpy need not be imported."""
    for cls in type(value).__mro__:
        if cls.__name__ in ("Time", "Duration") and cls.__module__.startswith("genpy"):
            return cls.__name__.lower()
    return None


#: What a time bound may be (see :func:`time_ns`): int nanoseconds since the epoch, a ``Time`` (fastbag's,
#: genpy's, rospy's), a ``datetime``, a ``numpy.datetime64`` or pandas ``Timestamp``, a ROS 2 stamp.
TimeLike = Union[int, np.integer, datetime.datetime, np.datetime64, "Time", Any]


def time_ns(value: Any, name: str = "time") -> int | None:
    """A time bound as int nanoseconds since the epoch (None stays None).

    Accepts ints (ns, as :attr:`fastbag.Bag.start_time` gives them), times with
    ``to_nsec()`` (fastbag's and genpy's ``Time``), ROS 2 stamps (``sec``,
    ``nanosec``), ``datetime`` (naive ones in local time, as
    ``datetime.timestamp`` reads them, with a FastbagWarning where local
    time is not UTC: fastbag's tables give naive UTC times) and
    ``numpy.datetime64``/pandas ``Timestamp`` (naive ones in UTC, as NumPy
    and pandas read them). A float is refused: seconds and nanoseconds cannot be
    told apart, and reading one as the other selects the wrong messages.
    """
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if _time_kind_of(value) == "duration":  # "5 s into the bag" would select from 1970
        ns = _nsec_of(value, "duration")
        raise TypeError(f"{name} is a point in time; got a Duration ({type(value).__name__} of {ns} ns). For a "
                        f"time {ns} ns into the bag: bag.start_time + {ns}")
    if hasattr(value, "to_datetime64"):  # pandas Timestamp (a datetime too): keep its nanoseconds
        value = value.to_datetime64()
    if isinstance(value, np.datetime64):
        return int(value.astype("datetime64[ns]").astype(np.int64))
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.astimezone()
        if value.tzinfo is None and aware.utcoffset():
            _warn_naive(value, aware, name)
        delta = aware - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    if callable(getattr(value, "to_nsec", None)):
        return int(value.to_nsec())
    if hasattr(value, "sec") and hasattr(value, "nanosec"):
        return int(value.sec) * 1_000_000_000 + int(value.nanosec)
    hint = " (seconds? pass int(seconds * 1e9))" if isinstance(value, (float, np.floating)) else ""
    raise TypeError(f"{name} must be int nanoseconds since the epoch, a Time, a datetime or a numpy datetime64; "
                    f"got {type(value).__name__} {value!r}{hint}")


def _warn_naive(value: datetime.datetime, aware: datetime.datetime, name: str) -> None:
    """Say that a naive datetime was read as local time, where that is not UTC: fastbag's tables (to_pandas'
    index, to_polars' and to_arrow's ``time``) hold naive UTC times, and one of them passed back as a bound
    would otherwise select other messages, silently."""
    warnings.warn(FastbagWarning(
        f"{name} {value.isoformat()} is a naive datetime: read as local time ({aware.tzname()}, UTC"
        f"{aware.isoformat()[-6:]}), as datetime.timestamp() reads it. Times from fastbag's tables (to_pandas, "
        f"to_polars, to_arrow) are UTC: for one of those, pass {name}.replace(tzinfo=datetime.timezone.utc), "
        "or a pandas Timestamp or numpy datetime64 (read as UTC)"), stacklevel=4)


def _datetime(ns: int) -> datetime.datetime:
    """``ns`` since the epoch as an aware UTC datetime, to the microsecond."""
    return _EPOCH + datetime.timedelta(microseconds=ns // 1000)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class Time:
    """A ROS ``time``, with genpy's API: ``secs`` and ``nsecs`` (``sec`` and ``nanosec`` too, rosbags' names).

    As ``genpy.Time``: ``Time(secs, nsecs)`` and ``Time(float_secs)`` normalize
    ``nsecs`` into ``[0, 1e9)`` and refuse a negative time (TypeError);
    ``from_sec()``, ``to_sec()``, ``to_time()``, ``to_nsec()``, ``is_zero()``,
    ``canon()``, ``set()``; besides, ``to_datetime()`` (aware, UTC) and
    ``to_datetime64()``; ``Time - Time`` is a :class:`Duration`, ``Time +/- Duration``
    a Time; ordered, equal and hashed by value; false when zero; ``str()`` is the
    nanoseconds. No ``float(t)``, as in genpy: use ``to_sec()``.

    Decoded values hold the fields as the message stores them (as rosbags gives
    them; genpy normalizes an ``nsecs`` of 1e9 or more, which no ROS writer produces).
    """

    __slots__ = ("secs", "nsecs")
    _type = "time"
    _time_kind = "time"
    _fields = ("secs", "nsecs")
    _constants: dict[str, Any] = {}

    def __init__(self, secs: float = 0, nsecs: int = 0) -> None:
        if isinstance(secs, numbers.Integral):
            secs = int(secs)
        else:  # float seconds, as genpy takes them
            if nsecs != 0:
                raise ValueError("if secs is a float, nsecs cannot be set")
            float_secs = secs
            secs = int(float_secs)
            nsecs = int((float_secs - secs) * _NS)
        self.secs, self.nsecs = _canon(secs, int(nsecs))
        self._check()

    def _check(self) -> None:
        if self.secs < 0:
            raise TypeError("time values must be positive")

    @classmethod
    def from_sec(cls, float_secs: float) -> Any:
        """A value from float seconds (``time.time()`` format), as genpy computes it."""
        secs = int(float_secs)
        return cls(secs, int((float_secs - secs) * _NS))

    #: rospy's name for :meth:`from_sec`.
    from_seconds = from_sec

    @property
    def sec(self) -> int:
        """``secs``, under rosbags' and ROS2's name."""
        return self.secs

    @property
    def nanosec(self) -> int:
        """``nsecs``, under rosbags' and ROS2's name."""
        return self.nsecs

    def to_sec(self) -> float:
        """Seconds as a float (rospy's formula)."""
        return float(self.secs) + float(self.nsecs) / 1e9

    def to_time(self) -> float:
        """Seconds as a float: genpy's alias of :meth:`to_sec`."""
        return self.to_sec()

    def to_nsec(self) -> int:
        """Nanoseconds as an int."""
        return int(self.secs) * _NS + int(self.nsecs)

    def to_datetime(self) -> datetime.datetime:
        """A time as an aware UTC ``datetime`` (to the microsecond: a datetime holds no finer)."""
        return _datetime(self.to_nsec())

    def to_datetime64(self) -> np.datetime64:
        """A time as a ``numpy.datetime64`` in ns (what ``pd.Timestamp`` and ``to_pandas()``'s index take)."""
        return np.datetime64(self.to_nsec(), "ns")

    def is_zero(self) -> bool:
        """Whether the value is zero: ``secs`` and ``nsecs`` both zero once normalized, as genpy's decoded
        values are (a stored ``(1, -1000000000)`` is zero)."""
        return self.to_nsec() == 0

    def set(self, secs: int, nsecs: int) -> None:
        """Set both fields, as given (genpy)."""
        self.secs = secs
        self.nsecs = nsecs

    def canon(self) -> None:
        """Normalize the fields in place: ``nsecs`` into ``[0, 1e9)`` (genpy)."""
        self.secs, self.nsecs = _canon(int(self.secs), int(self.nsecs))

    @property
    def fields(self) -> list[str]:
        return list(self._fields)

    @property
    def constants(self) -> dict[str, Any]:
        return {}

    def __getitem__(self, name: str) -> int:
        if name in ("secs", "sec"):
            return self.secs
        if name in ("nsecs", "nanosec"):
            return self.nsecs
        raise NotFoundError(f"{self._type} has no field {name!r}; fields: secs, nsecs")

    __iter__ = None  # not iterable, as genpy's Time is not (see Record.__iter__)

    def to_dict(self, plain: bool = False) -> dict[str, int]:
        """``{"secs": ..., "nsecs": ...}`` (``plain`` changes nothing: both are ints)."""
        return {"secs": self.secs, "nsecs": self.nsecs}

    _asdict = to_dict

    # Equal and ordered by value (nanoseconds), with values of the same kind only: a Time (fastbag's or
    # genpy's), or a ROS2 builtin_interfaces/Time message (whose methods then answer); never a Duration.
    def __eq__(self, other: object) -> bool:
        ns = _nsec_of(other, self._time_kind)
        return NotImplemented if ns is None else self.to_nsec() == ns

    def __hash__(self) -> int:
        # genpy's hash, of the canonical fields: a Time equal to a genpy Time hashes equal (dict keys, sets)
        return hash(divmod(self.to_nsec(), _NS))

    def __lt__(self, other: Any) -> bool:
        ns = _nsec_of(other, self._time_kind)
        return NotImplemented if ns is None else self.to_nsec() < ns

    def __le__(self, other: Any) -> bool:
        ns = _nsec_of(other, self._time_kind)
        return NotImplemented if ns is None else self.to_nsec() <= ns

    def __gt__(self, other: Any) -> bool:
        ns = _nsec_of(other, self._time_kind)
        return NotImplemented if ns is None else self.to_nsec() > ns

    def __ge__(self, other: Any) -> bool:
        ns = _nsec_of(other, self._time_kind)
        return NotImplemented if ns is None else self.to_nsec() >= ns

    def __bool__(self) -> bool:
        return not self.is_zero()

    def __add__(self, other: Any) -> Any:
        """Time + Duration: a Time."""
        ns = _nsec_of(other, "duration")
        return NotImplemented if ns is None else Time(*divmod(self.to_nsec() + ns, _NS))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        """Time - Time: a Duration; Time - Duration: a Time."""
        ns = _nsec_of(other, "time")
        if ns is not None:
            return Duration(*divmod(self.to_nsec() - ns, _NS))
        ns = _nsec_of(other, "duration")
        return NotImplemented if ns is None else Time(*divmod(self.to_nsec() - ns, _NS))

    def __rsub__(self, other: Any) -> Any:
        """genpy's Time - this Time: a Duration (genpy's own ``-`` knows only its own types, then Python
        asks this one)."""
        ns = _nsec_of(other, "time")
        return NotImplemented if ns is None else Duration(*divmod(ns - self.to_nsec(), _NS))

    def __str__(self) -> str:
        return str(self.to_nsec())  # genpy's

    def __repr__(self) -> str:
        return f"{type(self).__name__}(secs={self.secs}, nsecs={self.nsecs})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _raw_value, (type(self), self.secs, self.nsecs)


class Duration(Time):
    """A ROS ``duration`` (signed ``secs`` and ``nsecs``), with genpy's API: that of :class:`Time`, and

    ``Duration +/- Duration``, ``Duration + Time`` (a Time), ``-d``, ``abs(d)``,
    ``d * number``, ``d / number`` (a Duration), ``d / Duration`` (a float),
    ``d // number``, ``%`` and ``divmod`` of two durations, computed as genpy does
    (with float seconds where genpy uses them). Negative durations are
    ``secs < 0`` with ``nsecs`` in ``[0, 1e9)``.
    """

    __slots__ = ()
    _type = "duration"
    _time_kind = "duration"

    def _check(self) -> None:
        pass

    @property
    def to_datetime(self) -> Any:
        raise AttributeError("a Duration is a length of time, not a point in it: to_sec() or to_nsec()")

    to_datetime64 = to_datetime

    def _make(self, ns: int) -> Duration:
        return Duration(*divmod(ns, _NS))

    def __neg__(self) -> Duration:
        return Duration(-self.secs, -self.nsecs)

    def __abs__(self) -> Duration:
        # By value, normalized: a stored (0, -500000000) is negative, which genpy's test of secs alone sees
        # only because its decoded values are normalized.
        return self._make(abs(self.to_nsec()))

    def __add__(self, other: Any) -> Any:
        """Duration + Duration: a Duration; Duration + Time (either side; genpy's too): a Time."""
        ns = _nsec_of(other, "time")
        if ns is not None:
            return Time(*divmod(ns + self.to_nsec(), _NS))
        ns = _nsec_of(other, "duration")
        return NotImplemented if ns is None else self._make(self.to_nsec() + ns)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        ns = _nsec_of(other, "duration")
        return NotImplemented if ns is None else self._make(self.to_nsec() - ns)

    def __rsub__(self, other: Any) -> Any:
        """Duration - Duration; a time (genpy's) - Duration: a Time."""
        ns = _nsec_of(other, "time")
        if ns is not None:
            return Time(*divmod(ns - self.to_nsec(), _NS))
        ns = _nsec_of(other, "duration")
        return NotImplemented if ns is None else self._make(ns - self.to_nsec())

    def __mul__(self, val: Any) -> Any:
        if isinstance(val, numbers.Integral):
            return Duration(self.secs * int(val), self.nsecs * int(val))
        if isinstance(val, numbers.Real):
            return Duration.from_sec(self.to_sec() * val)
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, val: Any) -> Any:
        if isinstance(val, numbers.Real):
            return Duration.from_sec(self.to_sec() // val)
        if _nsec_of(val, "duration") is not None:
            return int(self.to_sec() // val.to_sec())
        return NotImplemented

    def __truediv__(self, val: Any) -> Any:
        if isinstance(val, numbers.Real):
            return Duration.from_sec(self.to_sec() / val)
        if _nsec_of(val, "duration") is not None:
            return self.to_sec() / val.to_sec()
        return NotImplemented

    def __mod__(self, val: Any) -> Any:
        if _nsec_of(val, "duration") is not None:
            return Duration.from_sec(self.to_sec() % val.to_sec())
        return NotImplemented

    def __divmod__(self, val: Any) -> Any:
        if _nsec_of(val, "duration") is not None:
            quotient, remainder = divmod(self.to_sec(), val.to_sec())
            return int(quotient), Duration.from_sec(remainder)
        return NotImplemented

    # genpy's Duration on the left: its operators know only its own type, then Python asks these.
    def _reflected(self, val: Any, operation: Callable[[Duration, Duration], Any]) -> Any:
        ns = _nsec_of(val, "duration")
        return NotImplemented if ns is None else operation(self._make(ns), self)

    def __rtruediv__(self, val: Any) -> Any:
        return self._reflected(val, Duration.__truediv__)

    def __rfloordiv__(self, val: Any) -> Any:
        return self._reflected(val, Duration.__floordiv__)

    def __rmod__(self, val: Any) -> Any:
        return self._reflected(val, Duration.__mod__)

    def __rdivmod__(self, val: Any) -> Any:
        return self._reflected(val, Duration.__divmod__)


class _Ros2Time:
    """For messages of type builtin_interfaces/Time or Duration: the ROS1 names (``secs``, ``nsecs``),
    ``to_sec()``, ``to_nsec()``, ``is_zero()``, ``to_time()`` (Time), and the values' order, equality,
    hash and arithmetic, as the :class:`Time`/:class:`Duration` of the same ``sec``, ``nanosec``
    (results are fastbag Time/Duration values, which have ``sec``/``nanosec`` too)."""

    __slots__ = ()
    _time_kind = ""  # "time" or "duration": set per class

    @property
    def secs(self) -> int:
        return self.sec  # type: ignore[attr-defined,no-any-return]

    @property
    def nsecs(self) -> int:
        return self.nanosec  # type: ignore[attr-defined,no-any-return]

    def to_sec(self) -> float:
        return float(self.sec) + float(self.nanosec) / 1e9  # type: ignore[attr-defined]

    def to_nsec(self) -> int:
        return int(self.sec) * _NS + int(self.nanosec)  # type: ignore[attr-defined]

    def to_time(self) -> float:
        return self.to_sec()

    def __str__(self) -> str:  # a stamp alone prints as rclpy's does, in one line; inside a message, as a field
        return repr(self)

    def to_datetime(self) -> datetime.datetime:
        """As :meth:`Time.to_datetime` (a Time only)."""
        return self._value().to_datetime()  # type: ignore[no-any-return]

    def to_datetime64(self) -> np.datetime64:
        """As :meth:`Time.to_datetime64` (a Time only)."""
        return self._value().to_datetime64()  # type: ignore[no-any-return]

    def is_zero(self) -> bool:
        return self.to_nsec() == 0  # (by value, as Time.is_zero)

    def _value(self) -> Time:
        """The same value as a fastbag Time or Duration (fields as stored)."""
        return _raw_value(Time if self._time_kind == "time" else Duration, self.sec, self.nanosec)  # type: ignore

    def __eq__(self, other: object) -> bool:
        if _time_kind_of(other) is None:
            return Record.__eq__(self, other)  # type: ignore[arg-type]
        return self._value() == other  # (fastbag's or genpy's Time or Duration: compared as the orders are)

    def __hash__(self) -> int:
        return hash(self._value())

    def __neg__(self) -> Any:
        value = self._value()
        if not isinstance(value, Duration):
            raise TypeError(f"bad operand type for unary -: {type(self).__name__}")
        return -value

    def __abs__(self) -> Any:
        value = self._value()
        if not isinstance(value, Duration):
            raise TypeError(f"bad operand type for abs(): {type(self).__name__}")
        return abs(value)


def _delegated(name: str) -> Callable[[Any, Any], Any]:
    """The binary operator ``name`` of a ROS2 stamp: that of the same value as a Time or Duration
    (NotImplemented where that has none: a Time is not multiplied)."""
    def method(self: _Ros2Time, other: Any) -> Any:
        value = self._value()
        operator = getattr(type(value), name, None)
        return NotImplemented if operator is None else operator(value, other)

    method.__name__ = name
    return method


for _name in ("__lt__", "__le__", "__gt__", "__ge__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__",
              "__rmul__", "__truediv__"):
    setattr(_Ros2Time, _name, _delegated(_name))


# -- messages ----------------------------------------------------------------------------

class Record:
    """A decoded message (at any depth). Subclassed once per message type; see the module docstring."""

    __slots__ = ("_src", "_i")
    _type = ""
    _fields: tuple[str, ...] = ()
    _field_set: frozenset[str] = frozenset()
    _constants: dict[str, Any] = {}
    _children: dict[str, type] = {}   # struct field -> its class (Record subclass, Time or Duration)
    _elements: dict[str, type] = {}   # array of fixed structs / times -> the element's class

    def __init__(self, src: Any, i: Any) -> None:
        self._src = src
        self._i = i

    @property
    def fields(self) -> list[str]:
        """The field names in wire order (also ``_fields``, which no field can shadow)."""
        return list(self._fields)

    @property
    def constants(self) -> dict[str, Any]:
        """The type's constants by name (also ``_constants``, and each as a class attribute)."""
        return dict(self._constants)

    @property
    def msgtype(self) -> str:
        """The message type, ``pkg/Type`` (also ``_type``)."""
        return self._type

    def __getitem__(self, name: str) -> Any:
        if name not in self._field_set:
            raise NotFoundError(f"{self._type or 'the message'} has no field {name!r}; fields: "
                                f"{', '.join(self._fields)}")
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        """Whether the type has a field ``name`` (as ``"header" in topic_array`` asks of a read's array)."""
        return name in self._field_set

    # Not iterable, as genpy's and rosbags' messages are not: without this, Python would iterate it through
    # __getitem__ (msg[0], msg[1], ...), and a generic walk (list(msg), a "leaf or iterable?" test) would
    # meet a NotFoundError for field 0 instead of the TypeError that says a message is a leaf.
    __iter__ = None

    def to_dict(self, plain: bool = False) -> dict[str, Any]:
        """The fields as nested dicts (also ``_asdict()``).

        Numbers as Python numbers, ``string`` as str (bytes where not UTF-8),
        ``time``/``duration`` as ``{"secs", "nsecs"}``, arrays of messages as lists
        of dicts, arrays of numbers as NumPy arrays (as the field gives them: not
        JSON-ready). ``plain=True`` gives what :func:`json.dumps` takes: number
        arrays as lists, bytes (``uint8[]``, ``char[]``) as base64 text; see :func:`json_value`.
        """
        convert = json_value if plain else _plain
        return {name: convert(getattr(self, name)) for name in self._fields}

    _asdict = to_dict

    def _get_types(self) -> list[str]:
        """genpy's: the fields' types (``_slot_types``, a list as genpy's)."""
        return self._slot_types  # type: ignore[attr-defined,no-any-return]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self._type == other._type and self._fields == other._fields
                and all(same_value(getattr(self, n), getattr(other, n)) for n in self._fields))

    __hash__ = None  # type: ignore[assignment]  # holds arrays, like the messages it mirrors

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={_short_repr(getattr(self, n))}" for n in self._fields)
        return f"{self._type or 'message'}({inner})"

    def __str__(self) -> str:
        """The message as genpy prints one (``print(msg)``): a field per line, ``name: value``, nested messages
        indented, arrays of messages as ``-`` items; arrays of more than :data:`STR_VALUES` numbers are cut
        short (genpy prints an image's every byte)."""
        return "\n".join(_field_lines(self, ""))

    def _repr_html_(self) -> str:
        from ..viz.html import record_html  # an accessor: viz is a higher layer, loaded only when called

        return record_html(self)

    def __reduce__(self) -> tuple[Any, ...]:
        values = tuple(_detach(getattr(self, n)) for n in self._fields)
        return _restore, (self._type, self._fields, tuple(self._constants.items()), values, self.__msgtype__)

    def __dir__(self) -> list[str]:
        # (fields, so that a mistyped one gets Python's "Did you mean" in its traceback; not genpy's API)
        return sorted((set(super().__dir__()) - _GENPY_ONLY) | set(self._fields) | set(self._constants))


#: genpy's message API for serializing, which read-only messages have not (see _genpy_only); rosbag's
#: writer asks for them.
_GENPY_ONLY = frozenset({"_md5sum", "_full_text", "serialize", "serialize_numpy", "deserialize",
                         "deserialize_numpy", "_check_types", "_connection_header"})


def _genpy_only(name: str) -> property:
    """genpy's writing API, which rosbag's writer asks a message for: missing, with a hint at fastbag.Writer.

    A property that raises, not a ``__getattr__``: a class with one loses CPython's specialized attribute
    lookups on every field of every message (a decoded loop over 400,000 Imu ran 0.69 s without, 0.79 s with).
    """
    def missing(self: Record) -> Any:
        raise AttributeError(f"{self._type or 'a message'} has no {name}: fastbag's messages are read-only views "
                             "of the bag, not genpy messages. To write messages, fastbag.Writer takes each one's "
                             "bytes (m.data); see README, Writing bags", name=name, obj=self)
    return property(missing)


for _name in _GENPY_ONLY:  # (a field or constant of that name, set on the type's own class, still wins)
    setattr(Record, _name, _genpy_only(_name))


def _short_repr(value: Any) -> str:
    """A field in a message's repr (one line): large arrays by their shape, long arrays of structs by their
    count, small arrays with every digit."""
    if isinstance(value, np.ndarray) and value.size > 8:
        return f"array({value.dtype}, shape={value.shape})"
    if isinstance(value, list) and len(value) > 8 and isinstance(value[0], Record):
        return f"[{len(value)} x {value[0]._type or 'message'}]"
    if isinstance(value, np.ndarray):
        with np.printoptions(floatmode="unique", linewidth=1 << 30):  # (NumPy's default wraps at 75 columns)
            return repr(value)
    return repr(value)


#: Arrays of numbers ``str(message)`` prints whole (a 6x6 covariance, CameraInfo's matrices); longer ones
#: (an image's bytes) print their first values and their count.
STR_VALUES = 64


def _field_lines(message: Any, indent: str) -> list[str]:
    """``str(message)``'s lines, as genpy's ``strify_message`` lays them out (a ROS1 time's ``nsecs`` right-
    aligned in 9 columns, strings through YAML as genpy quotes them)."""
    if isinstance(message, Time):
        return [f"{indent}secs: {message.secs}", f"{indent}nsecs: {message.nsecs:9d}"]
    lines = []
    for name in message._fields:
        value = getattr(message, name)
        if isinstance(value, (Record, Time)):
            lines += [f"{indent}{name}: ", *_field_lines(value, indent + "  ")]
        elif isinstance(value, list) and len(value) and isinstance(value[0], (Record, Time)):
            lines.append(f"{indent}{name}: ")
            for element in value:
                lines += [f"{indent}  - ", *_field_lines(element, indent + "    ")]
        else:
            lines.append(f"{indent}{name}: {_str_value(value)}")
    return lines


def _str_value(value: Any) -> str:
    """A field that is no message, as genpy prints it: numbers and lists of them as Python does, strings and
    lists of strings through YAML; arrays of more than STR_VALUES numbers cut short."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str):
        import yaml  # (a dependency already: rosbag2's metadata.yaml)

        return yaml.dump(value, default_style='"').rstrip("\n") if value else "''"
    if isinstance(value, np.ndarray):
        if value.ndim == 1 and value.size > STR_VALUES:
            head = ", ".join(str(v) for v in value[:8].tolist())
            return f"[{head}, ... ({value.size} values, {value.dtype})]"
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        items = [v.item() if isinstance(v, np.generic) else v for v in value]
        if items and isinstance(items[0], str):
            import yaml

            return yaml.dump(items).rstrip("\n")
        return str(items)
    return str(value)


def plain(value: Any) -> Any:
    """A field's value as ``to_dict()`` gives it: messages as dicts, arrays of them as lists, number arrays as
    they are (NumPy arrays)."""
    if isinstance(value, (Record, Time)):
        return value._asdict()
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def json_value(value: Any) -> Any:
    """A field's value as ``to_dict(plain=True)`` gives it: only what :func:`json.dumps` takes.

    Messages and times as dicts, arrays as lists of Python numbers, bools and
    str; ``bytes`` (``uint8[]``/``char[]``/ROS2 ``byte[]`` arrays, strings that
    are not UTF-8) as base64 text, rosbridge's convention. NaN and infinities
    stay floats (``json.dumps`` writes ``NaN``/``Infinity``; ``allow_nan=False`` refuses them).
    """
    if isinstance(value, (Record, Time)):
        return value._asdict(True)
    if isinstance(value, np.ndarray):
        if value.dtype == np.uint8:
            return base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii")
        if value.dtype.names is not None:  # records without a message class: by field name
            return [json_value(v) for v in value]
        return value.tolist()
    if isinstance(value, np.void) and value.dtype.names is not None:
        return {name: json_value(value[name]) for name in value.dtype.names}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, np.generic):
        return json_value(value.item())
    return value


_plain = plain  # to_dict's argument "plain" hides the function there


def same_value(a: Any, b: Any) -> bool:
    """Field values equal: arrays by dtype, shape and values; NaN equals NaN (a message equals its copy). Byte
    order aside: a big-endian CDR message equals the same values written little-endian, and its own copy."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if not (a.dtype.isnative and b.dtype.isnative):
            a, b = a.astype(a.dtype.newbyteorder("="), copy=False), b.astype(b.dtype.newbyteorder("="), copy=False)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        if a.dtype.names is not None:
            return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
        return bool(np.array_equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return bool(a == b)


def _detach(value: Any) -> Any:
    """What a field pickles as: message lists as lists (their items pickle on their own)."""
    if isinstance(value, MessageList):
        return list(value)
    return value


@lru_cache(maxsize=1024)
def _detached_class(msgtype: str, fields: tuple[str, ...], constants: tuple[tuple[str, Any], ...],
                    interface: str | None = None) -> type:
    """The class of unpickled messages: the same API, values held in a dict."""
    def getter(name: str) -> Callable[[Any], Any]:
        def get(self: Any) -> Any:
            return self._src[name]
        return get
    return _new_class(msgtype, fields, dict(constants), {n: property(getter(n)) for n in fields}, {}, {}, (),
                      interface)


def _restore(msgtype: str, fields: tuple[str, ...], constants: tuple[tuple[str, Any], ...],
             values: tuple[Any, ...], interface: str | None = None) -> Record:
    """Rebuild a pickled message (see :meth:`Record.__reduce__`)."""
    cls = _detached_class(msgtype, tuple(fields), tuple(constants), interface)
    return cls(dict(zip(fields, values)), None)  # type: ignore[no-any-return]


def _read_only(msgtype: str, name: str) -> Callable[[Any, Any], None]:
    """The setter of a message's field: an AttributeError saying that messages are read-only and what to do
    instead (genpy's messages take assignments; Python's own error named a property without a setter)."""
    def refuse(message: Any, value: Any) -> None:
        raise AttributeError(f"{msgtype or 'a message'}.{name} cannot be set: decoded messages are read-only views "
                             f"of the bag; m.to_dict() gives a dict of the values to change")
    return refuse


def _class_name(msgtype: str) -> str:
    return msgtype.replace("/", "__") or "message"


def _new_class(msgtype: str, fields: tuple[str, ...], constants: dict[str, Any], properties: dict[str, Any],
               children: dict[str, type], elements: dict[str, type], slot_types: tuple[str, ...],
               interface: str | None = None) -> type:
    """A Record subclass: constants as class attributes, then fields as properties (fields win).
    ``interface``: rosbags' ``__msgtype__`` (default ``pkg/msg/Type``; see MessageTypes.interface_name)."""
    pkg, _, name = msgtype.partition("/")
    namespace: dict[str, Any] = dict(constants)
    namespace.update({
        "__slots__": (), "__doc__": f"A decoded {msgtype or 'message'}: fields {', '.join(fields) or '(none)'}.",
        "_type": TypeName(msgtype), "_fields": fields, "_field_set": frozenset(fields), "_constants": dict(constants),
        "_children": children, "_elements": elements, "_slot_types": list(slot_types),  # (genpy's: a list)
        "__msgtype__": interface or (f"{pkg}/msg/{name}" if name else msgtype),
        # genpy's: whether the first field is a std_msgs Header (unpickled classes know names alone)
        "_has_header": fields[:1] == ("header",) and (slot_types or ("Header",))[0].split("/")[-1] == "Header",
    })
    namespace.update({name: property(getter.fget, _read_only(msgtype, name), doc=getter.__doc__)
                      for name, getter in properties.items()})
    bases: tuple[type, ...] = (Record,)
    if msgtype in ROS2_TIME_TYPES and {"sec", "nanosec"} <= set(fields):
        bases = (_Ros2Time, Record)
        namespace["_time_kind"] = "time" if msgtype.endswith("Time") else "duration"
    cls = type(_class_name(msgtype), bases, namespace)
    cls.__slots__ = fields  # genpy's spelling of the field list (set after creation: no slot is made)
    return cls


# -- where instances read their fields ---------------------------------------------------

class _PerRow:
    """A column whose row ``i`` is built on access (message lists, string lists). The last message list
    built is kept (read-only, it can be handed out again): ``msg.markers[k]`` in a loop over ``k`` builds
    the list once, not once a turn."""

    __slots__ = ("make", "last")

    def __init__(self, make: Callable[[int], Any]) -> None:
        self.make = make
        self.last: tuple[int, MessageList] | None = None

    def __getitem__(self, i: int) -> Any:
        last = self.last
        if last is not None and last[0] == i:
            return last[1]
        value = self.make(i)
        if isinstance(value, MessageList):
            self.last = (i, value)
        return value


class Source:
    """One decoded batch as instances of ``cls`` see it: ``struct`` (a StructArray) or ``array``
    (a structured array of fixed structs), with per-field columns built on first use.

    ``cols[name][i]`` is a field's value in row ``i``; ``children[name]`` the Source of a nested
    struct; ``times[name]`` the ``(secs, nsecs)`` lists of a time field.
    """

    __slots__ = ("cls", "struct", "array", "cols", "children", "times")

    def __init__(self, cls: type, struct: Any = None, array: np.ndarray | None = None) -> None:
        self.cls = cls
        self.struct = struct
        self.array = array
        # Plain dicts (the getters' hot path is one exact-dict lookup); a miss builds the entry.
        self.cols: dict[str, Any] = {}
        self.children: dict[str, Source] = {}
        self.times: dict[str, tuple[list[int], list[int]]] = {}

    def __len__(self) -> int:
        return len(self.struct) if self.struct is not None else len(self.array)  # type: ignore[arg-type]

    def raw(self, name: str) -> Any:
        """The field for every row, as the array layer presents it."""
        return self.struct[name] if self.struct is not None else self.array[name]  # type: ignore[index]

    def column(self, name: str) -> Any:
        """``cols[name]``, built on first use."""
        value = self.cols[name] = per_row(self.raw(name), self.cls._elements.get(name))  # type: ignore[attr-defined]
        return value

    def child(self, name: str) -> "Source":
        """``children[name]``, built on first use."""
        value = self.raw(name)
        cls = self.cls._children[name]  # type: ignore[attr-defined]
        child = self.children[name] = Source(cls, array=value) if isinstance(value, np.ndarray) else \
            Source(cls, struct=value)
        return child

    def time(self, name: str) -> tuple[list[int], list[int]]:
        """``times[name]``, built on first use."""
        value = self.raw(name)
        secs, nsecs = value.dtype.names
        pair = self.times[name] = (value[secs].tolist(), value[nsecs].tolist())
        return pair


def per_row(value: Any, element: type | None) -> Any:
    """A column as instances index it: numbers as a list, arrays of structs as message lists."""
    # The array layer's columns are told apart by their class's COLUMN_KIND (arrays.py imports this module),
    # never by attributes: a struct's fields are attributes of Nested and Ragged (a Point[] with a field
    # "first" or "buffers").
    kind = getattr(type(value), "COLUMN_KIND", None)
    if kind == "nested":  # arrays of variable structs, string[]
        first, counts = value.first.tolist(), value.counts.tolist()
        if getattr(type(value.child), "COLUMN_KIND", None) == "struct":  # every message's elements
            child = value.child.record_source()
            return _PerRow(lambda i: MessageList(child, first[i], counts[i]))
        strings = value.child.tolist()  # string[]: lists of str (bytes where not UTF-8)
        return _PerRow(lambda i: strings[first[i]:first[i] + counts[i]])
    if kind == "ragged":  # views per message
        if value.dtype.names is not None:  # () for structs with no fields (only constants)
            return _PerRow(lambda i: elements_of(value[i], element))
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.names is not None:  # (N, k) fixed structs: dense arrays, fixed-size arrays
            return _PerRow(lambda i: elements_of(value[i], element))
        if value.ndim == 1:
            return value.tolist()  # Python numbers and str: what genpy and rosbags give
        return value  # rows of fixed or dense arrays: views
    return value


def elements_of(array: np.ndarray, element: type | None) -> Any:
    """One message's array of fixed structs: a MessageList, or a list of Time/Duration."""
    if element is None:
        element = dtype_class(array.dtype, "", None)
    if issubclass(element, Time):
        return [_raw_value(element, s, n) for s, n in array.tolist()]
    return MessageList(Source(element, array=array), 0, len(array))


class MessageList(list):  # type: ignore[type-arg]
    """One message's array of structs, as genpy and rosbags give it: a ``list`` of messages (read-only, as
    the messages are: ``list(lst)`` is a copy to change). ``==`` with lists and tuples.

    ``lst["name"]`` is that field of every element (an array); ``np.asarray(lst)``
    the structured array of fixed-size elements.
    """

    # No __slots__: code written for genpy takes anything with a __slots__ attribute for a message.
    def __init__(self, src: Source, first: int, count: int) -> None:
        list.__init__(self, map(src.cls, repeat(src, count), range(first, first + count)))
        self._src = src
        self._first = first

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, str):
            return self._src.raw(i)[self._first:self._first + len(self)]
        return super().__getitem__(i)

    def __eq__(self, other: object) -> bool:
        return list.__eq__(self, list(other) if isinstance(other, tuple) else other)

    def __ne__(self, other: object) -> bool:
        return list.__ne__(self, list(other) if isinstance(other, tuple) else other)

    __hash__ = None  # type: ignore[assignment]

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("arrays of a decoded message are read-only: list(...) gives a copy to change")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse  # type: ignore[assignment]
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self._src.array is not None:
            out = self._src.array[self._first:self._first + len(self)]
        else:
            out = self._src.struct[self._first:self._first + len(self)].to_numpy()
        return out if dtype is None else out.astype(dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self),)


# -- classes per type --------------------------------------------------------------------

class MessageTypes:
    """The types of one connection's definition, parsed on first use; classes are cached here.

    Fixed-size nested structs are plain dtype fields in the layout: their type
    names and constants come from here. Without it (``None``), they are
    nameless and without constants, and ``time``/``duration`` are recognised by
    their dtypes.
    """

    def __init__(self, msgtype: str, definition: str, schema_encoding: str = "ros1msg") -> None:
        self.msgtype = msgtype
        self.definition = definition
        self.schema_encoding = schema_encoding
        self._registry: Any = None
        self._parsed = False
        self.classes: dict[Any, Any] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles (with the arrays that carry it) as its definition: its classes are built at run time and
        # cannot be pickled; the other process builds its own on first use.
        return message_types, (self.msgtype, self.definition, self.schema_encoding)

    @property
    def registry(self) -> Any:
        if not self._parsed:
            self._parsed = True
            from ..errors import DefinitionError, UnsupportedError
            from .layout import parse_schema
            try:
                self._registry = parse_schema(self.msgtype, self.definition, self.schema_encoding)
            except (DefinitionError, UnsupportedError, RecursionError):
                self._registry = None
        return self._registry

    def field(self, msgtype: str, name: str) -> Any:
        """The :class:`~fastbag.msg.msgdef.Field` ``name`` of ``msgtype``, or None."""
        registry = self.registry
        if registry is None or msgtype not in registry.types:
            return None
        return next((f for f in registry.types[msgtype].fields if f.name == name), None)

    def constants(self, msgtype: str) -> dict[str, Any]:
        """The constants of ``msgtype`` by name (empty when unknown)."""
        registry = self.registry
        if registry is None or msgtype not in registry.types:
            return {}
        return {c.name: c.value for c in registry.types[msgtype].constants}

    def interface_name(self, msgtype: str) -> str:
        """rosbags' ``__msgtype__`` of ``msgtype`` (``pkg/Type``), one of this definition's types:
        ``pkg/msg/Type``, but ``pkg/srv/...`` or ``pkg/action/...`` for the parts of the service or action
        the recording's type belongs to (ROS 2 records a service's events as ``pkg/srv/Name_Event``, holding
        ``pkg/srv/Name_Request``; ROS 2 message names have no underscore, so ``Name_`` marks the parts)."""
        pkg, _, name = msgtype.partition("/")
        if not name:
            return msgtype
        recorded = self.msgtype.replace("::", "/").split("/")
        if len(recorded) == 3 and recorded[1] in ("srv", "action") and recorded[0] == pkg:
            if name.startswith(recorded[2].split("_")[0] + "_"):
                return f"{pkg}/{recorded[1]}/{name}"
        return f"{pkg}/msg/{name}"

    def slot_types(self, msgtype: str) -> tuple[str, ...]:
        """genpy's ``_slot_types``: ``float64[9]``, ``geometry_msgs/Vector3``..."""
        registry = self.registry
        if registry is None or msgtype not in registry.types:
            return ()
        return tuple((f.written_type if f.written_type in ("byte", "char") else f.type)
                     + ("" if f.array is None else "[]" if f.array < 0 else f"[{f.array}]")
                     for f in registry.types[msgtype].fields)


@lru_cache(maxsize=256)
def message_types(msgtype: str, definition: str, schema_encoding: str = "ros1msg") -> MessageTypes:
    """The :class:`MessageTypes` of a connection's type and definition (written as ``schema_encoding`` says)."""
    return MessageTypes(msgtype, definition, schema_encoding)


_UNTYPED: dict[Any, Any] = {}  # class caches for batches decoded without MessageTypes


def _cache(types: MessageTypes | None) -> dict[Any, Any]:
    if types is not None:
        return types.classes
    if len(_UNTYPED) > 4096:
        _UNTYPED.clear()
    return _UNTYPED


def _time_class(dtype: np.dtype, field: Any) -> type | None:
    """Time or Duration for a time/duration field (by its declared type, else by its dtype)."""
    if field is not None:
        return {"time": Time, "duration": Duration}.get(field.type)
    if dtype == TIME_DTYPE:
        return Time
    if dtype == DURATION_DTYPE:
        return Duration
    return None


def _fixed_field(owner: str, name: str, dtype: np.dtype, types: MessageTypes | None,
                 props: dict[str, Any], children: dict[str, type], elements: dict[str, type]) -> None:
    """Classify a fixed-size field of ``owner`` by its dtype: a struct, a time, an array of them, or a value."""
    field = types.field(owner, name) if types is not None else None
    if dtype.names is not None:
        time = _time_class(dtype, field)
        if time is not None:
            props[name] = property(_time_getter(name, time))
            return
        children[name] = dtype_class(dtype, field.type if field is not None else "", types)
        props[name] = property(_struct_getter(name, children[name]))
        return
    if dtype.subdtype is not None and dtype.subdtype[0].names is not None:
        base = dtype.subdtype[0]
        elements[name] = _time_class(base, field) or dtype_class(base, field.type if field is not None else "",
                                                                 types)
    props[name] = property(_value_getter(name))


def dtype_class(dtype: np.dtype, msgtype: str, types: MessageTypes | None) -> type:
    """The class of a fixed-size struct type (all its fields in ``dtype``)."""
    cache = _cache(types)
    key = ("dtype", msgtype, dtype)
    if key not in cache:
        if msgtype in ("time", "duration"):
            cache[key] = Time if msgtype == "time" else Duration
            return cache[key]  # type: ignore[no-any-return]
        props: dict[str, Any] = {}
        children: dict[str, type] = {}
        elements: dict[str, type] = {}
        names = tuple(dtype.names or ())
        for name in names:
            _fixed_field(msgtype, name, dtype.fields[name][0], types, props, children, elements)  # type: ignore[index]
        constants = types.constants(msgtype) if types is not None else {}
        slot_types = types.slot_types(msgtype) if types is not None else ()
        cache[key] = _new_class(msgtype, names, constants, props, children, elements, slot_types,
                                types.interface_name(msgtype) if types is not None else None)
    return cache[key]  # type: ignore[no-any-return]


def node_class(node: Any, dtype: np.dtype | None, types: MessageTypes | None) -> type:
    """The class of a StructArray's rows: ``node`` (a layout Node) says how each field presents,
    ``dtype`` is the rows' dtype (its fixed fields), ``types`` names fixed structs and their constants."""
    cache = _cache(types)
    key = ("node", id(node), dtype)
    hit = cache.get(key)
    if hit is not None and hit[0] is node:
        return hit[1]  # type: ignore[no-any-return]
    props: dict[str, Any] = {}
    children: dict[str, type] = {}
    elements: dict[str, type] = {}
    for name, (kind, what) in node.fields.items():
        if kind == "fixed":
            field_dtype = dtype.fields[name][0]  # type: ignore[union-attr,index]
            _fixed_field(node.msgtype, name, field_dtype, types, props, children, elements)
        elif kind == "struct":
            sub = dtype.fields[name][0] if what.has_fixed else None  # type: ignore[union-attr,index]
            children[name] = node_class(what, sub, types)
            props[name] = property(_struct_getter(name, children[name]))
        else:
            if what.kind == "array" and what.dtype.names is not None:  # T[] of fixed structs or times
                field = types.field(node.msgtype, name) if types is not None else None
                elements[name] = _time_class(what.dtype, field) or dtype_class(
                    what.dtype, field.type if field is not None else "", types)
            props[name] = property(_value_getter(name))
    slot_types = types.slot_types(node.msgtype) if types is not None else ()
    cls = _new_class(node.msgtype, tuple(node.fields), dict(node.constants), props, children, elements, slot_types,
                     types.interface_name(node.msgtype) if types is not None else None)
    cache[key] = (node, cls)
    return cls


# The getters are the per-message hot path: one exact-dict lookup, one index (try costs nothing
# when nothing is raised; the first access of a batch builds the column, child or time lists).

def _value_getter(name: str) -> Callable[[Any], Any]:
    def get(self: Any) -> Any:
        try:
            return self._src.cols[name][self._i]
        except KeyError:
            return self._src.column(name)[self._i]
    return get


def _struct_getter(name: str, cls: type) -> Callable[[Any], Any]:
    def get(self: Any) -> Any:
        try:
            return cls(self._src.children[name], self._i)
        except KeyError:
            return cls(self._src.child(name), self._i)
    return get


def _time_getter(name: str, cls: type) -> Callable[[Any], Any]:
    new = object.__new__

    def get(self: Any) -> Any:
        try:
            secs, nsecs = self._src.times[name]
        except KeyError:
            secs, nsecs = self._src.time(name)
        i = self._i
        value = new(cls)  # the fields as stored, without the constructor's checks (see _raw_value)
        value.secs = secs[i]
        value.nsecs = nsecs[i]
        return value
    return get


__all__ = ["Duration", "MessageList", "MessageTypes", "Record", "Source", "Time", "message_types", "node_class",
           "dtype_class", "json_value", "plain"]
