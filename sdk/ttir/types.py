"""Parse MLIR type text (`tensor<32x16xf16>`, `!tt.ptr<f32>`, `i1` ...) and attribute literals."""
from __future__ import annotations

import re
import struct

from .ir import DenseAttr, OpaqueType, PointerType, ScalarType, TensorDescType, TensorType, Type
from .lexer import TTIRSyntaxError

_SCALAR = re.compile(r"^(i\d+|ui\d+|si\d+|f\d+|bf16|tf32|f8E\w+|f16|index|none)$")
_CACHE: dict[str, Type] = {}


def parse_type(text: str) -> Type:
    text = text.strip()
    hit = _CACHE.get(text)
    if hit is None:
        hit = _CACHE[text] = _parse_type(text)
    return hit


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _parse_type(text: str) -> Type:
    if _SCALAR.match(text):
        return ScalarType(text)
    if text.startswith("!tt.ptr<") and text.endswith(">"):
        inner = _split_top(text[len("!tt.ptr<"):-1])
        space = int(inner[1]) if len(inner) > 1 else 1
        return PointerType(parse_type(inner[0]), space)
    if text.startswith("tensor<") and text.endswith(">"):
        inner = text[len("tensor<"):-1]
        # dims are a prefix of "NxMx"; the element type may itself contain 'x' (e.g. !tt.ptr<...>)
        dims = []
        m = re.match(r"^((?:\d+x)*)(.*)$", inner, re.S)
        if m and m.group(1):
            dims = [int(d) for d in m.group(1).split("x") if d]
        elem_text = m.group(2) if m else inner
        elem_text = _split_top(elem_text)[0]  # drop an encoding attribute (ttgir), if any
        return TensorType(tuple(dims), parse_type(elem_text))
    if text.startswith("!tt.tensordesc<") and text.endswith(">"):
        inner = _split_top(text[len("!tt.tensordesc<"):-1])[0]
        block = parse_type(inner)
        if not isinstance(block, TensorType):  # Triton 3.8 prints `!tt.tensordesc<8x16xf32>`
            block = parse_type(f"tensor<{inner}>")
        if not isinstance(block, TensorType):
            raise TTIRSyntaxError(f"TTIR: tensor descriptor of a non-tensor type: {text}")
        return TensorDescType(block)
    return OpaqueType(text)


# ------------------------------------------------------------------------------------- literals
def parse_number(text: str, type_: Type | None = None) -> int | float | bool:
    """An MLIR number literal; hex for a float type is its IEEE bit pattern."""
    if text in ("true", "false"):
        return text == "true"
    elem = type_.element if type_ is not None else None
    is_float = isinstance(elem, ScalarType) and elem.is_float
    if text.lower().lstrip("-").startswith("0x"):
        bits = int(text, 16)
        if is_float:
            return _float_from_bits(bits, elem.name)
        return bits
    if is_float or any(c in text for c in ".eE") and not text.lower().startswith("0x"):
        return float(text)
    return int(text)


def _float_from_bits(bits: int, name: str) -> float:
    if name == "f32":
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    if name == "f64":
        return struct.unpack("<d", struct.pack("<Q", bits & 0xFFFFFFFFFFFFFFFF))[0]
    if name == "f16":
        return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]
    if name == "bf16":
        return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]
    import numpy as np  # fp8: decode through the numpy helpers of the ml_dtypes-free path
    from ..numerics import fp8_to_float
    return float(fp8_to_float(np.array([bits], dtype=np.uint8), name)[0])


def parse_dense(token: str, type_: Type) -> DenseAttr:
    """`dense<...>` token text -> DenseAttr (splat scalar or nested list)."""
    inner = token[len("dense<"):-1].strip()
    if inner.startswith('"0x'):  # hex blob of the raw little-endian element bytes
        return DenseAttr(_hex_blob(inner.strip('"'), type_), type_)
    if inner.startswith("["):
        return DenseAttr(_nested(inner, type_), type_)
    if inner.startswith("("):  # complex: not used by Triton
        raise TTIRSyntaxError(f"TTIR: unsupported dense literal {token}")
    return DenseAttr(parse_number(inner, type_), type_)


def _nested(text: str, type_: Type):
    text = text.strip()
    if text.startswith("["):
        return [_nested(p, type_) for p in _split_top(text[1:-1])]
    return parse_number(text, type_)


def _hex_blob(text: str, type_: Type) -> list:
    import numpy as np
    from ..numerics import numpy_dtype
    raw = bytes.fromhex(text[2:])
    elem = type_.element
    arr = np.frombuffer(raw, dtype=numpy_dtype(str(elem)))
    if isinstance(type_, TensorType) and arr.size == 1:
        return arr.reshape(()).item()
    return arr.reshape(type_.shape).tolist()
