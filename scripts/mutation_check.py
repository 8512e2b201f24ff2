#!/usr/bin/env python3
"""Mutation testing of day0's two detectors: plant a realistic bug, see whether it is caught.

    python scripts/mutation_check.py --out results/cpu_interp/mutation_check [--force | --update]
        [--only ID,..] [--detectors d1,d2] [--jobs N] [--label before] [--deadline S] [--check]

Each mutant (scripts/mutants.py) is one or more edits (file, exact original snippet, replacement);
it is applied to a scratch copy of the tree (never to the tree itself), the detectors run in that
copy, and the copy is discarded. Detectors:
  d1   `python -m sdk.cli conformance --quick --jobs 2` (the whole quick suite; `--d1-scope subset`
       runs only the groups or kernels the mutant names, where it names some)
  d2   the mutant's pytest files with `-x -q`
  d1c  d1 with every kernel on the compiled tier (DAY0_CPU_TIER=compiled), for compiled-tier mutants
Outcomes: caught, survived, broke (the detector could not run: an import error, every item failing,
a pytest usage error), timeout. d1 is judged against an unmutated run made in the same invocation
(the "baseline"): caught when the command exits 1 and some item that passes on the baseline does not
pass; an item that differs only in the exit code is reported as such.

Writes PREFIX.json and PREFIX.md atomically after every mutant (a killed run keeps what finished);
an existing output is replaced only with --force, or merged into with --update (runs of other
labels kept). Bad arguments: one line, exit 2.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

DETECTORS = ("d1", "d2", "d1c")
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", "results", "day0-results",
                                     ".mut", ".pytest_cache", "*.egg-info", ".home")


class BadArgs(Exception):
    pass


# ------------------------------------------------------------------------------ the scratch tree
def make_tree(src: Path, mutant, scratch: Path) -> Path:
    """A copy of `src` with the mutant's edits applied; each original snippet must occur once."""
    tree = scratch / "tree"
    shutil.copytree(src, tree, ignore=COPY_IGNORE, symlinks=True)
    for file, old, new in mutant.edits:
        path = tree / file
        text = path.read_text()
        n = text.count(old)
        if n != 1:
            raise BadArgs(f"mutant {mutant.id}: the snippet occurs {n} times in {file} (need exactly 1)")
        path.write_text(text.replace(old, new))
    (scratch / "home").mkdir()
    return tree


def check_mutants(src: Path, mutants) -> list[str]:
    """Problems with the mutant list: a snippet not occurring exactly once, a missing file."""
    problems = []
    for m in mutants:
        for file, old, new in m.edits:
            path = src / file
            if not path.is_file():
                problems.append(f"{m.id}: no file {file}")
                continue
            n = path.read_text().count(old)
            if n != 1:
                problems.append(f"{m.id}: snippet occurs {n} times in {file}")
            if old == new:
                problems.append(f"{m.id}: replacement equals the original")
    return problems


#: a cache directory shared by every run (--shared-cache): Triton's cache key holds the backend's
#: source digest and the compiled tier's object cache its compiler's, so mutants never share a kernel
SHARED: list[Path] = []


def _env(tree: Path, home: Path, extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DAY0_KERNELS", "DAY0_CPU_TIER")}
    cache = SHARED[0] if SHARED else home
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(tree), extra.pop("PYTHONPATH", "")])),
               HOME=str(cache), TRITON_CACHE_DIR=str(cache / "triton"), OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


#: when set (time.monotonic() value), every detector still running then is stopped (--hard-stop)
HARD_STOP: list[float] = []


