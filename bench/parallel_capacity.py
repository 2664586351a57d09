"""What this machine's cores give two processes at once: the yardstick for a replay in two workers.

A virtual machine's two cores are not always two cores' worth: on one
(2026-12-02, two vCPUs) the same pure-Python loop took 0.87 CPU seconds
alone and 0.87 and 1.42 with a second copy beside it, so two processes did
1.3 times one's work, not 2. A replay's two workers can do no better than
that, whatever the replay does. ``speedup()`` measures it in the run that
reports the workers, so that their figure is read against it:

    python bench/parallel_capacity.py

The loop allocates nothing and reads no file: what it measures is the
processor, not the replay's memory or disk.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time

__all__ = ["speedup", "capacity_line"]

#: Iterations of the loop: about 0.3 s of one core on the machines of 2026.
LOOP = 6_000_000


def _spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def _timed_wall(processes: int) -> float:
    context = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else multiprocessing
    workers = [context.Process(target=_spin, args=(LOOP,)) for _ in range(processes)]
    started = time.perf_counter()
    for p in workers:
        p.start()
    for p in workers:
        p.join()
    return time.perf_counter() - started


def speedup(rounds: int = 3) -> float:
    """Two processes' work per wall second over one's (2.0: two full cores), the median of ``rounds``
    pairs of runs, one process then two."""
    ratios = []
    for _ in range(rounds):
        one = _timed_wall(1)
        two = _timed_wall(2)
        ratios.append(2 * one / two)
    return statistics.median(ratios)


def capacity_line(rounds: int = 3) -> str:
    """The line a bench prints beside its two-worker replay: ``speedup()``, measured now."""
    return (f"this machine's two cores, in the same run: two processes at once did {speedup(rounds):.2f}x one's "
            "work (bench/parallel_capacity.py; 2.00x: two full cores), the most two workers can give")


if __name__ == "__main__":
    print(capacity_line(5))
