"""Run `day0 model` on every config.json of a directory and tabulate what happened.

    python scripts/model_sweep.py CONFIG_DIR --out results/cpu_interp/model_sweep [--force | --resume]
        [--backend cpu_interp] [--dtype fp32] [--mode prefill,decode] [--timeout 600] [--jobs 1]
        [--only NAME,..]

A long sweep runs in parts: `--resume` keeps the finished outcomes OUT.json holds (for configs whose
file is unchanged) and runs the rest, or with `--only` the named configs (again, if they finished
before: a rerun after a fix). Every part's exact command and wall time are kept in OUT.json and OUT.md.

CONFIG_DIR holds configs as a user downloads them: `NAME/config.json` (a model repository's
folder) or `NAME.json`. Each config runs as one `day0 model CONFIG` command of its own (its own
processes, one timeout per model). Per config the sweep keeps the command's exit code, wall time,
the status of every (mode, dtype) record it wrote and the one-line reason of anything that did not
pass, and sorts every outcome into a class:

  pass          every record passed
  refused       the command said why in one line and exited 2 (bad input, or an architecture
                the model tier cannot run: one that reads no token ids)
  eager         transformers' own eager model failed on the CPU (the reference), and on the
                published config too where the meta device, or for a model of at most a billion
                parameters a real run on the CPU, can tell (where neither can, the record says
                whether the published config runs is unknown)
  compile       the logits differ from eager, and so do those of torch.compile with PyTorch's own
                Inductor (on the backend's CUDA device, else on the CPU: C++, no Triton), or
                torch.compile raised an error and raises the same one there: torch.compile's
                failure, not the backend's
  unsupported   kernels need ops the backend lacks (every op listed in the records)
  day0          anything else: a mismatch with eager, a kernel fault, a crash, a timeout, a
                traceback or an exit code other than 0, 1 and 2 (a day0 bug until shown otherwise)

Writes OUT.md (a table) and OUT.json (the same facts, with versions and the configs' model types),
atomically, again after every config finishes: a sweep stopped part way (a time limit, Ctrl-C)
leaves the configs it finished, the rest marked `not run`. Refuses to overwrite them without --force
or --resume. Exit status: 0 when no outcome is of class `day0`, 1 when one is, 2 on a bad argument
(one line).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdk.cli import OneLineParser  # noqa: E402
from sdk.errors import ConfigError  # noqa: E402
from sdk.fileio import atomic_write_text, json_text, read_bytes  # noqa: E402
from sdk.modeltier.runner import NOT_RUN, STOCK_INDUCTOR_RAISES, STOCK_INDUCTOR_TOO  # noqa: E402

CLASSES = ("pass", "refused", "eager", "compile", "unsupported", "day0", "not run")
MAX_CONFIG_BYTES = 16 << 20
GRACE_S = 120.0   # the command's own start-up and result writing, beyond the model's --timeout


@dataclass
class Outcome:
    """One config's `day0 model` run."""

    name: str
    path: str
    model_type: str
    architectures: list[str]
    sha256: str
    exit_code: int | str = ""
    wall_s: float = 0.0
    cls: str = "not run"
    reason: str = ""
    records: list[dict] = field(default_factory=list)   # mode, dtype, status, rmse, kernels, detail


def find_configs(folder: Path, only: set[str] | None) -> list[tuple[str, Path]]:
    """(name, path) of every config under `folder`: NAME/config.json and NAME.json, by name."""
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*/config.json")):
        found[path.parent.name] = path
    for path in sorted(folder.glob("*.json")):
        found.setdefault(path.stem, path)
    if only is not None:
        missing = sorted(only - set(found))
        if missing:
            raise ConfigError(f"--only names configs not in {folder}: {', '.join(missing)}")
        found = {k: v for k, v in found.items() if k in only}
    return sorted(found.items())


