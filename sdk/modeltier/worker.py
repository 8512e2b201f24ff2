"""One model, one dtype, in a process of its own: `python -m sdk.modeltier.worker PHASE SPEC OUT`.

Phase `reference`: the upstream Triton libraries transformers would use for some layers (FLA,
causal-conv1d, mamba-ssm ...) are made unimportable, so that eager PyTorch on the CPU computes the
reference; the model is built from the scaled config with seeded random weights, and its prefill
and decode logits and weights are saved.
Phase `backend`: the backend is selected first (libraries that cache their device at import see
it), then the same model is built with the saved weights and run under torch.compile with Inductor's
Triton code generation on the backend (`sdk.inductor`); where transformers calls an installed Triton
library for a layer, that library's kernels run on the backend too. Every kernel launched is
recorded per mode with its origin, op set and fault.
Phase `meta` (after a reference that failed): the published config's model on the meta device
(`meta SPEC scaled`: the scaled one's). Phase `published` (where both run there): the published
config's model run for real on the CPU, when it is small enough (`published_for_real`).
Phase `stock` (after logits that differ from eager, or an error torch.compile raised): the model
under PyTorch's own Inductor, on the backend's device where PyTorch compiles for it (CUDA), else on
the CPU (C++, no Triton).
"""
from __future__ import annotations

import inspect
import json
import os
import sys
import time
import traceback
from typing import Any

#: what transformers would import for a faster layer; the reference must not run them
LIBRARIES = ("fla", "causal_conv1d", "mamba_ssm", "liger_kernel", "vllm", "flash_attn", "kernels")
TOLERANCE = {"fp32": 1e-3, "bf16": 3e-2, "fp16": 1e-2}  # relative RMSE of the logits vs eager


def _dtype(name: str):
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def build(spec: dict):
    """The transformers model of `spec["config"]` (a scaled text config) with seeded weights."""
    import torch
    from ..models.hfconfig import config_object
    from .classes import load, model_class
    cfg = dict(spec["config"])
    config = config_object(cfg.pop("model_type"), cfg)
    # the class the plan chose (a causal LM, or a multimodal model's text model whose hidden states
    # are compared); a spec without one gets the same choice for a multimodal model's text part
    cls = load(spec["model_class"]) if spec.get("model_class") else model_class(config, multimodal_part=True)[0]
    if cls is None:
        raise ValueError(f"transformers has no causal language model or text model for {type(config).__name__}")
    torch.manual_seed(spec["seed"])
    model = cls._from_config(config, attn_implementation="eager", dtype=_dtype(spec["dtype"]))
    return model.eval(), config


def inputs(spec: dict, vocab: int):
    """(prompt token ids [batch, tokens], the next token [batch, 1]), seeded."""
    import torch
    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    ids = torch.randint(0, vocab, (spec["batch"], spec["tokens"]), generator=gen)
    nxt = torch.randint(0, vocab, (spec["batch"], 1), generator=gen)
    return ids, nxt


def vocabulary(config) -> int:
    """Token ids every embedding of the model reads: the vocabulary, the smaller of an
    encoder-decoder's two (Marian's decoder_vocab_size), a sub-config's where the config has none."""
    sizes = [getattr(config, k, None) for k in ("vocab_size", "decoder_vocab_size")]
    sizes = [v for v in sizes if type(v) is int and v > 0]
    return min(sizes) if sizes else int(config.get_text_config(decoder=True).vocab_size)


def run_modes(model, spec: dict, config, device=None, on_mode=None, keep=None) -> dict[str, Any]:
    """Each of `spec`'s modes run on `model` with the seeded inputs (on `device`), as `spec["kind"]`
    says: what each mode keeps (see `forward`)."""
    import torch
    vocab = vocabulary(config)
    ids, nxt = (t.to(device) if device is not None else t for t in inputs(spec, vocab))
    kind = spec.get("kind", "decoder")
    if kind == "decoder":
        return forward(model, ids, nxt, spec["modes"], on_mode, keep)
    if kind == "encoder":
        return encode(model, ids, on_mode, keep)
    gen = torch.Generator().manual_seed(spec["seed"] + 2)
    dec = torch.randint(0, vocab, ids.shape, generator=gen)
    return seq2seq(model, ids, dec.to(ids.device), nxt, spec["modes"], on_mode, keep)


def encode(model, ids, on_mode=None, keep=None) -> dict[str, Any]:
    """An encoder's one forward pass over `ids` (every token sees every other), kept as the
    prefill."""
    import torch
    keep = keep or _output
    with torch.no_grad(), (on_mode("prefill") if on_mode else _null()):
        return {"prefill": keep(model(input_ids=ids, attention_mask=torch.ones_like(ids)))}


