"""`day0 model`: whole models, built from their configs, run end to end through a backend's Triton.

    day0 model qwen3_next                               a shipped config on cpu_interp
    day0 model path/to/config.json --backend mydev      any HuggingFace config.json
    day0 model --all --jobs 2 --out models.jsonl        every shipped config
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..errors import ConfigError

EPILOG = """\
what runs, per model and dtype (two processes of its own):
  1. the config is read through transformers' config class (a multimodal config gives its text
     model) and scaled down by one rule that keeps what selects kernels (printed with the run);
  2. eager PyTorch on the CPU, with upstream Triton libraries unimportable, is the reference;
  3. the same model (same weights) under torch.compile with Inductor's Triton code generation on
     the backend: a prefill over 24 tokens, then one decode step with the cache or recurrent state.
     An encoder-decoder's prefill runs its encoder over the 24 tokens and its decoder over a
     24-token prompt, and its decode step continues the decoder's cache; an encoder (attention
     both ways, no cache) runs one forward pass of its masked LM (or base model), as the prefill.
     A model that reads no token ids (audio features, pixels) is refused.
     Where transformers calls an installed Triton library for a layer (FLA for Gated DeltaNet),
     that library's kernels run on the backend too, and the record says so.
verdict per (model, mode, dtype): pass = runs end to end and the logits match eager (relative RMSE
within 1e-3 fp32, 3e-2 bf16); fail = mismatch; unsupported = kernels need ops the backend lacks
(every such kernel and op listed); error / crash / timeout with the cause (a kernel's fault names
the kernel and its source line). Records use the conformance results format with tier "model":
`day0 merge`, `day0 report` and --resume work on them.

