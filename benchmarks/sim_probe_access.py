"""Access-pattern probe on a GPU: what rotating interleaved pairs in place costs, load and store pattern
by pattern, against the bytes it moves.

    python3 benchmarks/sim_probe_access.py --out probe.json [--tokens 8192 --heads 128]

Every kernel turns the last 64 of 192 dims of each head of x [T, H, 192] (a DeepSeek-V3 query: 128
no-rope dims, then 64 rotary ones) in place, one program per (token, block of 32 heads), with the
cos/sin row of its token; the bytes are the same for all (the rotary dims read and written once):
- `suite`: the suite's rope_gptj_yarn call on its dsv3_T8192_H128 case (positions, the YaRN cache);
- `strided`: pairs (2i, 2i+1) read and written as two loads and two stores of stride 2 elements;
- `split`: the 64 dims loaded as one contiguous tile, split into pairs in registers, joined back and
  stored contiguously;
- `halves`: NeoX's pairing (i, i + 32): two contiguous loads and stores of 32 elements;
- `strided_load_only` / `strided_store_only`: the strided loads (summed, one value stored per
  program) and the strided stores (of the cos row) alone.
Each in bf16 and fp32. Time: median of triton.testing.do_bench (L2 flushed before each call). Prints
a table and writes JSON (effective bandwidth = bytes / time).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from sdk.fileio import atomic_write_text, json_text  # noqa: E402


@triton.jit
def _strided(x_ptr, cs_ptr, stride_t, stride_h, H, MODE: tl.constexpr, BH: tl.constexpr, HALF: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BH + tl.arange(0, BH)
    r = tl.arange(0, HALF)
    m = (h < H)[:, None]
    cos = tl.load(cs_ptr + t * 2 * HALF + r)
    sin = tl.load(cs_ptr + t * 2 * HALF + HALF + r)
    base = x_ptr + t * stride_t + h[:, None].to(tl.int64) * stride_h + 128
    if MODE == 0:      # pairs (2i, 2i + 1), stride-2 loads and stores
        x0 = tl.load(base + 2 * r[None, :], mask=m).to(tl.float32)
        x1 = tl.load(base + 2 * r[None, :] + 1, mask=m).to(tl.float32)
        tl.store(base + 2 * r[None, :], (x0 * cos - x1 * sin).to(x_ptr.dtype.element_ty), mask=m)
        tl.store(base + 2 * r[None, :] + 1, (x1 * cos + x0 * sin).to(x_ptr.dtype.element_ty), mask=m)
    elif MODE == 1:    # the same pairs through one contiguous tile
        d = tl.arange(0, 2 * HALF)
        x = tl.load(base + d[None, :], mask=m).to(tl.float32)
        x0, x1 = tl.split(tl.reshape(x, (BH, HALF, 2)))
        o = tl.reshape(tl.join(x0 * cos - x1 * sin, x1 * cos + x0 * sin), (BH, 2 * HALF))
        tl.store(base + d[None, :], o.to(x_ptr.dtype.element_ty), mask=m)
    elif MODE == 2:    # NeoX halves (i, i + HALF)
        x0 = tl.load(base + r[None, :], mask=m).to(tl.float32)
        x1 = tl.load(base + HALF + r[None, :], mask=m).to(tl.float32)
        tl.store(base + r[None, :], (x0 * cos - x1 * sin).to(x_ptr.dtype.element_ty), mask=m)
        tl.store(base + HALF + r[None, :], (x1 * cos + x0 * sin).to(x_ptr.dtype.element_ty), mask=m)
    elif MODE == 3:    # strided loads alone
        x0 = tl.load(base + 2 * r[None, :], mask=m).to(tl.float32)
        x1 = tl.load(base + 2 * r[None, :] + 1, mask=m).to(tl.float32)
        tl.store(cs_ptr + t * 2 * HALF + tl.program_id(1), tl.sum(tl.sum(x0 * cos + x1 * sin, 1), 0))
    else:              # strided stores alone
        v = tl.zeros((BH, HALF), tl.float32) + cos[None, :]
        tl.store(base + 2 * r[None, :], v.to(x_ptr.dtype.element_ty), mask=m)
        tl.store(base + 2 * r[None, :] + 1, v.to(x_ptr.dtype.element_ty), mask=m)


MODES = {"strided": 0, "split": 1, "halves": 2, "strided_load_only": 3, "strided_store_only": 4}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=128)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("sim_probe_access: needs a CUDA GPU", file=sys.stderr)
        return 2
    from triton.testing import do_bench
    T, H = args.tokens, args.heads
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        g = torch.Generator(device="cuda").manual_seed(11)
        x = torch.randn((T, H, 192), device="cuda", generator=g).to(dtype)
        cs = torch.randn((T, 64), device="cuda", generator=g, dtype=torch.float32)
        moved = T * H * 64 * x.element_size() * 2
        for name, mode in MODES.items():
            fn = lambda: _strided[(T, triton.cdiv(H, 32))](x, cs, x.stride(0), x.stride(1), H, MODE=mode, BH=32,  # noqa: E731
                                                            HALF=32, num_warps=4)
            fn()
            ms = do_bench(fn, warmup=5, rep=25, return_mode="median")
            part = moved // 2 if mode in (3, 4) else moved
            rows.append({"kernel": name, "dtype": str(dtype).split(".")[-1], "us": ms * 1e3, "bytes": part,
                         "GBps": part / (ms * 1e-3) / 1e9})
            print(f"{name:20s} {rows[-1]['dtype']:9s} {rows[-1]['us']:9.1f} us {rows[-1]['GBps']:8.0f} GB/s", flush=True)
    from sdk.conformance.check import case_seed
    from sdk.conformance.spec import DTYPES, registered
    spec = registered()["rope_gptj_yarn"]
    case = next(c for c in spec.cases if c.name == "dsv3_T8192_H128")
    for dt in ("bf16", "fp32"):
        gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, dt))
        inp = spec.make_inputs(case, DTYPES[dt], "cuda", gen)
        spec.run(inp, case)
        ms = do_bench(lambda: spec.run(inp, case), warmup=5, rep=25, return_mode="median")
        moved = 8192 * 128 * 64 * DTYPES[dt].itemsize * 2
        rows.append({"kernel": "suite", "dtype": dt, "us": ms * 1e3, "bytes": moved, "GBps": moved / (ms * 1e-3) / 1e9})
        print(f"{'suite':20s} {dt:9s} {rows[-1]['us']:9.1f} us {rows[-1]['GBps']:8.0f} GB/s", flush=True)
    result = {"gpu": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
              "tokens": T, "heads": H, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json_text(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