def _describe(name: str, path: Path) -> Outcome:
    data = read_bytes(path, "config", MAX_CONFIG_BYTES)
    try:
        cfg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        cfg = None
    mt = cfg.get("model_type") if isinstance(cfg, dict) else None
    arch = cfg.get("architectures") if isinstance(cfg, dict) else None
    return Outcome(name, str(path), mt if isinstance(mt, str) else "?",
                   [a for a in arch if isinstance(a, str)] if isinstance(arch, list) else [],
                   hashlib.sha256(data).hexdigest()[:16])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_one(outcome: Outcome, args: argparse.Namespace, scratch: Path) -> Outcome:
    """Run `day0 model` on one config and fill in `outcome`."""
    from sdk.conformance.results import load_results
    results = scratch / f"{outcome.name}.jsonl"
    cmd = [sys.executable, "-m", "sdk.cli", "model", outcome.path, "--backend", args.backend,
           "--dtype", args.dtype, "--mode", args.mode, "--timeout", str(args.timeout),
           "--out", str(results), "--force"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=ROOT, env=env,
                              timeout=args.timeout + GRACE_S, start_new_session=True)
        code, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, err = "timeout", (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) \
            else (exc.stderr or "")
    outcome.wall_s = round(time.monotonic() - t0, 1)
    outcome.exit_code = code
    records = []
    if results.exists():
        try:
            records = list(load_results(results).records)
        except Exception as exc:  # a half-written file: the run itself says what went wrong
            outcome.reason = f"results unreadable: {exc}"
    for r in records:
        outcome.records.append({"mode": r.case, "dtype": r.dtype, "status": r.status,
                                "rmse": r.rmse, "kernels": len(r.kernels), "detail": r.detail})
    outcome.cls, why = classify(code, err, outcome.records)
    outcome.reason = outcome.reason or why
    return outcome


def classify(code: int | str, stderr: str, records: list[dict]) -> tuple[str, str]:
    """(class, one-line reason) of one command's outcome (see the module docstring)."""
    if "Traceback (most recent call last)" in stderr:
        return "day0", f"traceback: {_last_line(stderr)[:300]}"
    if code == 2:  # one line, besides transformers' own log lines ("[transformers] ...")
        lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("[")]
        if len(lines) != 1 or "error:" not in lines[0]:
            return "day0", f"exit 2 without exactly one error line: {' / '.join(lines)[:300]}"
        return "refused", lines[0].split("error:", 1)[1].strip()
    if code == "timeout":
        return "day0", "the command did not finish within --timeout plus its start-up"
    if code not in (0, 1):
        return "day0", f"exit code {code}: {_last_line(stderr)[:300]}"
    if not records:
        return "day0", f"exit {code} with no results: {_last_line(stderr)[:300]}"
    bad = [r for r in records if r["status"] != "pass"]
    if not bad:
        return ("pass", "") if code == 0 else ("day0", "every record passed but the command exited 1")
    if code == 0:
        return "day0", "a record did not pass but the command exited 0"
    first = bad[0]
    reason = f"{first['mode']}/{first['dtype']} {first['status']}: {first['detail']}"[:400]
    if all(r["detail"].startswith("eager reference failed") for r in bad):
        return "eager", reason
    failed = [r for r in bad if r["detail"] != NOT_RUN] or bad  # a mode after a failed one did not run
    if all((r["status"] == "fail" and STOCK_INDUCTOR_TOO in r["detail"]) or
           (r["status"] == "error" and STOCK_INDUCTOR_RAISES in r["detail"]) for r in failed):
        return "compile", reason
    if all(r["status"] == "unsupported" for r in bad):
        return "unsupported", reason
    return "day0", reason


