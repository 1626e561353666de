"""Page gather and scatter for one layer: the CP gather before attention, and its inverse.

``gather_pages(pool_layer, page_ids, out, page_size=)``: ``pool_layer`` is one layer's buffer,
``[slots, *row_shape]`` with ``slots = pages * page_size`` (``[slots, H, D]`` for K or V,
``[slots, 1, D_latent]`` for MLA, any row shape for sidecar pools). ``out`` is
``[n * page_size, *row_shape]`` (allocated when ``None``): out rows ``[i*ps, (i+1)*ps)`` receive
page ``page_ids[i]``.
``scatter_pages(src, pool_layer, page_ids, page_size=)`` is the inverse; its ``page_ids`` must
be duplicate-free. The scratch buffer may be a slice of a larger one (``scratch[:n*ps]``) as
long as it is contiguous.

Program ``i`` of ``_page_rows_kernel`` moves one page: ``page_size * row`` words, one run on
both sides, so the whole launch is a strided memcpy with one indirection per page.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import _triton, native
from ._triton import jit, tl
from .launch import LaunchConfig, copy_config, tuned
from .layout import TORCH_MAX_WORD, TRITON_MAX_WORD, as_words, overlaps, page_list, require_contiguous, require_same_dtype, word_bytes


@jit
def _page_rows_kernel(src, dst, ids, CHUNK: tl.constexpr, BLOCK: tl.constexpr, GATHER: tl.constexpr):
    i = tl.program_id(0)
    page = tl.load(ids + i)
    if GATHER:   # pool page `page` -> scratch page i
        src_base = src + page * CHUNK
        dst_base = dst + i.to(tl.int64) * CHUNK
    else:        # scratch page i -> pool page `page`
        src_base = src + i.to(tl.int64) * CHUNK
        dst_base = dst + page * CHUNK
    for start in range(0, CHUNK, BLOCK):
        e = start + tl.arange(0, BLOCK)
        mask = e < CHUNK
        tl.store(dst_base + e, tl.load(src_base + e, mask=mask), mask=mask)


@dataclass(frozen=True, slots=True)
class PagePlan:
    """A validated gather or scatter in words. Invariant: ``ids`` in range; unique if scattering."""
    pool: torch.Tensor      # flat words
    buf: torch.Tensor       # flat words, n pages
    ids: torch.Tensor       # CPU int64
    chunk: int              # words per page


def _plan(pool_layer: torch.Tensor, buf: torch.Tensor, page_ids: torch.Tensor, page_size: int,
          *, scatter: bool, max_word: int = TRITON_MAX_WORD) -> PagePlan:
    names = ("src", "pool_layer") if scatter else ("pool_layer", "out")
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if pool_layer.dim() < 1 or buf.dim() < 1:
        raise ValueError("pool_layer and the scratch buffer need a slot axis")
    require_contiguous(pool_layer, "pool_layer")
    require_contiguous(buf, names[0] if scatter else names[1])
    require_same_dtype(pool_layer, buf, "/".join(names))
    if tuple(pool_layer.shape[1:]) != tuple(buf.shape[1:]):
        raise ValueError(f"row shapes differ: pool_layer {tuple(pool_layer.shape[1:])} vs "
                         f"buffer {tuple(buf.shape[1:])}")
    slots = pool_layer.shape[0]
    if slots % page_size:
        raise ValueError(f"pool_layer: {slots} slots is not a whole number of pages of {page_size}")
    ids = page_list(page_ids, "page_ids", slots // page_size, unique=scatter)
    if buf.shape[0] != ids.numel() * page_size:
        raise ValueError(f"buffer has {buf.shape[0]} rows, expected {ids.numel()} pages x {page_size} "
                         f"= {ids.numel() * page_size}")
    if pool_layer.device != buf.device:
        raise ValueError(f"pool_layer on {pool_layer.device}, buffer on {buf.device}: gather stays on one device")
    if overlaps(pool_layer, buf):
        raise ValueError("pool_layer and the scratch buffer overlap in memory")
    esize = pool_layer.element_size()
    row = math.prod(pool_layer.shape[1:])
    chunk_bytes = page_size * row * esize
    w = word_bytes(max(chunk_bytes, 1), pool_layer, buf, max_word=max_word)
    return PagePlan(as_words(pool_layer, w), as_words(buf, w), ids, chunk_bytes // w)


def _launch(plan: PagePlan, *, gather: bool) -> None:
    n = plan.ids.numel()
    if n == 0 or plan.chunk == 0:
        return
    kernel = _triton.runnable(_page_rows_kernel, plan.pool.device.type)
    ids = plan.ids.to(plan.pool.device, non_blocking=True)
    src, dst = (plan.pool, plan.buf) if gather else (plan.buf, plan.pool)

    def launch(cfg: LaunchConfig) -> None:
        kernel[(n,)](src, dst, ids, CHUNK=plan.chunk, BLOCK=cfg.block, GATHER=gather, num_warps=cfg.num_warps)

    default = copy_config(plan.chunk, plan.pool.element_size())
    launch(tuned(("page_rows", plan.chunk, plan.pool.element_size(), gather), default, launch,
                 plan.pool.device.type))


def _out(pool_layer: torch.Tensor, page_ids: torch.Tensor, out: torch.Tensor | None, page_size: int) -> torch.Tensor:
    """``out``, or a new scratch buffer of ``len(page_ids)`` pages shaped like ``pool_layer``'s rows."""
    if out is not None:
        return out
    n = page_ids.numel() if isinstance(page_ids, torch.Tensor) else 0
    return torch.empty(n * page_size, *pool_layer.shape[1:], dtype=pool_layer.dtype, device=pool_layer.device)


