"""fastbag: read ROS bag files into NumPy, as fast as the hardware allows.

>>> import fastbag
>>> with fastbag.open("run.bag") as bag:            # doctest: +SKIP
...     for m in bag.messages(topics=["/imu"], raw=True):
...         m.topic, m.time, m.data

``import fastbag`` stays light: NumPy only; codecs and Numba load on first use.
"""

from typing import Any as _Any

from .bag import Bag, Message, TopicInfo, open
from .convert.dataset import SyncedDataset, collate
from .convert.export import ExportResult, export
from .msg.arrays import to_ns
from .msg.sensors import image, pointcloud
from .container import Connection
from .errors import (BagFormatError, DecodeError, DecryptionError, DefinitionError, EncryptionKeyError, FastbagError,
                     FastbagWarning, NoMessagesError, NotFoundError, UnsupportedError)
from .ros1.writer import Writer

from ._version import __version__  # noqa: F401 - the package's version, as fastbag.__version__

__all__ = [
    "Bag", "BagFormatError", "Connection", "DecodeError", "DecryptionError", "DefinitionError", "EncryptionKeyError",
    "ExportResult", "FastbagError", "FastbagWarning", "Message", "NoMessagesError", "NotFoundError", "SyncedDataset",
    "TopicInfo", "UnsupportedError", "Writer", "collate", "export", "image", "open", "pointcloud", "to_ns",
]


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__", "dask"])


def __getattr__(name: str) -> _Any:
    """``fastbag.dask``: the Dask readers, imported on first use (dask itself loads only then)."""
    if name == "dask":
        import importlib  # (not `from . import dask`: that asks this __getattr__ again)

        return importlib.import_module(f"{__name__}.dask")  # a submodule: `import fastbag.dask` finds it too
    raise AttributeError(f"module 'fastbag' has no attribute {name!r}")
