"""A replay in worker processes (``replay.parallel``) yields what one replay in this process yields.

On the replay engine's toy system (``tests.test_replay_engine``): clean
runs, changed rules (divergences), missing and extra decisions, a core that
raises, bad records with and without ``--skip-bad``, a worker that dies,
and the command line's ``--jobs``. The real cores are compared the same way
in ``tests.test_replay_e2e``.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing.connection
import os
import pickle
import threading
import time

import pytest

from actors.effects import Send
from capture import CaptureReader, CorruptRecord
from capture.errors import NewerSchemaInCapture
from messages.credit import CreditRead
from messages.scheduler import TenantChecked
from replay.cli import _jobs, run_replay
from replay.engine import Divergence, ReplayError, Replayer, RunEnds, is_replayed
from runtime.clock import utc
from replay.parallel import PARALLEL_FROM_BYTES, ParallelReplayer, _WorkerFailed, jobs_for, owner
from tests.test_replay_engine import ToyTenant, _cut_tail, _spoil_a_message, live_run, toy_builder

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork"), reason="replay workers are forked"
)


def one_process(paths, build=None, skip_bad=False):
    reader = CaptureReader(paths, file_parts=True, skip_bad=skip_bad)
    replayer = Replayer(build or toy_builder())
    return [e.to_json() for e in replayer.replay(reader)], replayer, reader.skipped


def in_workers(paths, jobs=2, build=None, skip_bad=False):
    replayer = ParallelReplayer(paths, jobs, build or toy_builder(), skip_bad=skip_bad)
    return [e.to_json() for e in replayer.replay()], replayer


def totals(r):
    return (r.runs, r.records, r.inputs, r.matched, r.excused, r.divergences)


def test_the_toy_system_has_cores_in_each_of_two_workers():
    """What the comparisons below rest on: both workers replay something."""
    assert owner("scheduler", 2) == 0 and owner("chain", 2) == 0
    assert {owner("tenant/alice", 2), owner("tenant/bob", 2)} == {1}
    assert {owner(f"tenant/t{i}", 2) for i in range(50)} == {0, 1}
    assert {owner(f"tenant/t{i}", 3) for i in range(50)} == {0, 1, 2}
    assert all(owner(f"tenant/t{i}", 3) == owner(f"tenant/t{i}", 3) for i in range(50))  # the same every time


class Quiet(ToyTenant):
    def handle(self, m, now):
        out = super().handle(m, now)
        if isinstance(m, CreditRead) and m.cycle == 5 and self.tenant == "alice":
            return []  # a captured decision is not made any more: missing
        if isinstance(m, CreditRead) and m.cycle == 3 and self.tenant == "bob":
            return out + [Send("scheduler", TenantChecked(m.cycle, self.tenant))]  # one more: extra
        return out


class Raising(ToyTenant):
    def handle(self, m, now):
        if isinstance(m, CreditRead) and m.cycle == 4 and self.tenant == "alice":
            raise ValueError("a bug in the rule")
        return super().handle(m, now)


#: The toy runs below retire bob at this wake (mail to a retired monitor is excused).
RETIRE = 5


def builder_of(cls):
    base = toy_builder(retire_bob_at=RETIRE)

    def build(address, config):
        if address.startswith("tenant/"):
            return cls(address[len("tenant/"):])
        return base(address, config)

    return build


@pytest.mark.parametrize("jobs", [2, 3])
@pytest.mark.parametrize("build, diverges", [
    (toy_builder(retire_bob_at=RETIRE), False),
    (toy_builder(threshold=2, retire_bob_at=RETIRE), True),  # a changed rule
    (builder_of(Quiet), True),  # missing and extra decisions
    (builder_of(Raising), True),  # a core that raises
])
def test_workers_yield_what_one_replay_yields(tmp_path, jobs, build, diverges):
    paths = live_run(tmp_path, retire_bob_at=RETIRE)
    expected, alone, _ = one_process(paths, build)
    got, parallel = in_workers(paths, jobs, build)
    assert got == expected
    assert totals(parallel) == totals(alone) and (alone.divergences > 0) == diverges
    assert parallel.fallback_reason is None and all(s is not None for s in parallel.worker_seconds)
    assert sum(1 for e in got if e["type"] == "note") > 5  # a timeline, merged from the workers


def test_runs_one_after_another_merge_run_by_run(tmp_path):
    first = live_run(tmp_path / "a", run_id="first")
    second = live_run(tmp_path / "b", run_id="second", start=utc(2026, 3, 2))
    paths = first + second
    expected, alone, _ = one_process(paths, toy_builder(threshold=2))
    got, parallel = in_workers(paths, 2, toy_builder(threshold=2))
    assert got == expected and parallel.runs == alone.runs == 2
    assert [e["run"] for e in got if e["type"] == "run_end"] == ["first", "second"]


def test_a_bad_record_stops_the_replay_where_one_replay_stops_and_with_its_error(tmp_path):
    """A worker meets it; the replay goes on in one process, what was shown not shown again."""
    paths = live_run(tmp_path)
    _spoil_a_message(paths[0], "tenant/bob", "credit_read")  # bob is the second worker's
    reader = CaptureReader(paths, file_parts=True)
    alone = Replayer(toy_builder())
    expected = []
    with pytest.raises(CorruptRecord) as one:
        for e in alone.replay(reader):
            expected.append(e.to_json())
    parallel = ParallelReplayer(paths, 2, toy_builder())
    got = []
    with pytest.raises(CorruptRecord) as many:
        for e in parallel.replay():
            got.append(e.to_json())
    assert got == expected and str(many.value) == str(one.value)
    assert any(e["type"] == "run_end" for e in got)  # the run's end, before the error, as one replay reports it
    assert totals(parallel) == totals(alone)
    assert "CorruptRecord" in parallel.fallback_reason and "worker 1" in parallel.fallback_reason


def test_a_replay_stopped_early_closes_a_pipe_only_once_its_receiver_is_done(tmp_path, monkeypatch):
    """Stopped early (by one worker's error, or by its caller), the replay ends the workers, whose
    receiving threads may be reading their pipes still: a pipe closed under one failed its read with
    a TypeError, a traceback in a thread (seen in a CI run). Each receiver is made slow to return."""
    clean = live_run(tmp_path / "clean")
    spoiled = live_run(tmp_path / "spoiled")
    _spoil_a_message(spoiled[0], "tenant/bob", "credit_read")  # worker 1 stops the replay
    receiving_at_close = []  # for each worker's pipe closed: is its thread still receiving from it
    receivers = {}  # by the Connection itself (kept alive, so never mistaken for a later one)
    close = multiprocessing.connection.Connection.close

    def watched(conn):
        receiver = receivers.get(conn)
        if receiver is not None:
            receiving_at_close.append(receiver.is_alive())
        close(conn)

    monkeypatch.setattr(multiprocessing.connection.Connection, "close", watched)
    receive = ParallelReplayer._receive

    def slow_to_return(conn, inbox):  # a receiver the OS has not run again since its pipe ended
        receivers[conn] = threading.current_thread()
        receive(conn, inbox)
        time.sleep(0.05)

    monkeypatch.setattr(ParallelReplayer, "_receive", staticmethod(slow_to_return))
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    # by the worker's error; by the caller, at its first events (the parallel replay still going)
    for paths, stop_after in ((spoiled, None), (clean, 0), (clean, 2)):
        replayer = ParallelReplayer(paths, 2, toy_builder())
        replay = replayer.replay()
        try:
            for i, _ in enumerate(replay):
                if i == stop_after:
                    break
        except CorruptRecord:
            assert stop_after is None
        replay.close()
        assert (replayer.fallback_reason is None) == (stop_after is not None)
    assert receiving_at_close == [False] * 6
    assert raised == []


def test_a_message_the_parent_cannot_read_stops_the_replay_saying_so(tmp_path, monkeypatch):
    """A receiver that meets what it cannot take (here: unpickling fails) used to end its thread with
    a traceback and leave the merge waiting on its inbox for ever."""
    paths = live_run(tmp_path)
    recv = multiprocessing.connection.Connection.recv
    calls = []

    def failing_once(conn):
        calls.append(conn)
        if len(calls) == 2:
            raise pickle.UnpicklingError("truncated message")
        return recv(conn)

    monkeypatch.setattr(multiprocessing.connection.Connection, "recv", failing_once)
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    outcome = []

    def replay():
        try:
            list(ParallelReplayer(paths, 2, toy_builder()).replay())
        except Exception as exc:
            outcome.append(exc)

    t = threading.Thread(target=replay, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the replay waits for ever"
    assert len(outcome) == 1 and isinstance(outcome[0], _WorkerFailed), outcome
    assert "could not be read here" in str(outcome[0]) and "truncated message" in str(outcome[0])
    assert raised == []


def test_with_skip_bad_every_worker_skips_what_one_replay_skips(tmp_path):
    paths = live_run(tmp_path)
    _spoil_a_message(paths[0], "tenant/bob", "credit_read")
    expected, alone, skipped = one_process(paths, skip_bad=True)
    got, parallel = in_workers(paths, 2, skip_bad=True)
    assert got == expected and totals(parallel) == totals(alone)
    assert parallel.skipped.by_kind == skipped.by_kind == {"corrupt": 1}
    assert parallel.fallback_reason is None


def test_a_lazy_replay_checking_the_others_decodes_what_none_of_its_cores_takes(tmp_path):
    """The first worker decodes the records no worker replays, so that a bad one is found by someone."""
    paths = live_run(tmp_path)
    _spoil_a_message(paths[0], "tenant/bob", "credit_read")
    only_the_scheduler = lambda address: address == "scheduler"  # noqa: E731
    quietly = Replayer(toy_builder(), replayed=only_the_scheduler, lazy=True)
    assert [e for e in quietly.replay(CaptureReader(paths, file_parts=True)) if isinstance(e, Divergence)] == []
    checking = Replayer(toy_builder(), replayed=only_the_scheduler, lazy=True, checks_others=only_the_scheduler)
    with pytest.raises(CorruptRecord, match="record .* of the frame"):
        list(checking.replay(CaptureReader(paths, file_parts=True)))
    # Those of its own addresses it leaves to their replays: the scheduler's are sound.
    sound = Replayer(toy_builder(), replayed=only_the_scheduler, lazy=True, checks_others=is_replayed)
    ends = [e for e in sound.replay(CaptureReader(paths, file_parts=True)) if isinstance(e, RunEnds)]
    assert ends and ends[0].divergences == 0


def test_a_capture_error_crosses_from_a_worker_whole():
    error = NewerSchemaInCapture("a.lwcap", 120, "credit_read schema 9")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is NewerSchemaInCapture and str(copy) == str(error) and copy.offset == 120


def test_a_worker_that_dies_is_an_error_that_says_so(tmp_path):
    paths = live_run(tmp_path)
    base = toy_builder()

    def build(address, config):
        if address == "tenant/bob":
            os._exit(7)  # the worker process ends at once, as a kill would end it
        return base(address, config)

    with pytest.raises(ReplayError, match=r"replay worker 1 stopped without a word \(exit status 7\)"):
        list(ParallelReplayer(paths, 2, build).replay())


def test_a_bug_in_a_worker_is_raised_with_its_traceback(tmp_path):
    paths = live_run(tmp_path)
    base = toy_builder()

    def build(address, config):
        if address == "tenant/alice":
            raise RuntimeError("no core for alice today")
        return base(address, config)

    with pytest.raises(_WorkerFailed, match="(?s)worker 1 failed.*RuntimeError: no core for alice today"):
        list(ParallelReplayer(paths, 2, build).replay())


def _cli(paths, **extra):
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(logs=list(paths), until=None, tenant=None, step=False, json=True, skip_bad=False,
                              set=[], with_config=None, timer_slack=None, jobs=None)
    for k, v in extra.items():
        setattr(args, k, v)
    status = run_replay(args, None, stdout=out, stderr=err, build_core=toy_builder())
    return status, out.getvalue(), err.getvalue()


def test_the_command_prints_the_same_bytes_whatever_the_jobs(tmp_path):
    paths = live_run(tmp_path)
    one = _cli(paths, jobs=1)
    assert one[0] == 0 and one == _cli(paths, jobs=2) == _cli(paths, jobs=3)
    _spoil_a_message(paths[0], "tenant/bob", "credit_read")
    bad, bad_in_workers = _cli(paths, jobs=1), _cli(paths, jobs=2)
    assert bad[0] == 2 and bad[:2] == bad_in_workers[:2]
    # stderr (the JSON is on stdout) says why the replay took longer
    assert bad[2] == "" and bad_in_workers[2].startswith("replay: the worker processes stopped (worker 1: CorruptRecord: ")
    assert bad_in_workers[2].endswith("the replay went on in this process from the start, which is why it took longer\n")
    skipped = _cli(paths, jobs=1, skip_bad=True)  # bob misses a read: a divergence too
    assert skipped[0] == 3 and '(1 corrupt)' in skipped[1] and skipped == _cli(paths, jobs=2, skip_bad=True)


def test_jobs_replay_whole_logs_only(tmp_path):
    paths = live_run(tmp_path)
    status, out, err = _cli(paths, jobs=2, tenant="bob")
    assert status == 2 and out == "" and "--jobs 2: --tenant replay in this process; leave --jobs out" in err
    assert _cli(paths, tenant="bob")[0] == 0  # by default it does


def test_jobs_must_be_a_small_whole_number():
    assert _jobs("2") == 2
    for bad in ("0", "-1", "two", "65"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"--jobs must be a whole number from 1 to 64, not '{bad}'"):
            _jobs(bad)


def test_small_logs_replay_in_one_process_by_default():
    assert jobs_for(PARALLEL_FROM_BYTES - 1) == 1
    assert jobs_for(PARALLEL_FROM_BYTES) in (1, 2)  # 2 where the machine has two cores


def test_the_records_read_so_far_count_the_run_under_way(tmp_path):
    """What the progress bar shows: a replay of one run counts its records before the run ends."""
    paths = live_run(tmp_path, background=False)  # a frame a record: counted as they come
    alone = Replayer(toy_builder())
    seen = [(alone.records, alone.records_so_far) for e in alone.replay(CaptureReader(paths, file_parts=True))
            if e.__class__.__name__ == "Step"]
    assert seen[-1][0] == 0 and 0 < seen[0][1] < seen[-1][1] <= alone.records
    parallel = ParallelReplayer(paths, 2, toy_builder())
    list(parallel.replay())
    assert parallel.records_so_far == parallel.records == alone.records


def test_a_run_cut_by_a_crash_replays_alike_whatever_the_jobs(tmp_path):
    """Its file ends inside a record and holds no end record: reported, then skipped, as one process does."""
    first = live_run(tmp_path / "a", run_id="crashed", stop=False)
    _cut_tail(first[-1])
    paths = first + live_run(tmp_path / "b", run_id="after", start=utc(2026, 3, 2))
    for skip_bad in (False, True):
        one, two = _cli(paths, jobs=1, skip_bad=skip_bad), _cli(paths, jobs=2, skip_bad=skip_bad)
        assert one[0] & 2 and one[:2] == two[:2]
        assert ("TruncatedRecord" in two[2]) != skip_bad  # without --skip-bad the workers stopped there
    assert '"run":"after"' in one[1] and "(1 truncated)" in one[1]  # with --skip-bad: past it, to the next run
