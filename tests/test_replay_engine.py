"""The replay engine on small cores of its own: matching, excuses, divergences, until, errors.

The toy system is a scheduler that wakes on a timer and has chain-io read
every tenant's credit, and tenant monitors that count failed reads and ask
for an early re-check at a threshold (the rule issue 5 changes in its test).
It runs live on a manual clock and dispatcher with the capture tap, then is
replayed from the capture.
"""

from __future__ import annotations

import argparse
import gc
import io
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from actors.effects import Note, Retire, Send, Spawn
from actors.shell import CoreActor, start_actor
from capture import CaptureReader, CaptureWriter, CorruptRecord
from capture.format import FILE_HEADER, FRAME_HEADER
from capture.reader import read_records
from capture.settings import CaptureSettings
from messages.chain import ChainFailure, CreditAccount
from messages.chain_actor import CreditCall
from messages.coins import Coin
from messages.credit import CreditRead, CreditReadFailed, LeasesSynced
from messages.ledger import BillingTickDue
from messages.scheduler import StartSchedule, StopSchedule, TenantChecked, Wake
from replay.cli import run_replay
from replay.engine import REPLAY_GC_THRESHOLD, Divergence, ReplayError, Replayer, RunEnds, Step, replayed_for
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher, PooledActor
from runtime.router import Router, tenant_address

TENANTS = ("alice", "bob")
INTERVAL = timedelta(minutes=10)


class ToyScheduler:
    def __init__(self, retire_bob_at: int | None = None) -> None:
        self.retire_bob_at = retire_bob_at
        self.tenants = list(TENANTS)
        self.stopped = False

    def handle(self, m, now):
        if isinstance(m, StartSchedule):
            return [Spawn(t, (LeasesSynced(()),)) for t in self.tenants] + [
                Note("started"),
                Send("scheduler", Wake("interval", 1), at=now + INTERVAL),
            ]
        if isinstance(m, StopSchedule):
            self.stopped = True
            return [Note("stopped")]
        if isinstance(m, Wake):
            if self.stopped:
                return []
            out = [Note(f"wake {m.token}"), Send("ledger", BillingTickDue(now))]
            if m.token == self.retire_bob_at and "bob" in self.tenants:
                self.tenants.remove("bob")
                out += [Retire("bob"), Send(tenant_address("bob"), LeasesSynced(()))]
            out += [Send("chain-io", CreditCall(m.token, t)) for t in self.tenants]
            out.append(Send("scheduler", Wake("interval", m.token + 1), at=now + INTERVAL))
            return out
        if isinstance(m, TenantChecked):
            if m.recheck_at is not None:
                return [Note(f"{m.tenant} asks for a re-check at {m.recheck_at:%H:%M:%S}", m.tenant)]
            return []
        raise TypeError(type(m).__name__)


class ToyTenant:
    def __init__(self, tenant: str, threshold: int = 3) -> None:
        self.tenant = tenant
        self.threshold = threshold
        self.errs = 0

    def handle(self, m, now):
        if isinstance(m, LeasesSynced):
            return []
        if isinstance(m, CreditReadFailed):
            self.errs += 1
            recheck = now + timedelta(seconds=30) if self.errs >= self.threshold else None
            return [
                Note(f"{self.tenant}: {self.errs} failed read(s)", self.tenant),
                Send("scheduler", TenantChecked(m.cycle, self.tenant, recheck_at=recheck)),
            ]
        if isinstance(m, CreditRead):
            self.errs = 0
            return [Send("scheduler", TenantChecked(m.cycle, self.tenant))]
        raise TypeError(type(m).__name__)


def toy_builder(threshold: int = 3, retire_bob_at: int | None = None):
    def build(address, config):
        if address == "scheduler":
            return ToyScheduler(retire_bob_at)
        if address.startswith("tenant/"):
            return ToyTenant(address[len("tenant/"):], threshold)
        raise KeyError(address)

    return build


