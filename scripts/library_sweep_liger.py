"""The Liger Kernel ops `library_sweep.py` runs (`liger_kernel.transformers.functional` and
`liger_kernel.ops`), with references written here in PyTorch.

Shapes: 64 tokens of hidden 512 (norms, MLPs), 2 x 32 tokens of 4 x 64 heads (RoPE), a 4096-word
vocabulary over 64 tokens (losses).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from library_sweep import SweepOp

N, DM, V = 64, 512, 4096
BOTH = ("fp32", "bf16")
OPS: list[SweepOp] = []


def op(name, make, call, ref, grads=(), dtypes=("fp32",), **kw):
    OPS.append(SweepOp(name=f"liger.{name}", lib="liger", make=make, call=call, ref=ref, grads=grads,
                       dtypes=dtypes, **kw))


def lf(name):
    import liger_kernel.transformers.functional as f
    return getattr(f, name)


def rn(gen, *shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen) * scale + shift).to(dtype)


def _rms(x, w, eps=1e-6, offset=0.0):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (offset + w)


# ---------------------------------------------------------------------------------- norms
def _norm_make(gen, dtype):
    return {"x": rn(gen, N, DM, dtype=dtype, scale=2.0), "r": rn(gen, N, DM, dtype=dtype),
            "w": rn(gen, DM, dtype=dtype, scale=0.1, shift=1.0), "b": rn(gen, DM, dtype=dtype, scale=0.1)}


NORM_BF16 = {"dw@bf16": 3e-2, "db@bf16": 3e-2}
op("rms_norm", _norm_make, lambda x: {"y": lf("liger_rms_norm")(x["x"], x["w"], 1e-6)},
   lambda x: {"y": _rms(x["x"], x["w"])}, ("x", "w"), BOTH, tol=NORM_BF16)
op("rms_norm[gemma,offset1]", _norm_make,
   lambda x: {"y": lf("liger_rms_norm")(x["x"], x["w"] - 1, 1e-6, offset=1.0, casting_mode="gemma")},
   lambda x: {"y": _rms(x["x"], x["w"] - 1, offset=1.0)}, ("x", "w"))
op("fused_add_rms_norm", _norm_make,
   lambda x: dict(zip(("y", "h"), lf("liger_fused_add_rms_norm")(x["x"], x["r"], x["w"], 1e-6))),
   lambda x: {"y": _rms(x["x"] + x["r"], x["w"]), "h": x["x"] + x["r"]}, ("x", "r", "w"), BOTH, tol=NORM_BF16,
   note="returns (norm(x + r), x + r)")
op("layer_norm", _norm_make, lambda x: {"y": lf("liger_layer_norm")(x["x"], x["w"], x["b"], 1e-5)},
   lambda x: {"y": F.layer_norm(x["x"], (DM,), x["w"], x["b"], 1e-5)}, ("x", "w", "b"), BOTH, tol=NORM_BF16)


def _gn_make(gen, dtype):
    return {"x": rn(gen, 4, 32, 96, dtype=dtype, scale=2.0), "w": rn(gen, 32, dtype=dtype, shift=1.0, scale=0.1),
            "b": rn(gen, 32, dtype=dtype, scale=0.1)}


op("group_norm", _gn_make, lambda x: {"y": lf("liger_group_norm")(x["x"], x["w"], x["b"], 32, 8, 1e-6)},
   lambda x: {"y": F.group_norm(x["x"], 8, x["w"], x["b"], 1e-6)}, ("x", "w", "b"),
   note="[4, 32 channels, 96], 8 groups")


def _poly_make(gen, dtype):
    return {"x": rn(gen, N, DM, dtype=dtype), "w": torch.tensor([0.3, 0.4, 0.5]).to(dtype),
            "b": torch.tensor(0.7).to(dtype)}


def _poly_ref(x):
    a = x["x"]
    n = lambda u: u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6)   # noqa: E731
    return {"y": x["w"][0] * n(a ** 3) + x["w"][1] * n(a ** 2) + x["w"][2] * n(a) + x["b"]}


op("poly_norm", _poly_make, lambda x: {"y": lf("liger_poly_norm")(x["x"], x["w"], x["b"], 1e-6)},
   _poly_ref, ("x", "w", "b"))


def _mod_make(gen, dtype):
    return {**_norm_make(gen, dtype), "scale": rn(gen, DM, dtype=dtype, scale=0.1),
            "shift": rn(gen, DM, dtype=dtype, scale=0.1)}


op("modulated_rms_norm", _mod_make,
   lambda x: {"y": lf("liger_modulated_rms_norm")(x["x"], x["w"], x["scale"], x["shift"], eps=1e-6)},
   lambda x: {"y": (1 + x["scale"]) * _rms(x["x"], x["w"]) + x["shift"]}, ("x", "w", "scale", "shift"),
   note="(1 + scale) * RMSNorm(x) + shift, shared modulation")


def _dyt_make(gen, dtype):
    return {"x": rn(gen, N, DM, dtype=dtype, scale=2.0), "alpha": torch.tensor([0.7]).to(dtype),
            "gamma": rn(gen, DM, dtype=dtype, shift=1.0, scale=0.1), "beta": rn(gen, DM, dtype=dtype, scale=0.1)}


op("dyt", _dyt_make, lambda x: {"y": lf("liger_dyt")(x["x"], x["alpha"], x["gamma"], x["beta"])},
   lambda x: {"y": x["gamma"] * torch.tanh(x["alpha"] * x["x"]) + x["beta"]}, ("x", "alpha", "gamma", "beta"),
   BOTH, tol={"dalpha@bf16": 3e-2, "dgamma@bf16": 3e-2, "dbeta@bf16": 3e-2},
   expect="b: liger_kernel/ops/dyt.py:130-137 sizes its backward's partial sums by the SM count of the "
          "device utils.infer_device names (cuda / xpu / npu), not the tensors' own: for CPU tensors NUM_SMS "
          "is unbound on a host without a GPU, and torch.cuda refuses the CPU device on a host with one")

op("dyt[forward]", _dyt_make, lambda x: {"y": lf("liger_dyt")(x["x"], x["alpha"], x["gamma"], x["beta"])},
   lambda x: {"y": x["gamma"] * torch.tanh(x["alpha"] * x["x"]) + x["beta"]}, (), BOTH,
   note="forward only (its backward needs a GPU's SM count)")

# ------------------------------------------------------------------------------ activations
def _glu_make(gen, dtype):
    return {"a": rn(gen, N, DM * 2, dtype=dtype, scale=2.0), "b": rn(gen, N, DM * 2, dtype=dtype)}


op("swiglu", _glu_make, lambda x: {"c": lf("liger_swiglu")(x["a"], x["b"])},
   lambda x: {"c": F.silu(x["a"]) * x["b"]}, ("a", "b"), BOTH)
op("geglu", _glu_make, lambda x: {"c": lf("liger_geglu")(x["a"], x["b"])},
   lambda x: {"c": F.gelu(x["a"], approximate="tanh") * x["b"]}, ("a", "b"), BOTH)
op("relu_squared", _glu_make, lambda x: {"c": lf("liger_relu_squared")(x["a"])},
   lambda x: {"c": F.relu(x["a"]) ** 2}, ("a",))


def _sm_make(gen, dtype):
    return {"x": rn(gen, N, 1000, dtype=dtype, scale=3.0)}


op("softmax", _sm_make, lambda x: {"y": lf("liger_softmax")(x["x"])},
   lambda x: {"y": x["x"].softmax(-1)}, ("x",), BOTH, note="1000 columns")


def _sparsemax_ref(x):
    z = x["x"]
    zs, _ = z.sort(-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cs = zs.cumsum(-1)
    support = (1 + k * zs) > cs
    kz = support.sum(-1, keepdim=True)
    tau = (cs.gather(-1, kz - 1) - 1) / kz
    return {"y": torch.clamp(z - tau, min=0)}


op("sparsemax", _sm_make, lambda x: {"y": lf("liger_sparsemax")(x["x"])}, _sparsemax_ref, ("x",))


# ---------------------------------------------------------------------------------- RoPE
BT, HQ, HK, HD = 32, 4, 2, 64


def _rope_make(gen, dtype):
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    emb = torch.outer(torch.arange(7, 7 + BT, dtype=torch.float64), inv)
    emb = torch.cat((emb, emb), -1)
    return {"q": rn(gen, 2, BT, HQ, HD, dtype=dtype).transpose(1, 2), "k": rn(gen, 2, BT, HK, HD, dtype=dtype).transpose(1, 2),
            "cos": emb.cos()[None].to(dtype), "sin": emb.sin()[None].to(dtype)}


def _rot(t):
    h = t.shape[-1] // 2
    return torch.cat((-t[..., h:], t[..., :h]), -1)


def _rope_ref(x):
    c, s = x["cos"][:, None], x["sin"][:, None]
    return {"qo": x["q"] * c + _rot(x["q"]) * s, "ko": x["k"] * c + _rot(x["k"]) * s}


op("rope", _rope_make, lambda x: dict(zip(("qo", "ko"), lf("liger_rope")(x["q"], x["k"], x["cos"], x["sin"]))),
   _rope_ref, ("q", "k"), BOTH, note="[B, H, T, D] views of [B, T, H, D]")


def _mrope_make(gen, dtype):
    sec = [8, 12, 12]                                     # temporal, height, width (x2 = 64)
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    pos = torch.stack([torch.arange(BT), torch.arange(BT) // 4, torch.arange(BT) % 4]).double()  # [3, T]
    emb = pos[:, None, :, None] * inv                     # [3, 1, T, D/2]
    emb = torch.cat((emb, emb), -1)
    return {"q": rn(gen, 1, HQ, BT, HD, dtype=dtype), "k": rn(gen, 1, HK, BT, HD, dtype=dtype),
            "cos": emb.cos().to(dtype), "sin": emb.sin().to(dtype), "sec": sec}


def _mrope_ref(x):
    sec = x["sec"] * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(x["cos"].split(sec, -1))], -1)[:, None]
    sin = torch.cat([m[i % 3] for i, m in enumerate(x["sin"].split(sec, -1))], -1)[:, None]
    return {"qo": x["q"] * cos + _rot(x["q"]) * sin, "ko": x["k"] * cos + _rot(x["k"]) * sin}


op("qwen2vl_mrope", _mrope_make,
   lambda x: dict(zip(("qo", "ko"), lf("liger_qwen2vl_mrope")(x["q"], x["k"], x["cos"], x["sin"], x["sec"]))),
   _mrope_ref, ("q", "k"), BOTH, note="sections [8, 12, 12]")


# ---------------------------------------------------------------------------------- losses
def _targets(gen, n, ignored=5):
    t = torch.randint(0, V, (n,), generator=gen)
    t[torch.randperm(n, generator=gen)[:ignored]] = -100
    return t


def _ce_make(gen, dtype):
    return {"logits": rn(gen, N, V, dtype=dtype, scale=2.0), "target": _targets(gen, N)}


op("cross_entropy", _ce_make,
   lambda x: {"loss": lf("liger_cross_entropy")(x["logits"], x["target"], label_smoothing=0.1)},
   lambda x: {"loss": F.cross_entropy(x["logits"], x["target"], label_smoothing=0.1)}, ("logits",), BOTH,
   note="label smoothing 0.1, 5 ignored")
op("cross_entropy[softcap,z_loss]", _ce_make,
   lambda x: {"loss": lf("liger_cross_entropy")(x["logits"] * 10, x["target"], softcap=30.0, lse_square_scale=1e-4)},
   lambda x: _ce_softcap_ref(x), ("logits",), note="softcap 30, z-loss 1e-4")


def _ce_softcap_ref(x):
    z = 30.0 * torch.tanh(x["logits"] * 10 / 30.0)
    keep = x["target"] != -100
    lse = z.logsumexp(-1)
    return {"loss": F.cross_entropy(z, x["target"]) + 1e-4 * (lse[keep] ** 2).mean()}


def _flce_make(gen, dtype):
    return {"x": rn(gen, N, 256, dtype=dtype), "w": rn(gen, V, 256, dtype=dtype, scale=2 / 16),
            "b": rn(gen, V, dtype=dtype, scale=0.1), "target": _targets(gen, N)}


op("fused_linear_cross_entropy", _flce_make,
   lambda x: {"loss": lf("liger_fused_linear_cross_entropy")(x["x"], x["w"], x["target"], bias=x["b"])},
   lambda x: {"loss": F.cross_entropy(F.linear(x["x"], x["w"], x["b"]), x["target"])}, ("x", "w", "b"), BOTH)


def _dist_make(gen, dtype):
    return {"s": rn(gen, N, V, dtype=dtype, scale=2.0).float().log_softmax(-1).to(dtype),
            "t": rn(gen, N, V, dtype=dtype, scale=2.0).float().log_softmax(-1).to(dtype),
            "labels": _targets(gen, N)}


def _jsd_ref(s, t, labels=None):
    m = 0.5 * (s.exp() + t.exp())
    per = 0.5 * (s.exp() * (s - m.log())).sum(-1) + 0.5 * (t.exp() * (t - m.log())).sum(-1)
    keep = torch.ones_like(per, dtype=torch.bool) if labels is None else labels != -100
    return (per * keep).sum() / keep.sum()


op("jsd", _dist_make, lambda x: {"loss": lf("liger_jsd")(x["s"], x["t"], x["labels"])},
   lambda x: {"loss": _jsd_ref(x["s"], x["t"], x["labels"])}, ("s",), BOTH, note="beta 0.5, 5 ignored")
op("kl_div", _dist_make,
   lambda x: {"loss": lf("liger_kl_div")(x["s"], x["t"], reduction="batchmean", log_target=True)},
   lambda x: {"loss": F.kl_div(x["s"], x["t"], reduction="batchmean", log_target=True)}, ("s",), BOTH)
op("tvd", _dist_make,
   lambda x: {"loss": lf("liger_tvd")(x["s"].exp(), x["t"].exp(), reduction="batchmean")},
   lambda x: {"loss": 0.5 * (x["s"].exp() - x["t"].exp()).abs().sum() / N}, ("s",), note="on probabilities")


def _fl_make(gen, dtype):
    return {"x": rn(gen, N, 256, dtype=dtype), "w": rn(gen, V, 256, dtype=dtype, scale=2 / 16),
            "tx": rn(gen, N, 256, dtype=dtype), "tw": rn(gen, V, 256, dtype=dtype, scale=2 / 16)}


op("fused_linear_jsd", _fl_make,
   lambda x: {"loss": lf("liger_fused_linear_jsd")(x["x"], x["w"], x["tx"], x["tw"])},
   lambda x: {"loss": _jsd_ref(F.linear(x["x"], x["w"]).log_softmax(-1), F.linear(x["tx"], x["tw"]).log_softmax(-1))},
   ("x", "w"))
op("fused_linear_kl_div", _fl_make,
   lambda x: {"loss": lf("liger_fused_linear_kl_div")(x["x"], x["w"], F.linear(x["tx"], x["tw"]).softmax(-1))},
   lambda x: {"loss": F.kl_div(F.linear(x["x"], x["w"]).log_softmax(-1), F.linear(x["tx"], x["tw"]).softmax(-1),
                               reduction="batchmean")}, ("x", "w"), note="teacher probabilities as target")


def _grpo_make(gen, dtype):
    b, L, v = 2, 24, 512
    logits = rn(gen, b, L + 1, v, dtype=dtype, scale=2.0)
    ids = torch.randint(0, v, (b, L), generator=gen)
    base = torch.log_softmax(logits[:, :-1].float() / 0.9, -1).gather(-1, ids[..., None])[..., 0]
    return {"logits": logits, "ids": ids, "old": base + rn(gen, b, L, scale=0.1),
            "ref": base + rn(gen, b, L, scale=0.1), "adv": rn(gen, b), "mask": torch.ones(b, L, dtype=torch.int32)}


def _grpo_ref(x):
    logp = torch.log_softmax(x["logits"][:, :-1] / 0.9, -1).gather(-1, x["ids"][..., None])[..., 0]
    c1 = torch.exp(logp - x["old"])
    c2 = c1.clamp(1 - 0.2, 1 + 0.4)
    a = x["adv"][:, None]
    kl = torch.exp(x["ref"] - logp) - (x["ref"] - logp) - 1
    return {"loss": -torch.minimum(c1 * a, c2 * a) + 0.04 * kl}


def _grpo_call(x):
    from liger_kernel.transformers.grpo_loss import triton_grpo_loss
    loss = triton_grpo_loss(x["logits"], x["old"], x["ref"], x["ids"], x["adv"], x["mask"], inplace=False)[0]
    return {"loss": loss}


op("grpo_loss", _grpo_make, _grpo_call, _grpo_ref, ("logits",),
   note="triton_grpo_loss per-token (reduce=False), temperature 0.9, beta 0.04, clip (0.2, 0.4)")


# ---------------------------------------------------------------------------- attention-likes
def _mta_make(gen, dtype):
    return {"s": rn(gen, 2, 4, 32, 32, dtype=dtype, scale=2.0), "w": rn(gen, 4, 4, 3, 3, dtype=dtype, scale=0.3),
            "b": rn(gen, 4, dtype=dtype, scale=0.1)}


def _mta_ref(x):
    L = x["s"].shape[-1]
    fut = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    p = x["s"].masked_fill(fut, float("-inf")).softmax(-1)
    out = F.conv2d(p, x["w"], x["b"], padding=1)
    return {"y": out.masked_fill(fut, 0.0)}


op("multi_token_attention", _mta_make,
   lambda x: {"y": lf("liger_multi_token_attention")(x["s"], x["w"], x["b"], padding=1)},
   _mta_ref, ("s", "w", "b"), note="[2, 4, 32, 32] scores, 3x3 conv, causal")


def _na_make(gen, dtype):
    return {"q": rn(gen, 1, 2, 48, 32, dtype=dtype), "k": rn(gen, 1, 2, 48, 32, dtype=dtype),
            "v": rn(gen, 1, 2, 48, 32, dtype=dtype)}


def _na_ref(x):
    # Liger's neighbourhood: keys within kernel_size // 2 of the query, clipped at the ends
    L, half = 48, 7 // 2
    mask = (torch.arange(L)[:, None] - torch.arange(L)[None]).abs() <= half
    s = (x["q"] @ x["k"].transpose(-1, -2)) * 32 ** -0.5
    return {"o": s.masked_fill(~mask, float("-inf")).softmax(-1) @ x["v"]}


op("fused_neighborhood_attention", _na_make,
   lambda x: {"o": lf("liger_fused_neighborhood_attention")(x["q"], x["k"], x["v"], kernel_size=7)},
   _na_ref, ("q", "k", "v"), note="1D, window 7, 48 tokens")


def _moe_make(gen, dtype):
    t, h, inter, e, k = 32, 128, 64, 4, 2
    idx = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)]).to(torch.int32)
    return {"x": rn(gen, t, h, dtype=dtype), "gu": rn(gen, e, 2 * inter, h, dtype=dtype, scale=h ** -0.5),
            "down": rn(gen, e, h, inter, dtype=dtype, scale=inter ** -0.5), "idx": idx,
            "w": torch.rand(t, k, generator=gen).softmax(-1).to(dtype)}


def _moe_ref(x):
    out = torch.zeros_like(x["x"])
    for t in range(x["x"].shape[0]):
        for j in range(x["idx"].shape[1]):
            e = int(x["idx"][t, j])
            gate, up = (x["gu"][e] @ x["x"][t]).chunk(2)
            out[t] = out[t] + x["w"][t, j] * (x["down"][e] @ (F.silu(gate) * up))
    return {"y": out}


def _moe_call(x):
    from liger_kernel.ops import LigerFusedMoEFunction
    return {"y": LigerFusedMoEFunction.apply(x["x"], x["gu"], x["down"], x["idx"], x["w"])}


op("fused_moe", _moe_make, _moe_call, _moe_ref, ("x", "gu", "down", "w"),
   note="32 tokens, 4 experts, top-2, hidden 128, intermediate 64")

for name in ("llama4_rope", "mhc", "attn_res", "fused_linear_scaled_cross_entropy_tp", "dpo_loss",
             "vocab_parallel_cross_entropy"):
    op(name, _norm_make, lambda x: {}, lambda x: {},
       skip={"dpo_loss": "liger_kernel.chunked_loss: PyTorch under torch.compile, no hand-written Triton",
             "fused_linear_scaled_cross_entropy_tp": "tensor parallel: needs a process group",
             "vocab_parallel_cross_entropy": "tensor parallel: needs a process group"}.get(
           name, "not swept: no serving or training stack in serving-stacks.md uses it"))
