"""ROS2 message definitions: ``ros2msg`` and ``ros2idl`` texts -> the same :class:`TypeRegistry` as ROS1.

MCAP schemas and rosbag2's ``message_definitions`` store a type's definition
with its dependencies, as ROS1 does: the main type's text, then per dependency
a line of ``=`` signs and ``MSG: pkg/Type`` (``ros2msg``) or ``IDL:
pkg/msg/Type`` (``ros2idl``) and its text. Both parsers give
:class:`~fastbag.msg.msgdef.MsgDef` objects with normalized names
(``pkg/msg/Type`` and ``pkg::msg::Type`` become ``pkg/Type``), so the layout
compiler needs nothing per schema language.

ROS2 ``.msg`` differences from ROS1, as rosidl reads them:

* ``byte`` and ``char`` are ``uint8`` (ROS1: ``int8`` and ``uint8``);
  ``wstring`` is parsed (the layout compiler refuses to decode it).
* bounded strings ``string<=N`` are strings; ``T[<=N]`` are sequences
  (a u32 count on the wire, as ``T[]``).
* a field may have a default value after its name (``int32 x 5``,
  ``string s "a # b"``); it is not part of the wire format and is dropped.
* ``builtin_interfaces/Time`` (``int32 sec``, ``uint32 nanosec``) and
  ``Duration`` are message types; their definitions are supplied when a text
  leaves them out. ``Header`` is ``std_msgs/Header`` (stamp, frame_id).
* a service event (``pkg/srv/Name_Event``) stored as the service's own text
  (request ``---`` response, as rosbag2 writes it) is read as the event type
  ROS2 publishes: ``service_msgs/ServiceEventInfo info``, ``request[<=1]``,
  ``response[<=1]``.

IDL (the subset rosidl generates and rosbag2 stores): modules, structs,
``const`` values in ``<Type>_Constants`` modules, ``typedef``s (arrays),
``enum``s (u32 on the wire), ``sequence<T>`` and ``sequence<T, N>``, bounded
strings ``string<N>``, arrays ``T name[N]``; ``#include`` lines, comments and
``@annotations`` are ignored.

Pure Python (stdlib only), cheap to import.
"""

from __future__ import annotations

import re

from ..errors import DefinitionError
from .msgdef import (
    Constant,
    Field,
    MsgDef,
    TypeRegistry,
    _check_acyclic,
    _constant_value,
    _is_field_name,
    _Known,
    _resolve,
    _split_blocks,
)

__all__ = ["BUILTIN_DEFINITIONS", "normalize_ros2_name", "parse_ros2idl", "parse_ros2msg"]

_ROS2_BUILTINS = {
    "bool": "bool", "byte": "uint8", "char": "uint8", "float32": "float32", "float64": "float64",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32",
    "int64": "int64", "uint64": "uint64", "string": "string", "wstring": "wstring",
}

#: Definitions ROS2 texts rely on without always including them.
BUILTIN_DEFINITIONS: dict[str, str] = {
    "builtin_interfaces/Time": "int32 sec\nuint32 nanosec\n",
    "builtin_interfaces/Duration": "int32 sec\nuint32 nanosec\n",
    "std_msgs/Header": "builtin_interfaces/Time stamp\nstring frame_id\n",
    "service_msgs/ServiceEventInfo": ("uint8 REQUEST_SENT = 0\nuint8 REQUEST_RECEIVED = 1\nuint8 RESPONSE_SENT = 2\n"
                                      "uint8 RESPONSE_RECEIVED = 3\nuint8 event_type\nbuiltin_interfaces/Time stamp\n"
                                      "char[16] client_gid\nint64 sequence_number\n"),
}


def normalize_ros2_name(name: str) -> str:
    """``pkg/msg/Type``, ``pkg/srv/Type`` and ``pkg::msg::Type`` -> ``pkg/Type``."""
    parts = name.strip().replace("::", "/").split("/")
    return f"{parts[0]}/{parts[-1]}" if len(parts) == 3 else "/".join(parts)


