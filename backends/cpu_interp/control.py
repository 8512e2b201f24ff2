"""Control flow over batched programs: scf.for / scf.if / scf.while, tt.call, cf branches.

When every active program agrees (the usual case: loop bounds and branch conditions that do not
depend on the program id) a construct runs once for the whole batch. Where programs diverge it runs
masked: `ctx.active` marks the programs still executing, memory ops and asserts skip the others, and
values merge per program where the paths join (`np.where` on the program axis).
"""
from __future__ import annotations

import numpy as np

from sdk.errors import KernelFault

from .context import Ctx
from .table import TABLE, rule
from .values import value_dtype, where


def _lane(ctx, mask: np.ndarray, x):
    return mask.reshape((ctx.P,) + (1,) * (np.ndim(x) - 1))


def _merge(ctx, mask: np.ndarray, new: list, old: list) -> list:
    """Per program: `new` where mask, else `old` (values may be program-invariant, leading 1)."""
    out = []
    for n, o in zip(new, old):
        if n is o:
            out.append(n)
        elif hasattr(n, "merge"):
            out.append(n.merge(ctx, mask, o))
        else:
            n, o = np.asarray(n), np.asarray(o)
            out.append(np.where(_lane(ctx, mask, n if n.ndim >= o.ndim else o), n, o))
    return out


def _full(ctx, x) -> np.ndarray:
    x = np.asarray(x)
    return np.broadcast_to(x.reshape(-1) if x.ndim else x.reshape(1), (ctx.P,)) if x.size in (1, ctx.P) else x


# ------------------------------------------------------------------------------ cf branches
def run_blocks(ctx, region, args: list) -> list:
    """A region of several blocks (cf.br / cf.cond_br, e.g. an early `return`): blocks run in
    order, each under the mask of the programs that branched to it; block arguments and returned
    values merge per program."""
    prog = ctx.program
    labels = {b.label: b for b in region.blocks}
    incoming: dict[int, list] = {id(region.blocks[0]): [(ctx.active, list(args))]}
    outer = ctx.active
    result = None
    try:
        for block in region.blocks:
            edges = incoming.pop(id(block), None)
            if not edges:
                continue
            mask, vals = edges[0]
            for m2, v2 in edges[1:]:
                vals = _merge(ctx, m2, v2, vals) if m2 is not None else v2
                mask = None if (mask is None or m2 is None) else (mask | m2)
            if mask is not None and mask.all() and outer is None:
                mask = None
            ctx.active = mask
            code = prog.code(block)
            out = prog.run_code(ctx, code, vals)
            term = code.term
            if term is None or term.name not in ("cf.br", "cf.cond_br"):  # the region returns
                result = out if result is None or mask is None else _merge(ctx, mask, out, result)
                continue
            cur = np.ones(ctx.P, bool) if mask is None else mask
            if term.name == "cf.br":
                incoming.setdefault(id(labels[term.successors[0]]), []).append((mask, out))
                continue
            c = np.broadcast_to(np.asarray(out[0]).astype(bool).reshape(-1), (ctx.P,))
            t_blk, f_blk = labels[term.successors[0]], labels[term.successors[1]]
            nt = len(t_blk.args)
            t_args, f_args = out[1:1 + nt], out[1 + nt:]
            mt, mf = cur & c, cur & ~c
            if mt.any():
                incoming.setdefault(id(t_blk), []).append((None if mask is None and mt.all() else mt, t_args))
            if mf.any():
                incoming.setdefault(id(f_blk), []).append((None if mask is None and mf.all() else mf, f_args))
    finally:
        ctx.active = outer
    return result if result is not None else []


