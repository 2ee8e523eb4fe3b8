"""ROS2 definitions: ``ros2msg`` and ``ros2idl`` texts into the same MsgDef/TypeRegistry as ROS1.

rosbags' own parsers (``get_types_from_msg``, ``get_types_from_idl``) are the
oracle for what a text means; the real schemas are covered by the census in
test_cdr_real.py.
"""

from __future__ import annotations

import struct

import pytest
from conftest import DATA

from fastbag.errors import DefinitionError, UnsupportedError
from fastbag.msg import decode_messages
from fastbag.msg.layout import layout_for
from fastbag.msg.msgdef import Field
from fastbag.msg.ros2defs import normalize_ros2_name, parse_ros2idl, parse_ros2msg

typesys = pytest.importorskip("rosbags.typesys", reason="rosbags is the oracle")
SEP = "=" * 80

FEATURES = f"""# A comment, and a field whose default holds a '#'
std_msgs/Header header
Header other_header   # a bare Header is std_msgs/Header
string name "a # not a comment"
string<=10 bounded 'hi'
int32[] values [1, 2, 3]
float64[<=4] bounded_values
uint8[3] fixed
byte b 7
char c
wstring wide
geometry_msgs/msg/Point point
int8 LOW=-3
uint8 HEX=0x1F
string GREETING="hello # world"
bool FLAG=true
float32 RATIO=0.5
{SEP}
MSG: std_msgs/msg/Header
builtin_interfaces/Time stamp
string frame_id
{SEP}
MSG: geometry_msgs/Point
float64 x 1.0
float64 y
float64 z
"""


def test_ros2msg_features() -> None:
    reg = parse_ros2msg("demo_msgs/msg/Features", FEATURES)
    assert reg.main == "demo_msgs/Features"
    fields = {f.name: f for f in reg["demo_msgs/Features"].fields}
    assert fields["header"].type == fields["other_header"].type == "std_msgs/Header"
    assert fields["name"] == Field("name", "string", None, "string")
    assert fields["bounded"].type == "string" and fields["bounded"].array is None
    assert fields["values"].array == -1 and fields["bounded_values"].array == -1
    assert fields["fixed"].array == 3
    assert fields["b"].type == fields["c"].type == "uint8"  # ROS2: byte is an octet, char a uint8
    assert fields["wide"].type == "wstring"
    assert fields["point"].type == "geometry_msgs/Point"
    constants = {c.name: c.value for c in reg["demo_msgs/Features"].constants}
    assert constants == {"LOW": -3, "HEX": 31, "GREETING": "hello # world", "FLAG": True, "RATIO": 0.5}
    # builtin_interfaces/Time was left out of the text: supplied as ROS2 defines it
    assert [(f.name, f.type) for f in reg["builtin_interfaces/Time"].fields] == [("sec", "int32"),
                                                                                ("nanosec", "uint32")]


def test_ros2msg_agrees_with_rosbags() -> None:
    text = FEATURES.replace("wstring wide\n", "")
    ours = parse_ros2msg("demo_msgs/msg/Features", text)["demo_msgs/Features"]
    main = text.split(SEP)[0]
    theirs = typesys.get_types_from_msg(main, "demo_msgs/msg/Features")["demo_msgs/msg/Features"]
    assert [f.name for f in ours.fields] == [name for name, _ in theirs[1]]
    assert {c.name: c.value for c in ours.constants} == {name: value for name, _, value in theirs[0]}


def test_names_meet_whichever_way_they_are_written() -> None:
    assert normalize_ros2_name("sensor_msgs/msg/Imu") == normalize_ros2_name("sensor_msgs::msg::Imu") == \
        "sensor_msgs/Imu"
    text = f"geometry_msgs/msg/Vector3 a\ngeometry_msgs/Vector3 b\n{SEP}\nMSG: geometry_msgs/msg/Vector3\n" \
           "float64 x\nfloat64 y\nfloat64 z\n"
    reg = parse_ros2msg("p/msg/T", text)
    assert [f.type for f in reg["p/T"].fields] == ["geometry_msgs/Vector3"] * 2
    assert layout_for("p/msg/T", text, encoding="cdr", schema_encoding="ros2msg").min_size == 4 + 48


