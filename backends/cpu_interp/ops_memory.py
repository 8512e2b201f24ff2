"""Pointers and memory: addptr, loads/stores (plain, block pointers, tensor descriptors), atomics."""
from __future__ import annotations

import numpy as np

from sdk.numerics import numpy_dtype
from sdk.ttir import PointerType, TensorType

from .analysis import padding_of
from .atomics import kind_of
from .pointers import Ptrs
from .table import rule
from .values import pointee as _pointee, pointee_width as _width


def as_ptrs(x, w) -> "Ptrs":
    return x if isinstance(x, Ptrs) else Ptrs(np.asarray(x), None, w, np.shape(x))


@rule("tt.addptr")
def _addptr(ctx, op, p, off):
    w = _width(op.result.type)
    if isinstance(p, Ptrs) and p.w == w:
        off = np.asarray(off)
        new = off if p.off is None else np.add(p.off, off, dtype=np.int64)
        return Ptrs(p.base, new, w, np.broadcast_shapes(p.shape, off.shape))
    p = np.asarray(p)
    off = off.astype(np.int64) if off.dtype != np.int64 else off
    return p + (off * w if w != 1 else off)


@rule("tt.int_to_ptr")
@rule("tt.ptr_to_int")
def _ptrcast(ctx, op, x):
    return x.astype(np.int64) if op.name == "tt.int_to_ptr" else x.astype(numpy_dtype(str(op.result.type.element)))


# ------------------------------------------------------------------------------ block pointers
class BlockPtr:
    """A `tt.make_tensor_ptr` value: base address, shape/strides (elements), offsets, block shape."""

    __slots__ = ("base", "shape", "strides", "offsets", "block", "elem")

    def __init__(self, base, shape, strides, offsets, block, elem):
        self.base, self.shape, self.strides, self.offsets = base, shape, strides, offsets
        self.block, self.elem = block, elem

    def merge(self, ctx, mask, other: "BlockPtr") -> "BlockPtr":
        """Per program: self where `mask`, else `other` (after control flow diverged)."""
        pick = lambda a, b: _pick(ctx, mask, a, b)
        return BlockPtr(pick(self.base, other.base), [pick(a, b) for a, b in zip(self.shape, other.shape)],
                        [pick(a, b) for a, b in zip(self.strides, other.strides)],
                        [pick(a, b) for a, b in zip(self.offsets, other.offsets)], self.block, self.elem)

    def addresses(self, check: list[int] | None):
        """(pointer tensor, in-bounds mask over the checked dims or None), with a program axis."""
        w = numpy_dtype(self.elem).itemsize
        nd = len(self.block)
        base = _expand(self.base, nd).astype(np.int64)
        off = None
        mask = None
        for d, n in enumerate(self.block):
            shp = [1] * (nd + 1)
            shp[d + 1] = n
            start = _expand(self.offsets[d], nd).astype(np.int64)
            stride = _expand(self.strides[d], nd).astype(np.int64)
            r = np.arange(n, dtype=np.int64).reshape(shp)
            base = base + start * stride * w
            term = r * stride
            off = term if off is None else off + term
            if check and d in check:
                i = start + r
                ok = (i >= 0) & (i < _expand(self.shape[d], nd))
                mask = ok if mask is None else mask & ok
        lead = max(base.shape[0], off.shape[0])
        return Ptrs(base, off, w, (lead,) + tuple(self.block)), mask


def _pick(ctx, mask, a, b) -> np.ndarray:
    """A per-program scalar field: `a` for the programs in `mask`, else `b`."""
    a, b = np.asarray(a), np.asarray(b)
    return np.where(np.asarray(mask).reshape(-1), np.broadcast_to(a.reshape(-1), (ctx.P,)),
                    np.broadcast_to(b.reshape(-1), (ctx.P,)))


def _expand(x, nd):
    x = np.asarray(x)
    return x.reshape(x.shape[:1] + (1,) * nd)


def _block_of(t) -> tuple[tuple[int, ...], str]:
    pointee = t.pointee if isinstance(t, PointerType) else t.element.pointee
    return tuple(pointee.shape), str(pointee.element)


