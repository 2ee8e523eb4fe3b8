"""Whether a step runs as a Numba kernel or as NumPy and Python: Numba's start is the cost to weigh.

In a fresh process the first kernel call costs 0.5 s (importing Numba, then
loading the cached kernels), more than opening a small bag and everything
``fastbag info`` shows. Steps that have a NumPy or Python way (reading an
index, locating a few records) take it while Numba is not loaded and the
work is small; once Numba is loaded (a read has started it) a kernel costs
its call alone, and every size takes the kernel.
"""

from __future__ import annotations

import sys


def numba_loaded() -> bool:
    """Whether this process has imported Numba."""
    return "numba" in sys.modules


def by_kernel(size: int, up_to: int) -> bool:
    """Whether a step over ``size`` items runs as its kernel: when Numba is loaded already, or the step is
    larger than ``up_to``, up to which its NumPy or Python way costs less than Numba's start."""
    return size > up_to or numba_loaded()
