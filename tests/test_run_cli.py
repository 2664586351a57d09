"""run.py as an operator uses it: the default run, check-config, the devnet, errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def config(tmp_path: Path, mode: str, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[chain]\nmode = "{mode}"\n[demo]\nspeed = 300.0\n[capture]\ndirectory = "{tmp_path / "cap"}"\n'
        f'[ledger]\npath = "{tmp_path / "books.sqlite"}"\n[metrics]\nlisten = "127.0.0.1:0"\n{extra}'
    )
    return path


def test_the_demo_runs_on_the_model_and_ends_with_a_summary(tmp_path: Path) -> None:
    out = run("--config", str(config(tmp_path, "model")), "--duration", "20m", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "cycle 1 (withdraw_once): withdraw, then credit check" in text
    assert "closed 2 lease(s) of tenant" in text  # a draining tenant, after its grace window
    # the failing tenant's first failed read is a warning; the ones after it are folded
    assert "WARNING: tenant manifest1" in text and "credit read failed (1 in a row); nothing closed" in text
    assert "withdraw cycles:" in text and "leases closed by us: 2" in text
    # the capture of that run replays with no divergence
    replay = run("--config", str(tmp_path / "config.toml"), "replay", str(tmp_path / "cap"), cwd=tmp_path)
    assert replay.returncode == 0, replay.stdout[-2000:]
    assert "no divergence" in replay.stdout


def test_the_demo_runs_on_the_devnet_through_grpc_and_the_websocket(tmp_path: Path) -> None:
    out = run("--config", str(config(tmp_path, "devnet")), "--duration", "15m", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "embedded devnet: gRPC grpc+http://127.0.0.1:" in out.stdout
    assert "withdrew" in out.stdout and "now watching tenant" in out.stdout  # a lease event over the websocket


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