@rule("tt.make_tensor_ptr")
def _make_block_ptr(ctx, op, base, *rest):
    block, elem = _block_of(op.result.type)
    nd = len(block)
    shape, strides, offsets = rest[:nd], rest[nd:2 * nd], rest[2 * nd:3 * nd]
    return BlockPtr(base, list(shape), list(strides), list(offsets), block, elem)


@rule("tt.advance")
def _advance(ctx, op, p, *deltas):
    return BlockPtr(p.base, p.shape, p.strides, [o + d for o, d in zip(p.offsets, deltas)], p.block, p.elem)


def _check_dims(op) -> list[int]:
    bc = op.attrs.get("boundaryCheck", op.attrs.get("boundary_check"))
    if bc is None:
        return []
    return [int(x) for x in (bc if isinstance(bc, (list, tuple)) else [bc])]


def _padding(op, elem):
    return np.array(np.nan, np.float32) if padding_of(op) == "nan" else None


# --------------------------------------------------------------------------- loads and stores
@rule("tt.load")
def _load(ctx, op, ptr, mask=None, other=None):
    if isinstance(ptr, BlockPtr):
        addr, m = ptr.addresses(_check_dims(op))
        return ctx.mem.load(ctx, op, addr, m, _padding(op, ptr.elem) if m is not None else None, ptr.elem)
    return ctx.mem.load(ctx, op, ptr, mask, other, _pointee(op.operands[0].type))


@rule("tt.store")
def _store(ctx, op, ptr, val, mask=None):
    if isinstance(ptr, BlockPtr):
        addr, m = ptr.addresses(_check_dims(op))
        return ctx.mem.store(ctx, op, addr, val, m, ptr.elem)
    return ctx.mem.store(ctx, op, ptr, val, mask, _pointee(op.operands[0].type))


# ---------------------------------------------------------------------------- tensor descriptors
class TensorDesc:
    """A `tt.make_tensor_descriptor` value (or a host TensorDescriptor argument)."""

    __slots__ = ("base", "shape", "strides", "block", "elem", "padding")

    def __init__(self, base, shape, strides, block, elem, padding="zero"):
        self.base, self.shape, self.strides, self.block, self.elem = base, shape, strides, block, elem
        self.padding = padding

    def merge(self, ctx, mask, other: "TensorDesc") -> "TensorDesc":
        """Per program: self where `mask`, else `other` (after control flow diverged)."""
        pick = lambda a, b: _pick(ctx, mask, a, b)
        return TensorDesc(pick(self.base, other.base), [pick(a, b) for a, b in zip(self.shape, other.shape)],
                          [pick(a, b) for a, b in zip(self.strides, other.strides)], self.block, self.elem,
                          self.padding)

    def at(self, offsets) -> BlockPtr:
        return BlockPtr(self.base, self.shape, self.strides, list(offsets), self.block, self.elem)


def _block_type(desc_type) -> TensorType:
    """The block type of a `!tt.tensordesc` type."""
    blk = desc_type.block
    if not isinstance(blk, TensorType):  # Triton 3.8 prints the block type as `<8x16xf32>`
        from sdk.ttir.types import parse_type
        blk = parse_type(f"tensor<{blk}>")
    return blk


@rule("tt.make_tensor_descriptor")
def _make_desc(ctx, op, base, *rest):
    blk = _block_type(op.result.type)
    block, elem = tuple(blk.shape), str(blk.element)
    nd = len(rest) // 2
    return TensorDesc(base, [np.asarray(s, np.int64) for s in rest[:nd]],
                      [np.asarray(s, np.int64) for s in rest[nd:2 * nd]], block, elem,
                      padding_of(op))


def host_descriptor(arg, ty) -> TensorDesc:
    """A host TensorDescriptor argument (sdk.backend.TensorDescArg) as the kernel's descriptor value."""
    blk = _block_type(ty)
    one = lambda n: np.array([n], np.int64)
    return TensorDesc(one(arg.base.address), [one(n) for n in arg.shape], [one(n) for n in arg.strides],
                      tuple(blk.shape), str(blk.element), arg.padding)


