"""How every command of ``run.py`` fails: one line on stderr, a known exit status, no traceback.

An operator reads the error, not the program: what was wrong, with which
input (file, setting, flag), and what would be right. Each part's own
errors already say that (``ConfigError``, ``LedgerError``, ...); this module
is how they reach the terminal:

- ``Parser``: argparse whose errors are one line naming the flag (argparse
  itself prints the whole usage first);
- ``run_guarded``: runs a command, turns the errors it is told to expect
  into ``error: ...`` and ``EXIT_ERROR``; anything else is a bug, reported
  as one line too but with ``EXIT_INTERNAL``, so that a test (or a script)
  can tell a refused input from a crash;
- ``closed_output_guard``: a reader that goes away (``| head``) ends the
  output, not the command: what the command was doing (a tick writing the
  books) finishes, its exit status stands, and nothing is printed about it.

Here, at the bottom, because the ledger's and the replay's commands use it
as well as the wiring.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterator, NoReturn

from runtime.key_material import NOT_SHOWN, looks_like_key, redacted

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "UsageError",
    "Parser",
    "error_line",
    "print_error",
    "run_guarded",
    "closed_output_guard",
]

#: A refused input or a command that could not be done (the message says why).
EXIT_ERROR = 2
#: A bug: an error nobody expected. Distinct from EXIT_ERROR so it is never mistaken for bad input.
EXIT_INTERNAL = 70
#: Stopped by Ctrl-C.
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line that cannot be run; the message names the argument and what it takes."""


def error_line(message: object) -> str:
    """``error: ...`` on one line."""
    text = " ".join(str(message).split())
    return f"error: {text}"


def print_error(message: object, stream: IO[str] | None = None) -> int:
    """Print ``error_line(message)`` to stderr; returns ``EXIT_ERROR``."""
    (stream or sys.stderr).write(error_line(message) + "\n")
    return EXIT_ERROR


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: the command, the flag, what it takes."""

    def error(self, message: str) -> NoReturn:
        # argparse quotes the offending value as typed: a mnemonic pasted into the wrong flag stays unshown.
        sys.stderr.write(error_line(redacted(f"{self.prog}: {message} (see {self.prog} --help)")) + "\n")
        raise SystemExit(EXIT_ERROR)


def run_guarded(command: Callable[[], int], expected: tuple[type[BaseException], ...]) -> int:
    """``command()``'s status; an ``expected`` error or a ``UsageError`` as one line and ``EXIT_ERROR``."""
    try:
        return command()
    except SystemExit as exc:  # argparse: --help (0), or its one-line error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR if exc.code else 0
    except KeyboardInterrupt:
        sys.stderr.write("stopped (Ctrl-C)\n")
        return EXIT_INTERRUPTED
    except (UsageError, *expected) as exc:
        return print_error(exc)
    except Exception as exc:  # a bug: still one line, never a traceback, never key material
        text = f"{type(exc).__name__}: {exc}"
        if looks_like_key(text):
            text = f"{type(exc).__name__} {NOT_SHOWN}"
        print_error(f"internal error, a bug in leasewarden: {text}")
        return EXIT_INTERNAL


class _ClosedOutputGuard:
    """Writes to ``stream`` until its reader goes; after that, writes are dropped."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        # What the stream still buffers is flushed at exit: send it nowhere,
        # or the interpreter reports the broken pipe on its way out.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass

    def isatty(self) -> bool:
        return not self.reader_gone and bool(getattr(self.stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self.stream.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def closed_output_guard() -> Iterator[None]:
    """``sys.stdout`` guarded for the duration (see ``_ClosedOutputGuard``), then restored."""
    previous = sys.stdout
    guard = _ClosedOutputGuard(previous)
    sys.stdout = guard  # type: ignore[assignment]
    try:
        yield
    finally:
        guard.flush()
        sys.stdout = previous
