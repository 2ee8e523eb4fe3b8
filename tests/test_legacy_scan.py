"""The legacy scans' kernel (1.2 without a usable index, 1.1 at every open) builds the index the checked parser
builds.

``scan_v12`` and ``scan_v11`` walk runs of message records of known connections with a Numba kernel
(fastbag.ros1.kernels.v12_message_records / v11_message_records) and leave every other record to the checked
Python parser. Each bag here is indexed twice, the kernel forced on (with a rows buffer of a few rows, so runs
are flushed mid-walk, or of its usual size) and off, and the two indexes must be equal: connections, times,
offsets, message spans and the problems' text. The bags: the real 1.2 bags with their index dropped, 1.2 and
1.1 bags generated here (definitions repeated with another text, a topic with two md5sums, a message without a
definition, fields in any order and repeated, unknown ops, keys whose bytes differ but decode alike, lines
at the 1.1 limit), and hundreds of copies cut short or with bytes of their records changed (lengths made
huge among them). On the intact generated bags the kernel's index also equals what the generator wrote,
and the parser reads only each connection's first message.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from conftest import data_files
from fastbag.errors import FastbagError
from fastbag.io.source import Source
from fastbag.ros1 import legacy
from fastbag.ros1.index import read_index
from legacy_fixtures import MAGIC_V12, raw_record12, record12

LEGACY = data_files("ros1legacy")


def indexed(path: Path, monkeypatch, *, kernel: bool, room: int | None = None) -> tuple | str:
    """Everything the index of ``path`` says, read with the scan's kernel forced on or off (and its rows
    buffer of ``room`` rows), or the error opening it raised."""
    with monkeypatch.context() as patch:
        patch.setattr(legacy, "by_kernel", lambda size, up_to: kernel)
        if room is not None:
            patch.setattr(legacy._Rows, "ROOM", room)
        source = Source(path)
        try:
            index = read_index(source)
        except FastbagError as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            source.close()
    spans = (index.starts.tolist(), index.lengths.tolist()) if index.starts is not None else None
    return (index.version, index.connections, index.time.tolist(), index.conn.tolist(), index.chunk.tolist(),
            index.offset.tolist(), spans, index.recovered, index.problems)


def assert_same_both_ways(paths: list[Path], monkeypatch) -> None:
    differ = []
    for k, path in enumerate(paths):
        python = indexed(path, monkeypatch, kernel=False)
        if indexed(path, monkeypatch, kernel=True, room=3 if k % 2 else None) != python:
            differ.append(path.name)
    assert differ == []


# -- generated bags ----------------------------------------------------------------------------------------

class Written:
    """A generated bag: its bytes, where each record starts, and each message as written: (key, time ns,
    record offset, data start, data length)."""

    def __init__(self, data: bytes, records: list[int], messages: list[tuple]) -> None:
        self.data, self.records, self.messages = data, records, messages


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def write_v12(rng: random.Random, count: int = 300) -> Written:
    """An unindexed 1.2 bag: definitions (one repeated with another text), a topic with two md5sums, a topic
    without a definition, topic bytes that decode alike, fields in any order with extras and repeats (the
    last counts: a topic or md5 repeated makes another key), records of other ops with a message's fields,
    messages of empty topic and md5."""
    keys = [(b"/a", b"aaaa"), (b"/b", b"bbbb"), (b"/c", b"c1"), (b"/c", b"c2"), (b"/nodef", b"nnnn"),
            (b"/\xff", b"ffff")]
    out = bytearray(MAGIC_V12 + record12({"op": b"\x03", "index_pos": struct.pack("<Q", 0)}, b" " * 20))
    records, messages = [], []

    def add(fields: list[bytes], data: bytes = b"") -> None:
        """Append a record; a message (its last op 2) is noted with the key and time its last fields say."""
        records.append(len(out))
        out.extend(raw_record12(fields, data))
        last = dict(field.split(b"=", 1) for field in fields)
        if last[b"op"] == b"\x02":
            sec, nsec = (struct.unpack("<I", last[name])[0] for name in (b"sec", b"nsec"))
            messages.append(((last.get(b"topic", b""), last.get(b"md5", b"")), sec * 10**9 + nsec, records[-1],
                             len(out) - len(data), len(data)))

    for topic, md5 in keys:
        if topic != b"/nodef":
            add([b"op=\x01", b"topic=" + topic, b"md5=" + md5, b"type=pkg/T" + md5, b"def=int32 x\n"])
    for _ in range(count):
        topic, md5 = rng.choice(keys)
        if topic == b"/\xff" and rng.random() < 0.3:
            topic = b"/\xfe"  # other bytes, the same text: the same connection
        fields = [b"op=\x02", b"topic=" + topic, b"md5=" + md5, b"type=pkg/T", b"sec=" + u32(rng.randrange(1 << 32)),
                  b"nsec=" + u32(rng.randrange(1 << 32))]
        fields += rng.sample([b"callerid=/node", b"latching=1", b"x=y", b"=", b"time=" + u32(7) * 2, b"conn=" + u32(3),
                              b"opx=\x05", b"sec=" + u32(rng.randrange(1 << 32)), b"md5=" + md5 * 2, b"topic=/b"],
                             rng.randrange(3))
        rng.shuffle(fields)
        add(fields, rng.randbytes(rng.randrange(12)))
        if rng.random() < 0.1:
            time = [b"sec=" + u32(5), b"nsec=" + u32(6)]
            add(rng.choice([
                [b"op=\x01", b"topic=/a", b"md5=aaaa", b"type=pkg/Other", b"def=float64 y\n"],  # (the first counts)
                [b"op=\x09", b"topic=/a", b"md5=aaaa"] + time,  # another op with a message's fields
                [b"op=\x02", b"op=\x01", b"topic=/a", b"md5=aaaa", b"type=T", b"def="] + time,  # a definition
                [b"op=\x01", b"op=\x02", b"topic=/a", b"md5=aaaa"] + time,  # a message
                [b"op=\x02", b"topic=", b"md5=", b"type=T"] + time,  # a message of an empty key
                [b"op=\x04", b"ver=" + u32(0), b"topic=/a", b"count=" + u32(0)],
            ]), rng.choice([b"", b"odd"]))
    return Written(bytes(out), records, messages)


V11_KEYS = [(b"/a", b"aaaa", b"pkg/A"), (b"/b", b"bbbb", b"pkg/B"), (b"/a", b"aaaa", b"pkg/Other"),
            (b"/" + b"t" * 4094, b"long", b"pkg/L"),  # a line of 4095 bytes and its newline: the longest read
            (b"/\xff", b"ffff", b"pkg/F"), (b"/\xfe", b"ffff", b"pkg/F")]


def write_v11(rng: random.Random, count: int = 300) -> Written:
    """A 1.1 bag: a topic with two types, a line at the length limit, topics whose bytes decode alike."""
    out = bytearray(b"#ROSRECORD V1.1\n")
    records, messages = [], []
    for _ in range(count):
        key = rng.choice(V11_KEYS)
        sec, nsec = rng.randrange(1 << 32), rng.randrange(1 << 32)
        data = rng.randbytes(rng.randrange(12))
        records.append(len(out))
        out += b"".join(line + b"\n" for line in key) + struct.pack("<III", sec, nsec, len(data)) + data
        messages.append((key, sec * 10**9 + nsec, records[-1], len(out) - len(data), len(data)))
    return Written(bytes(out), records, messages)


def mutated(written: Written, rng: random.Random) -> bytes:
    """A copy cut short, or with a byte or a u32 of a record's head (lengths, fields, lines) changed."""
    data = bytearray(written.data)
    kind = rng.randrange(4)
    if kind == 0:
        del data[rng.randrange(len(MAGIC_V12), len(data)):]
        return bytes(data)
    at = min(rng.choice(written.records) + rng.randrange(64), len(data) - 4)
    if kind == 1:
        data[at] = rng.choice((0, 1, 2, 3, 4, 9, 0x0A, 0x3D, 0xFF, data[at] ^ 1))
    elif kind == 2:  # a length made huge, or just past what is there
        data[at:at + 4] = u32(rng.choice((0xFFFFFFFF, 0x7FFFFFFF, (1 << 24) + 1, len(data), 4097)))
    else:
        del data[at:at + rng.randrange(1, 40)]
    return bytes(data)


