"""Capture formats 4 and 5: deliveries as msgspec writes them, read back typed in one C call per frame.

A deliveries frame's body is ``[0, [[seq, at, sender, recipient, cause,
message], ...]]``, each message the array ``messages.codec`` writes (its tag,
then its fields in order). The reader decodes the whole body with one
``msgspec.msgpack.Decoder`` whose type is the tagged union of every message
type: every ``DeliveryRecord`` and every message in it is built by msgspec's
C code, checked on the way (a sequence number out of range, a field of the
wrong type, an unknown tag), with no Python call per message, except
``__post_init__`` where a type has one (``Coin``, ``LeaseEvent``).

Formats 1 to 3 (``capture.wire``) declared a type table and mapped fields by
name, because their decoder built every message itself. Format 4 declares
the table too (``TYPES`` records: index, name, version, fields; a type, with
the types nested in it, before the first record using it in the file), and
a reader checks it against its own types as it reads it: where each type the file declares has the
reader's fields in the reader's order (or the first of them: a field added
since, at the end with a default, is filled in by msgspec), the typed
decoder reads it. Otherwise (a field renamed, removed or moved, a newer
schema version) the file is read by name (``_ByName``): slower, and just as
exact.

Format 4 wrote every lease whole, every time. Format 5 writes each once per
version per file and names it by number (``capture.interning``): a frame's
body is ``[0, [...], definitions]``, and the messages that hold
leases are decoded as their *twins* (the same tag and fields, an int in
place of each lease: ``_twin``), then built for real with the frame's
leases, a Python call for each such message only.

A delivery whose message is no registered type is written with an
``OpaqueRecord`` in its place (its Python type name), so replay knows an
input is missing rather than silently skipping it.
"""

from __future__ import annotations

import datetime as _dt
import threading
import typing
from typing import Annotated, Any, Iterable

import msgspec

from capture.format import INTERNED_SINCE, DeliveryRecord, OpaqueDelivery
from capture.interning import (
    MANY,
    ONE,
    OPTIONAL,
    LeaseTable,
    SettledVersion,
    composite_fields,
    converter,
    definitions_type,
    lease_fields,
)
from capture.wire import type_entry
from messages.chain import Lease
from messages.coins import Coin
from messages.codec import (
    CodecError,
    NewerSchemaVersion,
    UnknownMessageType,
    decode_big_int,
    message_union,
    registry,
    to_wire,
)

__all__ = ["OpaqueRecord", "TypedEncoder", "TypedDecoder", "type_table", "contained_types", "MAX_SEQ"]

#: Sequence numbers a delivery can have: from 1, below 2**53 (a float's exact
#: integers, which JSON output keeps). A run delivering a million messages a
#: second would take 285 years to reach it; a larger one is damaged data.
MAX_SEQ = 2**53

_EXT_BIG_INT = 2


class OpaqueRecord(msgspec.Struct, frozen=True, array_like=True, gc=False, tag="~opaque"):
    """What a capture holds in place of a message that is no registered type: its type name."""

    type_name: str


def type_table(types: Iterable[type] | None = None) -> list[list[Any]]:
    """The ``TYPES`` record's entries for ``types`` (default: every registered type), sorted by name."""
    classes = sorted(types or registry().values(), key=lambda c: c.MESSAGE_NAME)  # type: ignore[attr-defined]
    return [[i, c.MESSAGE_NAME, c.MESSAGE_VERSION, list(c.__struct_fields__)] for i, c in enumerate(classes)]  # type: ignore[attr-defined]


_CONTAINED: dict[type, tuple[type, ...]] = {}


def contained_types(cls: type) -> tuple[type, ...]:
    """``cls`` and every message type its fields may hold, at any depth (what a file must declare
    before a record of ``cls``)."""
    found = _CONTAINED.get(cls)
    if found is not None:
        return found
    out: dict[type, None] = {}
    localns = {c.__name__: c for c in registry().values()}

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            if tp in out:
                return
            out[tp] = None
            for hint in typing.get_type_hints(tp, localns=localns).values():
                visit(hint)
            return
        for arg in typing.get_args(tp):
            visit(arg)

    visit(cls)
    found = _CONTAINED[cls] = tuple(t for t in out if getattr(t, "MESSAGE_NAME", None))
    return found


