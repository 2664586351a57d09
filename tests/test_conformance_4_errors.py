"""Conformance, CHAIN-VERSIONS.md section 4: how errors reach a client, over real gRPC to the devnet.

Query refusals are gRPC statuses with the querier's own messages (never
billing codes); tx failures are ``codespace``/``code``/``raw_log`` in the
``TxResponse``: at CheckTx for what ``ValidateBasic`` refuses, at inclusion
for what the message handler refuses, worded with the registered
descriptions of ``x/billing/types/errors.go``. Each test runs once per
chain version, named by the fact it checks.
"""

from __future__ import annotations

import grpc
import pytest

from chain.billing_pb import query_pb2, tx_pb2 as billing_tx
from chain.errors import BILLING
from chain.sdk_errors import DESCRIPTIONS
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service
from tests.conformance_support import NOBODY
from tests.devnet_harness import PROVIDER, Raw, World
from tests.support import addr, chain_version

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

#: CHAIN-VERSIONS.md 4, the table: code -> message (20 as the current chain words it).
REGISTERED = {
    1: "invalid params", 2: "lease not found", 3: "lease not active", 4: "insufficient credit balance",
    5: "maximum leases per tenant reached", 6: "unauthorized", 7: "reserved", 8: "credit account not found",
    9: "invalid lease", 10: "sku not found", 11: "sku not active", 12: "provider not found",
    13: "provider not active", 14: "all SKUs in a lease must belong to the same provider",
    15: "no withdrawable amount", 16: "lease must contain at least one item",
    17: "quantity must be greater than zero", 18: "duplicate sku in lease items", 19: "invalid credit operation",
    20: "billing arithmetic overflow", 21: "too many items in lease", 22: "lease not in pending state",
    23: "maximum pending leases per tenant reached", 24: "invalid rejection reason", 25: "invalid request",
    26: "invalid closure reason", 27: "invalid meta hash", 28: "invalid service name", 29: "invalid custom domain",
    30: "custom domain already claimed", 31: "lease state does not allow custom_domain edit",
    32: "lease item not found", 33: "lease item lookup is ambiguous", 34: "lease acknowledgement deadline exceeded",
    35: "lease acknowledgement active cap exceeded", 36: "billing reservation invariant violated",
    37: "tenant lease query limit exceeded", 38: "credit account reservation denomination limit exceeded",
}


def status(call) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    raise AssertionError("the query answered")


INVALID, NOT_FOUND, INTERNAL = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INTERNAL


def test_4_query_errors_are_grpc_statuses_with_the_queriers_messages(world: World, raw: Raw) -> None:
    q = raw.billing
    bad = "manifest1notanaddress"
    assert status(lambda: q.Lease(query_pb2.QueryLeaseRequest())) == (INVALID, "lease_uuid cannot be empty")
    assert status(lambda: q.Lease(query_pb2.QueryLeaseRequest(lease_uuid=NOBODY))) == (NOT_FOUND, "lease not found")
    for method, request in (
        (q.CreditAccount, query_pb2.QueryCreditAccountRequest),
        (q.CreditEstimate, query_pb2.QueryCreditEstimateRequest),
    ):
        assert status(lambda: method(request())) == (INVALID, "tenant cannot be empty")
        assert status(lambda: method(request(tenant=bad))) == (INVALID, "invalid tenant address")
        assert status(lambda: method(request(tenant=addr("nobody"))))[0] == NOT_FOUND
    assert status(lambda: q.CreditAddress(query_pb2.QueryCreditAddressRequest(tenant=bad))) == (INVALID, "invalid tenant address")
    assert status(lambda: q.LeasesByTenant(query_pb2.QueryLeasesByTenantRequest(tenant=bad))) == (INVALID, "invalid tenant address")
    assert status(lambda: q.WithdrawableAmount(query_pb2.QueryWithdrawableAmountRequest())) == (INVALID, "lease_uuid cannot be empty")
    assert status(lambda: q.WithdrawableAmount(query_pb2.QueryWithdrawableAmountRequest(lease_uuid=NOBODY)))[0] == NOT_FOUND
    assert status(lambda: q.ProviderWithdrawable(query_pb2.QueryProviderWithdrawableRequest())) == (
        INVALID, "provider_uuid cannot be empty"
    )
    assert status(lambda: q.LeasesByProvider(query_pb2.QueryLeasesByProviderRequest()))[0] == INVALID
    unknown = query_pb2.QueryProviderWithdrawableRequest(provider_uuid=NOBODY)
    not_uuid = query_pb2.QueryLeasesByProviderRequest(provider_uuid="not-a-uuid")
    if chain_version().withdrawable_pagination:
        assert status(lambda: q.ProviderWithdrawable(unknown))[0] == NOT_FOUND
        assert status(lambda: q.LeasesByProvider(not_uuid)) == (INVALID, "provider_uuid must be a valid UUIDv7")
    else:
        assert q.ProviderWithdrawable(unknown).lease_count == 0  # v2.1.0 answers an empty page
        assert list(q.LeasesByProvider(not_uuid).leases) == []


