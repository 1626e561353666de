"""Per-layer gather cost with and without overlap, measured on the ranks themselves.

Each stage runs the same forward-shaped loop over its layers twice per iteration: once with
the gather of layer l+1 running on the gather thread while layer l computes (overlap), once
with every gather done right before its attention (sequential). The compute per layer is the
model's own layer on `chunk` tokens. Every rank runs this unconditionally (it is collective).
"""
from __future__ import annotations

import statistics
import time

import torch

from .gather import GatherStats, PrefixGather


def _forward(engine, pages: list[int], h0: torch.Tensor, q_pos: torch.Tensor, overlap: bool,
             stats: GatherStats) -> float:
    cfg = engine.cfg
    n, ps = len(pages), cfg.page_size
    t0 = time.perf_counter()
    g = PrefixGather(engine.comm, engine.layout, engine.device_pool, pages, lambda layer: True,
                     overlap=overlap, timeout_s=cfg.timeout_s, stats=stats)
    g.start()
    h = h0
    for l in range(engine.stage_layers):
        layer = engine.layer0 + l
        q, k, v = engine.model.qkv(layer, h)
        buf = g.acquire(l)
        keys = torch.cat([buf[:, 0].reshape(n * ps, *k.shape[1:]), k])
        vals = torch.cat([buf[:, 1].reshape(n * ps, *v.shape[1:]), v])
        attn = engine.model.attend(q, keys, vals, q_pos)
        g.release(l)
        h = engine.model.finish_layer(layer, h, attn)
    g.close()
    return time.perf_counter() - t0


def bench_gather(engine, prefix_pages: int = 8, chunk: int = 128, iters: int = 5) -> dict:
    """Median forward time and per-layer gather figures for both modes. The modes alternate
    (and swap order every iteration) so machine-load drift hits both alike."""
    cfg, comm = engine.cfg, engine.comm
    n = min(prefix_pages, cfg.device_pages_per_rank * cfg.cp)
    pages = list(range(n))                      # logical pages 0..n-1: every owner holds some
    h0 = torch.randn(chunk, cfg.model.hidden, generator=torch.Generator().manual_seed(7))
    q_pos = torch.arange(n * cfg.page_size, n * cfg.page_size + chunk)
    stats = {"sequential": GatherStats(), "overlap": GatherStats()}
    walls: dict[str, list[float]] = {"sequential": [], "overlap": []}
    for it in range(iters):
        modes = ("sequential", "overlap") if it % 2 == 0 else ("overlap", "sequential")
        for mode in modes:
            comm.barrier(f"gather_bench[{mode}]")
            walls[mode].append(_forward(engine, pages, h0, q_pos, mode == "overlap", stats[mode]))
    out: dict[str, object] = {}
    for mode in walls:
        out[mode] = {**stats[mode].as_dict(), "forward_ms": round(statistics.median(walls[mode]) * 1e3, 4)}
    seq, ovl = out["sequential"], out["overlap"]
    out["forward_ratio"] = round(ovl["forward_ms"] / seq["forward_ms"], 4) if seq["forward_ms"] else None
    out["prefix_pages"], out["chunk_tokens"], out["iters"] = n, chunk, iters
    return out
