"""day0's vLLM platform plugin, its PyTorch stand-ins for vLLM's C++ MoE helpers, and the vLLM
install command. The stand-ins and the plugin's switch run without vLLM; what needs vLLM itself
(its platform resolution, the ops called through vLLM's wrappers) skips when it is not installed."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import sdk
from sdk.integrations import vllm as day0_vllm
from sdk.integrations.vllm import install, ops
from sdk.device_models import load

ROOT = Path(__file__).resolve().parents[1]
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vllm not installed")


# ------------------------------------------------------------------------------- the plugin
def test_plugin_is_inert_without_a_day0_backend(monkeypatch):
    monkeypatch.delenv("TRITON_DEFAULT_BACKEND", raising=False)
    assert day0_vllm.register() is None
    monkeypatch.setenv("TRITON_DEFAULT_BACKEND", "no_such_backend")
    assert day0_vllm.register() is None


def test_plugin_is_active_while_a_day0_backend_is_selected(monkeypatch):
    monkeypatch.delenv("TRITON_DEFAULT_BACKEND", raising=False)
    with sdk.activate("cpu_interp"):
        assert day0_vllm.register() == "sdk.integrations.vllm.platform.Day0Platform"
    assert day0_vllm.register() is None
    monkeypatch.setenv("TRITON_DEFAULT_BACKEND", "cpu_interp")
    assert day0_vllm.register() == "sdk.integrations.vllm.platform.Day0Platform"


def test_entry_point_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points."vllm.platform_plugins"]\nday0 = "sdk.integrations.vllm:register"' in text


def _python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_BACKEND"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=full)


@needs_vllm
def test_vllm_resolves_no_day0_platform_when_none_is_selected():
    proc = _python("""
        from vllm.platforms import current_platform
        print("PLATFORM", type(current_platform).__name__)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PLATFORM Day0Platform" not in proc.stdout
    assert "PLATFORM " in proc.stdout


