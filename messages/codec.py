"""The message base class, its registry, and the msgpack codec of one message.

Every type that crosses an actor boundary is a frozen ``msgspec.Struct``
subclassing ``Message``, tagged with a stable name (``class Wake(Message,
tag="wake")``): the name, not the Python class path, goes on the wire, so
modules can be reorganised without invalidating captures. msgspec builds,
compares, hashes, encodes and decodes them in C: a replay decodes a whole
capture frame into its messages in one call (``capture.wire``), where the
dataclasses these replaced cost a Python call per message each way.

On the wire a message is an array, its tag first, then its fields in order
(``array_like``). Raise ``MESSAGE_VERSION`` whenever a field is removed or
changes meaning; a field added at the end with a default needs no new
version (captures declare each type's fields, and readers map them by name).

Encoding rules, chosen so that nothing is lost on the way through:

- an int outside msgpack's 64-bit range (a Cosmos ``Int`` is 256-bit) is an
  ext record holding its decimal digits, never a float; only a ``Coin``'s
  amount can hold one (``Coin`` reads the ext back into an int);
- ``datetime`` values use msgpack's timestamp ext (a naive one, which the
  sidecar's clocks never make, goes as its ISO text and reads back naive);
- sequences are tuples, so decoded messages stay hashable.

``decode`` also reads a message in the nested form earlier builds wrote
(``[name, version, {field: value}]`` in an ext record; ledgers keep tenant
snapshots in it), through msgpack: the only reader of that form left.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, ClassVar, Union

import msgspec

__all__ = [
    "CodecError",
    "UnknownMessageType",
    "NewerSchemaVersion",
    "Message",
    "registry",
    "message_union",
    "encode",
    "decode",
    "to_plain",
    "decode_big_int",
    "big_int_ext",
    "EXT_BIG_INT",
    "INT64_MIN",
    "UINT64_MAX",
]

#: msgpack ext type codes. They are part of the capture file format.
_EXT_MESSAGE = 1
EXT_BIG_INT = 2

INT64_MIN = -(2**63)
UINT64_MAX = 2**64 - 1


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


class _Name:
    """``MESSAGE_NAME``: the class's tag, cached on the class at its first look-up.

    (A msgspec class's config is only complete once the class exists, so its
    tag cannot be copied into it while it is being made.)
    """

    def __get__(self, obj: Any, cls: type) -> Any:
        tag = cls.__struct_config__.tag  # type: ignore[attr-defined]
        if not isinstance(tag, str):
            return None  # Message itself
        type.__setattr__(cls, "MESSAGE_NAME", tag)
        return tag


class Message(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Base of every message type: frozen (hashable, compared by value), an array on the wire.

    ``gc=False``: a message never refers back to itself, so the collector
    need not track the millions a replay builds.
    """

    MESSAGE_NAME = _Name()
    MESSAGE_VERSION: ClassVar[int] = 1


