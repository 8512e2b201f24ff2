"""scripts/model_sweep.py: `day0 model` over a folder of configs, one table of outcomes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers not installed (pip install transformers)")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import model_sweep  # noqa: E402


def _sweep(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "model_sweep.py"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    proc = _sweep(str(tmp_path / "missing"), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "not a directory" in proc.stderr
    proc = _sweep(str(tmp_path), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "holds no" in proc.stderr
    (tmp_path / "a.json").write_text('{"model_type": "llama"}')
    (tmp_path / "s.md").write_text("earlier")
    proc = _sweep(str(tmp_path), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert (tmp_path / "s.md").read_text() == "earlier" and not (tmp_path / "s.json").exists()
    proc = _sweep(str(tmp_path), "--out", str(tmp_path / "t"), "--only", "nope")
    assert proc.returncode == 2 and "nope" in proc.stderr
    proc = _sweep(str(tmp_path), "--out", str(tmp_path / "t"), "--timeout", "-1")
    assert proc.returncode == 2 and "--timeout" in proc.stderr


@pytest.mark.parametrize("code, stderr, records, cls", [
    (0, "", [{"mode": "prefill", "dtype": "fp32", "status": "pass", "detail": ""}], "pass"),
    (2, "[transformers] a warning\nday0: error: model_type 'x' is not known\n", [], "refused"),
    (2, "day0: error: two\nlines\n", [], "day0"),
    (1, "Traceback (most recent call last):\n  File x\nValueError: y\n", [], "day0"),
    (1, "", [{"mode": "prefill", "dtype": "fp32", "status": "error",
              "detail": "eager reference failed: ValueError: z"}], "eager"),
    (1, "", [{"mode": "prefill", "dtype": "fp32", "status": "unsupported", "detail": "1 kernel(s) need ops"}],
     "unsupported"),
    (1, "", [{"mode": "decode", "dtype": "fp32", "status": "fail", "detail": "logits differ"}], "day0"),
    (1, "", [{"mode": "decode", "dtype": "fp32", "status": "fail",
              "detail": f"logits differ; {model_sweep.STOCK_INDUCTOR_TOO} (relative RMSE 1.1)"}], "compile"),
    (1, "", [{"mode": "decode", "dtype": "fp32", "status": "fail", "detail": "logits differ"},
             {"mode": "prefill", "dtype": "fp32", "status": "fail",
              "detail": f"logits differ; {model_sweep.STOCK_INDUCTOR_TOO} (relative RMSE 1.1)"}], "day0"),
    (0, "", [{"mode": "decode", "dtype": "fp32", "status": "fail", "detail": "logits differ"}], "day0"),
    (1, "", [{"mode": "prefill", "dtype": "bf16", "status": "error",
              "detail": f"InductorError: x (ValueError); {model_sweep.STOCK_INDUCTOR_RAISES}: torch.compile's"},
             {"mode": "decode", "dtype": "bf16", "status": "error", "detail": model_sweep.NOT_RUN}], "compile"),
    (1, "", [{"mode": "prefill", "dtype": "bf16", "status": "error",
              "detail": "InductorError: x (ValueError); PyTorch's own Inductor runs this mode (on the CPU: C++, no Triton)"},
             {"mode": "decode", "dtype": "bf16", "status": "error", "detail": model_sweep.NOT_RUN}], "day0"),
    (1, "", [{"mode": "prefill", "dtype": "bf16", "status": "error", "detail": model_sweep.NOT_RUN}], "day0"),
    ("timeout", "", [], "day0"),
    (-9, "", [], "day0"),
])
def test_outcomes_are_classified(code, stderr, records, cls):
    got, reason = model_sweep.classify(code, stderr, records)
    assert got == cls and (cls == "pass") == (reason == ""), (got, reason)


def test_a_sweep_stopped_part_way_keeps_what_it_finished(tmp_path, monkeypatch):
    """The files are rewritten after every config: stopped at the second config, they hold the
    first one's outcome and say the second was not run."""
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("a_first", "b_second"):
        (configs / f"{name}.json").write_text(json.dumps({"model_type": "llama"}))

    def fake_run(outcome, args, scratch):
        if outcome.name == "b_second":
            raise KeyboardInterrupt  # what a Ctrl-C or a time limit does to the sweep
        outcome.exit_code, outcome.wall_s, outcome.cls, outcome.reason = 2, 1.0, "refused", "why"
        return outcome

    monkeypatch.setattr(model_sweep, "run_one", fake_run)
    with pytest.raises(KeyboardInterrupt):
        model_sweep.main([str(configs), "--out", str(tmp_path / "s")])
    data = json.loads((tmp_path / "s.json").read_text())
    assert [(m["name"], m["cls"]) for m in data["models"]] == [("a_first", "refused"), ("b_second", "not run")]
    assert data["counts"]["refused"] == 1 and data["counts"]["not run"] == 1
    assert "| b_second | llama | not run |" in (tmp_path / "s.md").read_text()


