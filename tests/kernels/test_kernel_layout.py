"""Page geometry agrees with the tensors' own indexing, for every layout; bad pools are refused."""
import pytest
import torch

from hicache.kernels.layout import Layout, as_words, describe, page_list, word_bytes

C, L, PAGES, PS, H, D = 2, 3, 5, 4, 3, 7

SHAPES = {
    Layout.LAYER_FIRST: (C, L, PAGES * PS, H, D),
    Layout.PAGE_FIRST: (C, PAGES * PS, L, H, D),
    Layout.PAGE_FIRST_DIRECT: (C, PAGES, L, PS, H, D),
}


def _index(layout: Layout, c: int, l: int, p: int, t: int) -> tuple:
    return {
        Layout.LAYER_FIRST: (c, l, p * PS + t),
        Layout.PAGE_FIRST: (c, p * PS + t, l),
        Layout.PAGE_FIRST_DIRECT: (c, p, l, t),
    }[layout]


@pytest.mark.parametrize("layout", list(Layout))
def test_geometry_addresses_match_tensor_indexing(layout):
    pool = torch.arange(torch.Size(SHAPES[layout]).numel()).reshape(SHAPES[layout])
    g = describe(pool, layout, PS)
    assert (g.components, g.layers, g.pages, g.page_size, g.row) == (C, L, PAGES, PS, H * D)
    flat = pool.reshape(-1)
    for c in range(C):
        for l in range(L):
            for p in range(PAGES):
                for t in range(PS):
                    start = c * g.stride_c + l * g.stride_l + p * g.stride_p + t * g.stride_t
                    expected = pool[_index(layout, c, l, p, t)].reshape(-1)
                    assert torch.equal(flat[start:start + g.row], expected)
    assert g.page_contiguous == (layout is not Layout.PAGE_FIRST)


def test_words_are_the_widest_that_divide_row_and_address():
    t = torch.zeros(4, 6, dtype=torch.float16)           # rows of 12 bytes
    assert word_bytes(12, t) == 4
    assert word_bytes(16, t) == 8
    assert word_bytes(3, t) == 1
    odd = torch.zeros(9, dtype=torch.uint8)[1:]           # address 1 mod 8
    assert word_bytes(8, odd) == 1
    assert as_words(t, 4).dtype == torch.int32 and as_words(t, 4).numel() == 12


@pytest.mark.parametrize("shape,layout,ps,msg", [
    ((C, L, 10, H), Layout.LAYER_FIRST, 4, "5 dimensions"),
    ((C, L, 10, H, D), Layout.LAYER_FIRST, 4, "whole number of pages"),
    ((3, L, 8, H, D), Layout.LAYER_FIRST, 4, "component axis"),
    ((C, 2, L, 8, H, D), Layout.PAGE_FIRST_DIRECT, 4, "page size 8"),
])
def test_bad_pool_shapes_raise(shape, layout, ps, msg):
    with pytest.raises(ValueError, match=msg):
        describe(torch.zeros(shape), layout, ps)


def test_non_contiguous_pool_raises():
    pool = torch.zeros(C, 8, L, H, D).transpose(1, 2)    # a page_first pool seen as layer_first
    with pytest.raises(ValueError, match="contiguous"):
        describe(pool, Layout.LAYER_FIRST, 4)


@pytest.mark.parametrize("ids,unique,msg", [
    (torch.tensor([0, 5]), False, "out of range"),
    (torch.tensor([-1, 2]), False, "out of range"),
    (torch.tensor([1, 1]), True, "duplicate"),
    (torch.tensor([1, 2], dtype=torch.int32), False, "int64"),
    (torch.tensor([[1, 2]]), False, "1-D"),
    ([1, 2], False, "torch.int64 tensor"),
])
def test_bad_page_lists_raise(ids, unique, msg):
    with pytest.raises(ValueError, match=msg):
        page_list(ids, "ids", 5, unique=unique)


def test_repeated_source_pages_are_allowed():
    assert page_list(torch.tensor([3, 3, 0]), "ids", 5, unique=False).tolist() == [3, 3, 0]
