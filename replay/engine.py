"""Replay: captured inputs through today's decision code, compared with what was decided.

The cores (``actors.effects``) are the whole of the sidecar's decisions:
``core.handle(message, now) -> effects``. The capture holds every message
delivered to every actor, so for each replayed address (``scheduler``,
``chain``, ``tenant/<addr>``) it holds both the core's *inputs* (deliveries
to it, from chain-io, the listener, the clock, the operator, other cores)
and its *decisions* (deliveries it caused). ``Replayer`` feeds each input,
in capture order, to a core built by ``build_core(address, config)`` (when
its first input arrives, with the run's captured configuration), with the
record's clock time as ``now`` (the capture's times are the replay's
clock: nothing reads the wall clock); no network, no chain. Then it checks each
effect against the capture:

- ``Send(to, m)`` of input *k* must match the captured delivery to ``to``
  whose sender is that core and whose cause is *k*; several sends to one
  recipient keep their order (a mailbox is first in, first out); sends to
  different recipients may interleave in any order;
- ``Send(to, m, at=T)`` (a timer) must match the delivery sent as ``clock``
  with cause *k*, fired at ``T`` (exactly on a manual clock; within
  ``timer_slack`` after ``T`` on a real one, whose timers fire late);
- ``Spawn(tenant, first)`` must match ``first``, delivered by that core to
  the new monitor, in order; the monitor's next input goes to a fresh core;
- ``Retire(tenant)`` is not visible in a capture (stopping an actor is not
  a delivery); it is replayed for what it explains (below);
- ``Note`` lines are the timeline.

A decision the runtime legitimately never delivered is *excused*, not a
divergence, and counted by reason:

- mail to a tenant monitor after its ``Retire`` (the router drops it);
- a timer not yet due when the run ended (or past ``--until``), or whose
  setter was stopped (stopping an actor cancels its timers);
- mail to an address that received nothing at all after the decision until
  the run ended: the run stopped with it still queued, or no actor lives
  there (a ledger that is not configured drops its mail).

Everything else that differs is a ``Divergence``: *changed* (captured and
replayed differ; the fields are listed), *missing* (the capture has a
decision the replay does not make) or *extra* (the replay decides what the
capture does not show), each tied to the input record whose handling led to
it and to the first diverging input of the same core, whose state from then
on may explain the rest. Two replays of the same logs produce the same
events in the same order.

Records come a frame at a time (``CaptureReader.batches``). A replay of
some cores only (``replayed_for``: ``--tenant``) reads lazily: a record's
message is decoded only if it is a replayed core's input or decision (most
of a large capture is other tenants' reads and verdicts); the others are
counted and their addresses noted, which is all the matching needs of them.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import operator
import threading
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Iterator

from msgspec import Raw

from actors.effects import Note, Retire, Send, Spawn
from capture.errors import CaptureError
from capture.format import DeliveryRecord, FilePart, OpaqueDelivery, RunEnd, RunStart
from capture.reader import Batch, Entry
from capture.writer import effective_config
from replay import describe
from replay.config import replay_config
from runtime.config import Config
from runtime.router import tenant_address

__all__ = [
    "ReplayError",
    "Replayer",
    "ReplayTotals",
    "RunBegins",
    "RunEnds",
    "Step",
    "Divergence",
    "is_replayed",
    "replayed_for",
    "default_build_core",
    "CLOCK",
]

#: Inputs a run's bitmap covers from its first one (a 1 GiB bitmap at most):
#: a sequence number further off is damaged or crafted, and is kept in a set
#: instead of making the bitmap that large.
MAX_BITMAP_SPAN = 2**33

#: The sender name of timer deliveries (``runtime.router.Router.tell_at``).
CLOCK = "clock"

#: After ``--until``, records are still read for this much more clock time
#: (no input is fed) so that decisions made just before it find their
#: deliveries; what is still undelivered then is excused as past --until.
UNTIL_GRACE = timedelta(minutes=1)

NEVER_DELIVERED = "never delivered: nothing reached the recipient after the decision (run stopped, or no actor there)"

#: Decisions held for an address that has received nothing yet in the run,
#: before it is taken as absent (see ``_Run._park``), beyond
#: ``PARK_PER_ADDRESS`` for each address that has received something: a burst
#: of mail grows with the actors (a first cycle spawns every tenant's monitor,
#: and each one's first snapshot for the ledger is parked until the scheduler's
#: burst is delivered), so a fixed limit would take the ledger of a sidecar of
#: 10,000 tenants as absent.
PARK_LIMIT = 10_000
PARK_PER_ADDRESS = 4

#: Records passed between two taken ones (``_Run._passed``) up to which they are gone through one
#: by one rather than column by column: a parallel replay's worker takes every other record or so
#: (in a day of 10,000 tenants, 84% of its gaps were of one or two records), and slicing the
#: columns of so few costs more than the records themselves.
SHORT_GAP = 3

#: How late a real clock's timer may fire, in real seconds, and still match
#: its decision (the timer thread and the dispatcher share the machine).
REAL_TIMER_LATENESS_S = 2.0


#: Allocations between the collector's young-generation passes while a
#: replay runs (the interpreter's default is 700). A replay makes millions of
#: short-lived objects, which reference counting frees, while it holds a
#: large long-lived state (every core's, every decision still to match): at
#: the default, collecting it again and again took about a quarter of a
#: replay's time (bench/replay_speed.py). The setting is restored when the
#: last replay running ends.
REPLAY_GC_THRESHOLD = 50_000

_gc_lock = threading.Lock()
_gc_users = 0
_gc_before: tuple[int, ...] = ()


@contextlib.contextmanager
def _collect_less() -> Iterator[None]:
    global _gc_users, _gc_before
    with _gc_lock:
        if _gc_users == 0:
            _gc_before = gc.get_threshold()
            gc.set_threshold(max(_gc_before[0], REPLAY_GC_THRESHOLD), *_gc_before[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_before)


class ReplayError(Exception):
    """The logs cannot be replayed (no configuration for a run, no decision code)."""


def is_replayed(address: str) -> bool:
    """The addresses whose cores replay runs: the decisions, not the I/O endpoints."""
    return address == "scheduler" or address == "chain" or address.startswith("tenant/")


def replayed_for(tenant: str) -> Callable[[str], bool]:
    """The cores a replay about one ``tenant`` needs: its monitor, the scheduler and the chain actor.

    Each core is fed only captured inputs, so one tenant's monitor decides
    the same whether or not the others are replayed beside it; the
    scheduler and the chain actor decide for every tenant, so they are
    always replayed. What the other monitors sent reaches the scheduler as
    captured input. Leaving those monitors out is what makes such a replay
    of a large capture quick.
    """
    own = tenant_address(tenant)

    def replayed(address: str) -> bool:
        return address == own or (is_replayed(address) and not address.startswith("tenant/"))

    return replayed


def default_build_core(address: str, config: Config) -> Any:
    try:
        from actors.cores import build_core
    except ImportError as exc:
        raise ReplayError(f"this build has no decision cores to replay with (actors.cores: {exc})") from None
    return build_core(address, config)


# -- what a replay produces -------------------------------------------------------------


@dataclass(frozen=True)
class RunBegins:
    run_id: str
    started_at: datetime | None
    version: str
    clock: str
    where: str
    notices: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "run",
            "run": self.run_id,
            "started_at": describe.when(self.started_at),
            "version": self.version,
            "clock": self.clock,
            "where": self.where,
            "notices": list(self.notices),
        }


class Step:
    """One timeline line: a decision (a core's note), or an input from outside that explains one.

    A plain slots class rather than a frozen dataclass: a replay makes one
    per note, and a frozen dataclass's ``__init__`` costs several times more.
    """

    __slots__ = ("kind", "at", "seq", "address", "tenant", "text")

    def __init__(self, kind: str, at: datetime, seq: int, address: str, tenant: str, text: str) -> None:
        self.kind = kind  # note | input | decision | error
        self.at = at
        self.seq = seq
        self.address = address
        self.tenant = tenant
        self.text = text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Step):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Step({self.kind}, #{self.seq}, {self.address}: {self.text})"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "at": describe.when(self.at),
            "seq": self.seq,
            "address": self.address,
            "tenant": self.tenant,
            "text": self.text,
        }


@dataclass(frozen=True)
class Divergence:
    """A decision today's code makes differently from the captured run."""

    run_id: str
    kind: str  # changed | missing | extra | unreplayable
    address: str
    #: The input whose handling led to this decision.
    input_seq: int
    input_at: datetime | None
    input_type: str
    input_where: str
    #: The first diverging input of the same core (its state from then on may explain this one).
    first_seq: int
    detail: str
    captured_seq: int | None = None
    tenant: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "divergence",
            "run": self.run_id,
            "kind": self.kind,
            "address": self.address,
            "tenant": self.tenant,
            "input_seq": self.input_seq,
            "input_at": describe.when(self.input_at),
            "input_type": self.input_type,
            "input_where": self.input_where,
            "first_seq": self.first_seq,
            "captured_seq": self.captured_seq,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class RunEnds:
    run_id: str
    records: int
    inputs: int
    matched: int
    excused: tuple[tuple[str, int], ...]
    divergences: int
    clean_end: bool
    last_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "run_end",
            "run": self.run_id,
            "records": self.records,
            "inputs": self.inputs,
            "matched": self.matched,
            "excused": dict(self.excused),
            "divergences": self.divergences,
            "clean_end": self.clean_end,
            "last_at": describe.when(self.last_at),
        }


