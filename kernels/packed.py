"""Dependent-state transfers of speculative decoding: packed (one launch) and sidecar.

**Packed.** Draft KV rows share the target's slot mapping and row shape, so the host pool
holds them as tail layers: host layers ``[0, Lt)`` are the target's, ``[Lt, Lt+Ld)`` the
draft's. ``transfer_packed(device_target, device_draft, host, device_pages, host_pages,
direction=, page_size=, host_layout=, layer=)`` moves both with one launch of the transfer kernel
(two segments, one page mapping), so the launch's completion covers the draft copy too. Per
layer (``layer=l``), the draft layers ride with the last target layer, whose completion event
is the one a reader of draft KV waits on. Packing
requires: same dtype, components, page size, row (``H*D``) and slot count for target and draft;
otherwise use a sidecar.

**Sidecar.** A dependent pool (draft KV with another shape, an indexer buffer, recurrent or
SWA state) keeps its own host pool; its page indices are *derived* from the indices of the pool
it declares as its source: ``index_map[source_page]`` gives its own page (``-1``: none), and its
hit policy selects which of them move (all pages, or only the trailing ones, for state that is
only valid at the end of a prefix). :func:`sidecar_pages` derives; the dispatch layer's
``transfer_sidecar`` derives both sides and runs an ordinary transfer.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from .layout import TORCH_MAX_WORD, TRITON_MAX_WORD, Layout, describe, overlaps, page_list, require_pairs, require_same_dtype, word_bytes
from .transfer import TransferPlan, plan_segment, run_plan_native, run_plan_torch, run_plan_triton


class Direction(enum.StrEnum):
    TO_HOST = "to_host"        # backup: device -> host
    TO_DEVICE = "to_device"    # load-back: host -> device


def plan_packed(device_target: torch.Tensor, device_draft: torch.Tensor, host: torch.Tensor,
                device_pages: torch.Tensor, host_pages: torch.Tensor, *, direction: Direction | str,
                page_size: int, host_layout: Layout | str = Layout.LAYER_FIRST, layer: int | None = None,
                max_word: int = TRITON_MAX_WORD) -> TransferPlan:
    """Validate a packed transfer; the plan's segments are (target layers, draft layers).

    ``layer=l`` moves target layer ``l`` only, and with the last target layer also every draft
    layer, in the same launch: the last layer's completion then covers the draft copy.
    """
    direction = Direction(direction)
    tg = describe(device_target, Layout.LAYER_FIRST, page_size, name="device_target")
    dg = describe(device_draft, Layout.LAYER_FIRST, page_size, name="device_draft")
    hg = describe(host, host_layout, page_size, name="host")
    require_same_dtype(device_target, device_draft, "device_target/device_draft")
    if (tg.components, tg.row, tg.pages) != (dg.components, dg.row, dg.pages):
        raise ValueError("packed layout needs draft rows shaped like the target's and one slot mapping: "
                         f"(components, row, pages) {(tg.components, tg.row, tg.pages)} vs "
                         f"{(dg.components, dg.row, dg.pages)}; use a sidecar pool")
    if hg.layers != tg.layers + dg.layers:
        raise ValueError(f"host pool has {hg.layers} layers; packed needs target {tg.layers} + draft {dg.layers}")
    width = word_bytes(tg.row * host.element_size(), device_target, device_draft, host, max_word=max_word)
    if layer is not None and not 0 <= layer < tg.layers:
        raise ValueError(f"layer {layer} out of range [0, {tg.layers})")
    to_host = direction is Direction.TO_HOST
    # (device pool, first device layer, first host layer, layer count, label)
    parts = [(device_target, 0, 0, tg.layers, "target ")] if layer is None else \
        [(device_target, layer, layer, 1, "target ")]
    if layer is None or layer == tg.layers - 1:
        parts.append((device_draft, 0, tg.layers, dg.layers, "draft "))
    segments = []
    for dev, dev_layer0, host_layer0, count, label in parts:
        src, dst = (dev, host) if to_host else (host, dev)
        seg, _, _ = plan_segment(
            src, dst, page_size=page_size,
            src_layout=Layout.LAYER_FIRST if to_host else host_layout,
            dst_layout=host_layout if to_host else Layout.LAYER_FIRST,
            src_layer0=dev_layer0 if to_host else host_layer0, dst_layer0=host_layer0 if to_host else dev_layer0,
            layers=count, name=label, width=width)
        segments.append(seg)
    src_pages, dst_pages = (device_pages, host_pages) if to_host else (host_pages, device_pages)
    src_limit, dst_limit = (tg.pages, hg.pages) if to_host else (hg.pages, tg.pages)
    s_ids = page_list(src_pages, "src_pages", src_limit, unique=False)
    d_ids = page_list(dst_pages, "dst_pages", dst_limit, unique=True)
    require_pairs(s_ids, d_ids)
    for dev in (device_target, device_draft):
        if overlaps(dev, host):
            raise ValueError("device and host pools overlap in memory")
    if overlaps(device_target, device_draft):
        raise ValueError("target and draft device pools overlap in memory")
    return TransferPlan(tuple(segments), s_ids, d_ids)


def transfer_packed_triton(device_target, device_draft, host, device_pages, host_pages, *, direction,
                           page_size, host_layout=Layout.LAYER_FIRST, layer=None) -> None:
    """Triton implementation of :func:`hicache.kernels.transfer_packed` (one launch)."""
    run_plan_triton(plan_packed(device_target, device_draft, host, device_pages, host_pages,
                                direction=direction, page_size=page_size, host_layout=host_layout, layer=layer))


def transfer_packed_torch(device_target, device_draft, host, device_pages, host_pages, *, direction,
                          page_size, host_layout=Layout.LAYER_FIRST, layer=None) -> None:
    """Torch reference (and CPU fallback) of :func:`hicache.kernels.transfer_packed`."""
    run_plan_torch(plan_packed(device_target, device_draft, host, device_pages, host_pages,
                               direction=direction, page_size=page_size, host_layout=host_layout, layer=layer,
                               max_word=TORCH_MAX_WORD))


def transfer_packed_native(device_target, device_draft, host, device_pages, host_pages, *, direction,
                           page_size, host_layout=Layout.LAYER_FIRST, layer=None) -> None:
    """Native one-pass CPU implementation of :func:`hicache.kernels.transfer_packed` (one C call
    per segment: the CPU copy is synchronous, so the call's return covers both)."""
    run_plan_native(plan_packed(device_target, device_draft, host, device_pages, host_pages,
                                direction=direction, page_size=page_size, host_layout=host_layout, layer=layer,
                                max_word=TORCH_MAX_WORD))


# ------------------------------------------------------------------------------------ sidecar


class IndexSource(enum.StrEnum):
    """The pool whose page indices a sidecar pool's indices are derived from."""
    TARGET_KV = "target_kv"
    SWA = "swa"
    STATE = "state"


class HitPolicy(enum.StrEnum):
    ALL_PAGES = "all_pages"            # every hit page has a sidecar page (draft KV, indexer)
    TRAILING_PAGES = "trailing_pages"  # only the last pages matter (recurrent state, SWA window)


@dataclass(frozen=True, slots=True, kw_only=True)
class SidecarSpec:
    """A dependent pool's declaration. Invariant: ``trailing >= 1``."""
    name: str
    source: IndexSource = IndexSource.TARGET_KV
    hit_policy: HitPolicy = HitPolicy.ALL_PAGES
    trailing: int = 1   # pages kept under TRAILING_PAGES

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", IndexSource(self.source))
        object.__setattr__(self, "hit_policy", HitPolicy(self.hit_policy))
        if self.trailing < 1:
            raise ValueError(f"SidecarSpec.trailing must be >= 1, got {self.trailing}")


def _select_all(pages: torch.Tensor, spec: SidecarSpec) -> torch.Tensor:
    return pages


def _select_trailing(pages: torch.Tensor, spec: SidecarSpec) -> torch.Tensor:
    return pages[max(0, pages.numel() - spec.trailing):]


_SELECT = {HitPolicy.ALL_PAGES: _select_all, HitPolicy.TRAILING_PAGES: _select_trailing}


def sidecar_pages(spec: SidecarSpec, source_pages: torch.Tensor, index_map: torch.Tensor | None,
                  *, name: str = "source_pages") -> torch.Tensor:
    """The sidecar's page list for ``source_pages`` (in sequence order), as CPU int64.

    ``index_map=None`` means the sidecar uses the source's page ids. ValueError when a
    selected source page has no sidecar page (``-1``) or lies outside the map.
    """
    if index_map is None:
        src = page_list(source_pages, name, 1 << 62, unique=False)
        return _SELECT[spec.hit_policy](src, spec)
    if not isinstance(index_map, torch.Tensor) or index_map.dtype != torch.int64 or index_map.dim() != 1:
        raise ValueError(f"{spec.name}: index_map must be a 1-D torch.int64 tensor")
    src = page_list(source_pages, name, index_map.numel(), unique=False)
    derived = index_map.detach().cpu()[_SELECT[spec.hit_policy](src, spec)]
    if derived.numel() and int(derived.min()) < 0:
        raise ValueError(f"{spec.name}: a selected {spec.source.value} page has no {spec.name} page (map -1)")
    return derived
