"""How messages are written inside capture files: msgpack, flat, with a type table.

``messages.codec`` writes each message as an ext record holding
``[name, version, {field: value}]``, packed separately: every nested
message is one more packer call and one more bytes object. That is right
for a message on its own, and too slow for a tap that sees every delivery:
a ``CreditRead`` (eight nested messages) costs about 17 us to encode that
way here, a 1,000-lease ``ActiveLeasesRead`` about 6 ms, and the capture
must cost the actors at most a tenth of their throughput.

So a capture writes a message as a plain msgpack array, packed in one pass
by msgpack's C packer with a callback only per message object::

    [<type mark>, value_1, value_2, ...]      values in the type's field order

where ``<type mark>`` is a 2-byte msgpack bin holding an index into the
file's type table (capture format 3). The table is declared in the file
itself (a ``TYPES`` record before the first use: index, message name,
schema version, field names), so every file reads on its own, and a reader
maps each writer's fields onto its own class by *name*: a field added since
(with a default) is filled in, a field it does not know is an error, an
unknown type or a newer schema version is the codec's
``UnknownMessageType`` / ``NewerSchemaVersion``. Big ints (a Cosmos ``Int``
is 256-bit) are the codec's big-int ext, datetimes msgpack's timestamp,
tuples arrays. This is about 2.5 times faster to write than the codec's
form and half the size.

Why a bin and not an ext: msgpack's packer and unpacker handle a bin in C,
while every ext costs a Python object on the way out (``ExtType``) and a
Python call on the way in (the ext hook). Type marks as exts (format 2,
``EXT_TYPE_REF``, still read) cost about a tenth of encoding a
``CreditRead`` here, and a hook call per message when decoding. The price is one rule: in a
format 3 body an array that begins with a bin is a message, so no other
array may begin with one. Message fields are typed, and the encoder refuses
a type with a field that could hold such an array (``_leading_bytes``); a
``bytes`` field itself is never first in its message's array (the mark
is), so it is fine.

Values that repeat are written once per file (*interning*, for the types
the encoder is told to intern and by which field an object is named; the
capture writer interns a ``Lease`` by its ``uuid``). A provider's
active-lease list (a thousand leases, read every cycle) is most of what a
capture would otherwise write, and between two withdrawals it does not
change. The first time an encoder meets a lease in a file it writes it as
usual, with a 6-byte *definition* mark (type index, object index) in place
of the type mark::

    [<define: type index, object index>, value_1, value_2, ...]

and later, while the lease it meets equals (``==``) the one it last wrote
under that uuid, a *back-reference*: a small ext (``EXT_OBJECT_REF``)
holding the object index. A lease that changed (a settlement moves its
``last_settled_at``) is written anew, and becomes the one later reads are
compared with. Leases are compared by value, not identity: a node's client
builds new objects on every read, so an identity would never meet again,
and the encoder keeps only the last version of each lease, so its memory is
bounded by the leases that exist, not by how often they changed. (Values
equal by ``==`` are one object to a reader: a field that held ``1.0`` where
an equal object held ``1`` reads back as the first one's; message fields
are typed, so this does not arise.) The table belongs to a file: the writer
starts a new table with every file (``new_file()``), so each file still
reads on its own, and a reader resolves a back-reference to the very object
it built for the definition (so a decoded active-lease list shares its
``Lease`` objects across cycles while they did not change).

Neither class is thread-safe: one per thread.
"""

from __future__ import annotations

import dataclasses
import operator

import msgspec
import typing
from typing import Any, Callable, Mapping

import msgpack

from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType, decode_big_int, registry

__all__ = ["CaptureEncoder", "CaptureDecoder", "TypeDecl", "Undecodable", "OpaqueMessage", "EXT_TYPE_REF", "EXT_BIG_INT",
           "EXT_OPAQUE", "EXT_DEFINE", "EXT_OBJECT_REF", "opaque", "MAX_INTERNED", "BIN_MARKS_SINCE", "NestedLayout"]

