"""The suite's cheaper references (blocked attention, fp32 math for 16-bit data) give what the
straightforward fp64 formulations gave, far inside every tolerance, on the quick cases, and compute
in fp32 only outputs judged to 1e-3 or looser; the blocked attention helper equals the textbook one
whatever its block size."""
from __future__ import annotations

import importlib

import pytest
import torch
import triton

from sdk.conformance import refmath
from sdk.conformance.check import case_seed
from sdk.conformance.runner import load_suite
from sdk.conformance.spec import DTYPES

SUITE = load_suite()


# ------------------------------------------------------- the fp64 formulations they replaced
def old_silu_and_mul(inp, case):
    x = inp["x"].double()
    i = case.params["inter"]
    return {"out": torch.nn.functional.silu(x[:, :i]) * x[:, i:]}


def old_gelu_tanh_and_mul(inp, case):
    x = inp["x"].double()
    i = case.params["inter"]
    return {"out": torch.nn.functional.gelu(x[:, :i], approximate="tanh") * x[:, i:]}


def old_relu2(inp, case):
    return {"out": torch.relu(inp["x"].double()).square()}


def old_attn_prefill(x, case):
    HQ, HKV = x["q"].shape[1], x["k"].shape[1]
    q, k, v = x["q"].double(), x["k"].double(), x["v"].double()
    out = torch.empty_like(q)
    cu = x["cu_seqlens"].tolist()
    for a, b in zip(cu[:-1], cu[1:]):
        qs = q[a:b].transpose(0, 1)
        ks = k[a:b].transpose(0, 1).repeat_interleave(HQ // HKV, 0)
        vs = v[a:b].transpose(0, 1).repeat_interleave(HQ // HKV, 0)
        s = qs @ ks.transpose(1, 2) * x["scale"]
        s = s.masked_fill(~torch.ones(b - a, b - a, dtype=torch.bool).tril(), float("-inf"))
        out[a:b] = (torch.softmax(s, -1) @ vs).transpose(0, 1)
    return {"o": out * torch.sigmoid(x["gate"].double())}


def old_prefix_prefill(t, case):
    p = case.params
    _, HQ, D = t["q"].shape
    _, HKV, _, PAGE, _ = t["k_cache"].shape
    G = HQ // HKV
    out = t["out"].double().clone()
    starts = t["b_start_loc"].tolist()
    window = p.get("window", 0)
    for b, L in enumerate(t["b_seq_len"].tolist()):
        s0, n = starts[b], starts[b + 1] - starts[b]
        if p.get("skip_decode", True) and n == 1:
            continue
        ctx = L - n
        pg = t["block_table"][b, :triton.cdiv(ctx, PAGE)].long()
        kc = t["k_cache"][pg].permute(0, 3, 1, 2, 4).reshape(-1, HKV, D)[:ctx]
        vc = t["v_cache"][pg].permute(0, 3, 1, 2).reshape(-1, HKV, D)[:ctx]
        keys = torch.cat([kc, t["k"][s0:s0 + n]]).double().repeat_interleave(G, 1)
        vals = torch.cat([vc, t["v"][s0:s0 + n]]).double().repeat_interleave(G, 1)
        s = torch.einsum("qhd,khd->hqk", t["q"][s0:s0 + n].double(), keys) * D ** -0.5
        qpos, kpos = ctx + torch.arange(n), torch.arange(L)
        seen = kpos[None, :] <= qpos[:, None]
        if window > 0:
            seen &= qpos[:, None] - kpos[None, :] < window
        s = s.masked_fill(~seen[None], float("-inf"))
        if t["sinks"] is not None:
            sink = t["sinks"].double()[:, None, None].expand(HQ, n, 1)
            w = torch.softmax(torch.cat([s, sink], -1), -1)[..., :L]
        else:
            w = torch.softmax(s, -1)
        out[s0:s0 + n] = torch.einsum("hqk,khd->qhd", w, vals)
    return {"out": out}


def old_mla_prefill(x, case):
    cu = x["cu_seqlens"].tolist()
    out = torch.empty((cu[-1],) + x["o"].shape[1:], dtype=torch.float64)
    for b, (a, e) in enumerate(zip(cu[:-1], cu[1:])):
        ks, vs = [], []
        for ch in x["context_chunks"]:
            s, t = ch["cu_seqlens"][b].item(), ch["cu_seqlens"][b + 1].item()
            ks.append(ch["k"][s:t])
            vs.append(ch["v"][s:t])
        ks.append(x["k"][a:e])
        vs.append(x["v"][a:e])
        k, v = torch.cat(ks).double(), torch.cat(vs).double()
        n_ctx = k.shape[0] - (e - a)
        keep = torch.ones((e - a, k.shape[0]), dtype=torch.bool)
        keep[:, n_ctx:] = torch.ones((e - a, e - a), dtype=torch.bool).tril()
        s = torch.einsum("thd,nhd->htn", x["q"][a:e].double(), k) * x["scale"]
        s = s.masked_fill(~keep, float("-inf"))
        out[a:e] = torch.einsum("htn,nhd->thd", torch.softmax(s, -1), v)
    return {"o": out}


def old_unified(x, case):
    q = x["q"].double()
    T, HQ, D = q.shape
    _, PAGE, HKV, _ = x["k_cache"].shape
    out = torch.empty((T, HQ, D), dtype=torch.float64, device=q.device)
    cu = x["cu_seqlens_q"].tolist()
    for b, L in enumerate(x["seq_lens"].tolist()):
        pages = x["block_table"][b, :triton.cdiv(L, PAGE)].long()
        k = x["k_cache"][pages].reshape(-1, HKV, D)[:L].double().repeat_interleave(HQ // HKV, 1)
        v = x["v_cache"][pages].reshape(-1, HKV, D)[:L].double().repeat_interleave(HQ // HKV, 1)
        kpos = torch.arange(L, device=q.device)
        for a in range(cu[b], cu[b + 1], 512):               # bounded memory at full shapes
            e = min(a + 512, cu[b + 1])
            qpos = L - (cu[b + 1] - a) + torch.arange(e - a, device=q.device)
            s = torch.einsum("qhd,khd->hqk", q[a:e], k) * x["scale"]
            if x["softcap"] > 0:
                s = x["softcap"] * torch.tanh(s / x["softcap"])
            if x["alibi_slopes"] is not None:
                s = s + x["alibi_slopes"].double()[:, None, None] * (kpos[None, None, :] - qpos[None, :, None])
            seen = kpos[None, :] <= qpos[:, None] if x.get("causal", True) else torch.ones_like(
                kpos[None, :] <= qpos[:, None])
            if x["window"] > 0:
                seen &= qpos[:, None] - kpos[None, :] < x["window"]
            s = s.masked_fill(~seen[None], float("-inf"))
            if x["sinks"] is not None:
                sink = x["sinks"].double()[:, None, None].expand(HQ, e - a, 1)
                p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :L]
            else:
                p = torch.softmax(s, -1)
            out[a:e] = torch.einsum("hqk,khd->qhd", p, v)
    return {"out": out}



def old_paged_decode(x, case):
    B, HQ, D = x["q"].shape
    PAGE, HKV = x["k_cache"].shape[1], x["k_cache"].shape[2]
    out = torch.empty((B, HQ, D), dtype=torch.float64, device=x["q"].device)
    for b, n in enumerate(x["seq_lens"].tolist()):
        pages = x["block_table"][b, :triton.cdiv(n, PAGE)].long()
        ks = x["k_cache"][pages].reshape(-1, HKV, D)[:n].double().repeat_interleave(HQ // HKV, 1)
        vs = x["v_cache"][pages].reshape(-1, HKV, D)[:n].double().repeat_interleave(HQ // HKV, 1)
        s = torch.einsum("hd,nhd->hn", x["q"][b].double(), ks) * x["scale"]
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(s, -1), vs)
    return {"o": out}



def old_merge(x, case):
    pl = x["prefix_lse"].double().clone()
    sl = x["suffix_lse"].double().clone()
    pl[pl == float("inf")] = float("-inf")
    sl[sl == float("inf")] = float("-inf")
    lse = torch.logaddexp(pl, sl)
    wp = torch.exp(pl - lse).nan_to_num(0.0).T[:, :, None]
    ws = torch.exp(sl - lse).nan_to_num(0.0).T[:, :, None]
    return {"output": x["prefix_output"].double() * wp + x["suffix_output"].double() * ws, "output_lse": lse}



def old_gemm(inp, case):
    return {"y": inp["x"].double() @ inp["w"].double().T}


def old_gemm_fp8(inp, case):
    x = inp["x"].double() * inp["sx"].double()[:, None]
    w = inp["w"].double() * inp["sw"].double()[:, None]
    return {"y": x @ w.T}


def in_fp64(name: str):
    """The kernel's own reference with refmath's precision rule set aside: fp64 throughout (the
    8-bit GEMMs' references differ from their fp64 formulations only in that dtype)."""
    def old(inp, case):
        from unittest import mock
        module = importlib.import_module(SUITE[name].reference.__module__)
        with mock.patch.object(module, "compute_dtype", lambda t: torch.float64):
            return SUITE[name].reference(inp, case)
    return old


OLD = {"silu_and_mul": old_silu_and_mul, "gelu_tanh_and_mul": old_gelu_tanh_and_mul, "relu2": old_relu2,
       "attn_prefill_gqa_gated": old_attn_prefill, "prefix_prefill_attention": old_prefix_prefill,
       "mla_prefill": old_mla_prefill, "unified_attention": old_unified, "unified_attention_split_kv": old_unified,
       "attn_paged_decode": old_paged_decode, "merge_attn_states": old_merge,
       "gemm_bf16": old_gemm, "gemm_fp8_w8a8": old_gemm_fp8,
       **{name: in_fp64(name) for name in ("gemm_fp8_block_w8a8", "moe_fused_gemm", "moe_fused_gemm_fp8_block",
                                           "gemm_int8_block_w8a8", "moe_mxfp4_gemm")}}


def _items():
    for name in OLD:
        spec = SUITE[name]
        for case in spec.cases:
            if case.quick:
                for dtype in spec.dtypes:
                    yield pytest.param(name, case, dtype, id=f"{name}-{case.name}-{dtype}")


@pytest.mark.parametrize("name, case, dtype", list(_items()))
def test_reference_agrees_with_the_fp64_formulation(name, case, dtype):
    spec = SUITE[name]
    gen = torch.Generator().manual_seed(case_seed(name, case.name, dtype))
    inputs = spec.make_inputs(case, DTYPES[dtype], "cpu", gen)
    new = spec.reference(inputs, case)
    old = OLD[name](inputs, case)
    for out in spec.outputs:
        tol = spec.tolerance_for(out, dtype)
        a, b = new[out].double(), old[out]
        assert a.shape == b.shape and torch.equal(a.isnan(), b.isnan())
        seen = ~b.isnan()
        err = torch.where(a == b, 0.0, (a - b).abs())[seen]  # equal infinities agree
        assert err.numel()
        if tol.rmse is not None:
            rmse = float(torch.linalg.vector_norm(err) / torch.linalg.vector_norm(b[seen]))
            assert rmse <= tol.rmse / 100, f"{name}/{out}@{dtype}: relative RMSE {rmse:.3g} vs {tol.rmse:g}"
        else:
            allowed = (tol.atol + tol.rtol * b.abs())[seen]
            assert bool((err <= allowed / 100).all()), \
                f"{name}/{out}@{dtype}: {float((err - allowed / 100).max()):.3g} past 1/100 of the tolerance"
        if new[out].dtype == torch.float32:  # refmath's rule: fp32 math only for outputs judged loosely
            loose = tol.rmse >= 1e-3 if tol.rmse is not None else min(tol.atol, tol.rtol) >= 1e-3
            assert not tol.exact and loose, (out, dtype, tol)
        if dtype == "fp32":  # fp64 math both ways: only the order of the sums differs
            assert float(err.max()) <= 1e-12 * max(1.0, float(b[seen].abs().max()))


def _textbook(q, k, v, scale, q_pos, k_pos, causal, window, sinks):
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    seen = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool)
    if causal:
        seen &= k_pos[None, :] <= q_pos[:, None]
    if window:
        seen &= q_pos[:, None] - k_pos[None, :] < window
    s = s.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks[:, None, None].expand(-1, q.shape[0], 1)], -1)
        return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1)[..., :-1], v)
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v)