# ---------------------------------------------------------------------------------- writing
def versions() -> dict[str, str]:
    import importlib.metadata as md
    out = {"python": sys.version.split()[0]}
    for dist in ("torch", "triton", "transformers"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def summary(outcomes: list[Outcome]) -> dict[str, int]:
    return {c: sum(o.cls == c for o in outcomes) for c in CLASSES}


def to_json(outcomes: list[Outcome], args: argparse.Namespace, runs: list[dict]) -> str:
    return json_text({
        "config_dir": str(args.config_dir), "backend": args.backend, "dtype": args.dtype, "mode": args.mode,
        "timeout_s": args.timeout, "jobs": args.jobs, "versions": versions(),
        "total_s": round(sum(r.get("wall_s", 0) for r in runs), 1), "runs": runs,
        "counts": summary(outcomes), "models": [asdict(o) for o in outcomes]}, indent=1) + "\n"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "\\|")


def to_markdown(outcomes: list[Outcome], args: argparse.Namespace, runs: list[dict]) -> str:
    v = versions()
    counts = summary(outcomes)
    total_s = sum(r.get("wall_s", 0) for r in runs)
    lines = [f"# `day0 model` sweep: {len(outcomes)} configs on {args.backend}", "",
             f"transformers {v['transformers']}, torch {v['torch']}, triton {v['triton']}; dtype {args.dtype}, "
             f"modes {args.mode}; one `day0 model CONFIG` per config (timeout {args.timeout:g} s, {args.jobs} at "
             f"a time); {total_s / 60:.1f} min in all.", "",
             "counts: " + ", ".join(f"{c} {n}" for c, n in counts.items()), "",
             f"{'commands (run in parts, each keeping what the earlier ones finished)' if len(runs) > 1 else 'command'}:",
             "", *[f"    {r.get('command')}    # {r.get('ran', '?')} config(s), {r.get('wall_s', 0) / 60:.1f} min"
                   + (f" on {r['host']}" if r.get("host") else "")
                   + (f" (torch {r['versions'].get('torch')}, triton {r['versions'].get('triton')}, transformers "
                      f"{r['versions'].get('transformers')})" if isinstance(r.get("versions"), dict) else "")
                   for r in runs], "",
             "| config | model_type | class | exit | wall s | records | reason |",
             "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        recs = ", ".join(f"{r['mode']}/{r['dtype']} {r['status']}" for r in o.records) or "-"
        lines.append(f"| {_cell(o.name)} | {_cell(o.model_type)} | {o.cls} | {o.exit_code} | {o.wall_s:.0f} "
                     f"| {recs} | {_cell(o.reason)[:300]} |")
    lines += ["", "classes: pass = every (mode, dtype) runs and matches eager; refused = one line, exit 2; "
              "eager = transformers' eager model fails on the CPU (and, where the meta device can tell, on the published "
              "config too: a scaled config that the meta device fails while it runs the published one is class day0); "
              "unsupported = ops the backend lacks; "
              "compile = the logits differ from eager, or torch.compile raises, with PyTorch's own Inductor too (on the "
              "backend's CUDA device, else on the CPU: C++, no Triton); "
              "day0 = a day0 bug until shown otherwise; not run = the sweep stopped before it.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="model_sweep", description=__doc__.splitlines()[0])
    p.add_argument("config_dir", type=Path, help="a folder of NAME/config.json or NAME.json files")
    p.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX.md and PREFIX.json")
    p.add_argument("--backend", default="cpu_interp")
    p.add_argument("--dtype", default="fp32", help="one dtype or a comma list (fp32, bf16, fp16)")
    p.add_argument("--mode", default="prefill,decode")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per model (default 600)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="configs run at once (default 1)")
    p.add_argument("--only", metavar="NAME,..", help="run only these configs (by folder or file name)")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="overwrite existing PREFIX.md / PREFIX.json")
    again.add_argument("--resume", action="store_true",
                       help="keep the finished outcomes PREFIX.json holds and run the rest (or the --only configs)")
    return p.parse_args(argv)


