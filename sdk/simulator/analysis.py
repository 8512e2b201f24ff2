"""What one launch of a kernel does, read from its TTIR and its launch arguments.

Counts are per program, averaged over a sample of programs spread over the grid, multiplied by
loop trip counts where the loop bounds follow from the scalar arguments, the program id, or scalars
the kernel loads from its (captured) tensor arguments; a bound that does not is counted once and
the result is marked `estimated`. Bytes are the tensors loaded and stored (masks
ignored), attributed to the tensor argument each pointer derives from, so that DRAM traffic can be
capped at each argument's size (re-reads served on chip); flops are 2*M*N*K per tt.dot (and per
tt.dot_scaled, at the type Triton multiplies it in, its microscaled operands' decode kept beside
them) and one per element per floating-point op.

Beside the totals, the structure that the on-chip and timing models need: every tt.dot with its
shape and where each operand comes from (a load inside the dot's loop, which a GPU compiler
pipelines through staged buffers; a load outside it; a computed value), every loop with its trip
count and the bytes one iteration loads, the access pattern of each load (contiguous along the
fastest axis, strided, or indirect through loaded indices) and the largest tensors a program reduces
or transposes (scratch on chip).
"""
from __future__ import annotations

import math
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..backend import DeviceArg
from ..ttir import Block, Module, Op, PointerType, ScalarType, TensorType, Type, Value

_SPECIAL = ("math.exp", "math.exp2", "math.log", "math.log2", "math.sqrt", "math.rsqrt", "math.sin",
            "math.cos", "math.tanh", "math.erf", "math.log1p", "math.expm1", "tt.extern_elementwise",
            "tt.precise_sqrt", "tt.precise_divf", "arith.divf")
_RMW_OPS = {"add": "add", "fadd": "add", "max": "max", "umax": "max", "min": "min", "umin": "min",
            "and": "and", "or": "or", "xor": "xor", "exch": "xchg"}


@dataclass
class DotSite:
    """One tt.dot of the kernel, per program: shape, operand dtypes and origins, executions."""

    m: int
    n: int
    k: int
    batch: int
    operand: str                  # device-model dtype of the operands ("bf16", "tf32", "fp8e4m3" ...)
    acc: str
    a_bytes: int                  # one operand tile as loaded (its element type), bytes
    b_bytes: int
    a_src: str                    # "loop_load" | "load" | "computed"
    b_src: str
    loop: int | None              # LoopSite key of the innermost enclosing scf.for, None outside loops
    execs: float = 0.0            # executions per program
    #: a tt.dot_scaled: the operands' own types ("bf16", "e2m1", "e4m3" ...), the elements of its
    #: microscaled operands one execution decodes where the target multiplies in `operand` instead
    #: (sdk.simulator.timing.scaled_decode_ops), and whether NaN scales are left unchecked (fastMath)
    scaled: tuple = ()
    decoded: int = 0
    fast_math: bool = False


@dataclass
class LoopSite:
    """One scf.for, per program: iterations, bytes one iteration loads, whether it holds a dot."""

    iterations: float = 0.0       # summed over every time the loop runs in a program
    load_bytes: float = 0.0       # bytes one iteration loads (loads directly in its body)
    has_dot: bool = False
    has_load: bool = False
    parent: int | None = None