@pytest.mark.parametrize("causal, window, sinks", [(False, 0, False), (True, 0, False), (True, 7, False), (False, 6, False),
                                                   (True, 5, True), (False, 0, True)])
@pytest.mark.parametrize("budget", [64, 4096, None])
def test_blocked_attention_equals_the_textbook_formula(causal, window, sinks, budget):
    gen = torch.Generator().manual_seed(5)
    n, L, HQ, HKV, D = 19, 31, 6, 2, 8
    q = torch.randn(n, HQ, D, generator=gen, dtype=torch.float64)
    k = torch.randn(L, HKV, D, generator=gen, dtype=torch.float64)
    v = torch.randn(L, HKV, 5, generator=gen, dtype=torch.float64)
    q_pos = L - n + torch.arange(n)
    k_pos = torch.arange(L)
    sk = torch.randn(HQ, generator=gen, dtype=torch.float64) if sinks else None
    got = refmath.attention(q, k, v, 0.3, q_pos=q_pos, causal=causal, window=window, sinks=sk, budget=budget)
    want = _textbook(q, k, v, 0.3, q_pos, k_pos, causal, window, sk)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal, window, sinks", [(True, 0, False), (True, 5, True), (False, 0, False)])
def test_fp32_attention_drops_only_weights_below_the_smallest_normal(causal, window, sinks):
    """In fp32 a weight exp(s - max) under 1.2e-38 is set to zero before the exponential (computed,
    it is subnormal and slow): the result is the fp64 formula's to fp32 rounding, with logits
    spread over hundreds so that most weights of a row fall below that floor, rows that see
    nothing stay NaN, and a sink's weight still counts."""
    gen = torch.Generator().manual_seed(11)
    n, L, HQ, HKV, D = 23, 40, 4, 2, 16
    q = torch.randn(n, HQ, D, generator=gen, dtype=torch.float64) * 3.5
    k = torch.randn(L, HKV, D, generator=gen, dtype=torch.float64) * 3.5
    v = torch.randn(L, HKV, 8, generator=gen, dtype=torch.float64)
    q_pos = torch.arange(n) - 3  # the first three queries precede every key
    sk = torch.randn(HQ, generator=gen, dtype=torch.float64) * 30 if sinks else None
    got = refmath.attention(q.float(), k.float(), v.float(), 1.0, q_pos=q_pos, causal=causal, window=window,
                            sinks=None if sk is None else sk.float(), dtype=torch.float32, budget=256)
    want = _textbook(q.float().double(), k.float().double(), v.float().double(), 1.0, q_pos, torch.arange(L),
                     causal, window, None if sk is None else sk.float().double())
    spread = (torch.einsum("qhd,khd->hqk", q, k.repeat_interleave(2, 1)).amax(-1)
              - torch.einsum("qhd,khd->hqk", q, k.repeat_interleave(2, 1)).amin(-1))
    assert float(spread.min()) > 87  # every row has weights below the floor
    assert torch.equal(got.isnan(), want.isnan())
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_fp32_attention_keeps_every_weight_fp32_holds_as_a_normal_number():
    """The floor sits at fp32's smallest normal: keys 15, 50 and 86 below the row's largest logit
    still count (values large enough for each to move the output), one 100 below does not."""
    logits = torch.tensor([0.0, -15.0, -50.0, -86.0, -100.0], dtype=torch.float64)
    values = torch.tensor([0.0, 1e6, 1e20, 1e36, 1e38], dtype=torch.float64)
    q = torch.ones(1, 1, 1, dtype=torch.float64)
    got = refmath.attention(q.float(), logits.float()[:, None, None], values.float()[:, None, None], 1.0,
                            dtype=torch.float32)
    w = torch.exp(logits)
    kept = float((w[:4] * values[:4]).sum() / w.sum())
    assert abs(float(got) - kept) <= 1e-5 * kept and kept > 0.3