# -- ros2msg ------------------------------------------------------------------------

def parse_ros2msg(msgtype: str, text: str | bytes) -> TypeRegistry:
    """Parse a ROS2 ``.msg`` definition with its ``MSG:`` dependencies (an empty text: a type without fields).

    Raises :class:`DefinitionError` for a malformed line, a missing nested
    type, duplicate field names or a type containing itself.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    main = normalize_ros2_name(msgtype)
    if main.count("/") != 1 or not all(_is_field_name(p) for p in main.split("/")):
        raise DefinitionError(f"Invalid message type name {msgtype!r}: expected 'pkg/msg/Type' or 'pkg/Type'.")
    text = "\n".join(_rename_msg_lines(text.split("\n")))
    if main.endswith("_Event") and "/srv/" in msgtype.replace("::", "/") and _is_service_text(text, main):
        text = _service_event_text(main, text)
    blocks = _blocks(main, text)
    for name, body in BUILTIN_DEFINITIONS.items():
        if name not in blocks:
            blocks[name] = list(enumerate(body.split("\n"), 1))
    known = _Known(set(blocks))
    types = {name: _parse_block(name, lines, known) for name, lines in blocks.items()}
    _check_acyclic(_used(main, types))
    return TypeRegistry(main, _used(main, types))


def _blocks(main: str, text: str) -> dict[str, list[tuple[int, str]]]:
    """The text split per type; a type given twice (some rosbag2 versions repeat dependencies) is taken once,
    when both texts agree."""
    parts = re.split(r"^[ \t]*={3,}[ \t]*\r?$", text, flags=re.M)
    merged, seen = [parts[0]], {main: parts[0]}
    for part in parts[1:]:
        header = next((line.strip() for line in part.split("\n") if line.strip()), "")
        name = normalize_ros2_name(header[4:]) if header.startswith("MSG:") else None
        if name in seen:
            if _code(seen[name]) != _code(part):
                raise DefinitionError(f"Definition of {main} defines {name} twice, differently.")
            continue
        if name is not None:
            seen[name] = part
        merged.append(part)
    return _split_blocks(main, ("=" * 80).join(merged))


def _code(block: str) -> list[str]:
    return [c for c in (_strip_comment(line).strip() for line in block.split("\n")) if c]


def _rename_msg_lines(lines: list[str]) -> list[str]:
    """``MSG: pkg/msg/Type`` lines as ``MSG: pkg/Type`` (the ROS1 splitter then takes them)."""
    return [f"MSG: {normalize_ros2_name(line.strip()[4:])}" if line.strip().startswith("MSG:") else line
            for line in lines]


def _is_service_text(text: str, main: str) -> bool:
    first_block = re.split(r"^={3,}\s*$", text, maxsplit=1, flags=re.M)[0]
    return any(line.strip() == "---" for line in first_block.split("\n"))


def _service_event_text(main: str, text: str) -> str:
    """The event type of a service whose text (request --- response) stands for it."""
    first, _, rest = text.partition("\n=")
    request, _, response = first.partition("\n---")
    service = main[:-len("_Event")]
    blocks = [f"service_msgs/ServiceEventInfo info\n{service}_Request[<=1] request\n"
              f"{service}_Response[<=1] response\n",
              f"{'=' * 80}\nMSG: {service}_Request\n{request}\n",
              f"{'=' * 80}\nMSG: {service}_Response\n{response.partition(chr(10))[2]}\n"]
    return "".join(blocks) + (f"\n={rest}" if rest else "")


def _used(main: str, types: dict[str, MsgDef]) -> dict[str, MsgDef]:
    """The types ``main`` uses (supplied builtins it does not use are left out)."""
    keep, queue = {main}, [main]
    while queue:
        for f in types[queue.pop()].fields:
            if not f.is_builtin and f.type != "wstring" and f.type in types and f.type not in keep:
                keep.add(f.type)
                queue.append(f.type)
    return {name: types[name] for name in types if name in keep or name not in BUILTIN_DEFINITIONS}


def _strip_comment(line: str) -> str:
    """The line without its ``#`` comment; a ``#`` inside quotes is kept."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            return line[:i]
        i += 1
    return line