def rows_of(summary: tuple) -> list[tuple]:
    """(connection id, time, record offset, data start, data length) per message of an index, in file order."""
    _, connections, time, conn, _, offset, (starts, lengths), _, _ = summary
    return sorted(zip((connections[c].id for c in conn), time, offset, starts, lengths), key=lambda row: row[2])


def written_rows(written: Written, version: str) -> list[tuple]:
    """rows_of what the generator wrote: connections numbered by their first message, each of a key (1.2: its
    topic and md5 as text, so bytes that decode alike share one; 1.1: its three lines' bytes)."""
    ids: dict = {}
    rows = []
    for key, *rest in written.messages:
        key = tuple(x.decode("utf-8", "replace") for x in key) if version == "1.2" else key
        rows.append((ids.setdefault(key, len(ids)), *rest))
    return rows


# -- the proofs --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", LEGACY)
def test_real_v12_bags_scanned_either_way_index_alike(path, tmp_path, monkeypatch):
    """Each real 1.2 bag without its index (index_pos zeroed), and 60 copies with bytes of their records
    changed or cut short: the same index with the kernel as without."""
    data = bytearray(path.read_bytes())
    at = data.index(b"index_pos=") + len(b"index_pos=")
    data[at:at + 8] = struct.pack("<Q", 0)
    records, pos = [], len(MAGIC_V12)
    while pos + 8 <= len(data):  # where the records start (the file is intact)
        records.append(pos)
        header_len = struct.unpack_from("<I", data, pos)[0]
        pos += 8 + header_len + struct.unpack_from("<I", data, pos + 4 + header_len)[0]
    written = Written(bytes(data), records, [])
    cases = [tmp_path / "unindexed.bag"]
    cases[0].write_bytes(written.data)
    rng = random.Random(20261201)
    for k in range(60):
        cases.append(tmp_path / f"changed{k}.bag")
        cases[-1].write_bytes(mutated(written, rng))
    assert_same_both_ways(cases, monkeypatch)
    whole = indexed(cases[0], monkeypatch, kernel=True)
    assert whole[0] == "1.2" and whole[7] and len(whole[2]) > 0
    assert "nothing in the file lost" in whole[8][0]


