"""pytest plugin: `pytest --day0-backend=B` runs the conformance cases as tests.

Registered as the `pytest11` entry point `day0`. With `--day0-backend=B`, pytest collects one test
per (kernel, case, dtype) of the quick cases (every case with `--day0-full`), named
`day0::<kernel>[<case>-<dtype>]`, each running `run_case` in-process under `sdk.activate(B)`.
A mismatch fails with the verdict's detail; an unsupported kernel fails (not skips) with the
missing ops. `-k` selects as usual (`-k rmsnorm`). Without the option the plugin does nothing and
imports nothing beyond pytest.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("day0")
    group.addoption("--day0-backend", default=None, metavar="B",
                    help="run the day0 conformance suite on backend B (one test per case)")
    group.addoption("--day0-full", action="store_true", default=False,
                    help="with --day0-backend: every case, not only the quick ones")


class ConformanceFailure(Exception):
    """A conformance case did not pass; the message is the whole story."""


class Day0Item(pytest.Item):
    def __init__(self, *, spec, case, dtype, backend, **kwargs):
        super().__init__(**kwargs)
        self.spec, self.case, self.dtype, self.backend = spec, case, dtype, backend
        self.add_marker(pytest.mark.day0)
        self.user_properties.append(("group", spec.group))

    def runtest(self):
        import sdk
        from sdk.backend import registry
        from sdk.errors import UnsupportedOps

        from .check import run_case
        backend = registry.get(self.backend)
        try:
            with sdk.activate(self.backend):
                verdict = run_case(self.spec, self.case, self.dtype, backend.torch_device)
        except UnsupportedOps as exc:
            ops = "\n  ".join(str(op) for op in exc.ops)
            raise ConformanceFailure(f"unsupported on {self.backend}: {len(exc.ops)} op(s) "
                                     f"without a lowering:\n  {ops}") from None
        if verdict.status != "pass":
            raise ConformanceFailure(f"{verdict.detail} (max_abs={verdict.max_abs:.3g}, "
                                     f"max_rel={verdict.max_rel:.3g}"
                                     + (f", rmse={verdict.rmse:.3g})" if verdict.rmse is not None else ")"))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return f"{self.nodeid}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"day0 {self.spec.name}[{self.case.name}-{self.dtype}] on {self.backend}"


class Day0Suite(pytest.Collector):
    def __init__(self, *, backend, full, **kwargs):
        super().__init__(**kwargs)
        self.backend, self.full = backend, full

    def collect(self):
        from .runner import load_suite, select
        for spec, case, dtype in select(load_suite(), full=self.full):
            yield Day0Item.from_parent(self, name=f"{spec.name}[{case.name}-{dtype}]", spec=spec,
                                       case=case, dtype=dtype, backend=self.backend)


def pytest_configure(config):
    if config.getoption("--day0-backend", default=None):
        config.addinivalue_line("markers", "day0: a day0 conformance case")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    backend = config.getoption("--day0-backend", default=None)
    if not backend:
        return
    from sdk.backend import registry
    try:
        registry.get(backend)
    except Exception as exc:  # noqa: BLE001 - a usage error, said once
        raise pytest.UsageError(f"--day0-backend: {exc}") from None
    suite = Day0Suite.from_parent(session, name="day0", nodeid="day0", backend=backend,
                                  full=config.getoption("--day0-full"))
    collected = list(suite.collect())
    config.hook.pytest_collectreport(report=pytest.CollectReport(suite.nodeid, "passed", None, collected))
    items.extend(collected)
