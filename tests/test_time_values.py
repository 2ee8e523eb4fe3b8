"""Time and duration values follow genpy (rospy's ``genpy.Time``/``genpy.Duration``), genpy as the oracle.

- construction: ``nsecs`` normalized into ``[0, 1e9)``, float seconds, ``from_sec``,
  a negative time refused, as genpy does;
- arithmetic: ``Time - Time``, ``Time +/- Duration``, ``Duration +/- Duration``, ``*``, ``/``,
  ``//``, ``%``, ``divmod``, ``-``, ``abs``; comparisons, ``==`` and ``hash``; ``is_zero``,
  ``to_time``, ``bool``, ``str``; the same errors where genpy refuses (``float(t)`` too);
- decoded values keep the stored fields (as rosbags gives them) and compare by value;
- on real files: ROS1 ``/tf`` stamps, ROS2 ``builtin_interfaces/Time`` stamps (ordered,
  sorted, subtracted, equal to and hashed as the fastbag Time of the same value), and
  ROS2 ``builtin_interfaces/Duration`` fields (written with mcap_ros2).
"""

from __future__ import annotations

import copy
import itertools
import operator
import pickle
import struct
from collections.abc import Callable
from typing import Any

import genpy
import pytest

import fastbag
from fastbag.msg.messages import Duration, Time
from fastbag.msg.msgdef import parse_definition

from conftest import data_file

TIMES = [(0, 0), (1, 500_000_000), (1_700_000_000, 999_999_999), (5, 1), (2, 0)]
DURATIONS = [(0, 0), (1, 1), (-1, 5), (-3, 999_999_999), (2, 999_999_999), (0, 1), (-2, 0)]
NUMBERS = [3, -2, 0, 0.5, 1.7, -0.3, True]


def _outcome(f: Callable[..., Any], *args: Any) -> Any:
    """What ``f(*args)`` gives: a value, or ("raises", exception type name)."""
    try:
        return f(*args)
    except Exception as exc:  # noqa: BLE001 - the outcome is compared with genpy's
        return ("raises", type(exc).__name__)


def _same(ours: Any, theirs: Any, what: str) -> None:
    """ours (a fastbag outcome) is genpy's: the same type name and fields for time values, else equal."""
    if isinstance(theirs, genpy.TVal):
        assert type(ours).__name__ == type(theirs).__name__, f"{what}: {type(ours).__name__} != {theirs!r}"
        assert (ours.secs, ours.nsecs) == (theirs.secs, theirs.nsecs), f"{what}: {ours!r} != {theirs!r}"
        assert type(ours.secs) is int and type(ours.nsecs) is int, what
    elif isinstance(theirs, tuple) and theirs and isinstance(theirs[-1], genpy.TVal):  # divmod
        assert ours[0] == theirs[0] and type(ours[0]) is type(theirs[0]), what
        _same(ours[1], theirs[1], what)
    else:
        assert ours == theirs and type(ours) is type(theirs), f"{what}: {ours!r} != {theirs!r}"


def _pairs(values: list) -> list:
    return [(Time if kind == "t" else Duration, genpy.Time if kind == "t" else genpy.Duration, v)
            for kind, v in values]


def test_construction_follows_genpy():
    cases: list[tuple] = [(1, 1_500_000_000), (5, -500_000_000), (0, -1), (2**32 - 1, 2**32 - 1), (-1, 0),
                          (1.5,), (-1.5,), (0.25,), (1.5, 3), (1_700_000_000.123456,), (7,), ()]
    for args in cases:
        for ours_cls, theirs_cls in [(Time, genpy.Time), (Duration, genpy.Duration)]:
            _same(_outcome(ours_cls, *args), _outcome(theirs_cls, *args), f"{ours_cls.__name__}{args}")
    for secs in [0.0, 1.25, 1_700_000_000.5, -2.75, 3.1415926535]:
        _same(_outcome(Duration.from_sec, secs), genpy.Duration.from_sec(secs), f"from_sec({secs})")
        _same(_outcome(Time.from_sec, secs), _outcome(genpy.Time.from_sec, secs), f"from_sec({secs})")
        _same(Time.from_seconds(abs(secs)), genpy.Time.from_sec(abs(secs)), "from_seconds")  # rospy's name


