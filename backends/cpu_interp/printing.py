"""What `tt.print` (tl.device_print, print in a kernel) writes, in the layout of Triton's compiled
backends, so that a kernel's output reads (and diffs) the same as on a GPU:

    pid (<x>, <y>, <z>) idx (<i1>, <i2>, ...)<prefix>(operand <n>) <value>

one line per element of each operand (in row-major order, operand after operand), each index
right-aligned to the width of its dimension's largest index, `(operand <n>) ` only when the op
prints several values, `idx ()` for a scalar, and `pid (<x>, <y>, <z>)<prefix>` alone when it
prints no value. Values as Triton's printf formats them: integers signed or unsigned as the op's
`isSigned` says (a uint32 is never negative), `hex=True` as 0x and the type's width in hex digits,
floating-point types as %f, pointers as %p. A GPU prints a scalar once per thread; a program here
has one thread of control, so it prints once per program.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from sdk.numerics import is_float, to_storage
from sdk.ttir import PointerType

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def print_text(pid: tuple[int, int, int], op, parts: list) -> str:
    """The lines one program's `tt.print` writes (newline-terminated); `parts` holds that
    program's value of each operand."""
    prefix = str(op.attrs.get("prefix", ""))
    head = f"pid ({pid[0]}, {pid[1]}, {pid[2]})"
    if not parts:
        return head + prefix + "\n"
    hexa = bool(op.attrs.get("hex", False))
    signed = list(op.attrs.get("isSigned") or [])
    lines = []
    for n, (value, operand) in enumerate(zip(parts, op.operands)):
        shape = tuple(operand.type.shape)
        show = formatter(operand.type.element, hexa, bool(signed[n]) if n < len(signed) else True)
        values = np.broadcast_to(np.asarray(value), shape)
        widths = [len(str(d - 1)) if d > 0 else 0 for d in shape]
        tag = f"(operand {n}) " if len(parts) > 1 else ""
        for index in np.ndindex(*shape):
            idx = ", ".join(str(i).rjust(w) for i, w in zip(index, widths))
            lines.append(f"{head} idx ({idx}){prefix}{tag}{show(values[index])}")
    return "\n".join(lines) + "\n"


def formatter(elem, hexa: bool, signed: bool) -> Callable[[object], str]:
    """How one element of TTIR type `elem` prints (printf's %i / %u / %f / %p / 0x%0Nx)."""
    if isinstance(elem, PointerType):
        return lambda v: f"0x{int(v):x}" if int(v) else "(nil)"
    name, bits = str(elem), max(1, getattr(elem, "bits", 64))
    if hexa:
        digits = max(1, bits // 4)
        if is_float(name):
            uint = _UINT[bits]
            return lambda v: f"0x{int(np.asarray(to_storage(name, v)).view(uint)):0{digits}x}"
        return lambda v: f"0x{int(v) & ((1 << bits) - 1):0{digits}x}"
    if is_float(name):
        return _float
    if signed and bits > 1:
        return lambda v: str(int(v))
    return lambda v: str(int(v) & ((1 << bits) - 1))


def _float(v) -> str:
    x = float(v)
    if x != x:
        return "-nan" if np.signbit(v) else "nan"
    return f"{x:f}"
