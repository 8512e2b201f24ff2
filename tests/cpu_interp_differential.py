"""The batched interpreter against the reference interpreter (shared by the fast subset in
tests/test_cpu_interp_reference.py, the tutorials, and the whole quick suite in tests/slow/).

Per conformance item (`compare`): the item runs twice from the same memory (its seeded inputs,
its outputs poisoned): once on `cpu_interp` (the batched fast path) and once on
`cpu_interp@reference` (one program at a time, reference.py). Every tensor the item hands its
kernels must come out bit for bit the same: outputs, in-place state and inputs alike (NaN payloads
included).

Per launch (`shadow`): inside the context, every launch on `cpu_interp` runs on the batched
interpreter, then again on the reference interpreter from the same memory; every tensor the
launch can reach (its arguments and `extra_tensors`) must hold the same bytes after both.

Both pin every launch to the interpreter (`interpreter_tier`): the tiers "auto" and "compiled" run
the kernels the compiled tier lowers natively, and it is the batched interpreter that is compared here
(the compiled tier is held to the interpreter by tests/test_cpu_compiled*.py).

Documented exceptions: none are needed today. Reductions (tt.reduce, tt.scan) use the same order in
both (numpy's ufunc order for a one-op combine, else the same tree of pairs), element-wise rules
and tt.dot are one shared definition, and atomics apply lanes in program order in both. Were an op
to order a float computation differently in the two, it would be listed here with the bound that
holds instead, and `compare` would apply it to that op's kernels only.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

import sdk
from backends.cpu_interp import backend as cpu_backend, interp, reference, tier as tiers
from sdk.arguments import host_arg
from sdk.backend import DeviceArg, TensorDescArg
from sdk.conformance.check import case_seed, poison_
from sdk.conformance.spec import DTYPES, KernelSpec, registered

BATCHED, REFERENCE = "cpu_interp", "cpu_interp@reference"


@contextlib.contextmanager
def interpreter_tier():
    """Every cpu_interp launch inside runs on the kernel's interpreter, whichever tier compiled it
    (Triton keeps a compiled kernel for the process, whatever DAY0_CPU_TIER says later, so the
    launch is what is pinned)."""
    native_run = tiers.TieredKernel.run

    def run(self, grid, args, extra=()):
        self.tier, self.tier_detail = "interp", "pinned to the interpreter by the differential test"
        self.interp().run(grid, args, extra)
    tiers.TieredKernel.run = run
    try:
        yield
    finally:
        tiers.TieredKernel.run = native_run


def quick_items(names: list[str] | None = None) -> list[tuple[KernelSpec, object, str]]:
    """(spec, case, dtype) of every quick case of the kernel tier (or of the kernels named)."""
    suite = registered()
    specs = [suite[n] for n in names] if names else [s for s in suite.values() if s.tier == "kernel"]
    return [(s, c, d) for s in specs for c in s.cases if c.quick for d in s.dtypes]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def compare(spec: KernelSpec, case, dtype: str) -> list[str]:
    """What differs between the two interpreters on one item (empty: bit for bit the same).

    The item's seeded inputs are made once, its outputs poisoned, and every tensor is copied; each
    interpreter then starts from those very bytes (buffers the item allocates uninitialised
    included), runs the item's launch wrapper, and leaves its tensors to compare."""
    gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, dtype))
    inputs = spec.make_inputs(case, DTYPES[dtype], "cpu", gen)
    for name in spec.outputs:
        if name not in spec.inplace:
            poison_(inputs[name])
    names = [k for k, v in inputs.items() if isinstance(v, torch.Tensor)]
    start = {k: inputs[k].clone() for k in names}
    after = {}
    for backend in (BATCHED, REFERENCE):
        for k in names:
            inputs[k].copy_(start[k])
        with interpreter_tier(), sdk.activate(backend):
            spec.run(inputs, case)
        after[backend] = {k: inputs[k].clone() for k in names}
    out = []
    for name in names:
        a, b = after[BATCHED][name], after[REFERENCE][name]
        if not torch.equal(bits(a), bits(b)):
            differ = (bits(a) != bits(b)).reshape(-1, a.element_size()).any(dim=1)
            k = int(differ.nonzero()[0])
            out.append(f"{name}: {int(differ.sum())} of {a.numel()} element(s) differ, first at flat index "
                       f"{k}: batched {a.reshape(-1)[k].item()!r}, reference {b.reshape(-1)[k].item()!r}")
    return [f"{spec.name}/{case.name}/{dtype}: {d}" for d in out]


@contextlib.contextmanager
def shadow():
    """Replay every batched cpu_interp launch inside on the reference interpreter and compare the
    memory both leave behind; yields the list of differences found (one line per tensor)."""
    found: list[str] = []
    replays: dict = {}  # a loaded kernel (tier.TieredKernel) -> its reference program
    batched_launch = cpu_backend.CpuInterpBackend.launch

    def launch(self, kernel, grid, args, stream=None):
        if not isinstance(kernel.interp(), interp.Program):  # the reference interpreter already
            return batched_launch(self, kernel, grid, args, stream)
        extra = [host_arg(t, f"extra[{k}]") for k, t in enumerate(cpu_backend._EXTRA.get())]
        tensors = [a.base if isinstance(a, TensorDescArg) else a for a in args]
        tensors = [a for a in tensors if isinstance(a, DeviceArg)] + extra
        before = [t.handle.copy() for t in tensors]
        batched_launch(self, kernel, grid, args, stream)
        after = [t.handle.copy() for t in tensors]
        for t, b in zip(tensors, before):
            t.handle[:] = b
        if kernel not in replays:
            replays[kernel] = reference.Program(kernel.module)
        replays[kernel].run(grid, args, extra)
        for t, a in zip(tensors, after):
            if not np.array_equal(t.handle, a):
                n = int((t.handle != a).sum())
                found.append(f"{kernel.module.entry.name} grid {tuple(grid)}: '{t.name}' differs in {n} byte(s)")
                t.handle[:] = a  # the batched result stands

    cpu_backend.CpuInterpBackend.launch = launch
    try:
        with interpreter_tier():
            yield found
    finally:
        cpu_backend.CpuInterpBackend.launch = batched_launch
