from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    DELIVERED: _ClassVar[Outcome]
    DUPLICATE: _ClassVar[Outcome]
    STALE: _ClassVar[Outcome]
OUTCOME_UNSPECIFIED: Outcome
DELIVERED: Outcome
DUPLICATE: Outcome
STALE: Outcome

class Chunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: Header
    data: bytes
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("run_id", "round", "sender", "total_bytes", "chunks")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    round: int
    sender: int
    total_bytes: int
    chunks: int
    def __init__(self, run_id: _Optional[str] = ..., round: _Optional[int] = ..., sender: _Optional[int] = ..., total_bytes: _Optional[int] = ..., chunks: _Optional[int] = ...) -> None: ...

class PushReply(_message.Message):
    __slots__ = ("outcome", "received_bytes")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    outcome: Outcome
    received_bytes: int
    def __init__(self, outcome: _Optional[_Union[Outcome, str]] = ..., received_bytes: _Optional[int] = ...) -> None: ...
