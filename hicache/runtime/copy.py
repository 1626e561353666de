"""Page copies between pools. The one place to switch to `hicache.kernels` later.

All copies move raw bytes through each pool's `layer_view` (kv, pages, ps, row).
"""
from __future__ import annotations

import torch


def _index(pages: list[int], device: torch.device) -> torch.Tensor:
    return torch.as_tensor(pages, dtype=torch.int64, device=device)


def copy_layer(dst, dst_pages: list[int], src, src_pages: list[int], layer: int) -> None:
    """dst[layer, dst_pages[i]] = src[layer, src_pages[i]] for every i (both KV planes)."""
    if not dst_pages:
        return
    s = src.layer_view(layer)
    d = dst.layer_view(layer)
    rows = s[:, _index(src_pages, s.device)]
    d[:, _index(dst_pages, d.device)] = rows.to(d.device, non_blocking=True)


def copy_pages(dst, dst_pages: list[int], src, src_pages: list[int]) -> None:
    """Every layer of the pages."""
    for layer in range(src.cfg.layers):
        copy_layer(dst, dst_pages, src, src_pages, layer)
