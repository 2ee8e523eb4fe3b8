"""Message types compiled into a layout: packed row dtypes, variable slots, an op program.

A type's serialized form is fixed-size parts interleaved with parts whose
length is in the data (strings, dynamic arrays). The layout splits it into

- **tables**: the root table has one row per message; every array of
  variable-size structs (``TransformStamped[]``, ``string[]``) gets a child
  table with one row per element across all messages. A table's *row dtype*
  is a packed little-endian structured dtype of its fixed fields in wire
  order, nested structs as nested dtypes (ROS1 time: ``secs``, ``nsecs``).
- **slots**: the variable parts of a table: a string, an array of fixed-size
  elements (primitives or fixed structs: its element dtype), or a child table.
  Per row, the kernel records where a slot's data starts and its count.
- **ops**: the wire order as a flat ``int64`` program the generic kernel in
  :mod:`fastbag.kernels` interprets (one row per op, see ``OP_*``). Program 0
  is the root table's; each child table's sub-program follows, ending in END.

A new message type compiles a new program, never new machine code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .msgdef import MsgDef, TypeRegistry

# Op codes and operand columns: [code, a, b, c, d]
OP_END = 0     # end of a (sub-)program
OP_COPY = 1    # a = bytes, b = offset in the current table's row
OP_STRING = 2  # a = slot: u32 length, then bytes
OP_ARRAY = 3   # a = slot, b = element size: u32 count, then count elements
OP_TABLE = 4   # a = slot, b = child table, c = sub-program start, d = fixed count or -1 (u32 count first),
#                e = the fewest bytes an element takes (bounds a count read from the data)
OP_WIDTH = 6

PRIMITIVES: dict[str, np.dtype] = {
    "bool": np.dtype("?"), "int8": np.dtype("i1"), "uint8": np.dtype("u1"),
    "int16": np.dtype("<i2"), "uint16": np.dtype("<u2"), "int32": np.dtype("<i4"), "uint32": np.dtype("<u4"),
    "int64": np.dtype("<i8"), "uint64": np.dtype("<u8"), "float32": np.dtype("<f4"), "float64": np.dtype("<f8"),
    "time": np.dtype([("secs", "<u4"), ("nsecs", "<u4")]),
    "duration": np.dtype([("secs", "<i4"), ("nsecs", "<i4")]),
}


@dataclass(frozen=True)
class Slot:
    """A variable part of a table's rows.

    ``kind`` is ``"string"``, ``"array"`` (elements of ``dtype``) or ``"table"``
    (rows of child table ``child``; ``fixed_count`` for ``T[N]``, else None).
    """

    index: int
    table: int
    kind: str
    dtype: np.dtype | None = None
    child: int | None = None
    fixed_count: int | None = None


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


@dataclass
class Table:
    """One table: its row dtype and how its fields present."""

    index: int
    dtype: np.dtype
    node: Node
    scalar: bool = False  # elements of a ``string[]``: each row is one string, not a struct


@dataclass
class Layout:
    """A compiled message type: tables, slots, the op program and its bounds."""

    msgtype: str
    tables: list[Table]
    slots: list[Slot]
    ops: np.ndarray          # int64 (n, OP_WIDTH)
    row_sizes: np.ndarray    # int64 per table
    min_size: int            # the fewest bytes a message of this type can have
    depth: int               # nesting depth of child tables (the kernel's stack bound)
    md5sum: str = ""         # computed from the definition


class _Compiler:
    def __init__(self, registry: TypeRegistry) -> None:
        self.registry = registry
        self.ops: list[list[int]] = []
        self.tables: list[Table] = []
        self.slots: list[Slot] = []
        self.pending: list[tuple[int, int, str, bool]] = []  # (TABLE op index, child table, type, scalar)
        self._fixed_cache: dict[str, np.dtype | None] = {}

    # -- fixed-size types ------------------------------------------------------
    def fixed_dtype(self, msgtype: str) -> np.dtype | None:
        """The packed dtype of a type whose every field is fixed-size, else None."""
        if msgtype in self._fixed_cache:
            return self._fixed_cache[msgtype]
        names, formats, offsets, size = [], [], [], 0
        result: np.dtype | None = None
        for f in self.registry[msgtype].fields:
            base = self._element_fixed(f.type)
            if base is None or f.array == -1:
                break
            dt = base if f.array is None else np.dtype((base, (f.array,)))
            names.append(f.name)
            formats.append(dt)
            offsets.append(size)
            size += dt.itemsize
        else:
            result = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})
        self._fixed_cache[msgtype] = result
        return result

    def _element_fixed(self, typ: str) -> np.dtype | None:
        if typ in PRIMITIVES:
            return PRIMITIVES[typ]
        if typ == "string":
            return None
        return self.fixed_dtype(typ)

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

    def program(self, table: int, msgtype: str, scalar: bool) -> None:
        """Emit a table's program; its child tables are queued."""
        if scalar:  # a string[] element: the row is the string itself
            slot = self.new_slot(table, "string")
            self.emit(OP_STRING, slot.index)
            self.tables[table].node.fields["value"] = ("slot", slot)
            self.tables[table].dtype = np.dtype([])
        else:
            dtype, node = self.struct(table, msgtype, 0)
            self.tables[table].dtype = dtype
            self.tables[table].node = node
        self.emit(OP_END)

    def struct(self, table: int, msgtype: str, offset: int) -> tuple[np.dtype, Node]:
        """Emit the ops of ``msgtype`` at row ``offset``; return its packed sub-dtype and node."""
        node = Node(msgtype, constants={c.name: c.value for c in self.registry[msgtype].constants})
        names, formats, offsets = [], [], []
        size = 0
        for f in self.registry[msgtype].fields:
            element = self._element_fixed(f.type)
            if element is not None and f.array != -1:          # fixed: copied into the row
                dt = element if f.array is None else np.dtype((element, (f.array,)))
                self.emit(OP_COPY, dt.itemsize, offset + size)
                names.append(f.name), formats.append(dt), offsets.append(size)
                size += dt.itemsize
                node.fields[f.name] = ("fixed", None)
            elif element is not None:                          # T[] of fixed-size elements
                slot = self.new_slot(table, "array", dtype=element)
                self.emit(OP_ARRAY, slot.index, element.itemsize)
                node.fields[f.name] = ("slot", slot)
            elif f.type == "string" and f.array is None:
                slot = self.new_slot(table, "string")
                self.emit(OP_STRING, slot.index)
                node.fields[f.name] = ("slot", slot)
            elif f.array is None:                              # nested struct with variable parts: inline
                sub, sub_node = self.struct(table, f.type, offset + size)
                if sub.names:  # even of 0 bytes (only T[0] fields): its fixed fields live in the row
                    names.append(f.name), formats.append(sub), offsets.append(size)
                    size += sub.itemsize
                    sub_node.has_fixed = True
                node.fields[f.name] = ("struct", sub_node)
            else:                                              # array of variable-size elements: child table
                scalar = f.type == "string"
                child = self.new_table(f.type, scalar)
                slot = self.new_slot(table, "table", child=child,
                                     fixed_count=None if f.array == -1 else f.array)
                op = self.emit(OP_TABLE, slot.index, child, -1, f.array)
                self.pending.append((op, child, f.type, scalar))
                node.fields[f.name] = ("slot", slot)
        dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})
        return dtype, node

    def compile(self) -> Layout:
        main = self.registry.main
        self.program(self.new_table(main, False), main, False)
        depth = {0: 0}
        while self.pending:
            op, child, msgtype, scalar = self.pending.pop(0)
            self.ops[op][3] = len(self.ops)
            parent = next(s.table for s in self.slots if s.child == child)
            depth[child] = depth[parent] + 1
            self.program(child, msgtype, scalar)
        for row in self.ops:  # each array of variable structs learns its elements' fewest bytes
            if row[0] == OP_TABLE:
                row[5] = _min_size(self.ops, row[3])
        ops = np.array(self.ops, dtype=np.int64).reshape(-1, OP_WIDTH)
        row_sizes = np.array([t.dtype.itemsize for t in self.tables], dtype=np.int64)
        return Layout(main, self.tables, self.slots, ops, row_sizes, _min_size(self.ops), max(depth.values()))


