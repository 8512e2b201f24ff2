"""Sweep Triton kernels of libraries beyond the library tier (mamba_ssm, torchao, sglang) on a day0
backend (cpu_interp by default), with the machinery of `library_sweep.py`.

Each op is called as the library's users call it (its public function or autograd op), at small
but real-ish shapes, forward and, where the library has autograd, backward; inputs are seeded, every
tensor the library allocates is poisoned (NaN), and outputs and gradients are compared with a
reference written here in plain PyTorch fp64 (`thirdparty_sweep_<lib>.py`), which launches no
Triton kernel. A library that cannot be imported makes its ops `skipped (not installed: ...)` with
the command that installs it; never a pass. Ops marked `[interp]` run again on cpu_interp's
reference interpreter (DAY0_CPU_TIER=interp) where that is cheap.

The libraries pin their own torch and CUDA builds; install them beside the pinned torch, not into
the project's environment, and put them on PYTHONPATH:

    MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE pip install --no-deps --no-build-isolation \\
        --target /tmp/3p mamba-ssm==2.3.2.post1 torchao==0.18.0
    pip install --no-deps --target /tmp/3p sglang==0.5.23 orjson ipython traitlets
    PYTHONPATH=/tmp/3p python scripts/thirdparty_sweep.py --out results/cpu_interp/thirdparty_sweep
    PYTHONPATH=/tmp/3p python scripts/thirdparty_sweep.py --only 'mamba_ssm.*' --out /tmp/s --force
    python scripts/thirdparty_sweep.py --list

Stand-ins, stated per op in its note: mamba_ssm's package imports its CUDA extension
`selective_scan_cuda` unconditionally (mamba_ssm/ops/selective_scan_interface.py:20), so a module of
that name whose functions raise when called is installed before the import; and mamba_ssm selects the CUDA
device around every launch (`with torch.cuda.device(x.device.index)`) and reads the CUDA SM count in
its backward passes, which a CPU-only torch cannot answer: ops marked so run with
`cuda_device_standin()`, in which those two calls answer for a non-CUDA tensor (no device switch;
the SM count the active Triton driver reports). One op runs without it to keep the library's own
failure on record.

Exit status: 0 when every op passed or has a stated reason, 1 when some non-pass has none (a
suspected backend bug), 2 for bad command-line input.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, Iterator

SCRIPTS = Path(__file__).resolve().parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from library_sweep import NotInstalled, Sweep, SweepOp, main as sweep_main  # noqa: E402

# kernel origin (sdk.launches) -> pip distribution
LIBS = {"mamba_ssm": "mamba-ssm", "torchao": "torchao", "sglang": "sglang"}
INSTALL = {
    "mamba_ssm": "MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE pip install --no-deps "
                 "--no-build-isolation --target DIR mamba-ssm==2.3.2.post1 (then PYTHONPATH=DIR)",
    "torchao": "pip install --no-deps --target DIR torchao==0.18.0 (then PYTHONPATH=DIR)",
    "sglang": "pip install --no-deps --target DIR sglang==0.5.23 orjson ipython traitlets "
              "(then PYTHONPATH=DIR)",
}


def require(lib: str, module: str) -> Any:
    """Import `module` of library `lib`, or raise NotInstalled naming the install command."""
    if lib == "mamba_ssm":
        _selective_scan_cuda_standin()
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        why = " ".join(str(exc).split())[:160]
        raise NotInstalled(f"not installed: {INSTALL[lib]} (import {module}: {why})") from None


def _selective_scan_cuda_standin() -> None:
    """mamba_ssm/__init__.py imports its CUDA selective-scan extension whatever the device: where
    it is not built, a module of its name whose functions raise when called lets the Triton ops
    import."""
    if "selective_scan_cuda" in sys.modules or importlib.util.find_spec("selective_scan_cuda"):
        return
    mod = types.ModuleType("selective_scan_cuda")

    def missing(name: str) -> Any:
        if name.startswith("__"):   # module introspection (__file__, __spec__ ...) finds nothing
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"selective_scan_cuda.{name}: mamba_ssm's CUDA extension is not built "
                               "(stand-in installed by scripts/thirdparty_sweep.py)")
        return call
    mod.__getattr__ = missing  # type: ignore[attr-defined]
    sys.modules["selective_scan_cuda"] = mod


@contextlib.contextmanager
def cuda_device_standin() -> Iterator[None]:
    """While open, `torch.cuda.device(i)` with i None / negative / a non-CUDA device does nothing,
    and `torch.cuda.get_device_properties(d)` for a non-CUDA device answers the SM count (and a
    name) that the active Triton driver reports; CUDA devices keep the real answers."""
    import torch
    import triton
    from unittest import mock

    real_device, real_props = torch.cuda.device, torch.cuda.get_device_properties

    def not_cuda(d: Any) -> bool:
        if d is None:
            return True
        if isinstance(d, int):
            return d < 0
        if isinstance(d, str):
            d = torch.device(d)
        return isinstance(d, torch.device) and d.type != "cuda"

    class device(real_device):  # type: ignore[misc, valid-type]
        def __init__(self, d: Any) -> None:
            self.standin = not_cuda(d)
            if not self.standin:
                super().__init__(d)

        def __enter__(self) -> Any:
            return None if self.standin else super().__enter__()

        def __exit__(self, *exc: Any) -> bool:
            return False if self.standin else super().__exit__(*exc)

    def get_device_properties(d: Any = None) -> Any:
        if d is not None and not not_cuda(d):
            return real_props(d)
        props = triton.runtime.driver.active.utils.get_device_properties(0)
        return types.SimpleNamespace(multi_processor_count=int(props.get("multiprocessor_count", 1)),
                                     name="day0", gcnArchName="", major=0, minor=0)

    with mock.patch.object(torch.cuda, "device", device), \
            mock.patch.object(torch.cuda, "get_device_properties", get_device_properties):
        yield


def all_ops() -> list[SweepOp]:
    import thirdparty_sweep_mamba
    import thirdparty_sweep_sglang
    import thirdparty_sweep_torchao
    return thirdparty_sweep_mamba.OPS + thirdparty_sweep_torchao.OPS + thirdparty_sweep_sglang.OPS


SWEEP = Sweep("Third-party Triton library sweep", Path(__file__).resolve(), LIBS, all_ops,
              legend="`class`: (b) the library's own code: a CUDA-only path or call, or a mistake there "
                     "(file:line named); (c) the reference or bound is the sweep's.")


if __name__ == "__main__":
    sys.exit(sweep_main(None, SWEEP, __doc__.split("\n\n")[0]))
