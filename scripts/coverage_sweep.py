"""Run `day0 coverage` on every config.json of a directory and tabulate what it says.

    python scripts/coverage_sweep.py CONFIG_DIR --out results/day0/coverage_sweep [--force]

CONFIG_DIR holds configs as a user downloads them (`NAME/config.json` or `NAME.json`);
scripts/default_configs.py writes transformers' defaults for every generative architecture in that
form. Per config the sweep keeps its model type, the kernel families it needs (and for each
whether the suite covers it), and what coverage cannot classify. Outcomes:

  classified   every family the config calls for is known (covered by the suite or not)
  partly       some of it cannot be classified (an unknown router, layer type, activation ...)
  refused      coverage said why in one line (not a model config, transformers rejects it)
  error        anything else: a day0 bug until shown otherwise

Then, over all configs: the families the suite does not cover and the "cannot classify" reasons,
each with how many configs call for it: what to implement next, across architectures.

Writes OUT.md (tables) and OUT.json (the same facts, with versions), atomically; refuses to
overwrite them without --force. Exit status: 0 when no outcome is `error`, 1 when one is, 2 on a
bad argument (one line).
"""
from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdk.cli import OneLineParser  # noqa: E402
from sdk.errors import ConfigError  # noqa: E402
from sdk.fileio import atomic_write_text, json_text  # noqa: E402

OUTCOMES = ("classified", "partly", "refused", "error")


def find_configs(folder: Path) -> dict[str, Path]:
    """name -> config path: `NAME/config.json` and `NAME.json` files of `folder`, by name."""
    found = {p.parent.name: p for p in folder.glob("*/config.json")}
    found.update({p.stem: p for p in folder.glob("*.json")})
    return dict(sorted(found.items()))


def sweep_one(path: Path) -> dict:
    """What coverage says about one config (never raises)."""
    from sdk.report.families import UNCLASSIFIED, config_needs
    try:
        needs = config_needs(path)  # reads the config quietly: its problems come back as one line
    except ConfigError as exc:
        return {"outcome": "refused", "reason": " ".join(str(exc).split())[:300]}
    except Exception as exc:  # a day0 bug: kept, and the sweep goes on
        return {"outcome": "error", "reason": " ".join(f"{type(exc).__name__}: {exc}".split())[:300]}
    families = [{"name": f.name, "kernels": list(f.kernels)} for f in needs.families
                if not f.name.startswith(UNCLASSIFIED)]
    unclassified = [f.name[len(UNCLASSIFIED) + 2:] for f in needs.families if f.name.startswith(UNCLASSIFIED)]
    return {"outcome": "partly" if unclassified else "classified", "model_type": needs.model_type,
            "families": families, "uncovered": [f["name"] for f in families if not f["kernels"]],
            "unclassified": unclassified}


def _generic(reason: str) -> str:
    """A "cannot classify" reason without the model type it names (to count it across configs)."""
    return reason.split(" of model_type ")[0]


def summarise(rows: dict[str, dict]) -> dict:
    counts = collections.Counter(r["outcome"] for r in rows.values())
    uncovered = collections.Counter(f for r in rows.values() for f in set(r.get("uncovered", ())))
    unclassified = collections.Counter(_generic(u) for r in rows.values() for u in set(r.get("unclassified", ())))
    return {"outcomes": {o: counts.get(o, 0) for o in OUTCOMES},
            "uncovered_families": dict(uncovered.most_common()),
            "cannot_classify": dict(unclassified.most_common())}


def render_md(result: dict) -> str:
    s = result["summary"]
    lines = [f"# `day0 coverage` sweep: {len(result['rows'])} configs", "",
             f"transformers {result['transformers']}, day0 {result['day0']}; {result['wall_s']:.0f} s.", "",
             "command:", "", f"    {result['command']}", "",
             "outcomes: " + ", ".join(f"{o} {n}" for o, n in s["outcomes"].items()), "",
             "## Families the suite does not cover, by how many configs need them", "",
             "| family | configs |", "| --- | ---: |"]
    lines += [f"| {name} | {n} |" for name, n in s["uncovered_families"].items()]
    lines += ["", "## What coverage cannot classify, by how many configs say it", "",
              "| cannot classify | configs |", "| --- | ---: |"]
    lines += [f"| {name} | {n} |" for name, n in s["cannot_classify"].items()]
    lines += ["", "## Per config", "", "| config | model_type | outcome | not covered | cannot classify |",
              "| --- | --- | --- | --- | --- |"]
    for name, r in result["rows"].items():
        why = "; ".join(r.get("unclassified", ())) or r.get("reason", "")
        lines.append(f"| {name} | {r.get('model_type', '')} | {r['outcome']} | "
                     f"{', '.join(r.get('uncovered', ()))} | {why.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="coverage_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("config_dir", type=Path, help="a folder of NAME/config.json or NAME.json files")
    ap.add_argument("--out", required=True, type=Path, help="writes OUT.md and OUT.json")
    ap.add_argument("--force", action="store_true", help="overwrite an existing OUT.md / OUT.json")
    args = ap.parse_args(argv)
    if not args.config_dir.is_dir():
        ap.error(f"{args.config_dir} is not a directory")
    configs = find_configs(args.config_dir)
    if not configs:
        ap.error(f"{args.config_dir} holds no NAME/config.json or NAME.json files")
    md, js = args.out.with_suffix(".md"), args.out.with_suffix(".json")
    existing = [str(p) for p in (md, js) if p.exists()]
    if existing and not args.force:
        ap.error(f"{', '.join(existing)} already exists (--force overwrites)")
    import sdk
    import transformers
    t0 = time.monotonic()
    rows = {}
    for i, (name, path) in enumerate(configs.items(), 1):
        rows[name] = sweep_one(path)
        print(f"[{i}/{len(configs)}] {name:40s} {rows[name]['outcome']}", file=sys.stderr, flush=True)
    result = {"format": "day0-coverage-sweep/1", "transformers": transformers.__version__,
              "day0": getattr(sdk, "__version__", "?"), "python": platform.python_version(),
              "command": "python scripts/coverage_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "wall_s": round(time.monotonic() - t0, 1), "rows": rows}
    result["summary"] = summarise(rows)
    js.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(js, json_text(result, indent=1) + "\n")
    atomic_write_text(md, render_md(result))
    print("outcomes: " + ", ".join(f"{o} {n}" for o, n in result["summary"]["outcomes"].items())
          + f"; tables: {md}", flush=True)
    return 1 if result["summary"]["outcomes"]["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