def _run(cmd, cwd: Path, env: dict, timeout: float, stop=None) -> tuple[int | None, str, float, str]:
    """Run `cmd` in its own process group; returns (exit code or None, output, seconds, why it was
    stopped: "" / "timeout" / "hard stop" / "early"). `stop()` is polled: True ends the run early."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        why = ""
        while proc.poll() is None:
            time.sleep(1.0)
            now = time.monotonic()
            if now - start > timeout:
                why = "timeout"
            elif HARD_STOP and now > HARD_STOP[0]:
                why = "hard stop"
            elif stop is not None and stop():
                why = "early"
            if why:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                proc.wait()
                break
        log.seek(0)
        text = log.read()
    return (None if why else proc.returncode), text, time.monotonic() - start, why


def _records(path: Path) -> dict:
    items = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "record":
                items[f"{rec['kernel']}/{rec['case']}/{rec['dtype']}"] = [rec["status"], (rec.get("detail") or "")[:160]]
    return items


# ------------------------------------------------------------------------------------ detectors
def run_d1(python: str, tree: Path, home: Path, mutant, args, compiled: bool, known_bad: set | None = None) -> dict:
    """The conformance run. With --d1-early, it is stopped at the first failing item (one that is
    not failing unmutated, where the baseline has finished), unless the mutant asks for a full run."""
    out = home / ("d1c.jsonl" if compiled else "d1.jsonl")
    cmd = [python, "-m", "sdk.cli", "conformance", "--quick", "--jobs", str(args.d1_jobs), "--timeout",
           str(args.item_timeout), "--out", str(out), "--force"]
    if args.d1_scope == "subset" and mutant is not None and mutant.d1:
        cmd += list(mutant.d1)
    extra = dict(args.env)
    if compiled:
        extra["DAY0_CPU_TIER"] = "compiled"
    stop = None
    if args.d1_early and mutant is not None and not mutant.full_d1:
        def stop() -> bool:
            bad = known_bad if known_bad is not None else set()
            return any(s == "fail" and k not in bad for k, (s, _) in _records(out).items())
    rc, text, wall, why = _run(cmd, tree, _env(tree, home, extra), args.cmd_timeout, stop)
    items = _records(out)
    return {"rc": rc, "wall_s": round(wall, 1), "items": items, "scope": " ".join(cmd[12:]) or "quick",
            "stopped": why, "tail": "" if items else text[-600:]}


#: pytest node ids that fail on the unmutated tree here (--d2-baseline): deselected in every d2 run
D2_KNOWN_BAD: list[str] = []


def run_d2(python: str, tree: Path, home: Path, mutant, args, stop_first: bool = True) -> dict:
    cmd = [python, "-m", "pytest", *(["-x"] if stop_first else []), "-q", "-p", "no:cacheprovider", *mutant.d2]
    cmd += [f"--deselect={node}" for node in D2_KNOWN_BAD]
    rc, text, wall, why = _run(cmd, tree, _env(tree, home, dict(args.env)), args.cmd_timeout)
    failed = [ln[len("FAILED "):].split(" - ")[0] for ln in text.splitlines() if ln.startswith("FAILED ")]
    errors = [ln[len("ERROR "):].split(" - ")[0] for ln in text.splitlines() if ln.startswith("ERROR ")]
    summary = next((ln.strip("= ") for ln in reversed(text.splitlines()) if " in " in ln and "=" in ln), "")
    return {"rc": rc, "wall_s": round(wall, 1), "failed": (failed + errors)[:3], "all_failed": failed + errors,
            "summary": summary[:200],
            "files": list(mutant.d2), "stopped": why, "tail": text[-600:] if rc not in (0, 1) else ""}


def judge_d1(res: dict, base: dict | None) -> dict:
    """caught / survived / broke / timeout of a d1 run, against the baseline run's items."""
    if res["rc"] is None and res.get("stopped") != "early":
        return {"outcome": "timeout" if res.get("stopped") == "timeout" else "cut", "why": res.get("stopped", "")}
    items = res["items"]
    if not items:
        return {"outcome": "broke", "why": "no records"}
    ok = ("pass", "skipped")
    base_items = (base or {}).get("items") or {}
    reference = {k for k, (s, _) in base_items.items() if s in ok} if base_items else set(items)
    regressed = sorted(k for k, (s, _) in items.items() if k in reference and s not in ok)
    if not regressed:
        return {"outcome": "survived", "regressed": 0}
    statuses: dict[str, int] = {}
    for k in regressed:
        statuses[items[k][0]] = statuses.get(items[k][0], 0) + 1
    kernels = sorted({k.split("/")[0] for k in regressed})
    info = {"regressed": len(regressed), "statuses": statuses, "kernels": kernels[:12],
            "n_kernels": len(kernels), "first": [f"{k}: {items[k][0]} {items[k][1]}" for k in regressed[:2]]}
    if res.get("stopped") == "early":
        return {"outcome": "caught", "why": f"stopped early, after {len(items)} items", **info}
    if len(regressed) >= 0.9 * max(1, len(reference)):
        return {"outcome": "broke", "why": "(nearly) every item fails", **info}
    if res["rc"] != 1:
        return {"outcome": "survived", "why": f"records fail but the command exits {res['rc']}", **info}
    return {"outcome": "caught", **info}


def judge_all(res: dict, baseline: dict) -> None:
    """Judge a mutant's d1 / d1c runs against the baseline's (in place; the item lists dropped)."""
    for det in ("d1", "d1c"):
        r = res.get(det)
        if isinstance(r, dict) and "items" in r:
            r.update(judge_d1(r, baseline.get(det) or baseline.get("d1")))
            r["items_n"] = len(r.pop("items"))