#: ext codes inside capture bodies; part of the capture file format.
#: The codec's own message ext: what the first format 1 builds wrote, before
#: the flat layout with a type table. Recognised only to say so.
EXT_NESTED_MESSAGE = 1
EXT_BIG_INT = 2  # the codec's: decimal digits of an int outside 64 bits
#: Format 2's type mark: an index into the file's type table (2 bytes,
#: big-endian). Format 3 writes the same 2 bytes as a bin; both are read.
EXT_TYPE_REF = 5
EXT_OPAQUE = 6  # a message that could not be captured: its Python type name (UTF-8)
#: Format 2's definition mark: type index (2 bytes) + object index (4 bytes),
#: big-endian. Format 3 writes the same 6 bytes as a bin; both are read.
EXT_DEFINE = 7
EXT_OBJECT_REF = 8  # an interned object written before in this file: its object index (4 bytes, big-endian)

_ExtType = msgpack.ExtType
_tuple_new = tuple.__new__
_object_new = object.__new__
_unpackb = msgpack.unpackb

#: Types one file can declare (the type reference holds two bytes).
MAX_TYPES = 65_536

#: The first capture format whose message arrays begin with a bin (the type
#: or definition mark). In an older file an array beginning with a bin is
#: just an array: a reader must not take it for a message.
BIN_MARKS_SINCE = 3

#: Where a field's values could be an array that begins with a bin, which a
#: format 3 reader would take for a message: containers of these types.
_SEQUENCES = (tuple, list, set, frozenset)

#: Definitions one file holds at most. A reader keeps every object a file
#: defines until the file ends (the encoder only the last version of each):
#: past this many a file writes further objects whole, so a reader's memory
#: stays bounded however large ``max_file_bytes`` is.
MAX_INTERNED = 200_000


@dataclasses.dataclass(frozen=True, slots=True)
class TypeDecl:
    """One entry of a file's type table."""

    index: int
    name: str
    version: int
    fields: tuple[str, ...]

    def to_wire(self) -> list[Any]:
        return [self.index, self.name, self.version, list(self.fields)]


class OpaqueMessage(str):
    """The type name of a message that could not be captured (not a registered message)."""

    __slots__ = ()


def opaque(type_name: str) -> msgpack.ExtType:
    """What a capture holds in place of a message it cannot encode: its type name."""
    return _tuple_new(_ExtType, (EXT_OPAQUE, type_name.encode("utf-8")))


def _same(cls: type, name: str) -> Callable[[Any, Any], bool]:
    """A function telling whether two ``cls`` objects named alike (field ``name``) are equal.

    Generated like the dataclass's own ``__eq__``, but field by field with
    an early exit and no tuples built: it runs on every interned object an
    encoder meets, and a changed lease differs in a field near the end.
    """
    fields = [f for f in cls.__struct_fields__ if f != name]  # type: ignore[attr-defined]
    test = " and ".join(f"a.{f} == b.{f}" for f in reversed(fields)) or "True"
    env: dict[str, Any] = {}
    exec(f"def same(a, b):\n    return {test}", env)  # noqa: S102 - field names of a dataclass
    return env["same"]


def _leading_bytes(cls: type) -> str | None:
    """The first field of ``cls`` whose value could be an array beginning with a bin; None if none could.

    A ``bytes`` field is fine (its message's mark comes first); a sequence
    that may hold ``bytes``, ``Any`` or an undeclared element type is not,
    and neither is a field whose annotation cannot be resolved here.
    """
    try:
        hints = typing.get_type_hints(cls, localns={c.__name__: c for c in registry().values()})
    except Exception:  # an annotation naming what is not importable here: cannot tell
        return "(annotations that cannot be resolved)"

    def risky(tp: Any, in_sequence: bool) -> bool:
        if tp is Any or tp is object or isinstance(tp, typing.TypeVar):
            return True
        if tp is bytes or tp is bytearray:
            return in_sequence
        origin = typing.get_origin(tp)
        if origin is None:
            return tp in _SEQUENCES  # a bare ``tuple``: its elements are undeclared
        inner = in_sequence or origin in _SEQUENCES
        return any(risky(a, inner) for a in typing.get_args(tp) if a is not Ellipsis)

    for f in cls.__struct_fields__:  # type: ignore[attr-defined]
        if f not in hints or risky(hints[f], False):
            return f
    return None


