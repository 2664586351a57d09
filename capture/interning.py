"""Capture format 5: a lease is written once per version per file, and referred to by number after that.

A provider's active-lease list (every lease it has, read every cycle), each
tenant's lease list in its credit reads and its monitor's sync, the ledger's
reconciliation: one lease reaches a capture several times a cycle, and does
not change between two settlements. Written whole each time (format 4) it
was most of what a capture wrote (about 615 B a delivery on the chain model
against 244 B for format 3, which interned leases) and most of what a replay
decoded.

So in format 5 every lease held by a message field (``Lease``, ``Lease |
None`` or ``tuple[Lease, ...]``, found from the message types'
annotations: ``lease_fields``) is written as an int, its *index* in the
file, and a deliveries frame carries the leases it introduces::

    [0, [[seq, at, sender, recipient, cause, message], ...], definitions]

``definitions`` is nil when the frame introduces none, else::

    [[index, ...], [column, ...], [values, ...], [settled, ...]]

- the new leases written whole, *column by column* (one column per ``Lease``
  field, in the order the file's type table declares them), each with its
  index; a field that holds more than a plain value (``items``,
  ``reservation``) has in its column an index into that field's list of the
  distinct values the frame uses (``values``, in field order), since a
  provider's leases mostly share them. A reader builds the leases of a
  column set in one C loop (``map(Lease, *columns)``): a lease costs it
  about a third of decoding one written as a message;
- ``settled``: ``SettledVersion`` records, each a new version of a lease
  that differs from its previous one only in what a settlement moves
  (``last_settled_at``, ``reservation``): its index, the previous
  version's index and those two fields.

The writer (``LeaseInterner``) refers to the lease it last wrote under a uuid
for as long as the lease it is given equals it (by value: a node's client
builds new objects on every read), and writes a new version when it does
not. Indices only grow within a file, and each file starts afresh
(``reset``), so a file still reads on its own (a file rotated every hour
defines the provider's leases again in its first frames).

A reader (``LeaseTable``) takes a frame's definitions before its records, so
a record refers to a lease defined earlier in the file or in its own frame.
It keeps the latest version of each lease, which is all a later frame can
refer to (the versions a frame replaced are dropped once they outnumber the
latest ones), so its memory is bounded by the leases the file names, as
the writer's is. An index that refers to nothing (a definition in a frame
that was damaged and skipped) is an error of the record that uses it, never
another lease: indices are never reused.
"""

from __future__ import annotations

import datetime as _dt
import types
import typing
from datetime import datetime
from typing import Any, Callable, Iterable

import msgspec
from msgspec.structs import astuple, replace

from messages.chain import Lease
from messages.codec import CodecError, registry
from messages.coins import Coin

__all__ = [
    "SettledVersion",
    "LeaseInterner",
    "LeaseTable",
    "lease_fields",
    "composite_fields",
    "definitions_type",
    "ONE",
    "OPTIONAL",
    "MANY",
]

#: How a message field holds leases: one, one or None, a tuple of them.
ONE, OPTIONAL, MANY = 0, 1, 2

#: Versions of leases a reader holds beyond the latest one of each before it
#: drops the replaced ones: a file of settlements (a version per lease per
#: withdrawal) would otherwise keep every version it ever defined.
REPLACED_SLACK = 4096


class SettledVersion(msgspec.Struct, frozen=True, array_like=True, gc=False, tag="~settled"):
    """Lease ``index``: the version ``prev`` of the same lease, where a settlement moved it.

    The fields are the ``Lease`` fields of the same names (a reader that
    renamed them maps them by these names).
    """

    index: int
    prev: int
    last_settled_at: datetime | None
    reservation: tuple[Coin, ...] | None


_FIELDS: dict[type, tuple[tuple[int, int], ...]] = {}


