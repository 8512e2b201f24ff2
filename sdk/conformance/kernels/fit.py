"""Launch configurations that fit the target, as a serving stack's tuned tables and Triton's
autotuner pick them: candidates in order of preference, and the first one the compiler accepts for
the active target runs. A candidate the target refuses for its resources (shared memory, registers:
`OutOfResources`, raised at load, before anything is launched) is skipped; any other error is the
kernel's and propagates."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from triton.runtime.errors import OutOfResources


def launch_first_fit(kernel: Any, grid: Callable[[Mapping[str, Any]], tuple], args: tuple,
                     configs: Iterable[Mapping[str, Any]], **fixed: Any) -> Mapping[str, Any]:
    """Launch `kernel[grid(cfg)](*args, **fixed, **cfg)` with the first of `configs` the target can
    hold; returns that configuration. Raises the last `OutOfResources` when none fits."""
    refused: OutOfResources | None = None
    for cfg in configs:
        try:
            kernel[grid(cfg)](*args, **fixed, **cfg)
            return cfg
        except OutOfResources as exc:
            refused = exc
    if refused is None:
        raise ValueError("launch_first_fit: no candidate configurations")
    raise refused