def test_blocked_attention_rows_that_see_nothing_are_nan_unless_a_sink_takes_them():
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(4, 2, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(6, 1, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(6, 1, 8, generator=gen, dtype=torch.float64)
    q_pos = torch.tensor([-3, -1, 0, 5])  # the first two queries precede every key
    out = refmath.attention(q, k, v, 1.0, q_pos=q_pos, causal=True, budget=16 * 6 * 2)
    assert out[:2].isnan().all() and not out[2:].isnan().any()
    sinks = torch.zeros(2, dtype=torch.float64)
    out = refmath.attention(q, k, v, 1.0, q_pos=q_pos, causal=True, sinks=sinks)
    assert torch.equal(out[:2], torch.zeros_like(out[:2])) and not out.isnan().any()


def test_top_p_reference_leaves_open_only_the_tokens_within_a_search_step_of_the_cut():
    """vLLM's top-p cut is found by a bisection of the probabilities with a fixed number of steps:
    the reference's alternative flips only tokens within one step of the least likely kept one,
    never the most likely token, and equals the reference elsewhere."""
    from sdk.conformance.library.vllm import sampling as vllm_sampling
    spec = load_suite()["lib_vllm_topk_topp"]
    for case in spec.cases:
        gen = torch.Generator().manual_seed(case_seed(spec.name, case.name, "fp32"))
        x = spec.make_inputs(case, torch.float32, "cpu", gen)
        ref = spec.reference({k: v.clone() for k, v in x.items()}, case)
        out, alt = ref["out"], ref["out@alt"]
        for r in range(out.shape[0]):
            kept = torch.isfinite(out[r])
            flipped = kept != torch.isfinite(alt[r])
            assert torch.equal(out[r][~flipped], alt[r][~flipped])
            row = x["logits"][r].double()
            assert kept[row.argmax()] and not flipped[row.argmax()]
            if flipped.any():
                k = min(int(x["k"][r]), row.numel())
                probs = torch.softmax(row.masked_fill(row < row.topk(k).values[-1], float("-inf")), -1)
                live = probs[probs > 0]
                step = float(live.max() - live.min()) / 2 ** vllm_sampling.TOPP_SEARCH_STEPS
                assert ((probs[flipped] - probs[kept].min()).abs() <= step).all()
                assert int(flipped.sum()) < 0.01 * int(kept.sum()) + 2