def _flat(fields: tuple[str, ...], mark: Any) -> Callable[[Any], tuple[Any, ...]]:
    """A function writing a message as ``(mark, field_1, ...)`` (no mark when ``mark`` is None).

    Generated per type, like the dataclass's own methods: one tuple built in
    one call, where an ``attrgetter`` and a splice build two. The packer
    calls it once per message object, which is most of a capture's cost.
    """
    env: dict[str, Any] = {"_mark": mark}
    values = "".join(f"v.{f}, " for f in fields)
    exec(f"def flat(v):\n    return ({'_mark, ' if mark is not None else ''}{values})", env)  # noqa: S102
    return env["flat"]


def _interning(
    last: dict[Any, tuple[Any, Any]],
    same: Callable[[Any, Any], bool],
    name: str,
    define: Callable[..., Any],
    mark: bytes,
    values: Callable[[Any], tuple[Any, ...]],
) -> Callable[[Any], Any]:
    """What an interned type is written as: a back-reference to the object last written
    under its name if it is that object or an equal one (``_same``), else ``define``'s
    answer (its definition)."""
    last_get = last.get
    getter = operator.attrgetter(name)

    def plan(value: Any) -> Any:
        key = getter(value)
        try:
            entry = last_get(key)
        except TypeError:  # an unhashable name where a str was declared
            return (mark, *values(value))
        if entry is not None:
            obj = entry[0]
            if obj is value or same(obj, value):
                return entry[1]
        return define(last, key, value, mark, values)

    return plan


