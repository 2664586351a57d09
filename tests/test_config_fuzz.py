"""``check-config`` against thousands of mutated configurations: a clear error or ok, nothing else.

A seeded generator (the same inputs every run, so a failure reproduces)
mutates the shipped ``config.toml``: values replaced by what broke the
sidecar before (``nan``, ``inf``, durations past ``timedelta``, NUL and
newlines, 300-byte reasons, key material in the wrong setting, huge
counts), bytes cut, doubled or made not UTF-8, keys and sections invented,
and the provider key pointed at files and variables that ``run`` would
refuse. Each input runs ``check-config`` in this process (thousands of
interpreters would take minutes) under a timer that turns a hang into a
failure: every hundredth through ``run.main`` whole, the others through the
command and ``run_guarded`` as ``run.main`` calls them, without building the
argument parser again (which would take most of the time).

Every input must end in exit status 0 (the last line names the key's
address) or 2 (one line on stderr, nothing on stdout); never a traceback,
an internal error, a hang, or a word of the key.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import math
import os
import random
import signal
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import run
from runtime.cli import run_guarded
from runtime.config import sections
from sidecar.errors import OPERATOR_ERRORS

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = tomllib.loads((ROOT / "config.toml").read_text())

INPUTS = 2000
SEED = 14
#: Longer than any input takes by a wide margin (they take milliseconds), short enough to fail fast.
HANG_AFTER_S = 5.0

MNEMONIC = (
    "economy stock theory fatal elder harbor betray wasp final emotion task crumble "
    "siren bottom lizard educate guess current outdoor pair theory focus wife stone"
)
HEX_KEY = "4f3edf983ac636a65a842ce7c78d9aa706d3b113bce9c46f30d7d21715b23b1d"
#: What must never be printed, whatever the input.
SECRET_MARKS = ("economy", "crumble", "lizard", HEX_KEY[:20], HEX_KEY[:20].upper())

NASTY = [
    float("nan"), float("inf"), float("-inf"), 1e300, -1e300, 0, -1, 1, 2**31, 2**63 - 1, -(2**63), 0.0, 0.5, 1e-9,
    True, False, "", "0", "1h", "99999999999999999999d", "9999999999999999ms", "1e300", "-5s", "5 parsecs", "nan",
    "\x00", "books\x00.sqlite", "a\nb", "tab\there", "x" * 300, "é" * 200, "\u202e", "\x7f",
    MNEMONIC, HEX_KEY, "0x" + HEX_KEY.upper(), MNEMONIC.replace(" ", "\n"), [], [1, 2], ["a"], [MNEMONIC],
    ["CreditAccount=0.5"], ["CreditAccount=nan"], ["=1"], {"a": 1}, "019bbef3-b000-7001-b950-1b66216ca536",
    "0b5e3f8e-8c1a-4b7e-9a53-2f6a1c9d4e10\n", "0B5E3F8E-8C1A-4B7E-9A53-2F6A1C9D4E10", "grpc+http://127.0.0.1:1",
    "ws://x", "http://x", "node", "model", "devnet", "mainnet", "record", "count", "umfx", "u", "1e3", "0.025",
    "-0.1", "Infinity", "../../etc/passwd", "/", "~", "keys/good.key",
]

KEY_FILES = {
    "good.key": (MNEMONIC, 0o600),
    "hex.key": (HEX_KEY, 0o600),
    "open.key": (MNEMONIC, 0o644),
    "group.key": (MNEMONIC, 0o640),
    "typo.key": (MNEMONIC.replace("crumble", "crumbel"), 0o600),
    "swapped.key": (" ".join([MNEMONIC.split()[1], MNEMONIC.split()[0], *MNEMONIC.split()[2:]]), 0o600),
    "short.key": (" ".join(MNEMONIC.split()[:11]), 0o600),
    "empty.key": ("", 0o600),
    "junk.key": ("\x00\xff not a key", 0o600),
    "zero.key": ("0" * 64, 0o600),
}
KEY_SOURCES = [
    {"key_file": "keys/good.key"}, {"key_file": "keys/hex.key"}, {"key_file": "keys/open.key"},
    {"key_file": "keys/group.key"}, {"key_file": "keys/typo.key"}, {"key_file": "keys/swapped.key"},
    {"key_file": "keys/short.key"}, {"key_file": "keys/empty.key"}, {"key_file": "keys/junk.key"},
    {"key_file": "keys/zero.key"}, {"key_file": "keys/missing.key"}, {"key_file": "keys"},
    {"key_env": "LW_FUZZ_KEY"}, {"key_env": "LW_FUZZ_UNSET"}, {"key_env": "LW_FUZZ_BAD"}, {},
    {"key_file": "keys/good.key", "key_env": "LW_FUZZ_KEY"},
]


class Hang(BaseException):
    """An input ran past ``HANG_AFTER_S`` (a BaseException: no handler of the program catches it)."""


# -- writing TOML --------------------------------------------------------------------------------
def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        out = []
        for ch in v:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def toml_key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "_-" for c in k) else toml_value(k)


def toml_text(doc: dict[str, Any]) -> str:
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for name, body in doc.items():
        if isinstance(body, dict):
            lines.append(f"[{toml_key(name)}]")
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


# -- the generator -----------------------------------------------------------------------------------
def _fields() -> list[tuple[str, str]]:
    import dataclasses

    return [(name, f.name) for name, cls in sorted(sections().items()) for f in dataclasses.fields(cls)]


def mutated(rng: random.Random) -> bytes:
    """One mutated configuration file."""
    doc: dict[str, Any] = copy.deepcopy(SHIPPED)
    if rng.random() < 0.5:  # half of them go through the key loader
        doc["chain"]["mode"] = "node"
        doc["node"].pop("key_file", None)
        doc["node"].pop("key_env", None)
        # A good key a third of the time: the settings around it get through to be checked too.
        doc["node"].update(rng.choice(KEY_SOURCES) if rng.random() < 2 / 3 else rng.choice(KEY_SOURCES[:2]))
    fields = _fields()
    for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
        kind = rng.random()
        name, key = rng.choice(fields)
        body = doc.setdefault(name, {})
        if not isinstance(body, dict):  # an earlier mutation made the section a value
            continue
        if kind < 0.75:
            body[key] = rng.choice(NASTY)
        elif kind < 0.85:
            body[rng.choice(["withdraw_intervl", "speed ", MNEMONIC, "x\x01", "ključ"])] = 1
        elif kind < 0.92:
            doc[rng.choice(["schedular", "Scheduler", HEX_KEY, "demo.x"])] = {"a": 1}
        else:
            doc[name] = rng.choice([5, "table", [1], {}])
    data = toml_text(doc).encode("utf-8", "surrogatepass")
    if rng.random() < 0.25:
        data = _bytes_mutated(rng, data)
    return data


def _bytes_mutated(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    kind = rng.randrange(6)
    if kind == 0:
        return data[:at] + data[at + rng.randrange(1, 40):]
    if kind == 1:
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8))) + data[at:]
    if kind == 2:
        return data[:at] + b"\xff\xfe" + data[at:]  # not UTF-8
    if kind == 3:
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        return b"\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])  # a key or section twice
    if kind == 4:
        return data[:at]  # truncated
    return data[:at] + b"\x00" + data[at:]


# -- running one -------------------------------------------------------------------------------------
@dataclass
class Outcome:
    inputs: int = 0
    accepted: int = 0
    refused: int = 0
    problems: list[str] = field(default_factory=list)


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def check_config(path: Path, whole: bool) -> int:
    if whole:
        return run.main(["--config", str(path), "check-config"])
    args = argparse.Namespace(config=str(path), speed=None)
    return run_guarded(lambda: run.cmd_check_config(args), OPERATOR_ERRORS)


def check_one(path: Path, data: bytes, outcome: Outcome, label: str, whole: bool) -> None:
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, HANG_AFTER_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = check_config(path, whole)
    except Hang:
        outcome.problems.append(f"{label}: hung (over {HANG_AFTER_S:g} s)")
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    outcome.inputs += 1
    stdout, stderr = out.getvalue(), err.getvalue()
    text = stdout + stderr
    if "Traceback" in text or "internal error" in text:
        outcome.problems.append(f"{label}: {stderr.strip()[:300]}")
    elif any(mark in text for mark in SECRET_MARKS):
        outcome.problems.append(f"{label}: key material printed: {text[-300:]}")
    elif code == 0 and stdout.startswith(f"{path}: ok\n") and "\nprovider key: " in stdout and stderr == "":
        outcome.accepted += 1
    elif code == 2 and stdout == "" and stderr.count("\n") == 1 and stderr.startswith("error: "):
        outcome.refused += 1
    else:
        outcome.problems.append(f"{label}: exit {code}, stdout {stdout[-200:]!r}, stderr {stderr[-300:]!r}")


def fuzz(folder: Path, inputs: int = INPUTS, seed: int = SEED) -> Outcome:
    """Run ``inputs`` mutated configurations from ``seed`` in ``folder`` (key files are made there)."""
    keys = folder / "keys"
    keys.mkdir(exist_ok=True)
    for name, (text, mode) in KEY_FILES.items():
        p = keys / name
        p.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())  # \xff: not UTF-8
        p.chmod(mode)
    rng = random.Random(seed)
    outcome = Outcome()
    previous = signal.signal(signal.SIGALRM, _alarm)
    saved = {k: os.environ.get(k) for k in ("LW_FUZZ_KEY", "LW_FUZZ_UNSET", "LW_FUZZ_BAD")}
    os.environ["LW_FUZZ_KEY"] = HEX_KEY
    os.environ["LW_FUZZ_BAD"] = "not a key"
    os.environ.pop("LW_FUZZ_UNSET", None)
    try:
        for i in range(inputs):
            check_one(folder / "config.toml", mutated(rng), outcome, f"input {i} (seed {seed})", whole=i % 100 == 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return outcome


def test_thousands_of_mutated_configs_end_in_ok_or_one_clear_line(tmp_path: Path) -> None:
    outcome = fuzz(tmp_path)
    assert outcome.problems == [], "\n".join(outcome.problems[:20])
    assert outcome.inputs == INPUTS
    # Both outcomes are common: a generator that only ever broke the file (or never did) would test little.
    assert outcome.accepted >= INPUTS // 10 and outcome.refused >= INPUTS // 2, outcome


if __name__ == "__main__":  # python -m tests.test_config_fuzz [N]: the counts, for the record
    import sys
    import tempfile

    import sidecar.settings  # noqa: F401

    with tempfile.TemporaryDirectory() as d:
        o = fuzz(Path(d), int(sys.argv[1]) if len(sys.argv) > 1 else INPUTS)
    print(f"inputs {o.inputs}, clear errors {o.refused}, accepted {o.accepted}, problems {len(o.problems)}")
    for p in o.problems[:20]:
        print(" ", p)