def gather_pages_triton(pool_layer: torch.Tensor, page_ids: torch.Tensor, out: torch.Tensor | None = None, *,
                        page_size: int) -> torch.Tensor:
    """Triton implementation of :func:`hicache.kernels.gather_pages`; returns ``out``."""
    out = _out(pool_layer, page_ids, out, page_size)
    _launch(_plan(pool_layer, out, page_ids, page_size, scatter=False), gather=True)
    return out


def scatter_pages_triton(src: torch.Tensor, pool_layer: torch.Tensor, page_ids: torch.Tensor, *,
                         page_size: int) -> None:
    """Triton implementation of :func:`hicache.kernels.scatter_pages`."""
    _launch(_plan(pool_layer, src, page_ids, page_size, scatter=True), gather=False)


def _pages_view(flat: torch.Tensor, chunk: int) -> torch.Tensor:
    return flat.view(-1, chunk)


def _run_torch(plan: PagePlan, *, gather: bool) -> None:
    if not (plan.ids.numel() and plan.chunk):
        return
    pool, buf = _pages_view(plan.pool, plan.chunk), _pages_view(plan.buf, plan.chunk)
    ids = plan.ids.to(plan.pool.device)
    if gather:
        torch.index_select(pool, 0, ids, out=buf)
    else:
        pool.index_copy_(0, ids, buf)


def gather_pages_torch(pool_layer: torch.Tensor, page_ids: torch.Tensor, out: torch.Tensor | None = None, *,
                       page_size: int) -> torch.Tensor:
    """Torch reference (and CPU fallback) of :func:`hicache.kernels.gather_pages`; returns ``out``."""
    out = _out(pool_layer, page_ids, out, page_size)
    _run_torch(_plan(pool_layer, out, page_ids, page_size, scatter=False, max_word=TORCH_MAX_WORD), gather=True)
    return out


def scatter_pages_torch(src: torch.Tensor, pool_layer: torch.Tensor, page_ids: torch.Tensor, *,
                        page_size: int) -> None:
    """Torch reference (and CPU fallback) of :func:`hicache.kernels.scatter_pages`."""
    _run_torch(_plan(pool_layer, src, page_ids, page_size, scatter=True, max_word=TORCH_MAX_WORD), gather=False)


def _run_native(plan: PagePlan, *, gather: bool) -> None:
    """One memcpy per page; the scratch side is addressed by list position (a NULL list)."""
    if not (plan.ids.numel() and plan.chunk):
        return
    if plan.pool.device.type != "cpu":     # the C loop reads host memory only
        _run_torch(plan, gather=gather)
        return
    page = plan.chunk * plan.pool.element_size()
    nest = native.loop_nest([], page, lead_src=False, src_page_stride=page, dst_page_stride=page)
    pool, buf, n = plan.pool.data_ptr(), plan.buf.data_ptr(), plan.ids.numel()
    if gather:
        native.copy_pages(pool, buf, n, plan.ids, None, page, page, nest, page_bytes=page)
    else:
        native.copy_pages(buf, pool, n, None, plan.ids, page, page, nest, page_bytes=page)


def gather_pages_native(pool_layer: torch.Tensor, page_ids: torch.Tensor, out: torch.Tensor | None = None, *,
                        page_size: int) -> torch.Tensor:
    """Native one-pass CPU implementation of :func:`hicache.kernels.gather_pages`; returns ``out``."""
    out = _out(pool_layer, page_ids, out, page_size)
    _run_native(_plan(pool_layer, out, page_ids, page_size, scatter=False, max_word=TORCH_MAX_WORD), gather=True)
    return out


def scatter_pages_native(src: torch.Tensor, pool_layer: torch.Tensor, page_ids: torch.Tensor, *,
                         page_size: int) -> None:
    """Native one-pass CPU implementation of :func:`hicache.kernels.scatter_pages`."""
    _run_native(_plan(pool_layer, src, page_ids, page_size, scatter=True, max_word=TORCH_MAX_WORD), gather=False)
