"""Helpers the conformance tests (``tests/test_conformance_*.py``) share.

Small chain-model worlds of this run's chain version, the codes and statuses
a refusal carries, and the wire's field numbers; see ``tests/CONFORMANCE.md``
for which test checks which fact of CHAIN-VERSIONS.md.
"""

from __future__ import annotations

from chain.errors import ChainError, QueryRefused
from chain.model import BillingModel, ChainParams
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock
from tests.support import OTHER, OTHER_ADDRESS, PROVIDER, PROVIDER_ADDRESS, addr, chain_model

P, PA = PROVIDER, PROVIDER_ADDRESS
#: The module authority of the models built here (``model_of``).
AUTHORITY = addr("gov")
#: A valid UUIDv7 that names no lease and no provider.
NOBODY = "019bbef3-b000-7fff-8000-000000000001"


def model_of(clock: ManualClock, **params: int) -> BillingModel:
    """A model of this run's version with our provider and another; ``params`` over one-second reservations."""
    m = chain_model(clock, params=ChainParams(**{"min_lease_duration": 1, **params}), authority=AUTHORITY)
    m.register_provider(P, PA)
    m.register_provider(OTHER, OTHER_ADDRESS)
    return m


def funded(model: BillingModel, label: str, amount: int, denom: str = "umfx") -> str:
    tenant = addr(label)
    model.fund_credit(tenant, [Coin(denom, amount)])
    return tenant


def lease(model: BillingModel, tenant: str, rate: int = 1, denom: str = "umfx", provider: str = P, **kw) -> str:
    return model.create_lease(tenant, provider, [LeaseItem("sku-1", 1, Coin(denom, rate))], **kw).uuid


def refused(call) -> tuple[str, int]:
    """(codespace, code) of the ChainError ``call`` raises; fails if it succeeds."""
    try:
        call()
    except ChainError as exc:
        return exc.codespace, exc.code
    raise AssertionError("the chain accepted it")


def query_status(call) -> str:
    """The gRPC status name of the ``QueryRefused`` ``call`` raises; fails if it answers."""
    try:
        call()
    except QueryRefused as exc:
        return exc.status
    raise AssertionError("the query answered")


def umfx(n: int) -> tuple[Coin, ...]:
    return (Coin("umfx", n),) if n else ()


def numbers(message) -> set[int]:
    """The field numbers a protobuf message carries on the wire."""
    return {field.number for field, _ in message.ListFields()}


def response(tx: abci_pb2.TxResponse, kind):
    """The first ``Msg*Response`` of an included tx's ``TxMsgData``."""
    out = kind()
    assert abci_pb2.TxMsgData.FromString(bytes.fromhex(tx.data)).msg_responses[0].Unpack(out)
    return out
