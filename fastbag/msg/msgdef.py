"""ROS1 message definitions: connection text -> field tree, and the md5sum.

A ROS1 bag connection stores the full definition of its message type as text:
the main type's ``.msg`` text, then for each type it depends on a line of ``=``
signs, a line ``MSG: pkg/Type`` and that type's text.  :func:`parse_definition`
turns such a text into a :class:`TypeRegistry` of :class:`MsgDef` objects whose
fields name their types by full name (``geometry_msgs/Point``) or builtin name
(``float64``), ready for a layout compiler.

:meth:`TypeRegistry.md5sum` recomputes the md5sum the way ROS1 ``genmsg``
(``compute_md5_text``) does, so a reader can check its parse against the md5sum
the writer stored in the connection.

Rules, as ROS1 applies them (and as checked against real bags):

* ``#`` starts a comment anywhere on a line, except inside a ``string``
  constant, whose value is the raw rest of the line after the first ``=``.
  A line is a constant when an ``=`` appears before any ``#``.
* ``byte`` is ``int8`` and ``char`` is ``uint8``; the written name is kept
  (:attr:`Field.written_type`) because the md5 text uses it.
* ``Header`` means ``std_msgs/Header``.  A bare name resolves in the package of
  the type using it.  If the resolved name has no ``MSG:`` block but exactly one
  block has that short name, that block is used: this is how 2010-era texts,
  whose ``Header`` is ``roslib/Header``, resolve, and it tolerates writers that
  put a type in another package than the one its users assume.  A full name
  (``pkg/Type``) must be present as written.  ROS2 spellings ``pkg/msg/Type``
  are read as ``pkg/Type``.
* The md5 text of a type is its constants (``type NAME=value``, type and value
  as written), then its fields: ``type[suffix] name`` for builtins (``byte``
  and ``char`` as written), ``<md5 of the type> name`` for nested types, with
  no array suffix.  So ``roslib/Header`` and ``std_msgs/Header`` hash alike.

This module is pure Python (stdlib only) and cheap to import.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import DefinitionError

__all__ = [
    "BUILTIN_SIZES",
    "BUILTIN_TYPES",
    "EMPTY_MD5",
    "Constant",
    "Field",
    "MsgDef",
    "TypeName",
    "type_name",
    "TypeRegistry",
    "compose_definition",
    "load_definitions",
    "parse_definition",
]

class TypeName(str):
    """A message type's name, equal to its other spelling: ``sensor_msgs/Imu`` (ROS 1's and rospy's) ==
    ``sensor_msgs/msg/Imu`` (ROS 2's, and rosbags' in every format), whichever side is which.

    Code ported from rosbags filters ``connection.msgtype`` by the ``pkg/msg/Type`` spelling, on ROS 1
    bags too: as a plain str, that filter matched nothing, and the empty connection list it made then
    selected every message (as rosbags reads one). Other strings compare as str. It hashes as the str it
    is, so a dict or set keyed by one spelling does not find the other: compare with ``==``. A connection's
    name is one only where spelled ``pkg/Type`` (:func:`type_name`): strict serializers refuse a str subclass.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, str):
            return NotImplemented
        return str.__eq__(self, other) or str.__eq__(ros1_spelling(self), ros1_spelling(other))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__


def type_name(name: str) -> str:
    """A recording's name of a type as a :class:`TypeName` where rosbags spells it otherwise (ROS 1's
    ``pkg/Type``); any other name (ROS 2's ``pkg/msg/Type``, a protobuf or JSON schema's) as a plain str,
    which is rosbags' spelling already and what strict serializers (``yaml.safe_dump``) take."""
    return TypeName(name) if name.count("/") == 1 else str(name)


def ros1_spelling(name: str) -> str:
    """``pkg/Type`` (rospy's spelling) of ``pkg/msg/Type``; any other name as it is."""
    parts = name.split("/")
    return f"{parts[0]}/{parts[2]}" if len(parts) == 3 and parts[1] == "msg" else name