@needs_vllm
def test_vllm_resolves_day0_platform_under_activate():
    proc = _python("""
        import sdk, torch
        sdk.activate("cpu_interp")
        from vllm.platforms import current_platform as p
        print("PLATFORM", type(p).__module__, type(p).__name__)
        print("FACTS", p.device_type, p.is_cpu(), p.is_cuda_alike(), p.is_out_of_tree(),
              p.is_pin_memory_available(), p.num_compute_units(), p.get_device_capability())
        print("NAME", p.get_device_name())
        # the stand-ins, called through vLLM's own wrappers
        from vllm import _custom_ops as vops
        from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size
        ids = torch.tensor([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], dtype=torch.int32)
        s, e, n = moe_align_block_size(ids, 4, 5)
        print("ALIGN", s[: int(n)].tolist(), e[: int(n) // 4].tolist(), int(n))
        x = torch.randn(3, 2, 8)
        out = torch.empty(3, 8)
        vops.moe_sum(x, out)
        print("SUM", torch.allclose(out, x.sum(1)))
        y = torch.empty(3, 4)
        g = torch.randn(3, 8)
        torch.ops._C.silu_and_mul(y, g)
        print("SILU", torch.allclose(y, torch.nn.functional.silu(g[:, :4]) * g[:, 4:]))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "PLATFORM sdk.integrations.vllm.platform Day0Platform" in out
    units = load("host_cpu").compute.units.value  # the device model cpu_interp stands for
    assert f"FACTS cpu False False True False {units} None" in out
    assert "NAME day0 cpu_interp (" in out
    # the example of vLLM's moe_align_block_size docstring (experts 1..4, block 4)
    assert "ALIGN [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12] [1, 2, 3, 4] 16" in out
    assert "SUM True" in out and "SILU True" in out


@needs_vllm
def test_vllm_resolves_day0_platform_from_the_environment():
    proc = _python("""
        from vllm.platforms import current_platform as p
        print("PLATFORM", type(p).__name__, p.device_type)
    """, env={"TRITON_DEFAULT_BACKEND": "cpu_interp"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PLATFORM Day0Platform cpu" in proc.stdout


# ------------------------------------------------------------------------------- stand-ins
def test_silu_and_mul_matches_math():
    g = torch.Generator().manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 1.6e-2)):
        x = torch.randn(37, 2 * 96, generator=g).to(dtype)
        out = torch.empty(37, 96, dtype=dtype)
        ops.silu_and_mul(out, x)
        a, b = x[:, :96].double(), x[:, 96:].double()
        ref = a / (1 + torch.exp(-a)) * b
        assert torch.allclose(out.double(), ref, atol=tol, rtol=tol)


def test_moe_sum_matches_math_and_masks_foreign_experts():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 4, 33, generator=g)
    out = torch.empty(9, 33)
    ops.moe_sum(x, out)
    ref = torch.zeros(9, 33, dtype=torch.float64)
    for t in range(9):
        for k in range(4):
            ref[t] += x[t, k].double()
    assert torch.allclose(out.double(), ref, atol=1e-5)
    ids = torch.randint(0, 6, (9, 4), generator=g, dtype=torch.int32)
    emap = torch.tensor([0, -1, 1, -1, 2, 3], dtype=torch.int32)  # experts 1 and 3 elsewhere
    ops.moe_sum(x, out, ids, emap)
    ref = torch.zeros(9, 33, dtype=torch.float64)
    for t in range(9):
        for k in range(4):
            if emap[ids[t, k]] >= 0:
                ref[t] += x[t, k].double()
    assert torch.allclose(out.double(), ref, atol=1e-5)


def _align(ids: torch.Tensor, experts: int, block: int, emap=None, scatter=False):
    cap = ids.numel() + experts * (block - 1)
    s = torch.full((cap,), -7, dtype=torch.int32)
    e = torch.full(((cap + block - 1) // block,), -7, dtype=torch.int32)
    n = torch.empty(1, dtype=torch.int32)
    sc = torch.full((ids.numel(), 1), -7, dtype=torch.int32) if scatter else None
    ops.moe_align_block_size(ids, experts, block, s, e, n, emap, sc)
    return s, e, int(n), sc


@pytest.mark.parametrize("tokens,topk,experts,block", [(4, 3, 5, 4), (33, 8, 64, 16), (7, 2, 3, 64)])
def test_moe_align_block_size_groups_every_route_by_expert(tokens, topk, experts, block):
    g = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(tokens)]).int()
    s, e, n, _ = _align(ids, experts, block)
    flat = ids.reshape(-1).tolist()
    pos = 0
    for ex in range(experts):
        mine = [r for r, x in enumerate(flat) if x == ex]
        size = -(-len(mine) // block) * block
        seg = s[pos:pos + size].tolist()
        assert sorted(r for r in seg if r != len(flat)) == mine
        assert seg.count(len(flat)) == size - len(mine)
        assert e[pos // block:(pos + size) // block].tolist() == [ex] * (size // block)
        pos += size
    assert n == pos
    assert set(s[n:].tolist()) <= {len(flat)} and set(e[n // block:].tolist()) <= {-1}


def test_moe_align_block_size_with_an_expert_map_and_scatter_index():
    ids = torch.tensor([[0, 1], [2, 3], [3, 0]], dtype=torch.int32)
    emap = torch.tensor([1, -1, -1, 0], dtype=torch.int32)  # this rank holds experts 3 (->0), 0 (->1)
    s, e, n, sc = _align(ids, 4, 2, emap, scatter=True)
    # local expert 0 (global 3): routes 3, 4; local expert 1 (global 0): routes 0, 5
    assert n == 4 and s[:4].tolist() == [0, 5, 3, 4] and e[:2].tolist() == [1, 0]
    assert sc.reshape(-1).tolist() == [0, -1, -1, 3, 4, 5]


def test_topk_softmax_matches_math():
    g = torch.Generator().manual_seed(3)
    T, E, K = 11, 16, 4
    logits = torch.randn(T, E, generator=g)
    bias = torch.randn(E, generator=g) * 0.1
    for renorm in (False, True):
        for b in (None, bias):
            w = torch.empty(T, K)
            i = torch.empty(T, K, dtype=torch.int32)
            tei = torch.empty(T, K, dtype=torch.int32)
            ops.topk_softmax(w, i, tei, logits, renorm, b, None)
            for t in range(T):
                p = [math_exp / sum(torch.exp(logits[t].double()).tolist())
                     for math_exp in torch.exp(logits[t].double()).tolist()]
                score = [p[x] + (0 if b is None else float(b[x])) for x in range(E)]
                chosen = sorted(range(E), key=lambda x: -score[x])[:K]
                assert i[t].tolist() == chosen
                ws = [p[x] for x in chosen]
                if renorm:
                    ws = [v / sum(ws) for v in ws]
                assert torch.allclose(w[t].double(), torch.tensor(ws, dtype=torch.float64), atol=1e-6)
                assert tei[t].tolist() == [k * T + t for k in range(K)]


def test_stand_in_schemas_are_vllms():
    # the argument lists vLLM's Python wrappers pass (vllm/_custom_ops.py, 0.33.0)
    assert re.search(r"moe_sum\(Tensor input, Tensor! output, Tensor\? topk_ids=None, Tensor\? "
                     r"expert_map=None\)", ops.SCHEMAS["_moe_C::moe_sum"])
    for qualname, schema in ops.SCHEMAS.items():
        assert schema.startswith(qualname.split("::")[1] + "(") and schema.endswith("-> ()")
        torch._C.parse_schema(schema)  # valid schemas


# ------------------------------------------------------------------------------- install
def test_install_dry_run_prints_two_no_deps_commands_without_protected_packages():
    proc = subprocess.run(["bash", str(ROOT / "scripts/install-vllm.sh"), "--dry-run"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and all("pip install -q --no-deps" in line for line in lines)
    assert lines[0].endswith(install.VLLM)
    for dep in install.DEPS:
        assert dep.requirement in lines[1].replace("'", "")
    assert not install.protected_in(install.pip_commands())


def test_install_refuses_a_list_that_would_change_torch(monkeypatch, capsys):
    monkeypatch.setattr(install, "DEPS", install.DEPS + (install.Dep("torch==2.14.0", "vllm"),))
    ran = []
    monkeypatch.setattr(install.subprocess, "run", lambda *a, **k: ran.append(a))
    assert install.main(["--dry-run"]) == 2 and install.main([]) == 2
    assert not ran and "torch==2.14.0" in capsys.readouterr().err


def _requires(dist: str) -> dict[str, str]:
    """dist's own requirements (no extras): normalised name -> requirement text."""
    out = {}
    for req in importlib.metadata.requires(dist) or []:
        if "extra ==" not in req:
            text = req.split(";")[0].strip()
            out[install.dist_name(text)] = text
    return out


@needs_vllm
def test_install_list_is_consistent_with_vllms_metadata():
    declared = _requires("vllm")
    names = [install.dist_name(d.requirement) for d in install.DEPS]
    assert len(names) == len(set(names))
    for dep in install.DEPS:
        name = install.dist_name(dep.requirement)
        if dep.needed_by == "vllm":
            # vLLM declares it; the range installed is vLLM's own (extras dropped)
            assert name in declared, dep
            want = re.sub(r"\[[^]]*\]", "", declared[name]).replace(" ", "")
            assert install.dist_name(want) == name and \
                want[len(re.match(r"[A-Za-z0-9_.-]+", want).group(0)):] == \
                dep.requirement[len(re.match(r"[A-Za-z0-9_.-]+", dep.requirement).group(0)):], dep
        elif dep.needed_by != "vllm imports it":
            parent = dep.needed_by
            assert install.dist_name(parent) in names, dep
            assert name in _requires(parent), dep
    # whatever the list installs is installed here, so the list is what this venv runs
    for name in names:
        importlib.metadata.version(name)


# ------------------------------------------------------------------ vLLM's kernels, library tier
VLLM_GROUPS = ("lib_vllm_moe,lib_vllm_attention,lib_vllm_mamba,lib_vllm_rope,lib_vllm_gdn,"
               "lib_vllm_sampling,lib_vllm_quant")


def _conformance(tmp_path: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items()
            if k not in ("DAY0_KERNELS", "DAY0_BACKENDS", "TRITON_DEFAULT_BACKEND")}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "sdk.cli", "conformance", "--backend", "cpu_interp",
                           "--timeout", "900", *argv], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=3600)


