"""Atomic read-modify-write semantics over numpy memory: lanes take effect one after the other.

`serial_rmw` is the one definition of every atomic kind (add, fadd, max, min, umax, umin, and, or,
xor, exch, cas) that both interpreters use: the batched one passes the live lanes of all its
programs in program order, the reference one the lanes of one program. The result is that of a
serial order, so two lanes on one address see each other's effect, exactly as on a device where
atomics to one address serialise. bf16 and fp8 values are rounded to the type after each step.
"""
from __future__ import annotations

import numpy as np

from sdk.errors import KernelFault
from sdk.numerics import compute_dtype, from_storage, to_storage

#: kinds a numpy ufunc applies in lane order with `ufunc.at` (exch: plain assignment, last wins)
_AT = {"add": np.add, "fadd": np.add, "max": np.maximum, "min": np.minimum, "umax": np.maximum,
       "umin": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "exch": None}


def serial_rmw(view: np.ndarray, kind: str, idx: np.ndarray, val: np.ndarray, cmp, elem: str,
               keep_old: bool = True) -> tuple[np.ndarray | None, int]:
    """Apply atomic `kind` to `view[idx[i]]` with `val[i]` (and `cmp[i]` for cas), i in order.

    `view` is the memory as its storage dtype, `idx` flat element indices, `val` / `cmp` flat
    compute values. Returns (the old value each lane read, as compute values; None when
    `keep_old` is False and no lane's result is read) and how many times memory changed."""
    cdt = compute_dtype(elem)
    plain = elem != "bf16" and not elem.startswith("f8") and kind in _AT
    if plain and not keep_old:  # nobody reads the old values: apply every lane in order
        tgt = _unsigned(view) if kind in ("umax", "umin") else view
        v = val.astype(view.dtype, copy=False)
        if kind == "exch":
            tgt[idx] = v
        else:
            _AT[kind].at(tgt, idx, _unsigned(v) if kind in ("umax", "umin") else v)
        return None, 1
    if plain and kind == "add" and cdt.kind in "iu" and len(idx) > 64:
        # integer add: old value = initial + the sum of earlier lanes on the same address
        order = np.argsort(idx, kind="stable")
        s_idx, s_val = idx[order], val[order].astype(cdt)
        start = np.r_[True, s_idx[1:] != s_idx[:-1]]
        csum = np.cumsum(s_val, dtype=cdt)
        seg = np.maximum.accumulate(np.where(start, np.arange(len(s_idx)), 0))
        excl = csum - s_val - (csum[seg] - s_val[seg])
        old = np.empty(len(idx), cdt)
        old[order] = (view[s_idx] + excl).astype(cdt)
        np.add.at(view, idx, val.astype(view.dtype, copy=False))
        return old, int(bool(val.any()))
    raw_cmp = None if cmp is None else to_storage(elem, cmp)
    old = np.empty(len(idx), cdt)
    changes = 0
    for rnd in _rounds(idx):
        ix = idx[rnd]
        raw_cur = view[ix]
        cur = from_storage(elem, raw_cur)
        old[rnd] = cur
        if kind == "cas":
            hit = _bits(raw_cur) == _bits(raw_cmp[rnd])
            new_raw = np.where(hit, to_storage(elem, val[rnd]), raw_cur)
        else:
            new_raw = to_storage(elem, combine(kind, cur, val[rnd], elem))
        if (_bits(new_raw) != _bits(raw_cur)).any():
            changes += 1
        view[ix] = new_raw
    return old, changes


def combine(kind: str, cur: np.ndarray, val: np.ndarray, elem: str) -> np.ndarray:
    """The value an atomic of `kind` leaves, from the current value and the operand."""
    val = val.astype(cur.dtype, copy=False)
    if kind in ("add", "fadd"):
        out = cur + val
    elif kind == "max":
        out = np.maximum(cur, val)
    elif kind == "min":
        out = np.minimum(cur, val)
    elif kind == "umax":
        out = np.maximum(_unsigned(cur), _unsigned(val)).view(cur.dtype)
    elif kind == "umin":
        out = np.minimum(_unsigned(cur), _unsigned(val)).view(cur.dtype)
    elif kind == "and":
        out = cur & val
    elif kind == "or":
        out = cur | val
    elif kind == "xor":
        out = cur ^ val
    elif kind == "exch":
        out = val
    else:
        raise KernelFault(f"unknown atomic kind '{kind}'")
    if elem == "bf16" or elem.startswith("f8"):
        out = from_storage(elem, to_storage(elem, out))
    return out


#: the `atomic_rmw_op` attribute (or keyword) -> the kind `serial_rmw` applies
KINDS = {"add": "add", "fadd": "fadd", "max": "max", "min": "min", "umax": "umax", "umin": "umin",
         "and": "and", "or": "or", "xor": "xor", "exch": "exch", "xchg": "exch"}


def kind_of(op, elem: str = "") -> str:
    """The atomic kind of a tt.atomic_rmw or tt.descriptor_reduce op on elements of type `elem`.
    A descriptor_reduce says `min`/`max` for every integer type: its signedness is the descriptor's
    (`!tt.tensordesc<tensor<..xui32>>`), so on an unsigned element type it is umin/umax."""
    kind = str(op.attrs.get("atomic_rmw_op") or op.attrs.get("kind") or op.attrs.get("keywords", ["add"])[0])
    kind = KINDS.get(kind.lower(), kind.lower())
    if kind in ("min", "max") and elem.startswith("ui"):
        return "u" + kind
    return kind


def _rounds(idx: np.ndarray):
    """Lane selections such that each holds distinct addresses, in serial (lane) order."""
    n = len(idx)
    if n == 0:
        return
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    new = np.empty(n, bool)
    new[0] = True
    new[1:] = s[1:] != s[:-1]
    if new.all():
        yield slice(None)
        return
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - start
    for r in range(int(rank.max()) + 1):
        yield np.nonzero(rank == r)[0]


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])
    return x


def _unsigned(x):
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])