def judge_d2(res: dict) -> dict:
    rc = res["rc"]
    if rc is None:
        return {"outcome": "timeout" if res.get("stopped") == "timeout" else "cut", "why": res.get("stopped", "")}
    if rc == 0:
        return {"outcome": "survived"}
    if rc == 1:
        return {"outcome": "caught", "failed": res["failed"]}
    return {"outcome": "broke", "why": f"pytest exit {rc}", "failed": res["failed"]}


# ----------------------------------------------------------------------------------------- main
def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mutation_check.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=False, default=None, help="output prefix: PREFIX.json and PREFIX.md")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--force", action="store_true", help="replace existing outputs")
    g.add_argument("--update", action="store_true", help="merge into existing outputs")
    p.add_argument("--only", default="", help="mutant ids (comma-separated; default: all)")
    p.add_argument("--areas", default="", help="only the mutants of these areas (comma-separated)")
    p.add_argument("--detectors", default="d1,d2", help="of d1,d2,d1c (d1c only runs for compiled-tier mutants)")
    p.add_argument("--d1-scope", choices=("full", "subset"), default="full")
    p.add_argument("--label", default="before", help="the name of this run (before, after, ...)")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    p.add_argument("--d1-jobs", type=int, default=2, help="--jobs of each conformance run")
    p.add_argument("--item-timeout", type=int, default=120)
    p.add_argument("--cmd-timeout", type=int, default=1200)
    p.add_argument("--deadline", type=float, default=0.0, help="seconds after which no new mutant starts")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--env", action="append", default=[], help="K=V set for every detector run")
    p.add_argument("--no-baseline", action="store_true", help="judge d1 against 'every item passes'")
    p.add_argument("--check", action="store_true", help="only check that every mutant applies; run nothing")
    p.add_argument("--d1-early", action="store_true", help="stop d1 at the first newly failing item")
    p.add_argument("--hard-stop", type=float, default=0.0, help="seconds after which running detectors are killed")
    p.add_argument("--d2-baseline", action="store_true",
                   help="first run every d2 file set unmutated; tests failing there are deselected after")
    p.add_argument("--shared-cache", default="", help="one HOME / Triton cache directory for every run")
    a = p.parse_args(argv)
    for name, low in (("jobs", 1), ("d1_jobs", 1), ("item_timeout", 1), ("cmd_timeout", 1)):
        if getattr(a, name) < low:
            raise BadArgs(f"--{name.replace('_', '-')} must be >= {low}")
    a.detectors = [d.strip() for d in a.detectors.split(",") if d.strip()]
    bad = [d for d in a.detectors if d not in DETECTORS]
    if bad or not a.detectors:
        raise BadArgs(f"--detectors: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(DETECTORS)})")
    env = {}
    for kv in a.env:
        if "=" not in kv:
            raise BadArgs(f"--env {kv!r}: expected K=V")
        k, v = kv.split("=", 1)
        env[k] = v
    a.env = env
    if not a.check and not a.out:
        raise BadArgs("--out PREFIX is required (or --check)")
    if not a.label.replace("-", "").replace("_", "").isalnum():
        raise BadArgs(f"--label {a.label!r}: letters, digits, '-' and '_' only")
    return a


def select(mutants, only: str):
    if not only:
        return list(mutants)
    want = [x.strip() for x in only.split(",") if x.strip()]
    known = {m.id: m for m in mutants}
    unknown = [w for w in want if w not in known]
    if unknown:
        raise BadArgs(f"--only: unknown mutant(s) {', '.join(unknown)}")
    return [known[w] for w in want]