def seq2seq(model, ids, dec, nxt, modes: list[str], on_mode=None, keep=None) -> dict[str, Any]:
    """An encoder-decoder, as generate() runs one: the prefill encodes `ids` (the model's encoder,
    compiled as the model is) and runs the decoder over `dec` (its logits kept); a decode step
    feeds `nxt` to the decoder with its cache and the same encoder output."""
    import torch
    keep = keep or _output
    orig = getattr(model, "_orig_mod", model)
    encoder = orig.get_encoder()
    if model is not orig:  # the model is compiled: so is its encoder, which generate() calls apart
        encoder = torch.compile(encoder, fullgraph=False, dynamic=False)
    params = inspect.signature(model.forward).parameters
    takes = inspect.signature(orig.forward).parameters
    mask = torch.ones_like(ids)
    out: dict[str, Any] = {}
    with torch.no_grad():
        with (on_mode("prefill") if on_mode else _null()):
            encoded = encoder(input_ids=ids, attention_mask=mask)
            first = model(encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=dec, use_cache=True)
        out["prefill"] = keep(first)
        if "decode" in modes:
            cache_key = _cache_key(first, takes)
            if cache_key is None:
                raise RuntimeError(f"transformers' {type(orig).__name__} returned no decoder cache from the "
                                   "prefill (use_cache=True): a decode step has nothing to continue")
            kwargs = {cache_key: getattr(first, cache_key), "use_cache": True, "attention_mask": mask,
                      "encoder_outputs": encoded}
            if "cache_position" in params:
                kwargs["cache_position"] = torch.tensor([dec.shape[1]], device=dec.device)
            with (on_mode("decode") if on_mode else _null()):
                out["decode"] = keep(model(decoder_input_ids=nxt, **kwargs))
    return out


def forward(model, ids, nxt, modes: list[str], on_mode=None, keep=None) -> dict[str, Any]:
    """A causal decoder: prefill over `ids`, then one decode step of `nxt` with the cache or
    recurrent state; what each mode keeps (`keep(output)`: by default its logits, on the CPU)."""
    keep = keep or _output
    import torch
    params = inspect.signature(model.forward).parameters
    takes = inspect.signature(getattr(model, "_orig_mod", model).forward).parameters
    out: dict[str, Any] = {}
    with torch.no_grad():
        with (on_mode("prefill") if on_mode else _null()):
            first = model(ids, use_cache=True)
            given = next((k for k in ("cache", "past_key_values") if k in takes), None)  # transformers >= 5.24: cache
            made = None
            if "decode" in modes and _cache_key(first, takes) is None and given:
                # a decoder whose caller makes the cache, as generate() does for the text model of a
                # multimodal one: the prefill again, into a cache made from the model's config (which
                # the model fills in place, whether or not its output hands it back)
                from transformers import DynamicCache
                made = DynamicCache(config=getattr(model, "_orig_mod", model).config)
                first = model(ids, **{given: made}, use_cache=True)
        out["prefill"] = keep(first)
        if "decode" in modes:
            cache_key = _cache_key(first, takes)
            if cache_key is None and made is not None and _filled(made) == ids.shape[1]:
                state = {given: made}
            elif cache_key is None:
                raise RuntimeError(f"transformers' {type(model).__name__} returned no cache from the prefill "
                                   "(use_cache=True): a decode step has nothing to continue")
            else:
                state = {cache_key: getattr(first, cache_key)}
            kwargs = {**state, "use_cache": True}
            if "cache_position" in params:
                kwargs["cache_position"] = torch.tensor([ids.shape[1]], device=ids.device)
            with (on_mode("decode") if on_mode else _null()):
                second = model(nxt, **kwargs)
            out["decode"] = keep(second)
    return out


def _filled(cache) -> int | None:
    """Tokens a cache holds, or None where it cannot say (a cache of recurrent layers only)."""
    try:
        return int(cache.get_seq_length())
    except Exception:
        return None


def _cache_key(result, takes) -> str | None:
    """Where a prefill's output holds its cache, under the name the model takes it back: cache
    (transformers >= 5.24), past_key_values, cache_params, or another output field the model
    takes back (RWKV's state)."""
    if "cache" in takes and getattr(result, "cache", None) is not None:
        return "cache"
    return next((k for k in ("past_key_values", "cache_params") if getattr(result, k, None) is not None),
                None) or next((k for k in result.keys() if k in takes and result[k] is not None), None)


