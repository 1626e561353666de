import pytest
import torch

from hicache.runtime.config import CacheConfig
from hicache.runtime.copy import copy_layer, copy_pages
from hicache.runtime.pools import DevicePool, HostPool, row_bytes


@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
@pytest.mark.parametrize("kind, heads", [("mha", 2), ("mla", 1)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float8_e4m3fn"])
def test_pages_round_trip_through_every_layout(layout, kind, heads, dtype):
    c = CacheConfig(page_size=4, device_pages=5, host_pages=6, layers=3, heads=heads,
                    head_dim=8, kv_kind=kind, dtype=dtype, host_layout=layout)
    dev, host = DevicePool(c), HostPool(c)
    assert dev.page_nbytes == c.kv * c.layers * c.page_size * row_bytes(c)
    g = torch.Generator().manual_seed(0)
    pages = {p: torch.randint(0, 256, (dev.page_nbytes,), dtype=torch.uint8, generator=g)
             for p in (0, 3, 4)}
    for p, data in pages.items():
        dev.write_page(p, data)
    copy_pages(host, [5, 1, 2], dev, [0, 3, 4])
    for s, p in zip([5, 1, 2], [0, 3, 4]):
        assert torch.equal(host.read_page(s), pages[p])
    assert not host.read_page(0).any()                    # untouched slot stays zero
    copy_pages(dev, [1, 2, 0], host, [5, 1, 2])
    for d, p in zip([1, 2, 0], [0, 3, 4]):
        assert torch.equal(dev.read_page(d), pages[p])


def test_copy_layer_moves_only_that_layer():
    c = CacheConfig(page_size=2, device_pages=2, host_pages=2, layers=2, host_layout="page_first")
    dev, host = DevicePool(c), HostPool(c)
    dev.buf.fill_(7)
    copy_layer(host, [1], dev, [0], layer=1)
    assert not host.layer_view(0).any()
    assert (host.layer_view(1)[:, 1] == 7).all() and not host.layer_view(1)[:, 0].any()


def test_typed_view_is_the_model_dtype():
    c = CacheConfig(page_size=2, device_pages=3, heads=2, head_dim=4, dtype="bfloat16")
    dev = DevicePool(c)
    t = dev.typed(0)
    assert t.dtype == torch.bfloat16 and t.shape == (2, 3, 2, 2, 4)
