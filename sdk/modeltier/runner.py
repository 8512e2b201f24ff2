"""Model-tier jobs: resolve configs, scale them, run each job's two worker processes, make records."""
from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ConfigError, UnknownName
from .classes import class_path
from .scale import scale
from .worker import TOLERANCE

MODES = ("prefill", "decode")
DTYPES = tuple(TOLERANCE)
SEED = 0
TOKENS = 24   # longer than the scaled sliding windows and attention chunks
BATCH = 1


@dataclass
class Job:
    """One model in one dtype on one backend: the scaled config and what the run does."""

    name: str
    source: str                 # the shipped name or the config file it came from
    model_type: str
    config: dict[str, Any]      # the scaled text config, model_type included
    notes: list[str]            # one line per scaled field
    dtype: str
    modes: tuple[str, ...]
    backend: str
    extra: dict[str, Any] = field(default_factory=dict)
    model_class: str = ""       # "module:Class" the workers build (sdk.modeltier.classes)
    output: str = "logits"      # what is compared: "logits", or a text model's "hidden states"
    published: dict[str, Any] = field(default_factory=dict)  # the text config before scaling
    kind: str = "decoder"       # "decoder", "seq2seq" or "encoder" (sdk.modeltier.classes.classify)

    def spec(self) -> dict[str, Any]:
        return {"config": self.config, "seed": SEED, "dtype": self.dtype, "batch": BATCH,
                "tokens": TOKENS, "modes": list(self.modes), "backend": self.backend,
                "model_class": self.model_class, "published": self.published, "kind": self.kind}


def _read_config(name_or_path: str) -> tuple[str, str, dict]:
    """(model name, source, raw config dict) of a shipped model name or a config.json path."""
    from .. import models
    data = models.load_config(name_or_path)
    if name_or_path in models.shipped():
        return name_or_path, f"shipped:{name_or_path}", data
    path = Path(name_or_path)
    name = path.parent.name if path.name == "config.json" else path.stem
    return _safe_name(name), str(path), data


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "model"


def text_config(raw: dict) -> tuple[str, dict]:
    """(text model_type, full config dict with defaults) through transformers' config classes.
    A multimodal config yields its text model; an encoder-decoder, the whole model's config."""
    mt, text, _, _, _ = _text_config(raw)
    return mt, text.to_dict()


def _text_config(raw: dict):
    """(model_type, the transformers config object the tier builds from, the class it builds, what
    it compares, the kind of model: "decoder", "encoder" or "seq2seq"); ConfigError for a config the
    model tier cannot run, said in one line. A multimodal config gives its text decoder; an
    encoder-decoder reading token ids, the whole model. Floats a JSON file cannot hold are read as
    transformers writes them ({"__float__": "Infinity"})."""
    from transformers import CONFIG_MAPPING
    from ..models.hfconfig import config_object
    if not isinstance(raw, dict):
        raise ConfigError("a model config must be a JSON object")
    mt = raw.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise ConfigError("the config has no 'model_type'")
    if mt not in CONFIG_MAPPING:
        raise ConfigError(f"model_type '{mt}' is not known to the installed transformers; "
                          "the model tier builds models through transformers")
    try:
        full = config_object(mt, {k: v for k, v in raw.items() if k != "model_type"})
        text = full.get_text_config(decoder=True)  # the decoder's, where there is also a text encoder
    except Exception as exc:  # transformers' own validation of the config's values
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ConfigError(f"transformers rejects this {mt} config: {why[:400]}") from None
    kind, cls, output = _classify(mt, full, text)
    built = full if kind == "seq2seq" else text
    return built.model_type, built, cls, output, kind


#: what the model tier runs, said where it refuses a config
_RUNS = ("the model tier runs language models that read token ids: decoders (a prefill, then decode steps "
         "with a cache), encoder-decoders and encoders")


def _classify(mt: str, full, text) -> tuple[str, type, str]:
    """(kind, the class the model tier builds, what it compares) as `classes.classify` says;
    ConfigError, in one line, for a config the tier cannot run."""
    from .classes import classify
    kind, cls, output = classify(full, text)
    if cls is not None:
        return kind, cls, output
    if kind == "seq2seq":
        raise ConfigError(f"model_type '{mt}' is an encoder-decoder model and {output}; {_RUNS}")
    if kind == "encoder":
        raise ConfigError(f"model_type '{mt}' has no causal language model and {output}; {_RUNS}")
    raise ConfigError(f"model_type '{mt}' has no causal language model or text decoder in the installed "
                      f"transformers; {_RUNS}")


