"""Drive one request through the cache the way a scheduler does, checking bytes."""
from __future__ import annotations

import torch

from runtime_support import stamp
from hicache.runtime.cache import HiCache, Request


def check_prefix(cache: HiCache, req: Request) -> None:
    """Every device page of req's cached prefix holds exactly the bytes written for it (the
    documented order: prefix_pages, which joins to req.loads the loads in flight into the
    prefix; wait on req.loads; prefix_pages again, which leaves out what a load that failed
    was to fill; then read)."""
    cache.prefix_pages(req)
    for op in req.loads:
        op.wait()
    pages = cache.prefix_pages(req)
    nb = cache.device_pool.page_nbytes
    for i, p in enumerate(pages):
        assert torch.equal(cache.device_pool.read_page(p), stamp(req.key, i, nb, cache.cfg.page_size)), \
            f"device page {p} (position {i}) holds wrong bytes"


def compute(cache: HiCache, req: Request) -> bool:
    """Allocate, write and insert the pages after req's prefix. False if no room."""
    check_prefix(cache, req)
    have = len(cache.prefix_pages(req))
    n = len(req.key) // (8 * cache.cfg.page_size)
    pages = cache.alloc(n - have)
    if pages is None:
        return False
    nb = cache.device_pool.page_nbytes
    for i, p in enumerate(pages, start=have):
        cache.device_pool.write_page(p, stamp(req.key, i, nb, cache.cfg.page_size))
    cache.insert(req, pages)
    return True


def serve(cache: HiCache, tokens, storage: bool = False) -> Request:
    req = cache.match(tokens)
    cache.load_back(req)
    if storage and cache.prefetch(req) and cache.finish_prefetch(req):
        cache.load_back(req, _tier="storage")
    assert compute(cache, req)
    cache.finish(req)
    cache.poll()
    return req
