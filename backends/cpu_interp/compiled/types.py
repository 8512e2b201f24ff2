"""TTIR element types -> the LLVM types the compiled tier computes with, keeps in scratch buffers,
and reads from / writes to memory.

Three representations per element type, the interpreter's (sdk.numerics) made concrete:
  reg   what an SSA value holds while computing: i1 / iN, float for f16, bf16 and fp8 (values
        already rounded to the type), float / double for f32 / f64, `ptr` for pointers
  buf   what a scratch buffer holds per element: reg, with i1 widened to i8
  mem   what tensor memory holds: half for f16, i16 bits for bf16, i8 bits for fp8, i8 for i1
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from llvmlite import ir

from sdk.ttir import PointerType, TensorDescType, TensorType

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()
ONE32, ZERO32 = ir.Constant(I32, 1), ir.Constant(I32, 0)

FP8 = ("f8E4M3FN", "f8E5M2", "f8E4M3FNUZ", "f8E5M2FNUZ", "f8E4M3B11FNUZ")


@dataclass(frozen=True)
class Elem:
    """One TTIR element type and its three LLVM representations."""

    name: str          # TTIR name: "f32", "bf16", "i1", "ptr", ...
    reg: ir.Type
    buf: ir.Type
    mem: ir.Type
    width: int         # bytes one element takes in tensor memory

    @property
    def is_float(self) -> bool:
        return self.name.startswith("f") or self.name == "bf16"

    @property
    def is_int(self) -> bool:
        return self.name.startswith("i") or self.name == "index"

    @property
    def is_ptr(self) -> bool:
        return self.name == "ptr"

    @property
    def bits(self) -> int:
        """Integer width (i1 -> 1); for floats the storage width in bits."""
        return 64 if self.name in ("index", "ptr") else self.width * 8 if self.is_float else int(self.name[1:])

    @property
    def narrow(self) -> bool:
        """A float type computed in float32 and rounded after every op (f16, bf16, fp8)."""
        return self.name in ("f16", "bf16") or self.name.startswith("f8")


@lru_cache(maxsize=None)
def elem(name: str) -> Elem:
    """The Elem of a TTIR element type name ("index" is i64; "si32"/"ui32" are i32)."""
    if name in ("ptr",):
        return Elem("ptr", PTR, PTR, PTR, 8)
    if name == "index":
        return Elem("i64", I64, I64, I64, 8)
    if name[:2] in ("si", "ui") and name[2:].isdigit():
        name = "i" + name[2:]
    if name == "i1":
        return Elem("i1", I1, I8, I8, 1)
    if name in ("i8", "i16", "i32", "i64"):
        t = ir.IntType(int(name[1:]))
        return Elem(name, t, t, t, t.width // 8)
    if name == "f32":
        return Elem(name, F32, F32, F32, 4)
    if name == "f64":
        return Elem(name, F64, F64, F64, 8)
    if name == "f16":
        return Elem(name, F32, F32, F16, 2)
    if name == "bf16":
        return Elem(name, F32, F32, I16, 2)
    if name in FP8:
        return Elem(name, F32, F32, I8, 1)
    raise Unsupported(f"element type {name}")


class Unsupported(Exception):
    """Something the compiled tier does not lower; the message says what (the kernel runs on the
    interpreter instead)."""


def elem_of(t) -> Elem:
    """The element of a TTIR value type (a scalar, a tensor, a pointer -> "ptr")."""
    e = t.element if isinstance(t, TensorType) else t
    if isinstance(e, PointerType):
        return elem("ptr")
    if isinstance(e, TensorDescType):
        raise Unsupported("tensor descriptors")
    return elem(str(e))


def pointee(t) -> Elem:
    """The element a pointer (or tensor of pointers) addresses; a pointer table holds pointers."""
    e = t.element if isinstance(t, TensorType) else t
    if not isinstance(e, PointerType):
        raise Unsupported(f"a memory access through {t}")
    p = e.pointee
    if isinstance(p, TensorType):
        raise Unsupported("block pointers")
    return elem("ptr") if isinstance(p, PointerType) else elem(str(p))


def shape_of(t) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, TensorType) else ()


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
