"""Billing protobufs <-> the sidecar's typed chain values (``messages.chain``).

One place that knows both shapes: the cosmpy client reads protos into
``Lease``/``CreditAccount``/... and the devnet's gRPC server writes the
model's values as protos. Amounts stay integers (a proto ``Coin.amount`` is
a decimal string; a non-integer one is a protocol error, never rounded);
timestamps are UTC-aware datetimes (an unset proto timestamp is ``None``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable

from google.protobuf.timestamp_pb2 import Timestamp

from chain.billing_pb import query_pb2, types_pb2
from cosmpy.protos.cosmos.base.v1beta1 import coin_pb2
from messages.chain import LEASE_STATES, CreditAccount, CreditEstimate, Lease, LeaseItem
from messages.coins import Coin, coins

__all__ = [
    "ProtocolError",
    "coins_from_proto",
    "coins_to_proto",
    "time_from_proto",
    "time_to_proto",
    "lease_from_proto",
    "lease_to_proto",
    "lease_state_value",
    "credit_account_from_proto",
    "credit_account_to_proto",
    "credit_estimate_from_proto",
    "credit_estimate_to_proto",
]

_STATE_PREFIX = "LEASE_STATE_"


class ProtocolError(ValueError):
    """A node answered something that is not a valid billing value."""


def coins_from_proto(values: Iterable[coin_pb2.Coin]) -> tuple[Coin, ...]:
    out = []
    for c in values:
        text = c.amount.strip()
        if not text.lstrip("-").isdigit():
            raise ProtocolError(f"coin amount {c.amount!r} of {c.denom!r} is not an integer")
        try:
            out.append(Coin(c.denom, int(text)))
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
    return coins(out)


def coins_to_proto(values: Iterable[Coin]) -> list[coin_pb2.Coin]:
    return [coin_pb2.Coin(denom=c.denom, amount=str(c.amount)) for c in values]


def time_from_proto(ts: Timestamp, present: bool = True) -> datetime | None:
    if not present:
        return None
    return ts.ToDatetime(tzinfo=timezone.utc)


def time_to_rfc3339(value: datetime) -> str:
    """A time as CometBFT writes it in JSON and in ``TxResponse.timestamp``: UTC, to the microsecond."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def time_to_proto(value: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


def lease_state_value(name: str) -> int:
    """``"ACTIVE"`` -> ``LEASE_STATE_ACTIVE``'s number."""
    try:
        return LEASE_STATES.index(name)
    except ValueError:
        raise ProtocolError(f"unknown lease state {name!r}") from None


def lease_from_proto(p: types_pb2.Lease) -> Lease:
    state_name = types_pb2.LeaseState.Name(p.state) if p.state in types_pb2.LeaseState.values() else ""
    if not state_name.startswith(_STATE_PREFIX):
        raise ProtocolError(f"lease {p.uuid}: unknown state {p.state}")
    items = []
    for item in p.items:
        price = coins_from_proto([item.locked_price])
        if len(price) != 1:
            raise ProtocolError(f"lease {p.uuid}: item {item.sku_uuid} has no locked price")
        items.append(LeaseItem(sku_uuid=item.sku_uuid, quantity=item.quantity, locked_price=price[0]))
    return Lease(
        uuid=p.uuid,
        tenant=p.tenant,
        provider_uuid=p.provider_uuid,
        items=tuple(items),
        state=state_name[len(_STATE_PREFIX):],
        created_at=time_from_proto(p.created_at, p.HasField("created_at")),
        acknowledged_at=time_from_proto(p.acknowledged_at, p.HasField("acknowledged_at")),
        last_settled_at=time_from_proto(p.last_settled_at, p.HasField("last_settled_at")),
        closed_at=time_from_proto(p.closed_at, p.HasField("closed_at")),
        closure_reason=p.closure_reason,
        min_lease_duration_at_creation=p.min_lease_duration_at_creation,
        # Field 16 exists on the current chain only, on every lease it returns.
        reservation=coins_from_proto(p.reservation.remaining_amounts) if p.HasField("reservation") else None,
        ended_at=time_from_proto(p.expired_at, p.HasField("expired_at"))
        or time_from_proto(p.rejected_at, p.HasField("rejected_at")),
    )