def registry() -> dict[str, type]:
    """Every message type: message name -> class (a fresh dict)."""
    out: dict[str, type] = {}
    todo = list(Message.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        name = cls.MESSAGE_NAME  # type: ignore[attr-defined]
        if name is None:
            continue
        other = out.get(name)
        if other is not None and other is not cls:
            raise TypeError(f"message name {name!r} is used by both {other.__qualname__} and {cls.__qualname__}")
        out[name] = cls
    return out


def message_union(types: Any = None) -> Any:
    """The tagged union of ``types`` (default: every registered message type), for typed decoding."""
    classes = tuple(sorted((types or registry().values()), key=lambda c: c.__struct_config__.tag))
    return Union[classes] if len(classes) > 1 else classes[0]  # type: ignore[valid-type]


def big_int_ext(value: int) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(EXT_BIG_INT, str(value).encode("ascii"))


def decode_big_int(data: bytes | memoryview) -> int:
    """The int a big-int ext record holds (its decimal digits). Raises ``CodecError``."""
    try:
        return int(bytes(data).decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CodecError(f"malformed big integer {bytes(data)[:40]!r}") from exc


def _big_ints_as_ext(value: Any) -> Any:
    """``value`` as msgspec builtins, with every int beyond 64 bits as the big-int ext.

    The slow path, for what msgspec refuses (``OverflowError``): one
    256-bit amount in a message makes the whole value go this way.
    """
    if type(value) is int:
        return value if INT64_MIN <= value <= UINT64_MAX else big_int_ext(value)
    if isinstance(value, (list, tuple)):
        return [_big_ints_as_ext(v) for v in value]
    if isinstance(value, dict):
        return {_big_ints_as_ext(k): _big_ints_as_ext(v) for k, v in value.items()}
    return value


_BUILTIN = (_dt.datetime, bytes, msgspec.msgpack.Ext)


def to_wire(value: Any) -> Any:
    """``value`` in builtins msgspec packs as the message encoding would (big ints as exts)."""
    return _big_ints_as_ext(msgspec.to_builtins(value, builtin_types=_BUILTIN))


def _enc_hook(value: Any) -> Any:
    if isinstance(value, frozenset):
        return list(value)
    raise CodecError(f"cannot encode a value of type {type(value).__name__}")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)


def encode_value(value: Any, encoder: msgspec.msgpack.Encoder = _encoder) -> bytes:
    """msgpack bytes of any value holding messages; big ints as exts."""
    try:
        data = encoder.encode(value)
    except OverflowError:
        data = encoder.encode(to_wire(value))
    except CodecError:
        raise
    except (TypeError, ValueError) as exc:
        raise CodecError(f"cannot encode {type(value).__name__}: {exc}") from exc
    return data


def encode(value: Any) -> bytes:
    """msgpack bytes for one registered message."""
    if getattr(type(value), "MESSAGE_NAME", None) is None:
        raise CodecError(f"cannot encode a value of type {type(value).__name__}: not a registered message")
    return encode_value(value)


def ext_hook(code: int, data: memoryview) -> Any:
    if code == EXT_BIG_INT:
        return msgspec.msgpack.Ext(code, bytes(data))
    raise CodecError(f"unknown ext type {code}")


_decoders: dict[int, msgspec.msgpack.Decoder] = {}


def _decoder() -> msgspec.msgpack.Decoder:
    """The typed decoder of every registered type (made again when a type was registered since)."""
    types = registry()
    dec = _decoders.get(len(types))
    if dec is None:
        dec = msgspec.msgpack.Decoder(message_union(types.values()), ext_hook=ext_hook)
        _decoders.clear()
        _decoders[len(types)] = dec
    return dec


def decode(data: bytes) -> Any:
    """The message ``encode`` was given (or an earlier build's nested form). Raises ``CodecError``."""
    if not data:
        raise CodecError("malformed msgpack: no data")
    first = data[0]
    if 0x90 <= first <= 0x9F or first in (0xDC, 0xDD):  # an array: a message as msgspec writes it
        try:
            return _decoder().decode(data)
        except CodecError:
            raise
        except msgspec.ValidationError as exc:
            text = str(exc)
            if text.startswith("Invalid value") and "$[0]" in text:
                tag = _tag_of(data)
                raise UnknownMessageType(tag) from None
            raise CodecError(f"malformed message: {exc}") from None
        except (msgspec.DecodeError, TypeError, ValueError) as exc:
            raise CodecError(f"malformed msgpack: {exc}") from None
    from messages import nested  # earlier builds' form: through msgpack

    return nested.decode(data)


def _tag_of(data: bytes) -> str:
    try:
        head = msgspec.msgpack.decode(data)[0]
    except Exception:
        return "?"
    return str(head)


def to_plain(value: Any) -> Any:
    """A JSON-friendly view of a message: dicts with a ``type`` key, ISO times, big ints as strings."""
    name = getattr(type(value), "MESSAGE_NAME", None)
    if name is not None:
        out: dict[str, Any] = {"type": name}
        for f in type(value).__struct_fields__:
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