class ToyChainIO(PooledActor):
    """Answers credit reads: bob's fail on the cycles listed, the rest succeed."""

    def __init__(self, dispatcher, router, failing):
        super().__init__(dispatcher, "chain-io")
        self.router = router
        self.failing = failing

    def on_receive(self, m):
        to = tenant_address(m.tenant)
        if (m.tenant, m.cycle) in self.failing:
            self.router.tell(to, CreditReadFailed(m.cycle, ChainFailure("credit_account", "unavailable", transient=True)))
        else:
            self.router.tell(to, CreditRead(m.cycle, CreditAccount(m.tenant, (Coin("umfx", 1000 - m.cycle),))))


def live_run(tmp_path, *, cycles=6, failing=(("bob", 2), ("bob", 3), ("bob", 4)), retire_bob_at=None, stop=True,
             ledger=False, start=utc(2026, 3, 1), run_id="toy", quiet_start=timedelta(0), **capture):
    """Run the toy system live with capture; returns the capture's paths.

    ``quiet_start``: clock time before the first delivery; ``capture``: capture settings.
    """
    clock = ManualClock(start)
    writer = CaptureWriter(
        CaptureSettings(directory=str(tmp_path / "cap"), **capture), clock_now=clock.now, config={"scheduler": {}},
        run_id=run_id,
    ).open()
    dispatcher = ManualDispatcher(clock.now, tap=writer)
    router = Router()
    build = toy_builder(retire_bob_at=retire_bob_at)

    def lifecycle(effect):
        if isinstance(effect, Spawn):
            ref = start_actor(router, CoreActor, dispatcher, tenant_address(effect.tenant),
                              build(tenant_address(effect.tenant), None), router, clock)
            for m in effect.first:
                ref.tell(m)
        elif isinstance(effect, Retire):
            ref = router.remove(tenant_address(effect.tenant))
            if ref is not None:
                ref.stop(block=False)

    scheduler = start_actor(router, CoreActor, dispatcher, "scheduler", build("scheduler", None), router, clock, lifecycle)
    start_actor(router, ToyChainIO, dispatcher, router, set(failing))
    if ledger:
        class Sink(PooledActor):
            def on_receive(self, m):
                pass
        start_actor(router, Sink, dispatcher, "ledger")
    clock.advance(quiet_start)
    scheduler.tell(StartSchedule())
    dispatcher.run_until_idle()
    for _ in range(cycles):
        clock.advance(INTERVAL)
        dispatcher.run_until_idle()
    if stop:
        scheduler.tell(StopSchedule())
        dispatcher.run_until_idle()
    for address in router.addresses():
        router.get(address).stop(block=False)
    dispatcher.run_until_idle()
    writer.close()
    return writer.paths


def _cut_tail(path: str, nbytes: int = 5) -> None:
    """Cut the last bytes of a capture file (its end record): what a crash leaves."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-nbytes])


def _damage_run_start(path: str) -> None:
    """Flip a byte inside the start record, the file's second frame: its CRC no longer matches."""
    data = bytearray(Path(path).read_bytes())
    _, n, _ = FRAME_HEADER.unpack_from(data, FILE_HEADER.size)
    data[FILE_HEADER.size + FRAME_HEADER.size + n + FRAME_HEADER.size + 5] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def replay(paths, build=None, **kw):
    events = list(Replayer(build or toy_builder(), **kw).replay(CaptureReader(paths, file_parts=True)))
    return events, [e for e in events if isinstance(e, Divergence)], [e for e in events if isinstance(e, RunEnds)]


def input_seq(paths, recipient, message_type, nth):
    """The seq of the nth delivery of ``message_type`` to ``recipient`` in the capture."""
    found = [e.record.seq for e in CaptureReader(paths)
             if getattr(e.record, "recipient", None) == recipient and type(e.record.message).__name__ == message_type]
    return found[nth - 1]


