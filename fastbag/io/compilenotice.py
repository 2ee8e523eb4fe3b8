"""One line on stderr while Numba compiles fastbag's kernels (a cold cache: the first use after install).

Compiling the decoding kernels takes several seconds, once: Numba caches
the machine code (``__pycache__``, or ``$NUMBA_CACHE_DIR``), and every later
process loads it in milliseconds. Without a word, that first read looks like
a hang. Numba announces every real compilation (a cache miss; never a cache
load) as a ``numba:compile`` event: the first one of a fastbag kernel logs

    fastbag: compiling decoding kernels (first use after install, about 10-30 s) ...

and, once no kernel has been compiling for a moment, the time it took
(later compilations, of kernels for another encoding say, only if long).
Both go to the ``fastbag`` logger at WARNING level, which Python prints on
stderr when logging is not configured; ``logging.getLogger("fastbag")
.setLevel(logging.ERROR)`` silences them. Installed by
:mod:`fastbag.io.bytekernels`, which every kernel module imports (so only
once Numba is loaded anyway).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import Any

from numba.core import event

LOG = logging.getLogger("fastbag")
#: How long no kernel compiles before the time it took is reported (the kernels of one read
#: compile one after another, as the read reaches each).
QUIET_SECONDS = 1.0
#: What the first read compiles, measured on a 2-core Xeon VM under load: 2.7 s for an uncompressed
#: ROS1 bag, 4.9 s with lz4 chunks; slower machines take longer.
ESTIMATE = "about 5-20 s"
#: A later burst (another message encoding, say) is reported only if it took this long.
LATER_SECONDS = 1.0


class CompileNotice(event.Listener):
    """Logs when fastbag's kernels start compiling, and the total time once they are done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0          # nested compiles: a kernel compiles the kernels it calls
        self._started = 0.0
        self._seconds = 0.0      # outermost compiles, summed
        self._announced = False
        self._reported = False
        self._timer: threading.Timer | None = None

    @staticmethod
    def _ours(ev: Any) -> bool:
        dispatcher = (ev.data or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
        return module.startswith("fastbag.")

    def on_start(self, ev: Any) -> None:
        if not self._ours(ev):
            return
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._depth += 1
            if self._depth == 1:
                self._started = time.perf_counter()
            announce = not self._announced
            self._announced = True
        if announce:
            _warn("fastbag: compiling decoding kernels (first use after install, %s) ...", ESTIMATE)

    def on_end(self, ev: Any) -> None:
        if not self._ours(ev):
            return
        with self._lock:
            self._depth = max(0, self._depth - 1)
            if self._depth:
                return
            self._seconds += time.perf_counter() - self._started
            self._timer = threading.Timer(QUIET_SECONDS, self.report)
            self._timer.daemon = True
            self._timer.start()

    def report(self) -> None:
        """Log the time the compilation took (once kernels have stopped compiling for a moment, or at exit)."""
        with self._lock:
            if self._depth or self._seconds == 0.0:
                return
            if self._timer is not None:
                self._timer.cancel()
            seconds, self._seconds, self._timer = self._seconds, 0.0, None
            first, self._reported = not self._reported, True
        if first:
            _warn("fastbag: decoding kernels compiled in %.1f s (cached: later runs load them at once)", seconds)
        elif seconds >= LATER_SECONDS:
            _warn("fastbag: more decoding kernels compiled in %.1f s (cached)", seconds)


def _warn(message: str, *args: Any) -> None:
    """``LOG.warning(message, *args)`` without ``Logger.findCaller``: rosgraph (imported with rospy or the
    classic rosbag module) makes every logger created after it a RospyLogger, whose findCaller loops forever
    when it cannot match the caller's frame (as from a Numba compile event on Python 3.11): the first read
    after install hung in a script that had imported rosbag first."""
    if LOG.isEnabledFor(logging.WARNING):
        LOG.handle(LOG.makeRecord(LOG.name, logging.WARNING, __file__, 0, message, args, None,
                                  func="compile notice"))


NOTICE = CompileNotice()
event.register("numba:compile", NOTICE)
atexit.register(NOTICE.report)  # a script that exits right after its first read still hears the time
