"""Replay across processes: the cores split between workers, what they find merged into one replay's order.

A replay's cost is mostly the decision cores, and each core's inputs come
from the capture, not from the other cores (``replay.engine``: a core is fed
the captured deliveries to it). So the cores can be replayed apart: each
worker process reads every frame of the logs and replays the cores it owns
(``owner``: the scheduler and the chain actor go to the first, each
tenant's monitor to one of them by a hash of its address), and the parent
merges what they yield. A worker decodes only the messages its cores take
or make, as ``--tenant`` does; the first also decodes those no core takes
or makes, so that every record is checked by one of them.

The merged events are those one replay of every core yields, in the same
order, so the output does not depend on how many workers there were:

- every worker numbers the same frames alike (``Replayer.replay_positioned``),
  so timeline lines merge by their record's position;
- a run's beginning comes from each worker at the same position and is
  shown once;
- a run's end gathers every worker's divergences (merged in the order of
  their inputs, as one replay sorts them) and sums their counts;
- a bad record (or a run that cannot be replayed) stops the worker that
  meets it, and the merge at the last event before it; the replay then
  goes on in one process from the start, the events already shown left
  out, and ends as one replay ends there (``ParallelReplayer.replay``);
- with ``--skip-bad`` every worker decodes every record, so that each
  skips the same records one replay would.

What one replay would do differently: an address that receives nothing for
a long time while mail for it piles up is taken as absent once the mail
held for it passes a limit (``engine.PARK_LIMIT``); a worker holds only its
own cores' mail, so it takes the address as absent later or never. Either
way that mail is excused as never delivered; only if the address then
receives mail after all does one replay report the late deliveries, and a
worker match them.

The workers are forked (the decision code, the configuration and the
capture's readers are already in memory; nothing is pickled on the way
in); where ``fork`` is not available a replay runs in one process.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
import zlib
from datetime import timedelta
from operator import itemgetter
from typing import Any, Callable, Iterator

from capture.errors import CaptureError
from capture.reader import CaptureReader, SkipCounts
from replay.engine import Divergence, ReplayError, Replayer, ReplayTotals, RunBegins, RunEnds, Step, is_replayed
from runtime.config import Config

__all__ = ["ParallelReplayer", "owner", "parallel_available", "jobs_for", "PARALLEL_FROM_BYTES"]

#: Captures smaller than this replay in one process by default: a worker
#: costs a fork and reads every frame again, which a short replay does not
#: win back (bench/replay_speed.py's 7 MB capture replayed in two workers no
#: faster than in one process; the day's 500 MB in 0.66 of the time).
PARALLEL_FROM_BYTES = 16 * 2**20

#: Events a worker gathers before sending them on (few, large messages
#: through the pipe), and the frames it reads at most between two sends (so
#: that the timeline and the progress bar move on while it finds little).
SEND_EVENTS = 2048
SEND_FRAMES = 32

#: How long a worker whose pipe has closed, with no outcome sent, is waited for to be gone (for
#: its exit status, which says why: a signal's number, or the status it exited with).
WORKER_GONE_S = 5.0

#: Share of the tenants' monitors (of 100) the first of two workers takes,
#: beside the scheduler and the chain actor. In a day of 10,000 tenants
#: (bench/replay_day.py) the scheduler's share of the cores' time is about
#: a fifth of the monitors' together; at 45 of 100 the first worker took
#: 12% longer than the second, at 40 the two took within 2% of each other.
FIRST_WORKER_SHARE = 40


def parallel_available() -> bool:
    """Whether this system can fork workers (POSIX systems; not Windows)."""
    return "fork" in multiprocessing.get_all_start_methods()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def jobs_for(total_bytes: int) -> int:
    """How many workers a whole replay of ``total_bytes`` of logs uses by default: 2 on a machine
    with two cores or more, for logs from ``PARALLEL_FROM_BYTES``; 1 (this process) otherwise."""
    if total_bytes < PARALLEL_FROM_BYTES or not parallel_available():
        return 1
    return 2 if usable_cores() >= 2 else 1


def owner(address: str, jobs: int) -> int:
    """The worker (0 to ``jobs - 1``) that replays the core at ``address``.

    The scheduler and the chain actor go to the first; a tenant's monitor
    by a hash of its address (CRC-32: the same in every process, unlike
    ``hash``), the first worker taking ``FIRST_WORKER_SHARE`` of 100 of them
    when there are two.
    """
    if jobs <= 1 or not address.startswith("tenant/"):
        return 0
    h = zlib.crc32(address.encode())
    if jobs == 2:
        return 0 if h % 100 < FIRST_WORKER_SHARE else 1
    return h % jobs


def _owned_by(k: int, jobs: int) -> Callable[[str], bool]:
    def replayed(address: str) -> bool:
        return is_replayed(address) and owner(address, jobs) == k

    return replayed


#: After every record of a frame: the ``record`` part of a watermark's position.
_AFTER_FRAME = 2**62


class _Sender:
    """A worker's way to the parent: its reader, which sends what the worker has gathered every
    ``SEND_FRAMES`` frames (with how far it has read, and a watermark), and its gathered events."""

    def __init__(self, reader: CaptureReader, conn: Any, records: Callable[[], int]) -> None:
        self.reader = reader
        self.conn = conn
        self.records = records
        self.materialize = reader.materialize
        self.items: list[tuple[Any, Any]] = []

    def batches(self, lazy: bool = False) -> Iterator[Any]:
        # When the replay asks for frame n + 1, every event of frame n has been gathered.
        for n, batch in enumerate(self.reader.batches(lazy=lazy), 1):
            yield batch
            if n % SEND_FRAMES == 0:
                # A watermark (no event: ``None``), the worker's word that it has nothing more up
                # to here: it lets the merge go past frame n while this worker finds nothing to
                # show for many frames (the other workers' lines would wait for its next one).
                self.items.append(((n, _AFTER_FRAME, 0), None))
                self.send()

    def add(self, key: tuple[int, int, int], item: Any) -> None:
        self.items.append((key, item))
        if len(self.items) >= SEND_EVENTS:
            self.send()

    def send(self) -> None:
        self.conn.send(("events", self.items, (self.reader.bytes_done, self.records())))
        self.items = []


class _Stopped(Exception):
    """A worker met a bad record, or a run it cannot replay: ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _WorkerFailed(Exception):
    """A worker stopped with an error that is not the capture's or the replay's (a bug): its traceback."""


