"""Show what the compiled tier makes of a kernel's TTIR.

    python -m backends.cpu_interp.compiled KERNEL.ttir [--llvm | --opt | --asm] [--no-bounds-check]

Without a flag: whether it lowers (or why not) and how long each stage takes. --llvm prints the
LLVM IR as emitted, --opt after LLVM's optimisation, --asm the machine code.
"""
from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m backends.cpu_interp.compiled", description=__doc__.splitlines()[0])
    p.add_argument("ttir", help="a TTIR file (e.g. from TRITON_KERNEL_DUMP or `day0 ops`' capture)")
    show = p.add_mutually_exclusive_group()
    show.add_argument("--llvm", action="store_true", help="print the LLVM IR as emitted")
    show.add_argument("--opt", action="store_true", help="print the optimised LLVM IR")
    show.add_argument("--asm", action="store_true", help="print the machine code")
    p.add_argument("--no-bounds-check", action="store_true", help="emit no bounds checks")
    args = p.parse_args(argv)
    from sdk.errors import Day0Error
    from sdk.fileio import read_text
    from sdk.ttir import TTIRSyntaxError, parse
    try:
        module = parse(read_text(args.ttir, "TTIR file"))
    except (Day0Error, TTIRSyntaxError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from . import jit, refusal
    from .core import KernelCompiler
    from .types import Unsupported
    check = not args.no_bounds_check
    why = refusal(module, check)
    if why:
        print(f"{module.entry.name}: runs on the interpreter: {why}")
        return 0
    t0 = time.perf_counter()
    kc = KernelCompiler(module, check)
    try:
        text = kc.build()
    except Unsupported as exc:
        print(f"{module.entry.name}: runs on the interpreter: not lowered by the compiled tier: {exc}")
        return 0
    t1 = time.perf_counter()
    if args.llvm:
        print(text)
        return 0
    if args.opt or args.asm:
        from .llvm_server import optimize
        mod = optimize(jit.target_machine(), text)
        print(str(mod) if args.opt else jit.target_machine().emit_assembly(mod))
        return 0
    data = jit.compile_ir(text)
    t2 = time.perf_counter()
    print(f"{module.entry.name}: compiled; emit {t1 - t0:.3f} s, LLVM {t2 - t1:.3f} s, "
          f"{len(text.splitlines())} lines of IR, {len(data)} bytes of object, {kc.arena} bytes of scratch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
