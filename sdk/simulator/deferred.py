"""Floating-point data a capture never reads, left uncomputed.

Capturing a call at realistic shapes builds its inputs on the CPU: random weights, caches and
activations, often run through a reference pipeline to make them realistic. The capture reads none
of those values: it records launches, grids and the integer scalars kernels load (lengths, offsets,
tables), and the wrapper's PyTorch work by shape. `DeferredFloats` is a dispatch mode that records
every operation producing only floating-point tensors (above a size, or from data already deferred)
instead of running it, and returns tensors of the right shape, strides and type whose memory is
never touched. Anything that needs the values runs the recorded operations first, in their order:
an operation with an integer or boolean result (a routing top-k, a comparison), a value read back
(`.item()`, `.tolist()`), a write to memory a recorded operation still has to read, a random draw
from a generator with recorded draws pending (those draws run first, on that generator, in order,
so that every later draw sees the state it would have seen). What is computed is therefore what an
eager run computes, bit for bit; what is never needed is never computed.

Memory of deferred tensors is allocated (untouched pages cost nothing) so that data pointers,
strides and views behave as usual; only their contents are absent. Code that reads float contents
behind PyTorch's dispatcher (a NumPy view, a raw pointer read by a C extension) would see garbage;
`Tensor.tolist`, `Tensor.numpy` and `Tensor.__array__` run pending operations first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

#: outputs smaller than this (elements) are computed at once unless they derive from deferred data
MIN_ELEMENTS = 1 << 14
#: integer tensors of at least this many elements are payload too (packed weights, codes): an
#: analysis reads scalars only from smaller ones (sdk.simulator.run.lightweight)
PAYLOAD_INT_ELEMENTS = 1 << 24
#: operations whose results are data-dependent or reach the host: always run
_ALWAYS_RUN = frozenset({"_local_scalar_dense", "equal", "is_nonzero", "nonzero", "unique", "_unique",
                         "_unique2", "unique_dim", "unique_consecutive", "masked_select", "allclose",
                         "_assert_async", "item", "set_", "resize_", "record_stream"})


@dataclass
class _Entry:
    index: int
    func: Any
    args: tuple
    kwargs: dict
    outputs: list          # placeholders an out-of-place operation returned (in-place: empty)
    writes: list           # storage keys it writes
    reads: list            # storage keys it reads
    generator: Any = None  # the generator a random operation draws from
    done: bool = False
    draw: tuple | None = None   # (distribution, elements, dtype) of a draw whose generator can skip it
    state: Any = None           # the generator's state before the draw, once the generator skipped it


def storage_key(t: torch.Tensor) -> int:
    """The identity of a tensor's memory (views share it)."""
    return t.untyped_storage().data_ptr()


_key = storage_key


def _to_meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


@dataclass
class _State:
    entries: list = field(default_factory=list)
    writers: dict = field(default_factory=dict)   # storage key -> pending entries writing it
    readers: dict = field(default_factory=dict)   # storage key -> pending entries reading it
    chains: dict = field(default_factory=dict)    # id(generator) -> pending random entries
    keep: dict = field(default_factory=dict)      # storage key -> a tensor holding it alive


