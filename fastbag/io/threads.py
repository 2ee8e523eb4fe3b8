"""A bag's worker threads, which end when idle.

Decompression and decoding run on a bag's worker threads. A
ThreadPoolExecutor keeps its threads until it is shut down, so every bag
that had read in parallel held its threads, idle, as long as it stayed
open: a dataset holding 128 bags open held 256 threads. These threads end
after IDLE_SECONDS without work and start again with the next read (about
0.1 ms each).

Each bag keeps a pool of its own, not one pool shared by every bag: one
bag's slow work (a bz2 chunk, a stalled network file) then never waits in
line before another bag's. And nothing here runs under a lock of ours
that the garbage collector could re-enter: no done-callbacks, no work
queued or cancelled with the lock held (a collected read cancels its
futures from whatever thread the collector interrupted).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from typing import Any, TypeVar

from .forks import reset_in_children

R = TypeVar("R")

#: A worker thread with nothing to do for this long ends.
IDLE_SECONDS = 5.0
#: The task a worker thread runs now (``future``), so that a shutdown from within it does not wait for it.
_CURRENT = threading.local()


class WorkerThreads:
    """At most ``workers`` threads running what :meth:`submit` gives them, started as work arrives and
    ending when idle; ``submit`` and ``shutdown`` as a ThreadPoolExecutor's (shutdown always cancelling
    what is queued and waiting for what runs, however often it is called)."""

    def __init__(self, workers: int, name: str = "fastbag") -> None:
        self.workers = workers
        self.name = name
        # work, or None: a shut pool's idle thread ends now, not IDLE_SECONDS later. (A Queue, not a
        # SimpleQueue: a SimpleQueue's get(timeout) can wait without end when woken after its deadline
        # and another getter took the item, and an idle thread then never ended.)
        self._queue: queue.Queue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._alive: set[threading.Thread] = set()  # started, or about to start
        self._running: set[Future[Any]] = set()
        self._shut = False
        self._count = 0                       # threads started, for their names
        reset_in_children(self)

    def submit(self, fn: Callable[..., R], /, *args: Any) -> Future[R]:
        """Run ``fn(*args)`` on a worker. RuntimeError after :meth:`shutdown`, as an executor's."""
        future: Future[R] = Future()
        item = (future, fn, args)
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.put(item)
            thread = None
            if len(self._alive) < self.workers:
                self._count += 1
                thread = threading.Thread(target=self._work, name=f"{self.name}_{self._count}", daemon=True)
                self._alive.add(thread)
        if thread is not None:
            try:
                thread.start()
            except RuntimeError:  # "can't start new thread": the process's limit (threads, memory)
                with self._lock:
                    self._alive.discard(thread)
                    alone = not self._alive
                if alone:  # (no thread would ever run it; with others alive they do)
                    future.cancel()
                    raise
        return future

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                item = None
            if item is None:
                with self._lock:  # (a submit queues and counts threads under the lock: none is stranded)
                    if self._shut or self._queue.empty():
                        self._alive.discard(threading.current_thread())
                        return
                continue
            future, fn, args = item
            with self._lock:  # (running from here, or refused: a shutdown waits for every task it lets run)
                shut = self._shut
                if not shut:
                    self._running.add(future)
            if shut or not future.set_running_or_notify_cancel():
                future.cancel()
                with self._lock:
                    self._running.discard(future)
                continue
            try:
                _run(future, fn, args)
            finally:
                with self._lock:
                    self._running.discard(future)
            del item, future, fn, args  # (nothing of a finished task kept while idle: a payload, say)

    def _after_fork(self) -> None:
        # A forked child has none of the parent's threads, and the parent's may have held these at the fork:
        # the child's pool starts empty (a read the parent began maps the rest itself: see ordered_map).
        self._queue = queue.Queue()
        self._lock = threading.Lock()
        self._running = set()
        self._alive = set()

    @property
    def _threads(self) -> int:
        """Threads started or about to start (each ends itself, idle or shut down)."""
        return len(self._alive)

    def shutdown(self) -> None:
        """Refuse later submits, cancel the queued work and wait for the running work (a bag's close waits
        for its reads' workers before its file goes; a second close waits alike)."""
        with self._lock:
            self._shut = True
            # (not the task this thread runs, if it is one of them: it would wait for itself)
            running = [f for f in self._running if f is not getattr(_CURRENT, "future", None)]
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in range(self.workers):  # (wakes each idle thread, to end)
            self._queue.put(None)
        wait_for(running)
        # The threads are gone when it returns, as an executor's shutdown joins them: a bag closed holds
        # nothing (a thread ending later kept its malloc arena from the next bag's threads: +5% memory).
        # (A thread a submit is starting this very moment is not joined: it ends by itself, seeing the shutdown.)
        with self._lock:
            alive = [t for t in self._alive if t is not threading.current_thread() and t.ident is not None]
        for thread in alive:
            thread.join()


def _run(future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """``fn(*args)`` into ``future``: its result or its exception (handed to the waiting reader, as an
    executor does). A function of its own, so that the result is not left in the worker's locals."""
    _CURRENT.future = future
    try:
        result = fn(*args)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)
    finally:
        _CURRENT.future = None