def _enc_hook(value: Any) -> Any:
    if isinstance(value, frozenset):
        return list(value)
    raise CodecError(f"cannot encode a value of type {type(value).__name__}")


class TypedEncoder:
    """Capture bodies to bytes (big ints as the big-int ext, through the codec's slow path)."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
        #: The message types this encoder writes as they are; anything else is opaque.
        self.known: frozenset[type] = frozenset(registry().values())

    def encode(self, value: Any) -> bytes:
        try:
            return self._encoder.encode(value)
        except OverflowError:
            pass
        except CodecError:
            raise
        except (TypeError, ValueError) as exc:
            raise CodecError(f"cannot encode {type(value).__name__}: {exc}") from exc
        # An int beyond 64 bits: written as the big-int ext, which only a Coin's
        # amount reads back. Checked here (a rare path) so that no record is
        # written that a reader would refuse: elsewhere it is unencodable.
        data = self._encoder.encode(to_wire(value))
        try:
            if type(value) is tuple and len(value) == 2 and value[0] == 0:
                _typed().frame.decode(data)
            elif type(value) is tuple and len(value) == 3 and value[0] == 0:
                _typed().format5(Lease.__struct_fields__).frame.decode(data)  # format 5: rows, lease definitions
            elif isinstance(value, tuple) and len(value) == 6:
                _typed().one.decode(data)
        except (msgspec.ValidationError, CodecError) as exc:
            raise CodecError(f"an int beyond 64 bits where only a coin's amount may hold one: {exc}") from None
        return data

    def refresh(self) -> None:
        """Types registered since (a test's) are written as messages too."""
        self.known = frozenset(registry().values())


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _EXT_BIG_INT:
        return msgspec.msgpack.Ext(code, bytes(data))
    raise CodecError(f"unknown ext type {code}")


def _record_type(union: Any) -> type:
    """``DeliveryRecord``, its fields typed for msgspec: the message is one of ``union``.

    msgspec reads a named tuple's field types from its annotations when a
    decoder is made (and keeps what it read on the class, which is dropped
    here so that a decoder for another set of types reads them anew): the
    records it builds are then ``DeliveryRecord`` objects themselves.
    """
    seq = Annotated[int, msgspec.Meta(gt=0, lt=MAX_SEQ)]
    cause = Annotated[int, msgspec.Meta(ge=0, lt=MAX_SEQ)]
    DeliveryRecord.__annotations__ = {
        "seq": seq, "at": _dt.datetime, "sender": str, "recipient": str, "cause": cause, "message": union,
    }
    try:
        del DeliveryRecord.__msgspec_cache__  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return DeliveryRecord


def _twin(cls: type, spec: tuple[tuple[int, int], ...]) -> type:
    """``cls`` as format 5 writes it: the same tag and fields, an int (a lease's index) in place of each lease."""
    hints = typing.get_type_hints(cls, localns={c.__name__: c for c in registry().values()})
    names = cls.__struct_fields__  # type: ignore[attr-defined]
    defaults = cls.__struct_defaults__  # type: ignore[attr-defined]
    first_default = len(names) - len(defaults)
    shapes = dict(spec)
    fields: list[Any] = []
    for pos, name in enumerate(names):
        tp = {ONE: int, OPTIONAL: typing.Optional[int], MANY: tuple[int, ...]}.get(shapes.get(pos), hints[name])  # type: ignore[arg-type]
        if pos < first_default:
            fields.append((name, tp))
            continue
        default = defaults[pos - first_default]
        if type(default).__name__ == "Factory":  # a default_factory
            default = msgspec.field(default_factory=default.factory)
        fields.append((name, tp, default))
    return msgspec.defstruct(
        f"{cls.__name__}Wire", fields, tag=cls.MESSAGE_NAME, array_like=True, frozen=True, gc=False,  # type: ignore[attr-defined]
        module=__name__,
    )


class _Typed:
    """The typed decoders of one set of message types (this build's, cached)."""

    def __init__(self, types: list[type]) -> None:
        union = message_union([*types, OpaqueRecord])
        self.record = _record_type(union)
        self.frame = msgspec.msgpack.Decoder(tuple[int, list[self.record]], ext_hook=_ext_hook)  # type: ignore[name-defined]
        self.rows = msgspec.msgpack.Decoder(tuple[int, list[msgspec.Raw]])
        self.one = msgspec.msgpack.Decoder(self.record, ext_hook=_ext_hook)
        self.own = {c.MESSAGE_NAME: c for c in types}  # type: ignore[attr-defined]
        # Format 5 (capture.interning): the types that hold leases are read as
        # their twins, an index in place of each lease, then built for real.
        #: twin type -> (the real type, its lease fields)
        self.twins: dict[type, tuple[type, tuple[tuple[int, int], ...]]] = {}
        wire_types = []
        for c in types:
            spec = lease_fields(c)
            if spec:
                twin = _twin(c, spec)
                self.twins[twin] = (c, spec)
                wire_types.append(twin)
            else:
                wire_types.append(c)
        self.union5 = message_union([*wire_types, OpaqueRecord])
        # (after the format 4 decoders: _record_type re-types DeliveryRecord for the next decoder made)
        self.one5 = msgspec.msgpack.Decoder(_record_type(self.union5), ext_hook=_ext_hook)
        # Read lazily (``TypedDecoder.rows``): each record's message left as its bytes, decoded when asked for.
        self.lazy4 = msgspec.msgpack.Decoder(tuple[int, list[_record_type(msgspec.Raw)]])  # type: ignore[misc]
        self.message4 = msgspec.msgpack.Decoder(union, ext_hook=_ext_hook)
        self.message5 = msgspec.msgpack.Decoder(self.union5, ext_hook=_ext_hook)
        self._format5: dict[tuple[str, ...], _Format5] = {}
        self.format5(Lease.__struct_fields__)

    def format5(self, names: tuple[str, ...]) -> "_Format5":
        """The decoders of format 5 frames whose leases are written with the ``Lease`` fields ``names``."""
        f = self._format5.get(names)
        if f is None:
            with _RETYPING:
                f = self._format5[names] = _Format5(self.union5, definitions_type(names))
        return f


class _Format5:
    """A format 5 body's decoders, for one set of ``Lease`` fields: whole, bad records apart, lazily."""

    def __init__(self, union: Any, definitions: Any) -> None:
        self.frame = msgspec.msgpack.Decoder(tuple[int, list[_record_type(union)], definitions], ext_hook=_ext_hook)  # type: ignore[misc]
        self.rows = msgspec.msgpack.Decoder(tuple[int, list[msgspec.Raw], definitions], ext_hook=_ext_hook)
        self.lazy = msgspec.msgpack.Decoder(tuple[int, list[_record_type(msgspec.Raw)], definitions], ext_hook=_ext_hook)  # type: ignore[misc]


#: Held while DeliveryRecord is re-typed for a decoder being made (``_record_type``).
_RETYPING = threading.RLock()


_TYPED: dict[frozenset[type], _Typed] = {}


def _typed() -> _Typed:
    types = registry()
    key = frozenset(types.values())
    t = _TYPED.get(key)
    if t is None:
        with _RETYPING:
            t = _TYPED.get(key)
            if t is None:
                t = _TYPED[key] = _Typed(list(types.values()))
    return t


class TypedDecoder:
    """Format 4 and 5 deliveries bodies back to records, for the file being read (``declare`` its table first)."""

    def __init__(self, format: int = INTERNED_SINCE) -> None:
        self._t = _typed()
        #: The file's type table, where it differs from this build's types: read by name.
        self._by_name: _ByName | None = None
        #: The last body's records are all good (no ``CodecError`` among them).
        self.clean = True
        #: The file's declared types: name -> (version, fields).
        self._table: dict[str, tuple[int, tuple[str, ...]]] = {}
        #: The file declares a type this build does not know: its records are all decoded as
        #: they are read (so that one of that type is refused where it is), never lazily.
        self._unknown = False
        #: Format 5: the leases the file has defined so far (``capture.interning``).
        self.leases = LeaseTable()
        self.format = format
        self._converters: dict[type, Any] = {}
        self.reset(format)

    def reset(self, format: int | None = None) -> None:
        """A new file (of ``format``, default: the same as the last): its types and leases are declared afresh."""
        self._t = _typed()
        self._by_name = None
        self._table = {}
        self._unknown = False
        self.leases.reset()
        #: format 5: the decoders for the Lease fields the file's columns hold (its table says which)
        self._f5 = self._t.format5(Lease.__struct_fields__)
        if format is not None:
            self.format = format
        self._converters = {twin: converter(cls, spec, self.leases) for twin, (cls, spec) in self._t.twins.items()}

    def declare(self, entries: Any) -> None:
        """Take a ``TYPES`` record's entries, checked against this build's types (see the module doc)."""
        if not isinstance(entries, (list, tuple)):
            raise CodecError("type table is not a list")
        own = self._t.own
        table = self._table
        new: list[str] = []
        for entry in entries:
            _, name, version, fields = type_entry(entry)
            if name in table:
                raise CodecError(f"type {name!r} declared twice in one file")
            table[name] = (version, fields)
            new.append(name)
        if self._by_name is not None:
            return  # read by name already: it sees the table grow
        for name in new:
            version, fields = table[name]
            cls = own.get(name)
            if cls is None:
                self._unknown = True
                continue  # unknown here: only a record that uses it is refused (its tag is unknown)
            mine = cls.__struct_fields__  # type: ignore[attr-defined]
            if version > cls.MESSAGE_VERSION or mine[: len(fields)] != fields:  # type: ignore[attr-defined]
                self._by_name = _ByName(table, own, self.leases if self.format >= INTERNED_SINCE else None)
                return
            if cls is Lease and self.format >= INTERNED_SINCE:
                # The file's lease columns are its Lease fields (a first part of ours: the rest take their defaults).
                self._f5 = self._t.format5(fields)
                self.leases.fields(fields)

    def deliveries(self, body: bytes) -> list[Any]:
        """The records of a deliveries body; a record that cannot be read is its ``CodecError``.

        Raises ``CodecError`` when the body as a whole cannot be read.
        """
        self.clean = True
        if self._by_name is not None:
            records = self._by_name.deliveries(body)
            self.clean = not any(isinstance(r, CodecError) for r in records)
            return records
        if self.format >= INTERNED_SINCE:
            return self._interned(body)
        try:
            records = self._t.frame.decode(body)[1]
        except (msgspec.ValidationError, CodecError, TypeError, ValueError):
            return self._one_by_one(body)
        except msgspec.DecodeError as exc:
            raise CodecError(f"malformed msgpack: {exc}") from None
        if b"~opaque" in body:
            return [_opaque(r) if type(r.message) is OpaqueRecord else r for r in records]
        return records  # type: ignore[no-any-return]

    @property
    def lazy(self) -> bool:
        """Whether this file's records can be read lazily (``rows``): typed, and every type it declares known."""
        return self._by_name is None and not self._unknown

    def rows(self, body: bytes) -> list[Any] | None:
        """The records of a deliveries body with each message left as its bytes (``msgspec.Raw``),
        for ``materialize`` to decode when it is needed; a frame's leases are defined at once.

        None when the body cannot be read this way (``deliveries`` reads it, and says why).
        Only for a file that is ``lazy``.
        """
        self.clean = True
        try:
            if self.format >= INTERNED_SINCE:
                _, records, defs = self._f5.lazy.decode(body)
                self.leases.define(defs)
            else:
                records = self._t.lazy4.decode(body)[1]
        except (msgspec.ValidationError, msgspec.DecodeError, CodecError, TypeError, ValueError):
            return None
        return records  # type: ignore[no-any-return]

    def materialize(self, record: Any) -> Any:
        """A record of ``rows`` with its message decoded (or an ``OpaqueDelivery``). Raises ``CodecError``.

        Only until the next frame is read: a lease a later frame replaced may be forgotten then.
        """
        raw = record[5]
        try:
            if self.format >= INTERNED_SINCE:
                m = self._t.message5.decode(raw)
                c = self._converters.get(type(m))
                if c is not None:
                    m = c(m)
            else:
                m = self._t.message4.decode(raw)
        except (msgspec.ValidationError, CodecError, TypeError, ValueError) as exc:
            raise _why(raw, exc, self._t.own, message=True) from None
        except msgspec.DecodeError as exc:
            raise CodecError(f"malformed msgpack: {exc}") from None
        if type(m) is OpaqueRecord:
            return OpaqueDelivery(record[0], record[1], record[2], record[3], record[4], m.type_name)
        return _new_record(DeliveryRecord, (record[0], record[1], record[2], record[3], record[4], m))

    def _interned(self, body: bytes) -> list[Any]:
        """A format 5 body: its lease definitions taken, then its records built with their leases."""
        try:
            _, records, defs = self._f5.frame.decode(body)
        except (msgspec.ValidationError, CodecError, TypeError, ValueError):
            return self._one_by_one5(body)
        except msgspec.DecodeError as exc:
            raise CodecError(f"malformed msgpack: {exc}") from None
        self.leases.define(defs)
        convert = self._converters
        opaque = b"~opaque" in body
        try:
            for i, r in enumerate(records):
                m = r[5]
                c = convert.get(type(m))
                if c is not None:
                    records[i] = _new_record(DeliveryRecord, (r[0], r[1], r[2], r[3], r[4], c(m)))
                elif opaque and type(m) is OpaqueRecord:
                    records[i] = _opaque(r)
        except CodecError:
            return self._built_one_by_one(records)
        return records  # type: ignore[no-any-return]

    def _built_one_by_one(self, records: list[Any]) -> list[Any]:
        """Records decoded, one of them (at least) referring to a lease no intact frame defined."""
        out: list[Any] = []
        convert = self._converters
        for r in records:
            if type(r) is not DeliveryRecord:
                out.append(r)  # made opaque already
                continue
            if type(r.message) is OpaqueRecord:
                out.append(_opaque(r))
                continue
            c = convert.get(type(r.message))
            try:
                out.append(r if c is None else _new_record(DeliveryRecord, (*r[:5], c(r.message))))
            except CodecError as exc:
                out.append(exc)
        self.clean = not any(isinstance(r, CodecError) for r in out)
        return out

    def _one_by_one(self, body: bytes) -> list[Any]:
        """A body with a bad record: each record decoded alone, the bad one(s) as their errors."""
        try:
            rows = self._t.rows.decode(body)[1]
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise CodecError(f"deliveries record is not [0, [...]]: {exc}") from None
        return self._rows_one_by_one(rows, self._t.one)

    def _one_by_one5(self, body: bytes) -> list[Any]:
        """A format 5 body with a bad record: its definitions taken (they serve every record), then each record alone."""
        try:
            _, rows, defs = self._f5.rows.decode(body)
        except (msgspec.ValidationError, msgspec.DecodeError, CodecError, TypeError, ValueError) as exc:
            raise CodecError(f"deliveries record is not [0, [...], lease definitions]: {exc}") from None
        self.leases.define(defs)
        return self._rows_one_by_one(rows, self._t.one5)

    def _rows_one_by_one(self, rows: list[Any], one: Any) -> list[Any]:
        out: list[Any] = []
        convert = self._converters
        for raw in rows:
            try:
                r = one.decode(raw)
                c = convert.get(type(r.message))
                if c is not None:
                    r = _new_record(DeliveryRecord, (*r[:5], c(r.message)))
            except (msgspec.ValidationError, CodecError, TypeError, ValueError) as exc:
                out.append(_why(raw, exc, self._t.own))
                continue
            except msgspec.DecodeError as exc:
                out.append(CodecError(f"malformed msgpack: {exc}"))
                continue
            out.append(_opaque(r) if type(r.message) is OpaqueRecord else r)
        self.clean = not any(isinstance(r, CodecError) for r in out)
        return out


#: Builds a ``DeliveryRecord`` (a named tuple) from its six values in C.
_new_record = tuple.__new__


def _opaque(r: Any) -> OpaqueDelivery:
    return OpaqueDelivery(r.seq, r.at, r.sender, r.recipient, r.cause, r.message.type_name)


def _why(raw: Any, exc: Exception, own: dict[str, type], message: bool = False) -> CodecError:
    """The error a record (or, with ``message``, its message) that would not decode stands for: an unknown type, or damage."""
    try:
        value = msgspec.msgpack.decode(raw, ext_hook=_ext_hook)
        tag = value[0] if message else value[5][0]
    except Exception:
        tag = None
    if isinstance(tag, str) and tag not in own and tag != "~opaque":
        return UnknownMessageType(tag)
    if isinstance(exc, CodecError):
        return exc
    return CodecError(f"record does not match its types: {exc}")


class _ByName:
    """A file whose type table differs from this build's: its messages are built by field name.

    The body is decoded untyped, then each message is built from its type's
    declared fields, following this build's annotations to find the
    messages nested in it: the reader's classes, the writer's field names.
    """

    def __init__(
        self, table: dict[str, tuple[int, tuple[str, ...]]], own: dict[str, type], leases: LeaseTable | None = None
    ) -> None:
        self.table = table
        self.own = own
        self._hints: dict[type, dict[str, Any]] = {}
        self._decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
        #: Format 5: the file's leases, which its records name by index (None: format 4, leases written whole).
        self.leases = leases

    def deliveries(self, body: bytes) -> list[Any]:
        try:
            value = self._decoder.decode(body)
        except (msgspec.DecodeError, CodecError) as exc:
            raise CodecError(f"malformed msgpack: {exc}") from None
        leases = self.leases
        if leases is None:
            if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], list):
                raise CodecError("deliveries record is not [0, [...]]")
        else:
            if not (isinstance(value, list) and len(value) == 3 and isinstance(value[1], list)):
                raise CodecError("deliveries record is not [0, [...], lease definitions]")
            if value[2] is not None:
                self._definitions(value[2])
        out: list[Any] = []
        for row in value[1]:
            try:
                out.append(self._row(row))
            except CodecError as exc:
                out.append(exc)
        return out

    def _definitions(self, d: Any) -> None:
        """A format 5 frame's lease definitions, column by column under the file's ``Lease`` field names."""
        if not (isinstance(d, list) and len(d) == 4 and all(isinstance(x, list) for x in d)):
            raise CodecError("lease definitions are not [[index, ...], [column, ...], [values, ...], [settled, ...]]")
        index, columns, values, settled = d
        declared = self.table.get(Lease.MESSAGE_NAME)  # type: ignore[attr-defined]
        if declared is None:
            raise CodecError("lease definitions in a file that declares no lease type")
        version, names = declared
        if version > Lease.MESSAGE_VERSION:
            raise NewerSchemaVersion(Lease.MESSAGE_NAME, version, Lease.MESSAGE_VERSION)  # type: ignore[arg-type]
        hints = self._hints.get(Lease)
        if hints is None:
            hints = self._hints[Lease] = typing.get_type_hints(Lease, localns={c.__name__: c for c in self.own.values()})
        unknown = [n for n in names if n not in hints]
        if unknown:
            raise CodecError(f"message type 'lease' has no field(s) {', '.join(unknown)}")
        composite = composite_fields(names)
        if len(columns) != len(names) or len(values) != len(composite):
            raise CodecError(f"lease definitions hold {len(columns)} columns for {len(names)} declared field(s)")
        built: list[list[Any]] = []
        distinct = dict(zip(composite, values))
        for pos, name in enumerate(names):
            column = columns[pos]
            if not isinstance(column, list) or len(column) != len(index):
                raise CodecError(f"lease column {name!r} does not hold one value per lease")
            if pos in distinct:
                table = [self._value(v, hints[name]) for v in distinct[pos]]
                try:
                    column = [table[i] for i in column]
                except (IndexError, TypeError):
                    raise CodecError(f"lease column {name!r} refers to a value it does not hold") from None
            else:
                column = [self._value(v, hints[name]) for v in column]
            built.append(column)
        try:
            leases = [Lease(**dict(zip(names, row))) for row in zip(*built)]
            versions = [SettledVersion(s[1], s[2], s[3], self._value(s[4], typing.Optional[tuple[Coin, ...]]))
                        for s in settled if isinstance(s, list) and len(s) == 5 and s[0] == "~settled"
                        and type(s[1]) is int and type(s[2]) is int]
        except (TypeError, ValueError) as exc:
            raise CodecError(f"malformed lease definitions: {exc}") from None
        if len(versions) != len(settled):
            raise CodecError("a settled lease version is not [~settled, index, prev, last_settled_at, reservation]")
        self.leases.add(index, leases, [lease.uuid for lease in leases], versions)  # type: ignore[union-attr]

    def _row(self, row: Any) -> Any:
        if not isinstance(row, list) or len(row) != 6:
            raise CodecError("a record of the frame is not a delivery")
        seq, at, sender, recipient, cause, m = row
        if not (type(seq) is int and isinstance(at, _dt.datetime) and type(sender) is str
                and type(recipient) is str and type(cause) is int):
            raise CodecError("delivery fields have the wrong types")
        if not (0 < seq < MAX_SEQ and 0 <= cause < MAX_SEQ):
            raise CodecError(f"sequence number {seq} or cause {cause} out of range")
        if isinstance(m, list) and m and m[0] == "~opaque" and len(m) == 2 and type(m[1]) is str:
            return OpaqueDelivery(seq, at, sender, recipient, cause, m[1])
        return DeliveryRecord(seq, at, sender, recipient, cause, self._message(m))

    def _message(self, m: Any) -> Any:
        if not isinstance(m, list) or not m or type(m[0]) is not str:
            raise CodecError("a message is not [tag, value, ...]")
        name = m[0]
        cls = self.own.get(name)
        if cls is None:
            raise UnknownMessageType(name)
        declared = self.table.get(name)
        if declared is None:
            raise CodecError(f"message type {name!r} is used but not declared in the file")
        version, fields = declared
        if version > cls.MESSAGE_VERSION:  # type: ignore[attr-defined]
            raise NewerSchemaVersion(name, version, cls.MESSAGE_VERSION)  # type: ignore[attr-defined]
        values = m[1:]
        if len(values) > len(fields):
            raise CodecError(f"message type {name!r}: {len(values)} value(s) for {len(fields)} field(s)")
        known = cls.__struct_fields__  # type: ignore[attr-defined]
        unknown = [f for f in fields[: len(values)] if f not in known]
        if unknown:
            raise CodecError(f"message type {name!r} has no field(s) {', '.join(unknown)}")
        hints = self._hints.get(cls)
        if hints is None:
            hints = self._hints[cls] = typing.get_type_hints(cls, localns={c.__name__: c for c in self.own.values()})
        kwargs = {f: self._value(v, hints[f]) for f, v in zip(fields, values)}
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise CodecError(f"message type {name!r}: {exc}") from exc

    def _value(self, v: Any, tp: Any) -> Any:
        """``v`` as a value of ``tp``: nested messages built, arrays as tuples, big ints read, leases looked up."""
        if type(v) is int and self.leases is not None and (tp is Lease or tp == typing.Optional[Lease]):
            lease = self.leases.objects.get(v)
            if lease is None:
                raise self.leases.missing(v)
            return lease
        if isinstance(v, msgspec.msgpack.Ext):
            return decode_big_int(v.data) if v.code == _EXT_BIG_INT else v
        if not isinstance(v, list):
            return v
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            return self._message(v)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
            for a in args:
                if isinstance(a, type) and issubclass(a, msgspec.Struct):
                    return self._message(v)
                if typing.get_origin(a) is tuple:
                    return self._value(v, a)
            return tuple(v)
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(self._value(x, args[0]) for x in v)
            return tuple(self._value(x, a) for x, a in zip(v, args))
        return tuple(v)
