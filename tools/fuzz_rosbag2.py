"""A fuzz campaign for rosbag2 recordings: damaged directories must fail cleanly, never crash, hang or balloon.

Run (from a checkout)::

    python -m tools.fuzz_rosbag2 --seed 1 --cases 20000 --jobs 2 --timeout 20
    python -m tools.fuzz_rosbag2 --seed 1 --case 4711 --verbose     # rerun one case

Every case is a damaged copy of a *seed recording*: the rosbag2 directories
of ``../shared/data/db3`` whose storage files are present (skipped when the
folder is absent) and recordings generated at start-up (plain, per-message
zstd, per-file zstd, split in two files, WAL mode, no metadata.yaml; MCAP
storage split in five files, plain and zstd-compressed per file). A case
is drawn from ``(seed, case number)`` alone, so it replays anywhere.

Mutations (one to three per case): ``metadata.yaml`` bytes and fields (values
replaced by huge, negative, wrong-typed or nested ones, lines deleted or
duplicated, versions, storage identifiers, compression modes, file lists);
sqlite pages (random bytes, a zeroed page, header fields: page size, page
count, WAL flags; truncation at a page boundary or anywhere); rows through
SQL (blobs cut, flipped, emptied or of the wrong type, zstd bombs in
per-message mode, timestamps and topic ids of the wrong type or out of range,
topic and definition rows damaged); compressed storage files cut or flipped;
storage files removed.

Each case runs what a user runs: ``fastbag.open``, the metadata, every raw
message (``bytes(m.data)``), each topic's raw messages and ``read()`` of
each topic, in a worker process. It checks that only ``FastbagError``s escape
and every warning is a ``FastbagWarning``; that nothing crashes (a worker
that dies is restarted, the case reported) or hangs (``--timeout``, retried
once); that the address space stays within ``--memory-cap`` MiB above the
worker's own (a runaway allocation is a MemoryError, reported); that reading
leaves the directory as it was (no ``-wal``/``-shm`` created, no byte or
mtime changed); that messages come in time order, as many as
``message_count`` says; and, where the one mutation of a generated seed only
changed some rows' timestamps or topic ids (:func:`expects_intact`), that
the other rows still iterate without a FastbagError (a rare draw: a few
cases in a thousand). It prints the counts (each should be zero) and one
reproduction line per failing case.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import selectors
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
#: Seeds larger than this (all storage files together) are left out: cases copy them.
MAX_SEED_BYTES = 3_000_000
PAGE = 4096


# -- seeds -------------------------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL,
                    serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL);
CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL, timestamp INTEGER NOT NULL,
                      data BLOB NOT NULL);
CREATE INDEX timestamp_idx ON messages (timestamp ASC);
"""


def _cdr_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return b"\0\1\0\0" + len(raw).to_bytes(4, "little") + raw


def _write_db3(path: Path, n: int, *, start: int = 0, compress: bool = False, wal: bool = False) -> None:
    import zstandard

    con = sqlite3.connect(path)
    if wal:
        con.execute("PRAGMA journal_mode=WAL")
    con.executescript(SCHEMA)
    con.executemany("INSERT INTO topics VALUES (?, ?, ?, 'cdr', '')",
                    [(1, "/chatter", "std_msgs/msg/String"), (2, "/count", "std_msgs/msg/Int32")])
    cctx = zstandard.ZstdCompressor()
    rows = []
    for k in range(start, start + n):
        data = _cdr_string(f"hello {k}") if k % 3 else b"\0\1\0\0" + k.to_bytes(4, "little")
        rows.append((1 if k % 3 else 2, 10**18 + k * 997, cctx.compress(data) if compress else data))
    con.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (?, ?, ?)", rows)
    con.commit()
    if wal:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def _write_metadata(folder: Path, files: list[str], mode: str = "", version: int = 8) -> None:
    (folder / "metadata.yaml").write_text(f"""rosbag2_bagfile_information:
  version: {version}
  storage_identifier: sqlite3
  duration:
    nanoseconds: 0
  starting_time:
    nanoseconds_since_epoch: 1000000000000000000
  message_count: 0
  topics_with_message_count:
    - topic_metadata:
        name: /chatter
        type: std_msgs/msg/String
        serialization_format: cdr
        offered_qos_profiles: ""
        type_description_hash: RIHS01_00
      message_count: 0
    - topic_metadata:
        name: /count
        type: std_msgs/msg/Int32
        serialization_format: cdr
        offered_qos_profiles: ""
      message_count: 0
  compression_format: {"zstd" if mode else '""'}
  compression_mode: {mode or '""'}
  relative_file_paths:
{"".join(f"    - {f}{chr(10)}" for f in files)}  files:
{"".join(f"    - path: {f}{chr(10)}      starting_time:{chr(10)}        nanoseconds_since_epoch: 0{chr(10)}"
         f"      duration:{chr(10)}        nanoseconds: 0{chr(10)}      message_count: 0{chr(10)}" for f in files)}\
  custom_data: ~
  ros_distro: jazzy
""")


