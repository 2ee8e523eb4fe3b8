"""Temporary folders of readers: a decompressed storage file (``.db3.zstd``, ``.mcap.zstd``), a private copy of
a database with its write-ahead log.

A reader removes its folder when closed. One never closed (a notebook's, a
script's that ends) must not leave a whole decompressed recording in /tmp
each time: the folder also goes when its reader is collected, or at the
latest when the interpreter or a worker process exits. Only the process
that made a folder removes it: a forked child (a DataLoader worker) holding
the parent's reader leaves the parent's files alone.

A process killed (SIGKILL, a SIGTERM Python does not catch, a Dask worker
over its memory) runs none of that. So each folder holds an ``.owner`` file
on which its process keeps an exclusive ``flock``, which the kernel releases
however the process ends (forked children share it while they live). Making
a folder sweeps the temporary folder for ``fastbag-*`` folders whose
``.owner`` lock is free: left by processes that are gone.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import weakref

try:
    import fcntl
except ImportError:  # (Windows: no flock, no sweep; folders still go on close and at exit)
    fcntl = None  # type: ignore[assignment]

PREFIX = "fastbag-"
OWNER = ".owner"


class TemporaryFolderError(OSError):
    """A temporary folder or file that could not be made or written (TMPDIR read-only, full, over a quota):
    the machine's state, not the recording's, so an OSError naming the folder, never a FastbagError."""


class ScratchFolder:
    """A temporary folder belonging to ``owner``: removed by :meth:`remove`, or when ``owner`` is collected
    or the interpreter exits, whichever comes first; by the process that made it only, or after that process
    is gone, by the next folder made (see the module's note)."""

    def __init__(self, owner: object) -> None:
        from multiprocessing import util

        try:
            self.path = tempfile.mkdtemp(prefix=PREFIX)
        except OSError as exc:
            raise TemporaryFolderError(exc.errno, f"{exc.strerror}: cannot make a temporary folder in "
                                       f"{tempfile.gettempdir()} (set TMPDIR to a writable one)",
                                       exc.filename) from exc
        try:
            _claim(self.path)
        except BaseException as exc:
            shutil.rmtree(self.path, ignore_errors=True)
            if isinstance(exc, OSError):
                raise TemporaryFolderError(exc.errno, f"{exc.strerror}: cannot claim a temporary folder",
                                           self.path) from exc
            raise
        sweep(os.path.dirname(self.path))
        self._remove = weakref.finalize(owner, _remove_folder, self.path, os.getpid())
        # A worker process (multiprocessing's, a DataLoader's) ends in os._exit, past atexit and so past the
        # finalizer's exit hook; its own exit hook runs this (the interpreter's atexit runs it too)
        self._at_exit = util.Finalize(self, _remove_folder, (self.path, os.getpid()), exitpriority=0)

    def remove(self) -> None:
        """Remove the folder now (once; later calls and the owner's collection do nothing)."""
        self._remove()
        self._at_exit()


#: The descriptor holding each of this process's folders' ``.owner`` lock, by folder.
_OWNED: dict[str, int] = {}


def _claim(path: str) -> None:
    """Lock ``path``'s ``.owner`` file for this process. The file is locked under another name and then
    renamed, so a sweep never finds an ``.owner`` not locked yet."""
    if fcntl is None:
        return
    claim = os.path.join(path, OWNER + "-claim")
    fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(claim, os.path.join(path, OWNER))
    except OSError:  # (a file system without flock: the folder goes on close and at exit, as before)
        os.close(fd)
        return
    _OWNED[path] = fd


def sweep(folder: str) -> list[str]:
    """Remove the ``fastbag-*`` folders in ``folder`` whose process is gone (their ``.owner`` lock free);
    returns them. Folders without an ``.owner`` (being made, or made by an older fastbag) are left alone."""
    if fcntl is None:
        return []
    removed = []
    with contextlib.suppress(OSError):
        names = [n for n in os.listdir(folder) if n.startswith(PREFIX)]
        for name in names:
            path = os.path.join(folder, name)
            if path in _OWNED:
                continue
            try:
                fd = os.open(os.path.join(path, OWNER), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its process (or a forked child of it) lives
                os.close(fd)
                continue
            shutil.rmtree(path, ignore_errors=True)
            os.close(fd)
            removed.append(path)
    return removed


#: Folders a removal could not remove (out of file descriptors, say): tried again at the next removal, and
#: when the process exits.
_LEFT: set[str] = set()


def _remove_folder(path: str, maker: int) -> None:
    if os.getpid() != maker:
        return
    _remove_left()
    shutil.rmtree(path, ignore_errors=True)
    owned = _OWNED.pop(path, None)
    if owned is not None:  # (released even where the folder stays: a later sweep may then remove it)
        os.close(owned)
    if os.path.exists(path):  # (an open that failed for want of descriptors: its removal failed alike)
        if not _LEFT:
            atexit.register(_remove_left)
        _LEFT.add(path)


def _remove_left() -> None:
    for path in list(_LEFT):
        shutil.rmtree(path, ignore_errors=True)
    _LEFT.clear()