def _min_size(ops: list[list[int]], start: int = 0) -> int:
    """Fewest bytes of the struct whose program starts at ``start``: its fixed bytes, 4 per length
    prefix, and fixed-count arrays of structs at their elements' fewest bytes."""
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


def compile_layout(registry: TypeRegistry) -> Layout:
    """Compile the main type of ``registry`` (see the module docstring)."""
    return _Compiler(registry).compile()


@lru_cache(maxsize=256)
def layout_for(msgtype: str, definition: str) -> Layout:
    """The layout of a connection's type, cached by its definition text.

    An empty text is a type without fields (``std_msgs/Empty``): callers
    decide whether an empty definition is real or lost before asking.
    """
    from ..errors import DefinitionError
    from .msgdef import parse_definition
    try:
        registry = parse_definition(msgtype, definition, allow_empty=True)
        layout = compile_layout(registry)
        layout.md5sum = registry.md5sum()
    except RecursionError:
        raise DefinitionError(f"Type {msgtype} nests its types too deeply to decode.") from None
    except (ValueError, OverflowError, MemoryError) as exc:  # NumPy refuses the dtype (a fixed array too large)
        raise DefinitionError(f"Type {msgtype} has a fixed part too large to decode: {exc}") from exc
    return layout


__all__ = ["Layout", "MsgDef", "Node", "Slot", "Table", "compile_layout", "layout_for", "PRIMITIVES"]
