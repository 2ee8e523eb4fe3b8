"""How far a read needs a chunk's payload decoded: the ``reach`` a codec stops at (see Container.record_end).

Recorders close a chunk when a message takes it past its size, so a large
message usually ends a chunk and the small messages of other topics come
first: a read of those needs only the head of the payload.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: ``reach(prefix) -> int``: how many bytes of the payload a read needs, as far as the decoded ``prefix``
#: (uint8) tells. It grows as the prefix shows more (a record's length once its head is decoded); a codec
#: stops once the prefix holds that many. Returning the payload's size or more means all of it.
Reach = Callable[[np.ndarray], int]

_NOTHING = np.zeros(0, dtype=np.uint8)


def first_target(reach: Reach | None, limit: int) -> int:
    """The output a codec decodes first: ``limit + 1`` (all, and one byte to catch more) without ``reach``
    or when it asks for all, else what it asks for before seeing anything."""
    return limit + 1 if reach is None else next_target(reach, _NOTHING, limit)


def next_target(reach: Reach, prefix: np.ndarray, limit: int) -> int:
    """What ``reach`` asks for, given ``prefix``, as a codec's output target (see :func:`first_target`)."""
    wanted = reach(prefix)
    return limit + 1 if wanted >= limit else wanted
