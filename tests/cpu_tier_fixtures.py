"""What the compiled-tier test modules share: cpu_interp active with caches of the test's own, and
seeded generators, and `both`: a kernel run under each tier on the same inputs, outputs poisoned
first. A module imports `cpu_interp` (autouse) and what else it uses from here."""
from __future__ import annotations

import warnings

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


def poison(shape, dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    if dtype.is_floating_point:
        if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            return torch.full(shape, 0x7F, dtype=torch.uint8).view(dtype)  # NaN in both
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, 0x5A, dtype=dtype)


def both(launch, inputs: dict, outputs: dict, native: bool = True):
    """launch(tier, **tensors) under each tier with fresh copies of `inputs` and poisoned
    `outputs` (name -> (shape, dtype)); returns (interp results, compiled results). `native`:
    whether the compiled tier must have run the kernel natively (else: on the interpreter, saying
    why)."""
    results = []
    for tier in ("interp", "compiled"):
        ins = {k: v.clone() for k, v in inputs.items()}
        outs = {k: poison(shape, dt) for k, (shape, dt) in outputs.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            launch(tier, **ins, **outs)
        ran = {(s["tier"], s["detail"]) for s in get_backend("cpu_interp").take_launch_stats()}
        want = tier if native else "interp"
        assert {t for t, _ in ran} == {want}, ran
        if tier == "compiled" and not native:
            assert all("not lowered" in d or "interpreter" in d for _, d in ran), ran
        results.append({**ins, **outs})
    return results


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as integers (every NaN made one pattern: payloads are not compared)."""
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if not t.dtype.is_floating_point:
        return t
    if t.element_size() == 1:
        return t.view(torch.uint8)
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    nan = torch.isnan(t.float() if t.element_size() == 2 else t)
    out = t.view(view).clone()
    out[nan] = -1
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    x, y = bits(a), bits(b)
    bad = x != y
    assert not bad.any(), f"{what}: {int(bad.sum())} differ, e.g. {a[bad][:4].tolist()} vs {b[bad][:4].tolist()}"
