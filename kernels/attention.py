"""Paged attention reference: decode and prefix-extend over a paged KV pool, causal.

``paged_attention(q, k_layer, v_layer, page_table, seq_lens, q_lens, page_size=, scale=)``

- ``q``: ``[T, Hq, D]``, the queries of all requests back to back (``T = sum(q_lens)``).
- ``k_layer``: ``[slots, Hkv, D]``, ``v_layer``: ``[slots, Hkv, Dv]``: one layer of the device
  pool (``pool[0, l]``, ``pool[1, l]``), or a gathered scratch buffer. ``Hq % Hkv == 0`` (GQA:
  query head ``h`` reads KV head ``h // (Hq // Hkv)``).
- ``page_table``: ``[B, max_pages]`` int64; token ``n`` of request ``b`` lives in slot
  ``page_table[b, n // ps] * ps + n % ps``. Entries past a request's last page are ignored.
- ``seq_lens``, ``q_lens``: ``[B]`` int64; ``1 <= q_lens[b] <= seq_lens[b]``. The queries of
  request ``b`` are its last ``q_lens[b]`` tokens: decode is ``q_lens == 1``, prefix-extend a
  cached prefix of ``seq_lens - q_lens`` tokens plus a new chunk.
- Causal: the query at position ``p`` attends to KV positions ``0..p``.
- Returns ``[T, Hq, Dv]`` in ``q``'s dtype; scores, softmax and sums are fp32.
  ``scale`` defaults to ``D ** -0.5``.

This is a reference, not a fast kernel: the end-to-end model and the gather tests use it to
show that attention over restored or gathered pages equals attention over the original KV.
Both implementations are deterministic, so equal KV bytes give equal outputs, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _triton
from ._triton import jit, tl
from .launch import next_pow2
from .layout import require_contiguous

#: KV positions per tile of the Triton kernel.
BLOCK_N = 32


@jit
def _paged_attention_kernel(
    q, k, v, out, page_table, tok_req, tok_pos, scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_pt,
    GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    kvh = h // GROUP
    b = tl.load(tok_req + t)
    pos = tl.load(tok_pos + t)
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    qv = tl.load(q + t * stride_qt + h * stride_qh + d, mask=d < D, other=0.0).to(tl.float32)
    m = tl.full((), float("-inf"), tl.float32)
    l_sum = tl.zeros((), tl.float32)
    acc = tl.zeros((BLOCK_DV,), tl.float32)
    kv_len = (pos + 1).to(tl.int32)      # the causal window of this query
    for n0 in range(0, kv_len, BLOCK):
        n = n0 + tl.arange(0, BLOCK)
        valid = n <= pos
        page = tl.load(page_table + b * stride_pt + n // PAGE_SIZE, mask=valid, other=0)
        slot = page * PAGE_SIZE + n % PAGE_SIZE
        kt = tl.load(k + slot[:, None] * stride_kt + kvh * stride_kh + d[None, :],
                     mask=valid[:, None] & (d[None, :] < D), other=0.0).to(tl.float32)
        s = tl.sum(kt * qv[None, :], axis=1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        vt = tl.load(v + slot[:, None] * stride_vt + kvh * stride_vh + dv[None, :],
                     mask=valid[:, None] & (dv[None, :] < DV), other=0.0).to(tl.float32)
        l_sum = l_sum * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * vt, axis=0)
        m = m_new
    o = acc / l_sum
    tl.store(out + t * stride_ot + h * stride_oh + dv, o.to(out.dtype.element_ty), mask=dv < DV)


@dataclass(frozen=True, slots=True)
class AttentionPlan:
    """A validated batch. Invariant: every page a query reads is in range of the pool."""
    seq_lens: list[int]
    q_lens: list[int]
    page_table: torch.Tensor   # CPU int64
    group: int
    scale: float


def _plan(q, k_layer, v_layer, page_table, seq_lens, q_lens, page_size, scale) -> AttentionPlan:
    for name, t in (("q", q), ("k_layer", k_layer), ("v_layer", v_layer)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D, got shape {tuple(t.shape)}")
        require_contiguous(t, name)
    if not (q.dtype == k_layer.dtype == v_layer.dtype):
        raise ValueError(f"q/k/v dtypes differ: {q.dtype}, {k_layer.dtype}, {v_layer.dtype}")
    if not q.dtype.is_floating_point or q.element_size() < 2:
        raise ValueError(f"attention needs fp32/fp16/bf16, got {q.dtype}")
    hq, d = q.shape[1], q.shape[2]
    slots, hkv = k_layer.shape[0], k_layer.shape[1]
    if k_layer.shape[2] != d:
        raise ValueError(f"q head dim {d} != k head dim {k_layer.shape[2]}")
    if v_layer.shape[:2] != k_layer.shape[:2]:
        raise ValueError(f"v_layer {tuple(v_layer.shape)} does not match k_layer {tuple(k_layer.shape)}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"query heads {hq} not a multiple of KV heads {hkv}")
    if page_size < 1 or slots % page_size:
        raise ValueError(f"{slots} slots is not a whole number of pages of {page_size}")
    for name, t in (("page_table", page_table), ("seq_lens", seq_lens), ("q_lens", q_lens)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int64:
            raise ValueError(f"{name} must be a torch.int64 tensor")
    if page_table.dim() != 2 or seq_lens.dim() != 1 or q_lens.shape != seq_lens.shape \
            or page_table.shape[0] != seq_lens.shape[0]:
        raise ValueError("page_table [B, P], seq_lens [B] and q_lens [B] disagree on B")
    sl, ql = seq_lens.cpu().tolist(), q_lens.cpu().tolist()
    table = page_table.detach().cpu()
    pages = slots // page_size
    for b, (s, n) in enumerate(zip(sl, ql)):
        if not 1 <= n <= s:
            raise ValueError(f"request {b}: need 1 <= q_len ({n}) <= seq_len ({s})")
        used = -(-s // page_size)
        if used > table.shape[1]:
            raise ValueError(f"request {b}: {s} tokens need {used} pages, page_table has {table.shape[1]}")
        row = table[b, :used]
        if int(row.min()) < 0 or int(row.max()) >= pages:
            raise ValueError(f"request {b}: page index out of range [0, {pages})")
    if sum(ql) != q.shape[0]:
        raise ValueError(f"q has {q.shape[0]} tokens, q_lens sum to {sum(ql)}")
    return AttentionPlan(sl, ql, table, hq // hkv, d ** -0.5 if scale is None else float(scale))


def paged_attention_triton(q, k_layer, v_layer, page_table, seq_lens, q_lens, *, page_size: int,
                           scale: float | None = None) -> torch.Tensor:
    """Triton implementation of :func:`hicache.kernels.paged_attention`."""
    plan = _plan(q, k_layer, v_layer, page_table, seq_lens, q_lens, page_size, scale)
    out = torch.empty(q.shape[0], q.shape[1], v_layer.shape[2], dtype=q.dtype, device=q.device)
    if q.shape[0] == 0:
        return out
    tok_req = torch.repeat_interleave(torch.arange(len(plan.q_lens)), torch.tensor(plan.q_lens))
    tok_pos = torch.cat([torch.arange(s - n, s) for s, n in zip(plan.seq_lens, plan.q_lens)])
    table = plan.page_table.contiguous()
    dev = q.device
    kernel = _triton.runnable(_paged_attention_kernel, dev.type)
    kernel[(q.shape[0], q.shape[1])](
        q, k_layer, v_layer, out, table.to(dev), tok_req.to(dev), tok_pos.to(dev), plan.scale,
        q.stride(0), q.stride(1), k_layer.stride(0), k_layer.stride(1), v_layer.stride(0), v_layer.stride(1),
        out.stride(0), out.stride(1), table.stride(0),
        GROUP=plan.group, PAGE_SIZE=page_size, D=q.shape[2], DV=v_layer.shape[2],
        BLOCK_D=next_pow2(q.shape[2]), BLOCK_DV=next_pow2(v_layer.shape[2]), BLOCK=BLOCK_N,
    )
    return out


def paged_attention_torch(q, k_layer, v_layer, page_table, seq_lens, q_lens, *, page_size: int,
                          scale: float | None = None) -> torch.Tensor:
    """Torch reference (and CPU fallback) of :func:`hicache.kernels.paged_attention`."""
    plan = _plan(q, k_layer, v_layer, page_table, seq_lens, q_lens, page_size, scale)
    outs = []
    start = 0
    offsets = torch.arange(page_size)
    for b, (s, n) in enumerate(zip(plan.seq_lens, plan.q_lens)):
        used = -(-s // page_size)
        slots = (plan.page_table[b, :used, None] * page_size + offsets).reshape(-1)[:s].to(k_layer.device)
        k = k_layer.index_select(0, slots).float().repeat_interleave(plan.group, dim=1)   # [s, Hq, D]
        v = v_layer.index_select(0, slots).float().repeat_interleave(plan.group, dim=1)   # [s, Hq, Dv]
        qb = q[start:start + n].float()                                                   # [n, Hq, D]
        scores = torch.einsum("qhd,khd->hqk", qb, k) * plan.scale
        pos = torch.arange(s - n, s, device=q.device)[:, None]
        causal = torch.arange(s, device=q.device)[None, :] <= pos                         # [n, s]
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        outs.append(torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype))
        start += n
    if not outs:
        return torch.empty(0, q.shape[1], v_layer.shape[2], dtype=q.dtype, device=q.device)
    return torch.cat(outs)