_FIELD = re.compile(r"^(?P<type>[A-Za-z_][\w/]*)(?P<bound><=\d+)?(?P<array>\[(?:<=)?\d*\])?\s+(?P<rest>.*)$")


def _parse_block(name: str, lines: list[tuple[int, str]], known: _Known) -> MsgDef:
    fields: list[Field] = []
    constants: list[Constant] = []
    seen: set[str] = set()
    for lineno, line in lines:
        code = _strip_comment(line).strip()
        if not code:
            continue
        match = _FIELD.match(code)
        if not match:
            raise _line_error(name, lineno, line, "expected 'type name'")
        written, rest = match["type"], match["rest"]
        field_name, _, after = rest.partition("=") if re.match(r"^\w+\s*=", rest) else ("", "", "")
        if field_name:  # a constant: TYPE NAME=value
            constants.append(_constant(name, lineno, line, written, field_name.strip(), after.strip()))
            continue
        field_name = rest.split(None, 1)[0]  # what follows is a default value
        if not _is_field_name(field_name):
            raise _line_error(name, lineno, line, f"{field_name!r} is not a valid field name")
        if field_name in seen:
            raise _line_error(name, lineno, line, f"duplicate field {field_name!r}")
        seen.add(field_name)
        array = None
        if match["array"]:
            dim = match["array"][1:-1]
            array = -1 if dim == "" or dim.startswith("<=") else int(dim)
        if written in _ROS2_BUILTINS:
            if match["bound"] and written not in ("string", "wstring"):
                raise _line_error(name, lineno, line, f"{written} cannot be bounded")
            fields.append(Field(field_name, _ROS2_BUILTINS[written], array, written))
        else:
            if match["bound"]:
                raise _line_error(name, lineno, line, f"{written} cannot be bounded")
            nested = normalize_ros2_name(written)
            resolved = _resolve(name, nested, known)
            # A bare Header is std_msgs/Header (ROS 1's rule, kept for converted texts) unless the text defines
            # the package's own Header, which is what ROS 2 builds it as (a bare name is of the same package)
            if nested == "Header" and (own := f"{name.rpartition('/')[0]}/Header") in known:
                resolved = own
            fields.append(Field(field_name, resolved, array, written))
    return MsgDef(name, tuple(fields), tuple(constants))


def _constant(typename: str, lineno: int, line: str, written: str, name: str, value_text: str) -> Constant:
    typ = _ROS2_BUILTINS.get(written)
    if typ is None or typ == "wstring":
        raise _line_error(typename, lineno, line, f"{written!r} is not a valid constant type")
    if typ == "string":
        value: int | float | bool | str = _unquote(value_text)
    else:
        try:
            value = _constant_value(typ, value_text) if typ != "bool" else value_text.lower() in ("true", "1")
        except ValueError:
            try:  # ROS2 also takes hexadecimal and other Python literals for numbers
                value = float(value_text) if typ.startswith("float") else int(value_text, 0)
            except ValueError:
                raise _line_error(typename, lineno, line, f"{value_text!r} is not a {typ} value") from None
    return Constant(typ, name, value, written, value_text)


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def _line_error(typename: str, lineno: int, line: str, reason: str) -> DefinitionError:
    return DefinitionError(f"Type {typename} has a bad line {lineno} {line.strip()!r}: {reason}.")


# -- ros2idl ------------------------------------------------------------------------

_IDL_TYPES = {
    "boolean": "bool", "octet": "uint8", "char": "uint8", "wchar": "uint16", "int8": "int8", "uint8": "uint8",
    "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32", "int64": "int64",
    "uint64": "uint64", "float": "float32", "double": "float64", "long double": "float64",
    "short": "int16", "unsigned short": "uint16", "long": "int32", "unsigned long": "uint32",
    "long long": "int64", "unsigned long long": "uint64", "string": "string", "wstring": "wstring",
    "float32": "float32", "float64": "float64", "bool": "bool", "byte": "uint8",
}

