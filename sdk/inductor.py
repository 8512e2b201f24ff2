"""torch.compile on a day0 backend: Inductor generates Triton and the selected backend runs it.

    with sdk.inductor("cpu_interp") as run:
        out = torch.compile(model)(x)
    for k in run.kernels: print(k.name, k.origin, k.status, k.ops)

Also a plain call (`run = sdk.inductor("cpu_interp")`, later `run.close()`), with the backend already
selected (`sdk.inductor()` under `sdk.activate` or `TRITON_DEFAULT_BACKEND`), and the CLI's
`--inductor` options. What it sets, and why:
- Inductor's Triton code generation for the backend's torch device type (`cpu_backend = "triton"`
  for host-memory backends; CUDA devices use Triton already);
- compilation in this process (`compile_threads = 1`): the backend selection is this process's
  state, which Inductor's compile workers would not share;
- no reuse of graphs or kernels compiled for another backend: dynamo is reset on entry and exit and
  Inductor's on-disk graph and autotune caches are off while open;
- autotuning off unless asked (`autotune=True`): a backend that is not being timed runs each kernel
  in its first configuration instead of benchmarking candidates (Inductor's `deterministic` mode
  for reductions, `autotune_pointwise = False` for the rest, and any candidates left time equal);
- launches through Triton's runtime: Inductor's static CUDA launcher (which loads the binary and
  launches it itself) is off, so a CUDA backend's launch hooks see every launch and the records
  count them, as on any other device;
- every kernel compiled or launched is recorded (`kernels`), with its origin and TTIR op set.
"""
from __future__ import annotations

import contextlib
from typing import Any

from . import launches
from .errors import Day0Error


class inductor:
    """Make torch.compile emit Triton for a day0 backend; see the module docstring."""

    def __init__(self, backend: str | None = None, *, autotune: bool = False) -> None:
        import torch
        import torch._dynamo
        from .triton_bridge import activate, device_type, selected
        from .backend import get_backend
        self._stack = contextlib.ExitStack()
        try:
            if backend is not None:
                self._stack.enter_context(activate(backend))
            name = selected()
            if name is None:
                raise Day0Error("sdk.inductor: no day0 backend is selected; pass one "
                                "(sdk.inductor('cpu_interp')) or select one with sdk.activate")
            self.backend = name
            self.device_type = device_type(get_backend(name))
            self._stack.enter_context(torch._inductor.config.patch(_settings(self.device_type, autotune)))
            if not autotune:
                self._stack.enter_context(_first_config())
            _register_device(self.device_type, get_backend(name))
            torch._dynamo.reset()
            self._stack.callback(torch._dynamo.reset)
            self._recorder = self._stack.enter_context(launches.record())
        except BaseException:
            self._stack.close()
            raise

    @property
    def kernels(self) -> list[launches.KernelRecord]:
        """Every Triton kernel compiled or launched so far, in first-seen order."""
        return self._recorder.kernels

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "inductor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _settings(device: str, autotune: bool) -> dict[str, Any]:
    import torch._inductor.config as config
    out: dict[str, Any] = {
        "compile_threads": 1,
        "fx_graph_cache": False,
        "autotune_local_cache": False,
        "max_autotune": False,
        "max_autotune_pointwise": False,
        "coordinate_descent_tuning": False,
        "triton.autotune_pointwise": autotune,
        "triton.cudagraphs": False,
    }
    if device == "cpu":
        out["cpu_backend"] = "triton"
    if hasattr(config, "use_static_cuda_launcher"):
        out["use_static_cuda_launcher"] = False
    if not autotune and hasattr(config, "deterministic"):
        out["deterministic"] = True  # one configuration per reduction, no benchmarking
    for key in ("bundle_triton_into_fx_graph_cache", "autotune_remote_cache", "fx_graph_remote_cache"):
        if hasattr(config, key):
            out[key] = False
    return out


@contextlib.contextmanager
def _first_config():
    """Candidates Inductor still benchmarks (some persistent reductions keep several
    configurations even in deterministic mode) all time as equal, so the first one runs: nothing
    is launched only to be timed."""
    from unittest import mock
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    if not hasattr(CachingAutotuner, "bench"):
        yield
        return
    with mock.patch.object(CachingAutotuner, "bench", lambda self, launcher, *args, **kwargs: 0.0):
        yield


def _register_device(device: str, backend: Any) -> None:
    """Inductor knows Triton code generation for "cpu" and "cuda"; a vendor's own device type
    (PrivateUse1) gets Inductor's Triton scheduling and wrapper, and the backend's device interface
    (`Device.interface()`) when none is registered for it yet."""
    if device in ("cpu", "cuda"):
        return
    from torch._dynamo.device_interface import get_interface_for_device, register_interface_for_device
    from torch._inductor.codegen.common import get_scheduling_for_device, register_backend_for_device
    try:
        get_interface_for_device(device)
    except Exception:
        register_interface_for_device(device, backend.device.interface())
    if get_scheduling_for_device(device) is None:
        from torch._inductor.codegen.triton import TritonScheduling
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen
        register_backend_for_device(device, TritonScheduling, PythonWrapperCodegen)
