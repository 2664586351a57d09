"""run.py as an operator uses it: the default run, check-config, the devnet, errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def config(tmp_path: Path, mode: str, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[chain]\nmode = "{mode}"\n[demo]\nspeed = 300.0\n[capture]\ndirectory = "{tmp_path / "cap"}"\n'
        # The shipped config's short reservations: the draining tenants run dry within minutes.
        '[devnet]\nmin_lease_duration = "2m"\npending_timeout = "10m"\n'
        f'[ledger]\npath = "{tmp_path / "books.sqlite"}"\n[metrics]\nlisten = "127.0.0.1:0"\n{extra}'
    )
    return path


def test_the_demo_runs_on_the_model_and_ends_with_a_summary(tmp_path: Path) -> None:
    out = run("--config", str(config(tmp_path, "model")), "--duration", "20m", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "cycle 1 (withdraw_once): withdraw, then credit check" in text
    # A draining tenant's credit runs out: the rule that found it and its numbers are told, and
    # its leases end (by our withdraw, which the chain answers with an auto-close, or by our close).
    assert "credit gone for" in text and "by the reservation-aware rule (current chain)" in text
    assert "closed (credit exhausted)" in text or "closed 2 lease(s) of tenant" in text
    # the failing tenant's first failed read is a warning; the ones after it are folded
    assert "WARNING: tenant manifest1" in text and "in a row); nothing closed" in text
    assert "withdraw cycles:" in text and "leases closed by us:" in text
    # the capture of that run replays with no divergence
    replay = run("--config", str(tmp_path / "config.toml"), "replay", str(tmp_path / "cap"), cwd=tmp_path)
    assert replay.returncode == 0, replay.stdout[-2000:]
    assert "no divergence" in replay.stdout
    # and the demo ends with a statement: the month under way, so far
    statement = run("--config", str(tmp_path / "config.toml"), "statement", cwd=tmp_path)
    assert statement.returncode == 0, statement.stderr
    rows = statement.stdout.splitlines()
    assert len(rows) > 1 and all(",provisional,false,manifest1" in row for row in rows[1:])
    assert statement.stderr.startswith("provisional: ")


def test_the_demo_runs_on_the_devnet_through_grpc_and_the_websocket(tmp_path: Path) -> None:
    out = run("--config", str(config(tmp_path, "devnet")), "--duration", "15m", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "embedded devnet: gRPC grpc+http://127.0.0.1:" in out.stdout
    # Each on its own, with the whole output: a failure says which is missing and what happened instead.
    assert "withdrew" in out.stdout, out.stdout
    # Lease events came over the websocket. (Not "now watching tenant": the late tenant's lease
    # event has the lease read, and a cycle's listing can find the tenant first when that read is
    # slow or fails, as the devnet makes some reads do; either way the tenant is watched.)
    received = re.search(r"lease events received: (\d+)", out.stdout)
    assert received is not None and int(received.group(1)) > 0, out.stdout


def test_a_bad_value_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[scheduler]\nwithdraw_interval = "often"\n')
    for args in (["check-config"], ["--duration", "1m"]):
        out = run("--config", str(bad), *args, cwd=tmp_path)
        assert out.returncode == 2
        assert "[scheduler] withdraw_interval: expected a duration" in out.stderr


def test_check_config_prints_the_settings_in_force(tmp_path: Path) -> None:
    out = run("--config", str(ROOT / "config.toml"), "check-config", cwd=tmp_path)
    assert out.returncode == 0
    assert "withdraw_interval = '1h'" in out.stdout and "[scheduler]" in out.stdout


def test_help_explains_every_command(tmp_path: Path) -> None:
    out = run("--help", cwd=tmp_path)
    for command in ("run", "devnet", "check-config", "tick", "meter", "periods", "finalize", "statement", "replay"):
        assert f"\n    {command} " in out.stdout  # listed with its help line, not just named somewhere
    out = run("run", "--help", cwd=tmp_path)
    assert "--duration" in out.stdout and "--speed" in out.stdout


def test_a_run_with_its_config_elsewhere_writes_nothing_where_it_was_started(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    started_in = tmp_path / "checkout"
    started_in.mkdir()
    conf = elsewhere / "config.toml"
    conf.write_text('[chain]\nmode = "model"\n[demo]\nspeed = 1200.0\n[ledger]\npath = "books.sqlite"\n[capture]\ndirectory = "caps"\n')
    out = run("--config", str(conf), "--duration", "2m", cwd=started_in)
    assert out.returncode == 0, out.stderr
    assert list(started_in.iterdir()) == []
    assert any((elsewhere / "caps").iterdir()) and (elsewhere / "books-embedded.sqlite").exists()


def test_run_refuses_an_exposed_key_in_one_line_before_it_creates_a_ledger(tmp_path: Path) -> None:
    key = tmp_path / "provider.key"
    key.write_text("economy stock theory fatal elder harbor betray wasp final emotion task crumble\n")
    key.chmod(0o644)
    conf = tmp_path / "config.toml"
    conf.write_text(
        '[chain]\nmode = "node"\nchain_id = "manifest-1"\n[node]\nkey_file = "provider.key"\n'
        '[ledger]\npath = "books.sqlite"\n[capture]\nenabled = false\n'
    )
    out = run("--config", str(conf), "--duration", "1m", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "[node] key_file: key file" in out.stderr and "mode 0644" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout and "economy" not in out.stderr + out.stdout
    assert not (tmp_path / "books.sqlite").exists()
