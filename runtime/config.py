"""``config.toml``: typed sections, validated at start, errors that name the key.

Each section is a frozen dataclass registered with ``@section("name")``; its
fields are the keys, their defaults are the defaults, their annotations say
how a value is read:

- ``timedelta``: a duration, ``"90s"``, ``"5m"``, ``"1h"``, ``"1h30m"``, ``"2d"``
  or a number of seconds; ``"0"`` is zero;
- ``int``/``float``/``bool``/``str``: as TOML gives them (an int is accepted
  for a float);
- field metadata ``min``/``max``/``choices`` bound the value, ``max_bytes``
  a string's UTF-8 length; ``path=True`` marks a file or folder.

Every path setting is resolved where it is read, against the folder of the
file that sets it (``~`` expanded; the working directory for the built-in
defaults), and is absolute from then on. Two rules (one against the file,
one against the working directory) once sent a run's captures into the
checkout it was started from while its ledger went beside its config.

Whatever a field declares, some values are refused everywhere, because each
of them once got past a bound and broke a running sidecar: a number that is
not finite (``nan`` compares false with every bound, so it passed them all),
a duration past ``MAX_DURATION`` (``timedelta`` overflows), a string with a
control character (a NUL in a path, a newline after a UUID), a string longer
than ``MAX_STRING_BYTES``, and a string shaped like a private key or a
mnemonic (``runtime.key_material``): the key belongs in its file, and the
error never quotes it.

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
import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, TypeVar, get_type_hints

from runtime.key_material import looks_like_key, shown
from runtime.urls import shown_url

__all__ = [
    "ConfigError",
    "section",
    "setting",
    "Config",
    "load_config",
    "parse_duration",
    "format_duration",
    "convert_setting",
    "quoted_setting",
    "MAX_DURATION",
    "MAX_STRING_BYTES",
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
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

#: The longest duration any setting may hold. Ten years is past every
#: interval a sidecar waits (the depletion horizon is ten years too), and
#: well inside ``timedelta``, whose arithmetic overflows past 999,999,999
#: days: ``"99999999999999999999d"`` or ``1e300`` seconds must be an error
#: naming the key, not an OverflowError.
MAX_DURATION = timedelta(days=3650)

#: The longest string any setting may hold, in UTF-8 bytes: a path on Linux
#: is at most 4096, and nothing else comes near it.
MAX_STRING_BYTES = 4096

#: The most entries a list setting holds: a list is a handful of rules (the
#: devnet's error rates), never a data set.
MAX_LIST_ITEMS = 100


def _bounded(ms: int | float, value: Any) -> timedelta:
    if ms > MAX_DURATION // timedelta(milliseconds=1):
        raise ValueError(f"a duration must be at most {format_duration(MAX_DURATION)}, got {shown(value)}")
    return timedelta(milliseconds=ms)


def parse_duration(value: Any) -> timedelta:
    """``"1h30m"`` -> 90 minutes; a bare number is seconds. Raises ValueError.

    At most ``MAX_DURATION``; never negative, never ``nan`` or infinite.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f'expected a duration like "30s", "5m", "1h" or "1h30m", got {shown(value)}')
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"expected a finite duration, got {value!r}")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return _bounded(value * 1000, value)
    text = value.strip().replace(" ", "")
    if text == "0":
        return timedelta(0)
    pos = 0
    total_ms = 0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        # Whole milliseconds in an int: exact, and it cannot overflow before the bound is checked.
        total_ms += int(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f'expected a duration like "30s", "5m", "1h" or "1h30m", got {shown(value)}')
    return _bounded(total_ms, value)


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


def _quoted(value: Any, url: bool) -> str:
    """``value`` as an error quotes it; a URL setting's (and the strings of a list given for one)
    with its credentials masked (``runtime.urls``)."""
    if url:
        if isinstance(value, str):
            return shown(shown_url(value))
        if isinstance(value, (list, tuple)):
            return shown([shown_url(v) if isinstance(v, str) else v for v in value])
    return shown(value)


