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

    [<type ref>, value_1, value_2, ...]      values in the type's field order

where ``<type ref>`` is a small ext (code ``EXT_TYPE_REF``) holding an index
into the file's type table. The table is declared in the file itself (a
``TYPES`` record before the first use: index, message name, schema version,
field names), so every file reads on its own, and a reader maps each
writer's fields onto its own class by *name*: a field added since (with a
default) is filled in, a field it does not know is an error, an unknown
type or a newer schema version is the codec's ``UnknownMessageType`` /
``NewerSchemaVersion``. Big ints (a Cosmos ``Int`` is 256-bit) are the
codec's big-int ext, datetimes msgpack's timestamp, tuples arrays. This is
about 2.5 times faster to write than the codec's form and half the size.

Neither class is thread-safe: one per thread.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable

import msgpack

from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType, registry

__all__ = ["CaptureEncoder", "CaptureDecoder", "TypeDecl", "BAD", "OpaqueMessage", "EXT_TYPE_REF", "EXT_BIG_INT",
           "EXT_OPAQUE", "opaque"]

#: ext codes inside capture bodies; part of the capture file format.
EXT_BIG_INT = 2  # the codec's: decimal digits of an int outside 64 bits
EXT_TYPE_REF = 5  # index into the file's type table (2 bytes, big-endian)
EXT_OPAQUE = 6  # a message that could not be captured: its Python type name (UTF-8)

_ExtType = msgpack.ExtType
_tuple_new = tuple.__new__
_object_new = object.__new__
_unpackb = msgpack.unpackb

#: Types one file can declare (the type reference holds two bytes).
MAX_TYPES = 65_536


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


class CaptureEncoder:
    """Messages (and structures holding them) to flat msgpack, declaring types as it meets them."""

    def __init__(self) -> None:
        self.declared: list[TypeDecl] = []
        self._new: list[TypeDecl] = []
        self._plans: dict[type, tuple[Any, Callable[[Any], tuple[Any, ...]]]] = {}
        self._packer = msgpack.Packer(default=self._default, datetime=True, use_bin_type=True, autoreset=True)

    def _plan(self, cls: type) -> tuple[Any, Callable[[Any], tuple[Any, ...]]] | None:
        name = getattr(cls, "MESSAGE_NAME", None)
        if name is None:
            return None
        index = len(self.declared)
        if index >= MAX_TYPES:
            raise CodecError(f"more than {MAX_TYPES} message types in one capture file")
        fields = tuple(cls._message_fields)  # type: ignore[attr-defined]
        if not fields:
            getter: Callable[[Any], tuple[Any, ...]] = lambda value: ()  # noqa: E731
        elif len(fields) == 1:
            only = fields[0]
            getter = lambda value: (getattr(value, only),)  # noqa: E731
        else:
            getter = operator.attrgetter(*fields)  # every field in one C call
        decl = TypeDecl(index, name, cls.MESSAGE_VERSION, fields)  # type: ignore[attr-defined]
        self.declared.append(decl)
        self._new.append(decl)
        # ExtType's own constructor re-checks its arguments in Python; these are known good.
        plan = self._plans[cls] = (_tuple_new(_ExtType, (EXT_TYPE_REF, index.to_bytes(2, "big"))), getter)
        return plan

    def _default(self, value: Any) -> Any:
        plan = self._plans.get(type(value))
        if plan is None:
            plan = self._plan(type(value))
            if plan is None:
                if isinstance(value, int):  # msgpack hands over ints outside 64 bits
                    return _tuple_new(_ExtType, (EXT_BIG_INT, str(value).encode("ascii")))
                if isinstance(value, frozenset):
                    return list(value)
                raise CodecError(f"cannot encode a value of type {type(value).__name__}")
        mark, getter = plan
        return (mark, *getter(value))

    def encode(self, value: Any) -> bytes:
        """msgpack bytes for ``value``; raises ``CodecError`` for what cannot be encoded.

        Types met for the first time are in ``take_new()`` afterwards (even
        when encoding failed half way: they stay declared).
        """
        try:
            return self._packer.pack(value)
        except CodecError:
            self._reset()
            raise
        except Exception as exc:  # naive datetimes, recursion, ...
            self._reset()
            raise CodecError(f"cannot encode {type(value).__name__}: {exc}") from exc

    def _reset(self) -> None:
        # A failed pack may leave partial output behind: start from a fresh packer.
        self._packer = msgpack.Packer(default=self._default, datetime=True, use_bin_type=True, autoreset=True)

    def take_new(self) -> list[TypeDecl]:
        """Types declared since the last call: they must be written before what uses them."""
        new, self._new = self._new, []
        return new