def test_a_bare_header_is_the_packages_own_where_the_text_defines_it(tmp_path) -> None:
    """ROS 2 builds a bare ``Header`` as the message's own package's; fastbag keeps ROS 1's std_msgs/Header
    (converted texts) unless the text defines ``pkg/Header``. A file mcap_ros2 wrote with such a text was a
    DecodeError (its qa/Header read as std_msgs/Header)."""
    text = f"Header h\nint8 z\n{SEP}\nMSG: qa/Header\nint32 a\nstring b\n"
    assert [(f.name, f.type) for f in parse_ros2msg("qa/msg/Main", text)["qa/Main"].fields] == [
        ("h", "qa/Header"), ("z", "int8")]
    assert parse_ros2msg("qa/msg/Main", "Header h\n")["qa/Main"].fields[0].type == "std_msgs/Header"
    writer_module = pytest.importorskip("mcap_ros2.writer", reason="mcap_ros2 writes the file")
    import fastbag

    path = tmp_path / "own_header.mcap"
    with path.open("wb") as f:
        writer = writer_module.Writer(f)
        schema = writer.register_msgdef("qa/msg/Main", text)
        for k in range(3):
            writer.write_message("/t", schema, {"h": {"a": 7 + k, "b": "xyz"[:k + 1]}, "z": k}, log_time=1000 + k)
        writer.finish()
    with fastbag.open(path) as bag:
        arr = bag.read("/t")
        assert arr["h.a"].tolist() == [7, 8, 9] and arr["h.b"].tolist() == ["x", "xy", "xyz"]
        assert [(m.msg.h.a, m.msg.h.b, m.msg.z) for m in bag.messages()] == [(7, "x", 0), (8, "xy", 1), (9, "xyz", 2)]


def test_repeated_dependency_is_read_once_when_it_agrees() -> None:
    block = f"{SEP}\nMSG: p/Inner\nint32 v\n"
    reg = parse_ros2msg("p/msg/Outer", "p/Inner a\n" + block + block)
    assert [f.name for f in reg["p/Inner"].fields] == ["v"]
    with pytest.raises(DefinitionError, match="twice, differently"):
        parse_ros2msg("p/msg/Outer", "p/Inner a\n" + block + f"{SEP}\nMSG: p/Inner\nint64 v\n")


@pytest.mark.parametrize("text, what", [
    ("int32", "expected 'type name'"),
    ("int32 9bad", "not a valid field name"),
    ("int32 a\nint32 a", "duplicate field"),
    ("p/Missing m", "does not include it"),
    ("int32<=3 a", "cannot be bounded"),
    ("float64 X=abc", "not a float64 value"),
])
def test_ros2msg_errors(text, what) -> None:
    with pytest.raises(DefinitionError, match=what):
        parse_ros2msg("p/msg/T", text)


def test_wstring_and_unknown_encodings_are_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="wstring"):
        layout_for("p/msg/W", "wstring w\n", encoding="cdr", schema_encoding="ros2msg")
    with pytest.raises(UnsupportedError, match="'protobuf'"):
        layout_for("p/msg/W", "int32 a\n", encoding="protobuf", schema_encoding="ros2msg")
    with pytest.raises(UnsupportedError, match="'jsonschema'"):
        layout_for("p/msg/W", "int32 a\n", encoding="cdr", schema_encoding="jsonschema")


# -- IDL ---------------------------------------------------------------------------------

HEADER_IDL = """// generated from rosidl_adapter/resource/msg.idl.em
// with input from std_msgs/msg/Header.msg
// generated code does not contain a copyright notice

#include "builtin_interfaces/msg/Time.idl"

module std_msgs {
  module msg {
    @verbatim (language="comment", text=
      "Standard metadata for higher-level stamped data types." "\\n"
      "This is generally used to communicate timestamped data")
    struct Header {
      @verbatim (language="comment", text=
        "Two-integer timestamp that is expressed as seconds and nanoseconds.")
      builtin_interfaces::msg::Time stamp;

      @verbatim (language="comment", text=
        "Transform frame with which this data is associated.")
      string frame_id;
    };
  };
};
"""

FIX_IDL = """// generated from rosidl_adapter/resource/msg.idl.em
#include "std_msgs/msg/Header.idl"

module demo_msgs {
  module msg {
    typedef double double__9[9];
    module Fix_Constants {
      @verbatim (language="comment", text="Unable to fix position.")
      const int8 STATUS_NO_FIX = -1;
      const uint16 SERVICE_GPS = 1;
      const string SOURCE = "gps";
    };
    enum Mode { MODE_A, MODE_B };
    struct Fix {
      std_msgs::msg::Header header;
      @default (value=0)
      int8 status;
      unsigned long long counter;
      long long offset;
      unsigned short flags;
      Mode mode;
      double__9 position_covariance;
      sequence<float, 4> samples;
      sequence<std_msgs::msg::Header> history;
      string<32> label;
      char tag;
      octet raw[2];
    };
  };
};
"""

