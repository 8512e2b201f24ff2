"""Synthetic results files for the report tests, written through the runner's own record type.

The items are the suite's real ones (kernel names, groups, models, quick cases, dtypes); only the
outcomes are made up, by an `outcome(kernel, case, dtype, arch) -> (status, detail, ops)` function.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from sdk.conformance.results import Header, Record, suite_version, write_results
from sdk.conformance.spec import registered

Outcome = Callable[[str, str, str, str], tuple]


def suite_items() -> list[tuple[str, str, tuple[str, ...], str, str]]:
    """(kernel, group, models, case, dtype) of every quick item of the suite."""
    out = []
    for spec in registered().values():
        for case in spec.cases:
            if case.quick:
                out += [(spec.name, spec.group, spec.models, case.name, d) for d in spec.dtypes]
    return out


def version() -> str:
    return suite_version(registered().values())


def op(name: str, signature: str, loc: str = "k.py:1", source: str = "x = y") -> dict:
    return {"name": name, "signature": signature, "loc": loc, "source": source}


def write(path: Path, backend: str, device: str, outcome: Outcome, *, archs: tuple[str, ...] = ("host",),
          devices: dict[str, str] | None = None, compile_only: bool = False, kernels: set | None = None,
          suite: str | None = None) -> Path:
    """One results file; with several archs (compile-only), one record per item and arch whose
    backend is `backend@arch/compile` and device `devices[arch]`."""
    header = Header(suite_version=suite or version(), backend=backend, device=device, triton="3.6.0",
                    torch="2.13.0", day0="0.1.0", date="2026-01-01T00:00:00+00:00", host="test",
                    mode="quick", compile_only=compile_only, archs=list(archs))
    records = []
    for kernel, group, models, case, dtype in suite_items():
        if kernels is not None and kernel not in kernels:
            continue
        for arch in archs:
            status, detail, ops = (list(outcome(kernel, case, dtype, arch)) + ["", []])[:3]
            name = f"{backend}@{arch}/compile" if compile_only and len(archs) > 1 else backend
            records.append(Record(kernel=kernel, group=group, models=list(models), case=case,
                                  dtype=dtype, status=status, detail=detail, unsupported_ops=list(ops),
                                  wall_s=0.01, backend=name, arch=arch,
                                  device=(devices or {}).get(arch, device)))
    write_results(path, header, records)
    return path


def all_pass(kernel: str, case: str, dtype: str, arch: str) -> tuple:
    return ("pass",)


def seed_files(tmp: Path) -> list[Path]:
    """cpu_interp (run, everything passes) + nvidia_ref compile-only for sm_89 (L4) and sm_121
    (Spark) in one file; on sm_121 one GDN kernel fails to compile its bf16 items."""
    cpu = write(tmp / "cpu_interp.jsonl", "cpu_interp", "host_cpu", all_pass)

    def compiled(kernel, case, dtype, arch):
        if arch == "sm_121" and kernel == "gdn_solve_tril" and dtype == "bf16":
            return ("failed", "out of resource: shared memory, Required: 131072, Hardware limit: 101376")
        return ("compiled",)

    nv = write(tmp / "nvidia_ref.jsonl", "nvidia_ref", "nvidia_l4", compiled, archs=("sm_89", "sm_121"),
               devices={"sm_89": "nvidia_l4", "sm_121": "nvidia_gb10_spark"}, compile_only=True)
    return [cpu, nv]
