"""Message definitions for rosbag2 topics: from the bag, from the user, or shipped with fastbag.

Newer bags (Iron and later) store each type's definition in their
``message_definitions`` table, already composed (the main type's text, then
a ``MSG: pkg/Type`` block per type it uses, as MCAP ``ros2msg`` schemas
hold them). A service event topic (``pkg/srv/Name_Event``) stores the
service's ``.srv`` text under ``pkg/srv/Name``: the event's definition is
built from it. Older bags store none: definitions then come from the
user's ``definitions=`` and from the common interface packages shipped in
``interfaces/<pkg>/msg/*.msg`` (and ``srv/*.srv``), written from the
published ROS 2 interface specifications, composed the same way.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping

INTERFACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interfaces")
SEPARATOR = "=" * 80
#: ROS 2 primitive types (``.msg`` field types that name no message).
PRIMITIVES = frozenset({
    "bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
    "int64", "uint64", "string", "wstring", "time", "duration"})
#: What every service event holds besides the request and response (service_msgs, Iron and newer).
SERVICE_EVENT = ("service_msgs/ServiceEventInfo info\n{name}_Request[<=1] request\n{name}_Response[<=1] response\n")


def split_type(msgtype: str) -> tuple[str, str, str]:
    """``("pkg", "msg", "Type")`` from ``pkg/msg/Type`` or ``pkg/Type`` (Dashing-era names)."""
    parts = msgtype.strip().split("/")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2:
        return parts[0], "msg", parts[1]
    return "", "msg", msgtype.strip()


@functools.lru_cache(maxsize=None)
def shipped(pkg: str, kind: str, name: str) -> str | None:
    """The text of a shipped interface file (``kind`` is ``msg`` or ``srv``), None if fastbag ships none."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", pkg + name) or kind not in ("msg", "srv"):
        return None
    path = os.path.join(INTERFACES, pkg, kind, f"{name}.{kind}")
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return None


