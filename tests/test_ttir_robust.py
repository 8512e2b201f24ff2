"""The TTIR reader on corrupted text: whatever it is given (a truncated artifact from Triton's cache,
flipped bytes, absurd counts, deep nesting, huge literals), `sdk.ttir.parse` returns a Module or
raises TTIRSyntaxError, promptly; never a hang, another exception, or unbounded memory."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ttir_kernels as K
from sdk.capture import capture
from sdk.errors import Day0Error
from sdk.ttir import Module, TTIRSyntaxError, parse

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 10.0  # a parse of any text here takes milliseconds; a hang fails the test at this limit


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise Hang in this (main) thread if the body runs longer than `seconds`."""
    def on_alarm(signum, frame):
        raise Hang(f"parse did not finish within {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def parse_or_error(text):
    """Module, or the TTIRSyntaxError it raised; anything else (a hang included) propagates."""
    with time_limit(LIMIT_S):
        try:
            return parse(text)
        except TTIRSyntaxError as exc:
            return exc


_TEXTS: dict[str, str] = {}


def real_ttir() -> dict[str, str]:
    """TTIR that Triton's frontend produced for kernels covering loops, reductions, dots, atomics,
    block pointers, calls and inline random numbers (compiled once per session)."""
    if not _TEXTS:
        x, y = torch.randn(4096), torch.empty(4096)
        launches = {
            "loops": lambda: K.loops[(1,)](x, y, 5, BLOCK=32),
            "row_reductions": lambda: K.row_reductions[(3,)](x, y, 100, BLOCK=128),
            "small_dot": lambda: K.small_dot[(1,)](x, x, y, M=16, N=16, K=16),
            "atomics": lambda: K.atomics[(4,)](x, y, 1000, BLOCK=256),
            "block_ptr": lambda: K.block_ptr[(1,)](x, y, 40, 30, BM=32, BN=32),
            "calls": lambda: K.calls[(1,)](x, y, 3.0, BLOCK=64),
            "random_bits": lambda: K.random_bits[(1,)](y, 123, BLOCK=64),
        }
        for name, launch in launches.items():
            with capture() as mods:
                launch()
            _TEXTS[name] = mods[0].text
    return _TEXTS


def test_the_parse_error_is_a_day0_error():
    assert issubclass(TTIRSyntaxError, Day0Error)


# ------------------------------------------------------------------------------- truncation
@pytest.mark.parametrize("name", ["loops", "block_ptr", "calls", "row_reductions"])
def test_every_truncation_inside_the_module_is_a_parse_error(name):
    """Cut just after every bracket and at every line end: a cut before the module's closing brace is
    a TTIRSyntaxError (on text cut inside `{...}` or `[...]` the reader used to loop forever)."""
    text = real_ttir()[name]
    assert isinstance(parse(text), Module)
    end = text.index("\n}")  # the module's own closing brace, at column 0
    cuts = sorted({k + 1 for k, ch in enumerate(text[:end]) if ch in "{[(<\n"} | {k for k in range(end)
                                                                                     if text[k] == "\n"})
    assert len(cuts) > 50
    for cut in cuts:
        out = parse_or_error(text[:cut])
        assert isinstance(out, TTIRSyntaxError), (cut, text[max(0, cut - 60):cut])
        assert str(out).startswith("TTIR")


def test_a_truncated_artifact_in_tritons_cache_fails_the_next_launch_promptly(tmp_path):
    """A kernel's cached cpu_interp artifact cut inside an attribute dictionary: the next launch in a
    fresh process ends with a TTIR error instead of hanging."""
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent("""\
        import torch, triton, triton.language as tl, sdk

        @triton.jit
        def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

        x, out = torch.randn(300), torch.empty(300)
        with sdk.activate("cpu_interp"):
            add[(2,)](x, x, out, 300, BLOCK=256)
        assert torch.equal(out, x + 1.0)
        print("ran")
    """))
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    first = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert first.returncode == 0 and "ran" in first.stdout, first.stderr[-2000:]
    [artifact] = (tmp_path / "cache").rglob("*.ttir_cpu")
    data = artifact.read_bytes()  # the TTIR text, after it the native object where the compiled tier ran
    artifact.write_bytes(data[:data.index(b"{tt.divisibility") + 5])
    try:
        second = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True,
                                text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a launch reading a truncated cached artifact hung")
    assert second.returncode != 0 and "ran" not in second.stdout
    assert "TTIRSyntaxError: TTIR line" in second.stderr and "unexpected end of text" in second.stderr


