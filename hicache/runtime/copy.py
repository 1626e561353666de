"""Page copies between pools, through `hicache.kernels` (Triton on a GPU, torch on the CPU).

Pools hand the kernels their raw-byte buffers in the kernels' layouts (`kernel_view`), so
every dtype (fp8 included) moves as bytes.
"""
from __future__ import annotations

import torch

from hicache import kernels


def _index(pages: list[int], device: torch.device) -> torch.Tensor:
    return torch.as_tensor(pages, dtype=torch.int64, device=device)


def copy_layer(dst, dst_pages: list[int], src, src_pages: list[int], layer: int | None) -> None:
    """dst[layer, dst_pages[i]] = src[layer, src_pages[i]] for every i (every KV plane);
    layer None copies every layer. `dst_pages` must be duplicate-free."""
    if not dst_pages:
        return
    s, s_layout = src.kernel_view()
    d, d_layout = dst.kernel_view()
    kernels.transfer_pages(s, d, _index(src_pages, s.device), _index(dst_pages, d.device),
                           page_size=src.cfg.page_size, src_layout=s_layout.value,
                           dst_layout=d_layout.value, layer=layer)


def copy_pages(dst, dst_pages: list[int], src, src_pages: list[int]) -> None:
    """Every layer of the pages, in one launch."""
    copy_layer(dst, dst_pages, src, src_pages, None)
