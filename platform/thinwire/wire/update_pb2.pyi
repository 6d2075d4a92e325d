from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_UNSPECIFIED: _ClassVar[Kind]
    MODEL_DELTA: _ClassVar[Kind]
    MODEL: _ClassVar[Kind]
    GOSSIP_CORRECTION: _ClassVar[Kind]

class SeedScheme(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEED_SCHEME_UNSPECIFIED: _ClassVar[SeedScheme]
    RANDOM_K: _ClassVar[SeedScheme]
    RANDOM_BLOCK: _ClassVar[SeedScheme]

class ValueType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VALUE_TYPE_UNSPECIFIED: _ClassVar[ValueType]
    FP32: _ClassVar[ValueType]
    FP16: _ClassVar[ValueType]
    BF16: _ClassVar[ValueType]
KIND_UNSPECIFIED: Kind
MODEL_DELTA: Kind
MODEL: Kind
GOSSIP_CORRECTION: Kind
SEED_SCHEME_UNSPECIFIED: SeedScheme
RANDOM_K: SeedScheme
RANDOM_BLOCK: SeedScheme
VALUE_TYPE_UNSPECIFIED: ValueType
FP32: ValueType
FP16: ValueType
BF16: ValueType

class Update(_message.Message):
    __slots__ = ("format", "sender", "round", "kind", "metrics", "tensors")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    format: int
    sender: str
    round: int
    kind: Kind
    metrics: _containers.ScalarMap[str, float]
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, format: _Optional[int] = ..., sender: _Optional[str] = ..., round: _Optional[int] = ..., kind: _Optional[_Union[Kind, str]] = ..., metrics: _Optional[_Mapping[str, float]] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("name", "shape", "dense", "sparse", "seeded", "factors", "raw", "quantized", "sign", "multiscale")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DENSE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    SEEDED_FIELD_NUMBER: _ClassVar[int]
    FACTORS_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    QUANTIZED_FIELD_NUMBER: _ClassVar[int]
    SIGN_FIELD_NUMBER: _ClassVar[int]
    MULTISCALE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dense: DenseSupport
    sparse: SparseSupport
    seeded: SeededSupport
    factors: FactorSupport
    raw: RawValues
    quantized: QuantizedValues
    sign: SignValues
    multiscale: MultiScaleValues
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dense: _Optional[_Union[DenseSupport, _Mapping]] = ..., sparse: _Optional[_Union[SparseSupport, _Mapping]] = ..., seeded: _Optional[_Union[SeededSupport, _Mapping]] = ..., factors: _Optional[_Union[FactorSupport, _Mapping]] = ..., raw: _Optional[_Union[RawValues, _Mapping]] = ..., quantized: _Optional[_Union[QuantizedValues, _Mapping]] = ..., sign: _Optional[_Union[SignValues, _Mapping]] = ..., multiscale: _Optional[_Union[MultiScaleValues, _Mapping]] = ...) -> None: ...

class DenseSupport(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SparseSupport(_message.Message):
    __slots__ = ("count", "gaps", "bitmap")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    BITMAP_FIELD_NUMBER: _ClassVar[int]
    count: int
    gaps: Rice
    bitmap: bytes
    def __init__(self, count: _Optional[int] = ..., gaps: _Optional[_Union[Rice, _Mapping]] = ..., bitmap: _Optional[bytes] = ...) -> None: ...

class Rice(_message.Message):
    __slots__ = ("bits", "low", "high")
    BITS_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    bits: int
    low: bytes
    high: bytes
    def __init__(self, bits: _Optional[int] = ..., low: _Optional[bytes] = ..., high: _Optional[bytes] = ...) -> None: ...

class SeededSupport(_message.Message):
    __slots__ = ("seed", "scheme", "count")
    SEED_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    seed: int
    scheme: SeedScheme
    count: int
    def __init__(self, seed: _Optional[int] = ..., scheme: _Optional[_Union[SeedScheme, str]] = ..., count: _Optional[int] = ...) -> None: ...

class FactorSupport(_message.Message):
    __slots__ = ("rank",)
    RANK_FIELD_NUMBER: _ClassVar[int]
    rank: int
    def __init__(self, rank: _Optional[int] = ...) -> None: ...

class RawValues(_message.Message):
    __slots__ = ("dtype", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: ValueType
    data: bytes
    def __init__(self, dtype: _Optional[_Union[ValueType, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class QuantizedValues(_message.Message):
    __slots__ = ("levels", "bucket", "norms", "packed", "sparse")
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    NORMS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    levels: int
    bucket: int
    norms: bytes
    packed: PackedLevels
    sparse: SparseLevels
    def __init__(self, levels: _Optional[int] = ..., bucket: _Optional[int] = ..., norms: _Optional[bytes] = ..., packed: _Optional[_Union[PackedLevels, _Mapping]] = ..., sparse: _Optional[_Union[SparseLevels, _Mapping]] = ...) -> None: ...

class PackedLevels(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class SparseLevels(_message.Message):
    __slots__ = ("nonzero", "positions", "magnitudes", "negative")
    NONZERO_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    MAGNITUDES_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_FIELD_NUMBER: _ClassVar[int]
    nonzero: int
    positions: Rice
    magnitudes: Rice
    negative: bytes
    def __init__(self, nonzero: _Optional[int] = ..., positions: _Optional[_Union[Rice, _Mapping]] = ..., magnitudes: _Optional[_Union[Rice, _Mapping]] = ..., negative: _Optional[bytes] = ...) -> None: ...

class SignValues(_message.Message):
    __slots__ = ("bucket", "scales", "negative", "negative_scales")
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    SCALES_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_SCALES_FIELD_NUMBER: _ClassVar[int]
    bucket: int
    scales: bytes
    negative: bytes
    negative_scales: bytes
    def __init__(self, bucket: _Optional[int] = ..., scales: _Optional[bytes] = ..., negative: _Optional[bytes] = ..., negative_scales: _Optional[bytes] = ...) -> None: ...

class MultiScaleValues(_message.Message):
    __slots__ = ("bits", "scales", "bucket", "norms", "levels", "scale_index")
    BITS_FIELD_NUMBER: _ClassVar[int]
    SCALES_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    NORMS_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    SCALE_INDEX_FIELD_NUMBER: _ClassVar[int]
    bits: int
    scales: _containers.RepeatedScalarFieldContainer[int]
    bucket: int
    norms: bytes
    levels: bytes
    scale_index: bytes
    def __init__(self, bits: _Optional[int] = ..., scales: _Optional[_Iterable[int]] = ..., bucket: _Optional[int] = ..., norms: _Optional[bytes] = ..., levels: _Optional[bytes] = ..., scale_index: _Optional[bytes] = ...) -> None: ...
