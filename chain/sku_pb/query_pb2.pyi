from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Provider(_message.Message):
    __slots__ = ("uuid", "address", "payout_address", "meta_hash", "active", "api_url")
    UUID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PAYOUT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    META_HASH_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    API_URL_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    address: str
    payout_address: str
    meta_hash: bytes
    active: bool
    api_url: str
    def __init__(self, uuid: _Optional[str] = ..., address: _Optional[str] = ..., payout_address: _Optional[str] = ..., meta_hash: _Optional[bytes] = ..., active: bool = ..., api_url: _Optional[str] = ...) -> None: ...

class QueryProviderRequest(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    def __init__(self, uuid: _Optional[str] = ...) -> None: ...

class QueryProviderResponse(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    def __init__(self, provider: _Optional[_Union[Provider, _Mapping]] = ...) -> None: ...
