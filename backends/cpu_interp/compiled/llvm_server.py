"""A child process that runs LLVM's optimiser and code generator for the compiled tier.

LLVM stops the whole process when one of its internal checks fails (llvmlite's LLVM is built with
them on), so the kernel's process hands LLVM IR to this one and receives the object back: a crash
here costs one retry (with the vectorisers off), never the caller. It imports nothing but
llvmlite and exits when its input closes.

Protocol on stdin/stdout, little-endian: request = u32 length, u32 flags (bit 0: vectorise),
IR text; reply = u8 status (0 ok, 1 error), u32 length, object bytes or error text.
"""
from __future__ import annotations

import struct
import sys


def target_machine():
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(), opt=3,
                                        codemodel="jitdefault")


def optimize(tm, text: str, vectorize: bool = True):
    """Parse, verify and optimise (O2 with loops vectorised, unless told not to). Loops are not
    unrolled: the vectoriser's interleaving is most of the gain, and unrolling the many
    constant-trip loop nests of a kernel multiplies code size and compile time about five times;
    O3 over O2 mostly unswitches loops (duplicating them), doubling code generation time."""
    import llvmlite.binding as llvm
    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_ir(tm, text: str, vectorize: bool = True) -> bytes:
    return tm.emit_object(optimize(tm, text, vectorize))


def _read(stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def serve() -> None:
    tm = target_machine()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            n, flags = struct.unpack("<II", _read(inp, 8))
            text = _read(inp, n).decode()
        except EOFError:
            return
        try:
            data, status = compile_ir(tm, text, vectorize=bool(flags & 1)), 0
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who falls back
            data, status = f"{type(exc).__name__}: {exc}".encode(), 1
        out.write(struct.pack("<BI", status, len(data)) + data)
        out.flush()


if __name__ == "__main__":
    serve()