#: Wire size in bytes of each fixed-size builtin (``string`` varies, so is absent).
BUILTIN_SIZES: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float32": 4,
    "float64": 8,
    "time": 8,
    "duration": 8,
}

#: Every normalized builtin type name.
BUILTIN_TYPES: frozenset[str] = frozenset(BUILTIN_SIZES) | {"string"}

#: md5sum of a type with no fields and no constants (``std_msgs/Empty``): the md5 of "".
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"

# Legacy ROS1 aliases: the wire format is that of the normalized type.
_ALIASES = {"byte": "int8", "char": "uint8"}

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}

# Constants may have any builtin type except time and duration.
_CONSTANT_TYPES = (BUILTIN_TYPES - {"time", "duration"}) | set(_ALIASES)

_HEADER = "std_msgs/Header"

_SEPARATOR_MIN = 3  # a line of at least this many '=' separates type blocks
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass(frozen=True)
class Field:
    """One field of a message type.

    ``type`` is normalized: a builtin name (``byte``/``char`` become
    ``int8``/``uint8``) or a full ``pkg/Type`` name.  ``array`` is None for a
    scalar, -1 for a dynamic array ``T[]`` (u32 count prefix on the wire) and
    N >= 0 for a fixed array ``T[N]``.  ``written_type`` is the base type as
    the text spells it (``byte``, ``Header``, ``Point32``); it defaults to
    ``type``.
    """

    name: str
    type: str
    array: int | None = None
    written_type: str = ""

    def __post_init__(self) -> None:
        if not self.written_type:
            object.__setattr__(self, "written_type", self.type)

    @property
    def is_builtin(self) -> bool:
        """True when the base type is a builtin, False for a nested message type."""
        return self.type in BUILTIN_TYPES or self.type == "wstring"  # ROS2's wide string: only its parser makes it

    @property
    def is_array(self) -> bool:
        """True for ``T[]`` and ``T[N]``."""
        return self.array is not None


@dataclass(frozen=True)
class Constant:
    """A constant ``type NAME=value`` of a message type.

    ``type`` is normalized like :attr:`Field.type`.  ``value`` is parsed (int,
    float, bool or, for ``string``, the raw stripped rest of the line).
    ``written_type`` and ``value_text`` keep the text as written, which the
    md5sum uses; they default to ``type`` and to ``value`` formatted.
    """

    type: str
    name: str
    value: int | float | bool | str
    written_type: str = ""
    value_text: str = ""

    def __post_init__(self) -> None:
        if not self.written_type:
            object.__setattr__(self, "written_type", self.type)
        if not self.value_text:
            object.__setattr__(self, "value_text", str(self.value))


@dataclass(frozen=True)
class MsgDef:
    """A message type: full name ``pkg/Type``, fields in wire order, constants."""

    name: str
    fields: tuple[Field, ...]
    constants: tuple[Constant, ...] = ()

    @property
    def package(self) -> str:
        """The package part of the name (``geometry_msgs`` for ``geometry_msgs/Pose``)."""
        return self.name.rpartition("/")[0]


