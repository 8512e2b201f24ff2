"""Worker containment, the slower half: forked children die with a crashed worker, a worker that
leaks memory is recycled and says so, out-of-memory items are retried alone (never a kernel
failure), and a killed runner leaves no worker and no log folder behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_runner_containment import LOG_PREFIX, RUNNER, TESTS, _alive, _items, _parent, _run, env, run_items  # noqa: E402,F401,E501

def test_a_forked_child_dies_with_its_crashed_worker(env, tmp_path):
    pids = tmp_path / "pids"
    got = _run(_items(2), {**env, "DAY0_CONTAIN": "fork", "DAY0_CONTAIN_FILE": str(pids)}, jobs=1, timeout=60)
    assert [o["status"] for _, o in got] == ["crash", "crash"] and "SIGSEGV" in got[0][1]["detail"]
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2
    time.sleep(0.5)
    assert not any(_alive(p) for p in children)


def test_a_leaking_worker_is_recycled_and_the_record_says_so(env):
    got = _run(_items(4), {**env, "DAY0_CONTAIN": "leak", "DAY0_WORKER_MEMORY_MB": "150"}, jobs=1, timeout=120)
    assert all(o["status"] == "pass" for _, o in got), got
    notes = [o["detail"] for _, o in got if "recycled" in o.get("detail", "")]
    assert notes and "MB over" in notes[0] and "DAY0_WORKER_MEMORY_MB" in notes[0]


def test_out_of_memory_is_retried_alone_and_never_a_kernel_failure(env, tmp_path):
    attempts = tmp_path / "attempts"
    items = _items(4)
    got = _run(items, {**env, "DAY0_CONTAIN": "oom", "DAY0_CONTAIN_FILE": str(attempts)}, jobs=2, timeout=120)
    assert sorted(i.key for i, _ in got) == sorted(i.key for i in items)  # each reported once
    for _, o in got:
        assert o["status"] == "pass" and "run again alone" in o["detail"], o
    assert len(attempts.read_text().split()) == 2 * len(items)


def test_a_killed_runner_leaves_no_worker_and_no_log_folder(env, tmp_path, monkeypatch):
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    # a temporary folder of its own: another run in it (another test process) would remove the
    # killed runner's folder before this test looks for it
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    proc = subprocess.Popen([sys.executable, str(script)], env={**env, "TMPDIR": str(private), "DAY0_BACKENDS":
                            "faulty=doubles.faulty_backend:FaultyBackend"}, start_new_session=True)
    workers: list[int] = []
    for _ in range(120):  # the worker starts, then hangs in the kernel
        time.sleep(0.5)
        out = subprocess.run(["pgrep", "-f", "sdk.conformance.worker"], capture_output=True, text=True).stdout
        workers = [int(p) for p in out.split() if int(p) != proc.pid and _parent(int(p)) == proc.pid]
        if workers:
            break
    assert workers, "no worker started"
    time.sleep(3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(20):
        time.sleep(0.5)
        if not any(_alive(p) for p in workers):
            break
    assert not any(_alive(p) for p in workers)
    stale = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"{LOG_PREFIX}{proc.pid}-")]
    assert stale  # kill -9 leaves it; the next run removes it
    _run([], env)  # nothing to run: returns at once without cleaning
    run_items(_items(1), lambda *a: None, env={**env, "DAY0_CONTAIN": ""}, timeout=120)
    assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(f"{LOG_PREFIX}{proc.pid}-")]
