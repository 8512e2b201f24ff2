"""Element types shared by the IR reader and backends: TTIR names, storage dtypes, bf16/fp8 decoding."""
from __future__ import annotations

import numpy as np

# How each TTIR element type is stored in memory, as a numpy dtype of the same width.
STORAGE: dict[str, np.dtype] = {
    "i1": np.dtype(np.bool_), "i8": np.dtype(np.int8), "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32), "i64": np.dtype(np.int64), "index": np.dtype(np.int64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16), "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64), "f8E4M3FN": np.dtype(np.uint8), "f8E5M2": np.dtype(np.uint8),
    "f8E4M3FNUZ": np.dtype(np.uint8), "f8E5M2FNUZ": np.dtype(np.uint8), "f8E4M3B11FNUZ": np.dtype(np.uint8),
}

# Triton's signature names ("*fp16", "i32") -> TTIR element names.
TRITON_TO_TTIR = {
    "i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "u1": "i1", "u8": "i8",
    "u16": "i16", "u32": "i32", "u64": "i64", "fp16": "f16", "bf16": "bf16", "fp32": "f32",
    "f32": "f32", "fp64": "f64", "fp8e4nv": "f8E4M3FN", "fp8e5": "f8E5M2", "fp8e4b15": "f8E4M3B11FNUZ",
    "fp8e4b8": "f8E4M3FNUZ", "fp8e5b16": "f8E5M2FNUZ",
}


# torch dtype names (str(dtype) without "torch.") -> TTIR element names.
TORCH_TO_TTIR = {
    "bool": "i1", "int8": "i8", "uint8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint16": "i16", "uint32": "i32", "uint64": "i64", "float16": "f16", "bfloat16": "bf16",
    "float32": "f32", "float64": "f64", "float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2",
    "float8_e4m3fnuz": "f8E4M3FNUZ", "float8_e5m2fnuz": "f8E5M2FNUZ",
}


def numpy_dtype(name: str) -> np.dtype:
    """Storage dtype of a TTIR element type name."""
    try:
        return STORAGE[name]
    except KeyError:
        raise ValueError(f"no storage type for element type '{name}'") from None


def bf16_to_float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


_FP8 = {  # (exponent bits, mantissa bits, bias, has_inf)
    "f8E4M3FN": (4, 3, 7, False), "f8E5M2": (5, 2, 15, True), "f8E4M3FNUZ": (4, 3, 8, False),
    "f8E5M2FNUZ": (5, 2, 16, False), "f8E4M3B11FNUZ": (4, 3, 11, False),
}


def fp8_to_float(bits: np.ndarray, name: str) -> np.ndarray:
    """Decode fp8 bit patterns (uint8) to float32 following the named format."""
    e_bits, m_bits, bias, has_inf = _FP8[name]
    b = bits.astype(np.int32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> m_bits) & ((1 << e_bits) - 1)
    man = b & ((1 << m_bits) - 1)
    normal = (1.0 + man / (1 << m_bits)) * np.exp2(exp.astype(np.float64) - bias)
    sub = (man / (1 << m_bits)) * np.exp2(1.0 - bias)
    out = sign * np.where(exp == 0, sub, normal)
    if has_inf:
        top = exp == (1 << e_bits) - 1
        out = np.where(top & (man == 0), sign * np.inf, out)
        out = np.where(top & (man != 0), np.nan, out)
    elif name == "f8E4M3FN":
        out = np.where((exp == 15) & (man == 7), np.nan, out)
    else:  # FNUZ formats: 0x80 is the only NaN
        out = np.where(b == 0x80, np.nan, out)
    return out.astype(np.float32)
