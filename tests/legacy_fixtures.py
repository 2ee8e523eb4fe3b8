"""Builders and oracles for the legacy (1.2 / 1.1) bag tests; no fastbag code is used here.

- ``parse_v12``: an independent, deliberately naive walk of a ``#ROSRECORD V1.2``
  file (plain ``struct``): its bag header, definition records, message records
  and index records (``ver``, ``topic``, ``type``, ``count`` and the
  ``(time, pos)`` entries).
- ``classic_raw`` / ``classic_decoded``: the classic ``rosbag`` module (from the
  ``py3rosmsgs`` wheel) read through ``bag._reader.read_messages``, because its
  public ``Bag.read_messages`` passes one argument too many to the 1.2 reader
  under Python 3. Time windows are given fastbag-style, ``[start, end)`` in
  int ns, and converted to classic rosbag's inclusive ``genpy.Time`` bounds.
- ``assert_same_genpy``: fastbag's decoded value equals a genpy message
  (``__slots__`` / ``_slot_types``), field by field, floats bit for bit.
- ``V11_*`` / ``v11_messages`` / ``write_v11``: a ``#ROSRECORD V1.1`` bag written
  from scratch, values serialized by rosbags, with per-type ``.msg`` texts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from conftest import classic_rosbag
from fastbag.msg.messages import Record, Time
from fastbag.tooling.compare import same_access
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

MAGIC_V12 = b"#ROSRECORD V1.2\n"
MAGIC_V11 = b"#ROSRECORD V1.1\n"


# -- format 1.2, walked by hand -------------------------------------------------------

def header_fields(raw: bytes) -> dict[str, bytes]:
    fields, p = {}, 0
    while p < len(raw):
        (n,) = struct.unpack_from("<I", raw, p)
        name, sep, value = raw[p + 4:p + 4 + n].partition(b"=")
        assert sep, f"header field without '=' at {p}"
        fields[name.decode()] = value
        p += 4 + n
    assert p == len(raw), "header fields overrun the header"
    return fields


def u32(value: bytes) -> int:
    return struct.unpack("<I", value)[0]


@dataclass
class Record12:
    pos: int        # file offset of the record's header_len
    end: int        # file offset just past its data
    op: int
    fields: dict[str, bytes]
    data_pos: int   # file offset of its data
    data: bytes


@dataclass
class Index12:
    pos: int
    ver: int
    topic: str
    msgtype: str
    count: int
    entries: list[tuple[int, int]]  # (time ns, file position)


@dataclass
class Message12:
    pos: int
    topic: str
    time: int
    data: bytes
    msgtype: str
    md5sum: str


@dataclass
class Bag12:
    data: bytes
    index_pos: int
    records: list[Record12]
    definitions: dict[str, tuple[str, str, str]]  # topic -> (type, md5sum, definition text)
    messages: list[Message12]                     # in file order
    index: dict[str, Index12]

    @property
    def header(self) -> Record12:
        return self.records[0]


def walk_v12(data: bytes) -> list[Record12]:
    """Every record after the version line; stops at the first one that does not fit in the file."""
    assert data.startswith(MAGIC_V12)
    records, p = [], len(MAGIC_V12)
    while p + 4 <= len(data):
        (hl,) = struct.unpack_from("<I", data, p)
        if p + 8 + hl > len(data):
            break
        fields = header_fields(data[p + 4:p + 4 + hl])
        (dl,) = struct.unpack_from("<I", data, p + 4 + hl)
        start = p + 8 + hl
        if start + dl > len(data):
            break
        records.append(Record12(p, start + dl, fields["op"][0], fields, start, data[start:start + dl]))
        p = start + dl
    return records


def parse_v12(path: Path) -> Bag12:
    data = Path(path).read_bytes()
    records = walk_v12(data)
    assert records[0].op == 0x03, "a 1.2 bag here starts with its bag header record"
    index_pos = struct.unpack("<Q", records[0].fields["index_pos"])[0]
    definitions: dict[str, tuple[str, str, str]] = {}
    messages, index = [], {}
    for r in records:
        f = r.fields
        if r.op == 0x01:
            topic = f["topic"].decode()
            assert topic not in definitions, "a topic's definition record appears once"
            definitions[topic] = (f["type"].decode(), f["md5"].decode(), f["def"].decode())
            assert r.data == b""
        elif r.op == 0x02:
            topic = f["topic"].decode()
            assert topic in definitions, "definition before the first message"
            messages.append(Message12(r.pos, topic, u32(f["sec"]) * 10**9 + u32(f["nsec"]), r.data,
                                      f["type"].decode(), f["md5"].decode()))
        elif r.op == 0x04:
            count = u32(f["count"])
            assert len(r.data) == 16 * count
            entries = [(sec * 10**9 + nsec, pos) for sec, nsec, pos in struct.iter_unpack("<IIQ", r.data)]
            index[f["topic"].decode()] = Index12(r.pos, u32(f["ver"]), f["topic"].decode(), f["type"].decode(),
                                                 count, entries)
    return Bag12(data, index_pos, records, definitions, messages, index)


def rows12(bag: Bag12) -> list[tuple[str, int, bytes]]:
    """(topic, time ns, bytes) of every message record, in receive-time order (stable)."""
    return [(m.topic, m.time, m.data) for m in sorted(bag.messages, key=lambda m: m.time)]


# -- classic rosbag -------------------------------------------------------------------

def _classic_window(start: int | None, end: int | None) -> tuple[Any, Any]:
    import genpy

    def to_time(ns: int) -> Any:
        return genpy.Time(ns // 10**9, ns % 10**9)

    lo = to_time(start) if start is not None else None
    hi = to_time(end - 1) if end is not None else None  # rosbag's end is inclusive, fastbag's exclusive
    return lo, hi


def _classic_iter(path: Path, topics: list[str] | None, start: int | None, end: int | None, raw: bool):
    rosbag = classic_rosbag()

    lo, hi = _classic_window(start, end)
    # Its classes from this bag's own definitions: the module caches them by md5sum, and a class another
    # bag made for the same md5sum names another type (rosgraph_msgs/Log for roslib/Log)
    rosbag.bag._message_types.clear()
    bag = rosbag.Bag(str(path))
    try:
        for m in bag._reader.read_messages(topics, lo, hi, None, raw):
            yield m.topic, m.timestamp.secs * 10**9 + m.timestamp.nsecs, m.message
    finally:
        bag.close()


def classic_raw(path: Path, topics: list[str] | None = None, start: int | None = None,
                end: int | None = None) -> list[tuple[str, int, bytes]]:
    """(topic, time ns, bytes) as classic rosbag reads them raw."""
    out = []
    for topic, t, (datatype, data, md5sum, pos, pytype) in _classic_iter(path, topics, start, end, True):
        assert isinstance(data, bytes)
        out.append((topic, t, data))
    return out


def classic_decoded(path: Path, topics: list[str] | None = None) -> list[tuple[str, int, Any]]:
    """(topic, time ns, genpy message) built from the bag's own stored definitions."""
    return list(_classic_iter(path, topics, None, None, False))