def test_a_cached_artifact_with_bytes_that_are_not_utf8_is_a_parse_error():
    """The reference backend and the TTIR capture hand the artifact's bytes to the reader, which
    names the byte, instead of failing with UnicodeDecodeError."""
    from sdk.backend import KernelInfo, registry
    from sdk.capture import CaptureBackend
    text = real_ttir()["calls"].encode()
    broken = text[:200] + b"\xff\xfe" + text[202:]
    info = KernelInfo("calls", (), None)
    for backend in (registry.get("cpu_interp"), CaptureBackend()):
        with pytest.raises(TTIRSyntaxError, match="not UTF-8 text .byte 200"):
            backend.load(broken, info)


# ----------------------------------------------------------------------- bounds and literals
def _module(body: str, args: str = "%a: i32, %b: i32, %p: !tt.ptr<f32>") -> str:
    return f"module {{\n  tt.func public @k({args}) {{\n{body}\n    tt.return\n  }}\n}}\n"


@pytest.mark.parametrize("text, message", [
    # nesting that used to exhaust Python's stack (RecursionError)
    (_module("    %0 = arith.constant 0 : " + "tensor<4x" * 1000 + "f32" + ">" * 1000), "nested"),
    (_module("    %0 = tt.foo %p : " + "!tt.ptr<" * 1000 + "f32" + ">" * 1000), "nested"),
    (_module("    %0 = arith.constant dense<" + "[" * 3000 + "1" + "]" * 3000 + "> : tensor<1xf32>"), "nested"),
    (_module("    tt.foo {x = " + "[" * 3000 + "1" + "]" * 3000 + "}"), "nested"),
    (_module("    scf.execute_region {\n" * 1000 + "    }\n" * 1000), "nested"),
    (_module("", args="%a: " + "(" * 2000 + "i32"), "nested"),
    (_module("    %0 = arith.addi %a, %b : i32 loc(" + "callsite(" * 1000 + '"f.py":1:1 at "f.py":2:2'
             + ")" * 1000 + ")"), "nested"),
    # an op without its `: type` signature (IndexError)
    (_module("    %0 = arith.cmpi slt, %a, %b"), "without its ': type'"),
    (_module("    %0 = tt.load %p"), "without its ': type'"),
    (_module("    %0 = tt.addptr %p, %a"), "without its ': type'"),
    # literals too large for Python to convert, or no number at all (ValueError)
    (_module("    %0 = arith.constant " + "7" * 5000 + " : i32"), "not a number literal"),
    (_module("    %0 = arith.constant dense<0.0[0000e+00> : tensor<4xf32>"), "not a number literal"),
    (_module("    %0 = arith.constant 0 : tensor<" + "9" * 5000 + "xi32>"), "tensor dimension"),
    (_module("    %0 = arith.constant 0 : tensor<99999999999999999999xi32>"), "tensor dimension"),
    (_module("    %0 = tt.foo %p : !tt.ptr<f32, x>"), "address space"),
    (_module("    %0 = arith.constant 0x1F : f8E9M9"), "no known bit layout"),
    (_module('    %0 = arith.constant dense<"0x0A0B0"> : tensor<2xi8>'), "hex dense literal"),
    (_module('    %0 = arith.constant dense<"0x0A0B0C"> : tensor<2xi8>'), "hex dense literal"),
    (_module("    %0 = tt.get_program_id w : i32"), "is not x, y or z"),
    (_module("    %0:3#1 = tt.foo %a : i32"), "malformed result name"),
    (b"module {\n  tt.func @k() {\n    tt.return \xff\n  }\n}\n", "not UTF-8"),
])
def test_malformed_input_is_a_parse_error(text, message):
    out = parse_or_error(text)
    assert isinstance(out, TTIRSyntaxError) and message in str(out), out


