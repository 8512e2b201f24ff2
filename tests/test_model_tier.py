"""The model tier: whole models from their configs, end to end through a backend's Triton, vs eager."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers not installed (pip install transformers)")

from transformers import CONFIG_MAPPING  # noqa: E402

from sdk.conformance.results import load_results  # noqa: E402
from sdk.modeltier.runner import plan, text_config  # noqa: E402
from sdk.modeltier.scale import scale  # noqa: E402

HERE = Path(__file__).parent
DAY0 = [sys.executable, "-m", "sdk.cli"]


def _config(model_type: str, **overrides) -> dict:
    cfg = CONFIG_MAPPING[model_type](**overrides).to_dict()
    return cfg


def _write(tmp_path: Path, name: str, cfg: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _day0(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            **(env or {})}
    return subprocess.run(DAY0 + list(args), capture_output=True, text=True, timeout=timeout, env=full,
                          cwd=HERE.parent)


# ----------------------------------------------------------------------------- the scale rule
@pytest.mark.parametrize("model_type", ["llama", "qwen3_next", "deepseek_v3", "gemma3_text", "mamba2",
                                        "nemotron_h", "gpt_oss", "llama4_text", "jamba", "qwen3_5_moe"])
def test_scaling_keeps_what_selects_kernels(model_type):
    mt, full = text_config({"model_type": model_type})
    small, notes = scale(full)
    kept = ["head_dim", "qk_rope_head_dim", "kv_lora_rank", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim", "conv_kernel", "mamba_d_conv", "state_size", "ssm_state_size",
            "mamba_d_state", "chunk_size", "num_experts_per_tok", "hidden_act", "hidden_activation",
            "rms_norm_eps", "rope_parameters", "partial_rotary_factor", "attn_logit_softcapping",
            "final_logit_softcapping", "n_group", "topk_group", "norm_topk_prob", "mlp_hidden_act"]
    for key in kept:
        if key in full and (model_type != "mamba2" or key != "head_dim"):
            assert small[key] == full[key], (key, full[key], small[key])
    n, kv = full.get("num_attention_heads"), full.get("num_key_value_heads")
    if n and kv:
        assert small["num_attention_heads"] // small["num_key_value_heads"] == n // kv  # GQA ratio
    if full.get("linear_num_key_heads"):
        assert (small["linear_num_value_heads"] // small["linear_num_key_heads"]
                == full["linear_num_value_heads"] // full["linear_num_key_heads"])
    for key in ("layer_types", "layers_block_type"):
        if isinstance(full.get(key), list):
            assert set(small[key]) == set(full[key]) and len(small[key]) <= len(full[key])
    experts = next((k for k in ("num_experts", "n_routed_experts", "num_local_experts") if full.get(k)), None)
    if experts and full[experts] > 1:
        assert full["num_experts_per_tok"] < small[experts] <= full[experts]
        if (full.get("n_group") or 1) > 1:
            assert small[experts] % full["n_group"] == 0
    assert small["vocab_size"] <= 512 < full["vocab_size"]
    assert small["hidden_size"] < full["hidden_size"] and notes
    # transformers accepts the scaled config
    CONFIG_MAPPING[mt](**{k: v for k, v in small.items() if k != "model_type"})


def test_multimodal_config_runs_its_text_model():
    mt, _ = text_config({"model_type": "qwen3_5_moe"})
    assert mt.endswith("_text")


# ----------------------------------------------------------------------------- end to end
def test_a_config_no_manifest_knows_runs_end_to_end(tmp_path):
    cfg = _config("qwen3", hidden_size=1024, num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                  intermediate_size=3072, vocab_size=50000, num_hidden_layers=12)
    path = _write(tmp_path, "mystery-qwen3", cfg)
    out = tmp_path / "m.jsonl"
    proc = _day0("model", str(path), "--out", str(out), "-v")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "scale-down rule" in proc.stderr and "num_attention_heads: 16 -> 4" in proc.stderr
    recs = load_results(out).records
    assert {(r.kernel, r.case) for r in recs} == {("mystery-qwen3", "prefill"), ("mystery-qwen3", "decode")}
    for r in recs:
        assert r.tier == "model" and r.status == "pass" and r.rmse is not None and r.rmse < 1e-3, r
        assert len(r.kernels) >= 5 and all(k["origin"] == "inductor" and k["status"] == "ran" for k in r.kernels)
        assert all(k["ops"] and "tt.load" in k["ops"] for k in r.kernels)
    assert "triton_" in proc.stdout  # -v lists the kernels


def test_missing_ops_are_listed_with_every_kernel_that_needs_them(tmp_path):
    llama = _write(tmp_path, "llama", _config("llama", vocab_size=1000))
    out = tmp_path / "u.jsonl"
    proc = _day0("model", str(llama), "--backend", "no_addf", "--mode", "prefill", "--out", str(out),
                 env={"DAY0_BACKENDS": "no_addf=doubles.faulty_backend:NoAddBackend"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rec,) = load_results(out).records
    assert rec.status == "unsupported" and "arith.addf" in rec.detail, rec
    needing = [k for k in rec.kernels if k["status"] == "unsupported"]
    assert len(needing) >= 2 and all(any(m.startswith("arith.addf") for m in k["missing_ops"]) for k in needing)
    # the report shows the model tier beside the kernel tier, and the op unlocks the model end to end
    from sdk.report import build_report
    from sdk.report.inputs import load_inputs, model_needs
    inputs = load_inputs([out])
    report = build_report(inputs, model_needs())
    (column,) = report.columns
    row = next(m for m in report.models if m.name == "llama")
    e2e = row.end_to_end[column.key]
    assert e2e.verdict == "does not run" and "prefill/fp32 unsupported" in e2e.detail
    # the headline's next step: the one op that runs the model end to end
    (head,) = report.headlines
    assert head.path and head.path[0].models == ["llama"] and [o.name for o in head.path[0].ops] == ["arith.addf"]
    entry = next(e for e in report.unlock[column.key] if e.name.startswith("arith.addf"))
    assert "llama (end to end)" in entry.unlocks and set(entry.kernels) == {k["name"] for k in needing}


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"), ("{not json", "not JSON"), ('{"hidden_size": 8}', "no 'model_type'"),
    ('{"model_type": "no_such_arch"}', "not known to the installed transformers"),
    ('[1, 2]', "not an object"),
])
def test_bad_configs_are_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    proc = _day0("model", str(path), "--out", str(tmp_path / "x.jsonl"), timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_plan_refuses_unknown_modes_and_dtypes(tmp_path):
    from sdk.errors import UnknownName
    path = _write(tmp_path, "llama", _config("llama"))
    with pytest.raises(UnknownName):
        plan([str(path)], "cpu_interp", ["fp8"], ["prefill"])
    with pytest.raises(UnknownName):
        plan([str(path)], "cpu_interp", ["fp32"], ["train"])
    (job,) = plan([str(path)], "cpu_interp", ["fp32"], ["decode"])
    assert job.modes == ("prefill", "decode")  # decode continues a prefill's cache


def test_a_library_is_credited_only_with_kernels_that_ran():
    """The record names an upstream library only for kernels of its own that launched; a library
    transformers imported but did not call (it took its PyTorch path) is said to be idle."""
    from sdk.modeltier.runner import _libraries_used
    inductor = {"name": "triton_poi_fused_add_0", "origin": "inductor", "launches": 3}
    fla_ran = {"name": "chunk_fwd_kernel_o", "origin": "fla", "launches": 2}
    fla_compiled_only = {"name": "l2norm_fwd_kernel", "origin": "fla", "launches": 0}
    assert _libraries_used([inductor, fla_ran], ["fla"]) == "; library kernels from fla"
    assert _libraries_used([inductor, fla_compiled_only], ["fla"]) == "; fla imported, none of its kernels ran"
    assert _libraries_used([inductor], []) == ""
    liger = {"name": "_swiglu_forward_kernel", "origin": "liger", "launches": 1}
    assert _libraries_used([liger], ["liger_kernel", "fla"]) == (
        "; library kernels from liger; fla imported, none of its kernels ran")
