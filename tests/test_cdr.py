"""CDR decoding proved against rosbags' CDR serializer: random ROS2 type families and values, both byte orders.

Every example draws a family of ``.msg`` types (nested structs, every
primitive, strings, bounded strings, fixed arrays, sequences and bounded
sequences of primitives and of structs, empty structs), registers them with a
rosbags typestore, serializes random messages little- or big-endian with
rosbags, and decodes them with :func:`fastbag.msg.decode_messages` from the
ros2msg text; every field must equal what rosbags deserializes. Then the
layout rules (strides, padding, zero-copy views) and hostile input.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from cdr_oracle import assert_same_cdr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastbag.errors import DecodeError, FastbagError, UnsupportedError
from fastbag.msg import decode_messages
from fastbag.msg.arrays import Ragged
from fastbag.msg.layout import layout_for

typesys = pytest.importorskip("rosbags.typesys", reason="rosbags is the oracle")

PRIMS = {"bool": "?", "byte": "u1", "char": "u1", "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2",
         "int32": "i4", "uint32": "u4", "int64": "i8", "uint64": "u8", "float32": "f4", "float64": "f8"}
SEP = "=" * 80


# -- type families -----------------------------------------------------------------

@st.composite
def families(draw):
    """{name: [(kind, type, field name, size)]}: the last type is the main one; types use only earlier ones."""
    n_types = draw(st.integers(1, 4))
    types: dict[str, list] = {}
    for t in range(n_types):
        name = f"fam/T{t}"
        earlier = list(types)
        kinds = ["prim", "prim", "string", "bstring", "fixed", "seq", "bseq", "strseq"]
        if earlier:
            kinds += ["struct", "struct", "structseq", "structfixed"]
        fields = []
        for k in range(draw(st.integers(0 if t < n_types - 1 or not earlier else 1, 6))):
            kind = draw(st.sampled_from(kinds))
            prim = draw(st.sampled_from(sorted(PRIMS)))
            sub = draw(st.sampled_from(earlier)) if earlier else None
            fields.append((kind, sub if kind.startswith("struct") else prim, f"f{k}", draw(st.integers(1, 4))))
        types[name] = fields
    return types


def _line(kind: str, typ: str, name: str, size: int) -> str:
    return {"prim": f"{typ} {name}", "string": f"string {name}", "bstring": f"string<={size + 8} {name}",
            "fixed": f"{typ}[{size}] {name}", "seq": f"{typ}[] {name}", "bseq": f"{typ}[<={size}] {name}",
            "strseq": f"string[] {name}", "struct": f"{typ} {name}", "structseq": f"{typ}[] {name}",
            "structfixed": f"{typ}[{size}] {name}"}[kind]


def _texts(types: dict) -> dict[str, str]:
    return {name: "\n".join(_line(*f) for f in fields) + "\n" for name, fields in types.items()}


def _definition(types: dict) -> tuple[str, str]:
    """(main type, ros2msg text with every dependency), as MCAP stores it."""
    texts = _texts(types)
    names = list(texts)
    main = names[-1]
    blocks = [texts[main]] + [f"{SEP}\nMSG: {n}\n{texts[n]}" for n in reversed(names[:-1])]
    return main, "".join(blocks)


IDL_NAMES = {"bool": "boolean", "byte": "octet", "char": "uint8", "float32": "float", "float64": "double"}


def _idl_definition(types: dict) -> str:
    """The same family as IDL the way rosidl generates it and rosbag2 stores it: modules, annotations,
    typedefs for fixed arrays, a constants module, a placeholder member for empty structs, IDL: blocks."""
    texts = {}
    for name, fields in types.items():
        pkg, short = name.split("/")
        typedefs, members = [], []
        for kind, typ, fname, size in fields:
            t = IDL_NAMES.get(typ, typ) if not kind.startswith("struct") else f"{pkg}::msg::{typ.split('/')[1]}"
            if kind in ("prim", "struct"):
                members.append(f"{t} {fname};")
            elif kind == "string":
                members.append(f'@default (value="")\n      string {fname};')
            elif kind == "bstring":
                members.append(f"string<{size + 8}> {fname};")
            elif kind in ("fixed", "structfixed"):
                alias = f"{t.replace('::', '__')}__{size}"
                typedefs.append(f"typedef {t} {alias}[{size}];")
                members.append(f"{alias} {fname};")
            elif kind in ("seq", "structseq"):
                members.append(f"sequence<{t}> {fname};")
            elif kind == "bseq":
                members.append(f"sequence<{t}, {size}> {fname};")
            else:
                members.append(f"sequence<string> {fname};")
        if not members:
            members.append("uint8 structure_needs_at_least_one_member;")
        body = "\n      ".join(members)
        texts[name] = (f'// generated from rosidl_adapter/resource/msg.idl.em\n#include "{pkg}/msg/Other.idl"\n\n'
                       f"module {pkg} {{\n  module msg {{\n    {' '.join(typedefs)}\n"
                       f"    module {short}_Constants {{\n      const uint8 LIMIT = 0x10;\n"
                       f'      const string NAME = "a \\"quoted\\" // name";\n    }};\n'
                       f'    @verbatim (language="comment", text=\n      "A type." "\\n" "(generated)")\n'
                       f"    struct {short} {{\n      {body}\n    }};\n  }};\n}};\n")
    names = list(texts)
    blocks = [texts[names[-1]]] + [f"{SEP}\nIDL: {n.split('/')[0]}/msg/{n.split('/')[1]}\n{texts[n]}"
                                   for n in reversed(names[:-1])]
    return "".join(blocks)


def _store(types: dict):
    store = typesys.get_typestore(typesys.Stores.EMPTY)
    for name, text in _texts(types).items():
        pkg, short = name.split("/")
        store.register(typesys.get_types_from_msg(text, f"{pkg}/msg/{short}"))
    return store


_INT_RANGE = {"i1": 7, "u1": 8, "i2": 15, "u2": 16, "i4": 31, "u4": 32, "i8": 63, "u8": 64}


def _prim_values(data, typ: str, n: int | None):
    code = PRIMS[typ]
    count = 1 if n is None else n
    if code == "?":
        values = [data.draw(st.booleans()) for _ in range(count)]
    elif code[0] == "f":
        width = 32 if code == "f4" else 64
        values = [data.draw(st.floats(width=width, allow_nan=False)) for _ in range(count)]
    else:
        bits = _INT_RANGE[code]
        lo, hi = (-(2 ** bits), 2 ** bits - 1) if code[0] == "i" else (0, 2 ** bits - 1)
        values = [data.draw(st.integers(lo, hi)) for _ in range(count)]
    if n is None:
        return values[0]
    # rosbags' byte is int8: its arrays take the same bytes as int8
    if typ == "byte":
        return np.array(values, dtype=np.uint8).view(np.int8)
    return np.array(values, dtype=np.dtype(code)) if code != "?" else np.array(values, dtype=bool)


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12)


def _value(data, store, types: dict, name: str):
    """A random message of type ``name`` built from rosbags' classes."""
    cls = store.types[f"{name.split('/')[0]}/msg/{name.split('/')[1]}"]
    kwargs = {}
    for kind, typ, fname, size in types[name]:
        if kind == "prim":
            v = _prim_values(data, typ, None)
            kwargs[fname] = v - 256 if typ == "byte" and v > 127 else v
        elif kind in ("string", "bstring"):
            kwargs[fname] = data.draw(_TEXT if kind == "string" else st.text(st.characters(codec="ascii",
                                                                                          exclude_characters="\0"),
                                                                             max_size=size + 8))
        elif kind == "fixed":
            kwargs[fname] = _prim_values(data, typ, size)
        elif kind in ("seq", "bseq"):
            kwargs[fname] = _prim_values(data, typ, data.draw(st.integers(0, 5 if kind == "seq" else size)))
        elif kind == "strseq":
            kwargs[fname] = data.draw(st.lists(_TEXT, max_size=3))
        elif kind == "struct":
            kwargs[fname] = _value(data, store, types, typ)
        elif kind == "structseq":
            kwargs[fname] = [_value(data, store, types, typ) for _ in range(data.draw(st.integers(0, 3)))]
        else:
            kwargs[fname] = [_value(data, store, types, typ) for _ in range(size)]
    return cls(**kwargs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(families(), st.data(), st.booleans())
def test_random_types_equal_rosbags(types, data, little_endian) -> None:
    store = _store(types)
    main, text = _definition(types)
    typename = f"{main.split('/')[0]}/msg/{main.split('/')[1]}"
    messages = [_value(data, store, types, main) for _ in range(data.draw(st.integers(1, 4)))]
    raw = [bytes(store.serialize_cdr(m, typename, little_endian=little_endian)) for m in messages]
    ours = decode_messages(typename, text, raw, encoding="cdr", schema_encoding="ros2msg")
    assert len(ours) == len(raw)
    for i, r in enumerate(raw):
        assert_same_cdr(ours[i], store.deserialize_cdr(r, typename), f"msg[{i}]")
    # The same types written as IDL decode the same bytes to the same values.
    idl = decode_messages(typename, _idl_definition(types), raw, encoding="cdr", schema_encoding="ros2idl")
    assert idl[0].constants == {"LIMIT": 16, "NAME": 'a "quoted" // name'}
    for i, r in enumerate(raw):
        assert_same_cdr(idl[i], store.deserialize_cdr(r, typename), f"msg[{i}] (IDL)")


@pytest.mark.parametrize("little_endian", [True, False])
def test_regression_last_padded_struct_array_reads_the_same_by_attribute_and_by_name(little_endian):
    """Hypothesis found it (test_random_types_equal_rosbags): a sequence of structs whose CDR stride has
    trailing padding (float32, bool, bool: 6 bytes, stride 8) in the last message of a run lacks the last
    element's padding in the buffer, so each access copies it; msg.f3 and msg["f3"] are then equal copies,
    not one view, and the comparator took that for a mismatch. Values equal rosbags' either way."""
    types = {"fam/T0": [("prim", "float32", "f0", 1), ("prim", "bool", "f1", 1), ("prim", "bool", "f2", 1)],
             "fam/T3": [("prim", "bool", "f0", 1), ("structseq", "fam/T0", "f3", 1)]}
    store = _store(types)
    main, text = _definition(types)
    typename = f"{main.split('/')[0]}/msg/{main.split('/')[1]}"
    t0, t3 = store.types["fam/msg/T0"], store.types[typename]
    messages = [t3(bool(n % 2), [t0(np.float32(k + 0.5), True, bool(k % 2)) for k in range(n)]) for n in (0, 2, 3)]
    raw = [bytes(store.serialize_cdr(m, typename, little_endian=little_endian)) for m in messages]
    ours = decode_messages(typename, text, raw, encoding="cdr", schema_encoding="ros2msg")
    last = ours[2].f3
    assert [e.f0 for e in last] == [0.5, 1.5, 2.5] and [e.f2 for e in last] == [False, True, False]
    assert ours[2]["f3"] is last  # (the column keeps the list it built last)
    assert ours[1].f3 is not last  # another message's list, then this one's again: built again, a copy
    assert last._src.array.ctypes.data != ours[2]["f3"]._src.array.ctypes.data and ours[2]["f3"] == last
    for i, r in enumerate(raw):
        assert_same_cdr(ours[i], store.deserialize_cdr(r, typename), f"msg[{i}]")


# -- layout rules ------------------------------------------------------------------

LIVOX = ("uint32 offset_time\nfloat32 x\nfloat32 y\nfloat32 z\nuint8 reflectivity\nuint8 tag\nuint8 line\n")
CLOUD = f"std_msgs/Header header\nuint8 lidar_id\nCustomPoint[] points\n{SEP}\nMSG: livox/CustomPoint\n{LIVOX}"


def _livox_message(points: np.ndarray, frame: str = "livox", big: bool = False) -> bytes:
    """A Livox-like cloud in CDR written by hand: header, u8, then the points at a 20-byte stride."""
    e = ">" if big else "<"
    body = bytearray(struct.pack(f"{e}iI", 7, 9))
    name = frame.encode() + b"\0"
    body += struct.pack(f"{e}I", len(name)) + name
    body += bytes([3])
    body += bytes(-len(body) % 4) + struct.pack(f"{e}I", len(points))
    for k, p in enumerate(points):
        body += struct.pack(f"{e}I3fBBB", *p)
        if k + 1 < len(points):
            body += b"\0"  # padding to the next point's u32: none after the last
    return (b"\0\0" if big else b"\0\1") + b"\0\0" + bytes(body)


def test_livox_points_are_zero_copy_views_with_a_20_byte_stride() -> None:
    points = [(k, k * 0.5, -k, 2.0, k % 256, 1, k % 6) for k in range(5)]
    raw = [_livox_message(points), _livox_message(points[:2]), _livox_message([])]
    layout = layout_for("livox/CustomMsg", CLOUD, encoding="cdr", schema_encoding="ros2msg")
    slot = next(s for s in layout.slots if s.kind == "array")
    assert slot.dtype.itemsize == 20 and slot.tail == 1
    cloud = decode_messages("livox/CustomMsg", CLOUD, raw, encoding="cdr", schema_encoding="ros2msg")
    pts = cloud["points"]
    assert isinstance(pts, Ragged) and pts.counts.tolist() == [5, 2, 0]
    first = pts[0]
    assert first.dtype.itemsize == 20 and first["x"].tolist() == [k * 0.5 for k in range(5)]
    assert first["line"].tolist() == [k % 6 for k in range(5)]
    assert first.base is not None  # a view into the messages' buffer, not a copy
    assert pts.values["offset_time"].tolist() == [0, 1, 2, 3, 4, 0, 1]
    assert cloud[0].header.frame_id == "livox" and cloud[1].lidar_id == 3
    # nested types keep their names and time values their arithmetic, as in a Bag's messages (they were a
    # class named "message" with no _type outside a Bag)
    stamp = cloud[0].header.stamp
    assert stamp._type == "builtin_interfaces/Time" and stamp.to_nsec() == 7 * 10**9 + 9
    assert cloud[0].header._type == "std_msgs/Header" and cloud[0].points[0]._type == "livox/CustomPoint"
    # the buffer ends with the last point, without its padding byte: that element is read from a padded copy
    last = decode_messages("livox/CustomMsg", CLOUD, [_livox_message(points[:2]), _livox_message(points)],
                           encoding="cdr", schema_encoding="ros2msg")["points"]
    assert isinstance(last, Ragged) and last[1]["offset_time"].tolist() == [0, 1, 2, 3, 4]
    assert last.values["line"].tolist() == [0, 1] + [k % 6 for k in range(5)]
    dense = decode_messages("livox/CustomMsg", CLOUD, [_livox_message(points)] * 2, encoding="cdr",
                            schema_encoding="ros2msg")["points"]  # same counts: one dense (N, k) array
    assert dense.shape == (2, 5) and dense["x"][1].tolist() == [k * 0.5 for k in range(5)]
    big = decode_messages("livox/CustomMsg", CLOUD, [_livox_message(points, big=True)], encoding="cdr",
                          schema_encoding="ros2msg")
    assert big["points"][0]["y"].tolist() == [-k for k in range(5)] and big["points"][0].dtype["y"].byteorder == ">"


def test_strings_drop_their_nul_and_a_zero_length_is_empty() -> None:
    text = "string a\nstring b\nuint8 c\n"
    raw = b"\0\1\0\0" + struct.pack("<I", 0) + struct.pack("<I", 3) + b"hi\0" + b"\x05"
    out = decode_messages("p/S", text, [raw], encoding="cdr", schema_encoding="ros2msg")
    assert out[0].a == "" and out[0].b == "hi" and out[0].c == 5


def test_empty_struct_takes_one_byte() -> None:
    out = decode_messages("std_msgs/msg/Empty", "", [b"\0\1\0\0\0", b"\0\1\0\0\0"], encoding="cdr",
                          schema_encoding="ros2msg")
    assert len(out) == 2 and out.fields == []
    text = f"Empty e\nuint8 x\n{SEP}\nMSG: p/Empty\n"
    out = decode_messages("p/Outer", text, [b"\0\1\0\0\0\x07"], encoding="cdr", schema_encoding="ros2msg")
    assert out[0].x == 7


def test_padding_known_at_compile_time_is_one_copy() -> None:
    """Imu: the fixed parts after frame_id are one ALIGN then one copy (padding kept as a row gap)."""
    text = ("std_msgs/Header header\ngeometry_msgs/Quaternion orientation\nfloat64[9] orientation_covariance\n"
            f"{SEP}\nMSG: geometry_msgs/Quaternion\nfloat64 x\nfloat64 y\nfloat64 z\nfloat64 w\n")
    layout = layout_for("sensor_msgs/msg/Imu", text, encoding="cdr", schema_encoding="ros2msg")
    codes = layout.ops[:, 0].tolist()
    assert codes == [1, 2, 5, 1, 0]  # stamp, frame_id, align 8, the rest, end
    assert layout.min_size == 4 + 8 + 4 + 32 + 72


# -- hostile input -------------------------------------------------------------------

TEXT = "string s\nfloat64[] v\nuint8 k\n"


def _decode(raw: list[bytes]):
    return decode_messages("p/H", TEXT, raw, encoding="cdr", schema_encoding="ros2msg")


def _good() -> bytes:
    # string "a" (length 2 with its NUL), 2 bytes of padding, count 1, 4 bytes of padding, one float64, k
    return (b"\0\1\0\0" + struct.pack("<I", 2) + b"a\0" + b"\0\0" + struct.pack("<I", 1) + bytes(4) +
            struct.pack("<d", 1.5) + b"\x09")


def test_good_message_decodes() -> None:
    out = _decode([_good()])
    assert out[0].s == "a" and out[0].v.tolist() == [1.5] and out[0].k == 9


@pytest.mark.parametrize("raw, index, what", [
    (b"\0\1", 0, "fewer than"),                                             # shorter than the header
    (b"\0\1\0\0" + struct.pack("<I", 0xFFFFFFFF) + b"abc" + bytes(9), 0, "shorter"),  # huge string length
    (b"\0\1\0\0" + struct.pack("<I", 1) + b"\0" + b"\0\0\0" + struct.pack("<I", 0x7FFFFFFF), 0, "shorter"),
    (b"\0\1\0\0" + struct.pack("<I", 1) + b"\0" + b"\0\0\0" + struct.pack("<I", 0xFFFFFFFF) + bytes(8), 0,
     "shorter"),                                                            # a count whose bytes overflow
    (b"\0\1\0\0" + struct.pack("<I", 9) + b"12345678\0", 0, "shorter"),      # alignment past the end
])
def test_bad_lengths_are_decode_errors(raw, index, what) -> None:
    with pytest.raises(DecodeError, match=what) as info:
        _decode([_good(), raw][1:] if index == 0 else [_good(), raw])
    assert info.value.index == index


def test_bad_message_is_named_by_its_index() -> None:
    with pytest.raises(DecodeError) as info:
        _decode([_good(), _good(), _good()[:-3]])
    assert info.value.index == 2


def test_trailing_padding_is_allowed_up_to_three_bytes() -> None:
    assert len(_decode([_good() + b"\0\0\0"])) == 1
    with pytest.raises(DecodeError, match="left over"):
        _decode([_good() + b"\0\0\0\0"])


def test_other_representations_are_unsupported() -> None:
    for rep in (b"\0\x07", b"\0\x06", b"\0\x0b", b"\0\x03"):
        with pytest.raises(UnsupportedError, match=f"0x00{rep[1]:02x}") as info:
            _decode([rep + _good()[2:]])
        assert "no CDR encapsulation header" not in str(info.value)  # a real id: XCDR2, PL_CDR
    with pytest.raises(UnsupportedError, match=r"0x0b00 \(unknown\); .* only; its first bytes are no CDR "
                                               r"encapsulation header: .*ROS 1's format"):
        _decode([b"\x0b\0" + _good()[2:]])  # ROS 1 bytes: a u32 length of 11 where the header would be


def test_a_message_that_is_a_zstd_frame_says_it_is_compressed_per_message() -> None:
    """A recording compressed per message where nothing read says so (a split MCAP recording without its
    metadata.yaml, a truncated file that lost its rosbag2 metadata record) was said to be ROS 1 bytes (QA)."""
    import zstandard

    with pytest.raises(UnsupportedError, match=r"0x28b5 \(unknown\); .* only; its bytes are a zstd frame: the "
                                               r"recording is compressed per message \(rosbag2's MESSAGE mode\)"):
        _decode([zstandard.ZstdCompressor().compress(_good())])


def test_mixed_byte_orders_are_a_decode_error() -> None:
    big = b"\0\0" + _good()[2:]  # the header says big-endian: its lengths then read as huge
    with pytest.raises(DecodeError, match=r"CDR_BE, unlike most of the topic's messages \(CDR_LE\)") as info:
        _decode([_good(), big])
    assert info.value.index == 1  # a tie: the first message's order


def test_the_odd_byte_order_out_is_named_even_when_first() -> None:
    """The topic's order is its messages' majority: a damaged first header names the first message, not the
    second (what taking the first message's order did)."""
    big = b"\0\0" + _good()[2:]
    with pytest.raises(DecodeError, match=r"CDR_BE, unlike most of the topic's messages \(CDR_LE\)") as info:
        _decode([big, _good(), _good()])
    assert info.value.index == 0
    proper = (b"\0\0\0\0" + struct.pack(">I", 2) + b"a\0" + b"\0\0" + struct.pack(">I", 1) + bytes(4) +
              struct.pack(">d", 1.5) + b"\x09")  # _good() in big-endian
    assert _decode([proper, proper])[1].v.tolist() == [1.5]
    with pytest.raises(DecodeError, match=r"CDR_LE, unlike most of the topic's messages \(CDR_BE\)") as info:
        _decode([_good(), proper, proper])
    assert info.value.index == 0


@pytest.mark.parametrize("n", [3, 16, 17, 40])
def test_byte_orders_are_voted_alike_in_short_and_long_runs(n) -> None:
    """Up to 16 messages vote in Python, more with NumPy: the same majority, ties to the first message's."""
    big = b"\0\0" + _good()[2:]
    with pytest.raises(DecodeError, match=r"CDR_BE, unlike most") as info:
        _decode([big] + [_good()] * (n - 1))
    assert info.value.index == 0
    half = n // 2
    with pytest.raises(DecodeError, match=r"CDR_BE, unlike most") as info:  # a tie (n even): the first's order
        _decode([_good()] * (n - half) + [big] * half)
    assert info.value.index == n - half
    with pytest.raises(DecodeError, match=r"CDR_LE, unlike most") as info:  # big-endian the most
        _decode([_good()] + [b"\0\0\0\0" + struct.pack(">I", 2) + b"a\0" + b"\0\0" + struct.pack(">I", 1) +
                             bytes(4) + struct.pack(">d", 1.5) + b"\x09"] * (n - 1))
    assert info.value.index == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 63), st.integers(0, 255))
