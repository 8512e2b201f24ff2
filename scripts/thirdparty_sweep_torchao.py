"""The torchao Triton ops `thirdparty_sweep.py` runs, with references written here in PyTorch.

- DeepSeek-V3-style blockwise fp8 (`torchao.kernel.blockwise_quantization`): activations quantised
  per 1 x 128 block, weights per 128 x 128 block (scale = amax / 448, e4m3), and the GEMM over both
  scale grids; 48 tokens (a partial 16-row tile for every block size the GEMM autotunes over),
  384 -> 256 features.
- HQQ's int4 x bf16 / fp32 GEMM (`torchao.prototype.hqq.triton_mixed_mm`): two 4-bit weights per
  byte (consecutive rows in the low / high nibble), zero point and scale per group of 128 input
  rows (kept [N, groups] and passed transposed, as HQQ's layers do), the forward (a @ W) and the transposed product of the backward (g @ W^T).
- MX formats (`torchao.prototype.mx_formats.kernels`): mxfp8 dequantisation (e4m3 data, one e8m0
  power-of-two scale per 32 elements) and the 128 x 4 block swizzle of scale tensors.
References take the library's quantised tensors as given (fp8 / int4 values are exact in fp64) and
redo the arithmetic in fp64; quantisers are checked value by value (a scale, a rounding).
"""
from __future__ import annotations

import torch

from library_sweep import SweepOp
from thirdparty_sweep import require

OPS: list[SweepOp] = []
E4M3 = torch.float8_e4m3fn


def op(name, make, call, ref, grads=(), dtypes=("fp32",), **kw):
    OPS.append(SweepOp(name=f"torchao.{name}", lib="torchao", make=make, call=call, ref=ref, grads=grads,
                       dtypes=dtypes, **kw))


def fn(module, name):
    return getattr(require("torchao", module), name)


