"""What the conversions take from their callers: bags named by paths or globs, and fastbag.open's options."""

from __future__ import annotations

import glob
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..bag import open as open_bag


def expand_paths(paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """Paths from a path, a glob pattern or a list of either, in sorted order within each pattern;
    FileNotFoundError for a pattern that matches nothing, ValueError for no path at all."""
    items = [paths_or_glob] if isinstance(paths_or_glob, (str, os.PathLike)) else list(paths_or_glob)
    paths: list[str] = []
    for item in items:
        item = os.fspath(item)
        if glob.has_magic(item) and not os.path.exists(item):  # (a name may hold a '[' or '*' itself)
            found = sorted(glob.glob(item))
            if not found:
                raise FileNotFoundError(f"no file matches {item!r}")
            paths += found
        else:
            paths.append(item)
    if not paths:
        raise ValueError("no bag given: pass a path, a glob pattern or a list of them")
    return paths


def check_open_options(options: Mapping[str, Any], caller: str) -> None:
    """TypeError naming ``caller`` for a keyword argument that :func:`fastbag.open` does not take (they
    are passed on to it: its own error would name a function the user did not call)."""
    known = [name for name in inspect.signature(open_bag).parameters if name != "path"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"{caller} got an unexpected keyword argument {unknown[0]!r} (its other keyword "
                        f"arguments go to fastbag.open, which takes {', '.join(known)})")
