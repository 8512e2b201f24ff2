"""What a backend accepts, declared as data: which TTIR ops, with which types and attributes.

Capabilities say *what* a backend accepts, never *how* it implements it (interpreter rules, an
emitter, a vendor compiler): `day0 ops`, the report and the compile-time check read them without
running any backend code, and they round-trip through JSON.

    caps = Capabilities.of(["tt.load", "tt.store", "arith.addf",
                            OpSupport("tt.dot", signatures=("bf16 x bf16 -> f32",))],
                           dialects=("math",))
    caps.supports(op)          # one sdk.ttir.Op
    caps.missing(module)       # every op of a module it does not accept, as UnsupportedOp records

An op is accepted when its name is listed (narrowed by the entry's types and attributes), or when its
dialect is listed whole. A `LoweringTable` (sdk.lowering) derives its capabilities from its rules.
"""
from __future__ import annotations

import fnmatch
import linecache
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .errors import UnsupportedOp
from .ttir import Module, Op
from .ttir.ir import _elem

#: The dialects a TTIR module is made of.
TTIR_DIALECTS = ("tt", "arith", "math", "scf", "cf", "ub", "builtin", "llvm", "gpu")


@dataclass(frozen=True)
class OpSupport:
    """One op a backend accepts, narrowed by data:

    dtypes      every element type among the op's operands and results is one of these (TTIR names:
                "f32", "bf16", "i32", "f8E4M3FN" ...); None accepts any
    signatures  the op's type signature (`Op.type_signature()`, "bf16 x bf16 -> f32") matches one of
                these shell-style patterns ("bf16 x bf16 -> *"); None accepts any
    attrs       for each named attribute, the values accepted (tt.extern_elementwise's "symbol")
    """

    name: str
    dtypes: frozenset[str] | None = None
    signatures: tuple[str, ...] | None = None
    attrs: tuple[tuple[str, frozenset], ...] = ()

    @staticmethod
    def make(name: str, dtypes: Iterable[str] | None = None, signatures: Iterable[str] | None = None,
             attrs: Mapping[str, Iterable[Any]] | None = None) -> "OpSupport":
        return OpSupport(name, None if dtypes is None else frozenset(dtypes),
                         None if signatures is None else tuple(signatures),
                         tuple(sorted((k, frozenset(v)) for k, v in (attrs or {}).items())))

    @property
    def narrowed(self) -> bool:
        return self.dtypes is not None or self.signatures is not None or bool(self.attrs)

    def accepts(self, op: Op) -> bool:
        if op.name != self.name:
            return False
        if self.dtypes is not None:
            types = {str(_elem(v.type)) for v in (*op.operands, *op.results)}
            if not types <= self.dtypes:
                return False
        if self.signatures is not None:
            sig = op.type_signature()
            if not any(fnmatch.fnmatchcase(sig, pattern) for pattern in self.signatures):
                return False
        for key, allowed in self.attrs:
            value = op.attrs.get(key)
            if getattr(value, "name", value) not in allowed:  # a SymbolRef compares by its name
                return False
        return True

    def to_json(self) -> dict:
        out: dict[str, Any] = {"name": self.name}
        if self.dtypes is not None:
            out["dtypes"] = sorted(self.dtypes)
        if self.signatures is not None:
            out["signatures"] = list(self.signatures)
        if self.attrs:
            out["attrs"] = {k: sorted(map(str, v)) for k, v in self.attrs}
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "OpSupport":
        return OpSupport.make(data["name"], data.get("dtypes"), data.get("signatures"), data.get("attrs"))


@dataclass(frozen=True)
class Capabilities:
    """The ops a backend accepts (see the module docstring). Frozen; build new ones with `of`,
    `with_ops`, `without` and `|`."""

    ops: tuple[OpSupport, ...] = ()
    dialects: frozenset[str] = frozenset()   # every op of these dialects, whatever its types
    _by_name: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        index: dict[str, list[OpSupport]] = {}
        for entry in self.ops:
            index.setdefault(entry.name, []).append(entry)
        object.__setattr__(self, "_by_name", index)

    @staticmethod
    def of(ops: Iterable[str | OpSupport] = (), dialects: Iterable[str] = ()) -> "Capabilities":
        entries = tuple(OpSupport(o) if isinstance(o, str) else o for o in ops)
        return Capabilities(entries, frozenset(dialects))

    # ------------------------------------------------------------------------------- queries
    def supports(self, op: Op) -> bool:
        if op.name.partition(".")[0] in self.dialects:
            return True
        return any(entry.accepts(op) for entry in self._by_name.get(op.name, ()))

    def missing(self, module: Module) -> list[UnsupportedOp]:
        """Every op of the module (all functions, nested regions) these capabilities do not accept."""
        return [unsupported(op) for op in module.walk() if not self.supports(op)]

    def names(self) -> list[str]:
        """The op names listed (dialects accepted whole are in `dialects`)."""
        return sorted(self._by_name)

    def __contains__(self, op_name: str) -> bool:
        return op_name in self._by_name or op_name.partition(".")[0] in self.dialects

    # ------------------------------------------------------------------------------ building
    def with_ops(self, *ops: str | OpSupport) -> "Capabilities":
        """These capabilities with `ops` added; an op listed again replaces its earlier entries."""
        new = [OpSupport(o) if isinstance(o, str) else o for o in ops]
        names = {o.name for o in new}
        return Capabilities(tuple(e for e in self.ops if e.name not in names) + tuple(new), self.dialects)

    def without(self, *names: str) -> "Capabilities":
        return Capabilities(tuple(e for e in self.ops if e.name not in names), self.dialects)

    def __or__(self, other: "Capabilities") -> "Capabilities":
        """Either's ops (an op both list keeps both entries: accepted when either accepts)."""
        return Capabilities(self.ops + other.ops, self.dialects | other.dialects)

    # ---------------------------------------------------------------------------------- JSON
    def to_json(self) -> dict:
        return {"dialects": sorted(self.dialects), "ops": [e.to_json() for e in self.ops]}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "Capabilities":
        return Capabilities(tuple(OpSupport.from_json(d) for d in data.get("ops", ())),
                            frozenset(data.get("dialects", ())))


def unsupported(op: Op) -> UnsupportedOp:
    """The record of one op a backend does not accept: name, types, location and source line."""
    loc = str(op.loc) if op.loc else ""
    source = linecache.getline(op.loc.file, op.loc.line).strip() if op.loc else ""
    return UnsupportedOp(op.name, op.type_signature(), loc, source)
