#!/usr/bin/env python3
"""Run Triton's own language tests on a day0 backend and summarise them per test function.

    python scripts/triton_language_tests.py TESTS_DIR --out results/cpu_interp/triton_language_tests
    python scripts/triton_language_tests.py TESTS_DIR --tier compiled --files test_core.py \\
        --per-function 3 --out /tmp/core_compiled --force
    python scripts/triton_language_tests.py TESTS_DIR --per-function 0 --jobs 16 --time-limit 540 \\
        --out /tmp/all --force            # then again with --resume instead of --force

TESTS_DIR is a directory holding Triton's tests: a checkout of the Triton repository, its
`python/test`, or `python/test/unit/language` (nothing is downloaded; the tests should come from the
commit of the installed Triton, since newer tests use newer APIs). The script finds the conftest that
defines pytest's `--device` option, collects each test file, picks up to `--per-function` cases of
every test function (spread evenly over its parametrisations; 0 runs them all), and runs them in
child pytest processes with `TRITON_DEFAULT_BACKEND=<backend>`, `--device <the backend's torch
device>` and `DAY0_CPU_TIER=<tier>`; when that device is not "cuda", CUDA and HIP devices are hidden
from the children, so a test that reaches for torch.cuda fails as it would on a host without a GPU
instead of running there. A child that crashes, runs one case past `--timeout` (and a grace:
pytest-timeout, where installed, fails the case at the limit itself) or runs past
`--chunk-timeout` costs the case it was running (recorded as crash/timeout) and the run goes on
after it.

`--jobs N` runs N child processes at once, each over its own chunk of at most `--chunk-size` cases
of one test file (a file's cases dealt round-robin over its chunks, so that a slow test function's
cases do not queue in one child; the next chunk goes to the first child free; torch's and
cpu_interp's thread pools get the host's cores / N each). Every case runs exactly once either way, so the outcomes are those of a
serial run. Each finished case is appended to `OUT.cases.jsonl` as its chunk ends (rewritten in
collection order when the run ends); `--resume` keeps the cases that file holds and runs the rest.
`--time-limit S` stops the run S seconds after it started: no chunk starts after that, running
children are stopped (their finished cases kept), and the summary counts the cases not run, for a
later `--resume` to finish.

Failures are put in classes, by the first matching rule of `--classes FILE` (a JSON list of
{"match": regex over "nodeid message", "class": "a".."d", "reason": "..."}), else of the built-in
rules below, else "unclassified":
  a  a bug of the backend (day0's to fix)
  b  the test needs CUDA or HIP specifics (layouts, PTX, device == "cuda", num_ctas > 1, ...)
  c  not this Triton version (an API the installed Triton lacks)
  d  the test asserts what Triton's own interpreter mode (TRITON_INTERPRET=1) does
The summary (`OUT.md`, `OUT.json`, written atomically; an existing one only with --force or
--resume) has one row per test function: cases collected, run, passed, failed, skipped, and the
failures' classes.
Exit status: 0 when it ran (whatever the tests said), 2 with one line for a bad argument.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import signal
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
LOG_ENV = "DAY0_LANGTEST_LOG"
CLASSES = {"a": "day0 bug", "b": "needs CUDA/HIP specifics", "c": "not this Triton version",
           "d": "asserts Triton interpreter-mode behaviour"}

# Built-in rules: what a failure's text says about where it comes from.
BUILTIN_RULES = [
    (r"Torch not compiled with CUDA|torch\.cuda\.|Found no NVIDIA driver|No CUDA GPUs are available|"
     r"cuda.*not available", "b",
     "calls CUDA through torch"),
    (r"inline_asm|PTX|ptx|nvvm|\bllir\b.*expected|amdgcn|hsaco|cubin", "b", "checks CUDA/HIP artefacts"),
    (r"ttgir|TTGIR|#ttg\.|BlockedLayout|DistributedLayout|SharedLayout|NVMMA|warp_specialize", "b",
     "uses GPU layouts or warp specialisation"),
    (r"AttributeError: module 'triton[\w.]*' has no attribute|ImportError: cannot import name .* from 'triton",
     "c", "an API the installed Triton lacks"),
]


# ----------------------------------------------------------------------------------------------
# The pytest plugin side: a child process loads this module with `-p` and logs each case's outcome.

def pytest_runtest_logreport(report) -> None:  # noqa: D401 - pytest hook
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    rec = None
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if getattr(report, "wasxfail", None) is not None:
            outcome = "xfailed" if report.skipped else "xpassed"
        elif report.when != "call" and report.failed:
            outcome = "error"
        rec = {"nodeid": report.nodeid, "outcome": outcome, "when": report.when,
               "duration": round(report.duration, 3), "message": _message(report)}
        if report.when == "call":
            rec.update(_launch_tiers())
    if rec is not None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
            fh.flush()


def pytest_runtest_logstart(nodeid, location) -> None:  # noqa: D401 - pytest hook
    path = os.environ.get(LOG_ENV)
    _launch_tiers()  # what an earlier case's teardown launched is not this case's
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"nodeid": nodeid, "outcome": "started"}) + "\n")


def _launch_tiers() -> dict:
    """The launches since the last call, by the tier that ran them ({"launches": {tier: n},
    "interp_why": [...]}), for a backend that reports them (`take_launch_stats`, as cpu_interp
    does); {} when nothing launched or day0 was never imported."""
    mod = sys.modules.get("sdk.backend")
    name = os.environ.get("TRITON_DEFAULT_BACKEND", "")
    if mod is None or name not in mod.registry.names():
        return {}
    try:
        stats = mod.registry.get(name).take_launch_stats()
    except Exception:  # noqa: BLE001 - a backend that cannot say leaves the record as it was
        return {}
    tiers: collections.Counter = collections.Counter()
    why = set()
    for s in stats:
        tier = str(s.get("tier", "?"))
        tiers[tier] += int(s.get("launches", 0))
        if tier != "compiled" and s.get("detail"):
            why.add(" ".join(str(s["detail"]).split())[:200])
    if not tiers:
        return {}
    return {"launches": dict(tiers), **({"interp_why": sorted(why)[:3]} if why else {})}


def _message(report) -> str:
    if report.passed:
        return ""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])[:400]
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return " ".join(text.split())[:600]


# ----------------------------------------------------------------------------------------------
# The driver side.

class ArgError(Exception):
    pass


def find_layout(tests_dir: Path) -> tuple[Path, Path]:
    """(rootdir: the folder whose conftest.py defines --device, the language tests folder)."""
    if not tests_dir.is_dir():
        raise ArgError(f"{tests_dir}: not a directory")
    candidates = [tests_dir, tests_dir / "unit" / "language", tests_dir / "python" / "test" / "unit" / "language"]
    lang = next((c for c in candidates if (c / "test_core.py").is_file()), None)
    if lang is None:
        raise ArgError(f"{tests_dir}: holds no Triton language tests (no test_core.py in it, in "
                       f"unit/language or in python/test/unit/language)")
    for folder in [lang, *lang.parents]:
        conftest = folder / "conftest.py"
        if conftest.is_file() and '"--device"' in conftest.read_text(errors="replace"):
            return folder, lang
        if folder == tests_dir.parent:
            break
    raise ArgError(f"{lang}: no conftest.py above it defines pytest's --device option")


def child_env(backend: str, tier: str, device: str, log: Path | None, jobs: int = 1) -> dict:
    """The children's environment: the backend and tier selected, Triton's interpreter mode off,
    this file importable as their pytest plugin, GPUs hidden unless the backend's device is "cuda",
    and with several children each one's share of the cores for torch's and cpu_interp's threads."""
    from sdk.conformance.runner import thread_shares
    env = dict(os.environ)
    env["TRITON_DEFAULT_BACKEND"] = backend
    env["DAY0_CPU_TIER"] = tier
    env.pop("TRITON_INTERPRET", None)
    if device != "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["HIP_VISIBLE_DEVICES"] = ""
    for name, value in thread_shares(jobs).items():
        env.setdefault(name, value)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), str(HERE.parent),
                                                    env.get("PYTHONPATH", "")] if p)
    if log is not None:
        env[LOG_ENV] = str(log)
    return env


