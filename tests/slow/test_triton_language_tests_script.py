"""scripts/triton_language_tests.py over a small stand-in for Triton's test tree: outcomes of a
parallel run equal a serial run's, a crashing case is recorded as a crash and the run goes on, the
children see the backend's device and no GPU, a case past --timeout costs its child (pytest-timeout
or not) and the run goes on, --time-limit stops a run that --resume finishes, and bad arguments are
one line with exit status 2."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "triton_language_tests.py"

CONFTEST = '''
import pytest


def pytest_addoption(parser):
    parser.addoption("--device", action="store", default="cuda")


@pytest.fixture
def device(request):
    return request.config.getoption("--device")
'''

TESTS = '''
import os
import time

import pytest


@pytest.mark.parametrize("n", range(7))
def test_values(n, device):
    assert device == "cpu"
    assert n != 5, "five is refused"


@pytest.mark.parametrize("n", range(3))
def test_skips(n):
    if n == 1:
        pytest.skip("not this one")


@pytest.mark.parametrize("n", range(3))
def test_crash(n):
    if n == 1:
        os._exit(3)


def test_gpu_hidden():
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == "" and os.environ["TRITON_DEFAULT_BACKEND"] == "cpu_interp"


@pytest.mark.parametrize("n", range(4))
def test_slow(n):
    time.sleep(float(os.environ.get("FAKE_SLEEP_S", "0")) if n == 1 else 0)
'''

EXPECTED = {"test_values[5]": "failed", "test_skips[1]": "skipped", "test_crash[1]": "crash"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tt")
    lang = root / "python" / "test" / "unit" / "language"
    lang.mkdir(parents=True)
    (root / "python" / "test" / "conftest.py").write_text(CONFTEST)
    (lang / "test_core.py").write_text(TESTS)
    (lang / "test_gpu_only.py").write_text("import torch\ntorch.cuda.current_device()\n")  # does not collect
    return root


def run(tree: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(SCRIPT), str(tree), "--per-function", "0", "--tests-commit",
                           "stand-in", "--out", str(out), *extra], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=600)


def outcomes(out: Path) -> dict[str, str]:
    lines = Path(str(out) + ".cases.jsonl").read_text().splitlines()
    return {json.loads(ln)["case"].split("::", 1)[1]: json.loads(ln)["outcome"] for ln in lines}


def test_parallel_run_equals_serial_run(tree, tmp_path):
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    assert run(tree, serial).returncode == 0
    proc = run(tree, parallel, "--jobs", "3", "--chunk-size", "7")  # 3 chunks, dealt round-robin
    assert proc.returncode == 0, proc.stderr
    got = outcomes(serial)
    assert len(got) == 18
    assert {k: v for k, v in got.items() if v != "passed"} == EXPECTED
    assert outcomes(parallel) == got
    assert list(outcomes(parallel)) == list(got)  # the records file is in collection order
    meta = json.loads(Path(str(parallel) + ".json").read_text())["meta"]
    assert meta["jobs"] == 3 and meta["totals"]["run"] == 18 and meta["totals"]["not_run"] == 0
    assert (meta["totals"]["passed"], meta["totals"]["failed"], meta["totals"]["skipped"]) == (15, 2, 1)
    assert meta["totals"]["files_not_collected"] == 1 and meta["totals"]["classes"] == {"b": 1, "unclassified": 2}
    assert "18 cases run: 15 passed, 2 failed, 1 skipped, 0 xfailed; 1 test file(s) did not collect" in \
        Path(str(parallel) + ".md").read_text()


def test_time_limit_then_resume(tree, tmp_path):
    out = tmp_path / "limited"
    # a limit the first case's child process reaches even on a loaded machine (under pytest -n 15
    # on 16 cores, starting it took more than 10 s)
    proc = run(tree, out, "--functions", "slow", "--time-limit", "40", env={"FAKE_SLEEP_S": "600"})
    assert proc.returncode == 0, proc.stderr
    # the first case passes at once, the second sleeps past the limit and is left for --resume
    assert outcomes(out) == {"test_slow[0]": "passed"}  # the case the limit cut short is no failure
    meta = json.loads(Path(str(out) + ".json").read_text())["meta"]
    assert meta["totals"]["not_run"] == 3 and meta["wall_s"] < 90
    assert "not run (stopped at --time-limit)" in Path(str(out) + ".md").read_text()
    proc = run(tree, out, "--functions", "slow", "--resume", env={"FAKE_SLEEP_S": "0"})
    assert proc.returncode == 0, proc.stderr
    assert outcomes(out) == {f"test_slow[{n}]": "passed" for n in range(4)}
    meta = json.loads(Path(str(out) + ".json").read_text())["meta"]
    assert meta["kept_from_earlier_run"] == 1 and meta["totals"]["not_run"] == 0


def test_a_case_past_the_timeout_is_stopped_and_the_run_goes_on(tree, tmp_path):
    """The case fails at the limit (pytest-timeout, where installed) or its child is stopped a grace
    later (without it, or when it cannot interrupt); the cases after it run."""
    out = tmp_path / "hang"
    proc = run(tree, out, "--functions", "slow", "--timeout", "1", env={"FAKE_SLEEP_S": "600"})
    assert proc.returncode == 0, proc.stderr
    got = outcomes(out)
    assert got.pop("test_slow[1]") in ("timeout", "failed")
    assert got == {"test_slow[0]": "passed", "test_slow[2]": "passed", "test_slow[3]": "passed"}
    data = json.loads(Path(str(out) + ".json").read_text())
    assert data["meta"]["wall_s"] < 120
    assert "Timeout" in data["functions"][0]["failures"][0]["message"]


@pytest.mark.parametrize("extra, says", [
    (["--jobs", "0"], "--jobs and --chunk-size must be >= 1"),
    (["--time-limit", "-1"], "--time-limit >= 0"),
    (["--resume"], "does not exist (nothing to continue)"),
    (["--functions", "("], "--functions: bad regex"),
])
def test_bad_arguments_are_one_line(tree, tmp_path, extra, says):
    proc = run(tree, tmp_path / "x", *extra)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and says in proc.stderr


def test_existing_output_needs_force_or_resume(tree, tmp_path):
    out = tmp_path / "o"
    Path(str(out) + ".cases.jsonl").write_text("")
    proc = run(tree, out)
    assert proc.returncode == 2 and "pass --force to overwrite it or --resume" in proc.stderr
    assert Path(str(out) + ".cases.jsonl").read_text() == ""


KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def plain(x_ptr, y_ptr, N: tl.constexpr):
    tl.store(y_ptr + tl.arange(0, N), tl.load(x_ptr + tl.arange(0, N)) * 2)


@triton.jit
def printing(x_ptr, y_ptr):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    if x > 100:  # never: the print only makes the kernel one the compiled tier leaves alone
        tl.device_print("large", x)
    tl.store(y_ptr + pid, x * 2)


def test_plain(device):
    x = torch.arange(16, dtype=torch.float32, device=device)
    y = torch.full_like(x, float("nan"))
    plain[(1,)](x, y, N=16)
    assert torch.equal(y, x * 2)


def test_printing(device):
    x = torch.arange(16, dtype=torch.float32, device=device)
    y = torch.full_like(x, float("nan"))
    printing[(16,)](x, y)
    printing[(16,)](x, y)
    assert torch.equal(y, x * 2)


def test_no_launch():
    assert 1 + 1 == 2
'''


def test_records_say_which_tier_ran_each_case(tmp_path):
    """On tier compiled, a case's record counts its launches per tier, and a launch the tier
    handed to the interpreter carries the backend's reason; the summary totals them."""
    root = tmp_path / "tt"
    lang = root / "python" / "test" / "unit" / "language"
    lang.mkdir(parents=True)
    (root / "python" / "test" / "conftest.py").write_text(CONFTEST)
    (lang / "test_core.py").write_text(KERNELS)
    out = tmp_path / "tiers"
    proc = run(root, out, "--tier", "compiled", env={"DAY0_CPU_CACHE_DIR": str(tmp_path / "objects")})
    assert proc.returncode == 0, proc.stderr
    recs = {json.loads(ln)["case"].split("::", 1)[1]: json.loads(ln)
            for ln in Path(str(out) + ".cases.jsonl").read_text().splitlines()}
    assert {k: r["outcome"] for k, r in recs.items()} == dict.fromkeys(
        ["test_plain", "test_printing", "test_no_launch"], "passed")
    assert recs["test_plain"]["launches"] == {"compiled": 1} and "interp_why" not in recs["test_plain"]
    assert recs["test_printing"]["launches"] == {"interp": 2}
    assert any("tt.print" in w for w in recs["test_printing"]["interp_why"])
    assert "launches" not in recs["test_no_launch"]
    meta = json.loads(Path(str(out) + ".json").read_text())["meta"]
    assert meta["totals"]["launches"] == {"compiled": 1, "interp": 2} and meta["totals"]["cases_interp"] == 1
    md = Path(str(out) + ".md").read_text()
    assert "## Which tier ran the launches" in md and "1 compiled, 2 interp" in md
