"""A scaffolded package installed (pip, into a folder of its own): its own tests pass, day0 lists
it, and the conformance suite runs through it with and without delegation."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_scaffold import KERNELS, NAME, day0, installed, records, run  # noqa: E402,F401  (installed: the fixture)


def test_generated_package_tests_pass(installed):
    out = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=installed)
    assert out.returncode == 0 and "8 passed" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]


def test_day0_backends_lists_it(installed):
    out = day0(installed, "backends", delegate=False)
    row = next((line for line in out.stdout.splitlines() if line.startswith(NAME + " ")), "")
    # the device model the package ships, by its name (never the path of its YAML file)
    assert out.returncode == 0 and "available" in row and " generic_npu " in row, out.stdout + out.stderr
    assert ".yaml" not in row


def _conformance(installed, delegate: bool):
    """The quick suite's KERNELS through the installed package, delegating or not: (the process,
    its results file)."""
    results = installed.parent / ("on.jsonl" if delegate else "off.jsonl")
    out = day0(installed, "conformance", "--backend", NAME, "--quick", "--kernels", KERNELS,
               "--out", str(results), delegate=delegate)
    return out, results


def test_conformance_without_delegation_lists_missing_ops(installed):
    out, results = _conformance(installed, delegate=False)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    recs = records(results)
    assert {r["kernel"] for r in recs} == set(KERNELS.split(","))
    for r in recs:
        missing = {op["name"] for op in r["unsupported_ops"]}
        assert r["status"] == "unsupported" and {"tt.load", "tt.store", "tt.get_program_id"} <= missing, r
        assert r["detail"].startswith("missing lowering for ")


def test_conformance_with_delegation_passes_through_the_runtime(installed):
    out, results = _conformance(installed, delegate=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = records(results)
    assert len(recs) >= 9 and {r["kernel"] for r in recs} == set(KERNELS.split(","))
    assert "delegated: " in out.stdout and "borrowed rules" in out.stdout  # never silent
    for r in recs:
        assert r["status"] == "pass", r
        assert r["native"] is not None and r["native"] < 1.0 and "tt.load" in r["borrowed_ops"], r
        (stats,) = [s["runtime"] for s in r["launch_stats"]]
        assert stats["launches"] >= 1 and stats["arg_bytes"] >= 8 * stats["launches"], r
        assert stats["allocs"] == stats["frees"] >= 2 and stats["live_allocations"] == 0, r
        # host tensors cross at launches only: inputs in, outputs in and out (never more copies out)
        assert 0 < stats["copies_from_device"] <= stats["copies_to_device"] <= stats["allocs"], r
        assert stats["bytes_to_device"] >= stats["bytes_from_device"] > 0, r
    assert max(s["runtime"]["launches"] for r in recs for s in r["launch_stats"]) > 1  # multi-launch kernel
