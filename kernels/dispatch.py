"""The one entry point the runtime calls: Triton on a GPU, a one-pass C loop on the CPU.

The backend is chosen once per device type, on first use, and then fixed: CUDA tensors get
the Triton kernels when Triton imports (else the torch fallback); CPU tensors get the native
one-pass copy (:mod:`.native`, compiled on first use) unless ``HICACHE_NATIVE=0`` or the build
fails (one warning), in which case the torch fallback. Paged attention has no native form: the
native set uses the torch reference for it. ``HICACHE_KERNEL_BACKEND=triton|native|torch``
overrides the choice for every device (``triton`` on CPU tensors needs ``TRITON_INTERPRET=1``;
the kernel tests use it; ``native`` sends GPU tensors to torch).
:func:`set_backend` pins a choice for tests. Every function validates its arguments the same
way under every backend and raises ValueError before any copy starts.
"""
from __future__ import annotations

import enum
import numbers
import os
from dataclasses import dataclass
from typing import Callable

import torch

from . import _triton, attention, native, packed, page_gather, transfer
from .layout import Layout
from .packed import Direction, SidecarSpec, sidecar_pages


class Backend(enum.StrEnum):
    TRITON = "triton"
    NATIVE = "native"    # CPU only: the C loop of csrc/pagecopy.c
    TORCH = "torch"


@dataclass(frozen=True, slots=True)
class KernelSet:
    gather_pages: Callable
    scatter_pages: Callable
    transfer_pages: Callable
    transfer_packed: Callable
    paged_attention: Callable


KERNELS: dict[Backend, KernelSet] = {
    Backend.TRITON: KernelSet(page_gather.gather_pages_triton, page_gather.scatter_pages_triton,
                              transfer.transfer_pages_triton, packed.transfer_packed_triton,
                              attention.paged_attention_triton),
    Backend.TORCH: KernelSet(page_gather.gather_pages_torch, page_gather.scatter_pages_torch,
                             transfer.transfer_pages_torch, packed.transfer_packed_torch,
                             attention.paged_attention_torch),
    Backend.NATIVE: KernelSet(page_gather.gather_pages_native, page_gather.scatter_pages_native,
                              transfer.transfer_pages_native, packed.transfer_packed_native,
                              attention.paged_attention_torch),
}

ENV = "HICACHE_KERNEL_BACKEND"
_chosen: dict[str, Backend] = {}


def _choose(device_type: str) -> Backend:
    forced = os.environ.get(ENV, "")
    if forced:
        try:
            backend = Backend(forced)
        except ValueError:
            raise ValueError(f"{ENV}={forced!r}: expected one of {[b.value for b in Backend]}") from None
        if backend is Backend.TRITON and not _triton.HAVE_TRITON:
            raise ValueError(f"{ENV}=triton but {_triton.IMPORT_ERROR}")
        if backend is Backend.NATIVE and native.library() is None:
            raise ValueError(f"{ENV}=native but the native library is unavailable: {native.unavailable_reason()}")
        return backend
    if device_type == "cuda" and _triton.HAVE_TRITON:
        return Backend.TRITON
    if device_type == "cpu" and native.library() is not None:
        return Backend.NATIVE
    return Backend.TORCH


def backend(device: torch.device | str = "cpu") -> Backend:
    """The backend for tensors on ``device`` (chosen on first use, then fixed)."""
    kind = torch.device(device).type
    if kind not in _chosen:
        _chosen[kind] = _choose(kind)
    return _chosen[kind]


def set_backend(choice: Backend | str | None, device: torch.device | str = "cpu") -> None:
    """Pin the backend for a device type; ``None`` forgets it so the next call chooses again."""
    kind = torch.device(device).type
    if choice is None:
        _chosen.pop(kind, None)
    else:
        _chosen[kind] = Backend(choice)


def _int(name: str, v, *, optional: bool = False) -> int | None:
    """A size or index argument as a Python int, the same on every backend (a numpy integer
    or a 0-d integer tensor works on torch's path and broke the native library's ctypes
    calls and Triton's launch); anything else is a ValueError naming it."""
    if v is None and optional:
        return None
    if isinstance(v, torch.Tensor) and v.dim() == 0 and not v.is_floating_point() and v.dtype != torch.bool:
        v = v.item()
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return int(v)
    raise ValueError(f"{name}: must be an integer, got {v!r}")


def _kernels(*tensors: torch.Tensor) -> KernelSet:
    cuda = next((t.device for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda), None)
    return KERNELS[backend(cuda or "cpu")]


def gather_pages(pool_layer: torch.Tensor, page_ids: torch.Tensor, out: torch.Tensor | None = None, *,
                 page_size: int) -> torch.Tensor:
    """Copy pages ``page_ids`` of one layer's pool into a contiguous buffer; returns ``out``.

    ``pool_layer``: ``[pages*page_size, *row]`` (e.g. ``pool[0, l]``: ``[slots, H, D]``);
    ``page_ids``: int64 ``[n]`` (repeats allowed); ``out``: ``[n*page_size, *row]``, same dtype
    (allocated when ``None``).
    """
    return _kernels(pool_layer).gather_pages(pool_layer, page_ids, out, page_size=_int("page_size", page_size))


