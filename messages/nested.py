"""The nested form earlier builds' codec wrote one message in: read only.

``[name, version, {field: value}]`` packed in an ext record (code 1), nested
messages likewise, big ints as the big-int ext (code 2). Ledgers written by
those builds hold tenant snapshots in it, and a restart must still read
them; new snapshots are written as ``messages.codec.encode`` writes. This
is the one use of msgpack outside the readers of old capture formats.
"""

from __future__ import annotations

from typing import Any

import msgpack

from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType, decode_big_int, registry

__all__ = ["decode", "build"]

_EXT_MESSAGE = 1
_EXT_BIG_INT = 2


def build(name: Any, version: Any, fields: Any) -> Any:
    """The message ``name`` from its fields by name; raises ``CodecError`` naming what is wrong."""
    if not isinstance(name, str) or not isinstance(version, int) or not isinstance(fields, dict):
        raise CodecError("message record is not [name, version, fields]")
    cls = registry().get(name)
    if cls is None:
        raise UnknownMessageType(name)
    if version > cls.MESSAGE_VERSION:  # type: ignore[attr-defined]
        raise NewerSchemaVersion(name, version, cls.MESSAGE_VERSION)  # type: ignore[attr-defined]
    known = set(cls.__struct_fields__)  # type: ignore[attr-defined]
    unknown = [k for k in fields if k not in known]
    if unknown:
        raise CodecError(f"message type {name!r} has no field(s) {', '.join(map(str, unknown))}")
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"message type {name!r}: {exc}") from exc


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_BIG_INT:
        return decode_big_int(data)
    if code == _EXT_MESSAGE:
        try:
            name, version, fields = msgpack.unpackb(
                data, ext_hook=_ext_hook, timestamp=3, use_list=False, raw=False, strict_map_key=False
            )
        except CodecError:
            raise
        except Exception as exc:  # any malformed body is a codec error
            raise CodecError(f"malformed message record: {exc}") from exc
        return build(name, version, fields)
    raise CodecError(f"unknown ext type {code}")


def decode(data: bytes) -> Any:
    """The value in ``data`` (nested form). Raises ``CodecError`` (or a subclass)."""
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, timestamp=3, use_list=False, raw=False, strict_map_key=False)
    except CodecError:
        raise
    except Exception as exc:
        raise CodecError(f"malformed msgpack: {exc}") from exc
