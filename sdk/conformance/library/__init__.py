"""The library tier: upstream Triton kernel libraries called through their public Python APIs.

A module per library (`fla.py`, `liger.py`, ...) declares its `Library` (pip distribution, the
import that proves it usable, the pip requirement to print when it is missing, and the origin
`sdk.launches` gives its kernels) and registers `KernelSpec`s with `tier="library"` and
`library=<distribution>`. They run through the same runner, results and tables as the suite's own
kernels, at the shapes of the models that use them, against PyTorch references written here.

Rules every library case follows:
- the library is imported inside make_inputs/run only, never when the suite is imported: the worker
  selects the backend first (FLA caches its device when imported);
- a library that cannot be imported makes the item `skipped` ("not installed: pip install ..."),
  which is neither a pass nor a failure, and the tables name the models that lack evidence for it;
- while a case runs, every tensor the library allocates with `torch.empty` is poisoned (NaN for
  floats, the largest value for integers), as the runner poisons the outputs it allocates, and every
  Triton kernel compiled or launched is recorded (`Record.kernels`); a case in which no kernel of the
  library ran proves nothing and fails;
- training libraries are checked forward and backward: a case compares the outputs and the
  gradients, against the reference's autograd in fp64 on copies of the same inputs.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import pkgutil
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..spec import KernelSpec, register


@dataclass(frozen=True)
class Library:
    """An upstream kernel library, as a pip distribution."""

    dist: str          # the pip distribution, "fla-core"
    module: str        # the import that proves it usable, "fla"
    requirement: str   # what to install, "fla-core==0.6.0" (a version the cases were checked with)
    origin: str        # the origin `sdk.launches` gives its kernels, "fla"

    def missing(self) -> str:
        """"" when the library imports (importing it now), else "not installed: pip install ..."."""
        try:
            importlib.import_module(self.module)
        except ImportError as exc:
            why = " ".join(str(exc).split())[:160]
            return f"not installed: pip install {self.requirement} (import {self.module}: {why})"
        return ""

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.dist)
        except importlib.metadata.PackageNotFoundError:
            mod = importlib.import_module(self.module)
            return str(getattr(mod, "__version__", "unknown"))

    def label(self) -> str:
        """What a results record says: "fla-core 0.6.0"."""
        return f"{self.dist} {self.version()}"


LIBRARIES: dict[str, Library] = {}


def register_library(lib: Library) -> Library:
    if LIBRARIES.get(lib.dist, lib) != lib:
        raise ValueError(f"library '{lib.dist}' is registered twice, differently")
    LIBRARIES[lib.dist] = lib
    return lib


def library_of(spec: Any) -> Library | None:
    """The library a library-tier spec calls; None for the suite's own kernels."""
    if getattr(spec, "tier", "kernel") != "library":
        return None
    try:
        return LIBRARIES[spec.library]
    except KeyError:
        raise ValueError(f"kernel '{spec.name}' calls library '{spec.library}', which no module "
                         f"of sdk.conformance.library declares") from None


def library_kernel(lib: Library, **fields: Any) -> KernelSpec:
    """Register a library-tier kernel of `lib` (fields as KernelSpec's); its `run` (the library
    call) runs with poisoned allocations."""
    register_library(lib)
    run = fields.pop("run")

    @functools.wraps(run)
    def poisoned_run(inputs: dict, case: Any, **config: Any) -> None:
        with poisoned_allocations():
            run(inputs, case, **config)
    return register(KernelSpec(tier="library", library=lib.dist, run=poisoned_run, **fields))


#: the ATen operations that hand out memory nobody has written: their results are poisoned
_UNWRITTEN = ("empty.memory_format", "empty_strided.default", "empty_like.default", "new_empty.default",
              "new_empty_strided.default", "empty_permuted.default")


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill `t` with NaN (floating and complex types), the largest value (integers) or True."""
    if t.is_floating_point() or t.is_complex():
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).max)


class _PoisonAllocations(TorchDispatchMode):
    """Poisons what the allocating operations return; every other operation runs as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = {getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1])
                    for name in _UNWRITTEN if hasattr(torch.ops.aten, name.split(".")[0])}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self.ops and isinstance(out, torch.Tensor) and out.numel():
            poison_(out)
        return out


@contextlib.contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Inside, `torch.empty` (and `empty_like`, `empty_strided`, `new_empty`, whatever allocates
    without writing) returns NaN / the largest integer / True instead of whatever memory held: an
    output a library allocates and a kernel leaves unwritten cannot pass by luck. A dispatch mode
    fills those results; nothing else changes (PyTorch's own deterministic mode would fill them
    too, but libraries read that mode as a request for their deterministic paths)."""
    with _PoisonAllocations():
        yield


@contextlib.contextmanager
def session(lib: Library | None) -> Iterator[Any]:
    """Around one library item: a `sdk.launches` recorder (yielded); the library call itself runs
    with poisoned allocations (library_kernel). For a kernel-tier item (lib None) it does nothing
    and yields None."""
    if lib is None:
        yield None
        return
    from ... import launches
    with launches.record() as rec:
        yield rec


def no_library_kernel(lib: Library, rec: Any, compile_only: bool = False) -> str:
    """"" when some kernel of `lib` ran (compile-only: compiled), else why the item proves nothing."""
    want = ("compiled", "ran") if compile_only else ("ran",)
    mine = [k for k in rec.kernels if k.origin == lib.origin]
    if any(k.status in want for k in mine):
        return ""
    others = sorted({k.origin for k in rec.kernels if k.origin != lib.origin})
    return (f"no {lib.dist} Triton kernel {'compiled' if compile_only else 'ran'} on the backend"
            + (f" (only kernels of: {', '.join(others)})" if others else "")
            + "; the library took a path that is not its Triton one")


# --------------------------------------------------------------------------- case helpers
def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype, device: str, scale: float = 1.0,
          shift: float = 0.0) -> torch.Tensor:
    """Seeded normal data (drawn in fp32 on the CPU, then cast and moved)."""
    x = torch.randn(*shape, generator=gen, dtype=torch.float32) * scale + shift
    return x.to(dtype).to(device)


def leaves(inputs: dict, names: tuple[str, ...], dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """Detached copies of `inputs[n]` that require grad (optionally cast, e.g. to fp64)."""
    out = []
    for n in names:
        t = inputs[n].detach().clone()
        if dtype is not None:
            t = t.to(dtype)
        out.append(t.requires_grad_(True))
    return out


def store(inputs: dict, **results: torch.Tensor | None) -> None:
    """Copy each result into the (poisoned) output buffer of the same name."""
    for name, value in results.items():
        if value is None:
            raise ValueError(f"the library returned no '{name}'")
        inputs[name].copy_(value.detach().reshape(inputs[name].shape))


for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _mod.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod}")