exit status: 0 every item passed; 1 some did not; 2 bad input.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "model", help="run whole models end to end through a backend's Triton (the model tier)",
        description="Build each model from its config (random seeded weights), run it eagerly as "
        "the reference and under torch.compile with Triton code generation on the backend, and "
        "record per mode whether it runs and matches, with every Triton kernel it launched.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", metavar="NAME|CONFIG.json",
                   help="shipped model names (see --list) or HuggingFace config.json files")
    p.add_argument("--all", action="store_true", help="every shipped model config")
    p.add_argument("--list", action="store_true", help="list the shipped model configs and exit")
    p.add_argument("--backend", default="cpu_interp", metavar="B", help="backend (default: cpu_interp)")
    p.add_argument("--mode", default="prefill,decode", metavar="M,..", help="prefill,decode (default both)")
    p.add_argument("--dtype", default="fp32", metavar="D,..", help="fp32, bf16, fp16 (default fp32)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="models run at once (default 1)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds one model (both processes) may take (default 600)")
    p.add_argument("--shard", metavar="I/N", help="run shard I of N (1-based) of the selected jobs")
    p.add_argument("--out", metavar="PATH", help="results file (default: day0-results/<backend>-models.jsonl)")
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue --out: skip what it already holds")
    again.add_argument("--force", action="store_true", help="overwrite an existing --out (and --junit)")
    p.add_argument("-v", "--verbose", action="store_true", help="list every kernel each model launched")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..backend import registry
    from ..conformance.results import Record, ResultWriter, load_results, new_header
    from ..conformance.runner import Progress, parse_shard
    from ..modeltier import plan, run_jobs
    from ..modeltier.runner import iter_names
    from ..modeltier.scale import describe

    if args.list or args.all:
        from .. import models as shipped
    if args.list:
        for name, path in sorted(shipped.shipped().items()):
            print(f"{name:24s} {path}")
        return 0
    names = list(args.models) + (sorted(shipped.shipped()) if args.all else [])
    if not names:
        raise ConfigError("name one or more models (day0 model --list) or config.json files, or pass --all")
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    if not 0 < args.timeout < 1e9:
        raise ConfigError(f"--timeout must be a positive, finite number of seconds, got {args.timeout:g}")
    backend = registry.get(args.backend)
    ok, why = backend.available()
    if not ok:
        raise ConfigError(f"backend '{args.backend}' cannot run here: {why}")
    modes, dtypes = list(iter_names(args.mode)), list(iter_names(args.dtype))
    if not modes or not dtypes:
        raise ConfigError("--mode and --dtype need at least one name each")
    jobs = plan(list(dict.fromkeys(names)), args.backend, dtypes, modes)
    if args.shard:
        index, count = parse_shard(args.shard)
        ordered = sorted(jobs, key=lambda j: (j.name, j.dtype))
        jobs = [j for k, j in enumerate(ordered) if k % count == index - 1]

    from ..device_models import name_of
    device = name_of(backend.target.device_model) or "unknown"  # the model's name, never a YAML path
    out = Path(args.out or f"day0-results/{args.backend}-models.jsonl")
    header = new_header("model-tier", args.backend, device, mode="model")
    earlier: list[Record] = []
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; name a results file")
    if args.resume and out.exists():
        rs = load_results(out)
        why = rs.header.compatible(header) or ("" if rs.header.mode == "model" else f"mode '{rs.header.mode}'")
        if why:
            raise ConfigError(f"cannot resume {out}: it holds another run ({why}); use another --out or --force")
        earlier = list(rs.records)
        done = {(r.kernel, r.dtype) for r in earlier}
        jobs = [j for j in jobs if (j.name, j.dtype) not in done]
    elif out.exists() and not args.force:
        raise ConfigError(f"{out} already exists; pass --resume to continue it or --force to overwrite it")
    if args.junit and Path(args.junit).exists() and not args.force:
        raise ConfigError(f"{args.junit} already exists; pass --force to overwrite it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        writer = ResultWriter(out, header, append=bool(args.resume and out.exists()))
    except OSError as exc:
        raise ConfigError(f"cannot write --out {out}: {exc.strerror or exc}") from None

    print(f"scale-down rule: {describe()}", file=sys.stderr)
    for job in {j.name: j for j in jobs}.values():
        print(f"  {job.name} ({job.model_type}): {'; '.join(job.notes) or 'unchanged'}", file=sys.stderr)
    records: list[Record] = list(earlier)
    progress = Progress(sum(len(j.modes) for j in jobs))
    t0 = time.monotonic()

    def on_records(job, dicts) -> None:
        for d in dicts:
            rec = Record.from_dict({**d, "device": device, "arch": backend.target.arch,
                                    "triton": header.triton, "torch": header.torch})
            writer.write(rec)
            records.append(rec)
            progress.update(rec)

    try:
        run_jobs(jobs, on_records, workers=args.jobs, timeout=args.timeout)
        writer.finish()  # the run completed: the end line marks the file complete
    finally:
        progress.close()
        writer.close()
    print(render(records, verbose=args.verbose))
    print(f"{len(jobs)} model job(s) in {time.monotonic() - t0:.1f} s with {args.jobs} worker(s); results: {out}")
    if args.junit:
        from ..conformance.junit import write_junit
        Path(args.junit).parent.mkdir(parents=True, exist_ok=True)
        write_junit(args.junit, records, header)
        print(f"JUnit XML: {args.junit}")
    return 0 if records and all(r.passed for r in records) else 1


def render(records, verbose: bool = False) -> str:
    """A table: model, mode, dtype, verdict, error vs eager, kernels by origin."""
    rows = [("model", "mode", "dtype", "verdict", "rel. RMSE", "kernels (origin)", "detail")]
    for r in sorted(records, key=lambda r: (r.kernel, r.dtype, r.case != "prefill")):
        origins: dict[str, int] = {}
        for k in r.kernels:
            origins[k.get("origin", "?")] = origins.get(k.get("origin", "?"), 0) + 1
        by = ", ".join(f"{n} {o}" for o, n in sorted(origins.items())) or "-"
        from ..verdict import DELEGATED, judge_end_to_end
        verdict = judge_end_to_end([r]).verdict  # the words every command uses
        if r.native is not None:
            verdict += f" ({DELEGATED}, {r.native:.0%} native)"
        if not r.passed:
            verdict += f" ({r.status})"
        rows.append((r.kernel, r.case, r.dtype, verdict, "-" if r.rmse is None else f"{r.rmse:.1e}", by,
                     r.detail[:90]))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if verbose:
        for r in records:
            lines.append(f"\n{r.kernel} {r.case} {r.dtype}: {len(r.kernels)} kernel(s)")
            for k in r.kernels:
                extra = f"  {k['detail'][:120]}" if k.get("detail") else ""
                lines.append(f"  {k['status']:11s} {k['origin']:9s} x{k['launches']:<3d} {k['name']}{extra}")
    return "\n".join(lines)
