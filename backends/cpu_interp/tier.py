"""Which of cpu_interp's two lowerings runs a kernel: the interpreter (interp.py) or the compiled
tier (compiled/: TTIR -> LLVM IR -> native code), and why.

Selection, per kernel at compile time (the tier is a compile option, so Triton caches each
tier's kernels apart):
  * the option `cpu_tier` ("interp", "compiled" or "auto"): `kernel[grid](..., cpu_tier="auto")`;
  * else the environment variable DAY0_CPU_TIER (read at that compile: a kernel already loaded in
    the process keeps its tier when the variable changes, since Triton's in-memory cache keys a
    kernel by its launch options);
  * else the default, "auto"
except with the reference interpreter (`cpu_interp@reference`, `cpu_interpreter="reference"`),
which is chosen to run kernels itself: there only the option `cpu_tier` changes "interp".
"compiled" compiles every kernel the compiled tier lowers (and warns, once per kernel, when one
falls back to the interpreter). "auto" interprets a kernel until its interpretation has cost what
compiling it costs (estimated by counting, not timing: interp.chunk_cost, COMPILE_SECONDS), then
compiles it, in the middle of a launch if need be, and runs the rest natively: small launches
never pay LLVM, large ones are soon native; an object already in the cache is used from the
first launch. The compiled tier computes what the interpreter computes (bit for bit, except float
sums and dots it may reassociate and float32 transcendental functions of its own, within a few
ulp); select "interp" to hold kernels to the interpreter's exact roundings. Bounds checks stay
on in compiled code unless `cpu_bounds_check=False` (or DAY0_CPU_BOUNDS_CHECK=0).

Compilation is two stages after Triton's TTIR passes (the backend's `stages`): "llir", the day0 IR
lowered to LLVM IR by the compiled tier's emitter (or a note of why the interpreter runs the
kernel, or, under "auto", that it is compiled when it has run enough), and "ttir_cpu", the binary. Both are cached by Triton and dumpable like its own stages
(TRITON_KERNEL_DUMP, DAY0_DUMP_STAGES=llir). The binary holds the TTIR text always (fault messages name its source lines,
and a fallback runs it) and the native object when there is one. `TieredKernel.tier` and
`.tier_detail` say what ran the latest launch and why; `take_stats` gives the same per kernel.
"""
from __future__ import annotations

import json
import os
import threading
import warnings
from dataclasses import dataclass

from sdk.backend import Options
from sdk.errors import ConfigError

from .compiled import TIERS

DEFAULT_TIER = "auto"
_MAGIC = b"day0-cpu-tiered 2 "


@dataclass(frozen=True)
class CpuOptions(Options):
    """Triton's options plus cpu_interp's own: which tier compiles, and bounds checks in it."""

    cpu_tier: str = DEFAULT_TIER
    cpu_bounds_check: bool = True
    cpu_interpreter: str = "batched"  # which interpreter runs what the interpreter runs (backend.py)


def resolve(opts: dict, interpreter: str = "batched") -> dict:
    """cpu_tier / cpu_bounds_check from the launch options, else the environment (not for the
    reference interpreter, which runs kernels itself), else the default; validated."""
    tier = opts.get("cpu_tier")
    origin = "option cpu_tier"
    if tier is None and interpreter == "reference":
        tier = "interp"
    if tier is None:
        tier = os.environ.get("DAY0_CPU_TIER", "").strip() or DEFAULT_TIER
        origin = "DAY0_CPU_TIER"
    tier = str(tier).lower()
    if tier not in TIERS:
        raise ConfigError(f"{origin} is '{tier}'; choose one of {', '.join(TIERS)}")
    check = opts.get("cpu_bounds_check")
    if check is None:
        check = os.environ.get("DAY0_CPU_BOUNDS_CHECK", "1").strip().lower() not in ("0", "false", "off", "no")
    return {"cpu_tier": tier, "cpu_bounds_check": bool(check)}


# ------------------------------------------------------------------------------------ artifact
def pack(ttir: str, tier: str, detail: str, data: bytes | None, meta: dict) -> bytes:
    """MAGIC, a one-line JSON header (tier, why, launcher facts, section sizes), the TTIR text,
    the native object (if any): text up to the object, so that Triton's cache files stay readable."""
    head = json.dumps({"tier": tier, "detail": detail, "meta": meta, "ttir": len(ttir.encode()),
                       "object": len(data or b"")}).encode()
    return _MAGIC + head + b"\n" + ttir.encode() + (data or b"")


