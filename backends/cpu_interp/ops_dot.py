"""tt.dot and tt.dot_scaled: the products both interpreters compute (one definition each).

The rules are shape-agnostic: operands may carry leading axes (the batched interpreter's program
axis) and may be held compact (a splat as (P, 1, 1)); `_block` broadcasts them to their TTIR
shape first. Products go through `np.matmul`: for float32 that is BLAS's sgemm, whose summation
order over K is its own (blocked), not a left-to-right loop; a device's tensor cores have theirs.
"""
from __future__ import annotations

import numpy as np

from sdk.backend import LoweringTable
from sdk.numerics import round_to

from .values import value_dtype

DOT = LoweringTable()
rule = DOT.rule


def _block(x, t) -> np.ndarray:
    """`x` broadcast to TTIR type `t`'s shape, keeping any leading axes."""
    x = np.asarray(x)
    shape = tuple(t.shape)
    lead = x.shape[:max(0, x.ndim - len(shape))]
    return x if x.shape == lead + shape else np.broadcast_to(x, lead + shape)


@rule("tt.dot")
def _dot(ctx, op, a, b, c):
    """fp inputs (f16, bf16, fp8, f32 incl. tf32 precision) are multiplied and accumulated in fp32
    (f64 in f64); int8 in int32. tf32/tf32x3/bf16x3 input precisions are computed in full fp32."""
    out_dt = value_dtype(op.result.type)
    a, b, c = (_block(x, v.type) for x, v in zip((a, b, c), op.operands))
    if out_dt.kind in "iu":
        acc = np.matmul(a.astype(np.int64), b.astype(np.int64)) + c
        return acc.astype(out_dt)
    work = np.float64 if out_dt == np.float64 or a.dtype == np.float64 else np.float32
    prod = np.matmul(a.astype(work, copy=False), b.astype(work, copy=False))
    out = prod + c.astype(work, copy=False)
    if str(op.result.type.element) == "bf16":
        return round_to("bf16", out.astype(np.float32))
    return out.astype(out_dt, copy=False)


@rule("tt.dot_scaled")
def _dot_scaled(ctx, op, a, b, c, *scales):
    """Microscaled dot (OCP MX): operands in e2m1 (two fp4 values per byte), e4m3, e5m2, bf16 or
    fp16, each optionally with e8m0 scales (one per 32 elements along K); computed in fp32."""
    has_a, has_b = _scale_presence(op, len(scales))
    a, b, c, *scales = (_block(x, v.type) for x, v in zip((a, b, c, *scales), op.operands))
    a_scale = scales.pop(0) if has_a else None
    b_scale = scales.pop(0) if has_b else None
    af = _mx_decode(a, str(op.attrs.get("lhs", "")), -1 if op.attrs.get("lhs_k_pack", True) else -2)
    bf = _mx_decode(b, str(op.attrs.get("rhs", "")), -2 if op.attrs.get("rhs_k_pack", True) else -1)
    if a_scale is not None:
        s = _e8m0(a_scale)  # (P, M, K/32)
        af = af * np.repeat(s, af.shape[-1] // s.shape[-1], axis=-1)
    if b_scale is not None:
        s = _e8m0(b_scale)  # (P, N, K/32)
        bf = bf * np.swapaxes(np.repeat(s, bf.shape[-2] // s.shape[-1], axis=-1), -1, -2)
    return (np.matmul(af, bf) + c).astype(value_dtype(op.result.type))


def _scale_presence(op, n: int) -> tuple[bool, bool]:
    if "has_a_scale" in op.attrs:
        return bool(op.attrs["has_a_scale"]), bool(op.attrs["has_b_scale"])
    seg = op.attrs.get("operandSegmentSizes") or op.attrs.get("operand_segment_sizes")
    if seg is not None and len(seg) == 5:
        return bool(seg[3]), bool(seg[4])
    return n >= 1, n >= 2


_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                 np.float32)


def _mx_decode(x, fmt: str, axis: int) -> np.ndarray:
    """Operand values as fp32; e2m1 bytes unpacked along `axis` (low nibble first)."""
    x = np.asarray(x)
    if fmt != "e2m1":
        return x.astype(np.float32)
    byte = x.astype(np.int64) & 0xFF
    pair = np.stack([_E2M1[byte & 0xF], _E2M1[byte >> 4]], axis=axis)  # (.., K/2, 2, ..): 2i, 2i+1
    shape = list(x.shape)
    shape[axis] *= 2
    return pair.reshape(shape)


def _e8m0(s) -> np.ndarray:
    """e8m0 scale bytes -> 2**(byte - 127) (0xFF is NaN)."""
    byte = np.asarray(s).astype(np.int64) & 0xFF
    return np.where(byte == 0xFF, np.nan, np.exp2(byte.astype(np.float32) - 127.0)).astype(np.float32)
