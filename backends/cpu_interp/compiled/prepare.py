"""The TTIR the compiled tier lowers: Triton's own TTIR passes rewrite the two things it does not
lower directly, on a copy of the kernel's module (the interpreter keeps the original).

Tensor descriptors. A device without a tensor-memory copy engine runs `tt.make_tensor_descriptor`
and the `tt.descriptor_*` accesses as ordinary masked loads, stores and atomics. Triton ships the
rewrite (`rewrite_tensor_descriptor_to_pointer`, the pass NVIDIA's backend runs below sm_90): each
descriptor becomes its base pointer, its shape and strides (i64 each) and i1 flags (padding with
NaN; Triton 3.8 adds rounding to tf32), and each access a pointer tensor and an in-bounds mask.
A host descriptor parameter (`TensorDescArg`) becomes those values in place of the descriptor, so
the launcher passes the descriptor as its base tensor, shape, strides and flags (`expand_args`);
the shape and stride parameters Triton's frontend adds after it stay as they are. Its innermost
stride is compiled in as 1 (`unit_strides`: Triton's TensorDescriptor requires it), so that LLVM
sees contiguous rows.

Functions kept out of line (`@triton.jit(noinline=True)`, `tt.call`). The attribute asks a GPU
compiler not to inline; on a CPU it is only a code-size hint, so the copy's functions are marked
inlinable and Triton's inliner (MLIR's, with Triton's rules) inlines every call.
"""
from __future__ import annotations

import functools
import os
import re
import tempfile

from sdk.records import TensorDescArg
from sdk.ttir import Module, parse
from sdk.ttir.types import TensorDescType

from .types import Unsupported

#: the ops that make or use a tensor descriptor
OPS = frozenset({"tt.make_tensor_descriptor", "tt.descriptor_load", "tt.descriptor_store",
                 "tt.descriptor_reduce", "tt.descriptor_gather", "tt.descriptor_scatter"})


def uses_descriptors(module: Module) -> bool:
    """Whether any function of `module` takes, makes or uses a tensor descriptor."""
    if any(isinstance(a.type, TensorDescType) for f in module.funcs.values() for a in f.args):
        return True
    return any(op.name in OPS for op in module.walk())


def lowerable(module: Module) -> Module:
    """`module` without tensor descriptors and calls: itself when it has neither, else Triton's
    rewrite of it (its locations pointing where `module`'s do). Raises Unsupported when a pass
    refuses or a call stays."""
    if not uses_descriptors(module) and len(module.funcs) == 1:
        return module
    out = parse(_rewrite(module.text))
    out.relocate(module.entry.loc.file if module.entry.loc is not None else None)
    if len(out.funcs) != 1 or any(op.name == "tt.call" for op in out.walk()):
        raise Unsupported("a call Triton's inliner leaves in place (a callee of several blocks, "
                          "as early returns make, called inside a loop or branch; or recursion)")
    return out


#: a function attribute that keeps Triton's inliner away (the frontend prints it so)
_NOINLINE = re.compile(r"\bnoinline = true\b")


@functools.lru_cache(maxsize=64)
def _rewrite(text: str) -> str:
    from triton._C.libtriton import ir
    from sdk.stages import run_passes
    ctx = ir.context()
    ir.load_dialects(ctx)
    fd, path = tempfile.mkstemp(suffix=".ttir")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_NOINLINE.sub("noinline = false", text))
        mod = ir.parse_mlir_module(path, ctx)
        mod.context = ctx
        run_passes(mod, ("inliner", "rewrite_tensor_descriptor_to_pointer", "canonicalizer", "cse", "symbol_dce"),
                   "day0_compiled")
        return mod.str()
    except Exception as exc:  # noqa: BLE001 - MLIR reports a text it cannot read or a refused rewrite so
        raise Unsupported(f"Triton's MLIR did not read or rewrite it ({type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:200]})") from None
    finally:
        os.unlink(path)


def flag_count(module: Module, lowered: Module) -> int:
    """How many i1 flags the rewrite gives each descriptor parameter after its base, shape and
    strides: the padding flag, and in Triton 3.8 also whether loads round f32 to tf32. Read off
    the two signatures, so that it follows the installed Triton."""
    descs = [a.type for a in module.entry.args if isinstance(a.type, TensorDescType)]
    if not descs:
        return 0
    grown = len(lowered.entry.args) - len(module.entry.args) - sum(2 * len(t.block.shape) for t in descs)
    if grown < len(descs) or grown % len(descs):
        raise Unsupported(f"the rewritten {module.entry.name} has {len(lowered.entry.args)} parameters, "
                          f"which do not split into its {len(descs)} descriptors")
    return grown // len(descs)


def unit_strides(module: Module, lowered: Module, flags: int) -> dict[int, int]:
    """The rewritten module's parameters that hold a host descriptor's innermost stride, each 1:
    Triton's TensorDescriptor requires the last dimension contiguous, so the code may take the
    stride as the constant it is (consecutive elements, vector accesses) rather than read it."""
    out, pos = {}, 0
    for a in module.entry.args:
        if isinstance(a.type, TensorDescType):
            rank = len(a.type.block.shape)
            out[pos + 2 * rank] = 1  # after the base, the shape and the strides before it
            pos += 1 + 2 * rank + flags
        else:
            pos += 1
    return out


def expand_args(args, flags: int) -> list:
    """Kernel arguments as the rewritten module takes them: each host descriptor as its base
    tensor, shape, strides, then `flags` flags: padding with NaN, then (Triton 3.8) rounding to
    tf32, which is left off, as the interpreter leaves it."""
    out = []
    for a in args:
        if isinstance(a, TensorDescArg):
            out += [a.base, *a.shape, *a.strides, int(a.padding == "nan")] + [0] * (flags - 1)
        else:
            out.append(a)
    return out


__all__ = ["OPS", "expand_args", "flag_count", "lowerable", "unit_strides", "uses_descriptors"]
