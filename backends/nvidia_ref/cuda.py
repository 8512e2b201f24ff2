"""Triton's own CUDA pipeline, run stage by stage from a TTIR module for any sm_XX, no GPU needed:
ttgir -> llir -> ptx -> cubin with `triton.backends.nvidia.compiler.CUDABackend`'s stages, plus
what the compiled kernel costs (ptxas registers, spills) and which code path it took (PTX facts)."""
from __future__ import annotations

import contextlib
import functools
import io
import re
from typing import Any

from sdk.errors import Day0Error


class CudaCompileError(Day0Error):
    """A stage of Triton's CUDA pipeline rejected the kernel for this arch (Triton's message kept)."""


@functools.lru_cache(maxsize=None)
def cuda_backend(capability: int) -> Any:
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    return CUDABackend(GPUTarget("cuda", capability, 32))


def parse_options(capability: int, opts: dict) -> Any:
    """Triton's CUDAOptions for the arch: the frontend then sees exactly what it sees on CUDA
    (tf32 as the default dot precision, fp8e4nv only from sm_89 on, ...)."""
    opts = dict(opts)
    opts.pop("arch", None)  # the arch is the variant's, never a caller's leftover
    opts.pop("backend_name", None)
    with _override_arch(capability):
        return cuda_backend(capability).parse_options(opts)


@contextlib.contextmanager
def _override_arch(capability: int):
    from triton import knobs
    with knobs.runtime.scope():
        knobs.runtime.override_arch = f"sm{capability}"
        yield


def ttir_passes(capability: int) -> tuple[str, ...]:
    """CUDA's make_ttir pipeline, as names the SDK's TTIR stage runs (a pass the installed Triton
    lacks is skipped there, as CUDA's own pipeline does not run it either)."""
    below_hopper = ("rewrite_tensor_descriptor_to_pointer",) if capability < 90 else ()
    return ("inliner", "rewrite_tensor_pointer", *below_hopper, "canonicalizer", "combine",
            "reorder_broadcast", "cse", "symbol_dce", "loop_unroll")


def compile_ttir(mod: Any, capability: int, options: Any) -> tuple[bytes, dict, str]:
    """TTIR (live MLIR module) -> (cubin, metadata for Triton's launcher, ptxas log)."""
    from triton._C.libtriton import nvidia
    from triton import knobs
    be = cuda_backend(capability)
    nvidia.load_dialects(mod.context)
    metadata: dict = {}
    arch = f"sm_{capability}"
    src: Any = mod
    out = io.StringIO()
    for stage in ("ttgir", "llir", "ptx", "cubin"):
        fn = {"ttgir": be.make_ttgir, "llir": be.make_llir, "ptx": be.make_ptx, "cubin": be.make_cubin}[stage]
        cap = capability if stage in ("ttgir", "llir") else be.target.arch
        try:
            with knobs.nvidia.scope(), contextlib.redirect_stdout(out):
                knobs.nvidia.dump_ptxas_log = True
                result = fn(src, metadata, options, cap)
        except Exception as exc:  # Triton's own error, kept whole but without the PTX dump
            msg = str(exc).strip() or type(exc).__name__
            raise CudaCompileError(f"Triton's CUDA '{stage}' stage failed for {arch}: "
                                   f"{type(exc).__name__}: {_trim(msg)}") from exc
        if stage == "ptx":
            metadata["ptx_facts"] = ptx_facts(result)
        src = result
    return src, metadata, out.getvalue()


def _trim(msg: str, limit: int = 2000) -> str:
    return msg if len(msg) <= limit else msg[:limit] + f" ... [{len(msg) - limit} more characters]"


# ------------------------------------------------------------------------------ what it costs
_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "static_smem_bytes": re.compile(r"(\d+) bytes smem"),
}


def ptxas_stats(log: str) -> dict[str, int]:
    """`ptxas -v` output -> registers, spills, stack and static shared memory (0 when absent)."""
    out = {}
    for key, pat in _PTXAS.items():
        found = [int(x) for x in pat.findall(log)]
        out[key] = max(found) if found else 0
    return out


# Instruction families that tell the code paths apart (tensor cores by generation, async copies)
_PATHS = (
    ("tcgen05", re.compile(r"\btcgen05\.mma\b")),
    ("wgmma", re.compile(r"\bwgmma\.mma_async\b")),
    ("mma.sync", re.compile(r"\bmma\.sync\.aligned\b")),
    ("tma", re.compile(r"\bcp\.async\.bulk\.tensor\b")),
    ("cp.async", re.compile(r"\bcp\.async\.(?:ca|cg)\b")),
    ("ldmatrix", re.compile(r"\bldmatrix\b")),
)


def ptx_facts(ptx: str) -> dict[str, Any]:
    """The PTX target line and which instruction families appear (with counts)."""
    target = re.search(r"^\s*\.target\s+(\S+)", ptx, re.MULTILINE)
    kinds = {name: len(pat.findall(ptx)) for name, pat in _PATHS}
    return {"ptx_target": target.group(1) if target else "",
            "instructions": {k: v for k, v in kinds.items() if v}}


def code_path(instructions: dict[str, int]) -> str:
    """A short name for the path taken: the tensor-core generation used, if any, and async copies."""
    mma = next((k for k in ("tcgen05", "wgmma", "mma.sync") if k in instructions), "simt")
    copies = [k for k in ("tma", "cp.async") if k in instructions]
    return "+".join([mma, *copies])
