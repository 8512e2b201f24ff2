"""The function emitter: one TTIR kernel -> two LLVM functions.

    i32 day0_body(args, ranges, scratch, fault, pid_x, pid_y, pid_z, grid_x, grid_y, grid_z)
        one program: its scalar arguments read from `args` (an i64 per kernel parameter), block
        tensors in `scratch` (this worker's arena; every buffer has a fixed offset), bounds checked
        against `ranges` ([first byte, last valid start] per parameter); returns 0, or 1 after
        filling `fault` (kind, op index, three words of detail)
    i32 day0_kernel(args, ranges, scratch, fault, first, last, grid_x, grid_y, grid_z)
        programs first .. last-1 (linear ids, x fastest) one after another; the program that
        faulted is written to fault[2..4]

Ops are emitted in program order by the rules of `table.TABLE`, or of the table a caller gives
`KernelCompiler` (a scaffolded LLVM backend's emitter), as rule(fx, op, *operand values) -> result
values. A scalar is an LLVM value; a block tensor is a `tensors.TV`, lazy where it can
be (see tensors.py). A lazy value worth keeping is materialised where it is defined: one that
costs a few operations per element and has several uses, or is used inside a nested region (a
loop body would recompute it every iteration).
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir

from sdk.ttir import Block, Func, Module, Op, Region, TensorType

from ..provenance import pointer_origins
from .table import TABLE
from .tensors import TV, Buf, Splat, Trans, ZERO, cheap_to_recompute, const_i64
from .types import I1, I8, I32, I64, ONE32, PTR, ZERO32, Unsupported, elem_of, numel, shape_of

TERMINATORS = frozenset({"scf.yield", "tt.return", "tt.reduce.return", "tt.scan.return", "scf.condition",
                         "cf.br", "cf.cond_br", "tt.map_elementwise.return"})
ALIGN = 64
#: scratch buffers of a kernel that get alias scopes of their own (the metadata grows as their square)
MAX_SCOPES = 256

#: materialise a lazy value with several uses (or used in a nested region) from this cost on
KEEP_COST = 3


class FunctionEmitter:
    """Emits one function's body; `kc` (the KernelCompiler) owns the module and the arena."""

    def __init__(self, kc, func: Func, fn: ir.Function, params: list[ir.Value]):
        self.kc, self.func, self.fn = kc, func, fn
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.args_ptr, self.ranges, self.scratch, self.fault_ptr = params[:4]
        self.pid = list(params[4:7])
        self.grid = list(params[7:10])
        self.vals: dict[int, Any] = {}
        self.scopes: list[dict] = [{}]
        self.uses, self.nested = _use_counts(func)
        self.defs = {id(r): op for op in func.walk() for r in op.results}
        self.bounds_check = kc.bounds_check
        self.destinations: dict[int, Buf] = {}  # value -> the buffer its producer should write
        self._range_cache: dict[int, tuple[ir.Value, ir.Value]] = {}
        self._region_out: ir.Value | None = None  # 16 arena bytes the mapped-memory callback fills

    # ------------------------------------------------------------------------------ values
    def get(self, v) -> Any:
        try:
            return self.vals[id(v)]
        except KeyError:
            raise Unsupported(f"value {v.name} used before it is defined") from None

    def bind(self, v, val: Any) -> None:
        if isinstance(val, TV):
            if tuple(val.shape) != shape_of(v.type):
                raise Unsupported(f"internal shape mismatch for {v.name}: {val.shape} vs {shape_of(v.type)}")
            if not isinstance(val, (Buf, Splat)) and val.cost >= KEEP_COST and \
                    (self.uses.get(id(v), 0) > 1 or self.nested.get(id(v))) and \
                    not cheap_to_recompute(val):
                val = self.materialize(val)
        self.vals[id(v)] = val

    # ------------------------------------------------------------------------ memo scopes
    @staticmethod
    def index_key(idx) -> tuple:
        """A memo key part for the index values `idx` (by identity: pass the values themselves to
        `memo_put` as `keep`, so that no other value can take an identity the key holds)."""
        return tuple(("c", i.constant) if isinstance(i, ir.Constant) else id(i) for i in idx)

    def memo_get(self, key):
        for scope in reversed(self.scopes):
            hit = scope.get(key)
            if hit is not None:
                return hit[0]
        return None

    def memo_put(self, key, value, keep=()) -> None:
        """Remember `value` under `key` in the innermost scope; `keep`: the objects whose
        identities `key` holds, kept alive as long as the entry (a key made of the identity of
        an object that was freed would match whatever object Python puts at its address next)."""
        self.scopes[-1][key] = (value, keep)

    # ------------------------------------------------------------------------------- arena
    def alloc(self, shape, elem) -> Buf:
        """A scratch buffer of `shape` elements of `elem` (a fixed arena offset)."""
        nbytes = max(1, numel(shape)) * _size(elem.buf)
        off = self.kc.reserve(nbytes)
        ptr = self.b.gep(self.scratch, [const_i64(off)], source_etype=I8)
        return Buf(ptr, shape, elem, scope=self.kc.new_scope())

    def destination(self, v) -> Buf | None:
        """The buffer a consumer asked `v`'s producer to write `v` into (a loop-carried value's
        next buffer), or None: then the producer allocates its own."""
        return self.destinations.pop(id(v), None)

    def materialize(self, t: TV, into: Buf | None = None) -> Buf:
        """`t` in a row-major buffer (itself when it is one already, unless `into` is given)."""
        if isinstance(t, Buf) and into is None:
            return t
        if into is t or (isinstance(t, Buf) and into is not None and t.ptr is into.ptr):
            return into
        out = into or self.alloc(t.shape, t.elem)
        if self._transpose_blocks(t, out):
            return out

        def body(idx, accs):
            out.put(self, idx, t.at(self, idx))
            return accs
        self.for_each(t.shape, body)
        return out

    def _transpose_blocks(self, t: TV, out: Buf) -> bool:
        """A 2-D transpose of a row-major buffer (a tile loaded along its columns, a dot's B read
        along K) written into `out` a square block at a time: the block's rows loaded as vectors,
        transposed in registers by shuffles, stored as vectors. Element by element, the copy's
        strided reads become gathers, which cost several times as much. False where `t` is not such
        a transpose or its sides are not multiples of the block."""
        if not (isinstance(t, Trans) and t.order == [1, 0] and isinstance(t.src, Buf) and len(t.shape) == 2):
            return False
        ety = t.src.elem.buf
        if isinstance(ety, ir.PointerType) or _size(ety) not in (1, 2, 4, 8):
            return False
        n = 16 if _size(ety) <= 4 else 8
        rows, cols = t.shape  # out is rows x cols; the source is cols x rows
        if rows % n or cols % n:
            return False
        b, vt = self.b, ir.VectorType(ety, n)
        src = t.src

        def block(rb, cb):
            r0, c0 = b.mul(rb, const_i64(n)), b.mul(cb, const_i64(n))
            vecs = []
            for i in range(n):  # source row c0 + i, elements r0 .. r0 + n: out's column c0 + i
                at = src.addr(self, [b.add(c0, const_i64(i)), r0])
                v = b.load(at, typ=vt, align=1)
                self.kc.tag(v, src.scope)
                vecs.append(v)
            h = n // 2
            while h:  # swap the off-diagonal h x h blocks of every 2h x 2h block
                lo = [j for c in range(0, n, 2 * h) for j in list(range(c, c + h)) + list(range(n + c, n + c + h))]
                hi = [j + h for j in lo]
                for i in range(n):
                    if i % (2 * h) < h:
                        a, c = vecs[i], vecs[i + h]
                        vecs[i] = b.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, n), lo))
                        vecs[i + h] = b.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, n), hi))
                h //= 2
            for i in range(n):  # out row r0 + i
                self.kc.tag(b.store(vecs[i], out.addr(self, [b.add(r0, const_i64(i)), c0]), align=1), out.scope)

        self.loop(rows // n, lambda rb, accs: self.loop(cols // n, lambda cb, a2: (block(rb, cb), a2)[1], accs))
        return True

    # ------------------------------------------------------------------------------- loops
    def loop(self, n: int, body, accs=()) -> list:
        """`for i in range(n)` (n >= 1, static) around body(i, accs) -> new accs; returns the
        final accs. Each iteration is a memo scope of its own."""
        b = self.b
        if n == 1:
            self.scopes.append({})
            try:
                return list(body(ZERO, list(accs)))
            finally:
                self.scopes.pop()
        pre = b.block
        head = self.fn.append_basic_block("loop")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, "i")
        i.add_incoming(ZERO, pre)
        phis = []
        for a in accs:
            p = b.phi(a.type)
            p.add_incoming(a, pre)
            phis.append(p)
        self.scopes.append({})
        try:
            new = list(body(i, list(phis)))
        finally:
            self.scopes.pop()
        nxt = b.add(i, ir.Constant(I64, 1))
        latch = b.block
        i.add_incoming(nxt, latch)
        for p, a in zip(phis, new):
            p.add_incoming(a, latch)
        done = self.fn.append_basic_block("endloop")
        b.cbranch(b.icmp_unsigned("<", nxt, const_i64(n)), head, done)
        b.position_at_end(done)
        return new

    def for_each(self, shape, body, accs=(), order=None) -> list:
        """A loop nest over `shape`: body(idx, accs), idx in dimension order. The loops nest in
        `order` (dimensions, outermost first; default row-major, the last dimension innermost)."""
        shape = tuple(int(d) for d in shape)
        order = list(range(len(shape))) if order is None else list(order)

        def rec(k, idx, accs):
            if k == len(order):
                return body([idx[d] for d in range(len(shape))], accs)
            d = order[k]
            if shape[d] == 1:
                return rec(k + 1, {**idx, d: ZERO}, accs)
            return self.loop(shape[d], lambda i, a: rec(k + 1, {**idx, d: i}, a), accs)
        if not shape:
            self.scopes.append({})
            try:
                return list(body([], list(accs)))
            finally:
                self.scopes.pop()
        return rec(0, {}, list(accs))

    def branch_new(self, name: str) -> ir.Block:
        return self.fn.append_basic_block(name)

    # ------------------------------------------------------------------------------ faults
    def fail_if(self, cond: ir.Value, kind: int, op: Op, detail=None) -> None:
        """If `cond`: fill the fault record (kind, op index, detail words) and return 1.
        `detail` is called in the failing block and returns up to three i64 values."""
        b = self.b
        bad = self.fn.append_basic_block("fault")
        ok = self.fn.append_basic_block("ok")
        b.cbranch(cond, bad, ok)
        b.position_at_end(bad)
        words = [const_i64(kind), const_i64(self.kc.op_index(op))]
        if detail is not None:
            words += list(detail())
        for k, w in enumerate(words):
            b.store(w, b.gep(self.fault_ptr, [const_i64(k)], source_etype=I64))
        b.ret(ONE32)
        b.position_at_end(ok)

    def arg_range(self, k: int) -> tuple[ir.Value, ir.Value]:
        """(first byte, last byte an access of width 1 may start at + 1) of entry parameter k,
        loaded once at function entry."""
        hit = self._range_cache.get(k)
        if hit is None:
            b = self.b
            with b.goto_entry_block():  # before the entry block's branch into the body
                lo = b.load(b.gep(self.ranges, [const_i64(2 * k)], source_etype=I64), typ=I64)
                hi = b.load(b.gep(self.ranges, [const_i64(2 * k + 1)], source_etype=I64), typ=I64)
            hit = self._range_cache[k] = (lo, hi)
        return hit

    def _ranges_word(self, k: int) -> ir.Value:
        b = self.b
        with b.goto_entry_block():
            return b.load(b.gep(self.ranges, [const_i64(k)], source_etype=I64), typ=I64)

    def raw_regions(self) -> tuple[ir.Value, ir.Value]:
        """(count, pointer to [first byte, end) i64 pairs) of every tensor of the launch: after the
        parameters' ranges come the callback, the strict flag, the count, then the regions."""
        n = 2 * len(self.func.args)
        count = self._ranges_word(n + 2)
        with self.b.goto_entry_block():
            regions = self.b.gep(self.ranges, [const_i64(n + 3)], source_etype=I64)
        return count, regions

    def raw_region(self, lo: ir.Value, hi: ir.Value, write: bool) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(whether [lo, hi) is memory the process may access, first byte, end of the accessible
        run of mappings holding it): the launcher's callback, asked only when tensors were not
        registered with extra_tensors (then raw pointers must stay inside them: always false)."""
        b = self.b
        n = 2 * len(self.func.args)
        strict = self._ranges_word(n + 1)
        callback = b.inttoptr(self._ranges_word(n), PTR)
        if self._region_out is None:
            off = self.kc.reserve(16)
            with b.goto_entry_block():
                self._region_out = b.gep(self.scratch, [const_i64(off)], source_etype=I8)
        out = self._region_out
        ask = self.fn.append_basic_block("ask_mapped")
        done = self.fn.append_basic_block("asked")
        pre = b.block
        b.cbranch(b.icmp_unsigned("==", strict, const_i64(0)), ask, done)
        b.position_at_end(ask)
        rc = self._call_ptr(callback, [lo, hi, const_i64(int(write)), b.ptrtoint(out, I64)])
        yes = b.icmp_unsigned("!=", rc, const_i64(0))
        first = b.load(out, typ=I64)
        end = b.load(b.gep(out, [const_i64(1)], source_etype=I64), typ=I64)
        asked = b.block
        b.branch(done)
        b.position_at_end(done)
        ok, start, stop = b.phi(I1), b.phi(I64), b.phi(I64)
        for phi, v in ((ok, yes), (start, first), (stop, end)):
            phi.add_incoming(v, asked)
        ok.add_incoming(ir.Constant(I1, 0), pre)
        start.add_incoming(ZERO, pre)
        stop.add_incoming(ZERO, pre)
        return ok, start, stop

    def _call_ptr(self, fnptr: ir.Value, args: list) -> ir.Value:
        ty = ir.FunctionType(I64, [a.type for a in args])
        return self.b.call(_Indirect(fnptr, ty), args)

    # ------------------------------------------------------------------------------ blocks
    def emit_block(self, block: Block, args: list) -> tuple[Op | None, list]:
        """Bind `block`'s arguments, emit its ops; return its terminator and the terminator's
        operand values (nothing of the terminator itself is emitted)."""
        for a, v in zip(block.args, args):
            self.vals[id(a)] = v
        for op in block.ops:
            if op.name in TERMINATORS:
                return op, [self.get(v) for v in op.operands]
            self.emit_op(op)
        return None, []

    def emit_region(self, region: Region, args: list) -> tuple[Op | None, list]:
        if len(region.blocks) != 1:
            raise Unsupported("a region of several blocks inside a structured op")
        return self.emit_block(region.blocks[0], args)

    def emit_op(self, op: Op) -> None:
        table = self.kc.table
        rule = table.get(op.name)
        if rule is None or not table.supports(op):
            raise Unsupported(f"{op.name} ({op.type_signature()})")
        out = rule(self, op, *[self.get(v) for v in op.operands])
        if not op.results:
            return
        if len(op.results) == 1:
            outs = [out[0]] if isinstance(out, (list, tuple)) else [out]
        else:
            outs = list(out)
        for r, v in zip(op.results, outs):
            self.bind(r, v)


class _Indirect:
    """A function pointer as a call's callee (llvmlite calls a Function; this gives it the type)."""

    def __init__(self, ptr: ir.Value, fnty: ir.FunctionType):
        self.ptr, self.function_type, self.type = ptr, fnty, ptr.type

    def get_reference(self) -> str:
        return self.ptr.get_reference()


