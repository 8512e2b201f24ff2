"""What a conformance kernel declares: group, models, cases, dtypes, tolerance, reference and launcher.

A kernel family file under `sdk/conformance/kernels/` builds one or more `KernelSpec`s and passes each
to `register`. The runner never imports a backend: it gets a torch device string from the active
backend, asks the spec for inputs on that device, poisons the outputs, launches, and compares.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64,
    "fp8e4m3": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2,
    "int8": torch.int8, "int32": torch.int32, "int64": torch.int64,
}


@dataclass(frozen=True)
class Tolerance:
    """How an output is judged. `rmse` set: relative RMSE ||ref-out||/||ref|| <= rmse.
    `exact`: bit-exact (cache and state writes, integer outputs). Otherwise per element
    |out-ref| <= atol + rtol*|ref| (torch.testing semantics)."""

    atol: float = 0.0
    rtol: float = 0.0
    rmse: float | None = None
    exact: bool = False


@dataclass(frozen=True)
class Case:
    """One shape configuration. `params` is free-form (sizes, flags); `quick` cases run in --quick."""

    name: str
    params: Mapping[str, Any]
    quick: bool = True
    source: str = ""  # where the shape comes from, e.g. "Qwen3-Next-80B-A3B config, scaled /8"


Inputs = dict[str, Any]
Outputs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class KernelSpec:
    """A model-derived Triton kernel with its PyTorch reference.

    make_inputs(case, dtype, device, gen) -> Inputs: fresh seeded random data (never all zeros) on
        `device`, plus any output buffers the kernel writes (the runner poisons every tensor named in
        `outputs` before the launch).
    run(inputs, case) -> None: the launch wrapper a serving stack would use; writes into the outputs.
        It may mutate inputs in place (in-place kernels name those tensors in `outputs`).
    reference(inputs, case) -> Outputs: the same computation in PyTorch on copies of the inputs as
        they were before `run` (the runner passes pre-launch clones), computed in fp32/fp64. Where
        the computation leaves a decision open (an element on the boundary of a top-p cut that a
        library's search resolves only to within its step), the reference may also return
        "<output>@alt": the other acceptable value of each such element (equal to the reference
        elsewhere); each element of the output is then judged against whichever of the two it
        matches (the nearer one under a tolerance).
    outputs: names of the tensors to compare (poisoned before the launch unless listed in
        `inplace`); `tolerance` maps dtype name -> Tolerance, and
        `output_tolerance` may override it per output name (e.g. a state written bit-exact), or
        per output and dtype ("dg@bf16").
    upstream: the provenance: the serving-stack or library kernel this one mirrors (library, file,
        function), or "C++ op in vLLM (...)" / "Inductor-generated in vLLM" where serving stacks
        run no hand-written Triton for it; the report and docs/kernels.md show it.
    tier: "kernel" (the suite's own Triton kernel) or "library" (an upstream library's kernels
        called through its public Python API; `library` names its pip distribution, described in
        `sdk.conformance.library`, and the library is imported inside make_inputs/run only).
    """

    name: str
    group: str
    models: tuple[str, ...]
    cases: tuple[Case, ...]
    dtypes: tuple[str, ...]
    make_inputs: Callable[[Case, torch.dtype, str, torch.Generator], Inputs]
    run: Callable[[Inputs, Case], None]
    reference: Callable[[Inputs, Case], Outputs]
    outputs: tuple[str, ...]
    tolerance: Mapping[str, Tolerance]
    output_tolerance: Mapping[str, Tolerance] = field(default_factory=dict)
    inplace: tuple[str, ...] = ()  # outputs updated in place from their input values (not poisoned)
    description: str = ""
    triton_kernels: tuple[Callable, ...] = ()  # the @triton.jit functions it launches (for `day0 ops`)
    tier: str = "kernel"                       # kernel | library
    upstream: str = ""                         # what it mirrors: "vllm: model_executor/layers/
                                               # fused_moe/fused_moe.py fused_moe_kernel", or where
                                               # no hand-written Triton exists, "C++ op in vLLM
                                               # (ops.topk_softmax)" / "Inductor-generated in vLLM"
    library: str = ""                          # library tier: the pip distribution, "fla-core"

    def tolerance_for(self, output: str, dtype: str) -> Tolerance:
        return (self.output_tolerance.get(f"{output}@{dtype}") or self.output_tolerance.get(output)
                or self.tolerance[dtype])


_REGISTRY: dict[str, KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    """Add a kernel to the suite; names are unique across all groups."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"conformance kernel '{spec.name}' is registered twice")
    if spec.tier not in ("kernel", "library") or (spec.tier == "library") != bool(spec.library):
        raise ValueError(f"kernel '{spec.name}': tier '{spec.tier}' with library '{spec.library}' "
                         "(a library-tier kernel names its distribution; a kernel-tier one none)")
    for d in spec.dtypes:
        if d not in DTYPES:
            raise ValueError(f"kernel '{spec.name}': unknown dtype '{d}' (known: {', '.join(DTYPES)})")
        if d not in spec.tolerance:
            raise ValueError(f"kernel '{spec.name}': no tolerance for dtype '{d}'")
    _REGISTRY[spec.name] = spec
    return spec


#: the packages whose modules register the shipped suite when imported. They build on this module
#: (KernelSpec, register) and it uses nothing of theirs: it loads them by name, as the runner loads a
#: vendor's kernel modules (DAY0_KERNELS), so the import graph keeps one direction.
FAMILY_PACKAGES = ("sdk.conformance.kernels", "sdk.conformance.library")


def registered() -> dict[str, KernelSpec]:
    """Every kernel of the suite, importing each kernel family module once."""
    for package in FAMILY_PACKAGES:
        importlib.import_module(package)  # importing a package registers its modules
    return dict(_REGISTRY)
