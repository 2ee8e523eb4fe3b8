"""Message types compiled into a layout: row dtypes, variable slots, an op program, under encoding rules.

A type's serialized form is fixed-size parts interleaved with parts whose
length is in the data (strings, dynamic arrays). The layout splits it into

- **tables**: the root table has one row per message; every array of
  variable-size structs (``TransformStamped[]``, ``string[]``) gets a child
  table with one row per element across all messages. A table's *row dtype*
  is a structured dtype of its fixed fields in wire order, nested structs as
  nested dtypes (ROS1 time: ``secs``, ``nsecs``).
- **slots**: the variable parts of a table: a string, an array of fixed-size
  elements (primitives or fixed structs: its element dtype), or a child table.
  Per row, the kernel records where a slot's data starts and its count.
- **ops**: the wire order as a flat ``int64`` program the generic kernel in
  :mod:`fastbag.msg.kernels` interprets (one row per op, see ``OP_*``).
  Program 0 is the root table's; each child table's sub-program follows,
  ending in END.

An :class:`Encoding` is the set of rules the compiler follows for one wire
format; the compiler and the kernel are the same for every encoding:

- :data:`ROS1`: packed little-endian, no alignment, no header.
- :data:`CDR_LE` / :data:`CDR_BE` (XCDR1 as ROS2 writes it): a 4-byte
  encapsulation header; each primitive aligned to its own size counted from
  the byte after the header; strings count their trailing NUL; an empty
  struct takes one byte. The compiler tracks what it knows of the position
  modulo 8: padding it can predict becomes an unnamed gap in the row (copied
  with its neighbours in one op); padding that depends on the data (after a
  string or a sequence) becomes an ``OP_ALIGN`` the kernel applies. Arrays of
  fixed structs keep zero-copy views: the element dtype's itemsize is the
  CDR stride (a 19-byte Livox point is 20 bytes), and the last element's
  trailing padding need not be present (``tail``).

A new message type compiles a new program, never new machine code.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from .msgdef import MsgDef, TypeName, TypeRegistry

# Op codes and operand columns: [code, a, b, c, d, e]
OP_END = 0     # end of a (sub-)program
OP_COPY = 1    # a = bytes, b = offset in the current table's row
OP_STRING = 2  # a = slot, b = 1 when the length counts a trailing NUL (CDR): u32 length, then bytes
OP_ARRAY = 3   # a = slot, b = element stride, c = element alignment, d = tail (bytes of padding the last
#                element may lack): u32 count, then count elements
OP_TABLE = 4   # a = slot, b = child table, c = sub-program start, d = fixed count or -1 (u32 count first),
#                e = the fewest bytes an element takes (bounds a count read from the data)
OP_ALIGN = 5   # a = alignment: skip to the next multiple of a, counted from the end of the message's header
OP_WIDTH = 6

PRIMITIVES: dict[str, np.dtype] = {
    "bool": np.dtype("?"), "int8": np.dtype("i1"), "uint8": np.dtype("u1"),
    "int16": np.dtype("<i2"), "uint16": np.dtype("<u2"), "int32": np.dtype("<i4"), "uint32": np.dtype("<u4"),
    "int64": np.dtype("<i8"), "uint64": np.dtype("<u8"), "float32": np.dtype("<f4"), "float64": np.dtype("<f8"),
    "time": np.dtype([("secs", "<u4"), ("nsecs", "<u4")]),
    "duration": np.dtype([("secs", "<i4"), ("nsecs", "<i4")]),
}
#: Alignment of each primitive in an aligned encoding: its size (ROS1 time and duration: their u32/i32 parts).
ALIGNMENT: dict[str, int] = {name: min(dt.itemsize, 4) if dt.names else dt.itemsize
                             for name, dt in PRIMITIVES.items()}

#: Representation ids of the CDR encapsulation header (byte 0 and 1, big-endian u16), as DDS-XTypes names them.
REPRESENTATIONS: dict[int, str] = {
    0x0000: "CDR_BE", 0x0001: "CDR_LE", 0x0002: "PL_CDR_BE", 0x0003: "PL_CDR_LE",
    0x0006: "CDR2_BE", 0x0007: "CDR2_LE", 0x0008: "PL_CDR2_BE", 0x0009: "PL_CDR2_LE",
    0x000A: "D_CDR2_BE", 0x000B: "D_CDR2_LE", 0x0010: "XML", 0x0011: "JSON",
}


@dataclass(frozen=True)
class Encoding:
    """The rules of one wire format, as the layout compiler and the kernel apply them."""

    name: str                    # "ros1", "cdr"
    big_endian: bool = False
    aligned: bool = False        # each primitive aligned to its own size, from the end of the header
    header: int = 0              # bytes before the first field (CDR's encapsulation header)
    representation: int = -1     # the header's representation id every message must carry (-1: no header)
    string_nul: bool = False     # a string's u32 length counts its trailing NUL, which is not part of the value
    empty_struct: int = 0        # bytes a struct without fields takes
    trailing: int = 0            # bytes after the last field a message may carry (padding to 4 bytes)


#: ROS1: packed little-endian, nothing aligned, no header.
ROS1 = Encoding("ros1")
#: CDR (XCDR1) as ROS2 writes it, little-endian (representation CDR_LE) and big-endian (CDR_BE).
CDR_LE = Encoding("cdr", False, True, 4, 0x0001, True, 1, 3)
CDR_BE = replace(CDR_LE, big_endian=True, representation=0x0000)


@dataclass(frozen=True)
class Slot:
    """A variable part of a table's rows.

    ``kind`` is ``"string"``, ``"array"`` (elements of ``dtype``, whose
    itemsize is the element stride; the last element may lack ``tail`` bytes
    of trailing padding) or ``"table"`` (rows of child table ``child``;
    ``fixed_count`` for ``T[N]``, else None).
    """

    index: int
    table: int
    kind: str
    dtype: np.dtype | None = None
    child: int | None = None
    fixed_count: int | None = None
    tail: int = 0


@dataclass
class Node:
    """How a table presents its fields: a tree mirroring the message type.

    ``fields`` maps each field name, in wire order, to one of
    ``("fixed", None)`` (a field of the row dtype), ``("slot", Slot)`` or
    ``("struct", Node)`` (a nested struct with variable parts, whose fixed
    fields are the row dtype's field of the same name, if any).
    """

    msgtype: str
    fields: dict[str, tuple[str, object]] = field(default_factory=dict)
    has_fixed: bool = False   # the row dtype (or the parent's sub-dtype) holds some of its fields
    constants: dict[str, object] = field(default_factory=dict)  # the type's constants, by name

    def __post_init__(self) -> None:
        self.msgtype = TypeName(self.msgtype)  # (an array's msgtype: rosbags' spelling equals it too)


@dataclass
class Table:
    """One table: its row dtype and how its fields present."""

    index: int
    dtype: np.dtype
    node: Node
    scalar: bool = False  # elements of a ``string[]``: each row is one string, not a struct


@dataclass
class Layout:
    """A compiled message type: tables, slots, the op program and its bounds, and its encoding."""

    msgtype: str
    tables: list[Table]
    slots: list[Slot]
    ops: np.ndarray          # int64 (n, OP_WIDTH)
    row_sizes: np.ndarray    # int64 per table
    min_size: int            # the fewest bytes a message of this type can have (header included)
    depth: int               # nesting depth of child tables (the kernel's stack bound)
    md5sum: str = ""         # computed from a ROS1 definition
    encoding: Encoding = ROS1
    registry: TypeRegistry | None = None  # the types it was compiled from
    _other_order: "Layout | None" = field(default=None, repr=False)

    def with_byte_order(self, big_endian: bool) -> "Layout":
        """The same type in the given byte order of its encoding (CDR: each message's header says which)."""
        if big_endian == self.encoding.big_endian or not self.encoding.aligned or self.registry is None:
            return self
        if self._other_order is None:
            self._other_order = compile_layout(self.registry, replace(
                self.encoding, big_endian=big_endian, representation=0x0000 if big_endian else 0x0001))
        return self._other_order


#: Nested structs a layout may flatten (each field of a struct type counts once per place it appears):
#: real types have hundreds at most; a hostile definition nesting a type twice at each of 70 levels
#: would have 2**70, and compiling it must fail, not run for ever.
MAX_STRUCTS = 100_000


class _Compiler:
    def __init__(self, registry: TypeRegistry, encoding: Encoding = ROS1, parent: "_Compiler | None" = None) -> None:
        from ..errors import UnsupportedError
        self.unsupported = UnsupportedError
        self.registry = registry
        self.enc = encoding
        self.ops: list[list[int]] = []
        self.tables: list[Table] = []
        self.slots: list[Slot] = []
        self.pending: list[tuple[int, int, str, bool]] = []  # (TABLE op index, child table, type, scalar)
        # Shared with the scratch compilers of fixed elements (see element): each type's element layout is
        # worked out once, not again at every level that nests it (2**depth times for a chain of types).
        self._fixed_cache: dict[str, tuple[np.dtype, int] | None] = parent._fixed_cache if parent else {}
        self._is_fixed: dict[str, bool] = parent._is_fixed if parent else {}
        self._max_alignment: dict[str, int] = parent._max_alignment if parent else {}
        self._structs_left: list[int] = parent._structs_left if parent else [MAX_STRUCTS]
        # What is known of the wire position (from the end of the header): it is `res` modulo `mod`.
        self.mod, self.res = 8, 0

    # -- alignment ---------------------------------------------------------------
    def first_alignment(self, typ: str, array: int | None = None) -> int:
        """Alignment of the first thing a field of this type puts on the wire."""
        if not self.enc.aligned:
            return 1
        if array == -1 or typ == "string":
            return 4  # the u32 count or length
        if typ in PRIMITIVES:
            return ALIGNMENT[typ]
        fields = self.registry[typ].fields
        return self.first_alignment(fields[0].type, fields[0].array) if fields else 1

    def max_alignment(self, typ: str) -> int:
        """The largest alignment inside a fixed-size type."""
        if not self.enc.aligned:
            return 1
        if typ in PRIMITIVES:
            return ALIGNMENT[typ]
        if typ not in self._max_alignment:  # once per type: types may nest one another many times over
            self._max_alignment[typ] = max([self.max_alignment(f.type) for f in self.registry[typ].fields],
                                           default=1)
        return self._max_alignment[typ]

    def align(self, n: int) -> int:
        """Align the wire position to ``n``: the padding when it is known here (the caller copies it as
        a gap in the row, which advances the position), else 0 after emitting an ALIGN op for the kernel."""
        if n <= 1 or not self.enc.aligned:
            return 0
        if self.mod >= n:
            return -self.res % n
        self.emit(OP_ALIGN, n)
        self.mod, self.res = n, 0
        return 0

    def advance(self, nbytes: int) -> None:
        self.res = (self.res + nbytes) % self.mod

    def forget(self, mod: int = 1) -> None:
        """After a part whose length is in the data: only ``position % mod == 0`` is known."""
        self.mod, self.res = max(mod, 1), 0

    # -- fixed-size types ------------------------------------------------------
    def is_fixed(self, typ: str) -> bool:
        """True for a primitive or a struct of only fixed-size parts."""
        if typ in PRIMITIVES:
            return True
        if typ in ("string", "wstring"):
            return False
        if typ not in self._is_fixed:
            self._is_fixed[typ] = all(f.array != -1 and self.is_fixed(f.type) for f in self.registry[typ].fields)
        return self._is_fixed[typ]

    def element(self, typ: str) -> tuple[np.dtype, int] | None:
        """``(dtype, tail)`` of a fixed-size array element, else None.

        The dtype's itemsize is the element stride; ``tail`` the bytes of
        trailing padding the last element may lack. In an aligned encoding a
        struct qualifies when its layout is the same for every element: it
        starts with its largest alignment (else it is decoded as a table).
        """
        if typ in PRIMITIVES:
            return PRIMITIVES[typ], 0
        if typ in self._fixed_cache:
            return self._fixed_cache[typ]
        result = None
        if self.is_fixed(typ) and self.first_alignment(typ) == self.max_alignment(typ):
            scratch = _Compiler(self.registry, self.enc, self)  # at position 0: every padding is known, no ops
            dtype, _ = scratch.struct(0, typ, 0)
            align, raw = self.max_alignment(typ), dtype.itemsize
            stride = -(-raw // align) * align
            if stride != raw:  # trailing padding: part of the element's stride, not of its fields
                dtype = np.dtype({"names": list(dtype.names), "formats": [dtype.fields[n][0] for n in dtype.names],
                                  "offsets": [dtype.fields[n][1] for n in dtype.names], "itemsize": stride})
            result = (dtype, stride - raw)
        self._fixed_cache[typ] = result
        return result

    # -- programs --------------------------------------------------------------
    def new_table(self, msgtype: str, scalar: bool) -> int:
        index = len(self.tables)
        self.tables.append(Table(index, np.dtype([]), Node(msgtype), scalar))
        return index

    def emit(self, code: int, a: int = 0, b: int = 0, c: int = 0, d: int = 0, e: int = 0) -> int:
        if code == OP_COPY and self.ops and self.ops[-1][0] == OP_COPY and \
                self.ops[-1][2] + self.ops[-1][1] == b:
            self.ops[-1][1] += a  # contiguous in the wire and in the row: one copy
            return len(self.ops) - 1
        self.ops.append([code, a, b, c, d, e])
        return len(self.ops) - 1

    def new_slot(self, table: int, kind: str, **kw: object) -> Slot:
        slot = Slot(len(self.slots), table, kind, **kw)  # type: ignore[arg-type]
        self.slots.append(slot)
        return slot

    def program(self, table: int, msgtype: str, scalar: bool, root: bool) -> None:
        """Emit a table's program; its child tables are queued."""
        self.mod, self.res = (8, 0) if root else (1, 0)  # an element starts wherever the previous one ended
        if scalar:  # a string[] element: the row is the string itself
            self.align(self.first_alignment("string"))
            slot = self.new_slot(table, "string")
            self.emit(OP_STRING, slot.index, int(self.enc.string_nul))
            self.tables[table].node.fields["value"] = ("slot", slot)
            self.tables[table].dtype = np.dtype([])
        else:
            dtype, node = self.struct(table, msgtype, 0)
            self.tables[table].dtype = dtype
            self.tables[table].node = node
        self.emit(OP_END)

    def struct(self, table: int, msgtype: str, offset: int) -> tuple[np.dtype, Node]:
        """Emit the ops of ``msgtype`` at row ``offset``; return its sub-dtype and node.

        Padding known at compile time stays in the row as unnamed gaps, so a
        run of fixed fields is one copy; the fixed fields of nested structs
        become nested dtypes.
        """
        self._structs_left[0] -= 1
        if self._structs_left[0] < 0:
            raise self.unsupported(f"Type {self.registry.main} nests more than {MAX_STRUCTS} structs (its types "
                                   "include one another many times over): fastbag does not decode it.")
        msgdef = self.registry[msgtype]
        node = Node(msgtype, constants={c.name: c.value for c in msgdef.constants})
        names, formats, offsets = [], [], []
        size = 0

        def copy(nbytes: int, row_bytes: int | None = None) -> None:
            nonlocal size
            if nbytes:
                self.emit(OP_COPY, nbytes, offset + size)
            self.advance(nbytes)
            size += nbytes if row_bytes is None else row_bytes

        if not msgdef.fields and self.enc.empty_struct:  # CDR: one byte, so the struct has an address
            copy(self.enc.empty_struct)
        for f in msgdef.fields:
            if f.type == "wstring":
                raise self.unsupported(f"Type {msgtype} has a wstring field {f.name!r}: ROS2 writers disagree on "
                                       "its wire form and fastbag does not decode it.")
            copy(self.align(self.first_alignment(f.type, f.array)))  # padding before the field
            element = self.element(f.type)
            if f.array is None and self.is_fixed(f.type):         # a fixed primitive or struct: in the row
                if f.type in PRIMITIVES:
                    dt = PRIMITIVES[f.type]
                    copy(dt.itemsize)
                else:
                    start = size
                    dt, _ = self.struct(table, f.type, offset + size)
                    size = start + dt.itemsize
                names.append(f.name), formats.append(dt), offsets.append(size - dt.itemsize)
                node.fields[f.name] = ("fixed", None)
            elif element is not None and f.array is not None and f.array >= 0:  # T[N], fixed elements: in the row
                dt, tail = element
                dt_n = np.dtype((dt, (f.array,)))
                start = size
                copy(max(dt_n.itemsize - tail, 0) if f.array else 0, dt_n.itemsize)
                names.append(f.name), formats.append(dt_n), offsets.append(start)
                node.fields[f.name] = ("fixed", None)
            elif element is not None and f.array == -1:           # T[], fixed elements: a view per message
                dt, tail = element
                slot = self.new_slot(table, "array", dtype=dt, tail=tail)
                k = self.first_alignment(f.type)
                self.emit(OP_ARRAY, slot.index, dt.itemsize, k, tail)
                self.forget(min(k, 4) if f.type in PRIMITIVES else 1)
                node.fields[f.name] = ("slot", slot)
            elif f.type == "string" and f.array is None:
                slot = self.new_slot(table, "string")
                self.emit(OP_STRING, slot.index, int(self.enc.string_nul))
                self.forget()
                node.fields[f.name] = ("slot", slot)
            elif f.array is None:                                 # nested struct with variable parts: inline
                sub, sub_node = self.struct(table, f.type, offset + size)
                if sub.names:  # even of 0 bytes (only T[0] fields): its fixed fields live in the row
                    names.append(f.name), formats.append(sub), offsets.append(size)
                    sub_node.has_fixed = True
                size += sub.itemsize
                node.fields[f.name] = ("struct", sub_node)
            else:                                                 # array of variable-size elements: child table
                scalar = f.type == "string"
                child = self.new_table(f.type, scalar)
                slot = self.new_slot(table, "table", child=child,
                                     fixed_count=None if f.array == -1 else f.array)
                op = self.emit(OP_TABLE, slot.index, child, -1, f.array)
                self.pending.append((op, child, f.type, scalar))
                self.forget()
                node.fields[f.name] = ("slot", slot)
        dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})
        return dtype, node

    def compile(self) -> Layout:
        main = self.registry.main
        self.program(self.new_table(main, False), main, False, True)
        depth = {0: 0}
        while self.pending:
            op, child, msgtype, scalar = self.pending.pop(0)
            self.ops[op][3] = len(self.ops)
            parent = next(s.table for s in self.slots if s.child == child)
            depth[child] = depth[parent] + 1
            self.program(child, msgtype, scalar, False)
        for row in self.ops:  # each array of variable structs learns its elements' fewest bytes
            if row[0] == OP_TABLE:
                row[5] = _min_size(self.ops, row[3])
        if self.enc.big_endian:  # compiled little-endian; the same layout with every field big-endian
            for table in self.tables:
                table.dtype = table.dtype.newbyteorder(">")
            self.slots[:] = [replace(s, dtype=s.dtype.newbyteorder(">")) if s.dtype is not None else s
                             for s in self.slots]
            for table in self.tables:
                _rebind_slots(table.node, self.slots)
        ops = np.array(self.ops, dtype=np.int64).reshape(-1, OP_WIDTH)
        row_sizes = np.array([t.dtype.itemsize for t in self.tables], dtype=np.int64)
        return Layout(main, self.tables, self.slots, ops, row_sizes, self.enc.header + _min_size(self.ops),
                      max(depth.values()), encoding=self.enc, registry=self.registry)


def _rebind_slots(node: Node, slots: list[Slot]) -> None:
    """Point a node tree at the given slots (after they were replaced)."""
    for name, (kind, what) in list(node.fields.items()):
        if kind == "slot":
            node.fields[name] = ("slot", slots[what.index])  # type: ignore[union-attr]
        elif kind == "struct":
            _rebind_slots(what, slots)  # type: ignore[arg-type]


def _min_size(ops: list[list[int]], start: int = 0) -> int:
    """Fewest bytes of the struct whose program starts at ``start``: its fixed bytes, 4 per length
    prefix, and fixed-count arrays of structs at their elements' fewest bytes (padding not counted)."""
    total = 0
    for code, a, b, c, d, e in ops[start:]:
        if code == OP_END:
            break
        if code == OP_COPY:
            total += a
        elif code in (OP_STRING, OP_ARRAY) or (code == OP_TABLE and d < 0):
            total += 4
        elif code == OP_TABLE:
            total += d * _min_size(ops, c)
    return total


def compile_layout(registry: TypeRegistry, encoding: Encoding = ROS1) -> Layout:
    """Compile the main type of ``registry`` under ``encoding``'s rules (see the module docstring)."""
    return _Compiler(registry, encoding).compile()


#: ``encoding`` names :func:`layout_for` takes, and the rules each means.
ENCODINGS = {"ros1": ROS1, "cdr": CDR_LE}
#: ``schema_encoding`` names :func:`layout_for` takes.
SCHEMA_ENCODINGS = ("ros1msg", "ros2msg", "ros2idl")


def parse_schema(msgtype: str, definition: str | bytes, schema_encoding: str = "ros1msg") -> TypeRegistry:
    """A definition text, written as ``schema_encoding`` says, as a TypeRegistry."""
    from ..errors import UnsupportedError
    if schema_encoding == "ros1msg":
        from .msgdef import parse_definition
        return parse_definition(msgtype, definition, allow_empty=True)
    if schema_encoding == "ros2msg":
        from .ros2defs import parse_ros2msg
        return parse_ros2msg(msgtype, definition)
    if schema_encoding == "ros2idl":
        from .ros2defs import parse_ros2idl
        return parse_ros2idl(msgtype, definition)
    raise UnsupportedError(f"Definitions written as {schema_encoding!r} cannot be decoded into arrays; "
                           f"fastbag reads {', '.join(SCHEMA_ENCODINGS)}.")


def layout_for(msgtype: str, definition: str, *, encoding: str = "ros1", schema_encoding: str = "ros1msg") -> Layout:
    """The layout of a connection's type, cached by its definition text.

    ``encoding`` is how messages are serialized (``"ros1"`` or ``"cdr"``;
    CDR layouts are little-endian, and :meth:`Layout.with_byte_order` gives
    the big-endian one a message's header may ask for); ``schema_encoding``
    how ``definition`` is written (``"ros1msg"``, ``"ros2msg"``,
    ``"ros2idl"``). An empty text is a type without fields
    (``std_msgs/Empty``): callers decide whether an empty definition is real
    or lost before asking. Raises UnsupportedError for another encoding.
    """
    from ..errors import UnsupportedError
    if encoding not in ENCODINGS:
        raise UnsupportedError(f"Messages encoded as {encoding!r} cannot be decoded into arrays; "
                               f"fastbag decodes {', '.join(ENCODINGS)}.")
    return _compiled(msgtype, definition, ENCODINGS[encoding], schema_encoding)


@lru_cache(maxsize=256)
def _compiled(msgtype: str, definition: str, encoding: Encoding, schema_encoding: str) -> Layout:
    from ..errors import DefinitionError
    try:
        registry = parse_schema(msgtype, definition, schema_encoding)
        layout = compile_layout(registry, encoding)
        if schema_encoding == "ros1msg":
            layout.md5sum = registry.md5sum()
    except RecursionError:
        raise DefinitionError(f"Type {msgtype} nests its types too deeply to decode.") from None
    except (ValueError, OverflowError, MemoryError) as exc:  # NumPy refuses the dtype (a fixed array too large)
        raise DefinitionError(f"Type {msgtype} has a fixed part too large to decode: {exc}") from exc
    return layout


__all__ = ["CDR_BE", "CDR_LE", "ENCODINGS", "Encoding", "Layout", "MsgDef", "Node", "PRIMITIVES", "ROS1", "Slot",
           "Table", "compile_layout", "layout_for", "parse_schema"]