# -- comparing with genpy messages ---------------------------------------------------------

FLOATS = {"float32": 4, "float64": 8}


def _is_genpy_time(value: Any) -> bool:
    return hasattr(value, "secs") and hasattr(value, "nsecs") and not hasattr(value, "_slot_types")


def _is_genpy_msg(value: Any) -> bool:
    return hasattr(value, "_slot_types") and hasattr(value, "__slots__")


def _header_as_std(typename: str) -> str:
    return "std_msgs/Header" if typename == "roslib/Header" else typename


def _ours_fields(ours: Any) -> list[str]:
    if isinstance(ours, dict):
        return list(ours)
    if isinstance(ours, Record):
        return list(ours._fields)
    if hasattr(ours, "fields"):
        return list(ours.fields)
    return list(ours.dtype.names)


def _base_type(slot_type: str | None) -> str | None:
    return slot_type.split("[", 1)[0] if slot_type else None


def _check_float_dtype(ours: Any, slot_type: str | None, path: str) -> None:
    base = _base_type(slot_type)
    dtype = getattr(ours, "dtype", None)
    if base in FLOATS and dtype is not None:
        assert dtype.kind == "f" and dtype.itemsize == FLOATS[base], f"{path}: {base} read as {dtype}"


def assert_same_genpy(ours: Any, theirs: Any, path: str = "msg", slot_type: str | None = None) -> None:
    """Assert that a fastbag value (Record, StructArray, NumPy value, or to_dict() output) equals a genpy value."""
    if _is_genpy_time(theirs):
        if isinstance(ours, Time):  # the rospy API: secs, nsecs, to_sec(), to_nsec()
            assert (ours.secs, ours.nsecs) == (theirs.secs, theirs.nsecs), f"{path}: {ours} != {theirs}"
            assert ours.to_nsec() == theirs.to_nsec() and ours.to_sec() == theirs.to_sec(), path
            assert type(ours).__name__ == type(theirs).__name__, f"{path}: {type(ours).__name__}"
            return
        assert int(ours["secs"]) == theirs.secs and int(ours["nsecs"]) == theirs.nsecs, \
            f"{path}: {ours} != {theirs.secs}.{theirs.nsecs:09d}"
        return
    if _is_genpy_msg(theirs):
        names = list(theirs.__slots__)
        assert _ours_fields(ours) == names, f"{path}: fields {_ours_fields(ours)} != {names}"
        if isinstance(ours, Record):
            # As user code reaches it: by attribute (the same as [name]), genpy's names and
            # every constant of every nested type as a class attribute, as genpy has them.
            # (2010-era definitions name their header roslib/Header, which genpy calls std_msgs/Header)
            assert _header_as_std(ours._type) == theirs._type and list(ours.__slots__) == names, \
                f"{path}: type {ours._type}"
            assert [_header_as_std(k) for k in ours._slot_types] == list(theirs._slot_types), f"{path}: _slot_types"
            genpy_constants = {k: v for k, v in vars(type(theirs)).items()
                               if k not in names and not k.startswith("_") and isinstance(v, (int, float, str))}
            assert ours._constants == genpy_constants, f"{path}: constants {ours._constants} != {genpy_constants}"
            for name, value in genpy_constants.items():
                assert getattr(ours, name) == value, f"{path}.{name}: constant {value!r}"
            for name, kind in zip(names, theirs._slot_types):
                value = getattr(ours, name)
                assert same_access(value, ours[name]), f"{path}.{name}: by attribute != by [name]"
                assert_same_genpy(value, getattr(theirs, name), f"{path}.{name}", kind)
            return
        constants = getattr(ours, "constants", None)
        if constants is not None:  # genpy keeps a type's constants as class attributes
            for name, value in constants.items():
                assert getattr(type(theirs), name) == value, f"{path}.{name}: constant {value!r}"
        for name, kind in zip(names, theirs._slot_types):
            assert_same_genpy(ours[name], getattr(theirs, name), f"{path}.{name}", kind)
        return
    if isinstance(theirs, bytes):  # uint8[] / char[]
        if isinstance(ours, (bytes, memoryview)):
            got = bytes(ours)
        else:
            array = np.asarray(ours)
            assert array.dtype.itemsize == 1, f"{path}: {slot_type} read as {array.dtype}"
            got = np.ascontiguousarray(array).tobytes()
        assert got == theirs, f"{path}: {len(got)} bytes != {len(theirs)} bytes (or values differ)"
        return
    if isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), f"{path}: length {len(ours)} != {len(theirs)}"
        if not theirs:
            return
        _check_float_dtype(ours, slot_type, path)
        first = theirs[0]
        if isinstance(ours, np.ndarray) and ours.dtype.names and (_is_genpy_msg(first) or _is_genpy_time(first)):
            # A fixed-size struct array: compare column by column.
            names = list(first.__slots__) if _is_genpy_msg(first) else ["secs", "nsecs"]
            kinds = list(first._slot_types) if _is_genpy_msg(first) else ["uint32", "uint32"]
            assert list(ours.dtype.names) == names, f"{path}: fields {ours.dtype.names} != {names}"
            for name, kind in zip(names, kinds):
                assert_same_genpy(ours[name], [getattr(e, name) for e in theirs], f"{path}[].{name}",
                                  kind + "[]")
            return
        if isinstance(first, float):
            got = np.asarray(ours, dtype=np.float64)
            want = np.asarray(theirs, dtype=np.float64)
            assert got.tobytes() == want.tobytes(), f"{path}: float values differ"
            return
        if isinstance(first, bool):
            assert [bool(x) for x in ours] == list(theirs), f"{path}: values differ"
            return
        if isinstance(first, int):
            assert [int(x) for x in ours] == list(theirs), f"{path}: values differ"
            return
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same_genpy(a, b, f"{path}[{i}]", _base_type(slot_type))
        return
    if isinstance(theirs, float):
        _check_float_dtype(ours, slot_type, path)
        assert np.float64(ours).tobytes() == np.float64(theirs).tobytes(), f"{path}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, bool):
        assert bool(ours) == theirs, f"{path}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, int):
        assert int(ours) == theirs, f"{path}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, str):
        assert isinstance(ours, str), f"{path}: {ours!r} is not a str (genpy decoded {theirs!r})"
        assert str(ours) == theirs, f"{path}: {ours!r} != {theirs!r}"
        return
    raise AssertionError(f"{path}: no comparison for {type(theirs).__name__} {theirs!r}")