class _Bad:
    """Stands in for a value that could not be decoded; the error is in ``CaptureDecoder.problems``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<undecodable>"


#: Placed where an undecodable message was, so one bad message does not
#: cost the other records of its frame.
BAD = _Bad()


class _TypeRef:
    """A declared type, ready to build its messages from a writer's field order."""

    __slots__ = ("decl", "error", "cls", "setters", "fill", "post_init", "positional")

    def __init__(self, decl: TypeDecl) -> None:
        self.decl = decl
        self.error: CodecError | None = None
        self.cls: type | None = None
        self.setters: tuple[Any, ...] = ()
        self.fill: tuple[tuple[Any, bool, Any], ...] = ()
        self.post_init: Any = None
        self.positional = False
        cls = registry().get(decl.name)
        if cls is None:
            self.error = UnknownMessageType(decl.name)
            return
        version = cls.MESSAGE_VERSION  # type: ignore[attr-defined]
        if decl.version > version:
            self.error = NewerSchemaVersion(decl.name, decl.version, version)
            return
        own = tuple(cls._message_fields)  # type: ignore[attr-defined]
        unknown = [f for f in decl.fields if f not in own]
        if unknown:
            self.error = CodecError(f"message type {decl.name!r} has no field(s) {', '.join(unknown)}")
            return
        if len(set(decl.fields)) != len(decl.fields):
            self.error = CodecError(f"message type {decl.name!r} declares a field twice")
            return
        self.cls = cls
        params = getattr(cls, "__dataclass_params__", None)
        slots = cls.__dict__.get("__slots__")
        # A slots dataclass is filled through its slot descriptors, as its
        # generated __init__ would, minus the frozen-dataclass setattr cost.
        self.positional = bool(params is not None and params.init and slots is not None and set(slots) >= set(own))
        if not self.positional:
            return
        self.setters = tuple(cls.__dict__[f].__set__ for f in decl.fields)
        fill = []
        for f in dataclasses.fields(cls):
            if f.name in decl.fields:
                continue
            if f.default is not dataclasses.MISSING:
                fill.append((cls.__dict__[f.name].__set__, False, f.default))
            elif f.default_factory is not dataclasses.MISSING:
                fill.append((cls.__dict__[f.name].__set__, True, f.default_factory))
            else:
                self.error = CodecError(f"message type {decl.name!r}: the capture lacks field {f.name!r}")
                return
        self.fill = tuple(fill)
        self.post_init = getattr(cls, "__post_init__", None)

    def build(self, values: tuple[Any, ...]) -> Any:
        if len(values) != len(self.decl.fields):
            raise CodecError(
                f"message type {self.decl.name!r}: {len(values)} value(s) for {len(self.decl.fields)} field(s)"
            )
        if not self.positional:
            try:
                return self.cls(**dict(zip(self.decl.fields, values)))  # type: ignore[misc]
            except (TypeError, ValueError) as exc:
                raise CodecError(f"message type {self.decl.name!r}: {exc}") from exc
        obj = _object_new(self.cls)  # type: ignore[arg-type]
        for setter, value in zip(self.setters, values):
            setter(obj, value)
        for setter, factory, default in self.fill:
            setter(obj, default() if factory else default)
        if self.post_init is not None:
            try:
                self.post_init(obj)
            except (TypeError, ValueError) as exc:
                raise CodecError(f"message type {self.decl.name!r}: {exc}") from exc
        return obj


class CaptureDecoder:
    """Flat capture bodies back to messages, with the type table of the file being read."""

    def __init__(self) -> None:
        self._types: dict[bytes, _TypeRef] = {}
        #: Errors met while decoding the last body, in order; the values they
        #: concern were replaced by ``BAD``.
        self.problems: list[CodecError] = []

    def reset(self) -> None:
        """A new file: its types are declared afresh."""
        self._types = {}

    def declare(self, entries: Any) -> None:
        """Read a ``TYPES`` record's entries ``[index, name, version, [field, ...]]``."""
        if not isinstance(entries, tuple):
            raise CodecError("type table is not a list")
        for entry in entries:
            try:
                index, name, version, fields = entry
            except (TypeError, ValueError):
                raise CodecError("type table entry is not [index, name, version, fields]") from None
            if (
                type(index) is not int
                or not 0 <= index < MAX_TYPES
                or type(name) is not str
                or type(version) is not int
                or not isinstance(fields, tuple)
                or not all(type(f) is str for f in fields)
            ):
                raise CodecError(f"malformed type table entry {entry!r:.80}")
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
        if code == EXT_BIG_INT:
            try:
                return int(data.decode("ascii"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise CodecError(f"malformed big integer {data[:40]!r}") from exc
        if code == EXT_OPAQUE:
            try:
                return OpaqueMessage(data.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise CodecError("malformed opaque type name") from exc
        raise CodecError(f"unknown ext type {code}")

    def _array(self, values: Any) -> Any:
        if values and type(values[0]) is _TypeRef:
            ref = values[0]
            if ref.error is not None:
                self.problems.append(ref.error)
                return BAD
            try:
                return ref.build(values[1:])
            except CodecError as exc:
                self.problems.append(exc)
                return BAD
        return values

    def decode(self, data: bytes) -> Any:
        """The value in ``data``; an undecodable message inside becomes ``BAD`` (see ``problems``).

        Raises ``CodecError`` only when the bytes are not msgpack at all.
        """
        self.problems = []
        try:
            return _unpackb(
                data,
                ext_hook=self._ext,
                list_hook=self._array,
                timestamp=3,
                use_list=False,
                raw=False,
                strict_map_key=False,
            )
        except CodecError:
            raise
        except Exception as exc:  # malformed msgpack, recursion, bad UTF-8, ...
            raise CodecError(f"malformed msgpack: {exc}") from exc


def contains_bad(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` holds ``BAD`` anywhere (only asked when a body had problems)."""
    if value is BAD:
        return True
    if depth > 64:
        return False
    if isinstance(value, tuple):
        return any(contains_bad(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(contains_bad(k, depth + 1) or contains_bad(v, depth + 1) for k, v in value.items())
    fields = getattr(type(value), "_message_fields", None)
    if fields is not None:
        return any(contains_bad(getattr(value, f), depth + 1) for f in fields)
    return False


__all__.append("contains_bad")
