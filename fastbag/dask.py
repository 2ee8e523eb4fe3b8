"""``fastbag.dask``: topics of many bags as Dask collections (:func:`read_topic`, :func:`read_array`).

The public name of :mod:`fastbag.convert.dask`, so that ``import fastbag.dask`` and ``from fastbag.dask
import read_topic`` work as ``fastbag.dask.read_topic`` does. Dask itself loads on the first call.
"""

from .convert.dask import read_array, read_topic

__all__ = ["read_array", "read_topic"]
