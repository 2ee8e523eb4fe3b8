"""Fuzz and property tests: damaged bags fail cleanly, keep what can be kept, and never balloon.

The campaign lives in :mod:`tools.fuzz` (``python -m tools.fuzz --seed S --cases N --jobs 2``):
damaged copies of the real bags of ``../shared/data`` and of generated bags, run in worker
processes that survive crashes, with a timeout per case and allocations traced or capped. This
file runs a quick deterministic slice of it, and states the guarantees as hypothesis properties
over generated bags (``derandomize=True``: the same examples on every run, so CI is deterministic).
test_errors.py and test_recovery.py already pin single damages down one by one; what is new here:

1. **The CI slice** (``test_campaign_slice_*``): a few hundred campaign cases (ROS1 bags, MCAP files) through the real
   supervisor (worker processes, timeouts, address-space caps). No case may find a problem.
   Replaying a case gives the same bytes and outcome.
2. **Properties**: a generated bag of each compression cut at *any* byte keeps every message of
   every complete chunk, invents none, and warns once saying what was lost (uncompressed: exactly
   the complete message records); a damaged chunk in an unindexed bag loses that chunk only; any
   byte damage (lengths set to 0 / 0x7fffffff / 0xffffffff / neighbours, flips, deleted or
   duplicated records, cuts) raises only FastbagErrors that name the file, offset and record,
   warns only with FastbagWarning, and leaves what it reads self-consistent (time order, counts,
   ``read()`` equal to the raw messages); a message made shorter or longer than its definition is
   a DecodeError naming its topic and index (in real-world types, every compression); a damaged
   definition never disturbs raw reading or other topics; lengths claiming gigabytes allocate
   nothing near that.
3. **rosbags comparisons**: damage on which rosbags 0.11 raises UnicodeDecodeError, ValueError,
   AssertionError (gone under ``python -O``), KeyError or struct.error instead of its ReaderError,
   while fastbag raises a BagFormatError naming file, offset and record, or rebuilds the index
   and reads every message with one warning; and an index-data record naming an unknown
   connection, whose messages rosbags drops without a word.
4. **Regressions**: the 17 defects the campaign found (D1-D17: unchecked sizes, allocations
   sized by claims, decompression bombs, recursion, quadratic parsing, a scan that did not
   resynchronise, silent loss of messages), one ``test_regression_*`` each with the smallest input
   that showed it; all fixed.
5. **MCAP**: a campaign slice on the MCAP seeds; the harness's MCAP walk finds what the ``mcap``
   package reads; the chunk splicing its mutators use keeps a file coherent (read the same through the
   summary, by fastbag and by the ``mcap`` reader); a file cut anywhere keeps every complete record;
   decompression bombs (lz4, zstd; content size declared or not) allocate nothing near their size. The
   MCAP defects the campaign found have their regression tests in test_mcap.py.
"""

from __future__ import annotations

import bz2
import contextlib
import json
import random
import struct
import subprocess
import sys
import time
import tracemalloc
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rosbags.rosbag1 import Reader
from rosbags.rosbag1.reader import ReaderError

import fastbag
from conftest import DATA, NO_DATA
from fastbag.tooling import synth
from tools import fuzz, fuzz_mcap

