"""Formats 1 to 3's flat encoding (which readers still read): every message type round-trips; errors on bad input.

The capture writes format 4 (``capture.typed``) since messages became
msgspec Structs; ``CaptureEncoder`` stays to write what older builds wrote,
so that these tests hold the reader of those formats to them.

A sample of every registered message type is built from its field types,
so a message added later is covered without touching this test.
"""

from __future__ import annotations

import dataclasses
import random

import msgspec
import types
import typing
from datetime import datetime, timedelta, timezone

import msgpack
import pytest

import messages  # noqa: F401  (registers every message type)
from capture.wire import (
    EXT_DEFINE,
    EXT_OBJECT_REF,
    EXT_TYPE_REF,
    CaptureDecoder,
    CaptureEncoder,
    Undecodable,
    first_undecodable,
)
from messages.chain import Lease, LeaseItem
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
        optional = type(None) in typing.get_args(tp)
        return None if optional and variant % 2 else _sample(args[0], name, depth, variant)
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
    # A module may name a message type only for its annotations (imported under
    # TYPE_CHECKING to avoid an import cycle): resolve such names from the registry.
    hints = typing.get_type_hints(cls, localns={c.__name__: c for c in registry().values()})
    values = {}
    for f in msgspec.structs.fields(cls):
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
    dec.declare(_declared(enc))
    return dec.decode(data), dec.problems


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).MESSAGE_NAME)
def test_every_message_type_round_trips_like_the_codec(value):
    record = [0, 41, utc(2026, 3, 1, 12), "chain-io", "tenant/x", 40, value]
    got, problems = _round_trip(record)
    assert problems == []
    assert got == tuple(record)


def test_the_encoder_interns_and_declares_each_type_once():
    leases = SAMPLES[[type(s).MESSAGE_NAME for s in SAMPLES].index("lease")]
    record = [leases] * 50
    enc = CaptureEncoder({"lease": "uuid"})
    data = enc.encode(record)
    assert len(data) < len(CaptureEncoder().encode(record)) / 10  # one definition, 49 back-references
    assert [t.name for t in enc.take_new()] == ["lease", "lease_item", "coin"]
    enc.encode(record)
    assert enc.take_new() == []


def test_encoder_refuses_what_the_codec_refuses():
    enc = CaptureEncoder()
    with pytest.raises(CodecError):
        enc.encode([object()])
    with pytest.raises(CodecError):
        enc.encode([datetime(2026, 3, 1)])  # naive
    data = enc.encode([Coin("umfx", 3)])  # the refusals left the encoder fit for use
    dec = CaptureDecoder()
    dec.declare(_declared(enc))
    assert dec.decode(data) == (Coin("umfx", 3),) and dec.problems == []


def _ref(index: int) -> msgpack.ExtType:
    return msgpack.ExtType(EXT_TYPE_REF, index.to_bytes(2, "big"))


def _why(value):
    """What an undecodable value says it is (its error), or the value itself."""
    return value.error if type(value) is Undecodable else value


def _decode_with(types, value):
    dec = CaptureDecoder()
    dec.declare(tuple((i, n, v, tuple(f)) for i, n, v, f in types))
    return dec.decode(msgpack.packb(value, use_bin_type=True)), dec.problems


