from cosmpy.protos.cosmos.base.v1beta1 import coin_pb2 as _coin_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MsgWithdraw(_message.Message):
    __slots__ = ("sender", "lease_uuids", "provider_uuid", "limit", "key")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_UUID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    sender: str
    lease_uuids: _containers.RepeatedScalarFieldContainer[str]
    provider_uuid: str
    limit: int
    key: bytes
    def __init__(self, sender: _Optional[str] = ..., lease_uuids: _Optional[_Iterable[str]] = ..., provider_uuid: _Optional[str] = ..., limit: _Optional[int] = ..., key: _Optional[bytes] = ...) -> None: ...

class MsgWithdrawResponse(_message.Message):
    __slots__ = ("total_amounts", "payout_address", "withdrawal_count", "has_more", "next_key", "failed_lease_uuids")
    TOTAL_AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    PAYOUT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    WITHDRAWAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    NEXT_KEY_FIELD_NUMBER: _ClassVar[int]
    FAILED_LEASE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    total_amounts: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    payout_address: str
    withdrawal_count: int
    has_more: bool
    next_key: bytes
    failed_lease_uuids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, total_amounts: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ..., payout_address: _Optional[str] = ..., withdrawal_count: _Optional[int] = ..., has_more: bool = ..., next_key: _Optional[bytes] = ..., failed_lease_uuids: _Optional[_Iterable[str]] = ...) -> None: ...

class MsgCloseLease(_message.Message):
    __slots__ = ("sender", "lease_uuids", "reason")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    sender: str
    lease_uuids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, sender: _Optional[str] = ..., lease_uuids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class MsgCloseLeaseResponse(_message.Message):
    __slots__ = ("closed_at", "closed_count", "total_settled_amounts")
    CLOSED_AT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SETTLED_AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    closed_at: _timestamp_pb2.Timestamp
    closed_count: int
    total_settled_amounts: _containers.RepeatedCompositeFieldContainer[_coin_pb2.Coin]
    def __init__(self, closed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., closed_count: _Optional[int] = ..., total_settled_amounts: _Optional[_Iterable[_Union[_coin_pb2.Coin, _Mapping]]] = ...) -> None: ...

class MsgAcknowledgeLease(_message.Message):
    __slots__ = ("sender", "lease_uuids")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    sender: str
    lease_uuids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sender: _Optional[str] = ..., lease_uuids: _Optional[_Iterable[str]] = ...) -> None: ...

class MsgAcknowledgeLeaseResponse(_message.Message):
    __slots__ = ("acknowledged_at", "acknowledged_count")
    ACKNOWLEDGED_AT_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    acknowledged_at: _timestamp_pb2.Timestamp
    acknowledged_count: int
    def __init__(self, acknowledged_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., acknowledged_count: _Optional[int] = ...) -> None: ...

class MsgRejectLease(_message.Message):
    __slots__ = ("sender", "lease_uuids", "reason")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_UUIDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    sender: str
    lease_uuids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, sender: _Optional[str] = ..., lease_uuids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class MsgRejectLeaseResponse(_message.Message):
    __slots__ = ("rejected_at", "rejected_count")
    REJECTED_AT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    rejected_at: _timestamp_pb2.Timestamp
    rejected_count: int
    def __init__(self, rejected_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., rejected_count: _Optional[int] = ...) -> None: ...