# -- bookkeeping ----------------------------------------------------------------------------


class _Expect:
    """A timer a replayed input set, to be matched with a delivery sent as ``clock``."""

    __slots__ = ("to", "message", "at")

    def __init__(self, to: str, message: Any, at: datetime) -> None:
        self.to = to
        self.message = message
        self.at = at


class _Excused:
    """A held decision that may be missing from the capture, and why (its recipient was retired)."""

    __slots__ = ("message", "reason")

    def __init__(self, message: Any, reason: str) -> None:
        self.message = message
        self.reason = reason


def _held(expected: Any) -> tuple[Any, str | None]:
    """A held decision as ``(message, excuse)``."""
    if type(expected) is _Excused:
        return expected.message, expected.reason
    return expected, None


class _Input:
    """A replayed input whose decisions are not all matched yet.

    ``immediate`` maps each recipient to the messages the core sent it, in
    order, each the message itself or, where it may be missing from the
    capture, an ``_Excused`` saying why: a decision is held as it was made,
    with nothing built around it (a replay holds one per decision).
    ``timers`` is a list once the input set one.
    """

    __slots__ = ("seq", "address", "record", "path", "offset", "index", "immediate", "timers")

    def __init__(
        self, record: DeliveryRecord, path: str, offset: int, index: int,
        immediate: dict[str, list[Any]] | None = None, timers: list["_Expect"] | tuple[()] = (),
    ) -> None:
        self.seq = record[0]
        self.address = record[3]
        self.record = record
        self.path = path
        self.offset = offset
        self.index = index
        self.immediate: dict[str, list[Any]] = {} if immediate is None else immediate
        self.timers: list[_Expect] | tuple[()] = timers

    @property
    def at(self) -> datetime:
        return self.record[1]  # type: ignore[no-any-return]

    @property
    def where(self) -> str:
        return Entry(self.path, self.offset, self.record, self.index).where()

    @property
    def type_name(self) -> str:
        rec = self.record
        return rec.message if type(rec) is OpaqueDelivery else type(rec.message).__name__


