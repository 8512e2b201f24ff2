"""Every Triton kernel a day0 backend compiles or launches, recorded while a `record()` is open.

The bridge reports four events: a kernel lowered (its TTIR op set), refused (the ops the backend
lacks), launched, or faulted at run time. Whoever launched it -- a user's `kernel[grid]`, a library
such as FLA or Liger, vLLM, or the code Inductor generates under torch.compile -- the record says so
(`origin`), which is what the model tier and `day0 ops` report per kernel.

    with sdk.launches.record() as rec:
        model(x)
    for k in rec.kernels: print(k.name, k.origin, k.status, k.launches)
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

# module prefix of the kernel's Python function -> origin
_ORIGINS = (("fla.", "fla"), ("vllm.", "vllm"), ("liger_kernel.", "liger"), ("sdk.conformance.", "day0"),
            ("torch._inductor.", "inductor"), ("triton_kernels.", "triton_kernels"),
            ("mamba_ssm.", "mamba_ssm"), ("torchao.", "torchao"), ("sglang.", "sglang"))


@dataclass
class KernelRecord:
    """One kernel: what it is, where it comes from, what it needs, and how it went."""

    name: str
    origin: str                    # inductor / fla / vllm / liger / mamba_ssm / ... / day0 / user / unknown
    source_file: str = ""
    ops: tuple[str, ...] = ()      # the TTIR op names of the kernel (after the backend's passes)
    launches: int = 0
    status: str = "compiled"       # compiled / ran / unsupported / fault
    detail: str = ""               # the missing ops, or the fault with its source line
    missing_ops: tuple[str, ...] = ()   # op keys, "tt.dot(bf16 x bf16 -> f32)"
    missing: tuple[dict, ...] = ()      # the same ops as {"name", "signature", "loc", "source"}
    module: Any = field(default=None, repr=False)  # the sdk.ttir.Module, when it was compiled here
    native: float | None = None         # share of its ops the backend's own rules lowered
    borrowed_ops: tuple[str, ...] = ()  # ops lowered by rules borrowed from another backend
    tier: str = ""                      # which of the backend's lowerings ran the latest launch
                                        # (cpu_interp: "compiled" or "interp"), "" when it has one
    tier_detail: str = ""               # why that one (e.g. the op the compiled tier lacks)

    def to_json(self) -> dict:
        return {"name": self.name, "origin": self.origin, "source_file": self.source_file,
                "ops": list(self.ops), "launches": self.launches, "status": self.status,
                "detail": self.detail, "missing_ops": list(self.missing_ops), "missing": list(self.missing),
                "native": self.native, "borrowed_ops": list(self.borrowed_ops), "tier": self.tier,
                "tier_detail": self.tier_detail}


@dataclass
class Recorder:
    defer_unsupported: bool = False
    by_name: dict[str, KernelRecord] = field(default_factory=dict)

    @property
    def kernels(self) -> list[KernelRecord]:
        return list(self.by_name.values())

    def _get(self, name: str, source_file: str, origin: str) -> KernelRecord:
        rec = self.by_name.get(name)
        if rec is None:
            rec = self.by_name[name] = KernelRecord(name, origin, source_file)
        elif not rec.source_file and source_file:
            rec.source_file, rec.origin = source_file, origin
        return rec


RECORDERS: list[Recorder] = []
_COMPILE_ONLY: list[list[dict]] = []  # open `compile_only()` blocks, innermost last


@contextlib.contextmanager
def compile_only() -> Iterator[list[dict]]:
    """Compile without running, on purpose. Inside, a compile-only backend variant
    (`nvidia_ref@sm_90/compile`) compiles each kernel launched and runs nothing, appending what it
    compiled to the list this yields (one dict per launch: kernel, arch, grid, the binary and the
    compiler's facts such as registers and shared memory). Outside, a launch on such a variant is
    an error: it would run nothing and leave the kernel's outputs unwritten.

        with sdk.activate("nvidia_ref@sm_90/compile"), sdk.launches.compile_only() as compiled:
            kernel[grid](x, out, n, BLOCK=256)
        compiled[0]["registers"], compiled[0]["binary"][:4]

    `day0 conformance --compile-only` runs every item inside one."""
    out: list[dict] = []
    _COMPILE_ONLY.append(out)
    try:
        yield out
    finally:
        _COMPILE_ONLY.remove(out)


def compiling_only() -> list[dict] | None:
    """The list of the innermost open `compile_only()` block, or None outside every such block."""
    return _COMPILE_ONLY[-1] if _COMPILE_ONLY else None


@contextlib.contextmanager
def record(defer_unsupported: bool = False) -> Iterator[Recorder]:
    """Collect a `KernelRecord` for every kernel compiled or launched inside (nests).

    defer_unsupported: a kernel the backend cannot lower still compiles, and raises its
    `UnsupportedOps` when launched; so a compiler that builds many kernels before running any
    (Inductor) reports every kernel that needs a missing op, not only the first."""
    rec = Recorder(defer_unsupported)
    RECORDERS.append(rec)
    try:
        yield rec
    finally:
        RECORDERS.remove(rec)


def deferring() -> bool:
    return any(rec.defer_unsupported for rec in RECORDERS)


def origin_of(fn: Any, source_file: str | None) -> str:
    """Which code a kernel belongs to: the file its TTIR says it was written in (a library kernel
    that Inductor re-emits in generated code still lives in the library), else its function's
    module."""
    path = (source_file or "").replace("\\", "/")
    for prefix, origin in _ORIGINS:
        if f"/{prefix[:-1].replace('.', '/')}/" in path:
            return origin
    if "torchinductor" in path:
        return "inductor"
    module = getattr(fn, "__module__", "") or ""
    for prefix, origin in _ORIGINS:
        if module.startswith(prefix) or module == prefix[:-1]:
            return origin
    return "user" if module or path else "unknown"


def compiled(name: str, fn: Any, source_file: str, ops: tuple[str, ...], module: Any = None,
             native: float | None = None, borrowed_ops: tuple[str, ...] = ()) -> None:
    for rec in RECORDERS:
        k = rec._get(name, source_file, origin_of(fn, source_file))
        k.ops = ops or k.ops
        k.module = module if module is not None else k.module
        if native is not None:
            k.native, k.borrowed_ops = native, tuple(borrowed_ops)


def unsupported(name: str, fn: Any, source_file: str, ops: tuple[str, ...], missing: list[Any],
                detail: str) -> None:
    for rec in RECORDERS:
        k = rec._get(name, source_file, origin_of(fn, source_file))
        k.ops, k.status, k.detail = ops or k.ops, "unsupported", detail
        k.missing_ops = tuple(sorted({m.key() for m in missing}))
        k.missing = tuple({"name": m.name, "signature": m.signature, "loc": m.loc, "source": m.source}
                          for m in missing)


def launched(name: str, fn: Any, source_file: str, ops: tuple[str, ...], native: float | None = None,
             borrowed_ops: tuple[str, ...] = (), tier: str = "", tier_detail: str = "") -> None:
    for rec in RECORDERS:
        k = rec._get(name, source_file, origin_of(fn, source_file))
        k.ops = ops or k.ops
        if tier:
            k.tier, k.tier_detail = tier, tier_detail
        if native is not None:
            k.native, k.borrowed_ops = native, tuple(borrowed_ops)
        k.launches += 1
        if k.status == "compiled":
            k.status = "ran"


def faulted(name: str, fn: Any, source_file: str, ops: tuple[str, ...], detail: str) -> None:
    for rec in RECORDERS:
        k = rec._get(name, source_file, origin_of(fn, source_file))
        k.ops = ops or k.ops
        k.launches += 1
        k.status, k.detail = "fault", detail