GENERATED = 6  # seed recordings build_seeds generates


def build_seeds(root: Path, data: Path) -> list[Path]:
    """The seed recordings: generated ones in ``root``, then the real ones of ``data/db3``."""
    import zstandard

    seeds = []

    def new(name: str) -> Path:
        folder = root / name
        folder.mkdir(parents=True)
        seeds.append(folder)
        return folder

    _write_db3(new("plain") / "plain_0.db3", 300)
    _write_metadata(root / "plain", ["plain_0.db3"])
    _write_db3(new("message_zstd") / "m_0.db3", 200, compress=True)
    _write_metadata(root / "message_zstd", ["m_0.db3"], "MESSAGE")
    folder = new("file_zstd")
    _write_db3(folder / "f_0.db3", 200)
    (folder / "f_0.db3.zstd").write_bytes(zstandard.ZstdCompressor().compress((folder / "f_0.db3").read_bytes()))
    (folder / "f_0.db3").unlink()
    _write_metadata(folder, ["f_0.db3.zstd"], "FILE")
    folder = new("split")
    _write_db3(folder / "s_0.db3", 150)
    _write_db3(folder / "s_1.db3", 150, start=150)
    _write_metadata(folder, ["s_0.db3", "s_1.db3"], version=5)
    _write_db3(new("wal") / "w_0.db3", 200, wal=True)
    _write_metadata(root / "wal", ["w_0.db3"], version=4)
    _write_db3(new("recording") / "r_0.db3", 120)
    db3 = data / "db3"
    if db3.is_dir():
        for folder in sorted(p for p in db3.iterdir() if p.is_dir() and (p / "metadata.yaml").exists()):
            names = [p for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm"))]
            if sum(p.stat().st_size for p in names) > MAX_SEED_BYTES:
                continue
            try:
                import yaml
                meta = yaml.safe_load((folder / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
                if not all((folder / f).exists() for f in meta["relative_file_paths"]):
                    continue
            except Exception:  # noqa: BLE001 - a seed that cannot be listed is left out
                continue
            copy = root / folder.name
            shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
            seeds.append(copy)
    # Last, so the cases drawn from the seeds above (ORIGINAL_SEEDS) replay unchanged: MCAP storage split into several files, plain and zstd-compressed per file (fastbag.rosbag2.mcap_storage).
    split = data / "mcap" / "ros2__rosbag2__rosbag2_py__test__resources__mcap__wbag"
    if split.is_dir():
        for name, compress in (("mcap_split", False), ("mcap_split_zstd", True)):
            folder = new(name)
            text = (split / "metadata.yaml").read_text()
            for f in sorted(split.glob("*.mcap")):
                if compress:
                    (folder / (f.name + ".zstd")).write_bytes(zstandard.ZstdCompressor().compress(f.read_bytes()))
                    text = text.replace(f"- {f.name}", f"- {f.name}.zstd")
                else:
                    shutil.copyfile(f, folder / f.name)
            if compress:
                text = text.replace("compression_format: ''", "compression_format: zstd").replace(
                    "compression_mode: ''", "compression_mode: FILE")
            (folder / "metadata.yaml").write_text(text)
    # MCAP storage compressed per message (each message's data a zstd frame), as rosbags' writer makes it.
    _write_mcap_per_message(new("mcap_message_zstd"), 200)
    return seeds


def _write_mcap_per_message(folder: Path, n: int) -> None:
    """A rosbag2 directory of MCAP storage compressed per message: the String and Int32 messages of
    _write_db3, written by rosbags' writer (it makes the directory: ``folder`` is replaced)."""
    from fastbag.tooling.synth_db3 import rosbag2_writer

    folder.rmdir()
    writer, store = rosbag2_writer(folder, "mcap", per_message=True)
    with writer:
        chatter = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store)
        count = writer.add_connection("/count", "std_msgs/msg/Int32", typestore=store)
        for k in range(n):
            data = _cdr_string(f"hello {k}") if k % 3 else b"\0\1\0\0" + k.to_bytes(4, "little")
            writer.write(chatter if k % 3 else count, 10**18 + k * 997, data)


#: The seeds before the MCAP storage ones were added (regression cases were drawn from these).
ORIGINAL_SEEDS = 28


# -- mutations ---------------------------------------------------------------------------------------

ODD_VALUES = ["-1", "0", "18446744073709551616", "99999999999999999999999", "1.5e308", "'x'", "[]", "{}", "~",
              "[1, [2, [3]]]", "{a: {b: {c: 1}}}", "!!binary AAAA", "''", "\"\\xff\\x00\"", "&a [*a]", "true"]


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name != "metadata.yaml" and not p.name.endswith(("-wal", "-shm")))


def mutate_yaml(folder: Path, rng: random.Random) -> str:
    path = folder / "metadata.yaml"
    if not path.exists():
        return "yaml: absent"
    lines = path.read_text(errors="replace").split("\n")
    kind = rng.choice(["value", "value", "delete", "duplicate", "bytes", "version", "storage", "mode", "paths"])
    if kind == "bytes":
        raw = bytearray(path.read_bytes()) or bytearray(b"\n")
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        path.write_bytes(bytes(raw))
        return "yaml: random bytes"
    keyed = [k for k, line in enumerate(lines) if ":" in line]
    k = rng.choice(keyed) if keyed else 0
    if kind == "value" and keyed:
        key = lines[k].split(":", 1)[0]
        lines[k] = f"{key}: {rng.choice(ODD_VALUES)}"
    elif kind == "delete":
        del lines[k]
    elif kind == "duplicate":
        lines.insert(k, lines[k])
    elif kind == "version":
        lines = [f"  version: {rng.choice(['0', '1', '3', '6', '9', '10', '-5', 'nine'])}"
                 if line.strip().startswith("version:") else line for line in lines]
    elif kind == "storage":
        lines = [f"  storage_identifier: {rng.choice(['mcap', 'sqlite', '', 'sqlite3'])}"
                 if "storage_identifier" in line else line for line in lines]
    elif kind == "mode":
        lines = [f"  compression_mode: {rng.choice(['FILE', 'MESSAGE', 'file', 'bogus', ''])}"
                 if "compression_mode" in line else line for line in lines]
        lines = [f"  compression_format: {rng.choice(['zstd', 'lz4', ''])}"
                 if "compression_format" in line else line for line in lines]
    elif kind == "paths":
        at = next((k for k, line in enumerate(lines) if "relative_file_paths" in line), None)
        if at is not None:
            lines.insert(at + 1, f"    - {rng.choice(['missing.db3', '../x.db3', '/dev/null', '.', 'metadata.yaml'])}")
    path.write_text("\n".join(lines))
    return f"yaml: {kind}"


def mutate_pages(folder: Path, rng: random.Random) -> str:
    files = [p for p in _files(folder) if p.suffix == ".db3"]
    if not files:
        return "pages: none"
    path = rng.choice(files)
    raw = bytearray(path.read_bytes())
    if not raw:
        return f"pages: {path.name} is empty already"
    pages = max(1, len(raw) // PAGE)
    kind = rng.choice(["bytes", "bytes", "zero", "header", "truncate_page", "truncate", "swap"])
    if kind == "bytes":
        page = rng.randrange(pages)
        for _ in range(rng.randint(1, 30)):
            raw[min(len(raw) - 1, page * PAGE + rng.randrange(PAGE))] = rng.randrange(256)
    elif kind == "zero":
        page = rng.randrange(pages)
        raw[page * PAGE:(page + 1) * PAGE] = bytes(min(PAGE, len(raw) - page * PAGE))
    elif kind == "header":
        at = rng.choice([16, 17, 18, 19, 20, 21, 28, 29, 30, 31, 32, 36, 44, 48, 52, 56])
        raw[at] = rng.choice([0, 1, 2, 0xFF, rng.randrange(256)])
    elif kind == "truncate_page":
        del raw[rng.randrange(pages) * PAGE:]
    elif kind == "truncate":
        del raw[rng.randrange(len(raw)):]
    else:
        a, b = rng.randrange(pages), rng.randrange(pages)
        pa, pb = bytes(raw[a * PAGE:(a + 1) * PAGE]), bytes(raw[b * PAGE:(b + 1) * PAGE])
        if len(pa) == len(pb):
            raw[a * PAGE:(a + 1) * PAGE], raw[b * PAGE:(b + 1) * PAGE] = pb, pa
    path.write_bytes(bytes(raw))
    return f"pages: {kind} in {path.name}"


def mutate_rows(folder: Path, rng: random.Random) -> str:
    files = [p for p in _files(folder) if p.suffix == ".db3"]
    if not files:
        return "rows: none"
    path = rng.choice(files)
    import zstandard

    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    statements: list[tuple[str, tuple]] = {
        "cut": [("UPDATE messages SET data = substr(data, 1, ?) WHERE id % ? = 0", (rng.randint(0, 12),
                                                                                     rng.randint(1, 7)))],
        "flip": [("UPDATE messages SET data = randomblob(length(data)) WHERE id % ? = 0", (rng.randint(1, 9),))],
        "empty": [("UPDATE messages SET data = x'' WHERE id % ? = 1", (rng.randint(2, 9),))],
        "text": [("UPDATE messages SET data = 'not a blob é' WHERE id % ? = 0", (rng.randint(1, 9),))],
        "null": [("UPDATE messages SET data = NULL WHERE id = (SELECT min(id) FROM messages)", ())],
        "bomb": [("UPDATE messages SET data = ? WHERE id % ? = 0", (bomb, rng.randint(3, 40)))],
        "timestamp": [("UPDATE messages SET timestamp = ? WHERE id % ? = 0",
                       (rng.choice([-1, 0, 2**63 - 1, "soon", 1.5, None]), rng.randint(1, 9)))],
        "topic_id": [("UPDATE messages SET topic_id = ? WHERE id % ? = 0",
                      (rng.choice([0, 99, -1, 2**62, "one", None]), rng.randint(1, 9)))],
        "topics": [("UPDATE topics SET name = ?, type = ? WHERE id = 1",
                    (rng.choice([None, "", "x" * 10000, 5, "/a"]), rng.choice(["", "nope", "a/b/c/d", 7, None])))],
        "format": [("UPDATE topics SET serialization_format = ?", (rng.choice(["", "ros1", "json", 3]),))],
        "no_topics": [("DELETE FROM topics", ())],
        "drop": [("DROP TABLE messages", ())],
        "ids": [("UPDATE messages SET id = id + ? WHERE id % 2 = 0", (rng.choice([10**6, 2**62]),))],
        "definitions": [("CREATE TABLE IF NOT EXISTS message_definitions(id INTEGER PRIMARY KEY, topic_type TEXT, "
                         "encoding TEXT, encoded_message_definition TEXT, type_description_hash TEXT)", ()),
                        ("INSERT INTO message_definitions VALUES (NULL, 'std_msgs/msg/String', ?, ?, '')",
                         (rng.choice(["ros2msg", "ros2idl", None, 4]),
                          rng.choice(["string data", "", "x" * 100000, "\x00\xff", None, "MSG: " * 50])))],
    }
    kind = rng.choice(sorted(statements))
    try:
        con = sqlite3.connect(path)
        try:
            for sql, args in statements[kind]:
                con.execute(sql, args)
            con.commit()
        finally:
            con.close()
    except (sqlite3.Error, ValueError) as exc:  # the copy may be damaged already: the mutation is what it is
        return f"rows: {kind} in {path.name} (failed: {exc})"
    for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        side.unlink(missing_ok=True)
    return f"rows: {kind} in {path.name}"


def mutate_files(folder: Path, rng: random.Random) -> str:
    files = _files(folder)
    if not files:
        return "files: none"
    path = rng.choice(files)
    kind = rng.choice(["remove", "cut", "flip", "empty", "yaml_gone"])
    if kind == "remove":
        path.unlink()
    elif kind == "yaml_gone":
        (folder / "metadata.yaml").unlink(missing_ok=True)
    else:
        raw = bytearray(path.read_bytes())
        if kind == "cut" and raw:
            del raw[rng.randrange(len(raw)):]
        elif kind == "flip" and raw:
            for _ in range(rng.randint(1, 10)):
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        elif kind == "empty":
            raw = bytearray()
        path.write_bytes(bytes(raw))
    return f"files: {kind} {path.name}"


def mutate_btree(folder: Path, rng: random.Random) -> str:
    """Damage what fastbag's page reader (fastbag.rosbag2.pages) walks: in a b-tree page of a storage file,
    its cell count, a cell pointer, a child page number, or the first bytes of a cell (payload size, rowid,
    record header, a value)."""
    files = [p for p in _files(folder) if p.suffix == ".db3"]
    if not files:
        return "btree: none"
    path = rng.choice(files)
    raw = bytearray(path.read_bytes())
    pages = len(raw) // PAGE
    tree = [p for p in range(pages) if raw[p * PAGE + (100 if p == 0 else 0)] in (0x05, 0x0D)]
    if not tree:
        return f"btree: no b-tree page in {path.name}"
    page = rng.choice(tree)
    head = page * PAGE + (100 if page == 0 else 0)
    interior = raw[head] == 0x05
    ncells = int.from_bytes(raw[head + 3:head + 5], "big")
    target = rng.choice(["cell count", "cell pointer", "child", "cell bytes", "cell bytes"])
    pointer = head + (12 if interior else 8) + 2 * rng.randrange(max(ncells, 1))
    cell = page * PAGE + int.from_bytes(raw[pointer:pointer + 2], "big")
    if target == "cell count" or not ncells or pointer + 2 > (page + 1) * PAGE:
        target = "cell count"
        count = rng.choice([0, (ncells + 1) & 0xFFFF, 0xFFFF, rng.randrange(1 << 16)])
        raw[head + 3:head + 5] = count.to_bytes(2, "big")
    elif target == "cell pointer":
        raw[pointer:pointer + 2] = rng.randrange(1 << 16).to_bytes(2, "big")
    elif target == "child" and interior:
        at = head + 8 if rng.random() < 0.3 else cell  # the right-most child, or a cell's left child
        child = rng.choice([0, page, page + 2, pages + 5, 0xFFFFFFFF, rng.randrange(pages) + 1])
        raw[at:at + 4] = child.to_bytes(4, "big")[:max(0, len(raw) - at)]
    else:
        target = "cell bytes"
        for _ in range(rng.randint(1, 4)):
            raw[min(len(raw) - 1, cell + rng.randrange(24))] = rng.randrange(256)
    path.write_bytes(bytes(raw))
    return f"btree: {target} in page {page + 1} of {path.name}"


#: The mutators and their weights. Cases drawn before mutate_btree existed replay with the list before it.
MUTATORS_BEFORE_BTREE: list[tuple[Callable[[Path, random.Random], str], int]] = [
    (mutate_yaml, 3), (mutate_pages, 3), (mutate_rows, 4), (mutate_files, 1)]
MUTATORS = [*MUTATORS_BEFORE_BTREE, (mutate_btree, 2)]


def make_case(seeds: list[Path], seed: int, case: int, work: Path,
              mutators: list[tuple[Callable[[Path, random.Random], str], int]] = MUTATORS) -> tuple[Path, list[str]]:
    """The damaged copy of case ``case``: a directory, or one storage file of it (``mutators``: the list the
    case was drawn with)."""
    rng = random.Random(seed * 1_000_003 + case)
    source = seeds[rng.randrange(len(seeds))]
    folder = work / f"case{case}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, folder)
    done = [f"seed {source.name}"]
    for _ in range(rng.choice([1, 1, 2, 3])):
        mutate = rng.choices([m for m, _ in mutators], [w for _, w in mutators])[0]
        done.append(mutate(folder, rng))
    target = folder
    if rng.random() < 0.15:  # open one storage file alone
        files = [p for p in _files(folder) if p.name.endswith((".db3", ".db3.zstd", ".mcap.zstd"))]
        if files:
            target = rng.choice(files)
            done.append(f"open {target.name} alone")
    return target, done


#: Generated seeds whose every row is intact, and the row mutations that change only what the index reads
#: of some rows (a timestamp or topic id of another type or out of range): afterwards every message of the
#: other rows must still iterate raw, without a FastbagError.
INTACT_SEEDS = ("plain", "message_zstd", "split", "wal", "recording")
INDEX_ONLY_ROWS = ("timestamp", "topic_id")


def expects_intact(done: list[str]) -> bool:
    """Whether a case's raw iteration must succeed: one index-only row mutation of an intact seed."""
    if len(done) != 2 or done[0].removeprefix("seed ") not in INTACT_SEEDS or "(failed" in done[1]:
        return False
    return any(done[1].startswith(f"rows: {kind} in ") for kind in INDEX_ONLY_ROWS)


# -- running a case --------------------------------------------------------------------------------

def _snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest()) for p in sorted(folder.iterdir())}