def load_existing(prefix: Path, args) -> dict:
    js, md = prefix.with_suffix(".json"), prefix.with_suffix(".md")
    exists = js.exists() or md.exists()
    if exists and not (args.force or args.update):
        raise BadArgs(f"{js} exists: pass --force to replace it or --update to merge into it")
    if args.update and js.exists():
        try:
            return json.loads(js.read_text())
        except ValueError:
            raise BadArgs(f"{js}: not a JSON file written by this script") from None
    return {"mutants": {}, "runs": {}}


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        from mutants import MUTANTS
        mutants = select(MUTANTS, args.only)
        if args.areas:
            areas = {a.strip() for a in args.areas.split(",")}
            unknown = areas - {m.area for m in MUTANTS}
            if unknown:
                raise BadArgs(f"--areas: unknown {', '.join(sorted(unknown))}")
            mutants = [m for m in mutants if m.area in areas]
        problems = check_mutants(ROOT, mutants)
        if args.check:
            for line in problems:
                print(line)
            print(f"{len(mutants)} mutants, {len(problems)} problem(s)")
            return 1 if problems else 0
        if problems:
            raise BadArgs(f"{len(problems)} mutant(s) do not apply: {problems[0]}")
        prefix = Path(args.out)
        if not prefix.parent.is_dir():
            raise BadArgs(f"--out {prefix}: no directory {prefix.parent}")
        data = load_existing(prefix, args)
    except BadArgs as exc:
        print(f"mutation_check: {exc}", file=sys.stderr)
        return 2
    from mutation_report import render, write_atomic
    import mutants as mutants_mod

    lock = threading.Lock()
    start = time.monotonic()
    if args.hard_stop:
        HARD_STOP.append(start + args.hard_stop)
    if args.shared_cache:
        SHARED.append(Path(args.shared_cache).resolve())
        SHARED[0].mkdir(parents=True, exist_ok=True)
    label = args.label
    data["runs"][label] = {"detectors": args.detectors, "d1_scope": args.d1_scope, "python": args.python,
                           "host_cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                           "jobs": args.jobs, "env": args.env}
    for m in mutants_mod.MUTANTS:
        data["mutants"].setdefault(m.id, {})
        data["mutants"][m.id].update(mutants_mod.describe(m))

    def save():
        write_atomic(prefix.with_suffix(".json"), json.dumps(data, indent=1, sort_keys=True) + "\n")
        write_atomic(prefix.with_suffix(".md"), render(data))

    baseline: dict = {}

    def one(m) -> None:
        if m is not None and args.deadline and time.monotonic() - start > args.deadline:
            with lock:
                data["mutants"][m.id].setdefault("results", {})[label] = {"skipped": "deadline"}
                save()
            return
        scratch = Path(tempfile.mkdtemp(prefix="day0-mut-"))
        t0 = time.monotonic()
        try:
            tree = make_tree(ROOT, m if m is not None else mutants_mod.BASELINE, scratch)
            home = scratch / "home"
            res: dict = {}
            for det in args.detectors:
                if det == "d1c" and (m is None or m.area != "compiled"):
                    if m is not None:
                        continue
                if det == "d2" and m is None:
                    continue
                if det == "d2":
                    if not m.d2:
                        continue
                    r = run_d2(args.python, tree, home, m, args)
                    res[det] = {**r, **judge_d2(r)}
                else:
                    known = None
                    if baseline.get(det):
                        known = {k for k, (s, _) in baseline[det]["items"].items() if s not in ("pass", "skipped")}
                    r = run_d1(args.python, tree, home, m, args, compiled=det == "d1c", known_bad=known)
                    res[det] = r
        except BadArgs as exc:
            res = {"error": str(exc)}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        res["wall_s"] = round(time.monotonic() - t0, 1)
        with lock:
            if m is None:
                baseline.update(res)
                data["runs"][label]["baseline"] = {d: {"rc": r["rc"], "wall_s": r["wall_s"],
                                                       "not_pass": sorted(k for k, (s, _) in r["items"].items()
                                                                          if s not in ("pass", "skipped")),
                                                       "items": len(r["items"])}
                                                   for d, r in res.items() if isinstance(r, dict)}
            else:
                if baseline or args.no_baseline:
                    judge_all(res, baseline)
                data["mutants"][m.id].setdefault("results", {})[label] = res
                save()
            print(f"[{time.monotonic() - start:6.0f}s] {'baseline' if m is None else m.id}: "
                  + ", ".join(f"{d}={r.get('outcome', r.get('rc'))}" for d, r in res.items() if isinstance(r, dict))
                  + f" ({res['wall_s']} s)", flush=True)

    if args.d2_baseline and "d2" in args.detectors:
        sets = sorted({m.d2 for m in mutants if m.d2})
        scratch = Path(tempfile.mkdtemp(prefix="day0-mut-"))
        try:
            tree = make_tree(ROOT, mutants_mod.BASELINE, scratch)
            for files in sets:
                r = run_d2(args.python, tree, scratch / "home", mutants_mod.Mutant("baseline", "", "", (), files),
                           args, stop_first=False)
                D2_KNOWN_BAD.extend(n for n in r["all_failed"] if n not in D2_KNOWN_BAD)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        data["runs"][label]["d2_baseline_failing"] = list(D2_KNOWN_BAD)
        print(f"d2 baseline: {len(D2_KNOWN_BAD)} test(s) failing unmutated, deselected: {D2_KNOWN_BAD}", flush=True)
    need_base = not args.no_baseline and any(d in ("d1", "d1c") for d in args.detectors)
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = [pool.submit(one, None)] if need_base else []
        futs += [pool.submit(one, m) for m in mutants]
        for f in futs:
            f.result()
    for m in mutants:  # the runs that finished before the baseline did
        judge_all(data["mutants"][m.id].get("results", {}).get(label, {}), baseline)
    data["runs"][label]["wall_s"] = round(time.monotonic() - start, 1)
    save()
    print(f"wrote {prefix.with_suffix('.json')} and {prefix.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
