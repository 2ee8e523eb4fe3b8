"""Message definitions of rosbag2 topics: stored in the bag, supplied by the user, or shipped with fastbag.

The shipped interface files (``fastbag/rosbag2/interfaces``) were written
from the published ROS 2 interface specifications; the oracle here is
rosbags' own Jazzy type store, built independently from the same
specifications: every shipped type must declare the same fields (names and
types, in order) and the same constants.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Nodetype

from conftest import DATA, NO_DATA, open_quietly
from fastbag.errors import DecodeError
from fastbag.rosbag2 import definitions
from fastbag.rosbag2.definitions import INTERFACES, compose, resolve_definition, shipped, split_type

SHIPPED = sorted(Path(INTERFACES).glob("*/msg/*.msg"))
PACKAGES = {"builtin_interfaces", "std_msgs", "geometry_msgs", "sensor_msgs", "nav_msgs", "tf2_msgs",
            "diagnostic_msgs", "visualization_msgs", "rcl_interfaces", "rosgraph_msgs", "shape_msgs", "stereo_msgs",
            "trajectory_msgs", "actionlib_msgs", "action_msgs", "unique_identifier_msgs", "lifecycle_msgs",
            "statistics_msgs", "service_msgs", "rosbag2_interfaces"}
STORE = get_typestore(Stores.ROS2_JAZZY)


def rosbags_type(node) -> str:
    kind, detail = node
    if kind == Nodetype.BASE:
        name, bound = detail
        return f"{name}<={bound}" if bound else name
    if kind == Nodetype.NAME:
        return detail
    sub, size = detail
    inner = rosbags_type(sub)
    if kind == Nodetype.ARRAY:
        return f"{inner}[{size}]"
    return f"{inner}[<={size}]" if size else f"{inner}[]"


def our_fields(pkg: str, text: str) -> tuple[list[tuple[str, str, object]], list[tuple[str, str]]]:
    """(constants, fields) of a shipped .msg, names resolved as ROS 2 does (bare names in the same package)."""
    constants, fields = [], []
    for line in text.splitlines():
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        m = re.fullmatch(r"(\S+)\s+([A-Za-z0-9_]+)\s*=\s*(.+)", code)
        if m:
            value = m.group(3).strip()
            constants.append((m.group(2), m.group(1), int(value) if re.fullmatch(r"-?\d+", value) else value))
            continue
        typ, name = code.split()[:2]
        base, suffix = re.fullmatch(r"([^\[]+)(\[.*\])?", typ).groups()
        if base not in definitions.PRIMITIVES and not re.fullmatch(r"string<=\d+", base):
            p, _, n = split_type(base)
            base = f"{p or pkg}/msg/{n}"
        fields.append((name, base + (suffix or "")))
    return constants, fields


def test_every_listed_package_is_shipped_whole():
    """Every type rosbags' Jazzy store knows in the listed packages is shipped, and nothing else."""
    theirs = {k for k in STORE.fielddefs if k.split("/")[0] in PACKAGES}
    ours = {f"{p.parts[-3]}/msg/{p.stem}" for p in SHIPPED}
    assert ours == theirs


@pytest.mark.parametrize("path", SHIPPED, ids=[f"{p.parts[-3]}/{p.stem}" for p in SHIPPED])
def test_shipped_definition_equals_the_specification(path):
    pkg, name = path.parts[-3], path.stem
    consts, fields = our_fields(pkg, path.read_text())
    their_consts, their_fields = STORE.fielddefs[f"{pkg}/msg/{name}"]
    their_fields = [(n, rosbags_type(t)) for n, t in their_fields]
    if their_fields == [("structure_needs_at_least_one_member", "uint8")]:
        their_fields = []  # rosbags' stand-in for a type without fields
    assert fields == their_fields
    assert sorted((n, t, v) for n, t, v in consts) == sorted((n, t, v) for n, t, v in their_consts)


