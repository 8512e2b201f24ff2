"""A lowering table: one rule per TTIR op, for backends that implement ops rule by rule.

A rule is how a backend implements an op: cpu_interp's interpreter runs `rule(ctx, op, *values)`;
an emitter's rule emits code. What the backend *accepts* is data (`sdk.capabilities`); a table
derives it from its rules (`capabilities()`), narrowed by the data each rule is registered with:

    table = LoweringTable()

    @table.rule("arith.addf")
    def addf(ctx, op, a, b): ...

    @table.rule("tt.dot", signatures=("bf16 x bf16 -> f32",))
    def dot(ctx, op, a, b, acc): ...

    table.register("tt.extern_elementwise", extern, attrs={"symbol": LIBDEVICE})

Delegation borrows another backend's rules (`update(other, borrowed=True)`), and results say which
share of a kernel the backend's own rules lowered (`native_share`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .capabilities import Capabilities, OpSupport, unsupported
from .errors import UnsupportedOp
from .ttir import Module, Op

Rule = Callable[..., Any]


@dataclass(frozen=True)
class _Entry:
    rule: Rule
    support: OpSupport
    borrowed: bool = False  # taken from another backend's table (delegation), not the backend's own


class LoweringTable:
    """One rule per TTIR op name, each with the data that says which types it accepts."""

    def __init__(self, rules: dict[str, Rule] | None = None):
        self._rules: dict[str, _Entry] = {}
        for name, rule in (rules or {}).items():
            self.register(name, rule)

    def register(self, op_name: str, rule: Rule, accepts: OpSupport | None = None, *,
                 dtypes: Iterable[str] | None = None, signatures: Iterable[str] | None = None,
                 attrs: Mapping[str, Iterable[Any]] | None = None) -> Rule:
        """Register `rule` for `op_name`, accepting the types `dtypes` / `signatures` / `attrs`
        allow (see sdk.capabilities.OpSupport), or as `accepts` (an OpSupport) says."""
        if accepts is not None and not isinstance(accepts, OpSupport):
            raise TypeError(
                f"rule for '{op_name}': `accepts` must be data (an sdk.capabilities.OpSupport), not "
                f"{type(accepts).__name__}; narrow a rule with dtypes=, signatures= or attrs= so that "
                f"`day0 ops` and reports can read what it accepts without running code")
        support = accepts if accepts is not None else OpSupport.make(op_name, dtypes, signatures, attrs)
        if support.name != op_name:
            raise ValueError(f"rule for '{op_name}' given the OpSupport of '{support.name}'")
        self._rules[op_name] = _Entry(rule, support)
        return rule

    def rule(self, op_name: str, accepts: OpSupport | None = None, **narrow: Any) -> Callable[[Rule], Rule]:
        """Decorator form: `@table.rule("arith.addf")`, `@table.rule("tt.dot", dtypes={"bf16", "f32"})`."""
        return lambda fn: self.register(op_name, fn, accepts, **narrow)

    def update(self, other: "LoweringTable", borrowed: bool = False) -> None:
        """Take `other`'s rules; `borrowed=True` marks them as another backend's (delegation), so
        results say how much of a kernel ran on the backend's own rules."""
        for name, entry in other._rules.items():
            self._rules[name] = _Entry(entry.rule, entry.support, entry.borrowed or borrowed)

    def copy(self) -> "LoweringTable":
        """A table of its own with the same rules (changing one never changes the other)."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out._rules = dict(self._rules)
        return out

    # ------------------------------------------------------------------------------- queries
    def get(self, op_name: str) -> Rule | None:
        entry = self._rules.get(op_name)
        return entry.rule if entry else None

    def borrowed(self, op_name: str) -> bool:
        entry = self._rules.get(op_name)
        return entry is not None and entry.borrowed

    def native_share(self, module: Module) -> tuple[float, list[str]]:
        """(the fraction of the module's ops lowered by the backend's own rules, the names of the
        ops that borrowed rules lowered)."""
        ops = list(module.walk())
        borrowed = [op.name for op in ops if self.borrowed(op.name)]
        return (1.0 - len(borrowed) / len(ops) if ops else 1.0), sorted(set(borrowed))

    def capabilities(self) -> Capabilities:
        """What this table accepts, as data."""
        return Capabilities(tuple(entry.support for entry in self._rules.values()))

    def supports(self, op: Op) -> bool:
        entry = self._rules.get(op.name)
        return entry is not None and entry.support.accepts(op)

    def names(self) -> list[str]:
        return sorted(self._rules)

    def __contains__(self, op_name: str) -> bool:
        return op_name in self._rules

    def missing(self, module: Module) -> list[UnsupportedOp]:
        """Every op of the module (all functions, nested regions) this table cannot lower."""
        return [unsupported(op) for op in module.walk() if not self.supports(op)]
