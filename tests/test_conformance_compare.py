"""The streamed comparison judges exactly as the whole-tensor fp64 comparison: same verdict, same
max_abs / max_rel / rmse, same element counts and reason strings, whatever the piece size, the
layout (non-contiguous outputs and references) and where NaN and inf sit."""
from __future__ import annotations

import json
import math

import pytest
import torch

from sdk.conformance import check
from sdk.conformance.check import compare
from sdk.conformance.meter import PhaseMeter
from sdk.conformance.spec import Tolerance


def whole(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> tuple[bool, dict]:
    """The straightforward judgement: whole tensors cast to fp64 at once."""
    stats: dict = {}
    if out.shape != ref.shape:
        return False, {"reason": f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"}
    if tol.exact:
        same = torch.equal(out, ref.to(out.dtype))
        if not same:
            diff = torch.nan_to_num((out.double() - ref.double()).abs(), nan=math.inf, posinf=math.inf)
            diff[out == ref.to(out.dtype)] = 0
            stats["max_abs"] = float(diff.max()) if diff.numel() else 0.0
            stats["reason"] = f"{int((diff != 0).sum())} element(s) differ from a bit-exact reference"
        return same, stats
    o, r = out.double(), ref.double()
    unwritten = ~torch.isfinite(o) & torch.isfinite(r)
    if bool(unwritten.any()):
        return False, {"reason": f"{int(unwritten.sum())} non-finite element(s) (unwritten or "
                                 "overflowed)", "max_abs": math.inf}
    finite = torch.isfinite(r)
    diff = torch.where(finite, (o - r).abs(), torch.zeros_like(o))
    stats["max_abs"] = float(diff.max()) if diff.numel() else 0.0
    rel = diff / r.abs().clamp_min(1e-12)
    stats["max_rel"] = float(rel.max()) if rel.numel() else 0.0
    if tol.rmse is not None:
        denom = float(torch.linalg.vector_norm(r[finite])) or 1.0
        stats["rmse"] = float(torch.linalg.vector_norm((o - r)[finite])) / denom
        ok = stats["rmse"] <= tol.rmse
        if not ok:
            stats["reason"] = f"relative RMSE {stats['rmse']:.3g} > {tol.rmse:g}"
        return ok, stats
    over = diff > tol.atol + tol.rtol * r.abs()
    if bool(over.any()):
        stats["reason"] = (f"{int(over.sum())} of {over.numel()} element(s) outside atol={tol.atol:g} "
                           f"rtol={tol.rtol:g}")
        return False, stats
    return True, stats


def same_stats(a: dict, b: dict) -> None:
    assert a.keys() == b.keys(), (a, b)
    for k in a:
        if k == "rmse":  # a sum of squares in another order: equal to rounding
            assert a[k] == pytest.approx(b[k], rel=1e-12, nan_ok=True), (a, b)
        elif isinstance(a[k], float):
            assert (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k], (k, a, b)
        else:
            assert a[k] == b[k], (k, a, b)


def _case(seed: int, shape, dtype, ref_dtype, *, err: float, nan_out=0, inf_out=0, nan_ref=0, inf_ref=0,
          layout: str = "contiguous"):
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(shape, generator=gen, dtype=torch.float64)
    out = (ref + err * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
    ref = ref.to(ref_dtype)
    n = ref.numel()
    for t, count, value in ((out, nan_out, math.nan), (out, inf_out, math.inf),
                            (ref, nan_ref, math.nan), (ref, inf_ref, -math.inf)):
        if count:
            t.view(-1)[torch.randperm(n, generator=gen)[:count]] = value
    if layout == "transposed":  # the same values seen through a non-contiguous view
        out, ref = out.transpose(0, 1).contiguous().transpose(0, 1), ref.transpose(0, 1)
    elif layout == "strided":
        out = torch.stack([out, torch.zeros_like(out)], dim=-1)[..., 0]
    return out, ref


TOLS = {"tol": Tolerance(atol=1e-3, rtol=1e-3), "rmse": Tolerance(rmse=5e-3), "exact": Tolerance(exact=True)}
PLACEMENTS = {
    "clean": {},
    "nan_out": {"nan_out": 3},
    "inf_out": {"inf_out": 2},
    "nan_ref": {"nan_ref": 4},
    "inf_ref": {"inf_ref": 5},
    "both": {"nan_out": 2, "inf_out": 1, "nan_ref": 3, "inf_ref": 2},
}


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("tol", list(TOLS))
@pytest.mark.parametrize("err", [0.0, 2e-4, 3e-2])
def test_streamed_compare_equals_whole_tensor_compare(monkeypatch, layout, placement, tol, err):
    monkeypatch.setattr(check, "COMPARE_PIECE", 97)  # many pieces, none aligned to a row
    seed = sum(map(ord, f"{layout}/{placement}/{tol}/{err}"))
    for dtype, ref_dtype in ((torch.float32, torch.float64), (torch.bfloat16, torch.float32)):
        out, ref = _case(seed, (37, 29), dtype, ref_dtype, err=err, layout=layout, **PLACEMENTS[placement])
        want_ok, want = whole(out, ref, TOLS[tol])
        got_ok, got = compare(out, ref, TOLS[tol])
        assert got_ok == want_ok
        same_stats(got, want)


def test_streamed_compare_edge_shapes(monkeypatch):
    monkeypatch.setattr(check, "COMPARE_PIECE", 5)
    gen = torch.Generator().manual_seed(7)
    big_rows = torch.randn(3, 11, 4, generator=gen)  # a row larger than a piece: pieces within rows
    cases = [
        (torch.tensor(1.5), torch.tensor(1.5001, dtype=torch.float64)),
        (torch.zeros(0, 4), torch.zeros(0, 4)),
        (big_rows.transpose(1, 2), (big_rows + 1e-4).transpose(1, 2).double()),
        (torch.randn(40, generator=gen)[::2], torch.randn(20, generator=gen)),
        (torch.randn(3, 4, generator=gen), torch.randn(4, 3, generator=gen)),  # shapes differ
    ]
    for out, ref in cases:
        for tol in TOLS.values():
            want_ok, want = whole(out, ref, tol)
            got_ok, got = compare(out, ref, tol)
            assert got_ok == want_ok, (out.shape, tol)
            same_stats(got, want)


def test_exact_compare_counts_and_integer_outputs(monkeypatch):
    monkeypatch.setattr(check, "COMPARE_PIECE", 64)
    gen = torch.Generator().manual_seed(11)
    ref = torch.randint(-1000, 1000, (50, 30), generator=gen, dtype=torch.int32)
    out = ref.clone()
    assert compare(out, ref, Tolerance(exact=True)) == (True, {})
    out.view(-1)[torch.randperm(1500, generator=gen)[:17]] += 3
    ok, stats = compare(out, ref, Tolerance(exact=True))
    assert not ok and stats == {"max_abs": 3.0, "reason": "17 element(s) differ from a bit-exact reference"}
    assert (ok, stats) == whole(out, ref, Tolerance(exact=True))


def test_compare_leaves_an_fp64_reference_untouched():
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(64, 33, generator=gen, dtype=torch.float64)
    out = ref + 1e-6
    keep_ref, keep_out = ref.clone(), out.clone()
    compare(out, ref, Tolerance(atol=1e-3, rtol=1e-3))
    compare(out, ref, Tolerance(rmse=1e-3))
    assert torch.equal(ref, keep_ref) and torch.equal(out, keep_out)


def test_phase_meter_times_and_measures_each_phase():
    meter = PhaseMeter()
    with meter("small"):
        sum(range(1000))
    with meter("big"):
        block = torch.ones(64 * 2 ** 20 // 8, dtype=torch.float64)  # 64 MB, touched
        block += 1
        del block
    assert set(meter.seconds) == {"small", "big"} and all(s >= 0 for s in meter.seconds.values())
    if meter.peak_mb:  # Linux: the big phase's peak sees its 64 MB
        assert meter.peak_mb["big"] >= meter.peak_mb["small"] + 48


def test_run_case_reports_every_phase_and_records_carry_them():
    import sdk
    from sdk.conformance.check import run_case
    from sdk.conformance.results import Record
    from sdk.conformance.runner import load_suite
    spec = load_suite()["relu2"]
    with sdk.activate("cpu_interp"):
        v = run_case(spec, spec.cases[0], "fp32", "cpu")
    assert v.status == "pass"
    assert set(v.phase_s) == {"inputs", "snapshot", "poison", "launch", "reference", "compare"}
    assert v.phase_s["launch"] <= v.wall_s + 1e-3
    rec = Record.from_dict({"kernel": "relu2", "case": "c", "dtype": "fp32", "status": "pass",
                            "phase_s": v.phase_s, "phase_peak_mb": v.phase_peak_mb,
                            "peak_rss_mb": max(v.phase_peak_mb.values(), default=None)})
    assert Record.from_dict(json.loads(rec.to_json())).phase_s == v.phase_s
    old = Record.from_dict({"kernel": "relu2", "case": "c", "dtype": "fp32", "status": "pass"})
    assert old.phase_s == {} and old.peak_rss_mb is None  # files written before the fields existed
    with pytest.raises(ValueError, match="phase_s"):
        Record.from_dict({"kernel": "k", "case": "c", "dtype": "fp32", "status": "pass", "phase_s": {"a": "x"}})


def test_exact_compare_counts_only_elements_that_differ_where_infinities_agree():
    gen = torch.Generator().manual_seed(12)
    ref = torch.randn(40, 50, generator=gen, dtype=torch.float64)
    ref[ref < 0.5] = -math.inf  # most of it masked, as a top-k/top-p output is
    out = ref.float()
    flat = out.view(-1)
    finite = torch.isfinite(flat).nonzero().flatten()
    flat[finite[:3]] = -math.inf  # three kept values masked
    ok, stats = compare(out, ref, Tolerance(exact=True))
    assert not ok and stats == {"max_abs": math.inf, "reason": "3 element(s) differ from a bit-exact reference"}
    assert (ok, stats) == whole(out, ref, Tolerance(exact=True))


def test_an_alternative_reference_accepts_either_value_of_an_open_element_and_nothing_else():
    gen = torch.Generator().manual_seed(13)
    ref = torch.randn(30, 20, generator=gen, dtype=torch.float64)
    alt = ref.clone()
    open_ = torch.rand(30, 20, generator=gen) < 0.1
    alt[open_] = -math.inf  # these may be kept or masked
    out = ref.float()
    out[open_ & (torch.rand(30, 20, generator=gen) < 0.5)] = -math.inf
    assert compare(out, check.either(out, ref, alt), Tolerance(exact=True)) == (True, {})
    assert not compare(out, ref, Tolerance(exact=True))[0]  # without the alternative: a failure
    bad = out.clone()
    bad[~open_ & torch.isfinite(ref)] = bad[~open_ & torch.isfinite(ref)] + 1.0  # a settled element wrong
    ok, stats = compare(bad, check.either(bad, ref, alt), Tolerance(exact=True))
    assert not ok and stats["reason"] == f"{int((~open_).sum())} element(s) differ from a bit-exact reference"
    near = ref.float() + 1e-4  # under a tolerance each element is judged against the nearer value
    assert compare(near, check.either(near, ref, alt), Tolerance(atol=1e-3))[0]
    assert check.either(out, ref, None) is ref


@pytest.mark.parametrize("tol", ["tol", "rmse"])
@pytest.mark.parametrize("poison", [math.nan, math.inf])
def test_a_poisoned_element_fails_even_where_the_reference_has_infinities_elsewhere(monkeypatch, tol, poison):
    """An element the kernel never wrote keeps its poison: it must fail wherever its reference is
    finite, also when other reference elements are -inf (masked logits) or NaN."""
    monkeypatch.setattr(check, "COMPARE_PIECE", 61)
    gen = torch.Generator().manual_seed(21)
    ref = torch.randn(24, 40, generator=gen, dtype=torch.float64)
    ref[ref < -1.0] = -math.inf
    ref[0, 0] = math.nan
    out = ref.float()
    assert compare(out, ref, TOLS[tol])[0]
    finite = torch.isfinite(ref.view(-1)).nonzero().flatten()
    out.view(-1)[finite[-5:]] = poison  # the tail of the last row: a masked tail left unwritten
    ok, stats = compare(out, ref, TOLS[tol])
    assert not ok and stats["reason"] == "5 non-finite element(s) (unwritten or overflowed)"
    assert (ok, stats) == whole(out, ref, TOLS[tol])


def test_run_case_fails_an_output_row_the_launch_never_writes():
    """End to end through run_case: the outputs are poisoned before the launch, so a launch that
    skips the last row fails, though the reference holds -inf elsewhere."""
    from sdk.conformance.check import run_case
    from sdk.conformance.spec import Case, KernelSpec

    def make_inputs(case, dtype, device, gen):
        x = torch.randn(case.params["rows"], 33, generator=gen).to(dtype)
        return {"x": x, "out": torch.empty_like(x)}

    def reference(inp, case):
        x = inp["x"].double()
        return {"out": torch.where(x < -1.2, torch.full_like(x, -math.inf), x * 2)}

    def run(inp, case, skip_last=False):
        ref = reference(inp, case)["out"].to(inp["out"].dtype)
        rows = ref.shape[0] - 1 if skip_last else ref.shape[0]
        inp["out"][:rows] = ref[:rows]

    cases = (Case("r9", {"rows": 9}),)
    common = dict(group="test", models=(), cases=cases, dtypes=("fp32",), make_inputs=make_inputs,
                  reference=reference, outputs=("out",), tolerance={"fp32": Tolerance(atol=1e-6, rtol=1e-6)})
    good = KernelSpec(name="masked_rows_ok", run=run, **common)
    bad = KernelSpec(name="masked_rows_tail", run=lambda inp, case: run(inp, case, skip_last=True), **common)
    assert run_case(good, cases[0], "fp32", "cpu").status == "pass"
    v = run_case(bad, cases[0], "fp32", "cpu")
    assert v.status == "fail" and "non-finite" in v.detail