def test_vllm_cases_are_registered_with_their_library():
    from sdk.conformance.library import LIBRARIES, library_of
    from sdk.conformance.spec import registered
    specs = [s for s in registered().values() if s.library == "vllm"]
    assert len({s.name for s in specs}) >= 14
    assert all(s.tier == "library" and s.upstream.startswith("vllm: ") for s in specs)
    assert LIBRARIES["vllm"].origin == "vllm" and library_of(specs[0]) is LIBRARIES["vllm"]
    quick = sum(sum(c.quick for c in s.cases) * len(s.dtypes) for s in specs)
    assert quick >= 30


@needs_vllm
def test_vllm_quick_cases_pass_on_cpu_interp(tmp_path):
    from sdk.conformance.results import load_results
    out = tmp_path / "vllm.jsonl"
    proc = _conformance(tmp_path, "--groups", VLLM_GROUPS, "--quick", "--jobs", "2", "--out", str(out))
    assert out.exists(), proc.stderr[-3000:]
    version = importlib.metadata.version("vllm")
    records = load_results(out).records
    by_status: dict[str, list] = {}
    for r in records:
        by_status.setdefault(r.status, []).append(r)
        assert r.tier == "library" and r.library == f"vllm {version}"
    passed = by_status.pop("pass", [])
    assert len(passed) >= 30
    for r in passed:
        ran = [k for k in r.kernels if k["origin"] == "vllm" and k["status"] == "ran"]
        assert ran and all(k["launches"] > 0 for k in ran), r.kernel
    # vLLM 0.33's Triton KV-cache write asks torch.cuda for the device capability on any platform
    # but ROCm / XPU: an error in vLLM's Python code, named with its line
    errors = by_status.pop("error", [])
    assert {r.kernel for r in errors} <= {"lib_vllm_kv_cache_write"}
    assert all("torch.cuda.get_device_capability" in r.detail and "triton_reshape_and_cache_flash.py"
               in r.detail for r in errors)
    assert not by_status, {s: [f"{r.kernel}/{r.case}/{r.dtype}: {r.detail}" for r in rs]
                           for s, rs in by_status.items()}


def test_vllm_cases_are_skipped_when_vllm_does_not_import(tmp_path):
    from sdk.conformance.results import load_results
    (tmp_path / "hide_vllm.py").write_text("import sys\nsys.modules['vllm'] = None\n")
    out = tmp_path / "r.jsonl"
    proc = _conformance(tmp_path, "--kernels", "lib_vllm_topk_topp,lib_vllm_mrope", "--out", str(out),
                        env={"DAY0_KERNELS": "hide_vllm"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]  # skipped is no failure
    records = load_results(out).records
    assert len(records) == 5 and all(r.status == "skipped" for r in records)
    for r in records:
        assert r.tier == "library" and r.library == "vllm" and r.kernels == []
        assert r.detail.startswith("not installed: scripts/install-vllm.sh (import vllm")
