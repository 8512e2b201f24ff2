"""The library tier: FLA and Liger called through their public APIs on cpu_interp, through the runner;
a library that does not import yields `skipped` records and tables that say so; a user's script
runs FLA unchanged under TRITON_DEFAULT_BACKEND=cpu_interp or `sdk.activate`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sdk.conformance.library import LIBRARIES, library_of, no_library_kernel, poisoned_allocations
from sdk.conformance.results import Record, load_results
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register, registered
from sdk.conformance.table import model_verdicts, render

ROOT = Path(__file__).resolve().parent.parent
GROUPS = "lib_fla_gdn,lib_liger"


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAY0_KERNELS", "DAY0_BACKENDS", "TRITON_DEFAULT_BACKEND")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _conformance(tmp_path: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sdk.cli", "conformance", "--backend", "cpu_interp",
                           "--timeout", "600", *argv], cwd=tmp_path, env=env or _env(),
                          capture_output=True, text=True, timeout=1800)


# ------------------------------------------------------------------------------- the suite
def test_library_specs_are_registered_lazily():
    suite = registered()
    lib = {n: s for n, s in suite.items() if s.tier == "library"}
    assert {s.library for s in lib.values()} >= {"fla-core", "liger-kernel"}
    assert {s.group for s in lib.values()} >= {"lib_fla_gdn", "lib_liger"}
    quick = sum(sum(c.quick for c in s.cases) * len(s.dtypes) for s in lib.values()
                if s.library in ("fla-core", "liger-kernel"))
    assert quick >= 30
    for s in lib.values():
        assert library_of(s).dist == s.library and s.description and all(c.source for c in s.cases)
    # importing the suite imports no library: a worker selects its backend first
    code = ("import sys; from sdk.conformance.spec import registered; registered(); "
            "print(sorted(m for m in ('fla', 'liger_kernel', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


def test_a_library_spec_names_its_distribution():
    base = dict(group="g", models=(), cases=(Case("c", {}),), dtypes=("fp32",),
                make_inputs=lambda *a: {}, run=lambda *a: None, reference=lambda *a: {}, outputs=(),
                tolerance={"fp32": Tolerance()})
    with pytest.raises(ValueError, match="names its distribution"):
        register(KernelSpec(name="lib_nameless", tier="library", **base))
    with pytest.raises(ValueError, match="names its distribution"):
        register(KernelSpec(name="kernel_with_lib", library="fla-core", **base))


def test_output_tolerance_per_dtype():
    spec = registered()["lib_fla_chunk_gdn"]
    assert spec.tolerance_for("dg", "bf16").rmse == 2e-2
    assert spec.tolerance_for("dg", "fp32").rmse == spec.tolerance["fp32"].rmse
    assert spec.tolerance_for("o", "bf16").rmse == 8e-3


def test_library_allocations_are_poisoned_and_restored():
    with poisoned_allocations():
        assert torch.isnan(torch.empty(4)).all() and torch.isnan(torch.empty_like(torch.ones(3))).all()
        assert torch.isnan(torch.empty_strided((2, 3), (1, 2))).all()
        assert torch.isnan(torch.ones(2, dtype=torch.float16).new_empty(5)).all()
        assert (torch.empty(2, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
        assert torch.empty(3, dtype=torch.bool).all()
        assert torch.equal(torch.zeros(3), torch.tensor([0.0, 0.0, 0.0]))  # what writes is left alone
        # libraries read deterministic mode as a request for other code paths: it stays as it was
        assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()


def test_only_the_library_call_runs_with_poisoned_allocations():
    """A library-tier spec's run (the library call) runs under the poisoning dispatch mode; the
    inputs and the reference, which the runner runs around it, do not pay for it."""
    from unittest import mock

    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    import sdk.conformance.spec as spec_mod
    from sdk.conformance.check import run_case
    from sdk.conformance.library import library_kernel
    seen = {}

    def poisoning(phase):
        seen[phase] = any(type(m).__name__ == "_PoisonAllocations" for m in _get_current_dispatch_mode_stack())

    def make(case, dtype, device, gen):
        poisoning("inputs")
        return {"x": torch.randn(4, generator=gen), "y": torch.empty(4)}

    def run(x, case):
        poisoning("run")
        assert torch.empty(16).isnan().all()
        x["y"].copy_(x["x"])

    def reference(x, case):
        poisoning("reference")
        return {"y": x["x"].clone()}
    with mock.patch.dict(spec_mod._REGISTRY):
        spec = library_kernel(LIBRARIES["fla-core"], name="lib_probe_poison", group="g", models=("m",),
                              cases=(Case("c", {}),), dtypes=("fp32",), make_inputs=make, run=run,
                              reference=reference, outputs=("y",), tolerance={"fp32": Tolerance(exact=True)})
        verdict = run_case(spec, spec.cases[0], "fp32", "cpu")
    assert verdict.status == "pass"
    assert seen == {"inputs": False, "run": True, "reference": False}


def test_a_case_where_no_library_kernel_ran_proves_nothing():
    from sdk.launches import KernelRecord, Recorder
    fla = LIBRARIES["fla-core"]
    rec = Recorder()
    rec.by_name["k"] = KernelRecord("triton_poi_fused_add_0", "inductor", status="ran", launches=1)
    assert "no fla-core Triton kernel ran" in no_library_kernel(fla, rec) and "inductor" in \
        no_library_kernel(fla, rec)
    rec.by_name["l2"] = KernelRecord("l2norm_fwd_kernel", "fla", status="ran", launches=1)
    assert no_library_kernel(fla, rec) == ""


# ------------------------------------------------------------------------ through the runner
HIDE = """\
import sys
# as if neither library were installed: `import fla` / `import liger_kernel` raise ImportError
sys.modules["fla"] = None
sys.modules["liger_kernel"] = None
"""


def test_a_library_that_does_not_import_is_skipped(tmp_path):
    (tmp_path / "hide_libs.py").write_text(HIDE)
    out = tmp_path / "r.jsonl"
    proc = _conformance(tmp_path, "--kernels", "gdn_l2norm,lib_fla_l2norm,lib_fla_recurrent_gdn,lib_liger_swiglu",
                        "--out", str(out), "--junit", str(tmp_path / "r.xml"),
                        env=_env(DAY0_KERNELS="hide_libs"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]  # skipped is no failure
    rs = load_results(out)
    by = {}
    for r in rs.records:
        by.setdefault(r.kernel, set()).add(r.status)
    assert by == {"gdn_l2norm": {"pass"}, "lib_fla_l2norm": {"skipped"},
                  "lib_fla_recurrent_gdn": {"skipped"}, "lib_liger_swiglu": {"skipped"}}
    for r in rs.records:
        if r.kernel.startswith("lib_fla"):
            assert r.tier == "library" and r.library == "fla-core" and r.kernels == []
            assert r.detail.startswith("not installed: pip install fla-core==0.6.0")
        elif r.kernel.startswith("lib_liger"):
            assert r.detail.startswith("not installed: pip install liger-kernel==0.8.5")
        else:
            assert r.tier == "kernel" and r.library == ""
    # the table: Qwen3-Next has a passing kernel, but lacks FLA's evidence, so it does not "run"
    text = proc.stdout
    assert "qwen3_next: runs with gaps" in text
    assert "skipped (not installed: fla-core): lib_fla_l2norm, lib_fla_recurrent_gdn" in text
    assert "llama3_1: not tested" in text and "skipped (not installed: liger-kernel): lib_liger_swiglu" in text
    skipped = sum(r.status == "skipped" for r in rs.records)
    assert skipped == 8 and f"{skipped} skipped" in text
    assert (tmp_path / "r.xml").read_text().count("<skipped") == skipped
    # the report reads the same file
    from sdk.report import build_report, load_inputs, model_needs
    from sdk.report.markdown import render as md_render
    inputs = load_inputs([out])
    rep = build_report(inputs, model_needs(inputs.columns[0].records))
    q = next(m for m in rep.models if m.name == "qwen3_next")
    v = next(iter(q.verdicts.values()))
    assert v.verdict == "runs with gaps"
    assert v.skipped == {"lib_fla_l2norm": "fla-core", "lib_fla_recurrent_gdn": "fla-core"}
    cells = {g.group: next(iter(g.cells.values())).text() for g in q.groups}
    assert cells["lib_fla_gdn"] == "skipped (not installed: fla-core)"
    md = md_render(rep)
    assert "skipped (not installed: fla-core): lib_fla_l2norm, lib_fla_recurrent_gdn" in md
    assert "- fla-core: not installed: pip install fla-core==0.6.0" in md
    assert not any(e.name.startswith("lib_") for e in rep.unlock[rep.columns[0].key])


def _rec(kernel: str, status: str, library: str = "", tier: str = "kernel") -> Record:
    return Record(kernel=kernel, group="g", models=["m"], case="c", dtype="bf16", status=status,
                  tier=tier, library=library)


def test_skipped_library_items_keep_a_model_from_running():
    recs = [_rec("k1", "pass"), _rec("lib_a", "skipped", "fla-core", "library"),
            _rec("lib_b", "pass", "liger-kernel 0.8.5", "library")]
    v = model_verdicts(recs, {"m": ["k1", "lib_a", "lib_b"], "only_lib": ["lib_a"], "ok": ["k1", "lib_b"]})
    assert v["m"]["verdict"] == "runs with gaps" and v["m"]["skipped"] == {"lib_a": "fla-core"}
    assert v["m"]["untested"] == [] and v["m"]["groups"] == {"g": [2, 2]}
    assert v["only_lib"]["verdict"] == "not tested" and v["ok"]["verdict"] == "runs"
    text = render(recs, {"m": ["k1", "lib_a", "lib_b"]})
    assert "m: runs with gaps" in text and "skipped (not installed: fla-core): lib_a" in text
    from sdk.report.inputs import ModelNeeds
    from sdk.report.model import verdict_for
    rv = verdict_for(ModelNeeds("m", ("k1", "lib_a")), {"k1": [recs[0]], "lib_a": [recs[1]]})
    assert rv.verdict == "runs with gaps" and rv.skipped == {"lib_a": "fla-core"} and not rv.untested


def test_records_without_tier_read_as_kernel_tier():
    old = {"type": "record", "kernel": "rmsnorm", "case": "c", "dtype": "bf16", "status": "pass"}
    r = Record.from_dict(old)
    assert (r.tier, r.library, r.kernels) == ("kernel", "", [])
    skipped = Record.from_dict({**old, "status": "skipped", "tier": "library", "library": "fla-core"})
    assert not skipped.passed and json.loads(skipped.to_json())["status"] == "skipped"


def test_manifests_name_library_kernels_with_their_distribution(tmp_path):
    from sdk.conformance.manifests import check_libraries, load_manifests, validate_against
    suite = registered()
    manifests = load_manifests()
    assert validate_against(suite, manifests) == {} and check_libraries(suite, manifests) == {}
    assert manifests["qwen3_next"].libraries["lib_fla_chunk_gdn"] == "fla-core"
    assert manifests["llama3_1"].libraries["lib_liger_rms_norm"] == "liger-kernel"
    assert all(manifests[m].why.get(k) for m in manifests for k in manifests[m].libraries)
    (tmp_path / "toy.yaml").write_text(
        "name: toy\ndisplay_name: Toy\nfamily: dense\nhf_config: {source: test, facts: {h: 1}}\n"
        "kernels:\n  - lib_fla_l2norm\n  - {name: rmsnorm, library: liger-kernel}\n")
    problems = check_libraries(suite, load_manifests(tmp_path))["toy"]
    assert any("lib_fla_l2norm" in p and "calls 'fla-core'" in p for p in problems)
    assert any("rmsnorm" in p and "suite's own" in p for p in problems)


def test_gdn_reference_segments_match_one_autograd_pass():
    """The delta-rule reference keeps only each segment's first state for the backward
    (checkpointed): its outputs and gradients equal one plain autograd pass over whole sequences."""
    from unittest import mock

    from sdk.conformance.library import fla
    case = Case("v", {"B": 1, "T": 23, "H": 1, "HV": 2, "K": 8, "V": 4, "cu_seqlens": [0, 9, 23]})
    x = fla._gdn_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(7))
    with mock.patch.object(fla, "SEGMENT", 4):
        split = fla._gdn_reference(x, case)
    with mock.patch.object(fla, "SEGMENT", 10 ** 6):
        whole = fla._gdn_reference(x, case)
    assert set(split) == {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"}
    for name, t in whole.items():
        assert t.abs().max() > 0, name
        torch.testing.assert_close(split[name], t, rtol=1e-12, atol=1e-12, msg=name)


# ------------------------------------------------------------------------ a user's own script