def _user_lookup(definitions: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """``{(pkg, Type): text}`` from ``{"pkg/Type" or "pkg/msg/Type": text}``. A composed text (the type's,
    then ``MSG: pkg/Type`` blocks, as Iron+ bags and MCAP schemas store it) gives each of its types; a type
    the user names outright wins over a block of another's."""
    out = {}
    for key, text in definitions.items():
        pkg, _, name = split_type(key)
        main, _, _ = text.partition(SEPARATOR)
        out.setdefault((pkg, name), main)
    for text in definitions.values():
        for found, body in _msg_blocks(text).items():
            out.setdefault(found, body)
    return out


def _field_types(text: str) -> list[str]:
    """The non-primitive field types a ``.msg`` text uses, as written (``Pose``, ``geometry_msgs/Pose``)."""
    found = []
    for line in text.splitlines():
        code = line.split("#", 1)[0].strip()
        if not code or code == "---":
            continue
        words = code.split()
        if len(words) < 2 or "=" in "".join(words[1:]):
            continue  # a constant (``uint8 DEBUG=10``; the type itself may hold ``<=``) or not a field
        base = re.sub(r"\[.*\]$", "", words[0])   # T[], T[N], T[<=N]
        base = re.sub(r"<=\d+$", "", base)          # string<=N
        if base not in PRIMITIVES:
            found.append(base)
    return found


def compose(msgtype: str, find: Callable[[str, str], str | None]) -> str | None:
    """A composed definition of ``msgtype`` (main text, then ``MSG:`` blocks), None if a type is missing.

    ``find(pkg, Type)`` returns a type's own ``.msg`` text. A bare type name
    resolves in the package of the type that uses it; ``Header`` means
    ``std_msgs/Header`` where the package has none.
    """
    pkg, _, name = split_type(msgtype)
    main = find(pkg, name)
    if main is None:
        return None
    order: list[tuple[str, str]] = [(pkg, name)]
    texts = {(pkg, name): main}
    queue = [(pkg, name)]
    while queue:
        owner_pkg, owner = queue.pop(0)
        for written in _field_types(texts[(owner_pkg, owner)]):
            dep_pkg, _, dep = split_type(written)
            if not dep_pkg:
                dep_pkg = owner_pkg
                if find(dep_pkg, dep) is None and dep == "Header":
                    dep_pkg = "std_msgs"
            if (dep_pkg, dep) in texts:
                continue
            text = find(dep_pkg, dep)
            if text is None:
                return None
            texts[(dep_pkg, dep)] = text
            order.append((dep_pkg, dep))
            queue.append((dep_pkg, dep))
    blocks = [main.rstrip("\n")] + [f"{SEPARATOR}\nMSG: {p}/{n}\n{texts[(p, n)].rstrip()}" for p, n in order[1:]]
    return "\n".join(blocks) + "\n"


def _service_parts(srv: str) -> tuple[str, str, str]:
    """(request, response, dependency blocks) of a ``.srv`` text, possibly followed by ``MSG:`` blocks."""
    head, sep, rest = srv.partition(SEPARATOR)
    pieces = re.split(r"(?m)^---[ \t]*$", head, maxsplit=1)
    request, response = pieces[0], pieces[1].lstrip("\n") if len(pieces) > 1 else ""
    return request, response, (sep + rest) if sep else ""


def service_event(msgtype: str, srv: str, find: Callable[[str, str], str | None]) -> str | None:
    """The composed definition of ``pkg/srv/Name_Event`` from the service's ``.srv`` text."""
    pkg, _, event = split_type(msgtype)
    name = event[:-len("_Event")]
    request, response, stored = _service_parts(srv)
    own = {(pkg, f"{name}_Request"): request, (pkg, f"{name}_Response"): response,
           (pkg, event): SERVICE_EVENT.format(name=name)}
    for key, body in _msg_blocks(stored).items():  # the .srv's own dependency blocks, as the bag stored them
        own.setdefault(key, body)
    return compose(f"{pkg}/{event}", lambda p, n: own.get((p, n)) or find(p, n))


def stores_definition(encoding: str, text: str) -> bool:
    """Whether a ``message_definitions`` row holds a definition: text, or none in a known encoding (an empty
    ``.msg``, as rosbags writes one). rosbag2 writes a type it could not find as ``("", "")`` (some versions
    ``"unknown"``): no definition, where an empty text would read as a type without fields."""
    return bool(text.strip()) or encoding in ("ros2msg", "ros2idl")


def resolve_definition(msgtype: str, stored: Mapping[str, tuple[str, str]],
                       definitions: Mapping[str, str]) -> tuple[str, str, str]:
    """``(schema encoding, composed text, note)`` of ``msgtype``; ``("", "", "")`` when no definition is found.

    Looked up in the user's ``definitions`` where they name the type (a
    bag may store a wrong or shortened text: the user's word wins), then in
    the bag's ``stored`` definitions (``{type: (encoding, text)}``), then in
    the user's again for the types a definition uses, then in those shipped.
    A stored ``ros2msg`` text that uses a type it does not define is
    incomplete (a writer cut it short): the type is then composed from the
    user's and shipped definitions, or else the stored text completed from
    them, and ``note`` says so (empty otherwise).
    """
    user = _user_lookup(definitions)

    def find(pkg: str, name: str) -> str | None:
        found = user.get((pkg, name))
        return found if found is not None else shipped(pkg, "msg", name)

    if msgtype in stored and stores_definition(*stored[msgtype]) and split_type(msgtype)[::2] not in user:
        encoding, text = stored[msgtype]
        missing = missing_type(msgtype, text) if encoding == "ros2msg" else None
        if missing is None:
            return encoding, text, ""
        composed = compose(msgtype, find)
        if composed is not None:
            return "ros2msg", composed, (f"the definition of {msgtype} stored in the recording is incomplete (it "
                                         f"uses {missing} without defining it); using fastbag's shipped one")
        own = _blocks(msgtype, text)
        completed = compose(msgtype, lambda p, n: own.get((p, n)) or find(p, n))
        if completed is None:
            return encoding, text, ""  # decoding it says what is missing
        return "ros2msg", completed, (f"the definition of {msgtype} stored in the recording is incomplete (it "
                                      f"uses {missing} without defining it); completed from fastbag's shipped "
                                      "definitions")

    pkg, kind, name = split_type(msgtype)
    if name.endswith("_Event") and kind == "srv":
        service = f"{pkg}/srv/{name[:-len('_Event')]}"
        if service in stored and stored[service][1].strip() and stored[service][0] == "ros2msg":
            text = service_event(msgtype, stored[service][1], find)
        else:
            srv = user.get((pkg, name[:-len("_Event")])) or shipped(pkg, "srv", name[:-len("_Event")])
            text = service_event(msgtype, srv, find) if srv is not None else None
    else:
        text = compose(msgtype, find)
        if text is None and find(pkg, name) is not None:  # known, but not a type it uses: say which
            return "", "", (f"{msgtype} uses {first_missing(msgtype, find)}, which no definition describes "
                            "(stored, given in definitions= or shipped): its messages are read raw")
    return ("ros2msg", text, "") if text is not None else ("", "", "")


def _blocks(msgtype: str, text: str) -> dict[tuple[str, str], str]:
    """``{(pkg, Type): own text}`` of a composed ``ros2msg`` text: the main type's, then each ``MSG:`` block's."""
    pkg, _, name = split_type(msgtype)
    main, _, rest = text.partition(SEPARATOR)
    return {**_msg_blocks(SEPARATOR + rest), (pkg, name): main}


def _msg_blocks(text: str) -> dict[tuple[str, str], str]:
    """``{(pkg, Type): text}`` of the ``MSG: pkg/Type`` blocks after each separator in ``text`` (the first
    block of a type wins)."""
    out: dict[tuple[str, str], str] = {}
    for block in text.split(SEPARATOR)[1:]:
        header, _, body = block.strip("\n").partition("\n")
        if header.startswith("MSG:"):
            dep_pkg, _, dep = split_type(header[4:].strip())
            out.setdefault((dep_pkg, dep), body)
    return out


def missing_type(msgtype: str, text: str) -> str | None:
    """The first type a composed ``ros2msg`` text uses without defining it (``pkg/Type``), None if none."""
    own = _blocks(msgtype, text)
    return first_missing(msgtype, lambda pkg, name: own.get((pkg, name)))


def first_missing(msgtype: str, find: Callable[[str, str], str | None]) -> str | None:
    """The first type that composing ``msgtype`` through ``find`` (see :func:`compose`) finds no text for
    (``pkg/Type``), None where it composes."""
    lacking: list[str] = []

    def recording(pkg: str, name: str) -> str | None:
        found = find(pkg, name)
        if found is None and not (name == "Header" and (pkg, name) != ("std_msgs", "Header")):
            lacking.append(f"{pkg}/{name}")  # a bare Header falls back to std_msgs/Header: not missing yet
        return found

    return None if compose(msgtype, recording) is not None else (lacking[-1] if lacking else msgtype)
