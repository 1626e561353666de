"""Page gather/scatter: Triton, torch and native equal a page-by-page copy, bit for bit; bad input raises."""
import pytest
import torch

from hicache.kernels import page_gather
from kernel_testlib import COPY_DTYPES, random_bits, random_pages, same_bits

GATHER = {"triton": page_gather.gather_pages_triton, "torch": page_gather.gather_pages_torch,
          "native": page_gather.gather_pages_native}
SCATTER = {"triton": page_gather.scatter_pages_triton, "torch": page_gather.scatter_pages_torch,
           "native": page_gather.scatter_pages_native}

# (page_size, pages in pool, pages moved, row shape): 1 page, page sizes 1/16/64, odd H and D,
# an MLA-shaped row [1, D_latent].
CASES = [
    (1, 9, 5, (3, 5)),
    (16, 7, 1, (5, 3)),
    (16, 6, 4, (1, 18)),
    (64, 3, 2, (3, 5)),
]


def _expected_gather(pool, ids, ps):
    return torch.cat([pool[p * ps:(p + 1) * ps] for p in ids.tolist()]) if ids.numel() else pool[:0]


@pytest.mark.parametrize("dtype", COPY_DTYPES, ids=str)
@pytest.mark.parametrize("ps,pages,n,row", CASES)
def test_gather_then_scatter_moves_exactly_the_listed_pages(copy_impl, gen, dtype, ps, pages, n, row):
    pool = random_bits((pages * ps, *row), dtype, gen)
    ids = random_pages(n, pages, gen)
    out = random_bits((n * ps, *row), dtype, gen)
    assert GATHER[copy_impl](pool, ids, out, page_size=ps) is out
    assert same_bits(out, _expected_gather(pool, ids, ps))

    # Scatter fresh data back to other pages: exactly those pages change, each to its row block.
    dst_ids = random_pages(n, pages, gen)
    src = random_bits((n * ps, *row), dtype, gen)
    before = pool.clone()
    SCATTER[copy_impl](src, pool, dst_ids, page_size=ps)
    expected = before.clone()
    for i, p in enumerate(dst_ids.tolist()):
        expected[p * ps:(p + 1) * ps] = src[i * ps:(i + 1) * ps]
    assert same_bits(pool, expected)


def test_gather_allows_repeated_pages_and_a_slice_of_scratch(copy_impl, gen):
    ps, row = 4, (3, 5)
    pool = random_bits((5 * ps, *row), torch.float16, gen)
    scratch = torch.zeros(6 * ps, *row, dtype=torch.float16)       # [gathered | trash]
    ids = torch.tensor([2, 2, 0])
    GATHER[copy_impl](pool, ids, scratch[:3 * ps], page_size=ps)
    assert same_bits(scratch[:3 * ps], _expected_gather(pool, ids, ps))
    assert torch.count_nonzero(scratch[3 * ps:]) == 0


def test_empty_page_list_is_a_no_op(copy_impl):
    pool = torch.ones(8, 2, 3)
    GATHER[copy_impl](pool, torch.zeros(0, dtype=torch.int64), torch.empty(0, 2, 3), page_size=4)
    SCATTER[copy_impl](torch.empty(0, 2, 3), pool, torch.zeros(0, dtype=torch.int64), page_size=4)
    assert torch.equal(pool, torch.ones(8, 2, 3))


@pytest.mark.parametrize("case", ["dtype", "range", "negative", "duplicate", "noncontig", "rows", "shape"])
def test_bad_input_raises_before_any_copy(copy_impl, case):
    ps = 4
    pool = torch.arange(8 * ps * 6, dtype=torch.float32).reshape(8 * ps, 2, 3)
    ids = torch.tensor([1, 3])
    buf = torch.zeros(2 * ps, 2, 3)
    kwargs = dict(src=buf, pool=pool, ids=ids)
    if case == "dtype":
        kwargs["src"] = buf.half()
    elif case == "range":
        kwargs["ids"] = torch.tensor([1, 8])
    elif case == "negative":
        kwargs["ids"] = torch.tensor([-1, 3])
    elif case == "duplicate":
        kwargs["ids"] = torch.tensor([3, 3])
    elif case == "noncontig":
        kwargs["src"] = torch.zeros(2 * ps, 3, 2).transpose(1, 2)
    elif case == "rows":
        kwargs["src"] = torch.zeros(3 * ps, 2, 3)
    elif case == "shape":
        kwargs["src"] = torch.zeros(2 * ps, 3, 2)
    before = pool.clone()
    with pytest.raises(ValueError):
        SCATTER[copy_impl](kwargs["src"], kwargs["pool"], kwargs["ids"], page_size=ps)
    assert torch.equal(pool, before)
    if case != "duplicate":     # repeats are legal for a gather's source pages
        with pytest.raises(ValueError):
            GATHER[copy_impl](kwargs["pool"], kwargs["ids"], kwargs["src"], page_size=ps)


def test_gather_of_a_non_contiguous_pool_raises(copy_impl):
    pool = torch.zeros(2, 16, 2, 3)[:, :8].reshape(2, 8, 2, 3)[0].transpose(0, 1)
    with pytest.raises(ValueError, match="contiguous"):
        GATHER[copy_impl](pool, torch.tensor([0]), torch.zeros(4, 8, 3), page_size=4)


def test_gather_allocates_the_scratch_when_not_given(copy_impl, gen):
    pool = random_bits((6 * 16, 3, 5), torch.bfloat16, gen)
    ids = torch.tensor([4, 1])
    out = GATHER[copy_impl](pool, ids, page_size=16)
    assert out.shape == (32, 3, 5) and out.dtype == torch.bfloat16
    assert same_bits(out, _expected_gather(pool, ids, 16))