def _fake_runs(monkeypatch, ran: list[str], stop_at: str | None = None):
    def fake_run(outcome, args, scratch):
        if outcome.name == stop_at:
            raise KeyboardInterrupt
        ran.append(outcome.name)
        outcome.exit_code, outcome.wall_s, outcome.cls, outcome.reason = 0, 1.0, "pass", ""
        return outcome
    monkeypatch.setattr(model_sweep, "run_one", fake_run)


def test_a_sweep_resumes_where_it_stopped_and_reruns_named_configs(tmp_path, monkeypatch):
    """--resume runs only what the results do not hold finished; with --only it reruns the named
    configs and keeps the others; every part's command is kept."""
    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ("a_first", "b_second", "c_third"):
        (configs / f"{name}.json").write_text(json.dumps({"model_type": "llama"}))
    out = str(tmp_path / "s")
    ran: list[str] = []
    _fake_runs(monkeypatch, ran, stop_at="b_second")
    with pytest.raises(KeyboardInterrupt):  # the one config interrupted, the others finished
        model_sweep.main([str(configs), "--out", out])
    assert ran == ["a_first", "c_third"]
    ran.clear()
    _fake_runs(monkeypatch, ran)
    assert model_sweep.main([str(configs), "--out", out, "--resume"]) == 0
    assert ran == ["b_second"]
    ran.clear()
    assert model_sweep.main([str(configs), "--out", out, "--resume", "--only", "a_first"]) == 0
    assert ran == ["a_first"]
    data = json.loads((tmp_path / "s.json").read_text())
    assert [m["cls"] for m in data["models"]] == ["pass"] * 3 and data["counts"]["pass"] == 3
    assert [r["ran"] for r in data["runs"]] == [2, 1, 1]  # the configs each part finished
    assert data["runs"][2]["command"].endswith("--resume --only a_first")
    assert "--resume --only a_first" in (tmp_path / "s.md").read_text()
    # a changed config is run again; results of another dtype are not resumed
    ran.clear()
    (configs / "c_third.json").write_text(json.dumps({"model_type": "mistral"}))
    assert model_sweep.main([str(configs), "--out", out, "--resume"]) == 0 and ran == ["c_third"]
    proc = _sweep(str(configs), "--out", out, "--resume", "--dtype", "bf16")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot resume" in proc.stderr


def test_default_configs_cover_every_generative_architecture(tmp_path):
    """scripts/default_configs.py writes transformers' defaults for every model type with a causal
    LM or a generative multimodal class, leaving out the types a folder already covers."""
    covered = tmp_path / "covered"
    (covered / "m").mkdir(parents=True)
    (covered / "m" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    out = tmp_path / "defaults"
    cmd = [sys.executable, str(ROOT / "scripts" / "default_configs.py"), str(out), "--skip-types-of", str(covered)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto
    written = {p.parent.name for p in out.glob("*/config.json")}
    expect = set(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(
        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES) | set(modeling_auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES)
    assert written == {f"{mt}-defaults" for mt in expect - {"llama"}}
    qwen3 = json.loads((out / "qwen3-defaults" / "config.json").read_text())
    assert qwen3["architectures"] == ["Qwen3ForCausalLM"] and qwen3["model_type"] == "qwen3"
    assert qwen3["hidden_size"] == CONFIG_MAPPING["qwen3"]().hidden_size  # the class's default, full size
    llava = json.loads((out / "llava-defaults" / "config.json").read_text())
    assert llava["architectures"] == ["LlavaForConditionalGeneration"] and llava["text_config"]["model_type"] == "llama"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--force" in proc.stderr


def test_default_configs_with_encoders_write_the_encoder_decoders_and_encoders(tmp_path):
    """--encoders writes the model types with a sequence-to-sequence or a masked language model (the
    encoder-decoders and encoders the model tier runs), each named after that class."""
    out = tmp_path / "enc"
    cmd = [sys.executable, str(ROOT / "scripts" / "default_configs.py"), str(out), "--encoders"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from transformers.models.auto import modeling_auto
    written = {p.parent.name for p in out.glob("*/config.json")}
    expect = set(modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) | set(
        modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    assert written == {f"{mt}-defaults" for mt in expect} and "qwen3-defaults" not in written
    t5 = json.loads((out / "t5-defaults" / "config.json").read_text())
    assert t5["architectures"] == ["T5ForConditionalGeneration"] and t5["model_type"] == "t5"
    bert = json.loads((out / "bert-defaults" / "config.json").read_text())
    assert bert["architectures"] == ["BertForMaskedLM"]
