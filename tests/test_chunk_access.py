"""Reads touch only their chunks: reading one topic never decompresses, copies or reads the messages
of chunks that hold none of its messages.

A generated bag of two topics at very different rates, in small chunks, so
that most chunks hold only the fast topic. Every decompression goes through
``fastbag.io.chunks.decompress``, or ``decompress_together`` for small chunks
in batches (both wrapped here to record which chunks), and
every message of an uncompressed chunk is read where ``Bag._runs`` says it
lies (wrapped to record the spans); both are compared with the chunks the
index lists for the topic.
"""

from __future__ import annotations

import numpy as np
import pytest

import fastbag
import fastbag.io.chunks as chunks_module
from fastbag.bag import Bag

FLOAT64 = ("std_msgs/Float64", "float64 data\n", "fdb28210bfa9d7c91146260178d9a584")


def write_two_topics(path, compression: str) -> None:
    """/slow: 1 message a second; /fast: 100 a second, 200 bytes each; chunks of 4 KiB."""
    rng = np.random.default_rng(1)
    with fastbag.Writer(path, compression=compression, chunk_size=4096) as w:
        slow = w.add_connection("/slow", *FLOAT64)
        fast = w.add_connection("/fast", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        for k in range(2000):  # 20 s
            t = 10**9 + k * 10_000_000
            body = rng.integers(0, 256, 196).astype(np.uint8).tobytes()
            w.write(fast, t, len(body).to_bytes(4, "little") + body)
            if k % 100 == 50:
                w.write(slow, t + 1, np.float64(k).tobytes())


def topic_chunks(bag: fastbag.Bag, topic: str) -> set[int]:
    """Positions of the chunks the index lists for ``topic``."""
    index = bag._index
    ids = [k for k, c in enumerate(index.connections) if c.topic == topic]
    return {int(index.chunks.position[c]) for c in np.unique(index.chunk[np.isin(index.conn, ids)])}


def record_batches(monkeypatch, decompressed: list[int]) -> None:
    """Record in ``decompressed`` the positions of the chunks ``decompress_together`` decompresses."""
    real = chunks_module.decompress_together

    def recording(source, table, batch, out, bases):
        done = real(source, table, batch, out, bases)
        decompressed.extend(table.position[batch[:done]].tolist())
        return done

    monkeypatch.setattr(chunks_module, "decompress_together", recording)


@pytest.mark.parametrize("compression", ["lz4", "bz2"])
def test_a_compressed_topic_read_decompresses_only_its_chunks(tmp_path, monkeypatch, compression: str) -> None:
    path = tmp_path / f"two-{compression}.bag"
    write_two_topics(path, compression)
    decompressed: list[int] = []
    real = chunks_module.decompress

    def recording(source, chunk, *args):
        decompressed.append(chunk.position)
        return real(source, chunk, *args)

    monkeypatch.setattr(chunks_module, "decompress", recording)
    record_batches(monkeypatch, decompressed)
    with fastbag.open(path, workers=2) as bag:
        wanted = topic_chunks(bag, "/slow")
        every = set(bag._index.chunks.position.tolist())
        assert len(wanted) == 20 and len(every) > 100  # most chunks hold none of /slow
        assert not decompressed  # opening decompresses nothing
        arr = bag.read("/slow")
        assert arr["data"].tolist() == [float(k) for k in range(50, 2000, 100)]
        assert sorted(decompressed) == sorted(wanted)  # each of its chunks once, no other
        decompressed.clear()
        assert [m.msg.data for m in bag.messages(topics="/slow")] == arr["data"].tolist()
        assert set(decompressed) <= wanted  # cached since the read, or decompressed again: only its own
    with fastbag.open(path) as bag:  # a fresh handle, messages only
        decompressed.clear()
        assert len(list(bag.messages(topics=["/slow"], raw=True))) == 20
        assert sorted(decompressed) == sorted(wanted)


def test_an_uncompressed_topic_read_touches_only_its_chunks(tmp_path, monkeypatch) -> None:
    path = tmp_path / "two-none.bag"
    write_two_topics(path, "none")
    spans: list[tuple[int, int]] = []
    real = Bag._runs

    def recording(self, index, selected, **kw):
        for run in real(self, index, selected, **kw):
            _, base, _, _, starts, lengths = run
            assert base == 0  # uncompressed: offsets into the file
            spans.extend(zip(starts.tolist(), lengths.tolist()))
            yield run

    decompressed: list[int] = []
    real_decompress = chunks_module.decompress
    monkeypatch.setattr(Bag, "_runs", recording)
    monkeypatch.setattr(chunks_module, "decompress",
                        lambda source, chunk, *args: decompressed.append(chunk.position) or
                        real_decompress(source, chunk, *args))
    record_batches(monkeypatch, decompressed)
    with fastbag.open(path) as bag:
        table = bag._index.chunks
        wanted = topic_chunks(bag, "/slow")
        ranges = [(int(table.data_offset[k]), int(table.data_offset[k] + table.size[k]))
                  for k in range(len(table)) if int(table.position[k]) in wanted]
        arr = bag.read("/slow")
        raw = [bytes(m.data) for m in bag.messages(topics="/slow", raw=True)]
    assert arr["data"].tolist() == [float(k) for k in range(50, 2000, 100)]
    assert raw == [np.float64(k).tobytes() for k in range(50, 2000, 100)]
    assert len(spans) == 40  # 20 messages, read twice
    # every message read lies in a chunk the index lists for the topic, and each such chunk is read
    inside = [next((r for r in ranges if r[0] <= s and s + n <= r[1]), None) for s, n in spans]
    assert None not in inside and set(inside) == set(ranges)
    assert set(decompressed) <= wanted  # an uncompressed chunk "decompressed" is a view of its own bytes


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_index_entries_make_the_table_numpy_makes_of_them(tmp_path, monkeypatch, compression) -> None:
    """The message table the entries kernel writes in one pass (as for a bag of more messages than
    ``NUMPY_UP_TO``) equals the one NumPy builds from the same index-data entries (gathered per record,
    converted, repeated per record), and reads back what was written."""
    from fastbag.container import build_index
    from fastbag.ros1 import index as ros1_index

    monkeypatch.setattr(ros1_index, "NUMPY_UP_TO", 0)
    path = tmp_path / "two.bag"
    write_two_topics(path, compression)
    with fastbag.open(path) as bag:
        deferred = bag._container._deferred
        records, buf = deferred.records, deferred.buf
        entries = np.concatenate([buf[a:a + 12 * n] for a, n in zip(records[:, 3], records[:, 4])]).view("<u4")
        entries = entries.reshape(-1, 3).astype(np.int64)
        counts = records[:, 4]
        want = build_index("2.0", deferred.connections, deferred.chunks, np.repeat(records[:, 1], counts),
                           np.repeat(records[:, 2], counts), entries[:, 0] * 1_000_000_000 + entries[:, 1],
                           entries[:, 2])
        got = bag._index
        for name in ("time", "conn", "chunk", "offset"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name
            assert getattr(got, name).dtype == getattr(want, name).dtype, name
        assert got.time.size == 2020 and (np.diff(got.time) > 0).all() and np.unique(got.chunk).size > 2
        assert bag.read("/slow")["data"].tolist() == [float(k) for k in range(50, 2000, 100)]


def test_every_open_bags_cache_together_stays_within_the_process_bound(tmp_path, monkeypatch) -> None:
    """Each bag's cache_bytes bounds one bag; a process holding many open (a dataset, a list of bags) held
    hundreds of times that (QA: 500 handles, 17.8 GB). Now every cache together stays within LEDGER.limit,
    the least recently used bag giving up its chunks first, and what is read is unchanged."""
    ledger = chunks_module.LEDGER
    before = ledger.total
    monkeypatch.setattr(ledger, "limit", before + (3 << 20))
    rng = np.random.default_rng(5)
    expected, bags = [], []
    for k in range(6):
        path = tmp_path / f"b{k}.bag"
        rows = rng.integers(0, 256, (3000, 508)).astype(np.uint8)  # 1.5 MB of incompressible data: 3 chunks
        with fastbag.Writer(path, compression="lz4", chunk_size=512 << 10) as w:
            c = w.add_connection("/u", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
            for j, row in enumerate(rows):
                w.write(c, 10**9 + j, len(row).to_bytes(4, "little") + row.tobytes())
        expected.append(rows)
        bags.append(fastbag.open(path))
    try:
        for k, bag in enumerate(bags):
            got = [bytes(m.data)[4:] for m in bag.messages(raw=True)]  # (a message loop caches its chunks)
            assert got == [row.tobytes() for row in expected[k]]
            held = [b._store._cached for b in bags]
            assert held[k] > 0 and ledger.total - before == sum(held) <= 3 << 20
        assert held[0] == 0 and held[-1] > 0  # (the least recently used gave up its chunks first)
        assert sum(b._store._cached for b in bags[:3]) == 0
        bags[0].take("/u", [0, 2999])  # used again: now another bag is the least recently used
        assert bags[0]._store._cached > 0 and bags[1]._store._cached < held[1] + 1
    finally:
        for bag in bags:
            bag.close()
    assert ledger.total == before


def _lz4_bags(folder, count: int, rows: int = 1500, chunk_size: int = 256 << 10) -> list:
    """``count`` lz4 bags of one topic of 500-byte random strings, in chunks of ``chunk_size`` bytes."""
    rng = np.random.default_rng(9)
    paths = []
    for k in range(count):
        paths.append(folder / f"t{k}-{chunk_size}.bag")
        with fastbag.Writer(paths[-1], compression="lz4", chunk_size=chunk_size) as w:
            c = w.add_connection("/u", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
            for j in range(rows):
                row = rng.integers(0, 256, 496).astype(np.uint8).tobytes()
                w.write(c, 10**9 + j, len(row).to_bytes(4, "little") + row)
    return paths


def test_threads_evicting_at_once_keep_the_process_bound_and_its_count(tmp_path, monkeypatch) -> None:
    """Threads reading many bags at once, the bound small: two trims racing made the ledger forget a store
    that had cached again meanwhile (QA: the bound not held, its total negative after every bag closed)."""
    import random
    import sys
    import threading

    ledger = chunks_module.LEDGER
    before = ledger.total
    monkeypatch.setattr(ledger, "limit", before + 700_000)
    switch = sys.getswitchinterval()
    bags = [fastbag.open(p, workers=1) for p in _lz4_bags(tmp_path, 6)]
    want = {(k, j): bag.take("/u", [j])["data"][0] for k, bag in enumerate(bags) for j in (0, 700, 1499)}
    errors = []

    def reader(seed: int) -> None:
        r = random.Random(seed)
        try:
            for _ in range(300):
                k, j = r.randrange(6), r.choice((0, 700, 1499))
                assert bags[k].take("/u", [j])["data"][0] == want[k, j]
        except BaseException as exc:  # noqa: BLE001 - said below
            errors.append(exc)

    sys.setswitchinterval(1e-6)  # (thread switches everywhere: the race showed within a second)
    try:
        threads = [threading.Thread(target=reader, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(switch)
    assert not errors and not any(t.is_alive() for t in threads)
    held = sum(b._store._cached for b in bags)
    assert ledger.total - before == held <= 700_000
    for bag in bags:
        bag.close()
    assert ledger.total == before


def test_a_read_under_way_when_its_bag_closes_caches_nothing_for_it(tmp_path) -> None:
    """A read still running when another thread closed the bag cached its chunk into the closed bag's store:
    kept (and counted against the process bound) as long as the closed Bag object lived."""
    import threading
    import time

    ledger = chunks_module.LEDGER
    before = ledger.total
    path = _lz4_bags(tmp_path, 1, rows=6000)[0]
    kept = []
    for trial in range(10):
        bag = fastbag.open(path)

        def read(bag=bag) -> None:
            try:
                for j in range(0, 6000, 97):
                    bag.take("/u", [j])
            except ValueError:  # closed under the read: said so
                pass

        thread = threading.Thread(target=read)
        thread.start()
        time.sleep(0.002 * trial)
        bag.close()
        thread.join(60)
        kept.append(bag._store._cached)
    assert kept == [0] * 10 and ledger.total == before


def test_the_least_recently_used_bag_gives_up_its_chunks_before_the_one_being_read(tmp_path, monkeypatch) -> None:
    """Over the process bound, evictions come from the bag used least recently: the ledger moved a bag giving
    up a chunk to the most recently used end, so the next eviction fell on the bag being read, even on the
    chunk it had just cached (review)."""
    ledger = chunks_module.LEDGER
    before = ledger.total
    idle_path, = _lz4_bags(tmp_path, 1, rows=6000)  # chunks of 256 KiB
    active_path, = _lz4_bags(tmp_path, 1, rows=4000, chunk_size=1 << 20)  # each needs four of them evicted
    idle, active = fastbag.open(idle_path), fastbag.open(active_path)
    try:
        for _ in idle.messages(raw=True):  # every chunk of the idle bag cached
            pass
        cached = idle._store._cached
        assert len(idle._store._cache) >= 10
        monkeypatch.setattr(ledger, "limit", before + cached)
        for _ in active.messages(raw=True):  # the active bag caches its chunks, one by one
            pass
        kept = active._store._cache
        assert len(kept) >= 2 and active._store._cached == sum(kept[k].nbytes for k in kept)
        assert sorted(kept) == list(range(len(active._index.chunks)))  # none of its own given up...
        assert 0 < idle._store._cached < cached // 2  # ...but the idle bag's
        assert ledger.total - before == idle._store._cached + active._store._cached <= cached
    finally:
        idle.close()
        active.close()


def test_a_store_collected_while_the_ledger_is_locked_does_not_hang_the_process(tmp_path) -> None:
    """A ChunkStore's finalizer forgets it in the ledger; the garbage collector runs finalizers on whatever
    thread it interrupts, which since Python 3.12 can be any thread between any two bytecodes, so also one
    inside the ledger's lock (a read's cache hit, touch()). The finalizer waited for that lock, held by its
    own thread: the process hung (the whole suite under Python 3.13, in a fuzz test). Now a forgotten store
    is noted without the lock and dropped at the ledger's next call: here the finalizer runs with the lock
    held, as the collector would run it, and the count is right after."""
    import threading

    ledger = chunks_module.LEDGER
    path = tmp_path / "b.bag"
    rows = np.random.default_rng(3).integers(0, 256, (3000, 508)).astype(np.uint8)  # 3 chunks, incompressible
    with fastbag.Writer(path, compression="lz4", chunk_size=512 << 10) as w:
        c = w.add_connection("/u", "std_msgs/String", "string data\n", "992ce8a1687cec8c8bd883ec73ca41d1")
        for j, row in enumerate(rows):
            w.write(c, 10**9 + j, len(row).to_bytes(4, "little") + row.tobytes())
    before = ledger.total
    bag = fastbag.open(path)
    sum(1 for _ in bag.messages(raw=True))  # (a message loop caches its chunks)
    key, cached = bag._store.ledger_key, bag._store._cached
    assert cached > 0 and ledger.total == before + cached

    def collected_inside_the_lock() -> None:
        with ledger._lock:
            ledger.forget(key)  # what the store's finalizer calls, on the thread the collector interrupted

    thread = threading.Thread(target=collected_inside_the_lock, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the finalizer waited for the ledger's lock its own thread held"
    with fastbag.open(path) as other:
        sum(1 for _ in other.messages(raw=True))  # (the ledger's next calls drop the forgotten store's count)
    assert ledger.total == before
    bag._store._cached = 0  # (the ledger forgot this store: its close must not count it off again)
    bag.close()


LEDGER_COLLECTS = """
import gc, sys
from collections import OrderedDict
import fastbag
from fastbag.io import chunks

class Collecting(OrderedDict):
    touched = 0
    def move_to_end(self, *args, **kwargs):
        super().move_to_end(*args, **kwargs)
        if not Collecting.touched:  # where Python 3.13's collector ran: right after the call
            Collecting.touched += 1
            gc.collect()

gc.disable()  # (nothing collected but where this script collects)
live, gone = fastbag.open(sys.argv[1]), fastbag.open(sys.argv[2])
live.take("/u", [0])
for _ in gone.messages(raw=True):  # its chunks cached, counted in the ledger
    pass
held = gone._store._cached
assert held > 0
gone._cycle = gone  # garbage only the cyclic collector frees
del gone
chunks.LEDGER._held = Collecting(chunks.LEDGER._held)
live.take("/u", [0])  # a cache hit: LEDGER.touch, its lock held, the collector running inside it
assert Collecting.touched == 1, "no cache hit"
live.take("/u", [5999])  # another chunk cached: the ledger's next change forgets the collected store
print(chunks.LEDGER.total, live._store._cached, flush=True)
"""


def test_a_store_collected_inside_the_ledgers_own_locked_code_does_not_hang_the_thread(tmp_path) -> None:
    """A store's finalizer (LEDGER.forget) runs wherever the cyclic collector runs: since Python 3.12 at the
    next call or loop of the thread that allocated, which can be inside the ledger's own locked code (touch,
    on a cache hit). forget then waited for the lock its own thread held: the process hung for ever (the
    3.13 suite, in test_fuzz). Now the collected store is forgotten by the ledger's next change, and its
    bytes leave the total then. (In a child process: the old code hangs it.)"""
    import subprocess
    import sys

    live, gone = _lz4_bags(tmp_path, 2, rows=6000)
    try:
        done = subprocess.run([sys.executable, "-c", LEDGER_COLLECTS, str(live), str(gone)], capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the thread waited for ever on the ledger's lock it held itself")
    assert done.returncode == 0, done.stderr
    total, cached = map(int, done.stdout.split())
    assert total == cached  # (the collected store's bytes are no longer counted)


@pytest.mark.parametrize("pipelined", [False, True], ids=["runs", "chunks on the workers"])
def test_a_chunk_read_in_part_is_read_whole_where_its_records_run_past_that_part(tmp_path, monkeypatch, pipelined):
    """A read decodes a compressed chunk only as far as its last record there ends (Bag._reach), found from
    the index's offsets. An offset that names another record (0: the chunk's first) sends the locator on,
    record by record, to the message the index promised, past that part: the read raised on a fresh handle
    (checksums off: parts allowed) where the same read through the whole chunk found the message (fuzz seed
    20261217, case 839). It is read whole then; what a read gets never depends on the guess."""
    from tools.fuzz import walk

    from fastbag.tooling.synth import MIXED_STREAMS, write_bag

    path = tmp_path / "mixed.bag"
    write_bag(path, MIXED_STREAMS, seconds=0.5, points=2_000, compression="lz4")
    with fastbag.open(path) as bag:
        index = bag._index
        first = np.full(len(index.chunks), np.iinfo(np.int64).max)
        np.minimum.at(first, index.chunk, index.offset)
        # a message that is its chunk's first (connection records before it): walking from 0 reaches it
        row = next(r for r in range(index.message_count) if index.offset[r] == first[index.chunk[r]] > 0)
        topic, conn = bag.connections[index.conn[row]].topic, bag.connections[index.conn[row]].id
        chunk_at, offset = int(index.chunks.position[index.chunk[row]]), int(index.offset[row])
        expected = bag.read(topic)
    data = bytearray(path.read_bytes())
    records = walk(bytes(data)).records
    after_chunk = [rec for rec in records if rec.start > chunk_at and not rec.inner]
    index_data = next(rec for rec in after_chunk if rec.op == 0x04 and
                      int.from_bytes(data[rec.fields["conn"][0]:rec.fields["conn"][0] + 4], "little") == conn)
    entries = [index_data.data_start + 12 * k + 8 for k in range(index_data.data_len // 12)]
    (entry,) = [at for at in entries if int.from_bytes(data[at:at + 4], "little") == offset]
    data[entry:entry + 4] = bytes(4)
    path.write_bytes(bytes(data))
    monkeypatch.setattr(Bag, "_pipelined", lambda *args: pipelined)  # (Bag._decode_chunks, or Bag._decode_runs)
    for checksums in (True, False):
        with fastbag.open(path, checksums=checksums) as bag:
            got = bag.read(topic)
            assert got.time.tolist() == expected.time.tolist(), checksums
            assert all(got[i] == expected[i] for i in range(len(expected))), checksums


@pytest.mark.parametrize("compression", ["lz4", "bz2"])
def test_a_few_messages_of_a_cached_chunk_are_located_there_straight(tmp_path, monkeypatch, compression) -> None:
    """A read of at most FEW_ROWS messages in one compressed chunk the cache holds whole locates them there
    (no plan of batches): the same messages as the planned path of a fresh handle, no chunk decompressed
    again; a prefix in the cache, or messages in two chunks, go the planned way; a damaged record is the same
    error either way."""
    from fastbag import bag as bag_module

    path = tmp_path / f"two-{compression}.bag"
    write_two_topics(path, compression)
    with fastbag.open(path) as fresh:
        want = fresh.take("/fast", list(range(40)))
        assert len({int(c) for c in fresh._index.chunk[fresh.topic_rows("/fast")[:40]]}) > 1
    with fastbag.open(path) as bag:
        rows = bag.topic_rows("/fast")
        chunk_of = bag._scope("/fast").index.chunk[rows]
        first = np.flatnonzero(chunk_of == chunk_of[0])  # the first chunk's messages of /fast
        assert first.size > 3
        planned = []
        real = Bag._reach
        monkeypatch.setattr(Bag, "_reach", lambda self, *a: planned.append(1) or real(self, *a))
        bag.take("/fast", [0])  # decompresses the chunk (planned) and caches it whole
        assert planned == [1] and bag._store.cached_payload(int(chunk_of[0])).size == \
            int(bag._scope("/fast").index.chunks.size[int(chunk_of[0])])
        decompressed: list[int] = []
        monkeypatch.setattr(chunks_module, "decompress",
                            lambda *a, **k: decompressed.append(1) or real_decompress(*a, **k))
        got = bag.take("/fast", first[1:4].tolist())
        assert planned == [1] and decompressed == []  # located in the cached chunk straight
        assert [bytes(d) for d in got["data"]] == [bytes(want["data"][k]) for k in first[1:4]]
        assert got.time.tolist() == want.time[first[1:4]].tolist()
        across = [int(first[-1]), int(first[-1]) + 1]  # two chunks: planned
        assert [bytes(d) for d in bag.take("/fast", across)["data"]] == [bytes(want["data"][k]) for k in across]
        assert planned == [1, 1]
        # a record the index misplaces: the same error as the planned path's on a fresh handle
        bad = int(rows[first[2]])
        bag._scope("/fast").index.offset[bad] += 3
        with pytest.raises(fastbag.BagFormatError) as straight:
            bag.take("/fast", [int(first[2])])
        assert planned == [1, 1]
    with fastbag.open(path) as other:
        assert int(other.topic_rows("/fast")[first[2]]) == bad
        other._scope("/fast").index.offset[bad] += 3
        with pytest.raises(fastbag.BagFormatError) as through_plan:
            other.take("/fast", [int(first[2])])
    assert str(straight.value) == str(through_plan.value)
    assert bag_module.FEW_ROWS >= 3


real_decompress = chunks_module.decompress