def _string(value: Any, max_bytes: int, path: bool = False, url: bool = False) -> str:
    """A setting's string: printable, within ``max_bytes``, not key material (a path: not all of it)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {_quoted(value, url)}")
    if looks_like_key(value, whole=path):
        raise ValueError(
            f"{shown(value)}: a key belongs in the file named by [node] key_file (mode 0600) "
            f"or the variable named by [node] key_env, never in a setting"
        )
    bad = next((i for i, ch in enumerate(value) if not ch.isprintable()), None)
    if bad is not None:
        raise ValueError(
            f"contains a control character (U+{ord(value[bad]):04X}) at position {bad}, in {_quoted(value, url)}: "
            f"expected printable text on one line"
        )
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ValueError(f"must be at most {max_bytes} bytes (UTF-8), got {size}: {_quoted(value, url)}")
    return value


def _convert(where: str, annotation: Any, value: Any, meta: dict[str, Any]) -> Any:
    at = f"{where}: " if where else ""
    try:
        if annotation is timedelta:
            out: Any = parse_duration(value)
        elif annotation is bool:
            if not isinstance(value, bool):
                raise ValueError(f"expected true or false, got {shown(value)}")
            out = value
        elif annotation is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"expected a whole number, got {shown(value)}")
            out = value
        elif annotation is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"expected a number, got {shown(value)}")
            if isinstance(value, float) and not math.isfinite(value):
                # nan compares false with every bound: it would pass them all.
                raise ValueError(f"expected a finite number, got {value!r}")
            if isinstance(value, int) and abs(value) > 2**53:
                raise ValueError(f"expected a number a float holds exactly, got {shown(value)}")
            out = float(value)
        elif annotation is str:
            out = _string(value, meta.get("max_bytes", MAX_STRING_BYTES), meta.get("path", False), meta.get("url", False))
        elif annotation == list[str] or annotation == tuple[str, ...]:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"expected a list of strings, got {shown(value)}")
            if len(value) > MAX_LIST_ITEMS:
                raise ValueError(f"expected at most {MAX_LIST_ITEMS} entries, got {len(value)}")
            out = tuple(_string(v, meta.get("max_bytes", MAX_STRING_BYTES)) for v in value)
        else:
            out = value
    except ValueError as exc:
        raise ConfigError(f"{at}{exc}") from None
    if "choices" in meta and out not in meta["choices"]:
        raise ConfigError(f"{at}expected one of {', '.join(map(repr, meta['choices']))}, got {shown(out)}")
    if "min" in meta and out < meta["min"]:
        shown_min = format_duration(meta["min"]) if isinstance(out, timedelta) else meta["min"]
        raise ConfigError(f"{at}must be at least {shown_min}, got {shown(value)}")
    if "max" in meta and out > meta["max"]:
        shown_max = format_duration(meta["max"]) if isinstance(out, timedelta) else meta["max"]
        raise ConfigError(f"{at}must be at most {shown_max}, got {shown(value)}")
    return out


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A section's annotations, evaluated once (each evaluation compiles every one of them)."""
    return get_type_hints(cls)


def convert_setting(cls: type, key: str, value: Any, where: str) -> Any:
    """``value`` read and bounded as ``cls``'s setting ``key`` would be; errors begin with ``where`` (if any).

    For a command-line flag that overrides a setting (``--speed`` for
    ``[demo] speed``): the flag's error names the flag, not the file.
    """
    meta = dict(next(f for f in dataclasses.fields(cls) if f.name == key).metadata)
    return _convert(where, _hints(cls)[key], value, meta)


def quoted_setting(section: str, key: str, value: Any) -> str:
    """``value`` as a message quotes it for ``[section] key``: no key material, and a URL
    setting's credentials masked; a section or key not registered is quoted as any value."""
    cls = _SECTIONS.get(section)
    field_ = next((f for f in dataclasses.fields(cls) if f.name == key), None) if cls is not None else None
    return _quoted(value, bool(field_ is not None and field_.metadata.get("url")))


def _base_folder(source: str) -> Path:
    """Where relative paths of ``source`` start: its folder, or the working directory for defaults."""
    if source and not source.startswith("<"):
        return Path(source).expanduser().resolve().parent
    return Path.cwd()


def _resolved(value: str, base: Path) -> str:
    if not value:  # "" means "none" (no ledger, no key file): nothing to resolve
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


def resolved_path(value: str, source: str) -> str:
    """A path setting's ``value`` as read from ``source`` (a file's name): against that file's folder."""
    return _resolved(value, _base_folder(source))


def build_section(cls: type[T], raw: dict[str, Any], source: str) -> T:
    name = cls.SECTION  # type: ignore[attr-defined]
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: [{name}] unknown key {shown(unknown[0])} (known: {', '.join(sorted(fields))})"
        )
    values = {}
    for key, value in raw.items():
        values[key] = _convert(f"{source}: [{name}] {key}", hints[key], value, dict(fields[key].metadata))
    base = _base_folder(source)
    for key, f in fields.items():
        if f.metadata.get("path"):
            values[key] = _resolved(values.get(key, f.default), base)
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
                if f.metadata.get("url") and isinstance(v, str):
                    v = shown_url(v)  # a node provider's API key often rides in the URL
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
        except IsADirectoryError:
            raise ConfigError(f"{source}: a directory, not a configuration file") from None
        except OSError as exc:
            raise ConfigError(f"{source}: cannot be read ({exc.strerror or exc})") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}: not UTF-8 text (byte {exc.start}): TOML files are UTF-8") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    for name, values in (overrides or {}).items():
        body = raw.setdefault(name, {})
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        body.update(values)
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        name = unknown[0]
        quoted = f"[{name}]" if shown(name) == repr(name) and name.isprintable() else shown(name)
        raise ConfigError(f"{source}: unknown section {quoted} (known: {', '.join(sorted(_SECTIONS))})")
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