TIME_IDL = """module builtin_interfaces { module msg {
  struct Time { int32 sec; uint32 nanosec; };
}; };
"""


def _rosbag2_idl() -> str:
    """As rosbag2 stores an IDL definition: the main file, then each dependency after 'IDL: pkg/msg/Type'."""
    return f"{FIX_IDL}{SEP}\nIDL: std_msgs/msg/Header\n{HEADER_IDL}{SEP}\nIDL: builtin_interfaces/msg/Time\n{TIME_IDL}"


def test_ros2idl_as_rosbag2_stores_it() -> None:
    reg = parse_ros2idl("demo_msgs/msg/Fix", _rosbag2_idl())
    fix = reg["demo_msgs/Fix"]
    assert [(f.name, f.type, f.array) for f in fix.fields] == [
        ("header", "std_msgs/Header", None), ("status", "int8", None), ("counter", "uint64", None),
        ("offset", "int64", None), ("flags", "uint16", None), ("mode", "uint32", None),
        ("position_covariance", "float64", 9), ("samples", "float32", -1), ("history", "std_msgs/Header", -1),
        ("label", "string", None), ("tag", "uint8", None), ("raw", "uint8", 2)]
    assert {c.name: c.value for c in fix.constants} == {"STATUS_NO_FIX": -1, "SERVICE_GPS": 1, "SOURCE": "gps"}
    assert [f.name for f in reg["std_msgs/Header"].fields] == ["stamp", "frame_id"]


def test_ros2idl_agrees_with_rosbags() -> None:
    text = f"{TIME_IDL}\n{HEADER_IDL}\n{FIX_IDL}".replace('#include "std_msgs/msg/Header.idl"', "").replace(
        '#include "builtin_interfaces/msg/Time.idl"', "").replace("Mode mode;", "uint32 mode;").replace(
        "enum Mode { MODE_A, MODE_B };", "")
    theirs = typesys.get_types_from_idl(text)["demo_msgs/msg/Fix"]
    ours = parse_ros2idl("demo_msgs/msg/Fix", text)["demo_msgs/Fix"]
    assert [f.name for f in ours.fields] == [name for name, _ in theirs[1]]
    assert {c.name: c.value for c in ours.constants} == {name: value for name, _, value in theirs[0]}


def test_ros2idl_decodes_what_ros2msg_decodes() -> None:
    msg = ("std_msgs/Header header\nint8 status\nuint64 counter\nint64 offset\nuint16 flags\nuint32 mode\n"
           "float64[9] position_covariance\nfloat32[<=4] samples\nstd_msgs/Header[] history\nstring<=32 label\n"
           "char tag\nbyte[2] raw\n")
    store = typesys.get_typestore(typesys.Stores.LATEST)
    store.register(typesys.get_types_from_msg(msg, "demo_msgs/msg/Fix"))
    Fix = store.types["demo_msgs/msg/Fix"]
    Header, Time = store.types["std_msgs/msg/Header"], store.types["builtin_interfaces/msg/Time"]
    import numpy as np
    value = Fix(Header(Time(5, 6), "map"), -1, 2**63, -2, 3, 1, np.arange(9.0), np.array([1.5], np.float32),
                [Header(Time(1, 2), "a"), Header(Time(3, 4), "bc")], "label", 65, np.array([1, 2], np.int8))
    raw = [bytes(store.serialize_cdr(value, "demo_msgs/msg/Fix"))]
    from cdr_oracle import assert_same_cdr
    for text, schema in ((_rosbag2_idl(), "ros2idl"), (msg, "ros2msg")):
        out = decode_messages("demo_msgs/msg/Fix", text, raw, encoding="cdr", schema_encoding=schema)
        assert_same_cdr(out[0], store.deserialize_cdr(raw[0], "demo_msgs/msg/Fix"))
        assert out[0].history[1].frame_id == "bc" and out["position_covariance"][0, 8] == 8.0


