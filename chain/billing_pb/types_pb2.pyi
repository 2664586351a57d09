from cosmpy.protos.cosmos.base.v1beta1 import coin_pb2 as _coin_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_STATE_UNSPECIFIED: _ClassVar[LeaseState]
    LEASE_STATE_PENDING: _ClassVar[LeaseState]
    LEASE_STATE_ACTIVE: _ClassVar[LeaseState]
    LEASE_STATE_CLOSED: _ClassVar[LeaseState]
    LEASE_STATE_REJECTED: _ClassVar[LeaseState]
    LEASE_STATE_EXPIRED: _ClassVar[LeaseState]
LEASE_STATE_UNSPECIFIED: LeaseState
LEASE_STATE_PENDING: LeaseState
LEASE_STATE_ACTIVE: LeaseState
LEASE_STATE_CLOSED: LeaseState
LEASE_STATE_REJECTED: LeaseState
LEASE_STATE_EXPIRED: LeaseState

class LeaseItem(_message.Message):
    __slots__ = ("sku_uuid", "quantity", "locked_price", "service_name", "custom_domain")
    SKU_UUID_FIELD_NUMBER: _ClassVar[int]
    QUANTITY_FIELD_NUMBER: _ClassVar[int]
    LOCKED_PRICE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    sku_uuid: str
    quantity: int
    locked_price: _coin_pb2.Coin
    service_name: str
    custom_domain: str
    def __init__(self, sku_uuid: _Optional[str] = ..., quantity: _Optional[int] = ..., locked_price: _Optional[_Union[_coin_pb2.Coin, _Mapping]] = ..., service_name: _Optional[str] = ..., custom_domain: _Optional[str] = ...) -> None: ...

class LeaseReservation(_message.Message):
    __slots__ = ("remaining_amounts",)
    REMAINING_AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    remaining_amounts: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    def __init__(self, remaining_amounts: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("uuid", "tenant", "provider_uuid", "items", "state", "created_at", "closed_at", "last_settled_at", "acknowledged_at", "rejected_at", "rejection_reason", "expired_at", "closure_reason", "meta_hash", "min_lease_duration_at_creation", "reservation")
    UUID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_UUID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SETTLED_AT_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_AT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_AT_FIELD_NUMBER: _ClassVar[int]
    REJECTION_REASON_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_AT_FIELD_NUMBER: _ClassVar[int]
    CLOSURE_REASON_FIELD_NUMBER: _ClassVar[int]
    META_HASH_FIELD_NUMBER: _ClassVar[int]
    MIN_LEASE_DURATION_AT_CREATION_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    tenant: str
    provider_uuid: str
    items: _containers.RepeatedCompositeFieldContainer[LeaseItem]
    state: LeaseState
    created_at: _timestamp_pb2.Timestamp
    closed_at: _timestamp_pb2.Timestamp
    last_settled_at: _timestamp_pb2.Timestamp
    acknowledged_at: _timestamp_pb2.Timestamp
    rejected_at: _timestamp_pb2.Timestamp
    rejection_reason: str
    expired_at: _timestamp_pb2.Timestamp
    closure_reason: str
    meta_hash: bytes
    min_lease_duration_at_creation: int
    reservation: LeaseReservation
    def __init__(self, uuid: _Optional[str] = ..., tenant: _Optional[str] = ..., provider_uuid: _Optional[str] = ..., items: _Optional[_Iterable[_Union[LeaseItem, _Mapping]]] = ..., state: _Optional[_Union[LeaseState, str]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., closed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_settled_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., acknowledged_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., rejected_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., rejection_reason: _Optional[str] = ..., expired_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., closure_reason: _Optional[str] = ..., meta_hash: _Optional[bytes] = ..., min_lease_duration_at_creation: _Optional[int] = ..., reservation: _Optional[_Union[LeaseReservation, _Mapping]] = ...) -> None: ...

class CreditAccount(_message.Message):
    __slots__ = ("tenant", "credit_address", "active_lease_count", "pending_lease_count", "reserved_amounts", "unattributed_reserved_amounts", "unattributed_lease_count")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CREDIT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_LEASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PENDING_LEASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESERVED_AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    UNATTRIBUTED_RESERVED_AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    UNATTRIBUTED_LEASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    credit_address: str
    active_lease_count: int
    pending_lease_count: int
    reserved_amounts: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    unattributed_reserved_amounts: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    unattributed_lease_count: int
    def __init__(self, tenant: _Optional[str] = ..., credit_address: _Optional[str] = ..., active_lease_count: _Optional[int] = ..., pending_lease_count: _Optional[int] = ..., reserved_amounts: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., unattributed_reserved_amounts: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., unattributed_lease_count: _Optional[int] = ...) -> None: ...
