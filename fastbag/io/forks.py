"""What a forked child must not reuse: worker threads, locks, database connections.

``os.fork`` copies the process with only the calling thread. A thread pool
copied from a parent that had started its workers believes it has idle
workers that no longer exist, so the child's first parallel read waits
forever; a lock some other thread held at the fork stays held; an SQLite
connection must not be carried across a fork. Objects that hold such things
register here and are told to drop them in the child, right after the fork
(before any code of the child's runs): a Bag opened in the parent then reads
in a child started by fork (``multiprocessing``, a DataLoader worker) as in
a fresh process. Objects are held weakly.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Protocol


class ForkAware(Protocol):
    def _after_fork(self) -> None:
        """Drop what the parent's threads or connections held (called in the child, single-threaded)."""


_REGISTERED: weakref.WeakSet[ForkAware] = weakref.WeakSet()  # type: ignore[type-var]


def reset_in_children(obj: ForkAware) -> None:
    """Have ``obj._after_fork()`` called in every child forked from now on (while ``obj`` lives)."""
    _REGISTERED.add(obj)


#: Objects whose locks are replaced by new ones in a child, with the names of those locks.
_LOCKS: weakref.WeakKeyDictionary[object, tuple[str, ...]] = weakref.WeakKeyDictionary()


def new_locks_in_children(obj: object, *names: str) -> None:
    """Have the locks ``obj.<name>`` (each a ``threading.Lock``) replaced by new ones in every child forked
    from now on: one that another thread held at the fork (building an index, say) stays held for ever in the
    child, whose first read then waits on it. What the lock guarded is built again there if it was not done."""
    _LOCKS[obj] = names


def in_children(fn: Callable[[], None]) -> None:
    """Have ``fn()`` called in every child forked from now on (module state: a lock of the module's)."""
    if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
        os.register_at_fork(after_in_child=fn)


def _in_child() -> None:
    for obj in list(_REGISTERED):
        obj._after_fork()
    for obj, names in list(_LOCKS.items()):
        for name in names:
            setattr(obj, name, threading.Lock())


in_children(_in_child)
