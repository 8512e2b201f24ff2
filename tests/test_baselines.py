"""The production-style PyTorch baselines of the roofline agree with the conformance references.

CPU only, eager only (torch.compile is far too slow here): every baseline at every quick case of
its kernel and every dtype of the spec, judged with the spec's own tolerance and comparison.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from sdk.conformance.check import compare
from sdk.conformance.spec import DTYPES, registered

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "baselines.py"


def _load_baselines():
    spec = importlib.util.spec_from_file_location("roofline_baselines", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


baselines = _load_baselines()
SPECS = registered()


def _clone(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (unwritten output buffers may hold NaNs, which torch.equal never matches)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _params():
    for name in sorted(baselines.BASELINES):
        spec = SPECS.get(name)
        if spec is None:
            continue  # reported by test_every_baseline_is_a_conformance_kernel
        for case in spec.cases:
            if case.quick:
                for dtype in spec.dtypes:
                    yield pytest.param(name, case, dtype, id=f"{name}-{case.name}-{dtype}")


def test_every_baseline_is_a_conformance_kernel():
    assert baselines.BASELINES, "no baselines registered"
    unknown = sorted(set(baselines.BASELINES) - set(SPECS))
    assert not unknown, f"baselines for kernels the suite does not have: {unknown}"


@pytest.mark.parametrize("name, case, dtype", list(_params()))
def test_baseline_matches_reference(name, case, dtype, monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("torch.compile must not run in these tests")
    monkeypatch.setattr(torch, "compile", no_compile)

    spec = SPECS[name]
    inputs = spec.make_inputs(case, DTYPES[dtype], "cpu", torch.Generator().manual_seed(0))
    pristine = _clone(inputs)
    ref = spec.reference(_clone(inputs), case)

    out = baselines.BASELINES[name](inputs, case)()

    assert set(out) == set(spec.outputs), f"outputs {sorted(out)} != spec outputs {sorted(spec.outputs)}"
    failures = []
    for output in spec.outputs:
        ok, stats = compare(out[output], ref[output], spec.tolerance_for(output, dtype))
        if not ok:
            failures.append(f"{output}: {stats.get('reason', 'mismatch')} (max_abs {stats.get('max_abs')})")
    assert not failures, "; ".join(failures)
    for key, before in pristine.items():
        if isinstance(before, torch.Tensor):
            assert _same_bits(inputs[key], before), f"the baseline modified input '{key}'"


def test_fp8_dequant_fallback_matches_scaled_path():
    """The fallback taken where torch._scaled_mm is missing agrees with the reference too."""
    spec = SPECS["gemm_fp8_w8a8"]
    case = next(c for c in spec.cases if c.quick)
    inputs = spec.make_inputs(case, torch.bfloat16, "cpu", torch.Generator().manual_seed(0))
    ref = spec.reference(_clone(inputs), case)["y"]
    y = baselines.fp8_dequant_mm(inputs["x"], inputs["sx"], inputs["w"], inputs["sw"], torch.bfloat16)
    ok, stats = compare(y, ref, spec.tolerance_for("y", "bf16"))
    assert ok, stats.get("reason")