def lease_fields(cls: type) -> tuple[tuple[int, int], ...]:
    """``(position, ONE | OPTIONAL | MANY)`` of each field of ``cls`` that holds leases; () for none.

    Raises ``TypeError`` for a field that holds leases in any other way (in
    a dict, inside another message): the capture would write it whole, and a
    reader would not know to look for an index there; such a type needs
    this module taught its shape first.
    """
    found = _FIELDS.get(cls)
    if found is not None:
        return found
    localns = {c.__name__: c for c in registry().values()}
    hints = typing.get_type_hints(cls, localns=localns)
    out: list[tuple[int, int]] = []
    for pos, name in enumerate(getattr(cls, "__struct_fields__", ())):
        tp = hints[name]
        if tp is Lease:
            out.append((pos, ONE))
        elif tp == (Lease | None):
            out.append((pos, OPTIONAL))
        elif tp == tuple[Lease, ...]:
            out.append((pos, MANY))
        elif _mentions_lease(tp, localns, (cls,)):
            raise TypeError(
                f"{cls.__qualname__}.{name} holds leases as {tp!r}: capture interns leases only in fields typed "
                "Lease, Lease | None or tuple[Lease, ...] (capture.interning)"
            )
    found = _FIELDS[cls] = tuple(out)
    return found


def _mentions_lease(tp: Any, localns: dict[str, type], seen: tuple[type, ...]) -> bool:
    if tp is Lease:
        return True
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp in seen:
            return False
        hints = typing.get_type_hints(tp, localns=localns)
        return any(_mentions_lease(h, localns, seen + (tp,)) for h in hints.values())
    return any(_mentions_lease(a, localns, seen) for a in typing.get_args(tp))


_PLAIN = (str, int, bool, float, bytes, _dt.datetime, type(None))


def _plain(tp: Any) -> bool:
    """A field type whose values a column holds as they are (no struct, no sequence)."""
    if tp in _PLAIN:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return all(_plain(a) for a in typing.get_args(tp))
    return False


def _lease_hints() -> dict[str, Any]:
    return typing.get_type_hints(Lease, localns={c.__name__: c for c in registry().values()})


def composite_fields(names: tuple[str, ...]) -> tuple[int, ...]:
    """The positions, among the ``Lease`` fields ``names``, of those whose column holds value indices."""
    hints = _lease_hints()
    return tuple(pos for pos, name in enumerate(names) if not _plain(hints[name]))


def definitions_type(names: tuple[str, ...]) -> Any:
    """The msgspec type of a frame's lease definitions written with the ``Lease`` fields ``names``
    (this build's, or a first part of them: a file from before a field was added)."""
    hints = _lease_hints()
    composite = composite_fields(names)
    columns = tuple(list[int] if pos in composite else list[hints[name]] for pos, name in enumerate(names))  # type: ignore[misc]
    values = tuple(list[hints[names[pos]]] for pos in composite)  # type: ignore[misc]
    return typing.Optional[tuple[list[int], tuple[columns], tuple[values], list[SettledVersion]]]  # type: ignore[valid-type]


