"""Shared test plumbing: where the real bags are, and how to parametrize over them.

The real bags live in ``../shared/data`` beside the repository. On a clone
without it, every test that needs them is skipped with that reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
NO_DATA = f"real bags not found: {DATA} (../shared/data beside the repository) is absent"


def data_files(folder: str, pattern: str = "*.bag") -> list:
    """``pytest.param`` per file in ``DATA/folder``, id'd by name; one skipped param when absent."""
    files = sorted((DATA / folder).glob(pattern)) if (DATA / folder).is_dir() else []
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    return [pytest.param(f, id=f.name[:80]) for f in files]


def data_file(relative: str) -> Path:
    """One real file; skips the test when it is absent."""
    path = DATA / relative
    if not path.exists():
        pytest.skip(NO_DATA if not DATA.is_dir() else f"{path} is absent")
    return path
