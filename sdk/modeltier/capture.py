"""The TTIR of every kernel a whole model launches, for `day0 ops --model`: the model (scaled as the
model tier scales it) runs once under torch.compile on cpu_interp with a fresh Triton cache, so
that every kernel is compiled here and its module kept."""
from __future__ import annotations

import os
import tempfile
from typing import Any


def capture_model(name_or_path: str, dtype: str = "fp32") -> list[Any]:
    """One `sdk.report.ops.KernelOps` per kernel the model's prefill and decode launch."""
    import sdk
    from ..report.ops import KernelOps
    from .runner import plan
    from .worker import build, run_modes

    (job,) = plan([name_or_path], "cpu_interp", [dtype], ["prefill", "decode"])
    spec = job.spec()
    previous = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="day0-ops-") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            with sdk.inductor("cpu_interp") as run:
                import torch
                model, config = build(spec)
                run_modes(torch.compile(model, dynamic=False), spec, config)
                kernels = run.kernels
        finally:
            if previous is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = previous
    return [KernelOps(f"{k.name} ({k.origin})", (job.name,), [k.module] if k.module is not None else [],
                      max(1, k.launches), [] if k.module is not None else ["not compiled in this run"])
            for k in kernels]
