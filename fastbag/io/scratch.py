"""Temporary folders of readers: a decompressed storage file (``.db3.zstd``, ``.mcap.zstd``), a private copy of
a database with its write-ahead log.

A reader removes its folder when closed. One never closed (a notebook's, a
script's that ends) must not leave a whole decompressed recording in /tmp
each time: the folder also goes when its reader is collected, or at the
latest when the interpreter or a worker process exits. Only the process
that made a folder removes it: a forked child (a DataLoader worker) holding
the parent's reader leaves the parent's files alone.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import weakref


class ScratchFolder:
    """A temporary folder belonging to ``owner``: removed by :meth:`remove`, or when ``owner`` is collected
    or the interpreter exits, whichever comes first; by the process that made it only."""

    def __init__(self, owner: object) -> None:
        from multiprocessing import util

        self.path = tempfile.mkdtemp(prefix="fastbag-")
        self._remove = weakref.finalize(owner, _remove_folder, self.path, os.getpid())
        # A worker process (multiprocessing's, a DataLoader's) ends in os._exit, past atexit and so past the
        # finalizer's exit hook; its own exit hook runs this (the interpreter's atexit runs it too)
        self._at_exit = util.Finalize(self, _remove_folder, (self.path, os.getpid()), exitpriority=0)

    def remove(self) -> None:
        """Remove the folder now (once; later calls and the owner's collection do nothing)."""
        self._remove()
        self._at_exit()


#: Folders a removal could not remove (out of file descriptors, say): tried again at the next removal, and
#: when the process exits.
_LEFT: set[str] = set()


def _remove_folder(path: str, maker: int) -> None:
    if os.getpid() != maker:
        return
    _remove_left()
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):  # (an open that failed for want of descriptors: its removal failed alike)
        if not _LEFT:
            atexit.register(_remove_left)
        _LEFT.add(path)


def _remove_left() -> None:
    for path in list(_LEFT):
        shutil.rmtree(path, ignore_errors=True)
    _LEFT.clear()