def rn(gen, *shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


BQ = "torchao.kernel.blockwise_quantization"
TOK, KIN, NOUT, BLK = 48, 384, 256, 128


# ------------------------------------------------------------------------------------ blockwise fp8
def _e4m3(x):
    """Round to e4m3 as torch does (nearest even); the values are in range by construction."""
    return x.to(E4M3).double()


def _act_quant_ref(x):
    xb = x["x"].reshape(TOK, KIN // BLK, BLK)
    s = xb.abs().amax(-1) / 448.0
    return {"y": _e4m3(xb / s[..., None]).reshape(TOK, KIN), "s": s}


op("blockwise.fp8_blockwise_act_quant", lambda g, d: {"x": rn(g, TOK, KIN, scale=3.0)},
   lambda x: dict(zip(("y", "s"), fn(BQ, "fp8_blockwise_act_quant")(x["x"], BLK))), _act_quant_ref,
   tol={"y": 1e-3, "s": 1e-6}, note=f"[{TOK}, {KIN}] in 1 x 128 blocks; y compared as e4m3 values")


def _w_blocks(w):
    m, n = w.shape
    return w.reshape(m // BLK, BLK, n // BLK, BLK)


def _weight_quant_ref(x):
    wb = _w_blocks(x["w"])
    s = wb.abs().amax(dim=(1, 3)) / 448.0
    return {"y": _e4m3(wb / s[:, None, :, None]).reshape(x["w"].shape), "s": s}


op("blockwise.fp8_blockwise_weight_quant", lambda g, d: {"w": rn(g, NOUT, KIN, scale=0.05)},
   lambda x: dict(zip(("y", "s"), fn(BQ, "fp8_blockwise_weight_quant")(x["w"], BLK))), _weight_quant_ref,
   tol={"y": 1e-3, "s": 1e-6}, note=f"[{NOUT}, {KIN}] in 128 x 128 blocks")


def _fp8_weight(gen):
    w = rn(gen, NOUT, KIN, scale=0.05)
    s = _w_blocks(w).abs().amax(dim=(1, 3)) / 448.0
    q = (_w_blocks(w) / s[:, None, :, None]).reshape(NOUT, KIN).to(E4M3)
    return q, s


def _dequant_make(gen, dtype):
    q, s = _fp8_weight(gen)
    return {"q": q, "s": s}


op("blockwise.fp8_blockwise_weight_dequant", _dequant_make,
   lambda x: {"w": fn(BQ, "fp8_blockwise_weight_dequant")(x["q"], x["s"], BLK)},
   lambda x: {"w": (_w_blocks(x["q"]) * x["s"][:, None, :, None]).reshape(NOUT, KIN)},
   tol={"w": 1e-6}, note="e4m3 weight times its 128 x 128 block scales")


def _gemm_make(gen, dtype):
    a = rn(gen, TOK, KIN, scale=3.0)
    sa = a.reshape(TOK, KIN // BLK, BLK).abs().amax(-1) / 448.0
    qa = (a.reshape(TOK, KIN // BLK, BLK) / sa[..., None]).reshape(TOK, KIN).to(E4M3)
    qb, sb = _fp8_weight(gen)
    return {"a": qa, "sa": sa, "b": qb, "sb": sb}


def _gemm_ref(x):
    a = (x["a"].reshape(TOK, KIN // BLK, BLK) * x["sa"][..., None]).reshape(TOK, KIN)
    b = (_w_blocks(x["b"]) * x["sb"][:, None, :, None]).reshape(NOUT, KIN)
    return {"c": a @ b.T}


op("blockwise.blockwise_fp8_gemm", _gemm_make,
   lambda x: {"c": fn(BQ, "blockwise_fp8_gemm")(x["a"], x["sa"], x["b"], x["sb"], BLK)}, _gemm_ref,
   tol={"c": 4e-3}, note=f"[{TOK}, {KIN}] x [{NOUT}, {KIN}]^T, e4m3 with both scale grids, fp32 accumulation, "
                          "a bf16 result (the bound is bf16's rounding); autotuned over 48 tile configs")


# ------------------------------------------------------------------------------------- HQQ int4 GEMM
HM, HK, HN, GS = 16, 512, 256, 128


def _hqq_make(gen, dtype, *, n=HN, transposed=False):
    q = torch.randint(0, 16, (HK, n), generator=gen, dtype=torch.uint8)
    packed = q.reshape(HK // 2, 2, n)
    packed = packed[:, 0] | (packed[:, 1] << 4)          # rows 2i (low nibble) and 2i + 1 (high)
    return {"a": rn(gen, HM, n if transposed else HK, dtype=dtype), "b": packed, "q": q,
            "scales": (torch.rand(n, HK // GS, generator=gen) * 0.02 + 0.01).to(dtype),
            "zeros": (torch.rand(n, HK // GS, generator=gen) * 4 + 6).to(dtype)}


def _hqq_weight(x):
    """W [K, N]: (q - zero) * scale, scale and zero of output column n for input rows of group k // 128."""
    return (x["q"].double() - x["zeros"].T.repeat_interleave(GS, 0)) * x["scales"].T.repeat_interleave(GS, 0)


def _hqq_call(transposed=False):
    def call(x):   # HQQ keeps scales / zeros as [N, groups]; the kernel takes their transposed views
        return {"c": fn("torchao.prototype.hqq.mixed_mm", "triton_mixed_mm")(
            x["a"], x["b"], x["scales"].T, x["zeros"].T, GS, transposed=transposed)}
    return call


op("hqq.triton_mixed_mm", _hqq_make, _hqq_call(), lambda x: {"c": x["a"] @ _hqq_weight(x)}, (), ("fp32", "bf16"),
   tol={"c@fp32": 1e-5, "c@bf16": 1e-2},
   note=f"[{HM}, {HK}] x int4 [{HK}, {HN}] (packed [{HK // 2}, {HN}] uint8), group {GS}; autotuned "
        "(compute-bound configs, split-K with atomic adds)")
op("hqq.triton_mixed_mm[transposed]", lambda g, d: _hqq_make(g, d, transposed=True), _hqq_call(True),
   lambda x: {"c": x["a"] @ _hqq_weight(x).T}, (), ("bf16",), tol={"c": 1e-2},
   note=f"g [{HM}, {HN}] x W^T: the input-gradient product")
op("hqq.triton_mixed_mm[N<BLOCK_N]", lambda g, d: _hqq_make(g, d, n=128), _hqq_call(),
   lambda x: {"c": x["a"] @ _hqq_weight(x)}, (), ("bf16",), tol={"c": 1e-2},
   note="N = 128 while its autotune configs tile N by up to 256",
   expect="b: torchao/prototype/hqq/kernels.py:326-327 loads a BLOCK_N-wide row of scales and zeros "
          "unmasked: with a config whose BLOCK_N exceeds N it reads past the end of both tensors (a GPU "
          "returns whatever lies there; cpu_interp's bounds check stops the launch)")


# --------------------------------------------------------------------------------------- MX formats
MX = "torchao.prototype.mx_formats.kernels"


def _mx_make(gen, dtype):
    data = (torch.randn(64, 256, generator=gen) * 100).clamp(-448, 448).to(E4M3)
    scales = torch.randint(110, 140, (64, 256 // 32), generator=gen, dtype=torch.uint8)
    return {"data": data, "scales": scales}


def _mx_dequant_call(as_e8m0):
    def call(x):
        scales = x["scales"].view(torch.float8_e8m0fnu) if as_e8m0 else x["scales"]
        return {"y": fn(MX, "triton_mxfp8_dequant_dim0")(x["data"], scales, torch.float32, 32)}
    return call


def _mx_dequant_ref(x):
    return {"y": x["data"] * torch.exp2(x["scales"].double() - 127).repeat_interleave(32, 1)}


op("mx_formats.triton_mxfp8_dequant_dim0", _mx_make, _mx_dequant_call(True), _mx_dequant_ref, tol={"y": 1e-7},
   note="[64, 256] e4m3 with e8m0 scales (2^(s - 127)) per 32 elements, to fp32",
   expect="b: torchao/prototype/mx_formats/kernels.py:221 passes e8m0_scales.to(torch.uint8) to the kernel, "
          "which converts the scales' values (2^(s - 127) -> 0, 1, 2, ...), not their bits, and the kernel "
          "then reads those as biased exponents; on any device (the [uint8 scales] variant passes)")
op("mx_formats.triton_mxfp8_dequant_dim0[uint8 scales]", _mx_make, _mx_dequant_call(False), _mx_dequant_ref,
   tol={"y": 1e-7}, note="the scales' biased exponents passed as uint8, which the wrapper's .to(uint8) keeps")


def _swizzle_make(gen, dtype):
    return {"s": torch.randint(0, 255, (200, 9), generator=gen, dtype=torch.uint8)}


def _swizzle_ref(x):
    """cuBLAS's block-scaling-factor layout: pad to 128 x 4 tiles, tiles in row-major order, and
    inside a tile the element (r, c) at byte (r % 32) * 16 + (r // 32) * 4 + c."""
    s = x["s"]
    rows, cols = s.shape
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = torch.zeros(pr, pc, dtype=s.dtype)
    padded[:rows, :cols] = s
    out = torch.empty(pr * pc, dtype=s.dtype)
    r = torch.arange(pr)[:, None].expand(pr, pc)
    c = torch.arange(pc)[None, :].expand(pr, pc)
    tile = (r // 128) * (pc // 4) + c // 4
    rr, cc = r % 128, c % 4
    out[tile * 512 + (rr % 32) * 16 + (rr // 32) * 4 + cc] = padded
    return {"out": out}


op("mx_formats.triton_mx_block_rearrange", _swizzle_make,
   lambda x: {"out": fn(MX, "triton_mx_block_rearrange")(x["s"]).reshape(-1)}, _swizzle_ref,
   tol={"out": 1e-12}, note="[200, 9] uint8 scales padded to [256, 12] and swizzled into 128 x 4 tiles")
op("mx_formats.triton_to_mxfp8_dim1", lambda g, d: {"x": rn(g, 128, 256, dtype=torch.bfloat16)},
   lambda x: dict(zip(("y", "s"), fn(MX, "triton_to_mxfp8_dim1")(x["x"], 32))), lambda x: {},
   expect="b: torchao/prototype/mx_formats/kernels.py:458-462 defines its mxfp8 quantisers only when "
          "torch.cuda.is_available() on an sm_100 GPU (or an MI350); elsewhere the stub raises "
          "'needs triton' (kernels.py:1002-1009)", note="the mxfp8 quantiser along dim 1")


# ------------------------------------------------------------------------------------------ int8
def _i8_make(gen, dtype):
    return {"A": torch.randint(-128, 128, (48, 256), generator=gen, dtype=torch.int8),
            "B": torch.randint(-128, 128, (256, 96), generator=gen, dtype=torch.int8),
            "rs": torch.rand(48, generator=gen) + 0.5, "cs": torch.rand(96, generator=gen) + 0.5}


op("quantized_training.scaled_int8_mm", _i8_make,
   lambda x: {"c": fn("torchao.prototype.quantized_training.int8_mm", "scaled_int8_mm")(
       x["A"], x["B"], x["rs"], x["cs"])},
   lambda x: {"c": (x["A"].double() @ x["B"].double()) * x["rs"][:, None] * x["cs"]},
   expect="b: torchao/prototype/quantized_training/int8_mm.py:164 registers the Triton kernel for the "
          "CUDA dispatch key only; a tensor on any other device has no implementation",
   note="(A @ B) * row_scale * col_scale over int8 A, B")
