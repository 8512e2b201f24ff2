"""The coverage report over synthetic results files written through the runner's record type."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from sdk.cli import main
from sdk.conformance.results import Header, Record
from sdk.conformance.spec import registered
from sdk.errors import ConfigError
from sdk.report import ModelNeeds, build_report, load_inputs, load_sim, model_needs
from sdk.report.markdown import render
from sdk.report.model import GAPS, NO, RUNS, SUITE_GAPS, UNTESTED, verdict_for
from test_report_data import op, seed_files, suite_items, write

SEED_GROUPS = ["RoPE/mRoPE", "Mamba conv", "FLA GDN", "MoE", "sampling", "norms", "attention", "activation"]


def report_of(paths, sims=()):
    inputs = load_inputs(paths)
    return build_report(inputs, model_needs(r for c in inputs.columns for r in c.records), sims)


# ------------------------------------------------------------------------- the seed table
def test_seed_table_shape_for_qwen3_5(tmp_path):
    rep = report_of(seed_files(tmp_path))
    keys = [c.key for c in rep.columns]
    assert keys == ["cpu_interp/host_cpu", "nvidia_ref/sm_89/nvidia_l4/compile",
                    "nvidia_ref/sm_121/nvidia_gb10_spark/compile"]
    assert [c.verb for c in rep.columns] == ["passed", "compiled", "compiled"]
    q = next(m for m in rep.models if m.name == "qwen3_5")
    # expected groups and counts, independently from the suite's specs
    from sdk.conformance.manifests import load_manifests
    specs = [registered()[k] for k in load_manifests()["qwen3_5"].kernels if k in registered()]
    labels = [g.label for g in q.groups]
    assert [x for x in labels if x in SEED_GROUPS] == SEED_GROUPS  # the seed's rows, in its order
    assert len(labels) == len({s.group for s in specs})  # plus any group the suite gained since
    kernels_per_group = Counter(s.group for s in specs)
    items_per_group = Counter()
    for s in specs:
        items_per_group[s.group] += sum(c.quick for c in s.cases) * len(s.dtypes)
    solve = registered()["gdn_solve_tril"]
    solve_bf16 = sum(c.quick for c in solve.cases)
    for g in q.groups:
        k, n = kernels_per_group[g.group], items_per_group[g.group]
        assert g.cells["cpu_interp/host_cpu"].text() == f"{k}/{k} ({n}/{n})"
        assert g.cells["nvidia_ref/sm_89/nvidia_l4/compile"].text() == f"{k}/{k} ({n}/{n})"
        spark = g.cells["nvidia_ref/sm_121/nvidia_gb10_spark/compile"].text()
        if g.group == "fla_gdn":
            assert spark == f"{k - 1}/{k} ({n - solve_bf16}/{n})"
            assert g.same is False and g.differs == ["gdn_solve_tril"]
        else:
            assert spark == f"{k}/{k} ({n}/{n})" and g.same is True
    # the manifest lists families the suite does not cover, so "passes, suite incomplete" at best
    from sdk.conformance.manifests import load_manifests
    missing = [m.family for m in load_manifests()["qwen3_5"].missing]
    assert [q.verdicts[k].verdict for k in keys] == ([RUNS, RUNS, GAPS] if not missing else [SUITE_GAPS] * 2 + [GAPS])
    assert [q.verdicts[k].partial for k in keys] == [[], [], ["gdn_solve_tril"]]
    assert all(q.verdicts[k].missing == missing and not q.verdicts[k].blocking for k in keys)
    md = render(rep)
    k, n = kernels_per_group["fla_gdn"], items_per_group["fla_gdn"]
    assert (f"| FLA GDN | {k}/{k} ({n}/{n}) | {k}/{k} ({n}/{n}) | {k - 1}/{k} ({n - solve_bf16}/{n}) "
            f"| different (gdn_solve_tril) |") in md
    assert "nvidia_l4 (nvidia_ref sm_89, compile-only): compiled" in md
    assert "| RoPE/mRoPE |" in md and "| same |" in md
    # a model that needs no GDN kernel is the same on every device
    llama = next(m for m in rep.models if m.name == "llama3_1")
    assert all(g.same for g in llama.groups)


# ------------------------------------------------------------------------------- verdicts
def _rec(kernel, status, case="c", dtype="fp32"):
    return Record(kernel=kernel, group="g", models=["m"], case=case, dtype=dtype, status=status)


def test_verdict_definitions():
    needs = ModelNeeds("m", ("a", "b"))
    full = {"a": [_rec("a", "pass")], "b": [_rec("b", "compiled")]}
    assert verdict_for(needs, full).verdict == RUNS
    partial = {"a": [_rec("a", "pass"), _rec("a", "fail", dtype="bf16")], "b": [_rec("b", "pass")]}
    v = verdict_for(needs, partial)
    assert (v.verdict, v.partial) == (GAPS, ["a"])
    blocked = {"a": [_rec("a", "unsupported"), _rec("a", "crash", dtype="bf16")], "b": [_rec("b", "pass")]}
    v = verdict_for(needs, blocked)
    assert (v.verdict, v.blocking) == (NO, ["a"])
    v = verdict_for(needs, {"a": [_rec("a", "pass")]})
    assert (v.verdict, v.untested) == (GAPS, ["b"])
    assert verdict_for(needs, {}).verdict == UNTESTED
    v = verdict_for(ModelNeeds("m", ("a", "b"), missing=("MLA",)), full)
    assert (v.verdict, v.missing) == (SUITE_GAPS, ["MLA"])


# ----------------------------------------------------------------------------- unlock list
DOT = op("tt.dot", "bf16 x bf16 -> f32", "moe.py:300", "acc += tl.dot(a, b)")
REDUCE = op("tt.reduce", "f32 -> f32")


def npu_outcome(kernel, case, dtype, arch):
    if kernel in ("moe_fused_gemm", "attn_paged_decode") and dtype == "bf16":
        return ("unsupported", "missing lowering for tt.dot(bf16 x bf16 -> f32)", [DOT])
    if kernel == "gdn_solve_tril":
        ops = [REDUCE, DOT] if dtype == "bf16" else [REDUCE]
        return ("unsupported", "missing lowering", ops)
    if kernel == "causal_conv1d_update" and dtype == "bf16":
        return ("error", "KernelFault: out-of-bounds load of conv_state at offset 4096")
    return ("pass",)


def test_unlock_list_ranks_by_models_completed(tmp_path):
    path = write(tmp_path / "npu.jsonl", "my_npu", "generic_npu", npu_outcome)
    rep = report_of([path])
    entries = rep.unlock["my_npu/generic_npu"]
    first = entries[0]
    assert (first.kind, first.name) == ("op", "tt.dot(bf16 x bf16 -> f32)")
    # qwen3_5 / qwen3_next also need gdn_solve_tril (tt.reduce) and causal_conv1d_update, and so do
    # granite4_h and jamba (Mamba conv + MoE) (llama3_1's attention is vLLM's unified kernel, which
    # passes here: it needs no fix)
    assert first.unlocks == ["deepseek_v3", "glm4_5", "llama4", "minimax", "mixtral"]
    assert first.line().startswith("tt.dot(bf16 x bf16 -> f32): unlocks deepseek_v3, glm4_5, llama4, minimax, "
                                   "mixtral (5 models); blocks 3 kernels")
    assert first.kernels == ["attn_paged_decode", "gdn_solve_tril", "moe_fused_gemm"]
    by_name = {e.name: e for e in entries}
    conv = by_name["causal_conv1d_update"]
    assert conv.kind == "kernel" and conv.unlocks == ["falcon_h1", "mamba2", "nemotron_h"]
    assert "out-of-bounds" in conv.detail
    assert {"granite4_h", "jamba"} <= set(conv.affects) - set(conv.unlocks)  # they need tt.dot as well
    red = by_name["tt.reduce(f32 -> f32)"]
    assert red.unlocks == [] and red.kernels == ["gdn_solve_tril"]
    assert set(red.affects) == {"qwen3_5", "qwen3_next"}
    assert [e.name for e in entries] == ["tt.dot(bf16 x bf16 -> f32)", "causal_conv1d_update",
                                         "tt.reduce(f32 -> f32)"]
    verdicts = {m.name: m.verdicts["my_npu/generic_npu"].verdict for m in rep.models}
    assert verdicts["qwen3_5"] == NO  # gdn_solve_tril passes no item
    assert verdicts["llama3_1"] == RUNS and verdicts["mamba2"] == GAPS
    md = render(rep)
    assert ("1. missing op `tt.dot(bf16 x bf16 -> f32)`: unlocks deepseek_v3, glm4_5, llama4, minimax, mixtral "
            "(5 models)") in md
    # per-device counts and failure text
    dev = rep.devices[0]
    assert dev.counts["moe"]["unsupported"] == sum(
        1 for k, g, m, c, d in suite_items() if k == "moe_fused_gemm" and d == "bf16")
    assert any(f.status == "error" and "out-of-bounds" in f.detail for f in dev.failures)
    assert "**error**: KernelFault: out-of-bounds load" in md


def test_failing_kernels_say_what_they_mirror(tmp_path):
    """The device details name, for each kernel with a failing item, the upstream kernel it mirrors
    (its spec's provenance), in markdown, HTML and JSON; kernels that pass are not listed."""
    from sdk.report.html import render as render_html
    path = write(tmp_path / "npu.jsonl", "my_npu", "generic_npu", npu_outcome)
    rep = report_of([path])
    dev = rep.devices[0]
    failing = {f.kernel for f in dev.failures}
    assert failing == {"moe_fused_gemm", "attn_paged_decode", "gdn_solve_tril", "causal_conv1d_update"}
    specs = registered()
    assert dev.provenance == {k: " ".join(specs[k].upstream.split()) for k in sorted(failing)}
    md = render(rep)
    details = md[md.index("## Device details"):md.index("## What to implement next")]
    assert "What the failing kernels mirror:" in details
    assert "- `moe_fused_gemm`: vllm: model_executor/layers/fused_moe/fused_moe.py fused_moe_kernel" in details
    assert "- `gdn_solve_tril`: vllm: third_party/flash_linear_attention/ops/solve_tril.py solve_tril" in details
    assert "- `rmsnorm`:" not in details  # passed everywhere: nothing to trace
    html = render_html(rep)
    assert "third_party/flash_linear_attention/ops/solve_tril.py solve_tril" in html
    data = rep.to_dict()
    assert data["devices"][0]["provenance"]["causal_conv1d_update"].startswith(
        "vllm: model_executor/layers/mamba/ops/causal_conv1d.py causal_conv1d_update")
    (tmp_path / "seed").mkdir()
    clean = report_of(seed_files(tmp_path / "seed"))  # nothing failed on the CPU: no provenance section
    assert clean.devices[0].failures == [] and clean.devices[0].provenance == {}


def test_simulator_columns(tmp_path):
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"device": "generic_npu", "kernels": {
        "rmsnorm": {"time_s": 1.5e-5, "fits": True, "why": ""},
        "moe_fused_gemm": {"time_s": None, "fits": False, "why": "tile needs 180 KiB of 128 KiB"}}}))
    path = write(tmp_path / "npu.jsonl", "my_npu", "generic_npu", npu_outcome)
    rep = report_of([path], [load_sim(sim)])
    md = render(rep)
    assert "generic_npu: predicted time" in md and "generic_npu: fits" in md
    n = sum(1 for k, *_ in suite_items() if k == "rmsnorm")
    assert f"| rmsnorm | norms | {n}/{n} | 15 us | yes |" in md
    assert "no (tile needs 180 KiB of 128 KiB)" in md
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"device": "x", "kernels": {"rmsnorm": {"time_s": "fast"}}}))
    with pytest.raises(ConfigError, match="time_s"):
        load_sim(bad)


