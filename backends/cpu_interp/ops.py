"""The cpu_interp lowering table: one numpy implementation per TTIR op."""
from __future__ import annotations

import numpy as np

from sdk.numerics import numpy_dtype
from sdk.ttir import DenseAttr, PointerType, TensorType

from .table import TABLE, rule


def _np(t) -> np.dtype:
    e = t.element
    return np.dtype(np.int64) if isinstance(e, PointerType) else numpy_dtype(str(e))


@rule("arith.constant")
def _constant(ctx, op):
    v, t = op.attrs["value"], op.result.type
    if isinstance(v, DenseAttr):
        return np.broadcast_to(np.array(v.values, dtype=_np(t)), t.shape).copy()
    return np.array(v, dtype=_np(t))


@rule("tt.get_program_id")
def _pid(ctx, op):
    return np.int32(ctx.pid[op.attrs["axis"]])


@rule("tt.get_num_programs")
def _nprog(ctx, op):
    return np.int32(ctx.grid[op.attrs["axis"]])


@rule("tt.make_range")
def _range(ctx, op):
    return np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)


@rule("tt.splat")
def _splat(ctx, op, x):
    return np.full(op.result.type.shape, x, dtype=_np(op.result.type))


@rule("tt.addptr")
def _addptr(ctx, op, p, off):
    width = numpy_dtype(str(op.result.type.element.pointee)).itemsize
    return p + off.astype(np.int64) * width


def _elem_width(ptr_type) -> tuple[np.dtype, int]:
    dt = numpy_dtype(str(ptr_type.element.pointee))
    return dt, dt.itemsize


@rule("tt.load")
def _load(ctx, op, ptr, mask=None, other=None):
    dt, width = _elem_width(op.operands[0].type)
    ptr = np.asarray(ptr)
    m = np.ones(ptr.shape, bool) if mask is None else np.broadcast_to(mask, ptr.shape)
    arg, off = ctx.mem.locate(ptr, m, width, op.loc)
    out = np.zeros(ptr.shape, dt) if other is None else np.array(np.broadcast_to(other, ptr.shape), dt)
    idx = off[m]
    out[m] = arg.handle[:arg.nbytes].view(np.uint8)[(idx[:, None] + np.arange(width)).reshape(-1)].view(dt) \
        if idx.size else out[m]
    return out


@rule("tt.store")
def _store(ctx, op, ptr, val, mask=None):
    dt, width = _elem_width(op.operands[0].type)
    ptr = np.asarray(ptr)
    m = np.ones(ptr.shape, bool) if mask is None else np.broadcast_to(mask, ptr.shape)
    arg, off = ctx.mem.locate(ptr, m, width, op.loc)
    idx = off[m]
    data = np.ascontiguousarray(np.broadcast_to(val, ptr.shape)[m].astype(dt)).view(np.uint8)
    arg.handle[(idx[:, None] + np.arange(width)).reshape(-1)] = data


@rule("tt.return")
def _ret(ctx, op, *vals):
    return list(vals)


def _binary(fn):
    return lambda ctx, op, a, b: np.asarray(fn(a, b)).astype(_np(op.result.type))


for _name, _fn in {"arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
                   "arith.divf": np.divide, "arith.addi": np.add, "arith.subi": np.subtract,
                   "arith.muli": np.multiply, "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin}.items():
    TABLE.register(_name, _binary(_fn))

_CMP = {"slt": np.less, "sle": np.less_equal, "sgt": np.greater, "sge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal, "olt": np.less, "ole": np.less_equal, "ogt": np.greater, "oge": np.greater_equal,
        "oeq": np.equal, "une": np.not_equal, "ult": np.less, "ule": np.less_equal, "ugt": np.greater,
        "uge": np.greater_equal}


@rule("arith.cmpi")
@rule("arith.cmpf")
def _cmp(ctx, op, a, b):
    return _CMP[op.attrs["predicate"]](a, b)


@rule("arith.select")
def _select(ctx, op, c, a, b):
    return np.where(c, a, b).astype(_np(op.result.type))
