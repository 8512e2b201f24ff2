"""Lightning attention (MiniMax-Text-01, MiniMax-M1): linear attention with a per-head decay, as vLLM
runs its prefill chain and its decode step in Triton.

Recurrence per (sequence, head), decay lambda = exp(-s) with the head's slope s:
    S_t = lambda * S_{t-1} + k_t^T v_t        (state [d, e], S_{-1} the carried state)
    o_t = q_t S_t
Prefill evaluates it in blocks of 256 tokens (MiniMax's block_size). For query t = t0 + r of a block
starting at t0:
    o_t = sum_{t0 <= j <= t} lambda^(t-j) (q_t . k_j) v_j  +  lambda^(r+1) q_t S_{t0-1}
the first term within the block (intra), the second through the state before it (inter); the state
after a block of L tokens is S = lambda^L S_before + sum_j lambda^(L-1-j) k_j^T v_j. Four kernels:
intra-block attention in 32-row sub-blocks, one state contribution per block (64-row sub-blocks), a
scan over the blocks that stores the state before each block and writes the final state back, and
the inter-block term added to the intra output. (vLLM's inter kernel scales the carried state by
lambda^r; the recurrence above, which its decode kernel and the model's reference implementation in
transformers follow, needs lambda^(r+1). These kernels follow the recurrence.)
Decode takes one token per sequence: the state in slot slot_idx[b] of the cache [slots, heads, d, e]
is decayed, updated with k^T v and read by q in place; slot -1 is padding (nothing read or written).

Layouts: prefill q, k [b, h, n, d], v, out [b, h, n, e], carried state [b, h, d, e] (the model dtype,
as vLLM keeps linear-attention state), per-block states fp32 [b, h, blocks, d, e]; decode q, k, v
[B, h, 1, d], out [B, h, d]. Slopes as MiniMax builds them: 2^(-8 (i+1) / H) for head i of H = 64
(power of two), times 1 - layer / (layers - 1) + 1e-5, sliced to the tensor-parallel rank's heads.
q, k, v are SiLU outputs, as the model feeds them. Reference: the recurrence in fp64, token by token.
Shapes: MiniMax-Text-01 config (hidden 6144, 64 heads x 128, 80 layers, block_size 256) at tensor
parallelism 8: 8 heads per GPU.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

BLOCK = 256            # MiniMax's block_size
_MODELS = ("minimax",)
_UP = "vllm: model_executor/layers/lightning_attn.py "
MINIMAX = ("MiniMax-Text-01 / MiniMax-M1: 64 heads x 128, 80 layers, block_size 256; tensor parallel 8 "
           "(8 heads per GPU)")
TOTAL_HEADS, LAYERS = 64, 80


def _prec(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"


def _stages(t: torch.Tensor, per_stage: int, fixed: int, most: int = 3) -> int:
    """Pipeline stages whose buffers fit 90% of the shared memory one program may use on the device
    that holds `t` (as the active driver reports it)."""
    props = triton.runtime.driver.active.utils.get_device_properties(t.device.index or 0)
    budget = int(props["max_shared_mem"]) * 9 // 10
    stages = most
    while stages > 1 and fixed + stages * per_stage > budget:
        stages -= 1
    return stages


# ------------------------------------------------------------------------------------- prefill
@triton.jit
def _intra_block_kernel(q_ptr, k_ptr, v_ptr, out_ptr, slope_ptr, n, NUM_BLOCK, H, D: tl.constexpr,
                        E: tl.constexpr, DK: tl.constexpr, BLOCK: tl.constexpr, CBLOCK: tl.constexpr,
                        PREC: tl.constexpr):
    pid = tl.program_id(0)
    bh = pid // NUM_BLOCK
    t0 = (pid % NUM_BLOCK) * BLOCK
    i = tl.program_id(1)
    if t0 + i * CBLOCK < n:
        s = tl.load(slope_ptr + bh % H).to(tl.float32)
        q_base = q_ptr + bh.to(tl.int64) * n * D
        k_base = k_ptr + bh.to(tl.int64) * n * D
        v_base = v_ptr + bh.to(tl.int64) * n * E
        offs_e = tl.arange(0, E)
        rq = i * CBLOCK + tl.arange(0, CBLOCK)          # block-local query rows
        q_ok = t0 + rq < n
        acc = tl.zeros((CBLOCK, E), dtype=tl.float32)
        for j in range(i + 1):                            # causal: sub-blocks up to the query's own
            rk = j * CBLOCK + tl.arange(0, CBLOCK)
            k_ok = t0 + rk < n
            qk = tl.zeros((CBLOCK, CBLOCK), dtype=tl.float32)
            for d0 in tl.static_range(0, D, DK):          # DK-wide slices of the head dim
                offs_d = d0 + tl.arange(0, DK)
                q = tl.load(q_base + (t0 + rq)[:, None] * D + offs_d[None, :], mask=q_ok[:, None], other=0.0)
                kt = tl.load(k_base + (t0 + rk)[None, :] * D + offs_d[:, None], mask=k_ok[None, :], other=0.0)
                qk += tl.dot(q.to(tl.float32), kt.to(tl.float32), input_precision=PREC)
            v = tl.load(v_base + (t0 + rk)[:, None] * E + offs_e[None, :], mask=k_ok[:, None], other=0.0)
            dist = rq[:, None] - rk[None, :]
            decay = tl.where(dist >= 0, tl.exp(-s * tl.maximum(dist, 0).to(tl.float32)), 0.0)
            acc += tl.dot(qk * decay, v.to(tl.float32), input_precision=PREC)
        out_base = out_ptr + bh.to(tl.int64) * n * E
        tl.store(out_base + (t0 + rq)[:, None] * E + offs_e[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=q_ok[:, None])


@triton.jit
def _block_state_kernel(k_ptr, v_ptr, kv_ptr, slope_ptr, n, NUM_BLOCK, H, D: tl.constexpr,
                        E: tl.constexpr, EF: tl.constexpr, BLOCK: tl.constexpr, CBLOCK: tl.constexpr,
                        PREC: tl.constexpr):
    """The state one block leaves from a zero start: sum_j lambda^(L-1-j) k_j^T v_j (columns EF at a time)."""
    bh = tl.program_id(0)
    blk = tl.program_id(1)
    e0 = tl.program_id(2) * EF
    s = tl.load(slope_ptr + bh % H).to(tl.float32)
    t0 = blk * BLOCK
    L = tl.minimum(n - t0, BLOCK)
    k_base = k_ptr + bh.to(tl.int64) * n * D
    v_base = v_ptr + bh.to(tl.int64) * n * E
    offs_d = tl.arange(0, D)
    offs_e = e0 + tl.arange(0, EF)
    acc = tl.zeros((D, EF), dtype=tl.float32)
    for c in range(0, L, CBLOCK):
        rk = c + tl.arange(0, CBLOCK)
        ok = rk < L
        kt = tl.load(k_base + (t0 + rk)[None, :] * D + offs_d[:, None], mask=ok[None, :], other=0.0)
        v = tl.load(v_base + (t0 + rk)[:, None] * E + offs_e[None, :], mask=ok[:, None], other=0.0)
        w = tl.where(ok, tl.exp(-s * (L - 1 - rk).to(tl.float32)), 0.0)
        acc += tl.dot(kt.to(tl.float32) * w[None, :], v.to(tl.float32), input_precision=PREC)
    kv = kv_ptr + (bh.to(tl.int64) * NUM_BLOCK + blk) * D * E
    tl.store(kv + offs_d[:, None] * E + offs_e[None, :], acc)


@triton.jit
def _state_scan_kernel(kv_ptr, state_ptr, slope_ptr, n, NUM_BLOCK, H, D: tl.constexpr,
                       E: tl.constexpr, EF: tl.constexpr, BLOCK: tl.constexpr):
    """Blocks in order: each block's slot gets the state before it; the carried state ends as the
    state after the last block."""
    bh = tl.program_id(0)
    e0 = tl.program_id(1) * EF
    s = tl.load(slope_ptr + bh % H).to(tl.float32)
    tile = tl.arange(0, D)[:, None] * E + (e0 + tl.arange(0, EF))[None, :]
    state_at = state_ptr + bh.to(tl.int64) * D * E + tile
    state = tl.load(state_at).to(tl.float32)
    kv = kv_ptr + bh.to(tl.int64) * NUM_BLOCK * D * E + tile
    for i in range(NUM_BLOCK):
        L = tl.minimum(n - i * BLOCK, BLOCK)
        cur = tl.load(kv)
        tl.store(kv, state)
        state = tl.exp(-s * L.to(tl.float32)) * state + cur
        kv += D * E
    tl.store(state_at, state.to(state_ptr.dtype.element_ty))


@triton.jit
def _inter_block_kernel(q_ptr, out_ptr, kv_ptr, slope_ptr, n, NUM_BLOCK, H, D: tl.constexpr,
                        E: tl.constexpr, EF: tl.constexpr, DK: tl.constexpr, BLOCK: tl.constexpr,
                        CBLOCK: tl.constexpr, NUM_CBLOCK: tl.constexpr, PREC: tl.constexpr):
    """out += lambda^(r+1) q (state before the block), r the query's position in its block."""
    bh = tl.program_id(0)
    blk = tl.program_id(1) // NUM_CBLOCK
    c = tl.program_id(1) % NUM_CBLOCK
    e0 = tl.program_id(2) * EF
    t0 = blk * BLOCK + c * CBLOCK
    if t0 < n:
        s = tl.load(slope_ptr + bh % H).to(tl.float32)
        rows = tl.arange(0, CBLOCK)
        ok = t0 + rows < n
        offs_e = e0 + tl.arange(0, EF)
        q_base = q_ptr + bh.to(tl.int64) * n * D + (t0 + rows)[:, None] * D
        kv_base = kv_ptr + (bh.to(tl.int64) * NUM_BLOCK + blk) * D * E + offs_e[None, :]
        acc = tl.zeros((CBLOCK, EF), dtype=tl.float32)
        for d0 in tl.static_range(0, D, DK):              # DK-wide slices of the head dim
            offs_d = d0 + tl.arange(0, DK)
            q = tl.load(q_base + offs_d[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
            acc += tl.dot(q, tl.load(kv_base + offs_d[:, None] * E), input_precision=PREC)
        decay = tl.exp(-s * (c * CBLOCK + rows + 1).to(tl.float32))
        o_at = out_ptr + bh.to(tl.int64) * n * E + (t0 + rows)[:, None] * E + offs_e[None, :]
        o = tl.load(o_at, mask=ok[:, None], other=0.0).to(tl.float32)
        o += acc * decay[:, None]
        tl.store(o_at, o.to(out_ptr.dtype.element_ty), mask=ok[:, None])


def _dk(x: torch.Tensor, d: int) -> int:
    """Head-dim slice of one product: all of it for tensor-core (tf32) products, 32 for fp32 ones,
    which run on the FMA units with each thread holding whole slices of both operands."""
    return d if x.element_size() < 4 else min(d, 32)


def _dims(q: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int]:
    b, h, n, d = q.shape
    e = v.shape[-1]
    for name, x in (("head dim", d), ("value dim", e)):
        if x & (x - 1) or x < 16:
            raise ValueError(f"lightning attention: {name} {x} must be a power of two >= 16")
    return b, h, n, d, e


def intra_block_attention(q, k, v, slope, out, cblock: int = 32) -> None:
    """out = the within-block part of lightning attention (blocks of 256, 32-row sub-blocks)."""
    b, h, n, d, e = _dims(q, v)
    num_block = triton.cdiv(n, BLOCK)
    elt = 4  # tiles are widened to fp32 before the products
    dk = _dk(q, d)
    stages = _stages(q, cblock * (2 * dk + e) * q.element_size(),
                     cblock * (2 * dk + 2 * e) * elt + cblock * cblock * elt)
    _intra_block_kernel[(b * h * num_block, BLOCK // cblock)](
        q, k, v, out, slope, n, num_block, h, D=d, E=e, DK=dk, BLOCK=BLOCK, CBLOCK=cblock, PREC=_prec(q),
        num_warps=4 if dk == d else 8, num_stages=stages)


def block_states(k, v, slope, state, kv_blocks, cblock: int = 64) -> None:
    """kv_blocks [b, h, blocks, d, e] fp32 = the state before each block; `state` (the carried state,
    read first) ends as the state after the last block."""
    b, h, n, d, e = _dims(k, v)
    num_block = triton.cdiv(n, BLOCK)
    ef = min(e, 64)
    stages = _stages(k, cblock * (d + ef) * k.element_size(), cblock * (d + ef) * 4)
    _block_state_kernel[(b * h, num_block, e // ef)](
        k, v, kv_blocks, slope, n, num_block, h, D=d, E=e, EF=ef, BLOCK=BLOCK, CBLOCK=cblock, PREC=_prec(k),
        num_warps=8, num_stages=stages)
    _state_scan_kernel[(b * h, e // ef)](kv_blocks, state, slope, n, num_block, h, D=d, E=e, EF=ef, BLOCK=BLOCK,
                                         num_warps=8)


def lightning_attention(q, k, v, slope, state, out, cblock: int = 64) -> torch.Tensor:
    """Prefill of lightning attention as one chain: out [b, h, n, e]; `state` [b, h, d, e] carried
    in and updated in place. Returns the per-block states (fp32) the inter-block term read."""
    b, h, n, d, e = _dims(q, v)
    num_block = triton.cdiv(n, BLOCK)
    kv_blocks = torch.empty((b, h, num_block, d, e), dtype=torch.float32, device=q.device)
    intra_block_attention(q, k, v, slope, out)
    block_states(k, v, slope, state, kv_blocks, cblock)
    ef = min(e, 64)
    _inter_block_kernel[(b * h, num_block * (BLOCK // cblock), e // ef)](
        q, out, kv_blocks, slope, n, num_block, h, D=d, E=e, EF=ef, DK=_dk(q, d), BLOCK=BLOCK, CBLOCK=cblock,
        NUM_CBLOCK=BLOCK // cblock, PREC=_prec(q), num_warps=8, num_stages=1)
    return kv_blocks


# --------------------------------------------------------------------------------------- decode
@triton.jit
def _decode_kernel(q_ptr, k_ptr, v_ptr, cache_ptr, slope_ptr, slot_ptr, out_ptr, stride_qb, stride_qh,
                   stride_ob, stride_oh, stride_cs, stride_ch, stride_cd, stride_ce, D: tl.constexpr,
                   BLOCK_E: tl.constexpr, PAD_SLOT: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    slot = tl.load(slot_ptr + b).to(tl.int64)
    if slot != PAD_SLOT:
        lam = tl.exp(-tl.load(slope_ptr + h).to(tl.float32))
        offs_d = tl.arange(0, D)
        offs_e = tl.program_id(2) * BLOCK_E + tl.arange(0, BLOCK_E)
        at = b.to(tl.int64) * stride_qb + h * stride_qh
        q = tl.load(q_ptr + at + offs_d).to(tl.float32)
        k = tl.load(k_ptr + at + offs_d).to(tl.float32)
        v = tl.load(v_ptr + at + offs_e).to(tl.float32)
        cell = cache_ptr + slot * stride_cs + h * stride_ch + offs_d[:, None] * stride_cd + offs_e[None, :] * stride_ce
        S = lam * tl.load(cell).to(tl.float32) + k[:, None] * v[None, :]
        tl.store(cell, S.to(cache_ptr.dtype.element_ty))
        o = tl.sum(q[:, None] * S, axis=0)
        tl.store(out_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + offs_e, o.to(out_ptr.dtype.element_ty))


PAD_SLOT_ID = -1


def linear_decode_forward(q, k, v, kv_cache, slope, slot_idx, out, block_e: int = 32) -> None:
    """One decode token per sequence: q, k, v [B, h, 1, d]; kv_cache [slots, h, d, d] updated in place
    at slot_idx[b] (PAD_SLOT_ID: skipped); out [B, h, d]."""
    B, h, _, d = q.shape
    if k.stride() != q.stride() or v.stride() != q.stride():
        raise ValueError("linear_decode_forward: q, k and v must share one layout")
    _decode_kernel[(B, h, d // block_e)](
        q, k, v, kv_cache, slope, slot_idx, out, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        *kv_cache.stride(), D=d, BLOCK_E=block_e, PAD_SLOT=PAD_SLOT_ID, num_warps=4)


# ------------------------------------------------------------------------------ inputs, reference
def minimax_slopes(total_heads: int, layer: int, layers: int) -> torch.Tensor:
    """Decay slopes of one layer's heads, as MiniMax builds them (ALiBi-style geometric rates scaled
    down with depth)."""
    def geometric(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start ** (i + 1) for i in range(n)]
    if math.log2(total_heads).is_integer():
        rates = geometric(total_heads)
    else:
        p = 2 ** math.floor(math.log2(total_heads))
        rates = geometric(p) + geometric(2 * p)[0::2][:total_heads - p]
    depth = 1 - layer / (layers - 1) + 1e-5 if layers > 1 else 1 + 1e-5
    return torch.tensor(rates, dtype=torch.float32) * depth


def _slopes(p: dict) -> torch.Tensor:
    """The case's heads: `heads` consecutive heads from `first_head` of MiniMax's 64 at `layer`."""
    s = minimax_slopes(TOTAL_HEADS, p["layer"], LAYERS)
    return s[p["first_head"]:p["first_head"] + p["heads"]].contiguous()


def _qkv(shape, gen) -> torch.Tensor:
    return torch.nn.functional.silu(torch.randn(shape, generator=gen))


class _one_thread:
    """Small torch ops of a token-by-token loop run fastest on one thread (a pool of threads contending
    for cores shared with other work slows them many times over)."""

    def __enter__(self):
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.n)


def _recurrence(q, k, v, slope, state, reset: int = 0):
    """fp64, token by token: (outputs [b, h, n, e], the state before each block of BLOCK tokens, the
    final state). reset > 0: the state restarts from zero every `reset` tokens (intra-block only)."""
    q, k, v = q.double(), k.double(), v.double()
    b, h, n, d = q.shape
    lam = torch.exp(-slope.double())[None, :, None, None]
    S = state.double().clone()
    out = torch.empty((b, h, n, 1, v.shape[-1]), dtype=torch.float64)
    before = []
    with _one_thread():
        for t in range(n):
            if t % BLOCK == 0:
                before.append(S.clone())
            if reset and t % reset == 0:
                S.zero_()
            S.mul_(lam).add_(k[:, :, t, :, None] * v[:, :, t, None, :])
            torch.matmul(q[:, :, t, None, :], S, out=out[:, :, t])
    return out[:, :, :, 0], torch.stack(before, dim=2), S


def _prefill_inputs(case, dtype, device, gen):
    p = case.params
    b, h, n, d = p.get("batch", 1), p["heads"], p["tokens"], p["head_dim"]
    x = {"q": _qkv((b, h, n, d), gen), "k": _qkv((b, h, n, d), gen), "v": _qkv((b, h, n, d), gen)}
    x = {name: t.to(dtype) for name, t in x.items()}
    if p.get("fresh"):
        state = torch.zeros((b, h, d, d))  # a new sequence: vLLM clears the slot before its first chunk
    else:
        state = torch.randn((b, h, d, d), generator=gen) * 4.0  # left by the sequence's earlier chunks
    x["state"] = state.to(dtype)
    x["slope"] = _slopes(p)
    x["out"] = torch.empty((b, h, n, d), dtype=dtype)
    x["kv_blocks"] = torch.empty((b, h, triton.cdiv(n, BLOCK), d, d), dtype=torch.float32)
    return {name: t.to(device) for name, t in x.items()}


def _cpu(x):
    return {name: t.cpu() for name, t in x.items()}


def _prefill_ref(x, case):
    x = _cpu(x)
    out, before, final = _recurrence(x["q"], x["k"], x["v"], x["slope"], x["state"])
    return {"out": out, "state": final, "kv_blocks": before}


def _intra_ref(x, case):
    x = _cpu(x)
    out, _, _ = _recurrence(x["q"], x["k"], x["v"], x["slope"], torch.zeros_like(x["state"]), reset=BLOCK)
    return {"out": out}


_PREFILL_CASES = (
    Case("l0_h3_d32_n600", {"heads": 3, "first_head": 0, "layer": 0, "tokens": 600, "head_dim": 32},
         source=MINIMAX + "; the fastest-decaying heads (layer 0, heads 0-2), head dim scaled to 32, a chunk after "
                "earlier ones (carried state); three blocks, the last of 88 tokens"),
    Case("l40_b2_h2_d128_n270_fresh", {"batch": 2, "heads": 2, "first_head": 62, "layer": 40, "tokens": 270,
                                       "head_dim": 128, "fresh": True},
         source=MINIMAX + "; mid-depth layer, heads 62-63 (slowest decay), full head dim 128, batch 2, new "
                "sequences (zero state)"),
    Case("minimax_tp8_l0_n8192", {"heads": 8, "first_head": 0, "layer": 0, "tokens": 8192, "head_dim": 128},
         quick=False, source=MINIMAX + "; rank 0's heads at layer 0, an 8192-token prefill chunk"),
    Case("minimax_tp8_l42_n5000", {"heads": 8, "first_head": 56, "layer": 42, "tokens": 5000, "head_dim": 128},
         quick=False, source=MINIMAX + "; rank 7's heads at layer 42, a 5000-token chunk after earlier ones"),
)
_OUT_TOL = {"fp32": Tolerance(rmse=5e-6), "bf16": Tolerance(rmse=6e-3)}

register(KernelSpec(
    name="lightning_attn_prefill", group="lightning_attn", models=_MODELS, cases=_PREFILL_CASES,
    dtypes=("bf16", "fp32"), make_inputs=_prefill_inputs,
    run=lambda x, case: lightning_attention(x["q"], x["k"], x["v"], x["slope"], x["state"], x["out"]),
    reference=_prefill_ref, outputs=("out", "state"), inplace=("state",), tolerance=_OUT_TOL,
    description="lightning attention prefill chain: intra-block decayed attention, per-block states, a scan "
                "over blocks from the carried state (written back), the inter-block term",
    triton_kernels=(_intra_block_kernel, _block_state_kernel, _state_scan_kernel, _inter_block_kernel),
    upstream=_UP + "lightning_attention (_fwd_diag_kernel, _fwd_kv_parallel, _fwd_kv_reduce, "
                   "_fwd_none_diag_kernel)",
))

register(KernelSpec(
    name="lightning_attn_intra", group="lightning_attn", models=_MODELS, cases=_PREFILL_CASES,
    dtypes=("bf16", "fp32"), make_inputs=_prefill_inputs,
    run=lambda x, case: intra_block_attention(x["q"], x["k"], x["v"], x["slope"], x["out"]),
    reference=_intra_ref, outputs=("out",), tolerance=_OUT_TOL,
    description="the prefill chain's first stage alone: decayed causal attention within each 256-token block",
    triton_kernels=(_intra_block_kernel,),
    upstream=_UP + "lightning_attention (_fwd_diag_kernel)",
))

register(KernelSpec(
    name="lightning_attn_block_states", group="lightning_attn", models=_MODELS, cases=_PREFILL_CASES,
    dtypes=("bf16", "fp32"), make_inputs=_prefill_inputs,
    run=lambda x, case: block_states(x["k"], x["v"], x["slope"], x["state"], x["kv_blocks"]),
    reference=_prefill_ref, outputs=("kv_blocks", "state"), inplace=("state",),
    tolerance={"fp32": Tolerance(rmse=5e-6), "bf16": Tolerance(rmse=2e-3)},
    output_tolerance={"state@bf16": Tolerance(rmse=6e-3)},
    description="the prefill chain's state stages: each block's decayed k^T v, then the scan that stores the "
                "state before every block and writes the final state back",
    triton_kernels=(_block_state_kernel, _state_scan_kernel),
    upstream=_UP + "lightning_attention (_fwd_kv_parallel, _fwd_kv_reduce)",
))


def _decode_inputs(case, dtype, device, gen):
    p = case.params
    B, h, d, slots = p["batch"], p["heads"], p["head_dim"], p["slots"]
    x = {"q": _qkv((B, h, 1, d), gen), "k": _qkv((B, h, 1, d), gen), "v": _qkv((B, h, 1, d), gen),
         "kv_cache": torch.randn((slots, h, d, d), generator=gen) * 4.0}
    x = {name: t.to(dtype) for name, t in x.items()}
    slot_idx = torch.randperm(slots, generator=gen)[:B].to(torch.int32)
    for i in p.get("padding", ()):
        slot_idx[i] = PAD_SLOT_ID
    x.update(slope=_slopes(p), slot_idx=slot_idx, out=torch.empty((B, h, d), dtype=dtype))
    return {name: t.to(device) for name, t in x.items()}


def _decode_ref(x, case):
    x = _cpu(x)
    cache = x["kv_cache"].double().clone()
    lam = torch.exp(-x["slope"].double())[:, None, None]
    B, h, _, d = x["q"].shape
    out = torch.full((B, h, d), float("nan"), dtype=torch.float64)   # padding rows: unspecified
    for b, slot in enumerate(x["slot_idx"].tolist()):
        if slot == PAD_SLOT_ID:
            continue
        S = lam * cache[slot] + x["k"][b, :, 0, :, None].double() * x["v"][b, :, 0, None, :].double()
        cache[slot] = S
        out[b] = torch.einsum("hd,hde->he", x["q"][b, :, 0].double(), S)
    return {"out": out, "kv_cache": cache}


register(KernelSpec(
    name="lightning_attn_decode", group="lightning_attn", models=_MODELS,
    cases=(
        Case("l0_b6_h4_d64_pad", {"batch": 6, "heads": 4, "first_head": 0, "layer": 0, "head_dim": 64, "slots": 9,
                                  "padding": (2,)},
             source=MINIMAX + "; heads 0-3 of layer 0, head dim 64, a padded batch entry, slots scattered"),
        Case("l60_b3_h2_d128", {"batch": 3, "heads": 2, "first_head": 40, "layer": 60, "head_dim": 128, "slots": 4},
             source=MINIMAX + "; full head dim 128, slowly decaying heads"),
        Case("minimax_tp8_b128", {"batch": 128, "heads": 8, "first_head": 8, "layer": 10, "head_dim": 128,
                                  "slots": 256, "padding": (5, 77)}, quick=False,
             source=MINIMAX + "; rank 1's heads, 128 decoding sequences over 256 state slots"),
    ),
    dtypes=("bf16", "fp32"), make_inputs=_decode_inputs,
    run=lambda x, case: linear_decode_forward(x["q"], x["k"], x["v"], x["kv_cache"], x["slope"], x["slot_idx"],
                                              x["out"]),
    reference=_decode_ref, outputs=("out", "kv_cache"), inplace=("kv_cache",),
    tolerance={"fp32": Tolerance(rmse=1e-6), "bf16": Tolerance(rmse=6e-3)},
    output_tolerance={"kv_cache@fp32": Tolerance(atol=1e-5, rtol=1e-6),
                      "kv_cache@bf16": Tolerance(atol=1e-5, rtol=8e-3)},
    description="one decode step of lightning attention: the slot's state decayed, updated with k^T v and read "
                "by q in place (per-head slope), padded entries skipped",
    triton_kernels=(_decode_kernel,),
    upstream=_UP + "linear_decode_forward_triton (_linear_attn_decode_kernel)",
))
