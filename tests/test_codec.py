"""Every registered message type survives msgpack; bad input gets a named error."""

from __future__ import annotations

import types
import typing
from datetime import datetime, timezone

import msgpack
import msgspec
import pytest

import messages
from messages.chain import Lease, LeaseItem
from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType, decode, encode, registry
from messages.coins import Coin, coins, format_coins, parse_coins

WHEN = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=timezone.utc)


def sample(annotation: typing.Any, depth: int = 0) -> typing.Any:
    """A non-trivial value of ``annotation`` (so a field dropped in transit would show)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        real = [a for a in args if a is not type(None)]
        return sample(real[0], depth)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return (sample(args[0], depth + 1), sample(args[0], depth + 1))
        return tuple(sample(a, depth + 1) for a in args)
    if annotation is str:
        return f"text-{depth}"
    if annotation is bool:
        return True
    if annotation is int:
        return 2**62 + depth  # near the top of msgpack's 64 bits (a coin's amount may go beyond: below)
    if annotation is bytes:
        return b"\x00key\xff"
    if annotation is datetime:
        return WHEN
    if annotation is typing.Any:
        return Coin("umfx", 5)
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return build(annotation, depth + 1)
    raise AssertionError(f"no sample for {annotation!r}")


def build(cls: type, depth: int = 0) -> typing.Any:
    hints = typing.get_type_hints(cls)
    values = {}
    for f in msgspec.structs.fields(cls):
        if cls is Coin and f.name == "denom":
            values[f.name] = "umfx"
        elif cls is Coin and f.name == "amount":
            values[f.name] = 2**200 + depth  # a Cosmos Int is 256-bit: must not become a float
        elif f.name == "kind":
            values[f.name] = "closed"
        else:
            values[f.name] = sample(hints[f.name], depth)
    return cls(**values)


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_registered_type_round_trips(name: str) -> None:
    cls = registry()[name]
    value = build(cls)
    assert decode(encode(value)) == value


def test_registry_covers_every_message_module() -> None:
    names = set(registry())
    for expected in ("lease", "credit_read", "withdraw_finished", "close_batch_call", "tenant_snapshot", "wake"):
        assert expected in names


def test_big_amounts_stay_integers() -> None:
    c = Coin("upwr", 2**255 - 19)
    back = decode(encode(c))
    assert back.amount == 2**255 - 19 and isinstance(back.amount, int)


def test_float_amount_is_refused() -> None:
    with pytest.raises(TypeError, match="int"):
        Coin("umfx", 1.5)  # type: ignore[arg-type]


def test_unknown_type_is_named() -> None:
    body = msgpack.packb(["no_such_message", 1, {}])
    data = msgpack.packb(msgpack.ExtType(1, body))
    with pytest.raises(UnknownMessageType, match="no_such_message"):
        decode(data)


def test_newer_schema_version_is_named() -> None:
    body = msgpack.packb(["lease_event", 99, {}])
    data = msgpack.packb(msgpack.ExtType(1, body))
    with pytest.raises(NewerSchemaVersion, match="lease_event.*99"):
        decode(data)


def test_garbage_is_a_codec_error() -> None:
    for junk in (b"\xc1", b"\xd4\x01", msgpack.packb(msgpack.ExtType(1, b"\x93\xa1x"))):
        with pytest.raises(CodecError):
            decode(junk)


def test_a_naive_datetime_reads_back_naive() -> None:
    """The clocks make aware times only; a naive one is not shifted to UTC on the way (msgspec writes it as text)."""
    lease = Lease("u", "t", "p", (LeaseItem("s", 1, Coin("umfx", 1)),), created_at=datetime(2026, 1, 1))
    back = decode(encode(lease))
    assert back == lease and back.created_at.tzinfo is None


def test_an_earlier_builds_nested_form_still_decodes() -> None:
    """Ledgers keep tenant snapshots in the form the codec wrote before msgspec: a restart reads them."""
    body = msgpack.packb(["coin", 1, {"denom": "umfx", "amount": msgpack.ExtType(2, str(2**100).encode())}])
    assert decode(msgpack.packb(msgpack.ExtType(1, body))) == Coin("umfx", 2**100)


def test_only_a_coin_amount_may_be_beyond_64_bits() -> None:
    from messages.tx_cost import TxCost

    with pytest.raises(CodecError):
        decode(encode(TxCost(gas_used=2**70)))


def test_coin_lists_are_canonical_and_parse() -> None:
    assert coins({"upwr": 3, "umfx": 0, "aaa": 1}) == (Coin("aaa", 1), Coin("upwr", 3))
    assert parse_coins("12umfx,3upwr") == (Coin("umfx", 12), Coin("upwr", 3))
    assert format_coins(parse_coins("7umfx")) == "7umfx"
    with pytest.raises(ValueError, match="12.5umfx"):
        parse_coins("12.5umfx")


def test_import_registers_everything() -> None:
    assert messages.registry() == registry()