def test_4_a_store_failure_is_internal(world: World, raw: Raw) -> None:
    """B < R cannot be reached through messages; a corrupt store can, so the test corrupts it by hand."""
    t = world.tenant("t", umfx=100)
    u = world.lease(t)
    world.model._accounts[t].reserved["umfx"] = 10**6  # noqa: SLF001 (a corrupt record)
    world.clock.advance(10)
    request = query_pb2.QueryWithdrawableAmountRequest(lease_uuid=u)
    if chain_version().reservation_isolation:
        code, details = status(lambda: raw.billing.WithdrawableAmount(request))
        assert code == INTERNAL and "below its reservations" in details
    else:
        # v2.1.0 settles from the raw balance: reservations are not read.
        assert [c.amount for c in raw.billing.WithdrawableAmount(request).amounts] == ["100"]


def test_4_tx_errors_carry_codespace_code_and_raw_log_in_the_tx_response(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    active = world.lease(t)
    world.model.close_leases(t, [active])
    closed = raw.included(raw.sign([raw.close_msg(active)]))
    assert (closed.codespace, closed.code) == (BILLING, 3)
    assert closed.raw_log == f"failed to execute message; message index: 0: lease {active} is not active: lease not active"
    nothing = raw.included(raw.sign([billing_tx.MsgWithdraw(sender=raw.key.address, lease_uuids=[active])]))
    assert (nothing.codespace, nothing.code) == (BILLING, 15)
    assert nothing.raw_log.endswith(": no withdrawable amount") and nothing.data == ""


@pytest.mark.parametrize(
    "fields, code, description",
    [
        ({"lease_uuids": [NOBODY], "provider_uuid": PROVIDER}, 25, "invalid request"),
        ({"provider_uuid": PROVIDER, "limit": 101}, 9, "invalid lease"),
        ({"provider_uuid": "not-a-uuid"}, 12, "provider not found"),
        ({"lease_uuids": [NOBODY, NOBODY]}, 9, "invalid lease"),
    ],
)
def test_4_validate_basic_refuses_at_check_tx(world: World, raw: Raw, fields, code, description) -> None:
    signed = raw.sign([billing_tx.MsgWithdraw(sender=raw.key.address, **fields)])
    checked = raw.broadcast(signed)
    assert (checked.codespace, checked.code) == (BILLING, code)
    assert checked.raw_log.endswith(f": {description}")
    assert world.node.mempool_size() == 0 and world.node.get_tx(checked.txhash) is None
    unsigned = raw.sign([billing_tx.MsgWithdraw(sender=raw.key.address, **fields)], gas=0, fee=0)
    with pytest.raises(grpc.RpcError) as info:
        raw.txs.Simulate(tx_service.SimulateRequest(tx_bytes=unsigned))
    assert info.value.details().startswith(checked.raw_log)


def test_4_a_close_reason_over_256_bytes_is_refused_at_check_tx(world: World, raw: Raw) -> None:
    u = world.lease(world.tenant("t"))
    msg = billing_tx.MsgCloseLease(sender=raw.key.address, lease_uuids=[u], reason="é" * 129)
    checked = raw.broadcast(raw.sign([msg]))
    assert (checked.codespace, checked.code) == (BILLING, 26)
    assert raw.account().sequence == 0  # nothing entered the mempool, nothing was charged
    msg.reason = "é" * 128
    assert raw.included(raw.sign([msg])).code == 0


def test_4_registered_descriptions_of_each_version() -> None:
    assert {code: DESCRIPTIONS[(BILLING, code)] for code in REGISTERED} == REGISTERED
    assert chain_version().max_error_code == (40 if chain_version().name == "current" else 33)
