"""A scaffolded backend runs whole models (the model tier), with and without delegation."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_scaffold import NAME, day0, installed, records  # noqa: E402,F401  (installed: the fixture)


def _tiny_config(root: Path) -> Path:
    from transformers import LlamaConfig
    folder = root / "tinyllama"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(LlamaConfig(vocab_size=1000).to_dict()))
    return path


@pytest.mark.parametrize("model", ["tinyllama", "qwen3_next"])
def test_a_whole_model_runs_through_it_with_delegation(installed, model):
    pytest.importorskip("transformers", reason="transformers not installed")
    config = str(_tiny_config(installed.parent)) if model == "tinyllama" else model  # qwen3_next: shipped
    results = installed.parent / f"model-on-{model}.jsonl"
    out = day0(installed, "model", config, "--backend", NAME, "--out", str(results), "--force", delegate=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = records(results)
    assert {r["case"] for r in recs} == {"prefill", "decode"}
    for r in recs:
        assert r["tier"] == "model" and r["status"] == "pass" and r["backend"] == NAME, r
        assert r["kernels"] and all(k["status"] == "ran" for k in r["kernels"])
        assert r["native"] is not None and r["native"] < 1.0 and r["borrowed_ops"], r
    assert "% native)" in out.stdout
    if model == "qwen3_next":
        # its Gated DeltaNet layers run FLA's kernels, on this backend too; where the torch says it
        # is exporting inside torch.compile (2.11), transformers takes its PyTorch path and the
        # prefill record says why
        from sdk.modeltier.runner import EXPORTING_INSIDE_COMPILE
        from sdk.modeltier.worker import exporting_inside_compile
        prefill = next(r for r in recs if r["case"] == "prefill")
        if exporting_inside_compile():
            assert EXPORTING_INSIDE_COMPILE in prefill["detail"], prefill["detail"]
        else:
            assert any(k["origin"] == "fla" for k in prefill["kernels"]), prefill["kernels"]


def test_a_whole_model_without_delegation_names_the_missing_ops(installed):
    pytest.importorskip("transformers", reason="transformers not installed")
    config = _tiny_config(installed.parent)
    results = installed.parent / "model-off.jsonl"
    out = day0(installed, "model", str(config), "--backend", NAME, "--mode", "prefill", "--out", str(results),
               "--force", delegate=False)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    (rec,) = records(results)
    assert rec["status"] == "unsupported" and "tt.load" in rec["detail"], rec
    needing = [k for k in rec["kernels"] if k["status"] == "unsupported"]
    assert len(needing) >= 3 and all("tt.store" in " ".join(k["missing_ops"]) for k in needing)
