"""The message registry and its msgpack codec.

Every type that crosses an actor boundary is a frozen dataclass registered
here under a stable name and a schema version. The codec turns any registered
value, including nested ones, into msgpack bytes and back, so that captures
written by one version can be read (or refused with a clear error) by another.

Encoding rules, chosen so that nothing is lost on the way through:

- a registered dataclass is an ext record holding ``[name, version, {field: value}]``;
- an int outside msgpack's 64-bit range (a Cosmos ``Int`` is 256-bit) is an
  ext record holding its decimal digits, never a float;
- ``datetime`` values must be timezone-aware and use msgpack's timestamp ext;
- tuples and lists both decode as tuples, so decoded messages stay hashable.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, Callable, TypeVar

import msgpack

from messages.fast_init import fast_init

__all__ = [
    "CodecError",
    "UnknownMessageType",
    "NewerSchemaVersion",
    "message",
    "registry",
    "encode",
    "decode",
    "to_plain",
    "decode_big_int",
]

T = TypeVar("T")

#: msgpack ext type codes. They are part of the capture file format.
_EXT_MESSAGE = 1
_EXT_BIG_INT = 2

_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1


class CodecError(ValueError):
    """Bytes that are not a well-formed encoding of a registered message."""


class UnknownMessageType(CodecError):
    """An encoded message names a type this version does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown message type {name!r}")
        self.name = name


class NewerSchemaVersion(CodecError):
    """An encoded message was written by a newer schema of its type."""

    def __init__(self, name: str, found: int, known: int) -> None:
        super().__init__(
            f"message type {name!r} has schema version {found}, newer than "
            f"the version {known} this build understands"
        )
        self.name = name
        self.found = found
        self.known = known


_REGISTRY: dict[str, type] = {}


def message(name: str, version: int = 1) -> Callable[[type[T]], type[T]]:
    """Register a frozen dataclass as a message type under ``name``.

    The name, not the Python class path, goes on the wire, so modules can be
    reorganised without invalidating captures. Raise ``version`` whenever a
    field is removed or changes meaning; adding a field with a default does
    not need it.
    """

    def register(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} must be a dataclass to be a message")
        params = getattr(cls, "__dataclass_params__")
        if not params.frozen:
            raise TypeError(f"{cls.__name__} must be a frozen dataclass")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise TypeError(f"message name {name!r} is already registered")
        cls.MESSAGE_NAME = name  # type: ignore[attr-defined]
        cls.MESSAGE_VERSION = version  # type: ignore[attr-defined]
        cls._message_fields = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[attr-defined]
        _REGISTRY[name] = cls
        return fast_init(cls)

    return register


def registry() -> dict[str, type]:
    """A copy of the registry: message name -> class."""
    return dict(_REGISTRY)


def _to_wire(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str, bytes, float)):
        return value
    if isinstance(value, int):
        if _INT64_MIN <= value <= _UINT64_MAX:
            return value
        return msgpack.ExtType(_EXT_BIG_INT, str(value).encode("ascii"))
    name = getattr(type(value), "MESSAGE_NAME", None)
    if name is not None:
        fields = {f: _to_wire(getattr(value, f)) for f in type(value)._message_fields}
        body = msgpack.packb(
            [name, type(value).MESSAGE_VERSION, fields], datetime=True, use_bin_type=True
        )
        return msgpack.ExtType(_EXT_MESSAGE, body)
    if isinstance(value, (tuple, list, frozenset)):
        return [_to_wire(v) for v in value]
    if isinstance(value, dict):
        return {_to_wire(k): _to_wire(v) for k, v in value.items()}
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise CodecError("naive datetime cannot be encoded; use UTC-aware datetimes")
        return value
    raise CodecError(f"cannot encode a value of type {type(value).__name__}")


def decode_big_int(data: bytes) -> int:
    """The int a big-int ext record holds (its decimal digits). Raises ``CodecError``."""
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CodecError(f"malformed big integer {data[:40]!r}") from exc


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_BIG_INT:
        return decode_big_int(data)
    if code == _EXT_MESSAGE:
        try:
            name, version, fields = msgpack.unpackb(
                data,
                ext_hook=_ext_hook,
                timestamp=3,
                use_list=False,
                raw=False,
                strict_map_key=False,
            )
        except CodecError:
            raise
        except Exception as exc:  # any malformed body is a codec error
            raise CodecError(f"malformed message record: {exc}") from exc
        return _build(name, version, fields)
    if code == -1:  # msgpack's own timestamp, handled by `timestamp=3`
        raise CodecError("unexpected raw timestamp ext")
    raise CodecError(f"unknown ext type {code}")


def _build(name: Any, version: Any, fields: Any) -> Any:
    if not isinstance(name, str) or not isinstance(version, int) or not isinstance(fields, dict):
        raise CodecError("message record is not [name, version, fields]")
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UnknownMessageType(name)
    if version > cls.MESSAGE_VERSION:
        raise NewerSchemaVersion(name, version, cls.MESSAGE_VERSION)
    known = set(cls._message_fields)
    unknown = [k for k in fields if k not in known]
    if unknown:
        raise CodecError(f"message type {name!r} has no field(s) {', '.join(map(str, unknown))}")
    try:
        return cls(**fields)
    except TypeError as exc:
        raise CodecError(f"message type {name!r}: {exc}") from exc


def encode(value: Any) -> bytes:
    """msgpack bytes for a registered message (or a plain structure holding some)."""
    return msgpack.packb(_to_wire(value), datetime=True, use_bin_type=True)


def decode(data: bytes) -> Any:
    """The value ``encode`` was given. Raises ``CodecError`` (or a subclass)."""
    try:
        return msgpack.unpackb(
            data,
            ext_hook=_ext_hook,
            timestamp=3,
            use_list=False,
            raw=False,
            strict_map_key=False,
        )
    except CodecError:
        raise
    except Exception as exc:
        raise CodecError(f"malformed msgpack: {exc}") from exc


def to_plain(value: Any) -> Any:
    """A JSON-friendly view of a message: dicts with a ``type`` key, ISO times, big ints as strings."""
    name = getattr(type(value), "MESSAGE_NAME", None)
    if name is not None:
        out: dict[str, Any] = {"type": name}
        for f in type(value)._message_fields:
            out[f] = to_plain(getattr(value, f))
        return out
    if isinstance(value, (tuple, list, frozenset)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        return str(value)
    return value