def unpack(artifact: bytes) -> tuple[bytes, str, str, bytes | None, dict]:
    """(TTIR bytes, tier, why, object or None, meta); plain TTIR text is an interpreter kernel."""
    if not artifact.startswith(_MAGIC):
        return artifact, "interp", "", None, {}
    at = len(_MAGIC)
    try:
        end = artifact.index(b"\n", at)
        head = json.loads(artifact[at:end])
        at = end + 1
        head["ttir"], head["object"] = int(head["ttir"]), int(head["object"])
    except (ValueError, KeyError, TypeError):
        from sdk.ttir import TTIRSyntaxError
        raise TTIRSyntaxError("a cpu_interp artifact whose header is cut or corrupted") from None
    # a cut TTIR section is left to the TTIR reader, which says where the text ends
    ttir = artifact[at:at + head["ttir"]]
    at += head["ttir"]
    obj = artifact[at:at + head["object"]] if head["object"] else None
    if obj is not None and len(obj) != head["object"] and len(ttir) == head["ttir"]:
        from sdk.ttir import TTIRSyntaxError
        raise TTIRSyntaxError("a cpu_interp artifact whose native object is cut (a damaged cache file?)")
    return ttir, head["tier"], head["detail"], obj, head["meta"]


# ----------------------------------------------------------------------------------- stages
#: what the "llir" stage says for a kernel the interpreter runs (its first line; the reason follows)
INTERP_NOTE = "; cpu_interp runs this kernel on the interpreter: "
#: ... and for one the tier "auto" compiles when its interpretation has cost what compiling costs
AUTO_NOTE = ("; cpu_interp tier auto: the interpreter runs this kernel until its interpreted work has "
             "cost what compiling it costs, then the compiled tier does (LLVM IR: DAY0_CPU_TIER=compiled)\n")
#: why the latest launch of an "auto" kernel ran where it did (TieredKernel.tier_detail)
AUTO_WAITING = "auto: interpreted (its interpreted work has not yet cost what compiling it costs)"
AUTO_SWITCHED = "auto: compiled during this launch (the interpreter ran its first programs)"
AUTO_COMPILED = "auto: compiled (its interpreted work had cost what compiling it costs)"
AUTO_CACHED = "auto: compiled from the cache"
#: what compiling a kernel is taken to cost, in the interpreter's estimated seconds
#: (interp.chunk_cost): LLVM's median time per kernel of the suite plus the IR's emission
#: (benchmarks/cpu_auto_calibrate.py measures both). Interpreting until the interpretation has
#: cost this much, then compiling, costs at most twice the cheaper of the two choices made in
#: hindsight, without knowing how much more the kernel will run (as renting until the rent paid
#: equals the price, then buying). DAY0_CPU_AUTO_COMPILE_S overrides it (compile_seconds).
COMPILE_SECONDS = 0.15


def compile_seconds() -> float:
    """COMPILE_SECONDS, or DAY0_CPU_AUTO_COMPILE_S where set (0: compile at the first launch)."""
    env = os.environ.get("DAY0_CPU_AUTO_COMPILE_S", "").strip()
    if not env:
        return COMPILE_SECONDS
    try:
        value = float(env)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"DAY0_CPU_AUTO_COMPILE_S is '{env}'; give the seconds compiling a kernel is "
                          f"taken to cost (a number >= 0; unset: {COMPILE_SECONDS})")
    return value


