"""The process's worker threads, shared by every open bag.

Decompression and decoding run on thread pools. Each bag used to start its
own, whose threads then stayed, idle, as long as the bag was open: a
dataset holding 128 bags open held 256 threads. Now the process keeps one
pool per worker count (``fastbag.open(..., workers=N)``; most programs use
one count, the CPU count), started on first use, and every bag with that
count submits to it through a :class:`BagThreads` of its own, which lets
the bag's close cancel its queued work and wait for its running work
alone, as shutting down a pool of its own did.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any, TypeVar

from .forks import in_children

R = TypeVar("R")

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads (made on first use; threads start as work arrives)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            # (threads named by their pool: fastbag-8_0, fastbag-8_1, ... for the pool of 8)
            pool = _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"fastbag-{workers}")
        return pool


def _forget_pools() -> None:
    # A forked child has none of the parent's threads, but its copy of each pool believes its workers idle
    # and would queue work for them for ever: the child starts pools of its own.
    global _POOLS, _POOLS_LOCK
    _POOLS = {}
    _POOLS_LOCK = threading.Lock()


in_children(_forget_pools)


class BagThreads:
    """One bag's use of the shared pool of its worker count: ``submit`` as a ThreadPoolExecutor's, and
    ``shutdown`` for this bag's work only (the pool and its threads stay for the other bags)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = _pool(workers)
        self._futures: set[Future[Any]] = set()
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., R], /, *args: Any) -> Future[R]:
        """Run ``fn(*args)`` on the shared threads. RuntimeError after :meth:`shutdown` (as an executor's)."""
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future = self._pool.submit(fn, *args)
            self._futures.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._futures.discard(future)

    def shutdown(self) -> None:
        """Cancel this bag's queued work and wait for what of it is running (a close waits for its reads'
        workers before the bag's file goes); later submits are refused."""
        with self._lock:
            self._shut = True
            futures = list(self._futures)
        for future in futures:
            future.cancel()
        wait_for(futures)
