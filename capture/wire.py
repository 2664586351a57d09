"""A fast path to the message codec's wire format, for capture and replay.

``messages.codec`` defines the format: a registered message is an ext record
``[name, version, {field: value}]``, a big int is an ext of its digits, a
datetime is msgpack's timestamp. Its ``encode`` builds a Python copy of
every value before packing, and every nested message calls ``msgpack.packb``,
which allocates msgpack's 256 KiB buffer each time: a ``CreditRead`` (eight
nested messages) takes about 80 us to encode here, far too much for a tap
that sees every delivery, and its ``decode`` about 60 us, far too much for a
replay that must read 100,000 records a second.

``WireEncoder`` produces the *same bytes* (the tests check it against
``codec.encode``) by letting msgpack's C packer walk each value and calling
back only for messages and big ints, with one reusable packer per nesting
depth. ``WireDecoder`` produces equal values and raises the codec's errors
(``UnknownMessageType``, ``NewerSchemaVersion``, ``CodecError``); it keeps the
messages it decoded by their encoded bytes, since messages are immutable
values and the same lease, coin or failure recurs in record after record.
Neither is thread-safe: use one per thread.
"""

from __future__ import annotations

from typing import Any

import msgpack

from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType, registry

__all__ = ["WireEncoder", "WireDecoder"]

#: The codec's ext codes (``messages.codec``); part of the capture format.
EXT_MESSAGE = 1
EXT_BIG_INT = 2

#: Decoded messages remembered by their bytes. Bounded so that a long replay
#: does not grow without limit; the cache is emptied when full, which keeps
#: decoding deterministic (a hit and a miss give equal values either way).
DEFAULT_CACHE_ENTRIES = 65_536

_ExtType = msgpack.ExtType
_unpackb = msgpack.unpackb


class _Plan:
    __slots__ = ("name", "version", "fields")

    def __init__(self, name: str, version: int, fields: tuple[str, ...]) -> None:
        self.name = name
        self.version = version
        self.fields = fields


class WireEncoder:
    """``codec.encode``'s bytes, several times faster."""

    def __init__(self) -> None:
        # The top-level packer calls back into ``_default`` while it is in
        # the middle of a value, so a nested message must be packed by
        # another packer: one per depth, created once and reused.
        self._packers: list[msgpack.Packer] = []
        self._depth = 0
        self._plans: dict[type, _Plan] = {}
        self._top = self._new_packer()

    def _new_packer(self) -> msgpack.Packer:
        return msgpack.Packer(
            default=self._default, datetime=True, use_bin_type=True, autoreset=True, buf_size=4096
        )

    def _plan(self, cls: type) -> _Plan | None:
        name = getattr(cls, "MESSAGE_NAME", None)
        if name is None:
            return None
        plan = _Plan(name, cls.MESSAGE_VERSION, tuple(cls._message_fields))  # type: ignore[attr-defined]
        self._plans[cls] = plan
        return plan

    def _default(self, value: Any) -> Any:
        cls = type(value)
        plan = self._plans.get(cls) or self._plan(cls)
        if plan is not None:
            depth = self._depth
            if depth == len(self._packers):
                self._packers.append(self._new_packer())
            self._depth = depth + 1
            try:
                body = self._packers[depth].pack(
                    [plan.name, plan.version, {f: getattr(value, f) for f in plan.fields}]
                )
            finally:
                self._depth = depth
            return _ExtType(EXT_MESSAGE, body)
        if isinstance(value, int):  # msgpack hands over ints outside 64 bits
            return _ExtType(EXT_BIG_INT, str(value).encode("ascii"))
        if isinstance(value, frozenset):
            return list(value)
        raise CodecError(f"cannot encode a value of type {cls.__name__}")

    def encode(self, value: Any) -> bytes:
        """msgpack bytes for ``value``; raises ``CodecError`` for what the codec refuses."""
        try:
            return self._top.pack(value)
        except CodecError:
            self._reset()
            raise
        except Exception as exc:  # naive datetimes, recursion, ...
            self._reset()
            raise CodecError(f"cannot encode {type(value).__name__}: {exc}") from exc

    def _reset(self) -> None:
        # A failed pack leaves partial output in the packers' buffers.
        self._depth = 0
        self._top.reset()
        for p in self._packers:
            p.reset()


class WireDecoder:
    """``codec.decode``'s values and errors, with a cache of decoded messages."""

    def __init__(self, cache_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        self._cache: dict[bytes, Any] = {}
        self._cache_entries = cache_entries
        self._classes: dict[str, tuple[type, int, frozenset[str]]] = {}

    def _class(self, name: str) -> tuple[type, int, frozenset[str]]:
        found = self._classes.get(name)
        if found is not None:
            return found
        cls = registry().get(name)
        if cls is None:
            raise UnknownMessageType(name)
        found = (cls, cls.MESSAGE_VERSION, frozenset(cls._message_fields))  # type: ignore[attr-defined]
        self._classes[name] = found
        return found

    def _ext(self, code: int, data: bytes) -> Any:
        if code == EXT_MESSAGE:
            cached = self._cache.get(data)
            if cached is not None:
                return cached
            try:
                name, version, fields = _unpackb(
                    data, ext_hook=self._ext, timestamp=3, use_list=False, raw=False, strict_map_key=False
                )
            except CodecError:
                raise
            except Exception as exc:
                raise CodecError(f"malformed message record: {exc}") from exc
            if not isinstance(name, str) or not isinstance(version, int) or not isinstance(fields, dict):
                raise CodecError("message record is not [name, version, fields]")
            cls, known_version, known_fields = self._class(name)
            if version > known_version:
                raise NewerSchemaVersion(name, version, known_version)
            unknown = fields.keys() - known_fields
            if unknown:
                shown = ", ".join(sorted(map(str, unknown)))
                raise CodecError(f"message type {name!r} has no field(s) {shown}")
            try:
                value = cls(**fields)
            except (TypeError, ValueError) as exc:
                raise CodecError(f"message type {name!r}: {exc}") from exc
            cache = self._cache
            if len(cache) >= self._cache_entries:
                cache.clear()
            cache[data] = value
            return value
        if code == EXT_BIG_INT:
            try:
                return int(data.decode("ascii"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise CodecError(f"malformed big integer {data[:40]!r}") from exc
        raise CodecError(f"unknown ext type {code}")

    def decode(self, data: bytes) -> Any:
        """The value encoded in ``data``. Raises ``CodecError`` (or a subclass) only."""
        try:
            return _unpackb(
                data, ext_hook=self._ext, timestamp=3, use_list=False, raw=False, strict_map_key=False
            )
        except CodecError:
            raise
        except Exception as exc:  # malformed msgpack, recursion, bad UTF-8, ...
            raise CodecError(f"malformed msgpack: {exc}") from exc