#: The field rosidl gives a struct without fields in IDL (CDR writes one byte for it either way).
_PLACEHOLDER = "structure_needs_at_least_one_member"

_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|::|[A-Za-z_]\w*|-?\d[\w.+-]*|.', re.S)


def _tokens(text: str) -> list[str]:
    """IDL tokens without whitespace, comments, ``#`` lines and annotations."""
    text = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))
    raw = [t for t in _TOKEN.findall(text) if t.strip() and not t.startswith(("//", "/*"))]
    out: list[str] = []
    i = 0
    while i < len(raw):
        if raw[i] == "@":  # @name or @name(...): skipped
            i += 2
            if i < len(raw) and raw[i] == "(":
                depth = 0
                while i < len(raw):
                    depth += {"(": 1, ")": -1}.get(raw[i], 0)
                    i += 1
                    if depth == 0:
                        break
            continue
        out.append(raw[i])
        i += 1
    return out


class _IdlParser:
    def __init__(self, tokens: list[str], owner: str) -> None:
        self.t = tokens
        self.i = 0
        self.owner = owner
        self.structs: dict[str, list[Field]] = {}
        self.constants: dict[str, list[Constant]] = {}
        self.typedefs: dict[str, tuple[str, int | None]] = {}
        self.enums: set[str] = set()

    def error(self, reason: str) -> DefinitionError:
        near = " ".join(self.t[max(0, self.i - 3):self.i + 3])
        return DefinitionError(f"IDL of {self.owner}: {reason} near {near!r}.")

    def peek(self, k: int = 0) -> str:
        return self.t[self.i + k] if self.i + k < len(self.t) else ""

    def take(self, expected: str | None = None) -> str:
        if self.i >= len(self.t):
            raise self.error(f"expected {expected or 'more'} at the end")
        tok = self.t[self.i]
        if expected is not None and tok != expected:
            raise self.error(f"expected {expected!r}, found {tok!r}")
        self.i += 1
        return tok

    def parse(self, scope: list[str]) -> None:
        while self.i < len(self.t) and self.peek() != "}":
            kw = self.take()
            if kw == "module":
                name = self.take()
                self.take("{")
                self.parse([*scope, name])
                self.take("}")
            elif kw == "struct":
                self.struct(scope)
            elif kw == "const":
                self.constant(scope)
            elif kw == "typedef":
                base = self.type_name(scope)
                name = self.take()
                dim = self.dims()
                self.typedefs["::".join([*scope, name])] = (base, dim)
                self.typedefs.setdefault(name, (base, dim))
            elif kw == "enum":
                name = self.take()
                self.enums.update({"::".join([*scope, name]), name})
                self.take("{")
                while self.take() != "}":
                    pass
            elif kw != ";":
                raise self.error(f"unexpected {kw!r}")
            if self.peek() == ";":
                self.take()

    def dims(self) -> int | None:
        if self.peek() != "[":
            return None
        self.take("[")
        dim = self.take()
        self.take("]")
        if self.peek() == "[":
            raise self.error("multi-dimensional arrays are not ROS types")
        return int(dim, 0)

    def type_name(self, scope: list[str]) -> str:
        """A type, as a ROS type name: builtin, ``pkg/Type`` or ``seq:<type>`` for sequences."""
        tok = self.take()
        if tok == "sequence":
            self.take("<")
            inner = self.type_name(scope)
            if self.peek() == ",":
                self.take(",")
                self.take()
            self.take(">")
            return f"seq:{inner}"
        if tok == "long" and self.peek() == "double":
            tok = f"{tok} {self.take()}"
        if tok in ("unsigned", "long") and self.peek() in ("short", "long"):
            tok = f"{tok} {self.take()}"
            if tok == "unsigned long" and self.peek() == "long":
                tok = f"{tok} {self.take()}"
        if tok in ("string", "wstring") and self.peek() == "<":
            self.take("<")
            self.take()
            self.take(">")
        if tok in _IDL_TYPES:
            return _IDL_TYPES[tok]
        name = [tok]
        while self.peek() == "::":
            self.take("::")
            name.append(self.take())
        return "::".join(name)

    def struct(self, scope: list[str]) -> None:
        name = self.take()
        self.take("{")
        fields: list[Field] = []
        while self.peek() != "}":
            typ = self.type_name(scope)
            fname = self.take()
            dim = self.dims()
            self.take(";")
            fields.append(self.field(scope, fname, typ, dim))
        self.take("}")
        if [f.name for f in fields] == [_PLACEHOLDER]:  # rosidl's stand-in for "no fields": the same one byte
            fields = []
        self.structs[normalize_ros2_name("::".join([*scope, name]))] = fields

    def field(self, scope: list[str], name: str, typ: str, dim: int | None) -> Field:
        array = dim
        if typ.startswith("seq:"):
            if dim is not None:
                raise self.error("arrays of sequences are not ROS types")
            typ, array = typ[4:], -1
        for _ in range(8):  # typedefs of typedefs
            if typ not in self.typedefs:
                break
            base, tdim = self.typedefs[typ]
            if tdim is not None and array is not None:
                raise self.error("arrays of arrays are not ROS types")
            typ, array = base, tdim if tdim is not None else array
            if typ.startswith("seq:"):
                typ, array = typ[4:], -1
        if typ in self.enums:
            typ = "uint32"
        elif typ not in _IDL_TYPES.values():
            typ = normalize_ros2_name(typ if "::" in typ else "::".join([*scope[:1], "msg", typ]))
        return Field(name, typ, array)

    def constant(self, scope: list[str]) -> None:
        typ = self.type_name(scope)
        name = self.take()
        self.take("=")
        value = []
        while self.peek() != ";":
            value.append(self.take())
        text = " ".join(value)
        owner = scope[-1][:-len("_Constants")] if scope and scope[-1].endswith("_Constants") else ""
        struct = normalize_ros2_name("::".join([*scope[:-1], owner])) if owner else ""
        if typ == "string":
            parsed: int | float | bool | str = _unquote(text)
        elif typ == "bool":
            parsed = text.upper() == "TRUE"
        elif typ.startswith("float"):
            parsed = float(text)
        else:
            parsed = int(text, 0)
        self.constants.setdefault(struct, []).append(Constant(typ, name, parsed, typ, text))