def test_time_arithmetic_and_order_follow_genpy():
    values = [("t", v) for v in TIMES] + [("d", v) for v in DURATIONS]
    for (oc, gc, a), (oc2, gc2, b) in itertools.product(_pairs(values), repeat=2):
        x, y, gx, gy = oc(*a), oc2(*b), gc(*a), gc2(*b)
        what = f"{x!r} {{}} {y!r}"
        for name, op in [("+", lambda p, q: p + q), ("-", lambda p, q: p - q), ("<", lambda p, q: p < q),
                         ("<=", lambda p, q: p <= q), (">", lambda p, q: p > q), (">=", lambda p, q: p >= q),
                         ("==", lambda p, q: p == q), ("!=", lambda p, q: p != q), ("/", lambda p, q: p / q),
                         ("//", lambda p, q: p // q), ("%", lambda p, q: p % q), ("divmod", divmod),
                         ("*", lambda p, q: p * q)]:
            _same(_outcome(op, x, y), _outcome(op, gx, gy), what.format(name))
        if x == y:
            assert hash(x) == hash(y), what.format("hash")
    assert len({Time(1, 2), Time(1, 2), Time(0, 1_000_000_002), Duration(1, 2)}) == 2


def test_genpy_and_fastbag_values_mix_as_genpy_values_do():
    """A ported rospy script mixes the two (``t - rospy.Time(...)``, ``max(t, g)``, ``t < g + Duration(1)``):
    each operation of a fastbag value with a genpy one, either side, gives what the two genpy values give;
    ``==`` too with the fastbag value on the left (genpy's own ``==`` answers False to any other type, and
    Python then never asks fastbag's)."""
    values = [("t", v) for v in TIMES] + [("d", v) for v in DURATIONS]
    operations = [("+", operator.add), ("-", operator.sub), ("<", operator.lt), ("<=", operator.le),
                  (">", operator.gt), (">=", operator.ge), ("/", operator.truediv), ("//", operator.floordiv),
                  ("%", operator.mod), ("divmod", divmod)]
    for (oc, gc, a), (oc2, gc2, b) in itertools.product(_pairs(values), repeat=2):
        x, y, gx, gy = oc(*a), oc2(*b), gc(*a), gc2(*b)
        for name, op in operations:
            want = _outcome(op, gx, gy)
            _same(_outcome(op, x, gy), want, f"{x!r} {name} genpy {gy!r}")
            _same(_outcome(op, gx, y), want, f"genpy {gx!r} {name} {y!r}")
        for name, op in [("==", operator.eq), ("!=", operator.ne)]:
            _same(_outcome(op, x, gy), _outcome(op, gx, gy), f"{x!r} {name} genpy {gy!r}")
        if x == gy:  # equal values hash equal (Python's rule): a genpy time finds a fastbag key in a dict
            assert hash(x) == hash(gy) and {x: 1}.get(gy) == 1 and gy in {x}, f"{x!r} hash genpy {gy!r}"
    stamp, later = Time(5, 10), genpy.Time(6, 0)
    assert max([stamp, later]) is later and sorted([later, stamp]) == [stamp, later]
    assert fastbag.to_ns(later) == 6_000_000_000 and fastbag.to_ns([stamp, later]).tolist() == [5_000_000_010,
                                                                                                6_000_000_000]


def test_duration_by_numbers_and_unary_follow_genpy():
    for secs, nsecs in DURATIONS:
        ours, theirs = Duration(secs, nsecs), genpy.Duration(secs, nsecs)
        for k in NUMBERS:
            for name, op in [("*", lambda p, q: p * q), ("r*", lambda p, q: q * p), ("/", lambda p, q: p / q),
                             ("//", lambda p, q: p // q)]:
                _same(_outcome(op, ours, k), _outcome(op, theirs, k), f"{ours!r} {name} {k}")
        _same(-ours, -theirs, "neg")
        _same(abs(ours), abs(theirs), "abs")
        _same(_outcome(operator.add, ours, 1), _outcome(operator.add, theirs, 1), "+ int")


def test_time_methods_follow_genpy():
    for (secs, nsecs), cls, gcls in itertools.chain(((v, Time, genpy.Time) for v in TIMES),
                                                    ((v, Duration, genpy.Duration) for v in DURATIONS)):
        ours, theirs = cls(secs, nsecs), gcls(secs, nsecs)
        assert ours.is_zero() is theirs.is_zero() and bool(ours) is bool(theirs)
        assert ours.to_sec() == theirs.to_sec() and ours.to_nsec() == theirs.to_nsec()
        assert str(ours) == str(theirs)  # genpy's str: the nanoseconds
        _same(_outcome(float, ours), _outcome(float, theirs), "float()")  # genpy has none
        _same(_outcome(int, ours), _outcome(int, theirs), "int()")
        _same(pickle.loads(pickle.dumps(ours)), theirs, "pickle")
        _same(copy.deepcopy(ours), theirs, "deepcopy")
        if cls is Time:
            assert ours.to_time() == theirs.to_time()
        changed = copy.copy(ours)
        changed.set(secs, nsecs + 2_000_000_000)
        theirs.set(secs, nsecs + 2_000_000_000)
        assert (changed.secs, changed.nsecs) == (theirs.secs, theirs.nsecs)
        changed.canon()
        theirs.canon()
        _same(changed, theirs, "canon()")


def _write_ros1(path, definition_types: dict, msgtype: str, payloads: list[bytes]) -> None:
    lines = [definition_types[msgtype]]
    for name, text in definition_types.items():
        if name != msgtype:
            lines.append("=" * 80 + f"\nMSG: {name}\n{text}")
    definition = "\n".join(lines)
    with fastbag.Writer(path) as w:
        conn = w.add_connection("/t", msgtype, definition, parse_definition(msgtype, definition).md5sum())
        for k, payload in enumerate(payloads):
            w.write(conn, k + 1, payload)


def test_decoded_values_keep_the_stored_fields(tmp_path):
    """A stored nsecs of 1e9 or more (no ROS writer makes one) is kept, as rosbags gives it; the value compares
    as genpy's normalized one, and canon() gives genpy's fields. ``abs``, ``-``, ``is_zero`` and ``bool`` go
    by the value too: ``abs`` of a stored (0, -500000000) was itself, negative, and (1, -1000000000) was not
    zero (QA)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    types = {"fbtest/Main": "time t\nduration d\ntime[] ts\n"}
    stored = [((5, 1_500_000_000), (0, -5)), ((7, 3), (-1, 2_000_000_001)), ((8, 0), (0, -500_000_000)),
              ((9, 0), (1, -1_000_000_000))]
    payloads = [struct.pack("<IIiiIII", *t, *d, 1, *t) for t, d in stored]
    _write_ros1(tmp_path / "t.bag", types, "fbtest/Main", payloads)
    store = get_typestore(Stores.ROS1_NOETIC)
    store.register(get_types_from_msg(types["fbtest/Main"], "fbtest/msg/Main"))
    with fastbag.open(tmp_path / "t.bag") as bag:
        got = [m.msg for m in bag.messages()]
    for ours, payload, (t, d) in zip(got, payloads, stored):
        theirs = store.deserialize_ros1(payload, "fbtest/msg/Main")
        assert (ours.t.secs, ours.t.nsecs) == (theirs.t.sec, theirs.t.nanosec) == t
        assert (ours.d.secs, ours.d.nsecs) == d  # ROS1's int32 nsecs (rosbags reads it as uint32)
        assert [(v.secs, v.nsecs) for v in ours.ts] == [t]
        assert ours.t.to_nsec() == genpy_time(genpy.Time, *t).to_nsec()
        assert ours.t == Time(*t) and hash(ours.t) == hash(Time(*t))
        assert ours.d == Duration(*d) and ours.ts == [Time(*t)]
        assert (ours.t - Time(*t)).is_zero() and ours.t - ours.d == Time(*t) - Duration(*d)
        for what, f in (("abs", abs), ("-", operator.neg), ("is_zero", lambda v: v.is_zero()), ("bool", bool)):
            _same(f(ours.d), f(genpy_time(genpy.Duration, *d)), f"{what} of a stored duration {d}")
        for what, f in (("is_zero", lambda v: v.is_zero()), ("bool", bool)):
            _same(f(ours.t), f(genpy_time(genpy.Time, *t)), f"{what} of a stored time {t}")
        kept = pickle.loads(pickle.dumps(ours.t))
        assert (kept.secs, kept.nsecs) == t  # unpickled as stored
        value = ours.t  # a new value at each access: canon() changes this one
        value.canon()
        _same(value, genpy_time(genpy.Time, *t), "canon()")


def genpy_time(cls: type, secs: int, nsecs: int) -> Any:
    """A genpy value normalized as genpy's deserializer leaves it."""
    value = cls(0, 0)
    value.set(secs, nsecs)
    value.canon()
    return value


# -- real files ---------------------------------------------------------------------------------

def test_ros1_stamps_on_a_real_bag():
    path = data_file("ros1v2/cruise-automation__rosbag.js__fixtures__example.bag")
    with fastbag.open(path) as bag:
        stamps = [m.msg.transforms[0].header.stamp for m in bag.messages(topics="/tf")]
    assert len(stamps) > 10 and all(type(s) is Time for s in stamps)
    theirs = [genpy.Time(s.secs, s.nsecs) for s in stamps]
    for a, b, ga, gb in zip(stamps, stamps[1:], theirs, theirs[1:]):
        _same(b - a, gb - ga, "Time - Time")
        assert (b - a).to_sec() == (gb - ga).to_sec()
        _same(a + (b - a), gb, "Time + Duration")
        _same(b - (b - a), ga, "Time - Duration")
        assert (a < b) is (ga < gb) and (a == b) is (ga == gb)
    assert [s.to_nsec() for s in sorted(stamps, reverse=True)] == sorted((t.to_nsec() for t in theirs), reverse=True)
    assert stamps[0].to_time() == theirs[0].to_time() and not stamps[0].is_zero()


def test_ros2_stamps_on_a_real_recording():
    path = data_file("db3/MichaelGrupp__evo__test__data__tf_example")
    with fastbag.open(path) as bag:
        stamps = [m.msg.transforms[0].header.stamp for m in bag.messages(topics="/tf")]
        static = next(bag.messages(topics="/tf_static")).msg.transforms[0].header.stamp
    assert len(stamps) > 10 and stamps[0]._type == "builtin_interfaces/Time"
    theirs = [genpy.Time(s.sec, s.nanosec) for s in stamps]
    for a, b, ga, gb in zip(stamps, stamps[1:], theirs, theirs[1:]):
        assert (a < b) is (ga < gb) and (a <= b) is (ga <= gb) and (a > b) is (ga > gb) and (a == b) is (ga == gb)
        _same(b - a, gb - ga, "ROS2 Time - Time")
        _same(a + (b - a), gb, "ROS2 Time + Duration")
        _same(b - (b - a), ga, "ROS2 Time - Duration")
        assert a + (b - a) == b and b == a + (b - a)  # a fastbag Time equals the ROS2 stamp of its value
        # and genpy's (a rospy script's times meet ROS 2 stamps): == was False where < and > said neither
        assert (a == gb) is (ga == gb) and (a != gb) is (ga != gb) and (a == ga) and not (a != ga)
    order = sorted(range(len(stamps)), key=lambda i: (stamps[i].sec, stamps[i].nanosec))
    assert [s.to_nsec() for s in sorted(stamps)] == [stamps[i].to_nsec() for i in order]
    assert (static < stamps[0]) is (static.to_nsec() < stamps[0].to_nsec())
    first = stamps[0]
    same = Time(first.sec, first.nanosec)
    assert first == same and hash(first) == hash(same) and len({first, same}) == 1
    assert first != Duration(first.sec, first.nanosec) and first.to_time() == same.to_time()
    assert first != genpy.Duration(first.sec, first.nanosec) and first in {same}
    assert not first.is_zero() and (first - first).is_zero()
    with pytest.raises(TypeError):
        first < Duration(1)  # noqa: B015 - a time and a duration do not compare, as in genpy
    with pytest.raises(TypeError):
        first + first
    assert first.to_dict() == {"sec": first.sec, "nanosec": first.nanosec}  # still the message's fields


def test_ros2_durations_from_mcap_ros2(tmp_path):
    """builtin_interfaces/Duration fields (written by mcap_ros2) take genpy's Duration arithmetic."""
    writer = pytest.importorskip("mcap_ros2.writer")
    sep = "=" * 80
    text = ("builtin_interfaces/Time t\nbuiltin_interfaces/Duration d\nbuiltin_interfaces/Duration[] ds\n"
            f"{sep}\nMSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"
            f"{sep}\nMSG: builtin_interfaces/Duration\nint32 sec\nuint32 nanosec\n")
    values = [((10, 5), (-3, 250_000_000), (1, 2)), ((11, 999_999_999), (0, 0), (-1, 999_999_999))]
    path = tmp_path / "d.mcap"
    with path.open("wb") as f:
        w = writer.Writer(f)
        schema = w.register_msgdef("fbtest/msg/M", text)
        for k, (t, d, e) in enumerate(values):
            w.write_message("/m", schema, {"t": {"sec": t[0], "nanosec": t[1]}, "d": {"sec": d[0], "nanosec": d[1]},
                                           "ds": [{"sec": e[0], "nanosec": e[1]}]}, log_time=k)
        w.finish()
    with fastbag.open(path) as bag:
        got = [m.msg for m in bag.messages()]
    for msg, (t, d, e) in zip(got, values):
        gt, gd, ge = genpy.Time(*t), genpy.Duration(*d), genpy.Duration(*e)
        assert msg.d._type == "builtin_interfaces/Duration"
        _same(msg.t - msg.d, gt - gd, "Time - Duration")
        _same(msg.t + msg.d, gt + gd, "Time + Duration")
        _same(msg.d + msg.t, gd + gt, "Duration + Time")
        _same(msg.d + msg.ds[0], gd + ge, "Duration + Duration")
        _same(msg.ds[0] - msg.d, ge - gd, "Duration - Duration")
        _same(msg.d * 3, gd * 3, "* 3")
        _same(2.5 * msg.d, 2.5 * gd, "2.5 *")
        _same(msg.d / 4, gd / 4, "/ 4")
        _same(-msg.d, -gd, "neg")
        _same(abs(msg.d), abs(gd), "abs")
        assert (msg.d < msg.ds[0]) is (gd < ge) and (msg.d == Duration(*d)) and hash(msg.d) == hash(Duration(*d))
        assert msg.d.is_zero() is gd.is_zero()
        with pytest.raises(TypeError):
            msg.d < msg.t  # noqa: B015
        with pytest.raises(TypeError):
            -msg.t  # noqa: B018