def emit_stage(module, ctx) -> str:
    """The "llir" stage: the day0 IR -> LLVM IR text (the compiled tier), or a one-line note of
    why the interpreter runs the kernel. Every kernel is also checked against the interpreter's
    table here (interp.check), so that a bad constant fails at compile time whichever tier runs it."""
    from .interp import check
    check(module, ctx.backend.lowering)
    options = ctx.options
    tier = getattr(options, "cpu_tier", DEFAULT_TIER)
    if tier == "interp":
        return f"{INTERP_NOTE}the interp tier is selected (option cpu_tier, DAY0_CPU_TIER, or the reference interpreter)\n"
    from . import compiled
    check = getattr(options, "cpu_bounds_check", True)
    if tier == "auto":
        why = compiled.refusal(module, check, tuple(getattr(options, "checks", ()) or ()))
        return f"{INTERP_NOTE}{why}\n" if why else AUTO_NOTE
    try:
        text, meta, why = compiled.emit(module, check)
        if not why:
            why = compiled.refusal(module, check, tuple(getattr(options, "checks", ()) or ()))
    except Exception as exc:  # noqa: BLE001 - a compiler bug must not stop the kernel: it runs interpreted
        text, meta, why = None, {}, f"the compiled tier failed ({type(exc).__name__}: {exc})"
    if why:
        if tier == "compiled":
            warnings.warn(f"cpu_interp: kernel {module.entry.name} runs on the interpreter: {why}", stacklevel=2)
        return f"{INTERP_NOTE}{why}\n"
    ctx.metadata["day0_cpu"] = meta
    return text


def assemble_stage(llir: str, ctx) -> "Artifact":
    """The last stage: LLVM IR -> a native object (jit.py: optimised for this CPU, cached), packed
    with the TTIR; or the TTIR alone for the interpreter."""
    from sdk.backend import Artifact
    from .scratch import scratch_bytes
    module = ctx.ir()
    data, tier, why = _pack(module, ctx.options, llir, ctx.metadata.pop("day0_cpu", None))
    return Artifact(data, {"shared": scratch_bytes(module), "day0_tier": tier, "day0_tier_detail": why})


def _pack(module, options, llir: str, meta: dict | None) -> tuple[bytes, str, str]:
    if llir.startswith(INTERP_NOTE):
        why = llir[len(INTERP_NOTE):].strip()
        return pack(module.text, "interp", why, None, {}), "interp", why
    if llir == AUTO_NOTE:
        check = bool(getattr(options, "cpu_bounds_check", True))
        return pack(module.text, "auto", AUTO_WAITING, None, {"bounds_check": check}), "auto", AUTO_WAITING
    from . import compiled
    built = compiled.assemble(module, llir, meta or {}, getattr(options, "cpu_bounds_check", True))
    if built.data is None:
        return pack(module.text, "interp", built.refusal, None, {}), "interp", built.refusal
    why = "compiled from the cache" if built.cached else "compiled"
    return pack(module.text, "compiled", why, built.data, built.meta), "compiled", why


class _Ctx:
    """The StageContext slice the stages use, for `lower` called directly."""

    def __init__(self, backend, options, module):
        self.backend, self.options, self.metadata, self._module = backend, options, {}, module

    def ir(self):
        return self._module


def lower(backend, module, options) -> tuple[bytes, str, str]:
    """Both stages at once: (artifact, tier, why), for callers of `Backend.lower`."""
    ctx = _Ctx(backend, options, module)
    llir = emit_stage(module, ctx)
    return _pack(module, options, llir, ctx.metadata.pop("day0_cpu", None))