def test_a_capture_replays_with_no_divergence(tmp_path):
    paths = live_run(tmp_path)
    events, divergences, [end] = replay(paths)
    assert divergences == []
    assert end.matched > 30 and end.inputs > 20 and end.clean_end
    # The timer set by the last wake was never due: excused, not a divergence.
    assert dict(end.excused)["timer not yet due when the run ended"] == 1
    notes = [e.text for e in events if isinstance(e, Step) and e.kind == "note"]
    assert "bob: 3 failed read(s)" in notes and "bob asks for a re-check at 00:40:30" in notes


def test_mail_to_an_absent_ledger_is_excused_but_a_present_one_must_receive_it(tmp_path):
    _, divergences, [end] = replay(live_run(tmp_path))
    assert divergences == [] and dict(end.excused)[
        "never delivered: nothing reached the recipient after the decision (run stopped, or no actor there)"
    ] == 6
    _, divergences, [end] = replay(live_run(tmp_path / "with-ledger", ledger=True))
    assert divergences == [] and len(end.excused) == 1  # only the last timer


def test_an_address_that_never_receives_is_taken_as_absent_to_bound_memory(tmp_path, monkeypatch):
    import replay.engine as engine

    monkeypatch.setattr(engine, "PARK_LIMIT", 2)
    replayer = Replayer(toy_builder())
    events = list(replayer.replay(CaptureReader(live_run(tmp_path), file_parts=True)))
    assert not [e for e in events if isinstance(e, Divergence)]
    [end] = [e for e in events if isinstance(e, RunEnds)]
    # Six ledger sends, none delivered: all excused, three of them as soon as the limit was passed.
    assert dict(end.excused)[engine.NEVER_DELIVERED] == 6


@pytest.mark.parametrize("per_address, diverges", [(0, True), (4, False)])
def test_a_ledger_whose_mail_comes_after_a_burst_is_not_taken_as_absent(tmp_path, monkeypatch, per_address, diverges):
    """The limit grows with the addresses that received mail: a first cycle's burst (a snapshot
    for the ledger from every monitor it spawns) is parked until the ledger's first delivery."""
    import replay.engine as engine

    monkeypatch.setattr(engine, "PARK_LIMIT", 0)
    monkeypatch.setattr(engine, "PARK_PER_ADDRESS", per_address)
    _, divergences, _ = replay(live_run(tmp_path, ledger=True))
    assert bool(divergences) is diverges


def test_a_replay_of_one_tenant_decodes_only_what_it_replays_and_finds_what_a_whole_read_finds(tmp_path):
    paths = live_run(tmp_path)
    build, focus = toy_builder(threshold=2), replayed_for("bob")
    assert Replayer(build, replayed=focus).lazy and not Replayer(build).lazy
    eager = list(Replayer(build, replayed=focus, lazy=False).replay(CaptureReader(paths, file_parts=True)))
    reader = CaptureReader(paths, file_parts=True)
    decoded, materialize = [], reader.materialize

    def counted(record, *where):
        if type(record.message) is msgspec.Raw:
            decoded.append(record)
        return materialize(record, *where)

    reader.materialize = counted
    lazy = list(Replayer(build, replayed=focus).replay(reader))
    assert lazy == eager and [e for e in lazy if isinstance(e, Divergence)]
    # Alice's own inputs and decisions (chain-io's reads, her replies) are read, never decoded.
    assert decoded and all(focus(r.sender) or focus(r.recipient) for r in decoded)
    alices = [r for r in read_records(paths) if "tenant/alice" in (getattr(r, "sender", ""), getattr(r, "recipient", ""))
              and not (focus(r.sender) or focus(r.recipient))]
    assert alices and not {r.seq for r in alices} & {r.seq for r in decoded}


