"""Reference kernels for moving KV pages, with torch fallbacks (imported as ``hicache.kernels``).

The runtime calls only the functions below (:mod:`.dispatch` picks Triton on a GPU, the native
one-pass C copy of :mod:`.native` on the CPU, torch where neither can run). Pool layouts and
index rules: :mod:`.layout`. One module per kernel family: :mod:`.page_gather` (CP
gather/scatter), :mod:`.transfer` (host <-> device), :mod:`.packed` (draft KV packed with the
target, sidecar pools), :mod:`.attention` (paged attention reference). Each holds its
``@triton.jit`` kernel, its launcher, its torch reference, and (copies) its native entry point.
"""
from .dispatch import (Backend, backend, gather_pages, paged_attention, scatter_pages, set_backend,
                       transfer_packed, transfer_pages, transfer_sidecar)
from .layout import Layout, PageGeometry, describe
from .packed import Direction, HitPolicy, IndexSource, SidecarSpec, sidecar_pages

__all__ = [
    "Backend", "Direction", "HitPolicy", "IndexSource", "Layout", "PageGeometry", "SidecarSpec",
    "backend", "describe", "gather_pages", "paged_attention", "scatter_pages", "set_backend",
    "sidecar_pages", "transfer_packed", "transfer_pages", "transfer_sidecar",
]
