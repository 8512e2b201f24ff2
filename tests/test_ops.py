"""`day0 ops`: ops the suite needs that a lowering table lacks, from captured TTIR (nothing runs)."""
from __future__ import annotations

import json

import pytest

from sdk.backend import LoweringTable
from sdk.cli import main
from sdk.conformance.spec import registered
from sdk.report.ops import capture_kernel, missing_ops


@pytest.fixture(scope="module")
def captured():
    suite = registered()
    return [capture_kernel(suite["rmsnorm"]), capture_kernel(suite["silu_and_mul"])]


class Without(LoweringTable):
    """Accepts every op except the named ones (and, for `dtype`, only with that element type)."""

    def __init__(self, name: str, dtype: str = ""):
        super().__init__()
        self.name, self.dtype = name, dtype

    def supports(self, op) -> bool:
        return not (op.name == self.name and self.dtype in op.type_signature())


def test_capture_records_ttir_without_running(captured):
    rms, silu = captured
    assert rms.items == sum(c.quick for c in registered()["rmsnorm"].cases) * len(registered()["rmsnorm"].dtypes)
    assert not rms.errors and len(rms.modules) == rms.items
    names = {op.name for m in rms.modules for op in m.walk()}
    assert {"tt.load", "tt.store", "tt.reduce"} <= names
    assert "tt.reduce" not in {op.name for m in silu.modules for op in m.walk()}


def test_missing_op_blocks_kernels_and_models(captured):
    missing = missing_ops(captured, Without("tt.reduce"))
    assert len(missing) == 1
    m = missing[0]
    assert m.name == "tt.reduce" and m.key.startswith("tt.reduce(") and m.kernels == ["rmsnorm"]
    assert set(m.models) == set(registered()["rmsnorm"].models)
    assert m.example.startswith("/") or ".py:" in m.example
    # with bf16 loads only: the op key carries the element type
    missing = missing_ops(captured, Without("tt.load", "bf16"))
    assert missing and all(x.name == "tt.load" and "bf16" in x.signature for x in missing)
    assert {k for x in missing for k in x.kernels} == {"rmsnorm", "silu_and_mul"}
    # a model needing only these two kernels has that op as its only missing one
    models = {"a": ["rmsnorm"], "b": ["rmsnorm", "silu_and_mul"]}
    [m] = missing_ops(captured, Without("tt.reduce"), models)
    assert m.models == ["a", "b"] and m.alone == ["a", "b"]


def test_cpu_interp_lowers_these_kernels(capsys):
    rc = main(["ops", "--backend", "cpu_interp", "--kernels", "rmsnorm", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["kernels"] == ["rmsnorm"] and data["missing"] == [] and data["items"] > 0
    assert data["capture_errors"] == []


@pytest.mark.parametrize("argv, message", [
    (["ops", "--backend", "no_such_backend"], "unknown backend 'no_such_backend'"),
    (["ops", "--backend", "cpu_interp", "--kernels", "nope"], "unknown kernel 'nope'"),
    (["ops", "--backend", "../etc"], "not a backend name"),
])
def test_bad_names_one_line_exit_2(capsys, argv, message):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err