def test_a_replay_of_one_tenant_passes_over_what_it_does_not_replay_a_frame_at_a_time_and_finds_the_same(
        tmp_path, monkeypatch):
    """The records no replayed core takes or makes are passed over in bulk (their recipients' last
    deliveries, the latest time, the count): the events are those of a replay that looks at each one."""
    import replay.engine as engine

    paths = live_run(tmp_path, ledger=True)
    build, focus = toy_builder(threshold=2), replayed_for("bob")
    passed = []
    real = engine._Run._passed
    monkeypatch.setattr(engine._Run, "_passed", lambda self, c, a, b, last: passed.append(b - a) or real(self, c, a, b, last))
    finished = []
    finish = engine._Run.finish
    monkeypatch.setattr(engine._Run, "finish", lambda self: finished.append(dict(self.last_delivery)) or finish(self))
    bulk = Replayer(build, replayed=focus)
    one_by_one = Replayer(build, replayed=focus)
    one_by_one.skips = False
    events = list(bulk.replay(CaptureReader(paths, file_parts=True)))
    deliveries = [r for r in read_records(paths) if hasattr(r, "recipient")]
    untaken = [r for r in deliveries if not (focus(r.sender) or focus(r.recipient) or r.sender == "clock")]
    assert bulk.skips and untaken and sum(passed) == len(untaken)
    seen = len(passed)
    assert events == list(one_by_one.replay(CaptureReader(paths, file_parts=True))) and len(passed) == seen
    [end] = [e for e in events if isinstance(e, RunEnds)]
    assert [e for e in events if isinstance(e, Divergence)] and end.records == len(deliveries)
    assert end.last_at == max(r.at for r in deliveries)
    # What decides whether a decision never delivered is excused: each address's last delivery, passed ones too.
    assert finished[0] == finished[1] and finished[0]["tenant/alice"] == max(
        r.seq for r in deliveries if r.recipient == "tenant/alice")


def _spoil_a_message(path, recipient, message_type):
    """Give the first ``message_type`` delivered to ``recipient`` a field of the wrong type, its frame's CRC made anew."""
    from capture.format import frame

    data = bytearray(Path(path).read_bytes())
    pos = FILE_HEADER.size
    while pos < len(data):
        _, n, _ = FRAME_HEADER.unpack_from(data, pos)
        body = bytes(data[pos + FRAME_HEADER.size: pos + FRAME_HEADER.size + n])
        value = msgspec.msgpack.decode(body)
        if value[0] == 0 and len(value) == 3:
            for row in value[1]:
                if row[3] == recipient and row[5][0] == message_type:
                    row[5][1] = "not a cycle number"
                    data[pos: pos + FRAME_HEADER.size + n] = frame(msgspec.msgpack.encode(value))
                    Path(path).write_bytes(bytes(data))
                    return
        pos += FRAME_HEADER.size + n
    raise AssertionError(f"no {message_type} to {recipient}")


def test_a_bad_message_a_lazy_replay_needs_is_skipped_as_a_whole_read_skips_it(tmp_path):
    """--skip-bad: counted once as skipped, not as a record replayed, whichever way the capture is read."""
    paths = live_run(tmp_path)
    _spoil_a_message(paths[0], "tenant/bob", "credit_read")
    ends = []
    for lazy in (False, True):
        reader = CaptureReader(paths, file_parts=True, skip_bad=True)
        events = list(Replayer(toy_builder(), replayed=replayed_for("bob"), lazy=lazy).replay(reader))
        ends.append(([e for e in events if isinstance(e, RunEnds)], reader.skipped.by_kind))
    assert ends[0] == ends[1] and ends[0][1] == {"corrupt": 1}
    with pytest.raises(CorruptRecord, match="record .* of the frame"):
        list(Replayer(toy_builder(), replayed=replayed_for("bob")).replay(CaptureReader(paths, file_parts=True)))