# ------------------------------------------------------------------------------- the CLI
def run_cli(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_markdown_json_and_force(tmp_path, capsys):
    paths = [str(p) for p in seed_files(tmp_path)]
    rc, out, err = run_cli(["report", *paths], capsys)
    assert rc == 0 and out.startswith("# Day-0 coverage report") and "### qwen3_5" in out
    target = tmp_path / "report.json"
    rc, out, err = run_cli(["report", *paths, "--format", "json", "--out", str(target)], capsys)
    assert rc == 0 and out == ""
    data = json.loads(target.read_text())
    assert data["format"] == "day0-report/1" and len(data["columns"]) == 3
    assert {m["name"] for m in data["models"]} >= {"qwen3_5", "llama3_1"}
    rc, out, err = run_cli(["report", *paths, "--out", str(target)], capsys)
    assert rc == 2 and "exists; pass --force" in err and len(err.strip().splitlines()) == 1
    assert json.loads(target.read_text())["format"] == "day0-report/1"  # untouched
    rc, out, err = run_cli(["report", *paths, "--out", str(target), "--force"], capsys)
    assert rc == 0 and target.read_text().startswith("# Day-0 coverage report")


def _one_line_error(rc, err):
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("day0: error:"), err
    return lines[0]


def test_cli_bad_inputs(tmp_path, capsys):
    good = seed_files(tmp_path)[0]
    rc, out, err = run_cli(["report", str(tmp_path / "missing.jsonl")], capsys)
    assert "no such results file" in _one_line_error(rc, err)
    cut = tmp_path / "cut.jsonl"
    cut.write_text(good.read_text()[:150])  # the header itself is cut short
    rc, out, err = run_cli(["report", str(cut)], capsys)
    assert "truncated header" in _one_line_error(rc, err)
    broken = tmp_path / "broken.jsonl"
    lines = good.read_text().splitlines()
    broken.write_text("\n".join([lines[0], lines[1][:40], *lines[2:]]) + "\n")
    rc, out, err = run_cli(["report", str(broken)], capsys)
    assert "broken.jsonl:2: malformed" in _one_line_error(rc, err)
    other = write(tmp_path / "other.jsonl", "my_npu", "generic_npu", npu_outcome, suite="0123456789abcdef")
    rc, out, err = run_cli(["report", str(good), str(other)], capsys)
    line = _one_line_error(rc, err)
    assert "suite version 0123456789abcdef" in line and "not comparable" in line
    rc, out, err = run_cli(["report", str(good), "--sim", str(tmp_path / "nosim.json")], capsys)
    assert "no such simulator file" in _one_line_error(rc, err)


def test_heatmap_png(tmp_path, capsys):
    from PIL import Image
    paths = [str(p) for p in seed_files(tmp_path)]
    paths.append(str(write(tmp_path / "npu.jsonl", "my_npu", "generic_npu", npu_outcome)))
    png = tmp_path / "coverage.png"
    rc, out, err = run_cli(["report", *paths, "--plot", str(png), "--out", str(tmp_path / "r.md")], capsys)
    assert rc == 0 and png.stat().st_size > 10_000
    img = Image.open(png).convert("RGB")
    assert img.width >= 500 and img.height >= 300
    colours = img.getcolors(maxcolors=1 << 20)
    assert len(colours) > 100
    # verdict colours: green (every item passes, only the suite's gaps), amber (items fail), red
    big = {c for n, c in colours if n > 2000}
    assert (166, 217, 106) in big and (253, 174, 97) in big and (215, 48, 39) in big


# ---------------------------------------------------------------------------------- JUnit
def test_junit_is_readable_by_standard_tools(tmp_path):
    from sdk.conformance.junit import write_junit
    path = write(tmp_path / "npu.jsonl", "my_npu", "generic_npu", npu_outcome)
    rs = load_inputs([path])
    records = rs.columns[0].records
    header = Header(suite_version=rs.suite_version, backend="my_npu", device="generic_npu",
                    date="2026-01-01T00:00:00+00:00", host="ci")
    xml_path = tmp_path / "junit.xml"
    write_junit(xml_path, records, header)
    root = ET.parse(xml_path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert {s.get("name") for s in suites} == {f"day0.{r.group}" for r in records}
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(records) == int(root.get("tests"))
    for s in suites:
        tcs = s.findall("testcase")
        assert int(s.get("tests")) == len(tcs)
        assert int(s.get("failures")) == sum(tc.find("failure") is not None for tc in tcs)
        assert int(s.get("errors")) == sum(tc.find("error") is not None for tc in tcs)
        for tc in tcs:
            assert tc.get("classname") and tc.get("name") and float(tc.get("time")) >= 0
    statuses = Counter(r.status for r in records)
    assert sum(int(s.get("failures")) for s in suites) == statuses["unsupported"] + statuses["fail"]
    assert sum(int(s.get("errors")) for s in suites) == statuses["error"]
    failure = next(tc.find("failure") for tc in cases if tc.find("failure") is not None)
    assert failure.get("type") == "unsupported" and "tt." in (failure.text or "")
