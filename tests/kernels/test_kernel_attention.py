"""Paged attention: Triton matches the torch reference within each dtype's tolerance, and
attention over gathered or restored pages equals attention over the original KV, bit for bit."""
import pytest
import torch

from hicache.kernels import attention, page_gather, transfer
from hicache.kernels.layout import Layout
from kernel_testlib import random_pages

ATTN = {"triton": attention.paged_attention_triton, "torch": attention.paged_attention_torch}
#: (atol, rtol) of Triton vs the torch reference; outputs are averages of values in [-3, 3].
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


def _batch(gen, *, hq, hkv, d, dv, ps, pages, seq_lens, q_lens, dtype):
    k = torch.randn(pages * ps, hkv, d, generator=gen).to(dtype)
    v = torch.randn(pages * ps, hkv, dv, generator=gen).to(dtype)
    need = [-(-s // ps) for s in seq_lens]
    order = random_pages(sum(need), pages, gen)               # disjoint, unsorted pages per request
    table = torch.zeros(len(seq_lens), max(need) + 1, dtype=torch.int64)   # one spare column
    start = 0
    for b, m in enumerate(need):
        table[b, :m] = order[start:start + m]
        start += m
    q = torch.randn(sum(q_lens), hq, d, generator=gen).to(dtype)
    return q, k, v, table, torch.tensor(seq_lens), torch.tensor(q_lens)


# (Hq, Hkv, D, Dv, page_size, pool pages, seq_lens, q_lens)
BATCHES = [
    pytest.param((3, 3, 5, 5, 16, 8, [37, 1, 16], [1, 1, 1]), id="decode-mha-odd"),
    pytest.param((6, 2, 12, 7, 1, 64, [20, 9], [6, 9]), id="extend-gqa-ps1"),
    pytest.param((2, 1, 16, 16, 64, 3, [70, 65], [3, 6]), id="extend-ps64"),
]


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("batch", BATCHES)
def test_triton_matches_reference(gen, dtype, batch):
    pytest.importorskip("triton", reason="triton is not installed; only the torch reference is tested")
    hq, hkv, d, dv, ps, pages, seq_lens, q_lens = batch
    args = _batch(gen, hq=hq, hkv=hkv, d=d, dv=dv, ps=ps, pages=pages, seq_lens=seq_lens, q_lens=q_lens,
                  dtype=dtype)
    got = attention.paged_attention_triton(*args, page_size=ps)
    ref = attention.paged_attention_torch(*args, page_size=ps)
    assert got.dtype == dtype and got.shape == (sum(q_lens), hq, dv)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(got.float(), ref.float(), atol=atol, rtol=rtol)


def test_reference_matches_dense_causal_attention(gen):
    """The paged reference against plain softmax attention over contiguous K/V (independent)."""
    ps, s, n, h, d = 4, 11, 3, 2, 8
    q, k, v, table, seq_lens, q_lens = _batch(gen, hq=h, hkv=h, d=d, dv=d, ps=ps, pages=5, seq_lens=[s],
                                              q_lens=[n], dtype=torch.float32)
    got = attention.paged_attention_torch(q, k, v, table, seq_lens, q_lens, page_size=ps)
    slots = torch.cat([torch.arange(p * ps, (p + 1) * ps) for p in table[0, :3].tolist()])[:s]
    kk, vv = k[slots], v[slots]
    for i in range(n):
        pos = s - n + i
        for hh in range(h):
            w = torch.softmax((kk[:pos + 1, hh] @ q[i, hh]) / d ** 0.5, dim=0)
            torch.testing.assert_close(got[i, hh], w @ vv[:pos + 1, hh], atol=1e-5, rtol=1e-5)


def test_attention_over_gathered_pages_equals_the_original(impl, gen):
    """The CP gather: pages copied into a contiguous scratch, read through an identity table."""
    ps, hq, hkv, d = 16, 4, 2, 6
    q, k, v, table, seq_lens, q_lens = _batch(gen, hq=hq, hkv=hkv, d=d, dv=d, ps=ps, pages=6, seq_lens=[40],
                                              q_lens=[3], dtype=torch.bfloat16)
    pages = table[0, :3].contiguous()
    gather = {"triton": page_gather.gather_pages_triton, "torch": page_gather.gather_pages_torch}[impl]
    k_scratch = gather(k, pages, torch.empty(3 * ps, hkv, d, dtype=k.dtype), page_size=ps)
    v_scratch = gather(v, pages, torch.empty(3 * ps, hkv, d, dtype=v.dtype), page_size=ps)
    identity = torch.arange(3).reshape(1, 3)
    original = ATTN[impl](q, k, v, table, seq_lens, q_lens, page_size=ps)
    gathered = ATTN[impl](q, k_scratch, v_scratch, identity, seq_lens, q_lens, page_size=ps)
    assert torch.equal(gathered, original)


def test_attention_over_restored_pages_equals_the_original(impl, gen):
    """Back up a request's pages to a page_first host pool, restore them to new device pages."""
    ps, c, nl, h, d, pages = 4, 2, 2, 3, 5, 12
    device = torch.randn(c, nl, pages * ps, h, d, generator=gen).half()
    seq, n = 10, 3
    table = torch.tensor([[7, 2, 9]])
    q = torch.randn(n, h, d, generator=gen).half()
    lens = (torch.tensor([seq]), torch.tensor([n]))
    move = {"triton": transfer.transfer_pages_triton, "torch": transfer.transfer_pages_torch}[impl]
    host = torch.zeros(c, 8 * ps, nl, h, d, dtype=torch.half)
    host_pages = torch.tensor([5, 0, 3])
    move(device, host, table[0], host_pages, page_size=ps, dst_layout=Layout.PAGE_FIRST)
    new_pages = torch.tensor([1, 11, 4])
    fresh = torch.zeros_like(device)
    for layer in range(nl):                                  # per-layer load-back, as the forward pass waits
        move(host, fresh, host_pages, new_pages, page_size=ps, src_layout=Layout.PAGE_FIRST, layer=layer)
    for layer in range(nl):
        before = ATTN[impl](q, device[0, layer], device[1, layer], table, *lens, page_size=ps)
        after = ATTN[impl](q, fresh[0, layer], fresh[1, layer], new_pages.reshape(1, 3), *lens, page_size=ps)
        assert torch.equal(after, before)


@pytest.mark.parametrize("case,msg", [
    ("q-len", "q_len"), ("pages", "page_table has"), ("page-range", "out of range"), ("heads", "multiple"),
    ("dtype", "dtypes differ"), ("tokens", "q has"), ("fp8", "fp32/fp16/bf16"),
])
def test_bad_batches_raise(impl, case, msg):
    ps = 4
    q, k, v = torch.zeros(2, 4, 8), torch.zeros(16, 2, 8), torch.zeros(16, 2, 8)
    table, seq_lens, q_lens = torch.tensor([[0, 1]]), torch.tensor([7]), torch.tensor([2])
    if case == "q-len":
        q_lens, q = torch.tensor([8]), torch.zeros(8, 4, 8)
    elif case == "pages":
        seq_lens = torch.tensor([9])
    elif case == "page-range":
        table = torch.tensor([[0, 4]])
    elif case == "heads":
        q = torch.zeros(2, 3, 8)
    elif case == "dtype":
        k = k.half()
    elif case == "tokens":
        q = torch.zeros(3, 4, 8)
    elif case == "fp8":
        q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    with pytest.raises(ValueError, match=msg):
        ATTN[impl](q, k, v, table, seq_lens, q_lens, page_size=ps)