def run_case(target: Path, *, intact: bool = False) -> dict[str, Any]:
    """Everything a user does with a recording; returns ``{"problems": [...], "errors": [...], ...}``.

    ``intact``: the rows the mutation left alone must stay readable (see :func:`expects_intact`), so a
    FastbagError while iterating raw messages is wrong, not a clean refusal."""
    import numpy as np

    import fastbag
    from fastbag.errors import FastbagError, FastbagWarning

    folder = target if target.is_dir() else target.parent
    before = _snapshot(folder)
    problems: list[str] = []
    errors: list[str] = []

    def guarded(stage: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except FastbagError as exc:
            errors.append(f"{stage}: {type(exc).__name__}")
            return None
        except MemoryError as exc:
            problems.append(f"oversize {stage}: MemoryError {exc}")
        except Exception as exc:  # noqa: BLE001 - the point of the campaign
            where = traceback.extract_tb(exc.__traceback__)[-1]
            problems.append(f"exception {stage}: {type(exc).__name__}: {str(exc)[:200]} "
                            f"[{Path(where.filename).name}:{where.name}]")
        return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = guarded("open", lambda: fastbag.open(target))
        if bag is not None:
            def whole() -> None:
                info = (bag.format, bag.version, bag.message_count, bag.start_time, bag.end_time, bag.size,
                        bag.compression, {t: i.message_count for t, i in bag.topics.items()})
                try:
                    times = [m.time for m in bag.messages(raw=True) if bytes(m.data) is not None]
                except FastbagError as exc:
                    # Rows the index read past a file's damage are those SQLite gives by id: reading them
                    # cannot fail on that damage (other damage may: a blob's zstd frame, or another file's
                    # damage that its scan did not meet).
                    damaged = f"{os.path.basename(getattr(exc, 'path', None) or '?')}: the messages table is damaged"
                    if "sqlite3 storage" in str(exc) and any(p.startswith(damaged) for p in bag.problems):
                        problems.append(f"wrong: the index read rows past damage, then refused them ({exc})")
                    raise
                if times != sorted(times):
                    problems.append("wrong: messages out of time order")
                # Opening counts the database's rows (count(*)); rows the index then leaves out (damaged,
                # or of no known topic) are said in a warning, and message_count follows the index.
                if len(times) != bag.message_count:
                    problems.append(f"wrong: {len(times)} messages where message_count says {bag.message_count}")
                if len(times) != info[2] and not any(issubclass(w.category, FastbagWarning) for w in caught):
                    problems.append(f"wrong: {len(times)} messages where message_count said {info[2]} at open, "
                                    "without a warning")
            guarded("messages", whole)
            read_times: dict[str, Any] = {}
            for topic in list(guarded("topics", lambda: list(bag.topics)) or []):
                guarded(f"messages {topic}", lambda topic=topic: [bytes(m.data) for m in bag.messages(topic, raw=True)])
                read_times[topic] = guarded(f"read {topic}", lambda topic=topic: bag.read(topic).time)
            guarded("close", bag.close)
            # Each topic again on a fresh handle: read through its own index where one is built (a .db3's
            # pages, an MCAP storage file's message indexes), which must agree with the whole index's read.
            for topic, times in read_times.items():
                fresh = guarded("open", lambda: fastbag.open(target))
                if fresh is None:
                    continue
                got = guarded(f"fresh read {topic}", lambda topic=topic, fresh=fresh: fresh.read(topic).time)
                guarded("close", fresh.close)
                if got is not None and times is not None and not np.array_equal(got, times):
                    problems.append(f"wrong: {topic} read on a fresh handle differs from its read through the whole "
                                    f"index ({got.size} messages against {times.size})")
            refused = [e for e in errors if e.startswith("messages")]
            if intact and refused:
                problems.append(f"wrong: rows the mutation left alone are unreadable ({'; '.join(refused[:3])})")
        for w in caught:
            if not issubclass(w.category, FastbagWarning):
                problems.append(f"warning: {w.category.__name__}: {str(w.message)[:200]}")
    after = _snapshot(folder)
    if after != before:
        changed = sorted(set(after) ^ set(before) | {k for k in after if k in before and after[k] != before[k]})
        problems.append(f"wrong: reading changed the directory ({', '.join(changed)})")
    return {"problems": problems, "errors": errors}


# -- workers and the campaign ------------------------------------------------------------------------

def worker(args: argparse.Namespace) -> None:
    """Run cases ``args.start`` to ``args.stop`` and report one JSON line each (announced before)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    import fastbag  # noqa: F401 - loaded before the cap, like everything a case imports
    import yaml  # noqa: F401
    import zstandard  # noqa: F401

    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + (args.memory_cap << 20), hard))
    seeds = [Path(p) for p in args.seeds.split(os.pathsep)]
    work = Path(args.work)
    for case in range(args.start, args.stop):
        print(json.dumps({"start": case}), flush=True)
        try:
            target, done = make_case(seeds, args.seed, case, work)
        except Exception as exc:  # noqa: BLE001 - a defect of the harness, reported as such
            print(json.dumps({"case": case, "problems": [f"harness: {type(exc).__name__}: {exc}"], "errors": [],
                              "mutations": []}), flush=True)
            continue
        t0 = time.perf_counter()
        try:
            result = run_case(target, intact=expects_intact(done))
        except MemoryError as exc:
            result = {"problems": [f"oversize harness: MemoryError {exc}"], "errors": []}
        result.update(case=case, mutations=done, seconds=time.perf_counter() - t0)
        shutil.rmtree(work / f"case{case}", ignore_errors=True)
        print(json.dumps(result), flush=True)


def campaign(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="fastbag-fuzz-rosbag2-"))
    try:
        seeds = build_seeds(work / "seeds", Path(args.data))
        print(f"{len(seeds)} seed recordings ({len(seeds) - GENERATED} real ones from {args.data})", flush=True)
        cases = [args.case] if args.case is not None else list(range(args.cases))
        if args.case is not None and args.verbose:
            target, done = make_case(seeds, args.seed, args.case, work)
            print("\n".join(done))
            print(json.dumps(run_case(target, intact=expects_intact(done)), indent=1))
            return 0
        results: dict[int, dict[str, Any]] = {}
        pending = list(cases)
        tries: Counter = Counter()
        t0 = time.perf_counter()

        def spawn(chunk: list[int]) -> subprocess.Popen:
            return subprocess.Popen(
                [sys.executable, "-m", "tools.fuzz_rosbag2", "--worker", "--seed", str(args.seed),
                 "--start", str(chunk[0]), "--stop", str(chunk[-1] + 1), "--seeds",
                 os.pathsep.join(map(str, seeds)), "--work", str(work), "--memory-cap", str(args.memory_cap)],
                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        step = max(1, min(500, len(cases) // max(1, args.jobs * 4) or 1))
        queue = [pending[k:k + step] for k in range(0, len(pending), step)]
        running: dict[Any, tuple[subprocess.Popen, list[int], list]] = {}
        selector = selectors.DefaultSelector()
        while queue or running:
            while queue and len(running) < args.jobs:
                chunk = queue.pop(0)
                proc = spawn(chunk)
                state = [None, time.monotonic()]  # current case, when it started
                running[proc.stdout] = (proc, chunk, state)
                selector.register(proc.stdout, selectors.EVENT_READ)
            for key, _ in selector.select(timeout=1.0):
                proc, chunk, state = running[key.fileobj]
                line = key.fileobj.readline()
                if not line:  # the worker ended: finished, or died with a case in hand
                    selector.unregister(key.fileobj)
                    del running[key.fileobj]
                    code = proc.wait()
                    if state[0] is not None and state[0] not in results:
                        results[state[0]] = {"case": state[0], "problems": [f"crash: worker died ({code})"],
                                             "errors": [], "mutations": []}
                        rest = [c for c in chunk if c > state[0]]
                        if rest:
                            queue.insert(0, rest)
                    continue
                message = json.loads(line)
                if "start" in message:
                    state[0], state[1] = message["start"], time.monotonic()
                else:
                    results[message["case"]] = message
                    state[0] = None
            now = time.monotonic()
            for stream, (proc, chunk, state) in list(running.items()):
                if state[0] is not None and now - state[1] > args.timeout:
                    proc.kill()
                    proc.wait()
                    selector.unregister(stream)
                    del running[stream]
                    case = state[0]
                    tries[case] += 1
                    if tries[case] > 1:  # timed out twice: a hang, not a busy machine
                        results[case] = {"case": case, "problems": [f"hang: more than {args.timeout} s"],
                                         "errors": [], "mutations": []}
                        rest = [c for c in chunk if c > case]
                    else:
                        rest = [c for c in chunk if c >= case]
                    if rest:
                        queue.insert(0, rest)
        seconds = time.perf_counter() - t0
        failing = {c: r for c, r in results.items() if r["problems"]}
        kinds = Counter(p.split(" ", 1)[0].rstrip(":") for r in failing.values() for p in r["problems"])
        errors = Counter(e.split(": ", 1)[1] for r in results.values() for e in r["errors"])
        print(f"{len(results)} cases in {seconds:.0f} s ({len(results) / max(seconds, 1e-9):.1f}/s); "
              f"failing cases: {len(failing)}")
        for kind in ("crash", "hang", "exception", "oversize", "wrong", "warning", "harness"):
            print(f"  {kind:<10} {kinds.get(kind, 0)}")
        print(f"FastbagErrors raised (expected): {dict(errors.most_common())}")
        for case, result in sorted(failing.items())[:50]:
            print(f"case {case}: {result['problems'][:2]} {result.get('mutations')} "
                  f"(rerun: python -m tools.fuzz_rosbag2 --seed {args.seed} --case {case} --verbose)")
        return 1 if failing else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--case", type=int)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--memory-cap", type=int, default=1024, help="MiB of address space above a worker's own")
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seeds", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())
