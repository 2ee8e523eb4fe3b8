"""Shared test plumbing: where the real bags are, and how to parametrize over them.

The real bags live in ``../shared/data`` beside the repository. On a clone
without it, every test that needs them is skipped with that reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import fastbag

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
NO_DATA = f"real bags not found: {DATA} (../shared/data beside the repository) is absent"


def _sqlite_side_files() -> set[Path]:
    """The SQLite -wal/-shm files under DATA (a WAL-mode database opened without immutable=1 makes them)."""
    return {p for pattern in ("**/*.db3-wal", "**/*.db3-shm") for p in DATA.glob(pattern)} if DATA.is_dir() else set()


@pytest.fixture(scope="session", autouse=True)
def shared_data_left_as_found() -> Iterator[None]:
    """The suite reads ../shared/data and writes nothing there: an oracle that opened a WAL-mode .db3 with
    mode=ro alone (SQLite makes its -wal and -shm beside it then, where it may write) left files there that
    no recorder wrote. Checked once, at the end (an error of the last test)."""
    before = _sqlite_side_files()
    yield
    made = sorted(str(p.relative_to(DATA)) for p in _sqlite_side_files() - before)
    assert not made, f"the tests made files in {DATA}: {made}"


def data_files(folder: str, pattern: str = "*.bag") -> list:
    """``pytest.param`` per file in ``DATA/folder``, id'd by name; one skipped param when absent."""
    files = sorted((DATA / folder).glob(pattern)) if (DATA / folder).is_dir() else []
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    return [pytest.param(f, id=f.name[:80]) for f in files]


def data_file(relative: str) -> Path:
    """One real file; skips the test when it is absent."""
    path = DATA / relative
    if not path.exists():
        pytest.skip(NO_DATA if not DATA.is_dir() else f"{path} is absent")
    return path


def ros2_bags() -> list:
    """``pytest.param`` per ROS2 recording in ``DATA``: every MCAP file under ``mcap/`` and ``db3/`` (but the
    conformance corpus, which holds no ROS types), every rosbag2 directory and lone ``.db3`` file under
    ``db3/``, and the rosbag2 directories under ``mcap/`` that open as their one MCAP file."""
    if not DATA.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    mcap, db3 = DATA / "mcap", DATA / "db3"
    files = [p for p in sorted(mcap.glob("**/*.mcap")) if "conformance" not in str(p)] if mcap.is_dir() else []
    files += sorted(db3.glob("**/*.mcap")) if db3.is_dir() else []
    # (reindex_test_bags/target_metadata: a reindexer's expected metadata.yaml, without the files it names)
    files += sorted(p for p in db3.iterdir() if (p.is_dir() or p.suffix == ".db3") and "target_metadata" not in p.name) \
        if db3.is_dir() else []
    if mcap.is_dir():
        files += [p for p in sorted(mcap.iterdir()) if p.is_dir() and len(list(p.glob("*.mcap"))) == 1
                  and (p / "metadata.yaml").exists()]
    return [pytest.param(f, id=str(f.relative_to(DATA))[:80]) for f in files]


def real_bags() -> list:
    """Every real recording fastbag reads, of every format: ROS1 (2.0 and 1.2), MCAP, rosbag2."""
    found = [p for p in data_files("ros1v2") + data_files("ros1legacy") + ros2_bags() if p.values[0] is not None]
    return found or [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]


def open_quietly(path, **options) -> "fastbag.Bag":
    """``fastbag.open`` for a recording whose damage or oddities a test does not judge: its
    FastbagWarnings are silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        return fastbag.open(path, **options)


def classic_rosbag() -> ModuleType:
    """The classic ``rosbag`` module (py3rosmsgs; ImportError without it), imported with the logging
    class put back: its rosgraph makes every logger created later a RospyLogger, whose findCaller loops
    forever on Python 3.11 where a frame it looks for is importlib's (it hung distributed's import in the
    Dask tests run after it)."""
    before = logging.getLoggerClass()
    try:
        import rosbag
    finally:
        logging.setLoggerClass(before)
    return rosbag


# -- GnuPG homes of the tests' own (never the user's keyring) ------------------------------------------

GPG = shutil.which("gpg")
NO_GPG = "the gpg program (GnuPG) is not installed: apt-get install gnupg"


def run_gpg(home: Path, *args: str, data: bytes | None = None) -> bytes:
    """gpg's output for ``args`` on the keyring in ``home`` (non-interactive); fails the test on an error."""
    done = subprocess.run([GPG or "gpg", "--homedir", str(home), "--batch", "--quiet", "--no-tty", *args],
                          input=data, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def add_gpg_key(home: Path, user: str) -> None:
    """An unprotected key pair for ``user`` in ``home``: an ed25519 key to sign, a cv25519 subkey to encrypt."""
    run_gpg(home, "--quick-gen-key", "--passphrase", "", "--pinentry-mode", "loopback", user, "ed25519",
            "cert,sign", "never")
    fingerprint = run_gpg(home, "--with-colons", "--list-keys", user).decode().split("fpr:::::::::")[1][:40]
    run_gpg(home, "--quick-add-key", "--passphrase", "", "--pinentry-mode", "loopback", fingerprint, "cv25519",
            "encrypt", "never")


@contextlib.contextmanager
def gnupg_env(home: Path, *others: Path) -> Iterator[Path]:
    """GNUPGHOME set to ``home`` inside (restored after); the gpg agents started for ``home`` and ``others``
    stopped after."""
    before = os.environ.get("GNUPGHOME")
    os.environ["GNUPGHOME"] = str(home)
    try:
        yield home
    finally:
        if before is None:
            os.environ.pop("GNUPGHOME", None)
        else:
            os.environ["GNUPGHOME"] = before
        for folder in (home, *others):
            subprocess.run(["gpgconf", "--homedir", str(folder), "--kill", "gpg-agent"], capture_output=True,
                           timeout=30, check=False)
