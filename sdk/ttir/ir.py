"""A small Python IR for Triton's TTIR: module, function, region, block, op, value, type, location.

It holds exactly what a backend's lowering needs: op names, operands and results with their types,
attributes as Python values, nested regions (scf.for / scf.if / tt.reduce ...), and the kernel source
location of every op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator


# ----------------------------------------------------------------------------------------- types
class Type:
    """Base of TTIR types. `str(t)` prints the type back in MLIR syntax."""

    @property
    def element(self) -> "Type":
        return self

    @property
    def shape(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True)
class ScalarType(Type):
    name: str  # i1, i8, i16, i32, i64, f16, bf16, f32, f64, f8E4M3FN, f8E5M2, index ...

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.name.startswith(("f", "bf"))

    @property
    def is_int(self) -> bool:
        return self.name.startswith("i")

    @property
    def bits(self) -> int:
        if self.name == "index":
            return 64
        if self.name == "bf16":
            return 16
        if self.name.startswith("f8"):
            return 8
        digits = "".join(ch for ch in self.name if ch.isdigit())
        return int(digits) if digits else 0


@dataclass(frozen=True)
class PointerType(Type):
    pointee: Type
    address_space: int = 1

    def __str__(self) -> str:
        suffix = f", {self.address_space}" if self.address_space != 1 else ""
        return f"!tt.ptr<{self.pointee}{suffix}>"


@dataclass(frozen=True)
class TensorType(Type):
    dims: tuple[int, ...]
    elem: Type

    def __str__(self) -> str:
        return "tensor<" + "".join(f"{d}x" for d in self.dims) + f"{self.elem}>"

    @property
    def element(self) -> Type:
        return self.elem

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dims


@dataclass(frozen=True)
class TensorDescType(Type):
    block: TensorType

    def __str__(self) -> str:
        return f"!tt.tensordesc<{self.block}>"


@dataclass(frozen=True)
class FunctionType(Type):
    inputs: tuple[Type, ...]
    results: tuple[Type, ...]

    def __str__(self) -> str:
        res = ", ".join(map(str, self.results))
        res = f"({res})" if len(self.results) != 1 else res
        return f"({', '.join(map(str, self.inputs))}) -> {res}"


@dataclass(frozen=True)
class OpaqueType(Type):
    text: str

    def __str__(self) -> str:
        return self.text


# --------------------------------------------------------------------------------------- values
@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(eq=False)
class Value:
    name: str  # "%x" as printed (unique within a function)
    type: Type

    def __repr__(self) -> str:
        return f"{self.name}: {self.type}"


@dataclass(frozen=True)
class DenseAttr:
    """`dense<...>` constant: `values` is a scalar when splat, else a nested list."""

    values: Any
    type: Type

    @property
    def splat(self) -> bool:
        return not isinstance(self.values, list)


@dataclass(frozen=True)
class SymbolRef:
    name: str  # callee of tt.call, without '@'


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)
    label: str = ""


@dataclass(eq=False)
class Region:
    blocks: list[Block] = field(default_factory=list)

    @property
    def entry(self) -> Block:
        return self.blocks[0]


@dataclass(eq=False)
class Op:
    name: str  # "tt.load", "arith.addf", "scf.for" ...
    operands: list[Value] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Region] = field(default_factory=list)
    loc: Loc | None = None
    successors: list[str] = field(default_factory=list)  # cf.br / cf.cond_br targets (block labels)

    @property
    def result(self) -> Value:
        return self.results[0]

    def walk(self) -> Iterator["Op"]:
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    yield from op.walk()

    def type_signature(self) -> str:
        """Element types of operands and results, e.g. "bf16 x bf16 -> f32" (what coverage ranks)."""
        ins = " x ".join(str(_elem(v.type)) for v in self.operands)
        outs = ", ".join(str(_elem(v.type)) for v in self.results)
        if ins and outs:
            return f"{ins} -> {outs}"
        return ins or (f"-> {outs}" if outs else "")


def _elem(t: Type) -> Type:
    while isinstance(t, (TensorType, PointerType, TensorDescType)):
        t = t.elem if isinstance(t, TensorType) else t.pointee if isinstance(t, PointerType) else t.block
    return t


@dataclass(eq=False)
class Func:
    name: str
    args: list[Value]
    result_types: list[Type]
    body: Region
    public: bool = True
    attrs: dict[str, Any] = field(default_factory=dict)
    arg_attrs: list[dict[str, Any]] = field(default_factory=list)
    loc: Loc | None = None

    def walk(self) -> Iterator[Op]:
        for block in self.body.blocks:
            for op in block.ops:
                yield from op.walk()


@dataclass(eq=False)
class Module:
    funcs: dict[str, Func]
    text: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def entry(self) -> Func:
        """The kernel: the public function (Triton emits exactly one), else the first."""
        public = [f for f in self.funcs.values() if f.public]
        return public[0] if public else next(iter(self.funcs.values()))

    def walk(self) -> Iterator[Op]:
        for func in self.funcs.values():
            yield from func.walk()

    def relocate(self, source_file: str | None) -> None:
        """Point the kernel's own locations at `source_file`, where the kernel lives now.

        Triton keys its compile cache by a kernel's source text and line, not by its file, so a
        kernel loaded from the cache may carry the path of an identical copy compiled elsewhere.
        Locations in other files (library code, helpers) are left as they are."""
        old = self.entry.loc.file if self.entry.loc is not None else None
        if not source_file or old is None or old == source_file:
            return
        new = lambda loc: Loc(source_file, loc.line, loc.col) if loc is not None and loc.file == old else loc
        for func in self.funcs.values():
            func.loc = new(func.loc)
            for op in func.walk():
                op.loc = new(op.loc)