def test_nesting_within_the_limit_still_parses():
    text = _module("    %0 = arith.constant 0 : " + "tensor<2x" * 3 + "f32" + ">" * 3
                   + "\n    scf.execute_region {\n" * 5 + "    }\n" * 5)
    module = parse(text)
    assert str(module.funcs["k"].body.blocks[0].ops[0].results[0].type) == "tensor<2xtensor<2xtensor<2xf32>>>"


def test_an_absurd_result_count_is_refused_without_allocating():
    """`%0:4294967296 = ...` used to build four billion names; under a 1 GiB address-space limit the
    reader must refuse it with a parse error."""
    resource = pytest.importorskip("resource")
    code = textwrap.dedent(f"""\
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from sdk.ttir import TTIRSyntaxError, parse
        try:
            parse({_module("    %0:4294967296 = tt.foo %a : i32")!r})
        except TTIRSyntaxError as exc:
            print("refused:", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused: TTIR line 3" in proc.stdout and "more than 4096 results" in proc.stdout


def test_a_large_result_count_within_the_limit_is_read():
    module = parse(_module("    %r:300 = tt.foo %a : i32"))
    op = module.funcs["k"].body.blocks[0].ops[0]
    assert len(op.results) == 300 and op.results[299].name == "%r#299"


# ------------------------------------------------------------------------------------- fuzz
_INSERTS = ["{", "}", "[", "]", "<", ">", "(", ")", '"', "\\", "\n", ":", ",", "=", "%", "@", "#", "^bb1:",
            "->", "-", "x", "loc(", "tensor<", "!tt.ptr<", "dense<", "array<i32: ", "callsite(", "#loc3",
            "%0:4294967296 = ", "%x:99999999999999999999 = ", "9" * 5000, "0x" + "f" * 64, "1e99999",
            "-0.0e+", "tensor<" * 100, "[" * 300, "{\n" * 100, "(" * 300, "<" * 300, "scf.for ", "tt.func ",
            "tt.get_program_id ", "arith.constant ", "tt.return\n", "} do {\n", "\u00e9", "\x00"]

_MUTATION = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16)),
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 7)),    # one bit of one byte
    st.tuples(st.just("byte"), st.integers(0, 1 << 16), st.integers(0, 255)),  # one byte replaced
    st.tuples(st.just("duplicate"), st.integers(0, 1 << 16), st.integers(1, 400)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 400)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.sampled_from(_INSERTS), st.integers(1, 3)),
)


def mutate(data: bytes, mutations) -> bytes:
    for kind, pos, *rest in mutations:
        pos %= len(data) + 1
        if kind == "truncate":
            data = data[:pos]
        elif kind in ("flip", "byte") and pos < len(data):
            b = data[pos] ^ (1 << rest[0]) if kind == "flip" else rest[0]
            data = data[:pos] + bytes([b]) + data[pos + 1:]
        elif kind == "duplicate":
            data = data[:pos + rest[0]] + data[pos:pos + rest[0]] + data[pos + rest[0]:]
        elif kind == "delete":
            data = data[:pos] + data[pos + rest[0]:]
        elif kind == "insert":
            data = data[:pos] + rest[0].encode() * rest[1] + data[pos:]
    return data


@settings(max_examples=2000, deadline=timedelta(seconds=2), derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(name=st.sampled_from(sorted(["loops", "row_reductions", "small_dot", "atomics", "block_ptr", "calls",
                                    "random_bits"])),
       mutations=st.lists(_MUTATION, min_size=1, max_size=4), as_text=st.booleans())
def test_mutated_real_ttir_parses_or_raises_the_parse_error(name, mutations, as_text):
    data = mutate(real_ttir()[name].encode(), mutations)
    # bytes as a cached artifact holds them, or text as a caller that decoded it leniently has it
    out = parse_or_error(data.decode("utf-8", "replace") if as_text else data)
    assert isinstance(out, (Module, TTIRSyntaxError))