class CaptureEncoder:
    """Messages (and structures holding them) to flat msgpack, declaring types as it meets them."""

    def __init__(self, interned: Mapping[str, str] | None = None) -> None:
        self.declared: list[TypeDecl] = []
        self._new: list[TypeDecl] = []
        #: Message name -> the field naming its objects, for the types whose
        #: objects are written once per file (per version), then referred to.
        self.interned = dict(interned or {})
        self._plans: dict[type, Callable[[Any], Any]] = {}
        #: Per interned type, name -> (object, its back-reference): the
        #: version of each object written last in this file (``_interning``).
        self._last: dict[type, dict[Any, tuple[Any, Any]]] = {}
        #: Object indices given out in this file.
        self._defined = 0
        #: What the encoding under way defined: (table, name, the entry it
        #: replaced), so that a failed (or trial) encoding can take it back.
        self._undo: list[tuple[dict[Any, tuple[Any, Any]], Any, tuple[Any, Any] | None]] = []
        self._default = self._dispatch()
        self._packer = msgpack.Packer(default=self._default, datetime=True, use_bin_type=True, autoreset=True)

    def _plan(self, cls: type) -> Callable[[Any], Any] | None:
        """What ``cls`` objects are written as: a function generated for the type (see ``_flat``)."""
        name = getattr(cls, "MESSAGE_NAME", None)
        if name is None:
            return None
        index = len(self.declared)
        if index >= MAX_TYPES:
            raise CodecError(f"more than {MAX_TYPES} message types in one capture file")
        risky = _leading_bytes(cls)
        if risky is not None:
            raise CodecError(
                f"message type {name!r} cannot be captured: its field {risky!r} could hold a list beginning "
                "with bytes, which a reader would take for a type mark"
            )
        fields = tuple(cls.__struct_fields__)  # type: ignore[attr-defined]
        decl = TypeDecl(index, name, cls.MESSAGE_VERSION, fields)  # type: ignore[attr-defined]
        self.declared.append(decl)
        self._new.append(decl)
        mark = index.to_bytes(2, "big")
        named_by = self.interned.get(name)
        if named_by is not None:
            if named_by not in fields:
                raise CodecError(f"message type {name!r} has no field {named_by!r} to intern it by")
            plan = _interning(
                self._last.setdefault(cls, {}), _same(cls, named_by), named_by, self._define, mark, _flat(fields, None),
            )
        else:
            plan = _flat(fields, mark)
        self._plans[cls] = plan
        return plan

    def _dispatch(self) -> Callable[[Any], Any]:
        """The packer's callback, once per message object: a closure over the plans, the common case first."""
        plans_get = self._plans.get
        other = self._other

        def default(value: Any) -> Any:
            plan = plans_get(type(value))
            if plan is not None:
                return plan(value)
            return other(value)

        return default

    def _other(self, value: Any) -> Any:
        """A value of a type met for the first time (the packer's callback found no plan), or one
        msgpack cannot pack itself."""
        plan = self._plan(type(value))
        if plan is None:
            if isinstance(value, int):  # msgpack hands over ints outside 64 bits
                return _tuple_new(_ExtType, (EXT_BIG_INT, str(value).encode("ascii")))
            if isinstance(value, frozenset):
                return list(value)
            raise CodecError(f"cannot encode a value of type {type(value).__name__}")
        return plan(value)

    def _define(
        self,
        last: dict[Any, tuple[Any, Any]],
        key: Any,
        value: Any,
        mark: bytes,
        values: Callable[[Any], tuple[Any, ...]],
    ) -> Any:
        """An interned object not written in this file yet (or changed since): its definition.

        It becomes the version later objects named ``key`` are compared with.
        """
        n = self._defined
        if n >= MAX_INTERNED:
            return (mark, *values(value))
        self._defined = n + 1
        index = n.to_bytes(4, "big")
        self._undo.append((last, key, last.get(key)))
        last[key] = (value, _tuple_new(_ExtType, (EXT_OBJECT_REF, index)))
        return (mark + index, *values(value))

    def encode(self, value: Any) -> bytes:
        """msgpack bytes for ``value``; raises ``CodecError`` for what cannot be encoded.

        Lists and tuples in ``value`` itself (outside messages) must not
        begin with ``bytes``: a reader takes such an array for a message.
        The capture's own records begin with an int or a str.

        Types met for the first time are in ``take_new()`` afterwards (even
        when encoding failed half way: they stay declared).
        """
        data = self._pack(value)
        self._undo.clear()  # written: what it defined stays defined
        return data

    def check(self, value: Any) -> None:
        """Raise ``CodecError`` if ``value`` cannot be encoded; nothing it interns stays interned.

        (Its bytes are thrown away, so a definition in them must not be
        referred to later.)
        """
        kept = len(self._undo)
        try:
            self._pack(value)
        finally:
            self._forget(kept)

    def _pack(self, value: Any) -> bytes:
        kept = len(self._undo)
        try:
            return self._packer.pack(value)
        except CodecError:
            self._reset(kept)
            raise
        except Exception as exc:  # naive datetimes, recursion, ...
            self._reset(kept)
            raise CodecError(f"cannot encode {type(value).__name__}: {exc}") from exc

    def new_file(self) -> None:
        """A new file begins: its interned objects are written afresh."""
        for last in self._last.values():
            last.clear()  # cleared, not replaced: the generated plans hold them
        self._defined = 0
        self._undo.clear()

    def _forget(self, kept: int) -> None:
        """Take back what was interned since ``kept`` entries of the undo log, latest first."""
        undo = self._undo
        while len(undo) > kept:
            last, key, previous = undo.pop()
            if previous is None:
                del last[key]
            else:
                last[key] = previous
            self._defined -= 1

    def _reset(self, kept: int) -> None:
        # A failed pack may leave partial output behind: start from a fresh
        # packer, and forget what it interned (those bytes are never written).
        self._forget(kept)
        self._packer = msgpack.Packer(default=self._default, datetime=True, use_bin_type=True, autoreset=True)

    def take_new(self) -> list[TypeDecl]:
        """Types declared since the last call: they must be written before what uses them."""
        new, self._new = self._new, []
        return new


class NestedLayout(CodecError):
    """A body in the nested layout the first format 1 builds wrote (before the flat one)."""


class Undecodable:
    """Stands in for a value that could not be decoded, and says why (``error``).

    Each one carries its own error, rather than the record holding it
    pointing into ``CaptureDecoder.problems`` by position: a record may hold
    several, so counting them off that list in order would name the next
    record's error for the wrong record.
    """

    __slots__ = ("error",)

    def __init__(self, error: CodecError) -> None:
        self.error = error

    def __repr__(self) -> str:
        return "<undecodable>"