def test_compose_follows_dependencies_across_packages():
    text = compose("nav_msgs/msg/Odometry", lambda p, n: shipped(p, "msg", n))
    blocks = [b.split("\n", 1)[0] for b in text.split("=" * 80 + "\nMSG: ")[1:]]
    assert blocks == ["std_msgs/Header", "geometry_msgs/PoseWithCovariance", "geometry_msgs/TwistWithCovariance",
                      "builtin_interfaces/Time", "geometry_msgs/Pose", "geometry_msgs/Twist", "geometry_msgs/Point",
                      "geometry_msgs/Quaternion", "geometry_msgs/Vector3"]
    assert text.startswith("# nav_msgs/msg/Odometry\nstd_msgs/Header header\n")


def test_user_definitions_come_first_then_stored_then_shipped():
    """The user's text for a type wins over the bag's (which can be wrong: the talker bag below), the bag's
    over the one fastbag ships."""
    stored = {"std_msgs/msg/String": ("ros2msg", "string data  # stored\n")}
    user = {"std_msgs/String": "string data  # mine\n", "my_pkg/msg/Thing": "std_msgs/String s\nint32 k\n"}
    assert resolve_definition("std_msgs/msg/String", stored, user)[1] == "string data  # mine\n"
    assert resolve_definition("std_msgs/msg/String", stored, {}) == (*stored["std_msgs/msg/String"], "")
    assert "# stored" not in resolve_definition("std_msgs/msg/String", {}, {})[1]  # the shipped one
    assert resolve_definition("std_msgs/msg/String", {}, user)[1] == "string data  # mine\n"
    encoding, text, _ = resolve_definition("my_pkg/msg/Thing", {}, user)
    assert encoding == "ros2msg" and text.endswith("MSG: std_msgs/String\nstring data  # mine\n")
    assert resolve_definition("nobody/msg/Nothing", {}, {}) == ("", "", "")


def test_a_composed_user_definition_gives_its_dependencies_too():
    """definitions={type: text} where the text is composed (the type's, then MSG: blocks, as Iron+ bags and
    MCAP store it) was taken for the main type's own text, and its dependencies went missing."""
    sep = "=" * 80
    composed = f"Inner inner\nint32 k\n{sep}\nMSG: my_pkg/Inner\nfloat64 x\n"
    encoding, text, note = resolve_definition("my_pkg/msg/Outer", {}, {"my_pkg/msg/Outer": composed})
    assert (encoding, note) == ("ros2msg", "") and text == composed
    # a type the user names outright wins over a block of another's
    encoding, text, _ = resolve_definition("my_pkg/msg/Outer", {}, {"my_pkg/msg/Outer": composed,
                                                                    "my_pkg/Inner": "float32 y\n"})
    assert text.endswith("MSG: my_pkg/Inner\nfloat32 y\n")
    # the main type known, a type it uses not: the note names that one
    encoding, text, note = resolve_definition("my_pkg/msg/Outer", {}, {"my_pkg/msg/Outer": "Inner inner\n"})
    assert (encoding, text) == ("", "") and "my_pkg/msg/Outer uses my_pkg/Inner, which no definition" in note


def test_an_incomplete_stored_definition_is_replaced_or_completed():
    """A stored text using a type it does not define (a writer cut it short): the shipped definition of the
    type where fastbag has one, else the stored text with the missing types from the shipped packages."""
    cut = {"rcl_interfaces/msg/ParameterEvent": ("ros2msg", "Parameter[] new_parameters"),
           "my_pkg/msg/Thing": ("ros2msg", "geometry_msgs/Point p\nint32 k\n"),
           "my_pkg/msg/Whole": ("ros2msg", "Point p\n" + "=" * 80 + "\nMSG: my_pkg/Point\nfloat32 x\n")}
    encoding, text, note = resolve_definition("rcl_interfaces/msg/ParameterEvent", cut, {})
    assert (encoding, text) == ("ros2msg", compose("rcl_interfaces/msg/ParameterEvent",
                                                   lambda p, n: shipped(p, "msg", n)))
    assert "incomplete (it uses rcl_interfaces/Parameter without defining it); using fastbag's shipped" in note
    encoding, text, note = resolve_definition("my_pkg/msg/Thing", cut, {})
    assert text.startswith("geometry_msgs/Point p\nint32 k") and "MSG: geometry_msgs/Point\n" in text
    assert "uses geometry_msgs/Point without defining it); completed from" in note
    assert resolve_definition("my_pkg/msg/Whole", cut, {}) == (*cut["my_pkg/msg/Whole"], "")  # complete
    assert resolve_definition("my_pkg/msg/Gone", {"my_pkg/msg/Gone": ("ros2msg", "Nowhere n\n")}, {}) == \
        ("ros2msg", "Nowhere n\n", "")  # nothing to complete it from: decoding it says what is missing


