"""Host <-> device page transfer: per layer or all layers, any pair of pool layouts.

``transfer_pages(src, dst, src_pages, dst_pages, page_size=, src_layout=, dst_layout=, layer=)``
copies, for every component (K and V, or the MLA latent) and every selected layer, page
``src_pages[i]`` of ``src`` into page ``dst_pages[i]`` of ``dst``. ``layer=None`` moves all
layers in one launch (a whole-request backup or load-back); ``layer=l`` moves one layer (the
per-layer load-back the forward pass waits on). Pools follow :mod:`hicache.kernels.layout`;
the device pool is ``LAYER_FIRST``. Both pools must agree on components, layers, page size,
row length (``H*D``) and dtype; MHA and MLA differ only in those numbers.

One kernel serves this module and :mod:`hicache.kernels.packed`: a launch moves up to two
*segments* (layer ranges of two pool pairs) under one page mapping, which is how target and
draft KV share a launch. Program ``(i, j)`` copies the chunk of page pair ``i`` for the
``j``-th (component, layer) of the launch.

On a GPU the host pool must be pinned: the kernel reads and writes it through unified
virtual addressing, so one launch replaces a copy per page.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _triton, native
from ._triton import jit, tl
from .launch import LaunchConfig, copy_config, tuned
from .layout import (TORCH_MAX_WORD, TRITON_MAX_WORD, Layout, PageGeometry, as_words, describe, page_list,
                     require_disjoint_copy, require_pairs, require_same_dtype, word_bytes)


@jit
def _transfer_pages_kernel(
    src_a, dst_a, src_b, dst_b, src_pages, dst_pages,
    layers_a, layers_b,
    sa_off, sa_c, sa_l, sa_p, da_off, da_c, da_l, da_p,
    sb_off, sb_c, sb_l, sb_p, db_off, db_c, db_l, db_p,
    src_t, dst_t,
    ROW: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
    SRC_CONTIG: tl.constexpr, DST_CONTIG: tl.constexpr, HAS_B: tl.constexpr,
):
    i = tl.program_id(0)
    j = tl.program_id(1)
    layers = layers_a + layers_b
    c = (j // layers).to(tl.int64)
    lr = (j % layers).to(tl.int64)
    sp = tl.load(src_pages + i)
    dp = tl.load(dst_pages + i)
    # Offsets in int64: layer * layer-stride overflows 32 bits on real pools.
    src = src_a + (sa_off + c * sa_c + lr * sa_l + sp * sa_p)
    dst = dst_a + (da_off + c * da_c + lr * da_l + dp * da_p)
    if HAS_B:
        if lr >= layers_a:
            lb = lr - layers_a
            src = src_b + (sb_off + c * sb_c + lb * sb_l + sp * sb_p)
            dst = dst_b + (db_off + c * db_c + lb * db_l + dp * db_p)
    for start in range(0, CHUNK, BLOCK):
        e = start + tl.arange(0, BLOCK)
        mask = e < CHUNK
        if SRC_CONTIG:
            so = e
        else:
            so = (e // ROW) * src_t + e % ROW
        if DST_CONTIG:
            do = e
        else:
            do = (e // ROW) * dst_t + e % ROW
        x = tl.load(src + so, mask=mask)
        tl.store(dst + do, x, mask=mask)


@dataclass(frozen=True, slots=True)
class Segment:
    """A layer range of one (src, dst) pool pair, in words. Invariant: both rows are equal."""
    src: torch.Tensor          # flat word view of the source pool
    dst: torch.Tensor          # flat word view of the destination pool
    src_geo: PageGeometry      # in words
    dst_geo: PageGeometry      # in words
    src_layer0: int
    dst_layer0: int
    layers: int


@dataclass(frozen=True, slots=True)
class TransferPlan:
    """A validated copy: one page mapping, one or two segments (see :func:`run_plan`)."""
    segments: tuple[Segment, ...]
    src_pages: torch.Tensor    # CPU int64, in range, length n
    dst_pages: torch.Tensor    # CPU int64, in range, duplicate-free, length n


def _layer_range(layer: int | None, layers: int) -> tuple[int, int]:
    if layer is None:
        return 0, layers
    if not 0 <= layer < layers:
        raise ValueError(f"layer {layer} out of range [0, {layers})")
    return layer, 1


def plan_segment(src: torch.Tensor, dst: torch.Tensor, *, page_size: int, src_layout: Layout | str,
                 dst_layout: Layout | str, src_layer0: int, dst_layer0: int, layers: int | None,
                 name: str = "", width: int | None = None,
                 max_word: int = TRITON_MAX_WORD) -> tuple[Segment, PageGeometry, PageGeometry]:
    """Check one pool pair and describe it in words. ``layers=None``: all of the source's.

    ``width`` fixes the word size (segments of one launch must share it); by default the
    widest word the row and both addresses allow.
    """
    sg = describe(src, src_layout, page_size, name=f"{name}src")
    dg = describe(dst, dst_layout, page_size, name=f"{name}dst")
    require_same_dtype(src, dst, f"{name}src/dst")
    if src.shape[-2:] != dst.shape[-2:]:
        raise ValueError(f"{name}src/dst rows differ: (H, D) {tuple(src.shape[-2:])} vs {tuple(dst.shape[-2:])}")
    if not sg.same_rows(dg):
        raise ValueError(f"{name}src/dst page shapes differ: components/page_size/row "
                         f"{(sg.components, sg.page_size, sg.row)} vs {(dg.components, dg.page_size, dg.row)}")
    n = sg.layers - src_layer0 if layers is None else layers
    if src_layer0 < 0 or dst_layer0 < 0 or src_layer0 + n > sg.layers or dst_layer0 + n > dg.layers:
        raise ValueError(f"{name}layers [{src_layer0}, {src_layer0 + n}) -> [{dst_layer0}, {dst_layer0 + n}) "
                         f"do not fit pools of {sg.layers} and {dg.layers} layers")
    esize = src.element_size()
    w = width or word_bytes(sg.row * esize, src, dst, max_word=max_word)
    seg = Segment(as_words(src, w), as_words(dst, w), sg.in_words(esize, w), dg.in_words(esize, w),
                  src_layer0, dst_layer0, n)
    return seg, sg, dg


def plan_transfer(src: torch.Tensor, dst: torch.Tensor, src_pages: torch.Tensor, dst_pages: torch.Tensor, *,
                  page_size: int, src_layout: Layout | str = Layout.LAYER_FIRST,
                  dst_layout: Layout | str = Layout.LAYER_FIRST, layer: int | None = None,
                  max_word: int = TRITON_MAX_WORD) -> TransferPlan:
    """Validate a transfer (ValueError on any misuse) and return what a backend executes."""
    sg = describe(src, src_layout, page_size, name="src")
    if layer is not None:
        layer0, _ = _layer_range(layer, sg.layers)
        seg, sg, dg = plan_segment(src, dst, page_size=page_size, src_layout=src_layout, dst_layout=dst_layout,
                                   src_layer0=layer0, dst_layer0=layer0, layers=1, max_word=max_word)
    else:
        seg, sg, dg = plan_segment(src, dst, page_size=page_size, src_layout=src_layout, dst_layout=dst_layout,
                                   src_layer0=0, dst_layer0=0, layers=None, max_word=max_word)
        if sg.layers != dg.layers:
            raise ValueError(f"src/dst layer counts differ: {sg.layers} vs {dg.layers}")
    s_ids = page_list(src_pages, "src_pages", sg.pages, unique=False)
    d_ids = page_list(dst_pages, "dst_pages", dg.pages, unique=True)
    require_pairs(s_ids, d_ids)
    require_disjoint_copy(src, dst, s_ids, d_ids, Layout(src_layout) is Layout(dst_layout))
    return TransferPlan((seg,), s_ids, d_ids)


# ---------------------------------------------------------------------------- Triton launcher


def _kernel_device(plan: TransferPlan) -> torch.device:
    """The device the kernel runs on: the GPU holding a pool, or the CPU when interpreting.

    A CPU pool next to a GPU pool must be pinned (the kernel reaches it by UVA).
    """
    tensors = [t for s in plan.segments for t in (s.src, s.dst)]
    cuda = [t.device for t in tensors if t.is_cuda]
    if not cuda:
        return torch.device("cpu")
    if any(t.device != cuda[0] for t in tensors if t.is_cuda):
        raise ValueError("pools on different GPUs; copy through one device")
    for t in tensors:
        if not t.is_cuda and not t.is_pinned():
            raise ValueError("a host pool used by a GPU kernel must be pinned (torch pin_memory)")
    return cuda[0]


def _strides(g: PageGeometry, layer0: int) -> tuple[int, int, int, int]:
    return layer0 * g.stride_l, g.stride_c, g.stride_l, g.stride_p


def run_plan_triton(plan: TransferPlan) -> None:
    """Launch :func:`_transfer_pages_kernel` for a validated plan (one launch)."""
    n = plan.src_pages.numel()
    if n == 0:
        return
    a = plan.segments[0]
    b = plan.segments[1] if len(plan.segments) > 1 else a
    has_b = len(plan.segments) > 1
    # One launch compiles one (ROW, CHUNK, token strides, contiguity) for both segments.
    shared = lambda s: (s.src_geo.row, s.src_geo.chunk, s.src_geo.components, s.src_geo.stride_t,  # noqa: E731
                        s.dst_geo.stride_t, s.src.dtype)
    if shared(a) != shared(b):
        raise AssertionError(f"segments of one launch disagree: {shared(a)} vs {shared(b)} (plan_packed bug)")
    device = _kernel_device(plan)
    kernel = _triton.runnable(_transfer_pages_kernel, device.type)
    src_ids = plan.src_pages.to(device, non_blocking=True)
    dst_ids = plan.dst_pages.to(device, non_blocking=True)
    layers_b = b.layers if has_b else 0
    grid = (n, a.src_geo.components * (a.layers + layers_b))

    def launch(cfg: LaunchConfig) -> None:
        kernel[grid](
            a.src, a.dst, b.src, b.dst, src_ids, dst_ids,
            a.layers, layers_b,
            *_strides(a.src_geo, a.src_layer0), *_strides(a.dst_geo, a.dst_layer0),
            *_strides(b.src_geo, b.src_layer0), *_strides(b.dst_geo, b.dst_layer0),
            a.src_geo.stride_t, a.dst_geo.stride_t,
            ROW=a.src_geo.row, CHUNK=a.src_geo.chunk, BLOCK=cfg.block,
            SRC_CONTIG=a.src_geo.page_contiguous, DST_CONTIG=a.dst_geo.page_contiguous, HAS_B=has_b,
            num_warps=cfg.num_warps,
        )

    default = copy_config(a.src_geo.chunk, a.src.element_size())
    key = ("transfer", a.src_geo.chunk, a.src_geo.row, a.src.element_size(),
           a.src_geo.page_contiguous, a.dst_geo.page_contiguous)
    launch(tuned(key, default, launch, device.type))


# ------------------------------------------------------------------- torch reference / fallback


#: bytes staged per step of the CPU fallback: small enough to stay in a core's L2 cache, so
#: the scatter reads the staged chunks back from cache instead of memory.
STAGE_BYTES = 1 << 20


def _unit_offsets(g: PageGeometry, layer0: int, layers: int, pages: torch.Tensor, unit: int) -> torch.Tensor:
    """Indices, in ``unit``-word rows of the flat pool, of every unit of the listed pages.

    Order: component, layer, page-list position, then unit within the chunk, the same on
    both sides of a copy, so position ``k`` of the source list pairs with position ``k`` of
    the destination list. Invariant: every stride is a multiple of ``unit``.
    """
    c = torch.arange(g.components, dtype=torch.int64) * g.stride_c
    lay = (torch.arange(layers, dtype=torch.int64) + layer0) * g.stride_l
    p = pages * g.stride_p
    base = c[:, None, None] + lay[None, :, None] + p[None, None, :]
    if unit == g.chunk:                       # one unit per page chunk
        return (base // unit).reshape(-1)
    t = torch.arange(g.page_size, dtype=torch.int64) * g.stride_t      # one unit per token row
    return ((base[..., None] + t) // unit).reshape(-1)


def run_plan_torch(plan: TransferPlan) -> None:
    """The reference semantics, and the CPU fallback.

    Each pool is viewed as a matrix of copy units (whole page chunks when both sides store a
    page's rows together, else single token rows); the copy is then an index_select of source
    units followed by an index_copy_ into the destination units, staged through a small buffer.
    """
    if plan.src_pages.numel() == 0:
        return
    for s in plan.segments:
        contiguous = s.src_geo.page_contiguous and s.dst_geo.page_contiguous
        unit = s.src_geo.chunk if contiguous else s.src_geo.row
        src_idx = _unit_offsets(s.src_geo, s.src_layer0, s.layers, plan.src_pages, unit)
        dst_idx = _unit_offsets(s.dst_geo, s.dst_layer0, s.layers, plan.dst_pages, unit)
        src_m, dst_m = s.src.view(-1, unit), s.dst.view(-1, unit)
        if src_m.device != dst_m.device or src_m.is_cuda:
            staged = src_m.index_select(0, src_idx.to(src_m.device)).to(dst_m.device)
            dst_m.index_copy_(0, dst_idx.to(dst_m.device), staged)
            continue
        step = max(1, STAGE_BYTES // (unit * s.src.element_size()))
        stage = torch.empty(min(step, src_idx.numel()), unit, dtype=src_m.dtype)
        for lo in range(0, src_idx.numel(), step):
            part = stage[:min(step, src_idx.numel() - lo)]
            torch.index_select(src_m, 0, src_idx[lo:lo + step], out=part)
            dst_m.index_copy_(0, dst_idx[lo:lo + step], part)


# ------------------------------------------------------------------------ native CPU path


def _in_bytes(g: PageGeometry, word: int) -> PageGeometry:
    return g.in_words(word, 1)


def _keeps_page_together(g: PageGeometry) -> bool:
    """A page's layers share one run of memory (``page_first``, ``page_first_direct``)."""
    return g.layers > 1 and g.stride_l < g.stride_p


def segment_nest(s: Segment) -> tuple[PageGeometry, PageGeometry, native.LoopNest]:
    """The segment's geometries in bytes and its loop nest (see :func:`native.loop_nest`)."""
    sg, dg = _in_bytes(s.src_geo, s.src.element_size()), _in_bytes(s.dst_geo, s.dst.element_size())
    dims = [native.Dim(sg.components, sg.stride_c, dg.stride_c), native.Dim(s.layers, sg.stride_l, dg.stride_l),
            native.Dim(sg.page_size, sg.stride_t, dg.stride_t)]
    lead_src = _keeps_page_together(sg) and not _keeps_page_together(dg)
    return sg, dg, native.loop_nest(dims, sg.row, lead_src=lead_src, src_page_stride=sg.stride_p,
                                    dst_page_stride=dg.stride_p)


def run_plan_native(plan: TransferPlan) -> None:
    """One pass: the C loop copies each chunk (or token row) straight from source to destination.

    Plans touching a GPU tensor go to :func:`run_plan_torch` (the C loop reads host memory only).
    """
    if plan.src_pages.numel() == 0:
        return
    if any(t.device.type != "cpu" for s in plan.segments for t in (s.src, s.dst)):
        run_plan_torch(plan)
        return
    n = plan.src_pages.numel()
    # Destination pages are distinct, so the pairs may go in any order: in the lead side's
    # page order each of its regions is walked front to back. (lead_src -> sorted lists)
    sorted_pairs: dict[bool, tuple[torch.Tensor, torch.Tensor]] = {}
    for s in plan.segments:
        sg, dg, nest = segment_nest(s)
        if nest.lead_src not in sorted_pairs:
            _, order = torch.sort(plan.src_pages if nest.lead_src else plan.dst_pages)
            sorted_pairs[nest.lead_src] = plan.src_pages[order], plan.dst_pages[order]
        src_pages, dst_pages = sorted_pairs[nest.lead_src]
        native.copy_pages(s.src.data_ptr() + s.src_layer0 * sg.stride_l, s.dst.data_ptr() + s.dst_layer0 * dg.stride_l,
                          n, src_pages, dst_pages, sg.stride_p, dg.stride_p, nest,
                          page_bytes=sg.components * s.layers * sg.chunk)


def transfer_pages_triton(src: torch.Tensor, dst: torch.Tensor, src_pages: torch.Tensor,
                          dst_pages: torch.Tensor, *, page_size: int,
                          src_layout: Layout | str = Layout.LAYER_FIRST,
                          dst_layout: Layout | str = Layout.LAYER_FIRST, layer: int | None = None) -> None:
    """Triton implementation of :func:`hicache.kernels.transfer_pages`."""
    run_plan_triton(plan_transfer(src, dst, src_pages, dst_pages, page_size=page_size,
                                  src_layout=src_layout, dst_layout=dst_layout, layer=layer))


def transfer_pages_torch(src: torch.Tensor, dst: torch.Tensor, src_pages: torch.Tensor,
                         dst_pages: torch.Tensor, *, page_size: int,
                         src_layout: Layout | str = Layout.LAYER_FIRST,
                         dst_layout: Layout | str = Layout.LAYER_FIRST, layer: int | None = None) -> None:
    """Torch reference (and CPU fallback) of :func:`hicache.kernels.transfer_pages`."""
    run_plan_torch(plan_transfer(src, dst, src_pages, dst_pages, page_size=page_size,
                                 src_layout=src_layout, dst_layout=dst_layout, layer=layer,
                                 max_word=TORCH_MAX_WORD))


def transfer_pages_native(src: torch.Tensor, dst: torch.Tensor, src_pages: torch.Tensor,
                          dst_pages: torch.Tensor, *, page_size: int,
                          src_layout: Layout | str = Layout.LAYER_FIRST,
                          dst_layout: Layout | str = Layout.LAYER_FIRST, layer: int | None = None) -> None:
    """Native one-pass CPU implementation of :func:`hicache.kernels.transfer_pages`."""
    run_plan_native(plan_transfer(src, dst, src_pages, dst_pages, page_size=page_size,
                                  src_layout=src_layout, dst_layout=dst_layout, layer=layer,
                                  max_word=TORCH_MAX_WORD))
