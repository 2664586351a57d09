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

Why here, at the bottom: every part declares its own section beside its
code (``[scheduler]`` in ``actors/``, ``[node]`` in ``chain/``, ...), so
every layer needs ``section`` and ``setting``. This module imports nothing
of the project, and so any layer may import it.

Which sections exist is not known here: ``load_config`` and ``sections``
work on whatever has registered so far. The wiring (``sidecar.settings``)
imports every module that declares one; a program loads its configuration
after importing it, so it sees every section.
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
    "build_section",
    "sections",
]

T = TypeVar("T")

#: Filled by ``@section`` as the modules that declare sections are imported;
#: nothing here imports them (the wiring does).
_SECTIONS: dict[str, type] = {}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names file, section and key."""


def section(name: str) -> Callable[[type[T]], type[T]]:
    """Register the decorated dataclass as ``[name]``, for every ``load_config`` from now on."""

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
    """Read ``path`` (or only defaults), apply ``overrides``, validate every registered section."""
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


def sections() -> dict[str, type]:
    """The sections registered so far, by name."""
    return dict(_SECTIONS)