# -- format 1.1, written from scratch ---------------------------------------------------

# Each type's own .msg text (comments included on purpose: they do not change the md5sum).
V11_TEXTS = {
    "std_msgs/String": "string data\n",
    "std_msgs/Header": "# Standard metadata\nuint32 seq\ntime stamp\nstring frame_id\n",
    "geometry_msgs/Point": "# a position\nfloat64 x\nfloat64 y\nfloat64 z\n",
    "sensor_msgs/LaserScan": (
        "Header header            # stamp of the first ray\n"
        "float32 angle_min\nfloat32 angle_max\nfloat32 angle_increment\n"
        "float32 time_increment\nfloat32 scan_time\nfloat32 range_min\nfloat32 range_max\n"
        "float32[] ranges\nfloat32[] intensities\n"),
    "my_pkg/Sample": "string label\nfloat32[] values\n",
    "my_pkg/Custom": (
        "uint8 KIND_A=1\nuint8 KIND_B=2\n"
        "Header header\n"
        "uint8 kind\n"
        "geometry_msgs/Point[] points   # another package\n"
        "Sample[] samples               # same package, relative name\n"
        "uint8[] blob\n"
        "int32[3] triple\n"
        "string[] names\n"
        "time t\n"
        "duration d\n"
        "bool flag\n"
        "int64 big\n"
        "uint64 ubig\n"),
}