def _output(result):
    """The logits, or the last hidden states of a decoder built without an LM head."""
    value = getattr(result, "logits", None)
    return (value if value is not None else result.last_hidden_state).float().cpu()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _hide_libraries() -> None:
    """Make the LIBRARIES unimportable: transformers takes its PyTorch path for those layers."""
    for name in LIBRARIES:
        sys.modules[name] = None  # import fails


def exporting_inside_compile() -> bool:
    """Whether torch.compiler.is_exporting() answers True while torch.compile traces a function
    (torch 2.11 does). transformers' wrappers of library kernels (FLA's gated delta rule ...) take
    their PyTorch path when exporting, so under such a torch no library kernel runs in a compiled
    model, whatever is installed."""
    import torch

    def probe(x):
        return x + 1 if torch.compiler.is_exporting() else x

    try:
        return bool(torch.compile(probe, backend="eager", fullgraph=True)(torch.zeros(1)).item() == 1)
    except Exception:  # no answer: say nothing
        return False


def _relative_rmse(got, want) -> float:
    """||got - want|| / ||want||, in fp64."""
    return float((got - want).double().norm() / max(float(want.double().norm()), 1e-30))


def reference(spec: dict, out_path: str) -> None:
    _hide_libraries()
    import torch
    model, config = build(spec)
    logits = run_modes(model, spec, config)
    torch.save({"state_dict": model.state_dict(), "logits": logits}, out_path)


#: the most parameters a published config's model may have to be run for real on the CPU when the
#: meta device cannot tell whose an eager failure is (1e9 in fp32 is 4 GB, and seconds to build)
REAL_RUN_PARAMS = 1_000_000_000
#: exit code of phase `published`: the published model is larger than REAL_RUN_PARAMS, not run
TOO_LARGE = 3


def published_for_real(spec: dict) -> int:
    """The published config's model built with seeded weights on the CPU, in the job's dtype, and
    run, prefill and decode, on the same seeded inputs: a value, dtype or device failure the meta
    device cannot see shows here. Models over REAL_RUN_PARAMS parameters are not built (returns
    TOO_LARGE; their count comes from the meta device)."""
    _hide_libraries()
    import torch
    published = {**spec, "config": spec["published"]}
    with torch.device("meta"):
        model, _ = build(published)
    count = sum(p.numel() for p in model.parameters())
    if count > REAL_RUN_PARAMS:
        print(f"the published model has {count:,} parameters, over the {REAL_RUN_PARAMS:,} run for real",
              file=sys.stderr)
        return TOO_LARGE
    del model
    model, config = build(published)
    run_modes(model, spec, config, keep=lambda result: None)
    return 0


def on_meta(spec: dict, which: str = "published") -> None:
    """The published (unscaled) config's model, or with `which` "scaled" the scaled one, built and
    run, prefill and decode, on the meta device: no memory and no arithmetic, only shapes and
    transformers' own checks. It tells a config transformers cannot run at all from one the scale
    rule broke."""
    _hide_libraries()
    import torch
    chosen = {**spec, "config": spec["published"]} if which == "published" else spec
    with torch.device("meta"):
        model, config = build(chosen)
    run_modes(model, spec, config, device="meta", keep=lambda result: None)  # meta tensors hold no values


def stock_device(backend: str) -> str:
    """Where PyTorch's own Inductor runs for the stock check: the backend's device where PyTorch
    compiles for it itself (a CUDA device: Inductor's own Triton code through Triton's own NVIDIA
    backend, no day0 in the way), else the CPU (Inductor's C++ code, no Triton)."""
    import torch
    try:
        from ..backend import get_backend
        device = str(get_backend(backend).torch_device)
    except Exception:  # noqa: BLE001 - an unknown backend: the CPU is the one stock target left
        return "cpu"
    return device if device.startswith("cuda") and torch.cuda.is_available() else "cpu"


def stock_inductor(spec: dict, ref_path: str, out_path: str) -> None:
    """The same model and weights under torch.compile with Inductor as PyTorch ships it, on the
    backend's device where PyTorch compiles for it (CUDA) and else on the CPU (`stock_device`), the
    libraries unimportable as for the reference. Writes each mode's relative RMSE against the
    reference, the error torch.compile raised if it did, and where it ran: where it differs from
    eager too, or raises the same error, torch.compile is at fault, not the backend."""
    _hide_libraries()
    import torch
    device = stock_device(spec["backend"])
    model, config = build(spec)
    ref = torch.load(ref_path, weights_only=True)
    model.load_state_dict(ref["state_dict"], strict=False)
    model = model.to(device)
    logits, error, current = {}, None, [None]

    def on_mode(mode):  # the modes that finished keep their logits when a later one raises
        current[0] = mode
        return _null()

    def keep(result):
        logits[current[0]] = _output(result)
        return logits[current[0]]
    try:
        run_modes(torch.compile(model, fullgraph=False, dynamic=False), spec, config, device=torch.device(device),
                  on_mode=on_mode, keep=keep)
    except Exception as exc:  # noqa: BLE001 - torch.compile's own failure, said as the backend run says its own
        error = f"{type(exc).__name__}: {_root_message(exc)}"
    rmse = {mode: _relative_rmse(got, ref["logits"][mode]) for mode, got in logits.items()}
    where = "on the CPU: C++, no Triton" if device == "cpu" else f"on {device}: its own Triton code, no day0"
    with open(out_path, "w") as fh:
        json.dump({"rmse": rmse, "error": error, "where": where}, fh)