class TypeRegistry:
    """Every type of one connection's definition, and their md5sums.

    ``types`` maps each full type name found in the text to its :class:`MsgDef`;
    every nested type a field names is in it, and no type contains itself.
    """

    def __init__(self, main: str, types: dict[str, MsgDef]) -> None:
        self.main = main
        self.types = types
        self._md5: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"TypeRegistry(main={self.main!r}, types={sorted(self.types)!r})"

    def __getitem__(self, name: str) -> MsgDef:
        return self.types[name]

    def __contains__(self, name: object) -> bool:
        return name in self.types

    def md5_text(self, name: str | None = None) -> str:
        """The text genmsg hashes for a type (the main type by default).

        Constants first (``type NAME=value`` as written), then fields: a
        builtin as ``type[suffix] name`` with the type as written, a nested
        type as ``md5 name`` with no array suffix.
        """
        msgdef = self.types[self.main if name is None else name]
        lines = [f"{c.written_type} {c.name}={c.value_text}" for c in msgdef.constants]
        for f in msgdef.fields:
            if f.is_builtin:
                suffix = "" if f.array is None else "[]" if f.array < 0 else f"[{f.array}]"
                lines.append(f"{f.written_type}{suffix} {f.name}")
            else:
                lines.append(f"{self.md5sum(f.type)} {f.name}")
        # genmsg strips the whole text, which only matters for an empty type.
        return "\n".join(lines).strip()

    def md5sum(self, name: str | None = None) -> str:
        """The ROS1 md5sum of a type (the main type by default), as genmsg computes it."""
        name = self.main if name is None else name
        if name not in self._md5:
            # Recursion is safe: parse_definition rejects cycles.  surrogateescape
            # gives back the exact bytes of a text that was not valid UTF-8.
            text = self.md5_text(name)
            self._md5[name] = hashlib.md5(text.encode("utf-8", "surrogateescape")).hexdigest()
        return self._md5[name]


def parse_definition(msgtype: str, text: str | bytes, *, allow_empty: bool = False) -> TypeRegistry:
    """Parse a connection's full message definition.

    ``msgtype`` names the main type (``sensor_msgs/Imu``); ``text`` is the
    connection's ``message_definition`` (bytes are decoded as UTF-8, keeping
    invalid bytes so the md5sum still matches).

    An empty text raises, since writers that lose a definition write nothing;
    but ``std_msgs/Empty`` is empty too: pass ``allow_empty=True`` (for example
    when the connection's md5sum is :data:`EMPTY_MD5`) to get a type with no
    fields instead.

    Raises :class:`DefinitionError` for an empty text, a malformed line, a
    missing nested type, duplicate field names or a type containing itself.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    main = _normalize_name(msgtype)
    if not _is_type_name(main):
        raise DefinitionError(f"Invalid message type name {msgtype!r}: expected 'pkg/Type'.")
    if not text.strip() and not allow_empty:
        raise DefinitionError(f"Message type {main} has an empty definition.")

    blocks = _split_blocks(main, text)
    names = _Known(set(blocks))
    types = {}
    for name, lines in blocks.items():
        types[name] = _parse_block(name, lines, names)
    _check_acyclic(types)
    return TypeRegistry(main, types)


# --- splitting the text into one block per type -------------------------------


def _split_blocks(main: str, text: str) -> dict[str, list[tuple[int, str]]]:
    """Split the text at separator lines; return each type's (line number, line) pairs."""
    blocks: dict[str, list[tuple[int, str]]] = {main: []}
    current = blocks[main]
    expect_name = False  # just saw a separator: the next non-blank line is 'MSG: ...'
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        stripped = line.strip()
        if len(stripped) >= _SEPARATOR_MIN and stripped.count("=") == len(stripped):
            expect_name = True
            continue
        if expect_name:
            if not stripped:
                continue
            if not stripped.startswith("MSG:"):
                raise DefinitionError(
                    f"Definition of {main} has a separator not followed by 'MSG: pkg/Type' "
                    f"at line {lineno}: {line!r}."
                )
            name = _normalize_name(stripped[4:].strip())
            if not _is_type_name(name):
                raise DefinitionError(f"Definition of {main} names an invalid type at line {lineno}: {line!r}.")
            if name in blocks:
                raise DefinitionError(f"Definition of {main} defines {name} twice, again at line {lineno}.")
            current = blocks[name] = []
            expect_name = False
            continue
        current.append((lineno, line))
    if expect_name:
        raise DefinitionError(f"Definition of {main} ends with a separator and no 'MSG: pkg/Type' line.")
    return blocks


# --- parsing one type's block -------------------------------------------------


