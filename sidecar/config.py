"""``config.toml``: typed sections, validated at start, errors that name the key.

Each section is a frozen dataclass registered with ``@section("name")``; its
fields are the keys, their defaults are the defaults, their annotations say
how a value is read:

- ``timedelta``: a duration, ``"90s"``, ``"5m"``, ``"1h"``, ``"1h30m"``, ``"2d"``
  or a number of seconds; ``"0"`` is zero;
- ``int``/``float``/``bool``/``str``: as TOML gives them (an int is accepted
  for a float);
- field metadata ``min``/``max``/``choices`` bound the value.

A bad value fails at start with ``config.toml: [scheduler] withdraw_interval:
expected ...``. An unknown key or section is an error too: a typo must not
silently fall back to a default on real money.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, TypeVar, get_type_hints

__all__ = [
    "ConfigError",
    "section",
    "setting",
    "Config",
    "load_config",
    "parse_duration",
    "format_duration",
    "SchedulerSettings",
]

T = TypeVar("T")

_SECTIONS: dict[str, type] = {}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names file, section and key."""


def section(name: str) -> Callable[[type[T]], type[T]]:
    def register(cls: type[T]) -> type[T]:
        _SECTIONS[name] = cls
        cls.SECTION = name  # type: ignore[attr-defined]
        return cls

    return register


def setting(default: Any, help: str, **bounds: Any) -> Any:
    """A field with a default, a one-line help text and optional min/max/choices."""
    return field(default=default, metadata={"help": help, **bounds})


_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNITS = {"ms": timedelta(milliseconds=1), "s": timedelta(seconds=1), "m": timedelta(minutes=1),
          "h": timedelta(hours=1), "d": timedelta(days=1)}


def parse_duration(value: Any) -> timedelta:
    """``"1h30m"`` -> 90 minutes; a bare number is seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ValueError("expected a duration")
    text = value.strip().replace(" ", "")
    if text == "0":
        return timedelta(0)
    pos = 0
    total = timedelta(0)
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f'expected a duration like "30s", "5m", "1h" or "1h30m", got {value!r}')
    return total


def format_duration(value: timedelta) -> str:
    """The inverse of ``parse_duration``: ``"1h30m"``, ``"200ms"``; exact to the millisecond."""
    ms = value // timedelta(milliseconds=1)
    if ms == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(out)


def _convert(where: str, annotation: Any, value: Any, meta: dict[str, Any]) -> Any:
    try:
        if annotation is timedelta:
            out: Any = parse_duration(value)
        elif annotation is bool:
            if not isinstance(value, bool):
                raise ValueError(f"expected true or false, got {value!r}")
            out = value
        elif annotation is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"expected a whole number, got {value!r}")
            out = value
        elif annotation is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"expected a number, got {value!r}")
            out = float(value)
        elif annotation is str:
            if not isinstance(value, str):
                raise ValueError(f"expected a string, got {value!r}")
            out = value
        elif annotation == list[str] or annotation == tuple[str, ...]:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"expected a list of strings, got {value!r}")
            out = tuple(value)
        else:
            out = value
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if "choices" in meta and out not in meta["choices"]:
        raise ConfigError(f"{where}: expected one of {', '.join(map(repr, meta['choices']))}, got {out!r}")
    if "min" in meta and out < meta["min"]:
        shown = format_duration(meta["min"]) if isinstance(out, timedelta) else meta["min"]
        raise ConfigError(f"{where}: must be at least {shown}, got {value!r}")
    if "max" in meta and out > meta["max"]:
        shown = format_duration(meta["max"]) if isinstance(out, timedelta) else meta["max"]
        raise ConfigError(f"{where}: must be at most {shown}, got {value!r}")
    return out


def build_section(cls: type[T], raw: dict[str, Any], source: str) -> T:
    name = cls.SECTION  # type: ignore[attr-defined]
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: [{name}] unknown key {unknown[0]!r} (known: {', '.join(sorted(fields))})"
        )
    values = {}
    for key, value in raw.items():
        values[key] = _convert(f"{source}: [{name}] {key}", hints[key], value, dict(fields[key].metadata))
    obj = cls(**values)
    check = getattr(obj, "validate", None)
    if check is not None:
        try:
            check()
        except ValueError as exc:
            raise ConfigError(f"{source}: [{name}] {exc}") from None
    return obj


@dataclass(frozen=True)
class Config:
    """Every section, by name; ``config.scheduler`` etc. for the known ones."""

    sections: dict[str, Any]
    source: str = "<defaults>"

    def __getattr__(self, name: str) -> Any:
        try:
            return self.sections[name]
        except KeyError:
            raise AttributeError(name) from None

    def effective(self) -> dict[str, dict[str, Any]]:
        """The configuration in force, secrets left out (for logs and captures)."""
        out: dict[str, dict[str, Any]] = {}
        for name, obj in sorted(self.sections.items()):
            values: dict[str, Any] = {}
            for f in dataclasses.fields(obj):
                if f.metadata.get("secret"):
                    continue
                v = getattr(obj, f.name)
                values[f.name] = format_duration(v) if isinstance(v, timedelta) else v
            out[name] = values
        return out


def load_config(path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Read ``path`` (or only defaults), apply ``overrides``, validate everything."""
    _import_sections()
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"{source}: no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    for name, values in (overrides or {}).items():
        raw.setdefault(name, {}).update(values)
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{source}: unknown section [{unknown[0]}] (known: {', '.join(sorted(_SECTIONS))})")
    sections = {}
    for name, cls in _SECTIONS.items():
        body = raw.get(name, {})
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        sections[name] = build_section(cls, body, source)
    return Config(sections, source)


