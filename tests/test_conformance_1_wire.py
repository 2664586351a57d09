"""Conformance, CHAIN-VERSIONS.md section 1: the wire, field by field, over real gRPC.

Each test is named by the fact it checks and runs once per chain version
against the devnet (``tests.devnet_harness``: loopback gRPC, blocks on a
manual clock). Field presence is read with protobuf's ``ListFields`` /
``HasField``: the project's protos carry the current schema, so a v2.1.0
devnet must leave the current-only fields unset, and a current one must set
them where the chain does.
"""

from __future__ import annotations

import hashlib
from datetime import timezone

import bech32

import grpc
import pytest

from chain.billing_pb import query_pb2, tx_pb2 as billing_tx, types_pb2
from chain.errors import SDK
from chain.sdk_errors import classify_text
from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service
from messages.chain import LeaseItem
from messages.coins import Coin
from tests.conformance_support import numbers, response
from tests.devnet_harness import OTHER_PROVIDER, PROVIDER, Raw, World
from tests.support import addr, chain_version

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")


def withdraw(raw: Raw, **fields) -> billing_tx.MsgWithdraw:
    return billing_tx.MsgWithdraw(sender=raw.key.address, **fields)


def test_1_1_msg_withdraw_key_is_field_5_on_current_and_refused_by_v21(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    leases = sorted(world.lease(t) for _ in range(3))
    world.clock.advance(10)
    keyed = withdraw(raw, provider_uuid=PROVIDER, limit=1, key=leases[0].encode())
    assert 5 in numbers(keyed)
    # An empty key is left off the wire: the message is a v2.1.0 message, accepted by both.
    assert withdraw(raw, provider_uuid=PROVIDER, limit=1, key=b"").SerializeToString() == withdraw(
        raw, provider_uuid=PROVIDER, limit=1
    ).SerializeToString()
    if chain_version().withdraw_cursor:
        out = response(raw.included(raw.sign([keyed])), billing_tx.MsgWithdrawResponse)
        assert (out.withdrawal_count, out.next_key) == (1, leases[1].encode())  # resumed after the key
    else:
        checked = raw.broadcast(raw.sign([keyed]))
        assert (checked.codespace, checked.code) == (SDK, 2)
        with pytest.raises(grpc.RpcError) as info:
            raw.txs.Simulate(tx_service.SimulateRequest(tx_bytes=raw.sign([keyed], gas=0, fee=0)))
        assert classify_text(info.value.details()) == (SDK, 2)
    plain = response(raw.included(raw.sign([withdraw(raw, provider_uuid=PROVIDER, limit=1)])), billing_tx.MsgWithdrawResponse)
    assert plain.withdrawal_count == 1


def test_1_2_msg_withdraw_response_fields_per_version(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    leases = sorted(world.lease(t) for _ in range(3))
    world.model.block_payouts([leases[0]])
    world.clock.advance(10)
    out = response(raw.included(raw.sign([withdraw(raw, provider_uuid=PROVIDER, limit=2)])), billing_tx.MsgWithdrawResponse)
    assert (out.withdrawal_count, out.has_more, out.payout_address) == (1, True, raw.key.address)
    if chain_version().withdraw_cursor:
        assert numbers(out) == {1, 2, 3, 4, 5, 6}
        assert (out.next_key, list(out.failed_lease_uuids)) == (leases[1].encode(), [leases[0]])
    else:
        assert numbers(out) == {1, 2, 3, 4}  # has_more with no next_key: the no-cursor signature


def test_1_3_close_lease_response_is_block_time_count_and_settled_amounts(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    a, b = world.lease(t, price=2), world.lease(t, price=3)
    start = world.model.lease(a).last_settled_at
    tx = raw.included(raw.sign([billing_tx.MsgCloseLease(sender=raw.key.address, lease_uuids=[a, b], reason="done")]))
    out = response(tx, billing_tx.MsgCloseLeaseResponse)
    block_time = world.node.time_of(tx.height)
    seconds = (block_time - start).total_seconds()
    assert out.closed_at.ToDatetime(tzinfo=block_time.tzinfo) == block_time
    assert out.closed_count == 2
    assert [(c.denom, c.amount) for c in out.total_settled_amounts] == [("umfx", str(int(5 * seconds)))]
    assert numbers(out) == {1, 2, 3}


def lease_zoo(world: World) -> dict[str, str]:
    """One lease in each state, created through the model (as tenants and the provider do)."""
    t = world.tenant("zoo")
    m = world.model
    item = [LeaseItem("sku-zoo", 3, Coin("umfx", 2))]
    zoo = {
        "PENDING": m.create_lease(t, PROVIDER, item, acknowledge=False, meta_hash=b"\x01\xff").uuid,
        "ACTIVE": world.lease(t),
        "CLOSED": world.lease(t),
        "REJECTED": m.create_lease(t, PROVIDER, item, acknowledge=False).uuid,
        "CANCELLED": m.create_lease(t, PROVIDER, item, acknowledge=False).uuid,
    }
    m.close_leases(t, [zoo["CLOSED"]], "moved")
    m.reject_lease(zoo["REJECTED"], "no capacity")
    m.cancel_lease(zoo["CANCELLED"])
    expiring = m.create_lease(t, PROVIDER, item, acknowledge=False).uuid
    world.clock.advance(world.config.devnet.pending_timeout.total_seconds() + 10)  # the node's end of block expires it
    assert m.lease(expiring).state == "EXPIRED"
    zoo["EXPIRED"] = expiring
    zoo["PENDING"] = m.create_lease(t, PROVIDER, item, acknowledge=False, meta_hash=b"\x01\xff").uuid  # a fresh one
    return zoo


def wire_lease(raw: Raw, uuid: str) -> types_pb2.Lease:
    return raw.billing.Lease(query_pb2.QueryLeaseRequest(lease_uuid=uuid)).lease


def test_1_4_lease_states_on_the_wire(world: World, raw: Raw) -> None:
    zoo = lease_zoo(world)
    states = {name: wire_lease(raw, u).state for name, u in zoo.items()}
    # REJECTED (4) is both a provider's reject and a tenant's cancel.
    assert states == {"PENDING": 1, "ACTIVE": 2, "CLOSED": 3, "REJECTED": 4, "CANCELLED": 4, "EXPIRED": 5}


def test_1_5_lease_item_fields(world: World, raw: Raw) -> None:
    zoo = lease_zoo(world)
    (item,) = wire_lease(raw, zoo["PENDING"]).items
    assert (item.sku_uuid, item.quantity, item.locked_price.denom, item.locked_price.amount) == ("sku-zoo", 3, "umfx", "2")
    assert numbers(item) == {1, 2, 3}  # service_name (4) and custom_domain (5) are not modelled: always empty


def test_1_6_lease_fields_and_reservation_field_16_only_on_current(world: World, raw: Raw) -> None:
    zoo = lease_zoo(world)
    leases = {name: wire_lease(raw, u) for name, u in zoo.items()}
    for name, lease in leases.items():
        assert lease.HasField("created_at") and lease.HasField("last_settled_at"), name  # non-null
        assert lease.min_lease_duration_at_creation == 1, name  # the test devnet's one second
        assert lease.HasField("acknowledged_at") == (name in ("ACTIVE", "CLOSED")), name
        assert lease.HasField("closed_at") == (name == "CLOSED"), name
        assert lease.HasField("rejected_at") == (name in ("REJECTED", "CANCELLED")), name
        assert lease.HasField("expired_at") == (name == "EXPIRED"), name
        assert lease.HasField("reservation") == chain_version().lease_reservation_field, name
    assert (leases["CLOSED"].closure_reason, leases["REJECTED"].rejection_reason) == ("moved", "no capacity")
    # The client ends a lease that never became active at the chain's own time: its expired_at or rejected_at.
    from chain.billing_codec import lease_from_proto

    for name in ("EXPIRED", "REJECTED", "CANCELLED"):
        wire = leases[name].expired_at if name == "EXPIRED" else leases[name].rejected_at
        assert lease_from_proto(leases[name]).ended_at == wire.ToDatetime(tzinfo=timezone.utc), name
    assert lease_from_proto(leases["ACTIVE"]).ended_at is None
    assert leases["PENDING"].meta_hash == b"\x01\xff"
    assert {n for lease in leases.values() for n in numbers(lease)} <= set(range(1, 17 if chain_version().lease_reservation_field else 16))
    if chain_version().lease_reservation_field:
        # A live lease holds its tranche (rate x 1 s); a terminal one has the wrapper, empty.
        assert [(c.denom, c.amount) for c in leases["PENDING"].reservation.remaining_amounts] == [("umfx", "6")]
        for name in ("CLOSED", "REJECTED", "CANCELLED", "EXPIRED"):
            assert list(leases[name].reservation.remaining_amounts) == [], name


def sdk_credit_address(tenant: str) -> str:
    """``address.Module("billing", sha256("billing/credit/" || tenant bytes))`` as the SDK derives it."""
    _, words = bech32.bech32_decode(tenant)
    key = hashlib.sha256(b"billing/credit/" + bytes(bech32.convertbits(words, 5, 8, False))).digest()
    derived = hashlib.sha256(hashlib.sha256(b"module").digest() + b"billing\x00" + key).digest()
    return bech32.bech32_encode("manifest", bech32.convertbits(derived, 8, 5))


def test_1_7_credit_account_fields_6_7_only_on_current(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    world.model.create_lease(t, PROVIDER, [LeaseItem("sku-1", 1, Coin("umfx", 4))], legacy=True)
    r = raw.billing.CreditAccount(query_pb2.QueryCreditAccountRequest(tenant=t))
    account = r.credit_account
    assert (account.tenant, account.credit_address) == (t, sdk_credit_address(t))
    assert (account.active_lease_count, account.pending_lease_count) == (1, 0)
    assert [(c.denom, c.amount) for c in account.reserved_amounts] == [("umfx", "4")]
    if chain_version().unattributed_fields:
        assert numbers(account) == {1, 2, 3, 5, 6, 7}  # 4 (pending count 0) is proto3's default, left off
        assert (account.unattributed_lease_count, account.unattributed_reserved_amounts[0].amount) == (1, "4")
    else:
        assert numbers(account) == {1, 2, 3, 5}
    # The address needs no account.
    stranger = addr("no-account")
    got = raw.billing.CreditAddress(query_pb2.QueryCreditAddressRequest(tenant=stranger)).credit_address
    assert got == sdk_credit_address(stranger)


def test_1_8_credit_account_query_pages_only_on_current(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    world.model.fund_credit(t, [Coin("upwr", 5)])
    request = query_pb2.QueryCreditAccountRequest(tenant=t, pagination=pagination_pb2.PageRequest(limit=1))
    r = raw.billing.CreditAccount(request)
    if chain_version().credit_account_pagination:
        assert r.HasField("pagination") and r.pagination.next_key == b"upwr"
        assert [c.denom for c in r.balances] == ["umfx"]
    else:
        assert not r.HasField("pagination")  # field 2 of the request is unknown to v2.1.0: ignored
        assert [c.denom for c in r.balances] == ["umfx", "upwr"]


def test_1_8_provider_withdrawable_reads_limit_on_v21_and_pagination_on_current(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    leases = sorted(world.lease(t) for _ in range(3))
    world.model.block_payouts([leases[0]])
    world.clock.advance(10)
    request = query_pb2.QueryProviderWithdrawableRequest(
        provider_uuid=PROVIDER, limit=1, pagination=pagination_pb2.PageRequest(limit=2)
    )
    r = raw.billing.ProviderWithdrawable(request)
    if chain_version().withdrawable_pagination:
        # Two leases of the page: the blocked one fails, the other counts.
        assert (r.lease_count, list(r.failed_lease_uuids), r.pagination.next_key) == (1, [leases[0]], leases[2].encode())
        assert numbers(r) == {1, 2, 4, 5}  # has_more (3) is reserved
    else:
        # One lease of the limit: v2.1.0 counts the blocked lease's withdrawable too (it is a read).
        assert (r.lease_count, r.has_more) == (1, True)
        assert numbers(r) == {1, 2, 3}


def test_1_8_the_other_billing_queries_answer_on_both_versions(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    ours, theirs = world.lease(t, price=3), world.lease(t, provider=OTHER_PROVIDER)
    world.clock.advance(10)
    by_tenant = raw.billing.LeasesByTenant(query_pb2.QueryLeasesByTenantRequest(tenant=t)).leases
    assert sorted(lease.uuid for lease in by_tenant) == sorted([ours, theirs])
    by_provider = raw.billing.LeasesByProvider(
        query_pb2.QueryLeasesByProviderRequest(provider_uuid=PROVIDER, state_filter=types_pb2.LEASE_STATE_ACTIVE)
    ).leases
    assert [lease.uuid for lease in by_provider] == [ours]
    amounts = raw.billing.WithdrawableAmount(query_pb2.QueryWithdrawableAmountRequest(lease_uuid=ours)).amounts
    assert [(c.denom, c.amount) for c in amounts] == [("umfx", "30")]  # 10 s of block time at 3/s
    estimate = raw.billing.CreditEstimate(query_pb2.QueryCreditEstimateRequest(tenant=t))
    assert (estimate.active_lease_count, estimate.estimated_duration_seconds) == (2, 10**9 // 13)


def test_1_9_acknowledge_and_reject_responses(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    m = world.model
    item = [LeaseItem("sku-1", 1, Coin("umfx", 1))]
    to_ack = [m.create_lease(t, PROVIDER, item, acknowledge=False).uuid for _ in range(2)]
    to_reject = [m.create_lease(t, PROVIDER, item, acknowledge=False).uuid for _ in range(2)]
    acked = raw.included(raw.sign([billing_tx.MsgAcknowledgeLease(sender=raw.key.address, lease_uuids=to_ack)]))
    out = response(acked, billing_tx.MsgAcknowledgeLeaseResponse)
    block_time = world.node.time_of(acked.height)
    assert (out.acknowledged_at.ToDatetime(tzinfo=block_time.tzinfo), out.acknowledged_count) == (block_time, 2)
    assert [m.lease(u).state for u in to_ack] == ["ACTIVE", "ACTIVE"]
    rejected = raw.included(
        raw.sign([billing_tx.MsgRejectLease(sender=raw.key.address, lease_uuids=to_reject, reason="full")])
    )
    out = response(rejected, billing_tx.MsgRejectLeaseResponse)
    block_time = world.node.time_of(rejected.height)
    assert (out.rejected_at.ToDatetime(tzinfo=block_time.tzinfo), out.rejected_count) == (block_time, 2)
    assert [wire_lease(raw, u).rejection_reason for u in to_reject] == ["full", "full"]