def plan(models: list[str], backend: str, dtypes: list[str], modes: list[str]) -> list[Job]:
    """One Job per (model, dtype), configs scaled by the rule in `scale`."""
    for d in dtypes:
        if d not in DTYPES:
            raise UnknownName("dtype", d, DTYPES)
    for m in modes:
        if m not in MODES:
            raise UnknownName("mode", m, MODES)
    if "decode" in modes and "prefill" not in modes:
        modes = ["prefill", *modes]  # decode continues the prefill's cache
    jobs = []
    for item in models:
        name, source, raw = _read_config(item)
        mt, text, cls, output, kind = _text_config(raw)
        nested = _sub_configs(type(text))
        aliases = getattr(type(text), "attribute_map", None)
        published = {**text.to_dict(), "model_type": mt}
        scaled, notes = scale(text.to_dict(), aliases, nested)
        scaled["model_type"] = mt
        _follow_derived(scaled, notes, published)
        why = _cannot_build(cls, scaled)
        if why:  # e.g. a block shared by all layers of a type, tied from the first to the others
            twice, more = scale(text.to_dict(), aliases, nested, times=2)
            twice["model_type"] = mt
            _follow_derived(twice, more, published)
            if twice != scaled and not _cannot_build(cls, twice):
                scaled, notes = twice, more + [f"every layer type twice: transformers cannot build the model with "
                                                f"one layer of each ({why})"]
        runs = tuple(m for m in MODES if m in modes)
        if kind == "encoder":
            runs = ("prefill",)
            notes = notes + ["an encoder (attention both ways, no cache): one forward pass over the tokens, "
                             "recorded as the prefill; no decode step"]
        elif kind == "seq2seq":
            notes = notes + ["an encoder-decoder: the prefill runs the encoder over the tokens and the decoder "
                             "over a prompt of its own; a decode step continues the decoder's cache"]
        for dtype in dtypes:
            jobs.append(Job(name, source, mt, scaled, notes, dtype, runs, backend, model_class=class_path(cls),
                            output=output, published=published, kind=kind))
    return jobs


def _sub_configs(cls: type, depth: int = 3) -> dict[str, tuple[dict, dict]]:
    """{field: (its config class's aliases, its own sub-configs)} of the sub-configs a config class
    is built with (an encoder-decoder's encoder holds a text and a vision config of its own)."""
    subs = (getattr(cls, "sub_configs", None) or {}) if depth > 0 else {}
    return {key: (getattr(sub, "attribute_map", None) or {}, _sub_configs(sub, depth - 1)) for key, sub in subs.items()}


def _config(cfg: dict):
    """The config object of a config dict (`model_type` among its keys); the dict is left as it is
    (config classes edit the sub-dicts they are given)."""
    from ..models.hfconfig import config_object
    return config_object(cfg["model_type"], copy.deepcopy({k: v for k, v in cfg.items() if k != "model_type"}))


def _rebuilt(cfg: dict) -> dict | None:
    """`cfg` as its config class rebuilds it (None if it refuses), quietly: a probe, built again
    and again, whose notes on the values the user has had once."""
    from ..models.hfconfig import quiet_transformers
    try:
        with quiet_transformers():
            return _config(cfg).to_dict()
    except Exception:  # said by _cannot_build, which builds the model from it
        return None


def _follow_derived(cfg: dict, notes: list[str], published: dict) -> None:
    """A field the scale rule changed that the config class derives from a sub-config's field (DBRX
    copies attn_config.kv_n_heads to num_key_value_heads, and its attention reads the former) takes
    its scaled value in the sub-config too. The source is found by rebuilding the config without
    the field, with each sub-config field of the same published value changed in turn: the one the
    rebuilt field follows. Edits `cfg` and `notes` in place."""
    for key, value in list(cfg.items()):
        if type(value) is not int or published.get(key) == value:  # unchanged: its source is too
            continue
        without = {k: v for k, v in cfg.items() if k != key}
        back = (_rebuilt(without) or {}).get(key)
        if type(back) is not int or back == value:
            continue
        for sub, fields in cfg.items():
            if not isinstance(fields, dict):
                continue
            found = next((name for name, v in fields.items() if type(v) is int and v == back
                          and (_rebuilt({**without, sub: {**fields, name: value}}) or {}).get(key) == value), None)
            if found is not None:
                cfg[sub] = {**fields, found: value}
                notes.append(f"{sub}.{found}: {back} -> {value} (the config class derives {key} from it)")
                break


