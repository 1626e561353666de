"""Seeded random workloads that drive a real single-engine cache (metadata-only KV).

Used by the bugzoo (the same workload with and without a fault), the clean-run sweep (no
false alarms) and `hicache bench monitors` (the same replay with verify off/sample/strict).
Requests share prefixes (a few families of page strings), so the radix tree splits,
host copies are reused, storage prefetches hit, and devices evict.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from hicache.storage.base import StorageBackend


class MemStore(StorageBackend):
    """A dict-backed storage backend (deterministic, in process)."""

    def __init__(self) -> None:
        self.data: dict = {}

    def batch_exists(self, keys: Sequence[str]) -> int:
        n = 0
        for k in keys:
            if k not in self.data:
                break
            n += 1
        return n

    def batch_get(self, keys: Sequence[str]):
        return [self.data.get(k) for k in keys]

    def batch_set(self, keys: Sequence[str], values) -> list[bool]:
        for k, v in zip(keys, values):
            self.data[k] = v
        return [True] * len(keys)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    requests: int = 40
    page_size: int = 2
    device_pages: int = 10
    host_pages: int = 24
    families: int = 3           # distinct prefix families
    max_pages: int = 6          # pages per request (at most)
    abort_rate: float = 0.1
    prefetch_rate: float = 0.5
    storage: bool = True

    def __post_init__(self) -> None:
        for name in ("requests", "page_size", "device_pages", "host_pages", "families", "max_pages"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive")
        if self.max_pages > self.device_pages:
            raise ValueError("max_pages: must not exceed device_pages")


def make_cache(wcfg: WorkloadConfig, policy: str, cls=None, bus=None, prefetch_policy: str = "best_effort"):
    from hicache.runtime.cache import HiCache
    from hicache.runtime.config import CacheConfig
    cls = cls or HiCache
    cfg = CacheConfig(page_size=wcfg.page_size, device_pages=wcfg.device_pages, host_pages=wcfg.host_pages,
                      layers=2, heads=1, head_dim=2, metadata_only=True, write_policy=policy,
                      prefetch_policy=prefetch_policy)
    return cls(cfg, storage=MemStore() if wcfg.storage else None, bus=bus)


def own_cache(wcfg: WorkloadConfig, policy: str, **kw):
    """`make_cache` unmonitored, so that the caller's own monitors alone watch it, whatever
    verify mode the process runs in (a sample-mode process's monitor would see a fault first
    and report it by its own checks and trace)."""
    from hicache.monitors.attach import unmonitored
    with unmonitored():
        return make_cache(wcfg, policy, **kw)


def plan(seed: int, wcfg: WorkloadConfig) -> tuple[str, list[tuple[list[int], str]]]:
    """The write policy and [(tokens, what)] of a seeded workload; what: finish | abort."""
    rng = random.Random(seed)
    policy = rng.choice(["write_through", "write_through_selective", "write_back"])
    ps = wcfg.page_size
    fams = [[rng.randrange(1, 1000) for _ in range(wcfg.max_pages * ps)] for _ in range(wcfg.families)]
    out = []
    for _ in range(wcfg.requests):
        f = rng.choice(fams)
        pages = rng.randint(1, wcfg.max_pages)
        toks = list(f[:pages * ps])
        if rng.random() < 0.3:   # a divergent tail: the tree splits
            toks[-1] = rng.randrange(1000, 2000)
        what = "abort" if rng.random() < wcfg.abort_rate else "finish"
        if rng.random() < wcfg.prefetch_rate:
            what += "+prefetch"
        out.append((toks, what))
    return policy, out


def serve_one(cache, tokens: list[int], what: str, on_step: Callable[[], None] | None = None,
              poll: bool = True) -> None:
    """One request the way a scheduler serves it (metadata-only: no KV bytes); `poll`: apply
    the copies' acks that are ready at its end (else they wait for a later poll, their ops
    still holding their nodes while the next requests split them)."""
    req = cache.match(tokens)
    cache.load_back(req)
    if "prefetch" in what and cache.prefetch(req):
        if "abort" in what:
            cache.abort(req)
            return
        if cache.finish_prefetch(req):
            cache.load_back(req, _tier="storage")
    if what.startswith("abort"):
        cache.abort(req)
        return
    for op in req.loads:
        op.wait()
    have = len(cache.prefix_pages(req))
    n = len(req.key) // cache.tree.pb
    if n > have:
        pages = cache.alloc(n - have)
        if pages is None:
            cache.abort(req)
            return
        cache.insert(req, pages)
    cache.finish(req)
    if poll:
        cache.poll()
    if on_step is not None:
        on_step()


def run_workload(cache, requests, on_request: Callable[[int], None] | None = None, drain_every: int = 1) -> None:
    """The requests in order, the cache drained after every `drain_every`-th (1: each runs on
    a quiet cache; more: acks are applied only then, so copies and load-backs stay attached
    to their nodes across the next requests' matches and inserts)."""
    if drain_every < 1:
        raise ValueError(f"drain_every: must be >= 1, got {drain_every}")
    for i, (toks, what) in enumerate(requests):
        serve_one(cache, toks, what, poll=drain_every == 1)
        if (i + 1) % drain_every == 0:
            cache.drain()
        if on_request is not None:
            on_request(i)
    cache.close()       # (drains what is still in flight)


class EveryNth:
    """`fn` failing on every n-th call (a RuntimeError, counted in `raised`): a copy or a
    backend call that fails now and then, each a miss the cache counts. Calls are counted
    on whichever thread makes them, in the order the workload makes them."""

    def __init__(self, fn, n: int, what: str) -> None:
        self.fn, self.n, self.what, self.calls, self.raised = fn, n, what, 0, 0

    def __call__(self, *a):
        self.calls += 1
        if self.calls % self.n == 0:
            self.raised += 1
            raise RuntimeError(f"{self.what} failed (injected)")
        return self.fn(*a)


def failing_loads(cache, every: int = 1) -> list[int]:
    """Every `every`-th load-back started from here on fails at its second layer (its first
    landed: a copy kernel's failure, a miss the cache counts); returns the count of
    load-backs started, kept up to date."""
    layer_fn, started = cache._load_layer_fn, [0]

    def fn(op):
        copy = layer_fn(op)
        started[0] += 1
        bad = started[0] % every == 0

        def layer(i):
            if bad and i == 1:
                raise RuntimeError("copy kernel failed (injected)")
            copy(i)
        return layer
    cache._load_layer_fn = fn
    return started


def failing_copies(cache, loads: int = 3, backups: int = 4, stores: int = 5) -> tuple[EveryNth, EveryNth | None]:
    """Copies of `cache` that fail now and then (faults the cache must turn into counted
    misses, never wrong data nor a hang): every `loads`-th load-back at its second layer,
    every `backups`-th device->host copy, every `stores`-th storage write. Returns the
    backup and storage wrappers (their `raised` counts; None without storage)."""
    failing_loads(cache, every=loads)
    cache._copy_to_host = backup = EveryNth(cache._copy_to_host, backups, "backup copy")
    store = None
    if cache.storage is not None:
        cache.storage.batch_set = store = EveryNth(cache.storage.batch_set, stores, "storage write")
    return backup, store
