"""Staged compilation: the ordered list of stages a backend declares, run by Triton's compiler.

    def stages(self, options):
        return [triton_passes(self.ttir_passes),                          # "ttir": Triton's TTIR passes
                mlir_passes("npuir", ("common.canonicalizer", "common.cse", "ttir.triton_licm")),
                Stage("npuasm", emit_assembly, takes="ir"),               # day0 IR -> the backend's IR
                Stage("npubin", assemble)]                                # -> the binary (last)

Each stage's output is cached by Triton as `<kernel>.<name>` (TRITON_CACHE_DIR), appears in
`kernel.asm[name]`, is dumped by Triton's TRITON_KERNEL_DUMP, and by day0's own dump
(`Options.dump_stages` / DAY0_DUMP_STAGES=name,name|all, to stderr or to `DAY0_DUMP_DIR`); MLIR
pass stages honour MLIR_ENABLE_DUMP. The first stage is "ttir"; the last stage's name is the
backend's `binary_ext` and returns bytes (or an `Artifact`).

A stage is `run(input, ctx)`: `input` is the previous stage's output (the live MLIR module while
stages run MLIR passes), or with `takes="ir"` the day0 IR (`sdk.ttir.Module`) read from the latest
MLIR module. `ctx` (`StageContext`) holds the backend, the options, Triton's metadata dict, the
kernel's name and the latest MLIR module (`ctx.mlir`). Before any stage after "ttir" runs, the TTIR
is checked against the backend's capabilities: every unsupported op is reported at once.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from . import launches
from .errors import Day0Error, UnsupportedOp, UnsupportedOps

#: Triton's TTIR passes by short name: (pass group in triton._C.libtriton.passes, function)
PASSES = {
    "inliner": ("common", "add_inliner"), "rewrite_tensor_pointer": ("ttir", "add_rewrite_tensor_pointer"),
    "rewrite_tensor_descriptor_to_pointer": ("ttir", "add_rewrite_tensor_descriptor_to_pointer"),
    "canonicalizer": ("common", "add_canonicalizer"), "combine": ("ttir", "add_combine"),
    "reorder_broadcast": ("ttir", "add_reorder_broadcast"), "cse": ("common", "add_cse"),
    "symbol_dce": ("common", "add_symbol_dce"), "loop_unroll": ("ttir", "add_loop_unroll"),
}


@dataclass(frozen=True)
class Stage:
    """One compile stage: `name` is its cache file's extension and its `kernel.asm` key."""

    name: str
    run: Callable[[Any, "StageContext"], Any]
    takes: str = "previous"   # "previous": the last stage's output; "ir": the day0 IR (sdk.ttir.Module)

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise Day0Error(f"stage name '{self.name}' must be an identifier (it is a file extension)")
        if self.takes not in ("previous", "ir"):
            raise Day0Error(f"stage '{self.name}': takes must be 'previous' or 'ir', not '{self.takes}'")


@dataclass
class StageContext:
    """What every stage of one compilation sees."""

    backend: Any
    options: Any
    metadata: dict = field(default_factory=dict)   # Triton's: stages may add to it ("shared", ...)
    kernel: str = ""
    mlir: Any = None                                # the latest live MLIR module (triton._C.libtriton.ir)
    _parsed: tuple[str, Any] | None = None

    def ir(self, mlir: Any = None) -> Any:
        """The day0 IR of `mlir` (the latest MLIR module by default), parsed once per text."""
        from .ttir import parse
        text = (mlir if mlir is not None else self.mlir).str()
        if self._parsed is None or self._parsed[0] != text:
            self._parsed = (text, parse(text))
        return self._parsed[1]


def is_mlir(x: Any) -> bool:
    from triton._C.libtriton import ir
    return isinstance(x, ir.module)