# topic -> type; the main types of the 1.1 fixture
V11_TOPICS = {
    "/chatter": "std_msgs/String",
    "/point": "geometry_msgs/Point",
    "/scan": "sensor_msgs/LaserScan",
    "/custom": "my_pkg/Custom",
}


def v11_typestore() -> Any:
    """A Noetic typestore holding the custom types too, registered from V11_TEXTS."""
    store = get_typestore(Stores.ROS1_NOETIC)
    types = {}
    for name, text in V11_TEXTS.items():  # the standard texts must agree with Noetic's (else TypeConflict)
        types.update(get_types_from_msg(text, rosname(name)))
    store.register(types)
    return store


def rosname(msgtype: str) -> str:
    pkg, msg = msgtype.split("/")
    return f"{pkg}/msg/{msg}"


def v11_md5sums(store: Any) -> dict[str, str]:
    return {t: store.generate_msgdef(rosname(t))[1] for t in V11_TOPICS.values()}


def v11_values(store: Any, seed: int = 7) -> list[tuple[str, int, Any]]:
    """(topic, time ns, rosbags message) in receive-time order, interleaved, every time distinct."""
    rng = np.random.default_rng(seed)
    T = store.types
    Header, Time, Duration = T["std_msgs/msg/Header"], T["builtin_interfaces/msg/Time"], \
        T["builtin_interfaces/msg/Duration"]
    Point = T["geometry_msgs/msg/Point"]
    out = []
    t0 = 1_262_304_000 * 10**9 + 123
    strings = ["hello", "", "héllo wörld ✓", "line\nbreak", "x" * 300]
    specials = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-310, 5e-324, 1.7976931348623157e308]
    for k in range(40):
        time = t0 + k * 25_000_017
        topic = list(V11_TOPICS)[k % 4]
        header = Header(seq=k, stamp=Time(sec=1_262_304_000 + k, nanosec=(k * 37_777_777) % 10**9),
                        frame_id=f"frame_{k}")
        if topic == "/chatter":
            msg = T["std_msgs/msg/String"](data=strings[k // 4 % len(strings)])
        elif topic == "/point":
            x = specials[k // 4 % len(specials)]
            msg = Point(x=x, y=float(rng.normal()), z=-float(k))
        elif topic == "/scan":
            n = [0, 5, 5, 360, 7][k // 4 % 5]
            ranges = rng.random(n, dtype=np.float32) * 10
            if n:
                ranges[0] = np.float32("nan")
            msg = T["sensor_msgs/msg/LaserScan"](
                header=header, angle_min=np.float32(-1.5), angle_max=np.float32(1.5),
                angle_increment=np.float32(0.01), time_increment=np.float32(1e-5), scan_time=np.float32(0.1),
                range_min=np.float32(0.0), range_max=np.float32(30.0), ranges=ranges,
                intensities=rng.random(n if k % 8 else 0, dtype=np.float32))
        else:
            npoints, nsamples = (k // 4) % 3, (k // 4) % 4
            msg = T["my_pkg/msg/Custom"](
                header=header, kind=1 + k % 2,
                points=[Point(x=float(i), y=float(rng.normal()), z=-0.0) for i in range(npoints)],
                samples=[T["my_pkg/msg/Sample"](label=f"s{i}", values=rng.random(i, dtype=np.float32))
                         for i in range(nsamples)],
                blob=rng.integers(0, 256, size=k, dtype=np.uint8),
                triple=np.array([k, -k, 2**31 - 1], dtype=np.int32),
                names=[f"n{i}" for i in range(k % 3)] + (["ünï"] if k % 2 else []),
                t=Time(sec=k, nanosec=999_999_999), d=Duration(sec=-k, nanosec=5),
                flag=bool(k % 3), big=-(2**63) + k, ubig=2**64 - 1 - k)
        out.append((topic, time, msg))
    return out


def v11_record(topic: str, md5sum: str, msgtype: str, time: int, data: bytes) -> bytes:
    sec, nsec = divmod(time, 10**9)
    return (f"{topic}\n{md5sum}\n{msgtype}\n".encode() + struct.pack("<III", sec, nsec, len(data)) + data)


def write_v11(path: Path, rows: list[tuple[str, str, str, int, bytes]]) -> list[int]:
    """Write ``(topic, md5sum, type, time ns, data)`` rows; returns each record's end offset."""
    blob, ends = bytearray(MAGIC_V11), []
    for row in rows:
        blob += v11_record(*row)
        ends.append(len(blob))
    Path(path).write_bytes(bytes(blob))
    return ends


def write_msg_folder(root: Path, texts: dict[str, str], *, with_msg_dir: bool) -> Path:
    """``<root>/<pkg>/msg/<Type>.msg`` (or ``<root>/<pkg>/<Type>.msg``) for every text."""
    for name, text in texts.items():
        pkg, msg = name.split("/")
        folder = root / pkg / "msg" if with_msg_dir else root / pkg
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{msg}.msg").write_text(text, encoding="utf-8")
    return root


def record12(fields: dict[str, bytes], data: bytes = b"") -> bytes:
    """One 1.2 record: ``u32 header_len | fields | u32 data_len | data``."""
    return raw_record12([k.encode() + b"=" + v for k, v in fields.items()], data)


def raw_record12(fields: list[bytes], data: bytes = b"") -> bytes:
    """One 1.2 record of header fields as given (``name=value``, or anything: repeated, misshapen)."""
    header = b"".join(struct.pack("<I", len(f)) + f for f in fields)
    return struct.pack("<I", len(header)) + header + struct.pack("<I", len(data)) + data


def with_definition_replaced(bag: Bag12, topic: str, definition: str) -> bytes:
    """The bag with ``topic``'s definition record rewritten, index positions and index_pos shifted to match."""
    old = next(r for r in bag.records if r.op == 0x01 and r.fields["topic"].decode() == topic)
    fields = dict(old.fields, **{"def": definition.encode()})
    new = record12(fields, b"")
    delta = len(new) - (old.end - old.pos)
    index_start = min(r.pos for r in bag.records if r.op == 0x04)
    body = bag.data[:old.pos] + new + bag.data[old.end:index_start]
    index = b""
    for r in (r for r in bag.records if r.op == 0x04):
        entries = [(s, n, pos + delta if pos > old.pos else pos) for s, n, pos in struct.iter_unpack("<IIQ", r.data)]
        index += record12(r.fields, b"".join(struct.pack("<IIQ", *e) for e in entries))
    out = bytearray(body + index)
    header = bag.header
    at = out.index(b"index_pos=", header.pos, header.data_pos) + len(b"index_pos=")
    out[at:at + 8] = struct.pack("<Q", index_start + delta)
    return bytes(out)