def _parse_block(name: str, lines: list[tuple[int, str]], known: set[str]) -> MsgDef:
    """Parse one type's lines into a MsgDef, resolving nested type names against ``known``."""
    fields: list[Field] = []
    constants: list[Constant] = []
    seen: set[str] = set()
    for lineno, line in lines:
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        if "=" in code:
            constants.append(_parse_constant(name, lineno, line, code))
            continue
        f = _parse_field(name, lineno, line, code, known)
        if f.name in seen:
            raise DefinitionError(f"Type {name} has a duplicate field {f.name!r} at line {lineno}: {line.strip()!r}.")
        seen.add(f.name)
        fields.append(f)
    return MsgDef(name, tuple(fields), tuple(constants))


def _parse_field(typename: str, lineno: int, line: str, code: str, known: set[str]) -> Field:
    """Parse ``type name``, ``type[] name`` or ``type[N] name`` (``code`` is the line without comment)."""
    parts = code.split()
    if len(parts) != 2:
        raise _line_error(typename, lineno, line, "expected 'type name'")
    written, name = parts
    if not _is_field_name(name):
        raise _line_error(typename, lineno, line, f"{name!r} is not a valid field name")

    base, array = written, None
    if written.endswith("]"):
        base, bracket, dim = written[:-1].partition("[")
        if not bracket:
            raise _line_error(typename, lineno, line, f"{written!r} is not a valid type")
        if dim == "":
            array = -1
        elif dim.isascii() and dim.isdigit():
            array = int(dim)
        else:
            raise _line_error(typename, lineno, line, f"{written!r} has an invalid array size")

    if base in BUILTIN_TYPES or base in _ALIASES:
        return Field(name, _ALIASES.get(base, base), array, base)
    nested = _normalize_name(base)
    if not (_is_type_name(nested) or _is_field_name(nested)):
        raise _line_error(typename, lineno, line, f"{base!r} is not a valid type")
    return Field(name, _resolve(typename, nested, known), array, base)


def _parse_constant(typename: str, lineno: int, line: str, code: str) -> Constant:
    """Parse ``type NAME=value``; ``line`` is the raw line, ``code`` the line without comment."""
    written = code.split(None, 1)[0]
    if "<=" in written:  # string<=N, T[<=N]: the '=' made it look like a constant
        raise _line_error(typename, lineno, line, f"{written!r} is a bounded type, which ROS1 does not have")
    if written not in _CONSTANT_TYPES:
        raise _line_error(typename, lineno, line, f"{written!r} is not a valid constant type")
    if written == "string":
        # The value is everything after the first '=', '#' and '=' included.
        # That '=' lies before any '#' since the caller found one in `code`.
        head, _, value_text = line.partition("=")
        value_text = value_text.strip()
    else:
        head, _, value_text = code.partition("=")
        value_text = value_text.strip()
    head_parts = head.split()
    if len(head_parts) != 2 or head_parts[0] != written:
        raise _line_error(typename, lineno, line, "expected 'type NAME=value'")
    name = head_parts[1]
    if not _is_field_name(name):
        raise _line_error(typename, lineno, line, f"{name!r} is not a valid constant name")
    typ = _ALIASES.get(written, written)
    try:
        value = _constant_value(typ, value_text)
    except ValueError as exc:
        raise _line_error(typename, lineno, line, str(exc)) from None
    return Constant(typ, name, value, written, value_text)


def _constant_value(typ: str, text: str) -> int | float | bool | str:
    """Parse a constant's value text for its (normalized) type; ValueError if it does not fit."""
    if typ == "string":
        return text
    if typ == "bool":
        if text in ("True", "true", "1"):
            return True
        if text in ("False", "false", "0"):
            return False
        raise ValueError(f"{text!r} is not a bool value")
    if typ in ("float32", "float64"):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a float value") from None
    # Integers: decimal only, as genmsg; int() alone would also take '1_000'.
    digits = text[1:] if text[:1] in "+-" else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{text!r} is not an integer value")
    value = int(text)
    low, high = _INT_RANGES[typ]
    if not low <= value <= high:
        raise ValueError(f"{value} is out of range for {typ}")
    return value