def vector_width() -> int:
    """float32 lanes of this CPU's widest vectors (16 with AVX-512, 8 with AVX, else 4)."""
    from .jit import host_features
    features = host_features()
    return 16 if "+avx512f" in features else 8 if "+avx," in features + "," or "+avx2" in features else 4


def _size(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    if isinstance(t, ir.FloatType):
        return 4
    if isinstance(t, ir.DoubleType):
        return 8
    if isinstance(t, ir.HalfType):
        return 2
    if isinstance(t, ir.PointerType):
        return 8
    raise Unsupported(f"a buffer of {t}")


def _use_counts(func: Func) -> tuple[dict[int, int], dict[int, bool]]:
    """Uses of every value, and whether a value is used in a region nested deeper than where it
    is defined (a loop body, a branch)."""
    uses: dict[int, int] = {}
    depth_of: dict[int, int] = {}
    nested: dict[int, bool] = {}

    def walk_region(region: Region, depth: int) -> None:
        for block in region.blocks:
            for a in block.args:
                depth_of[id(a)] = depth
            for op in block.ops:
                for v in op.operands:
                    uses[id(v)] = uses.get(id(v), 0) + 1
                    if depth > depth_of.get(id(v), depth):
                        nested[id(v)] = True
                for r in op.regions:
                    walk_region(r, depth + 1)
                for r in op.results:
                    depth_of[id(r)] = depth

    for a in func.args:
        depth_of[id(a)] = 0
    walk_region(func.body, 0)
    return uses, nested


class KernelCompiler:
    """One TTIR module -> an LLVM module with `day0_body` and `day0_kernel` (see the module doc)."""

    def __init__(self, module: Module, bounds_check: bool = True, table=None, fixed: dict | None = None):
        """`table`: the emitter rules (a LoweringTable; default the compiled tier's own, table.TABLE);
        `fixed`: integer parameters by position that every launch passes with this value (the code
        uses the constant; the launcher holds launches to it)."""
        self.module = module
        self.bounds_check = bounds_check
        self.fixed = dict(fixed or {})
        self.origins = pointer_origins(module)  # per access: the arguments its pointer may address
        self.table = TABLE if table is None else table
        self.ir = ir.Module(name="day0_kernel")
        self.arena = 0
        self._op_index = {id(op): k for k, op in enumerate(module.walk())}
        self.declared: dict[str, ir.Function] = {}
        self.vector_width = vector_width()
        self.scoped: list[list] = []  # per scratch buffer with an alias scope: its loads and stores

    def op_index(self, op: Op) -> int:
        return self._op_index[id(op)]

    def new_scope(self) -> int | None:
        """An alias scope for a new scratch buffer (None past MAX_SCOPES: its accesses then carry
        no scope, and LLVM assumes they may alias anything, as without scopes)."""
        if len(self.scoped) >= MAX_SCOPES:
            return None
        self.scoped.append([])
        return len(self.scoped) - 1

    def tag(self, instr, scope: int | None) -> None:
        """Mark a load or store of scratch buffer `scope` (alias scopes are attached at build)."""
        if scope is not None:
            self.scoped[scope].append(instr)

    def _attach_scopes(self) -> None:
        """Every scratch buffer is its own arena region (the arena only grows), so an access of one
        never touches another's memory: each access gets its buffer's scope and `noalias` for the
        other buffers' scopes. That lets LLVM keep a value read from one buffer (a row's pointer,
        a constant) in a register across stores to another, and vectorise the loop around them."""
        if len(self.scoped) < 2:
            return
        m = self.ir
        domain = m.add_metadata([ir.MetaDataString(m, "day0.scratch")])
        scopes = [m.add_metadata([ir.MetaDataString(m, f"day0.scratch.{k}"), domain])
                  for k in range(len(self.scoped))]
        for k, instrs in enumerate(self.scoped):
            if not instrs:
                continue
            own = m.add_metadata([scopes[k]])
            others = m.add_metadata([s for j, s in enumerate(scopes) if j != k])
            for instr in instrs:
                instr.set_metadata("alias.scope", own)
                instr.set_metadata("noalias", others)

    def reserve(self, nbytes: int) -> int:
        off = self.arena
        self.arena = off + (nbytes + ALIGN - 1) // ALIGN * ALIGN
        return off

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """A declared function (an LLVM intrinsic or a C math library symbol)."""
        fn = self.declared.get(name)
        if fn is None:
            fn = self.declared[name] = ir.Function(self.ir, ir.FunctionType(ret, args), name=name)
        return fn

    def build(self) -> str:
        if len(self.module.funcs) != 1:
            raise Unsupported("calls to functions kept out of line (noinline)")
        func = self.module.entry
        body_ty = ir.FunctionType(I32, [PTR, PTR, PTR, PTR, I32, I32, I32, I32, I32, I32])
        body = ir.Function(self.ir, body_ty, name="day0_body")
        body.linkage = "internal"
        body.args[2].add_attribute("noalias")
        fx = FunctionEmitter(self, func, body, list(body.args))
        params = [ir.Constant(elem_of(a.type).reg, self.fixed[k]) if k in self.fixed else self._param(fx, k, a)
                  for k, a in enumerate(func.args)]
        first = fx.fn.append_basic_block("body")
        fx.b.branch(first)
        fx.b.position_at_end(first)
        from .control import emit_function_body
        emit_function_body(fx, func, params)
        self._grid_function(body)
        self._attach_scopes()
        return str(self.ir)

    @staticmethod
    def _param(fx: FunctionEmitter, k: int, a) -> ir.Value:
        if isinstance(a.type, TensorType):
            raise Unsupported(f"a tensor parameter ({a.type})")
        e = elem_of(a.type)
        b = fx.b
        raw = b.load(b.gep(fx.args_ptr, [const_i64(k)], source_etype=I64), typ=I64)
        if e.is_ptr:
            return b.inttoptr(raw, PTR)
        if e.name == "f64":
            return b.bitcast(raw, e.reg)
        if e.is_float:  # f32 and the narrow types arrive as float32 bits of their value
            return b.bitcast(b.trunc(raw, I32), e.reg)
        return raw if e.reg.width == 64 else b.trunc(raw, e.reg)

    def _grid_function(self, body: ir.Function) -> None:
        ty = ir.FunctionType(I32, [PTR, PTR, PTR, PTR, I64, I64, I32, I32, I32])
        fn = ir.Function(self.ir, ty, name="day0_kernel")
        args, ranges, scratch, fault, first, last, gx, gy, gz = fn.args
        scratch.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        head = fn.append_basic_block("program")
        done = fn.append_basic_block("done")
        bad = fn.append_basic_block("faulted")
        entry = b.block
        b.cbranch(b.icmp_signed("<", first, last), head, done)
        b.position_at_end(head)
        lin = b.phi(I64)
        lin.add_incoming(first, entry)
        gx64, gy64 = b.zext(gx, I64), b.zext(gy, I64)
        px = b.urem(lin, gx64)
        rest = b.udiv(lin, gx64)
        py = b.urem(rest, gy64)
        pz = b.udiv(rest, gy64)
        pids = [b.trunc(p, I32) for p in (px, py, pz)]
        rc = b.call(body, [args, ranges, scratch, fault, *pids, gx, gy, gz])
        step = fn.append_basic_block("next")
        b.cbranch(b.icmp_unsigned("!=", rc, ZERO32), bad, step)
        b.position_at_end(step)
        nxt = b.add(lin, ir.Constant(I64, 1))
        lin.add_incoming(nxt, step)
        b.cbranch(b.icmp_signed("<", nxt, last), head, done)
        b.position_at_end(bad)
        for k, p in enumerate((px, py, pz)):
            b.store(p, b.gep(fault, [const_i64(2 + k + 3)], source_etype=I64))
        b.ret(rc)
        b.position_at_end(done)
        b.ret(ZERO32)
