"""Every error of run.py is one line on stderr with exit status 2; a closed stdout ends quietly."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

import run
from runtime.cli import EXIT_INTERNAL, closed_output_guard, run_guarded

ROOT = Path(__file__).resolve().parent.parent


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    return err


def test_an_unknown_command_is_named_as_one(capsys) -> None:
    code, out, err = main(capsys, "bogus")
    assert code == 2 and out == ""
    assert "unknown command 'bogus' (commands: run, devnet, check-config" in one_line(err)
    assert "unrecognized arguments" not in err


def test_config_without_its_value_says_so_instead_of_printing_the_help(capsys) -> None:
    for argv in (["--config"], ["check-config", "--config"], ["--config", "--duration", "1m"]):
        code, out, err = main(capsys, *argv)
        assert code == 2 and out == ""
        assert "--config needs a value: the path of a configuration file" in one_line(err)


@pytest.mark.parametrize("value, expected", [("0", "must be at least 0.001"), ("nan", "expected a finite number"), ("fast", "expected a number")])
def test_a_bad_speed_names_the_flag_not_the_config_file(capsys, value: str, expected: str) -> None:
    code, _, err = main(capsys, "--speed", value)
    assert code == 2
    line = one_line(err)
    assert "argument --speed: " + expected in line and "config.toml" not in line


def test_a_flags_error_is_one_line_naming_the_flag(capsys) -> None:
    code, _, err = main(capsys, "--config", str(ROOT / "config.toml"), "tick", "--now", "tomorrow")
    assert code == 2
    assert "run.py tick: argument --now: not a timestamp: 'tomorrow'" in one_line(err)
    code, _, err = main(capsys, "run", "--duration", "soon")
    assert code == 2 and "argument --duration: expected a duration" in one_line(err)


def test_help_still_exits_0(capsys) -> None:
    code, out, _ = main(capsys, "--help")
    assert code == 0 and "COMMAND" in out


def test_an_unexpected_error_is_one_line_with_its_own_status_and_no_key_material(capsys) -> None:
    def broken() -> int:
        raise TypeError("economy stock theory fatal elder harbor betray wasp final emotion task crumble")

    assert run_guarded(broken, ()) == EXIT_INTERNAL
    err = one_line(capsys.readouterr().err)
    assert "internal error" in err and "TypeError" in err and "economy" not in err


def test_output_to_a_reader_that_went_away_is_dropped_and_the_status_stands(monkeypatch) -> None:
    class GonePipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise io.UnsupportedOperation("no fd")

    monkeypatch.setattr(sys, "stdout", GonePipe())
    done = []
    with closed_output_guard():
        print("a line nobody reads")
        print("and another")
        done.append(True)
    assert done == [True]


@pytest.mark.parametrize("command", [["check-config"], ["periods"]])
def test_piping_into_a_reader_that_closes_ends_quietly(tmp_path: Path, command: list[str]) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text('[chain]\nmode = "node"\n[ledger]\npath = "books.sqlite"\n')
    if command == ["periods"]:
        from ledger.periods import Month
        from ledger.runs import Periods
        from ledger.store import Ledger
        from runtime.clock import utc

        lg = Ledger.open(tmp_path / "books.sqlite", "0b5e3f8e-8c1a-4b7e-9a53-2f6a1c9d4e10")
        Periods(lg).to_grace(Month(2026, 2), utc(2026, 3, 1))
        lg.close()
    else:
        conf.write_text('[chain]\nmode = "devnet"\n')
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), "--config", str(conf), *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    proc.stdout.close()  # the reader is gone before the first line is written: every write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert err == ""


def test_the_longest_duration_at_the_slowest_speed_is_a_wait_not_an_overflow() -> None:
    import threading
    from datetime import timedelta

    assert run._real_seconds(timedelta(days=3650), 0.001) is None  # 3.2e11 s: past what a wait takes
    assert run._real_seconds(timedelta(minutes=30), 60.0) == 30.0
    assert run._real_seconds(None, 60.0) is None
    threading.Event().wait(run._real_seconds(timedelta(seconds=1), 1e5))  # a real wait of 10 us


_MNEMONIC = "economy stock theory fatal elder harbor betray wasp final emotion task crumble"


@pytest.mark.parametrize("argv", [
    ["run", "--speed", _MNEMONIC],
    ["run", _MNEMONIC],
    ["replay", "--until", _MNEMONIC, "x.lwcap"],
    ["run", "--log-level", _MNEMONIC],
    ["replay", "--set", _MNEMONIC, "x.lwcap"],  # refused by replay's own parsing, not argparse
])
def test_a_mnemonic_typed_into_a_flag_is_not_echoed(capsys, argv) -> None:
    code = run.main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert "economy" not in err and "crumble" not in err, err


def a_capture_directory_that_cannot_be_made(tmp_path: Path) -> Path:
    """A config whose [capture] directory lies under a file: the sidecar's start fails on it."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        '[chain]\nmode = "model"\n[metrics]\nlisten = ""\n'
        f'[ledger]\npath = ""\n[capture]\ndirectory = "{blocker}/captures"\n'
    )
    return cfg


def test_a_capture_directory_that_cannot_be_made_is_an_operators_error_not_a_bug(tmp_path, capsys) -> None:
    cfg = a_capture_directory_that_cannot_be_made(tmp_path)
    code = run.main(["--config", str(cfg), "run", "--duration", "1s"])
    err = capsys.readouterr().err
    assert "internal error" not in err, err
    assert code == 2 and "captures" in err, err


def test_a_run_whose_start_fails_leaves_the_logging_as_it_found_it(tmp_path, capsys) -> None:
    """An in-process ``main()`` (tests, benches) must not leave its handler behind, writing to a closed stream at exit."""
    import logging

    root, own = logging.getLogger(), logging.getLogger("leasewarden")
    before = (root.handlers[:], root.level, own.level)
    cfg = a_capture_directory_that_cannot_be_made(tmp_path)
    assert run.main(["--config", str(cfg), "run", "--duration", "1s"]) == 2
    assert (root.handlers[:], root.level, own.level) == before


def test_a_replay_override_is_noted_without_a_key_or_a_urls_credentials() -> None:
    """``replay --set``: the notice (stdout) and the error quote what was typed, masked."""
    from replay.config import parse_assignment, replay_config
    from runtime.config import ConfigError, load_config

    captured = load_config().effective()
    _, notices = replay_config(captured, {"node": {"grpc_url": "grpc+http://alice:s3cr3tpass@grpc.example.net:9090",
                                                   "websocket_url": "ws://rpc.example.net/websocket?apikey=s3cr3tpass"}})
    text = "\n".join(notices)
    assert len(notices) == 2 and "s3cr3tpass" not in text, text
    assert "grpc+http://***@grpc.example.net:9090" in text
    for typed in ("grpc+http://alice:s3cr3tpass@grpc.example.net:9090", "grpc_url=alice:s3cr3tpass@grpc.example.net:443"):
        with pytest.raises(ConfigError) as refused:
            parse_assignment(typed)
        assert "s3cr3tpass" not in str(refused.value) and "expected section.key=value" in str(refused.value)
    # a value of the wrong kind, or with a control character in it, is quoted masked too
    for bad in (["ws://rpc.example.net/websocket?apikey=s3cr3tpass"], "ws://rpc.example.net/websocket?apikey=s3cr3tpass\t"):
        with pytest.raises(ConfigError) as refused:
            replay_config(captured, {"node": {"websocket_url": bad}})
        assert "s3cr3tpass" not in str(refused.value) and "websocket_url" in str(refused.value), refused.value