class LeaseInterner:
    """The writer's side: deliveries to the rows and definitions of one format 5 frame.

    Keeps, per lease uuid, the index and value of the version last written
    in the current file. Not thread-safe: the capture writer's, one per writer.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, Lease]] = {}
        self.next = 0
        #: message type -> its lease fields (``lease_fields``), looked up once per type
        self._holders: dict[type, tuple[tuple[int, int], ...]] = {}
        self._composite = composite_fields(Lease.__struct_fields__)

    def reset(self) -> None:
        """A new file: nothing is defined in it yet."""
        self._last = {}
        self.next = 0

    def frame(self, batch: Iterable[tuple[Any, ...]]) -> tuple[list[Any], Any, tuple[int, list[Any]]]:
        """``(rows, definitions, undo)`` for ``batch`` (delivery rows: seq, at, sender, recipient, cause, message).

        A message holding leases becomes the array msgspec would write for it
        (its tag, then its fields) with an index in place of each lease.
        ``undo`` takes the frame back (``undo(...)``) if it is not written.
        """
        last = self._last
        base = self.next
        counter = [base]
        whole: list[Lease] = []
        whole_index: list[int] = []
        settled: list[SettledVersion] = []
        undo: list[tuple[str, tuple[int, Lease] | None]] = []
        holders = self._holders

        def new_version(lease: Lease, prev: tuple[int, Lease] | None) -> int:
            """The index of ``lease``, which differs from ``prev``, the version last written under its uuid
            (None: none yet)."""
            i = counter[0]
            counter[0] = i + 1
            if prev is not None and replace(
                prev[1], last_settled_at=lease.last_settled_at, reservation=lease.reservation
            ) == lease:
                settled.append(SettledVersion(i, prev[0], lease.last_settled_at, lease.reservation))
            else:
                whole.append(lease)
                whole_index.append(i)
            uuid = lease.uuid
            undo.append((uuid, prev))
            last[uuid] = (i, lease)
            return i

        def index(lease: Lease) -> int:
            prev = last.get(lease.uuid)
            if prev is not None and (prev[1] is lease or prev[1] == lease):
                return prev[0]
            return new_version(lease, prev)

        rows: list[Any] = []
        append = rows.append
        get = last.get
        for d in batch:
            m = d[5]
            cls = type(m)
            spec = holders.get(cls)
            if spec is None:
                spec = holders[cls] = lease_fields(cls)
            if not spec:
                append(d)
                continue
            values = list(astuple(m))
            for pos, shape in spec:
                v = values[pos]
                if shape == MANY:
                    # (``index`` inline: the lease last written, as the very object or an equal one, is
                    # most of them, and a node's client builds new objects on every read)
                    values[pos] = tuple([
                        p[0] if (p := get(x.uuid)) is not None and (p[1] is x or p[1] == x) else new_version(x, p)
                        for x in v
                    ])
                elif v is not None:
                    values[pos] = index(v)
            append((d[0], d[1], d[2], d[3], d[4], (cls.MESSAGE_NAME, *values)))  # type: ignore[attr-defined]
        self.next = counter[0]
        if not whole and not settled:
            return rows, None, (base, undo)
        return rows, (whole_index, *self._columns(whole), settled), (base, undo)

    def _columns(self, leases: list[Lease]) -> tuple[list[Any], list[Any]]:
        """``leases`` column by column, each composite field's column as indices into its distinct values."""
        if not leases:
            return [[] for _ in Lease.__struct_fields__], [[] for _ in self._composite]
        columns: list[Any] = list(zip(*map(astuple, leases)))
        values: list[list[Any]] = []
        for pos in self._composite:
            seen: dict[Any, int] = {}
            distinct: list[Any] = []
            column = []
            for v in columns[pos]:
                i = seen.get(v)
                if i is None:
                    i = seen[v] = len(distinct)
                    distinct.append(v)
                column.append(i)
            columns[pos] = column
            values.append(distinct)
        return columns, values

    def undo(self, undo: tuple[int, list[Any]]) -> None:
        """Forget a frame that was not written (``frame``'s ``undo``)."""
        base, log = undo
        last = self._last
        for uuid, prev in reversed(log):
            if prev is None:
                del last[uuid]
            else:
                last[uuid] = prev
        self.next = base