# --- names --------------------------------------------------------------------


class _Known(frozenset):
    """The type names of one definition, with an index by short name (``Header`` -> ``roslib/Header``)
    so resolving a bare name is one lookup, not a scan of every block."""

    def __new__(cls, names: set[str] | frozenset[str]) -> "_Known":
        known = super().__new__(cls, names)
        known.by_short = {}
        for full in sorted(names):
            known.by_short.setdefault(full.rpartition("/")[2], []).append(full)
        return known


def _resolve(typename: str, base: str, known: set[str]) -> str:
    """Full name of a nested type written ``base`` inside type ``typename``."""
    if base == "Header":
        full = _HEADER
    elif "/" in base:
        return base  # a full name must be present as written
    else:
        full = f"{typename.rpartition('/')[0]}/{base}"
    if full in known:
        return full
    # Lenient: a single block with that short name (roslib/Header in 2010 bags).
    by_short = known.by_short if isinstance(known, _Known) else _Known(known).by_short
    candidates = by_short.get(base, [])
    return candidates[0] if len(candidates) == 1 else full


def _normalize_name(name: str) -> str:
    """'pkg/msg/Type' (ROS2 spelling, as some converters write) -> 'pkg/Type'."""
    pkg, sep, rest = name.partition("/msg/")
    return f"{pkg}/{rest}" if sep and "/" not in rest else name


def _is_field_name(name: str) -> bool:
    return name[:1].isalpha() and name.isascii() and set(name) <= _NAME_CHARS


def _is_type_name(name: str) -> bool:
    """True for a full name 'pkg/Type'."""
    pkg, sep, short = name.partition("/")
    return bool(sep) and _is_field_name(pkg) and _is_field_name(short)


def _line_error(typename: str, lineno: int, line: str, reason: str) -> DefinitionError:
    return DefinitionError(f"Type {typename} has a bad line {lineno} {line.strip()!r}: {reason}.")


# --- checks across types ------------------------------------------------------


#: Types nested deeper than this are refused (real ones nest under 10 deep): what walks a type's fields
#: (md5sums, the layout compiler, message classes, printing) recurses once per level.
MAX_TYPE_DEPTH = 100


def _check_acyclic(types: dict[str, MsgDef]) -> None:
    """Raise if a field names a missing type, a type contains itself, or types nest deeper than
    MAX_TYPE_DEPTH. Walked with a stack of its own, not by recursion: a hostile definition may chain
    thousands of types (Python's recursion stops at ~1000)."""
    done: dict[str, int] = {}  # type -> levels of types it nests (1: builtins only)
    for root in types:
        if root in done:
            continue
        path, on_path = [root], {root}
        stack = [iter(types[root].fields)]
        while stack:
            for f in stack[-1]:
                if f.is_builtin or f.type in done:
                    continue
                name = path[-1]
                if f.type not in types:
                    raise DefinitionError(
                        f"Type {name} uses {f.type} (field {f.name!r}) but the definition does not include it."
                    )
                if f.type in on_path:
                    cycle = " -> ".join([*path[path.index(f.type):], f.type])
                    raise DefinitionError(f"Type {f.type} contains itself: {cycle}.")
                path.append(f.type)
                on_path.add(f.type)
                stack.append(iter(types[f.type].fields))
                break
            else:  # every field of path[-1] visited
                stack.pop()
                name = path.pop()
                on_path.discard(name)
                depth = 1 + max((done[f.type] for f in types[name].fields if not f.is_builtin), default=0)
                if depth > MAX_TYPE_DEPTH:
                    raise DefinitionError(f"Type {name} nests types {depth} levels deep, more than the "
                                          f"{MAX_TYPE_DEPTH} fastbag reads (real messages nest under 10).")
                done[name] = depth