def run_passes(mod: Any, passes: tuple, pipeline: str) -> Any:
    """Run MLIR passes on `mod` in place through Triton's bindings. A pass is a short name from
    `PASSES`, "group.name" (`triton._C.libtriton.passes.<group>.add_<name>`), or a callable that
    adds passes to the pass manager. A short name the installed Triton lacks is skipped (e.g.
    rewrite_tensor_pointer is gone in 3.8, whose frontend no longer emits block pointers); a
    "group.name" it lacks is an error."""
    from triton._C.libtriton import ir, passes as P
    pm = ir.pass_manager(mod.context)
    pm.enable_debug()  # MLIR_ENABLE_DUMP and friends
    for p in passes:
        if callable(p):
            p(pm)
            continue
        if p in PASSES:
            group, fn = PASSES[p]
            add = getattr(getattr(P, group), fn, None)
            if add is not None:
                add(pm)
            continue
        group, _, name = p.partition(".")
        add = getattr(getattr(P, group, None), f"add_{name}", None)
        if add is None:
            raise Day0Error(f"MLIR pass '{p}' does not exist in this Triton "
                            f"(triton._C.libtriton.passes.{group}.add_{name})")
        add(pm)
    try:
        pm.run(mod, pipeline)
    except TypeError:  # versions whose pass manager takes no pipeline name
        pm.run(mod)
    return mod


def triton_passes(passes: tuple, name: str = "ttir") -> Stage:
    """The TTIR stage: Triton's own TTIR passes (they need no GPU)."""
    return Stage(name, lambda mod, ctx: run_passes(mod, tuple(passes), "make_" + name))


def mlir_passes(name: str, passes: tuple) -> Stage:
    """A stage of the backend's own MLIR passes (see `run_passes`), on the live MLIR module."""
    return Stage(name, lambda mod, ctx: run_passes(mod, tuple(passes), name))


def lower_stage(name: str) -> Stage:
    """The default last stage: `backend.lower(module, options)` on the day0 IR (with `mlir=` the
    live MLIR module when `lower` takes that keyword)."""
    def run(module: Any, ctx: StageContext) -> Any:
        if "mlir" in _parameters(ctx.backend.lower):
            return ctx.backend.lower(module, ctx.options, mlir=ctx.mlir)
        return ctx.backend.lower(module, ctx.options)
    return Stage(name, run, takes="ir")


def _parameters(fn: Any) -> tuple[str, ...]:
    import inspect
    return tuple(inspect.signature(fn).parameters)


def check_stages(stages: list[Stage], binary_ext: str, who: str) -> None:
    names = [s.name for s in stages]
    if not names or names[0] != "ttir":
        raise Day0Error(f"backend '{who}': the first stage must be 'ttir' (Triton's TTIR passes), got {names}")
    if names[-1] != binary_ext:
        raise Day0Error(f"backend '{who}': the last stage must be named after binary_ext '{binary_ext}', "
                        f"got {names}")
    if len(set(names)) != len(names):
        raise Day0Error(f"backend '{who}': stage names repeat: {names}")


# -------------------------------------------------------------------------------- pipeline
#: the artifact of a kernel the backend cannot lower, compiled while unsupported ops are deferred
DEFERRED = b"day0-deferred-unsupported\n"


class _Deferred(str):
    """What the stages between the check and the binary pass along for a deferred kernel."""


