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


def test_refused_configs_are_their_own_class_with_the_commands_line(tmp_path):
    configs = tmp_path / "configs"
    for name, cfg in (("bert-base", {"model_type": "bert", "architectures": ["BertForMaskedLM"]}),
                      ("t5-small", {"model_type": "t5", "is_encoder_decoder": True}),
                      ("mystery", {"model_type": "no_such_arch"})):
        (configs / name).mkdir(parents=True)
        (configs / name / "config.json").write_text(json.dumps(cfg))
    proc = _sweep(str(configs), "--out", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "s.json").read_text())
    by = {m["name"]: m for m in data["models"]}
    assert data["counts"]["refused"] == 3 and data["versions"]["transformers"]
    assert all(m["exit_code"] == 2 and m["cls"] == "refused" and not m["records"] for m in by.values())
    assert "encoder" in by["bert-base"]["reason"] and "encoder-decoder" in by["t5-small"]["reason"]
    assert "no_such_arch" in by["mystery"]["reason"]
    table = (tmp_path / "s.md").read_text()
    assert "| bert-base | bert | refused | 2 |" in table


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
    (0, "", [{"mode": "decode", "dtype": "fp32", "status": "fail", "detail": "logits differ"}], "day0"),
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