class LeaseTable:
    """The reader's side: the leases a format 5 file has defined so far, by index."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, names: tuple[str, ...] = Lease.__struct_fields__) -> None:
        """A new file, whose leases are written with the ``Lease`` fields ``names``."""
        #: index -> lease: the latest version of each lease, and the versions a recent frame replaced
        self.objects: dict[int, Lease] = {}
        self._latest: dict[str, int] = {}
        #: the index the next frame's definitions may start from (indices only grow)
        self.next = 0
        self.fields(names)

    def fields(self, names: tuple[str, ...]) -> None:
        """The ``Lease`` fields the file's columns hold (its type table's), a first part of this build's."""
        self._composite = composite_fields(names)
        self._uuid = names.index("uuid") if "uuid" in names else None

    def define(self, defs: Any) -> None:
        """Take a frame's definitions (typed: ``definitions_type``). Raises ``CodecError``."""
        if defs is None:
            return
        index, columns, values, settled = defs
        if self._uuid is None:
            raise CodecError("lease definitions without the uuid field")
        columns = list(columns)
        try:
            for pos, distinct in zip(self._composite, values):
                columns[pos] = list(map(distinct.__getitem__, columns[pos]))
            leases = list(map(Lease, *columns))
        except (IndexError, TypeError, ValueError) as exc:
            raise CodecError(f"malformed lease definitions: {exc}") from None
        self.add(index, leases, columns[self._uuid], settled)

    def add(self, index: list[int], leases: list[Lease], uuids: Any, settled: list[SettledVersion]) -> None:
        """Take a frame's new leases (``index[k]`` is ``leases[k]``'s, ``uuids[k]`` its uuid) and settled versions."""
        objects, latest = self.objects, self._latest
        if len(objects) > 2 * len(latest) + REPLACED_SLACK:
            # Only the latest version of a lease can be referred to by a later frame.
            objects = self.objects = {i: objects[i] for i in latest.values()}
        if len(leases) != len(index):
            raise CodecError(f"{len(leases)} lease definitions for {len(index)} indices")
        top = self.next - 1
        if index:
            if min(index) <= top:
                raise CodecError(f"lease definitions from index {min(index)}, where the file's next index is {self.next}")
            objects.update(zip(index, leases))
            latest.update(zip(uuids, index))
            top = max(index)
        for s in settled:
            if s.index < self.next:
                raise CodecError(f"lease definitions from index {s.index}, where the file's next index is {self.next}")
            prev = objects.get(s.prev)
            if prev is None or s.prev >= s.index:
                raise CodecError(f"lease definition {s.index} is a settlement of lease {s.prev}, which is not defined")
            lease = replace(prev, last_settled_at=s.last_settled_at, reservation=s.reservation)
            objects[s.index] = lease
            if latest.get(lease.uuid, -1) < s.index:
                latest[lease.uuid] = s.index
            if s.index > top:
                top = s.index
        self.next = top + 1

    def missing(self, index: Any) -> CodecError:
        return CodecError(
            f"refers to lease {index!r}, which no intact frame of this file defines (a damaged frame's, or none)"
        )


def converter(cls: type, spec: tuple[tuple[int, int], ...], table: LeaseTable) -> Callable[[Any], Any]:
    """Builds a ``cls`` from its wire twin (``cls``'s fields, an index in place of each lease).

    The function is written out for ``cls`` (each field read by name, each
    lease looked up where it is) rather than walking the twin's values: a
    replay converts every message that holds leases (every credit read), and
    the generic walk (the values as a list, a loop over the lease fields)
    cost about a third more than building the message itself.
    """
    shapes = dict(spec)
    args = []
    for pos, name in enumerate(cls.__struct_fields__):  # type: ignore[attr-defined]
        shape = shapes.get(pos)
        if shape is None:
            args.append(f"t.{name}")
        elif shape == MANY:
            args.append(f"tuple(map(objects.__getitem__, t.{name}))")
        elif shape == ONE:
            args.append(f"objects[t.{name}]")
        else:
            args.append(f"(None if t.{name} is None else objects[t.{name}])")
    source = (
        "def convert(t):\n"
        "    objects = table.objects\n"
        "    try:\n"
        f"        return cls({', '.join(args)})\n"
        "    except KeyError as exc:\n"
        "        raise table.missing(exc.args[0]) from None\n"
    )
    namespace: dict[str, Any] = {"cls": cls, "table": table}
    exec(compile(source, f"<capture.interning converter for {cls.__qualname__}>", "exec"), namespace)
    return namespace["convert"]  # type: ignore[no-any-return]