def test_changed_rule_diverges_at_the_input_that_first_led_to_it(tmp_path):
    paths = live_run(tmp_path)
    _, divergences, _ = replay(paths, toy_builder(threshold=2))
    second_failure = input_seq(paths, "tenant/bob", "CreditReadFailed", 2)
    first = divergences[0]
    assert first.kind == "changed" and first.address == "tenant/bob"
    assert first.input_seq == second_failure and first.first_seq == second_failure
    assert first.input_type == "CreditReadFailed" and "recheck_at: None -> 2026-03-01 00:30:30" in first.detail
    assert first.input_where == _where_of(paths, second_failure)
    # The scheduler replays its captured inputs: it diverges nowhere.
    assert {d.address for d in divergences} == {"tenant/bob"}


def _where_of(paths, seq):
    """``file:offset[index]`` of the record with ``seq``."""
    return next(e.where() for e in CaptureReader(paths) if getattr(e.record, "seq", None) == seq)


def test_missing_and_extra_decisions(tmp_path):
    paths = live_run(tmp_path)

    class Quiet(ToyTenant):
        def handle(self, m, now):
            out = super().handle(m, now)
            if isinstance(m, CreditRead) and m.cycle == 5 and self.tenant == "alice":
                return []  # the captured TenantChecked is not decided any more
            return out

    class Chatty(ToyTenant):
        def handle(self, m, now):
            out = super().handle(m, now)
            if isinstance(m, CreditRead) and m.cycle == 5 and self.tenant == "alice":
                out.append(Send("scheduler", TenantChecked(99, "alice")))
            return out

    def with_tenant(cls):
        base = toy_builder()
        return lambda a, c: cls(a[len("tenant/"):]) if a.startswith("tenant/") else base(a, c)

    _, divergences, _ = replay(paths, with_tenant(Quiet))
    [d] = divergences
    read = input_seq(paths, "tenant/alice", "CreditRead", 5)
    assert (d.kind, d.input_seq, d.address) == ("extra", read, "tenant/alice")
    assert "TenantChecked(cycle=5, tenant='alice')" in d.detail and "no such message" in d.detail
    _, divergences, _ = replay(paths, with_tenant(Chatty))
    [d] = divergences
    assert (d.kind, d.input_seq) == ("missing", read)
    assert "TenantChecked(cycle=99" in d.detail


def test_a_changed_timer_is_a_divergence(tmp_path):
    paths = live_run(tmp_path)

    class Slower(ToyScheduler):
        def handle(self, m, now):
            return [Send(e.to, e.message, at=e.at + timedelta(seconds=1)) if isinstance(e, Send) and e.at else e
                    for e in super().handle(m, now)]

    base = toy_builder()
    _, divergences, _ = replay(paths, lambda a, c: Slower() if a == "scheduler" else base(a, c))
    assert divergences and all(d.kind == "changed" and d.address == "scheduler" for d in divergences)
    assert "replay sets it for 2026-03-01 00:10:01" in divergences[0].detail
    assert divergences[0].input_seq == input_seq(paths, "scheduler", "StartSchedule", 1)


def test_mail_to_a_retired_tenant_is_excused(tmp_path):
    paths = live_run(tmp_path, retire_bob_at=3)
    _, divergences, [end] = replay(paths, toy_builder(retire_bob_at=3))
    assert divergences == []
    assert dict(end.excused)["recipient retired"] == 1


def test_until_stops_feeding_and_excuses_later_timers(tmp_path):
    paths = live_run(tmp_path)
    until = utc(2026, 3, 1, 0, 35)
    replayer = Replayer(toy_builder(), until=until)
    events = list(replayer.replay(CaptureReader(paths, file_parts=True)))
    assert not [e for e in events if isinstance(e, Divergence)]
    steps = [e for e in events if isinstance(e, Step)]
    assert max(s.at for s in steps) == utc(2026, 3, 1, 0, 30)  # wake 3 is the last input fed
    [end] = [e for e in events if isinstance(e, RunEnds)]
    # Wake 3 set wake 4 for 00:40, past --until: excused, and the rest of the log is not read.
    assert dict(end.excused)["timer past --until"] == 1
    assert replayer.stopped_early and not end.clean_end


