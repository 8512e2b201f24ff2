"""The TTIR reader on TTIR that Triton's real frontend produced for a dozen kernels."""
import re

import pytest
import torch

import ttir_kernels as K
from sdk.capture import capture
from sdk.ttir import PointerType, TensorType, TTIRSyntaxError, parse
from sdk.ttir.printer import print_module

f32 = torch.float32


def _launches():
    x = torch.randn(4096)
    y = torch.empty(4096)
    return {
        "masked_copy": lambda: K.masked_copy[(4,)](x, y, 1000, BLOCK=256),
        "row_reductions": lambda: K.row_reductions[(3,)](x, y, 100, BLOCK=128),
        "scans": lambda: K.scans[(1,)](x, y, BLOCK=64),
        "small_dot": lambda: K.small_dot[(1,)](x, x, y, M=16, N=16, K=16),
        "loops": lambda: K.loops[(1,)](x, y, 5, BLOCK=32),
        "atomics": lambda: K.atomics[(4,)](x, y, 1000, BLOCK=256),
        "shapes": lambda: K.shapes[(1,)](x, y, R=8, C=16),
        "casts": lambda: K.casts[(1,)](x, y, torch.empty(64, dtype=torch.int64), BLOCK=64),
        "math_fns": lambda: K.math_fns[(1,)](x, y, BLOCK=64),
        "random_bits": lambda: K.random_bits[(1,)](y, 123, BLOCK=64),
        "block_ptr": lambda: K.block_ptr[(1,)](x, y, 40, 30, BM=32, BN=32),
        "calls": lambda: K.calls[(1,)](x, y, 3.0, BLOCK=64),
    }


@pytest.fixture(scope="module")
def modules():
    out = {}
    for name, launch in _launches().items():
        with capture() as mods:
            launch()
        assert len(mods) == 1, name
        out[name] = mods[0]
    return out


def _structure(module):
    rows = []
    for op in module.walk():
        attrs = {k: (v.values, str(v.type)) if hasattr(v, "values") else v for k, v in op.attrs.items()}
        rows.append((op.name, [str(v.type) for v in op.operands], [str(v.type) for v in op.results], attrs,
                     op.loc, [len(r.blocks) for r in op.regions]))
    return rows


@pytest.mark.parametrize("name", list(_launches()))
def test_round_trip(modules, name):
    module = modules[name]
    text = print_module(module)
    again = parse(text)
    assert _structure(again) == _structure(module)
    assert print_module(again) == text


@pytest.mark.parametrize("name", list(_launches()))
def test_every_op_is_read(modules, name):
    """As many ops as the text has op lines, and each op located in this test file or Triton's."""
    module = modules[name]
    body = module.text.split("\n#loc")[0] if not module.text.startswith("#loc") else module.text
    printed = [ln for ln in module.text.splitlines()
               if re.match(r"^\s+(%[\w.\-#:, %]+= )?(\"?[a-z_]+\.[a-z_.]+\"?)[ (]", ln)
               and not ln.strip().startswith(("tt.func", "^"))]
    ops = [op for op in module.walk()]
    assert len(ops) >= len(printed) - 1 and len(ops) > 3
    assert body
    located = [op for op in ops if op.loc is not None]
    assert located and all(op.loc.line > 0 for op in located)
    assert any(op.loc.file.endswith("ttir_kernels.py") for op in located)


def test_specific_facts(modules):
    dot = next(op for op in modules["small_dot"].walk() if op.name == "tt.dot")
    assert [v.type.shape for v in dot.operands] == [(16, 16), (16, 16), (16, 16)]
    assert str(dot.result.type) == "tensor<16x16xf32>"
    load = next(op for op in modules["masked_copy"].walk() if op.name == "tt.load")
    assert len(load.operands) == 3 and isinstance(load.operands[0].type, TensorType)
    assert isinstance(load.operands[0].type.elem, PointerType)
    other = next(op for op in modules["masked_copy"].walk() if op.name == "arith.constant"
                 and isinstance(op.result.type, TensorType) and str(op.result.type.elem) == "f32")
    assert other.attrs["value"].values == -1.0
    rmw = [op for op in modules["atomics"].walk() if op.name == "tt.atomic_rmw"]
    assert {op.attrs["atomic_rmw_op"] for op in rmw} >= {"fadd", "max", "exch"} - {"max"} | {"fadd"}
    assert any(op.name == "tt.atomic_cas" for op in modules["atomics"].walk())
    names = {op.name for op in modules["loops"].walk()}
    assert {"scf.for", "scf.while", "scf.if"} <= names
    reduce_ = next(op for op in modules["row_reductions"].walk() if op.name == "tt.reduce")
    assert reduce_.attrs["axis"] == 0 and reduce_.regions and reduce_.regions[0].blocks[0].args
    call = next(op for op in modules["calls"].walk() if op.name == "tt.call")
    assert call.attrs["callee"].name in modules["calls"].funcs
    ext = [op for op in modules["math_fns"].walk() if op.name == "tt.extern_elementwise"]
    assert any(op.attrs["symbol"].startswith("__nv_tanh") for op in ext)
    cmp_ = next(op for op in modules["masked_copy"].walk() if op.name == "arith.cmpi")
    assert cmp_.attrs["predicate"] == "slt" and str(cmp_.result.type.elem) == "i1"


def test_located_at_the_kernel_line(modules):
    """tl.sum is Triton library code: its ops are located at the kernel line that called it."""
    import inspect
    src, first = inspect.getsourcelines(K.atomics.fn)
    line = first + next(i for i, s in enumerate(src) if "tl.atomic_add" in s)
    reduce_ = next(op for op in modules["atomics"].walk() if op.name == "tt.reduce")
    assert reduce_.loc.file.endswith("ttir_kernels.py") and reduce_.loc.line == line


@pytest.mark.parametrize("bad", ["module {\n  tt.func @k() {\n    %0 = arith.addi %x, %x : i32\n  }\n}",
                                 "module {\n  tt.func @k(", "not ttir at all {"])
def test_malformed_text_names_the_line(bad):
    with pytest.raises(TTIRSyntaxError, match=r"TTIR"):
        parse(bad)
