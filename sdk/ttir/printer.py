"""Print an `sdk.ttir` Module back as MLIR text (ops in generic form), readable by `parse`.

Used to check the reader (parse -> print -> parse gives the same IR) and to dump what a backend
received in a form that does not depend on each dialect's custom syntax."""
from __future__ import annotations

import math
import struct

from .ir import Block, DenseAttr, Func, Loc, Module, Op, Region, SymbolRef


def print_module(module: Module) -> str:
    lines = ["module {"]
    for func in module.funcs.values():
        lines += _func(func, "  ")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _loc(loc: Loc | None) -> str:
    if loc is None:
        return "loc(unknown)"
    return f'loc("{loc.file}":{loc.line}:{loc.col})'


def _func(f: Func, ind: str) -> list[str]:
    args = ", ".join(f"{a.name}: {a.type}" for a in f.args)
    res = ""
    if f.result_types:
        res = " -> " + (", ".join(map(str, f.result_types)) if len(f.result_types) == 1
                        else "(" + ", ".join(map(str, f.result_types)) + ")")
    vis = "public" if f.public else "private"
    attrs = f" attributes {_attrs(f.attrs)}" if f.attrs else ""
    out = [f"{ind}tt.func {vis} @\"{f.name}\"({args}){res}{attrs} {{"]
    out += _region_body(f.body, ind + "  ", entry_header=False)
    out.append(f"{ind}}} {_loc(f.loc)}")
    return out


def _region_body(region: Region, ind: str, entry_header: bool = True) -> list[str]:
    out: list[str] = []
    for k, block in enumerate(region.blocks):
        if k > 0 or entry_header:
            out.append(_block_header(block, k, ind[:-2]))
        for op in block.ops:
            out += _op(op, ind)
    return out


def _block_header(block: Block, k: int, ind: str) -> str:
    label = block.label or f"^bb{k}"
    args = ", ".join(f"{a.name}: {a.type}" for a in block.args)
    return f"{ind}{label}({args}):" if block.args else f"{ind}{label}:"


def _op(op: Op, ind: str) -> list[str]:
    head = ", ".join(r.name for r in op.results)
    head = f"{head} = " if head else ""
    operands = ", ".join(v.name for v in op.operands)
    ins = ", ".join(str(v.type) for v in op.operands)
    outs = ", ".join(str(v.type) for v in op.results)
    attrs = f" {_attrs(op.attrs)}" if op.attrs else ""
    sig = f" : ({ins}) -> ({outs})"
    if not op.regions:
        return [f'{ind}{head}"{op.name}"({operands}){attrs}{sig} {_loc(op.loc)}']
    out = [f'{ind}{head}"{op.name}"({operands}) ({{']
    for k, region in enumerate(op.regions):
        out += _region_body(region, ind + "  ")
        out.append(f"{ind}}}" + (", {" if k + 1 < len(op.regions) else ")") )
    out[-1] += f"{attrs}{sig} {_loc(op.loc)}"
    return out


def _attrs(attrs: dict) -> str:
    return "{" + ", ".join(f"{k} = {_attr(v)}" for k, v in attrs.items()) + "}"


def _attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isfinite(v):
            return repr(v)
        bits = struct.unpack("<Q", struct.pack("<d", v))[0]
        return f"0x{bits:016X} : f64"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, SymbolRef):
        return f'@"{v.name}"'
    if isinstance(v, DenseAttr):
        return f"dense<{_dense(v.values, str(v.type.element))}> : {v.type}"
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v) and v:
            return "array<i64: " + ", ".join(map(str, v)) + ">"
        return "[" + ", ".join(_attr(x) for x in v) + "]"
    raise TypeError(f"cannot print attribute value {v!r}")


_BITS = {"f64": ("<d", "<Q", 16), "f32": ("<f", "<I", 8), "f16": ("<e", "<H", 4)}


def _dense(values, elem: str) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_dense(x, elem) for x in values) + "]"
    if isinstance(values, bool):
        return "true" if values else "false"
    if isinstance(values, float) and not math.isfinite(values):
        if elem == "bf16":
            bits = struct.unpack("<I", struct.pack("<f", values))[0] >> 16
            return f"0x{bits:04X}"
        fmt, ifmt, digits = _BITS[elem]
        return f"0x{struct.unpack(ifmt, struct.pack(fmt, values))[0]:0{digits}X}"
    return repr(values)