# ------------------------------------------------------------------------------- kernel handle
class TieredKernel:
    """A loaded kernel: native code with the interpreter as its fallback; the interpreter; or (the
    tier "auto", `auto` set) the interpreter until its interpretation has cost COMPILE_SECONDS,
    counted over every launch of the kernel, then native code: compiled at that point, even in
    the middle of a launch, whose remaining programs then run natively. A kernel that does not
    compile stays on the interpreter and says why."""

    def __init__(self, module, native, interp_factory, tier: str, detail: str, auto: dict | None = None):
        self.module = module
        self.native = native
        self._interp_factory = interp_factory
        self._interp = None
        self.tier, self.tier_detail = tier, detail
        self.compiled_detail = detail
        self.name = module.entry.name
        self.auto = auto      # {"bounds_check": ...} while "auto" has not compiled the kernel
        self.spent = 0.0      # the interpreter's estimated seconds on it so far (interp.chunk_cost)

    @property
    def entry(self):
        """The kernel's function (sdk.ttir.Func), as the interpreter's Program has it."""
        return self.module.entry

    @property
    def flags(self) -> dict:
        """The interpreter's check flags (from the options); a kernel with any set stays on it."""
        return self.interp().flags

    def interp(self):
        if self._interp is None:
            self._interp = self._interp_factory()
        return self._interp

    def run(self, grid, args, extra=()) -> None:
        if self.native is not None or self.auto is not None:
            from .compiled import runtime_refusal
            why = runtime_refusal(args, extra)
            if not why and self.native is not None:
                self.tier, self.tier_detail = "compiled", self.compiled_detail
                self.native.run(grid, args, list(extra))
                return
            if not why:
                self._run_auto(grid, args, list(extra))
                return
            self.tier, self.tier_detail = "interp", why
        self.interp().run(grid, args, extra)

    def _run_auto(self, grid, args, extra: list) -> None:
        done = 0
        if self.spent < compile_seconds():
            done = self.interp().run(grid, args, extra, until=self._interpreted)
            if done >= int(grid[0]) * int(grid[1]) * int(grid[2]):
                self.tier, self.tier_detail = "interp", AUTO_WAITING
                return
        if not self._compile():
            self.tier, self.tier_detail = "interp", self.compiled_detail
            self.interp().run(grid, args, extra, first=done)
            return
        self.tier, self.tier_detail = "compiled", AUTO_SWITCHED if done else self.compiled_detail
        self.native.run(grid, args, extra, first=done)

    def _interpreted(self, seconds: float) -> bool:
        self.spent += seconds
        return self.spent >= compile_seconds()

    def _compile(self) -> bool:
        """Compile now (or take the object from the cache); False, and why, when it cannot be."""
        from . import compiled
        from .compiled.launch import NativeKernel
        check, self.auto = bool(self.auto["bounds_check"]), None
        try:
            built = compiled.build(self.module, check)
            if built.data is not None:
                self.native = NativeKernel(self.module, built.data, built.meta)
        except Exception as exc:  # noqa: BLE001 - a compiler bug must not stop the kernel: it runs interpreted
            built = compiled.Built(None, {}, f"the compiled tier failed ({type(exc).__name__}: {exc})")
        if self.native is None:
            self.compiled_detail = built.refusal
            return False
        self.compiled_detail = AUTO_CACHED if built.cached else AUTO_COMPILED
        return True


class Stats:
    """Per kernel: which tier ran it, why, and how many launches (what `take_launch_stats` gives)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: dict[tuple[str, str, str], int] = {}

    def add(self, kernel: TieredKernel) -> None:
        key = (kernel.name, kernel.tier, kernel.tier_detail)
        with self._lock:
            self._by[key] = self._by.get(key, 0) + 1

    def take(self) -> list[dict]:
        with self._lock:
            out = [{"kernel": k, "tier": t, "detail": d, "launches": n} for (k, t, d), n in self._by.items()]
            self._by.clear()
        return out


def load(artifact: bytes, source_file: str | None, table, cache: dict, checks: tuple = (),
         program=None) -> TieredKernel:
    """The kernel of `artifact`, loaded once per (artifact, file, checks, interpreter) into
    `cache`; `program(module, table, flags)` builds the interpreter (interp.Program by default)."""
    import hashlib
    from sdk.ttir import parse
    if program is None:
        from .interp import Program as program
    key = (hashlib.sha1(artifact).hexdigest(), source_file, checks, program)
    hit = cache.get(key)
    if hit is not None:
        return hit
    ttir, tier, detail, obj, meta = unpack(artifact)
    module = parse(ttir)  # bytes: a corrupted artifact is a TTIRSyntaxError
    module.relocate(source_file)
    native, auto = None, None
    if tier == "auto":  # (the interpreter's checks never reach here: they make the llir stage refuse)
        from . import compiled
        from .compiled import jit
        from .interp import Program as batched
        hit = jit.cached(compiled.cache_key(module, meta.get("bounds_check", True)))
        if hit is not None:
            obj, meta, tier, detail = hit[0], hit[1], "compiled", AUTO_CACHED
        elif program is batched:
            auto, tier = meta, "interp"
        else:
            tier, detail = "interp", "auto: the reference interpreter runs what is not compiled yet (it counts no work)"
    if obj is not None:
        from .compiled.launch import NativeKernel
        native = NativeKernel(module, obj, meta)
    flags = {f"check_{c}": True for c in checks}
    kernel = TieredKernel(module, native, lambda: program(module, table, flags), tier, detail, auto)
    if native is None:
        kernel.interp()  # built now: a bad attribute fails at load as before
    cache[key] = kernel
    return kernel


__all__ = ["CpuOptions", "resolve", "lower", "load", "TieredKernel", "Stats", "DEFAULT_TIER"]
