"""What the compiled-tier test modules share: cpu_interp active with caches of the test's own, and
seeded generators. A module imports `cpu_interp` (autouse) and `gen` from here."""
from __future__ import annotations

import pytest
import torch

import sdk
from sdk.backend import get_backend


@pytest.fixture(autouse=True)
def cpu_interp(tmp_path, monkeypatch):
    """Objects and Triton's artifacts in caches of the test's own: what a test watches happens at
    compile time (a warning, a stage), which a hit left by an earlier run would skip."""
    monkeypatch.setenv("DAY0_CPU_CACHE_DIR", str(tmp_path / "objects"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    with sdk.activate("cpu_interp"):
        get_backend("cpu_interp").take_launch_stats()
        yield


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
