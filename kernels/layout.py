"""KV pool layouts, the page geometry every copy kernel works from, and input checks.

Pools (all contiguous; a *slot* holds one token; page ``p`` is slots ``[p*ps, (p+1)*ps)``):

==========================  ==============================  ==========================
layout                      shape                           used for
==========================  ==============================  ==========================
``LAYER_FIRST``             ``(C, L, slots, H, D)``         the device pool; host pools
``PAGE_FIRST``              ``(C, slots, L, H, D)``         host pools
``PAGE_FIRST_DIRECT``       ``(C, pages, L, ps, H, D)``     host pools (one run per page)
==========================  ==============================  ==========================

``C`` is 2 for MHA (index 0 = K, 1 = V) and 1 for MLA (one latent buffer, ``H = 1``,
``D = kv_lora_rank + rope_dim``). The device pool of layer ``l`` is ``pool[:, l]``; its K
buffer ``pool[0, l]`` is ``[slots, H, D]``, the per-layer shape attention reads.

Whatever the layout, one token's row (``H*D`` elements) is contiguous, so every layout is
described by four element strides: component, layer, page and token. A copy kernel needs
nothing else. Copies move bits, not numbers: buffers are viewed as the widest unsigned
word that divides a row (fp8 travels as bytes, bf16 as 16-bit words or wider), so a copy is
exact for every dtype, NaN payloads included.

Page index lists are 1-D ``torch.int64`` tensors. Source lists may repeat a page; destination
lists may not (two writers of one page would race). Every violation is a ``ValueError``
raised before anything is launched.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import torch


class Layout(enum.StrEnum):
    """Where the (component, layer, page, token) of a pool live; see the module table."""
    LAYER_FIRST = "layer_first"
    PAGE_FIRST = "page_first"
    PAGE_FIRST_DIRECT = "page_first_direct"


@dataclass(frozen=True, slots=True)
class PageGeometry:
    """The addressing of one pool in units of its elements (or words, after :meth:`in_words`).

    Invariant: element ``(c, l, p, t, r)`` lives at
    ``c*stride_c + l*stride_l + p*stride_p + t*stride_t + r`` for ``r < row``; every stride is a
    multiple of ``row``.
    """
    components: int
    layers: int
    pages: int
    page_size: int
    row: int
    stride_c: int
    stride_l: int
    stride_p: int
    stride_t: int

    @property
    def page_contiguous(self) -> bool:
        """One layer of one page is a single run of ``page_size * row`` elements."""
        return self.stride_t == self.row

    @property
    def chunk(self) -> int:
        """Elements in one (component, layer, page) chunk."""
        return self.page_size * self.row

    def in_words(self, elem_bytes: int, word_bytes: int) -> "PageGeometry":
        """The same geometry counted in ``word_bytes``-wide words instead of elements."""
        def w(x: int) -> int:
            return x * elem_bytes // word_bytes
        return PageGeometry(self.components, self.layers, self.pages, self.page_size, w(self.row),
                            w(self.stride_c), w(self.stride_l), w(self.stride_p), w(self.stride_t))

    def same_rows(self, other: "PageGeometry") -> bool:
        """Both pools hold pages of the same shape: components, page size and row length."""
        return (self.components, self.page_size, self.row) == (other.components, other.page_size, other.row)


def _geometry_layer_first(shape: tuple[int, ...], page_size: int) -> PageGeometry:
    c, l, slots, h, d = shape
    row = h * d
    return PageGeometry(c, l, slots // page_size, page_size, row,
                        stride_c=l * slots * row, stride_l=slots * row,
                        stride_p=page_size * row, stride_t=row)


def _geometry_page_first(shape: tuple[int, ...], page_size: int) -> PageGeometry:
    c, slots, l, h, d = shape
    row = h * d
    return PageGeometry(c, l, slots // page_size, page_size, row,
                        stride_c=slots * l * row, stride_l=row,
                        stride_p=page_size * l * row, stride_t=l * row)


def _geometry_page_first_direct(shape: tuple[int, ...], page_size: int) -> PageGeometry:
    c, pages, l, ps, h, d = shape
    row = h * d
    return PageGeometry(c, l, pages, ps, row,
                        stride_c=pages * l * ps * row, stride_l=ps * row,
                        stride_p=l * ps * row, stride_t=row)


#: layout -> (rank of the pool tensor, index of its slot axis or None, geometry builder)
_LAYOUTS = {
    Layout.LAYER_FIRST: (5, 2, _geometry_layer_first),
    Layout.PAGE_FIRST: (5, 1, _geometry_page_first),
    Layout.PAGE_FIRST_DIRECT: (6, None, _geometry_page_first_direct),
}


def describe(pool: torch.Tensor, layout: Layout | str, page_size: int, *, name: str = "pool") -> PageGeometry:
    """Check ``pool`` against ``layout`` and return its :class:`PageGeometry` (in elements)."""
    layout = Layout(layout)
    ndim, slot_axis, build = _LAYOUTS[layout]
    if not isinstance(pool, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(pool).__name__}")
    if pool.dim() != ndim:
        raise ValueError(f"{name}: a {layout.value} pool has {ndim} dimensions, got shape {tuple(pool.shape)}")
    require_contiguous(pool, name)
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    shape = tuple(pool.shape)
    if slot_axis is not None and shape[slot_axis] % page_size:
        raise ValueError(f"{name}: {shape[slot_axis]} slots is not a whole number of pages of {page_size}")
    if layout is Layout.PAGE_FIRST_DIRECT and shape[3] != page_size:
        raise ValueError(f"{name}: page_first_direct pool has page size {shape[3]}, expected {page_size}")
    if shape[0] not in (1, 2):
        raise ValueError(f"{name}: component axis must be 2 (K, V) or 1 (MLA latent), got {shape[0]}")
    return build(shape, page_size)


def require_contiguous(t: torch.Tensor, name: str) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name}: buffer must be contiguous (got strides {t.stride()} for shape {tuple(t.shape)})")


def require_same_dtype(a: torch.Tensor, b: torch.Tensor, names: str) -> None:
    if a.dtype != b.dtype:
        raise ValueError(f"{names}: dtypes differ ({a.dtype} vs {b.dtype}); a page copy never converts")


def page_list(ids: torch.Tensor, name: str, limit: int, *, unique: bool) -> torch.Tensor:
    """Validate a page index list; return it as a CPU int64 tensor.

    Raises ValueError for a non-tensor, a dtype other than int64, a non-1-D list, an index outside
    ``[0, limit)``, or (``unique``) a repeated index. On a GPU this reads the list back once.
    """
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"{name}: page indices must be a torch.int64 tensor, got {type(ids).__name__}")
    if ids.dtype != torch.int64:
        raise ValueError(f"{name}: page indices must be torch.int64, got {ids.dtype}")
    if ids.dim() != 1:
        raise ValueError(f"{name}: page indices must be 1-D, got shape {tuple(ids.shape)}")
    host = ids.detach().cpu().contiguous()     # a strided view would be misread by a kernel
    if not host.numel():
        return host
    from .native import check_pages
    # a destination list: one native pass (range and repeats, a bitmap) where the library
    # loads; torch's min/max is as fast for the range alone
    found = check_pages(host, limit, unique) if unique else None
    if found is not None:
        pos, why = found
        if why == 1:
            raise ValueError(f"{name}: page index {int(host[pos])} out of range [0, {limit})")
        if why == 2:
            raise ValueError(f"{name}: duplicate destination page indices (two writes to one page)")
        return host
    if host.numel():
        lo, hi = int(host.min()), int(host.max())
        if lo < 0 or hi >= limit:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name}: page index {bad} out of range [0, {limit})")
        if unique and _has_duplicates(host, limit):
            raise ValueError(f"{name}: duplicate destination page indices (two writes to one page)")
    return host


def _has_duplicates(ids: torch.Tensor, limit: int) -> bool:
    """Whether a list of indices in ``[0, limit)`` repeats one.

    Counting into ``limit`` bins is linear (tens of microseconds for 16k pages), where
    ``torch.unique`` sorts (~0.7 ms): on a GPU that host-side check, not the copy, was most
    of a scatter's time. Sorting is kept for a short list into a huge pool, where the bins
    would cost more than the sort.
    """
    if limit <= max(1 << 16, 32 * ids.numel()):
        return int(torch.bincount(ids, minlength=limit).max()) > 1
    return torch.unique(ids).numel() != ids.numel()


def require_pairs(src_ids: torch.Tensor, dst_ids: torch.Tensor) -> None:
    if src_ids.numel() != dst_ids.numel():
        raise ValueError(f"page lists differ in length: {src_ids.numel()} source vs {dst_ids.numel()} destination")


#: word width -> the dtype a buffer is viewed as. 16-byte words (complex128, only ever copied,
#: never computed on, so every bit pattern survives) halve the per-element work of torch's
#: indexed copies on the CPU; Triton kernels use at most 8.
_WORDS = {16: torch.complex128, 8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}

#: the widest word each backend uses.
TRITON_MAX_WORD = 8
TORCH_MAX_WORD = 16


def word_bytes(unit_bytes: int, *tensors: torch.Tensor, max_word: int = TRITON_MAX_WORD) -> int:
    """The widest word (up to ``max_word`` bytes) dividing ``unit_bytes`` and every tensor's address."""
    for w in (16, 8, 4, 2, 1):
        if w <= max_word and unit_bytes % w == 0 and all(t.data_ptr() % w == 0 for t in tensors):
            return w
    raise AssertionError("unreachable: 1 divides everything")


def as_words(t: torch.Tensor, width: int) -> torch.Tensor:
    """A flat view of contiguous ``t`` as ``width``-byte words (the bytes are not touched)."""
    flat = t.reshape(-1)
    if flat.dtype != _WORDS[width]:
        flat = flat.view(torch.uint8).view(_WORDS[width])
    return flat


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The two (contiguous) buffers share bytes."""
    if a.device != b.device:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def require_disjoint_copy(src: torch.Tensor, dst: torch.Tensor, src_ids: torch.Tensor, dst_ids: torch.Tensor,
                          same_layout: bool) -> None:
    """A copy never reads a page it writes: concurrent programs would race on it.

    Copies inside one pool (same buffer, same layout) are allowed when the page sets are
    disjoint; any other overlap of source and destination memory is refused.
    """
    if not overlaps(src, dst):
        return
    if not (same_layout and src.data_ptr() == dst.data_ptr() and src.shape == dst.shape):
        raise ValueError("source and destination buffers overlap in memory")
    if torch.isin(src_ids, dst_ids).any():
        raise ValueError("a copy within one pool reads a page it also writes (source and destination pages intersect)")