# --- definitions supplied by the user (format 1.1, lost definitions) -------------

SEPARATOR_LINE = "=" * 80


#: A string constant's line (``string NAME=value``, ROS 1 and 2): its value runs to the line's end, ``#`` included.
_STRING_CONSTANT = re.compile(r"\s*w?string(<=\d+)?\s+\w+\s*=")


def definition_code(text: str) -> tuple[str, ...]:
    """A ``.msg`` text's lines without comments (``#`` on) and blank lines: two texts that differ only there
    define the same messages. A string constant's line is kept whole (its value may hold ``#``): two texts
    that differ in a comment after one are taken as two definitions, the safe side."""
    lines = (line.strip() if _STRING_CONSTANT.match(line) else line.split("#", 1)[0].strip()
             for line in text.splitlines())
    return tuple(code for code in lines if code)


def compose_definition(msgtype: str, texts: Mapping[str, str]) -> str:
    """A connection-style definition of ``msgtype`` built from per-type texts.

    ``texts`` maps ``pkg/Type`` to that type's ``.msg`` text, or to a
    composed one (its own text, then ``MSG:`` blocks defining the types it
    uses, as a bag's connection stores it: those blocks define their types
    where ``texts`` gives no text of their own). The result is the main
    type's text followed by a ``MSG:`` block for every type it uses,
    directly or not. Raises :class:`DefinitionError` naming a type whose
    text is missing.
    """
    own: dict[str, list[tuple[int, str]]] = {}
    inner: dict[str, list[tuple[int, str]]] = {}
    for key, text in texts.items():
        name = _normalize_name(key)
        blocks = _split_blocks(name, text)
        own[name] = blocks.pop(name)
        for used, lines in blocks.items():
            inner.setdefault(used, lines)
    lookup = {**inner, **own}  # a type's own text wins over a block inside another's
    known = _Known(set(lookup))
    main = _normalize_name(msgtype)
    if main not in lookup:
        raise DefinitionError(f"No definition was given for {main}.")
    order, queue = [main], [main]
    while queue:
        name = queue.pop(0)
        for f in _parse_block(name, lookup[name], known).fields:
            if not f.is_builtin and f.type not in order:
                if f.type not in lookup:
                    raise DefinitionError(f"Type {name} uses {f.type}, whose definition was not given.")
                order.append(f.type)
                queue.append(f.type)

    def text(name: str) -> str:
        return "\n".join(line for _, line in lookup[name]).strip("\n")

    blocks = [text(main)] + [f"{SEPARATOR_LINE}\nMSG: {n}\n{text(n)}" for n in order[1:]]
    return "\n".join(blocks) + "\n"


def load_definitions(folder: str | os.PathLike[str]) -> dict[str, str]:
    """``{pkg/Type: text}`` from ``.msg`` files laid out as ``<pkg>/msg/<Type>.msg`` or ``<pkg>/<Type>.msg``
    under ``folder`` (a workspace's ``src``, say), or in ``folder`` itself being one package (its
    ``msg/<Type>.msg`` or ``<Type>.msg``: the package is the folder's name), or one package's ``msg``
    folder (the package is its parent's name)."""
    root = Path(folder)
    if not root.is_dir():
        raise DefinitionError(f"Definitions folder {root} does not exist.")
    texts = {}
    above = (root.resolve().parent.name, root.resolve().name)  # a package given, or its msg folder
    for path in sorted(root.rglob("*.msg")):
        parts = above + path.relative_to(root).parts
        pkg = parts[-3] if len(parts) >= 3 and parts[-2] == "msg" else parts[-2]
        if pkg and pkg != "msg":
            texts.setdefault(f"{pkg}/{path.stem}", path.read_text(encoding="utf-8", errors="surrogateescape"))
    return texts