def test_service_event_definition_is_built_from_the_srv():
    _, text, _ = resolve_definition("std_srvs/srv/SetBool_Event", {}, {})
    main = text.split("=" * 80)[0]
    assert main == "service_msgs/ServiceEventInfo info\nSetBool_Request[<=1] request\nSetBool_Response[<=1] response\n"
    assert "MSG: std_srvs/SetBool_Request\n# std_srvs/srv/SetBool\nbool data\n" in text
    assert "MSG: std_srvs/SetBool_Response\nbool success\nstring message" in text
    assert "MSG: service_msgs/ServiceEventInfo" in text and "MSG: builtin_interfaces/Time" in text



def test_iron_bags_carry_their_own_definitions():
    path = DATA / "db3" / "MichaelGrupp__evo__test__data__tf_example"
    if not path.exists():
        pytest.skip(NO_DATA)
    import sqlite3

    con = sqlite3.connect(f"file:{path / 'tf_example.db3'}?mode=ro&immutable=1", uri=True)
    stored = dict(con.execute("SELECT topic_type, encoded_message_definition FROM message_definitions"))
    con.close()
    with open_quietly(path) as bag:
        connection = bag.topics["/tf"].connections[0]
        assert (connection.encoding, connection.schema_encoding) == ("cdr", "ros2msg")
        assert connection.definition == stored["tf2_msgs/msg/TFMessage"]


def test_humble_bags_get_shipped_definitions_and_unknown_types_stay_raw():
    path = DATA / "db3" / "ros2__rosbag2__rosbag2_py__resources__talker"
    if not path.exists():
        pytest.skip(NO_DATA)
    assert "message_definitions" not in _tables(path / "talker.db3")
    with open_quietly(path) as bag:
        log = bag.topics["/rosout"].connections[0]
        assert log.msgtype == "rcl_interfaces/msg/Log" and log.schema_encoding == "ros2msg"
        assert "uint8 FATAL=50" in log.definition and "MSG: builtin_interfaces/Time" in log.definition
    unknown = DATA / "db3" / "ros2__rosbag2__rosbag2_tests__resources__test_msgs_string"
    with open_quietly(unknown) as bag:
        connection = bag.topics["/test_msg_strings"].connections[0]
        assert connection.definition == "" and connection.schema_encoding == ""
        assert sum(1 for _ in bag.messages(raw=True)) == 10
        with pytest.raises(DecodeError, match="test_msgs/msg/Strings.*|definitions="):
            bag.read("/test_msg_strings")
    with open_quietly(unknown, definitions={"test_msgs/Strings": "string string_value\n"}) as bag:
        assert bag.topics["/test_msg_strings"].connections[0].definition == "string string_value\n"


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_an_empty_stored_definition_is_a_type_without_fields_and_rosbag2s_lost_one_is_none(tmp_path, storage):
    """An empty ``.msg`` is stored as the empty text in ``ros2msg`` (rosbags' writer; MCAP: an empty schema).
    sqlite3 storage read it as "no definition stored": the topic did not decode (QA), where MCAP read it.
    rosbag2 writes a type it could not find as encoding "" and no text: that one stays without a definition."""
    import sqlite3

    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_types_from_msg

    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg("", "qa_msgs/msg/Nothing"))
    folder = tmp_path / "empty"
    with Writer(folder, version=9, storage_plugin=StoragePlugin[storage.upper()]) as writer:
        empty = writer.add_connection("/empty", "qa_msgs/msg/Nothing", typestore=store)
        nothing = store.serialize_cdr(store.types["qa_msgs/msg/Nothing"](), "qa_msgs/msg/Nothing")
        for k in range(3):
            writer.write(empty, 1000 + k, nothing)
    with open_quietly(folder) as bag:
        assert bag.topics["/empty"].connections[0].schema_encoding == "ros2msg"
        arr = bag.read("/empty")
        assert arr.time.tolist() == [1000, 1001, 1002] and arr.fields == []
        assert [m.msg._fields for m in bag.messages()] == [(), (), ()]
    if storage == "sqlite3":  # as rosbag2 writes a type it could not find
        db = next(folder.glob("*.db3"))
        con = sqlite3.connect(db)
        con.execute("UPDATE message_definitions SET encoding = '' WHERE topic_type = 'qa_msgs/msg/Nothing'")
        con.commit()
        con.close()
        with open_quietly(folder) as bag:
            assert bag.topics["/empty"].connections[0].schema_encoding == ""
            with pytest.raises(DecodeError, match="qa_msgs/msg/Nothing"):
                bag.read("/empty")


