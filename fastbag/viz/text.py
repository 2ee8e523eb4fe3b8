"""Text from a file, made safe to show: in a terminal, an HTML page or a matplotlib label.

Topic names, types, strings in messages and file names come from whoever
wrote the bag. Shown as they are, a newline in a topic name forges a row of
``fastbag info``, an ESC sequence drives the terminal, a NUL makes HTML
invalid, a lone surrogate (a file name that is not UTF-8, decoded as Python
decodes names) cannot be encoded at all. (matplotlib labels also take
``parse_math=False``: ``$...$`` would be math to it.)
"""

from __future__ import annotations

import re

#: C0 and C1 control characters, DEL, and lone surrogates (which no UTF-8 output can encode).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as os.fsdecode and surrogateescape keep it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(value: object) -> str:
    """``str(value)`` with control characters and lone surrogates written as escapes (``\\n``, ``\\x1b``,
    ``\\xe9`` for a byte of a name that is not UTF-8): one line, safe in a terminal and encodable as
    UTF-8."""
    text = str(value)
    return _UNPRINTABLE.sub(_escape, text) if _UNPRINTABLE.search(text) else text