def test_unknown_types_newer_schemas_and_bad_fields_become_codec_errors():
    got, problems = _decode_with([(0, "no_such_type", 1, ["x"])], [[_ref(0), 1], "after"])
    assert got[1] == "after" and isinstance(_why(got[0]), UnknownMessageType) and problems == [got[0].error]
    got, problems = _decode_with([(0, "coin", 7, ["denom", "amount"])], [[_ref(0), "umfx", 1]])
    assert isinstance(_why(got[0]), NewerSchemaVersion) and problems == [got[0].error]
    got, problems = _decode_with([(0, "coin", 1, ["denom", "amount", "colour"])], [[_ref(0), "umfx", 1, "red"]])
    assert "colour" in str(_why(got[0])) and problems == [got[0].error]
    # A value the message itself rejects (a bad denom) is a codec error, not a crash.
    got, problems = _decode_with([(0, "coin", 1, ["denom", "amount"])], [[_ref(0), "!", 1]])
    assert type(_why(got[0])) is CodecError and problems == [got[0].error]
    # A message that fails because a value inside it could not be decoded says
    # why that value failed, not that it was handed a value of the wrong type.
    # (A coin refuses an amount that is no int.)
    got, problems = _decode_with([(0, "coin", 1, ["denom", "amount"]), (1, "no_such", 1, ["x"])],
                                 [[_ref(0), "umfx", [_ref(1), 1]]])
    assert isinstance(_why(got[0]), UnknownMessageType) and "no_such" in str(got[0].error)
    # One that takes the value as it is holds it, and says so where it is found.
    got, problems = _decode_with(
        [(0, "coin", 1, ["denom", "amount"]), (1, "credit_account", 1, ["tenant", "balances"]), (2, "no_such", 1, ["x"])],
        [[_ref(1), "manifest1t", ([_ref(0), "umfx", 1], [_ref(2), 1])]],
    )
    assert got[0].balances[0] == Coin("umfx", 1) and first_undecodable(got) is got[0].balances[1]
    assert first_undecodable((1, "x", Coin("umfx", 1), {"k": (2,)})) is None
    with pytest.raises(CodecError, match="before the file declared it"):
        _decode_with([], [[_ref(3), 1]])