class _TypeRef:
    """A declared type, ready to build its messages from a writer's field order.

    ``build(array)`` makes one message from its array (the type mark, then
    the values in the writer's field order; no slice made); for a slots
    dataclass (every message type) it is a function generated for the
    writer's field order, filling the slots directly as the dataclass's own
    ``__init__`` would, minus the frozen-dataclass ``__setattr__`` cost and
    any per-field loop: a replay builds hundreds of thousands of them.
    """

    __slots__ = ("decl", "error", "cls", "build")

    def __init__(self, decl: TypeDecl) -> None:
        self.decl = decl
        self.error: CodecError | None = None
        self.cls: type | None = None
        self.build: Callable[[tuple[Any, ...]], Any] = self._refuse
        cls = registry().get(decl.name)
        if cls is None:
            self.error = UnknownMessageType(decl.name)
            return
        version = cls.MESSAGE_VERSION  # type: ignore[attr-defined]
        if decl.version > version:
            self.error = NewerSchemaVersion(decl.name, decl.version, version)
            return
        own = tuple(cls.__struct_fields__)  # type: ignore[attr-defined]
        unknown = [f for f in decl.fields if f not in own]
        if unknown:
            self.error = CodecError(f"message type {decl.name!r} has no field(s) {', '.join(unknown)}")
            return
        if len(set(decl.fields)) != len(decl.fields):
            self.error = CodecError(f"message type {decl.name!r} declares a field twice")
            return
        self.cls = cls
        try:
            self.build = _cached_builder(cls, decl)
        except _MissingField as exc:
            self.error = CodecError(f"message type {decl.name!r}: the capture lacks field {exc.args[0]!r}")

    def _refuse(self, values: tuple[Any, ...]) -> Any:
        raise self.error or CodecError(f"message type {self.decl.name!r} cannot be built")

    def _by_keywords(self, values: tuple[Any, ...]) -> Any:
        values = values[1:]
        if len(values) != len(self.decl.fields):
            raise _count_error(self.decl, values)
        try:
            return self.cls(**dict(zip(self.decl.fields, values)))  # type: ignore[misc]
        except (TypeError, ValueError) as exc:
            raise CodecError(f"message type {self.decl.name!r}: {exc}") from exc


class _MissingField(Exception):
    pass


def _count_error(decl: TypeDecl, values: tuple[Any, ...], marked: bool = False) -> CodecError:
    n = len(values) - (1 if marked else 0)
    return CodecError(f"message type {decl.name!r}: {n} value(s) for {len(decl.fields)} field(s)")


#: Builders already generated, by (type, name, version, field order): every capture file
#: declares its types again, and generating one (an ``exec``) costs a quarter of a
#: millisecond, while the field orders a sidecar writes are few. Bounded, so that damaged
#: files declaring odd field subsets cannot grow it without end.
_BUILDERS: dict[tuple[Any, ...], Callable[[tuple[Any, ...]], Any]] = {}
_BUILDERS_MAX = 4096


def _cached_builder(cls: type, decl: TypeDecl) -> Callable[[tuple[Any, ...]], Any]:
    key = (cls, decl.name, decl.version, decl.fields)
    build = _BUILDERS.get(key)
    if build is None:
        build = _slots_builder(cls, decl)
        if len(_BUILDERS) < _BUILDERS_MAX:
            _BUILDERS[key] = build
    return build


def _slots_builder(cls: type, decl: TypeDecl) -> Callable[[tuple[Any, ...]], Any]:
    """A function building ``cls`` from values in ``decl``'s field order (see ``_TypeRef``).

    It calls the class with each value by keyword: a field the writer did not
    have takes its default, and msgspec runs ``__post_init__``.
    """
    env: dict[str, Any] = {"_cls": cls, "_decl": decl, "_count_error": _count_error, "CodecError": CodecError}
    n = len(decl.fields)
    names = ["_"] + [f"v{i}" for i in range(n)]  # the type mark, then the values
    for f in msgspec.structs.fields(cls):
        if f.name not in decl.fields and f.required:
            raise _MissingField(f.name)
    args = ", ".join(f"{f}=v{i}" for i, f in enumerate(decl.fields))
    lines = [
        "def build(values):",
        "    try:",
        f"        {', '.join(names)}, = values",
        "    except ValueError:",
        "        raise _count_error(_decl, values, True) from None",
        "    try:",
        f"        return _cls({args})",
        "    except (TypeError, ValueError) as exc:",
        "        raise CodecError(f'message type {_decl.name!r}: {exc}') from exc",
    ]
    exec("\n".join(lines), env)  # noqa: S102 - generated from a message type's own field names
    return env["build"]


class _Define:
    """The first element of an interned object's array: which type, which object index."""

    __slots__ = ("ref", "key")

    def __init__(self, ref: _TypeRef, key: bytes) -> None:
        self.ref = ref
        self.key = key


