"""SIGINT and SIGTERM stop a long command while it runs, and its handlers go with it."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import run
from runtime.stop_signals import STOP_SIGNALS, stopped_by_signals


def _own_handler(*_: object) -> None:
    raise AssertionError("the caller's handler was called while the command held the signals")


@pytest.fixture
def callers_handlers():
    """The caller's own handlers installed, and what was there before put back after the test."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _own_handler)
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_stop_signal_sets_the_event_and_the_callers_handler_is_back_after(callers_handlers, signum) -> None:
    done = threading.Event()
    with stopped_by_signals(done):
        os.kill(os.getpid(), signum)
        assert done.wait(1), "the signal did not set the event"
    assert all(signal.getsignal(s) is _own_handler for s in STOP_SIGNALS)


def test_the_handlers_are_back_when_the_command_fails_inside(callers_handlers) -> None:
    with pytest.raises(RuntimeError):
        with stopped_by_signals(threading.Event()):
            raise RuntimeError("the sidecar failed to start")
    assert all(signal.getsignal(s) is _own_handler for s in STOP_SIGNALS)


def test_no_handler_is_installed_from_another_thread(callers_handlers) -> None:
    """Only the main thread may install one (signal.signal raises elsewhere): the command runs to its duration."""
    seen: list[object] = []

    def command() -> None:
        with stopped_by_signals(threading.Event()) as done:
            seen.append(done.is_set())
            seen.append({s: signal.getsignal(s) for s in STOP_SIGNALS})

    worker = threading.Thread(target=command)
    worker.start()
    worker.join(5)
    assert seen == [False, {s: _own_handler for s in STOP_SIGNALS}]


@pytest.fixture
def collector_put_back():
    """``run.py run`` tunes the collector and freezes what start-up built: put back for the tests after this one."""
    import gc

    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.fixture
def demo_config(tmp_path):
    """The shipped configuration, copied into ``tmp_path``: what the demo writes (its ledger, captures)
    lands there, not in the checkout, and it serves no metrics (a sidecar on this machine may hold 9464)."""
    from pathlib import Path

    shipped = (Path(run.__file__).resolve().parent / "config.toml").read_text()
    assert 'listen = "127.0.0.1:9464"' in shipped
    config = tmp_path / "config.toml"
    config.write_text(shipped.replace('listen = "127.0.0.1:9464"', 'listen = ""'))
    return str(config)


def test_an_in_process_run_leaves_the_callers_handlers(callers_handlers, collector_put_back, demo_config) -> None:
    """``run.py run`` on the embedded devnet, a minute of its clock (a second or two), called as a test calls it."""
    assert run.main(["--config", demo_config, "run", "--duration", "1m"]) == 0
    assert all(signal.getsignal(s) is _own_handler for s in STOP_SIGNALS)


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_stop_signal_while_the_summary_is_written_does_not_cut_it_off(
    callers_handlers, collector_put_back, demo_config, monkeypatch, capfd, signum
) -> None:
    """The operator's second Ctrl-C, or a late SIGTERM, after the sidecar has stopped: the run still ends
    with its summary and its own exit status (not an interrupt's, not the caller's handler)."""
    import sidecar.summary

    lines = sidecar.summary.RunSummary.lines

    def signalled_lines(self):
        os.kill(os.getpid(), signum)
        return lines(self)

    monkeypatch.setattr(sidecar.summary.RunSummary, "lines", signalled_lines)
    assert run.main(["--config", demo_config, "run", "--duration", "1m"]) == 0
    out, err = capfd.readouterr()
    assert "tenants watched at the end:" in out + err


#: Run as the program (``main()`` with no argv): the stop signal comes once the run has written its
#: last line (the log's close), as the process heads for its exit. The exit status must stand.
_LATE_SIGNAL = """
import os, signal, sys
sys.path.insert(0, {root!r})
import run
from logs.output import LogOutput
close = LogOutput.close
def close_then_signal(self):
    close(self)
    os.kill(os.getpid(), signal.{name})
LogOutput.close = close_then_signal
sys.argv = ["run.py", "--config", {config!r}, "run", "--duration", "1m"]
sys.exit(run.main())
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_stop_signal_as_the_program_exits_leaves_its_exit_status(tmp_path, demo_config, name) -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(run.__file__).resolve().parent)
    script = _LATE_SIGNAL.format(root=root, name=name, config=demo_config)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tenants watched at the end:" in done.stdout + done.stderr