@pytest.mark.parametrize("text, what", [
    ("module p { module msg { struct T { int32 a; }; };", "expected"),
    ("module p { module msg { struct T { int32 a[2][3]; }; }; };", "multi-dimensional"),
    ("module p { module msg { struct Other { int32 a; }; }; };", "does not define it"),
    ("module p { module msg { struct T { p::msg::Missing m; }; }; };", "does not include it"),
])
def test_ros2idl_errors(text, what) -> None:
    with pytest.raises(DefinitionError, match=what):
        parse_ros2idl("p/msg/T", text)


# -- service events ------------------------------------------------------------------------

def test_service_event_from_its_service_text_equals_rosbags() -> None:
    """rosbag2 stores a service event topic's schema as the service's text (request --- response);
    mcap_ros2 cannot read it. The event type ROS2 publishes, registered with rosbags, decodes the same bytes."""
    mcap_reader = pytest.importorskip("mcap.reader", reason="the mcap package is a test extra")
    path = DATA / "mcap" / "ros2__rosbag2__rosbag2_cpp__test__rosbag2_cpp__bags" / "only_services.mcap"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    with path.open("rb") as stream:
        found = [(s, m.data) for s, c, m in mcap_reader.make_reader(stream).iter_messages()
                 if s.name == "example_interfaces/srv/AddTwoInts_Event"]
    schema, raw = found[0][0], [data for _, data in found]
    assert schema.data.decode().split("\n")[2] == "---"
    ours = decode_messages(schema.name, schema.data.decode(), raw, encoding="cdr", schema_encoding="ros2msg")
    store = typesys.get_typestore(typesys.Stores.LATEST)
    # rosbags registers message types only: the same types, under msg names
    store.register(typesys.get_types_from_msg("int64 a\nint64 b\n", "example_interfaces/msg/AddTwoInts_Request"))
    store.register(typesys.get_types_from_msg("int64 sum\n", "example_interfaces/msg/AddTwoInts_Response"))
    store.register(typesys.get_types_from_msg(
        "service_msgs/msg/ServiceEventInfo info\nexample_interfaces/msg/AddTwoInts_Request[<=1] request\n"
        "example_interfaces/msg/AddTwoInts_Response[<=1] response\n", "example_interfaces/msg/AddTwoInts_Event"))
    from cdr_oracle import assert_same_cdr
    for i, data in enumerate(raw):
        assert_same_cdr(ours[i], store.deserialize_cdr(data, "example_interfaces/msg/AddTwoInts_Event"), f"[{i}]")
    assert [len(r) for r in ours["request"]] == [1, 0] * (len(raw) // 2)
    assert ours[0].request[0]["a"] + ours[0].request[0]["b"] == ours[1].response[0]["sum"]  # fixed structs: records


def test_header_struct_bytes() -> None:
    """A hand-written Header: padding after frame_id is counted from the byte after the encapsulation header."""
    raw = b"\0\1\0\0" + struct.pack("<iI", 1, 2) + struct.pack("<I", 2) + b"m\0" + b"\0\0" + struct.pack("<d", 0.25)
    text = f"std_msgs/Header header\nfloat64 v\n{SEP}\nMSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\n" \
           "string frame_id\n"
    out = decode_messages("p/msg/Stamped", text, [raw], encoding="cdr", schema_encoding="ros2msg")
    assert out[0].header.stamp["sec"] == 1 and out[0].header.frame_id == "m" and out[0].v == 0.25


_FRAGMENTS = ["int32 a\n", "string<=3 s\n", "p/Q q\n", "float64[<=2] v\n", "uint8 X=0x1\n", "# c\n", "=" * 80 + "\n",
              "MSG: p/Q\n", "MSG: p/msg/Q\n", "---\n", "wstring w\n", "bool B=true\n", "string S=\"x\"\n", "[", "<=",
              "module p { ", "module msg { ", "struct T { ", "struct Q { ", "}; ", "sequence<int32, 3> v; ",
              "double d[3]; ", "typedef double d3[3]; ", "const uint8 K = 0x10; ", "@default (value=1) ",
              "enum E { A, B }; ", "p::msg::Q q; ", "string<4> s; ", "long long x; ", "IDL: p/msg/Q\n"]


@pytest.mark.parametrize("schema", ["ros2msg", "ros2idl"])
def test_damaged_definitions_raise_only_definition_errors(schema) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=4)), max_size=14))
    def check(parts):
        try:
            layout_for("p/msg/T", "".join(parts), encoding="cdr", schema_encoding=schema)
        except (DefinitionError, UnsupportedError):
            pass

    check()
