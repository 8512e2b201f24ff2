"""Staged compilation: a backend's own MLIR stage through Triton's bindings is cached and dumpable
like Triton's own stages; a compiling backend with data-only capabilities takes the checked day0 IR
through stages of its own to a binary; unsupported ops stop compilation before any backend stage."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import sdk
from sdk.backend import registry
from sdk.errors import Day0Error, UnsupportedOps

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from doubles.staged_backends import LicmBackend, TextBackend  # noqa: E402

SCRIPT = r'''
import json, sys
import torch, triton, triton.language as tl
import sdk
from sdk.backend import registry
from doubles.staged_backends import RUNS, LicmBackend

registry.register(LicmBackend)

@triton.jit
def weighted_rows(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(n):
        w = tl.load(w_ptr + offs)  # loop-invariant: the backend's own stage hoists it
        acc += tl.load(x_ptr + i * BLOCK + offs) * w
    tl.store(out_ptr + offs, acc)

gen = torch.Generator().manual_seed(11)
x, w = torch.randn(8, 32, generator=gen), torch.randn(32, generator=gen)
out = torch.full((32,), float("nan"))
with sdk.activate("licm_stage"):
    k = weighted_rows[(1,)](x, w, out, 8, BLOCK=32)
torch.testing.assert_close(out, (x * w).sum(0))
first = lambda text: (text.index("tt.load"), text.index("scf.for"))
print(json.dumps({"asm": list(k.asm), "runs": RUNS, "ttir": first(k.asm["ttir"]),
                  "hoisted": first(k.asm["hoisted"]), "hoisted_text": k.asm["hoisted"]}))
'''


def _run(tmp_path: Path, cache: str, **env: str) -> tuple[dict, str]:
    script = tmp_path / "licm_user.py"
    script.write_text(SCRIPT)
    full = {k: v for k, v in os.environ.items() if not k.startswith("DAY0_DUMP")}
    full.update(TRITON_CACHE_DIR=str(tmp_path / cache),
                PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]), **env)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=full, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_an_mlir_stage_of_the_backend_is_cached_and_dumpable(tmp_path):
    folder = tmp_path / "dumps"
    dump = {"DAY0_DUMP_STAGES": "all", "DAY0_DUMP_DIR": str(folder)}
    out, _ = _run(tmp_path, "cache", **dump)
    assert out["asm"] == ["source", "ttir", "hoisted", "licmbin"]
    assert out["runs"] == {"ttir": 1, "hoisted": 1, "licmbin": 1}
    load, loop = out["ttir"]
    assert load > loop                      # after Triton's TTIR passes the load is in the loop
    load, loop = out["hoisted"]
    assert load < loop                      # the backend's stage hoisted it
    cached = [p for p in (tmp_path / "cache").rglob("weighted_rows.hoisted")]
    assert len(cached) == 1 and cached[0].read_text() == out["hoisted_text"]
    assert sorted(p.name for p in folder.iterdir()) == ["weighted_rows.hoisted", "weighted_rows.licmbin",
                                                         "weighted_rows.ttir"]
    assert (folder / "weighted_rows.hoisted").read_text() == out["hoisted_text"]

    again, _ = _run(tmp_path, "cache", **dump)  # a new process: Triton's cache serves every stage
    assert again["runs"] == {} and again["hoisted_text"] == out["hoisted_text"]


@triton.jit
def rows_times(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(n):
        acc += tl.load(x_ptr + i * BLOCK + offs) * tl.load(w_ptr + offs)
    tl.store(out_ptr + offs, acc)


def test_stages_named_in_the_options_are_dumped_to_stderr(capfd):
    registry.register(LicmBackend)
    try:
        gen = torch.Generator().manual_seed(13)
        x, w = torch.randn(4, 16, generator=gen), torch.randn(16, generator=gen)
        out = torch.full((16,), float("nan"))
        with sdk.activate("licm_stage"):
            k = rows_times[(1,)](x, w, out, 4, BLOCK=16, dump_stages=("hoisted",))
    finally:
        registry.unregister("licm_stage")
    torch.testing.assert_close(out, (x * w).sum(0))
    err = capfd.readouterr().err
    assert "// -----// day0 stage 'hoisted' of kernel 'rows_times' //----- //" in err
    assert k.asm["hoisted"].strip() in err and "day0 stage 'ttir'" not in err


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def exp_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.exp(tl.load(x_ptr + offs)).to(tl.float16))


@pytest.fixture(autouse=True)
def fresh_triton_cache(tmp_path, monkeypatch):
    """Every test compiles into its own cache: a hit left by an earlier run would skip the stages
    these tests watch."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


@pytest.fixture
def text_backend():
    registry.register(TextBackend)
    try:
        yield registry.get("text_stages")
    finally:
        registry.unregister("text_stages")


def test_a_compiling_backend_declares_capabilities_as_data_and_its_own_stages(text_backend):
    assert text_backend.lowering is None  # no rule table: it compiles
    gen = torch.Generator().manual_seed(12)
    x, y = torch.randn(1000, generator=gen), torch.randn(1000, generator=gen)
    out = torch.full_like(x, float("nan"))
    with sdk.activate("text_stages"):
        k = axpy[(4,)](x, y, out, 2.0, 1000, BLOCK=256)
    torch.testing.assert_close(out, 2.0 * x + y)
    from sdk.ttir import Module
    assert text_backend.seen == [("txtir", Module, True), ("txtbin", str, True)]
    assert list(k.asm) == ["source", "ttir", "txtir", "txtbin"]
    assert k.asm["txtir"].startswith("; axpy: ") and isinstance(k.asm["txtbin"], bytes)
    assert k.metadata.day0_native == 1.0  # no borrowed rules: the backend's own code did it all

    text_backend.seen.clear()
    with sdk.activate("text_stages"), pytest.raises(UnsupportedOps) as err:
        exp_kernel[(1,)](x, torch.empty(64, dtype=torch.float16), BLOCK=64)
    missing = {op.key() for op in err.value.ops}
    assert {"math.exp(f32 -> f32)", "arith.truncf(f32 -> f16)"} <= missing
    assert text_backend.seen == []  # refused before any stage of the backend ran


def test_a_stage_list_must_start_with_ttir_and_end_with_the_binary(text_backend, monkeypatch):
    from sdk.stages import Stage
    monkeypatch.setattr(TextBackend, "stages", lambda self, options: [Stage("txtbin", lambda m, c: b"")])
    x = torch.randn(16)
    with sdk.activate("text_stages"), pytest.raises(Day0Error, match="first stage must be 'ttir'"):
        axpy[(1,)](x, x, torch.empty_like(x), 1.0, 16, BLOCK=16)
    with pytest.raises(Day0Error, match="identifier"):
        Stage("not a name", lambda m, c: m)