def test_a_run_without_its_start_needs_a_configuration(tmp_path):
    paths = live_run(tmp_path)
    # Simulate a lost first file: a reader that drops the run's start and says it is part 1.
    from capture.format import FilePart, RunStart

    entries = []
    for e in CaptureReader(paths, file_parts=True):
        if isinstance(e.record, RunStart):
            continue
        if isinstance(e.record, FilePart):
            e.record = FilePart(e.record.run_id, e.record.run_started_at, 1, e.record.opened_at)
        entries.append(e)
    with pytest.raises(ReplayError, match="no start record"):
        list(Replayer(toy_builder()).replay(entries))
    from runtime.config import load_config

    events = list(Replayer(toy_builder(), config=load_config()).replay(entries))
    assert not [e for e in events if isinstance(e, Divergence)]


def test_a_core_that_raises_is_reported_as_an_error_step_and_its_decisions_as_divergences(tmp_path):
    paths = live_run(tmp_path)

    class Broken(ToyTenant):
        def handle(self, m, now):
            if isinstance(m, CreditReadFailed):
                raise ValueError("boom")
            return super().handle(m, now)

    base = toy_builder()
    events, divergences, _ = replay(paths, lambda a, c: Broken(a[7:]) if a == "tenant/bob" else base(a, c))
    errors = [e for e in events if isinstance(e, Step) and e.kind == "error"]
    assert errors[0].text == "core raised ValueError: boom"
    # The captured actor decided where today's code raises: each such decision is a divergence.
    assert divergences and {d.kind for d in divergences} <= {"extra", "changed"}  # extra: captured, not decided
    assert all(d.address == "tenant/bob" for d in divergences)


def _cli(paths, *extra, build=None, stdin=""):
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(
        logs=[str(p) for p in paths], until=None, tenant=None, step=False, json=False, skip_bad=False,
        set=[], with_config=None, timer_slack=None,
    )
    for key, value in extra:
        setattr(args, key, value)
    status = run_replay(args, None, stdout=out, stderr=err, stdin=io.StringIO(stdin), build_core=build or toy_builder())
    return status, out.getvalue(), err.getvalue()


def test_cli_output_is_identical_across_replays_and_says_no_divergence(tmp_path):
    paths = live_run(tmp_path)
    first = _cli(paths)
    assert first == _cli(paths)
    status, text, err = first
    assert status == 0 and err == ""
    assert "no divergence" in text and "bob: 3 failed read(s)" in text
    status, js, _ = _cli(paths, ("json", True))
    assert status == 0 and js == _cli(paths, ("json", True))[1]
    import json

    lines = [json.loads(line) for line in js.splitlines()]
    assert lines[0]["type"] == "run" and lines[-1]["type"] == "summary" and lines[-1]["divergences"] == 0


def test_cli_exit_status_and_tenant_filter(tmp_path):
    paths = live_run(tmp_path)
    status, text, _ = _cli(paths, build=toy_builder(threshold=2))
    assert status == 1 and "DIVERGENCE changed" in text
    status, text, _ = _cli(paths, ("tenant", "bob"))
    timeline = [line for line in text.splitlines() if line.startswith("2026")]
    assert status == 0 and "no line concerns" not in text
    assert len(timeline) == 7 and all("bob" in line for line in timeline)  # no "wake" lines of the scheduler's own
    status, text, _ = _cli(paths, ("tenant", "alicee"))  # a typo: nothing to show, and it says so
    assert status == 0 and "no line concerns tenant alicee in these logs" in text
    _, js, _ = _cli(paths, ("tenant", "alicee"), ("json", True))
    assert '"tenant":"alicee","tenant_lines":0' in js.splitlines()[-1]