class ParallelReplayer(ReplayTotals):
    """Replays the logs at ``paths`` in ``jobs`` worker processes and yields what one ``Replayer`` would.

    The counts (``runs``, ``records``, ``inputs``, ``matched``, ``excused``,
    ``divergences``) are those of a ``Replayer`` once the replay is over;
    ``skipped`` is what the readers went past (``skip_bad``), and
    ``bytes_done`` of ``total_bytes`` how far the slowest worker has read.
    """

    def __init__(
        self,
        paths: list[str],
        jobs: int,
        build_core: Callable[[str, Config], Any] | None = None,
        *,
        config: Config | None = None,
        overrides: dict[str, dict[str, Any]] | None = None,
        timer_slack: timedelta | None = None,
        skip_bad: bool = False,
        probed: CaptureReader | None = None,
        config_notices: tuple[str, ...] = (),
    ) -> None:
        """``probed``: a reader of the same ``paths`` the caller has opened already (its files'
        headers checked, their sizes known) and not read: the parent then opens none of its own."""
        if jobs < 2:
            raise ValueError(f"a parallel replay needs 2 workers or more, not {jobs}")
        if not parallel_available():
            raise ReplayError("this system cannot fork replay workers: replay with --jobs 1")
        self.paths = list(paths)
        self.jobs = jobs
        self._build_core = build_core
        self._config = config
        self._config_notices = config_notices
        self._overrides = overrides
        self._timer_slack = timer_slack
        self.skip_bad = skip_bad
        self._probed = probed
        ReplayTotals.__init__(self)  # a parallel replay has no --until: it reads to the end
        self.skipped = SkipCounts()
        self.total_bytes = 0
        self._read: list[int] = [0] * jobs
        self._counted: list[int] = [0] * jobs
        #: each worker's CPU seconds, once it is done (how evenly ``owner`` shared the cores out)
        self.worker_seconds: list[float | None] = [None] * jobs
        #: why the replay went on in one process (a worker met a bad record), if it did
        self.fallback_reason: str | None = None
        self._fallback: CaptureReader | None = None
        self._serial_replayer: Replayer | None = None

    @property
    def bytes_done(self) -> int:
        if self._fallback is not None:
            return self._fallback.bytes_done
        return min(self._read)

    @property
    def records_so_far(self) -> int:
        """Records read so far (by the slowest worker; once the replay is over, ``records``)."""
        if self._serial_replayer is not None:
            return self._serial_replayer.records_so_far
        return max(self.records, min(self._counted))

    # -- a worker (in its own process) --------------------------------------------------------
    def _work(self, k: int, conn: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers; Ctrl-C is its to take
        # What the worker was forked with stays out of its collector's passes: walking it would
        # write to every page of it, each then copied from the parent's.
        gc.freeze()
        try:
            reader = CaptureReader(self.paths, skip_bad=self.skip_bad, file_parts=True)
            # Lazily, each worker decoding only its cores' records (and the first, those no core
            # takes or makes, so that every record is checked by one); with --skip-bad every record
            # is read by each, so that each skips what the others skip.
            lazy = not self.skip_bad
            replayer = Replayer(
                self._build_core, config=self._config, overrides=self._overrides, timer_slack=self._timer_slack,
                config_notices=self._config_notices, replayed=_owned_by(k, self.jobs), lazy=lazy,
                checks_others=is_replayed if lazy and k == 0 else None,
            )
            ending: list[Any] = []  # a run's divergences, sent with its end as one item
            last: tuple[int, int] | None = None
            n = 0  # events sent from one position: its timeline lines, or a run's end and the next's beginning
            sender = _Sender(reader, conn, lambda: replayer.records_so_far)
            for where, event in replayer.replay_positioned(sender):
                t = type(event)
                if t is Divergence:
                    ending.append(event)
                    continue
                if where == last:
                    n += 1
                else:
                    last, n = where, 0
                sender.add((*where, n), (ending, event) if t is RunEnds else event)
                if t is RunEnds:
                    ending = []
            sender.send()
            conn.send(("done", reader.skipped, time.process_time()))
        except (CaptureError, ReplayError) as exc:
            conn.send(("raised", None, f"{type(exc).__name__}: {exc}"))  # the parent replays in one process
        except BaseException:  # a bug: its traceback goes to the parent, which raises it
            conn.send(("failed", None, traceback.format_exc()))
        finally:
            conn.close()

    # -- the parent ---------------------------------------------------------------------------
    def replay(self) -> Iterator[Any]:
        """The events, merged.

        A worker that meets a bad record or a run it cannot replay stops,
        and so does the merge, at the last event before it. The replay then
        goes on in one process (``Replayer``) from the start, its first
        events (those already yielded) left out: it stops at that record as
        one replay does, and reports what one replay reports, its error
        included. A bad capture is read twice; a sound one once.
        """
        yielded = 0
        try:
            for event in self._parallel():
                yield event
                yielded += 1
        except _Stopped as stopped:
            self.fallback_reason = stopped.reason
            yield from self._serial(yielded)

    def _serial(self, skip: int) -> Iterator[Any]:
        replayer = self._serial_replayer = Replayer(self._build_core, config=self._config, overrides=self._overrides,
                                                    timer_slack=self._timer_slack, config_notices=self._config_notices)
        reader = self._fallback = CaptureReader(self.paths, skip_bad=self.skip_bad, file_parts=True)
        try:
            for event in itertools.islice(replayer.replay(reader), skip, None):
                yield event
        finally:
            self.take_totals(replayer)
            self.skipped = reader.skipped

    def _parallel(self) -> Iterator[Any]:
        # The files' own checks, here, before a worker is forked.
        reader = self._probed or CaptureReader(self.paths, skip_bad=self.skip_bad, file_parts=True)
        self.total_bytes = reader.total_bytes
        context = multiprocessing.get_context("fork")
        workers = []
        receivers: list[threading.Thread] = []
        outcomes: list[tuple[str, Any, Any] | None] = [None] * self.jobs
        try:
            for k in range(self.jobs):
                parent_end, child_end = context.Pipe(duplex=False)
                p = context.Process(target=self._work, args=(k, child_end), name=f"replay-worker-{k}", daemon=True)
                p.start()
                child_end.close()
                workers.append((p, parent_end))
            streams = []
            for k, (p, conn) in enumerate(workers):
                inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
                receiver = threading.Thread(target=self._receive, args=(conn, inbox), name=f"replay-worker-{k}-inbox",
                                            daemon=True)
                receivers.append(receiver)  # before it starts: a Ctrl-C between the two leaves it known
                receiver.start()
                streams.append(self._events(k, inbox, outcomes, p))
            yield from self._merged(streams)
            for p, _ in workers:
                p.join()
            self.skipped = outcomes[0][1]  # type: ignore[index]  # with --skip-bad every worker read every record
        finally:
            for p, _ in workers:
                if p.is_alive():
                    p.terminate()  # the replay was stopped early (or a worker failed): the others are not needed
                p.join()
            # A worker gone, its receiver reads the end of its pipe and returns. Not before: a pipe
            # closed under a receiver still reading it fails that read with a TypeError, not EOF.
            deadline = time.monotonic() + WORKER_GONE_S  # one wait for them all
            for k, (_, conn) in enumerate(workers):
                receiver = receivers[k] if k < len(receivers) else None
                if receiver is not None and receiver.ident is not None:  # started
                    receiver.join(max(0.0, deadline - time.monotonic()))
                    if receiver.is_alive():
                        continue  # left to the process's end rather than closed under its reader
                conn.close()

    @staticmethod
    def _receive(conn: Any, inbox: "queue.SimpleQueue[Any]") -> None:
        """Take a worker's messages as they come (a thread of the parent's for each worker).

        The merge waits for whichever worker is behind; a worker ahead must
        not wait for it in turn, on a full pipe, or the two would take turns
        instead of running side by side.
        """
        try:
            while True:
                message = conn.recv()
                inbox.put(message)
                if message[0] != "events":
                    return
        except (EOFError, OSError):
            inbox.put(None)  # it died (or the replay is being stopped): the missing outcome says so
        except BaseException:  # a message the parent cannot take: the replay stops saying so, not waiting on
            inbox.put(("failed", None, f"its messages could not be read here:\n{traceback.format_exc()}"))

    def _events(
        self, k: int, inbox: "queue.SimpleQueue[Any]", outcomes: list[Any], process: Any
    ) -> Iterator[tuple[Any, ...]]:
        """Worker ``k``'s events as it sends them; its outcome noted when it is done."""
        while True:
            message = inbox.get()
            if message is None:  # its pipe closed with no outcome: it died (killed, out of memory)
                process.join(WORKER_GONE_S)
                raise ReplayError(f"replay worker {k} stopped without a word (exit status {process.exitcode})")
            what, payload, extra = message
            if what == "events":
                self._read[k], self._counted[k] = extra
                yield from payload
                continue
            if what == "raised":
                raise _Stopped(f"worker {k}: {extra}")
            if what == "failed":
                raise _WorkerFailed(f"replay worker {k} failed:\n{extra}")
            outcomes[k] = (what, payload, extra)
            self.worker_seconds[k] = extra
            self._read[k] = self.total_bytes
            return

    def _merged(self, streams: list[Iterator[tuple[Any, ...]]]) -> Iterator[Any]:
        """The workers' events in one replay's order: timeline lines by position; each run's beginning
        once; each run's end with every worker's divergences and the sum of their counts."""
        jobs = self.jobs
        gathered: list[Any] = []
        at: Any = None
        for key, event in heapq.merge(*streams, key=itemgetter(0)):
            if type(event) is Step:
                yield event
                continue
            if event is None:
                continue  # a watermark
            # A run's beginning or end: each worker yields it at the same position, one after another.
            if gathered and key != at:
                raise ReplayError(f"replay workers disagree on where a run begins or ends: {at} and {key}")
            at = key
            gathered.append(event)
            if len(gathered) < jobs:
                continue
            if type(gathered[0]) is RunBegins:
                if any(g != gathered[0] for g in gathered):
                    raise ReplayError("replay workers disagree on how a run begins")
                self.runs += 1
                yield gathered[0]
            else:
                yield from self._ended(gathered)
            gathered = []
        if gathered:
            raise ReplayError("a replay worker stopped before the others had ended the run")

    def _ended(self, ends: list[tuple[list[Divergence], RunEnds]]) -> Iterator[Any]:
        divergences = list(heapq.merge(*(d for d, _ in ends), key=lambda d: d.input_seq))
        totals = [e for _, e in ends]
        first = totals[0]
        if any((e.run_id, e.records, e.clean_end, e.last_at) != (first.run_id, first.records, first.clean_end,
                                                               first.last_at) for e in totals):
            raise ReplayError(f"replay workers disagree on the records of run {first.run_id}")
        excused: dict[str, int] = {}
        for e in totals:
            for reason, n in e.excused:
                excused[reason] = excused.get(reason, 0) + n
        end = RunEnds(
            first.run_id,
            first.records,
            sum(e.inputs for e in totals),
            sum(e.matched for e in totals),
            tuple(sorted(excused.items())),
            len(divergences),
            first.clean_end,
            first.last_at,
        )
        self.records += end.records
        self.inputs += end.inputs
        self.matched += end.matched
        self.excused += sum(excused.values())
        self.divergences += end.divergences
        yield from divergences
        yield end
