"""The capture's flat encoding: every message type round-trips; the codec's errors on bad input.

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
from capture.wire import BAD, EXT_TYPE_REF, CaptureDecoder, CaptureEncoder
from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType, decode, encode, registry
from messages.coins import Coin
from messages.scheduler import ActiveLeasesRead
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


def _round_trip(value):
    enc, dec = CaptureEncoder(), CaptureDecoder()
    data = enc.encode(value)
    dec.declare(tuple(tuple(t.to_wire()[:3]) + (tuple(t.fields),) for t in enc.take_new()))
    return dec.decode(data), dec.problems


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).MESSAGE_NAME)
def test_every_message_type_round_trips_like_the_codec(value):
    record = [0, 41, utc(2026, 3, 1, 12), "chain-io", "tenant/x", 40, value]
    got, problems = _round_trip(record)
    assert problems == []
    assert got == decode(encode(record)) == tuple(record)


def test_the_encoder_is_smaller_than_the_codec_and_declares_each_type_once():
    leases = SAMPLES[[type(s).MESSAGE_NAME for s in SAMPLES].index("lease")]
    record = [leases] * 50
    enc = CaptureEncoder()
    data = enc.encode(record)
    assert len(data) < len(encode(record)) / 2
    assert [t.name for t in enc.take_new()] == ["lease", "lease_item", "coin"]
    enc.encode(record)
    assert enc.take_new() == []


def test_encoder_refuses_what_the_codec_refuses():
    enc = CaptureEncoder()
    with pytest.raises(CodecError):
        enc.encode([object()])
    with pytest.raises(CodecError):
        enc.encode([datetime(2026, 3, 1)])  # naive
    got, _ = _round_trip([Coin("umfx", 3)])
    assert got == (Coin("umfx", 3),)


def _ref(index: int) -> msgpack.ExtType:
    return msgpack.ExtType(EXT_TYPE_REF, index.to_bytes(2, "big"))


def _decode_with(types, value):
    dec = CaptureDecoder()
    dec.declare(tuple((i, n, v, tuple(f)) for i, n, v, f in types))
    return dec.decode(msgpack.packb(value, use_bin_type=True)), dec.problems


def test_unknown_types_newer_schemas_and_bad_fields_become_codec_errors():
    got, problems = _decode_with([(0, "no_such_type", 1, ["x"])], [[_ref(0), 1], "after"])
    assert got == (BAD, "after") and isinstance(problems[0], UnknownMessageType)
    got, problems = _decode_with([(0, "coin", 7, ["denom", "amount"])], [[_ref(0), "umfx", 1]])
    assert got == (BAD,) and isinstance(problems[0], NewerSchemaVersion)
    got, problems = _decode_with([(0, "coin", 1, ["denom", "amount", "colour"])], [[_ref(0), "umfx", 1, "red"]])
    assert got == (BAD,) and "colour" in str(problems[0])
    # A value the message itself rejects (a bad denom) is a codec error, not a crash.
    got, problems = _decode_with([(0, "coin", 1, ["denom", "amount"])], [[_ref(0), "!", 1]])
    assert got == (BAD,) and isinstance(problems[0], CodecError)
    with pytest.raises(CodecError, match="before the file declared it"):
        _decode_with([], [[_ref(3), 1]])


def test_fields_are_matched_by_name_and_missing_ones_take_their_defaults():
    # An older writer without ``error``, with its fields in another order.
    got, problems = _decode_with(
        [(0, "credit_read_failed", 1, ["cycle"])], [[_ref(0), 4]]
    )
    assert problems and "lacks field 'error'" in str(problems[0])  # required: no default
    got, problems = _decode_with(
        [(0, "active_leases_read", 1, ["cycle"]), (1, "coin", 1, ["amount", "denom"])],
        [[_ref(0), 4], [_ref(1), 5, "umfx"]],
    )
    assert problems == [] and got == (ActiveLeasesRead(4), Coin("umfx", 5))


def test_decoder_only_raises_codec_errors_on_damaged_bytes():
    rng = random.Random(5)
    enc = CaptureEncoder()
    corpus = [enc.encode([0, i, utc(2026, 3, 1), "a", "b", 0, s]) for i, s in enumerate(SAMPLES[::3])]
    declared = tuple(tuple(t.to_wire()[:3]) + (tuple(t.fields),) for t in enc.take_new())
    decoded = 0
    for _ in range(1500):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data[: rng.randint(1, len(data))]) if rng.random() < 0.3 else bytes(data)
        dec = CaptureDecoder()
        dec.declare(declared)
        try:
            dec.decode(data)
        except CodecError:
            continue
        decoded += 1
    assert decoded >= 20  # some damaged bodies still decode (perhaps with BAD inside): no crash either way
