"""Which transformers class the model tier builds from a text config.

1. A model that generates text from token ids, built from exactly this config class: the class
   transformers' AutoModelForCausalLM maps the config class to, else a generating class
   (`GenerationMixin`) of the config's own package (a multimodal model's text decoder such
   as MllamaForCausalLM, built from MllamaTextConfig; an early-fusion model whose one transformer
   reads text and image tokens alike, such as ChameleonForConditionalGeneration). Its logits are
   compared.
2. Only for the text part of a multimodal config (a config of its own class inside the whole
   model's): the base text model (AutoModel's class for the config class, else the package's model
   class built from it); its last hidden states are compared.
Models that are no causal decoder (`other_class`):
3. An encoder-decoder reading token ids (T5, BART, Marian, T5Gemma ...): transformers'
   AutoModelForSeq2SeqLM class for the whole config; its decoder's logits are compared.
4. An encoder reading token ids (BERT, RoBERTa, ModernBERT, DeBERTa ...): the masked language
   model class (its logits), else the base model (its last hidden states).
Anything else has no text model the tier can run. A class is named "module:Class" so that the
worker processes build the very class the plan chose.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def load(path: str) -> type:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def model_class(text: Any, multimodal_part: bool) -> tuple[type | None, str]:
    """(class, "logits" or "hidden states") to build from the text config `text`, or (None, "")."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING
    config_cls = type(text)
    causal = _mapped(MODEL_FOR_CAUSAL_LM_MAPPING, config_cls)
    if causal is not None:
        return causal, "logits"
    generating, base = _package_classes(config_cls)
    if generating:
        return generating[0], "logits"
    if not multimodal_part:
        return None, ""
    mapped = _mapped(MODEL_MAPPING, config_cls)
    if mapped is not None:
        return mapped, "hidden states"
    return (base[0], "hidden states") if base else (None, "")


def _mapped(mapping: Any, config_cls: type) -> type | None:
    """The class an auto mapping names for `config_cls`, if transformers defines it."""
    if config_cls not in mapping:
        return None
    try:
        return mapping[config_cls]
    except (ValueError, ImportError, AttributeError):  # a mapping entry naming a class it lacks
        return None


def _package_classes(config_cls: type) -> tuple[list[type], list[type]]:
    """(generating classes, base model classes) of the config's package (its modeling_* modules)
    built from exactly `config_cls`, most specific first."""
    from transformers import GenerationMixin, PreTrainedModel
    package = config_cls.__module__.rpartition(".")[0]
    found: dict[int, type] = {}
    try:
        path = importlib.import_module(package).__path__
    except (ImportError, AttributeError):
        return [], []
    for info in pkgutil.iter_modules(path):
        if not info.name.startswith("modeling_"):
            continue
        try:
            mod = importlib.import_module(f"{package}.{info.name}")
        except Exception:  # a module that needs an optional package
            continue
        found.update({id(c): c for c in vars(mod).values() if inspect.isclass(c) and issubclass(c, PreTrainedModel)
                      and getattr(c, "config_class", None) is config_cls and c.__module__ == mod.__name__
                      and not c.__name__.endswith("PreTrainedModel")})
    classes = sorted(found.values(), key=lambda c: c.__name__)
    generating = [c for c in classes if issubclass(c, GenerationMixin)]
    generating.sort(key=lambda c: not c.__name__.endswith("ForCausalLM"))
    base = [c for c in classes if c not in generating and c.__name__.endswith("Model")]
    base.sort(key=lambda c: not c.__name__.endswith("TextModel"))
    return generating, base


def other_class(config: Any, seq2seq: bool) -> tuple[type | None, str]:
    """(class, "logits" or "hidden states") of an encoder-decoder (`seq2seq`) or an encoder config
    whose model reads token ids, or (None, why not in a few words)."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_MASKED_LM_MAPPING, MODEL_MAPPING,
                                                        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING)
    mappings = ((MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING, "logits"),) if seq2seq else \
        ((MODEL_FOR_MASKED_LM_MAPPING, "logits"), (MODEL_MAPPING, "hidden states"))
    reads = ""
    for mapping, output in mappings:
        cls = _mapped(mapping, type(config))
        if cls is None:
            continue
        reads = getattr(cls, "main_input_name", "input_ids")
        if reads == "input_ids":
            return cls, output
    base = _mapped(MODEL_MAPPING, type(config))
    reads = reads or getattr(base, "main_input_name", "")
    if reads and reads != "input_ids":  # speech (input_features), images (pixel_values) ...
        return None, f"its model reads {reads}, not token ids"
    return None, "transformers has no " + ("sequence-to-sequence language model" if seq2seq else
                                          "masked language model or base model") + " for it"


def says_encoder(config: Any) -> bool:
    """Whether a config says its model is an encoder (attention both ways, no cache): a BERT-family
    config with is_decoder false (a composite config, a protein encoder beside a causal decoder as
    in Evolla, only carries the flag), or XLM's and FlauBERT's causal false."""
    bert = "add_cross_attention" in config.to_dict() and not getattr(config, "is_decoder", True) \
        and not getattr(type(config), "sub_configs", None)
    return bert or getattr(config, "causal", None) is False


def classify(full: Any, text: Any) -> tuple[str, type | None, str]:
    """(kind, class, what it compares) of a config: `full` the whole model's config, `text` its text
    decoder's (the same object for a text model). kind "decoder": a causal language model (a
    prefill, then decode steps with the cache); "seq2seq": an encoder-decoder reading token ids (the
    encoder over the tokens and a decoder prompt, then decode steps with the decoder's cache);
    "encoder": attention both ways and no cache (one forward pass). Where the kind has no class the
    tier can build, the class is None and the third field says why in a few words."""
    if getattr(full, "is_encoder_decoder", False) or getattr(text, "is_encoder_decoder", False):
        return ("seq2seq", *other_class(full, seq2seq=True))
    multimodal_part = type(text) is not type(full)
    if not says_encoder(text):
        cls, output = model_class(text, multimodal_part=multimodal_part)
        if cls is not None and output == "hidden states" and not _takes_cache(cls):
            # a text model that keeps no cache: one pass (CLIP's and SigLIP's text towers,
            # ModernVBERT's ModernBERT)
            return "encoder", cls, output
        if cls is not None or multimodal_part:  # a causal LM, or a multimodal model's text decoder
            return "decoder", cls, output
    return ("encoder", *other_class(text, seq2seq=False))


def _takes_cache(cls: type) -> bool:
    """Whether the model's forward takes a cache back (a decode step can continue it)."""
    params = inspect.signature(cls.forward).parameters
    return any(k in params for k in ("past_key_values", "cache", "cache_params", "use_cache"))
