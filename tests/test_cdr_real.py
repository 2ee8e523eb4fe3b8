"""CDR messages from real ROS2 recordings (MCAP and rosbag2 sqlite3 files) decode equal to the peers.

Each file's raw message bytes and schemas are pulled with the ``mcap``
package's reader or ``sqlite3``, decoded with :func:`fastbag.msg.decode_messages`
(no container involved), and compared field by field with ``mcap_ros2``'s
decoder and, where its typestore has the type, rosbags' ``deserialize_cdr``.
"""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path

import pytest

from fastbag.errors import DefinitionError, FastbagError
from fastbag.msg import decode_messages

from cdr_oracle import assert_same_cdr
from conftest import DATA, NO_DATA

mcap_reader = pytest.importorskip("mcap.reader", reason="the mcap package is a test extra")
mcap_dynamic = pytest.importorskip("mcap_ros2._dynamic", reason="mcap-ros2-support is a test extra")


def _files(pattern: str, exclude: str = "conformance") -> list:
    files = sorted(f for f in DATA.glob(pattern) if exclude not in str(f)) if DATA.is_dir() else []
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    return [pytest.param(f, id=f"{f.parent.name[-40:]}/{f.name}"[-90:]) for f in files]


def _mcap_channels(path: Path) -> dict:
    """{(schema name, schema encoding, schema text): [raw CDR messages]} of one MCAP file."""
    channels: dict = collections.defaultdict(list)
    with path.open("rb") as stream:
        for schema, channel, message in mcap_reader.make_reader(stream).iter_messages():
            if channel.message_encoding == "cdr" and schema is not None:
                channels[(schema.name, schema.encoding, schema.data.decode())].append(message.data)
    return channels


def _rosbags_store():
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.LATEST)


def _check(msgtype: str, schema_encoding: str, text: str, raw: list[bytes], store, peer_failures: list) -> int:
    """Decode with fastbag and compare with every peer that can decode; the number of peers compared."""
    ours = decode_messages(msgtype, text, raw, encoding="cdr", schema_encoding=schema_encoding)
    assert len(ours) == len(raw)
    peers = 0
    try:
        decoder = mcap_dynamic.generate_dynamic(msgtype, text)[msgtype]
        theirs = [decoder(m) for m in raw]
    except Exception as exc:  # noqa: BLE001 - the peer's own limits (service texts, wstring)
        peer_failures.append(f"mcap_ros2 {msgtype}: {exc}")
    else:
        for i, (mine, their) in enumerate(zip(ours, theirs)):
            assert_same_cdr(mine, their, f"{msgtype}[{i}]")
        peers += 1
    name = msgtype if "/msg/" in msgtype else None
    if name and name in store.fielddefs:
        try:
            theirs = [store.deserialize_cdr(m, name) for m in raw]
        except Exception as exc:  # noqa: BLE001 - a definition that differs from the store's distribution
            peer_failures.append(f"rosbags {msgtype}: {exc}")
        else:
            for i, (mine, their) in enumerate(zip(ours, theirs)):
                assert_same_cdr(mine, their, f"{msgtype}[{i}] (rosbags)")
            peers += 1
    return peers


@pytest.mark.parametrize("path", _files("mcap/**/*.mcap"))
def test_mcap_messages_equal_peers(path: Path) -> None:
    channels = _mcap_channels(path)
    if not channels:
        pytest.skip("no CDR channels in this file")
    store, failures, compared = _rosbags_store(), [], 0
    for (name, encoding, text), raw in channels.items():
        compared += _check(name, encoding, text, raw, store, failures)
    if not compared:  # every type here is one no peer decodes: what fastbag decoded is checked below
        pytest.skip(f"no peer decodes these types: {failures}")


def _db3_topics(path: Path) -> dict:
    """{(type, definition encoding, definition): [raw messages]} of a rosbag2 sqlite3 file's CDR topics."""
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)  # (WAL files: none made)
    tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    definitions = {}
    if "message_definitions" in tables:
        definitions = {t: (e, d) for t, e, d in db.execute(
            "select topic_type, encoding, encoded_message_definition from message_definitions")}
    out: dict = collections.defaultdict(list)
    for topic_id, typ, fmt in db.execute("select id, type, serialization_format from topics"):
        if fmt != "cdr":
            continue
        encoding, text = definitions.get(typ, ("", ""))
        for (data,) in db.execute("select data from messages where topic_id = ? order by id", (topic_id,)):
            out[(typ, encoding, text)].append(bytes(data))
    return out


@pytest.mark.parametrize("path", _files("**/*.db3", exclude="broken"))
def test_db3_messages_equal_peers(path: Path) -> None:
    topics = _db3_topics(path)
    store, failures, compared = _rosbags_store(), [], 0
    for (typ, encoding, text), raw in topics.items():
        if "/msg/" in typ and typ in store.fielddefs and not text.strip() and raw and not typ.endswith("/Empty"):
            # Older rosbag2 files carry no definitions (readers ship them): the standard one, as ros2msg text.
            text, _ = store.generate_msgdef(typ, ros_version=2)
            encoding = "ros2msg"
        if not encoding or (not text.strip() and not typ.endswith("/Empty")):
            failures.append(f"{typ}: no definition")
            continue
        try:
            compared += _check(typ, encoding, text, raw, store, failures)
        except FastbagError:
            # rosbag2_py's talker.db3 stores placeholder definitions ('uint8 level' for Log): wrong for its
            # messages, which then must not decode; the standard definition decodes them, equal to the peers.
            assert path.name == "talker.db3" and typ in store.fielddefs, f"{typ} does not decode"
            text, _ = store.generate_msgdef(typ, ros_version=2)
            compared += _check(typ, "ros2msg", text, raw, store, failures)
    if not compared:
        pytest.skip(f"nothing any peer decodes: {failures}")


def test_census_every_schema_parses() -> None:
    """Every ros2msg / ros2idl schema in the data compiles to a layout (a census, over MCAP and sqlite3)."""
    from fastbag.msg.layout import layout_for

    if not DATA.is_dir():
        pytest.skip(NO_DATA)
    seen = 0
    for path in sorted(DATA.glob("**/*.mcap")):
        if "conformance" in str(path) or "broken" in str(path):
            continue
        with path.open("rb") as stream:
            summary = mcap_reader.make_reader(stream).get_summary()
        for schema in (summary.schemas.values() if summary else ()):
            if schema.encoding in ("ros2msg", "ros2idl"):
                layout_for(schema.name, schema.data.decode(), encoding="cdr", schema_encoding=schema.encoding)
                seen += 1
    placeholders = []
    for path in sorted(DATA.glob("**/*.db3")):
        db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)  # (WAL files: none made)
        if "message_definitions" not in {r[0] for r in db.execute("select name from sqlite_master")}:
            continue
        for typ, encoding, text in db.execute(
                "select topic_type, encoding, encoded_message_definition from message_definitions"):
            if encoding in ("ros2msg", "ros2idl"):
                if "/srv/" in typ and not typ.endswith("_Event"):
                    typ += "_Event"  # a service's text, stored under its name: its topics carry the event type
                try:
                    layout_for(typ, text, encoding="cdr", schema_encoding=encoding)
                except DefinitionError:
                    placeholders.append((path.name, typ))
                seen += 1
    # Only rosbag2_py's talker.db3 holds a definition naming a type it leaves out ('Parameter[] new_parameters').
    assert {name for name, _ in placeholders} <= {"talker.db3"}, placeholders
    assert seen > 100
