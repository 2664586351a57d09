"""The two chain versions providers run, and every rule in which they differ.

``CHAIN-VERSIONS.md`` (section 6) lists the differences between the billing
module of v2.1.0 (tag of 2026-04-30) and of the current source; each field
below is one of them, named by the fact it models. The chain model
(``chain.model``) and the devnet's wire (``devnet``) read these fields and
nothing else to decide how a version behaves, so a difference lives here
once and a test can run the same case on both versions.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChainVersion", "CURRENT", "V2_1", "VERSIONS", "chain_version"]


@dataclass(frozen=True)
class ChainVersion:
    name: str
    #: 2.4: live settlement moves ``last_settled_at`` by the whole seconds
    #: charged (the fraction carries) instead of to the settlement time.
    carries_fraction: bool
    #: 2.4, 2.6: settlement is ``min(accrued, B - (R - A))`` from per-lease
    #: reservation tranches paid first, instead of ``min(accrued, B)``.
    reservation_isolation: bool
    #: 1.1, 1.2, 2.1: ``MsgWithdraw.key`` / ``next_key``: an exclusive cursor
    #: over ACTIVE leases. Without it every call restarts at the first lease
    #: (ACTIVE, then CLOSED) and ``has_more`` stays true past ``limit``.
    withdraw_cursor: bool
    #: 2.1, 1.2: a provider-wide page lists the leases it failed to settle.
    lists_failed_leases: bool
    #: 2.5, 3: provider-wide withdraw emits a ``provider_withdraw`` per lease
    #: (v2.1.0 emits only ``lease_auto_closed`` and ``batch_withdraw``).
    provider_wide_lease_events: bool
    #: 2.5, 3: an auto-close in a named withdraw shows the amount it settled
    #: and the payout address (v2.1.0: amount "0", no payout address).
    named_auto_close_amount: bool
    #: 3: ``lease_auto_closed`` also carries ``amount`` and ``payout_address``.
    auto_close_event_amounts: bool
    #: 3: ``batch_withdraw`` of a provider-wide call carries ``failed_*``.
    batch_withdraw_failures: bool
    #: 3: ``lease_created`` carries ``sender``.
    created_event_sender: bool
    #: 2.3: a close whose positive accrual was paid in full keeps the
    #: caller's role and reason even if the lease met the auto-close test.
    close_keeps_role_when_paid: bool
    #: 1.6: ``Lease.reservation`` (field 16).
    lease_reservation_field: bool
    #: 1.7: ``CreditAccount`` fields 6-7 (the legacy reservation cohort).
    unattributed_fields: bool
    #: 1.8, 2.8: ``CreditAccount`` query pages its balances.
    credit_account_pagination: bool
    #: 1.8, 2.8: ``ProviderWithdrawable`` pages by ``pagination`` (ACTIVE
    #: leases only, default 50, at most 100, a dry run of the withdraw) and
    #: answers ``failed_lease_uuids``; v2.1.0 takes ``limit`` (default 100,
    #: at most 1000) over leases of every state and answers ``has_more``.
    withdrawable_pagination: bool
    #: 2.7: CreditEstimate stops after this many leases (v2.1.0; the count
    #: then reads one more), or refuses past a work bound (current).
    estimate_lease_cap: int
    #: 2.7: a quotient at or beyond 2^64 saturates (current) or reads 0 (v2.1.0).
    estimate_saturates: bool
    #: 2.8: lease list queries cap ``limit`` at 1000 and bound offset scans.
    list_limit_cap: bool
    #: 2.9: acknowledging after ``created_at + pending_timeout`` fails (34).
    ack_deadline: bool
    #: 2.9: acknowledging past a tenant's ``max_leases_per_tenant`` ACTIVE leases fails (35).
    ack_active_cap: bool
    #: 4: the billing codes the version registers (1-33, or 1-40).
    max_error_code: int
    #: 2.1 (6): a provider-wide ``key`` over this many bytes is refused.
    max_withdraw_key: int = 64

    @property
    def label(self) -> str:
        return "v2.1.0" if self is V2_1 else "current"


CURRENT = ChainVersion(
    name="current",
    carries_fraction=True,
    reservation_isolation=True,
    withdraw_cursor=True,
    lists_failed_leases=True,
    provider_wide_lease_events=True,
    named_auto_close_amount=True,
    auto_close_event_amounts=True,
    batch_withdraw_failures=True,
    created_event_sender=True,
    close_keeps_role_when_paid=True,
    lease_reservation_field=True,
    unattributed_fields=True,
    credit_account_pagination=True,
    withdrawable_pagination=True,
    estimate_lease_cap=11_000,
    estimate_saturates=True,
    list_limit_cap=True,
    ack_deadline=True,
    ack_active_cap=True,
    max_error_code=40,
)

V2_1 = ChainVersion(
    name="v2.1",
    carries_fraction=False,
    reservation_isolation=False,
    withdraw_cursor=False,
    lists_failed_leases=False,
    provider_wide_lease_events=False,
    named_auto_close_amount=False,
    auto_close_event_amounts=False,
    batch_withdraw_failures=False,
    created_event_sender=False,
    close_keeps_role_when_paid=False,
    lease_reservation_field=False,
    unattributed_fields=False,
    credit_account_pagination=False,
    withdrawable_pagination=False,
    estimate_lease_cap=100,
    estimate_saturates=False,
    list_limit_cap=False,
    ack_deadline=False,
    ack_active_cap=False,
    max_error_code=33,
)

VERSIONS = {v.name: v for v in (CURRENT, V2_1)}


def chain_version(name: str) -> ChainVersion:
    """``"current"`` or ``"v2.1"``; a ValueError naming the choices otherwise."""
    try:
        return VERSIONS[name]
    except KeyError:
        raise ValueError(f"unknown chain version {name!r} (known: {', '.join(VERSIONS)})") from None
