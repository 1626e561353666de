"""KV pools holding real bytes: the device pool and the host pool (three layouts).

Every pool stores raw bytes (uint8), whatever the model dtype: a token row of one
layer and one KV plane is `heads * head_dim * itemsize` bytes, so fp8 and any other
dtype move as bytes. `typed(...)` gives a dtype view for consumers.
Each pool exposes `layer_view(l)`: a (kv, pages, page_size, row_bytes) strided view of
layer l, whatever the layout, so one copy routine serves all layouts.
A page's canonical bytes (storage value) are ordered (kv, layer, token, row).
"""
from __future__ import annotations

import torch

from hicache.runtime.config import CacheConfig, HostLayout


def accel_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def row_bytes(cfg: CacheConfig) -> int:
    itemsize = torch.empty((), dtype=getattr(torch, cfg.dtype)).element_size()
    return cfg.heads * cfg.head_dim * itemsize


class _Pool:
    cfg: CacheConfig
    pages: int
    buf: torch.Tensor

    def layer_view(self, layer: int) -> torch.Tensor:
        raise NotImplementedError

    @property
    def page_nbytes(self) -> int:
        c = self.cfg
        return c.kv * c.layers * c.page_size * row_bytes(c)

    def read_page(self, page: int) -> torch.Tensor:
        """Canonical bytes of one page (kv, layer, token, row), as a 1-D CPU uint8 tensor."""
        parts = [self.layer_view(l)[:, page] for l in range(self.cfg.layers)]  # (kv, ps, rb) each
        return torch.stack(parts, dim=1).reshape(-1).cpu()

    def write_page(self, page: int, data: torch.Tensor) -> None:
        c = self.cfg
        src = data.reshape(c.kv, c.layers, c.page_size, -1).to(self.buf.device)
        for l in range(c.layers):
            self.layer_view(l)[:, page] = src[:, l]

    def kernel_view(self) -> tuple[torch.Tensor, HostLayout]:
        """The buffer as `hicache.kernels` addresses it: (tensor, layout), one byte per element
        and the token row as (H=1, D=row_bytes)."""
        raise NotImplementedError

    def typed(self, layer: int) -> torch.Tensor:
        """Layer l as (kv, pages, page_size, heads, head_dim) in the model dtype."""
        c = self.cfg
        v = self.layer_view(layer)
        return v.contiguous().view(getattr(torch, c.dtype)).reshape(c.kv, self.pages, c.page_size,
                                                                   c.heads, c.head_dim)


class DevicePool(_Pool):
    """(kv, layers, pages, page_size, row_bytes) on the accelerator (CPU tensors here)."""

    def __init__(self, cfg: CacheConfig, device: torch.device | None = None) -> None:
        self.cfg = cfg
        self.pages = cfg.device_pages
        self.buf = torch.zeros((cfg.kv, cfg.layers, cfg.device_pages, cfg.page_size, row_bytes(cfg)),
                               dtype=torch.uint8, device=device or accel_device())

    def layer_view(self, layer: int) -> torch.Tensor:
        return self.buf[:, layer]

    def kernel_view(self) -> tuple[torch.Tensor, HostLayout]:
        c = self.cfg
        return (self.buf.view(c.kv, c.layers, self.pages * c.page_size, 1, -1),
                HostLayout.LAYER_FIRST)


def _host_layer_first(cfg: CacheConfig, rb: int) -> tuple[tuple[int, ...], callable]:
    return ((cfg.kv, cfg.layers, cfg.host_pages, cfg.page_size, rb), lambda b, l: b[:, l])


def _host_page_first(cfg: CacheConfig, rb: int) -> tuple[tuple[int, ...], callable]:
    # token-granular slots: (kv, slots, layers, row); a page is page_size consecutive slots
    shape = (cfg.kv, cfg.host_pages * cfg.page_size, cfg.layers, rb)
    return shape, lambda b, l: b.view(cfg.kv, cfg.host_pages, cfg.page_size, cfg.layers, rb)[:, :, :, l]


def _host_page_first_direct(cfg: CacheConfig, rb: int) -> tuple[tuple[int, ...], callable]:
    return ((cfg.kv, cfg.host_pages, cfg.layers, cfg.page_size, rb), lambda b, l: b[:, :, l])


#: layout -> (shape, layer view) builder
HOST_LAYOUTS = {
    HostLayout.LAYER_FIRST: _host_layer_first,
    HostLayout.PAGE_FIRST: _host_page_first,
    HostLayout.PAGE_FIRST_DIRECT: _host_page_first_direct,
}


class HostPool(_Pool):
    """Host pool in one of HOST_LAYOUTS; pinned when an accelerator is present."""

    def __init__(self, cfg: CacheConfig) -> None:
        self.cfg = cfg
        self.pages = cfg.host_pages
        shape, self._view = HOST_LAYOUTS[cfg.host_layout](cfg, row_bytes(cfg))
        self.buf = torch.zeros(shape, dtype=torch.uint8, pin_memory=torch.cuda.is_available())

    def layer_view(self, layer: int) -> torch.Tensor:
        return self._view(self.buf, layer)

    def kernel_view(self) -> tuple[torch.Tensor, HostLayout]:
        c = self.cfg
        layout = c.host_layout
        if layout is HostLayout.LAYER_FIRST:
            shape = (c.kv, c.layers, self.pages * c.page_size, 1, -1)
        elif layout is HostLayout.PAGE_FIRST:
            shape = (c.kv, self.pages * c.page_size, c.layers, 1, -1)
        else:
            shape = (c.kv, self.pages, c.layers, c.page_size, 1, -1)
        return self.buf.view(shape), layout