def earlier_outcomes(path: Path, args: argparse.Namespace) -> tuple[dict[str, Outcome], list[dict]]:
    """The finished outcomes (by name) and the runs of an earlier sweep's PREFIX.json, for --resume."""
    try:
        data = json.loads(read_bytes(path, "sweep results", 256 << 20).decode("utf-8"))
        same = {k: data[k] for k in ("backend", "dtype", "mode")}
        models = [Outcome(**m) for m in data["models"]]
        runs = [r for r in data.get("runs", []) if isinstance(r, dict)]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot resume {path}: not a sweep's results ({' '.join(str(exc).split())[:120]})") from None
    wanted = {"backend": args.backend, "dtype": args.dtype, "mode": args.mode}
    if same != wanted:
        raise ConfigError(f"cannot resume {path}: it holds a sweep with {same}, not {wanted}")
    return {o.name: o for o in models if o.cls != "not run"}, runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not args.config_dir.is_dir():
            raise ConfigError(f"{args.config_dir} is not a directory")
        if not 0 < args.timeout < 1e6:
            raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
        if args.jobs < 1:
            raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
        only = {n.strip() for n in args.only.split(",") if n.strip()} if args.only else None
        configs = find_configs(args.config_dir, only)
        if not configs:
            raise ConfigError(f"{args.config_dir} holds no NAME/config.json or NAME.json files")
        md_path, json_path = Path(args.out + ".md"), Path(args.out + ".json")
        for path in (md_path, json_path):
            if path.exists() and not (args.force or args.resume):
                raise ConfigError(f"{path} already exists; pass --force to overwrite it or --resume to continue it")
            if not path.parent.is_dir():
                raise ConfigError(f"cannot write {path}: {path.parent} is not a directory")
        done: dict[str, Outcome] = {}
        runs: list[dict] = []
        if args.resume and json_path.exists():
            done, runs = earlier_outcomes(json_path, args)
            configs = find_configs(args.config_dir, None)  # the table holds every config of the folder
        outcomes = [_describe(name, path) for name, path in configs]
        for i, o in enumerate(outcomes):
            before = done.get(o.name)
            if before is not None and before.sha256 == o.sha256 and (only is None or o.name not in only):
                outcomes[i] = before
        todo = [o for o in outcomes if (o.name in only if only is not None else o.cls == "not run")]
    except ConfigError as exc:
        print(f"model_sweep: error: {exc}", file=sys.stderr)
        return 2

    t0 = time.monotonic()
    lock = threading.Lock()
    command = "python scripts/model_sweep.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    this_run = {"command": command, "ran": 0, "wall_s": 0.0,  # ran: the configs this part finished
                "host": f"{platform.node()}, {os.cpu_count()} CPUs", "versions": versions()}
    runs.append(this_run)

    def write() -> float:
        total = time.monotonic() - t0
        this_run["wall_s"] = round(total, 1)
        with lock:  # every finished config so far; the others say "not run"
            atomic_write_text(json_path, to_json(outcomes, args, runs))
            atomic_write_text(md_path, to_markdown(outcomes, args, runs))
        return total

    with tempfile.TemporaryDirectory(prefix="day0-sweep-") as tmp:
        def one(o: Outcome) -> Outcome:
            done = run_one(o, args, Path(tmp))
            recs = ", ".join(f"{r['mode']} {r['status']}" for r in done.records)
            print(f"{done.name:36s} {done.cls:11s} exit {done.exit_code!s:7s} {done.wall_s:6.0f} s  {recs}"
                  f"{'  ' + done.reason[:160] if done.reason else ''}", flush=True)
            with lock:
                this_run["ran"] += 1
            write()
            return done
        write()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(one, todo))
    total = write()
    counts = summary(outcomes)
    print(f"{len(todo)} configs run in {total / 60:.1f} min; of {len(outcomes)}: "
          + ", ".join(f"{c} {n}" for c, n in counts.items()) + f"; wrote {md_path} and {json_path}")
    return 1 if counts["day0"] else 0


if __name__ == "__main__":
    sys.exit(main())