def _cannot_build(cls: type, cfg: dict) -> str:
    """"" when transformers builds `cls` from the scaled config (on the meta device: no memory, no
    weights), else why not, in one line."""
    import torch
    try:
        with torch.device("meta"):
            cls._from_config(_config(cfg))
    except Exception as exc:  # whatever transformers raises: said, and the plan keeps the config
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
    return ""


# ------------------------------------------------------------------------------------ running
def _python(args: list[str], timeout: float) -> tuple[int | str, str]:
    """Run `python -m sdk.modeltier.worker ...` in its own process group: (exit code or
    "timeout", the last lines it wrote to stderr)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "sdk.modeltier.worker", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", ""
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, err[-4000:]


def run_job(job: Job, timeout: float = 600.0) -> list[dict]:
    """Run one job; one record dict per mode (the conformance Record fields, tier "model")."""
    t0 = time.monotonic()
    base = {"kernel": job.name, "group": "model", "models": [job.name], "dtype": job.dtype,
            "backend": job.backend, "tier": "model"}
    with tempfile.TemporaryDirectory(prefix="day0-model-") as tmp:
        spec, ref, out = (os.path.join(tmp, n) for n in ("spec.json", "reference.pt", "backend.json"))
        with open(spec, "w") as fh:
            json.dump(job.spec(), fh, default=str)
        code, err = _python(["reference", spec, ref], timeout)
        if code != 0:
            why = _failure(code, err)
            detail = f"eager reference failed: {why}"
            if code == 1 and job.published:
                detail = _published_verdict(why, spec, timeout - (time.monotonic() - t0))
            return [{**base, "case": m, "status": "error", "detail": detail,
                     "wall_s": time.monotonic() - t0} for m in job.modes]
        left = max(1.0, timeout - (time.monotonic() - t0))
        code, err = _python(["backend", spec, ref, out], left)
        wall = time.monotonic() - t0
        if code != 0 or not os.path.exists(out):
            status = "timeout" if code == "timeout" else "crash"
            return [{**base, "case": m, "status": status, "detail": _failure(code, err), "wall_s": wall}
                    for m in job.modes]
        with open(out) as fh:
            result = json.load(fh)
        records, raised = [], set()
        for mode in job.modes:
            entry = result["modes"].get(mode)
            records.append({**base, "case": mode, "wall_s": wall, **_judge(job, entry, result)})
            if entry and "error" in entry and records[-1]["detail"] == entry["error"]:
                raised.add(mode)  # what torch.compile raised, not a kernel's fault or a missing op
        if raised or any(r["status"] == "fail" for r in records):
            _stock_inductor_verdict(job, records, spec, ref, os.path.join(tmp, "stock.json"),
                                    timeout - (time.monotonic() - t0), raised)
    return records


#: how a record says PyTorch's own Inductor differs from eager as the backend's run does
STOCK_INDUCTOR_TOO = "PyTorch's own Inductor differs from eager too"
#: how a record says PyTorch's own Inductor raises what the backend's run raised
STOCK_INDUCTOR_RAISES = "PyTorch's own Inductor raises the same error"
#: the record of a mode that did not run because the one before it failed
NOT_RUN = "not run: an earlier mode failed"


def _stock_inductor_verdict(job: Job, records: list[dict], spec: str, ref: str, out: str, timeout: float,
                            raised: set[str] | frozenset = frozenset()) -> None:
    """After logits that differ from eager, or an error raised under torch.compile (the modes in
    `raised`: not a kernel's fault or a missing op): the same model under torch.compile with PyTorch's own Inductor (on the
    backend's CUDA device, else on the CPU: `worker.stock_device`). A mode that differs there too,
    or raises the same error, is torch.compile's failure, not the backend's, and its record says
    so; otherwise the records stand as they are, with what the check found."""
    code, err = _python(["stock", spec, ref, out], max(1.0, min(timeout, 600.0)))
    checked = [r for r in records if r["status"] == "fail" or r["case"] in raised]
    if code != 0 or not os.path.exists(out):
        note = f"; not checked against PyTorch's own Inductor ({_failure(code, err)})"
        for r in checked:
            r["detail"] += note
        return
    with open(out) as fh:
        stock = json.load(fh)
    rmse, stock_error, where = stock["rmse"], stock.get("error"), stock.get("where", "")
    tol = TOLERANCE[job.dtype]
    for r in checked:
        got = rmse.get(r["case"])
        if r["status"] == "error":
            if got is None and stock_error == r["detail"]:
                r["detail"] += f"; {STOCK_INDUCTOR_RAISES} ({where}): torch.compile's failure, not the backend's"
            elif got is not None:
                r["detail"] += f"; PyTorch's own Inductor runs this mode ({where})"
            elif stock_error:
                r["detail"] += f"; PyTorch's own Inductor raises another error ({where}): {stock_error}"
        elif got is not None and (got != got or got > tol):
            r["detail"] += (f"; {STOCK_INDUCTOR_TOO} ({where}; relative RMSE {got:.3g}): torch.compile's failure, "
                            "not the backend's")
        elif got is not None:
            r["detail"] += f"; PyTorch's own Inductor matches eager ({where}; relative RMSE {got:.3g})"


def _judge(job: Job, entry: dict | None, result: dict) -> dict:
    """A mode's verdict: pass (runs, logits match eager), fail, unsupported or error."""
    tol = TOLERANCE[job.dtype]
    if entry is None:
        return {"status": "error", "detail": NOT_RUN}
    kernels = entry.get("kernels", [])
    via = _libraries_used(kernels, result.get("libraries") or [], bool(result.get("exporting_inside_compile")))
    out: dict[str, Any] = {"kernels": kernels, "launch_s": entry.get("seconds")}
    shares = [k["native"] for k in kernels if k.get("native") is not None]
    if shares and min(shares) < 1.0:  # a delegating backend: how much of the model was its own
        out["native"] = round(min(shares), 4)
        out["borrowed_ops"] = sorted({op for k in kernels for op in k.get("borrowed_ops", [])})
    unsupported = [k for k in kernels if k.get("status") == "unsupported"]
    faulted = [k for k in kernels if k.get("status") == "fault"]
    if "error" in entry:
        if unsupported or entry.get("unsupported"):
            ops: dict[tuple[str, str], dict] = {}
            for o in [m for k in unsupported for m in k.get("missing", [])] + (entry.get("unsupported") or []):
                ops.setdefault((o["name"], o.get("signature", "")),
                               {f: o.get(f, "") for f in ("name", "signature", "loc", "source")})
            names = sorted(f"{n}({sig})" if sig else n for n, sig in ops)
            who = [k["name"] for k in unsupported] or sorted({o["kernel"] for o in entry.get("unsupported") or []})
            out.update(status="unsupported", unsupported_ops=list(ops.values()),
                       detail=f"{len(who)} kernel(s) need ops the backend lacks: {', '.join(names)} "
                              f"(kernels: {', '.join(who)})")
        elif faulted:
            k = faulted[0]
            out.update(status="error", detail=f"kernel {k['name']} ({k['origin']}) faulted: {k['detail']}")
        else:
            out.update(status="error", detail=entry["error"])
        return out
    out.update(max_abs=entry.get("max_abs"), rmse=entry.get("rmse"))
    if not entry.get("finite", True):
        out.update(status="fail", detail="logits hold inf or NaN where eager's do not")
    elif entry["rmse"] is None or entry["rmse"] > tol:
        out.update(status="fail", detail=f"logits differ from eager: relative RMSE {entry['rmse']:.3g} > {tol:g}{via}")
    else:
        out.update(status="pass", detail="")
        out["detail"] = f"{len(kernels)} Triton kernel(s){via}" if kernels else "no Triton kernel launched"
    return out


#: kernel origins that are the model's own code generation, not an upstream library
_NOT_LIBRARIES = ("inductor", "day0", "user", "unknown")


#: why no library kernel runs in a compiled model under a torch whose is_exporting() is True then
EXPORTING_INSIDE_COMPILE = ("this torch answers torch.compiler.is_exporting() True inside torch.compile, "
                            "and transformers then takes its PyTorch path for a library's layers")


def _libraries_used(kernels: list[dict], imported: list[str], exporting: bool = False) -> str:
    """Which upstream libraries' kernels ran in this mode (from the kernels' origins), and which
    were imported by transformers without any of their kernels running (it took its PyTorch path:
    a version check, a layer the library does not cover, or, with `exporting`, a torch that says it
    is exporting while torch.compile traces: sdk.modeltier.worker.exporting_inside_compile)."""
    ran = sorted({k["origin"] for k in kernels if k.get("launches") and k.get("origin") not in _NOT_LIBRARIES})
    text = f"; library kernels from {', '.join(ran)}" if ran else ""
    idle = [m for m in imported if not any(m == o or m.startswith(o + "_") for o in ran)]
    if idle:
        text += f"; {', '.join(idle)} imported, none of its kernels ran"
        if exporting:
            text += f" ({EXPORTING_INSIDE_COMPILE})"
    return text


#: what the meta device cannot do (read a value, copy data out, an op without a meta kernel, or one
#: whose output shape depends on the data: torch.nonzero's "register_meta ... data-independent")
_META_LIMIT = re.compile(r"(\b|_)meta(\b|_)|data-(in)?dependent", re.IGNORECASE)


def _published_verdict(why: str, spec_path: str, timeout: float) -> str:
    """Whose failure an eager reference's `why` is, told by the published config's model:
    - run on the meta device (shapes and transformers' checks, no memory): where it fails too, the
      failure is transformers' own (the record says "eager reference failed");
    - where it runs there and the scaled config's model fails there, the scale rule broke the
      config: a day0 bug, said so;
    - where both run there, the failure is one of values, dtypes or devices, which the meta device
      cannot see (an fp32 tensor that transformers builds inside a bf16 model): the published model
      is run for real on the CPU where it is small enough (worker.REAL_RUN_PARAMS), and decides;
    - otherwise whether the published config runs is unknown, said so."""
    t0 = time.monotonic()

    def left() -> float:
        return max(1.0, min(timeout - (time.monotonic() - t0), 300.0))
    code, err = _python(["meta", spec_path], left())
    meta_why = _failure(code, err)
    if code == 1 and not _META_LIMIT.search(meta_why):
        same = "the same way" if meta_why == why else f"too ({meta_why})"
        return f"eager reference failed: {why}; transformers fails on the published config {same}, on the meta device"
    if code != 0:
        return (f"eager reference failed: {why}; whether the published config runs is unknown: "
                f"the meta device cannot run it ({meta_why})")
    broken = f"day0 bug: the scaled config breaks transformers' eager model ({why}), which runs the published config"
    code, err = _python(["meta", spec_path, "scaled"], left())
    scaled_why = _failure(code, err)
    if code == 1 and not _META_LIMIT.search(scaled_why):
        return f"{broken} (on the meta device, where the scaled config fails: {scaled_why})"
    if code != 0:
        return (f"eager reference failed: {why}; whether the published config runs is unknown: the meta "
                f"device runs it but cannot run the scaled config ({scaled_why})")
    code, err = _python(["published", spec_path], left())
    real_why = _failure(code, err)
    if code == 0:
        return f"{broken} (run for real on the CPU)"
    if code == 1:
        same = "the same way" if real_why == why else f"too ({real_why})"
        return (f"eager reference failed: {why}; transformers fails on the published config {same}, "
                "run for real on the CPU")
    return (f"eager reference failed: {why}; whether the published config runs is unknown: on the meta device "
            f"it runs, and so does the scaled config, and it is not run for real ({real_why})")


def _failure(code: int | str, err: str) -> str:
    if code == "timeout":
        return "timed out"
    lines = [line for line in err.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    if isinstance(code, int) and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}" + (f": {last}" if last else "")
        except ValueError:
            pass
    return last or f"exit code {code}"


def run_jobs(jobs: list[Job], on_records: Callable[[Job, list[dict]], None], *, workers: int = 1,
             timeout: float = 600.0) -> None:
    """Run jobs `workers` at a time; `on_records(job, records)` as each finishes (in this thread)."""
    if workers <= 1:
        for job in jobs:
            on_records(job, run_job(job, timeout))
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_job, job, timeout): job for job in jobs}
        from concurrent.futures import as_completed
        for fut in as_completed(futures):
            on_records(futures[fut], fut.result())


def iter_names(text: str) -> Iterator[str]:
    for part in text.split(","):
        if part.strip():
            yield part.strip()
