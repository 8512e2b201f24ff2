"""Which TTIR ops the suite needs that a backend does not accept, found without running
anything: each kernel's quick cases and dtypes are launched under `sdk.capture.capture()`, which
compiles through Triton's real frontend and records the TTIR, and every op is checked with
`backend.capabilities().supports(op)` (capabilities are data: nothing of the backend runs).

An op is keyed by its name and element types ("tt.dot(bf16 x bf16 -> f32)"), as in results files.
A missing op *blocks* a kernel whose TTIR contains it, and the models that need that kernel; it
*alone blocks* a model when it is the only missing op of all that model's kernels (implementing it
makes the whole model lowerable).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import UnsupportedOp


@dataclass
class KernelOps:
    """The captured TTIR of one kernel over its quick items."""

    kernel: str
    models: tuple[str, ...]
    modules: list[Any] = field(default_factory=list)   # sdk.ttir.Module
    items: int = 0
    errors: list[str] = field(default_factory=list)    # items whose capture failed, with why


@dataclass
class MissingOp:
    key: str
    name: str
    signature: str
    kernels: list[str]
    models: list[str]                  # models needing a kernel it blocks
    alone: list[str]                   # models for which it is the only missing op
    example: str = ""                  # "file.py:42: source" of one occurrence


def capture_kernel(spec: Any) -> KernelOps:
    """Launch every quick (case, dtype) of `spec` under capture; launch nothing for real."""
    import torch

    from ..capture import capture
    from ..conformance.check import case_seed
    from ..conformance.spec import DTYPES

    out = KernelOps(spec.name, tuple(spec.models))
    for case in spec.cases:
        if not case.quick:
            continue
        for dtype in spec.dtypes:
            out.items += 1
            gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, dtype))
            try:
                inputs = spec.make_inputs(case, DTYPES[dtype], "cpu", gen)
                with capture() as modules:
                    spec.run(inputs, case)
                out.modules.extend(modules)
            except Exception as exc:  # noqa: BLE001 - a wrapper that needs real outputs; keep going
                text = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
                out.errors.append(f"{case.name}/{dtype}: {text}")
    return out


def capture_suite(specs: Iterable[Any]) -> list[KernelOps]:
    return [capture_kernel(s) for s in specs]


def missing_ops(captured: list[KernelOps], capabilities: Any,
                model_kernels: dict[str, list[str]] | None = None) -> list[MissingOp]:
    """The ops `capabilities` (sdk.capabilities.Capabilities, or anything with `supports(op)`) do not
    accept, ranked by models blocked, then kernels."""
    from ..backend import unsupported

    per_kernel: dict[str, set[str]] = {}
    samples: dict[str, UnsupportedOp] = {}
    kernels_of: dict[str, list[str]] = {}
    for k in captured:
        keys = per_kernel.setdefault(k.kernel, set())
        for module in k.modules:
            for op in module.walk():
                if capabilities.supports(op):
                    continue
                u = unsupported(op)
                keys.add(u.key())
                if u.key() not in samples or (u.loc and not samples[u.key()].loc):
                    samples[u.key()] = u
        for key in keys:
            kernels_of.setdefault(key, []).append(k.kernel)
    if model_kernels is None:
        model_kernels = {}
        for k in captured:
            for m in k.models:
                model_kernels.setdefault(m, []).append(k.kernel)
    out = []
    for key, kernels in kernels_of.items():
        models = sorted(m for m, ks in model_kernels.items() if set(ks) & set(kernels))
        alone = sorted(m for m in models
                       if set().union(*(per_kernel.get(k, set()) for k in model_kernels[m])) == {key})
        s = samples[key]
        where = f"{s.loc}: {s.source}" if s.loc and s.source else s.loc
        out.append(MissingOp(key, s.name, s.signature, sorted(kernels), models, alone, where))
    out.sort(key=lambda m: (-len(m.models), -len(m.kernels), m.key))
    return out