PROPERTY = dict(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
INT32 = ("std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
REPO = Path(__file__).resolve().parents[1]


# -- generated seed bags ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, fuzz.Seed]:
    """The campaign's generated seed bags (demo, mixed, odd types x none/lz4/bz2; legacy 1.2 and 1.1)."""
    root = tmp_path_factory.mktemp("seeds")
    specs = fuzz.build_generated(root, seed=5)
    return {Path(s.path).stem: fuzz.Seed(s) for s in specs}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzzed")


def run(path: Path, **kwargs) -> fuzz.Outcome:
    """Open, read every raw message and every topic, touch every field: fuzz.Runner, the campaign's.

    (The sensor helpers are left out here; their errors are tested below.)
    """
    return fuzz.Runner(str(path), sensors=False, **kwargs).run()


@contextlib.contextmanager
def peak_allocation() -> Iterator[list[int]]:
    """``with peak_allocation() as peak:`` ... then ``peak[0]`` is the largest traced allocation inside.

    Open bags inside it, never around it: a bag's worker threads must be joined (the bag closed) before
    tracemalloc stops. ``tracemalloc.stop()`` while another thread takes the GIL back (after a nogil
    kernel) crashes CPython before 3.12.9 (gh-128679): this suite's rare segfault in the LZ4 kernel."""
    peak = [0]
    tracemalloc.start()
    try:
        yield peak
        peak[0] = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def problems(out: fuzz.Outcome) -> list[str]:
    return [f"[{p.category}] {p.stage}: {p.text}" for p in out.problems]


def rows(messages) -> Counter:
    return Counter((m.topic, m.time, m.data) for m in messages)


def int32_bag(path: Path, n: int, *, compression: str = "none", chunk_size: int = 768 * 1024,
              topics: tuple[str, ...] = ("/a",)) -> None:
    with fastbag.Writer(path, compression=compression, chunk_size=chunk_size) as w:
        conns = [w.add_connection(t, *INT32) for t in topics]
        for k in range(n):
            for c in conns:
                w.write(c, 10**9 + k, struct.pack("<i", k))


# -- 1. the CI slice of the campaign ------------------------------------------------------------


def _campaign(tmp_path: Path, *args: str) -> list[dict]:
    failures = tmp_path / "failures.jsonl"
    cmd = [sys.executable, "-m", "tools.fuzz", *args, "--jobs", "2", "--timeout", "30", "--progress", "1000",
           "--failures", str(failures)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert "fastbag fuzz campaign summary" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    lines = failures.read_text().splitlines() if failures.exists() else []
    return [json.loads(line) for line in lines]


def test_campaign_slice_generated_bags(tmp_path):
    """240 cases on generated bags only (runs everywhere): no crash, no hang, nothing but known defects."""
    found = _campaign(tmp_path, "--seed", "20240", "--cases", "240", "--generated-only", "--formats", "ros1")
    unknown = [text for r in found for text in fuzz.unknown_problems(r)]
    assert not unknown, "\n".join(unknown)


@pytest.mark.skipif(not (DATA / "ros1v2").is_dir(), reason=NO_DATA)
def test_campaign_slice_real_bags(tmp_path):
    """160 cases on the real bags of ../shared/data and the generated ones."""
    found = _campaign(tmp_path, "--seed", "7", "--cases", "160", "--formats", "ros1")
    unknown = [text for r in found for text in fuzz.unknown_problems(r)]
    assert not unknown, "\n".join(unknown)


def test_campaign_slice_mcap(tmp_path):
    """240 cases on the MCAP seeds: generated ones, and the real files of ../shared/data/mcap where present."""
    found = _campaign(tmp_path, "--seed", "31", "--cases", "240", "--formats", "mcap")
    unknown = [text for r in found for text in fuzz.unknown_problems(r)]
    assert not unknown, "\n".join(unknown)


def test_a_case_replays_byte_for_byte(seeds, tmp_path):
    """A case depends on (seed, case number) only: not on the worker, nor on the cases run before it."""
    specs = [s.spec for s in seeds.values()]
    first = fuzz.Context(3, specs, tmp_path / "a", memory=False)
    second = fuzz.Context(3, specs, tmp_path / "b", memory=False)
    built = {k: fuzz.build_mutant(first, k)[1] for k in (5, 17, 42, 99)}
    for k in (99, 42, 17, 5):
        again = fuzz.build_mutant(second, k)[1]
        assert (again.kind, again.detail, again.data) == (built[k].kind, built[k].detail, built[k].data), k
    a = fuzz.run_case(first, 42)
    b = fuzz.run_case(second, 42)
    assert {k: a[k] for k in ("kind", "detail", "size", "outcome", "errors")} == \
        {k: b[k] for k in ("kind", "detail", "size", "outcome", "errors")}
    assert [p["signature"] for p in a["problems"]] == [p["signature"] for p in b["problems"]]


def test_single_case_command(tmp_path):
    """``--case K --verbose`` reruns one case in-process and prints what happened; ``--save`` keeps it."""
    saved = tmp_path / "case.bag"
    done = subprocess.run([sys.executable, "-m", "tools.fuzz", "--seed", "1", "--case", "3", "--generated-only",
                           "--save", str(saved)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "case 3: seed bag" in done.stdout and "outcome:" in done.stdout, done.stdout + done.stderr
    assert saved.exists()


# -- 2. properties ----------------------------------------------------------------------------------

CUT_SEEDS = ["gen-mixed-none", "gen-mixed-lz4", "gen-mixed-bz2", "gen-types-none", "gen-types-lz4",
             "gen-types-bz2", "gen-v12-indexed", "gen-v11"]


@pytest.mark.parametrize("name", CUT_SEEDS)
@settings(max_examples=30, **PROPERTY)
@given(data=st.data())
def test_cut_anywhere_keeps_every_complete_chunk(seeds, scratch, name, data):
    """Requirement 3: a bag cut at any byte yields every message of every complete chunk (legacy: every
    complete message record), nothing the bag does not hold, in time order, with one warning saying what
    was lost. Uncompressed chunks give exactly the complete message records before the cut."""
    seed = seeds[name]
    s = seed.structure
    size = len(seed.data)
    cut = data.draw(st.one_of(st.integers(0, size), st.sampled_from(s.boundaries()).flatmap(
        lambda b: st.integers(max(0, b - 2), min(size, b + 2)))), label="cut")
    path = scratch / f"cut-{name}.bag"
    path.write_bytes(seed.data[:cut])
    out = run(path, open_kwargs=seed.spec.open_kwargs)
    assert not problems(out), problems(out)
    if not out.opened:
        assert cut < s.header_end + 8 or not s.messages, (cut, out.open_error)
        return
    got = Counter(out.raw)
    original = Counter(seed.reference.raw)
    assert not got - original, "messages the bag does not hold"
    times = [t for _, t, _ in out.raw]
    assert times == sorted(times)
    if s.version == "2.0":
        complete = [m for c in s.chunks if c.rec.end <= cut for m in c.messages
                    if s.conn_end.get(m.conn, size + 1) <= cut]
    else:
        complete = [m for m in s.messages if m.end <= cut]
    assert not rows(complete) - got, f"cut at {cut}: lost messages of complete chunks"
    if s.version == "2.0" and all(c.compression == "none" for c in s.chunks):
        before = [m for m in s.messages if m.end <= cut and s.conn_end.get(m.conn, size + 1) <= cut]
        assert got == rows(before), f"cut at {cut}"
    if len(out.raw) < len(seed.reference.raw) and not (s.version == "1.1" and cut in s.boundaries()):
        assert len(out.warnings) == 1, out.warnings
        assert str(path) in out.warnings[0] and ("lost" in out.warnings[0] or "cut" in out.warnings[0])
        assert f"{len(out.raw)} messages" in out.warnings[0] or s.version == "1.1"


@pytest.mark.parametrize("name", ["gen-mixed-none", "gen-mixed-lz4", "gen-mixed-bz2", "gen-demo-bz2"])
@settings(max_examples=25, **PROPERTY)
@given(data=st.data())
def test_damaged_chunk_in_unindexed_bag_loses_that_chunk_only(seeds, scratch, name, data):
    """Requirement 3: bytes damaged inside one chunk's payload of a bag without index: every other chunk's
    messages are recovered, one warning names the damaged chunk when it lost something."""
    seed = seeds[name]
    s = seed.structure
    buf = bytearray(seed.data)
    struct.pack_into("<Q", buf, s.records[0].fields["index_pos"][0], 0)
    k = data.draw(st.integers(0, len(s.chunks) - 1), label="chunk")
    victim = s.chunks[k].rec
    for _ in range(data.draw(st.integers(1, 6), label="bytes")):
        at = data.draw(st.integers(victim.data_start, victim.end - 1), label="at")
        buf[at] ^= data.draw(st.integers(1, 255), label="xor")
    path = scratch / f"chunk-{name}.bag"
    path.write_bytes(bytes(buf))
    out = run(path)
    assert not problems(out), problems(out)
    others = [m for j, c in enumerate(s.chunks) if j != k for m in c.messages]
    # Unindexed, a connection's record lies in the chunk of its first message: damage there may rename
    # the topic (or alter the definition) of messages in other chunks too, so those are compared by
    # (time, bytes), and a warning about a definition may join the recovery warning.
    got = Counter((t, d) for _, t, d in out.raw)
    assert not Counter((m.time, m.data) for m in others) - got, "messages of undamaged chunks were lost"
    recovery = [w for w in out.warnings if "rebuilt the index by scanning" in w]
    assert len(recovery) == 1, out.warnings
    assert all("definition" in w for w in out.warnings if w not in recovery), out.warnings
    if len(out.raw) < len(seed.reference.raw):  # something was lost: the warning names the chunk
        assert f"offset {victim.start}" in recovery[0], recovery[0]


DAMAGE_SEEDS = ["gen-demo-none", "gen-demo-lz4", "gen-mixed-bz2", "gen-types-none", "gen-types-lz4",
                "gen-demo-ragged-none", "gen-v12-indexed", "gen-v12-unindexed", "gen-v11", "gen-no-messages"]


@pytest.mark.parametrize("name", DAMAGE_SEEDS)
@settings(max_examples=40, **PROPERTY)
@given(rng_seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 3))
def test_any_byte_damage_raises_only_fastbag_errors(seeds, scratch, name, rng_seed, steps):
    """Requirement 2: lengths and counts set to edge values, bits flipped in headers and chunks, records
    deleted, duplicated or swapped, random bytes, cuts: only FastbagErrors naming file/offset/record (or
    topic/index), only FastbagWarnings, and a self-consistent result."""
    seed = seeds[name]
    rng = random.Random(rng_seed)
    buf = bytearray(seed.data)
    done = []
    for _ in range(steps):
        buf, what = fuzz._byte_damage(rng, seed, buf)
        done.append(what)
    path = scratch / f"damaged-{name}.bag"
    path.write_bytes(bytes(buf))
    mutant = fuzz.Mutant(bytes(buf), "havoc", "; ".join(map(str, done)))
    out = run(path, open_kwargs=seed.spec.open_kwargs, decoded=True)
    found = problems(out) + [f"{p.category}: {p.text}" for p in fuzz.check_consistency(out, mutant)]
    assert not found, (mutant.detail, found)


@pytest.mark.parametrize("name", ["gen-mixed-none", "gen-mixed-lz4", "gen-demo-bz2", "gen-types-none"])
@settings(max_examples=25, **PROPERTY)
@given(rng_seed=st.integers(0, 2**32 - 1))
def test_index_damage_reads_the_intact_messages_or_says_why(seeds, scratch, name, rng_seed):
    """Damage confined to the index (index data, chunk infos, the index section): every message of the
    intact bag, or a warning (a partial result, nothing invented), or a FastbagError - never a silent change.
    """
    seed = seeds[name]
    rng = random.Random(rng_seed)
    buf = bytearray(seed.data)
    what = fuzz.mutate_flip_index(rng, seed, buf) if rng.random() < 0.5 else \
        fuzz.mutate_set_number(rng, seed, buf, fuzz._index_only(seed))
    path = scratch / f"index-{name}.bag"
    path.write_bytes(bytes(buf))
    out = run(path)
    mutant = fuzz.Mutant(bytes(buf), "index", what, ("index",))
    found = problems(out) + [p.text for p in fuzz.check_oracle(out, mutant, seed)]
    assert not found, (what, found)


@pytest.mark.parametrize("name", ["gen-mixed-none", "gen-mixed-lz4", "gen-demo-bz2", "gen-types-lz4",
                                  "gen-v12-indexed"])
@settings(max_examples=12, **PROPERTY)
@given(rng_seed=st.integers(0, 2**32 - 1))
def test_message_shorter_or_longer_than_its_definition(seeds, scratch, name, rng_seed):
    """Requirement 4: one message of a real-world type (Imu, Odometry, tf, LaserScan, PointCloud2, Image,
    Livox, the odd types) made 1-16 bytes shorter or longer: read() raises a DecodeError naming the topic
    and that message's index in the read; raw reading is unaffected."""
    seed = seeds[name]
    got = fuzz.mutate_message_length(random.Random(rng_seed), seed, str(scratch / "rewrite.bag"))
    assert got is not None
    data, what, oracle = got
    path = scratch / f"msglen-{name}.bag"
    path.write_bytes(data)
    out = run(path)
    _, topic, index = oracle
    assert out.reads[topic][:3] == ("error", "DecodeError", index), (what, out.reads[topic])
    assert out.reads[topic][4] == topic and f"message {index}" in out.reads[topic][3]
    assert not problems(out), problems(out)
    assert Counter((t, tm) for t, tm, _ in out.raw) == Counter((t, tm) for t, tm, _ in seed.reference.raw)


# Every definition edit, those that exposed D1, D2, D3, D12 and D13 included (their regression tests are below).
SAFE_EDITS = list(fuzz.DEFINITION_EDITS)


@pytest.mark.parametrize("name", ["gen-mixed-lz4", "gen-types-none", "gen-demo-none"])
@settings(max_examples=30, **PROPERTY)
@given(rng_seed=st.integers(0, 2**32 - 1), edit=st.sampled_from(SAFE_EDITS),
       line=st.sampled_from([line for line in fuzz.MALFORMED_LINES if "9999" not in line]))
def test_damaged_definition_leaves_raw_reading_and_other_topics_alone(seeds, scratch, name, rng_seed, edit, line):
    """Unknown types, cycles, malformed lines, changed or dropped fields, separators, duplicate types,
    non-UTF-8 bytes, truncated or flipped texts: the topic reads or raises a DecodeError naming it; raw
    messages and every other topic read exactly as before."""
    seed = seeds[name]
    rng = random.Random(rng_seed)
    conns = seed.connections()
    victim = conns[rng.randrange(len(conns))]
    if edit == "malformed":
        text = victim.definition + "\n" + line
    else:
        text, _ = fuzz.edit_definition(_Forced(rng, edit), victim.definition, victim.msgtype)
    data = fuzz.rewrite(seed, str(scratch / "rewrite.bag"), compression="lz4", chunk_size=4096,
                        definition=lambda c: text if c.id == victim.id else c.definition)
    path = scratch / f"definition-{name}.bag"
    path.write_bytes(data)
    out = run(path)
    mutant = fuzz.Mutant(data, "definition", edit, ("definition", victim.topic))
    found = problems(out) + [p.text for p in fuzz.check_oracle(out, mutant, seed)]
    assert not found, (edit, found)
    result = out.reads.get(victim.topic)
    assert result[0] == "ok" or (result[1] == "DecodeError" and result[4] == victim.topic), result


class _Forced(random.Random):
    """A Random whose first ``choice`` among the definition edits returns the edit hypothesis drew."""

    def __new__(cls, rng: random.Random, edit: str) -> "_Forced":  # (Python 3.10's Random.__new__ takes one)
        return super().__new__(cls)

    def __init__(self, rng: random.Random, edit: str) -> None:
        super().__init__(rng.random())
        self._edit = edit

    def choice(self, seq):
        if seq is fuzz.DEFINITION_EDITS:
            return self._edit
        return super().choice(seq)


@pytest.mark.parametrize("name", ["gen-demo-none", "gen-mixed-lz4", "gen-types-bz2", "gen-v12-indexed",
                                  "gen-v11"])
@settings(max_examples=30, **PROPERTY)
@given(rng_seed=st.integers(0, 2**32 - 1))
def test_lengths_claiming_gigabytes_allocate_nothing_near_that(seeds, scratch, name, rng_seed):
    """Requirement 2: a length, count, size or position field set to 0x7fffffff, 0xffffffff, 2^63...:
    the traced peak allocation stays within 64x the file (plus 64 MiB)."""
    seed = seeds[name]
    rng = random.Random(rng_seed)
    buf = bytearray(seed.data)
    what = fuzz.mutate_set_number(rng, seed, buf)
    path = scratch / f"lengths-{name}.bag"
    path.write_bytes(bytes(buf))
    with peak_allocation() as peak:
        out = run(path, open_kwargs=seed.spec.open_kwargs)
    assert not problems(out), (what, problems(out))
    assert peak[0] <= fuzz.OVERSIZE_FLOOR + fuzz.OVERSIZE_FACTOR * len(buf), (what, peak[0])


@pytest.mark.parametrize("index_pos", [2**63 - 1, 2**63, 2**64 - 1])
def test_index_pos_past_2_63_without_chunks_is_recovered(tmp_path, index_pos):
    """Fuzz defect D24 (fixed): with chunk_count 0 an index_pos past the file was followed, and reading there
    by pread raised OverflowError beyond 2**63."""
    path = tmp_path / "empty.bag"
    with fastbag.Writer(path) as w:
        w.add_connection(*(("/a",) + INT32))
    buf = bytearray(path.read_bytes())
    struct.pack_into("<Q", buf, buf.index(b"index_pos=") + 10, index_pos)
    path.write_bytes(bytes(buf))
    with pytest.warns(fastbag.FastbagWarning, match="rebuilt the index"), fastbag.open(path) as bag:
        assert bag.message_count == 0


@pytest.mark.parametrize("field", ["conn_count", "chunk_count"])
def test_regression_record_counts_are_not_allocated_before_they_fit(tmp_path, field):
    """Fuzz seed 20261125 case 283: the index section's record starts were sized by the bag header's
    conn_count (0xfffffff1: 32 GiB of int64) before anything was read. Now no more records than the section
    can hold are allowed, and the index, found other than the header says, is rebuilt by a scan."""
    path = tmp_path / "counts.bag"
    with fastbag.Writer(path, chunk_size=256) as w:
        c = w.add_connection(*(("/a",) + INT32))
        for k in range(50):
            w.write(c, 10**9 + k, struct.pack("<i", k))
    buf = bytearray(path.read_bytes())
    struct.pack_into("<I", buf, buf.index(field.encode() + b"=") + len(field) + 1, 0xFFFFFFF1)
    path.write_bytes(bytes(buf))
    with peak_allocation() as peak:
        with pytest.warns(fastbag.FastbagWarning, match="rebuilt the index"), fastbag.open(path) as bag:
            assert bag.read("/a").data.tolist() == list(range(50))
    assert peak[0] <= fuzz.OVERSIZE_FLOOR + fuzz.OVERSIZE_FACTOR * len(buf), peak[0]  # (a first open loads kernels)


def test_regression_index_naming_a_connection_without_record_is_rebuilt_at_open(tmp_path):
    """Fuzz seed 20261125 case 4996: a connection record's id changed (6 to 5), so the chunk infos named a
    connection no record describes. The fast path took it, and the message table, built on first use,
    failed with an IndexError; now open sends it to the careful path, which rebuilds the index by a scan."""
    path = tmp_path / "ids.bag"
    with fastbag.Writer(path, chunk_size=256) as w:
        conns = [w.add_connection(*((f"/t{k}",) + INT32)) for k in range(2)]
        for k in range(40):
            w.write(conns[k % 2], 10**9 + k, struct.pack("<i", k))
    buf = bytearray(path.read_bytes())
    index_pos = struct.unpack_from("<Q", buf, buf.index(b"index_pos=") + 10)[0]
    at = buf.index(b"conn=\x01\x00\x00\x00", index_pos)  # the second connection record, in the index section
    buf[at + 5] = 0
    path.write_bytes(bytes(buf))
    with pytest.warns(fastbag.FastbagWarning, match="rebuilt the index"), fastbag.open(path) as bag:
        assert bag.start_time == 10**9
        assert bag.read("/t1").data.tolist() == list(range(1, 40, 2))


def test_claimed_chunk_sizes_do_not_justify_a_read_allocation(tmp_path):
    """read() sizes its array by messages x the definition's fixed size, after checking the chunks can hold
    that much; a compressed chunk's size is only a claim (here 0xffffffff), so it may not vouch for more
    than a small multiple of its bytes in the file."""
    path = tmp_path / "claims.bag"
    with fastbag.Writer(path, chunk_size=1, compression="lz4") as w:  # one message per chunk
        c = w.add_connection("/big", "p/Big", "float64[100000] x\n", "*")  # 800,000 fixed bytes a message
        for k in range(200):
            w.write(c, 10**9 + k, bytes(8))
    buf = bytearray(path.read_bytes())
    with fastbag.open(path) as bag:
        positions = [chunk.position for chunk in bag._index.chunks]
    for position in positions:
        field = buf.index(b"size=", position)
        struct.pack_into("<I", buf, field + 5, 0xFFFFFFFF)
    path.write_bytes(bytes(buf))
    warm = tmp_path / "warm.bag"  # loads Numba and the kernels (Python objects tracemalloc would count)
    int32_bag(warm, 3, compression="lz4")
    with fastbag.open(warm) as bag:
        bag.read("/a")
    with peak_allocation() as peak, fastbag.open(path) as bag, pytest.raises(fastbag.FastbagError) as info:
        bag.read("/big")  # 200 x 800 kB = 160 MB if the claims were believed
    assert "offset" in str(info.value)
    assert peak[0] < 16 << 20, peak[0]


# -- 3. what rosbags does with the same damage ---------------------------------------------------------


def _rosbags_outcome(path: Path) -> BaseException | None:
    try:
        with Reader(path) as reader:
            for _ in reader.messages():
                pass
    except Exception as exc:  # noqa: BLE001 - recording what it raises is the point
        return exc
    return None


ROSBAGS_DAMAGE = {
    # name: (what to damage, what rosbags 0.11 raises, what fastbag does)
    "bag header field name not UTF-8": ("name", UnicodeDecodeError, "error"),
    "bag header op 0xff": ("op", ValueError, "error"),
    "index_pos past 2**63": ("index_pos", ValueError, "recovered"),
    "index data length != count*12": ("index-data-len", AssertionError, "recovered"),
    "index data count 0xffffffff": ("index-count", AssertionError, "recovered"),
    "message record names connection 255": ("message-conn", KeyError, "error"),
    "chunk data length past the file": ("chunk-data-len", struct.error, "partial"),
}


@pytest.mark.parametrize("case", list(ROSBAGS_DAMAGE))
def test_where_rosbags_raises_python_errors_fastbag_names_the_place(tmp_path, case):
    """rosbags (0.11) lets UnicodeDecodeError, ValueError, AssertionError, KeyError and struct.error
    escape on these damages (each a single field); fastbag raises a BagFormatError naming the file, the
    offset and the record, or rebuilds the index and reads every message with one warning."""
    what, theirs, ours = ROSBAGS_DAMAGE[case]
    original = tmp_path / "intact.bag"
    int32_bag(original, 20, chunk_size=200, topics=("/a", "/b"))
    data = bytearray(original.read_bytes())
    s = fuzz.walk(bytes(data))
    header = s.records[0]
    index_data = next(r for r in s.records if r.op == 0x04)
    message = next(r for r in s.inner if r.op == 0x02)
    if what == "name":
        data[header.field_starts[0] + 4] = 0xFF
    elif what == "op":
        data[header.fields["op"][0]] = 0xFF
    elif what == "index_pos":
        struct.pack_into("<Q", data, header.fields["index_pos"][0], (1 << 63) + 5)
    elif what == "index-data-len":
        struct.pack_into("<I", data, index_data.data_start - 4, index_data.data_len + 12)
    elif what == "index-count":
        struct.pack_into("<I", data, index_data.fields["count"][0], 0xFFFFFFFF)
    elif what == "message-conn":
        struct.pack_into("<I", data, message.fields["conn"][0], 255)
    elif what == "chunk-data-len":
        struct.pack_into("<I", data, s.chunks[0].rec.data_start - 4, 0xFFFF)
    path = tmp_path / "damaged.bag"
    path.write_bytes(bytes(data))
    exc = _rosbags_outcome(path)
    if exc is None or isinstance(exc, ReaderError):
        pytest.skip(f"this rosbags version handles it: {exc!r}")
    assert isinstance(exc, theirs), repr(exc)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with fastbag.open(path) as bag:
                got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)]
        except fastbag.BagFormatError as error:
            assert ours == "error", error
            assert str(error.path).startswith(str(path)) and error.offset is not None and error.record, error
            assert str(path) in str(error) and f"offset {error.offset}" in str(error)
            return
    assert ours in ("recovered", "partial"), got
    assert [w.category for w in caught] == [fastbag.FastbagWarning], [str(w.message) for w in caught]
    with Reader(original) as reader:
        intact = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
    if ours == "recovered":
        assert got == intact
    else:
        assert not Counter(got) - Counter(intact)


def test_index_data_naming_an_unknown_connection_rosbags_drops_messages_silently(tmp_path):
    """rosbags files the entries of an index-data record naming connection 77 under a connection nobody
    reads: those messages vanish without a word. fastbag notices the unknown connection, rebuilds the index
    from the chunks and reads every message, with one warning saying why."""
    original = tmp_path / "intact.bag"
    int32_bag(original, 20, chunk_size=200, topics=("/a", "/b"))
    data = bytearray(original.read_bytes())
    index_data = next(r for r in fuzz.walk(bytes(data)).records if r.op == 0x04)
    struct.pack_into("<I", data, index_data.fields["conn"][0], 77)
    path = tmp_path / "damaged.bag"
    path.write_bytes(bytes(data))
    with Reader(original) as reader:
        intact = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
    with Reader(path) as reader:
        theirs = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
    if len(theirs) == len(intact):
        pytest.skip("this rosbags version no longer drops them")
    with pytest.warns(fastbag.FastbagWarning, match="connection 77") as record:
        bag = fastbag.open(path)
    with bag:
        assert [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True)] == intact
    assert len(record) == 1 and str(path) in str(record[0].message)


# -- 4. defects found by the campaign --------------------------------------------------------------------


def _one_topic_bag(path: Path, definition: str, payloads: list[bytes], msgtype: str = "p/T") -> None:
    with fastbag.Writer(path) as w:
        c = w.add_connection("/t", msgtype, definition, "*")
        for k, data in enumerate(payloads):
            w.write(c, 10**9 + k, data)


def _read_expecting_fastbag_error(path: Path, topic: str = "/t") -> None:
    with fastbag.open(path) as bag:
        try:
            arr = bag.read(topic)
        except fastbag.FastbagError:
            return
        fuzz.touch(arr)


@pytest.mark.parametrize("definition", ["float64[4294967295] x", "float64[268435456] x", "uint8[4294967296] x",
                                        "p/E[4000000000] e\n" + "=" * 80 + "\nMSG: p/E\n"])
def test_regression_absurd_fixed_array_raises_value_error(tmp_path, definition):
    path = tmp_path / "absurd.bag"
    _one_topic_bag(path, definition, [b"\0" * 8])
    with fastbag.open(path) as bag, pytest.raises(fastbag.DecodeError, match="/t"):
        bag.read("/t")


def test_regression_deep_definition_raises_recursion_error(tmp_path):
    depth, sep = 1200, "=" * 80
    definition = "p/L1 next\n" + "".join(f"{sep}\nMSG: p/L{i}\np/L{i + 1} next\n" for i in range(1, depth)) + \
        f"{sep}\nMSG: p/L{depth}\nuint8 leaf\n"
    path = tmp_path / "deep.bag"
    _one_topic_bag(path, definition, [b"\x07"])
    _read_expecting_fastbag_error(path)


def test_regression_fixed_size_is_allocated_before_it_is_checked(tmp_path):
    path = tmp_path / "big-fixed.bag"
    _one_topic_bag(path, "uint8[1000000000] x", [b"\0" * 4])
    with peak_allocation() as peak:
        _read_expecting_fastbag_error(path)
    assert peak[0] < 64 << 20, f"peak allocation {peak[0]} bytes for a {path.stat().st_size}-byte bag"
    _one_topic_bag(path, "uint8[2147483647] x", [b"\0" * 4] * 3000)
    _read_expecting_fastbag_error(path)  # MemoryError today


def _lz4_chunk_cut(path: Path) -> tuple[bytearray, int]:
    """An lz4 bag whose one chunk spans three 1 MB lz4 blocks (roslz4's size); returns its bytes and the
    frame's offset."""
    rng = np.random.default_rng(0)
    with fastbag.Writer(path, compression="lz4", chunk_size=10**7) as w:
        c = w.add_connection("/a", "std_msgs/UInt8MultiArray", "uint8[] data\n", "*")
        for k in range(600):
            w.write(c, 10**9 + k, struct.pack("<I", 4000) + rng.integers(0, 256, 4000, dtype=np.uint8).tobytes())
    data = bytearray(path.read_bytes())
    return data, data.index(b"\x04\x22\x4d\x18")


def test_regression_cut_lz4_chunk_allocates_its_size_claim(tmp_path):
    path = tmp_path / "cut-lz4.bag"
    data, frame = _lz4_chunk_cut(path)
    size_at = data.index(b"size=") + 5
    struct.pack_into("<I", data, size_at, 0xFFFFFFF0)
    path.write_bytes(bytes(data[:frame + 2_200_000]))  # two complete 1 MB blocks survive the cut
    with peak_allocation() as peak, warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            count = bag.message_count
    assert count >= 500, "the complete messages of the cut chunk are salvaged"
    assert peak[0] < 64 << 20, f"peak allocation {peak[0]} bytes for a {path.stat().st_size}-byte bag"


def test_regression_lz4_content_size_claim_is_allocated(tmp_path):
    path = tmp_path / "claim.bag"
    int32_bag(path, 20, compression="lz4")
    data = path.read_bytes()
    start = data.index(b"\x04\x22\x4d\x18")
    n = struct.unpack_from("<I", data, start - 4)[0]
    frame = fuzz.lz4_with_content_size(data[start:start + n], 1 << 30)
    assert len(frame) == n + 8  # roslz4 frames store no content size: the claim adds its 8 bytes
    bag = bytearray(data[:start - 4] + struct.pack("<I", n + 8) + frame + data[start + n:])
    index_pos = bag.index(b"index_pos=") + 10  # the index section moved 8 bytes on
    struct.pack_into("<Q", bag, index_pos, struct.unpack_from("<Q", bag, index_pos)[0] + 8)
    path.write_bytes(bytes(bag))
    with fastbag.open(path) as bag_before_reading:
        assert bag_before_reading.message_count == 20  # only the frame is forged: the bag is intact
    with peak_allocation() as peak, fastbag.open(path) as bag, pytest.raises(fastbag.BagFormatError):
        list(bag.messages(raw=True))
    assert peak[0] < 64 << 20, f"peak allocation {peak[0]} bytes for a {len(data)}-byte bag"


def test_regression_decompression_bomb(tmp_path):
    path = tmp_path / "bomb.bag"
    int32_bag(path, 20, compression="bz2")
    data = path.read_bytes()
    start = data.index(b"BZh9")
    n = struct.unpack_from("<I", data, start - 4)[0]
    bomb = bz2.compress(b"\0" * 45_000_000, 9) * 2
    out = bytearray(data[:start - 4] + struct.pack("<I", len(bomb)) + bomb + data[start + n:])
    at = out.index(b"index_pos=") + 10
    struct.pack_into("<Q", out, at, struct.unpack_from("<Q", out, at)[0] + len(bomb) - n)
    path.write_bytes(bytes(out))
    with peak_allocation() as peak, fastbag.open(path) as bag, pytest.raises(fastbag.BagFormatError, match="bz2"):
        list(bag.messages(raw=True))
    assert peak[0] < 16 << 20, f"peak allocation {peak[0]} bytes for a {len(out)}-byte bag"


def _pointcloud_bag(path: Path, count: int, offset_y: int | None = None) -> None:
    def s(b: bytes) -> bytes:
        return struct.pack("<I", len(b)) + b
    fields = [(b"x", 0, count)] + ([(b"y", offset_y, 1)] if offset_y is not None else [])
    msg = struct.pack("<III", 0, 1, 0) + s(b"lidar") + struct.pack("<II", 1, 1) + struct.pack("<I", len(fields))
    msg += b"".join(s(name) + struct.pack("<IBI", off, 7, n) for name, off, n in fields)
    msg += struct.pack("<BII", 0, 8, 8) + s(b"\0" * 8) + b"\x01"
    with fastbag.Writer(path) as w:
        t = synth.POINTCLOUD2
        w.write(w.add_connection("/points", t.name, t.definition, t.md5sum), 10**9, msg)


def test_regression_pointcloud_field_count(tmp_path):
    path = tmp_path / "cloud.bag"
    _pointcloud_bag(path, 0x7FFFFFFF)
    with fastbag.open(path) as bag:
        cloud = bag.read("/points")
        with pytest.raises(fastbag.DecodeError):
            list(fastbag.pointcloud(cloud))


def test_regression_chunk_info_with_a_duplicated_connection_loses_messages_silently(tmp_path):
    path = tmp_path / "dup.bag"
    int32_bag(path, 3, topics=("/a", "/b"))
    data = bytearray(path.read_bytes())
    pairs = len(data) - 16  # the last chunk info's data: (conn, count) x 2
    assert struct.unpack_from("<IIII", data, pairs) == (0, 3, 1, 3)
    struct.pack_into("<I", data, pairs + 8, 0)
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(path) as bag:
            count = bag.message_count
    assert count == 6 or caught, "3 of 6 messages vanished without a warning"


def test_regression_image_of_a_definition_without_height(tmp_path):
    path = tmp_path / "image.bag"
    t = synth.IMAGE
    definition = t.definition.replace("uint32 height\n", "", 1)
    msg = next(iter(synth.image(np.array([10**9]), np.random.default_rng(0), height=2, width=2)))
    header = 4 + 8 + 4 + len(b"camera")  # seq, stamp, frame_id; then height (dropped), width, ...
    with fastbag.Writer(path) as w:
        w.write(w.add_connection("/camera", t.name, definition, t.md5sum), 10**9, msg[:header] + msg[header + 4:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)  # the md5sum no longer matches
        with fastbag.open(path) as bag:
            try:
                images = bag.read("/camera")
            except fastbag.FastbagError:
                pytest.skip("the damaged message does not decode")
            with pytest.raises(fastbag.FastbagError):
                fastbag.image(images)


def test_regression_pointcloud_decode_error_names_no_topic(tmp_path):
    path = tmp_path / "cloud.bag"
    _pointcloud_bag(path, 1, offset_y=6)  # y at offset 6 does not fit an 8-byte point
    with fastbag.open(path) as bag:
        cloud = bag.read("/points")
        with pytest.raises(fastbag.DecodeError) as info:
            list(fastbag.pointcloud(cloud))
    assert info.value.topic == "/points" and info.value.index == 0, str(info.value)

def assert_other_chunks_survive(path: Path, s: Any, victim: int) -> None:
    """Every message of every chunk but ``victim`` reads back from the damaged bag at ``path``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            got = Counter((m.time, bytes(m.data)) for m in bag.messages(raw=True))
    others = Counter((m.time, m.data) for k, c in enumerate(s.chunks) if k != victim for m in c.messages)
    assert not others - got, f"lost {sum((others - got).values())} messages of intact chunks"


@pytest.mark.parametrize("delta", [+1000, -5, 0xFFFFFFFF], ids=["longer", "shorter", "u32max"])
def test_regression_damaged_chunk_length_loses_every_later_chunk(tmp_path, delta):
    path = tmp_path / "chunks.bag"
    int32_bag(path, 100, chunk_size=300)
    data = bytearray(path.read_bytes())
    s = fuzz.walk(bytes(data))
    struct.pack_into("<Q", data, s.records[0].fields["index_pos"][0], 0)
    chunk = s.chunks[3].rec
    struct.pack_into("<I", data, chunk.data_start - 4, delta if delta > 0xFFFF else chunk.data_len + delta)
    path.write_bytes(bytes(data))
    assert_other_chunks_survive(path, s, victim=3)


def test_regression_zero_size_elements_make_work_unbounded(tmp_path):
    n, sep = 3_000_000, "=" * 80
    path = tmp_path / "zero.bag"
    _one_topic_bag(path, f"p/Z[{n}] zs\n{sep}\nMSG: p/Z\nstring[0] nothing\n", [b""])
    with peak_allocation() as peak:
        _read_expecting_fastbag_error(path)
    assert peak[0] < 64 << 20, f"peak allocation {peak[0]} bytes for a {path.stat().st_size}-byte bag"


def test_regression_definition_parse_is_quadratic():
    from fastbag.msg.msgdef import parse_definition

    def parse_seconds(n: int) -> float:
        text = "p/T0 f\n" + "".join(f"===\nMSG: p/T{i}\nQ{i} f\n" for i in range(n))
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            with pytest.raises(fastbag.DefinitionError):
                parse_definition("p/Main", text)
            best = min(best, time.perf_counter() - start)
        return best
    small, large = parse_seconds(1000), parse_seconds(4000)
    # Linear work takes ~4x, quadratic 16x; 11x leaves room for a loaded machine (9x was seen under load 6).
    assert large < 11 * small, f"4x the blocks took {large / small:.1f}x the time ({small:.3f} s -> {large:.3f} s)"


def test_regression_v12_bag_cut_in_its_index_loses_topics_silently(tmp_path):
    path = tmp_path / "v12.bag"
    fuzz.write_v12(str(path), seed=0, indexed=True)  # 36 messages on 3 topics, one index record per topic
    data = path.read_bytes()
    first_index = next(r for r in fuzz.walk(data).records if r.op == 0x04)
    path.write_bytes(data[:first_index.end])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(path) as bag:
            count = bag.message_count
    assert count == 36 or caught, f"{count} of 36 messages, no warning"


def test_regression_scan_of_a_time_with_nsec_overflowing(tmp_path):
    path = tmp_path / "time.bag"
    int32_bag(path, 3)
    data = bytearray(path.read_bytes())
    s = fuzz.walk(bytes(data))
    struct.pack_into("<Q", data, s.records[0].fields["index_pos"][0], 0)
    message = next(r for r in s.inner if r.op == 0x02)
    struct.pack_into("<II", data, message.fields["time"][0], 0xFFFFFFFF, 0xFFFFFFFF)  # sec, nsec
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        try:
            fastbag.open(path).close()
        except fastbag.FastbagError:
            pass


def test_regression_chunk_pos_near_2_63_leaks_a_runtime_warning(tmp_path):
    path = tmp_path / "pos.bag"
    int32_bag(path, 100, chunk_size=300)
    data = bytearray(path.read_bytes())
    info = [r for r in fuzz.walk(bytes(data)).records if r.op == 0x06][2]
    struct.pack_into("<Q", data, info.fields["chunk_pos"][0], (1 << 63) - 1)
    path.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fastbag.open(path) as bag:
            assert bag.message_count == 100
    assert [w.category for w in caught] == [fastbag.FastbagWarning], [str(w.message) for w in caught]


def test_regression_record_posing_as_a_connection_stops_recovery(tmp_path):
    path = tmp_path / "conn.bag"
    int32_bag(path, 100, chunk_size=300)
    data = bytearray(path.read_bytes())
    s = fuzz.walk(bytes(data))
    struct.pack_into("<Q", data, s.records[0].fields["index_pos"][0], 0)
    data[s.chunks[5].rec.fields["op"][0]] = 0x07
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            got = Counter((m.time, bytes(m.data)) for m in bag.messages(raw=True))
    others = Counter((m.time, m.data) for k, c in enumerate(s.chunks) if k != 5 for m in c.messages)
    assert not others - got


# -- D18-D20, found by a campaign against the fixed library; fixed -------------------------------


def test_regression_long_chunk_length_swallows_intact_chunks(tmp_path):
    path = tmp_path / "long.bag"
    int32_bag(path, 100, chunk_size=300, compression="lz4")
    data = bytearray(path.read_bytes())
    s = fuzz.walk(bytes(data))
    struct.pack_into("<Q", data, s.records[0].fields["index_pos"][0], 0)
    chunk, covered = s.chunks[3].rec, s.chunks[5].rec
    struct.pack_into("<I", data, chunk.data_start - 4, covered.data_start + 10 - chunk.data_start)
    path.write_bytes(bytes(data))
    assert_other_chunks_survive(path, s, victim=3)


def test_regression_empty_elements_are_capped_per_run_not_per_read(tmp_path):
    path = tmp_path / "empty-elements.bag"
    with fastbag.Writer(path, chunk_size=1, compression="lz4") as w:  # one message per chunk
        c = w.add_connection("/t", "p/T", f"p/Z[1000000] zs\n{'=' * 80}\nMSG: p/Z\nstring[0] nothing\n", "*")
        for k in range(4):
            w.write(c, 10**9 + k, b"")
    with peak_allocation() as peak, fastbag.open(path) as bag:
        try:
            bag.read("/t")
        except fastbag.DecodeError:
            pass
    assert peak[0] < 64 << 20, f"peak allocation {peak[0]} bytes for a {path.stat().st_size}-byte bag"


def test_regression_image_encoding_error_names_nothing(tmp_path):
    path = tmp_path / "encoding.bag"
    msg = next(iter(synth.image(np.array([10**9]), np.random.default_rng(0), height=2, width=2)))
    with fastbag.Writer(path) as w:
        t = synth.IMAGE
        w.write(w.add_connection("/camera", t.name, t.definition, t.md5sum), 10**9, msg.replace(b"rgb8", b"2gb8"))
    with fastbag.open(path) as bag:
        images = bag.read("/camera")
        with pytest.raises(fastbag.UnsupportedError) as info:
            fastbag.image(images)
    assert "/camera" in str(info.value) and "message 0" in str(info.value), str(info.value)


def test_regression_decoded_messages_allocate_the_fixed_size_claim(tmp_path):
    path = tmp_path / "big-fixed.bag"
    _one_topic_bag(path, "uint8[1000000000] x", [b"\0" * 8])
    with peak_allocation() as peak, fastbag.open(path) as bag, pytest.warns(fastbag.FastbagWarning):
        got = list(bag.messages())
    assert peak[0] < 64 << 20, f"peak allocation {peak[0]} bytes for a {path.stat().st_size}-byte bag"
    with pytest.raises(fastbag.DecodeError):
        got[0].msg.x
    del got  # (its messages view the file: the Writer refuses to write over a file still mapped)
    _one_topic_bag(path, "uint8[1000000000] x", [b"\0" * 8] * 77)
    with peak_allocation() as peak, fastbag.open(path) as bag, pytest.warns(fastbag.FastbagWarning):
        assert not any(m.msg for m in bag.messages())  # each message tried alone, none allocated
    assert peak[0] < 64 << 20


def test_regression_chunk_listed_many_times_allocates_its_entries_each_time(tmp_path):
    """Defect D25, found reviewing the one-read-per-chunk index path: a 3 MB bag whose index lists
    its one chunk 3,000 times made open count every message 3,000 times (297 MB traced for 200)."""
    path = tmp_path / "listed-twice.bag"
    int32_bag(path, 50_000, chunk_size=10**7)
    data = path.read_bytes()
    info_at = data.rindex(b"\x04\x00\x00\x00op=\x06") - 4  # the one chunk-info record, the last in the file
    bag = bytearray(data + data[info_at:] * 3000)
    chunk_count = bag.index(b"chunk_count=") + 12
    assert struct.unpack_from("<I", bag, chunk_count)[0] == 1
    struct.pack_into("<I", bag, chunk_count, 3001)
    path.write_bytes(bytes(bag))
    with peak_allocation() as peak, pytest.warns(fastbag.FastbagWarning, match="twice"):
        with fastbag.open(path) as opened:
            assert opened.message_count == 50_000
            assert [(m.topic, m.time, bytes(m.data)) for m in opened.messages(raw=True)] == \
                [("/a", 10**9 + k, struct.pack("<i", k)) for k in range(50_000)]
    assert peak[0] < 64 << 20, f"peak allocation {peak[0]} bytes for a {path.stat().st_size}-byte bag"


def test_read_cap_on_empty_elements_names_the_message(tmp_path):
    """Fuzz defect D22 (fixed): the read-wide cap on elements that take no bytes named no message."""
    path = tmp_path / "cap.bag"
    with fastbag.Writer(path, chunk_size=1, compression="lz4") as w:  # one message per chunk
        c = w.add_connection("/t", "p/T", f"p/Z[100000] zs\n{'=' * 80}\nMSG: p/Z\nstring[0] nothing\n", "*")
        for k in range(4):
            w.write(c, 10**9 + k, b"")
    with fastbag.open(path) as bag, pytest.raises(fastbag.DecodeError) as info:
        bag.read("/t")
    # Each message claims 100,000 empty elements: the third crosses the 2^18 cap (one run per chunk).
    assert info.value.topic == "/t" and info.value.index == 2, str(info.value)


# -- 5. MCAP: the harness's walk and rewriting, and the guarantees on generated MCAP files ------------------

MCAP_SEEDS = ["gen-mcap-none", "gen-mcap-lz4", "gen-mcap-zstd", "gen-mcap-unchunked", "gen-mcap-none-datacrc",
              "gen-mcap-zstd-unindexed"]


@pytest.fixture(scope="module")
def mcap_seeds(tmp_path_factory) -> dict[str, fuzz.Seed]:
    pytest.importorskip("mcap", reason="the mcap package (test extra) writes the MCAP seeds")
    root = tmp_path_factory.mktemp("mcap-seeds")
    return {Path(s.path).stem: fuzz.Seed(s) for s in fuzz_mcap.build_generated(root, seed=5)}


def _mcap_reader_rows(data: bytes) -> Counter:
    from mcap.reader import NonSeekingReader
    import io
    return Counter((c.topic, m.log_time, m.data) for _, c, m in NonSeekingReader(io.BytesIO(data)).iter_messages())


@pytest.mark.parametrize("name", MCAP_SEEDS)
def test_mcap_walk_agrees_with_the_mcap_reader(mcap_seeds, name):
    """The harness's own walk finds every message the mcap package reads, and fastbag reads the same."""
    seed = mcap_seeds[name]
    walked = Counter((m.topic, m.time, m.data) for m in seed.structure.messages)
    assert len(seed.structure.messages) == 60 and walked == _mcap_reader_rows(seed.data)
    assert Counter(seed.reference.raw) == walked and not seed.reference.problems
    assert len(seed.reference.attachments) == 2 and len(seed.reference.metadata) == 2


def _recompressed(codec: str, payload: bytes) -> bytes:
    """The same records compressed otherwise (another length): lz4 at its highest level, zstd at level 19."""
    if codec == "lz4":
        import lz4.frame
        return lz4.frame.compress(payload, compression_level=16, content_checksum=True)
    import zstandard
    return zstandard.ZstdCompressor(level=19, write_checksum=True).compress(payload)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_mcap_chunk_replaced_keeps_the_file_coherent(mcap_seeds, scratch, codec):
    """The rewriting the codec and payload mutators use: every chunk recompressed (another length) with
    every pointer after it moved reads exactly as before, in fastbag (through the summary, no warning) and
    in the mcap package. So the damage a mutator then does is the only thing wrong."""
    from mcap.reader import make_reader
    import io
    seed = mcap_seeds[f"gen-mcap-{codec}"]
    s = seed.structure
    data = seed.data
    for k in range(len(s.chunks)):
        walked = fuzz_mcap.walk(data)  # the file as the previous splice left it
        c = walked.chunks[k]
        new = fuzz_mcap.chunk_record(c, data, records=_recompressed(codec, c.payload))
        assert len(new) != c.rec.end - c.rec.start
        data = fuzz_mcap.splice(data, walked, c.rec.start, c.rec.end, new, c)
    name = codec
    path = scratch / f"respliced-{name}.mcap"
    path.write_bytes(data)
    out = run(path)
    assert not problems(out) and not out.warnings and out.raw == seed.reference.raw
    assert out.attachments == seed.reference.attachments and out.metadata == seed.reference.metadata
    rows_ = [(c.topic, m.log_time, m.data) for _, c, m in make_reader(io.BytesIO(data)).iter_messages(
        log_time_order=True)]
    assert Counter(rows_) == Counter(seed.reference.raw)


@pytest.mark.parametrize("name", ["gen-mcap-none", "gen-mcap-zstd", "gen-mcap-unchunked"])
@settings(max_examples=30, **PROPERTY)
@given(data=st.data())
def test_mcap_cut_anywhere_keeps_every_complete_record(mcap_seeds, scratch, name, data):
    """An MCAP file cut at any byte yields every message of every complete chunk (and every complete
    message outside chunks) whose channel came before the cut, the complete attachments, nothing the file
    does not hold, in time order, with a warning when something was lost: the campaign's mcap-cut oracle."""
    seed = mcap_seeds[name]
    size = len(seed.data)
    cut = data.draw(st.one_of(st.integers(0, size), st.sampled_from(seed.structure.boundaries()).flatmap(
        lambda b: st.integers(max(0, b - 2), min(size, b + 2)))), label="cut")
    path = scratch / f"cut-{name}.mcap"
    path.write_bytes(seed.data[:cut])
    out = run(path)
    mutant = fuzz.Mutant(seed.data[:cut], "mcap-cut-random", f"cut at {cut}", ("mcap-cut", cut))
    found = problems(out) + [p.text for p in fuzz.check_consistency(out, mutant) +
                             fuzz.check_oracle(out, mutant, seed)]
    assert not found, (cut, found)
    if cut >= seed.structure.chunks[0].rec.end if seed.structure.chunks else cut >= size - 8:
        assert out.raw, f"cut at {cut}: nothing read"  # (the oracle names what is missing; this, that it ran)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("declared", [True, False], ids=["size-declared", "size-undeclared"])
def test_mcap_decompression_bomb_allocates_nothing_near_its_size(mcap_seeds, scratch, codec, declared):
    """A chunk whose frame expands to 64 / 256 MiB while the chunk says a few kB: a BagFormatError naming the
    chunk, peak allocation far below the bomb, and the other chunks still read."""
    seed = mcap_seeds[f"gen-mcap-{codec}"]
    s = seed.structure
    c = s.chunks[0]
    if codec == "lz4":
        bomb = fuzz._lz4_zeros(64 << 20)
        bomb = fuzz.lz4_with_content_size(bomb, 64 << 20) if declared else bomb
    else:
        bomb = fuzz_mcap.zstd_zeros(256 << 20, declared)
    path = scratch / f"bomb-{codec}.mcap"
    path.write_bytes(fuzz_mcap.splice(seed.data, s, c.rec.start, c.rec.end, fuzz_mcap.chunk_record(c, seed.data,
                                                                                                   records=bomb), c))
    with peak_allocation() as peak:
        with fastbag.open(path) as bag:
            with pytest.raises(fastbag.BagFormatError) as info:
                list(bag.messages(raw=True))
            after = max(m.time for m in c.messages) + 1  # the other chunks' messages, read by time
            got = [(m.topic, m.time, bytes(m.data)) for m in bag.messages(raw=True, start=after)]
    assert info.value.offset == c.rec.start and info.value.record == "chunk" and str(path) in str(info.value)
    assert peak[0] < 16 << 20, peak[0]
    assert got and got == [r for r in seed.reference.raw if r[1] >= after]


@pytest.mark.parametrize("name", ["gen-mcap-none", "gen-mcap-lz4", "gen-mcap-zstd", "gen-mcap-lz4-nocrc"])
@pytest.mark.parametrize("damage", ["flip", "cut", "empty"])
def test_mcap_damaged_chunk_leaves_later_chunks_readable(mcap_seeds, scratch, name, damage):
    """The campaign's mcap-chunk oracle: a chunk's records damaged (its head still what its index says):
    reading from after its last message yields every later message exactly, and reading all of them
    raises a BagFormatError naming that chunk (or, where nothing checks the records, reads them)."""
    seed = mcap_seeds[name]
    s = seed.structure
    c = s.chunks[0]
    raw = bytearray(seed.data[c.records_start:c.records_start + c.records_len])
    if damage == "flip":
        for at in range(len(raw) // 3, len(raw), 97):
            raw[at] ^= 0x5A
    elif damage == "cut":
        del raw[len(raw) // 2:]
    else:
        raw = bytearray()
    path = scratch / f"chunk0-{name}-{damage}.mcap"
    path.write_bytes(fuzz_mcap.splice(seed.data, s, c.rec.start, c.rec.end,
                                      fuzz_mcap.chunk_record(c, seed.data, records=bytes(raw)), c))
    after = max(m.time for m in c.messages) + 1
    out = run(path, after=after)
    mutant = fuzz.Mutant(b"", "mcap-codec", damage, ("mcap-chunk", 0, after,
                                                     tuple(r for r in seed.reference.raw if r[1] >= after)))
    found = problems(out) + [p.text for p in fuzz.check_consistency(out, mutant) +
                             fuzz.check_oracle(out, mutant, seed)]
    assert not found, found
    assert out.after_raw and len(out.after_raw) < len(seed.reference.raw)
    if name != "gen-mcap-lz4-nocrc" or damage != "flip":  # (lz4 without CRCs may decode damage silently)
        # the chunk, or (uncompressed, read in place) the damaged record in it
        assert out.raw is None and out.raw_error.startswith("BagFormatError"), out.raw_error
        offset = int(out.raw_error.rsplit("offset ", 1)[1].split(",")[0])
        assert c.rec.start <= offset < c.rec.end, out.raw_error