def _tables(path: Path) -> set[str]:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def test_service_event_topics_are_readable():
    path = DATA / "mcap" / "ros2__rosbag2__rosbag2_cpp__test__rosbag2_cpp__bags" / "topics_and_services.db3"
    if not path.exists():
        pytest.skip(NO_DATA)
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    expected = con.execute("SELECT m.timestamp, m.data FROM messages m JOIN topics t ON t.id = m.topic_id "
                           "WHERE t.name = '/add_two_ints/_service_event' ORDER BY m.timestamp, m.id").fetchall()
    con.close()
    with open_quietly(path) as bag:
        info = bag.topics["/add_two_ints/_service_event"]
        assert info.msgtype == "example_interfaces/srv/AddTwoInts_Event"
        assert [(m.time, bytes(m.data)) for m in bag.messages(info.name, raw=True)] == expected and expected
        definition = info.connections[0].definition
        assert definition.startswith("service_msgs/ServiceEventInfo info\nAddTwoInts_Request[<=1] request\n")
        assert "MSG: example_interfaces/AddTwoInts_Request\nint64 a\nint64 b\n" in definition
        assert "MSG: example_interfaces/AddTwoInts_Response\nint64 sum" in definition


def test_service_event_messages_name_their_srv_types():
    """``__msgtype__`` was rebuilt as ``pkg/msg/Name`` for every type, so a service event said
    example_interfaces/msg/AddTwoInts_Event where the recording (and ROS 2) say .../srv/...: code that
    dispatches on rosbags' ``__msgtype__`` missed them. Every storage of the recording, and after pickling."""
    import pickle

    folder = DATA / "mcap" / "ros2__rosbag2__rosbag2_cpp__test__rosbag2_cpp__bags"
    if not folder.exists():
        pytest.skip(NO_DATA)
    for name in ("topics_and_services.db3", "only_services.mcap"):
        with open_quietly(folder / name) as bag:
            m = next(bag.messages("/add_two_ints/_service_event"))
            event = m.msg.request and m.msg or next(e.msg for e in bag.messages("/add_two_ints/_service_event")
                                                    if e.msg.request)
            assert m.msg.__msgtype__ == m.connection.msgtype == "example_interfaces/srv/AddTwoInts_Event"
            assert event.request[0].__msgtype__ == "example_interfaces/srv/AddTwoInts_Request"
            assert m.msg.info.__msgtype__ == "service_msgs/msg/ServiceEventInfo"
            assert m.msg.info.stamp.__msgtype__ == "builtin_interfaces/msg/Time"
            again = pickle.loads(pickle.dumps(event))
            assert again.__msgtype__ == event.__msgtype__ and again.request[0].__msgtype__ == event.request[0].__msgtype__
            assert again.request[0].a == event.request[0].a
            rows = bag.read("/add_two_ints/_service_event")
            assert rows[0].__msgtype__ == m.msg.__msgtype__
    # an action's parts are named by the action; the messages it holds from elsewhere keep msg
    from fastbag.msg.messages import message_types

    types = message_types("my_pkg/action/Fibonacci_FeedbackMessage", "", "ros2msg")
    assert types.interface_name("my_pkg/Fibonacci_Feedback") == "my_pkg/action/Fibonacci_Feedback"
    assert types.interface_name("unique_identifier_msgs/UUID") == "unique_identifier_msgs/msg/UUID"
    assert types.interface_name("my_pkg/Other") == "my_pkg/msg/Other"
    assert message_types("pkg/Type", "", "ros1msg").interface_name("pkg/Type_Request") == "pkg/msg/Type_Request"
