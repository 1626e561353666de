"""Host <-> device transfer: every layout, per layer and all layers, MHA and MLA, every dtype.

The expected result is computed independently of the kernels' geometry code: a page-by-page,
layer-by-layer copy written with each layout's own tensor indexing.
"""
import pytest
import torch

from hicache.kernels import transfer
from hicache.kernels.layout import Layout
from kernel_testlib import COPY_DTYPES, host_shape, naive_transfer, random_bits, random_pages, same_bits

RUN = {"triton": transfer.transfer_pages_triton, "torch": transfer.transfer_pages_torch,
       "native": transfer.transfer_pages_native}


# (C, L, H, D, page_size, device pages, host pages, pages moved): MHA with odd heads/dims,
# MLA (C=1, H=1), one page, page sizes 1/16/64.
GEOMETRIES = [
    pytest.param((2, 3, 3, 5, 16, 6, 7, 3), id="mha-ps16"),
    pytest.param((1, 2, 1, 9, 1, 9, 11, 5), id="mla-ps1"),
    pytest.param((2, 2, 1, 6, 64, 2, 3, 1), id="mha-ps64-1page"),
]


@pytest.mark.parametrize("host_layout", list(Layout), ids=str)
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("layer", [None, 1], ids=["all-layers", "layer1"])
def test_backup_and_load_back_match_a_page_by_page_copy(copy_impl, gen, host_layout, geometry, layer):
    c, nl, h, d, ps, dev_pages, host_pages, n = geometry
    dtype = torch.bfloat16
    device = random_bits((c, nl, dev_pages * ps, h, d), dtype, gen)
    host = random_bits(host_shape(host_layout, c, nl, host_pages, ps, h, d), dtype, gen)
    dev_ids, host_ids = random_pages(n, dev_pages, gen), random_pages(n, host_pages, gen)
    layers = range(nl) if layer is None else [layer]

    expected_host = naive_transfer(device, Layout.LAYER_FIRST, host, host_layout, dev_ids, host_ids, ps, layers)
    RUN[copy_impl](device, host, dev_ids, host_ids, page_size=ps, dst_layout=host_layout, layer=layer)
    assert same_bits(host, expected_host)

    # Load back into other device pages (a restore may change the address).
    load_ids = random_pages(n, dev_pages, gen)
    expected_dev = naive_transfer(host, host_layout, device, Layout.LAYER_FIRST, host_ids, load_ids, ps, layers)
    RUN[copy_impl](host, device, host_ids, load_ids, page_size=ps, src_layout=host_layout, layer=layer)
    assert same_bits(device, expected_dev)


@pytest.mark.parametrize("dtype", COPY_DTYPES, ids=str)
@pytest.mark.parametrize("host_layout", [Layout.PAGE_FIRST, Layout.PAGE_FIRST_DIRECT], ids=str)
def test_every_dtype_round_trips_bit_exactly(copy_impl, gen, dtype, host_layout):
    c, nl, h, d, ps, pages = 2, 2, 3, 5, 16, 4
    device = random_bits((c, nl, pages * ps, h, d), dtype, gen)
    host = random_bits(host_shape(host_layout, c, nl, pages, ps, h, d), dtype, gen)
    ids = random_pages(pages, pages, gen)
    RUN[copy_impl](device, host, ids, ids.flip(0).contiguous(), page_size=ps, dst_layout=host_layout)
    restored = torch.zeros_like(device)
    RUN[copy_impl](host, restored, ids.flip(0).contiguous(), ids, page_size=ps, src_layout=host_layout)
    assert same_bits(restored, device)


def test_host_to_host_between_layouts(copy_impl, gen):
    c, nl, h, d, ps = 2, 3, 2, 3, 4
    a = random_bits(host_shape(Layout.PAGE_FIRST, c, nl, 5, ps, h, d), torch.float16, gen)
    b = random_bits(host_shape(Layout.PAGE_FIRST_DIRECT, c, nl, 6, ps, h, d), torch.float16, gen)
    s, t = torch.tensor([4, 0, 2]), torch.tensor([1, 5, 3])
    expected = naive_transfer(a, Layout.PAGE_FIRST, b, Layout.PAGE_FIRST_DIRECT, s, t, ps, range(nl))
    RUN[copy_impl](a, b, s, t, page_size=ps, src_layout=Layout.PAGE_FIRST, dst_layout=Layout.PAGE_FIRST_DIRECT)
    assert same_bits(b, expected)