@dataclass
class LaunchCounts:
    kernel: str
    grid: tuple[int, int, int]
    bytes_loaded: float = 0.0          # per program
    bytes_stored: float = 0.0          # per program
    loaded_by_arg: dict = field(default_factory=lambda: defaultdict(float))  # arg name -> per program
    stored_by_arg: dict = field(default_factory=lambda: defaultdict(float))
    extents: dict = field(default_factory=dict)       # arg name -> bytes the argument spans
    flops: dict = field(default_factory=lambda: defaultdict(float))  # (unit, operand, acc) -> per program
    footprint_bytes: int = 0           # peak live on-chip tensor bytes per program
    dot_types: set = field(default_factory=set)       # (operand dtype, acc dtype)
    atomics: set = field(default_factory=set)         # (op, dtype)
    dtypes: set = field(default_factory=set)          # element types the kernel computes with
    estimated: bool = False
    num_warps: int = 0                 # as the launch asked for them (0: the target's default)
    num_stages: int = 0
    dots: dict = field(default_factory=dict)          # site key -> DotSite
    loops: dict = field(default_factory=dict)         # site key -> LoopSite
    access: dict = field(default_factory=lambda: defaultdict(float))  # "contiguous"/"strided"/"indirect" -> bytes per program
    load_rounds: float = 0.0           # dependent rounds of loads per program (latency chain)
    reduce_bytes: int = 0              # largest tensor reduced or scanned across a program
    reductions: float = 0.0            # reductions and scans a program runs (cross-lane latency each)
    reshape_bytes: int = 0             # largest tensor transposed or gathered (through shared memory)
    #: ("load" or "store", element stride) -> elements per program accessed through pointers with no
    #: unit-stride axis (every element its own access: interleaved pairs, a column of a row-major matrix)
    strided_elements: dict = field(default_factory=lambda: defaultdict(float))
    addresses: dict = field(default_factory=dict)     # arg name -> (base address, bytes): reuse across launches
    #: the kernel's TTIR, from which a target's own compiler says what it allocates (sdk.simulator.compiled)
    ttir: str = field(default="", repr=False)

    @property
    def programs(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def dram_bytes(self) -> float:
        """Bytes the launch moves through DRAM: each argument's traffic capped at its size (a tile
        re-read by many programs comes from on-chip caches); traffic through pointers of unknown
        origin counts in full."""
        p = self.programs
        total = 0.0
        for by_arg, flat in ((self.loaded_by_arg, self.bytes_loaded), (self.stored_by_arg, self.bytes_stored)):
            known = 0.0
            for name, per_program in by_arg.items():
                known += per_program
                total += min(per_program * p, self.extents.get(name, math.inf))
            total += max(flat - known, 0.0) * p
        return total

    def totals(self) -> dict:
        p = self.programs
        return {"bytes": self.dram_bytes(),
                "flops": {"/".join(k): v * p for k, v in self.flops.items()}}


def dtype_name(t: Type) -> str:
    """TTIR element type -> device-model dtype name."""
    e = t.element
    if isinstance(e, PointerType):
        e = e.pointee.element
    name = str(e)
    return {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "f64": "fp64", "f8E4M3FN": "fp8e4m3",
            "f8E5M2": "fp8e5m2", "f8E4M3FNUZ": "fp8e4m3fnuz", "f8E5M2FNUZ": "fp8e5m2fnuz", "i1": "int1",
            "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64"}.get(name, name)


def _numel(t: Type) -> int:
    return math.prod(t.shape) if isinstance(t, TensorType) else 1


def _bytes(t: Type) -> int:
    e = t.element
    if isinstance(e, PointerType):
        e = e.pointee
        if isinstance(e, TensorType):  # block pointer: the block it addresses
            return _numel(e) * max(1, e.elem.bits // 8)
    return _numel(t) * max(1, e.bits // 8) if isinstance(e, ScalarType) else 0


def analyse(module: Module, grid: tuple[int, int, int], args: list[Any], samples: int = 32,
            unwritten: list[tuple[int, int]] = (), num_warps: int = 0, num_stages: int = 0,
            budget: int = 512) -> LaunchCounts:
    """Counts of one launch: per-program figures are the mean over the programs of the grid
    (program ids enter loop bounds: causal attention, varlen sequences), taken over the axes along
    which programs differ (sample_grid: every program of those axes up to `budget`, else a
    stratified sample of that many). `unwritten`: (address, bytes) ranges whose contents are not
    real data (outputs of earlier launches that a capture did not run); scalars there are not read."""
    func = module.entry
    runs = sample_grid(lambda pid: _analyse_program(module, grid, args, pid, unwritten), grid, samples, budget)
    counts = runs[0]
    if len(runs) > 1:
        n = len(runs)
        counts.bytes_loaded = sum(r.bytes_loaded for r in runs) / n
        counts.bytes_stored = sum(r.bytes_stored for r in runs) / n
        for field_name in ("flops", "loaded_by_arg", "stored_by_arg", "strided_elements"):
            merged = defaultdict(float)
            for r in runs:
                for key, val in getattr(r, field_name).items():
                    merged[key] += val / n
            setattr(counts, field_name, merged)
        counts.estimated = any(r.estimated for r in runs)
        counts.load_rounds = sum(r.load_rounds for r in runs) / n
        counts.reductions = sum(r.reductions for r in runs) / n
        merged = defaultdict(float)
        for r in runs:
            for key, val in r.access.items():
                merged[key] += val / n
        counts.access = merged
        counts.dots = _mean_sites([r.dots for r in runs], ("execs",))
        counts.loops = _mean_sites([r.loops for r in runs], ("iterations", "load_bytes"))
        for r in runs[1:]:
            counts.dot_types |= r.dot_types
            counts.atomics |= r.atomics
            counts.dtypes |= r.dtypes
            counts.reduce_bytes = max(counts.reduce_bytes, r.reduce_bytes)
            counts.reshape_bytes = max(counts.reshape_bytes, r.reshape_bytes)
    for loop in counts.loops.values():  # bytes per iteration (the walk summed them over iterations)
        loop.load_bytes = loop.load_bytes / loop.iterations if loop.iterations else 0.0
    counts.footprint_bytes = max(_peak_live(b) for b in func.body.blocks)
    counts.num_warps, counts.num_stages = num_warps, num_stages
    counts.ttir = module.text
    return counts


def _signature(c: LaunchCounts) -> tuple:
    """What a program does, to tell programs apart: bytes, work, loop trips, load rounds."""
    def r(x: float) -> float:
        return round(x, 6)
    return (r(c.bytes_loaded), r(c.bytes_stored), tuple(sorted((k, r(v)) for k, v in c.flops.items())),
            r(c.load_rounds), r(c.reductions), tuple(r(lp.iterations) for lp in c.loops.values()),
            tuple(sorted((k, r(v)) for k, v in c.loaded_by_arg.items())),
            tuple(sorted((k, r(v)) for k, v in c.strided_elements.items())))


def _probe_values(size: int) -> list[int]:
    return sorted({0, 1, size // 3, size // 2, (2 * size) // 3, size - 2, size - 1} & set(range(size)))


def sample_grid(walk, grid: tuple[int, int, int], samples: int = 32, budget: int = 512) -> list:
    """`walk(pid)` for programs standing for the whole grid. Every program of a grid of at most
    `samples`. Otherwise the axes along which programs differ are found first: on each axis a few
    ids (both ends, thirds, the middle) are walked from two starting programs, and an axis whose
    programs all do the same (bytes, work, loop trips) is held at one id. The axes that differ are
    then walked whole where they hold at most `budget` programs together, else a stratified sample
    of `budget` of them (sample_programs). A grid whose programs all do the same costs a few walks;
    a varlen or causal grid is covered along its sequence and block axes, not guessed from a few
    linear positions that may miss the sequences doing most of the work."""
    total = math.prod(grid) or 1
    if total <= samples:
        return [walk(_pid_of(p, grid)) for p in range(total)]
    memo: dict = {}

    def run(pid):
        if pid not in memo:
            memo[pid] = walk(pid)
        return memo[pid]
    lattice = sample_programs(grid, samples)
    bases = [lattice[0], lattice[len(lattice) // 2]]
    differs = []
    for axis, size in enumerate(grid):
        if size <= 1:
            continue
        for base in bases:
            if len({_signature(run(tuple(v if i == axis else b for i, b in enumerate(base))))
                    for v in _probe_values(size)}) > 1:
                differs.append(axis)
                break
    if not differs:
        return [run(bases[0])]
    sub = tuple(grid[a] if a in differs else 1 for a in range(3))
    fixed = bases[0]
    n_sub = math.prod(sub)
    picks = [_pid_of(p, sub) for p in range(n_sub)] if n_sub <= budget else sample_programs(sub, budget)
    return [run(tuple(p[a] if a in differs else fixed[a] for a in range(3))) for p in picks]


def _mean_sites(per_run: list[dict], fields: tuple[str, ...]) -> dict:
    """Sites (dots, loops) of several sampled programs: each numeric field averaged over the runs
    (a site a program never reached counts zero there)."""
    import copy
    out: dict = {}
    for sites in per_run:
        for key, site in sites.items():
            if key not in out:
                out[key] = copy.copy(site)
                for f in fields:
                    setattr(out[key], f, 0.0)
            for f in fields:
                setattr(out[key], f, getattr(out[key], f) + getattr(site, f) / len(per_run))
    return out


def _pid_of(linear: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    return (linear % grid[0], (linear // grid[0]) % grid[1], linear // (grid[0] * grid[1]))


#: generators of the rank-1 lattice that spreads sampled programs over a grid's second and third
#: axes (Korobov's choice for three dimensions: successive powers of one number, taken mod n)
_LATTICE_BASE = 7


def sample_programs(grid: tuple[int, int, int], samples: int) -> list[tuple[int, int, int]]:
    """Up to `samples` program ids standing for the whole grid: every program where the grid has no
    more; else a stratified sample: along each axis the ids are spread evenly (every value of an
    axis shorter than the sample taken about equally often), and a rank-1 lattice pairs them so
    that the combinations cover the grid too. Programs differ along whichever axis indexes a
    sequence or a block of a causal mask; an axis sampled at a few evenly spaced linear positions
    can miss the few sequences that do most of the work."""
    total = math.prod(grid) or 1
    if total <= samples:
        return [_pid_of(p, grid) for p in range(total)]
    n = max(samples, 1)
    g = 1
    for cand in (_LATTICE_BASE, 5, 3, 11, 13):  # a generator coprime with n keeps each axis stratified
        if math.gcd(cand, n) == 1:
            g = cand
            break
    gens = (1, g % n or 1, (g * g) % n or 1)
    picks = []
    for k in range(n):
        pid = tuple(min(size - 1, int(((k * a) % n + 0.5) * size / n)) for a, size in zip(gens, grid))
        picks.append(pid)
    return sorted(set(picks))


def _analyse_program(module: Module, grid: tuple[int, int, int], args: list[Any],
                     pid: tuple[int, int, int], unwritten: list[tuple[int, int]] = ()) -> LaunchCounts:
    func = module.entry
    counts = LaunchCounts(func.name, tuple(grid))
    env: dict[Value, Any] = {}
    walker = _Walker(module, counts, grid, pid, [a for a in args if isinstance(a, DeviceArg)])
    walker.unwritten = list(unwritten)
    for v, a in zip(func.args, args):
        env[v] = a.address if isinstance(a, DeviceArg) else a
        if isinstance(a, DeviceArg):
            walker.origin[v] = a.name
            counts.extents[a.name] = a.nbytes or math.inf
            counts.addresses[a.name] = (a.address, a.nbytes)
    walker.cfg(func.body.blocks, env, 1.0)
    return counts


_LOADS = ("tt.load", "tt.descriptor_load")
#: ops _Walker.op counts besides elementwise work, and those whose regions it walks
_COUNTED = frozenset({"tt.load", "tt.descriptor_load", "tt.store", "tt.descriptor_store", "tt.atomic_rmw",
                      "tt.atomic_cas", "tt.dot", "tt.dot_scaled", "tt.reduce", "tt.scan", "tt.trans", "tt.gather",
                      "tt.histogram"})
_CONTROL = frozenset({"scf.for", "scf.if", "scf.while", "tt.call"})
#: ops whose tensor results _Walker._track follows (strides, splat scalars)
_TRACKED = frozenset({"tt.make_range", "tt.splat", "arith.constant", "tt.expand_dims", "tt.broadcast", "arith.extsi",
                      "arith.extui", "arith.trunci", "arith.index_cast", "tt.trans", "arith.addi", "arith.subi",
                      "tt.addptr", "arith.muli", "arith.shli", "tt.make_tensor_ptr"})
#: ops an operand passes through on its way from memory to tt.dot without becoming a new value
_PASS = ("tt.trans", "tt.reshape", "tt.broadcast", "tt.expand_dims", "arith.extf", "arith.truncf",
         "tt.fp_to_fp", "arith.sitofp", "arith.uitofp", "tt.bitcast", "arith.bitcast", "ttg.convert_layout")
_FREE_INT = ("arith.constant", "arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci", "arith.bitcast")
#: ops whose result a GPU compiler builds through shared memory (a transpose, a gather across lanes);
#: reshapes, joins and splits stay in registers
_RESHAPES = ("tt.trans", "tt.gather", "tt.histogram")


#: id(module) -> (a reference to it, its defs, its ops' loops, static_info of its ops, whether each
#: block loads): kept while the module lives
_INDEX: dict = {}


def _static_info(op: Op) -> tuple:
    """What an op computes whatever the program: the float types of its results, and its
    elementwise work as ((unit, dtype, ""), elements) or None: special functions, floating-point
    arithmetic, and integer arithmetic on tensors (indices, hashes, random bits: vector
    instructions too)."""
    n = op.name
    fdtypes = tuple(dtype_name(r.type) for r in op.results
                    if isinstance(r.type.element, ScalarType) and r.type.element.is_float)
    vec = None
    if n in _SPECIAL:
        vec = (("special", dtype_name(op.results[0].type), ""), _numel(op.results[0].type))
    elif n.startswith("arith.") and n.endswith("f") and op.results and n != "arith.constant":
        vec = (("vector", dtype_name(op.results[0].type), ""), _numel(op.results[0].type))
    elif (n.startswith("arith.") and n not in _FREE_INT and op.results
          and isinstance(op.results[0].type, TensorType) and isinstance(op.results[0].type.elem, ScalarType)
          and op.results[0].type.elem.is_int):
        vec = (("vector", dtype_name(op.results[0].type), ""), _numel(op.results[0].type))
    # results that are all tensors: their values are never known (only scalars are folded)
    tensors = bool(op.results) and all(isinstance(r.type, TensorType) for r in op.results)
    return fdtypes, vec, tensors


class _Walker:
    def __init__(self, module: Module, counts: LaunchCounts, grid: tuple[int, int, int],
                 pid: tuple[int, int, int] = (0, 0, 0), memory: list[DeviceArg] = ()):
        self.module, self.c, self.grid, self.pid = module, counts, grid, pid
        self.memory = list(memory)
        self.unwritten: list[tuple[int, int]] = []
        self.origin: dict[Value, str] = {}  # pointer value -> the tensor argument it points into
        known = _INDEX.get(id(module))
        if known is not None and known[0]() is module:
            self.defs, self.loop_of, self.static = known[1], known[2], known[3]
        else:  # where each value is defined, each op's loop and what it computes: alike for every program
            self.defs: dict[Value, Op] = {}
            self.loop_of: dict[int, int | None] = {}  # id(op) -> id of its innermost scf.for
            self.static: dict[int, tuple] = {}       # id(op) -> _static_info(op)
            for func in module.funcs.values():
                for block in func.body.blocks:
                    self._index(block, None)
            _INDEX[id(module)] = (weakref.ref(module), self.defs, self.loop_of, self.static)
            weakref.finalize(module, _INDEX.pop, id(module), None)
        if known is not None and known[0]() is module:
            self.block_loads: dict = known[4]  # id(block) -> whether it loads
        else:
            self.block_loads = {}
            _INDEX[id(module)] = _INDEX[id(module)] + (self.block_loads,)
        self.loop: int | None = None          # the scf.for being walked
        self.while_done = 0                   # iterations of the last scf.while run concretely
        self.strides: dict[Value, tuple | None] = {}  # integer/pointer tensor -> element stride per axis
        self.splat: dict[Value, Any] = {}     # tensor -> the scalar it is filled with, when known
        self.indirect: set = set()            # values derived from tensors loaded from memory

    def _index(self, block: Block, loop: int | None) -> None:
        for op in block.ops:
            self.loop_of[id(op)] = loop
            self.static[id(op)] = _static_info(op)
            for r in op.results:
                self.defs[r] = op
            inner = id(op) if op.name == "scf.for" else loop
            for region in op.regions:
                for b in region.blocks:
                    self._index(b, inner)

    def _traffic(self, by_arg: dict, ptr: Value, amount: float) -> None:
        name = self.origin.get(ptr)
        if name is not None:
            by_arg[name] += amount

    def block(self, block: Block, env: dict, mult: float) -> None:
        loads = self.block_loads.get(id(block))
        if loads is None:
            loads = self.block_loads[id(block)] = any(op.name in _LOADS for op in block.ops)
        if loads:
            self.c.load_rounds += mult  # the loads of one pass over a block issue together
        for op in block.ops:
            self.op(op, env, mult)

    def cfg(self, blocks: list, env: dict, mult: float) -> None:
        """A function's blocks in control-flow order: a branch on a known condition (an early
        return: programs past the end of a sequence) follows the taken side only; an unknown one
        walks both (an upper bound), each block once."""
        by_label = {b.label: b for b in blocks}
        todo, seen = [blocks[0]] if blocks else [], set()
        while todo:
            block = todo.pop(0)
            if id(block) in seen:
                continue
            seen.add(id(block))
            self.block(block, env, mult)
            term = block.ops[-1] if block.ops else None
            if term is None or not term.successors:
                continue
            targets = term.successors
            if term.name == "cf.cond_br" and len(targets) == 2:
                cond = env.get(term.operands[0]) if term.operands else None
                if cond is not None:
                    targets = targets[:1] if cond else targets[1:]
            todo += [by_label[t] for t in targets if t in by_label]

    def _source(self, v: Value, dot: Op) -> str:
        """Where a dot operand comes from: a load in the dot's own loop, another load, or a value
        the program computed."""
        seen = 0
        while v in self.defs and seen < 32:
            op = self.defs[v]
            if op.name in _LOADS:
                loop = self.loop_of.get(id(dot))
                return "loop_load" if loop is not None and self.loop_of.get(id(op)) == loop else "load"
            if op.name not in _PASS or not op.operands:
                return "computed"
            v, seen = op.operands[0], seen + 1
        return "computed"

    def _dot_site(self, op: Op, mult: float) -> None:
        a, b, acc = (v.type for v in op.operands[:3])
        site = self.c.dots.get(id(op))
        if site is None:
            operand, accum = dtype_name(a), dtype_name(acc)
            if operand == "fp32" and op.attrs.get("inputPrecision", "tf32") in ("tf32", "tf32x3"):
                operand = "tf32"
            batch = math.prod(a.shape[:-2]) if len(a.shape) > 2 else 1
            site = DotSite(m=a.shape[-2], n=b.shape[-1], k=a.shape[-1], batch=batch, operand=operand, acc=accum,
                           a_bytes=self._operand_bytes(op.operands[0]), b_bytes=self._operand_bytes(op.operands[1]),
                           a_src=self._source(op.operands[0], op), b_src=self._source(op.operands[1], op),
                           loop=self.loop_of.get(id(op)))
            self.c.dots[id(op)] = site
        site.execs += mult
        if site.loop is not None and site.loop in self.c.loops:
            self.c.loops[site.loop].has_dot = True

    def _dot_scaled(self, op: Op, mult: float) -> None:
        """A microscaled dot (tt.dot_scaled: e2m1 / fp8 operands with a power-of-two scale per 32
        values along K). Its flops are counted at the 16-bit type Triton computes it in where a
        target has no microscaled matrix path (DecomposeScaledBlocked: bf16, fp16 if either side
        is fp16); the site keeps the operands' own types, so a target that multiplies them
        natively takes its own rate (sdk.simulator.timing), and the elements of the scaled
        operands a decomposition decodes per execution. With only the right-hand operand scaled,
        Triton computes the transposed product, the decoded operand first (from registers): the
        site is recorded that way round."""
        a, b, acc = (v.type for v in op.operands[:3])
        lhs, rhs = str(op.attrs.get("lhs", "")), str(op.attrs.get("rhs", ""))
        # e2m1 packs two values a byte along K (the default packing); other types one a byte
        m = a.shape[-2]
        k = a.shape[-1] * (2 if lhs == "e2m1" else 1)
        nn = b.shape[-1]
        batch = math.prod(a.shape[:-2]) if len(a.shape) > 2 else 1
        compute = "fp16" if "fp16" in (lhs, rhs) else "bf16"
        accum = dtype_name(acc)
        self.c.dot_types.add((compute, accum))
        self.c.flops[("matrix", compute, accum)] += mult * 2.0 * batch * m * nn * k
        narrow = [side for side, t in ((0, lhs), (1, rhs)) if t not in ("bf16", "fp16")]
        decoded = sum(m * k if side == 0 else k * nn for side in narrow) * batch
        site = self.c.dots.get(id(op))
        if site is None:
            a_src, b_src = self._source(op.operands[0], op), self._source(op.operands[1], op)
            a_bytes, b_bytes = self._operand_bytes(op.operands[0]), self._operand_bytes(op.operands[1])
            if narrow == [1]:  # computed as (B^T A^T)^T: the decoded operand is the first
                m, nn, a_src, b_src, a_bytes, b_bytes = nn, m, b_src, a_src, b_bytes, a_bytes
            if len(narrow) == 2:
                b_src = "computed"
            site = DotSite(m=m, n=nn, k=k, batch=batch, operand=compute, acc=accum, a_bytes=a_bytes,
                           b_bytes=b_bytes, a_src="computed" if narrow else a_src, b_src=b_src,
                           loop=self.loop_of.get(id(op)), scaled=(lhs, rhs), decoded=decoded,
                           fast_math=bool(op.attrs.get("fastMath", False)))
            self.c.dots[id(op)] = site
        site.execs += mult
        if site.loop is not None and site.loop in self.c.loops:
            self.c.loops[site.loop].has_dot = True

    def _operand_bytes(self, v: Value) -> int:
        """Bytes of a dot operand as it sits in memory: the element type of the load it came from
        (an fp8 tile upcast in registers is staged as fp8)."""
        seen, best = 0, _bytes(v.type)
        while v in self.defs and seen < 32:
            op = self.defs[v]
            if op.name in _LOADS:
                return _bytes(op.results[0].type)
            if op.name not in _PASS or not op.operands:
                break
            v, seen = op.operands[0], seen + 1
        return best

    # ---- access patterns ---------------------------------------------------------------------
    def _track(self, op: Op, env: dict) -> None:
        """Element strides per axis of integer and pointer tensors, scalars tensors are filled with,
        and which values derive from loaded tensors (indirect addressing)."""
        n = op.name
        if not op.results:
            return
        r = op.results[0]
        if any(v in self.indirect for v in op.operands) or (n in _LOADS and isinstance(r.type, TensorType)):
            for res in op.results:
                self.indirect.add(res)
        if n not in _TRACKED or not isinstance(r.type, TensorType):
            return
        rank = len(r.type.shape)
        st = self.strides.get
        if n == "tt.make_range":
            self.strides[r] = (1,)
        elif n == "tt.splat":
            self.strides[r] = (0,) * rank
            if op.operands and env.get(op.operands[0]) is not None:
                self.splat[r] = env.get(op.operands[0])
        elif n == "arith.constant":
            v = op.attrs.get("value")
            if getattr(v, "splat", False):
                self.strides[r] = (0,) * rank
                self.splat[r] = v.values
        elif n == "tt.expand_dims" and st(op.operands[0]) is not None:
            s = list(st(op.operands[0]))
            s.insert(op.attrs.get("axis", 0), 0)
            self.strides[r] = tuple(s)
        elif n in ("tt.broadcast", "arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast"):
            self.strides[r] = st(op.operands[0])
            if op.operands[0] in self.splat:
                self.splat[r] = self.splat[op.operands[0]]
        elif n == "tt.trans" and st(op.operands[0]) is not None:
            order = op.attrs.get("order") or list(range(rank))[::-1]
            src = st(op.operands[0])
            self.strides[r] = tuple(src[i] for i in order) if len(order) == len(src) else None
        elif n in ("arith.addi", "arith.subi", "tt.addptr") and len(op.operands) == 2:
            a, b = st(op.operands[0]), st(op.operands[1])
            if a is not None and b is not None and len(a) == len(b):
                self.strides[r] = tuple(x + y if n != "arith.subi" else x - y for x, y in zip(a, b))
        elif n in ("arith.muli", "arith.shli") and len(op.operands) == 2:
            for x, y in ((0, 1), (1, 0)):
                s, c = st(op.operands[x]), self.splat.get(op.operands[y])
                if s is not None and isinstance(c, int) and not isinstance(c, bool):
                    self.strides[r] = tuple(v * (c if n == "arith.muli" else 1 << c) for v in s)
                    break
        elif n == "tt.make_tensor_ptr":
            self.strides[r] = None

    def _access(self, op: Op, ptr: Value, amount: float) -> None:
        t = op.results[0].type if op.name in _LOADS else op.operands[1].type
        if op.name.startswith("tt.descriptor") or not isinstance(t, TensorType):
            self.c.access["contiguous" if isinstance(t, TensorType) else "scalar"] += amount
            return
        if ptr in self.indirect:
            self.c.access["indirect"] += amount
            return
        elem = isinstance(ptr.type.element, PointerType) and ptr.type.element.pointee
        if isinstance(ptr.type.element, PointerType) and isinstance(ptr.type.element.pointee, TensorType):
            self.c.access["contiguous"] += amount  # block pointer: rows of a tile
            return
        strides = self.strides.get(ptr)
        shape = t.shape
        axes = [i for i, d in enumerate(shape) if d > 1]
        if strides is None or not axes or len(strides) != len(shape):
            self.c.access["contiguous" if strides is None or not axes else "strided"] += amount
            return
        # the compiler coalesces along whichever axis is contiguous in memory
        s = min(abs(strides[i]) if strides[i] != 0 else 1 for i in axes)
        width = max(1, elem.bits // 8) if isinstance(elem, ScalarType) else 4
        self.c.access["contiguous" if s <= 1 or s * width <= 4 else "strided"] += amount
        if s > 1:  # no axis the lanes can walk one element at a time: each element is its own access
            self.c.strided_elements[("load" if op.name in _LOADS else "store", int(s))] += amount / width

    def op(self, op: Op, env: dict, mult: float) -> None:
        c, n = self.c, op.name
        fdtypes, vec, tensors = self.static[id(op)]
        if fdtypes:
            c.dtypes.update(fdtypes)
        self._propagate_origin(op)
        self._track(op, env)
        if vec is not None:  # elementwise work: vector or special-function operations
            c.flops[vec[0]] += mult * vec[1]
        elif n not in _COUNTED:
            pass
        elif n == "tt.load" or n == "tt.descriptor_load":
            c.bytes_loaded += mult * _bytes(op.results[0].type)
            self._traffic(c.loaded_by_arg, op.operands[0], mult * _bytes(op.results[0].type))
            self._access(op, op.operands[0], mult * _bytes(op.results[0].type))
            if self.loop is not None and self.loop in c.loops:
                c.loops[self.loop].load_bytes += mult * _bytes(op.results[0].type)
                c.loops[self.loop].has_load = True
        elif n == "tt.store" or n == "tt.descriptor_store":
            c.bytes_stored += mult * _bytes(op.operands[1].type)
            self._traffic(c.stored_by_arg, op.operands[0], mult * _bytes(op.operands[1].type))
            self._access(op, op.operands[0], mult * _bytes(op.operands[1].type))
        elif n in ("tt.atomic_rmw", "tt.atomic_cas"):
            val = op.operands[1] if n == "tt.atomic_rmw" else op.operands[2]
            c.bytes_loaded += mult * _bytes(val.type)
            c.bytes_stored += mult * _bytes(val.type)
            self._traffic(c.loaded_by_arg, op.operands[0], mult * _bytes(val.type))
            self._traffic(c.stored_by_arg, op.operands[0], mult * _bytes(val.type))
            kind = _RMW_OPS.get(op.attrs.get("atomic_rmw_op", ""), "cas") if n == "tt.atomic_rmw" else "cas"
            c.atomics.add((kind, dtype_name(val.type)))
        elif n == "tt.dot":
            a, b, acc = (v.type for v in op.operands[:3])
            m, k = a.shape[-2], a.shape[-1]
            nn = b.shape[-1]
            batch = math.prod(a.shape[:-2]) if len(a.shape) > 2 else 1
            operand, accum = dtype_name(a), dtype_name(acc)
            if operand == "fp32" and op.attrs.get("inputPrecision", "tf32") in ("tf32", "tf32x3"):
                operand = "tf32"
            c.dot_types.add((operand, accum))
            c.flops[("matrix", operand, accum)] += mult * 2.0 * batch * m * nn * k
            self._dot_site(op, mult)
        elif n == "tt.dot_scaled":
            self._dot_scaled(op, mult)
        elif n == "tt.reduce" or n == "tt.scan":
            per = sum(1 for inner in op.regions[0].entry.ops if inner.name.startswith("arith."))
            c.flops[("vector", dtype_name(op.operands[0].type), "")] += mult * per * _numel(op.operands[0].type)
            c.reduce_bytes = max(c.reduce_bytes, sum(_value_bytes(v) for v in op.operands))
            if isinstance(op.operands[0].type, TensorType) and _numel(op.operands[0].type) > 1:
                c.reductions += mult
        elif n in _RESHAPES and op.results:
            c.reshape_bytes = max(c.reshape_bytes, sum(_value_bytes(v) for v in op.results))
        if n not in _CONTROL:
            pass
        elif n == "scf.for":
            trips = self._trips(env, op)
            body = op.regions[0].entry
            site = c.loops.setdefault(id(op), LoopSite(parent=self.loop))
            site.iterations += mult * trips
            for init, arg in zip(op.operands[3:], body.args[1:]):
                if init in self.strides:
                    self.strides[arg] = self.strides[init]
                if init in self.indirect:
                    self.indirect.add(arg)
            outer, self.loop = self.loop, id(op)
            self.block(body, dict(env), mult * trips)
            self.loop = outer
        elif n == "scf.if":
            cond = env.get(op.operands[0])
            taken = op.regions if cond is None else (op.regions[:1] if cond else op.regions[1:2])
            for region in taken:  # an unknown condition counts both sides: an upper bound
                inner = dict(env)
                self.block(region.entry, inner, mult)
                if cond is not None and op.results:  # the taken side's scalars flow on
                    for r, v in zip(op.results, _terminator_operands(region.entry, "scf.yield")):
                        env[r] = inner.get(v)
            return
        elif n == "scf.while":
            if not self._while(op, env, mult):
                self.c.estimated = True  # the iterations run concretely so far are counted already
                trips = max(_bisection_trips(op) - self.while_done, 0.0)
                for region in op.regions:
                    for block in region.blocks:
                        self.block(block, dict(env), mult * trips)
            return
        elif n == "tt.call":
            callee = self.module.funcs.get(op.attrs["callee"].name)
            if callee is not None:
                inner = {v: env.get(a) for v, a in zip(callee.args, op.operands)}
                for v, a in zip(callee.args, op.operands):
                    if a in self.origin:
                        self.origin[v] = self.origin[a]
                self.cfg(callee.body.blocks, inner, mult)
                if callee.body.blocks:
                    for r, v in zip(op.results, _terminator_operands(callee.body.blocks[-1], "tt.return")):
                        env[r] = inner.get(v)
            return
        if tensors:  # a tensor's value is never known: nothing to fold
            return
        vals = [env.get(v) for v in op.operands]
        if n == "tt.load" and not isinstance(op.results[0].type, TensorType):
            # a scalar the kernel loads; masked: the value where the mask holds, else `other`
            mask = vals[1] if len(vals) > 1 else True
            if mask is None:
                folded = [None]
            elif mask:
                folded = [self._read_scalar(vals[0], op.results[0].type)]
            else:
                folded = [vals[2] if len(vals) > 2 else None]
        elif n == "tt.addptr" and not isinstance(op.results[0].type, TensorType) and None not in vals[:2]:
            folded = [vals[0] + int(vals[1]) * _bytes_of(op.results[0].type.pointee)]
        else:
            folded = _fold(op, vals, self.grid, self.pid)
        for r, val in zip(op.results, folded):
            env[r] = val

    #: scf.while loops run concretely up to this many iterations (a search over sequences)
    WHILE_LIMIT = 256

    def _while(self, op: Op, env: dict, mult: float) -> bool:
        """Run an scf.while whose carried scalars and condition follow from known values (a binary
        search over cumulative lengths): its work counted per iteration, its results bound. False
        when a value it needs is unknown (the caller then estimates; `while_done` says how many
        iterations were counted before that)."""
        before, after = op.regions[0].entry, op.regions[1].entry
        vals = [env.get(v) for v in op.operands]
        self.while_done = 0
        for _ in range(self.WHILE_LIMIT):
            if None in vals:
                return False
            benv = dict(env)
            benv.update(zip(before.args, vals))
            self.block(before, benv, mult)
            cond_args = _terminator_operands(before, "scf.condition")
            if not cond_args:
                return False
            cond, forwarded = benv.get(cond_args[0]), [benv.get(v) for v in cond_args[1:]]
            if cond is None:
                return False
            if not cond:
                for r, v in zip(op.results, forwarded):
                    env[r] = v
                return True
            aenv = dict(env)
            aenv.update(zip(after.args, forwarded))
            self.block(after, aenv, mult)
            self.while_done += 1
            vals = [aenv.get(v) for v in _terminator_operands(after, "scf.yield")]
        return False

    def _read_scalar(self, address: Any, type_: Type) -> Any:
        """A scalar the kernel loads (a sequence length, an offset), read from the captured tensor."""
        if address is None or not isinstance(type_, ScalarType) or not type_.is_int:
            return None
        if any(lo <= address < lo + size for lo, size in self.unwritten):
            return None
        for arg in self.memory:
            t = arg.handle
            if t is None or not arg.address <= address < arg.address + arg.nbytes:
                continue
            if not t.is_contiguous() or t.dtype.is_floating_point:
                return None
            index = (address - arg.address) // t.element_size()
            return int(t.reshape(-1)[index])
        return None

    def _propagate_origin(self, op: Op) -> None:
        """Pointers keep the argument they came from through splat/broadcast/addptr/reshape...,
        block pointers, and loop-carried values of scf.for."""
        if op.name == "scf.for":
            body = op.regions[0].entry
            for init, arg, res in zip(op.operands[3:], body.args[1:], op.results):
                if init in self.origin:
                    self.origin[arg] = self.origin[res] = self.origin[init]
            return
        if not op.operands or op.operands[0] not in self.origin:
            return
        for r in op.results:
            t = r.type.element if isinstance(r.type, TensorType) else r.type
            if isinstance(t, PointerType):
                self.origin[r] = self.origin[op.operands[0]]

    def _trips(self, env: dict, op: Op) -> float:
        lb, ub, step = (env.get(v) for v in op.operands[:3])
        if None in (lb, ub, step) or step == 0:
            self.c.estimated = True
            return 1.0
        return float(max(0, -(-(int(ub) - int(lb)) // int(step))))


#: a data-dependent scf.while over integers is counted as a bisection over a 32-bit value range
BISECTION_BITS = 32


def _bisection_trips(op: Op) -> float:
    """Iterations of an scf.while whose condition depends on loaded data: a loop carrying integer
    scalars (the bounds of a search) is counted as a bisection over their value range, at most
    BISECTION_BITS halvings (a threshold search over 32-bit order keys); any other loop once."""
    bits = [v.type.bits for v in op.operands
            if isinstance(v.type, ScalarType) and v.type.is_int and v.type.bits > 1]
    return float(min(max(bits), BISECTION_BITS)) if bits else 1.0


def _terminator_operands(block: Block, name: str) -> list:
    last = block.ops[-1] if block.ops else None
    return list(last.operands) if last is not None and last.name == name else []


def _bytes_of(t: Type) -> int:
    return max(1, t.bits // 8) if isinstance(t, ScalarType) else 8


def _fold(op: Op, vals: list, grid: tuple[int, int, int], pid: tuple[int, int, int] = (0, 0, 0)) -> list:
    """Evaluate scalar integer arithmetic (loop bounds) for the program `pid`."""
    n, a = op.name, vals
    if op.results and isinstance(op.results[0].type, TensorType):
        return [None] * len(op.results)
    try:
        if n == "arith.constant":
            v = op.attrs.get("value")
            return [v if isinstance(v, (int, float, bool)) else None]
        if n == "tt.get_program_id":
            return [pid[op.attrs["axis"]]]
        if n == "tt.get_num_programs":
            return [grid[op.attrs["axis"]]]
        if None in a:
            return [None] * len(op.results)
        f = _SIMPLE.get(n)
        if f is not None:
            return [f(a, op)]
    except (ZeroDivisionError, TypeError, KeyError):
        pass
    return [None] * len(op.results)


#: scalar integer operations _fold evaluates: name -> f(operand values, op)
_SIMPLE = {"arith.addi": lambda a, op: a[0] + a[1], "arith.subi": lambda a, op: a[0] - a[1],
           "arith.muli": lambda a, op: a[0] * a[1], "arith.divsi": lambda a, op: int(a[0] / a[1]),
           "arith.divui": lambda a, op: a[0] // a[1], "arith.remsi": lambda a, op: a[0] % a[1],
           "arith.ceildivsi": lambda a, op: -(-a[0] // a[1]), "arith.floordivsi": lambda a, op: a[0] // a[1],
           "arith.maxsi": lambda a, op: max(a), "arith.minsi": lambda a, op: min(a),
           "arith.extsi": lambda a, op: a[0], "arith.extui": lambda a, op: a[0], "arith.trunci": lambda a, op: a[0],
           "arith.index_cast": lambda a, op: a[0], "arith.select": lambda a, op: a[1] if a[0] else a[2],
           "arith.cmpi": lambda a, op: _cmp(op.attrs["predicate"], a[0], a[1])}


def _cmp(pred: str, x, y) -> bool:
    return {"slt": x < y, "sle": x <= y, "sgt": x > y, "sge": x >= y, "eq": x == y, "ne": x != y,
            "ult": x < y, "ule": x <= y, "ugt": x > y, "uge": x >= y}[pred]


def _value_bytes(v: Value) -> int:
    t = v.type
    if not isinstance(t, TensorType) or isinstance(t.elem, PointerType) or str(t.elem) == "i1":
        return 0  # addresses and masks live in registers / are recomputed, not in the scratchpad
    return _bytes(t)


def _peak_live(block: Block) -> int:
    """Peak bytes of tensor values live at once in a block (nested regions counted at their op)."""
    last_use: dict[Value, int] = {}
    for i, op in enumerate(block.ops):
        for v in _uses(op):
            last_use[v] = i
    live: dict[Value, int] = {v: _value_bytes(v) for v in block.args}
    peak = sum(live.values())
    for i, op in enumerate(block.ops):
        inner = max((_peak_live(r.entry) for r in op.regions), default=0)
        for r in op.results:
            live[r] = _value_bytes(r)
        peak = max(peak, sum(live.values()) + inner)
        for v in [v for v in live if last_use.get(v, -1) <= i]:
            del live[v]
    return peak


def _uses(op: Op):
    yield from op.operands
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield from _uses(inner)