def _import_sections() -> None:
    """Import the modules that register sections (kept here so one list shows them all)."""
    import sidecar.settings  # noqa: F401


def sections() -> dict[str, type]:
    _import_sections()
    return dict(_SECTIONS)


# The scheduler's section lives here because every other part reads it.
@section("scheduler")
@dataclass(frozen=True)
class SchedulerSettings:
    """The withdraw scheduler seed's settings, under its names, with its defaults."""

    withdraw_interval: timedelta = setting(
        timedelta(hours=1), "paid-withdraw cadence", min=timedelta(seconds=1)
    )
    credit_check_interval: timedelta = setting(
        timedelta(0), "credit-check / wake cadence; 0 means equal to withdraw_interval"
    )
    max_withdraw_iterations: int = setting(100, "pages of MsgWithdraw per cycle at most", min=1, max=100_000)
    credit_check_error_threshold: int = setting(
        3, "failed credit reads in a row before an early re-check", min=1
    )
    credit_check_retry_interval: timedelta = setting(
        timedelta(seconds=30), "delay of an early re-check", min=timedelta(seconds=1)
    )
    credit_check_zero_grace_period: timedelta = setting(
        timedelta(minutes=5), "how long a balance must stay zero before its leases are closed"
    )
    depletion_check_buffer: timedelta = setting(
        timedelta(seconds=10), "wake this long before an estimated depletion"
    )
    max_retries: int = setting(3, "tries of a transient chain error (first try included)", min=1, max=20)
    initial_backoff: timedelta = setting(timedelta(seconds=1), "first retry delay, doubled each try")
    max_backoff: timedelta = setting(timedelta(seconds=10), "retry delay cap")
    max_queries_in_flight: int = setting(32, "credit reads in flight at once", min=1, max=1024)
    cycle_timeout: timedelta = setting(
        timedelta(minutes=5), "a cycle whose tenants have not all answered by then is closed out",
        min=timedelta(seconds=1),
    )
    closure_reason: str = setting("credit depleted", "reason put on MsgCloseLease")
    max_node_lag: timedelta = setting(
        timedelta(minutes=2), "a node whose latest block is older than this is treated as syncing"
    )

    def validate(self) -> None:
        if self.max_backoff < self.initial_backoff:
            raise ValueError("max_backoff must not be shorter than initial_backoff")

    @property
    def check_interval(self) -> timedelta:
        return self.credit_check_interval or self.withdraw_interval
