"""Every quick kernel-tier item of the suite on cpu_interp's batched interpreter and on its reference
interpreter (reference.py), from the same seeded inputs: every tensor the item hands its kernels
must come out bit for bit the same (tests/cpu_interp_differential.py says how, and which exceptions
would be allowed: none are needed). About six minutes on two cores; the default suite runs a subset
that uses every op the quick suite uses (tests/test_cpu_interp_reference.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import sdk
from backends.cpu_interp import interp
from sdk.backend import registry
from sdk.conformance.check import case_seed
from sdk.conformance.spec import DTYPES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cpu_interp_differential import BATCHED, compare, quick_items  # noqa: E402
from test_cpu_interp_reference import SUITE_SUBSET  # noqa: E402

ITEMS = quick_items()


@pytest.mark.parametrize("spec,case,dtype", ITEMS, ids=[f"{s.name}/{c.name}/{d}" for s, c, d in ITEMS])
def test_batched_and_reference_agree_bit_for_bit(spec, case, dtype):
    assert compare(spec, case, dtype) == []


def test_the_default_subset_uses_every_op_the_quick_suite_uses(monkeypatch):
    """The default suite's subset (test_cpu_interp_reference.SUITE_SUBSET) stays representative:
    the ops its items' kernels hold are every op of the quick kernel tier's kernels."""
    seen: dict[str, set[str]] = {}
    current = [""]
    load = interp.Program.__init__

    def recording(self, module, *args, **kwargs):
        load(self, module, *args, **kwargs)
        seen.setdefault(current[0], set()).update(op.name for op in module.walk())

    monkeypatch.setattr(interp.Program, "__init__", recording)
    for spec, case, dtype in ITEMS:
        current[0] = f"{spec.name}/{case.name}/{dtype}"
        registry.get(BATCHED)._programs.clear()  # the item's kernels are loaded (and recorded) afresh
        inputs = spec.make_inputs(case, DTYPES[dtype], "cpu",
                                  torch.Generator().manual_seed(case_seed(spec.name, case.name, dtype)))
        with sdk.activate(BATCHED):
            spec.run(inputs, case)
    every = set().union(*seen.values())
    subset = set().union(*(seen.get("/".join(item), set()) for item in SUITE_SUBSET))
    assert every - subset == set(), "add an item using these ops to SUITE_SUBSET"