def test_cli_skip_bad_counts_and_exit_status(tmp_path):
    paths = live_run(tmp_path)
    _cut_tail(paths[-1])  # the RunEnd record is cut
    status, text, err = _cli(paths)
    assert status == 2 and "truncated record" in err and f"{paths[-1]}: byte" in err
    status, text, err = _cli(paths, ("skip_bad", True))
    assert status == 2 and "skipped 1 unreadable frame(s) (their records uncounted)" in text and "1 truncated" in text
    assert "no clean stop recorded" in text


def test_a_replay_stopped_by_a_bad_record_still_reports_what_it_found_before(tmp_path):
    """Without --skip-bad a crash's partial record ends the replay: its divergences and counts stay."""
    paths = live_run(tmp_path)
    _cut_tail(paths[-1])  # the RunEnd record is cut
    status, text, err = _cli(paths, build=toy_builder(threshold=2))
    assert status == 3 and "truncated record" in err  # diverged, and bad logs
    assert "DIVERGENCE changed" in text and "== replayed 1 run(s), 46 records" in text


def test_skip_bad_past_a_damaged_start_record_begins_the_run_from_its_file_header(tmp_path):
    paths = live_run(tmp_path)
    _damage_run_start(paths[0])
    status, text, _ = _cli(paths, ("skip_bad", True))
    assert status == 2 and "its start record could not be read; its file header's copy is used" in text
    assert "== replayed 1 run(s), 46 records" in text and "no divergence" in text


def test_a_run_numbered_far_from_1_replays_with_a_small_bitmap(tmp_path):
    """A run whose first files are gone starts at a high sequence number: the bitmap starts there too."""
    from capture.format import DeliveryRecord
    from capture.reader import Entry

    shift = 10**12
    entries = []
    for e in CaptureReader(live_run(tmp_path), file_parts=True):
        r = e.record
        if type(r) is DeliveryRecord:
            r = r._replace(seq=r.seq + shift, cause=r.cause + shift if r.cause else 0)
        entries.append(Entry(e.path, e.offset, r, e.index))
    replayer = Replayer(toy_builder())
    runs = []
    original = replayer._end

    def end(run):  # type: ignore[no-untyped-def]
        runs.append(run)
        return original(run)

    replayer._end = end  # type: ignore[method-assign]
    events = list(replayer.replay(entries))
    assert not [e for e in events if isinstance(e, Divergence)] and replayer.matched > 20
    assert runs[0].inputs_base > shift and len(runs[0].inputs_bitmap) <= 8192


def test_a_run_whose_first_file_holds_only_a_damaged_start_record_is_begun_once(tmp_path):
    """Its first delivery came after max_file_age: part 0 holds the header and the start record alone."""
    one = live_run(tmp_path / "one", run_id="runone", cycles=3)
    two = live_run(tmp_path / "two", run_id="runtwo", cycles=3, start=utc(2026, 3, 1, 2),
                   quiet_start=timedelta(minutes=2), max_file_age=timedelta(minutes=1))
    assert len(two) >= 2 and not any(getattr(r, "seq", None) for r in read_records([two[0]]))
    _damage_run_start(two[0])
    status, text, _ = _cli(one + two, ("skip_bad", True))
    assert status == 2 and text.count("== run runtwo") == 1 and "== replayed 2 run(s)" in text
    assert "run runtwo: its start record could not be read; its file header's copy is used" in text