_TENANTS: dict[str, str] = {}


def _tenant_of(address: str) -> str:
    t = _TENANTS.get(address)
    if t is None:
        t = address[7:] if address.startswith("tenant/") else ""
        if len(_TENANTS) < 1_000_000:
            _TENANTS[address] = t
    return t


def _message_tenant(m: Any) -> str:
    t = getattr(m, "tenant", "")
    if isinstance(t, str):
        return t
    ev = getattr(m, "event", None)
    return getattr(ev, "tenant", "") if ev is not None else ""


#: ``describe``'s outside-input and decision line makers by message type, looked up once per type (None: no line).
_OUTSIDE_BY_TYPE: dict[type, Any] = {}
_DECISION_BY_TYPE: dict[type, Any] = {}
_ASK = object()  # not looked up yet


def _same(expected: Any, record: DeliveryRecord) -> bool:
    """Whether a decision is what was captured: the one comparison of replay (a bench replaces it to time the rest)."""
    if type(record) is OpaqueDelivery:
        cls = type(expected)
        return record.message == f"{cls.__module__}.{cls.__qualname__}"
    return expected == record.message


class _Run:
    """One run of the sidecar being replayed: its cores and what is still to match."""

    def __init__(
        self,
        replayer: "Replayer",
        run_id: str,
        config: Config,
        timer_slack: timedelta,
    ) -> None:
        self.r = replayer
        self.run_id = run_id
        self.config = config
        self.timer_slack = timer_slack
        #: address -> whether a core replays it (the replayer's cache: it outlives runs)
        self._known = replayer._replayed_cache
        self.cores: dict[str, Any] = {}
        self.fresh: set[str] = set()
        self.retired: dict[str, int] = {}
        self.pending: dict[int, _Input] = {}
        self.pending_immediate = 0
        self.inputs_bitmap = bytearray()
        #: the first input's sequence number: bit 0 of the bitmap (a run whose
        #: first files are gone starts far above 1)
        self.inputs_base: int | None = None
        #: inputs too far from the base for the bitmap (damaged or crafted numbers)
        self.inputs_far: set[int] = set()
        self.last_delivery: dict[str, int] = {}
        self.last_at: datetime | None = None
        self.records = 0
        self.inputs = 0
        self.matched = 0
        self.excused: collections.Counter[str] = collections.Counter()
        self.divergences: list[tuple[int, int, dict[str, Any]]] = []
        self.cut = False
        self.clean_end = False
        #: address -> inputs with mail for it, while it has received nothing this run
        self.parked: dict[str, list[int]] = {}
        self.absent: set[str] = set()
        #: timeline lines of the deliveries handled since the replayer last took them
        self.out: list[Any] = []
        #: for each of ``out``, the position in its frame of the record that led to it (only when the
        #: replayer tells positions: ``Replayer.replay_positioned``)
        self.marks: list[int] | None = [] if replayer._positioned else None

    # -- inputs of replayed cores (a bitmap: a run can hold millions; _feed marks them) ---
    def _was_input(self, seq: int) -> bool:
        base = self.inputs_base
        if base is None:
            return False
        d = seq - base
        if 0 <= d < MAX_BITMAP_SPAN:
            i = d >> 3
            bm = self.inputs_bitmap
            return i < len(bm) and bool(bm[i] & (1 << (d & 7)))
        return seq in self.inputs_far

    # -- divergences ---------------------------------------------------------------------
    def _diverge(
        self,
        kind: str,
        address: str,
        inp: _Input | None,
        input_seq: int,
        detail: str,
        captured_seq: int | None = None,
        tenant: str = "",
    ) -> None:
        self.divergences.append(
            (
                input_seq,
                len(self.divergences),
                dict(
                    kind=kind,
                    address=address,
                    input_seq=input_seq,
                    input_at=inp.at if inp else None,
                    input_type=inp.type_name if inp else "",
                    input_where=inp.where if inp else "",
                    detail=detail,
                    captured_seq=captured_seq,
                    tenant=tenant or _tenant_of(address),
                ),
            )
        )

    # -- deliveries ----------------------------------------------------------------------
    def deliveries(self, records: list[Any], path: str, offset: int, start: int) -> bool:
        """A frame's captured deliveries, in order: each a decision to match, an input to feed, or both
        (in that order). True when the replay stops here (past ``--until``).

        A record of a lazy batch (``CaptureReader.batches(lazy=True)``) is
        decoded only if it is matched or fed; the others are counted, and
        what they tell of the addresses (which received mail, and when)
        taken, without their messages.
        """
        r = self.r
        until = r.until
        limit = until + max(self.timer_slack, UNTIL_GRACE) if until is not None else None
        seen = self.last_delivery
        known = self._known
        replayed_of = r._replayed
        was_input = self._was_input
        materialize = r._materialize
        out = self.out
        marks = self.marks
        checking = r._nobodys if r.checks_others is not None else None
        last = self.last_at
        cut = self.cut
        counted = 0
        stop = False
        index = -1
        order: Iterable[int] = range(len(records))
        columns = None
        if r.skips and until is None and not cut and len(records) > 1:
            order, columns = self._taken(records)
        done = 0  # records before this one are counted (those between the taken ones: by _passed)
        try:
            for i in order:
                rec = records[i]
                if i > done:
                    last = self._passed(columns, done, i, last)  # type: ignore[arg-type]
                    counted += i - done
                done = i + 1
                seq, at, sender, recipient, cause, message = rec
                if limit is not None and at > limit:
                    self.cut = cut = True  # decisions before --until had their time to be delivered
                    stop = True
                    break
                # A decision of a replayed core (or a timer one set), an input of one, or neither.
                if sender == CLOCK:
                    decision = was_input(cause)
                else:
                    decision = known.get(sender)
                    if decision is None:
                        decision = replayed_of(sender)
                    if cut and decision:
                        decision = was_input(cause)
                fed = known.get(recipient)
                if fed is None:
                    fed = replayed_of(recipient)
                if start >= 0:
                    index = start + i
                if (decision or fed) and type(message) is Raw:
                    rec = materialize(rec, path, offset, index)
                    if rec is None:
                        continue  # bad, and skipped (--skip-bad), as a whole read skips it
                elif checking is not None and type(message) is Raw and checking(sender, recipient):
                    if materialize(rec, path, offset, index) is None:
                        continue  # decoded to be checked only
                counted += 1
                if last is None or at > last:
                    last = at
                if recipient not in seen:
                    self._first_delivery(recipient)
                seen[recipient] = seq
                if decision:
                    if sender == CLOCK:
                        self._match_timer(rec)
                    else:
                        self._match_send(rec, sender)
                if fed:
                    if cut or (until is not None and at > until):
                        self.cut = cut = True
                    else:
                        self._feed(rec, path, offset, index)
                        if marks is not None and len(out) > len(marks):
                            marks.extend([i] * (len(out) - len(marks)))
                if cut and self.pending_immediate <= 0:
                    stop = True  # past --until, every decision before it accounted for
                    break
            else:
                if columns is not None and done < len(records):
                    last = self._passed(columns, done, len(records), last)
                    counted += len(records) - done
        finally:
            self.records += counted
            self.last_at = last
        return stop

    def _taken(self, records: list[Any]) -> tuple[list[int], list[tuple[Any, ...]]]:
        """The positions in a frame of the records a replayed core takes or makes (or a timer, which one
        may have set), and the frame's columns (seq, at, sender, recipient, ...).

        Found column by column in C: a replay of some cores only (``--tenant``)
        takes a few records of each frame, and the others only tell which
        address received mail and when (``_passed``).
        """
        columns = list(zip(*records))
        senders, recipients = columns[2], columns[3]
        known = self._known
        r = self.r
        addresses = set(senders).union(recipients)
        for address in addresses.difference(known):
            r._replayed(address)
        taken = itertools.compress(itertools.count(), map(operator.or_, map(known.__getitem__, senders),
                                                         map(known.__getitem__, recipients)))
        if r.checks_others is not None:
            anyone = r._anyone
            for address in addresses.difference(anyone):
                anyone[address] = r.checks_others(address)
            others = list(itertools.compress(itertools.count(), map(operator.not_, map(
                operator.or_, map(anyone.__getitem__, senders), map(anyone.__getitem__, recipients)))))
            if others:
                return sorted({*taken, *others, *(i for i, s in enumerate(senders) if s == CLOCK)}), columns
        if CLOCK not in senders:
            return list(taken), columns
        return sorted({*taken, *(i for i, s in enumerate(senders) if s == CLOCK)}), columns

    def _passed(self, columns: list[tuple[Any, ...]], a: int, b: int, last: datetime | None) -> datetime | None:
        """Records ``a`` to ``b`` of a frame, which no replayed core takes or makes: each recipient's
        last delivery noted (those receiving their first), the latest time returned."""
        seen = self.last_delivery
        if b - a <= SHORT_GAP:
            seqs, times, recipients = columns[0], columns[1], columns[3]
            for i in range(a, b):
                recipient, at = recipients[i], times[i]
                if recipient not in seen:
                    self._first_delivery(recipient)
                seen[recipient] = seqs[i]
                if last is None or at > last:
                    last = at
            return last
        recipients = columns[3][a:b]
        for first in set(recipients).difference(seen):
            self._first_delivery(first)
        seen.update(zip(recipients, columns[0][a:b]))
        latest = max(columns[1][a:b])
        return latest if last is None or latest > last else last

    def _match_send(self, rec: DeliveryRecord, sender: str) -> None:
        cause = rec[4]
        inp = self.pending.get(cause)
        recipient = rec[3]
        queue = inp.immediate.get(recipient) if inp is not None and inp.address == sender else None
        if not queue:
            known = self._was_input(cause)
            self._diverge(
                "extra" if known else "unexplained",
                sender,
                inp,
                cause,
                f"captured {sender} -> {recipient}: {describe.message(rec.message)}; "
                + ("the replay decides no such message" if known else "no replayed input of this core caused it"),
                rec.seq,
                _message_tenant(rec.message),
            )
            return
        expected = queue.pop(0)
        if type(expected) is _Excused:
            expected = expected.message
        self.pending_immediate -= 1
        if _same(expected, rec):
            self.matched += 1
        else:
            self._diverge(
                "changed",
                sender,
                inp,
                cause,
                f"to {recipient}: {describe.differences(rec.message, expected)}",
                rec.seq,
                _message_tenant(rec.message),
            )
        if not queue:
            immediate = inp.immediate  # type: ignore[union-attr]
            del immediate[recipient]
            if not immediate and not inp.timers:  # type: ignore[union-attr]
                del self.pending[cause]

    def _timely(self, due: datetime, fired: datetime) -> bool:
        return due <= fired <= due + self.timer_slack if self.timer_slack else fired == due

    def _match_timer(self, rec: DeliveryRecord) -> None:
        inp = self.pending.get(rec.cause)
        same_to = [x for x in inp.timers if x.to == rec.recipient] if inp is not None else []
        for x in same_to:
            if _same(x.message, rec) and self._timely(x.at, rec.at):  # type: ignore[arg-type]
                inp.timers.remove(x)  # type: ignore[union-attr]
                self.matched += 1
                self._forget_if_done(inp)  # type: ignore[arg-type]
                return
        address = inp.address if inp is not None else "?"
        if same_to:
            x = same_to[0]
            inp.timers.remove(x)  # type: ignore[union-attr]
            changes = describe.differences(rec.message, x.message) if not _same(x.message, rec) else describe.message(rec.message)
            self._diverge(
                "changed",
                address,
                inp,
                rec.cause,
                f"timer to {rec.recipient}: fired at {describe.when(rec.at)}, replay sets it for "
                f"{describe.when(x.at)}; {changes}",
                rec.seq,
            )
            self._forget_if_done(inp)  # type: ignore[arg-type]
            return
        self._diverge(
            "extra",
            address,
            inp,
            rec.cause,
            f"captured timer to {rec.recipient} at {describe.when(rec.at)}: {describe.message(rec.message)}; "
            "the replay sets no such timer",
            rec.seq,
        )

    # -- addresses that receive nothing ----------------------------------------------------
    def _first_delivery(self, recipient: str) -> None:
        """``recipient`` exists after all: what was parked for it is expected as usual."""
        self.parked.pop(recipient, None)
        self.absent.discard(recipient)

    def _park(self, inp: _Input) -> None:
        """Remember inputs with mail for addresses that have received nothing yet this run.

        Mail to an address with no actor (a ledger that is not configured) is
        never delivered; past ``PARK_LIMIT`` such decisions (and
        ``PARK_PER_ADDRESS`` for every address that has received mail) the
        address is taken as absent, its mail excused at once instead of held
        to the end of the run, which keeps a long replay's memory bounded by
        the size of the sidecar replayed.
        """
        seen = self.last_delivery
        for to in list(inp.immediate):
            if to not in seen:
                parked = self.parked.get(to)
                if parked is None:
                    parked = self.parked[to] = []
                parked.append(inp.seq)
                if len(parked) > PARK_LIMIT + PARK_PER_ADDRESS * len(seen):
                    self._absent(to)

    def _absent(self, to: str) -> None:
        self.absent.add(to)
        for seq in self.parked.pop(to, ()):
            inp = self.pending.get(seq)
            q = inp.immediate.pop(to, None) if inp is not None else None
            if q:
                self.pending_immediate -= len(q)
                self.excused[NEVER_DELIVERED] += len(q)
                self._forget_if_done(inp)  # type: ignore[arg-type]

    def _forget_if_done(self, inp: _Input) -> None:
        if not inp.immediate and not inp.timers:
            self.pending.pop(inp.seq, None)

    def _feed(self, rec: DeliveryRecord, path: str, offset: int, index: int) -> None:
        seq, at, sender, address, _, message = rec
        self.inputs += 1
        base = self.inputs_base  # mark the input in the bitmap (``_was_input`` reads it)
        if base is None:
            base = self.inputs_base = seq
        d = seq - base
        if 0 <= d < MAX_BITMAP_SPAN:
            i = d >> 3
            bm = self.inputs_bitmap
            if i >= len(bm):
                bm.extend(bytes(i - len(bm) + 4096))
            bm[i] |= 1 << (d & 7)
        else:
            self.inputs_far.add(seq)
        opaque = type(rec) is OpaqueDelivery
        if sender != CLOCK and not opaque and not self._known.get(sender, False):
            cls = type(message)
            tell = _OUTSIDE_BY_TYPE.get(cls, _ASK)
            if tell is _ASK:
                tell = _OUTSIDE_BY_TYPE[cls] = describe.outside_describer(cls)
            if tell is not None:
                text = tell(message)
                if text is not None:
                    self.out.append(Step("input", at, seq, address, _tenant_of(address) or _message_tenant(message),
                                         f"{sender}: {text}"))
        if opaque:
            self._diverge(
                "unreplayable", address, _Input(rec, path, offset, index), seq,
                f"input {message} was not captured (not a registered message)",
            )
            return
        core = self.cores.get(address)
        if core is None or address in self.fresh:
            self.fresh.discard(address)
            core = self.cores[address] = self.r._build_core(address, self.config)
        try:
            effects = core.handle(message, at)
        except Exception as exc:
            # As the live shell does (actors.shell.CoreShell.on_receive, runtime.dispatch): the failure
            # is logged, the core's ``recover`` decisions are carried out and the actor goes on with
            # the same core. Whether the live run failed there too shows in the decisions that follow.
            self.out.append(Step("error", at, seq, address, _tenant_of(address), f"core raised {type(exc).__name__}: {exc}"))
            recover = getattr(core, "recover", None)
            effects = []
            if recover is not None:
                try:
                    effects = recover(message, at)
                except Exception as again:
                    self.out.append(Step("error", at, seq, address, _tenant_of(address),
                                         f"core could not recover: {type(again).__name__}: {again}"))
                    effects = []
        if effects:
            self._decided(rec, path, offset, index, effects)

    def _decided(self, rec: DeliveryRecord, path: str, offset: int, index: int, effects: list[Any]) -> None:
        """What a core decided on input ``rec``: held to be matched, and the timeline's lines.

        The held decisions are built as they come (a dict and a list only
        for an input that sends something, an ``_Input`` only for one that
        holds something), since a replay holds one per decision.
        """
        seq, at, _, address, _, _ = rec
        tenant = _TENANTS.get(address)
        if tenant is None:
            tenant = _tenant_of(address)
        retired = self.retired
        absent = self.absent
        out = self.out
        immediate: dict[str, list[Any]] | None = None
        timers: list[_Expect] | None = None
        held = 0
        for eff in effects:
            te = type(eff)
            if te is Send:
                to = eff.to
                if eff.at is None:
                    if to in absent:
                        self.excused[NEVER_DELIVERED] += 1
                        continue
                    m = eff.message
                    expected = _Excused(m, "recipient retired") if to in retired else m
                    if immediate is None:
                        immediate = {to: [expected]}
                    else:
                        q = immediate.get(to)
                        if q is None:
                            immediate[to] = [expected]
                        else:
                            q.append(expected)
                    held += 1
                    tell = _DECISION_BY_TYPE.get(type(m), _ASK)
                    if tell is _ASK:
                        tell = _DECISION_BY_TYPE[type(m)] = describe.decision_describer(type(m))
                    if tell is not None:
                        text = tell(m)
                        if text is not None:
                            out.append(Step("decision", at, seq, address, tenant, text))
                elif timers is None:
                    timers = [_Expect(to, eff.message, eff.at)]
                else:
                    timers.append(_Expect(to, eff.message, eff.at))
            elif te is Note:
                out.append(Step("note", at, seq, address, eff.tenant or tenant, eff.text))
            elif te is Spawn:
                to = tenant_address(eff.tenant)
                self.fresh.add(to)
                retired.pop(to, None)
                if eff.first:
                    if immediate is None:
                        immediate = {}
                    q = immediate.get(to)
                    if q is None:
                        q = immediate[to] = []
                    q.extend(eff.first)
                    held += len(eff.first)
            elif te is Retire:
                retired[tenant_address(eff.tenant)] = seq
            else:
                out.append(Step("error", at, seq, address, tenant, f"core returned an unknown effect {eff!r}"))
        if immediate or timers:
            self.pending_immediate += held
            inp = self.pending[seq] = _Input(rec, path, offset, index, immediate, timers or ())
            if immediate:
                seen = self.last_delivery
                for to in immediate:
                    if to not in seen:
                        self._park(inp)
                        break

    def opaque_to(self, rec: OpaqueDelivery) -> bool:
        return self.r._replayed(rec.recipient)

    # -- the end of a run ---------------------------------------------------------------
    def finish(self) -> list[Any]:
        until = self.r.until
        for seq in sorted(self.pending):
            inp = self.pending[seq]
            for to, q in inp.immediate.items():
                for expected, reason in map(_held, q):
                    if reason is None and self.last_delivery.get(to, 0) < inp.seq:
                        reason = NEVER_DELIVERED
                    if reason is None and self.cut:
                        reason = "past --until"
                    if reason:
                        self.excused[reason] += 1
                    else:
                        self._diverge(
                            "missing", inp.address, inp, inp.seq,
                            f"the replay sends {to}: {describe.message(expected)}; the capture has no such delivery",
                            tenant=_message_tenant(expected),
                        )
            for exp in inp.timers:
                due = exp.at
                stopped = self.retired.get(inp.address, -1) >= inp.seq
                if until is not None and due > until:  # type: ignore[operator]
                    self.excused["timer past --until"] += 1
                elif self.last_at is not None and due > self.last_at - self.timer_slack:  # type: ignore[operator]
                    self.excused["timer not yet due when the run ended"] += 1
                elif stopped:
                    self.excused["timer cancelled: its actor was stopped"] += 1
                else:
                    self._diverge(
                        "missing", inp.address, inp, inp.seq,
                        f"the replay sets a timer to {exp.to} at {describe.when(due)}: "
                        f"{describe.message(exp.message)}; it never fired in the capture",
                    )
        self.pending.clear()
        first: dict[str, int] = {}
        for input_seq, _, d in self.divergences:
            a = d["address"]
            if a not in first or input_seq < first[a]:
                first[a] = input_seq
        out: list[Any] = [
            Divergence(run_id=self.run_id, first_seq=first[d["address"]], **d)
            for _, _, d in sorted(self.divergences, key=lambda x: (x[0], x[1]))
        ]
        out.append(
            RunEnds(
                self.run_id,
                self.records,
                self.inputs,
                self.matched,
                tuple(sorted(self.excused.items())),
                len(self.divergences),
                self.clean_end,
                self.last_at,
            )
        )
        return out


