"""pytest plugin: `pytest --day0-backend=B` runs the conformance cases as tests."""


def pytest_addoption(parser):
    group = parser.getgroup("day0")
    group.addoption("--day0-backend", default=None, help="run the day0 conformance suite on this backend")