def _desc_view(desc: TensorDesc, offsets, result_shape):
    bp = desc.at(offsets[-len(desc.block):] if len(offsets) >= len(desc.block) else offsets)
    return bp, list(range(len(desc.block)))


@rule("tt.descriptor_load")
def _desc_load(ctx, op, desc, *offsets):
    bp, dims = _desc_view(desc, offsets, op.result.type.shape)
    addr, m = bp.addresses(dims)
    fill = np.array(np.nan, np.float32) if desc.padding == "nan" and m is not None else None
    out = ctx.mem.load(ctx, op, addr, m, fill, desc.elem)
    return out.reshape(out.shape[:1] + tuple(op.result.type.shape))


def _desc_block_write(op, desc: TensorDesc, rest):
    """(addresses, in-bounds mask, value shaped as the block) of a store-like descriptor op whose
    operands after the descriptor are the offsets, then the value."""
    offsets, val = rest[:-1], np.asarray(rest[-1])
    bp, dims = _desc_view(desc, offsets, None)
    addr, m = bp.addresses(dims)
    val = np.broadcast_to(val, val.shape[:1] + tuple(op.operands[-1].type.shape))
    return addr, m, val.reshape(val.shape[:1] + tuple(desc.block))


@rule("tt.descriptor_store")
def _desc_store(ctx, op, desc, *rest):
    addr, m, val = _desc_block_write(op, desc, rest)
    ctx.mem.store(ctx, op, addr, val, m, desc.elem)


@rule("tt.descriptor_reduce")
def _desc_reduce(ctx, op, desc, *rest):
    """An atomic read-modify-write of a whole block through a descriptor (`desc.atomic_add` ...)."""
    addr, m, val = _desc_block_write(op, desc, rest)
    ctx.mem.atomic(ctx, op, kind_of(op, desc.elem), addr, val, m, desc.elem)


def _gather_rows(desc: TensorDesc, rows, col):
    """Addresses and in-bounds mask of rows `rows` (P, R) at column `col` (P,) of a 2-D descriptor
    whose block is one row of C elements: (pointer tensor (P, R, C), mask)."""
    w = numpy_dtype(desc.elem).itemsize
    C = desc.block[-1]
    rows = np.asarray(rows, np.int64)
    rows = rows.reshape(rows.shape[:1] + (-1, 1))
    cols = np.asarray(col, np.int64).reshape(-1, 1, 1) + np.arange(C, dtype=np.int64)[None, None, :]
    s0, s1 = (_expand(x, 2).astype(np.int64) for x in desc.strides)
    n0, n1 = (_expand(x, 2).astype(np.int64) for x in desc.shape)
    base = _expand(desc.base, 2).astype(np.int64)
    addr = base + (rows * s0 + cols * s1) * w
    mask = (rows >= 0) & (rows < n0) & (cols >= 0) & (cols < n1)
    lead = max(addr.shape[0], mask.shape[0])
    shape = (lead, rows.shape[1], C)
    return np.broadcast_to(addr, shape), np.broadcast_to(mask, shape)


@rule("tt.descriptor_gather")
def _desc_gather(ctx, op, desc, rows, col):
    addr, m = _gather_rows(desc, rows, col)
    fill = np.array(np.nan, np.float32) if desc.padding == "nan" else None
    return ctx.mem.load(ctx, op, addr, m, fill, desc.elem)


@rule("tt.descriptor_scatter")
def _desc_scatter(ctx, op, desc, rows, col, val):
    addr, m = _gather_rows(desc, rows, col)
    ctx.mem.store(ctx, op, addr, np.asarray(val), m, desc.elem)


# ------------------------------------------------------------------------------------- atomics
@rule("tt.atomic_rmw")
def _atomic_rmw(ctx, op, ptr, val, mask=None):
    return ctx.mem.atomic(ctx, op, kind_of(op), ptr, val, mask, _pointee(op.operands[0].type))


@rule("tt.atomic_cas")
def _atomic_cas(ctx, op, ptr, cmp, val):
    return ctx.mem.atomic(ctx, op, "cas", ptr, val, None, _pointee(op.operands[0].type), cmp=cmp)