def test_fields_are_matched_by_name_and_missing_ones_take_their_defaults():
    # An older writer without ``error``, with its fields in another order.
    _, problems = _decode_with(
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
    declared = _declared(enc)
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
    assert decoded >= 20  # some damaged bodies still decode (perhaps with undecodable values inside): no crash either way


# -- interning: a repeated Lease is written once per file ------------------------------------


def _lease(n: int, settled: datetime | None = None) -> Lease:
    return Lease(
        f"lease-{n}", f"manifest1tenant{n}", "prov",
        (LeaseItem("sku-1", 1, Coin("umfx", 1 + n)),), last_settled_at=settled,
    )


def _declared(enc: CaptureEncoder) -> tuple:
    return tuple(tuple(t.to_wire()[:3]) + (tuple(t.fields),) for t in enc.take_new())


def test_an_interned_object_is_written_once_and_decodes_to_one_shared_object():
    leases = tuple(_lease(n) for n in range(20))
    read = ActiveLeasesRead(1, leases)
    plain, interned = CaptureEncoder(), CaptureEncoder({"lease": "uuid"})
    first, again = interned.encode([read]), interned.encode([ActiveLeasesRead(2, leases)])
    # The second read refers to the twenty leases: a few bytes each instead of the whole lease.
    assert len(first) == pytest.approx(len(plain.encode([read])), rel=0.2)
    assert len(again) < len(first) / 5
    dec = CaptureDecoder()
    dec.declare(_declared(interned))
    (got1,), (got2,) = dec.decode(first), dec.decode(again)
    assert dec.problems == []
    assert got1 == read and got2 == ActiveLeasesRead(2, leases)
    assert all(a is b for a, b in zip(got1.leases, got2.leases))
    # A changed lease is a new object: written whole, decoded as itself.
    changed = leases[:19] + (_lease(19, utc(2026, 3, 1)),)
    (got3,) = dec.decode(interned.encode([ActiveLeasesRead(3, changed)]))
    assert got3.leases == changed and got3.leases[0] is got1.leases[0] and got3.leases[19] is not got1.leases[19]


def test_a_new_file_starts_a_new_table_and_a_failed_encoding_interns_nothing():
    lease = _lease(1)
    enc = CaptureEncoder({"lease": "uuid"})
    enc.encode([lease])
    enc.new_file()
    body = enc.encode([lease])  # written whole again: a reader of the new file never saw it
    dec = CaptureDecoder()
    dec.declare(_declared(enc))
    assert dec.decode(body) == (lease,) and dec.problems == []
    other = _lease(2)
    with pytest.raises(CodecError):
        enc.encode([other, object()])  # fails after meeting `other`: those bytes are never written
    enc.check([other])  # a trial encoding keeps nothing either
    assert dec.decode(enc.encode([other, other])) == (other, other) and dec.problems == []


def test_references_to_objects_a_file_does_not_define_are_codec_errors():
    lease = _lease(1)
    enc = CaptureEncoder({"lease": "uuid"})
    enc.encode([lease])
    ref_only = enc.encode([lease, "fine"])  # a back-reference whose definition the decoder never saw
    dec = CaptureDecoder()
    dec.declare(_declared(enc))
    got = dec.decode(ref_only)
    assert got[1] == "fine" and "does not define before" in str(_why(got[0])) and dec.problems == [got[0].error]
    # A definition whose type failed: its later references fail with the same error.
    table = ((0, "lease_teleported", 1, ("lease_uuid",)),)
    define = msgpack.ExtType(EXT_DEFINE, (0).to_bytes(2, "big") + (0).to_bytes(4, "big"))
    ref = msgpack.ExtType(EXT_OBJECT_REF, (0).to_bytes(4, "big"))
    dec = CaptureDecoder()
    dec.declare(table)
    got = dec.decode(msgpack.packb([[define, "u"], ref]))
    assert [type(_why(v)) for v in got] == [UnknownMessageType, UnknownMessageType]
    assert dec.problems == [got[0].error, got[1].error]
    # The same object defined twice in one file is damaged data.
    dec = CaptureDecoder()
    dec.declare(((0, "coin", 1, ("denom", "amount")),))
    coin_def = msgpack.ExtType(EXT_DEFINE, (0).to_bytes(2, "big") + (3).to_bytes(4, "big"))
    got = dec.decode(msgpack.packb([[coin_def, "umfx", 1], [coin_def, "umfx", 2]]))
    assert got[0] == Coin("umfx", 1) and "defined twice" in str(_why(got[1])) and dec.problems == [got[1].error]


def test_a_lease_read_anew_is_referred_to_while_it_equals_the_version_last_written():
    """A node's client builds every lease afresh on every read: equal by value is what counts."""

    def read(settled_day: int, created=utc(2026, 3, 1)) -> Lease:
        # New objects all the way down, as a client decoding a response makes them.
        items = (LeaseItem("".join(["sku-", "1"]), 1, Coin("umfx", 3)),)
        return Lease("".join(["lease-", "1"]), "manifest1tenant", "prov", items, created_at=created,
                     last_settled_at=utc(2026, 3, settled_day))

    enc = CaptureEncoder({"lease": "uuid"})
    dec = CaptureDecoder()
    first = read(1)
    whole = enc.encode(first)
    dec.declare(_declared(enc))
    again = enc.encode(read(1))
    assert again != whole and len(again) < len(whole) / 5  # a back-reference
    settled = enc.encode(read(2))  # a settlement moved last_settled_at: written whole, the new version
    assert len(settled) == len(whole)
    later = enc.encode(read(2))
    assert len(later) < len(whole) / 5
    back = enc.encode(read(1))  # an older version again: it is no longer the last one written, so whole
    assert len(back) == len(whole)
    got = [dec.decode(b) for b in (whole, again, settled, later, back)]
    assert dec.problems == []
    assert got == [read(1), read(1), read(2), read(2), read(1)]
    assert got[1] is got[0] and got[3] is got[2] and got[4] is not got[0]
    # The same instant in another zone is equal (==), so referred to (a msgpack timestamp keeps no zone anyway).
    paris = timezone(timedelta(hours=1))
    elsewhere = read(1, created=utc(2026, 3, 1).astimezone(paris))
    assert len(enc.encode(elsewhere)) < len(whole) / 5


def test_the_encoder_keeps_one_version_of_each_lease_and_a_trial_encoding_keeps_none():
    enc = CaptureEncoder({"lease": "uuid"})
    for day in range(1, 29):
        enc.encode([_lease(n, utc(2026, 2, day)) for n in range(5)])
    assert sum(len(table) for table in enc._last.values()) == 5  # not 5 x 28: memory follows the leases, not their versions
    enc.check([_lease(99), _lease(4, utc(2026, 3, 9))])
    assert {k: v[0] for k, v in enc._last[Lease].items()} == {f"lease-{n}": _lease(n, utc(2026, 2, 28)) for n in range(5)}
    whole = len(CaptureEncoder({"lease": "uuid"}).encode(_lease(99)))
    assert len(enc.encode(_lease(99))) >= whole - 2  # written whole: the check's definition is gone
    assert len(enc.encode(_lease(4, utc(2026, 2, 28)))) < whole / 5  # still the version last written
    with pytest.raises(CodecError):
        CaptureEncoder({"lease": "no_such_field"}).encode(_lease(1))


# -- format 3: type marks are bins -------------------------------------------------------------


def test_type_marks_are_bins_and_an_older_files_array_beginning_with_bytes_stays_an_array():
    enc = CaptureEncoder()
    data = enc.encode([Coin("umfx", 1)])
    assert msgpack.unpackb(data) == [[b"\x00\x00", "umfx", 1]]  # no ext: the packer never leaves C for it
    table = _declared(enc)
    dec = CaptureDecoder()
    dec.declare(table)
    assert dec.decode(data) == (Coin("umfx", 1),)
    older = CaptureDecoder(format=2)
    older.declare(table)
    assert older.decode(data) == ((b"\x00\x00", "umfx", 1),)  # format 2 had no bin marks
    older.reset(3)  # the next file is format 3
    older.declare(table)
    assert older.decode(data) == (Coin("umfx", 1),)


def test_a_bytes_field_round_trips_beside_the_mark():
    from messages.chain_actor import WithdrawPageCall

    call = WithdrawPageCall(cycle=1, page=2, attempt=0, key=b"\x00\x00")  # looks like a type mark, is not one
    got, problems = _round_trip([call, call.key])
    assert problems == [] and got == (call, b"\x00\x00")


class _KeyList:
    """Shaped like a message (name, version, fields) but with a field a format 3 reader would misread."""

    MESSAGE_NAME = "key_list"
    MESSAGE_VERSION = 1
    __struct_fields__ = ("keys",)
    keys: tuple[bytes, ...]

    def __init__(self, keys: tuple[bytes, ...]) -> None:
        self.keys = keys


class _Loose:
    MESSAGE_NAME = "loose"
    MESSAGE_VERSION = 1
    __struct_fields__ = ("value",)
    value: typing.Any

    def __init__(self, value: typing.Any) -> None:
        self.value = value


def test_a_type_whose_field_could_begin_an_array_with_bytes_is_refused_by_name():
    enc = CaptureEncoder()
    with pytest.raises(CodecError, match="'key_list'.*'keys'.*beginning with bytes"):
        enc.encode([_KeyList((b"\x00\x00", b"x"))])
    with pytest.raises(CodecError, match="'loose'.*'value'"):
        enc.encode([_Loose(1)])
    assert enc.take_new() == []  # nothing declared for them


def test_bad_bin_marks_are_codec_errors():
    dec = CaptureDecoder()
    dec.declare(((0, "coin", 1, ("denom", "amount")),))
    with pytest.raises(CodecError, match="malformed type mark"):
        dec.decode(msgpack.packb([[b"\x00\x00\x00", 1]]))
    with pytest.raises(CodecError, match="0007 used before the file declared it"):
        dec.decode(msgpack.packb([[b"\x00\x07", 1]]))
    with pytest.raises(CodecError, match="0007 used before the file declared it"):
        dec.decode(msgpack.packb([[b"\x00\x07" + bytes(4), 1]]))
    assert dec.decode(msgpack.packb([[b"\x00\x00", "umfx", 1]])) == (Coin("umfx", 1),)


def test_a_reference_to_an_object_built_around_an_undecodable_value_is_undecodable_too():
    """A lease whose item has a newer schema: its definition and every later reference are bad alike."""
    enc = CaptureEncoder({"lease": "uuid"})
    lease = _lease(1)
    first, later = enc.encode([lease]), enc.encode([lease, "fine"])
    table = tuple((t.index, t.name, 99 if t.name == "lease_item" else t.version, tuple(t.fields)) for t in enc.declared)
    dec = CaptureDecoder()
    dec.declare(table)
    (defined,) = dec.decode(first)
    assert isinstance(_why(first_undecodable(defined)), NewerSchemaVersion)
    got = dec.decode(later)
    assert isinstance(_why(got[0]), NewerSchemaVersion) and got[1] == "fine" and dec.problems
