"""The capture's fast codec path gives the codec's bytes, values and errors.

A sample of every registered message type is built from its field types,
so a message added later is covered without touching this test.
"""

from __future__ import annotations

import dataclasses
import random
import types
import typing
from datetime import datetime, timedelta

import msgpack
import pytest

import messages  # noqa: F401  (registers every message type)
from capture.wire import WireDecoder, WireEncoder
from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType, decode, encode, registry
from messages.coins import Coin
from runtime.clock import utc

#: Values for fields whose type alone does not say what is valid.
_NAMED = {
    "denom": "umfx",
    "kind": "created",
    "reason": "interval",
    "state": "ACTIVE",
}


def _sample(tp: typing.Any, name: str, depth: int, variant: int) -> typing.Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if variant % 2 else _sample(args[0], name, depth, variant)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_sample(args[0], name, depth + 1, variant + i) for i in range(2))
        return tuple(_sample(a, name, depth + 1, variant) for a in args)
    if tp is str:
        return _NAMED.get(name, f"{name}-{variant}")
    if tp is bool:
        return bool(variant % 2)
    if tp is int:
        # Big ints (a Cosmos Int is 256-bit) must go through the big-int ext.
        return [7, 2**70 + variant, -5, 0][variant % 4] if name not in ("version",) else 1
    if tp is float:
        return 1.5
    if tp is bytes:
        return b"\x00key"
    if tp is datetime:
        return utc(2026, 3, 1) + timedelta(seconds=variant, microseconds=17)
    if isinstance(tp, type) and hasattr(tp, "MESSAGE_NAME"):
        return _instance(tp, depth + 1, variant)
    raise NotImplementedError(f"no sample for {tp!r} ({name})")


def _instance(cls: type, depth: int = 0, variant: int = 0) -> typing.Any:
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        values[f.name] = _sample(hints[f.name], f.name, depth, variant)
    if cls is Coin:
        values["amount"] = abs(values["amount"])
    return cls(**values)


def _samples() -> list[typing.Any]:
    out = []
    for name, cls in sorted(registry().items()):
        for variant in range(3):
            out.append(_instance(cls, 0, variant))
    return out


SAMPLES = _samples()


def test_every_registered_type_has_a_sample():
    assert {type(s).MESSAGE_NAME for s in SAMPLES} == set(registry())


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).MESSAGE_NAME)
def test_encoder_gives_the_codec_bytes_and_decoder_its_values(value):
    record = [0, 41, utc(2026, 3, 1, 12), "chain-io", "tenant/x", 40, value]
    enc = WireEncoder()
    data = enc.encode(record)
    assert data == encode(record)
    assert enc.encode(record) == data  # the reused packers hold nothing back
    dec = WireDecoder()
    assert dec.decode(data) == decode(data)
    assert dec.decode(data) == tuple(record)  # a second time, from the cache


def test_encoder_refuses_what_the_codec_refuses():
    enc = WireEncoder()
    with pytest.raises(CodecError):
        enc.encode([object()])
    with pytest.raises(CodecError):
        enc.encode([datetime(2026, 3, 1)])  # naive
    # A failed encode leaves nothing behind in the packers.
    assert enc.encode([Coin("umfx", 3)]) == encode([Coin("umfx", 3)])


def _ext(name, version, fields):
    return msgpack.ExtType(1, msgpack.packb([name, version, fields], use_bin_type=True))


def test_decoder_raises_the_codec_errors():
    dec = WireDecoder()
    with pytest.raises(UnknownMessageType, match="no_such_type"):
        dec.decode(msgpack.packb([_ext("no_such_type", 1, {})]))
    with pytest.raises(NewerSchemaVersion, match="coin"):
        dec.decode(msgpack.packb([_ext("coin", 9, {"denom": "umfx", "amount": 1})]))
    with pytest.raises(CodecError, match="no field"):
        dec.decode(msgpack.packb([_ext("coin", 1, {"denom": "umfx", "amount": 1, "x": 2})]))
    # A value the message itself rejects (a bad denom) is a codec error, not a crash.
    with pytest.raises(CodecError):
        dec.decode(msgpack.packb([_ext("coin", 1, {"denom": "!", "amount": 1})]))


def test_decoder_agrees_with_the_codec_on_damaged_bytes():
    rng = random.Random(5)
    corpus = [encode([0, i, utc(2026, 3, 1), "a", "b", 0, s]) for i, s in enumerate(SAMPLES[::3])]
    dec = WireDecoder(cache_entries=8)  # small: the cache empties and refills along the way
    checked = 0
    for _ in range(1500):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
        data = bytes(data[: rng.randint(1, len(data))]) if rng.random() < 0.3 else bytes(data)
        try:
            expected = decode(data)
        except CodecError as exc:
            with pytest.raises(type(exc)):
                dec.decode(data)
            continue
        except Exception:  # the codec lets a message's own ValueError through
            with pytest.raises(CodecError):
                dec.decode(data)
            continue
        assert dec.decode(data) == expected
        checked += 1
    assert checked > 50  # some damaged records still decode: both sides agree on them
