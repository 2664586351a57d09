"""The one-file executable: built with PyInstaller, it runs the demo on a machine path without the project.

A minute or two: marked ``binary`` and skipped where PyInstaller is not
installed (``python3 -m pip install -e '.[binary]'``; ``.ci/run`` does).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.binary
pytest.importorskip("PyInstaller", reason="PyInstaller is not installed: python3 -m pip install -e '.[binary]'")

ROOT = Path(__file__).resolve().parent.parent


def test_the_binary_runs_the_demo_with_no_python_path_from_a_temporary_folder(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "build_binary.py"), "--dist", str(tmp_path / "dist"),
         "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    exe = tmp_path / "dist" / "leasewarden"
    here = tmp_path / "elsewhere"
    here.mkdir()
    # Nothing of this Python: no PYTHONPATH, no virtualenv on PATH, a folder that is not the checkout.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(here), "PYTHONPATH": "", "LANG": "C.UTF-8"}

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), *args], cwd=here, env=env, capture_output=True, text=True, timeout=timeout)

    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("leasewarden 0."), version.stderr
    # Only the metrics port is set (a test never binds a fixed one); the rest is the built-in defaults.
    (here / "config.toml").write_text('[metrics]\nlisten = "127.0.0.1:0"\n')
    out = run("--config", "config.toml", "--duration", "10m", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "chain: embedded devnet: gRPC grpc+http://127.0.0.1:" in out.stdout
    assert "withdrew " in out.stdout and "stopped after 10m" in out.stdout
    assert (here / "state" / "leasewarden-embedded.sqlite").exists()  # the books, beside the config
