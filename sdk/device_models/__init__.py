"""Device models: accelerators described as data (one YAML file each, every figure with its source).

    from sdk.device_models import load, names
    h100 = load("nvidia_h100")              # a shipped model, by name
    mine = load("path/to/my_npu.yaml")      # a vendor's own model, by path
    h100.matrix_flops_per_s("bf16", "fp32") # FLOP/s
"""
from __future__ import annotations

from .dtypes import ATOMIC_OPS, DTYPES, FP8_DTYPES, canonical_dtype
from .flatten import figures_of, to_dict
from .loader import MODELS_DIR, all_models, installed_models, is_path, load, load_file, load_text, name_of, names
from .parse import SCHEMA_VERSION, parse_model
from .records import (Alignment, Atomics, Compute, DeviceModel, Dram, Features, Figure, Grid, Launch,
                      MatrixUnit, Memory, SharedMemory, SpecialFunction, TritonTarget, UnitMemory,
                      VectorUnit)

__all__ = [
    "ATOMIC_OPS", "DTYPES", "FP8_DTYPES", "MODELS_DIR", "SCHEMA_VERSION",
    "Alignment", "Atomics", "Compute", "DeviceModel", "Dram", "Features", "Figure", "Grid", "Launch",
    "MatrixUnit", "Memory", "SharedMemory", "SpecialFunction", "TritonTarget", "UnitMemory",
    "VectorUnit",
    "all_models", "canonical_dtype", "figures_of", "installed_models", "is_path", "load", "load_file",
    "load_text", "name_of", "names", "parse_model", "to_dict",
]