def type_entry(entry: Any) -> tuple[int, str, int, tuple[str, ...]]:
    """A ``TYPES`` record's entry ``[index, name, version, [field, ...]]``, checked; raises ``CodecError``."""
    try:
        index, name, version, fields = entry
    except (TypeError, ValueError):
        raise CodecError("type table entry is not [index, name, version, fields]") from None
    if (
        type(index) is not int
        or not 0 <= index < MAX_TYPES
        or type(name) is not str
        or type(version) is not int
        or not isinstance(fields, (tuple, list))
        or not all(type(f) is str for f in fields)
    ):
        raise CodecError(f"malformed type table entry {entry!r:.80}")
    return index, name, version, tuple(fields)


class CaptureDecoder:
    """Flat capture bodies back to messages, with the type table of the file being read.

    ``format`` is the capture format of the file (``reset`` takes the next
    file's): from ``BIN_MARKS_SINCE`` on, an array beginning with a bin is
    a message; before, only one beginning with a type-mark ext is.
    """

    def __init__(self, format: int = BIN_MARKS_SINCE) -> None:
        self._types: dict[bytes, _TypeRef] = {}
        #: Interned objects of this file by object index (4 bytes); one that
        #: could not be built is its ``Undecodable``.
        self._objects: dict[bytes, Any] = {}
        #: Errors met while decoding the last body, in order; the values they
        #: concern were replaced by ``Undecodable``s carrying them.
        self.problems: list[CodecError] = []
        self._ext_hook, self._ext_marks, self._bin_marks = self._hooks()
        self._list_hook = self._bin_marks if format >= BIN_MARKS_SINCE else self._ext_marks

    def reset(self, format: int = BIN_MARKS_SINCE) -> None:
        """A new file (of capture format ``format``): its types and interned objects are declared afresh."""
        self._types.clear()  # cleared, not replaced: the hooks hold their look-ups
        self._objects.clear()
        self._list_hook = self._bin_marks if format >= BIN_MARKS_SINCE else self._ext_marks

    def _hooks(
        self,
    ) -> tuple[Callable[[int, bytes], Any], Callable[[tuple[Any, ...]], Any], Callable[[tuple[Any, ...]], Any]]:
        """The unpacker's ext hook and its two array hooks (ext marks only; bin marks too).

        They are called for every message and every array, so they are
        closures over their look-ups (no attribute look-up in the common case).
        """
        types_get = self._types.get
        objects_get = self._objects.get
        other_ext = self._ext
        define = self._define
        type_ref, define_mark, undecodable = _TypeRef, _Define, Undecodable
        failed = self._failed

        def ext(code: int, data: bytes) -> Any:
            if code == EXT_TYPE_REF:
                ref = types_get(data)
                if ref is not None:
                    return ref
            elif code == EXT_OBJECT_REF:
                obj = objects_get(data)
                if obj is not None and type(obj) is not undecodable:
                    return obj
            return other_ext(code, data)

        def bin_marks(values: tuple[Any, ...]) -> Any:
            if values:
                head = values[0]
                t = type(head)
                if t is bytes:
                    ref = types_get(head)
                    if ref is None:
                        return define(bin_define(head), values)
                elif t is type_ref:
                    ref = head
                elif t is define_mark:
                    return define(head, values)
                else:
                    return values
                # The build, inline: this runs once per message read.
                if ref.error is None:
                    try:
                        return ref.build(values)
                    except CodecError as exc:
                        return failed(exc, values)
                return failed(ref.error, values)
            return values

        def ext_marks(values: tuple[Any, ...]) -> Any:
            # Formats 1 and 2: a bin at the head is a value; only an ext mark makes a message.
            if values and type(values[0]) is not bytes:
                return bin_marks(values)
            return values

        bin_define = self._bin_define
        return ext, ext_marks, bin_marks

    def _bin_define(self, mark: bytes) -> _Define:
        """A bin mark that is no declared type: an object's definition, or damaged data.

        The same bytes as format 2's ext marks, so read by the same code (``_ext``).
        """
        if len(mark) == 6:
            return self._ext(EXT_DEFINE, mark)  # type: ignore[no-any-return]
        if len(mark) == 2:
            self._ext(EXT_TYPE_REF, mark)  # not declared (else it was not handed here): raises
        raise CodecError(f"malformed type mark {mark[:40]!r}")

    def declare(self, entries: Any) -> None:
        """Read a ``TYPES`` record's entries ``[index, name, version, [field, ...]]``."""
        if not isinstance(entries, tuple):
            raise CodecError("type table is not a list")
        for entry in entries:
            index, name, version, fields = type_entry(entry)
            key = index.to_bytes(2, "big")
            if key in self._types:
                raise CodecError(f"type index {index} declared twice in one file")
            self._types[key] = _TypeRef(TypeDecl(index, name, version, fields))

    def _ext(self, code: int, data: bytes) -> Any:
        if code == EXT_TYPE_REF:
            ref = self._types.get(data)
            if ref is None:
                raise CodecError(f"type reference {data.hex()} used before the file declared it")
            return ref
        if code == EXT_OBJECT_REF:
            obj = self._objects.get(data)
            if obj is None:
                error = CodecError(f"reference to object {int.from_bytes(data, 'big')}, which this file does not define before")
                self.problems.append(error)
                return Undecodable(error)
            if type(obj) is Undecodable:
                self.problems.append(obj.error)
            return obj
        if code == EXT_DEFINE:
            if len(data) != 6:
                raise CodecError(f"malformed object definition {data[:40]!r}")
            ref = self._types.get(data[:2])
            if ref is None:
                raise CodecError(f"type reference {data[:2].hex()} used before the file declared it")
            return _Define(ref, data[2:])
        if code == EXT_BIG_INT:
            return decode_big_int(data)
        if code == EXT_OPAQUE:
            try:
                return OpaqueMessage(data.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise CodecError("malformed opaque type name") from exc
        if code == EXT_NESTED_MESSAGE:
            raise NestedLayout("a message in the codec's nested form")
        raise CodecError(f"unknown ext type {code}")

    def _failed(self, error: CodecError, values: tuple[Any, ...]) -> Undecodable:
        """A message that could not be built from ``values``: what stands in for it.

        When one of its values was undecodable already (and made the build
        fail), that one says why, not the failure it caused.
        """
        self.problems.append(error)
        return first_undecodable(values) or Undecodable(error)

    def _define(self, define: _Define, values: tuple[Any, ...]) -> Any:
        ref, key = define.ref, define.key
        if key in self._objects:
            error = CodecError(f"object {int.from_bytes(key, 'big')} defined twice in one file")
            self.problems.append(error)
            return Undecodable(error)
        obj: Any
        if ref.error is not None:
            obj = self._failed(ref.error, values)
        else:
            try:
                obj = ref.build(values)
            except CodecError as exc:
                obj = self._failed(exc, values)
        if len(self._objects) < MAX_INTERNED:
            # An object built around a value that could not be decoded (a
            # lease whose item has a newer schema) is kept as that value: a
            # later reference to it is as bad as the definition.
            kept = first_undecodable(values) if self.problems and type(obj) is not Undecodable else None
            self._objects[key] = kept or obj
        return obj

    def decode(self, data: bytes) -> Any:
        """The value in ``data``; an undecodable message inside becomes an ``Undecodable`` (see ``problems``).

        Raises ``CodecError`` only when the bytes are not msgpack at all.
        """
        self.problems = []
        try:
            return _unpackb(
                data,
                ext_hook=self._ext_hook,
                list_hook=self._list_hook,
                timestamp=3,
                use_list=False,
                raw=False,
                strict_map_key=False,
            )
        except CodecError:
            raise
        except Exception as exc:  # malformed msgpack, recursion, bad UTF-8, ...
            raise CodecError(f"malformed msgpack: {exc}") from exc


def first_undecodable(value: Any, depth: int = 0) -> Undecodable | None:
    """The first ``Undecodable`` in ``value`` (depth first, in field order); None if it holds none.

    Only asked when a body had problems.
    """
    if type(value) is Undecodable:
        return value
    if depth > 64:
        return None
    if isinstance(value, tuple):
        items: Any = value
    elif isinstance(value, dict):
        items = (x for kv in value.items() for x in kv)
    else:
        fields = getattr(type(value), "__struct_fields__", None)
        if fields is None:
            return None
        items = (getattr(value, f) for f in fields)
    for v in items:
        found = first_undecodable(v, depth + 1)
        if found is not None:
            return found
    return None


__all__.append("first_undecodable")