class Pipeline:
    """One compilation's stages as Triton calls them (`add_stages` makes one per compile)."""

    def __init__(self, backend: Any, options: Any) -> None:
        self.backend = backend
        self.stages = list(backend.stages(options))
        check_stages(self.stages, backend.binary_ext, backend.name)
        self.ctx = StageContext(backend, options)
        self.checked = False
        self.deferred: bytes | None = None
        self.dump = _dump_settings(options)

    def runner(self, stage: Stage) -> Callable[[Any, dict], Any]:
        last = stage is self.stages[-1]

        def run(src: Any, metadata: dict) -> Any:
            ctx = self.ctx
            ctx.metadata = metadata
            if is_mlir(src):
                ctx.mlir = src
                if not ctx.kernel:
                    ctx.kernel = _entry_name(src)
            if stage.name != "ttir" and not self.checked:
                self._check(metadata)
            if self.deferred is not None:
                return self.deferred if last else _Deferred(f"// deferred: {self.deferred[len(DEFERRED):].decode()}")
            out = stage.run(ctx.ir() if stage.takes == "ir" else src, ctx)
            from .records import Artifact
            if isinstance(out, Artifact):
                metadata.update(out.metadata)
                out = out.data
            if is_mlir(out):
                ctx.mlir = out
            self._dump(stage.name, out)
            if last:
                out = self._finish(out, metadata)
            return out

        return run

    def _check(self, metadata: dict) -> None:
        """The TTIR against the backend's capabilities (before any stage after "ttir")."""
        from .ttir.access import access
        self.checked = True
        be, ctx = self.backend, self.ctx
        module = ctx.ir()
        name = ctx.kernel or module.entry.name
        ops = tuple(sorted({op.name for op in module.walk()}))
        where = module.entry.loc.file if module.entry.loc is not None else ""
        metadata.setdefault("name", name)
        metadata.setdefault("shared", 0)
        metadata["day0_ops"], metadata["day0_source"] = list(ops), where  # launches report them on a cache hit
        metadata["day0_access"] = list(access(module))
        self.module, self.ops, self.where = module, ops, where
        missing = be.capabilities().missing(module)
        if not missing:
            return
        exc = UnsupportedOps(be.name, name, missing)
        launches.unsupported(name, None, where, ops, exc.ops, str(exc))
        if not launches.deferring():
            raise exc
        self.deferred = DEFERRED + json.dumps({
            "backend": exc.backend, "kernel": exc.kernel, "source": where, "all_ops": list(ops),
            "ops": [dataclasses.asdict(op) for op in exc.ops]}).encode()

    def _finish(self, out: Any, metadata: dict) -> bytes:
        be = self.backend
        native, borrowed = (be.lowering.native_share(self.module) if getattr(be, "lowering", None) is not None
                            else (1.0, []))
        metadata["day0_native"], metadata["day0_borrowed"] = native, list(borrowed)
        launches.compiled(metadata["name"], None, self.where, self.ops, self.module, native, tuple(borrowed))
        return out if isinstance(out, bytes) else str(out).encode()

    def _dump(self, stage: str, out: Any) -> None:
        stages, folder = self.dump
        if not stages or not ({"all", stage} & set(stages)):
            return
        kernel = self.ctx.kernel or "kernel"
        if folder:
            from .fileio import atomic_write_bytes
            os.makedirs(folder, exist_ok=True)
            data = out if isinstance(out, bytes) else str(out).encode()
            atomic_write_bytes(os.path.join(folder, f"{kernel}.{stage}"), data)
            return
        text = f"<{len(out)} bytes>" if isinstance(out, bytes) else str(out)
        print(f"// -----// day0 stage '{stage}' of kernel '{kernel}' //----- //\n{text}", file=sys.stderr)


def _entry_name(mod: Any) -> str:
    try:
        return mod.get_entry_func_name()
    except Exception:  # older bindings
        return ""


def _dump_settings(options: Any) -> tuple[tuple[str, ...], str]:
    """(stages to dump, folder or "" for stderr): from the options when they carry them (day0's
    Options), else from DAY0_DUMP_STAGES / DAY0_DUMP_DIR read now, at compile time."""
    stages = getattr(options, "dump_stages", None)
    folder = getattr(options, "dump_dir", None)
    if stages is None:
        stages = dump_stages_from_env()
        folder = os.environ.get("DAY0_DUMP_DIR", "")
    return tuple(stages), folder or ""


def dump_stages_from_env() -> tuple[str, ...]:
    return tuple(s.strip() for s in os.environ.get("DAY0_DUMP_STAGES", "").split(",") if s.strip())


def deferred_error(artifact: bytes) -> UnsupportedOps:
    """A deferred kernel is being loaded (Inductor loads every kernel it compiled, Triton's cache
    hit or not): report its UnsupportedOps to the recorders, and return it for its launch."""
    data = json.loads(artifact[len(DEFERRED):].decode())
    exc = UnsupportedOps(data["backend"], data["kernel"], [UnsupportedOp(**op) for op in data["ops"]])
    launches.unsupported(exc.kernel, None, data.get("source", ""), tuple(data.get("all_ops", ())), exc.ops,
                         str(exc))
    return exc