def scatter_pages(src: torch.Tensor, pool_layer: torch.Tensor, page_ids: torch.Tensor, *,
                  page_size: int) -> None:
    """Inverse of :func:`gather_pages`: ``src`` ``[n*page_size, *row]`` -> pages ``page_ids``
    (int64 ``[n]``, duplicate-free) of ``pool_layer``."""
    _kernels(pool_layer).scatter_pages(src, pool_layer, page_ids, page_size=_int("page_size", page_size))


def transfer_pages(src: torch.Tensor, dst: torch.Tensor, src_pages: torch.Tensor, dst_pages: torch.Tensor,
                   *, page_size: int, src_layout: Layout | str = Layout.LAYER_FIRST,
                   dst_layout: Layout | str = Layout.LAYER_FIRST, layer: int | None = None) -> None:
    """Copy page ``src_pages[i]`` of ``src`` to page ``dst_pages[i]`` of ``dst``, K and V (or latent).

    Pools are 5-D/6-D in their layouts (:mod:`hicache.kernels.layout`); the device pool is
    ``layer_first`` ``(C, L, slots, H, D)``. ``layer=None``: all layers in one launch; ``layer=l``:
    that layer only. ``dst_pages`` must be duplicate-free.
    """
    _kernels(src, dst).transfer_pages(src, dst, src_pages, dst_pages, page_size=_int("page_size", page_size),
                                      src_layout=src_layout, dst_layout=dst_layout,
                                      layer=_int("layer", layer, optional=True))


def transfer_packed(device_target: torch.Tensor, device_draft: torch.Tensor, host: torch.Tensor,
                    device_pages: torch.Tensor, host_pages: torch.Tensor, *, direction: Direction | str,
                    page_size: int, host_layout: Layout | str = Layout.LAYER_FIRST,
                    layer: int | None = None) -> None:
    """Move target KV ``(C, Lt, slots, H, D)`` and draft KV ``(C, Ld, slots, H, D)`` to/from one
    host pool of ``Lt + Ld`` layers (draft = tail layers) under one page mapping, in one launch.

    ``direction="to_host"`` copies device page ``device_pages[i]`` to host page ``host_pages[i]``;
    ``"to_device"`` the reverse. The destination list must be duplicate-free. ``layer=l`` moves
    target layer ``l``; with ``l = Lt - 1`` the draft layers ride in the same launch.
    """
    _kernels(device_target, host).transfer_packed(device_target, device_draft, host, device_pages,
                                                  host_pages, direction=direction,
                                                  page_size=_int("page_size", page_size),
                                                  host_layout=host_layout, layer=_int("layer", layer, optional=True))


def transfer_sidecar(spec: SidecarSpec, src: torch.Tensor, dst: torch.Tensor, src_source_pages: torch.Tensor,
                     dst_source_pages: torch.Tensor, *, page_size: int, src_map: torch.Tensor | None = None,
                     dst_map: torch.Tensor | None = None, src_layout: Layout | str = Layout.LAYER_FIRST,
                     dst_layout: Layout | str = Layout.LAYER_FIRST, layer: int | None = None) -> torch.Tensor:
    """Transfer a sidecar pool using page lists derived from its source pool's lists.

    ``src_source_pages``/``dst_source_pages`` are the *source pool's* pages (e.g. the target KV
    transfer's lists, in sequence order); ``src_map``/``dst_map`` map them to the sidecar's own
    pages (``None``: same ids). ``spec.hit_policy`` selects which move. Returns the sidecar's
    destination page list (CPU int64).
    """
    if len(src_source_pages) != len(dst_source_pages):
        # (a trailing-pages policy would take the last pages of each and pair pages from
        # other positions of the sequence)
        raise ValueError(f"dst_source_pages: {len(dst_source_pages)} pages for {len(src_source_pages)} "
                         f"src_source_pages (the two lists of one transfer)")
    s_ids = sidecar_pages(spec, src_source_pages, src_map, name="src_source_pages")
    d_ids = sidecar_pages(spec, dst_source_pages, dst_map, name="dst_source_pages")
    transfer_pages(src, dst, s_ids, d_ids, page_size=page_size, src_layout=src_layout,
                   dst_layout=dst_layout, layer=layer)
    return d_ids


def paged_attention(q: torch.Tensor, k_layer: torch.Tensor, v_layer: torch.Tensor, page_table: torch.Tensor,
                    seq_lens: torch.Tensor, q_lens: torch.Tensor, *, page_size: int,
                    scale: float | None = None) -> torch.Tensor:
    """Causal attention of ``q`` ``[T, Hq, D]`` over paged KV ``[slots, Hkv, D|Dv]``; returns
    ``[T, Hq, Dv]``. See :mod:`hicache.kernels.attention` for the batch description."""
    return _kernels(q).paged_attention(q, k_layer, v_layer, page_table, seq_lens, q_lens,
                                       page_size=_int("page_size", page_size), scale=scale)