# ------------------------------------------------------------------------------------- scf.for
@rule("scf.for")
def _for(ctx, op, lb, ub, step, *init):
    body = op.regions[0]
    carried = list(init)
    lbv, ubv, stv = np.asarray(lb), np.asarray(ub), np.asarray(step)
    if lbv.size == 1 and ubv.size == 1 and stv.size == 1 or (
            (lbv == lbv.flat[0]).all() and (ubv == ubv.flat[0]).all() and (stv == stv.flat[0]).all()):
        lo, hi, st = int(lbv.flat[0]), int(ubv.flat[0]), int(stv.flat[0])
        if st <= 0:
            raise KernelFault(f"scf.for with a non-positive step ({st})")
        dt = lbv.dtype
        for i in range(lo, hi, st):
            carried = ctx.run(body, [np.array([i], dt)] + carried)
        return carried
    # bounds differ per program: run the longest trip count, masking programs that are done
    lbf, ubf, stf = (_full(ctx, v).astype(np.int64) for v in (lbv, ubv, stv))
    trips = np.maximum(0, -(-(ubf - lbf) // stf))
    outer = ctx.active
    if outer is not None:
        trips = np.where(outer, trips, 0)
    try:
        for t in range(int(trips.max()) if trips.size else 0):
            live = t < trips
            ctx.active = live
            iv = (lbf + t * stf).astype(lbv.dtype)
            new = ctx.run(body, [iv] + carried)
            carried = new if live.all() else _merge(ctx, live, new, carried)
    finally:
        ctx.active = outer
    return carried


# -------------------------------------------------------------------------------------- scf.if
@rule("scf.if")
def _if(ctx, op, cond):
    then_r = op.regions[0]
    else_r = op.regions[1] if len(op.regions) > 1 and op.regions[1].blocks and op.regions[1].blocks[0].ops else None
    c = np.asarray(cond).astype(bool).reshape(-1)
    outer = ctx.active
    live_c = c if outer is None else (c & outer if c.size == ctx.P else np.broadcast_to(c, (ctx.P,)) & outer)
    any_t = bool(live_c.any())
    any_f = bool((~c).any()) if outer is None else bool((outer & ~live_c).any())
    if not any_f:
        return ctx.run(then_r, [])
    if not any_t:
        return ctx.run(else_r, []) if else_r is not None else _skip(op)
    cp = np.broadcast_to(c, (ctx.P,))
    t_mask = cp if outer is None else cp & outer
    f_mask = ~cp if outer is None else ~cp & outer
    try:
        ctx.active = t_mask
        t_vals = ctx.run(then_r, [])
        ctx.active = f_mask
        f_vals = ctx.run(else_r, []) if else_r is not None else []
    finally:
        ctx.active = outer
    return _merge(ctx, cp, t_vals, f_vals) if op.results else []


def _skip(op):
    if op.results:
        raise KernelFault("scf.if with results and no else region")
    return []


# ----------------------------------------------------------------------------------- scf.while
@rule("scf.while")
def _while(ctx, op, *init):
    before, after = op.regions[0], op.regions[1]
    vals = list(init)
    outer = ctx.active
    act = outer
    results = None  # per program: the values forwarded when it left the loop
    trips, seen = 0, None
    try:
        while True:
            trips += 1
            if ctx.sched is None and trips > 1 and trips % _STUCK_EVERY in (0, 1):
                seen = _stuck(ctx, op, seen, trips, vals, act)
            ctx.active = act
            cond, *fwd = ctx.run(before, vals)
            c = np.asarray(cond).astype(bool).reshape(-1)
            if act is None and (c.all() or not c.any()):
                if not c.any():
                    return fwd
                vals = ctx.run(after, fwd)
                _spin(ctx, op)
                continue
            cp = np.broadcast_to(c, (ctx.P,))
            cur = np.ones(ctx.P, bool) if act is None else act
            stay, leaving = cur & cp, cur & ~cp
            if leaving.any():
                results = fwd if results is None else _merge(ctx, leaving, fwd, results)
            if not stay.any():
                return results if results is not None else fwd
            act = stay
            ctx.active = act
            vals = ctx.run(after, fwd)
    finally:
        ctx.active = outer


_STUCK_EVERY = 256  # a batched while loop compares its state across one iteration this often


def _stuck(ctx, op, seen, trips, vals, act):
    """Every `_STUCK_EVERY` iterations of a batched loop: if the loop's values, its active programs
    and memory are exactly as one iteration ago, it can never exit (nothing else runs meanwhile):
    a KernelFault at its source line instead of a hang. Returns the state to compare next time."""
    arrays = [v for v in vals if isinstance(v, np.ndarray)]
    if len(arrays) != len(vals):
        return None  # block pointers and the like: not compared
    state = (ctx.mem.version, None if act is None else act.copy(), [a.copy() for a in arrays])
    if trips % _STUCK_EVERY == 1 and seen is not None and seen[0] == state[0] and \
            (seen[1] is None) == (state[1] is None) and (seen[1] is None or np.array_equal(seen[1], state[1])) and \
            all(a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
                for a, b in zip(seen[2], state[2])):
        raise KernelFault(f"a while loop can never exit: after {trips - 1} iterations its values and memory are "
                          f"unchanged by an iteration (a spin wait on a flag no running program can raise?), "
                          f"at {where(op)}")
    return state


def _spin(ctx, op) -> None:
    """In a spin loop of programs run one at a time: let the others progress now and then."""
    if ctx.sched is not None and op in ctx.facts.spin_loops:
        ctx.sched.spin(int(ctx.program_ids()[0]), where(op))


@rule("scf.execute_region")
def _exec_region(ctx, op):
    return ctx.run(op.regions[0], [])


# ------------------------------------------------------------------------------------- calls
@rule("tt.call")
def _call(ctx, op, *args):
    callee = op.attrs["callee"]
    out = ctx.call(getattr(callee, "name", callee), list(args))
    return out if len(op.results) != 1 else out[0]


# Terminators: the interpreter reads their operands directly (they end a block); the rules exist so
# that the lowering table names every op it handles.
def _terminator(ctx, op, *vals):
    return list(vals)


for _name in ("tt.return", "scf.yield", "scf.condition", "tt.reduce.return", "tt.scan.return", "cf.br",
              "cf.cond_br", "tt.map_elementwise.return"):
    TABLE.register(_name, _terminator)


# ---------------------------------------------------------------------------- tt.map_elementwise
@rule("tt.map_elementwise")
def _map_elementwise(ctx, op, *xs):
    """A scalar function applied per element: every element runs as a program of its own, so
    branches inside the function may diverge per element. With `pack` = k the function receives k
    consecutive elements (row-major) of each input, in input order, and returns k values per result."""
    pack = int(op.attrs.get("pack", 1))
    shape = tuple(op.results[0].type.shape)
    n = int(np.prod(shape, dtype=np.int64))
    if pack < 1 or n % pack:
        raise KernelFault(f"tt.map_elementwise: pack = {pack} does not divide the {n} elements")
    P, groups = ctx.P, n // pack
    flat = [np.broadcast_to(np.asarray(x).reshape(np.shape(x)[0], -1), (P, n)).reshape(P * groups, pack)
            for x in xs]
    args = [x[:, k] for x in flat for k in range(pack)]
    sub = Ctx(ctx.program, ctx.grid, tuple(np.repeat(np.broadcast_to(p, (P,)), groups) for p in ctx.pid), ctx.mem)
    sub.env, sub.sched = ctx.env, ctx.sched
    if ctx.active is not None:
        sub.active = np.repeat(ctx.active, groups)
    outs = sub.run(op.regions[0], args)
    res = []
    for j, r in enumerate(op.results):
        cols = [np.broadcast_to(np.asarray(o), (P * groups,)) for o in outs[j * pack:(j + 1) * pack]]
        res.append(np.stack(cols, axis=-1).reshape((P,) + shape).astype(value_dtype(r.type), copy=False))
    return res[0] if len(res) == 1 else res
