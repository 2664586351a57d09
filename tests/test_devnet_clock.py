"""A sidecar in another process on an embedded devnet's accelerated clock (``[node] devnet_clock``).

For benchmarks and fault runs (``bench/fault_run.py``): the devnet writes its
clock to a file (``runtime.clock.ClockAnchor``), the sidecar reads it, and
both tell the same time. Off by default, refused outside node mode and for a
devnet of another chain id.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from runtime.clock import ClockAnchor, RealClock, read_clock_anchor, utc, write_clock_anchor
from runtime.config import ConfigError, load_config
from sidecar.runner import sidecar_clock


def anchor(**changes) -> ClockAnchor:
    fields = dict(origin=utc(2026, 3, 1), origin_unix=time.time() - 10, speed=300.0, chain_id="leasewarden-devnet",
                  block_time=timedelta(seconds=5))
    fields.update(changes)
    return ClockAnchor(**fields)


def test_two_clocks_made_from_one_anchor_tell_the_same_time(tmp_path: Path) -> None:
    shared = anchor()
    read = read_clock_anchor(write_clock_anchor(tmp_path / "clock.json", shared))
    assert read == shared
    a, b = RealClock.anchored(shared), RealClock.anchored(read)
    try:
        # Ten real seconds after the origin at 300x: 50 simulated minutes in, on both.
        assert abs((a.now() - b.now()).total_seconds()) < 0.5 * 300
        assert utc(2026, 3, 1, 0, 49) < a.now() < utc(2026, 3, 1, 1, 0)
        assert shared.now(wall=shared.origin_unix + 2) == utc(2026, 3, 1, 0, 10)
        assert a.anchor is shared and RealClock().anchor is None
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "body,expected",
    [
        ("not json", r"not a devnet clock file \(not JSON\)"),
        ('{"speed": 2}', 'not a devnet clock file \\(no "format"'),
        (None, "speed 1000000.0 is outside 0.001..100000"),
        ("{}".ljust(5000), "larger than 4096 bytes"),
    ],
)
def test_a_bad_clock_file_is_one_line_naming_it(tmp_path: Path, body: str | None, expected: str) -> None:
    path = tmp_path / "clock.json"
    if body is None:
        write_clock_anchor(path, anchor())
        text = json.loads(path.read_text())
        text["speed"] = 1e6
        body = json.dumps(text)
    path.write_text(body)
    with pytest.raises(ValueError, match=expected) as info:
        read_clock_anchor(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def node_config(tmp_path: Path, clock: str, mode: str = "node", chain_id: str = "leasewarden-devnet"):
    return load_config(overrides={"chain": {"mode": mode, "chain_id": chain_id}, "node": {"devnet_clock": clock}})


def test_the_setting_is_off_by_default_and_a_node_runs_on_the_wall_clock() -> None:
    config = load_config(overrides={"chain": {"mode": "node"}})
    assert config.node.devnet_clock == ""
    clock, note = sidecar_clock(config)
    try:
        assert clock.speed == 1.0 and clock.anchor is None and note is None
    finally:
        clock.close()


def test_a_node_sidecar_runs_on_the_devnets_clock(tmp_path: Path) -> None:
    path = write_clock_anchor(tmp_path / "clock.json", anchor())
    clock, note = sidecar_clock(node_config(tmp_path, str(path)))
    try:
        assert clock.speed == 300.0 and clock.anchor == anchor(origin_unix=clock.anchor.origin_unix)
        assert note is not None and "300x" in note and "for benchmarks and fault runs only" in note
    finally:
        clock.close()


def test_the_setting_is_refused_for_a_missing_file_another_mode_or_another_chain(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[node\] devnet_clock: .*missing.json: no such file"):
        node_config(tmp_path, str(tmp_path / "missing.json"))
    path = str(write_clock_anchor(tmp_path / "clock.json", anchor()))
    with pytest.raises(ConfigError, match=r'devnet_clock .*: only for \[chain\] mode = "node"'):
        sidecar_clock(node_config(tmp_path, path, mode="devnet"))
    with pytest.raises(ConfigError, match=r"written by a devnet of chain 'leasewarden-devnet', but \[chain\] chain_id is 'manifest-1'"):
        sidecar_clock(node_config(tmp_path, path, chain_id="manifest-1"))


def test_run_py_devnet_shares_its_clock_with_a_sidecar_in_another_process(tmp_path: Path) -> None:
    """``run.py devnet --clock-file`` and ``run.py run`` with ``devnet_clock``: the sidecar withdraws on the devnet's time."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    clock_file = tmp_path / "clock.json"
    devnet = subprocess.Popen(
        [sys.executable, str(root / "run.py"), "--config", str(root / "config.toml"), "devnet",
         "--clock-file", str(clock_file), "--duration", "1h"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        printed: dict[str, str] = {}
        for line in devnet.stdout:  # type: ignore[union-attr]
            key, _, value = line.strip().partition(" = ")
            if key in ("grpc_url", "websocket_url", "key_file", "devnet_clock"):
                printed[key] = value.split("#")[0].strip()
            if line.startswith("Ctrl-C"):
                break
        assert printed["devnet_clock"] == f'"{clock_file}"'
        shared = read_clock_anchor(clock_file)
        assert shared.speed == 60.0
        config = tmp_path / "sidecar.toml"
        config.write_text(
            '[chain]\nmode = "node"\n[node]\n' + "".join(f"{k} = {v}\n" for k, v in printed.items())
            + '[ledger]\npath = "books.sqlite"\n[metrics]\nlisten = ""\n[capture]\nenabled = false\n'
        )
        launched = time.time()
        sidecar = subprocess.run(
            [sys.executable, str(root / "run.py"), "--config", str(config), "run", "--duration", "3m"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )
        assert sidecar.returncode == 0, sidecar.stderr[-2000:]
        lines = sidecar.stdout.splitlines()
        assert "WARNING: clock: the devnet's accelerated clock (60x, block time 5s)" in lines[0]
        assert any(" withdrew " in line for line in lines), sidecar.stdout[-3000:]
        # Stamped with the devnet's time (60 simulated seconds a real one since it started), not the wall clock's.
        first = datetime.strptime(lines[0][1:20], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
        assert shared.now(wall=launched) - timedelta(seconds=1) <= first <= shared.now() + timedelta(seconds=1)
        assert "clock runs 60x" in sidecar.stdout
    finally:
        devnet.terminate()
        devnet.wait(10)
    assert not clock_file.exists()  # the devnet deletes it when it stops