class DeferredFloats(TorchDispatchMode):
    """See the module's docstring. `min_elements`: floating-point results smaller than this that
    derive from no deferred data are computed at once. `deferred` / `forced` count the operations
    recorded and those run later because something needed their values."""

    def __init__(self, min_elements: int = MIN_ELEMENTS) -> None:
        super().__init__()
        self.min_elements = min_elements
        self.s = _State()
        self.deferred = self.forced = 0
        self.trace: list | None = None  # (operation, entries it made run) when set to a list
        self.watch: set | None = None   # when a set: the memory every operation writes (storage keys)
        self._scratch: dict = {}        # dtype -> a buffer pending draws are skipped through
        self._patched: list = []

    # ---- the dispatch ------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if any(t.device.type != "cpu" for t in tensors):
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if func.is_view or name in ("detach", "alias", "lift_fresh", "lift", "empty", "empty_like",
                                    "empty_strided", "new_empty", "new_empty_strided", "sym_size",
                                    "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size"):
            return func(*args, **kwargs)  # metadata and allocations: no data is computed
        if name not in _ALWAYS_RUN and self._worth_deferring(func, tensors):
            deferred = self._try_defer(func, args, kwargs, tensors)
            if deferred is not None:
                return deferred[0]
        if name in _SHAPE_ONLY or not _runs_on_cpu(func):
            # reads only its arguments' shape and type, or cannot run on the CPU whatever the data
            # (a device-only library kernel: it raises as it would have)
            return func(*args, **kwargs)
        before = self.forced
        self._ready(func, args, kwargs, tensors)
        if self.trace is not None and self.forced > before:
            self.trace.append((name, self.forced - before))
        return func(*args, **kwargs)

    def _worth_deferring(self, func, tensors) -> bool:
        """Whether to consider recording the operation: it reads deferred data, makes a tensor from
        nothing (a factory or a random draw), or reads one large enough; an operation on small
        real tensors runs at once (its result is small too, but for a broadcast)."""
        if not tensors:
            return True
        keys = self.s.writers
        return any(t.numel() >= self.min_elements or (t.numel() and _key(t) in keys) for t in tensors) \
            or _is_random(func)

    def _try_defer(self, func, args, kwargs, tensors):
        """(result,) when the operation is recorded instead of run; None to run it now."""
        written = self._written_args(func, args, kwargs)
        gen = kwargs.get("generator")
        is_random = "generator" in kwargs or _is_random(func)
        if is_random and gen is None:
            gen = torch.default_generator
        src = [t for t in tensors if not any(t is w for w in written)]
        from_deferred = any(_key(t) in self.s.writers for t in tensors)
        try:
            meta = func(*tree_map(_to_meta, args), **{k: ("meta" if k == "device" else _to_meta(v))
                                                      for k, v in kwargs.items()})
        except Exception:
            return None
        outs = [t for t in tree_flatten(meta)[0] if isinstance(t, torch.Tensor)]
        if not outs or not all(_payload(t) for t in outs + written):
            return None
        big = max(t.numel() for t in outs) >= self.min_elements
        if not (big or from_deferred or is_random):  # draws stay in order: small ones wait too
            return None
        if written:  # in place (or out=): the written tensors are the results
            if len(outs) != len(written):
                return None
            it = iter(written)
            result = tree_map(lambda x: next(it) if isinstance(x, torch.Tensor) else x, meta)
            placeholders = []
        else:
            placeholders = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype) for t in outs]
            it = iter(placeholders)
            result = tree_map(lambda x: next(it) if isinstance(x, torch.Tensor) else x, meta)
        writes = [_key(t) for t in (written or placeholders)]
        if self.watch is not None and written:
            self.watch.update(writes)
        e = _Entry(len(self.s.entries), func, args, kwargs, placeholders, writes,
                   [_key(t) for t in src if t.numel()], gen if is_random else None)
        # a write to storage that recorded operations still read (or write) orders after them:
        # it is recorded after them and runs after them (run_entry keeps the order)
        self.s.entries.append(e)
        for k in writes:
            self.s.writers.setdefault(k, []).append(e)
        for t in written or placeholders:
            self.s.keep.setdefault(_key(t), t)
        for k in e.reads:
            self.s.readers.setdefault(k, []).append(e)
        for t in src:
            self.s.keep.setdefault(_key(t), t)
        if e.generator is not None:
            self.s.chains.setdefault(e.generator._cdata, []).append(e)
            e.draw = _skippable(func, kwargs, outs, written)
        self.deferred += 1
        return (result,)

    @staticmethod
    def _written_args(func, args, kwargs) -> list:
        out = []
        schema = func._schema
        for i, a in enumerate(schema.arguments):
            info = a.alias_info
            if info is None or not info.is_write:
                continue
            v = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
            out += [t for t in tree_flatten(v)[0] if isinstance(t, torch.Tensor)]
        return out

    # ---- running what was recorded -----------------------------------------------------------
    def _ready(self, func, args, kwargs, tensors) -> None:
        """Before running an operation for real: its inputs hold their data, the memory it writes
        is read by no pending operation, and its generator has drawn every pending draw."""
        for t in tensors:
            self.materialise(t)
        for t in self._written_args(func, args, kwargs):
            if t.numel():
                self._release_readers(_key(t), None)
                if self.watch is not None:
                    self.watch.add(_key(t))
        if "generator" in kwargs or _is_random(func):
            gen = kwargs.get("generator") or torch.default_generator
            for e in list(self.s.chains.get(gen._cdata, [])):
                if e.draw is not None and not e.done:
                    self._skip(e)
                else:
                    self._run(e)

    def _skip(self, e: _Entry) -> None:
        """Advance a pending draw's generator past it without keeping its values: the same draws
        into a reused scratch buffer, a chunk at a time (the generator consumes exactly what the
        whole draw would: sdk's tests hold the two states equal). The draw itself stays pending,
        to run on a copy of the generator's state from before it if its values are ever needed."""
        kind, n, dtype = e.draw
        e.state = e.generator.get_state()
        words = draw_words(kind, dtype, n)
        if words is not None:  # the same 32-bit words drawn as integers, a cheaper draw
            _advance(e.generator, words)
            _drop(self.s.chains, e.generator._cdata, e)
            return
        scratch = self._scratch.get(dtype)
        if scratch is None:
            scratch = self._scratch[dtype] = torch.empty(SKIP_CHUNK, dtype=dtype)
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            done = 0
            while done < n:
                k = min(SKIP_CHUNK, n - done)
                if 0 < n - done - k < 16:  # a normal draw of fewer than 16 takes another path
                    k = n - done
                    scratch = torch.empty(k, dtype=dtype)
                if kind == "normal":
                    scratch[:k].normal_(generator=e.generator)
                else:
                    scratch[:k].uniform_(generator=e.generator)
                done += k
        _drop(self.s.chains, e.generator._cdata, e)

    def materialise(self, t: torch.Tensor) -> None:
        """Run every pending operation writing `t`'s memory."""
        if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel():
            for e in list(self.s.writers.get(_key(t), [])):
                self._run(e)

    def materialise_all(self) -> None:
        """Run every pending operation (what an eager run would have computed)."""
        for e in list(self.s.entries):
            self._run(e)

    def _release_readers(self, key: int, before: _Entry | None) -> None:
        for e in list(self.s.readers.get(key, [])):
            if before is None or e.index < before.index:
                self._run(e)

    def _run(self, e: _Entry) -> None:
        if e.done:
            return
        e.done = True  # set first: an entry never waits on itself
        s = self.s
        # what it reads, as it was when it was recorded: earlier writers of its inputs
        for k in e.reads:
            for w in list(s.writers.get(k, [])):
                if w.index < e.index:
                    self._run(w)
        # earlier writers and readers of what it writes
        for k in e.writes:
            for w in list(s.writers.get(k, [])):
                if w.index < e.index:
                    self._run(w)
            self._release_readers(k, e)
        kwargs = e.kwargs
        if e.state is not None:  # its generator moved past it: draw from a copy of the state before
            private = torch.Generator()
            private.set_state(e.state)
            kwargs = {**kwargs, "generator": private}
        elif e.generator is not None:  # draws happen in the order they were made
            for w in list(s.chains.get(e.generator._cdata, [])):
                if w.index < e.index:
                    self._skip(w) if w.draw is not None else self._run(w)
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():  # run as recorded, by no mode (called from outside a dispatch too)
            into = _out_variant(e.func) if len(e.outputs) == 1 else None
            if into is not None:  # computed straight into the tensor handed out, no copy
                into(*e.args, **kwargs, out=e.outputs[0])
            else:
                out = e.func(*e.args, **kwargs)
                if e.outputs:
                    for dst, src in zip(e.outputs, [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]):
                        dst.copy_(src)
        self.forced += 1
        for k in e.writes:
            _drop(s.writers, k, e)
        for k in e.reads:
            _drop(s.readers, k, e)
        for k in set(e.writes) | set(e.reads):
            if k not in s.writers and k not in s.readers:
                s.keep.pop(k, None)
        if e.generator is not None:
            _drop(s.chains, e.generator._cdata, e)
        e.args, e.kwargs, e.outputs, e.state = (), {}, [], None

    # ---- reads behind the dispatcher -----------------------------------------------------------
    def __enter__(self):
        out = super().__enter__()
        mode = self
        for name in ("tolist", "numpy", "__array__"):
            orig = getattr(torch.Tensor, name)

            def wrapped(t, *a, _orig=orig, **k):
                mode.materialise(t)
                return _orig(t, *a, **k)
            setattr(torch.Tensor, name, wrapped)
            self._patched.append((name, orig))
        return out

    def __exit__(self, *exc):
        for name, orig in reversed(self._patched):
            setattr(torch.Tensor, name, orig)
        self._patched.clear()
        return super().__exit__(*exc)