class ReplayTotals:
    """What a replay counted, as ``run.py replay``'s summary reads it from a ``Replayer`` or a
    ``replay.parallel.ParallelReplayer`` (which may hand over to a ``Replayer``: ``take_totals``)."""

    COUNTS = ("runs", "records", "inputs", "matched", "excused", "divergences")

    def __init__(self) -> None:
        self.runs = 0
        self.records = 0
        self.inputs = 0
        self.matched = 0
        self.excused = 0
        self.divergences = 0
        #: the replay stopped at --until before the logs' end
        self.stopped_early = False

    def take_totals(self, other: "ReplayTotals") -> None:
        for name in self.COUNTS:
            setattr(self, name, getattr(other, name))
        self.stopped_early = other.stopped_early


class Replayer(ReplayTotals):
    """Replays capture entries (``capture.reader.CaptureReader``) and yields what it finds.

    ``config`` replaces every run's captured configuration; ``overrides``
    (``{section: {key: value}}``) change settings on top of it. ``until``
    stops feeding inputs after that clock time.
    """

    def __init__(
        self,
        build_core: Callable[[str, Config], Any] | None = None,
        *,
        config: Config | None = None,
        overrides: dict[str, dict[str, Any]] | None = None,
        until: datetime | None = None,
        timer_slack: timedelta | None = None,
        replayed: Callable[[str], bool] = is_replayed,
        lazy: bool | None = None,
        checks_others: Callable[[str], bool] | None = None,
        config_notices: Iterable[str] = (),
    ) -> None:
        """``config_notices``: what the loading of ``config`` left out of it (``replay.config.node_files_left_out``),
        told with every run's beginning as a captured configuration's notices are."""
        self._build_core = build_core or default_build_core
        #: Read the records' messages only where they are matched or fed (``CaptureReader.batches(lazy=True)``):
        #: by default when only some cores are replayed (``--tenant``), where most records are neither.
        self.lazy = replayed is not is_replayed if lazy is None else lazy
        #: Pass over the records no replayed core takes or makes a frame at a time, in C (``_Run._taken``):
        #: when only some cores are replayed, most records are such.
        self.skips = replayed is not is_replayed
        #: A lazy replay also decodes the records of which neither address is one of these (the
        #: cores of every replay there is), only so that a bad one stops it where a whole read would:
        #: one worker of a parallel replay does, so that every record is decoded by one
        #: (``replay.parallel``).
        self.checks_others = checks_others
        #: address -> ``checks_others(address)``
        self._anyone: dict[str, bool] = {}
        self._materialize: Callable[[Any, str, int, int], Any] = _decoded_already
        self.config = config
        self.config_notices = tuple(config_notices)
        self.overrides = overrides or {}
        self.until = until
        self.timer_slack = timer_slack
        self._replayed_fn = replayed
        self._replayed_cache: dict[str, bool] = {}
        ReplayTotals.__init__(self)
        #: the run being replayed (for the error path of ``_replay``)
        self._current: _Run | None = None
        #: where in the records the event being yielded comes from: (frame, record in it), the
        #: frames counted from 1 as they come (``replay_positioned``)
        self._positioned = False
        self._frame = 0
        self._where: tuple[int, int] = (0, -1)

    @property
    def records_so_far(self) -> int:
        """Records read so far, the run under way's included (``records`` counts ended runs)."""
        run = self._current
        return self.records + (run.records if run is not None else 0)

    def _replayed(self, address: str) -> bool:
        known = self._replayed_cache.get(address)
        if known is None:
            known = self._replayed_cache[address] = self._replayed_fn(address)
        return known

    def _nobodys(self, sender: str, recipient: str) -> bool:
        """Whether none of ``checks_others`` takes or makes a record from ``sender`` to ``recipient``
        (a timer counts as its recipient's: the clock is no core)."""
        anyone = self._anyone
        for address in (sender, recipient):
            if anyone.get(address) is None:
                anyone[address] = self.checks_others(address)  # type: ignore[misc]
        return not anyone[sender] and not anyone[recipient]

    def _slack(self, start: RunStart | None) -> timedelta:
        if self.timer_slack is not None:
            return self.timer_slack
        if start is None or start.clock == "ManualClock":
            return timedelta(0)
        return timedelta(seconds=REAL_TIMER_LATENESS_S * max(start.clock_speed, 1.0))

    def _begin(self, entry: Entry) -> tuple[_Run, RunBegins]:
        """The run ``entry`` opens: a start record, a file header (``FilePart``), or a delivery of a run
        with neither among the records given ("unknown")."""
        rec = entry.record
        start = rec if type(rec) is RunStart else None
        part = rec if type(rec) is FilePart else None
        run_id = rec.run_id if start is not None or part is not None else "unknown"
        notices: list[str] = []
        begins_late: list[str] = []
        if start is None and part is not None and part.start is not None:
            # The run's first files are gone (removed to keep the captures
            # under their size budget, or not given), or its start record is
            # damaged: every file's header repeats its start, configuration
            # included.
            start = part.start
            if part.part == 0:
                begins_late.append(f"run {run_id}: its start record could not be read; its file header's copy is used")
            else:
                begins_late.append(f"run {run_id} begins at part {part.part}: its earlier files are not among those given")
        if self.config is not None:
            config = self.config
            if self.overrides:
                given = config
                config, notices = replay_config(effective_config(given), self.overrides, source=given.source,
                                                origin="configured")
                config = replace(config, source=given.source)  # rebuilt from its values: still that file's
            notices[:0] = (f"replaying with the configuration from {config.source}, not the captured one",
                           *self.config_notices)
        elif start is not None:
            config, notices = replay_config(start.config, self.overrides, source=entry.where())
        else:
            raise ReplayError(
                f"{entry.where()}: run {run_id} has no start record among the files given (its first file "
                "is missing): give that file, or pass --config to replay it with a configuration of your choice"
            )
        run = _Run(self, run_id, config, self._slack(start))
        self.runs += 1
        begins = RunBegins(
            run_id,
            start.started_at if start else None,
            start.version if start else "unknown",
            f"{start.clock} x{start.clock_speed:g}" if start else "unknown",
            entry.where(),
            tuple(begins_late + notices),
        )
        return run, begins

    def _end(self, run: _Run) -> list[Any]:
        out = run.finish()
        self.divergences += len(run.divergences)
        self.records += run.records
        self.inputs += run.inputs
        self.matched += run.matched
        self.excused += sum(run.excused.values())
        return out

    def replay(self, entries: Iterable[Entry]) -> Iterator[Any]:
        with _collect_less():
            yield from self._replay(entries)

    def replay_positioned(self, entries: Iterable[Entry]) -> Iterator[tuple[tuple[int, int], Any]]:
        """``replay``'s events, each with where it comes from: (frame, record).

        Frames are counted from 1 as the records come; the record is its
        position in the frame (-1: before the frame's deliveries, where a
        run begins). Replays of the same records with different cores
        (``replay.parallel``) number the same frames alike, so their events
        merge into the order one replay of every core yields them. A run's
        beginning and end fall at the same position in each (they come from
        the records, not the cores).
        """
        self._positioned = True
        for event in self.replay(entries):
            yield self._where, event

    def _replay(self, entries: Iterable[Entry]) -> Iterator[Any]:
        self._current = None
        try:
            yield from self._replay_runs(entries)
        except CaptureError:
            # A bad record stops the replay: what the run showed up to it is
            # still reported (its divergences, its counts), then the error.
            self._where = (self._frame + 1, -1)
            if self._current is not None:
                yield from self._end_run(self._current)
            raise

    def _end_run(self, run: _Run) -> Iterator[Any]:
        self._current = None
        yield from self._end(run)

    def _next_run(self, old: _Run | None, entry: Entry) -> Iterator[Any]:
        """End ``old`` (if any) and begin the run ``entry`` opens; yields their events, returns the new run."""
        if old is not None:
            yield from self._end_run(old)
        run, begins = self._begin(entry)
        self._current = run
        yield begins
        return run

    def _replay_runs(self, entries: Iterable[Entry]) -> Iterator[Any]:
        run: _Run | None = None
        #: a run's first file, whose start record should come next (--skip-bad may have skipped it)
        first_part: Entry | None = None
        self._materialize = getattr(entries, "materialize", _decoded_already)
        self._frame = 0
        for path, offset, records, start in _batches(entries, self.lazy):
            self._frame = frame = self._frame + 1
            if not records:
                continue
            t = type(records[0])
            if t is DeliveryRecord or t is OpaqueDelivery:  # a frame of deliveries (a header comes alone)
                self._where = (frame, -1)
                rec = records[0]
                if first_part is not None:
                    # Its start record was skipped: the run begins from its file header.
                    run = yield from self._next_run(run, first_part)
                    first_part = None
                if run is None:
                    run = yield from self._next_run(None, Entry(path, offset, rec, start))
                stop = run.deliveries(records, path, offset, start)
                if run.out:
                    out, run.out = run.out, []
                    if run.marks is None:
                        yield from out
                    else:
                        marks, run.marks = run.marks, []
                        marks.extend([len(records)] * (len(out) - len(marks)))  # none: each is a fed record's
                        for i, step in zip(marks, out):
                            self._where = (frame, i)
                            yield step
                if stop:
                    self.stopped_early = True
                    break
                continue
            index = start
            for j, rec in enumerate(records):
                self._where = (frame, j)
                t = type(rec)
                if t is RunStart:
                    first_part = None
                    run = yield from self._next_run(run, Entry(path, offset, rec, index))
                elif t is FilePart:
                    if rec.part == 0:
                        first_part = Entry(path, offset, rec, index) if rec.start is not None else None
                    elif run is None or run.run_id != rec.run_id:
                        begin = Entry(path, offset, rec, index)
                        if first_part is not None and first_part.record.run_id == rec.run_id:
                            begin = first_part  # its first file held no delivery: the run begins there
                        first_part = None
                        run = yield from self._next_run(run, begin)
                elif t is RunEnd:
                    if (first_part is not None and first_part.record.run_id == rec.run_id
                            and (run is None or run.run_id != rec.run_id)):
                        # A run that delivered nothing, its start record skipped: it
                        # begins (from its file header) only to end here.
                        run = yield from self._next_run(run, first_part)
                    first_part = None
                    if run is not None:
                        # Another run's end (the one being replayed crashed) is not this one's clean stop.
                        run.clean_end = run.run_id in (rec.run_id, "unknown")
                        yield from self._end_run(run)
                        run = None
                if index >= 0:
                    index += 1
        self._where = (self._frame + 1, -1)
        if run is not None:
            yield from self._end_run(run)


def _decoded_already(record: Any, path: str, offset: int, index: int) -> Any:
    """Records that are not of a lazy batch come decoded."""
    return record


def _batches(entries: Iterable[Entry], lazy: bool = False) -> Iterable[Batch]:
    """A reader's records frame by frame (``CaptureReader.batches``); other entries grouped the same way,
    consecutive records of one frame together."""
    batches = getattr(entries, "batches", None)
    if batches is not None:
        return batches(lazy=lazy) if lazy else batches()  # type: ignore[no-any-return]
    return _grouped(entries)


def _grouped(entries: Iterable[Entry]) -> Iterator[Batch]:
    batch: list[Any] = []
    path, offset, start, nxt = "", -1, -1, -1
    for e in entries:
        if batch and e.index == nxt and e.index >= 0 and e.offset == offset and e.path == path:
            batch.append(e.record)
            nxt += 1
            continue
        if batch:
            yield (path, offset, batch, start)
        batch = [e.record]
        path, offset, start, nxt = e.path, e.offset, e.index, e.index + 1
    if batch:
        yield (path, offset, batch, start)
