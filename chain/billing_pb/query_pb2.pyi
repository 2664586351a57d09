from cosmpy.protos.cosmos.base.v1beta1 import coin_pb2 as _coin_pb2
from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2 as _pagination_pb2
from chain.billing_pb import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueryLeaseRequest(_message.Message):
    __slots__ = ("lease_uuid",)
    LEASE_UUID_FIELD_NUMBER: _ClassVar[int]
    lease_uuid: str
    def __init__(self, lease_uuid: _Optional[str] = ...) -> None: ...

class QueryLeaseResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: _types_pb2.Lease
    def __init__(self, lease: _Optional[_Union[_types_pb2.Lease, _Mapping]] = ...) -> None: ...

class QueryLeasesByTenantRequest(_message.Message):
    __slots__ = ("tenant", "pagination", "state_filter")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FILTER_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    pagination: _pagination_pb2.PageRequest
    state_filter: _types_pb2.LeaseState
    def __init__(self, tenant: _Optional[str] = ..., pagination: _Optional[_Union[_pagination_pb2.PageRequest, _Mapping]] = ..., state_filter: _Optional[_Union[_types_pb2.LeaseState, str]] = ...) -> None: ...

class QueryLeasesByTenantResponse(_message.Message):
    __slots__ = ("leases", "pagination")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[_types_pb2.Lease]
    pagination: _pagination_pb2.PageResponse
    def __init__(self, leases: _Optional[_Iterable[_Union[_types_pb2.Lease, _Mapping]]] = ..., pagination: _Optional[_Union[_pagination_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class QueryLeasesByProviderRequest(_message.Message):
    __slots__ = ("provider_uuid", "pagination", "state_filter")
    PROVIDER_UUID_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FILTER_FIELD_NUMBER: _ClassVar[int]
    provider_uuid: str
    pagination: _pagination_pb2.PageRequest
    state_filter: _types_pb2.LeaseState
    def __init__(self, provider_uuid: _Optional[str] = ..., pagination: _Optional[_Union[_pagination_pb2.PageRequest, _Mapping]] = ..., state_filter: _Optional[_Union[_types_pb2.LeaseState, str]] = ...) -> None: ...

class QueryLeasesByProviderResponse(_message.Message):
    __slots__ = ("leases", "pagination")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[_types_pb2.Lease]
    pagination: _pagination_pb2.PageResponse
    def __init__(self, leases: _Optional[_Iterable[_Union[_types_pb2.Lease, _Mapping]]] = ..., pagination: _Optional[_Union[_pagination_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class QueryCreditAccountRequest(_message.Message):
    __slots__ = ("tenant", "pagination")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    pagination: _pagination_pb2.PageRequest
    def __init__(self, tenant: _Optional[str] = ..., pagination: _Optional[_Union[_pagination_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class QueryCreditAccountResponse(_message.Message):
    __slots__ = ("credit_account", "balances", "available_balances", "pagination")
    CREDIT_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    BALANCES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_BALANCES_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    credit_account: _types_pb2.CreditAccount
    balances: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    available_balances: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    pagination: _pagination_pb2.PageResponse
    def __init__(self, credit_account: _Optional[_Union[_types_pb2.CreditAccount, _Mapping]] = ..., balances: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., available_balances: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., pagination: _Optional[_Union[_pagination_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class QueryCreditAddressRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class QueryCreditAddressResponse(_message.Message):
    __slots__ = ("credit_address",)
    CREDIT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    credit_address: str
    def __init__(self, credit_address: _Optional[str] = ...) -> None: ...

class QueryWithdrawableAmountRequest(_message.Message):
    __slots__ = ("lease_uuid",)
    LEASE_UUID_FIELD_NUMBER: _ClassVar[int]
    lease_uuid: str
    def __init__(self, lease_uuid: _Optional[str] = ...) -> None: ...

class QueryWithdrawableAmountResponse(_message.Message):
    __slots__ = ("amounts",)
    AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    amounts: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    def __init__(self, amounts: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ...) -> None: ...

class QueryProviderWithdrawableRequest(_message.Message):
    __slots__ = ("provider_uuid", "limit", "pagination")
    PROVIDER_UUID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    provider_uuid: str
    limit: int
    pagination: _pagination_pb2.PageRequest
    def __init__(self, provider_uuid: _Optional[str] = ..., limit: _Optional[int] = ..., pagination: _Optional[_Union[_pagination_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class QueryProviderWithdrawableResponse(_message.Message):
    __slots__ = ("amounts", "lease_count", "has_more", "pagination", "failed_lease_uuids")
    AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    FAILED_LEASE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    amounts: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    lease_count: int
    has_more: bool
    pagination: _pagination_pb2.PageResponse
    failed_lease_uuids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, amounts: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., lease_count: _Optional[int] = ..., has_more: bool = ..., pagination: _Optional[_Union[_pagination_pb2.PageResponse, _Mapping]] = ..., failed_lease_uuids: _Optional[_Iterable[str]] = ...) -> None: ...

class QueryCreditEstimateRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class QueryCreditEstimateResponse(_message.Message):
    __slots__ = ("current_balance", "total_rate_per_second", "estimated_duration_seconds", "active_lease_count")
    CURRENT_BALANCE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RATE_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_LEASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    current_balance: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    total_rate_per_second: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    estimated_duration_seconds: int
    active_lease_count: int
    def __init__(self, current_balance: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., total_rate_per_second: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., estimated_duration_seconds: _Optional[int] = ..., active_lease_count: _Optional[int] = ...) -> None: ...

class QueryCreditAccountsRequest(_message.Message):
    __slots__ = ("pagination",)
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    pagination: _pagination_pb2.PageRequest
    def __init__(self, pagination: _Optional[_Union[_pagination_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class QueryCreditAccountsResponse(_message.Message):
    __slots__ = ("credit_accounts", "pagination")
    CREDIT_ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    PAGINATION_FIELD_NUMBER: _ClassVar[int]
    credit_accounts: _containers.RepeatedCompositeFieldContainer[_types_pb2.CreditAccount]
    pagination: _pagination_pb2.PageResponse
    def __init__(self, credit_accounts: _Optional[_Iterable[_Union[_types_pb2.CreditAccount, _Mapping]]] = ..., pagination: _Optional[_Union[_pagination_pb2.PageResponse, _Mapping]] = ...) -> None: ...