def child_command(rootdir: Path, device: str, timeout: int) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", HERE.stem,
           "--rootdir", str(rootdir), "-c", os.devnull, "--device", device, "-q", "--tb=line",
           "-o", "console_output_style=classic"]
    if timeout and _has_timeout_plugin():
        cmd += ["--timeout", str(timeout)]
    return cmd


def _has_timeout_plugin() -> bool:
    import importlib.util
    return importlib.util.find_spec("pytest_timeout") is not None


def collect(rootdir: Path, path: Path, env: dict, device: str) -> tuple[list[str], str]:
    """The node ids of one test file (absolute), or ([], why) when it does not collect."""
    cmd = child_command(rootdir, device, 0) + ["--collect-only", str(path)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    ids = [str(rootdir / line.strip()) for line in proc.stdout.splitlines()
           if "::" in line and not line.startswith((" ", "<")) and line.strip().startswith(
               str(path.relative_to(rootdir)))]
    if not ids and proc.returncode not in (0, 5):
        lines = [ln[1:].strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("E ")]
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [f"pytest exited {proc.returncode}"]
        return [], (lines[-1] if lines else tail[0])[:400]
    return ids, ""


def function_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[1].split("[", 1)[0]


def sample(ids: list[str], per_function: int) -> list[str]:
    groups: dict[str, list[str]] = collections.OrderedDict()
    for i in ids:
        groups.setdefault(function_of(i), []).append(i)
    picked = []
    for group in groups.values():
        if per_function <= 0 or len(group) <= per_function:
            picked += group
        else:
            step = len(group) / per_function
            picked += [group[int(k * step + step / 2)] for k in range(per_function)]
    return picked


def _run_child(cmd: list[str], env: dict, limit: float, log: Path, case_limit: float) -> tuple[int | str, str]:
    """Run one child pytest in its own process group (what it starts dies with it when it is
    stopped); (its exit status, "timeout" past `limit` or "case-timeout" when one case ran
    `case_limit` seconds (0: no limit), the tail of its output). The case limit is watched here,
    through the outcome log, so that it holds where pytest-timeout is missing or cannot interrupt
    (a long native call)."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        began = time.monotonic()
        watch = _CaseWatch(log)
        ended: int | str | None = None
        try:
            while ended is None:
                try:
                    ended = proc.wait(timeout=min(1.0, max(0.05, limit - (time.monotonic() - began))))
                except subprocess.TimeoutExpired:
                    if time.monotonic() - began >= limit:
                        ended = "timeout"
                    elif case_limit and watch.running_for() > case_limit:
                        ended = "case-timeout"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the child, or what it left running
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        out.seek(0, os.SEEK_END)
        out.seek(max(0, out.tell() - 4000))
        return ended, out.read()[-600:]


class _CaseWatch:
    """How long the case a child is running has been running, read from its outcome log."""

    def __init__(self, log: Path):
        self.log, self.offset, self.case, self.since = log, 0, None, time.monotonic()

    def running_for(self) -> float:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return 0.0
        complete = chunk[:chunk.rfind("\n") + 1]
        self.offset += len(complete.encode("utf-8", errors="replace"))
        for line in complete.splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("outcome") == "started":
                self.case, self.since = rec.get("nodeid"), time.monotonic()
            elif rec.get("nodeid") == self.case:  # its outcome (a skip or error in setup included)
                self.case = None
        return time.monotonic() - self.since if self.case is not None else 0.0


def run_cases(rootdir: Path, ids: list[str], env: dict, device: str, timeout: int,
              chunk_timeout: int, log: Path, deadline: float | None = None) -> dict[str, dict]:
    """Run `ids`, resuming after a crash or a timed-out child; returns nodeid -> record. A case
    that runs `timeout` seconds and a grace past it gets its child stopped (pytest-timeout, where
    installed, fails it at `timeout`). At `deadline` (time.monotonic()) the child is stopped and
    the cases it had not finished are left out, unrecorded."""
    results: dict[str, dict] = {}
    pending = list(ids)
    case_limit = timeout + max(5.0, timeout / 4) if timeout else 0.0
    while pending:
        limit = chunk_timeout if deadline is None else min(chunk_timeout, deadline - time.monotonic())
        if limit <= 0:
            break
        with tempfile.NamedTemporaryFile("w", suffix=".args", delete=False) as fh:
            fh.write("\n".join(pending) + "\n")
            argfile = fh.name
        log.write_text("")
        cmd = child_command(rootdir, device, timeout) + [f"@{argfile}"]
        try:
            ended, tail = _run_child(cmd, env, limit, log, case_limit)
        finally:
            os.unlink(argfile)
        started = None  # the last case the child began
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by the crash
                continue
            key = _short(rootdir, rec["nodeid"])
            if rec["outcome"] == "started":
                started = key
            elif not (rec["when"] == "teardown" and key in results and results[key]["outcome"] != "passed"):
                results[key] = rec  # a failed teardown counts unless the case already failed
        rest = [i for i in pending if _short(rootdir, i) not in results]
        if not rest or (ended == "timeout" and limit < chunk_timeout):
            break  # done, or stopped at the deadline (not the case's fault)
        if started is None or started in results:
            # the child ended without running these, and not inside a case (it stopped before its
            # first case, or pytest could not find them): an error each, with what the child said
            for i in rest:
                results[_short(rootdir, i)] = {"outcome": "error", "when": "collect", "message":
                                               f"pytest exited {ended}: " + " ".join(tail.split())[-300:]}
            break
        culprit = started
        if ended == "case-timeout":
            why = f"Timeout: the case ran past --timeout ({timeout} s) and its child pytest was stopped"
        else:
            why = f"child pytest ended ({ended}) while this case ran"
        results[culprit] = {"outcome": "crash" if isinstance(ended, int) else "timeout", "when": "call",
                            "message": why}
        pending = [i for i in rest if _short(rootdir, i) != culprit]
    return results


def run_parallel(rootdir: Path, ids: list[str], envs: list[dict], device: str, timeout: int,
                 chunk_timeout: int, chunk_size: int, deadline: float | None, record) -> dict[str, dict]:
    """Run `ids` in chunks (`make_chunks`), one child per env of `envs` at once (each env names its
    own outcome log); `record(results)` is called with each chunk's results as it ends. Returns
    nodeid -> record for every case that ran."""
    chunks = make_chunks(ids, chunk_size)
    results: dict[str, dict] = {}
    lock = threading.Lock()
    state = {"next": 0, "done": 0}

    def worker(env: dict) -> None:
        while True:
            with lock:
                k = state["next"]
                if k >= len(chunks) or (deadline is not None and time.monotonic() >= deadline):
                    return
                state["next"] += 1
            got = run_cases(rootdir, chunks[k], env, device, timeout, chunk_timeout, Path(env[LOG_ENV]),
                            deadline)
            with lock:
                results.update(got)
                record(got)
                state["done"] += 1
                print(f"chunk {state['done']}/{len(chunks)}: {len(results)}/{len(ids)} cases run",
                      file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker, args=(env,), daemon=True) for env in envs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def make_chunks(ids: list[str], size: int) -> list[list[str]]:
    """Chunks of at most `size` cases, each from one test file (its child imports one test module),
    the cases of a file dealt round-robin over that file's chunks, so that the cases of one slow
    test function spread over several children instead of queueing in one."""
    by_file: dict[str, list[str]] = collections.OrderedDict()
    for i in ids:
        by_file.setdefault(i.split("::", 1)[0], []).append(i)
    chunks = []
    for group in by_file.values():
        k = -(-len(group) // size)
        chunks += [group[j::k] for j in range(k)]
    return chunks


def read_records(path: Path) -> dict[str, dict]:
    """The case records of an earlier run (OUT.cases.jsonl): case -> record; a line cut short by a
    killed run is skipped (its case runs again)."""
    from sdk.fileio import read_text
    records = {}
    for line in read_text(path, "case records file").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("case"), str) and isinstance(rec.get("outcome"), str):
            records[rec["case"]] = rec
    return records


def _short(rootdir: Path, nodeid: str) -> str:
    p = str(rootdir) + os.sep
    return nodeid[len(p):] if nodeid.startswith(p) else nodeid


def load_rules(path: str | None) -> list[tuple[re.Pattern, str, str]]:
    rules = []
    if path:
        sys.path.insert(0, str(ROOT))
        from sdk.errors import ConfigError
        from sdk.fileio import read_text
        try:
            data = json.loads(read_text(path, "classes file"))
        except (ConfigError, json.JSONDecodeError) as exc:
            raise ArgError(f"--classes {path}: {exc}") from None
        if not isinstance(data, list):
            raise ArgError(f"--classes {path}: must be a JSON list of {{match, class, reason}}")
        for i, item in enumerate(data):
            if not isinstance(item, dict) or item.get("class") not in CLASSES or not isinstance(
                    item.get("match"), str):
                raise ArgError(f"--classes {path}: entry {i} needs a 'match' regex and a 'class' "
                               f"among {', '.join(CLASSES)}")
            try:
                rules.append((re.compile(item["match"]), item["class"], str(item.get("reason", ""))))
            except re.error as exc:
                raise ArgError(f"--classes {path}: entry {i}: bad regex ({exc})") from None
    rules += [(re.compile(m), c, r) for m, c, r in BUILTIN_RULES]
    return rules


def classify(nodeid: str, message: str, rules) -> tuple[str, str]:
    text = f"{nodeid} {message}"
    for pattern, cls, reason in rules:
        if pattern.search(text):
            return cls, reason
    return "unclassified", ""


FAILED = ("failed", "error", "crash", "timeout", "xpassed")


def summarise(collected: dict[str, list[str]], uncollected: dict[str, str], results: dict[str, dict],
              rootdir: Path, rules) -> list[dict]:
    rows: dict[tuple[str, str], dict] = collections.OrderedDict()
    for path, ids in collected.items():
        for i in ids:
            key = (path, function_of(i))
            row = rows.setdefault(key, {"file": path, "function": key[1], "collected": 0, "run": 0,
                                        "passed": 0, "failed": 0, "skipped": 0, "xfailed": 0,
                                        "classes": collections.Counter(), "failures": [],
                                        "launches": collections.Counter(), "cases_interp": 0})
            row["collected"] += 1
            rec = results.get(_short(rootdir, i))
            if rec is None:
                continue
            row["run"] += 1
            row["launches"].update(rec.get("launches") or {})
            if any(t != "compiled" for t in rec.get("launches") or {}):
                row["cases_interp"] += 1
            out = rec["outcome"]
            if out == "passed":
                row["passed"] += 1
            elif out == "skipped":
                row["skipped"] += 1
            elif out == "xfailed":
                row["xfailed"] += 1
            else:
                row["failed"] += 1
                cls, reason = classify(_short(rootdir, i), rec.get("message", ""), rules)
                row["classes"][cls] += 1
                row["failures"].append({"case": _short(rootdir, i).split("::", 1)[1], "outcome": out,
                                        "class": cls, "reason": reason,
                                        "message": rec.get("message", "")[:300]})
    out = []
    for row in rows.values():
        row["classes"] = dict(sorted(row["classes"].items()))
        row["launches"] = dict(sorted(row["launches"].items()))
        out.append(row)
    for path, why in uncollected.items():
        cls, reason = classify(path, why, rules)
        out.append({"file": path, "function": "(collection)", "collected": 0, "run": 0, "passed": 0,
                    "failed": 1, "skipped": 0, "xfailed": 0, "classes": {cls: 1},
                    "failures": [{"case": path, "outcome": "error", "class": cls, "reason": reason,
                                  "message": why[:300]}]})
    return out


def tier_totals(records) -> tuple[dict, dict]:
    """Launches by tier over the case records, and per reason an interpreted launch gave (the
    backend's words, op signatures left out), how many cases gave it."""
    launches: collections.Counter = collections.Counter()
    why: collections.Counter = collections.Counter()
    for rec in records:
        launches.update(rec.get("launches") or {})
        why.update({_without_signatures(w) for w in rec.get("interp_why") or []})
    return dict(sorted(launches.items())), dict(why.most_common())


def _without_signatures(why: str) -> str:
    """`why` without the parenthesised operand types after op names ("tt.call (f32 x i32)"), and
    without a group cut short at the end."""
    return re.sub(r" \([^()]*$", "", re.sub(r" \((?:[^()]|\([^()]*\))*\)", "", why)).strip()


def render_tiers(meta: dict, rows: list[dict]) -> list[str]:
    """The markdown section saying which tier ran the launches, where the backend reported it."""
    t = meta["totals"]
    if not t.get("launches"):
        return []
    lines = ["", "## Which tier ran the launches", "",
             "- launches: " + ", ".join(f"{n} {tier}" for tier, n in t["launches"].items())
             + f"; cases with a launch not compiled: {t.get('cases_interp', 0)}"]
    if t.get("interp_why"):
        lines += ["", "| cases | why a launch was not compiled (the backend's words) |", "|---:|---|"]
        lines += [f"| {n} | {why} |" for why, n in t["interp_why"].items()]
    fell_back = [r for r in rows if r.get("cases_interp")]
    if fell_back:
        lines += ["", "| file | test function | cases with a launch not compiled | launches by tier |",
                  "|---|---|---:|---|"]
        lines += [f"| {r['file']} | {r['function']} | {r['cases_interp']} | "
                  + ", ".join(f"{tier} {n}" for tier, n in r["launches"].items()) + " |" for r in fell_back]
    return lines


def render_md(meta: dict, rows: list[dict]) -> str:
    t = meta["totals"]
    lines = [f"# Triton's language tests on {meta['backend']} (tier {meta['tier']})", "",
             f"- tests from Triton commit `{meta['tests_commit']}`; installed Triton {meta['triton']}",
             f"- {f'up to {n} cases' if (n := meta['per_function']) else 'every case'} of every test function;"
             f" device `{meta['device']}`; {meta.get('jobs', 1)} child process(es) at once"
             + (f", {meta['timeout']} s per case" if meta.get("timeout") else "") + f"; {meta['wall_s']:.0f} s"
             + (f" (plus the earlier run whose {meta['kept_from_earlier_run']} cases this one kept)"
                if meta.get("kept_from_earlier_run") else ""),
             f"- {t['run']} cases run: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped,"
             f" {t['xfailed']} xfailed"
             + (f"; {t['not_run']} of the {t['chosen']} chosen not run (stopped at --time-limit)"
                if t.get("not_run") else "")
             + (f"; {n} test file(s) did not collect" if (n := t.get("files_not_collected")) else ""),
             "- failures by class" + (" (the files that did not collect included)"
                                      if t.get("files_not_collected") else "") + ": " + ", ".join(
                 f"{c} ({CLASSES.get(c, c)}): {t['classes'].get(c, 0)}"
                 for c in [*CLASSES, *sorted(set(t["classes"]) - set(CLASSES))]), "",
             "| file | test function | collected | run | pass | fail | skip | failure classes |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        classes = ", ".join(f"{c}:{n}" for c, n in r["classes"].items())
        reasons = sorted({f["reason"] for f in r["failures"] if f["reason"]})
        note = classes + (f" ({'; '.join(reasons)})" if reasons else "")
        lines.append(f"| {r['file']} | {r['function']} | {r['collected']} | {r['run']} | {r['passed']} | "
                     f"{r['failed']} | {r['skipped'] + r['xfailed']} | {note} |")
    unclassified = [(r, f) for r in rows for f in r["failures"] if f["class"] in ("a", "unclassified")]
    if unclassified:
        lines += ["", "## Failures of class a or unclassified", ""]
        for r, f in unclassified:
            lines.append(f"- `{r['file']}::{f['case']}` [{f['class']}] {f['outcome']}: {f['message']}")
    lines += render_tiers(meta, rows)
    return "\n".join(lines) + "\n"


def tests_commit(lang: Path, given: str | None) -> str:
    if given:
        return given
    proc = subprocess.run(["git", "-C", str(lang), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests_dir", help="folder holding Triton's tests (repo, python/test or unit/language)")
    ap.add_argument("--out", required=True,
                    help="output prefix: writes OUT.md, OUT.json and the case records OUT.cases.jsonl")
    ap.add_argument("--backend", default="cpu_interp")
    ap.add_argument("--tier", default="auto", choices=["auto", "interp", "compiled"])
    ap.add_argument("--files", default="", help="comma-separated test file names (default: every test_*.py)")
    ap.add_argument("--functions", default="", help="regex: only test functions whose name matches")
    ap.add_argument("--per-function", type=int, default=4, help="cases per test function (0: all)")
    ap.add_argument("--timeout", type=int, default=300,
                    help="seconds per case (0: none): pytest-timeout, where installed, fails the case then; "
                    "its child is stopped a grace later in any case")
    ap.add_argument("--chunk-timeout", type=int, default=900, help="seconds per child pytest")
    ap.add_argument("--jobs", type=int, default=1, metavar="N", help="child pytest processes at once")
    ap.add_argument("--chunk-size", type=int, default=100, metavar="K",
                    help="most cases one child runs, all from one test file (default 100)")
    ap.add_argument("--time-limit", type=float, default=0, metavar="S",
                    help="stop the run S seconds after it started (0: no limit); --resume finishes it")
    ap.add_argument("--classes", help="JSON rules that classify failures (see the module's docstring)")
    ap.add_argument("--tests-commit", help="the Triton commit the tests come from (default: git)")
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="overwrite OUT.md, OUT.json, OUT.cases.jsonl")
    again.add_argument("--resume", action="store_true",
                       help="keep the cases OUT.cases.jsonl holds and run the rest")
    return ap.parse_args(argv)


def check_args(args) -> tuple[Path, Path, re.Pattern | None, list[Path]]:
    """(rootdir, language tests folder, --functions regex, test files), or ArgError."""
    rootdir, lang = find_layout(Path(args.tests_dir).resolve())
    if args.per_function < 0 or args.timeout < 0 or args.chunk_timeout <= 0:
        raise ArgError("--per-function and --timeout must be >= 0, --chunk-timeout > 0")
    if args.jobs < 1 or args.chunk_size < 1 or not args.time_limit >= 0:
        raise ArgError("--jobs and --chunk-size must be >= 1, --time-limit >= 0")
    try:
        fn_re = re.compile(args.functions) if args.functions else None
    except re.error as exc:
        raise ArgError(f"--functions: bad regex ({exc})") from None
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ArgError(f"--out: folder {out.parent} does not exist")
    outputs = [Path(args.out + ext) for ext in (".md", ".json", ".cases.jsonl")]
    for p in outputs:
        if p.exists() and not (args.force or args.resume):
            raise ArgError(f"{p} exists; pass --force to overwrite it or --resume to continue it")
        if p.exists() and not p.is_file():
            raise ArgError(f"{p} exists and is not a regular file")
    if args.resume and not outputs[2].is_file():
        raise ArgError(f"--resume: {outputs[2]} does not exist (nothing to continue)")
    names = [f.strip() for f in args.files.split(",") if f.strip()]
    files = [lang / n for n in names] if names else sorted(lang.glob("test_*.py"))
    for f in files:
        if not f.is_file():
            raise ArgError(f"--files: {f.name} is not in {lang}")
    return rootdir, lang, fn_re, files


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    try:
        rootdir, lang, fn_re, files = check_args(args)
        rules = load_rules(args.classes)
        from sdk.backend import registry
        from sdk.errors import ConfigError, Day0Error
        try:
            device = type(registry.get(args.backend)).torch_device
        except Day0Error as exc:
            raise ArgError(f"--backend: {exc}") from None
        cases_path = Path(args.out + ".cases.jsonl")
        try:
            earlier = read_records(cases_path) if args.resume else {}
        except ConfigError as exc:
            raise ArgError(f"--resume: {exc}") from None
    except ArgError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from concurrent.futures import ThreadPoolExecutor

    import triton
    from sdk.fileio import atomic_write_text, json_text

    start = time.monotonic()
    deadline = start + args.time_limit if args.time_limit else None
    with tempfile.TemporaryDirectory() as tmp:
        envs = [child_env(args.backend, args.tier, device, Path(tmp) / f"outcomes{k}.jsonl", args.jobs)
                for k in range(args.jobs)]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            found = list(pool.map(lambda f: collect(rootdir, f, envs[0], device), files))
        collected, uncollected, chosen = {}, {}, []
        for f, (ids, why) in zip(files, found):
            rel = str(f.relative_to(rootdir))
            if fn_re is not None:
                ids = [i for i in ids if fn_re.search(function_of(i))]
            if why:
                uncollected[rel] = why
            elif ids:
                collected[rel] = ids
                chosen += sample(ids, args.per_function)
            print(f"{rel}: {len(ids)} collected{', ' + why if why else ''}", file=sys.stderr)
        results = {k: v for k, v in earlier.items() if k in {_short(rootdir, i) for i in chosen}}
        todo = [i for i in chosen if _short(rootdir, i) not in results]
        print(f"running {len(todo)} cases ({len(results)} kept from {cases_path}) in {args.jobs} "
              f"child process(es)", file=sys.stderr, flush=True)
        if not args.resume:
            atomic_write_text(cases_path, "")
        with open(cases_path, "a", encoding="utf-8") as records:
            def record(got: dict[str, dict]) -> None:
                for key, rec in got.items():
                    records.write(json_text(case_record(key, rec)) + "\n")
                records.flush()
            results.update(run_parallel(rootdir, todo, envs, device, args.timeout, args.chunk_timeout,
                                        args.chunk_size, deadline, record))
    order = [_short(rootdir, i) for i in chosen]
    atomic_write_text(cases_path, "".join(json_text(case_record(k, results[k])) + "\n"
                                          for k in order if k in results))
    rows = summarise(collected, uncollected, results, rootdir, rules)
    cases = [r for r in rows if r["function"] != "(collection)"]
    totals = {k: sum(r[k] for r in cases) for k in ("collected", "run", "passed", "failed", "skipped", "xfailed")}
    totals["files_not_collected"] = len(uncollected)
    totals["chosen"] = len(chosen)
    totals["not_run"] = sum(1 for k in order if k not in results)
    classes = collections.Counter()
    for r in rows:
        classes.update(r["classes"])
    totals["classes"] = dict(sorted(classes.items()))
    totals["launches"], totals["interp_why"] = tier_totals(results[k] for k in order if k in results)
    totals["cases_interp"] = sum(r["cases_interp"] for r in cases)
    meta = {"backend": args.backend, "tier": args.tier, "device": device, "triton": triton.__version__,
            "tests_commit": tests_commit(lang, args.tests_commit), "per_function": args.per_function,
            "files": [str(f.relative_to(rootdir)) for f in files], "jobs": args.jobs,
            "chunk_size": args.chunk_size, "timeout": args.timeout,
            "wall_s": time.monotonic() - start, "kept_from_earlier_run": len(order) - len(todo),
            "class_names": CLASSES, "totals": totals}
    out_md, out_json = Path(args.out + ".md"), Path(args.out + ".json")
    atomic_write_text(out_json, json_text({"meta": meta, "functions": rows}) + "\n")
    atomic_write_text(out_md, render_md(meta, rows))
    print(f"{totals['run']} cases: {totals['passed']} passed, {totals['failed']} failed, "
          f"{totals['skipped']} skipped, {totals['not_run']} not run; classes {totals['classes']}; "
          f"wrote {out_md}, {out_json} and {cases_path}")
    return 0


def case_record(key: str, rec: dict) -> dict:
    """One line of OUT.cases.jsonl: the case (relative to the tests' rootdir) and its outcome."""
    return {"case": key, **{k: rec[k] for k in ("outcome", "when", "duration", "message", "launches",
                                                 "interp_why") if k in rec}}


if __name__ == "__main__":
    sys.exit(main())
