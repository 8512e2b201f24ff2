"""Worker containment: workers are pinned one per device and share the host's cores; the helpers
and the fixture here serve tests/slow/test_runner_containment_slow.py too (crashed workers' forked
children, leaking workers, out-of-memory retries, a killed runner)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sdk.conformance import spec as spec_mod
from sdk.conformance.runner import Item, LOG_PREFIX, run_items

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def env():
    saved = spec_mod.registered()
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(TESTS))
        sys.modules.pop("doubles.tiny_suite", None)
        import doubles.tiny_suite  # noqa: F401  (registers the tiny kernels here too)
        yield {**os.environ, "DAY0_KERNELS": "doubles.tiny_suite",
               "DAY0_BACKENDS": "contain=doubles.faulty_backend:ContainBackend",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    spec_mod._REGISTRY.clear()
    spec_mod._REGISTRY.update(saved)
    sys.modules.pop("doubles.tiny_suite", None)


def _items(n=4):
    cases = [c.name for c in spec_mod.registered()["tiny_add"].cases][:n]
    return [Item("tiny_add", c, d, "contain", "host") for c in cases for d in ("fp32", "fp16")][:n]


def _run(items, env, **kw):
    got = []
    run_items(items, lambda item, outcome: got.append((item, outcome)), env=env, **kw)
    return got


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie waiting for its parent counts as gone
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_workers_are_pinned_one_per_device(env, tmp_path):
    got = _run(_items(4), {**env, "DAY0_CONTAIN": "probe", "DAY0_DEVICES": "3,5",
                           "DAY0_CONTAIN_FILE": str(tmp_path / "devices")}, jobs=2, timeout=120)
    seen = {s["cuda_visible_devices"] for _, o in got for s in o["launch_stats"]}
    assert seen == {"3", "5"}, got


def test_workers_share_the_cores_unless_told_otherwise(env):
    from sdk.conformance.runner import thread_shares
    assert thread_shares(1, 16) == {} and thread_shares(3, 2)["OMP_NUM_THREADS"] == "1"
    assert thread_shares(2, 16) == {"OMP_NUM_THREADS": "8", "DAY0_CPU_THREADS": "8"}
    share = thread_shares(2)["OMP_NUM_THREADS"]
    env = {k: v for k, v in env.items() if k not in ("OMP_NUM_THREADS", "DAY0_CPU_THREADS")}
    got = _run(_items(2), {**env, "DAY0_CONTAIN": "probe"}, jobs=2, timeout=120)
    assert {tuple(s["threads"]) for _, o in got for s in o["launch_stats"]} == {(share, share)}, got
    got = _run(_items(2), {**env, "DAY0_CONTAIN": "probe", "OMP_NUM_THREADS": "3"}, jobs=2, timeout=120)
    assert {tuple(s["threads"]) for _, o in got for s in o["launch_stats"]} == {("3", share)}, got
    got = _run(_items(2), {**env, "DAY0_CONTAIN": "probe"}, jobs=1, timeout=120)
    assert {tuple(s["threads"]) for _, o in got for s in o["launch_stats"]} == {("", "")}, got


RUNNER = r'''
import sys, os
from sdk.conformance.runner import Item, run_items
from sdk.conformance.spec import registered
import doubles.tiny_suite
case = registered()["tiny_hang"].cases[0].name
run_items([Item("tiny_hang", case, "fp32", "faulty", "host")], lambda *a: None, timeout=600)
'''


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().split(")")[-1].split()[1])
    except OSError:
        return -1


def test_devices_come_from_the_visible_cuda_devices_for_a_cuda_backend(env):
    from sdk.backend import registry
    from sdk.conformance.runner import device_slots
    from doubles.faulty_backend import FaultyBackend

    class OnCuda(FaultyBackend):  # device selection only: nothing is launched
        name = "on_cuda"
        torch_device = "cuda"

    registry.register(OnCuda, "on_cuda")
    try:
        cuda_items = [Item("tiny_add", "c", "fp32", "on_cuda", "host")]
        assert device_slots(cuda_items, {"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
        assert device_slots(cuda_items, {"CUDA_VISIBLE_DEVICES": "4"}) == []  # one device: nothing to spread
        assert device_slots(_items(1), {"CUDA_VISIBLE_DEVICES": "2,3"}) == []  # a host backend is not pinned
        assert device_slots(_items(1), {"DAY0_DEVICES": "0,1"}) == ["0", "1"]
    finally:
        registry.unregister("on_cuda")