def test_random_damage_raises_only_fastbag_errors(tail, at, byte) -> None:
    raw = bytearray(_good() + tail)
    raw[at % len(raw)] = byte
    try:
        out = _decode([bytes(raw)])
    except FastbagError:
        return
    assert len(out) == 1 and len(out[0].v) <= len(raw) // 8


NESTED = f"string s\nItem[] items\nItem[2] pair\nuint16 k\n{SEP}\nMSG: p/Item\nstring name\nint32[] values\nEmpty e\n" \
         f"{SEP}\nMSG: p/Empty\n"


def _nested_good() -> bytes:
    store = typesys.get_typestore(typesys.Stores.EMPTY)
    store.register(typesys.get_types_from_msg("", "p/msg/Empty"))
    store.register(typesys.get_types_from_msg("string name\nint32[] values\np/msg/Empty e\n", "p/msg/Item"))
    store.register(typesys.get_types_from_msg("string s\np/msg/Item[] items\np/msg/Item[2] pair\nuint16 k\n",
                                              "p/msg/Top"))
    T = store.types
    item = [T["p/msg/Item"](n, np.arange(k, dtype=np.int32), T["p/msg/Empty"]()) for n, k in (("ab", 2), ("", 0))]
    return bytes(store.serialize_cdr(T["p/msg/Top"]("top", item, item, 7), "p/msg/Top"))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]), st.integers(0, 12))
def test_random_damage_to_nested_messages_raises_only_fastbag_errors(at, byte, cut) -> None:
    """Counts of struct sequences, string lengths and padding overwritten or cut short: a DecodeError for
    message 1 (message 0 stays good), or values bounded by the bytes; never another exception."""
    good = _nested_good()
    raw = bytearray(good)
    raw[at % len(raw)] = byte
    raw = raw[:len(raw) - cut]
    try:
        out = decode_messages("p/msg/Top", NESTED, [good, bytes(raw)], encoding="cdr", schema_encoding="ros2msg")
    except DecodeError as exc:
        assert exc.index == 1
        return
    except FastbagError:
        return
    assert out[0].s == "top" and out[0].items[0].name == "ab" and len(out[1].items) <= len(raw)


def test_decode_messages_reads_ros1_too() -> None:
    """The helper is encoding-neutral: ROS1 bytes with a ros1msg definition (its defaults)."""
    raw = [struct.pack("<I", 5) + b"hello", struct.pack("<I", 0)]
    out = decode_messages("std_msgs/String", "string data\n", raw)
    assert out["data"].tolist() == ["hello", ""] and out[0].data == "hello"
    assert len(decode_messages("std_msgs/String", "string data\n", [])) == 0
