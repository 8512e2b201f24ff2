"""Check the arithmetic of derived figures.

A figure whose source reads `derived from <expression>` states how it was computed: numbers joined
by `x`, `*`, `/`, `+`, `-` or `vs` (a ratio), grouped by parentheses, with words (units, names) in
between, and references to other figures of the model as `the <dtype> rate` (the vector rate of that
dtype; the matrix rate for a matrix figure, or with `dense`). Parentheses that hold no operator are
remarks and are skipped, as are URLs. The expression must reproduce the value up to a unit (a
power of 10 or of 1024: TFLOP/s against MHz, bytes against KiB) within `TOLERANCE`.

    for finding in check_derived(model): print(finding)

A source that is prose rather than arithmetic is reported as unchecked; parse.py rejects a model
whose arithmetic is wrong.
"""
from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass

TOLERANCE = 0.02

_REF = re.compile(r"\bthe (dense |published )?([a-z0-9]+) rate\b")
_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_NUMBER = re.compile(r"\d+(\.\d+)?")
_OPS = {"x": "*", "×": "*", "*": "*", "/": "/", "+": "+", "-": "-", "vs": "/"}


@dataclass(frozen=True)
class Finding:
    path: str
    status: str        # "ok" | "mismatch" | "unchecked"
    value: float
    computed: float | None
    detail: str

    def __str__(self) -> str:
        if self.status == "ok":
            return f"{self.path}: {self.value} = {self.detail}"
        if self.status == "mismatch":
            return (f"{self.path}: derived from '{self.detail}' gives {self.computed:.6g}, "
                    f"which does not match the value {self.value} (within {TOLERANCE:.0%} and a unit)")
        return f"{self.path}: not machine-checkable ({self.detail})"


def check_derived(model) -> list[Finding]:
    """One finding per derived figure of the model (value, measured and datasheet figures)."""
    from .flatten import figures_of
    out = []
    for path, fig in figures_of(model):
        for sub, f in ((path, fig), (f"{path}.measured", fig.measured), (f"{path}.datasheet", fig.datasheet)):
            if f is not None and f.source_kind == "derived" and isinstance(f.value, (int, float)) \
                    and not isinstance(f.value, bool):
                out.append(check_one(model, sub, float(f.value), f.source))
    return out


def check_one(model, path: str, value: float, source: str) -> Finding:
    text = source.strip()[len("derived from"):].strip()
    expr, why = _expression(model, path, text)
    if expr is None:
        return Finding(path, "unchecked", value, None, why)
    try:
        computed = _evaluate(ast.parse(expr, mode="eval").body)
    except (SyntaxError, ZeroDivisionError, TypeError, ValueError):
        return Finding(path, "unchecked", value, None, f"'{text}' is not an arithmetic expression")
    if computed <= 0 or value <= 0:
        return Finding(path, "mismatch", value, computed, expr)
    if _matches(value, computed):
        return Finding(path, "ok", value, computed, expr)
    return Finding(path, "mismatch", value, computed, expr)


_BINOPS = {ast.Mult: operator.mul, ast.Div: operator.truediv, ast.Add: operator.add, ast.Sub: operator.sub}


def _evaluate(node: ast.AST) -> float:
    """Numbers and + - * / only."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("not plain arithmetic")


def _matches(value: float, computed: float) -> bool:
    for base in (10.0, 1024.0):
        k = round(math.log(value / computed, base))
        if abs(value / (computed * base ** k) - 1) <= TOLERANCE:
            return True
    return False


def _expression(model, path: str, text: str) -> tuple[str | None, str]:
    """The arithmetic of a derived-from text as a Python expression of numbers, or (None, why)."""
    def ref(m: re.Match) -> str:
        dtype = m.group(2)
        matrix = bool(m.group(1)) or path.startswith("matrix.")
        rate = _rate(model, dtype, matrix)
        return f" {rate!r} " if rate else m.group(0)

    text = _REF.sub(ref, re.sub(r"https?://\S+", " ", text))
    tokens: list[str] = []
    for tok in _TOKEN.findall(text):
        tok = tok.rstrip(",;:")
        if tok in ("(", ")"):
            tokens.append(tok)
        elif _NUMBER.fullmatch(tok):
            tokens.append(tok)
        elif tok.lower() in _OPS:
            tokens.append(_OPS[tok.lower()])
    tokens = _drop_remarks(tokens)
    if sum(1 for t in tokens if _NUMBER.fullmatch(t)) < 2:
        return None, "fewer than two numbers in its arithmetic"
    for a, b in zip(tokens, tokens[1:]):
        if _NUMBER.fullmatch(a) and (_NUMBER.fullmatch(b) or b == "("):
            return None, "numbers without an operator between them"
    return " ".join(tokens), ""


def _drop_remarks(tokens: list[str]) -> list[str]:
    """Remove parenthesised groups that hold no operator (remarks such as '(assumed clock)')."""
    out: list[str] = []
    stack: list[int] = []
    for tok in tokens:
        if tok == "(":
            stack.append(len(out))
            out.append(tok)
        elif tok == ")":
            if not stack:
                continue
            start = stack.pop()
            inner = out[start + 1:]
            if any(t in ("*", "/", "+", "-") for t in inner):
                out.append(tok)
            else:
                del out[start:]
        else:
            out.append(tok)
    for start in reversed(stack):  # an unclosed group: drop its parenthesis
        del out[start]
    while out and out[-1] in ("*", "/", "+", "-"):
        out.pop()
    while out and out[0] in ("*", "/", "+"):
        out.pop(0)
    return out


def _rate(model, dtype: str, matrix: bool) -> float | None:
    if matrix and model.matrix is not None:
        rates = [f.value for (o, _), f in model.matrix.tflop_per_s.items() if o == dtype]
        if rates:
            return max(rates)
    fig = model.vector.tflop_per_s.get(dtype)
    return fig.value if fig is not None else None