_OUT: dict = {}


def _out_variant(func):
    """The operator's `out=` overload taking the same arguments (add.Tensor -> add.out, randn.generator
    -> randn.generator_out): the same kernel, writing into a given tensor. None where it has none."""
    if func not in _OUT:
        want = [(a.name, str(a.type)) for a in func._schema.arguments]
        found = None
        packet = func.overloadpacket
        for name in packet.overloads():
            cand = getattr(packet, name)
            args = cand._schema.arguments
            outs = [a for a in args if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
            if len(outs) == 1 and outs[0].name == "out" and len(cand._schema.returns) == 1 \
                    and [(a.name, str(a.type)) for a in args if a is not outs[0]] == want:
                found = cand
                break
        _OUT[func] = found
    return _OUT[func]


_CPU_KEYS = ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd")
_on_cpu: dict = {}


def _runs_on_cpu(func) -> bool:
    """Whether the operator has a kernel that runs CPU tensors."""
    name = func.name()
    if name not in _on_cpu:
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        _on_cpu[name] = any(has(name, k) for k in _CPU_KEYS)
    return _on_cpu[name]


def _payload(t: torch.Tensor) -> bool:
    """Whether a result may stay uncomputed: floating point, or a large non-boolean integer tensor."""
    if not t.numel():
        return False
    if t.dtype.is_floating_point:
        return True
    return t.dtype != torch.bool and not t.dtype.is_complex and t.numel() >= PAYLOAD_INT_ELEMENTS


def _drop(table: dict, key, e: _Entry) -> None:
    lst = table.get(key)
    if lst is not None:
        try:
            lst.remove(e)
        except ValueError:
            pass
        if not lst:
            del table[key]


#: elements a skipped draw is drawn through at a time (a multiple of 16: normal draws fill blocks of 16)
SKIP_CHUNK = 1 << 20
_SKIPPABLE = {"randn": "normal", "normal_": "normal", "rand": "uniform", "uniform_": "uniform"}


_WORDS: dict = {}
#: draw sizes probed per (distribution, dtype): multiples of 16 and not (normal draws fill blocks of 16)
_PROBE_SIZES = (48, 53, 80, 85)


def draw_words(kind: str, dtype: torch.dtype, n: int) -> int | None:
    """The 32-bit words of a CPU generator a draw of `n` values (n >= 16, one contiguous tensor)
    consumes, where that follows `words_per_value * n`, plus a fixed number when n is not a
    multiple of 16 (PyTorch's normal draws redraw their last block of 16); found by probing the
    generator once per distribution and type and checked on a second size of each kind. None
    where the draws follow no such rule (16-bit normal draws not a multiple of 16): then the draw
    itself is repeated (DeferredFloats._skip)."""
    key = (kind, dtype, n % 16 != 0)
    if key not in _WORDS:
        _WORDS[key] = _probe_words(kind, dtype, n % 16 != 0)
    rule = _WORDS[key]
    return None if rule is None else rule[0] * n + rule[1]


def _probe_words(kind: str, dtype: torch.dtype, ragged: bool) -> tuple[int, int] | None:
    from torch.utils._python_dispatch import _disable_current_modes

    def state_after(fn) -> torch.Tensor:
        g = torch.Generator().manual_seed(20261124)
        fn(g)
        return g.get_state()
    sizes = [m for m in _PROBE_SIZES if (m % 16 != 0) == ragged]
    with _disable_current_modes():
        draws = {m: state_after(lambda g: getattr(torch.empty(m, dtype=dtype), kind + "_")(generator=g))
                 for m in sizes}
        for per in (1, 2):
            for extra in ((0, 16 * per, 32 * per) if ragged else (0,)):
                if all(torch.equal(draws[m], state_after(lambda g: _advance(g, per * m + extra))) for m in sizes):
                    return per, extra
    return None


def _advance(gen: torch.Generator, words: int) -> None:
    """Move a CPU generator past `words` 32-bit words (int32 draws take one word each)."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        buf = torch.empty(min(words, SKIP_CHUNK), dtype=torch.int32)
        done = 0
        while done < words:
            k = min(SKIP_CHUNK, words - done)
            buf[:k].random_(generator=gen)
            done += k


def _skippable(func, kwargs, outs, written) -> tuple | None:
    """(distribution, elements, dtype) of a draw a generator can skip in chunks: normal or
    uniform values filling one contiguous floating-point tensor from an explicit CPU generator;
    None for any other draw (it runs when the generator is next needed)."""
    kind = _SKIPPABLE.get(func.overloadpacket.__name__)
    gen = kwargs.get("generator")
    if kind is None or gen is None or gen.device.type != "cpu":
        return None
    target = written or outs
    if len(target) != 1 or not target[0].is_contiguous() or not target[0].dtype.is_floating_point:
        return None
    if target[0].numel() < 16:
        return None
    return kind, target[0].numel(), target[0].dtype


#: operations that read only the shape, type and device of their tensor arguments
_SHAPE_ONLY = frozenset({"new_zeros", "new_ones", "new_full", "new_empty", "new_empty_strided", "zeros_like",
                         "ones_like", "full_like", "empty_like"})
_RANDOM = frozenset({"normal", "normal_", "uniform_", "random_", "exponential_", "bernoulli", "bernoulli_",
                     "randn", "rand", "randint", "randperm", "multinomial", "cauchy_", "log_normal_",
                     "geometric_", "rand_like", "randn_like", "randint_like", "poisson"})


def _is_random(func) -> bool:
    return func.overloadpacket.__name__ in _RANDOM