def parse_ros2idl(msgtype: str, text: str | bytes) -> TypeRegistry:
    """Parse an IDL definition with its ``IDL: pkg/msg/Type`` dependencies, as rosbag2 stores it.

    Raises :class:`DefinitionError` for IDL it cannot read, a missing type, or
    a type containing itself.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    main = normalize_ros2_name(msgtype)
    # Dependencies follow separator lines and 'IDL: name' lines: the parser reads every module anyway.
    body = "\n".join(line for line in text.split("\n")
                     if not re.fullmatch(r"\s*(={3,}|IDL:.*)\s*", line))
    parser = _IdlParser(_tokens(body), main)
    try:
        parser.parse([])
    except ValueError as exc:  # a number that is not one (array size, constant value)
        raise parser.error(f"bad number ({exc})") from None
    if parser.i < len(parser.t):
        raise parser.error("unbalanced braces")
    types = {name: MsgDef(name, tuple(fields), tuple(parser.constants.get(name, ())))
             for name, fields in parser.structs.items()}
    for name, body_text in BUILTIN_DEFINITIONS.items():
        if name not in types:
            lines = list(enumerate(body_text.split("\n"), 1))
            types[name] = _parse_block(name, lines, _Known(set(types) | set(BUILTIN_DEFINITIONS)))
    if main not in types:
        raise DefinitionError(f"IDL of {main} does not define it; it defines {', '.join(sorted(parser.structs))}.")
    _check_acyclic(_used(main, types))
    return TypeRegistry(main, _used(main, types))
