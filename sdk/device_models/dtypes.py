"""The dtype vocabulary of device models, and the spellings (Triton, TTIR/MLIR, torch) mapped onto it."""
from __future__ import annotations

from ..errors import UnknownName

FP8_DTYPES = ("fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz")

#: Canonical names used in device model files.
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", *FP8_DTYPES, "fp4",
          "int1", "int4", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64")

#: Atomic operations a model may list (Triton's tl.atomic_*).
ATOMIC_OPS = ("add", "max", "min", "and", "or", "xor", "xchg", "cas")

_ALIASES = {
    # Triton language names
    "float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
    "fp8e4nv": "fp8e4m3", "fp8e5": "fp8e5m2", "fp8e4b8": "fp8e4m3fnuz", "fp8e5b16": "fp8e5m2fnuz",
    "int1": "int1", "bool": "int1",
    # MLIR / TTIR names
    "f64": "fp64", "f32": "fp32", "f16": "fp16", "tf32": "tf32",
    "f8e4m3fn": "fp8e4m3", "f8e5m2": "fp8e5m2", "f8e4m3fnuz": "fp8e4m3fnuz",
    "f8e5m2fnuz": "fp8e5m2fnuz", "f4e2m1fn": "fp4",
    "i1": "int1", "i4": "int4", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    # torch names
    "float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2", "float8_e4m3fnuz": "fp8e4m3fnuz",
    "float8_e5m2fnuz": "fp8e5m2fnuz", "half": "fp16", "float": "fp32", "double": "fp64",
    "uint": "uint32",
}


def canonical_dtype(name: str) -> str:
    """`name` in the device-model vocabulary: accepts model names (bf16), Triton names (fp8e4nv),
    TTIR names (f32, i64, f8E4M3FN) and torch names (torch.bfloat16)."""
    key = str(name).strip()
    key = key[len("torch."):] if key.startswith("torch.") else key
    key = key.lower()
    if key in DTYPES:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    raise UnknownName("dtype", str(name), DTYPES)