def backend_run(spec: dict, ref_path: str, out_path: str) -> None:
    import sdk
    from sdk import launches
    from sdk.backend import get_backend
    results: dict[str, Any] = {"modes": {}, "libraries": []}
    with sdk.inductor(spec["backend"]) as session:
        import torch
        model, config = build(spec)
        ref = torch.load(ref_path, weights_only=True)
        missing, unexpected = model.load_state_dict(ref["state_dict"], strict=False)
        if missing or unexpected:
            raise RuntimeError(f"weights differ from the reference model: missing {sorted(missing)[:5]}, "
                               f"unexpected {sorted(unexpected)[:5]}")
        results["libraries"] = sorted(m for m in LIBRARIES if m in sys.modules and sys.modules[m] is not None)
        # asked only where a library was imported: the answer explains only an idle library
        results["exporting_inside_compile"] = bool(results["libraries"]) and exporting_inside_compile()
        # the model and its inputs live where the backend's kernels read them (a GPU's memory for
        # nvidia_ref): Inductor generates Triton for the device its tensors are on
        device = torch.device(get_backend(session.backend).torch_device)
        results["device"] = str(device)
        model = model.to(device)
        compiled = torch.compile(model, fullgraph=False, dynamic=False)
        recorders: dict[str, Any] = {}
        timings: dict[str, float] = {}

        class on_mode:
            def __init__(self, mode):
                self.mode = mode

            def __enter__(self):
                self.cm = launches.record(defer_unsupported=True)
                recorders[self.mode] = self.cm.__enter__()
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timings[self.mode] = time.perf_counter() - self.t0
                self.cm.__exit__(*exc)
                return False

        error = None
        try:
            logits = run_modes(compiled, spec, config, device, on_mode)
        except BaseException as exc:  # reported per mode below; the process ends normally
            logits, error = {}, exc
        for mode in spec["modes"]:
            rec = recorders.get(mode)
            entry: dict[str, Any] = {"kernels": [k.to_json() for k in rec.kernels] if rec else [],
                                     "seconds": timings.get(mode)}
            if mode in logits:
                got, want = logits[mode], ref["logits"][mode]
                entry["rmse"] = _relative_rmse(got, want)
                entry["max_abs"] = float((got - want).double().abs().max())
                entry["finite"] = bool(torch.isfinite(got).all())
            elif error is not None and (rec is not None or mode == spec["modes"][0]):
                entry["error"] = f"{type(error).__name__}: {_root_message(error)}"
                entry["unsupported"] = _unsupported(error)
            results["modes"][mode] = entry
            if mode not in logits and error is not None and rec is not None:
                break
    with open(out_path, "w") as fh:
        json.dump(results, fh)


def _root_message(exc: BaseException) -> str:
    """The innermost cause's message (Inductor and dynamo wrap what a kernel raised)."""
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    root = seen[-1]
    text = str(root).strip().splitlines()
    head = text[0] if text else type(root).__name__
    return f"{head} ({type(root).__name__})" if root is not seen[0] else head


def _unsupported(exc: BaseException) -> list[dict]:
    from sdk.errors import UnsupportedOps
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        if isinstance(exc, UnsupportedOps):
            return [{"kernel": exc.kernel, "name": op.name, "signature": op.signature, "loc": op.loc,
                     "source": op.source} for op in exc.ops]
        exc = exc.__cause__ or exc.__context__
    return []


def main(argv: list[str]) -> int:
    phase, spec_path, *paths = argv
    with open(spec_path) as fh:
        spec = json.load(fh)
    try:
        if phase == "reference":
            reference(spec, *paths)
        elif phase == "meta":
            on_meta(spec, *paths)
        elif phase == "published":
            return published_for_real(spec)
        elif phase == "stock":
            stock_inductor(spec, *paths)
        else:
            backend_run(spec, *paths)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main(sys.argv[1:]))
