"""Every kernel of the suite says what it mirrors (`KernelSpec.upstream`): the serving-stack or library
kernel, or, where serving stacks run no hand-written Triton, what they run instead. docs/kernels.md
and the report show it, so an empty or vague provenance is a bug."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sdk.conformance.library import library_of
from sdk.conformance.manifests import load_manifests
from sdk.conformance.spec import KernelSpec, registered

SPECS = registered()
# where no hand-written Triton exists, the provenance says what runs instead
NO_TRITON = re.compile(r"C\+\+ op|Inductor-generated|PyTorch|vendor (BLAS|library)")
# a source file of the upstream project (a path ending in a file name), a C++ op or a torch function
SOURCE = re.compile(r"[\w/]+\.(py|cu)\b|\bops\.\w+|_C\.\w+|\btorch\.[\w.]+")


def problem(spec: KernelSpec) -> str:
    """"" when the spec's provenance says what it mirrors, else what is wrong with it."""
    up = spec.upstream.strip()
    if not up:
        return "no upstream"
    if not SOURCE.search(up):
        return f"names no source file or op: {up!r}"
    if spec.tier == "library":
        origin = library_of(spec).origin
        return "" if up.startswith(f"{origin}: ") else f"does not start with its library '{origin}: ': {up!r}"
    if up.lower().startswith(("vllm", "openai triton_kernels")) or NO_TRITON.search(up):
        return ""
    return f"neither a serving-stack kernel nor what serving stacks run instead: {up!r}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_registered_spec_names_what_it_mirrors(name):
    assert problem(SPECS[name]) == "", name


def test_every_kernel_a_manifest_lists_has_provenance():
    listed = {k: m.name for m in load_manifests().values() for k in m.kernels}
    assert set(listed) <= set(SPECS), sorted(set(listed) - set(SPECS))  # also checked by test_manifests
    assert {k: (listed[k], problem(SPECS[k])) for k in listed if problem(SPECS[k])} == {}


@pytest.mark.parametrize("upstream, what", [
    ("", "no upstream"),
    ("   ", "no upstream"),
    ("a Triton kernel in some serving stack", "names no source file"),
    ("somewhere: layers/norm.py rms_norm", "neither a serving-stack kernel"),
])
def test_empty_or_vague_provenance_is_reported(upstream, what):
    assert what in problem(replace(SPECS["rmsnorm"], upstream=upstream))


def test_library_provenance_names_its_library():
    spec = SPECS["lib_fla_chunk_gdn"]
    assert problem(spec) == ""
    assert "does not start with its library 'fla: '" in problem(replace(spec, upstream="vllm: x/chunk.py f"))
