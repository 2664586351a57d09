"""Capture format 5: a lease is written once per file, and referred to by number after that.

A provider's active-lease list (every lease it has, read every cycle), each
tenant's lease list in its credit reads and its monitor's sync, the ledger's
reconciliation: one lease reaches a capture several times a cycle, and does
not change between two settlements. Written whole each time (format 4) it
was most of what a capture wrote (about 625 B a delivery on the chain model
against 244 B for format 3, which interned leases) and most of what a replay
decoded (a ``Lease`` costs msgspec several microseconds: four datetimes, two
``Coin`` checks in Python).

So in format 5 every lease held by a message field (``Lease``, ``Lease |
None`` or ``tuple[Lease, ...]``, found from the message types'
annotations: ``lease_fields``) is written as an int, its *object index* in
the file, and a deliveries frame carries the leases it introduces::

    [0, [[seq, at, sender, recipient, cause, message], ...], base, [def, ...]]

where ``def`` number *k* has the index ``base + k`` and is either a
``Lease`` (written as msgspec writes it) or a ``SettledVersion``: the index
of an earlier version of the same lease and the two fields a settlement
moves (``last_settled_at``, ``reservation``), which is all that changes
between two withdrawals. The writer (``LeaseInterner``) refers to the lease it
last wrote under a uuid for as long as the lease it is given equals it (by
value: a node's client builds new objects on every read), and writes a new
definition when it does not. Indices only grow within a file, and each file
starts afresh (``reset``), so a file still reads on its own.

A reader (``LeaseTable``) takes a frame's definitions before its records, so
a record refers to a lease defined earlier in the file or in its own frame;
once the frame's records are built it keeps only the latest version of each
lease (the only one a later frame can refer to), so its memory is bounded by
the leases the file names, as the writer's is. An index that refers to
nothing (a definition in a frame that was damaged and skipped) is an error
of the record that uses it, never another lease: indices are never reused.
"""

from __future__ import annotations

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
    "ONE",
    "OPTIONAL",
    "MANY",
]

#: How a message field holds leases: one, one or None, a tuple of them.
ONE, OPTIONAL, MANY = 0, 1, 2


class SettledVersion(msgspec.Struct, frozen=True, array_like=True, gc=False, tag="~settled"):
    """A lease's new version that differs from its version ``prev`` only where a settlement moves it.

    The fields are the ``Lease`` fields of the same names (a reader that
    renamed them maps them by these names).
    """

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

    def reset(self) -> None:
        """A new file: nothing is defined in it yet."""
        self._last = {}
        self.next = 0

    def frame(self, batch: Iterable[tuple[Any, ...]]) -> tuple[list[Any], int, list[Any], list[Any]]:
        """``(rows, base, definitions, undo)`` for ``batch`` (delivery rows: seq, at, sender, recipient, cause, message).

        A message holding leases becomes the array msgspec would write for it
        (its tag, then its fields) with an index in place of each lease.
        ``undo`` takes the frame back (``undo(...)``) if it is not written.
        """
        last = self._last
        base = self.next
        defs: list[Any] = []
        undo: list[tuple[str, tuple[int, Lease] | None]] = []
        holders = self._holders

        def index(lease: Lease) -> int:
            uuid = lease.uuid
            prev = last.get(uuid)
            if prev is not None:
                seen = prev[1]
                if seen is lease or seen == lease:
                    return prev[0]
                if replace(seen, last_settled_at=lease.last_settled_at, reservation=lease.reservation) == lease:
                    defs.append(SettledVersion(prev[0], lease.last_settled_at, lease.reservation))
                else:
                    defs.append(lease)
            else:
                defs.append(lease)
            i = base + len(defs) - 1
            undo.append((uuid, prev))
            last[uuid] = (i, lease)
            return i

        rows: list[Any] = []
        append = rows.append
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
                    values[pos] = tuple([index(x) for x in v])
                elif v is not None:
                    values[pos] = index(v)
            append((d[0], d[1], d[2], d[3], d[4], (cls.MESSAGE_NAME, *values)))  # type: ignore[attr-defined]
        self.next = base + len(defs)
        return rows, base, defs, undo

    def undo(self, base: int, undo: list[Any]) -> None:
        """Forget a frame that was not written (``frame``'s ``base`` and ``undo``)."""
        last = self._last
        for uuid, prev in reversed(undo):
            if prev is None:
                del last[uuid]
            else:
                last[uuid] = prev
        self.next = base


class LeaseTable:
    """The reader's side: the leases a format 5 file has defined so far, by index."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new file."""
        #: index -> lease: the latest version of each lease, and the current frame's definitions
        self.objects: dict[int, Lease] = {}
        self._latest: dict[str, int] = {}
        #: the index the next frame's definitions may start from (indices only grow)
        self.next = 0
        self._superseded: list[int] = []

    def define(self, base: int, defs: list[Any]) -> None:
        """Take a frame's definitions. Raises ``CodecError`` (the frame cannot be read)."""
        self.forget_superseded()
        if type(base) is not int or base < self.next:
            raise CodecError(f"lease definitions from index {base!r}, where the file's next index is {self.next}")
        objects, latest, superseded = self.objects, self._latest, self._superseded
        i = base
        for d in defs:
            if type(d) is SettledVersion:
                prev = objects.get(d.prev)
                if prev is None or d.prev >= i:
                    raise CodecError(f"lease definition {i} is a settlement of lease {d.prev}, which is not defined")
                lease = replace(prev, last_settled_at=d.last_settled_at, reservation=d.reservation)
            else:
                lease = d
            old = latest.get(lease.uuid)
            if old is not None:
                superseded.append(old)
            latest[lease.uuid] = i
            objects[i] = lease
            i += 1
        self.next = i

    def forget_superseded(self) -> None:
        """Drop the versions a later one replaced (once the records that may refer to them are built)."""
        if self._superseded:
            objects, latest = self.objects, self._latest
            for i in self._superseded:
                lease = objects.get(i)
                if lease is not None and latest.get(lease.uuid) != i:
                    del objects[i]
            self._superseded = []

    def missing(self, index: Any) -> CodecError:
        return CodecError(
            f"refers to lease {index!r}, which no intact frame of this file defines (a damaged frame's, or none)"
        )


def converter(cls: type, spec: tuple[tuple[int, int], ...], table: LeaseTable) -> Callable[[Any], Any]:
    """Builds a ``cls`` from its wire twin (``cls``'s fields, an index in place of each lease)."""

    def convert(twin: Any) -> Any:
        objects = table.objects
        values = list(astuple(twin))
        try:
            for pos, shape in spec:
                v = values[pos]
                if shape == MANY:
                    values[pos] = tuple(map(objects.__getitem__, v))
                elif v is not None:
                    values[pos] = objects[v]
        except KeyError as exc:
            raise table.missing(exc.args[0]) from None
        return cls(*values)

    return convert