def lease_to_proto(
    lease: Lease,
    *,
    rejected_at: datetime | None = None,
    rejection_reason: str = "",
    expired_at: datetime | None = None,
    meta_hash: bytes = b"",
) -> types_pb2.Lease:
    """A lease on the wire; ``reservation`` is written when the lease has one (current chain)."""
    p = types_pb2.Lease(
        uuid=lease.uuid,
        tenant=lease.tenant,
        provider_uuid=lease.provider_uuid,
        state=lease_state_value(lease.state),
        closure_reason=lease.closure_reason,
        rejection_reason=rejection_reason,
        meta_hash=meta_hash,
        min_lease_duration_at_creation=lease.min_lease_duration_at_creation,
        items=[
            types_pb2.LeaseItem(
                sku_uuid=i.sku_uuid,
                quantity=i.quantity,
                locked_price=coin_pb2.Coin(denom=i.locked_price.denom, amount=str(i.locked_price.amount)),
            )
            for i in lease.items
        ],
    )
    for name in ("created_at", "acknowledged_at", "last_settled_at", "closed_at"):
        value = getattr(lease, name)
        if value is not None:
            getattr(p, name).CopyFrom(time_to_proto(value))
    if rejected_at is not None:
        p.rejected_at.CopyFrom(time_to_proto(rejected_at))
    if expired_at is not None:
        p.expired_at.CopyFrom(time_to_proto(expired_at))
    if lease.reservation is not None:
        p.reservation.SetInParent()
        p.reservation.remaining_amounts.extend(coins_to_proto(lease.reservation))
    return p


def credit_account_from_proto(tenant: str, r: query_pb2.QueryCreditAccountResponse) -> CreditAccount:
    acct = r.credit_account
    return CreditAccount(
        tenant=acct.tenant or tenant,
        balances=coins_from_proto(r.balances),
        active_lease_count=acct.active_lease_count,
        pending_lease_count=acct.pending_lease_count,
        credit_address=acct.credit_address,
        reserved_amounts=coins_from_proto(acct.reserved_amounts),
        unattributed_reserved_amounts=coins_from_proto(acct.unattributed_reserved_amounts),
        unattributed_lease_count=acct.unattributed_lease_count,
        available_balances=coins_from_proto(r.available_balances),
    )


def credit_account_to_proto(account: CreditAccount) -> query_pb2.QueryCreditAccountResponse:
    """A ``CreditAccount`` answer; fields 6-7 and pagination are the caller's to add or leave out."""
    return query_pb2.QueryCreditAccountResponse(
        credit_account=types_pb2.CreditAccount(
            tenant=account.tenant,
            credit_address=account.credit_address,
            active_lease_count=account.active_lease_count,
            pending_lease_count=account.pending_lease_count,
            reserved_amounts=coins_to_proto(account.reserved_amounts),
            unattributed_reserved_amounts=coins_to_proto(account.unattributed_reserved_amounts),
            unattributed_lease_count=account.unattributed_lease_count,
        ),
        balances=coins_to_proto(account.balances),
        available_balances=coins_to_proto(account.available_balances),
    )


def credit_estimate_from_proto(tenant: str, r: query_pb2.QueryCreditEstimateResponse) -> CreditEstimate:
    return CreditEstimate(
        tenant=tenant,
        current_balance=coins_from_proto(r.current_balance),
        total_rate_per_second=coins_from_proto(r.total_rate_per_second),
        estimated_duration_seconds=r.estimated_duration_seconds,
        active_lease_count=r.active_lease_count,
    )


def credit_estimate_to_proto(estimate: CreditEstimate) -> query_pb2.QueryCreditEstimateResponse:
    return query_pb2.QueryCreditEstimateResponse(
        current_balance=coins_to_proto(estimate.current_balance),
        total_rate_per_second=coins_to_proto(estimate.total_rate_per_second),
        estimated_duration_seconds=estimate.estimated_duration_seconds,
        active_lease_count=estimate.active_lease_count,
    )
