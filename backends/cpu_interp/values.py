"""How cpu_interp holds TTIR values in numpy, and where an op came from.

Both interpreters (the batched one, interp.py, and the single-program reference, reference.py)
hold values alike, apart from the batched one's leading program axis:
  iN          signed numpy intN (index as int64), i1 as bool
  f16/f32/f64 float16 / float32 / float64
  bf16, fp8   float32 already rounded to the type (memory holds their bits: sdk.numerics.STORAGE)
  pointers    int64 addresses
"""
from __future__ import annotations

import linecache
from functools import lru_cache

import numpy as np

from sdk.numerics import compute_dtype, numpy_dtype
from sdk.ttir import Op, PointerType, TensorDescType, TensorType, Type

_I64 = np.dtype(np.int64)


def elem_name(t: Type) -> str:
    """Element type name of a TTIR type ("f32" for tensor<4xf32>, "ptr" for pointers)."""
    e = t.element
    return "ptr" if isinstance(e, PointerType) else e.name


def value_dtype(t: Type) -> np.dtype:
    """The numpy dtype a TTIR value of type `t` (scalar or tensor) is held in; pointers as int64."""
    e = t.element
    return _I64 if isinstance(e, PointerType) else compute_dtype(str(e))


@lru_cache(maxsize=None)
def pointee(t: Type) -> str:
    """The element type name a pointer (a tensor of them, a block pointer, a descriptor) addresses;
    a pointer to pointers addresses 64-bit integers (a pointer table)."""
    if isinstance(t, TensorDescType):
        return str(t.block.element)
    e = t.element
    if isinstance(e, PointerType):
        p = e.pointee
        p = p.element if isinstance(p, TensorType) else p
        return "i64" if isinstance(p, PointerType) else str(p)
    return str(e)


@lru_cache(maxsize=None)
def pointee_width(t: Type) -> int:
    """Bytes of one element a pointer of type `t` addresses."""
    return numpy_dtype(pointee(t)).itemsize


def scalar_arg(a, tname: str) -> np.ndarray:
    """A host scalar launch argument as a 0-d value of TTIR type `tname` (integers wrap into it)."""
    if isinstance(a, (bool, np.bool_)) or tname == "i1":
        return np.array(bool(a), dtype=np.bool_)
    dt = compute_dtype(tname)
    if dt.kind in "iu":
        return np.array(int(a) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64).astype(dt)
    return np.array(a, dtype=dt)


def where(op: Op | None) -> str:
    """'file:line: source text' of an op: what every fault names."""
    if op is None or op.loc is None:
        return "an unknown source line"
    text = linecache.getline(op.loc.file, op.loc.line).strip()
    return f"{op.loc}: {text}" if text else str(op.loc)
