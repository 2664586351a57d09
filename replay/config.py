"""The configuration a replay runs with: the captured one, adjusted.

A run's first record holds ``Config.effective()`` as it was (secrets left
out; they decide nothing). Replay rebuilds a ``Config`` from it with this
build's sections, so the cores are configured as they were. On top of it,
``overrides`` (``--set section.key=value``, or a test changing a rule)
show what a different setting would have decided.

A capture from another version may name a section or key this build does
not have: it is left out with a notice rather than refusing the replay, so
an old production capture can still be replayed against new code. A value
this build rejects is an error naming it.

A replay reaches no node: the files a run read only to reach its node or
its clock (settings marked ``node_file``: ``[node] tls_ca_file``,
``devnet_clock``) are left out with a notice, so that a production capture
replays on a machine that has none of them. An override still sets one.
A configuration given in the capture's place (``--with-config``) is read
without them too (``without_node_files``), with the same notice for each it
set (``node_files_left_out``).
"""

from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

from runtime.config import Config, ConfigError, load_config, quoted_setting, resolved_path, sections
from runtime.key_material import shown

__all__ = ["replay_config", "without_node_files", "node_files_left_out", "parse_assignment", "merge_overrides"]


def _plain(value: Any) -> Any:
    """msgpack gives tuples; the config loader expects TOML's lists."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def replay_config(
    captured: dict[str, dict[str, Any]] | None,
    overrides: dict[str, dict[str, Any]] | None = None,
    *,
    source: str = "capture",
    origin: str = "captured",
) -> tuple[Config, list[str]]:
    """A ``Config`` from the captured effective values plus ``overrides``; and notices.

    ``origin`` says in the notices where the values came from (``--config``'s file: "configured").
    """
    known = sections()
    notices: list[str] = []
    raw: dict[str, dict[str, Any]] = {}
    for name, values in sorted((captured or {}).items()):
        cls = known.get(name)
        if cls is None:
            notices.append(f"{origin} section [{name}] is unknown to this version; left out")
            continue
        fields = {f.name: f for f in dataclasses.fields(cls)}
        overridden = (overrides or {}).get(name, {})
        kept = {}
        for key, value in sorted(values.items()):
            f = fields.get(key)
            if f is None:
                notices.append(f"{origin} setting [{name}] {key} is unknown to this version; left out")
                continue
            if f.metadata.get("node_file") and value and key not in overridden:
                notices.append(f"{origin} setting [{name}] {key} = {quoted_setting(name, key, value)} left out: "
                               "a replay reaches no node")
                continue
            kept[key] = _plain(value)
        raw[name] = kept
    for name, values in (overrides or {}).items():
        raw.setdefault(name, {}).update({k: _plain(v) for k, v in values.items()})
        for key, value in sorted(values.items()):
            notices.append(f"replaying with [{name}] {key} = {quoted_setting(name, key, value)} (override)")
    try:
        return load_config(None, raw), notices
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}".replace("<defaults>: ", "")) from None


def without_node_files() -> dict[str, dict[str, Any]]:
    """Overrides that set every ``node_file`` setting to its default (empty): for a configuration file
    loaded to replay with, whose CA file (say) is on the production machine, not this one."""
    return {
        name: blank
        for name, cls in sections().items()
        if (blank := {f.name: f.default for f in dataclasses.fields(cls) if f.metadata.get("node_file")})
    }


def node_files_left_out(path: str, overrides: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The notices for the ``node_file`` settings the configuration file at ``path`` sets and a replay
    leaves out (``without_node_files``), those ``overrides`` set again excepted: as a captured
    configuration's are noticed. For a file ``load_config`` has read already: one it cannot read
    gives none (its error was the loader's to report)."""
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    notices = []
    for name, cls in sorted(sections().items()):
        values = raw.get(name)
        if not isinstance(values, dict):
            continue
        again = (overrides or {}).get(name, {})
        for f in sorted(dataclasses.fields(cls), key=lambda f: f.name):
            value = values.get(f.name)
            if not f.metadata.get("node_file") or not value or f.name in again:
                continue
            if f.metadata.get("path") and isinstance(value, str):
                value = resolved_path(value, path)  # as the capture holds it: resolved where it was read
            notices.append(f"configured setting [{name}] {f.name} = {quoted_setting(name, f.name, value)} left out: "
                           "a replay reaches no node")
    return notices


def parse_assignment(text: str) -> tuple[str, str, Any]:
    """``scheduler.credit_check_error_threshold=2`` -> (section, key, value); the value is TOML."""
    name, sep, value_text = text.partition("=")
    section, dot, key = name.strip().partition(".")
    if not sep or not dot or not section or not key:
        # Only the name is quoted: what follows '=' (or a whole text without one) may be a URL's
        # credentials in a form nothing can tell from the rest (user:key@host).
        if sep:
            raise ConfigError(f"--set {shown(name.strip())}=...: expected section.key=value")
        raise ConfigError("--set: expected section.key=value, and what was given has no '=' in it")
    try:
        value = tomllib.loads(f"v = {value_text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = value_text.strip()  # a bare word: take it as a string ("5m", "model")
    return section, key, value


def merge_overrides(assignments: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for text in assignments:
        section, key, value = parse_assignment(text)
        out.setdefault(section, {})[key] = value
    return out