def test_a_crashed_run_is_not_given_the_clean_stop_of_an_empty_run_after_it(tmp_path):
    """Run one crashed; run two delivered nothing and its start record is damaged: two runs, one clean stop."""
    one = live_run(tmp_path / "one", run_id="runone", cycles=2)
    _cut_tail(one[-1])  # its end record is cut: a crash
    clock = ManualClock(utc(2026, 3, 1, 3))
    empty = CaptureWriter(CaptureSettings(directory=str(tmp_path / "two" / "cap")), clock_now=clock.now,
                          config={"scheduler": {}}, run_id="runtwo").open()
    empty.close()
    _damage_run_start(empty.paths[0])
    status, text, _ = _cli(one + empty.paths, ("skip_bad", True))
    ends = [line for line in text.splitlines() if line.startswith("-- run ")]
    assert len(ends) == 2 and "== replayed 2 run(s)" in text
    assert "no clean stop recorded" in ends[0] and "; clean stop;" in ends[1]


def test_cli_step_pauses_after_each_line(tmp_path):
    paths = live_run(tmp_path, cycles=1)
    status, text, err = _cli(paths, ("step", True), stdin="\n\nq\n")
    assert err.count("[step]") == 3
    assert "== stopped at your request (q)" in text and "== stopped:" not in text
    assert "error" not in err and status == 0  # a stop the user asked for is a clean exit


def test_cli_refuses_to_replay_nothing(tmp_path):
    empty = tmp_path / "captures"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a capture")
    status, text, err = _cli([empty])
    assert status == 2 and text == ""
    assert err == f"error: {empty}: no capture file (*.lwcap) in this folder; is [capture] directory another one, or was capture off ([capture] enabled)?\n"
    status, text, err = _cli([tmp_path / "gone.lwcap"])
    assert status == 2 and text == "" and "gone.lwcap: no such file or folder" in err and "no divergence" not in err


def test_the_collector_setting_is_raised_while_replays_run_and_restored_after(tmp_path):
    paths = live_run(tmp_path)
    before = gc.get_threshold()
    first = Replayer(toy_builder()).replay(CaptureReader(paths, file_parts=True))
    second = Replayer(toy_builder()).replay(CaptureReader(paths, file_parts=True))
    next(first)
    assert gc.get_threshold()[0] == max(before[0], REPLAY_GC_THRESHOLD)
    next(second)
    first.close()  # a consumer that stops early: the other replay still runs with it
    assert gc.get_threshold()[0] == max(before[0], REPLAY_GC_THRESHOLD)
    assert any(isinstance(e, RunEnds) for e in list(second))  # runs to its end
    assert gc.get_threshold() == before


def test_a_billing_tick_decision_has_a_timeline_line_and_other_decisions_none():
    from messages.ledger import BillingTickDue
    from messages.scheduler import TenantChecked
    from replay import describe

    tick = BillingTickDue(utc(2026, 3, 1))
    assert describe.decision(tick) == "billing tick: the ledger steps the billing months due at 2026-03-01 00:00:00"
    assert describe.decision_describer(TenantChecked) is None and describe.decision(TenantChecked(1, "t")) is None


def test_a_failure_the_live_actor_survived_replays_without_divergence(tmp_path, monkeypatch) -> None:
    """DESIGN "No actor dies of one message": the live shell survives a handler that raises
    (and applies ``recover``); replaying the same code must not report divergences for it."""
    import tests.test_replay_engine as toy
    from messages.credit import CreditReadFailed
    from replay.engine import Divergence, Replayer

    class Flaky(toy.ToyTenant):
        def handle(self, m, now):
            if isinstance(m, CreditReadFailed) and m.cycle == 2:
                raise ValueError("boom on cycle 2")
            return super().handle(m, now)

        def recover(self, m, now):
            return [toy.Send("scheduler", toy.TenantChecked(m.cycle, self.tenant))]

    monkeypatch.setattr(toy, "ToyTenant", Flaky)  # the live run and the replay run the same code
    paths = toy.live_run(tmp_path)
    events = list(Replayer(toy.toy_builder()).replay(CaptureReader(paths, file_parts=True)))
    divergences = [e for e in events if isinstance(e, Divergence)]
    assert divergences == [], [(d.kind, d.input_seq, d.detail) for d in divergences]