@pytest.mark.parametrize("version", ["1.2", "1.1"])
def test_generated_bags_index_what_was_written(version, tmp_path, monkeypatch):
    """The kernel's index of an intact generated bag is what the generator wrote (connections by first
    message, decoded keys alike sharing one), and equals the parser's."""
    written = (write_v12 if version == "1.2" else write_v11)(random.Random(20261202))
    path = tmp_path / "generated.bag"
    path.write_bytes(written.data)
    ours = indexed(path, monkeypatch, kernel=True)
    assert ours == indexed(path, monkeypatch, kernel=False)
    assert rows_of(ours) == written_rows(written, version)
    want_problems = [] if version == "1.1" else [
        f"it has no index (index_pos is 0); rebuilt the index by scanning: recovered {len(written.messages)} "
        f"messages; nothing in the file lost"]
    assert ours[8] == want_problems
    if version == "1.2":  # the first definition of a key counts; a message without one keeps its type
        by_topic = {(c.topic, c.md5sum): c for c in ours[1]}
        assert (by_topic["/a", "aaaa"].msgtype, by_topic["/a", "aaaa"].definition) == ("pkg/Taaaa", "int32 x\n")
        assert (by_topic["/nodef", "nnnn"].msgtype, by_topic["/nodef", "nnnn"].definition) == ("pkg/T", "")
        assert ("/\ufffd", "ffff") in by_topic and ("/b", "bbbb") in by_topic and ("/c", "c2") in by_topic
    assert len(ours[1]) == len({row[0] for row in written_rows(written, version)}) >= 6


@pytest.mark.parametrize("version", ["1.2", "1.1"])
def test_damaged_generated_bags_index_alike_either_way(version, tmp_path, monkeypatch):
    """300 copies of a generated bag cut short, or with a byte, a length (made huge) or a few bytes of a
    record's head changed: the same index, and the same account of what was lost, either way."""
    rng = random.Random(20261203 if version == "1.2" else 20261204)
    written = (write_v12 if version == "1.2" else write_v11)(rng, count=120)
    cases = []
    for k in range(300):
        cases.append(tmp_path / f"changed{k}.bag")
        cases[-1].write_bytes(mutated(written, rng))
    assert_same_both_ways(cases, monkeypatch)
    lost = [indexed(case, monkeypatch, kernel=True) for case in cases]
    assert sum("lost the last" in str(summary) for summary in lost) > 50  # (the damage was met)


@pytest.mark.parametrize("version", ["1.2", "1.1"])
def test_cut_at_every_offset_of_the_last_records(version, tmp_path, monkeypatch):
    """The bag cut at every offset of its last three records: the same index either way."""
    written = (write_v12 if version == "1.2" else write_v11)(random.Random(20261205), count=40)
    cases = []
    for cut in range(written.records[-3], len(written.data)):
        cases.append(tmp_path / f"cut{cut}.bag")
        cases[-1].write_bytes(written.data[:cut])
    assert_same_both_ways(cases, monkeypatch)


def test_the_parser_reads_only_each_connections_first_message(tmp_path, monkeypatch):
    """Once a connection is known the kernel takes its messages: the parser adds the first row of each
    connection, and (1.2) the rows whose key bytes differ from those the connection was found with but
    decode alike."""
    parsed = []
    add = legacy._Rows.add
    monkeypatch.setattr(legacy._Rows, "add", lambda self, *row: parsed.append(row) or add(self, *row))
    for version in ("1.2", "1.1"):
        written = (write_v12 if version == "1.2" else write_v11)(random.Random(20261206), count=400)
        path = tmp_path / f"{version}.bag"
        path.write_bytes(written.data)
        parsed.clear()
        summary = indexed(path, monkeypatch, kernel=True)
        assert len(summary[2]) == len(written.messages) >= 400
        found_with: dict = {}
        for key, *_ in written.messages:
            found_with.setdefault(tuple(x.decode("utf-8", "replace") for x in key) if version == "1.2" else key, key)
        other_bytes = sum(key not in found_with.values() for key, *_ in written.messages)
        assert len(found_with) == len(summary[1]) >= 6
        assert (other_bytes > 10) == (version == "1.2")
        assert len(parsed) == len(found_with) + other_bytes
