"""Helpers shared by the kernel tests: random bit patterns, bit-exact comparison, and a
page-by-page copy written with each layout's own tensor indexing (independent of the
kernels' geometry code)."""
import torch

from hicache.kernels.layout import Layout

#: every dtype a page copy must move bit-exactly (fp8 travels as bytes).
COPY_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn]


def random_bits(shape, dtype, gen: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape``/``dtype`` holding random bit patterns (NaNs included: copies move bits)."""
    n = 1
    for s in shape:
        n *= s
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen).view(dtype).reshape(shape)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def random_pages(n: int, limit: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` distinct page ids in ``[0, limit)``, in random (unsorted) order, int64."""
    return torch.randperm(limit, generator=gen)[:n].to(torch.int64)



def host_shape(layout: Layout, c, layers, pages, ps, h, d):
    return {
        Layout.LAYER_FIRST: (c, layers, pages * ps, h, d),
        Layout.PAGE_FIRST: (c, pages * ps, layers, h, d),
        Layout.PAGE_FIRST_DIRECT: (c, pages, layers, ps, h, d),
    }[layout]


def page_view(pool: torch.Tensor, layout: Layout, c: int, l: int, p: int, ps: int) -> torch.Tensor:
    """Page ``p`` of layer ``l``, component ``c``: a ``[ps, H, D]`` view into ``pool``."""
    if layout is Layout.LAYER_FIRST:
        return pool[c, l, p * ps:(p + 1) * ps]
    if layout is Layout.PAGE_FIRST:
        return pool[c, p * ps:(p + 1) * ps, l]
    return pool[c, p, l]


def naive_transfer(src, src_layout, dst, dst_layout, src_pages, dst_pages, ps, layers):
    out = dst.clone()
    for c in range(src.shape[0]):
        for l in layers:
            for s, d in zip(src_pages.tolist(), dst_pages.tolist()):
                page_view(out, dst_layout, c, l, d, ps).copy_(page_view(src, src_layout, c, l, s, ps))
    return out
