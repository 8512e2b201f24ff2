"""vLLM's own Triton kernels, called through the Python functions vLLM's layers call.

These are the Triton kernels vLLM (0.33) runs wherever it takes no CUDA-only library path: the
fused MoE GEMM (bf16 and fp8 block-quantized experts), unified paged attention (varlen prefill,
split-KV decode, sliding window, softcap, sinks), the KV-cache write, Mamba's causal conv1d and SSD
kernels, multimodal RoPE, its vendored FLA Gated DeltaNet kernels, the sampler's top-k/top-p mask,
MLA decode, and fp8 group quantization and block-scaled GEMM. Each case calls the public function
at a model's shapes (scaled for cpu_interp in quick mode, the model's own in `--full`), with the
data layouts vLLM's layers pass (paged caches with shuffled block tables, state pools indexed by
slot, varlen batches), against a PyTorch reference written here from the math.

vLLM is installed beside the pinned torch by `scripts/install-vllm.sh`; on a day0 backend it runs
on day0's platform plugin (`sdk.integrations.vllm`), which the worker selects by activating the
backend before vLLM is first imported. Findings these cases record (vLLM 0.33.0):
- `triton_reshape_and_cache_flash` calls `torch.cuda.get_device_capability` on every platform
  but ROCm and XPU, so the KV-cache write cannot run on another device (lib_vllm_kv_cache_write);
- `kernel_unified_attention` loads block-table entries past a sequence's last page without a
  mask (triton_unified_attention.py: `block_tables_ptr + block_table_offset + seq_offset //
  BLOCK_SIZE`); with rows exactly as wide as the pages in use the last row reads past the table.
  The cases use vLLM's own row width (max_model_len / block_size), where the read stays inside.
"""
from __future__ import annotations

import functools
import importlib
import traceback
from typing import Callable

from ...spec import Case, KernelSpec, Tolerance
from .. import Library, library_kernel


class VllmLibrary(Library):
    """vLLM: usable when vLLM and its Triton-kernel modules import. The wheel goes in with
    --no-deps (its requirements pin another torch); scripts/install-vllm.sh adds the packages its
    kernel modules import, and the message of a missing vLLM names that script."""

    def missing(self) -> str:
        from ....integrations.vllm.install import IMPORT_CHECK
        for mod in IMPORT_CHECK:
            try:
                importlib.import_module(mod)
            except ImportError as exc:
                why = " ".join(str(exc).split())[:160]
                return f"not installed: scripts/install-vllm.sh (import {mod}: {why})"
        return ""


VLLM = VllmLibrary(dist="vllm", module="vllm", requirement="--no-deps vllm==0.33.0", origin="vllm")
DTYPES = ("bf16", "fp32")
RMSE = {"bf16": Tolerance(rmse=1e-2), "fp32": Tolerance(rmse=1e-5)}


def _kernel(**fields) -> KernelSpec:
    """Register a vLLM library-tier kernel; `upstream` (the vLLM function and kernels it calls)
    goes to the spec's own field where the spec has one, else ends the description."""
    upstream = fields.pop("upstream")
    if "upstream" in KernelSpec.__dataclass_fields__:
        fields["upstream"] = upstream
    else:
        fields["description"] = f"{fields['description']} Calls {upstream}."
    return library_kernel(VLLM, **fields)


class VllmCallError(RuntimeError):
    """vLLM's Python code failed before or around its kernel; the message names vLLM's line."""


def _vllm_line(exc: BaseException) -> str:
    """'vllm/...py:N: source' of the innermost traceback frame inside vLLM."""
    best = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = frame.filename.replace("\\", "/")
        if "/vllm/" in path and "/sdk/" not in path:
            rel = "vllm/" + path.rsplit("/vllm/", 1)[1]
            best = f"{rel}:{frame.lineno}: {(frame.line or '').strip()}"
    return best


def _on_day0_platform() -> None:
    from vllm.platforms import current_platform
    from ....integrations.vllm.platform import Day0Platform
    if not isinstance(current_platform, Day0Platform):
        raise VllmCallError(f"vLLM runs on {type(current_platform).__name__}, not day0's platform: "
                            "vLLM resolved its platform before a day0 backend was selected")


def vllm_call(run: Callable[[dict, Case], None]) -> Callable[[dict, Case], None]:
    """A case's run, checked to be on day0's vLLM platform; an error raised in vLLM's own Python
    code (not a kernel fault or a missing lowering, which name their kernel line) names the vLLM
    line it came from."""
    @functools.wraps(run)
    def wrapped(x: dict, case: Case) -> None:
        _on_day0_platform()
        try:
            run(x, case)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] in ("sdk", "backends", "triton"):
                raise
            where = _vllm_line(exc)
            if not where:
                raise
            raise VllmCallError(f"{type(exc).__name__}: {exc} (raised at {where})") from exc
    return wrapped


# A module per kernel family; they register in this order (the suite's and the tables' order).
for _family in ("moe", "attention", "mamba", "rope", "gdn", "sampling", "mla", "fp8"):
    importlib.import_module(f"{__name__}.{_family}")
