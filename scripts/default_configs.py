"""Write one config.json per generative language-model architecture the installed transformers knows,
from its config class's own defaults, for `scripts/model_sweep.py`.

    python scripts/default_configs.py OUT_DIR [--encoders] [--skip-types-of CONFIG_DIR] [--force]

An architecture is a model type with a causal language model (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) or
a generative image-text-to-text or multimodal language model (MODEL_FOR_IMAGE_TEXT_TO_TEXT /
MODEL_FOR_MULTIMODAL_LM): `day0 model` runs a multimodal config's text model. With --encoders, an
architecture is instead a model type with a sequence-to-sequence language model or a masked language
model (MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM / MODEL_FOR_MASKED_LM): the encoder-decoders and encoders
`day0 model` runs. Each config is
`ConfigClass().to_dict()` (transformers' defaults: often the full-size model the class documents,
which the model tier's scale rule must shrink) with `model_type` and `architectures` (the class the
first of those mappings names), written to OUT_DIR/<model_type>-defaults/config.json. A config class
that cannot be built without arguments gets a config of only those two fields, so that `day0 model`
says in one line what transformers rejects. --skip-types-of leaves out the model types of the
configs in CONFIG_DIR (NAME/config.json or NAME.json). Refuses to write into an OUT_DIR that holds
configs without --force. Exit status 0, or 2 on a bad argument (one line).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sdk.cli import OneLineParser  # noqa: E402
from sdk.errors import ConfigError  # noqa: E402
from sdk.fileio import atomic_write_text, read_bytes  # noqa: E402

#: the mappings whose classes generate text, in the order their class names are preferred
MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
            "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES")
#: the mappings of encoder-decoders and encoders (--encoders), likewise
ENCODER_MAPPINGS = ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES")


def generative_types(mappings: tuple[str, ...] = MAPPINGS) -> dict[str, str]:
    """{model_type: the first class's name} for every model type of `mappings`."""
    from transformers.models.auto import modeling_auto
    found: dict[str, str] = {}
    for name in mappings:
        for mt, cls in getattr(modeling_auto, name, {}).items():
            found.setdefault(mt, cls if isinstance(cls, str) else cls[0])
    return dict(sorted(found.items()))


def default_config(model_type: str, architecture: str) -> tuple[dict, str]:
    """(config dict, "" or why the class's defaults could not be built)."""
    from transformers import CONFIG_MAPPING
    head = {"model_type": model_type, "architectures": [architecture]}
    try:
        cfg = json.loads(CONFIG_MAPPING[model_type]().to_json_string(use_diff=False))
    except Exception as exc:  # the class's own validation rejects its defaults
        return head, " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
    cfg.update(head)
    return cfg, ""


def types_of(folder: Path) -> set[str]:
    """The model types of the configs in `folder` (NAME/config.json and NAME.json)."""
    types = set()
    for path in [*folder.glob("*/config.json"), *folder.glob("*.json")]:
        try:
            cfg = json.loads(read_bytes(path, "config", 16 << 20).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(cfg, dict) and isinstance(cfg.get("model_type"), str):
            types.add(cfg["model_type"])
    return types


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="default_configs", description=__doc__.splitlines()[0])
    p.add_argument("out_dir", type=Path, help="writes OUT_DIR/<model_type>-defaults/config.json")
    p.add_argument("--skip-types-of", type=Path, metavar="CONFIG_DIR",
                   help="leave out the model types of the configs in this folder")
    p.add_argument("--encoders", action="store_true",
                   help="the encoder-decoder and encoder (masked LM) model types instead of the generative ones")
    p.add_argument("--force", action="store_true", help="write into an OUT_DIR that already holds configs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        skip: set[str] = set()
        if args.skip_types_of is not None:
            if not args.skip_types_of.is_dir():
                raise ConfigError(f"--skip-types-of {args.skip_types_of} is not a directory")
            skip = types_of(args.skip_types_of)
        if args.out_dir.exists() and not args.out_dir.is_dir():
            raise ConfigError(f"{args.out_dir} exists and is not a directory")
        if args.out_dir.is_dir() and any(args.out_dir.glob("*/config.json")) and not args.force:
            raise ConfigError(f"{args.out_dir} already holds configs; pass --force to write over them")
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except (ConfigError, OSError) as exc:
        print(f"default_configs: error: {exc}", file=sys.stderr)
        return 2
    types = generative_types(ENCODER_MAPPINGS if args.encoders else MAPPINGS)
    written, failed = 0, []
    for mt, arch in types.items():
        if mt in skip:
            continue
        cfg, why = default_config(mt, arch)
        folder = args.out_dir / f"{mt}-defaults"
        folder.mkdir(exist_ok=True)
        atomic_write_text(folder / "config.json", json.dumps(cfg, indent=1, sort_keys=True) + "\n")
        written += 1
        if why:
            failed.append(f"{mt}: {why}")
    skipped = f", {len(types) - written} left out (in {args.skip_types_of})" if skip else ""
    what = "encoder-decoder and encoder" if args.encoders else "generative"
    print(f"{len(types)} {what} model types{skipped}: {written} configs written to {args.out_dir}")
    for line in failed:
        print(f"  defaults rejected by the config class, model_type and architectures only: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
