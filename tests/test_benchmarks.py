"""The benchmark scripts: configuration tuning checks every variant against the reference before
timing it, the roofline's arithmetic, and one-line errors where no GPU or a bad flag is given."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_roofline  # noqa: E402


def _script(name: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)


def test_tune_checks_times_and_reports_rejected_configs(tmp_path):
    out = tmp_path / "tune.json"
    proc = _script("tune_configs.py", "--kernel", "causal_conv1d_prefill", "--case", "odd_dim200_varlen",
                   "--dtype", "fp32", "--backend", "cpu_interp", "--device", "cpu",
                   "--sweep", "BLOCK_M=8,3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    status = {json.dumps(r["config"], sort_keys=True): r["status"] for r in data["rows"]}
    assert status == {"{}": "pass", '{"BLOCK_M": 8}': "pass", '{"BLOCK_M": 3}': "error"}
    timed = [r for r in data["rows"] if r["status"] == "pass"]
    assert all(r["ms"] > 0 and r["GBps"] > 0 for r in timed)
    assert "fastest first" in proc.stdout


def test_tune_case_parameter_override_shapes_the_inputs(tmp_path):
    """--param changes the case (here the alignment block the MoE inputs are sorted by) for every
    variant, and the kernel must still match its reference."""
    out = tmp_path / "tune.json"
    proc = _script("tune_configs.py", "--kernel", "moe_fused_gemm", "--case", "odd_T37_E8_k2_gateup_N96_K80",
                   "--dtype", "fp32", "--backend", "cpu_interp", "--device", "cpu",
                   "--param", "block_m=32", "--sweep", "BLOCK_N=32", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["params"]["block_m"] == 32
    assert [r["status"] for r in data["rows"]] == ["pass", "pass"]


@pytest.mark.parametrize("args, says", [
    (["--kernel", "no_such_kernel"], "unknown kernel 'no_such_kernel'"),
    (["--kernel", "rmsnorm", "--case", "nope"], "has no case 'nope'"),
    (["--kernel", "rmsnorm", "--sweep", "BLOCK"], "is not KEY=V1[,V2...]"),
    (["--kernel", "moe_fused_gemm", "--param", "nope=1"], "has no parameter 'nope'"),
])
def test_tune_bad_input_is_one_line_exit_2(args, says, tmp_path):
    proc = _script("tune_configs.py", *args, "--device", "cpu", "--backend", "cpu_interp",
                   "--out", str(tmp_path / "t.json"))
    assert proc.returncode == 2
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "t.json").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(),
                    reason="a CUDA GPU is present: the script measures instead of refusing")
def test_roofline_needs_a_gpu_and_says_so(tmp_path):
    proc = _script("gpu_roofline.py", "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 2
    assert "needs a CUDA GPU" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


CEIL = {"copy_GBps": 3000.0, "matmul_bf16_TFLOPs": 800.0}


def test_roofline_memory_class_verdicts():
    # 300 MB in 125 us: 2400 GB/s = 80% of the copy ceiling, exactly the target
    row = {"kernel": "k", "case": "c", "dtype": "bf16", "bytes": 300e6, "flops": 0, "day0_ms": 0.125}
    gpu_roofline.judge(row, CEIL)
    assert row["class"] == "memory" and row["of_roof"] == pytest.approx(0.8) and row["verdict"] == "meets"
    slower = {**row, "day0_ms": 0.2}
    gpu_roofline.judge(slower, CEIL)
    assert slower["verdict"] == "misses" and "50% of copy BW" in slower["notes"]
    beaten = {**row, "compile_ms": 0.1}  # fast enough for the roof, but Inductor is faster
    gpu_roofline.judge(beaten, CEIL)
    assert beaten["verdict"] == "misses" and "1.25x torch.compile" in beaten["notes"]


def test_roofline_compute_class_and_microsecond_targets():
    row = {"kernel": "k", "case": "c", "dtype": "bf16", "bytes": 1e6, "flops": 2 * 8192 ** 3, "day0_ms": 2.0}
    gpu_roofline.judge(row, CEIL)
    assert row["class"] == "compute"
    assert row["TFLOPs"] == pytest.approx(2 * 8192 ** 3 / 2e-3 / 1e12)
    assert row["verdict"] == ("meets" if row["TFLOPs"] / 800 >= 0.7 else "misses")
    vs_torch = {**row, "torch_ms": 1.5}  # PyTorch takes 1.5 ms on the same shape: 75% of its rate
    gpu_roofline.judge(vs_torch, CEIL)
    assert vs_torch["verdict"] == "meets"
    slow = {**row, "torch_ms": 1.2}
    gpu_roofline.judge(slow, CEIL)
    assert slow["verdict"] == "misses" and "60% of PyTorch's rate on this shape" in slow["notes"]
    target = {"kernel": "fused_add_rmsnorm", "case": "qwen3_next_T8192_H2048", "dtype": "bf16",
              "bytes": 100e6, "flops": 0, "day0_ms": 0.060}
    gpu_roofline.judge(target, CEIL)
    assert target["target_us"] == 50.7 and target["verdict"] == "misses"
    assert "60.0 us vs the 50.7 us target" in target["notes"]



def _measure_file(path: Path, gpu: str, times_us: dict, gpu_us: dict | None = None) -> Path:
    rows = []
    for (kernel, case), t in times_us.items():
        row = {"kernel": kernel, "case": case, "dtype": "bf16", "status": "measured", "day0_ms": t * 1e-3}
        if gpu_us and (kernel, case) in gpu_us:
            row["launches"] = [{"name": kernel, "us": gpu_us[(kernel, case)]}]
        rows.append(row)
    path.write_text(json.dumps({"gpu": gpu, "date": path.stem, "rows": rows}))
    return path


def _validation_file(path: Path, ratios: dict) -> Path:
    rows = [{"kernel": k, "case": c, "dtype": "bf16", "ratio": r} for (k, c), r in ratios.items()]
    path.write_text(json.dumps({"holdout": {"rows_scored": rows,
                                            "summary": {"all": {"median_abs_error_pct": 12.5}}}}))
    return path


def test_sim_repeat_counts_what_moved_between_runs_and_which_misses_hold_in_both(tmp_path):
    import random
    rng = random.Random(20261124)
    keys = [(f"k{i % 5}", f"c{i}") for i in range(40)]
    first = {k: rng.uniform(5.0, 500.0) for k in keys}
    factors = {k: rng.uniform(0.95, 1.05) for k in keys}
    factors[keys[3]], factors[keys[7]] = 3.0, 1 / 2.5          # two calls moved beyond 2x
    factors[keys[11]] = 1.7                                     # one beyond 1.5x only
    second = {k: first[k] * factors[k] for k in keys}
    # the second run is profiled: keys[3] is host-bound (its GPU time far below its measured time)
    gpu = {k: second[k] * 0.97 for k in keys}
    gpu[keys[3]] = second[keys[3]] * 0.1 if second[keys[3]] > 40 else 1.0
    a = _measure_file(tmp_path / "run1.json", "GPU X", first)
    b = _measure_file(tmp_path / "run2.json", "GPU X", second, gpu)
    # predictions: k0 beyond 2x against both runs, k3 (keys[3] and keys[8]) against the first only
    r1 = {k: 1.1 for k in keys}
    r1[keys[0]], r1[keys[3]] = 2.6, 0.3
    r2 = {k: 1.1 for k in keys}
    r2[keys[5]] = 0.4
    v1, v2 = _validation_file(tmp_path / "v1.json", r1), _validation_file(tmp_path / "v2.json", r2)
    out = tmp_path / "repeat.json"
    proc = _script("sim_repeat.py", str(a), str(b), "--validation", str(v1), str(v2), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    s = data["summary"]
    dev = sorted(abs(factors[k] - 1) for k in keys)
    assert s["n"] == 40 and abs(s["median_abs_change_pct"] - 100 * (dev[19] + dev[20]) / 2) < 1e-9
    assert s["beyond_2x"] == 2 and s["beyond_1_5x"] == 3
    assert s["within_10pct"] == sum(d <= 0.10 for d in dev)
    assert data["summary_host_bound"]["n"] == 1 and data["summary_host_bound"]["beyond_2x"] == 1
    sc = data["scores"]
    assert sc["first"]["kernels_beyond_2x"] == ["k0", "k3"] and sc["second"]["kernels_beyond_2x"] == ["k0"]
    assert [x["kernel"] for x in sc["beyond_2x_in_both"]] == ["k0"]
    only = {x["kernel"]: x["measurements_moved_x"] for x in sc["beyond_2x_in_one_run_only"]}
    assert set(only) == {"k3"} and abs(only["k3"] - 3.0) < 1e-9   # k3 holds keys[3], which moved 3x
    assert "beyond 2x in both runs: k0" in proc.stdout


def test_sim_repeat_refuses_bad_input_in_one_line(tmp_path):
    a = _measure_file(tmp_path / "a.json", "GPU X", {("k", "c"): 10.0})
    b = _measure_file(tmp_path / "b.json", "GPU Y", {("k", "c"): 11.0})
    out = tmp_path / "r.json"
    for args, says in (([str(a), str(tmp_path / "none.json")], "no such file"),
                       ([str(a), str(b)], "different GPUs")):
        proc = _script("sim_repeat.py", *args, "--out", str(out))
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
    out.write_text("keep")
    proc = _script("sim_repeat.py", str(a), str(a), "--out", str(out))
    assert proc.returncode == 2 and "--force" in proc.stderr and out.read_text() == "keep"


@pytest.mark.parametrize("args, message", [
    (["--items", "gemm_bf16/only_two"], "KERNEL/CASE/DTYPE"),
    (["--reps", "0"], "at least 1"),
    (["--base", "no-such-revision-anywhere"], "unknown revision 'no-such-revision-anywhere'"),
    (["--out", __file__], "exists; pass --force"),
])
def test_compiled_ab_bad_input_is_one_line_exit_2(args, message, capsys):
    import cpu_compiled_ab
    assert cpu_compiled_ab.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err

