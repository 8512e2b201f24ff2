"""A tiny conformance suite for runner tests (import it through DAY0_KERNELS=doubles.tiny_suite).

Kernels: tiny_add / tiny_scale pass on cpu_interp; tiny_wrong computes the wrong thing (fail);
tiny_raise raises in its launch wrapper (error); tiny_crash / tiny_hang launch kernels whose names
the `faulty` backend double segfaults or hangs on (they pass on cpu_interp).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

TOL = {"fp32": Tolerance(atol=1e-6, rtol=1e-6), "fp16": Tolerance(atol=1e-3, rtol=1e-3)}


@triton.jit
def _tiny_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def _tiny_crash_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def _tiny_hang_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _inputs(case, dtype, device, gen):
    n = case.params["n"]
    x = torch.randn(n, generator=gen).to(dtype).to(device)
    y = torch.randn(n, generator=gen).to(dtype).to(device)
    return {"x": x, "y": y, "out": torch.empty(n, dtype=dtype, device=device)}


def _launcher(kernel):
    def run(inp, case):
        n = inp["x"].numel()
        kernel[(triton.cdiv(n, 64),)](inp["x"], inp["y"], inp["out"], n, BLOCK=64)
    return run


def _add_ref(inp, case):
    return {"out": inp["x"].double() + inp["y"].double()}


def _wrong_ref(inp, case):
    return {"out": inp["x"].double() - inp["y"].double()}


def _scale_run(inp, case):
    # out = x + x, through the same kernel
    n = inp["x"].numel()
    _tiny_add_kernel[(triton.cdiv(n, 64),)](inp["x"], inp["x"], inp["out"], n, BLOCK=64)


def _scale_ref(inp, case):
    return {"out": 2 * inp["x"].double()}


def _raise_run(inp, case):
    raise RuntimeError("launch wrapper refused the shape")


CASES = (Case("n100", {"n": 100}), Case("n77", {"n": 77}), Case("n4096", {"n": 4096}, quick=False))


def _spec(name, group, models, run, ref, cases=CASES, dtypes=("fp32", "fp16")):
    return register(KernelSpec(name=name, group=group, models=models, cases=cases, dtypes=dtypes,
                               make_inputs=_inputs, run=run, reference=ref, outputs=("out",),
                               tolerance=TOL, description=f"test double: {name}"))


_spec("tiny_add", "tiny_math", ("tiny_model", "tiny_other"), _launcher(_tiny_add_kernel), _add_ref)
_spec("tiny_scale", "tiny_scale", ("tiny_model",), _scale_run, _scale_ref)
_spec("tiny_wrong", "tiny_math", ("tiny_broken",), _launcher(_tiny_add_kernel), _wrong_ref,
      cases=CASES[:1], dtypes=("fp32",))
_spec("tiny_raise", "tiny_math", ("tiny_broken",), _raise_run, _add_ref, cases=CASES[:1], dtypes=("fp32",))
_spec("tiny_crash", "tiny_faults", ("tiny_faulty",), _launcher(_tiny_crash_kernel), _add_ref,
      cases=CASES[:1], dtypes=("fp32",))
_spec("tiny_hang", "tiny_faults", ("tiny_faulty",), _launcher(_tiny_hang_kernel), _add_ref,
      cases=CASES[:1], dtypes=("fp32",))
