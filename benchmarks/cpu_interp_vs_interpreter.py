"""cpu_interp vs Triton's own interpreter (TRITON_INTERPRET=1): same kernels, same shapes, one run.

    python benchmarks/cpu_interp_vs_interpreter.py [--interp-python /work/venv38/bin/python]
                                                   [--only rmsnorm,softmax] [--reps 3] [--out bench.json]

cpu_interp runs in this process; the interpreter runs in a subprocess of `--interp-python` (default:
this Python) with TRITON_INTERPRET=1 set before Triton is imported. Times are the best of `--reps`
launches after one warm-up launch (compilation excluded). Prints per-kernel times, the speedup and
the geometric mean, lists the kernels the interpreter cannot run, and writes JSON (`--out`).
Note: Triton 3.6's interpreter breaks on loops with numpy >= 2.4; use a Triton 3.8 Python for it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

WORKER = "--worker" in sys.argv
if WORKER and "--interpret" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


# ------------------------------------------------------------------------------------ kernels
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + cols, x * rstd * w, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
        x = tl.where(cols < N, x - mean, 0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
        y = (x - mean) * rstd * tl.load(w_ptr + cols, mask=mask) + tl.load(b_ptr + cols, mask=mask)
        tl.store(y_ptr + row * N + cols, y, mask=mask)


@triton.jit
def attention_kernel(Q, K, V, O, sm_scale, L, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start_m, bh = tl.program_id(0), tl.program_id(1)
    base = bh * L * D
    offs_m = start_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < L, other=0.0)
    m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for start_n in range(0, (start_m + 1) * BM, BN):
        cols = start_n + offs_n
        k = tl.load(K + base + cols[None, :] * D + offs_d[:, None], mask=cols[None, :] < L, other=0.0)
        qk = tl.dot(q, k) * sm_scale
        qk = tl.where((offs_m[:, None] >= cols[None, :]) & (cols[None, :] < L), qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < L, other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_ij
    tl.store(O + base + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16),
             mask=offs_m[:, None] < L)


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.rand(seed, offs) > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row * N + cols, tl.cumsum(x, axis=0), mask=cols < N)


@triton.jit
def histogram_atomic_kernel(x_ptr, hist_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(hist_ptr + x % BINS, 1, mask=offs < n)


@triton.jit
def libdevice_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, tl.extra.cuda.libdevice.tanh(x) + tl.extra.cuda.libdevice.erf(x), mask=offs < n)


# ----------------------------------------------------------------------------------- the cases
def _cases():
    """name -> (launch(), check()) built on fresh seeded inputs."""
    g = torch.Generator().manual_seed(0)
    cases = {}

    def reg(name):
        def deco(fn):
            cases[name] = fn
            return fn
        return deco

    @reg("vector_add_1M")
    def _():
        n = 1 << 20
        x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
        out = torch.empty(n)
        return (lambda: add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024),
                lambda: torch.allclose(out, x + y))

    @reg("rmsnorm_4096x4096")
    def _():
        M = N = 4096
        x, w = torch.randn(M, N, generator=g), torch.randn(N, generator=g)
        out = torch.empty(M, N)
        ref = lambda: x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * w
        return (lambda: rmsnorm_kernel[(M,)](x, w, out, x.stride(0), N, 1e-6, BLOCK=4096),
                lambda: torch.allclose(out, ref(), atol=1e-4, rtol=1e-4))

    @reg("softmax_1024x1000")
    def _():
        x = torch.randn(1024, 1000, generator=g)
        out = torch.empty_like(x)
        return (lambda: softmax_kernel[(1024,)](out, x, x.stride(0), 1000, BLOCK=1024),
                lambda: torch.allclose(out, torch.softmax(x, 1), atol=1e-6))

    @reg("matmul_256x256x256_f16")
    def _():
        M = N = K = 256
        a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
        c = torch.empty(M, N, dtype=torch.float16)
        return (lambda: matmul_kernel[(M // 32, N // 32)](a, b, c, M, N, K, BM=32, BN=32, BK=32),
                lambda: torch.allclose(c.float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2))

    @reg("layernorm_512x1000")
    def _():
        M, N = 512, 1000
        x, w, b = torch.randn(M, N, generator=g), torch.randn(N, generator=g), torch.randn(N, generator=g)
        y = torch.empty_like(x)
        return (lambda: layernorm_kernel[(M,)](x, w, b, y, N, 1e-5, BLOCK=256),
                lambda: torch.allclose(y, torch.nn.functional.layer_norm(x, (N,), w, b, 1e-5), atol=1e-4))

    @reg("attention_causal_4x128x64")
    def _():
        BH, L, D = 4, 128, 64
        q, k, v = (torch.randn(BH, L, D, generator=g).half() for _ in range(3))
        o = torch.empty_like(q)
        ref = lambda: torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                      is_causal=True)
        return (lambda: attention_kernel[(L // 32, BH)](q, k, v, o, D ** -0.5, L, D=D, BM=32, BN=32),
                lambda: torch.allclose(o.float(), ref(), atol=2e-2, rtol=2e-2))

    @reg("dropout_1M")
    def _():
        n = 1 << 20
        x = torch.randn(n, generator=g)
        out = torch.empty(n)
        return (lambda: dropout_kernel[(triton.cdiv(n, 1024),)](x, out, n, 0.25, 42, BLOCK=1024),
                lambda: abs((out != 0).float().mean().item() - 0.75) < 0.01)

    @reg("cumsum_512x512")
    def _():
        x = torch.randn(512, 512, generator=g)
        out = torch.empty_like(x)
        return (lambda: cumsum_kernel[(512,)](x, out, 512, BLOCK=512),
                lambda: torch.allclose(out, x.cumsum(1), atol=1e-3))

    @reg("atomic_histogram_256K")
    def _():
        n = 1 << 18
        x = torch.randint(0, 1 << 20, (n,), generator=g, dtype=torch.int32)
        hist = torch.zeros(64, dtype=torch.int32)

        def launch():
            hist.zero_()
            histogram_atomic_kernel[(triton.cdiv(n, 1024),)](x, hist, n, BINS=64, BLOCK=1024)
        return launch, lambda: torch.equal(hist, torch.bincount((x % 64).long(), minlength=64).int())

    @reg("libdevice_tanh_erf_1M")
    def _():
        n = 1 << 20
        x = torch.randn(n, generator=g)
        out = torch.empty(n)
        return (lambda: libdevice_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024),
                lambda: torch.allclose(out, torch.tanh(x) + torch.erf(x), atol=1e-5))

    return cases


def measure(names: list[str], reps: int) -> dict:
    out = {}
    cases = _cases()
    for name in names:
        try:
            launch, check = cases[name]()
            launch()  # warm-up: compiles
            ok = bool(check())
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                launch()
                times.append(time.perf_counter() - t0)
            out[name] = {"time_s": min(times), "correct": ok}
        except Exception as exc:  # the interpreter cannot run some kernels: record why
            msg = str(exc).strip().splitlines()
            out[name] = {"error": f"{type(exc).__name__}: {msg[-1] if msg else ''}"[:300]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interp-python", default=sys.executable)
    ap.add_argument("--only", default="")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--interp-reps", type=int, default=1)
    ap.add_argument("--out", default="")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--interpret", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = [n for n in _cases() if not args.only or n in args.only.split(",")]
    if args.worker:
        print("@@RESULT@@" + json.dumps(measure(names, args.reps)))
        return

    import sdk
    with sdk.activate("cpu_interp"):
        ours = measure(names, args.reps)
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("TRITON_DEFAULT_BACKEND", None)
    proc = subprocess.run([args.interp_python, os.path.abspath(__file__), "--worker", "--interpret",
                           "--reps", str(args.interp_reps), "--only", ",".join(names)],
                          capture_output=True, text=True, env=env)
    theirs = {}
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            theirs = json.loads(line[len("@@RESULT@@"):])
    if not theirs:
        theirs = {n: {"error": f"interpreter run failed: {proc.stderr.strip()[-300:]}"} for n in names}

    rows, speedups, cannot = [], [], []
    print(f"{'kernel':28s} {'cpu_interp s':>12s} {'interpreter s':>14s} {'speedup':>9s}  ok")
    for n in names:
        a, b = ours.get(n, {}), theirs.get(n, {})
        sp = None
        if "time_s" in a and "time_s" in b:
            sp = b["time_s"] / a["time_s"]
            speedups.append(sp)
        if "error" in b:
            cannot.append((n, b["error"]))
        ta = f"{a['time_s']:.4f}" if "time_s" in a else "error"
        tb = f"{b['time_s']:.4f}" if "time_s" in b else "cannot run"
        print(f"{n:28s} {ta:>12s} {tb:>14s} {(f'{sp:.1f}x' if sp else '-'):>9s}  {a.get('correct', a.get('error'))}")
        rows.append({"kernel": n, "cpu_interp": a, "interpreter": b, "speedup": sp})
    geo = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
    print(f"geometric-mean speedup: {geo:.1f}x over {len(speedups)} kernels" if geo else "no common kernels")
    if cannot:
        print("Triton's interpreter cannot run:")
        for n, why in cannot:
            print(f"  {n}: {why}")
    import triton as _t
    result = {"kernels": rows, "geomean_speedup": geo, "interpreter_cannot_run": dict(cannot),
              "interp_python": args.interp_python, "triton": _t.__version__, "torch": torch.__version__}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
