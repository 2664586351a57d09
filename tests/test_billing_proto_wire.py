"""The billing protos put CHAIN.md's field numbers on the wire.

Expected bytes are written out by hand from the protobuf encoding rules
(tag = field_number << 3 | wire_type; varint 0, length-delimited 2), so a
wrong field number or type in ``chain/proto`` fails here, not on a node.
"""

from __future__ import annotations

from datetime import datetime, timezone

from google.protobuf.any_pb2 import Any as ProtoAny

from chain.billing_codec import lease_from_proto, lease_to_proto
from chain.billing_pb import query_pb2, tx_pb2, types_pb2
from messages.chain import Lease, LeaseItem
from messages.coins import Coin


def test_msg_withdraw_provider_wide_wire_bytes() -> None:
    msg = tx_pb2.MsgWithdraw(sender="manifest1abc", provider_uuid="p-1", limit=300, key=b"k\x01")
    expected = (
        b"\x0a\x0c" + b"manifest1abc"  # field 1 (sender), length-delimited, 12 bytes
        + b"\x1a\x03" + b"p-1"  # field 3 (provider_uuid), 3 bytes
        + b"\x20\xac\x02"  # field 4 (limit) varint 300 = 0b10_0101100 -> 0xac 0x02
        + b"\x2a\x02" + b"k\x01"  # field 5 (key), bytes
    )
    assert msg.SerializeToString() == expected


def test_msg_withdraw_named_leases_wire_bytes() -> None:
    msg = tx_pb2.MsgWithdraw(sender="s", lease_uuids=["a", "bc"])
    assert msg.SerializeToString() == b"\x0a\x01s" + b"\x12\x01a" + b"\x12\x02bc"


def test_msg_close_lease_wire_bytes() -> None:
    msg = tx_pb2.MsgCloseLease(sender="manifest1xy", lease_uuids=["u1", "u2"], reason="credit depleted")
    expected = (
        b"\x0a\x0b" + b"manifest1xy"  # field 1 (sender)
        + b"\x12\x02u1" + b"\x12\x02u2"  # field 2 (lease_uuids), repeated string, one tag each
        + b"\x1a\x0f" + b"credit depleted"  # field 3 (reason), 15 bytes
    )
    assert msg.SerializeToString() == expected


def test_msg_withdraw_response_parses_hand_written_bytes() -> None:
    coin = b"\x0a\x04umfx" + b"\x12\x044200"  # Coin{denom=1: "umfx", amount=2: "4200"}
    wire = (
        b"\x0a" + bytes([len(coin)]) + coin  # field 1 total_amounts
        + b"\x12\x03pay"  # field 2 payout_address
        + b"\x18\x07"  # field 3 withdrawal_count = 7
        + b"\x20\x01"  # field 4 has_more = true
        + b"\x2a\x03nk1"  # field 5 next_key
    )
    r = tx_pb2.MsgWithdrawResponse.FromString(wire)
    assert (r.total_amounts[0].denom, r.total_amounts[0].amount) == ("umfx", "4200")
    assert r.payout_address == "pay"
    assert r.withdrawal_count == 7
    assert r.has_more is True
    assert r.next_key == b"nk1"


def test_msg_close_lease_response_field_numbers() -> None:
    r = tx_pb2.MsgCloseLeaseResponse(closed_count=2)
    r.closed_at.seconds = 1
    assert r.SerializeToString() == b"\x0a\x02\x08\x01" + b"\x10\x02"


def test_type_urls_are_the_chain_names() -> None:
    packed = ProtoAny()
    packed.Pack(tx_pb2.MsgWithdraw(), type_url_prefix="/")
    assert packed.type_url == "/liftedinit.billing.v1.MsgWithdraw"
    packed.Pack(tx_pb2.MsgCloseLease(), type_url_prefix="/")
    assert packed.type_url == "/liftedinit.billing.v1.MsgCloseLease"


def test_lease_state_and_query_field_numbers() -> None:
    assert types_pb2.LeaseState.Value("LEASE_STATE_ACTIVE") == 2
    assert types_pb2.LeaseState.Value("LEASE_STATE_EXPIRED") == 5
    req = query_pb2.QueryLeasesByProviderRequest(provider_uuid="p", state_filter=types_pb2.LEASE_STATE_ACTIVE)
    req.pagination.key = b"k"
    req.pagination.limit = 2
    # field 1 "p"; field 2 PageRequest{key=1: "k", limit=3: 2}; field 3 enum 2
    assert req.SerializeToString() == b"\x0a\x01p" + b"\x12\x05\x0a\x01k\x18\x02" + b"\x18\x02"
    lease = types_pb2.Lease(uuid="u", min_lease_duration_at_creation=1)
    assert lease.SerializeToString() == b"\x0a\x01u" + b"\x78\x01"  # field 15 varint: (15<<3)|0 = 0x78


def test_lease_round_trips_through_proto() -> None:
    t = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    lease = Lease(
        uuid="u1",
        tenant="manifest1t",
        provider_uuid="p",
        items=(LeaseItem("sku", 3, Coin("upwr", 10**30)),),
        state="CLOSED",
        created_at=t,
        acknowledged_at=t,
        last_settled_at=t,
        closed_at=t,
        closure_reason="credit depleted",
    )
    assert lease_from_proto(types_pb2.Lease.FromString(lease_to_proto(lease).SerializeToString())) == lease


def test_block_times_keep_their_microseconds_through_rfc3339():
    """A settlement's time is its block's: a truncated second could move it into the month before."""
    from datetime import datetime, timedelta, timezone

    from chain.billing_codec import time_to_rfc3339
    from chain.cosmpy_client import parse_block_time

    last = datetime(2026, 3, 31, 23, 59, 59, 999_999, tzinfo=timezone.utc)
    assert time_to_rfc3339(last) == "2026-03-31T23:59:59.999999Z"
    assert parse_block_time(time_to_rfc3339(last)) == last
    paris = last.astimezone(timezone(timedelta(hours=2)))
    assert time_to_rfc3339(paris) == "2026-03-31T23:59:59.999999Z"
