"""`day0 scaffold NAME --codegen llvm`: a backend that compiles TTIR to LLVM IR in stages. Bad input
writes nothing; the generated package installs, passes its own tests, compiles kernels through its
"llir" stage (dumped) and runs them against torch references, delegates a kernel its emitter cannot
lower to cpu_interp and says so (launch records, `day0 conformance --explain`), and `day0 ops` says
per op family what its emitter lowers and what it delegates."""
from __future__ import annotations

import json
import py_compile
import sys
from pathlib import Path

import pytest

from sdk.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_scaffold import installed_package, records, run, scaffold, tree  # noqa: E402

NAME = "scaffoldllvm"


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("codegen", ["foo", "LLVM", ""])
def test_unknown_codegen_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, codegen):
    rc, err = scaffold(capsys, "mynpu", "--codegen", codegen, "--out", str(tmp_path))
    assert rc == 2 and len(err) == 1 and f"--codegen '{codegen}': choose one of interp, llvm" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_help_describes_both_shapes(capsys):
    with pytest.raises(SystemExit) as done:
        main(["scaffold", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0 and "--codegen interp|llvm" in out
    assert "'interp' (default)" in out and "'llvm'" in out and "LLVM IR" in out


def test_rendered_llvm_package(tmp_path, capsys):
    assert scaffold(capsys, "mynpu", "--codegen", "llvm", "--out", str(tmp_path))[0] == 0
    root = tmp_path / "mynpu_triton_backend"
    files = tree(root)
    src = "src/mynpu_triton_backend"
    for part in ("__init__", "backend", "codegen", "binary", "launch", "memory", "plugin/compiler"):
        assert f"{src}/{part}.py" in files
    assert f"{src}/lowering.py" not in files  # the interpreter shape's table
    assert {"runtime/runtime.cpp", "setup.py", "tests/test_backend.py", "README.md"} <= set(files)
    assert not [p for p, text in files.items() if b"{{" in text], "unrendered placeholder"
    for p in files:
        if p.endswith(".py"):
            py_compile.compile(str(root / p), doraise=True, cfile=str(tmp_path / "pyc"))
    backend = files[f"{src}/backend.py"].decode()
    assert 'Stage("llir", self.emit_llir, takes="ir")' in backend and "triton_passes(" in backend
    assert "--codegen llvm" in files["README.md"].decode()


# ---------------------------------------------------------------------- generated package
@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package, scaffolded with --codegen llvm and installed for the module (installed_package)."""
    yield from installed_package(tmp_path_factory.mktemp("scaffold_llvm"), NAME, "--codegen", "llvm")


def env(project: Path, delegate: bool, **more: str) -> dict:
    return {f"{NAME.upper()}_DELEGATE": "1" if delegate else "0",
            "TRITON_CACHE_DIR": str(project.parent / "triton-cache"), **more}


def test_generated_package_tests_pass(installed):
    out = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=installed)
    assert out.returncode == 0 and "11 passed" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]


KERNELS = '''
import json, sys
import torch, triton, triton.language as tl, sdk


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def rmsnorm(x_ptr, w_ptr, out_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def cumsum_rows(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + tl.program_id(0) * n + offs, mask=mask, other=0.0)
    tl.store(out_ptr + tl.program_id(0) * n + offs, tl.cumsum(x, axis=0), mask=mask)


gen = torch.Generator().manual_seed(0)
with sdk.launches.record() as rec, sdk.activate(sys.argv[1]):
    x, y = torch.randn(3000, generator=gen), torch.randn(3000, generator=gen)
    out = torch.full_like(x, float("nan"))
    vector_add[(triton.cdiv(3000, 512),)](x, y, out, 3000, BLOCK=512)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x, w = torch.randn(5, 777, generator=gen).to(dtype), torch.randn(777, generator=gen).to(dtype)
        out = torch.full_like(x, float("nan"))
        rmsnorm[(5,)](x, w, out, 777, 777, 1e-5, BLOCK=1024)
        ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(dtype)
        torch.testing.assert_close(out, ref)
    x = torch.randn(4, 100, generator=gen)
    out = torch.full_like(x, float("nan"))
    cumsum_rows[(4,)](x, out, 100, BLOCK=128)
    torch.testing.assert_close(out, x.cumsum(-1))
print(json.dumps([k.to_json() for k in rec.kernels]))
'''


def test_kernels_run_through_the_llvm_stage_or_say_they_are_delegated(installed):
    script = installed.parent / "kernels.py"
    script.write_text(KERNELS)
    dump = installed.parent / "dump"
    out = run(sys.executable, str(script), NAME, cwd=installed.parent,
              env=env(installed, delegate=True, DAY0_DUMP_STAGES="llir", DAY0_DUMP_DIR=str(dump)))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    kernels = {k["name"]: k for k in json.loads(out.stdout.splitlines()[-1])}
    for name, launches in (("vector_add", 1), ("rmsnorm", 3)):
        k = kernels[name]
        assert (k["status"], k["tier"], k["native"], k["launches"]) == ("ran", "llvm", 1.0, launches), k
        llir = (dump / f"{name}.llir").read_text()
        assert "define" in llir and "@day0_kernel" in llir.replace('"', ""), llir[:500]
    k = kernels["cumsum_rows"]
    assert (k["status"], k["tier"], k["native"]) == ("ran", "delegated", 0.0), k
    assert "no rule for tt.scan" in k["tier_detail"] and "tt.load" in k["borrowed_ops"], k
    assert (dump / "cumsum_rows.llir").read_text().startswith(f"; {NAME} delegates this kernel to cpu_interp: ")


def test_conformance_explains_which_kernels_the_emitter_compiled(installed):
    results = installed.parent / "conformance.jsonl"
    out = run(sys.executable, "-m", "sdk.cli", "conformance", "--backend", NAME, "--quick", "--kernels",
              "rmsnorm,moe_align_block_size", "--out", str(results), "--explain", cwd=installed.parent,
              env=env(installed, delegate=True))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = records(results)
    assert {r["kernel"] for r in recs} == {"rmsnorm", "moe_align_block_size"}
    for r in recs:
        assert r["status"] == "pass", r
        tiers = {s["kernel"]: s["tier"] for s in r["launch_stats"] if "tier" in s}
        assert [s["runtime"]["launches"] for s in r["launch_stats"] if "runtime" in s][0] >= len(tiers) > 0, r
        if r["kernel"] == "rmsnorm":  # every op has an emitter rule: compiled, nothing borrowed
            assert set(tiers.values()) == {"llvm"} and r.get("native") is None, r
        else:  # the prefix sums need tt.scan and loops: delegated whole, the others compiled
            assert set(tiers.values()) == {"llvm", "delegated"} and r["native"] == 0.0, r
    assert "\n  llvm: " in out.stdout and "\n  delegated: " in out.stdout, out.stdout[-3000:]


def test_ops_says_per_family_what_the_emitter_lowers_and_delegates(installed):
    out = run(sys.executable, "-m", "sdk.cli", "ops", "--backend", NAME, "--kernels", "rmsnorm,moe_align_block_size",
              "--json", cwd=installed.parent, env=env(installed, delegate=True))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    data = json.loads(out.stdout)
    families = {f["family"]: f for f in data["families"]}
    assert data["missing"] == []
    assert {"tt.load", "tt.store"} <= set(families["memory"]["own"])
    assert "tt.reduce" in families["reductions"]["own"] and "tt.scan" in families["reductions"]["delegated"]
    assert families["dot"]["own"] == [] and "tt.dot" in families["dot"]["delegated"]
    assert data["kernels_need"]["rmsnorm"] == {"delegated": [], "missing": []}
    assert "tt.scan" in data["kernels_need"]["moe_align_block_size"]["delegated"]

    out = run(sys.executable, "-m", "sdk.cli", "ops", "--backend", NAME, "--kernels", "rmsnorm,moe_align_block_size",
              cwd=installed.parent, env=env(installed, delegate=False))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"kernels on {NAME}'s own rules alone: 1 of 2 (rmsnorm)" in out.stdout
    assert "moe_align_block_size lacks " in out.stdout and "tt.scan(i32 -> i32)" in out.stdout


def test_by_family_counts_own_delegated_and_missing_ops():
    from sdk.backend import LoweringTable
    from sdk.op_families import FAMILIES, by_family, family_of
    own, borrowed = LoweringTable(), LoweringTable()
    for op in ("tt.load", "tt.store", "tt.reduce"):
        own.register(op, lambda *a: None)
    borrowed.register("tt.scan", lambda *a: None)
    borrowed.register("tt.load", lambda *a: None)
    table = LoweringTable()
    table.update(borrowed, borrowed=True)
    table.update(own)  # own rules over borrowed ones
    rows = {r["family"]: r for r in by_family(table, {"tt.load", "tt.scan", "tt.dot", "ub.poison"})}
    assert list(rows)[:len(FAMILIES)] == list(FAMILIES) and family_of("ub.poison") == "other"
    assert rows["memory"]["own"] == ["tt.load", "tt.store"] and rows["memory"]["used"] == ["tt.load"]
    assert rows["reductions"]["own"] == ["tt.reduce"] and rows["reductions"]["delegated"] == ["tt.scan"]
    assert rows["dot"]["missing"] == ["tt.dot"] and rows["other"]["missing"] == ["ub.poison"]
    assert rows["memory"]["total"] == len(FAMILIES["memory"])