def _bad(case):
    ps = 4
    device = torch.zeros(2, 2, 3 * ps, 2, 3)
    host = torch.zeros(2, 5 * ps, 2, 2, 3)
    kw = dict(src=device, dst=host, src_pages=torch.tensor([0, 2]), dst_pages=torch.tensor([4, 1]),
              page_size=ps, dst_layout=Layout.PAGE_FIRST, layer=None)
    match case:
        case "dtype":
            kw["dst"] = host.half()
        case "src-range":
            kw["src_pages"] = torch.tensor([0, 3])
        case "dst-range":
            kw["dst_pages"] = torch.tensor([5, 1])
        case "duplicate-dst":
            kw["dst_pages"] = torch.tensor([1, 1])
        case "length":
            kw["dst_pages"] = torch.tensor([1])
        case "noncontig":
            kw["dst"] = torch.zeros(2, 2, 5 * ps, 2, 3).transpose(1, 2)
        case "row":
            kw["dst"] = torch.zeros(2, 5 * ps, 2, 3, 2)
        case "layers":
            kw["dst"] = torch.zeros(2, 5 * ps, 3, 2, 3)
        case "layer-index":
            kw["layer"] = 2
        case "layout-name":
            kw["dst_layout"] = "row_first"
        case "page-size":
            kw["page_size"] = 5
        case "index-dtype":
            kw["src_pages"] = torch.tensor([0, 2], dtype=torch.int32)
    return kw


@pytest.mark.parametrize("case", ["dtype", "src-range", "dst-range", "duplicate-dst", "length", "noncontig",
                                  "row", "layers", "layer-index", "layout-name", "page-size", "index-dtype"])
def test_bad_input_raises_before_any_copy(copy_impl, case):
    kw = _bad(case)
    dst_before = kw["dst"].clone()
    src, dst = kw.pop("src"), kw.pop("dst")
    src.fill_(1.0)
    with pytest.raises(ValueError):
        RUN[copy_impl](src, dst, kw.pop("src_pages"), kw.pop("dst_pages"), **kw)
    assert torch.equal(dst, dst_before)


def test_repeated_source_pages_fan_out(copy_impl, gen):
    device = random_bits((2, 1, 3 * 4, 1, 8), torch.float32, gen)
    host = torch.zeros(2, 1, 4 * 4, 1, 8)
    RUN[copy_impl](device, host, torch.tensor([2, 2]), torch.tensor([0, 3]), page_size=4)
    assert same_bits(host[:, :, 0:4], device[:, :, 8:12]) and same_bits(host[:, :, 12:16], device[:, :, 8:12])


def test_copy_within_one_pool_needs_disjoint_pages(copy_impl, gen):
    """Compaction inside one pool is legal; reading a page the same copy writes is refused."""
    pool = random_bits((2, 2, 6 * 4, 1, 8), torch.float16, gen)
    expected = naive_transfer(pool, Layout.LAYER_FIRST, pool, Layout.LAYER_FIRST, torch.tensor([5, 4]),
                              torch.tensor([0, 1]), 4, range(2))
    RUN[copy_impl](pool, pool, torch.tensor([5, 4]), torch.tensor([0, 1]), page_size=4)
    assert same_bits(pool, expected)
    with pytest.raises(ValueError, match="intersect"):
        RUN[copy_impl](pool, pool, torch.tensor([2, 3]), torch.tensor([3, 5]), page_size=4)
    with pytest.raises(ValueError, match="overlap"):     # the same bytes seen through another layout
        RUN[copy_impl](pool, pool.view(2, 6 * 4, 2, 1, 8), torch.tensor([0]), torch.tensor([1]), page_size=4,
                  dst_layout=Layout.PAGE_FIRST)


def test_strided_page_lists_are_read_by_value(copy_impl, gen):
    device = random_bits((1, 1, 8 * 2, 1, 4), torch.float32, gen)
    host = torch.zeros(1, 1, 8 * 2, 1, 4)
    src = torch.tensor([7, 0, 3, 0, 5, 0])[::2]       # a strided view: 7, 3, 5
    dst = torch.tensor([[1, 9], [2, 9], [6, 9]])[:, 0]  # 1, 2, 6
    RUN[copy_impl](device, host, src, dst, page_size=2)
    expected = naive_transfer(device, Layout.LAYER_FIRST, torch.zeros_like(host), Layout.LAYER_FIRST,
                              torch.tensor([7, 3, 5]), torch.tensor([1, 2, 6]), 2, range(1))
    assert same_bits(host, expected)
